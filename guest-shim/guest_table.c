/* tern's own export table (common/tern_guest_table.h): the services other
 * guest libraries reach through this shim's connection. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "tern_guest_table.h"

static CUresult nvml_device_info(struct tern_nvml_info *out)
{
	struct wire_nvml_device_info_req req = { 0 };
	struct wire_nvml_device_info_rep rep;
	CUresult res;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_connect();
	if (res == CUDA_SUCCESS)
		res = rpc_nvml_device_info(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	if (rep.uuid.len != sizeof(out->uuid))
		return CUDA_ERROR_UNKNOWN;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", rep.name);
	memcpy(out->uuid, rep.uuid.ptr, sizeof(out->uuid));
	out->memory_total = rep.memory_total;
	out->memory_used = rep.memory_used;
	out->gpu_util = rep.gpu_util;
	out->memory_util = rep.memory_util;
	snprintf(out->driver_version, sizeof(out->driver_version), "%s", rep.driver_version);
	out->cc_major = rep.cc_major;
	out->cc_minor = rep.cc_minor;
	return CUDA_SUCCESS;
}

static CUresult nvml_device_pcie(unsigned int *generation, unsigned int *width)
{
	struct wire_nvml_device_pcie_req req = { 0 };
	struct wire_nvml_device_pcie_rep rep;
	CUresult res;

	if (!generation || !width)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_connect();
	if (res == CUDA_SUCCESS)
		res = rpc_nvml_device_pcie(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	*generation = rep.link_generation;
	*width = rep.link_width;
	return CUDA_SUCCESS;
}

static const struct tern_guest_table guest_table = {
	.size = sizeof(struct tern_guest_table),
	.nvml_device_info = nvml_device_info,
	.nvml_device_pcie = nvml_device_pcie,
	/* Each connects on its first use, as the shim's own calls. */
	.call = rpc_call,
	.defer = rpc_defer,
};

bool guest_table_get(const void **table, const CUuuid *id)
{
	static const uint8_t uuid[16] = TERN_GUEST_TABLE_UUID;

	if (memcmp(id->bytes, uuid, sizeof(uuid)))
		return false;
	*table = &guest_table;
	return true;
}
