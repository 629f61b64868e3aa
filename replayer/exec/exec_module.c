/* Modules, libraries, functions and kernels. */
#define LOG_PREFIX "exec: "
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "fatbin.h"
#include "log.h"
#include "wire_dispatch.h"
#include "le.h"

/* Images are copied to aligned memory: the payload buffer gives no alignment
 * guarantee and the driver reads ELF structures in place. The driver API
 * passes no size, so the driver (and the sim) trust the image's own headers:
 * an image whose headers claim more than the guest sent is refused here. */
static CUresult image_copy(struct wire_blob image, void **out)
{
	size_t measured;
	void *p;

	if (image.len == 0)
		return CUDA_ERROR_INVALID_IMAGE;
	p = aligned_alloc(64, (image.len + 64) / 64 * 64);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(p, image.ptr, image.len);
	/* PTX must be NUL-terminated; a missing terminator is added, not read past. */
	((uint8_t *)p)[image.len] = 0;
	if (cuimage_measure(p, image.len + 1, &measured) || measured > image.len + 1) {
		free(p);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	*out = p;
	return CUDA_SUCCESS;
}

/* ---- the quota's share of images ---- */

/* Device bytes @image's globals take on the current device. The image's
 * size says nothing of them: a zero-filled __device__ array (a cubin's
 * NOBITS .nv.global, a PTX .global without an initialiser) holds no byte
 * of the file. 0 for an image tern cannot read (docs/limits.md, "Quota"). */
static uint64_t image_globals_bytes(struct exec *ex, const void *image, size_t size)
{
	int major = 9, minor = 0;
	struct cuimage *img;
	uint64_t total = 0;
	CUdevice dev = ex->dev.list[ex->dev.current].dev;

	ex->be->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
	ex->be->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	if (cuimage_parse(image, size, (unsigned)(major * 10 + minor), &img)) {
		pr_warn("an image cannot be read for its globals: they are not counted in the quota");
		return 0;
	}
	for (unsigned i = 0; i < cuimage_global_count(img); i++) {
		const struct cuimage_global *g = cuimage_global(img, i);

		/* Each is below CUIMAGE_SIZE_MAX; the driver aligns them. */
		total += (g->size + 255) & ~255ull;
		if (total > EXEC_CHARGE_MAX) {
			total = EXEC_CHARGE_MAX;
			break;
		}
	}
	cuimage_free(img);
	return total;
}

CUresult exec_image_charge(struct exec *ex, uint64_t handle, const void *image, size_t size)
{
	struct exec_charges *c = &ex->charges;
	uint64_t bytes = image_globals_bytes(ex, image, size);

	if (!bytes)
		return CUDA_SUCCESS;
	if (ex->cfg.quota && (bytes > ex->cfg.quota || exec_mem_used(ex) > ex->cfg.quota - bytes)) {
		pr_debug("an image's globals take %llu bytes: over the quota", (unsigned long long)bytes);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (c->image_count == c->image_cap) {
		unsigned cap = c->image_cap ? c->image_cap * 2 : 16;
		struct exec_image_charge *n = realloc(c->images, cap * sizeof(*n));

		if (!n)
			return CUDA_ERROR_OUT_OF_MEMORY;
		c->images = n;
		c->image_cap = cap;
	}
	c->images[c->image_count++] = (struct exec_image_charge){ handle, bytes };
	c->image_bytes += bytes;
	exec_mem_publish(ex);
	return CUDA_SUCCESS;
}

void exec_image_uncharge(struct exec *ex, uint64_t handle)
{
	struct exec_charges *c = &ex->charges;

	for (unsigned i = 0; i < c->image_count; i++)
		if (c->images[i].handle == handle) {
			c->image_bytes -= c->images[i].bytes;
			c->images[i] = c->images[--c->image_count];
			exec_mem_publish(ex);
			return;
		}
}

CUresult exec_module_load_data(struct exec *ex, const struct wire_module_load_data_req *req,
			       struct wire_module_load_data_rep *rep)
{
	void *image;
	CUmodule mod;
	CUresult res = image_copy(req->image, &image);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuModuleLoadData(&mod, image);
	if (res == CUDA_SUCCESS) {
		res = exec_object_add_image(ex, HANDLE_MODULE, mod, req->image.ptr, req->image.len,
					    &rep->module);
		if (res == CUDA_SUCCESS) {
			res = exec_image_charge(ex, rep->module, image, req->image.len + 1);
			if (res != CUDA_SUCCESS)
				exec_object_remove(ex, rep->module);
		}
		if (res != CUDA_SUCCESS)
			ex->be->cuModuleUnload(mod);
	}
	free(image);
	return res;
}

static void children_drop(struct exec *ex, uint64_t parent);

static int entry_drop_child(struct handle_entry *e, void *arg)
{
	struct exec *ex = ((void **)arg)[0];
	uint64_t parent = *(uint64_t *)((void **)arg)[1];
	uint64_t handle = e->handle;

	if (e->parent != parent)
		return 0;
	if (e->kind == HANDLE_FUNCTION || e->kind == HANDLE_KERNEL) {
		struct exec_kernel_info *ki = e->info;

		exec_params_release(&ki->params);
		free(ki);
		e->info = NULL;
	}
	/* A kernel's functions go with it. Removal leaves tombstones, so the
	 * walk in progress stays valid. */
	children_drop(ex, handle);
	exec_object_remove(ex, handle);
	return 0;
}

/* Forget the functions, kernels and modules that came from @parent. */
static void children_drop(struct exec *ex, uint64_t parent)
{
	void *arg[2] = { ex, &parent };

	handle_table_foreach(ex->handles, entry_drop_child, arg);
	exec_extra_range_drop_owner(ex, parent);
}

CUresult exec_module_unload(struct exec *ex, const struct wire_module_unload_req *req,
			    struct wire_module_unload_rep *rep)
{
	struct handle_entry *e;
	CUresult res;

	res = exec_lookup_module(ex, req->module, &e);
	if (res != CUDA_SUCCESS)
		return res;
	if (e->parent)          /* a library's module goes with its library */
		return CUDA_ERROR_NOT_PERMITTED;
	res = ex->be->cuModuleUnload(e->real);
	if (res != CUDA_SUCCESS)
		return res;
	children_drop(ex, req->module);
	exec_image_uncharge(ex, req->module);
	exec_object_remove(ex, req->module);
	return CUDA_SUCCESS;
}

/* Issue a handle for a function or kernel, with its parameter layout. */
static CUresult callable_add(struct exec *ex, enum handle_kind kind, void *real, uint64_t parent,
			     const char *name, uint64_t *handle, struct wire_blob *params_blob)
{
	static uint32_t blob[2 * 8192];
	struct exec_kernel_info *ki;
	struct handle_entry *known = handle_table_find_real(ex->handles, kind, real);
	CUresult res;

	if (known) {            /* asking twice gives the same handle, as the driver does */
		ki = known->info;
		*handle = known->handle;
		*params_blob = exec_params_blob(&ki->params, blob);
		return CUDA_SUCCESS;
	}
	ki = calloc(1, sizeof(*ki));
	if (!ki)
		return CUDA_ERROR_OUT_OF_MEMORY;
	exec_context_any(ex);
	res = kind == HANDLE_KERNEL ? exec_params_query(ex, NULL, real, &ki->params)
				    : exec_params_query(ex, real, NULL, &ki->params);
	if (res != CUDA_SUCCESS) {
		free(ki);
		return res;
	}
	/* The journal keeps the name (u32 length, bytes; length 0 for a
	 * kernel's function): a restore looks the function up again. Settings
	 * follow it (exec_journal_func_setting). */
	{
		static uint8_t args[4 + WIRE_STR_MAX];
		uint32_t len = name ? (uint32_t)strnlen(name, WIRE_STR_MAX) : 0;

		le32_put(args, len);
		if (len)
			memcpy(args + 4, name, len);
		res = exec_object_add(ex, kind, real, parent, ki, args, 4 + len, handle);
	}
	if (res != CUDA_SUCCESS) {
		exec_params_release(&ki->params);
		free(ki);
		return res;
	}
	*params_blob = exec_params_blob(&ki->params, blob);
	return CUDA_SUCCESS;
}

CUresult exec_module_get_function(struct exec *ex, const struct wire_module_get_function_req *req,
				  struct wire_module_get_function_rep *rep)
{
	struct handle_entry *e;
	CUfunction fn;
	CUresult res;

	res = exec_lookup_module(ex, req->module, &e);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuModuleGetFunction(&fn, e->real, req->name);
	if (res != CUDA_SUCCESS)
		return res;
	return callable_add(ex, HANDLE_FUNCTION, fn, req->module, req->name, &rep->function, &rep->params);
}

CUresult exec_module_get_global(struct exec *ex, const struct wire_module_get_global_req *req,
				struct wire_module_get_global_rep *rep)
{
	struct handle_entry *e;
	CUdeviceptr addr = 0;
	size_t bytes = 0;
	CUresult res;

	res = exec_lookup_module(ex, req->module, &e);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuModuleGetGlobal(&addr, &bytes, e->real, req->name);
	if (res != CUDA_SUCCESS)
		return res;
	exec_extra_range_add(ex, addr, bytes, e->parent ? e->parent : req->module);
	rep->address = addr;
	rep->bytes = bytes;
	return CUDA_SUCCESS;
}

/* cuModuleGetGlobal for the shim, which must know whether the variable is
 * __managed__ (its host side is then the guest's mirror). */
CUresult exec_module_get_variable(struct exec *ex, const struct wire_module_get_variable_req *req,
				  struct wire_module_get_variable_rep *rep)
{
	struct wire_module_get_global_req g = { .module = req->module };
	struct wire_module_get_global_rep grep;
	unsigned managed = 0;
	CUresult res;

	memcpy(g.name, req->name, sizeof(g.name));
	res = exec_module_get_global(ex, &g, &grep);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, grep.address);
	/* A backend that cannot tell has no managed variables. */
	if (res == CUDA_ERROR_NOT_SUPPORTED)
		managed = 0;
	else if (res != CUDA_SUCCESS)
		return res;
	rep->address = grep.address;
	rep->bytes = grep.bytes;
	rep->managed = managed != 0;
	return CUDA_SUCCESS;
}

CUresult exec_library_load_data(struct exec *ex, const struct wire_library_load_data_req *req,
				struct wire_library_load_data_rep *rep)
{
	void *image;
	CUlibrary lib;
	CUresult res = image_copy(req->image, &image);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0);
	if (res == CUDA_SUCCESS) {
		res = exec_object_add_image(ex, HANDLE_LIBRARY, lib, req->image.ptr, req->image.len,
					    &rep->library);
		if (res == CUDA_SUCCESS) {
			res = exec_image_charge(ex, rep->library, image, req->image.len + 1);
			if (res != CUDA_SUCCESS)
				exec_object_remove(ex, rep->library);
		}
		if (res != CUDA_SUCCESS)
			ex->be->cuLibraryUnload(lib);
	}
	free(image);
	return res;
}

CUresult exec_library_unload(struct exec *ex, const struct wire_library_unload_req *req,
			     struct wire_library_unload_rep *rep)
{
	struct handle_entry *e;
	CUresult res;

	res = exec_lookup_library(ex, req->library, &e);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuLibraryUnload(e->real);
	if (res != CUDA_SUCCESS)
		return res;
	children_drop(ex, req->library);
	exec_image_uncharge(ex, req->library);
	exec_object_remove(ex, req->library);
	return CUDA_SUCCESS;
}

CUresult exec_library_get_kernel(struct exec *ex, const struct wire_library_get_kernel_req *req,
				 struct wire_library_get_kernel_rep *rep)
{
	struct handle_entry *e;
	CUkernel k;
	CUresult res;

	res = exec_lookup_library(ex, req->library, &e);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuLibraryGetKernel(&k, e->real, req->name);
	if (res != CUDA_SUCCESS)
		return res;
	return callable_add(ex, HANDLE_KERNEL, k, req->library, req->name, &rep->kernel, &rep->params);
}

/* The module of @library in the current context, under one handle. */
static CUresult library_module(struct exec *ex, uint64_t library, uint64_t *module)
{
	struct handle_entry *e = handle_table_get(ex->handles, library, HANDLE_LIBRARY);
	struct handle_entry *known;
	CUmodule mod;
	CUresult res;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	res = ex->be->cuLibraryGetModule(&mod, e->real);
	if (res != CUDA_SUCCESS)
		return res;
	known = handle_table_find_real(ex->handles, HANDLE_MODULE, mod);
	if (known) {
		*module = known->handle;
		return CUDA_SUCCESS;
	}
	return exec_object_add(ex, HANDLE_MODULE, mod, library, NULL, NULL, 0, module);
}

CUresult exec_library_get_module(struct exec *ex, const struct wire_library_get_module_req *req,
				 struct wire_library_get_module_rep *rep)
{
	return library_module(ex, req->library, &rep->module);
}

/* Owners come from the handle table: every function and kernel handle is
 * issued with the module, library or kernel it came from as its parent. A
 * kernel's function belongs to its library's module, as in the driver. */
CUresult exec_func_get_module(struct exec *ex, const struct wire_func_get_module_req *req,
			      struct wire_func_get_module_rep *rep)
{
	struct handle_entry *e = handle_table_get(ex->handles, req->function, HANDLE_FUNCTION);
	struct handle_entry *kernel;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (handle_kind_of(e->parent) == HANDLE_MODULE) {
		rep->module = e->parent;
		return CUDA_SUCCESS;
	}
	kernel = handle_table_get(ex->handles, e->parent, HANDLE_KERNEL);
	if (!kernel)
		return CUDA_ERROR_INVALID_HANDLE;
	return library_module(ex, kernel->parent, &rep->module);
}

CUresult exec_kernel_get_library(struct exec *ex, const struct wire_kernel_get_library_req *req,
				 struct wire_kernel_get_library_rep *rep)
{
	struct handle_entry *e = handle_table_get(ex->handles, req->kernel, HANDLE_KERNEL);

	if (!e || handle_kind_of(e->parent) != HANDLE_LIBRARY)
		return CUDA_ERROR_INVALID_HANDLE;
	rep->library = e->parent;
	return CUDA_SUCCESS;
}

/* A library's global (cuLibraryGetGlobal) or __managed__ variable
 * (cuLibraryGetManaged): the guest may copy to and from it from now on. */
static CUresult library_variable(struct exec *ex, uint64_t library, const char *name,
				 CUresult (*get)(CUdeviceptr *, size_t *, CUlibrary, const char *),
				 uint64_t *address, uint64_t *bytes_out)
{
	struct handle_entry *e = handle_table_get(ex->handles, library, HANDLE_LIBRARY);
	CUdeviceptr addr = 0;
	size_t bytes = 0;
	CUresult res;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	res = get(&addr, &bytes, e->real, name);
	if (res != CUDA_SUCCESS)
		return res;
	exec_extra_range_add(ex, addr, bytes, library);
	*address = addr;
	*bytes_out = bytes;
	return CUDA_SUCCESS;
}

CUresult exec_library_get_global(struct exec *ex, const struct wire_library_get_global_req *req,
				 struct wire_library_get_global_rep *rep)
{
	return library_variable(ex, req->library, req->name, ex->be->cuLibraryGetGlobal,
				&rep->address, &rep->bytes);
}

CUresult exec_library_get_managed(struct exec *ex, const struct wire_library_get_managed_req *req,
				  struct wire_library_get_managed_rep *rep)
{
	/* A managed variable is the library's, not a context's: cudart asks
	 * before it makes one current. */
	exec_context_any(ex);
	return library_variable(ex, req->library, req->name, ex->be->cuLibraryGetManaged,
				&rep->address, &rep->bytes);
}

/* Enumeration: the driver's handles for what a module or library holds, each
 * issued a virtual handle (the one a lookup by name gives, as the driver's
 * handles are the same) and journaled under its name so that a restore can
 * look it up again. The reply lists at most @max of them, as the driver
 * fills at most the caller's array; the driver's count bounds the buffer. */
#define ENUM_MAX ((WIRE_PAYLOAD_MAX - 64) / 8)

/* How many functions a module, or kernels a library, holds. */
static CUresult contents_count(struct exec *ex, uint64_t owner, enum handle_kind kind,
			       unsigned *count)
{
	struct handle_entry *e = handle_table_get(ex->handles, owner, kind);

	*count = 0;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	return kind == HANDLE_LIBRARY ? ex->be->cuLibraryGetKernelCount(count, e->real)
				      : ex->be->cuModuleGetFunctionCount(count, e->real);
}

static CUresult contents_list(struct exec *ex, uint64_t owner, enum handle_kind kind,
			      uint32_t max, struct wire_blob *out)
{
	enum handle_kind item = kind == HANDLE_LIBRARY ? HANDLE_KERNEL : HANDLE_FUNCTION;
	unsigned count, n;
	uint8_t *buf;
	void **real;
	CUresult res = contents_count(ex, owner, kind, &count);

	if (res != CUDA_SUCCESS)
		return res;
	n = count < max ? count : max;
	if (n > ENUM_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	real = calloc(n ? n : 1, sizeof(*real));
	buf = exec_copy_buffer(ex, (size_t)n * 8);
	if (!real || !buf) {
		free(real);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	{
		/* Looked up again: a handle added below may move the table. */
		void *owner_real = handle_table_get(ex->handles, owner, kind)->real;

		res = kind == HANDLE_LIBRARY ?
		      ex->be->cuLibraryEnumerateKernels((CUkernel *)real, n, owner_real) :
		      ex->be->cuModuleEnumerateFunctions((CUfunction *)real, n, owner_real);
	}
	for (unsigned i = 0; i < n && res == CUDA_SUCCESS; i++) {
		const char *name = NULL;
		struct wire_blob params;
		uint64_t h = 0;

		res = item == HANDLE_KERNEL ? ex->be->cuKernelGetName(&name, real[i])
					    : ex->be->cuFuncGetName(&name, real[i]);
		if (res == CUDA_SUCCESS)
			res = callable_add(ex, item, real[i], owner, name, &h, &params);
		for (int k = 0; k < 8; k++)
			buf[8 * i + k] = (uint8_t)(h >> (8 * k));
	}
	free(real);
	if (res == CUDA_SUCCESS)
		*out = (struct wire_blob){ buf, n * 8 };
	return res;
}

CUresult exec_module_get_function_count(struct exec *ex,
					const struct wire_module_get_function_count_req *req,
					struct wire_module_get_function_count_rep *rep)
{
	unsigned count;
	CUresult res = contents_count(ex, req->module, HANDLE_MODULE, &count);

	rep->count = count;
	return res;
}

CUresult exec_module_enumerate_functions(struct exec *ex,
					 const struct wire_module_enumerate_functions_req *req,
					 struct wire_module_enumerate_functions_rep *rep)
{
	return contents_list(ex, req->module, HANDLE_MODULE, req->max, &rep->functions);
}

CUresult exec_library_get_kernel_count(struct exec *ex,
				       const struct wire_library_get_kernel_count_req *req,
				       struct wire_library_get_kernel_count_rep *rep)
{
	unsigned count;
	CUresult res = contents_count(ex, req->library, HANDLE_LIBRARY, &count);

	rep->count = count;
	return res;
}

CUresult exec_library_enumerate_kernels(struct exec *ex,
					const struct wire_library_enumerate_kernels_req *req,
					struct wire_library_enumerate_kernels_rep *rep)
{
	return contents_list(ex, req->library, HANDLE_LIBRARY, req->max, &rep->kernels);
}

CUresult exec_kernel_get_function(struct exec *ex, const struct wire_kernel_get_function_req *req,
				  struct wire_kernel_get_function_rep *rep)
{
	struct handle_entry *e;
	CUfunction fn;
	CUresult res;

	res = exec_lookup_kernel(ex, req->kernel, &e);
	if (res != CUDA_SUCCESS)
		return res;
	res = exec_function_real(ex, req->kernel, &fn, NULL);
	if (res != CUDA_SUCCESS)
		return res;
	return callable_add(ex, HANDLE_FUNCTION, fn, req->kernel, NULL, &rep->function, &rep->params);
}

CUresult exec_func_get_attribute(struct exec *ex, const struct wire_func_get_attribute_req *req,
				 struct wire_func_get_attribute_rep *rep)
{
	CUfunction fn;
	int v = 0;
	CUresult res = exec_function_real(ex, req->function, &fn, NULL);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuFuncGetAttribute(&v, (CUfunction_attribute)req->attrib, fn);
	rep->value = v;
	return res;
}

CUresult exec_func_set_attribute(struct exec *ex, const struct wire_func_set_attribute_req *req,
				 struct wire_func_set_attribute_rep *rep)
{
	CUfunction fn;
	CUresult res = exec_function_real(ex, req->function, &fn, NULL);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuFuncSetAttribute(fn, (CUfunction_attribute)req->attrib, req->value);
	if (res == CUDA_SUCCESS)
		exec_journal_func_setting(ex, req->function, req->attrib, req->value);
	return res;
}

CUresult exec_func_set_cache_config(struct exec *ex, const struct wire_func_set_cache_config_req *req,
				    struct wire_func_set_cache_config_rep *rep)
{
	CUfunction fn;
	CUresult res = exec_function_real(ex, req->function, &fn, NULL);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuFuncSetCacheConfig(fn, (CUfunc_cache)req->config);
	if (res == CUDA_SUCCESS)
		exec_journal_func_setting(ex, req->function, EXEC_FUNC_SETTING_CACHE_CONFIG,
					  (int32_t)req->config);
	return res;
}

CUresult exec_func_set_shared_mem_config(struct exec *ex,
					 const struct wire_func_set_shared_mem_config_req *req,
					 struct wire_func_set_shared_mem_config_rep *rep)
{
	CUfunction fn;
	CUresult res = exec_function_real(ex, req->function, &fn, NULL);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuFuncSetSharedMemConfig(fn, (CUsharedconfig)req->config);
	if (res == CUDA_SUCCESS)
		exec_journal_func_setting(ex, req->function, EXEC_FUNC_SETTING_SHARED_CONFIG,
					  (int32_t)req->config);
	return res;
}

CUresult exec_func_get_name(struct exec *ex, const struct wire_func_get_name_req *req,
			    struct wire_func_get_name_rep *rep)
{
	CUfunction fn;
	const char *name = NULL;
	CUresult res = exec_function_real(ex, req->function, &fn, NULL);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuFuncGetName ? ex->be->cuFuncGetName(&name, fn) : CUDA_ERROR_NOT_SUPPORTED;
	if (res == CUDA_SUCCESS && name)
		snprintf(rep->name, sizeof(rep->name), "%s", name);
	return res;
}

/* A kernel handle and the device of a per-device kernel call. */
static CUresult kernel_on_device(struct exec *ex, uint64_t kernel, int32_t device, void **real,
				 CUdevice *dev)
{
	struct handle_entry *e = handle_table_get(ex->handles, kernel, HANDLE_KERNEL);

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	*real = e->real;
	return exec_device_real(ex, device, dev);
}

CUresult exec_kernel_get_attribute(struct exec *ex, const struct wire_kernel_get_attribute_req *req,
				   struct wire_kernel_get_attribute_rep *rep)
{
	CUdevice dev;
	void *k;
	int v = 0;
	CUresult res = kernel_on_device(ex, req->kernel, req->device, &k, &dev);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuKernelGetAttribute(&v, (CUfunction_attribute)req->attrib, k, dev);
	rep->value = v;
	return res;
}

CUresult exec_kernel_set_attribute(struct exec *ex, const struct wire_kernel_set_attribute_req *req,
				   struct wire_kernel_set_attribute_rep *rep)
{
	CUdevice dev;
	void *k;
	CUresult res = kernel_on_device(ex, req->kernel, req->device, &k, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuKernelSetAttribute((CUfunction_attribute)req->attrib, req->value, k, dev);
	if (res == CUDA_SUCCESS)
		exec_journal_func_setting(ex, req->kernel, req->attrib, req->value);
	return res;
}

CUresult exec_kernel_set_cache_config(struct exec *ex, const struct wire_kernel_set_cache_config_req *req,
				      struct wire_kernel_set_cache_config_rep *rep)
{
	CUdevice dev;
	void *k;
	CUresult res = kernel_on_device(ex, req->kernel, req->device, &k, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuKernelSetCacheConfig(k, (CUfunc_cache)req->config, dev);
	if (res == CUDA_SUCCESS)
		exec_journal_func_setting(ex, req->kernel, EXEC_FUNC_SETTING_CACHE_CONFIG,
					  (int32_t)req->config);
	return res;
}

CUresult exec_kernel_get_name(struct exec *ex, const struct wire_kernel_get_name_req *req,
			      struct wire_kernel_get_name_rep *rep)
{
	struct handle_entry *e;
	const char *name = NULL;
	CUresult res;

	res = exec_lookup_kernel(ex, req->kernel, &e);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuKernelGetName ? ex->be->cuKernelGetName(&name, e->real) : CUDA_ERROR_NOT_SUPPORTED;
	if (res == CUDA_SUCCESS && name)
		snprintf(rep->name, sizeof(rep->name), "%s", name);
	return res;
}

CUresult exec_func_get_params(struct exec *ex, const struct wire_func_get_params_req *req,
			      struct wire_func_get_params_rep *rep)
{
	static uint32_t blob[2 * 8192];
	const struct exec_params *params;
	CUfunction fn;
	CUresult res = exec_function_real(ex, req->function, &fn, &params);

	if (res == CUDA_SUCCESS)
		rep->params = exec_params_blob(params, blob);
	return res;
}
