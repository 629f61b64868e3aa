/* Journal record encodings: see record.h and docs/journal.md. */
#include "record.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>

/* Byte offsets of every field; the docs table follows these. */
enum {
	HDR_VERSION = 0, /* u16 */
	HDR_FIXED = 2,   /* u16 */

	OBJ_KIND = 4,      /* u32 */
	OBJ_PARENT = 8,    /* u64 */
	OBJ_FLAGS = 16,    /* u32 */
	OBJ_ARGS_LEN = 20, /* u32, then args */

	REG_FLAGS = 4,     /* u32 */
	REG_SIZE = 8,      /* u64 */
	REG_OWNER = 16,    /* u64 */
	REG_KIND = 24,     /* u32 */
	REG_RESERVED = 28, /* u32, zero */

	IMG_FORMAT = 4, /* u32 */
	IMG_REFS = 8,   /* u64 */
	IMG_SIZE = 16,  /* u64 */

	META_TYPE = 4,     /* u32 */
	META_LEN = 8,      /* u32, then payload */
	META_RESERVED = 12, /* u32, zero */
};

_Static_assert(OBJ_ARGS_LEN + 4 == TRACKER_OBJECT_FIXED, "object record layout");
_Static_assert(REG_RESERVED + 4 == TRACKER_REGION_SIZE, "region record layout");
_Static_assert(IMG_SIZE + 8 == TRACKER_IMAGE_SIZE, "image record layout");
_Static_assert(META_RESERVED + 4 == TRACKER_META_FIXED, "meta record layout");
_Static_assert(TRACKER_META_VALUE_MAX <= UINT32_MAX - 8, "meta length fits u32");

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* Checks the common header: known version, the fixed length that version
 * has, and a buffer at least that long. */
static int header_check(const uint8_t *p, size_t len, unsigned version, unsigned fixed)
{
	if (len < 4)
		return -EBADMSG;
	if (get16(p + HDR_VERSION) != version)
		return -EPROTONOSUPPORT;
	if (get16(p + HDR_FIXED) != fixed || len < fixed)
		return -EBADMSG;
	return 0;
}

static void header_put(uint8_t *p, unsigned version, unsigned fixed)
{
	put16(p + HDR_VERSION, (uint16_t)version);
	put16(p + HDR_FIXED, (uint16_t)fixed);
}

size_t tracker_object_encoded_size(const struct tracker_object *o)
{
	return TRACKER_OBJECT_FIXED + (size_t)o->args_len;
}

int tracker_object_encode(const struct tracker_object *o, void *buf, size_t cap)
{
	uint8_t *p = buf;

	if (o->args_len > TRACKER_OBJECT_ARGS_MAX || (o->args_len && !o->args))
		return -EINVAL;
	if (cap < tracker_object_encoded_size(o))
		return -ENOBUFS;
	header_put(p, TRACKER_OBJECT_VERSION, TRACKER_OBJECT_FIXED);
	put32(p + OBJ_KIND, o->kind);
	put64(p + OBJ_PARENT, o->parent);
	put32(p + OBJ_FLAGS, o->flags);
	put32(p + OBJ_ARGS_LEN, o->args_len);
	if (o->args_len)
		memcpy(p + TRACKER_OBJECT_FIXED, o->args, o->args_len);
	return 0;
}

int tracker_object_decode(struct tracker_object *o, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint32_t args_len;
	int rc;

	rc = header_check(p, len, TRACKER_OBJECT_VERSION, TRACKER_OBJECT_FIXED);
	if (rc)
		return rc;
	args_len = get32(p + OBJ_ARGS_LEN);
	if (args_len > TRACKER_OBJECT_ARGS_MAX || len - TRACKER_OBJECT_FIXED != args_len)
		return -EBADMSG;
	o->kind = get32(p + OBJ_KIND);
	o->parent = get64(p + OBJ_PARENT);
	o->flags = get32(p + OBJ_FLAGS);
	o->args_len = args_len;
	o->args = args_len ? p + TRACKER_OBJECT_FIXED : NULL;
	return 0;
}

int tracker_region_encode(const struct tracker_region *r, void *buf, size_t cap)
{
	uint8_t *p = buf;

	if (!r->size)
		return -EINVAL;
	if (cap < TRACKER_REGION_SIZE)
		return -ENOBUFS;
	header_put(p, TRACKER_REGION_VERSION, TRACKER_REGION_SIZE);
	put32(p + REG_FLAGS, r->flags);
	put64(p + REG_SIZE, r->size);
	put64(p + REG_OWNER, r->owner);
	put32(p + REG_KIND, r->kind);
	put32(p + REG_RESERVED, 0);
	return 0;
}

int tracker_region_decode(struct tracker_region *r, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int rc;

	rc = header_check(p, len, TRACKER_REGION_VERSION, TRACKER_REGION_SIZE);
	if (rc)
		return rc;
	if (len != TRACKER_REGION_SIZE || get32(p + REG_RESERVED) || !get64(p + REG_SIZE))
		return -EBADMSG;
	r->flags = get32(p + REG_FLAGS);
	r->size = get64(p + REG_SIZE);
	r->owner = get64(p + REG_OWNER);
	r->kind = get32(p + REG_KIND);
	return 0;
}

int tracker_image_encode(const struct tracker_image *im, void *buf, size_t cap)
{
	uint8_t *p = buf;

	if (!im->refs || im->size > TRACKER_IMAGE_MAX)
		return -EINVAL;
	if (cap < TRACKER_IMAGE_SIZE)
		return -ENOBUFS;
	header_put(p, TRACKER_IMAGE_VERSION, TRACKER_IMAGE_SIZE);
	put32(p + IMG_FORMAT, im->format);
	put64(p + IMG_REFS, im->refs);
	put64(p + IMG_SIZE, im->size);
	return 0;
}

int tracker_image_decode(struct tracker_image *im, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int rc;

	rc = header_check(p, len, TRACKER_IMAGE_VERSION, TRACKER_IMAGE_SIZE);
	if (rc)
		return rc;
	if (len != TRACKER_IMAGE_SIZE || !get64(p + IMG_REFS) || get64(p + IMG_SIZE) > TRACKER_IMAGE_MAX)
		return -EBADMSG;
	im->format = get32(p + IMG_FORMAT);
	im->refs = get64(p + IMG_REFS);
	im->size = get64(p + IMG_SIZE);
	return 0;
}

/* Payload length of a meta value: what follows the fixed part. */
static int meta_payload_len(const struct tracker_meta_value *v, uint32_t *out)
{
	switch (v->type) {
	case TRACKER_META_T_U64:
		*out = 8;
		return 0;
	case TRACKER_META_T_BYTES:
		if (v->len > TRACKER_META_VALUE_MAX || (v->len && !v->bytes))
			return -EINVAL;
		*out = v->len;
		return 0;
	case TRACKER_META_T_REPLY:
		if (v->len > TRACKER_META_VALUE_MAX || (v->len && !v->bytes))
			return -EINVAL;
		*out = 8 + v->len;
		return 0;
	default:
		return -EINVAL;
	}
}

size_t tracker_meta_encoded_size(const struct tracker_meta_value *v)
{
	uint32_t n;

	if (meta_payload_len(v, &n))
		return 0;
	return TRACKER_META_FIXED + (size_t)n;
}

int tracker_meta_encode(const struct tracker_meta_value *v, void *buf, size_t cap)
{
	uint8_t *p = buf, *payload;
	uint32_t n;
	int rc;

	rc = meta_payload_len(v, &n);
	if (rc)
		return rc;
	if (cap < TRACKER_META_FIXED + (size_t)n)
		return -ENOBUFS;
	header_put(p, TRACKER_META_VERSION, TRACKER_META_FIXED);
	put32(p + META_TYPE, v->type);
	put32(p + META_LEN, n);
	put32(p + META_RESERVED, 0);
	payload = p + TRACKER_META_FIXED;
	switch (v->type) {
	case TRACKER_META_T_U64:
		put64(payload, v->u64);
		break;
	case TRACKER_META_T_REPLY:
		put64(payload, v->u64);
		if (v->len)
			memcpy(payload + 8, v->bytes, v->len);
		break;
	case TRACKER_META_T_BYTES:
		if (v->len)
			memcpy(payload, v->bytes, v->len);
		break;
	}
	return 0;
}

int tracker_meta_decode(struct tracker_meta_value *v, const void *buf, size_t len)
{
	const uint8_t *p = buf, *payload;
	uint32_t type, n;
	int rc;

	rc = header_check(p, len, TRACKER_META_VERSION, TRACKER_META_FIXED);
	if (rc)
		return rc;
	type = get32(p + META_TYPE);
	n = get32(p + META_LEN);
	if (get32(p + META_RESERVED) || len - TRACKER_META_FIXED != n)
		return -EBADMSG;
	payload = p + TRACKER_META_FIXED;
	v->type = type;
	v->u64 = 0;
	v->bytes = NULL;
	v->len = 0;
	switch (type) {
	case TRACKER_META_T_U64:
		if (n != 8)
			return -EBADMSG;
		v->u64 = get64(payload);
		return 0;
	case TRACKER_META_T_BYTES:
		if (n > TRACKER_META_VALUE_MAX)
			return -EBADMSG;
		v->len = n;
		v->bytes = n ? payload : NULL;
		return 0;
	case TRACKER_META_T_REPLY:
		if (n < 8 || n - 8 > TRACKER_META_VALUE_MAX)
			return -EBADMSG;
		v->u64 = get64(payload);
		v->len = n - 8;
		v->bytes = v->len ? payload + 8 : NULL;
		return 0;
	default:
		return -EBADMSG;
	}
}

void tracker_key_u64_encode(uint64_t v, uint8_t out[8])
{
	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)(v >> (56 - 8 * i));
}

uint64_t tracker_key_u64_decode(const uint8_t in[8])
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | in[i];
	return v;
}

void tracker_key_u32_encode(uint32_t v, uint8_t out[4])
{
	for (int i = 0; i < 4; i++)
		out[i] = (uint8_t)(v >> (24 - 8 * i));
}

uint32_t tracker_key_u32_decode(const uint8_t in[4])
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v = (v << 8) | in[i];
	return v;
}

void tracker_image_hash(const void *bytes, size_t size, uint8_t out[TRACKER_HASH_SIZE])
{
	XXH128_canonical_t c;

	_Static_assert(sizeof(c) == TRACKER_HASH_SIZE, "XXH128 canonical size");
	XXH128_canonicalFromHash(&c, XXH3_128bits(bytes, size));
	memcpy(out, c.digest, TRACKER_HASH_SIZE);
}
