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

/* ---- node sets ---------------------------------------------------------- */

static int node_set_push(struct sim_node_set *s, struct sim_gnode *n);

int sim_node_set_add(struct sim_node_set *s, struct sim_gnode *n)
{
	for (unsigned i = 0; i < s->count; i++)
		if (s->nodes[i] == n)
			return 0;
	return node_set_push(s, n);
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
		s->cap = cap;
	}
	s->nodes[s->count++] = n;
	return 0;
}

void sim_node_set_clear(struct sim_node_set *s)
{
	free(s->nodes);
	memset(s, 0, sizeof(*s));
}

int sim_node_set_copy(struct sim_node_set *dst, const struct sim_node_set *src)
{
	struct sim_node_set n = { 0 };

	for (unsigned i = 0; i < src->count; i++)
		if (sim_node_set_add(&n, src->nodes[i])) {
			sim_node_set_clear(&n);
			return -ENOMEM;
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

static void cond_unref(struct sim *sim, struct sim_cond *c)
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
static bool graph_has_cond(const struct sim_graph *g)
{
	for (unsigned i = 0; i < g->count; i++)
		if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
			return true;
	return false;
}

static void sim_event_unref(struct sim_event *ev)
{
	if (--ev->pending == 0 && ev->destroyed) {
		sim_node_set_clear(&ev->cdeps);
		free(ev);
	}
}

static void gnode_params_release(struct sim *sim, struct sim_gnode *n)
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
			cond_unref(sim, n->cond.cond);
		n->cond.cond = NULL;
		break;
	default:
		break;
	}
}

static void gnode_free(struct sim *sim, struct sim_gnode *n)
{
	gnode_params_release(sim, n);
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
	for (struct sim_exec *x = sim->execs; x; x = x->next)
		if (x->origin == g)
			x->origin = NULL;
	for (struct sim_cond *c = sim->conds, *next; c; c = next) {
		next = c->next;
		if (c->graph == g) {
			c->graph = NULL;
			cond_unref(sim, c);
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
static void gnode_drop_last(struct sim *sim, struct sim_graph *g)
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
static int gnode_params_copy(struct sim *sim, struct sim_gnode *dst, const struct sim_gnode *src)
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
		if (gnode_params_copy(sim, n, g->nodes[i])) {
			n->type = CU_GRAPH_NODE_TYPE_EMPTY;
			goto out_free;
		}
	}
	for (unsigned i = 0; i < g->count; i++)
		for (unsigned j = 0; j < g->nodes[i]->deps.count; j++)
			if (node_set_push(&c->nodes[i]->deps, c->nodes[g->nodes[i]->deps.nodes[j]->index]))
				goto out_free;
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

static CUresult graph_resolve(struct sim *sim, CUgraph h, struct sim_graph **out)
{
	if (!h || !sim_graph_live(sim, (struct sim_graph *)h))
		return CUDA_ERROR_INVALID_VALUE;
	*out = (struct sim_graph *)h;
	return CUDA_SUCCESS;
}

/* Nodes are pointers the caller got from this backend; the node's graph
 * must still be live and hold it. */
static CUresult node_resolve(struct sim *sim, CUgraphNode h, struct sim_gnode **out)
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

static CUresult exec_resolve(struct sim *sim, CUgraphExec h, struct sim_exec **out)
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
static CUresult deps_check(struct sim *sim, struct sim_graph *g, const CUgraphNode *deps, size_t n)
{
	uintptr_t *sorted;
	CUresult rc = CUDA_SUCCESS;

	if (n && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < n; i++) {
		struct sim_gnode *d;

		if (node_resolve(sim, deps[i], &d) || d->graph != g)
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
static CUresult enter_add(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t n,
			  struct sim **psim, struct sim_graph **pg)
{
	CUresult rc;

	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(psim);
	if (rc)
		return rc;
	rc = graph_resolve(*psim, hg, pg);
	if (!rc)
		rc = deps_check(*psim, *pg, deps, n);
	if (rc)
		sim_leave(*psim);
	return rc;
}

/* Enter with a live node, of @type unless @type is -1; returns with the
 * lock held on success. */
static CUresult enter_node(CUgraphNode h, int type, struct sim **psim, struct sim_gnode **pn)
{
	CUresult rc = sim_enter(psim);

	if (rc)
		return rc;
	rc = node_resolve(*psim, h, pn);
	if (!rc && type >= 0 && (*pn)->type != (CUgraphNodeType)type)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc)
		sim_leave(*psim);
	return rc;
}

/* A new node of @type after @deps, handed out in *@ph; lock held. */
static CUresult node_append(struct sim_graph *g, CUgraphNodeType type, const CUgraphNode *deps, size_t ndeps,
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

static CUresult kernel_params_set(struct sim *sim, struct sim_gnode *n, const CUDA_KERNEL_NODE_PARAMS *p)
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

struct copy_geom {
	uintptr_t src, dst;
	size_t src_span, dst_span;
};

static CUresult copy_check(struct sim *sim, const CUDA_MEMCPY3D *p, struct copy_geom *g)
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

static CUresult memset_check(struct sim *sim, const CUDA_MEMSET_NODE_PARAMS *p)
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
	rc = graph_resolve(sim, h, &g);
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
	rc = graph_resolve(sim, h, &g);
	/* "The graph cannot be cloned" (cuda.h, CU_GRAPH_NODE_TYPE_CONDITIONAL). */
	if (!rc && graph_has_cond(g))
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
	rc = graph_resolve(sim, hclone, &c);
	if (!rc) {
		struct sim_gnode *o;
		unsigned i = 0;

		/* A clone keeps its original's order until nodes are destroyed:
		 * look where the node was first. */
		if (!node_resolve(sim, orig, &o) && o->index < c->count && c->nodes[o->index]->orig == o)
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
	rc = graph_resolve(sim, h, &g);
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

CUresult sim_cuGraphGetEdges(CUgraph h, CUgraphNode *from, CUgraphNode *to, size_t *num)
{
	struct sim_graph *g;
	struct sim *sim;
	size_t e = 0;
	CUresult rc;

	if (!num || (!from) != (!to))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = graph_resolve(sim, h, &g);
	for (unsigned i = 0; !rc && i < g->count; i++)
		for (unsigned j = 0; j < g->nodes[i]->deps.count; j++, e++)
			if (from && e < *num) {
				from[e] = (CUgraphNode)g->nodes[i]->deps.nodes[j];
				to[e] = (CUgraphNode)g->nodes[i];
			}
	if (!rc) {
		for (size_t k = e; from && k < *num; k++)
			from[k] = to[k] = NULL;
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
	rc = enter_node(h, -1, &sim, &n);
	if (rc)
		return rc;
	*type = n->type;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

/* Would @from -> @to close a cycle? (Is @to an ancestor of @from?) The
 * driver allows cycles until instantiation; so does the sim. */
static CUresult edges_edit(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, size_t n, bool add)
{
	struct sim_graph *g;
	struct sim *sim;
	CUresult rc;

	if (n && (!from || !to))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = graph_resolve(sim, h, &g);
	for (size_t i = 0; !rc && i < n; i++) {
		struct sim_gnode *a, *b;
		bool present = false;

		rc = node_resolve(sim, from[i], &a);
		if (!rc)
			rc = node_resolve(sim, to[i], &b);
		if (!rc && (a->graph != g || b->graph != g || a == b))
			rc = CUDA_ERROR_INVALID_VALUE;
		for (unsigned j = 0; !rc && j < b->deps.count; j++)
			present |= b->deps.nodes[j] == a;
		if (!rc && present == add)
			rc = CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; !rc && i < n; i++) {
		struct sim_gnode *a = (struct sim_gnode *)from[i], *b = (struct sim_gnode *)to[i];

		if (add) {
			if (sim_node_set_add(&b->deps, a))
				rc = CUDA_ERROR_OUT_OF_MEMORY;
			continue;
		}
		for (unsigned j = 0; j < b->deps.count; j++)
			if (b->deps.nodes[j] == a) {
				b->deps.nodes[j] = b->deps.nodes[--b->deps.count];
				break;
			}
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphAddDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
	return edges_edit(h, from, to, n, true);
}

CUresult sim_cuGraphRemoveDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
	return edges_edit(h, from, to, n, false);
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
	rc = node_resolve(sim, h, &n);
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
	rc = enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = node_append(g, CU_GRAPH_NODE_TYPE_KERNEL, deps, ndeps, ph, &n);
	if (!rc)
		rc = kernel_params_set(sim, n, p);
	if (rc && n)
		gnode_drop_last(sim, g);
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
	rc = enter_node(h, CU_GRAPH_NODE_TYPE_KERNEL, &sim, &n);
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
	rc = enter_node(h, CU_GRAPH_NODE_TYPE_KERNEL, &sim, &n);
	if (rc)
		return rc;
	rc = kernel_params_set(sim, n, p);
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
	rc = enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = copy_check(sim, p, &geom);
	if (!rc)
		rc = node_append(g, CU_GRAPH_NODE_TYPE_MEMCPY, deps, ndeps, ph, &n);
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
	rc = enter_node(h, CU_GRAPH_NODE_TYPE_MEMCPY, &sim, &n);
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
	rc = enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = memset_check(sim, p);
	if (!rc)
		rc = node_append(g, CU_GRAPH_NODE_TYPE_MEMSET, deps, ndeps, ph, &n);
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
	rc = enter_node(h, CU_GRAPH_NODE_TYPE_MEMSET, &sim, &n);
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

	rc = enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = node_append(g, CU_GRAPH_NODE_TYPE_EMPTY, deps, ndeps, ph, &n);
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

	rc = enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = graph_resolve(sim, hchild, &child);
	if (!rc && (child == g || child->capture))
		rc = CUDA_ERROR_INVALID_VALUE;
	/* "The graph cannot be used in a child node." */
	if (!rc && graph_has_cond(child))
		rc = CUDA_ERROR_NOT_SUPPORTED;
	if (!rc)
		rc = node_append(g, CU_GRAPH_NODE_TYPE_GRAPH, deps, ndeps, ph, &n);
	if (!rc && !(n->child = sim_graph_clone(sim, child, true))) {
		gnode_drop_last(sim, g);
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
	rc = enter_node(h, CU_GRAPH_NODE_TYPE_GRAPH, &sim, &n);
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

	rc = enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = sim_event_lookup(sim, hev, &ev);
	if (!rc)
		rc = node_append(g, type, deps, ndeps, ph, &n);
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
	rc = enter_node(h, type, &sim, &n);
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
	rc = enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	rc = node_append(g, CU_GRAPH_NODE_TYPE_HOST, deps, ndeps, ph, &n);
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
	rc = enter_node(h, CU_GRAPH_NODE_TYPE_HOST, &sim, &n);
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
	rc = enter_node(h, CU_GRAPH_NODE_TYPE_HOST, &sim, &n);
	if (rc)
		return rc;
	n->host = *p;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

/* ---- executable graphs -------------------------------------------------- */

struct order {
	struct sim_gnode **nodes;
	unsigned count, cap;
};

static int order_push(struct order *o, struct sim_gnode *n)
{
	if (o->count == o->cap) {
		unsigned cap = o->cap ? o->cap * 2 : 64;
		struct sim_gnode **p = realloc(o->nodes, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		o->nodes = p;
		o->cap = cap;
	}
	o->nodes[o->count++] = n;
	return 0;
}

/* Kahn's algorithm over @g, roots in index order; child graphs flattened
 * in their node's place. -ELOOP for a cycle. O(nodes + edges). */
static int order_build(const struct sim_graph *g, struct order *o, unsigned depth)
{
	unsigned *pending, *queue, *first, *succ, head = 0, tail = 0, edges = 0;
	int ret = 0;

	if (depth > 64)
		return -ELOOP;
	for (unsigned i = 0; i < g->count; i++)
		edges += g->nodes[i]->deps.count;
	pending = calloc(g->count + 1, sizeof(unsigned));
	queue = calloc(g->count + 1, sizeof(unsigned));
	first = calloc(g->count + 2, sizeof(unsigned));
	succ = calloc(edges + 1, sizeof(unsigned));
	if (!pending || !queue || !first || !succ) {
		ret = -ENOMEM;
		goto out;
	}
	/* Successors of each node, in one array: first[i] .. first[i + 1]. */
	for (unsigned i = 0; i < g->count; i++)
		for (unsigned j = 0; j < g->nodes[i]->deps.count; j++)
			first[g->nodes[i]->deps.nodes[j]->index + 2]++;
	for (unsigned i = 2; i < g->count + 2; i++)
		first[i] += first[i - 1];
	for (unsigned i = 0; i < g->count; i++)
		for (unsigned j = 0; j < g->nodes[i]->deps.count; j++)
			succ[first[g->nodes[i]->deps.nodes[j]->index + 1]++] = i;
	for (unsigned i = 0; i < g->count; i++) {
		pending[i] = g->nodes[i]->deps.count;
		if (!pending[i])
			queue[tail++] = i;
	}
	while (head < tail && !ret) {
		unsigned at = queue[head++];
		struct sim_gnode *n = g->nodes[at];

		if (n->type == CU_GRAPH_NODE_TYPE_GRAPH)
			ret = order_build(n->child, o, depth + 1);
		else if (n->type != CU_GRAPH_NODE_TYPE_EMPTY)
			ret = order_push(o, n);
		for (unsigned k = first[at]; k < first[at + 1]; k++)
			if (--pending[succ[k]] == 0)
				queue[tail++] = succ[k];
	}
	if (!ret && head != g->count)
		ret = -ELOOP;
out:
	free(pending);
	free(queue);
	free(first);
	free(succ);
	return ret;
}

CUresult sim_cuGraphInstantiateWithParams(CUgraphExec *ph, CUgraph hg, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	const cuuint64_t known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
				 CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
				 CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
	struct order o = { 0 };
	struct sim_graph *g;
	struct sim_exec *x;
	struct sim_stream *s;
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;
	int ret;

	if (!ph || !p)
		return CUDA_ERROR_INVALID_VALUE;
	p->hErrNode_out = NULL;
	p->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
	if (p->flags & ~known)
		return p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH ? CUDA_ERROR_NOT_SUPPORTED
									     : CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = graph_resolve(sim, hg, &g);
	if (!rc && g->capture)
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	/* "Only one instantiation of the graph may exist at any point in time." */
	for (struct sim_exec *e = sim->execs; !rc && e; e = e->next)
		if (e->origin == g && graph_has_cond(g))
			rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc && p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
		rc = sim_ctx_require(sim, &ctx);
		if (!rc)
			rc = sim_stream_resolve(sim, p->hUploadStream, ctx, &s);
	}
	if (rc)
		goto out;
	x = calloc(1, sizeof(*x));
	if (!x || !(x->graph = sim_graph_clone(sim, g, true))) {
		free(x);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	ret = order_build(x->graph, &o, 0);
	if (ret) {
		free(o.nodes);
		sim_graph_free(sim, x->graph);
		free(x);
		if (ret == -ELOOP)
			p->result_out = CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE;
		rc = ret == -ELOOP ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	x->order = o.nodes;
	x->count = o.count;
	x->flags = p->flags;
	x->origin = g;
	x->next = sim->execs;
	sim->execs = x;
	*ph = (CUgraphExec)x;
	p->result_out = CUDA_GRAPH_INSTANTIATE_SUCCESS;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphExecDestroy(CUgraphExec h)
{
	struct sim_exec *x;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = exec_resolve(sim, h, &x);
	if (!rc) {
		for (struct sim_exec **p = &sim->execs; *p; p = &(*p)->next)
			if (*p == x) {
				*p = x->next;
				break;
			}
		/* Queued launches hold copies of everything they need. */
		sim_graph_free(sim, x->graph);
		free(x->order);
		free(x);
	}
	sim_leave(sim);
	return rc;
}

static CUresult cond_cmd(struct sim *sim, struct sim_stream *s, struct sim_gnode *n, struct sim_cmd **q);

/* The commands of one node, appended to @q. */
static CUresult node_cmds(struct sim *sim, struct sim_stream *s, struct sim_gnode *n, struct sim_cmd **q)
{
	struct sim_cmd *cmd;

	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		if (!n->kernel.fn)
			return CUDA_ERROR_INVALID_HANDLE;       /* its module was unloaded */
		cmd = sim_kernel_cmd_new(n->kernel.fn, n->kernel.args, n->kernel.grid, n->kernel.block,
					 n->kernel.shared_bytes);
		if (!cmd)
			return CUDA_ERROR_OUT_OF_MEMORY;
		cmd->next = *q;
		*q = cmd;
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_MEMCPY: {
		const CUDA_MEMCPY3D *p = &n->copy;
		struct copy_geom geom;
		CUresult rc = copy_check(sim, p, &geom);

		if (rc)
			return rc;
		for (size_t z = 0; z < p->Depth; z++)
			for (size_t y = 0; y < p->Height; y++) {
				cmd = sim_cmd_new(SIM_CMD_COPY);
				if (!cmd)
					return CUDA_ERROR_OUT_OF_MEMORY;
				cmd->copy.src = (const void *)(geom.src + (z * p->srcHeight + y) * p->srcPitch);
				cmd->copy.dst = (void *)(geom.dst + (z * p->dstHeight + y) * p->dstPitch);
				cmd->copy.bytes = p->WidthInBytes;
				cmd->next = *q;
				*q = cmd;
			}
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		const CUDA_MEMSET_NODE_PARAMS *p = &n->set;
		CUresult rc = memset_check(sim, p);

		if (rc)
			return rc;
		for (size_t y = 0; y < p->height; y++) {
			cmd = sim_cmd_new(SIM_CMD_MEMSET);
			if (!cmd)
				return CUDA_ERROR_OUT_OF_MEMORY;
			cmd->memset.dst = (void *)(uintptr_t)(p->dst + y * p->pitch);
			cmd->memset.value = p->value;
			cmd->memset.elem = p->elementSize;
			cmd->memset.count = p->width;
			cmd->next = *q;
			*q = cmd;
		}
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_HOST:
		cmd = sim_cmd_new(SIM_CMD_HOST);
		if (!cmd)
			return CUDA_ERROR_OUT_OF_MEMORY;
		cmd->host.fn = n->host.fn;
		cmd->host.data = n->host.userData;
		cmd->next = *q;
		*q = cmd;
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		cmd = sim_cmd_new(SIM_CMD_EVENT);
		if (!cmd)
			return CUDA_ERROR_OUT_OF_MEMORY;
		cmd->event.ev = n->event;
		cmd->next = *q;
		*q = cmd;
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		return cond_cmd(sim, s, n, q);
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		/* The device's FIFO orders its own records; only another
		 * device's event needs a wait. */
		if (n->event->ctx->dev == s->ctx->dev)
			return CUDA_SUCCESS;
		cmd = sim_cmd_new(SIM_CMD_WAIT);
		if (!cmd)
			return CUDA_ERROR_OUT_OF_MEMORY;
		cmd->event.ev = n->event;
		cmd->next = *q;
		*q = cmd;
		return CUDA_SUCCESS;
	default:
		return CUDA_SUCCESS;
	}
}

/* ---- conditional nodes -------------------------------------------------- */

static void cmds_free(struct sim_cmd *q)
{
	while (q) {
		struct sim_cmd *c = q;

		q = c->next;
		sim_cmd_free(c);
	}
}

/* The commands of body @g, in its order, into *@out (first to run first). */
static CUresult body_cmds(struct sim *sim, struct sim_stream *s, const struct sim_graph *g, struct sim_cmd **out)
{
	struct order o = { 0 };
	struct sim_cmd *q = NULL;
	CUresult rc = CUDA_SUCCESS;
	int ret = order_build(g, &o, 0);

	*out = NULL;
	if (ret) {
		free(o.nodes);
		return ret == -ELOOP ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (unsigned i = 0; i < o.count && !rc; i++)
		rc = node_cmds(sim, s, o.nodes[i], &q);
	free(o.nodes);
	while (q) {
		struct sim_cmd *c = q;

		q = c->next;
		c->next = *out;
		*out = c;
	}
	if (rc) {
		cmds_free(*out);
		*out = NULL;
	}
	return rc;
}

/* A conditional node's command: copies of its bodies (a queued launch
 * holds everything it needs), each checked now as a launch checks its
 * nodes. */
static CUresult cond_cmd(struct sim *sim, struct sim_stream *s, struct sim_gnode *n, struct sim_cmd **q)
{
	struct sim_cmd *cmd = sim_cmd_new(SIM_CMD_COND), *check;
	CUresult rc = CUDA_SUCCESS;

	if (!cmd)
		return CUDA_ERROR_OUT_OF_MEMORY;
	cmd->cond.cond = n->cond.cond;
	n->cond.cond->refs++;
	cmd->cond.type = n->cond.type;
	cmd->cond.size = n->cond.size;
	cmd->cond.bodies = calloc(n->cond.size, sizeof(*cmd->cond.bodies));
	if (!cmd->cond.bodies)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned k = 0; k < n->cond.size && !rc; k++) {
		cmd->cond.bodies[k] = sim_graph_clone(sim, n->cond.bodies[k], true);
		if (!cmd->cond.bodies[k]) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		cmd->cond.bodies[k]->body = true;
		rc = body_cmds(sim, s, cmd->cond.bodies[k], &check);
		cmds_free(check);
	}
	if (rc) {
		sim_cmd_free(cmd);
		return rc;
	}
	cmd->next = *q;
	*q = cmd;
	return CUDA_SUCCESS;
}

/* A reset to its default of every handle with CU_GRAPH_COND_ASSIGN_DEFAULT
 * that a conditional node of @g (bodies and children included) uses. */
static CUresult cond_resets(const struct sim_graph *g, struct sim_cmd **q, unsigned depth)
{
	CUresult rc = CUDA_SUCCESS;

	if (depth > 64)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < g->count && !rc; i++) {
		const struct sim_gnode *n = g->nodes[i];

		if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) {
			rc = cond_resets(n->child, q, depth + 1);
		} else if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
			if (n->cond.cond->flags & CU_GRAPH_COND_ASSIGN_DEFAULT) {
				struct sim_cmd *cmd = sim_cmd_new(SIM_CMD_COND);

				if (!cmd)
					return CUDA_ERROR_OUT_OF_MEMORY;
				cmd->cond.cond = n->cond.cond;
				n->cond.cond->refs++;
				cmd->next = *q;
				*q = cmd;
			}
			for (unsigned k = 0; k < n->cond.size && !rc; k++)
				rc = cond_resets(n->cond.bodies[k], q, depth + 1);
		}
	}
	return rc;
}

void sim_cond_cmd_release(struct sim *sim, struct sim_cmd *cmd)
{
	for (unsigned k = 0; cmd->cond.bodies && k < cmd->cond.size; k++)
		if (cmd->cond.bodies[k])
			sim_graph_free(sim, cmd->cond.bodies[k]);
	free(cmd->cond.bodies);
	cmd->cond.bodies = NULL;
	if (cmd->cond.cond)
		cond_unref(sim, cmd->cond.cond);
	cmd->cond.cond = NULL;
}

/* The body a condition value selects, or -1. */
static int cond_pick(unsigned type, unsigned size, unsigned v)
{
	switch (type) {
	case CU_GRAPH_COND_TYPE_IF:
		return v ? 0 : size == 2 ? 1 : -1;
	case CU_GRAPH_COND_TYPE_WHILE:
		return v ? 0 : -1;
	default:
		return v < size ? (int)v : -1;
	}
}

/* On the device thread, without the lock: the bodies run here, inline, in
 * the FIFO position of the node (a while node's as often as its condition
 * stays non-zero). A poisoned context or a stopping sim ends the loop. */
void sim_cond_run(struct sim *sim, struct sim_cmd *cmd)
{
	struct sim_cond *c = cmd->cond.cond;
	struct sim_ctx *ctx = cmd->stream->ctx;

	pthread_mutex_lock(&sim->lock);
	if (!cmd->cond.bodies) {
		c->current = c->default_value;
		pthread_mutex_unlock(&sim->lock);
		return;
	}
	for (;;) {
		int k = cond_pick(cmd->cond.type, cmd->cond.size, c->current);
		struct sim_cmd *body;

		if (k < 0 || sim->stopping || __atomic_load_n(&ctx->sticky, __ATOMIC_ACQUIRE) != CUDA_SUCCESS)
			break;
		/* Checked at launch; memory may have gone since, as for any node. */
		if (body_cmds(sim, cmd->stream, cmd->cond.bodies[k], &body) != CUDA_SUCCESS) {
			pr_warn("a conditional body can no longer run: the context is poisoned");
			__atomic_store_n(&ctx->sticky, CUDA_ERROR_ILLEGAL_ADDRESS, __ATOMIC_RELEASE);
			break;
		}
		pthread_mutex_unlock(&sim->lock);
		for (struct sim_cmd *b = body; b; b = b->next) {
			b->stream = cmd->stream;
			sim_cmd_run(sim, b);
		}
		pthread_mutex_lock(&sim->lock);
		cmds_free(body);
		if (cmd->cond.type != CU_GRAPH_COND_TYPE_WHILE)
			break;
	}
	pthread_mutex_unlock(&sim->lock);
}

void sim_launch_set_conditional(const struct sim_launch *launch, uint64_t handle, unsigned value)
{
	struct sim *sim = sim_self;

	(void)launch;
	pthread_mutex_lock(&sim->lock);
	for (struct sim_cond *c = sim->conds; c; c = c->next)
		if (c->value == handle) {
			c->current = value;
			break;
		}
	pthread_mutex_unlock(&sim->lock);
}

CUresult sim_cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph hg, CUcontext hctx,
					    unsigned int default_value, unsigned int flags)
{
	struct sim_graph *g;
	struct sim_ctx *ctx;
	struct sim_cond *c;
	struct sim *sim;
	CUresult rc;

	if (!out || flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = graph_resolve(sim, hg, &g);
	if (!rc)
		rc = sim_ctx_require(sim, &ctx);
	if (!rc && hctx && hctx != (CUcontext)ctx)
		rc = CUDA_ERROR_INVALID_CONTEXT;
	if (!rc && !(c = calloc(1, sizeof(*c))))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (!rc) {
		/* Opaque, and different in another worker process: what a
		 * restore must translate kernel arguments for (docs/sim.md). */
		c->value = 0x7c00000000000000ull | (uint64_t)(getpid() & 0xffffff) << 32 | ++sim->cond_ids;
		c->graph = g;
		c->refs = 1;
		c->default_value = default_value;
		c->current = default_value;
		c->flags = flags;
		c->next = sim->conds;
		sim->conds = c;
		*out = c->value;
	}
	sim_leave(sim);
	return rc;
}

/* cuGraphAddNode: conditional nodes only (the executor adds every other
 * type with its own call). */
CUresult sim_cuGraphAddNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, const CUgraphEdgeData *edata,
			    size_t ndeps, CUgraphNodeParams *p)
{
	CUDA_CONDITIONAL_NODE_PARAMS *cp;
	struct sim_cond *c = NULL;
	struct sim_gnode *n = NULL;
	struct sim_graph *g;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->type != CU_GRAPH_NODE_TYPE_CONDITIONAL || edata)
		return CUDA_ERROR_NOT_SUPPORTED;
	cp = &p->conditional;
	if (!graph_cond_shape_ok(cp->type, cp->size))
		return CUDA_ERROR_INVALID_VALUE;
	rc = enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	/* The handle must be one made for this graph. */
	for (c = sim->conds; c; c = c->next)
		if (c->value == cp->handle && c->graph == g)
			break;
	if (!c)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = node_append(g, CU_GRAPH_NODE_TYPE_CONDITIONAL, deps, ndeps, ph, &n);
	if (!rc) {
		n->cond.type = cp->type;
		n->cond.size = cp->size;
		n->cond.cond = c;
		c->refs++;
		n->cond.bodies = calloc(cp->size, sizeof(*n->cond.bodies));
		for (unsigned k = 0; n->cond.bodies && k < cp->size; k++) {
			n->cond.bodies[k] = sim_graph_new(sim, true);
			if (!n->cond.bodies[k])
				break;
			n->cond.bodies[k]->body = true;
		}
		if (!n->cond.bodies || !n->cond.bodies[cp->size - 1]) {
			gnode_drop_last(sim, g);
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			cp->phGraph_out = (CUgraph *)n->cond.bodies;
		}
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphLaunch(CUgraphExec h, CUstream hs)
{
	struct sim_cmd *q = NULL, *rev = NULL;
	struct sim_stream *s;
	struct sim_ctx *ctx;
	struct sim_exec *x;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = exec_resolve(sim, h, &x);
	if (!rc)
		rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = sim_stream_resolve(sim, hs, ctx, &s);
	if (!rc)
		rc = ctx->sticky;
	if (rc)
		goto out;
	if (s->capture) {
		rc = sim_capture_graph(sim, s, x);
		goto out;
	}
	rc = sim_capture_legacy_check(sim, s);
	/* Handles that start each launch at their default first. */
	if (!rc)
		rc = cond_resets(x->graph, &q, 0);
	/* Every command is made (and every node checked) before one is queued:
	 * a launch runs whole or not at all. */
	for (unsigned i = 0; i < x->count && !rc; i++)
		if (!x->order[i]->disabled)
			rc = node_cmds(sim, s, x->order[i], &q);
	while (q) {
		struct sim_cmd *c = q;

		q = c->next;
		c->next = rev;
		rev = c;
	}
	while (rev) {
		struct sim_cmd *c = rev;

		rev = c->next;
		if (rc) {
			sim_cmd_free(c);
			continue;
		}
		if (c->kind == SIM_CMD_EVENT)
			c->event.gen = ++c->event.ev->gen;
		else if (c->kind == SIM_CMD_WAIT)
			c->event.gen = c->event.ev->gen;
		sim_cmd_submit(sim, s, c);
	}
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphUpload(CUgraphExec h, CUstream hs)
{
	struct sim_stream *s;
	struct sim_ctx *ctx;
	struct sim_exec *x;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = exec_resolve(sim, h, &x);
	if (!rc)
		rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = sim_stream_resolve(sim, hs, ctx, &s);
	/* Nothing to upload: the sim's device memory is the worker's. */
	sim_leave(sim);
	return rc;
}

/* Pair @a's nodes with @g's as the driver documents for cuGraphExecUpdate:
 * exit nodes in order, then each pair's dependencies by edge order; child
 * graphs likewise. pair[i] is the node of @g for node i of @a. False (with
 * the result and the node of @g at fault) when the shapes differ. */
static bool update_pair(const struct sim_graph *a, const struct sim_graph *g, unsigned *pair,
			CUgraphExecUpdateResultInfo *info)
{
	unsigned *rev = NULL, *queue = NULL, head = 0, tail = 0, ig = 0;
	bool *ha = NULL, *hg = NULL, ok = false;

	info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
	if (a->count != g->count)
		return false;
	rev = malloc((g->count + 1) * sizeof(*rev));
	queue = malloc((a->count + 1) * sizeof(*queue));
	ha = calloc(a->count + 1, sizeof(*ha));
	hg = calloc(g->count + 1, sizeof(*hg));
	if (!rev || !queue || !ha || !hg) {
		info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
		goto out;
	}
	for (unsigned i = 0; i < a->count; i++) {
		pair[i] = rev[i] = ~0u;
		for (unsigned j = 0; j < a->nodes[i]->deps.count; j++)
			ha[a->nodes[i]->deps.nodes[j]->index] = true;
		for (unsigned j = 0; j < g->nodes[i]->deps.count; j++)
			hg[g->nodes[i]->deps.nodes[j]->index] = true;
	}
	for (unsigned i = 0; i < a->count; i++) {
		if (ha[i])
			continue;
		while (ig < g->count && hg[ig])
			ig++;
		if (ig == g->count)
			goto out;
		pair[i] = ig;
		rev[ig++] = i;
		queue[tail++] = i;
	}
	while (ig < g->count && hg[ig])
		ig++;
	if (ig < g->count) {
		info->errorNode = (CUgraphNode)g->nodes[ig];
		goto out;
	}
	while (head < tail) {
		const struct sim_gnode *x = a->nodes[queue[head]], *y = g->nodes[pair[queue[head]]];

		head++;
		info->errorNode = (CUgraphNode)y;
		if (x->type != y->type) {
			info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
			goto out;
		}
		if (x->deps.count != y->deps.count)
			goto out;
		for (unsigned k = 0; k < x->deps.count; k++) {
			unsigned p = x->deps.nodes[k]->index, q = y->deps.nodes[k]->index;

			if (pair[p] == ~0u && rev[q] == ~0u) {
				pair[p] = q;
				rev[q] = p;
				queue[tail++] = p;
			} else if (pair[p] != q) {
				info->errorFromNode = (CUgraphNode)y->deps.nodes[k];
				goto out;
			}
		}
		if (y->type == CU_GRAPH_NODE_TYPE_KERNEL && !y->kernel.fn) {
			info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
			goto out;
		}
		if (y->type == CU_GRAPH_NODE_TYPE_GRAPH) {
			unsigned *sub = malloc((y->child->count + 1) * sizeof(*sub));
			bool same = sub && update_pair(x->child, y->child, sub, info);

			free(sub);
			if (!same)
				goto out;
		}
	}
	ok = head == a->count;
	if (ok) {
		info->errorNode = NULL;
		info->errorFromNode = NULL;
		info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
	}
out:
	free(rev);
	free(queue);
	free(ha);
	free(hg);
	return ok;
}

/* Take @g's parameters into the paired nodes; the executable's order stays. */
static int update_apply(struct sim *sim, struct sim_graph *a, const struct sim_graph *g)
{
	CUgraphExecUpdateResultInfo info;
	unsigned *pair = malloc((a->count + 1) * sizeof(*pair));
	int ret = 0;

	if (!pair || !update_pair(a, g, pair, &info)) {
		free(pair);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < a->count && !ret; i++) {
		struct sim_gnode *x = a->nodes[i];
		const struct sim_gnode *y = g->nodes[pair[i]];
		struct sim_gnode tmp;

		if (y->type == CU_GRAPH_NODE_TYPE_GRAPH) {
			ret = update_apply(sim, x->child, y->child);
			continue;
		}
		memset(&tmp, 0, sizeof(tmp));
		tmp.type = y->type;
		if (gnode_params_copy(sim, &tmp, y)) {
			gnode_params_release(sim, &tmp);
			ret = -ENOMEM;
			break;
		}
		gnode_params_release(sim, x);
		switch (y->type) {
		case CU_GRAPH_NODE_TYPE_KERNEL:
			x->kernel = tmp.kernel;
			break;
		case CU_GRAPH_NODE_TYPE_MEMCPY:
			x->copy = tmp.copy;
			break;
		case CU_GRAPH_NODE_TYPE_MEMSET:
			x->set = tmp.set;
			break;
		case CU_GRAPH_NODE_TYPE_HOST:
			x->host = tmp.host;
			break;
		case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
			x->event = tmp.event;
			break;
		default:
			break;
		}
	}
	free(pair);
	return ret;
}

CUresult sim_cuGraphExecUpdate(CUgraphExec h, CUgraph hg, CUgraphExecUpdateResultInfo *info)
{
	struct sim_graph *g;
	struct sim_exec *x;
	struct sim *sim;
	CUresult rc;

	if (!info)
		return CUDA_ERROR_INVALID_VALUE;
	memset(info, 0, sizeof(*info));
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = exec_resolve(sim, h, &x);
	if (!rc)
		rc = graph_resolve(sim, hg, &g);
	if (!rc && g->capture)
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	/* The sim does not pair conditional bodies: refused, never half done. */
	if (!rc && (graph_has_cond(g) || graph_has_cond(x->graph))) {
		info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
		rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
	}
	if (!rc) {
		unsigned *pair = malloc((x->graph->count + 1) * sizeof(*pair));

		if (!pair)
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		else if (!update_pair(x->graph, g, pair, info))
			rc = info->result == CU_GRAPH_EXEC_UPDATE_ERROR ? CUDA_ERROR_OUT_OF_MEMORY
									: CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
		free(pair);
	}
	if (!rc && update_apply(sim, x->graph, g)) {
		info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	sim_leave(sim);
	return rc;
}

/* An executable's node of @type, named as in the graph it came from. */
static struct sim_gnode *exec_node_find(struct sim_exec *x, CUgraphNode node, CUgraphNodeType type)
{
	for (unsigned i = 0; i < x->graph->count; i++)
		if (x->graph->nodes[i]->orig == (const struct sim_gnode *)node)
			return x->graph->nodes[i]->type == type ? x->graph->nodes[i] : NULL;
	return NULL;
}

CUresult sim_cuGraphExecKernelNodeSetParams(CUgraphExec h, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct sim_gnode *n = NULL;
	struct sim_exec *x;
	struct sim *sim;
	CUresult rc;

	if (!p || !node)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = exec_resolve(sim, h, &x);
	if (!rc && !(n = exec_node_find(x, node, CU_GRAPH_NODE_TYPE_KERNEL)))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = kernel_params_set(sim, n, p);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphExecHostNodeSetParams(CUgraphExec h, CUgraphNode node, const CUDA_HOST_NODE_PARAMS *p)
{
	struct sim_gnode *n = NULL;
	struct sim_exec *x;
	struct sim *sim;
	CUresult rc;

	if (!p || !p->fn || !node)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = exec_resolve(sim, h, &x);
	if (!rc && !(n = exec_node_find(x, node, CU_GRAPH_NODE_TYPE_HOST)))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		n->host = *p;
	sim_leave(sim);
	return rc;
}

/* ---- memcpy, memset and event nodes changed, nodes disabled -------------- */

/* A graph's node of @type (@x NULL) or an executable's copy of it, with the
 * lock held (sim_leave when done). */
static CUresult node_for_set(CUgraphExec hx, CUgraphNode h, CUgraphNodeType type, struct sim **psim,
			     struct sim_gnode **pn)
{
	struct sim_exec *x;
	CUresult rc;

	if (!hx)
		return enter_node(h, type, psim, pn);
	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(psim);
	if (rc)
		return rc;
	rc = exec_resolve(*psim, hx, &x);
	if (!rc && !(*pn = exec_node_find(x, h, type)))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc)
		sim_leave(*psim);
	return rc;
}

static CUresult memcpy_set(CUgraphExec hx, CUgraphNode h, const CUDA_MEMCPY3D *p)
{
	struct copy_geom geom;
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = node_for_set(hx, h, CU_GRAPH_NODE_TYPE_MEMCPY, &sim, &n);
	if (rc)
		return rc;
	rc = copy_check(sim, p, &geom);
	if (!rc)
		n->copy = *p;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphMemcpyNodeSetParams(CUgraphNode h, const CUDA_MEMCPY3D *p)
{
	return memcpy_set(NULL, h, p);
}

CUresult sim_cuGraphExecMemcpyNodeSetParams(CUgraphExec hx, CUgraphNode h, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	(void)ctx;
	return hx ? memcpy_set(hx, h, p) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult memset_set(CUgraphExec hx, CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = node_for_set(hx, h, CU_GRAPH_NODE_TYPE_MEMSET, &sim, &n);
	if (rc)
		return rc;
	rc = memset_check(sim, p);
	if (!rc)
		n->set = *p;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphMemsetNodeSetParams(CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p)
{
	return memset_set(NULL, h, p);
}

CUresult sim_cuGraphExecMemsetNodeSetParams(CUgraphExec hx, CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p,
					    CUcontext ctx)
{
	(void)ctx;
	return hx ? memset_set(hx, h, p) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult event_set(CUgraphExec hx, CUgraphNode h, CUevent hev, CUgraphNodeType type)
{
	struct sim_event *ev;
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	rc = node_for_set(hx, h, type, &sim, &n);
	if (rc)
		return rc;
	rc = sim_event_lookup(sim, hev, &ev);
	if (!rc) {
		ev->pending++;
		sim_event_unref(n->event);
		n->event = ev;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphEventRecordNodeSetEvent(CUgraphNode h, CUevent ev)
{
	return event_set(NULL, h, ev, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

CUresult sim_cuGraphEventWaitNodeSetEvent(CUgraphNode h, CUevent ev)
{
	return event_set(NULL, h, ev, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

CUresult sim_cuGraphExecEventRecordNodeSetEvent(CUgraphExec hx, CUgraphNode h, CUevent ev)
{
	return hx ? event_set(hx, h, ev, CU_GRAPH_NODE_TYPE_EVENT_RECORD) : CUDA_ERROR_INVALID_VALUE;
}

CUresult sim_cuGraphExecEventWaitNodeSetEvent(CUgraphExec hx, CUgraphNode h, CUevent ev)
{
	return hx ? event_set(hx, h, ev, CU_GRAPH_NODE_TYPE_WAIT_EVENT) : CUDA_ERROR_INVALID_VALUE;
}

/* Kernel, memcpy and memset nodes of an executable, as the driver allows. */
CUresult sim_cuGraphNodeSetEnabled(CUgraphExec hx, CUgraphNode h, unsigned int enabled)
{
	static const CUgraphNodeType types[] = { CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY,
						 CU_GRAPH_NODE_TYPE_MEMSET };
	struct sim_gnode *n = NULL;
	struct sim_exec *x;
	struct sim *sim;
	CUresult rc;

	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = exec_resolve(sim, hx, &x);
	for (unsigned k = 0; !rc && !n && k < sizeof(types) / sizeof(types[0]); k++)
		n = exec_node_find(x, h, types[k]);
	if (!rc && !n)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		n->disabled = !enabled;
	sim_leave(sim);
	return rc;
}

/* ---- dot ---------------------------------------------------------------- */

static const char *const gnode_type_names[] = {
	[CU_GRAPH_NODE_TYPE_KERNEL] = "kernel", [CU_GRAPH_NODE_TYPE_MEMCPY] = "memcpy",
	[CU_GRAPH_NODE_TYPE_MEMSET] = "memset", [CU_GRAPH_NODE_TYPE_HOST] = "host",
	[CU_GRAPH_NODE_TYPE_GRAPH] = "graph", [CU_GRAPH_NODE_TYPE_EMPTY] = "empty",
	[CU_GRAPH_NODE_TYPE_WAIT_EVENT] = "wait_event", [CU_GRAPH_NODE_TYPE_EVENT_RECORD] = "event_record",
	[CU_GRAPH_NODE_TYPE_MEM_ALLOC] = "mem_alloc", [CU_GRAPH_NODE_TYPE_MEM_FREE] = "mem_free",
};

/* The nodes of @g (children as clusters) and their dependencies; @id
 * numbers the nodes of the whole file. */
static void dot_graph(FILE *f, const struct sim_graph *g, unsigned *id, unsigned depth)
{
	unsigned base = *id;

	*id += g->count;
	for (unsigned i = 0; i < g->count; i++) {
		const struct sim_gnode *n = g->nodes[i];
		const char *name = (unsigned)n->type < sizeof(gnode_type_names) / sizeof(gnode_type_names[0]) &&
					   gnode_type_names[n->type] ? gnode_type_names[n->type] : "node";

		fprintf(f, "%*s\"n%u\" [label=\"%u: %s\"];\n", (int)depth * 2 + 2, "", base + i, i, name);
		if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child && depth < 8) {
			fprintf(f, "%*ssubgraph \"cluster_n%u\" {\n", (int)depth * 2 + 2, "", base + i);
			dot_graph(f, n->child, id, depth + 1);
			fprintf(f, "%*s}\n", (int)depth * 2 + 2, "");
		}
		for (unsigned k = 0; k < n->deps.count; k++)
			fprintf(f, "%*s\"n%u\" -> \"n%u\";\n", (int)depth * 2 + 2, "", base + n->deps.nodes[k]->index,
				base + i);
	}
}

CUresult sim_cuGraphDebugDotPrint(CUgraph hg, const char *path, unsigned int flags)
{
	struct sim_graph *g;
	struct sim *sim;
	unsigned id = 0;
	CUresult rc;
	FILE *f;

	if (!path || flags >> 16)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = graph_resolve(sim, hg, &g);
	if (!rc) {
		f = fopen(path, "w");
		if (!f) {
			rc = CUDA_ERROR_OPERATING_SYSTEM;
		} else {
			fprintf(f, "digraph dot {\n");
			dot_graph(f, g, &id, 0);
			fprintf(f, "}\n");
			if (fclose(f))
				rc = CUDA_ERROR_OPERATING_SYSTEM;
		}
	}
	sim_leave(sim);
	return rc;
}

/* The executable's child node takes @hchild's parameters node for node,
 * when the shapes match as for cuGraphExecUpdate. */
CUresult sim_cuGraphExecChildGraphNodeSetParams(CUgraphExec hx, CUgraphNode node, CUgraph hchild)
{
	CUgraphExecUpdateResultInfo info;
	struct sim_gnode *n = NULL;
	struct sim_graph *child;
	struct sim_exec *x;
	struct sim *sim;
	unsigned *pair = NULL;
	CUresult rc;

	if (!node)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = exec_resolve(sim, hx, &x);
	if (!rc && !(n = exec_node_find(x, node, CU_GRAPH_NODE_TYPE_GRAPH)))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = graph_resolve(sim, hchild, &child);
	if (!rc && child->capture)
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (!rc) {
		pair = malloc((n->child->count + 1) * sizeof(*pair));
		if (!pair)
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		else if (!update_pair(n->child, child, pair, &info))
			rc = info.result == CU_GRAPH_EXEC_UPDATE_ERROR ? CUDA_ERROR_OUT_OF_MEMORY
								       : CUDA_ERROR_INVALID_VALUE;
		free(pair);
	}
	if (!rc && update_apply(sim, n->child, child))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	sim_leave(sim);
	return rc;
}

/* ---- kernel node attributes --------------------------------------------- */

/* Those a kernel node takes whose value is plain data: kept, not acted on
 * (the sim has no L2 policy, clusters, priorities or sync domains). */
static bool kattr_known(CUkernelNodeAttrID id)
{
	return graph_kattr_id_ok((uint32_t)id) && (unsigned)id < SIM_KATTRS;
}

CUresult sim_cuGraphKernelNodeGetAttribute(CUgraphNode h, CUkernelNodeAttrID id, CUkernelNodeAttrValue *out)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!out || !kattr_known(id))
		return CUDA_ERROR_INVALID_VALUE;
	rc = enter_node(h, CU_GRAPH_NODE_TYPE_KERNEL, &sim, &n);
	if (rc)
		return rc;
	if (n->kernel.attrs)
		*out = n->kernel.attrs[id];
	else
		memset(out, 0, sizeof(*out));
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuGraphKernelNodeSetAttribute(CUgraphNode h, CUkernelNodeAttrID id, const CUkernelNodeAttrValue *v)
{
	struct sim_gnode *n;
	struct sim *sim;
	CUresult rc;

	if (!v || !kattr_known(id))
		return CUDA_ERROR_INVALID_VALUE;
	rc = enter_node(h, CU_GRAPH_NODE_TYPE_KERNEL, &sim, &n);
	if (rc)
		return rc;
	if (!n->kernel.attrs)
		n->kernel.attrs = calloc(SIM_KATTRS, sizeof(*n->kernel.attrs));
	if (n->kernel.attrs)
		n->kernel.attrs[id] = *v;
	else
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
	struct sim_gnode *d, *s;
	CUkernelNodeAttrValue *copy = NULL;
	struct sim *sim;
	CUresult rc;

	rc = enter_node(dst, CU_GRAPH_NODE_TYPE_KERNEL, &sim, &d);
	if (rc)
		return rc;
	rc = node_resolve(sim, src, &s);
	if (!rc && s->type != CU_GRAPH_NODE_TYPE_KERNEL)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc && s->kernel.attrs) {
		copy = malloc(SIM_KATTRS * sizeof(*copy));
		if (copy)
			memcpy(copy, s->kernel.attrs, SIM_KATTRS * sizeof(*copy));
		else
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (!rc) {
		free(d->kernel.attrs);
		d->kernel.attrs = copy;
	}
	sim_leave(sim);
	return rc;
}

/* Dependencies a capture into @hg starts from: nodes of that graph, for
 * cuStreamBeginCaptureToGraph (sim_capture.c); lock held. */
CUresult sim_graph_capture_target(struct sim *sim, CUgraph hg, const CUgraphNode *deps, size_t n,
				  struct sim_graph **out)
{
	CUresult rc = graph_resolve(sim, hg, out);

	if (!rc && ((*out)->capture || ((*out)->owned && !(*out)->body)))
		rc = (*out)->capture ? CUDA_ERROR_ILLEGAL_STATE : CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = deps_check(sim, *out, deps, n);
	return rc;
}
