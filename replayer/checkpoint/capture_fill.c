/* Restore: snapshot chunks back into device memory.  Reader threads
 * decompress chunks into a ring of pinned staging buffers while the
 * buffers already full are copied host to device on the streams; zero
 * chunks become device memsets and never touch the host. */
#define LOG_PREFIX "capture: "
#include "capture_internal.h"
#include "monotonic.h"
#include "snap_reader.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct fill_job {
	uint32_t region;
	uint32_t len;
	uint64_t index;
	uint64_t dst;             /* device address */
	uint64_t off;             /* in its staging buffer, once released */
	struct capture_staging *s;
};

struct fill {
	struct capture *c;
	struct snap_reader *r;
	struct fill_job *jobs;
	uint64_t njobs;
	pthread_mutex_t mu;       /* guards next, released, stop, rc, staging pending */
	pthread_cond_t cv_work;   /* jobs released or stop */
	pthread_cond_t cv_done;   /* a buffer fully decoded, or an error */
	uint64_t next;            /* next job a reader thread takes */
	uint64_t released;        /* jobs [0, released) have a buffer */
	bool stop;
	int rc;
};

static void *fill_reader_main(void *arg)
{
	struct fill *f = arg;
	struct snap_reader_ctx *ctx;
	int rc = snap_reader_ctx_new(f->r, &ctx);

	for (;;) {
		struct fill_job *j;

		pthread_mutex_lock(&f->mu);
		if (rc && !f->rc)
			f->rc = rc;
		if (f->rc)
			pthread_cond_broadcast(&f->cv_done);
		while (!f->stop && !f->rc && f->next == f->released)
			pthread_cond_wait(&f->cv_work, &f->mu);
		if (f->stop || f->rc) {
			pthread_mutex_unlock(&f->mu);
			break;
		}
		j = &f->jobs[f->next++];
		pthread_mutex_unlock(&f->mu);

		rc = snap_reader_chunk_read(f->r, j->region, j->index, j->s->host + j->off, j->len,
					    ctx);

		pthread_mutex_lock(&f->mu);
		if (--j->s->pending == 0)
			pthread_cond_broadcast(&f->cv_done);
		pthread_mutex_unlock(&f->mu);
	}
	snap_reader_ctx_free(ctx);
	return NULL;
}

/* Give the next jobs that fit to staging buffer @s. */
static uint64_t fill_release(struct fill *f, struct capture_staging *s, uint64_t first)
{
	uint64_t i = first, used = 0;

	while (i < f->njobs && used + f->jobs[i].len <= f->c->cfg.staging_bytes) {
		f->jobs[i].s = s;
		f->jobs[i].off = used;
		used += f->jobs[i].len;
		i++;
	}
	s->first = first;
	s->count = i - first;
	pthread_mutex_lock(&f->mu);
	s->pending = (unsigned)s->count;
	f->released = i;
	pthread_cond_broadcast(&f->cv_work);
	pthread_mutex_unlock(&f->mu);
	return i;
}

/* Wait for @s's chunks to be decoded, then copy them up, one copy per run
 * of consecutive device addresses. */
static int fill_copy(struct fill *f, struct capture_staging *s, CUstream stream)
{
	struct capture *c = f->c;
	int rc;

	pthread_mutex_lock(&f->mu);
	while (s->pending && !f->rc)
		pthread_cond_wait(&f->cv_done, &f->mu);
	rc = f->rc;
	pthread_mutex_unlock(&f->mu);
	for (uint64_t i = s->first; i < s->first + s->count && !rc;) {
		uint64_t run_dst = f->jobs[i].dst, run_len = 0, run_off = f->jobs[i].off;

		while (i < s->first + s->count && f->jobs[i].dst == run_dst + run_len) {
			run_len += f->jobs[i].len;
			i++;
		}
		rc = capture_cu(c, c->be->cuMemcpyHtoDAsync(run_dst, s->host + run_off, run_len,
							     stream), "cuMemcpyHtoDAsync");
		c->st.bytes_copied += rc ? 0 : run_len;
	}
	if (!rc)
		rc = capture_cu(c, c->be->cuEventRecord(s->ev, stream), "cuEventRecord");
	s->copy_issued = !rc;
	return rc;
}

/* The region of @held at @reg's address, of its size and chunking, or NULL. */
static const struct snap_region *held_region(const struct snap_chunk_list *held, uint32_t chunk_size,
					     const struct snap_region *reg)
{
	const struct snap_region *r = held && held->chunk_size == chunk_size ?
				      snap_chunk_list_region_at(held, reg->addr, reg->size) : NULL;

	return r && r->chunk_count == reg->chunk_count ? r : NULL;
}

static bool chunk_held(const struct snap_region *had, const struct snap_chunk_ref *now, uint64_t k)
{
	const struct snap_chunk_ref *was = had ? &had->chunks[k] : NULL;

	if (!was || (was->flags & SNAP_CHUNK_ZERO) != (now->flags & SNAP_CHUNK_ZERO))
		return false;
	return (now->flags & SNAP_CHUNK_ZERO) || !memcmp(was->hash, now->hash, sizeof(now->hash));
}

/* Zero chunks as device memsets (runs coalesced); the others become jobs;
 * what @base says the device holds, neither. */
static int fill_plan(struct fill *f, const struct snap_chunk_list *cl, const struct capture_fill_base *base)
{
	struct capture *c = f->c;
	uint64_t total = 0;
	int rc = 0;

	for (uint64_t i = 0; i < cl->region_count; i++)
		total += cl->regions[i].chunk_count;
	f->jobs = malloc((total ? total : 1) * sizeof(*f->jobs));
	if (!f->jobs)
		return -ENOMEM;
	for (uint64_t i = 0; i < cl->region_count && !rc; i++) {
		const struct snap_region *reg = &cl->regions[i];
		const struct snap_region *had = base ? held_region(base->held, cl->chunk_size, reg) : NULL;
		uint64_t zrun = 0, zlen = 0;

		if (base && base->skip && base->skip[i])
			continue;
		c->st.fill_bytes += reg->size;
		for (uint64_t k = 0; k <= reg->chunk_count && !rc; k++) {
			bool held = k < reg->chunk_count && chunk_held(had, &reg->chunks[k], k);
			bool zero = k < reg->chunk_count && !held && reg->chunks[k].flags & SNAP_CHUNK_ZERO;
			uint32_t len = k < reg->chunk_count ?
				       snap_region_chunk_bytes(reg, cl->chunk_size, k) : 0;

			if (held)
				c->st.fill_bytes_held += len;
			if (zero) {
				if (!zlen)
					zrun = reg->addr + k * cl->chunk_size;
				zlen += len;
				continue;
			}
			if (zlen)
				rc = capture_cu(c, c->be->cuMemsetD8Async(zrun, 0, zlen, c->streams[0]),
						"cuMemsetD8Async (zero chunks)");
			zlen = 0;
			if (k == reg->chunk_count)
				break;
			if (held)
				continue;
			f->jobs[f->njobs++] = (struct fill_job){ .region = (uint32_t)i, .index = k,
				.len = len, .dst = reg->addr + k * cl->chunk_size };
		}
	}
	return rc;
}

int capture_fill(struct capture *c, struct snap_reader *r, const struct capture_fill_base *base,
		 struct capture_stats *st)
{
	const struct snap_chunk_list *cl = snap_reader_chunk_list(r);
	struct fill f = { .c = c, .r = r };
	uint64_t t0 = monotonic_ns(), issued = 0, copied = 0, i = 0;
	unsigned nthreads = 0;
	pthread_t *tids;
	int rc;

	if (c->draining)
		return -EBUSY;
	memset(&c->st, 0, sizeof(c->st));
	if (cl->chunk_size > c->cfg.staging_bytes || cl->region_count > UINT32_MAX) {
		pr_err("chunks of %u bytes do not fit staging buffers of %llu", cl->chunk_size,
		       (unsigned long long)c->cfg.staging_bytes);
		return -EINVAL;
	}
	tids = calloc(c->cfg.threads, sizeof(*tids));
	if (!tids)
		return -ENOMEM;
	pthread_mutex_init(&f.mu, NULL);
	pthread_cond_init(&f.cv_work, NULL);
	pthread_cond_init(&f.cv_done, NULL);
	for (unsigned k = 0; k < c->nstg; k++) {
		c->stg[k].pending = 0;
		c->stg[k].copy_issued = false;
	}
	rc = fill_plan(&f, cl, base);
	for (; !rc && nthreads < c->cfg.threads; nthreads++)
		if (pthread_create(&tids[nthreads], NULL, fill_reader_main, &f)) {
			rc = nthreads ? 0 : -EAGAIN;
			break;
		}
	/* Up to nstg buffers decoding ahead while the oldest full one copies. */
	while (!rc) {
		while (i < f.njobs && issued - copied < c->nstg && !rc) {
			struct capture_staging *s = &c->stg[issued % c->nstg];

			if (s->copy_issued) {
				rc = capture_cu(c, c->be->cuEventSynchronize(s->ev),
						"cuEventSynchronize");
				s->copy_issued = false;
			}
			if (!rc)
				i = fill_release(&f, s, i);
			issued++;
		}
		if (rc || copied == issued)
			break;
		rc = fill_copy(&f, &c->stg[copied % c->nstg], c->streams[copied % c->nstreams]);
		copied++;
	}
	pthread_mutex_lock(&f.mu);
	f.stop = true;
	if (rc && !f.rc)
		f.rc = rc;
	pthread_cond_broadcast(&f.cv_work);
	pthread_mutex_unlock(&f.mu);
	for (unsigned k = 0; k < nthreads; k++)
		pthread_join(tids[k], NULL);
	if (!rc)
		rc = f.rc;
	/* Copies read the staging buffers until they complete. */
	for (unsigned k = 0; k < c->nstreams; k++)
		if (capture_cu(c, c->be->cuStreamSynchronize(c->streams[k]),
			       "cuStreamSynchronize") && !rc)
			rc = -EIO;
	for (unsigned k = 0; k < c->nstg; k++) {
		c->stg[k].copy_issued = false;
		c->stg[k].pending = 0;
	}
	c->st.fill_ns = monotonic_ns() - t0;
	if (c->st.fill_ns)
		c->st.fill_bytes_per_s = (uint64_t)((double)c->st.fill_bytes * 1e9 /
						    (double)c->st.fill_ns);
	if (st)
		*st = c->st;
	pthread_cond_destroy(&f.cv_work);
	pthread_cond_destroy(&f.cv_done);
	pthread_mutex_destroy(&f.mu);
	free(f.jobs);
	free(tids);
	return rc;
}
