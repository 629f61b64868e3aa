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
		res = exec_object_add(ex, HANDLE_STREAM, s, ex->dev.ctx_current, NULL, args, sizeof(args),
				      &rep->stream);
	}
	if (res != CUDA_SUCCESS)
		ex->be->cuStreamDestroy(s);
	return res;
}

static int stream_busy(struct handle_entry *e, void *arg)
{
	struct exec *ex = arg;

	return e->kind == HANDLE_STREAM && ex->be->cuStreamQuery((CUstream)e->real) == CUDA_ERROR_NOT_READY;
}

bool exec_streams_idle(struct exec *ex)
{
	if (ex->be->cuStreamQuery(CU_STREAM_LEGACY) == CUDA_ERROR_NOT_READY ||
	    ex->be->cuStreamQuery(CU_STREAM_PER_THREAD) == CUDA_ERROR_NOT_READY)
		return false;
	return !handle_table_count_kind(ex->handles, HANDLE_STREAM) ||
	       !handle_table_foreach(ex->handles, stream_busy, ex);
}

CUresult exec_stream_destroy(struct exec *ex, const struct wire_stream_destroy_req *req,
			     struct wire_stream_destroy_rep *rep)
{
	struct handle_entry *e;
	CUresult res;

	res = exec_lookup_stream(ex, req->stream, &e);
	if (res != CUDA_SUCCESS)
		return res;
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
		if (!ex->dev.ctx_current)
			return CUDA_ERROR_INVALID_CONTEXT;
		rep->ctx = ex->dev.ctx_current;
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
	res = exec_object_add(ex, HANDLE_EVENT, ev, ex->dev.ctx_current, NULL, &req->flags, 4, &rep->event);
	if (res != CUDA_SUCCESS)
		ex->be->cuEventDestroy(ev);
	return res;
}

CUresult exec_event_record(struct exec *ex, const struct wire_event_record_req *req,
			   struct wire_event_record_rep *rep)
{
	struct handle_entry *ev;
	CUstream s;
	CUresult res;

	res = exec_lookup_event(ex, req->event, &ev);
	if (res != CUDA_SUCCESS)
		return res;
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
	struct handle_entry *ev;
	CUresult res;

	res = exec_lookup_event(ex, req->event, &ev);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuEventDestroy(ev->real);
	if (res == CUDA_SUCCESS) {
		exec_ipc_event_destroyed(ex, req->event);
		exec_object_remove(ex, req->event);
	}
	return res;
}

/* ---- stream memory operations ---- */

/* A value operation's address must lie in one live allocation, or in a
 * pinned buffer shared with the worker (a flag the host writes: the usual
 * use of a wait). */
static bool value_address(struct exec *ex, uint64_t addr, uint32_t width, uint64_t *real)
{
	if (exec_device_range(ex, addr, width, real))
		return true;
	*real = addr;
	return exec_host_shared_device_range(ex, addr, width);
}

/* Waits and writes during a capture would become batch memory-operation
 * nodes, which graph descriptions do not hold (docs/limits.md). */
static CUresult value_target(struct exec *ex, uint64_t stream, uint64_t addr, uint32_t width,
			     CUstream *s, uint64_t *real)
{
	CUresult res;

	if ((width != 4 && width != 8) || !value_address(ex, addr, width, real))
		return CUDA_ERROR_INVALID_VALUE;
	/* Graph descriptions hold no memory-operation nodes: refused in a capture. */
	res = exec_host_copy_stream(ex, stream, s);
	return res;
}

/* A wait and a write take the same fields and the same checks. */
static CUresult value_op(struct exec *ex, uint64_t stream, uint64_t addr, uint64_t value, uint32_t width,
			 uint32_t flags, bool wait)
{
	CUstream s;
	CUresult res = value_target(ex, stream, addr, width, &s, &addr);

	if (res != CUDA_SUCCESS)
		return res;
	if (width == 4 && value > UINT32_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (wait)
		return width == 4 ? ex->be->cuStreamWaitValue32(s, addr, (cuuint32_t)value, flags)
				  : ex->be->cuStreamWaitValue64(s, addr, value, flags);
	return width == 4 ? ex->be->cuStreamWriteValue32(s, addr, (cuuint32_t)value, flags)
			  : ex->be->cuStreamWriteValue64(s, addr, value, flags);
}

CUresult exec_stream_wait_value(struct exec *ex, const struct wire_stream_wait_value_req *req,
				struct wire_stream_wait_value_rep *rep)
{
	return value_op(ex, req->stream, req->address, req->value, req->width, req->flags, true);
}

CUresult exec_stream_write_value(struct exec *ex, const struct wire_stream_write_value_req *req,
				 struct wire_stream_write_value_rep *rep)
{
	return value_op(ex, req->stream, req->address, req->value, req->width, req->flags, false);
}


CUresult exec_stream_batch_mem_op(struct exec *ex, const struct wire_stream_batch_mem_op_req *req,
				  struct wire_stream_batch_mem_op_rep *rep)
{
	static CUstreamBatchMemOpParams ops[WIRE_REC_BATCH_MEM_OP_MAX];
	int count = wire_rec_batch_mem_op_count(req->ops);      /* over the max, refused */
	unsigned n;
	CUstream s;
	CUresult res;

	if (count < 0)
		return CUDA_ERROR_INVALID_VALUE;
	n = (unsigned)count;
	res = exec_host_copy_stream(ex, req->stream, &s);
	if (res != CUDA_SUCCESS)
		return res;
	for (unsigned i = 0; i < n; i++) {
		struct wire_rec_batch_mem_op r;
		uint32_t op, flags;
		uint64_t addr, value;
		unsigned width = 0;

		wire_rec_batch_mem_op_get(req->ops, i, &r);
		op = r.operation;
		flags = r.flags;
		addr = r.address;
		value = r.value;
		memset(&ops[i], 0, sizeof(ops[i]));
		ops[i].operation = (CUstreamBatchMemOpType)op;
		switch (op) {
		case CU_STREAM_MEM_OP_WAIT_VALUE_32:
		case CU_STREAM_MEM_OP_WRITE_VALUE_32:
			width = 4;
			break;
		case CU_STREAM_MEM_OP_WAIT_VALUE_64:
		case CU_STREAM_MEM_OP_WRITE_VALUE_64:
			width = 8;
			break;
		case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
			ops[i].flushRemoteWrites.flags = flags;
			continue;
		case CU_STREAM_MEM_OP_BARRIER:
			ops[i].memoryBarrier.flags = flags;
			continue;
		default:
			return CUDA_ERROR_INVALID_VALUE;
		}
		/* The driver reads and writes these addresses: one allocation each. */
		if (!value_address(ex, addr, width, &addr) || (width == 4 && value > UINT32_MAX))
			return CUDA_ERROR_INVALID_VALUE;
		/* Wait and write parameters share their layout. */
		ops[i].waitValue.address = addr;
		ops[i].waitValue.value64 = value;
		ops[i].waitValue.flags = flags;
	}
	return ex->be->cuStreamBatchMemOp(s, n, n ? ops : NULL, req->flags);
}

/* ---- stream attributes ---- */

/* What the guest may set on a stream: the driver reads nothing through
 * these values but the window's range, which must lie in one allocation.
 * *@be: @v as the backend takes it (the window where its memory is now). */
static CUresult stream_attr_check(struct exec *ex, uint32_t attrib, const CUstreamAttrValue *v,
				  CUstreamAttrValue *be)
{
	uint64_t base;

	*be = *v;
	switch (attrib) {
	case CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW:
		if (!v->accessPolicyWindow.num_bytes)
			return CUDA_SUCCESS;
		if (!exec_device_range(ex, (uint64_t)(uintptr_t)v->accessPolicyWindow.base_ptr,
				       v->accessPolicyWindow.num_bytes, &base))
			return CUDA_ERROR_INVALID_VALUE;
		be->accessPolicyWindow.base_ptr = (void *)(uintptr_t)base;
		return CUDA_SUCCESS;
	case CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY:
	case CU_STREAM_ATTRIBUTE_PRIORITY:
	case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
	case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN:
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

CUresult exec_stream_set_attribute(struct exec *ex, const struct wire_stream_set_attribute_req *req,
				   struct wire_stream_set_attribute_rep *rep)
{
	uint8_t rec[EXEC_STREAM_SETTING_RECORD] = { 0 };
	CUstreamAttrValue v, be;
	CUstream s;
	CUresult res;

	_Static_assert(sizeof(CUstreamAttrValue) == EXEC_STREAM_SETTING_RECORD - 8, "attribute value size");
	if (req->value.len != sizeof(v))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&v, req->value.ptr, sizeof(v));
	res = exec_stream_real(ex, req->stream, &s);
	if (res == CUDA_SUCCESS)
		res = stream_attr_check(ex, req->attrib, &v, &be);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuStreamSetAttribute(s, (CUstreamAttrID)req->attrib, &be);
	if (res != CUDA_SUCCESS)
		return res;
	memcpy(rec, &req->attrib, 4);
	memcpy(rec + 8, &v, sizeof(v));
	if (handle_kind_of(req->stream) == HANDLE_STREAM) {
		exec_journal_object_setting(ex, req->stream, 8, rec, sizeof(rec), 8);
	} else {
		/* The NULL and legacy streams are one stream; per-thread is 2. */
		uint32_t which = req->stream == 2 ? 2 : 1;

		memcpy(rec + 4, &which, 4);
		exec_journal_meta_setting(ex, EXEC_META_STREAM_SETTINGS, rec, sizeof(rec), 8);
	}
	return CUDA_SUCCESS;
}

CUresult exec_stream_get_attribute(struct exec *ex, const struct wire_stream_get_attribute_req *req,
				   struct wire_stream_get_attribute_rep *rep)
{
	static CUstreamAttrValue v;
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	memset(&v, 0, sizeof(v));
	if (res == CUDA_SUCCESS)
		res = ex->be->cuStreamGetAttribute(s, (CUstreamAttrID)req->attrib, &v);
	if (res == CUDA_SUCCESS)
		rep->value = (struct wire_blob){ (const uint8_t *)&v, sizeof(v) };
	return res;
}
