/* Conditional nodes: their handles, the nodes and their bodies, which are
 * graphs the parent's description owns and the guest may hold handles of
 * (exec_graph.c has the overview).
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

/* ---- conditional nodes --------------------------------------------------- */

CUresult exec_graph_conditional_handle_create(struct exec *ex,
					      const struct wire_graph_conditional_handle_create_req *req,
					      struct wire_graph_conditional_handle_create_rep *rep)
{
	CUgraphConditionalHandle value = 0;
	CUgraph real;
	struct exec_graph *g = graph_get(ex, req->graph, &real);
	CUcontext ctx;
	CUresult res;
	int ret;

	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (req->flags & ~(uint32_t)CU_GRAPH_COND_ASSIGN_DEFAULT)
		return CUDA_ERROR_INVALID_VALUE;
	if (g->d->nhandles >= GRAPH_DESC_COND_HANDLES_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = cond_ctx(ex, req->ctx, &ctx);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphConditionalHandleCreate(&value, real, ctx, req->default_value, req->flags);
	if (res != CUDA_SUCCESS)
		return res;
	/* The guest gets the backend's value: device code uses it as is. */
	ret = graph_desc_handle_add(g->d, value, value, req->default_value, req->flags);
	if (ret) {
		/* The backend cannot take a handle back: this graph's handles
		 * can no longer be described (a value the guest knows from
		 * before a restore came back for another). */
		pr_err("graph %#llx: conditional handle %#llx cannot be recorded (%s); no more snapshots",
		       (unsigned long long)req->graph, (unsigned long long)value, strerror(-ret));
		ex->journal_broken = true;
		return ret == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_SUPPORTED;
	}
	rep->value = value;
	if (!g->capturing)
		journal_graph(ex, req->graph, g);
	return CUDA_SUCCESS;
}

/* True when a node of @d or of its children has kernel attributes. */
static bool desc_has_kattrs(const struct graph_desc *d)
{
	for (uint32_t i = 0; i < d->count; i++)
		if (d->nodes[i].nattrs ||
		    (d->nodes[i].type == CU_GRAPH_NODE_TYPE_GRAPH && desc_has_kattrs(d->nodes[i].child)))
			return true;
	return false;
}

/* cuGraphChildGraphNodeGetGraph: a guest handle for a child node's
 * embedded graph, which the node owns as a conditional node its bodies.
 * At the first request the embedded graph's description is read back
 * from the backend (its nodes' order is the backend's; the guest named
 * none of them before), so that its nodes are known. */
CUresult exec_graph_child_node_get_graph(struct exec *ex, const struct wire_graph_child_node_get_graph_req *req,
					 struct wire_graph_child_node_get_graph_rep *rep)
{
	CUresult res;
	struct exec_graph *g = graph_get_synced(ex, req->graph, &res), *w;
	struct graph_desc fresh;
	uint32_t before;
	struct cond_chain c;
	struct graph_node *n;
	CUgraph embedded;

	if (!g)
		return res;
	n = node_at(g->d, req->node, CU_GRAPH_NODE_TYPE_GRAPH);
	if (!n || !n->real)
		return CUDA_ERROR_INVALID_VALUE;
	if (subgraph_info(ex, n->child_handle, n->child)) {
		rep->child = n->child_handle;
		return CUDA_SUCCESS;
	}
	/* A description read back would lose them. */
	if (desc_has_kattrs(n->child))
		return CUDA_ERROR_NOT_SUPPORTED;
	res = ex->be->cuGraphChildGraphNodeGetGraph(n->real, &embedded);
	if (res != CUDA_SUCCESS)
		return res;
	graph_desc_init(&fresh);
	graph_chain(g, &c);
	res = desc_sync(ex, &fresh, embedded, graph_nesting(g) + 1, &c);
	w = res == CUDA_SUCCESS ? graph_info_new() : NULL;
	if (res == CUDA_SUCCESS && (!w || handle_table_add(ex->handles, HANDLE_GRAPH, embedded, ex->dev.primary_ctx, w,
							   &rep->child)))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	if (res != CUDA_SUCCESS) {
		free(w);
		graph_desc_release(&fresh);
		return res;
	}
	/* Removed slots of the copy are gone from what was read back. */
	before = g->d->weight;
	g->d->weight = g->d->weight - n->child->weight + fresh.weight;
	weight_propagate(g, before);
	graph_desc_release(n->child);
	*n->child = fresh;
	n->child_handle = rep->child;
	w->d = n->child;
	w->parent = g;
	journal_graph(ex, req->graph, g);
	return CUDA_SUCCESS;
}

_Static_assert(WIRE_REC_COND_BODY_MAX == GRAPH_DESC_COND_SIZE_MAX, "calls.tbl's cond_body max is the description's");

/* The index of the handle the guest knows as @value in @d, or -1. */
static int cond_handle_index(const struct graph_desc *d, uint64_t value)
{
	for (uint32_t k = 0; k < d->nhandles; k++)
		if (d->handles[k].value == value)
			return (int)k;
	return -1;
}

CUresult exec_graph_add_conditional_node(struct exec *ex, const struct wire_graph_add_conditional_node_req *req,
					 struct wire_graph_add_conditional_node_rep *rep)
{
	CUgraphNodeParams p = { .type = CU_GRAPH_NODE_TYPE_CONDITIONAL };
	struct graph_node n = { .type = CU_GRAPH_NODE_TYPE_EMPTY };
	struct graph_node *node;
	CUgraphNode real = NULL;
	struct node_add a;
	uint8_t *out;
	int index = -1;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS && !graph_cond_shape_ok(req->type, req->size))
		res = CUDA_ERROR_INVALID_VALUE;
	/* A handle made for this graph, as the driver wants. */
	if (res == CUDA_SUCCESS && (index = cond_handle_index(a.g->d, req->value)) < 0)
		res = CUDA_ERROR_INVALID_VALUE;
	/* Its bodies sit one level deeper in the description. */
	if (res == CUDA_SUCCESS && graph_nesting(a.g) + 2 >= GRAPH_DESC_DEPTH_MAX)
		res = CUDA_ERROR_NOT_SUPPORTED;
	if (res == CUDA_SUCCESS)
		res = cond_ctx(ex, req->ctx, &p.conditional.ctx);
	if (res == CUDA_SUCCESS && graph_node_cond_init(&n, req->type, req->size, (uint32_t)index))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	if (res == CUDA_SUCCESS) {
		p.conditional.handle = a.g->d->handles[index].real;
		p.conditional.type = (CUgraphConditionalNodeType)req->type;
		p.conditional.size = req->size;
		res = ex->be->cuGraphAddNode(&real, a.real, a.deps, NULL, a.ndeps, &p);
	}
	if (res == CUDA_SUCCESS && !p.conditional.phGraph_out)
		res = CUDA_ERROR_UNKNOWN;       /* a backend that made no bodies */
	if (res == CUDA_SUCCESS) {
		for (uint32_t k = 0; k < req->size; k++)
			n.cond.body_real[k] = p.conditional.phGraph_out[k];
	} else if (real) {
		ex->be->cuGraphDestroyNode(real);
	}
	res = node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
	if (res != CUDA_SUCCESS)
		return res;
	/* The guest's handles of the bodies, which it fills as graphs. */
	node = &a.g->d->nodes[rep->node];
	out = exec_copy_buffer(ex, (size_t)req->size * WIRE_REC_COND_BODY_BYTES);
	for (uint32_t k = 0; out && k < req->size; k++) {
		struct exec_graph *b = graph_info_new();

		if (!b || handle_table_add(ex->handles, HANDLE_GRAPH, node->cond.body_real[k], ex->dev.primary_ctx, b,
					   &node->cond.body_handle[k])) {
			free(b);
			out = NULL;
			break;
		}
		b->d = &node->cond.body[k];
		b->parent = a.g;
		wire_rec_cond_body_put(out, k, &(struct wire_rec_cond_body){ .graph = node->cond.body_handle[k] });
	}
	if (!out) {
		struct graph_desc one = { .count = 1, .nodes = node };
		uint32_t before = a.g->d->weight;

		bodies_forget(ex, &one);
		ex->be->cuGraphDestroyNode(node->real);
		graph_desc_node_remove(a.g->d, rep->node);
		weight_propagate(a.g, before);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	rep->bodies = (struct wire_blob){ out, req->size * WIRE_REC_COND_BODY_BYTES };
	return CUDA_SUCCESS;
}
