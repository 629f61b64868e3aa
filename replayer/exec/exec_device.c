/* Session, driver and device calls. */
#define LOG_PREFIX "exec: "
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"

CUresult exec_hello(struct exec *ex, const struct wire_hello_req *req, struct wire_hello_rep *rep)
{
	/* The supervisor checked protocol, token and credential before forking us. */
	ex->session.guest_pid = req->pid;
	rep->worker_pid = (uint32_t)getpid();
	/* The device addresses the guest may hold: the arenas of the session's
	 * devices side by side and, after room for EXEC_DEVICES_MAX of them, the
	 * VMM window its reservations come from (exec_vmm.c). */
	rep->arena_base = ex->cfg.arena_base;
	rep->arena_size = ex->vmm.size ? ex->vmm.base + ex->vmm.size - ex->cfg.arena_base
				       : ex->cfg.arena_size * ex->dev.count;
	rep->quota = ex->cfg.quota;
	rep->resume_seq = ex->session.resume_seq;
	rep->credential = (struct wire_blob){ ex->session.credential, ex->session.credential_len };
	return CUDA_SUCCESS;
}

CUresult exec_challenge(struct exec *ex, const struct wire_challenge_req *req, struct wire_challenge_rep *rep)
{
	/* The supervisor answers the challenge before the session exists; once
	 * it does, there is nothing left to prove. */
	return CUDA_ERROR_NOT_PERMITTED;
}

CUresult exec_host_func_join(struct exec *ex, const struct wire_host_func_join_req *req,
			     struct wire_host_func_join_rep *rep)
{
	/* It opens a connection of its own, which the supervisor hands to the
	 * session's worker (exec_hostfn_join); never a request. */
	return CUDA_ERROR_NOT_PERMITTED;
}

CUresult exec_goodbye(struct exec *ex, const struct wire_goodbye_req *req, struct wire_goodbye_rep *rep)
{
	return CUDA_SUCCESS;
}

CUresult exec_init(struct exec *ex, const struct wire_init_req *req, struct wire_init_rep *rep)
{
	/* cuInit accepts only 0; the backend was initialised at session start. */
	return req->flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult exec_driver_get_version(struct exec *ex, const struct wire_driver_get_version_req *req,
				 struct wire_driver_get_version_rep *rep)
{
	int v = 0;
	CUresult res = ex->be->cuDriverGetVersion(&v);

	rep->version = v;
	return res;
}

CUresult exec_device_get_count(struct exec *ex, const struct wire_device_get_count_req *req,
			       struct wire_device_get_count_rep *rep)
{
	rep->count = (int32_t)ex->dev.count;
	return CUDA_SUCCESS;
}

CUresult exec_device_get(struct exec *ex, const struct wire_device_get_req *req,
			 struct wire_device_get_rep *rep)
{
	if (req->ordinal < 0 || (unsigned)req->ordinal >= ex->dev.count)
		return CUDA_ERROR_INVALID_DEVICE;
	rep->device = req->ordinal;
	return CUDA_SUCCESS;
}

CUresult exec_device_get_name(struct exec *ex, const struct wire_device_get_name_req *req,
			      struct wire_device_get_name_rep *rep)
{
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	return ex->be->cuDeviceGetName(rep->name, 256, dev);
}

CUresult exec_device_get_uuid(struct exec *ex, const struct wire_device_get_uuid_req *req,
			      struct wire_device_get_uuid_rep *rep)
{
	static CUuuid uuid;     /* the reply references it until sent */
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuDeviceGetUuid(&uuid, dev);
	if (res == CUDA_SUCCESS)
		rep->uuid = (struct wire_blob){ (const uint8_t *)uuid.bytes, sizeof(uuid.bytes) };
	return res;
}

CUresult exec_device_total_mem(struct exec *ex, const struct wire_device_total_mem_req *req,
			       struct wire_device_total_mem_rep *rep)
{
	size_t bytes = 0;
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuDeviceTotalMem(&bytes, dev);
	/* A session sees its quota as the device's size. */
	if (ex->cfg.quota && bytes > ex->cfg.quota)
		bytes = ex->cfg.quota;
	rep->bytes = bytes;
	return res;
}

/* Attributes the session's device has whatever the backend's says: memory
 * pools are the worker's own (exec_pool.c), so they exist and export nothing;
 * virtual memory management exists where the session has its VMM window.
 * Managed memory is the guest's mirror of device memory, kept coherent at
 * launches and copies only (docs/wire-protocol.md, "Managed memory"): the
 * host may not touch it while the device works, nor reach pageable memory
 * from a kernel, whatever the GPU itself could do. A unified function
 * pointer would be an address in the worker's process, which the guest
 * cannot call: the device has none (cuLibraryGetUnifiedFunction). Host
 * memory the guest registers is the guest's: kernels reach its device copy
 * at the address cuMemHostGetDevicePointer gives, never the host pointer. */
static int attribute_as_seen(const struct exec *ex, CUdevice_attribute attrib, int v)
{
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
		return ex->vmm.size ? v : 0;
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
		return 1;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
	case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
	case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS:
	case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
		return 0;
	case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
		return CU_MEM_HANDLE_TYPE_NONE;
	default:
		return v;
	}
}

CUresult exec_device_get_attribute(struct exec *ex, const struct wire_device_get_attribute_req *req,
				   struct wire_device_get_attribute_rep *rep)
{
	int v = 0;
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuDeviceGetAttribute(&v, (CUdevice_attribute)req->attrib, dev);
	rep->value = res == CUDA_SUCCESS ? attribute_as_seen(ex, (CUdevice_attribute)req->attrib, v) : v;
	return res;
}

#define ATTRIBUTES_MAX 1024

CUresult exec_device_get_attributes(struct exec *ex, const struct wire_device_get_attributes_req *req,
				    struct wire_device_get_attributes_rep *rep)
{
	static uint8_t values[ATTRIBUTES_MAX * 4];
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	if (req->count > ATTRIBUTES_MAX || req->first > INT32_MAX - req->count)
		return CUDA_ERROR_INVALID_VALUE;
	for (uint32_t i = 0; i < req->count; i++) {
		int v = 0;
		uint32_t u;

		if (ex->be->cuDeviceGetAttribute(&v, (CUdevice_attribute)(req->first + i), dev) != CUDA_SUCCESS)
			v = INT32_MIN;
		else
			v = attribute_as_seen(ex, (CUdevice_attribute)(req->first + i), v);
		u = (uint32_t)v;
		for (int k = 0; k < 4; k++)
			values[4 * i + k] = (uint8_t)(u >> (8 * k));
	}
	rep->values = (struct wire_blob){ values, req->count * 4 };
	return CUDA_SUCCESS;
}

CUresult exec_device_get_pci_bus_id(struct exec *ex, const struct wire_device_get_pci_bus_id_req *req,
				    struct wire_device_get_pci_bus_id_rep *rep)
{
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	if (!ex->be->cuDeviceGetPCIBusId)
		return CUDA_ERROR_NOT_SUPPORTED;
	return ex->be->cuDeviceGetPCIBusId(rep->bus_id, 64, dev);
}
