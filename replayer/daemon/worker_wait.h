/* A worker's waiters: threads that hold the session's synchronising
 * requests (exec_wait.c) while the dispatch thread serves the guest's other
 * threads, and hand each back, completed, in any order.
 *
 * One per worker, created after the backend is open. Every function runs on
 * the dispatch thread; the waiters touch only their slot and the backend.
 */
#ifndef TERN_WORKER_WAIT_H
#define TERN_WORKER_WAIT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "exec.h"
#include "wire.h"

/* Requests waiting at once; one more is served on the dispatch thread, as
 * before (a guest with that many requests in a synchronisation only waits
 * for itself). Threads that wait for them, in request order: a guest that
 * keeps that many waiting for ever delays its own later waits, no one
 * else's. */
#define WORKER_WAITS_MAX 1024
#define WORKER_WAITERS_MAX 32

struct worker_waits;

/* A new set of waiters on @be, or NULL (out of memory or descriptors: the
 * worker then waits on its dispatch thread). No thread runs before the
 * first wait. */
struct worker_waits *worker_waits_open(const struct backend *be);
/* Hand @w, prepared for request @h, to the waiters: 0, or -EBUSY when
 * WORKER_WAITS_MAX wait, -EAGAIN when no thread could be made. On an error
 * @w stays the caller's. */
int worker_waits_start(struct worker_waits *ws, const struct wire_header *h, const struct exec_wait *w);
/* Requests handed over and not yet reaped. */
unsigned worker_waits_active(const struct worker_waits *ws);
/* Whether a wait completed, looking for up to @ns nanoseconds first. */
bool worker_waits_spin(struct worker_waits *ws, uint64_t ns);
/* A descriptor readable while a completed wait is not reaped. */
int worker_waits_fd(const struct worker_waits *ws);
/* The next completed wait, its slot freed: true with @h and @w filled. */
bool worker_waits_reap(struct worker_waits *ws, struct wire_header *h, struct exec_wait *w);
/* Ends the idle waiters. Those still in a wait that never ends (a value
 * never written) are left behind with their slots; the process exits after.
 * Accepts NULL. */
void worker_waits_close(struct worker_waits *ws);

#endif
