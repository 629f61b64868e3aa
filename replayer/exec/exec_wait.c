/* Synchronising requests that complete off the dispatch thread.
 *
 * A cuStreamSynchronize or cuCtxSynchronize whose work is not done would
 * hold the worker's one dispatch thread in the driver, and with it every
 * other guest thread's requests: among them the one that would let the
 * work finish (a cuStreamWriteValue32 that a cuStreamWaitValue32 waits
 * for). exec_wait_prepare() does the part that needs the session's state
 * on the dispatch thread (handles, a marker event recorded on the stream),
 * exec_wait_run() the wait itself on any thread, and exec_wait_complete()
 * answers the request back on the dispatch thread. A copy to the host is
 * served there too once its stream caught up: it waits again if other
 * threads queued more on the stream meanwhile, so the dispatch thread never
 * waits for the stream itself.  A pinned buffer's unshare (cuMemFreeHost)
 * synchronises the context on the waiter; the buffer is then retired, to be
 * unregistered when nothing is pending (exec_host_buf_retire says why).
 * A staging slot's wait (exec_staging.c) takes the slot's event as its
 * marker and answers with the waiter's result.
 */
#define LOG_PREFIX "exec: "
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"

static void wait_marker_drop(struct exec *ex, struct exec_wait *w)
{
	if (w->marker)
		ex->be->cuEventDestroy(w->marker);
	w->marker = NULL;
}

void exec_wait_finish(struct exec *ex, struct exec_wait *w)
{
	if (w->staging)
		exec_staging_event_return(ex, w);
	wait_marker_drop(ex, w);
	free(w->request);
	w->request = NULL;
	if (w->host_buf)
		exec_host_buf_attach(ex, w->host_buf);   /* not waited for: the handler serves it */
	w->host_buf = NULL;
}

/* A marker behind the work on @s so far; 1, or 0 when @s is idle already. */
static int wait_marker(struct exec *ex, CUstream s, struct exec_wait *w)
{
	if (ex->be->cuStreamQuery(s) != CUDA_ERROR_NOT_READY)
		return 0;
	if (ex->be->cuEventCreate(&w->marker, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
		return 0;
	if (ex->be->cuEventRecord(w->marker, s) != CUDA_SUCCESS) {
		ex->be->cuEventDestroy(w->marker);
		w->marker = NULL;
		return 0;
	}
	return 1;
}

/* The stream's work so far, behind a marker the waiter waits for: exactly
 * the work cuStreamSynchronize waits for, however much other threads queue
 * on the stream meanwhile. */
static int wait_stream_prepare(struct exec *ex, struct wire_cursor *cur, struct exec_wait *w)
{
	struct wire_stream_synchronize_req req;
	CUstream s;

	if (wire_stream_synchronize_req_decode(cur, &req) || wire_cursor_end(cur))
		return 0;
	if (exec_stream_real(ex, req.stream, &s) != CUDA_SUCCESS)
		return 0;
	/* Done already: the handler answers at once. */
	return wait_marker(ex, s, w);
}

/* The context's synchronisation, run by the waiter in that context. When
 * every stream of the session is idle (exec_streams_idle) the handler runs
 * at once; otherwise it waits aside (the dispatch thread looks for a quick answer
 * first, worker.c). It may also wait for work other threads queue between
 * this request and the waiter's call: the driver's cuCtxSynchronize has no
 * marker to wait for instead. */
static int wait_ctx_current(struct exec *ex, struct exec_wait *w);

static int wait_ctx_prepare(struct exec *ex, struct wire_cursor *cur, struct exec_wait *w)
{
	struct wire_ctx_synchronize_req req;
	struct handle_entry *e = NULL;

	if (wire_ctx_synchronize_req_decode(cur, &req) || wire_cursor_end(cur))
		return 0;
	if (req.ctx) {
		e = handle_table_get(ex->handles, req.ctx, HANDLE_CONTEXT);
		if (!e || exec_context_switch(ex, req.ctx) != CUDA_SUCCESS)
			return 0;
	}
	return wait_ctx_current(ex, w);
}

/* The current context's synchronisation, as above: 1, or 0 when it can
 * be served at once. */
static int wait_ctx_current(struct exec *ex, struct exec_wait *w)
{
	if (ex->be->cuCtxGetCurrent(&w->ctx) != CUDA_SUCCESS || !w->ctx)
		return 0;
	return !exec_streams_idle(ex);
}

/* Keep the request to serve once the wait is over. */
static int wait_request_keep(const struct wire_cursor *cur, struct exec_wait *w)
{
	w->request = malloc(cur->left ? cur->left : 1);
	if (!w->request)
		return -1;
	memcpy(w->request, cur->p, cur->left);
	w->request_len = cur->left;
	return 0;
}

/* An unshare of a buffer the session has: out of the session's list now,
 * so that no later request uses it, and retired once the waiter
 * synchronised the context. Put back
 * when it is served here after all (exec_wait_finish). */
static int wait_unshare_prepare(struct exec *ex, const struct wire_cursor *cur, struct exec_wait *w)
{
	struct wire_cursor c = *cur;
	struct wire_mem_host_unshare_req req;

	if (wire_mem_host_unshare_req_decode(&c, &req) || wire_cursor_end(&c) || wait_ctx_current(ex, w) != 1)
		return 0;
	w->host_buf = exec_host_buf_detach(ex, req.address);
	return w->host_buf != NULL;
}

/* A copy to the host waits for its stream (the legacy one when it is
 * synchronous), then is served with the request kept here. */
static int wait_copy_prepare(struct exec *ex, const struct wire_cursor *cur, struct exec_wait *w)
{
	struct wire_cursor c = *cur;
	struct wire_memcpy_dtoh_req req;
	CUstream s = NULL;

	if (wire_memcpy_dtoh_req_decode(&c, &req) || wire_cursor_end(&c))
		return 0;
	if (req.async && exec_host_copy_stream(ex, req.stream, &s) != CUDA_SUCCESS)
		return 0;
	if (wait_request_keep(cur, w))
		return 0;
	if (wait_marker(ex, s, w))
		return 1;
	free(w->request);
	w->request = NULL;
	return 0;
}

int exec_wait_prepare(struct exec *ex, uint32_t call, const struct wire_cursor *cur, struct exec_wait *w)
{
	struct wire_cursor c = *cur;

	*w = (struct exec_wait){ .call = call, .status = CUDA_ERROR_UNKNOWN };
	/* During a capture a synchronisation may invalidate it, and only the
	 * driver's own call does that as natively: no waiting aside then. */
	if (!wire_call_waits(call) || exec_capture_active(ex))
		return 0;
	if (call == WIRE_CALL_STREAM_SYNCHRONIZE)
		return wait_stream_prepare(ex, &c, w);
	if (call == WIRE_CALL_MEMCPY_DTOH)
		return wait_copy_prepare(ex, &c, w);
	if (call == WIRE_CALL_MEM_HOST_UNSHARE)
		return wait_unshare_prepare(ex, &c, w);
	if (call == WIRE_CALL_STAGING_WAIT)
		return exec_staging_wait_prepare(ex, &c, w);
	return wait_ctx_prepare(ex, &c, w);
}

int exec_wait_complete(struct exec *ex, struct exec_wait *w, bool may_wait, struct wire_msg *reply)
{
	struct wire_cursor cur;
	struct exec_wait again;
	int ret;

	wait_marker_drop(ex, w);
	w->staging = false;             /* the waiter's event, waited for */
	if (w->host_buf)
		exec_host_buf_retire(ex, w->host_buf);
	w->host_buf = NULL;
	if (!w->request) {
		wire_put_u32(reply, (uint32_t)w->status);
		return 0;
	}
	wire_cursor_init(&cur, w->request, w->request_len);
	if (may_wait && w->call == WIRE_CALL_MEMCPY_DTOH && exec_wait_prepare(ex, w->call, &cur, &again) == 1) {
		free(w->request);
		*w = again;
		return 1;
	}
	ret = wire_dispatch(ex, w->call, &cur, reply);
	if (ret < 0) {
		wire_msg_reset(reply);
		wire_put_u32(reply, CUDA_ERROR_INVALID_VALUE);
	}
	free(w->request);
	w->request = NULL;
	return 0;
}

void exec_wait_run(const struct backend *be, struct exec_wait *w)
{
	if (w->marker) {
		w->status = be->cuEventSynchronize(w->marker);
		return;
	}
	w->status = be->cuCtxSetCurrent(w->ctx);
	if (w->status != CUDA_SUCCESS)
		return;
	w->status = be->cuCtxSynchronize();
}


