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

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* Allocation and queries */

SHIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
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

SHIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	struct wire_mem_free_req req = { .address = dptr };
	struct wire_mem_free_rep rep;

	return rpc_mem_free(&req, &rep);
}

SHIM_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
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

	pthread_mutex_lock(&p->cache_lock);
	for (r = p->host_ranges; r; r = r->next) {
		if (addr >= r->base && addr - r->base < r->size) {
			*out = *r;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&p->cache_lock);
	return found;
}

static int host_range_add(uintptr_t base, size_t size, unsigned flags, bool owned)
{
	struct shim_process *p = shim_process();
	struct shim_host_range *r, *it;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->base = base;
	r->size = size;
	r->flags = flags;
	r->owned = owned;
	pthread_mutex_lock(&p->cache_lock);
	for (it = p->host_ranges; it; it = it->next) {
		if (base < it->base + it->size && it->base < base + size) {
			pthread_mutex_unlock(&p->cache_lock);
			free(r);
			return -EEXIST;
		}
	}
	r->next = p->host_ranges;
	p->host_ranges = r;
	pthread_mutex_unlock(&p->cache_lock);
	return 0;
}

/* Removes the range starting exactly at @base and owned as asked. */
static int host_range_remove(uintptr_t base, bool owned)
{
	struct shim_process *p = shim_process();
	struct shim_host_range **pp;
	int ret = -ENOENT;

	pthread_mutex_lock(&p->cache_lock);
	for (pp = &p->host_ranges; *pp; pp = &(*pp)->next) {
		if ((*pp)->base == base && (*pp)->owned == owned) {
			struct shim_host_range *r = *pp;

			*pp = r->next;
			free(r);
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&p->cache_lock);
	return ret;
}

void host_range_reset(struct shim_process *p)
{
	/* The child keeps its copy of the memory (fork duplicated it); only the
	 * bookkeeping goes, as the new session knows nothing of it. */
	while (p->host_ranges) {
		struct shim_host_range *r = p->host_ranges;

		p->host_ranges = r->next;
		free(r);
	}
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
	if (posix_memalign(&mem, (size_t)page, size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (host_range_add((uintptr_t)mem, size, flags, true)) {
		free(mem);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = mem;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return host_alloc(pp, bytesize, 0);
}

SHIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
				CU_MEMHOSTALLOC_WRITECOMBINED))
		return CUDA_ERROR_INVALID_VALUE;
	return host_alloc(pp, bytesize, Flags);
}

SHIM_API CUresult cuMemFreeHost(void *p)
{
	if (!p || host_range_remove((uintptr_t)p, true))
		return CUDA_ERROR_INVALID_VALUE;
	free(p);
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
	struct shim_host_range r;

	if (!pFlags || !host_range_find((uintptr_t)p, &r))
		return CUDA_ERROR_INVALID_VALUE;
	*pFlags = r.flags;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	int ret;

	if (!p || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	ret = host_range_add((uintptr_t)p, bytesize, Flags, false);
	if (ret == -EEXIST)
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	return ret ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemHostUnregister(void *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	return host_range_remove((uintptr_t)p, false) ? CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
						       : CUDA_SUCCESS;
}

/* Pointer attributes */

struct ptr_info {
	unsigned type;                  /* 0: unknown to CUDA */
	uint64_t ctx;
	int device;
	uint64_t base, bytes, buffer_id;
	unsigned host_flags;
};

static CUresult ptr_info_get(CUdeviceptr ptr, struct ptr_info *info)
{
	struct shim_host_range r;

	memset(info, 0, sizeof(*info));
	if (rpc_arena_contains(ptr, 1)) {
		struct wire_pointer_get_info_req req = { .address = ptr };
		struct wire_pointer_get_info_rep rep;
		CUresult res = rpc_pointer_get_info(&req, &rep);

		if (res != CUDA_SUCCESS)
			return res;
		info->type = rep.memory_type;
		info->ctx = rep.ctx;
		info->device = rep.device;
		info->base = rep.base;
		info->bytes = rep.bytes;
		info->buffer_id = rep.buffer_id;
		return CUDA_SUCCESS;
	}
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
		*(CUdeviceptr *)data = known ? ptr : 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (in->type == CU_MEMORYTYPE_DEVICE && !lenient)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = in->type == CU_MEMORYTYPE_HOST ? (void *)(uintptr_t)ptr : NULL;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
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

CUresult memory_copy_htod(uint64_t dst, const void *src, size_t n, uint64_t stream, bool async)
{
	const uint8_t *s = src;

	if (!src && n)
		return CUDA_ERROR_INVALID_VALUE;
	while (n) {
		size_t piece = n < WIRE_COPY_PIECE ? n : WIRE_COPY_PIECE;
		struct wire_memcpy_htod_req req = {
			.dst = dst, .stream = stream, .async = async,
			.data = { .ptr = s, .len = (uint32_t)piece },
		};
		struct wire_memcpy_htod_rep rep;
		/* An async copy from pageable memory takes the bytes now and runs later. */
		CUresult res = async && shim_process()->lazy ? rpc_memcpy_htod_defer(&req)
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

	if (!dst && n)
		return CUDA_ERROR_INVALID_VALUE;
	while (n) {
		size_t piece = n < WIRE_COPY_PIECE ? n : WIRE_COPY_PIECE;
		struct wire_memcpy_dtoh_req req = {
			.src = src, .bytes = piece, .stream = stream, .async = async,
		};
		struct wire_memcpy_dtoh_rep rep;
		CUresult res = rpc_memcpy_dtoh(&req, &rep);

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
	return CUDA_SUCCESS;
}

static CUresult memory_copy_dtod(uint64_t dst, uint64_t src, size_t n, uint64_t stream, bool async)
{
	struct wire_memcpy_dtod_req req = {
		.dst = dst, .src = src, .bytes = n, .stream = stream, .async = async,
	};
	struct wire_memcpy_dtod_rep rep;

	if (!n)
		return CUDA_SUCCESS;
	if (async && shim_process()->lazy)
		return rpc_memcpy_dtod_defer(&req);
	return rpc_memcpy_dtod(&req, &rep);
}

/* cuMemcpy: unified addressing, so the arena tells device from host. */
static CUresult memory_copy(uint64_t dst, uint64_t src, size_t n, uint64_t stream, bool async)
{
	bool dst_dev = rpc_arena_contains(dst, 1), src_dev = rpc_arena_contains(src, 1);

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
	return n ? memory_copy_htod(dst, src, n, 0, false) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
	return n ? memory_copy_htod(dst, src, n, S(NULL, true), false) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return n ? memory_copy_htod(dst, src, n, S(s, false), true) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return n ? memory_copy_htod(dst, src, n, S(s, true), true) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	return n ? memory_copy_dtoh(dst, src, n, 0, false) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
	return n ? memory_copy_dtoh(dst, src, n, S(NULL, true), false) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return n ? memory_copy_dtoh(dst, src, n, S(s, false), true) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return n ? memory_copy_dtoh(dst, src, n, S(s, true), true) : CUDA_SUCCESS;
}

SHIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return memory_copy_dtod(dst, src, n, 0, false);
}

SHIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return memory_copy_dtod(dst, src, n, S(NULL, true), false);
}

SHIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return memory_copy_dtod(dst, src, n, S(s, false), true);
}

SHIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return memory_copy_dtod(dst, src, n, S(s, true), true);
}

SHIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return memory_copy(dst, src, n, 0, false);
}

SHIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return memory_copy(dst, src, n, S(NULL, true), false);
}

SHIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return memory_copy(dst, src, n, S(s, false), true);
}

SHIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
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

	if (!count)
		return CUDA_SUCCESS;
	if (async && shim_process()->lazy)
		return rpc_memset_defer(&req);
	return rpc_memset(&req, &rep);
}

SHIM_API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
	return memory_set(d, v, 1, n, 0, false);
}

SHIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n)
{
	return memory_set(d, v, 1, n, S(NULL, true), false);
}

SHIM_API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n)
{
	return memory_set(d, v, 2, n, 0, false);
}

SHIM_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n)
{
	return memory_set(d, v, 2, n, S(NULL, true), false);
}

SHIM_API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n)
{
	return memory_set(d, v, 4, n, 0, false);
}

SHIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n)
{
	return memory_set(d, v, 4, n, S(NULL, true), false);
}

SHIM_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
	return memory_set(d, v, 1, n, S(s, false), true);
}

SHIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
	return memory_set(d, v, 1, n, S(s, true), true);
}

SHIM_API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
	return memory_set(d, v, 2, n, S(s, false), true);
}

SHIM_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
	return memory_set(d, v, 2, n, S(s, true), true);
}

SHIM_API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
	return memory_set(d, v, 4, n, S(s, false), true);
}

SHIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
	return memory_set(d, v, 4, n, S(s, true), true);
}
