#define LOG_PREFIX "arena: "
#include "arena.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Allocations are kept sorted by address; free space is the gaps between
 * them, searched first-fit. Sessions hold thousands of allocations at most,
 * so arrays beat trees here. */
#define ARENA_PEERS_MAX 16

struct arena {
	struct backend *be;
	CUdevice device;
	CUdevice peers[ARENA_PEERS_MAX];  /* other devices given access to every mapping */
	unsigned peer_count;
	bool exportable;                /* cuMemCreate asks for a POSIX fd handle */
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
	/* Memory another session may open (cuIpcGetMemHandle) must be
	 * exportable; a backend that cannot do it makes the arena plain. */
	a->exportable = backend_has(be, (const void *)be->cuMemExportToShareableHandle) &&
			backend_has(be, (const void *)be->cuMemImportFromShareableHandle);
	*out = a;
	return 0;
}

static void alloc_unmap(struct arena *a, struct arena_alloc *al)
{
	a->be->cuMemUnmap(al->addr, al->mapped);
	a->be->cuMemRelease(al->mem);
	if (!al->imported)
		a->mapped -= al->mapped;
}

/* Read/write access for the arena's device and every peer given access. */
static CUresult alloc_access(struct arena *a, uint64_t addr, uint64_t mapped)
{
	CUmemAccessDesc access[1 + ARENA_PEERS_MAX] = { 0 };

	for (unsigned i = 0; i <= a->peer_count; i++) {
		access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		access[i].location.id = i ? a->peers[i - 1] : a->device;
		access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	}
	return a->be->cuMemSetAccess(addr, mapped, access, 1 + a->peer_count);
}

/* Map @mem (owned by the caller until success) at @addr, recorded at @at. */
static CUresult alloc_insert(struct arena *a, uint64_t addr, uint64_t size, uint64_t mapped,
			     CUmemGenericAllocationHandle mem, bool imported, unsigned at)
{
	CUresult res;

	if (a->count == a->cap) {
		unsigned cap = a->cap ? a->cap * 2 : 64;
		struct arena_alloc *n = realloc(a->allocs, cap * sizeof(*n));

		if (!n)
			return CUDA_ERROR_OUT_OF_MEMORY;
		a->allocs = n;
		a->cap = cap;
	}
	res = a->be->cuMemMap(addr, mapped, 0, mem, 0);
	if (res != CUDA_SUCCESS)
		return res;
	res = alloc_access(a, addr, mapped);
	if (res != CUDA_SUCCESS) {
		a->be->cuMemUnmap(addr, mapped);
		return res;
	}
	memmove(&a->allocs[at + 1], &a->allocs[at], (a->count - at) * sizeof(*a->allocs));
	a->allocs[at] = (struct arena_alloc){ addr, size, mapped, a->next_id++, mem, imported };
	a->count++;
	if (!imported)
		a->mapped += mapped;
	return CUDA_SUCCESS;
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
	CUmemGenericAllocationHandle mem;
	uint64_t mapped = round_up(size ? size : 1, a->granularity);
	CUresult res;

	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = a->device;
	if (a->exportable) {
		prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		res = a->be->cuMemCreate(&mem, mapped, &prop, 0);
		if (res == CUDA_ERROR_NOT_SUPPORTED || res == CUDA_ERROR_INVALID_VALUE) {
			pr_warn("device %d cannot export its memory (error %d): IPC is off", a->device, res);
			a->exportable = false;
		}
	}
	if (!a->exportable) {
		prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
		res = a->be->cuMemCreate(&mem, mapped, &prop, 0);
	}
	if (res != CUDA_SUCCESS)
		return res;
	res = alloc_insert(a, addr, size, mapped, mem, false, at);
	if (res != CUDA_SUCCESS)
		a->be->cuMemRelease(mem);
	return res;
}

/* The first free range of @need bytes: its address and index. */
static bool arena_gap(const struct arena *a, uint64_t need, uint64_t *addr, unsigned *at)
{
	uint64_t cursor = a->base;

	for (unsigned i = 0; i <= a->count; i++) {
		uint64_t end = i < a->count ? a->allocs[i].addr : a->base + a->size;

		if (end - cursor >= need) {
			*addr = cursor;
			*at = i;
			return true;
		}
		if (i < a->count)
			cursor = a->allocs[i].addr + a->allocs[i].mapped;
	}
	return false;
}

CUresult arena_alloc(struct arena *a, uint64_t size, uint64_t *addr)
{
	uint64_t at_addr;
	unsigned at;
	CUresult res;

	if (size > a->size)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!arena_gap(a, round_up(size ? size : 1, a->granularity), &at_addr, &at))
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = alloc_map(a, at_addr, size, at);
	if (res == CUDA_SUCCESS)
		*addr = at_addr;
	return res;
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

int arena_export_fd(struct arena *a, uint64_t addr, int *fd)
{
	unsigned at = lower_bound(a, addr);
	CUresult res;

	if (at == a->count || a->allocs[at].addr != addr || a->allocs[at].imported)
		return -ENOENT;
	if (!a->exportable)
		return -ENOTSUP;
	res = a->be->cuMemExportToShareableHandle(fd, a->allocs[at].mem,
						  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	return res == CUDA_SUCCESS ? 0 : -EIO;
}

CUresult arena_import_fd(struct arena *a, int fd, uint64_t size, uint64_t *addr)
{
	CUmemGenericAllocationHandle mem;
	uint64_t mapped = round_up(size ? size : 1, a->granularity), at_addr;
	unsigned at;
	CUresult res;

	if (size > a->size || !arena_gap(a, mapped, &at_addr, &at))
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = a->be->cuMemImportFromShareableHandle(&mem, (void *)(uintptr_t)fd,
						    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (res != CUDA_SUCCESS)
		return res;
	res = alloc_insert(a, at_addr, size, mapped, mem, true, at);
	if (res != CUDA_SUCCESS) {
		a->be->cuMemRelease(mem);
		return res;
	}
	*addr = at_addr;
	return CUDA_SUCCESS;
}

CUresult arena_peer_add(struct arena *a, CUdevice peer)
{
	CUresult res = CUDA_SUCCESS;

	for (unsigned i = 0; i < a->peer_count; i++)
		if (a->peers[i] == peer)
			return CUDA_SUCCESS;
	if (a->peer_count == ARENA_PEERS_MAX)
		return CUDA_ERROR_TOO_MANY_PEERS;
	a->peers[a->peer_count++] = peer;
	for (unsigned k = 0; k < a->count && res == CUDA_SUCCESS; k++)
		res = alloc_access(a, a->allocs[k].addr, a->allocs[k].mapped);
	return res;
}

bool arena_exportable(const struct arena *a)
{
	return a->exportable;
}
