/* common/log.c: the plain line format, and the journal's when the log's
 * descriptor is the stream JOURNAL_STREAM names; every malformed
 * JOURNAL_STREAM keeps the plain format. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#define LOG_PREFIX "unit: "
#include "log.h"

static int pipe_fds[2];

static int setup(void **state)
{
	(void)state;
	return pipe(pipe_fds);
}

static int teardown(void **state)
{
	(void)state;
	unsetenv("JOURNAL_STREAM");
	close(pipe_fds[0]);
	close(pipe_fds[1]);
	return 0;
}

/* What the logger wrote since the last call. */
static const char *drain(void)
{
	static char buf[8192];
	ssize_t n;

	n = read(pipe_fds[0], buf, sizeof(buf) - 1);
	assert_true(n > 0);
	buf[n] = 0;
	return buf;
}

static void journal_stream_of(int fd, unsigned long long add_to_ino)
{
	struct stat st;
	char env[64];

	assert_int_equal(fstat(fd, &st), 0);
	snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino + add_to_ino);
	setenv("JOURNAL_STREAM", env, 1);
}

static void assert_plain(const char *line, const char *level, const char *text)
{
	char want[256];

	/* "HH:MM:SS.mmm ident[pid] level: prefix text" */
	assert_true(strlen(line) > 13);
	assert_true(line[2] == ':' && line[5] == ':' && line[8] == '.' && line[12] == ' ');
	snprintf(want, sizeof(want), "t[%d] %s: unit: %s\n", (int)getpid(), level, text);
	assert_string_equal(line + 13, want);
}

static void test_journal_format(void **state)
{
	char want[512];

	(void)state;
	journal_stream_of(pipe_fds[1], 0);
	log_open("t", LOG_INFO, pipe_fds[1]);
	pr_err("lost %d", 7);
	snprintf(want, sizeof(want), "<3>t[%d] error: unit: lost 7\n", (int)getpid());
	assert_string_equal(drain(), want);
	pr_warn("w");
	pr_info("i");
	snprintf(want, sizeof(want), "<4>t[%d] warn: unit: w\n<6>t[%d] info: unit: i\n", (int)getpid(),
		 (int)getpid());
	assert_string_equal(drain(), want);
	pr_debug("not written");
	pr_err("after");
	snprintf(want, sizeof(want), "<3>t[%d] error: unit: after\n", (int)getpid());
	assert_string_equal(drain(), want);

	/* Level debug: priority 7. */
	log_open("t", LOG_DEBUG, pipe_fds[1]);
	pr_debug("d");
	snprintf(want, sizeof(want), "<7>t[%d] debug: unit: d\n", (int)getpid());
	assert_string_equal(drain(), want);
}

static void test_other_stream_is_plain(void **state)
{
	(void)state;
	journal_stream_of(pipe_fds[1], 1);    /* another inode */
	log_open("t", LOG_INFO, pipe_fds[1]);
	pr_err("x");
	assert_plain(drain(), "error", "x");
	unsetenv("JOURNAL_STREAM");
	log_open("t", LOG_INFO, pipe_fds[1]);
	pr_info("y");
	assert_plain(drain(), "info", "y");
}

static void test_malformed_journal_stream(void **state)
{
	struct stat st;
	char exact[64], buf[96];

	(void)state;
	assert_int_equal(fstat(pipe_fds[1], &st), 0);
	snprintf(exact, sizeof(exact), "%llu:%llu", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
	const char *bad[] = { "", ":", "1", "1:", ":1", "abc", "1:x", " 1:2", "-1:2", "1:-2", "1:+2",
			      "99999999999999999999999:1", "1:99999999999999999999999" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("JOURNAL_STREAM", bad[i], 1);
		log_open("t", LOG_INFO, pipe_fds[1]);
		pr_err("bad %zu", i);
		snprintf(buf, sizeof(buf), "bad %zu", i);
		assert_plain(drain(), "error", buf);
	}
	/* The right numbers with anything after them are not the stream. */
	const char *tails[] = { " ", "\n", ":1", "x", ",1" };
	for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
		snprintf(buf, sizeof(buf), "%s%s", exact, tails[i]);
		setenv("JOURNAL_STREAM", buf, 1);
		log_open("t", LOG_INFO, pipe_fds[1]);
		pr_err("tail %zu", i);
		snprintf(buf, sizeof(buf), "tail %zu", i);
		assert_plain(drain(), "error", buf);
	}
	/* A closed descriptor is no journal either. */
	setenv("JOURNAL_STREAM", exact, 1);
	log_open("t", LOG_INFO, 1000);
	log_open("t", LOG_INFO, pipe_fds[1]);
	pr_err("again");
	assert_true(drain()[0] == '<');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_journal_format, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_stream_is_plain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_journal_stream, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
