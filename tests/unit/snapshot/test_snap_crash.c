/* Crash simulation: a child process writes a snapshot (or removes one and
 * collects garbage) and is SIGKILLed at a random moment.  The store must
 * then list only complete snapshots, each of which verifies and reads back,
 * and the next open must leave no temporary files. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>

#include "snap_test_util.h"

#define CHILD_CHUNKS 48

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static struct test_region child_region(unsigned i)
{
	struct test_region r = { 0x200000000ull, CHILD_CHUNKS * TEST_CHUNK, NULL };

	r.data = test_data_make(i % 2 ? DATA_HALF_ZERO : DATA_RANDOM, r.size, 1000 + i);
	return r;
}

/* No temp snapshot dirs, no pack without its index. */
static void assert_no_leftovers(const char *store_dir)
{
	char path[600];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "%s/snaps", store_dir);
	d = opendir(path);
	assert_non_null(d);
	while ((de = readdir(d)) != NULL)
		assert_true(strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
			    de->d_name[0] != '.');
	closedir(d);
	snprintf(path, sizeof(path), "%s/packs", store_dir);
	d = opendir(path);
	assert_non_null(d);
	while ((de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		char idx[700];
		struct stat st;
		if (n > 5 && !strcmp(de->d_name + n - 5, ".pack")) {
			snprintf(idx, sizeof(idx), "%s/%.*s.idx", path, (int)(n - 5), de->d_name);
			assert_int_equal(stat(idx, &st), 0);
		}
		assert_null(strstr(de->d_name, ".tmp"));
	}
	closedir(d);
}

/* Every listed snapshot is complete and verifies; returns how many. */
static unsigned check_store(const char *store_dir)
{
	struct snap_store *s;
	struct snap_info *info;
	unsigned n;

	assert_int_equal(snap_store_open(store_dir, NULL, 0, &s), 0);
	assert_no_leftovers(store_dir);
	assert_int_equal(snap_store_list(s, &info, &n), 0);
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(info[i].complete, 1);
		if (snap_store_verify(s, info[i].name, NULL) != 0)
			fail_msg("%s does not verify: %s", info[i].name, snap_store_error(s));
	}
	free(info);
	snap_store_close(s);
	return n;
}

static pid_t child_start(const char *store_dir, const char *dir, unsigned i, const char *parent)
{
	pid_t pid = fork();

	if (pid == 0) {
		struct snap_store *s;
		struct test_region r = child_region(i);
		char name[32];
		int jfd = test_journal_make(dir, "child", 300000);
		int rc;

		snprintf(name, sizeof(name), "s%u", i);
		if (jfd < 0 || snap_store_open(store_dir, NULL, 0, &s))
			_exit(2);
		rc = test_snapshot_write(s, name, parent, &r, 1, jfd, NULL);
		_exit(rc ? 3 : 0);
	}
	return pid;
}

static void test_kill_during_write(void **state)
{
	struct test_region base = child_region(0);
	char dir[256], store_dir[300], name[32];
	struct snap_store *s;
	uint64_t seed = 42, t0, full_us;
	unsigned committed = 0, killed = 0;
	int jfd, status;
	pid_t pid;

	(void)state;
	test_tmpdir(dir, sizeof(dir), "crash");
	snprintf(store_dir, sizeof(store_dir), "%s/store", dir);
	jfd = test_journal_make(dir, "base", 1000);
	assert_int_equal(snap_store_open(store_dir, NULL, SNAP_STORE_CREATE, &s), 0);
	assert_int_equal(test_snapshot_write(s, "base", NULL, &base, 1, jfd, NULL), 0);
	snap_store_close(s);

	/* How long an undisturbed write takes (the slowest of three, the
	 * machine may be busy), to spread the kills over it. */
	full_us = 0;
	for (unsigned c = 0; c < 3; c++) {
		t0 = now_us();
		pid = child_start(store_dir, dir, 1000 + c, NULL);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		if (now_us() - t0 > full_us)
			full_us = now_us() - t0;
	}

	for (unsigned i = 1; i <= 40; i++) {
		uint64_t delay = test_rng(&seed) % (full_us + full_us / 4 + 1);

		pid = child_start(store_dir, dir, i, i % 3 == 0 ? "base" : NULL);
		usleep((useconds_t)delay);
		kill(pid, SIGKILL);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (WIFSIGNALED(status))
			killed++;
		else
			assert_int_equal(WEXITSTATUS(status), 0);
		if (getenv("SNAP_CRASH_DEBUG"))
			print_message("child %u: delay %llu us, %s\n", i, (unsigned long long)delay,
				      WIFSIGNALED(status) ? "killed" : "done");
		check_store(store_dir);
	}

	/* What committed is exactly what is listed, and reads back. */
	assert_int_equal(snap_store_open(store_dir, NULL, 0, &s), 0);
	for (unsigned i = 1; i <= 40; i++) {
		struct snap_manifest m;
		struct test_region r;
		snprintf(name, sizeof(name), "s%u", i);
		if (snap_store_manifest_get(s, name, &m) != 0)
			continue;
		committed++;
		r = child_region(i);
		assert_int_equal(test_snapshot_check(s, name, &r, 1), 0);
		free(r.data);
	}
	assert_int_equal(test_snapshot_check(s, "base", &base, 1), 0);
	snap_store_close(s);
	print_message("kill during write: %u killed, %u of 40 committed (write takes %llu us)\n",
		      killed, committed, (unsigned long long)full_us);
	assert_true(killed > 0);
	close(jfd);
	free(base.data);
	test_dir_remove(dir);
}

/* rm + gc rewrite killed at random: the survivor always reads back. */
static void test_kill_during_gc(void **state)
{
	char dir[256], store_dir[300];
	uint64_t seed = 7;
	unsigned killed = 0;
	int jfd, status;

	(void)state;
	test_tmpdir(dir, sizeof(dir), "crashgc");
	snprintf(store_dir, sizeof(store_dir), "%s/store", dir);
	jfd = test_journal_make(dir, "j", 1000);
	for (unsigned i = 0; i < 12; i++) {
		struct test_region a[2] = {{ 0x100000, 32 * TEST_CHUNK, NULL }, { 0x9000000, 8 * TEST_CHUNK, NULL }};
		struct test_region b[1] = {{ 0x9000000, 8 * TEST_CHUNK, NULL }};
		struct snap_store *s;
		pid_t pid;

		test_dir_remove(store_dir);
		a[0].data = test_data_make(DATA_RANDOM, a[0].size, 500 + i);
		a[1].data = test_data_make(DATA_RANDOM, a[1].size, 600 + i);
		b[0].data = a[1].data;
		assert_int_equal(snap_store_open(store_dir, NULL, SNAP_STORE_CREATE, &s), 0);
		assert_int_equal(test_snapshot_write(s, "a", NULL, a, 2, jfd, NULL), 0);
		assert_int_equal(test_snapshot_write(s, "b", NULL, b, 1, jfd, NULL), 0);
		pid = fork();
		if (pid == 0)
			_exit(snap_store_rm(s, "a", NULL) ? 3 : 0);
		usleep((useconds_t)(test_rng(&seed) % 4000));
		kill(pid, SIGKILL);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		killed += WIFSIGNALED(status);
		snap_store_close(s);
		check_store(store_dir);
		assert_int_equal(snap_store_open(store_dir, NULL, 0, &s), 0);
		assert_int_equal(test_snapshot_check(s, "b", b, 1), 0);
		/* A later gc finishes the job. */
		if (snap_store_rm(s, "a", NULL) != 0)
			assert_int_equal(snap_store_gc(s, NULL), 0);
		snap_store_close(s);
		check_store(store_dir);
		free(a[0].data);
		free(a[1].data);
	}
	print_message("kill during rm/gc: %u of 12 killed before finishing\n", killed);
	close(jfd);
	test_dir_remove(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_during_write),
		cmocka_unit_test(test_kill_during_gc),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
