/* Reading one snapshot back: manifest, regions, chunks, journal.
 *
 * snap_reader_open() verifies the manifest and chunk-list checksums and
 * loads the store's pack indexes; it holds the store's lock shared, so rm
 * and gc wait (-EBUSY) until the reader is closed.  Every chunk read checks
 * the frame header and the content hash (a compressed frame's stored bytes
 * also against their checksum, before they are decoded): corrupted bytes
 * give -EBADMSG and snap_store_error() names the region and chunk.
 *
 * Threading: after open, snap_reader_chunk_read() may be called from many
 * threads at once (it uses pread and a context per thread);
 * the accessors are read-only.  snap_reader_region_read() runs its own
 * threads.  Close once, after every call returned.
 */
#ifndef TERN_SNAP_READER_H
#define TERN_SNAP_READER_H

#include <stddef.h>
#include <stdint.h>

#include "snap_store.h"

struct snap_reader;

int snap_reader_open(struct snap_store *store, const char *name, struct snap_reader **out);
void snap_reader_close(struct snap_reader *r);  /* accepts NULL */

/* Decoded manifest and chunk list; owned by the reader. */
const struct snap_manifest *snap_reader_manifest(const struct snap_reader *r);
const struct snap_chunk_list *snap_reader_chunk_list(const struct snap_reader *r);

/* What one thread needs to read chunks: a decompression context, a hash
 * state and room for a compressed frame.  Made for @r's chunk size; use it
 * with @r only, on one thread at a time. */
struct snap_reader_ctx;
int snap_reader_ctx_new(const struct snap_reader *r, struct snap_reader_ctx **out);
void snap_reader_ctx_free(struct snap_reader_ctx *ctx);  /* accepts NULL */

/* Read chunk @index of @region into @dst (@cap >= the chunk's raw size).
 * Zero chunks are memset.  A chunk stored raw is read straight into @dst
 * (no intermediate copy), so @dst may be pinned staging memory.  @ctx is
 * the calling thread's (reused), or NULL to make one for this call. */
int snap_reader_chunk_read(struct snap_reader *r, uint32_t region, uint64_t index,
			   void *dst, size_t cap, struct snap_reader_ctx *ctx);

/* Chunk @index of @region as its pack stores it, for a reader that sends
 * it on (the migration stream): the stored bytes into @dst (@cap >= the
 * chunk's raw size: no stored form is larger), their codec (SNAP_CODEC_RAW
 * or SNAP_CODEC_ZSTD, a zstd frame of the raw bytes) in *@codec and their
 * length in *@stored_len.  The frame's checksum is checked, its content
 * hash is not: whoever decodes it checks that.  -EINVAL for a zero chunk. */
int snap_reader_chunk_stored(struct snap_reader *r, uint32_t region, uint64_t index, void *dst, size_t cap,
			     uint32_t *codec, uint32_t *stored_len);

/* Called from a worker thread when chunk @index of the region sits in
 * dst + offset (@len bytes).  A non-zero return stops the read and is
 * returned by snap_reader_region_read. */
typedef int (*snap_chunk_ready_fn)(void *arg, uint64_t index, uint64_t offset, uint32_t len);

/* Read all of @region into @dst (@cap >= region size) with @threads
 * threads (0: the store's worker count), calling @ready (may be NULL) for
 * each chunk as it lands, so the caller can start its host-to-device copy
 * while the rest decompresses. */
int snap_reader_region_read(struct snap_reader *r, uint32_t region, void *dst, size_t cap,
			    unsigned threads, snap_chunk_ready_fn ready, void *arg);

/* Write the journal copy (verified against the manifest) to @fd, from its
 * current position.  The caller then opens it with LMDB. */
int snap_reader_journal_write(struct snap_reader *r, int fd);

#endif
