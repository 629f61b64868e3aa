/* Devices: enumeration, names, uuids, memory and attributes. cudart reads
 * about a hundred attributes per device at start-up; they are fetched in one
 * device_get_attributes round trip and answered from the cache, as are the
 * other fixed answers of a device (count, handle, name, uuid, memory, bus
 * id, peer access) after their first round trip (shim.h, struct
 * shim_device_info, says what is forgotten when). */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Attribute values the device does not know (docs/wire-protocol.md). */
#define DEVICE_ATTR_UNKNOWN INT32_MIN

static void device_info_forget(struct shim_device_info *d)
{
	free(d->attrs);
	d->attrs = NULL;
	d->have_handle = d->have_name = d->have_uuid = d->have_total = false;
	d->have_bus_id = d->have_priorities = false;
	memset(d->peer, 0, sizeof(d->peer));
	d->primary_flags_known = false;
	d->primary_gen++;
}

void device_cache_reset(struct shim_process *p)
{
	for (unsigned i = 0; i < SHIM_DEVICE_CACHE; i++) {
		struct shim_device_info *d = &p->cache.devices[i];

		device_info_forget(d);
		d->primary_ctx = 0;
		d->primary_refs = 0;
	}
	p->cache.have_count = p->cache.have_driver_version = false;
	p->cache.epoch++;
}

void device_cache_reconnected(struct shim_process *p)
{
	pthread_mutex_lock(&p->cache.lock);
	for (unsigned i = 0; i < SHIM_DEVICE_CACHE; i++)
		device_info_forget(&p->cache.devices[i]);
	p->cache.have_count = p->cache.have_driver_version = false;
	p->cache.epoch++;
	pthread_mutex_unlock(&p->cache.lock);
}

struct shim_device_info *device_info_locked(struct shim_process *p, CUdevice dev)
{
	return dev >= 0 && dev < SHIM_DEVICE_CACHE ? &p->cache.devices[dev] : NULL;
}

/* A cached answer for @dev is read or written under the lock; a write is
 * kept only if no new connection came since the request (@epoch). */
static struct shim_device_info *device_lock(struct shim_process *p, CUdevice dev, uint64_t *epoch)
{
	pthread_mutex_lock(&p->cache.lock);
	if (epoch)
		*epoch = p->cache.epoch;
	return device_info_locked(p, dev);
}

static void device_unlock(struct shim_process *p)
{
	pthread_mutex_unlock(&p->cache.lock);
}

static CUresult device_attrs_fetch(CUdevice dev, int32_t **out)
{
	struct shim_process *p = shim_process();
	struct wire_device_get_attributes_req req = {
		.device = dev, .first = 0, .count = CU_DEVICE_ATTRIBUTE_MAX,
	};
	struct wire_device_get_attributes_rep rep;
	struct shim_device_info *d;
	uint64_t epoch;
	int32_t *vals;
	CUresult res;

	d = device_lock(p, dev, &epoch);
	*out = d->attrs;
	device_unlock(p);
	if (*out)
		return rpc_session_lost() ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_SUCCESS;
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
	for (unsigned i = 0; i < CU_DEVICE_ATTRIBUTE_MAX; i++)
		vals[i] = (int32_t)le32_get(rep.values.ptr + 4 * i);
	d = device_lock(p, dev, NULL);
	if (d->attrs || p->cache.epoch != epoch) {
		/* Another thread won the race, or the values are another connection's. */
		free(vals);
		vals = NULL;
	} else {
		d->attrs = vals;
	}
	device_unlock(p);
	if (!vals)
		return device_attrs_fetch(dev, out);
	*out = vals;
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
	SHIM_ENTRY();
	return device_attribute(dev, (int)attrib, pi);
}

SHIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_device_get_req req = { .ordinal = ordinal };
	struct wire_device_get_rep rep;
	struct shim_device_info *d;
	uint64_t epoch;
	CUresult res;

	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	d = device_lock(p, ordinal, &epoch);
	if (d && d->have_handle && !rpc_session_lost()) {
		*device = d->handle;
		device_unlock(p);
		return CUDA_SUCCESS;
	}
	device_unlock(p);
	res = rpc_device_get(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	d = device_lock(p, ordinal, NULL);
	if (d && p->cache.epoch == epoch) {
		d->handle = rep.device;
		d->have_handle = true;
	}
	device_unlock(p);
	*device = rep.device;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuDeviceGetCount(int *count)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_device_get_count_req req = { 0 };
	struct wire_device_get_count_rep rep;
	uint64_t epoch;
	CUresult res;

	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	device_lock(p, -1, &epoch);
	if (p->cache.have_count && !rpc_session_lost()) {
		*count = p->cache.device_count;
		device_unlock(p);
		return CUDA_SUCCESS;
	}
	device_unlock(p);
	res = rpc_device_get_count(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	device_lock(p, -1, NULL);
	if (p->cache.epoch == epoch) {
		p->cache.device_count = rep.count;
		p->cache.have_count = true;
	}
	device_unlock(p);
	*count = rep.count;
	return CUDA_SUCCESS;
}

/* Truncated to fit @len (at least 1), like the driver. */
static void string_out(char *out, int len, const char *s)
{
	strncpy(out, s, (size_t)len - 1);
	out[len - 1] = 0;
}

SHIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_device_get_name_req req = { .device = dev };
	struct wire_device_get_name_rep rep;
	struct shim_device_info *d;
	uint64_t epoch;
	CUresult res;

	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	d = device_lock(p, dev, &epoch);
	if (d && d->have_name && !rpc_session_lost()) {
		string_out(name, len, d->name);
		device_unlock(p);
		return CUDA_SUCCESS;
	}
	device_unlock(p);
	res = rpc_device_get_name(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	d = device_lock(p, dev, NULL);
	if (d && p->cache.epoch == epoch && strlen(rep.name) < sizeof(d->name)) {
		memcpy(d->name, rep.name, strlen(rep.name) + 1);
		d->have_name = true;
	}
	device_unlock(p);
	string_out(name, len, rep.name);
	return CUDA_SUCCESS;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
	struct shim_process *p = shim_process();
	struct wire_device_get_uuid_req req = { .device = dev };
	struct wire_device_get_uuid_rep rep;
	struct shim_device_info *d;
	uint64_t epoch;
	CUresult res;

	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	d = device_lock(p, dev, &epoch);
	if (d && d->have_uuid && !rpc_session_lost()) {
		memcpy(uuid->bytes, d->uuid, sizeof(uuid->bytes));
		device_unlock(p);
		return CUDA_SUCCESS;
	}
	device_unlock(p);
	res = rpc_device_get_uuid(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	if (rep.uuid.len != sizeof(uuid->bytes))
		return CUDA_ERROR_UNKNOWN;
	d = device_lock(p, dev, NULL);
	if (d && p->cache.epoch == epoch) {
		memcpy(d->uuid, rep.uuid.ptr, sizeof(d->uuid));
		d->have_uuid = true;
	}
	device_unlock(p);
	memcpy(uuid->bytes, rep.uuid.ptr, sizeof(uuid->bytes));
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	SHIM_ENTRY();
	return device_uuid(uuid, dev);
}

SHIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	SHIM_ENTRY();
	return device_uuid(uuid, dev);
}

SHIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_device_total_mem_req req = { .device = dev };
	struct wire_device_total_mem_rep rep;
	struct shim_device_info *d;
	uint64_t epoch;
	CUresult res;

	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	d = device_lock(p, dev, &epoch);
	if (d && d->have_total && !rpc_session_lost()) {
		*bytes = (size_t)d->total_mem;
		device_unlock(p);
		return CUDA_SUCCESS;
	}
	device_unlock(p);
	res = rpc_device_total_mem(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	d = device_lock(p, dev, NULL);
	if (d && p->cache.epoch == epoch) {
		d->total_mem = rep.bytes;
		d->have_total = true;
	}
	device_unlock(p);
	*bytes = (size_t)rep.bytes;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_device_get_pci_bus_id_req req = { .device = dev };
	struct wire_device_get_pci_bus_id_rep rep;
	struct shim_device_info *d;
	uint64_t epoch;
	CUresult res;

	if (!pciBusId || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	d = device_lock(p, dev, &epoch);
	if (d && d->have_bus_id && !rpc_session_lost()) {
		string_out(pciBusId, len, d->bus_id);
		device_unlock(p);
		return CUDA_SUCCESS;
	}
	device_unlock(p);
	res = rpc_device_get_pci_bus_id(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	d = device_lock(p, dev, NULL);
	if (d && p->cache.epoch == epoch && strlen(rep.bus_id) < sizeof(d->bus_id)) {
		memcpy(d->bus_id, rep.bus_id, strlen(rep.bus_id) + 1);
		d->have_bus_id = true;
	}
	device_unlock(p);
	string_out(pciBusId, len, rep.bus_id);
	return CUDA_SUCCESS;
}
