/* The data path of snapshots and restores: device memory to a snapshot
 * writer (capture) and a snapshot reader back to device memory (fill).
 * docs/snapshot-data-path.md has the design and what each stage costs.
 *
 *     capture_open(be, dev, &cfg, &c);           once per worker
 *     snapshot:  snap_writer_begin(...);
 *                capture_pause(c, w, regions, n, &st);   guest stopped
 *                ... let the guest run ...
 *                capture_finish(c, &st);                 shadow drained
 *                snap_writer_journal_set(w, fd); snap_writer_commit(w, ...);
 *     restore:   map every region at its address, then
 *                capture_fill(c, reader, NULL, &st);
 *     capture_close(c);
 *
 * Chunk hashes: every chunk of every region is hashed where it lives (the
 * hash of snapshot/snap_hash.h), by the CUDA kernel embedded in ternd when
 * it loads and passes a self-test at open, else on the CPU (sim: in place,
 * its device memory is the worker's; cuda without the kernel: after a copy).
 * All-zero chunks and chunks whose hash equals the parent's are recorded
 * without copying their bytes.
 *
 * Ownership: the capture owns its streams, pinned staging buffers, the hash
 * module and, between pause and finish, the shadow buffer (device memory
 * outside the guest's arena, cuMemAlloc).  The backend and the context
 * current at open must outlive it.
 *
 * Threading: one call at a time, each on a thread where the context that
 * was current at capture_open is current (capture_finish may run on another
 * thread than capture_pause).  Between capture_pause and
 * capture_finish the writer belongs to the capture (a background thread
 * adds the shadowed chunks to it): the caller must not use it then.
 * capture_pause and capture_finish never return while the writer still
 * holds one of the capture's buffers, so after either returns (even with an
 * error) the caller may abort or commit the writer and close the capture.
 *
 * Regions must be mapped device memory (the tracker's live regions): the
 * hash reads them on the device, and on sim in place.
 *
 * Errors: 0 or a negative errno: -EIO for a CUDA error (logged with its
 * name), -ENOMEM, -EINVAL for regions that do not fit the writer or reader,
 * or the writer's / reader's own error (snap_store_error() says more).
 */
#ifndef TERN_CAPTURE_H
#define TERN_CAPTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

struct snap_writer;
struct snap_reader;
struct capture;

/* Shadow size meaning "as much as the device has free, less the reserve". */
#define CAPTURE_SHADOW_AUTO UINT64_MAX

/* Hash on the CPU even where the kernel works (testing, diagnosis). */
#define CAPTURE_HASH_HOST 0x1u

struct capture_config {
	uint64_t shadow_max;      /* device bytes for the shadow; 0: never shadow */
	uint64_t shadow_reserve;  /* device bytes left free for the guest; 0: 512 MiB */
	uint64_t staging_bytes;   /* per pinned staging buffer; 0: 64 MiB (>= 1 chunk) */
	unsigned staging_count;   /* staging buffers; 0: 4 (at least 2) */
	unsigned streams;         /* copy streams; 0: 2 */
	unsigned threads;         /* CPU hash / restore decompression threads; 0: 4 */
	unsigned flags;           /* CAPTURE_HASH_* */
};

/* One range of device memory to capture: the tracker's region record. */
struct capture_region {
	uint64_t addr;
	uint64_t size;            /* > 0; need not be a chunk multiple */
	uint32_t flags;           /* opaque, stored with the region */
};

#define CAPTURE_ENGINE_KERNEL 1u  /* chunk hashes by the GPU kernel */
#define CAPTURE_ENGINE_HOST   2u  /* chunk hashes on the CPU */

struct capture_stats {
	uint32_t engine;          /* CAPTURE_ENGINE_* used by the last pause */
	uint64_t pause_ns;        /* capture_pause, guest stopped */
	uint64_t hash_ns;         /* of which hashing */
	uint64_t shadow_alloc_ns; /* of which allocating the shadow */
	uint64_t drain_ns;        /* background drain of the shadow */
	uint64_t bytes_hashed;
	uint64_t chunks;
	uint64_t chunks_zero;
	uint64_t chunks_unchanged;
	uint64_t chunks_shadowed; /* copied device to device during the pause */
	uint64_t chunks_direct;   /* copied device to host during the pause */
	uint64_t bytes_copied;    /* device to host (capture) or host to device (fill) */
	uint64_t shadow_bytes;    /* size of the shadow buffer used */
	uint64_t fill_ns;
	uint64_t fill_bytes;      /* logical bytes restored, zero chunks included */
	uint64_t fill_bytes_held; /* of which the device held already (a fill's base) */
	uint64_t fill_bytes_per_s;
};

/* Set up streams, staging and the hash engine on @dev; the calling
 * thread's current context is the one used (and set on the capture's own
 * threads).  @cfg may be NULL.  *out is freed by capture_close(). */
int capture_open(struct backend *be, CUdevice dev, const struct capture_config *cfg,
		 struct capture **out);
/* Waits for a drain still running.  Accepts NULL. */
void capture_close(struct capture *c);

/* The engine capture_pause will use (CAPTURE_ENGINE_*). */
uint32_t capture_engine(const struct capture *c);

/* The guest is stopped and the device synchronised by the caller.  Add
 * @regions to @w (in that order: region i of the snapshot is regions[i]),
 * hash every chunk, record zero and unchanged chunks, copy the changed ones
 * into the shadow while it has room and the rest device to host into the
 * writer.  Returns once nothing reads guest memory any more: the guest may
 * run.  @st (may be NULL) is reset and filled. */
int capture_pause(struct capture *c, struct snap_writer *w, const struct capture_region *regions,
		  unsigned n, struct capture_stats *st);

/* Wait for the shadow to drain into the writer and free the shadow.  Call
 * once after every capture_pause that returned 0, before committing.
 * Adds drain_ns and the copy figures to @st (may be NULL). */
int capture_finish(struct capture *c, struct capture_stats *st);

/* What the device memory holds before a fill, so that only the difference
 * is written (a migration's prepared worker fills each round over the one
 * before, checkpoint.c): a chunk of @r whose region has the address, size
 * and chunk size of a region of @held, and whose content hash (or zero
 * flag) equals that region's chunk there, is left as it is. Regions of @r
 * whose @skip is set are not written at all (not mapped by the caller). */
struct snap_chunk_list;
struct capture_fill_base {
	const struct snap_chunk_list *held;     /* NULL: nothing known */
	const bool *skip;                       /* per region of @r, or NULL */
};

/* Restore: write every chunk of every region of @r to the device at the
 * region's address (the caller mapped them all); zero chunks are memset.
 * @base (may be NULL) says what the device holds already. Returns once the
 * device holds the bytes.  @st (may be NULL) is reset and filled. */
int capture_fill(struct capture *c, struct snap_reader *r, const struct capture_fill_base *base,
		 struct capture_stats *st);

#endif
