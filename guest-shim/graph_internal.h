/* Private to the shim's graph files: graph.c (graphs, adding nodes, their
 * shape, capture into the guest's graph) and graph_exec.c (executable
 * graphs, node parameters read back and changed, kernel node attributes,
 * dot print). What both use; the rest of either stays static.
 */
#ifndef TERN_SHIM_GRAPH_INTERNAL_H
#define TERN_SHIM_GRAPH_INTERNAL_H

#include "graph_desc.h"
#include "shim.h"

/* A node index that names no node (the worker's GRAPH_NODE_NONE). */
#define NODE_NONE 0xffffffffu

/* A kernel node's function and packed arguments, from any version of the
 * parameters. *@args is malloc'ed (free it). */
struct kernel_node {
	uint64_t function;
	unsigned grid[3], block[3], shared;
	uint8_t *args;
	uint32_t args_len;
};

/* The request fields of a kernel node, named alike in the add and both
 * set-params calls. */
#define KERNEL_REQ_SET(req, k)                                                 \
	do {                                                                   \
		(req)->function = (k)->function;                               \
		(req)->grid_x = (k)->grid[0];                                  \
		(req)->grid_y = (k)->grid[1];                                  \
		(req)->grid_z = (k)->grid[2];                                  \
		(req)->block_x = (k)->block[0];                                \
		(req)->block_y = (k)->block[1];                                \
		(req)->block_z = (k)->block[2];                                \
		(req)->shared_bytes = (k)->shared;                             \
		(req)->args = (struct wire_blob){ (k)->args, (k)->args_len };  \
	} while (0)

/* The kernel-node fields of any version of the driver's parameters, as
 * kernel_node_get and kernel_node_set take them. */
#define KERNEL_FIELDS(p) (const unsigned[3]){ (p)->gridDimX, (p)->gridDimY, (p)->gridDimZ }, \
			 (const unsigned[3]){ (p)->blockDimX, (p)->blockDimY, (p)->blockDimZ }, \
			 (p)->sharedMemBytes, (p)->kernelParams, (p)->extra

/* Whether @g is a graph handle (both files check what the guest passes). */
bool graph_handle_ok(CUgraph g);
/* Whether @x is an executable graph handle. */
bool exec_handle_ok(CUgraphExec x);
/* A node handle for index @index of @graph; CUDA_ERROR_OUT_OF_MEMORY when it cannot be named. */
CUresult node_out(uint64_t graph, uint32_t index, CUgraphNode *out);
/* A kernel node's function and packed arguments (*@k, args malloc'ed) from any parameter version. */
CUresult kernel_node_get(CUfunction func, CUkernel kern, const unsigned grid[3], const unsigned block[3],
			 unsigned shared, void **kernelParams, void **extra, struct kernel_node *k);
/* A memcpy node's request fields from the guest's CUDA_MEMCPY3D. A host
 * end (host memory, or a unified address outside device memory) makes it
 * a host copy: c->host_end says which end, *@h is its range, and that
 * end's address in @c is its token (the channel made ready). Arrays:
 * CUDA_ERROR_NOT_SUPPORTED. */
CUresult memcpy_node_of(const CUDA_MEMCPY3D *p, struct graph_node_memcpy *c);
/* A host copy's fields into a request that has them by the same names
 * (graph_add_host_copy_node, graph_host_copy_node_set_params). */
#define HOST_COPY_REQ(req, c)                                                          \
	do {                                                                           \
		bool from_host_ = (c)->host_end == GRAPH_COPY_HOST_SRC;               \
		(req)->host_end = (c)->host_end;                                       \
		(req)->token = from_host_ ? (c)->src : (c)->dst;                       \
		(req)->device = from_host_ ? (c)->dst : (c)->src;                      \
		(req)->dev_pitch = from_host_ ? (c)->dst_pitch : (c)->src_pitch;       \
		(req)->dev_height = from_host_ ? (c)->dst_height : (c)->src_height;    \
		(req)->width = (c)->width;                                             \
		(req)->height = (c)->height;                                           \
		(req)->depth = (c)->depth;                                             \
	} while (0)
/* A memcpy node's fields into a request that has them by the same names
 * (graph_add_memcpy_node, graph_memcpy_node_set_params). */
#define MEMCPY_NODE_REQ(req, c)                                                        \
	do {                                                                           \
		(req)->dst = (c)->dst;                                                 \
		(req)->dst_pitch = (c)->dst_pitch;                                     \
		(req)->dst_height = (c)->dst_height;                                   \
		(req)->src = (c)->src;                                                 \
		(req)->src_pitch = (c)->src_pitch;                                     \
		(req)->src_height = (c)->src_height;                                   \
		(req)->width = (c)->width;                                             \
		(req)->height = (c)->height;                                           \
		(req)->depth = (c)->depth;                                             \
	} while (0)
/* cuGraphKernelNodeSetParams for any parameter version (also behind cuGraphNodeSetParams). */
CUresult kernel_node_set(CUgraphNode hNode, CUfunction func, CUkernel kern, const unsigned grid[3],
			 const unsigned block[3], unsigned shared, void **kernelParams, void **extra);

#endif
