/* Helpers shared by the snapshot store tests: temp stores, test data, a
 * writer driven the way the snapshot path drives it (a few staging buffers
 * recycled through the done callback). */
#ifndef TERN_SNAP_TEST_UTIL_H
#define TERN_SNAP_TEST_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "snap_reader.h"
#include "snap_store.h"
#include "snap_writer.h"

#define TEST_CHUNK (64u << 10)

enum data_kind { DATA_RANDOM, DATA_HALF_ZERO, DATA_ZERO, DATA_TEXT };

struct test_region {
	uint64_t addr;
	uint64_t size;
	uint8_t *data;
};

static inline uint64_t test_rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* half zero: every other chunk is zero; text: compressible, not zero. */
static inline uint8_t *test_data_make(enum data_kind kind, uint64_t size, uint64_t seed)
{
	uint8_t *p = calloc(1, size ? size : 1);
	uint64_t s = seed * 2654435761u + 1;

	if (!p || kind == DATA_ZERO)
		return p;
	for (uint64_t i = 0; i < size; i += 8) {
		uint64_t v = test_rng(&s);
		if (kind == DATA_HALF_ZERO && (i / TEST_CHUNK) % 2)
			v = 0;
		if (kind == DATA_TEXT)
			v = 0x2065726f6d206465ull ^ ((v & 7) << 8);
		memcpy(p + i, &v, size - i < 8 ? size - i : 8);
	}
	return p;
}

static inline int test_rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb; (void)type; (void)ftw;
	return remove(path);
}

static inline void test_dir_remove(const char *dir)
{
	nftw(dir, test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void test_tmpdir(char *out, size_t n, const char *tag)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(out, n, "%s/snap-%s-XXXXXX", tmp ? tmp : "/tmp", tag);
	if (!mkdtemp(out))
		abort();
}

/* A journal file with recognisable contents. */
static inline int test_journal_make(const char *dir, const char *tag, size_t size)
{
	char path[512];
	uint8_t *buf = malloc(size ? size : 1);
	int fd;

	snprintf(path, sizeof(path), "%s/journal-%s", dir, tag);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || !buf) {
		free(buf);
		return -1;
	}
	for (size_t i = 0; i < size; i++)
		buf[i] = (uint8_t)(i * 7 + tag[0]);
	if (write(fd, buf, size) != (ssize_t)size) {
		close(fd);
		fd = -1;
	}
	free(buf);
	return fd;
}

/* Staging buffers recycled through the done callback. */
struct staging {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint8_t *bufs[4];
	int busy[4];
	unsigned done_calls;
	int bad_status;
};

static inline void staging_done(void *arg, const void *buf, int status)
{
	struct staging *st = arg;

	pthread_mutex_lock(&st->mu);
	for (int i = 0; i < 4; i++)
		if (st->bufs[i] == buf)
			st->busy[i] = 0;
	st->done_calls++;
	if (status)
		st->bad_status = status;
	pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->mu);
}

static inline uint8_t *staging_get(struct staging *st)
{
	uint8_t *b = NULL;

	pthread_mutex_lock(&st->mu);
	while (!b) {
		for (int i = 0; i < 4 && !b; i++) {
			if (!st->busy[i]) {
				st->busy[i] = 1;
				b = st->bufs[i];
			}
		}
		if (!b)
			pthread_cond_wait(&st->cv, &st->mu);
	}
	pthread_mutex_unlock(&st->mu);
	return b;
}

static inline void staging_drain(struct staging *st)
{
	pthread_mutex_lock(&st->mu);
	while (st->busy[0] || st->busy[1] || st->busy[2] || st->busy[3])
		pthread_cond_wait(&st->cv, &st->mu);
	pthread_mutex_unlock(&st->mu);
}

/* The device hash the GPU side would compute; any function of the bytes. */
static inline uint64_t test_device_hash(const uint8_t *p, uint32_t len)
{
	return XXH3_64bits(p, len);
}

/* Write snapshot @name of @n regions in chunks of @chunk bytes.  With a
 * parent, chunks whose device hash matches the parent's are passed as
 * unchanged.  Returns commit's rc. */
static inline int test_snapshot_write_chunked(struct snap_store *s, const char *name, const char *parent,
					      const struct test_region *r, unsigned n, int journal_fd,
					      struct snap_writer_stats *stats, uint32_t chunk)
{
	struct snap_writer_config cfg = { .name = name, .parent = parent,
					  .session_id = "session-1", .device_name = "sim0",
					  .driver_version = 13000, .chunk_size = chunk };
	struct staging st = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct snap_writer *w;
	int rc;

	memcpy(cfg.device_uuid, "0123456789abcdef", 16);
	for (int i = 0; i < 4; i++)
		st.bufs[i] = malloc(chunk);
	rc = snap_writer_begin(s, &cfg, &w);
	if (rc)
		goto out_free;
	for (unsigned i = 0; i < n && !rc; i++) {
		uint32_t reg;
		rc = snap_writer_region_add(w, r[i].addr, r[i].size, i, &reg);
		for (uint64_t c = 0; !rc && c < snap_writer_region_chunks(w, reg); c++) {
			uint64_t off = c * chunk, ph;
			uint32_t len = (uint32_t)(r[i].size - off < chunk ? r[i].size - off : chunk);
			uint64_t dh = test_device_hash(r[i].data + off, len);
			uint8_t *b;

			if (parent && snap_writer_parent_device_hash(w, r[i].addr + off, &ph) == 0 &&
			    ph == dh) {
				rc = snap_writer_chunk_unchanged(w, reg, c, dh);
				continue;
			}
			b = staging_get(&st);
			memcpy(b, r[i].data + off, len); /* the device-to-host copy */
			rc = snap_writer_chunk_add(w, reg, c, b, len, dh, staging_done, &st);
			if (rc)
				staging_done(&st, b, rc);
		}
	}
	if (!rc && journal_fd >= 0)
		rc = snap_writer_journal_set(w, journal_fd);
	if (rc) {
		snap_writer_abort(w);
		goto out_free;
	}
	rc = snap_writer_commit(w, stats);
out_free:
	staging_drain(&st);
	if (!rc && st.bad_status)
		rc = st.bad_status;
	for (int i = 0; i < 4; i++)
		free(st.bufs[i]);
	return rc;
}

static inline int test_snapshot_write(struct snap_store *s, const char *name, const char *parent,
				      const struct test_region *r, unsigned n, int journal_fd,
				      struct snap_writer_stats *stats)
{
	return test_snapshot_write_chunked(s, name, parent, r, n, journal_fd, stats, TEST_CHUNK);
}

/* Read every region of @name back and compare; 0 if equal. */
static inline int test_snapshot_check(struct snap_store *s, const char *name,
				      const struct test_region *r, unsigned n)
{
	struct snap_reader *rd;
	int rc = snap_reader_open(s, name, &rd);

	if (rc)
		return rc;
	if (snap_reader_chunk_list(rd)->region_count != n)
		rc = -EPROTO;
	for (unsigned i = 0; i < n && !rc; i++) {
		const struct snap_region *reg = &snap_reader_chunk_list(rd)->regions[i];
		uint8_t *dst = malloc(r[i].size);
		if (reg->addr != r[i].addr || reg->size != r[i].size || reg->flags != i)
			rc = -EPROTO;
		if (!rc)
			rc = snap_reader_region_read(rd, i, dst, r[i].size, 3, NULL, NULL);
		if (!rc && memcmp(dst, r[i].data, r[i].size) != 0)
			rc = -EPROTO;
		free(dst);
	}
	snap_reader_close(rd);
	return rc;
}

static inline uint64_t test_dir_bytes(const char *dir, unsigned *files)
{
	struct dirent *de;
	uint64_t total = 0;
	DIR *d = opendir(dir);

	*files = 0;
	while (d && (de = readdir(d)) != NULL) {
		char path[1024];
		struct stat st;
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			total += (uint64_t)st.st_size;
			(*files)++;
		}
	}
	if (d)
		closedir(d);
	return total;
}

#endif
