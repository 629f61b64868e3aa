/* Graphs and executable graphs on the sim device.
 *
 * A graph is a list of nodes, each with the nodes it depends on. To
 * instantiate is to copy it and put its nodes in a topological order, child
 * graphs flattened in place; to launch is to queue each node's command on the
 * stream in that order. The device thread runs a stream's commands one after
 * the other, so that order is all the dependencies need. Node parameters are
 * checked when a node is made and again at each launch (memory may have gone
 * since): a launch never queues work on memory the device cannot reach.
 */
#define LOG_PREFIX "sim: "

#include "sim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "graph_desc.h"
#include "log.h"
#include "sim_graph_internal.h"

/* ---- node sets ---------------------------------------------------------- */

static int node_set_push(struct sim_node_set *s, struct sim_gnode *n);

int sim_node_set_add(struct sim_node_set *s, struct sim_gnode *n)
{
	return sim_node_set_add_data(s, n, NULL);
}

static bool edge_data_default(const CUgraphEdgeData *e)
{
	static const CUgraphEdgeData zero;

	return !memcmp(e, &zero, sizeof(zero));
}

int sim_node_set_add_data(struct sim_node_set *s, struct sim_gnode *n, const CUgraphEdgeData *e)
{
	for (unsigned i = 0; i < s->count; i++)
		if (s->nodes[i] == n)
			return 0;
	if (e && !edge_data_default(e) && !s->data && !sim_node_set_data(s))
		return -ENOMEM;
	if (node_set_push(s, n))
		return -ENOMEM;
	if (s->data)
		s->data[s->count - 1] = e ? *e : (CUgraphEdgeData){ 0 };
	return 0;
}

CUgraphEdgeData sim_node_set_edge(const struct sim_node_set *s, unsigned i)
{
	return s->data ? s->data[i] : (CUgraphEdgeData){ 0 };
}

bool sim_node_set_special(const struct sim_node_set *s)
{
	for (unsigned i = 0; s->data && i < s->count; i++)
		if (!edge_data_default(&s->data[i]))
			return true;
	return false;
}

const CUgraphEdgeData *sim_node_set_data(struct sim_node_set *s)
{
	if (!s->data)
		s->data = calloc(s->cap ? s->cap : 1, sizeof(*s->data));
	return s->data;
}

/* Append without looking for @n: the caller knows it is not there. */
static int node_set_push(struct sim_node_set *s, struct sim_gnode *n)
{
	if (s->count == s->cap) {
		unsigned cap = s->cap ? s->cap * 2 : 4;
		struct sim_gnode **p = realloc(s->nodes, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->nodes = p;
		if (s->data) {
			CUgraphEdgeData *d = realloc(s->data, cap * sizeof(*d));

			if (!d)
				return -ENOMEM;
			s->data = d;
		}
		s->cap = cap;
	}
	s->nodes[s->count++] = n;
	return 0;
}

void sim_node_set_clear(struct sim_node_set *s)
{
	free(s->nodes);
	free(s->data);
	memset(s, 0, sizeof(*s));
}

int sim_node_set_copy(struct sim_node_set *dst, const struct sim_node_set *src)
{
	struct sim_node_set n = { 0 };

	for (unsigned i = 0; i < src->count; i++) {
		CUgraphEdgeData e = sim_node_set_edge(src, i);

		if (sim_node_set_add_data(&n, src->nodes[i], &e)) {
			sim_node_set_clear(&n);
			return -ENOMEM;
		}
	}
	sim_node_set_clear(dst);
	*dst = n;
	return 0;
}

/* ---- graphs ------------------------------------------------------------- */

struct sim_graph *sim_graph_new(struct sim *sim, bool owned)
{
	struct sim_graph *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->owned = owned;
	g->next = sim->graphs;
	sim->graphs = g;
	return g;
}

bool sim_graph_live(struct sim *sim, const struct sim_graph *g)
{
	for (struct sim_graph *p = sim->graphs; p; p = p->next)
		if (p == g)
			return true;
	return false;
}

void sim_graph_cond_unref(struct sim *sim, struct sim_cond *c)
{
	if (--c->refs)
		return;
	for (struct sim_cond **p = &sim->conds; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	free(c);
}

/* True when @g has a conditional node (not looking into bodies). */
bool sim_graph_has_cond(const struct sim_graph *g)
{
	for (unsigned i = 0; i < g->count; i++)
		if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
			return true;
	return false;
}

void sim_event_unref(struct sim_event *ev)
{
	if (--ev->pending == 0 && ev->destroyed) {
		sim_node_set_clear(&ev->cdeps);
		free(ev);
	}
}

void sim_graph_gnode_params_release(struct sim *sim, struct sim_gnode *n)
{
	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		free(n->kernel.args);
		free(n->kernel.ptrs);
		free(n->kernel.attrs);
		n->kernel.args = NULL;
		n->kernel.ptrs = NULL;
		n->kernel.attrs = NULL;
		break;
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		if (n->event)
			sim_event_unref(n->event);
		n->event = NULL;
		break;
	case CU_GRAPH_NODE_TYPE_GRAPH:
		if (n->child)
			sim_graph_free(sim, n->child);
		n->child = NULL;
		break;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		for (unsigned k = 0; n->cond.bodies && k < n->cond.size; k++)
			if (n->cond.bodies[k])
				sim_graph_free(sim, n->cond.bodies[k]);
		free(n->cond.bodies);
		n->cond.bodies = NULL;
		if (n->cond.cond)
			sim_graph_cond_unref(sim, n->cond.cond);
		n->cond.cond = NULL;
		break;
	default:
		break;
	}
}

static void gnode_free(struct sim *sim, struct sim_gnode *n)
{
	sim_graph_gnode_params_release(sim, n);
	sim_node_set_clear(&n->deps);
	free(n);
}

void sim_graph_free(struct sim *sim, struct sim_graph *g)
{
	for (struct sim_graph **p = &sim->graphs; *p; p = &(*p)->next)
		if (*p == g) {
			*p = g->next;
			break;
		}
	for (unsigned i = 0; i < g->count; i++)
		gnode_free(sim, g->nodes[i]);
	free(g->nodes);
	free(g->special);
	for (struct sim_exec *x = sim->execs; x; x = x->next)
		if (x->origin == g)
			x->origin = NULL;
	for (struct sim_cond *c = sim->conds, *next; c; c = next) {
		next = c->next;
		if (c->graph == g) {
			c->graph = NULL;
			sim_graph_cond_unref(sim, c);
		}
	}
	free(g);
}

struct sim_gnode *sim_gnode_add(struct sim_graph *g, CUgraphNodeType type, struct sim_gnode *const *deps,
				unsigned ndeps)
{
	struct sim_gnode *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	/* Callers checked the dependencies are distinct. */
	for (unsigned i = 0; i < ndeps; i++)
		if (node_set_push(&n->deps, deps[i])) {
			sim_node_set_clear(&n->deps);
			free(n);
			return NULL;
		}
	if (g->count == g->cap) {
		unsigned cap = g->cap ? g->cap * 2 : 16;
		struct sim_gnode **p = realloc(g->nodes, cap * sizeof(*p));

		if (!p) {
			sim_node_set_clear(&n->deps);
			free(n);
			return NULL;
		}
		g->nodes = p;
		g->cap = cap;
	}
	n->graph = g;
	n->index = g->count;
	n->type = type;
	g->nodes[g->count++] = n;
	return n;
}

/* Remove the node just added (its parameters could not be set). */
void sim_graph_gnode_drop_last(struct sim *sim, struct sim_graph *g)
{
	gnode_free(sim, g->nodes[--g->count]);
}

static int kernel_ptrs_build(struct sim_gnode *n)
{
	struct sim_func *f = n->kernel.fn;

	free(n->kernel.ptrs);
	n->kernel.ptrs = calloc(f->param_count ? f->param_count : 1, sizeof(void *));
	if (!n->kernel.ptrs)
		return -ENOMEM;
	for (uint32_t i = 0; i < f->param_count; i++)
		n->kernel.ptrs[i] = n->kernel.args + f->params[i].offset;
	return 0;
}

/* Parameters of @src into @dst, a node of another graph. */
int sim_graph_gnode_params_copy(struct sim *sim, struct sim_gnode *dst, const struct sim_gnode *src)
{
	switch (src->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		dst->kernel = src->kernel;
		dst->kernel.args = NULL;
		dst->kernel.ptrs = NULL;
		dst->kernel.attrs = NULL;
		if (src->kernel.attrs) {
			dst->kernel.attrs = malloc(SIM_KATTRS * sizeof(*dst->kernel.attrs));
			if (!dst->kernel.attrs)
				return -ENOMEM;
			memcpy(dst->kernel.attrs, src->kernel.attrs, SIM_KATTRS * sizeof(*dst->kernel.attrs));
		}
		if (!src->kernel.fn)
			return 0;       /* its module is gone; a launch refuses it */
		dst->kernel.args = malloc(src->kernel.fn->param_bytes + 1);
		if (!dst->kernel.args)
			return -ENOMEM;
		memcpy(dst->kernel.args, src->kernel.args, src->kernel.fn->param_bytes);
		return kernel_ptrs_build(dst);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		dst->copy = src->copy;
		return 0;
	case CU_GRAPH_NODE_TYPE_MEMSET:
		dst->set = src->set;
		return 0;
	case CU_GRAPH_NODE_TYPE_HOST:
		dst->host = src->host;
		return 0;
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		dst->event = src->event;
		dst->event->pending++;
		return 0;
	case CU_GRAPH_NODE_TYPE_GRAPH:
		dst->child = sim_graph_clone(sim, src->child, true);
		return dst->child ? 0 : -ENOMEM;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		dst->cond = src->cond;
		dst->cond.cond->refs++;
		dst->cond.bodies = calloc(src->cond.size, sizeof(*dst->cond.bodies));
		if (!dst->cond.bodies)
			return -ENOMEM;
		for (unsigned k = 0; k < src->cond.size; k++) {
			dst->cond.bodies[k] = sim_graph_clone(sim, src->cond.bodies[k], true);
			if (!dst->cond.bodies[k])
				return -ENOMEM;
			dst->cond.bodies[k]->body = true;
		}
		return 0;
	default:
		return 0;
	}
}

struct sim_graph *sim_graph_clone(struct sim *sim, const struct sim_graph *g, bool owned)
{
	struct sim_graph *c = sim_graph_new(sim, owned);

	if (!c)
		return NULL;
	/* Nodes first, then dependencies: an edge may point to a later node. */
	for (unsigned i = 0; i < g->count; i++) {
		struct sim_gnode *n = sim_gnode_add(c, g->nodes[i]->type, NULL, 0);

		if (!n)
			goto out_free;
		n->orig = g->nodes[i];
		if (sim_graph_gnode_params_copy(sim, n, g->nodes[i])) {
			n->type = CU_GRAPH_NODE_TYPE_EMPTY;
			goto out_free;
		}
	}
	for (unsigned i = 0; i < g->count; i++)
		for (unsigned j = 0; j < g->nodes[i]->deps.count; j++)
			if (node_set_push(&c->nodes[i]->deps, c->nodes[g->nodes[i]->deps.nodes[j]->index]))
				goto out_free;
	if (g->nspecial) {
		c->special = malloc(g->nspecial * sizeof(*c->special));
		if (!c->special)
			goto out_free;
		for (unsigned k = 0; k < g->nspecial; k++)
			c->special[k] = (struct sim_edge){ c->nodes[g->special[k].from->index],
							   c->nodes[g->special[k].to->index], g->special[k].data };
		c->nspecial = g->nspecial;
	}
	return c;
out_free:
	sim_graph_free(sim, c);
	return NULL;
}

void sim_graphs_forget_funcs(struct sim *sim, const struct sim_func *funcs, unsigned count)
{
	for (struct sim_graph *g = sim->graphs; g; g = g->next)
		for (unsigned i = 0; i < g->count; i++) {
			struct sim_gnode *n = g->nodes[i];

			if (n->type == CU_GRAPH_NODE_TYPE_KERNEL && n->kernel.fn >= funcs &&
			    n->kernel.fn < funcs + count)
				n->kernel.fn = NULL;
		}
}

void sim_graphs_teardown(struct sim *sim)
{
	while (sim->execs) {
		struct sim_exec *x = sim->execs;

		sim->execs = x->next;
		/* With its graph: the graphs its nodes own (children, bodies)
		 * go with it, never before it. */
		sim_graph_free(sim, x->graph);
		free(x->order);
		free(x);
	}
	sim_captures_drop(sim, NULL);
	/* Embedded graphs go with their owners; the rest one by one. */
	while (sim->graphs) {
		struct sim_graph *g = sim->graphs;

		while (g && g->owned)
			g = g->next;
		if (!g)
			g = sim->graphs;
		sim_graph_free(sim, g);
	}
}

/* ---- lookups ------------------------------------------------------------ */

CUresult sim_graph_resolve(struct sim *sim, CUgraph h, struct sim_graph **out)
{
	if (!h || !sim_graph_live(sim, (struct sim_graph *)h))
		return CUDA_ERROR_INVALID_VALUE;
	*out = (struct sim_graph *)h;
	return CUDA_SUCCESS;
}

/* Nodes are pointers the caller got from this backend; the node's graph
 * must still be live and hold it. */
CUresult sim_graph_node_resolve(struct sim *sim, CUgraphNode h, struct sim_gnode **out)
{
	struct sim_gnode *n = (struct sim_gnode *)h;

	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	for (struct sim_graph *g = sim->graphs; g; g = g->next)
		if (g == n->graph) {
			if (n->index >= g->count || g->nodes[n->index] != n)
				break;
			*out = n;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult sim_graph_exec_resolve(struct sim *sim, CUgraphExec h, struct sim_exec **out)
{
	for (struct sim_exec *x = sim->execs; x; x = x->next)
		if ((CUgraphExec)x == h) {
			*out = x;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}

static int ptr_cmp(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;

	return x < y ? -1 : x > y;
}

/* Dependencies: nodes of @g, none twice (sorted, not pairwise). */
CUresult sim_graph_deps_check(struct sim *sim, struct sim_graph *g, const CUgraphNode *deps, size_t n)
{
	uintptr_t *sorted;
	CUresult rc = CUDA_SUCCESS;

	if (n && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < n; i++) {
		struct sim_gnode *d;

		if (sim_graph_node_resolve(sim, deps[i], &d) || d->graph != g)
			return CUDA_ERROR_INVALID_VALUE;
	}
	if (n < 2)
		return CUDA_SUCCESS;
	sorted = malloc(n * sizeof(*sorted));
	if (!sorted)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < n; i++)
		sorted[i] = (uintptr_t)deps[i];
	qsort(sorted, n, sizeof(*sorted), ptr_cmp);
	for (size_t i = 1; i < n && !rc; i++)
		if (sorted[i] == sorted[i - 1])
			rc = CUDA_ERROR_INVALID_VALUE;
	free(sorted);
	return rc;
}

/* Enter with a live graph and valid dependencies. */
CUresult sim_graph_enter_add(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t n,
			  struct sim **psim, struct sim_graph **pg)
{
	CUresult rc;

	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(psim);
	if (rc)
		return rc;
	rc = sim_graph_resolve(*psim, hg, pg);
	if (!rc)
		rc = sim_graph_deps_check(*psim, *pg, deps, n);
	if (rc)
		sim_leave(*psim);
	return rc;
}

/* Enter with a live node, of @type unless @type is -1; returns with the
 * lock held on success. */
CUresult sim_graph_enter_node(CUgraphNode h, int type, struct sim **psim, struct sim_gnode **pn)
{
	CUresult rc = sim_enter(psim);

	if (rc)
		return rc;
	rc = sim_graph_node_resolve(*psim, h, pn);
	if (!rc && type >= 0 && (*pn)->type != (CUgraphNodeType)type)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc)
		sim_leave(*psim);
	return rc;
}

/* A new node of @type after @deps, handed out in *@ph; lock held. */
CUresult sim_graph_node_append(struct sim_graph *g, CUgraphNodeType type, const CUgraphNode *deps, size_t ndeps,
			    CUgraphNode *ph, struct sim_gnode **out)
{
	struct sim_gnode *n;

	/* What a conditional body may hold, as the driver documents it. */
	if (g->body && type != CU_GRAPH_NODE_TYPE_KERNEL && type != CU_GRAPH_NODE_TYPE_EMPTY &&
	    type != CU_GRAPH_NODE_TYPE_GRAPH && type != CU_GRAPH_NODE_TYPE_MEMSET &&
	    type != CU_GRAPH_NODE_TYPE_MEMCPY && type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
		return CUDA_ERROR_INVALID_VALUE;
	n = sim_gnode_add(g, type, (struct sim_gnode *const *)deps, (unsigned)ndeps);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ph = (CUgraphNode)n;
	*out = n;
	return CUDA_SUCCESS;
}

/* ---- node parameters ---------------------------------------------------- */

CUresult sim_graph_kernel_params_set(struct sim *sim, struct sim_gnode *n, const CUDA_KERNEL_NODE_PARAMS *p)
{
	const unsigned grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ };
	const unsigned block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };
	struct sim_func *f;
	uint8_t *args;
	CUresult rc = sim_func_lookup(sim, p->func ? (const void *)p->func : (const void *)p->kern, &f);

	if (!rc)
		rc = sim_kernel_check(f, grid, block, p->sharedMemBytes);
	if (rc)
		return rc;
	args = malloc(f->param_bytes + 1);
	if (!args)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = sim_kernel_args_pack(f, p->kernelParams, p->extra, args);
	if (!rc && !f->cpu) {
		if (!f->warned)
			pr_warn("no CPU version of kernel %s: graph node not supported", f->name);
		f->warned = true;
		rc = CUDA_ERROR_NOT_SUPPORTED;
	}
	if (rc) {
		free(args);
		return rc;
	}
	free(n->kernel.args);
	n->kernel.fn = f;
	n->kernel.args = args;
	memcpy(n->kernel.grid, grid, sizeof(grid));
	memcpy(n->kernel.block, block, sizeof(block));
	n->kernel.shared_bytes = p->sharedMemBytes;
	return kernel_ptrs_build(n) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* One end of a copy: its first byte, and the bytes it spans. */
static CUresult copy_end(CUmemorytype type, CUdeviceptr dev, const void *host, size_t x, size_t y, size_t z,
			 size_t pitch, size_t layer_rows, const CUDA_MEMCPY3D *p, uintptr_t *start,
			 size_t *span)
{
	size_t a, b, base;

	switch (type) {
	case CU_MEMORYTYPE_DEVICE:
	case CU_MEMORYTYPE_UNIFIED:
		base = (size_t)dev;
		break;
	case CU_MEMORYTYPE_HOST:
		base = (size_t)(uintptr_t)host;
		break;
	default:
		return CUDA_ERROR_NOT_SUPPORTED;        /* arrays */
	}
	if (!p->WidthInBytes || !p->Height || !p->Depth)
		return CUDA_ERROR_INVALID_VALUE;
	if ((p->Height > 1 || p->Depth > 1) && pitch < p->WidthInBytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->Depth > 1 && layer_rows < p->Height)
		return CUDA_ERROR_INVALID_VALUE;
	if (__builtin_mul_overflow(z, layer_rows, &a) || __builtin_add_overflow(a, y, &a) ||
	    __builtin_mul_overflow(a, pitch, &a) || __builtin_add_overflow(a, x, &a) ||
	    __builtin_add_overflow(base, a, &a))
		return CUDA_ERROR_INVALID_VALUE;
	*start = a;
	if (__builtin_mul_overflow(p->Depth - 1, layer_rows, &a) || __builtin_mul_overflow(a, pitch, &a) ||
	    __builtin_mul_overflow(p->Height - 1, pitch, &b) || __builtin_add_overflow(a, b, &a) ||
	    __builtin_add_overflow(a, p->WidthInBytes, span))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

CUresult sim_graph_copy_check(struct sim *sim, const CUDA_MEMCPY3D *p, struct copy_geom *g)
{
	CUresult rc;

	if (p->srcLOD || p->dstLOD)
		return CUDA_ERROR_INVALID_VALUE;
	rc = copy_end(p->srcMemoryType, p->srcDevice, p->srcHost, p->srcXInBytes, p->srcY, p->srcZ,
		      p->srcPitch, p->srcHeight, p, &g->src, &g->src_span);
	if (!rc)
		rc = copy_end(p->dstMemoryType, p->dstDevice, p->dstHost, p->dstXInBytes, p->dstY, p->dstZ,
			      p->dstPitch, p->dstHeight, p, &g->dst, &g->dst_span);
	if (rc)
		return rc;
	/* Host ends must be registered: the device reaches nothing else. */
	if (!sim_range_device_ok(sim, g->src, g->src_span, PROT_READ) ||
	    !sim_range_device_ok(sim, g->dst, g->dst_span, PROT_WRITE))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

CUresult sim_graph_memset_check(struct sim *sim, const CUDA_MEMSET_NODE_PARAMS *p)
{
	size_t row, span;

	if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)
		return CUDA_ERROR_INVALID_VALUE;
	if (!p->width || !p->height || p->dst % p->elementSize ||
	    __builtin_mul_overflow(p->width, (size_t)p->elementSize, &row))
		return CUDA_ERROR_INVALID_VALUE;
	if (p->height > 1 && p->pitch < row)
		return CUDA_ERROR_INVALID_VALUE;
	if (__builtin_mul_overflow(p->height - 1, p->pitch, &span) || __builtin_add_overflow(span, row, &span))
		return CUDA_ERROR_INVALID_VALUE;
	return sim_range_device_ok(sim, (uintptr_t)p->dst, span, PROT_WRITE) ? CUDA_SUCCESS
									       : CUDA_ERROR_INVALID_VALUE;
}

/* ---- graph entry points ------------------------------------------------- */

CUresult sim_cuGraphCreate(CUgraph *ph, unsigned int flags)
{
	struct sim_graph *g;
	struct sim *sim;
	CUresult rc;

	if (!ph || flags)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	g = sim_graph_new(sim, false);
	if (g)
		*ph = (CUgraph)g;
	else
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphDestroy(CUgraph h)
{
	struct sim_graph *g;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_graph_resolve(sim, h, &g);
	if (!rc && (g->owned || g->capture))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		sim_graph_free(sim, g);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphClone(CUgraph *ph, CUgraph h)
{
	struct sim_graph *g, *c;
	struct sim *sim;
	CUresult rc;

	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_graph_resolve(sim, h, &g);
	/* "The graph cannot be cloned" (cuda.h, CU_GRAPH_NODE_TYPE_CONDITIONAL). */
	if (!rc && sim_graph_has_cond(g))
		rc = CUDA_ERROR_NOT_SUPPORTED;
	if (!rc) {
		c = sim_graph_clone(sim, g, false);
		if (c)
			*ph = (CUgraph)c;
		else
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphNodeFindInClone(CUgraphNode *ph, CUgraphNode orig, CUgraph hclone)
{
	struct sim_graph *c;
	struct sim *sim;
	CUresult rc;

	if (!ph || !orig)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_graph_resolve(sim, hclone, &c);
	if (!rc) {
		struct sim_gnode *o;
		unsigned i = 0;

		/* A clone keeps its original's order until nodes are destroyed:
		 * look where the node was first. */
		if (!sim_graph_node_resolve(sim, orig, &o) && o->index < c->count && c->nodes[o->index]->orig == o)
			i = o->index;
		while (i < c->count && c->nodes[i]->orig != (const struct sim_gnode *)orig)
			i++;
		if (i < c->count)
			*ph = (CUgraphNode)c->nodes[i];
		else
			rc = CUDA_ERROR_INVALID_VALUE;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *num)
{
	struct sim_graph *g;
	struct sim *sim;
	CUresult rc;

	if (!num)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_graph_resolve(sim, h, &g);
	if (!rc && nodes) {
		for (size_t i = 0; i < *num; i++)
			nodes[i] = i < g->count ? (CUgraphNode)g->nodes[i] : NULL;
		if (*num > g->count)
			*num = g->count;
	} else if (!rc) {
		*num = g->count;
	}
	sim_leave(sim);
	return rc;
}

/* Where @from -> @to is in @g's special edges, or g->nspecial. */
static unsigned special_find(const struct sim_graph *g, const struct sim_gnode *from, const struct sim_gnode *to)
{
	unsigned k = 0;

	while (k < g->nspecial && (g->special[k].from != from || g->special[k].to != to))
		k++;
	return k;
}

/* The data of the edge @from -> @to of @g. */
static CUgraphEdgeData edge_data_of(const struct sim_graph *g, const struct sim_gnode *from,
				    const struct sim_gnode *to)
{
	unsigned k = special_find(g, from, to);

	return k < g->nspecial ? g->special[k].data : (CUgraphEdgeData){ 0 };
}

CUresult sim_cuGraphGetEdges(CUgraph h, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data, size_t *num)
{
	struct sim_graph *g;
	struct sim *sim;
	size_t e = 0;
	CUresult rc;

	if (!num || (!from) != (!to) || (data && !from))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_graph_resolve(sim, h, &g);
	for (unsigned i = 0; !rc && i < g->count; i++)
		for (unsigned j = 0; !rc && j < g->nodes[i]->deps.count; j++, e++) {
			CUgraphEdgeData x = edge_data_of(g, g->nodes[i]->deps.nodes[j], g->nodes[i]);

			if (!from || e >= *num)
				continue;
			/* The driver's answer when the data has nowhere to go. */
			if (!data && !edge_data_default(&x))
				rc = CUDA_ERROR_LOSSY_QUERY;
			from[e] = (CUgraphNode)g->nodes[i]->deps.nodes[j];
			to[e] = (CUgraphNode)g->nodes[i];
			if (data)
				data[e] = x;
		}
	if (!rc) {
		for (size_t k = e; from && k < *num; k++) {
			from[k] = to[k] = NULL;
			if (data)
				data[k] = (CUgraphEdgeData){ 0 };
		}
		if (!from || *num > e)
			*num = e;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *type)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!type)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_node(h, -1, &sim, &n);
	if (rc)
		return rc;
	*type = n->type;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

bool sim_edge_data_ok(const CUgraphEdgeData *e, CUgraphNodeType from, CUgraphNodeType to)
{
	struct graph_edge_data d = { e->from_port, e->to_port, e->type };

	for (size_t k = 0; k < sizeof(e->reserved); k++)
		if (e->reserved[k])
			return false;
	return graph_edge_data_ok(&d, from, to);
}

int sim_graph_edges_keep(struct sim_graph *g, const struct sim_node_set *deps, const struct sim_gnode *to)
{
	unsigned more = 0;
	struct sim_edge *sp;

	for (unsigned i = 0; deps->data && i < deps->count; i++)
		more += !edge_data_default(&deps->data[i]);
	if (!more)
		return 0;
	sp = realloc(g->special, (g->nspecial + more) * sizeof(*sp));
	if (!sp)
		return -ENOMEM;
	g->special = sp;
	for (unsigned i = 0; i < deps->count; i++)
		if (!edge_data_default(&deps->data[i]))
			g->special[g->nspecial++] = (struct sim_edge){ deps->nodes[i], to, deps->data[i] };
	return 0;
}

/* Add or remove edges, all or none; a removed edge must carry the data
 * given (default when @data is NULL). The driver allows cycles until
 * instantiation; so does the sim. */
static CUresult edges_edit(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *data,
			   size_t n, bool add)
{
	struct sim_graph *g;
	struct sim *sim;
	CUresult rc;
	unsigned more = 0;

	if (n && (!from || !to))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_graph_resolve(sim, h, &g);
	for (size_t i = 0; !rc && i < n; i++) {
		static const CUgraphEdgeData zero;
		const CUgraphEdgeData *e = data ? &data[i] : &zero;
		struct sim_gnode *a, *b;
		bool present = false;

		rc = sim_graph_node_resolve(sim, from[i], &a);
		if (!rc)
			rc = sim_graph_node_resolve(sim, to[i], &b);
		if (!rc && (a->graph != g || b->graph != g || a == b || !sim_edge_data_ok(e, a->type, b->type)))
			rc = CUDA_ERROR_INVALID_VALUE;
		for (unsigned j = 0; !rc && j < b->deps.count; j++)
			present |= b->deps.nodes[j] == a;
		if (!rc && present == add)
			rc = CUDA_ERROR_INVALID_VALUE;
		if (!rc && !add && !edge_data_default(e)) {
			CUgraphEdgeData had = edge_data_of(g, a, b);

			/* Default data removes any edge (the H100's driver). */
			if (memcmp(&had, e, sizeof(had)))
				rc = CUDA_ERROR_INVALID_VALUE;
		}
		if (!rc && add && !edge_data_default(e))
			more++;
	}
	if (!rc && more) {
		struct sim_edge *sp = realloc(g->special, (g->nspecial + more) * sizeof(*sp));

		if (sp)
			g->special = sp;
		else
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (size_t i = 0; !rc && i < n; i++) {
		struct sim_gnode *a = (struct sim_gnode *)from[i], *b = (struct sim_gnode *)to[i];
		unsigned k = special_find(g, a, b);

		if (add) {
			if (sim_node_set_add(&b->deps, a))
				rc = CUDA_ERROR_OUT_OF_MEMORY;
			else if (data && !edge_data_default(&data[i]))
				g->special[g->nspecial++] = (struct sim_edge){ a, b, data[i] };
			continue;
		}
		if (k < g->nspecial)
			g->special[k] = g->special[--g->nspecial];
		for (unsigned j = 0; j < b->deps.count; j++)
			if (b->deps.nodes[j] == a) {
				b->deps.nodes[j] = b->deps.nodes[--b->deps.count];
				break;
			}
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphAddDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to,
				    const CUgraphEdgeData *data, size_t n)
{
	return edges_edit(h, from, to, data, n, true);
}

CUresult sim_cuGraphRemoveDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to,
				       const CUgraphEdgeData *data, size_t n)
{
	return edges_edit(h, from, to, data, n, false);
}

CUresult sim_cuGraphDestroyNode(CUgraphNode h)
{
	struct sim_gnode *n;
	struct sim_graph *g;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_graph_node_resolve(sim, h, &n);
	if (!rc) {
		g = n->graph;
		for (unsigned i = 0; i < g->count; i++) {
			struct sim_node_set *d = &g->nodes[i]->deps;

			for (unsigned j = 0; j < d->count; j++)
				if (d->nodes[j] == n) {
					d->nodes[j] = d->nodes[--d->count];
					break;
				}
		}
		for (unsigned k = 0; k < g->nspecial;)
			if (g->special[k].from == n || g->special[k].to == n)
				g->special[k] = g->special[--g->nspecial];
			else
				k++;
		memmove(g->nodes + n->index, g->nodes + n->index + 1,
			(g->count - n->index - 1) * sizeof(*g->nodes));
		g->count--;
		for (unsigned i = n->index; i < g->count; i++)
			g->nodes[i]->index = i;
		gnode_free(sim, n);
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphAddKernelNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
				  const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct sim_graph *g;
	struct sim_gnode *n = NULL;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = sim_graph_node_append(g, CU_GRAPH_NODE_TYPE_KERNEL, deps, ndeps, ph, &n);
	if (!rc)
		rc = sim_graph_kernel_params_set(sim, n, p);
	if (rc && n)
		sim_graph_gnode_drop_last(sim, g);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphKernelNodeGetParams(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS *p)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_node(h, CU_GRAPH_NODE_TYPE_KERNEL, &sim, &n);
	if (rc)
		return rc;
	if (!n->kernel.fn) {
		rc = CUDA_ERROR_INVALID_VALUE;  /* its module is gone */
	} else {
		memset(p, 0, sizeof(*p));
		p->func = (CUfunction)n->kernel.fn;
		p->gridDimX = n->kernel.grid[0];
		p->gridDimY = n->kernel.grid[1];
		p->gridDimZ = n->kernel.grid[2];
		p->blockDimX = n->kernel.block[0];
		p->blockDimY = n->kernel.block[1];
		p->blockDimZ = n->kernel.block[2];
		p->sharedMemBytes = n->kernel.shared_bytes;
		p->kernelParams = n->kernel.ptrs;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphKernelNodeSetParams(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_node(h, CU_GRAPH_NODE_TYPE_KERNEL, &sim, &n);
	if (rc)
		return rc;
	rc = sim_graph_kernel_params_set(sim, n, p);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphAddMemcpyNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
				  const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	struct copy_geom geom;
	struct sim_graph *g;
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	(void)ctx;      /* one context per device */
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = sim_graph_copy_check(sim, p, &geom);
	if (!rc)
		rc = sim_graph_node_append(g, CU_GRAPH_NODE_TYPE_MEMCPY, deps, ndeps, ph, &n);
	if (!rc)
		n->copy = *p;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphMemcpyNodeGetParams(CUgraphNode h, CUDA_MEMCPY3D *p)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_node(h, CU_GRAPH_NODE_TYPE_MEMCPY, &sim, &n);
	if (rc)
		return rc;
	*p = n->copy;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuGraphAddMemsetNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
				  const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
	struct sim_graph *g;
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	(void)ctx;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = sim_graph_memset_check(sim, p);
	if (!rc)
		rc = sim_graph_node_append(g, CU_GRAPH_NODE_TYPE_MEMSET, deps, ndeps, ph, &n);
	if (!rc)
		n->set = *p;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphMemsetNodeGetParams(CUgraphNode h, CUDA_MEMSET_NODE_PARAMS *p)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_node(h, CU_GRAPH_NODE_TYPE_MEMSET, &sim, &n);
	if (rc)
		return rc;
	*p = n->set;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuGraphAddEmptyNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t ndeps)
{
	struct sim_graph *g;
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	rc = sim_graph_enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = sim_graph_node_append(g, CU_GRAPH_NODE_TYPE_EMPTY, deps, ndeps, ph, &n);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphAddChildGraphNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
				      CUgraph hchild)
{
	struct sim_graph *g, *child;
	struct sim_gnode *n = NULL;
	struct sim *sim;
	CUresult rc;

	rc = sim_graph_enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = sim_graph_resolve(sim, hchild, &child);
	if (!rc && (child == g || child->capture))
		rc = CUDA_ERROR_INVALID_VALUE;
	/* "The graph cannot be used in a child node." */
	if (!rc && sim_graph_has_cond(child))
		rc = CUDA_ERROR_NOT_SUPPORTED;
	if (!rc)
		rc = sim_graph_node_append(g, CU_GRAPH_NODE_TYPE_GRAPH, deps, ndeps, ph, &n);
	if (!rc && !(n->child = sim_graph_clone(sim, child, true))) {
		sim_graph_gnode_drop_last(sim, g);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphChildGraphNodeGetGraph(CUgraphNode h, CUgraph *ph)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_node(h, CU_GRAPH_NODE_TYPE_GRAPH, &sim, &n);
	if (rc)
		return rc;
	*ph = (CUgraph)n->child;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

static CUresult event_node_add(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
			       CUevent hev, CUgraphNodeType type)
{
	struct sim_event *ev;
	struct sim_graph *g;
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	rc = sim_graph_enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = sim_event_lookup(sim, hev, &ev);
	if (!rc)
		rc = sim_graph_node_append(g, type, deps, ndeps, ph, &n);
	if (!rc) {
		n->event = ev;
		ev->pending++;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphAddEventRecordNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
				       CUevent ev)
{
	return event_node_add(ph, hg, deps, ndeps, ev, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

CUresult sim_cuGraphAddEventWaitNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
				     CUevent ev)
{
	return event_node_add(ph, hg, deps, ndeps, ev, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

static CUresult event_node_get(CUgraphNode h, CUevent *out, CUgraphNodeType type)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_node(h, type, &sim, &n);
	if (rc)
		return rc;
	*out = (CUevent)n->event;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuGraphEventRecordNodeGetEvent(CUgraphNode h, CUevent *out)
{
	return event_node_get(h, out, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

CUresult sim_cuGraphEventWaitNodeGetEvent(CUgraphNode h, CUevent *out)
{
	return event_node_get(h, out, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

CUresult sim_cuGraphAddHostNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
				const CUDA_HOST_NODE_PARAMS *p)
{
	struct sim_graph *g;
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = sim_graph_node_append(g, CU_GRAPH_NODE_TYPE_HOST, deps, ndeps, ph, &n);
	if (!rc)
		n->host = *p;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphHostNodeGetParams(CUgraphNode h, CUDA_HOST_NODE_PARAMS *p)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_node(h, CU_GRAPH_NODE_TYPE_HOST, &sim, &n);
	if (rc)
		return rc;
	*p = n->host;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuGraphHostNodeSetParams(CUgraphNode h, const CUDA_HOST_NODE_PARAMS *p)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_graph_enter_node(h, CU_GRAPH_NODE_TYPE_HOST, &sim, &n);
	if (rc)
		return rc;
	n->host = *p;
	sim_leave(sim);
	return CUDA_SUCCESS;
}
