/* The snapshot write pipeline.
 *
 * Chunks go through a ring of queue_depth slots, each owning a compressed
 * output buffer, with three cursors: head (next slot the caller fills),
 * claim (next slot a worker takes) and tail (next slot to retire).
 * tail <= claim <= head <= tail + depth.  A worker takes a slot, hashes and
 * encodes its chunk and appends the frame itself, from the caller's buffer
 * for a raw frame, to a pack no other worker is writing: a kernel writes
 * one file under one lock, so workers that write at once write to packs of
 * their own, and no byte is copied but by the kernel.  Workers finish out
 * of order; a slot is retired in submission order, so it is reused only
 * after its bytes are written.  Memory is bounded by the ring; chunk_add
 * blocks while it is full.
 */
#define LOG_PREFIX "snapshot: "
#include "snap_writer.h"
#include "snap_internal.h"
#include "log.h"
#include "le.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

enum slot_state { SLOT_FREE, SLOT_QUEUED, SLOT_WORKING, SLOT_DONE };
enum slot_kind { KIND_SKIP, KIND_ZERO, KIND_DEDUP, KIND_NEW };

struct wslot {
	enum slot_state state;
	uint32_t region;
	uint64_t index;
	const void *buf;
	uint32_t len;
	const void *zstd;              /* the caller's zstd frame of buf, or NULL */
	uint32_t zstd_len;
	uint64_t device_hash;
	snap_chunk_done_fn done;
	void *arg;
	enum slot_kind kind;
	struct snap_frame frame;
	const void *stored;            /* the frame's stored bytes: buf, zstd or out */
	uint64_t pack_id, offset;      /* where the frame was written */
	uint8_t *out;                  /* compressBound(chunk_size) bytes */
};

/* A pack of this writer; one worker at a time appends to it, and only
 * that worker touches out, so the others read busy and closed (w->mu). */
struct wpack {
	struct snap_pack_out out;
	int busy;                      /* a worker is appending (or closing it) */
	int closed;                    /* full and fsync'ed: takes no more frames */
};

struct wregion {
	struct snap_region r;
	uint8_t *filled;               /* one byte per chunk */
};

struct parent_pos;

struct snap_writer {
	struct snap_store *s;
	char name[SNAP_NAME_MAX + 1];
	char tmpname[SNAP_NAME_MAX + 8];
	struct snap_manifest m;        /* identity fields filled at begin */
	uint32_t chunk_size;
	int lock_fd;
	int tmp_fd;

	pthread_mutex_t mu;
	pthread_cond_t cv_space, cv_work, cv_idle, cv_pack;
	struct wslot *slots;
	unsigned depth;
	uint64_t head, claim, tail;
	pthread_t *workers;
	unsigned nworkers;
	int threads_started;
	int stop;
	int error;                     /* first pipeline error, sticky */

	struct snap_chunk_map map;     /* store's chunks + this snapshot's */
	struct wregion *regions;
	uint32_t nregions, regions_cap;
	struct wpack **packs;          /* those not closed take more frames */
	unsigned npacks;
	uint64_t appended;             /* frame bytes appended, all packs */

	int has_parent;
	struct snap_chunk_list parent;
	struct parent_pos *parent_order; /* parent regions sorted by address */

	/* The progress log (cfg.progress_log), written under mu. */
	int progress_fd;               /* -1: none */
	uint64_t progress_sum;         /* the last record's */
	uint64_t progress_regions, progress_chunks;
	int chunks_begun;              /* a chunk was given: no more regions with a log */
	struct snap_buf progress_buf;
	/* Chunks found stored already by a frame of this writer that is not
	 * written yet: logged once it is (progress_waiting_settle). */
	struct progress_wait *progress_waiting;
	size_t progress_nwaiting, progress_waiting_cap;

	int journal_done;
	uint64_t journal_bytes;
	uint8_t journal_hash[SNAP_HASH_BYTES];

	struct snap_writer_stats stats;
};

struct progress_wait {
	uint32_t region;
	uint64_t index;
};

/* Record the first error of the pipeline; the caller holds w->mu. */
static void pipeline_fail_locked(struct snap_writer *w, int rc)
{
	if (!w->error)
		w->error = rc;
	pthread_cond_broadcast(&w->cv_space);
	pthread_cond_broadcast(&w->cv_idle);
	pthread_cond_broadcast(&w->cv_pack);
}

/* Append @r to the progress log; the caller holds w->mu (or is the only
 * thread).  A failure is the pipeline's. */
static int progress_append_locked(struct snap_writer *w, const struct snap_progress_record *r)
{
	int rc;

	if (w->progress_fd < 0)
		return 0;
	w->progress_buf.len = 0;
	rc = snap_progress_record_encode(r, &w->progress_sum, &w->progress_buf);
	if (!rc)
		rc = snap_io_write_all(w->s, w->progress_fd, w->progress_buf.data, w->progress_buf.len);
	if (rc) {
		snap_store_fail(w->s, rc, "snapshot %s: writing its progress log in %s: %s%s", w->name, w->s->path,
				strerror(-rc), snap_write_hint(rc));
		pipeline_fail_locked(w, rc);
	}
	return rc;
}

/* Log chunk (@region, @index) as its entry now stands; the caller holds
 * w->mu.  @pack_id and @offset: where its frame is, for one stored. */
static void progress_chunk_locked(struct snap_writer *w, uint32_t region, uint64_t index, uint64_t pack_id,
				  uint64_t offset, uint32_t stored_size)
{
	const struct snap_chunk_ref *ref = &w->regions[region].r.chunks[index];
	struct snap_progress_record r = { .type = SNAP_PROGRESS_CHUNK };

	r.chunk.region = region;
	r.chunk.index = index;
	r.chunk.device_hash = ref->device_hash;
	if (ref->flags & SNAP_CHUNK_ZERO) {
		r.chunk.kind = SNAP_PROGRESS_CHUNK_ZERO;
	} else {
		memcpy(r.chunk.hash, ref->hash, SNAP_HASH_BYTES);
		r.chunk.kind = ref->flags & SNAP_CHUNK_FROM_PARENT ? SNAP_PROGRESS_CHUNK_PARENT
								   : SNAP_PROGRESS_CHUNK_STORED;
	}
	if (r.chunk.kind == SNAP_PROGRESS_CHUNK_STORED) {
		r.chunk.pack_id = pack_id;
		r.chunk.offset = offset;
		r.chunk.stored_size = stored_size;
	}
	if (!progress_append_locked(w, &r))
		w->progress_chunks++;
}

/* A stored chunk's entry is settled: log it where its frame is, or, when
 * that frame is one this writer has not written yet (another worker
 * claimed the hash), once it is. */
static void progress_stored_locked(struct snap_writer *w, uint32_t region, uint64_t index)
{
	const struct snap_chunk_loc *loc;
	struct progress_wait *waiting;

	if (w->progress_fd < 0)
		return;
	loc = snap_chunk_map_find(&w->map, w->regions[region].r.chunks[index].hash);
	if (loc && loc->state == SNAP_LOC_WRITTEN) {
		progress_chunk_locked(w, region, index, loc->pack_id, loc->offset, loc->stored_size);
		return;
	}
	if (w->progress_nwaiting == w->progress_waiting_cap) {
		size_t cap = w->progress_waiting_cap ? 2 * w->progress_waiting_cap : 16;

		waiting = realloc(w->progress_waiting, cap * sizeof(*waiting));
		if (!waiting) {
			pipeline_fail_locked(w, -ENOMEM);
			return;
		}
		w->progress_waiting = waiting;
		w->progress_waiting_cap = cap;
	}
	w->progress_waiting[w->progress_nwaiting++] = (struct progress_wait){ region, index };
}

/* The frame of @hash was just written: the chunks that waited for it. */
static void progress_waiting_settle(struct snap_writer *w, const uint8_t hash[SNAP_HASH_BYTES])
{
	for (size_t i = 0; i < w->progress_nwaiting;) {
		struct progress_wait pw = w->progress_waiting[i];

		if (memcmp(w->regions[pw.region].r.chunks[pw.index].hash, hash, SNAP_HASH_BYTES)) {
			i++;
			continue;
		}
		progress_stored_locked(w, pw.region, pw.index);
		/* Logged now (the frame is written): drop it from the list. */
		w->progress_waiting[i] = w->progress_waiting[--w->progress_nwaiting];
	}
}

/* The log's header and BEGIN, in the new temp directory. */
static int progress_open(struct snap_writer *w)
{
	struct snap_progress_record r = { .type = SNAP_PROGRESS_BEGIN };
	uint8_t hdr[SNAP_PROGRESS_HEADER_BYTES];
	int rc;

	w->progress_fd = openat(w->tmp_fd, SNAP_PROGRESS_FILE, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC,
				0600);
	if (w->progress_fd < 0)
		return snap_store_fail(w->s, -errno, "snapshot %s: cannot create its progress log: %s", w->name,
				       strerror(errno));
	snap_progress_header_encode(hdr);
	rc = snap_io_write_all(w->s, w->progress_fd, hdr, sizeof(hdr));
	if (rc)
		return snap_store_fail(w->s, rc, "snapshot %s: writing its progress log: %s", w->name, strerror(-rc));
	r.begin = w->m;
	rc = progress_append_locked(w, &r);
	explicit_bzero(&r.begin.credential, sizeof(r.begin.credential));
	return rc;
}

static int bytes_all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t head = n < 16 ? n : 16;

	for (size_t i = 0; i < head; i++)
		if (b[i])
			return 0;
	/* b[0..16) is zero and b[i] == b[i+16] everywhere: all zero. */
	return n <= 16 || memcmp(b, b + 16, n - 16) == 0;
}

/* zstd only where it pays: four samples from across a chunk, compressed
 * together, say whether the whole is worth compressing. Incompressible
 * data (random bytes, most of a trained model's floats) is then stored raw
 * at the cost of a copy, not of a compression that saves nothing. */
#define SAMPLE_BYTES (16u << 10)
#define SAMPLES 4u
#define SAMPLE_WORTH 0.97           /* compressed / raw below which it pays */

static bool worth_compressing(ZSTD_CCtx *cctx, const uint8_t *buf, size_t len, uint8_t *scratch,
			      size_t scratch_len, int level)
{
	size_t gathered = SAMPLES * SAMPLE_BYTES, n;

	/* Small chunks are compressed whole; the scratch holds the samples and
	 * their compressed form. */
	if (len < 16 * gathered || scratch_len < gathered + ZSTD_compressBound(gathered))
		return true;
	for (unsigned i = 0; i < SAMPLES; i++)
		memcpy(scratch + i * SAMPLE_BYTES, buf + (len - SAMPLE_BYTES) / (SAMPLES - 1) * i, SAMPLE_BYTES);
	n = ZSTD_compressCCtx(cctx, scratch + gathered, scratch_len - gathered, scratch, gathered, level);
	return !ZSTD_isError(n) && (double)n < SAMPLE_WORTH * (double)gathered;
}

/* What a worker keeps from chunk to chunk. */
struct worker_ctx {
	ZSTD_CCtx *cctx;
	XXH3_state_t *content;         /* XXH3-128 of the raw bytes */
	XXH3_state_t *stored;          /* XXH3-64 of the stored bytes */
};

/* A raw frame's two sums in one pass over the chunk: each piece is summed
 * for the frame checksum while it is still in the core's cache from the
 * content hash, so the bytes cross memory once here (and once more into
 * the pack). */
#define HASH_PIECE (256u << 10)

static void raw_frame_hash(struct worker_ctx *ctx, const uint8_t *buf, uint32_t len, struct snap_frame *f)
{
	XXH3_128bits_reset(ctx->content);
	XXH3_64bits_reset(ctx->stored);
	for (uint32_t done = 0; done < len;) {
		uint32_t n = len - done < HASH_PIECE ? len - done : HASH_PIECE;

		XXH3_128bits_update(ctx->content, buf + done, n);
		XXH3_64bits_update(ctx->stored, buf + done, n);
		done += n;
	}
	snap_hash128_digest(ctx->content, f->hash);
	f->stored_xxh64 = XXH3_64bits_digest(ctx->stored);
}

static void slot_process(struct snap_writer *w, struct wslot *sl, struct worker_ctx *ctx)
{
	size_t cap = ZSTD_compressBound(w->chunk_size), n = 0;
	int level = w->s->cfg.zstd_level;
	struct snap_frame *f = &sl->frame;
	struct snap_chunk_loc *loc;
	bool raw;
	int added;

	memset(f, 0, sizeof(*f));
	if (sl->kind == KIND_SKIP)
		return;
	if (bytes_all_zero(sl->buf, sl->len)) {
		sl->kind = KIND_ZERO;
		return;
	}
	f->raw_size = sl->len;
	/* Asked before hashing, so that a raw chunk is summed once for both
	 * hashes; a chunk stored already costs the probe for nothing. */
	raw = !sl->zstd && !worth_compressing(ctx->cctx, sl->buf, sl->len, sl->out, cap, level);
	if (raw)
		raw_frame_hash(ctx, sl->buf, sl->len, f);
	else
		snap_hash128(sl->buf, sl->len, f->hash);
	/* Claim the hash so that one worker alone stores equal chunks. */
	pthread_mutex_lock(&w->mu);
	added = snap_chunk_map_insert(&w->map, f->hash, &loc);
	if (added > 0)
		loc->raw_size = sl->len;
	else if (added < 0)
		pipeline_fail_locked(w, added);
	pthread_mutex_unlock(&w->mu);
	if (added <= 0) {
		sl->kind = added == 0 ? KIND_DEDUP : KIND_SKIP;
		return;
	}
	sl->kind = KIND_NEW;
	if (sl->zstd) {
		/* Compressed already, and checked to decompress to buf. */
		sl->stored = sl->zstd;
		n = sl->zstd_len;
	} else if (!raw) {
		sl->stored = sl->out;
		n = ZSTD_compressCCtx(ctx->cctx, sl->out, cap, sl->buf, sl->len, level);
		if (ZSTD_isError(n) || n >= sl->len) {
			/* Incompressible after all: store raw rather than grow it. */
			raw = true;
			f->stored_xxh64 = XXH3_64bits(sl->buf, sl->len);
		}
	}
	if (raw) {
		/* Written from the caller's buffer: no copy. */
		sl->stored = sl->buf;
		f->codec = SNAP_CODEC_RAW;
		f->stored_size = sl->len;
		return;
	}
	f->codec = SNAP_CODEC_ZSTD;
	f->stored_size = (uint32_t)n;
	f->stored_xxh64 = XXH3_64bits(sl->stored, n);
}

/* A writer opens its k-th pack at once only after k such shares were
 * appended: a large snapshot soon has one per worker writing, a small one
 * (a migration's later rounds) one or two, not a pack per worker, each with
 * its own index and fsync at commit. */
#define PACK_SPREAD_MAX (64ull << 20)

static struct wpack *pack_open_locked(struct snap_writer *w, int *rc)
{
	struct wpack **packs, *p;

	packs = realloc(w->packs, (w->npacks + 1) * sizeof(*packs));
	if (!packs) {
		*rc = -ENOMEM;
		return NULL;
	}
	w->packs = packs;
	p = calloc(1, sizeof(*p));
	if (!p) {
		*rc = -ENOMEM;
		return NULL;
	}
	*rc = snap_pack_create(w->s, &p->out);
	if (*rc) {
		free(p);
		return NULL;
	}
	packs[w->npacks++] = p;
	return p;
}

/* An open pack no worker is writing, or a new one if the snapshot is
 * large enough for one more (else wait for one), marked busy; the caller
 * holds w->mu.  NULL with *@rc on failure, or with the pipeline's error. */
static struct wpack *pack_take_locked(struct snap_writer *w, int *rc)
{
	uint64_t spread = w->s->cfg.pack_max_bytes / 16 + 1;

	if (spread > PACK_SPREAD_MAX)
		spread = PACK_SPREAD_MAX;
	*rc = 0;
	while (!w->error) {
		struct wpack *p = NULL;
		uint64_t open = 0;

		for (unsigned i = 0; i < w->npacks; i++) {
			if (w->packs[i]->closed)
				continue;
			open++;
			if (!p && !w->packs[i]->busy)
				p = w->packs[i];
		}
		if (!p && open <= w->appended / spread)
			p = pack_open_locked(w, rc);
		if (p) {
			p->busy = 1;
			return p;
		}
		if (*rc)
			return NULL;
		pthread_cond_wait(&w->cv_pack, &w->mu);
	}
	*rc = w->error;
	return NULL;
}

/* Append a new chunk's frame to a pack of its own; outside w->mu.  Returns
 * that pack, still this worker's until pack_give_back, or NULL.  A failure
 * is the pipeline's (w->error). */
static struct wpack *slot_write(struct snap_writer *w, struct wslot *sl)
{
	struct wpack *p;
	int rc;

	pthread_mutex_lock(&w->mu);
	p = pack_take_locked(w, &rc);
	if (!p)
		pipeline_fail_locked(w, rc);
	pthread_mutex_unlock(&w->mu);
	if (!p)
		return NULL;
	rc = snap_pack_append(w->s, &p->out, &sl->frame, sl->stored, &sl->offset);
	sl->pack_id = p->out.id;
	if (rc) {
		char hex[33];
		snap_hash_hex(sl->frame.hash, hex);
		snap_store_fail(w->s, rc, "snapshot %s: writing chunk %s (region %u, chunk %llu) to "
				"%s/packs: %s%s", w->name, hex, sl->region, (unsigned long long)sl->index,
				w->s->path, strerror(-rc), snap_write_hint(rc));
		pthread_mutex_lock(&w->mu);
		pipeline_fail_locked(w, rc);
		pthread_mutex_unlock(&w->mu);
	}
	return p;
}

/* After the chunk's buffer went back: write behind, close the pack if it
 * is full (made durable by this worker while others write on), and free
 * it for the next worker. */
static void pack_give_back(struct snap_writer *w, struct wpack *p, const struct snap_frame *f, int status)
{
	int rc = status ? 0 : snap_pack_write_behind(&p->out);
	bool full = !rc && !status && p->out.bytes >= w->s->cfg.pack_max_bytes;

	if (full)
		rc = snap_pack_close(w->s, &p->out);
	pthread_mutex_lock(&w->mu);
	p->closed = full;
	/* Failed before it is free again: nobody appends after it. */
	if (rc)
		pipeline_fail_locked(w, rc);
	w->appended += SNAP_FRAME_HEADER_BYTES + f->stored_size;
	p->busy = 0;
	pthread_cond_signal(&w->cv_pack);
	pthread_mutex_unlock(&w->mu);
}

/* Record @sl's chunk in the snapshot and retire the finished slots at
 * tail, in submission order; the caller holds w->mu. */
static void slot_finish_locked(struct snap_writer *w, struct wslot *sl)
{
	struct snap_chunk_ref *ref;
	struct snap_chunk_loc *loc;

	if (w->error)
		sl->kind = KIND_SKIP;
	if (sl->kind == KIND_NEW) {
		loc = snap_chunk_map_find(&w->map, sl->frame.hash);
		loc->pack_id = sl->pack_id;
		loc->offset = sl->offset;
		loc->stored_size = sl->frame.stored_size;
		loc->state = SNAP_LOC_WRITTEN;
		w->stats.new_chunks++;
		w->stats.stored_bytes += SNAP_FRAME_HEADER_BYTES + sl->frame.stored_size;
	}
	if (sl->kind != KIND_SKIP) {
		ref = &w->regions[sl->region].r.chunks[sl->index];
		memset(ref, 0, sizeof(*ref));
		ref->device_hash = sl->device_hash;
		if (sl->kind == KIND_ZERO) {
			ref->flags = SNAP_CHUNK_ZERO;
			w->stats.zero_chunks++;
		} else {
			memcpy(ref->hash, sl->frame.hash, SNAP_HASH_BYTES);
		}
		if (sl->kind == KIND_DEDUP)
			w->stats.dedup_chunks++;
		w->stats.raw_bytes += sl->len;
		if (sl->kind == KIND_NEW) {
			progress_chunk_locked(w, sl->region, sl->index, sl->pack_id, sl->offset, sl->frame.stored_size);
			progress_waiting_settle(w, sl->frame.hash);
		} else if (sl->kind == KIND_DEDUP) {
			progress_stored_locked(w, sl->region, sl->index);
		} else {
			progress_chunk_locked(w, sl->region, sl->index, 0, 0, 0);
		}
	}
	sl->state = SLOT_DONE;
	while (w->tail != w->claim && w->slots[w->tail % w->depth].state == SLOT_DONE) {
		w->slots[w->tail % w->depth].state = SLOT_FREE;
		w->tail++;
	}
	pthread_cond_broadcast(&w->cv_space);
	pthread_cond_broadcast(&w->cv_idle);
}

static void *worker_main(void *arg)
{
	struct snap_writer *w = arg;
	struct worker_ctx ctx = {
		.cctx = ZSTD_createCCtx(),
		.content = XXH3_createState(),
		.stored = XXH3_createState(),
	};
	bool ready = ctx.cctx && ctx.content && ctx.stored;

	for (;;) {
		struct wpack *p = NULL;
		struct wslot *sl;
		int status;

		pthread_mutex_lock(&w->mu);
		while (w->claim == w->head && !w->stop)
			pthread_cond_wait(&w->cv_work, &w->mu);
		if (w->claim == w->head) {
			pthread_mutex_unlock(&w->mu);
			break;
		}
		sl = &w->slots[w->claim++ % w->depth];
		sl->state = SLOT_WORKING;
		sl->kind = w->error || !ready ? KIND_SKIP : KIND_NEW;
		if (!ready)
			pipeline_fail_locked(w, -ENOMEM);
		pthread_mutex_unlock(&w->mu);

		slot_process(w, sl, &ctx);
		if (sl->kind == KIND_NEW)
			p = slot_write(w, sl);

		pthread_mutex_lock(&w->mu);
		status = w->error;
		pthread_mutex_unlock(&w->mu);
		/* The bytes are hashed and written: the caller's buffer is free. */
		if (sl->done)
			sl->done(sl->arg, sl->buf, status);
		if (p)
			pack_give_back(w, p, &sl->frame, status);

		pthread_mutex_lock(&w->mu);
		slot_finish_locked(w, sl);
		pthread_mutex_unlock(&w->mu);
	}
	ZSTD_freeCCtx(ctx.cctx);
	XXH3_freeState(ctx.content);
	XXH3_freeState(ctx.stored);
	return NULL;
}

static void threads_stop(struct snap_writer *w)
{
	if (!w->threads_started)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_broadcast(&w->cv_work);
	pthread_mutex_unlock(&w->mu);
	for (unsigned i = 0; i < w->nworkers; i++)
		pthread_join(w->workers[i], NULL);
	w->threads_started = 0;
}

static void writer_free(struct snap_writer *w, int remove_tmp)
{
	threads_stop(w);
	for (unsigned i = 0; i < w->npacks; i++) {
		snap_pack_discard(w->s, &w->packs[i]->out); /* keeps sealed packs for gc */
		free(w->packs[i]);
	}
	free(w->packs);
	if (w->progress_fd >= 0)
		close(w->progress_fd);
	snap_buf_free(&w->progress_buf);
	free(w->progress_waiting);
	if (w->tmp_fd >= 0)
		close(w->tmp_fd);
	if (remove_tmp && w->tmpname[0]) {
		snap_io_dir_remove(w->s->snaps_fd, w->tmpname);
		snap_io_fsync_dir(w->s->snaps_fd);
	}
	for (unsigned i = 0; w->slots && i < w->depth; i++)
		free(w->slots[i].out);
	free(w->slots);
	free(w->workers);
	for (uint32_t i = 0; i < w->nregions; i++) {
		free(w->regions[i].r.chunks);
		free(w->regions[i].filled);
	}
	free(w->regions);
	snap_chunk_map_free(&w->map);
	snap_chunk_list_free(&w->parent);
	free(w->parent_order);
	if (w->lock_fd >= 0)
		close(w->lock_fd);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv_space);
	pthread_cond_destroy(&w->cv_work);
	pthread_cond_destroy(&w->cv_idle);
	pthread_cond_destroy(&w->cv_pack);
	free(w);
}

struct parent_pos {
	uint64_t addr;
	uint32_t region;
};

static int parent_pos_cmp(const void *a, const void *b)
{
	const struct parent_pos *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int parent_load(struct snap_writer *w, const char *parent)
{
	struct snap_manifest pm;
	int rc;

	rc = snap_store_snapshot_load(w->s, parent, &pm, &w->parent);
	if (rc)
		return rc;
	w->has_parent = 1;
	if (pm.chunk_size != w->chunk_size)
		return snap_store_fail(w->s, -EINVAL, "snapshot %s: chunk size %u differs from "
				       "parent %s's %u", w->name, w->chunk_size, parent,
				       pm.chunk_size);
	w->parent_order = malloc((w->parent.region_count + 1) * sizeof(*w->parent_order));
	if (!w->parent_order)
		return -ENOMEM;
	for (uint32_t i = 0; i < w->parent.region_count; i++) {
		w->parent_order[i].addr = w->parent.regions[i].addr;
		w->parent_order[i].region = i;
	}
	qsort(w->parent_order, w->parent.region_count, sizeof(*w->parent_order), parent_pos_cmp);
	return 0;
}

int snap_writer_begin(struct snap_store *s, const struct snap_writer_config *cfg,
		      struct snap_writer **out)
{
	struct snap_writer *w;
	struct stat st;
	int rc;

	*out = NULL;
	if (!cfg || !snap_name_valid(cfg->name))
		return snap_store_fail(s, -EINVAL, "invalid snapshot name \"%s\": use 1-255 of "
				       "A-Z a-z 0-9 . _ -, not starting with '.'",
				       cfg && cfg->name ? cfg->name : "");
	if ((cfg->session_id && strlen(cfg->session_id) > SNAP_NAME_MAX) ||
	    (cfg->device_name && strlen(cfg->device_name) > SNAP_NAME_MAX))
		return snap_store_fail(s, -ENAMETOOLONG, "session id or device name too long");
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->s = s;
	w->lock_fd = w->tmp_fd = w->progress_fd = -1;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv_space, NULL);
	pthread_cond_init(&w->cv_work, NULL);
	pthread_cond_init(&w->cv_idle, NULL);
	pthread_cond_init(&w->cv_pack, NULL);
	snap_chunk_map_init(&w->map);
	snprintf(w->name, sizeof(w->name), "%s", cfg->name);
	w->chunk_size = cfg->chunk_size ? cfg->chunk_size : s->cfg.chunk_size;
	rc = -EINVAL;
	if (w->chunk_size < SNAP_CHUNK_SIZE_MIN || w->chunk_size > SNAP_CHUNK_SIZE_MAX)
		goto out_free;

	w->m.created_ns = snap_now_ns();
	w->m.chunk_size = w->chunk_size;
	w->m.driver_version = cfg->driver_version;
	memcpy(w->m.device_uuid, cfg->device_uuid, 16);
	w->m.codec = SNAP_CODEC_ZSTD;
	w->m.codec_level = s->cfg.zstd_level;
	snprintf(w->m.name, sizeof(w->m.name), "%s", cfg->name);
	snprintf(w->m.parent, sizeof(w->m.parent), "%s", cfg->parent ? cfg->parent : "");
	snprintf(w->m.session_id, sizeof(w->m.session_id), "%s",
		 cfg->session_id ? cfg->session_id : "");
	snprintf(w->m.device_name, sizeof(w->m.device_name), "%s",
		 cfg->device_name ? cfg->device_name : "");
	w->m.auth_flags = cfg->auth_flags & SNAP_AUTH_KNOWN;
	w->m.owner_uid = cfg->owner_uid;
	memcpy(w->m.credential, cfg->credential, sizeof(w->m.credential));

	rc = snap_store_lock(s, 0, 0);
	if (rc < 0)
		goto out_free;
	w->lock_fd = rc;
	if (fstatat(s->snaps_fd, w->name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		rc = snap_store_fail(s, -EEXIST, "snapshot %s already exists; pick another name "
				     "or remove it first", w->name);
		goto out_free;
	}
	if (w->m.parent[0]) {
		rc = parent_load(w, w->m.parent);
		if (rc)
			goto out_free;
	}
	snprintf(w->tmpname, sizeof(w->tmpname), SNAP_TMP_PREFIX "%s", w->name);
	/* A writer of this name that died left its directory: not ours to
	 * keep, and no reason to refuse the name. */
	if (snap_store_tmp_abandoned(s, w->tmpname) == 1) {
		pr_info("%s: removing leftover %s", s->path, w->tmpname);
		snap_io_dir_remove(s->snaps_fd, w->tmpname);
	}
	if (mkdirat(s->snaps_fd, w->tmpname, 0755) < 0) {
		rc = snap_store_fail(s, -errno, "snapshot %s: cannot create %s: %s%s", w->name,
				     w->tmpname, strerror(errno),
				     errno == EEXIST ? " (another writer of that name runs)" : "");
		w->tmpname[0] = '\0'; /* not ours to remove */
		goto out_free;
	}
	w->tmp_fd = openat(s->snaps_fd, w->tmpname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w->tmp_fd < 0) {
		rc = -errno;
		goto out_free;
	}
	/* Held until the writer ends: a directory nobody holds is a dead
	 * writer's (snap_store_tmp_abandoned). */
	if (flock(w->tmp_fd, LOCK_EX | LOCK_NB) < 0) {
		rc = snap_store_fail(s, -EBUSY, "snapshot %s: another writer of that name runs", w->name);
		w->tmpname[0] = '\0';
		goto out_free;
	}
	if (cfg->progress_log) {
		rc = progress_open(w);
		if (rc)
			goto out_free;
	}
	rc = snap_store_map_load(s, &w->map);
	if (rc) {
		snap_store_fail(s, rc, "%s: cannot load pack indexes: %s", s->path, strerror(-rc));
		goto out_free;
	}

	rc = -ENOMEM;
	w->depth = s->cfg.queue_depth;
	w->slots = calloc(w->depth, sizeof(*w->slots));
	w->nworkers = s->cfg.workers;
	w->workers = calloc(w->nworkers, sizeof(*w->workers));
	if (!w->slots || !w->workers)
		goto out_free;
	for (unsigned i = 0; i < w->depth; i++) {
		w->slots[i].out = malloc(ZSTD_compressBound(w->chunk_size));
		if (!w->slots[i].out)
			goto out_free;
	}
	w->threads_started = 1;
	for (unsigned i = 0; i < w->nworkers; i++) {
		if (pthread_create(&w->workers[i], NULL, worker_main, w) != 0) {
			w->nworkers = i;
			goto out_free;
		}
	}
	*out = w;
	return 0;
out_free:
	writer_free(w, 1);
	return rc;
}

int snap_writer_region_add(struct snap_writer *w, uint64_t addr, uint64_t size,
			   uint32_t flags, uint32_t *region)
{
	struct wregion *r;
	uint64_t chunks;

	if (size == 0 || addr + size < addr)
		return snap_store_fail(w->s, -EINVAL, "region 0x%llx+%llu: empty or wraps",
				       (unsigned long long)addr, (unsigned long long)size);
	chunks = size / w->chunk_size + (size % w->chunk_size != 0);
	pthread_mutex_lock(&w->mu);
	if (w->progress_fd >= 0 && w->chunks_begun) {
		pthread_mutex_unlock(&w->mu);
		return snap_store_fail(w->s, -EPROTO, "snapshot %s: a region after its first chunk (its progress "
				       "log announces every region first)", w->name);
	}
	if (w->nregions == UINT32_MAX) {
		pthread_mutex_unlock(&w->mu);
		return -EOVERFLOW;
	}
	if (w->nregions == w->regions_cap) {
		uint32_t cap = w->regions_cap ? w->regions_cap * 2 : 16;
		r = realloc(w->regions, cap * sizeof(*r));
		if (!r) {
			pthread_mutex_unlock(&w->mu);
			return -ENOMEM;
		}
		w->regions = r;
		w->regions_cap = cap;
	}
	r = &w->regions[w->nregions];
	memset(r, 0, sizeof(*r));
	r->r.addr = addr;
	r->r.size = size;
	r->r.flags = flags;
	r->r.chunk_count = chunks;
	r->r.chunks = calloc(chunks, sizeof(*r->r.chunks));
	r->filled = calloc(chunks, 1);
	if (!r->r.chunks || !r->filled) {
		free(r->r.chunks);
		free(r->filled);
		pthread_mutex_unlock(&w->mu);
		return -ENOMEM;
	}
	*region = w->nregions++;
	{
		struct snap_progress_record rec = { .type = SNAP_PROGRESS_REGION, .region = r->r };
		int rc = progress_append_locked(w, &rec);

		w->progress_regions++;
		pthread_mutex_unlock(&w->mu);
		return rc;
	}
}

uint32_t snap_writer_chunk_size(const struct snap_writer *w)
{
	return w->chunk_size;
}

uint64_t snap_writer_region_chunks(const struct snap_writer *w, uint32_t region)
{
	return region < w->nregions ? w->regions[region].r.chunk_count : 0;
}

uint32_t snap_writer_region_chunk_bytes(const struct snap_writer *w, uint32_t region, uint64_t index)
{
	if (region >= w->nregions || index >= w->regions[region].r.chunk_count)
		return 0;
	return snap_region_chunk_bytes(&w->regions[region].r, w->chunk_size, index);
}

/* Check and mark chunk (@region, @index) as given; caller holds w->mu. */
static int chunk_claim_locked(struct snap_writer *w, uint32_t region, uint64_t index, uint32_t *len)
{
	struct wregion *r;

	if (region >= w->nregions)
		return snap_store_fail(w->s, -EINVAL, "no region %u", region);
	r = &w->regions[region];
	if (index >= r->r.chunk_count)
		return snap_store_fail(w->s, -EINVAL, "region %u has no chunk %llu", region,
				       (unsigned long long)index);
	if (r->filled[index])
		return snap_store_fail(w->s, -EEXIST, "region %u chunk %llu given twice", region,
				       (unsigned long long)index);
	*len = snap_region_chunk_bytes(&r->r, w->chunk_size, index);
	w->chunks_begun = 1;
	return 0;
}

static int chunk_queue(struct snap_writer *w, uint32_t region, uint64_t index, const void *buf, uint32_t len,
		       const void *zstd, uint32_t zstd_len, uint64_t device_hash, snap_chunk_done_fn done, void *arg)
{
	struct wslot *sl;
	uint32_t want;
	int rc;

	pthread_mutex_lock(&w->mu);
	rc = w->error;
	if (!rc)
		rc = chunk_claim_locked(w, region, index, &want);
	if (!rc && (len != want || !buf))
		rc = snap_store_fail(w->s, -EINVAL, "region %u chunk %llu: %u bytes given, "
				     "%u expected", region, (unsigned long long)index, len, want);
	while (!rc && w->head - w->tail >= w->depth && !w->error)
		pthread_cond_wait(&w->cv_space, &w->mu);
	if (!rc)
		rc = w->error;
	if (rc) {
		pthread_mutex_unlock(&w->mu);
		return rc;
	}
	w->regions[region].filled[index] = 1;
	sl = &w->slots[w->head % w->depth];
	sl->state = SLOT_QUEUED;
	sl->region = region;
	sl->index = index;
	sl->buf = buf;
	sl->len = len;
	sl->zstd = zstd;
	sl->zstd_len = zstd_len;
	sl->device_hash = device_hash;
	sl->done = done;
	sl->arg = arg;
	w->head++;
	w->stats.chunks++;
	pthread_cond_signal(&w->cv_work);
	pthread_mutex_unlock(&w->mu);
	return 0;
}

int snap_writer_chunk_add(struct snap_writer *w, uint32_t region, uint64_t index,
			  const void *buf, uint32_t len, uint64_t device_hash,
			  snap_chunk_done_fn done, void *arg)
{
	return chunk_queue(w, region, index, buf, len, NULL, 0, device_hash, done, arg);
}

int snap_writer_chunk_add_zstd(struct snap_writer *w, uint32_t region, uint64_t index, const void *buf,
			       uint32_t len, const void *zstd, uint32_t zstd_len, uint64_t device_hash,
			       snap_chunk_done_fn done, void *arg)
{
	if (!zstd || !zstd_len || zstd_len >= len)
		return snap_store_fail(w->s, -EINVAL, "region %u chunk %llu: a compressed form of %u bytes for "
				       "%u", region, (unsigned long long)index, zstd_len, len);
	return chunk_queue(w, region, index, buf, len, zstd, zstd_len, device_hash, done, arg);
}

/* The parent's entry for the chunk at @addr of @len bytes, or NULL. */
static const struct snap_chunk_ref *parent_chunk(const struct snap_writer *w, uint64_t addr,
						 uint32_t len)
{
	uint64_t lo = 0, hi = w->parent.region_count;
	const struct snap_region *p;
	uint64_t index;

	if (!w->has_parent)
		return NULL;
	/* Last parent region starting at or below addr. */
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;
		if (w->parent_order[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	p = &w->parent.regions[w->parent_order[lo - 1].region];
	if (addr - p->addr >= p->size || (addr - p->addr) % w->chunk_size)
		return NULL;
	index = (addr - p->addr) / w->chunk_size;
	if (len && snap_region_chunk_bytes(p, w->chunk_size, index) != len)
		return NULL;
	return &p->chunks[index];
}

int snap_writer_parent_device_hash(const struct snap_writer *w, uint64_t addr, uint64_t *out)
{
	const struct snap_chunk_ref *ref = parent_chunk(w, addr, 0);

	if (!ref)
		return -ENOENT;
	*out = ref->device_hash;
	return 0;
}

int snap_writer_chunk_unchanged(struct snap_writer *w, uint32_t region, uint64_t index,
				uint64_t device_hash)
{
	const struct snap_chunk_ref *pref;
	struct snap_chunk_ref *ref;
	uint32_t len;
	int rc;

	pthread_mutex_lock(&w->mu);
	rc = w->error;
	if (!rc)
		rc = chunk_claim_locked(w, region, index, &len);
	if (rc)
		goto out_unlock;
	pref = parent_chunk(w, w->regions[region].r.addr + index * w->chunk_size, len);
	if (!pref) {
		rc = snap_store_fail(w->s, -ENOENT, "snapshot %s: region %u chunk %llu: parent "
				     "has no chunk of %u bytes at that address", w->name, region,
				     (unsigned long long)index, len);
		goto out_unlock;
	}
	if (pref->device_hash != device_hash) {
		rc = snap_store_fail(w->s, -ESTALE, "snapshot %s: region %u chunk %llu: device "
				     "hash differs from the parent's", w->name, region,
				     (unsigned long long)index);
		goto out_unlock;
	}
	ref = &w->regions[region].r.chunks[index];
	*ref = *pref;
	ref->flags |= SNAP_CHUNK_FROM_PARENT;
	w->regions[region].filled[index] = 1;
	w->stats.chunks++;
	w->stats.unchanged_chunks++;
	if (ref->flags & SNAP_CHUNK_ZERO)
		w->stats.zero_chunks++;
	progress_chunk_locked(w, region, index, 0, 0, 0);
out_unlock:
	pthread_mutex_unlock(&w->mu);
	return rc;
}

int snap_writer_chunk_zero(struct snap_writer *w, uint32_t region, uint64_t index,
			   uint64_t device_hash)
{
	struct snap_chunk_ref *ref;
	uint32_t len;
	int rc;

	pthread_mutex_lock(&w->mu);
	rc = w->error;
	if (!rc)
		rc = chunk_claim_locked(w, region, index, &len);
	if (!rc) {
		ref = &w->regions[region].r.chunks[index];
		memset(ref, 0, sizeof(*ref));
		ref->flags = SNAP_CHUNK_ZERO;
		ref->device_hash = device_hash;
		w->regions[region].filled[index] = 1;
		w->stats.chunks++;
		w->stats.zero_chunks++;
		progress_chunk_locked(w, region, index, 0, 0, 0);
	}
	pthread_mutex_unlock(&w->mu);
	return rc;
}

int snap_writer_journal_set(struct snap_writer *w, int fd)
{
	uint8_t hdr[SNAP_JOURNAL_HEADER_BYTES];
	XXH3_state_t *st = NULL;
	uint64_t off = 0;
	uint8_t *buf = NULL;
	int out, rc;

	if (w->journal_done)
		return snap_store_fail(w->s, -EEXIST, "snapshot %s: journal given twice", w->name);
	out = openat(w->tmp_fd, SNAP_JOURNAL_FILE, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (out < 0)
		return snap_store_fail(w->s, -errno, "snapshot %s: journal: %s", w->name,
				       strerror(errno));
	rc = -ENOMEM;
	buf = malloc(1 << 20);
	st = XXH3_createState();
	if (!buf || !st)
		goto out_close;
	XXH3_128bits_reset(st);
	snap_journal_header_encode(hdr);
	XXH3_128bits_update(st, hdr, sizeof(hdr));
	rc = snap_io_write_all(w->s, out, hdr, sizeof(hdr));
	while (!rc) {
		ssize_t n = pread(fd, buf, 1 << 20, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = snap_store_fail(w->s, -errno, "snapshot %s: cannot read the journal "
					     "it was given: %s", w->name, strerror(errno));
			goto out_close;
		}
		if (n == 0)
			break;
		XXH3_128bits_update(st, buf, (size_t)n);
		rc = snap_io_write_all(w->s, out, buf, (size_t)n);
		off += (uint64_t)n;
	}
	if (!rc && fsync(out) < 0)
		rc = -errno;
	if (rc)
		snap_store_fail(w->s, rc, "snapshot %s: writing the journal copy in %s: %s%s",
				w->name, w->s->path, strerror(-rc), snap_write_hint(rc));
	if (!rc) {
		snap_hash128_digest(st, w->journal_hash);
		w->journal_bytes = off + sizeof(hdr);
		w->journal_done = 1;
	}
out_close:
	XXH3_freeState(st);
	free(buf);
	close(out);
	if (rc)
		unlinkat(w->tmp_fd, SNAP_JOURNAL_FILE, 0);
	return rc;
}

int snap_writer_flush(struct snap_writer *w)
{
	int rc;

	pthread_mutex_lock(&w->mu);
	while (w->tail != w->head && !w->error)
		pthread_cond_wait(&w->cv_idle, &w->mu);
	rc = w->error;
	pthread_mutex_unlock(&w->mu);
	return rc;
}

/* Every entry given, stored sizes filled from the chunk map. */
static int entries_finish(struct snap_writer *w)
{
	for (uint32_t i = 0; i < w->nregions; i++) {
		struct wregion *r = &w->regions[i];
		for (uint64_t c = 0; c < r->r.chunk_count; c++) {
			struct snap_chunk_ref *ref = &r->r.chunks[c];
			struct snap_chunk_loc *loc;
			char hex[33];

			if (!r->filled[c])
				return snap_store_fail(w->s, -EINVAL, "snapshot %s: region %u "
						       "(0x%llx) chunk %llu was never given", w->name,
						       i, (unsigned long long)r->r.addr,
						       (unsigned long long)c);
			w->m.chunk_count++;
			if (ref->flags & SNAP_CHUNK_ZERO) {
				w->m.zero_chunks++;
				continue;
			}
			loc = snap_chunk_map_find(&w->map, ref->hash);
			if (!loc || loc->state != SNAP_LOC_WRITTEN) {
				snap_hash_hex(ref->hash, hex);
				return snap_store_fail(w->s, -EBADMSG, "snapshot %s: region %u chunk "
						       "%llu: chunk %s is in no pack of the store",
						       w->name, i, (unsigned long long)c, hex);
			}
			ref->stored_size = loc->stored_size;
			w->m.ref_stored_bytes += loc->stored_size;
		}
		w->m.logical_bytes += r->r.size;
	}
	w->m.region_count = w->nregions;
	w->m.new_chunks = w->stats.new_chunks;
	w->m.new_stored_bytes = w->stats.stored_bytes;
	return 0;
}

static int snapshot_files_write(struct snap_writer *w)
{
	struct snap_chunk_list cl = { .chunk_size = w->chunk_size };
	struct snap_buf chunks = {0}, man = {0};
	int rc;

	cl.region_count = w->nregions;
	cl.chunk_count = w->m.chunk_count;
	cl.regions = malloc((w->nregions + 1) * sizeof(*cl.regions));
	if (!cl.regions)
		return -ENOMEM;
	for (uint32_t i = 0; i < w->nregions; i++)
		cl.regions[i] = w->regions[i].r;
	rc = snap_chunk_list_encode(&cl, &chunks);
	free(cl.regions);
	if (rc)
		goto out_free;
	snap_hash128(chunks.data, chunks.len, w->m.chunks_hash);
	w->m.chunks_bytes = chunks.len;
	w->m.journal_bytes = w->journal_bytes;
	memcpy(w->m.journal_hash, w->journal_hash, SNAP_HASH_BYTES);
	rc = snap_manifest_encode(&w->m, &man);
	if (rc)
		goto out_free;
	rc = snap_io_file_write(w->s, w->tmp_fd, SNAP_CHUNKS_FILE, chunks.data, chunks.len);
	if (!rc)
		rc = snap_io_file_write(w->s, w->tmp_fd, SNAP_MANIFEST_FILE, man.data, man.len);
	if (!rc)
		rc = snap_io_fsync_dir(w->tmp_fd);
out_free:
	snap_buf_free(&chunks);
	snap_buf_free(&man);
	return rc;
}

/* The log's COMMIT, once the snapshot's files are written; the log goes
 * before the rename: a committed snapshot has none. */
static int progress_close(struct snap_writer *w)
{
	struct snap_progress_record r = { .type = SNAP_PROGRESS_COMMIT };
	int rc;

	if (w->progress_fd < 0)
		return 0;
	r.commit_regions = w->progress_regions;
	r.commit_chunks = w->progress_chunks;
	rc = progress_append_locked(w, &r);
	close(w->progress_fd);
	w->progress_fd = -1;
	if (!rc && unlinkat(w->tmp_fd, SNAP_PROGRESS_FILE, 0) < 0)
		rc = -errno;
	return rc;
}

int snap_writer_commit(struct snap_writer *w, struct snap_writer_stats *stats)
{
	int rc;

	rc = snap_writer_flush(w);
	threads_stop(w);
	if (rc)
		goto out_fail;
	if (!w->journal_done) {
		rc = snap_store_fail(w->s, -EINVAL, "snapshot %s: no journal given", w->name);
		goto out_fail;
	}
	rc = entries_finish(w);
	if (rc)
		goto out_fail;
	/* Packs before the snapshot: a committed snapshot never names a chunk
	 * that is not durable and indexed. */
	for (unsigned i = 0; i < w->npacks && !rc; i++)
		rc = snap_pack_seal(w->s, &w->packs[i]->out);
	if (!rc)
		rc = snap_io_fsync_dir(w->s->packs_fd);
	if (!rc)
		rc = snapshot_files_write(w);
	if (!rc)
		rc = progress_close(w);
	if (rc) {
		snap_store_fail(w->s, rc, "snapshot %s: cannot make it durable in %s: %s%s",
				w->name, w->s->path, strerror(-rc), snap_write_hint(rc));
		goto out_fail;
	}
	if (renameat2(w->s->snaps_fd, w->tmpname, w->s->snaps_fd, w->name, RENAME_NOREPLACE) < 0) {
		rc = snap_store_fail(w->s, -errno, "snapshot %s: cannot commit: %s", w->name,
				     strerror(errno));
		goto out_fail;
	}
	w->tmpname[0] = '\0';
	rc = snap_io_fsync_dir(w->s->snaps_fd);
	if (rc) {
		/* The rename may not be durable yet; the next open sees either. */
		snap_store_fail(w->s, rc, "snapshot %s: fsync of %s/snaps failed: %s", w->name,
				w->s->path, strerror(-rc));
	}
	if (stats)
		*stats = w->stats;
	writer_free(w, 0);
	return rc;
out_fail:
	/* Sealed packs stay for gc: a writer that began since may use them. */
	writer_free(w, 1);
	return rc;
}

void snap_writer_abort(struct snap_writer *w)
{
	if (w)
		writer_free(w, 1);
}
