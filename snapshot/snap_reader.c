/* Reading snapshots: chunk reads, parallel region reads for restore, the
 * journal copy, and snap_store_verify (a reader that reads everything). */
#define LOG_PREFIX "snapshot: "
#include "snap_reader.h"
#include "snap_internal.h"
#include "log.h"
#include "le.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

struct pack_fd {
	uint64_t id;
	int fd;
};

struct snap_reader {
	struct snap_store *s;
	int lock_fd;
	int dir_fd;                    /* snaps/NAME */
	struct snap_manifest m;
	struct snap_chunk_list cl;
	struct snap_chunk_map map;     /* read-only after open */
	pthread_mutex_t mu;            /* guards packs */
	struct pack_fd *packs;
	unsigned npacks, packs_cap;
};

int snap_reader_open(struct snap_store *s, const char *name, struct snap_reader **out)
{
	struct snap_reader *r;
	int rc;

	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->s = s;
	r->dir_fd = -1;
	pthread_mutex_init(&r->mu, NULL);
	snap_chunk_map_init(&r->map);
	rc = snap_store_lock(s, 0, 0);
	if (rc < 0) {
		r->lock_fd = -1;
		goto out_close;
	}
	r->lock_fd = rc;
	rc = snap_store_snapshot_load(s, name, &r->m, &r->cl);
	if (rc)
		goto out_close;
	r->dir_fd = openat(s->snaps_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r->dir_fd < 0) {
		rc = -errno;
		goto out_close;
	}
	rc = snap_store_map_load(s, &r->map);
	if (rc) {
		snap_store_fail(s, rc, "%s: cannot load pack indexes: %s", s->path, strerror(-rc));
		goto out_close;
	}
	*out = r;
	return 0;
out_close:
	snap_reader_close(r);
	return rc;
}

void snap_reader_close(struct snap_reader *r)
{
	if (!r)
		return;
	for (unsigned i = 0; i < r->npacks; i++)
		close(r->packs[i].fd);
	free(r->packs);
	snap_chunk_map_free(&r->map);
	snap_chunk_list_free(&r->cl);
	if (r->dir_fd >= 0)
		close(r->dir_fd);
	if (r->lock_fd >= 0)
		close(r->lock_fd);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

const struct snap_manifest *snap_reader_manifest(const struct snap_reader *r)
{
	return &r->m;
}

const struct snap_chunk_list *snap_reader_chunk_list(const struct snap_reader *r)
{
	return &r->cl;
}

static int pack_fd_get(struct snap_reader *r, uint64_t id)
{
	char name[64];
	int fd = -1;

	pthread_mutex_lock(&r->mu);
	for (unsigned i = 0; i < r->npacks; i++) {
		if (r->packs[i].id == id) {
			fd = r->packs[i].fd;
			goto out_unlock;
		}
	}
	if (r->npacks == r->packs_cap) {
		unsigned cap = r->packs_cap ? r->packs_cap * 2 : 8;
		struct pack_fd *p = realloc(r->packs, cap * sizeof(*p));
		if (!p) {
			fd = -ENOMEM;
			goto out_unlock;
		}
		r->packs = p;
		r->packs_cap = cap;
	}
	snap_pack_name(name, sizeof(name), id, "pack");
	fd = openat(r->s->packs_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fd = -errno;
		goto out_unlock;
	}
	r->packs[r->npacks].id = id;
	r->packs[r->npacks++].fd = fd;
out_unlock:
	pthread_mutex_unlock(&r->mu);
	return fd;
}

static int chunk_fail(struct snap_reader *r, uint32_t region, uint64_t index, int rc, const char *what)
{
	const struct snap_region *reg = &r->cl.regions[region];
	char hex[33];

	snap_hash_hex(reg->chunks[index].hash, hex);
	return snap_store_fail(r->s, rc, "snapshot %s: region %u (addr 0x%llx) chunk %llu "
			       "(offset 0x%llx): chunk %s %s%s%s", r->m.name, region,
			       (unsigned long long)reg->addr, (unsigned long long)index,
			       (unsigned long long)index * r->cl.chunk_size, hex, what,
			       rc == -EBADMSG ? "" : ": ", rc == -EBADMSG ? "" : strerror(-rc));
}

/* Find a non-zero chunk's pack entry and open its pack. */
static int chunk_locate(struct snap_reader *r, uint32_t region, uint64_t index, size_t stored_cap,
			const struct snap_chunk_loc **out, int *fd_out)
{
	const struct snap_chunk_ref *ref = &r->cl.regions[region].chunks[index];
	uint32_t len = snap_region_chunk_bytes(&r->cl.regions[region], r->cl.chunk_size, index);
	const struct snap_chunk_loc *loc;
	char pack[64], missing[128];
	int fd;

	loc = snap_chunk_map_find(&r->map, ref->hash);
	if (!loc)
		return chunk_fail(r, region, index, -EBADMSG,
				  "is in no pack of the store (lost or its index is damaged)");
	if (loc->raw_size != len || loc->stored_size != ref->stored_size || loc->stored_size > stored_cap)
		return chunk_fail(r, region, index, -EBADMSG,
				  "has a size in the pack index that disagrees with the snapshot");
	fd = pack_fd_get(r, loc->pack_id);
	if (fd == -ENOENT) {
		/* Its index is there and the pack is not: someone deleted it. */
		snap_pack_name(pack, sizeof(pack), loc->pack_id, "pack");
		snprintf(missing, sizeof(missing), "cannot be read: pack missing: packs/%s", pack);
		return chunk_fail(r, region, index, -EBADMSG, missing);
	}
	if (fd < 0)
		return chunk_fail(r, region, index, fd, "cannot be read: its pack file cannot be opened");
	*out = loc;
	*fd_out = fd;
	return 0;
}

static int frame_fail(struct snap_reader *r, uint32_t region, uint64_t index, int rc)
{
	return chunk_fail(r, region, index, rc, rc == -EBADMSG ? "is damaged: frame header or "
			  "stored-bytes checksum mismatch" : "cannot be read from its pack");
}

/* Find a non-zero chunk's frame and read its stored bytes into @stored
 * (at least @stored_cap bytes), their checksum checked. */
static int chunk_frame_read(struct snap_reader *r, uint32_t region, uint64_t index, struct snap_frame *f,
			    uint8_t *stored, size_t stored_cap)
{
	const struct snap_chunk_loc *loc;
	int fd, rc = chunk_locate(r, region, index, stored_cap, &loc, &fd);

	if (!rc)
		rc = snap_pack_frame_read(fd, loc, f, stored);
	return rc ? frame_fail(r, region, index, rc) : 0;
}

static int chunk_check(struct snap_reader *r, uint32_t region, uint64_t index, size_t cap, uint32_t *len)
{
	if (region >= r->cl.region_count || index >= r->cl.regions[region].chunk_count)
		return snap_store_fail(r->s, -EINVAL, "snapshot %s: no region %u chunk %llu",
				       r->m.name, region, (unsigned long long)index);
	*len = snap_region_chunk_bytes(&r->cl.regions[region], r->cl.chunk_size, index);
	return cap < *len ? -EINVAL : 0;
}

struct snap_reader_ctx {
	ZSTD_DCtx *zctx;
	XXH3_state_t *xxh3;
	uint8_t *scratch;              /* a compressed frame; allocated at the first */
	size_t scratch_cap;
};

int snap_reader_ctx_new(const struct snap_reader *r, struct snap_reader_ctx **out)
{
	struct snap_reader_ctx *ctx = calloc(1, sizeof(*ctx));

	*out = NULL;
	if (!ctx)
		return -ENOMEM;
	ctx->zctx = ZSTD_createDCtx();
	ctx->xxh3 = XXH3_createState();
	ctx->scratch_cap = ZSTD_compressBound(r->cl.chunk_size);
	if (!ctx->zctx || !ctx->xxh3) {
		snap_reader_ctx_free(ctx);
		return -ENOMEM;
	}
	*out = ctx;
	return 0;
}

void snap_reader_ctx_free(struct snap_reader_ctx *ctx)
{
	if (!ctx)
		return;
	ZSTD_freeDCtx(ctx->zctx);
	XXH3_freeState(ctx->xxh3);
	free(ctx->scratch);
	free(ctx);
}

/* Read and check one chunk: a raw frame straight into @dst, a compressed
 * one through the context's scratch. */
static int chunk_read(struct snap_reader *r, uint32_t region, uint64_t index, void *dst,
		      size_t cap, struct snap_reader_ctx *ctx)
{
	const struct snap_chunk_loc *loc;
	struct snap_frame f;
	uint32_t len;
	int fd, rc = chunk_check(r, region, index, cap, &len);

	if (rc)
		return rc;
	if (r->cl.regions[region].chunks[index].flags & SNAP_CHUNK_ZERO) {
		memset(dst, 0, len);
		return 0;
	}
	rc = chunk_locate(r, region, index, ctx->scratch_cap, &loc, &fd);
	if (rc)
		return rc;
	rc = snap_pack_frame_head_read(fd, loc, &f);
	if (rc)
		return frame_fail(r, region, index, rc);
	if (f.codec == SNAP_CODEC_RAW) {
		rc = snap_pack_frame_raw_read(fd, loc, &f, dst, ctx->xxh3);
		if (rc == -EBADMSG || rc == -EINVAL)
			return chunk_fail(r, region, index, -EBADMSG, "is damaged: its bytes do not match "
					  "its content hash");
		return rc ? frame_fail(r, region, index, rc) : 0;
	}
	if (!ctx->scratch && !(ctx->scratch = malloc(ctx->scratch_cap)))
		return -ENOMEM;
	rc = snap_pack_frame_body_read(fd, loc, &f, ctx->scratch);
	if (rc)
		return frame_fail(r, region, index, rc);
	rc = snap_frame_decode_into(&f, ctx->scratch, dst, cap, ctx->zctx);
	if (rc)
		return chunk_fail(r, region, index, rc, "is damaged: it does not decompress to bytes of its "
				  "content hash");
	return 0;
}

int snap_reader_chunk_stored(struct snap_reader *r, uint32_t region, uint64_t index, void *dst, size_t cap,
			     uint32_t *codec, uint32_t *stored_len)
{
	struct snap_frame f;
	uint32_t len;
	int rc = chunk_check(r, region, index, cap, &len);

	if (rc)
		return rc;
	if (r->cl.regions[region].chunks[index].flags & SNAP_CHUNK_ZERO)
		return snap_store_fail(r->s, -EINVAL, "snapshot %s: region %u chunk %llu is a zero chunk",
				       r->m.name, region, (unsigned long long)index);
	/* A compressed frame no smaller than its chunk (this writer stores
	 * none) is given decoded, as raw: a stored form is never larger. */
	if (r->cl.regions[region].chunks[index].stored_size <= len) {
		rc = chunk_frame_read(r, region, index, &f, dst, len);
		if (rc || f.codec == SNAP_CODEC_RAW || f.stored_size < len) {
			*codec = f.codec;
			*stored_len = f.stored_size;
			return rc;
		}
	}
	*codec = SNAP_CODEC_RAW;
	*stored_len = len;
	return snap_reader_chunk_read(r, region, index, dst, cap, NULL);
}

int snap_reader_chunk_read(struct snap_reader *r, uint32_t region, uint64_t index,
			   void *dst, size_t cap, struct snap_reader_ctx *ctx)
{
	struct snap_reader_ctx *own = NULL;
	int rc = 0;

	if (!ctx)
		rc = snap_reader_ctx_new(r, &own);
	if (!rc)
		rc = chunk_read(r, region, index, dst, cap, ctx ? ctx : own);
	snap_reader_ctx_free(own);
	return rc;
}

struct region_job {
	struct snap_reader *r;
	uint32_t region;
	uint8_t *dst;
	size_t cap;
	snap_chunk_ready_fn ready;
	void *arg;
	pthread_mutex_t mu;
	uint64_t next;                 /* next chunk to take */
	int error;
};

static void *region_worker(void *arg)
{
	struct region_job *j = arg;
	const struct snap_region *reg = &j->r->cl.regions[j->region];
	uint32_t cs = j->r->cl.chunk_size;
	struct snap_reader_ctx *ctx;
	int rc = snap_reader_ctx_new(j->r, &ctx);

	for (;;) {
		uint64_t index;
		uint32_t len;

		pthread_mutex_lock(&j->mu);
		if (rc && !j->error)
			j->error = rc;
		if (j->error || j->next == reg->chunk_count) {
			pthread_mutex_unlock(&j->mu);
			break;
		}
		index = j->next++;
		pthread_mutex_unlock(&j->mu);
		len = snap_region_chunk_bytes(reg, cs, index);
		rc = chunk_read(j->r, j->region, index, j->dst + index * cs, len, ctx);
		if (!rc && j->ready)
			rc = j->ready(j->arg, index, index * cs, len);
	}
	snap_reader_ctx_free(ctx);
	return NULL;
}

int snap_reader_region_read(struct snap_reader *r, uint32_t region, void *dst, size_t cap,
			    unsigned threads, snap_chunk_ready_fn ready, void *arg)
{
	struct region_job j = { .r = r, .region = region, .dst = dst, .cap = cap,
				.ready = ready, .arg = arg };
	pthread_t *tids;
	unsigned started = 0;

	if (region >= r->cl.region_count)
		return snap_store_fail(r->s, -EINVAL, "snapshot %s: no region %u", r->m.name, region);
	if (cap < r->cl.regions[region].size)
		return -EINVAL;
	if (!threads)
		threads = r->s->cfg.workers;
	if (threads > r->cl.regions[region].chunk_count)
		threads = (unsigned)r->cl.regions[region].chunk_count;
	tids = calloc(threads, sizeof(*tids));
	if (!tids)
		return -ENOMEM;
	pthread_mutex_init(&j.mu, NULL);
	for (; started < threads; started++)
		if (pthread_create(&tids[started], NULL, region_worker, &j) != 0)
			break;
	if (started == 0)
		region_worker(&j); /* no thread: do it here */
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	pthread_mutex_destroy(&j.mu);
	free(tids);
	return j.error;
}

/* Stream the journal copy, checking it against the manifest; @fd < 0 only
 * checks. */
static int journal_stream(struct snap_reader *r, int fd)
{
	uint8_t hash[SNAP_HASH_BYTES];
	XXH3_state_t *st = XXH3_createState();
	uint8_t *buf = malloc(1 << 20);
	uint64_t off = 0;
	int in, rc;

	in = openat(r->dir_fd, SNAP_JOURNAL_FILE, O_RDONLY | O_CLOEXEC);
	rc = in < 0 ? -errno : (!st || !buf) ? -ENOMEM : 0;
	if (rc)
		goto out_free;
	XXH3_128bits_reset(st);
	/* Check the whole copy before handing out a byte of it. */
	for (int pass = 0; pass < (fd >= 0 ? 2 : 1) && !rc; pass++) {
		off = 0;
		for (;;) {
			ssize_t n = pread(in, buf, 1 << 20, (off_t)off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				rc = -errno;
				break;
			}
			if (n == 0)
				break;
			if (pass == 0) {
				XXH3_128bits_update(st, buf, (size_t)n);
				if (off == 0 && snap_journal_header_decode(buf, (size_t)n))
					rc = -EBADMSG;
			} else {
				size_t skip = off < SNAP_JOURNAL_HEADER_BYTES ?
					      SNAP_JOURNAL_HEADER_BYTES - off : 0;
				if ((size_t)n > skip)
					rc = snap_io_write_all(r->s, fd, buf + skip, (size_t)n - skip);
			}
			off += (uint64_t)n;
			if (rc)
				break;
		}
		if (pass == 0 && !rc) {
			snap_hash128_digest(st, hash);
			if (off != r->m.journal_bytes || memcmp(hash, r->m.journal_hash, 16))
				rc = -EBADMSG;
		}
	}
out_free:
	if (rc == -EBADMSG || rc == -ENOENT)
		rc = snap_store_fail(r->s, -EBADMSG, "snapshot %s: journal copy is %s",
				     r->m.name, rc == -ENOENT ? "missing" :
				     "damaged (checksum in the manifest does not match)");
	else if (rc)
		snap_store_fail(r->s, rc, "snapshot %s: journal copy: %s", r->m.name, strerror(-rc));
	if (in >= 0)
		close(in);
	XXH3_freeState(st);
	free(buf);
	return rc;
}

int snap_reader_journal_write(struct snap_reader *r, int fd)
{
	return journal_stream(r, fd);
}

int snap_store_verify(struct snap_store *s, const char *name, struct snap_verify_stats *stats)
{
	struct snap_chunk_map seen;
	struct snap_reader *r;
	struct snap_reader_ctx *ctx = NULL;
	uint8_t *dst = NULL;
	int rc;

	if (stats)
		memset(stats, 0, sizeof(*stats));
	rc = snap_reader_open(s, name, &r);
	if (rc)
		return rc;
	snap_chunk_map_init(&seen);
	rc = journal_stream(r, -1);
	if (rc)
		goto out_close;
	rc = snap_reader_ctx_new(r, &ctx);
	dst = malloc(r->cl.chunk_size);
	if (!rc && !dst)
		rc = -ENOMEM;
	if (rc)
		goto out_close;
	for (uint32_t i = 0; i < r->cl.region_count && !rc; i++) {
		const struct snap_region *reg = &r->cl.regions[i];
		for (uint64_t c = 0; c < reg->chunk_count && !rc; c++) {
			struct snap_chunk_loc *l;
			int added;

			if (reg->chunks[c].flags & SNAP_CHUNK_ZERO)
				continue;
			/* Each distinct chunk is read once. */
			added = snap_chunk_map_insert(&seen, reg->chunks[c].hash, &l);
			if (added <= 0) {
				rc = added;
				continue;
			}
			rc = chunk_read(r, i, c, dst, r->cl.chunk_size, ctx);
			if (!rc && stats) {
				stats->chunks_checked++;
				stats->bytes_checked += snap_region_chunk_bytes(reg, r->cl.chunk_size, c);
			}
		}
	}
out_close:
	snap_reader_ctx_free(ctx);
	free(dst);
	snap_chunk_map_free(&seen);
	snap_reader_close(r);
	return rc;
}
