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
 * staging_wait waits for that event off the dispatch thread (a `wait`
 * call), so a copy behind a long kernel never holds the guest's other
 * threads. The guest is hostile: every slot, length and range is checked
 * here, and nothing in the shared pages is ever read by the worker.
 */
#define LOG_PREFIX "exec: "
#include "exec.h"
#include "log.h"
#include "shm_chan.h"
#include "wire_dispatch.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* How long an attach waits for its memfd, which the guest sends just before. */
#define STAGING_FD_TIMEOUT_MS 2000
/* The smallest slot: a piece smaller than this is not worth a slot. */
#define STAGING_SLOT_MIN (64u << 10)

static void slot_event_drop(struct exec *ex, struct exec_staging_slot *sl)
{
	if (sl->done)
		ex->be->cuEventDestroy(sl->done);
	sl->done = NULL;
}

void exec_staging_close(struct exec *ex)
{
	struct exec_staging *st = &ex->staging;

	if (!st->base)
		return;
	for (uint32_t i = 0; i < st->slots; i++)
		slot_event_drop(ex, &st->slot[i]);
	ex->be->cuMemHostUnregister(st->base);
	munmap(st->base, st->bytes);
	ex->host.bytes -= st->bytes;
	memset(st, 0, sizeof(*st));
}

CUresult exec_staging_attach(struct exec *ex, const struct wire_staging_attach_req *req,
			     struct wire_staging_attach_rep *rep)
{
	struct exec_staging *st = &ex->staging;
	long page = sysconf(_SC_PAGESIZE);
	uint64_t slot_bytes;
	CUresult res;
	void *base;
	int fd, ret;

	(void)rep;
	if (ex->host.sock < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* The memfd came first: taken off the socket whatever the request says. */
	ret = shm_fds_recv(ex->host.sock, &fd, 1, STAGING_FD_TIMEOUT_MS);
	if (ret) {
		pr_warn("staging_attach: no memfd from the guest (%d)", ret);
		return CUDA_ERROR_INVALID_VALUE;
	}
	res = CUDA_ERROR_INVALID_VALUE;
	if (st->base) {
		res = CUDA_ERROR_ALREADY_MAPPED;
		goto out_close;
	}
	if (req->slots < 2 || req->slots > EXEC_STAGING_SLOTS_MAX || !req->bytes ||
	    req->bytes > EXEC_STAGING_BYTES_MAX || req->bytes % req->slots)
		goto out_close;
	slot_bytes = req->bytes / req->slots;
	if (slot_bytes < STAGING_SLOT_MIN || slot_bytes % (uint64_t)page || shm_memfd_check(fd, req->bytes))
		goto out_close;
	if (req->bytes > ex->host.bytes_max - ex->host.bytes) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_close;
	}
	base = mmap(NULL, req->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_close;
	}
	/* Pinned for the driver's DMA; never mapped into the device. */
	res = ex->be->cuMemHostRegister(base, req->bytes, CU_MEMHOSTREGISTER_PORTABLE);
	if (res != CUDA_SUCCESS) {
		munmap(base, req->bytes);
		goto out_close;
	}
	memset(st, 0, sizeof(*st));
	st->base = base;
	st->bytes = req->bytes;
	st->slots = req->slots;
	st->slot_bytes = slot_bytes;
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

	if (!st->base || slot >= st->slots || !bytes || bytes > st->slot_bytes)
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

/* The slot's new piece, behind an event on @s. The guest waits for the
 * slot before it queues a piece in it again; a hostile one that does not
 * only gets its own bytes mixed. */
static CUresult piece_mark(struct exec *ex, struct exec_staging_slot *sl, CUstream s)
{
	CUresult res;

	slot_event_drop(ex, sl);
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

CUresult exec_memcpy_htod_staged(struct exec *ex, const struct wire_memcpy_htod_staged_req *req,
				 struct wire_memcpy_htod_staged_rep *rep)
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
	return res == CUDA_SUCCESS ? piece_mark(ex, sl, s) : res;
}

CUresult exec_memcpy_dtoh_staged(struct exec *ex, const struct wire_memcpy_dtoh_staged_req *req,
				 struct wire_memcpy_dtoh_staged_rep *rep)
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
	return res == CUDA_SUCCESS ? piece_mark(ex, sl, s) : res;
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
