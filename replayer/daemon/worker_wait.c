/* A worker's waiters (worker_wait.h).
 *
 * Requests handed over wait in a FIFO of prepared waits; up to
 * WORKER_WAITERS_MAX threads take them in order and block in the backend,
 * and each completed one goes to a second FIFO for the dispatch thread. Two
 * rings of slot indices, so nothing scans the slots.
 */
#define LOG_PREFIX "worker: "
#include "worker_wait.h"
#include "log.h"
#include "monotonic.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct worker_wait_slot {
	bool used;
	struct wire_header h;
	struct exec_wait w;
};

/* A ring of slot indices; at most WORKER_WAITS_MAX in it. */
struct wait_ring {
	unsigned head, count;
	uint16_t at[WORKER_WAITS_MAX];
};

struct worker_waits {
	const struct backend *be;
	pthread_mutex_t lock;
	pthread_cond_t work;            /* a wait was queued, or stop */
	bool stopping;
	int efd;
	unsigned active;                /* slots in use */
	unsigned threads, idle;
	pthread_t thread[WORKER_WAITERS_MAX];
	bool busy[WORKER_WAITERS_MAX];  /* in a wait */
	struct wait_ring queued, done;
	uint16_t free_at[WORKER_WAITS_MAX];
	unsigned free_count;
	atomic_uint done_count;
	struct worker_wait_slot slots[WORKER_WAITS_MAX];
};

static void ring_push(struct wait_ring *r, unsigned i)
{
	r->at[(r->head + r->count++) % WORKER_WAITS_MAX] = (uint16_t)i;
}

static unsigned ring_pop(struct wait_ring *r)
{
	unsigned i = r->at[r->head];

	r->head = (r->head + 1) % WORKER_WAITS_MAX;
	r->count--;
	return i;
}

struct waiter_arg {
	struct worker_waits *ws;
	unsigned index;
};

static void *waiter_main(void *arg)
{
	struct worker_waits *ws = ((struct waiter_arg *)arg)->ws;
	unsigned me = ((struct waiter_arg *)arg)->index;
	uint64_t one = 1;

	free(arg);
	pthread_mutex_lock(&ws->lock);
	for (;;) {
		struct worker_wait_slot *slot;
		unsigned i;

		while (!ws->queued.count && !ws->stopping) {
			ws->idle++;
			pthread_cond_wait(&ws->work, &ws->lock);
			ws->idle--;
		}
		if (ws->stopping)
			break;
		i = ring_pop(&ws->queued);
		slot = &ws->slots[i];
		ws->busy[me] = true;
		pthread_mutex_unlock(&ws->lock);
		exec_wait_run(ws->be, &slot->w);
		pthread_mutex_lock(&ws->lock);
		ws->busy[me] = false;
		ring_push(&ws->done, i);
		atomic_fetch_add_explicit(&ws->done_count, 1, memory_order_release);
		if (write(ws->efd, &one, sizeof(one)) < 0)
			pr_debug("waiter: eventfd write: %d", errno);
	}
	pthread_mutex_unlock(&ws->lock);
	return NULL;
}

struct worker_waits *worker_waits_open(const struct backend *be)
{
	struct worker_waits *ws = calloc(1, sizeof(*ws));

	if (!ws)
		return NULL;
	ws->be = be;
	ws->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ws->efd < 0) {
		free(ws);
		return NULL;
	}
	pthread_mutex_init(&ws->lock, NULL);
	pthread_cond_init(&ws->work, NULL);
	for (unsigned i = 0; i < WORKER_WAITS_MAX; i++)
		ws->free_at[i] = (uint16_t)(WORKER_WAITS_MAX - 1 - i);
	ws->free_count = WORKER_WAITS_MAX;
	return ws;
}

/* One more waiter, when none is idle and there is room; lock held. */
static void waiter_add_locked(struct worker_waits *ws)
{
	struct waiter_arg *arg;

	if (ws->idle > ws->queued.count - 1 || ws->threads == WORKER_WAITERS_MAX)
		return;
	arg = malloc(sizeof(*arg));
	if (!arg)
		return;
	*arg = (struct waiter_arg){ ws, ws->threads };
	if (pthread_create(&ws->thread[ws->threads], NULL, waiter_main, arg)) {
		free(arg);
		return;
	}
	ws->threads++;
}

int worker_waits_start(struct worker_waits *ws, const struct wire_header *h, const struct exec_wait *w)
{
	struct worker_wait_slot *slot;
	unsigned i;
	int ret = 0;

	pthread_mutex_lock(&ws->lock);
	if (!ws->free_count) {
		ret = -EBUSY;
		goto out;
	}
	i = ws->free_at[--ws->free_count];
	slot = &ws->slots[i];
	slot->used = true;
	slot->h = *h;
	slot->w = *w;
	ws->active++;
	ring_push(&ws->queued, i);
	waiter_add_locked(ws);
	if (!ws->threads) {
		/* Not one thread: undo, the dispatch thread serves it. */
		ws->queued.count--;
		slot->used = false;
		ws->free_at[ws->free_count++] = (uint16_t)i;
		ws->active--;
		ret = -EAGAIN;
		goto out;
	}
	pthread_cond_signal(&ws->work);
out:
	pthread_mutex_unlock(&ws->lock);
	return ret;
}

unsigned worker_waits_active(const struct worker_waits *ws)
{
	return ws ? ws->active : 0;
}


bool worker_waits_spin(struct worker_waits *ws, uint64_t ns)
{
	uint64_t until = monotonic_ns() + ns;

	do {
		if (atomic_load_explicit(&ws->done_count, memory_order_acquire))
			return true;
	} while (monotonic_ns() < until);
	return false;
}

int worker_waits_fd(const struct worker_waits *ws)
{
	return ws ? ws->efd : -1;
}

bool worker_waits_reap(struct worker_waits *ws, struct wire_header *h, struct exec_wait *w)
{
	struct worker_wait_slot *slot;
	uint64_t count;
	unsigned i;

	if (!ws || !atomic_load_explicit(&ws->done_count, memory_order_acquire))
		return false;
	pthread_mutex_lock(&ws->lock);
	i = ring_pop(&ws->done);
	slot = &ws->slots[i];
	*h = slot->h;
	*w = slot->w;
	slot->used = false;
	ws->free_at[ws->free_count++] = (uint16_t)i;
	ws->active--;
	/* The eventfd is drained with the last completed wait. */
	if (atomic_fetch_sub_explicit(&ws->done_count, 1, memory_order_relaxed) == 1 &&
	    read(ws->efd, &count, sizeof(count)) < 0)
		count = 0;
	pthread_mutex_unlock(&ws->lock);
	return true;
}

void worker_waits_close(struct worker_waits *ws)
{
	bool left = false;

	if (!ws)
		return;
	pthread_mutex_lock(&ws->lock);
	ws->stopping = true;
	pthread_cond_broadcast(&ws->work);
	pthread_mutex_unlock(&ws->lock);
	for (unsigned i = 0; i < ws->threads; i++) {
		bool busy;

		pthread_mutex_lock(&ws->lock);
		busy = ws->busy[i];
		pthread_mutex_unlock(&ws->lock);
		if (busy) {
			pthread_detach(ws->thread[i]);
			left = true;
		} else {
			pthread_join(ws->thread[i], NULL);
		}
	}
	if (left) {
		pr_info("a synchronisation still waits at the session's end: its waiter is left behind");
		return;
	}
	close(ws->efd);
	free(ws);
}
