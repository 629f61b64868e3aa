/* Virtual memory management: address reservations, physical allocations,
 * mappings and their access (replayer/exec/exec_vmm.c). Reservations come from a
 * fixed window after room for every device's arena, so every address is the
 * one the worker maps; allocation handles are virtual like any other. Only
 * pinned device memory, on the session's device 0, exists. Not defined here, so they
 * answer CUDA_ERROR_NOT_SUPPORTED (tools/api-coverage says why):
 * cuMemExportToShareableHandle and cuMemImportFromShareableHandle (a file
 * descriptor or fabric handle of the worker's host means nothing in the
 * guest) and cuMemMapArrayAsync (sparse arrays are refused). */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <string.h>

#include "log.h"


static bool prop_reserved_clear(const CUmemAllocationProp *prop)
{
	for (size_t i = 0; i < sizeof(prop->allocFlags.reserved); i++)
		if (prop->allocFlags.reserved[i])
			return false;
	return true;
}

SHIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
						CUmemAllocationGranularity_flags option)
{
	SHIM_ENTRY();
	struct wire_mem_get_allocation_granularity_req req;
	struct wire_mem_get_allocation_granularity_rep rep;
	CUresult res;

	if (!granularity || !prop)
		return CUDA_ERROR_INVALID_VALUE;
	req = (struct wire_mem_get_allocation_granularity_req){
		.alloc_type = (uint32_t)prop->type,
		.location_type = (uint32_t)prop->location.type,
		.location_id = prop->location.id,
		.handle_types = (uint32_t)prop->requestedHandleTypes,
		.option = (uint32_t)option,
	};
	res = rpc_mem_get_allocation_granularity(&req, &rep);
	if (res == CUDA_SUCCESS)
		*granularity = (size_t)rep.granularity;
	return res;
}

SHIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				      CUdeviceptr addr, unsigned long long flags)
{
	SHIM_ENTRY();
	struct wire_mem_address_reserve_req req = { .size = size, .alignment = alignment,
						    .hint = addr, .flags = flags };
	struct wire_mem_address_reserve_rep rep;
	CUresult res;

	if (!ptr)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mem_address_reserve(&req, &rep);
	if (res == CUDA_SUCCESS)
		*ptr = rep.address;
	return res;
}

SHIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	SHIM_ENTRY();
	struct wire_mem_address_free_req req = { .address = ptr, .size = size };
	struct wire_mem_address_free_rep rep;

	return rpc_mem_address_free(&req, &rep);
}

SHIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			      const CUmemAllocationProp *prop, unsigned long long flags)
{
	SHIM_ENTRY();
	struct wire_mem_create_req req;
	struct wire_mem_create_rep rep;
	CUresult res;

	if (!handle || !prop || !prop_reserved_clear(prop))
		return CUDA_ERROR_INVALID_VALUE;
	req = (struct wire_mem_create_req){
		.size = size,
		.alloc_type = (uint32_t)prop->type,
		.location_type = (uint32_t)prop->location.type,
		.location_id = prop->location.id,
		.handle_types = (uint32_t)prop->requestedHandleTypes,
		.compression = prop->allocFlags.compressionType,
		.rdma = prop->allocFlags.gpuDirectRDMACapable,
		.usage = prop->allocFlags.usage,
		.flags = flags,
	};
	res = rpc_mem_create(&req, &rep);
	if (res == CUDA_SUCCESS)
		*handle = rep.mem;
	return res;
}

SHIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	SHIM_ENTRY();
	struct wire_mem_release_req req = { .mem = handle };
	struct wire_mem_release_rep rep;

	return rpc_mem_release(&req, &rep);
}

SHIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			   CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	SHIM_ENTRY();
	struct wire_vmm_map_req req = { .address = ptr, .size = size, .offset = offset,
					.mem = handle, .flags = flags };
	struct wire_vmm_map_rep rep;

	return rpc_vmm_map(&req, &rep);
}

SHIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	SHIM_ENTRY();
	struct wire_vmm_unmap_req req = { .address = ptr, .size = size };
	struct wire_vmm_unmap_rep rep;

	return rpc_vmm_unmap(&req, &rep);
}

SHIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
				 size_t count)
{
	SHIM_ENTRY();
	uint8_t buf[WIRE_REC_ACCESS_DESC_MAX * WIRE_REC_ACCESS_DESC_BYTES];
	struct wire_mem_set_access_req req = { .address = ptr, .size = size };
	struct wire_mem_set_access_rep rep;

	if (!desc || !count)
		return CUDA_ERROR_INVALID_VALUE;
	/* The session has one device: more descriptors than that name others. */
	if (count > WIRE_REC_ACCESS_DESC_MAX)
		return CUDA_ERROR_INVALID_DEVICE;
	for (size_t i = 0; i < count; i++)
		wire_rec_access_desc_put(buf, (uint32_t)i, &(struct wire_rec_access_desc){
			.type = (uint32_t)desc[i].location.type, .id = desc[i].location.id,
			.flags = (uint32_t)desc[i].flags });
	req.descs = (struct wire_blob){ buf, (uint32_t)(count * WIRE_REC_ACCESS_DESC_BYTES) };
	return rpc_mem_set_access(&req, &rep);
}

SHIM_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
				 CUdeviceptr ptr)
{
	SHIM_ENTRY();
	struct wire_mem_get_access_req req;
	struct wire_mem_get_access_rep rep;
	CUresult res;

	if (!flags || !location)
		return CUDA_ERROR_INVALID_VALUE;
	req = (struct wire_mem_get_access_req){ .location_type = (uint32_t)location->type,
						.location_id = location->id, .address = ptr };
	res = rpc_mem_get_access(&req, &rep);
	if (res == CUDA_SUCCESS)
		*flags = rep.flags;
	return res;
}

SHIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
							 CUmemGenericAllocationHandle handle)
{
	SHIM_ENTRY();
	struct wire_mem_get_allocation_properties_req req = { .mem = handle };
	struct wire_mem_get_allocation_properties_rep rep;
	CUresult res;

	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mem_get_allocation_properties(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	memset(prop, 0, sizeof(*prop));
	prop->type = (CUmemAllocationType)rep.alloc_type;
	prop->requestedHandleTypes = (CUmemAllocationHandleType)rep.handle_types;
	prop->location.type = (CUmemLocationType)rep.location_type;
	prop->location.id = rep.location_id;
	prop->allocFlags.compressionType = (unsigned char)rep.compression;
	prop->allocFlags.gpuDirectRDMACapable = (unsigned char)rep.rdma;
	prop->allocFlags.usage = (unsigned short)rep.usage;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	SHIM_ENTRY();
	struct wire_mem_retain_allocation_handle_req req = { .address = (uint64_t)(uintptr_t)addr };
	struct wire_mem_retain_allocation_handle_rep rep;
	CUresult res;

	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mem_retain_allocation_handle(&req, &rep);
	if (res == CUDA_SUCCESS)
		*handle = rep.mem;
	return res;
}
