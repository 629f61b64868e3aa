/* The destination's prepared worker of a live migration (docs/migration.md,
 * "The prepared worker"): while the source still runs the session, each
 * pre-copy round the destination stores is filled into a worker that has
 * no guest yet, over what the round before left there, so that the restore
 * at the switch has only the last round's difference to write.
 *
 * A prefill maps the snapshot's arena regions at their addresses (not a
 * guest's cuMemMap ranges, which the restore makes whole) and fills them;
 * it recreates no object and writes no journal. What the device then holds
 * is kept in ck->held, in address order: a region whose chunk_count is 0 is
 * mapped with content unknown (its fill failed). checkpoint_restore takes
 * the regions it finds there as they are and fills only chunks that differ.
 */
#define LOG_PREFIX "checkpoint: "
#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "monotonic.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "capture.h"
#include "log.h"
#include "snap_format.h"
#include "snap_reader.h"
#include "tracker.h"

static int region_addr_cmp(const void *a, const void *b)
{
	const struct snap_region *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

const struct snap_region *checkpoint_held_find(const struct checkpoint *ck, uint64_t addr, uint64_t size)
{
	return ck->held ? snap_chunk_list_region_at(ck->held, addr, size) : NULL;
}

void checkpoint_held_free(struct checkpoint *ck)
{
	snap_chunk_list_free(ck->held);
	free(ck->held);
	ck->held = NULL;
}

/* Whether the region of @saved at @addr is one the prefill maps: arena
 * memory, not a guest's cuMemMap. */
static bool region_prefilled_kind(struct tracker *saved, uint64_t addr)
{
	struct tracker_region r;

	return !tracker_region_get(saved, addr, &r) && r.kind <= EXEC_REGION_MANAGED && r.kind != EXEC_REGION_VMM;
}

int checkpoint_held_trim(struct checkpoint *ck, struct tracker *saved, const struct snap_chunk_list *cl)
{
	struct snap_chunk_list *h = ck->held;
	uint64_t kept = 0;
	int ret = 0;

	if (!h)
		return 0;
	for (uint64_t i = 0; i < h->region_count; i++) {
		struct snap_region *r = &h->regions[i];
		struct arena *a;

		/* A snapshot lists its regions in address order (checkpoint_begin);
		 * one found out of it would only be mapped and filled again. */
		if (snap_chunk_list_region_at(cl, r->addr, r->size) && region_prefilled_kind(saved, r->addr)) {
			h->regions[kept++] = *r;
			continue;
		}
		a = exec_arena_of(ck->ex, r->addr, NULL);
		if (!a || arena_free(a, r->addr) != CUDA_SUCCESS) {
			/* Still mapped: it stays listed, so nothing maps over it. */
			pr_err("prepared memory at 0x%llx cannot be unmapped", (unsigned long long)r->addr);
			h->regions[kept++] = *r;
			ret = -EIO;
			continue;
		}
		free(r->chunks);
	}
	h->region_count = kept;
	return ret;
}

/* ck->held as what @cl's regions not skipped hold now (@filled) or only map
 * (content unknown). */
static int held_record(struct checkpoint *ck, const struct snap_chunk_list *cl, const bool *skip, bool filled)
{
	struct snap_chunk_list *h = calloc(1, sizeof(*h));
	uint64_t n = 0;

	if (!h)
		return -ENOMEM;
	h->chunk_size = cl->chunk_size;
	h->regions = calloc(cl->region_count ? cl->region_count : 1, sizeof(*h->regions));
	if (!h->regions) {
		free(h);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < cl->region_count; i++) {
		const struct snap_region *src = &cl->regions[i];
		struct snap_region *dst = &h->regions[n];

		if (skip[i])
			continue;
		*dst = (struct snap_region){ .addr = src->addr, .size = src->size, .flags = src->flags };
		if (filled && src->chunk_count) {
			dst->chunks = malloc(src->chunk_count * sizeof(*dst->chunks));
			if (dst->chunks) {
				memcpy(dst->chunks, src->chunks, src->chunk_count * sizeof(*dst->chunks));
				dst->chunk_count = src->chunk_count;
			}
		}
		n++;
	}
	h->region_count = n;
	qsort(h->regions, n, sizeof(*h->regions), region_addr_cmp);
	checkpoint_held_free(ck);
	ck->held = h;
	return 0;
}

int checkpoint_prefill(struct checkpoint *ck, const char *store_dir, const char *name, char *err, size_t errlen)
{
	struct exec *ex = ck->ex;
	struct checkpoint_saved snap;
	const struct snap_chunk_list *cl;
	struct capture_stats st = { 0 };
	struct capture *capt;
	uint64_t t0 = monotonic_ns();
	bool *skip = NULL;
	int ret;

	err[0] = 0;
	ret = checkpoint_saved_open(&snap, store_dir, name, err, errlen);
	if (!ret)
		ret = checkpoint_target_check(snap.journal, name, &(struct checkpoint_target){
						      .arena_base = arena_base(ex->dev.arena),
						      .arena_size = arena_size(ex->dev.arena),
						      .devices = ex->dev.count, .quota = ex->cfg.quota }, err, errlen);
	if (ret)
		goto out;
	cl = snap_reader_chunk_list(snap.reader);
	skip = calloc(cl->region_count ? cl->region_count : 1, sizeof(*skip));
	if (!skip) {
		ret = -ENOMEM;
		goto out;
	}
	/* What cannot be unmapped stays held as it was; nothing is filled. */
	ret = checkpoint_held_trim(ck, snap.journal, cl);
	if (ret) {
		snprintf(err, errlen, "the round before cannot be unmapped");
		goto out;
	}
	/* skip: the regions not mapped here, which the fill leaves out and
	 * the record of what is held does not list. */
	for (uint64_t i = 0; i < cl->region_count; i++) {
		const struct snap_region *r = &cl->regions[i];
		struct arena *a;

		skip[i] = !region_prefilled_kind(snap.journal, r->addr);
		if (skip[i] || checkpoint_held_find(ck, r->addr, r->size))
			continue;
		a = exec_arena_of(ex, r->addr, NULL);
		if (!a || arena_alloc_at(a, r->addr, r->size) != CUDA_SUCCESS) {
			if (!ret)
				snprintf(err, errlen, "cannot map 0x%llx+%llu", (unsigned long long)r->addr,
					 (unsigned long long)r->size);
			skip[i] = true;
			ret = -ENOMEM;
		}
	}
	if (!ret)
		ret = checkpoint_capture_get(ck, &capt);
	if (!ret)
		ret = capture_fill(capt, snap.reader,
				   &(struct capture_fill_base){ .held = ck->held, .skip = skip }, &st);
	if (ret && !err[0])
		snprintf(err, errlen, "filling device memory failed: %s", strerror(-ret));
	/* What the device holds now: this snapshot, or, after a failure, the
	 * same regions with nothing known of their bytes. */
	if (held_record(ck, cl, skip, !ret) && !ret)
		ret = -ENOMEM;
out:
	if (!ret)
		pr_info("prefilled '%s': %.2f GiB, %.2f GiB of it held already, in %.1f ms", name,
			st.fill_bytes / 1073741824.0, st.fill_bytes_held / 1073741824.0,
			(monotonic_ns() - t0) / 1e6);
	free(skip);
	checkpoint_saved_close(&snap);
	return ret;
}
