/* Streams. Handles are the worker's virtual handles; 0, CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD pass through as themselves (docs/wire-protocol.md). */
#include "shim.h"

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
	struct wire_stream_create_req req = { .flags = flags, .priority = priority };
	struct wire_stream_create_rep rep;
	CUresult res;

	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_stream_create(&req, &rep);
	if (res == CUDA_SUCCESS)
		*ph = (CUstream)(uintptr_t)rep.stream;
	return res;
}

SHIM_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	SHIM_ENTRY();
	return stream_create(phStream, Flags, 0);
}

SHIM_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	SHIM_ENTRY();
	return stream_create(phStream, flags, priority);
}

SHIM_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
	SHIM_ENTRY();
	struct wire_stream_destroy_req req = { .stream = (uint64_t)(uintptr_t)hStream };
	struct wire_stream_destroy_rep rep;

	return rpc_stream_destroy(&req, &rep);
}

SHIM_API CUresult cuStreamDestroy(CUstream hStream)
{
	SHIM_ENTRY();
	return cuStreamDestroy_v2(hStream);
}

static CUresult stream_synchronize_ask(uint64_t s)
{
	struct wire_stream_synchronize_req req = { .stream = s };
	struct wire_stream_synchronize_rep rep;

	return rpc_stream_synchronize(&req, &rep);
}

static CUresult stream_query_ask(uint64_t s)
{
	struct wire_stream_query_req req = { .stream = s };
	struct wire_stream_query_rep rep;

	return rpc_stream_query(&req, &rep);
}

/* A synchronisation or query of @s: answered here when nothing was sent
 * since a reply proved the stream's work ended (completion.c). Completion
 * is a synchronisation either way: the device's writes reach the host. */
static CUresult stream_finished(uint64_t s, CUresult (*ask)(uint64_t s))
{
	CUresult res;

	if (!completion_covers_stream(s)) {
		res = ask(s);
		if (res != CUDA_SUCCESS)
			return res;
		completion_note_stream(s);
	}
	return registered_synchronized(false);
}

SHIM_API CUresult cuStreamSynchronize(CUstream hStream)
{
	SHIM_ENTRY();
	return stream_finished(shim_stream(hStream, false), stream_synchronize_ask);
}

SHIM_API CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	SHIM_ENTRY();
	return stream_finished(shim_stream(hStream, true), stream_synchronize_ask);
}

SHIM_API CUresult cuStreamQuery(CUstream hStream)
{
	SHIM_ENTRY();
	return stream_finished(shim_stream(hStream, false), stream_query_ask);
}

SHIM_API CUresult cuStreamQuery_ptsz(CUstream hStream)
{
	SHIM_ENTRY();
	return stream_finished(shim_stream(hStream, true), stream_query_ask);
}

static CUresult stream_wait_event(uint64_t s, CUevent ev, unsigned flags)
{
	struct wire_stream_wait_event_req req = {
		.stream = s, .event = (uint64_t)(uintptr_t)ev, .flags = flags,
	};
	struct wire_stream_wait_event_rep rep;

	if (!handle_kind_is((uint64_t)(uintptr_t)ev, WIRE_HANDLE_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	if (shim_process()->batching.lazy)
		return rpc_stream_wait_event_defer(&req);
	return rpc_stream_wait_event(&req, &rep);
}

SHIM_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	SHIM_ENTRY();
	return stream_wait_event(shim_stream(hStream, false), hEvent, Flags);
}

SHIM_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	SHIM_ENTRY();
	return stream_wait_event(shim_stream(hStream, true), hEvent, Flags);
}

static CUresult stream_get_flags(uint64_t s, unsigned int *flags)
{
	struct wire_stream_get_flags_req req = { .stream = s };
	struct wire_stream_get_flags_rep rep;
	CUresult res;

	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_stream_get_flags(&req, &rep);
	if (res == CUDA_SUCCESS)
		*flags = rep.flags;
	return res;
}

SHIM_API CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
	SHIM_ENTRY();
	return stream_get_flags(shim_stream(hStream, false), flags);
}

SHIM_API CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
	SHIM_ENTRY();
	return stream_get_flags(shim_stream(hStream, true), flags);
}

static CUresult stream_get_priority(uint64_t s, int *priority)
{
	struct wire_stream_get_priority_req req = { .stream = s };
	struct wire_stream_get_priority_rep rep;
	CUresult res;

	if (!priority)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_stream_get_priority(&req, &rep);
	if (res == CUDA_SUCCESS)
		*priority = rep.priority;
	return res;
}

SHIM_API CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
	SHIM_ENTRY();
	return stream_get_priority(shim_stream(hStream, false), priority);
}

SHIM_API CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
	SHIM_ENTRY();
	return stream_get_priority(shim_stream(hStream, true), priority);
}
/* Owner, device and id, in one round trip (the worker answers from its
 * handle table; docs/wire-protocol.md). */
static CUresult stream_get_info(uint64_t s, struct wire_stream_get_info_rep *rep)
{
	struct wire_stream_get_info_req req = { .stream = s };

	return rpc_stream_get_info(&req, rep);
}

static CUresult stream_get_ctx(uint64_t s, CUcontext *pctx, CUgreenCtx *green)
{
	struct wire_stream_get_info_rep rep;
	CUresult res;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	res = stream_get_info(s, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	*pctx = (CUcontext)(uintptr_t)rep.ctx;
	if (green)
		*green = NULL;  /* tern makes no green contexts */
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
	SHIM_ENTRY();
	return stream_get_ctx(shim_stream(hStream, false), pctx, NULL);
}

SHIM_API CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
	SHIM_ENTRY();
	return stream_get_ctx(shim_stream(hStream, true), pctx, NULL);
}

SHIM_API CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
	SHIM_ENTRY();
	if (!pGreenCtx)
		return CUDA_ERROR_INVALID_VALUE;
	return stream_get_ctx(shim_stream(hStream, false), pCtx, pGreenCtx);
}

SHIM_API CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
	SHIM_ENTRY();
	if (!pGreenCtx)
		return CUDA_ERROR_INVALID_VALUE;
	return stream_get_ctx(shim_stream(hStream, true), pCtx, pGreenCtx);
}

static CUresult stream_get_device(uint64_t s, CUdevice *device)
{
	struct wire_stream_get_info_rep rep;
	CUresult res;

	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	res = stream_get_info(s, &rep);
	if (res == CUDA_SUCCESS)
		*device = rep.device;
	return res;
}

SHIM_API CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
	SHIM_ENTRY();
	return stream_get_device(shim_stream(hStream, false), device);
}

SHIM_API CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice *device)
{
	SHIM_ENTRY();
	return stream_get_device(shim_stream(hStream, true), device);
}

static CUresult stream_get_id(uint64_t s, unsigned long long *id)
{
	struct wire_stream_get_info_rep rep;
	CUresult res;

	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	res = stream_get_info(s, &rep);
	if (res == CUDA_SUCCESS)
		*id = rep.id;
	return res;
}

SHIM_API CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
	SHIM_ENTRY();
	return stream_get_id(shim_stream(hStream, false), streamId);
}

SHIM_API CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId)
{
	SHIM_ENTRY();
	return stream_get_id(shim_stream(hStream, true), streamId);
}
