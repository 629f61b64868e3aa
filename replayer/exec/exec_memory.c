/* Device memory: allocation in the arena, copies and memsets.
 *
 * Every device range the guest names is checked against the arena's live
 * allocations (or a module global) before the backend sees it: a stray
 * pointer is the guest's CUDA_ERROR_INVALID_VALUE, never a fault here. */
#define LOG_PREFIX "exec: "
#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"


CUresult exec_mem_map(struct exec *ex, uint64_t bytes, uint64_t *addr)
{
	CUresult res;

	if (bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* The quota counts what is mapped, granularity included: that is what the device loses. */
	if (ex->cfg.quota && (bytes > ex->cfg.quota ||
			      exec_mem_used(ex) > ex->cfg.quota - bytes))
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = arena_alloc(exec_arena_current(ex), bytes, addr);
	if (res != CUDA_SUCCESS)
		return res;
	if (ex->cfg.quota && exec_mem_used(ex) > ex->cfg.quota) {
		arena_free(exec_arena_current(ex), *addr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	exec_mem_publish(ex);
	return CUDA_SUCCESS;
}

CUresult exec_mem_unmap(struct exec *ex, uint64_t addr)
{
	struct arena *a = exec_arena_of(ex, addr, NULL);
	const struct arena_alloc *al = a ? arena_find(a, addr) : NULL;
	CUresult res;

	/* Another session's memory is closed with cuIpcCloseMemHandle, not freed. */
	if (al && al->imported)
		return CUDA_ERROR_INVALID_VALUE;

	/* Exported memory stops being openable; sessions that opened it keep it. */
	exec_ipc_unexport(ex, addr);
	res = a ? arena_free(a, addr) : CUDA_ERROR_INVALID_VALUE;

	if (res == CUDA_SUCCESS)
		exec_journal_region_drop(ex, addr);
	exec_mem_publish(ex);
	return res;
}

/* The arena's VMM calls are allowed during a stream capture where the
 * driver's cuMemAlloc is not: in global and thread-local mode the H200's
 * driver answers CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the
 * capture. Asking it with a small allocation makes its rules, and its
 * invalidation, the guest's; in relaxed mode nothing is asked. */
static CUresult capture_allows_alloc(struct exec *ex)
{
	CUdeviceptr probe = 0;
	CUresult res;

	if (!exec_capture_active(ex) || ex->graphs.capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_SUCCESS;
	res = ex->be->cuMemAlloc(&probe, 1);
	if (res == CUDA_SUCCESS)
		ex->be->cuMemFree(probe);
	return res;
}

CUresult exec_mem_alloc(struct exec *ex, const struct wire_mem_alloc_req *req,
			struct wire_mem_alloc_rep *rep)
{
	uint64_t addr = 0;
	CUresult res = capture_allows_alloc(ex);

	if (res == CUDA_SUCCESS)
		res = exec_mem_map(ex, req->bytes, &addr);
	if (res != CUDA_SUCCESS)
		return res;
	rep->address = addr;
	exec_journal_region(ex, addr, req->bytes);
	return CUDA_SUCCESS;
}

/* Managed memory is device memory of the arena like cuMemAlloc's; the guest
 * keeps its host mirror coherent (guest-shim/managed.c). It starts zeroed,
 * as managed memory does natively on first touch, so that the guest's
 * mirror can start as zero pages without fetching them. */
CUresult exec_mem_alloc_managed(struct exec *ex, const struct wire_mem_alloc_managed_req *req,
				struct wire_mem_alloc_managed_rep *rep)
{
	uint64_t addr = 0;
	CUresult res;

	if (req->flags != CU_MEM_ATTACH_GLOBAL && req->flags != CU_MEM_ATTACH_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_mem_map(ex, req->bytes, &addr);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuMemsetD8(addr, 0, req->bytes);
	if (res != CUDA_SUCCESS) {
		exec_mem_unmap(ex, addr);
		return res;
	}
	rep->address = addr;
	exec_journal_region_kind(ex, addr, req->bytes, EXEC_REGION_MANAGED);
	return CUDA_SUCCESS;
}

CUresult exec_mem_free(struct exec *ex, const struct wire_mem_free_req *req,
		       struct wire_mem_free_rep *rep)
{
	CUresult res;

	if (req->address == 0)
		return CUDA_SUCCESS;    /* cuMemFree(0) is a no-op */
	/* A graph allocation stays mapped while a graph holds its node. */
	if (exec_graph_alloc_free(ex, req->address))
		return CUDA_SUCCESS;
	/* Freeing memory a kernel may still use: the driver synchronises too.
	 * During a capture that synchronisation is what the driver refuses. */
	res = ex->be->cuCtxSynchronize();
	if (res == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || res == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
		return res;
	/* A pool's block may be freed here too (the driver allows it). */
	exec_pool_alloc_forget(ex, req->address);
	return exec_mem_unmap(ex, req->address);
}

CUresult exec_mem_get_info(struct exec *ex, const struct wire_mem_get_info_req *req,
			   struct wire_mem_get_info_rep *rep)
{
	size_t free_b = 0, total = 0;
	CUresult res = ex->be->cuMemGetInfo(&free_b, &total);

	if (res != CUDA_SUCCESS)
		return res;
	if (ex->cfg.quota) {
		uint64_t used = exec_mem_used(ex);
		uint64_t left = used < ex->cfg.quota ? ex->cfg.quota - used : 0;

		total = ex->cfg.quota < total ? ex->cfg.quota : total;
		free_b = left < free_b ? left : free_b;
	}
	rep->free = free_b;
	rep->total = total;
	return CUDA_SUCCESS;
}

CUresult exec_mem_get_address_range(struct exec *ex, const struct wire_mem_get_address_range_req *req,
				    struct wire_mem_get_address_range_rep *rep)
{
	const struct arena_alloc *al = exec_alloc_find(ex, req->address, NULL);
	const struct exec_vmm_map *m = al ? NULL : exec_vmm_find(ex, req->address);

	if (!al && !m)
		return CUDA_ERROR_NOT_FOUND;
	/* A VMM address answers with its mapping, as the driver does. */
	rep->base = al ? al->addr : m->addr;
	rep->bytes = al ? al->size : m->size;
	return CUDA_SUCCESS;
}

CUresult exec_pointer_get_info(struct exec *ex, const struct wire_pointer_get_info_req *req,
			       struct wire_pointer_get_info_rep *rep)
{
	unsigned d = 0;
	const struct arena_alloc *al = exec_alloc_find(ex, req->address, &d);
	/* VMM mappings live on device 0 (exec_vmm.c). */
	const struct exec_vmm_map *m = al ? NULL : exec_vmm_find(ex, req->address);

	if (!al && !m)
		return CUDA_ERROR_INVALID_VALUE;
	rep->memory_type = CU_MEMORYTYPE_DEVICE;
	rep->ctx = ex->dev.list[d].ctx;
	rep->device = (int32_t)d;
	rep->base = al ? al->addr : m->addr;
	rep->bytes = al ? al->size : m->size;
	rep->buffer_id = al ? al->id : m->buffer_id;
	rep->flags = 0;
	return CUDA_SUCCESS;
}

CUresult exec_memcpy_htod(struct exec *ex, const struct wire_memcpy_htod_req *req,
			  struct wire_memcpy_htod_rep *rep)
{
	uint64_t dst;
	CUstream s;
	CUresult res;

	if (!exec_device_range(ex, req->dst, req->data.len, &dst))
		return CUDA_ERROR_INVALID_VALUE;
	if (!req->async)
		return ex->be->cuMemcpyHtoD(dst, req->data.ptr, req->data.len);
	res = exec_host_copy_stream(ex, req->stream, &s);
	if (res != CUDA_SUCCESS)
		return res;
	/* The payload buffer is reused by the next request; a pageable source is
	 * consumed before the driver returns, as for any pageable async copy. */
	return ex->be->cuMemcpyHtoDAsync(dst, req->data.ptr, req->data.len, s);
}

CUresult exec_memcpy_dtoh(struct exec *ex, const struct wire_memcpy_dtoh_req *req,
			  struct wire_memcpy_dtoh_rep *rep)
{
	uint64_t src;
	void *buf;
	CUstream s;
	CUresult res;

	if (req->bytes > WIRE_COPY_PIECE || !exec_device_range(ex, req->src, req->bytes, &src)) {
		pr_debug("memcpy_dtoh: 0x%llx +%llu is not the session's", (unsigned long long)req->src,
			 (unsigned long long)req->bytes);
		for (unsigned i = 0; i < ex->globals.count; i++)
			if (req->src >= ex->globals.ranges[i].addr && req->src - ex->globals.ranges[i].addr < ex->globals.ranges[i].size)
				pr_debug("memcpy_dtoh: it starts in 0x%llx +%llu",
					 (unsigned long long)ex->globals.ranges[i].addr, (unsigned long long)ex->globals.ranges[i].size);
		return CUDA_ERROR_INVALID_VALUE;
	}
	buf = exec_copy_buffer(ex, req->bytes);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!req->async) {
		res = ex->be->cuMemcpyDtoH(buf, src, req->bytes);
	} else {
		res = exec_host_copy_stream(ex, req->stream, &s);
		if (res == CUDA_SUCCESS)
			res = ex->be->cuMemcpyDtoHAsync(buf, src, req->bytes, s);
		/* The bytes travel in the reply, so the copy must be done by then. */
		if (res == CUDA_SUCCESS)
			res = ex->be->cuStreamSynchronize(s);
	}
	if (res == CUDA_SUCCESS)
		rep->data = (struct wire_blob){ buf, (uint32_t)req->bytes };
	return res;
}

CUresult exec_memcpy_dtod(struct exec *ex, const struct wire_memcpy_dtod_req *req,
			  struct wire_memcpy_dtod_rep *rep)
{
	CUstream s;
	CUresult res;

	if (!req->async)
		return exec_copy_dtod(ex, req->dst, req->src, req->bytes, NULL, false);
	res = exec_stream_real(ex, req->stream, &s);
	if (res != CUDA_SUCCESS)
		return res;
	return exec_copy_dtod(ex, req->dst, req->src, req->bytes, s, true);
}

CUresult exec_memset(struct exec *ex, const struct wire_memset_req *req,
		     struct wire_memset_rep *rep)
{
	CUstream s = NULL;
	CUresult res;
	uint64_t dst;

	if ((req->width != 1 && req->width != 2 && req->width != 4) ||
	    req->count > UINT64_MAX / req->width ||
	    !exec_device_range(ex, req->dst, req->count * req->width, &dst) ||
	    req->dst % req->width)
		return CUDA_ERROR_INVALID_VALUE;
	if (req->async) {
		res = exec_stream_real(ex, req->stream, &s);
		if (res != CUDA_SUCCESS)
			return res;
	}
	switch (req->width) {
	case 1:
		return req->async ? ex->be->cuMemsetD8Async(dst, (unsigned char)req->value, req->count, s)
				  : ex->be->cuMemsetD8(dst, (unsigned char)req->value, req->count);
	case 2:
		return req->async ? ex->be->cuMemsetD16Async(dst, (unsigned short)req->value, req->count, s)
				  : ex->be->cuMemsetD16(dst, (unsigned short)req->value, req->count);
	default:
		return req->async ? ex->be->cuMemsetD32Async(dst, req->value, req->count, s)
				  : ex->be->cuMemsetD32(dst, req->value, req->count);
	}
}
