/* The guest's virtual memory management: cuMemGetAllocationGranularity,
 * cuMemAddressReserve/Free, cuMemCreate/Release, cuMemMap/Unmap,
 * cuMemSetAccess/GetAccess, cuMemGetAllocationPropertiesFromHandle and
 * cuMemRetainAllocationHandle.
 *
 * Addresses: the worker reserves one fixed VA range in the backend right
 * after the arena, the VMM window (exec_config.vmm_size), when the session
 * opens. A guest reservation is a piece of that window chosen here, never a
 * backend call, so its address is the same in guest and worker and a restore
 * gets it back exactly; a guest mapping is a real cuMemMap into the window.
 * The guest learns the window with the arena (hello's arena_size covers
 * both), so its device-pointer checks include it.
 *
 * Physical allocations are real (the backend's cuMemCreate) under a virtual
 * handle of kind HANDLE_VMM, counted in the session's quota from creation to
 * their end. The guest's references (cuMemCreate, each
 * cuMemRetainAllocationHandle) and the live mappings both hold one: the
 * backend's handle is released once neither does, which is the driver's
 * own rule for when memory goes back.
 *
 * Journal (docs/journal.md): an allocation is an object of kind HANDLE_VMM
 * (struct vmm_record); a mapping is a region of kind EXEC_REGION_VMM owned by
 * its allocation, its access in the region's flags; the reservations are one
 * meta value, the list of (address, size). A snapshot captures the mappings
 * the device may access; a mapping without access, and an allocation mapped
 * nowhere, hold nothing the guest can reach and come back with undefined
 * contents (docs/limits.md).
 */
#define LOG_PREFIX "exec: "
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "log.h"
#include "tracker.h"
#include "wire_dispatch.h"

#define VMM_RECORD_VERSION 1u
/* Meta key of the reservation list: u64 address, u64 size, little endian. */
#define META_VMM_RESERVATIONS (TRACKER_META_USER + 0x102)
/* Bounds on what a guest may hold: the reservation list is rewritten whole. */
#define VMM_RESERVATIONS_MAX 4096u
#define VMM_MAPPINGS_MAX (1u << 20)
/* Mapping buffer ids, apart from the arena's (which count from 1). */
#define VMM_BUFFER_ID_BASE (1ull << 62)

/* An allocation's journal arguments, little endian. */
struct vmm_record {
	uint32_t version;
	uint32_t refs;
	uint64_t size;
	uint32_t handle_types;
	uint32_t compression;
	uint32_t rdma;
	uint32_t usage;
};
_Static_assert(sizeof(struct vmm_record) == 32, "vmm record layout");

/* ---- helpers ---- */

static struct handle_entry *vmm_entry(struct exec *ex, uint64_t handle)
{
	struct handle_entry *e = handle_table_get(ex->handles, handle, HANDLE_VMM);

	return e && e->info && ((struct exec_vmm_alloc *)e->info)->refs ? e : NULL;
}

static CUmemGenericAllocationHandle vmm_real(const struct handle_entry *e)
{
	return (CUmemGenericAllocationHandle)(uintptr_t)e->real;
}

static void vmm_journal_alloc(struct exec *ex, uint64_t handle, const struct exec_vmm_alloc *a)
{
	struct vmm_record r = {
		.version = VMM_RECORD_VERSION, .refs = a->refs, .size = a->size,
		.handle_types = a->handle_types, .compression = a->compression, .rdma = a->rdma,
		.usage = a->usage,
	};

	exec_journal_object(ex, handle, HANDLE_VMM, 0, &r, sizeof(r));
}

static void vmm_journal_reservations(struct exec *ex)
{
	uint64_t *buf;
	int ret;

	if (!ex->journal || ex->journal_broken)
		return;
	buf = malloc(ex->vmm.res_count ? ex->vmm.res_count * 16u : 1);
	if (!buf) {
		ex->journal_broken = true;
		pr_err("cannot journal the VMM reservations; snapshots are refused from now on");
		return;
	}
	for (unsigned i = 0; i < ex->vmm.res_count; i++) {
		buf[2 * i] = htole64(ex->vmm.res[i].addr);
		buf[2 * i + 1] = htole64(ex->vmm.res[i].size);
	}
	ret = tracker_meta_bytes_set(ex->journal, META_VMM_RESERVATIONS, buf, ex->vmm.res_count * 16u);
	free(buf);
	if (ret) {
		ex->journal_broken = true;
		pr_err("cannot journal the VMM reservations: %s; snapshots are refused from now on",
		       strerror(-ret));
	}
}

/* The physical allocation is gone from the guest's view and unused: release it. */
static void vmm_alloc_maybe_free(struct exec *ex, uint64_t handle)
{
	struct handle_entry *e = handle_table_get(ex->handles, handle, HANDLE_VMM);
	struct exec_vmm_alloc *a = e ? e->info : NULL;

	if (!a)
		return;
	if (a->refs || a->maps) {
		vmm_journal_alloc(ex, handle, a);
		return;
	}
	ex->be->cuMemRelease(vmm_real(e));
	ex->vmm.bytes -= a->size;
	free(a);
	e->info = NULL;
	exec_object_remove(ex, handle);
	exec_mem_publish(ex);
}

/* Index of the first element of @n sorted ranges with address >= @addr;
 * @stride the element size, the address its first field. */
static unsigned lower_bound(const void *arr, unsigned n, size_t stride, uint64_t addr)
{
	unsigned lo = 0, hi = n;

	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		uint64_t a;

		memcpy(&a, (const uint8_t *)arr + (size_t)mid * stride, sizeof(a));
		if (a < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int grow(void **arr, unsigned *cap, unsigned count, size_t stride)
{
	unsigned n;
	void *p;

	if (count < *cap)
		return 0;
	n = *cap ? *cap * 2 : 16;
	p = realloc(*arr, (size_t)n * stride);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = n;
	return 0;
}

/* The reservation holding [addr, addr + size), or NULL. */
static const struct exec_vmm_range *res_containing(const struct exec *ex, uint64_t addr, uint64_t size)
{
	unsigned at = lower_bound(ex->vmm.res, ex->vmm.res_count, sizeof(*ex->vmm.res), addr + 1);
	const struct exec_vmm_range *r;

	if (at == 0)
		return NULL;
	r = &ex->vmm.res[at - 1];
	return addr - r->addr < r->size && size <= r->size - (addr - r->addr) ? r : NULL;
}

/* Is [addr, addr + size) free of reservations, inside the window? */
static bool res_free(const struct exec *ex, uint64_t addr, uint64_t size)
{
	unsigned at;

	if (addr < ex->vmm.base || size > ex->vmm.size || addr - ex->vmm.base > ex->vmm.size - size)
		return false;
	at = lower_bound(ex->vmm.res, ex->vmm.res_count, sizeof(*ex->vmm.res), addr);
	if (at < ex->vmm.res_count && ex->vmm.res[at].addr < addr + size)
		return false;
	return !(at > 0 && ex->vmm.res[at - 1].addr + ex->vmm.res[at - 1].size > addr);
}

static int res_insert(struct exec *ex, uint64_t addr, uint64_t size)
{
	unsigned at;

	if (grow((void **)&ex->vmm.res, &ex->vmm.res_cap, ex->vmm.res_count, sizeof(*ex->vmm.res)))
		return -ENOMEM;
	at = lower_bound(ex->vmm.res, ex->vmm.res_count, sizeof(*ex->vmm.res), addr);
	memmove(&ex->vmm.res[at + 1], &ex->vmm.res[at], (ex->vmm.res_count - at) * sizeof(*ex->vmm.res));
	ex->vmm.res[at] = (struct exec_vmm_range){ addr, size };
	ex->vmm.res_count++;
	return 0;
}

/* First fit of @size at @align in the window, or 0. */
static uint64_t res_place(const struct exec *ex, uint64_t size, uint64_t align)
{
	uint64_t cursor = ex->vmm.base, end = ex->vmm.base + ex->vmm.size;

	for (unsigned i = 0; i <= ex->vmm.res_count; i++) {
		uint64_t gap_end = i < ex->vmm.res_count ? ex->vmm.res[i].addr : end;
		uint64_t at = (cursor + align - 1) / align * align;

		if (at >= cursor && at <= gap_end && gap_end - at >= size)
			return at;
		if (i < ex->vmm.res_count)
			cursor = ex->vmm.res[i].addr + ex->vmm.res[i].size;
	}
	return 0;
}

const struct exec_vmm_map *exec_vmm_find(const struct exec *ex, uint64_t addr)
{
	unsigned at = lower_bound(ex->vmm.maps, ex->vmm.map_count, sizeof(*ex->vmm.maps), addr + 1);
	const struct exec_vmm_map *m;

	if (at == 0)
		return NULL;
	m = &ex->vmm.maps[at - 1];
	return addr - m->addr < m->size ? m : NULL;
}

bool exec_vmm_range_valid(const struct exec *ex, uint64_t addr, uint64_t len)
{
	const struct exec_vmm_map *m = exec_vmm_find(ex, addr);
	const struct exec_vmm_map *last;

	if (!m || m->access == CU_MEM_ACCESS_FLAGS_PROT_NONE)
		return false;
	/* Only now: with no mapping, maps is NULL, and NULL + 0 is undefined. */
	last = ex->vmm.maps + ex->vmm.map_count;
	/* A buffer may run across chunks mapped back to back (expandable segments). */
	for (uint64_t end = addr + len; m->addr + m->size < end; m++) {
		if (m + 1 == last || m[1].addr != m->addr + m->size ||
		    m[1].access == CU_MEM_ACCESS_FLAGS_PROT_NONE)
			return false;
	}
	return true;
}

/* Do whole mappings tile [addr, addr + size)? The index of the first in @first. */
static bool maps_tile(const struct exec *ex, uint64_t addr, uint64_t size, unsigned *first)
{
	unsigned at = lower_bound(ex->vmm.maps, ex->vmm.map_count, sizeof(*ex->vmm.maps), addr);
	uint64_t cur = addr;

	if (!size || addr + size < addr)
		return false;
	*first = at;
	for (; cur < addr + size; at++) {
		if (at == ex->vmm.map_count || ex->vmm.maps[at].addr != cur ||
		    ex->vmm.maps[at].size > addr + size - cur)
			return false;
		cur += ex->vmm.maps[at].size;
	}
	return true;
}

/* The guest's location, the session's device as device 0. */
static CUresult vmm_location(struct exec *ex, uint32_t type, int32_t id, CUmemLocation *out)
{
	CUdevice dev;

	if (type != CU_MEM_LOCATION_TYPE_DEVICE)
		return type == CU_MEM_LOCATION_TYPE_INVALID ? CUDA_ERROR_INVALID_VALUE
							      : CUDA_ERROR_NOT_SUPPORTED;
	if (exec_device_real(ex, id, &dev) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	out->type = CU_MEM_LOCATION_TYPE_DEVICE;
	out->id = dev;
	return CUDA_SUCCESS;
}

/* ---- window ---- */

void exec_vmm_open(struct exec *ex)
{
	CUmemAllocationProp prop = { 0 };
	/* After room for every device's arena: the window stays where it is
	 * whatever number of devices a restoring ternd gives the session. */
	uint64_t base = ex->cfg.arena_base + EXEC_DEVICES_MAX * ex->cfg.arena_size;
	CUdeviceptr got = 0;
	size_t gran = 0;
	CUresult res;

	if (!ex->cfg.vmm_size)
		return;
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = ex->dev.device;
	res = ex->be->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (res != CUDA_SUCCESS || !gran || ex->cfg.vmm_size % gran || base % gran) {
		pr_warn("no VMM window: granularity %zu (error %d); guest VMM calls are refused", gran, res);
		return;
	}
	res = ex->be->cuMemAddressReserve(&got, ex->cfg.vmm_size, gran, base, 0);
	if (res != CUDA_SUCCESS || got != base) {
		pr_warn("cannot reserve the VMM window at 0x%llx+0x%llx (error %d); guest VMM calls are refused",
			(unsigned long long)base, (unsigned long long)ex->cfg.vmm_size, res);
		if (res == CUDA_SUCCESS)
			ex->be->cuMemAddressFree(got, ex->cfg.vmm_size);
		return;
	}
	ex->vmm.base = base;
	ex->vmm.size = ex->cfg.vmm_size;
	ex->vmm.gran = gran;
}

static int vmm_release_all(struct handle_entry *e, void *arg)
{
	struct exec *ex = arg;

	if (e->kind != HANDLE_VMM || !e->info)
		return 0;
	ex->be->cuMemRelease(vmm_real(e));
	free(e->info);
	e->info = NULL;
	return 0;
}

void exec_vmm_close(struct exec *ex)
{
	for (unsigned i = 0; i < ex->vmm.map_count; i++)
		ex->be->cuMemUnmap(ex->vmm.maps[i].addr, ex->vmm.maps[i].size);
	if (ex->handles)
		handle_table_foreach(ex->handles, vmm_release_all, ex);
	if (ex->vmm.size)
		ex->be->cuMemAddressFree(ex->vmm.base, ex->vmm.size);
	free(ex->vmm.maps);
	free(ex->vmm.res);
	ex->vmm.maps = NULL;
	ex->vmm.res = NULL;
	ex->vmm.map_count = ex->vmm.res_count = 0;
	ex->vmm.size = 0;
}

/* ---- handlers ---- */

CUresult exec_mem_get_allocation_granularity(struct exec *ex,
					     const struct wire_mem_get_allocation_granularity_req *req,
					     struct wire_mem_get_allocation_granularity_rep *rep)
{
	CUmemAllocationProp prop = { 0 };
	size_t gran = 0;
	CUresult res;

	if (req->alloc_type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    (req->option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	     req->option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	res = vmm_location(ex, req->location_type, req->location_id, &prop.location);
	if (res != CUDA_SUCCESS)
		return res;
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = (CUmemAllocationHandleType)req->handle_types;
	res = ex->be->cuMemGetAllocationGranularity(&gran, &prop,
						    (CUmemAllocationGranularity_flags)req->option);
	if (res == CUDA_SUCCESS)
		rep->granularity = gran;
	return res;
}

CUresult exec_mem_address_reserve(struct exec *ex, const struct wire_mem_address_reserve_req *req,
				  struct wire_mem_address_reserve_rep *rep)
{
	uint64_t align = req->alignment, addr = 0;

	if (!ex->vmm.size)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (req->flags || !req->size || req->size % ex->vmm.gran || (align & (align - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (align < ex->vmm.gran)
		align = ex->vmm.gran;
	if (req->size > ex->vmm.size || align > ex->vmm.size)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (ex->vmm.res_count >= VMM_RESERVATIONS_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* The hint is honoured when it is aligned and free, as the driver does. */
	if (req->hint && req->hint % align == 0 && res_free(ex, req->hint, req->size))
		addr = req->hint;
	if (!addr)
		addr = res_place(ex, req->size, align);
	if (!addr || res_insert(ex, addr, req->size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	vmm_journal_reservations(ex);
	rep->address = addr;
	return CUDA_SUCCESS;
}

CUresult exec_mem_address_free(struct exec *ex, const struct wire_mem_address_free_req *req,
			       struct wire_mem_address_free_rep *rep)
{
	unsigned at = lower_bound(ex->vmm.res, ex->vmm.res_count, sizeof(*ex->vmm.res), req->address);
	unsigned m;

	if (at == ex->vmm.res_count || ex->vmm.res[at].addr != req->address ||
	    ex->vmm.res[at].size != req->size)
		return CUDA_ERROR_INVALID_VALUE;
	/* A reservation with live mappings stays (the sim's rule; the driver's docs
	 * ask for the mappings to go first). */
	m = lower_bound(ex->vmm.maps, ex->vmm.map_count, sizeof(*ex->vmm.maps), req->address);
	if (m < ex->vmm.map_count && ex->vmm.maps[m].addr < req->address + req->size)
		return CUDA_ERROR_INVALID_VALUE;
	memmove(&ex->vmm.res[at], &ex->vmm.res[at + 1], (ex->vmm.res_count - at - 1) * sizeof(*ex->vmm.res));
	ex->vmm.res_count--;
	vmm_journal_reservations(ex);
	return CUDA_SUCCESS;
}

/* Create the backend's allocation for @a; handle types and flags as asked. */
static CUresult vmm_backend_create(struct exec *ex, const struct exec_vmm_alloc *a,
				   CUmemGenericAllocationHandle *real)
{
	CUmemAllocationProp prop = { 0 };

	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = ex->dev.device;
	prop.requestedHandleTypes = (CUmemAllocationHandleType)a->handle_types;
	prop.allocFlags.compressionType = (unsigned char)a->compression;
	prop.allocFlags.gpuDirectRDMACapable = (unsigned char)a->rdma;
	prop.allocFlags.usage = (unsigned short)a->usage;
	return ex->be->cuMemCreate(real, a->size, &prop, 0);
}

CUresult exec_mem_create(struct exec *ex, const struct wire_mem_create_req *req,
			 struct wire_mem_create_rep *rep)
{
	CUmemGenericAllocationHandle real;
	struct exec_vmm_alloc *a;
	CUmemLocation loc;
	CUresult res;

	if (!ex->vmm.size)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (req->flags || !req->size || req->size % ex->vmm.gran ||
	    req->alloc_type != CU_MEM_ALLOCATION_TYPE_PINNED || req->compression > 0xff ||
	    req->rdma > 1 || req->usage > 0xffff)
		return CUDA_ERROR_INVALID_VALUE;
	res = vmm_location(ex, req->location_type, req->location_id, &loc);
	if (res != CUDA_SUCCESS)
		return res;
	/* A file descriptor may be asked for (PyTorch does), but nothing is
	 * exported: cuMemExportToShareableHandle is refused in the shim. */
	if (req->handle_types & ~(uint32_t)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (ex->cfg.quota && (req->size > ex->cfg.quota || exec_mem_used(ex) > ex->cfg.quota - req->size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*a = (struct exec_vmm_alloc){ .size = req->size, .refs = 1, .handle_types = req->handle_types,
				      .compression = req->compression, .rdma = req->rdma,
				      .usage = req->usage };
	res = vmm_backend_create(ex, a, &real);
	if (res != CUDA_SUCCESS) {
		free(a);
		return res;
	}
	if (handle_table_add(ex->handles, HANDLE_VMM, (void *)(uintptr_t)real, 0, a, &rep->mem)) {
		ex->be->cuMemRelease(real);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ex->vmm.bytes += a->size;
	vmm_journal_alloc(ex, rep->mem, a);
	exec_mem_publish(ex);
	return CUDA_SUCCESS;
}

CUresult exec_mem_release(struct exec *ex, const struct wire_mem_release_req *req,
			  struct wire_mem_release_rep *rep)
{
	struct handle_entry *e = vmm_entry(ex, req->mem);

	if (!e)
		return CUDA_ERROR_INVALID_VALUE;
	((struct exec_vmm_alloc *)e->info)->refs--;
	vmm_alloc_maybe_free(ex, req->mem);
	return CUDA_SUCCESS;
}

static int map_insert(struct exec *ex, const struct exec_vmm_map *m)
{
	unsigned at;

	if (grow((void **)&ex->vmm.maps, &ex->vmm.map_cap, ex->vmm.map_count, sizeof(*ex->vmm.maps)))
		return -ENOMEM;
	at = lower_bound(ex->vmm.maps, ex->vmm.map_count, sizeof(*ex->vmm.maps), m->addr);
	memmove(&ex->vmm.maps[at + 1], &ex->vmm.maps[at], (ex->vmm.map_count - at) * sizeof(*ex->vmm.maps));
	ex->vmm.maps[at] = *m;
	ex->vmm.map_count++;
	return 0;
}

/* Map @e's memory at [addr, addr + size) in the backend and the table. */
static CUresult map_add(struct exec *ex, struct handle_entry *e, uint64_t addr, uint64_t size,
			uint32_t access)
{
	struct exec_vmm_alloc *a = e->info;
	struct exec_vmm_map m = { addr, size, e->handle, VMM_BUFFER_ID_BASE + ++ex->vmm.next_id, access };
	CUresult res;

	if (ex->vmm.map_count >= VMM_MAPPINGS_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = ex->be->cuMemMap(addr, size, 0, vmm_real(e), 0);
	if (res != CUDA_SUCCESS)
		return res;
	if (map_insert(ex, &m)) {
		ex->be->cuMemUnmap(addr, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->maps++;
	exec_journal_region_as(ex, addr, size, EXEC_REGION_VMM, e->handle, access);
	return CUDA_SUCCESS;
}

CUresult exec_vmm_map(struct exec *ex, const struct wire_vmm_map_req *req, struct wire_vmm_map_rep *rep)
{
	struct handle_entry *e = vmm_entry(ex, req->mem);
	unsigned at;

	if (!e || req->flags || !req->size || !ex->vmm.gran || req->address % ex->vmm.gran ||
	    req->size % ex->vmm.gran)
		return CUDA_ERROR_INVALID_VALUE;
	/* cuda.h: the offset "currently must be zero". */
	if (req->offset || req->size > ((struct exec_vmm_alloc *)e->info)->size)
		return CUDA_ERROR_INVALID_VALUE;
	if (!res_containing(ex, req->address, req->size))
		return CUDA_ERROR_INVALID_VALUE;
	at = lower_bound(ex->vmm.maps, ex->vmm.map_count, sizeof(*ex->vmm.maps), req->address);
	if ((at < ex->vmm.map_count && ex->vmm.maps[at].addr < req->address + req->size) ||
	    (at > 0 && ex->vmm.maps[at - 1].addr + ex->vmm.maps[at - 1].size > req->address))
		return CUDA_ERROR_INVALID_VALUE;
	return map_add(ex, e, req->address, req->size, CU_MEM_ACCESS_FLAGS_PROT_NONE);
}

CUresult exec_vmm_unmap(struct exec *ex, const struct wire_vmm_unmap_req *req,
			struct wire_vmm_unmap_rep *rep)
{
	unsigned first;
	CUresult res;

	if (!maps_tile(ex, req->address, req->size, &first))
		return CUDA_ERROR_INVALID_VALUE;
	while (first < ex->vmm.map_count && ex->vmm.maps[first].addr < req->address + req->size) {
		struct exec_vmm_map m = ex->vmm.maps[first];
		struct handle_entry *e = handle_table_get(ex->handles, m.mem, HANDLE_VMM);

		res = ex->be->cuMemUnmap(m.addr, m.size);
		if (res != CUDA_SUCCESS)
			return res;
		memmove(&ex->vmm.maps[first], &ex->vmm.maps[first + 1],
			(ex->vmm.map_count - first - 1) * sizeof(*ex->vmm.maps));
		ex->vmm.map_count--;
		exec_journal_region_drop(ex, m.addr);
		if (e && e->info) {
			((struct exec_vmm_alloc *)e->info)->maps--;
			vmm_alloc_maybe_free(ex, m.mem);
		}
	}
	return CUDA_SUCCESS;
}

CUresult exec_mem_set_access(struct exec *ex, const struct wire_mem_set_access_req *req,
			     struct wire_mem_set_access_rep *rep)
{
	CUmemAccessDesc desc[WIRE_REC_ACCESS_DESC_MAX];
	int records = wire_rec_access_desc_count(req->descs);   /* over the max, refused */
	size_t count;
	uint32_t access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
	unsigned first;
	CUresult res;

	if (records <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	count = (size_t)records;
	for (size_t i = 0; i < count; i++) {
		struct wire_rec_access_desc w;

		wire_rec_access_desc_get(req->descs, (uint32_t)i, &w);
		res = vmm_location(ex, w.type, w.id, &desc[i].location);
		if (res != CUDA_SUCCESS)
			return res;
		if (w.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && w.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		    w.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
		desc[i].flags = (CUmemAccess_flags)w.flags;
		access = w.flags;       /* one device: the last word on it holds */
	}
	/* Whole mappings only (docs/limits.md): the journal keeps access per mapping. */
	if (!maps_tile(ex, req->address, req->size, &first))
		return CUDA_ERROR_INVALID_VALUE;
	res = ex->be->cuMemSetAccess(req->address, req->size, desc, count);
	if (res != CUDA_SUCCESS)
		return res;
	for (unsigned i = first; i < ex->vmm.map_count && ex->vmm.maps[i].addr < req->address + req->size; i++) {
		struct exec_vmm_map *m = &ex->vmm.maps[i];

		m->access = access;
		exec_journal_region_as(ex, m->addr, m->size, EXEC_REGION_VMM, m->mem, access);
	}
	return CUDA_SUCCESS;
}

CUresult exec_mem_get_access(struct exec *ex, const struct wire_mem_get_access_req *req,
			     struct wire_mem_get_access_rep *rep)
{
	const struct exec_vmm_map *m = exec_vmm_find(ex, req->address);
	CUmemLocation loc;
	CUresult res;

	res = vmm_location(ex, req->location_type, req->location_id, &loc);
	if (res != CUDA_SUCCESS)
		return res;
	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	rep->flags = m->access;
	return CUDA_SUCCESS;
}

CUresult exec_mem_get_allocation_properties(struct exec *ex,
					    const struct wire_mem_get_allocation_properties_req *req,
					    struct wire_mem_get_allocation_properties_rep *rep)
{
	struct handle_entry *e = vmm_entry(ex, req->mem);
	const struct exec_vmm_alloc *a;

	if (!e)
		return CUDA_ERROR_INVALID_VALUE;
	a = e->info;
	rep->alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED;
	rep->location_type = CU_MEM_LOCATION_TYPE_DEVICE;
	rep->location_id = 0;
	rep->handle_types = a->handle_types;
	rep->compression = a->compression;
	rep->rdma = a->rdma;
	rep->usage = a->usage;
	return CUDA_SUCCESS;
}

CUresult exec_mem_retain_allocation_handle(struct exec *ex,
					   const struct wire_mem_retain_allocation_handle_req *req,
					   struct wire_mem_retain_allocation_handle_rep *rep)
{
	const struct exec_vmm_map *m = exec_vmm_find(ex, req->address);
	struct handle_entry *e = m ? handle_table_get(ex->handles, m->mem, HANDLE_VMM) : NULL;
	struct exec_vmm_alloc *a = e ? e->info : NULL;

	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	if (a->refs == UINT32_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* A mapping keeps its allocation alive: retaining it after the guest's
	 * last release gives the same handle back, valid again. */
	a->refs++;
	vmm_journal_alloc(ex, m->mem, a);
	rep->mem = m->mem;
	return CUDA_SUCCESS;
}

/* ---- restore ---- */

struct vmm_restore {
	struct exec *ex;
	char *err;
	size_t errlen;
};

static int restore_alloc(void *arg, uint64_t handle, const struct tracker_object *o)
{
	struct vmm_restore *vr = arg;
	struct exec *ex = vr->ex;
	CUmemGenericAllocationHandle real;
	struct exec_vmm_alloc *a;
	struct vmm_record r;
	CUresult res;

	if (o->kind != HANDLE_VMM)
		return 0;
	if (o->args_len != sizeof(r) || handle_kind_of(handle) != HANDLE_VMM) {
		snprintf(vr->err, vr->errlen, "VMM allocation 0x%llx: bad record", (unsigned long long)handle);
		return -EBADMSG;
	}
	memcpy(&r, o->args, sizeof(r));
	if (le32toh(r.version) != VMM_RECORD_VERSION || !r.size || !ex->vmm.gran ||
	    le64toh(r.size) % ex->vmm.gran) {
		snprintf(vr->err, vr->errlen, "VMM allocation 0x%llx: bad record", (unsigned long long)handle);
		return -EBADMSG;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	*a = (struct exec_vmm_alloc){ .size = le64toh(r.size), .refs = le32toh(r.refs),
				      .handle_types = le32toh(r.handle_types),
				      .compression = le32toh(r.compression), .rdma = le32toh(r.rdma),
				      .usage = le32toh(r.usage) };
	res = vmm_backend_create(ex, a, &real);
	if (res != CUDA_SUCCESS) {
		snprintf(vr->err, vr->errlen, "VMM allocation 0x%llx of %llu bytes: CUDA error %d",
			 (unsigned long long)handle, (unsigned long long)a->size, res);
		free(a);
		return -ENOMEM;
	}
	if (handle_table_add_at(ex->handles, handle, (void *)(uintptr_t)real, 0, a)) {
		ex->be->cuMemRelease(real);
		free(a);
		return -ENOMEM;
	}
	ex->vmm.bytes += a->size;
	vmm_journal_alloc(ex, handle, a);
	return 0;
}

int exec_vmm_restore_begin(struct exec *ex, struct tracker *saved, char *err, size_t errlen)
{
	static const uint32_t order[] = { HANDLE_VMM };
	struct vmm_restore vr = { ex, err, errlen };
	const void *bytes = NULL;
	size_t len = 0;

	if (!tracker_meta_bytes_get(saved, META_VMM_RESERVATIONS, &bytes, &len) && len) {
		if (len % 16 || len / 16 > VMM_RESERVATIONS_MAX) {
			snprintf(err, errlen, "the VMM reservation list is malformed");
			return -EBADMSG;
		}
		for (size_t i = 0; i < len / 16; i++) {
			uint64_t v[2];

			memcpy(v, (const uint8_t *)bytes + 16 * i, sizeof(v));
			v[0] = le64toh(v[0]);
			v[1] = le64toh(v[1]);
			if (!ex->vmm.size || !v[1] || v[0] % ex->vmm.gran || v[1] % ex->vmm.gran ||
			    !res_free(ex, v[0], v[1])) {
				snprintf(err, errlen, "VMM reservation 0x%llx+0x%llx does not fit this worker's "
					 "window 0x%llx+0x%llx", (unsigned long long)v[0],
					 (unsigned long long)v[1], (unsigned long long)ex->vmm.base,
					 (unsigned long long)ex->vmm.size);
				return -EINVAL;
			}
			if (res_insert(ex, v[0], v[1]))
				return -ENOMEM;
		}
		vmm_journal_reservations(ex);
	}
	return tracker_object_foreach(saved, order, 1, restore_alloc, &vr);
}

int exec_vmm_restore_map(struct exec *ex, uint64_t addr, uint64_t size, uint64_t mem,
			 uint32_t access, char *err, size_t errlen)
{
	struct handle_entry *e = handle_table_get(ex->handles, mem, HANDLE_VMM);
	CUmemAccessDesc rw = { { CU_MEM_LOCATION_TYPE_DEVICE, ex->dev.device },
			       CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	unsigned at;
	CUresult res;

	at = lower_bound(ex->vmm.maps, ex->vmm.map_count, sizeof(*ex->vmm.maps), addr);
	if (!e || !e->info || access > CU_MEM_ACCESS_FLAGS_PROT_READWRITE || !ex->vmm.gran ||
	    addr % ex->vmm.gran || size % ex->vmm.gran || size > ((struct exec_vmm_alloc *)e->info)->size ||
	    !res_containing(ex, addr, size) ||
	    (at < ex->vmm.map_count && ex->vmm.maps[at].addr < addr + size) ||
	    (at > 0 && ex->vmm.maps[at - 1].addr + ex->vmm.maps[at - 1].size > addr)) {
		snprintf(err, errlen, "VMM mapping 0x%llx+0x%llx of 0x%llx is inconsistent with the journal",
			 (unsigned long long)addr, (unsigned long long)size, (unsigned long long)mem);
		return -EBADMSG;
	}
	res = map_add(ex, e, addr, size, access);
	/* Writable until the contents are back; the saved access comes last. */
	if (res == CUDA_SUCCESS)
		res = ex->be->cuMemSetAccess(addr, size, &rw, 1);
	if (res != CUDA_SUCCESS) {
		snprintf(err, errlen, "cannot map 0x%llx+0x%llx again (CUDA error %d)",
			 (unsigned long long)addr, (unsigned long long)size, res);
		return -ENOMEM;
	}
	return 0;
}

int exec_vmm_restore_finish(struct exec *ex, char *err, size_t errlen)
{
	for (unsigned i = 0; i < ex->vmm.map_count; i++) {
		const struct exec_vmm_map *m = &ex->vmm.maps[i];
		CUmemAccessDesc d = { { CU_MEM_LOCATION_TYPE_DEVICE, ex->dev.device },
				      (CUmemAccess_flags)m->access };
		CUresult res;

		if (m->access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			continue;
		res = ex->be->cuMemSetAccess(m->addr, m->size, &d, 1);
		if (res != CUDA_SUCCESS) {
			snprintf(err, errlen, "cannot set the access of 0x%llx+0x%llx again (CUDA error %d)",
				 (unsigned long long)m->addr, (unsigned long long)m->size, res);
			return -EIO;
		}
	}
	/* Allocations the guest released and no mapping holds are not journaled. */
	exec_mem_publish(ex);
	return 0;
}
