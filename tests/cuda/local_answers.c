/* local_answers: the calls tern's shim answers without a round trip give
 * the driver's answers (run natively and through tern by tools/gpu-check):
 * the primary context's state across retain, release, set-flags and reset,
 * a device's fixed answers, peer access, stream priorities, errors for a
 * bad device; and many small deferred calls in a row, checked by content.
 * Then synchronisations after a copy to the host (guest-shim/completion.c):
 * answered in the guest when nothing was queued since on any stream, asked
 * after work the same or another thread queued, after another stream's work
 * (the legacy stream may wait for it), on another thread's per-thread
 * stream, and after a kernel that faults (its error, at every one).
 * In between, answers about kernels and functions (cuKernelGetFunction,
 * attributes, repeated sets, occupancy): each cached one equals the
 * driver's, and an unload, another set or a context destroy asks again.
 *
 * With --stats, through tern: the same run again in a child with
 * TERN_STATS=2, whose table (guest-shim/stats.c) must count the sequence
 * exactly: which calls were round trips, deferred or answered locally.
 * Loads libcuda.so.1 like any application (LD_LIBRARY_PATH). */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mod_a_fatbin.h"

static int failures;

#define EXPECT(call, want)                                                                     \
	do {                                                                                   \
		CUresult got_ = (call);                                                        \
		if (got_ != (want)) {                                                          \
			fprintf(stderr, "FAIL: %s returned %d, expected %d\n", #call, got_, (want)); \
			failures++;                                                            \
		}                                                                              \
	} while (0)
#define CHECK(cond)                                                                            \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			fprintf(stderr, "FAIL: %s (line %d)\n", #cond, __LINE__);              \
			failures++;                                                            \
		}                                                                              \
	} while (0)

#define DEFERRED_COUNT 3000
#define STATE_ASKS 50

static void *lib;
#define FN(name, type) ((type)dlsym(lib, name))

/* The sequence the --stats check counts: keep the two in step. */
static void run(void)
{
	CUresult (*init)(unsigned) = FN("cuInit", CUresult (*)(unsigned));
	CUresult (*count)(int *) = FN("cuDeviceGetCount", CUresult (*)(int *));
	CUresult (*get)(CUdevice *, int) = FN("cuDeviceGet", CUresult (*)(CUdevice *, int));
	CUresult (*name)(char *, int, CUdevice) = FN("cuDeviceGetName", CUresult (*)(char *, int, CUdevice));
	CUresult (*total)(size_t *, CUdevice) = FN("cuDeviceTotalMem_v2", CUresult (*)(size_t *, CUdevice));
	CUresult (*uuid)(CUuuid *, CUdevice) = FN("cuDeviceGetUuid_v2", CUresult (*)(CUuuid *, CUdevice));
	CUresult (*state)(CUdevice, unsigned *, int *) =
		FN("cuDevicePrimaryCtxGetState", CUresult (*)(CUdevice, unsigned *, int *));
	CUresult (*retain)(CUcontext *, CUdevice) = FN("cuDevicePrimaryCtxRetain", CUresult (*)(CUcontext *, CUdevice));
	CUresult (*release)(CUdevice) = FN("cuDevicePrimaryCtxRelease_v2", CUresult (*)(CUdevice));
	CUresult (*set_flags)(CUdevice, unsigned) = FN("cuDevicePrimaryCtxSetFlags_v2", CUresult (*)(CUdevice, unsigned));
	CUresult (*reset)(CUdevice) = FN("cuDevicePrimaryCtxReset_v2", CUresult (*)(CUdevice));
	CUresult (*set_current)(CUcontext) = FN("cuCtxSetCurrent", CUresult (*)(CUcontext));
	CUresult (*ctx_flags)(unsigned *) = FN("cuCtxGetFlags", CUresult (*)(unsigned *));
	CUresult (*prio)(int *, int *) = FN("cuCtxGetStreamPriorityRange", CUresult (*)(int *, int *));
	CUresult (*peer)(int *, CUdevice, CUdevice) = FN("cuDeviceCanAccessPeer", CUresult (*)(int *, CUdevice, CUdevice));
	CUresult (*alloc)(CUdeviceptr *, size_t) = FN("cuMemAlloc_v2", CUresult (*)(CUdeviceptr *, size_t));
	CUresult (*memset_async)(CUdeviceptr, unsigned char, size_t, CUstream) =
		FN("cuMemsetD8Async", CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream));
	CUresult (*sync)(void) = FN("cuCtxSynchronize", CUresult (*)(void));
	CUresult (*dtoh)(void *, CUdeviceptr, size_t) = FN("cuMemcpyDtoH_v2", CUresult (*)(void *, CUdeviceptr, size_t));
	CUresult (*mem_free)(CUdeviceptr) = FN("cuMemFree_v2", CUresult (*)(CUdeviceptr));
	char name1[256], name2[256], shortname[4];
	unsigned flags = 99, f2 = 99;
	int n = 0, n2 = 0, active = -1, least = 1, greatest = 1, least2 = 2, greatest2 = 2, can = -1;
	CUdevice dev = -1, dev2 = -2;
	size_t mem1 = 0, mem2 = 1;
	CUuuid u1, u2;
	CUcontext ctx = NULL, ctx2 = NULL;
	CUdeviceptr d = 0;
	unsigned char *host = malloc(DEFERRED_COUNT);

	EXPECT(init(0), CUDA_SUCCESS);
	EXPECT(count(&n), CUDA_SUCCESS);
	EXPECT(count(&n2), CUDA_SUCCESS);
	CHECK(n >= 1 && n == n2);
	EXPECT(get(&dev, 0), CUDA_SUCCESS);
	EXPECT(get(&dev2, 0), CUDA_SUCCESS);
	CHECK(dev == dev2);
	EXPECT(get(&dev2, n), CUDA_ERROR_INVALID_DEVICE);
	EXPECT(name(name1, sizeof(name1), dev), CUDA_SUCCESS);
	EXPECT(name(name2, sizeof(name2), dev), CUDA_SUCCESS);
	CHECK(!strcmp(name1, name2));
	EXPECT(name(shortname, sizeof(shortname), dev), CUDA_SUCCESS);
	CHECK(strlen(shortname) == 3 && !strncmp(shortname, name1, 3));
	EXPECT(total(&mem1, dev), CUDA_SUCCESS);
	EXPECT(total(&mem2, dev), CUDA_SUCCESS);
	CHECK(mem1 && mem1 == mem2);
	EXPECT(uuid(&u1, dev), CUDA_SUCCESS);
	EXPECT(uuid(&u2, dev), CUDA_SUCCESS);
	CHECK(!memcmp(&u1, &u2, sizeof(u1)));
	EXPECT(state(n, &flags, &active), CUDA_ERROR_INVALID_DEVICE);
	EXPECT(state(dev, NULL, &active), CUDA_ERROR_INVALID_VALUE);

	/* Before any retain: inactive. */
	for (int i = 0; i < STATE_ASKS; i++)
		EXPECT(state(dev, &flags, &active), CUDA_SUCCESS);
	CHECK(active == 0);
	EXPECT(retain(&ctx, dev), CUDA_SUCCESS);
	EXPECT(retain(&ctx2, dev), CUDA_SUCCESS);
	CHECK(ctx && ctx == ctx2);
	EXPECT(state(dev, &flags, &active), CUDA_SUCCESS);
	CHECK(active == 1);
	EXPECT(release(dev), CUDA_SUCCESS);
	EXPECT(state(dev, &flags, &active), CUDA_SUCCESS);
	CHECK(active == 1);
	/* New flags are the worker's to tell once; then kept. */
	EXPECT(set_flags(dev, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
	EXPECT(state(dev, &flags, &active), CUDA_SUCCESS);
	CHECK((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC && active == 1);
	EXPECT(state(dev, &f2, &active), CUDA_SUCCESS);
	CHECK(f2 == flags);
	EXPECT(set_current(ctx), CUDA_SUCCESS);
	EXPECT(ctx_flags(&f2), CUDA_SUCCESS);
	CHECK((f2 & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC);
	EXPECT(prio(&least, &greatest), CUDA_SUCCESS);
	EXPECT(prio(&least2, &greatest2), CUDA_SUCCESS);
	CHECK(least == least2 && greatest == greatest2 && greatest <= least);
	EXPECT(peer(&can, dev, dev), CUDA_SUCCESS);
	CHECK(can == 0);
	EXPECT(peer(&can, dev, dev), CUDA_SUCCESS);
	CHECK(can == 0);

	/* Many small deferred calls in a row, each byte its own. */
	EXPECT(alloc(&d, DEFERRED_COUNT), CUDA_SUCCESS);
	for (int i = 0; i < DEFERRED_COUNT; i++)
		EXPECT(memset_async(d + i, (unsigned char)(i * 7 + 3), 1, NULL), CUDA_SUCCESS);
	EXPECT(sync(), CUDA_SUCCESS);
	EXPECT(dtoh(host, d, DEFERRED_COUNT), CUDA_SUCCESS);
	for (int i = 0; i < DEFERRED_COUNT; i++)
		if (host[i] != (unsigned char)(i * 7 + 3)) {
			fprintf(stderr, "FAIL: byte %d is %u\n", i, host[i]);
			failures++;
			break;
		}
	EXPECT(mem_free(d), CUDA_SUCCESS);

	/* The last release leaves it inactive; a reset ends every retain. */
	EXPECT(release(dev), CUDA_SUCCESS);
	EXPECT(state(dev, &flags, &active), CUDA_SUCCESS);
	CHECK(active == 0);
	EXPECT(retain(&ctx, dev), CUDA_SUCCESS);
	EXPECT(reset(dev), CUDA_SUCCESS);
	EXPECT(state(dev, &flags, &active), CUDA_SUCCESS);
	CHECK(active == 0);
	free(host);
}

#define KERNEL_ASKS 20
#define BIG_SMEM (64 * 1024)    /* over the 48 KiB a kernel gets without opting in */

/* Answers about kernels and functions (guest-shim/func_table.c): repeats
 * are local, and each unload, other set or context destroy makes the next
 * one ask again. The --stats check counts them: keep the two in step. */
static void kernel_run(void)
{
	CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice) =
		FN("cuCtxCreate_v4", CUresult (*)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice));
	CUresult (*ctx_destroy)(CUcontext) = FN("cuCtxDestroy_v2", CUresult (*)(CUcontext));
	CUresult (*pop)(CUcontext *) = FN("cuCtxPopCurrent_v2", CUresult (*)(CUcontext *));
	CUresult (*lib_load)(CUlibrary *, const void *, CUjit_option *, void **, unsigned, CUlibraryOption *,
			     void **, unsigned) =
		FN("cuLibraryLoadData", CUresult (*)(CUlibrary *, const void *, CUjit_option *, void **, unsigned,
						     CUlibraryOption *, void **, unsigned));
	CUresult (*lib_unload)(CUlibrary) = FN("cuLibraryUnload", CUresult (*)(CUlibrary));
	CUresult (*get_kernel)(CUkernel *, CUlibrary, const char *) =
		FN("cuLibraryGetKernel", CUresult (*)(CUkernel *, CUlibrary, const char *));
	CUresult (*kernel_fn)(CUfunction *, CUkernel) = FN("cuKernelGetFunction", CUresult (*)(CUfunction *, CUkernel));
	CUresult (*kernel_get)(int *, CUfunction_attribute, CUkernel, CUdevice) =
		FN("cuKernelGetAttribute", CUresult (*)(int *, CUfunction_attribute, CUkernel, CUdevice));
	CUresult (*kernel_set)(CUfunction_attribute, int, CUkernel, CUdevice) =
		FN("cuKernelSetAttribute", CUresult (*)(CUfunction_attribute, int, CUkernel, CUdevice));
	CUresult (*func_get)(int *, CUfunction_attribute, CUfunction) =
		FN("cuFuncGetAttribute", CUresult (*)(int *, CUfunction_attribute, CUfunction));
	CUresult (*func_set)(CUfunction, CUfunction_attribute, int) =
		FN("cuFuncSetAttribute", CUresult (*)(CUfunction, CUfunction_attribute, int));
	CUresult (*occupancy)(int *, CUfunction, int, size_t) =
		FN("cuOccupancyMaxActiveBlocksPerMultiprocessor", CUresult (*)(int *, CUfunction, int, size_t));
	CUresult (*occupancy_flags)(int *, CUfunction, int, size_t, unsigned) =
		FN("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
		   CUresult (*)(int *, CUfunction, int, size_t, unsigned));
	CUresult (*mod_load)(CUmodule *, const void *) = FN("cuModuleLoadData", CUresult (*)(CUmodule *, const void *));
	CUresult (*mod_unload)(CUmodule) = FN("cuModuleUnload", CUresult (*)(CUmodule));
	CUresult (*get_function)(CUfunction *, CUmodule, const char *) =
		FN("cuModuleGetFunction", CUresult (*)(CUfunction *, CUmodule, const char *));
	CUresult (*kernel_library)(CUlibrary *, CUkernel) = FN("cuKernelGetLibrary", CUresult (*)(CUlibrary *, CUkernel));
	CUresult (*library_module)(CUmodule *, CUlibrary) = FN("cuLibraryGetModule", CUresult (*)(CUmodule *, CUlibrary));
	CUresult (*enum_kernels)(CUkernel *, unsigned, CUlibrary) =
		FN("cuLibraryEnumerateKernels", CUresult (*)(CUkernel *, unsigned, CUlibrary));
	CUresult (*clusters)(int *, CUfunction, const CUlaunchConfig *) =
		FN("cuOccupancyMaxActiveClusters", CUresult (*)(int *, CUfunction, const CUlaunchConfig *));
	CUresult (*cluster_size)(int *, CUfunction, const CUlaunchConfig *) =
		FN("cuOccupancyMaxPotentialClusterSize", CUresult (*)(int *, CUfunction, const CUlaunchConfig *));
	const CUfunction_attribute dyn = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
	const CUfunction_attribute non_portable = CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED;
	CUcontext c1 = NULL, c2 = NULL, popped = NULL;
	CUlibrary library = NULL, library2 = NULL, lib_of = NULL;
	CUkernel k = NULL, k2 = NULL, listed = NULL;
	CUfunction f1 = NULL, f = NULL, fm = NULL, fl = NULL;
	CUmodule mod = NULL, lm = NULL, lm2 = NULL;
	int threads = -1, v = -1, small = -1, big = -1, b = -1, fm_small = -1;
	int c = -1, c2_blocks = -1, c4_blocks = -1, c_big = -1, size = -1, size16 = -1;
	CUresult r1, r2;
	/* Clusters of 2 (cl[0]); cl[1] is a second attribute that changes the
	 * list, not the answer. */
	CUlaunchAttribute cl[2];
	CUlaunchConfig cfg = {
		.gridDimX = 16, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1,
		.blockDimZ = 1, .sharedMemBytes = 0, .attrs = cl, .numAttrs = 1,
	};

	memset(cl, 0, sizeof(cl));
	cl[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
	cl[0].value.clusterDim.x = 2;
	cl[0].value.clusterDim.y = 1;
	cl[0].value.clusterDim.z = 1;
	cl[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
	cl[1].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_DEFAULT;

	EXPECT(ctx_create(&c1, NULL, 0, 0), CUDA_SUCCESS);
	EXPECT(lib_load(&library, mod_a_fatbin, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
	EXPECT(get_kernel(&k, library, "ma_iota"), CUDA_SUCCESS);

	/* Lookups (guest-shim/lookup_table.c): the same library and name are
	 * the same kernel; an error is asked every time. */
	for (int i = 0; i < KERNEL_ASKS; i++) {
		EXPECT(get_kernel(&k2, library, "ma_iota"), CUDA_SUCCESS);
		CHECK(k2 == k);
	}
	EXPECT(get_kernel(&k2, library, "ma_missing"), CUDA_ERROR_NOT_FOUND);
	EXPECT(get_kernel(&k2, library, "ma_missing"), CUDA_ERROR_NOT_FOUND);
	EXPECT(get_kernel(NULL, library, "ma_iota"), CUDA_ERROR_INVALID_VALUE);
	for (int i = 0; i < 2; i++) {
		lib_of = NULL;
		EXPECT(kernel_library(&lib_of, k), CUDA_SUCCESS);
		CHECK(lib_of == library);
	}
	EXPECT(library_module(&lm, library), CUDA_SUCCESS);
	EXPECT(library_module(&lm2, library), CUDA_SUCCESS);
	CHECK(lm && lm == lm2);
	EXPECT(get_function(&fl, lm, "ma_iota"), CUDA_SUCCESS);
	EXPECT(get_function(&f, lm, "ma_iota"), CUDA_SUCCESS);
	CHECK(fl && f == fl);
	/* Another load of the image: its own kernel, whose library the
	 * enumeration tells; unloaded, the driver's errors. */
	EXPECT(lib_load(&library2, mod_a_fatbin, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
	EXPECT(enum_kernels(&listed, 1, library2), CUDA_SUCCESS);
	EXPECT(kernel_library(&lib_of, listed), CUDA_SUCCESS);
	CHECK(lib_of == library2);
	EXPECT(get_kernel(&k2, library2, "ma_iota"), CUDA_SUCCESS);
	CHECK(k2 == listed && k2 != k);
	EXPECT(get_kernel(&k2, library2, "ma_iota"), CUDA_SUCCESS);
	CHECK(k2 == listed);
	EXPECT(lib_unload(library2), CUDA_SUCCESS);
	CHECK(get_kernel(&k2, library2, "ma_iota") != CUDA_SUCCESS);
	/* cuKernelGetLibrary of the unloaded library's kernel: CUDA_SUCCESS
	 * on the H100 (580.159), undocumented: not checked. */
	EXPECT(get_kernel(&k2, library, "ma_iota"), CUDA_SUCCESS);
	CHECK(k2 == k);

	/* cuKernelGetFunction: asked once per context. */
	EXPECT(kernel_fn(&f1, k), CUDA_SUCCESS);
	for (int i = 0; i < KERNEL_ASKS; i++) {
		EXPECT(kernel_fn(&f, k), CUDA_SUCCESS);
		CHECK(f == f1);
	}
	EXPECT(kernel_fn(NULL, k), CUDA_ERROR_INVALID_VALUE);

	/* Fixed attributes: the kernel's and its function's agree. */
	EXPECT(kernel_get(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, 0), CUDA_SUCCESS);
	EXPECT(kernel_get(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, 0), CUDA_SUCCESS);
	CHECK(v == threads && threads >= 128);
	EXPECT(func_get(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f1), CUDA_SUCCESS);
	CHECK(v == threads);

	/* Occupancy: the same question once; BIG_SMEM fits no block yet. */
	EXPECT(occupancy(&small, f1, 128, 0), CUDA_SUCCESS);
	CHECK(small >= 1);
	for (int i = 0; i < KERNEL_ASKS; i++) {
		EXPECT(occupancy(&b, f1, 128, 0), CUDA_SUCCESS);
		CHECK(b == small);
	}
	EXPECT(occupancy_flags(&b, f1, 128, 0, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE), CUDA_SUCCESS);
	EXPECT(occupancy(&b, f1, 128, BIG_SMEM), CUDA_SUCCESS);
	CHECK(b == 0);

	/* Clusters: the same configuration once; another attribute list, size
	 * or shared memory asks; an error is asked every time. */
	EXPECT(clusters(&c2_blocks, f1, &cfg), CUDA_SUCCESS);
	CHECK(c2_blocks >= 1);
	for (int i = 0; i < KERNEL_ASKS; i++) {
		c = -1;
		EXPECT(clusters(&c, f1, &cfg), CUDA_SUCCESS);
		CHECK(c == c2_blocks);
	}
	cfg.numAttrs = 2;
	EXPECT(clusters(&c, f1, &cfg), CUDA_SUCCESS);
	CHECK(c == c2_blocks);
	cfg.numAttrs = 1;
	cl[0].value.clusterDim.x = 4;
	EXPECT(clusters(&c4_blocks, f1, &cfg), CUDA_SUCCESS);
	CHECK(c4_blocks >= 1 && c4_blocks <= c2_blocks);
	EXPECT(clusters(&c, f1, &cfg), CUDA_SUCCESS);
	CHECK(c == c4_blocks);
	cl[0].value.clusterDim.x = 32;  /* past any cluster size */
	r1 = clusters(&c, f1, &cfg);
	r2 = clusters(&c, f1, &cfg);
	CHECK(r1 != CUDA_SUCCESS && r2 == r1);
	cl[0].value.clusterDim.x = 2;
	cfg.sharedMemBytes = BIG_SMEM;
	c = -1;
	r1 = clusters(&c, f1, &cfg);
	CHECK(r1 != CUDA_SUCCESS || c == 0);

	/* A set repeated is local; the next occupancy asks and sees it. */
	for (int i = 0; i < KERNEL_ASKS; i++)
		EXPECT(kernel_set(dyn, BIG_SMEM, k, 0), CUDA_SUCCESS);
	for (int i = 0; i < 2; i++) {
		v = -1;
		EXPECT(func_get(&v, dyn, f1), CUDA_SUCCESS);
		CHECK(v == BIG_SMEM);
		v = -1;
		EXPECT(kernel_get(&v, dyn, k, 0), CUDA_SUCCESS);
		CHECK(v == BIG_SMEM);
	}
	EXPECT(occupancy(&big, f1, 128, BIG_SMEM), CUDA_SUCCESS);
	CHECK(big >= 1);
	EXPECT(occupancy(&b, f1, 128, BIG_SMEM), CUDA_SUCCESS);
	CHECK(b == big);
	EXPECT(clusters(&c_big, f1, &cfg), CUDA_SUCCESS);
	CHECK(c_big >= 1);
	EXPECT(clusters(&c, f1, &cfg), CUDA_SUCCESS);
	CHECK(c == c_big);
	/* Clusters of 16 need the non-portable opt-in: the set asks again. */
	cfg.sharedMemBytes = 0;
	cfg.numAttrs = 0;
	EXPECT(cluster_size(&size, f1, &cfg), CUDA_SUCCESS);
	CHECK(size >= 1);
	EXPECT(cluster_size(&v, f1, &cfg), CUDA_SUCCESS);
	CHECK(v == size);
	cfg.numAttrs = 1;
	cl[0].value.clusterDim.x = 16;
	c = -1;
	r1 = clusters(&c, f1, &cfg);
	CHECK(r1 != CUDA_SUCCESS || c == 0);
	EXPECT(kernel_set(non_portable, 1, k, 0), CUDA_SUCCESS);
	EXPECT(clusters(&c, f1, &cfg), CUDA_SUCCESS);
	CHECK(c >= 1);
	EXPECT(clusters(&b, f1, &cfg), CUDA_SUCCESS);
	CHECK(b == c);
	cfg.numAttrs = 0;
	EXPECT(cluster_size(&size16, f1, &cfg), CUDA_SUCCESS);
	CHECK(size16 >= size);
	EXPECT(kernel_set(non_portable, 0, k, 0), CUDA_SUCCESS);
	cfg.numAttrs = 1;
	cl[0].value.clusterDim.x = 2;
	cfg.sharedMemBytes = BIG_SMEM;
	/* Another value: asked, and occupancy with it. */
	EXPECT(kernel_set(dyn, 0, k, 0), CUDA_SUCCESS);
	EXPECT(occupancy(&b, f1, 128, BIG_SMEM), CUDA_SUCCESS);
	CHECK(b == 0);
	EXPECT(kernel_get(&v, dyn, k, 0), CUDA_SUCCESS);
	CHECK(v == 0);
	EXPECT(func_get(&v, dyn, f1), CUDA_SUCCESS);
	CHECK(v == 0);
	/* The function's set aliases the kernel's: each forgets the other. */
	EXPECT(func_set(f1, dyn, BIG_SMEM), CUDA_SUCCESS);
	EXPECT(func_set(f1, dyn, BIG_SMEM), CUDA_SUCCESS);
	EXPECT(occupancy(&b, f1, 128, BIG_SMEM), CUDA_SUCCESS);
	CHECK(b == big);
	EXPECT(kernel_set(dyn, 0, k, 0), CUDA_SUCCESS);
	EXPECT(func_set(f1, dyn, BIG_SMEM), CUDA_SUCCESS);
	EXPECT(func_get(&v, dyn, f1), CUDA_SUCCESS);
	CHECK(v == BIG_SMEM);
	/* A failed set is the driver's to answer, every time. */
	EXPECT(kernel_set(dyn, -1, k, 0), CUDA_ERROR_INVALID_VALUE);
	EXPECT(kernel_set(dyn, -1, k, 0), CUDA_ERROR_INVALID_VALUE);
	EXPECT(kernel_set(dyn, BIG_SMEM, k, 0), CUDA_SUCCESS);

	/* Any unload forgets: a module's function is gone, the kernel asks again. */
	EXPECT(mod_load(&mod, mod_a_fatbin), CUDA_SUCCESS);
	EXPECT(get_function(&fm, mod, "ma_iota"), CUDA_SUCCESS);
	EXPECT(get_function(&f, mod, "ma_iota"), CUDA_SUCCESS);
	CHECK(f == fm);
	EXPECT(occupancy(&fm_small, fm, 128, 0), CUDA_SUCCESS);
	EXPECT(occupancy(&b, fm, 128, 0), CUDA_SUCCESS);
	CHECK(b == fm_small && fm_small == small);
	EXPECT(func_set(fm, dyn, BIG_SMEM), CUDA_SUCCESS);
	EXPECT(func_set(fm, dyn, BIG_SMEM), CUDA_SUCCESS);
	EXPECT(mod_unload(mod), CUDA_SUCCESS);
	EXPECT(func_get(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fm), CUDA_ERROR_INVALID_HANDLE);
	/* A cached answer would be CUDA_SUCCESS: the driver's is an error. */
	CHECK(occupancy(&b, fm, 128, 0) != CUDA_SUCCESS);
	CHECK(func_set(fm, dyn, BIG_SMEM) != CUDA_SUCCESS);
	CHECK(get_function(&f, mod, "ma_iota") != CUDA_SUCCESS);
	EXPECT(kernel_fn(&f, k), CUDA_SUCCESS);
	CHECK(f == f1);
	EXPECT(kernel_set(dyn, BIG_SMEM, k, 0), CUDA_SUCCESS);
	EXPECT(occupancy(&b, f1, 128, BIG_SMEM), CUDA_SUCCESS);
	CHECK(b == big);
	EXPECT(clusters(&c, f1, &cfg), CUDA_SUCCESS);
	CHECK(c == c_big);
	EXPECT(clusters(&c, f1, &cfg), CUDA_SUCCESS);
	CHECK(c == c_big);

	/* Another context has its own function; destroying it forgets. */
	EXPECT(ctx_create(&c2, NULL, 0, 0), CUDA_SUCCESS);
	EXPECT(kernel_fn(&f, k), CUDA_SUCCESS);
	EXPECT(kernel_fn(&f, k), CUDA_SUCCESS);
	EXPECT(pop(&popped), CUDA_SUCCESS);
	CHECK(popped == c2);
	EXPECT(kernel_fn(&f, k), CUDA_SUCCESS);
	CHECK(f == f1);
	EXPECT(ctx_destroy(c2), CUDA_SUCCESS);
	EXPECT(kernel_fn(&f, k), CUDA_SUCCESS);
	CHECK(f == f1);
	EXPECT(occupancy(&b, f1, 128, BIG_SMEM), CUDA_SUCCESS);
	CHECK(b == big);
	EXPECT(clusters(&c, f1, &cfg), CUDA_SUCCESS);
	CHECK(c == c_big);
	/* The library's kernel outlives contexts; its module is asked again. */
	EXPECT(get_kernel(&k2, library, "ma_iota"), CUDA_SUCCESS);
	CHECK(k2 == k);
	EXPECT(library_module(&lm2, library), CUDA_SUCCESS);
	CHECK(lm2 == lm);
	EXPECT(kernel_set(dyn, BIG_SMEM, k, 0), CUDA_SUCCESS);

	EXPECT(lib_unload(library), CUDA_SUCCESS);
	EXPECT(ctx_destroy(c1), CUDA_SUCCESS);
}

#define SYNC_BYTES 16
static CUcontext sync_ctx;
static CUdeviceptr sync_dev;

/* Another thread: queues a memset on the legacy stream. */
static void *sync_thread_queue(void *unused)
{
	CUresult (*set_current)(CUcontext) = FN("cuCtxSetCurrent", CUresult (*)(CUcontext));
	CUresult (*memset_async)(CUdeviceptr, unsigned char, size_t, CUstream) =
		FN("cuMemsetD8Async", CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream));

	(void)unused;
	EXPECT(set_current(sync_ctx), CUDA_SUCCESS);
	EXPECT(memset_async(sync_dev, 4, SYNC_BYTES, NULL), CUDA_SUCCESS);
	return NULL;
}

/* Another thread: synchronises its own per-thread default stream. */
static void *sync_thread_per_thread(void *unused)
{
	CUresult (*set_current)(CUcontext) = FN("cuCtxSetCurrent", CUresult (*)(CUcontext));
	CUresult (*sync_ptsz)(CUstream) = FN("cuStreamSynchronize_ptsz", CUresult (*)(CUstream));

	(void)unused;
	EXPECT(set_current(sync_ctx), CUDA_SUCCESS);
	EXPECT(sync_ptsz(NULL), CUDA_SUCCESS);
	return NULL;
}

static void sync_thread_run(void *(*fn)(void *))
{
	pthread_t t;

	if (pthread_create(&t, NULL, fn, NULL)) {
		fprintf(stderr, "FAIL: pthread_create\n");
		failures++;
		return;
	}
	pthread_join(t, NULL);
}

/* Every byte of @h is @want. */
static void sync_bytes_check(const unsigned char *h, unsigned char want, int line)
{
	for (int i = 0; i < SYNC_BYTES; i++)
		if (h[i] != want) {
			fprintf(stderr, "FAIL: line %d: byte %d is %u, expected %u\n", line, i, h[i], want);
			failures++;
			return;
		}
}

/* Synchronisations after copies to the host; the --stats check counts
 * which were asked: keep the two in step. Ends with a faulted context. */
static void sync_run(void)
{
	CUresult (*retain)(CUcontext *, CUdevice) = FN("cuDevicePrimaryCtxRetain", CUresult (*)(CUcontext *, CUdevice));
	CUresult (*set_current)(CUcontext) = FN("cuCtxSetCurrent", CUresult (*)(CUcontext));
	CUresult (*alloc)(CUdeviceptr *, size_t) = FN("cuMemAlloc_v2", CUresult (*)(CUdeviceptr *, size_t));
	CUresult (*stream_create)(CUstream *, unsigned) = FN("cuStreamCreate", CUresult (*)(CUstream *, unsigned));
	CUresult (*load)(CUmodule *, const void *) = FN("cuModuleLoadData", CUresult (*)(CUmodule *, const void *));
	CUresult (*get_function)(CUfunction *, CUmodule, const char *) =
		FN("cuModuleGetFunction", CUresult (*)(CUfunction *, CUmodule, const char *));
	CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			   CUstream, void **, void **) =
		FN("cuLaunchKernel", CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
						  unsigned, unsigned, CUstream, void **, void **));
	CUresult (*memset_async)(CUdeviceptr, unsigned char, size_t, CUstream) =
		FN("cuMemsetD8Async", CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream));
	CUresult (*dtoh)(void *, CUdeviceptr, size_t) = FN("cuMemcpyDtoH_v2", CUresult (*)(void *, CUdeviceptr, size_t));
	CUresult (*dtoh_ptds)(void *, CUdeviceptr, size_t) =
		FN("cuMemcpyDtoH_v2_ptds", CUresult (*)(void *, CUdeviceptr, size_t));
	CUresult (*dtoh_async)(void *, CUdeviceptr, size_t, CUstream) =
		FN("cuMemcpyDtoHAsync_v2", CUresult (*)(void *, CUdeviceptr, size_t, CUstream));
	CUresult (*sync)(CUstream) = FN("cuStreamSynchronize", CUresult (*)(CUstream));
	CUresult (*sync_ptsz)(CUstream) = FN("cuStreamSynchronize_ptsz", CUresult (*)(CUstream));
	CUresult (*query)(CUstream) = FN("cuStreamQuery", CUresult (*)(CUstream));
	CUresult (*ctx_sync)(void) = FN("cuCtxSynchronize", CUresult (*)(void));
	unsigned char h[SYNC_BYTES];
	CUstream a = NULL, b = NULL;
	CUmodule mod = NULL;
	CUfunction iota = NULL;
	int *wild = (int *)8, base = 0, count = 1;
	void *args[] = { &wild, &base, &count };

	EXPECT(retain(&sync_ctx, 0), CUDA_SUCCESS);
	EXPECT(set_current(sync_ctx), CUDA_SUCCESS);
	EXPECT(alloc(&sync_dev, 4096), CUDA_SUCCESS);
	EXPECT(stream_create(&a, CU_STREAM_DEFAULT), CUDA_SUCCESS);
	EXPECT(stream_create(&b, CU_STREAM_DEFAULT), CUDA_SUCCESS);
	EXPECT(load(&mod, mod_a_fatbin), CUDA_SUCCESS);
	EXPECT(get_function(&iota, mod, "ma_iota"), CUDA_SUCCESS);

	/* Nothing queued since the copy: its stream, then the context. */
	EXPECT(memset_async(sync_dev, 1, SYNC_BYTES, NULL), CUDA_SUCCESS);
	EXPECT(dtoh(h, sync_dev, SYNC_BYTES), CUDA_SUCCESS);
	sync_bytes_check(h, 1, __LINE__);
	EXPECT(sync(NULL), CUDA_SUCCESS);
	EXPECT(sync(CU_STREAM_LEGACY), CUDA_SUCCESS);
	EXPECT(query(NULL), CUDA_SUCCESS);
	EXPECT(ctx_sync(), CUDA_SUCCESS);               /* asked: other streams */
	EXPECT(ctx_sync(), CUDA_SUCCESS);
	EXPECT(sync(NULL), CUDA_SUCCESS);

	/* Work the same thread queued after the copy. */
	EXPECT(dtoh(h, sync_dev, SYNC_BYTES), CUDA_SUCCESS);
	EXPECT(memset_async(sync_dev, 2, SYNC_BYTES, NULL), CUDA_SUCCESS);
	EXPECT(sync(NULL), CUDA_SUCCESS);               /* asked */
	EXPECT(dtoh(h, sync_dev, SYNC_BYTES), CUDA_SUCCESS);
	sync_bytes_check(h, 2, __LINE__);

	/* Another stream's work before the copy: the legacy stream waits for it. */
	EXPECT(memset_async(sync_dev, 3, SYNC_BYTES, a), CUDA_SUCCESS);
	EXPECT(dtoh_async(h, sync_dev + 64, SYNC_BYTES, b), CUDA_SUCCESS);
	EXPECT(sync(b), CUDA_SUCCESS);
	EXPECT(sync(NULL), CUDA_SUCCESS);               /* asked */
	EXPECT(sync(a), CUDA_SUCCESS);                  /* asked */
	EXPECT(query(a), CUDA_SUCCESS);
	EXPECT(dtoh(h, sync_dev, SYNC_BYTES), CUDA_SUCCESS);
	sync_bytes_check(h, 3, __LINE__);

	/* Another thread queued work after the copy. */
	sync_thread_run(sync_thread_queue);
	EXPECT(sync(NULL), CUDA_SUCCESS);               /* asked */

	/* A per-thread default stream is its own thread's. */
	EXPECT(dtoh_ptds(h, sync_dev, SYNC_BYTES), CUDA_SUCCESS);
	sync_bytes_check(h, 4, __LINE__);
	EXPECT(sync_ptsz(NULL), CUDA_SUCCESS);
	sync_thread_run(sync_thread_per_thread);        /* asked */

	/* A kernel that faults after the copy: every synchronisation asks. */
	EXPECT(dtoh(h, sync_dev, SYNC_BYTES), CUDA_SUCCESS);
	EXPECT(launch(iota, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
	EXPECT(sync(NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(sync(NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(query(NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(ctx_sync(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

/* One row of the child's table: calls, round trips, deferred, local. */
struct row {
	const char *name;
	unsigned long long calls, trips, deferred, local;
};

/* What the sequence above costs through tern. */
static const struct row want[] = {
	/* Asked: a bad device, the first state, after set-flags, after the reset. */
	{ "cuDevicePrimaryCtxGetState", STATE_ASKS + 8, 4, 0, STATE_ASKS + 4 },
	{ "cuDeviceGetCount", 2, 1, 0, 1 },
	{ "cuDeviceGet", 3, 2, 0, 1 },
	{ "cuDeviceGetName", 3, 1, 0, 2 },
	{ "cuDeviceTotalMem_v2", 2, 1, 0, 1 },
	{ "cuDeviceGetUuid_v2", 2, 1, 0, 1 },
	/* The last: sync_run's, after the reset. */
	{ "cuDevicePrimaryCtxRetain", 4, 3, 0, 1 },
	{ "cuDevicePrimaryCtxRelease_v2", 2, 1, 0, 1 },
	{ "cuDevicePrimaryCtxSetFlags_v2", 1, 1, 0, 0 },
	{ "cuDevicePrimaryCtxReset_v2", 1, 1, 0, 0 },
	{ "cuCtxGetFlags", 1, 0, 0, 1 },
	{ "cuCtxGetStreamPriorityRange", 2, 1, 0, 1 },
	{ "cuDeviceCanAccessPeer", 2, 1, 0, 1 },
	{ "cuMemsetD8Async", DEFERRED_COUNT + 4, 0, DEFERRED_COUNT + 4, 0 },
	{ "cuCtxSetCurrent", 4, 0, 0, 4 },
	/* kernel_run: asked the first time, after the unload, in the other
	 * context and after its destroy; a NULL output is answered at once. */
	{ "cuKernelGetFunction", KERNEL_ASKS + 7, 4, 0, KERNEL_ASKS + 3 },
	/* Each repeat is local; a settable one is asked after its set. */
	{ "cuKernelGetAttribute", 5, 3, 0, 2 },
	/* Also asked: after the second sets, and of the unloaded function. */
	{ "cuFuncGetAttribute", 6, 5, 0, 1 },
	/* Asked: the first, the non-portable opt-in and back, the other value,
	 * after the function's set, both failures, after them, after the unload
	 * and after the destroy. */
	{ "cuKernelSetAttribute", KERNEL_ASKS + 9, 10, 0, KERNEL_ASKS - 1 },
	/* A repeat on each function is local; after the unload it is asked. */
	{ "cuFuncSetAttribute", 6, 4, 0, 2 },
	/* Asked: each new question, and after each set and forget. */
	{ "cuOccupancyMaxActiveBlocksPerMultiprocessor", KERNEL_ASKS + 11, 9, 0, KERNEL_ASKS + 2 },
	{ "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 1, 1, 0, 0 },
	/* Asked: the first, another attribute list, another size, both errors,
	 * BIG_SMEM before and after the opt-in, 16 before and after the
	 * non-portable opt-in, after the unload and after the destroy. */
	{ "cuOccupancyMaxActiveClusters", KERNEL_ASKS + 15, 11, 0, KERNEL_ASKS + 4 },
	{ "cuOccupancyMaxPotentialClusterSize", 3, 2, 0, 1 },
	/* Asked: the first, both missing names, library2's and after its unload. */
	{ "cuLibraryGetKernel", KERNEL_ASKS + 9, 5, 0, KERNEL_ASKS + 4 },
	/* Known from the lookup and the enumeration; asked after the unload. */
	{ "cuKernelGetLibrary", 3, 0, 0, 3 },
	{ "cuLibraryEnumerateKernels", 1, 1, 0, 0 },
	/* Asked again after a context destroy. */
	{ "cuLibraryGetModule", 3, 2, 0, 1 },
	/* Asked: the library's module's, the module's, after its unload and
	 * sync_run's. */
	{ "cuModuleGetFunction", 6, 4, 0, 2 },
	{ "cuLibraryLoadData", 2, 2, 0, 0 },
	{ "cuLibraryUnload", 2, 2, 0, 0 },
	/* sync_run: asked after other work, another stream's, another
	 * thread's and the fault; answered after nothing. */
	{ "cuStreamSynchronize", 10, 6, 0, 4 },
	{ "cuStreamSynchronize_ptsz", 2, 1, 0, 1 },
	{ "cuStreamQuery", 3, 1, 0, 2 },
	{ "cuCtxSynchronize", 4, 3, 0, 1 },
};

static int stats_check(const char *self)
{
	char log[] = "/tmp/local_answers_XXXXXX", line[512];
	unsigned found[sizeof(want) / sizeof(want[0])] = { 0 };
	int fd = mkstemp(log), status = 0;
	pid_t pid;
	FILE *f;

	if (fd < 0)
		return 1;
	close(fd);
	pid = fork();
	if (pid == 0) {
		setenv("TERN_STATS", "2", 1);
		setenv("TERN_LOG_FILE", log, 1);
		execl(self, self, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "FAIL: the counted run failed (status %#x)\n", status);
		return 1;
	}
	f = fopen(log, "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *at = strstr(line, "shim: ");
		char name[128];
		struct row r;

		if (at && strstr(at, "round trips: "))
			printf("local_answers: %s", at + 6);
		if (!at || sscanf(at + 6, "%127s %llu %llu %llu %llu", name, &r.calls, &r.trips, &r.deferred, &r.local) != 5)
			continue;
		for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
			if (strcmp(name, want[i].name))
				continue;
			found[i]++;
			if (r.calls != want[i].calls || r.trips != want[i].trips || r.deferred != want[i].deferred ||
			    r.local != want[i].local) {
				fprintf(stderr, "FAIL: %s: %llu calls, %llu round trips, %llu deferred, %llu local; "
					"expected %llu, %llu, %llu, %llu\n", name, r.calls, r.trips, r.deferred, r.local,
					want[i].calls, want[i].trips, want[i].deferred, want[i].local);
				failures++;
			}
		}
	}
	if (f)
		fclose(f);
	for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (found[i] != 1) {
			fprintf(stderr, "FAIL: %s: %u rows in the table\n", want[i].name, found[i]);
			failures++;
		}
	unlink(log);
	return failures;
}

int main(int argc, char **argv)
{
	lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "FAIL: %s\n", dlerror());
		return 1;
	}
	/* Only through tern (TERN_SERVER set): a driver has no table to count with. */
	if (argc > 1 && !strcmp(argv[1], "--stats") && getenv("TERN_SERVER")) {
		if (stats_check(argv[0]))
			return 1;
	}
	run();
	kernel_run();
	sync_run();
	if (failures)
		return 1;
	printf("PASS local_answers\n");
	return 0;
}
