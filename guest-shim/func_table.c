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

/* One attribute question (func_table_attribute), as shim_cache_answer
 * keeps it. */
struct func_attr_call {
	uint64_t handle, ctx;
	unsigned attr;
	bool kernel_get;
	int *value;
	CUresult (*ask)(uint64_t handle, unsigned attr, int *value);
};

/* Fixed attributes are the same for every way of asking; settable ones are
 * kept for one way (kernel or function, context) at a time. */
static bool func_attr_find_locked(struct shim_process *p, void *call)
{
	const struct func_attr_call *c = call;
	const struct shim_func *f = func_find_locked(p, c->handle);

	if (!f)
		return false;
	if (c->attr < SHIM_FUNC_FIXED_ATTRS && f->attr_known & (1u << c->attr)) {
		*c->value = f->attr_value[c->attr];
		return true;
	}
	if (c->attr >= SHIM_FUNC_FIXED_ATTRS && f->settable_known & (1u << c->attr) &&
	    f->settable_kernel == c->kernel_get && f->settable_ctx == c->ctx) {
		*c->value = f->settable_value[c->attr];
		return true;
	}
	return false;
}

static CUresult func_attr_ask(void *call)
{
	const struct func_attr_call *c = call;

	return c->ask(c->handle, c->attr, c->value);
}

static void func_attr_remember_locked(struct shim_process *p, void *call)
{
	const struct func_attr_call *c = call;
	struct shim_func *f = func_get_locked(p, c->handle);

	if (!f)
		return;
	if (c->attr < SHIM_FUNC_FIXED_ATTRS) {
		f->attr_value[c->attr] = *c->value;
		f->attr_known |= 1u << c->attr;
		return;
	}
	if (f->settable_kernel != c->kernel_get || f->settable_ctx != c->ctx) {
		f->settable_known = 0;
		f->settable_kernel = c->kernel_get;
		f->settable_ctx = c->ctx;
	}
	f->settable_value[c->attr] = *c->value;
	f->settable_known |= 1u << c->attr;
}

static const struct shim_cache_answer_ops func_attr_answer = {
	.find_locked = func_attr_find_locked,
	.ask = func_attr_ask,
	.remember_locked = func_attr_remember_locked,
};

CUresult func_table_attribute(uint64_t handle, unsigned attr, bool kernel_get, int *value,
			      CUresult (*ask)(uint64_t handle, unsigned attr, int *value))
{
	struct func_attr_call call = {
		.handle = handle, .ctx = ctx_current(), .attr = attr, .kernel_get = kernel_get,
		.value = value, .ask = ask,
	};

	/* Without a current context the driver's answer is its error. */
	if (attr >= SHIM_FUNC_ATTRS || (attr >= SHIM_FUNC_FIXED_ATTRS && !call.ctx))
		return ask(handle, attr, value);
	return shim_cache_answer(&func_attr_answer, &shim_process()->cache.answers_gen, &call);
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

/* One cuKernelGetFunction (func_table_kernel_function), as
 * shim_cache_answer keeps it. */
struct func_kernel_fn_call {
	uint64_t kernel, ctx;
	uint64_t *function;
	CUresult (*ask)(uint64_t kernel, uint64_t *function);
};

static bool func_kernel_fn_find_locked(struct shim_process *p, void *call)
{
	const struct func_kernel_fn_call *c = call;
	const struct shim_func *f = func_find_locked(p, c->kernel);

	for (unsigned i = 0; f && c->ctx && i < SHIM_KERNEL_CTXS; i++) {
		if (f->kernel_fn[i].ctx == c->ctx) {
			*c->function = f->kernel_fn[i].function;
			return true;
		}
	}
	return false;
}

static CUresult func_kernel_fn_ask(void *call)
{
	const struct func_kernel_fn_call *c = call;

	return c->ask(c->kernel, c->function);
}

/* cuGraphKernelNodeGetParams names the kernel too, as the driver does:
 * true of the function whether the answer is kept or not. */
static void func_kernel_fn_learned_locked(struct shim_process *p, void *call)
{
	const struct func_kernel_fn_call *c = call;
	struct shim_func *f = func_get_locked(p, *c->function);

	if (f) {
		f->kernel = c->kernel;
		f->family = c->kernel;
	}
}

static void func_kernel_fn_remember_locked(struct shim_process *p, void *call)
{
	const struct func_kernel_fn_call *c = call;
	struct shim_func *f = c->ctx ? func_get_locked(p, c->kernel) : NULL;

	if (f) {
		f->family = c->kernel;
		f->kernel_fn[f->kernel_fn_next].ctx = c->ctx;
		f->kernel_fn[f->kernel_fn_next].function = *c->function;
		f->kernel_fn_next = (f->kernel_fn_next + 1) % SHIM_KERNEL_CTXS;
	}
}

static const struct shim_cache_answer_ops func_kernel_fn_answer = {
	.find_locked = func_kernel_fn_find_locked,
	.ask = func_kernel_fn_ask,
	.remember_locked = func_kernel_fn_remember_locked,
	.learned_locked = func_kernel_fn_learned_locked,
};

/* Through shim_cache_answer even without a current context (nothing kept
 * then): the function still learns its kernel. */
CUresult func_table_kernel_function(uint64_t kernel, uint64_t *function,
				    CUresult (*ask)(uint64_t kernel, uint64_t *function))
{
	struct func_kernel_fn_call call = {
		.kernel = kernel, .ctx = ctx_current(), .function = function, .ask = ask,
	};

	return shim_cache_answer(&func_kernel_fn_answer, &shim_process()->cache.answers_gen, &call);
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

/* One occupancy query (func_table_occupancy), as shim_cache_answer keeps
 * it. */
struct func_occupancy_call {
	uint64_t handle, ctx, smem;
	int block_size;
	unsigned flags;
	int *blocks;
	CUresult (*ask)(uint64_t handle, int block_size, uint64_t smem, unsigned flags, int *blocks);
};

static bool func_occupancy_find_locked(struct shim_process *p, void *call)
{
	const struct func_occupancy_call *c = call;
	const struct shim_func *f = func_find_locked(p, c->handle);

	for (unsigned i = 0; f && i < SHIM_OCC_ANSWERS; i++) {
		const struct shim_occupancy *o = &f->occupancy[i];

		if (o->known && o->ctx == c->ctx && o->block_size == c->block_size &&
		    o->smem == c->smem && o->flags == c->flags) {
			*c->blocks = o->blocks;
			return true;
		}
	}
	return false;
}

static CUresult func_occupancy_ask(void *call)
{
	const struct func_occupancy_call *c = call;

	return c->ask(c->handle, c->block_size, c->smem, c->flags, c->blocks);
}

static void func_occupancy_remember_locked(struct shim_process *p, void *call)
{
	const struct func_occupancy_call *c = call;
	struct shim_func *f = func_get_locked(p, c->handle);

	if (f) {
		f->occupancy[f->occupancy_next] = (struct shim_occupancy){
			.known = true, .ctx = c->ctx, .block_size = c->block_size, .flags = c->flags,
			.smem = c->smem, .blocks = *c->blocks,
		};
		f->occupancy_next = (f->occupancy_next + 1) % SHIM_OCC_ANSWERS;
	}
}

static const struct shim_cache_answer_ops func_occupancy_answer = {
	.find_locked = func_occupancy_find_locked,
	.ask = func_occupancy_ask,
	.remember_locked = func_occupancy_remember_locked,
};

CUresult func_table_occupancy(uint64_t handle, int block_size, uint64_t smem, unsigned flags,
			      int *blocks,
			      CUresult (*ask)(uint64_t handle, int block_size, uint64_t smem,
					      unsigned flags, int *blocks))
{
	struct func_occupancy_call call = {
		.handle = handle, .ctx = ctx_current(), .smem = smem, .block_size = block_size,
		.flags = flags, .blocks = blocks, .ask = ask,
	};

	/* Occupancies are kept per context: none to keep them under. */
	if (!call.ctx)
		return ask(handle, block_size, smem, flags, blocks);
	return shim_cache_answer(&func_occupancy_answer, &shim_process()->cache.answers_gen, &call);
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

/* One cluster query (func_table_cluster), as shim_cache_answer keeps it. */
struct func_cluster_call {
	const struct wire_occupancy_cluster_req *req;
	uint64_t ctx;
	int *value;
	CUresult (*ask)(const struct wire_occupancy_cluster_req *req, int *value);
	uint32_t key_len;
	uint8_t key[CLUSTER_KEY_MAX];
	struct shim_cluster_answer *answer; /* made by the ask, owned until kept */
};

static bool func_cluster_find_locked(struct shim_process *p, void *call)
{
	const struct func_cluster_call *c = call;
	const struct shim_func *f = func_find_locked(p, c->req->function);

	for (unsigned i = 0; f && i < SHIM_CLUSTER_ANSWERS; i++) {
		const struct shim_cluster_answer *a = f->cluster[i];

		if (a && a->ctx == c->ctx && a->key_len == c->key_len &&
		    !memcmp(a->key, c->key, c->key_len)) {
			*c->value = a->value;
			return true;
		}
	}
	return false;
}

/* The record to keep is allocated here, outside the cache lock. Not kept
 * when it cannot be allocated: the next one asks. */
static CUresult func_cluster_ask(void *call)
{
	struct func_cluster_call *c = call;
	CUresult res = c->ask(c->req, c->value);

	if (res != CUDA_SUCCESS)
		return res;
	c->answer = malloc(sizeof(*c->answer) + c->key_len);
	if (c->answer) {
		*c->answer = (struct shim_cluster_answer){
			.ctx = c->ctx, .value = *c->value, .key_len = c->key_len,
		};
		memcpy(c->answer->key, c->key, c->key_len);
	}
	return CUDA_SUCCESS;
}

static void func_cluster_remember_locked(struct shim_process *p, void *call)
{
	struct func_cluster_call *c = call;
	struct shim_func *f = c->answer ? func_get_locked(p, c->req->function) : NULL;

	if (f) {
		free(f->cluster[f->cluster_next]);
		f->cluster[f->cluster_next] = c->answer;
		f->cluster_next = (f->cluster_next + 1) % SHIM_CLUSTER_ANSWERS;
		c->answer = NULL;
	}
}

static const struct shim_cache_answer_ops func_cluster_answer = {
	.find_locked = func_cluster_find_locked,
	.ask = func_cluster_ask,
	.remember_locked = func_cluster_remember_locked,
};

CUresult func_table_cluster(const struct wire_occupancy_cluster_req *req, int *value,
			    CUresult (*ask)(const struct wire_occupancy_cluster_req *req, int *value))
{
	struct func_cluster_call call = { .req = req, .ctx = ctx_current(), .value = value, .ask = ask };
	CUresult res;

	/* Without a current context the driver's answer is its error. */
	if (!call.ctx || !cluster_key(req, call.key, &call.key_len))
		return ask(req, value);
	res = shim_cache_answer(&func_cluster_answer, &shim_process()->cache.answers_gen, &call);
	free(call.answer);
	return res;
}
