/* capture on the sim backend: snapshot arena regions into a store, restore
 * them into a fresh arena and compare bytes; the shadow and direct paths,
 * incremental snapshots, and the device hash reference.
 *
 * argv[1]: "kernel" when the hash kernel must be the engine (the build
 * embedded it and argv[2], a CPU version of it, is loaded into the sim),
 * "host" otherwise. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "arena.h"
#include "capture.h"
#include "monotonic.h"
#include "snap_hash.h"
#include "snap_reader.h"
#include "snap_writer.h"

#define BASE 0x310000000000ull
#define ARENA (4ull << 30)
#define CHUNK (64u << 10)
#define NREG 3

static const char *expect_engine = "host";

static const char *plugin;

/* ---- device hash reference ---------------------------------------------- */

static void test_hash_vectors(void **state)
{
	static const uint8_t zero16[16];
	static const uint8_t tail3[3] = { 1, 2, 3 };
	static const char v21[] = "tern-hash-vector12345";
	uint8_t buf[4096];
	uint64_t nz, a, b;
	bool zero;

	/* Computed by hand (Python) from the definition in snap_hash.h. */
	assert_int_equal(snap_hash_fmix64(0), 0);
	assert_int_equal(snap_hash_fmix64(1), 0x0a58083012eac110ull);
	assert_int_equal(snap_hash_fmix64(SNAP_HASH_GOLDEN), 0x1d82421280d43f01ull);
	assert_int_equal(snap_hash_device(zero16, 8, &zero), 8);
	assert_true(zero);
	assert_int_equal(snap_hash_device(zero16, 16, &zero), 0x1d82421280d43f11ull);
	assert_true(zero);
	assert_int_equal(snap_hash_device(tail3, 3, &zero), 0xa81719786ef1decfull);
	assert_false(zero);
	assert_int_equal(snap_hash_device(v21, 21, &zero), 0xd3145713e0df2c7cull);
	assert_false(zero);
	/* Partial sums over disjoint word ranges XOR into the whole. */
	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + 3);
	a = snap_hash_words(buf, 1024, 0, &nz) ^ snap_hash_words(buf + 1024, 4096 - 1024 - 5, 128, &nz) ^
	    snap_hash_words(buf + 4096 - 5, 5, (4096 - 5) / 8, &nz);
	/* (4096 - 5) is not a word boundary: compute the straddling word apart. */
	b = snap_hash_words(buf, 4096, 0, &nz);
	assert_int_not_equal(a, b);
	a = snap_hash_words(buf, 1024, 0, &nz) ^ snap_hash_words(buf + 1024, 3072, 128, &nz);
	assert_int_equal(a, b);
	assert_int_equal(snap_hash_device(buf, 4096, NULL), b ^ 4096);
	/* The position matters: swapping two words changes the hash. */
	memcpy(buf, buf + 8, 8);
	assert_int_not_equal(snap_hash_device(buf, 4096, NULL), b ^ 4096);
}

/* ---- fixtures --------------------------------------------------------- */

struct env {
	char dir[64];
	struct snap_store *store;
	struct backend *be;
	CUcontext ctx;
	struct arena *arena;
	struct capture_region reg[NREG];
	uint8_t *copy[NREG];      /* what the regions hold */
	int journal_fd;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void fill_random(uint8_t *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (uint8_t)(rng() >> 24);
}

static void env_backend_open(struct env *e)
{
	const char *kernels[] = { plugin, NULL };
	struct backend_config cfg = { .sim_memory = 1ull << 30,
				      .sim_kernels = plugin ? kernels : NULL };

	assert_int_equal(backend_open("sim", &cfg, &e->be), 0);
	assert_int_equal(e->be->cuInit(0), CUDA_SUCCESS);
	assert_int_equal(e->be->cuDevicePrimaryCtxRetain(&e->ctx, 0), CUDA_SUCCESS);
	assert_int_equal(e->be->cuCtxSetCurrent(e->ctx), CUDA_SUCCESS);
	assert_int_equal(arena_open(e->be, 0, BASE, ARENA, &e->arena), 0);
}

/* Regions: random (not a chunk multiple), half zero (every other chunk,
 * short tail of 9 bytes), all zero (short). */
static int env_setup(void **state)
{
	static const uint64_t sizes[NREG] = { 37 * CHUNK + 1234, 24 * CHUNK + 9, 5 * CHUNK + 100 };
	struct snap_store_config scfg = { .chunk_size = CHUNK, .workers = 2 };
	struct env *e = calloc(1, sizeof(*e));
	char jpath[96];

	assert_non_null(e);
	snprintf(e->dir, sizeof(e->dir), "/tmp/tern-capture-XXXXXX");
	assert_non_null(mkdtemp(e->dir));
	assert_int_equal(snap_store_open(e->dir, &scfg, SNAP_STORE_CREATE, &e->store), 0);
	env_backend_open(e);
	for (int i = 0; i < NREG; i++) {
		uint8_t *p;

		e->reg[i].size = sizes[i];
		e->reg[i].flags = (uint32_t)i;
		assert_int_equal(arena_alloc(e->arena, sizes[i], &e->reg[i].addr), CUDA_SUCCESS);
		p = (uint8_t *)(uintptr_t)e->reg[i].addr;
		e->copy[i] = calloc(1, sizes[i]);
		assert_non_null(e->copy[i]);
		if (i == 0)
			fill_random(e->copy[i], sizes[i]);
		for (uint64_t off = 0; i == 1 && off < sizes[i]; off += 2 * CHUNK)
			fill_random(e->copy[i] + off, sizes[i] - off < CHUNK ? sizes[i] - off : CHUNK);
		/* Through the device's own copy path, as the guest would. */
		assert_int_equal(e->be->cuMemcpyHtoD(e->reg[i].addr, e->copy[i], sizes[i]),
				 CUDA_SUCCESS);
		assert_memory_equal(p, e->copy[i], sizes[i]);
	}
	snprintf(jpath, sizeof(jpath), "%s/journal-src", e->dir);
	e->journal_fd = open(jpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(e->journal_fd >= 0);
	assert_int_equal(write(e->journal_fd, "journal", 7), 7);
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;
	char cmd[128];

	arena_close(e->arena);
	backend_close(e->be);
	snap_store_close(e->store);
	close(e->journal_fd);
	for (int i = 0; i < NREG; i++)
		free(e->copy[i]);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", e->dir);
	assert_int_equal(system(cmd), 0);
	free(e);
	return 0;
}

static void capture_open_checked(struct env *e, const struct capture_config *cfg,
				 struct capture **c)
{
	assert_int_equal(capture_open(e->be, 0, cfg, c), 0);
	if (!(cfg->flags & CAPTURE_HASH_HOST) && strcmp(expect_engine, "kernel") == 0)
		assert_int_equal(capture_engine(*c), CAPTURE_ENGINE_KERNEL);
	else
		assert_int_equal(capture_engine(*c), CAPTURE_ENGINE_HOST);
}

/* Snapshot the regions as @name (parent may be NULL). */
static void snapshot(struct env *e, struct capture *c, const char *name, const char *parent,
		     struct capture_stats *st, struct snap_writer_stats *ws)
{
	struct snap_writer_config wcfg = { .name = name, .parent = parent };
	struct snap_writer *w;
	struct capture_stats fin;

	assert_int_equal(snap_writer_begin(e->store, &wcfg, &w), 0);
	assert_int_equal(capture_pause(c, w, e->reg, NREG, st), 0);
	/* The guest runs again: scribbling now must not reach the snapshot. */
	memset((void *)(uintptr_t)e->reg[0].addr, 0x5a, 4096);
	assert_int_equal(capture_finish(c, &fin), 0);
	st->drain_ns = fin.drain_ns;
	st->bytes_copied = fin.bytes_copied;
	memcpy((void *)(uintptr_t)e->reg[0].addr, e->copy[0], 4096);
	assert_int_equal(snap_writer_journal_set(w, e->journal_fd), 0);
	assert_int_equal(snap_writer_commit(w, ws), 0);
	assert_int_equal(snap_store_verify(e->store, name, NULL), 0);
	printf("# %s: pause %.2f ms (hash %.2f), drain %.2f ms, %llu chunks: zero %llu, "
	       "unchanged %llu, shadowed %llu, direct %llu, %llu bytes copied\n", name,
	       st->pause_ns / 1e6, st->hash_ns / 1e6, st->drain_ns / 1e6,
	       (unsigned long long)st->chunks, (unsigned long long)st->chunks_zero,
	       (unsigned long long)st->chunks_unchanged, (unsigned long long)st->chunks_shadowed,
	       (unsigned long long)st->chunks_direct, (unsigned long long)st->bytes_copied);
}

/* A fresh arena (new worker), regions mapped at their addresses and
 * filled with garbage, restored from @name, compared with e->copy. */
static void restore_check(struct env *e, struct capture *c, const char *name)
{
	struct snap_reader *r;
	struct capture_stats st;

	arena_close(e->arena);
	assert_int_equal(arena_open(e->be, 0, BASE, ARENA, &e->arena), 0);
	for (int i = 0; i < NREG; i++) {
		assert_int_equal(arena_alloc_at(e->arena, e->reg[i].addr, e->reg[i].size),
				 CUDA_SUCCESS);
		/* Zero chunks must be written too, not assumed. */
		memset((void *)(uintptr_t)e->reg[i].addr, 0xee, e->reg[i].size);
	}
	assert_int_equal(snap_reader_open(e->store, name, &r), 0);
	assert_int_equal(capture_fill(c, r, NULL, &st), 0);
	snap_reader_close(r);
	for (int i = 0; i < NREG; i++)
		assert_memory_equal((void *)(uintptr_t)e->reg[i].addr, e->copy[i], e->reg[i].size);
	printf("# restore %s: %.2f ms, %.0f MB/s, %llu bytes copied\n", name, st.fill_ns / 1e6,
	       st.fill_bytes_per_s / 1e6, (unsigned long long)st.bytes_copied);
	assert_int_equal(st.fill_bytes, e->reg[0].size + e->reg[1].size + e->reg[2].size);
}

static uint64_t chunks_of(uint64_t size)
{
	return size / CHUNK + (size % CHUNK != 0);
}

/* Chunks that are not zero: all of region 0, half of region 1. */
static uint64_t nonzero_chunks(const struct env *e)
{
	return chunks_of(e->reg[0].size) + (chunks_of(e->reg[1].size) + 1) / 2;
}

static uint64_t total_chunks(const struct env *e)
{
	return chunks_of(e->reg[0].size) + chunks_of(e->reg[1].size) + chunks_of(e->reg[2].size);
}

/* ---- tests ------------------------------------------------------------- */

static void test_direct(void **state)
{
	struct env *e = *state;
	struct capture_config cfg = { .shadow_max = 0, .staging_bytes = 4 * CHUNK,
				      .staging_count = 3, .streams = 2, .threads = 2 };
	struct snap_writer_stats ws;
	struct capture_stats st;
	struct capture *c;

	capture_open_checked(e, &cfg, &c);
	snapshot(e, c, "direct", NULL, &st, &ws);
	assert_int_equal(st.chunks, total_chunks(e));
	assert_int_equal(st.chunks_zero, total_chunks(e) - nonzero_chunks(e));
	assert_int_equal(st.chunks_shadowed, 0);
	assert_int_equal(st.chunks_direct, nonzero_chunks(e));
	assert_int_equal(st.shadow_bytes, 0);
	assert_int_equal(ws.new_chunks, nonzero_chunks(e));
	assert_int_equal(ws.zero_chunks, st.chunks_zero);
	assert_int_equal(ws.raw_bytes, st.bytes_copied);
	restore_check(e, c, "direct");
	capture_close(c);
}

static void test_shadow(void **state)
{
	struct env *e = *state;
	struct capture_config cfg = { .shadow_max = CAPTURE_SHADOW_AUTO,
				      .shadow_reserve = 64ull << 20, .staging_bytes = 4 * CHUNK,
				      .threads = 2 };
	struct snap_writer_stats ws;
	struct capture_stats st;
	struct capture *c;

	capture_open_checked(e, &cfg, &c);
	snapshot(e, c, "shadow", NULL, &st, &ws);
	assert_int_equal(st.chunks_shadowed, nonzero_chunks(e));
	assert_int_equal(st.chunks_direct, 0);
	/* Sized to the changed bytes exactly, and all of them went through it. */
	assert_int_equal(st.shadow_bytes, ws.raw_bytes);
	assert_int_equal(ws.new_chunks, nonzero_chunks(e));
	assert_int_equal(ws.raw_bytes, st.bytes_copied);
	restore_check(e, c, "shadow");
	capture_close(c);
}

/* A shadow too small for everything: the first chunks go through it, the
 * rest direct, in one snapshot. */
static void test_shadow_partial(void **state)
{
	struct env *e = *state;
	struct capture_config cfg = { .shadow_max = 10 * CHUNK, .shadow_reserve = 1 << 20,
				      .staging_bytes = 3 * CHUNK, .staging_count = 2, .streams = 3,
				      .threads = 3 };
	struct snap_writer_stats ws;
	struct capture_stats st;
	struct capture *c;

	capture_open_checked(e, &cfg, &c);
	snapshot(e, c, "partial", NULL, &st, &ws);
	assert_int_equal(st.chunks_shadowed, 10);
	assert_int_equal(st.chunks_direct, nonzero_chunks(e) - 10);
	assert_int_equal(ws.new_chunks, nonzero_chunks(e));
	restore_check(e, c, "partial");
	capture_close(c);
}

/* Change 2 of the chunks (about 1% of a larger session): only they are
 * copied and stored; the restore of the child is exact. */
static void test_incremental(void **state)
{
	struct env *e = *state;
	struct capture_config cfg = { .shadow_max = CAPTURE_SHADOW_AUTO,
				      .shadow_reserve = 64ull << 20, .threads = 2 };
	struct snap_writer_stats ws;
	struct capture_stats st;
	struct capture *c;
	uint64_t changed[2] = { 3 * CHUNK + 17, 36 * CHUNK + 1000 }; /* region 0 */

	capture_open_checked(e, &cfg, &c);
	snapshot(e, c, "base", NULL, &st, &ws);
	for (int k = 0; k < 2; k++) {
		e->copy[0][changed[k]] ^= 0xff;
		assert_int_equal(e->be->cuMemcpyHtoD(e->reg[0].addr + changed[k],
						     e->copy[0] + changed[k], 1), CUDA_SUCCESS);
	}
	/* A zero chunk of region 1 gets data, one chunk of data becomes zero. */
	fill_random(e->copy[1] + CHUNK, CHUNK);
	memset(e->copy[1], 0, CHUNK);
	assert_int_equal(e->be->cuMemcpyHtoD(e->reg[1].addr, e->copy[1], 2 * CHUNK), CUDA_SUCCESS);

	snapshot(e, c, "child", "base", &st, &ws);
	assert_int_equal(st.chunks_shadowed + st.chunks_direct, 3);
	assert_int_equal(ws.new_chunks, 3);
	assert_int_equal(st.chunks_zero, total_chunks(e) - nonzero_chunks(e));
	assert_int_equal(st.chunks_unchanged, nonzero_chunks(e) - 3);
	assert_int_equal(ws.unchanged_chunks, st.chunks_unchanged);
	assert_int_equal(st.bytes_copied, 3 * CHUNK);
	restore_check(e, c, "child");
	/* The parent keeps its own entries. */
	{
		const struct snap_chunk_list *cl;
		struct snap_reader *r;

		assert_int_equal(snap_reader_open(e->store, "base", &r), 0);
		cl = snap_reader_chunk_list(r);
		assert_int_equal(cl->region_count, NREG);
		assert_int_equal(cl->regions[1].chunks[0].flags, 0);
		assert_true(cl->regions[1].chunks[1].flags & SNAP_CHUNK_ZERO);
		snap_reader_close(r);
	}
	capture_close(c);
}

/* The kernel (or CPU) engine and the CPU reference record the same device
 * hash for every chunk. */
static void test_engines_agree(void **state)
{
	struct env *e = *state;
	struct capture_config cfg = { .shadow_max = 0, .threads = 2 };
	struct capture_config hcfg = { .shadow_max = 0, .threads = 2, .flags = CAPTURE_HASH_HOST };
	struct snap_reader *r1, *r2;
	struct snap_writer_stats ws;
	struct capture_stats st;
	struct capture *c;

	capture_open_checked(e, &cfg, &c);
	snapshot(e, c, "engine", NULL, &st, &ws);
	capture_close(c);
	capture_open_checked(e, &hcfg, &c);
	snapshot(e, c, "reference", NULL, &st, &ws);
	assert_int_equal(st.engine, CAPTURE_ENGINE_HOST);
	capture_close(c);
	assert_int_equal(snap_reader_open(e->store, "engine", &r1), 0);
	assert_int_equal(snap_reader_open(e->store, "reference", &r2), 0);
	for (int i = 0; i < NREG; i++) {
		const struct snap_region *a = &snap_reader_chunk_list(r1)->regions[i];
		const struct snap_region *b = &snap_reader_chunk_list(r2)->regions[i];

		assert_int_equal(a->chunk_count, b->chunk_count);
		for (uint64_t k = 0; k < a->chunk_count; k++) {
			uint64_t len = a->size - k * CHUNK < CHUNK ? a->size - k * CHUNK : CHUNK;

			assert_int_equal(a->chunks[k].device_hash, b->chunks[k].device_hash);
			assert_int_equal(a->chunks[k].device_hash,
					 snap_hash_device(e->copy[i] + k * CHUNK, len, NULL));
		}
	}
	snap_reader_close(r1);
	snap_reader_close(r2);
}

/* snap_writer_chunk_zero: an all-zero entry without bytes. */
static void test_writer_chunk_zero(void **state)
{
	struct env *e = *state;
	struct snap_writer_config wcfg = { .name = "zeros" };
	struct snap_writer_stats ws;
	struct snap_writer *w;
	struct snap_reader *r;
	uint8_t buf[CHUNK];
	uint32_t id;

	assert_int_equal(snap_writer_begin(e->store, &wcfg, &w), 0);
	assert_int_equal(snap_writer_chunk_size(w), CHUNK);
	assert_int_equal(snap_writer_region_add(w, 0x1000000, 2 * CHUNK + 8, 0, &id), 0);
	assert_int_equal(snap_writer_chunk_zero(w, id, 0, 42), 0);
	assert_int_equal(snap_writer_chunk_zero(w, id, 0, 42), -EEXIST);
	assert_int_equal(snap_writer_chunk_zero(w, id, 3, 42), -EINVAL);
	assert_int_equal(snap_writer_chunk_zero(w, id, 2, 43), 0);
	memset(buf, 7, sizeof(buf));
	assert_int_equal(snap_writer_chunk_add(w, id, 1, buf, CHUNK, 44, NULL, NULL), 0);
	assert_int_equal(snap_writer_journal_set(w, e->journal_fd), 0);
	assert_int_equal(snap_writer_commit(w, &ws), 0);
	assert_int_equal(ws.zero_chunks, 2);
	assert_int_equal(ws.new_chunks, 1);
	assert_int_equal(snap_reader_open(e->store, "zeros", &r), 0);
	assert_int_equal(snap_reader_chunk_list(r)->regions[0].chunks[2].device_hash, 43);
	assert_true(snap_reader_chunk_list(r)->regions[0].chunks[0].flags & SNAP_CHUNK_ZERO);
	memset(buf, 1, sizeof(buf));
	assert_int_equal(snap_reader_chunk_read(r, 0, 2, buf, sizeof(buf), NULL), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(buf[i], 0);
	snap_reader_close(r);
}

/* Bad input fails the call, not the worker. */
static void test_errors(void **state)
{
	struct env *e = *state;
	struct capture_config cfg = { .staging_bytes = 4096 }; /* smaller than a chunk */
	struct snap_writer_config wcfg = { .name = "bad" };
	struct snap_writer *w;
	struct snap_reader *r;
	struct capture *c;

	assert_int_equal(capture_open(e->be, 0, &cfg, &c), 0);
	assert_int_equal(snap_writer_begin(e->store, &wcfg, &w), 0);
	assert_int_equal(capture_pause(c, w, e->reg, NREG, NULL), -EINVAL);
	snap_writer_abort(w);
	capture_close(c);
	cfg.staging_bytes = 0;
	assert_int_equal(capture_open(e->be, 0, &cfg, &c), 0);
	snapshot(e, c, "after-error", NULL, &(struct capture_stats){0}, NULL);
	/* Fill into a region that is no longer mapped fails cleanly. */
	assert_int_equal(snap_reader_open(e->store, "after-error", &r), 0);
	arena_close(e->arena);
	assert_int_equal(arena_open(e->be, 0, BASE, ARENA, &e->arena), 0);
	assert_int_equal(capture_fill(c, r, NULL, NULL), -EIO);
	snap_reader_close(r);
	capture_close(c);
}

/* Time a larger capture and restore on the sim (CPU) for the report. */
static void test_throughput(void **state)
{
	struct env *e = *state;
	struct capture_config cfg = { .shadow_max = CAPTURE_SHADOW_AUTO,
				      .shadow_reserve = 64ull << 20, .threads = 2 };
	struct capture_region big = { 0, 256ull << 20, 0 };
	struct snap_writer_config wcfg = { .name = "big" };
	struct snap_writer *w;
	struct snap_reader *r;
	struct capture_stats st, fin;
	struct capture *c;
	uint64_t t0;

	assert_int_equal(arena_alloc(e->arena, big.size, &big.addr), CUDA_SUCCESS);
	/* Half random, half zero (in 1 MiB stripes). */
	for (uint64_t off = 0; off < big.size; off += 2ull << 20)
		fill_random((uint8_t *)(uintptr_t)big.addr + off, 1ull << 20);
	capture_open_checked(e, &cfg, &c);
	assert_int_equal(snap_writer_begin(e->store, &wcfg, &w), 0);
	t0 = monotonic_ns();
	assert_int_equal(capture_pause(c, w, &big, 1, &st), 0);
	assert_int_equal(capture_finish(c, &fin), 0);
	assert_int_equal(snap_writer_journal_set(w, e->journal_fd), 0);
	assert_int_equal(snap_writer_commit(w, NULL), 0);
	printf("# sim 256 MiB half zero, engine %s: pause %.1f ms (hash %.1f), drain %.1f ms, "
	       "durable after %.1f ms\n", st.engine == CAPTURE_ENGINE_KERNEL ? "kernel" : "host",
	       st.pause_ns / 1e6, st.hash_ns / 1e6, fin.drain_ns / 1e6,
	       (monotonic_ns() - t0) / 1e6);
	assert_int_equal(snap_reader_open(e->store, "big", &r), 0);
	assert_int_equal(capture_fill(c, r, NULL, &st), 0);
	printf("# sim restore 256 MiB: %.1f ms, %.0f MB/s\n", st.fill_ns / 1e6,
	       st.fill_bytes_per_s / 1e6);
	snap_reader_close(r);
	capture_close(c);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hash_vectors),
		cmocka_unit_test_setup_teardown(test_writer_chunk_zero, env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_direct, env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_shadow, env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_shadow_partial, env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_incremental, env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_engines_agree, env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_errors, env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_throughput, env_setup, env_teardown),
	};

	if (argc > 1)
		expect_engine = argv[1];
	if (argc > 2)
		plugin = argv[2];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
