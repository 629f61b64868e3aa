/* Memory pools and stream-ordered allocation. Pools are the worker's objects
 * (replayer/exec/exec_pool.c): their handles are virtual like any other, their
 * memory lies in the session's arena. Only device pools of pinned memory on
 * the session's device exist; host and managed pools, and exporting a pool or
 * its pointers to another process, answer CUDA_ERROR_NOT_SUPPORTED. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include "log.h"

static CUmemoryPool pool_of(uint64_t handle)
{
	return (CUmemoryPool)(uintptr_t)handle;
}

static uint64_t pool_handle(CUmemoryPool pool)
{
	return (uint64_t)(uintptr_t)pool;
}

SHIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	SHIM_ENTRY();
	struct wire_device_get_default_mem_pool_req req = { .device = dev };
	struct wire_device_get_default_mem_pool_rep rep;
	CUresult res;

	if (!pool_out)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_device_get_default_mem_pool(&req, &rep);
	if (res == CUDA_SUCCESS)
		*pool_out = pool_of(rep.pool);
	return res;
}

SHIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	SHIM_ENTRY();
	struct wire_device_get_mem_pool_req req = { .device = dev };
	struct wire_device_get_mem_pool_rep rep;
	CUresult res;

	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_device_get_mem_pool(&req, &rep);
	if (res == CUDA_SUCCESS)
		*pool = pool_of(rep.pool);
	return res;
}

SHIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	SHIM_ENTRY();
	struct wire_device_set_mem_pool_req req = { .device = dev, .pool = pool_handle(pool) };
	struct wire_device_set_mem_pool_rep rep;

	return rpc_device_set_mem_pool(&req, &rep);
}

/* CUDA 13's location-based forms: a device location with pinned memory is
 * the device's pool; host and managed pools are not remoted. */
static CUresult pool_location(const CUmemLocation *location, CUmemAllocationType type,
			      CUdevice *dev)
{
	if (!location)
		return CUDA_ERROR_INVALID_VALUE;
	if (location->type != CU_MEM_LOCATION_TYPE_DEVICE || type != CU_MEM_ALLOCATION_TYPE_PINNED) {
		pr_warn("memory pools of location type %d, allocation type %d are not remoted",
			(int)location->type, (int)type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	*dev = location->id;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location,
					 CUmemAllocationType type)
{
	SHIM_ENTRY();
	CUdevice dev;
	CUresult res = pool_location(location, type, &dev);

	return res == CUDA_SUCCESS ? cuDeviceGetDefaultMemPool(pool_out, dev) : res;
}

SHIM_API CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type)
{
	SHIM_ENTRY();
	CUdevice dev;
	CUresult res = pool_location(location, type, &dev);

	return res == CUDA_SUCCESS ? cuDeviceGetMemPool(pool, dev) : res;
}

SHIM_API CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool)
{
	SHIM_ENTRY();
	CUdevice dev;
	CUresult res = pool_location(location, type, &dev);

	return res == CUDA_SUCCESS ? cuDeviceSetMemPool(dev, pool) : res;
}

SHIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	SHIM_ENTRY();
	struct wire_mem_pool_create_req req;
	struct wire_mem_pool_create_rep rep;
	CUresult res;

	if (!pool || !poolProps)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(poolProps->reserved); i++)
		if (poolProps->reserved[i])
			return CUDA_ERROR_INVALID_VALUE;
	req = (struct wire_mem_pool_create_req){
		.alloc_type = (uint32_t)poolProps->allocType,
		.handle_types = (uint32_t)poolProps->handleTypes,
		.location_type = (uint32_t)poolProps->location.type,
		.location_id = poolProps->location.id,
		.max_size = poolProps->maxSize,
		.usage = poolProps->usage,
	};
	res = rpc_mem_pool_create(&req, &rep);
	if (res == CUDA_SUCCESS)
		*pool = pool_of(rep.pool);
	return res;
}

SHIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	SHIM_ENTRY();
	struct wire_mem_pool_destroy_req req = { .pool = pool_handle(pool) };
	struct wire_mem_pool_destroy_rep rep;

	return rpc_mem_pool_destroy(&req, &rep);
}

/* The reuse policies are ints in the driver's API, everything else a cuuint64_t. */
static bool attr_is_int(CUmemPool_attribute attr)
{
	return attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
	       attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
	       attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

SHIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	SHIM_ENTRY();
	struct wire_mem_pool_set_attribute_req req = { .pool = pool_handle(pool), .attrib = attr };
	struct wire_mem_pool_set_attribute_rep rep;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	req.value = attr_is_int(attr) ? (uint64_t)(uint32_t)*(const int *)value
				      : *(const cuuint64_t *)value;
	return rpc_mem_pool_set_attribute(&req, &rep);
}

SHIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	SHIM_ENTRY();
	struct wire_mem_pool_get_attribute_req req = { .pool = pool_handle(pool), .attrib = attr };
	struct wire_mem_pool_get_attribute_rep rep;
	CUresult res;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mem_pool_get_attribute(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	if (attr_is_int(attr))
		*(int *)value = (int)(uint32_t)rep.value;
	else
		*(cuuint64_t *)value = rep.value;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	SHIM_ENTRY();
	struct wire_mem_pool_trim_to_req req = { .pool = pool_handle(pool), .keep = minBytesToKeep };
	struct wire_mem_pool_trim_to_rep rep;

	return rpc_mem_pool_trim_to(&req, &rep);
}

SHIM_API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
				     CUmemLocation *location)
{
	SHIM_ENTRY();
	struct wire_mem_pool_get_access_req req = { .pool = pool_handle(memPool) };
	struct wire_mem_pool_get_access_rep rep;
	CUresult res;

	if (!flags || !location)
		return CUDA_ERROR_INVALID_VALUE;
	req.location_type = (uint32_t)location->type;
	req.location_id = location->id;
	res = rpc_mem_pool_get_access(&req, &rep);
	if (res == CUDA_SUCCESS)
		*flags = (CUmemAccess_flags)rep.flags;
	return res;
}

/* The session's one device owns every pool and always has read-write
 * access; there is no other device to grant it to. */
SHIM_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	SHIM_ENTRY();
	if (!map && count)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		CUmemAccess_flags now;
		CUmemLocation loc = map[i].location;
		CUresult res = cuMemPoolGetAccess(&now, pool, &loc);

		if (res != CUDA_SUCCESS)
			return res;
		if (map[i].flags != now)
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, uint64_t pool, uint64_t stream)
{
	struct wire_mem_alloc_async_req req = { .bytes = bytes, .pool = pool, .stream = stream };
	struct wire_mem_alloc_async_rep rep;
	CUresult res;

	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mem_alloc_async(&req, &rep);
	if (res == CUDA_SUCCESS)
		*dptr = rep.address;
	return res;
}

SHIM_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	SHIM_ENTRY();
	return alloc_async(dptr, bytesize, 0, shim_stream(hStream, false));
}

SHIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	SHIM_ENTRY();
	return alloc_async(dptr, bytesize, 0, shim_stream(hStream, true));
}

SHIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					  CUstream hStream)
{
	SHIM_ENTRY();
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_async(dptr, bytesize, pool_handle(pool), shim_stream(hStream, false));
}

SHIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					       CUstream hStream)
{
	SHIM_ENTRY();
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_async(dptr, bytesize, pool_handle(pool), shim_stream(hStream, true));
}

static CUresult free_async(CUdeviceptr dptr, uint64_t stream)
{
	struct wire_mem_free_async_req req = { .address = dptr, .stream = stream };
	struct wire_mem_free_async_rep rep;

	return rpc_mem_free_async(&req, &rep);
}

SHIM_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	SHIM_ENTRY();
	return free_async(dptr, shim_stream(hStream, false));
}

SHIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	SHIM_ENTRY();
	return free_async(dptr, shim_stream(hStream, true));
}
