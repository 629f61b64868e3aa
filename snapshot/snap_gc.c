/* rm and garbage collection of the chunk store.
 *
 * Both run with the store locked exclusively, so no reader or writer holds a
 * view of the packs.  Crash safety: a snapshot is removed by renaming it to
 * .rm-NAME first (it stops being listed at once; open finishes the job); a
 * pack is rewritten into a new pack that is fsync'ed and indexed before the
 * old index and then the old pack are unlinked, so at every point each live
 * chunk sits in at least one indexed pack.
 */
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
#include <sys/stat.h>
#include <unistd.h>

/* Hashes referenced by every complete snapshot; fails if one is unreadable,
 * since then we cannot prove any chunk dead. */
static int live_set_build(struct snap_store *s, struct snap_chunk_map *live)
{
	struct dirent *de;
	DIR *d;
	int rc = snap_io_dir_open(s->snaps_fd, ".", 0, &d);

	if (rc)
		return rc;
	while (!rc && (de = readdir(d)) != NULL) {
		struct snap_manifest m;
		struct snap_chunk_list cl;

		if (de->d_name[0] == '.')
			continue;
		rc = snap_store_snapshot_load(s, de->d_name, &m, &cl);
		if (rc) {
			char why[sizeof(s->errmsg)];
			snprintf(why, sizeof(why), "%s", s->errmsg);
			rc = snap_store_fail(s, rc, "gc stopped, nothing deleted: %s", why);
			break;
		}
		for (uint64_t i = 0; i < cl.region_count && !rc; i++) {
			for (uint64_t c = 0; c < cl.regions[i].chunk_count && !rc; c++) {
				struct snap_chunk_ref *ref = &cl.regions[i].chunks[c];
				struct snap_chunk_loc *l;
				if (ref->flags & SNAP_CHUNK_ZERO)
					continue;
				rc = snap_chunk_map_insert(live, ref->hash, &l);
				rc = rc < 0 ? rc : 0;
			}
		}
		snap_chunk_list_free(&cl);
	}
	closedir(d);
	return rc;
}

static int pack_ids_list(struct snap_store *s, uint64_t **ids, unsigned *count)
{
	unsigned n = 0, cap = 0;
	struct dirent *de;
	uint64_t *v = NULL;
	DIR *d;
	int rc = snap_io_dir_open(s->packs_fd, ".", 0, &d);

	if (rc)
		return rc;
	while ((de = readdir(d)) != NULL) {
		uint64_t id;
		char want[64];

		if (sscanf(de->d_name, "pack-%16" SCNx64, &id) != 1)
			continue;
		snap_pack_name(want, sizeof(want), id, "idx");
		if (strcmp(want, de->d_name) != 0)
			continue;
		if (n == cap) {
			uint64_t *nv;
			cap = cap ? cap * 2 : 32;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				free(v);
				closedir(d);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n++] = id;
	}
	closedir(d);
	*ids = v;
	*count = n;
	return 0;
}

static uint64_t file_bytes(int dir_fd, const char *name)
{
	struct stat st;

	return fstatat(dir_fd, name, &st, 0) == 0 ? (uint64_t)st.st_size : 0;
}

/* Unlink a pack: index first, so a crash in between leaves an unindexed pack
 * that the next open removes. */
static uint64_t pack_unlink(struct snap_store *s, uint64_t id)
{
	char idx[64], pack[64];
	uint64_t bytes;

	snap_pack_name(idx, sizeof(idx), id, "idx");
	snap_pack_name(pack, sizeof(pack), id, "pack");
	bytes = file_bytes(s->packs_fd, idx) + file_bytes(s->packs_fd, pack);
	unlinkat(s->packs_fd, idx, 0);
	unlinkat(s->packs_fd, pack, 0);
	return bytes;
}

/* Copy the frames of @idx marked in @keep into a new pack. */
static int pack_rewrite(struct snap_store *s, const struct snap_index *idx, const uint8_t *keep)
{
	struct snap_pack_out out;
	uint8_t *stored = NULL;
	char name[64];
	int in, rc;

	snap_pack_name(name, sizeof(name), idx->pack_id, "pack");
	in = openat(s->packs_fd, name, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	rc = snap_pack_create(s, &out);
	if (rc) {
		close(in);
		return rc;
	}
	stored = malloc(SNAP_CHUNK_SIZE_MAX + (SNAP_CHUNK_SIZE_MAX >> 7) + 512);
	if (!stored)
		rc = -ENOMEM;
	for (uint64_t i = 0; i < idx->count && !rc; i++) {
		const struct snap_index_entry *e = &idx->entries[i];
		struct snap_chunk_loc loc = { .offset = e->offset, .raw_size = e->raw_size,
					      .stored_size = e->stored_size };
		struct snap_frame f;
		uint64_t off;

		if (!keep[i])
			continue;
		memcpy(loc.hash, e->hash, SNAP_HASH_BYTES);
		/* A damaged frame is not copied: the old pack stays, so verify
		 * keeps reporting the damage where it is. */
		rc = snap_pack_frame_read(in, &loc, &f, stored);
		if (!rc)
			rc = snap_pack_append(s, &out, &f, stored, &off);
		if (!rc)
			rc = snap_pack_write_behind(&out);
	}
	if (!rc)
		rc = snap_pack_seal(s, &out);
	if (!rc)
		rc = snap_io_fsync_dir(s->packs_fd);
	if (rc)
		snap_pack_discard(s, &out);
	else
		snap_pack_out_free(&out);
	free(stored);
	close(in);
	return rc;
}

static int gc_locked(struct snap_store *s, struct snap_gc_stats *st)
{
	struct snap_chunk_map live, kept;
	uint64_t *ids = NULL;
	unsigned nids = 0;
	int rc;

	snap_chunk_map_init(&live);
	snap_chunk_map_init(&kept);
	snap_store_cleanup_locked(s);
	rc = live_set_build(s, &live);
	if (!rc)
		rc = pack_ids_list(s, &ids, &nids);
	for (unsigned p = 0; p < nids && !rc; p++) {
		struct snap_index idx;
		uint64_t live_bytes = 0, live_count = 0, pack_bytes;
		uint8_t *keep;
		uint8_t *buf;
		size_t len;
		char name[64];

		snap_pack_name(name, sizeof(name), ids[p], "idx");
		if (snap_io_file_read(s->packs_fd, name, SNAP_INDEX_MAX, &buf, &len))
			continue;
		if (snap_index_decode(buf, len, &idx) || idx.pack_id != ids[p]) {
			/* Unknown contents: keep the pack rather than guess. */
			pr_warn("%s/packs/%s: damaged index, pack kept", s->path, name);
			free(buf);
			continue;
		}
		free(buf);
		keep = calloc(idx.count + 1, 1);
		if (!keep) {
			free(idx.entries);
			rc = -ENOMEM;
			break;
		}
		for (uint64_t i = 0; i < idx.count && !rc; i++) {
			struct snap_chunk_loc *l;
			int added;
			if (!snap_chunk_map_find(&live, idx.entries[i].hash))
				continue;
			/* A chunk stored twice is kept once. */
			added = snap_chunk_map_insert(&kept, idx.entries[i].hash, &l);
			if (added < 0)
				rc = added;
			if (added > 0) {
				keep[i] = 1;
				live_count++;
				live_bytes += SNAP_FRAME_HEADER_BYTES + idx.entries[i].stored_size;
			}
		}
		snap_pack_name(name, sizeof(name), ids[p], "pack");
		pack_bytes = file_bytes(s->packs_fd, name);
		if (!rc && live_count == 0) {
			st->bytes_freed += pack_unlink(s, ids[p]);
			st->packs_deleted++;
			st->chunks_dropped += idx.count;
		} else if (!rc && live_count < idx.count && live_bytes * 2 < pack_bytes) {
			int wrc = pack_rewrite(s, &idx, keep);
			if (wrc) {
				/* Leaves the old pack whole; only space is not freed. */
				pr_warn("%s: rewriting %s failed (%s); pack kept", s->path, name,
					strerror(-wrc));
			} else {
				uint64_t before = pack_bytes;
				snap_pack_name(name, sizeof(name), ids[p], "idx");
				before += file_bytes(s->packs_fd, name);
				pack_unlink(s, ids[p]);
				/* New pack + index replace the old. */
				st->bytes_freed += before - (live_bytes + SNAP_PACK_HEADER_BYTES +
					SNAP_INDEX_HEADER_BYTES + SNAP_TRAILER_BYTES +
					live_count * SNAP_INDEX_RECORD_BYTES);
				st->packs_rewritten++;
				st->chunks_dropped += idx.count - live_count;
			}
		}
		free(keep);
		free(idx.entries);
	}
	if (!rc)
		rc = snap_io_fsync_dir(s->packs_fd);
	free(ids);
	snap_chunk_map_free(&live);
	snap_chunk_map_free(&kept);
	return rc;
}

int snap_store_gc(struct snap_store *s, struct snap_gc_stats *stats)
{
	struct snap_gc_stats local;
	int lock_fd, rc;

	memset(&local, 0, sizeof(local));
	lock_fd = snap_store_lock(s, 1, 1);
	if (lock_fd < 0)
		return lock_fd;
	rc = gc_locked(s, &local);
	close(lock_fd);
	if (stats)
		*stats = local;
	return rc;
}

int snap_store_rm(struct snap_store *s, const char *name, struct snap_gc_stats *stats)
{
	struct snap_gc_stats local;
	char rmname[SNAP_NAME_MAX + 8];
	struct stat st;
	int lock_fd, rc;

	memset(&local, 0, sizeof(local));
	if (!snap_name_valid(name))
		return snap_store_fail(s, -EINVAL, "invalid snapshot name \"%s\"", name);
	lock_fd = snap_store_lock(s, 1, 1);
	if (lock_fd < 0)
		return lock_fd;
	if (fstatat(s->snaps_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		rc = snap_store_fail(s, -errno, "snapshot %s: %s", name,
				     errno == ENOENT ? "no such snapshot" : strerror(errno));
		goto out_unlock;
	}
	snprintf(rmname, sizeof(rmname), SNAP_RM_PREFIX "%s", name);
	snap_io_dir_remove(s->snaps_fd, rmname);
	if (renameat(s->snaps_fd, name, s->snaps_fd, rmname) < 0) {
		rc = snap_store_fail(s, -errno, "snapshot %s: cannot remove: %s", name,
				     strerror(errno));
		goto out_unlock;
	}
	rc = snap_io_fsync_dir(s->snaps_fd);
	if (!rc)
		rc = snap_io_dir_remove(s->snaps_fd, rmname);
	if (!rc)
		rc = snap_io_fsync_dir(s->snaps_fd);
	if (!rc)
		rc = gc_locked(s, &local);
out_unlock:
	close(lock_fd);
	if (stats)
		*stats = local;
	return rc;
}
