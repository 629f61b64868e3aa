/* The snapshot store on real temp directories: round trip, dedupe,
 * incremental, corruption, disk full, rm + gc. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mount.h>

#include <cmocka.h>

#include "snap_test_util.h"

struct fixture {
	char dir[256];
	char store_dir[300];
	struct snap_store *s;
	int journal_fd;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct snap_store_config cfg = { .workers = 2, .queue_depth = 3 };

	if (!f)
		return -1;
	test_tmpdir(f->dir, sizeof(f->dir), "store");
	snprintf(f->store_dir, sizeof(f->store_dir), "%s/store", f->dir);
	if (snap_store_open(f->store_dir, &cfg, SNAP_STORE_CREATE, &f->s))
		return -1;
	f->journal_fd = test_journal_make(f->dir, "j", 100000);
	*state = f;
	return f->journal_fd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	snap_store_close(f->s);
	close(f->journal_fd);
	test_dir_remove(f->dir);
	free(f);
	return 0;
}

static void regions_free(struct test_region *r, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		free(r[i].data);
}

/* random (not chunk-aligned size), half zero, all zero, compressible */
static void regions_make(struct test_region *r, uint64_t seed)
{
	r[0] = (struct test_region){ 0x7f0000000000ull, 10 * TEST_CHUNK + 12345, NULL };
	r[1] = (struct test_region){ 0x7f0010000000ull, 8 * TEST_CHUNK, NULL };
	r[2] = (struct test_region){ 0x7f0020000000ull, 5 * TEST_CHUNK, NULL };
	r[3] = (struct test_region){ 0x7f0030000000ull, 3 * TEST_CHUNK, NULL };
	r[0].data = test_data_make(DATA_RANDOM, r[0].size, seed);
	r[1].data = test_data_make(DATA_HALF_ZERO, r[1].size, seed + 1);
	r[2].data = test_data_make(DATA_ZERO, r[2].size, 0);
	r[3].data = test_data_make(DATA_TEXT, r[3].size, seed + 2);
}

static unsigned list_complete(struct snap_store *s, const char *name, unsigned *total)
{
	struct snap_info *info;
	unsigned n, complete = 0, found = 0;

	assert_int_equal(snap_store_list(s, &info, &n), 0);
	for (unsigned i = 0; i < n; i++) {
		complete += info[i].complete;
		if (name && !strcmp(info[i].name, name) && info[i].complete)
			found = 1;
	}
	free(info);
	if (total)
		*total = n;
	return name ? found : complete;
}

struct ready_count {
	pthread_mutex_t mu;
	uint64_t chunks, bytes;
};

static int on_ready(void *arg, uint64_t index, uint64_t offset, uint32_t len)
{
	struct ready_count *rc = arg;

	pthread_mutex_lock(&rc->mu);
	rc->chunks++;
	rc->bytes += len;
	pthread_mutex_unlock(&rc->mu);
	return offset == index * TEST_CHUNK ? 0 : -EPROTO;
}

static void test_round_trip(void **state)
{
	struct fixture *f = *state;
	struct test_region r[4];
	struct snap_writer_stats ws;
	struct snap_verify_stats vs;
	struct snap_reader *rd;
	const struct snap_manifest *m;
	struct ready_count ready = { .mu = PTHREAD_MUTEX_INITIALIZER };
	char jpath[400];
	uint8_t *buf, *orig;
	int out;

	regions_make(r, 1);
	assert_int_equal(test_snapshot_write(f->s, "s1", NULL, r, 4, f->journal_fd, &ws), 0);
	assert_int_equal(ws.chunks, 11 + 8 + 5 + 3);
	assert_int_equal(ws.zero_chunks, 4 + 5);
	assert_int_equal(ws.new_chunks, 11 + 4 + 3);
	assert_int_equal(test_snapshot_check(f->s, "s1", r, 4), 0);
	assert_int_equal(list_complete(f->s, "s1", NULL), 1);
	assert_int_equal(snap_store_verify(f->s, "s1", &vs), 0);
	assert_int_equal(vs.chunks_checked, 11 + 4 + 3);

	assert_int_equal(snap_reader_open(f->s, "s1", &rd), 0);
	m = snap_reader_manifest(rd);
	assert_string_equal(m->session_id, "session-1");
	assert_string_equal(m->device_name, "sim0");
	assert_string_equal(m->parent, "");
	assert_memory_equal(m->device_uuid, "0123456789abcdef", 16);
	assert_int_equal(m->driver_version, 13000);
	assert_int_equal(m->chunk_size, TEST_CHUNK);
	assert_int_equal(m->logical_bytes, r[0].size + r[1].size + r[2].size + r[3].size);
	assert_int_equal(m->zero_chunks, 9);
	/* Compressible data was compressed, random data stored raw. */
	assert_true(m->ref_stored_bytes < m->logical_bytes);
	assert_true(snap_reader_chunk_list(rd)->regions[3].chunks[0].stored_size < TEST_CHUNK / 4);
	assert_int_equal(snap_reader_chunk_list(rd)->regions[0].chunks[0].stored_size, TEST_CHUNK);

	/* Single chunk reads: the last, partial one, and a zero one. */
	buf = malloc(TEST_CHUNK);
	assert_int_equal(snap_reader_chunk_read(rd, 0, 10, buf, TEST_CHUNK, NULL), 0);
	assert_memory_equal(buf, r[0].data + 10 * TEST_CHUNK, 12345);
	memset(buf, 0xaa, TEST_CHUNK);
	assert_int_equal(snap_reader_chunk_read(rd, 1, 1, buf, TEST_CHUNK, NULL), 0);
	assert_int_equal(buf[0] | buf[TEST_CHUNK - 1], 0);
	assert_int_equal(snap_reader_chunk_read(rd, 9, 0, buf, TEST_CHUNK, NULL), -EINVAL);
	free(buf);

	/* The parallel reader reports every chunk once. */
	buf = malloc(r[0].size);
	assert_int_equal(snap_reader_region_read(rd, 0, buf, r[0].size, 4, on_ready, &ready), 0);
	assert_int_equal(ready.chunks, 11);
	assert_int_equal(ready.bytes, r[0].size);
	assert_memory_equal(buf, r[0].data, r[0].size);
	free(buf);

	/* The journal comes back byte for byte. */
	snprintf(jpath, sizeof(jpath), "%s/journal-out", f->dir);
	out = open(jpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_true(out >= 0);
	assert_int_equal(snap_reader_journal_write(rd, out), 0);
	buf = malloc(100000);
	orig = malloc(100000);
	assert_int_equal(pread(out, buf, 100000, 0), 100000);
	assert_int_equal(pread(f->journal_fd, orig, 100000, 0), 100000);
	assert_memory_equal(buf, orig, 100000);
	assert_int_equal(lseek(out, 0, SEEK_END), 100000);
	free(buf);
	free(orig);
	close(out);
	snap_reader_close(rd);

	/* Same name twice is refused; the first stays. */
	assert_int_equal(test_snapshot_write(f->s, "s1", NULL, r, 4, f->journal_fd, NULL), -EEXIST);
	assert_int_equal(snap_store_verify(f->s, "s1", NULL), 0);
	regions_free(r, 4);
}

static void test_incomplete_refused(void **state)
{
	struct fixture *f = *state;
	struct snap_writer_config cfg = { .name = "partial", .chunk_size = TEST_CHUNK };
	struct snap_writer *w;
	uint8_t *data = test_data_make(DATA_RANDOM, 2 * TEST_CHUNK, 5);
	uint32_t reg;
	unsigned total;

	assert_int_equal(snap_writer_begin(f->s, &cfg, &w), 0);
	assert_int_equal(snap_writer_region_add(w, 0x1000, 2 * TEST_CHUNK, 0, &reg), 0);
	assert_int_equal(snap_writer_chunk_add(w, reg, 0, data, TEST_CHUNK, 0, NULL, NULL), 0);
	/* wrong length, twice the same chunk, out of range */
	assert_int_equal(snap_writer_chunk_add(w, reg, 1, data, 100, 0, NULL, NULL), -EINVAL);
	assert_int_equal(snap_writer_chunk_add(w, reg, 0, data, TEST_CHUNK, 0, NULL, NULL), -EEXIST);
	assert_int_equal(snap_writer_chunk_add(w, reg, 2, data, TEST_CHUNK, 0, NULL, NULL), -EINVAL);
	assert_int_equal(snap_writer_chunk_unchanged(w, reg, 1, 0), -ENOENT); /* no parent */
	assert_int_equal(snap_writer_journal_set(w, f->journal_fd), 0);
	assert_int_equal(snap_writer_commit(w, NULL), -EINVAL);
	assert_non_null(strstr(snap_store_error(f->s), "never given"));
	assert_int_equal(list_complete(f->s, NULL, &total), 0);
	assert_int_equal(total, 0);
	free(data);
}

static uint64_t packs_bytes(struct fixture *f, unsigned *files)
{
	char dir[400];

	snprintf(dir, sizeof(dir), "%s/packs", f->store_dir);
	return test_dir_bytes(dir, files);
}

static void test_dedupe(void **state)
{
	struct fixture *f = *state;
	struct test_region r[4], dup[1];
	struct snap_writer_stats ws;
	struct snap_info *info;
	unsigned files, n;
	uint64_t before;

	regions_make(r, 2);
	assert_int_equal(test_snapshot_write(f->s, "a", NULL, r, 4, f->journal_fd, NULL), 0);
	before = packs_bytes(f, &files);
	/* The same memory again, no parent: content addressing finds it all. */
	assert_int_equal(test_snapshot_write(f->s, "b", NULL, r, 4, f->journal_fd, &ws), 0);
	assert_int_equal(ws.new_chunks, 0);
	assert_int_equal(ws.dedup_chunks, 11 + 4 + 3);
	assert_int_equal(packs_bytes(f, &files), before);
	assert_int_equal(test_snapshot_check(f->s, "b", r, 4), 0);

	/* Equal chunks inside one snapshot are stored once. */
	dup[0].addr = 0x10000;
	dup[0].size = 6 * TEST_CHUNK;
	dup[0].data = test_data_make(DATA_RANDOM, dup[0].size, 77);
	for (int i = 1; i < 6; i++)
		memcpy(dup[0].data + i * TEST_CHUNK, dup[0].data, TEST_CHUNK);
	assert_int_equal(test_snapshot_write(f->s, "c", NULL, dup, 1, f->journal_fd, &ws), 0);
	assert_int_equal(ws.new_chunks, 1);
	assert_int_equal(ws.dedup_chunks, 5);
	assert_int_equal(test_snapshot_check(f->s, "c", dup, 1), 0);

	assert_int_equal(snap_store_list(f->s, &info, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(info[0].name, "a");
	assert_true(info[0].stored_bytes > info[1].stored_bytes);
	assert_int_equal(info[1].logical_bytes, info[0].logical_bytes);
	free(info);
	regions_free(r, 4);
	regions_free(dup, 1);
}

static void test_incremental(void **state)
{
	struct fixture *f = *state;
	struct test_region r[4];
	struct snap_writer_stats ws;
	struct snap_manifest m;
	unsigned files;
	uint64_t before;

	regions_make(r, 3);
	assert_int_equal(test_snapshot_write(f->s, "base", NULL, r, 4, f->journal_fd, NULL), 0);
	before = packs_bytes(f, &files);
	/* Change two chunks of the random region and one zero chunk. */
	r[0].data[3 * TEST_CHUNK + 5] ^= 0xff;
	r[0].data[7 * TEST_CHUNK] ^= 0x01;
	r[2].data[TEST_CHUNK * 2 + 100] = 9;
	assert_int_equal(test_snapshot_write(f->s, "inc", "base", r, 4, f->journal_fd, &ws), 0);
	assert_int_equal(ws.new_chunks, 3);
	assert_int_equal(ws.unchanged_chunks, ws.chunks - 3);
	assert_true(packs_bytes(f, &files) - before < 4 * TEST_CHUNK);
	assert_int_equal(test_snapshot_check(f->s, "inc", r, 4), 0);
	assert_int_equal(snap_store_manifest_get(f->s, "inc", &m), 0);
	assert_string_equal(m.parent, "base");
	assert_int_equal(m.new_chunks, 3);

	/* The parent goes; the child keeps every chunk it names. */
	assert_int_equal(snap_store_rm(f->s, "base", NULL), 0);
	assert_int_equal(snap_store_verify(f->s, "inc", NULL), 0);
	assert_int_equal(test_snapshot_check(f->s, "inc", r, 4), 0);
	regions_free(r, 4);
}

static void test_unchanged_checks(void **state)
{
	struct fixture *f = *state;
	struct test_region r[1] = {{ 0x5000000, 3 * TEST_CHUNK, NULL }};
	struct snap_writer_config cfg = { .name = "child", .parent = "p", .chunk_size = TEST_CHUNK };
	struct snap_writer *w;
	uint64_t dh;
	uint32_t reg;

	r[0].data = test_data_make(DATA_RANDOM, r[0].size, 9);
	assert_int_equal(test_snapshot_write(f->s, "p", NULL, r, 1, f->journal_fd, NULL), 0);
	assert_int_equal(snap_writer_begin(f->s, &cfg, &w), 0);
	assert_int_equal(snap_writer_parent_device_hash(w, 0x5000000 + TEST_CHUNK, &dh), 0);
	assert_int_equal(dh, test_device_hash(r[0].data + TEST_CHUNK, TEST_CHUNK));
	assert_int_equal(snap_writer_parent_device_hash(w, 0x5000000 + 5, &dh), -ENOENT);
	assert_int_equal(snap_writer_parent_device_hash(w, 0x4000000, &dh), -ENOENT);
	/* A region at another address has no parent entries. */
	assert_int_equal(snap_writer_region_add(w, 0x9000000, TEST_CHUNK, 0, &reg), 0);
	assert_int_equal(snap_writer_chunk_unchanged(w, reg, 0, 1), -ENOENT);
	assert_int_equal(snap_writer_region_add(w, 0x5000000, 3 * TEST_CHUNK, 0, &reg), 0);
	assert_int_equal(snap_writer_chunk_unchanged(w, reg, 1, dh ^ 1), -ESTALE);
	assert_int_equal(snap_writer_chunk_unchanged(w, reg, 1, dh), 0);
	snap_writer_abort(w);
	assert_int_equal(list_complete(f->s, "child", NULL), 0);

	cfg.parent = "nope";
	assert_int_equal(snap_writer_begin(f->s, &cfg, &w), -ENOENT);
	free(r[0].data);
}

static void byte_flip(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0x20;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

static uint64_t file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

/* Frames in one pack in the order given, for the tests that damage a
 * chosen frame: a single worker, as several append to packs of their own. */
static void store_one_worker(struct fixture *f)
{
	struct snap_store_config cfg = { .workers = 1 };

	snap_store_close(f->s);
	assert_int_equal(snap_store_open(f->store_dir, &cfg, 0, &f->s), 0);
}

static void first_pack(struct fixture *f, char *out, size_t n)
{
	char dir[400];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/packs", f->store_dir);
	d = opendir(dir);
	out[0] = '\0';
	while ((de = readdir(d)) != NULL)
		if (strstr(de->d_name, ".pack"))
			snprintf(out, n, "%s/%s", dir, de->d_name);
	closedir(d);
	assert_true(out[0] != '\0');
}

static void test_corrupt_pack(void **state)
{
	struct fixture *f = *state;
	struct test_region r[1] = {{ 0x100000, 6 * TEST_CHUNK, NULL }};
	struct snap_reader *rd;
	char pack[1024];
	uint8_t *buf;

	store_one_worker(f);

	r[0].data = test_data_make(DATA_RANDOM, r[0].size, 11);
	assert_int_equal(test_snapshot_write(f->s, "x", NULL, r, 1, f->journal_fd, NULL), 0);
	first_pack(f, pack, sizeof(pack));
	/* A byte in the stored bytes of chunk 4 (header 32, frames 48 + 64 KiB). */
	byte_flip(pack, 32 + 4 * (48 + TEST_CHUNK) + 48 + 1000);
	assert_int_equal(snap_store_verify(f->s, "x", NULL), -EBADMSG);
	assert_non_null(strstr(snap_store_error(f->s), "region 0"));
	assert_non_null(strstr(snap_store_error(f->s), "chunk 4"));
	assert_non_null(strstr(snap_store_error(f->s), "damaged"));
	assert_int_equal(snap_reader_open(f->s, "x", &rd), 0);
	buf = malloc(r[0].size);
	assert_int_equal(snap_reader_chunk_read(rd, 0, 3, buf, TEST_CHUNK, NULL), 0);
	assert_int_equal(snap_reader_chunk_read(rd, 0, 4, buf, TEST_CHUNK, NULL), -EBADMSG);
	assert_int_equal(snap_reader_region_read(rd, 0, buf, r[0].size, 2, NULL, NULL), -EBADMSG);
	snap_reader_close(rd);

	/* A frame header byte: same verdict. */
	byte_flip(pack, 32 + 4 * (48 + TEST_CHUNK) + 48 + 1000);
	assert_int_equal(snap_store_verify(f->s, "x", NULL), 0);
	byte_flip(pack, 32 + 2 * (48 + TEST_CHUNK) + 10);
	assert_int_equal(snap_store_verify(f->s, "x", NULL), -EBADMSG);
	assert_non_null(strstr(snap_store_error(f->s), "chunk 2"));
	free(buf);
	free(r[0].data);
}

/* Raw chunks are read straight into the caller's buffer in pieces, each
 * hashed as it lands: chunks of several pieces (1 MiB) and a partial last
 * one, one context for all, damage in a later piece found, and the context
 * still good after the failure. */
static void test_raw_pieces(void **state)
{
	struct fixture *f = *state;
	const uint32_t chunk = 1u << 20;
	struct test_region r[1] = {{ 0x100000, 2 * chunk + 300000, NULL }};
	struct snap_reader_ctx *ctx;
	struct snap_reader *rd;
	char pack[1024];
	uint8_t *buf;

	store_one_worker(f);

	r[0].data = test_data_make(DATA_RANDOM, r[0].size, 5);
	assert_int_equal(test_snapshot_write_chunked(f->s, "p", NULL, r, 1, f->journal_fd, NULL, chunk), 0);
	assert_int_equal(snap_reader_open(f->s, "p", &rd), 0);
	assert_int_equal(snap_reader_chunk_list(rd)->regions[0].chunks[1].stored_size, chunk);
	assert_int_equal(snap_reader_ctx_new(rd, &ctx), 0);
	buf = malloc(chunk);
	for (uint64_t c = 0; c < 3; c++) {
		uint32_t len = c < 2 ? chunk : 300000;

		memset(buf, 0xaa, chunk);
		assert_int_equal(snap_reader_chunk_read(rd, 0, c, buf, chunk, ctx), 0);
		assert_memory_equal(buf, r[0].data + c * chunk, len);
	}
	snap_reader_close(rd);

	/* A byte of chunk 1's fourth piece (header 32, frames 48 + 1 MiB). */
	first_pack(f, pack, sizeof(pack));
	byte_flip(pack, 32 + (48 + chunk) + 48 + 3 * (256u << 10) + 7);
	assert_int_equal(snap_reader_open(f->s, "p", &rd), 0);
	assert_int_equal(snap_reader_chunk_read(rd, 0, 1, buf, chunk, ctx), -EBADMSG);
	assert_non_null(strstr(snap_store_error(f->s), "chunk 1"));
	assert_non_null(strstr(snap_store_error(f->s), "content hash"));
	assert_int_equal(snap_reader_chunk_read(rd, 0, 0, buf, chunk, ctx), 0);
	assert_memory_equal(buf, r[0].data, chunk);
	assert_int_equal(snap_reader_chunk_read(rd, 0, 2, buf, chunk, ctx), 0);
	assert_memory_equal(buf, r[0].data + 2 * chunk, 300000);
	/* A buffer too small is refused before anything is read. */
	assert_int_equal(snap_reader_chunk_read(rd, 0, 0, buf, chunk - 1, ctx), -EINVAL);
	snap_reader_close(rd);
	snap_reader_ctx_free(ctx);
	snap_reader_ctx_free(NULL);
	free(buf);
	free(r[0].data);
}

/* A pack past two write-behind windows (64 MiB each, snap_pack.c) reads
 * back whole: the windows handed to writeback early lose nothing. */
static void test_write_behind(void **state)
{
	struct fixture *f = *state;
	const uint32_t chunk = 4u << 20;
	struct test_region r[1] = {{ 0x100000, 150ull << 20, NULL }};
	struct snap_verify_stats vs;

	r[0].data = test_data_make(DATA_RANDOM, r[0].size, 9);
	assert_int_equal(test_snapshot_write_chunked(f->s, "wb", NULL, r, 1, f->journal_fd, NULL, chunk), 0);
	assert_int_equal(snap_store_verify(f->s, "wb", &vs), 0);
	assert_int_equal(vs.bytes_checked, r[0].size);
	assert_int_equal(test_snapshot_check(f->s, "wb", r, 1), 0);
	free(r[0].data);
}

static void test_corrupt_manifest_and_journal(void **state)
{
	struct fixture *f = *state;
	struct test_region r[1] = {{ 0x100000, 2 * TEST_CHUNK, NULL }};
	struct snap_reader *rd;
	char path[600];
	unsigned total;
	int out;

	r[0].data = test_data_make(DATA_TEXT, r[0].size, 12);
	assert_int_equal(test_snapshot_write(f->s, "m", NULL, r, 1, f->journal_fd, NULL), 0);
	assert_int_equal(test_snapshot_write(f->s, "j", NULL, r, 1, f->journal_fd, NULL), 0);
	assert_int_equal(test_snapshot_write(f->s, "c", NULL, r, 1, f->journal_fd, NULL), 0);

	snprintf(path, sizeof(path), "%s/snaps/m/manifest", f->store_dir);
	byte_flip(path, 20);
	assert_int_equal(snap_store_verify(f->s, "m", NULL), -EBADMSG);
	assert_non_null(strstr(snap_store_error(f->s), "manifest"));
	assert_int_equal(snap_reader_open(f->s, "m", &rd), -EBADMSG);
	assert_int_equal(list_complete(f->s, NULL, &total), 2);
	assert_int_equal(total, 3);
	/* gc refuses to guess while a snapshot cannot be read. */
	assert_int_equal(snap_store_gc(f->s, NULL), -EBADMSG);

	snprintf(path, sizeof(path), "%s/snaps/j/journal", f->store_dir);
	byte_flip(path, file_size(path) / 2);
	assert_int_equal(snap_store_verify(f->s, "j", NULL), -EBADMSG);
	assert_non_null(strstr(snap_store_error(f->s), "journal"));
	assert_int_equal(snap_reader_open(f->s, "j", &rd), 0);
	snprintf(path, sizeof(path), "%s/journal-out", f->dir);
	out = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_int_equal(snap_reader_journal_write(rd, out), -EBADMSG);
	assert_int_equal(lseek(out, 0, SEEK_END), 0); /* nothing handed out */
	close(out);
	snap_reader_close(rd);

	snprintf(path, sizeof(path), "%s/snaps/c/chunks", f->store_dir);
	byte_flip(path, 50);
	assert_int_equal(snap_store_verify(f->s, "c", NULL), -EBADMSG);
	assert_non_null(strstr(snap_store_error(f->s), "chunk list"));
	free(r[0].data);
}

/* After a failed write: the earlier snapshot verifies, no temp dirs, no
 * packs other than before. */
static void assert_store_unharmed(const char *store_dir, const char *keep,
				  struct test_region *r, unsigned nr, unsigned packs_before)
{
	struct snap_store *s;
	char dir[400];
	unsigned total, files;

	assert_int_equal(snap_store_open(store_dir, NULL, 0, &s), 0);
	assert_int_equal(list_complete(s, keep, &total), 1);
	assert_int_equal(total, 1);
	assert_int_equal(snap_store_verify(s, keep, NULL), 0);
	assert_int_equal(test_snapshot_check(s, keep, r, nr), 0);
	snprintf(dir, sizeof(dir), "%s/packs", store_dir);
	test_dir_bytes(dir, &files);
	assert_int_equal(files, packs_before);
	snap_store_close(s);
}

static void test_enospc_fault_hook(void **state)
{
	struct fixture *f = *state;
	struct test_region r[1] = {{ 0x100000, 4 * TEST_CHUNK, NULL }};
	struct test_region r2[1] = {{ 0x200000, 20 * TEST_CHUNK, NULL }};
	uint64_t limits[] = { 10, 1000, 5 * TEST_CHUNK, 19 * TEST_CHUNK, 20 * TEST_CHUNK + 1200 };
	unsigned files;

	r[0].data = test_data_make(DATA_RANDOM, r[0].size, 13);
	r2[0].data = test_data_make(DATA_RANDOM, r2[0].size, 14);
	assert_int_equal(test_snapshot_write(f->s, "keep", NULL, r, 1, f->journal_fd, NULL), 0);
	packs_bytes(f, &files);
	/* Run out of space in the packs, the journal copy and the last files. */
	for (unsigned i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		struct snap_store_config cfg = { .fault_enospc_after = limits[i] };
		struct snap_store *s;
		int rc;

		assert_int_equal(snap_store_open(f->store_dir, &cfg, 0, &s), 0);
		rc = test_snapshot_write(s, "full", NULL, r2, 1, f->journal_fd, NULL);
		assert_int_equal(rc, -ENOSPC);
		if (!strstr(snap_store_error(s), "free space"))
			fail_msg("limit %llu: unclear error \"%s\"", (unsigned long long)limits[i],
				 snap_store_error(s));
		snap_store_close(s);
		assert_store_unharmed(f->store_dir, "keep", r, 1, files);
	}
	free(r[0].data);
	free(r2[0].data);
}

static void test_enospc_tmpfs(void **state)
{
	struct fixture *f = *state;
	struct test_region r[1] = {{ 0x100000, 8 * TEST_CHUNK, NULL }};
	struct test_region big[1] = {{ 0x200000, 64 * TEST_CHUNK, NULL }};
	char mnt[300], store_dir[400], pdir[500];
	struct snap_store *s;
	unsigned files;
	int jfd;

	snprintf(mnt, sizeof(mnt), "%s/tmpfs", f->dir);
	mkdir(mnt, 0755);
	if (geteuid() != 0 || mount("tmpfs", mnt, "tmpfs", 0, "size=2m") != 0) {
		rmdir(mnt);
		skip(); /* the fault hook test covers the same paths */
	}
	snprintf(store_dir, sizeof(store_dir), "%s/store", mnt);
	r[0].data = test_data_make(DATA_RANDOM, r[0].size, 15);
	big[0].data = test_data_make(DATA_RANDOM, big[0].size, 16);
	jfd = test_journal_make(f->dir, "t", 20000);
	assert_int_equal(snap_store_open(store_dir, NULL, SNAP_STORE_CREATE, &s), 0);
	assert_int_equal(test_snapshot_write(s, "small", NULL, r, 1, jfd, NULL), 0);
	snprintf(pdir, sizeof(pdir), "%s/packs", store_dir);
	test_dir_bytes(pdir, &files);
	assert_int_equal(test_snapshot_write(s, "big", NULL, big, 1, jfd, NULL), -ENOSPC);
	assert_non_null(strstr(snap_store_error(s), "free space"));
	snap_store_close(s);
	assert_store_unharmed(store_dir, "small", r, 1, files);
	/* Space came back: the next snapshot fits again. */
	assert_int_equal(snap_store_open(store_dir, NULL, 0, &s), 0);
	assert_int_equal(test_snapshot_write(s, "again", NULL, r, 1, jfd, NULL), 0);
	snap_store_close(s);
	close(jfd);
	assert_int_equal(umount(mnt), 0);
	rmdir(mnt);
	free(r[0].data);
	free(big[0].data);
}

/* How many .pack files the store has; *@bytes receives their total size. */
static unsigned pack_files_bytes(struct fixture *f, uint64_t *bytes)
{
	char dir[400], path[700];
	struct dirent *de;
	unsigned n = 0;
	struct stat st;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/packs", f->store_dir);
	d = opendir(dir);
	assert_non_null(d);
	*bytes = 0;
	while ((de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name);

		if (len < 5 || strcmp(de->d_name + len - 5, ".pack"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		assert_int_equal(stat(path, &st), 0);
		*bytes += (uint64_t)st.st_size;
		n++;
	}
	closedir(d);
	return n;
}

/* Four workers append frames at once, each to a pack no other is
 * writing, and close a pack once it holds three chunks: every frame lands
 * where its index says, the packs hold exactly their frames, a small
 * snapshot stays in one pack, and a full disk at any point of such a
 * write leaves the store as it was. */
static void test_parallel_packs(void **state)
{
	struct fixture *f = *state;
	const uint32_t chunk = 1u << 20;
	struct test_region r[2] = {{ 0x100000, 24ull * chunk + 4097, NULL },
				   { 0x10000000, 8ull * chunk, NULL }};
	struct test_region r2[1] = {{ 0x20000000, 16ull * chunk, NULL }};
	struct snap_store_config cfg = { .workers = 4, .queue_depth = 8, .pack_max_bytes = 3ull * chunk };
	uint64_t limits[] = { 40, 5ull * chunk + 100, 17ull * chunk / 2, 16ull * chunk + 1000 };
	struct snap_writer_stats ws;
	struct snap_verify_stats vs;
	struct snap_store *s;
	unsigned files, packs, before;
	uint64_t bytes;

	r[0].data = test_data_make(DATA_RANDOM, r[0].size, 31);
	r[1].data = test_data_make(DATA_TEXT, r[1].size, 32);
	r2[0].data = test_data_make(DATA_RANDOM, r2[0].size, 33);
	snap_store_close(f->s);
	assert_int_equal(snap_store_open(f->store_dir, &cfg, 0, &f->s), 0);
	assert_int_equal(test_snapshot_write_chunked(f->s, "par", NULL, r, 2, f->journal_fd, &ws, chunk), 0);
	assert_int_equal(snap_store_verify(f->s, "par", &vs), 0);
	assert_int_equal(vs.bytes_checked, r[0].size + r[1].size);
	assert_int_equal(test_snapshot_check(f->s, "par", r, 2), 0);
	/* The packs are their headers and frames, no hole, no spare byte;
	 * 25 raw frames of 1 MiB three to a pack need nine packs at least. */
	packs = pack_files_bytes(f, &bytes);
	assert_true(packs >= 9);
	assert_int_equal(bytes, packs * 32 + ws.stored_bytes);
	packs_bytes(f, &files);

	/* A small snapshot stays in one pack however many workers write it
	 * (the second opens once a share of 64 MiB is appended). */
	snap_store_close(f->s);
	cfg.pack_max_bytes = 0;
	assert_int_equal(snap_store_open(f->store_dir, &cfg, 0, &f->s), 0);
	before = pack_files_bytes(f, &bytes);
	assert_int_equal(test_snapshot_write_chunked(f->s, "small", NULL, r2, 1, f->journal_fd, NULL, chunk), 0);
	assert_int_equal(pack_files_bytes(f, &bytes), before + 1);
	assert_int_equal(snap_store_rm(f->s, "small", NULL), 0);
	packs_bytes(f, &files);

	for (unsigned i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		cfg.fault_enospc_after = limits[i];
		assert_int_equal(snap_store_open(f->store_dir, &cfg, 0, &s), 0);
		assert_int_equal(test_snapshot_write_chunked(s, "full", NULL, r2, 1, f->journal_fd, NULL, chunk),
				 -ENOSPC);
		assert_non_null(strstr(snap_store_error(s), "free space"));
		snap_store_close(s);
		assert_store_unharmed(f->store_dir, "par", r, 2, files);
	}
	free(r[0].data);
	free(r[1].data);
	free(r2[0].data);
}

static void test_rm_gc(void **state)
{
	struct fixture *f = *state;
	struct test_region a[2] = {{ 0x100000, 16 * TEST_CHUNK, NULL }, { 0x900000, 8 * TEST_CHUNK, NULL }};
	struct test_region b[2] = {{ 0x100000, 16 * TEST_CHUNK, NULL }, { 0x900000, 8 * TEST_CHUNK, NULL }};
	struct snap_gc_stats gs;
	struct snap_reader *rd;
	uint64_t full, after_a;
	unsigned files;

	store_one_worker(f);

	a[0].data = test_data_make(DATA_RANDOM, a[0].size, 21);
	a[1].data = test_data_make(DATA_RANDOM, a[1].size, 22);
	b[0].data = test_data_make(DATA_RANDOM, b[0].size, 23);
	b[1].data = malloc(b[1].size);
	memcpy(b[1].data, a[1].data, b[1].size); /* b shares a's second region */
	assert_int_equal(test_snapshot_write(f->s, "a", NULL, a, 2, f->journal_fd, NULL), 0);
	assert_int_equal(test_snapshot_write(f->s, "b", NULL, b, 2, f->journal_fd, NULL), 0);
	full = packs_bytes(f, &files);
	assert_int_equal(files, 4); /* two packs, two indexes */

	/* Busy while a reader is open. */
	assert_int_equal(snap_reader_open(f->s, "b", &rd), 0);
	assert_int_equal(snap_store_rm(f->s, "a", NULL), -EBUSY);
	assert_non_null(strstr(snap_store_error(f->s), "in use"));
	snap_reader_close(rd);

	assert_int_equal(snap_store_rm(f->s, "a", &gs), 0);
	after_a = packs_bytes(f, &files);
	/* a's own 16 chunks are gone; the 8 it shared with b were kept. */
	assert_true(gs.bytes_freed >= 16 * TEST_CHUNK);
	assert_int_equal(gs.chunks_dropped, 16);
	assert_true(full - after_a >= 16 * TEST_CHUNK);
	assert_true(after_a >= 24 * TEST_CHUNK);
	assert_int_equal(list_complete(f->s, "a", NULL), 0);
	assert_int_equal(snap_store_verify(f->s, "b", NULL), 0);
	assert_int_equal(test_snapshot_check(f->s, "b", b, 2), 0);
	assert_int_equal(snap_store_rm(f->s, "a", NULL), -ENOENT);

	assert_int_equal(snap_store_rm(f->s, "b", &gs), 0);
	assert_int_equal(packs_bytes(f, &files), 0);
	assert_int_equal(files, 0);
	regions_free(a, 2);
	regions_free(b, 2);
}


/* A writer that died leaves .tmp-NAME with no lock on it: not listed, and
 * a writer of the same name takes it over.  A live writer's is listed as
 * being written, and reading it says so rather than "no such snapshot". */
static void test_dead_writer(void **state)
{
	struct fixture *f = *state;
	struct test_region r[1] = {{ 0x100000, 2 * TEST_CHUNK, NULL }};
	struct snap_writer_config cfg = { .name = "live", .chunk_size = TEST_CHUNK };
	struct snap_manifest m;
	struct snap_writer *w;
	char dead[400];
	unsigned total;

	r[0].data = test_data_make(DATA_RANDOM, r[0].size, 21);
	assert_int_equal(test_snapshot_write(f->s, "kept", NULL, r, 1, f->journal_fd, NULL), 0);
	snprintf(dead, sizeof(dead), "%s/snaps/.tmp-dead", f->store_dir);
	assert_int_equal(mkdir(dead, 0755), 0);
	assert_int_equal(list_complete(f->s, NULL, &total), 1);
	assert_int_equal(total, 1);                     /* "dead" is not listed */
	assert_int_equal(snap_store_manifest_get(f->s, "dead", &m), -ENOENT);

	assert_int_equal(snap_writer_begin(f->s, &cfg, &w), 0);
	assert_int_equal(list_complete(f->s, NULL, &total), 1);
	assert_int_equal(total, 2);                     /* "live" is, not complete */
	assert_int_equal(snap_store_manifest_get(f->s, "live", &m), -EINPROGRESS);
	assert_non_null(strstr(snap_store_error(f->s), "still being written"));
	/* A second writer of the live name is refused, and leaves it alone. */
	{
		struct snap_writer *w2;

		assert_int_not_equal(snap_writer_begin(f->s, &cfg, &w2), 0);
		assert_int_equal(list_complete(f->s, NULL, &total), 1);
		assert_int_equal(total, 2);
	}
	snap_writer_abort(w);

	/* The dead writer's name is free to use. */
	assert_int_equal(test_snapshot_write(f->s, "dead", NULL, r, 1, f->journal_fd, NULL), 0);
	assert_int_equal(snap_store_verify(f->s, "dead", NULL), 0);
	assert_int_equal(list_complete(f->s, NULL, &total), 2);
	assert_int_equal(total, 2);
	free(r[0].data);
}

/* A deleted pack file is named as missing, not as a missing snapshot. */
static void test_pack_missing(void **state)
{
	struct fixture *f = *state;
	struct test_region r[1] = {{ 0x100000, 3 * TEST_CHUNK, NULL }};
	char pack[1024];

	r[0].data = test_data_make(DATA_RANDOM, r[0].size, 31);
	assert_int_equal(test_snapshot_write(f->s, "p", NULL, r, 1, f->journal_fd, NULL), 0);
	first_pack(f, pack, sizeof(pack));
	assert_int_equal(unlink(pack), 0);
	assert_int_equal(snap_store_verify(f->s, "p", NULL), -EBADMSG);
	assert_non_null(strstr(snap_store_error(f->s), "pack missing: packs/pack-"));
	assert_null(strstr(snap_store_error(f->s), "no such snapshot"));
	free(r[0].data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_incomplete_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dedupe, setup, teardown),
		cmocka_unit_test_setup_teardown(test_incremental, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unchanged_checks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_pack, setup, teardown),
		cmocka_unit_test_setup_teardown(test_raw_pieces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write_behind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_manifest_and_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_enospc_fault_hook, setup, teardown),
		cmocka_unit_test_setup_teardown(test_enospc_tmpfs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_parallel_packs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rm_gc, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_writer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pack_missing, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
