/* Writing one snapshot into a store.
 *
 *     snap_writer_begin(store, &cfg, &w);
 *     snap_writer_region_add(w, addr, size, flags, &region);   for each region
 *     snap_writer_chunk_add(w, region, index, buf, len, devhash, done, arg);
 *       or snap_writer_chunk_add_zstd(...) with its zstd frame too
 *       or snap_writer_chunk_unchanged(w, region, index, devhash)
 *       or snap_writer_chunk_zero(w, region, index, devhash)
 *     snap_writer_journal_set(w, journal_fd);
 *     snap_writer_commit(w);            or snap_writer_abort(w)
 *
 * Pipeline: snap_writer_chunk_add() only queues the chunk.  A pool of worker
 * threads checks for zeros, hashes (XXH3-128), looks the hash up in the store
 * and compresses (zstd) what is new, then appends the frame itself (a raw
 * one from the caller's buffer) to one of this snapshot's packs that no
 * other worker is appending to.  The queue holds at most queue_depth
 * chunks: chunk_add blocks while it is full, so memory stays bounded by
 * queue_depth compressed buffers.
 *
 * Threading: begin, region_add, chunk_add, chunk_unchanged, chunk_zero, journal_set,
 * flush, commit and abort are called from one thread (the caller's).  The
 * done callbacks run on worker threads.
 */
#ifndef TERN_SNAP_WRITER_H
#define TERN_SNAP_WRITER_H

#include <stdint.h>

#include "snap_store.h"

struct snap_writer;

struct snap_writer_config {
	const char *name;            /* required, snap_name_valid() */
	const char *parent;          /* NULL or "" for a full snapshot */
	const char *session_id;      /* may be NULL */
	const char *device_name;     /* may be NULL */
	uint8_t device_uuid[16];
	uint32_t driver_version;
	uint32_t chunk_size;         /* 0: the store's; must equal the parent's */
	/* The session's credential and owner uid for the manifest (SNAP_AUTH_*
	 * says which are set); 0: none. */
	uint32_t auth_flags;
	uint32_t owner_uid;
	uint8_t credential[SNAP_CREDENTIAL_BYTES];
	/* Non-zero: keep a progress log (snap_format.h, SNAP_PROGRESS_FILE)
	 * in the snapshot's temp directory, so that another process follows
	 * what is settled while it is written (ckpt migrate streams each
	 * chunk as soon as its frame is in a pack).  Every region must then
	 * be declared before the first chunk (-EPROTO after).  A failed write
	 * of the log fails the snapshot; commit removes the log. */
	int progress_log;
};

/* The caller's buffer @buf may be reused: its bytes are hashed and, if
 * new, written to a pack (the page cache; durable at commit).  @status is
 * 0, or the error that stopped the snapshot. */
typedef void (*snap_chunk_done_fn)(void *arg, const void *buf, int status);

/* Start snapshot cfg->name.  -EEXIST if a snapshot of that name exists,
 * -ENOENT if the parent does not.  The store must outlive the writer. */
int snap_writer_begin(struct snap_store *store, const struct snap_writer_config *cfg,
		      struct snap_writer **out);

/* Declare a region; its chunks are ceil(size / chunk_size), each chunk_size
 * bytes but the last.  *region receives its index for chunk_add. */
int snap_writer_region_add(struct snap_writer *w, uint64_t addr, uint64_t size,
			   uint32_t flags, uint32_t *region);

/* Bytes per chunk of this snapshot (the last chunk of a region may be shorter). */
uint32_t snap_writer_chunk_size(const struct snap_writer *w);

/* Number of chunks of @region (0 if no such region). */
uint64_t snap_writer_region_chunks(const struct snap_writer *w, uint32_t region);
/* Bytes of chunk @index of @region (0 if no such chunk). */
uint32_t snap_writer_region_chunk_bytes(const struct snap_writer *w, uint32_t region, uint64_t index);

/* Queue chunk @index of @region: @len bytes at @buf (the exact chunk size).
 * The bytes must stay unchanged until done(arg, buf, status) is called,
 * once, from a worker thread; done may be NULL if the caller waits with
 * snap_writer_flush().  Blocks while the queue is full.  Returns 0 or the
 * first error of the pipeline (done is then not called for this chunk). */
int snap_writer_chunk_add(struct snap_writer *w, uint32_t region, uint64_t index,
			  const void *buf, uint32_t len, uint64_t device_hash,
			  snap_chunk_done_fn done, void *arg);

/* As snap_writer_chunk_add, for a chunk the caller also holds compressed:
 * @zstd, a zstd frame of @zstd_len bytes (fewer than @len) that the caller
 * checked decompresses to exactly @buf, is stored as it is instead of
 * compressing @buf again (a migration's destination stores what the source
 * sent).  Both buffers stay the caller's until done. -EINVAL for a
 * compressed form no smaller than the chunk. */
int snap_writer_chunk_add_zstd(struct snap_writer *w, uint32_t region, uint64_t index, const void *buf,
			       uint32_t len, const void *zstd, uint32_t zstd_len, uint64_t device_hash,
			       snap_chunk_done_fn done, void *arg);

/* The caller saw that this chunk's device hash equals the parent's: copy
 * the parent's entry for the same address without reading any bytes.
 * -ENOENT if the parent has no chunk of that size at that address,
 * -ESTALE if the parent's device hash differs from @device_hash. */
int snap_writer_chunk_unchanged(struct snap_writer *w, uint32_t region, uint64_t index,
				uint64_t device_hash);

/* The caller saw that this chunk is all zero (its device hash said so):
 * record a zero entry without handing over any bytes. */
int snap_writer_chunk_zero(struct snap_writer *w, uint32_t region, uint64_t index,
			   uint64_t device_hash);

/* Device hash the parent recorded for the chunk at @addr (chunk-aligned
 * within a parent region): 0 and *out, or -ENOENT. */
int snap_writer_parent_device_hash(const struct snap_writer *w, uint64_t addr, uint64_t *out);

/* Copy the journal from @fd (read from offset 0 to EOF with pread; the fd
 * stays the caller's).  Required before commit. */
int snap_writer_journal_set(struct snap_writer *w, int fd);

/* Wait until every queued chunk went through the pipeline. */
int snap_writer_flush(struct snap_writer *w);

struct snap_writer_stats {
	uint64_t chunks;            /* all entries */
	uint64_t zero_chunks;
	uint64_t dedup_chunks;      /* hash already stored */
	uint64_t unchanged_chunks;  /* copied from the parent */
	uint64_t new_chunks;
	uint64_t raw_bytes;         /* bytes handed to chunk_add */
	uint64_t stored_bytes;      /* bytes appended to packs (frames) */
};

/* Finish: wait for the pipeline, check that every chunk of every region was
 * given, make the packs durable, write manifest, chunk list and journal,
 * fsync, rename, fsync the directory.  Frees @w whatever the outcome; on
 * failure nothing of this snapshot is left and earlier snapshots are
 * untouched.  @stats may be NULL. */
int snap_writer_commit(struct snap_writer *w, struct snap_writer_stats *stats);

/* Drop the snapshot and free @w.  Accepts NULL. */
void snap_writer_abort(struct snap_writer *w);

#endif
