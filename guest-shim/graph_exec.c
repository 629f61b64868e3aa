/* Executable graphs: instantiate, update, launch, upload; their nodes'
 * parameters read back and changed (memcpy, memset, event, kernel and
 * child graph nodes), nodes enabled and disabled, kernel node attributes,
 * cuGraphDebugDotPrint. graph.c has the overview.
 */
#define LOG_PREFIX "shim: "

#include "graph_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

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
	SHIM_ENTRY();
	return instantiate_logged(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

SHIM_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
					char *logBuffer, size_t bufferSize)
{
	SHIM_ENTRY();
	return instantiate_logged(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

SHIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
	return instantiate_params(phGraphExec, hGraph, instantiateParams, false);
}

SHIM_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
						    CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	SHIM_ENTRY();
	return instantiate_params(phGraphExec, hGraph, instantiateParams, true);
}

SHIM_API CUresult cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	if (shim_process()->batching.lazy)
		return rpc_graph_launch_defer(&req);
	return rpc_graph_launch(&req, &rep);
}

SHIM_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	SHIM_ENTRY();
	return graph_launch(hGraphExec, shim_stream(hStream, false));
}

SHIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	SHIM_ENTRY();
	return graph_launch(hGraphExec, shim_stream(hStream, true));
}

static CUresult graph_upload(CUgraphExec x, uint64_t stream)
{
	struct wire_graph_upload_req req = { .exec = (uint64_t)(uintptr_t)x, .stream = stream };
	struct wire_graph_upload_rep rep;

	if (!exec_handle_ok(x))
		return CUDA_ERROR_INVALID_VALUE;
	if (shim_process()->batching.lazy)
		return rpc_graph_upload_defer(&req);
	return rpc_graph_upload(&req, &rep);
}

SHIM_API CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
	SHIM_ENTRY();
	return graph_upload(hGraphExec, shim_stream(hStream, false));
}

SHIM_API CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	if (shim_process()->batching.lazy)
		res = rpc_graph_exec_kernel_node_set_params_defer(&req);
	else
		res = rpc_graph_exec_kernel_node_set_params(&req, &rep);
	free(k.args);
	return res;
}

SHIM_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
						 const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	SHIM_ENTRY();
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	return exec_kernel_node_set(hGraphExec, hNode, nodeParams->func, NULL, KERNEL_FIELDS(nodeParams));
}

SHIM_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
						    const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	SHIM_ENTRY();
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

void graph_exec_fork_lock(void)
{
	pthread_mutex_lock(&kargs_lock);
}

void graph_exec_fork_unlock(void)
{
	pthread_mutex_unlock(&kargs_lock);
}

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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
	return nodeParams ? kernel_node_read(hNode, nodeParams) : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
	SHIM_ENTRY();
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
	/* A host copy: the host end's address is our token for its range. */
	if (rep.object == GRAPH_COPY_HOST_SRC || rep.object == GRAPH_COPY_HOST_DST) {
		bool src = rep.object == GRAPH_COPY_HOST_SRC;
		struct shim_host_copy h;

		if (!hostfn_copy_lookup(src ? rep.src : rep.dst, &h))
			return CUDA_ERROR_INVALID_VALUE;
		if (src) {
			nodeParams->srcMemoryType = CU_MEMORYTYPE_HOST;
			nodeParams->srcDevice = 0;
			nodeParams->srcHost = (const void *)h.base;
			nodeParams->srcPitch = h.pitch;
			nodeParams->srcHeight = h.layer_rows;
		} else {
			nodeParams->dstMemoryType = CU_MEMORYTYPE_HOST;
			nodeParams->dstDevice = 0;
			nodeParams->dstHost = (void *)h.base;
			nodeParams->dstPitch = h.pitch;
			nodeParams->dstHeight = h.layer_rows;
		}
	}
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
	return event_node_read(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event_out);
}

SHIM_API CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
	SHIM_ENTRY();
	return event_node_read(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event_out);
}

/* What tern allows an allocation node to be: pinned device memory of the
 * session's device, readable and writable there. */
SHIM_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
		(x) && shim_process()->batching.lazy ? rpc_##name##_defer(req) : rpc_##name(req, &rep_); \
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
	struct graph_node_memcpy c;
	struct wire_graph_memcpy_node_set_params_req req;
	CUresult res = node_target(x, hNode, &req.exec, &req.graph, &req.node);

	if (res == CUDA_SUCCESS)
		res = memcpy_node_of(p, &c);
	if (res != CUDA_SUCCESS)
		return res;
	if (c.host_end) {
		struct wire_graph_host_copy_node_set_params_req h = {
			.exec = req.exec, .graph = req.graph, .node = req.node,
		};

		HOST_COPY_REQ(&h, &c);
		return NODE_SET_RPC(graph_host_copy_node_set_params, x, &h);
	}
	MEMCPY_NODE_REQ(&req, &c);
	return NODE_SET_RPC(graph_memcpy_node_set_params, x, &req);
}

SHIM_API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
	SHIM_ENTRY();
	return memcpy_set(NULL, hNode, nodeParams);
}

SHIM_API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
						 const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
	return memset_set(NULL, hNode, nodeParams);
}

SHIM_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
						 const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
	return event_set(NULL, hNode, event, 0);
}

SHIM_API CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
	SHIM_ENTRY();
	return event_set(NULL, hNode, event, 1);
}

SHIM_API CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
	SHIM_ENTRY();
	return hGraphExec ? event_set(hGraphExec, hNode, event, 0) : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
	SHIM_ENTRY();
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
		return SHIM_REFUSE("cuGraph%sNodeSetParams: a child graph node%s", x ? "Exec" : "",
				   x ? " of ownership other than a copy" : " of a graph (only an executable's)");
	default:
		/* Allocations (not changeable), external
		 * semaphores, batch memops, conditionals. */
		return SHIM_REFUSE("cuGraph%sNodeSetParams: a node of type %d", x ? "Exec" : "", (int)p->type);
	}
}

SHIM_API CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
	SHIM_ENTRY();
	return node_set(NULL, hNode, nodeParams);
}

SHIM_API CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
					   CUgraphNodeParams *nodeParams)
{
	SHIM_ENTRY();
	return hGraphExec ? node_set(hGraphExec, hNode, nodeParams) : CUDA_ERROR_INVALID_VALUE;
}

/* ---- nodes of an executable disabled ------------------------------------ */

SHIM_API CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled)
{
	SHIM_ENTRY();
	struct wire_graph_exec_node_set_enabled_req req = { .enabled = isEnabled ? 1 : 0 };
	CUresult res;

	if (!hGraphExec)
		return CUDA_ERROR_INVALID_VALUE;
	res = node_target(hGraphExec, hNode, &req.exec, &req.graph, &req.node);
	return res == CUDA_SUCCESS ? NODE_SET_RPC(graph_exec_node_set_enabled, hGraphExec, &req) : res;
}

SHIM_API CUresult cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled)
{
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
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
	SHIM_ENTRY();
	struct wire_graph_kernel_node_copy_attributes_req req;
	struct wire_graph_kernel_node_copy_attributes_rep rep;

	if (!shim_node_decode(dst, &req.graph, &req.node) || !shim_node_decode(src, &req.src_graph, &req.src_node))
		return CUDA_ERROR_INVALID_VALUE;
	return rpc_graph_kernel_node_copy_attributes(&req, &rep);
}
