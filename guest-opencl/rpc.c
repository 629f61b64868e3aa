/* The ICD's connection: the CUDA shim's, through tern's guest table. */
#define LOG_PREFIX "opencl: "

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "icd.h"
#include "log.h"
#include "tern_guest_table.h"
#include "wire_cl_client.h"

static const struct tern_guest_table *table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_find(void)
{
	static const uint8_t uuid[16] = TERN_GUEST_TABLE_UUID;
	CUresult (*init)(unsigned);
	CUresult (*get_table)(const void **, const CUuuid *);
	const void *t = NULL;
	CUuuid id;
	/* The shim is the guest's libcuda.so.1; a real driver has no such table. */
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!lib)
		return;
	init = (CUresult (*)(unsigned))dlsym(lib, "cuInit");
	get_table = (CUresult (*)(const void **, const CUuuid *))dlsym(lib, "cuGetExportTable");
	memcpy(id.bytes, uuid, sizeof(uuid));
	if (!init || !get_table || init(0) != CUDA_SUCCESS || get_table(&t, &id) != CUDA_SUCCESS || !t ||
	    ((const struct tern_guest_table *)t)->size < sizeof(struct tern_guest_table)) {
		pr_warn("libcuda.so.1 is not tern's shim (or an older one): no tern OpenCL platform");
		return;
	}
	table = t;
}

bool icd_connect(void)
{
	pthread_once(&table_once, table_find);
	return table != NULL;
}

cl_int icd_status(uint32_t res)
{
	int32_t v = (int32_t)(uint32_t)res;

	if (v <= 0)
		return v;
	pr_warn("the session is gone (CUresult %d)", v);
	return CL_OUT_OF_RESOURCES;
}

cl_int cl_rpc_call(uint32_t id, struct wire_msg *req, struct wire_cursor *rep)
{
	if (!icd_connect())
		return CL_OUT_OF_RESOURCES;
	return icd_status(table->call(id, req, rep));
}

cl_int cl_rpc_defer(uint32_t id, struct wire_msg *req)
{
	if (!icd_connect())
		return CL_OUT_OF_RESOURCES;
	return icd_status(table->defer(id, req));
}
