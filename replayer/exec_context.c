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
	return ex->be->cuDevicePrimaryCtxSetFlags(dev, req->flags);
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
	case HANDLE_ARRAY:
	case HANDLE_MIPMAP:
	case HANDLE_TEXOBJ:
	case HANDLE_SURFOBJ:
		/* The context's reset takes them: arrays go, objects go. */
		exec_array_entry_release(ex, e, true);
		return 0;
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
	ex->array_bytes = 0;
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
	return ex->be->cuCtxSetLimit((CUlimit)req->limit, req->value);
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
	return ex->be->cuCtxSetCacheConfig((CUfunc_cache)req->config);
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

CUresult exec_ctx_create(struct exec *ex, const struct wire_ctx_create_req *req,
			 struct wire_ctx_create_rep *rep)
{
	/* Extra contexts would need their own arena mappings; sessions use the
	 * primary context (what cudart, cuBLAS and PyTorch use). */
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult exec_ctx_destroy(struct exec *ex, const struct wire_ctx_destroy_req *req,
			  struct wire_ctx_destroy_rep *rep)
{
	if (!handle_table_get(ex->handles, req->ctx, HANDLE_CONTEXT))
		return CUDA_ERROR_INVALID_CONTEXT;
	/* The primary context cannot be destroyed, only released. */
	return CUDA_ERROR_INVALID_CONTEXT;
}
