/* Fuzz target for the snapshot store's decoders: manifest, chunk list, pack
 * index, pack header, frame header + body, journal header, and a writer's
 * progress log (its header, then its chained records as a follower reads
 * them).
 *
 * Input: one flags byte, then the bytes of a file.  Flag bit 0 re-seals the
 * XXH3-128 trailer over the mutated bytes first, so mutations get past the
 * checksum and reach the structure checks behind it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "snap_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* As snap_migrate_snapshot_follow reads a log: record after record, each
 * chained on the one before, until one is damaged or cut. */
static void progress_decode(const uint8_t *buf, size_t len)
{
	struct snap_progress_record r;
	size_t off = SNAP_PROGRESS_HEADER_BYTES, used;
	uint64_t sum = 0, next;

	if (snap_progress_header_decode(buf, len))
		return;
	while (off < len && snap_progress_record_decode(buf + off, len - off, sum, &r, &used, &next) == 0) {
		/* A record lies inside what was read, and its strings are bounded. */
		if (used > len - off || used < SNAP_PROGRESS_RECORD_HEAD_BYTES + SNAP_PROGRESS_SUM_BYTES)
			abort();
		if (r.type == SNAP_PROGRESS_BEGIN && (strlen(r.begin.name) > SNAP_NAME_MAX ||
						      strlen(r.begin.session_id) > SNAP_NAME_MAX))
			abort();
		off += used;
		sum = next;
	}
}

static void decode_all(const uint8_t *buf, size_t len)
{
	struct snap_manifest m;
	struct snap_chunk_list cl;
	struct snap_index idx;
	struct snap_frame f;
	uint64_t id;

	if (snap_manifest_decode(buf, len, &m) == 0) {
		/* Decoded strings are NUL-terminated and bounded. */
		if (strlen(m.name) > SNAP_NAME_MAX || strlen(m.device_name) > SNAP_NAME_MAX)
			abort();
	}
	if (snap_chunk_list_decode(buf, len, &cl) == 0) {
		for (uint64_t i = 0; i < cl.region_count; i++) {
			const struct snap_region *r = &cl.regions[i];
			for (uint64_t c = 0; c < r->chunk_count; c++) {
				/* Every chunk's size is within the chunk size. */
				if (snap_region_chunk_bytes(r, cl.chunk_size, c) > cl.chunk_size)
					abort();
			}
		}
		snap_chunk_list_free(&cl);
	}
	if (snap_index_decode(buf, len, &idx) == 0) {
		for (uint64_t i = 0; i < idx.count; i++)
			if (idx.entries[i].offset > idx.pack_bytes)
				abort();
		free(idx.entries);
	}
	if (snap_frame_decode(buf, len, &f) == 0 && len >= SNAP_FRAME_HEADER_BYTES) {
		size_t body = len - SNAP_FRAME_HEADER_BYTES;
		snap_frame_body_check(&f, buf + SNAP_FRAME_HEADER_BYTES,
				      body < f.stored_size ? body : f.stored_size);
	}
	snap_pack_header_decode(buf, len, &id);
	snap_journal_header_decode(buf, len);
	progress_decode(buf, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy;

	if (size < 1)
		return 0;
	/* An exact-size copy, so reads past the end are caught by ASan. */
	copy = malloc(size - 1 ? size - 1 : 1);
	if (!copy)
		return 0;
	memcpy(copy, data + 1, size - 1);
	if ((data[0] & 1) && size - 1 >= SNAP_TRAILER_BYTES)
		snap_hash128(copy, size - 1 - SNAP_TRAILER_BYTES,
			     copy + size - 1 - SNAP_TRAILER_BYTES);
	decode_all(copy, size - 1);
	free(copy);
	return 0;
}
