/* Device queries beyond attributes (ids 350-355): a device by PCI bus id,
 * the 1D linear texture limit, atomic capabilities of the host and peer
 * links, the GPUDirect RDMA write fence, and the graph memory figures of the
 * session.
 *
 * The driver answers in its own device numbers; the guest's ordinals are
 * the session's (ternd --devices), so each answer is translated, and a
 * device the session does not see is CUDA_ERROR_INVALID_DEVICE, as a device
 * the driver does not have.
 *
 * Graph allocation nodes take their memory from the session's arena when
 * the node is made and hold it while a graph or executable holds the node
 * (exec_graph.c): that memory is the session's "graph memory". Used bytes
 * are those of allocations not yet freed, reserved bytes what is mapped for
 * them (granularity included, freed ones a graph still holds too). Nothing
 * is cached past that, so a trim has nothing to release.
 */
#define LOG_PREFIX "exec: "
#include <string.h>

#include "arena.h"
#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"

/* Operations one atomic capability query may name (64 KiB of answers). */
#define ATOMIC_OPS_MAX 16384

CUresult exec_device_get_by_pci_bus_id(struct exec *ex, const struct wire_device_get_by_pci_bus_id_req *req,
				       struct wire_device_get_by_pci_bus_id_rep *rep)
{
	CUdevice real = -1;
	CUresult res = ex->be->cuDeviceGetByPCIBusId(&real, req->bus_id);

	if (res != CUDA_SUCCESS)
		return res;
	for (unsigned i = 0; i < ex->dev.count; i++)
		if (ex->dev.list[i].dev == real) {
			rep->device = (int32_t)i;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_DEVICE;   /* a GPU of the host the session does not see */
}

CUresult exec_device_get_texture_1d_linear_max_width(struct exec *ex,
						     const struct wire_device_get_texture_1d_linear_max_width_req *req,
						     struct wire_device_get_texture_1d_linear_max_width_rep *rep)
{
	size_t width = 0;
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuDeviceGetTexture1DLinearMaxWidth(&width, (CUarray_format)req->format, req->channels, dev);
	rep->width = width;
	return res;
}

CUresult exec_device_get_atomic_capabilities(struct exec *ex,
					     const struct wire_device_get_atomic_capabilities_req *req,
					     struct wire_device_get_atomic_capabilities_rep *rep)
{
	static CUatomicOperation ops[ATOMIC_OPS_MAX];
	static unsigned caps[ATOMIC_OPS_MAX];
	static uint8_t out[ATOMIC_OPS_MAX * 4];
	uint32_t count = req->operations.len / 4;
	CUdevice dev, peer = 0;
	CUresult res;

	if (req->operations.len % 4 || !count || count > ATOMIC_OPS_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_device_real(ex, req->device, &dev);
	if (res == CUDA_SUCCESS && req->peer != -1)
		res = exec_device_real(ex, req->peer, &peer);
	if (res != CUDA_SUCCESS)
		return res;
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *b = req->operations.ptr + 4 * i;

		ops[i] = (CUatomicOperation)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
					     (uint32_t)b[3] << 24);
	}
	if (req->peer == -1)
		res = ex->be->cuDeviceGetHostAtomicCapabilities(caps, ops, count, dev);
	else
		res = ex->be->cuDeviceGetP2PAtomicCapabilities(caps, ops, count, dev, peer);
	if (res != CUDA_SUCCESS)
		return res;
	for (uint32_t i = 0; i < count; i++)
		for (int k = 0; k < 4; k++)
			out[4 * i + k] = (uint8_t)(caps[i] >> (8 * k));
	rep->capabilities = (struct wire_blob){ out, count * 4 };
	return CUDA_SUCCESS;
}

CUresult exec_flush_gpu_direct_rdma_writes(struct exec *ex, const struct wire_flush_gpu_direct_rdma_writes_req *req,
					   struct wire_flush_gpu_direct_rdma_writes_rep *rep)
{
	/* The guest's current context is the backend's now (exec.c). */
	return ex->be->cuFlushGPUDirectRDMAWrites((CUflushGPUDirectRDMAWritesTarget)req->target,
						  (CUflushGPUDirectRDMAWritesScope)req->scope);
}

/* Used and reserved graph memory of guest device @ordinal now. */
static void graph_mem_totals(struct exec *ex, unsigned ordinal, uint64_t *used, uint64_t *reserved)
{
	*used = *reserved = 0;
	for (unsigned i = 0; i < ex->graphs.alloc_count; i++) {
		const struct exec_graph_alloc *ga = &ex->graphs.allocs[i];
		unsigned at;
		const struct arena_alloc *a = exec_alloc_find(ex, ga->addr, &at);

		if (!a || at != ordinal)
			continue;
		/* Graphs hold it, freed or not (the driver's "used" stays after
		 * the free while the graph lives, measured on the H200). */
		*used += ga->bytes;
		*reserved += a->mapped;
	}
}

void exec_graph_mem_note(struct exec *ex)
{
	for (unsigned d = 0; d < ex->dev.count; d++) {
		uint64_t used, reserved;

		graph_mem_totals(ex, d, &used, &reserved);
		if (used > ex->graphs.mem_high_used[d])
			ex->graphs.mem_high_used[d] = used;
		if (reserved > ex->graphs.mem_high_reserved[d])
			ex->graphs.mem_high_reserved[d] = reserved;
	}
}

CUresult exec_device_graph_mem_attribute(struct exec *ex, const struct wire_device_graph_mem_attribute_req *req,
					 struct wire_device_graph_mem_attribute_rep *rep)
{
	uint64_t used, reserved;
	unsigned d;

	if (req->device < 0 || (unsigned)req->device >= ex->dev.count)
		return CUDA_ERROR_INVALID_DEVICE;
	d = (unsigned)req->device;
	if (req->set) {
		/* Only the high watermarks are set, and only back to zero. */
		if (req->value != 0)
			return CUDA_ERROR_INVALID_VALUE;
		if (req->attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
			ex->graphs.mem_high_used[d] = 0;
		else if (req->attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
			ex->graphs.mem_high_reserved[d] = 0;
		else
			return CUDA_ERROR_INVALID_VALUE;
		return CUDA_SUCCESS;
	}
	graph_mem_totals(ex, d, &used, &reserved);
	switch (req->attr) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
		rep->value = used;
		break;
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
		rep->value = ex->graphs.mem_high_used[d] > used ? ex->graphs.mem_high_used[d] : used;
		break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
		rep->value = reserved;
		break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
		rep->value = ex->graphs.mem_high_reserved[d] > reserved ? ex->graphs.mem_high_reserved[d] : reserved;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult exec_device_graph_mem_trim(struct exec *ex, const struct wire_device_graph_mem_trim_req *req,
				    struct wire_device_graph_mem_trim_rep *rep)
{
	/* Graph memory is unmapped as soon as no graph holds a freed
	 * allocation (exec_graph.c): nothing idle is kept to release. */
	if (req->device < 0 || (unsigned)req->device >= ex->dev.count)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}
