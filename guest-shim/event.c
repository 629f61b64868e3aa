/* Events. */
#include "shim.h"

SHIM_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	SHIM_ENTRY();
	struct wire_event_create_req req = { .flags = Flags };
	struct wire_event_create_rep rep;
	CUresult res;

	if (!phEvent)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_event_create(&req, &rep);
	if (res == CUDA_SUCCESS)
		*phEvent = (CUevent)(uintptr_t)rep.event;
	return res;
}

static CUresult event_record(CUevent ev, uint64_t stream, unsigned flags)
{
	struct wire_event_record_req req = {
		.event = (uint64_t)(uintptr_t)ev, .stream = stream, .flags = flags,
	};
	struct wire_event_record_rep rep;

	/* Recording is asynchronous: its error shows at the next synchronisation,
	 * except for a handle that is no event at all, which the driver refuses at once. */
	if (handle_kind_is((uint64_t)(uintptr_t)ev, WIRE_HANDLE_EVENT) == false)
		return CUDA_ERROR_INVALID_HANDLE;
	if (shim_process()->batching.lazy)
		return rpc_event_record_defer(&req);
	return rpc_event_record(&req, &rep);
}

SHIM_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	SHIM_ENTRY();
	return event_record(hEvent, shim_stream(hStream, false), 0);
}

SHIM_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	SHIM_ENTRY();
	return event_record(hEvent, shim_stream(hStream, true), 0);
}

SHIM_API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	SHIM_ENTRY();
	return event_record(hEvent, shim_stream(hStream, false), flags);
}

SHIM_API CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
					      unsigned int flags)
{
	SHIM_ENTRY();
	return event_record(hEvent, shim_stream(hStream, true), flags);
}

SHIM_API CUresult cuEventSynchronize(CUevent hEvent)
{
	SHIM_ENTRY();
	struct wire_event_synchronize_req req = { .event = (uint64_t)(uintptr_t)hEvent };
	struct wire_event_synchronize_rep rep;
	CUresult res = rpc_event_synchronize(&req, &rep);

	return res == CUDA_SUCCESS ? registered_synchronized(false) : res;
}

SHIM_API CUresult cuEventQuery(CUevent hEvent)
{
	SHIM_ENTRY();
	struct wire_event_query_req req = { .event = (uint64_t)(uintptr_t)hEvent };
	struct wire_event_query_rep rep;
	CUresult res = rpc_event_query(&req, &rep);

	/* Completion is a synchronisation too. */
	return res == CUDA_SUCCESS ? registered_synchronized(false) : res;
}

static CUresult event_elapsed(float *ms, CUevent start, CUevent end)
{
	struct wire_event_elapsed_time_req req = {
		.start = (uint64_t)(uintptr_t)start, .end = (uint64_t)(uintptr_t)end,
	};
	struct wire_event_elapsed_time_rep rep;
	CUresult res;

	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_event_elapsed_time(&req, &rep);
	if (res == CUDA_SUCCESS)
		*ms = rep.ms;
	return res;
}

SHIM_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	SHIM_ENTRY();
	return event_elapsed(pMilliseconds, hStart, hEnd);
}

SHIM_API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	SHIM_ENTRY();
	return event_elapsed(pMilliseconds, hStart, hEnd);
}

SHIM_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
	SHIM_ENTRY();
	struct wire_event_destroy_req req = { .event = (uint64_t)(uintptr_t)hEvent };
	struct wire_event_destroy_rep rep;

	return rpc_event_destroy(&req, &rep);
}

SHIM_API CUresult cuEventDestroy(CUevent hEvent)
{
	SHIM_ENTRY();
	return cuEventDestroy_v2(hEvent);
}
