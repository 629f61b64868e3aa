/* IPC handles between processes: tern's own 64-byte handles, which the
 * worker and ternd's supervisor give out and check (replayer/exec/exec_ipc.c).
 * The bytes are opaque here; the app passes them to another process as it
 * would the driver's. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <string.h>

/* The worker's handle bytes into the app's 64-byte handle. */
static CUresult handle_out(char reserved[64], struct wire_blob got)
{
	if (got.len != 64)
		return CUDA_ERROR_UNKNOWN;
	memcpy(reserved, got.ptr, 64);
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	SHIM_ENTRY();
	struct wire_ipc_get_mem_handle_req req = { .address = dptr };
	struct wire_ipc_get_mem_handle_rep rep;
	CUresult res;

	if (!pHandle)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_ipc_get_mem_handle(&req, &rep);
	return res == CUDA_SUCCESS ? handle_out(pHandle->reserved, rep.handle) : res;
}

SHIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	SHIM_ENTRY();
	struct wire_ipc_open_mem_handle_req req = {
		.handle = { (const uint8_t *)handle.reserved, sizeof(handle.reserved) },
		.flags = Flags,
	};
	struct wire_ipc_open_mem_handle_rep rep;
	CUresult res;

	if (!pdptr)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_ipc_open_mem_handle(&req, &rep);
	if (res == CUDA_SUCCESS)
		*pdptr = rep.address;
	return res;
}

/* The version 4010 ABI: same arguments. */
SHIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	SHIM_ENTRY();
	return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

SHIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	SHIM_ENTRY();
	struct wire_ipc_close_mem_handle_req req = { .address = dptr };
	struct wire_ipc_close_mem_handle_rep rep;

	return rpc_ipc_close_mem_handle(&req, &rep);
}

SHIM_API CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
	SHIM_ENTRY();
	struct wire_ipc_get_event_handle_req req = { .event = (uint64_t)(uintptr_t)event };
	struct wire_ipc_get_event_handle_rep rep;
	CUresult res;

	if (!pHandle)
		return CUDA_ERROR_INVALID_VALUE;
	if (!handle_kind_is(req.event, WIRE_HANDLE_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	res = rpc_ipc_get_event_handle(&req, &rep);
	return res == CUDA_SUCCESS ? handle_out(pHandle->reserved, rep.handle) : res;
}

SHIM_API CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	SHIM_ENTRY();
	struct wire_ipc_open_event_handle_req req = {
		.handle = { (const uint8_t *)handle.reserved, sizeof(handle.reserved) },
	};
	struct wire_ipc_open_event_handle_rep rep;
	CUresult res;

	if (!phEvent)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_ipc_open_event_handle(&req, &rep);
	if (res == CUDA_SUCCESS)
		*phEvent = (CUevent)(uintptr_t)rep.event;
	return res;
}
