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
	double e1, e2;

	test_args(argc, argv);

	CHECK_BLAS(cublasCreate(&h));
	e1 = run(h, false, 512, 384, 256);
	e2 = run(h, true, 384, 512, 256);
	CHECK_BLAS(cublasDestroy(h));
	printf("cublasSgemm relative error: NN %.3g, TN %.3g\n", e1, e2);
	REQUIRE_RESULT(e1 < 1e-4 && e2 < 1e-4, "relative error %g / %g is 1e-4 or more", e1, e2);
	test_pass("cublas_sgemm");
	return 0;
}
