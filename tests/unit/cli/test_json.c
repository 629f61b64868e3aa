/* ckpt's JSON parser and writer: ternd's replies parse, malformed and
 * hostile text is refused without crashing, and whatever the writer prints
 * parses back to the same values. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"

static int parse(const char *text, struct json_value **v)
{
	return json_parse(text, strlen(text), v);
}

static void test_reply_parses(void **state)
{
	const char *reply = "{\"ok\":true,\"snapshot\":\"s1-17\",\"parent\":\"\",\"pause_ms\":12.5,"
			    "\"bytes\":18446744073709551615,\"created_ns\":1714564800123456789,"
			    "\"list\":[1,-2,3e2,null,false,{\"a\":[]}],\"esc\":\"a\\\"b\\\\c\\n\\u00e9\\ud83d\\ude00\"}";
	struct json_value *v;
	uint64_t u;
	double d;
	bool b;

	(void)state;
	assert_int_equal(parse(reply, &v), 0);
	assert_true(json_member_bool(v, "ok", &b) && b);
	assert_string_equal(json_member_string(v, "snapshot"), "s1-17");
	assert_string_equal(json_member_string(v, "parent"), "");
	assert_true(json_member_number(v, "pause_ms", &d));
	assert_true(d > 12.49 && d < 12.51);
	/* u64 exactness past 2^53: sizes and ns times need it. */
	assert_true(json_member_u64(v, "bytes", &u));
	assert_true(u == UINT64_MAX);
	assert_true(json_member_u64(v, "created_ns", &u));
	assert_true(u == 1714564800123456789ull);
	assert_false(json_member_u64(v, "pause_ms", &u));
	assert_int_equal(json_member(v, "list")->count, 6);
	assert_false(json_member(v, "list")->items[1].is_u64);
	assert_string_equal(json_member_string(v, "esc"), "a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80");
	assert_null(json_member(v, "missing"));
	assert_null(json_member_string(v, "ok"));
	json_free(v);
}

static void test_malformed_refused(void **state)
{
	static const char *bad[] = {
		"", "{", "}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "[1 2]", "{a:1}",
		"\"unterminated", "\"bad \\q escape\"", "\"\\u12\"", "\"\\u0000\"", "\"\\udc00\"",
		"\"\\ud800x\"", "01", "1.", "-", "1e", "tru", "nul", "{} {}", "\"\x01\"",
		"\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xff\"", "[\"a\"", "{\"a\":1 \"b\":2}",
	};
	struct json_value *v;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = parse(bad[i], &v);

		if (rc != -EBADMSG)
			fail_msg("'%s' gave %d", bad[i], rc);
		assert_null(v);
	}
}

static void test_depth_capped(void **state)
{
	char deep[4 * JSON_DEPTH_MAX];
	struct json_value *v;
	size_t n = JSON_DEPTH_MAX + 2;

	(void)state;
	memset(deep, '[', n);
	memset(deep + n, ']', n);
	assert_int_equal(json_parse(deep, 2 * n, &v), -EBADMSG);
	n = JSON_DEPTH_MAX;
	memset(deep, '[', n);
	memset(deep + n, ']', n);
	assert_int_equal(json_parse(deep, 2 * n, &v), 0);
	json_free(v);
}

/* Every prefix of a valid document is refused, never over-read (run under
 * ASan to see the point). */
static void test_truncations(void **state)
{
	const char *doc = "{\"progress\":0.42,\"stage\":\"copy\",\"bytes\":123,\"total\":456,\"x\":[true,\"\\u00e9\"]}";
	struct json_value *v;

	(void)state;
	for (size_t n = 0; n < strlen(doc); n++) {
		char *copy = malloc(n + 1);

		memcpy(copy, doc, n);
		assert_int_not_equal(json_parse(copy, n, &v), 0);
		free(copy);
	}
	assert_int_equal(json_parse(doc, strlen(doc), &v), 0);
	json_free(v);
}

static void test_writer_round_trip(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct json_writer w;
	struct json_value *v, *again;
	uint64_t u;
	double d;

	(void)state;
	assert_non_null(f);
	json_writer_init(&w, f);
	json_object_begin(&w, NULL);
	json_string_put(&w, "plain", "snap-1");
	/* Guest-chosen bytes: quotes, control characters, invalid UTF-8. */
	json_bytes_put(&w, "hostile", "a\"\\\n\x01\xff\xc3\xa9", 8);
	json_u64_put(&w, "big", UINT64_MAX);
	json_i64_put(&w, "neg", -7);
	json_double_put(&w, "ratio", 2.5);
	json_double_put(&w, "nan", 0.0 / 0.0);
	json_array_begin(&w, "empty");
	json_array_end(&w);
	json_array_begin(&w, "items");
	json_object_begin(&w, NULL);
	json_bool_put(&w, "t", true);
	json_object_end(&w);
	json_null_put(&w, NULL);
	json_array_end(&w);
	json_object_end(&w);
	fclose(f);
	assert_int_equal(json_parse(buf, len, &v), 0);
	assert_string_equal(json_member_string(v, "plain"), "snap-1");
	assert_string_equal(json_member_string(v, "hostile"), "a\"\\\n\x01\xef\xbf\xbd\xc3\xa9");
	assert_true(json_member_u64(v, "big", &u) && u == UINT64_MAX);
	assert_true(json_member_number(v, "neg", &d) && d == -7);
	assert_true(json_member_number(v, "ratio", &d) && d == 2.5);
	assert_int_equal(json_member(v, "nan")->type, JSON_NULL);
	assert_int_equal(json_member(v, "empty")->count, 0);
	assert_int_equal(json_member(v, "items")->count, 2);
	free(buf);

	/* json_value_put re-emits a parsed tree identically. */
	buf = NULL;
	f = open_memstream(&buf, &len);
	json_writer_init(&w, f);
	json_value_put(&w, NULL, v);
	fclose(f);
	assert_int_equal(json_parse(buf, len, &again), 0);
	assert_string_equal(json_member_string(again, "hostile"), json_member_string(v, "hostile"));
	assert_true(json_member_u64(again, "big", &u) && u == UINT64_MAX);
	assert_int_equal(json_member(again, "items")->count, 2);
	json_free(again);
	json_free(v);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reply_parses),
		cmocka_unit_test(test_malformed_refused),
		cmocka_unit_test(test_depth_capped),
		cmocka_unit_test(test_truncations),
		cmocka_unit_test(test_writer_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
