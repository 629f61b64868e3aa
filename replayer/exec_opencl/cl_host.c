#define LOG_PREFIX "opencl: "

#include "cl_host.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

#define CL_HOST_PLATFORMS_MAX 64

int cl_host_open(struct cl_host *h, const char *library, const char *platform_name)
{
	cl_platform_id ids[CL_HOST_PLATFORMS_MAX];
	cl_uint n = 0;
	char name[256];

	memset(h, 0, sizeof(*h));
	h->lib = dlopen(library && *library ? library : "libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h->lib) {
		pr_err("cannot open %s: %s", library && *library ? library : "libOpenCL.so.1", dlerror());
		return -ENOENT;
	}
#define CL_HOST_RESOLVE(sym) h->sym = (cl_api_##sym)dlsym(h->lib, #sym);
	CL_HOST_ENTRY_LIST(CL_HOST_RESOLVE)
#undef CL_HOST_RESOLVE
	if (!h->clGetPlatformIDs || !h->clGetPlatformInfo) {
		cl_host_close(h);
		return -ENOSYS;
	}
	if (h->clGetPlatformIDs(CL_HOST_PLATFORMS_MAX, ids, &n) != CL_SUCCESS || !n) {
		pr_err("the host has no OpenCL platform");
		cl_host_close(h);
		return -ENOENT;
	}
	if (n > CL_HOST_PLATFORMS_MAX)
		n = CL_HOST_PLATFORMS_MAX;
	for (cl_uint i = 0; i < n; i++) {
		if (h->clGetPlatformInfo(ids[i], CL_PLATFORM_NAME, sizeof(name), name, NULL) != CL_SUCCESS)
			continue;
		name[sizeof(name) - 1] = 0;
		if (!platform_name || !*platform_name || strcasestr(name, platform_name)) {
			h->platform = ids[i];
			pr_info("host platform: %s", name);
			return 0;
		}
	}
	pr_err("no OpenCL platform named like '%s'", platform_name);
	cl_host_close(h);
	return -ENOENT;
}

void cl_host_close(struct cl_host *h)
{
	if (h->lib)
		dlclose(h->lib);
	memset(h, 0, sizeof(*h));
}
