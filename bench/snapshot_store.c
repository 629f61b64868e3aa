/* Throughput of the snapshot store's write pipeline and parallel reader.
 *
 *     bench_snapshot_store [DIR] [MiB] [workers] [runs]
 *
 * For each kind of data (random, half zero, bf16-like weights, all zero) it
 * writes one snapshot of MiB (default 512) through staging buffers the way
 * the GPU path does (copy into a recycled buffer, chunk_add, buffer back in
 * the done callback), commits it (fsync included), then reads it back with
 * snap_reader_region_read.  Figures are logical MB/s (1 MB = 1e6 bytes),
 * and the process's CPU seconds per GB written (all threads, the staging
 * copy included): steadier than MB/s on a loaded machine.
 * Each kind runs RUNS times (default 3); every run is printed.
 * DIR defaults to $TMPDIR or /tmp; say whether it is tmpfs or disk.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "snap_reader.h"
#include "snap_store.h"
#include "snap_writer.h"

#define STAGING 6

struct staging {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint8_t *bufs[STAGING];
	int busy[STAGING];
};

static void staging_done(void *arg, const void *buf, int status)
{
	struct staging *st = arg;

	(void)status;
	pthread_mutex_lock(&st->mu);
	for (int i = 0; i < STAGING; i++)
		if (st->bufs[i] == buf)
			st->busy[i] = 0;
	pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->mu);
}

static uint8_t *staging_get(struct staging *st)
{
	uint8_t *b = NULL;

	pthread_mutex_lock(&st->mu);
	while (!b) {
		for (int i = 0; i < STAGING && !b; i++)
			if (!st->busy[i]) {
				st->busy[i] = 1;
				b = st->bufs[i];
			}
		if (!b)
			pthread_cond_wait(&st->cv, &st->mu);
	}
	pthread_mutex_unlock(&st->mu);
	return b;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

enum kind { K_RANDOM, K_HALF_ZERO, K_BF16, K_ZERO };
static const char *const kind_names[] = { "random", "half-zero", "bf16-like", "zero" };

static void data_fill(uint8_t *p, uint64_t size, enum kind k, uint32_t chunk, uint64_t seed)
{
	uint64_t s = seed | 1;

	memset(p, 0, size);
	if (k == K_ZERO)
		return;
	for (uint64_t i = 0; i < size; i += 8) {
		uint64_t v = rng(&s);
		if (k == K_HALF_ZERO && (i / chunk) % 2)
			continue;
		if (k == K_BF16) {
			/* Four bf16 weights ~N(0, 0.02): sign, exponent 0x76..0x79,
			 * random 7-bit mantissa. */
			uint64_t w = 0;
			for (int j = 0; j < 4; j++) {
				uint16_t x = (uint16_t)(((v >> (16 * j)) & 0x807f) |
							((0x76 + ((v >> (16 * j + 7)) & 3)) << 7));
				w |= (uint64_t)x << (16 * j);
			}
			v = w;
		}
		memcpy(p + i, &v, 8);
	}
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb; (void)type; (void)ftw;
	return remove(path);
}

static int run(const char *dir, enum kind k, uint64_t size, unsigned workers)
{
	struct snap_store_config cfg = { .workers = workers };
	struct staging st = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct snap_writer_config wc = { .name = "bench", .session_id = "bench" };
	struct snap_writer_stats ws;
	struct snap_store *s;
	struct snap_writer *w;
	struct snap_reader *r;
	char store_dir[512], jpath[600];
	uint8_t *src, *dst;
	uint32_t chunk = SNAP_DEFAULT_CHUNK_SIZE, reg;
	double t0, c0, t_write, c_write, t_read;
	int jfd, rc;

	snprintf(store_dir, sizeof(store_dir), "%s/bench-snap-store-%d", dir, (int)getpid());
	src = malloc(size);
	dst = malloc(size);
	for (int i = 0; i < STAGING; i++)
		st.bufs[i] = malloc(chunk);
	if (!src || !dst)
		return -ENOMEM;
	data_fill(src, size, k, chunk, 0x1234 + k);
	memset(dst, 1, size);
	rc = snap_store_open(store_dir, &cfg, SNAP_STORE_CREATE, &s);
	if (rc)
		return rc;
	snprintf(jpath, sizeof(jpath), "%s/journal", store_dir);
	jfd = open(jpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (jfd < 0 || write(jfd, "journal", 7) != 7)
		return -EIO;

	t0 = now_s();
	c0 = cpu_s();
	rc = snap_writer_begin(s, &wc, &w);
	if (!rc)
		rc = snap_writer_region_add(w, 0x7f0000000000ull, size, 0, &reg);
	for (uint64_t c = 0; !rc && c < snap_writer_region_chunks(w, reg); c++) {
		uint64_t off = c * chunk;
		uint32_t len = (uint32_t)(size - off < chunk ? size - off : chunk);
		uint8_t *b = staging_get(&st);
		memcpy(b, src + off, len); /* stands for the device-to-host copy */
		rc = snap_writer_chunk_add(w, reg, c, b, len, c, staging_done, &st);
	}
	if (!rc)
		rc = snap_writer_journal_set(w, jfd);
	if (rc) {
		fprintf(stderr, "write failed: %s\n", snap_store_error(s));
		snap_writer_abort(w);
		return rc;
	}
	rc = snap_writer_commit(w, &ws);
	t_write = now_s() - t0;
	c_write = cpu_s() - c0;
	if (rc) {
		fprintf(stderr, "commit failed: %s\n", snap_store_error(s));
		return rc;
	}

	t0 = now_s();
	rc = snap_reader_open(s, "bench", &r);
	if (!rc)
		rc = snap_reader_region_read(r, 0, dst, size, workers, NULL, NULL);
	t_read = now_s() - t0;
	snap_reader_close(r);
	if (rc || memcmp(src, dst, size) != 0) {
		fprintf(stderr, "read back failed (%d): %s\n", rc, snap_store_error(s));
		return rc ? rc : -EPROTO;
	}
	printf("%-10s %6.0f MiB  write %7.0f MB/s (cpu %.2f s/GB)  read %7.0f MB/s  stored %6.1f%%  "
	       "new %llu zero %llu chunks\n", kind_names[k], size / 1048576.0,
	       size / t_write / 1e6, c_write / (size / 1e9), size / t_read / 1e6,
	       100.0 * (double)ws.stored_bytes / (double)size,
	       (unsigned long long)ws.new_chunks, (unsigned long long)ws.zero_chunks);
	fflush(stdout);
	snap_store_close(s);
	close(jfd);
	nftw(store_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(src);
	free(dst);
	for (int i = 0; i < STAGING; i++)
		free(st.bufs[i]);
	return 0;
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");
	const char *dir = argc > 1 ? argv[1] : tmp ? tmp : "/tmp";
	uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 512;
	unsigned workers = argc > 3 ? (unsigned)atoi(argv[3]) : 0;
	int runs = argc > 4 ? atoi(argv[4]) : 3;
	struct statfs fs;

	if (!workers) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		workers = n > 0 ? (unsigned)n : 2;
	}
	printf("snapshot store bench: dir %s (%s), %u workers, zstd level 1, 4 MiB chunks, "
	       "commit includes fsync\n", dir,
	       statfs(dir, &fs) == 0 && fs.f_type == 0x01021994 ? "tmpfs" : "not tmpfs",
	       workers);
	for (int k = K_RANDOM; k <= K_ZERO; k++) {
		int rc = 0;
		for (int i = 0; i < runs && !rc; i++)
			rc = run(dir, (enum kind)k, mib << 20, workers);
		if (rc) {
			fprintf(stderr, "%s: failed: %s\n", kind_names[k], strerror(-rc));
			return 1;
		}
	}
	return 0;
}
