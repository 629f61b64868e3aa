/* A worker's waiters (worker_wait.h). */
#define LOG_PREFIX "worker: "
#include "worker_wait.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

enum wait_state { WAIT_FREE, WAIT_QUEUED, WAIT_DONE };

struct worker_wait_slot {
	struct worker_waits *ws;
	pthread_t thread;
	pthread_cond_t cond;
	bool started;
	enum wait_state state;          /* under ws->lock */
	struct wire_header h;
	struct exec_wait w;
};

struct worker_waits {
	const struct backend *be;
	pthread_mutex_t lock;
	bool stopping;
	int efd;
	unsigned active;                /* slots not free; dispatch thread only */
	atomic_uint done;               /* completed, not reaped */
	struct worker_wait_slot slots[WORKER_WAITS_MAX];
};

static void *waiter_main(void *arg)
{
	struct worker_wait_slot *slot = arg;
	struct worker_waits *ws = slot->ws;
	uint64_t one = 1;

	pthread_mutex_lock(&ws->lock);
	for (;;) {
		while (slot->state != WAIT_QUEUED && !ws->stopping)
			pthread_cond_wait(&slot->cond, &ws->lock);
		if (slot->state != WAIT_QUEUED)
			break;
		pthread_mutex_unlock(&ws->lock);
		exec_wait_run(ws->be, &slot->w);
		pthread_mutex_lock(&ws->lock);
		slot->state = WAIT_DONE;
		atomic_fetch_add_explicit(&ws->done, 1, memory_order_release);
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
	for (unsigned i = 0; i < WORKER_WAITS_MAX; i++) {
		ws->slots[i].ws = ws;
		pthread_cond_init(&ws->slots[i].cond, NULL);
	}
	return ws;
}

int worker_waits_start(struct worker_waits *ws, const struct wire_header *h, const struct exec_wait *w)
{
	struct worker_wait_slot *slot = NULL;
	int ret = 0;

	pthread_mutex_lock(&ws->lock);
	for (unsigned i = 0; i < WORKER_WAITS_MAX && !slot; i++)
		if (ws->slots[i].state == WAIT_FREE)
			slot = &ws->slots[i];
	if (!slot) {
		ret = -EBUSY;
		goto out;
	}
	if (!slot->started) {
		ret = -pthread_create(&slot->thread, NULL, waiter_main, slot);
		if (ret)
			goto out;
		slot->started = true;
	}
	slot->h = *h;
	slot->w = *w;
	slot->state = WAIT_QUEUED;
	ws->active++;
	pthread_cond_signal(&slot->cond);
out:
	pthread_mutex_unlock(&ws->lock);
	return ret;
}

unsigned worker_waits_active(const struct worker_waits *ws)
{
	return ws ? ws->active : 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool worker_waits_spin(struct worker_waits *ws, uint64_t ns)
{
	uint64_t until = now_ns() + ns;

	do {
		if (atomic_load_explicit(&ws->done, memory_order_acquire))
			return true;
	} while (now_ns() < until);
	return false;
}

int worker_waits_fd(const struct worker_waits *ws)
{
	return ws ? ws->efd : -1;
}

bool worker_waits_reap(struct worker_waits *ws, struct wire_header *h, struct exec_wait *w)
{
	bool found = false;
	uint64_t count;

	if (!ws || !atomic_load_explicit(&ws->done, memory_order_acquire))
		return false;
	pthread_mutex_lock(&ws->lock);
	for (unsigned i = 0; i < WORKER_WAITS_MAX && !found; i++) {
		struct worker_wait_slot *slot = &ws->slots[i];

		if (slot->state != WAIT_DONE)
			continue;
		*h = slot->h;
		*w = slot->w;
		slot->state = WAIT_FREE;
		ws->active--;
		atomic_fetch_sub_explicit(&ws->done, 1, memory_order_relaxed);
		found = true;
	}
	if (!atomic_load_explicit(&ws->done, memory_order_relaxed) && read(ws->efd, &count, sizeof(count)) < 0)
		count = 0;      /* nothing to read: no wakeup was pending */
	pthread_mutex_unlock(&ws->lock);
	return found;
}

void worker_waits_close(struct worker_waits *ws)
{
	bool left = false;

	if (!ws)
		return;
	pthread_mutex_lock(&ws->lock);
	ws->stopping = true;
	for (unsigned i = 0; i < WORKER_WAITS_MAX; i++)
		pthread_cond_signal(&ws->slots[i].cond);
	pthread_mutex_unlock(&ws->lock);
	for (unsigned i = 0; i < WORKER_WAITS_MAX; i++) {
		struct worker_wait_slot *slot = &ws->slots[i];
		bool busy;

		if (!slot->started)
			continue;
		pthread_mutex_lock(&ws->lock);
		busy = slot->state == WAIT_QUEUED;
		pthread_mutex_unlock(&ws->lock);
		if (busy) {
			pthread_detach(slot->thread);
			left = true;
		} else {
			pthread_join(slot->thread, NULL);
		}
	}
	if (left) {
		pr_info("a synchronisation still waits at the session's end: its waiter is left behind");
		return;
	}
	close(ws->efd);
	free(ws);
}
