/* Function and kernel handles the shim has seen, with their parameter
 * layouts (to pack cuLaunchKernel's kernelParams and answer
 * cuFuncGetParamInfo without a round trip) and their names. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* CUDA 12.1+ allows 32764 bytes of kernel parameters. */
#define FUNC_ARGS_MAX 32768u

/* A cluster query as cached: query, grid x/y/z, block x/y/z, shared bytes
 * (u32 each), then the launch attribute records as sent. */
#define CLUSTER_KEY_HEAD (8u * 4u)
#define CLUSTER_KEY_MAX (CLUSTER_KEY_HEAD + WIRE_REC_LAUNCH_ATTR_MAX * WIRE_REC_LAUNCH_ATTR_BYTES)

struct shim_cluster_answer {
	uint64_t ctx;
	int32_t value;
	uint32_t key_len;
	uint8_t key[];
};

static unsigned func_bucket(uint64_t handle)
{
	return (unsigned)((handle * 0x9e3779b97f4a7c15ull) >> 56) % SHIM_FUNC_BUCKETS;
}

static struct shim_func *func_find_locked(struct shim_process *p, uint64_t handle)
{
	struct shim_func *f;

	for (f = p->cache.funcs[func_bucket(handle)]; f; f = f->next)
		if (f->handle == handle)
			return f;
	return NULL;
}

static struct shim_func *func_get_locked(struct shim_process *p, uint64_t handle)
{
	struct shim_func *f = func_find_locked(p, handle);
	unsigned b = func_bucket(handle);

	if (f)
		return f;
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->handle = handle;
	f->next = p->cache.funcs[b];
	p->cache.funcs[b] = f;
	return f;
}

int func_table_set_params(uint64_t handle, const uint8_t *blob, uint32_t len)
{
	struct shim_process *p = shim_process();
	struct shim_param *params = NULL;
	struct wire_blob b = { blob, len };
	int n = wire_rec_kernel_param_count(b);
	uint32_t count, end = 0;
	struct shim_func *f;

	if (n < 0)
		return -EINVAL;
	count = (uint32_t)n;
	if (count) {
		params = calloc(count, sizeof(*params));
		if (!params)
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct wire_rec_kernel_param r;

		wire_rec_kernel_param_get(b, i, &r);
		params[i].offset = r.offset;
		params[i].size = r.size;
		if (params[i].offset > FUNC_ARGS_MAX || params[i].size > FUNC_ARGS_MAX ||
		    params[i].offset + params[i].size > FUNC_ARGS_MAX) {
			pr_err("function %#llx: parameter %u at %u+%u is out of range",
			       (unsigned long long)handle, i, params[i].offset, params[i].size);
			free(params);
			return -EINVAL;
		}
		if (params[i].offset + params[i].size > end)
			end = params[i].offset + params[i].size;
	}
	pthread_mutex_lock(&p->cache.lock);
	f = func_get_locked(p, handle);
	if (!f) {
		pthread_mutex_unlock(&p->cache.lock);
		free(params);
		return -ENOMEM;
	}
	free(f->params);
	f->params = params;
	f->param_count = count;
	f->args_bytes = end;
	f->have_params = true;
	pthread_mutex_unlock(&p->cache.lock);
	return 0;
}

struct shim_func *func_table_get(uint64_t handle, CUresult *res)
{
	struct shim_process *p = shim_process();
	struct wire_func_get_params_req req = { .function = handle };
	struct wire_func_get_params_rep rep;
	struct shim_func *f;

	pthread_mutex_lock(&p->cache.lock);
	f = func_find_locked(p, handle);
	pthread_mutex_unlock(&p->cache.lock);
	if (f && f->have_params) {
		*res = CUDA_SUCCESS;
		return f;
	}
	/* A handle the shim never saw (from an export table, or a kernel whose
	 * layout was not sent): the worker knows it. */
	*res = rpc_func_get_params(&req, &rep);
	if (*res != CUDA_SUCCESS)
		return NULL;
	if (func_table_set_params(handle, rep.params.ptr, rep.params.len)) {
		*res = CUDA_ERROR_INVALID_VALUE;
		return NULL;
	}
	pthread_mutex_lock(&p->cache.lock);
	f = func_find_locked(p, handle);
	pthread_mutex_unlock(&p->cache.lock);
	if (!f)
		*res = CUDA_ERROR_OUT_OF_MEMORY;
	return f;
}

CUresult func_table_name(uint64_t handle, bool kernel, const char **name)
{
	struct shim_process *p = shim_process();
	struct shim_func *f;
	CUresult res;
	char *copy;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->cache.lock);
	f = func_find_locked(p, handle);
	if (f && f->name) {
		*name = f->name;
		pthread_mutex_unlock(&p->cache.lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&p->cache.lock);

	if (kernel) {
		struct wire_kernel_get_name_req req = { .kernel = handle };
		struct wire_kernel_get_name_rep rep;

		res = rpc_kernel_get_name(&req, &rep);
		copy = res == CUDA_SUCCESS ? strdup(rep.name) : NULL;
	} else {
		struct wire_func_get_name_req req = { .function = handle };
		struct wire_func_get_name_rep rep;

		res = rpc_func_get_name(&req, &rep);
		copy = res == CUDA_SUCCESS ? strdup(rep.name) : NULL;
	}
	if (res != CUDA_SUCCESS)
		return res;
	if (!copy)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&p->cache.lock);
	f = func_get_locked(p, handle);
	if (f && !f->name) {
		f->name = copy;
		copy = NULL;
	}
	*name = f ? f->name : NULL;
	pthread_mutex_unlock(&p->cache.lock);
	free(copy);
	return *name ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void func_clusters_forget_locked(struct shim_func *f)
{
	for (unsigned i = 0; i < SHIM_CLUSTER_ANSWERS; i++) {
		free(f->cluster[i]);
		f->cluster[i] = NULL;
	}
}

void func_table_reset(struct shim_process *p)
{
	for (unsigned b = 0; b < SHIM_FUNC_BUCKETS; b++) {
		while (p->cache.funcs[b]) {
			struct shim_func *f = p->cache.funcs[b];

			p->cache.funcs[b] = f->next;
			func_clusters_forget_locked(f);
			free(f->params);
			free(f->name);
			free(f);
		}
	}
}

/* The cached answer of @attr for this way of asking, if any. */
static bool func_attr_cached_locked(const struct shim_func *f, unsigned attr, bool kernel_get,
				    uint64_t ctx, int *value)
{
	if (attr < SHIM_FUNC_FIXED_ATTRS && f->attr_known & (1u << attr)) {
		*value = f->attr_value[attr];
		return true;
	}
	if (attr >= SHIM_FUNC_FIXED_ATTRS && f->settable_known & (1u << attr) &&
	    f->settable_kernel == kernel_get && f->settable_ctx == ctx) {
		*value = f->settable_value[attr];
		return true;
	}
	return false;
}

static void func_attr_remember_locked(struct shim_func *f, unsigned attr, bool kernel_get,
				      uint64_t ctx, int value)
{
	if (attr < SHIM_FUNC_FIXED_ATTRS) {
		f->attr_value[attr] = value;
		f->attr_known |= 1u << attr;
		return;
	}
	if (f->settable_kernel != kernel_get || f->settable_ctx != ctx) {
		f->settable_known = 0;
		f->settable_kernel = kernel_get;
		f->settable_ctx = ctx;
	}
	f->settable_value[attr] = value;
	f->settable_known |= 1u << attr;
}

/* Cached answers are read and written under the cache lock; one that was
 * asked for is kept only if nothing was forgotten meanwhile (answers_gen). */
CUresult func_table_attribute(uint64_t handle, unsigned attr, bool kernel_get, int *value,
			      CUresult (*ask)(uint64_t handle, unsigned attr, int *value))
{
	struct shim_process *p = shim_process();
	uint64_t ctx = ctx_current(), gen;
	struct shim_func *f;
	CUresult res;

	/* Without a current context the driver's answer is its error. */
	if (attr >= SHIM_FUNC_ATTRS || (attr >= SHIM_FUNC_FIXED_ATTRS && !ctx))
		return ask(handle, attr, value);
	pthread_mutex_lock(&p->cache.lock);
	f = func_find_locked(p, handle);
	if (f && !rpc_session_lost() && func_attr_cached_locked(f, attr, kernel_get, ctx, value)) {
		pthread_mutex_unlock(&p->cache.lock);
		return CUDA_SUCCESS;
	}
	gen = p->cache.answers_gen;
	pthread_mutex_unlock(&p->cache.lock);
	res = ask(handle, attr, value);
	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&p->cache.lock);
	/* An unload or a set while it was asked may have changed the answer. */
	f = p->cache.answers_gen == gen ? func_get_locked(p, handle) : NULL;
	if (f)
		func_attr_remember_locked(f, attr, kernel_get, ctx, *value);
	pthread_mutex_unlock(&p->cache.lock);
	return CUDA_SUCCESS;
}

/* What a set may change: the last sets, settable attributes, occupancies. */
static void func_settings_forget_locked(struct shim_func *f)
{
	f->settable_known = 0;
	memset(f->last_set, 0, sizeof(f->last_set));
	memset(f->occupancy, 0, sizeof(f->occupancy));
	func_clusters_forget_locked(f);
}

void func_table_forget_answers(void)
{
	struct shim_process *p = shim_process();

	pthread_mutex_lock(&p->cache.lock);
	p->cache.answers_gen++;
	for (unsigned b = 0; b < SHIM_FUNC_BUCKETS; b++)
		for (struct shim_func *f = p->cache.funcs[b]; f; f = f->next) {
			f->attr_known = 0;
			memset(f->kernel_fn, 0, sizeof(f->kernel_fn));
			func_settings_forget_locked(f);
		}
	lookup_table_forget_modules_locked(p);
	pthread_mutex_unlock(&p->cache.lock);
}

CUresult func_table_kernel_function(uint64_t kernel, uint64_t *function,
				    CUresult (*ask)(uint64_t kernel, uint64_t *function))
{
	struct shim_process *p = shim_process();
	uint64_t ctx = ctx_current(), gen;
	struct shim_func *f;
	CUresult res;

	pthread_mutex_lock(&p->cache.lock);
	f = func_find_locked(p, kernel);
	for (unsigned i = 0; f && ctx && i < SHIM_KERNEL_CTXS && !rpc_session_lost(); i++) {
		if (f->kernel_fn[i].ctx == ctx) {
			*function = f->kernel_fn[i].function;
			pthread_mutex_unlock(&p->cache.lock);
			return CUDA_SUCCESS;
		}
	}
	gen = p->cache.answers_gen;
	pthread_mutex_unlock(&p->cache.lock);
	res = ask(kernel, function);
	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&p->cache.lock);
	f = func_get_locked(p, *function);
	if (f) {
		/* cuGraphKernelNodeGetParams names the kernel too, as the driver does. */
		f->kernel = kernel;
		f->family = kernel;
	}
	f = p->cache.answers_gen == gen && ctx ? func_get_locked(p, kernel) : NULL;
	if (f) {
		f->family = kernel;
		f->kernel_fn[f->kernel_fn_next].ctx = ctx;
		f->kernel_fn[f->kernel_fn_next].function = *function;
		f->kernel_fn_next = (f->kernel_fn_next + 1) % SHIM_KERNEL_CTXS;
	}
	pthread_mutex_unlock(&p->cache.lock);
	return CUDA_SUCCESS;
}

void func_table_kernel_seen(uint64_t kernel)
{
	struct shim_process *p = shim_process();
	struct shim_func *f;

	pthread_mutex_lock(&p->cache.lock);
	f = func_get_locked(p, kernel);
	if (f)
		f->family = kernel;
	pthread_mutex_unlock(&p->cache.lock);
}

/* Forget what a set on @handle may have changed: its family's settings and
 * those of every handle of unknown family; everything when its own family
 * is unknown. */
static void func_family_forget_locked(struct shim_process *p, uint64_t handle)
{
	struct shim_func *self = func_find_locked(p, handle);
	uint64_t family = self ? self->family : 0;

	p->cache.answers_gen++;
	for (unsigned b = 0; b < SHIM_FUNC_BUCKETS; b++)
		for (struct shim_func *f = p->cache.funcs[b]; f; f = f->next)
			if (!family || !f->family || f->family == family || f == self)
				func_settings_forget_locked(f);
}

static bool func_set_matches(const struct shim_func_set *s, int value, bool kernel_set, int device,
			     uint64_t ctx)
{
	return s->known && s->value == value && s->kernel_set == kernel_set &&
	       (!kernel_set || s->device == device) && s->ctx == ctx;
}

bool func_table_set_repeats(uint64_t handle, unsigned attr, int value, bool kernel_set,
			    int device, uint64_t *gen)
{
	struct shim_process *p = shim_process();
	uint64_t ctx = ctx_current();
	struct shim_func *f;

	pthread_mutex_lock(&p->cache.lock);
	f = func_find_locked(p, handle);
	if (f && attr < SHIM_FUNC_ATTRS && ctx && !rpc_session_lost() &&
	    func_set_matches(&f->last_set[attr], value, kernel_set, device, ctx)) {
		pthread_mutex_unlock(&p->cache.lock);
		return true;
	}
	func_family_forget_locked(p, handle);
	*gen = p->cache.answers_gen;
	pthread_mutex_unlock(&p->cache.lock);
	return false;
}

void func_table_set_done(uint64_t handle, unsigned attr, int value, bool kernel_set, int device,
			 uint64_t gen, CUresult res)
{
	struct shim_process *p = shim_process();
	bool keep;
	struct shim_func *f;

	pthread_mutex_lock(&p->cache.lock);
	/* Another set or a forget since: which came first at the driver is unknown. */
	keep = res == CUDA_SUCCESS && p->cache.answers_gen == gen && attr < SHIM_FUNC_ATTRS;
	func_family_forget_locked(p, handle);
	f = keep && ctx_current() ? func_get_locked(p, handle) : NULL;
	if (f)
		f->last_set[attr] = (struct shim_func_set){
			.known = true, .kernel_set = kernel_set, .device = device, .value = value,
			.ctx = ctx_current(),
		};
	pthread_mutex_unlock(&p->cache.lock);
}

void func_table_settings_changed(uint64_t handle)
{
	struct shim_process *p = shim_process();

	pthread_mutex_lock(&p->cache.lock);
	func_family_forget_locked(p, handle);
	pthread_mutex_unlock(&p->cache.lock);
}

CUresult func_table_occupancy(uint64_t handle, int block_size, uint64_t smem, unsigned flags,
			      int *blocks,
			      CUresult (*ask)(uint64_t handle, int block_size, uint64_t smem,
					      unsigned flags, int *blocks))
{
	struct shim_process *p = shim_process();
	uint64_t ctx = ctx_current(), gen;
	struct shim_func *f;
	CUresult res;

	pthread_mutex_lock(&p->cache.lock);
	f = func_find_locked(p, handle);
	for (unsigned i = 0; f && ctx && i < SHIM_OCC_ANSWERS && !rpc_session_lost(); i++) {
		const struct shim_occupancy *o = &f->occupancy[i];

		if (o->known && o->ctx == ctx && o->block_size == block_size && o->smem == smem &&
		    o->flags == flags) {
			*blocks = o->blocks;
			pthread_mutex_unlock(&p->cache.lock);
			return CUDA_SUCCESS;
		}
	}
	gen = p->cache.answers_gen;
	pthread_mutex_unlock(&p->cache.lock);
	res = ask(handle, block_size, smem, flags, blocks);
	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&p->cache.lock);
	f = p->cache.answers_gen == gen && ctx ? func_get_locked(p, handle) : NULL;
	if (f) {
		f->occupancy[f->occupancy_next] = (struct shim_occupancy){
			.known = true, .ctx = ctx, .block_size = block_size, .flags = flags,
			.smem = smem, .blocks = *blocks,
		};
		f->occupancy_next = (f->occupancy_next + 1) % SHIM_OCC_ANSWERS;
	}
	pthread_mutex_unlock(&p->cache.lock);
	return CUDA_SUCCESS;
}

/* @req as func_table_cluster compares it; false when it is too long to be
 * a request the shim sends. */
static bool cluster_key(const struct wire_occupancy_cluster_req *req, uint8_t *key, uint32_t *len)
{
	const uint32_t head[] = {
		req->query, req->grid_x, req->grid_y, req->grid_z,
		req->block_x, req->block_y, req->block_z, req->shared_bytes,
	};

	_Static_assert(sizeof(head) == CLUSTER_KEY_HEAD, "cluster key head");
	if (req->attrs.len > CLUSTER_KEY_MAX - CLUSTER_KEY_HEAD)
		return false;
	memcpy(key, head, sizeof(head));
	if (req->attrs.len)
		memcpy(key + CLUSTER_KEY_HEAD, req->attrs.ptr, req->attrs.len);
	*len = CLUSTER_KEY_HEAD + req->attrs.len;
	return true;
}

CUresult func_table_cluster(const struct wire_occupancy_cluster_req *req, int *value,
			    CUresult (*ask)(const struct wire_occupancy_cluster_req *req, int *value))
{
	struct shim_process *p = shim_process();
	uint64_t ctx = ctx_current(), gen;
	struct shim_cluster_answer *a;
	uint8_t key[CLUSTER_KEY_MAX];
	uint32_t key_len;
	struct shim_func *f;
	CUresult res;

	/* Without a current context the driver's answer is its error. */
	if (!ctx || !cluster_key(req, key, &key_len))
		return ask(req, value);
	pthread_mutex_lock(&p->cache.lock);
	f = func_find_locked(p, req->function);
	for (unsigned i = 0; f && i < SHIM_CLUSTER_ANSWERS && !rpc_session_lost(); i++) {
		a = f->cluster[i];
		if (a && a->ctx == ctx && a->key_len == key_len && !memcmp(a->key, key, key_len)) {
			*value = a->value;
			pthread_mutex_unlock(&p->cache.lock);
			return CUDA_SUCCESS;
		}
	}
	gen = p->cache.answers_gen;
	pthread_mutex_unlock(&p->cache.lock);
	res = ask(req, value);
	if (res != CUDA_SUCCESS)
		return res;
	/* Not kept when it cannot be allocated: the next one asks. */
	a = malloc(sizeof(*a) + key_len);
	if (!a)
		return CUDA_SUCCESS;
	*a = (struct shim_cluster_answer){ .ctx = ctx, .value = *value, .key_len = key_len };
	memcpy(a->key, key, key_len);
	pthread_mutex_lock(&p->cache.lock);
	f = p->cache.answers_gen == gen ? func_get_locked(p, req->function) : NULL;
	if (f) {
		free(f->cluster[f->cluster_next]);
		f->cluster[f->cluster_next] = a;
		f->cluster_next = (f->cluster_next + 1) % SHIM_CLUSTER_ANSWERS;
		a = NULL;
	}
	pthread_mutex_unlock(&p->cache.lock);
	free(a);
	return CUDA_SUCCESS;
}
