/* Build a snapshot store for the ckpt tests with the real writers: a journal
 * made through the tracker API (objects of every kind plus an unknown one,
 * regions, an image, meta) and two snapshots written with snap_writer:
 *
 *   snap-a  full: region A (1 MiB at 0x200000000000: zero chunks, a chunk
 *           repeated, random chunks) and region B (300 KiB, random tail)
 *   snap-b  incremental on snap-a: region A with one chunk changed (the rest
 *           passed as unchanged), region B unchanged
 *
 *     make_test_store STORE_DIR WORK_DIR
 *
 * Prints the expected counts as one JSON object on stdout for the test
 * script to compare with `ckpt inspect --json`. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "snap_store.h"
#include "snap_writer.h"
#include "tracker.h"
#include "le.h"

#define CHUNK (64u << 10)
#define REGION_A 0x200000000000ull
#define REGION_A_SIZE (1u << 20)      /* 16 chunks */
#define REGION_B 0x200000200000ull
#define REGION_B_SIZE (300u << 10)    /* 5 chunks, the last short */

#define CHECK(expr) do { int rc_ = (expr); if (rc_) { \
	fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #expr, rc_, strerror(-rc_)); \
	exit(1); } } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Region A: chunks 0-3 zero, 4 and 9 identical, 5-8 text (compressible),
 * 10-15 random. */
static void region_a_fill(uint8_t *p)
{
	memset(p, 0, REGION_A_SIZE);
	for (unsigned c = 4; c < 16; c++) {
		uint8_t *q = p + (size_t)c * CHUNK;

		for (unsigned i = 0; i < CHUNK; i += 8) {
			uint64_t v = c >= 5 && c <= 8 ? 0x2065726f6d206465ull ^ ((uint64_t)(i & 0x700)) ^ ((uint64_t)c << 40) : rng();

			memcpy(q + i, &v, 8);
		}
	}
	memcpy(p + 9 * (size_t)CHUNK, p + 4 * (size_t)CHUNK, CHUNK);
}

static void region_b_fill(uint8_t *p)
{
	for (unsigned i = 0; i < REGION_B_SIZE; i += 8) {
		uint64_t v = rng();

		memcpy(p + i, &v, 8);
	}
}

static uint64_t device_hash(const uint8_t *p, uint32_t len)
{
	uint64_t h = 1469598103934665603ull;

	for (uint32_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static void object_put(struct tracker *t, uint64_t handle, uint32_t kind, uint64_t parent,
		       const void *args, uint32_t len)
{
	struct tracker_object o = { .kind = kind, .parent = parent, .args = args, .args_len = len };

	CHECK(tracker_object_put(t, handle, &o));
}

static void name_args(uint8_t *buf, const char *name, uint32_t *len)
{
	uint32_t n = (uint32_t)strlen(name);

	le32_put(buf, n);
	memcpy(buf + 4, name, n);
	*len = n + 4;
}

/* The journal a worker would have written, copied as a snapshot keeps it. */
static int journal_make(const char *work)
{
	static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
				  ".visible .entry vecadd(.param .u64 a) { ret; }\n";
	uint8_t hash[TRACKER_HASH_SIZE], args[64], uuid[16];
	struct tracker_region reg = { .kind = 0 };
	char dir[4096], copy[4096];
	struct tracker *t;
	uint32_t len;
	int fd;

	snprintf(dir, sizeof(dir), "%s/live-journal", work);
	snprintf(copy, sizeof(copy), "%s/journal.copy", work);
	CHECK(tracker_open(dir, 0, &t));
	CHECK(tracker_txn_begin(t));
	CHECK(tracker_image_ref(t, ptx, sizeof(ptx), 4, hash));
	CHECK(tracker_image_ref(t, ptx, sizeof(ptx), 4, hash));   /* module + library */
	le32_put(args, 0);
	le32_put(args + 4, 0x4);
	object_put(t, 0x0100000000000001ull, 1, 0, args, 8);
	object_put(t, 0x0300000000000001ull, 3, 0, hash, 16);
	object_put(t, 0x0200000000000001ull, 2, 0, hash, 16);
	name_args(args, "vecadd", &len);
	object_put(t, 0x0500000000000001ull, 5, 0x0300000000000001ull, args, len);
	name_args(args, "_Z6kernelPfi", &len);
	object_put(t, 0x0400000000000001ull, 4, 0x0200000000000001ull, args, len);
	le32_put(args, 1);
	le32_put(args + 4, (uint32_t)-1);
	object_put(t, 0x0600000000000001ull, 6, 0x0100000000000001ull, args, 8);
	le32_put(args, 2);
	object_put(t, 0x0700000000000001ull, 7, 0x0100000000000001ull, args, 4);
	/* A kind this ckpt does not know, and a stream with a bad encoding:
	 * both must show as hex, not crash or be guessed at. */
	object_put(t, 0x2a00000000000001ull, 42, 0, "\x01\x02\x03", 3);
	object_put(t, 0x0600000000000002ull, 6, 0, "\xff", 1);
	reg.size = REGION_A_SIZE;
	reg.owner = 0x0100000000000001ull;
	CHECK(tracker_region_put(t, REGION_A, &reg));
	reg.size = REGION_B_SIZE;
	CHECK(tracker_region_put(t, REGION_B, &reg));
	memcpy(uuid, "\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef", 16);
	CHECK(tracker_meta_u64_set(t, TRACKER_META_DEVICE_INDEX, 0));
	CHECK(tracker_meta_bytes_set(t, TRACKER_META_DEVICE_UUID, uuid, 16));
	CHECK(tracker_meta_u64_set(t, TRACKER_META_DRIVER_VERSION, 13000));
	CHECK(tracker_meta_bytes_set(t, TRACKER_META_SESSION_ID, "sess-1", 6));
	CHECK(tracker_meta_u64_set(t, TRACKER_META_ARENA_BASE, REGION_A));
	CHECK(tracker_meta_u64_set(t, TRACKER_META_ARENA_SIZE, 512ull << 30));
	CHECK(tracker_reply_set(t, 42, "\x00\x00\x00\x00", 4));
	CHECK(tracker_txn_commit(t));
	CHECK(tracker_copy_file(t, copy));
	tracker_close(t);
	fd = open(copy, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		perror(copy);
		exit(1);
	}
	return fd;
}

static void chunk_put(struct snap_writer *w, uint32_t region, uint64_t index, const uint8_t *data,
		      uint32_t len, const char *parent, uint64_t addr)
{
	uint64_t dh = device_hash(data, len), ph;

	if (parent && !snap_writer_parent_device_hash(w, addr, &ph) && ph == dh) {
		CHECK(snap_writer_chunk_unchanged(w, region, index, dh));
		return;
	}
	/* No done callback: flush before the caller's buffer changes. */
	CHECK(snap_writer_chunk_add(w, region, index, data, len, dh, NULL, NULL));
	CHECK(snap_writer_flush(w));
}

static void snapshot_write(struct snap_store *s, const char *name, const char *parent,
			   const uint8_t *a, const uint8_t *b, int journal_fd)
{
	struct snap_writer_config cfg = { .name = name, .parent = parent, .session_id = "sess-1",
					  .device_name = "Sim Device", .driver_version = 13000,
					  .chunk_size = CHUNK };
	struct snap_writer *w;
	uint32_t ra, rb;

	memcpy(cfg.device_uuid, "\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef", 16);
	CHECK(snap_writer_begin(s, &cfg, &w));
	CHECK(snap_writer_region_add(w, REGION_A, REGION_A_SIZE, 0, &ra));
	CHECK(snap_writer_region_add(w, REGION_B, REGION_B_SIZE, 0, &rb));
	for (uint64_t c = 0; c < REGION_A_SIZE / CHUNK; c++)
		chunk_put(w, ra, c, a + c * CHUNK, CHUNK, parent, REGION_A + c * CHUNK);
	for (uint64_t c = 0; c * CHUNK < REGION_B_SIZE; c++) {
		uint32_t len = REGION_B_SIZE - c * CHUNK < CHUNK ? (uint32_t)(REGION_B_SIZE - c * CHUNK) : CHUNK;

		chunk_put(w, rb, c, b + c * CHUNK, len, parent, REGION_B + c * CHUNK);
	}
	CHECK(snap_writer_journal_set(w, journal_fd));
	CHECK(snap_writer_commit(w, NULL));
}

int main(int argc, char **argv)
{
	struct snap_store_config cfg = { .chunk_size = CHUNK, .workers = 2 };
	struct snap_store *s;
	uint8_t *a, *b;
	int jfd;

	if (argc != 3) {
		fprintf(stderr, "usage: make_test_store STORE_DIR WORK_DIR\n");
		return 2;
	}
	a = malloc(REGION_A_SIZE);
	b = malloc(REGION_B_SIZE);
	if (!a || !b)
		return 1;
	region_a_fill(a);
	region_b_fill(b);
	jfd = journal_make(argv[2]);
	CHECK(snap_store_open(argv[1], &cfg, SNAP_STORE_CREATE, &s));
	snapshot_write(s, "snap-a", NULL, a, b, jfd);
	a[12 * (size_t)CHUNK + 100] ^= 0x5a;   /* one chunk changes */
	snapshot_write(s, "snap-b", "snap-a", a, b, jfd);
	snap_store_close(s);
	close(jfd);
	/* What inspect must find (see region_a_fill). */
	printf("{\"snap-a\":{\"regions\":[{\"chunks\":16,\"zero\":4,\"dedup\":1,\"unchanged\":0,\"stored\":11},"
	       "{\"chunks\":5,\"zero\":0,\"dedup\":0,\"unchanged\":0,\"stored\":5}]},"
	       "\"snap-b\":{\"regions\":[{\"chunks\":16,\"zero\":4,\"dedup\":0,\"unchanged\":11,\"stored\":1},"
	       "{\"chunks\":5,\"zero\":0,\"dedup\":0,\"unchanged\":5,\"stored\":0}]},"
	       "\"objects\":9,\"regions\":2,\"images\":1,\"image_refs\":2}\n");
	free(a);
	free(b);
	return 0;
}
