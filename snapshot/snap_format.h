/* On-disk encodings of the snapshot store: manifest, chunk list, pack file
 * header, pack frame header and pack index.  docs/snapshot-format.md is the
 * reference; this header and snap_format.c are its only implementation.
 *
 * Every file starts with an 8-byte magic and a u32 version; every field is
 * fixed-width little-endian and is encoded byte by byte, never by copying a
 * struct.  The in-memory structs below are decoded views, not disk layouts.
 *
 * Decoders take untrusted bytes: every length is checked against the input
 * before use, every allocation is bounded by the input size, and a bad input
 * returns -EBADMSG (damaged / not ours) or -ENOTSUP (a version we do not read).
 * They are pure functions: safe from any thread.
 */
#ifndef TERN_SNAP_FORMAT_H
#define TERN_SNAP_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "le.h"

#define SNAP_FORMAT_VERSION 1u

#define SNAP_MAGIC_MANIFEST "TRNSMANI"
#define SNAP_MAGIC_CHUNKS   "TRNSCHNK"
#define SNAP_MAGIC_PACK     "TRNSPACK"
#define SNAP_MAGIC_INDEX    "TRNSPIDX"
#define SNAP_MAGIC_JOURNAL  "TRNSJRNL"
#define SNAP_FRAME_MAGIC    0x4b4e4843u /* "CHNK" read as little-endian */

#define SNAP_HASH_BYTES 16
#define SNAP_CREDENTIAL_BYTES 32

/* Manifest auth flags: which of the session's credential and owner uid it
 * holds (a manifest written before they existed holds neither). */
#define SNAP_AUTH_CREDENTIAL 0x1u
#define SNAP_AUTH_OWNER_UID  0x2u
#define SNAP_AUTH_KNOWN (SNAP_AUTH_CREDENTIAL | SNAP_AUTH_OWNER_UID)
#define SNAP_NAME_MAX 255          /* snapshot, session and device names */
/* A snapshot's own name is shorter: while it is written its directory is
 * ".tmp-NAME", and a file name holds at most 255 bytes. */
#define SNAP_SNAPSHOT_NAME_MAX 250
_Static_assert(SNAP_SNAPSHOT_NAME_MAX + sizeof(".tmp-") - 1 <= SNAP_NAME_MAX, "a snapshot being written has a file name");
#define SNAP_CHUNK_SIZE_MIN (4u << 10)
#define SNAP_CHUNK_SIZE_MAX (64u << 20)

/* Fixed sizes of the encoded records; the encoders assert them. */
#define SNAP_MANIFEST_FIXED_BYTES 216u
#define SNAP_CHUNKS_HEADER_BYTES  40u
#define SNAP_REGION_RECORD_BYTES  32u
#define SNAP_CHUNK_RECORD_BYTES   32u
#define SNAP_PACK_HEADER_BYTES    32u
#define SNAP_FRAME_HEADER_BYTES   48u
#define SNAP_INDEX_HEADER_BYTES   40u
#define SNAP_INDEX_RECORD_BYTES   32u
#define SNAP_JOURNAL_HEADER_BYTES 16u
#define SNAP_TRAILER_BYTES        SNAP_HASH_BYTES

/* Frame codecs; ids are never reused. */
#define SNAP_CODEC_RAW  0u
#define SNAP_CODEC_ZSTD 1u

/* Chunk record flags. */
#define SNAP_CHUNK_ZERO      0x1u /* all zero: no bytes stored, hash is zero */
#define SNAP_CHUNK_FROM_PARENT 0x2u /* entry copied from the parent unread */
#define SNAP_CHUNK_FLAGS_KNOWN (SNAP_CHUNK_ZERO | SNAP_CHUNK_FROM_PARENT)

struct snap_manifest {
	uint32_t version;
	uint64_t created_ns;          /* CLOCK_REALTIME, ns since the epoch */
	uint32_t chunk_size;
	uint32_t driver_version;      /* as cuDriverGetVersion reports it */
	uint8_t device_uuid[16];
	uint32_t codec;               /* codec used for new chunks */
	int32_t codec_level;
	uint64_t region_count;
	uint64_t chunk_count;
	uint64_t zero_chunks;
	uint64_t new_chunks;          /* chunks this snapshot added to the store */
	uint64_t logical_bytes;       /* sum of region sizes */
	uint64_t new_stored_bytes;    /* bytes this snapshot added to packs */
	uint64_t ref_stored_bytes;    /* stored bytes of every non-zero entry */
	uint64_t journal_bytes;       /* size of the journal file (with header) */
	uint64_t chunks_bytes;        /* size of the chunk-list file */
	uint8_t journal_hash[SNAP_HASH_BYTES]; /* XXH3-128 of the journal file */
	uint8_t chunks_hash[SNAP_HASH_BYTES];  /* XXH3-128 of the chunk-list file */
	char name[SNAP_NAME_MAX + 1];
	char parent[SNAP_NAME_MAX + 1];        /* "" when none */
	char session_id[SNAP_NAME_MAX + 1];
	char device_name[SNAP_NAME_MAX + 1];
	/* Who may come back to the session restored from it (common/auth.h):
	 * the session credential and the uid of a unix guest that made it. */
	uint32_t auth_flags;          /* SNAP_AUTH_* */
	uint32_t owner_uid;
	uint8_t credential[SNAP_CREDENTIAL_BYTES];
};

struct snap_chunk_ref {
	uint8_t hash[SNAP_HASH_BYTES];  /* XXH3-128 of the raw bytes; zero if ZERO */
	uint64_t device_hash;           /* caller's change-detection hash */
	uint32_t stored_size;           /* bytes in the pack; 0 if ZERO */
	uint32_t flags;                 /* SNAP_CHUNK_* */
};

struct snap_region {
	uint64_t addr;
	uint64_t size;
	uint32_t flags;                 /* tracker's region flags, opaque here */
	uint64_t chunk_count;           /* ceil(size / chunk_size) */
	struct snap_chunk_ref *chunks;
};

struct snap_chunk_list {
	uint32_t chunk_size;
	uint64_t region_count;
	uint64_t chunk_count;
	struct snap_region *regions;    /* owned; free with snap_chunk_list_free */
};

struct snap_frame {
	uint32_t codec;
	uint8_t hash[SNAP_HASH_BYTES];  /* content hash of the raw bytes */
	uint32_t raw_size;
	uint32_t stored_size;
	uint64_t stored_xxh64;          /* XXH3-64 of the stored bytes */
};

struct snap_index_entry {
	uint8_t hash[SNAP_HASH_BYTES];
	uint64_t offset;                /* of the frame header in the pack */
	uint32_t raw_size;
	uint32_t stored_size;
};

struct snap_index {
	uint64_t pack_id;
	uint64_t pack_bytes;            /* pack length the index covers */
	uint64_t count;
	struct snap_index_entry *entries; /* owned; free() */
};

/* A growable output buffer for the encoders. */
struct snap_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
	int error;                      /* sticky -ENOMEM */
};

void snap_buf_free(struct snap_buf *b);

/* XXH3-128 as 16 little-endian bytes (low half first). */
void snap_hash128(const void *data, size_t len, uint8_t out[SNAP_HASH_BYTES]);
/* The same of what was fed to @xxh3_state (an XXH3_state_t), in pieces. */
void snap_hash128_digest(const void *xxh3_state, uint8_t out[SNAP_HASH_BYTES]);
int snap_hash_is_zero(const uint8_t hash[SNAP_HASH_BYTES]);
/* "0123..." 32 hex digits + NUL. */
void snap_hash_hex(const uint8_t hash[SNAP_HASH_BYTES], char out[33]);

/* True if @name is a valid snapshot name: 1..SNAP_SNAPSHOT_NAME_MAX of
 * [A-Za-z0-9._-], not starting with '.'. */
int snap_name_valid(const char *name);
/* Why @name is not a valid snapshot name, as an operator reads it ("name
 * too long (max 250)"), or NULL when it is valid.  A static string. */
const char *snap_name_problem(const char *name);

/* Manifest: fixed part, four length-prefixed strings, XXH3-128 trailer. */
int snap_manifest_encode(const struct snap_manifest *m, struct snap_buf *out);
int snap_manifest_decode(const uint8_t *buf, size_t len, struct snap_manifest *out);

/* Chunk list: header, then per region a record and its chunk records, then
 * an XXH3-128 trailer.  On success *out owns its arrays. */
int snap_chunk_list_encode(const struct snap_chunk_list *cl, struct snap_buf *out);
int snap_chunk_list_decode(const uint8_t *buf, size_t len, struct snap_chunk_list *out);
void snap_chunk_list_free(struct snap_chunk_list *cl);
/* The region of @cl at @addr, of @size, or NULL; @cl's regions in address
 * order (a list a caller sorted: a snapshot's are in the tracker's order). */
const struct snap_region *snap_chunk_list_region_at(const struct snap_chunk_list *cl, uint64_t addr,
						    uint64_t size);
/* Raw bytes of chunk @index of @r. */
uint32_t snap_region_chunk_bytes(const struct snap_region *r, uint32_t chunk_size, uint64_t index);

/* Pack file header (32 bytes). */
void snap_pack_header_encode(uint64_t pack_id, uint64_t created_ns, uint8_t out[SNAP_PACK_HEADER_BYTES]);
int snap_pack_header_decode(const uint8_t *buf, size_t len, uint64_t *pack_id);

/* Frame header (48 bytes, self-checksummed); the stored bytes follow it. */
void snap_frame_encode(const struct snap_frame *f, uint8_t out[SNAP_FRAME_HEADER_BYTES]);
int snap_frame_decode(const uint8_t *buf, size_t len, struct snap_frame *out);
/* Check the stored bytes of a frame against the checksum in its header.
 * The content hash is checked by the caller once the bytes are decoded.
 * Returns 0 or -EBADMSG. */
int snap_frame_body_check(const struct snap_frame *f, const uint8_t *stored, size_t stored_len);

/* Pack index file. */
int snap_index_encode(const struct snap_index *idx, struct snap_buf *out);
int snap_index_decode(const uint8_t *buf, size_t len, struct snap_index *out);

/* A writer's progress log (STORE/snaps/.tmp-NAME/progress, when the writer
 * was asked for one): what it settled so far, in checksummed records that a
 * reader follows while the snapshot is written (ckpt migrate streams each
 * chunk once it is in a pack).  A 16-byte header (magic, version, reserved),
 * then records: u32 type, u32 body length, the body, and XXH3-64 of those
 * bytes seeded with the previous record's sum (0 for the first), so that a
 * record lost, reordered or damaged breaks the chain. */
#define SNAP_MAGIC_PROGRESS "TRNSPROG"
#define SNAP_PROGRESS_HEADER_BYTES 16u
#define SNAP_PROGRESS_RECORD_HEAD_BYTES 8u
#define SNAP_PROGRESS_SUM_BYTES 8u
#define SNAP_PROGRESS_BODY_MAX 2048u
#define SNAP_PROGRESS_FILE "progress"

enum snap_progress_type {
	SNAP_PROGRESS_BEGIN = 1,       /* the manifest's identity fields */
	SNAP_PROGRESS_REGION = 2,      /* one region, in the writer's order */
	SNAP_PROGRESS_CHUNK = 3,       /* one chunk settled (none before every region) */
	SNAP_PROGRESS_COMMIT = 4,      /* the last: every chunk was logged */
};

enum snap_progress_chunk_kind {
	SNAP_PROGRESS_CHUNK_ZERO = 0,
	SNAP_PROGRESS_CHUNK_PARENT = 1, /* the parent's entry, copied unread */
	SNAP_PROGRESS_CHUNK_STORED = 2, /* its frame is written at pack_id, offset */
};

struct snap_progress_chunk {
	uint32_t region;
	uint32_t kind;
	uint64_t index;
	uint64_t device_hash;
	uint8_t hash[SNAP_HASH_BYTES];  /* zero for ZERO */
	uint64_t pack_id;               /* STORED only */
	uint64_t offset;
	uint32_t stored_size;
};

struct snap_progress_record {
	uint32_t type;
	/* BEGIN: chunk_size, driver_version, device_uuid, name, parent,
	 * session_id, device_name, auth_flags, owner_uid, credential; the
	 * other fields zero. */
	struct snap_manifest begin;
	struct snap_region region;      /* REGION: chunks NULL */
	struct snap_progress_chunk chunk;
	uint64_t commit_regions;        /* COMMIT: records of each kind before it */
	uint64_t commit_chunks;
};

void snap_progress_header_encode(uint8_t out[SNAP_PROGRESS_HEADER_BYTES]);
int snap_progress_header_decode(const uint8_t *buf, size_t len);
/* Append record @r to @out, chained on *@sum (updated). -EINVAL for a
 * record that cannot be encoded (unknown type or kind, a name too long). */
int snap_progress_record_encode(const struct snap_progress_record *r, uint64_t *sum, struct snap_buf *out);
/* Decode the record at the start of @buf (@len bytes), chained on @sum:
 * 0 with *@out, *@used and *@next_sum; -EAGAIN if @len holds only part of
 * a well-formed start of one (more may come); -EBADMSG for a damaged or
 * malformed record. */
int snap_progress_record_decode(const uint8_t *buf, size_t len, uint64_t sum, struct snap_progress_record *out,
				size_t *used, uint64_t *next_sum);

/* Journal copy header (16 bytes: magic + version + reserved), the caller's
 * file follows verbatim. */
void snap_journal_header_encode(uint8_t out[SNAP_JOURNAL_HEADER_BYTES]);
int snap_journal_header_decode(const uint8_t *buf, size_t len);

#endif
