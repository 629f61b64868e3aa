/* Pageable copies over shm: the guest's staging (docs/wire-protocol.md,
 * "Pageable copies over shm").
 *
 * The driver copies pageable memory through pinned staging of its own; over
 * shm the guest's shim does the same with staging both sides map: a sealed
 * memfd handed over with staging_attach, mapped and registered here, cut in
 * slots. The guest copies a piece of the application's buffer into a slot
 * (or out of it) while the driver DMAs another slot, so the bytes are copied
 * once by the CPU, as natively, and never cross the rings.
 *
 * Each piece is queued on its stream (the legacy or per-thread stream for a
 * synchronous copy) and an event behind it marks when the slot is done: its
 * bytes read by the device (to the device) or landed (to the host).
 * Before the event a host function writes the piece's ticket into the
 * header (struct wire_staging_header), where the guest sees the slot done
 * without asking: a round trip per piece would cost more than a piece's DMA.
 * staging_wait, its fallback (and the only answer with the piece's error),
 * waits for the event off the dispatch thread (a `wait` call), so a copy
 * behind a long kernel never holds the guest's other threads. The guest is
 * hostile: every slot, length and range is checked here, and nothing in the
 * shared pages is ever read by the worker.
 */
#define LOG_PREFIX "exec: "
#include "exec.h"
#include "log.h"
#include "shm_chan.h"
#include "wire_dispatch.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* How long an attach waits for its memfd, which the guest sends just before. */
#define STAGING_FD_TIMEOUT_MS 2000
/* The smallest slot: a piece smaller than this is not worth a slot. */
#define STAGING_SLOT_MIN (64u << 10)
/* The largest header a guest may ask for: whole pages, the words in the first. */
#define STAGING_HEADER_MAX (64u << 10)

/* What the host functions behind the pieces write. Apart from struct
 * exec_staging because it outlives it when the session ends with host
 * functions still queued (a stream stuck or in error): then it and the
 * mapping are left, the worker being about to exit. */
struct exec_staging_ticket {
	struct exec_staging_tickets *all;
	uint32_t slot;
	_Atomic uint32_t ticket;        /* of the slot's last piece queued */
};
struct exec_staging_tickets {
	struct wire_staging_header *header;     /* in the shared mapping */
	atomic_uint queued;                     /* host functions not run yet */
	struct exec_staging_ticket slot[EXEC_STAGING_SLOTS_MAX];
};

/* On the driver's callback thread, after the piece in stream order. A guest
 * that queued another piece in the slot meanwhile (only a hostile one does)
 * sees that one's ticket early: only its own bytes get mixed. */
static void staging_ticket_write(void *arg)
{
	struct exec_staging_ticket *t = arg;

	__atomic_store_n(&t->all->header->done[t->slot], atomic_load_explicit(&t->ticket, memory_order_relaxed),
			 __ATOMIC_RELEASE);
	atomic_fetch_sub_explicit(&t->all->queued, 1, memory_order_release);
}

static void slot_event_drop(struct exec *ex, struct exec_staging_slot *sl)
{
	if (sl->done)
		ex->be->cuEventDestroy(sl->done);
	sl->done = NULL;
}

void exec_staging_close(struct exec *ex)
{
	struct exec_staging *st = &ex->staging;

	if (!st->map)
		return;
	for (uint32_t i = 0; i < st->slots; i++)
		slot_event_drop(ex, &st->slot[i]);
	ex->be->cuMemHostUnregister(st->base);
	ex->host.bytes -= st->bytes;
	if (atomic_load_explicit(&st->tickets->queued, memory_order_acquire)) {
		pr_debug("staging: host functions still queued at the end: its pages are left mapped");
	} else {
		munmap(st->map, st->map_bytes);
		free(st->tickets);
	}
	memset(st, 0, sizeof(*st));
}

CUresult exec_staging_attach_tickets(struct exec *ex, const struct wire_staging_attach_tickets_req *req,
				     struct wire_staging_attach_tickets_rep *rep)
{
	struct exec_staging *st = &ex->staging;
	long page = sysconf(_SC_PAGESIZE);
	struct exec_staging_tickets *tickets;
	uint64_t slot_bytes, map_bytes;
	CUresult res;
	uint8_t *map;
	int fd, ret;

	(void)rep;
	if (ex->host.sock < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* The memfd came first: taken off the socket whatever the request says. */
	ret = shm_fds_recv(ex->host.sock, &fd, 1, STAGING_FD_TIMEOUT_MS);
	if (ret) {
		pr_warn("staging_attach_tickets: no memfd from the guest (%d)", ret);
		return CUDA_ERROR_INVALID_VALUE;
	}
	res = CUDA_ERROR_INVALID_VALUE;
	if (st->map) {
		res = CUDA_ERROR_ALREADY_MAPPED;
		goto out_close;
	}
	if (req->slots < 2 || req->slots > EXEC_STAGING_SLOTS_MAX || !req->bytes ||
	    req->bytes > EXEC_STAGING_BYTES_MAX || req->bytes % req->slots)
		goto out_close;
	if (req->header_bytes < sizeof(struct wire_staging_header) || req->header_bytes > STAGING_HEADER_MAX ||
	    req->header_bytes % (uint64_t)page)
		goto out_close;
	slot_bytes = req->bytes / req->slots;
	map_bytes = req->header_bytes + req->bytes;
	if (slot_bytes < STAGING_SLOT_MIN || slot_bytes % (uint64_t)page || shm_memfd_check(fd, map_bytes))
		goto out_close;
	if (req->bytes > ex->host.bytes_max - ex->host.bytes) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_close;
	}
	tickets = calloc(1, sizeof(*tickets));
	if (!tickets) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_close;
	}
	map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		free(tickets);
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_close;
	}
	/* The slots pinned for the driver's DMA; never mapped into the device.
	 * The header is written by the CPU only. */
	res = ex->be->cuMemHostRegister(map + req->header_bytes, req->bytes, CU_MEMHOSTREGISTER_PORTABLE);
	if (res != CUDA_SUCCESS) {
		munmap(map, map_bytes);
		free(tickets);
		goto out_close;
	}
	tickets->header = (struct wire_staging_header *)map;
	for (uint32_t i = 0; i < req->slots; i++)
		tickets->slot[i] = (struct exec_staging_ticket){ .all = tickets, .slot = i };
	memset(st, 0, sizeof(*st));
	st->map = map;
	st->map_bytes = map_bytes;
	st->base = map + req->header_bytes;
	st->bytes = req->bytes;
	st->slots = req->slots;
	st->slot_bytes = slot_bytes;
	st->tickets = tickets;
	ex->host.bytes += req->bytes;
	pr_debug("staging: %u slots of %llu bytes", st->slots, (unsigned long long)slot_bytes);
out_close:
	close(fd);
	return res;
}

/* The slot a piece names, when the staging has it and the piece fits. */
static struct exec_staging_slot *staging_slot(struct exec *ex, uint32_t slot, uint64_t bytes)
{
	struct exec_staging *st = &ex->staging;

	if (!st->map || slot >= st->slots || !bytes || bytes > st->slot_bytes)
		return NULL;
	return &st->slot[slot];
}

/* Checks common to both directions: the slot, the device range (the whole
 * copy's on its first piece, so a bad copy fails at its call), the stream
 * (the given one, also for a synchronous copy: the legacy or per-thread
 * stream, as the guest's call). */
static CUresult piece_check(struct exec *ex, uint64_t dev, uint64_t stream, uint32_t slot, uint64_t bytes,
			    uint64_t copy_bytes, uint64_t *real, CUstream *s, struct exec_staging_slot **sl)
{
	uint64_t unused;

	*sl = staging_slot(ex, slot, bytes);
	if (!*sl)
		return CUDA_ERROR_INVALID_VALUE;
	if (copy_bytes && (copy_bytes < bytes || !exec_device_range(ex, dev, copy_bytes, &unused)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!exec_device_range(ex, dev, bytes, real))
		return CUDA_ERROR_INVALID_VALUE;
	return exec_host_copy_stream(ex, stream, s);
}

/* The piece's ticket into the header once @s gets past it. Not during a
 * capture: the host function would go into the graph, which may outlive the
 * staging. Without it the guest asks staging_wait instead. */
static void piece_ticket(struct exec *ex, uint32_t slot, uint32_t ticket, CUstream s)
{
	struct exec_staging_ticket *t = &ex->staging.tickets->slot[slot];

	if (exec_capture_active(ex))
		return;
	atomic_store_explicit(&t->ticket, ticket, memory_order_relaxed);
	atomic_fetch_add_explicit(&ex->staging.tickets->queued, 1, memory_order_relaxed);
	if (ex->be->cuLaunchHostFunc(s, staging_ticket_write, t) != CUDA_SUCCESS)
		atomic_fetch_sub_explicit(&ex->staging.tickets->queued, 1, memory_order_relaxed);
}

/* The slot's new piece: its ticket, then an event on @s. The guest waits for
 * the slot before it queues a piece in it again; a hostile one that does not
 * only gets its own bytes mixed. */
static CUresult piece_mark(struct exec *ex, struct exec_staging_slot *sl, uint32_t slot, uint32_t ticket, CUstream s)
{
	CUresult res;

	slot_event_drop(ex, sl);
	piece_ticket(ex, slot, ticket, s);
	res = ex->be->cuEventCreate(&sl->done, CU_EVENT_DISABLE_TIMING);
	if (res != CUDA_SUCCESS) {
		sl->done = NULL;
		return res;
	}
	res = ex->be->cuEventRecord(sl->done, s);
	if (res != CUDA_SUCCESS)
		slot_event_drop(ex, sl);
	return res;
}

CUresult exec_memcpy_htod_slot(struct exec *ex, const struct wire_memcpy_htod_slot_req *req,
			       struct wire_memcpy_htod_slot_rep *rep)
{
	struct exec_staging_slot *sl;
	uint64_t dst;
	CUstream s;
	CUresult res;

	(void)rep;
	res = piece_check(ex, req->dst, req->stream, req->slot, req->bytes, req->copy_bytes, &dst, &s, &sl);
	if (res != CUDA_SUCCESS)
		return res;
	/* From pinned memory: queued in stream order, the slot read when it runs. */
	res = ex->be->cuMemcpyHtoDAsync(dst, ex->staging.base + (uint64_t)req->slot * ex->staging.slot_bytes,
					req->bytes, s);
	return res == CUDA_SUCCESS ? piece_mark(ex, sl, req->slot, req->ticket, s) : res;
}

CUresult exec_memcpy_dtoh_slot(struct exec *ex, const struct wire_memcpy_dtoh_slot_req *req,
			       struct wire_memcpy_dtoh_slot_rep *rep)
{
	struct exec_staging_slot *sl;
	uint64_t src;
	CUstream s;
	CUresult res;

	(void)rep;
	res = piece_check(ex, req->src, req->stream, req->slot, req->bytes, req->copy_bytes, &src, &s, &sl);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuMemcpyDtoHAsync(ex->staging.base + (uint64_t)req->slot * ex->staging.slot_bytes, src,
					req->bytes, s);
	return res == CUDA_SUCCESS ? piece_mark(ex, sl, req->slot, req->ticket, s) : res;
}

/* Served here when the slot's event is done (or no waiter could take it):
 * the event's answer is the piece's. */
CUresult exec_staging_wait(struct exec *ex, const struct wire_staging_wait_req *req,
			   struct wire_staging_wait_rep *rep)
{
	struct exec_staging_slot *sl = staging_slot(ex, req->slot, 1);
	CUresult res;

	(void)rep;
	if (!sl)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sl->done)
		return CUDA_SUCCESS;    /* waited for already */
	res = ex->be->cuEventSynchronize(sl->done);
	slot_event_drop(ex, sl);
	return res;
}

int exec_staging_wait_prepare(struct exec *ex, const struct wire_cursor *cur, struct exec_wait *w)
{
	struct wire_cursor c = *cur;
	struct wire_staging_wait_req req;
	struct exec_staging_slot *sl;

	if (wire_staging_wait_req_decode(&c, &req) || wire_cursor_end(&c))
		return 0;
	sl = staging_slot(ex, req.slot, 1);
	if (!sl || !sl->done || ex->be->cuEventQuery(sl->done) != CUDA_ERROR_NOT_READY)
		return 0;
	/* The waiter owns the event now: a piece queued in the slot meanwhile
	 * (only a hostile guest's) records a new one, never this one. The
	 * reply is the wait's answer. */
	w->marker = sl->done;
	sl->done = NULL;
	w->staging = true;
	w->staging_slot = req.slot;
	return 1;
}

void exec_staging_event_return(struct exec *ex, struct exec_wait *w)
{
	struct exec_staging_slot *sl = staging_slot(ex, w->staging_slot, 1);

	/* Nothing ran between the prepare and now: the slot still has no event. */
	if (sl && !sl->done) {
		sl->done = w->marker;
		w->marker = NULL;
	}
	w->staging = false;
}
