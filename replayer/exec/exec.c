#define LOG_PREFIX "exec: "
#include "exec.h"
#include "wire_dispatch.h"
#include "wire_calls.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The backend devices of the session, in the guest's order (exec_config). */
static int devices_pick(struct exec *ex, const struct exec_config *cfg, int count)
{
	int list[EXEC_DEVICES_MAX], n = 0, first = -1;

	if (cfg->device_count) {
		for (unsigned i = 0; i < cfg->device_count && i < EXEC_DEVICES_MAX; i++) {
			if (cfg->devices[i] < 0 || cfg->devices[i] >= count) {
				pr_err("device %d unavailable (%d devices)", cfg->devices[i], count);
				return -ENODEV;
			}
			list[n++] = cfg->devices[i];
		}
	} else {
		for (int i = 0; i < count && i < EXEC_DEVICES_MAX; i++)
			list[n++] = i;
	}
	for (int i = 0; i < n; i++)
		if (list[i] == cfg->device)
			first = i;
	if (first < 0) {
		pr_err("device %d unavailable (error: not among the session's %d devices)", cfg->device, n);
		return -ENODEV;
	}
	for (int i = 0; i < n; i++)
		ex->dev.list[i].ordinal = list[(first + i) % n];
	ex->dev.count = (unsigned)n;
	return 0;
}

/* Retain device @i's primary context, name it, and reserve its arena. */
static int device_open(struct exec *ex, unsigned i)
{
	struct exec_device *d = &ex->dev.list[i];
	struct backend *be = ex->be;
	CUcontext ctx;
	CUresult res;
	int ret;

	res = be->cuDeviceGet(&d->dev, d->ordinal);
	if (res != CUDA_SUCCESS)
		return -ENODEV;
	/* The arena's VMM calls want a current context; the primary one is what
	 * cudart uses too, so the session retains it for its whole life. */
	res = be->cuDevicePrimaryCtxRetain(&ctx, d->dev);
	if (res != CUDA_SUCCESS || be->cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		pr_err("cannot create a context on device %d (error %d)", d->ordinal, res);
		return -ENODEV;
	}
	ret = handle_table_add(ex->handles, HANDLE_CONTEXT, ctx, 0, NULL, &d->ctx);
	if (ret)
		goto out_ctx;
	ret = arena_open(be, d->dev, ex->cfg.arena_base + i * ex->cfg.arena_size, ex->cfg.arena_size,
			 &d->arena);
	if (ret) {
		pr_err("cannot reserve the arena of device %u at 0x%llx (%d)", i,
		       (unsigned long long)(ex->cfg.arena_base + i * ex->cfg.arena_size), ret);
		goto out_ctx;
	}
	return 0;
out_ctx:
	be->cuDevicePrimaryCtxRelease(d->dev);
	d->ctx = 0;
	return ret;
}

int exec_open(struct exec *ex, struct backend *be, const struct exec_config *cfg,
	      const struct exec_observer *observer)
{
	CUresult res;
	int count = 0, ret;

	memset(ex, 0, sizeof(*ex));
	ex->be = be;
	ex->cfg = *cfg;
	if (observer)
		ex->observer = *observer;
	ex->host.sock = -1;
	ex->host.conn_sock = -1;
	ex->host.bar_fd = -1;
	ex->ipc.fd = -1;
	/* Pinned guest buffers hold host RAM down: at most half of it per session. */
	ex->host.bytes_max = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 2;
	res = be->cuInit(0);
	if (res == CUDA_SUCCESS)
		res = be->cuDeviceGetCount(&count);
	if (res != CUDA_SUCCESS || cfg->device < 0 || cfg->device >= count) {
		pr_err("device %d unavailable (error %d, %d devices)", cfg->device, res, count);
		return -ENODEV;
	}
	ret = devices_pick(ex, cfg, count);
	if (ret)
		return ret;
	/* The arenas lie side by side: the whole range must fit the address space. */
	if (cfg->arena_size && ex->dev.count > (UINT64_MAX - cfg->arena_base) / cfg->arena_size) {
		pr_err("%u arenas of 0x%llx bytes do not fit above 0x%llx", ex->dev.count,
		       (unsigned long long)cfg->arena_size, (unsigned long long)cfg->arena_base);
		return -EINVAL;
	}
	ret = handle_table_create(&ex->handles);
	if (ret)
		return ret;
	for (unsigned i = 0; i < ex->dev.count; i++) {
		ret = device_open(ex, i);
		if (ret) {
			ex->dev.count = i;
			goto out_devices;
		}
	}
	ex->dev.device = ex->dev.list[0].dev;
	ex->dev.primary_ctx = ex->dev.list[0].ctx;
	ex->dev.arena = ex->dev.list[0].arena;
	if (exec_peers_open(ex) != CUDA_SUCCESS) {
		pr_err("cannot give the session's devices access to each other's memory");
		ret = -ENODEV;
		goto out_devices;
	}
	/* The session starts on device 0, whatever the backend has current. */
	ex->dev.ctx_current = 0;
	exec_context_switch(ex, ex->dev.primary_ctx);
	exec_vmm_open(ex);
	return 0;
out_devices:
	for (unsigned i = 0; i < ex->dev.count; i++) {
		arena_close(ex->dev.list[i].arena);
		be->cuDevicePrimaryCtxRelease(ex->dev.list[i].dev);
	}
	handle_table_destroy(ex->handles);
	ex->handles = NULL;
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
	} else if (e->kind == HANDLE_VMM) {
		free(e->info);      /* the backend's part went in exec_vmm_close() */
	} else {
		exec_array_entry_release(arg, e, false);
	}
	return 0;
}

void exec_close(struct exec *ex)
{
	/* A host function waiting for the guest must not hold the last sync. */
	exec_hostfn_shutdown(ex);
	for (unsigned i = 0; i < ex->dev.count && ex->handles; i++)
		if (exec_context_switch(ex, ex->dev.list[i].ctx) == CUDA_SUCCESS)
			ex->be->cuCtxSynchronize();
	exec_ipc_close(ex);
	exec_staging_close(ex);
	exec_host_shared_close(ex);
	exec_journal_close(ex);
	if (ex->dev.arena)
		exec_vmm_close(ex);
	for (unsigned i = 0; i < ex->dev.count; i++)
		arena_close(ex->dev.list[i].arena);
	if (ex->handles) {
		handle_table_foreach(ex->handles, entry_release, ex);
		handle_table_destroy(ex->handles);
	}
	free(ex->globals.ranges);
	free(ex->charges.images);
	free(ex->pools.allocs);
	free(ex->copy.buf);
	free(ex->graphs.captures);
	free(ex->graphs.allocs);
	free(ex->graphs.standins);
	exec_hostfn_free(ex);
	memset(ex, 0, sizeof(*ex));
}

CUresult exec_context_switch(struct exec *ex, uint64_t ctx)
{
	struct handle_entry *e;
	CUresult res;

	if (ctx == ex->dev.ctx_current)
		return CUDA_SUCCESS;
	if (ctx == 0) {
		res = ex->be->cuCtxSetCurrent(NULL);
	} else {
		e = handle_table_get(ex->handles, ctx, HANDLE_CONTEXT);
		if (!e)
			return CUDA_ERROR_INVALID_CONTEXT;
		res = ex->be->cuCtxSetCurrent(e->real);
	}
	if (res == CUDA_SUCCESS) {
		int d = exec_device_of_ctx(ex, ctx);

		ex->dev.ctx_current = ctx;
		ex->dev.current = d > 0 ? (unsigned)d : 0;
	}
	return res;
}

int exec_device_of_ctx(const struct exec *ex, uint64_t ctx)
{
	struct handle_entry *e;

	for (unsigned i = 0; i < ex->dev.count; i++)
		if (ex->dev.list[i].ctx == ctx)
			return (int)i;
	/* A context the app created is a second name for its device's primary
	 * context, its parent (exec_ctx_create). */
	e = ctx ? handle_table_get(ex->handles, ctx, HANDLE_CONTEXT) : NULL;
	for (unsigned i = 0; e && e->parent && i < ex->dev.count; i++)
		if (ex->dev.list[i].ctx == e->parent)
			return (int)i;
	return -1;
}

struct arena *exec_arena_of(struct exec *ex, uint64_t addr, unsigned *ordinal)
{
	if (addr < ex->cfg.arena_base || !ex->cfg.arena_size)
		return NULL;
	uint64_t i = (addr - ex->cfg.arena_base) / ex->cfg.arena_size;

	if (i >= ex->dev.count)
		return NULL;
	if (ordinal)
		*ordinal = (unsigned)i;
	return ex->dev.list[i].arena;
}

const struct arena_alloc *exec_alloc_find(struct exec *ex, uint64_t addr, unsigned *ordinal)
{
	struct arena *a = exec_arena_of(ex, addr, ordinal);

	return a ? arena_find(a, addr) : NULL;
}

/* What the session holds on its devices: every arena's mappings, the
 * guest's VMM allocations and its arrays. */
uint64_t exec_mem_used(const struct exec *ex)
{
	uint64_t n = ex->vmm.bytes + ex->charges.array_bytes + ex->charges.image_bytes;

	for (unsigned i = 0; i < ex->dev.count; i++) {
		n += arena_bytes_mapped(ex->dev.list[i].arena);
		for (unsigned l = 0; l < 3; l++)
			n += ex->charges.limit[i][l];
	}
	return n;
}

void exec_mem_publish(struct exec *ex)
{
	if (ex->observer.memory_changed)
		ex->observer.memory_changed(ex->observer.opaque, exec_mem_used(ex));
}

void exec_context_any(struct exec *ex)
{
	if (!ex->dev.ctx_current)
		exec_context_switch(ex, ex->dev.primary_ctx);
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
	/* A kernel has one function per context: the current device's. */
	if (e->kind == HANDLE_KERNEL && !ki->function[ex->dev.current]) {
		CUresult res;

		if (!ex->be->cuKernelGetFunction)
			return CUDA_ERROR_NOT_SUPPORTED;
		res = ex->be->cuKernelGetFunction(&ki->function[ex->dev.current], e->real);
		if (res != CUDA_SUCCESS)
			return res;
	}
	*out = e->kind == HANDLE_KERNEL ? ki->function[ex->dev.current] : e->real;
	if (params)
		*params = &ki->params;
	return CUDA_SUCCESS;
}

/* The global range that holds all of [@addr, +@len), or NULL. */
static const struct exec_extra_range *global_range_of(const struct exec *ex, uint64_t addr, uint64_t len)
{
	for (unsigned i = 0; i < ex->globals.count; i++) {
		const struct exec_extra_range *r = &ex->globals.ranges[i];

		if (addr >= r->addr && addr - r->addr <= r->size && len <= r->size - (addr - r->addr))
			return r;
	}
	return NULL;
}

bool exec_device_range(struct exec *ex, uint64_t addr, uint64_t len, uint64_t *real)
{
	const struct exec_extra_range *r;
	struct arena *a;

	if (addr + len < addr)
		return false;
	a = exec_arena_of(ex, addr, NULL);
	/* Pinned host memory shared with the worker is device memory to the
	 * driver too, at the address mem_host_share answered (unified
	 * addressing: XLA memsets and reads its pinned buffers so). */
	if ((a && arena_range_valid(a, addr, len)) || exec_vmm_range_valid(ex, addr, len) ||
	    exec_host_shared_device_range(ex, addr, len)) {
		*real = addr;
		return true;
	}
	r = global_range_of(ex, addr, len);
	if (!r)
		return false;
	/* A global a restore moved: the guest's address is a second name of
	 * where it is now, and the backend must see only the latter. */
	*real = r->now ? r->now + (addr - r->addr) : addr;
	return true;
}

/* Kernel parameters may total 32 KiB; 4-byte minimum each bounds the count. */
#define PARAMS_MAX WIRE_REC_KERNEL_PARAM_MAX

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
		struct wire_rec_kernel_param r = { .offset = p->offset[i], .size = p->size[i] };

		wire_rec_kernel_param_put((uint8_t *)buf, i, &r);
	}
	return (struct wire_blob){ (const uint8_t *)buf, p->count * WIRE_REC_KERNEL_PARAM_BYTES };
}

void exec_extra_range_add(struct exec *ex, uint64_t addr, uint64_t size, uint64_t owner)
{
	for (unsigned i = 0; i < ex->globals.count; i++)
		if (ex->globals.ranges[i].addr == addr && ex->globals.ranges[i].size == size)
			return;
	if (ex->globals.count == ex->globals.cap) {
		unsigned cap = ex->globals.cap ? ex->globals.cap * 2 : 16;
		struct exec_extra_range *n = realloc(ex->globals.ranges, cap * sizeof(*n));

		if (!n)
			return;
		ex->globals.ranges = n;
		ex->globals.cap = cap;
	}
	ex->globals.ranges[ex->globals.count++] = (struct exec_extra_range){ addr, size, owner, 0 };
}

void exec_extra_range_move(struct exec *ex, uint64_t addr, uint64_t size, uint64_t owner, uint64_t now)
{
	exec_extra_range_add(ex, addr, size, owner);
	for (unsigned i = 0; i < ex->globals.count; i++)
		if (ex->globals.ranges[i].addr == addr && ex->globals.ranges[i].size == size)
			ex->globals.ranges[i].now = now;
}

uint64_t exec_guest_addr(const struct exec *ex, uint64_t now)
{
	for (unsigned i = 0; i < ex->globals.count; i++) {
		const struct exec_extra_range *r = &ex->globals.ranges[i];

		if (r->now && now >= r->now && now - r->now < r->size)
			return r->addr + (now - r->now);
	}
	return now;
}

void exec_extra_range_drop_owner(struct exec *ex, uint64_t owner)
{
	unsigned j = 0;

	for (unsigned i = 0; i < ex->globals.count; i++)
		if (ex->globals.ranges[i].owner != owner)
			ex->globals.ranges[j++] = ex->globals.ranges[i];
	ex->globals.count = j;
}

void exec_host_trim(struct exec *ex)
{
	/* The reply that used it has been sent. */
	if (ex->copy.cap > EXEC_COPY_KEEP) {
		free(ex->copy.buf);
		ex->copy.buf = NULL;
		ex->copy.cap = 0;
	}
}

void *exec_copy_buffer(struct exec *ex, size_t size)
{
	if (size > ex->copy.cap) {
		void *p = realloc(ex->copy.buf, size);

		if (!p)
			return NULL;
		ex->copy.buf = p;
		ex->copy.cap = size;
	}
	return ex->copy.buf ? ex->copy.buf : (ex->copy.buf = malloc(1));
}

CUresult exec_handle_lookup(struct exec *ex, uint64_t handle, enum handle_kind kind,
			    struct handle_entry **e)
{
	*e = handle_table_get(ex->handles, handle, kind);
	return *e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
