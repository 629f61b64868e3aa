/* Synchronisations answered in the guest (docs/wire-protocol.md,
 * "Synchronisations answered in the guest").
 *
 * A successful reply to a `sync` call that waits for work (a copy to the
 * host, a stream or context synchronisation, a stream query) proves two
 * things: the work it covers ended, and no earlier deferred call failed (a
 * `sync` reply carries their first error). While no request of any thread
 * has been sent since (the session's sequence number is still the proof's
 * own), nothing can have been queued on any stream, so synchronising or
 * querying the same work again has CUDA_SUCCESS for its only answer and
 * needs no round trip. Only the latest request can still be the last one
 * sent, so one proof is kept.
 *
 * What a proof covers is kept narrow: the stream it waited on, in the
 * context its request named (the per-thread default stream: of its thread),
 * or, for a context synchronisation, that context and its legacy and
 * per-thread default streams. The legacy stream's implicit synchronisation
 * with blocking streams is not relied on: the shim does not know a stream's
 * flags without asking, and a non-blocking stream's work (or fault) is
 * outside it. Events are always asked: a graph's event record nodes and
 * other processes (IPC events) record them where the shim cannot see. */
#include "shim.h"

/* Its address tells the calling thread from the others. */
static __thread char thread_marker;

/* 0 names the legacy stream, as CU_STREAM_LEGACY does. */
static uint64_t stream_named(uint64_t stream)
{
	return stream ? stream : (uint64_t)(uintptr_t)CU_STREAM_LEGACY;
}

static void completion_note(uint64_t ctx, uint64_t stream)
{
	struct shim_process *p = shim_process();
	uint64_t seq = rpc_trip_seq();

	pthread_mutex_lock(&p->conn_lock);
	if (seq && seq == p->seq)
		p->completion = (struct shim_completion){
			.seq = seq, .ctx = ctx, .stream = stream, .thread = &thread_marker,
		};
	pthread_mutex_unlock(&p->conn_lock);
}

void completion_note_stream(uint64_t stream)
{
	completion_note(rpc_header_ctx(), stream_named(stream));
}

void completion_note_context(uint64_t ctx)
{
	completion_note(ctx, 0);
}

/* The proof still holds, for context @ctx. */
static bool proof_current_locked(const struct shim_process *p, uint64_t ctx)
{
	const struct shim_completion *c = &p->completion;

	return !p->lost && c->seq && c->seq == p->seq && ctx && c->ctx == ctx;
}

/* A synchronisation here must be refused (a host function) or may be
 * illegal (during a capture): the worker answers. */
static bool completion_askable(void)
{
	return !hostfn_in_callback() && !capture_active();
}

bool completion_covers_stream(uint64_t stream)
{
	struct shim_process *p = shim_process();
	const struct shim_completion *c = &p->completion;
	uint64_t want = stream_named(stream);
	bool per_thread = want == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD;
	bool covered;

	if (!completion_askable())
		return false;
	pthread_mutex_lock(&p->conn_lock);
	covered = proof_current_locked(p, rpc_header_ctx());
	if (covered && c->stream)
		covered = c->stream == want && (!per_thread || c->thread == &thread_marker);
	else if (covered)
		covered = per_thread || want == (uint64_t)(uintptr_t)CU_STREAM_LEGACY;
	pthread_mutex_unlock(&p->conn_lock);
	return covered;
}

bool completion_covers_context(uint64_t ctx)
{
	struct shim_process *p = shim_process();
	bool covered;

	if (!completion_askable())
		return false;
	pthread_mutex_lock(&p->conn_lock);
	covered = proof_current_locked(p, ctx) && !p->completion.stream;
	pthread_mutex_unlock(&p->conn_lock);
	return covered;
}

void completion_forget_locked(struct shim_process *p)
{
	p->completion = (struct shim_completion){ 0 };
}
