/* tern's libnvidia-ml.so.1: a minimal NVML for guests (init, device count,
 * handles, name, UUID, memory, utilization, compute capability, driver
 * version), so that tools and frameworks that probe NVML work.
 *
 * It owns no connection: it finds tern's libcuda.so.1 (the guest's driver),
 * asks it for tern's own export table (common/tern_guest_table.h) and queries
 * through the shim's session. The session has one device. Under a real
 * driver the table is unknown and nvmlInit fails with DRIVER_NOT_LOADED.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "nvml_abi.h"
#include "tern_guest_table.h"

#define NVML_API __attribute__((visibility("default")))

struct nvmlDevice_st {
	unsigned index;
};

static struct {
	pthread_mutex_t lock;
	unsigned refs;                  /* nvmlInit calls not yet shut down */
	const struct tern_guest_table *table;
	struct nvmlDevice_st device;
} nvml = { .lock = PTHREAD_MUTEX_INITIALIZER };

static nvmlReturn_t nvml_from_cuda(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return NVML_SUCCESS;
	case CUDA_ERROR_INVALID_VALUE:
		return NVML_ERROR_INVALID_ARGUMENT;
	case CUDA_ERROR_NOT_SUPPORTED:
		return NVML_ERROR_NOT_SUPPORTED;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_DEVICE_UNAVAILABLE:
		return NVML_ERROR_DRIVER_NOT_LOADED;
	default:
		return NVML_ERROR_UNKNOWN;
	}
}

static nvmlReturn_t table_find(void)
{
	static const CUuuid id = { TERN_GUEST_TABLE_UUID };
	CUresult (*init)(unsigned), (*get_table)(const void **, const CUuuid *);
	const void *table = NULL;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!lib)
		return NVML_ERROR_DRIVER_NOT_LOADED;
	init = (CUresult (*)(unsigned))dlsym(lib, "cuInit");
	get_table = (CUresult (*)(const void **, const CUuuid *))dlsym(lib, "cuGetExportTable");
	if (!init || !get_table || get_table(&table, &id) != CUDA_SUCCESS || !table ||
	    !TERN_GUEST_TABLE_HAS((const struct tern_guest_table *)table, nvml_device_info))
		return NVML_ERROR_DRIVER_NOT_LOADED;    /* not tern's driver */
	if (init(0) != CUDA_SUCCESS)
		return NVML_ERROR_DRIVER_NOT_LOADED;
	nvml.table = table;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	nvmlReturn_t r = NVML_SUCCESS;

	(void)flags;
	pthread_mutex_lock(&nvml.lock);
	if (!nvml.table)
		r = table_find();
	if (r == NVML_SUCCESS)
		nvml.refs++;
	pthread_mutex_unlock(&nvml.lock);
	return r;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
	return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlInit(void)
{
	return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t r = NVML_SUCCESS;

	pthread_mutex_lock(&nvml.lock);
	if (!nvml.refs)
		r = NVML_ERROR_UNINITIALIZED;
	else
		nvml.refs--;
	pthread_mutex_unlock(&nvml.lock);
	return r;
}

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
	default: return "Unknown Error";
	}
}

/* Every query is a fresh answer from the worker: memory and utilization move. */
static nvmlReturn_t device_info(nvmlDevice_t device, struct tern_nvml_info *info)
{
	const struct tern_guest_table *t;

	pthread_mutex_lock(&nvml.lock);
	t = nvml.refs ? nvml.table : NULL;
	pthread_mutex_unlock(&nvml.lock);
	if (!t)
		return NVML_ERROR_UNINITIALIZED;
	if (device != &nvml.device)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvml_from_cuda(t->nvml_device_info(info));
}

static nvmlReturn_t initialised(void)
{
	nvmlReturn_t r;

	pthread_mutex_lock(&nvml.lock);
	r = nvml.refs ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
	pthread_mutex_unlock(&nvml.lock);
	return r;
}

/* Initialised, and @device is the session's. */
static nvmlReturn_t device_valid(nvmlDevice_t device)
{
	nvmlReturn_t r = initialised();

	return r != NVML_SUCCESS ? r : device == &nvml.device ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	nvmlReturn_t r = initialised();

	if (r != NVML_SUCCESS)
		return r;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = 1;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
	return nvmlDeviceGetCount_v2(count);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	nvmlReturn_t r = initialised();

	if (r != NVML_SUCCESS)
		return r;
	if (!device || index != 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &nvml.device;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	nvmlReturn_t r = initialised();

	if (r != NVML_SUCCESS)
		return r;
	if (!index || device != &nvml.device)
		return NVML_ERROR_INVALID_ARGUMENT;
	*index = 0;
	return NVML_SUCCESS;
}

/* Copy @text into a caller's buffer of @length, as NVML does: too small is an error. */
static nvmlReturn_t text_out(const char *text, char *out, unsigned int length)
{
	if (!out)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(text) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(out, text, strlen(text) + 1);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	struct tern_nvml_info info;
	nvmlReturn_t r;
	char text[NVML_DEVICE_UUID_BUFFER_SIZE];

	if (!uuid || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	r = device_info(&nvml.device, &info);
	if (r != NVML_SUCCESS)
		return r;
	tern_uuid_text(info.uuid, text, sizeof(text));
	if (strcmp(uuid, text))
		return NVML_ERROR_NOT_FOUND;
	*device = &nvml.device;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	struct tern_nvml_info info;
	nvmlReturn_t r = device_info(device, &info);

	return r != NVML_SUCCESS ? r : text_out(info.name, name, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	struct tern_nvml_info info;
	char text[NVML_DEVICE_UUID_BUFFER_SIZE];
	nvmlReturn_t r = device_info(device, &info);

	if (r != NVML_SUCCESS)
		return r;
	tern_uuid_text(info.uuid, text, sizeof(text));
	return text_out(text, uuid, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	struct tern_nvml_info info;
	nvmlReturn_t r;

	if (!memory)
		return NVML_ERROR_INVALID_ARGUMENT;
	r = device_info(device, &info);
	if (r != NVML_SUCCESS)
		return r;
	memory->total = info.memory_total;
	memory->used = info.memory_used;
	memory->free = info.memory_total - info.memory_used;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	nvmlMemory_t m;
	nvmlReturn_t r;

	if (!memory)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (memory->version != NVML_MEMORY_V2_VERSION)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	r = nvmlDeviceGetMemoryInfo(device, &m);
	if (r != NVML_SUCCESS)
		return r;
	memory->total = m.total;
	memory->reserved = 0;
	memory->used = m.used;
	memory->free = m.free;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
	struct tern_nvml_info info;
	nvmlReturn_t r;

	if (!utilization)
		return NVML_ERROR_INVALID_ARGUMENT;
	r = device_info(device, &info);
	if (r != NVML_SUCCESS)
		return r;
	utilization->gpu = info.gpu_util;
	utilization->memory = info.memory_util;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	struct tern_nvml_info info;
	nvmlReturn_t r;

	if (!major || !minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	r = device_info(device, &info);
	if (r != NVML_SUCCESS)
		return r;
	*major = info.cc_major;
	*minor = info.cc_minor;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	struct tern_nvml_info info;
	nvmlReturn_t r = device_info(&nvml.device, &info);

	return r != NVML_SUCCESS ? r : text_out(info.driver_version, version, length);
}

/* A driver entry point of tern's libcuda.so.1, loaded already by nvmlInit. */
static void *driver_sym(const char *name)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);

	return lib ? dlsym(lib, name) : NULL;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
	int (*get)(int *) = (int (*)(int *))driver_sym("cuDriverGetVersion");
	nvmlReturn_t r = initialised();

	if (r != NVML_SUCCESS)
		return r;
	if (!version)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!get || get(version) != 0)
		return NVML_ERROR_UNKNOWN;
	return NVML_SUCCESS;
}

/* Bus ids compare without their domain's width ("0000:" or "00000000:")
 * and case, as NVML accepts either form. */
static const char *bus_id_tail(const char *id)
{
	const char *colon = strchr(id, ':');

	return colon && strchr(colon + 1, ':') ? colon + 1 : id;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
	CUresult (*bus_id)(char *, int, CUdevice) =
		(CUresult (*)(char *, int, CUdevice))driver_sym("cuDeviceGetPCIBusId");
	char ours[64];
	nvmlReturn_t r = initialised();

	if (r != NVML_SUCCESS)
		return r;
	if (!pciBusId || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!bus_id || bus_id(ours, sizeof(ours), 0) != CUDA_SUCCESS)
		return NVML_ERROR_UNKNOWN;
	if (strcasecmp(bus_id_tail(ours), bus_id_tail(pciBusId)))
		return NVML_ERROR_NOT_FOUND;
	*device = &nvml.device;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* The session's own process is the one the device runs for it, with the
 * memory the session holds. */
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
							   nvmlProcessInfo_v1_t *infos)
{
	struct tern_nvml_info info;
	nvmlReturn_t r;

	if (!infoCount)
		return NVML_ERROR_INVALID_ARGUMENT;
	r = device_info(device, &info);
	if (r != NVML_SUCCESS)
		return r;
	if (*infoCount < 1 || !infos) {
		*infoCount = 1;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*infoCount = 1;
	infos[0].pid = (unsigned)getpid();
	infos[0].usedGpuMemory = info.memory_used;
	return NVML_SUCCESS;
}

/* The session's device link to the host, as the host's NVML reads it. */
static nvmlReturn_t pcie_link(nvmlDevice_t device, unsigned int *generation, unsigned int *width)
{
	const struct tern_guest_table *t;
	nvmlReturn_t r = device_valid(device);

	if (r != NVML_SUCCESS)
		return r;
	if (!generation || !width)
		return NVML_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&nvml.lock);
	t = nvml.table;
	pthread_mutex_unlock(&nvml.lock);
	if (!TERN_GUEST_TABLE_HAS(t, nvml_device_pcie))
		return NVML_ERROR_NOT_SUPPORTED;        /* an older shim */
	return nvml_from_cuda(t->nvml_device_pcie(generation, width));
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
	unsigned int width;

	return pcie_link(device, currLinkGen, &width);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
	unsigned int generation;

	return pcie_link(device, &generation, currLinkWidth);
}

/* A session sees one device and none of its links or fabric: every link
 * query of a valid device and output is not supported. */
static nvmlReturn_t no_links(nvmlDevice_t device, const void *out)
{
	nvmlReturn_t r = device_valid(device);

	return r != NVML_SUCCESS ? r : !out ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
							  int *type)
{
	return no_links(device, type);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, void *pci)
{
	return no_links(device, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *isActive)
{
	return no_links(device, isActive);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link, int capability,
						    unsigned int *capResult)
{
	return no_links(device, capResult);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *info)
{
	return no_links(device, info);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
	return nvmlSystemGetCudaDriverVersion_v2(version);
}
