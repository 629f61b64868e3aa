/* errors: calls that must fail, each with the code NVIDIA's driver and
 * runtime give natively, and a program that keeps working after each.
 *   bad pointers: copies to and from addresses no allocation covers;
 *   invalid handles: NULL handles where the driver defines the error;
 *   a launch with an impossible block size;
 *   out of memory: 1 TiB, and, when TERN_TEST_QUOTA=BYTES is set (the harness
 *   runs ternd with --quota BYTES), allocations that together pass the quota.
 * Every outcome is printed; the program fails at the end if any differed. */
#include "check.h"

#include <vector>

static int mismatches;

static void expect_rt(const char *what, cudaError_t got, cudaError_t want)
{
	printf("  %-44s -> %d %s%s\n", what, (int)got, cudaGetErrorName(got),
	       got == want ? "" : "   MISMATCH");
	if (got != want) {
		fprintf(stderr, "FAIL: %s returned %d %s, expected %d %s\n", what, (int)got,
			cudaGetErrorName(got), (int)want, cudaGetErrorName(want));
		mismatches++;
	}
}

static void expect_drv(const char *what, CUresult got, CUresult want)
{
	printf("  %-44s -> %d %s%s\n", what, (int)got, test_drv_name(got),
	       got == want ? "" : "   MISMATCH");
	if (got != want) {
		fprintf(stderr, "FAIL: %s returned %d %s, expected %d %s\n", what, (int)got,
			test_drv_name(got), (int)want, test_drv_name(want));
		mismatches++;
	}
}

extern "C" __global__ void err_affine(const int *x, int *y, int k, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = k * x[i] + i;
}

/* Proof that the session still works: a full round trip through a kernel. */
static void still_works(const char *after)
{
	const int n = 3000;
	std::vector<int> h(n), out(n);
	int *dx, *dy;
	int k = (int)strlen(after) + 1;

	for (int i = 0; i < n; i++)
		h[i] = i * 7 - 11;
	CHECK(cudaMalloc(&dx, n * sizeof(int)));
	CHECK(cudaMalloc(&dy, n * sizeof(int)));
	CHECK(cudaMemcpy(dx, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
	err_affine<<<(n + 127) / 128, 128>>>(dx, dy, k, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(out.data(), dy, n * sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++)
		REQUIRE(out[i] == k * h[i] + i, "after %s: y[%d] = %d, expected %d", after, i,
			out[i], k * h[i] + i);
	CHECK(cudaFree(dx));
	CHECK(cudaFree(dy));
	printf("still works after %s\n", after);
}

static void bad_pointers(void)
{
	std::vector<char> host(4096, 1);
	void *low = (void *)(uintptr_t)0x1000;
	char *d, *gone;

	printf("bad pointers:\n");
	CHECK(cudaMalloc(&d, 4096));
	expect_rt("cudaMemcpy H2D to 0x1000",
		  cudaMemcpy(low, host.data(), 4096, cudaMemcpyHostToDevice),
		  cudaErrorInvalidValue);
	expect_rt("cudaMemcpy D2H from 0x1000",
		  cudaMemcpy(host.data(), low, 4096, cudaMemcpyDeviceToHost),
		  cudaErrorInvalidValue);
	expect_rt("cudaMemcpy D2D from 0x1000",
		  cudaMemcpy(d, low, 4096, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
	expect_rt("cudaMemset at 0x1000", cudaMemset(low, 0, 4096), cudaErrorInvalidValue);

	/* An allocation's address once it has been freed (its own mapping
	 * natively; within any quota under tern). */
	const char *quota = getenv("TERN_TEST_QUOTA");
	size_t gone_size = quota && *quota ? (size_t)(strtoull(quota, NULL, 0) / 4) : 64 << 20;

	CHECK(cudaMalloc(&gone, gone_size));
	CHECK(cudaFree(gone));
	expect_rt("cudaMemcpy H2D to a freed allocation",
		  cudaMemcpy(gone, host.data(), 4096, cudaMemcpyHostToDevice),
		  cudaErrorInvalidValue);
	expect_rt("cudaFree of a freed allocation", cudaFree(gone), cudaErrorInvalidValue);
	/* Errors of this kind are not sticky. */
	expect_rt("cudaGetLastError clears", cudaGetLastError(), cudaErrorInvalidValue);
	expect_rt("cudaGetLastError after clearing", cudaGetLastError(), cudaSuccess);
	CHECK(cudaFree(d));
	still_works("bad pointers");
}

static void invalid_handles(void)
{
	DRV_FN(cuModuleGetFunction);
	DRV_FN(cuFuncGetAttribute);
	DRV_FN(cuEventQuery);
	DRV_FN(cuEventRecord);
	DRV_FN(cuStreamGetPriority);
	CUfunction f = NULL;
	int v = 0;

	printf("invalid handles:\n");
	expect_drv("cuModuleGetFunction(NULL module)",
		   p_cuModuleGetFunction(&f, NULL, "err_affine"), CUDA_ERROR_INVALID_HANDLE);
	expect_drv("cuFuncGetAttribute(NULL function)",
		   p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, NULL),
		   CUDA_ERROR_INVALID_HANDLE);
	expect_drv("cuEventQuery(NULL)", p_cuEventQuery(NULL), CUDA_ERROR_INVALID_HANDLE);
	expect_drv("cuEventRecord(NULL, 0)", p_cuEventRecord(NULL, NULL),
		   CUDA_ERROR_INVALID_HANDLE);
	/* The NULL stream is the legacy default stream: valid, not an error. */
	expect_drv("cuStreamGetPriority(NULL stream)", p_cuStreamGetPriority(NULL, &v),
		   CUDA_SUCCESS);
	expect_rt("cudaEventRecord(NULL)", cudaEventRecord(NULL, 0),
		  cudaErrorInvalidResourceHandle);
	expect_rt("cudaEventQuery(NULL)", cudaEventQuery(NULL), cudaErrorInvalidResourceHandle);
	/* A host function is no kernel of the program's modules (CUDA 13's
	 * runtime reports it as a bad handle, measured on driver 580). */
	cudaFuncAttributes fa;
	expect_rt("cudaFuncGetAttributes(host function)",
		  cudaFuncGetAttributes(&fa, (const void *)still_works),
		  cudaErrorInvalidResourceHandle);
	cudaGetLastError();
	still_works("invalid handles");
}

static void bad_launch(void)
{
	int *d;

	printf("bad launch:\n");
	CHECK(cudaMalloc(&d, 4096));
	/* CUDA 13 on driver 580 reports this as cudaErrorInvalidValue (older
	 * runtimes said cudaErrorInvalidConfiguration). */
	err_affine<<<1, 4096>>>(d, d, 1, 1);
	expect_rt("launch with 4096 threads per block", cudaGetLastError(),
		  cudaErrorInvalidValue);
	expect_rt("cudaDeviceSynchronize after it", cudaDeviceSynchronize(), cudaSuccess);
	CHECK(cudaFree(d));
	still_works("a bad launch");
}

static void out_of_memory(void)
{
	void *p = NULL;
	const char *quota_env = getenv("TERN_TEST_QUOTA");

	printf("out of memory:\n");
	expect_rt("cudaMalloc(1 TiB)", cudaMalloc(&p, (size_t)1 << 40), cudaErrorMemoryAllocation);
	expect_rt("cudaGetLastError clears", cudaGetLastError(), cudaErrorMemoryAllocation);
	still_works("cudaMalloc(1 TiB)");
	if (!quota_env || !*quota_env)
		return;

	/* Quarters of the quota: three fit, a fourth and a half do not
	 * (leaving a quarter's slack for what the runtime allocates itself). */
	unsigned long long quota = strtoull(quota_env, NULL, 0);
	size_t q = (size_t)(quota / 4) & ~(size_t)0xfffff;
	void *a = NULL, *b = NULL, *c = NULL, *e = NULL;

	REQUIRE(q >= (1 << 20), "TERN_TEST_QUOTA=%s is too small", quota_env);
	printf("quota %llu bytes, blocks of %zu\n", quota, q);
	expect_rt("cudaMalloc quarter 1", cudaMalloc(&a, q), cudaSuccess);
	expect_rt("cudaMalloc quarter 2", cudaMalloc(&b, q), cudaSuccess);
	expect_rt("cudaMalloc quota (past it)", cudaMalloc(&e, quota), cudaErrorMemoryAllocation);
	expect_rt("cudaMalloc 3 quarters (past it)", cudaMalloc(&e, 3 * q),
		  cudaErrorMemoryAllocation);
	cudaGetLastError();
	expect_rt("cudaMalloc quarter 3 (under it)", cudaMalloc(&c, q), cudaSuccess);
	/* The blocks under the quota are usable memory. */
	if (c) {
		expect_rt("cudaMemset quarter 3", cudaMemset(c, 0x5a, q), cudaSuccess);
		unsigned char last = 0;
		expect_rt("cudaMemcpy last byte of quarter 3",
			  cudaMemcpy(&last, (char *)c + q - 1, 1, cudaMemcpyDeviceToHost),
			  cudaSuccess);
		REQUIRE(last == 0x5a, "last byte %#x", last);
	}
	/* Freeing gives the room back. */
	if (a)
		CHECK(cudaFree(a));
	if (b)
		CHECK(cudaFree(b));
	expect_rt("cudaMalloc 2 quarters after frees", cudaMalloc(&e, 2 * q), cudaSuccess);
	if (e)
		CHECK(cudaFree(e));
	if (c)
		CHECK(cudaFree(c));
	still_works("the quota");
}

int main(void)
{
	CHECK(cudaFree(0));     /* create the context before anything fails */
	still_works("start-up");
	bad_pointers();
	invalid_handles();
	bad_launch();
	out_of_memory();
	if (mismatches) {
		fprintf(stderr, "FAIL errors: %d calls gave another code than expected\n",
			mismatches);
		return 1;
	}
	test_pass("errors");
	return 0;
}
