/* Shared by the snapshot store's .c files; not installed, not for callers.
 *
 * snap_store.c   store directory, lock, list, verify, rm, gc, clean-up
 * snap_io.c      durable file helpers and the ENOSPC fault hook
 * snap_chunk_map.c  hash -> location table (per reader / writer)
 * snap_pack.c    pack files: create, append, seal (index), read a frame
 * snap_writer.c  the write pipeline;  snap_reader.c  reads and restores
 */
#ifndef TERN_SNAP_INTERNAL_H
#define TERN_SNAP_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <dirent.h>
#include <stdint.h>

#include "snap_format.h"
#include "snap_store.h"

struct snap_store {
	char *path;
	int dir_fd;
	int packs_fd;
	int snaps_fd;
	struct snap_store_config cfg;
	pthread_mutex_t lock;          /* guards errmsg and written */
	char errmsg[512];
	uint64_t written;              /* bytes written, for the fault hook */
};

#define SNAP_LOCK_FILE "lock"
#define SNAP_MANIFEST_FILE "manifest"
#define SNAP_JOURNAL_FILE "journal"
#define SNAP_CHUNKS_FILE "chunks"
#define SNAP_TMP_PREFIX ".tmp-"
#define SNAP_RM_PREFIX ".rm-"
/* Files we read whole; a larger manifest or chunk list is not ours. */
#define SNAP_MANIFEST_MAX (64u << 10)
#define SNAP_CHUNKS_MAX (1u << 30)
#define SNAP_INDEX_MAX (1u << 30)

/* Record the failure message (also logged at debug level); returns @rc. */
__attribute__((format(printf, 3, 4)))
int snap_store_fail(struct snap_store *s, int rc, const char *fmt, ...);

/* Advice appended to a write error: what a full disk means for the store. */
const char *snap_write_hint(int rc);

/* flock on STORE/lock: returns the fd (close it to unlock) or -errno.
 * @nonblock: -EBUSY instead of waiting. */
int snap_store_lock(struct snap_store *s, int exclusive, int nonblock);

/* Remove leftovers of crashed writers; the caller holds the lock
 * exclusively, so no writer is running. */
void snap_store_cleanup_locked(struct snap_store *s);

/* Whether .tmp-NAME directory @tmpname is the leftover of a writer that
 * died: no writer holds its lock (a writer flocks its directory for its
 * whole life).  1 leftover, 0 being written, or -errno (-ENOENT: gone). */
int snap_store_tmp_abandoned(struct snap_store *s, const char *tmpname);

/* Read and verify the manifest and chunk list of complete snapshot @name.
 * @cl may be NULL.  Errors are recorded with snap_store_fail. */
int snap_store_snapshot_load(struct snap_store *s, const char *name,
			     struct snap_manifest *m, struct snap_chunk_list *cl);

/* ---- io ---- */
uint64_t snap_now_ns(void);
/* write() all of @buf, counting against the fault hook. */
int snap_io_write_all(struct snap_store *s, int fd, const void *buf, size_t len);
/* pread exactly @len bytes; -EBADMSG if the file is shorter. */
int snap_io_pread_all(int fd, void *buf, size_t len, uint64_t off);
/* Read a whole file of at most @max bytes (malloc'ed). */
int snap_io_file_read(int dir_fd, const char *name, size_t max, uint8_t **buf, size_t *len);
/* Create @name (must not exist), write, fsync, close. */
int snap_io_file_write(struct snap_store *s, int dir_fd, const char *name,
		       const void *buf, size_t len);
int snap_io_fsync_dir(int dir_fd);
/* Open directory @name under @dir_fd for readdir (@flags adds to O_RDONLY |
 * O_DIRECTORY | O_CLOEXEC). 0 with *@out to closedir(), or -errno. */
int snap_io_dir_open(int dir_fd, const char *name, int flags, DIR **out);
/* Remove directory @name under @dir_fd and the plain files in it. */
int snap_io_dir_remove(int dir_fd, const char *name);

/* ---- hash -> location ---- */
#define SNAP_LOC_PENDING 1u   /* a writer claimed it; bytes not yet in a pack */
#define SNAP_LOC_WRITTEN 2u

struct snap_chunk_loc {
	uint8_t hash[SNAP_HASH_BYTES];
	uint64_t pack_id;
	uint64_t offset;
	uint32_t raw_size;
	uint32_t stored_size;
	uint32_t state;               /* 0: empty slot */
};

struct snap_chunk_map {
	struct snap_chunk_loc *slots;
	uint64_t cap;                 /* power of two */
	uint64_t count;
};

void snap_chunk_map_init(struct snap_chunk_map *m);
void snap_chunk_map_free(struct snap_chunk_map *m);
/* NULL if absent.  The pointer is valid until the next insert. */
struct snap_chunk_loc *snap_chunk_map_find(const struct snap_chunk_map *m,
					   const uint8_t hash[SNAP_HASH_BYTES]);
/* Find or add (an added slot has the hash and state PENDING).  1 if added, 0 if found,
 * -ENOMEM.  *loc valid until the next insert. */
int snap_chunk_map_insert(struct snap_chunk_map *m, const uint8_t hash[SNAP_HASH_BYTES],
			  struct snap_chunk_loc **loc);

/* ---- packs ---- */
struct snap_pack_out {
	uint64_t id;
	int fd;                        /* -1 once closed */
	uint64_t bytes;
	uint64_t written_back;         /* bytes [0, written_back) handed to writeback */
	int no_write_behind;           /* the file system has no sync_file_range */
	struct snap_index_entry *entries;
	uint64_t count, cap;
	int sealed;                    /* its index is on disk */
};

void snap_pack_name(char *out, size_t n, uint64_t id, const char *ext);
/* Create a new pack with a fresh id and write its header. */
int snap_pack_create(struct snap_store *s, struct snap_pack_out *p);
/* Append a frame; *offset receives where its header starts. */
int snap_pack_append(struct snap_store *s, struct snap_pack_out *p, const struct snap_frame *f,
		     const void *stored, uint64_t *offset);
/* After appends: hand the disk what was appended since the last window,
 * once that is a window's worth, and wait for the windows before it
 * (snap_pack.c says why).  Apart from append so that a writer can give the
 * caller's buffer back before it may wait. */
int snap_pack_write_behind(struct snap_pack_out *p);
/* fsync and close the pack fd (keeps the entries). */
int snap_pack_close(struct snap_store *s, struct snap_pack_out *p);
/* Close if open, write its index durably (tmp, fsync, rename).  The packs
 * directory fsync is the caller's. */
int snap_pack_seal(struct snap_store *s, struct snap_pack_out *p);
/* Close and unlink an unsealed pack; free entries. */
void snap_pack_discard(struct snap_store *s, struct snap_pack_out *p);
void snap_pack_out_free(struct snap_pack_out *p);

/* Load every pack index of the store into @map (state WRITTEN). */
int snap_store_map_load(struct snap_store *s, struct snap_chunk_map *map);

/* Read the header of the frame at @loc into @f and check it against @loc.
 * -EBADMSG on damage. */
int snap_pack_frame_head_read(int pack_fd, const struct snap_chunk_loc *loc, struct snap_frame *f);
/* The stored bytes of the frame @f at @loc into @stored (cap >=
 * f->stored_size), their checksum checked.  -EBADMSG on damage. */
int snap_pack_frame_body_read(int pack_fd, const struct snap_chunk_loc *loc, const struct snap_frame *f,
			      uint8_t *stored);
/* Both: header check against @loc, stored bytes into @stored (cap >=
 * loc->stored_size), checksum.  -EBADMSG on damage. */
int snap_pack_frame_read(int pack_fd, const struct snap_chunk_loc *loc,
			 struct snap_frame *f, uint8_t *stored);
/* Read the bytes of raw frame @f (its header checked by
 * snap_pack_frame_head_read) straight into @dst (raw_size bytes) and check
 * its content hash, which covers exactly those bytes: the frame checksum
 * would read them a second time for nothing.  @xxh3_state: an
 * XXH3_state_t of the caller's.  -EBADMSG on damage (@dst then holds
 * whatever was read). */
int snap_pack_frame_raw_read(int pack_fd, const struct snap_chunk_loc *loc, const struct snap_frame *f,
			     uint8_t *dst, void *xxh3_state);
/* Decode a checked frame into @dst (raw_size bytes) and verify the content
 * hash.  @zctx: a ZSTD_DCtx. */
int snap_frame_decode_into(const struct snap_frame *f, const uint8_t *stored,
			   void *dst, size_t cap, void *zctx);

#endif
