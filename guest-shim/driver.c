/* Driver-wide entry points: initialisation, version and export tables. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include "export_table.h"
#include "log.h"

SHIM_API CUresult cuInit(unsigned int Flags)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_driver_get_version_req req = { 0 };
	struct wire_driver_get_version_rep rep;
	uint64_t epoch;
	bool answered;

	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->cache.lock);
	epoch = p->cache.epoch;
	*driverVersion = p->cache.driver_version;
	answered = p->cache.have_driver_version;
	pthread_mutex_unlock(&p->cache.lock);
	if (answered)
		return CUDA_SUCCESS;
	/* The driver answers this without a device; so does the shim when
	 * ternd cannot be reached: it implements the API of its own headers.
	 * The worker's answer is kept until the next connection. */
	answered = rpc_driver_get_version(&req, &rep) == CUDA_SUCCESS;
	*driverVersion = answered && rep.version > 0 && rep.version < CUDA_VERSION ? rep.version : CUDA_VERSION;
	if (answered) {
		pthread_mutex_lock(&p->cache.lock);
		if (p->cache.epoch == epoch) {
			p->cache.driver_version = *driverVersion;
			p->cache.have_driver_version = true;
		}
		pthread_mutex_unlock(&p->cache.lock);
	}
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	SHIM_ENTRY();
	if (!ppExportTable || !pExportTableId)
		return CUDA_ERROR_INVALID_VALUE;
	return export_table_get(ppExportTable, pExportTableId);
}
