/* cublaslt_matmul: cuBLASLt in the guest. D = relu(alpha A B + beta C + bias)
 * and plain D = alpha A^T B + beta C in single precision (CUBLAS_COMPUTE_32F,
 * no TF32), and A^T B with BF16 inputs, 1024x1024x512, which the heuristic
 * gives to Hopper tensor-core kernels on sm_90; each with the heuristic's
 * first algorithm and its workspace, checked against a double-precision CPU
 * reference, relative error < 1e-5 (BF16: < 1e-4). Results are checked on a
 * GPU only (tools/gpu-check): the sim backend has no CPU cuBLASLt kernels, so
 * CI runs it with --calls-only under ternd --sim-missing-kernels skip
 * (check.h). */
#include "check.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <math.h>
#include <vector>

#define CHECK_LT(call) CHECK_LIB("cuBLASLt", call)

#define TOLERANCE 1e-5
/* BF16 inputs are exact (the reference uses the rounded values) and their
 * products exact in FP32; what is left is the tensor cores' FP32 sums. */
#define TOLERANCE_BF16 1e-4
#define WORKSPACE (4u << 20)

static unsigned long long rng = 0x452821e638d01377ull;

/* A and B in BF16 on the device; the reference uses the same rounded values. */
static void *to_device_as(std::vector<float> &v, bool bf16)
{
	std::vector<__nv_bfloat16> h(v.size());

	if (!bf16)
		return test_to_device(v);
	for (size_t i = 0; i < v.size(); i++) {
		h[i] = __float2bfloat16(v[i]);
		v[i] = __bfloat162float(h[i]);
	}
	return test_to_device(h);
}

/* Column-major; op(A) is m x k. */
static double run(cublasLtHandle_t lt, cudaStream_t s, void *work, bool trans_a, bool relu_bias,
		  bool bf16, int m, int n, int k)
{
	int lda = trans_a ? k : m;
	std::vector<float> a((size_t)m * k), b((size_t)k * n), c((size_t)m * n), bias(m), d(c.size());
	float alpha = 0.75f, beta = -1.25f, *dc, *dd, *dbias;
	cudaDataType ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
	void *da, *db;
	cublasOperation_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, opb = CUBLAS_OP_N;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t heur = {};
	size_t ws = WORKSPACE;
	int found = 0;

	test_fill(a, &rng);
	test_fill(b, &rng);
	test_fill(c, &rng);
	test_fill(bias, &rng);
	da = to_device_as(a, bf16);
	db = to_device_as(b, bf16);
	dc = test_to_device(c);
	dbias = test_to_device(bias);
	CHECK(cudaMalloc(&dd, d.size() * sizeof(float)));

	CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
	CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
	if (relu_bias) {
		cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;

		CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
							sizeof(epi)));
		CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias,
							sizeof(dbias)));
	}
	CHECK_LT(cublasLtMatrixLayoutCreate(&la, ab, trans_a ? k : m, trans_a ? m : k, lda));
	CHECK_LT(cublasLtMatrixLayoutCreate(&lb, ab, k, n, k));
	CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m));
	CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
	CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
						      &ws, sizeof(ws)));
	CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heur, &found));
	REQUIRE(found == 1, "no cuBLASLt algorithm for %dx%dx%d", m, n, k);
	CHECK_LT(cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dc, lc, dd, lc, &heur.algo,
				work, WORKSPACE, s));
	CHECK(cudaMemcpyAsync(d.data(), dd, d.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamSynchronize(s));

	double num = 0, den = 0;
	for (int j = 0; j < n; j++) {
		for (int i = 0; i < m; i++) {
			double acc = 0, ref;

			for (int p = 0; p < k; p++) {
				double av = trans_a ? a[(size_t)i * lda + p] : a[(size_t)p * lda + i];

				acc += av * b[(size_t)j * k + p];
			}
			ref = alpha * acc + beta * (double)c[(size_t)j * m + i];
			if (relu_bias) {
				ref += bias[i];
				ref = ref > 0 ? ref : 0;
			}
			double diff = d[(size_t)j * m + i] - ref;

			num += diff * diff;
			den += ref * ref;
		}
	}
	CHECK_LT(cublasLtMatmulPreferenceDestroy(pref));
	CHECK_LT(cublasLtMatrixLayoutDestroy(la));
	CHECK_LT(cublasLtMatrixLayoutDestroy(lb));
	CHECK_LT(cublasLtMatrixLayoutDestroy(lc));
	CHECK_LT(cublasLtMatmulDescDestroy(op));
	CHECK(cudaFree(da));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dc));
	CHECK(cudaFree(dd));
	CHECK(cudaFree(dbias));
	return sqrt(num / den);
}

int main(int argc, char **argv)
{
	cublasLtHandle_t lt;
	cudaStream_t s;
	void *work;
	double e1, e2, e3;

	test_args(argc, argv);

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaMalloc(&work, WORKSPACE));
	CHECK_LT(cublasLtCreate(&lt));
	printf("cuBLASLt %zu\n", cublasLtGetVersion());
	e1 = run(lt, s, work, false, true, false, 256, 192, 320);
	e2 = run(lt, s, work, true, false, false, 200, 136, 96);
	/* Large enough for the Hopper (sm_90) tensor-core kernels. */
	e3 = run(lt, s, work, true, false, true, 1024, 1024, 512);
	CHECK_LT(cublasLtDestroy(lt));
	CHECK(cudaFree(work));
	CHECK(cudaStreamDestroy(s));
	printf("cublasLtMatmul relative error: NN relu+bias %.3g, TN %.3g, BF16 TN %.3g (tolerance %g, "
	       "BF16 %g)\n", e1, e2, e3, TOLERANCE, TOLERANCE_BF16);
	REQUIRE_RESULT(e1 < TOLERANCE && e2 < TOLERANCE, "relative error %g / %g is %g or more", e1, e2,
		TOLERANCE);
	REQUIRE_RESULT(e3 < TOLERANCE_BF16, "BF16 relative error %g is %g or more", e3, TOLERANCE_BF16);
	test_pass("cublaslt_matmul");
	return 0;
}
