/* The snapshot store: a directory holding a session's snapshots and the
 * content-addressed chunk store they share.
 *
 *     STORE/lock                  flock: shared by readers and writers,
 *                                 exclusive for rm, gc and crash clean-up
 *     STORE/packs/pack-N.pack     append-only frames of chunks
 *     STORE/packs/pack-N.idx      hash -> offset; a pack without one is not
 *                                 part of the store (crashed or in progress)
 *     STORE/snaps/NAME/           manifest, journal, chunks (complete only)
 *     STORE/snaps/.tmp-NAME/      a snapshot being written
 *
 * A snapshot directory exists under its name only once every file in it and
 * every pack it uses are fsync'ed: the rename of .tmp-NAME is the commit.
 * See docs/snapshot-format.md.
 *
 * Errors: functions return 0 or a negative errno.  -EBADMSG means damaged
 * data (a checksum or a structure check failed), -ENOTSUP a format version
 * this build does not read, -EBUSY that the store is in use where exclusive
 * access is needed, -ENOSPC that the disk is full (nothing already committed
 * is lost).  snap_store_error() then says which file, snapshot, region and
 * chunk.
 *
 * Threading: a struct snap_store may be shared by threads; each reader and
 * writer made from it is used by one thread at a time except where its
 * header says otherwise.  Several processes may open the same store.
 */
#ifndef TERN_SNAP_STORE_H
#define TERN_SNAP_STORE_H

#include <stdint.h>

#include "snap_format.h"

struct snap_store;

struct snap_store_config {
	uint32_t chunk_size;       /* 0: SNAP_DEFAULT_CHUNK_SIZE */
	unsigned workers;          /* hash/compress threads; 0: 2 */
	unsigned queue_depth;      /* chunks in flight per writer; 0: 2*workers+2 */
	int zstd_level;            /* 0: 1; negative levels are zstd's fast modes */
	uint64_t pack_max_bytes;   /* roll to a new pack past this; 0: 1 GiB */
	/* Testing: fail store writes with ENOSPC once this many bytes were
	 * written through this handle (0: off).  An fd-level fault hook for
	 * machines where a small tmpfs cannot be mounted. */
	uint64_t fault_enospc_after;
};

#define SNAP_DEFAULT_CHUNK_SIZE (4u << 20)

/* Workers for a writer that should use every core (a snapshot's drain, a
 * migration's receiver): the online CPUs, at least 2. */
unsigned snap_store_workers_all(void);

#define SNAP_STORE_CREATE 0x1u /* create the directory layout if missing */

/* Open the store at @dir.  When no other process uses the store, leftovers of
 * crashed writers (temporary snapshot directories, packs without an index)
 * are removed.  @cfg may be NULL; it is copied.  *out is freed by
 * snap_store_close(). */
int snap_store_open(const char *dir, const struct snap_store_config *cfg,
		    unsigned flags, struct snap_store **out);
/* Accepts NULL.  Readers and writers of the store must be closed first. */
void snap_store_close(struct snap_store *store);

/* Message describing the last failure on this store, or "" if none.  The
 * store keeps one message: when threads share it, read it right after the
 * failed call.  Valid until the store is closed. */
const char *snap_store_error(const struct snap_store *store);

struct snap_info {
	char name[SNAP_NAME_MAX + 1];
	char parent[SNAP_NAME_MAX + 1];   /* "" if none */
	uint64_t created_ns;
	uint64_t logical_bytes;
	uint64_t stored_bytes;            /* new pack bytes + its own files */
	uint64_t chunk_count;
	int complete;                     /* 1: committed and manifest verifies */
	int error;                        /* why not complete (0, -EBADMSG ...) */
};

/* Snapshots in the store, oldest first; snapshots being written (error
 * -EINPROGRESS) and snapshots whose manifest fails its checksum are listed
 * with complete = 0.  What a writer that died left is not listed.
 * *out is malloc'ed (free()); *count may be 0. */
int snap_store_list(struct snap_store *store, struct snap_info **out, unsigned *count);

/* Read the manifest of a complete snapshot (checksum verified).  -ENOENT:
 * no such snapshot; -EINPROGRESS: it is still being written. */
int snap_store_manifest_get(struct snap_store *store, const char *name, struct snap_manifest *out);

struct snap_verify_stats {
	uint64_t chunks_checked;    /* distinct stored chunks read and hashed */
	uint64_t bytes_checked;     /* raw bytes */
};

/* Check every checksum of snapshot @name: manifest, chunk list, journal,
 * and every referenced chunk (read, checksum, decompress, content hash).
 * -EBADMSG on the first damage, named in snap_store_error().  @stats may be
 * NULL. */
int snap_store_verify(struct snap_store *store, const char *name, struct snap_verify_stats *stats);

struct snap_gc_stats {
	uint64_t packs_deleted;
	uint64_t packs_rewritten;
	uint64_t bytes_freed;       /* pack and index bytes no longer on disk */
	uint64_t chunks_dropped;
};

/* Remove snapshot @name, then collect garbage.  Needs exclusive access:
 * -EBUSY while a reader or writer is open on the store (in any process).
 * Children of @name stay complete: they list every chunk themselves. */
int snap_store_rm(struct snap_store *store, const char *name, struct snap_gc_stats *stats);

/* Drop chunks no complete snapshot references: delete packs with no live
 * chunk, rewrite packs less than half live.  Crash-safe: a rewritten pack
 * is durable before the old one goes.  -EBUSY as for rm; @stats may be NULL. */
int snap_store_gc(struct snap_store *store, struct snap_gc_stats *stats);

#endif
