/* Device memory, copies, memsets, pointer attributes and host memory.
 *
 * Device pointers are real addresses in the session's arena (equal on both
 * sides), so the generic cuMemcpy classifies each pointer by the arena range
 * without a round trip. Page-locked host memory is served locally for now:
 * plain page-aligned memory whose ranges are remembered, so that pointer
 * attributes report it as host memory, as the driver does.
 */
#define LOG_PREFIX "shim: "

#include "shim.h"
#include "graph_desc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

/* Allocation and queries */

SHIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	SHIM_ENTRY();
	struct wire_mem_alloc_req req = { .bytes = bytesize };
	struct wire_mem_alloc_rep rep;
	CUresult res;

	if (!dptr || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mem_alloc(&req, &rep);
	if (res == CUDA_SUCCESS)
		*dptr = rep.address;
	return res;
}

static bool host_range_find(uintptr_t addr, struct shim_host_range *out);

SHIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	SHIM_ENTRY();
	struct wire_mem_free_req req = { .address = dptr };
	struct wire_mem_free_rep rep;
	struct shim_host_range host;
	CUresult res;

	/* Mirrored pinned memory is device memory to the worker, host memory
	 * to the application: cuMemFreeHost frees it. */
	if (host_range_find((uintptr_t)dptr, &host) || registered_contains(dptr))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mem_free(&req, &rep);

	/* The mirror goes with the device memory (the host's unpushed writes
	 * with it: the memory is gone). */
	if (res == CUDA_SUCCESS)
		managed_free(dptr);
	return res;
}

SHIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	SHIM_ENTRY();
	struct wire_mem_alloc_managed_req req = { .bytes = bytesize, .flags = flags };
	struct wire_mem_alloc_managed_rep rep;
	struct wire_mem_free_req freq;
	struct wire_mem_free_rep frep;
	CUresult res;

	if (!dptr || !bytesize || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mem_alloc_managed(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	res = managed_alloc_mirror(rep.address, bytesize, flags);
	if (res != CUDA_SUCCESS) {
		freq.address = rep.address;
		rpc_mem_free(&freq, &frep);
		return res;
	}
	*dptr = rep.address;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
	SHIM_ENTRY();
	struct wire_mem_get_info_req req = { 0 };
	struct wire_mem_get_info_rep rep;
	CUresult res;

	if (!free_bytes || !total)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mem_get_info(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	*free_bytes = (size_t)rep.free;
	*total = (size_t)rep.total;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	SHIM_ENTRY();
	struct wire_mem_get_address_range_req req = { .address = dptr };
	struct wire_mem_get_address_range_rep rep;
	CUresult res;

	res = rpc_mem_get_address_range(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	if (pbase)
		*pbase = rep.base;
	if (psize)
		*psize = (size_t)rep.bytes;
	return CUDA_SUCCESS;
}

/* Host memory */

static bool host_range_find(uintptr_t addr, struct shim_host_range *out)
{
	struct shim_process *p = shim_process();
	struct shim_host_range *r;
	bool found = false;

	pthread_mutex_lock(&p->cache.lock);
	for (r = p->cache.host_ranges; r; r = r->next) {
		if (addr >= r->base && addr - r->base < r->size) {
			*out = *r;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&p->cache.lock);
	return found;
}

/* Remembers a copy of @range (its next pointer unused); -EEXIST when it
 * overlaps one already known. */
static int host_range_add(const struct shim_host_range *range)
{
	struct shim_process *p = shim_process();
	struct shim_host_range *r, *it;

	r = malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	*r = *range;
	pthread_mutex_lock(&p->cache.lock);
	for (it = p->cache.host_ranges; it; it = it->next) {
		if (r->base < it->base + it->size && it->base < r->base + r->size) {
			pthread_mutex_unlock(&p->cache.lock);
			free(r);
			return -EEXIST;
		}
	}
	r->next = p->cache.host_ranges;
	p->cache.host_ranges = r;
	pthread_mutex_unlock(&p->cache.lock);
	return 0;
}

/* Kernels reach the range starting at @base at @device_addr: the worker's
 * mapping of shared pages, or a device copy (the range becomes mirrored). */
static void host_range_set_device(uintptr_t base, uint64_t device_addr)
{
	struct shim_process *p = shim_process();

	pthread_mutex_lock(&p->cache.lock);
	for (struct shim_host_range *r = p->cache.host_ranges; r; r = r->next) {
		if (r->base == base) {
			r->device_addr = device_addr;
			r->mirrored = r->memfd < 0 && !r->in_bar;
		}
	}
	pthread_mutex_unlock(&p->cache.lock);
}

/* Removes the range starting exactly at @base and owned as asked; *@out
 * gets what it was. */
static int host_range_remove(uintptr_t base, bool owned, struct shim_host_range *out)
{
	struct shim_process *p = shim_process();
	struct shim_host_range **pp;
	int ret = -ENOENT;

	pthread_mutex_lock(&p->cache.lock);
	for (pp = &p->cache.host_ranges; *pp; pp = &(*pp)->next) {
		if ((*pp)->base == base && (*pp)->owned == owned) {
			struct shim_host_range *r = *pp;

			*pp = r->next;
			*out = *r;
			free(r);
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&p->cache.lock);
	return ret;
}

void host_range_reset(struct shim_process *p)
{
	/* The child keeps its copy of the memory (fork duplicated it; shared
	 * buffers stay mapped); only the bookkeeping goes, as the new session
	 * knows nothing of it. */
	while (p->cache.host_ranges) {
		struct shim_host_range *r = p->cache.host_ranges;

		p->cache.host_ranges = r->next;
		if (r->memfd >= 0)
			close(r->memfd);
		free(r);
	}
}

/* Where shared pinned buffers are placed first, on both sides: above the
 * device arena, where neither process maps anything of its own, so that host
 * and device pointers can agree. */
#define HOST_SHARED_BASE 0x300000000000ull

static uint64_t host_shared_next = HOST_SHARED_BASE;

/* Pinned memory under the shm transport: a sealed memfd the worker maps and
 * registers with the driver. NOT_SUPPORTED when the worker does not offer it. */
static CUresult host_alloc_shared(void **pp, size_t size, unsigned flags)
{
	struct wire_mem_host_share_req req = { .bytes = size, .flags = flags };
	struct wire_mem_host_share_rep rep;
	struct wire_cursor cur;
	struct wire_msg m;
	uint64_t hint;
	CUresult res;
	void *mem;
	int fd;

	fd = shm_memfd_create("tern-pinned", size);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	hint = __atomic_fetch_add(&host_shared_next, size + (2u << 20), __ATOMIC_RELAXED);
	mem = mmap((void *)(uintptr_t)hint, size, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
	if (mem != MAP_FAILED && mem != (void *)(uintptr_t)hint) {
		munmap(mem, size);
		mem = MAP_FAILED;
	}
	if (mem == MAP_FAILED)
		mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* Known before the worker answers: a reconnect in between shares it again. */
	if (host_range_add(&(struct shim_host_range){ .base = (uintptr_t)mem, .size = size, .flags = flags,
						      .owned = true, .memfd = fd,
						      .device_addr = (uintptr_t)mem })) {
		munmap(mem, size);
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	req.address = (uintptr_t)mem;
	wire_msg_init(&m);
	wire_mem_host_share_req_encode(&m, &req);
	res = rpc_call_fd(WIRE_CALL_MEM_HOST_SHARE, &m, &cur, fd);
	wire_msg_release(&m);
	if (res == CUDA_SUCCESS && wire_mem_host_share_rep_decode(&cur, &rep) < 0)
		res = CUDA_ERROR_UNKNOWN;
	if (res != CUDA_SUCCESS) {
		struct shim_host_range gone;

		host_range_remove((uintptr_t)mem, true, &gone);
		munmap(mem, size);
		close(fd);
		return res;
	}
	if (rep.device_address != (uintptr_t)mem)
		host_range_set_device((uintptr_t)mem, rep.device_address);
	*pp = mem;
	return CUDA_SUCCESS;
}

/* The lowest free @size bytes of the ivshmem slot past the rings, taken as
 * a range under cache_lock (two threads may allocate at once); its offset
 * in the slot, or UINT64_MAX when none is free. First fit: pinned buffers
 * are few and long-lived. */
static uint64_t host_bar_carve(struct shim_process *p, size_t size, unsigned flags)
{
	struct shim_host_range *r = calloc(1, sizeof(*r)), *it;
	uint64_t at = p->ivshmem.slot_carve, found = UINT64_MAX;

	if (!r)
		return UINT64_MAX;
	pthread_mutex_lock(&p->cache.lock);
	while (found == UINT64_MAX && at <= p->ivshmem.slot_bytes && size <= p->ivshmem.slot_bytes - at) {
		uint64_t next = 0;

		for (it = p->cache.host_ranges; it; it = it->next) {
			if (it->in_bar && at < it->bar_offset + it->size && it->bar_offset < at + size &&
			    it->bar_offset + it->size > next)
				next = it->bar_offset + it->size;
		}
		if (!next)
			found = at;
		at = next;
	}
	if (found != UINT64_MAX) {
		r->base = (uintptr_t)(p->ivshmem.slot_base + found);
		r->size = size;
		r->flags = flags;
		r->owned = true;
		r->memfd = -1;
		r->in_bar = true;
		r->bar_offset = found;
		r->device_addr = r->base;
		r->next = p->cache.host_ranges;
		p->cache.host_ranges = r;
	}
	pthread_mutex_unlock(&p->cache.lock);
	if (found == UINT64_MAX)
		free(r);
	return found;
}

/* Pinned memory of a libvirt domain's session on ivshmem: carved from its
 * slot of the BAR, which the worker maps from its own file; a copy to or
 * from it is the driver's DMA on those pages, nothing crosses the serial
 * port. NOT_SUPPORTED when the slot is full or the worker cannot map it. */
static CUresult host_alloc_bar(void **pp, size_t size, unsigned flags)
{
	struct shim_process *p = shim_process();
	struct wire_ivshmem_host_share_req req = { .bytes = size, .flags = flags };
	struct wire_ivshmem_host_share_rep rep;
	struct shim_host_range gone;
	uint64_t offset = host_bar_carve(p, size, flags);
	CUresult res;

	if (offset == UINT64_MAX)
		return CUDA_ERROR_NOT_SUPPORTED;
	req.address = (uintptr_t)(p->ivshmem.slot_base + offset);
	req.offset = offset;
	res = rpc_ivshmem_host_share(&req, &rep);
	if (res != CUDA_SUCCESS) {
		host_range_remove((uintptr_t)req.address, true, &gone);
		return res == CUDA_ERROR_OUT_OF_MEMORY || res == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_NOT_SUPPORTED
											 : res;
	}
	if (rep.device_address != req.address)
		host_range_set_device(req.address, rep.device_address);
	/* Fresh pinned memory reads as zero, as the driver's does. */
	memset(p->ivshmem.slot_base + offset, 0, size);
	*pp = p->ivshmem.slot_base + offset;
	return CUDA_SUCCESS;
}

/* Mapped pinned memory where no memory is shared with the worker (unix,
 * tcp): device memory of the arena with the managed mirror's host side at
 * the same address (managed.c), so the host pointer is the device pointer
 * as under unified addressing, and coherent at the same points as managed
 * memory (docs/wire-protocol.md, "Mapped pinned memory"). */
static CUresult host_alloc_mirrored(void **pp, size_t size, unsigned flags)
{
	struct wire_mem_alloc_managed_req req = { .bytes = size, .flags = CU_MEM_ATTACH_GLOBAL };
	struct wire_mem_alloc_managed_rep rep;
	struct wire_mem_free_req freq;
	struct wire_mem_free_rep frep;
	CUresult res = rpc_mem_alloc_managed(&req, &rep);

	if (res != CUDA_SUCCESS)
		return res;
	res = managed_pinned_mirror(rep.address, size);
	if (res != CUDA_SUCCESS)
		goto out_free;
	if (host_range_add(&(struct shim_host_range){ .base = (uintptr_t)rep.address, .size = size,
						      .flags = flags, .owned = true, .memfd = -1,
						      .device_addr = rep.address, .mirrored = true })) {
		managed_free(rep.address);
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_free;
	}
	*pp = (void *)(uintptr_t)rep.address;
	return CUDA_SUCCESS;
out_free:
	freq.address = rep.address;
	rpc_mem_free(&freq, &frep);
	return res;
}

static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t size;
	void *mem;

	if (!pp || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	if (page <= 0)
		page = 4096;
	if (bytesize > SIZE_MAX - (size_t)page)
		return CUDA_ERROR_OUT_OF_MEMORY;
	size = (bytesize + (size_t)page - 1) & ~((size_t)page - 1);
	if (rpc_connect() == CUDA_SUCCESS && shim_process()->conn.shm_on) {
		CUresult res = shim_process()->conn.ivshmem_on ? host_alloc_bar(pp, size, flags)
							  : host_alloc_shared(pp, size, flags);

		if (res != CUDA_ERROR_NOT_SUPPORTED)
			return res;
	}
	if (flags & CU_MEMHOSTALLOC_DEVICEMAP)
		return host_alloc_mirrored(pp, size, flags);
	if (posix_memalign(&mem, (size_t)page, size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (host_range_add(&(struct shim_host_range){ .base = (uintptr_t)mem, .size = size, .flags = flags,
						      .owned = true, .memfd = -1 })) {
		free(mem);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = mem;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	SHIM_ENTRY();
	return host_alloc(pp, bytesize, 0);
}

SHIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	SHIM_ENTRY();
	if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
				CU_MEMHOSTALLOC_WRITECOMBINED))
		return CUDA_ERROR_INVALID_VALUE;
	return host_alloc(pp, bytesize, Flags);
}

SHIM_API CUresult cuMemFreeHost(void *p)
{
	SHIM_ENTRY();
	struct shim_host_range r;

	if (!p || host_range_remove((uintptr_t)p, true, &r))
		return CUDA_ERROR_INVALID_VALUE;
	if (r.memfd >= 0 || r.in_bar) {
		struct wire_mem_host_unshare_req req = { .address = r.base };
		struct wire_mem_host_unshare_rep rep;
		CUresult res = rpc_mem_host_unshare(&req, &rep);

		/* The BAR's pages stay mapped: the range is free for the next. */
		if (r.memfd >= 0) {
			munmap(p, r.size);
			close(r.memfd);
		}
		return res;
	}
	if (r.mirrored) {
		struct wire_mem_free_req req = { .address = r.base };
		struct wire_mem_free_rep rep;

		/* The host's unpushed writes go with the memory. */
		managed_free(r.base);
		return rpc_mem_free(&req, &rep);
	}
	free(p);
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
	SHIM_ENTRY();
	struct shim_host_range r;

	if (!pFlags || !host_range_find((uintptr_t)p, &r))
		return CUDA_ERROR_INVALID_VALUE;
	*pFlags = r.flags;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	SHIM_ENTRY();
	struct shim_host_range r;

	if (!pdptr || Flags || !host_range_find((uintptr_t)p, &r))
		return CUDA_ERROR_INVALID_VALUE;
	/* Only memory the worker maps, or mirrors in device memory, is
	 * reachable from a kernel. */
	if (r.memfd < 0 && !r.in_bar && !r.mirrored)
		return CUDA_ERROR_NOT_SUPPORTED;
	*pdptr = r.device_addr + ((uintptr_t)p - r.base);
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	SHIM_ENTRY();
	struct shim_host_range range = { .base = (uintptr_t)p, .size = bytesize, .flags = Flags, .memfd = -1 };
	struct shim_host_range gone;
	uint64_t dev;
	CUresult res;
	int ret;

	if (!p || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	/* Known first: a second registration is refused before any copy. */
	ret = host_range_add(&range);
	if (ret == -EEXIST)
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	if (ret)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!(Flags & CU_MEMHOSTREGISTER_DEVICEMAP))
		return CUDA_SUCCESS;
	/* The application's pages cannot be shared with the worker on any
	 * transport: kernels reach a device copy (registered.c). */
	res = registered_map((uintptr_t)p, bytesize, &dev);
	if (res != CUDA_SUCCESS) {
		host_range_remove((uintptr_t)p, false, &gone);
		return res;
	}
	host_range_set_device(range.base, dev);
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemHostUnregister(void *p)
{
	SHIM_ENTRY();
	struct shim_host_range r;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (host_range_remove((uintptr_t)p, false, &r))
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	return r.mirrored ? registered_unmap(r.base) : CUDA_SUCCESS;
}

/* Pointer attributes */

struct ptr_info {
	unsigned type;                  /* 0: unknown to CUDA */
	bool managed;
	uint64_t ctx;
	int device;
	uint64_t base, bytes, buffer_id;
	uint64_t device_ptr;            /* where a kernel reaches the pointer */
	unsigned host_flags;
};

static CUresult ptr_info_get(CUdeviceptr ptr, struct ptr_info *info)
{
	struct shim_host_range r;

	memset(info, 0, sizeof(*info));
	info->device_ptr = ptr;
	/* First: mirrored pinned memory lies in the arena. */
	if (host_range_find((uintptr_t)ptr, &r)) {
		CUdevice dev = 0;

		info->type = CU_MEMORYTYPE_HOST;
		info->ctx = ctx_current();
		if (cuCtxGetDevice(&dev) == CUDA_SUCCESS)
			info->device = dev;
		info->base = r.base;
		info->bytes = r.size;
		/* Distinct from device buffer ids, which the worker numbers from 1. */
		info->buffer_id = (1ull << 63) | r.base;
		info->host_flags = r.flags;
		if (r.device_addr)
			info->device_ptr = r.device_addr + (ptr - r.base);
		return CUDA_SUCCESS;
	}
	if (managed_info(ptr, &info->base, &info->bytes)) {
		/* Managed memory answers as device memory the host may also
		 * dereference; a variable is its own buffer. */
		info->managed = true;
		info->type = CU_MEMORYTYPE_DEVICE;
		info->ctx = ctx_current();
		info->buffer_id = (1ull << 62) | info->base;
		if (!rpc_arena_contains(ptr, 1))
			return CUDA_SUCCESS;
	}
	if (rpc_arena_contains(ptr, 1)) {
		struct wire_pointer_get_info_req req = { .address = ptr };
		struct wire_pointer_get_info_rep rep;
		CUresult res = rpc_pointer_get_info(&req, &rep);

		if (res != CUDA_SUCCESS)
			return res;
		info->type = rep.memory_type;
		info->ctx = rep.ctx;
		info->device = rep.device;
		if (!info->managed) {
			info->base = rep.base;
			info->bytes = rep.bytes;
		}
		info->buffer_id = rep.buffer_id;
	}
	return CUDA_SUCCESS;
}

/* One attribute into @data; unknown memory answers as the driver does for
 * unregistered host memory: an error from cuPointerGetAttribute, defaults
 * from cuPointerGetAttributes (@lenient). */
static CUresult ptr_attribute(const struct ptr_info *in, CUdeviceptr ptr,
			      CUpointer_attribute attr, void *data, bool lenient)
{
	bool known = in->type != 0;

	if (!known && !lenient)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = known ? (CUcontext)(uintptr_t)in->ctx : NULL;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = in->type;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = known ? in->device_ptr : 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (in->type == CU_MEMORYTYPE_DEVICE && !in->managed && !lenient)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = in->type == CU_MEMORYTYPE_HOST || in->managed ? (void *)(uintptr_t)ptr
									      : NULL;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(unsigned *)data = in->managed;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
		*(unsigned *)data = 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(unsigned *)data = known;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
		*(unsigned long long *)data = in->buffer_id;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = known ? in->device : -2;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		if (attr == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR)
			*(void **)data = (void *)(uintptr_t)in->base;
		else
			*(CUdeviceptr *)data = in->base;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
		*(size_t *)data = (size_t)in->bytes;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		*(unsigned long long *)data = 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
		*(unsigned *)data = known ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE : 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		*(CUmemoryPool *)data = NULL;
		return CUDA_SUCCESS;
	default:
		return lenient ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	}
}

SHIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	SHIM_ENTRY();
	struct ptr_info info;
	CUresult res;

	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (attribute == CU_POINTER_ATTRIBUTE_P2P_TOKENS)
		return CUDA_ERROR_NOT_SUPPORTED;
	res = ptr_info_get(ptr, &info);
	if (res != CUDA_SUCCESS)
		return res;
	return ptr_attribute(&info, ptr, attribute, data, false);
}

SHIM_API CUresult cuPointerGetAttributes(unsigned int numAttributes,
					 CUpointer_attribute *attributes, void **data,
					 CUdeviceptr ptr)
{
	SHIM_ENTRY();
	struct ptr_info info;
	CUresult res;

	if (!numAttributes || !attributes || !data)
		return CUDA_ERROR_INVALID_VALUE;
	res = ptr_info_get(ptr, &info);
	if (res != CUDA_SUCCESS)
		return res;
	for (unsigned i = 0; i < numAttributes; i++) {
		if (!data[i] || attributes[i] == CU_POINTER_ATTRIBUTE_P2P_TOKENS)
			continue;
		res = ptr_attribute(&info, ptr, attributes[i], data[i], true);
		if (res != CUDA_SUCCESS)
			return res;
	}
	return CUDA_SUCCESS;
}

/* Copies */

/* Is [p, p + n) inside one buffer the worker maps? */
static bool host_shared(const void *p, size_t n)
{
	struct shim_host_range r;

	/* Only shm shares buffers: no lock and list walk per copy elsewhere. */
	return p && shim_process()->conn.shm_on && host_range_find((uintptr_t)p, &r) && (r.memfd >= 0 || r.in_bar) &&
	       n <= r.size - ((uintptr_t)p - r.base);
}


/* Device work on [dst) and from [src) (0: none) is about to be sent: the
 * coherence point of managed memory (guest-shim/managed.c). */
static CUresult memory_managed_point(uint64_t dst, uint64_t src, uint64_t stream)
{
	if (dst && (managed_contains(dst) || registered_contains(dst)))
		return managed_device_access(true, stream);
	if (src && (managed_contains(src) || registered_contains(src)))
		return managed_device_access(false, stream);
	return CUDA_SUCCESS;
}

/* An async copy between the device and host memory on a stream that
 * captures becomes a host copy node of the capture (*@captured): the
 * graph reads or writes the host range when it runs, as natively. */
static CUresult copy_capture(uint32_t end, const void *host, uint64_t dev, size_t n, uint64_t stream,
			     bool *captured)
{
	struct shim_host_copy h = {
		.end = end, .base = (uintptr_t)host, .pitch = n, .layer_rows = 1, .width = n, .height = 1, .depth = 1,
	};
	struct wire_memcpy_host_capture_req req = {
		.stream = stream, .host_end = end, .device = dev, .bytes = n,
	};
	struct wire_memcpy_host_capture_rep rep;
	CUresult res;

	*captured = false;
	if (!n || !capture_active())
		return CUDA_SUCCESS;
	res = hostfn_copy_token(&h, &req.token);
	if (res == CUDA_SUCCESS)
		res = rpc_memcpy_host_capture(&req, &rep);
	if (res == CUDA_SUCCESS)
		*captured = rep.captured != 0;
	return res;
}

CUresult memory_copy_htod(uint64_t dst, const void *src, size_t n, uint64_t stream, bool async)
{
	const uint8_t *s = src;
	CUresult res;
	bool staged;

	if (!src && n)
		return CUDA_ERROR_INVALID_VALUE;
	/* Managed memory's host side is never read by the shim: the device
	 * copy is (after the host's writes are pushed). */
	if (managed_contains((uintptr_t)src))
		return memory_copy_dtod(dst, (uintptr_t)src, n, stream, async);
	res = memory_managed_point(dst, 0, stream);
	if (res != CUDA_SUCCESS)
		return res;
	if (async) {
		bool captured;

		res = copy_capture(GRAPH_COPY_HOST_SRC, src, dst, n, stream, &captured);
		if (res != CUDA_SUCCESS || captured)
			return res;
	}
	if (host_shared(src, n)) {
		/* The worker's driver reads the guest's pages itself. */
		struct wire_memcpy_htod_shared_req req = {
			.dst = dst, .src = (uintptr_t)src, .bytes = n, .stream = stream, .async = async,
		};
		struct wire_memcpy_htod_shared_rep rep;

		return async ? rpc_memcpy_htod_shared_defer(&req) : rpc_memcpy_htod_shared(&req, &rep);
	}
	res = staging_copy_htod(dst, src, n, stream, async, &staged);
	if (staged)
		return res;
	while (n) {
		size_t piece = n < WIRE_COPY_PIECE ? n : WIRE_COPY_PIECE;
		struct wire_memcpy_htod_req req = {
			.dst = dst, .stream = stream, .async = async,
			.data = { .ptr = s, .len = (uint32_t)piece },
		};
		struct wire_memcpy_htod_rep rep;

		/* An async copy from pageable memory takes the bytes now and runs later. */
		res = async && shim_process()->batching.lazy ? rpc_memcpy_htod_defer(&req)
						    : rpc_memcpy_htod(&req, &rep);
		if (res != CUDA_SUCCESS)
			return res;
		dst += piece;
		s += piece;
		n -= piece;
	}
	return CUDA_SUCCESS;
}

CUresult memory_copy_dtoh(void *dst, uint64_t src, size_t n, uint64_t stream, bool async)
{
	uint8_t *d = dst;
	CUresult res;
	bool staged;

	if (!dst && n)
		return CUDA_ERROR_INVALID_VALUE;
	if (managed_contains((uintptr_t)dst))
		return memory_copy_dtod((uintptr_t)dst, src, n, stream, async);
	res = memory_managed_point(0, src, stream);
	if (res != CUDA_SUCCESS)
		return res;
	if (async) {
		bool captured;

		res = copy_capture(GRAPH_COPY_HOST_DST, dst, src, n, stream, &captured);
		if (res != CUDA_SUCCESS || captured)
			return res;
	}
	if (host_shared(dst, n)) {
		/* DMA into the guest's pages; an async one completes in stream
		 * order, like the driver's, with no reply to wait for. */
		struct wire_memcpy_dtoh_shared_req req = {
			.dst = (uintptr_t)dst, .src = src, .bytes = n, .stream = stream, .async = async,
		};
		struct wire_memcpy_dtoh_shared_rep rep;

		if (async)
			return rpc_memcpy_dtoh_shared_defer(&req);
		res = rpc_memcpy_dtoh_shared(&req, &rep);
		if (res == CUDA_SUCCESS)
			completion_note_stream(stream);
		return res;
	}
	res = staging_copy_dtoh(dst, src, n, stream, async, &staged);
	while (n && !staged) {
		size_t piece = n < WIRE_COPY_PIECE ? n : WIRE_COPY_PIECE;
		struct wire_memcpy_dtoh_req req = {
			.src = src, .bytes = piece, .stream = stream, .async = async,
		};
		struct wire_memcpy_dtoh_rep rep;

		res = rpc_memcpy_dtoh(&req, &rep);
		if (res != CUDA_SUCCESS)
			return res;
		if (rep.data.len != piece) {
			pr_err("memcpy_dtoh: asked %zu bytes, got %u", piece, rep.data.len);
			return CUDA_ERROR_UNKNOWN;
		}
		memcpy(d, rep.data.ptr, piece);
		src += piece;
		d += piece;
		n -= piece;
	}
	if (res != CUDA_SUCCESS)
		return res;
	/* The last piece's reply came when the work queued on the stream
	 * before the copy had ended (the worker waits for it; for a
	 * synchronous copy, on the default stream it names): it may answer the
	 * next synchronisation. */
	if (!staged)
		completion_note_stream(stream);
	/* A synchronous copy to the host waited for the work before it. */
	return async ? res : registered_synchronized(false);
}

CUresult memory_copy_dtod(uint64_t dst, uint64_t src, size_t n, uint64_t stream, bool async)
{
	struct wire_memcpy_dtod_req req = {
		.dst = dst, .src = src, .bytes = n, .stream = stream, .async = async,
	};
	struct wire_memcpy_dtod_rep rep;
	CUresult res;

	if (!n)
		return CUDA_SUCCESS;
	res = memory_managed_point(dst, src, stream);
	if (res != CUDA_SUCCESS)
		return res;
	if (async && shim_process()->batching.lazy)
		return rpc_memcpy_dtod_defer(&req);
	return rpc_memcpy_dtod(&req, &rep);
}

/* cuMemcpy: unified addressing, so the arena tells device from host. */
CUresult memory_copy(uint64_t dst, uint64_t src, size_t n, uint64_t stream, bool async)
{
	bool dst_dev = rpc_arena_contains(dst, 1) || managed_contains(dst);
	bool src_dev = rpc_arena_contains(src, 1) || managed_contains(src);

	if (!n)
		return CUDA_SUCCESS;
	if (dst_dev && src_dev)
		return memory_copy_dtod(dst, src, n, stream, async);
	if (dst_dev)
		return memory_copy_htod(dst, (const void *)(uintptr_t)src, n, stream, async);
	if (src_dev)
		return memory_copy_dtoh((void *)(uintptr_t)dst, src, n, stream, async);
	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	/* Host to host: the driver copies on the CPU too, in stream order; the
	 * stream's earlier work cannot touch guest host memory, so copy now. */
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

#define S(h, pt) shim_stream((h), (pt))

SHIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	SHIM_ENTRY();
	return n ? memory_copy_htod(dst, src, n, 0, false) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
	SHIM_ENTRY();
	return n ? memory_copy_htod(dst, src, n, S(NULL, true), false) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return n ? memory_copy_htod(dst, src, n, S(s, false), true) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return n ? memory_copy_htod(dst, src, n, S(s, true), true) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	SHIM_ENTRY();
	return n ? memory_copy_dtoh(dst, src, n, 0, false) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
	SHIM_ENTRY();
	return n ? memory_copy_dtoh(dst, src, n, S(NULL, true), false) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return n ? memory_copy_dtoh(dst, src, n, S(s, false), true) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return n ? memory_copy_dtoh(dst, src, n, S(s, true), true) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	SHIM_ENTRY();
	return memory_copy_dtod(dst, src, n, 0, false);
}

SHIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	SHIM_ENTRY();
	return memory_copy_dtod(dst, src, n, S(NULL, true), false);
}

SHIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return memory_copy_dtod(dst, src, n, S(s, false), true);
}

SHIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return memory_copy_dtod(dst, src, n, S(s, true), true);
}

SHIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	SHIM_ENTRY();
	return memory_copy(dst, src, n, 0, false);
}

SHIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	SHIM_ENTRY();
	return memory_copy(dst, src, n, S(NULL, true), false);
}

SHIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return memory_copy(dst, src, n, S(s, false), true);
}

SHIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return memory_copy(dst, src, n, S(s, true), true);
}

/* Memsets */

static CUresult memory_set(uint64_t dst, uint32_t value, uint32_t width, size_t count,
			   uint64_t stream, bool async)
{
	struct wire_memset_req req = {
		.dst = dst, .value = value, .width = width, .count = count,
		.stream = stream, .async = async,
	};
	struct wire_memset_rep rep;
	CUresult res;

	if (!count)
		return CUDA_SUCCESS;
	res = memory_managed_point(dst, 0, stream);
	if (res != CUDA_SUCCESS)
		return res;
	if (async && shim_process()->batching.lazy)
		return rpc_memset_defer(&req);
	return rpc_memset(&req, &rep);
}

SHIM_API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
	SHIM_ENTRY();
	return memory_set(d, v, 1, n, 0, false);
}

SHIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n)
{
	SHIM_ENTRY();
	return memory_set(d, v, 1, n, S(NULL, true), false);
}

SHIM_API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n)
{
	SHIM_ENTRY();
	return memory_set(d, v, 2, n, 0, false);
}

SHIM_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n)
{
	SHIM_ENTRY();
	return memory_set(d, v, 2, n, S(NULL, true), false);
}

SHIM_API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n)
{
	SHIM_ENTRY();
	return memory_set(d, v, 4, n, 0, false);
}

SHIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n)
{
	SHIM_ENTRY();
	return memory_set(d, v, 4, n, S(NULL, true), false);
}

SHIM_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return memory_set(d, v, 1, n, S(s, false), true);
}

SHIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return memory_set(d, v, 1, n, S(s, true), true);
}

SHIM_API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return memory_set(d, v, 2, n, S(s, false), true);
}

SHIM_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return memory_set(d, v, 2, n, S(s, true), true);
}

SHIM_API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return memory_set(d, v, 4, n, S(s, false), true);
}

SHIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
	SHIM_ENTRY();
	return memory_set(d, v, 4, n, S(s, true), true);
}
