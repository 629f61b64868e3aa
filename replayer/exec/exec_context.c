/* Primary and current context calls.
 *
 * A session runs in its devices' primary contexts, retained by the worker
 * for the session's life. The guest's retain/release are counted here; a
 * guest reset destroys what the guest created in it, as the driver's reset
 * does. */
#define LOG_PREFIX "exec: "
#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"

CUresult exec_primary_ctx_retain(struct exec *ex, const struct wire_primary_ctx_retain_req *req,
				 struct wire_primary_ctx_retain_rep *rep)
{
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	ex->dev.list[req->device].primary_refs++;
	rep->ctx = ex->dev.list[req->device].ctx;
	return CUDA_SUCCESS;
}

CUresult exec_primary_ctx_release(struct exec *ex, const struct wire_primary_ctx_release_req *req,
				  struct wire_primary_ctx_release_rep *rep)
{
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	if (ex->dev.list[req->device].primary_refs == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	ex->dev.list[req->device].primary_refs--;
	return CUDA_SUCCESS;
}

CUresult exec_primary_ctx_set_flags(struct exec *ex, const struct wire_primary_ctx_set_flags_req *req,
				    struct wire_primary_ctx_set_flags_rep *rep)
{
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuDevicePrimaryCtxSetFlags(dev, req->flags);
	if (res == CUDA_SUCCESS)
		exec_journal_ctx_setting(ex, EXEC_CTX_SETTING_FLAGS, req->flags);
	return res;
}

CUresult exec_primary_ctx_get_state(struct exec *ex, const struct wire_primary_ctx_get_state_req *req,
				    struct wire_primary_ctx_get_state_rep *rep)
{
	unsigned flags = 0;
	int active = 0;
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuDevicePrimaryCtxGetState(dev, &flags, &active);
	rep->flags = flags;
	rep->active = res == CUDA_SUCCESS && ex->dev.list[req->device].primary_refs > 0;
	return res;
}

struct reset_scope {
	struct exec *ex;
	uint64_t ctx;       /* the context being reset */
	bool all;           /* the session's only device: modules go too */
};

static int entry_destroy(struct handle_entry *e, void *arg)
{
	struct reset_scope *r = arg;
	struct exec *ex = r->ex;

	switch (e->kind) {
	case HANDLE_STREAM:
		if (e->parent != r->ctx)
			return 0;
		ex->be->cuStreamDestroy(e->real);
		break;
	case HANDLE_EVENT:
		if (e->parent != r->ctx)
			return 0;
		ex->be->cuEventDestroy(e->real);
		break;
	case HANDLE_MODULE:
		if (!r->all)
			return 0;
		/* Modules owned by a library go with the library. */
		if (!e->parent)
			ex->be->cuModuleUnload(e->real);
		break;
	case HANDLE_LIBRARY:
		if (!r->all)
			return 0;
		ex->be->cuLibraryUnload(e->real);
		break;
	case HANDLE_ARRAY:
	case HANDLE_MIPMAP:
	case HANDLE_TEXOBJ:
	case HANDLE_SURFOBJ:
		/* The context's reset takes them: arrays go, objects go (arrays are
		 * made on device 0; with several devices they stay, as modules do). */
		if (r->all)
			exec_array_entry_release(ex, e, true);
		return 0;
	default:
		return 0;
	}
	exec_extra_range_drop_owner(ex, e->handle);
	exec_image_uncharge(ex, e->handle);
	exec_object_remove(ex, e->handle);
	return 0;
}

static int entry_forget_function(struct handle_entry *e, void *arg)
{
	struct reset_scope *r = arg;

	if (r->all && (e->kind == HANDLE_FUNCTION || e->kind == HANDLE_KERNEL)) {
		struct exec_kernel_info *ki = e->info;

		exec_params_release(&ki->params);
		free(ki);
		exec_object_remove(r->ex, e->handle);
	}
	return 0;
}

/* With one device, a reset takes everything the guest made, as the driver's
 * does. With several, modules and libraries are shared by the session's
 * contexts here, so only the device's streams, events and memory go
 * (docs/limits.md). */
CUresult exec_primary_ctx_reset(struct exec *ex, const struct wire_primary_ctx_reset_req *req,
				struct wire_primary_ctx_reset_rep *rep)
{
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);
	struct exec_device *d;
	struct reset_scope r;

	if (res != CUDA_SUCCESS)
		return res;
	d = &ex->dev.list[req->device];
	r = (struct reset_scope){ ex, d->ctx, ex->dev.count == 1 };
	res = exec_context_switch(ex, d->ctx);
	if (res != CUDA_SUCCESS)
		return res;
	ex->be->cuCtxSynchronize();
	handle_table_foreach(ex->handles, entry_forget_function, &r);
	handle_table_foreach(ex->handles, entry_destroy, &r);
	if (r.all) {
		exec_pool_reset(ex);
		ex->charges.array_bytes = 0;
	}
	while (arena_count(d->arena)) {
		uint64_t addr = arena_at(d->arena, 0)->addr;

		exec_pool_alloc_forget(ex, addr);
		arena_free(d->arena, addr);
		exec_journal_region_drop(ex, addr);
	}
	d->primary_refs = 0;
	exec_mem_publish(ex);
	pr_info("guest reset its primary context on device %d", req->device);
	return CUDA_SUCCESS;
}

CUresult exec_ctx_synchronize(struct exec *ex, const struct wire_ctx_synchronize_req *req,
			      struct wire_ctx_synchronize_rep *rep)
{
	CUresult res;

	if (req->ctx && !handle_table_get(ex->handles, req->ctx, HANDLE_CONTEXT))
		return CUDA_ERROR_INVALID_CONTEXT;
	/* cuCtxSynchronize_v2 names its context, which need not be current. */
	res = req->ctx ? exec_context_switch(ex, req->ctx) : CUDA_SUCCESS;
	return res == CUDA_SUCCESS ? ex->be->cuCtxSynchronize() : res;
}

/* Device bytes the driver reserves for @value of @limit on the current
 * device: the stack of every thread that can be resident at once (the
 * driver's own rule, so a large stack costs what it does on the GPU), or
 * the printf FIFO, or the malloc heap. Saturates at EXEC_CHARGE_MAX. */
static uint64_t limit_bytes(struct exec *ex, CUlimit limit, uint64_t value)
{
	int sms = 0, threads = 0;
	uint64_t bytes;

	if (value > EXEC_CHARGE_MAX)
		return EXEC_CHARGE_MAX;
	if (limit != CU_LIMIT_STACK_SIZE)
		return value;
	ex->be->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ex->dev.list[ex->dev.current].dev);
	ex->be->cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
				     ex->dev.list[ex->dev.current].dev);
	if (sms <= 0 || threads <= 0)
		sms = threads = 1;
	if (__builtin_mul_overflow((value + 15) & ~15ull, (uint64_t)sms * (uint64_t)threads, &bytes) ||
	    bytes > EXEC_CHARGE_MAX)
		return EXEC_CHARGE_MAX;
	return bytes;
}

CUresult exec_ctx_limit_set(struct exec *ex, uint32_t limit, uint64_t value)
{
	struct exec_charges *c = &ex->charges;
	unsigned d = ex->dev.current;
	uint64_t *charge, bytes, others;
	CUresult res;

	if (limit > CU_LIMIT_MALLOC_HEAP_SIZE)
		return ex->be->cuCtxSetLimit((CUlimit)limit, (size_t)value);
	if (!c->limit_base_known[d][limit]) {
		size_t start = 0;

		if (ex->be->cuCtxGetLimit(&start, (CUlimit)limit) == CUDA_SUCCESS)
			c->limit_base[d][limit] = limit_bytes(ex, (CUlimit)limit, start);
		c->limit_base_known[d][limit] = true;
	}
	/* What the device loses is the new size in place of the old. */
	charge = &c->limit[d][limit];
	bytes = limit_bytes(ex, (CUlimit)limit, value);
	bytes = bytes > c->limit_base[d][limit] ? bytes - c->limit_base[d][limit] : 0;
	others = exec_mem_used(ex) - *charge;
	if (ex->cfg.quota && (bytes > ex->cfg.quota || others > ex->cfg.quota - bytes)) {
		pr_debug("limit %u of %llu takes %llu bytes: over the quota", limit, (unsigned long long)value,
			 (unsigned long long)bytes);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	res = ex->be->cuCtxSetLimit((CUlimit)limit, (size_t)value);
	if (res != CUDA_SUCCESS)
		return res;
	*charge = bytes;
	exec_mem_publish(ex);
	return CUDA_SUCCESS;
}

CUresult exec_ctx_set_limit(struct exec *ex, const struct wire_ctx_set_limit_req *req,
			    struct wire_ctx_set_limit_rep *rep)
{
	CUresult res;

	/* The journal's records hold ids below EXEC_CTX_SETTING_CACHE_CONFIG. */
	if (req->limit >= EXEC_CTX_SETTING_CACHE_CONFIG)
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_ctx_limit_set(ex, req->limit, req->value);
	if (res == CUDA_SUCCESS)
		exec_journal_ctx_setting(ex, req->limit, req->value);
	return res;
}

CUresult exec_ctx_get_limit(struct exec *ex, const struct wire_ctx_get_limit_req *req,
			    struct wire_ctx_get_limit_rep *rep)
{
	size_t v = 0;
	CUresult res = ex->be->cuCtxGetLimit(&v, (CUlimit)req->limit);

	rep->value = v;
	return res;
}

CUresult exec_ctx_get_stream_priority_range(struct exec *ex,
					    const struct wire_ctx_get_stream_priority_range_req *req,
					    struct wire_ctx_get_stream_priority_range_rep *rep)
{
	int least = 0, greatest = 0;
	CUresult res = ex->be->cuCtxGetStreamPriorityRange(&least, &greatest);

	rep->least = least;
	rep->greatest = greatest;
	return res;
}

CUresult exec_ctx_set_cache_config(struct exec *ex, const struct wire_ctx_set_cache_config_req *req,
				   struct wire_ctx_set_cache_config_rep *rep)
{
	CUresult res = ex->be->cuCtxSetCacheConfig((CUfunc_cache)req->config);

	if (res == CUDA_SUCCESS)
		exec_journal_ctx_setting(ex, EXEC_CTX_SETTING_CACHE_CONFIG, req->config);
	return res;
}

CUresult exec_ctx_set_shared_mem_config(struct exec *ex, const struct wire_ctx_set_shared_mem_config_req *req,
					struct wire_ctx_set_shared_mem_config_rep *rep)
{
	CUresult res = ex->be->cuCtxSetSharedMemConfig((CUsharedconfig)req->config);

	if (res == CUDA_SUCCESS)
		exec_journal_ctx_setting(ex, EXEC_CTX_SETTING_SHARED_CONFIG, req->config);
	return res;
}

CUresult exec_ctx_get_shared_mem_config(struct exec *ex, const struct wire_ctx_get_shared_mem_config_req *req,
					struct wire_ctx_get_shared_mem_config_rep *rep)
{
	CUsharedconfig c = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;
	CUresult res = ex->be->cuCtxGetSharedMemConfig(&c);

	rep->config = (uint32_t)c;
	return res;
}

/* Not journaled: it drops cache lines, and a restored context starts with none. */
CUresult exec_ctx_reset_persisting_l2_cache(struct exec *ex,
					    const struct wire_ctx_reset_persisting_l2_cache_req *req,
					    struct wire_ctx_reset_persisting_l2_cache_rep *rep)
{
	return ex->be->cuCtxResetPersistingL2Cache();
}

CUresult exec_ctx_get_cache_config(struct exec *ex, const struct wire_ctx_get_cache_config_req *req,
				   struct wire_ctx_get_cache_config_rep *rep)
{
	CUfunc_cache c = CU_FUNC_CACHE_PREFER_NONE;
	CUresult res = ex->be->cuCtxGetCacheConfig(&c);

	rep->config = (uint32_t)c;
	return res;
}

CUresult exec_ctx_get_device(struct exec *ex, const struct wire_ctx_get_device_req *req,
			     struct wire_ctx_get_device_rep *rep)
{
	int d = exec_device_of_ctx(ex, req->ctx ? req->ctx : ex->dev.ctx_current);

	if (d < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	rep->device = d;
	return CUDA_SUCCESS;
}

/* Flags cuCtxCreate knows (CUctx_flags). */
#define CTX_CREATE_FLAGS (CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | \
			  CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS)

/* A context the app creates is a second name for the session's primary
 * context: the arena, modules and streams are shared by both, as the one
 * address space of a process already shares memory between its contexts.
 * It has its own handle (so its flags and lifetime are its own), is
 * journaled with its flags and comes back under the same handle after a
 * restore. What was created in it is not destroyed with it (docs/limits.md). */
CUresult exec_ctx_create(struct exec *ex, const struct wire_ctx_create_req *req,
			 struct wire_ctx_create_rep *rep)
{
	struct handle_entry *primary;
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	if (req->flags & ~(uint32_t)CTX_CREATE_FLAGS)
		return CUDA_ERROR_INVALID_VALUE;
	primary = handle_table_get(ex->handles, ex->dev.list[req->device].ctx, HANDLE_CONTEXT);
	if (!primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	return exec_object_add(ex, HANDLE_CONTEXT, primary->real, primary->handle, NULL, &req->flags,
			       sizeof(req->flags), &rep->ctx);
}

CUresult exec_ctx_destroy(struct exec *ex, const struct wire_ctx_destroy_req *req,
			  struct wire_ctx_destroy_rep *rep)
{
	struct handle_entry *e = handle_table_get(ex->handles, req->ctx, HANDLE_CONTEXT);

	/* A primary context cannot be destroyed, only released. */
	if (!e || !e->parent)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ex->dev.ctx_current == req->ctx)
		exec_context_switch(ex, e->parent);
	exec_object_remove(ex, req->ctx);
	return CUDA_SUCCESS;
}
