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

/* The region held at @addr, of @size, or NULL. */
const struct snap_region *checkpoint_held_find(const struct checkpoint *ck, uint64_t addr, uint64_t size)
{
	const struct snap_chunk_list *h = ck->held;
	uint64_t lo = 0, hi = h ? h->region_count : 0;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (h->regions[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!h || lo == h->region_count || h->regions[lo].addr != addr || h->regions[lo].size != size)
		return NULL;
	return &h->regions[lo];
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

	if (!h)
		return 0;
	for (uint64_t i = 0; i < h->region_count; i++) {
		struct snap_region *r = &h->regions[i];
		bool wanted = false;

		for (uint64_t k = 0; k < cl->region_count && !wanted; k++)
			wanted = cl->regions[k].addr == r->addr && cl->regions[k].size == r->size &&
				 region_prefilled_kind(saved, r->addr);
		if (wanted) {
			h->regions[kept++] = *r;
			continue;
		}
		struct arena *a = exec_arena_of(ck->ex, r->addr, NULL);

		if (!a || arena_free(a, r->addr) != CUDA_SUCCESS) {
			pr_err("prepared memory at 0x%llx cannot be unmapped", (unsigned long long)r->addr);
			return -EIO;
		}
		free(r->chunks);
	}
	h->region_count = kept;
	return 0;
}

/* Region @r is mapped now, its content unknown. */
static int held_record_add(struct checkpoint *ck, const struct snap_region *r)
{
	struct snap_chunk_list *h = ck->held;
	void *grown;

	if (!h) {
		h = ck->held = calloc(1, sizeof(*h));
		if (!h)
			return -ENOMEM;
	}
	grown = realloc(h->regions, (h->region_count + 1) * sizeof(*h->regions));
	if (!grown)
		return -ENOMEM;
	h->regions = grown;
	h->regions[h->region_count++] = (struct snap_region){ .addr = r->addr, .size = r->size };
	qsort(h->regions, h->region_count, sizeof(*h->regions), region_addr_cmp);
	return 0;
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
	ret = checkpoint_held_trim(ck, snap.journal, cl);
	for (uint64_t i = 0; i < cl->region_count && !ret; i++) {
		const struct snap_region *r = &cl->regions[i];
		struct arena *a;

		skip[i] = !region_prefilled_kind(snap.journal, r->addr);
		if (skip[i] || checkpoint_held_find(ck, r->addr, r->size))
			continue;
		a = exec_arena_of(ex, r->addr, NULL);
		if (!a || arena_alloc_at(a, r->addr, r->size) != CUDA_SUCCESS) {
			snprintf(err, errlen, "cannot map 0x%llx+%llu", (unsigned long long)r->addr,
				 (unsigned long long)r->size);
			ret = -ENOMEM;
			break;
		}
		/* Mapped: recorded below even if a later one fails. */
		if (held_record_add(ck, r))
			ret = -ENOMEM;
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
