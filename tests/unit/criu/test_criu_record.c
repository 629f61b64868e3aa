/* The images folder's record of its GPU snapshots (criu/criu_record.h). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <xxhash.h>

#include "criu_record.h"
#include "le.h"

static void record_fill(struct criu_record *r, unsigned count)
{
	memset(r, 0, sizeof(*r));
	r->pid = 4242;
	r->count = count;
	for (unsigned i = 0; i < count; i++) {
		struct criu_record_entry *e = &r->entries[i];

		snprintf(e->session, sizeof(e->session), "host-%u", i);
		snprintf(e->snapshot, sizeof(e->snapshot), "host-%u-1796169917356", i);
		e->seq = 700 + i;
		e->created_ns = 1796169917356000000ull + i;
		for (unsigned j = 0; j < CRIU_RECORD_HASH_BYTES; j++) {
			e->journal_hash[j] = (uint8_t)(i * 16 + j);
			e->chunks_hash[j] = (uint8_t)(255 - j - i);
		}
	}
}

/* Rewrite the checksum after a deliberate change, so that the decoder's
 * other checks are the ones that must refuse it. */
static void reseal(uint8_t *buf, size_t len)
{
	le64_put(buf + len - 8, XXH64(buf, len - 8, 0));
}

static void test_round_trip(void **state)
{
	uint8_t buf[CRIU_RECORD_SIZE_MAX];
	struct criu_record a, b;
	char err[256];

	for (unsigned n = 1; n <= CRIU_RECORD_SESSIONS_MAX; n++) {
		record_fill(&a, n);
		int len = criu_record_encode(&a, buf, sizeof(buf));

		assert_int_equal(len, CRIU_RECORD_SIZE(n));
		assert_int_equal(criu_record_decode(buf, (size_t)len, &b, err, sizeof(err)), 0);
		assert_int_equal(b.count, n);
		assert_int_equal(b.pid, 4242);
		assert_memory_equal(a.entries, b.entries, n * sizeof(a.entries[0]));
	}
	/* The layout is pinned: magic, version, then the first entry's names. */
	record_fill(&a, 1);
	assert_int_equal(criu_record_encode(&a, buf, sizeof(buf)), 592);
	assert_memory_equal(buf, "TERNCRIU\1\0\0\0\1\0\0\0\x92\x10\0\0\0\0\0\0host-0", 30);
	assert_int_equal(le64_get(buf + 24 + 512), 700);
}

static void test_encode_refuses(void **state)
{
	uint8_t buf[CRIU_RECORD_SIZE_MAX];
	struct criu_record r;

	record_fill(&r, 0);
	assert_int_equal(criu_record_encode(&r, buf, sizeof(buf)), -EINVAL);
	record_fill(&r, 1);
	r.count = CRIU_RECORD_SESSIONS_MAX + 1;
	assert_int_equal(criu_record_encode(&r, buf, sizeof(buf)), -EINVAL);
	record_fill(&r, 2);
	r.entries[1].snapshot[0] = 0;
	assert_int_equal(criu_record_encode(&r, buf, sizeof(buf)), -EINVAL);
	record_fill(&r, 2);
	memset(r.entries[0].session, 'a', sizeof(r.entries[0].session));      /* no NUL */
	assert_int_equal(criu_record_encode(&r, buf, sizeof(buf)), -EINVAL);
	record_fill(&r, 2);
	assert_int_equal(criu_record_encode(&r, buf, CRIU_RECORD_SIZE(2) - 1), -ENOSPC);
}

static void expect_refused(const uint8_t *buf, size_t len, const char *why)
{
	struct criu_record r;
	char err[256] = "";

	assert_int_equal(criu_record_decode(buf, len, &r, err, sizeof(err)), -EBADMSG);
	if (!strstr(err, why))
		fail_msg("refused with '%s', expected '%s'", err, why);
}

static void test_truncated_and_flipped(void **state)
{
	uint8_t buf[CRIU_RECORD_SIZE_MAX], bad[CRIU_RECORD_SIZE_MAX];
	struct criu_record r;
	char err[256];
	int len;

	record_fill(&r, 3);
	len = criu_record_encode(&r, buf, sizeof(buf));
	/* Every truncation is refused. */
	for (int n = 0; n < len; n++)
		assert_int_equal(criu_record_decode(buf, (size_t)n, &r, err, sizeof(err)), -EBADMSG);
	/* Every single flipped bit is refused (the checksum, or a field first). */
	for (int i = 0; i < len; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			memcpy(bad, buf, (size_t)len);
			bad[i] ^= (uint8_t)(1u << bit);
			assert_int_equal(criu_record_decode(bad, (size_t)len, &r, err, sizeof(err)), -EBADMSG);
		}
	}
	/* A byte too many. */
	memcpy(bad, buf, (size_t)len);
	bad[len] = 0;
	expect_refused(bad, (size_t)len + 1, "bytes for 3 sessions");
}

static void test_hostile_fields(void **state)
{
	uint8_t buf[CRIU_RECORD_SIZE_MAX], bad[CRIU_RECORD_SIZE_MAX];
	struct criu_record r;
	size_t len;

	record_fill(&r, 2);
	len = (size_t)criu_record_encode(&r, buf, sizeof(buf));
	memcpy(bad, buf, len);
	memcpy(bad, "TERNCRIV", 8);
	expect_refused(bad, len, "magic");
	memcpy(bad, buf, len);
	le32_put(bad + 8, 2);
	reseal(bad, len);
	expect_refused(bad, len, "version 2");
	memcpy(bad, buf, len);
	le32_put(bad + 12, 0);
	reseal(bad, len);
	expect_refused(bad, len, "0 sessions");
	memcpy(bad, buf, len);
	le32_put(bad + 12, 0xffffffffu);        /* a count sized to make us read far */
	reseal(bad, len);
	expect_refused(bad, len, "sessions: 1 to");
	memcpy(bad, buf, len);
	le32_put(bad + 12, 3);                  /* more entries than bytes */
	reseal(bad, len);
	expect_refused(bad, len, "for 3 sessions");
	memcpy(bad, buf, len);
	le32_put(bad + 20, 1);
	reseal(bad, len);
	expect_refused(bad, len, "reserved");
	memcpy(bad, buf, len);
	memset(bad + 24, 'a', 256);             /* a session id without its NUL */
	reseal(bad, len);
	expect_refused(bad, len, "has no end");
	memcpy(bad, buf, len);
	memcpy(bad + 24 + 256, "../../etc", 10); /* a snapshot name that is a path */
	reseal(bad, len);
	expect_refused(bad, len, "no valid snapshot name");
	memcpy(bad, buf, len);
	bad[24] = 0;                            /* an empty session id */
	reseal(bad, len);
	expect_refused(bad, len, "no valid session id");
	memcpy(bad, buf, len);
	memcpy(bad + 24 + CRIU_RECORD_ENTRY_SIZE, bad + 24, 256);   /* one session twice */
	reseal(bad, len);
	expect_refused(bad, len, "recorded twice");
}

static void test_file(void **state)
{
	char dir[] = "/tmp/tern-criu-record-XXXXXX", err[256], path[64];
	struct criu_record a, b;
	uint8_t big[CRIU_RECORD_SIZE_MAX + 16] = { 0 };
	int fd, dfd;

	assert_non_null(mkdtemp(dir));
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	assert_true(dfd >= 0);
	assert_int_equal(criu_record_read(dfd, &b, err, sizeof(err)), -ENOENT);
	record_fill(&a, 4);
	assert_int_equal(criu_record_write(dfd, &a), 0);
	assert_int_equal(criu_record_read(dfd, &b, err, sizeof(err)), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(faccessat(dfd, CRIU_RECORD_FILE ".tmp", F_OK, 0), -1);
	/* A file longer than any record is refused without reading it all. */
	snprintf(path, sizeof(path), "%s/%s", dir, CRIU_RECORD_FILE);
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, big, sizeof(big)), (ssize_t)sizeof(big));
	close(fd);
	assert_int_equal(criu_record_read(dfd, &b, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "longer than"));
	/* An empty one too. */
	fd = open(path, O_WRONLY | O_TRUNC);
	close(fd);
	assert_int_equal(criu_record_read(dfd, &b, err, sizeof(err)), -EBADMSG);
	/* Writing again replaces it. */
	assert_int_equal(criu_record_write(dfd, &a), 0);
	assert_int_equal(criu_record_read(dfd, &b, err, sizeof(err)), 0);
	unlinkat(dfd, CRIU_RECORD_FILE, 0);
	close(dfd);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_encode_refuses),
		cmocka_unit_test(test_truncated_and_flipped),
		cmocka_unit_test(test_hostile_fields),
		cmocka_unit_test(test_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
