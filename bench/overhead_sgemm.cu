/* overhead_sgemm: bench/overhead's cuBLAS loop. For each size N, a
 * repetition is a loop of SGEMMs C = A B (N x N, column-major) and one
 * synchronisation; the value is microseconds per SGEMM.
 *
 *   overhead_sgemm [--sizes 256,512,...] [--reps N]
 *
 * A and B hold multiples of 1/8 in [-1, 1] (exact in FP32 and in TF32), so
 * every partial sum is a multiple of 1/64 below N in magnitude, exact in FP32
 * for any N up to 2^18: the result must equal the host's in any summation
 * order. After each
 * repetition 64 entries of C are compared with a host dot product. Runs only
 * on a GPU (the sim backend has no CPU versions of cuBLAS's kernels). */
#include "overhead.h"
#include "check_blas.h"

static float entry(size_t i, unsigned seed)
{
	unsigned x = (unsigned)i * 2654435761u ^ seed;

	return (float)((int)((x ^ (x >> 15)) % 17u) - 8) / 8.0f;
}

static void run_size(cublasHandle_t h, int n, int reps)
{
	size_t elems = (size_t)n * n;
	std::vector<float> a(elems), b(elems), c(elems);
	/* About 2^33 flops per repetition: long enough to time, short enough for 4096. */
	long iters = std::min(1000L, std::max(4L, (long)((1ull << 33) / ((unsigned long long)n * n * n))));
	const float one = 1.0f, zero = 0.0f;
	float *da, *db, *dc;
	char metric[32];

	for (size_t i = 0; i < elems; i++) {
		a[i] = entry(i, 0xa11u);
		b[i] = entry(i, 0xb22u);
	}
	CHECK(cudaMalloc(&da, elems * sizeof(float)));
	CHECK(cudaMalloc(&db, elems * sizeof(float)));
	CHECK(cudaMalloc(&dc, elems * sizeof(float)));
	CHECK(cudaMemcpy(da, a.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(db, b.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
	snprintf(metric, sizeof(metric), "sgemm_%d", n);
	measure(metric, "us/gemm", reps, [&](int r) {
		double t0, us;

		CHECK(cudaMemset(dc, 0xff, elems * sizeof(float)));   /* NaNs: stale C fails */
		CHECK(cudaDeviceSynchronize());
		t0 = now();
		for (long i = 0; i < iters; i++)
			CHECK_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db,
					       n, &zero, dc, n));
		CHECK(cudaDeviceSynchronize());
		us = (now() - t0) / (double)iters * 1e6;
		CHECK(cudaMemcpy(c.data(), dc, elems * sizeof(float), cudaMemcpyDeviceToHost));
		for (int s = 0; s < 64; s++) {
			int row = (int)(((unsigned)(s + r * 64) * 2654435761u) % (unsigned)n);
			int col = (int)(((unsigned)(s + r * 64) * 40503u + 7u) % (unsigned)n);
			double want = 0;

			for (int k = 0; k < n; k++)
				want += (double)a[row + (size_t)k * n] * b[k + (size_t)col * n];
			REQUIRE(c[row + (size_t)col * n] == (float)want,
				"sgemm %d: C[%d,%d] = %.9g, expected %.9g", n, row, col,
				c[row + (size_t)col * n], want);
		}
		return us;
	});
	CHECK(cudaFree(dc));
	CHECK(cudaFree(db));
	CHECK(cudaFree(da));
}

int main(int argc, char **argv)
{
	const char *sizes = "256,512,1024,2048,4096";
	int reps = 5;
	cublasHandle_t h;

	for (int i = 1; i < argc; i += 2) {
		if (i + 1 < argc && !strcmp(argv[i], "--sizes")) {
			sizes = argv[i + 1];
		} else if (i + 1 < argc && !strcmp(argv[i], "--reps")) {
			reps = atoi(argv[i + 1]);
		} else {
			fprintf(stderr, "usage: overhead_sgemm [--sizes 256,512,...] [--reps N]\n");
			return 2;
		}
	}
	REQUIRE(reps > 0 && reps <= 1000, "--reps must be 1..1000");
	CHECK_BLAS(cublasCreate(&h));
	for (const char *p = sizes; *p;) {
		char *end;
		long n = strtol(p, &end, 10);

		REQUIRE(end != p && n >= 16 && n <= 16384 && (*end == ',' || !*end),
			"bad size list %s", sizes);
		run_size(h, (int)n, reps);
		p = *end ? end + 1 : end;
	}
	CHECK_BLAS(cublasDestroy(h));
	printf("PASS overhead_sgemm\n");
	return 0;
}
