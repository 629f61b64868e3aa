/* Journal records: the versioned little-endian encodings stored as LMDB values.
 *
 * Each record starts with a 4 byte header: u16 version, u16 fixed length (the
 * header plus the fixed fields of that version).  Decoders check both, check
 * every length against the buffer they are given, and reject unknown versions,
 * trailing bytes and non-zero reserved fields, so that a record decodes in
 * exactly one way and a decoded record re-encodes to the same bytes.  The
 * layouts are described in docs/journal.md; the _Static_asserts in record.c
 * pin them.
 *
 * These functions touch no LMDB and no global state: any thread may call them,
 * and `ckpt inspect` or a fuzz target may feed them arbitrary bytes.
 *
 * Lifetime: a decoded record's pointers (object args, meta bytes) point into
 * the buffer that was decoded and live as long as it does.
 */
#ifndef TERN_TRACKER_RECORD_H
#define TERN_TRACKER_RECORD_H

#include <stddef.h>
#include <stdint.h>

/* Version of each record type this build writes and reads. */
#define TRACKER_OBJECT_VERSION 1u
#define TRACKER_REGION_VERSION 1u
#define TRACKER_IMAGE_VERSION 1u
#define TRACKER_META_VERSION 1u

/* Fixed part of each record (header included); see docs/journal.md. */
#define TRACKER_OBJECT_FIXED 24u
#define TRACKER_REGION_SIZE 32u
#define TRACKER_IMAGE_SIZE 24u
#define TRACKER_META_FIXED 16u

/* Bounds: the executor caps what a guest may make us store. */
#define TRACKER_OBJECT_ARGS_MAX (64u * 1024u)
#define TRACKER_META_VALUE_MAX (16u * 1024u * 1024u)
#define TRACKER_IMAGE_MAX (1u << 30)

/* Image keys are the canonical (big-endian) XXH3-128 of the image bytes. */
#define TRACKER_HASH_SIZE 16u

/* A live object.  kind and flags are the executor's numbering: opaque here.
 * parent is the handle of the object it was created from, 0 for none. */
struct tracker_object {
	uint32_t kind;
	uint32_t flags;
	uint64_t parent;
	const void *args;  /* creation arguments, args_len bytes; may be NULL if 0 */
	uint32_t args_len; /* <= TRACKER_OBJECT_ARGS_MAX */
};

/* A device memory region; its address is the key. */
struct tracker_region {
	uint64_t size;  /* bytes, > 0 */
	uint64_t owner; /* handle of the owning object (context, pool), 0 for none */
	uint32_t flags;
	uint32_t kind;  /* device, managed, pinned host...: executor's numbering */
};

/* The bookkeeping of one stored image; the bytes are kept beside it. */
struct tracker_image {
	uint32_t format; /* fatbin, cubin, PTX...: executor's numbering */
	uint64_t refs;   /* modules/libraries that loaded it, >= 1 */
	uint64_t size;   /* bytes of the image, <= TRACKER_IMAGE_MAX */
};

/* Meta value types; ids are stored on disk and never reused. */
enum tracker_meta_type {
	TRACKER_META_T_U64 = 1,   /* u64 */
	TRACKER_META_T_BYTES = 2, /* bytes, len */
	TRACKER_META_T_REPLY = 3, /* u64 (sequence number) + bytes (encoded reply) */
};

struct tracker_meta_value {
	uint32_t type;     /* enum tracker_meta_type */
	uint64_t u64;      /* T_U64: the value; T_REPLY: the sequence number */
	const void *bytes; /* T_BYTES, T_REPLY */
	uint32_t len;      /* bytes' length, <= TRACKER_META_VALUE_MAX */
};

/* Encoded sizes.  Encoders return 0, -EINVAL for a record outside the bounds
 * above, -ENOBUFS when cap is smaller than the encoded size.  Decoders return
 * 0, -EPROTONOSUPPORT for an unknown version, -EBADMSG for anything else
 * malformed (truncated, wrong lengths, trailing bytes, reserved bits set). */
size_t tracker_object_encoded_size(const struct tracker_object *o);
int tracker_object_encode(const struct tracker_object *o, void *buf, size_t cap);
int tracker_object_decode(struct tracker_object *o, const void *buf, size_t len);

int tracker_region_encode(const struct tracker_region *r, void *buf, size_t cap);
int tracker_region_decode(struct tracker_region *r, const void *buf, size_t len);

int tracker_image_encode(const struct tracker_image *im, void *buf, size_t cap);
int tracker_image_decode(struct tracker_image *im, const void *buf, size_t len);

size_t tracker_meta_encoded_size(const struct tracker_meta_value *v);
int tracker_meta_encode(const struct tracker_meta_value *v, void *buf, size_t cap);
int tracker_meta_decode(struct tracker_meta_value *v, const void *buf, size_t len);

/* Keys: big-endian so that LMDB's memcmp order is numeric order. */
void tracker_key_u64_encode(uint64_t v, uint8_t out[8]);
uint64_t tracker_key_u64_decode(const uint8_t in[8]);
void tracker_key_u32_encode(uint32_t v, uint8_t out[4]);
uint32_t tracker_key_u32_decode(const uint8_t in[4]);

/* The image key of these bytes: XXH3-128 in canonical (big-endian) form. */
void tracker_image_hash(const void *bytes, size_t size, uint8_t out[TRACKER_HASH_SIZE]);

#endif
