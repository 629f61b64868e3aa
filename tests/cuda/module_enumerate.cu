/* module_enumerate: what a module or library holds, listed (CUDA 12.4:
 * cuModuleGetFunctionCount, cuModuleEnumerateFunctions, cuLibraryGetKernelCount,
 * cuLibraryEnumerateKernels) and walked through the driver's export table
 * 6e163fbe slot 7, which cuFFT uses to find the kernel of each module it
 * loads. The listed handles must be the ones a lookup by name gives, must
 * launch and must name their owners (cuFuncGetModule, cuKernelGetLibrary). A
 * fatbin of three kernels (mod_enum.cu) is embedded; driver entry points
 * come through the runtime (drv_sym). */
#include "check.h"
#include "mod_enum_fatbin.h"

#include <set>
#include <string>

#define N 1000

static const char *const names[] = { "me_set", "me_add", "me_scale" };

/* What 6e163fbe[7] hands its callback. */
struct walk {
	std::set<CUfunction> functions;
	unsigned calls = 0;
	void *third = NULL;
};

static void walk_cb(void *user, CUfunction fn, void *third)
{
	struct walk *w = (struct walk *)user;

	w->functions.insert(fn);
	w->calls++;
	w->third = third;
}

typedef int (*module_walk_fn)(CUcontext, CUmodule, void (*)(void *, CUfunction, void *), void *);

int main(int argc, char **argv)
{
	DRV_FN(cuCtxGetCurrent);
	DRV_FN(cuModuleLoadData);
	DRV_FN(cuModuleUnload);
	DRV_FN(cuModuleGetFunction);
	DRV_FN(cuModuleGetFunctionCount);
	DRV_FN(cuModuleEnumerateFunctions);
	DRV_FN(cuFuncGetName);
	DRV_FN(cuLibraryLoadData);
	DRV_FN(cuLibraryUnload);
	DRV_FN(cuLibraryGetKernel);
	DRV_FN(cuLibraryGetKernelCount);
	DRV_FN(cuLibraryEnumerateKernels);
	DRV_FN(cuKernelGetName);
	DRV_FN(cuKernelGetFunction);
	DRV_FN(cuLaunchKernel);
	DRV_FN(cuGetExportTable);
	DRV_FN(cuFuncGetModule);
	DRV_FN(cuKernelGetLibrary);
	DRV_FN(cuLibraryGetModule);
	CUcontext ctx;
	CUmodule mod;
	CUlibrary lib;
	CUfunction fns[4], byname;
	CUkernel ks[4], kbyname;
	unsigned count = 0;
	int *d_out, host[N];

	test_args(argc, argv);
	CHECK(cudaFree(0));     /* the runtime makes the primary context current */
	CHECK_DRV(p_cuCtxGetCurrent(&ctx));
	CHECK_DRV(p_cuModuleLoadData(&mod, mod_enum_fatbin));

	/* Functions of a module: every one, under the handle a lookup gives. */
	EXPECT_DRV(p_cuModuleGetFunctionCount(NULL, mod), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuModuleEnumerateFunctions(NULL, 3, mod), CUDA_ERROR_INVALID_VALUE);
	CHECK_DRV(p_cuModuleGetFunctionCount(&count, mod));
	REQUIRE(count == 3, "module holds %u functions, expected 3", count);
	fns[3] = (CUfunction)&count;    /* past the count: must stay untouched */
	CHECK_DRV(p_cuModuleEnumerateFunctions(fns, 3, mod));
	REQUIRE(fns[3] == (CUfunction)&count, "enumeration wrote past its count");
	std::set<std::string> seen;
	CUfunction f_set = NULL;
	for (int i = 0; i < 3; i++) {
		const char *name = NULL;

		CHECK_DRV(p_cuFuncGetName(&name, fns[i]));
		seen.insert(name);
		CHECK_DRV(p_cuModuleGetFunction(&byname, mod, name));
		REQUIRE(byname == fns[i], "%s: listed as %p, looked up as %p", name, (void *)fns[i],
			(void *)byname);
		if (!strcmp(name, "me_set"))
			f_set = fns[i];
		CUmodule owner = NULL;

		CHECK_DRV(p_cuFuncGetModule(&owner, fns[i]));
		REQUIRE(owner == mod, "%s: module %p, loaded as %p", name, (void *)owner, (void *)mod);
	}
	for (const char *n : names)
		REQUIRE(seen.count(n), "%s not listed", n);
	const std::set<CUfunction> all(fns, fns + 3);
	/* A shorter array gets that many. */
	fns[1] = fns[2] = NULL;
	CHECK_DRV(p_cuModuleEnumerateFunctions(fns, 1, mod));
	REQUIRE(fns[0] && !fns[1] && !fns[2], "asked for 1 function, got more");

	/* A listed function launches: out[i] = 7 + i. */
	int value = 7, n = N;
	void *args[] = { &d_out, &value, &n };
	CHECK(cudaMalloc(&d_out, sizeof(host)));
	CHECK_DRV(p_cuLaunchKernel(f_set, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
	CHECK(cudaMemcpy(host, d_out, sizeof(host), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		REQUIRE(host[i] == 7 + i, "out[%d] = %d, expected %d", i, host[i], 7 + i);

	/* The driver's module walk (export table 6e163fbe, slot 7). */
	static const CUuuid tools_module = { { (char)0x6e, 0x16, 0x3f, (char)0xbe, (char)0xb9, 0x58, 0x44,
		0x4d, (char)0x83, 0x5c, (char)0xe1, (char)0x82, (char)0xaf, (char)0xf1, (char)0x99, 0x1e } };
	const void **table = NULL;
	struct walk w;
	CHECK_DRV(p_cuGetExportTable((const void **)&table, &tools_module));
	REQUIRE(table, "no table 6e163fbe");
	printf("export table 6e163fbe: size word %#llx\n", (unsigned long long)(uintptr_t)table[0]);
	REQUIRE((uintptr_t)table[0] >= 8 * sizeof(void *), "table 6e163fbe has no slot 7");
	int walked = ((module_walk_fn)table[7])(ctx, mod, walk_cb, &w);
	printf("6e163fbe[7]: returned %d, %u callbacks, third argument %s\n", walked, w.calls,
	       w.third == (void *)mod ? "the module" : "not the module");
	/* The driver answers how many functions it walked (3 here, measured on the H200). */
	REQUIRE(walked == 3, "6e163fbe[7] returned %d, expected 3", walked);
	REQUIRE(w.calls == 3 && w.functions == all,
		"6e163fbe[7] walked %u functions, %zu of them listed ones", w.calls, w.functions.size());

	/* Kernels of a library, likewise. */
	CHECK_DRV(p_cuLibraryLoadData(&lib, mod_enum_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	EXPECT_DRV(p_cuLibraryGetKernelCount(NULL, lib), CUDA_ERROR_INVALID_VALUE);
	CHECK_DRV(p_cuLibraryGetKernelCount(&count, lib));
	REQUIRE(count == 3, "library holds %u kernels, expected 3", count);
	CHECK_DRV(p_cuLibraryEnumerateKernels(ks, 3, lib));
	seen.clear();
	CUkernel k_set = NULL;
	for (int i = 0; i < 3; i++) {
		const char *name = NULL;

		CHECK_DRV(p_cuKernelGetName(&name, ks[i]));
		seen.insert(name);
		CHECK_DRV(p_cuLibraryGetKernel(&kbyname, lib, name));
		REQUIRE(kbyname == ks[i], "%s: listed as %p, looked up as %p", name, (void *)ks[i],
			(void *)kbyname);
		if (!strcmp(name, "me_set"))
			k_set = ks[i];
		CUlibrary owner = NULL;

		CHECK_DRV(p_cuKernelGetLibrary(&owner, ks[i]));
		REQUIRE(owner == lib, "kernel %s: library %p, loaded as %p", name, (void *)owner,
			(void *)lib);
	}
	for (const char *n2 : names)
		REQUIRE(seen.count(n2), "kernel %s not listed", n2);
	CUfunction f_lib;
	value = -3;
	CHECK_DRV(p_cuKernelGetFunction(&f_lib, k_set));
	{
		/* A kernel's function belongs to its library's module. */
		CUmodule lib_mod, owner;

		CHECK_DRV(p_cuLibraryGetModule(&lib_mod, lib));
		CHECK_DRV(p_cuFuncGetModule(&owner, f_lib));
		REQUIRE(owner == lib_mod, "kernel function: module %p, library's %p", (void *)owner,
			(void *)lib_mod);
	}
	CHECK_DRV(p_cuLaunchKernel(f_lib, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CHECK(cudaMemcpy(host, d_out, sizeof(host), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		REQUIRE(host[i] == -3 + i, "library: out[%d] = %d, expected %d", i, host[i], -3 + i);

	CHECK_DRV(p_cuLibraryUnload(lib));
	CHECK_DRV(p_cuModuleUnload(mod));
	CHECK(cudaFree(d_out));
	test_pass("module_enumerate");
	return 0;
}
