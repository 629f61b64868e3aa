/* The tracker: the live journal of one session, in an LMDB environment.
 *
 * The session's worker writes it in the order calls are applied: one record
 * per live object, per device memory region, per loaded image, plus a small
 * typed meta set (last applied sequence number and its reply, device,
 * versions).  Freeing drops the record: the journal holds state, not history.
 * docs/journal.md describes the databases, keys and records.
 *
 * Durability comes from snapshots, not from this journal: it is written with
 * MDB_WRITEMAP | MDB_NOSYNC | MDB_NOMETASYNC.  A worker that dies loses
 * nothing committed (the page cache has it); a host crash may leave the live
 * journal corrupt, which is harmless because the GPU state it described died
 * too: after a host crash, discard live journals and restore from snapshots.
 * tracker_copy_fd() makes the consistent copy a snapshot keeps;
 * tracker_open(TRACKER_OPEN_RDONLY) reads such a copy.  Open a copy only once
 * its checksum is verified: LMDB trusts its files.
 *
 * Lifecycle: tracker_open -> use -> tracker_close.
 *
 * Threads: a tracker has one owner thread at a time (the worker's executor):
 * every function but tracker_copy_fd/tracker_copy_file must be called by the
 * owner or under the caller's own lock.  tracker_copy_* may run on any thread
 * while the owner keeps writing; it copies the last committed state.  One
 * process may open a live journal for writing; never open it twice.  Open it
 * after fork() (in the worker), never before: LMDB handles do not survive it.
 *
 * Transactions: without tracker_txn_begin every write is its own committed
 * transaction.  Between tracker_txn_begin and tracker_txn_commit, writes join
 * one transaction (batching is what makes the journal cheap); reads see them.
 * If a write inside a batch fails on a storage error, the batch is lost: later
 * writes and the commit return that error, the journal keeps its last commit.
 * Errors that change nothing (-ENOENT, -EINVAL, -EEXIST) leave the batch intact.
 * When the map fills, the tracker grows it and replays the batch itself.
 *
 * Lifetime of what reads return: pointers (object args, image bytes, meta
 * bytes) point into the map and stay valid until the next call on this
 * tracker from the owner thread (like mdb_get).  Copy what you keep.
 *
 * Errors: 0 or -errno.  -ENOENT: no such record; -EROFS: write to a read-only
 * journal; -EBADMSG: a stored record does not decode (corrupt journal);
 * -EPROTONOSUPPORT: journal or record version unknown to this build;
 * -ENOSPC: the map cannot grow or the disk is full; -EBUSY: write from an
 * iteration callback.  LMDB's own message is logged where it arises.
 */
#ifndef TERN_TRACKER_H
#define TERN_TRACKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "record.h"

/* Journal format version, stored in meta key TRACKER_META_FORMAT. */
#define TRACKER_FORMAT_VERSION 1u

/* Meta keys: ids are stored on disk and never reused.  Callers may use their
 * own keys from TRACKER_META_USER upwards. */
enum tracker_meta_key {
	TRACKER_META_FORMAT = 1,         /* u64, written by the tracker only */
	TRACKER_META_REPLY = 2,          /* reply: last applied sequence + encoded reply */
	TRACKER_META_DEVICE_INDEX = 3,   /* u64 */
	TRACKER_META_DEVICE_UUID = 4,    /* bytes (16) */
	TRACKER_META_DRIVER_VERSION = 5, /* u64, cuDriverGetVersion() */
	TRACKER_META_PROTOCOL_VERSION = 6, /* u64, wire protocol */
	TRACKER_META_SESSION_ID = 7,     /* bytes */
	TRACKER_META_ARENA_BASE = 8,     /* u64, device address */
	TRACKER_META_ARENA_SIZE = 9,     /* u64, bytes */
	TRACKER_META_USER = 0x10000,
};

struct tracker;

/* Open for reading only: a copy made by tracker_copy_*, which nothing writes
 * any more (no lock file is used).  Never open a live journal this way. */
#define TRACKER_OPEN_RDONLY 0x1u

/* Open the journal at @path; @out receives a tracker to close with
 * tracker_close().  Writable: @path is a directory, created (0700) if missing,
 * holding data.mdb and lock.mdb.  TRACKER_OPEN_RDONLY: @path is either a copy
 * file or a directory holding data.mdb.
 * Errors: -EPROTONOSUPPORT (format from a newer build), -EBADMSG (not a
 * journal), -errno from the file system. */
int tracker_open(const char *path, uint32_t flags, struct tracker **out);

/* Abort any open batch and close.  Accepts NULL. */
void tracker_close(struct tracker *t);

/* Batches.  begin: -EALREADY if one is open.  commit: the error of a failed
 * batch, or of the commit itself; the batch is closed either way.  abort
 * discards every write since begin (ignored inside an iteration callback). */
int tracker_txn_begin(struct tracker *t);
int tracker_txn_commit(struct tracker *t);
void tracker_txn_abort(struct tracker *t);
bool tracker_txn_active(const struct tracker *t);

/* Objects, by virtual handle (!= 0).  put creates or replaces. */
int tracker_object_put(struct tracker *t, uint64_t handle, const struct tracker_object *o);
int tracker_object_get(struct tracker *t, uint64_t handle, struct tracker_object *o);
int tracker_object_del(struct tracker *t, uint64_t handle);

/* Regions, by device address.  put creates or replaces. */
int tracker_region_put(struct tracker *t, uint64_t addr, const struct tracker_region *r);
int tracker_region_get(struct tracker *t, uint64_t addr, struct tracker_region *r);
int tracker_region_del(struct tracker *t, uint64_t addr);

/* Images, reference counted by content.  ref stores @bytes under their hash
 * (written to @hash) with one reference, or adds a reference to the copy
 * already there; @format is kept from the first ref.  -EEXIST if a stored
 * image has the same hash but other bytes.  unref drops one reference and
 * deletes the image with the last.  get: @bytes may be NULL. */
int tracker_image_ref(struct tracker *t, const void *bytes, size_t size, uint32_t format,
		      uint8_t hash[TRACKER_HASH_SIZE]);
int tracker_image_unref(struct tracker *t, const uint8_t hash[TRACKER_HASH_SIZE]);
int tracker_image_get(struct tracker *t, const uint8_t hash[TRACKER_HASH_SIZE],
		      struct tracker_image *im, const void **bytes);

/* Meta.  Keys are 32-bit ids > TRACKER_META_FORMAT.  get fails with -EBADMSG
 * when the stored value has another type. */
int tracker_meta_u64_set(struct tracker *t, uint32_t key, uint64_t v);
int tracker_meta_u64_get(struct tracker *t, uint32_t key, uint64_t *v);
int tracker_meta_bytes_set(struct tracker *t, uint32_t key, const void *bytes, size_t len);
int tracker_meta_bytes_get(struct tracker *t, uint32_t key, const void **bytes, size_t *len);
/* The last applied request: written once per request, in its batch. */
int tracker_reply_set(struct tracker *t, uint64_t seq, const void *reply, size_t len);
int tracker_reply_get(struct tracker *t, uint64_t *seq, const void **reply, size_t *len);

/* Iteration.  A callback returning non-zero stops it, and that value is
 * returned.  Records and pointers are valid during the callback only.  The
 * callback may read this tracker (get) but not write it (-EBUSY). */
typedef int (*tracker_object_fn)(void *ctx, uint64_t handle, const struct tracker_object *o);
typedef int (*tracker_region_fn)(void *ctx, uint64_t addr, const struct tracker_region *r);
typedef int (*tracker_image_fn)(void *ctx, const uint8_t hash[TRACKER_HASH_SIZE],
				const struct tracker_image *im, const void *bytes);
typedef int (*tracker_meta_fn)(void *ctx, uint32_t key, const struct tracker_meta_value *v);

/* Objects in dependency order: all objects of kind_order[0] by handle, then
 * kind_order[1]..., then the objects of kinds not listed, by handle (so that
 * nothing is skipped silently; a replayer should refuse kinds it does not
 * know).  @kind_order may be NULL when @nkinds is 0 (plain handle order). */
int tracker_object_foreach(struct tracker *t, const uint32_t *kind_order, size_t nkinds,
			   tracker_object_fn fn, void *ctx);
int tracker_region_foreach(struct tracker *t, tracker_region_fn fn, void *ctx);
int tracker_image_foreach(struct tracker *t, tracker_image_fn fn, void *ctx);
int tracker_meta_foreach(struct tracker *t, tracker_meta_fn fn, void *ctx);

/* Counts and sizes, for `ckpt inspect` and logs. */
struct tracker_stats {
	uint64_t objects;
	uint64_t regions;
	uint64_t region_bytes; /* sum of region sizes */
	uint64_t images;
	uint64_t image_bytes;  /* sum of stored image sizes (each once) */
	uint64_t image_refs;
	uint64_t meta;
	uint64_t map_size;     /* bytes mapped now */
	uint64_t used_bytes;   /* bytes of the data file in use (pages) */
};
int tracker_stats_get(struct tracker *t, struct tracker_stats *st);

/* Write a compacted, consistent copy of the last committed state to @fd,
 * from its current offset (a fresh file).  The caller syncs and renames.
 * Any thread; the owner may keep writing meanwhile (map growth waits). */
int tracker_copy_fd(struct tracker *t, int fd);
/* The same into a new file @path (O_EXCL, 0600), fsynced before return. */
int tracker_copy_file(struct tracker *t, const char *path);

/* Flush committed writes to disk (the journal never syncs by itself). */
int tracker_sync(struct tracker *t);

#endif
