/* contexts: contexts the app creates (cuCtxCreate), as hashcat and other
 * driver-API programs do: flags, the current-context stack, the runtime on a
 * created context, memory copied between contexts, destroy, and a loop of
 * create/destroy that must not leak handles. */
#include "check.h"

#include <vector>

extern "C" __global__ void vec_add(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		c[i] = a[i] + b[i];
}

int main(void)
{
	DRV_FN(cuInit);
	DRV_FN(cuDeviceGet);
	DRV_FN(cuCtxCreate);
	DRV_FN(cuCtxDestroy);
	DRV_FN(cuCtxGetCurrent);
	DRV_FN(cuCtxGetFlags);
	DRV_FN(cuCtxPushCurrent);
	DRV_FN(cuCtxPopCurrent);
	DRV_FN(cuCtxGetDevice);
	DRV_FN(cuDevicePrimaryCtxRetain);
	DRV_FN(cuDevicePrimaryCtxRelease);
	DRV_FN(cuMemcpyDtoH);
	const int n = 4099;
	const size_t bytes = n * sizeof(float);
	std::vector<float> a(n), b(n), c(n, -1.0f);
	CUcontext ctx, cur, primary, popped;
	CUdevice dev, got_dev;
	unsigned flags = 0;
	float *da, *db, *dc;

	CHECK_DRV(p_cuInit(0));
	CHECK_DRV(p_cuDeviceGet(&dev, 0));
	EXPECT_DRV(p_cuCtxCreate(&ctx, NULL, 0xffff0000u, dev), CUDA_ERROR_INVALID_VALUE);
	CHECK_DRV(p_cuCtxCreate(&ctx, NULL, CU_CTX_SCHED_BLOCKING_SYNC, dev));
	CHECK_DRV(p_cuCtxGetCurrent(&cur));
	REQUIRE(cur == ctx, "a created context is current (%p, not %p)", (void *)cur, (void *)ctx);
	CHECK_DRV(p_cuCtxGetFlags(&flags));
	REQUIRE((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC, "flags 0x%x", flags);
	CHECK_DRV(p_cuCtxGetDevice(&got_dev));
	REQUIRE(got_dev == dev, "device %d, not %d", got_dev, dev);

	/* The runtime works on the context current on this thread. */
	for (int i = 0; i < n; i++) {
		a[i] = (float)i;
		b[i] = (float)(3 * i) * 0.5f;
	}
	CHECK(cudaMalloc(&da, bytes));
	CHECK(cudaMalloc(&db, bytes));
	CHECK(cudaMalloc(&dc, bytes));
	CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
	vec_add<<<(n + 127) / 128, 128>>>(da, db, dc, n);
	CHECK(cudaGetLastError());
	CHECK(cudaDeviceSynchronize());

	/* The primary context on top of the stack, then back. Unified addressing:
	 * memory of the created context is copied from under the primary one. */
	CHECK_DRV(p_cuDevicePrimaryCtxRetain(&primary, dev));
	REQUIRE(primary != ctx, "the primary context is another one");
	CHECK_DRV(p_cuCtxPushCurrent(primary));
	CHECK_DRV(p_cuCtxGetCurrent(&cur));
	REQUIRE(cur == primary, "pushed primary context is current");
	CHECK_DRV(p_cuMemcpyDtoH(c.data(), (CUdeviceptr)dc, bytes));
	for (int i = 0; i < n; i++)
		REQUIRE(c[i] == a[i] + b[i], "c[%d] = %g, expected %g", i, c[i], a[i] + b[i]);
	CHECK_DRV(p_cuCtxPopCurrent(&popped));
	REQUIRE(popped == primary, "popped the primary context");
	CHECK_DRV(p_cuCtxGetCurrent(&cur));
	REQUIRE(cur == ctx, "the created context is current again");
	CHECK(cudaFree(da));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dc));
	CHECK_DRV(p_cuCtxDestroy(ctx));
	CHECK_DRV(p_cuCtxGetCurrent(&cur));
	REQUIRE(cur != ctx, "a destroyed context is no longer current");
	CHECK_DRV(p_cuDevicePrimaryCtxRelease(dev));

	/* Create and destroy in a loop, as programs that open a device per job do. */
	for (int i = 0; i < 20; i++) {
		CUcontext t;

		CHECK_DRV(p_cuCtxCreate(&t, NULL, CU_CTX_SCHED_AUTO, dev));
		CHECK_DRV(p_cuCtxDestroy(t));
	}
	test_pass("contexts");
	return 0;
}
