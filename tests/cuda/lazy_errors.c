/* lazy_errors: what lazy RPC does with the errors of deferred calls (tern
 * only: a native driver reports these at the call). A deferred call returns
 * CUDA_SUCCESS; its failure is the answer of the next synchronising call,
 * once; later calls are unaffected; invalid geometry and handles still fail
 * at once. Loads libcuda.so.1 like any application (LD_LIBRARY_PATH). */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;

#define EXPECT(call, want)                                                     \
	do {                                                                   \
		CUresult got_ = (call);                                        \
		if (got_ != (want)) {                                          \
			fprintf(stderr, "FAIL: %s returned %d, expected %d\n", #call, got_, (want)); \
			failures++;                                            \
		}                                                              \
	} while (0)


int main(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	CUcontext ctx;
	CUdeviceptr d;

	if (!lib) {
		fprintf(stderr, "FAIL: %s\n", dlerror());
		return 1;
	}
	{
		CUresult (*p_cuInit)(unsigned) = (CUresult (*)(unsigned))dlsym(lib, "cuInit");
		CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice) = (CUresult (*)(CUcontext *, CUdevice))dlsym(lib, "cuDevicePrimaryCtxRetain");
		CUresult (*p_cuCtxSetCurrent)(CUcontext) = (CUresult (*)(CUcontext))dlsym(lib, "cuCtxSetCurrent");
		CUresult (*p_cuMemAlloc_v2)(CUdeviceptr *, size_t) = (CUresult (*)(CUdeviceptr *, size_t))dlsym(lib, "cuMemAlloc_v2");
		CUresult (*p_cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream) = (CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream))dlsym(lib, "cuMemsetD8Async");
		CUresult (*p_cuStreamSynchronize)(CUstream) = (CUresult (*)(CUstream))dlsym(lib, "cuStreamSynchronize");
		CUresult (*p_cuCtxSynchronize)(void) = (CUresult (*)(void))dlsym(lib, "cuCtxSynchronize");
		CUresult (*p_cuEventRecord)(CUevent, CUstream) = (CUresult (*)(CUevent, CUstream))dlsym(lib, "cuEventRecord");
		CUresult (*p_cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t) = (CUresult (*)(void *, CUdeviceptr, size_t))dlsym(lib, "cuMemcpyDtoH_v2");
		unsigned char host[16];

		EXPECT(p_cuInit(0), CUDA_SUCCESS);
		EXPECT(p_cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
		EXPECT(p_cuCtxSetCurrent(ctx), CUDA_SUCCESS);
		EXPECT(p_cuMemAlloc_v2(&d, 4096), CUDA_SUCCESS);
		/* Deferred: accepted now, reported by the next synchronisation. */
		EXPECT(p_cuMemsetD8Async(d + (1ull << 40), 1, 16, NULL), CUDA_SUCCESS);
		EXPECT(p_cuMemsetD8Async(d, 7, 16, NULL), CUDA_SUCCESS);
		EXPECT(p_cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_VALUE);
		/* Reported once; the good memset after it did run. */
		EXPECT(p_cuCtxSynchronize(), CUDA_SUCCESS);
		EXPECT(p_cuMemcpyDtoH_v2(host, d, sizeof(host)), CUDA_SUCCESS);
		for (unsigned i = 0; i < sizeof(host); i++)
			if (host[i] != 7) {
				fprintf(stderr, "FAIL: byte %u is %u after the memset\n", i, host[i]);
				failures++;
				break;
			}
		/* Handles that are no events fail at the call, deferred or not. */
		EXPECT(p_cuEventRecord(NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
		EXPECT(p_cuEventRecord((CUevent)(uintptr_t)0x0600000000000001ull, NULL), CUDA_ERROR_INVALID_HANDLE);
	}
	if (failures) {
		fprintf(stderr, "FAIL lazy_errors: %d checks\n", failures);
		return 1;
	}
	printf("PASS lazy_errors\n");
	return 0;
}
