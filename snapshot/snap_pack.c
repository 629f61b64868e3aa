/* Pack files: append-only frames of chunks, and the index written when a
 * pack is sealed.  A pack is part of the store only once its index exists;
 * the index is written after the pack is fsync'ed and before any snapshot
 * that uses it is committed. */
#define LOG_PREFIX "snapshot: "
#include "snap_internal.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

void snap_pack_name(char *out, size_t n, uint64_t id, const char *ext)
{
	snprintf(out, n, "pack-%016" PRIx64 ".%s", id, ext);
}

/* Parse "pack-<16 hex>.<ext>"; 0 on match. */
static int pack_name_parse(const char *name, const char *ext, uint64_t *id)
{
	char want[64];
	unsigned long long v;
	int used = 0;

	if (strncmp(name, "pack-", 5) != 0 || strlen(name) != 5 + 16 + 1 + strlen(ext))
		return -1;
	if (sscanf(name + 5, "%16llx%n", &v, &used) != 1 || used != 16)
		return -1;
	snap_pack_name(want, sizeof(want), v, ext);
	if (strcmp(want, name) != 0)
		return -1;
	*id = v;
	return 0;
}

static uint64_t pack_id_max(struct snap_store *s)
{
	uint64_t max = 0, id;
	struct dirent *de;
	DIR *d;

	if (snap_io_dir_open(s->packs_fd, ".", 0, &d))
		return 0;
	while ((de = readdir(d)) != NULL) {
		char *dot = strchr(de->d_name, '.');
		if (!dot || strncmp(de->d_name, "pack-", 5) != 0)
			continue;
		if (sscanf(de->d_name + 5, "%16" SCNx64, &id) == 1 && id > max)
			max = id;
	}
	closedir(d);
	return max;
}

int snap_pack_create(struct snap_store *s, struct snap_pack_out *p)
{
	uint8_t hdr[SNAP_PACK_HEADER_BYTES];
	char name[64];
	uint64_t id = pack_id_max(s) + 1;
	int fd, rc;

	memset(p, 0, sizeof(*p));
	p->fd = -1;
	/* Another process may pick the same id: O_EXCL settles it. */
	for (;; id++) {
		snap_pack_name(name, sizeof(name), id, "pack");
		fd = openat(s->packs_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd >= 0)
			break;
		if (errno != EEXIST)
			return snap_store_fail(s, -errno, "cannot create %s/packs/%s: %s%s",
					       s->path, name, strerror(errno), snap_write_hint(-errno));
	}
	p->id = id;
	p->fd = fd;
	snap_pack_header_encode(id, snap_now_ns(), hdr);
	rc = snap_io_write_all(s, fd, hdr, sizeof(hdr));
	if (rc) {
		snap_pack_discard(s, p);
		return snap_store_fail(s, rc, "cannot write %s/packs/%s: %s%s", s->path, name,
				       strerror(-rc), snap_write_hint(rc));
	}
	p->bytes = sizeof(hdr);
	return 0;
}

/* Write-behind: every WRITE_BEHIND bytes appended are handed to the disk
 * at once, and what was handed before is waited for.  Left to the page cache
 * alone, a large host writes back only once dirty pages pass a share of its
 * memory (gigabytes): the disk idles while the first of a snapshot lands in
 * memory, and the fsync at the end then waits for all of it.  This keeps
 * the disk busy from the first window and the dirty pages bounded; the
 * fsync at close still makes the pack durable. */
#define WRITE_BEHIND (64ull << 20)

int snap_pack_write_behind(struct snap_pack_out *p)
{
	uint64_t start = p->written_back, len = p->bytes - start;

	if (p->no_write_behind || len < WRITE_BEHIND)
		return 0;
	if (sync_file_range(p->fd, (off_t)start, (off_t)len, SYNC_FILE_RANGE_WRITE) == 0 &&
	    (!start || sync_file_range(p->fd, 0, (off_t)start, SYNC_FILE_RANGE_WAIT_BEFORE |
				       SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) == 0)) {
		p->written_back = p->bytes;
		return 0;
	}
	/* Not supported here: the fsync at close does it all. Any other
	 * error is a write error that the fsync might no longer report. */
	if (errno == EINVAL || errno == ENOSYS || errno == ESPIPE || errno == EOPNOTSUPP) {
		p->no_write_behind = 1;
		return 0;
	}
	return -errno;
}

int snap_pack_append(struct snap_store *s, struct snap_pack_out *p, const struct snap_frame *f,
		     const void *stored, uint64_t *offset)
{
	uint8_t hdr[SNAP_FRAME_HEADER_BYTES];
	struct snap_index_entry *e;
	int rc;

	if (p->count == p->cap) {
		uint64_t cap = p->cap ? p->cap * 2 : 256;
		e = realloc(p->entries, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		p->entries = e;
		p->cap = cap;
	}
	snap_frame_encode(f, hdr);
	rc = snap_io_write_all(s, p->fd, hdr, sizeof(hdr));
	if (!rc)
		rc = snap_io_write_all(s, p->fd, stored, f->stored_size);
	if (rc)
		return rc;
	e = &p->entries[p->count++];
	memcpy(e->hash, f->hash, SNAP_HASH_BYTES);
	e->offset = p->bytes;
	e->raw_size = f->raw_size;
	e->stored_size = f->stored_size;
	*offset = p->bytes;
	p->bytes += sizeof(hdr) + f->stored_size;
	return 0;
}

int snap_pack_close(struct snap_store *s, struct snap_pack_out *p)
{
	int rc = 0;

	if (p->fd < 0)
		return 0;
	if (fsync(p->fd) < 0)
		rc = -errno;
	if (close(p->fd) < 0 && !rc)
		rc = -errno;
	p->fd = -1;
	return rc;
}

int snap_pack_seal(struct snap_store *s, struct snap_pack_out *p)
{
	struct snap_index idx = {
		.pack_id = p->id, .pack_bytes = p->bytes,
		.count = p->count, .entries = p->entries,
	};
	struct snap_buf buf = {0};
	char tmp[80], name[64];
	int rc;

	rc = snap_pack_close(s, p);
	if (rc)
		return rc;
	rc = snap_index_encode(&idx, &buf);
	if (rc)
		goto out_buf;
	snap_pack_name(name, sizeof(name), p->id, "idx");
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	unlinkat(s->packs_fd, tmp, 0);
	rc = snap_io_file_write(s, s->packs_fd, tmp, buf.data, buf.len);
	if (rc)
		goto out_buf;
	if (renameat(s->packs_fd, tmp, s->packs_fd, name) < 0) {
		rc = -errno;
		unlinkat(s->packs_fd, tmp, 0);
		goto out_buf;
	}
	p->sealed = 1;
out_buf:
	snap_buf_free(&buf);
	return rc;
}

void snap_pack_out_free(struct snap_pack_out *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	free(p->entries);
	p->entries = NULL;
	p->count = p->cap = 0;
}

void snap_pack_discard(struct snap_store *s, struct snap_pack_out *p)
{
	char name[64];

	if (!p->sealed && p->id) {
		snap_pack_name(name, sizeof(name), p->id, "pack");
		unlinkat(s->packs_fd, name, 0);
	}
	snap_pack_out_free(p);
}

int snap_store_map_load(struct snap_store *s, struct snap_chunk_map *map)
{
	struct dirent *de;
	DIR *d;
	int rc = snap_io_dir_open(s->packs_fd, ".", 0, &d);

	if (rc)
		return rc;
	while ((de = readdir(d)) != NULL) {
		struct snap_index idx;
		uint8_t *buf;
		size_t len;
		uint64_t id;

		if (pack_name_parse(de->d_name, "idx", &id) != 0)
			continue;
		rc = snap_io_file_read(s->packs_fd, de->d_name, SNAP_INDEX_MAX, &buf, &len);
		if (rc == -ENOENT) {
			rc = 0; /* gc removed it since readdir */
			continue;
		}
		if (rc)
			break;
		rc = snap_index_decode(buf, len, &idx);
		free(buf);
		if (rc || idx.pack_id != id) {
			/* Its chunks are unreachable; verify names what that breaks. */
			pr_warn("%s/packs/%s: damaged index ignored", s->path, de->d_name);
			free(idx.entries);
			rc = 0;
			continue;
		}
		for (uint64_t i = 0; i < idx.count && !rc; i++) {
			struct snap_chunk_loc *l;
			int added = snap_chunk_map_insert(map, idx.entries[i].hash, &l);
			if (added < 0) {
				rc = added;
			} else if (added) {
				l->pack_id = id;
				l->offset = idx.entries[i].offset;
				l->raw_size = idx.entries[i].raw_size;
				l->stored_size = idx.entries[i].stored_size;
				l->state = SNAP_LOC_WRITTEN;
			}
		}
		free(idx.entries);
		if (rc)
			break;
	}
	closedir(d);
	return rc;
}

int snap_pack_frame_head_read(int pack_fd, const struct snap_chunk_loc *loc, struct snap_frame *f)
{
	uint8_t hdr[SNAP_FRAME_HEADER_BYTES];
	int rc;

	rc = snap_io_pread_all(pack_fd, hdr, sizeof(hdr), loc->offset);
	if (rc)
		return rc;
	rc = snap_frame_decode(hdr, sizeof(hdr), f);
	if (rc)
		return -EBADMSG;
	if (memcmp(f->hash, loc->hash, SNAP_HASH_BYTES) != 0 ||
	    f->raw_size != loc->raw_size || f->stored_size != loc->stored_size)
		return -EBADMSG;
	return 0;
}

int snap_pack_frame_body_read(int pack_fd, const struct snap_chunk_loc *loc, const struct snap_frame *f,
			      uint8_t *stored)
{
	int rc = snap_io_pread_all(pack_fd, stored, f->stored_size, loc->offset + SNAP_FRAME_HEADER_BYTES);

	return rc ? rc : snap_frame_body_check(f, stored, f->stored_size);
}

int snap_pack_frame_read(int pack_fd, const struct snap_chunk_loc *loc,
			 struct snap_frame *f, uint8_t *stored)
{
	int rc = snap_pack_frame_head_read(pack_fd, loc, f);

	return rc ? rc : snap_pack_frame_body_read(pack_fd, loc, f, stored);
}

/* Hashed while the last read is still in the core's cache: the bytes
 * cross memory once on their way in. */
#define RAW_PIECE (256u << 10)

int snap_pack_frame_raw_read(int pack_fd, const struct snap_chunk_loc *loc, const struct snap_frame *f,
			     uint8_t *dst, void *xxh3_state)
{
	XXH3_state_t *st = xxh3_state;
	uint8_t hash[SNAP_HASH_BYTES];
	int rc = 0;

	if (f->codec != SNAP_CODEC_RAW || f->stored_size != f->raw_size)
		return -EINVAL;
	XXH3_128bits_reset(st);
	for (uint32_t done = 0; done < f->stored_size && !rc;) {
		uint32_t n = f->stored_size - done < RAW_PIECE ? f->stored_size - done : RAW_PIECE;

		rc = snap_io_pread_all(pack_fd, dst + done, n, loc->offset + SNAP_FRAME_HEADER_BYTES + done);
		if (!rc)
			XXH3_128bits_update(st, dst + done, n);
		done += n;
	}
	if (rc)
		return rc;
	snap_hash128_digest(st, hash);
	return memcmp(hash, f->hash, SNAP_HASH_BYTES) ? -EBADMSG : 0;
}

int snap_frame_decode_into(const struct snap_frame *f, const uint8_t *stored,
			   void *dst, size_t cap, void *zctx)
{
	uint8_t hash[SNAP_HASH_BYTES];

	if (cap < f->raw_size)
		return -EINVAL;
	if (f->codec == SNAP_CODEC_RAW) {
		if (dst != stored)
			memcpy(dst, stored, f->raw_size);
	} else {
		size_t n = ZSTD_decompressDCtx(zctx, dst, f->raw_size, stored, f->stored_size);
		if (ZSTD_isError(n) || n != f->raw_size)
			return -EBADMSG;
	}
	snap_hash128(dst, f->raw_size, hash);
	if (memcmp(hash, f->hash, SNAP_HASH_BYTES) != 0)
		return -EBADMSG;
	return 0;
}
