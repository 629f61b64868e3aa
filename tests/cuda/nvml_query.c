/* nvml_query: what NVML says about device 0, checked against the CUDA
 * driver in the same process: the same name, UUID and compute capability,
 * and memory that adds up (natively the device's; through tern the session's
 * share: its quota, or the device). Both libraries are found by dlopen as a
 * tool would find them (libnvidia-ml.so.1, libcuda.so.1). */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "nvml_abi.h"

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); return 1; } while (0)
#define NVML_OK(call) do { nvmlReturn_t r_ = (call); if (r_ != NVML_SUCCESS) FAIL("%s returned %d", #call, (int)r_); } while (0)
#define CU_OK(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) FAIL("%s returned %d", #call, (int)r_); } while (0)

int main(void)
{
	void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW), *cu = dlopen("libcuda.so.1", RTLD_NOW);
	nvmlReturn_t (*init)(void), (*count_fn)(unsigned *), (*handle)(unsigned, nvmlDevice_t *);
	nvmlReturn_t (*name_fn)(nvmlDevice_t, char *, unsigned), (*uuid_fn)(nvmlDevice_t, char *, unsigned);
	nvmlReturn_t (*mem_fn)(nvmlDevice_t, nvmlMemory_t *), (*util_fn)(nvmlDevice_t, nvmlUtilization_t *);
	nvmlReturn_t (*cc_fn)(nvmlDevice_t, int *, int *), (*drv_fn)(char *, unsigned), (*shutdown)(void);
	CUresult (*cu_init)(unsigned), (*cu_name)(char *, int, CUdevice), (*cu_uuid)(CUuuid *, CUdevice);
	CUresult (*cu_attr)(int *, CUdevice_attribute, CUdevice), (*cu_bus)(char *, int, CUdevice);
	/* What PyTorch's allocator looks up (c10/cuda/driver_api.h): all must exist. */
	nvmlReturn_t (*by_bus)(const char *, nvmlDevice_t *), (*procs)(nvmlDevice_t, unsigned *,
								      nvmlProcessInfo_v1_t *);
	nvmlReturn_t (*link_type)(nvmlDevice_t, unsigned, int *), (*link_pci)(nvmlDevice_t, unsigned, void *);
	nvmlReturn_t (*cuda_version)(int *);
	/* What XLA's device description reads (JAX): the PCIe link, NVLink
	 * state and capability. */
	nvmlReturn_t (*pcie_gen)(nvmlDevice_t, unsigned *), (*pcie_width)(nvmlDevice_t, unsigned *);
	nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int *), (*link_cap)(nvmlDevice_t, unsigned, int, unsigned *);
	nvmlReturn_t gen_r, width_r;
	unsigned gen = 0, width = 0;
	char bus[64];
	unsigned nprocs = 0;
	int nvml_cuda_version = 0;
	nvmlDevice_t by_bus_dev;
	char name[NVML_DEVICE_NAME_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_BUFFER_SIZE], want_uuid[80];
	char cu_dev_name[256], driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE], tiny[4];
	unsigned count = 0;
	int major, minor, cu_major, cu_minor;
	nvmlDevice_t dev;
	nvmlMemory_t mem;
	nvmlUtilization_t util;
	CUuuid u;

	if (!nv || !cu)
		FAIL("dlopen: %s", dlerror());
#define SYM(lib, var, name) do { *(void **)&var = dlsym(lib, name); if (!var) FAIL("no %s", name); } while (0)
	SYM(nv, init, "nvmlInit_v2");
	SYM(nv, count_fn, "nvmlDeviceGetCount_v2");
	SYM(nv, handle, "nvmlDeviceGetHandleByIndex_v2");
	SYM(nv, name_fn, "nvmlDeviceGetName");
	SYM(nv, uuid_fn, "nvmlDeviceGetUUID");
	SYM(nv, mem_fn, "nvmlDeviceGetMemoryInfo");
	SYM(nv, util_fn, "nvmlDeviceGetUtilizationRates");
	SYM(nv, cc_fn, "nvmlDeviceGetCudaComputeCapability");
	SYM(nv, drv_fn, "nvmlSystemGetDriverVersion");
	SYM(nv, shutdown, "nvmlShutdown");
	SYM(nv, by_bus, "nvmlDeviceGetHandleByPciBusId_v2");
	SYM(nv, procs, "nvmlDeviceGetComputeRunningProcesses");
	SYM(nv, link_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
	SYM(nv, link_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
	SYM(nv, cuda_version, "nvmlSystemGetCudaDriverVersion_v2");
	SYM(nv, pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
	SYM(nv, pcie_width, "nvmlDeviceGetCurrPcieLinkWidth");
	SYM(nv, link_state, "nvmlDeviceGetNvLinkState");
	SYM(nv, link_cap, "nvmlDeviceGetNvLinkCapability");
	SYM(cu, cu_bus, "cuDeviceGetPCIBusId");
	SYM(cu, cu_init, "cuInit");
	SYM(cu, cu_name, "cuDeviceGetName");
	SYM(cu, cu_uuid, "cuDeviceGetUuid_v2");
	SYM(cu, cu_attr, "cuDeviceGetAttribute");

	if (count_fn(&count) != NVML_ERROR_UNINITIALIZED)
		FAIL("a query before nvmlInit must answer UNINITIALIZED");
	NVML_OK(init());
	NVML_OK(count_fn(&count));
	if (count < 1)
		FAIL("%u devices", count);
	NVML_OK(handle(0, &dev));
	NVML_OK(name_fn(dev, name, sizeof(name)));
	NVML_OK(uuid_fn(dev, uuid, sizeof(uuid)));
	if (name_fn(dev, tiny, sizeof(tiny)) != NVML_ERROR_INSUFFICIENT_SIZE)
		FAIL("a 4-byte name buffer must be INSUFFICIENT_SIZE");
	NVML_OK(mem_fn(dev, &mem));
	NVML_OK(util_fn(dev, &util));
	NVML_OK(cc_fn(dev, &major, &minor));
	NVML_OK(drv_fn(driver, sizeof(driver)));
	printf("nvml: %u device(s); %s, %s, cc %d.%d, memory %llu MiB total, %llu MiB used, "
	       "utilization gpu %u%% memory %u%%, driver %s\n", count, name, uuid, major, minor,
	       mem.total >> 20, mem.used >> 20, util.gpu, util.memory, driver);

	CU_OK(cu_init(0));
	CU_OK(cu_name(cu_dev_name, sizeof(cu_dev_name), 0));
	CU_OK(cu_uuid(&u, 0));
	CU_OK(cu_attr(&cu_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
	CU_OK(cu_attr(&cu_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
	snprintf(want_uuid, sizeof(want_uuid),
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 (unsigned char)u.bytes[0], (unsigned char)u.bytes[1], (unsigned char)u.bytes[2],
		 (unsigned char)u.bytes[3], (unsigned char)u.bytes[4], (unsigned char)u.bytes[5],
		 (unsigned char)u.bytes[6], (unsigned char)u.bytes[7], (unsigned char)u.bytes[8],
		 (unsigned char)u.bytes[9], (unsigned char)u.bytes[10], (unsigned char)u.bytes[11],
		 (unsigned char)u.bytes[12], (unsigned char)u.bytes[13], (unsigned char)u.bytes[14],
		 (unsigned char)u.bytes[15]);
	if (strcmp(name, cu_dev_name))
		FAIL("NVML name '%s', CUDA '%s'", name, cu_dev_name);
	if (strcmp(uuid, want_uuid))
		FAIL("NVML UUID %s, CUDA %s", uuid, want_uuid);
	if (major != cu_major || minor != cu_minor)
		FAIL("NVML cc %d.%d, CUDA %d.%d", major, minor, cu_major, cu_minor);
	if (!mem.total || mem.used > mem.total || mem.free != mem.total - mem.used)
		FAIL("memory total %llu used %llu free %llu", mem.total, mem.used, mem.free);
	if (util.gpu > 100 || util.memory > 100)
		FAIL("utilization %u%% %u%%", util.gpu, util.memory);
	/* The device found by its bus id, as CUDA names it. */
	CU_OK(cu_bus(bus, sizeof(bus), 0));
	printf("nvml: device at bus %s\n", bus);
	NVML_OK(by_bus(bus, &by_bus_dev));
	if (by_bus_dev != dev)
		FAIL("nvmlDeviceGetHandleByPciBusId_v2(%s) is another device", bus);
	NVML_OK(cuda_version(&nvml_cuda_version));
	if (nvml_cuda_version < 12000)
		FAIL("CUDA driver version %d from NVML", nvml_cuda_version);
	/* The link the device sits on: PCIe generation 1-6, a lane count NVML
	 * knows. A driver or host may not say (NOT_SUPPORTED); tern says what
	 * the host's NVML says, and on the sim nothing. */
	gen_r = pcie_gen(dev, &gen);
	width_r = pcie_width(dev, &width);
	printf("nvml: PCIe link: generation %u (%d), width x%u (%d)\n", gen, (int)gen_r, width, (int)width_r);
	if (gen_r != width_r)
		FAIL("the PCIe generation answered %d, the width %d", (int)gen_r, (int)width_r);
	if (gen_r == NVML_SUCCESS && (gen < 1 || gen > 6 || width < 1 || width > 32 || (width & (width - 1))))
		FAIL("PCIe generation %u width %u", gen, width);
	if (gen_r != NVML_SUCCESS && gen_r != NVML_ERROR_NOT_SUPPORTED)
		FAIL("the PCIe link: %d, neither success nor NOT_SUPPORTED", (int)gen_r);
	if (pcie_gen(dev, NULL) != NVML_ERROR_INVALID_ARGUMENT)
		FAIL("nvmlDeviceGetCurrPcieLinkGeneration with no output must be INVALID_ARGUMENT");
	if (getenv("TERN_SERVER")) {    /* through tern: the session is this process */
		nvmlProcessInfo_v1_t info[4];
		nvmlReturn_t r;
		const char *backend = getenv("TERN_TEST_BACKEND");
		int state = 0;
		unsigned cap = 0;

		if ((!backend || strcmp(backend, "cuda")) && gen_r != NVML_ERROR_NOT_SUPPORTED)
			FAIL("the sim has no PCIe link, NVML answered %d", (int)gen_r);
		/* No links: every NVLink query is NOT_SUPPORTED, after the
		 * arguments are checked as NVML checks them. */
		if ((r = link_state(dev, 0, &state)) != NVML_ERROR_NOT_SUPPORTED)
			FAIL("nvmlDeviceGetNvLinkState: %d, not NOT_SUPPORTED", (int)r);
		if ((r = link_cap(dev, 0, 0, &cap)) != NVML_ERROR_NOT_SUPPORTED)
			FAIL("nvmlDeviceGetNvLinkCapability: %d, not NOT_SUPPORTED", (int)r);
		if ((r = link_state(dev, 0, NULL)) != NVML_ERROR_INVALID_ARGUMENT)
			FAIL("nvmlDeviceGetNvLinkState with no output: %d, not INVALID_ARGUMENT", (int)r);
		if ((r = link_cap((nvmlDevice_t)&state, 0, 0, &cap)) != NVML_ERROR_INVALID_ARGUMENT)
			FAIL("nvmlDeviceGetNvLinkCapability of no device: %d, not INVALID_ARGUMENT", (int)r);
		if ((r = pcie_width((nvmlDevice_t)&state, &width)) != NVML_ERROR_INVALID_ARGUMENT)
			FAIL("nvmlDeviceGetCurrPcieLinkWidth of no device: %d, not INVALID_ARGUMENT", (int)r);

		if ((r = by_bus("0000:ff:1f.7", &by_bus_dev)) != NVML_ERROR_NOT_FOUND)
			FAIL("a bus id of no device: %d, not NOT_FOUND", (int)r);
		/* Sizing call first, as NVML's callers do. */
		nprocs = 0;
		if ((r = procs(dev, &nprocs, NULL)) != NVML_ERROR_INSUFFICIENT_SIZE || nprocs != 1)
			FAIL("sizing the process list: %d, %u", (int)r, nprocs);

		nprocs = 4;
		NVML_OK(procs(dev, &nprocs, info));
		if (nprocs != 1 || info[0].pid != (unsigned)getpid())
			FAIL("%u processes, first pid %u, not this one (%d)", nprocs, info[0].pid, (int)getpid());
	}
	(void)link_type;
	(void)link_pci;
	NVML_OK(shutdown());
	if (pcie_gen(dev, &gen) != NVML_ERROR_UNINITIALIZED)
		FAIL("a query after nvmlShutdown must answer UNINITIALIZED");
	printf("PASS nvml_query\n");
	return 0;
}
