/* Encoders and bounds-checked decoders of the snapshot store's files.
 * Layouts are given by the offset tables below; docs/snapshot-format.md
 * describes the same bytes for humans. */
#include "snap_format.h"
#include "snap_sessions.h"
#include "snap_vm.h"
#include "le.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Manifest fixed part. */
enum {
	MAN_MAGIC = 0, MAN_VERSION = 8, MAN_FIXED = 12, MAN_CREATED = 16,
	MAN_CHUNK_SIZE = 24, MAN_DRIVER = 28, MAN_UUID = 32, MAN_CODEC = 48,
	MAN_LEVEL = 52, MAN_REGIONS = 56, MAN_CHUNKS = 64, MAN_ZERO = 72,
	MAN_NEW = 80, MAN_LOGICAL = 88, MAN_NEW_STORED = 96, MAN_REF_STORED = 104,
	MAN_JOURNAL_BYTES = 112, MAN_CHUNKS_BYTES = 120, MAN_JOURNAL_HASH = 128,
	MAN_CHUNKS_HASH = 144, MAN_LEN_NAME = 160, MAN_LEN_PARENT = 162,
	MAN_LEN_SESSION = 164, MAN_LEN_DEVICE = 166, MAN_CREDENTIAL = 168,
	MAN_OWNER_UID = 200, MAN_AUTH_FLAGS = 204, MAN_RESERVED = 208,
	MAN_END = 216,
};
_Static_assert(MAN_END == SNAP_MANIFEST_FIXED_BYTES, "manifest fixed part");

enum {
	CL_MAGIC = 0, CL_VERSION = 8, CL_CHUNK_SIZE = 12, CL_REGIONS = 16,
	CL_CHUNKS = 24, CL_RESERVED = 32, CL_END = 40,
};
_Static_assert(CL_END == SNAP_CHUNKS_HEADER_BYTES, "chunk list header");

enum { RG_ADDR = 0, RG_SIZE = 8, RG_FLAGS = 16, RG_RESERVED = 20, RG_CHUNKS = 24, RG_END = 32 };
_Static_assert(RG_END == SNAP_REGION_RECORD_BYTES, "region record");

enum { CR_HASH = 0, CR_DEVHASH = 16, CR_STORED = 24, CR_FLAGS = 28, CR_END = 32 };
_Static_assert(CR_END == SNAP_CHUNK_RECORD_BYTES, "chunk record");

enum { PK_MAGIC = 0, PK_VERSION = 8, PK_RESERVED = 12, PK_ID = 16, PK_CREATED = 24, PK_END = 32 };
_Static_assert(PK_END == SNAP_PACK_HEADER_BYTES, "pack header");

enum {
	FR_MAGIC = 0, FR_CODEC = 4, FR_HASH = 8, FR_RAW = 24, FR_STORED = 28,
	FR_STORED_SUM = 32, FR_HEADER_SUM = 40, FR_END = 48,
};
_Static_assert(FR_END == SNAP_FRAME_HEADER_BYTES, "frame header");

enum {
	IX_MAGIC = 0, IX_VERSION = 8, IX_RESERVED = 12, IX_PACK = 16,
	IX_PACK_BYTES = 24, IX_COUNT = 32, IX_END = 40,
};
_Static_assert(IX_END == SNAP_INDEX_HEADER_BYTES, "index header");

enum { IR_HASH = 0, IR_OFFSET = 16, IR_RAW = 24, IR_STORED = 28, IR_END = 32 };
_Static_assert(IR_END == SNAP_INDEX_RECORD_BYTES, "index record");

enum { JH_MAGIC = 0, JH_VERSION = 8, JH_RESERVED = 12, JH_END = 16 };
_Static_assert(JH_END == SNAP_JOURNAL_HEADER_BYTES, "journal header");

static void hash128_put(XXH128_hash_t h, uint8_t out[SNAP_HASH_BYTES])
{
	le64_put(out, h.low64);
	le64_put(out + 8, h.high64);
}

void snap_hash128(const void *data, size_t len, uint8_t out[SNAP_HASH_BYTES])
{
	hash128_put(XXH3_128bits(data, len), out);
}

void snap_hash128_digest(const void *xxh3_state, uint8_t out[SNAP_HASH_BYTES])
{
	hash128_put(XXH3_128bits_digest(xxh3_state), out);
}

int snap_hash_is_zero(const uint8_t hash[SNAP_HASH_BYTES])
{
	for (int i = 0; i < SNAP_HASH_BYTES; i++)
		if (hash[i])
			return 0;
	return 1;
}

void snap_hash_hex(const uint8_t hash[SNAP_HASH_BYTES], char out[33])
{
	static const char digits[] = "0123456789abcdef";

	/* Most significant byte first, as XXH128 is usually printed. */
	for (int i = 0; i < SNAP_HASH_BYTES; i++) {
		uint8_t b = hash[SNAP_HASH_BYTES - 1 - i];
		out[2 * i] = digits[b >> 4];
		out[2 * i + 1] = digits[b & 15];
	}
	out[32] = '\0';
}

#define NAME_MAX_DIGITS(n) #n
#define NAME_MAX_TEXT(n) NAME_MAX_DIGITS(n)

const char *snap_name_problem(const char *name)
{
	size_t n = 0;

	if (!name || name[0] == '\0')
		return "empty name";
	if (name[0] == '.')
		return "a name may not start with '.'";
	for (; name[n]; n++) {
		char c = name[n];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return "use only A-Z a-z 0-9 . _ -";
	}
	if (n > SNAP_SNAPSHOT_NAME_MAX)
		return "name too long (max " NAME_MAX_TEXT(SNAP_SNAPSHOT_NAME_MAX) ")";
	return NULL;
}

int snap_name_valid(const char *name)
{
	return snap_name_problem(name) == NULL;
}

void snap_buf_free(struct snap_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* Reserve @n bytes at the end of @b; NULL (and a sticky error) on failure. */
static uint8_t *buf_grow(struct snap_buf *b, size_t n)
{
	uint8_t *p;

	if (b->error)
		return NULL;
	if (n > SIZE_MAX / 2 - b->len) {
		b->error = -ENOMEM;
		return NULL;
	}
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		p = realloc(b->data, cap);
		if (!p) {
			b->error = -ENOMEM;
			return NULL;
		}
		b->data = p;
		b->cap = cap;
	}
	p = b->data + b->len;
	memset(p, 0, n);
	b->len += n;
	return p;
}

static void buf_trailer_put(struct snap_buf *b)
{
	uint8_t sum[SNAP_HASH_BYTES];
	uint8_t *p;

	if (b->error)
		return;
	snap_hash128(b->data, b->len, sum);
	p = buf_grow(b, SNAP_TRAILER_BYTES);
	if (p)
		memcpy(p, sum, SNAP_TRAILER_BYTES);
}

/* Check the XXH3-128 trailer of a whole file image. */
static int trailer_check(const uint8_t *buf, size_t len)
{
	uint8_t sum[SNAP_HASH_BYTES];

	if (len < SNAP_TRAILER_BYTES)
		return -EBADMSG;
	snap_hash128(buf, len - SNAP_TRAILER_BYTES, sum);
	if (memcmp(sum, buf + len - SNAP_TRAILER_BYTES, SNAP_TRAILER_BYTES) != 0)
		return -EBADMSG;
	return 0;
}

static int magic_version_check(const uint8_t *buf, size_t len, const char *magic)
{
	if (len < 12 || memcmp(buf, magic, 8) != 0)
		return -EBADMSG;
	if (le32_get(buf + 8) != SNAP_FORMAT_VERSION)
		return -ENOTSUP;
	return 0;
}

static int zeros_only(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* ---- manifest ---- */

static size_t str_len_capped(const char *s)
{
	return strnlen(s, SNAP_NAME_MAX + 1);
}

int snap_manifest_encode(const struct snap_manifest *m, struct snap_buf *out)
{
	const char *strs[4] = { m->name, m->parent, m->session_id, m->device_name };
	size_t lens[4];
	uint8_t *p;

	for (int i = 0; i < 4; i++) {
		lens[i] = str_len_capped(strs[i]);
		if (lens[i] > SNAP_NAME_MAX)
			return -ENAMETOOLONG;
	}
	p = buf_grow(out, MAN_END);
	if (!p)
		return out->error;
	memcpy(p + MAN_MAGIC, SNAP_MAGIC_MANIFEST, 8);
	le32_put(p + MAN_VERSION, SNAP_FORMAT_VERSION);
	le32_put(p + MAN_FIXED, MAN_END);
	le64_put(p + MAN_CREATED, m->created_ns);
	le32_put(p + MAN_CHUNK_SIZE, m->chunk_size);
	le32_put(p + MAN_DRIVER, m->driver_version);
	memcpy(p + MAN_UUID, m->device_uuid, 16);
	le32_put(p + MAN_CODEC, m->codec);
	le32_put(p + MAN_LEVEL, (uint32_t)m->codec_level);
	le64_put(p + MAN_REGIONS, m->region_count);
	le64_put(p + MAN_CHUNKS, m->chunk_count);
	le64_put(p + MAN_ZERO, m->zero_chunks);
	le64_put(p + MAN_NEW, m->new_chunks);
	le64_put(p + MAN_LOGICAL, m->logical_bytes);
	le64_put(p + MAN_NEW_STORED, m->new_stored_bytes);
	le64_put(p + MAN_REF_STORED, m->ref_stored_bytes);
	le64_put(p + MAN_JOURNAL_BYTES, m->journal_bytes);
	le64_put(p + MAN_CHUNKS_BYTES, m->chunks_bytes);
	memcpy(p + MAN_JOURNAL_HASH, m->journal_hash, SNAP_HASH_BYTES);
	memcpy(p + MAN_CHUNKS_HASH, m->chunks_hash, SNAP_HASH_BYTES);
	if (m->auth_flags & SNAP_AUTH_CREDENTIAL)
		memcpy(p + MAN_CREDENTIAL, m->credential, SNAP_CREDENTIAL_BYTES);
	le32_put(p + MAN_OWNER_UID, m->auth_flags & SNAP_AUTH_OWNER_UID ? m->owner_uid : 0);
	le32_put(p + MAN_AUTH_FLAGS, m->auth_flags & SNAP_AUTH_KNOWN);
	for (int i = 0; i < 4; i++)
		le16_put(p + MAN_LEN_NAME + 2 * i, (uint16_t)lens[i]);
	for (int i = 0; i < 4; i++) {
		p = buf_grow(out, lens[i]);
		if (!p)
			return out->error;
		memcpy(p, strs[i], lens[i]);
	}
	buf_trailer_put(out);
	return out->error;
}

int snap_manifest_decode(const uint8_t *buf, size_t len, struct snap_manifest *m)
{
	char *strs[4];
	size_t off = MAN_END;
	int rc;

	memset(m, 0, sizeof(*m));
	strs[0] = m->name;
	strs[1] = m->parent;
	strs[2] = m->session_id;
	strs[3] = m->device_name;
	rc = magic_version_check(buf, len, SNAP_MAGIC_MANIFEST);
	if (rc)
		return rc;
	if (len < MAN_END + SNAP_TRAILER_BYTES || le32_get(buf + MAN_FIXED) != MAN_END)
		return -EBADMSG;
	rc = trailer_check(buf, len);
	if (rc)
		return rc;
	if (!zeros_only(buf + MAN_RESERVED, MAN_END - MAN_RESERVED))
		return -EBADMSG;
	for (int i = 0; i < 4; i++) {
		size_t n = le16_get(buf + MAN_LEN_NAME + 2 * i);
		if (n > SNAP_NAME_MAX || n > len - SNAP_TRAILER_BYTES - off)
			return -EBADMSG;
		memcpy(strs[i], buf + off, n);
		strs[i][n] = '\0';
		if (strlen(strs[i]) != n)
			return -EBADMSG; /* embedded NUL */
		off += n;
	}
	if (off != len - SNAP_TRAILER_BYTES)
		return -EBADMSG;
	m->version = SNAP_FORMAT_VERSION;
	m->created_ns = le64_get(buf + MAN_CREATED);
	m->chunk_size = le32_get(buf + MAN_CHUNK_SIZE);
	m->driver_version = le32_get(buf + MAN_DRIVER);
	memcpy(m->device_uuid, buf + MAN_UUID, 16);
	m->codec = le32_get(buf + MAN_CODEC);
	m->codec_level = (int32_t)le32_get(buf + MAN_LEVEL);
	m->region_count = le64_get(buf + MAN_REGIONS);
	m->chunk_count = le64_get(buf + MAN_CHUNKS);
	m->zero_chunks = le64_get(buf + MAN_ZERO);
	m->new_chunks = le64_get(buf + MAN_NEW);
	m->logical_bytes = le64_get(buf + MAN_LOGICAL);
	m->new_stored_bytes = le64_get(buf + MAN_NEW_STORED);
	m->ref_stored_bytes = le64_get(buf + MAN_REF_STORED);
	m->journal_bytes = le64_get(buf + MAN_JOURNAL_BYTES);
	m->chunks_bytes = le64_get(buf + MAN_CHUNKS_BYTES);
	memcpy(m->journal_hash, buf + MAN_JOURNAL_HASH, SNAP_HASH_BYTES);
	memcpy(m->chunks_hash, buf + MAN_CHUNKS_HASH, SNAP_HASH_BYTES);
	m->auth_flags = le32_get(buf + MAN_AUTH_FLAGS);
	m->owner_uid = le32_get(buf + MAN_OWNER_UID);
	memcpy(m->credential, buf + MAN_CREDENTIAL, SNAP_CREDENTIAL_BYTES);
	if (m->auth_flags & ~SNAP_AUTH_KNOWN)
		return -EBADMSG;
	if (m->chunk_size < SNAP_CHUNK_SIZE_MIN || m->chunk_size > SNAP_CHUNK_SIZE_MAX)
		return -EBADMSG;
	if (!snap_name_valid(m->name) || (m->parent[0] && !snap_name_valid(m->parent)))
		return -EBADMSG;
	if (m->zero_chunks > m->chunk_count || m->new_chunks > m->chunk_count)
		return -EBADMSG;
	return 0;
}

/* ---- chunk list ---- */

uint32_t snap_region_chunk_bytes(const struct snap_region *r, uint32_t chunk_size, uint64_t index)
{
	uint64_t start = index * chunk_size;

	if (index >= r->chunk_count || start >= r->size)
		return 0;
	return (uint32_t)(r->size - start < chunk_size ? r->size - start : chunk_size);
}

static uint64_t chunks_for(uint64_t size, uint32_t chunk_size)
{
	return size / chunk_size + (size % chunk_size != 0);
}

int snap_chunk_list_encode(const struct snap_chunk_list *cl, struct snap_buf *out)
{
	uint8_t *p = buf_grow(out, CL_END);

	if (!p)
		return out->error;
	memcpy(p + CL_MAGIC, SNAP_MAGIC_CHUNKS, 8);
	le32_put(p + CL_VERSION, SNAP_FORMAT_VERSION);
	le32_put(p + CL_CHUNK_SIZE, cl->chunk_size);
	le64_put(p + CL_REGIONS, cl->region_count);
	le64_put(p + CL_CHUNKS, cl->chunk_count);
	for (uint64_t i = 0; i < cl->region_count; i++) {
		const struct snap_region *r = &cl->regions[i];
		p = buf_grow(out, RG_END);
		if (!p)
			return out->error;
		le64_put(p + RG_ADDR, r->addr);
		le64_put(p + RG_SIZE, r->size);
		le32_put(p + RG_FLAGS, r->flags);
		le64_put(p + RG_CHUNKS, r->chunk_count);
		for (uint64_t c = 0; c < r->chunk_count; c++) {
			const struct snap_chunk_ref *ref = &r->chunks[c];
			p = buf_grow(out, CR_END);
			if (!p)
				return out->error;
			memcpy(p + CR_HASH, ref->hash, SNAP_HASH_BYTES);
			le64_put(p + CR_DEVHASH, ref->device_hash);
			le32_put(p + CR_STORED, ref->stored_size);
			le32_put(p + CR_FLAGS, ref->flags);
		}
	}
	buf_trailer_put(out);
	return out->error;
}

const struct snap_region *snap_chunk_list_region_at(const struct snap_chunk_list *cl, uint64_t addr,
						    uint64_t size)
{
	uint64_t lo = 0, hi = cl->region_count;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (cl->regions[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == cl->region_count || cl->regions[lo].addr != addr || cl->regions[lo].size != size)
		return NULL;
	return &cl->regions[lo];
}

void snap_chunk_list_free(struct snap_chunk_list *cl)
{
	if (!cl)
		return;
	for (uint64_t i = 0; cl->regions && i < cl->region_count; i++)
		free(cl->regions[i].chunks);
	free(cl->regions);
	memset(cl, 0, sizeof(*cl));
}

int snap_chunk_list_decode(const uint8_t *buf, size_t len, struct snap_chunk_list *cl)
{
	uint64_t regions, chunks, seen = 0;
	size_t off = CL_END, body;
	int rc;

	memset(cl, 0, sizeof(*cl));
	rc = magic_version_check(buf, len, SNAP_MAGIC_CHUNKS);
	if (rc)
		return rc;
	if (len < CL_END + SNAP_TRAILER_BYTES)
		return -EBADMSG;
	rc = trailer_check(buf, len);
	if (rc)
		return rc;
	body = len - SNAP_TRAILER_BYTES;
	cl->chunk_size = le32_get(buf + CL_CHUNK_SIZE);
	regions = le64_get(buf + CL_REGIONS);
	chunks = le64_get(buf + CL_CHUNKS);
	if (cl->chunk_size < SNAP_CHUNK_SIZE_MIN || cl->chunk_size > SNAP_CHUNK_SIZE_MAX ||
	    le64_get(buf + CL_RESERVED) != 0)
		return -EBADMSG;
	/* Bound every count by the bytes that would have to hold it. */
	if (regions > (body - off) / RG_END || chunks > (body - off) / CR_END)
		return -EBADMSG;
	cl->regions = calloc(regions ? regions : 1, sizeof(*cl->regions));
	if (!cl->regions)
		return -ENOMEM;
	cl->region_count = regions;
	cl->chunk_count = chunks;
	for (uint64_t i = 0; i < regions; i++) {
		struct snap_region *r = &cl->regions[i];
		if (body - off < RG_END)
			goto out_bad;
		r->addr = le64_get(buf + off + RG_ADDR);
		r->size = le64_get(buf + off + RG_SIZE);
		r->flags = le32_get(buf + off + RG_FLAGS);
		r->chunk_count = le64_get(buf + off + RG_CHUNKS);
		if (le32_get(buf + off + RG_RESERVED) != 0 || r->size == 0 ||
		    r->addr + r->size < r->addr ||
		    r->chunk_count != chunks_for(r->size, cl->chunk_size))
			goto out_bad;
		off += RG_END;
		if (r->chunk_count > (body - off) / CR_END || r->chunk_count > chunks - seen)
			goto out_bad;
		r->chunks = calloc(r->chunk_count, sizeof(*r->chunks));
		if (!r->chunks) {
			rc = -ENOMEM;
			goto out_free;
		}
		for (uint64_t c = 0; c < r->chunk_count; c++, off += CR_END) {
			struct snap_chunk_ref *ref = &r->chunks[c];
			memcpy(ref->hash, buf + off + CR_HASH, SNAP_HASH_BYTES);
			ref->device_hash = le64_get(buf + off + CR_DEVHASH);
			ref->stored_size = le32_get(buf + off + CR_STORED);
			ref->flags = le32_get(buf + off + CR_FLAGS);
			if (ref->flags & ~SNAP_CHUNK_FLAGS_KNOWN)
				goto out_bad;
			if (ref->flags & SNAP_CHUNK_ZERO) {
				if (ref->stored_size || !snap_hash_is_zero(ref->hash))
					goto out_bad;
			} else if (ref->stored_size == 0) {
				goto out_bad;
			}
		}
		seen += r->chunk_count;
	}
	if (seen != chunks || off != body)
		goto out_bad;
	return 0;
out_bad:
	rc = -EBADMSG;
out_free:
	snap_chunk_list_free(cl);
	return rc;
}

/* ---- pack header and frames ---- */

void snap_pack_header_encode(uint64_t pack_id, uint64_t created_ns, uint8_t out[SNAP_PACK_HEADER_BYTES])
{
	memset(out, 0, SNAP_PACK_HEADER_BYTES);
	memcpy(out + PK_MAGIC, SNAP_MAGIC_PACK, 8);
	le32_put(out + PK_VERSION, SNAP_FORMAT_VERSION);
	le64_put(out + PK_ID, pack_id);
	le64_put(out + PK_CREATED, created_ns);
}

int snap_pack_header_decode(const uint8_t *buf, size_t len, uint64_t *pack_id)
{
	int rc = magic_version_check(buf, len, SNAP_MAGIC_PACK);

	if (rc)
		return rc;
	if (len < PK_END || le32_get(buf + PK_RESERVED) != 0)
		return -EBADMSG;
	*pack_id = le64_get(buf + PK_ID);
	return 0;
}

void snap_frame_encode(const struct snap_frame *f, uint8_t out[SNAP_FRAME_HEADER_BYTES])
{
	le32_put(out + FR_MAGIC, SNAP_FRAME_MAGIC);
	le32_put(out + FR_CODEC, f->codec);
	memcpy(out + FR_HASH, f->hash, SNAP_HASH_BYTES);
	le32_put(out + FR_RAW, f->raw_size);
	le32_put(out + FR_STORED, f->stored_size);
	le64_put(out + FR_STORED_SUM, f->stored_xxh64);
	le64_put(out + FR_HEADER_SUM, XXH3_64bits(out, FR_HEADER_SUM));
}

int snap_frame_decode(const uint8_t *buf, size_t len, struct snap_frame *f)
{
	if (len < FR_END || le32_get(buf + FR_MAGIC) != SNAP_FRAME_MAGIC)
		return -EBADMSG;
	if (le64_get(buf + FR_HEADER_SUM) != XXH3_64bits(buf, FR_HEADER_SUM))
		return -EBADMSG;
	f->codec = le32_get(buf + FR_CODEC);
	memcpy(f->hash, buf + FR_HASH, SNAP_HASH_BYTES);
	f->raw_size = le32_get(buf + FR_RAW);
	f->stored_size = le32_get(buf + FR_STORED);
	f->stored_xxh64 = le64_get(buf + FR_STORED_SUM);
	if (f->codec != SNAP_CODEC_RAW && f->codec != SNAP_CODEC_ZSTD)
		return -EBADMSG;
	if (f->raw_size == 0 || f->raw_size > SNAP_CHUNK_SIZE_MAX || f->stored_size == 0)
		return -EBADMSG;
	if (f->codec == SNAP_CODEC_RAW && f->stored_size != f->raw_size)
		return -EBADMSG;
	/* zstd never needs more than its bound; reject absurd sizes early. */
	if (f->stored_size > f->raw_size + (f->raw_size >> 7) + 512)
		return -EBADMSG;
	return 0;
}

int snap_frame_body_check(const struct snap_frame *f, const uint8_t *stored, size_t stored_len)
{
	if (stored_len != f->stored_size)
		return -EBADMSG;
	if (XXH3_64bits(stored, stored_len) != f->stored_xxh64)
		return -EBADMSG;
	return 0;
}

/* ---- pack index ---- */

int snap_index_encode(const struct snap_index *idx, struct snap_buf *out)
{
	uint8_t *p = buf_grow(out, IX_END);

	if (!p)
		return out->error;
	memcpy(p + IX_MAGIC, SNAP_MAGIC_INDEX, 8);
	le32_put(p + IX_VERSION, SNAP_FORMAT_VERSION);
	le64_put(p + IX_PACK, idx->pack_id);
	le64_put(p + IX_PACK_BYTES, idx->pack_bytes);
	le64_put(p + IX_COUNT, idx->count);
	for (uint64_t i = 0; i < idx->count; i++) {
		const struct snap_index_entry *e = &idx->entries[i];
		p = buf_grow(out, IR_END);
		if (!p)
			return out->error;
		memcpy(p + IR_HASH, e->hash, SNAP_HASH_BYTES);
		le64_put(p + IR_OFFSET, e->offset);
		le32_put(p + IR_RAW, e->raw_size);
		le32_put(p + IR_STORED, e->stored_size);
	}
	buf_trailer_put(out);
	return out->error;
}

int snap_index_decode(const uint8_t *buf, size_t len, struct snap_index *idx)
{
	size_t body;
	int rc;

	memset(idx, 0, sizeof(*idx));
	rc = magic_version_check(buf, len, SNAP_MAGIC_INDEX);
	if (rc)
		return rc;
	if (len < IX_END + SNAP_TRAILER_BYTES || le32_get(buf + IX_RESERVED) != 0)
		return -EBADMSG;
	rc = trailer_check(buf, len);
	if (rc)
		return rc;
	body = len - SNAP_TRAILER_BYTES - IX_END;
	idx->pack_id = le64_get(buf + IX_PACK);
	idx->pack_bytes = le64_get(buf + IX_PACK_BYTES);
	idx->count = le64_get(buf + IX_COUNT);
	if (idx->count != body / IR_END || body % IR_END)
		return -EBADMSG;
	idx->entries = calloc(idx->count ? idx->count : 1, sizeof(*idx->entries));
	if (!idx->entries)
		return -ENOMEM;
	for (uint64_t i = 0; i < idx->count; i++) {
		const uint8_t *p = buf + IX_END + i * IR_END;
		struct snap_index_entry *e = &idx->entries[i];
		memcpy(e->hash, p + IR_HASH, SNAP_HASH_BYTES);
		e->offset = le64_get(p + IR_OFFSET);
		e->raw_size = le32_get(p + IR_RAW);
		e->stored_size = le32_get(p + IR_STORED);
		if (e->offset < SNAP_PACK_HEADER_BYTES || e->stored_size == 0 ||
		    e->offset > idx->pack_bytes ||
		    idx->pack_bytes - e->offset < (uint64_t)SNAP_FRAME_HEADER_BYTES + e->stored_size) {
			free(idx->entries);
			memset(idx, 0, sizeof(*idx));
			return -EBADMSG;
		}
	}
	return 0;
}

/* ---- journal copy ---- */

void snap_journal_header_encode(uint8_t out[SNAP_JOURNAL_HEADER_BYTES])
{
	memset(out, 0, SNAP_JOURNAL_HEADER_BYTES);
	memcpy(out + JH_MAGIC, SNAP_MAGIC_JOURNAL, 8);
	le32_put(out + JH_VERSION, SNAP_FORMAT_VERSION);
}

int snap_journal_header_decode(const uint8_t *buf, size_t len)
{
	int rc = magic_version_check(buf, len, SNAP_MAGIC_JOURNAL);

	if (rc)
		return rc;
	if (len < JH_END || le32_get(buf + JH_RESERVED) != 0)
		return -EBADMSG;
	return 0;
}

/* ---- a writer's progress log ---- */

enum { PH_MAGIC = 0, PH_VERSION = 8, PH_RESERVED = 12, PH_END = 16 };
_Static_assert(PH_END == SNAP_PROGRESS_HEADER_BYTES, "progress header");

enum {
	PB_CHUNK_SIZE = 0, PB_DRIVER = 4, PB_AUTH_FLAGS = 8, PB_OWNER_UID = 12, PB_CREDENTIAL = 16,
	PB_UUID = 48, PB_STRINGS = 64,
};
enum { PR_ADDR = 0, PR_SIZE = 8, PR_FLAGS = 16, PR_RESERVED = 20, PR_END = 24 };
enum {
	PC_REGION = 0, PC_KIND = 4, PC_INDEX = 8, PC_DEVHASH = 16, PC_HASH = 24, PC_PACK = 40, PC_OFFSET = 48,
	PC_STORED = 56, PC_RESERVED = 60, PC_END = 64,
};
enum { PM_REGIONS = 0, PM_CHUNKS = 8, PM_END = 16 };

void snap_progress_header_encode(uint8_t out[SNAP_PROGRESS_HEADER_BYTES])
{
	memset(out, 0, SNAP_PROGRESS_HEADER_BYTES);
	memcpy(out + PH_MAGIC, SNAP_MAGIC_PROGRESS, 8);
	le32_put(out + PH_VERSION, SNAP_FORMAT_VERSION);
}

int snap_progress_header_decode(const uint8_t *buf, size_t len)
{
	int rc = magic_version_check(buf, len, SNAP_MAGIC_PROGRESS);

	if (rc)
		return rc;
	if (len < PH_END || le32_get(buf + PH_RESERVED) != 0)
		return -EBADMSG;
	return 0;
}

static uint64_t progress_sum(const uint8_t *rec, size_t len, uint64_t seed)
{
	return XXH3_64bits_withSeed(rec, len, seed);
}

int snap_progress_record_encode(const struct snap_progress_record *r, uint64_t *sum, struct snap_buf *out)
{
	const struct snap_manifest *m = &r->begin;
	const char *strs[4] = { m->name, m->parent, m->session_id, m->device_name };
	size_t body, start = out->len;
	uint8_t *p;

	switch (r->type) {
	case SNAP_PROGRESS_BEGIN:
		body = PB_STRINGS;
		for (int i = 0; i < 4; i++) {
			size_t n = strnlen(strs[i], SNAP_NAME_MAX + 1);

			if (n > SNAP_NAME_MAX)
				return -EINVAL;
			body += 2 + n;
		}
		break;
	case SNAP_PROGRESS_REGION:
		body = PR_END;
		break;
	case SNAP_PROGRESS_CHUNK:
		if (r->chunk.kind > SNAP_PROGRESS_CHUNK_STORED)
			return -EINVAL;
		body = PC_END;
		break;
	case SNAP_PROGRESS_COMMIT:
		body = PM_END;
		break;
	default:
		return -EINVAL;
	}
	p = buf_grow(out, SNAP_PROGRESS_RECORD_HEAD_BYTES + body + SNAP_PROGRESS_SUM_BYTES);
	if (!p)
		return out->error;
	le32_put(p, r->type);
	le32_put(p + 4, (uint32_t)body);
	p += SNAP_PROGRESS_RECORD_HEAD_BYTES;
	switch (r->type) {
	case SNAP_PROGRESS_BEGIN:
		le32_put(p + PB_CHUNK_SIZE, m->chunk_size);
		le32_put(p + PB_DRIVER, m->driver_version);
		le32_put(p + PB_AUTH_FLAGS, m->auth_flags);
		le32_put(p + PB_OWNER_UID, m->owner_uid);
		memcpy(p + PB_CREDENTIAL, m->credential, SNAP_CREDENTIAL_BYTES);
		memcpy(p + PB_UUID, m->device_uuid, 16);
		p += PB_STRINGS;
		for (int i = 0; i < 4; i++) {
			size_t n = strlen(strs[i]);

			le16_put(p, (uint16_t)n);
			memcpy(p + 2, strs[i], n);
			p += 2 + n;
		}
		break;
	case SNAP_PROGRESS_REGION:
		le64_put(p + PR_ADDR, r->region.addr);
		le64_put(p + PR_SIZE, r->region.size);
		le32_put(p + PR_FLAGS, r->region.flags);
		break;
	case SNAP_PROGRESS_CHUNK:
		le32_put(p + PC_REGION, r->chunk.region);
		le32_put(p + PC_KIND, r->chunk.kind);
		le64_put(p + PC_INDEX, r->chunk.index);
		le64_put(p + PC_DEVHASH, r->chunk.device_hash);
		memcpy(p + PC_HASH, r->chunk.hash, SNAP_HASH_BYTES);
		le64_put(p + PC_PACK, r->chunk.pack_id);
		le64_put(p + PC_OFFSET, r->chunk.offset);
		le32_put(p + PC_STORED, r->chunk.stored_size);
		break;
	default:
		le64_put(p + PM_REGIONS, r->commit_regions);
		le64_put(p + PM_CHUNKS, r->commit_chunks);
		break;
	}
	p = out->data + start;
	*sum = progress_sum(p, SNAP_PROGRESS_RECORD_HEAD_BYTES + body, *sum);
	le64_put(p + SNAP_PROGRESS_RECORD_HEAD_BYTES + body, *sum);
	return 0;
}

/* One of BEGIN's strings into @out (SNAP_NAME_MAX + 1 bytes). */
static int progress_str_get(const uint8_t **p, const uint8_t *end, char *out)
{
	size_t n;

	if (end - *p < 2)
		return -EBADMSG;
	n = le16_get(*p);
	if (n > SNAP_NAME_MAX || (size_t)(end - *p - 2) < n || memchr(*p + 2, 0, n))
		return -EBADMSG;
	memcpy(out, *p + 2, n);
	out[n] = 0;
	*p += 2 + n;
	return 0;
}

static int progress_begin_decode(const uint8_t *p, size_t body, struct snap_manifest *m)
{
	const uint8_t *end = p + body;
	char *strs[4] = { m->name, m->parent, m->session_id, m->device_name };
	const uint8_t *q = p + PB_STRINGS;

	if (body < PB_STRINGS)
		return -EBADMSG;
	m->chunk_size = le32_get(p + PB_CHUNK_SIZE);
	m->driver_version = le32_get(p + PB_DRIVER);
	m->auth_flags = le32_get(p + PB_AUTH_FLAGS);
	m->owner_uid = le32_get(p + PB_OWNER_UID);
	memcpy(m->credential, p + PB_CREDENTIAL, SNAP_CREDENTIAL_BYTES);
	memcpy(m->device_uuid, p + PB_UUID, 16);
	for (int i = 0; i < 4; i++)
		if (progress_str_get(&q, end, strs[i]))
			return -EBADMSG;
	if (q != end || m->chunk_size < SNAP_CHUNK_SIZE_MIN || m->chunk_size > SNAP_CHUNK_SIZE_MAX ||
	    m->auth_flags & ~SNAP_AUTH_KNOWN || !snap_name_valid(m->name) ||
	    (m->parent[0] && !snap_name_valid(m->parent)))
		return -EBADMSG;
	return 0;
}

static int progress_chunk_decode(const uint8_t *p, struct snap_progress_chunk *c)
{
	c->region = le32_get(p + PC_REGION);
	c->kind = le32_get(p + PC_KIND);
	c->index = le64_get(p + PC_INDEX);
	c->device_hash = le64_get(p + PC_DEVHASH);
	memcpy(c->hash, p + PC_HASH, SNAP_HASH_BYTES);
	c->pack_id = le64_get(p + PC_PACK);
	c->offset = le64_get(p + PC_OFFSET);
	c->stored_size = le32_get(p + PC_STORED);
	if (le32_get(p + PC_RESERVED) || c->kind > SNAP_PROGRESS_CHUNK_STORED)
		return -EBADMSG;
	/* Only a stored chunk has a place; a zero one has no hash either. */
	if (c->kind == SNAP_PROGRESS_CHUNK_STORED)
		return c->pack_id && c->stored_size && c->offset >= SNAP_PACK_HEADER_BYTES ? 0 : -EBADMSG;
	if (c->pack_id || c->offset || c->stored_size)
		return -EBADMSG;
	return c->kind == SNAP_PROGRESS_CHUNK_ZERO && !snap_hash_is_zero(c->hash) ? -EBADMSG : 0;
}

int snap_progress_record_decode(const uint8_t *buf, size_t len, uint64_t sum, struct snap_progress_record *out,
				size_t *used, uint64_t *next_sum)
{
	uint32_t type, body;
	size_t whole;
	const uint8_t *p;

	if (len < SNAP_PROGRESS_RECORD_HEAD_BYTES)
		return -EAGAIN;
	type = le32_get(buf);
	body = le32_get(buf + 4);
	if (type < SNAP_PROGRESS_BEGIN || type > SNAP_PROGRESS_COMMIT || body > SNAP_PROGRESS_BODY_MAX)
		return -EBADMSG;
	whole = SNAP_PROGRESS_RECORD_HEAD_BYTES + body + SNAP_PROGRESS_SUM_BYTES;
	if (len < whole)
		return -EAGAIN;
	sum = progress_sum(buf, SNAP_PROGRESS_RECORD_HEAD_BYTES + body, sum);
	if (le64_get(buf + SNAP_PROGRESS_RECORD_HEAD_BYTES + body) != sum)
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	out->type = type;
	p = buf + SNAP_PROGRESS_RECORD_HEAD_BYTES;
	switch (type) {
	case SNAP_PROGRESS_BEGIN:
		if (progress_begin_decode(p, body, &out->begin))
			return -EBADMSG;
		break;
	case SNAP_PROGRESS_REGION:
		if (body != PR_END || le32_get(p + PR_RESERVED))
			return -EBADMSG;
		out->region.addr = le64_get(p + PR_ADDR);
		out->region.size = le64_get(p + PR_SIZE);
		out->region.flags = le32_get(p + PR_FLAGS);
		if (!out->region.size || out->region.addr + out->region.size < out->region.addr)
			return -EBADMSG;
		break;
	case SNAP_PROGRESS_CHUNK:
		if (body != PC_END || progress_chunk_decode(p, &out->chunk))
			return -EBADMSG;
		break;
	default:
		if (body != PM_END)
			return -EBADMSG;
		out->commit_regions = le64_get(p + PM_REGIONS);
		out->commit_chunks = le64_get(p + PM_CHUNKS);
		break;
	}
	*used = whole;
	*next_sum = sum;
	return 0;
}

/* ---- the state directory's records: sessions file, domain records ---- */

/* Check a record's magic, version and trailer; *end is where its body ends. */
static int record_open(const uint8_t *buf, size_t len, const char *magic, uint32_t version, size_t header,
		       size_t *end)
{
	int rc;

	if (len < header + SNAP_TRAILER_BYTES || memcmp(buf, magic, 8))
		return -EBADMSG;
	if (le32_get(buf + 8) != version)
		return -ENOTSUP;
	rc = trailer_check(buf, len);
	if (rc)
		return rc;
	*end = len - SNAP_TRAILER_BYTES;
	return 0;
}

/* ---- sessions file (snap_sessions.h) ---- */

/* A string with a u16 length before it, as the state directory's records
 * keep names. */
static void str16_put(struct snap_buf *b, const char *s)
{
	size_t n = strlen(s);
	uint8_t *p = buf_grow(b, 2 + n);

	if (!p)
		return;
	le16_put(p, (uint16_t)n);
	memcpy(p + 2, s, n);
}

/* Read one into @out (@cap bytes with its NUL) at *off, below @end. */
static int str16_get(const uint8_t *buf, size_t *off, size_t end, char *out, size_t cap)
{
	size_t n;

	if (end - *off < 2)
		return -EBADMSG;
	n = le16_get(buf + *off);
	*off += 2;
	if (n >= cap || n > end - *off || memchr(buf + *off, 0, n))
		return -EBADMSG;
	memcpy(out, buf + *off, n);
	out[n] = '\0';
	*off += n;
	return 0;
}


int snap_session_id_valid(const char *id)
{
	size_t n = 0;

	if (!id || !id[0])
		return 0;
	/* A libvirt domain's session: "UUID/" and a plain id (vm_id.h). */
	if (strlen(id) <= SNAP_NAME_MAX && vm_session_id_valid(id))
		return snap_session_id_valid(id + VM_UUID_LEN + 1);
	for (; id[n]; n++) {
		char c = id[n];

		if (n >= SNAP_NAME_MAX || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
					    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

static int session_entry_valid(const struct snap_session *e)
{
	if (!snap_session_id_valid(e->id) || e->plan > SNAP_PLAN_RESTORE || e->device < -1)
		return 0;
	if (e->plan == SNAP_PLAN_NONE ? e->snapshot[0] != '\0' : !snap_name_valid(e->snapshot))
		return 0;
	return !e->latest[0] || snap_name_valid(e->latest);
}

int snap_sessions_encode(const struct snap_session *v, uint32_t count, struct snap_buf *out)
{
	uint8_t *p;

	if (count > SNAP_SESSIONS_LIMIT)
		return -EINVAL;
	p = buf_grow(out, SNAP_SESSIONS_HEADER_BYTES);
	if (!p)
		return out->error;
	memcpy(p, SNAP_MAGIC_SESSIONS, 8);
	le32_put(p + 8, SNAP_SESSIONS_VERSION);
	le32_put(p + 12, count);
	for (uint32_t i = 0; i < count; i++) {
		const char *strs[3] = { v[i].id, v[i].snapshot, v[i].latest };

		if (!session_entry_valid(&v[i]))
			return -EINVAL;
		p = buf_grow(out, SNAP_SESSION_FIXED_BYTES);
		if (!p)
			return out->error;
		le32_put(p, v[i].plan);
		le32_put(p + 4, (uint32_t)v[i].device);
		for (int s = 0; s < 3; s++)
			str16_put(out, strs[s]);
	}
	buf_trailer_put(out);
	return out->error;
}

int snap_sessions_decode(const uint8_t *buf, size_t len, uint32_t max,
			 struct snap_session **out, uint32_t *count)
{
	struct snap_session *v = NULL;
	size_t off = SNAP_SESSIONS_HEADER_BYTES, end;
	uint32_t n;
	int rc;

	*out = NULL;
	*count = 0;
	rc = record_open(buf, len, SNAP_MAGIC_SESSIONS, SNAP_SESSIONS_VERSION, SNAP_SESSIONS_HEADER_BYTES, &end);
	if (rc)
		return rc;
	n = le32_get(buf + 12);
	/* Every entry takes its fixed part and three length fields: a count the
	 * bytes cannot hold is damage, whatever it claims. */
	if (n > SNAP_SESSIONS_LIMIT || n > (end - off) / (SNAP_SESSION_FIXED_BYTES + 6))
		return -EBADMSG;
	if (n > max)
		return -E2BIG;
	if (n) {
		v = calloc(n, sizeof(*v));
		if (!v)
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		char *strs[3] = { v[i].id, v[i].snapshot, v[i].latest };

		if (end - off < SNAP_SESSION_FIXED_BYTES)
			goto out_bad;
		v[i].plan = le32_get(buf + off);
		v[i].device = (int32_t)le32_get(buf + off + 4);
		off += SNAP_SESSION_FIXED_BYTES;
		for (int s = 0; s < 3; s++)
			if (str16_get(buf, &off, end, strs[s], SNAP_NAME_MAX + 1))
				goto out_bad;
		if (!session_entry_valid(&v[i]))
			goto out_bad;
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(v[j].id, v[i].id))
				goto out_bad;
	}
	if (off != end)
		goto out_bad;
	*out = v;
	*count = n;
	return 0;
out_bad:
	free(v);
	return -EBADMSG;
}

/* ---- a libvirt domain's record (snap_vm.h) ---- */

static int vm_entry_valid(const struct snap_vm_domain *d, const struct snap_vm_entry *e)
{
	return snap_session_id_valid(e->session) && vm_session_of(e->session, d->uuid) &&
	       snap_name_valid(e->snapshot);
}

static int vm_generation_valid_in(const struct snap_vm_domain *d, uint32_t index)
{
	const struct snap_vm_generation *g = &d->generations[index];

	if (!vm_generation_valid(g->generation) || g->count > SNAP_VM_SESSIONS_MAX)
		return 0;
	for (uint32_t j = 0; j < index; j++)
		if (!strcmp(d->generations[j].generation, g->generation))
			return 0;
	for (uint32_t i = 0; i < g->count; i++) {
		if (!vm_entry_valid(d, &g->entries[i]))
			return 0;
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(g->entries[j].session, g->entries[i].session))
				return 0;
	}
	return 1;
}

int snap_vm_domain_encode(const struct snap_vm_domain *d, struct snap_buf *out)
{
	uint8_t *p;

	if (!vm_uuid_valid(d->uuid) || !vm_name_valid(d->name) || d->generation_count > SNAP_VM_GENERATIONS_MAX ||
	    (d->flags & ~SNAP_VM_ATTACHED))
		return -EINVAL;
	for (uint32_t i = 0; i < d->generation_count; i++)
		if (!vm_generation_valid_in(d, i))
			return -EINVAL;
	p = buf_grow(out, SNAP_VM_HEADER_BYTES);
	if (!p)
		return out->error;
	memcpy(p, SNAP_MAGIC_VM_DOMAIN, 8);
	le32_put(p + 8, SNAP_VM_DOMAIN_VERSION);
	le32_put(p + 12, d->flags);
	le32_put(p + 16, d->generation_count);
	str16_put(out, d->uuid);
	str16_put(out, d->name);
	for (uint32_t i = 0; i < d->generation_count; i++) {
		const struct snap_vm_generation *g = &d->generations[i];

		str16_put(out, g->generation);
		p = buf_grow(out, 4);
		if (p)
			le32_put(p, g->count);
		for (uint32_t k = 0; k < g->count; k++) {
			str16_put(out, g->entries[k].session);
			str16_put(out, g->entries[k].snapshot);
		}
	}
	buf_trailer_put(out);
	return out->error;
}

void snap_vm_domain_release(struct snap_vm_domain *d)
{
	for (uint32_t i = 0; d->generations && i < d->generation_count; i++)
		free(d->generations[i].entries);
	free(d->generations);
	memset(d, 0, sizeof(*d));
}

int snap_vm_domain_decode(const uint8_t *buf, size_t len, struct snap_vm_domain *d)
{
	size_t off = SNAP_VM_HEADER_BYTES, end;
	uint32_t n;
	int rc;

	memset(d, 0, sizeof(*d));
	rc = record_open(buf, len, SNAP_MAGIC_VM_DOMAIN, SNAP_VM_DOMAIN_VERSION, SNAP_VM_HEADER_BYTES, &end);
	if (rc)
		return rc;
	d->flags = le32_get(buf + 12);
	n = le32_get(buf + 16);
	if (n > SNAP_VM_GENERATIONS_MAX || (d->flags & ~SNAP_VM_ATTACHED))
		return -EBADMSG;
	if (str16_get(buf, &off, end, d->uuid, sizeof(d->uuid)) || str16_get(buf, &off, end, d->name, sizeof(d->name)) ||
	    !vm_uuid_valid(d->uuid) || !vm_name_valid(d->name))
		return -EBADMSG;
	d->generations = calloc(n ? n : 1, sizeof(*d->generations));
	if (!d->generations)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct snap_vm_generation *g = &d->generations[i];
		uint32_t count;

		if (str16_get(buf, &off, end, g->generation, sizeof(g->generation)) || end - off < 4)
			return -EBADMSG;
		count = le32_get(buf + off);
		off += 4;
		/* Each entry takes two length fields at least. */
		if (count > SNAP_VM_SESSIONS_MAX || count > (end - off) / 4)
			return -EBADMSG;
		g->entries = calloc(count ? count : 1, sizeof(*g->entries));
		if (!g->entries)
			return -ENOMEM;
		d->generation_count = i + 1;
		g->count = count;
		for (uint32_t k = 0; k < count; k++)
			if (str16_get(buf, &off, end, g->entries[k].session, sizeof(g->entries[k].session)) ||
			    str16_get(buf, &off, end, g->entries[k].snapshot, sizeof(g->entries[k].snapshot)))
				return -EBADMSG;
		if (!vm_generation_valid_in(d, i))
			return -EBADMSG;
	}
	return off == end ? 0 : -EBADMSG;
}
