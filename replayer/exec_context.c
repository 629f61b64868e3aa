/* Primary and current context calls.
 *
 * A session runs in its device's primary context, retained by the worker for
 * the session's life. The guest's retain/release are counted here; a guest
 * reset destroys what the guest created in it, as the driver's reset does. */
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
	ex->primary_refs++;
	rep->ctx = ex->primary_ctx;
	return CUDA_SUCCESS;
}

CUresult exec_primary_ctx_release(struct exec *ex, const struct wire_primary_ctx_release_req *req,
				  struct wire_primary_ctx_release_rep *rep)
{
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	if (ex->primary_refs == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	ex->primary_refs--;
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
	rep->active = ex->primary_refs > 0;
	return res;
}

static int entry_destroy(struct handle_entry *e, void *arg)
{
	struct exec *ex = arg;

	switch (e->kind) {
	case HANDLE_STREAM:
		ex->be->cuStreamDestroy(e->real);
		break;
	case HANDLE_EVENT:
		ex->be->cuEventDestroy(e->real);
		break;
	case HANDLE_MODULE:
		/* Modules owned by a library go with the library. */
		if (!e->parent)
			ex->be->cuModuleUnload(e->real);
		break;
	case HANDLE_LIBRARY:
		ex->be->cuLibraryUnload(e->real);
		break;
	default:
		return 0;
	}
	exec_extra_range_drop_owner(ex, e->handle);
	exec_object_remove(ex, e->handle);
	return 0;
}

static int entry_forget_function(struct handle_entry *e, void *arg)
{
	struct exec *ex = arg;

	if (e->kind == HANDLE_FUNCTION || e->kind == HANDLE_KERNEL) {
		struct exec_kernel_info *ki = e->info;

		exec_params_release(&ki->params);
		free(ki);
		exec_object_remove(ex, e->handle);
	}
	return 0;
}

CUresult exec_primary_ctx_reset(struct exec *ex, const struct wire_primary_ctx_reset_req *req,
				struct wire_primary_ctx_reset_rep *rep)
{
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	ex->be->cuCtxSynchronize();
	handle_table_foreach(ex->handles, entry_forget_function, ex);
	handle_table_foreach(ex->handles, entry_destroy, ex);
	exec_pool_reset(ex);
	while (arena_count(ex->arena)) {
		uint64_t addr = arena_at(ex->arena, 0)->addr;

		arena_free(ex->arena, addr);
		exec_journal_region_drop(ex, addr);
	}
	ex->primary_refs = 0;
	if (ex->slot)
		atomic_store_explicit(&ex->slot->memory, 0, memory_order_relaxed);
	pr_info("guest reset its primary context");
	return CUDA_SUCCESS;
}

CUresult exec_ctx_synchronize(struct exec *ex, const struct wire_ctx_synchronize_req *req,
			      struct wire_ctx_synchronize_rep *rep)
{
	if (req->ctx && !handle_table_get(ex->handles, req->ctx, HANDLE_CONTEXT))
		return CUDA_ERROR_INVALID_CONTEXT;
	return ex->be->cuCtxSynchronize();
}

CUresult exec_ctx_set_limit(struct exec *ex, const struct wire_ctx_set_limit_req *req,
			    struct wire_ctx_set_limit_rep *rep)
{
	CUresult res;

	/* The journal's records hold ids below EXEC_CTX_SETTING_CACHE_CONFIG. */
	if (req->limit >= EXEC_CTX_SETTING_CACHE_CONFIG)
		return CUDA_ERROR_INVALID_VALUE;
	res = ex->be->cuCtxSetLimit((CUlimit)req->limit, req->value);
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
	if (req->ctx && !handle_table_get(ex->handles, req->ctx, HANDLE_CONTEXT))
		return CUDA_ERROR_INVALID_CONTEXT;
	rep->device = 0;
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
	struct handle_entry *primary = handle_table_get(ex->handles, ex->primary_ctx, HANDLE_CONTEXT);
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	if (req->flags & ~(uint32_t)CTX_CREATE_FLAGS)
		return CUDA_ERROR_INVALID_VALUE;
	if (!primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	return exec_object_add(ex, HANDLE_CONTEXT, primary->real, ex->primary_ctx, NULL, &req->flags,
			       sizeof(req->flags), &rep->ctx);
}

CUresult exec_ctx_destroy(struct exec *ex, const struct wire_ctx_destroy_req *req,
			  struct wire_ctx_destroy_rep *rep)
{
	if (!handle_table_get(ex->handles, req->ctx, HANDLE_CONTEXT))
		return CUDA_ERROR_INVALID_CONTEXT;
	/* The primary context cannot be destroyed, only released. */
	if (req->ctx == ex->primary_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ex->ctx_current == req->ctx)
		ex->ctx_current = ex->primary_ctx;
	exec_object_remove(ex, req->ctx);
	return CUDA_SUCCESS;
}
