/* Graphs, their nodes and executable graphs. Graphs and executables are the
 * worker's virtual handles; a node is its graph plus an index (shim.h,
 * shim_node), so every node call names the graph on the wire. Queries of a
 * graph's shape (nodes, edges, a node's type or neighbours) are answered
 * from two calls that fetch the nodes and the edges.
 *
 * Host nodes name the guest's function by a token (hostfn.c): the worker
 * calls us back over the host-function channel when the graph reaches one.
 * Memcpy nodes reach device memory only: the worker cannot reach the
 * guest's memory when a graph runs. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define NODE_NONE 0xffffffffu

static bool graph_handle_ok(CUgraph g)
{
	return handle_kind_is((uint64_t)(uintptr_t)g, WIRE_HANDLE_GRAPH);
}

static bool exec_handle_ok(CUgraphExec x)
{
	return handle_kind_is((uint64_t)(uintptr_t)x, WIRE_HANDLE_GRAPH_EXEC);
}

/* A node handle for index @index of @graph; NULL when the worker's serial
 * no longer fits the encoding (2^32 graphs). */
static CUresult node_out(uint64_t graph, uint32_t index, CUgraphNode *out)
{
	CUgraphNode n = shim_node(graph, index);

	if (!n) {
		pr_err("graph %#llx node %u cannot be named in a CUgraphNode", (unsigned long long)graph, index);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = n;
	return CUDA_SUCCESS;
}

/* The indices of @deps, which must all be nodes of @graph. *@buf is
 * malloc'ed (free it). */
static CUresult deps_blob(uint64_t graph, const CUgraphNode *deps, size_t n, uint8_t **buf,
			  struct wire_blob *out)
{
	*buf = NULL;
	*out = (struct wire_blob){ NULL, 0 };
	if (n && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	if (n > UINT32_MAX / 8)
		return CUDA_ERROR_INVALID_VALUE;
	if (!n)
		return CUDA_SUCCESS;
	*buf = malloc(n * 4);
	if (!*buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < n; i++) {
		uint64_t g;
		uint32_t k;

		if (!shim_node_decode(deps[i], &g, &k) || g != graph) {
			free(*buf);
			*buf = NULL;
			return CUDA_ERROR_INVALID_VALUE;
		}
		le32_put(*buf + 4 * i, k);
	}
	*out = (struct wire_blob){ *buf, (uint32_t)(n * 4) };
	return CUDA_SUCCESS;
}

/* ---- conditional bodies ------------------------------------------------- */

/* Keep @bodies (malloc'ed) for the nodes of @graph. */
static void cond_bodies_keep(uint64_t graph, CUgraph *bodies)
{
	struct shim_process *p = shim_process();
	struct shim_cond_bodies *b = malloc(sizeof(*b));

	if (!b)
		return;         /* the array lives on, unrecorded */
	b->graph = graph;
	b->bodies = bodies;
	pthread_mutex_lock(&p->cache_lock);
	b->next = p->cond_bodies;
	p->cond_bodies = b;
	pthread_mutex_unlock(&p->cache_lock);
}

/* @graph is destroyed: the arrays of its conditional nodes go. Those of
 * nodes inside bodies stay until the process ends (docs/limits.md). */
static void cond_bodies_drop(uint64_t graph)
{
	struct shim_process *p = shim_process();

	pthread_mutex_lock(&p->cache_lock);
	for (struct shim_cond_bodies **b = &p->cond_bodies; *b;) {
		struct shim_cond_bodies *x = *b;

		if (x->graph == graph) {
			*b = x->next;
			free(x->bodies);
			free(x);
		} else {
			b = &x->next;
		}
	}
	pthread_mutex_unlock(&p->cache_lock);
}

/* ---- graphs ------------------------------------------------------------- */

SHIM_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	struct wire_graph_create_req req = { .flags = flags };
	struct wire_graph_create_rep rep;
	CUresult res;

	if (!phGraph)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_create(&req, &rep);
	if (res == CUDA_SUCCESS)
		*phGraph = (CUgraph)(uintptr_t)rep.graph;
	return res;
}

SHIM_API CUresult cuGraphDestroy(CUgraph hGraph)
{
	struct wire_graph_destroy_req req = { .graph = (uint64_t)(uintptr_t)hGraph };
	struct wire_graph_destroy_rep rep;

	CUresult res;

	if (!graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_destroy(&req, &rep);
	if (res == CUDA_SUCCESS) {
		uobj_owner_drop(req.graph);
		cond_bodies_drop(req.graph);
	}
	return res;
}

SHIM_API CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
	struct wire_graph_clone_req req = { .graph = (uint64_t)(uintptr_t)originalGraph };
	struct wire_graph_clone_rep rep;
	CUresult res;

	if (!phGraphClone || !graph_handle_ok(originalGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_clone(&req, &rep);
	if (res == CUDA_SUCCESS) {
		/* A clone keeps node indices, so child nodes' references keep their tags. */
		uobj_owner_copy(req.graph, rep.clone, SHIM_UOBJ_NODE_NONE, false);
		*phGraphClone = (CUgraph)(uintptr_t)rep.clone;
	}
	return res;
}

SHIM_API CUresult cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph)
{
	struct wire_graph_node_find_in_clone_req req = { .clone = (uint64_t)(uintptr_t)hClonedGraph };
	struct wire_graph_node_find_in_clone_rep rep;
	CUresult res;

	if (!phNode || !graph_handle_ok(hClonedGraph) ||
	    !shim_node_decode(hOriginalNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_node_find_in_clone(&req, &rep);
	return res == CUDA_SUCCESS ? node_out(req.clone, rep.clone_node, phNode) : res;
}

/* ---- adding nodes ------------------------------------------------------- */

/* A kernel node's function and packed arguments, from any version of the
 * parameters. *@args is malloc'ed (free it). */
struct kernel_node {
	uint64_t function;
	unsigned grid[3], block[3], shared;
	uint8_t *args;
	uint32_t args_len;
};

static CUresult kernel_node_get(CUfunction func, CUkernel kern, const unsigned grid[3], const unsigned block[3],
				unsigned shared, void **kernelParams, void **extra, struct kernel_node *k)
{
	uint64_t fn = (uint64_t)(uintptr_t)(func ? (void *)func : (void *)kern);
	CUresult res;

	memset(k, 0, sizeof(*k));
	if (!handle_kind_is(fn, WIRE_HANDLE_FUNCTION) && !handle_kind_is(fn, WIRE_HANDLE_KERNEL))
		return CUDA_ERROR_INVALID_VALUE;
	res = launch_args(fn, kernelParams, extra, &k->args, &k->args_len);
	if (res != CUDA_SUCCESS)
		return res;
	k->function = fn;
	memcpy(k->grid, grid, sizeof(k->grid));
	memcpy(k->block, block, sizeof(k->block));
	k->shared = shared;
	return CUDA_SUCCESS;
}

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

#define KERNEL_FIELDS(p) (const unsigned[3]){ (p)->gridDimX, (p)->gridDimY, (p)->gridDimZ }, \
			 (const unsigned[3]){ (p)->blockDimX, (p)->blockDimY, (p)->blockDimZ }, \
			 (p)->sharedMemBytes, (p)->kernelParams, (p)->extra

static CUresult add_kernel(CUgraphNode *ph, CUgraph hGraph, const CUgraphNode *deps, size_t n,
			   const struct kernel_node *k)
{
	struct wire_graph_add_kernel_node_req req = { .graph = (uint64_t)(uintptr_t)hGraph };
	struct wire_graph_add_kernel_node_rep rep;
	uint8_t *buf;
	CUresult res;

	KERNEL_REQ_SET(&req, k);
	res = deps_blob(req.graph, deps, n, &buf, &req.deps);

	if (res == CUDA_SUCCESS)
		res = rpc_graph_add_kernel_node(&req, &rep);
	free(buf);
	return res == CUDA_SUCCESS ? node_out(req.graph, rep.node, ph) : res;
}

static CUresult kernel_node_add(CUgraphNode *ph, CUgraph hGraph, const CUgraphNode *deps, size_t n,
				CUfunction func, CUkernel kern, const unsigned grid[3], const unsigned block[3],
				unsigned shared, void **kernelParams, void **extra)
{
	struct kernel_node k;
	CUresult res;

	if (!ph || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = kernel_node_get(func, kern, grid, block, shared, kernelParams, extra, &k);
	if (res == CUDA_SUCCESS)
		res = add_kernel(ph, hGraph, deps, n, &k);
	free(k.args);
	return res;
}

SHIM_API CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
				       const CUgraphNode *dependencies, size_t numDependencies,
				       const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return kernel_node_add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->func, NULL,
			       KERNEL_FIELDS(nodeParams));
}

SHIM_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
					  const CUgraphNode *dependencies, size_t numDependencies,
					  const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return kernel_node_add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->func,
			       nodeParams->kern, KERNEL_FIELDS(nodeParams));
}

/* A copy's device end: device memory, or a unified pointer into the arena or
 * a __managed__ variable (managed memory runs on its device copy; a graph's
 * launch is a coherence point). Offsets are folded into the address. */
static CUresult copy_end(CUmemorytype type, CUdeviceptr dev, size_t x, size_t y, size_t z, size_t pitch,
			 size_t rows, uint64_t *out)
{
	if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (type == CU_MEMORYTYPE_UNIFIED && !rpc_arena_contains(dev, 1) && !managed_contains(dev))
		return CUDA_ERROR_NOT_SUPPORTED;        /* host memory under unified addressing */
	*out = dev + x + (y + z * rows) * pitch;
	return CUDA_SUCCESS;
}

static CUresult memcpy_req(const CUDA_MEMCPY3D *p, struct wire_graph_add_memcpy_node_req *req)
{
	CUresult res;

	if (!p || p->srcLOD || p->dstLOD)
		return CUDA_ERROR_INVALID_VALUE;
	res = copy_end(p->srcMemoryType, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch,
		       p->srcHeight, &req->src);
	if (res == CUDA_SUCCESS)
		res = copy_end(p->dstMemoryType, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch,
			       p->dstHeight, &req->dst);
	if (res == CUDA_ERROR_NOT_SUPPORTED) {
		pr_warn("graph memcpy nodes with host memory or arrays are not supported by tern");
		return res;
	}
	req->src_pitch = p->srcPitch;
	req->src_height = p->srcHeight;
	req->dst_pitch = p->dstPitch;
	req->dst_height = p->dstHeight;
	req->width = p->WidthInBytes;
	req->height = p->Height;
	req->depth = p->Depth;
	return res;
}

SHIM_API CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				       size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	struct wire_graph_add_memcpy_node_req req = { .graph = (uint64_t)(uintptr_t)hGraph };
	struct wire_graph_add_memcpy_node_rep rep;
	uint8_t *buf = NULL;
	CUresult res;

	(void)ctx;      /* the session's one context */
	if (!phGraphNode || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = memcpy_req(copyParams, &req);
	if (res == CUDA_SUCCESS)
		res = deps_blob(req.graph, dependencies, numDependencies, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_graph_add_memcpy_node(&req, &rep);
	free(buf);
	return res == CUDA_SUCCESS ? node_out(req.graph, rep.node, phGraphNode) : res;
}

static CUresult memset_add(CUgraphNode *ph, CUgraph hGraph, const CUgraphNode *deps, size_t n, CUdeviceptr dst,
			   size_t pitch, unsigned value, unsigned element_size, size_t width, size_t height)
{
	struct wire_graph_add_memset_node_req req = {
		.graph = (uint64_t)(uintptr_t)hGraph, .dst = dst, .pitch = pitch, .value = value,
		.element_size = element_size, .width = width, .height = height,
	};
	struct wire_graph_add_memset_node_rep rep;
	uint8_t *buf = NULL;
	CUresult res;

	if (!ph || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = deps_blob(req.graph, deps, n, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_graph_add_memset_node(&req, &rep);
	free(buf);
	return res == CUDA_SUCCESS ? node_out(req.graph, rep.node, ph) : res;
}

SHIM_API CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				       size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams,
				       CUcontext ctx)
{
	(void)ctx;
	if (!memsetParams)
		return CUDA_ERROR_INVALID_VALUE;
	return memset_add(phGraphNode, hGraph, dependencies, numDependencies, memsetParams->dst,
			  memsetParams->pitch, memsetParams->value, memsetParams->elementSize,
			  memsetParams->width, memsetParams->height);
}

SHIM_API CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				      size_t numDependencies)
{
	struct wire_graph_add_empty_node_req req = { .graph = (uint64_t)(uintptr_t)hGraph };
	struct wire_graph_add_empty_node_rep rep;
	uint8_t *buf = NULL;
	CUresult res;

	if (!phGraphNode || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = deps_blob(req.graph, dependencies, numDependencies, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_graph_add_empty_node(&req, &rep);
	free(buf);
	return res == CUDA_SUCCESS ? node_out(req.graph, rep.node, phGraphNode) : res;
}

SHIM_API CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				     size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	struct wire_graph_add_host_node_req req = { .graph = (uint64_t)(uintptr_t)hGraph };
	struct wire_graph_add_host_node_rep rep;
	uint8_t *buf = NULL;
	CUresult res;

	if (!phGraphNode || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = hostfn_node_token(nodeParams, &req.token);
	if (res == CUDA_SUCCESS)
		res = deps_blob(req.graph, dependencies, numDependencies, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_graph_add_host_node(&req, &rep);
	free(buf);
	return res == CUDA_SUCCESS ? node_out(req.graph, rep.node, phGraphNode) : res;
}

SHIM_API CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					   const CUgraphNode *dependencies, size_t numDependencies,
					   CUgraph childGraph)
{
	struct wire_graph_add_child_node_req req = {
		.graph = (uint64_t)(uintptr_t)hGraph, .child = (uint64_t)(uintptr_t)childGraph,
	};
	struct wire_graph_add_child_node_rep rep;
	uint8_t *buf = NULL;
	CUresult res;

	if (!phGraphNode || !graph_handle_ok(hGraph) || !graph_handle_ok(childGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = deps_blob(req.graph, dependencies, numDependencies, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_graph_add_child_node(&req, &rep);
	free(buf);
	if (res != CUDA_SUCCESS)
		return res;
	/* The node holds a copy of the child graph, with its user objects. */
	uobj_owner_copy(req.child, req.graph, rep.node, true);
	return node_out(req.graph, rep.node, phGraphNode);
}

static CUresult event_node_add(CUgraphNode *ph, CUgraph hGraph, const CUgraphNode *deps, size_t n, CUevent ev,
			       uint32_t wait)
{
	struct wire_graph_add_event_node_req req = {
		.graph = (uint64_t)(uintptr_t)hGraph, .event = (uint64_t)(uintptr_t)ev, .wait = wait,
	};
	struct wire_graph_add_event_node_rep rep;
	uint8_t *buf = NULL;
	CUresult res;

	if (!ph || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	if (!handle_kind_is(req.event, WIRE_HANDLE_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	res = deps_blob(req.graph, deps, n, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_graph_add_event_node(&req, &rep);
	free(buf);
	return res == CUDA_SUCCESS ? node_out(req.graph, rep.node, ph) : res;
}

SHIM_API CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					    const CUgraphNode *dependencies, size_t numDependencies, CUevent event)
{
	return event_node_add(phGraphNode, hGraph, dependencies, numDependencies, event, 0);
}

SHIM_API CUresult cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					  const CUgraphNode *dependencies, size_t numDependencies, CUevent event)
{
	return event_node_add(phGraphNode, hGraph, dependencies, numDependencies, event, 1);
}

/* Graph allocations come from the session's arena on its one device. */
static CUresult alloc_props_ok(const CUmemPoolProps *props, const CUmemAccessDesc *access, size_t naccess)
{
	if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props->handleTypes != CU_MEM_HANDLE_TYPE_NONE ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id != 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (naccess && !access)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < naccess; i++)
		if (access[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || access[i].location.id != 0)
			return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

static CUresult mem_alloc_add(CUgraphNode *ph, CUgraph hGraph, const CUgraphNode *deps, size_t n,
			      const CUmemPoolProps *props, const CUmemAccessDesc *access, size_t naccess,
			      size_t bytes, CUdeviceptr *dptr)
{
	struct wire_graph_add_mem_alloc_node_req req = { .graph = (uint64_t)(uintptr_t)hGraph, .bytes = bytes };
	struct wire_graph_add_mem_alloc_node_rep rep;
	uint8_t *buf = NULL;
	CUresult res;

	if (!ph || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = alloc_props_ok(props, access, naccess);
	if (res == CUDA_SUCCESS)
		res = deps_blob(req.graph, deps, n, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_graph_add_mem_alloc_node(&req, &rep);
	free(buf);
	if (res == CUDA_SUCCESS) {
		*dptr = rep.address;
		res = node_out(req.graph, rep.node, ph);
	}
	return res;
}

SHIM_API CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					 size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return mem_alloc_add(phGraphNode, hGraph, dependencies, numDependencies, &nodeParams->poolProps,
			     nodeParams->accessDescs, nodeParams->accessDescCount, nodeParams->bytesize,
			     &nodeParams->dptr);
}

SHIM_API CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					size_t numDependencies, CUdeviceptr dptr)
{
	struct wire_graph_add_mem_free_node_req req = { .graph = (uint64_t)(uintptr_t)hGraph, .address = dptr };
	struct wire_graph_add_mem_free_node_rep rep;
	uint8_t *buf = NULL;
	CUresult res;

	if (!phGraphNode || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = deps_blob(req.graph, dependencies, numDependencies, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_graph_add_mem_free_node(&req, &rep);
	free(buf);
	return res == CUDA_SUCCESS ? node_out(req.graph, rep.node, phGraphNode) : res;
}

/* The embedded graph of a child graph node: a graph of the guest's that
 * the node owns (changes to it are the node's). */
SHIM_API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
	struct wire_graph_child_node_get_graph_req req;
	struct wire_graph_child_node_get_graph_rep rep;
	CUresult res;

	if (!phGraph || !shim_node_decode(hNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_child_node_get_graph(&req, &rep);
	if (res == CUDA_SUCCESS)
		*phGraph = (CUgraph)(uintptr_t)rep.child;
	return res;
}

static bool ctx_handle_ok(CUcontext ctx)
{
	return !ctx || handle_kind_is((uint64_t)(uintptr_t)ctx, WIRE_HANDLE_CONTEXT);
}

SHIM_API CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out, CUgraph hGraph,
						 CUcontext ctx, unsigned int defaultLaunchValue, unsigned int flags)
{
	struct wire_graph_conditional_handle_create_req req = {
		.graph = (uint64_t)(uintptr_t)hGraph, .ctx = (uint64_t)(uintptr_t)ctx,
		.default_value = defaultLaunchValue, .flags = flags,
	};
	struct wire_graph_conditional_handle_create_rep rep;
	CUresult res;

	if (!pHandle_out || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx_handle_ok(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	res = rpc_graph_conditional_handle_create(&req, &rep);
	if (res == CUDA_SUCCESS)
		*pHandle_out = rep.value;
	return res;
}

/* A conditional node: the worker makes it with its bodies, whose graph
 * handles the node's phGraph_out array (ours, kept with the graph) holds. */
static CUresult cond_node_add(CUgraphNode *ph, CUgraph hGraph, const CUgraphNode *deps, size_t n,
			      CUDA_CONDITIONAL_NODE_PARAMS *p)
{
	struct wire_graph_add_conditional_node_req req = {
		.graph = (uint64_t)(uintptr_t)hGraph, .value = p->handle, .type = (uint32_t)p->type,
		.size = p->size, .ctx = (uint64_t)(uintptr_t)p->ctx,
	};
	struct wire_graph_add_conditional_node_rep rep;
	CUgraph *bodies = NULL;
	uint8_t *buf = NULL;
	CUresult res;

	if (!ph || !graph_handle_ok(hGraph) || !p->size)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx_handle_ok(p->ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	res = deps_blob(req.graph, deps, n, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_graph_add_conditional_node(&req, &rep);
	free(buf);
	if (res != CUDA_SUCCESS)
		return res;
	if (rep.bodies.len != (uint64_t)p->size * 8)
		return CUDA_ERROR_UNKNOWN;      /* not what the worker was asked */
	bodies = calloc(p->size, sizeof(*bodies));
	if (!bodies)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t k = 0; k < p->size; k++)
		bodies[k] = (CUgraph)(uintptr_t)((uint64_t)le32_get(rep.bodies.ptr + 8 * k) |
						 (uint64_t)le32_get(rep.bodies.ptr + 8 * k + 4) << 32);
	res = node_out(req.graph, rep.node, ph);
	if (res != CUDA_SUCCESS) {
		free(bodies);
		return res;
	}
	p->phGraph_out = bodies;
	cond_bodies_keep(req.graph, bodies);
	return CUDA_SUCCESS;
}

/* cuGraphAddNode: the generic form, by type. */
static CUresult node_add(CUgraphNode *ph, CUgraph hGraph, const CUgraphNode *deps, size_t n,
			 CUgraphNodeParams *p)
{
	if (!p || p->reserved0[0] || p->reserved0[1] || p->reserved0[2] || p->reserved2)
		return CUDA_ERROR_INVALID_VALUE;
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return kernel_node_add(ph, hGraph, deps, n, p->kernel.func, p->kernel.kern,
				       KERNEL_FIELDS(&p->kernel));
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		if (p->memcpy.flags || p->memcpy.reserved)
			return CUDA_ERROR_INVALID_VALUE;
		return cuGraphAddMemcpyNode(ph, hGraph, deps, n, &p->memcpy.copyParams, p->memcpy.copyCtx);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		return memset_add(ph, hGraph, deps, n, p->memset.dst, p->memset.pitch, p->memset.value,
				  p->memset.elementSize, p->memset.width, p->memset.height);
	case CU_GRAPH_NODE_TYPE_GRAPH:
		/* Moving the child's ownership would need the child's handle to
		 * become the node's; only the default (a copy) is remoted. */
		if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
			return CUDA_ERROR_NOT_SUPPORTED;
		return cuGraphAddChildGraphNode(ph, hGraph, deps, n, p->graph.graph);
	case CU_GRAPH_NODE_TYPE_EMPTY:
		return cuGraphAddEmptyNode(ph, hGraph, deps, n);
	case CU_GRAPH_NODE_TYPE_HOST: {
		/* The same two fields as CUDA_HOST_NODE_PARAMS. */
		CUDA_HOST_NODE_PARAMS host = { .fn = p->host.fn, .userData = p->host.userData };

		return cuGraphAddHostNode(ph, hGraph, deps, n, &host);
	}
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return event_node_add(ph, hGraph, deps, n, p->eventWait.event, 1);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return event_node_add(ph, hGraph, deps, n, p->eventRecord.event, 0);
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
		return mem_alloc_add(ph, hGraph, deps, n, &p->alloc.poolProps, p->alloc.accessDescs,
				     p->alloc.accessDescCount, p->alloc.bytesize, &p->alloc.dptr);
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		return cuGraphAddMemFreeNode(ph, hGraph, deps, n, p->free.dptr);
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		return cond_node_add(ph, hGraph, deps, n, &p->conditional);
	default:
		/* External semaphores, batch memops. */
		pr_warn("graph nodes of type %d are not supported by tern", (int)p->type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

SHIM_API CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				 size_t numDependencies, CUgraphNodeParams *nodeParams)
{
	return node_add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

SHIM_API CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				    const CUgraphEdgeData *dependencyData, size_t numDependencies,
				    CUgraphNodeParams *nodeParams)
{
	if (!graph_edges_default(dependencyData, numDependencies))
		return CUDA_ERROR_NOT_SUPPORTED;
	return node_add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

/* ---- shape: nodes and edges --------------------------------------------- */

/* The graph's nodes (u32 index, u32 type pairs) or edges (u32 from, u32 to),
 * copied out of the reply: *@out is malloc'ed, *@n pairs. */
static CUresult pairs_fetch(uint64_t graph, bool edges, uint8_t **out, size_t *n)
{
	struct wire_blob b;
	CUresult res;

	*out = NULL;
	*n = 0;
	if (!handle_kind_is(graph, WIRE_HANDLE_GRAPH))
		return CUDA_ERROR_INVALID_VALUE;
	if (edges) {
		struct wire_graph_get_edges_req req = { .graph = graph };
		struct wire_graph_get_edges_rep rep;

		res = rpc_graph_get_edges(&req, &rep);
		b = rep.edges;
	} else {
		struct wire_graph_get_nodes_req req = { .graph = graph };
		struct wire_graph_get_nodes_rep rep;

		res = rpc_graph_get_nodes(&req, &rep);
		b = rep.nodes;
	}
	if (res != CUDA_SUCCESS)
		return res;
	if (b.len % 8)
		return CUDA_ERROR_UNKNOWN;
	*out = malloc(b.len ? b.len : 1);
	if (!*out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(*out, b.ptr, b.len);
	*n = b.len / 8;
	return CUDA_SUCCESS;
}

static uint32_t pair_a(const uint8_t *pairs, size_t i)
{
	return le32_get(pairs + 8 * i);
}

static uint32_t pair_b(const uint8_t *pairs, size_t i)
{
	return le32_get(pairs + 8 * i + 4);
}

/* Hand out @count node handles as the driver does: with an array, fill up
 * to *@num and NULL the rest; the count is the smaller. Without, the count. */
static CUresult nodes_give(uint64_t graph, const uint32_t *idx, size_t count, CUgraphNode *out, size_t *num)
{
	if (!out) {
		*num = count;
		return CUDA_SUCCESS;
	}
	for (size_t i = 0; i < *num; i++) {
		out[i] = NULL;
		if (i < count && node_out(graph, idx[i], &out[i]) != CUDA_SUCCESS)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (*num > count)
		*num = count;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
	uint64_t graph = (uint64_t)(uintptr_t)hGraph;
	uint8_t *pairs;
	uint32_t *idx;
	size_t n;
	CUresult res;

	if (!numNodes)
		return CUDA_ERROR_INVALID_VALUE;
	res = pairs_fetch(graph, false, &pairs, &n);
	if (res != CUDA_SUCCESS)
		return res;
	idx = malloc((n ? n : 1) * sizeof(*idx));
	if (!idx) {
		free(pairs);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (size_t i = 0; i < n; i++)
		idx[i] = pair_a(pairs, i);
	res = nodes_give(graph, idx, n, nodes, numNodes);
	free(idx);
	free(pairs);
	return res;
}

SHIM_API CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
	uint64_t graph = (uint64_t)(uintptr_t)hGraph;
	uint8_t *nodes, *edges = NULL;
	size_t n, e, roots = 0;
	uint32_t *idx = NULL;
	CUresult res;

	if (!numRootNodes)
		return CUDA_ERROR_INVALID_VALUE;
	res = pairs_fetch(graph, false, &nodes, &n);
	if (res == CUDA_SUCCESS)
		res = pairs_fetch(graph, true, &edges, &e);
	if (res == CUDA_SUCCESS) {
		idx = malloc((n ? n : 1) * sizeof(*idx));
		if (!idx)
			res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (res == CUDA_SUCCESS) {
		/* Indices are below the largest one listed: mark those with a dependency. */
		uint32_t top = 0;
		uint8_t *has_dep;

		for (size_t i = 0; i < n; i++)
			if (pair_a(nodes, i) >= top)
				top = pair_a(nodes, i) + 1;
		has_dep = calloc(top + 1, 1);
		if (!has_dep)
			res = CUDA_ERROR_OUT_OF_MEMORY;
		for (size_t j = 0; has_dep && j < e; j++)
			if (pair_b(edges, j) < top)
				has_dep[pair_b(edges, j)] = 1;
		for (size_t i = 0; has_dep && i < n; i++)
			if (!has_dep[pair_a(nodes, i)])
				idx[roots++] = pair_a(nodes, i);
		free(has_dep);
	}
	if (res == CUDA_SUCCESS)
		res = nodes_give(graph, idx, roots, rootNodes, numRootNodes);
	free(idx);
	free(nodes);
	free(edges);
	return res;
}

static CUresult edges_get(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data, size_t *num)
{
	uint64_t graph = (uint64_t)(uintptr_t)hGraph;
	uint8_t *pairs;
	size_t n;
	CUresult res;

	if (!num || (!from) != (!to))
		return CUDA_ERROR_INVALID_VALUE;
	res = pairs_fetch(graph, true, &pairs, &n);
	if (res != CUDA_SUCCESS)
		return res;
	if (from) {
		for (size_t i = 0; i < *num && res == CUDA_SUCCESS; i++) {
			from[i] = to[i] = NULL;
			if (data)
				memset(&data[i], 0, sizeof(data[i]));
			if (i < n) {
				res = node_out(graph, pair_a(pairs, i), &from[i]);
				if (res == CUDA_SUCCESS)
					res = node_out(graph, pair_b(pairs, i), &to[i]);
			}
		}
		if (*num > n)
			*num = n;
	} else {
		*num = n;
	}
	free(pairs);
	return res;
}

SHIM_API CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges)
{
	return edges_get(hGraph, from, to, NULL, numEdges);
}

SHIM_API CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
				     size_t *numEdges)
{
	if (edgeData && !from)
		return CUDA_ERROR_INVALID_VALUE;
	return edges_get(hGraph, from, to, edgeData, numEdges);
}

SHIM_API CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
	uint64_t graph;
	uint32_t index;
	uint8_t *pairs;
	size_t n;
	CUresult res;

	if (!type || !shim_node_decode(hNode, &graph, &index))
		return CUDA_ERROR_INVALID_VALUE;
	res = pairs_fetch(graph, false, &pairs, &n);
	if (res != CUDA_SUCCESS)
		return res;
	res = CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < n; i++)
		if (pair_a(pairs, i) == index) {
			*type = (CUgraphNodeType)pair_b(pairs, i);
			res = CUDA_SUCCESS;
		}
	free(pairs);
	return res;
}

/* A node's dependencies (@incoming) or dependents. */
static CUresult neighbours(CUgraphNode hNode, bool incoming, CUgraphNode *out, CUgraphEdgeData *data, size_t *num)
{
	uint64_t graph;
	uint32_t index, *idx = NULL;
	uint8_t *pairs;
	size_t n, count = 0;
	CUresult res;

	if (!num || !shim_node_decode(hNode, &graph, &index) || (data && !out))
		return CUDA_ERROR_INVALID_VALUE;
	res = pairs_fetch(graph, true, &pairs, &n);
	if (res != CUDA_SUCCESS)
		return res;
	idx = malloc((n ? n : 1) * sizeof(*idx));
	if (!idx) {
		free(pairs);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (size_t i = 0; i < n; i++) {
		if (incoming && pair_b(pairs, i) == index)
			idx[count++] = pair_a(pairs, i);
		else if (!incoming && pair_a(pairs, i) == index)
			idx[count++] = pair_b(pairs, i);
	}
	for (size_t i = 0; data && i < *num; i++)
		memset(&data[i], 0, sizeof(data[i]));
	res = nodes_give(graph, idx, count, out, num);
	free(idx);
	free(pairs);
	return res;
}

SHIM_API CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies, size_t *numDependencies)
{
	return neighbours(hNode, true, dependencies, NULL, numDependencies);
}

SHIM_API CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies,
						CUgraphEdgeData *edgeData, size_t *numDependencies)
{
	return neighbours(hNode, true, dependencies, edgeData, numDependencies);
}

SHIM_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
					       size_t *numDependentNodes)
{
	return neighbours(hNode, false, dependentNodes, NULL, numDependentNodes);
}

SHIM_API CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *dependentNodes,
						  CUgraphEdgeData *edgeData, size_t *numDependentNodes)
{
	return neighbours(hNode, false, dependentNodes, edgeData, numDependentNodes);
}

static CUresult edges_edit(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
			   const CUgraphEdgeData *data, size_t n, bool remove)
{
	struct wire_graph_edit_edges_req req = { .graph = (uint64_t)(uintptr_t)hGraph, .remove = remove };
	struct wire_graph_edit_edges_rep rep;
	uint8_t *pairs;
	CUresult res;

	if (!graph_handle_ok(hGraph) || (n && (!from || !to)) || n > UINT32_MAX / 8)
		return CUDA_ERROR_INVALID_VALUE;
	if (!graph_edges_default(data, n))
		return CUDA_ERROR_NOT_SUPPORTED;
	pairs = malloc(n ? n * 8 : 1);
	if (!pairs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < n; i++) {
		uint64_t ga, gb;
		uint32_t a, b;

		if (!shim_node_decode(from[i], &ga, &a) || !shim_node_decode(to[i], &gb, &b) ||
		    ga != req.graph || gb != req.graph) {
			free(pairs);
			return CUDA_ERROR_INVALID_VALUE;
		}
		le32_put(pairs + 8 * i, a);
		le32_put(pairs + 8 * i + 4, b);
	}
	req.edges = (struct wire_blob){ pairs, (uint32_t)(n * 8) };
	res = rpc_graph_edit_edges(&req, &rep);
	free(pairs);
	return res;
}

SHIM_API CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
					 size_t numDependencies)
{
	return edges_edit(hGraph, from, to, NULL, numDependencies, false);
}

SHIM_API CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
					    const CUgraphEdgeData *edgeData, size_t numDependencies)
{
	return edges_edit(hGraph, from, to, edgeData, numDependencies, false);
}

SHIM_API CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
					    size_t numDependencies)
{
	return edges_edit(hGraph, from, to, NULL, numDependencies, true);
}

SHIM_API CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
					       const CUgraphEdgeData *edgeData, size_t numDependencies)
{
	return edges_edit(hGraph, from, to, edgeData, numDependencies, true);
}

SHIM_API CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
	struct wire_graph_destroy_node_req req;
	struct wire_graph_destroy_node_rep rep;

	CUresult res;

	if (!shim_node_decode(hNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_destroy_node(&req, &rep);
	if (res == CUDA_SUCCESS)
		uobj_owner_drop_node(req.graph, req.node);
	return res;
}

static CUresult kernel_node_set(CUgraphNode hNode, CUfunction func, CUkernel kern, const unsigned grid[3],
				const unsigned block[3], unsigned shared, void **kernelParams, void **extra)
{
	struct wire_graph_kernel_node_set_params_req req;
	struct wire_graph_kernel_node_set_params_rep rep;
	struct kernel_node k;
	CUresult res;

	if (!shim_node_decode(hNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	res = kernel_node_get(func, kern, grid, block, shared, kernelParams, extra, &k);
	if (res != CUDA_SUCCESS)
		return res;
	KERNEL_REQ_SET(&req, &k);
	res = rpc_graph_kernel_node_set_params(&req, &rep);
	free(k.args);
	return res;
}

SHIM_API CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return kernel_node_set(hNode, nodeParams->func, NULL, KERNEL_FIELDS(nodeParams));
}

SHIM_API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return kernel_node_set(hNode, nodeParams->func, nodeParams->kern, KERNEL_FIELDS(nodeParams));
}

/* ---- executable graphs -------------------------------------------------- */

static CUresult instantiate(CUgraphExec *ph, CUgraph hGraph, uint64_t flags, uint64_t stream, uint32_t *result,
			    CUgraphNode *error_node)
{
	struct wire_graph_instantiate_req req = {
		.graph = (uint64_t)(uintptr_t)hGraph, .flags = flags, .stream = stream,
	};
	struct wire_graph_instantiate_rep rep;
	CUresult res;

	if (error_node)
		*error_node = NULL;
	if (!ph || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_instantiate(&req, &rep);
	if (res == CUDA_SUCCESS)
		res = (CUresult)rep.status;
	if (result)
		*result = rep.result;
	if (res == CUDA_SUCCESS) {
		uobj_owner_copy(req.graph, rep.exec, SHIM_UOBJ_NODE_NONE, true);
		*ph = (CUgraphExec)(uintptr_t)rep.exec;
	} else if (error_node && rep.error_node != NODE_NONE)
		node_out(req.graph, rep.error_node, error_node);
	return res;
}

static CUresult instantiate_logged(CUgraphExec *ph, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
				   size_t bufferSize)
{
	CUresult res = instantiate(ph, hGraph, 0, 0, NULL, phErrorNode);

	if (logBuffer && bufferSize) {
		if (res == CUDA_SUCCESS)
			logBuffer[0] = 0;
		else
			snprintf(logBuffer, bufferSize, "graph instantiation failed with CUDA error %d", (int)res);
	}
	return res;
}

SHIM_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
				     char *logBuffer, size_t bufferSize)
{
	return instantiate_logged(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

SHIM_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
					char *logBuffer, size_t bufferSize)
{
	return instantiate_logged(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

SHIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
	/* The upload flag needs a stream: WithParams only, as in the driver. */
	if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
		return CUDA_ERROR_INVALID_VALUE;
	return instantiate(phGraphExec, hGraph, flags, 0, NULL, NULL);
}

static CUresult instantiate_params(CUgraphExec *ph, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *p, bool ptsz)
{
	uint32_t result = CUDA_GRAPH_INSTANTIATE_ERROR;
	CUresult res;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	res = instantiate(ph, hGraph, p->flags, shim_stream(p->hUploadStream, ptsz), &result, &p->hErrNode_out);
	p->result_out = (CUgraphInstantiateResult)result;
	return res;
}

SHIM_API CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
					       CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	return instantiate_params(phGraphExec, hGraph, instantiateParams, false);
}

SHIM_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
						    CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	return instantiate_params(phGraphExec, hGraph, instantiateParams, true);
}

SHIM_API CUresult cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags)
{
	struct wire_graph_exec_get_flags_req req = { .exec = (uint64_t)(uintptr_t)hGraphExec };
	struct wire_graph_exec_get_flags_rep rep;
	CUresult res;

	if (!flags || !exec_handle_ok(hGraphExec))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_exec_get_flags(&req, &rep);
	if (res == CUDA_SUCCESS)
		*flags = rep.flags;
	return res;
}

SHIM_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	struct wire_graph_exec_destroy_req req = { .exec = (uint64_t)(uintptr_t)hGraphExec };
	struct wire_graph_exec_destroy_rep rep;

	CUresult res;

	if (!exec_handle_ok(hGraphExec))
		return CUDA_ERROR_INVALID_VALUE;
	/* Its user objects' references go when its launches are done, as in
	 * the driver: wait for them first, only when it holds any. */
	if (uobj_owner_holds(req.exec))
		cuCtxSynchronize();
	res = rpc_graph_exec_destroy(&req, &rep);
	if (res == CUDA_SUCCESS)
		uobj_owner_drop(req.exec);
	return res;
}

/* A launch is deferred like a kernel launch (lazy RPC): its error, if any,
 * is the next synchronising call's. */
static CUresult graph_launch(CUgraphExec x, uint64_t stream)
{
	struct wire_graph_launch_req req = { .exec = (uint64_t)(uintptr_t)x, .stream = stream };
	struct wire_graph_launch_rep rep;
	CUresult res;

	if (!exec_handle_ok(x))
		return CUDA_ERROR_INVALID_VALUE;
	res = managed_device_access(true, stream);
	if (res != CUDA_SUCCESS)
		return res;
	if (shim_process()->lazy)
		return rpc_graph_launch_defer(&req);
	return rpc_graph_launch(&req, &rep);
}

SHIM_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, shim_stream(hStream, false));
}

SHIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, shim_stream(hStream, true));
}

static CUresult graph_upload(CUgraphExec x, uint64_t stream)
{
	struct wire_graph_upload_req req = { .exec = (uint64_t)(uintptr_t)x, .stream = stream };
	struct wire_graph_upload_rep rep;

	if (!exec_handle_ok(x))
		return CUDA_ERROR_INVALID_VALUE;
	if (shim_process()->lazy)
		return rpc_graph_upload_defer(&req);
	return rpc_graph_upload(&req, &rep);
}

SHIM_API CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_upload(hGraphExec, shim_stream(hStream, false));
}

SHIM_API CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_upload(hGraphExec, shim_stream(hStream, true));
}

static CUresult exec_update(CUgraphExec x, CUgraph hGraph, CUgraphExecUpdateResultInfo *info)
{
	struct wire_graph_exec_update_req req = {
		.exec = (uint64_t)(uintptr_t)x, .graph = (uint64_t)(uintptr_t)hGraph,
	};
	struct wire_graph_exec_update_rep rep;
	CUresult res;

	if (!exec_handle_ok(x) || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_exec_update(&req, &rep);
	if (res == CUDA_SUCCESS)
		res = (CUresult)rep.status;
	/* The executable now holds the new graph's references instead. */
	if (res == CUDA_SUCCESS) {
		uobj_owner_drop(req.exec);
		uobj_owner_copy(req.graph, req.exec, SHIM_UOBJ_NODE_NONE, true);
	}
	memset(info, 0, sizeof(*info));
	info->result = (CUgraphExecUpdateResult)rep.result;
	if (rep.error_node != NODE_NONE)
		node_out(req.graph, rep.error_node, &info->errorNode);
	if (rep.error_from != NODE_NONE)
		node_out(req.graph, rep.error_from, &info->errorFromNode);
	return res;
}

SHIM_API CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
				    CUgraphExecUpdateResult *updateResult_out)
{
	CUgraphExecUpdateResultInfo info;
	CUresult res;

	if (!hErrorNode_out || !updateResult_out)
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_update(hGraphExec, hGraph, &info);
	*hErrorNode_out = info.errorNode;
	*updateResult_out = info.result;
	return res;
}

SHIM_API CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)
{
	if (!resultInfo)
		return CUDA_ERROR_INVALID_VALUE;
	return exec_update(hGraphExec, hGraph, resultInfo);
}

/* Deferred like a launch: the new parameters take effect at the next launch
 * in stream order, and an error is the next synchronising call's. */
static CUresult exec_kernel_node_set(CUgraphExec x, CUgraphNode hNode, CUfunction func, CUkernel kern,
				     const unsigned grid[3], const unsigned block[3], unsigned shared,
				     void **kernelParams, void **extra)
{
	struct wire_graph_exec_kernel_node_set_params_req req = { .exec = (uint64_t)(uintptr_t)x };
	struct wire_graph_exec_kernel_node_set_params_rep rep;
	struct kernel_node k;
	CUresult res;

	if (!exec_handle_ok(x) || !shim_node_decode(hNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	res = kernel_node_get(func, kern, grid, block, shared, kernelParams, extra, &k);
	if (res != CUDA_SUCCESS)
		return res;
	KERNEL_REQ_SET(&req, &k);
	if (shim_process()->lazy)
		res = rpc_graph_exec_kernel_node_set_params_defer(&req);
	else
		res = rpc_graph_exec_kernel_node_set_params(&req, &rep);
	free(k.args);
	return res;
}

SHIM_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
						 const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return exec_kernel_node_set(hGraphExec, hNode, nodeParams->func, NULL, KERNEL_FIELDS(nodeParams));
}

SHIM_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
						    const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return exec_kernel_node_set(hGraphExec, hNode, nodeParams->func, nodeParams->kern,
				    KERNEL_FIELDS(nodeParams));
}

/* ---- node parameters read back ------------------------------------------ */

/* Node @hNode's parameters from the worker's description of its graph,
 * for the guest's @out (NULL: CUDA_ERROR_INVALID_VALUE, as when the node is
 * not of @type). The reply's blob lives until this thread's next call. */
static CUresult node_params_fetch(CUgraphNode hNode, CUgraphNodeType type, const void *out,
				  struct wire_graph_node_get_params_rep *rep)
{
	struct wire_graph_node_get_params_req req;
	CUresult res;

	if (!out || !shim_node_decode(hNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_node_get_params(&req, rep);
	if (res == CUDA_SUCCESS && rep->type != (uint32_t)type)
		res = CUDA_ERROR_INVALID_VALUE;
	return res;
}

/* Kernel arguments handed out by cuGraphKernelNodeGetParams: kernelParams
 * points into storage the shim keeps per node, as the driver's stays valid
 * until the node changes. An entry is replaced when a later read finds other
 * arguments (the node changed); the old one is kept too, since the guest may
 * still hold its pointers, and everything goes with the process. */
struct kargs {
	uint64_t graph;
	uint32_t index;
	uint32_t len;
	uint8_t *args;
	void **ptrs;
	struct kargs *next;
};

static pthread_mutex_t kargs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kargs *kargs_list;

static CUresult kargs_get(uint64_t graph, uint32_t index, uint64_t fn, const struct wire_blob *args, void ***out,
			  uint64_t *kernel)
{
	struct shim_func *f;
	struct kargs *k;
	CUresult res = CUDA_SUCCESS;

	*out = NULL;
	f = func_table_get(fn, &res);
	if (!f)
		return res;
	*kernel = handle_kind_is(fn, WIRE_HANDLE_KERNEL) ? fn : f->kernel;
	if (args->len != f->args_bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f->param_count)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&kargs_lock);
	for (k = kargs_list; k; k = k->next)
		if (k->graph == graph && k->index == index && k->len == args->len &&
		    !memcmp(k->args, args->ptr, args->len))
			break;
	if (!k) {
		k = calloc(1, sizeof(*k));
		if (k) {
			k->args = malloc(args->len ? args->len : 1);
			k->ptrs = calloc(f->param_count, sizeof(void *));
		}
		if (!k || !k->args || !k->ptrs) {
			if (k) {
				free(k->args);
				free(k->ptrs);
			}
			free(k);
			pthread_mutex_unlock(&kargs_lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		k->graph = graph;
		k->index = index;
		k->len = args->len;
		memcpy(k->args, args->ptr, args->len);
		for (uint32_t i = 0; i < f->param_count; i++)
			k->ptrs[i] = k->args + f->params[i].offset;
		k->next = kargs_list;
		kargs_list = k;
	}
	*out = k->ptrs;
	pthread_mutex_unlock(&kargs_lock);
	return CUDA_SUCCESS;
}

static CUresult kernel_node_read(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *p)
{
	struct wire_graph_node_get_params_rep rep;
	uint64_t graph, kernel = 0;
	uint32_t index;
	CUresult res = node_params_fetch(hNode, CU_GRAPH_NODE_TYPE_KERNEL, p, &rep);

	if (res != CUDA_SUCCESS)
		return res;
	shim_node_decode(hNode, &graph, &index);
	memset(p, 0, sizeof(*p));
	res = kargs_get(graph, index, rep.object, &rep.args, &p->kernelParams, &kernel);
	if (res != CUDA_SUCCESS)
		return res;
	p->func = (CUfunction)(uintptr_t)rep.object;
	p->kern = (CUkernel)(uintptr_t)kernel;
	p->gridDimX = rep.grid_x;
	p->gridDimY = rep.grid_y;
	p->gridDimZ = rep.grid_z;
	p->blockDimX = rep.block_x;
	p->blockDimY = rep.block_y;
	p->blockDimZ = rep.block_z;
	p->sharedMemBytes = rep.shared_bytes;
	return CUDA_SUCCESS;
}

/* The first version's fields are the second's first ones. */
_Static_assert(offsetof(CUDA_KERNEL_NODE_PARAMS_v1, extra) == offsetof(CUDA_KERNEL_NODE_PARAMS, extra) &&
	       sizeof(CUDA_KERNEL_NODE_PARAMS_v1) <= sizeof(CUDA_KERNEL_NODE_PARAMS),
	       "CUDA_KERNEL_NODE_PARAMS_v1 is a prefix of CUDA_KERNEL_NODE_PARAMS");

SHIM_API CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	CUDA_KERNEL_NODE_PARAMS p;
	CUresult res;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	res = kernel_node_read(hNode, &p);
	if (res == CUDA_SUCCESS)
		memcpy(nodeParams, &p, sizeof(*nodeParams));
	return res;
}

SHIM_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	return nodeParams ? kernel_node_read(hNode, nodeParams) : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
	struct wire_graph_node_get_params_rep rep;
	CUresult res;

	res = node_params_fetch(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, nodeParams, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	/* Offsets were folded into the addresses when the node was made. */
	memset(nodeParams, 0, sizeof(*nodeParams));
	nodeParams->srcMemoryType = CU_MEMORYTYPE_DEVICE;
	nodeParams->srcDevice = rep.src;
	nodeParams->srcPitch = rep.src_pitch;
	nodeParams->srcHeight = rep.src_height;
	nodeParams->dstMemoryType = CU_MEMORYTYPE_DEVICE;
	nodeParams->dstDevice = rep.dst;
	nodeParams->dstPitch = rep.dst_pitch;
	nodeParams->dstHeight = rep.dst_height;
	nodeParams->WidthInBytes = rep.width;
	nodeParams->Height = rep.height;
	nodeParams->Depth = rep.depth;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
	struct wire_graph_node_get_params_rep rep;
	CUresult res;

	res = node_params_fetch(hNode, CU_GRAPH_NODE_TYPE_MEMSET, nodeParams, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	nodeParams->dst = rep.dst;
	nodeParams->pitch = rep.dst_pitch;
	nodeParams->value = rep.value;
	nodeParams->elementSize = rep.element_size;
	nodeParams->width = rep.width;
	nodeParams->height = rep.height;
	return CUDA_SUCCESS;
}

static CUresult event_node_read(CUgraphNode hNode, CUgraphNodeType type, CUevent *out)
{
	struct wire_graph_node_get_params_rep rep;
	CUresult res;

	res = node_params_fetch(hNode, type, out, &rep);
	if (res == CUDA_SUCCESS)
		*out = (CUevent)(uintptr_t)rep.object;
	return res;
}

SHIM_API CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
	return event_node_read(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event_out);
}

SHIM_API CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
	return event_node_read(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event_out);
}

/* What tern allows an allocation node to be: pinned device memory of the
 * session's device, readable and writable there. */
SHIM_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
	struct wire_graph_node_get_params_rep rep;
	CUresult res;

	res = node_params_fetch(hNode, CU_GRAPH_NODE_TYPE_MEM_ALLOC, params_out, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	memset(params_out, 0, sizeof(*params_out));
	params_out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	params_out->poolProps.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
	params_out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	params_out->poolProps.location.id = 0;
	params_out->bytesize = rep.width;
	params_out->dptr = rep.dst;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
	struct wire_graph_node_get_params_rep rep;
	CUresult res;

	res = node_params_fetch(hNode, CU_GRAPH_NODE_TYPE_MEM_FREE, dptr_out, &rep);
	if (res == CUDA_SUCCESS)
		*dptr_out = rep.dst;
	return res;
}

/* ---- memcpy, memset and event nodes changed ----------------------------- */

/* Setters on a graph's node (@x NULL) or an executable's copy of it. The
 * executable's are deferred like cuGraphExecKernelNodeSetParams. */
#define NODE_SET_RPC(name, x, req)                                                            \
	({                                                                                    \
		struct wire_##name##_rep rep_;                                                \
		(x) && shim_process()->lazy ? rpc_##name##_defer(req) : rpc_##name(req, &rep_); \
	})

static CUresult node_target(CUgraphExec x, CUgraphNode hNode, uint64_t *exec, uint64_t *graph, uint32_t *index)
{
	if (x && !exec_handle_ok(x))
		return CUDA_ERROR_INVALID_VALUE;
	*exec = (uint64_t)(uintptr_t)x;
	return shim_node_decode(hNode, graph, index) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult memcpy_set(CUgraphExec x, CUgraphNode hNode, const CUDA_MEMCPY3D *p)
{
	struct wire_graph_add_memcpy_node_req add;
	struct wire_graph_memcpy_node_set_params_req req;
	CUresult res = node_target(x, hNode, &req.exec, &req.graph, &req.node);

	if (res == CUDA_SUCCESS)
		res = memcpy_req(p, &add);
	if (res != CUDA_SUCCESS)
		return res;
	req.dst = add.dst;
	req.dst_pitch = add.dst_pitch;
	req.dst_height = add.dst_height;
	req.src = add.src;
	req.src_pitch = add.src_pitch;
	req.src_height = add.src_height;
	req.width = add.width;
	req.height = add.height;
	req.depth = add.depth;
	return NODE_SET_RPC(graph_memcpy_node_set_params, x, &req);
}

SHIM_API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
	return memcpy_set(NULL, hNode, nodeParams);
}

SHIM_API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
						 const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	(void)ctx;      /* the session's one context */
	if (!hGraphExec)
		return CUDA_ERROR_INVALID_VALUE;
	return memcpy_set(hGraphExec, hNode, copyParams);
}

static CUresult memset_set(CUgraphExec x, CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *p)
{
	struct wire_graph_memset_node_set_params_req req;
	CUresult res = node_target(x, hNode, &req.exec, &req.graph, &req.node);

	if (res != CUDA_SUCCESS)
		return res;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	req.dst = p->dst;
	req.pitch = p->pitch;
	req.value = p->value;
	req.element_size = p->elementSize;
	req.width = p->width;
	req.height = p->height;
	return NODE_SET_RPC(graph_memset_node_set_params, x, &req);
}

SHIM_API CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
	return memset_set(NULL, hNode, nodeParams);
}

SHIM_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
						 const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
	(void)ctx;
	if (!hGraphExec)
		return CUDA_ERROR_INVALID_VALUE;
	return memset_set(hGraphExec, hNode, memsetParams);
}

static CUresult event_set(CUgraphExec x, CUgraphNode hNode, CUevent ev, uint32_t wait)
{
	struct wire_graph_event_node_set_event_req req = { .event = (uint64_t)(uintptr_t)ev, .wait = wait };
	CUresult res = node_target(x, hNode, &req.exec, &req.graph, &req.node);

	if (res != CUDA_SUCCESS)
		return res;
	if (!handle_kind_is(req.event, WIRE_HANDLE_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	return NODE_SET_RPC(graph_event_node_set_event, x, &req);
}

SHIM_API CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event)
{
	return event_set(NULL, hNode, event, 0);
}

SHIM_API CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
	return event_set(NULL, hNode, event, 1);
}

SHIM_API CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
	return hGraphExec ? event_set(hGraphExec, hNode, event, 0) : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
	return hGraphExec ? event_set(hGraphExec, hNode, event, 1) : CUDA_ERROR_INVALID_VALUE;
}

/* cuGraphNodeSetParams / cuGraphExecNodeSetParams: the generic form, by
 * type, to the setters that exist (@x NULL: the graph's node). */
static CUresult node_set(CUgraphExec x, CUgraphNode hNode, CUgraphNodeParams *p)
{
	if (!p || p->reserved0[0] || p->reserved0[1] || p->reserved0[2] || p->reserved2)
		return CUDA_ERROR_INVALID_VALUE;
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return x ? exec_kernel_node_set(x, hNode, p->kernel.func, p->kernel.kern, KERNEL_FIELDS(&p->kernel))
			 : kernel_node_set(hNode, p->kernel.func, p->kernel.kern, KERNEL_FIELDS(&p->kernel));
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		if (p->memcpy.flags || p->memcpy.reserved)
			return CUDA_ERROR_INVALID_VALUE;
		return memcpy_set(x, hNode, &p->memcpy.copyParams);
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS set = {
			.dst = p->memset.dst, .pitch = p->memset.pitch, .value = p->memset.value,
			.elementSize = p->memset.elementSize, .width = p->memset.width, .height = p->memset.height,
		};

		return memset_set(x, hNode, &set);
	}
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUDA_HOST_NODE_PARAMS host = { .fn = p->host.fn, .userData = p->host.userData };

		return x ? cuGraphExecHostNodeSetParams(x, hNode, &host) : cuGraphHostNodeSetParams(hNode, &host);
	}
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return event_set(x, hNode, p->eventWait.event, 1);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return event_set(x, hNode, p->eventRecord.event, 0);
	case CU_GRAPH_NODE_TYPE_GRAPH:
		if (x && p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
			return cuGraphExecChildGraphNodeSetParams(x, hNode, p->graph.graph);
		pr_warn("a graph's child graph node cannot be changed through tern");
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		/* Allocations (not changeable), external
		 * semaphores, batch memops, conditionals. */
		pr_warn("changing graph nodes of type %d is not supported by tern", (int)p->type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

SHIM_API CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
	return node_set(NULL, hNode, nodeParams);
}

SHIM_API CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
					   CUgraphNodeParams *nodeParams)
{
	return hGraphExec ? node_set(hGraphExec, hNode, nodeParams) : CUDA_ERROR_INVALID_VALUE;
}

/* ---- nodes of an executable disabled ------------------------------------ */

SHIM_API CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled)
{
	struct wire_graph_exec_node_set_enabled_req req = { .enabled = isEnabled ? 1 : 0 };
	CUresult res;

	if (!hGraphExec)
		return CUDA_ERROR_INVALID_VALUE;
	res = node_target(hGraphExec, hNode, &req.exec, &req.graph, &req.node);
	return res == CUDA_SUCCESS ? NODE_SET_RPC(graph_exec_node_set_enabled, hGraphExec, &req) : res;
}

SHIM_API CUresult cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled)
{
	struct wire_graph_exec_node_get_enabled_req req;
	struct wire_graph_exec_node_get_enabled_rep rep;
	CUresult res;

	if (!hGraphExec || !isEnabled)
		return CUDA_ERROR_INVALID_VALUE;
	res = node_target(hGraphExec, hNode, &req.exec, &req.graph, &req.node);
	if (res == CUDA_SUCCESS)
		res = rpc_graph_exec_node_get_enabled(&req, &rep);
	if (res == CUDA_SUCCESS)
		*isEnabled = rep.enabled;
	return res;
}

/* ---- cuGraphDebugDotPrint ----------------------------------------------- */

/* The driver writes in the worker; the text comes back and is written at
 * the guest's path here. */
SHIM_API CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
{
	struct wire_graph_debug_dot_print_req req = { .graph = (uint64_t)(uintptr_t)hGraph, .flags = flags };
	struct wire_graph_debug_dot_print_rep rep;
	CUresult res;
	FILE *f;

	if (!path || !*path || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_debug_dot_print(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	f = fopen(path, "w");
	if (!f)
		return CUDA_ERROR_OPERATING_SYSTEM;
	if (fwrite(rep.dot.ptr, 1, rep.dot.len, f) != rep.dot.len) {
		fclose(f);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	return fclose(f) ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_SUCCESS;
}

/* ---- an executable's child graph node changed --------------------------- */

SHIM_API CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph)
{
	struct wire_graph_exec_child_node_set_params_req req = { .child = (uint64_t)(uintptr_t)childGraph };
	struct wire_graph_exec_child_node_set_params_rep rep;
	CUresult res;

	if (!hGraphExec || !graph_handle_ok(childGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = node_target(hGraphExec, hNode, &req.exec, &req.graph, &req.node);
	return res == CUDA_SUCCESS ? rpc_graph_exec_child_node_set_params(&req, &rep) : res;
}

/* ---- kernel node attributes (plain data; the worker checks the ids) ----- */

SHIM_API CUresult cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
						CUkernelNodeAttrValue *value_out)
{
	struct wire_graph_kernel_node_get_attribute_req req = { .attr = (uint32_t)attr };
	struct wire_graph_kernel_node_get_attribute_rep rep;
	CUresult res;

	if (!value_out || !shim_node_decode(hNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_kernel_node_get_attribute(&req, &rep);
	if (res == CUDA_SUCCESS && rep.value.len != sizeof(*value_out))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		memcpy(value_out, rep.value.ptr, sizeof(*value_out));
	return res;
}

SHIM_API CUresult cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
						const CUkernelNodeAttrValue *value)
{
	struct wire_graph_kernel_node_set_attribute_req req = {
		.attr = (uint32_t)attr, .value = { (const uint8_t *)value, sizeof(*value) },
	};
	struct wire_graph_kernel_node_set_attribute_rep rep;

	if (!value || !shim_node_decode(hNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	return rpc_graph_kernel_node_set_attribute(&req, &rep);
}

SHIM_API CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
	struct wire_graph_kernel_node_copy_attributes_req req;
	struct wire_graph_kernel_node_copy_attributes_rep rep;

	if (!shim_node_decode(dst, &req.graph, &req.node) || !shim_node_decode(src, &req.src_graph, &req.src_node))
		return CUDA_ERROR_INVALID_VALUE;
	return rpc_graph_kernel_node_copy_attributes(&req, &rep);
}

/* ---- capture into the guest's graph ------------------------------------- */

static CUresult begin_capture_to_graph(uint64_t stream, CUgraph hGraph, const CUgraphNode *deps,
				       const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode mode)
{
	struct wire_stream_begin_capture_to_graph_req req = {
		.stream = stream, .graph = (uint64_t)(uintptr_t)hGraph, .mode = (uint32_t)mode,
	};
	struct wire_stream_begin_capture_to_graph_rep rep;
	uint8_t *buf = NULL;
	CUresult res;

	if (!graph_handle_ok(hGraph) || (unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (!graph_edges_default(edges, n)) {
		pr_warn("cuStreamBeginCaptureToGraph: only default edges are supported");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	res = deps_blob(req.graph, deps, n, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_stream_begin_capture_to_graph(&req, &rep);
	free(buf);
	if (res == CUDA_SUCCESS)
		capture_track(stream);
	return res;
}

SHIM_API CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
					      const CUgraphEdgeData *dependencyData, size_t numDependencies,
					      CUstreamCaptureMode mode)
{
	return begin_capture_to_graph(shim_stream(hStream, false), hGraph, dependencies, dependencyData,
				      numDependencies, mode);
}

SHIM_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
						   const CUgraphNode *dependencies,
						   const CUgraphEdgeData *dependencyData, size_t numDependencies,
						   CUstreamCaptureMode mode)
{
	return begin_capture_to_graph(shim_stream(hStream, true), hGraph, dependencies, dependencyData,
				      numDependencies, mode);
}
