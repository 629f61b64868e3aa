/* Devices: enumeration, names, uuids, memory and attributes. cudart reads
 * about a hundred attributes per device at start-up; they are fetched in one
 * device_get_attributes round trip and answered from the cache. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Attribute values the device does not know (docs/wire-protocol.md). */
#define DEVICE_ATTR_UNKNOWN INT32_MIN

void device_cache_reset(struct shim_process *p)
{
	for (unsigned i = 0; i < SHIM_DEVICE_CACHE; i++) {
		free(p->cache.attrs[i]);
		p->cache.attrs[i] = NULL;
	}
}

static CUresult device_attrs_fetch(CUdevice dev, int32_t **out)
{
	struct shim_process *p = shim_process();
	struct wire_device_get_attributes_req req = {
		.device = dev, .first = 0, .count = CU_DEVICE_ATTRIBUTE_MAX,
	};
	struct wire_device_get_attributes_rep rep;
	int32_t *vals;
	CUresult res;

	pthread_mutex_lock(&p->cache.lock);
	*out = p->cache.attrs[dev];
	pthread_mutex_unlock(&p->cache.lock);
	if (*out)
		return CUDA_SUCCESS;
	res = rpc_device_get_attributes(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	if (rep.values.len != 4u * CU_DEVICE_ATTRIBUTE_MAX) {
		pr_err("device_get_attributes: %u bytes for %d attributes", rep.values.len,
		       CU_DEVICE_ATTRIBUTE_MAX);
		return CUDA_ERROR_UNKNOWN;
	}
	vals = malloc(sizeof(*vals) * CU_DEVICE_ATTRIBUTE_MAX);
	if (!vals)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned i = 0; i < CU_DEVICE_ATTRIBUTE_MAX; i++) {
		const uint8_t *b = rep.values.ptr + 4 * i;

		vals[i] = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
				    (uint32_t)b[3] << 24);
	}
	pthread_mutex_lock(&p->cache.lock);
	if (p->cache.attrs[dev]) {
		free(vals);     /* another thread won the race */
	} else {
		p->cache.attrs[dev] = vals;
	}
	*out = p->cache.attrs[dev];
	pthread_mutex_unlock(&p->cache.lock);
	return CUDA_SUCCESS;
}

CUresult device_attribute(CUdevice dev, int attrib, int *value)
{
	int32_t *vals;
	CUresult res;

	if (!value || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= SHIM_DEVICE_CACHE) {
		struct wire_device_get_attribute_req req = { .attrib = attrib, .device = dev };
		struct wire_device_get_attribute_rep rep;

		res = rpc_device_get_attribute(&req, &rep);
		if (res == CUDA_SUCCESS)
			*value = rep.value;
		return res;
	}
	res = device_attrs_fetch(dev, &vals);
	if (res != CUDA_SUCCESS)
		return res;
	if (vals[attrib] == DEVICE_ATTR_UNKNOWN)
		return CUDA_ERROR_INVALID_VALUE;
	*value = vals[attrib];
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	return device_attribute(dev, (int)attrib, pi);
}

SHIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	struct wire_device_get_req req = { .ordinal = ordinal };
	struct wire_device_get_rep rep;
	CUresult res;

	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_device_get(&req, &rep);
	if (res == CUDA_SUCCESS)
		*device = rep.device;
	return res;
}

SHIM_API CUresult cuDeviceGetCount(int *count)
{
	struct wire_device_get_count_req req = { 0 };
	struct wire_device_get_count_rep rep;
	CUresult res;

	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_device_get_count(&req, &rep);
	if (res == CUDA_SUCCESS)
		*count = rep.count;
	return res;
}

SHIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	struct wire_device_get_name_req req = { .device = dev };
	struct wire_device_get_name_rep rep;
	CUresult res;

	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_device_get_name(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	/* Truncated to fit, like the driver. */
	strncpy(name, rep.name, (size_t)len - 1);
	name[len - 1] = 0;
	return CUDA_SUCCESS;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
	struct wire_device_get_uuid_req req = { .device = dev };
	struct wire_device_get_uuid_rep rep;
	CUresult res;

	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_device_get_uuid(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	if (rep.uuid.len != sizeof(uuid->bytes))
		return CUDA_ERROR_UNKNOWN;
	memcpy(uuid->bytes, rep.uuid.ptr, sizeof(uuid->bytes));
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	return device_uuid(uuid, dev);
}

SHIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	return device_uuid(uuid, dev);
}

SHIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	struct wire_device_total_mem_req req = { .device = dev };
	struct wire_device_total_mem_rep rep;
	CUresult res;

	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_device_total_mem(&req, &rep);
	if (res == CUDA_SUCCESS)
		*bytes = (size_t)rep.bytes;
	return res;
}

SHIM_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	struct wire_device_get_pci_bus_id_req req = { .device = dev };
	struct wire_device_get_pci_bus_id_rep rep;
	CUresult res;

	if (!pciBusId || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_device_get_pci_bus_id(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	strncpy(pciBusId, rep.bus_id, (size_t)len - 1);
	pciBusId[len - 1] = 0;
	return CUDA_SUCCESS;
}
