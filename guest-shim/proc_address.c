/* cuGetProcAddress: (name, CUDA version, flags) -> entry point, by the rule
 * the driver applies (see gen_entry_points.py): the highest ABI version not
 * newer than the one asked for, and its per-thread-default-stream variant
 * when the flag asks for it. */
#include "shim.h"

#include <stdlib.h>
#include <string.h>

#include "proc_address.h"

static int proc_name_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct proc_name *)elem)->name);
}

static CUresult proc_resolve(const char *symbol, void **pfn, int version, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *status)
{
	const struct proc_name *n;
	const struct proc_version *v = NULL;

	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
				  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	n = bsearch(symbol, proc_names, proc_name_count, sizeof(proc_names[0]), proc_name_cmp);
	if (!n) {
		if (status)
			*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		return CUDA_ERROR_NOT_FOUND;
	}
	for (unsigned i = 0; i < n->count; i++)
		if (n->versions[i].version <= (uint32_t)(version < 0 ? 0 : version))
			v = &n->versions[i];
	if (!v) {
		if (status)
			*status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		return CUDA_ERROR_NOT_FOUND;
	}
	if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && v->fn_per_thread)
		*pfn = v->fn_per_thread;
	else
		*pfn = v->fn;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SUCCESS;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
				   cuuint64_t flags)
{
	SHIM_ENTRY();
	return proc_resolve(symbol, pfn, cudaVersion, flags, NULL);
}

SHIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
				      cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	SHIM_ENTRY();
	return proc_resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
}
