/* Streams and events. */
#define LOG_PREFIX "exec: "
#include <string.h>

#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"

CUresult exec_stream_create(struct exec *ex, const struct wire_stream_create_req *req,
			    struct wire_stream_create_rep *rep)
{
	CUstream s;
	CUresult res;

	if (req->flags & ~(uint32_t)CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	res = ex->be->cuStreamCreateWithPriority(&s, req->flags, req->priority);
	if (res != CUDA_SUCCESS)
		return res;
	{
		uint8_t args[8];

		memcpy(args, &req->flags, 4);
		memcpy(args + 4, &req->priority, 4);
		res = exec_object_add(ex, HANDLE_STREAM, s, ex->ctx_current, NULL, args, sizeof(args),
				      &rep->stream);
	}
	if (res != CUDA_SUCCESS)
		ex->be->cuStreamDestroy(s);
	return res;
}

CUresult exec_stream_destroy(struct exec *ex, const struct wire_stream_destroy_req *req,
			     struct wire_stream_destroy_rep *rep)
{
	struct handle_entry *e = handle_table_get(ex->handles, req->stream, HANDLE_STREAM);
	CUresult res;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	res = ex->be->cuStreamDestroy(e->real);
	if (res == CUDA_SUCCESS) {
		exec_graph_stream_destroyed(ex, req->stream);
		exec_object_remove(ex, req->stream);
	}
	return res;
}

CUresult exec_stream_synchronize(struct exec *ex, const struct wire_stream_synchronize_req *req,
				 struct wire_stream_synchronize_rep *rep)
{
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	return res == CUDA_SUCCESS ? ex->be->cuStreamSynchronize(s) : res;
}

CUresult exec_stream_query(struct exec *ex, const struct wire_stream_query_req *req,
			   struct wire_stream_query_rep *rep)
{
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	return res == CUDA_SUCCESS ? ex->be->cuStreamQuery(s) : res;
}

CUresult exec_stream_wait_event(struct exec *ex, const struct wire_stream_wait_event_req *req,
				struct wire_stream_wait_event_rep *rep)
{
	struct handle_entry *ev = handle_table_get(ex->handles, req->event, HANDLE_EVENT);
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	if (res != CUDA_SUCCESS)
		return res;
	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	return ex->be->cuStreamWaitEvent(s, ev->real, req->flags);
}

CUresult exec_stream_get_flags(struct exec *ex, const struct wire_stream_get_flags_req *req,
			       struct wire_stream_get_flags_rep *rep)
{
	unsigned flags = 0;
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuStreamGetFlags(s, &flags);
	rep->flags = flags;
	return res;
}

CUresult exec_stream_get_priority(struct exec *ex, const struct wire_stream_get_priority_req *req,
				  struct wire_stream_get_priority_rep *rep)
{
	int prio = 0;
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuStreamGetPriority(s, &prio);
	rep->priority = prio;
	return res;
}

/* Answered from the handle table: a stream belongs to the context current
 * when it was made (its parent), and the session has one device. Stream ids
 * are the session's own, stable across a restore (the driver's would not
 * be): 1 for the NULL and legacy streams, 2 for the per-thread one (one
 * worker thread serves every guest thread), 2^32 + serial for a created one. */
CUresult exec_stream_get_info(struct exec *ex, const struct wire_stream_get_info_req *req,
			      struct wire_stream_get_info_rep *rep)
{
	struct handle_entry *e;

	rep->device = 0;
	if (req->stream <= (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD) {
		if (!ex->ctx_current)
			return CUDA_ERROR_INVALID_CONTEXT;
		rep->ctx = ex->ctx_current;
		rep->id = req->stream == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD ? 2 : 1;
		return CUDA_SUCCESS;
	}
	e = handle_table_get(ex->handles, req->stream, HANDLE_STREAM);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	rep->ctx = e->parent;
	rep->id = (1ull << 32) + (req->stream & ((1ull << WIRE_HANDLE_KIND_SHIFT) - 1));
	return CUDA_SUCCESS;
}

CUresult exec_event_create(struct exec *ex, const struct wire_event_create_req *req,
			   struct wire_event_create_rep *rep)
{
	const uint32_t known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
	CUevent ev;
	CUresult res;

	if (req->flags & ~known)
		return CUDA_ERROR_INVALID_VALUE;
	res = ex->be->cuEventCreate(&ev, req->flags);
	if (res != CUDA_SUCCESS)
		return res;
	res = exec_object_add(ex, HANDLE_EVENT, ev, ex->ctx_current, NULL, &req->flags, 4, &rep->event);
	if (res != CUDA_SUCCESS)
		ex->be->cuEventDestroy(ev);
	return res;
}

CUresult exec_event_record(struct exec *ex, const struct wire_event_record_req *req,
			   struct wire_event_record_rep *rep)
{
	struct handle_entry *ev = handle_table_get(ex->handles, req->event, HANDLE_EVENT);
	CUstream s;
	CUresult res;

	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	res = exec_stream_real(ex, req->stream, &s);
	if (res != CUDA_SUCCESS)
		return res;
	if (req->flags)
		return ex->be->cuEventRecordWithFlags(ev->real, s, req->flags);
	return ex->be->cuEventRecord(ev->real, s);
}

CUresult exec_event_synchronize(struct exec *ex, const struct wire_event_synchronize_req *req,
				struct wire_event_synchronize_rep *rep)
{
	struct handle_entry *ev = handle_table_get(ex->handles, req->event, HANDLE_EVENT);

	return ev ? ex->be->cuEventSynchronize(ev->real) : CUDA_ERROR_INVALID_HANDLE;
}

CUresult exec_event_query(struct exec *ex, const struct wire_event_query_req *req,
			  struct wire_event_query_rep *rep)
{
	struct handle_entry *ev = handle_table_get(ex->handles, req->event, HANDLE_EVENT);

	return ev ? ex->be->cuEventQuery(ev->real) : CUDA_ERROR_INVALID_HANDLE;
}

CUresult exec_event_elapsed_time(struct exec *ex, const struct wire_event_elapsed_time_req *req,
				 struct wire_event_elapsed_time_rep *rep)
{
	struct handle_entry *a = handle_table_get(ex->handles, req->start, HANDLE_EVENT);
	struct handle_entry *b = handle_table_get(ex->handles, req->end, HANDLE_EVENT);
	float ms = 0;
	CUresult res;

	if (!a || !b)
		return CUDA_ERROR_INVALID_HANDLE;
	res = ex->be->cuEventElapsedTime(&ms, a->real, b->real);
	rep->ms = ms;
	return res;
}

CUresult exec_event_destroy(struct exec *ex, const struct wire_event_destroy_req *req,
			    struct wire_event_destroy_rep *rep)
{
	struct handle_entry *ev = handle_table_get(ex->handles, req->event, HANDLE_EVENT);
	CUresult res;

	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	res = ex->be->cuEventDestroy(ev->real);
	if (res == CUDA_SUCCESS) {
		exec_ipc_event_destroyed(ex, req->event);
		exec_object_remove(ex, req->event);
	}
	return res;
}
