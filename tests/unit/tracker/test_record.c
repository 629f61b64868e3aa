/* Record encodings: round trips, a golden layout, and every rejection. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "record.h"

static void test_object_golden(void **state)
{
	static const uint8_t args[3] = {0xaa, 0xbb, 0xcc};
	static const uint8_t want[] = {
		0x01, 0x00, 0x18, 0x00,                         /* version 1, fixed 24 */
		0x04, 0x03, 0x02, 0x01,                         /* kind */
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, /* parent */
		0x0f, 0x00, 0x00, 0x00,                         /* flags */
		0x03, 0x00, 0x00, 0x00,                         /* args_len */
		0xaa, 0xbb, 0xcc,
	};
	struct tracker_object o = {.kind = 0x01020304, .flags = 0xf,
				   .parent = 0x8877665544332211ull, .args = args, .args_len = 3};
	struct tracker_object d;
	uint8_t buf[64];

	assert_int_equal(tracker_object_encoded_size(&o), sizeof(want));
	assert_int_equal(tracker_object_encode(&o, buf, sizeof(buf)), 0);
	assert_memory_equal(buf, want, sizeof(want));
	assert_int_equal(tracker_object_decode(&d, buf, sizeof(want)), 0);
	assert_int_equal(d.kind, o.kind);
	assert_int_equal(d.flags, o.flags);
	assert_true(d.parent == o.parent);
	assert_int_equal(d.args_len, 3);
	assert_memory_equal(d.args, args, 3);
	assert_ptr_equal(d.args, buf + TRACKER_OBJECT_FIXED);
	assert_int_equal(tracker_object_encode(&o, buf, sizeof(want) - 1), -ENOBUFS);
}

/* Every shorter prefix, a longer buffer, a bumped version and a wrong fixed
 * length must all be rejected. */
static void rejections_check(int (*decode)(void *out, const void *buf, size_t len),
			     const uint8_t *rec, size_t len)
{
	uint8_t buf[256], out[64];

	assert_true(len + 1 <= sizeof(buf));
	memcpy(buf, rec, len);
	assert_int_equal(decode(out, buf, len), 0);
	for (size_t n = 0; n < len; n++)
		assert_int_equal(decode(out, buf, n), -EBADMSG);
	buf[len] = 0;
	assert_int_equal(decode(out, buf, len + 1), -EBADMSG);
	buf[0] = 2;
	assert_int_equal(decode(out, buf, len), -EPROTONOSUPPORT);
	buf[0] = 0;
	assert_int_equal(decode(out, buf, len), -EPROTONOSUPPORT);
	buf[0] = rec[0];
	buf[2]++;
	assert_int_equal(decode(out, buf, len), -EBADMSG);
}

static int object_decode_any(void *out, const void *buf, size_t len)
{
	return tracker_object_decode(out, buf, len);
}

static int region_decode_any(void *out, const void *buf, size_t len)
{
	return tracker_region_decode(out, buf, len);
}

static int image_decode_any(void *out, const void *buf, size_t len)
{
	return tracker_image_decode(out, buf, len);
}

static int meta_decode_any(void *out, const void *buf, size_t len)
{
	return tracker_meta_decode(out, buf, len);
}

static void test_rejections(void **state)
{
	uint8_t buf[128];
	struct tracker_object o = {.kind = 7, .args = "hello", .args_len = 5};
	struct tracker_region r = {.size = 4096, .owner = 3, .flags = 1, .kind = 2};
	struct tracker_image im = {.format = 1, .refs = 2, .size = 100};
	struct tracker_meta_value mv = {.type = TRACKER_META_T_REPLY, .u64 = 42,
					.bytes = "reply", .len = 5};

	assert_int_equal(tracker_object_encode(&o, buf, sizeof(buf)), 0);
	rejections_check(object_decode_any, buf, tracker_object_encoded_size(&o));
	assert_int_equal(tracker_region_encode(&r, buf, sizeof(buf)), 0);
	rejections_check(region_decode_any, buf, TRACKER_REGION_SIZE);
	assert_int_equal(tracker_image_encode(&im, buf, sizeof(buf)), 0);
	rejections_check(image_decode_any, buf, TRACKER_IMAGE_SIZE);
	assert_int_equal(tracker_meta_encode(&mv, buf, sizeof(buf)), 0);
	rejections_check(meta_decode_any, buf, tracker_meta_encoded_size(&mv));
}

static void test_field_rejections(void **state)
{
	uint8_t buf[128];
	struct tracker_object o = {.kind = 1}, od;
	struct tracker_region r = {.size = 1}, rd;
	struct tracker_image im = {.refs = 1, .size = 1}, imd;
	struct tracker_meta_value mv = {.type = TRACKER_META_T_U64, .u64 = 9}, mvd;

	/* args_len beyond the bound, even with the bytes present */
	assert_int_equal(tracker_object_encode(&o, buf, sizeof(buf)), 0);
	buf[20] = 0xff; buf[21] = 0xff; buf[22] = 0xff; buf[23] = 0xff;
	assert_int_equal(tracker_object_decode(&od, buf, sizeof(buf)), -EBADMSG);
	o.args_len = TRACKER_OBJECT_ARGS_MAX + 1;
	o.args = buf;
	assert_int_equal(tracker_object_encode(&o, buf, sizeof(buf)), -EINVAL);

	/* region: reserved bits, zero size */
	assert_int_equal(tracker_region_encode(&r, buf, sizeof(buf)), 0);
	buf[28] = 1;
	assert_int_equal(tracker_region_decode(&rd, buf, TRACKER_REGION_SIZE), -EBADMSG);
	buf[28] = 0;
	memset(buf + 8, 0, 8);
	assert_int_equal(tracker_region_decode(&rd, buf, TRACKER_REGION_SIZE), -EBADMSG);
	r.size = 0;
	assert_int_equal(tracker_region_encode(&r, buf, sizeof(buf)), -EINVAL);

	/* image: zero refs, oversized */
	assert_int_equal(tracker_image_encode(&im, buf, sizeof(buf)), 0);
	memset(buf + 8, 0, 8);
	assert_int_equal(tracker_image_decode(&imd, buf, TRACKER_IMAGE_SIZE), -EBADMSG);
	im.size = (uint64_t)TRACKER_IMAGE_MAX + 1;
	assert_int_equal(tracker_image_encode(&im, buf, sizeof(buf)), -EINVAL);

	/* meta: unknown type, u64 with the wrong length, reply shorter than a seq */
	assert_int_equal(tracker_meta_encode(&mv, buf, sizeof(buf)), 0);
	assert_int_equal(tracker_meta_decode(&mvd, buf, 24), 0);
	assert_true(mvd.u64 == 9);
	buf[4] = 9;
	assert_int_equal(tracker_meta_decode(&mvd, buf, 24), -EBADMSG);
	buf[4] = TRACKER_META_T_U64;
	buf[8] = 4;
	assert_int_equal(tracker_meta_decode(&mvd, buf, 20), -EBADMSG);
	buf[4] = TRACKER_META_T_REPLY;
	assert_int_equal(tracker_meta_decode(&mvd, buf, 20), -EBADMSG);
	mv.type = 77;
	assert_int_equal(tracker_meta_encode(&mv, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(tracker_meta_encoded_size(&mv), 0);
}

static void test_meta_types(void **state)
{
	uint8_t buf[64];
	struct tracker_meta_value in = {.type = TRACKER_META_T_BYTES, .bytes = "abc", .len = 3}, out;

	assert_int_equal(tracker_meta_encode(&in, buf, sizeof(buf)), 0);
	assert_int_equal(tracker_meta_decode(&out, buf, TRACKER_META_FIXED + 3), 0);
	assert_int_equal(out.type, TRACKER_META_T_BYTES);
	assert_int_equal(out.len, 3);
	assert_memory_equal(out.bytes, "abc", 3);

	in = (struct tracker_meta_value){.type = TRACKER_META_T_REPLY, .u64 = 1ull << 40};
	assert_int_equal(tracker_meta_encode(&in, buf, sizeof(buf)), 0);
	assert_int_equal(tracker_meta_decode(&out, buf, TRACKER_META_FIXED + 8), 0);
	assert_true(out.u64 == 1ull << 40);
	assert_int_equal(out.len, 0);
	assert_null(out.bytes);
}

static void test_keys(void **state)
{
	uint8_t a[8], b[8], c[4];
	uint8_t h1[TRACKER_HASH_SIZE], h2[TRACKER_HASH_SIZE];

	/* big-endian: memcmp order is numeric order */
	tracker_key_u64_encode(0xff, a);
	tracker_key_u64_encode(0x100, b);
	assert_true(memcmp(a, b, 8) < 0);
	assert_true(tracker_key_u64_decode(b) == 0x100);
	tracker_key_u64_encode(0x0102030405060708ull, a);
	assert_int_equal(a[0], 1);
	assert_int_equal(a[7], 8);
	tracker_key_u32_encode(0x01020304, c);
	assert_int_equal(c[0], 1);
	assert_int_equal(tracker_key_u32_decode(c), 0x01020304);

	tracker_image_hash("abc", 3, h1);
	tracker_image_hash("abd", 3, h2);
	assert_memory_not_equal(h1, h2, sizeof(h1));
	tracker_image_hash("abc", 3, h2);
	assert_memory_equal(h1, h2, sizeof(h1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_object_golden),
		cmocka_unit_test(test_rejections),
		cmocka_unit_test(test_field_rejections),
		cmocka_unit_test(test_meta_types),
		cmocka_unit_test(test_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
