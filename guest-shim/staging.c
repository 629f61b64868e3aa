#define LOG_PREFIX "shim: "

/* Pageable copies over shm through a staging both sides map
 * (docs/wire-protocol.md, "Pageable copies over shm").
 *
 * The driver copies pageable memory through pinned staging of its own, the
 * CPU's copy of one piece overlapping the DMA of the one before. Here the
 * staging is a memfd the worker registers with the driver (rpc_shared.c,
 * staging_attach_locked), in TERN_SHM_STAGING_SLOTS slots: to the device, we
 * copy piece k into a slot while the driver DMAs piece k-1 from another; to
 * the host, the driver DMAs piece k+1 while we copy piece k out. Before a
 * slot is used again its last piece is waited for: each piece carries a
 * ticket, which the worker writes into the staging's header once the device
 * is done with the piece, so a slot done in time costs no round trip; one
 * not done within a piece's DMA time is asked for with staging_wait, which
 * sleeps and answers the piece's error. Only one copy at a time goes
 * through the staging (its lock), as through the driver's.
 *
 * Semantics kept: the first piece of every copy is a round trip that checks
 * the whole range and the stream, so a bad copy fails at its call; a
 * synchronous copy to the device waits for its last piece (after the work
 * before it on its stream, as the driver's stream synchronisation before a
 * pageable copy); a copy to the host returns once every byte is in the
 * application's buffer, its last piece a round trip that reports earlier
 * deferred errors as any synchronous copy to the host.
 */
#include "shim.h"

#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "monotonic.h"
#include "wire.h"

/* Smaller copies go in the request or reply (memory.c): a piece of the
 * ring costs less than a round trip more. */
#define STAGING_COPY_MIN (1u << 20)
/* How long a slot's ticket is looked for before staging_wait is asked: a
 * piece's DMA and the host function behind it. Past it (the piece behind
 * other work, or failed) the round trip sleeps instead of spinning. */
#define STAGING_TICKET_SPIN_NS 1000000ull
#define STAGING_TICKET_PAUSE_NS 20000ull
/* After this many waits in a row whose ticket never came (a worker whose
 * driver runs no host functions for us, say), tickets are only looked at,
 * not spun for, until one is there at the first look. */
#define STAGING_TICKET_MISSES_MAX 8u

void staging_reset(struct shim_process *p)
{
	struct shim_staging *st = &p->staging;

	if (st->map)
		munmap(st->map, st->map_bytes);
	if (st->memfd >= 0)
		close(st->memfd);
	/* A forked child has none of the parent's helpers either: its
	 * staging_make sets the copier up again. */
	memset(st, 0, sizeof(*st));
	st->memfd = -1;
	pthread_mutex_init(&st->lock, NULL);
}

static uint8_t *slot_at(struct shim_staging *st, uint32_t slot)
{
	return st->base + (uint64_t)slot * st->slot_bytes;
}

/* The ticket for a new piece: never 0, which no piece has. */
static uint32_t ticket_next(struct shim_staging *st)
{
	if (!++st->ticket_last)
		++st->ticket_last;
	return st->ticket_last;
}

/* Whether the worker wrote @ticket into @slot's word within the spin. Past
 * its first microseconds the spin yields: on a machine with fewer cores
 * than busy threads the DMA (the sim's device thread) may need ours. */
static bool ticket_seen(struct shim_staging *st, uint32_t slot, uint32_t ticket)
{
	uint64_t start = 0, spun;

	for (;;) {
		if (__atomic_load_n(&st->header->done[slot], __ATOMIC_ACQUIRE) == ticket) {
			st->ticket_misses = 0;
			return true;
		}
		if (!start) {
			if (st->ticket_misses >= STAGING_TICKET_MISSES_MAX)
				return false;
			start = monotonic_ns();
			continue;
		}
		spun = monotonic_ns() - start;
		if (spun >= STAGING_TICKET_SPIN_NS) {
			if (++st->ticket_misses == STAGING_TICKET_MISSES_MAX)
				pr_info("staging: %u slots in a row done without their tickets: not spun for any more",
					STAGING_TICKET_MISSES_MAX);
			return false;
		}
		if (spun < STAGING_TICKET_PAUSE_NS)
			cpu_relax();
		else
			sched_yield();
	}
}

/* The device is done with @slot's last piece. @last: the copy's last wait,
 * answered by staging_wait even when the ticket came (after it, at once),
 * so that the copy returns the error of any of its pieces as before; the
 * ticket alone says nothing of errors (the sim runs host functions in a
 * context in error, the driver does not). */
static CUresult slot_wait(struct shim_staging *st, uint32_t slot, bool last)
{
	struct wire_staging_wait_req req = { .slot = slot };
	struct wire_staging_wait_rep rep;
	CUresult res = CUDA_SUCCESS;

	if (!st->pending[slot])
		return CUDA_SUCCESS;
	if (!ticket_seen(st, slot, st->pending[slot]) || last)
		res = rpc_staging_wait(&req, &rep);
	st->pending[slot] = 0;
	return res;
}

/* Lock the staging for a copy of @n bytes; false (unlocked) when it is not
 * for this one. */
static bool staging_take(struct shim_process *p, size_t n)
{
	if (n < STAGING_COPY_MIN || p->staging.unavailable || capture_active())
		return false;
	pthread_mutex_lock(&p->staging.lock);
	if (!p->staging.unavailable && rpc_staging_ready() == CUDA_SUCCESS)
		return true;
	pthread_mutex_unlock(&p->staging.lock);
	return false;
}

CUresult staging_copy_htod(uint64_t dst, const void *src, size_t n, uint64_t stream, bool async, bool *staged)
{
	struct shim_process *p = shim_process();
	struct shim_staging *st = &p->staging;
	const uint8_t *s = src;
	CUresult res = CUDA_SUCCESS;
	uint32_t slot = 0, used = 0;

	/* A staged piece's bytes are not in its request, so the replay log
	 * cannot keep them: once the session has a snapshot a restore could
	 * start from, copies to the device go in their requests again. */
	*staged = !p->replay.snapshot_held && staging_take(p, n);
	if (!*staged)
		return CUDA_SUCCESS;
	for (size_t off = 0; off < n; off += st->slot_bytes, slot = (slot + 1) % st->slots) {
		struct wire_memcpy_htod_slot_req req = {
			.dst = dst + off, .stream = stream, .async = async, .slot = slot,
			.bytes = n - off < st->slot_bytes ? n - off : st->slot_bytes,
			.copy_bytes = off ? 0 : n,
		};
		struct wire_memcpy_htod_slot_rep rep;

		res = slot_wait(st, slot, false);
		if (res != CUDA_SUCCESS)
			break;
		staging_copier_copy(&st->copier, slot_at(st, slot), s + off, req.bytes);
		/* Pending even if the answer is an error: the worker may have queued it. */
		req.ticket = st->pending[slot] = ticket_next(st);
		res = off ? rpc_memcpy_htod_slot_defer(&req) : rpc_memcpy_htod_slot(&req, &rep);
		if (res != CUDA_SUCCESS)
			break;
		used++;
	}
	/* The pieces are in stream order: the last one done, all are. */
	if (res == CUDA_SUCCESS && !async) {
		res = slot_wait(st, (slot + st->slots - 1) % st->slots, true);
		for (uint32_t i = 0; res == CUDA_SUCCESS && i < used && i < st->slots; i++)
			st->pending[i] = 0;
	}
	pthread_mutex_unlock(&st->lock);
	return res;
}

/* Queue piece @k of a copy to the host into its slot: the first and the
 * last are round trips (the whole range checked; earlier deferred errors
 * reported), the others deferred. */
static CUresult dtoh_queue(struct shim_staging *st, uint64_t src, size_t n, uint64_t stream, bool async, size_t k)
{
	uint64_t off = (uint64_t)k * st->slot_bytes;
	struct wire_memcpy_dtoh_slot_req req = {
		.src = src + off, .stream = stream, .async = async, .slot = (uint32_t)(k % st->slots),
		.bytes = n - off < st->slot_bytes ? n - off : st->slot_bytes,
		.copy_bytes = k ? 0 : n,
	};
	struct wire_memcpy_dtoh_slot_rep rep;
	CUresult res;

	/* An async copy to the device may still read the slot. */
	res = slot_wait(st, req.slot, false);
	if (res != CUDA_SUCCESS)
		return res;
	/* Pending even if the answer is an error: the worker may have queued it. */
	req.ticket = st->pending[req.slot] = ticket_next(st);
	return !k || off + req.bytes == n ? rpc_memcpy_dtoh_slot(&req, &rep) : rpc_memcpy_dtoh_slot_defer(&req);
}

CUresult staging_copy_dtoh(void *dst, uint64_t src, size_t n, uint64_t stream, bool async, bool *staged)
{
	struct shim_process *p = shim_process();
	struct shim_staging *st = &p->staging;
	uint8_t *d = dst;
	CUresult res = CUDA_SUCCESS;
	size_t pieces, k;

	*staged = staging_take(p, n);
	if (!*staged)
		return CUDA_SUCCESS;
	pieces = (n + st->slot_bytes - 1) / st->slot_bytes;
	for (k = 0; k < pieces && k < st->slots && res == CUDA_SUCCESS; k++)
		res = dtoh_queue(st, src, n, stream, async, k);
	/* Piece k out of its slot while the device fills the next ones. */
	for (k = 0; k < pieces && res == CUDA_SUCCESS; k++) {
		uint32_t slot = (uint32_t)(k % st->slots);
		uint64_t off = (uint64_t)k * st->slot_bytes;

		res = slot_wait(st, slot, k + 1 == pieces);
		if (res != CUDA_SUCCESS)
			break;
		staging_copier_copy(&st->copier, d + off, slot_at(st, slot),
				    n - off < st->slot_bytes ? n - off : st->slot_bytes);
		if (k + st->slots < pieces)
			res = dtoh_queue(st, src, n, stream, async, k + st->slots);
	}
	pthread_mutex_unlock(&st->lock);
	return res;
}
