/* Enqueues, events and synchronisation. Every enqueue takes its wait list
 * and the guest's handle for its event (cl_exec_event_check), and registers
 * that event afterwards, failed or not: an enqueue the guest deferred
 * reports its error at the next synchronising call (the worker's deferred
 * error), and its event answers the error to the guest's queries. */
#define LOG_PREFIX "opencl: "

#include <stdlib.h>
#include <string.h>

#include "cl_exec.h"
#include "cl_wire.h"
#include "log.h"
#include "wire_cl_dispatch.h"

/* The most bytes one read answers: the guest cuts larger copies. */
#define READ_MAX WIRE_COPY_PIECE

/* What every enqueue begins with: its queue, its wait list, its event. */
struct enqueue {
	struct handle_entry *queue;
	cl_event *waits;
	cl_uint nwaits;
	cl_event ev;
	uint64_t event;
};

static cl_int enqueue_begin(struct cl_exec *x, struct enqueue *q, uint64_t queue, struct wire_blob waits,
			    uint64_t event)
{
	cl_int ret;

	memset(q, 0, sizeof(*q));
	q->event = event;
	if ((ret = cl_exec_lookup_cl_queue(x, queue, &q->queue)) != CL_SUCCESS ||
	    (ret = cl_exec_event_check(x, event)) != CL_SUCCESS)
		return ret;
	return cl_exec_waits_get(x, waits, &q->waits, &q->nwaits);
}

/* The enqueue's outcome @ret: its event registered. */
static cl_int enqueue_end(struct cl_exec *x, struct enqueue *q, cl_int ret)
{
	free(q->waits);
	if (ret == CL_SUCCESS || cl_exec_event_check(x, q->event) == CL_SUCCESS)
		cl_exec_event_done(x, q->event, ret, q->ev);
	return ret;
}

#define EV(q) ((q)->event ? &(q)->ev : NULL)

static cl_int mem_get(struct cl_exec *x, uint64_t h, struct handle_entry **e)
{
	return cl_exec_lookup_cl_mem(x, h, e);
}

/* Origins and regions: three cl_size records at most (the rest 0; a region's 1). */
static cl_int region3(struct wire_blob b, size_t out[3], bool region)
{
	unsigned n;
	cl_int ret = cl_exec_sizes_get(b, out, 3, &n);

	if (ret != CL_SUCCESS)
		return ret;
	for (unsigned i = n; region && i < 3; i++)
		out[i] = 1;
	return CL_SUCCESS;
}

/* The packed bytes of @region: overflow is an invalid value. */
static cl_int region_bytes(const size_t region[3], size_t elem, uint64_t *out)
{
	uint64_t v = elem;

	for (int i = 0; i < 3; i++) {
		if (region[i] && v > UINT64_MAX / region[i])
			return CL_INVALID_VALUE;
		v *= region[i];
	}
	*out = v;
	return CL_SUCCESS;
}

static cl_int image_elem(struct cl_exec *x, cl_mem img, size_t *elem)
{
	return x->host.clGetImageInfo(img, CL_IMAGE_ELEMENT_SIZE, sizeof(*elem), elem, NULL);
}

cl_int exec_cl_enqueue_write_buffer(struct cl_exec *x, const struct wire_cl_enqueue_write_buffer_req *req,
				    struct wire_cl_enqueue_write_buffer_rep *rep)
{
	struct handle_entry *m;
	struct enqueue q;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->mem, &m)) == CL_SUCCESS)
		/* Blocking: the request's bytes are gone after this dispatch. */
		ret = x->host.clEnqueueWriteBuffer(q.queue->real, m->real, CL_TRUE, (size_t)req->offset,
						   req->data.len, req->data.ptr, q.nwaits, q.waits, EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_read_buffer(struct cl_exec *x, const struct wire_cl_enqueue_read_buffer_req *req,
				   struct wire_cl_enqueue_read_buffer_rep *rep)
{
	struct handle_entry *m;
	struct enqueue q;
	void *buf = NULL;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && req->size > READ_MAX)
		ret = CL_INVALID_VALUE;
	if (ret == CL_SUCCESS && (ret = mem_get(x, req->mem, &m)) == CL_SUCCESS &&
	    !(buf = cl_exec_reply_alloc(x, (size_t)req->size)))
		ret = CL_OUT_OF_HOST_MEMORY;
	if (ret == CL_SUCCESS)
		ret = x->host.clEnqueueReadBuffer(q.queue->real, m->real, CL_TRUE, (size_t)req->offset,
						  (size_t)req->size, buf, q.nwaits, q.waits, EV(&q));
	if (ret == CL_SUCCESS)
		rep->data = (struct wire_blob){ buf, (uint32_t)req->size };
	return enqueue_end(x, &q, ret);
}

/* Non-blocking reads (docs/opencl.md, "Non-blocking reads"): the platform
 * reads into memory of the worker's, kept with the read's event until the
 * guest, which knows when the application may look, fetches it. */
cl_int exec_cl_enqueue_read_buffer_lazy(struct cl_exec *x, const struct wire_cl_enqueue_read_buffer_lazy_req *req,
					struct wire_cl_enqueue_read_buffer_lazy_rep *rep)
{
	struct handle_entry *m, *ev;
	struct enqueue q;
	void *buf = NULL;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	/* The event is what the guest fetches by. */
	if (ret == CL_SUCCESS && (!req->event || !req->size))
		ret = CL_INVALID_VALUE;
	if (ret == CL_SUCCESS && req->size > CL_WIRE_LAZY_READ_MAX - x->lazy_read_bytes)
		ret = CL_OUT_OF_HOST_MEMORY;
	if (ret == CL_SUCCESS && (ret = mem_get(x, req->mem, &m)) == CL_SUCCESS && !(buf = malloc((size_t)req->size)))
		ret = CL_OUT_OF_HOST_MEMORY;
	if (ret == CL_SUCCESS)
		ret = x->host.clEnqueueReadBuffer(q.queue->real, m->real, CL_FALSE, (size_t)req->offset,
						  (size_t)req->size, buf, q.nwaits, q.waits, &q.ev);
	if (ret != CL_SUCCESS) {
		free(buf);
		return enqueue_end(x, &q, ret);
	}
	/* Held past the registration, which may fail and release it while the
	 * platform still writes into buf. */
	x->host.clRetainEvent(q.ev);
	enqueue_end(x, &q, ret);
	ev = handle_table_get(x->handles, req->event, HANDLE_CL_EVENT);
	if (ev && ev->real == q.ev) {
		struct cl_obj *o = ev->info;

		o->read_buf = buf;
		o->read_size = req->size;
		x->lazy_read_bytes += req->size;
	} else {
		struct cl_obj orphan = { .read_buf = buf, .read_size = req->size };

		x->lazy_read_bytes += req->size;        /* which the forget takes back */
		cl_exec_read_forget(x, &orphan, q.ev);
		ret = CL_OUT_OF_HOST_MEMORY;
	}
	x->host.clReleaseEvent(q.ev);
	return ret;
}

static void CL_CALLBACK read_buf_free(cl_event ev, cl_int status, void *buf)
{
	free(buf);
}

void cl_exec_read_forget(struct cl_exec *x, struct cl_obj *o, cl_event real)
{
	cl_int st = CL_COMPLETE;

	if (!o->read_buf)
		return;
	x->lazy_read_bytes -= o->read_size;
	if (real && x->host.clGetEventInfo(real, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL) != CL_SUCCESS)
		st = CL_QUEUED;
	/* The platform may still write it: freed by the platform's thread then. */
	if (st <= CL_COMPLETE)
		free(o->read_buf);
	else if (x->host.clSetEventCallback(real, CL_COMPLETE, read_buf_free, o->read_buf) != CL_SUCCESS)
		pr_warn("a non-blocking read's %llu bytes are left to the platform, which may still write them",
			(unsigned long long)o->read_size);
	o->read_buf = NULL;
	o->read_size = 0;
}

cl_int exec_cl_read_fetch(struct cl_exec *x, const struct wire_cl_read_fetch_req *req, struct wire_cl_read_fetch_rep *rep)
{
	struct handle_entry *e;
	struct cl_obj *o;
	cl_int st = CL_QUEUED;
	cl_event real;
	void *buf;
	cl_int ret = cl_exec_lookup_cl_event(x, req->event, &e);

	if (ret != CL_SUCCESS)
		return ret;
	o = e->info;
	if (!e->real && o->failed < 0)
		return o->failed;               /* the read was never queued */
	if (!o->read_buf)
		return CL_INVALID_EVENT;        /* no read, or one fetched already */
	if (!req->size || req->size > READ_MAX || req->offset > o->read_size || req->size > o->read_size - req->offset)
		return CL_INVALID_VALUE;
	/* The guest fetches once it knows the read complete (or its queue's
	 * later commands, on an in-order queue): the wait is for the event's
	 * own status to follow. */
	real = e->real;
	x->host.clWaitForEvents(1, &real);
	ret = x->host.clGetEventInfo(real, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL);
	if (ret == CL_SUCCESS && st > CL_COMPLETE)
		ret = CL_INVALID_OPERATION;     /* the platform's wait returned early */
	if (ret != CL_SUCCESS || st < 0) {
		if (st < 0)
			cl_exec_read_forget(x, o, e->real);
		return st < 0 ? st : ret;
	}
	if (!(buf = cl_exec_reply_alloc(x, (size_t)req->size)))
		return CL_OUT_OF_HOST_MEMORY;
	memcpy(buf, (uint8_t *)o->read_buf + req->offset, (size_t)req->size);
	rep->data = (struct wire_blob){ buf, (uint32_t)req->size };
	if (req->offset + req->size == o->read_size)
		cl_exec_read_forget(x, o, e->real);
	return CL_SUCCESS;
}

cl_int exec_cl_enqueue_copy_buffer(struct cl_exec *x, const struct wire_cl_enqueue_copy_buffer_req *req,
				   struct wire_cl_enqueue_copy_buffer_rep *rep)
{
	struct handle_entry *s, *d;
	struct enqueue q;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->src, &s)) == CL_SUCCESS &&
	    (ret = mem_get(x, req->dst, &d)) == CL_SUCCESS)
		ret = x->host.clEnqueueCopyBuffer(q.queue->real, s->real, d->real, (size_t)req->src_offset,
						  (size_t)req->dst_offset, (size_t)req->size, q.nwaits, q.waits,
						  EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_fill_buffer(struct cl_exec *x, const struct wire_cl_enqueue_fill_buffer_req *req,
				   struct wire_cl_enqueue_fill_buffer_rep *rep)
{
	struct handle_entry *m;
	struct enqueue q;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->mem, &m)) == CL_SUCCESS)
		ret = x->host.clEnqueueFillBuffer(q.queue->real, m->real, req->pattern.len ? req->pattern.ptr : NULL,
						  req->pattern.len, (size_t)req->offset, (size_t)req->size, q.nwaits,
						  q.waits, EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_copy_buffer_rect(struct cl_exec *x, const struct wire_cl_enqueue_copy_buffer_rect_req *req,
					struct wire_cl_enqueue_copy_buffer_rect_rep *rep)
{
	size_t so[3], dorg[3], r[3];
	struct handle_entry *s, *d;
	struct enqueue q;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->src, &s)) == CL_SUCCESS &&
	    (ret = mem_get(x, req->dst, &d)) == CL_SUCCESS && (ret = region3(req->src_origin, so, false)) == CL_SUCCESS &&
	    (ret = region3(req->dst_origin, dorg, false)) == CL_SUCCESS && (ret = region3(req->region, r, true)) == CL_SUCCESS)
		ret = x->host.clEnqueueCopyBufferRect(q.queue->real, s->real, d->real, so, dorg, r,
						      (size_t)req->src_row_pitch, (size_t)req->src_slice_pitch,
						      (size_t)req->dst_row_pitch, (size_t)req->dst_slice_pitch,
						      q.nwaits, q.waits, EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_write_buffer_rect(struct cl_exec *x,
					 const struct wire_cl_enqueue_write_buffer_rect_req *req,
					 struct wire_cl_enqueue_write_buffer_rect_rep *rep)
{
	size_t o[3], r[3], zero[3] = { 0, 0, 0 };
	struct handle_entry *m;
	struct enqueue q;
	uint64_t bytes = 0;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->mem, &m)) == CL_SUCCESS &&
	    (ret = region3(req->origin, o, false)) == CL_SUCCESS && (ret = region3(req->region, r, true)) == CL_SUCCESS &&
	    (ret = region_bytes(r, 1, &bytes)) == CL_SUCCESS && bytes != req->data.len)
		ret = CL_INVALID_VALUE;
	if (ret == CL_SUCCESS)
		ret = x->host.clEnqueueWriteBufferRect(q.queue->real, m->real, CL_TRUE, o, zero, r,
						       (size_t)req->row_pitch, (size_t)req->slice_pitch, r[0],
						       r[0] * r[1], req->data.ptr, q.nwaits, q.waits, EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_read_buffer_rect(struct cl_exec *x, const struct wire_cl_enqueue_read_buffer_rect_req *req,
					struct wire_cl_enqueue_read_buffer_rect_rep *rep)
{
	size_t o[3], r[3], zero[3] = { 0, 0, 0 };
	struct handle_entry *m;
	struct enqueue q;
	uint64_t bytes = 0;
	void *buf = NULL;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->mem, &m)) == CL_SUCCESS &&
	    (ret = region3(req->origin, o, false)) == CL_SUCCESS && (ret = region3(req->region, r, true)) == CL_SUCCESS &&
	    (ret = region_bytes(r, 1, &bytes)) == CL_SUCCESS && bytes > READ_MAX)
		ret = CL_INVALID_VALUE;
	if (ret == CL_SUCCESS && !(buf = cl_exec_reply_alloc(x, (size_t)bytes)))
		ret = CL_OUT_OF_HOST_MEMORY;
	if (ret == CL_SUCCESS)
		ret = x->host.clEnqueueReadBufferRect(q.queue->real, m->real, CL_TRUE, o, zero, r,
						      (size_t)req->row_pitch, (size_t)req->slice_pitch, r[0],
						      r[0] * r[1], buf, q.nwaits, q.waits, EV(&q));
	if (ret == CL_SUCCESS)
		rep->data = (struct wire_blob){ buf, (uint32_t)bytes };
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_write_image(struct cl_exec *x, const struct wire_cl_enqueue_write_image_req *req,
				   struct wire_cl_enqueue_write_image_rep *rep)
{
	size_t o[3], r[3], elem = 0;
	struct handle_entry *m;
	struct enqueue q;
	uint64_t bytes = 0;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->mem, &m)) == CL_SUCCESS &&
	    (ret = region3(req->origin, o, false)) == CL_SUCCESS && (ret = region3(req->region, r, true)) == CL_SUCCESS &&
	    (ret = image_elem(x, m->real, &elem)) == CL_SUCCESS && (ret = region_bytes(r, elem, &bytes)) == CL_SUCCESS &&
	    bytes != req->data.len)
		ret = CL_INVALID_VALUE;
	if (ret == CL_SUCCESS)
		ret = x->host.clEnqueueWriteImage(q.queue->real, m->real, CL_TRUE, o, r, 0, 0, req->data.ptr, q.nwaits,
						  q.waits, EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_read_image(struct cl_exec *x, const struct wire_cl_enqueue_read_image_req *req,
				  struct wire_cl_enqueue_read_image_rep *rep)
{
	size_t o[3], r[3], elem = 0;
	struct handle_entry *m;
	struct enqueue q;
	uint64_t bytes = 0;
	void *buf = NULL;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->mem, &m)) == CL_SUCCESS &&
	    (ret = region3(req->origin, o, false)) == CL_SUCCESS && (ret = region3(req->region, r, true)) == CL_SUCCESS &&
	    (ret = image_elem(x, m->real, &elem)) == CL_SUCCESS && (ret = region_bytes(r, elem, &bytes)) == CL_SUCCESS &&
	    bytes > READ_MAX)
		ret = CL_INVALID_VALUE;
	if (ret == CL_SUCCESS && !(buf = cl_exec_reply_alloc(x, (size_t)bytes)))
		ret = CL_OUT_OF_HOST_MEMORY;
	if (ret == CL_SUCCESS)
		ret = x->host.clEnqueueReadImage(q.queue->real, m->real, CL_TRUE, o, r, 0, 0, buf, q.nwaits, q.waits,
						 EV(&q));
	if (ret == CL_SUCCESS)
		rep->data = (struct wire_blob){ buf, (uint32_t)bytes };
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_copy_image(struct cl_exec *x, const struct wire_cl_enqueue_copy_image_req *req,
				  struct wire_cl_enqueue_copy_image_rep *rep)
{
	size_t so[3], dorg[3], r[3];
	struct handle_entry *s, *d;
	struct enqueue q;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->src, &s)) == CL_SUCCESS &&
	    (ret = mem_get(x, req->dst, &d)) == CL_SUCCESS && (ret = region3(req->src_origin, so, false)) == CL_SUCCESS &&
	    (ret = region3(req->dst_origin, dorg, false)) == CL_SUCCESS && (ret = region3(req->region, r, true)) == CL_SUCCESS)
		ret = x->host.clEnqueueCopyImage(q.queue->real, s->real, d->real, so, dorg, r, q.nwaits, q.waits,
						 EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_copy_image_to_buffer(struct cl_exec *x,
					    const struct wire_cl_enqueue_copy_image_to_buffer_req *req,
					    struct wire_cl_enqueue_copy_image_to_buffer_rep *rep)
{
	size_t so[3], r[3];
	struct handle_entry *s, *d;
	struct enqueue q;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->src, &s)) == CL_SUCCESS &&
	    (ret = mem_get(x, req->dst, &d)) == CL_SUCCESS && (ret = region3(req->src_origin, so, false)) == CL_SUCCESS &&
	    (ret = region3(req->region, r, true)) == CL_SUCCESS)
		ret = x->host.clEnqueueCopyImageToBuffer(q.queue->real, s->real, d->real, so, r,
							 (size_t)req->dst_offset, q.nwaits, q.waits, EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_copy_buffer_to_image(struct cl_exec *x,
					    const struct wire_cl_enqueue_copy_buffer_to_image_req *req,
					    struct wire_cl_enqueue_copy_buffer_to_image_rep *rep)
{
	size_t dorg[3], r[3];
	struct handle_entry *s, *d;
	struct enqueue q;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = mem_get(x, req->src, &s)) == CL_SUCCESS &&
	    (ret = mem_get(x, req->dst, &d)) == CL_SUCCESS && (ret = region3(req->dst_origin, dorg, false)) == CL_SUCCESS &&
	    (ret = region3(req->region, r, true)) == CL_SUCCESS)
		ret = x->host.clEnqueueCopyBufferToImage(q.queue->real, s->real, d->real, (size_t)req->src_offset,
							 dorg, r, q.nwaits, q.waits, EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_fill_image(struct cl_exec *x, const struct wire_cl_enqueue_fill_image_req *req,
				  struct wire_cl_enqueue_fill_image_rep *rep)
{
	size_t o[3], r[3];
	struct handle_entry *m;
	struct enqueue q;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	/* The fill colour: four 32-bit channels (cl_float4, cl_int4, cl_uint4). */
	if (ret == CL_SUCCESS && req->color.len != 16)
		ret = CL_INVALID_VALUE;
	if (ret == CL_SUCCESS && (ret = mem_get(x, req->mem, &m)) == CL_SUCCESS &&
	    (ret = region3(req->origin, o, false)) == CL_SUCCESS && (ret = region3(req->region, r, true)) == CL_SUCCESS)
		ret = x->host.clEnqueueFillImage(q.queue->real, m->real, req->color.ptr, o, r, q.nwaits, q.waits,
						 EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_kernel(struct cl_exec *x, const struct wire_cl_enqueue_kernel_req *req,
			      struct wire_cl_enqueue_kernel_rep *rep)
{
	size_t off[3], global[3], local[3];
	unsigned noff = 0, nglobal = 0, nlocal = 0;
	struct handle_entry *k;
	struct enqueue q;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS && (ret = cl_exec_lookup_cl_kernel(x, req->kernel, &k)) == CL_SUCCESS &&
	    (req->dims < 1 || req->dims > 3))
		ret = CL_INVALID_WORK_DIMENSION;
	if (ret == CL_SUCCESS && ((ret = cl_exec_sizes_get(req->offset, off, 3, &noff)) != CL_SUCCESS ||
				  (ret = cl_exec_sizes_get(req->global, global, 3, &nglobal)) != CL_SUCCESS ||
				  (ret = cl_exec_sizes_get(req->local, local, 3, &nlocal)) != CL_SUCCESS))
		ret = CL_INVALID_VALUE;
	if (ret == CL_SUCCESS && (nglobal != req->dims || (noff && noff != req->dims) || (nlocal && nlocal != req->dims)))
		ret = CL_INVALID_VALUE;
	if (ret == CL_SUCCESS)
		ret = x->host.clEnqueueNDRangeKernel(q.queue->real, k->real, req->dims, noff ? off : NULL, global,
						     nlocal ? local : NULL, q.nwaits, q.waits, EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_marker(struct cl_exec *x, const struct wire_cl_enqueue_marker_req *req,
			      struct wire_cl_enqueue_marker_rep *rep)
{
	struct enqueue q;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS)
		ret = req->barrier ? x->host.clEnqueueBarrierWithWaitList(q.queue->real, q.nwaits, q.waits, EV(&q))
				   : x->host.clEnqueueMarkerWithWaitList(q.queue->real, q.nwaits, q.waits, EV(&q));
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_enqueue_migrate(struct cl_exec *x, const struct wire_cl_enqueue_migrate_req *req,
			       struct wire_cl_enqueue_migrate_rep *rep)
{
	cl_mem *mems = NULL;
	struct enqueue q;
	cl_uint n = 0;
	cl_int ret = enqueue_begin(x, &q, req->queue, req->waits, req->event);

	if (ret == CL_SUCCESS)
		ret = cl_exec_handles_get(x, req->mems, HANDLE_CL_MEM, CL_INVALID_MEM_OBJECT, (void ***)&mems, &n);
	if (ret == CL_SUCCESS)
		ret = x->host.clEnqueueMigrateMemObjects(q.queue->real, n, mems, (cl_mem_migration_flags)req->flags,
							 q.nwaits, q.waits, EV(&q));
	free(mems);
	return enqueue_end(x, &q, ret);
}

cl_int exec_cl_flush(struct cl_exec *x, const struct wire_cl_flush_req *req, struct wire_cl_flush_rep *rep)
{
	struct handle_entry *e;
	cl_int ret = cl_exec_lookup_cl_queue(x, req->queue, &e);

	return ret == CL_SUCCESS ? x->host.clFlush(e->real) : ret;
}

cl_int exec_cl_finish(struct cl_exec *x, const struct wire_cl_finish_req *req, struct wire_cl_finish_rep *rep)
{
	struct handle_entry *e;
	cl_int ret = cl_exec_lookup_cl_queue(x, req->queue, &e);

	return ret == CL_SUCCESS ? x->host.clFinish(e->real) : ret;
}

cl_int exec_cl_wait_events(struct cl_exec *x, const struct wire_cl_wait_events_req *req,
			   struct wire_cl_wait_events_rep *rep)
{
	cl_event *evs = NULL;
	cl_uint n = 0;
	cl_int ret = cl_exec_handles_get(x, req->events, HANDLE_CL_EVENT, CL_INVALID_EVENT, (void ***)&evs, &n);

	if (ret != CL_SUCCESS)
		return ret;
	if (!n)
		return CL_INVALID_VALUE;
	for (cl_uint i = 0; i < n; i++)
		if (!evs[i])
			ret = CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
	if (ret == CL_SUCCESS)
		ret = x->host.clWaitForEvents(n, evs);
	free(evs);
	return ret;
}

cl_int exec_cl_user_event_create(struct cl_exec *x, const struct wire_cl_user_event_create_req *req,
				 struct wire_cl_user_event_create_rep *rep)
{
	struct handle_entry *ce, *e;
	cl_event ev;
	cl_int ret = cl_exec_lookup_cl_context(x, req->context, &ce);

	if (ret != CL_SUCCESS)
		return ret;
	if (!req->event || cl_exec_event_check(x, req->event) != CL_SUCCESS)
		return CL_INVALID_VALUE;
	ev = x->host.clCreateUserEvent(ce->real, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	cl_exec_event_done(x, req->event, CL_SUCCESS, ev);
	e = handle_table_get(x->handles, req->event, HANDLE_CL_EVENT);
	if (!e)
		return CL_OUT_OF_HOST_MEMORY;
	((struct cl_obj *)e->info)->context = req->context;
	return cl_journal_note(x, e->info, 0, false);
}

cl_int exec_cl_user_event_set_status(struct cl_exec *x, const struct wire_cl_user_event_set_status_req *req,
				     struct wire_cl_user_event_set_status_rep *rep)
{
	struct handle_entry *e;
	cl_int ret = cl_exec_lookup_cl_event(x, req->event, &e);

	if (ret != CL_SUCCESS)
		return ret;
	if (!e->real)
		return CL_INVALID_EVENT;
	ret = x->host.clSetUserEventStatus(e->real, req->status);
	if (ret == CL_SUCCESS)
		cl_journal_note(x, e->info, 1, true);
	return ret;
}
