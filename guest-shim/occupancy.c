/* Occupancy queries. cuOccupancyMaxPotentialBlockSize* takes a guest
 * callback (dynamic shared memory per block size), which cannot cross the
 * wire: the shim evaluates it for every candidate block size and asks the
 * worker for all of them in one occupancy_max_active_blocks call. */
#include "shim.h"

#include <string.h>

/* docs/wire-protocol.md: i32 block_size, u32 reserved, u64 dynamic_smem. */
#define OCC_RECORD WIRE_REC_OCCUPANCY_QUERY_BYTES
#define OCC_CANDIDATES_MAX WIRE_REC_OCCUPANCY_QUERY_MAX

enum occ_cluster_query {
	OCC_MAX_ACTIVE_CLUSTERS = 0,
	OCC_MAX_POTENTIAL_CLUSTER_SIZE = 1,
};

/* Blocks per SM for each (block size, smem) pair in @q; @out gets @n values. */
static CUresult occ_blocks(CUfunction func, unsigned flags, const uint8_t *q, unsigned n, int *out)
{
	struct wire_occupancy_max_active_blocks_req req = {
		.function = (uint64_t)(uintptr_t)func, .flags = flags,
		.queries = { .ptr = q, .len = n * OCC_RECORD },
	};
	struct wire_occupancy_max_active_blocks_rep rep;
	CUresult res;

	if (!func)
		return CUDA_ERROR_INVALID_HANDLE;
	res = rpc_occupancy_max_active_blocks(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	if (wire_rec_occupancy_blocks_count(rep.blocks) != (int)n)
		return CUDA_ERROR_UNKNOWN;
	for (unsigned i = 0; i < n; i++) {
		struct wire_rec_occupancy_blocks b;

		wire_rec_occupancy_blocks_get(rep.blocks, i, &b);
		out[i] = b.blocks;
	}
	return CUDA_SUCCESS;
}

static CUresult occ_one_ask(uint64_t func, int blockSize, uint64_t smem, unsigned flags, int *blocks)
{
	struct wire_rec_occupancy_query r = { .block_size = blockSize, .smem = smem };
	uint8_t q[OCC_RECORD];

	wire_rec_occupancy_query_put(q, 0, &r);
	return occ_blocks((CUfunction)(uintptr_t)func, flags, q, 1, blocks);
}

/* One query: the same one is answered from the cache (guest-shim/func_table.c). */
static CUresult occ_one(int *numBlocks, CUfunction func, int blockSize, size_t smem, unsigned flags)
{
	if (!numBlocks)
		return CUDA_ERROR_INVALID_VALUE;
	if (!func)
		return CUDA_ERROR_INVALID_HANDLE;
	return func_table_occupancy((uint64_t)(uintptr_t)func, blockSize, smem, flags, numBlocks,
				    occ_one_ask);
}

SHIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
							      int blockSize, size_t dynamicSMemSize)
{
	SHIM_ENTRY();
	return occ_one(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

SHIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks,
								       CUfunction func,
								       int blockSize,
								       size_t dynamicSMemSize,
								       unsigned int flags)
{
	SHIM_ENTRY();
	return occ_one(numBlocks, func, blockSize, dynamicSMemSize, flags);
}

/* The block size with the highest occupancy; ties go to the larger block,
 * as in the runtime's cudaOccupancyMaxPotentialBlockSize. */
static CUresult occ_potential(int *minGridSize, int *blockSize, CUfunction func,
			      CUoccupancyB2DSize b2smem, size_t smem, int limit, unsigned flags)
{
	uint8_t q[OCC_CANDIDATES_MAX * OCC_RECORD];
	int blocks[OCC_CANDIDATES_MAX], sizes[OCC_CANDIDATES_MAX];
	int dev_max, fn_max, warp, sms, best = -1, best_occ = 0;
	unsigned n = 0;
	CUdevice dev;
	CUresult res;

	if (!minGridSize || !blockSize || !func)
		return CUDA_ERROR_INVALID_VALUE;
	res = cuCtxGetDevice(&dev);
	if (res == CUDA_SUCCESS)
		res = device_attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &dev_max);
	if (res == CUDA_SUCCESS)
		res = device_attribute(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE, &warp);
	if (res == CUDA_SUCCESS)
		res = device_attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &sms);
	if (res == CUDA_SUCCESS)
		res = cuFuncGetAttribute(&fn_max, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func);
	if (res != CUDA_SUCCESS)
		return res;
	if (warp <= 0 || dev_max <= 0)
		return CUDA_ERROR_UNKNOWN;
	if (limit <= 0 || limit > dev_max)
		limit = dev_max;
	if (fn_max > 0 && limit > fn_max)
		limit = fn_max;
	for (int aligned = (limit + warp - 1) / warp * warp; aligned > 0 && n < OCC_CANDIDATES_MAX;
	     aligned -= warp) {
		int size = aligned < limit ? aligned : limit;
		struct wire_rec_occupancy_query r = { .block_size = size, .smem = b2smem ? b2smem(size) : smem };

		wire_rec_occupancy_query_put(q, n, &r);
		sizes[n++] = size;
	}
	res = occ_blocks(func, flags, q, n, blocks);
	if (res != CUDA_SUCCESS)
		return res;
	for (unsigned i = 0; i < n; i++) {
		if (blocks[i] * sizes[i] > best_occ) {
			best_occ = blocks[i] * sizes[i];
			best = (int)i;
		}
	}
	if (best < 0) {
		*minGridSize = 0;
		*blockSize = 0;
		return CUDA_SUCCESS;
	}
	*minGridSize = blocks[best] * sms;
	*blockSize = sizes[best];
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize,
						   CUfunction func,
						   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
						   size_t dynamicSMemSize, int blockSizeLimit)
{
	SHIM_ENTRY();
	return occ_potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
			     dynamicSMemSize, blockSizeLimit, 0);
}

SHIM_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize,
							    CUfunction func,
							    CUoccupancyB2DSize blockSizeToDynamicSMemSize,
							    size_t dynamicSMemSize,
							    int blockSizeLimit, unsigned int flags)
{
	SHIM_ENTRY();
	return occ_potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
			     dynamicSMemSize, blockSizeLimit, flags);
}

SHIM_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func,
							  int numBlocks, int blockSize)
{
	SHIM_ENTRY();
	struct wire_occupancy_available_dynamic_smem_req req = {
		.function = (uint64_t)(uintptr_t)func, .blocks = numBlocks, .block_size = blockSize,
	};
	struct wire_occupancy_available_dynamic_smem_rep rep;
	CUresult res;

	if (!dynamicSmemSize)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_occupancy_available_dynamic_smem(&req, &rep);
	if (res == CUDA_SUCCESS)
		*dynamicSmemSize = (size_t)rep.bytes;
	return res;
}

static CUresult occ_cluster_ask(const struct wire_occupancy_cluster_req *req, int *value)
{
	struct wire_occupancy_cluster_rep rep;
	CUresult res = rpc_occupancy_cluster(req, &rep);

	if (res == CUDA_SUCCESS)
		*value = rep.value;
	return res;
}

/* An event the worker translates may be destroyed meanwhile: its answer
 * would become INVALID_HANDLE, so such a request is always asked. */
static bool occ_attrs_name_events(const CUlaunchAttribute *attrs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT ||
		    attrs[i].id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT)
			return true;
	return false;
}

/* The same request again is answered from the cache (guest-shim/func_table.c). */
static CUresult occ_cluster(int *value, enum occ_cluster_query query, CUfunction func,
			    const CUlaunchConfig *config)
{
	struct wire_occupancy_cluster_req req = {
		.query = query, .function = (uint64_t)(uintptr_t)func,
	};
	uint8_t attrs[WIRE_REC_LAUNCH_ATTR_MAX * WIRE_REC_LAUNCH_ATTR_BYTES];
	CUresult res;

	if (!value || !config)
		return CUDA_ERROR_INVALID_VALUE;
	res = launch_attrs_encode(config->attrs, config->numAttrs, attrs);
	if (res != CUDA_SUCCESS)
		return res;
	req.grid_x = config->gridDimX;
	req.grid_y = config->gridDimY;
	req.grid_z = config->gridDimZ;
	req.block_x = config->blockDimX;
	req.block_y = config->blockDimY;
	req.block_z = config->blockDimZ;
	req.shared_bytes = config->sharedMemBytes;
	req.attrs.ptr = attrs;
	req.attrs.len = WIRE_REC_LAUNCH_ATTR_BYTES * config->numAttrs;
	if (occ_attrs_name_events(config->attrs, config->numAttrs))
		return occ_cluster_ask(&req, value);
	return func_table_cluster(&req, value, occ_cluster_ask);
}

SHIM_API CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
					       const CUlaunchConfig *config)
{
	SHIM_ENTRY();
	return occ_cluster(numClusters, OCC_MAX_ACTIVE_CLUSTERS, func, config);
}

SHIM_API CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
						     const CUlaunchConfig *config)
{
	SHIM_ENTRY();
	return occ_cluster(clusterSize, OCC_MAX_POTENTIAL_CLUSTER_SIZE, func, config);
}
