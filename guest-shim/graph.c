/* Graphs, their nodes and executable graphs. Graphs and executables are the
 * worker's virtual handles; a node is its graph plus an index (shim.h,
 * shim_node), so every node call names the graph on the wire. Queries of a
 * graph's shape (nodes, edges, a node's type or neighbours) are answered
 * from two calls that fetch the nodes and the edges.
 *
 * Host nodes name the guest's function by a token (hostfn.c): the worker
 * calls us back over the host-function channel when the graph reaches one.
 * A memcpy node with a host end names that end by a token too, and the
 * worker reads or writes the range over the same channel when the graph
 * reaches the copy. Executable graphs and the node
 * parameters read back and changed are in graph_exec.c. */
#define LOG_PREFIX "shim: "

#include "graph_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

bool graph_handle_ok(CUgraph g)
{
	return handle_kind_is((uint64_t)(uintptr_t)g, WIRE_HANDLE_GRAPH);
}

bool exec_handle_ok(CUgraphExec x)
{
	return handle_kind_is((uint64_t)(uintptr_t)x, WIRE_HANDLE_GRAPH_EXEC);
}

/* A node handle for index @index of @graph; NULL when the worker's serial
 * no longer fits the encoding (2^32 graphs). */
CUresult node_out(uint64_t graph, uint32_t index, CUgraphNode *out)
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
	*buf = malloc(n * WIRE_REC_GRAPH_DEP_BYTES);
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
		wire_rec_graph_dep_put(*buf, (uint32_t)i, &(struct wire_rec_graph_dep){ .node = k });
	}
	*out = (struct wire_blob){ *buf, (uint32_t)(n * WIRE_REC_GRAPH_DEP_BYTES) };
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
	pthread_mutex_lock(&p->cache.lock);
	b->next = p->cache.cond_bodies;
	p->cache.cond_bodies = b;
	pthread_mutex_unlock(&p->cache.lock);
}

/* @graph is destroyed: the arrays of its conditional nodes go. Those of
 * nodes inside bodies stay until the process ends (docs/limits.md). */
static void cond_bodies_drop(uint64_t graph)
{
	struct shim_process *p = shim_process();

	pthread_mutex_lock(&p->cache.lock);
	for (struct shim_cond_bodies **b = &p->cache.cond_bodies; *b;) {
		struct shim_cond_bodies *x = *b;

		if (x->graph == graph) {
			*b = x->next;
			free(x->bodies);
			free(x);
		} else {
			b = &x->next;
		}
	}
	pthread_mutex_unlock(&p->cache.lock);
}

/* ---- graphs ------------------------------------------------------------- */

SHIM_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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

CUresult kernel_node_get(CUfunction func, CUkernel kern, const unsigned grid[3], const unsigned block[3],
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
	SHIM_ENTRY();
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return kernel_node_add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->func, NULL,
			       KERNEL_FIELDS(nodeParams));
}

SHIM_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
					  const CUgraphNode *dependencies, size_t numDependencies,
					  const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	SHIM_ENTRY();
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return kernel_node_add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->func,
			       nodeParams->kern, KERNEL_FIELDS(nodeParams));
}

/* A unified end the worker can reach: the arena or a __managed__ variable
 * (managed memory runs on its device copy; a graph's launch is a coherence
 * point), not host memory under unified addressing. */
static bool copy_end_reachable(CUdeviceptr dev)
{
	return rpc_arena_contains(dev, 1) || managed_contains(dev);
}

/* The host end of @p that @end names, as the channel reads or writes it. */
static void host_end_of(const struct graph_node_memcpy *c, struct shim_host_copy *h)
{
	bool src = c->host_end == GRAPH_COPY_HOST_SRC;

	*h = (struct shim_host_copy){
		.end = c->host_end, .base = (uintptr_t)(src ? c->src : c->dst),
		.pitch = src ? c->src_pitch : c->dst_pitch, .layer_rows = src ? c->src_height : c->dst_height,
		.width = c->width, .height = c->height, .depth = c->depth,
	};
}

CUresult memcpy_node_of(const CUDA_MEMCPY3D *p, struct graph_node_memcpy *c)
{
	CUresult res = p ? graph_node_memcpy_from_3d(p, c) : CUDA_ERROR_INVALID_VALUE;
	struct shim_host_copy h;
	uint64_t token;

	if (res == CUDA_ERROR_NOT_SUPPORTED)
		return SHIM_REFUSE("a graph memcpy node with an array end, or between two host ranges");
	if (res != CUDA_SUCCESS)
		return res;
	/* Unified addresses outside device memory are the guest's host memory. */
	if (p->srcMemoryType == CU_MEMORYTYPE_UNIFIED && !copy_end_reachable(c->src))
		c->host_end = GRAPH_COPY_HOST_SRC;
	if (p->dstMemoryType == CU_MEMORYTYPE_UNIFIED && !copy_end_reachable(c->dst)) {
		if (c->host_end)
			return SHIM_REFUSE("a graph memcpy node between two host ranges");
		c->host_end = GRAPH_COPY_HOST_DST;
	}
	/* Managed memory as a host end: its device copy, as for any copy. */
	if ((c->host_end == GRAPH_COPY_HOST_SRC && managed_contains(c->src)) ||
	    (c->host_end == GRAPH_COPY_HOST_DST && managed_contains(c->dst)))
		c->host_end = GRAPH_COPY_HOST_NONE;
	if (!c->host_end)
		return CUDA_SUCCESS;
	host_end_of(c, &h);
	if (!h.base || !h.width || !h.height || !h.depth)
		return CUDA_ERROR_INVALID_VALUE;
	res = hostfn_copy_token(&h, &token);
	if (res != CUDA_SUCCESS)
		return res;
	if (c->host_end == GRAPH_COPY_HOST_SRC)
		c->src = token;
	else
		c->dst = token;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				       size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	SHIM_ENTRY();
	struct graph_node_memcpy c;
	uint8_t *buf = NULL;
	struct wire_blob deps;
	uint64_t graph = (uint64_t)(uintptr_t)hGraph;
	uint32_t node = 0;
	CUresult res;

	(void)ctx;      /* the session's one context */
	if (!phGraphNode || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	res = memcpy_node_of(copyParams, &c);
	if (res == CUDA_SUCCESS)
		res = deps_blob(graph, dependencies, numDependencies, &buf, &deps);
	if (res == CUDA_SUCCESS && c.host_end) {
		struct wire_graph_add_host_copy_node_req req = { .graph = graph, .deps = deps };
		struct wire_graph_add_host_copy_node_rep rep;

		HOST_COPY_REQ(&req, &c);
		res = rpc_graph_add_host_copy_node(&req, &rep);
		node = rep.node;
	} else if (res == CUDA_SUCCESS) {
		struct wire_graph_add_memcpy_node_req req = { .graph = graph, .deps = deps };
		struct wire_graph_add_memcpy_node_rep rep;

		MEMCPY_NODE_REQ(&req, &c);
		res = rpc_graph_add_memcpy_node(&req, &rep);
		node = rep.node;
	}
	free(buf);
	return res == CUDA_SUCCESS ? node_out(graph, node, phGraphNode) : res;
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
	return event_node_add(phGraphNode, hGraph, dependencies, numDependencies, event, 0);
}

SHIM_API CUresult cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					  const CUgraphNode *dependencies, size_t numDependencies, CUevent event)
{
	SHIM_ENTRY();
	return event_node_add(phGraphNode, hGraph, dependencies, numDependencies, event, 1);
}

/* Graph allocations come from the session's arena on its one device. */
static CUresult alloc_props_ok(const CUmemPoolProps *props, const CUmemAccessDesc *access, size_t naccess)
{
	if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props->handleTypes != CU_MEM_HANDLE_TYPE_NONE ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id != 0)
		return SHIM_REFUSE("a graph allocation node of allocation type %d, handle types %#x, at location "
				   "type %d id %d (only pinned memory of the session's device 0)", (int)props->allocType,
				   (unsigned)props->handleTypes, (int)props->location.type, props->location.id);
	if (naccess && !access)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < naccess; i++)
		if (access[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || access[i].location.id != 0)
			return SHIM_REFUSE("a graph allocation node's access for location type %d id %d",
					   (int)access[i].location.type, access[i].location.id);
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
	SHIM_ENTRY();
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return mem_alloc_add(phGraphNode, hGraph, dependencies, numDependencies, &nodeParams->poolProps,
			     nodeParams->accessDescs, nodeParams->accessDescCount, nodeParams->bytesize,
			     &nodeParams->dptr);
}

SHIM_API CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					size_t numDependencies, CUdeviceptr dptr)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	int count;

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
	count = wire_rec_cond_body_count(rep.bodies);
	if (count < 0 || (uint32_t)count != p->size)
		return CUDA_ERROR_UNKNOWN;      /* not what the worker was asked */
	bodies = calloc(p->size, sizeof(*bodies));
	if (!bodies)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t k = 0; k < p->size; k++) {
		struct wire_rec_cond_body r;

		wire_rec_cond_body_get(rep.bodies, k, &r);
		bodies[k] = (CUgraph)(uintptr_t)r.graph;
	}
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
			return SHIM_REFUSE("cuGraphAddNode: a child graph node of ownership %d (only a copy, "
					   "CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)", (int)p->graph.ownership);
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
		return SHIM_REFUSE("cuGraphAddNode: a node of type %d", (int)p->type);
	}
}

/* ---- shape: nodes and edges --------------------------------------------- */

static CUresult node_destroy(CUgraphNode hNode)
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

/* Add or (@remove) remove @n edges with their data (@data NULL: default),
 * all or none. */
static CUresult edges_edit(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
			   const CUgraphEdgeData *data, size_t n, bool remove)
{
	struct wire_graph_edit_edges_data_req req = { .graph = (uint64_t)(uintptr_t)hGraph, .remove = remove };
	struct wire_graph_edit_edges_data_rep rep;
	uint8_t *buf;
	CUresult res;

	if (!graph_handle_ok(hGraph) || (n && (!from || !to)) || n > UINT32_MAX / WIRE_REC_GRAPH_EDGE_DATA_BYTES)
		return CUDA_ERROR_INVALID_VALUE;
	buf = malloc(n ? n * WIRE_REC_GRAPH_EDGE_DATA_BYTES : 1);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < n; i++) {
		struct wire_rec_graph_edge_data r = { 0 };
		uint64_t ga, gb;

		if (!shim_node_decode(from[i], &ga, &r.from) || !shim_node_decode(to[i], &gb, &r.to) ||
		    ga != req.graph || gb != req.graph || (data && !graph_edge_data_put(&data[i], &r))) {
			free(buf);
			return CUDA_ERROR_INVALID_VALUE;
		}
		wire_rec_graph_edge_data_put(buf, (uint32_t)i, &r);
	}
	req.edges = (struct wire_blob){ buf, (uint32_t)(n * WIRE_REC_GRAPH_EDGE_DATA_BYTES) };
	res = rpc_graph_edit_edges_data(&req, &rep);
	free(buf);
	return res;
}

SHIM_API CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				 size_t numDependencies, CUgraphNodeParams *nodeParams)
{
	SHIM_ENTRY();
	return node_add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

SHIM_API CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				    const CUgraphEdgeData *dependencyData, size_t numDependencies,
				    CUgraphNodeParams *nodeParams)
{
	SHIM_ENTRY();
	CUgraphNode *to;
	CUresult res;

	if (!graph_edge_special(dependencyData, numDependencies))
		return node_add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
	/* Edge data that is not default: the node first, then its edges with
	 * their data, in the order given (the order the driver keeps them). */
	if (!phGraphNode || !dependencies || !graph_handle_ok(hGraph))
		return CUDA_ERROR_INVALID_VALUE;
	to = malloc(numDependencies * sizeof(*to));
	if (!to)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = node_add(phGraphNode, hGraph, NULL, 0, nodeParams);
	for (size_t i = 0; res == CUDA_SUCCESS && i < numDependencies; i++)
		to[i] = *phGraphNode;
	if (res == CUDA_SUCCESS) {
		res = edges_edit(hGraph, dependencies, to, dependencyData, numDependencies, false);
		if (res != CUDA_SUCCESS)
			cuGraphDestroyNode(*phGraphNode);       /* as if never added */
	}
	free(to);
	return res;
}

/* The graph's nodes (graph_node records: index, type) or edges
 * (graph_edge_data: from, to and the edge's data), decoded out of the
 * reply as pairs: *@out is malloc'ed, 2 * *@n entries; with @data (edges
 * only) *@data too, malloc'ed, the edges' data. */
static CUresult pairs_fetch(uint64_t graph, bool edges, uint32_t **out, CUgraphEdgeData **data, size_t *n)
{
	struct wire_blob b;
	CUresult res;
	int count;

	*out = NULL;
	*n = 0;
	if (data)
		*data = NULL;
	if (!handle_kind_is(graph, WIRE_HANDLE_GRAPH))
		return CUDA_ERROR_INVALID_VALUE;
	if (edges) {
		struct wire_graph_get_edges_data_req req = { .graph = graph };
		struct wire_graph_get_edges_data_rep rep;

		res = rpc_graph_get_edges_data(&req, &rep);
		b = rep.edges;
	} else {
		struct wire_graph_get_nodes_req req = { .graph = graph };
		struct wire_graph_get_nodes_rep rep;

		res = rpc_graph_get_nodes(&req, &rep);
		b = rep.nodes;
	}
	if (res != CUDA_SUCCESS)
		return res;
	count = edges ? wire_rec_graph_edge_data_count(b) : wire_rec_graph_node_count(b);
	if (count < 0)
		return CUDA_ERROR_UNKNOWN;
	*out = malloc(count ? 2 * (size_t)count * sizeof(**out) : 1);
	if (data)
		*data = calloc(count ? (size_t)count : 1, sizeof(**data));
	if (!*out || (data && !*data)) {
		free(*out);
		*out = NULL;
		if (data) {
			free(*data);
			*data = NULL;
		}
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (uint32_t i = 0; i < (uint32_t)count; i++) {
		if (edges) {
			struct wire_rec_graph_edge_data r;

			if (wire_rec_graph_edge_data_get(b, i, &r)) {
				free(*out);
				*out = NULL;
				if (data) {
					free(*data);
					*data = NULL;
				}
				return CUDA_ERROR_UNKNOWN;
			}
			(*out)[2 * i] = r.from;
			(*out)[2 * i + 1] = r.to;
			if (data)
				(*data)[i] = (CUgraphEdgeData){ .from_port = r.from_port, .to_port = r.to_port,
								.type = r.type };
		} else {
			struct wire_rec_graph_node r;

			wire_rec_graph_node_get(b, i, &r);
			(*out)[2 * i] = r.index;
			(*out)[2 * i + 1] = r.type;
		}
	}
	*n = (size_t)count;
	return CUDA_SUCCESS;
}

static uint32_t pair_a(const uint32_t *pairs, size_t i)
{
	return pairs[2 * i];
}

static uint32_t pair_b(const uint32_t *pairs, size_t i)
{
	return pairs[2 * i + 1];
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
	SHIM_ENTRY();
	uint64_t graph = (uint64_t)(uintptr_t)hGraph;
	uint32_t *pairs;
	uint32_t *idx;
	size_t n;
	CUresult res;

	if (!numNodes)
		return CUDA_ERROR_INVALID_VALUE;
	res = pairs_fetch(graph, false, &pairs, NULL, &n);
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
	SHIM_ENTRY();
	uint64_t graph = (uint64_t)(uintptr_t)hGraph;
	uint32_t *nodes, *edges = NULL;
	size_t n, e, roots = 0;
	uint32_t *idx = NULL;
	CUresult res;

	if (!numRootNodes)
		return CUDA_ERROR_INVALID_VALUE;
	res = pairs_fetch(graph, false, &nodes, NULL, &n);
	if (res == CUDA_SUCCESS)
		res = pairs_fetch(graph, true, &edges, NULL, &e);
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
	CUgraphEdgeData *got;
	uint32_t *pairs;
	size_t n;
	CUresult res;

	if (!num || (!from) != (!to))
		return CUDA_ERROR_INVALID_VALUE;
	res = pairs_fetch(graph, true, &pairs, &got, &n);
	if (res != CUDA_SUCCESS)
		return res;
	if (from) {
		for (size_t i = 0; i < *num && res == CUDA_SUCCESS; i++) {
			from[i] = to[i] = NULL;
			if (data)
				data[i] = i < n ? got[i] : (CUgraphEdgeData){ 0 };
			else if (i < n && graph_edge_special(&got[i], 1))
				res = CUDA_ERROR_LOSSY_QUERY;   /* the data has nowhere to go */
			if (i < n && res == CUDA_SUCCESS) {
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
	free(got);
	return res;
}

SHIM_API CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges)
{
	SHIM_ENTRY();
	return edges_get(hGraph, from, to, NULL, numEdges);
}

SHIM_API CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
				     size_t *numEdges)
{
	SHIM_ENTRY();
	if (edgeData && !from)
		return CUDA_ERROR_INVALID_VALUE;
	return edges_get(hGraph, from, to, edgeData, numEdges);
}

SHIM_API CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
	SHIM_ENTRY();
	uint64_t graph;
	uint32_t index;
	uint32_t *pairs;
	size_t n;
	CUresult res;

	if (!type || !shim_node_decode(hNode, &graph, &index))
		return CUDA_ERROR_INVALID_VALUE;
	res = pairs_fetch(graph, false, &pairs, NULL, &n);
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

/* A node's dependencies (@incoming) or dependents, with the edges' data
 * into @data; without @data, CUDA_ERROR_LOSSY_QUERY when an edge handed
 * out has data that is not default (the driver's answer). */
static CUresult neighbours(CUgraphNode hNode, bool incoming, CUgraphNode *out, CUgraphEdgeData *data, size_t *num)
{
	uint64_t graph;
	uint32_t index, *idx = NULL;
	CUgraphEdgeData *got, *kept = NULL;
	uint32_t *pairs;
	size_t n, count = 0;
	CUresult res;

	if (!num || !shim_node_decode(hNode, &graph, &index) || (data && !out))
		return CUDA_ERROR_INVALID_VALUE;
	res = pairs_fetch(graph, true, &pairs, &got, &n);
	if (res != CUDA_SUCCESS)
		return res;
	idx = malloc((n ? n : 1) * sizeof(*idx));
	kept = malloc((n ? n : 1) * sizeof(*kept));
	if (!idx || !kept) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if ((incoming ? pair_b(pairs, i) : pair_a(pairs, i)) != index)
			continue;
		kept[count] = got[i];
		idx[count++] = incoming ? pair_a(pairs, i) : pair_b(pairs, i);
	}
	for (size_t i = 0; out && i < *num && i < count && res == CUDA_SUCCESS; i++)
		if (!data && graph_edge_special(&kept[i], 1))
			res = CUDA_ERROR_LOSSY_QUERY;
	for (size_t i = 0; data && i < *num; i++)
		data[i] = i < count ? kept[i] : (CUgraphEdgeData){ 0 };
	if (res == CUDA_SUCCESS)
		res = nodes_give(graph, idx, count, out, num);
out:
	free(idx);
	free(kept);
	free(got);
	free(pairs);
	return res;
}

SHIM_API CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies, size_t *numDependencies)
{
	SHIM_ENTRY();
	return neighbours(hNode, true, dependencies, NULL, numDependencies);
}

SHIM_API CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies,
						CUgraphEdgeData *edgeData, size_t *numDependencies)
{
	SHIM_ENTRY();
	return neighbours(hNode, true, dependencies, edgeData, numDependencies);
}

SHIM_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
					       size_t *numDependentNodes)
{
	SHIM_ENTRY();
	return neighbours(hNode, false, dependentNodes, NULL, numDependentNodes);
}

SHIM_API CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *dependentNodes,
						  CUgraphEdgeData *edgeData, size_t *numDependentNodes)
{
	SHIM_ENTRY();
	return neighbours(hNode, false, dependentNodes, edgeData, numDependentNodes);
}

SHIM_API CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
					 size_t numDependencies)
{
	SHIM_ENTRY();
	return edges_edit(hGraph, from, to, NULL, numDependencies, false);
}

SHIM_API CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
					    const CUgraphEdgeData *edgeData, size_t numDependencies)
{
	SHIM_ENTRY();
	return edges_edit(hGraph, from, to, edgeData, numDependencies, false);
}

SHIM_API CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
					    size_t numDependencies)
{
	SHIM_ENTRY();
	return edges_edit(hGraph, from, to, NULL, numDependencies, true);
}

SHIM_API CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
					       const CUgraphEdgeData *edgeData, size_t numDependencies)
{
	SHIM_ENTRY();
	return edges_edit(hGraph, from, to, edgeData, numDependencies, true);
}

SHIM_API CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
	SHIM_ENTRY();
	return node_destroy(hNode);
}

CUresult kernel_node_set(CUgraphNode hNode, CUfunction func, CUkernel kern, const unsigned grid[3],
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
	SHIM_ENTRY();
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return kernel_node_set(hNode, nodeParams->func, NULL, KERNEL_FIELDS(nodeParams));
}

SHIM_API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	SHIM_ENTRY();
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return kernel_node_set(hNode, nodeParams->func, nodeParams->kern, KERNEL_FIELDS(nodeParams));
}


/* ---- capture into the guest's graph ------------------------------------- */

static CUresult begin_capture_to_graph(uint64_t stream, CUgraph hGraph, const CUgraphNode *deps,
				       const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode mode)
{
	struct wire_stream_begin_capture_to_graph_data_req req = {
		.stream = stream, .graph = (uint64_t)(uintptr_t)hGraph, .mode = (uint32_t)mode,
	};
	struct wire_stream_begin_capture_to_graph_data_rep rep;
	uint8_t *buf;
	CUresult res;

	if (!graph_handle_ok(hGraph) || (unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	res = capture_deps_blob(deps, edges, n, &req.graph, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_stream_begin_capture_to_graph_data(&req, &rep);
	free(buf);
	if (res == CUDA_SUCCESS)
		capture_track(stream, true);
	return res;
}

SHIM_API CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
					      const CUgraphEdgeData *dependencyData, size_t numDependencies,
					      CUstreamCaptureMode mode)
{
	SHIM_ENTRY();
	return begin_capture_to_graph(shim_stream(hStream, false), hGraph, dependencies, dependencyData,
				      numDependencies, mode);
}

SHIM_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
						   const CUgraphNode *dependencies,
						   const CUgraphEdgeData *dependencyData, size_t numDependencies,
						   CUstreamCaptureMode mode)
{
	SHIM_ENTRY();
	return begin_capture_to_graph(shim_stream(hStream, true), hGraph, dependencies, dependencyData,
				      numDependencies, mode);
}
