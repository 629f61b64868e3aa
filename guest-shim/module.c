/* Modules, libraries, functions and kernels. Images are copied to the worker
 * (measured by image.c); every function or kernel handle the worker returns
 * comes with its parameter layout, which func_table keeps for launches. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fatbin.h"
#include "log.h"

/* An image and its fields must fit one message. */
#define MODULE_IMAGE_MAX (WIRE_PAYLOAD_MAX - 4096u)

static CUresult image_blob(const void *image, struct wire_blob *blob)
{
	const void *data;
	size_t size;

	if (!image)
		return CUDA_ERROR_INVALID_VALUE;
	/* cudart hands over its fatbin wrapper; the worker gets what it points at.
	 * The app's pointer is trusted as the driver trusts it. */
	data = cuimage_wrapper_data(image);
	if (!data)
		data = image;
	if (cuimage_measure(data, CUIMAGE_SIZE_MAX, &size)) {
		pr_warn("module image at %p is not a fatbin, cubin or PTX", image);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	if (size > MODULE_IMAGE_MAX) {
		pr_err("module image of %zu bytes exceeds the wire limit", size);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	blob->ptr = data;
	blob->len = (uint32_t)size;
	return CUDA_SUCCESS;
}

/* Reads a whole file for cuModuleLoad, cuLibraryLoadFromFile and
 * cuLinkAddFile; free() it. @size may be NULL. */
CUresult shim_file_read(const char *path, void **out, size_t *size)
{
	struct stat st;
	uint8_t *buf;
	size_t done = 0;
	int fd;

	if (!path)
		return CUDA_ERROR_INVALID_VALUE;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_FILE_NOT_FOUND;
	if (fstat(fd, &st) || st.st_size <= 0 || (uint64_t)st.st_size > MODULE_IMAGE_MAX) {
		close(fd);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	/* One spare NUL so that a PTX file measures as text. */
	buf = calloc(1, (size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	while (done < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);

		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			break;
		}
		done += (size_t)n;
	}
	close(fd);
	if (done != (size_t)st.st_size) {
		free(buf);
		return CUDA_ERROR_FILE_NOT_FOUND;
	}
	*out = buf;
	if (size)
		*size = done;
	return CUDA_SUCCESS;
}

static void params_remember(uint64_t handle, struct wire_blob params)
{
	if (func_table_set_params(handle, params.ptr, params.len))
		pr_warn("function %#llx: malformed parameter layout from ternd",
			(unsigned long long)handle);
}

/* Modules */

static CUresult module_load(CUmodule *module, const void *image)
{
	struct wire_module_load_data_req req = { 0 };
	struct wire_module_load_data_rep rep;
	CUresult res;

	if (!module)
		return CUDA_ERROR_INVALID_VALUE;
	res = image_blob(image, &req.image);
	if (res != CUDA_SUCCESS)
		return res;
	res = rpc_module_load_data(&req, &rep);
	if (res == CUDA_SUCCESS)
		*module = (CUmodule)(uintptr_t)rep.module;
	return res;
}

SHIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	SHIM_ENTRY();
	return module_load(module, image);
}

SHIM_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
				     CUjit_option *options, void **optionValues)
{
	SHIM_ENTRY();
	struct jit_options jo;
	CUresult res;

	/* JIT options tune compilation on the worker's side; none change what
	 * the module holds, so they are not forwarded. Their outputs (logs, wall
	 * time) are answered, empty, so the app never reads stale ones. */
	res = jit_options_parse(numOptions, options, optionValues, &jo);
	if (res != CUDA_SUCCESS)
		return res;
	res = module_load(module, image);
	jit_options_answer(&jo, "", "", 0.0f);
	return res;
}

SHIM_API CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	SHIM_ENTRY();
	return module_load(module, fatCubin);
}

SHIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
	SHIM_ENTRY();
	void *buf = NULL;
	CUresult res;

	if (!module)
		return CUDA_ERROR_INVALID_VALUE;
	res = shim_file_read(fname, &buf, NULL);
	if (res != CUDA_SUCCESS)
		return res;
	res = module_load(module, buf);
	free(buf);
	return res;
}

SHIM_API CUresult cuModuleUnload(CUmodule hmod)
{
	SHIM_ENTRY();
	struct wire_module_unload_req req = { .module = (uint64_t)(uintptr_t)hmod };
	struct wire_module_unload_rep rep;
	CUresult res = rpc_module_unload(&req, &rep);

	if (res == CUDA_SUCCESS) {
		managed_drop_owner(req.module);
		func_table_forget_answers();
	}
	return res;
}

static CUresult name_copy(char *dst, size_t cap, const char *name)
{
	size_t n;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	n = strnlen(name, cap);
	if (n == cap)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(dst, name, n + 1);
	return CUDA_SUCCESS;
}

static CUresult module_function_ask(uint64_t module, const char *name, uint64_t *function)
{
	struct wire_module_get_function_req req = { .module = module };
	struct wire_module_get_function_rep rep;
	CUresult res;

	memcpy(req.name, name, strlen(name) + 1);
	res = rpc_module_get_function(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	params_remember(rep.function, rep.params);
	*function = rep.function;
	return CUDA_SUCCESS;
}

/* A lookup answered from guest-shim/lookup_table.c (asked with @ask the
 * first time) into the handle at @out; @by_name: @name is the caller's
 * and must be a string, else there is none. */
static CUresult lookup(void **out, enum lookup_kind kind, uint64_t owner, bool by_name,
		       const char *name,
		       CUresult (*ask)(uint64_t owner, const char *name, uint64_t *answer))
{
	char copy[WIRE_STR_MAX + 1];
	uint64_t handle;
	CUresult res;

	if (!out || (by_name && name_copy(copy, sizeof(copy), name)))
		return CUDA_ERROR_INVALID_VALUE;
	res = lookup_table_answer(kind, owner, by_name ? copy : NULL, &handle, ask);
	if (res == CUDA_SUCCESS)
		*out = (void *)(uintptr_t)handle;
	return res;
}

/* The same module and name give the same function. */
SHIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	SHIM_ENTRY();
	return lookup((void **)hfunc, LOOKUP_FUNCTION, (uint64_t)(uintptr_t)hmod, true, name,
		      module_function_ask);
}

/* A module's or library's variable found: a __managed__ one gets its host
 * side, a mirror at its address owned by @owner (guest-shim/managed.c).
 * Either output may be NULL, as in the driver. */
static CUresult variable_answer(CUdeviceptr *dptr, size_t *bytes, uint64_t address, uint64_t size,
				bool managed, uint64_t owner)
{
	if (managed) {
		CUresult res = managed_variable_mirror(address, size, owner);

		if (res != CUDA_SUCCESS)
			return res;
	}
	if (dptr)
		*dptr = address;
	if (bytes)
		*bytes = (size_t)size;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
				       const char *name)
{
	SHIM_ENTRY();
	struct wire_module_get_variable_req req = { .module = (uint64_t)(uintptr_t)hmod };
	struct wire_module_get_variable_rep rep;
	CUresult res;

	if (name_copy(req.name, sizeof(req.name), name))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_module_get_variable(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	return variable_answer(dptr, bytes, rep.address, rep.bytes, rep.managed, req.module);
}

SHIM_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	SHIM_ENTRY();
	const char *env = getenv("CUDA_MODULE_LOADING");

	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	/* The driver's answer: lazy unless the environment asks for eager. */
	*mode = env && !strcmp(env, "EAGER") ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
	return CUDA_SUCCESS;
}

/* Libraries */

static CUresult library_load(CUlibrary *library, const void *code)
{
	struct wire_library_load_data_req req = { 0 };
	struct wire_library_load_data_rep rep;
	CUresult res;

	if (!library)
		return CUDA_ERROR_INVALID_VALUE;
	res = image_blob(code, &req.image);
	if (res != CUDA_SUCCESS)
		return res;
	res = rpc_library_load_data(&req, &rep);
	if (res == CUDA_SUCCESS)
		*library = (CUlibrary)(uintptr_t)rep.library;
	return res;
}

SHIM_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
				    void **jitOptionsValues, unsigned int numJitOptions,
				    CUlibraryOption *libraryOptions, void **libraryOptionValues,
				    unsigned int numLibraryOptions)
{
	SHIM_ENTRY();
	/* The image is copied at once, so BINARY_IS_PRESERVED needs nothing;
	 * JIT options are not forwarded (see cuModuleLoadDataEx). */
	return library_load(library, code);
}

SHIM_API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
					CUjit_option *jitOptions, void **jitOptionsValues,
					unsigned int numJitOptions, CUlibraryOption *libraryOptions,
					void **libraryOptionValues, unsigned int numLibraryOptions)
{
	SHIM_ENTRY();
	void *buf = NULL;
	CUresult res;

	if (!library)
		return CUDA_ERROR_INVALID_VALUE;
	res = shim_file_read(fileName, &buf, NULL);
	if (res != CUDA_SUCCESS)
		return res;
	res = library_load(library, buf);
	free(buf);
	return res;
}

SHIM_API CUresult cuLibraryUnload(CUlibrary library)
{
	SHIM_ENTRY();
	struct wire_library_unload_req req = { .library = (uint64_t)(uintptr_t)library };
	struct wire_library_unload_rep rep;
	CUresult res = rpc_library_unload(&req, &rep);

	if (res == CUDA_SUCCESS) {
		managed_drop_owner(req.library);
		lookup_table_library_unloaded(req.library);
		func_table_forget_answers();
	}
	return res;
}

static CUresult library_kernel_ask(uint64_t library, const char *name, uint64_t *kernel)
{
	struct wire_library_get_kernel_req req = { .library = library };
	struct wire_library_get_kernel_rep rep;
	CUresult res;

	memcpy(req.name, name, strlen(name) + 1);
	res = rpc_library_get_kernel(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	params_remember(rep.kernel, rep.params);
	func_table_kernel_seen(rep.kernel);
	*kernel = rep.kernel;
	return CUDA_SUCCESS;
}

/* The same library and name give the same kernel. */
SHIM_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	SHIM_ENTRY();
	return lookup((void **)pKernel, LOOKUP_KERNEL, (uint64_t)(uintptr_t)library, true, name,
		      library_kernel_ask);
}

static CUresult library_module_ask(uint64_t library, const char *unused, uint64_t *module)
{
	struct wire_library_get_module_req req = { .library = library };
	struct wire_library_get_module_rep rep;
	CUresult res = rpc_library_get_module(&req, &rep);

	(void)unused;
	if (res == CUDA_SUCCESS)
		*module = rep.module;
	return res;
}

/* The library's module in the current context, remembered per context. */
SHIM_API CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
	SHIM_ENTRY();
	return lookup((void **)pMod, LOOKUP_MODULE, (uint64_t)(uintptr_t)library, false, NULL,
		      library_module_ask);
}

SHIM_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
				     const char *name)
{
	SHIM_ENTRY();
	struct wire_library_get_global_req req = { .library = (uint64_t)(uintptr_t)library };
	struct wire_library_get_global_rep rep;
	CUresult res;

	if (name_copy(req.name, sizeof(req.name), name))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_library_get_global(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	return variable_answer(dptr, bytes, rep.address, rep.bytes, false, req.library);
}

/* A __managed__ variable (cudart finds them this way): its host side is a
 * mirror at the same address (guest-shim/managed.c), made at the first
 * lookup. The driver answers NOT_FOUND for a variable that is not managed. */
SHIM_API CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
				      const char *name)
{
	SHIM_ENTRY();
	struct wire_library_get_managed_req req = { .library = (uint64_t)(uintptr_t)library };
	struct wire_library_get_managed_rep rep;
	CUresult res;

	if (name_copy(req.name, sizeof(req.name), name))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_library_get_managed(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	return variable_answer(dptr, bytes, rep.address, rep.bytes, true, req.library);
}

/* Kernels */

/* Enumeration (CUDA 12.4): the worker issues a handle for every function or
 * kernel it lists, the same one a lookup by name gives. Their parameter
 * layouts are fetched when first needed (func_table_get). */
static CUresult handles_copy(struct wire_blob blob, unsigned max, void **out)
{
	if (blob.len % 8 || blob.len / 8 > max) {
		pr_err("enumeration: %u bytes of handles for at most %u", blob.len, max);
		return CUDA_ERROR_UNKNOWN;
	}
	for (unsigned i = 0; i < blob.len / 8; i++) {
		uint64_t h = 0;

		for (int k = 0; k < 8; k++)
			h |= (uint64_t)blob.ptr[8 * i + k] << (8 * k);
		out[i] = (void *)(uintptr_t)h;
	}
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
	SHIM_ENTRY();
	struct wire_module_get_function_count_req req = { .module = (uint64_t)(uintptr_t)mod };
	struct wire_module_get_function_count_rep rep;
	CUresult res;

	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_module_get_function_count(&req, &rep);
	if (res == CUDA_SUCCESS)
		*count = rep.count;
	return res;
}

SHIM_API CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions,
					     CUmodule mod)
{
	SHIM_ENTRY();
	struct wire_module_enumerate_functions_req req = {
		.module = (uint64_t)(uintptr_t)mod, .max = numFunctions,
	};
	struct wire_module_enumerate_functions_rep rep;
	CUresult res;

	if (!functions)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_module_enumerate_functions(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	return handles_copy(rep.functions, numFunctions, (void **)functions);
}

SHIM_API CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
	SHIM_ENTRY();
	struct wire_library_get_kernel_count_req req = { .library = (uint64_t)(uintptr_t)lib };
	struct wire_library_get_kernel_count_rep rep;
	CUresult res;

	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_library_get_kernel_count(&req, &rep);
	if (res == CUDA_SUCCESS)
		*count = rep.count;
	return res;
}

SHIM_API CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels,
					    CUlibrary lib)
{
	SHIM_ENTRY();
	struct wire_library_enumerate_kernels_req req = {
		.library = (uint64_t)(uintptr_t)lib, .max = numKernels,
	};
	struct wire_library_enumerate_kernels_rep rep;
	uint64_t gen = lookup_table_gen();
	CUresult res;

	if (!kernels)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_library_enumerate_kernels(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	res = handles_copy(rep.kernels, numKernels, (void **)kernels);
	if (res != CUDA_SUCCESS)
		return res;
	/* Each one's cuKernelGetLibrary is this library. */
	lookup_table_kernels_listed(req.library, kernels, rep.kernels.len / 8, gen);
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
	SHIM_ENTRY();
	struct wire_func_get_module_req req = { .function = (uint64_t)(uintptr_t)hfunc };
	struct wire_func_get_module_rep rep;
	CUresult res;

	if (!hmod)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_func_get_module(&req, &rep);
	if (res == CUDA_SUCCESS)
		*hmod = (CUmodule)(uintptr_t)rep.module;
	return res;
}

static CUresult kernel_library_ask(uint64_t kernel, const char *unused, uint64_t *library)
{
	struct wire_kernel_get_library_req req = { .kernel = kernel };
	struct wire_kernel_get_library_rep rep;
	CUresult res = rpc_kernel_get_library(&req, &rep);

	(void)unused;
	if (res == CUDA_SUCCESS)
		*library = rep.library;
	return res;
}

/* Known from the lookup or enumeration that gave the kernel, else asked. */
SHIM_API CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
	SHIM_ENTRY();
	return lookup((void **)pLib, LOOKUP_KERNEL_LIBRARY, (uint64_t)(uintptr_t)kernel, false, NULL,
		      kernel_library_ask);
}

static CUresult kernel_function_ask(uint64_t kernel, uint64_t *function)
{
	struct wire_kernel_get_function_req req = { .kernel = kernel };
	struct wire_kernel_get_function_rep rep;
	CUresult res = rpc_kernel_get_function(&req, &rep);

	if (res != CUDA_SUCCESS)
		return res;
	params_remember(rep.function, rep.params);
	*function = rep.function;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	SHIM_ENTRY();
	uint64_t function;
	CUresult res;

	if (!pFunc)
		return CUDA_ERROR_INVALID_VALUE;
	res = func_table_kernel_function((uint64_t)(uintptr_t)kernel, &function, kernel_function_ask);
	if (res == CUDA_SUCCESS)
		*pFunc = (CUfunction)(uintptr_t)function;
	return res;
}

static CUresult kernel_attribute_ask(uint64_t kernel, unsigned attr, int *value)
{
	/* The session has one device, 0: its answers are the ones cached. */
	struct wire_kernel_get_attribute_req req = { .attrib = attr, .kernel = kernel, .device = 0 };
	struct wire_kernel_get_attribute_rep rep;
	CUresult res = rpc_kernel_get_attribute(&req, &rep);

	if (res == CUDA_SUCCESS)
		*value = rep.value;
	return res;
}

SHIM_API CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel,
				       CUdevice dev)
{
	SHIM_ENTRY();
	struct wire_kernel_get_attribute_req req = {
		.attrib = (uint32_t)attrib, .kernel = (uint64_t)(uintptr_t)kernel, .device = dev,
	};
	struct wire_kernel_get_attribute_rep rep;
	CUresult res;

	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev == 0)
		return func_table_attribute(req.kernel, (unsigned)attrib, true, pi, kernel_attribute_ask);
	res = rpc_kernel_get_attribute(&req, &rep);
	if (res == CUDA_SUCCESS)
		*pi = rep.value;
	return res;
}

SHIM_API CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
				       CUdevice dev)
{
	SHIM_ENTRY();
	struct wire_kernel_set_attribute_req req = {
		.attrib = (uint32_t)attrib, .value = val,
		.kernel = (uint64_t)(uintptr_t)kernel, .device = dev,
	};
	struct wire_kernel_set_attribute_rep rep;
	uint64_t gen;
	CUresult res;

	if (func_table_set_repeats(req.kernel, req.attrib, val, true, dev, &gen))
		return CUDA_SUCCESS;
	res = rpc_kernel_set_attribute(&req, &rep);
	func_table_set_done(req.kernel, req.attrib, val, true, dev, gen, res);
	return res;
}

SHIM_API CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
	SHIM_ENTRY();
	return func_table_name((uint64_t)(uintptr_t)hfunc, true, name);
}

static CUresult param_info(uint64_t handle, size_t index, size_t *offset, size_t *size)
{
	struct shim_func *f;
	CUresult res;

	if (!handle)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!offset && !size)
		return CUDA_ERROR_INVALID_VALUE;
	f = func_table_get(handle, &res);
	if (!f)
		return res;
	if (index >= f->param_count)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = f->params[index].offset;
	if (size)
		*size = f->params[index].size;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
				       size_t *paramSize)
{
	SHIM_ENTRY();
	return param_info((uint64_t)(uintptr_t)kernel, paramIndex, paramOffset, paramSize);
}

/* Functions */

SHIM_API CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
				     size_t *paramSize)
{
	SHIM_ENTRY();
	return param_info((uint64_t)(uintptr_t)func, paramIndex, paramOffset, paramSize);
}

static CUresult func_attribute_ask(uint64_t function, unsigned attr, int *value)
{
	struct wire_func_get_attribute_req req = { .attrib = attr, .function = function };
	struct wire_func_get_attribute_rep rep;
	CUresult res = rpc_func_get_attribute(&req, &rep);

	if (res == CUDA_SUCCESS)
		*value = rep.value;
	return res;
}

SHIM_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	SHIM_ENTRY();
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	return func_table_attribute((uint64_t)(uintptr_t)hfunc, (unsigned)attrib, false, pi,
				    func_attribute_ask);
}

SHIM_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	SHIM_ENTRY();
	struct wire_func_set_attribute_req req = {
		.attrib = (uint32_t)attrib, .function = (uint64_t)(uintptr_t)hfunc, .value = value,
	};
	struct wire_func_set_attribute_rep rep;
	uint64_t gen;
	CUresult res;

	if (func_table_set_repeats(req.function, req.attrib, value, false, 0, &gen))
		return CUDA_SUCCESS;
	res = rpc_func_set_attribute(&req, &rep);
	func_table_set_done(req.function, req.attrib, value, false, 0, gen, res);
	return res;
}

SHIM_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	SHIM_ENTRY();
	struct wire_func_set_cache_config_req req = {
		.function = (uint64_t)(uintptr_t)hfunc, .config = (uint32_t)config,
	};
	struct wire_func_set_cache_config_rep rep;
	CUresult res;

	func_table_settings_changed(req.function);
	res = rpc_func_set_cache_config(&req, &rep);
	func_table_settings_changed(req.function);
	return res;
}

SHIM_API CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
	SHIM_ENTRY();
	return func_table_name((uint64_t)(uintptr_t)hfunc, false, name);
}

SHIM_API CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
	SHIM_ENTRY();
	struct wire_func_set_shared_mem_config_req req = {
		.function = (uint64_t)(uintptr_t)hfunc, .config = (uint32_t)config,
	};
	struct wire_func_set_shared_mem_config_rep rep;
	CUresult res;

	func_table_settings_changed(req.function);
	res = rpc_func_set_shared_mem_config(&req, &rep);
	func_table_settings_changed(req.function);
	return res;
}

SHIM_API CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
	SHIM_ENTRY();
	struct wire_kernel_set_cache_config_req req = {
		.kernel = (uint64_t)(uintptr_t)kernel, .config = (uint32_t)config, .device = dev,
	};
	struct wire_kernel_set_cache_config_rep rep;
	CUresult res;

	func_table_settings_changed(req.kernel);
	res = rpc_kernel_set_cache_config(&req, &rep);
	func_table_settings_changed(req.kernel);
	return res;
}
