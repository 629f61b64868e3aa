/* Unit tests of the sim backend, through its table as the executor calls it.
 *
 * argv: kernel plugin (.so), then the fatbin and cubin nvcc built from
 * kernels_test.cu ("-" when nvcc was absent: the image tests skip).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend.h"
#include "sim.h"

#define MIB (1ull << 20)
#define SIM_TEST_MEMORY (64 * MIB)
#define HINT ((CUdeviceptr)0x6f0000000000ull)

static const char *plugin_path, *fatbin_path, *cubin_path;
static struct backend *be;
static CUcontext ctx;

static void *file_read(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	void *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*size = (size_t)n;
	return buf;
}

static void *image_or_skip(const char *path)
{
	size_t size;
	void *img;

	if (!path || !strcmp(path, "-"))
		skip();
	img = file_read(path, &size);
	assert_non_null(img);
	return img;
}

static int sim_open(bool skip_missing)
{
	const char *plugins[] = { plugin_path, NULL };
	struct backend_config cfg = {
		.sim_kernels = plugins,
		.sim_device_count = 2,
		.sim_memory = SIM_TEST_MEMORY,
		.sim_skip_missing = skip_missing,
	};

	if (backend_sim_open(&cfg, &be))
		return -1;
	if (be->cuInit(0) || be->cuDevicePrimaryCtxRetain(&ctx, 0) || be->cuCtxSetCurrent(ctx))
		return -1;
	return 0;
}

static int group_setup(void **state)
{
	return sim_open(false);
}

static int group_teardown(void **state)
{
	be->cuDevicePrimaryCtxRelease(0);
	be->close(be);
	return 0;
}

/* An arena piece: reserved, created, mapped and made accessible. */
struct piece {
	CUdeviceptr va;
	size_t size;
	CUmemGenericAllocationHandle h;
};

static CUmemAllocationProp prop_dev(int dev)
{
	CUmemAllocationProp p = { 0 };

	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	return p;
}

static void piece_get(struct piece *p, size_t size, CUdeviceptr hint)
{
	CUmemAllocationProp prop = prop_dev(0);
	CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

	p->size = size;
	assert_int_equal(be->cuMemAddressReserve(&p->va, size, 0, hint, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemCreate(&p->h, size, &prop, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemMap(p->va, size, 0, p->h, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemSetAccess(p->va, size, &acc, 1), CUDA_SUCCESS);
}

static void piece_put(struct piece *p)
{
	assert_int_equal(be->cuMemUnmap(p->va, p->size), CUDA_SUCCESS);
	assert_int_equal(be->cuMemRelease(p->h), CUDA_SUCCESS);
	assert_int_equal(be->cuMemAddressFree(p->va, p->size), CUDA_SUCCESS);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_device_query(void **state)
{
	char name[64], bus[32];
	CUuuid u0, u1;
	const char *s;
	size_t total;
	int v, count;

	assert_int_equal(be->cuDriverGetVersion(&v), CUDA_SUCCESS);
	assert_true(v >= 13000);
	assert_int_equal(be->cuDeviceGetCount(&count), CUDA_SUCCESS);
	assert_int_equal(count, 2);
	assert_int_equal(be->cuDeviceGet((CUdevice *)&v, 2), CUDA_ERROR_INVALID_DEVICE);
	assert_int_equal(be->cuDeviceGetName(name, sizeof(name), 1), CUDA_SUCCESS);
	assert_string_equal(name, "tern sim device 1");
	assert_int_equal(be->cuDeviceGetUuid(&u0, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuDeviceGetUuid(&u1, 1), CUDA_SUCCESS);
	assert_memory_not_equal(u0.bytes, u1.bytes, 16);
	assert_int_equal(be->cuDeviceTotalMem(&total, 0), CUDA_SUCCESS);
	assert_int_equal(total, SIM_TEST_MEMORY);
	assert_int_equal(be->cuDeviceGetPCIBusId(bus, sizeof(bus), 0), CUDA_SUCCESS);
	assert_int_equal(strlen(bus), 16);

	assert_int_equal(be->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
	assert_int_equal(v, 132);
	assert_int_equal(be->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
	assert_int_equal(v, 9);
	assert_int_equal(be->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0), CUDA_SUCCESS);
	assert_int_equal(v, 227 * 1024);
	/* Every attribute of the enum answers; outside it is an invalid value. */
	for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++)
		assert_int_equal(be->cuDeviceGetAttribute(&v, (CUdevice_attribute)a, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 5), CUDA_ERROR_INVALID_DEVICE);

	assert_int_equal(be->cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
	assert_string_equal(s, "CUDA_ERROR_INVALID_VALUE");
	assert_int_equal(be->cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	assert_null(s);
}

/* Bus ids in every form the driver accepts, and the rest. */
static void test_device_by_bus_id(void **state)
{
	static const struct {
		const char *id;
		CUresult res;
		int dev;
	} ids[] = {
		{ "00000000:18:00.0", CUDA_SUCCESS, 0 }, { "0000:19:00.0", CUDA_SUCCESS, 1 },
		{ "0:19:0", CUDA_SUCCESS, 1 }, { "18:00.0", CUDA_SUCCESS, 0 }, { "00000000:19:00.7", CUDA_SUCCESS, 1 },
		{ "0000:1A:00.0", CUDA_ERROR_INVALID_DEVICE, 0 }, { "0001:18:00.0", CUDA_ERROR_INVALID_DEVICE, 0 },
		{ "0000:18:01.0", CUDA_ERROR_INVALID_DEVICE, 0 }, { "", CUDA_ERROR_INVALID_VALUE, 0 },
		{ "18:00", CUDA_ERROR_INVALID_VALUE, 0 }, { "0x18:00.0", CUDA_ERROR_INVALID_VALUE, 0 },
		{ "000000000:18:00.0", CUDA_ERROR_INVALID_VALUE, 0 }, { "0000:18:00.0x", CUDA_ERROR_INVALID_VALUE, 0 },
		{ "-1:18:00.0", CUDA_ERROR_INVALID_VALUE, 0 }, { "0000:18:00:0", CUDA_ERROR_INVALID_VALUE, 0 },
	};
	char bus[32];
	CUdevice d;

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		d = -1;
		assert_int_equal(be->cuDeviceGetByPCIBusId(&d, ids[i].id), ids[i].res);
		if (ids[i].res == CUDA_SUCCESS)
			assert_int_equal(d, ids[i].dev);
	}
	assert_int_equal(be->cuDeviceGetByPCIBusId(NULL, "18:00.0"), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuDeviceGetByPCIBusId(&d, NULL), CUDA_ERROR_INVALID_VALUE);
	for (int dev = 0; dev < 2; dev++) {
		assert_int_equal(be->cuDeviceGetPCIBusId(bus, sizeof(bus), dev), CUDA_SUCCESS);
		assert_int_equal(be->cuDeviceGetByPCIBusId(&d, bus), CUDA_SUCCESS);
		assert_int_equal(d, dev);
	}
}

/* The texture limit, atomic capabilities and the RDMA fence. */
static void test_device_links(void **state)
{
	CUatomicOperation ops[CU_ATOMIC_OPERATION_MAX], bad = CU_ATOMIC_OPERATION_MAX;
	unsigned caps[CU_ATOMIC_OPERATION_MAX];
	size_t w = 0;

	assert_int_equal(be->cuDeviceGetTexture1DLinearMaxWidth(&w, CU_AD_FORMAT_FLOAT, 4, 0), CUDA_SUCCESS);
	assert_int_equal(w, 1u << 28);
	assert_int_equal(be->cuDeviceGetTexture1DLinearMaxWidth(&w, CU_AD_FORMAT_FLOAT, 3, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuDeviceGetTexture1DLinearMaxWidth(&w, (CUarray_format)0x99, 1, 0),
			 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuDeviceGetTexture1DLinearMaxWidth(&w, CU_AD_FORMAT_FLOAT, 1, 2), CUDA_ERROR_INVALID_DEVICE);

	for (int i = 0; i < CU_ATOMIC_OPERATION_MAX; i++)
		ops[i] = (CUatomicOperation)i;
	assert_int_equal(be->cuDeviceGetHostAtomicCapabilities(caps, ops, CU_ATOMIC_OPERATION_MAX, 0), CUDA_SUCCESS);
	for (int i = 0; i < CU_ATOMIC_OPERATION_MAX; i++)
		assert_int_equal(caps[i], 0);   /* no host native atomics */
	assert_int_equal(be->cuDeviceGetP2PAtomicCapabilities(caps, ops, CU_ATOMIC_OPERATION_MAX, 0, 1), CUDA_SUCCESS);
	for (int i = 0; i < CU_ATOMIC_OPERATION_MAX; i++)
		assert_true(caps[i] & (CU_ATOMIC_CAPABILITY_SCALAR_32 | CU_ATOMIC_CAPABILITY_SCALAR_64));
	assert_int_equal(be->cuDeviceGetP2PAtomicCapabilities(caps, ops, 1, 1, 1), CUDA_ERROR_INVALID_DEVICE);
	assert_int_equal(be->cuDeviceGetP2PAtomicCapabilities(caps, &bad, 1, 0, 1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuDeviceGetHostAtomicCapabilities(caps, ops, 0, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuDeviceGetHostAtomicCapabilities(caps, ops, 1, 7), CUDA_ERROR_INVALID_DEVICE);

	assert_int_equal(be->cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
							(CUflushGPUDirectRDMAWritesScope)0), CUDA_ERROR_INVALID_VALUE);
	/* The suite's context (device 0's primary one) is current. */
	assert_int_equal(be->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
	assert_int_equal(be->cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
							CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER), CUDA_SUCCESS);
	assert_int_equal(be->cuCtxSetCurrent(NULL), CUDA_SUCCESS);
	assert_int_equal(be->cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
							CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER), CUDA_ERROR_INVALID_CONTEXT);
	assert_int_equal(be->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

static void test_contexts(void **state)
{
	CUcontext c1, cur;
	unsigned flags;
	int active, least, greatest;
	size_t v;

	assert_int_equal(be->cuCtxGetCurrent(&cur), CUDA_SUCCESS);
	assert_ptr_equal(cur, ctx);
	assert_int_equal(be->cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
	assert_int_equal(active, 0);
	assert_int_equal(be->cuDevicePrimaryCtxSetFlags(1, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
	assert_int_equal(be->cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
	assert_ptr_not_equal(c1, ctx);
	assert_int_equal(be->cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
	assert_int_equal(active, 1);
	assert_int_equal(flags, CU_CTX_SCHED_BLOCKING_SYNC);
	assert_int_equal(be->cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
	assert_int_equal(be->cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
	assert_int_equal(active, 0);
	assert_int_equal(be->cuDevicePrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
	assert_int_equal(be->cuCtxSetCurrent(c1), CUDA_ERROR_INVALID_CONTEXT);

	assert_int_equal(be->cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 32 * MIB), CUDA_SUCCESS);
	assert_int_equal(be->cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE), CUDA_SUCCESS);
	assert_int_equal(v, 32 * MIB);
	assert_int_equal(be->cuCtxSetLimit(CU_LIMIT_MAX, 1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuCtxGetStreamPriorityRange(&least, &greatest), CUDA_SUCCESS);
	assert_true(greatest < least);

	/* Without a current context, context calls fail as the driver's do. */
	assert_int_equal(be->cuCtxSetCurrent(NULL), CUDA_SUCCESS);
	assert_int_equal(be->cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
	assert_int_equal(be->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
	assert_int_equal(be->cuCtxSynchronize(), CUDA_SUCCESS);
}

static void test_arena_round_trip(void **state)
{
	CUmemAllocationProp prop = prop_dev(0);
	size_t gran, free0, free1, total;
	uint32_t in[1024], out[1024];
	uint16_t h16[8];
	uint8_t h8[8];
	struct piece p;

	assert_int_equal(be->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
			 CUDA_SUCCESS);
	assert_int_equal(gran, 2 * MIB);
	assert_int_equal(be->cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
	assert_int_equal(total, SIM_TEST_MEMORY);

	piece_get(&p, 4 * MIB, HINT);
	/* A free hint is honoured: device pointers equal across processes. */
	assert_int_equal(p.va, HINT);
	assert_int_equal(be->cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
	assert_int_equal(free0 - free1, 4 * MIB);

	for (unsigned i = 0; i < 1024; i++)
		in[i] = i * 2654435761u;
	assert_int_equal(be->cuMemcpyHtoD(p.va + 100, in, sizeof(in)), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoD(p.va + 2 * MIB, p.va + 100, sizeof(in)), CUDA_SUCCESS);
	memset(out, 0, sizeof(out));
	assert_int_equal(be->cuMemcpyDtoH(out, p.va + 2 * MIB, sizeof(out)), CUDA_SUCCESS);
	assert_memory_equal(in, out, sizeof(in));

	assert_int_equal(be->cuMemsetD8(p.va, 0xab, 8), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoH(h8, p.va, 8), CUDA_SUCCESS);
	for (int i = 0; i < 8; i++)
		assert_int_equal(h8[i], 0xab);
	assert_int_equal(be->cuMemsetD16Async(p.va + 16, 0xbeef, 8, NULL), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoHAsync(h16, p.va + 16, 16, NULL), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamSynchronize(NULL), CUDA_SUCCESS);
	for (int i = 0; i < 8; i++)
		assert_int_equal(h16[i], 0xbeef);
	assert_int_equal(be->cuMemsetD32(p.va + 64, 0xdeadbeef, 1024), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoH(out, p.va + 64, sizeof(out)), CUDA_SUCCESS);
	for (int i = 0; i < 1024; i++)
		assert_int_equal(out[i], 0xdeadbeef);
	/* Misaligned D32 / D16 targets are invalid values. */
	assert_int_equal(be->cuMemsetD32(p.va + 2, 0, 4), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemsetD16(p.va + 1, 0, 4), CUDA_ERROR_INVALID_VALUE);

	/* A second reservation at a taken hint gets another address. */
	{
		CUdeviceptr other;

		assert_int_equal(be->cuMemAddressReserve(&other, 2 * MIB, 0, HINT, 0), CUDA_SUCCESS);
		assert_true(other != HINT);
		assert_int_equal(be->cuMemAddressFree(other, 2 * MIB), CUDA_SUCCESS);
	}

	piece_put(&p);
	assert_int_equal(be->cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
	assert_int_equal(free1, free0);
}

static void test_bad_pointers(void **state)
{
	CUmemAllocationProp prop = prop_dev(0);
	CUmemGenericAllocationHandle h;
	uint8_t buf[64] = { 0 };
	CUdeviceptr va;
	struct piece p;

	/* Unmapped, NULL, and the executor's own heap are not device memory. */
	assert_int_equal(be->cuMemcpyHtoD(0x1000, buf, 8), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemcpyDtoH(buf, 0, 8), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)buf, 8), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemsetD8(0xdead0000, 0, 8), CUDA_ERROR_INVALID_VALUE);

	piece_get(&p, 2 * MIB, 0);
	/* Past the end of a mapping, and wrapping around the address space. */
	assert_int_equal(be->cuMemcpyHtoD(p.va + 2 * MIB - 4, buf, 8), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemcpyDtoD(p.va, p.va + 16, (size_t)-8), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemcpyHtoDAsync(p.va + 2 * MIB, buf, 1, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemcpyHtoD(p.va + 2 * MIB - 8, buf, 8), CUDA_SUCCESS);
	piece_put(&p);
	/* After the unmap the same address is rejected, not faulted on. */
	assert_int_equal(be->cuMemcpyDtoH(buf, p.va, 8), CUDA_ERROR_INVALID_VALUE);

	/* Mapped but without access set yet. */
	assert_int_equal(be->cuMemAddressReserve(&va, 2 * MIB, 0, 0, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemCreate(&h, 2 * MIB, &prop, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemMap(va, 2 * MIB, 0, h, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyHtoD(va, buf, 8), CUDA_ERROR_INVALID_VALUE);
	/* A second mapping over the same range, and unaligned sizes, fail. */
	assert_int_equal(be->cuMemMap(va, 2 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemCreate(&h, MIB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemUnmap(va, MIB), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemAddressFree(va, 2 * MIB), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemUnmap(va, 2 * MIB), CUDA_SUCCESS);
	assert_int_equal(be->cuMemRelease(h), CUDA_SUCCESS);
	assert_int_equal(be->cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuMemAddressFree(va, 2 * MIB), CUDA_SUCCESS);

	/* Registered host memory is usable by the device, then not. */
	{
		void *host = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		assert_int_equal(be->cuMemHostRegister(host, 8192, 0), CUDA_SUCCESS);
		assert_int_equal(be->cuMemHostRegister(host, 4096, 0),
				 CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
		assert_int_equal(be->cuMemsetD32((CUdeviceptr)(uintptr_t)host, 7, 2048), CUDA_SUCCESS);
		assert_int_equal(((uint32_t *)host)[2047], 7);
		assert_int_equal(be->cuMemHostUnregister(host), CUDA_SUCCESS);
		assert_int_equal(be->cuMemHostUnregister(host), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
		assert_int_equal(be->cuMemsetD32((CUdeviceptr)(uintptr_t)host, 7, 1), CUDA_ERROR_INVALID_VALUE);
		munmap(host, 8192);
		/* An unmapped host range cannot be registered. */
		assert_int_equal(be->cuMemHostRegister(host, 8192, 0), CUDA_ERROR_INVALID_VALUE);
	}
}

static void test_out_of_memory_counts(void **state)
{
	CUmemAllocationProp prop = prop_dev(0), bad = prop_dev(7);
	CUmemGenericAllocationHandle a, b;
	size_t free_b, total;

	assert_int_equal(be->cuMemCreate(&a, SIM_TEST_MEMORY, &prop, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemCreate(&b, 2 * MIB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	assert_int_equal(be->cuMemGetInfo(&free_b, &total), CUDA_SUCCESS);
	assert_int_equal(free_b, 0);
	/* The other device has its own total. */
	prop.location.id = 1;
	assert_int_equal(be->cuMemCreate(&b, 2 * MIB, &prop, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemRelease(b), CUDA_SUCCESS);
	assert_int_equal(be->cuMemRelease(a), CUDA_SUCCESS);
	assert_int_equal(be->cuMemGetInfo(&free_b, &total), CUDA_SUCCESS);
	assert_int_equal(free_b, SIM_TEST_MEMORY);
	assert_int_equal(be->cuMemCreate(&b, SIM_TEST_MEMORY + 2 * MIB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	assert_int_equal(be->cuMemCreate(&b, 2 * MIB, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
}

static CUmodule module_load(void)
{
	void *img = image_or_skip(fatbin_path);
	CUmodule m;

	assert_int_equal(be->cuModuleLoadData(&m, img), CUDA_SUCCESS);
	/* The driver copies the image: the caller may free it at once. */
	free(img);
	return m;
}

static void test_module_vec_add(void **state)
{
	enum { N = 1000 };
	float a[N], b[N], c[N];
	CUmodule m = module_load();
	CUfunction f;
	struct piece p;
	const char *name;
	size_t off, size;
	int n = N, v;

	assert_int_equal(be->cuModuleGetFunction(&f, m, "vec_add"), CUDA_SUCCESS);
	assert_int_equal(be->cuModuleGetFunction(&f, m, "nope"), CUDA_ERROR_NOT_FOUND);
	assert_int_equal(be->cuModuleGetFunction(&f, m, "vec_add"), CUDA_SUCCESS);
	assert_int_equal(be->cuFuncGetName(&name, f), CUDA_SUCCESS);
	assert_string_equal(name, "vec_add");
	assert_int_equal(be->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), CUDA_SUCCESS);
	assert_int_equal(v, 1024);

	/* The parameter layout comes from the image: 3 pointers and an int. */
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(be->cuFuncGetParamInfo(f, i, &off, &size), CUDA_SUCCESS);
		assert_int_equal(off, i * 8);
		assert_int_equal(size, i < 3 ? 8 : 4);
	}
	assert_int_equal(be->cuFuncGetParamInfo(f, 4, &off, &size), CUDA_ERROR_INVALID_VALUE);

	piece_get(&p, 2 * MIB, 0);
	for (int i = 0; i < N; i++) {
		a[i] = (float)i;
		b[i] = 0.5f * (float)i;
	}
	CUdeviceptr da = p.va, db = p.va + sizeof(a), dc = p.va + 2 * sizeof(a);
	void *args[] = { &da, &db, &dc, &n };

	assert_int_equal(be->cuMemcpyHtoD(da, a, sizeof(a)), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyHtoD(db, b, sizeof(b)), CUDA_SUCCESS);
	assert_int_equal(be->cuLaunchKernel(f, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL),
			 CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoH(c, dc, sizeof(c)), CUDA_SUCCESS);
	for (int i = 0; i < N; i++)
		assert_true(c[i] == 1.5f * (float)i);

	/* Launch limits as the driver checks them. */
	assert_int_equal(be->cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuLaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuLaunchKernel(f, 1, 65536, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 64 << 10, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuLaunchKernel((CUfunction)&n, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL),
			 CUDA_ERROR_INVALID_HANDLE);

	/* The same kernel through cuLaunchKernelEx and an `extra` buffer. */
	{
		struct { CUdeviceptr a, b, c; int n; } buf = { dc, dc, da, N };
		size_t buf_size = sizeof(buf);
		void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &buf,
				  CU_LAUNCH_PARAM_BUFFER_SIZE, &buf_size, CU_LAUNCH_PARAM_END };
		CUlaunchConfig cfg = { 4, 1, 1, 256, 1, 1, 0, NULL, NULL, 0 };

		assert_int_equal(be->cuLaunchKernelEx(&cfg, f, NULL, extra), CUDA_SUCCESS);
		assert_int_equal(be->cuMemcpyDtoH(a, da, sizeof(a)), CUDA_SUCCESS);
		for (int i = 0; i < N; i++)
			assert_true(a[i] == 3.0f * (float)i);
	}
	piece_put(&p);
	assert_int_equal(be->cuModuleUnload(m), CUDA_SUCCESS);
	assert_int_equal(be->cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
}

static void test_param_info_and_globals(void **state)
{
	static const size_t offs[] = { 0, 8, 16, 24 }, sizes[] = { 1, 8, 8, 8 };
	CUmodule m = module_load();
	CUfunction mixed, scale, none;
	CUdeviceptr g;
	size_t off, size, gsize;
	struct piece p;
	int32_t out = 0, val = 0;

	assert_int_equal(be->cuModuleGetFunction(&mixed, m, "mixed"), CUDA_SUCCESS);
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(be->cuFuncGetParamInfo(mixed, i, &off, &size), CUDA_SUCCESS);
		assert_int_equal(off, offs[i]);
		assert_int_equal(size, sizes[i]);
	}
	assert_int_equal(be->cuModuleGetFunction(&scale, m, "_Z5scalePffi"), CUDA_SUCCESS);
	assert_int_equal(be->cuFuncGetParamInfo(scale, 2, &off, &size), CUDA_SUCCESS);
	assert_int_equal(off, 12);
	assert_int_equal(size, 4);

	/* __device__ int counter = 42, readable and writable as device memory. */
	assert_int_equal(be->cuModuleGetGlobal(&g, &gsize, m, "counter"), CUDA_SUCCESS);
	assert_int_equal(gsize, 4);
	assert_int_equal(be->cuMemcpyDtoH(&val, g, 4), CUDA_SUCCESS);
	assert_int_equal(val, 42);
	assert_int_equal(be->cuMemcpyDtoH(&val, g, 8), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuModuleGetGlobal(&g, &gsize, m, "nope"), CUDA_ERROR_NOT_FOUND);

	/* char, double, struct and pointer arguments reach the CPU kernel. */
	piece_get(&p, 2 * MIB, 0);
	{
		char c = 3;
		double d = 100.0;
		struct { int a; short b; char c; } s = { 1000, 20, 4 };
		CUdeviceptr dout = p.va;
		void *args[] = { &c, &d, &s, &dout };

		assert_int_equal(be->cuLaunchKernel(mixed, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
		assert_int_equal(be->cuMemcpyDtoH(&out, p.va, 4), CUDA_SUCCESS);
		assert_int_equal(out, 1127);
	}
	/* A kernel with no CPU version is not supported, not run. */
	assert_int_equal(be->cuModuleGetFunction(&none, m, "no_cpu"), CUDA_SUCCESS);
	{
		CUdeviceptr dout = p.va;
		void *args[] = { &dout };

		assert_int_equal(be->cuLaunchKernel(none, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL),
				 CUDA_ERROR_NOT_SUPPORTED);
	}
	piece_put(&p);
	assert_int_equal(be->cuModuleUnload(m), CUDA_SUCCESS);
}

/* __managed__ variables fill a window of their own in load order (a
 * restore that loads the same modules in the same order finds them where
 * they were); other globals do not take from it. */
static void test_managed_window(void **state)
{
	CUmodule m1 = module_load(), m2 = module_load();
	CUdeviceptr a1, a2, c;
	size_t s1, s2, cs, pg = (size_t)sysconf(_SC_PAGESIZE);
	unsigned managed = 9;
	int32_t v[5];

	assert_int_equal(be->cuModuleGetGlobal(&a1, &s1, m1, "mvar"), CUDA_SUCCESS);
	assert_int_equal(be->cuModuleGetGlobal(&a2, &s2, m2, "mvar"), CUDA_SUCCESS);
	assert_int_equal(s1, sizeof(v));
	assert_int_equal(s2, sizeof(v));
	assert_true(a1 >= SIM_MANAGED_BASE && a1 < SIM_MANAGED_BASE + SIM_MANAGED_SIZE);
	assert_int_equal(a1 % pg, 0);
	assert_int_equal(a2, a1 + pg);
	assert_int_equal(be->cuMemcpyDtoH(v, a2, sizeof(v)), CUDA_SUCCESS);
	assert_int_equal(v[0], 1);
	assert_int_equal(v[4], 5);
	assert_int_equal(be->cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, a1), CUDA_SUCCESS);
	assert_int_equal(managed, 1);
	assert_int_equal(be->cuModuleGetGlobal(&c, &cs, m1, "counter"), CUDA_SUCCESS);
	assert_false(c >= SIM_MANAGED_BASE && c < SIM_MANAGED_BASE + SIM_MANAGED_SIZE);
	assert_int_equal(be->cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, c), CUDA_SUCCESS);
	assert_int_equal(managed, 0);
	assert_int_equal(be->cuModuleUnload(m2), CUDA_SUCCESS);
	assert_int_equal(be->cuModuleUnload(m1), CUDA_SUCCESS);
}

static void test_library_cubin(void **state)
{
	void *img = image_or_skip(cubin_path);
	CUlibrary lib;
	CUkernel k;
	CUfunction f;
	CUmodule m;
	CUdeviceptr g;
	size_t off, size;
	const char *name;
	int v;

	assert_int_equal(be->cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
	free(img);
	assert_int_equal(be->cuLibraryGetKernel(&k, lib, "vec_add"), CUDA_SUCCESS);
	assert_int_equal(be->cuLibraryGetKernel(&k, lib, "missing"), CUDA_ERROR_NOT_FOUND);
	assert_int_equal(be->cuLibraryGetKernel(&k, lib, "slow_fill"), CUDA_SUCCESS);
	assert_int_equal(be->cuKernelGetName(&name, k), CUDA_SUCCESS);
	assert_string_equal(name, "slow_fill");
	assert_int_equal(be->cuKernelGetParamInfo(k, 3, &off, &size), CUDA_SUCCESS);
	assert_int_equal(off, 16);
	assert_int_equal(size, 4);
	assert_int_equal(be->cuKernelGetParamInfo(k, 4, &off, &size), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
						  100000, k, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0),
			 CUDA_SUCCESS);
	assert_int_equal(v, 100000);
	assert_int_equal(be->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS, 8, k, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuKernelGetFunction(&f, k), CUDA_SUCCESS);
	assert_int_equal(be->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f), CUDA_SUCCESS);
	assert_int_equal(be->cuLibraryGetModule(&m, lib), CUDA_SUCCESS);
	assert_int_equal(be->cuModuleGetFunction(&f, m, "vec_add"), CUDA_SUCCESS);
	assert_int_equal(be->cuLibraryGetGlobal(&g, &size, lib, "counter"), CUDA_SUCCESS);
	assert_int_equal(size, 4);

	/* Listing: every kernel of the image, the library's and its module's. */
	{
		CUkernel ks[8] = { 0 };
		CUfunction fs[8] = { 0 };
		unsigned n = 0, found = 0;

		assert_int_equal(be->cuLibraryGetKernelCount(NULL, lib), CUDA_ERROR_INVALID_VALUE);
		assert_int_equal(be->cuLibraryEnumerateKernels(NULL, 2, lib), CUDA_ERROR_INVALID_VALUE);
		assert_int_equal(be->cuLibraryGetKernelCount(&n, lib), CUDA_SUCCESS);
		assert_int_equal(n, 6);
		assert_int_equal(be->cuLibraryEnumerateKernels(ks, 2, lib), CUDA_SUCCESS);
		assert_non_null(ks[1]);
		assert_null(ks[2]);
		assert_int_equal(be->cuLibraryEnumerateKernels(ks, 8, lib), CUDA_SUCCESS);
		assert_null(ks[6]);
		for (unsigned i = 0; i < 6; i++) {
			assert_int_equal(be->cuKernelGetName(&name, ks[i]), CUDA_SUCCESS);
			found += !strcmp(name, "slow_fill") && ks[i] == k;
		}
		assert_int_equal(found, 1);
		assert_int_equal(be->cuModuleGetFunctionCount(&n, m), CUDA_SUCCESS);
		assert_int_equal(n, 6);
		assert_int_equal(be->cuModuleEnumerateFunctions(fs, 8, m), CUDA_SUCCESS);
		assert_int_equal(be->cuModuleGetFunctionCount(&n, (CUmodule)&n), CUDA_ERROR_INVALID_HANDLE);
	}
	assert_int_equal(be->cuLibraryUnload(lib), CUDA_SUCCESS);
	assert_int_equal(be->cuLibraryGetKernel(&k, lib, "vec_add"), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(be->cuLibraryGetKernelCount((unsigned *)&v, lib), CUDA_ERROR_INVALID_HANDLE);
}

static void test_invalid_image(void **state)
{
	static const unsigned char elf[64] = { 0x7f, 'E', 'L', 'F', 2, 1, 1 };
	unsigned char fatbin[64] = { 0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0 };
	CUmodule m;
	CUlibrary l;

	fatbin[8] = 0xff;
	fatbin[15] = 0x7f;      /* claims an enormous payload */
	assert_int_equal(be->cuModuleLoadData(&m, elf), CUDA_ERROR_INVALID_IMAGE);
	assert_int_equal(be->cuModuleLoadData(&m, fatbin), CUDA_ERROR_INVALID_IMAGE);
	assert_int_equal(be->cuLibraryLoadData(&l, elf, NULL, NULL, 0, NULL, NULL, 0),
			 CUDA_ERROR_INVALID_IMAGE);
	assert_int_equal(be->cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);
}

struct kernels {
	CUmodule m;
	CUfunction slow_fill;
	struct piece p;
};

static void kernels_get(struct kernels *k)
{
	k->m = module_load();
	assert_int_equal(be->cuModuleGetFunction(&k->slow_fill, k->m, "slow_fill"), CUDA_SUCCESS);
	piece_get(&k->p, 2 * MIB, 0);
}

static void kernels_put(struct kernels *k)
{
	piece_put(&k->p);
	assert_int_equal(be->cuModuleUnload(k->m), CUDA_SUCCESS);
}

static CUresult slow_fill(struct kernels *k, CUdeviceptr dst, unsigned value, unsigned n,
			  unsigned ms, CUstream s)
{
	void *args[] = { &dst, &value, &n, &ms };

	return be->cuLaunchKernel(k->slow_fill, (n + 127) / 128, 1, 1, 128, 1, 1, 0, s, args, NULL);
}

static void test_stream_order(void **state)
{
	struct kernels k;
	unsigned host[256], staged[256];
	CUstream s;
	unsigned flags;
	int prio;

	kernels_get(&k);
	assert_int_equal(be->cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -3), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
	assert_int_equal(flags, CU_STREAM_NON_BLOCKING);
	assert_int_equal(be->cuStreamGetPriority(s, &prio), CUDA_SUCCESS);
	assert_int_equal(prio, -3);

	/* A slow kernel, then a copy of its output on the same stream. */
	memset(host, 0, sizeof(host));
	assert_int_equal(slow_fill(&k, k.p.va, 0x5eed, 256, 200, s), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoHAsync(host, k.p.va, sizeof(host), s), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamQuery(s), CUDA_ERROR_NOT_READY);
	/* Pageable H2D source bytes are taken at the call. */
	for (int i = 0; i < 256; i++)
		staged[i] = 1000u + (unsigned)i;
	assert_int_equal(be->cuMemcpyHtoDAsync(k.p.va + 4096, staged, sizeof(staged), s), CUDA_SUCCESS);
	memset(staged, 0xff, sizeof(staged));
	assert_int_equal(be->cuStreamSynchronize(s), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamQuery(s), CUDA_SUCCESS);
	for (int i = 0; i < 256; i++)
		assert_int_equal(host[i], 0x5eed);
	assert_int_equal(be->cuMemcpyDtoH(staged, k.p.va + 4096, sizeof(staged)), CUDA_SUCCESS);
	for (int i = 0; i < 256; i++)
		assert_int_equal(staged[i], 1000u + (unsigned)i);

	/* The special stream handles are valid; a destroyed one is not. */
	assert_int_equal(be->cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamSynchronize(CU_STREAM_LEGACY), CUDA_SUCCESS);
	assert_int_equal(slow_fill(&k, k.p.va, 1, 1, 50, s), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamDestroy(s), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(be->cuCtxSynchronize(), CUDA_SUCCESS);
	kernels_put(&k);
}

static void test_events(void **state)
{
	struct kernels k;
	CUevent a, b, notime, never;
	float ms = -1;
	double t0;

	kernels_get(&k);
	assert_int_equal(be->cuEventCreate(&a, CU_EVENT_DEFAULT), CUDA_SUCCESS);
	assert_int_equal(be->cuEventCreate(&b, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);
	assert_int_equal(be->cuEventCreate(&notime, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
	assert_int_equal(be->cuEventCreate(&never, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuEventCreate(&never + 0, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);

	assert_int_equal(be->cuEventQuery(never), CUDA_SUCCESS);
	assert_int_equal(be->cuEventRecord(a, NULL), CUDA_SUCCESS);
	assert_int_equal(slow_fill(&k, k.p.va, 2, 64, 150, NULL), CUDA_SUCCESS);
	assert_int_equal(be->cuEventRecord(b, NULL), CUDA_SUCCESS);
	assert_int_equal(be->cuEventRecord(notime, NULL), CUDA_SUCCESS);
	assert_int_equal(be->cuEventQuery(b), CUDA_ERROR_NOT_READY);
	assert_int_equal(be->cuEventElapsedTime(&ms, a, b), CUDA_ERROR_NOT_READY);
	t0 = now_ms();
	assert_int_equal(be->cuEventSynchronize(b), CUDA_SUCCESS);
	assert_true(now_ms() - t0 > 50);
	assert_int_equal(be->cuEventQuery(b), CUDA_SUCCESS);
	assert_int_equal(be->cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
	assert_true(ms >= 140.0f && ms < 5000.0f);
	assert_int_equal(be->cuEventElapsedTime(&ms, a, notime), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(be->cuEventElapsedTime(&ms, a, never), CUDA_ERROR_INVALID_HANDLE);

	/* Destroying an event whose record is pending is allowed. */
	assert_int_equal(slow_fill(&k, k.p.va, 3, 64, 50, NULL), CUDA_SUCCESS);
	assert_int_equal(be->cuEventRecord(never, NULL), CUDA_SUCCESS);
	assert_int_equal(be->cuEventDestroy(never), CUDA_SUCCESS);
	assert_int_equal(be->cuEventQuery(never), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(be->cuCtxSynchronize(), CUDA_SUCCESS);

	assert_int_equal(be->cuEventDestroy(a), CUDA_SUCCESS);
	assert_int_equal(be->cuEventDestroy(b), CUDA_SUCCESS);
	assert_int_equal(be->cuEventDestroy(notime), CUDA_SUCCESS);
	kernels_put(&k);
}

static void test_two_streams(void **state)
{
	struct kernels k;
	CUstream s1, s2;
	CUevent done;
	unsigned out[64];

	kernels_get(&k);
	assert_int_equal(be->cuStreamCreate(&s1, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	assert_int_equal(be->cuEventCreate(&done, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);

	/* s2 waits for s1's kernel through an event, then copies its output. */
	assert_int_equal(slow_fill(&k, k.p.va, 0xabc, 64, 150, s1), CUDA_SUCCESS);
	assert_int_equal(be->cuEventRecord(done, s1), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWaitEvent(s2, done, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoDAsync(k.p.va + 8192, k.p.va, sizeof(out), s2), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
	assert_int_equal(be->cuStreamSynchronize(s2), CUDA_SUCCESS);
	/* s1's work before the event is done too. */
	assert_int_equal(be->cuStreamQuery(s1), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoH(out, k.p.va + 8192, sizeof(out)), CUDA_SUCCESS);
	for (int i = 0; i < 64; i++)
		assert_int_equal(out[i], 0xabc);

	/* Synchronising an idle stream does not wait for a busy one. */
	assert_int_equal(slow_fill(&k, k.p.va, 1, 64, 300, s1), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
	assert_int_equal(be->cuStreamQuery(s2), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamSynchronize(s1), CUDA_SUCCESS);

	assert_int_equal(be->cuEventDestroy(done), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamDestroy(s1), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamDestroy(s2), CUDA_SUCCESS);
	kernels_put(&k);
}

/* A stream waiting for a value parks; the device runs another stream's
 * write that releases it (it hung the device before). */
static void test_wait_value_other_stream(void **state)
{
	struct kernels k;
	CUstream s1, s2;
	unsigned v = 0;
	double t0;

	kernels_get(&k);
	assert_int_equal(be->cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	assert_int_equal(be->cuMemsetD32(k.p.va, 0, 4), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWaitValue32(s1, k.p.va, 7, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWriteValue32(s1, k.p.va + 4, 9, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
	t0 = now_ms();
	assert_int_equal(be->cuStreamWriteValue32(s2, k.p.va, 7, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamSynchronize(s1), CUDA_SUCCESS);
	printf("wait released by another stream after %.3f ms\n", now_ms() - t0);
	assert_int_equal(be->cuMemcpyDtoH(&v, k.p.va + 4, 4), CUDA_SUCCESS);
	assert_int_equal(v, 9);

	/* The legacy stream orders after a parked blocking stream. */
	assert_int_equal(be->cuStreamDestroy(s1), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamCreate(&s1, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWaitValue32(s1, k.p.va, 8, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWriteValue32(NULL, k.p.va + 4, 11, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWriteValue32(s2, k.p.va + 8, 12, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamSynchronize(s2), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
	assert_int_equal(be->cuStreamWriteValue32(s2, k.p.va, 8, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuCtxSynchronize(), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoH(&v, k.p.va + 4, 4), CUDA_SUCCESS);
	assert_int_equal(v, 11);
	assert_int_equal(be->cuStreamDestroy(s1), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamDestroy(s2), CUDA_SUCCESS);
	kernels_put(&k);
}

static void test_occupancy(void **state)
{
	CUmodule m = module_load();
	CUfunction f;
	CUlaunchConfig cfg = { 1, 1, 1, 256, 1, 1, 0, NULL, NULL, 0 };
	size_t smem;
	int n;

	assert_int_equal(be->cuModuleGetFunction(&f, m, "vec_add"), CUDA_SUCCESS);
	assert_int_equal(be->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, 256, 0, 0), CUDA_SUCCESS);
	assert_int_equal(n, 8);
	assert_int_equal(be->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, 1024, 0, 0), CUDA_SUCCESS);
	assert_int_equal(n, 2);
	assert_int_equal(be->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, 32, 40 << 10, 0), CUDA_SUCCESS);
	assert_int_equal(n, 5);
	assert_int_equal(be->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuOccupancyAvailableDynamicSMemPerBlock(&smem, f, 4, 256), CUDA_SUCCESS);
	assert_true(smem > 0 && smem <= 48 << 10);
	assert_int_equal(be->cuOccupancyMaxPotentialClusterSize(&n, f, &cfg), CUDA_SUCCESS);
	assert_int_equal(n, 8);
	assert_int_equal(be->cuOccupancyMaxActiveClusters(&n, f, &cfg), CUDA_SUCCESS);
	assert_int_equal(n, 8 * 132);
	assert_int_equal(be->cuModuleUnload(m), CUDA_SUCCESS);
}

/* Last: a CPU kernel touching a bad address poisons the context, as an
 * illegal access does on a GPU; the process lives and a reset recovers. */
static void test_kernel_fault(void **state)
{
	CUmodule m = module_load();
	CUdeviceptr bad = 0x10;
	void *args[] = { &bad };
	CUfunction poke;
	int active;
	unsigned flags;

	assert_int_equal(be->cuModuleGetFunction(&poke, m, "poke"), CUDA_SUCCESS);
	assert_int_equal(be->cuLaunchKernel(poke, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
	assert_int_equal(be->cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
	assert_int_equal(be->cuLaunchKernel(poke, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL),
			 CUDA_ERROR_ILLEGAL_ADDRESS);
	assert_int_equal(be->cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
	assert_int_equal(be->cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
	assert_int_equal(active, 0);
	/* The module went with the context. */
	assert_int_equal(be->cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(be->cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
	assert_int_equal(be->cuCtxSynchronize(), CUDA_SUCCESS);
}

/* Graphs built node by node: order of nodes by their edges, repeated launches,
 * shape queries, cycles, the update's pairing, a node whose module went. */
static void test_graphs(void **state)
{
	struct kernels k;
	CUgraph g, g2;
	CUgraphExec x;
	CUgraphNode set, fill, copy, empty, nodes[8], from[8], to[8], n2[3];
	CUDA_MEMSET_NODE_PARAMS ms = { 0 };
	CUDA_MEMCPY3D cp = { 0 };
	CUDA_KERNEL_NODE_PARAMS kp = { 0 };
	CUDA_GRAPH_INSTANTIATE_PARAMS ip = { 0 };
	CUgraphExecUpdateResultInfo info;
	CUstream s;
	unsigned host[256], value = 0xabc, n = 256, zero = 0;
	CUdeviceptr dst;
	void *args[] = { &dst, &value, &n, &zero };
	size_t count = 8;

	kernels_get(&k);
	dst = k.p.va;
	assert_int_equal(be->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphCreate(&g, 1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuGraphCreate(&g, 0), CUDA_SUCCESS);
	/* memset(va, 1) -> slow_fill(va, 0xabc) -> copy va -> va + 4096; an empty node last */
	ms.dst = k.p.va;
	ms.value = 1;
	ms.elementSize = 4;
	ms.width = 256;
	ms.height = 1;
	assert_int_equal(be->cuGraphAddMemsetNode(&set, g, NULL, 0, &ms, ctx), CUDA_SUCCESS);
	kp.func = k.slow_fill;
	kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
	kp.blockDimX = 256;
	kp.blockDimY = kp.blockDimZ = 1;
	kp.kernelParams = args;
	assert_int_equal(be->cuGraphAddKernelNode(&fill, g, &set, 1, &kp), CUDA_SUCCESS);
	cp.srcMemoryType = cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	cp.srcDevice = k.p.va;
	cp.dstDevice = k.p.va + 4096;
	cp.WidthInBytes = sizeof(host);
	cp.Height = cp.Depth = 1;
	assert_int_equal(be->cuGraphAddMemcpyNode(&copy, g, NULL, 0, &cp, ctx), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphAddDependencies(g, &fill, &copy, NULL, 1), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphAddDependencies(g, &fill, &copy, NULL, 1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuGraphAddEmptyNode(&empty, g, &copy, 1), CUDA_SUCCESS);
	/* A copy outside any mapping is refused when the node is made. */
	cp.dstDevice = k.p.va + k.p.size - 16;
	assert_int_equal(be->cuGraphAddMemcpyNode(&nodes[0], g, NULL, 0, &cp, ctx), CUDA_ERROR_INVALID_VALUE);

	assert_int_equal(be->cuGraphGetNodes(g, nodes, &count), CUDA_SUCCESS);
	assert_int_equal(count, 4);
	count = 8;
	assert_int_equal(be->cuGraphGetEdges(g, from, to, NULL, &count), CUDA_SUCCESS);
	assert_int_equal(count, 3);
	assert_int_equal(be->cuGraphInstantiateWithParams(&x, g, &ip), CUDA_SUCCESS);
	assert_int_equal(ip.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
	for (unsigned round = 0; round < 3; round++) {
		memset(host, 0, sizeof(host));
		assert_int_equal(be->cuMemsetD32(k.p.va + 4096, 0, 256), CUDA_SUCCESS);
		assert_int_equal(be->cuGraphLaunch(x, s), CUDA_SUCCESS);
		assert_int_equal(be->cuStreamSynchronize(s), CUDA_SUCCESS);
		assert_int_equal(be->cuMemcpyDtoH(host, k.p.va + 4096, sizeof(host)), CUDA_SUCCESS);
		for (int i = 0; i < 256; i++)
			assert_int_equal(host[i], 0xabc);
	}
	/* New kernel arguments for the executable: named by the graph's node. */
	value = 0x77;
	assert_int_equal(be->cuGraphExecKernelNodeSetParams(x, fill, &kp), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphExecKernelNodeSetParams(x, copy, &kp), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuGraphLaunch(x, s), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamSynchronize(s), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoH(host, k.p.va + 4096, sizeof(host)), CUDA_SUCCESS);
	assert_int_equal(host[17], 0x77);

	/* The same shape made in another order updates it: nodes pair by shape. */
	assert_int_equal(be->cuGraphCreate(&g2, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphAddMemsetNode(&n2[0], g2, NULL, 0, &ms, ctx), CUDA_SUCCESS);
	cp.dstDevice = k.p.va + 8192;
	assert_int_equal(be->cuGraphAddMemcpyNode(&n2[2], g2, NULL, 0, &cp, ctx), CUDA_SUCCESS);
	value = 0x99;
	assert_int_equal(be->cuGraphAddKernelNode(&n2[1], g2, &n2[0], 1, &kp), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphAddDependencies(g2, &n2[1], &n2[2], NULL, 1), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphExecUpdate(x, g2, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
	assert_int_equal(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
	assert_int_equal(be->cuGraphAddEmptyNode(&nodes[0], g2, &n2[2], 1), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphExecUpdate(x, g2, &info), CUDA_SUCCESS);
	assert_int_equal(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
	assert_int_equal(be->cuGraphLaunch(x, s), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamSynchronize(s), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoH(host, k.p.va + 8192, sizeof(host)), CUDA_SUCCESS);
	assert_int_equal(host[200], 0x99);

	/* A cycle is found at instantiation. */
	assert_int_equal(be->cuGraphAddDependencies(g, &empty, &set, NULL, 1), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphInstantiateWithParams(&x, g, &ip), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(ip.result_out, CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE);
	assert_int_equal(be->cuGraphRemoveDependencies(g, &empty, &set, NULL, 1), CUDA_SUCCESS);

	/* Once the kernel's module is gone the executable refuses to launch. */
	assert_int_equal(be->cuGraphDestroy(g), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphDestroy(g2), CUDA_SUCCESS);
	assert_int_equal(be->cuModuleUnload(k.m), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphLaunch(x, s), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(be->cuGraphExecDestroy(x), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamDestroy(s), CUDA_SUCCESS);
	piece_put(&k.p);
}

/* Capture across streams: fork and join with events, the rules that
 * invalidate a capture, an unjoined fork. */
static void test_capture(void **state)
{
	struct kernels k;
	CUstream s0, s1;
	CUevent fork, join;
	CUgraph g;
	CUgraphExec x;
	CUstreamCaptureStatus st;
	CUDA_GRAPH_INSTANTIATE_PARAMS ip = { 0 };
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	const CUgraphNode *deps;
	cuuint64_t id;
	size_t n = 0;
	unsigned host[128];

	kernels_get(&k);
	assert_int_equal(be->cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	assert_int_equal(be->cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
	assert_int_equal(be->cuEventCreate(&join, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
			 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);

	assert_int_equal(be->cuStreamBeginCapture(s0, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamBeginCapture(s0, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
	assert_int_equal(be->cuMemsetD32Async(k.p.va, 5, 128, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuEventRecord(fork, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
	assert_int_equal(be->cuStreamWaitEvent(s1, fork, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamIsCapturing(s1, &st), CUDA_SUCCESS);
	assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	assert_int_equal(be->cuMemcpyDtoDAsync(k.p.va + 4096, k.p.va, 512, s1), CUDA_SUCCESS);
	assert_int_equal(slow_fill(&k, k.p.va, 9, 128, 0, s0), CUDA_SUCCESS);
	/* Nothing ran: capturing queues nothing. */
	assert_int_equal(be->cuMemcpyDtoH(host, k.p.va, sizeof(host)), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	assert_int_equal(be->cuStreamIsCapturing(s0, &st), CUDA_SUCCESS);
	assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
	assert_int_equal(be->cuStreamEndCapture(s0, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	assert_null(g);

	/* Again in relaxed mode, where a synchronous copy is allowed. */
	assert_int_equal(be->cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
	assert_int_equal(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
	assert_int_equal(be->cuStreamBeginCapture(s0, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
	assert_int_equal(be->cuMemsetD32Async(k.p.va, 5, 128, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuEventRecord(fork, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWaitEvent(s1, fork, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoDAsync(k.p.va + 4096, k.p.va, 512, s1), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoH(host, k.p.va + 8192, sizeof(host)), CUDA_SUCCESS);
	assert_int_equal(slow_fill(&k, k.p.va, 9, 128, 0, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamGetCaptureInfo(s0, &st, &id, &g, &deps, NULL, &n), CUDA_SUCCESS);
	assert_int_equal(n, 1);
	assert_true(id > 0);
	/* The fork is not joined yet. */
	assert_int_equal(be->cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
	assert_int_equal(be->cuEventRecord(join, s1), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWaitEvent(s0, join, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamEndCapture(s0, &g), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamIsCapturing(s1, &st), CUDA_SUCCESS);
	assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
	n = 0;
	assert_int_equal(be->cuGraphGetNodes(g, NULL, &n), CUDA_SUCCESS);
	assert_int_equal(n, 3);
	assert_int_equal(be->cuGraphInstantiateWithParams(&x, g, &ip), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphLaunch(x, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamSynchronize(s0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoH(host, k.p.va + 4096, sizeof(host)), CUDA_SUCCESS);
	assert_int_equal(host[100], 5);
	assert_int_equal(be->cuMemcpyDtoH(host, k.p.va, sizeof(host)), CUDA_SUCCESS);
	assert_int_equal(host[100], 9);
	assert_int_equal(be->cuGraphExecDestroy(x), CUDA_SUCCESS);
	assert_int_equal(be->cuGraphDestroy(g), CUDA_SUCCESS);

	/* A fork left unjoined. */
	assert_int_equal(be->cuStreamBeginCapture(s0, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
	assert_int_equal(be->cuEventRecord(fork, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWaitEvent(s1, fork, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuMemsetD32Async(k.p.va, 1, 128, s1), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamEndCapture(s0, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
	assert_int_equal(be->cuStreamIsCapturing(s1, &st), CUDA_SUCCESS);
	assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
	mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
	assert_int_equal(be->cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);

	assert_int_equal(be->cuEventDestroy(fork), CUDA_SUCCESS);
	assert_int_equal(be->cuEventDestroy(join), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamDestroy(s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamDestroy(s1), CUDA_SUCCESS);
	kernels_put(&k);
}

/* --sim-missing-kernels skip: a launch without a CPU version is checked, then
 * dropped with success; the memory it would have written stays as it was. */
/* A capture's edge data (programmatic dependent launch): set by
 * cuStreamUpdateCaptureDependencies_v2 out of the nodes the driver allows,
 * read back (a lossy query without room for it), carried by an event to
 * a joining stream, taken by the next node captured, which must be a
 * kernel for a programmatic edge (else that call fails and the capture is
 * invalidated). */
static void test_capture_edge_data(void **state)
{
	struct kernels k;
	CUstream s0, s1;
	CUevent fork;
	CUgraph g;
	CUgraphNode from[4], to[4], set, kern, second;
	CUgraphEdgeData prog = { 0 }, bad, got[4];
	CUstreamCaptureStatus st;
	const CUgraphNode *deps;
	const CUgraphEdgeData *edges;
	size_t n;

	prog.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
	prog.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
	kernels_get(&k);
	assert_int_equal(be->cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	assert_int_equal(be->cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamBeginCapture(s0, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
	assert_int_equal(be->cuMemsetD32Async(k.p.va, 5, 128, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamGetCaptureInfo(s0, &st, NULL, NULL, &deps, NULL, &n), CUDA_SUCCESS);
	set = deps[0];
	assert_int_equal(slow_fill(&k, k.p.va, 9, 128, 0, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamGetCaptureInfo(s0, &st, NULL, NULL, &deps, &edges, &n), CUDA_SUCCESS);
	assert_int_equal(n, 1);
	kern = deps[0];
	assert_true(!edges[0].type && !edges[0].from_port);
	/* Out of a memset, a reserved byte set, a port into the next node. */
	assert_int_equal(be->cuStreamUpdateCaptureDependencies(s0, &set, &prog, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
			 CUDA_ERROR_INVALID_VALUE);
	bad = prog;
	bad.reserved[3] = 1;
	assert_int_equal(be->cuStreamUpdateCaptureDependencies(s0, &kern, &bad, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
			 CUDA_ERROR_INVALID_VALUE);
	bad = prog;
	bad.to_port = 1;
	assert_int_equal(be->cuStreamUpdateCaptureDependencies(s0, &kern, &bad, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
			 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuStreamUpdateCaptureDependencies(s0, &kern, &prog, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
			 CUDA_SUCCESS);
	assert_int_equal(be->cuStreamGetCaptureInfo(s0, &st, NULL, NULL, &deps, NULL, &n), CUDA_ERROR_LOSSY_QUERY);
	assert_int_equal(be->cuStreamGetCaptureInfo(s0, &st, NULL, NULL, NULL, &edges, &n), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(be->cuStreamGetCaptureInfo(s0, &st, NULL, NULL, NULL, NULL, &n), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamGetCaptureInfo(s0, &st, NULL, NULL, &deps, &edges, &n), CUDA_SUCCESS);
	assert_int_equal(n, 1);
	assert_ptr_equal(deps[0], kern);
	assert_memory_equal(&edges[0], &prog, sizeof(prog));
	/* The data travels with an event to the stream that joins. */
	assert_int_equal(be->cuEventRecord(fork, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWaitEvent(s1, fork, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamGetCaptureInfo(s1, &st, NULL, NULL, &deps, &edges, &n), CUDA_SUCCESS);
	assert_int_equal(n, 1);
	assert_memory_equal(&edges[0], &prog, sizeof(prog));
	assert_int_equal(slow_fill(&k, k.p.va + 4096, 3, 128, 0, s1), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamGetCaptureInfo(s1, &st, NULL, NULL, &deps, &edges, &n), CUDA_SUCCESS);
	second = deps[0];
	assert_true(!edges[0].type);
	assert_int_equal(be->cuEventRecord(fork, s1), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamWaitEvent(s0, fork, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamEndCapture(s0, &g), CUDA_SUCCESS);
	n = 4;
	assert_int_equal(be->cuGraphGetEdges(g, from, to, got, &n), CUDA_SUCCESS);
	assert_int_equal(n, 2);
	assert_ptr_equal(from[1], kern);
	assert_ptr_equal(to[1], second);
	assert_memory_equal(&got[1], &prog, sizeof(prog));
	assert_int_equal(be->cuGraphDestroy(g), CUDA_SUCCESS);

	/* A programmatic edge into a memset: taken and kept as given (the
	 * driver, 580.159). */
	assert_int_equal(be->cuStreamBeginCapture(s0, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
	assert_int_equal(slow_fill(&k, k.p.va, 9, 128, 0, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamGetCaptureInfo(s0, &st, NULL, NULL, &deps, NULL, &n), CUDA_SUCCESS);
	kern = deps[0];
	assert_int_equal(be->cuStreamUpdateCaptureDependencies(s0, &kern, &prog, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
			 CUDA_SUCCESS);
	assert_int_equal(be->cuMemsetD32Async(k.p.va, 5, 128, s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamEndCapture(s0, &g), CUDA_SUCCESS);
	n = 4;
	assert_int_equal(be->cuGraphGetEdges(g, from, to, got, &n), CUDA_SUCCESS);
	assert_int_equal(n, 1);
	assert_ptr_equal(from[0], kern);
	assert_memory_equal(&got[0], &prog, sizeof(got[0]));
	assert_int_equal(be->cuGraphDestroy(g), CUDA_SUCCESS);
	assert_int_equal(be->cuEventDestroy(fork), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamDestroy(s0), CUDA_SUCCESS);
	assert_int_equal(be->cuStreamDestroy(s1), CUDA_SUCCESS);
	kernels_put(&k);
}

static void test_skip_missing(void **state)
{
	void *img = image_or_skip(fatbin_path);
	CUfunction none;
	CUmodule m;
	struct piece p;
	int32_t out = -1;

	group_teardown(state);
	assert_int_equal(sim_open(true), 0);
	assert_int_equal(be->cuModuleLoadData(&m, img), CUDA_SUCCESS);
	free(img);
	assert_int_equal(be->cuModuleGetFunction(&none, m, "no_cpu"), CUDA_SUCCESS);
	piece_get(&p, 2 * MIB, 0);
	assert_int_equal(be->cuMemsetD32(p.va, 5, 1), CUDA_SUCCESS);
	{
		CUdeviceptr dout = p.va;
		void *args[] = { &dout };

		assert_int_equal(be->cuLaunchKernel(none, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL),
				 CUDA_SUCCESS);
		/* Still checked like any launch. */
		assert_int_equal(be->cuLaunchKernel(none, 1, 1, 1, 2048, 1, 1, 0, NULL, args, NULL),
				 CUDA_ERROR_INVALID_VALUE);
	}
	assert_int_equal(be->cuCtxSynchronize(), CUDA_SUCCESS);
	assert_int_equal(be->cuMemcpyDtoH(&out, p.va, 4), CUDA_SUCCESS);
	assert_int_equal(out, 5);
	piece_put(&p);
	assert_int_equal(be->cuModuleUnload(m), CUDA_SUCCESS);
	group_teardown(state);
	assert_int_equal(sim_open(false), 0);
}

static void test_reopen(void **state)
{
	struct backend *other;
	struct backend_config cfg = { 0 };

	/* One sim per process: its entry points are process-wide like a driver's. */
	assert_int_equal(backend_sim_open(&cfg, &other), -EBUSY);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_device_query),
		cmocka_unit_test(test_device_by_bus_id),
		cmocka_unit_test(test_device_links),
		cmocka_unit_test(test_contexts),
		cmocka_unit_test(test_arena_round_trip),
		cmocka_unit_test(test_bad_pointers),
		cmocka_unit_test(test_out_of_memory_counts),
		cmocka_unit_test(test_module_vec_add),
		cmocka_unit_test(test_param_info_and_globals),
		cmocka_unit_test(test_managed_window),
		cmocka_unit_test(test_library_cubin),
		cmocka_unit_test(test_invalid_image),
		cmocka_unit_test(test_stream_order),
		cmocka_unit_test(test_events),
		cmocka_unit_test(test_two_streams),
		cmocka_unit_test(test_wait_value_other_stream),
		cmocka_unit_test(test_occupancy),
		cmocka_unit_test(test_graphs),
		cmocka_unit_test(test_capture),
		cmocka_unit_test(test_capture_edge_data),
		cmocka_unit_test(test_reopen),
		cmocka_unit_test(test_kernel_fault),
		cmocka_unit_test(test_skip_missing),
	};

	if (argc < 4) {
		fprintf(stderr, "usage: %s PLUGIN FATBIN|- CUBIN|-\n", argv[0]);
		return 2;
	}
	plugin_path = argv[1];
	fatbin_path = argv[2];
	cubin_path = argv[3];
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
