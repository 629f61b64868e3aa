#define LOG_PREFIX "exec: "
#include "capture.h"
#include "exec.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int exec_open(struct exec *ex, struct backend *be, const struct exec_config *cfg,
	      struct session_slot *slot)
{
	CUcontext ctx;
	CUresult res;
	int count = 0, ret;

	memset(ex, 0, sizeof(*ex));
	ex->be = be;
	ex->cfg = *cfg;
	ex->slot = slot;
	ex->host_sock = -1;
	/* Pinned guest buffers hold host RAM down: at most half of it per session. */
	ex->host_bytes_max = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 2;
	res = be->cuInit(0);
	if (res == CUDA_SUCCESS)
		res = be->cuDeviceGetCount(&count);
	if (res != CUDA_SUCCESS || cfg->device < 0 || cfg->device >= count) {
		pr_err("device %d unavailable (error %d, %d devices)", cfg->device, res, count);
		return -ENODEV;
	}
	res = be->cuDeviceGet(&ex->device, cfg->device);
	if (res != CUDA_SUCCESS)
		return -ENODEV;
	/* The arena's VMM calls want a current context; the primary one is what
	 * cudart uses too, so the session retains it for its whole life. */
	res = be->cuDevicePrimaryCtxRetain(&ctx, ex->device);
	if (res != CUDA_SUCCESS || be->cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		pr_err("cannot create a context on device %d (error %d)", cfg->device, res);
		return -ENODEV;
	}
	ret = handle_table_create(&ex->handles);
	if (ret)
		goto out_ctx;
	ret = handle_table_add(ex->handles, HANDLE_CONTEXT, ctx, 0, NULL, &ex->primary_ctx);
	if (ret)
		goto out_handles;
	ex->ctx_current = ex->primary_ctx;
	ret = arena_open(be, ex->device, cfg->arena_base, cfg->arena_size, &ex->arena);
	if (ret) {
		pr_err("cannot reserve the arena at 0x%llx (%d)", (unsigned long long)cfg->arena_base, ret);
		goto out_handles;
	}
	if (slot)
		atomic_store_explicit(&slot->device, cfg->device, memory_order_relaxed);
	return 0;
out_handles:
	handle_table_destroy(ex->handles);
	ex->handles = NULL;
out_ctx:
	be->cuDevicePrimaryCtxRelease(ex->device);
	return ret;
}

static int entry_release(struct handle_entry *e, void *arg)
{
	if (e->kind == HANDLE_GRAPH || e->kind == HANDLE_GRAPH_EXEC) {
		exec_graph_info_free(arg, e);
	} else if (e->kind == HANDLE_FUNCTION || e->kind == HANDLE_KERNEL) {
		struct exec_kernel_info *ki = e->info;

		if (ki)
			exec_params_release(&ki->params);
		free(ki);
	} else if (e->kind == HANDLE_MEMPOOL) {
		exec_pool_release(e);
	} else {
		exec_array_entry_release(arg, e, false);
	}
	return 0;
}

void exec_close(struct exec *ex)
{
	if (ex->be && ex->be->cuCtxSynchronize && ex->handles)
		ex->be->cuCtxSynchronize();
	exec_host_shared_close(ex);
	capture_close(ex->capture);
	exec_journal_close(ex);
	arena_close(ex->arena);
	if (ex->handles) {
		handle_table_foreach(ex->handles, entry_release, ex);
		handle_table_destroy(ex->handles);
	}
	free(ex->extra);
	free(ex->pool_allocs);
	free(ex->copy_buf);
	free(ex->captures);
	free(ex->gallocs);
	memset(ex, 0, sizeof(*ex));
}

CUresult exec_context_switch(struct exec *ex, uint64_t ctx)
{
	struct handle_entry *e;
	CUresult res;

	if (ctx == ex->ctx_current)
		return CUDA_SUCCESS;
	if (ctx == 0) {
		res = ex->be->cuCtxSetCurrent(NULL);
	} else {
		e = handle_table_get(ex->handles, ctx, HANDLE_CONTEXT);
		if (!e)
			return CUDA_ERROR_INVALID_CONTEXT;
		res = ex->be->cuCtxSetCurrent(e->real);
	}
	if (res == CUDA_SUCCESS)
		ex->ctx_current = ctx;
	return res;
}

void exec_context_any(struct exec *ex)
{
	if (!ex->ctx_current)
		exec_context_switch(ex, ex->primary_ctx);
}

CUresult exec_stream_real(struct exec *ex, uint64_t handle, CUstream *out)
{
	struct handle_entry *e;

	/* The NULL stream and the two special handles pass through as the driver knows them. */
	if (handle <= (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD) {
		*out = (CUstream)(uintptr_t)handle;
		return CUDA_SUCCESS;
	}
	e = handle_table_get(ex->handles, handle, HANDLE_STREAM);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = e->real;
	return CUDA_SUCCESS;
}

CUresult exec_function_real(struct exec *ex, uint64_t handle, CUfunction *out,
			    const struct exec_params **params)
{
	struct handle_entry *e = handle_table_get(ex->handles, handle, handle_kind_of(handle));
	struct exec_kernel_info *ki;

	if (!e || (e->kind != HANDLE_FUNCTION && e->kind != HANDLE_KERNEL))
		return CUDA_ERROR_INVALID_HANDLE;
	ki = e->info;
	if (e->kind == HANDLE_KERNEL && !ki->function) {
		CUresult res;

		if (!ex->be->cuKernelGetFunction)
			return CUDA_ERROR_NOT_SUPPORTED;
		res = ex->be->cuKernelGetFunction(&ki->function, e->real);
		if (res != CUDA_SUCCESS)
			return res;
	}
	*out = e->kind == HANDLE_KERNEL ? ki->function : e->real;
	if (params)
		*params = &ki->params;
	return CUDA_SUCCESS;
}

bool exec_device_range_valid(struct exec *ex, uint64_t addr, uint64_t len)
{
	if (addr + len < addr)
		return false;
	if (arena_range_valid(ex->arena, addr, len))
		return true;
	for (unsigned i = 0; i < ex->extra_count; i++) {
		const struct exec_extra_range *r = &ex->extra[i];

		if (addr >= r->addr && addr - r->addr <= r->size && len <= r->size - (addr - r->addr))
			return true;
	}
	return false;
}

/* Kernel parameters may total 32 KiB; 4-byte minimum each bounds the count. */
#define PARAMS_MAX 8192

CUresult exec_params_query(struct exec *ex, CUfunction fn, CUkernel kernel,
			   struct exec_params *out)
{
	uint32_t cap = 16;
	CUresult res;

	memset(out, 0, sizeof(*out));
	out->offset = malloc(cap * sizeof(uint32_t));
	out->size = malloc(cap * sizeof(uint32_t));
	if (!out->offset || !out->size)
		goto out_nomem;
	for (;;) {
		size_t off = 0, size = 0;

		if (kernel)
			res = ex->be->cuKernelGetParamInfo ?
			      ex->be->cuKernelGetParamInfo(kernel, out->count, &off, &size) :
			      CUDA_ERROR_NOT_SUPPORTED;
		else
			res = ex->be->cuFuncGetParamInfo ?
			      ex->be->cuFuncGetParamInfo(fn, out->count, &off, &size) :
			      CUDA_ERROR_NOT_SUPPORTED;
		if (res == CUDA_ERROR_INVALID_VALUE)
			break;          /* past the last parameter */
		if (res != CUDA_SUCCESS) {
			exec_params_release(out);
			return res;
		}
		if (out->count == PARAMS_MAX || off > UINT32_MAX - size) {
			exec_params_release(out);
			return CUDA_ERROR_INVALID_IMAGE;
		}
		if (out->count == cap) {
			uint32_t *o, *s;

			cap *= 2;
			o = realloc(out->offset, cap * sizeof(uint32_t));
			if (o)
				out->offset = o;
			s = realloc(out->size, cap * sizeof(uint32_t));
			if (s)
				out->size = s;
			if (!o || !s)
				goto out_nomem;
		}
		out->offset[out->count] = (uint32_t)off;
		out->size[out->count] = (uint32_t)size;
		if (off + size > out->bytes)
			out->bytes = (uint32_t)(off + size);
		out->count++;
	}
	return CUDA_SUCCESS;
out_nomem:
	exec_params_release(out);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

void exec_params_release(struct exec_params *p)
{
	free(p->offset);
	free(p->size);
	memset(p, 0, sizeof(*p));
}

struct wire_blob exec_params_blob(const struct exec_params *p, uint32_t *buf)
{
	for (uint32_t i = 0; i < p->count; i++) {
		uint8_t *b = (uint8_t *)&buf[2 * i];

		for (int k = 0; k < 4; k++) {
			b[k] = (uint8_t)(p->offset[i] >> (8 * k));
			b[4 + k] = (uint8_t)(p->size[i] >> (8 * k));
		}
	}
	return (struct wire_blob){ (const uint8_t *)buf, p->count * 8 };
}

void exec_extra_range_add(struct exec *ex, uint64_t addr, uint64_t size, uint64_t owner)
{
	for (unsigned i = 0; i < ex->extra_count; i++)
		if (ex->extra[i].addr == addr && ex->extra[i].size == size)
			return;
	if (ex->extra_count == ex->extra_cap) {
		unsigned cap = ex->extra_cap ? ex->extra_cap * 2 : 16;
		struct exec_extra_range *n = realloc(ex->extra, cap * sizeof(*n));

		if (!n)
			return;
		ex->extra = n;
		ex->extra_cap = cap;
	}
	ex->extra[ex->extra_count++] = (struct exec_extra_range){ addr, size, owner };
}

void exec_extra_range_drop_owner(struct exec *ex, uint64_t owner)
{
	unsigned j = 0;

	for (unsigned i = 0; i < ex->extra_count; i++)
		if (ex->extra[i].owner != owner)
			ex->extra[j++] = ex->extra[i];
	ex->extra_count = j;
}

void *exec_copy_buffer(struct exec *ex, size_t size)
{
	if (size > ex->copy_cap) {
		void *p = realloc(ex->copy_buf, size);

		if (!p)
			return NULL;
		ex->copy_buf = p;
		ex->copy_cap = size;
	}
	return ex->copy_buf ? ex->copy_buf : (ex->copy_buf = malloc(1));
}
