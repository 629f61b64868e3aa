/* Capture: device memory into a snapshot writer, during the pause (hash,
 * shadow copy, direct copies) and after it (shadow drain).  See capture.h
 * and docs/snapshot-data-path.md. */
#define LOG_PREFIX "capture: "
#include "capture_internal.h"
#include "monotonic.h"
#include "snap_writer.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_STAGING (64ull << 20)
#define DEFAULT_STAGING_COUNT 4u
#define DEFAULT_STREAMS 2u
#define DEFAULT_THREADS 4u
#define DEFAULT_RESERVE (512ull << 20)
#define SHADOW_MIN (64ull << 20)
/* Device-to-device runs are cut at this size so every stream gets some. */
#define D2D_PIECE (1ull << 30)


int capture_cu(struct capture *c, CUresult rc, const char *what)
{
	const char *name = NULL;

	if (rc == CUDA_SUCCESS)
		return 0;
	c->be->cuGetErrorName(rc, &name);
	pr_warn("%s: %s", what, name ? name : "unknown CUDA error");
	return rc == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

struct parallel {
	pthread_mutex_t mu;
	uint64_t next, count;
	int rc;
	int (*fn)(void *arg, uint64_t i);
	void *arg;
};

static void *parallel_main(void *arg)
{
	struct parallel *p = arg;

	for (;;) {
		uint64_t i;
		int rc;

		pthread_mutex_lock(&p->mu);
		if (p->rc || p->next == p->count) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		i = p->next++;
		pthread_mutex_unlock(&p->mu);
		rc = p->fn(p->arg, i);
		if (rc) {
			pthread_mutex_lock(&p->mu);
			if (!p->rc)
				p->rc = rc;
			pthread_mutex_unlock(&p->mu);
		}
	}
}

int capture_parallel(struct capture *c, uint64_t count, int (*fn)(void *arg, uint64_t i),
		     void *arg)
{
	struct parallel p = { .count = count, .fn = fn, .arg = arg };
	unsigned n = c->cfg.threads, started = 0;
	pthread_t tids[64];

	if (n > count)
		n = (unsigned)count;
	if (n > 64)
		n = 64;
	pthread_mutex_init(&p.mu, NULL);
	/* The calling thread is one of the n. */
	for (; started + 1 < n; started++)
		if (pthread_create(&tids[started], NULL, parallel_main, &p))
			break;
	parallel_main(&p);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	pthread_mutex_destroy(&p.mu);
	return p.rc;
}

int capture_open(struct backend *be, CUdevice dev, const struct capture_config *cfg,
		 struct capture **out)
{
	struct capture *c;
	int rc;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->be = be;
	c->dev = dev;
	if (cfg)
		c->cfg = *cfg;
	if (!c->cfg.shadow_reserve)
		c->cfg.shadow_reserve = DEFAULT_RESERVE;
	if (!c->cfg.staging_bytes)
		c->cfg.staging_bytes = DEFAULT_STAGING;
	if (!c->cfg.staging_count)
		c->cfg.staging_count = DEFAULT_STAGING_COUNT;
	if (c->cfg.staging_count < 2)
		c->cfg.staging_count = 2;
	if (!c->cfg.streams)
		c->cfg.streams = DEFAULT_STREAMS;
	if (!c->cfg.threads)
		c->cfg.threads = DEFAULT_THREADS;
	/* Checked against the chunk size at each pause and fill. */
	if (c->cfg.staging_bytes < SNAP_CHUNK_SIZE_MIN)
		c->cfg.staging_bytes = SNAP_CHUNK_SIZE_MIN;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);

	rc = capture_cu(c, be->cuCtxGetCurrent(&c->ctx), "cuCtxGetCurrent");
	if (!rc && !c->ctx)
		rc = -EINVAL;
	if (rc)
		goto out_close;
	rc = -ENOMEM;
	c->streams = calloc(c->cfg.streams, sizeof(*c->streams));
	c->stg = calloc(c->cfg.staging_count, sizeof(*c->stg));
	if (!c->streams || !c->stg)
		goto out_close;
	for (; c->nstreams < c->cfg.streams; c->nstreams++) {
		rc = capture_cu(c, be->cuStreamCreate(&c->streams[c->nstreams],
						      CU_STREAM_NON_BLOCKING), "cuStreamCreate");
		if (rc)
			goto out_close;
	}
	for (; c->nstg < c->cfg.staging_count; c->nstg++) {
		struct capture_staging *s = &c->stg[c->nstg];
		void *h;

		s->c = c;
		rc = capture_cu(c, be->cuMemHostAlloc(&h, c->cfg.staging_bytes, 0),
				"cuMemHostAlloc (staging)");
		if (rc)
			goto out_close;
		s->host = h;
		rc = capture_cu(c, be->cuEventCreate(&s->ev, CU_EVENT_DISABLE_TIMING),
				"cuEventCreate");
		if (rc) {
			c->nstg++;
			goto out_close;
		}
	}
	rc = capture_hash_open(c);
	if (rc)
		goto out_close;
	/* The snapshot's own host memory, pinned for the session's life: the
	 * figure to count when sizing a host (operations.md, "Memory pressure"). */
	pr_info("%u pinned staging buffers of %llu MiB: %llu MiB of host memory for snapshots", c->nstg,
		(unsigned long long)(c->cfg.staging_bytes >> 20),
		(unsigned long long)((c->cfg.staging_bytes * c->nstg) >> 20));
	*out = c;
	return 0;
out_close:
	capture_close(c);
	return rc;
}

static void shadow_free(struct capture *c)
{
	if (c->shadow)
		c->be->cuMemFree(c->shadow);
	c->shadow = 0;
	free(c->shadow_jobs);
	c->shadow_jobs = NULL;
	c->nshadow = 0;
}

void capture_close(struct capture *c)
{
	if (!c)
		return;
	if (c->draining)
		capture_finish(c, NULL);
	shadow_free(c);
	capture_hash_close(c);
	for (unsigned i = 0; i < c->nstreams; i++) {
		c->be->cuStreamSynchronize(c->streams[i]);
		c->be->cuStreamDestroy(c->streams[i]);
	}
	for (unsigned i = 0; i < c->nstg; i++) {
		if (c->stg[i].ev)
			c->be->cuEventDestroy(c->stg[i].ev);
		if (c->stg[i].host)
			c->be->cuMemFreeHost(c->stg[i].host);
	}
	free(c->streams);
	free(c->stg);
	free(c->hashes);
	free(c->zero);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c);
}

/* ---- device to host into the writer ---------------------------------- */

/* Writer's done callback: the chunk's bytes were consumed. */
static void staging_done(void *arg, const void *buf, int status)
{
	struct capture_staging *s = arg;
	struct capture *c = s->c;

	pthread_mutex_lock(&c->mu);
	s->pending--;
	if (status && !c->err)
		c->err = status;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void staging_wait(struct capture *c, struct capture_staging *s)
{
	pthread_mutex_lock(&c->mu);
	while (s->pending)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
}

static void staging_wait_all(struct capture *c)
{
	for (unsigned i = 0; i < c->nstg; i++) {
		staging_wait(c, &c->stg[i]);
		if (c->stg[i].copy_issued)
			c->be->cuEventSynchronize(c->stg[i].ev);
		c->stg[i].copy_issued = false;
	}
}

/* Copy jobs [first, ...) that fit into @s with one copy per run of
 * consecutive device addresses; returns the index after the last. */
static uint64_t batch_issue(struct capture *c, struct capture_staging *s, CUstream stream,
			    const struct capture_job *jobs, uint64_t first, uint64_t n, int *rc)
{
	uint64_t used = 0, i = first;

	while (i < n && used + jobs[i].len <= c->cfg.staging_bytes) {
		uint64_t run_src = jobs[i].src, run_len = 0, run_off = used;

		while (i < n && used + jobs[i].len <= c->cfg.staging_bytes &&
		       jobs[i].src == run_src + run_len) {
			run_len += jobs[i].len;
			used += jobs[i].len;
			i++;
		}
		*rc = capture_cu(c, c->be->cuMemcpyDtoHAsync(s->host + run_off, run_src, run_len,
							     stream), "cuMemcpyDtoHAsync");
		if (*rc)
			break;
		c->st.bytes_copied += run_len;
	}
	s->first = first;
	s->count = i - first;
	if (!*rc)
		*rc = capture_cu(c, c->be->cuEventRecord(s->ev, stream), "cuEventRecord");
	s->copy_issued = !*rc;
	return i;
}

/* Wait for @s's copies, then hand its chunks to the writer. */
static int batch_hand(struct capture *c, struct capture_staging *s, const struct capture_job *jobs)
{
	uint64_t off = 0;
	int rc;

	rc = capture_cu(c, c->be->cuEventSynchronize(s->ev), "cuEventSynchronize");
	s->copy_issued = false;
	if (rc)
		return rc;
	pthread_mutex_lock(&c->mu);
	s->pending = (unsigned)s->count;
	pthread_mutex_unlock(&c->mu);
	for (uint64_t k = 0; k < s->count; k++) {
		const struct capture_job *j = &jobs[s->first + k];

		rc = snap_writer_chunk_add(c->w, j->region, j->index, s->host + off, j->len,
					   j->device_hash, staging_done, s);
		if (rc) {
			/* done is not called for this chunk nor the ones not given. */
			pthread_mutex_lock(&c->mu);
			s->pending -= (unsigned)(s->count - k);
			pthread_cond_broadcast(&c->cv);
			pthread_mutex_unlock(&c->mu);
			return rc;
		}
		off += j->len;
	}
	return 0;
}

/* Stream @jobs device to host through the staging ring into the writer:
 * while batch k is handed to the writer (which may block on its queue),
 * batches k+1.. are already copying on other streams.  A buffer is reused
 * once the writer consumed every chunk of it. */
static int d2h_run(struct capture *c, const struct capture_job *jobs, uint64_t n)
{
	uint64_t issued = 0, handed = 0, i = 0;
	int rc = 0;

	while (!rc) {
		while (i < n && issued - handed < c->nstg && !rc) {
			struct capture_staging *s = &c->stg[issued % c->nstg];

			if (s->pending && issued != handed)
				break; /* hand what is copied first */
			staging_wait(c, s);
			i = batch_issue(c, s, c->streams[issued % c->nstreams], jobs, i, n, &rc);
			issued++;
		}
		if (rc || handed == issued)
			break;
		rc = batch_hand(c, &c->stg[handed % c->nstg], jobs);
		handed++;
	}
	/* The writer may still hold buffers, and copies may be in flight. */
	staging_wait_all(c);
	pthread_mutex_lock(&c->mu);
	if (!rc)
		rc = c->err;
	pthread_mutex_unlock(&c->mu);
	return rc;
}

/* ---- pause -------------------------------------------------------------- */

/* Allocate the shadow: as much of @want as the config and the device's
 * free memory allow (halving on failure).  0 if none. */
static uint64_t shadow_alloc(struct capture *c, uint64_t want)
{
	size_t free_b = 0, total_b = 0;
	uint64_t size = want;

	if (size > c->cfg.shadow_max)
		size = c->cfg.shadow_max;
	if (c->be->cuMemGetInfo(&free_b, &total_b) != CUDA_SUCCESS)
		return 0;
	if (free_b <= c->cfg.shadow_reserve)
		return 0;
	if (size > free_b - c->cfg.shadow_reserve)
		size = free_b - c->cfg.shadow_reserve;
	while (size) {
		if (c->be->cuMemAlloc(&c->shadow, size) == CUDA_SUCCESS)
			return size;
		c->shadow = 0;
		/* Free memory is a hint (fragmentation, other processes). */
		size = size / 2 >= SHADOW_MIN && size / 2 >= c->chunk_size ? size / 2 : 0;
	}
	return 0;
}

/* Copy shadow jobs' bytes into the shadow: one cuMemcpyDtoDAsync per run of
 * consecutive chunks, pieces spread over the streams; point each job's src
 * at its shadow copy. */
static int shadow_copy(struct capture *c)
{
	uint64_t off = 0, piece = 0;
	int rc = 0;

	for (uint64_t i = 0; i < c->nshadow && !rc;) {
		uint64_t run_src = c->shadow_jobs[i].src, run_len = 0, run_off = off;

		while (i < c->nshadow && c->shadow_jobs[i].src == run_src + run_len &&
		       run_len < D2D_PIECE) {
			run_len += c->shadow_jobs[i].len;
			c->shadow_jobs[i].src = c->shadow + off;
			off += c->shadow_jobs[i].len;
			i++;
		}
		rc = capture_cu(c, c->be->cuMemcpyDtoDAsync(c->shadow + run_off, run_src, run_len,
							     c->streams[piece++ % c->nstreams]),
				"cuMemcpyDtoDAsync (shadow)");
	}
	return rc;
}

static int streams_sync(struct capture *c)
{
	int rc = 0;

	for (unsigned i = 0; i < c->nstreams; i++)
		if (capture_cu(c, c->be->cuStreamSynchronize(c->streams[i]),
			       "cuStreamSynchronize") && !rc)
			rc = -EIO;
	return rc;
}

static void *drain_main(void *arg)
{
	struct capture *c = arg;
	uint64_t t0 = monotonic_ns();

	c->drain_rc = capture_cu(c, c->be->cuCtxSetCurrent(c->ctx), "cuCtxSetCurrent (drain)");
	if (!c->drain_rc)
		c->drain_rc = d2h_run(c, c->shadow_jobs, c->nshadow);
	c->st.drain_ns = monotonic_ns() - t0;
	return NULL;
}

/* Decide each chunk: zero, unchanged, or a job to copy (appended to
 * *jobs).  @ids are the regions' ids in the writer. */
static int chunks_classify(struct capture *c, const struct capture_region *regions, unsigned n,
			   const uint32_t *ids, struct capture_job *jobs, uint64_t *njobs)
{
	uint64_t slot = 0;
	int rc = 0;

	*njobs = 0;
	for (unsigned i = 0; i < n && !rc; i++) {
		uint64_t chunks = snap_writer_region_chunks(c->w, ids[i]);

		for (uint64_t k = 0; k < chunks && !rc; k++, slot++) {
			uint64_t addr = regions[i].addr + k * c->chunk_size, ph;
			uint64_t len = regions[i].size - k * c->chunk_size;

			if (len > c->chunk_size)
				len = c->chunk_size;
			c->st.chunks++;
			c->st.bytes_hashed += len;
			if (c->zero[slot]) {
				rc = snap_writer_chunk_zero(c->w, ids[i], k, c->hashes[slot]);
				c->st.chunks_zero++;
				continue;
			}
			if (snap_writer_parent_device_hash(c->w, addr, &ph) == 0 &&
			    ph == c->hashes[slot]) {
				rc = snap_writer_chunk_unchanged(c->w, ids[i], k, c->hashes[slot]);
				if (!rc)
					c->st.chunks_unchanged++;
				/* -ENOENT: the parent's chunk there has another length. */
				if (rc != -ENOENT)
					continue;
				rc = 0;
			}
			jobs[*njobs] = (struct capture_job){ .region = ids[i], .index = k,
				.len = (uint32_t)len, .src = addr, .device_hash = c->hashes[slot] };
			(*njobs)++;
		}
	}
	return rc;
}

int capture_pause(struct capture *c, struct snap_writer *w, const struct capture_region *regions,
		  unsigned n, struct capture_stats *st)
{
	uint64_t t0 = monotonic_ns(), total = 0, njobs = 0, changed = 0, fit = 0, cap = 0;
	struct capture_job *jobs = NULL;
	uint32_t *ids = NULL;
	int rc;

	if (c->draining)
		return -EBUSY;
	memset(&c->st, 0, sizeof(c->st));
	c->w = w;
	c->err = 0;
	c->chunk_size = snap_writer_chunk_size(w);
	if (c->chunk_size > c->cfg.staging_bytes) {
		pr_err("chunks of %u bytes do not fit staging buffers of %llu", c->chunk_size,
		       (unsigned long long)c->cfg.staging_bytes);
		return -EINVAL;
	}
	rc = -ENOMEM;
	ids = calloc(n ? n : 1, sizeof(*ids));
	if (!ids)
		goto out;
	for (unsigned i = 0; i < n; i++) {
		rc = snap_writer_region_add(w, regions[i].addr, regions[i].size, regions[i].flags,
					    &ids[i]);
		if (rc)
			goto out;
		total += snap_writer_region_chunks(w, ids[i]);
	}
	rc = capture_hash_regions(c, regions, n);
	c->st.hash_ns = monotonic_ns() - t0;
	if (rc)
		goto out;
	rc = -ENOMEM;
	jobs = malloc((total ? total : 1) * sizeof(*jobs));
	if (!jobs)
		goto out;
	rc = chunks_classify(c, regions, n, ids, jobs, &njobs);
	if (rc)
		goto out;

	/* The shadow takes the first chunks that fit, the rest go direct. */
	for (uint64_t i = 0; i < njobs; i++)
		changed += jobs[i].len;
	if (changed && c->cfg.shadow_max) {
		uint64_t t_alloc = monotonic_ns();

		cap = shadow_alloc(c, changed);
		c->st.shadow_alloc_ns = monotonic_ns() - t_alloc;
	}
	while (fit < njobs && c->st.shadow_bytes + jobs[fit].len <= cap)
		c->st.shadow_bytes += jobs[fit++].len;
	if (fit) {
		c->shadow_jobs = malloc(fit * sizeof(*jobs));
		if (!c->shadow_jobs) {
			rc = -ENOMEM;
			goto out;
		}
		memcpy(c->shadow_jobs, jobs, fit * sizeof(*jobs));
		c->nshadow = fit;
		c->st.chunks_shadowed = fit;
		rc = shadow_copy(c);
		if (rc)
			goto out;
	} else if (c->shadow) {
		c->be->cuMemFree(c->shadow);
		c->shadow = 0;
		c->st.shadow_bytes = 0;
	}
	/* Direct copies queue behind the shadow copies on the same streams. */
	c->st.chunks_direct = njobs - fit;
	rc = d2h_run(c, jobs + fit, njobs - fit);
out:
	/* Nothing may read guest memory once we return. */
	if (streams_sync(c) && !rc)
		rc = -EIO;
	if (!rc && c->nshadow) {
		if (pthread_create(&c->drain, NULL, drain_main, c) == 0)
			c->draining = true;
		else
			rc = d2h_run(c, c->shadow_jobs, c->nshadow); /* drain now */
	}
	if (rc || !c->draining)
		shadow_free(c);
	c->st.pause_ns = monotonic_ns() - t0;
	if (st)
		*st = c->st;
	free(jobs);
	free(ids);
	return rc;
}

int capture_finish(struct capture *c, struct capture_stats *st)
{
	int rc = 0;

	if (c->draining) {
		pthread_join(c->drain, NULL);
		c->draining = false;
		rc = c->drain_rc;
	}
	shadow_free(c);
	c->w = NULL;
	if (st) {
		st->drain_ns = c->st.drain_ns;
		st->bytes_copied = c->st.bytes_copied;
	}
	return rc;
}
