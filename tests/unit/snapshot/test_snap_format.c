/* The on-disk encodings: round trips, and rejection of truncated, flipped
 * and inconsistent inputs (with valid checksums, so the structure checks
 * themselves are exercised). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "snap_format.h"

static void manifest_sample(struct snap_manifest *m)
{
	memset(m, 0, sizeof(*m));
	m->created_ns = 1700000000123456789ull;
	m->chunk_size = 4u << 20;
	m->driver_version = 13000;
	memcpy(m->device_uuid, "GPU-0123456789ab", 16);
	m->codec = SNAP_CODEC_ZSTD;
	m->codec_level = -3;
	m->region_count = 2;
	m->chunk_count = 10;
	m->zero_chunks = 4;
	m->new_chunks = 3;
	m->logical_bytes = 40ull << 20;
	m->new_stored_bytes = 123456;
	m->journal_bytes = 4096;
	m->chunks_bytes = 400;
	memset(m->journal_hash, 0xab, 16);
	memset(m->chunks_hash, 0xcd, 16);
	strcpy(m->name, "snap-1.incr_2");
	strcpy(m->parent, "snap-0");
	strcpy(m->session_id, "vm-1234:proc 5");
	strcpy(m->device_name, "NVIDIA H200");
}

/* Re-seal a modified image so only the structure checks can reject it. */
static void trailer_fix(uint8_t *buf, size_t len)
{
	snap_hash128(buf, len - SNAP_TRAILER_BYTES, buf + len - SNAP_TRAILER_BYTES);
}

static void test_manifest(void **state)
{
	struct snap_manifest m, d;
	struct snap_buf b = {0};
	uint8_t *copy;

	(void)state;
	manifest_sample(&m);
	assert_int_equal(snap_manifest_encode(&m, &b), 0);
	assert_memory_equal(b.data, "TRNSMANI", 8);
	assert_int_equal(le32_get(b.data + 8), SNAP_FORMAT_VERSION);
	assert_int_equal(b.len, SNAP_MANIFEST_FIXED_BYTES + 13 + 6 + 14 + 11 + SNAP_TRAILER_BYTES);
	assert_int_equal(snap_manifest_decode(b.data, b.len, &d), 0);
	assert_int_equal(d.created_ns, m.created_ns);
	assert_int_equal(d.codec_level, -3);
	assert_int_equal(d.chunk_count, 10);
	assert_memory_equal(d.journal_hash, m.journal_hash, 16);
	assert_string_equal(d.name, m.name);
	assert_string_equal(d.parent, m.parent);
	assert_string_equal(d.session_id, m.session_id);
	assert_string_equal(d.device_name, m.device_name);
	/* Little-endian on disk, whatever the host. */
	assert_int_equal(b.data[16], (uint8_t)m.created_ns);

	for (size_t n = 0; n < b.len; n++)
		assert_int_not_equal(snap_manifest_decode(b.data, n, &d), 0);
	copy = malloc(b.len);
	for (size_t i = 0; i < b.len; i++) {
		memcpy(copy, b.data, b.len);
		copy[i] ^= 0x10;
		assert_int_not_equal(snap_manifest_decode(copy, b.len, &d), 0);
	}
	/* A newer version is refused as such. */
	memcpy(copy, b.data, b.len);
	le32_put(copy + 8, 2);
	assert_int_equal(snap_manifest_decode(copy, b.len, &d), -ENOTSUP);
	/* String lengths past the end, and zero chunks > chunks, with a good
	 * checksum. */
	memcpy(copy, b.data, b.len);
	copy[160] = 200;
	trailer_fix(copy, b.len);
	assert_int_equal(snap_manifest_decode(copy, b.len, &d), -EBADMSG);
	memcpy(copy, b.data, b.len);
	le64_put(copy + 72, 11);
	trailer_fix(copy, b.len);
	assert_int_equal(snap_manifest_decode(copy, b.len, &d), -EBADMSG);
	free(copy);
	snap_buf_free(&b);

	/* Names outside the allowed set are not encoded into a valid manifest. */
	manifest_sample(&m);
	strcpy(m.name, "../evil");
	assert_int_equal(snap_manifest_encode(&m, &b), 0);
	assert_int_equal(snap_manifest_decode(b.data, b.len, &d), -EBADMSG);
	snap_buf_free(&b);
	assert_false(snap_name_valid(".tmp-x"));
	assert_false(snap_name_valid("a/b"));
	assert_false(snap_name_valid(""));
	assert_true(snap_name_valid("a.B_c-9"));
	{
		/* The longest name whose ".tmp-NAME" is still a file name. */
		char longest[SNAP_NAME_MAX + 2];

		memset(longest, 'n', sizeof(longest));
		longest[SNAP_SNAPSHOT_NAME_MAX] = '\0';
		assert_true(snap_name_valid(longest));
		longest[SNAP_SNAPSHOT_NAME_MAX] = 'n';
		longest[SNAP_SNAPSHOT_NAME_MAX + 1] = '\0';
		assert_false(snap_name_valid(longest));
		assert_string_equal(snap_name_problem(longest), "name too long (max 250)");
		longest[SNAP_NAME_MAX + 1] = '\0';
		assert_string_equal(snap_name_problem(longest), "name too long (max 250)");
		assert_null(snap_name_problem("-x"));
		assert_non_null(snap_name_problem("a b"));
		assert_non_null(snap_name_problem(".x"));
	}
}

/* The session's credential and owner uid ride in the fixed part; a
 * manifest without them (older) decodes with no flags; unknown flags and the
 * bytes still reserved are refused. */
static void test_manifest_credential(void **state)
{
	struct snap_manifest m, d;
	struct snap_buf b = {0};

	(void)state;
	manifest_sample(&m);
	assert_int_equal(snap_manifest_encode(&m, &b), 0);
	assert_int_equal(snap_manifest_decode(b.data, b.len, &d), 0);
	assert_int_equal(d.auth_flags, 0);
	snap_buf_free(&b);
	m.auth_flags = SNAP_AUTH_CREDENTIAL | SNAP_AUTH_OWNER_UID;
	m.owner_uid = 1000;
	for (unsigned i = 0; i < SNAP_CREDENTIAL_BYTES; i++)
		m.credential[i] = (uint8_t)(0xa0 + i);
	assert_int_equal(snap_manifest_encode(&m, &b), 0);
	assert_memory_equal(b.data + 168, m.credential, SNAP_CREDENTIAL_BYTES);
	assert_int_equal(le32_get(b.data + 200), 1000);
	assert_int_equal(le32_get(b.data + 204), 3);
	assert_int_equal(snap_manifest_decode(b.data, b.len, &d), 0);
	assert_int_equal(d.auth_flags, 3);
	assert_int_equal(d.owner_uid, 1000);
	assert_memory_equal(d.credential, m.credential, SNAP_CREDENTIAL_BYTES);
	b.data[204] |= 0x4;
	trailer_fix(b.data, b.len);
	assert_int_equal(snap_manifest_decode(b.data, b.len, &d), -EBADMSG);
	b.data[204] &= ~0x4;
	b.data[210] = 1;
	trailer_fix(b.data, b.len);
	assert_int_equal(snap_manifest_decode(b.data, b.len, &d), -EBADMSG);
	snap_buf_free(&b);
	/* Unflagged fields are not written, whatever the struct holds. */
	m.auth_flags = SNAP_AUTH_OWNER_UID;
	assert_int_equal(snap_manifest_encode(&m, &b), 0);
	for (unsigned i = 0; i < SNAP_CREDENTIAL_BYTES; i++)
		assert_int_equal(b.data[168 + i], 0);
	snap_buf_free(&b);
}

static void test_chunk_list(void **state)
{
	struct snap_chunk_ref c1[3], c2[1];
	struct snap_region regs[2] = {
		{ .addr = 0x7f0000000000ull, .size = 2 * 65536 + 1, .flags = 3, .chunk_count = 3, .chunks = c1 },
		{ .addr = 0x1000, .size = 100, .flags = 0, .chunk_count = 1, .chunks = c2 },
	};
	struct snap_chunk_list cl = { .chunk_size = 65536, .region_count = 2, .chunk_count = 4, .regions = regs };
	struct snap_chunk_list d;
	struct snap_buf b = {0};
	uint8_t *copy;

	(void)state;
	memset(c1, 0, sizeof(c1));
	memset(c2, 0, sizeof(c2));
	snap_hash128("abc", 3, c1[0].hash);
	c1[0].stored_size = 1000;
	c1[0].device_hash = 0x1122334455667788ull;
	c1[1].flags = SNAP_CHUNK_ZERO;
	snap_hash128("def", 3, c1[2].hash);
	c1[2].stored_size = 1;
	c1[2].flags = SNAP_CHUNK_FROM_PARENT;
	snap_hash128("ghi", 3, c2[0].hash);
	c2[0].stored_size = 100;
	assert_int_equal(snap_chunk_list_encode(&cl, &b), 0);
	assert_int_equal(b.len, 40 + 2 * 32 + 4 * 32 + 16);
	assert_int_equal(snap_chunk_list_decode(b.data, b.len, &d), 0);
	assert_int_equal(d.regions[0].addr, regs[0].addr);
	assert_int_equal(d.regions[0].chunks[0].device_hash, 0x1122334455667788ull);
	assert_int_equal(d.regions[0].chunks[1].flags, SNAP_CHUNK_ZERO);
	assert_int_equal(snap_region_chunk_bytes(&d.regions[0], 65536, 2), 1);
	assert_int_equal(snap_region_chunk_bytes(&d.regions[1], 65536, 0), 100);
	assert_memory_equal(d.regions[1].chunks[0].hash, c2[0].hash, 16);
	snap_chunk_list_free(&d);

	for (size_t n = 0; n < b.len; n++)
		assert_int_not_equal(snap_chunk_list_decode(b.data, n, &d), 0);
	copy = malloc(b.len);
	/* Structural lies under a valid checksum: huge counts, a chunk count
	 * that does not match the size, a zero chunk with bytes, a region that
	 * wraps the address space. */
	const struct { size_t off; uint64_t v; int wide; } lies[] = {
		{ 16, 1ull << 40, 1 }, { 24, 1ull << 40, 1 }, { 24, 3, 1 },
		{ 40 + 24, 2, 1 }, { 40 + 24, 0xffffffffffffffffull, 1 },
		{ 40 + 32 + 32 + 24, 5, 0 }, { 40 + 32 + 28, 0x80, 0 },
		{ 40, 0xffffffffffff0000ull, 1 }, { 12, 100, 0 },
	};
	for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
		memcpy(copy, b.data, b.len);
		if (lies[i].wide)
			le64_put(copy + lies[i].off, lies[i].v);
		else
			le32_put(copy + lies[i].off, (uint32_t)lies[i].v);
		trailer_fix(copy, b.len);
		assert_int_equal(snap_chunk_list_decode(copy, b.len, &d), -EBADMSG);
	}
	free(copy);
	snap_buf_free(&b);
}

static void test_frame_and_index(void **state)
{
	struct snap_frame f = { .codec = SNAP_CODEC_ZSTD, .raw_size = 4096, .stored_size = 100 }, d;
	uint8_t hdr[SNAP_FRAME_HEADER_BYTES], body[100];
	struct snap_index_entry e[2];
	struct snap_index idx = { .pack_id = 7, .pack_bytes = 32 + 2 * (48 + 100), .count = 2, .entries = e }, di;
	struct snap_buf b = {0};

	(void)state;
	memset(body, 0x5a, sizeof(body));
	snap_hash128("x", 1, f.hash);
	f.stored_xxh64 = XXH3_64bits(body, sizeof(body));
	snap_frame_encode(&f, hdr);
	assert_int_equal(snap_frame_decode(hdr, sizeof(hdr), &d), 0);
	assert_int_equal(d.raw_size, 4096);
	assert_memory_equal(d.hash, f.hash, 16);
	assert_int_equal(snap_frame_body_check(&d, body, sizeof(body)), 0);
	body[50] ^= 1;
	assert_int_equal(snap_frame_body_check(&d, body, sizeof(body)), -EBADMSG);
	assert_int_equal(snap_frame_body_check(&d, body, 99), -EBADMSG);
	for (size_t i = 0; i < sizeof(hdr); i++) {
		hdr[i] ^= 4;
		assert_int_equal(snap_frame_decode(hdr, sizeof(hdr), &d), -EBADMSG);
		hdr[i] ^= 4;
	}
	assert_int_equal(snap_frame_decode(hdr, sizeof(hdr) - 1, &d), -EBADMSG);
	/* Raw frames must store exactly their raw size. */
	f.codec = SNAP_CODEC_RAW;
	snap_frame_encode(&f, hdr);
	assert_int_equal(snap_frame_decode(hdr, sizeof(hdr), &d), -EBADMSG);
	f.codec = 9;
	snap_frame_encode(&f, hdr);
	assert_int_equal(snap_frame_decode(hdr, sizeof(hdr), &d), -EBADMSG);

	memset(e, 0, sizeof(e));
	snap_hash128("a", 1, e[0].hash);
	e[0].offset = 32;
	e[0].raw_size = 4096;
	e[0].stored_size = 100;
	snap_hash128("b", 1, e[1].hash);
	e[1].offset = 32 + 148;
	e[1].raw_size = 100;
	e[1].stored_size = 100;
	assert_int_equal(snap_index_encode(&idx, &b), 0);
	assert_int_equal(snap_index_decode(b.data, b.len, &di), 0);
	assert_int_equal(di.count, 2);
	assert_int_equal(di.entries[1].offset, 32 + 148);
	free(di.entries);
	for (size_t n = 0; n < b.len; n++)
		assert_int_not_equal(snap_index_decode(b.data, n, &di), 0);
	snap_buf_free(&b);
	/* An entry past the end of the pack. */
	e[1].offset = 32 + 149;
	assert_int_equal(snap_index_encode(&idx, &b), 0);
	assert_int_equal(snap_index_decode(b.data, b.len, &di), -EBADMSG);
	snap_buf_free(&b);
}

/* A writer's progress log: one record of each kind, chained. */
static size_t progress_sample(struct snap_buf *b, struct snap_progress_record *recs)
{
	uint64_t sum = 0;

	memset(recs, 0, 4 * sizeof(*recs));
	recs[0].type = SNAP_PROGRESS_BEGIN;
	recs[0].begin.chunk_size = 1u << 16;
	recs[0].begin.driver_version = 13000;
	recs[0].begin.auth_flags = SNAP_AUTH_CREDENTIAL;
	memset(recs[0].begin.credential, 0xc5, SNAP_CREDENTIAL_BYTES);
	memcpy(recs[0].begin.device_uuid, "0123456789abcdef", 16);
	strcpy(recs[0].begin.name, "r2");
	strcpy(recs[0].begin.parent, "r1");
	strcpy(recs[0].begin.session_id, "session-1");
	strcpy(recs[0].begin.device_name, "sim0");
	recs[1].type = SNAP_PROGRESS_REGION;
	recs[1].region = (struct snap_region){ .addr = 0x200000000000ull, .size = 3u << 16, .flags = 2 };
	recs[2].type = SNAP_PROGRESS_CHUNK;
	recs[2].chunk = (struct snap_progress_chunk){ .region = 0, .kind = SNAP_PROGRESS_CHUNK_STORED, .index = 2,
						      .device_hash = 77, .pack_id = 5, .offset = 4096,
						      .stored_size = 1000 };
	memset(recs[2].chunk.hash, 0x3c, SNAP_HASH_BYTES);
	recs[3].type = SNAP_PROGRESS_COMMIT;
	recs[3].commit_regions = 1;
	recs[3].commit_chunks = 1;
	for (int i = 0; i < 4; i++)
		assert_int_equal(snap_progress_record_encode(&recs[i], &sum, b), 0);
	return b->len;
}

static void test_progress_log(void **state)
{
	struct snap_progress_record recs[4], got;
	struct snap_buf b = { 0 };
	uint8_t hdr[SNAP_PROGRESS_HEADER_BYTES];
	size_t len, off = 0, used, first;
	uint64_t sum = 0, next;

	(void)state;
	snap_progress_header_encode(hdr);
	assert_int_equal(snap_progress_header_decode(hdr, sizeof(hdr)), 0);
	hdr[0] ^= 1;
	assert_int_equal(snap_progress_header_decode(hdr, sizeof(hdr)), -EBADMSG);
	hdr[0] ^= 1;
	hdr[12] = 1;
	assert_int_equal(snap_progress_header_decode(hdr, sizeof(hdr)), -EBADMSG);
	len = progress_sample(&b, recs);
	/* Each record decodes back, chained on the one before. */
	for (int i = 0; i < 4; i++) {
		assert_int_equal(snap_progress_record_decode(b.data + off, len - off, sum, &got, &used, &next), 0);
		assert_int_equal(got.type, recs[i].type);
		off += used;
		sum = next;
	}
	assert_int_equal(off, len);
	assert_int_equal(got.commit_chunks, 1);
	assert_int_equal(snap_progress_record_decode(b.data, len, 0, &got, &used, &next), 0);
	assert_string_equal(got.begin.name, "r2");
	assert_string_equal(got.begin.parent, "r1");
	assert_string_equal(got.begin.device_name, "sim0");
	assert_memory_equal(got.begin.credential, recs[0].begin.credential, SNAP_CREDENTIAL_BYTES);
	first = used;
	/* The second record needs the first's sum: a record lost or moved breaks the chain. */
	assert_int_equal(snap_progress_record_decode(b.data + first, len - first, 0, &got, &used, &next), -EBADMSG);
	/* A record cut anywhere is not one yet: more may come. */
	for (size_t cut = 0; cut < first; cut++)
		assert_int_equal(snap_progress_record_decode(b.data, cut, 0, &got, &used, &next), -EAGAIN);
	/* Every flipped byte is refused (a flipped length may instead ask
	 * for bytes that never come: refused once the writer ended). */
	for (size_t i = 0; i < first; i++) {
		int rc;

		b.data[i] ^= 0x5a;
		rc = snap_progress_record_decode(b.data, len, 0, &got, &used, &next);
		if (i >= 4 && i < 8)
			assert_true(rc == -EBADMSG || rc == -EAGAIN);
		else
			assert_int_equal(rc, -EBADMSG);
		b.data[i] ^= 0x5a;
	}
	snap_buf_free(&b);
}

static void bad_name(struct snap_progress_record *r) { strcpy(r->begin.name, ".tmp-x"); }
static void small_chunk(struct snap_progress_record *r) { r->begin.chunk_size = 512; }
static void unknown_auth(struct snap_progress_record *r) { r->begin.auth_flags = 0x80; }
static void empty_region(struct snap_progress_record *r) { r->region.size = 0; }
static void wrapping_region(struct snap_progress_record *r) { r->region.addr = ~0ull - 4; }
static void zero_with_hash(struct snap_progress_record *r)
{
	r->chunk.kind = SNAP_PROGRESS_CHUNK_ZERO;
	r->chunk.pack_id = r->chunk.offset = r->chunk.stored_size = 0;
}
static void stored_nowhere(struct snap_progress_record *r) { r->chunk.pack_id = 0; }
static void stored_in_header(struct snap_progress_record *r) { r->chunk.offset = 8; }
static void parent_placed(struct snap_progress_record *r) { r->chunk.kind = SNAP_PROGRESS_CHUNK_PARENT; }

/* Records that carry a valid sum but say what no writer writes. */
static void test_progress_refused(void **state)
{
	static const struct {
		int base;       /* progress_sample's record it mutates */
		void (*mutate)(struct snap_progress_record *r);
	} cases[] = {
		{ 0, bad_name }, { 0, small_chunk }, { 0, unknown_auth }, { 1, empty_region },
		{ 1, wrapping_region }, { 2, zero_with_hash }, { 2, stored_nowhere }, { 2, stored_in_header },
		{ 2, parent_placed },
	};
	struct snap_progress_record recs[4], r, got;
	struct snap_buf b = { 0 };
	uint8_t raw[SNAP_PROGRESS_RECORD_HEAD_BYTES + 8] = { 0 };
	size_t used;
	uint64_t sum, next;

	(void)state;
	progress_sample(&b, recs);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		r = recs[cases[i].base];
		cases[i].mutate(&r);
		sum = 0;
		b.len = 0;
		assert_int_equal(snap_progress_record_encode(&r, &sum, &b), 0);
		assert_int_equal(snap_progress_record_decode(b.data, b.len, 0, &got, &used, &next), -EBADMSG);
	}
	/* What cannot be written is not. */
	r = recs[2];
	r.chunk.kind = 3;
	assert_int_equal(snap_progress_record_encode(&r, &sum, &b), -EINVAL);
	/* A body longer than any record's, or of an unknown type. */
	raw[0] = SNAP_PROGRESS_CHUNK;
	raw[5] = 0x10;  /* 4096 bytes */
	assert_int_equal(snap_progress_record_decode(raw, sizeof(raw), 0, &got, &used, &next), -EBADMSG);
	raw[0] = 9;
	raw[5] = 0;
	assert_int_equal(snap_progress_record_decode(raw, sizeof(raw), 0, &got, &used, &next), -EBADMSG);
	snap_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_manifest),
		cmocka_unit_test(test_manifest_credential),
		cmocka_unit_test(test_chunk_list),
		cmocka_unit_test(test_frame_and_index),
		cmocka_unit_test(test_progress_log),
		cmocka_unit_test(test_progress_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
