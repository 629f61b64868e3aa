/* NVML for the guest (guest-nvml/): the session's device as NVML describes it.
 *
 * Name, UUID and compute capability come from the backend; memory is the
 * session's own view (its quota as the total, its arena as the used part), as
 * cuMemGetInfo answers it, so that a guest sharing the GPU sees its share.
 * Utilization, the driver's version string and the PCIe link come from the
 * host's NVML when the cuda backend runs and libnvidia-ml.so.1 is there;
 * otherwise utilization is 0, the version names the backend and the link
 * is not supported. */
#define LOG_PREFIX "exec: "
#include "exec.h"
#include "log.h"
#include "tern_guest_table.h"
#include "wire_dispatch.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* The host NVML's entry points we use, at NVML's ABI. */
struct host_nvml {
	void *lib;
	int (*init)(void);
	int (*by_uuid)(const char *uuid, void **dev);
	int (*utilization)(void *dev, unsigned int util[2]);
	int (*driver_version)(char *out, unsigned int len);
	/* Optional: older drivers' NVML may lack them (then not supported). */
	int (*pcie_generation)(void *dev, unsigned int *gen);
	int (*pcie_width)(void *dev, unsigned int *width);
};

static struct host_nvml *host_nvml_open(void)
{
	static struct host_nvml h;
	static bool tried;

	if (tried)
		return h.lib ? &h : NULL;
	tried = true;
	h.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h.lib)
		return NULL;
	h.init = (int (*)(void))dlsym(h.lib, "nvmlInit_v2");
	h.by_uuid = (int (*)(const char *, void **))dlsym(h.lib, "nvmlDeviceGetHandleByUUID");
	h.utilization = (int (*)(void *, unsigned int *))dlsym(h.lib, "nvmlDeviceGetUtilizationRates");
	h.driver_version = (int (*)(char *, unsigned int))dlsym(h.lib, "nvmlSystemGetDriverVersion");
	h.pcie_generation = (int (*)(void *, unsigned int *))dlsym(h.lib, "nvmlDeviceGetCurrPcieLinkGeneration");
	h.pcie_width = (int (*)(void *, unsigned int *))dlsym(h.lib, "nvmlDeviceGetCurrPcieLinkWidth");
	if (!h.init || !h.by_uuid || !h.utilization || !h.driver_version || h.init() != 0) {
		pr_info("host NVML unusable: utilization reads as 0");
		dlclose(h.lib);
		h.lib = NULL;
		return NULL;
	}
	return &h;
}

/* The host NVML's handle of the session's device, found by its UUID (NVML
 * and CUDA may order devices differently); NULL without a host NVML. */
static void *host_nvml_device(struct exec *ex, struct host_nvml **nvml_out)
{
	struct host_nvml *nvml = strcmp(ex->be->name, "cuda") ? NULL : host_nvml_open();
	CUuuid uuid;
	char text[64];
	void *dev;

	*nvml_out = nvml;
	if (!nvml || ex->be->cuDeviceGetUuid(&uuid, ex->dev.device) != CUDA_SUCCESS)
		return NULL;
	tern_uuid_text((const uint8_t *)uuid.bytes, text, sizeof(text));
	return nvml->by_uuid(text, &dev) == 0 ? dev : NULL;
}

CUresult exec_nvml_device_pcie(struct exec *ex, const struct wire_nvml_device_pcie_req *req,
			       struct wire_nvml_device_pcie_rep *rep)
{
	struct host_nvml *nvml;
	void *dev = host_nvml_device(ex, &nvml);

	(void)req;
	if (!dev || !nvml->pcie_generation || !nvml->pcie_width ||
	    nvml->pcie_generation(dev, &rep->link_generation) != 0 ||
	    nvml->pcie_width(dev, &rep->link_width) != 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

CUresult exec_nvml_device_info(struct exec *ex, const struct wire_nvml_device_info_req *req,
			       struct wire_nvml_device_info_rep *rep)
{
	static uint8_t uuid[16];
	struct host_nvml *nvml = strcmp(ex->be->name, "cuda") ? NULL : host_nvml_open();
	size_t total = 0;
	int major = 0, minor = 0;
	CUresult res;

	(void)req;
	res = ex->be->cuDeviceGetName(rep->name, 256, ex->dev.device);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuDeviceGetUuid((CUuuid *)uuid, ex->dev.device);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuDeviceTotalMem(&total, ex->dev.device);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ex->dev.device);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ex->dev.device);
	if (res != CUDA_SUCCESS)
		return res;
	rep->uuid = (struct wire_blob){ uuid, sizeof(uuid) };
	rep->memory_total = ex->cfg.quota && ex->cfg.quota < total ? ex->cfg.quota : total;
	rep->memory_used = exec_mem_used(ex);
	if (rep->memory_used > rep->memory_total)
		rep->memory_used = rep->memory_total;
	rep->cc_major = major;
	rep->cc_minor = minor;
	rep->gpu_util = rep->memory_util = 0;
	snprintf(rep->driver_version, sizeof(rep->driver_version), "tern-%s", ex->be->name);
	if (nvml) {
		unsigned int util[2];
		void *dev = host_nvml_device(ex, &nvml);

		if (dev && nvml->utilization(dev, util) == 0) {
			rep->gpu_util = util[0];
			rep->memory_util = util[1];
		}
		if (nvml->driver_version(rep->driver_version, 96) != 0)
			snprintf(rep->driver_version, sizeof(rep->driver_version), "tern-%s", ex->be->name);
	}
	return CUDA_SUCCESS;
}
