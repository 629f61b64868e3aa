/* Driver-wide entry points: initialisation, version and export tables. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include "export_table.h"
#include "log.h"

SHIM_API CUresult cuInit(unsigned int Flags)
{
	struct wire_init_req req = { .flags = Flags };
	struct wire_init_rep rep;
	CUresult res;

	if (Flags)
		return CUDA_ERROR_INVALID_VALUE;
	/* Connecting first reports a missing ternd as such, not as a failed call. */
	res = rpc_connect();
	if (res != CUDA_SUCCESS)
		return res;
	return rpc_init(&req, &rep);
}

SHIM_API CUresult cuDriverGetVersion(int *driverVersion)
{
	struct wire_driver_get_version_req req = { 0 };
	struct wire_driver_get_version_rep rep;

	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	/* The driver answers this without a device; so does the shim when
	 * ternd cannot be reached: it implements the API of its own headers. */
	if (rpc_driver_get_version(&req, &rep) == CUDA_SUCCESS && rep.version > 0 &&
	    rep.version < CUDA_VERSION)
		*driverVersion = rep.version;
	else
		*driverVersion = CUDA_VERSION;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	if (!ppExportTable || !pExportTableId)
		return CUDA_ERROR_INVALID_VALUE;
	return export_table_get(ppExportTable, pExportTableId);
}
