/* cusparse_spmv: cuSPARSE's generic API in the guest, checked against a CPU
 * reference: y = alpha A x + beta y (SpMV) and C = alpha A B + beta C (SpMM)
 * for a random CSR matrix in double precision, and the same SpMV in single
 * precision. Results are checked on a GPU only (tools/gpu-check): the sim
 * backend has no CPU cuSPARSE kernels, so CI runs it with --calls-only under
 * ternd --sim-missing-kernels skip (check.h). */
#include "check.h"

#include <cusparse.h>
#include <math.h>
#include <vector>

#define CHECK_SPARSE(call) CHECK_LIB("cuSPARSE", call)

/* Relative errors: rounding in the order of the sums only. */
#define TOL_DOUBLE 1e-12
#define TOL_FLOAT 1e-5

static unsigned long long rng = 0xa4093822299f31d0ull;

/* 24 random bits. */
static unsigned rnd_u(void)
{
	return (unsigned)((test_rnd(&rng) + 1.0) * 0x800000);
}

static double rnd(void)
{
	return test_rnd(&rng);
}

struct csr {
	int rows, cols;
	std::vector<int> ptr, idx;
	std::vector<double> val;
};

/* About @per_row nonzeros a row, at distinct sorted columns. */
static csr csr_random(int rows, int cols, int per_row)
{
	csr a;

	a.rows = rows;
	a.cols = cols;
	a.ptr.push_back(0);
	for (int r = 0; r < rows; r++) {
		int c = (int)(rnd_u() % (unsigned)(cols / per_row));

		while (c < cols) {
			a.idx.push_back(c);
			a.val.push_back(rnd());
			c += 1 + (int)(rnd_u() % (unsigned)(2 * cols / per_row));
		}
		a.ptr.push_back((int)a.idx.size());
	}
	return a;
}

static double rel_err(const std::vector<double> &got, const std::vector<double> &ref)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < ref.size(); i++) {
		num += (got[i] - ref[i]) * (got[i] - ref[i]);
		den += ref[i] * ref[i];
	}
	return sqrt(num / den);
}

/* SpMV in type T (double or float), the reference in double. */
template <class T> static double spmv(cusparseHandle_t h, const csr &a, cudaDataType dt)
{
	std::vector<T> val(a.val.begin(), a.val.end()), x(a.cols), y(a.rows);
	std::vector<double> ref(a.rows);
	T alpha = (T)1.25, beta = (T)-0.5;
	cusparseSpMatDescr_t ma;
	cusparseDnVecDescr_t vx, vy;
	size_t bytes = 0;
	void *work = NULL;

	test_fill(x, &rng);
	test_fill(y, &rng);
	for (int r = 0; r < a.rows; r++) {
		double s = 0;

		for (int k = a.ptr[r]; k < a.ptr[r + 1]; k++)
			s += (double)val[k] * (double)x[a.idx[k]];
		ref[r] = (double)alpha * s + (double)beta * (double)y[r];
	}
	int *dptr = test_to_device(a.ptr), *didx = test_to_device(a.idx);
	T *dval = test_to_device(val), *dx = test_to_device(x), *dy = test_to_device(y);

	CHECK_SPARSE(cusparseCreateCsr(&ma, a.rows, a.cols, (int64_t)a.val.size(), dptr, didx, dval,
				       CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
				       CUSPARSE_INDEX_BASE_ZERO, dt));
	CHECK_SPARSE(cusparseCreateDnVec(&vx, a.cols, dx, dt));
	CHECK_SPARSE(cusparseCreateDnVec(&vy, a.rows, dy, dt));
	CHECK_SPARSE(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, ma, vx,
					     &beta, vy, dt, CUSPARSE_SPMV_ALG_DEFAULT, &bytes));
	if (bytes)
		CHECK(cudaMalloc(&work, bytes));
	CHECK_SPARSE(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, ma, vx, &beta, vy, dt,
				  CUSPARSE_SPMV_ALG_DEFAULT, work));
	std::vector<T> got = test_from_device(dy, y.size());
	CHECK_SPARSE(cusparseDestroySpMat(ma));
	CHECK_SPARSE(cusparseDestroyDnVec(vx));
	CHECK_SPARSE(cusparseDestroyDnVec(vy));
	CHECK(cudaFree(work));
	CHECK(cudaFree(dptr));
	CHECK(cudaFree(didx));
	CHECK(cudaFree(dval));
	CHECK(cudaFree(dx));
	CHECK(cudaFree(dy));
	return rel_err(std::vector<double>(got.begin(), got.end()), ref);
}

/* SpMM, double: C (rows x n, column-major) = alpha A B + beta C. */
static double spmm(cusparseHandle_t h, const csr &a, int n)
{
	std::vector<double> b((size_t)a.cols * n), c((size_t)a.rows * n), ref(c.size());
	double alpha = -0.75, beta = 2.0;
	cusparseSpMatDescr_t ma;
	cusparseDnMatDescr_t mb, mc;
	size_t bytes = 0;
	void *work = NULL;

	test_fill(b, &rng);
	test_fill(c, &rng);
	for (int j = 0; j < n; j++) {
		for (int r = 0; r < a.rows; r++) {
			double s = 0;

			for (int k = a.ptr[r]; k < a.ptr[r + 1]; k++)
				s += a.val[k] * b[(size_t)j * a.cols + a.idx[k]];
			ref[(size_t)j * a.rows + r] = alpha * s + beta * c[(size_t)j * a.rows + r];
		}
	}
	int *dptr = test_to_device(a.ptr), *didx = test_to_device(a.idx);
	double *dval = test_to_device(a.val), *db = test_to_device(b), *dc = test_to_device(c);

	CHECK_SPARSE(cusparseCreateCsr(&ma, a.rows, a.cols, (int64_t)a.val.size(), dptr, didx, dval,
				       CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
				       CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F));
	CHECK_SPARSE(cusparseCreateDnMat(&mb, a.cols, n, a.cols, db, CUDA_R_64F, CUSPARSE_ORDER_COL));
	CHECK_SPARSE(cusparseCreateDnMat(&mc, a.rows, n, a.rows, dc, CUDA_R_64F, CUSPARSE_ORDER_COL));
	CHECK_SPARSE(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE,
					     CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, ma, mb, &beta,
					     mc, CUDA_R_64F, CUSPARSE_SPMM_ALG_DEFAULT, &bytes));
	if (bytes)
		CHECK(cudaMalloc(&work, bytes));
	CHECK_SPARSE(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
				  &alpha, ma, mb, &beta, mc, CUDA_R_64F, CUSPARSE_SPMM_ALG_DEFAULT,
				  work));
	std::vector<double> got = test_from_device(dc, c.size());
	CHECK_SPARSE(cusparseDestroySpMat(ma));
	CHECK_SPARSE(cusparseDestroyDnMat(mb));
	CHECK_SPARSE(cusparseDestroyDnMat(mc));
	CHECK(cudaFree(work));
	CHECK(cudaFree(dptr));
	CHECK(cudaFree(didx));
	CHECK(cudaFree(dval));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dc));
	return rel_err(got, ref);
}

int main(int argc, char **argv)
{
	cusparseHandle_t h;
	cudaStream_t s;
	int version = 0;

	test_args(argc, argv);

	CHECK(cudaStreamCreate(&s));
	CHECK_SPARSE(cusparseCreate(&h));
	CHECK_SPARSE(cusparseSetStream(h, s));
	CHECK_SPARSE(cusparseGetVersion(h, &version));
	csr a = csr_random(2000, 1500, 24);
	double e1 = spmv<double>(h, a, CUDA_R_64F);
	double e2 = spmv<float>(h, a, CUDA_R_32F);
	double e3 = spmm(h, a, 16);
	CHECK_SPARSE(cusparseDestroy(h));
	CHECK(cudaStreamDestroy(s));
	printf("cuSPARSE %d, %zu nonzeros: relative error SpMV double %.3g, float %.3g, SpMM double %.3g\n",
	       version, a.val.size(), e1, e2, e3);
	REQUIRE_RESULT(e1 < TOL_DOUBLE && e3 < TOL_DOUBLE, "double error %g / %g is %g or more", e1, e3,
		TOL_DOUBLE);
	REQUIRE_RESULT(e2 < TOL_FLOAT, "float error %g is %g or more", e2, TOL_FLOAT);
	test_pass("cusparse_spmv");
	return 0;
}
