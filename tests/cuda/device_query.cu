/* device_query: what an application reads about the device at start-up.
 * Prints it and checks that it is sane and self-consistent: the properties
 * struct agrees with cudaDeviceGetAttribute and with the driver's own calls. */
#include "check.h"

struct attr {
	cudaDeviceAttr id;
	const char *name;
	int min;                /* smallest sane value */
};

static const struct attr attrs[] = {
	{ cudaDevAttrMaxThreadsPerBlock, "max threads per block", 64 },
	{ cudaDevAttrMaxBlockDimX, "max block dim x", 64 },
	{ cudaDevAttrMaxGridDimX, "max grid dim x", 65535 },
	{ cudaDevAttrMaxSharedMemoryPerBlock, "shared mem per block", 16384 },
	{ cudaDevAttrTotalConstantMemory, "constant memory", 8192 },
	{ cudaDevAttrWarpSize, "warp size", 32 },
	{ cudaDevAttrMaxRegistersPerBlock, "registers per block", 8192 },
	{ cudaDevAttrClockRate, "clock rate kHz", 1 },
	{ cudaDevAttrMultiProcessorCount, "SM count", 1 },
	{ cudaDevAttrComputeCapabilityMajor, "cc major", 3 },
	{ cudaDevAttrComputeCapabilityMinor, "cc minor", 0 },
	{ cudaDevAttrMaxThreadsPerMultiProcessor, "threads per SM", 64 },
	{ cudaDevAttrMemoryClockRate, "memory clock kHz", 1 },
	{ cudaDevAttrGlobalMemoryBusWidth, "memory bus width", 8 },
	{ cudaDevAttrL2CacheSize, "L2 bytes", 0 },
	{ cudaDevAttrUnifiedAddressing, "unified addressing", 1 },
	{ cudaDevAttrConcurrentKernels, "concurrent kernels", 0 },
	{ cudaDevAttrAsyncEngineCount, "async engines", 0 },
	{ cudaDevAttrPciBusId, "PCI bus", 0 },
};

int main(void)
{
	int count = 0, drv = 0, rt = 0;

	CHECK(cudaGetDeviceCount(&count));
	REQUIRE(count >= 1, "device count %d", count);
	CHECK(cudaDriverGetVersion(&drv));
	CHECK(cudaRuntimeGetVersion(&rt));
	REQUIRE(drv >= 12000 && rt >= 12000, "driver %d runtime %d", drv, rt);
	printf("devices: %d, driver %d, runtime %d\n", count, drv, rt);
	/* The runtime refuses to work on a driver older than itself. */
	REQUIRE(drv >= rt, "driver %d older than runtime %d", drv, rt);

	DRV_FN(cuDeviceGetName);
	DRV_FN(cuDeviceTotalMem);
	DRV_FN(cuDeviceGetAttribute);
	DRV_FN(cuDeviceGetUuid);

	for (int dev = 0; dev < count; dev++) {
		cudaDeviceProp p;
		char drv_name[256];
		size_t drv_total = 0, free_b = 0, total_b = 0;
		CUuuid uuid;

		CHECK(cudaGetDeviceProperties(&p, dev));
		printf("device %d: %s, cc %d.%d, %d SMs, %zu MiB\n", dev, p.name, p.major, p.minor,
		       p.multiProcessorCount, p.totalGlobalMem >> 20);
		REQUIRE(p.name[0] != '\0', "empty device name");
		REQUIRE(memchr(p.name, '\0', sizeof(p.name)) != NULL, "name not terminated");
		REQUIRE(p.major >= 3 && p.major < 100, "cc major %d", p.major);
		REQUIRE(p.minor >= 0 && p.minor < 10, "cc minor %d", p.minor);
		REQUIRE(p.multiProcessorCount >= 1, "SM count %d", p.multiProcessorCount);
		REQUIRE(p.totalGlobalMem > (64u << 20), "total memory %zu", p.totalGlobalMem);
		REQUIRE(p.warpSize == 32, "warp size %d", p.warpSize);
		REQUIRE(p.maxThreadsPerBlock >= 64 && p.maxThreadsPerBlock <= 4096,
			"max threads per block %d", p.maxThreadsPerBlock);
		REQUIRE(p.maxThreadsDim[0] >= 64 && p.maxGridSize[0] >= 65535, "dims %d %d",
			p.maxThreadsDim[0], p.maxGridSize[0]);
		REQUIRE(p.unifiedAddressing == 1, "no unified addressing");

		for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
			int v = -1, dv = -1;

			CHECK(cudaDeviceGetAttribute(&v, attrs[i].id, dev));
			CHECK_DRV(p_cuDeviceGetAttribute(&dv, (CUdevice_attribute)attrs[i].id, dev));
			printf("  %-24s %d\n", attrs[i].name, v);
			REQUIRE(v >= attrs[i].min, "%s = %d, below %d", attrs[i].name, v,
				attrs[i].min);
			REQUIRE(v == dv, "%s: runtime %d, driver %d", attrs[i].name, v, dv);
		}
		/* The struct and the attributes come from the same device. */
		int v;
		CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
		REQUIRE(v == p.multiProcessorCount, "SMs %d vs %d", v, p.multiProcessorCount);
		CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, dev));
		REQUIRE(v == p.major, "cc major %d vs %d", v, p.major);
		CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, dev));
		REQUIRE(v == p.maxThreadsPerBlock, "threads %d vs %d", v, p.maxThreadsPerBlock);
		CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev));
		REQUIRE(v == p.l2CacheSize, "L2 %d vs %d", v, p.l2CacheSize);

		CHECK_DRV(p_cuDeviceGetName(drv_name, sizeof(drv_name), dev));
		REQUIRE(strcmp(drv_name, p.name) == 0, "names differ: %s / %s", drv_name, p.name);
		CHECK_DRV(p_cuDeviceTotalMem(&drv_total, dev));
		REQUIRE(drv_total == p.totalGlobalMem, "total %zu vs %zu", drv_total,
			p.totalGlobalMem);
		CHECK_DRV(p_cuDeviceGetUuid(&uuid, dev));
		REQUIRE(memcmp(uuid.bytes, p.uuid.bytes, 16) == 0, "uuids differ");

		CHECK(cudaSetDevice(dev));
		CHECK(cudaMemGetInfo(&free_b, &total_b));
		printf("  free %zu MiB of %zu MiB\n", free_b >> 20, total_b >> 20);
		REQUIRE(total_b > 0 && free_b <= total_b, "mem info free %zu total %zu", free_b,
			total_b);
		REQUIRE(total_b <= p.totalGlobalMem, "mem info total %zu > device %zu", total_b,
			p.totalGlobalMem);
	}
	/* Asking for a device that does not exist is an error, not a crash. */
	cudaDeviceProp none;
	EXPECT_RT(cudaGetDeviceProperties(&none, count), cudaErrorInvalidDevice);
	test_pass("device_query");
	return 0;
}
