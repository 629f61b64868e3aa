/* cuGetErrorName / cuGetErrorString over the table generated from cuda.h. */
#include "shim.h"

#include <stdlib.h>

#include "error_table.h"

static int error_cmp(const void *key, const void *elem)
{
	int a = *(const int *)key, b = ((const struct error_entry *)elem)->code;

	return (a > b) - (a < b);
}

static const struct error_entry *error_find(CUresult error)
{
	int code = (int)error;

	return bsearch(&code, error_table, error_table_count, sizeof(error_table[0]), error_cmp);
}

SHIM_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	SHIM_ENTRY();
	const struct error_entry *e = error_find(error);

	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = e ? e->name : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	SHIM_ENTRY();
	const struct error_entry *e = error_find(error);

	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = e ? e->text : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
