/* A graph memcpy node's copy and the driver's CUDA_MEMCPY3D: one mapping
 * for the shim (what the application gives) and the worker (what it reads
 * back from a backend's node, what it gives the backend). */
#include "graph_desc.h"

#include <stdbool.h>
#include <string.h>

static bool copy_end_ok(CUmemorytype type)
{
	return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
}

CUresult graph_node_memcpy_from_3d(const CUDA_MEMCPY3D *p, struct graph_node_memcpy *c)
{
	bool src_host = p->srcMemoryType == CU_MEMORYTYPE_HOST;
	bool dst_host = p->dstMemoryType == CU_MEMORYTYPE_HOST;
	uint64_t src = src_host ? (uint64_t)(uintptr_t)p->srcHost : p->srcDevice;
	uint64_t dst = dst_host ? (uint64_t)(uintptr_t)p->dstHost : p->dstDevice;

	if ((!src_host && !copy_end_ok(p->srcMemoryType)) || (!dst_host && !copy_end_ok(p->dstMemoryType)) ||
	    (src_host && dst_host) || p->srcLOD || p->dstLOD)
		return CUDA_ERROR_NOT_SUPPORTED;
	c->src = src + p->srcXInBytes + (p->srcY + p->srcZ * p->srcHeight) * p->srcPitch;
	c->dst = dst + p->dstXInBytes + (p->dstY + p->dstZ * p->dstHeight) * p->dstPitch;
	c->src_pitch = p->srcPitch;
	c->src_height = p->srcHeight;
	c->dst_pitch = p->dstPitch;
	c->dst_height = p->dstHeight;
	c->width = p->WidthInBytes;
	c->height = p->Height;
	c->depth = p->Depth;
	c->host_end = src_host ? GRAPH_COPY_HOST_SRC : dst_host ? GRAPH_COPY_HOST_DST : GRAPH_COPY_HOST_NONE;
	return CUDA_SUCCESS;
}

int graph_node_memcpy_packed(const struct graph_node_memcpy *c, uint64_t *bytes)
{
	return c->width && c->height && c->depth && !__builtin_mul_overflow(c->width, c->height, bytes) &&
	       !__builtin_mul_overflow(*bytes, c->depth, bytes);
}

void graph_node_memcpy_to_3d(const struct graph_node_memcpy *c, CUDA_MEMCPY3D *p)
{
	memset(p, 0, sizeof(*p));
	p->srcMemoryType = CU_MEMORYTYPE_DEVICE;
	p->srcDevice = c->src;
	p->srcPitch = c->src_pitch;
	p->srcHeight = c->src_height;
	p->dstMemoryType = CU_MEMORYTYPE_DEVICE;
	p->dstDevice = c->dst;
	p->dstPitch = c->dst_pitch;
	p->dstHeight = c->dst_height;
	p->WidthInBytes = c->width;
	p->Height = c->height;
	p->Depth = c->depth;
}
