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

void func_table_reset(struct shim_process *p)
{
	for (unsigned b = 0; b < SHIM_FUNC_BUCKETS; b++) {
		while (p->cache.funcs[b]) {
			struct shim_func *f = p->cache.funcs[b];

			p->cache.funcs[b] = f->next;
			free(f->params);
			free(f->name);
			free(f);
		}
	}
}

CUresult func_table_attribute(uint64_t handle, unsigned attr, int *value,
			      CUresult (*ask)(uint64_t handle, unsigned attr, int *value))
{
	struct shim_process *p = shim_process();
	struct shim_func *f;
	uint64_t unloads;
	CUresult res;

	if (attr >= SHIM_FUNC_FIXED_ATTRS)
		return ask(handle, attr, value);
	pthread_mutex_lock(&p->cache.lock);
	f = func_find_locked(p, handle);
	if (f && f->attr_known & (1u << attr)) {
		*value = f->attr_value[attr];
		pthread_mutex_unlock(&p->cache.lock);
		return CUDA_SUCCESS;
	}
	unloads = p->cache.unloads;
	pthread_mutex_unlock(&p->cache.lock);
	res = ask(handle, attr, value);
	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&p->cache.lock);
	/* An unload while it was asked may have ended the function. */
	f = p->cache.unloads == unloads ? func_get_locked(p, handle) : NULL;
	if (f) {
		f->attr_value[attr] = *value;
		f->attr_known |= 1u << attr;
	}
	pthread_mutex_unlock(&p->cache.lock);
	return CUDA_SUCCESS;
}

void func_table_forget_attributes(void)
{
	struct shim_process *p = shim_process();

	pthread_mutex_lock(&p->cache.lock);
	p->cache.unloads++;
	for (unsigned b = 0; b < SHIM_FUNC_BUCKETS; b++)
		for (struct shim_func *f = p->cache.funcs[b]; f; f = f->next)
			f->attr_known = 0;
	pthread_mutex_unlock(&p->cache.lock);
}
