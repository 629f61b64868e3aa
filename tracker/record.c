/* Journal record encodings: see record.h and docs/journal.md. */
#include "record.h"
#include "le.h"

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

/* Checks the common header: known version, the fixed length that version
 * has, and a buffer at least that long. */
static int header_check(const uint8_t *p, size_t len, unsigned version, unsigned fixed)
{
	if (len < 4)
		return -EBADMSG;
	if (le16_get(p + HDR_VERSION) != version)
		return -EPROTONOSUPPORT;
	if (le16_get(p + HDR_FIXED) != fixed || len < fixed)
		return -EBADMSG;
	return 0;
}

static void header_put(uint8_t *p, unsigned version, unsigned fixed)
{
	le16_put(p + HDR_VERSION, (uint16_t)version);
	le16_put(p + HDR_FIXED, (uint16_t)fixed);
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
	le32_put(p + OBJ_KIND, o->kind);
	le64_put(p + OBJ_PARENT, o->parent);
	le32_put(p + OBJ_FLAGS, o->flags);
	le32_put(p + OBJ_ARGS_LEN, o->args_len);
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
	args_len = le32_get(p + OBJ_ARGS_LEN);
	if (args_len > TRACKER_OBJECT_ARGS_MAX || len - TRACKER_OBJECT_FIXED != args_len)
		return -EBADMSG;
	o->kind = le32_get(p + OBJ_KIND);
	o->parent = le64_get(p + OBJ_PARENT);
	o->flags = le32_get(p + OBJ_FLAGS);
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
	le32_put(p + REG_FLAGS, r->flags);
	le64_put(p + REG_SIZE, r->size);
	le64_put(p + REG_OWNER, r->owner);
	le32_put(p + REG_KIND, r->kind);
	le32_put(p + REG_RESERVED, 0);
	return 0;
}

int tracker_region_decode(struct tracker_region *r, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int rc;

	rc = header_check(p, len, TRACKER_REGION_VERSION, TRACKER_REGION_SIZE);
	if (rc)
		return rc;
	if (len != TRACKER_REGION_SIZE || le32_get(p + REG_RESERVED) || !le64_get(p + REG_SIZE))
		return -EBADMSG;
	r->flags = le32_get(p + REG_FLAGS);
	r->size = le64_get(p + REG_SIZE);
	r->owner = le64_get(p + REG_OWNER);
	r->kind = le32_get(p + REG_KIND);
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
	le32_put(p + IMG_FORMAT, im->format);
	le64_put(p + IMG_REFS, im->refs);
	le64_put(p + IMG_SIZE, im->size);
	return 0;
}

int tracker_image_decode(struct tracker_image *im, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int rc;

	rc = header_check(p, len, TRACKER_IMAGE_VERSION, TRACKER_IMAGE_SIZE);
	if (rc)
		return rc;
	if (len != TRACKER_IMAGE_SIZE || !le64_get(p + IMG_REFS) || le64_get(p + IMG_SIZE) > TRACKER_IMAGE_MAX)
		return -EBADMSG;
	im->format = le32_get(p + IMG_FORMAT);
	im->refs = le64_get(p + IMG_REFS);
	im->size = le64_get(p + IMG_SIZE);
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
	le32_put(p + META_TYPE, v->type);
	le32_put(p + META_LEN, n);
	le32_put(p + META_RESERVED, 0);
	payload = p + TRACKER_META_FIXED;
	switch (v->type) {
	case TRACKER_META_T_U64:
		le64_put(payload, v->u64);
		break;
	case TRACKER_META_T_REPLY:
		le64_put(payload, v->u64);
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
	type = le32_get(p + META_TYPE);
	n = le32_get(p + META_LEN);
	if (le32_get(p + META_RESERVED) || len - TRACKER_META_FIXED != n)
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
		v->u64 = le64_get(payload);
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
		v->u64 = le64_get(payload);
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
