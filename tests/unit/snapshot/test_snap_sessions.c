/* The sessions file (snap_sessions.h): round trips, the atomic write, and
 * refusal of truncated, flipped, hostile and over-limit inputs, with valid
 * checksums so that the structure checks behind the trailer are reached. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sys/stat.h>

#include "le.h"
#include "snap_sessions.h"
#include "snap_test_patch.h"

static void sample(struct snap_session *v)
{
	memset(v, 0, 3 * sizeof(*v));
	strcpy(v[0].id, "vm1-4711");
	v[0].plan = SNAP_PLAN_SUSPENDED;
	v[0].device = 1;
	strcpy(v[0].snapshot, "vm1-4711-1714564800");
	strcpy(v[0].latest, "vm1-4711-1714564800");
	strcpy(v[1].id, "vm2");
	v[1].plan = SNAP_PLAN_NONE;
	v[1].device = -1;
	strcpy(v[1].latest, "vm2-1");
	memset(v[2].id, 'L', SNAP_NAME_MAX);
	v[2].plan = SNAP_PLAN_RESTORE;
	v[2].device = 0;
	memset(v[2].snapshot, 'n', SNAP_SNAPSHOT_NAME_MAX);
}

/* Recompute the trailer over a mutated image. */
static void reseal(uint8_t *buf, size_t len)
{
	snap_hash128(buf, len - SNAP_TRAILER_BYTES, buf + len - SNAP_TRAILER_BYTES);
}

static void test_round_trip(void **state)
{
	struct snap_session v[3], *got;
	struct snap_buf b = { 0 };
	uint32_t n;

	(void)state;
	sample(v);
	assert_int_equal(snap_sessions_encode(v, 3, &b), 0);
	assert_int_equal(snap_sessions_decode(b.data, b.len, 16, &got, &n), 0);
	assert_int_equal(n, 3);
	assert_memory_equal(got, v, sizeof(v));
	free(got);
	/* An empty list is a valid file. */
	snap_buf_free(&b);
	assert_int_equal(snap_sessions_encode(v, 0, &b), 0);
	assert_int_equal(b.len, SNAP_SESSIONS_HEADER_BYTES + SNAP_TRAILER_BYTES);
	assert_int_equal(snap_sessions_decode(b.data, b.len, 16, &got, &n), 0);
	assert_int_equal(n, 0);
	assert_null(got);
	snap_buf_free(&b);
}

static void test_limit(void **state)
{
	struct snap_session v[3], *got = NULL;
	struct snap_buf b = { 0 };
	uint32_t n = 99;

	(void)state;
	sample(v);
	assert_int_equal(snap_sessions_encode(v, 3, &b), 0);
	assert_int_equal(snap_sessions_decode(b.data, b.len, 2, &got, &n), -E2BIG);
	assert_null(got);
	assert_int_equal(n, 0);
	snap_buf_free(&b);
}

static void test_encode_refuses(void **state)
{
	struct snap_session v[3];
	struct snap_buf b = { 0 };

	(void)state;
	sample(v);
	strcpy(v[1].snapshot, "x");           /* a snapshot without a plan */
	assert_int_equal(snap_sessions_encode(v, 3, &b), -EINVAL);
	snap_buf_free(&b);
	sample(v);
	strcpy(v[0].id, "a/b");
	assert_int_equal(snap_sessions_encode(v, 3, &b), -EINVAL);
	snap_buf_free(&b);
	sample(v);
	v[0].plan = 7;
	assert_int_equal(snap_sessions_encode(v, 3, &b), -EINVAL);
	snap_buf_free(&b);
}

static uint8_t *image(size_t *len)
{
	struct snap_session v[3];
	struct snap_buf b = { 0 };
	uint8_t *p;

	sample(v);
	assert_int_equal(snap_sessions_encode(v, 3, &b), 0);
	p = malloc(b.len);
	memcpy(p, b.data, b.len);
	*len = b.len;
	snap_buf_free(&b);
	return p;
}

/* Every truncation and every flipped byte is refused, resealed or not. */
static void test_damage(void **state)
{
	struct snap_session *got;
	size_t len;
	uint32_t n;
	uint8_t *p = image(&len);

	(void)state;
	for (size_t cut = 0; cut < len; cut++)
		assert_int_not_equal(snap_sessions_decode(p, cut, 16, &got, &n), 0);
	for (size_t i = 0; i < len; i++) {
		p[i] ^= 0x5a;
		assert_int_not_equal(snap_sessions_decode(p, len, 16, &got, &n), 0);
		p[i] ^= 0x5a;
	}
	assert_int_equal(snap_sessions_decode(p, len, 16, &got, &n), 0);
	free(got);
	free(p);
}

/* Structure checks behind a valid trailer. */
static void test_hostile(void **state)
{
	struct snap_session *got;
	size_t len;
	uint32_t n;
	uint8_t *p;
	/* Offsets in the first entry: header 16, plan 16, device 20, id 24. */
	struct record_patch cases[] = {
		{ 12, 0xffffffffu, 4, -EBADMSG },       /* count the bytes cannot hold */
		{ 12, 2, 4, -EBADMSG },                 /* count too small: bytes left over */
		{ 12, 4, 4, -EBADMSG },                 /* count one too many */
		{ 8, 2, 4, -ENOTSUP },                  /* another version */
		{ 16, 3, 4, -EBADMSG },                 /* unknown plan */
		{ 20, (uint32_t)-2, 4, -EBADMSG },      /* device below -1 */
		{ 24, 0, 2, -EBADMSG },                 /* empty id */
		{ 24, 300, 2, -EBADMSG },               /* id longer than the rest */
		{ 26, '/', 1, -EBADMSG },               /* a path in the id */
		{ 27, 0, 1, -EBADMSG },                 /* a NUL in the id */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		p = image(&len);
		record_patch_apply(p, len, &cases[i]);
		got = (void *)1;
		assert_int_equal(snap_sessions_decode(p, len, 16, &got, &n), cases[i].want);
		assert_null(got);
		free(p);
	}
	/* A duplicate id: the second entry renamed to the first's. */
	{
		struct snap_session v[2];
		struct snap_buf b = { 0 };

		memset(v, 0, sizeof(v));
		strcpy(v[0].id, "aa");
		strcpy(v[1].id, "ab");
		v[0].device = v[1].device = -1;
		strcpy(v[0].latest, "s");
		strcpy(v[1].latest, "s");
		assert_int_equal(snap_sessions_encode(v, 2, &b), 0);
		/* header 16 + entry 0 (8 + 2+2 + 2 + 2+1) = 33; entry 1's id at 33 + 8 + 2 */
		b.data[33 + 8 + 2 + 1] = 'a';
		reseal(b.data, b.len);
		assert_int_equal(snap_sessions_decode(b.data, b.len, 16, &got, &n), -EBADMSG);
		snap_buf_free(&b);
	}
}

static void test_file(void **state)
{
	char dir[] = "/tmp/snap-sessions-XXXXXX", path[64], tmp[80];
	struct snap_session v[3], *got;
	uint32_t n;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/sessions", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	/* Missing: an empty list. */
	assert_int_equal(snap_sessions_read(path, 16, &got, &n), 0);
	assert_int_equal(n, 0);
	sample(v);
	assert_int_equal(snap_sessions_write(path, v, 3), 0);
	assert_int_not_equal(access(tmp, F_OK), 0);
	assert_int_equal(snap_sessions_read(path, 16, &got, &n), 0);
	assert_int_equal(n, 3);
	assert_memory_equal(got, v, sizeof(v));
	free(got);
	/* Rewritten with fewer entries: the old bytes are gone. */
	assert_int_equal(snap_sessions_write(path, v, 1), 0);
	assert_int_equal(snap_sessions_read(path, 16, &got, &n), 0);
	assert_int_equal(n, 1);
	free(got);
	/* Truncated on disk, and a directory in its place. */
	assert_int_equal(truncate(path, 20), 0);
	assert_int_equal(snap_sessions_read(path, 16, &got, &n), -EBADMSG);
	f = fopen(path, "w");
	fclose(f);
	assert_int_equal(snap_sessions_read(path, 16, &got, &n), -EBADMSG);
	unlink(path);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_not_equal(snap_sessions_read(path, 16, &got, &n), 0);
	rmdir(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_limit),
		cmocka_unit_test(test_encode_refuses),
		cmocka_unit_test(test_damage),
		cmocka_unit_test(test_hostile),
		cmocka_unit_test(test_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
