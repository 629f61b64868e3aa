/* Journal write rate: object put+delete pairs per second, one commit per call
 * and in batches, plus the per-request pattern of the executor (one batch per
 * request holding an object write and the reply).
 *
 *     bench_journal [DIR] [PAIRS]      (DIR defaults to $TMPDIR or /tmp)
 *
 * The journal lives in a fresh directory under DIR, removed at the end. */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tracker.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	return remove(path);
}

/* @pairs put+del pairs, @batch calls per transaction (0: a commit per call).
 * A few live objects stay around, as a real session keeps its contexts. */
static int pairs_run(struct tracker *t, unsigned long pairs, unsigned batch, double *rate)
{
	uint8_t args[64];
	struct tracker_object o = {.kind = 7, .parent = 1, .args = args, .args_len = sizeof(args)};
	unsigned in_batch = 0;
	double t0 = now_s();
	int rc = 0;

	memset(args, 0x3c, sizeof(args));
	for (unsigned long i = 0; i < pairs && rc == 0; i++) {
		uint64_t h = 0x100000 + i;

		if (batch && in_batch == 0 && (rc = tracker_txn_begin(t)))
			break;
		rc = tracker_object_put(t, h, &o);
		if (rc == 0)
			rc = tracker_object_del(t, h);
		if (batch && ++in_batch == batch) {
			in_batch = 0;
			if (rc == 0)
				rc = tracker_txn_commit(t);
		}
	}
	if (batch && in_batch)
		rc = rc ? rc : tracker_txn_commit(t);
	*rate = pairs / (now_s() - t0);
	return rc;
}

/* One transaction per request: an object created (or freed) and the reply. */
static int requests_run(struct tracker *t, unsigned long n, double *rate)
{
	uint8_t args[64], reply[32];
	struct tracker_object o = {.kind = 9, .parent = 1, .args = args, .args_len = sizeof(args)};
	double t0 = now_s();
	int rc = 0;

	memset(args, 0x11, sizeof(args));
	memset(reply, 0, sizeof(reply));
	for (unsigned long i = 0; i < n && rc == 0; i++) {
		uint64_t h = 0x200000 + i / 2;

		rc = tracker_txn_begin(t);
		if (rc)
			break;
		rc = i % 2 ? tracker_object_del(t, h) : tracker_object_put(t, h, &o);
		if (rc == 0)
			rc = tracker_reply_set(t, i + 1, reply, sizeof(reply));
		rc = rc ? (tracker_txn_abort(t), rc) : tracker_txn_commit(t);
	}
	*rate = n / (now_s() - t0);
	return rc;
}

int main(int argc, char **argv)
{
	const char *base = argc > 1 ? argv[1] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	unsigned long pairs = argc > 2 ? strtoul(argv[2], NULL, 10) : 200000;
	static const unsigned batches[] = {0, 16, 256, 4096};
	struct tracker_object keep = {.kind = 1};
	struct tracker *t;
	char dir[4096];
	double rate;
	int rc;

	snprintf(dir, sizeof(dir), "%s/bench-journal-XXXXXX", base);
	if (!mkdtemp(dir)) {
		fprintf(stderr, "mkdtemp %s: %s\n", dir, strerror(errno));
		return 1;
	}
	rc = tracker_open(dir, 0, &t);
	if (rc) {
		fprintf(stderr, "tracker_open %s: %s\n", dir, strerror(-rc));
		return 1;
	}
	for (uint64_t h = 1; h <= 16; h++)
		tracker_object_put(t, h, &keep);

	printf("journal in %s, %lu pairs per run, 64 byte args\n", base, pairs);
	printf("%-34s %14s\n", "mode", "pairs/s");
	for (size_t i = 0; i < sizeof(batches) / sizeof(batches[0]) && rc == 0; i++) {
		char name[64];

		rc = pairs_run(t, batches[i] ? pairs : pairs / 4, batches[i], &rate);
		if (batches[i])
			snprintf(name, sizeof(name), "put+del, %u calls per commit", batches[i]);
		else
			snprintf(name, sizeof(name), "put+del, commit per call");
		printf("%-34s %14.0f\n", name, rate);
	}
	if (rc == 0) {
		rc = requests_run(t, pairs / 4, &rate);
		printf("%-34s %14.0f requests/s\n", "request: object + reply, 1 commit", rate);
	}
	if (rc)
		fprintf(stderr, "journal write failed: %s\n", strerror(-rc));
	tracker_close(t);
	nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	return rc ? 1 : 0;
}
