#define LOG_PREFIX "backend: "
#include "backend.h"
#include "log.h"

#include <errno.h>
#include <string.h>

/* Stands in for every entry a backend does not provide. Entries are called
 * through their own pointer types; this one takes no arguments and only
 * returns, which the x86-64 and AArch64 calling conventions make safe for any
 * argument list. It keeps the executor free of NULL checks. */
static CUresult backend_unsupported(void)
{
	return CUDA_ERROR_NOT_SUPPORTED;
}

static void backend_fill_missing(struct backend *be)
{
#define FILL(name, version)                                                   \
	if (!be->name)                                                        \
		be->name = (PFN_##name##_v##version)(void (*)(void))backend_unsupported;
	BACKEND_ENTRIES(FILL)
#undef FILL
}

bool backend_has(const struct backend *be, const void *entry)
{
	return entry && entry != (const void *)(void (*)(void))backend_unsupported;
}

int backend_open(const char *name, const struct backend_config *cfg, struct backend **out)
{
	int ret;

	if (!strcmp(name, "cuda"))
		ret = backend_cuda_open(cfg, out);
	else if (!strcmp(name, "sim"))
		ret = backend_sim_open(cfg, out);
	else
		return -ENOENT;
	if (!ret)
		backend_fill_missing(*out);
	return ret;
}

void backend_close(struct backend *be)
{
	if (be && be->close)
		be->close(be);
}
