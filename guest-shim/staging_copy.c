#define LOG_PREFIX "shim: "

/* The CPU's copy of a piece into or out of a staging slot, split among
 * helper threads (staging.c; docs/wire-protocol.md, "Pageable copies over
 * shm").
 *
 * One core's memcpy is bounded by the misses it can keep in flight, well
 * below what the memory and the DMA give: the driver's pageable copy to
 * the host ran at about twice tern's when one thread copied out of the
 * slot (H100, bench/overhead, docs/benchmarks.md). Parts of a piece are copied by TERN_SHM_STAGING_THREADS
 * threads in all, the caller one of them. The helpers are started at the
 * first split copy and wait for work on a condition variable; only the
 * thread holding the staging's lock gives them work, so one copy at a time.
 */
#include "shim.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A part smaller than this is not worth a wake-up. */
#define STAGING_COPY_PART_MIN (512u << 10)

struct staging_helper_arg {
	struct staging_copier *cp;
	unsigned index;                 /* its part: 1 .. helpers */
};

/* Part @index of @parts of the current copy. */
static void copier_part(const struct staging_copier *cp, unsigned index, uint8_t **dst, const uint8_t **src,
			size_t *n)
{
	size_t start = cp->part * index;

	*dst = cp->dst + start;
	*src = cp->src + start;
	*n = index + 1 == cp->parts ? cp->n - start : cp->part;
}

static void *copier_helper(void *arg)
{
	struct staging_copier *cp = ((struct staging_helper_arg *)arg)->cp;
	unsigned index = ((struct staging_helper_arg *)arg)->index;
	uint64_t seen = 0;

	free(arg);
	pthread_mutex_lock(&cp->lock);
	for (;;) {
		uint8_t *dst;
		const uint8_t *src;
		size_t n;

		while (cp->gen == seen || index >= cp->parts)
			pthread_cond_wait(&cp->work, &cp->lock);
		seen = cp->gen;
		copier_part(cp, index, &dst, &src, &n);
		pthread_mutex_unlock(&cp->lock);
		memcpy(dst, src, n);
		pthread_mutex_lock(&cp->lock);
		if (!--cp->parts_left)
			pthread_cond_signal(&cp->done);
	}
	return NULL;
}

void staging_copier_init(struct staging_copier *cp)
{
	const char *env = getenv("TERN_SHM_STAGING_THREADS");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned long threads = cpus >= 4 ? 2 : 1;

	memset(cp, 0, sizeof(*cp));
	pthread_mutex_init(&cp->lock, NULL);
	pthread_cond_init(&cp->work, NULL);
	pthread_cond_init(&cp->done, NULL);
	if (env && *env) {
		char *end;
		unsigned long v = strtoul(env, &end, 0);

		if (*end || v < 1 || v > STAGING_COPY_THREADS_MAX)
			pr_warn("TERN_SHM_STAGING_THREADS=%s: not 1 to %u, %lu taken", env, STAGING_COPY_THREADS_MAX,
				threads);
		else
			threads = v;
	}
	cp->threads = (unsigned)threads;
}

/* Helpers up to the count asked for; fewer where a thread cannot start. */
static void copier_start(struct staging_copier *cp)
{
	while (cp->helpers + 1 < cp->threads) {
		struct staging_helper_arg *arg = malloc(sizeof(*arg));
		pthread_t t;

		if (!arg)
			break;
		*arg = (struct staging_helper_arg){ cp, cp->helpers + 1 };
		if (pthread_create(&t, NULL, copier_helper, arg)) {
			free(arg);
			break;
		}
		pthread_detach(t);
		cp->helpers++;
	}
	cp->started = true;
	pr_debug("staging: %u threads copy each piece", cp->helpers + 1);
}

void staging_copier_copy(struct staging_copier *cp, void *dst, const void *src, size_t n)
{
	unsigned parts = cp->threads;
	uint8_t *d;
	const uint8_t *s;
	size_t mine;

	if (parts > 1 && !cp->started)
		copier_start(cp);
	if (parts > cp->helpers + 1)
		parts = cp->helpers + 1;
	if (parts > n / STAGING_COPY_PART_MIN)
		parts = (unsigned)(n / STAGING_COPY_PART_MIN);
	if (parts < 2) {
		memcpy(dst, src, n);
		return;
	}
	pthread_mutex_lock(&cp->lock);
	cp->dst = dst;
	cp->src = src;
	cp->n = n;
	cp->parts = parts;
	/* Whole cache lines each, so no two threads write one. */
	cp->part = n / parts / 64 * 64;
	cp->parts_left = parts - 1;
	cp->gen++;
	pthread_cond_broadcast(&cp->work);
	copier_part(cp, 0, &d, &s, &mine);
	pthread_mutex_unlock(&cp->lock);
	memcpy(d, s, mine);
	pthread_mutex_lock(&cp->lock);
	while (cp->parts_left)
		pthread_cond_wait(&cp->done, &cp->lock);
	pthread_mutex_unlock(&cp->lock);
}
