/* streams_events: three streams (two priorities), async copies from pinned
 * and pageable memory, events recorded, queried, synchronised and timed, and
 * one stream waiting on another's event. Results are checked exactly. Then
 * what each stream belongs to: its id, device and context, and the per-stream
 * key the driver's export table gives cuBLAS. */
#include "check.h"

#include <vector>

/* y[i] = x[i] * k + add, over a grid-stride loop. */
extern "C" __global__ void se_scale_add(const int *x, int *y, int k, int add, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		y[i] = x[i] * k + add;
}

/* z[i] = a[i] + b[i] */
extern "C" __global__ void se_sum(const int *a, const int *b, int *z, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		z[i] = a[i] + b[i];
}

int main(void)
{
	const int n = 1 << 18;
	const size_t bytes = n * sizeof(int);
	int lo, hi, prio;
	cudaStream_t s_hi, s_lo, s_def;
	cudaEvent_t start, stop, a_done, b_done;
	int *pin_in, *pin_out;
	std::vector<int> page_in(n), page_out(n);
	int *d_x, *d_y, *d_u, *d_v, *d_z;
	float ms = -1.0f;
	unsigned flags;

	CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
	/* Numerically lower is higher priority; a range of one value is allowed. */
	REQUIRE(hi <= lo, "priority range least %d greatest %d", lo, hi);
	CHECK(cudaStreamCreateWithPriority(&s_hi, cudaStreamNonBlocking, hi));
	CHECK(cudaStreamCreateWithPriority(&s_lo, cudaStreamNonBlocking, lo));
	CHECK(cudaStreamCreate(&s_def));
	CHECK(cudaStreamGetPriority(s_hi, &prio));
	REQUIRE(prio == hi, "s_hi priority %d, asked %d", prio, hi);
	CHECK(cudaStreamGetPriority(s_lo, &prio));
	REQUIRE(prio == lo, "s_lo priority %d, asked %d", prio, lo);
	CHECK(cudaStreamGetFlags(s_hi, &flags));
	REQUIRE(flags == cudaStreamNonBlocking, "s_hi flags %#x", flags);
	CHECK(cudaStreamGetFlags(s_def, &flags));
	REQUIRE(flags == cudaStreamDefault, "s_def flags %#x", flags);

	CHECK(cudaEventCreate(&start));
	CHECK(cudaEventCreate(&stop));
	CHECK(cudaEventCreateWithFlags(&a_done, cudaEventDisableTiming));
	CHECK(cudaEventCreateWithFlags(&b_done, cudaEventDisableTiming));

	CHECK(cudaMallocHost(&pin_in, bytes));
	CHECK(cudaMallocHost(&pin_out, bytes));
	CHECK(cudaMalloc(&d_x, bytes));
	CHECK(cudaMalloc(&d_y, bytes));
	CHECK(cudaMalloc(&d_u, bytes));
	CHECK(cudaMalloc(&d_v, bytes));
	CHECK(cudaMalloc(&d_z, bytes));
	for (int i = 0; i < n; i++) {
		pin_in[i] = i;
		page_in[i] = 3 * i - 7;
		pin_out[i] = page_out[i] = 0x55555555;
	}

	CHECK(cudaEventRecord(start, s_hi));
	/* Stream hi: pinned input, y = 2x + 1. */
	CHECK(cudaMemcpyAsync(d_x, pin_in, bytes, cudaMemcpyHostToDevice, s_hi));
	se_scale_add<<<64, 256, 0, s_hi>>>(d_x, d_y, 2, 1, n);
	CHECK(cudaGetLastError());
	CHECK(cudaEventRecord(a_done, s_hi));
	/* Stream lo: pageable input, v = -u + 5. */
	CHECK(cudaMemcpyAsync(d_u, page_in.data(), bytes, cudaMemcpyHostToDevice, s_lo));
	se_scale_add<<<32, 128, 0, s_lo>>>(d_u, d_v, -1, 5, n);
	CHECK(cudaGetLastError());
	CHECK(cudaEventRecord(b_done, s_lo));
	/* Stream def waits on both, then z = y + v, copied back to pinned memory. */
	CHECK(cudaStreamWaitEvent(s_def, a_done, 0));
	CHECK(cudaStreamWaitEvent(s_def, b_done, 0));
	se_sum<<<128, 256, 0, s_def>>>(d_y, d_v, d_z, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpyAsync(pin_out, d_z, bytes, cudaMemcpyDeviceToHost, s_def));
	CHECK(cudaEventRecord(stop, s_def));
	/* Pageable copy back on the low priority stream, after the sum is done. */
	CHECK(cudaStreamWaitEvent(s_lo, stop, 0));
	CHECK(cudaMemcpyAsync(page_out.data(), d_z, bytes, cudaMemcpyDeviceToHost, s_lo));

	cudaError_t q = cudaEventQuery(stop);
	REQUIRE(q == cudaSuccess || q == cudaErrorNotReady, "cudaEventQuery: %d %s", (int)q,
		cudaGetErrorName(q));
	CHECK(cudaEventSynchronize(stop));
	CHECK(cudaEventQuery(stop));
	CHECK(cudaEventQuery(a_done));
	CHECK(cudaEventQuery(b_done));
	CHECK(cudaEventElapsedTime(&ms, start, stop));
	REQUIRE(ms >= 0.0f && ms < 60000.0f, "elapsed %g ms", ms);
	/* Timing needs both events timed: this one was created without. */
	EXPECT_RT(cudaEventElapsedTime(&ms, start, a_done), cudaErrorInvalidResourceHandle);
	EXPECT_RT(cudaGetLastError(), cudaErrorInvalidResourceHandle);
	CHECK(cudaStreamSynchronize(s_lo));
	CHECK(cudaStreamQuery(s_lo));
	CHECK(cudaStreamQuery(s_hi));
	CHECK(cudaStreamQuery(s_def));

	for (int i = 0; i < n; i++) {
		int want = (2 * i + 1) + (-(3 * i - 7) + 5);

		REQUIRE(pin_out[i] == want, "pinned z[%d] = %d, expected %d", i, pin_out[i], want);
		REQUIRE(page_out[i] == want, "pageable z[%d] = %d, expected %d", i, page_out[i],
			want);
	}

	/* A device-to-device async copy and a second round on reused events. */
	CHECK(cudaMemcpyAsync(d_x, d_z, bytes, cudaMemcpyDeviceToDevice, s_hi));
	CHECK(cudaEventRecord(a_done, s_hi));
	CHECK(cudaStreamWaitEvent(s_lo, a_done, 0));
	se_scale_add<<<16, 64, 0, s_lo>>>(d_x, d_y, 1, -1, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpyAsync(page_out.data(), d_y, bytes, cudaMemcpyDeviceToHost, s_lo));
	CHECK(cudaStreamSynchronize(s_lo));
	for (int i = 0; i < n; i++) {
		int want = (2 * i + 1) + (-(3 * i - 7) + 5) - 1;

		REQUIRE(page_out[i] == want, "round 2 y[%d] = %d, expected %d", i, page_out[i],
			want);
	}

	/* Ids are distinct and stable; the device is ours; the context is the
	 * current one, for created and special streams alike. */
	{
		DRV_FN(cuCtxGetCurrent);
		/* cuStreamGetCtx changed its signature in 12.5: ask for each version. */
		decltype(&cuStreamGetCtx) p_cuStreamGetCtx =
			(decltype(&cuStreamGetCtx))drv_sym_version("cuStreamGetCtx", 9020);
		decltype(&cuStreamGetCtx_v2) p_cuStreamGetCtx_v2 =
			(decltype(&cuStreamGetCtx_v2))drv_sym_version("cuStreamGetCtx", 12050);
		DRV_FN(cuStreamGetDevice);
		cudaStream_t all[] = { s_hi, s_lo, s_def, 0, cudaStreamPerThread };
		unsigned long long ids[5], again;
		CUcontext cur, c;
		CUgreenCtx g = (CUgreenCtx)&c;
		CUdevice dev = -1;
		int rdev = -1;

		CHECK_DRV(p_cuCtxGetCurrent(&cur));
		for (int i = 0; i < 5; i++) {
			CHECK(cudaStreamGetId(all[i], &ids[i]));
			CHECK(cudaStreamGetId(all[i], &again));
			REQUIRE(again == ids[i], "stream %d: id %llu, then %llu", i, ids[i], again);
			for (int j = 0; j < i; j++)
				REQUIRE(ids[j] != ids[i], "streams %d and %d share id %llu", j, i, ids[i]);
			CHECK_DRV(p_cuStreamGetCtx((CUstream)all[i], &c));
			REQUIRE(c == cur, "stream %d: context %p, current %p", i, (void *)c, (void *)cur);
			CHECK_DRV(p_cuStreamGetDevice((CUstream)all[i], &dev));
			REQUIRE(dev == 0, "stream %d on device %d", i, dev);
		}
		CHECK_DRV(p_cuStreamGetCtx_v2((CUstream)s_hi, &c, &g));
		REQUIRE(c == cur && g == NULL, "cuStreamGetCtx_v2: %p, green %p", (void *)c, (void *)g);
		CHECK(cudaStreamGetDevice(s_lo, &rdev));
		REQUIRE(rdev == 0, "cudaStreamGetDevice: %d", rdev);
		EXPECT_DRV(p_cuStreamGetCtx((CUstream)s_hi, NULL), CUDA_ERROR_INVALID_VALUE);

		/* The driver's per-stream key that cuBLAS uses (export table
		 * 21318c60: slot 51 gives a stream's object, slot 39 its id):
		 * stable for a stream, distinct between streams. */
		typedef CUresult (*stream_obj_fn)(CUcontext, CUstream, void **, int);
		typedef CUresult (*obj_id_fn)(CUcontext, void *, unsigned long long *);
		static const CUuuid tools_context = { { 0x21, 0x31, (char)0x8c, 0x60, (char)0x97, 0x14,
			0x32, 0x48, (char)0x8c, (char)0xa6, 0x41, (char)0xff, 0x73, 0x24, (char)0xc8,
			(char)0xf2 } };
		DRV_FN(cuGetExportTable);
		const void **table = NULL;
		unsigned long long keys[4], key;

		CHECK_DRV(p_cuGetExportTable((const void **)&table, &tools_context));
		REQUIRE((uintptr_t)table[0] > 51 * sizeof(void *), "table 21318c60 has no slot 51");
		for (int i = 0; i < 4; i++) {
			void *obj = NULL;

			CHECK_DRV(((stream_obj_fn)table[51])(cur, (CUstream)all[i], &obj, 0));
			CHECK_DRV(((obj_id_fn)table[39])(cur, obj, &keys[i]));
			CHECK_DRV(((stream_obj_fn)table[51])(cur, (CUstream)all[i], &obj, 0));
			CHECK_DRV(((obj_id_fn)table[39])(cur, obj, &key));
			REQUIRE(key == keys[i], "stream %d: key %llu, then %llu", i, keys[i], key);
			for (int j = 0; j < i; j++)
				REQUIRE(keys[j] != keys[i], "streams %d and %d share key %llu", j, i, key);
		}
	}

	CHECK(cudaEventDestroy(start));
	CHECK(cudaEventDestroy(stop));
	CHECK(cudaEventDestroy(a_done));
	CHECK(cudaEventDestroy(b_done));
	CHECK(cudaStreamDestroy(s_hi));
	CHECK(cudaStreamDestroy(s_lo));
	CHECK(cudaStreamDestroy(s_def));
	CHECK(cudaFreeHost(pin_in));
	CHECK(cudaFreeHost(pin_out));
	CHECK(cudaFree(d_x));
	CHECK(cudaFree(d_y));
	CHECK(cudaFree(d_u));
	CHECK(cudaFree(d_v));
	CHECK(cudaFree(d_z));
	test_pass("streams_events");
	return 0;
}
