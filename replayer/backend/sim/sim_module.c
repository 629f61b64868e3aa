/* Modules, libraries, functions and launches of the sim, and the CPU kernel
 * plugins that give launches something to run.
 *
 * Images are read with common/fatbin.h for kernel names, parameter layouts
 * and globals; the code itself is never run. A launch runs the plugin
 * function registered under the kernel's mangled name.
 */
#define LOG_PREFIX "sim: "

#include "sim.h"

#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fatbin.h"
#include "log.h"
#include "sim_module_internal.h"

/* ---- CPU kernel plugins ------------------------------------------------ */

static sim_kernel_fn sim_plugin_find(struct sim *sim, const char *name)
{
	for (unsigned i = 0; i < sim->kernel_count; i++)
		if (!strcmp(sim->kernels[i].name, name))
			return sim->kernels[i].fn;
	return NULL;
}

static int sim_plugin_add(struct sim *sim, const char *path)
{
	const struct sim_kernel_table *table;
	const struct sim_kernel *k;
	struct sim_plugin_kernel *grown;
	unsigned n = 0;
	void **handles;
	void *dl;

	dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		pr_err("kernel plugin %s: %s", path, dlerror());
		return -ENOENT;
	}
	table = dlsym(dl, "tern_sim_kernel_table");
	if (!table || table->abi != SIM_KERNEL_ABI || !table->kernels) {
		pr_err("kernel plugin %s: no tern_sim_kernel_table of ABI %d", path,
		       SIM_KERNEL_ABI);
		dlclose(dl);
		return -EINVAL;
	}
	for (k = table->kernels; k->name; k++)
		n++;
	handles = realloc(sim->plugins, (sim->plugin_count + 1) * sizeof(*handles));
	if (!handles)
		goto out_nomem;
	sim->plugins = handles;
	grown = realloc(sim->kernels, (sim->kernel_count + n) * sizeof(*grown));
	if (!grown)
		goto out_nomem;
	sim->kernels = grown;
	sim->plugins[sim->plugin_count++] = dl;
	for (k = table->kernels; k->name; k++) {
		if (!k->fn)
			continue;
		/* The first plugin to name a kernel keeps it. */
		if (sim_plugin_find(sim, k->name)) {
			pr_warn("kernel plugin %s: %s already registered, ignored", path, k->name);
			continue;
		}
		sim->kernels[sim->kernel_count].name = k->name;
		sim->kernels[sim->kernel_count].fn = k->fn;
		sim->kernel_count++;
	}
	pr_info("kernel plugin %s: %u kernels", path, n);
	return 0;

out_nomem:
	dlclose(dl);
	return -ENOMEM;
}

int sim_plugins_load(struct sim *sim, const char *const *paths)
{
	int ret;

	for (unsigned i = 0; paths && paths[i]; i++) {
		ret = sim_plugin_add(sim, paths[i]);
		if (ret)
			return ret;
	}
	return 0;
}

void sim_plugins_unload(struct sim *sim)
{
	for (unsigned i = 0; i < sim->plugin_count; i++)
		dlclose(sim->plugins[i]);
	free(sim->plugins);
	free(sim->kernels);
	sim->plugins = NULL;
	sim->kernels = NULL;
	sim->plugin_count = sim->kernel_count = 0;
}

/* ---- modules ----------------------------------------------------------- */

static void sim_module_free(struct sim *sim, struct sim_module *m)
{
	/* Graph nodes launching its kernels can no longer run. */
	sim_graphs_forget_funcs(sim, m->funcs, m->func_count);
	for (uint32_t i = 0; i < m->func_count; i++) {
		free(m->funcs[i].name);
		free(m->funcs[i].params);
	}
	free(m->funcs);
	for (uint32_t i = 0; i < m->global_count; i++) {
		struct sim_global *g = &m->globals[i];

		if (g->storage) {
			sim_range_remove(sim, SIM_RANGE_GLOBAL, (uintptr_t)g->storage);
			munmap(g->storage, g->map_size);
		}
		free(g->name);
	}
	free(m->globals);
	free(m);
}

static void sim_func_defaults(struct sim_func *f)
{
	memset(f->attrs, 0, sizeof(f->attrs));
	f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
	f->attrs[CU_FUNC_ATTRIBUTE_NUM_REGS] = SIM_FUNC_REGS;
	f->attrs[CU_FUNC_ATTRIBUTE_PTX_VERSION] = SIM_TARGET_SM;
	f->attrs[CU_FUNC_ATTRIBUTE_BINARY_VERSION] = SIM_TARGET_SM;
	f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = SIM_SMEM_DEFAULT;
	f->attrs[CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT] = -1;
	f->cache_config = CU_FUNC_CACHE_PREFER_NONE;
}

/* @map bytes (page multiple) for a global, zeroed; NULL when none are left.
 * __managed__ variables fill their window (sim->managed_base) in load
 * order, so that a fresh worker that loads the same modules in the same
 * order (a restore) finds each where it was, as the guest's host mirror of
 * it needs (docs/sim.md). */
static void *global_map(struct sim *sim, size_t map, bool managed)
{
	void *p;

	if (!managed) {
		p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		return p == MAP_FAILED ? NULL : p;
	}
	/* Taken addresses (another sim in this process) are stepped over. */
	while (sim->managed_next + map <= SIM_MANAGED_SIZE) {
		void *want = (void *)(uintptr_t)(sim->managed_base + sim->managed_next);

		sim->managed_next += map;
		p = mmap(want, map, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == want)
			return p;
		if (p != MAP_FAILED)
			munmap(p, map);         /* a kernel without MAP_FIXED_NOREPLACE */
		else if (errno != EEXIST)
			return NULL;
	}
	return NULL;
}

static int sim_module_fill(struct sim *sim, struct sim_module *m, const struct cuimage *img)
{
	unsigned nk = cuimage_kernel_count(img), ng = cuimage_global_count(img);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	m->funcs = calloc(nk ? nk : 1, sizeof(*m->funcs));
	m->globals = calloc(ng ? ng : 1, sizeof(*m->globals));
	if (!m->funcs || !m->globals)
		return -ENOMEM;
	for (unsigned i = 0; i < nk; i++) {
		const struct cuimage_kernel *k = cuimage_kernel(img, i);
		struct sim_func *f = &m->funcs[i];

		m->func_count++;
		f->module = m;
		f->name = strdup(k->name);
		f->params = calloc(k->param_count ? k->param_count : 1, sizeof(*f->params));
		if (!f->name || !f->params)
			return -ENOMEM;
		f->param_count = k->param_count;
		f->param_bytes = k->param_bytes;
		for (uint32_t p = 0; p < k->param_count; p++) {
			f->params[p].offset = k->params[p].offset;
			f->params[p].size = k->params[p].size;
			/* The parser bounds these; a launch relies on it. */
			if ((uint64_t)k->params[p].offset + k->params[p].size > k->param_bytes)
				return -EINVAL;
		}
		f->cpu = sim_plugin_find(sim, f->name);
		sim_func_defaults(f);
	}
	for (unsigned i = 0; i < ng; i++) {
		const struct cuimage_global *cg = cuimage_global(img, i);
		struct sim_global *g = &m->globals[i];
		size_t map = cg->size ? ((size_t)cg->size + page - 1) & ~(page - 1) : page;

		m->global_count++;
		g->name = strdup(cg->name);
		if (!g->name)
			return -ENOMEM;
		if (cg->size > sim->devs[0].total)
			return -ENOMEM;
		g->storage = global_map(sim, map, cg->managed);
		if (!g->storage)
			return -ENOMEM;
		g->size = (size_t)cg->size;
		g->map_size = map;
		g->managed = cg->managed;
		if (cg->init)
			memcpy(g->storage, cg->init, g->size);
		if (sim_range_add(sim, SIM_RANGE_GLOBAL, (uintptr_t)g->storage,
				  g->size ? g->size : 1)) {
			munmap(g->storage, map);
			g->storage = NULL;
			return -ENOMEM;
		}
	}
	return 0;
}

/* Parse @image (fatbin, cudart wrapper, cubin or PTX) into a new module.
 * The driver takes a bare pointer, so the image measures itself: the caller
 * (the executor) has already checked that its headers fit what it received. */
static CUresult sim_module_create(struct sim *sim, const void *image, struct sim_module **out)
{
	struct cuimage *img = NULL;
	struct sim_module *m;
	const void *data = image;
	size_t size;
	int ret;

	if (!image)
		return CUDA_ERROR_INVALID_VALUE;
	if (cuimage_format_detect(image, 16) == CUIMAGE_FORMAT_WRAPPER) {
		data = cuimage_wrapper_data(image);
		if (!data)
			return CUDA_ERROR_INVALID_IMAGE;
	}
	ret = cuimage_measure(data, CUIMAGE_SIZE_MAX, &size);
	if (!ret)
		ret = cuimage_parse(data, size, SIM_TARGET_SM, &img);
	if (ret) {
		pr_info("module image rejected: %s", strerror(-ret));
		if (ret == -ENOMEM)
			return CUDA_ERROR_OUT_OF_MEMORY;
		return ret == -ENOENT ? CUDA_ERROR_NO_BINARY_FOR_GPU : CUDA_ERROR_INVALID_IMAGE;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		cuimage_free(img);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ret = sim_module_fill(sim, m, img);
	cuimage_free(img);
	if (ret) {
		sim_module_free(sim, m);
		return ret == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_IMAGE;
	}
	*out = m;
	return CUDA_SUCCESS;
}

static void sim_module_unlink(struct sim *sim, struct sim_module *m)
{
	for (struct sim_module **p = &sim->modules; *p; p = &(*p)->next)
		if (*p == m) {
			*p = m->next;
			return;
		}
}

/* Free the modules of ctx (NULL: libraries and every module); devices idle. */
void sim_modules_teardown(struct sim *sim, struct sim_ctx *ctx)
{
	struct sim_module **p = &sim->modules;

	while (*p) {
		struct sim_module *m = *p;

		if (!ctx || m->ctx == ctx) {
			*p = m->next;
			sim_module_free(sim, m);
		} else {
			p = &m->next;
		}
	}
	if (ctx)
		return;
	while (sim->libraries) {
		struct sim_library *l = sim->libraries;

		sim->libraries = l->next;
		free(l);
	}
}

static CUresult sim_module_resolve(struct sim *sim, CUmodule h, struct sim_module **out)
{
	for (struct sim_module *m = sim->modules; m; m = m->next)
		if ((CUmodule)m == h) {
			*out = m;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_HANDLE;
}

static CUresult sim_library_resolve(struct sim *sim, CUlibrary h, struct sim_library **out)
{
	for (struct sim_library *l = sim->libraries; l; l = l->next)
		if ((CUlibrary)l == h) {
			*out = l;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_HANDLE;
}

/* CUfunction and CUkernel: an element of some module's funcs array. */
CUresult sim_func_resolve(struct sim *sim, const void *h, struct sim_func **out)
{
	uintptr_t p = (uintptr_t)h;

	for (struct sim_module *m = sim->modules; m; m = m->next) {
		uintptr_t base = (uintptr_t)m->funcs;

		if (p >= base && p < base + m->func_count * sizeof(*m->funcs) &&
		    (p - base) % sizeof(*m->funcs) == 0) {
			*out = (struct sim_func *)h;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_HANDLE;
}

static struct sim_func *sim_module_func_find(struct sim_module *m, const char *name)
{
	for (uint32_t i = 0; i < m->func_count; i++)
		if (!strcmp(m->funcs[i].name, name))
			return &m->funcs[i];
	return NULL;
}

static CUresult sim_module_global_find(struct sim_module *m, const char *name, bool managed_only,
				       CUdeviceptr *dptr, size_t *bytes)
{
	for (uint32_t i = 0; i < m->global_count; i++)
		if (!strcmp(m->globals[i].name, name) && (!managed_only || m->globals[i].managed)) {
			/* Either output may be NULL, as in the driver. */
			if (dptr)
				*dptr = (CUdeviceptr)(uintptr_t)m->globals[i].storage;
			if (bytes)
				*bytes = m->globals[i].size;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_NOT_FOUND;
}

CUresult sim_cuModuleLoadData(CUmodule *module, const void *image)
{
	struct sim_module *m;
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!module || !image)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = sim_module_create(sim, image, &m);
	if (!rc) {
		m->ctx = ctx;
		m->next = sim->modules;
		sim->modules = m;
		*module = (CUmodule)m;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuModuleUnload(CUmodule hmod)
{
	struct sim_module *m;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_module_resolve(sim, hmod, &m);
	/* A library's module goes with cuLibraryUnload. */
	if (!rc && m->library)
		rc = CUDA_ERROR_INVALID_HANDLE;
	if (!rc) {
		/* Queued launches still use its functions and globals. */
		sim_all_wait(sim);
		sim_module_unlink(sim, m);
		sim_module_free(sim, m);
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	struct sim_module *m;
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_module_resolve(sim, hmod, &m);
	if (!rc) {
		f = sim_module_func_find(m, name);
		if (f)
			*hfunc = (CUfunction)f;
		else
			rc = CUDA_ERROR_NOT_FOUND;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
	struct sim_module *m;
	struct sim *sim;
	CUresult rc;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_module_resolve(sim, hmod, &m);
	if (!rc)
		rc = sim_module_global_find(m, name, false, dptr, bytes);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit_options,
			       void **jit_values, unsigned int num_jit,
			       CUlibraryOption *lib_options, void **lib_values,
			       unsigned int num_lib)
{
	struct sim_library *l;
	struct sim_module *m;
	struct sim *sim;
	CUresult rc;

	if (!library || !code || (num_jit && (!jit_options || !jit_values)) ||
	    (num_lib && (!lib_options || !lib_values)))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	/* Libraries are context-independent: no current context needed. */
	rc = sim_module_create(sim, code, &m);
	if (rc)
		goto out;
	l = calloc(1, sizeof(*l));
	if (!l) {
		sim_module_free(sim, m);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	l->module = m;
	m->library = l;
	m->next = sim->modules;
	sim->modules = m;
	l->next = sim->libraries;
	sim->libraries = l;
	*library = (CUlibrary)l;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuLibraryUnload(CUlibrary hlib)
{
	struct sim_library *l;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_library_resolve(sim, hlib, &l);
	if (!rc) {
		sim_all_wait(sim);
		for (struct sim_library **p = &sim->libraries; *p; p = &(*p)->next)
			if (*p == l) {
				*p = l->next;
				break;
			}
		sim_module_unlink(sim, l->module);
		sim_module_free(sim, l->module);
		free(l);
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuLibraryGetKernel(CUkernel *kernel, CUlibrary hlib, const char *name)
{
	struct sim_library *l;
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if (!kernel || !name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_library_resolve(sim, hlib, &l);
	if (!rc) {
		f = sim_module_func_find(l->module, name);
		if (f)
			*kernel = (CUkernel)f;
		else
			rc = CUDA_ERROR_NOT_FOUND;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuLibraryGetModule(CUmodule *module, CUlibrary hlib)
{
	struct sim_library *l;
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!module)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = sim_library_resolve(sim, hlib, &l);
	if (!rc)
		*module = (CUmodule)l->module;
	sim_leave(sim);
	return rc;
}

static CUresult sim_library_variable(CUdeviceptr *dptr, size_t *bytes, CUlibrary hlib,
				     const char *name, bool managed_only)
{
	struct sim_library *l;
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = sim_library_resolve(sim, hlib, &l);
	if (!rc)
		rc = sim_module_global_find(l->module, name, managed_only, dptr, bytes);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary hlib, const char *name)
{
	return sim_library_variable(dptr, bytes, hlib, name, false);
}

/* The sim answers one pointer attribute, whether memory is managed: only a
 * module's __managed__ variable is. Anything else is NOT_SUPPORTED. */
CUresult sim_cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	struct sim *sim;
	CUresult rc;
	int found = -1;

	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (attribute != CU_POINTER_ATTRIBUTE_IS_MANAGED)
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	for (struct sim_module *m = sim->modules; m && found < 0; m = m->next)
		for (uint32_t i = 0; i < m->global_count && found < 0; i++) {
			uintptr_t base = (uintptr_t)m->globals[i].storage;

			if (ptr >= base && ptr - base < m->globals[i].map_size)
				found = m->globals[i].managed;
		}
	if (found < 0)
		found = sim_range_device_ok(sim, (uintptr_t)ptr, 1, 0) ? 0 : -1;
	if (found < 0)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		*(unsigned *)data = (unsigned)found;
	sim_leave(sim);
	return rc;
}

/* Only a __managed__ variable: the driver answers NOT_FOUND for another. */
CUresult sim_cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary hlib, const char *name)
{
	return sim_library_variable(dptr, bytes, hlib, name, true);
}

/* The kernels of a module (@lib NULL) or library in image order: their
 * count, and up to @max handles into @out. */
static CUresult sim_contents(CUmodule hmod, CUlibrary lib, void **out, unsigned max,
			     unsigned *count)
{
	struct sim_library *l;
	struct sim_module *m;
	struct sim *sim;
	CUresult rc;

	if (!count && !out)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	if (lib) {
		rc = sim_library_resolve(sim, lib, &l);
		m = rc ? NULL : l->module;
	} else {
		rc = sim_module_resolve(sim, hmod, &m);
	}
	if (!rc && count)
		*count = m->func_count;
	for (unsigned i = 0; !rc && out && i < max && i < m->func_count; i++)
		out[i] = &m->funcs[i];
	sim_leave(sim);
	return rc;
}

CUresult sim_cuModuleGetFunctionCount(unsigned int *count, CUmodule hmod)
{
	return count ? sim_contents(hmod, NULL, NULL, 0, count) : CUDA_ERROR_INVALID_VALUE;
}

CUresult sim_cuModuleEnumerateFunctions(CUfunction *functions, unsigned int num, CUmodule hmod)
{
	return sim_contents(hmod, NULL, (void **)functions, num, NULL);
}

CUresult sim_cuLibraryGetKernelCount(unsigned int *count, CUlibrary hlib)
{
	if (!hlib)
		return CUDA_ERROR_INVALID_HANDLE;
	return count ? sim_contents(NULL, hlib, NULL, 0, count) : CUDA_ERROR_INVALID_VALUE;
}

CUresult sim_cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int num, CUlibrary hlib)
{
	if (!hlib)
		return CUDA_ERROR_INVALID_HANDLE;
	return sim_contents(NULL, hlib, (void **)kernels, num, NULL);
}

CUresult sim_cuKernelGetFunction(CUfunction *pfunc, CUkernel kernel)
{
	struct sim_ctx *ctx;
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if (!pfunc)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = sim_func_resolve(sim, kernel, &f);
	if (!rc)
		*pfunc = (CUfunction)f;
	sim_leave(sim);
	return rc;
}

/* ---- function attributes ----------------------------------------------- */

static CUresult sim_func_attr_get(struct sim_func *f, CUfunction_attribute attrib, int *pi)
{
	if ((unsigned)attrib >= CU_FUNC_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	*pi = f->attrs[attrib];
	return CUDA_SUCCESS;
}

static CUresult sim_func_attr_set(struct sim_func *f, CUfunction_attribute attrib, int value)
{
	switch (attrib) {
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		if (value < 0 || (unsigned)value > SIM_SMEM_OPTIN - f->attrs[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES])
			return CUDA_ERROR_INVALID_VALUE;
		break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		if (value < -1 || value > 100)
			return CUDA_ERROR_INVALID_VALUE;
		break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
		if (value < 0 || value > 16)
			return CUDA_ERROR_INVALID_VALUE;
		break;
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
		if (value != 0 && value != 1)
			return CUDA_ERROR_INVALID_VALUE;
		break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		if (value < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT ||
		    value > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
			return CUDA_ERROR_INVALID_VALUE;
		break;
	default:
		/* Read-only attributes. */
		return CUDA_ERROR_INVALID_VALUE;
	}
	f->attrs[attrib] = value;
	return CUDA_SUCCESS;
}

/* Enter and resolve a function or kernel handle in one step. */
CUresult sim_enter_func(const void *h, struct sim **psim, struct sim_func **pf)
{
	CUresult rc = sim_enter(psim);

	if (rc)
		return rc;
	rc = sim_func_resolve(*psim, h, pf);
	if (rc)
		sim_leave(*psim);
	return rc;
}

static CUresult sim_check_device(struct sim *sim, CUdevice dev)
{
	return dev >= 0 && (unsigned)dev < sim->dev_count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult sim_cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(hfunc, &sim, &f);
	if (rc)
		return rc;
	rc = sim_func_attr_get(f, attrib, pi);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter_func(hfunc, &sim, &f);
	if (rc)
		return rc;
	rc = sim_func_attr_set(f, attrib, value);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel,
				  CUdevice dev)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(kernel, &sim, &f);
	if (rc)
		return rc;
	rc = sim_check_device(sim, dev);
	if (!rc)
		rc = sim_func_attr_get(f, attrib, pi);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuKernelSetAttribute(CUfunction_attribute attrib, int value, CUkernel kernel,
				  CUdevice dev)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter_func(kernel, &sim, &f);
	if (rc)
		return rc;
	rc = sim_check_device(sim, dev);
	if (!rc)
		rc = sim_func_attr_set(f, attrib, value);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(hfunc, &sim, &f);
	if (rc)
		return rc;
	f->cache_config = config;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(kernel, &sim, &f);
	if (rc)
		return rc;
	rc = sim_check_device(sim, dev);
	if (!rc)
		f->cache_config = config;
	sim_leave(sim);
	return rc;
}

/* Bank size configuration is a no-op on sm_90 in the driver, which still
 * checks the value; the sim keeps it. */
CUresult sim_cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if ((unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(hfunc, &sim, &f);
	if (rc)
		return rc;
	f->shared_config = config;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

static CUresult sim_param_info(const void *h, size_t index, size_t *offset, size_t *size)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if (!offset)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(h, &sim, &f);
	if (rc)
		return rc;
	if (index >= f->param_count) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else {
		*offset = f->params[index].offset;
		if (size)
			*size = f->params[index].size;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuFuncGetParamInfo(CUfunction func, size_t index, size_t *offset, size_t *size)
{
	return sim_param_info(func, index, offset, size);
}

CUresult sim_cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t *offset, size_t *size)
{
	return sim_param_info(kernel, index, offset, size);
}

static CUresult sim_name_get(const void *h, const char **name)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(h, &sim, &f);
	if (rc)
		return rc;
	/* Valid until the module is unloaded, as the driver's is. */
	*name = f->name;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuFuncGetName(const char **name, CUfunction hfunc)
{
	return sim_name_get(hfunc, name);
}

CUresult sim_cuKernelGetName(const char **name, CUkernel kernel)
{
	return sim_name_get(kernel, name);
}

/* ---- the JIT linker ---------------------------------------------------- */

/* The JIT linker. The sim has no device code to link: it takes one input
 * image (cubin, PTX or fatbin), checks it as cuModuleLoadData would, and
 * hands back its bytes. More than one input answers
 * CUDA_ERROR_NOT_SUPPORTED (docs/sim.md). */
struct sim_link {
	void *image;
	size_t size;
	unsigned inputs;
};

CUresult sim_cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues,
			  CUlinkState *stateOut)
{
	struct sim_link *l;

	if (!stateOut || (numOptions && (!options || !optionValues)))
		return CUDA_ERROR_INVALID_VALUE;
	l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Outputs the app may read: an empty log, no wall time. */
	for (unsigned i = 0; i < numOptions; i++) {
		if ((options[i] == CU_JIT_INFO_LOG_BUFFER || options[i] == CU_JIT_ERROR_LOG_BUFFER) &&
		    optionValues[i])
			*(char *)optionValues[i] = 0;
		if (options[i] == CU_JIT_WALL_TIME)
			optionValues[i] = NULL;
	}
	*stateOut = (CUlinkState)l;
	return CUDA_SUCCESS;
}

CUresult sim_cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size,
			   const char *name, unsigned int numOptions, CUjit_option *options,
			   void **optionValues)
{
	struct sim_link *l = (struct sim_link *)state;
	struct cuimage *img = NULL;
	size_t measured;

	if (!l || !data || !size || (unsigned)type >= CU_JIT_NUM_INPUT_TYPES)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_JIT_INPUT_CUBIN && type != CU_JIT_INPUT_PTX && type != CU_JIT_INPUT_FATBINARY)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (l->inputs++)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* Any text measures as PTX: PTX also names its version and target. */
	if (type == CU_JIT_INPUT_PTX && (!memchr(data, 0, size) || !strstr(data, ".version") ||
					 !strstr(data, ".target")))
		return CUDA_ERROR_INVALID_PTX;
	if (cuimage_measure(data, size, &measured) || cuimage_parse(data, measured, SIM_TARGET_SM, &img))
		return type == CU_JIT_INPUT_PTX ? CUDA_ERROR_INVALID_PTX : CUDA_ERROR_INVALID_IMAGE;
	cuimage_free(img);
	l->image = malloc(size);
	if (!l->image)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(l->image, data, size);
	l->size = size;
	return CUDA_SUCCESS;
}

CUresult sim_cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
	struct sim_link *l = (struct sim_link *)state;

	if (!l || !cubinOut || !sizeOut)
		return CUDA_ERROR_INVALID_VALUE;
	if (!l->image)
		return CUDA_ERROR_INVALID_VALUE;
	*cubinOut = l->image;
	*sizeOut = l->size;
	return CUDA_SUCCESS;
}

CUresult sim_cuLinkDestroy(CUlinkState state)
{
	struct sim_link *l = (struct sim_link *)state;

	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	free(l->image);
	free(l);
	return CUDA_SUCCESS;
}
