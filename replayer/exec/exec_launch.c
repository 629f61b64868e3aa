/* Kernel launches and occupancy queries. */
#define LOG_PREFIX "exec: "
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"

#define LAUNCH_ARGS_MAX (32u << 10)     /* the driver's kernel parameter limit */
#define LAUNCH_ATTRS_MAX WIRE_REC_LAUNCH_ATTR_MAX

_Static_assert(sizeof(((CUlaunchAttribute *)0)->value) == sizeof(((struct wire_rec_launch_attr *)0)->value),
	       "CUlaunchAttributeValue layout changed");

/* Build the driver's kernelParams from the packed argument blob, checking it
 * against the function's layout. @store must hold LAUNCH_ARGS_MAX bytes. */
static CUresult launch_params(const struct exec_params *p, struct wire_blob args,
			      uint8_t *store, void **params)
{
	if (args.len != p->bytes || args.len > LAUNCH_ARGS_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(store, args.ptr, args.len);
	for (uint32_t i = 0; i < p->count; i++)
		params[i] = store + p->offset[i];
	return CUDA_SUCCESS;
}

/* Decode launch attributes. Those whose value is plain data go to the
 * driver, which judges them (a stream-only one on a launch included); those
 * that carry handles are translated; a known one tern does not offer
 * (device-updatable graph nodes) is NOT_SUPPORTED, and an id the CUDA 13
 * header does not define INVALID_VALUE, as the driver answers it: the driver
 * would read whatever the guest put in a value it does not know. */
static CUresult launch_attrs(struct exec *ex, struct wire_blob blob, CUlaunchAttribute *attrs,
			     unsigned *count)
{
	int n = wire_rec_launch_attr_count(blob);

	if (n < 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < n; i++) {
		CUlaunchAttribute *a = &attrs[i];
		struct wire_rec_launch_attr r;

		wire_rec_launch_attr_get(blob, (uint32_t)i, &r);
		memset(a, 0, sizeof(*a));
		a->id = (CUlaunchAttributeID)r.id;
		memcpy(&a->value, r.value, sizeof(a->value));
		switch (a->id) {
		case CU_LAUNCH_ATTRIBUTE_IGNORE:
		case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
		case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
		case CU_LAUNCH_ATTRIBUTE_PRIORITY:
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
		case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
		case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
		case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
			break;
		case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
			return CUDA_ERROR_NOT_SUPPORTED;
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
		case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT: {
			/* Both keep the event first in the value. */
			struct handle_entry *ev = handle_table_get(ex->handles,
				(uint64_t)(uintptr_t)a->value.programmaticEvent.event, HANDLE_EVENT);

			if (!ev)
				return CUDA_ERROR_INVALID_HANDLE;
			a->value.programmaticEvent.event = ev->real;
			break;
		}
		default:
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	*count = n;
	return CUDA_SUCCESS;
}

/* The launch geometry of a request: the fields have the same names in
 * launch_kernel_ex and occupancy_cluster. */
static void launch_config_set(CUlaunchConfig *cfg, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx,
			      uint32_t by, uint32_t bz, uint32_t shared_bytes, CUlaunchAttribute *attrs,
			      unsigned nattrs)
{
	cfg->gridDimX = gx;
	cfg->gridDimY = gy;
	cfg->gridDimZ = gz;
	cfg->blockDimX = bx;
	cfg->blockDimY = by;
	cfg->blockDimZ = bz;
	cfg->sharedMemBytes = shared_bytes;
	cfg->attrs = nattrs ? attrs : NULL;
	cfg->numAttrs = nattrs;
}

CUresult exec_launch_kernel(struct exec *ex, const struct wire_launch_kernel_req *req,
			    struct wire_launch_kernel_rep *rep)
{
	static uint8_t store[LAUNCH_ARGS_MAX];
	static void *params[8192];
	const struct exec_params *layout;
	CUfunction fn;
	CUstream s;
	CUresult res = exec_function_real(ex, req->function, &fn, &layout);

	if (res == CUDA_SUCCESS)
		res = exec_stream_real(ex, req->stream, &s);
	if (res == CUDA_SUCCESS)
		res = launch_params(layout, req->args, store, params);
	if (res != CUDA_SUCCESS)
		return res;
	return ex->be->cuLaunchKernel(fn, req->grid_x, req->grid_y, req->grid_z,
				      req->block_x, req->block_y, req->block_z,
				      req->shared_bytes, s, layout->count ? params : NULL, NULL);
}

CUresult exec_launch_kernel_ex(struct exec *ex, const struct wire_launch_kernel_ex_req *req,
			       struct wire_launch_kernel_ex_rep *rep)
{
	static uint8_t store[LAUNCH_ARGS_MAX];
	static void *params[8192];
	CUlaunchAttribute attrs[LAUNCH_ATTRS_MAX];
	CUlaunchConfig cfg = { 0 };
	const struct exec_params *layout;
	unsigned nattrs = 0;
	CUfunction fn;
	CUstream s;
	CUresult res = exec_function_real(ex, req->function, &fn, &layout);

	if (res == CUDA_SUCCESS)
		res = exec_stream_real(ex, req->stream, &s);
	if (res == CUDA_SUCCESS)
		res = launch_params(layout, req->args, store, params);
	if (res == CUDA_SUCCESS)
		res = launch_attrs(ex, req->attrs, attrs, &nattrs);
	if (res != CUDA_SUCCESS)
		return res;
	launch_config_set(&cfg, req->grid_x, req->grid_y, req->grid_z, req->block_x, req->block_y,
			  req->block_z, req->shared_bytes, attrs, nattrs);
	cfg.hStream = s;
	return ex->be->cuLaunchKernelEx(&cfg, fn, layout->count ? params : NULL, NULL);
}


CUresult exec_occupancy_max_active_blocks(struct exec *ex,
					  const struct wire_occupancy_max_active_blocks_req *req,
					  struct wire_occupancy_max_active_blocks_rep *rep)
{
	static uint8_t out[WIRE_REC_OCCUPANCY_BLOCKS_MAX * WIRE_REC_OCCUPANCY_BLOCKS_BYTES];
	int n = wire_rec_occupancy_query_count(req->queries);
	CUfunction fn;
	CUresult res = exec_function_real(ex, req->function, &fn, NULL);

	if (res != CUDA_SUCCESS)
		return res;
	if (n < 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < n; i++) {
		struct wire_rec_occupancy_query q;
		struct wire_rec_occupancy_blocks b = { 0 };
		int blocks = 0;

		wire_rec_occupancy_query_get(req->queries, (uint32_t)i, &q);
		res = ex->be->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, fn, q.block_size,
										    q.smem, req->flags);
		if (res != CUDA_SUCCESS)
			return res;
		b.blocks = blocks;
		wire_rec_occupancy_blocks_put(out, (uint32_t)i, &b);
	}
	rep->blocks = (struct wire_blob){ out, (uint32_t)n * WIRE_REC_OCCUPANCY_BLOCKS_BYTES };
	return CUDA_SUCCESS;
}

CUresult exec_occupancy_available_dynamic_smem(struct exec *ex,
					       const struct wire_occupancy_available_dynamic_smem_req *req,
					       struct wire_occupancy_available_dynamic_smem_rep *rep)
{
	size_t bytes = 0;
	CUfunction fn;
	CUresult res = exec_function_real(ex, req->function, &fn, NULL);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuOccupancyAvailableDynamicSMemPerBlock(&bytes, fn, req->blocks, req->block_size);
	rep->bytes = bytes;
	return res;
}

CUresult exec_occupancy_cluster(struct exec *ex, const struct wire_occupancy_cluster_req *req,
				struct wire_occupancy_cluster_rep *rep)
{
	CUlaunchAttribute attrs[LAUNCH_ATTRS_MAX];
	CUlaunchConfig cfg = { 0 };
	unsigned nattrs = 0;
	int value = 0;
	CUfunction fn;
	CUresult res = exec_function_real(ex, req->function, &fn, NULL);

	if (res == CUDA_SUCCESS)
		res = launch_attrs(ex, req->attrs, attrs, &nattrs);
	if (res != CUDA_SUCCESS)
		return res;
	launch_config_set(&cfg, req->grid_x, req->grid_y, req->grid_z, req->block_x, req->block_y,
			  req->block_z, req->shared_bytes, attrs, nattrs);
	if (req->query == 0)
		res = ex->be->cuOccupancyMaxActiveClusters(&value, fn, &cfg);
	else if (req->query == 1)
		res = ex->be->cuOccupancyMaxPotentialClusterSize(&value, fn, &cfg);
	else
		res = CUDA_ERROR_INVALID_VALUE;
	rep->value = value;
	return res;
}
