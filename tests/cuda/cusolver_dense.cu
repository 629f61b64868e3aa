/* cusolver_dense: cuSOLVER's dense API in the guest, each result checked on
 * the CPU in double precision: an LU solve (getrf + getrs) and a Cholesky
 * solve (potrf + potrs) by their residual |A x - b| / (|A| |x|), and a
 * symmetric eigendecomposition (syevd) by |A V - V diag(w)| / |A| and |V^T V
 * - I|. Results are checked on a GPU only (tools/gpu-check): the sim backend
 * has no CPU cuSOLVER kernels, so CI runs it with --calls-only under ternd
 * --sim-missing-kernels skip (check.h). */
#include "check.h"

#include <cusolverDn.h>
#include <math.h>
#include <vector>

#define CHECK_SOLVER(call) CHECK_LIB("cuSOLVER", call)

/* Backward-stable double precision factorisations of n = 256 leave residuals
 * near n * 1e-16; 1e-11 leaves room for the condition of random matrices. */
#define TOLERANCE 1e-11

static unsigned long long rng = 0x082efa98ec4e6c89ull;

static double rnd(void)
{
	return test_rnd(&rng);
}

/* Column-major n x n. */
static double fro(const std::vector<double> &m)
{
	double s = 0;

	for (double v : m)
		s += v * v;
	return sqrt(s);
}

static int info_of(const int *dinfo)
{
	int info = -1;

	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(&info, dinfo, sizeof(int), cudaMemcpyDeviceToHost));
	return info;
}

/* |A X - B| / (|A| |X|) for n x nrhs X and B. */
static double residual(const std::vector<double> &a, const std::vector<double> &x,
		       const std::vector<double> &b, int n, int nrhs)
{
	std::vector<double> r(b.size());

	for (int j = 0; j < nrhs; j++)
		for (int i = 0; i < n; i++) {
			double s = 0;

			for (int k = 0; k < n; k++)
				s += a[(size_t)k * n + i] * x[(size_t)j * n + k];
			r[(size_t)j * n + i] = s - b[(size_t)j * n + i];
		}
	return fro(r) / (fro(a) * fro(x));
}

static double lu_solve(cusolverDnHandle_t h, int n, int nrhs)
{
	std::vector<double> a((size_t)n * n), b((size_t)n * nrhs);
	int lwork = 0, *dpiv, *dinfo;
	double *work;

	test_fill(a, &rng);
	test_fill(b, &rng);
	double *da = test_to_device(a), *db = test_to_device(b);

	CHECK(cudaMalloc(&dpiv, n * sizeof(int)));
	CHECK(cudaMalloc(&dinfo, sizeof(int)));
	CHECK_SOLVER(cusolverDnDgetrf_bufferSize(h, n, n, da, n, &lwork));
	CHECK(cudaMalloc(&work, (size_t)lwork * sizeof(double)));
	CHECK_SOLVER(cusolverDnDgetrf(h, n, n, da, n, work, dpiv, dinfo));
	REQUIRE_RESULT(info_of(dinfo) == 0, "getrf info %d", info_of(dinfo));
	CHECK_SOLVER(cusolverDnDgetrs(h, CUBLAS_OP_N, n, nrhs, da, n, dpiv, db, n, dinfo));
	REQUIRE_RESULT(info_of(dinfo) == 0, "getrs info %d", info_of(dinfo));
	std::vector<double> x = test_from_device(db, b.size());
	CHECK(cudaFree(da));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dpiv));
	CHECK(cudaFree(dinfo));
	CHECK(cudaFree(work));
	return residual(a, x, b, n, nrhs);
}

/* A symmetric positive definite matrix: M M^T + n I. */
static std::vector<double> spd(int n)
{
	std::vector<double> m((size_t)n * n), a((size_t)n * n);

	test_fill(m, &rng);
	for (int j = 0; j < n; j++)
		for (int i = 0; i < n; i++) {
			double s = i == j ? n : 0.0;

			for (int k = 0; k < n; k++)
				s += m[(size_t)k * n + i] * m[(size_t)k * n + j];
			a[(size_t)j * n + i] = s;
		}
	return a;
}

static double cholesky_solve(cusolverDnHandle_t h, int n, int nrhs)
{
	std::vector<double> a = spd(n), b((size_t)n * nrhs);
	int lwork = 0, *dinfo;
	double *work;

	test_fill(b, &rng);
	double *da = test_to_device(a), *db = test_to_device(b);

	CHECK(cudaMalloc(&dinfo, sizeof(int)));
	CHECK_SOLVER(cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, da, n, &lwork));
	CHECK(cudaMalloc(&work, (size_t)lwork * sizeof(double)));
	CHECK_SOLVER(cusolverDnDpotrf(h, CUBLAS_FILL_MODE_LOWER, n, da, n, work, lwork, dinfo));
	REQUIRE_RESULT(info_of(dinfo) == 0, "potrf info %d", info_of(dinfo));
	CHECK_SOLVER(cusolverDnDpotrs(h, CUBLAS_FILL_MODE_LOWER, n, nrhs, da, n, db, n, dinfo));
	REQUIRE_RESULT(info_of(dinfo) == 0, "potrs info %d", info_of(dinfo));
	std::vector<double> x = test_from_device(db, b.size());
	CHECK(cudaFree(da));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dinfo));
	CHECK(cudaFree(work));
	return residual(a, x, b, n, nrhs);
}

static void eigen(cusolverDnHandle_t h, int n, double *decomp, double *orth)
{
	std::vector<double> a((size_t)n * n);
	int lwork = 0, *dinfo;
	double *work, *dw;

	for (int j = 0; j < n; j++)
		for (int i = 0; i <= j; i++)
			a[(size_t)j * n + i] = a[(size_t)i * n + j] = rnd();
	double *da = test_to_device(a);

	CHECK(cudaMalloc(&dw, n * sizeof(double)));
	CHECK(cudaMalloc(&dinfo, sizeof(int)));
	CHECK_SOLVER(cusolverDnDsyevd_bufferSize(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER,
						 n, da, n, dw, &lwork));
	CHECK(cudaMalloc(&work, (size_t)lwork * sizeof(double)));
	CHECK_SOLVER(cusolverDnDsyevd(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n, da, n,
				      dw, work, lwork, dinfo));
	REQUIRE_RESULT(info_of(dinfo) == 0, "syevd info %d", info_of(dinfo));
	std::vector<double> v = test_from_device(da, a.size()), w = test_from_device(dw, n);
	std::vector<double> r(a.size()), o(a.size());

	for (int j = 0; j < n; j++) {
		REQUIRE_RESULT(j == 0 || w[j - 1] <= w[j], "eigenvalues not ascending at %d", j);
		for (int i = 0; i < n; i++) {
			double av = 0, vv = 0;

			for (int k = 0; k < n; k++) {
				av += a[(size_t)k * n + i] * v[(size_t)j * n + k];
				vv += v[(size_t)i * n + k] * v[(size_t)j * n + k];
			}
			r[(size_t)j * n + i] = av - v[(size_t)j * n + i] * w[j];
			o[(size_t)j * n + i] = vv - (i == j);
		}
	}
	*decomp = fro(r) / fro(a);
	*orth = fro(o) / sqrt((double)n);
	CHECK(cudaFree(da));
	CHECK(cudaFree(dw));
	CHECK(cudaFree(dinfo));
	CHECK(cudaFree(work));
}

int main(int argc, char **argv)
{
	cusolverDnHandle_t h;
	cudaStream_t s;
	double lu, chol, dec, orth;
	int version = 0;

	test_args(argc, argv);

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK_SOLVER(cusolverGetVersion(&version));
	CHECK_SOLVER(cusolverDnCreate(&h));
	CHECK_SOLVER(cusolverDnSetStream(h, s));
	lu = lu_solve(h, 256, 4);
	chol = cholesky_solve(h, 200, 3);
	eigen(h, 128, &dec, &orth);
	CHECK_SOLVER(cusolverDnDestroy(h));
	CHECK(cudaStreamDestroy(s));
	printf("cuSOLVER %d: LU residual %.3g, Cholesky residual %.3g, syevd |AV-VW|/|A| %.3g, "
	       "|V'V-I| %.3g (tolerance %g)\n", version, lu, chol, dec, orth, TOLERANCE);
	REQUIRE_RESULT(lu < TOLERANCE && chol < TOLERANCE && dec < TOLERANCE && orth < TOLERANCE,
		"an error is %g or more", TOLERANCE);
	test_pass("cusolver_dense");
	return 0;
}
