/* two_modules: a driver-API program. Two fatbins (mod_a.cu, mod_b.cu, built
 * with nvcc -fatbin and embedded) are loaded at once with cuModuleLoadData;
 * module B is also loaded as a library (cuLibraryLoadData). Kernels from both
 * are launched with cuLaunchKernel and cuLaunchKernelEx on one buffer.
 * libcuda.so.1 is opened with dlopen and every entry point is resolved with
 * cuGetProcAddress: the program never links the driver. */
#include <dlfcn.h>
#include <cudaTypedefs.h>

#include "check.h"
#include "mod_a_fatbin.h"
#include "mod_b_fatbin.h"

#define RESOLVE(name) decltype(&name) p_##name = (decltype(&name))resolve(#name)

static decltype(&cuGetProcAddress_v2) get_proc;

static void *resolve_version(const char *name, int version)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;

	CHECK_DRV(get_proc(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st));
	REQUIRE(st == CU_GET_PROC_ADDRESS_SUCCESS && fn, "cuGetProcAddress(%s, %d): status %d",
		name, version, (int)st);
	return fn;
}

static void *resolve(const char *name)
{
	return resolve_version(name, TEST_CUDA_VERSION);
}

int main(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	REQUIRE(lib, "dlopen libcuda.so.1: %s", dlerror());
	get_proc = (decltype(get_proc))dlsym(lib, "cuGetProcAddress_v2");
	REQUIRE(get_proc, "dlsym cuGetProcAddress_v2: %s", dlerror());
	test_drv_error_name = (test_get_error_name_fn)dlsym(lib, "cuGetErrorName");

	RESOLVE(cuInit);
	RESOLVE(cuDriverGetVersion);
	RESOLVE(cuDeviceGet);
	RESOLVE(cuDevicePrimaryCtxRetain);
	RESOLVE(cuDevicePrimaryCtxRelease);
	RESOLVE(cuCtxSetCurrent);
	/* CUDA 13 gave cuCtxSynchronize a context argument; asking for an older
	 * version gives the old prototype that cuda.h still declares. */
	PFN_cuCtxSynchronize_v13000 p_ctx_sync_13 =
		(PFN_cuCtxSynchronize_v13000)resolve_version("cuCtxSynchronize", 13000);
	PFN_cuCtxSynchronize_v2000 p_ctx_sync_2 =
		(PFN_cuCtxSynchronize_v2000)resolve_version("cuCtxSynchronize", 12000);
	RESOLVE(cuModuleLoadData);
	RESOLVE(cuModuleGetFunction);
	RESOLVE(cuModuleUnload);
	RESOLVE(cuFuncGetAttribute);
	RESOLVE(cuLibraryLoadData);
	RESOLVE(cuLibraryGetKernel);
	RESOLVE(cuLibraryUnload);
	RESOLVE(cuKernelGetFunction);
	RESOLVE(cuFuncGetParamInfo);
	RESOLVE(cuLaunchKernel);
	RESOLVE(cuLaunchKernelEx);
	RESOLVE(cuMemAlloc);
	RESOLVE(cuMemFree);
	RESOLVE(cuMemcpyHtoD);
	RESOLVE(cuMemcpyDtoH);
	RESOLVE(cuStreamCreate);
	RESOLVE(cuStreamSynchronize);
	RESOLVE(cuStreamDestroy);

	CUdevice dev;
	CUcontext ctx;
	CUmodule ma, mb;
	CUlibrary lb;
	CUkernel k_lib;
	CUfunction f_iota, f_axpy, f_axpy_lib, f_none;
	CUstream stream;
	CUdeviceptr d_x, d_y;
	int drv = 0;
	const int n = 5000;
	static int hx[5000];
	static float hy[5000];

	CHECK_DRV(p_cuInit(0));
	CHECK_DRV(p_cuDriverGetVersion(&drv));
	REQUIRE(drv >= 12000, "driver version %d", drv);
	CHECK_DRV(p_cuDeviceGet(&dev, 0));
	CHECK_DRV(p_cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK_DRV(p_cuCtxSetCurrent(ctx));

	CHECK_DRV(p_cuModuleLoadData(&ma, mod_a_fatbin));
	CHECK_DRV(p_cuModuleLoadData(&mb, mod_b_fatbin));
	REQUIRE(ma != mb, "two loads gave one module handle");
	CHECK_DRV(p_cuModuleGetFunction(&f_iota, ma, "ma_iota"));
	CHECK_DRV(p_cuModuleGetFunction(&f_axpy, mb, "mb_axpy"));
	/* Each module holds only its own kernel. */
	EXPECT_DRV(p_cuModuleGetFunction(&f_none, ma, "mb_axpy"), CUDA_ERROR_NOT_FOUND);
	EXPECT_DRV(p_cuModuleGetFunction(&f_none, mb, "ma_iota"), CUDA_ERROR_NOT_FOUND);

	/* The parameter layout the driver reports for mb_axpy(float, int*, float*, int). */
	size_t off = 99, size = 99;
	CHECK_DRV(p_cuFuncGetParamInfo(f_axpy, 0, &off, &size));
	REQUIRE(off == 0 && size == 4, "param 0 at %zu size %zu", off, size);
	CHECK_DRV(p_cuFuncGetParamInfo(f_axpy, 1, &off, &size));
	REQUIRE(off == 8 && size == 8, "param 1 at %zu size %zu", off, size);
	CHECK_DRV(p_cuFuncGetParamInfo(f_axpy, 3, &off, &size));
	REQUIRE(off == 24 && size == 4, "param 3 at %zu size %zu", off, size);

	CHECK_DRV(p_cuMemAlloc(&d_x, n * sizeof(int)));
	CHECK_DRV(p_cuMemAlloc(&d_y, n * sizeof(float)));
	for (int i = 0; i < n; i++)
		hy[i] = 0.5f * (float)i;
	CHECK_DRV(p_cuMemcpyHtoD(d_y, hy, n * sizeof(float)));
	CHECK_DRV(p_cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

	/* x = 10 + i (module A), then y = 2x + y (module B, cuLaunchKernelEx). */
	int base = 10, count = n;
	void *iota_args[] = { &d_x, &base, &count };
	CHECK_DRV(p_cuLaunchKernel(f_iota, (n + 127) / 128, 1, 1, 128, 1, 1, 0, stream,
				   iota_args, NULL));

	float a = 2.0f;
	void *axpy_args[] = { &a, &d_x, &d_y, &count };
	CUlaunchConfig cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.gridDimX = (n + 255) / 256;
	cfg.gridDimY = cfg.gridDimZ = 1;
	cfg.blockDimX = 256;
	cfg.blockDimY = cfg.blockDimZ = 1;
	cfg.hStream = stream;
	CHECK_DRV(p_cuLaunchKernelEx(&cfg, f_axpy, axpy_args, NULL));

	/* Module B again, through the library API, on the same data: y = -1x + y. */
	CHECK_DRV(p_cuLibraryLoadData(&lb, mod_b_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	CHECK_DRV(p_cuLibraryGetKernel(&k_lib, lb, "mb_axpy"));
	CHECK_DRV(p_cuKernelGetFunction(&f_axpy_lib, k_lib));
	a = -1.0f;
	CHECK_DRV(p_cuLaunchKernel(f_axpy_lib, (n + 63) / 64, 1, 1, 64, 1, 1, 0, stream,
				   axpy_args, NULL));
	CHECK_DRV(p_cuStreamSynchronize(stream));

	CHECK_DRV(p_cuMemcpyDtoH(hx, d_x, n * sizeof(int)));
	CHECK_DRV(p_cuMemcpyDtoH(hy, d_y, n * sizeof(float)));
	for (int i = 0; i < n; i++) {
		float want = 2.0f * (float)(10 + i) + 0.5f * (float)i - (float)(10 + i);

		REQUIRE(hx[i] == 10 + i, "x[%d] = %d, expected %d", i, hx[i], 10 + i);
		REQUIRE(hy[i] == want, "y[%d] = %g, expected %g", i, hy[i], want);
	}

	/* Unloading A leaves B usable; A's functions are gone, also for a
	 * question whose answer the shim had already seen. */
	int regs = -1;
	CHECK_DRV(p_cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f_iota));
	REQUIRE(regs > 0, "ma_iota uses %d registers", regs);
	CHECK_DRV(p_cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f_iota));
	CHECK_DRV(p_cuModuleUnload(ma));
	EXPECT_DRV(p_cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f_iota), CUDA_ERROR_INVALID_HANDLE);
	CHECK_DRV(p_cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f_axpy));
	a = 1.0f;
	CHECK_DRV(p_cuLaunchKernel(f_axpy, (n + 127) / 128, 1, 1, 128, 1, 1, 0, stream,
				   axpy_args, NULL));
	CHECK_DRV(p_ctx_sync_13(ctx));
	CHECK_DRV(p_ctx_sync_2());
	CHECK_DRV(p_cuMemcpyDtoH(hy, d_y, n * sizeof(float)));
	for (int i = 0; i < n; i++) {
		float want = 2.0f * (float)(10 + i) + 0.5f * (float)i;

		REQUIRE(hy[i] == want, "after unload y[%d] = %g, expected %g", i, hy[i], want);
	}

	CHECK_DRV(p_cuLibraryUnload(lb));
	CHECK_DRV(p_cuModuleUnload(mb));
	CHECK_DRV(p_cuStreamDestroy(stream));
	CHECK_DRV(p_cuMemFree(d_x));
	CHECK_DRV(p_cuMemFree(d_y));
	CHECK_DRV(p_cuDevicePrimaryCtxRelease(dev));
	test_pass("two_modules");
	return 0;
}
