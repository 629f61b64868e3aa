/* Enqueues, maps and events. An enqueue is deferred (its error surfaces at
 * the next synchronising call); one with an event takes the next event
 * handle under icd_event_lock, so the worker sees handles in order. A
 * blocking read or map waits for its data; a non-blocking read or map of a
 * buffer is read by the worker into memory of its own, and its bytes come
 * into the application's when it may look at them (lazy reads, below;
 * docs/opencl.md, "Non-blocking reads"). */
#define LOG_PREFIX "opencl: "

#include "icd_entry.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cl_wire.h"
#include "log.h"
#include "wire_cl_client.h"

#define WAITS_INLINE 16

/* What an enqueue shares: its checked queue, wait list and event. */
struct enq {
	uint8_t wbuf[WAITS_INLINE * WIRE_REC_CL_HANDLE_BYTES];
	uint8_t *heap;
	struct wire_blob waits;
	cl_event *out;
	uint64_t event;
	bool locked;
};

static cl_int enq_begin(struct enq *e, cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *out)
{
	cl_int ret;

	memset(e, 0, sizeof(*e));
	if (!icd_object_valid(q, WIRE_HANDLE_CL_QUEUE))
		return CL_INVALID_COMMAND_QUEUE;
	ret = icd_waits(nw, wl, e->wbuf, WAITS_INLINE, &e->heap, &e->waits);
	if (ret != CL_SUCCESS)
		return ret;
	e->out = out;
	if (out) {
		pthread_mutex_lock(&icd_event_lock);
		e->locked = true;
		e->event = icd_event_next();
	}
	return CL_SUCCESS;
}

/* After the request is sent (@ret its outcome here). */
static cl_int enq_end(struct enq *e, cl_command_queue q, cl_command_type type, cl_int ret)
{
	if (e->out) {
		/* The worker registered the handle, failed or not. */
		cl_event ev = icd_event_new(e->event, q, q->context);

		if (ev)
			ev->type = type;
		*e->out = ev;
		if (!ev && ret == CL_SUCCESS)
			ret = CL_OUT_OF_HOST_MEMORY;
	}
	if (e->locked)
		pthread_mutex_unlock(&icd_event_lock);
	free(e->heap);
	return ret;
}

/* The first piece of a copy cut in pieces takes the wait list, the last one the event. */
#define PIECE_WAITS(e, first) ((first) ? (e)->waits : (struct wire_blob){ NULL, 0 })
#define PIECE_EVENT(e, last) ((last) ? (e)->event : 0)

static bool mem_ok(cl_mem m)
{
	return icd_object_valid(m, WIRE_HANDLE_CL_MEM);
}

static bool is_image(cl_mem m)
{
	return m->type != CL_MEM_OBJECT_BUFFER;
}

/* A piece's outcome: a deferred one that could not even be queued fails all. */
static cl_int write_pieces(struct enq *e, cl_command_queue q, cl_mem m, size_t offset, size_t size, const void *ptr)
{
	cl_int ret = CL_SUCCESS;

	for (size_t at = 0; ret == CL_SUCCESS && at < size; at += WIRE_COPY_PIECE) {
		size_t n = size - at < WIRE_COPY_PIECE ? size - at : WIRE_COPY_PIECE;
		struct wire_cl_enqueue_write_buffer_req req = {
			q->o.handle, m->o.handle, offset + at, { (const uint8_t *)ptr + at, (uint32_t)n },
			PIECE_WAITS(e, at == 0), PIECE_EVENT(e, at + n == size)
		};

		ret = rpc_cl_enqueue_write_buffer_defer(&req);
	}
	return ret;
}

static cl_int read_pieces(struct enq *e, cl_command_queue q, cl_mem m, size_t offset, size_t size, void *ptr)
{
	cl_int ret = CL_SUCCESS;

	for (size_t at = 0; ret == CL_SUCCESS && at < size; at += WIRE_COPY_PIECE) {
		size_t n = size - at < WIRE_COPY_PIECE ? size - at : WIRE_COPY_PIECE;
		struct wire_cl_enqueue_read_buffer_req req = { q->o.handle, m->o.handle, offset + at, n,
							       PIECE_WAITS(e, at == 0), PIECE_EVENT(e, at + n == size) };
		struct wire_cl_enqueue_read_buffer_rep rep;

		ret = rpc_cl_enqueue_read_buffer(&req, &rep);
		if (ret == CL_SUCCESS && rep.data.len != n)
			ret = CL_OUT_OF_RESOURCES;
		if (ret == CL_SUCCESS)
			memcpy((uint8_t *)ptr + at, rep.data.ptr, n);
	}
	return ret;
}

/* Lazy reads: a non-blocking read's bytes, which the worker holds under
 * the read's event, come into the application's memory once the event is
 * seen complete, before any call that lets the application look at them
 * returns: clWaitForEvents on it (or on a later command of its in-order
 * queue), clFinish or a blocking command of its queue (in order), its
 * status answering CL_COMPLETE, its callbacks. Each holds a reference to
 * its event; one lock over all, held while the bytes are fetched (the list
 * is short, and a fetch of a complete read does not wait). */
struct lazy_read {
	struct lazy_read *next;
	cl_event ev;
	uint8_t *dst;
	size_t size;
};

static pthread_mutex_t lazy_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lazy_read *lazy_reads;
static uint64_t lazy_bytes;             /* of lazy_reads: what the worker holds */

/* Room for @size more bytes in the worker (CL_WIRE_LAZY_READ_MAX): else the read is done at once. */
static bool lazy_reserve(size_t size)
{
	bool ok;

	pthread_mutex_lock(&lazy_lock);
	ok = size <= CL_WIRE_LAZY_READ_MAX - lazy_bytes;
	if (ok)
		lazy_bytes += size;
	pthread_mutex_unlock(&lazy_lock);
	return ok;
}

static void lazy_unreserve(size_t size)
{
	pthread_mutex_lock(&lazy_lock);
	lazy_bytes -= size;
	pthread_mutex_unlock(&lazy_lock);
}

/* Bring @r's bytes from the worker; a reply of another length fails it. */
static cl_int lazy_fetch(const struct lazy_read *r)
{
	cl_int ret = CL_SUCCESS;

	for (size_t at = 0; ret == CL_SUCCESS && at < r->size; at += WIRE_COPY_PIECE) {
		size_t n = r->size - at < WIRE_COPY_PIECE ? r->size - at : WIRE_COPY_PIECE;
		struct wire_cl_read_fetch_rep rep;

		ret = rpc_cl_read_fetch(&(struct wire_cl_read_fetch_req){ r->ev->o.handle, at, n }, &rep);
		if (ret == CL_SUCCESS && rep.data.len != n)
			ret = CL_OUT_OF_RESOURCES;
		if (ret == CL_SUCCESS)
			memcpy(r->dst + at, rep.data.ptr, n);
	}
	return ret;
}

/* Which lazy reads a synchronisation has seen complete. */
struct lazy_seen {
	const void *dst;                /* the read into it (a map's memory, unmapped) */
	cl_command_queue queue;         /* every read of it */
	cl_uint n;                      /* or these events', and earlier ones of their in-order queues */
	const cl_event *events;
};

static bool lazy_is_seen(const struct lazy_read *r, const struct lazy_seen *seen)
{
	if (seen->dst)
		return r->dst == seen->dst;
	if (seen->queue)
		return r->ev->queue == seen->queue;
	for (cl_uint i = 0; i < seen->n; i++) {
		const struct _cl_event *w = seen->events[i];

		if (w == r->ev || (w->queue == r->ev->queue && w->queue->in_order && w->o.handle > r->ev->o.handle))
			return true;
	}
	return false;
}

/* Deliver every lazy read @seen names. A read whose bytes do not come
 * leaves its error as its event's status. */
static void lazy_deliver(const struct lazy_seen *seen)
{
	struct lazy_read *done = NULL, **pp;

	pthread_mutex_lock(&lazy_lock);
	for (pp = &lazy_reads; *pp;) {
		struct lazy_read *r = *pp;
		cl_int ret;

		if (!lazy_is_seen(r, seen)) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		ret = lazy_fetch(r);
		if (ret != CL_SUCCESS)
			r->ev->read_error = ret < 0 ? ret : CL_OUT_OF_RESOURCES;
		lazy_bytes -= r->size;
		r->next = done;
		done = r;
	}
	pthread_mutex_unlock(&lazy_lock);
	for (struct lazy_read *r = done, *next; r; r = next) {
		next = r->next;
		icd_release_event(r->ev);
		free(r);
	}
}

static void lazy_deliver_queue(cl_command_queue q)
{
	lazy_deliver(&(struct lazy_seen){ .queue = q });
}

/* A command of @q completed before its call returned: on an in-order queue so did every earlier one. */
static void blocked_on(cl_command_queue q)
{
	if (q->in_order)
		lazy_deliver_queue(q);
}

static cl_int event_read_error(cl_event ev)
{
	cl_int err;

	pthread_mutex_lock(&lazy_lock);
	err = ev->read_error;
	pthread_mutex_unlock(&lazy_lock);
	return err;
}

/* An event's execution status as the application may see it: CL_COMPLETE
 * only once a read's bytes are in its memory. */
static cl_int event_status(cl_event ev, cl_int *status)
{
	cl_int ret = icd_info(CL_WIRE_QUERY_EVENT, ev->o.handle, 0, CL_EVENT_COMMAND_EXECUTION_STATUS, NULL, 0,
			      sizeof(*status), status, NULL);

	if (ret != CL_SUCCESS)
		return ret;
	if (*status <= CL_COMPLETE)
		lazy_deliver(&(struct lazy_seen){ .n = 1, .events = &ev });
	if (event_read_error(ev))
		*status = event_read_error(ev);
	return CL_SUCCESS;
}

/* A read of @size bytes at @offset of buffer @m into @ptr (checked): at
 * once when @blocking or when the worker holds too much already, else lazily
 * under an event of its own when the application asks for none. */
static cl_int read_into(cl_command_queue q, cl_mem m, bool blocking, size_t offset, size_t size, void *ptr,
			cl_uint nw, const cl_event *wl, cl_event *ev, cl_command_type type)
{
	struct lazy_read *r = NULL;
	cl_event own = NULL;
	struct enq e;
	cl_int ret;

	if (!blocking && lazy_reserve(size) && !(r = calloc(1, sizeof(*r))))
		lazy_unreserve(size);
	ret = enq_begin(&e, q, nw, wl, r && !ev ? &own : ev);
	if (ret != CL_SUCCESS) {
		if (r)
			lazy_unreserve(size);
		free(r);
		e.out = NULL;
		return enq_end(&e, q, 0, ret);
	}
	if (!r) {
		ret = enq_end(&e, q, type, read_pieces(&e, q, m, offset, size, ptr));
		if (ret == CL_SUCCESS)
			blocked_on(q);
		return ret;
	}
	ret = rpc_cl_enqueue_read_buffer_lazy_defer(&(struct wire_cl_enqueue_read_buffer_lazy_req){
		q->o.handle, m->o.handle, offset, size, e.waits, e.event });
	ret = enq_end(&e, q, type, ret);
	r->ev = ev ? *ev : own;
	if (ret != CL_SUCCESS || !r->ev) {
		lazy_unreserve(size);
		free(r);
		if (own)
			icd_release_event(own);
		return ret;
	}
	/* The read's reference: the application's own, when it asked for none. */
	if (ev)
		icd_retain_event(r->ev);
	r->dst = ptr;
	r->size = size;
	pthread_mutex_lock(&lazy_lock);
	r->next = lazy_reads;
	lazy_reads = r;
	pthread_mutex_unlock(&lazy_lock);
	return CL_SUCCESS;
}

cl_int icd_enqueue_read_buffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset, size_t size,
			       void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	if (!icd_object_valid(q, WIRE_HANDLE_CL_QUEUE))
		return CL_INVALID_COMMAND_QUEUE;
	if (!mem_ok(m) || is_image(m))
		return CL_INVALID_MEM_OBJECT;
	if (!ptr || !size || offset > m->size || size > m->size - offset)
		return CL_INVALID_VALUE;
	return read_into(q, m, blocking, offset, size, ptr, nw, wl, ev, CL_COMMAND_READ_BUFFER);
}

cl_int icd_enqueue_write_buffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset, size_t size,
				const void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	if (ret == CL_SUCCESS && (!mem_ok(m) || is_image(m)))
		ret = CL_INVALID_MEM_OBJECT;
	if (ret == CL_SUCCESS && (!ptr || !size || offset > m->size || size > m->size - offset))
		ret = CL_INVALID_VALUE;
	if (ret != CL_SUCCESS) {
		e.out = NULL;
		return enq_end(&e, q, 0, ret);
	}
	ret = write_pieces(&e, q, m, offset, size, ptr);
	ret = enq_end(&e, q, CL_COMMAND_WRITE_BUFFER, ret);
	/* Blocking: done when the queue is, which the next synchronisation
	 * sees; the application's bytes were copied already. The wait comes
	 * after enq_end, which lets go of the event lock. */
	if (ret == CL_SUCCESS && blocking) {
		struct wire_cl_finish_req f = { q->o.handle };
		struct wire_cl_finish_rep r;

		ret = rpc_cl_finish(&f, &r);
		if (ret == CL_SUCCESS)
			lazy_deliver_queue(q);
	}
	return ret;
}

/* An enqueue of one request whose failure before sending leaves no event. */
#define ENQ_CHECK(cond, err) \
	do { \
		if (ret == CL_SUCCESS && (cond)) \
			ret = (err); \
	} while (0)
#define ENQ_REFUSED(e, q) \
	do { \
		if (ret != CL_SUCCESS) { \
			(e)->out = NULL; \
			return enq_end((e), (q), 0, ret); \
		} \
	} while (0)

static struct wire_blob sizes_blob(const size_t *v, unsigned n, uint8_t *buf)
{
	if (!v)
		return (struct wire_blob){ NULL, 0 };
	for (unsigned i = 0; i < n; i++)
		wire_rec_cl_size_put(buf, i, &(struct wire_rec_cl_size){ v[i] });
	return (struct wire_blob){ buf, n * WIRE_REC_CL_SIZE_BYTES };
}

#define SZ3 (3 * WIRE_REC_CL_SIZE_BYTES)

cl_int icd_enqueue_copy_buffer(cl_command_queue q, cl_mem src, cl_mem dst, size_t so, size_t dof, size_t size,
			       cl_uint nw, const cl_event *wl, cl_event *ev)
{
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(src) || !mem_ok(dst) || is_image(src) || is_image(dst), CL_INVALID_MEM_OBJECT);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_copy_buffer_defer(&(struct wire_cl_enqueue_copy_buffer_req){
		q->o.handle, src->o.handle, dst->o.handle, so, dof, size, e.waits, e.event });
	return enq_end(&e, q, CL_COMMAND_COPY_BUFFER, ret);
}

cl_int icd_enqueue_fill_buffer(cl_command_queue q, cl_mem m, const void *pattern, size_t psize, size_t offset,
			       size_t size, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(m) || is_image(m), CL_INVALID_MEM_OBJECT);
	ENQ_CHECK(!pattern || !psize || psize > 128, CL_INVALID_VALUE);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_fill_buffer_defer(&(struct wire_cl_enqueue_fill_buffer_req){
		q->o.handle, m->o.handle, { pattern, (uint32_t)psize }, offset, size, e.waits, e.event });
	return enq_end(&e, q, CL_COMMAND_FILL_BUFFER, ret);
}

cl_int icd_enqueue_copy_buffer_rect(cl_command_queue q, cl_mem src, cl_mem dst, const size_t *so, const size_t *dorg,
				    const size_t *region, size_t srp, size_t ssp, size_t drp, size_t dsp, cl_uint nw,
				    const cl_event *wl, cl_event *ev)
{
	uint8_t b1[SZ3], b2[SZ3], b3[SZ3];
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(src) || !mem_ok(dst), CL_INVALID_MEM_OBJECT);
	ENQ_CHECK(!so || !dorg || !region, CL_INVALID_VALUE);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_copy_buffer_rect_defer(&(struct wire_cl_enqueue_copy_buffer_rect_req){
		q->o.handle, src->o.handle, dst->o.handle, sizes_blob(so, 3, b1), sizes_blob(dorg, 3, b2),
		sizes_blob(region, 3, b3), srp, ssp, drp, dsp, e.waits, e.event });
	return enq_end(&e, q, CL_COMMAND_COPY_BUFFER_RECT, ret);
}

/* Bytes of a host rectangle @region with the host's pitches (0: packed). */
static bool rect_pitches(const size_t *region, size_t elem, size_t *rp, size_t *sp, size_t *packed)
{
	size_t row = region[0] * elem;

	if (!region[0] || !region[1] || !region[2])
		return false;
	if (!*rp)
		*rp = row;
	if (!*sp)
		*sp = *rp * region[1];
	if (*rp < row || *sp < *rp * region[1])
		return false;
	if (region[1] > WIRE_COPY_PIECE / row || region[2] > WIRE_COPY_PIECE / (row * region[1]))
		return false;
	*packed = row * region[1] * region[2];
	return true;
}

cl_int icd_enqueue_write_buffer_rect(cl_command_queue q, cl_mem m, cl_bool blocking, const size_t *bo,
				     const size_t *ho, const size_t *region, size_t brp, size_t bsp, size_t hrp,
				     size_t hsp, const void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	uint8_t b1[SZ3], b2[SZ3], *packed = NULL;
	size_t bytes = 0;
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(m) || is_image(m), CL_INVALID_MEM_OBJECT);
	ENQ_CHECK(!bo || !ho || !region || !ptr || !rect_pitches(region, 1, &hrp, &hsp, &bytes), CL_INVALID_VALUE);
	ENQ_CHECK(!(packed = malloc(bytes)), CL_OUT_OF_HOST_MEMORY);
	ENQ_REFUSED(&e, q);
	icd_rect_copy(packed, (uint8_t *)ptr + ho[2] * hsp + ho[1] * hrp + ho[0], region[0], region[1], region[2], hrp,
		      hsp, true);
	ret = rpc_cl_enqueue_write_buffer_rect_defer(&(struct wire_cl_enqueue_write_buffer_rect_req){
		q->o.handle, m->o.handle, sizes_blob(bo, 3, b1), sizes_blob(region, 3, b2), brp, bsp,
		{ packed, (uint32_t)bytes }, e.waits, e.event });
	free(packed);
	return enq_end(&e, q, CL_COMMAND_WRITE_BUFFER_RECT, ret);
}

cl_int icd_enqueue_read_buffer_rect(cl_command_queue q, cl_mem m, cl_bool blocking, const size_t *bo,
				    const size_t *ho, const size_t *region, size_t brp, size_t bsp, size_t hrp,
				    size_t hsp, void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	struct wire_cl_enqueue_read_buffer_rect_rep rep;
	uint8_t b1[SZ3], b2[SZ3];
	size_t bytes = 0;
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(m) || is_image(m), CL_INVALID_MEM_OBJECT);
	ENQ_CHECK(!bo || !ho || !region || !ptr || !rect_pitches(region, 1, &hrp, &hsp, &bytes), CL_INVALID_VALUE);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_read_buffer_rect(&(struct wire_cl_enqueue_read_buffer_rect_req){
		q->o.handle, m->o.handle, sizes_blob(bo, 3, b1), sizes_blob(region, 3, b2), brp, bsp, e.waits,
		e.event }, &rep);
	if (ret == CL_SUCCESS && rep.data.len != bytes)
		ret = CL_OUT_OF_RESOURCES;
	if (ret == CL_SUCCESS)
		icd_rect_copy((uint8_t *)rep.data.ptr, (uint8_t *)ptr + ho[2] * hsp + ho[1] * hrp + ho[0], region[0],
			      region[1], region[2], hrp, hsp, false);
	ret = enq_end(&e, q, CL_COMMAND_READ_BUFFER_RECT, ret);
	if (ret == CL_SUCCESS)
		blocked_on(q);
	return ret;
}

/* An image region's host pitches: the application's, or packed. */
static cl_int image_rect(cl_mem m, const size_t *origin, const size_t *region, size_t *rp, size_t *sp, size_t *bytes)
{
	size_t r[3];

	if (!origin || !region)
		return CL_INVALID_VALUE;
	if (!m->elem)
		return CL_INVALID_OPERATION;
	memcpy(r, region, sizeof(r));
	/* A 1D array's rows are its images: its slice pitch is their pitch. */
	if (m->type == CL_MEM_OBJECT_IMAGE1D_ARRAY && *sp)
		*rp = *sp;
	if (!rect_pitches(r, m->elem, rp, sp, bytes))
		return CL_INVALID_VALUE;
	return CL_SUCCESS;
}

cl_int icd_enqueue_write_image(cl_command_queue q, cl_mem m, cl_bool blocking, const size_t *origin,
			       const size_t *region, size_t rp, size_t sp, const void *ptr, cl_uint nw,
			       const cl_event *wl, cl_event *ev)
{
	uint8_t b1[SZ3], b2[SZ3], *packed = NULL;
	size_t bytes = 0;
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(m) || !is_image(m), CL_INVALID_MEM_OBJECT);
	ENQ_CHECK(!ptr, CL_INVALID_VALUE);
	if (ret == CL_SUCCESS)
		ret = image_rect(m, origin, region, &rp, &sp, &bytes);
	ENQ_CHECK(!(packed = malloc(bytes)), CL_OUT_OF_HOST_MEMORY);
	ENQ_REFUSED(&e, q);
	icd_rect_copy(packed, (void *)ptr, region[0] * m->elem, region[1], region[2], rp, sp, true);
	ret = rpc_cl_enqueue_write_image_defer(&(struct wire_cl_enqueue_write_image_req){
		q->o.handle, m->o.handle, sizes_blob(origin, 3, b1), sizes_blob(region, 3, b2),
		{ packed, (uint32_t)bytes }, e.waits, e.event });
	free(packed);
	return enq_end(&e, q, CL_COMMAND_WRITE_IMAGE, ret);
}

cl_int icd_enqueue_read_image(cl_command_queue q, cl_mem m, cl_bool blocking, const size_t *origin,
			      const size_t *region, size_t rp, size_t sp, void *ptr, cl_uint nw, const cl_event *wl,
			      cl_event *ev)
{
	struct wire_cl_enqueue_read_image_rep rep;
	uint8_t b1[SZ3], b2[SZ3];
	size_t bytes = 0;
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(m) || !is_image(m), CL_INVALID_MEM_OBJECT);
	ENQ_CHECK(!ptr, CL_INVALID_VALUE);
	if (ret == CL_SUCCESS)
		ret = image_rect(m, origin, region, &rp, &sp, &bytes);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_read_image(&(struct wire_cl_enqueue_read_image_req){
		q->o.handle, m->o.handle, sizes_blob(origin, 3, b1), sizes_blob(region, 3, b2), e.waits, e.event },
		&rep);
	if (ret == CL_SUCCESS && rep.data.len != bytes)
		ret = CL_OUT_OF_RESOURCES;
	if (ret == CL_SUCCESS)
		icd_rect_copy((uint8_t *)rep.data.ptr, ptr, region[0] * m->elem, region[1], region[2], rp, sp, false);
	ret = enq_end(&e, q, CL_COMMAND_READ_IMAGE, ret);
	if (ret == CL_SUCCESS)
		blocked_on(q);
	return ret;
}

cl_int icd_enqueue_copy_image(cl_command_queue q, cl_mem src, cl_mem dst, const size_t *so, const size_t *dorg,
			      const size_t *region, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	uint8_t b1[SZ3], b2[SZ3], b3[SZ3];
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(src) || !mem_ok(dst), CL_INVALID_MEM_OBJECT);
	ENQ_CHECK(!so || !dorg || !region, CL_INVALID_VALUE);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_copy_image_defer(&(struct wire_cl_enqueue_copy_image_req){
		q->o.handle, src->o.handle, dst->o.handle, sizes_blob(so, 3, b1), sizes_blob(dorg, 3, b2),
		sizes_blob(region, 3, b3), e.waits, e.event });
	return enq_end(&e, q, CL_COMMAND_COPY_IMAGE, ret);
}

cl_int icd_enqueue_copy_image_to_buffer(cl_command_queue q, cl_mem src, cl_mem dst, const size_t *so,
					const size_t *region, size_t dof, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	uint8_t b1[SZ3], b2[SZ3];
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(src) || !mem_ok(dst), CL_INVALID_MEM_OBJECT);
	ENQ_CHECK(!so || !region, CL_INVALID_VALUE);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_copy_image_to_buffer_defer(&(struct wire_cl_enqueue_copy_image_to_buffer_req){
		q->o.handle, src->o.handle, dst->o.handle, sizes_blob(so, 3, b1), sizes_blob(region, 3, b2), dof,
		e.waits, e.event });
	return enq_end(&e, q, CL_COMMAND_COPY_IMAGE_TO_BUFFER, ret);
}

cl_int icd_enqueue_copy_buffer_to_image(cl_command_queue q, cl_mem src, cl_mem dst, size_t so, const size_t *dorg,
					const size_t *region, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	uint8_t b1[SZ3], b2[SZ3];
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(src) || !mem_ok(dst), CL_INVALID_MEM_OBJECT);
	ENQ_CHECK(!dorg || !region, CL_INVALID_VALUE);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_copy_buffer_to_image_defer(&(struct wire_cl_enqueue_copy_buffer_to_image_req){
		q->o.handle, src->o.handle, dst->o.handle, so, sizes_blob(dorg, 3, b1), sizes_blob(region, 3, b2),
		e.waits, e.event });
	return enq_end(&e, q, CL_COMMAND_COPY_BUFFER_TO_IMAGE, ret);
}

cl_int icd_enqueue_fill_image(cl_command_queue q, cl_mem m, const void *color, const size_t *origin,
			      const size_t *region, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	uint8_t b1[SZ3], b2[SZ3];
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!mem_ok(m) || !is_image(m), CL_INVALID_MEM_OBJECT);
	ENQ_CHECK(!color || !origin || !region, CL_INVALID_VALUE);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_fill_image_defer(&(struct wire_cl_enqueue_fill_image_req){
		q->o.handle, m->o.handle, { color, 16 }, sizes_blob(origin, 3, b1), sizes_blob(region, 3, b2),
		e.waits, e.event });
	return enq_end(&e, q, CL_COMMAND_FILL_IMAGE, ret);
}

cl_int icd_enqueue_nd_range_kernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *offset,
				   const size_t *global, const size_t *local, cl_uint nw, const cl_event *wl,
				   cl_event *ev)
{
	uint8_t b1[SZ3], b2[SZ3], b3[SZ3];
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!icd_object_valid(k, WIRE_HANDLE_CL_KERNEL), CL_INVALID_KERNEL);
	ENQ_CHECK(dims < 1 || dims > 3, CL_INVALID_WORK_DIMENSION);
	ENQ_CHECK(!global, CL_INVALID_GLOBAL_WORK_SIZE);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_kernel_defer(&(struct wire_cl_enqueue_kernel_req){
		q->o.handle, k->o.handle, dims, sizes_blob(offset, dims, b1), sizes_blob(global, dims, b2),
		sizes_blob(local, dims, b3), e.waits, e.event });
	return enq_end(&e, q, CL_COMMAND_NDRANGE_KERNEL, ret);
}

cl_int icd_enqueue_task(cl_command_queue q, cl_kernel k, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	const size_t one = 1;

	return icd_enqueue_nd_range_kernel(q, k, 1, NULL, &one, &one, nw, wl, ev);
}

static cl_int marker(cl_command_queue q, uint32_t barrier, cl_uint nw, const cl_event *wl, cl_event *ev,
		     cl_command_type type)
{
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_marker_defer(&(struct wire_cl_enqueue_marker_req){ q->o.handle, barrier, e.waits,
										 e.event });
	return enq_end(&e, q, type, ret);
}

cl_int icd_enqueue_marker_wl(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	return marker(q, 0, nw, wl, ev, CL_COMMAND_MARKER);
}

cl_int icd_enqueue_barrier_wl(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	return marker(q, 1, nw, wl, ev, CL_COMMAND_BARRIER);
}

cl_int icd_enqueue_marker(cl_command_queue q, cl_event *ev)
{
	if (!ev)
		return icd_object_valid(q, WIRE_HANDLE_CL_QUEUE) ? CL_INVALID_VALUE : CL_INVALID_COMMAND_QUEUE;
	return marker(q, 0, 0, NULL, ev, CL_COMMAND_MARKER);
}

cl_int icd_enqueue_barrier(cl_command_queue q)
{
	return marker(q, 1, 0, NULL, NULL, CL_COMMAND_BARRIER);
}

cl_int icd_enqueue_wait_for_events(cl_command_queue q, cl_uint n, const cl_event *list)
{
	if (!n || !list)
		return CL_INVALID_VALUE;
	return marker(q, 1, n, list, NULL, CL_COMMAND_BARRIER);
}

cl_int icd_enqueue_migrate(cl_command_queue q, cl_uint n, const cl_mem *mems, cl_mem_migration_flags flags,
			   cl_uint nw, const cl_event *wl, cl_event *ev)
{
	uint8_t *buf = NULL;
	struct enq e;
	cl_int ret = enq_begin(&e, q, nw, wl, ev);

	ENQ_CHECK(!n || !mems || n > WIRE_REC_CL_HANDLE_MAX, CL_INVALID_VALUE);
	ENQ_CHECK(!(buf = malloc((size_t)n * WIRE_REC_CL_HANDLE_BYTES)), CL_OUT_OF_HOST_MEMORY);
	for (cl_uint i = 0; ret == CL_SUCCESS && i < n; i++) {
		if (!mem_ok(mems[i]))
			ret = CL_INVALID_MEM_OBJECT;
		else
			wire_rec_cl_handle_put(buf, i, &(struct wire_rec_cl_handle){ mems[i]->o.handle });
	}
	if (ret != CL_SUCCESS)
		free(buf);
	ENQ_REFUSED(&e, q);
	ret = rpc_cl_enqueue_migrate_defer(&(struct wire_cl_enqueue_migrate_req){
		q->o.handle, { buf, n * WIRE_REC_CL_HANDLE_BYTES }, flags, e.waits, e.event });
	free(buf);
	return enq_end(&e, q, CL_COMMAND_MIGRATE_MEM_OBJECTS, ret);
}

/* Maps: the guest's memory (the host pointer's for CL_MEM_USE_HOST_PTR
 * buffers), filled by a read unless the region is written whole, written
 * back at the unmap when mapped for writing. */
void *icd_enqueue_map_buffer(cl_command_queue q, cl_mem m, cl_bool blocking, cl_map_flags flags, size_t offset,
			     size_t size, cl_uint nw, const cl_event *wl, cl_event *ev, cl_int *errcode_ret)
{
	struct icd_map *map = NULL;
	void *ptr = NULL;
	cl_int ret = CL_SUCCESS;

	if (!icd_object_valid(q, WIRE_HANDLE_CL_QUEUE))
		ret = CL_INVALID_COMMAND_QUEUE;
	else if (!mem_ok(m) || is_image(m))
		ret = CL_INVALID_MEM_OBJECT;
	else if (!size || offset > m->size || size > m->size - offset ||
		 ((flags & CL_MAP_WRITE_INVALIDATE_REGION) && (flags & (CL_MAP_READ | CL_MAP_WRITE))))
		ret = CL_INVALID_VALUE;
	else if (!(map = calloc(1, sizeof(*map))) || !(ptr = m->host_ptr ? (uint8_t *)m->host_ptr + offset : malloc(size)))
		ret = CL_OUT_OF_HOST_MEMORY;
	if (ret == CL_SUCCESS)
		ret = (flags & CL_MAP_WRITE_INVALIDATE_REGION) ? marker(q, 0, nw, wl, ev, CL_COMMAND_MAP_BUFFER)
							       : read_into(q, m, blocking, offset, size, ptr, nw, wl, ev,
									   CL_COMMAND_MAP_BUFFER);
	if (ret != CL_SUCCESS) {
		if (ptr && !m->host_ptr)
			free(ptr);
		free(map);
		if (errcode_ret)
			*errcode_ret = ret;
		return NULL;
	}
	*map = (struct icd_map){ .ptr = ptr, .owned = !m->host_ptr, .flags = flags, .offset = offset, .size = size };
	pthread_mutex_lock(&m->lock);
	map->next = m->maps;
	m->maps = map;
	m->map_count++;
	pthread_mutex_unlock(&m->lock);
	if (errcode_ret)
		*errcode_ret = CL_SUCCESS;
	return ptr;
}

void *icd_enqueue_map_image(cl_command_queue q, cl_mem m, cl_bool blocking, cl_map_flags flags, const size_t *origin,
			    const size_t *region, size_t *row_pitch, size_t *slice_pitch, cl_uint nw,
			    const cl_event *wl, cl_event *ev, cl_int *errcode_ret)
{
	struct icd_map *map;
	size_t rp = 0, sp = 0, bytes = 0;
	void *ptr;
	cl_int ret;

	if (!mem_ok(m) || !is_image(m) || !row_pitch) {
		if (errcode_ret)
			*errcode_ret = !row_pitch ? CL_INVALID_VALUE : CL_INVALID_MEM_OBJECT;
		return NULL;
	}
	ret = image_rect(m, origin, region, &rp, &sp, &bytes);
	ptr = ret == CL_SUCCESS ? malloc(bytes) : NULL;
	map = ptr ? calloc(1, sizeof(*map)) : NULL;
	if (ret == CL_SUCCESS && !map)
		ret = CL_OUT_OF_HOST_MEMORY;
	if (ret == CL_SUCCESS) {
		if (flags & CL_MAP_WRITE_INVALIDATE_REGION)
			ret = icd_enqueue_marker_wl(q, nw, wl, ev);
		else
			ret = icd_enqueue_read_image(q, m, CL_TRUE, origin, region, 0, 0, ptr, nw, wl, ev);
	}
	if (ret != CL_SUCCESS) {
		free(ptr);
		free(map);
		if (errcode_ret)
			*errcode_ret = ret;
		return NULL;
	}
	*map = (struct icd_map){ .ptr = ptr, .owned = true, .flags = flags };
	memcpy(map->origin, origin, sizeof(map->origin));
	memcpy(map->region, region, sizeof(map->region));
	*row_pitch = rp;
	if (slice_pitch)
		*slice_pitch = m->type == CL_MEM_OBJECT_IMAGE2D || m->type == CL_MEM_OBJECT_IMAGE1D ? 0 :
			       m->type == CL_MEM_OBJECT_IMAGE1D_ARRAY ? rp : sp;
	pthread_mutex_lock(&m->lock);
	map->next = m->maps;
	m->maps = map;
	m->map_count++;
	pthread_mutex_unlock(&m->lock);
	if (errcode_ret)
		*errcode_ret = CL_SUCCESS;
	return ptr;
}

cl_int icd_enqueue_unmap(cl_command_queue q, cl_mem m, void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	struct icd_map **pp, *map = NULL;
	cl_int ret;

	if (!icd_object_valid(q, WIRE_HANDLE_CL_QUEUE))
		return CL_INVALID_COMMAND_QUEUE;
	if (!mem_ok(m))
		return CL_INVALID_MEM_OBJECT;
	pthread_mutex_lock(&m->lock);
	for (pp = &m->maps; *pp; pp = &(*pp)->next)
		if ((*pp)->ptr == ptr) {
			map = *pp;
			*pp = map->next;
			m->map_count--;
			break;
		}
	pthread_mutex_unlock(&m->lock);
	if (!map)
		return CL_INVALID_VALUE;
	/* A map's bytes due to its memory come before the memory is written back or freed. */
	lazy_deliver(&(struct lazy_seen){ .dst = map->ptr });
	if (!(map->flags & (CL_MAP_WRITE | CL_MAP_WRITE_INVALIDATE_REGION)))
		ret = icd_enqueue_marker_wl(q, nw, wl, ev);
	else if (is_image(m))
		ret = icd_enqueue_write_image(q, m, CL_FALSE, map->origin, map->region, 0, 0, map->ptr, nw, wl, ev);
	else
		ret = icd_enqueue_write_buffer(q, m, CL_FALSE, map->offset, map->size, map->ptr, nw, wl, ev);
	if (map->owned)
		free(map->ptr);
	free(map);
	return ret;
}

/* Queues */

cl_int icd_flush(cl_command_queue q)
{
	if (!icd_object_valid(q, WIRE_HANDLE_CL_QUEUE))
		return CL_INVALID_COMMAND_QUEUE;
	return rpc_cl_flush_defer(&(struct wire_cl_flush_req){ q->o.handle });
}

cl_int icd_finish(cl_command_queue q)
{
	struct wire_cl_finish_rep rep;

	cl_int ret;

	if (!icd_object_valid(q, WIRE_HANDLE_CL_QUEUE))
		return CL_INVALID_COMMAND_QUEUE;
	ret = rpc_cl_finish(&(struct wire_cl_finish_req){ q->o.handle }, &rep);
	lazy_deliver_queue(q);
	return ret;
}

/* Events */

cl_event icd_event_new(uint64_t handle, cl_command_queue queue, cl_context ctx)
{
	struct _cl_event *ev = icd_object_new(WIRE_HANDLE_CL_EVENT, handle, sizeof(*ev));

	if (ev) {
		ev->queue = queue;
		ev->context = ctx;
	}
	return ev;
}

cl_int icd_wait_for_events(cl_uint n, const cl_event *list)
{
	uint8_t buf[WAITS_INLINE * WIRE_REC_CL_HANDLE_BYTES], *heap;
	struct wire_cl_wait_events_rep rep;
	struct wire_blob b;
	cl_int ret;

	if (!n || !list)
		return CL_INVALID_VALUE;
	ret = icd_waits(n, list, buf, WAITS_INLINE, &heap, &b);
	if (ret != CL_SUCCESS)
		return CL_INVALID_EVENT;
	/* A user event's status comes from this process: waiting for it in the
	 * worker would hold the session, and with it the call that sets it. */
	for (cl_uint i = 0; i < n; i++) {
		if (!list[i]->user)
			continue;
		pthread_mutex_lock(&list[i]->lock);
		while (!list[i]->user_status_set)
			pthread_cond_wait(&list[i]->status_set, &list[i]->lock);
		pthread_mutex_unlock(&list[i]->lock);
	}
	ret = rpc_cl_wait_events(&(struct wire_cl_wait_events_req){ b }, &rep);
	free(heap);
	lazy_deliver(&(struct lazy_seen){ .n = n, .events = list });
	for (cl_uint i = 0; ret == CL_SUCCESS && i < n; i++)
		if (event_read_error(list[i]))
			ret = CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
	return ret;
}

cl_int icd_get_event_info(cl_event ev, cl_event_info param, size_t size, void *value, size_t *size_ret)
{
	if (!icd_object_valid(ev, WIRE_HANDLE_CL_EVENT))
		return CL_INVALID_EVENT;
	switch (param) {
	case CL_EVENT_COMMAND_QUEUE:
		return icd_info_answer(&ev->queue, sizeof(ev->queue), size, value, size_ret);
	case CL_EVENT_CONTEXT:
		return icd_info_answer(&ev->context, sizeof(ev->context), size, value, size_ret);
	case CL_EVENT_COMMAND_TYPE:
		return icd_info_answer(&ev->type, sizeof(ev->type), size, value, size_ret);
	case CL_EVENT_COMMAND_EXECUTION_STATUS: {
		cl_int status, ret = event_status(ev, &status);

		return ret == CL_SUCCESS ? icd_info_answer(&status, sizeof(status), size, value, size_ret) : ret;
	}
	default:
		return icd_info(CL_WIRE_QUERY_EVENT, ev->o.handle, 0, param, NULL, 0, size, value, size_ret);
	}
}

cl_int icd_get_event_profiling_info(cl_event ev, cl_profiling_info param, size_t size, void *value, size_t *size_ret)
{
	if (!icd_object_valid(ev, WIRE_HANDLE_CL_EVENT))
		return CL_INVALID_EVENT;
	if (ev->user)
		return CL_PROFILING_INFO_NOT_AVAILABLE;
	return icd_info(CL_WIRE_QUERY_EVENT_PROFILING, ev->o.handle, 0, param, NULL, 0, size, value, size_ret);
}

cl_event icd_create_user_event(cl_context c, cl_int *errcode_ret)
{
	struct wire_cl_user_event_create_rep rep;
	struct _cl_event *ev = NULL;
	uint64_t h;
	cl_int ret;

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT)) {
		if (errcode_ret)
			*errcode_ret = CL_INVALID_CONTEXT;
		return NULL;
	}
	pthread_mutex_lock(&icd_event_lock);
	h = icd_event_next();
	ret = rpc_cl_user_event_create(&(struct wire_cl_user_event_create_req){ c->o.handle, h }, &rep);
	if (ret == CL_SUCCESS) {
		ev = icd_event_new(h, NULL, c);
		if (ev) {
			ev->user = true;
			ev->type = CL_COMMAND_USER;
		} else {
			ret = CL_OUT_OF_HOST_MEMORY;
		}
	}
	pthread_mutex_unlock(&icd_event_lock);
	if (errcode_ret)
		*errcode_ret = ret;
	return ev;
}

cl_int icd_set_user_event_status(cl_event ev, cl_int status)
{
	struct wire_cl_user_event_set_status_rep rep;
	cl_int ret;

	if (!icd_object_valid(ev, WIRE_HANDLE_CL_EVENT) || !ev->user)
		return CL_INVALID_EVENT;
	if (status > 0)
		return CL_INVALID_VALUE;
	ret = rpc_cl_user_event_set_status(&(struct wire_cl_user_event_set_status_req){ ev->o.handle, status }, &rep);
	if (ret == CL_SUCCESS) {
		pthread_mutex_lock(&ev->lock);
		ev->user_status_set = true;
		pthread_cond_broadcast(&ev->status_set);
		pthread_mutex_unlock(&ev->lock);
	}
	return ret;
}

cl_int icd_retain_event(cl_event ev) { return icd_retain(ev, WIRE_HANDLE_CL_EVENT, CL_INVALID_EVENT); }
cl_int icd_release_event(cl_event ev) { return icd_release(ev, WIRE_HANDLE_CL_EVENT, CL_INVALID_EVENT); }

/* Callbacks: a thread asks for the status of each event with callbacks
 * until all are called (docs/opencl.md: called within a millisecond or so
 * of the status, from that thread). The event is held meanwhile. */
static pthread_mutex_t cb_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cb_event {
	struct cb_event *next;
	cl_event ev;
} *cb_events;
static bool cb_running;

static void *cb_thread(void *arg)
{
	for (;;) {
		struct cb_event *list, **pp;
		struct timespec ts = { 0, 1000000 };

		pthread_mutex_lock(&cb_lock);
		list = cb_events;
		if (!list) {
			cb_running = false;
			pthread_mutex_unlock(&cb_lock);
			return NULL;
		}
		pthread_mutex_unlock(&cb_lock);
		for (struct cb_event *c = list; c; c = c->next) {
			cl_int status = CL_QUEUED;
			struct icd_callback *due = NULL, **cp;

			if (event_status(c->ev, &status) != CL_SUCCESS)
				continue;
			pthread_mutex_lock(&c->ev->lock);
			for (cp = &c->ev->callbacks; *cp;) {
				struct icd_callback *cb = *cp;

				if (status <= cb->status) {
					*cp = cb->next;
					cb->next = due;
					due = cb;
				} else {
					cp = &cb->next;
				}
			}
			pthread_mutex_unlock(&c->ev->lock);
			for (struct icd_callback *cb = due, *next; cb; cb = next) {
				next = cb->next;
				cb->fn(c->ev, status < 0 ? status : cb->status, cb->data);
				free(cb);
			}
		}
		pthread_mutex_lock(&cb_lock);
		for (pp = &cb_events; *pp;) {
			struct cb_event *c = *pp;
			bool done;

			pthread_mutex_lock(&c->ev->lock);
			done = !c->ev->callbacks;
			pthread_mutex_unlock(&c->ev->lock);
			if (done) {
				*pp = c->next;
				icd_release_event(c->ev);
				free(c);
			} else {
				pp = &c->next;
			}
		}
		pthread_mutex_unlock(&cb_lock);
		nanosleep(&ts, NULL);
	}
}

cl_int icd_set_event_callback(cl_event ev, cl_int type, void (CL_CALLBACK *fn)(cl_event, cl_int, void *), void *data)
{
	struct icd_callback *cb;
	struct cb_event *c = NULL;
	bool watched = false;

	if (!icd_object_valid(ev, WIRE_HANDLE_CL_EVENT))
		return CL_INVALID_EVENT;
	if (!fn || (type != CL_SUBMITTED && type != CL_RUNNING && type != CL_COMPLETE))
		return CL_INVALID_VALUE;
	cb = calloc(1, sizeof(*cb));
	if (!cb)
		return CL_OUT_OF_HOST_MEMORY;
	*cb = (struct icd_callback){ NULL, type, fn, data };
	pthread_mutex_lock(&cb_lock);
	for (struct cb_event *x = cb_events; x; x = x->next)
		watched |= x->ev == ev;
	if (!watched) {
		c = calloc(1, sizeof(*c));
		if (!c) {
			pthread_mutex_unlock(&cb_lock);
			free(cb);
			return CL_OUT_OF_HOST_MEMORY;
		}
		icd_retain_event(ev);
		c->ev = ev;
		c->next = cb_events;
		cb_events = c;
	}
	pthread_mutex_lock(&ev->lock);
	cb->next = ev->callbacks;
	ev->callbacks = cb;
	pthread_mutex_unlock(&ev->lock);
	if (!cb_running) {
		pthread_t t;

		if (!pthread_create(&t, NULL, cb_thread, NULL)) {
			pthread_detach(t);
			cb_running = true;
		}
	}
	pthread_mutex_unlock(&cb_lock);
	return CL_SUCCESS;
}
