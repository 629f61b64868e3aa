/* The cuda backend: the real driver, dlopened in the worker process. */
#define LOG_PREFIX "cuda: "
#include "backend.h"
#include "log.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>

#define DRIVER_DEFAULT "libcuda.so.1"

static void cuda_close(struct backend *be)
{
	/* The driver is not unloaded: it keeps threads and atexit handlers. */
	free(be);
}

int backend_cuda_open(const struct backend_config *cfg, struct backend **out)
{
	const char *path = cfg && cfg->driver_path ? cfg->driver_path : DRIVER_DEFAULT;
	PFN_cuGetProcAddress_v12000 get_proc;
	struct backend *be;
	void *lib;
	int missing = 0;

	/* RTLD_LOCAL keeps the driver's symbols away from anything else in the worker. */
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		pr_err("cannot load the CUDA driver %s: %s", path, dlerror());
		return -ENOENT;
	}
	get_proc = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
	if (!get_proc) {
		pr_err("%s has no cuGetProcAddress_v2: driver older than CUDA 12", path);
		return -ENOENT;
	}
	be = calloc(1, sizeof(*be));
	if (!be)
		return -ENOMEM;
	be->name = "cuda";
	be->close = cuda_close;
	be->priv = lib;
	/* Ask for each entry at the version whose signature backend.h declares. */
#define RESOLVE(name, version)                                                 \
	{                                                                      \
		void *fn = NULL;                                               \
		CUdriverProcAddressQueryResult st;                             \
		if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS) \
			be->name = (PFN_##name##_v##version)fn;                \
		else                                                           \
			missing++;                                             \
	}
	BACKEND_ENTRIES(RESOLVE)
#undef RESOLVE
	if (missing)
		pr_warn("%d driver entry points unavailable in %s", missing, path);
	*out = be;
	return 0;
}
