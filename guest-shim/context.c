/* Contexts: the primary context, the per-thread context stack and the
 * context-wide queries. The stack lives only in the guest: the current
 * context travels in every request header (wire.h), so switching contexts
 * costs no round trip. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <cudaProfiler.h>

#include <stdlib.h>

#include "export_table.h"
#include "log.h"

#define CTX_STACK_MAX 64

static __thread struct {
	CUcontext stack[CTX_STACK_MAX];
	unsigned depth;
} ctx_tls;

uint64_t ctx_current(void)
{
	return ctx_tls.depth ? (uint64_t)(uintptr_t)ctx_tls.stack[ctx_tls.depth - 1] : 0;
}

static void ctx_table_put(uint64_t handle, CUdevice dev, unsigned flags, bool primary)
{
	struct shim_process *p = shim_process();
	struct shim_ctx *c;

	pthread_mutex_lock(&p->cache.lock);
	for (c = p->cache.ctxs; c; c = c->next)
		if (c->handle == handle)
			break;
	if (!c) {
		c = calloc(1, sizeof(*c));
		if (c) {
			c->next = p->cache.ctxs;
			p->cache.ctxs = c;
		}
	}
	if (c) {
		c->handle = handle;
		c->device = dev;
		c->flags = flags;
		c->primary = primary;
	}
	pthread_mutex_unlock(&p->cache.lock);
}

static bool ctx_table_find(uint64_t handle, struct shim_ctx *out)
{
	struct shim_process *p = shim_process();
	struct shim_ctx *c;
	bool found = false;

	pthread_mutex_lock(&p->cache.lock);
	for (c = p->cache.ctxs; c; c = c->next) {
		if (c->handle == handle) {
			*out = *c;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&p->cache.lock);
	return found;
}

bool ctx_device_known(uint64_t ctx, CUdevice *dev)
{
	struct shim_ctx c;

	if (!ctx || !ctx_table_find(ctx, &c))
		return false;
	*dev = c.device;
	return true;
}

uint64_t ctx_primary_any(void)
{
	struct shim_process *p = shim_process();
	uint64_t handle = 0;

	pthread_mutex_lock(&p->cache.lock);
	for (struct shim_ctx *c = p->cache.ctxs; c && !handle; c = c->next)
		if (c->primary)
			handle = c->handle;
	pthread_mutex_unlock(&p->cache.lock);
	return handle;
}

static void ctx_table_drop(uint64_t handle)
{
	struct shim_process *p = shim_process();
	struct shim_ctx **pp;

	pthread_mutex_lock(&p->cache.lock);
	for (pp = &p->cache.ctxs; *pp; pp = &(*pp)->next) {
		if ((*pp)->handle == handle) {
			struct shim_ctx *c = *pp;

			*pp = c->next;
			free(c);
			break;
		}
	}
	pthread_mutex_unlock(&p->cache.lock);
}

void ctx_table_reset(struct shim_process *p)
{
	while (p->cache.ctxs) {
		struct shim_ctx *c = p->cache.ctxs;

		p->cache.ctxs = c->next;
		free(c);
	}
	ctx_tls.depth = 0;
}

/* Primary context
 *
 * The guest's retains are counted here, so cuDevicePrimaryCtxGetState
 * (which cudart asks around its calls) is answered without a round trip once
 * the worker told the context's flags; a retain of an active context and a
 * release that leaves it active are answered here too, as the worker would
 * answer them: only the first retain and the last release reach it. The
 * calls that change the state hold primary_lock from their decision to
 * their update, so two threads cannot both take the first retain. */

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

void context_fork_lock(void)
{
	pthread_mutex_lock(&primary_lock);
}

void context_fork_unlock(void)
{
	pthread_mutex_unlock(&primary_lock);
}

/* A set-flags or reset of @dev was answered (@reset: a reset that worked,
 * which ends the guest's retains): the flags are asked again. */
static void primary_changed(CUdevice dev, bool reset)
{
	struct shim_process *p = shim_process();
	struct shim_device_info *d;

	pthread_mutex_lock(&p->cache.lock);
	d = device_info_locked(p, dev);
	if (d) {
		if (reset)
			d->primary_refs = 0;
		d->primary_flags_known = false;
		d->primary_gen++;
	}
	pthread_mutex_unlock(&p->cache.lock);
}

SHIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_primary_ctx_retain_req req = { .device = dev };
	struct wire_primary_ctx_retain_rep rep;
	struct shim_device_info *d;
	CUresult res;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&primary_lock);
	pthread_mutex_lock(&p->cache.lock);
	d = device_info_locked(p, dev);
	if (d && d->primary_refs > 0 && !rpc_session_lost()) {
		d->primary_refs++;
		*pctx = (CUcontext)(uintptr_t)d->primary_ctx;
		pthread_mutex_unlock(&p->cache.lock);
		pthread_mutex_unlock(&primary_lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&p->cache.lock);
	res = rpc_primary_ctx_retain(&req, &rep);
	if (res == CUDA_SUCCESS) {
		pthread_mutex_lock(&p->cache.lock);
		if (d) {
			d->primary_refs++;
			d->primary_ctx = rep.ctx;
		}
		pthread_mutex_unlock(&p->cache.lock);
		ctx_table_put(rep.ctx, dev, 0, true);
		*pctx = (CUcontext)(uintptr_t)rep.ctx;
	}
	pthread_mutex_unlock(&primary_lock);
	return res;
}

SHIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_primary_ctx_release_req req = { .device = dev };
	struct wire_primary_ctx_release_rep rep;
	struct shim_device_info *d;
	CUresult res;

	pthread_mutex_lock(&primary_lock);
	pthread_mutex_lock(&p->cache.lock);
	d = device_info_locked(p, dev);
	if (d && d->primary_refs > 1 && !rpc_session_lost()) {
		d->primary_refs--;
		pthread_mutex_unlock(&p->cache.lock);
		pthread_mutex_unlock(&primary_lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&p->cache.lock);
	res = rpc_primary_ctx_release(&req, &rep);
	if (res == CUDA_SUCCESS && d) {
		pthread_mutex_lock(&p->cache.lock);
		if (d->primary_refs > 0)
			d->primary_refs--;
		pthread_mutex_unlock(&p->cache.lock);
	}
	/* The last release ends the context and its modules. */
	if (res == CUDA_SUCCESS)
		func_table_forget_answers();
	pthread_mutex_unlock(&primary_lock);
	return res;
}

SHIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	SHIM_ENTRY();
	struct wire_primary_ctx_set_flags_req req = { .device = dev, .flags = flags };
	struct wire_primary_ctx_set_flags_rep rep;
	CUresult res;

	pthread_mutex_lock(&primary_lock);
	res = rpc_primary_ctx_set_flags(&req, &rep);
	primary_changed(dev, false);
	pthread_mutex_unlock(&primary_lock);
	return res;
}

SHIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_primary_ctx_get_state_req req = { .device = dev };
	struct wire_primary_ctx_get_state_rep rep;
	struct shim_device_info *d;
	uint64_t gen = 0;
	CUresult res;

	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->cache.lock);
	d = device_info_locked(p, dev);
	if (d && d->primary_flags_known && !rpc_session_lost()) {
		*flags = d->primary_flags;
		*active = d->primary_refs > 0;
		pthread_mutex_unlock(&p->cache.lock);
		return CUDA_SUCCESS;
	}
	if (d)
		gen = d->primary_gen;
	pthread_mutex_unlock(&p->cache.lock);
	res = rpc_primary_ctx_get_state(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	*flags = rep.flags;
	*active = rep.active;
	if (!d)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&p->cache.lock);
	/* Active is what the guest did (a restored worker holds no retains). */
	*active = d->primary_refs > 0;
	if (d->primary_gen == gen) {
		d->primary_flags = rep.flags;
		d->primary_flags_known = true;
	}
	pthread_mutex_unlock(&p->cache.lock);
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	SHIM_ENTRY();
	struct wire_primary_ctx_reset_req req = { .device = dev };
	struct wire_primary_ctx_reset_rep rep;
	CUresult res;

	pthread_mutex_lock(&primary_lock);
	res = rpc_primary_ctx_reset(&req, &rep);
	primary_changed(dev, res == CUDA_SUCCESS);
	if (res == CUDA_SUCCESS)
		func_table_forget_answers();    /* its modules ended with it */
	pthread_mutex_unlock(&primary_lock);
	return res;
}

/* The pre-11.0 ABI of the three calls above: same arguments, and what
 * cudart 13 still resolves at version 7000. */
SHIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	SHIM_ENTRY();
	return cuDevicePrimaryCtxRelease_v2(dev);
}

SHIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	SHIM_ENTRY();
	return cuDevicePrimaryCtxReset_v2(dev);
}

SHIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	SHIM_ENTRY();
	return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/* The context stack */

SHIM_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	SHIM_ENTRY();
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = (CUcontext)(uintptr_t)ctx_current();
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	SHIM_ENTRY();
	if (ctx_tls.depth == 0) {
		if (ctx)
			ctx_tls.stack[ctx_tls.depth++] = ctx;
	} else if (ctx) {
		ctx_tls.stack[ctx_tls.depth - 1] = ctx;
	} else {
		ctx_tls.depth--;
	}
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	SHIM_ENTRY();
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_tls.depth == CTX_STACK_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_tls.stack[ctx_tls.depth++] = ctx;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	SHIM_ENTRY();
	if (ctx_tls.depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_tls.depth--;
	if (pctx)
		*pctx = ctx_tls.stack[ctx_tls.depth];
	return CUDA_SUCCESS;
}

/* Versions 2000-3999 of push and pop: same arguments. */
SHIM_API CUresult cuCtxPushCurrent(CUcontext ctx)
{
	SHIM_ENTRY();
	return cuCtxPushCurrent_v2(ctx);
}

SHIM_API CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	SHIM_ENTRY();
	return cuCtxPopCurrent_v2(pctx);
}

/* Contexts created by the app */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	struct wire_ctx_create_req req = { .flags = flags, .device = dev };
	struct wire_ctx_create_rep rep;
	CUresult res;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx_tls.depth == CTX_STACK_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = rpc_ctx_create(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	ctx_table_put(rep.ctx, dev, flags, false);
	*pctx = (CUcontext)(uintptr_t)rep.ctx;
	/* A new context becomes current by being pushed, as the driver does. */
	ctx_tls.stack[ctx_tls.depth++] = *pctx;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	SHIM_ENTRY();
	return ctx_create(pctx, flags, dev);
}

SHIM_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
				 int numParams, unsigned int flags, CUdevice dev)
{
	SHIM_ENTRY();
	if (numParams > 0 || paramsArray) {
		pr_warn("cuCtxCreate_v3: execution affinity is not supported");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return ctx_create(pctx, flags, dev);
}

SHIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
				 unsigned int flags, CUdevice dev)
{
	SHIM_ENTRY();
	if (params && (params->numExecAffinityParams > 0 || params->execAffinityParams ||
		       params->cigParams)) {
		pr_warn("cuCtxCreate_v4: execution affinity and CIG are not supported");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return ctx_create(pctx, flags, dev);
}

SHIM_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	SHIM_ENTRY();
	struct wire_ctx_destroy_req req = { .ctx = (uint64_t)(uintptr_t)ctx };
	struct wire_ctx_destroy_rep rep;
	CUresult res;
	unsigned i, j;

	if (!ctx)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_ctx_destroy(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	/* The destroyed context leaves this thread's stack wherever it is. */
	for (i = j = 0; i < ctx_tls.depth; i++)
		if (ctx_tls.stack[i] != ctx)
			ctx_tls.stack[j++] = ctx_tls.stack[i];
	ctx_tls.depth = j;
	ctx_table_drop(req.ctx);
	export_table_context_destroyed(ctx);
	func_table_forget_answers();    /* its modules ended with it */
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuCtxDestroy(CUcontext ctx)
{
	SHIM_ENTRY();
	return cuCtxDestroy_v2(ctx);
}

/* Context-wide queries; ctx 0 means the current one. */

static CUresult ctx_device(uint64_t ctx, CUdevice *dev)
{
	struct wire_ctx_get_device_req req = { .ctx = ctx };
	struct wire_ctx_get_device_rep rep;
	struct shim_ctx c;
	CUresult res;

	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_table_find(ctx, &c)) {
		*dev = c.device;
		return CUDA_SUCCESS;
	}
	res = rpc_ctx_get_device(&req, &rep);
	if (res == CUDA_SUCCESS)
		*dev = rep.device;
	return res;
}

SHIM_API CUresult cuCtxGetDevice(CUdevice *device)
{
	SHIM_ENTRY();
	return ctx_device(ctx_current(), device);
}

SHIM_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	SHIM_ENTRY();
	return ctx_device(ctx ? (uint64_t)(uintptr_t)ctx : ctx_current(), device);
}

/* A context's id is unique in the process and never reused: the serial of
 * its virtual handle has both properties, and survives a restore. */
SHIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
	SHIM_ENTRY();
	uint64_t h = ctx ? (uint64_t)(uintptr_t)ctx : ctx_current();

	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	if (!h)
		return CUDA_ERROR_INVALID_CONTEXT;
	*id = h & ((1ull << 56) - 1);
	return CUDA_SUCCESS;
}

/* A synchronisation of context @ctx: answered here when nothing was sent
 * since a reply proved all its work ended (completion.c). All of the
 * context's work ended: the device's writes to registered mapped memory
 * reach the host. */
static CUresult ctx_synchronize(uint64_t ctx)
{
	struct wire_ctx_synchronize_req req = { .ctx = ctx };
	struct wire_ctx_synchronize_rep rep;
	CUresult res;

	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!completion_covers_context(ctx)) {
		res = rpc_ctx_synchronize(&req, &rep);
		if (res != CUDA_SUCCESS)
			return res;
		completion_note_context(ctx);
	}
	return registered_synchronized(true);
}

SHIM_API CUresult cuCtxSynchronize(void)
{
	SHIM_ENTRY();
	return ctx_synchronize(ctx_current());
}

SHIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	SHIM_ENTRY();
	return ctx_synchronize(ctx ? (uint64_t)(uintptr_t)ctx : ctx_current());
}

SHIM_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	SHIM_ENTRY();
	struct wire_ctx_set_limit_req req = { .limit = (uint32_t)limit, .value = value };
	struct wire_ctx_set_limit_rep rep;
	CUresult res;

	res = rpc_ctx_set_limit(&req, &rep);
	/* The context's settings may change what its functions answer: an
	 * answer asked meanwhile is not kept either (answers_gen). */
	func_table_forget_answers();
	return res;
}

SHIM_API CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	SHIM_ENTRY();
	struct wire_ctx_get_limit_req req = { .limit = (uint32_t)limit };
	struct wire_ctx_get_limit_rep rep;
	CUresult res;

	if (!pvalue)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_ctx_get_limit(&req, &rep);
	if (res == CUDA_SUCCESS)
		*pvalue = (size_t)rep.value;
	return res;
}

/* A device's range, cached per device of the current context. */
SHIM_API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_ctx_get_stream_priority_range_req req = { 0 };
	struct wire_ctx_get_stream_priority_range_rep rep;
	struct shim_device_info *d = NULL;
	uint64_t ctx = ctx_current(), epoch = 0;
	struct shim_ctx c;
	CUresult res;

	if (ctx && ctx_table_find(ctx, &c)) {
		pthread_mutex_lock(&p->cache.lock);
		d = device_info_locked(p, c.device);
		epoch = p->cache.epoch;
		if (d && d->have_priorities && !rpc_session_lost()) {
			rep.least = d->least_priority;
			rep.greatest = d->greatest_priority;
			pthread_mutex_unlock(&p->cache.lock);
			goto out;
		}
		pthread_mutex_unlock(&p->cache.lock);
	}
	res = rpc_ctx_get_stream_priority_range(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	if (d) {
		pthread_mutex_lock(&p->cache.lock);
		if (p->cache.epoch == epoch) {
			d->least_priority = rep.least;
			d->greatest_priority = rep.greatest;
			d->have_priorities = true;
		}
		pthread_mutex_unlock(&p->cache.lock);
	}
out:
	/* Either pointer may be NULL, as with the driver. */
	if (leastPriority)
		*leastPriority = rep.least;
	if (greatestPriority)
		*greatestPriority = rep.greatest;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
	SHIM_ENTRY();
	struct wire_ctx_set_cache_config_req req = { .config = (uint32_t)config };
	struct wire_ctx_set_cache_config_rep rep;
	CUresult res;

	res = rpc_ctx_set_cache_config(&req, &rep);
	/* The context's settings may change what its functions answer: an
	 * answer asked meanwhile is not kept either (answers_gen). */
	func_table_forget_answers();
	return res;
}

SHIM_API CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
	SHIM_ENTRY();
	struct wire_ctx_get_cache_config_req req = { 0 };
	struct wire_ctx_get_cache_config_rep rep;
	CUresult res;

	if (!pconfig)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_ctx_get_cache_config(&req, &rep);
	if (res == CUDA_SUCCESS)
		*pconfig = (CUfunc_cache)rep.config;
	return res;
}

SHIM_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	SHIM_ENTRY();
	uint64_t h = ctx ? (uint64_t)(uintptr_t)ctx : ctx_current();

	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	if (!h)
		return CUDA_ERROR_INVALID_CONTEXT;
	/* Every context the shim creates speaks the v2 (64-bit) context API. */
	*version = 3020;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuCtxGetFlags(unsigned int *flags)
{
	SHIM_ENTRY();
	uint64_t h = ctx_current();
	struct shim_ctx c;
	unsigned active_flags;
	int active;
	CUresult res;

	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!h)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_table_find(h, &c) && !c.primary) {
		*flags = c.flags;
		return CUDA_SUCCESS;
	}
	res = cuCtxGetDevice(&c.device);
	if (res != CUDA_SUCCESS)
		return res;
	/* A primary context's flags may change under cuDevicePrimaryCtxSetFlags. */
	res = cuDevicePrimaryCtxGetState(c.device, &active_flags, &active);
	if (res == CUDA_SUCCESS)
		*flags = active_flags;
	return res;
}

/* Sets the current context's flags; the session's contexts are primary
 * ones, whose flags cuDevicePrimaryCtxSetFlags sets (journaled there). */
SHIM_API CUresult cuCtxSetFlags(unsigned int flags)
{
	SHIM_ENTRY();
	CUdevice dev;
	CUresult res;

	if (!ctx_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	res = cuCtxGetDevice(&dev);
	return res == CUDA_SUCCESS ? cuDevicePrimaryCtxSetFlags(dev, flags) : res;
}

SHIM_API CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
	SHIM_ENTRY();
	struct wire_ctx_set_shared_mem_config_req req = { .config = (uint32_t)config };
	struct wire_ctx_set_shared_mem_config_rep rep;
	CUresult res;

	res = rpc_ctx_set_shared_mem_config(&req, &rep);
	/* The context's settings may change what its functions answer: an
	 * answer asked meanwhile is not kept either (answers_gen). */
	func_table_forget_answers();
	return res;
}

SHIM_API CUresult cuCtxGetSharedMemConfig(CUsharedconfig *pConfig)
{
	SHIM_ENTRY();
	struct wire_ctx_get_shared_mem_config_req req = { 0 };
	struct wire_ctx_get_shared_mem_config_rep rep;
	CUresult res;

	if (!pConfig)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_ctx_get_shared_mem_config(&req, &rep);
	if (res == CUDA_SUCCESS)
		*pConfig = (CUsharedconfig)rep.config;
	return res;
}

SHIM_API CUresult cuCtxResetPersistingL2Cache(void)
{
	SHIM_ENTRY();
	struct wire_ctx_reset_persisting_l2_cache_req req = { 0 };
	struct wire_ctx_reset_persisting_l2_cache_rep rep;

	return rpc_ctx_reset_persisting_l2_cache(&req, &rep);
}

/* The profiler's markers: there is no profiler on the worker's side to
 * start, and an application's profiling brackets must not fail its run. */
SHIM_API CUresult cuProfilerInitialize(const char *configFile, const char *outputFile,
				       CUoutput_mode outputMode)
{
	SHIM_ENTRY();
	(void)configFile;
	(void)outputFile;
	(void)outputMode;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuProfilerStart(void)
{
	SHIM_ENTRY();
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuProfilerStop(void)
{
	SHIM_ENTRY();
	return CUDA_SUCCESS;
}
