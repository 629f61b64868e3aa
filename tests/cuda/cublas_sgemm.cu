/* cublas_sgemm: cuBLAS in the guest (its kernels reach the GPU through
 * libcuda), checked against a CPU reference in double precision. Results are
 * checked on a GPU only (tools/gpu-check): the sim backend has no CPU cuBLAS
 * kernels, so CI runs it with --calls-only under ternd --sim-missing-kernels
 * skip (check.h). */
#include "check.h"
#include "check_blas.h"

#include <math.h>
#include <vector>

static unsigned long long rng = 0x243f6a8885a308d3ull;

/* C = alpha op(A) B + beta C, column-major, op(A) is m x k. Returns the
 * relative Frobenius error of the GPU result. */
static double run(cublasHandle_t h, bool trans_a, int m, int n, int k)
{
	int lda = trans_a ? k : m;
	std::vector<float> a((size_t)m * k), b((size_t)k * n), c((size_t)m * n), out(c.size());
	float alpha = 1.5f, beta = 0.5f;
	float *da, *db, *dc;

	test_fill(a, &rng);
	test_fill(b, &rng);
	test_fill(c, &rng);
	CHECK(cudaMalloc(&da, a.size() * sizeof(float)));
	CHECK(cudaMalloc(&db, b.size() * sizeof(float)));
	CHECK(cudaMalloc(&dc, c.size() * sizeof(float)));
	CHECK_BLAS(cublasSetMatrix(lda, trans_a ? m : k, sizeof(float), a.data(), lda, da, lda));
	CHECK_BLAS(cublasSetMatrix(k, n, sizeof(float), b.data(), k, db, k));
	CHECK_BLAS(cublasSetMatrix(m, n, sizeof(float), c.data(), m, dc, m));
	CHECK_BLAS(cublasSgemm(h, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, m, n, k,
			       &alpha, da, lda, db, k, &beta, dc, m));
	CHECK(cudaDeviceSynchronize());
	CHECK_BLAS(cublasGetMatrix(m, n, sizeof(float), dc, m, out.data(), m));

	double num = 0, den = 0;
	for (int j = 0; j < n; j++) {
		for (int i = 0; i < m; i++) {
			double s = 0;

			for (int p = 0; p < k; p++) {
				double av = trans_a ? a[(size_t)i * lda + p] : a[(size_t)p * lda + i];

				s += av * b[(size_t)j * k + p];
			}
			double ref = alpha * s + beta * (double)c[(size_t)j * m + i];
			double diff = (double)out[(size_t)j * m + i] - ref;

			num += diff * diff;
			den += ref * ref;
		}
	}
	CHECK(cudaFree(da));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dc));
	return sqrt(num / den);
}

int main(int argc, char **argv)
{
	cublasHandle_t h;
	cudaStream_t s;
	double e1, e2, e3, e4;

	test_args(argc, argv);

	CHECK_BLAS(cublasCreate(&h));
	e1 = run(h, false, 512, 384, 256);
	e2 = run(h, true, 384, 512, 256);
	/* Square sizes make cuBLAS key a workspace by its stream (export table
	 * 21318c60 slots 51 and 39): on the default stream and on one of ours. */
	e3 = run(h, false, 256, 256, 256);
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK_BLAS(cublasSetStream(h, s));
	e4 = run(h, false, 512, 512, 512);
	CHECK_BLAS(cublasDestroy(h));
	CHECK(cudaStreamDestroy(s));
	printf("cublasSgemm relative error: NN %.3g, TN %.3g, 256^3 %.3g, 512^3 on a stream %.3g\n",
	       e1, e2, e3, e4);
	REQUIRE_RESULT(e1 < 1e-4 && e2 < 1e-4 && e3 < 1e-4 && e4 < 1e-4,
		       "a relative error is 1e-4 or more");
	test_pass("cublas_sgemm");
	return 0;
}
