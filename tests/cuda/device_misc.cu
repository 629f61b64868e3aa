/* device_misc: the device queries beyond attributes, run natively and
 * through tern with the same checks: a device by its PCI bus id (every form
 * the driver accepts), the 1D linear texture limit, atomic capabilities of
 * the host and peer links, the GPUDirect RDMA write fence, the graph memory
 * figures, cuLibraryGetUnifiedFunction; and, through tern only (TERN_SERVER),
 * the calls tern refuses on purpose (docs/limits.md), each with the error a
 * driver without the feature gives. Natively those are printed, not judged. */
#include <ctype.h>

#include "check.h"

__global__ void dm_touch(int *p)
{
	if (p)
		*p = 1;
}

static bool through_tern(void)
{
	return getenv("TERN_SERVER") != NULL;
}

static void bus_id_forms(int dev)
{
	DRV_FN(cuDeviceGetPCIBusId);
	DRV_FN(cuDeviceGetByPCIBusId);
	char id[64], form[64];
	unsigned domain = 0, bus = 0, device = 0, function = 0;
	CUdevice got = -1;

	CHECK_DRV(p_cuDeviceGetPCIBusId(id, sizeof(id), dev));
	REQUIRE(sscanf(id, "%x:%x:%x.%x", &domain, &bus, &device, &function) == 4, "bus id '%s'", id);
	CHECK_DRV(p_cuDeviceGetByPCIBusId(&got, id));
	REQUIRE(got == dev, "'%s' is device %d, not %d", id, got, dev);
	for (char *c = id; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	got = -1;
	CHECK_DRV(p_cuDeviceGetByPCIBusId(&got, id));
	REQUIRE(got == dev, "lower case '%s' is device %d, not %d", id, got, dev);
	for (char *c = id; *c; c++)
		*c = (char)toupper((unsigned char)*c);
	got = -1;
	CHECK_DRV(p_cuDeviceGetByPCIBusId(&got, id));
	REQUIRE(got == dev, "upper case '%s' is device %d, not %d", id, got, dev);
	/* domain:bus:device */
	snprintf(form, sizeof(form), "%04x:%02x:%02x", domain, bus, device);
	got = -1;
	CHECK_DRV(p_cuDeviceGetByPCIBusId(&got, form));
	REQUIRE(got == dev, "'%s' is device %d, not %d", form, got, dev);
	/* bus:device.function names domain 0 */
	if (domain == 0) {
		snprintf(form, sizeof(form), "%02x:%02x.%x", bus, device, function);
		got = -1;
		CHECK_DRV(p_cuDeviceGetByPCIBusId(&got, form));
		REQUIRE(got == dev, "'%s' is device %d, not %d", form, got, dev);
	}
	printf("device %d: %s\n", dev, id);
}

static void bus_id_errors(void)
{
	DRV_FN(cuDeviceGetByPCIBusId);
	CUdevice got;

	EXPECT_DRV(p_cuDeviceGetByPCIBusId(NULL, "0000:00:00.0"), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceGetByPCIBusId(&got, NULL), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceGetByPCIBusId(&got, "not a bus id"), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceGetByPCIBusId(&got, ""), CUDA_ERROR_INVALID_VALUE);
	/* Well formed, but no GPU sits there. */
	EXPECT_DRV(p_cuDeviceGetByPCIBusId(&got, "fffe:fe:1f.0"), CUDA_ERROR_INVALID_DEVICE);
}

static void texture_1d(int dev)
{
	DRV_FN(cuDeviceGetTexture1DLinearMaxWidth);
	static const struct {
		CUarray_format format;
		unsigned channels;
	} ok[] = {
		{ CU_AD_FORMAT_UNSIGNED_INT8, 1 }, { CU_AD_FORMAT_FLOAT, 1 }, { CU_AD_FORMAT_FLOAT, 4 },
		{ CU_AD_FORMAT_HALF, 2 },
	};
	size_t w = 0;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		w = 0;
		CHECK_DRV(p_cuDeviceGetTexture1DLinearMaxWidth(&w, ok[i].format, ok[i].channels, dev));
		REQUIRE(w >= 65536, "format %d x%u: %zu elements", (int)ok[i].format, ok[i].channels, w);
		printf("  1D linear texture, format %#x x%u: %zu elements\n", (unsigned)ok[i].format,
		       ok[i].channels, w);
	}
	EXPECT_DRV(p_cuDeviceGetTexture1DLinearMaxWidth(NULL, CU_AD_FORMAT_FLOAT, 1, dev), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceGetTexture1DLinearMaxWidth(&w, CU_AD_FORMAT_FLOAT, 1, 999), CUDA_ERROR_INVALID_DEVICE);
}

#define ATOMIC_CAPS_ALL 0x7fu

static void atomics(int dev, int count)
{
	DRV_FN(cuDeviceGetHostAtomicCapabilities);
	DRV_FN(cuDeviceGetP2PAtomicCapabilities);
	DRV_FN(cuDeviceGetAttribute);
	CUatomicOperation ops[CU_ATOMIC_OPERATION_MAX];
	unsigned caps[CU_ATOMIC_OPERATION_MAX];
	CUatomicOperation bad = CU_ATOMIC_OPERATION_MAX;

	for (int i = 0; i < CU_ATOMIC_OPERATION_MAX; i++)
		ops[i] = (CUatomicOperation)i;
	memset(caps, 0xff, sizeof(caps));
	int native = -1, partial = -1;

	CHECK(cudaDeviceGetAttribute(&native, cudaDevAttrHostNativeAtomicSupported, dev));
	CHECK_DRV(p_cuDeviceGetAttribute(&partial, CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED, dev));
	CHECK_DRV(p_cuDeviceGetHostAtomicCapabilities(caps, ops, CU_ATOMIC_OPERATION_MAX, dev));
	printf("  host native atomics %d, partial %d; capabilities:", native, partial);
	for (int i = 0; i < CU_ATOMIC_OPERATION_MAX; i++) {
		REQUIRE(!(caps[i] & ~ATOMIC_CAPS_ALL), "host op %d capabilities %#x", i, caps[i]);
		printf(" %#x", caps[i]);
	}
	printf("\n");
	/* The same operation twice answers the same. */
	{
		CUatomicOperation two[2] = { CU_ATOMIC_OPERATION_CAS, CU_ATOMIC_OPERATION_CAS };
		unsigned c2[2];

		CHECK_DRV(p_cuDeviceGetHostAtomicCapabilities(c2, two, 2, dev));
		REQUIRE(c2[0] == c2[1] && c2[0] == caps[CU_ATOMIC_OPERATION_CAS], "CAS %#x %#x %#x", c2[0],
			c2[1], caps[CU_ATOMIC_OPERATION_CAS]);
	}
	EXPECT_DRV(p_cuDeviceGetHostAtomicCapabilities(caps, ops, 0, dev), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceGetHostAtomicCapabilities(NULL, ops, 1, dev), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceGetHostAtomicCapabilities(caps, NULL, 1, dev), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceGetHostAtomicCapabilities(caps, &bad, 1, dev), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceGetHostAtomicCapabilities(caps, ops, 1, 999), CUDA_ERROR_INVALID_DEVICE);

	EXPECT_DRV(p_cuDeviceGetP2PAtomicCapabilities(caps, ops, 1, dev, dev), CUDA_ERROR_INVALID_DEVICE);
	EXPECT_DRV(p_cuDeviceGetP2PAtomicCapabilities(caps, ops, 1, dev, 999), CUDA_ERROR_INVALID_DEVICE);
	for (int peer = 0; peer < count; peer++) {
		if (peer == dev)
			continue;
		CHECK_DRV(p_cuDeviceGetP2PAtomicCapabilities(caps, ops, CU_ATOMIC_OPERATION_MAX, dev, peer));
		printf("  atomics to device %d:", peer);
		for (int i = 0; i < CU_ATOMIC_OPERATION_MAX; i++) {
			REQUIRE(!(caps[i] & ~ATOMIC_CAPS_ALL), "peer op %d capabilities %#x", i, caps[i]);
			printf(" %#x", caps[i]);
		}
		printf("\n");
		EXPECT_DRV(p_cuDeviceGetP2PAtomicCapabilities(caps, &bad, 1, dev, peer), CUDA_ERROR_INVALID_VALUE);
	}
}

static void rdma_flush(int dev)
{
	DRV_FN(cuFlushGPUDirectRDMAWrites);
	int options = 0;

	CHECK(cudaSetDevice(dev));
	CHECK(cudaFree(0));     /* a current context */
	CHECK(cudaDeviceGetAttribute(&options, cudaDevAttrGPUDirectRDMAFlushWritesOptions, dev));
	printf("  RDMA flush options %#x\n", options);
	if (!(options & CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST))
		return;
	CHECK_DRV(p_cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
					       CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER));
	CHECK_DRV(p_cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
					       CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES));
	EXPECT_DRV(p_cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
						(CUflushGPUDirectRDMAWritesScope)7),
		   CUDA_ERROR_INVALID_VALUE);
}

static cuuint64_t graph_mem(CUgraphMem_attribute attr)
{
	DRV_FN(cuDeviceGetGraphMemAttribute);
	cuuint64_t v = ~0ull;

	CHECK_DRV(p_cuDeviceGetGraphMemAttribute(0, attr, &v));
	return v;
}

/* Graph memory of device 0: an allocation node's memory is used once the
 * graph ran and while the graph lives (freed or not, as the H200's driver
 * does); the high watermarks keep the peak until reset to zero; a trim
 * leaves nothing reserved once no graph holds it. */
static void graph_memory(void)
{
	DRV_FN(cuDeviceSetGraphMemAttribute);
	DRV_FN(cuDeviceGetGraphMemAttribute);
	DRV_FN(cuDeviceGraphMemTrim);
	const size_t bytes = 4u << 20;
	cudaMemAllocNodeParams p = {};
	cudaGraphNode_t an;
	cudaGraphExec_t ge;
	cudaGraph_t g;
	cuuint64_t zero = 0, five = 5, v;

	CHECK(cudaSetDevice(0));
	CHECK_DRV(p_cuDeviceGraphMemTrim(0));
	CHECK_DRV(p_cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
	CHECK_DRV(p_cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero));
	REQUIRE(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0, "graph memory used before any graph");
	REQUIRE(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == 0, "high watermark after its reset");

	p.poolProps.allocType = cudaMemAllocationTypePinned;
	p.poolProps.location.type = cudaMemLocationTypeDevice;
	p.poolProps.location.id = 0;
	p.bytesize = bytes;
	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphAddMemAllocNode(&an, g, NULL, 0, &p));
	CHECK(cudaGraphInstantiate(&ge, g, 0));
	CHECK(cudaGraphLaunch(ge, 0));
	CHECK(cudaStreamSynchronize(0));
	v = graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
	REQUIRE(v >= bytes, "used %llu after the allocation ran", (unsigned long long)v);
	REQUIRE(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) >= v, "reserved below used");
	REQUIRE(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) >= v, "high watermark below used");
	REQUIRE(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) >= v, "reserved high watermark below used");
	printf("graph memory: used %llu reserved %llu\n", (unsigned long long)v,
	       (unsigned long long)graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));

	CHECK(cudaFree(p.dptr));
	CHECK(cudaDeviceSynchronize());
	/* The memory stays the graph's while it lives. */
	REQUIRE(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) >= bytes, "used after the free");
	REQUIRE(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) >= bytes, "high watermark lost the peak");

	CHECK(cudaGraphExecDestroy(ge));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaDeviceSynchronize());
	CHECK_DRV(p_cuDeviceGraphMemTrim(0));
	v = graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
	REQUIRE(v == 0, "%llu bytes reserved after the trim", (unsigned long long)v);
	v = graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
	REQUIRE(v == 0, "%llu bytes used with no graph left", (unsigned long long)v);
	REQUIRE(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) >= bytes, "high watermark lost the peak");
	CHECK_DRV(p_cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
	REQUIRE(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == 0, "high watermark after its reset");

	EXPECT_DRV(p_cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &five),
		   CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero),
		   CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceGetGraphMemAttribute(0, (CUgraphMem_attribute)99, &v), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuDeviceGetGraphMemAttribute(999, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v),
		   CUDA_ERROR_INVALID_DEVICE);
	EXPECT_DRV(p_cuDeviceGraphMemTrim(999), CUDA_ERROR_INVALID_DEVICE);
}

/* A kernel is no unified function, whatever the device supports. */
static void unified_function(void)
{
	DRV_FN(cuKernelGetLibrary);
	DRV_FN(cuLibraryGetUnifiedFunction);
	cudaKernel_t k;
	CUlibrary lib;
	void *fp = NULL;

	CHECK(cudaGetKernel(&k, dm_touch));
	CHECK_DRV(p_cuKernelGetLibrary(&lib, (CUkernel)k));
	EXPECT_DRV(p_cuLibraryGetUnifiedFunction(&fp, lib, "no_such_function"), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuLibraryGetUnifiedFunction(NULL, lib, "no_such_function"), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuLibraryGetUnifiedFunction(&fp, lib, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* Refused on purpose through tern (docs/limits.md); natively, printed. */
static void refused(void)
{
	DRV_FN(cuDeviceRegisterAsyncNotification);
	DRV_FN(cuLogsCurrent);
	DRV_FN(cuLogsRegisterCallback);
	DRV_FN(cuImportExternalMemory);
	DRV_FN(cuImportExternalSemaphore);
	CUDA_EXTERNAL_MEMORY_HANDLE_DESC md = {};
	CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC sd = {};
	CUexternalMemory em;
	CUexternalSemaphore es;
	CUlogIterator it;
	CUlogsCallbackHandle lh;
	CUasyncCallbackHandle ah;
	char nvsci[64];
	const bool tern = through_tern();
	struct {
		const char *name;
		CUresult got;
	} r[5];

	md.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD;
	md.handle.fd = -1;
	md.size = 1 << 20;
	sd.type = CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD;
	sd.handle.fd = -1;
	r[0] = { "cuDeviceRegisterAsyncNotification",
		 p_cuDeviceRegisterAsyncNotification(0, [](CUasyncNotificationInfo *, void *, CUasyncCallbackHandle) {},
						      NULL, &ah) };
	r[1] = { "cuLogsCurrent", p_cuLogsCurrent(&it, 0) };
	r[2] = { "cuLogsRegisterCallback",
		 p_cuLogsRegisterCallback([](void *, CUlogLevel, char *, size_t) {}, NULL, &lh) };
	r[3] = { "cuImportExternalMemory", p_cuImportExternalMemory(&em, &md) };
	r[4] = { "cuImportExternalSemaphore", p_cuImportExternalSemaphore(&es, &sd) };
	for (int i = 0; i < 5; i++) {
		printf("  %s: %d %s\n", r[i].name, (int)r[i].got, test_drv_name(r[i].got));
		if (tern)
			REQUIRE(r[i].got == CUDA_ERROR_NOT_SUPPORTED, "%s answered %d through tern", r[i].name,
				(int)r[i].got);
	}
	if (tern) {
		/* Nothing can have been imported: the rest refuse as well. */
		DRV_FN(cuDeviceGetNvSciSyncAttributes);
		DRV_FN(cuDestroyExternalMemory);
		DRV_FN(cuDestroyExternalSemaphore);
		DRV_FN(cuExternalMemoryGetMappedBuffer);
		DRV_FN(cuSignalExternalSemaphoresAsync);
		DRV_FN(cuWaitExternalSemaphoresAsync);
		DRV_FN(cuDeviceUnregisterAsyncNotification);
		DRV_FN(cuLogsUnregisterCallback);
		DRV_FN(cuLogsDumpToMemory);
		CUDA_EXTERNAL_MEMORY_BUFFER_DESC bd = {};
		CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS sp = {};
		CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS wp = {};
		CUdeviceptr dp;
		char buf[256];
		size_t sz = sizeof(buf);

		/* Natively the list would be an NvSciSyncAttrList of the caller's. */
		EXPECT_DRV(p_cuDeviceGetNvSciSyncAttributes(nvsci, 0, CUDA_NVSCISYNC_ATTR_SIGNAL), CUDA_ERROR_NOT_SUPPORTED);

		EXPECT_DRV(p_cuDestroyExternalMemory((CUexternalMemory)0x10), CUDA_ERROR_NOT_SUPPORTED);
		EXPECT_DRV(p_cuDestroyExternalSemaphore((CUexternalSemaphore)0x10), CUDA_ERROR_NOT_SUPPORTED);
		EXPECT_DRV(p_cuExternalMemoryGetMappedBuffer(&dp, (CUexternalMemory)0x10, &bd), CUDA_ERROR_NOT_SUPPORTED);
		EXPECT_DRV(p_cuSignalExternalSemaphoresAsync((CUexternalSemaphore *)&es, &sp, 1, 0),
			   CUDA_ERROR_NOT_SUPPORTED);
		EXPECT_DRV(p_cuWaitExternalSemaphoresAsync((CUexternalSemaphore *)&es, &wp, 1, 0),
			   CUDA_ERROR_NOT_SUPPORTED);
		EXPECT_DRV(p_cuDeviceUnregisterAsyncNotification(0, (CUasyncCallbackHandle)0x10), CUDA_ERROR_NOT_SUPPORTED);
		EXPECT_DRV(p_cuLogsUnregisterCallback((CUlogsCallbackHandle)0x10), CUDA_ERROR_NOT_SUPPORTED);
		EXPECT_DRV(p_cuLogsDumpToMemory(NULL, buf, &sz, 0), CUDA_ERROR_NOT_SUPPORTED);
	} else {
		/* Natively, let go of what the driver may have made. */
		if (r[0].got == CUDA_SUCCESS) {
			DRV_FN(cuDeviceUnregisterAsyncNotification);
			CHECK_DRV(p_cuDeviceUnregisterAsyncNotification(0, ah));
		}
		if (r[2].got == CUDA_SUCCESS) {
			DRV_FN(cuLogsUnregisterCallback);
			CHECK_DRV(p_cuLogsUnregisterCallback(lh));
		}
	}
}

int main(void)
{
	int count = 0;

	CHECK(cudaGetDeviceCount(&count));
	REQUIRE(count >= 1, "device count %d", count);
	CHECK(cudaFree(0));
	for (int dev = 0; dev < count; dev++) {
		bus_id_forms(dev);
		texture_1d(dev);
		atomics(dev, count);
		rdma_flush(dev);
	}
	bus_id_errors();
	graph_memory();
	unified_function();
	refused();
	printf("PASS device_misc\n");
	return 0;
}
