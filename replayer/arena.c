#define LOG_PREFIX "arena: "
#include "arena.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Allocations are kept sorted by address; free space is the gaps between
 * them, searched first-fit. Sessions hold thousands of allocations at most,
 * so arrays beat trees here. */
struct arena {
	struct backend *be;
	CUdevice device;
	uint64_t base, size, granularity;
	uint64_t mapped;
	uint64_t next_id;
	struct arena_alloc *allocs;
	unsigned count, cap;
};

static uint64_t round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

int arena_open(struct backend *be, CUdevice device, uint64_t base, uint64_t size,
	       struct arena **out)
{
	CUmemAllocationProp prop = { 0 };
	struct arena *a;
	CUdeviceptr got = 0;
	size_t gran = 0;
	CUresult res;

	if (!be->cuMemAddressReserve || !be->cuMemCreate || !be->cuMemMap ||
	    !be->cuMemSetAccess || !be->cuMemGetAllocationGranularity)
		return -ENOTSUP;
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = device;
	res = be->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	if (res != CUDA_SUCCESS || !gran) {
		pr_err("no allocation granularity for device %d (error %d)", device, res);
		return -EIO;
	}
	if (base % gran || size % gran) {
		pr_err("arena 0x%llx+0x%llx is not aligned to the granularity 0x%zx",
		       (unsigned long long)base, (unsigned long long)size, gran);
		return -EINVAL;
	}
	res = be->cuMemAddressReserve(&got, size, gran, base, 0);
	if (res != CUDA_SUCCESS)
		return -ENOMEM;
	if (got != base) {
		pr_err("arena wanted at 0x%llx, the driver gave 0x%llx",
		       (unsigned long long)base, (unsigned long long)got);
		be->cuMemAddressFree(got, size);
		return -EADDRINUSE;
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		be->cuMemAddressFree(got, size);
		return -ENOMEM;
	}
	a->be = be;
	a->device = device;
	a->base = base;
	a->size = size;
	a->granularity = gran;
	a->next_id = 1;
	*out = a;
	return 0;
}

static void alloc_unmap(struct arena *a, struct arena_alloc *al)
{
	a->be->cuMemUnmap(al->addr, al->mapped);
	a->be->cuMemRelease(al->mem);
	a->mapped -= al->mapped;
}

void arena_close(struct arena *a)
{
	if (!a)
		return;
	for (unsigned i = 0; i < a->count; i++)
		alloc_unmap(a, &a->allocs[i]);
	a->be->cuMemAddressFree(a->base, a->size);
	free(a->allocs);
	free(a);
}

/* Index of the first allocation with addr >= @addr. */
static unsigned lower_bound(const struct arena *a, uint64_t addr)
{
	unsigned lo = 0, hi = a->count;

	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;

		if (a->allocs[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static CUresult alloc_map(struct arena *a, uint64_t addr, uint64_t size, unsigned at)
{
	CUmemAllocationProp prop = { 0 };
	CUmemAccessDesc access = { 0 };
	CUmemGenericAllocationHandle mem;
	uint64_t mapped = round_up(size ? size : 1, a->granularity);
	CUresult res;

	if (a->count == a->cap) {
		unsigned cap = a->cap ? a->cap * 2 : 64;
		struct arena_alloc *n = realloc(a->allocs, cap * sizeof(*n));

		if (!n)
			return CUDA_ERROR_OUT_OF_MEMORY;
		a->allocs = n;
		a->cap = cap;
	}
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = a->device;
	res = a->be->cuMemCreate(&mem, mapped, &prop, 0);
	if (res != CUDA_SUCCESS)
		return res;
	res = a->be->cuMemMap(addr, mapped, 0, mem, 0);
	if (res != CUDA_SUCCESS)
		goto out_release;
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	res = a->be->cuMemSetAccess(addr, mapped, &access, 1);
	if (res != CUDA_SUCCESS)
		goto out_unmap;
	memmove(&a->allocs[at + 1], &a->allocs[at], (a->count - at) * sizeof(*a->allocs));
	a->allocs[at] = (struct arena_alloc){ addr, size, mapped, a->next_id++, mem };
	a->count++;
	a->mapped += mapped;
	return CUDA_SUCCESS;
out_unmap:
	a->be->cuMemUnmap(addr, mapped);
out_release:
	a->be->cuMemRelease(mem);
	return res;
}

CUresult arena_alloc(struct arena *a, uint64_t size, uint64_t *addr)
{
	uint64_t need, cursor = a->base;

	if (size > a->size)
		return CUDA_ERROR_OUT_OF_MEMORY;
	need = round_up(size ? size : 1, a->granularity);
	for (unsigned i = 0; i <= a->count; i++) {
		uint64_t end = i < a->count ? a->allocs[i].addr : a->base + a->size;

		if (end - cursor >= need) {
			CUresult res = alloc_map(a, cursor, size, i);

			if (res == CUDA_SUCCESS)
				*addr = cursor;
			return res;
		}
		if (i < a->count)
			cursor = a->allocs[i].addr + a->allocs[i].mapped;
	}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult arena_alloc_at(struct arena *a, uint64_t addr, uint64_t size)
{
	uint64_t need = round_up(size ? size : 1, a->granularity);
	unsigned at;

	if (addr < a->base || addr % a->granularity || need > a->size ||
	    addr - a->base > a->size - need)
		return CUDA_ERROR_INVALID_VALUE;
	at = lower_bound(a, addr);
	if (at < a->count && a->allocs[at].addr < addr + need)
		return CUDA_ERROR_INVALID_VALUE;
	if (at > 0 && a->allocs[at - 1].addr + a->allocs[at - 1].mapped > addr)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_map(a, addr, size, at);
}

CUresult arena_free(struct arena *a, uint64_t addr)
{
	unsigned at = lower_bound(a, addr);

	if (at == a->count || a->allocs[at].addr != addr)
		return CUDA_ERROR_INVALID_VALUE;
	alloc_unmap(a, &a->allocs[at]);
	memmove(&a->allocs[at], &a->allocs[at + 1], (a->count - at - 1) * sizeof(*a->allocs));
	a->count--;
	return CUDA_SUCCESS;
}

const struct arena_alloc *arena_find(const struct arena *a, uint64_t addr)
{
	unsigned at = lower_bound(a, addr + 1);
	const struct arena_alloc *al;

	if (at == 0)
		return NULL;
	al = &a->allocs[at - 1];
	return addr - al->addr < (al->size ? al->size : 1) ? al : NULL;
}

bool arena_range_valid(const struct arena *a, uint64_t addr, uint64_t len)
{
	const struct arena_alloc *al = arena_find(a, addr);

	return al && len <= al->size - (addr - al->addr);
}

uint64_t arena_base(const struct arena *a)
{
	return a->base;
}

uint64_t arena_size(const struct arena *a)
{
	return a->size;
}

uint64_t arena_bytes_mapped(const struct arena *a)
{
	return a->mapped;
}

unsigned arena_count(const struct arena *a)
{
	return a->count;
}

const struct arena_alloc *arena_at(const struct arena *a, unsigned i)
{
	return i < a->count ? &a->allocs[i] : NULL;
}
