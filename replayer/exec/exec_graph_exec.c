/* Executable graphs: instantiate, update, launch, upload; their nodes'
 * parameters read back and changed, nodes enabled and disabled; kernel
 * node attributes; cuGraphDebugDotPrint. An executable keeps its own
 * description and backend graph (exec_graph.c has the overview).
 */
#define LOG_PREFIX "exec: "
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec_graph_internal.h"
#include "log.h"
#include "le.h"

/* ---- executable graphs -------------------------------------------------- */

#define INSTANTIATE_FLAGS_KNOWN (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | \
				 CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |              \
				 CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)

/* Instantiate @source (whose nodes @d describes): the executable and its info. */
CUresult exec_make(struct exec *ex, CUgraph source, struct graph_desc *d, uint64_t flags,
		   CUstream upload, CUgraphExec *out, uint32_t *result, uint32_t *error_node)
{
	CUDA_GRAPH_INSTANTIATE_PARAMS p = { .flags = flags, .hUploadStream = upload };
	CUresult res = ex->be->cuGraphInstantiateWithParams(out, source, &p);

	*result = p.result_out;
	*error_node = GRAPH_NODE_NONE;
	if (res != CUDA_SUCCESS && p.hErrNode_out)
		for (uint32_t i = 0; i < d->count; i++)
			if (d->nodes[i].real == (void *)p.hErrNode_out)
				*error_node = i;
	if (res != CUDA_SUCCESS && *result == CUDA_GRAPH_INSTANTIATE_SUCCESS)
		*result = CUDA_GRAPH_INSTANTIATE_ERROR;
	return res;
}

static CUresult graph_instantiate(struct exec *ex, const struct wire_graph_instantiate_req *req,
				   struct wire_graph_instantiate_rep *rep)
{
	struct exec_graph_exec *x;
	CUgraph real, source = NULL;
	struct exec_graph *g = graph_get(ex, req->graph, &real);
	CUgraphExec exec;
	CUstream upload = NULL;
	CUresult res;

	rep->error_node = GRAPH_NODE_NONE;
	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (req->flags & ~(uint64_t)INSTANTIATE_FLAGS_KNOWN) {
		/* Device launch would hand the guest a device-side handle no
		 * restore can keep. */
		return req->flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH ? CUDA_ERROR_NOT_SUPPORTED
									      : CUDA_ERROR_INVALID_VALUE;
	}
	if (req->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
		res = exec_stream_real(ex, req->stream, &upload);
		if (res != CUDA_SUCCESS)
			return res;
	}
	if (g->capturing)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	/* One executable at a time of a graph with memory or conditional
	 * nodes, as the driver has it (kept here across restores, which
	 * give the executable a graph of its own). */
	if (g->execs && (desc_has_mem_nodes(g->d) || graph_desc_has_cond(g->d)))
		return CUDA_ERROR_INVALID_VALUE;
	if (g->parent)          /* a body runs in its node only: the H200's answer */
		return CUDA_ERROR_NOT_SUPPORTED;
	x = calloc(1, sizeof(*x));
	if (!x || graph_desc_copy(&x->d, g->d)) {
		free(x);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	x->origin = req->graph;
	x->flags = req->flags;
	res = CUDA_SUCCESS;
	if (graph_desc_has_cond(g->d)) {
		/* Cannot be cloned: instantiated from the guest's graph, whose
		 * nodes the executable names until they go. */
		x->shared = true;
		for (uint32_t i = 0; i < g->d->count; i++)
			x->d.nodes[i].real = g->d->nodes[i].real;
	} else {
		/* Its own copy of the graph: the guest may change or destroy its
		 * graph while the executable lives. */
		res = ex->be->cuGraphClone(&source, real);
		if (res == CUDA_SUCCESS)
			res = nodes_find_in_clone(ex, g->d, &x->d, source);
	}
	if (res == CUDA_SUCCESS) {
		res = exec_make(ex, x->shared ? real : source, &x->d, req->flags, upload, &exec, &rep->result,
				&rep->error_node);
		if (res != CUDA_SUCCESS && rep->error_node != GRAPH_NODE_NONE &&
		    !graph_desc_node_live(g->d, rep->error_node))
			rep->error_node = GRAPH_NODE_NONE;
	}
	if (res == CUDA_SUCCESS) {
		x->source = source;
		if (handle_table_add(ex->handles, HANDLE_GRAPH_EXEC, exec, ex->dev.primary_ctx, x, &rep->exec)) {
			ex->be->cuGraphExecDestroy(exec);
			res = CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	if (res != CUDA_SUCCESS) {
		if (source)
			ex->be->cuGraphDestroy(source);
		exec_info_release(ex, x, false);
		return res;
	}
	g->execs++;
	desc_gallocs(ex, &x->d, +1);
	journal_exec(ex, rep->exec, x);
	return CUDA_SUCCESS;
}

CUresult exec_graph_instantiate(struct exec *ex, const struct wire_graph_instantiate_req *req,
				struct wire_graph_instantiate_rep *rep)
{
	rep->status = graph_instantiate(ex, req, rep);
	return CUDA_SUCCESS;
}

CUresult exec_graph_exec_destroy(struct exec *ex, const struct wire_graph_exec_destroy_req *req,
				 struct wire_graph_exec_destroy_rep *rep)
{
	CUgraphExec real;
	struct exec_graph_exec *x = graph_exec_get(ex, req->exec, &real);
	struct exec_graph *g;
	CUresult res;

	if (!x)
		return CUDA_ERROR_INVALID_HANDLE;
	res = ex->be->cuGraphExecDestroy(real);
	if (res != CUDA_SUCCESS)
		return res;
	if (x->source)
		ex->be->cuGraphDestroy(x->source);
	g = graph_get(ex, x->origin, NULL);
	if (g && g->execs)
		g->execs--;
	exec_object_remove(ex, req->exec);
	exec_info_release(ex, x, true);
	return CUDA_SUCCESS;
}

CUresult exec_graph_exec_get_flags(struct exec *ex, const struct wire_graph_exec_get_flags_req *req,
				   struct wire_graph_exec_get_flags_rep *rep)
{
	struct exec_graph_exec *x = graph_exec_get(ex, req->exec, NULL);

	if (!x)
		return CUDA_ERROR_INVALID_HANDLE;
	rep->flags = x->flags;
	return CUDA_SUCCESS;
}

CUresult exec_graph_launch(struct exec *ex, const struct wire_graph_launch_req *req,
			   struct wire_graph_launch_rep *rep)
{
	CUgraphExec real;
	CUstream s;
	CUresult res;

	if (!graph_exec_get(ex, req->exec, &real))
		return CUDA_ERROR_INVALID_HANDLE;
	res = exec_stream_real(ex, req->stream, &s);
	return res == CUDA_SUCCESS ? ex->be->cuGraphLaunch(real, s) : res;
}

CUresult exec_graph_upload(struct exec *ex, const struct wire_graph_upload_req *req,
			   struct wire_graph_upload_rep *rep)
{
	CUgraphExec real;
	CUstream s;
	CUresult res;

	if (!graph_exec_get(ex, req->exec, &real))
		return CUDA_ERROR_INVALID_HANDLE;
	res = exec_stream_real(ex, req->stream, &s);
	return res == CUDA_SUCCESS ? ex->be->cuGraphUpload(real, s) : res;
}

static CUresult graph_exec_update(struct exec *ex, const struct wire_graph_exec_update_req *req,
				   struct wire_graph_exec_update_rep *rep)
{
	CUgraphExecUpdateResultInfo info = { 0 };
	struct graph_desc d;
	CUgraphExec real;
	struct exec_graph_exec *x = graph_exec_get(ex, req->exec, &real);
	CUgraph greal;
	struct exec_graph *g = graph_get(ex, req->graph, &greal);
	CUresult res;

	rep->error_node = rep->error_from = GRAPH_NODE_NONE;
	if (!x || !g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (g->capturing)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	/* tern does not follow conditional bodies and handles through an
	 * update: refused as the driver refuses what it cannot update. */
	if (g->parent || graph_desc_has_cond(g->d) || graph_desc_has_cond(&x->d)) {
		rep->result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
		return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
	}
	if (graph_desc_copy(&d, &x->d))
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = ex->be->cuGraphExecUpdate(real, greal, &info);
	rep->result = info.result;
	for (uint32_t i = 0; i < g->d->count; i++) {
		if (info.errorNode && g->d->nodes[i].real == (void *)info.errorNode)
			rep->error_node = i;
		if (info.errorFromNode && g->d->nodes[i].real == (void *)info.errorFromNode)
			rep->error_from = i;
	}
	if (res != CUDA_SUCCESS) {
		graph_desc_release(&d);
		return res;
	}
	/* The executable keeps its nodes (and their names); each takes the
	 * parameters of the node the driver paired it with. */
	{
		uint32_t *pair = malloc((d.count + 1) * sizeof(uint32_t)), bad;
		int ret = pair ? graph_desc_pair(&x->d, g->d, pair, &bad) : -ENOMEM;

		for (uint32_t i = 0; !ret && i < d.count; i++)
			if (pair[i] != GRAPH_NODE_NONE)
				ret = graph_desc_node_params_set(&d, i, &g->d->nodes[pair[i]]);
		free(pair);
		if (ret) {
			/* The driver took an update this description cannot follow:
			 * a restore would bring back the old parameters. */
			pr_err("executable graph 0x%llx: update not recorded (%s); snapshots refused",
			       (unsigned long long)req->exec, strerror(-ret));
			ex->journal_broken = true;
			graph_desc_release(&d);
			return CUDA_SUCCESS;
		}
	}
	/* The copy names no backend nodes; the executable's are the same. */
	for (uint32_t i = 0; i < d.count; i++)
		d.nodes[i].real = x->d.nodes[i].real;
	desc_gallocs(ex, &d, +1);
	desc_gallocs(ex, &x->d, -1);
	graph_desc_release(&x->d);
	x->d = d;
	journal_exec(ex, req->exec, x);
	return CUDA_SUCCESS;
}

CUresult exec_graph_exec_update(struct exec *ex, const struct wire_graph_exec_update_req *req,
				struct wire_graph_exec_update_rep *rep)
{
	rep->status = graph_exec_update(ex, req, rep);
	return CUDA_SUCCESS;
}

CUresult exec_graph_exec_kernel_node_set_params(struct exec *ex,
						const struct wire_graph_exec_kernel_node_set_params_req *req,
						struct wire_graph_exec_kernel_node_set_params_rep *rep)
{
	struct graph_node_kernel k;
	CUDA_KERNEL_NODE_PARAMS p;
	struct graph_node *n;
	CUgraphExec real;
	struct exec_graph_exec *x = graph_exec_get(ex, req->exec, &real);
	CUresult res;

	if (!x)
		return CUDA_ERROR_INVALID_HANDLE;
	/* The node is named in the graph the executable came from. */
	n = req->graph == x->origin ? kernel_node_at(&x->d, req->node) : NULL;
	if (!n || !n->real)
		return CUDA_ERROR_INVALID_VALUE;
	res = kernel_node_prepare(ex, KERNEL_REQ(req), &k, &p, &(struct cond_chain){ { &x->d }, 1 });
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphExecKernelNodeSetParams(real, n->real, &p);
	if (res != CUDA_SUCCESS) {
		free(k.args);
		return res;
	}
	kernel_node_replace(n, &k);
	journal_exec(ex, req->exec, x);
	return CUDA_SUCCESS;
}

CUresult exec_graph_exec_host_node_set_params(struct exec *ex,
					      const struct wire_graph_exec_host_node_set_params_req *req,
					      struct wire_graph_exec_host_node_set_params_rep *rep)
{
	CUDA_HOST_NODE_PARAMS p;
	struct graph_node *n;
	CUgraphExec real;
	struct exec_graph_exec *x = graph_exec_get(ex, req->exec, &real);
	CUresult res;

	(void)rep;
	if (!x)
		return CUDA_ERROR_INVALID_HANDLE;
	/* The node is named in the graph the executable came from. */
	n = req->graph == x->origin ? node_at(&x->d, req->node, CU_GRAPH_NODE_TYPE_HOST) : NULL;
	if (!n || !n->real)     /* gone with the graph it shared */
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_hostfn_params(ex, req->token, &p);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphExecHostNodeSetParams(real, n->real, &p);
	if (res != CUDA_SUCCESS)
		return res;
	n->host = req->token;
	journal_exec(ex, req->exec, x);
	return CUDA_SUCCESS;
}

/* ---- node parameters read back and changed ------------------------------ */

CUresult exec_graph_node_get_params(struct exec *ex, const struct wire_graph_node_get_params_req *req,
				    struct wire_graph_node_get_params_rep *rep)
{
	CUresult res;
	struct exec_graph *g = graph_get_synced(ex, req->graph, &res);
	const struct graph_node *n;

	if (!g)
		return res;
	if (!graph_desc_node_live(g->d, req->node))
		return CUDA_ERROR_INVALID_VALUE;
	n = &g->d->nodes[req->node];
	rep->type = n->type;
	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		rep->object = n->kernel.function;
		rep->grid_x = n->kernel.grid[0];
		rep->grid_y = n->kernel.grid[1];
		rep->grid_z = n->kernel.grid[2];
		rep->block_x = n->kernel.block[0];
		rep->block_y = n->kernel.block[1];
		rep->block_z = n->kernel.block[2];
		rep->shared_bytes = n->kernel.shared_bytes;
		rep->args = (struct wire_blob){ n->kernel.args, n->kernel.args_len };
		break;
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		rep->object = n->copy.host_end;         /* a host end's address is its token */
		rep->dst = n->copy.dst;
		rep->dst_pitch = n->copy.dst_pitch;
		rep->dst_height = n->copy.dst_height;
		rep->src = n->copy.src;
		rep->src_pitch = n->copy.src_pitch;
		rep->src_height = n->copy.src_height;
		rep->width = n->copy.width;
		rep->height = n->copy.height;
		rep->depth = n->copy.depth;
		break;
	case CU_GRAPH_NODE_TYPE_MEMSET:
		rep->dst = n->set.dst;
		rep->dst_pitch = n->set.pitch;
		rep->width = n->set.width;
		rep->height = n->set.height;
		rep->value = n->set.value;
		rep->element_size = n->set.element_size;
		break;
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		rep->object = n->event;
		break;
	case CU_GRAPH_NODE_TYPE_HOST:
		rep->object = n->host;
		break;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
		rep->dst = n->mem.address;
		rep->width = n->mem.bytes;
		break;
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		rep->dst = n->mem.address;
		break;
	default:                /* empty, child graph: the type only */
		break;
	}
	return CUDA_SUCCESS;
}

/* The node a setter names: node @index of @graph when @exec is 0, else the
 * executable's copy of it (named in the graph it was instantiated from).
 * *@x is the executable (NULL for a graph), *@xreal its backend handle. */
struct node_target {
	struct exec_graph *g;
	struct exec_graph_exec *x;
	CUgraphExec xreal;
	struct graph_node *n;
};

static CUresult node_target(struct exec *ex, uint64_t exec, uint64_t graph, uint32_t index,
			    CUgraphNodeType type, struct node_target *t)
{
	memset(t, 0, sizeof(*t));
	if (exec) {
		t->x = graph_exec_get(ex, exec, &t->xreal);
		if (!t->x)
			return CUDA_ERROR_INVALID_HANDLE;
		t->n = graph == t->x->origin ? node_at(&t->x->d, index, type) : NULL;
		if (t->n && !t->n->real)        /* gone with the graph it shared */
			t->n = NULL;
	} else {
		t->g = graph_get(ex, graph, NULL);
		if (!t->g)
			return CUDA_ERROR_INVALID_HANDLE;
		if (t->g->capturing)
			return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		t->n = node_at(t->g->d, index, type);
	}
	return t->n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static void node_target_journal(struct exec *ex, uint64_t exec, uint64_t graph, struct node_target *t)
{
	if (t->x)
		journal_exec(ex, exec, t->x);
	else
		journal_graph(ex, graph, t->g);
}

CUresult exec_graph_memcpy_node_set_params(struct exec *ex, const struct wire_graph_memcpy_node_set_params_req *req,
					   struct wire_graph_memcpy_node_set_params_rep *rep)
{
	struct graph_node_memcpy c = { req->dst, req->dst_pitch, req->dst_height, req->src, req->src_pitch,
				       req->src_height, req->width, req->height, req->depth,
				       GRAPH_COPY_HOST_NONE };
	struct node_target t;
	CUDA_MEMCPY3D p;
	CUcontext ctx;
	CUresult res = node_target(ex, req->exec, req->graph, req->node, CU_GRAPH_NODE_TYPE_MEMCPY, &t);

	(void)rep;
	/* A host copy keeps its host end (cuda.h: an executable's copy keeps
	 * its memory types; a graph's would change type in the backend). */
	if (res == CUDA_SUCCESS && t.n->copy.host_end) {
		if (!t.x)
			pr_warn("a graph memcpy node cannot change between host and device ends through tern");
		res = t.x ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
	}
	if (res == CUDA_SUCCESS && !memcpy_check(ex, &c, &p))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = ctx_real(ex, &ctx);
	if (res != CUDA_SUCCESS)
		return res;
	res = t.x ? ex->be->cuGraphExecMemcpyNodeSetParams(t.xreal, t.n->real, &p, ctx)
		  : ex->be->cuGraphMemcpyNodeSetParams(t.n->real, &p);
	if (res != CUDA_SUCCESS)
		return res;
	t.n->copy = c;
	node_target_journal(ex, req->exec, req->graph, &t);
	return CUDA_SUCCESS;
}

CUresult exec_graph_memset_node_set_params(struct exec *ex, const struct wire_graph_memset_node_set_params_req *req,
					   struct wire_graph_memset_node_set_params_rep *rep)
{
	struct graph_node_memset s = { req->dst, req->pitch, req->width, req->height, req->value,
				       req->element_size };
	struct node_target t;
	CUDA_MEMSET_NODE_PARAMS p;
	CUcontext ctx;
	CUresult res = node_target(ex, req->exec, req->graph, req->node, CU_GRAPH_NODE_TYPE_MEMSET, &t);

	(void)rep;
	if (res == CUDA_SUCCESS && !memset_check(ex, &s, &p))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = ctx_real(ex, &ctx);
	if (res != CUDA_SUCCESS)
		return res;
	res = t.x ? ex->be->cuGraphExecMemsetNodeSetParams(t.xreal, t.n->real, &p, ctx)
		  : ex->be->cuGraphMemsetNodeSetParams(t.n->real, &p);
	if (res != CUDA_SUCCESS)
		return res;
	t.n->set = s;
	node_target_journal(ex, req->exec, req->graph, &t);
	return CUDA_SUCCESS;
}

CUresult exec_graph_event_node_set_event(struct exec *ex, const struct wire_graph_event_node_set_event_req *req,
					 struct wire_graph_event_node_set_event_rep *rep)
{
	struct handle_entry *ev;
	struct node_target t;
	CUresult res;

	(void)rep;
	if (req->wait > 1)
		return CUDA_ERROR_INVALID_VALUE;
	res = node_target(ex, req->exec, req->graph, req->node,
			  req->wait ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : CU_GRAPH_NODE_TYPE_EVENT_RECORD, &t);
	if (res != CUDA_SUCCESS)
		return res;
	ev = handle_table_get(ex->handles, req->event, HANDLE_EVENT);
	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	if (t.x)
		res = req->wait ? ex->be->cuGraphExecEventWaitNodeSetEvent(t.xreal, t.n->real, ev->real)
				: ex->be->cuGraphExecEventRecordNodeSetEvent(t.xreal, t.n->real, ev->real);
	else
		res = req->wait ? ex->be->cuGraphEventWaitNodeSetEvent(t.n->real, ev->real)
				: ex->be->cuGraphEventRecordNodeSetEvent(t.n->real, ev->real);
	if (res != CUDA_SUCCESS)
		return res;
	t.n->event = req->event;
	node_target_journal(ex, req->exec, req->graph, &t);
	return CUDA_SUCCESS;
}

/* The executable's node that cuGraphNodeSetEnabled may name: kernel,
 * memcpy and memset nodes. */
static CUresult enable_target(struct exec *ex, uint64_t exec, uint64_t graph, uint32_t index,
			      struct node_target *t)
{
	struct exec_graph_exec *x;

	if (!exec)
		return CUDA_ERROR_INVALID_VALUE;
	x = graph_exec_get(ex, exec, NULL);
	if (!x)
		return CUDA_ERROR_INVALID_HANDLE;
	if (graph != x->origin || !graph_desc_node_live(&x->d, index))
		return CUDA_ERROR_INVALID_VALUE;
	switch (x->d.nodes[index].type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
	case CU_GRAPH_NODE_TYPE_MEMCPY:
	case CU_GRAPH_NODE_TYPE_MEMSET:
		return node_target(ex, exec, graph, index, x->d.nodes[index].type, t);
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

CUresult exec_graph_exec_node_set_enabled(struct exec *ex, const struct wire_graph_exec_node_set_enabled_req *req,
					  struct wire_graph_exec_node_set_enabled_rep *rep)
{
	struct node_target t;
	CUresult res = enable_target(ex, req->exec, req->graph, req->node, &t);

	(void)rep;
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphNodeSetEnabled(t.xreal, t.n->real, req->enabled ? 1 : 0);
	if (res != CUDA_SUCCESS)
		return res;
	t.n->disabled = !req->enabled;
	journal_exec(ex, req->exec, t.x);
	return CUDA_SUCCESS;
}

CUresult exec_graph_exec_node_get_enabled(struct exec *ex, const struct wire_graph_exec_node_get_enabled_req *req,
					  struct wire_graph_exec_node_get_enabled_rep *rep)
{
	struct node_target t;
	CUresult res = enable_target(ex, req->exec, req->graph, req->node, &t);

	if (res == CUDA_SUCCESS)
		rep->enabled = !t.n->disabled;
	return res;
}

/* A restored executable's nodes disabled as they were. */
CUresult exec_enabled_restore(struct exec *ex, CUgraphExec exec, const struct graph_desc *d)
{
	for (uint32_t i = 0; i < d->count; i++)
		if (d->nodes[i].type != GRAPH_NODE_REMOVED && d->nodes[i].disabled) {
			CUresult res = ex->be->cuGraphNodeSetEnabled(exec, d->nodes[i].real, 0);

			if (res != CUDA_SUCCESS)
				return res;
		}
	return CUDA_SUCCESS;
}



/* The executable's child node takes the parameters of @child's nodes; the
 * driver checks that the shapes match. Its description takes a copy of
 * @child's (the executable's nodes inside a child are not named on the
 * wire, so their order does not matter). */
CUresult exec_graph_exec_child_node_set_params(struct exec *ex,
					       const struct wire_graph_exec_child_node_set_params_req *req,
					       struct wire_graph_exec_child_node_set_params_rep *rep)
{
	struct graph_node from = { .type = CU_GRAPH_NODE_TYPE_GRAPH };
	struct exec_graph *child;
	struct node_target t;
	CUgraph child_real;
	CUresult res;
	int ret;

	(void)rep;
	if (!req->exec)
		return CUDA_ERROR_INVALID_VALUE;
	res = node_target(ex, req->exec, req->graph, req->node, CU_GRAPH_NODE_TYPE_GRAPH, &t);
	if (res != CUDA_SUCCESS)
		return res;
	child = graph_get(ex, req->child, &child_real);
	if (!child)
		return CUDA_ERROR_INVALID_HANDLE;
	if (child->capturing)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (desc_has_mem_nodes(child->d) || child->parent)
		return CUDA_ERROR_INVALID_VALUE;
	res = ex->be->cuGraphExecChildGraphNodeSetParams(t.xreal, t.n->real, child_real);
	if (res != CUDA_SUCCESS)
		return res;
	from.child = child->d;
	ret = graph_desc_node_params_set(&t.x->d, req->node, &from);
	if (ret) {
		/* The executable runs the new parameters; a restore could
		 * not bring them back. */
		pr_warn("executable graph %#llx: its child node's new parameters cannot be recorded (%s); "
			"no more snapshots", (unsigned long long)req->exec, strerror(-ret));
		ex->journal_broken = true;
		return CUDA_SUCCESS;
	}
	journal_exec(ex, req->exec, t.x);
	return CUDA_SUCCESS;
}


/* ---- kernel node attributes --------------------------------------------- */

_Static_assert(sizeof(CUkernelNodeAttrValue) == sizeof(((struct graph_kattr *)0)->value),
	       "kernel node attribute value size");

/* A graph's kernel node for an attribute call. */
static CUresult kattr_node(struct exec *ex, uint64_t graph, uint32_t index, struct exec_graph **g,
			   struct graph_node **n)
{
	CUresult res;

	*n = NULL;      /* graph_get_synced is out of sight: -Wmaybe-uninitialized */
	*g = graph_get_synced(ex, graph, &res);
	if (!*g)
		return res;
	*n = kernel_node_at((*g)->d, index);
	return *n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Ids tern does not keep: device-updatable nodes are not offered, events
 * and unknown ids are refused as the driver refuses them on a node. */
static CUresult kattr_id_check(uint32_t id)
{
	if (graph_kattr_id_ok(id))
		return CUDA_SUCCESS;
	return id == CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE ? CUDA_ERROR_NOT_SUPPORTED
								   : CUDA_ERROR_INVALID_VALUE;
}

CUresult exec_graph_kernel_node_get_attribute(struct exec *ex,
					      const struct wire_graph_kernel_node_get_attribute_req *req,
					      struct wire_graph_kernel_node_get_attribute_rep *rep)
{
	struct exec_graph *g;
	struct graph_node *n;
	uint8_t *out;
	CUresult res = kattr_node(ex, req->graph, req->node, &g, &n);

	if (res == CUDA_SUCCESS)
		res = kattr_id_check(req->attr);
	if (res != CUDA_SUCCESS)
		return res;
	out = exec_copy_buffer(ex, sizeof(CUkernelNodeAttrValue));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(out, 0, sizeof(CUkernelNodeAttrValue));
	res = ex->be->cuGraphKernelNodeGetAttribute(n->real, (CUkernelNodeAttrID)req->attr,
						    (CUkernelNodeAttrValue *)out);
	if (res == CUDA_SUCCESS)
		rep->value = (struct wire_blob){ out, sizeof(CUkernelNodeAttrValue) };
	return res;
}

CUresult exec_graph_kernel_node_set_attribute(struct exec *ex,
					      const struct wire_graph_kernel_node_set_attribute_req *req,
					      struct wire_graph_kernel_node_set_attribute_rep *rep)
{
	struct graph_node tmp = { .type = CU_GRAPH_NODE_TYPE_KERNEL };
	CUkernelNodeAttrValue v;
	struct exec_graph *g;
	struct graph_node *n;
	CUresult res = kattr_node(ex, req->graph, req->node, &g, &n);
	int ret;

	(void)rep;
	if (res == CUDA_SUCCESS && g->capturing)
		res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (res == CUDA_SUCCESS)
		res = kattr_id_check(req->attr);
	if (res == CUDA_SUCCESS && req->value.len != sizeof(v))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res != CUDA_SUCCESS)
		return res;
	memcpy(&v, req->value.ptr, sizeof(v));
	/* The new set in @tmp first: the backend's change cannot be undone. */
	ret = graph_node_kattrs_copy(&tmp, n);
	if (!ret)
		ret = graph_node_kattr_set(&tmp, req->attr, &v);
	if (ret) {
		free(tmp.attrs);
		return res_of_errno(ret);
	}
	res = ex->be->cuGraphKernelNodeSetAttribute(n->real, (CUkernelNodeAttrID)req->attr, &v);
	if (res != CUDA_SUCCESS) {
		free(tmp.attrs);
		return res;
	}
	free(n->attrs);
	n->attrs = tmp.attrs;
	n->nattrs = tmp.nattrs;
	journal_graph(ex, req->graph, g);
	return CUDA_SUCCESS;
}

CUresult exec_graph_kernel_node_copy_attributes(struct exec *ex,
						const struct wire_graph_kernel_node_copy_attributes_req *req,
						struct wire_graph_kernel_node_copy_attributes_rep *rep)
{
	struct exec_graph *g, *sg;
	struct graph_node *n, *src;
	struct graph_node tmp = { .type = CU_GRAPH_NODE_TYPE_KERNEL };
	CUresult res = kattr_node(ex, req->graph, req->node, &g, &n);

	(void)rep;
	if (res == CUDA_SUCCESS)
		res = kattr_node(ex, req->src_graph, req->src_node, &sg, &src);
	if (res == CUDA_SUCCESS && (g->capturing || sg->capturing))
		res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (res != CUDA_SUCCESS)
		return res;
	if (graph_node_kattrs_copy(&tmp, src))
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = ex->be->cuGraphKernelNodeCopyAttributes(n->real, src->real);
	if (res != CUDA_SUCCESS) {
		free(tmp.attrs);
		return res;
	}
	free(n->attrs);
	n->attrs = tmp.attrs;
	n->nattrs = tmp.nattrs;
	journal_graph(ex, req->graph, g);
	return CUDA_SUCCESS;
}

/* ---- cuGraphDebugDotPrint ----------------------------------------------- */

#define DOT_FLAGS_KNOWN ((1u << 16) - 1)
#define DOT_BYTES_MAX (16u << 20)

CUresult exec_graph_debug_dot_print(struct exec *ex, const struct wire_graph_debug_dot_print_req *req,
				    struct wire_graph_debug_dot_print_rep *rep)
{
	char path[] = "/tmp/tern-graph-dot-XXXXXX";
	uint8_t *out = NULL;
	size_t len = 0;
	CUgraph real;
	CUresult res;
	FILE *f;
	int fd;

	if (!graph_get(ex, req->graph, &real))
		return CUDA_ERROR_INVALID_HANDLE;
	if (req->flags & ~DOT_FLAGS_KNOWN)
		return CUDA_ERROR_INVALID_VALUE;
	fd = mkstemp(path);
	if (fd < 0) {
		pr_warn("graph dot print: no temporary file (%s)", strerror(errno));
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	close(fd);
	res = ex->be->cuGraphDebugDotPrint(real, path, req->flags);
	f = res == CUDA_SUCCESS ? fopen(path, "rb") : NULL;
	if (res == CUDA_SUCCESS && !f)
		res = CUDA_ERROR_OPERATING_SYSTEM;
	if (f) {
		/* One byte past the limit tells a file too large. */
		out = exec_copy_buffer(ex, DOT_BYTES_MAX + 1);
		if (!out)
			res = CUDA_ERROR_OUT_OF_MEMORY;
		else
			len = fread(out, 1, DOT_BYTES_MAX + 1, f);
		if (out && ferror(f))
			res = CUDA_ERROR_OPERATING_SYSTEM;
		else if (len > DOT_BYTES_MAX)
			res = CUDA_ERROR_NOT_SUPPORTED;
		fclose(f);
	}
	unlink(path);
	if (res != CUDA_SUCCESS)
		return res;
	rep->dot = (struct wire_blob){ out, (uint32_t)len };
	return CUDA_SUCCESS;
}
