/* Graphs and their descriptions, both ways: a backend graph read back into
 * the description the executor keeps beside it (after a capture, before a
 * node is named), and a backend graph built node by node from a
 * description (instantiating a body, restoring a snapshot). The wrappers'
 * restore sits here too, since it is a build. exec_graph.c has the
 * overview.
 */
#define LOG_PREFIX "exec: "
#include <errno.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec_graph_internal.h"
#include "log.h"
#include "le.h"

/* ---- reading a backend graph back --------------------------------------- */

static int real_index_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)((const struct real_index *)a)->real;
	uintptr_t y = (uintptr_t)((const struct real_index *)b)->real;

	return x < y ? -1 : x > y;
}

/* The index of the node whose backend node is @real, or GRAPH_NODE_NONE. */
uint32_t index_of_real(const struct real_index *map, uint32_t n, void *real)
{
	struct real_index key = { real, 0 };
	const struct real_index *hit = bsearch(&key, map, n, sizeof(*map), real_index_cmp);

	return hit ? hit->index : GRAPH_NODE_NONE;
}

struct real_index *real_index_build(const struct graph_desc *d, uint32_t *n)
{
	struct real_index *map = malloc((d->count ? d->count : 1) * sizeof(*map));

	*n = 0;
	if (!map)
		return NULL;
	for (uint32_t i = 0; i < d->count; i++)
		if (d->nodes[i].real)
			map[(*n)++] = (struct real_index){ d->nodes[i].real, i };
	qsort(map, *n, sizeof(*map), real_index_cmp);
	return map;
}

struct kernel_match {
	CUfunction fn;
	CUkernel kern;
	uint64_t handle;
};

static bool exec_kernel_has_function(const struct exec_kernel_info *ki, CUfunction fn)
{
	for (unsigned i = 0; i < EXEC_DEVICES_MAX; i++)
		if (ki->function[i] == fn)
			return true;
	return false;
}

static int kernel_match(struct handle_entry *e, void *arg)
{
	struct kernel_match *m = arg;
	struct exec_kernel_info *ki = e->info;

	if (e->kind != HANDLE_KERNEL || !ki)
		return 0;
	if ((m->kern && e->real == m->kern) || (m->fn && exec_kernel_has_function(ki, m->fn))) {
		m->handle = e->handle;
		return 1;
	}
	return 0;
}

/* The guest's handle for a function the backend reports. */
static uint64_t function_handle_of(struct exec *ex, CUfunction fn, CUkernel kern)
{
	struct handle_entry *e = fn ? handle_table_find_real(ex->handles, HANDLE_FUNCTION, fn) : NULL;
	struct kernel_match m = { fn, kern, 0 };

	if (e)
		return e->handle;
	handle_table_foreach(ex->handles, kernel_match, &m);
	return m.handle;
}

/* A backend's memcpy node as a description holds it: at the guest's
 * addresses (memcpy_check translates them back). */
static CUresult copy_from_3d(struct exec *ex, const CUDA_MEMCPY3D *p, struct graph_node_memcpy *c)
{
	CUresult res = graph_node_memcpy_from_3d(p, c);

	/* Host memory no guest token names (a host copy is a child graph). */
	if (res == CUDA_SUCCESS && c->host_end)
		res = CUDA_ERROR_NOT_SUPPORTED;
	if (res == CUDA_SUCCESS) {
		c->src = exec_guest_addr(ex, c->src);
		c->dst = exec_guest_addr(ex, c->dst);
	}
	return res;
}

/* Read one backend node's type and parameters into @n. */
static CUresult node_read(struct exec *ex, CUgraphNode real, struct graph_node *n, unsigned depth,
			  const struct cond_chain *chain)
{
	CUgraphNodeType type;
	CUresult res = ex->be->cuGraphNodeGetType(real, &type);

	if (res != CUDA_SUCCESS)
		return res;
	memset(n, 0, sizeof(*n));
	n->type = type;
	n->real = real;
	switch (type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		CUDA_KERNEL_NODE_PARAMS p = { 0 };
		const struct exec_params *layout = NULL;
		const char *why;
		CUfunction fn;

		res = ex->be->cuGraphKernelNodeGetParams(real, &p);
		if (res != CUDA_SUCCESS)
			return res;
		n->kernel.function = function_handle_of(ex, p.func, p.kern);
		why = !n->kernel.function ? "its function is none the guest named" :
		      exec_function_real(ex, n->kernel.function, &fn, &layout) ? "its function is gone" :
		      (layout->count && !p.kernelParams) || layout->bytes > GRAPH_ARGS_MAX ?
		      "its arguments cannot be read" : NULL;
		if (why) {
			/* Once: the worker's trace has the request's CUresult, not why. */
			static atomic_flag said = ATOMIC_FLAG_INIT;

			if (!atomic_flag_test_and_set(&said))
				pr_info("a kernel node the backend made (function %p, kernel %p) cannot be described: %s",
					(void *)p.func, (void *)p.kern, why);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
		n->kernel.grid[0] = p.gridDimX;
		n->kernel.grid[1] = p.gridDimY;
		n->kernel.grid[2] = p.gridDimZ;
		n->kernel.block[0] = p.blockDimX;
		n->kernel.block[1] = p.blockDimY;
		n->kernel.block[2] = p.blockDimZ;
		n->kernel.shared_bytes = p.sharedMemBytes;
		n->kernel.args_len = layout->bytes;
		if (layout->bytes) {
			n->kernel.args = calloc(1, layout->bytes);
			if (!n->kernel.args)
				return CUDA_ERROR_OUT_OF_MEMORY;
			for (uint32_t i = 0; i < layout->count; i++)
				memcpy(n->kernel.args + layout->offset[i], p.kernelParams[i], layout->size[i]);
		}
		/* After a restore, a launch captured with a conditional handle's
		 * old value (the guest's) got to the backend as is: the node
		 * takes the new one; the description keeps the guest's. */
		if (chain_translates(chain)) {
			CUDA_KERNEL_NODE_PARAMS q;
			unsigned translated = 0;

			res = kernel_node_params(ex, &n->kernel, &q, chain, &translated);
			if (res == CUDA_SUCCESS && translated)
				res = ex->be->cuGraphKernelNodeSetParams(real, &q);
		}
		return res;
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY: {
		CUDA_MEMCPY3D p = { 0 };

		res = ex->be->cuGraphMemcpyNodeGetParams(real, &p);
		return res == CUDA_SUCCESS ? copy_from_3d(ex, &p, &n->copy) : res;
	}
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS p = { 0 };

		res = ex->be->cuGraphMemsetNodeGetParams(real, &p);
		if (res != CUDA_SUCCESS)
			return res;
		n->set.dst = exec_guest_addr(ex, p.dst);
		n->set.pitch = p.pitch;
		n->set.value = p.value;
		n->set.element_size = p.elementSize;
		n->set.width = p.width;
		n->set.height = p.height;
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_EMPTY:
		/* Or a captured allocation or free node (exec_graph_host.c). */
		graph_standin_take(ex, real, n);
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUDA_HOST_NODE_PARAMS p = { 0 };

		/* Captured from cuLaunchHostFunc: our trampoline and a token. */
		res = ex->be->cuGraphHostNodeGetParams(real, &p);
		if (res != CUDA_SUCCESS)
			return res;
		return exec_hostfn_token_of(ex, &p, &n->host) ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
	}
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD: {
		struct handle_entry *ev;
		CUevent e = NULL;

		res = type == CU_GRAPH_NODE_TYPE_WAIT_EVENT ? ex->be->cuGraphEventWaitNodeGetEvent(real, &e)
							    : ex->be->cuGraphEventRecordNodeGetEvent(real, &e);
		if (res != CUDA_SUCCESS)
			return res;
		ev = handle_table_find_real(ex->handles, HANDLE_EVENT, e);
		if (!ev)
			return CUDA_ERROR_NOT_SUPPORTED;
		n->event = ev->handle;
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_GRAPH: {
		CUgraph child;

		if (depth + 1 >= GRAPH_DESC_DEPTH_MAX)
			return CUDA_ERROR_NOT_SUPPORTED;
		res = ex->be->cuGraphChildGraphNodeGetGraph(real, &child);
		if (res != CUDA_SUCCESS)
			return res;
		{
			/* A captured host copy stands in a child graph of ours. */
			bool is_copy;

			res = host_copy_read(ex, child, &n->copy, &is_copy);
			if (res != CUDA_SUCCESS || is_copy) {
				n->type = CU_GRAPH_NODE_TYPE_MEMCPY;
				return res;
			}
		}
		n->child = calloc(1, sizeof(*n->child));
		if (!n->child)
			return CUDA_ERROR_OUT_OF_MEMORY;
		res = desc_sync(ex, n->child, child, depth + 1, chain);
		/* The child belongs to the node: forget its backend nodes. */
		for (uint32_t i = 0; i < n->child->count; i++)
			n->child->nodes[i].real = NULL;
		return res;
	}
	default:
		/* External semaphore and batch memop nodes: none of the guest's
		 * calls makes them. Conditional nodes: only the guest's
		 * cuGraphAddNode makes them, and that call describes them. */
		pr_warn("graph node of type %d is not supported", (int)type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

/* Bring @d up to date with the backend graph @g: nodes keep their indices
 * (matched by backend node), new ones are appended with their parameters
 * read back, dependencies are read again. */
CUresult desc_sync(struct exec *ex, struct graph_desc *d, CUgraph g, unsigned depth,
		   const struct cond_chain *chain)
{
	CUgraphNode *nodes = NULL, *from = NULL, *to = NULL;
	uint32_t *ia = NULL, *ib = NULL;
	CUgraphEdgeData *data = NULL;
	struct graph_edge_data *edge = NULL;
	struct real_index *map = NULL;
	size_t count = 0, edges = 0;
	uint32_t mapped;
	CUresult res;

	res = ex->be->cuGraphGetNodes(g, NULL, &count);
	if (res != CUDA_SUCCESS)
		return res;
	if (count > GRAPH_DESC_NODES_MAX)
		return CUDA_ERROR_NOT_SUPPORTED;
	nodes = calloc(count ? count : 1, sizeof(*nodes));
	if (!nodes)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* The driver refuses arrays with a count of 0: ask only for something. */
	res = count ? ex->be->cuGraphGetNodes(g, nodes, &count) : CUDA_SUCCESS;
	if (res != CUDA_SUCCESS)
		goto out;
	map = real_index_build(d, &mapped);
	if (!map) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	for (size_t i = 0; i < count; i++) {
		struct graph_node n;
		int ret;

		if (index_of_real(map, mapped, nodes[i]) != GRAPH_NODE_NONE)
			continue;
		res = node_read(ex, nodes[i], &n, depth, chain);
		if (res == CUDA_SUCCESS) {
			ret = graph_desc_append(d, &n);
			if (ret)
				res = ret == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_SUPPORTED;
		}
		if (res != CUDA_SUCCESS) {
			graph_node_release(&n);
			goto out;
		}
	}
	/* Dependencies: all of them again, from the backend's edges. */
	res = ex->be->cuGraphGetEdges(g, NULL, NULL, NULL, &edges);
	if (res != CUDA_SUCCESS)
		goto out;
	if (edges > GRAPH_DESC_EDGES_MAX) {
		res = CUDA_ERROR_NOT_SUPPORTED;
		goto out;
	}
	from = calloc(edges ? edges : 1, sizeof(*from));
	to = calloc(edges ? edges : 1, sizeof(*to));
	data = calloc(edges ? edges : 1, sizeof(*data));
	edge = malloc((edges ? edges : 1) * sizeof(*edge));
	if (!from || !to || !data || !edge) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	res = edges ? ex->be->cuGraphGetEdges(g, from, to, data, &edges) : CUDA_SUCCESS;
	if (res != CUDA_SUCCESS)
		goto out;
	free(map);
	map = real_index_build(d, &mapped);
	if (!map) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	ia = malloc((edges ? edges : 1) * sizeof(*ia));
	ib = malloc((edges ? edges : 1) * sizeof(*ib));
	if (!ia || !ib) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	for (size_t i = 0; i < edges; i++) {
		ia[i] = index_of_real(map, mapped, from[i]);
		ib[i] = index_of_real(map, mapped, to[i]);
		edge[i] = (struct graph_edge_data){ data[i].from_port, data[i].to_port, data[i].type };
		if (ia[i] == GRAPH_NODE_NONE || ib[i] == GRAPH_NODE_NONE) {
			res = CUDA_ERROR_NOT_SUPPORTED;
			goto out;
		}
	}
	{
		int ret = graph_desc_deps_reset(d, ia, ib, edge, edges);

		if (ret)
			res = ret == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_SUPPORTED;
	}
out:
	free(map);
	free(nodes);
	free(from);
	free(to);
	free(data);
	free(edge);
	free(ia);
	free(ib);
	return res;
}

/* desc_sync for a guest's graph (or body), its conditional handles known. */
CUresult graph_sync(struct exec *ex, struct exec_graph *g, CUgraph real)
{
	uint32_t before = g->d->weight;
	struct cond_chain c;
	CUresult res;

	graph_chain(g, &c);
	res = desc_sync(ex, g->d, real, graph_nesting(g), &c);
	weight_propagate(g, before);
	return res;
}

/* ---- building a backend graph from a description ------------------------ */

/* Kernel arguments packed by @layout: each 8-byte argument whose value is
 * the guest's value of a conditional handle in @c that the backend knows
 * by another value (after a restore) takes the backend's. Returns how many
 * changed. An argument that happens to equal such a value is changed too:
 * docs/limits.md. */
static unsigned args_translate(uint8_t *args, const struct exec_params *layout, const struct cond_chain *c)
{
	unsigned changed = 0;

	if (!chain_translates(c))
		return 0;
	for (uint32_t i = 0; i < layout->count; i++) {
		bool done = false;
		uint64_t v;

		if (layout->size[i] != 8)
			continue;
		memcpy(&v, args + layout->offset[i], 8);
		for (unsigned j = 0; j < c->n && !done; j++)
			for (uint32_t k = 0; k < c->d[j]->nhandles && !done; k++) {
				const struct graph_cond_handle *h = &c->d[j]->handles[k];

				if (h->value == v && h->real != v) {
					memcpy(args + layout->offset[i], &h->real, 8);
					changed++;
					done = true;
				}
			}
	}
	return changed;
}

/* kernelParams for packed @args by the function's layout; @store holds
 * GRAPH_ARGS_MAX bytes. */
static CUresult kernel_params(struct exec *ex, uint64_t function, const uint8_t *args, uint32_t len,
			      CUfunction *fn, uint8_t *store, void **params, bool *any, const struct cond_chain *c,
			      unsigned *translated)
{
	const struct exec_params *layout;
	CUresult res = exec_function_real(ex, function, fn, &layout);

	if (res != CUDA_SUCCESS)
		return res;
	if (len != layout->bytes || len > GRAPH_ARGS_MAX || layout->count > GRAPH_PARAMS_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (len)
		memcpy(store, args, len);
	*translated = args_translate(store, layout, c);
	for (uint32_t i = 0; i < layout->count; i++)
		params[i] = store + layout->offset[i];
	*any = layout->count > 0;
	return CUDA_SUCCESS;
}

/* The driver's parameters of kernel node @k, its arguments translated for
 * the conditional handles of @c (may be NULL); *@translated (may be NULL):
 * how many were. */
CUresult kernel_node_params(struct exec *ex, const struct graph_node_kernel *k,
			    CUDA_KERNEL_NODE_PARAMS *p, const struct cond_chain *c, unsigned *translated)
{
	static uint8_t store[GRAPH_ARGS_MAX];
	static void *params[GRAPH_PARAMS_MAX];
	CUfunction fn;
	bool any = false;
	unsigned count = 0;
	CUresult res = kernel_params(ex, k->function, k->args, k->args_len, &fn, store, params, &any, c, &count);

	if (translated)
		*translated = count;

	if (res != CUDA_SUCCESS)
		return res;
	memset(p, 0, sizeof(*p));
	p->func = fn;
	p->gridDimX = k->grid[0];
	p->gridDimY = k->grid[1];
	p->gridDimZ = k->grid[2];
	p->blockDimX = k->block[0];
	p->blockDimY = k->block[1];
	p->blockDimZ = k->block[2];
	p->sharedMemBytes = k->shared_bytes;
	p->kernelParams = any ? params : NULL;
	return CUDA_SUCCESS;
}

void memset_params(const struct graph_node_memset *s, CUDA_MEMSET_NODE_PARAMS *p)
{
	memset(p, 0, sizeof(*p));
	p->dst = s->dst;
	p->pitch = s->pitch;
	p->value = s->value;
	p->elementSize = s->element_size;
	p->width = s->width;
	p->height = s->height;
}

static CUresult graph_build(struct exec *ex, struct graph_desc *d, CUgraph *out, const struct cond_chain *outer);
static CUresult graph_fill(struct exec *ex, struct graph_desc *d, CUgraph g, const struct cond_chain *outer);

CUresult ctx_real(struct exec *ex, CUcontext *ctx)
{
	struct handle_entry *e = handle_table_get(ex->handles, ex->dev.primary_ctx, HANDLE_CONTEXT);

	*ctx = e ? e->real : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* The context of a conditional handle or node: @handle (0: the current). */
CUresult cond_ctx(struct exec *ex, uint64_t handle, CUcontext *ctx)
{
	struct handle_entry *e;

	if (!handle)
		return ctx_real(ex, ctx);
	e = handle_table_get(ex->handles, handle, HANDLE_CONTEXT);
	if (!e)
		return CUDA_ERROR_INVALID_CONTEXT;
	*ctx = e->real;
	return CUDA_SUCCESS;
}

/* Add node @n of @d, without dependencies, to @g; @c: the conditional
 * handles its arguments may name (@d's first). */
static CUresult node_build(struct exec *ex, CUgraph g, const struct graph_desc *d, struct graph_node *n,
			   CUgraphNode *real, const struct cond_chain *c)
{
	CUcontext ctx;
	CUresult res = ctx_real(ex, &ctx);

	if (res != CUDA_SUCCESS)
		return res;
	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		CUDA_KERNEL_NODE_PARAMS p;

		res = kernel_node_params(ex, &n->kernel, &p, c, NULL);
		if (res == CUDA_SUCCESS)
			res = ex->be->cuGraphAddKernelNode(real, g, NULL, 0, &p);
		/* Its attributes as they were set. */
		for (uint32_t k = 0; k < n->nattrs && res == CUDA_SUCCESS; k++)
			res = ex->be->cuGraphKernelNodeSetAttribute(*real, (CUkernelNodeAttrID)n->attrs[k].id,
								    (const CUkernelNodeAttrValue *)n->attrs[k].value);
		return res;
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY: {
		CUDA_MEMCPY3D p;

		if (n->copy.host_end) {
			CUgraph child;

			res = host_copy_child(ex, &n->copy, &child);
			if (res != CUDA_SUCCESS)
				return res;
			res = ex->be->cuGraphAddChildGraphNode(real, g, NULL, 0, child);
			ex->be->cuGraphDestroy(child);
			return res;
		}
		/* A node whose memory was freed after it was made is rebuilt as
		 * it was (the driver takes it until it runs); one in memory
		 * that is still there reaches it where it is now. */
		memcpy_check(ex, &n->copy, &p);
		return ex->be->cuGraphAddMemcpyNode(real, g, NULL, 0, &p, ctx);
	}
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS p;

		memset_check(ex, &n->set, &p);      /* as for a memcpy node */
		return ex->be->cuGraphAddMemsetNode(real, g, NULL, 0, &p, ctx);
	}
	case CU_GRAPH_NODE_TYPE_EMPTY:
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		return ex->be->cuGraphAddEmptyNode(real, g, NULL, 0);
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUDA_HOST_NODE_PARAMS p;

		res = exec_hostfn_params(ex, n->host, &p);
		return res == CUDA_SUCCESS ? ex->be->cuGraphAddHostNode(real, g, NULL, 0, &p) : res;
	}
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD: {
		struct handle_entry *ev = handle_table_get(ex->handles, n->event, HANDLE_EVENT);

		if (!ev)
			return CUDA_ERROR_INVALID_HANDLE;
		return n->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT
			       ? ex->be->cuGraphAddEventWaitNode(real, g, NULL, 0, ev->real)
			       : ex->be->cuGraphAddEventRecordNode(real, g, NULL, 0, ev->real);
	}
	case CU_GRAPH_NODE_TYPE_GRAPH: {
		CUgraph child;

		if (n->child_handle) {
			/* The guest names the embedded graph's nodes: build it in
			 * place (an empty child filled), so they are known. */
			CUgraph embedded;

			res = ex->be->cuGraphCreate(&child, 0);
			if (res != CUDA_SUCCESS)
				return res;
			res = ex->be->cuGraphAddChildGraphNode(real, g, NULL, 0, child);
			ex->be->cuGraphDestroy(child);
			if (res == CUDA_SUCCESS)
				res = ex->be->cuGraphChildGraphNodeGetGraph(*real, &embedded);
			return res == CUDA_SUCCESS ? graph_fill(ex, n->child, embedded, c) : res;
		}
		res = graph_build(ex, n->child, &child, c);
		if (res != CUDA_SUCCESS)
			return res;
		/* The node holds its own copy of the child. */
		res = ex->be->cuGraphAddChildGraphNode(real, g, NULL, 0, child);
		ex->be->cuGraphDestroy(child);
		for (uint32_t i = 0; i < n->child->count; i++)
			n->child->nodes[i].real = NULL;
		return res;
	}
	case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
		CUgraphNodeParams p = { .type = CU_GRAPH_NODE_TYPE_CONDITIONAL };

		/* The handles were made again before the nodes (graph_fill). */
		p.conditional.handle = d->handles[n->cond.handle].real;
		p.conditional.type = (CUgraphConditionalNodeType)n->cond.type;
		p.conditional.size = n->cond.size;
		p.conditional.ctx = ctx;
		res = ex->be->cuGraphAddNode(real, g, NULL, NULL, 0, &p);
		for (uint32_t k = 0; k < n->cond.size && res == CUDA_SUCCESS; k++) {
			n->cond.body_real[k] = p.conditional.phGraph_out[k];
			res = graph_fill(ex, &n->cond.body[k], p.conditional.phGraph_out[k], c);
		}
		return res;
	}
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

/* Fill the empty backend graph @g with @d: its conditional handles made
 * again (their backend values in `real`), every node in index order, then
 * every edge; the nodes' `real` fields are set to it. @outer: the handles
 * of the graphs around @d (a body's), or NULL. */
static CUresult graph_fill(struct exec *ex, struct graph_desc *d, CUgraph g, const struct cond_chain *outer)
{
	CUgraphNode *from = NULL, *to = NULL;
	CUgraphEdgeData *data = NULL;
	struct cond_chain c = { .n = 0 };
	size_t e = 0;
	CUresult res = CUDA_SUCCESS;

	c.d[c.n++] = d;
	for (unsigned j = 0; outer && j < outer->n && c.n <= GRAPH_DESC_DEPTH_MAX; j++)
		c.d[c.n++] = outer->d[j];
	for (uint32_t k = 0; k < d->nhandles && res == CUDA_SUCCESS; k++) {
		struct graph_cond_handle *h = &d->handles[k];
		CUgraphConditionalHandle real = 0;
		CUcontext ctx;

		res = ctx_real(ex, &ctx);
		if (res == CUDA_SUCCESS)
			res = ex->be->cuGraphConditionalHandleCreate(&real, g, ctx, h->default_value, h->flags);
		if (res != CUDA_SUCCESS)
			break;
		if (real != h->value)
			pr_info("conditional handle %#llx is %#llx in the backend now: kernel arguments naming it "
				"are translated", (unsigned long long)h->value, (unsigned long long)real);
		h->real = real;
	}
	for (uint32_t i = 0; i < d->count && res == CUDA_SUCCESS; i++) {
		d->nodes[i].real = NULL;
		if (d->nodes[i].type != GRAPH_NODE_REMOVED)
			res = node_build(ex, g, d, &d->nodes[i], (CUgraphNode *)&d->nodes[i].real, &c);
	}
	if (res == CUDA_SUCCESS && d->edges) {
		bool has_data = graph_desc_has_edge_data(d);

		from = malloc(d->edges * sizeof(*from));
		to = malloc(d->edges * sizeof(*to));
		data = has_data ? calloc(d->edges, sizeof(*data)) : NULL;
		if (!from || !to || (has_data && !data))
			res = CUDA_ERROR_OUT_OF_MEMORY;
		for (uint32_t i = 0; i < d->count && res == CUDA_SUCCESS; i++)
			for (uint32_t j = 0; j < d->nodes[i].ndeps && e < d->edges; j++) {
				struct graph_edge_data x = graph_node_dep_edge(&d->nodes[i], j);

				if (data)
					data[e] = (CUgraphEdgeData){ .from_port = x.from_port, .to_port = x.to_port,
								     .type = x.type };
				from[e] = d->nodes[d->nodes[i].deps[j]].real;
				to[e++] = d->nodes[i].real;
			}
		if (res == CUDA_SUCCESS)
			res = ex->be->cuGraphAddDependencies(g, from, to, data, e);
	}
	free(from);
	free(to);
	free(data);
	if (res != CUDA_SUCCESS)
		for (uint32_t i = 0; i < d->count; i++)
			d->nodes[i].real = NULL;
	return res;
}

/* A new backend graph filled with @d (graph_fill). */
static CUresult graph_build(struct exec *ex, struct graph_desc *d, CUgraph *out, const struct cond_chain *outer)
{
	CUgraph g;
	CUresult res = ex->be->cuGraphCreate(&g, 0);

	if (res != CUDA_SUCCESS)
		return res;
	res = graph_fill(ex, d, g, outer);
	if (res != CUDA_SUCCESS) {
		ex->be->cuGraphDestroy(g);
		return res;
	}
	*out = g;
	return CUDA_SUCCESS;
}

/* ---- restore ------------------------------------------------------------ */

/* Handle entries for the bodies of @d's conditional nodes (nested ones
 * too) under the guest's handles its description keeps, @owner the graph
 * whose description @d is. 0, -EEXIST (a handle taken), -ENOMEM. */
static int bodies_register(struct exec *ex, struct exec_graph *owner, struct graph_desc *d)
{
	for (uint32_t i = 0; i < d->count; i++) {
		struct graph_node *n = &d->nodes[i];

		for (uint32_t k = 0; k < node_subgraphs(n); k++) {
			uint64_t *handle;
			struct graph_desc *sub = node_subgraph(n, k, &handle);
			CUgraph real = NULL;
			struct exec_graph *b;
			int ret;

			if (!*handle || handle_kind_of(*handle) != HANDLE_GRAPH) {
				*handle = 0;
				ret = bodies_register(ex, owner, sub);  /* (a copy holds none) */
				if (ret)
					return ret;
				continue;
			}
			if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
				real = n->cond.body_real[k];
			else if (ex->be->cuGraphChildGraphNodeGetGraph(n->real, &real) != CUDA_SUCCESS)
				return -EINVAL;
			b = graph_info_new();
			if (!b)
				return -ENOMEM;
			b->d = sub;
			b->parent = owner;
			ret = handle_table_add_at(ex->handles, *handle, real, ex->dev.primary_ctx, b);
			if (ret) {
				free(b);
				*handle = 0;
				return ret;
			}
			ret = bodies_register(ex, b, b->d);
			if (ret)
				return ret;
		}
	}
	return 0;
}

CUresult exec_graph_restore(struct exec *ex, uint64_t handle, uint32_t kind, const uint8_t *args,
			    uint32_t args_len, const void *desc, size_t desc_len, char *err,
			    size_t errlen)
{
	struct exec_graph_exec *x = NULL;
	struct exec_graph *g = NULL;
	struct graph_desc *d;
	CUgraph real = NULL;
	CUresult res;
	int ret;

	if (kind == HANDLE_GRAPH) {
		g = graph_info_new();
		d = g ? g->d : NULL;
	} else {
		x = calloc(1, sizeof(*x));
		d = x ? &x->d : NULL;
	}
	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ret = graph_desc_decode(d, desc, desc_len);
	if (ret) {
		snprintf(err, errlen, "graph 0x%llx: its description does not decode (%s)",
			 (unsigned long long)handle, strerror(-ret));
		free(g);
		free(x);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	res = graph_build(ex, d, &real, NULL);
	if (res != CUDA_SUCCESS) {
		snprintf(err, errlen, "graph 0x%llx: rebuilding its %u nodes failed with CUDA error %d",
			 (unsigned long long)handle, d->count, res);
		goto out_free;
	}
	if (g) {
		memcpy(g->hash, args, TRACKER_HASH_SIZE);
		if (handle_table_add_at(ex->handles, handle, real, ex->dev.primary_ctx, g)) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			ex->be->cuGraphDestroy(real);
			goto out_free;
		}
		/* The guest's handles of its conditional bodies, as before. */
		if (bodies_register(ex, g, g->d)) {
			snprintf(err, errlen, "graph 0x%llx: the handles of its conditional bodies cannot be "
				 "given again", (unsigned long long)handle);
			bodies_forget(ex, g->d);
			handle_table_remove(ex->handles, handle);
			ex->be->cuGraphDestroy(real);
			res = CUDA_ERROR_INVALID_IMAGE;
			goto out_free;
		}
		desc_gallocs(ex, g->d, +1);
		journal_graph(ex, handle, g);
		return CUDA_SUCCESS;
	}
	{
		CUgraphExec exec;
		uint32_t result, error_node;
		struct exec_graph *origin;

		memcpy(x->hash, args, TRACKER_HASH_SIZE);
		for (int k = 7; k >= 0; k--) {
			x->flags = x->flags << 8 | args[TRACKER_HASH_SIZE + k];
			x->origin = x->origin << 8 | args[TRACKER_HASH_SIZE + 8 + k];
		}
		(void)args_len;
		res = exec_make(ex, real, d, x->flags & ~(uint64_t)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, NULL,
				&exec, &result, &error_node);
		if (res != CUDA_SUCCESS) {
			snprintf(err, errlen, "executable graph 0x%llx: instantiating it again failed with "
				 "CUDA error %d", (unsigned long long)handle, res);
			ex->be->cuGraphDestroy(real);
			goto out_free;
		}
		x->source = real;
		res = exec_enabled_restore(ex, exec, d);
		if (res != CUDA_SUCCESS) {
			snprintf(err, errlen, "executable graph 0x%llx: disabling its nodes again failed with "
				 "CUDA error %d", (unsigned long long)handle, res);
			ex->be->cuGraphExecDestroy(exec);
			ex->be->cuGraphDestroy(real);
			goto out_free;
		}
		if (handle_table_add_at(ex->handles, handle, exec, ex->dev.primary_ctx, x)) {
			ex->be->cuGraphExecDestroy(exec);
			ex->be->cuGraphDestroy(real);
			res = CUDA_ERROR_OUT_OF_MEMORY;
			goto out_free;
		}
		origin = graph_get(ex, x->origin, NULL);
		if (origin)
			origin->execs++;
		desc_gallocs(ex, &x->d, +1);
		journal_exec(ex, handle, x);
		return CUDA_SUCCESS;
	}
out_free:
	graph_desc_release(d);
	free(g);
	free(x);
	return res;
}
