/* Device memory of the sim: VMM entry points over mmap and memfd, the table of
 * ranges every device pointer is checked against, copies and memsets.
 *
 * Reservations are PROT_NONE anonymous mappings at the caller's hint; a
 * cuMemCreate allocation is a memfd counted against the device's total; a
 * mapping is that memfd mapped MAP_SHARED|MAP_FIXED over the reservation, and
 * cuMemSetAccess is mprotect. A pointer outside the table, or without the
 * access it needs, fails the call with CUDA_ERROR_INVALID_VALUE instead of
 * faulting the worker.
 */
#define LOG_PREFIX "sim: "

#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

static size_t sim_page_size(void)
{
	static size_t page;

	if (!page)
		page = (size_t)sysconf(_SC_PAGESIZE);
	return page;
}

static bool sim_aligned(uintptr_t v, size_t a)
{
	return (v & (a - 1)) == 0;
}

int sim_range_add(struct sim *sim, enum sim_range_kind kind, uintptr_t base, size_t size)
{
	struct sim_range *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->kind = kind;
	r->base = base;
	r->size = size;
	r->prot = kind == SIM_RANGE_RESERVED || kind == SIM_RANGE_MAPPED ?
		  PROT_NONE : PROT_READ | PROT_WRITE;
	r->next = sim->ranges;
	sim->ranges = r;
	return 0;
}

static struct sim_range *sim_range_find(struct sim *sim, enum sim_range_kind kind,
					uintptr_t base)
{
	for (struct sim_range *r = sim->ranges; r; r = r->next)
		if (r->kind == kind && r->base == base)
			return r;
	return NULL;
}

void sim_range_remove(struct sim *sim, enum sim_range_kind kind, uintptr_t base)
{
	for (struct sim_range **p = &sim->ranges; *p; p = &(*p)->next)
		if ((*p)->kind == kind && (*p)->base == base) {
			struct sim_range *r = *p;

			*p = r->next;
			free(r);
			return;
		}
}

/* The range of @kind containing @addr, or NULL. */
static struct sim_range *sim_range_at(struct sim *sim, enum sim_range_kind kind,
				      uintptr_t addr)
{
	for (struct sim_range *r = sim->ranges; r; r = r->next)
		if (r->kind == kind && addr >= r->base && addr - r->base < r->size)
			return r;
	return NULL;
}

/* Does [base, base + size) overlap a range of @kind? */
static bool sim_range_overlaps(struct sim *sim, enum sim_range_kind kind,
			       uintptr_t base, size_t size)
{
	for (struct sim_range *r = sim->ranges; r; r = r->next)
		if (r->kind == kind && base < r->base + r->size && r->base < base + size)
			return true;
	return false;
}

bool sim_range_device_ok(struct sim *sim, uintptr_t ptr, size_t bytes, int prot)
{
	static const enum sim_range_kind kinds[] = {
		SIM_RANGE_MAPPED, SIM_RANGE_LINEAR, SIM_RANGE_GLOBAL, SIM_RANGE_HOST,
	};
	uintptr_t end;

	if (!ptr || __builtin_add_overflow(ptr, bytes, &end))
		return false;
	/* Adjacent mappings may be covered by one copy, as on the driver. */
	while (ptr < end) {
		struct sim_range *r = NULL;

		for (unsigned k = 0; k < sizeof(kinds) / sizeof(kinds[0]) && !r; k++)
			r = sim_range_at(sim, kinds[k], ptr);
		if (!r || (r->prot & prot) != prot)
			return false;
		ptr = r->base + r->size;
	}
	return true;
}

bool sim_range_host_registered(struct sim *sim, uintptr_t ptr, size_t bytes)
{
	struct sim_range *r = sim_range_at(sim, SIM_RANGE_HOST, ptr);

	return r && bytes <= r->size - (ptr - r->base);
}

static struct sim_alloc *sim_alloc_lookup(struct sim *sim, CUmemGenericAllocationHandle h)
{
	for (struct sim_alloc *a = sim->allocs; a; a = a->next)
		if ((CUmemGenericAllocationHandle)(uintptr_t)a == h && !a->released)
			return a;
	return NULL;
}

/* Free the backing once neither the handle nor a mapping holds it. */
static void sim_alloc_put(struct sim *sim, struct sim_alloc *a)
{
	if (!a->released || a->maps)
		return;
	for (struct sim_alloc **p = &sim->allocs; *p; p = &(*p)->next)
		if (*p == a) {
			*p = a->next;
			break;
		}
	if (!a->imported)
		a->dev->used -= a->size;
	close(a->fd);
	free(a);
}

static bool sim_location_ok(struct sim *sim, const CUmemLocation *loc)
{
	return loc->type == CU_MEM_LOCATION_TYPE_DEVICE && loc->id >= 0 &&
	       (unsigned)loc->id < sim->dev_count;
}

CUresult sim_cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
					   CUmemAllocationGranularity_flags option)
{
	struct sim *sim;
	CUresult rc;

	if (!granularity || !prop || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
				      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		rc = CUDA_ERROR_INVALID_VALUE;
	else if (!sim_location_ok(sim, &prop->location))
		rc = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ?
		     CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_INVALID_VALUE;
	else
		*granularity = SIM_GRANULARITY;
	sim_leave(sim);
	return rc;
}

/* mmap @size bytes of PROT_NONE aligned to @align anywhere. */
static void *sim_reserve_anywhere(size_t size, size_t align)
{
	size_t span = size + align;
	uintptr_t p, start;
	void *m;

	m = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	p = (uintptr_t)m;
	start = (p + align - 1) & ~(uintptr_t)(align - 1);
	if (start > p)
		munmap(m, start - p);
	if (p + span > start + size)
		munmap((void *)(start + size), p + span - (start + size));
	return (void *)start;
}

CUresult sim_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				 CUdeviceptr addr, unsigned long long flags)
{
	size_t align = alignment > SIM_GRANULARITY ? alignment : SIM_GRANULARITY;
	struct sim *sim;
	void *m = NULL;
	CUresult rc;

	if (!ptr || !size || flags || (alignment & (alignment - 1)) ||
	    !sim_aligned(size, sim_page_size()) || !sim_aligned(addr, sim_page_size()))
		return CUDA_ERROR_INVALID_VALUE;
	if (size > (1ull << 47))
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	/* The hint is honoured when it is free and aligned, else another
	 * address is chosen: the driver's behaviour. */
	if (addr && sim_aligned(addr, align)) {
		m = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (m == MAP_FAILED) {
			m = NULL;
		} else if ((uintptr_t)m != addr) {
			/* A kernel older than 4.17 took the flag as a hint. */
			munmap(m, size);
			m = NULL;
		}
	}
	if (!m)
		m = sim_reserve_anywhere(size, align);
	if (!m) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (sim_range_add(sim, SIM_RANGE_RESERVED, (uintptr_t)m, size)) {
		munmap(m, size);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*ptr = (CUdeviceptr)(uintptr_t)m;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct sim_range *r;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	r = sim_range_find(sim, SIM_RANGE_RESERVED, (uintptr_t)ptr);
	if (!r || r->size != size || sim_range_overlaps(sim, SIM_RANGE_MAPPED, r->base, r->size)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	munmap((void *)r->base, r->size);
	sim_range_remove(sim, SIM_RANGE_RESERVED, (uintptr_t)ptr);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			 const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct sim_alloc *a = NULL;
	struct sim_dev *dev;
	struct sim *sim;
	CUresult rc;

	if (!handle || !prop || !size || flags || !sim_aligned(size, SIM_GRANULARITY))
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (!sim_location_ok(sim, &prop->location)) {
		rc = CUDA_ERROR_INVALID_DEVICE;
		goto out;
	}
	dev = &sim->devs[prop->location.id];
	if (size > dev->total - dev->used) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	a->fd = memfd_create("tern-sim", MFD_CLOEXEC);
	if (a->fd < 0 || ftruncate(a->fd, (off_t)size) < 0) {
		pr_warn("device memory of %zu bytes: %s", size, strerror(errno));
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_free;
	}
	a->dev = dev;
	a->size = size;
	a->exportable = prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	dev->used += size;
	a->next = sim->allocs;
	sim->allocs = a;
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)a;
	goto out;

out_free:
	if (a->fd >= 0)
		close(a->fd);
	free(a);
out:
	sim_leave(sim);
	return rc;
}

/* Sharing with another process: the allocation's memfd is the shareable
 * handle, as a POSIX file descriptor is the driver's. */
CUresult sim_cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
					  CUmemAllocationHandleType type, unsigned long long flags)
{
	struct sim_alloc *a;
	struct sim *sim;
	CUresult rc;
	int fd;

	if (!shareable || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	a = sim_alloc_lookup(sim, handle);
	if (!a || !a->exportable) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*(int *)shareable = fd;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
					    CUmemAllocationHandleType type)
{
	int src = (int)(intptr_t)os_handle;
	struct sim_alloc *a;
	struct sim *sim;
	struct stat st;
	CUresult rc;

	if (!handle || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	if (fstat(src, &st) || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    !sim_aligned((uintptr_t)st.st_size, SIM_GRANULARITY))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	a = calloc(1, sizeof(*a));
	if (!a) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	a->fd = fcntl(src, F_DUPFD_CLOEXEC, 0);
	if (a->fd < 0) {
		free(a);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	/* The exporter counts it on its device; this process only maps it. */
	a->dev = &sim->devs[0];
	a->size = (size_t)st.st_size;
	a->imported = true;
	a->exportable = true;
	a->next = sim->allocs;
	sim->allocs = a;
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)a;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct sim_alloc *a;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	a = sim_alloc_lookup(sim, handle);
	if (!a) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else {
		a->released = true;
		sim_alloc_put(sim, a);
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
		      CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	uintptr_t base = (uintptr_t)ptr;
	struct sim_range *res, *r;
	struct sim_alloc *a;
	struct sim *sim;
	CUresult rc;
	void *m;

	if (!ptr || !size || flags || !sim_aligned(base, SIM_GRANULARITY) ||
	    !sim_aligned(size, SIM_GRANULARITY) || !sim_aligned(offset, SIM_GRANULARITY))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	a = sim_alloc_lookup(sim, handle);
	res = sim_range_at(sim, SIM_RANGE_RESERVED, base);
	if (!a || offset > a->size || size > a->size - offset || !res ||
	    size > res->size - (base - res->base) ||
	    sim_range_overlaps(sim, SIM_RANGE_MAPPED, base, size)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (sim_range_add(sim, SIM_RANGE_MAPPED, base, size)) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	/* No access until cuMemSetAccess, as on the driver. */
	m = mmap((void *)base, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, (off_t)offset);
	if (m == MAP_FAILED) {
		pr_warn("map %zu bytes at %#lx: %s", size, (unsigned long)base, strerror(errno));
		sim_range_remove(sim, SIM_RANGE_MAPPED, base);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	r = sim_range_find(sim, SIM_RANGE_MAPPED, base);
	r->alloc = a;
	a->maps++;
out:
	sim_leave(sim);
	return rc;
}

/* Do the mappings of [base, base + size) tile it exactly? Lock held. */
static bool sim_mappings_tile(struct sim *sim, uintptr_t base, size_t size)
{
	uintptr_t cur = base, end;

	if (__builtin_add_overflow(base, size, &end))
		return false;
	while (cur < end) {
		struct sim_range *r = sim_range_find(sim, SIM_RANGE_MAPPED, cur);

		if (!r || r->size > end - cur)
			return false;
		cur += r->size;
	}
	return size > 0;
}

CUresult sim_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	uintptr_t cur = (uintptr_t)ptr, end = (uintptr_t)ptr + size;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	if (!sim_mappings_tile(sim, cur, size)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	/* Synchronous in the driver; here it keeps queued work from faulting. */
	sim_all_wait(sim);
	while (cur < end) {
		struct sim_range *r = sim_range_find(sim, SIM_RANGE_MAPPED, cur);
		struct sim_alloc *a = r->alloc;
		size_t len = r->size;

		/* Back to a plain reservation, so the address stays ours. */
		mmap((void *)cur, len, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
		sim_range_remove(sim, SIM_RANGE_MAPPED, cur);
		a->maps--;
		sim_alloc_put(sim, a);
		cur += len;
	}
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
			    size_t count)
{
	uintptr_t cur = (uintptr_t)ptr, end = (uintptr_t)ptr + size;
	struct sim *sim;
	int prot = -1;
	CUresult rc;

	if (!desc || !count)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	for (size_t i = 0; i < count; i++) {
		int p;

		if (!sim_location_ok(sim, &desc[i].location)) {
			rc = desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE ?
			     CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
		switch (desc[i].flags) {
		case CU_MEM_ACCESS_FLAGS_PROT_NONE: p = PROT_NONE; break;
		case CU_MEM_ACCESS_FLAGS_PROT_READ: p = PROT_READ; break;
		case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: p = PROT_READ | PROT_WRITE; break;
		default:
			rc = CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
		/* All devices share one address space here: the widest wins. */
		if (p > prot)
			prot = p;
	}
	if (!sim_aligned(cur, SIM_GRANULARITY) || !sim_mappings_tile(sim, cur, size)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	/* Synchronous in the driver: queued work sees the old access. */
	sim_all_wait(sim);
	if (mprotect((void *)cur, size, prot)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	while (cur < end) {
		struct sim_range *r = sim_range_find(sim, SIM_RANGE_MAPPED, cur);

		r->prot = prot;
		cur += r->size;
	}
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemGetInfo(size_t *free_bytes, size_t *total)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!free_bytes || !total)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc) {
		*free_bytes = ctx->dev->total - ctx->dev->used;
		*total = ctx->dev->total;
	}
	sim_leave(sim);
	return rc;
}

/* Is all of [p, p + bytes) mapped in this process? mincore answers ENOMEM
 * for a hole, without touching (or faulting) the pages. */
static bool sim_host_mapped(uintptr_t p, size_t bytes)
{
	size_t page = sim_page_size();
	uintptr_t start = p & ~(uintptr_t)(page - 1);
	uintptr_t end = p + bytes;
	unsigned char vec[256];

	while (start < end) {
		size_t len = end - start;

		if (len > sizeof(vec) * page)
			len = sizeof(vec) * page;
		if (mincore((void *)start, len, vec))
			return false;
		start += len;
	}
	return true;
}

CUresult sim_cuMemHostRegister(void *p, size_t bytesize, unsigned int flags)
{
	const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
			       CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
	uintptr_t base = (uintptr_t)p, end;
	struct sim *sim;
	CUresult rc;

	if (!p || !bytesize || flags & ~known || __builtin_add_overflow(base, bytesize, &end))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	if (sim_range_overlaps(sim, SIM_RANGE_HOST, base, bytesize)) {
		rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		goto out;
	}
	if (sim_range_overlaps(sim, SIM_RANGE_RESERVED, base, bytesize) ||
	    !sim_host_mapped(base, bytesize)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (sim_range_add(sim, SIM_RANGE_HOST, base, bytesize)) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (flags & CU_MEMHOSTREGISTER_READ_ONLY)
		sim_range_find(sim, SIM_RANGE_HOST, base)->prot = PROT_READ;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemHostUnregister(void *p)
{
	struct sim_range *r;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	r = sim_range_find(sim, SIM_RANGE_HOST, (uintptr_t)p);
	if (!r || r->owned) {
		rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	} else {
		/* Queued copies may still read it. */
		sim_all_wait(sim);
		sim_range_remove(sim, SIM_RANGE_HOST, (uintptr_t)p);
	}
	sim_leave(sim);
	return rc;
}

/* Linear device memory (cuMemAlloc) and pinned host memory (cuMemHostAlloc):
 * anonymous mappings anywhere, in the same range table as the VMM's, so
 * copies check them alike. ternd's own buffers (the snapshot shadow, staging)
 * use them; the guest's memory comes from the arena. */
CUresult sim_cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
	size_t page = sim_page_size(), size;
	struct sim_range *r;
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;
	void *m;

	if (!dptr || !bytesize || bytesize > (1ull << 47))
		return CUDA_ERROR_INVALID_VALUE;
	size = (bytesize + page - 1) & ~(page - 1);
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (rc)
		goto out;
	if (size > ctx->dev->total - ctx->dev->used) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	if (m == MAP_FAILED) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (sim_range_add(sim, SIM_RANGE_LINEAR, (uintptr_t)m, size)) {
		munmap(m, size);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	r = sim_range_find(sim, SIM_RANGE_LINEAR, (uintptr_t)m);
	r->dev = ctx->dev;
	ctx->dev->used += size;
	*dptr = (CUdeviceptr)(uintptr_t)m;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemFree(CUdeviceptr dptr)
{
	struct sim_range *r;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	r = sim_range_find(sim, SIM_RANGE_LINEAR, (uintptr_t)dptr);
	if (!dptr || !r) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	/* Queued copies and kernels may still use it. */
	sim_all_wait(sim);
	r->dev->used -= r->size;
	munmap((void *)r->base, r->size);
	sim_range_remove(sim, SIM_RANGE_LINEAR, (uintptr_t)dptr);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
	const unsigned known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
			       CU_MEMHOSTALLOC_WRITECOMBINED;
	size_t page = sim_page_size(), size;
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;
	void *m;

	if (!pp || !bytesize || bytesize > (1ull << 40) || flags & ~known)
		return CUDA_ERROR_INVALID_VALUE;
	size = (bytesize + page - 1) & ~(page - 1);
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (rc)
		goto out;
	/* Populated now: pinned memory is resident from the start. */
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		 -1, 0);
	if (m == MAP_FAILED) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (sim_range_add(sim, SIM_RANGE_HOST, (uintptr_t)m, size)) {
		munmap(m, size);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	sim_range_find(sim, SIM_RANGE_HOST, (uintptr_t)m)->owned = true;
	*pp = m;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemFreeHost(void *p)
{
	struct sim_range *r;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	r = sim_range_find(sim, SIM_RANGE_HOST, (uintptr_t)p);
	if (!p || !r || !r->owned) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	sim_all_wait(sim);
	munmap((void *)r->base, r->size);
	sim_range_remove(sim, SIM_RANGE_HOST, (uintptr_t)p);
out:
	sim_leave(sim);
	return rc;
}

void sim_memory_teardown(struct sim *sim)
{
	while (sim->ranges) {
		struct sim_range *r = sim->ranges;

		sim->ranges = r->next;
		if (r->kind == SIM_RANGE_RESERVED || r->kind == SIM_RANGE_LINEAR ||
		    (r->kind == SIM_RANGE_HOST && r->owned))
			munmap((void *)r->base, r->size);
		free(r);
	}
	while (sim->allocs) {
		struct sim_alloc *a = sim->allocs;

		sim->allocs = a->next;
		close(a->fd);
		free(a);
	}
}

enum sim_copy_dir { SIM_H2D, SIM_D2H, SIM_D2D };

CUresult sim_copy_stream(struct sim *sim, CUstream h, bool sync, struct sim_ctx **ctx,
			 struct sim_stream **s)
{
	CUresult rc = sim_ctx_require(sim, ctx);

	if (!rc)
		rc = sim_stream_resolve(sim, sync ? NULL : h, *ctx, s);
	if (!rc && sync)
		rc = sim_capture_unsafe_check(sim);
	if (!rc)
		rc = sim_capture_legacy_check(sim, *s);
	if (!rc)
		rc = (*ctx)->sticky;
	return rc;
}

/* Queue one copy on @h, or on the legacy stream and wait when @sync. */
static CUresult sim_copy(enum sim_copy_dir dir, void *dst, const void *src, size_t bytes,
			 CUstream h, bool sync)
{
	struct sim_stream *s;
	struct sim_ctx *ctx;
	struct sim_cmd *cmd;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_copy_stream(sim, h, sync, &ctx, &s);
	if (rc)
		goto out;
	if (!bytes)
		goto out;
	if (!dst || !src ||
	    (dir != SIM_D2H && !sim_range_device_ok(sim, (uintptr_t)dst, bytes, PROT_WRITE)) ||
	    (dir != SIM_H2D && !sim_range_device_ok(sim, (uintptr_t)src, bytes, PROT_READ))) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	cmd = sim_cmd_new(SIM_CMD_COPY);
	if (!cmd) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	/* Pageable host memory is read now, as the driver stages it; a
	 * registered (pinned) source is read when the copy runs. */
	if (dir == SIM_H2D && !sync && !sim_range_host_registered(sim, (uintptr_t)src, bytes)) {
		cmd->copy.staging = malloc(bytes);
		if (!cmd->copy.staging) {
			sim_cmd_free(cmd);
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
		memcpy(cmd->copy.staging, src, bytes);
	}
	cmd->copy.dst = dst;
	cmd->copy.src = src;
	cmd->copy.bytes = bytes;
	rc = sim_stream_enqueue_sync(sim, s, cmd, sync);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes)
{
	return sim_copy(SIM_H2D, (void *)(uintptr_t)dst, src, bytes, NULL, true);
}

CUresult sim_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes)
{
	return sim_copy(SIM_D2H, dst, (const void *)(uintptr_t)src, bytes, NULL, true);
}

CUresult sim_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
	return sim_copy(SIM_D2D, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes,
			NULL, true);
}

CUresult sim_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes, CUstream h)
{
	return sim_copy(SIM_H2D, (void *)(uintptr_t)dst, src, bytes, h, false);
}

CUresult sim_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t bytes, CUstream h)
{
	return sim_copy(SIM_D2H, dst, (const void *)(uintptr_t)src, bytes, h, false);
}

CUresult sim_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream h)
{
	return sim_copy(SIM_D2D, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes,
			h, false);
}

static CUresult sim_memset(CUdeviceptr dst, uint32_t value, unsigned elem, size_t count,
			   CUstream h, bool sync)
{
	struct sim_stream *s;
	struct sim_ctx *ctx;
	struct sim_cmd *cmd;
	struct sim *sim;
	size_t bytes;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_copy_stream(sim, h, sync, &ctx, &s);
	if (rc || !count)
		goto out;
	if (!sim_aligned((uintptr_t)dst, elem) ||
	    __builtin_mul_overflow(count, (size_t)elem, &bytes) ||
	    !sim_range_device_ok(sim, (uintptr_t)dst, bytes, PROT_WRITE)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	cmd = sim_cmd_new(SIM_CMD_MEMSET);
	if (!cmd) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	cmd->memset.dst = (void *)(uintptr_t)dst;
	cmd->memset.value = value;
	cmd->memset.elem = elem;
	cmd->memset.count = count;
	rc = sim_stream_enqueue_sync(sim, s, cmd, sync);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemsetD8(CUdeviceptr dst, unsigned char uc, size_t n)
{
	return sim_memset(dst, uc, 1, n, NULL, true);
}

CUresult sim_cuMemsetD16(CUdeviceptr dst, unsigned short us, size_t n)
{
	return sim_memset(dst, us, 2, n, NULL, true);
}

CUresult sim_cuMemsetD32(CUdeviceptr dst, unsigned int ui, size_t n)
{
	return sim_memset(dst, ui, 4, n, NULL, true);
}

CUresult sim_cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream h)
{
	return sim_memset(dst, uc, 1, n, h, false);
}

CUresult sim_cuMemsetD16Async(CUdeviceptr dst, unsigned short us, size_t n, CUstream h)
{
	return sim_memset(dst, us, 2, n, h, false);
}

CUresult sim_cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream h)
{
	return sim_memset(dst, ui, 4, n, h, false);
}
