/* Stream capture and graphs.
 *
 * The backend holds the real graphs; the executor keeps, beside each, a
 * description (common/graph_desc.h) of what the graph is made of, in the
 * guest's terms. The description names nodes on the wire (graph handle +
 * index), validates what the guest refers to, and is what the journal keeps:
 * a driver's graph cannot be serialised, so a restore rebuilds each graph
 * node by node from its description (graph_build).
 *
 * Graphs built node by node get their description as they are built. A
 * captured graph is read back from the backend when the capture ends
 * (desc_sync), so captures across several streams, event forks and joins
 * and cuStreamUpdateCaptureDependencies need no model of the driver's
 * capture rules here: the driver applies them, and its errors are the
 * guest's.
 *
 * An executable keeps its own description and its own backend graph
 * (`source`, a clone of the graph it was instantiated from): the guest's
 * node names for cuGraphExecKernelNodeSetParams are indices into it, and
 * the guest may destroy the graph while the executable lives.
 *
 * Memory allocation nodes get their memory from the arena when they are
 * made (so snapshots hold it and restores map it at the same address); the
 * backend sees an empty node in their place. docs/limits.md lists what that
 * changes.
 */
#define LOG_PREFIX "exec: "
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "graph_desc.h"
#include "log.h"
#include "tracker.h"
#include "wire_dispatch.h"
#include "le.h"

#define GRAPH_ARGS_MAX GRAPH_DESC_ARGS_MAX
#define GRAPH_PARAMS_MAX WIRE_REC_KERNEL_PARAM_MAX  /* a layout as the wire carries it */
/* Captures in progress at once. */
#define CAPTURES_MAX 1024

struct exec_graph {
	struct graph_desc own;
	/* Nodes' `real` point into the entry's graph. &own, or for a
	 * conditional body (@parent set) the body's description inside its
	 * node, which the parent's description owns. */
	struct graph_desc *d;
	struct exec_graph *parent;      /* bodies: the graph whose node owns it */
	uint64_t cloned_from;           /* cuGraphNodeFindInClone's original, 0 if none */
	bool capturing;                 /* a capture still adds to it */
	unsigned execs;                 /* live executables instantiated from it */
	uint8_t hash[TRACKER_HASH_SIZE];
	bool journaled;
	bool dirty;                     /* changed since its description was journaled */
};

struct exec_graph_exec {
	/* Nodes' `real` point into @source, or with @shared into the guest's
	 * graph @origin (NULL once that node or graph is gone). */
	struct graph_desc d;
	CUgraph source;
	/* Instantiated from the guest's graph itself, not a clone: a graph
	 * with conditional nodes cannot be cloned (cuda.h). */
	bool shared;
	uint64_t origin;                /* the graph it was instantiated from */
	uint64_t flags;
	uint8_t hash[TRACKER_HASH_SIZE];
	bool journaled;
	bool dirty;
};

/* Conditional handles a kernel node's arguments may name: those of its
 * graph and of the graphs whose conditional nodes hold it (a while body's
 * kernel sets its parent's handle), innermost first. */
struct cond_chain {
	const struct graph_desc *d[GRAPH_DESC_DEPTH_MAX + 1];
	unsigned n;
};

static struct exec_graph *graph_info_new(void)
{
	struct exec_graph *g = calloc(1, sizeof(*g));

	if (g)
		g->d = &g->own;
	return g;
}

/* The guest's graph a conditional body belongs to (itself if not a body). */
static struct exec_graph *graph_root(struct exec_graph *g)
{
	while (g->parent)
		g = g->parent;
	return g;
}

static unsigned graph_nesting(const struct exec_graph *g)
{
	unsigned n = 0;

	for (; g->parent; g = g->parent)
		n++;
	return n;
}

/* A body's description changed from @before nodes (its weight) to what it
 * is: the descriptions around it count its nodes too. */
static void weight_propagate(struct exec_graph *g, uint32_t before)
{
	uint32_t delta = g->d->weight - before;         /* modulo 2^32: may shrink */

	for (struct exec_graph *p = g->parent; p; p = p->parent)
		p->d->weight += delta;
}

/* True when a handle of @c has another value in the backend than the
 * guest's (after a restore): only then are arguments looked at. */
static bool chain_translates(const struct cond_chain *c)
{
	for (unsigned j = 0; c && j < c->n; j++)
		for (uint32_t k = 0; k < c->d[j]->nhandles; k++)
			if (c->d[j]->handles[k].value != c->d[j]->handles[k].real)
				return true;
	return false;
}

static void graph_chain(const struct exec_graph *g, struct cond_chain *c)
{
	c->n = 0;
	for (; g && c->n <= GRAPH_DESC_DEPTH_MAX; g = g->parent)
		c->d[c->n++] = g->d;
}

/* ---- lookups ------------------------------------------------------------ */

static struct exec_graph *graph_get(struct exec *ex, uint64_t handle, CUgraph *real)
{
	struct handle_entry *e = handle_table_get(ex->handles, handle, HANDLE_GRAPH);

	if (!e)
		return NULL;
	if (real)
		*real = e->real;
	return e->info;
}

static struct exec_graph_exec *graph_exec_get(struct exec *ex, uint64_t handle, CUgraphExec *real)
{
	struct handle_entry *e = handle_table_get(ex->handles, handle, HANDLE_GRAPH_EXEC);

	if (!e)
		return NULL;
	if (real)
		*real = e->real;
	return e->info;
}

static CUresult res_of_errno(int ret)
{
	return ret == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
}

/* ---- graph allocations -------------------------------------------------- */

static struct exec_graph_alloc *galloc_find(struct exec *ex, uint64_t addr)
{
	for (unsigned i = 0; i < ex->graphs.alloc_count; i++)
		if (ex->graphs.allocs[i].addr == addr)
			return &ex->graphs.allocs[i];
	return NULL;
}

static int galloc_add(struct exec *ex, uint64_t addr, uint64_t bytes, bool freed)
{
	if (ex->graphs.alloc_count == ex->graphs.alloc_cap) {
		unsigned cap = ex->graphs.alloc_cap ? ex->graphs.alloc_cap * 2 : 16;
		struct exec_graph_alloc *n = realloc(ex->graphs.allocs, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		ex->graphs.allocs = n;
		ex->graphs.alloc_cap = cap;
	}
	ex->graphs.allocs[ex->graphs.alloc_count++] = (struct exec_graph_alloc){ addr, bytes, 0, freed };
	exec_graph_mem_note(ex);
	return 0;
}

/* Unmap when nothing holds the node and the memory was freed. */
static void galloc_settle(struct exec *ex, struct exec_graph_alloc *ga)
{
	uint64_t addr = ga->addr;

	if (ga->refs || !ga->freed)
		return;
	/* A launch of a graph that held it may still run. */
	ex->be->cuCtxSynchronize();
	exec_mem_unmap(ex, addr);
	*ga = ex->graphs.allocs[--ex->graphs.alloc_count];
}

static void galloc_journal(struct exec *ex, struct exec_graph_alloc *ga)
{
	exec_journal_region_kind(ex, ga->addr, ga->bytes,
				 ga->freed ? EXEC_REGION_GRAPH_FREED : EXEC_REGION_GRAPH);
}

/* Take (+1) or drop (-1) the references of a description's alloc nodes. */
static void desc_gallocs(struct exec *ex, const struct graph_desc *d, int delta)
{
	for (uint32_t i = 0; i < d->count; i++) {
		struct exec_graph_alloc *ga;

		if (d->nodes[i].type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
			continue;
		ga = galloc_find(ex, d->nodes[i].mem.address);
		if (!ga)
			continue;
		if (delta > 0) {
			ga->refs++;
		} else if (ga->refs) {
			ga->refs--;
			galloc_settle(ex, ga);
		}
	}
}

static bool desc_has_mem_nodes(const struct graph_desc *d)
{
	for (uint32_t i = 0; i < d->count; i++)
		if (d->nodes[i].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
		    d->nodes[i].type == CU_GRAPH_NODE_TYPE_MEM_FREE)
			return true;
	return false;
}

static unsigned desc_depth(const struct graph_desc *d)
{
	unsigned depth = 1;

	for (uint32_t i = 0; i < d->count; i++) {
		const struct graph_node *n = &d->nodes[i];

		if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) {
			unsigned c = 1 + desc_depth(n->child);

			if (c > depth)
				depth = c;
		}
		for (uint32_t k = 0; n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && k < n->cond.size; k++) {
			unsigned c = 1 + desc_depth(&n->cond.body[k]);

			if (c > depth)
				depth = c;
		}
	}
	return depth;
}

bool exec_graph_alloc_free(struct exec *ex, uint64_t addr)
{
	struct exec_graph_alloc *ga = galloc_find(ex, addr);

	if (!ga)
		return false;
	if (!ga->freed) {
		ga->freed = true;
		galloc_journal(ex, ga);
		galloc_settle(ex, ga);
	}
	return true;
}

int exec_graph_alloc_restore(struct exec *ex, uint64_t addr, uint64_t bytes, bool freed)
{
	return galloc_add(ex, addr, bytes, freed);
}

/* ---- journal ------------------------------------------------------------ */

/* Write the description of graph or executable @handle as an image and
 * point its object record at it: args = hash [, u64 flags, u64 origin]. */
static void journal_desc(struct exec *ex, uint64_t handle, enum handle_kind kind,
			 const struct graph_desc *d, uint8_t hash[TRACKER_HASH_SIZE], bool *journaled,
			 uint64_t flags, uint64_t origin)
{
	uint8_t args[TRACKER_HASH_SIZE + 16], old[TRACKER_HASH_SIZE];
	bool had = *journaled;
	uint8_t *buf = NULL;
	size_t len = 0;
	int ret;

	if (!ex->journal || ex->journal_broken)
		return;
	memcpy(old, hash, sizeof(old));
	ret = graph_desc_encode(d, &buf, &len);
	if (!ret)
		ret = tracker_image_ref(ex->journal, buf, len, GRAPH_DESC_IMAGE_FORMAT, hash);
	free(buf);
	if (ret) {
		/* The journal no longer describes this graph: snapshots must not be taken. */
		pr_err("cannot journal graph 0x%llx: %s", (unsigned long long)handle, strerror(-ret));
		ex->journal_broken = true;
		return;
	}
	*journaled = true;
	memcpy(args, hash, TRACKER_HASH_SIZE);
	for (int k = 0; k < 8; k++) {
		args[TRACKER_HASH_SIZE + k] = (uint8_t)(flags >> (8 * k));
		args[TRACKER_HASH_SIZE + 8 + k] = (uint8_t)(origin >> (8 * k));
	}
	exec_journal_object(ex, handle, kind, ex->primary_ctx, args,
			    kind == HANDLE_GRAPH ? TRACKER_HASH_SIZE : sizeof(args));
	if (had && !ex->journal_broken && tracker_image_unref(ex->journal, old))
		ex->journal_broken = true;
}

/* A description is written when a snapshot needs it, not at every change:
 * rewriting a whole description per node would make building a graph of N
 * nodes cost N^2, and per cuGraphExecKernelNodeSetParams would put a
 * journal write in a loop that launches. */
static void journal_graph(struct exec *ex, uint64_t handle, struct exec_graph *g)
{
	(void)handle;
	/* A body is journaled with the graph that owns it. */
	graph_root(g)->dirty = true;
	ex->graphs.dirty = true;
}

static void journal_exec(struct exec *ex, uint64_t handle, struct exec_graph_exec *x)
{
	(void)handle;
	x->dirty = true;
	ex->graphs.dirty = true;
}

static int journal_entry_flush(struct handle_entry *e, void *arg)
{
	struct exec *ex = arg;

	if (e->kind == HANDLE_GRAPH && e->info) {
		struct exec_graph *g = e->info;

		if (g->dirty && !g->capturing && !g->parent)
			journal_desc(ex, e->handle, HANDLE_GRAPH, g->d, g->hash, &g->journaled, 0, 0);
		g->dirty = false;
	} else if (e->kind == HANDLE_GRAPH_EXEC && e->info) {
		struct exec_graph_exec *x = e->info;

		if (x->dirty)
			journal_desc(ex, e->handle, HANDLE_GRAPH_EXEC, &x->d, x->hash, &x->journaled, x->flags,
				     x->origin);
		x->dirty = false;
	}
	return 0;
}

void exec_graph_journal_flush(struct exec *ex)
{
	if (!ex->graphs.dirty)
		return;
	handle_table_foreach(ex->handles, journal_entry_flush, ex);
	ex->graphs.dirty = false;
}

/* The graphs node @n owns that the guest may hold handles of: the bodies
 * of a conditional node, the embedded graph of a child graph node. */
static uint32_t node_subgraphs(const struct graph_node *n)
{
	if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
		return n->cond.size;
	return n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child ? 1 : 0;
}

/* Subgraph @k of @n (< node_subgraphs), its guest handle in *@handle. */
static struct graph_desc *node_subgraph(struct graph_node *n, uint32_t k, uint64_t **handle)
{
	if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
		*handle = &n->cond.body_handle[k];
		return &n->cond.body[k];
	}
	*handle = &n->child_handle;
	return n->child;
}

/* The wrapper of the guest's handle @handle of subgraph @d, or NULL. */
static struct exec_graph *subgraph_info(struct exec *ex, uint64_t handle, const struct graph_desc *d)
{
	struct handle_entry *e = handle ? handle_table_get(ex->handles, handle, HANDLE_GRAPH) : NULL;

	return e && e->info && ((struct exec_graph *)e->info)->d == d ? e->info : NULL;
}

/* The handle entries of the graphs @d's nodes own (conditional bodies,
 * embedded child graphs; nested ones too) go: their descriptions go with
 * @d. */
static void bodies_forget(struct exec *ex, struct graph_desc *d)
{
	for (uint32_t i = 0; i < d->count; i++) {
		struct graph_node *n = &d->nodes[i];

		for (uint32_t k = 0; k < node_subgraphs(n); k++) {
			uint64_t *handle;
			struct graph_desc *sub = node_subgraph(n, k, &handle);
			struct exec_graph *w = subgraph_info(ex, *handle, sub);

			bodies_forget(ex, sub);
			if (w) {
				free(w);
				handle_table_remove(ex->handles, *handle);
			}
			*handle = 0;
		}
	}
}

/* True when a capture adds to a graph a node of @d owns. */
static bool bodies_capturing(struct exec *ex, struct graph_desc *d)
{
	for (uint32_t i = 0; i < d->count; i++) {
		struct graph_node *n = &d->nodes[i];

		for (uint32_t k = 0; k < node_subgraphs(n); k++) {
			uint64_t *handle;
			struct graph_desc *sub = node_subgraph(n, k, &handle);
			struct exec_graph *w = subgraph_info(ex, *handle, sub);

			if ((w && w->capturing) || bodies_capturing(ex, sub))
				return true;
		}
	}
	return false;
}

static void graph_info_release(struct exec *ex, struct exec_graph *g, bool gallocs)
{
	if (!g)
		return;
	if (g->parent) {        /* a body: its description is its node's */
		free(g);
		return;
	}
	bodies_forget(ex, g->d);
	if (gallocs)
		desc_gallocs(ex, g->d, -1);
	graph_desc_release(g->d);
	free(g);
}

static void exec_info_release(struct exec *ex, struct exec_graph_exec *x, bool gallocs)
{
	if (!x)
		return;
	if (gallocs)
		desc_gallocs(ex, &x->d, -1);
	graph_desc_release(&x->d);
	free(x);
}

void exec_graph_info_free(struct exec *ex, struct handle_entry *e)
{
	struct exec_graph *g = e->info;

	/* Every entry goes: a body's wrapper alone, a graph's description
	 * without looking for its bodies' entries. */
	if (e->kind == HANDLE_GRAPH && g) {
		if (!g->parent)
			graph_desc_release(g->d);
		free(g);
	}
	if (e->kind == HANDLE_GRAPH_EXEC)
		exec_info_release(ex, e->info, false);
	e->info = NULL;
}

/* ---- reading a backend graph back --------------------------------------- */

struct real_index {
	void *real;
	uint32_t index;
};

static int real_index_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)((const struct real_index *)a)->real;
	uintptr_t y = (uintptr_t)((const struct real_index *)b)->real;

	return x < y ? -1 : x > y;
}

/* The index of the node whose backend node is @real, or GRAPH_NODE_NONE. */
static uint32_t index_of_real(const struct real_index *map, uint32_t n, void *real)
{
	struct real_index key = { real, 0 };
	const struct real_index *hit = bsearch(&key, map, n, sizeof(*map), real_index_cmp);

	return hit ? hit->index : GRAPH_NODE_NONE;
}

static struct real_index *real_index_build(const struct graph_desc *d, uint32_t *n)
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

/* Offsets are folded into the addresses; host and array endpoints have no
 * place in a description (the worker cannot reach the guest's memory). */
static CUresult copy_from_3d(struct exec *ex, const CUDA_MEMCPY3D *p, struct graph_node_memcpy *c)
{
	if ((p->srcMemoryType != CU_MEMORYTYPE_DEVICE && p->srcMemoryType != CU_MEMORYTYPE_UNIFIED) ||
	    (p->dstMemoryType != CU_MEMORYTYPE_DEVICE && p->dstMemoryType != CU_MEMORYTYPE_UNIFIED) ||
	    p->srcLOD || p->dstLOD)
		return CUDA_ERROR_NOT_SUPPORTED;
	c->src = p->srcDevice + p->srcXInBytes + (p->srcY + p->srcZ * p->srcHeight) * p->srcPitch;
	c->dst = p->dstDevice + p->dstXInBytes + (p->dstY + p->dstZ * p->dstHeight) * p->dstPitch;
	c->src_pitch = p->srcPitch;
	c->src_height = p->srcHeight;
	c->dst_pitch = p->dstPitch;
	c->dst_height = p->dstHeight;
	c->width = p->WidthInBytes;
	c->height = p->Height;
	c->depth = p->Depth;
	(void)ex;
	return CUDA_SUCCESS;
}

static CUresult desc_sync(struct exec *ex, struct graph_desc *d, CUgraph g, unsigned depth,
			  const struct cond_chain *chain);
static CUresult kernel_node_params(struct exec *ex, const struct graph_node_kernel *k,
				   CUDA_KERNEL_NODE_PARAMS *p, const struct cond_chain *c, unsigned *translated);

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
		const struct exec_params *layout;
		CUfunction fn;

		res = ex->be->cuGraphKernelNodeGetParams(real, &p);
		if (res != CUDA_SUCCESS)
			return res;
		n->kernel.function = function_handle_of(ex, p.func, p.kern);
		if (!n->kernel.function || exec_function_real(ex, n->kernel.function, &fn, &layout) ||
		    (layout->count && !p.kernelParams) || layout->bytes > GRAPH_ARGS_MAX)
			return CUDA_ERROR_NOT_SUPPORTED;
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
		n->set.dst = p.dst;
		n->set.pitch = p.pitch;
		n->set.value = p.value;
		n->set.element_size = p.elementSize;
		n->set.width = p.width;
		n->set.height = p.height;
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_EMPTY:
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
static CUresult desc_sync(struct exec *ex, struct graph_desc *d, CUgraph g, unsigned depth,
			  const struct cond_chain *chain)
{
	CUgraphNode *nodes = NULL, *from = NULL, *to = NULL;
	uint32_t *ia = NULL, *ib = NULL;
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
	res = ex->be->cuGraphGetEdges(g, NULL, NULL, &edges);
	if (res != CUDA_SUCCESS)
		goto out;
	if (edges > GRAPH_DESC_EDGES_MAX) {
		res = CUDA_ERROR_NOT_SUPPORTED;
		goto out;
	}
	from = calloc(edges ? edges : 1, sizeof(*from));
	to = calloc(edges ? edges : 1, sizeof(*to));
	if (!from || !to) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	res = edges ? ex->be->cuGraphGetEdges(g, from, to, &edges) : CUDA_SUCCESS;
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
		if (ia[i] == GRAPH_NODE_NONE || ib[i] == GRAPH_NODE_NONE) {
			res = CUDA_ERROR_NOT_SUPPORTED;
			goto out;
		}
	}
	{
		int ret = graph_desc_deps_reset(d, ia, ib, edges);

		if (ret)
			res = ret == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_SUPPORTED;
	}
out:
	free(map);
	free(nodes);
	free(from);
	free(to);
	free(ia);
	free(ib);
	return res;
}

/* desc_sync for a guest's graph (or body), its conditional handles known. */
static CUresult graph_sync(struct exec *ex, struct exec_graph *g, CUgraph real)
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
static CUresult kernel_node_params(struct exec *ex, const struct graph_node_kernel *k,
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

static void memcpy_3d(const struct graph_node_memcpy *c, CUDA_MEMCPY3D *p)
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

static void memset_params(const struct graph_node_memset *s, CUDA_MEMSET_NODE_PARAMS *p)
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

static CUresult ctx_real(struct exec *ex, CUcontext *ctx)
{
	struct handle_entry *e = handle_table_get(ex->handles, ex->primary_ctx, HANDLE_CONTEXT);

	*ctx = e ? e->real : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* The context of a conditional handle or node: @handle (0: the current). */
static CUresult cond_ctx(struct exec *ex, uint64_t handle, CUcontext *ctx)
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

		memcpy_3d(&n->copy, &p);
		return ex->be->cuGraphAddMemcpyNode(real, g, NULL, 0, &p, ctx);
	}
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS p;

		memset_params(&n->set, &p);
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
		from = malloc(d->edges * sizeof(*from));
		to = malloc(d->edges * sizeof(*to));
		if (!from || !to)
			res = CUDA_ERROR_OUT_OF_MEMORY;
		for (uint32_t i = 0; i < d->count && res == CUDA_SUCCESS; i++)
			for (uint32_t j = 0; j < d->nodes[i].ndeps && e < d->edges; j++) {
				from[e] = d->nodes[d->nodes[i].deps[j]].real;
				to[e++] = d->nodes[i].real;
			}
		if (res == CUDA_SUCCESS)
			res = ex->be->cuGraphAddDependencies(g, from, to, e);
	}
	free(from);
	free(to);
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

/* ---- stream capture ----------------------------------------------------- */

static struct exec_capture *capture_find(struct exec *ex, uint64_t stream)
{
	for (unsigned i = 0; i < ex->graphs.capture_count; i++)
		if (ex->graphs.captures[i].stream == stream)
			return &ex->graphs.captures[i];
	return NULL;
}

static struct exec_capture *capture_of_graph(struct exec *ex, void *graph_real)
{
	for (unsigned i = 0; i < ex->graphs.capture_count; i++)
		if (ex->graphs.captures[i].graph_real == graph_real)
			return &ex->graphs.captures[i];
	return NULL;
}

static void capture_drop(struct exec *ex, struct exec_capture *c)
{
	*c = ex->graphs.captures[--ex->graphs.capture_count];
}

/* The stream of a capture about to begin, and room for its record. */
static CUresult capture_prepare(struct exec *ex, uint64_t stream, uint32_t mode, CUstream *s)
{
	CUresult res = exec_stream_real(ex, stream, s);

	if (res != CUDA_SUCCESS)
		return res;
	if (mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (ex->graphs.capture_count == CAPTURES_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (ex->graphs.capture_count == ex->graphs.capture_cap) {
		unsigned cap = ex->graphs.capture_cap ? ex->graphs.capture_cap * 2 : 8;
		struct exec_capture *n = realloc(ex->graphs.captures, cap * sizeof(*n));

		if (!n)
			return CUDA_ERROR_OUT_OF_MEMORY;
		ex->graphs.captures = n;
		ex->graphs.capture_cap = cap;
	}
	return CUDA_SUCCESS;
}

CUresult exec_stream_begin_capture(struct exec *ex, const struct wire_stream_begin_capture_req *req,
				   struct wire_stream_begin_capture_rep *rep)
{
	CUstreamCaptureStatus st;
	CUgraph g = NULL;
	CUstream s;
	CUresult res = capture_prepare(ex, req->stream, req->mode, &s);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuStreamBeginCapture(s, (CUstreamCaptureMode)req->mode);
	if (res != CUDA_SUCCESS)
		return res;
	/* Which graph it captures into: to name it if the guest asks for it. */
	ex->be->cuStreamGetCaptureInfo(s, &st, NULL, &g, NULL, NULL);
	ex->graphs.captures[ex->graphs.capture_count++] = (struct exec_capture){ .stream = req->stream, .graph_real = g };
	return CUDA_SUCCESS;
}

/* Node indices of a `deps` blob, as the backend's nodes. */
static CUresult deps_parse(const struct graph_desc *d, struct wire_blob blob, uint32_t **idx,
			   CUgraphNode **reals, uint32_t *n);

CUresult exec_stream_begin_capture_to_graph(struct exec *ex,
					    const struct wire_stream_begin_capture_to_graph_req *req,
					    struct wire_stream_begin_capture_to_graph_rep *rep)
{
	CUgraphNode *deps = NULL;
	uint32_t *idx = NULL, ndeps = 0;
	struct exec_graph *g;
	CUgraph real;
	CUstream s;
	CUresult res = capture_prepare(ex, req->stream, req->mode, &s);

	(void)rep;
	if (res != CUDA_SUCCESS)
		return res;
	g = graph_get(ex, req->graph, &real);
	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (g->capturing)
		return CUDA_ERROR_ILLEGAL_STATE;
	res = deps_parse(g->d, req->deps, &idx, &deps, &ndeps);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuStreamBeginCaptureToGraph(s, real, ndeps ? deps : NULL, NULL, ndeps,
							  (CUstreamCaptureMode)req->mode);
	free(idx);
	free(deps);
	if (res != CUDA_SUCCESS)
		return res;
	ex->graphs.captures[ex->graphs.capture_count++] = (struct exec_capture){ req->stream, real, req->graph, true };
	g->capturing = true;
	return CUDA_SUCCESS;
}

/* A capture into the guest's own graph ended (@res: how): the graph is
 * the guest's whatever happened, with what the capture added to it. */
static CUresult capture_to_graph_end(struct exec *ex, uint64_t handle, CUresult res, uint64_t *out)
{
	CUgraph real;
	struct exec_graph *g = graph_get(ex, handle, &real);
	CUresult sync;

	if (!g)
		return res != CUDA_SUCCESS ? res : CUDA_ERROR_INVALID_HANDLE;
	g->capturing = false;
	sync = graph_sync(ex, g, real);
	if (sync != CUDA_SUCCESS) {
		/* The guest keeps its graph; a restore could not bring it back. */
		pr_warn("graph %#llx: what the capture added cannot be described (%d); no more snapshots",
			(unsigned long long)handle, sync);
		ex->journal_broken = true;
		return res != CUDA_SUCCESS ? res : sync;
	}
	journal_graph(ex, handle, g);
	if (res == CUDA_SUCCESS)
		*out = handle;
	return res;
}

static CUresult graph_entry_add(struct exec *ex, CUgraph real, struct exec_graph *g, uint64_t *handle)
{
	if (handle_table_add(ex->handles, HANDLE_GRAPH, real, ex->primary_ctx, g, handle))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

CUresult exec_stream_end_capture(struct exec *ex, const struct wire_stream_end_capture_req *req,
				 struct wire_stream_end_capture_rep *rep)
{
	struct exec_capture *c = capture_find(ex, req->stream);
	uint64_t named = c ? c->graph : 0;
	struct exec_graph *g = NULL;
	CUgraph real = NULL;
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuStreamEndCapture(s, &real);
	if (c && c->user && res != CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) {
		capture_drop(ex, c);
		return capture_to_graph_end(ex, named, res, &rep->graph);
	}
	if (c && res != CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
		capture_drop(ex, c);
	if (res != CUDA_SUCCESS || !real) {
		/* The driver dropped the graph with the capture. */
		if (named) {
			struct handle_entry *e = handle_table_get(ex->handles, named, HANDLE_GRAPH);

			if (e)
				graph_info_release(ex, e->info, true);
			handle_table_remove(ex->handles, named);
		}
		return res != CUDA_SUCCESS ? res : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	}
	if (named && (g = graph_get(ex, named, NULL))) {
		rep->graph = named;
	} else {
		g = graph_info_new();
		if (!g) {
			ex->be->cuGraphDestroy(real);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		res = graph_entry_add(ex, real, g, &rep->graph);
		if (res != CUDA_SUCCESS) {
			free(g);
			ex->be->cuGraphDestroy(real);
			return res;
		}
	}
	g->capturing = false;
	res = graph_sync(ex, g, real);
	if (res != CUDA_SUCCESS) {
		/* A node tern cannot describe: the guest must not hold a graph
		 * that a restore could not bring back. */
		pr_warn("captured graph cannot be described (%d): refused", res);
		ex->be->cuGraphDestroy(real);
		graph_info_release(ex, g, true);
		handle_table_remove(ex->handles, rep->graph);
		rep->graph = 0;
		return res;
	}
	/* Allocation nodes the guest added during the capture hold their
	 * memory since they were made: no references to take here. */
	journal_graph(ex, rep->graph, g);
	return CUDA_SUCCESS;
}

CUresult exec_host_copy_stream(struct exec *ex, uint64_t handle, CUstream *s)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult res = exec_stream_real(ex, handle, s);

	if (res != CUDA_SUCCESS || !ex->graphs.capture_count)
		return res;
	if (ex->be->cuStreamIsCapturing(*s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE) {
		pr_warn("a host copy or memory operation cannot be captured into a graph: refused");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return CUDA_SUCCESS;
}

void exec_graph_stream_destroyed(struct exec *ex, uint64_t stream)
{
	struct exec_capture *c = capture_find(ex, stream);

	if (!c)
		return;
	if (c->user) {
		uint64_t handle = c->graph, unused;

		capture_drop(ex, c);
		capture_to_graph_end(ex, handle, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, &unused);
		return;
	}
	if (c->graph) {
		struct handle_entry *e = handle_table_get(ex->handles, c->graph, HANDLE_GRAPH);

		if (e)
			graph_info_release(ex, e->info, true);
		handle_table_remove(ex->handles, c->graph);
	}
	capture_drop(ex, c);
}

CUresult exec_stream_is_capturing(struct exec *ex, const struct wire_stream_is_capturing_req *req,
				  struct wire_stream_is_capturing_rep *rep)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuStreamIsCapturing(s, &st);
	rep->status = st;
	return res;
}

/* The handle of the graph a capture adds to, issued at the first request. */
static CUresult capture_graph_handle(struct exec *ex, CUgraph real, uint64_t *handle,
				     struct exec_graph **out)
{
	struct exec_capture *c = capture_of_graph(ex, real);
	struct handle_entry *e = handle_table_find_real(ex->handles, HANDLE_GRAPH, real);
	struct exec_graph *g;
	CUresult res;

	if (e) {
		*handle = e->handle;
		*out = e->info;
		return CUDA_SUCCESS;
	}
	if (!c)         /* a capture begun behind tern's back cannot be */
		return CUDA_ERROR_ILLEGAL_STATE;
	g = graph_info_new();
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g->capturing = true;
	res = graph_entry_add(ex, real, g, handle);
	if (res != CUDA_SUCCESS) {
		free(g);
		return res;
	}
	c->graph = *handle;
	*out = g;
	return CUDA_SUCCESS;
}

#define CAPTURE_WANT_GRAPH 1u
#define CAPTURE_WANT_DEPS 2u

CUresult exec_stream_get_capture_info(struct exec *ex, const struct wire_stream_get_capture_info_req *req,
				      struct wire_stream_get_capture_info_rep *rep)
{
	static uint32_t deps_out[GRAPH_DESC_DEPS_MAX];
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	const CUgraphNode *deps = NULL;
	struct exec_graph *g;
	cuuint64_t id = 0;
	size_t n = 0;
	CUgraph real = NULL;
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	if (res != CUDA_SUCCESS)
		return res;
	if (req->want & ~(CAPTURE_WANT_GRAPH | CAPTURE_WANT_DEPS))
		return CUDA_ERROR_INVALID_VALUE;
	res = ex->be->cuStreamGetCaptureInfo(s, &st, &id, &real, &deps, &n);
	if (res != CUDA_SUCCESS)
		return res;
	rep->status = st;
	rep->id = id;
	if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE || !req->want)
		return CUDA_SUCCESS;
	res = capture_graph_handle(ex, real, &rep->graph, &g);
	if (res != CUDA_SUCCESS || !(req->want & CAPTURE_WANT_DEPS))
		return res;
	if (n > GRAPH_DESC_DEPS_MAX)
		return CUDA_ERROR_NOT_SUPPORTED;
	res = graph_sync(ex, g, real);
	if (res == CUDA_SUCCESS) {
		struct real_index *map;
		uint32_t mapped;

		map = real_index_build(g->d, &mapped);
		if (!map)
			return CUDA_ERROR_OUT_OF_MEMORY;
		for (size_t i = 0; i < n; i++) {
			uint32_t idx = index_of_real(map, mapped, deps[i]);
			uint8_t *b = (uint8_t *)&deps_out[i];

			for (int k = 0; k < 4; k++)
				b[k] = (uint8_t)(idx >> (8 * k));
		}
		free(map);
		rep->deps = (struct wire_blob){ (const uint8_t *)deps_out, (uint32_t)(n * 4) };
	}
	return res;
}

/* Node indices of a `deps` blob: each a live node of @d, none twice.
 * *@idx (malloc'ed) and *@reals (malloc'ed) have *@n entries. */
static CUresult deps_parse(const struct graph_desc *d, struct wire_blob blob, uint32_t **idx,
			   CUgraphNode **reals, uint32_t *n)
{
	uint32_t count = blob.len / 4;

	*idx = NULL;
	*reals = NULL;
	*n = 0;
	if (blob.len % 4 || count > GRAPH_DESC_DEPS_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (!count)
		return CUDA_SUCCESS;
	*idx = malloc(count * sizeof(uint32_t));
	*reals = malloc(count * sizeof(CUgraphNode));
	if (!*idx || !*reals)
		goto out_nomem;
	for (uint32_t i = 0; i < count; i++) {
		uint32_t v = le32_get(blob.ptr + 4 * i);

		if (!graph_desc_node_live(d, v))
			goto out_inval;
		(*idx)[i] = v;
		(*reals)[i] = d->nodes[v].real;
	}
	switch (graph_deps_unique(*idx, count)) {
	case 1:
		break;
	case 0:
		goto out_inval;
	default:
		goto out_nomem;
	}
	*n = count;
	return CUDA_SUCCESS;
out_inval:
	free(*idx);
	free(*reals);
	*idx = NULL;
	*reals = NULL;
	return CUDA_ERROR_INVALID_VALUE;
out_nomem:
	free(*idx);
	free(*reals);
	*idx = NULL;
	*reals = NULL;
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult exec_stream_update_capture_dependencies(struct exec *ex,
						 const struct wire_stream_update_capture_dependencies_req *req,
						 struct wire_stream_update_capture_dependencies_rep *rep)
{
	struct exec_graph *g;
	uint32_t *idx, n;
	CUgraphNode *reals;
	CUgraph real;
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	if (res != CUDA_SUCCESS)
		return res;
	if (req->flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES)
		return CUDA_ERROR_INVALID_VALUE;
	if (req->deps.len) {
		g = graph_get(ex, req->graph, &real);
		if (!g)
			return CUDA_ERROR_INVALID_HANDLE;
		/* Nodes of the graph a capture adds to, and of no other. */
		if (!g->capturing)
			return CUDA_ERROR_INVALID_VALUE;
		res = graph_sync(ex, g, real);
		if (res == CUDA_SUCCESS)
			res = deps_parse(g->d, req->deps, &idx, &reals, &n);
		if (res != CUDA_SUCCESS)
			return res;
	} else {
		idx = NULL;
		reals = NULL;
		n = 0;
	}
	res = ex->be->cuStreamUpdateCaptureDependencies(s, reals, n, req->flags);
	free(idx);
	free(reals);
	return res;
}

CUresult exec_capture_mode_set(struct exec *ex, const struct wire_capture_mode_set_req *req,
			       struct wire_capture_mode_set_rep *rep)
{
	CUstreamCaptureMode mode = (CUstreamCaptureMode)req->mode;
	CUresult res;

	if (req->mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	res = ex->be->cuThreadExchangeStreamCaptureMode(&mode);
	if (res == CUDA_SUCCESS)
		ex->graphs.capture_mode = req->mode;
	return res;
}

/* ---- graphs ------------------------------------------------------------- */

CUresult exec_graph_create(struct exec *ex, const struct wire_graph_create_req *req,
			   struct wire_graph_create_rep *rep)
{
	struct exec_graph *g;
	CUgraph real;
	CUresult res;

	if (req->flags)
		return CUDA_ERROR_INVALID_VALUE;
	g = graph_info_new();
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = ex->be->cuGraphCreate(&real, 0);
	if (res == CUDA_SUCCESS) {
		res = graph_entry_add(ex, real, g, &rep->graph);
		if (res != CUDA_SUCCESS)
			ex->be->cuGraphDestroy(real);
	}
	if (res != CUDA_SUCCESS) {
		free(g);
		return res;
	}
	journal_graph(ex, rep->graph, g);
	return CUDA_SUCCESS;
}

struct shared_forget {
	uint64_t graph;
	uint32_t node;          /* GRAPH_NODE_NONE: all */
};

static int shared_forget_one(struct handle_entry *e, void *arg)
{
	struct shared_forget *f = arg;
	struct exec_graph_exec *x = e->info;

	if (e->kind != HANDLE_GRAPH_EXEC || !x || !x->shared || x->origin != f->graph)
		return 0;
	for (uint32_t i = 0; i < x->d.count; i++)
		if (f->node == GRAPH_NODE_NONE || f->node == i)
			x->d.nodes[i].real = NULL;
	if (f->node == GRAPH_NODE_NONE)
		x->shared = false;
	return 0;
}

/* Executables instantiated from graph @graph itself forget its node
 * @node (all of them: GRAPH_NODE_NONE), which is going: a guest's later
 * call naming it fails instead of reaching a freed node. */
static void shared_execs_forget(struct exec *ex, uint64_t graph, uint32_t node)
{
	struct shared_forget f = { graph, node };

	handle_table_foreach(ex->handles, shared_forget_one, &f);
}

CUresult exec_graph_destroy(struct exec *ex, const struct wire_graph_destroy_req *req,
			    struct wire_graph_destroy_rep *rep)
{
	CUgraph real;
	struct exec_graph *g = graph_get(ex, req->graph, &real);
	CUresult res;

	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	/* A body is its conditional node's: it goes with the node. */
	if (g->parent)
		return CUDA_ERROR_INVALID_VALUE;
	if (g->capturing || bodies_capturing(ex, g->d))  /* the capture owns it until it ends */
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	res = ex->be->cuGraphDestroy(real);
	if (res != CUDA_SUCCESS)
		return res;
	shared_execs_forget(ex, req->graph, GRAPH_NODE_NONE);
	exec_object_remove(ex, req->graph);
	graph_info_release(ex, g, true);
	return CUDA_SUCCESS;
}

/* Point @d's nodes at their copies in the backend's clone @clone of the
 * graph whose nodes @from's describe. */
static CUresult nodes_find_in_clone(struct exec *ex, const struct graph_desc *from, struct graph_desc *d,
				    CUgraph clone)
{
	for (uint32_t i = 0; i < d->count; i++) {
		CUresult res;

		d->nodes[i].real = NULL;
		if (!from->nodes[i].real)
			continue;
		res = ex->be->cuGraphNodeFindInClone((CUgraphNode *)&d->nodes[i].real,
						     from->nodes[i].real, clone);
		if (res != CUDA_SUCCESS)
			return res;
	}
	return CUDA_SUCCESS;
}

CUresult exec_graph_clone(struct exec *ex, const struct wire_graph_clone_req *req,
			  struct wire_graph_clone_rep *rep)
{
	CUgraph real, clone;
	struct exec_graph *g = graph_get(ex, req->graph, &real), *c;
	CUresult res;

	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (g->capturing)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (g->parent)          /* bodies are not the guest's to copy: the H200's answer */
		return CUDA_ERROR_NOT_SUPPORTED;
	c = graph_info_new();
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (graph_desc_copy(c->d, g->d)) {
		free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	c->cloned_from = req->graph;
	res = ex->be->cuGraphClone(&clone, real);
	if (res != CUDA_SUCCESS)
		goto out_free;
	res = nodes_find_in_clone(ex, g->d, c->d, clone);
	if (res == CUDA_SUCCESS)
		res = graph_entry_add(ex, clone, c, &rep->clone);
	if (res != CUDA_SUCCESS) {
		ex->be->cuGraphDestroy(clone);
		goto out_free;
	}
	desc_gallocs(ex, c->d, +1);
	journal_graph(ex, rep->clone, c);
	return CUDA_SUCCESS;
out_free:
	graph_desc_release(c->d);
	free(c);
	return res;
}

CUresult exec_graph_node_find_in_clone(struct exec *ex, const struct wire_graph_node_find_in_clone_req *req,
				       struct wire_graph_node_find_in_clone_rep *rep)
{
	struct exec_graph *c = graph_get(ex, req->clone, NULL);

	if (!c || !graph_get(ex, req->graph, NULL))
		return CUDA_ERROR_INVALID_HANDLE;
	if (c->cloned_from != req->graph || !graph_desc_node_live(c->d, req->node))
		return CUDA_ERROR_INVALID_VALUE;
	rep->clone_node = req->node;
	return CUDA_SUCCESS;
}

/* The common part of adding a node: the graph, its dependencies, the
 * backend's add (by @add), the description, the journal. @n is consumed. */
struct node_add {
	struct exec_graph *g;
	CUgraph real;
	uint32_t *idx;
	CUgraphNode *deps;
	uint32_t ndeps;
};

static CUresult node_add_begin(struct exec *ex, uint64_t graph, struct wire_blob deps, struct node_add *a)
{
	CUresult res;

	memset(a, 0, sizeof(*a));
	a->g = graph_get(ex, graph, &a->real);
	if (!a->g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (a->g->capturing) {
		res = graph_sync(ex, a->g, a->real);
		if (res != CUDA_SUCCESS)
			return res;
	}
	if (graph_root(a->g)->d->weight >= GRAPH_DESC_NODES_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return deps_parse(a->g->d, deps, &a->idx, &a->deps, &a->ndeps);
}

/* After the backend's add returned @res (the new node in @real): record it. */
static CUresult node_add_end(struct exec *ex, uint64_t graph, struct node_add *a, CUresult res,
			     CUgraphNode real, struct graph_node *n, uint32_t *index)
{
	uint32_t before;
	int ret;

	free(a->deps);
	if (res != CUDA_SUCCESS) {
		free(a->idx);
		graph_node_release(n);
		return res;
	}
	n->real = real;
	n->deps = a->idx;
	n->ndeps = a->ndeps;
	before = a->g->d->weight;
	ret = graph_desc_append(a->g->d, n);
	if (!ret)
		weight_propagate(a->g, before);
	if (ret) {
		ex->be->cuGraphDestroyNode(real);
		graph_node_release(n);
		return res_of_errno(ret == -E2BIG ? -ENOMEM : ret);
	}
	*index = a->g->d->count - 1;
	if (!a->g->capturing)
		journal_graph(ex, graph, a->g);
	return CUDA_SUCCESS;
}

/* A kernel node's parameters from the request fields, which the add and
 * both set-params calls name alike: checked, copied into @k (owned by the
 * caller) and given as the driver wants them in @p. */
#define KERNEL_REQ(req) (req)->function, \
	(const uint32_t[3]){ (req)->grid_x, (req)->grid_y, (req)->grid_z }, \
	(const uint32_t[3]){ (req)->block_x, (req)->block_y, (req)->block_z }, \
	(req)->shared_bytes, (req)->args

static CUresult kernel_node_prepare(struct exec *ex, uint64_t function, const uint32_t grid[3],
				    const uint32_t block[3], uint32_t shared_bytes, struct wire_blob args,
				    struct graph_node_kernel *k, CUDA_KERNEL_NODE_PARAMS *p, const struct cond_chain *c)
{
	const struct exec_params *layout;
	CUfunction fn;
	CUresult res = exec_function_real(ex, function, &fn, &layout);

	memset(k, 0, sizeof(*k));
	if (res != CUDA_SUCCESS)
		return res;
	if (args.len != layout->bytes || args.len > GRAPH_ARGS_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	k->function = function;
	memcpy(k->grid, grid, sizeof(k->grid));
	memcpy(k->block, block, sizeof(k->block));
	k->shared_bytes = shared_bytes;
	k->args_len = args.len;
	if (args.len) {
		k->args = malloc(args.len);
		if (!k->args)
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(k->args, args.ptr, args.len);
	}
	res = kernel_node_params(ex, k, p, c, NULL);
	if (res != CUDA_SUCCESS) {
		free(k->args);
		k->args = NULL;
	}
	return res;
}

/* A kernel node of a graph or executable takes @k after the backend did. */
static void kernel_node_replace(struct graph_node *n, struct graph_node_kernel *k)
{
	free(n->kernel.args);
	n->kernel = *k;
}

/* Node @index of @d if it is of @type, or NULL. */
static struct graph_node *node_at(struct graph_desc *d, uint32_t index, CUgraphNodeType type)
{
	if (!graph_desc_node_live(d, index) || d->nodes[index].type != (uint32_t)type)
		return NULL;
	return &d->nodes[index];
}

static struct graph_node *kernel_node_at(struct graph_desc *d, uint32_t index)
{
	return node_at(d, index, CU_GRAPH_NODE_TYPE_KERNEL);
}

CUresult exec_graph_add_kernel_node(struct exec *ex, const struct wire_graph_add_kernel_node_req *req,
				    struct wire_graph_add_kernel_node_rep *rep)
{
	struct graph_node n = { .type = CU_GRAPH_NODE_TYPE_KERNEL };
	CUDA_KERNEL_NODE_PARAMS p;
	CUgraphNode real = NULL;
	struct node_add a;
	struct cond_chain c;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS) {
		graph_chain(a.g, &c);
		res = kernel_node_prepare(ex, KERNEL_REQ(req), &n.kernel, &p, &c);
	}
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphAddKernelNode(&real, a.real, a.deps, a.ndeps, &p);
	return node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
}

/* Bytes spanned by @rows rows of @width bytes, @pitch apart, in @layers
 * layers of @layer_rows rows. False on overflow or a pitch too small. */
static bool extent(uint64_t width, uint64_t pitch, uint64_t rows, uint64_t layer_rows, uint64_t layers,
		   uint64_t *out)
{
	uint64_t a, b;

	if (!width || !rows || !layers)
		return false;
	if ((rows > 1 || layers > 1) && pitch < width)
		return false;
	if (layers > 1 && layer_rows < rows)
		return false;
	if (__builtin_mul_overflow(layers - 1, layer_rows, &a) || __builtin_mul_overflow(a, pitch, &a) ||
	    __builtin_mul_overflow(rows - 1, pitch, &b) || __builtin_add_overflow(a, b, &a) ||
	    __builtin_add_overflow(a, width, out))
		return false;
	return true;
}

static bool memcpy_valid(struct exec *ex, const struct graph_node_memcpy *c)
{
	uint64_t src, dst;

	return extent(c->width, c->src_pitch, c->height, c->src_height, c->depth, &src) &&
	       extent(c->width, c->dst_pitch, c->height, c->dst_height, c->depth, &dst) &&
	       exec_device_range_valid(ex, c->src, src) && exec_device_range_valid(ex, c->dst, dst);
}

CUresult exec_graph_add_memcpy_node(struct exec *ex, const struct wire_graph_add_memcpy_node_req *req,
				    struct wire_graph_add_memcpy_node_rep *rep)
{
	struct graph_node n = {
		.type = CU_GRAPH_NODE_TYPE_MEMCPY,
		.copy = { req->dst, req->dst_pitch, req->dst_height, req->src, req->src_pitch,
			  req->src_height, req->width, req->height, req->depth },
	};
	CUDA_MEMCPY3D p;
	CUgraphNode real = NULL;
	CUcontext ctx = NULL;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS && !memcpy_valid(ex, &n.copy))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = ctx_real(ex, &ctx);
	if (res == CUDA_SUCCESS) {
		memcpy_3d(&n.copy, &p);
		res = ex->be->cuGraphAddMemcpyNode(&real, a.real, a.deps, a.ndeps, &p, ctx);
	}
	return node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
}

static bool memset_valid(struct exec *ex, const struct graph_node_memset *s)
{
	uint64_t width, span;

	if (s->element_size != 1 && s->element_size != 2 && s->element_size != 4)
		return false;
	if (s->dst % s->element_size || __builtin_mul_overflow(s->width, (uint64_t)s->element_size, &width))
		return false;
	return extent(width, s->pitch, s->height, s->height, 1, &span) &&
	       exec_device_range_valid(ex, s->dst, span);
}

CUresult exec_graph_add_memset_node(struct exec *ex, const struct wire_graph_add_memset_node_req *req,
				    struct wire_graph_add_memset_node_rep *rep)
{
	struct graph_node n = {
		.type = CU_GRAPH_NODE_TYPE_MEMSET,
		.set = { req->dst, req->pitch, req->width, req->height, req->value, req->element_size },
	};
	CUDA_MEMSET_NODE_PARAMS p;
	CUgraphNode real = NULL;
	CUcontext ctx = NULL;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS && !memset_valid(ex, &n.set))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = ctx_real(ex, &ctx);
	if (res == CUDA_SUCCESS) {
		memset_params(&n.set, &p);
		res = ex->be->cuGraphAddMemsetNode(&real, a.real, a.deps, a.ndeps, &p, ctx);
	}
	return node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
}

CUresult exec_graph_add_empty_node(struct exec *ex, const struct wire_graph_add_empty_node_req *req,
				   struct wire_graph_add_empty_node_rep *rep)
{
	struct graph_node n = { .type = CU_GRAPH_NODE_TYPE_EMPTY };
	CUgraphNode real = NULL;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphAddEmptyNode(&real, a.real, a.deps, a.ndeps);
	return node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
}

CUresult exec_graph_add_host_node(struct exec *ex, const struct wire_graph_add_host_node_req *req,
				  struct wire_graph_add_host_node_rep *rep)
{
	struct graph_node n = { .type = CU_GRAPH_NODE_TYPE_HOST, .host = req->token };
	CUDA_HOST_NODE_PARAMS p;
	CUgraphNode real = NULL;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS)
		res = exec_hostfn_params(ex, req->token, &p);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphAddHostNode(&real, a.real, a.deps, a.ndeps, &p);
	return node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
}

CUresult exec_graph_add_child_node(struct exec *ex, const struct wire_graph_add_child_node_req *req,
				   struct wire_graph_add_child_node_rep *rep)
{
	struct graph_node n = { .type = CU_GRAPH_NODE_TYPE_GRAPH };
	CUgraph child_real = NULL;
	struct exec_graph *child = graph_get(ex, req->child, &child_real);
	CUgraphNode real = NULL;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS && !child)
		res = CUDA_ERROR_INVALID_HANDLE;
	/* Memory nodes may not be in a child graph (as in the driver). */
	if (res == CUDA_SUCCESS && (child->capturing || req->child == req->graph))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS && child->parent)       /* a body: the H200's answer */
		res = CUDA_ERROR_NOT_SUPPORTED;
	if (res == CUDA_SUCCESS && desc_has_mem_nodes(child->d))
		res = CUDA_ERROR_NOT_SUPPORTED;
	if (res == CUDA_SUCCESS &&
	    (graph_nesting(a.g) + desc_depth(child->d) + 1 >= GRAPH_DESC_DEPTH_MAX ||
	     child->d->weight >= GRAPH_DESC_NODES_MAX - graph_root(a.g)->d->weight))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	if (res == CUDA_SUCCESS) {
		n.child = calloc(1, sizeof(*n.child));
		if (!n.child || graph_desc_copy(n.child, child->d))
			res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphAddChildGraphNode(&real, a.real, a.deps, a.ndeps, child_real);
	return node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
}

CUresult exec_graph_add_event_node(struct exec *ex, const struct wire_graph_add_event_node_req *req,
				   struct wire_graph_add_event_node_rep *rep)
{
	struct graph_node n = {
		.type = req->wait ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : CU_GRAPH_NODE_TYPE_EVENT_RECORD,
		.event = req->event,
	};
	struct handle_entry *ev = handle_table_get(ex->handles, req->event, HANDLE_EVENT);
	CUgraphNode real = NULL;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS && (!ev || req->wait > 1))
		res = ev ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
	if (res == CUDA_SUCCESS)
		res = req->wait ? ex->be->cuGraphAddEventWaitNode(&real, a.real, a.deps, a.ndeps, ev->real)
				: ex->be->cuGraphAddEventRecordNode(&real, a.real, a.deps, a.ndeps, ev->real);
	return node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
}

CUresult exec_graph_add_mem_alloc_node(struct exec *ex, const struct wire_graph_add_mem_alloc_node_req *req,
				       struct wire_graph_add_mem_alloc_node_rep *rep)
{
	struct graph_node n = { .type = CU_GRAPH_NODE_TYPE_MEM_ALLOC };
	struct exec_graph_alloc *ga;
	CUgraphNode real = NULL;
	uint64_t addr = 0;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS && !req->bytes)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS && a.g->execs)  /* one executable at a time, as in the driver */
		res = CUDA_ERROR_INVALID_VALUE;
	/* The quota counts what is mapped, as for cuMemAlloc. */
	if (res == CUDA_SUCCESS)
		res = exec_mem_map(ex, req->bytes, &addr);
	if (res == CUDA_SUCCESS && galloc_add(ex, addr, req->bytes, false)) {
		exec_mem_unmap(ex, addr);
		addr = 0;
		res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphAddEmptyNode(&real, a.real, a.deps, a.ndeps);
	n.mem.address = addr;
	n.mem.bytes = req->bytes;
	res = node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
	ga = addr ? galloc_find(ex, addr) : NULL;
	if (res != CUDA_SUCCESS) {
		if (ga) {
			*ga = ex->graphs.allocs[--ex->graphs.alloc_count];
			exec_mem_unmap(ex, addr);
		}
		return res;
	}
	ga->refs = 1;
	galloc_journal(ex, ga);
	rep->address = addr;
	return CUDA_SUCCESS;
}

CUresult exec_graph_add_mem_free_node(struct exec *ex, const struct wire_graph_add_mem_free_node_req *req,
				      struct wire_graph_add_mem_free_node_rep *rep)
{
	struct graph_node n = { .type = CU_GRAPH_NODE_TYPE_MEM_FREE, .mem = { req->address, 0 } };
	struct exec_graph_alloc *ga = galloc_find(ex, req->address);
	CUgraphNode real = NULL;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS && (!ga || ga->freed))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS && a.g->execs)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphAddEmptyNode(&real, a.real, a.deps, a.ndeps);
	res = node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
	if (res == CUDA_SUCCESS) {
		/* Freed for good once the graphs holding its alloc node go. */
		ga->freed = true;
		galloc_journal(ex, ga);
	}
	return res;
}

/* A capture graph's description is read back before it is shown. */
static struct exec_graph *graph_get_synced(struct exec *ex, uint64_t handle, CUresult *res)
{
	CUgraph real;
	struct exec_graph *g = graph_get(ex, handle, &real);

	*res = g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	if (g && g->capturing)
		*res = graph_sync(ex, g, real);
	return *res == CUDA_SUCCESS ? g : NULL;
}

CUresult exec_graph_get_nodes(struct exec *ex, const struct wire_graph_get_nodes_req *req,
			      struct wire_graph_get_nodes_rep *rep)
{
	CUresult res;
	struct exec_graph *g = graph_get_synced(ex, req->graph, &res);
	uint8_t *out;
	uint32_t n = 0;

	if (!g)
		return res;
	if ((uint64_t)g->d->count * 8 > WIRE_COPY_PIECE)
		return CUDA_ERROR_NOT_SUPPORTED;
	out = exec_copy_buffer(ex, (size_t)g->d->count * 8 + 1);
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; i < g->d->count; i++) {
		if (g->d->nodes[i].type == GRAPH_NODE_REMOVED)
			continue;
		le32_put(out + 8 * n, i);
		le32_put(out + 8 * n + 4, g->d->nodes[i].type);
		n++;
	}
	rep->nodes = (struct wire_blob){ out, n * 8 };
	return CUDA_SUCCESS;
}

CUresult exec_graph_get_edges(struct exec *ex, const struct wire_graph_get_edges_req *req,
			      struct wire_graph_get_edges_rep *rep)
{
	CUresult res;
	struct exec_graph *g = graph_get_synced(ex, req->graph, &res);
	uint8_t *out;
	uint32_t n = 0;

	if (!g)
		return res;
	if ((uint64_t)g->d->edges * 8 > WIRE_COPY_PIECE)
		return CUDA_ERROR_NOT_SUPPORTED;
	out = exec_copy_buffer(ex, (size_t)g->d->edges * 8 + 1);
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; i < g->d->count; i++)
		for (uint32_t j = 0; j < g->d->nodes[i].ndeps && n < g->d->edges; j++) {
			le32_put(out + 8 * n, g->d->nodes[i].deps[j]);
			le32_put(out + 8 * n + 4, i);
			n++;
		}
	rep->edges = (struct wire_blob){ out, n * 8 };
	return CUDA_SUCCESS;
}

CUresult exec_graph_edit_edges(struct exec *ex, const struct wire_graph_edit_edges_req *req,
			       struct wire_graph_edit_edges_rep *rep)
{
	CUgraphNode *from = NULL, *to = NULL;
	uint32_t *a = NULL, *b = NULL, n = req->edges.len / 8;
	CUgraph real;
	struct exec_graph *g = graph_get(ex, req->graph, &real);
	CUresult res = CUDA_SUCCESS;
	int ret;

	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (req->edges.len % 8 || n > GRAPH_DESC_DEPS_MAX || req->remove > 1)
		return CUDA_ERROR_INVALID_VALUE;
	if (g->capturing)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (!n)
		return CUDA_SUCCESS;
	a = malloc(n * sizeof(*a));
	b = malloc(n * sizeof(*b));
	from = malloc(n * sizeof(*from));
	to = malloc(n * sizeof(*to));
	if (!a || !b || !from || !to) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		a[i] = le32_get(req->edges.ptr + 8 * i);
		b[i] = le32_get(req->edges.ptr + 8 * i + 4);
	}
	/* All or nothing: every pair is checked before the backend sees one. */
	ret = graph_desc_edges_check(g->d, a, b, n, req->remove);
	if (ret) {
		res = ret == -EINVAL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		from[i] = g->d->nodes[a[i]].real;
		to[i] = g->d->nodes[b[i]].real;
	}
	res = req->remove ? ex->be->cuGraphRemoveDependencies(real, from, to, n)
			  : ex->be->cuGraphAddDependencies(real, from, to, n);
	if (res != CUDA_SUCCESS)
		goto out;
	if (graph_desc_edges_apply(g->d, a, b, n, req->remove)) {
		/* Out of memory: the backend's edges go back as they were. */
		if (req->remove)
			ex->be->cuGraphAddDependencies(real, from, to, n);
		else
			ex->be->cuGraphRemoveDependencies(real, from, to, n);
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	journal_graph(ex, req->graph, g);
out:
	free(a);
	free(b);
	free(from);
	free(to);
	return res;
}

CUresult exec_graph_destroy_node(struct exec *ex, const struct wire_graph_destroy_node_req *req,
				 struct wire_graph_destroy_node_rep *rep)
{
	CUgraph real;
	struct exec_graph *g = graph_get(ex, req->graph, &real);
	struct graph_node *n;
	uint64_t alloc = 0;
	uint32_t before;
	CUresult res;

	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (g->capturing)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (!graph_desc_node_live(g->d, req->node))
		return CUDA_ERROR_INVALID_VALUE;
	n = &g->d->nodes[req->node];
	{
		struct graph_desc one = { .count = 1, .nodes = n };

		if (bodies_capturing(ex, &one))
			return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	res = ex->be->cuGraphDestroyNode(n->real);
	if (res != CUDA_SUCCESS)
		return res;
	if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
		alloc = n->mem.address;
	{
		struct graph_desc one = { .count = 1, .nodes = n };

		bodies_forget(ex, &one);        /* its bodies' (embedded graph's) handles go with it */
	}
	shared_execs_forget(ex, req->graph, req->node);
	before = g->d->weight;
	graph_desc_node_remove(g->d, req->node);
	weight_propagate(g, before);
	if (alloc) {
		struct exec_graph_alloc *ga = galloc_find(ex, alloc);

		if (ga && ga->refs) {
			/* Nothing can use memory whose alloc node is gone. */
			ga->refs--;
			ga->freed = true;
			galloc_settle(ex, ga);
		}
	}
	journal_graph(ex, req->graph, g);
	return CUDA_SUCCESS;
}

CUresult exec_graph_kernel_node_set_params(struct exec *ex,
					   const struct wire_graph_kernel_node_set_params_req *req,
					   struct wire_graph_kernel_node_set_params_rep *rep)
{
	struct graph_node_kernel k;
	CUDA_KERNEL_NODE_PARAMS p;
	struct graph_node *n;
	struct exec_graph *g = graph_get(ex, req->graph, NULL);
	struct cond_chain c;
	CUresult res;

	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (g->capturing)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	n = kernel_node_at(g->d, req->node);
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	graph_chain(g, &c);
	res = kernel_node_prepare(ex, KERNEL_REQ(req), &k, &p, &c);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphKernelNodeSetParams(n->real, &p);
	if (res != CUDA_SUCCESS) {
		free(k.args);
		return res;
	}
	kernel_node_replace(n, &k);
	journal_graph(ex, req->graph, g);
	return CUDA_SUCCESS;
}

CUresult exec_graph_host_node_get_params(struct exec *ex, const struct wire_graph_host_node_get_params_req *req,
					 struct wire_graph_host_node_get_params_rep *rep)
{
	CUresult res;
	struct exec_graph *g = graph_get_synced(ex, req->graph, &res);
	struct graph_node *n = g ? node_at(g->d, req->node, CU_GRAPH_NODE_TYPE_HOST) : NULL;

	if (!g)
		return res;
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	rep->token = n->host;
	return CUDA_SUCCESS;
}

CUresult exec_graph_host_node_set_params(struct exec *ex, const struct wire_graph_host_node_set_params_req *req,
					 struct wire_graph_host_node_set_params_rep *rep)
{
	struct exec_graph *g = graph_get(ex, req->graph, NULL);
	CUDA_HOST_NODE_PARAMS p;
	struct graph_node *n;
	CUresult res;

	(void)rep;
	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (g->capturing)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	n = node_at(g->d, req->node, CU_GRAPH_NODE_TYPE_HOST);
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_hostfn_params(ex, req->token, &p);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphHostNodeSetParams(n->real, &p);
	if (res != CUDA_SUCCESS)
		return res;
	n->host = req->token;
	journal_graph(ex, req->graph, g);
	return CUDA_SUCCESS;
}

/* ---- executable graphs -------------------------------------------------- */

#define INSTANTIATE_FLAGS_KNOWN (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | \
				 CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |              \
				 CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)

/* Instantiate @source (whose nodes @d describes): the executable and its info. */
static CUresult exec_make(struct exec *ex, CUgraph source, struct graph_desc *d, uint64_t flags,
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
		if (handle_table_add(ex->handles, HANDLE_GRAPH_EXEC, exec, ex->primary_ctx, x, &rep->exec)) {
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
				       req->src_height, req->width, req->height, req->depth };
	struct node_target t;
	CUDA_MEMCPY3D p;
	CUcontext ctx;
	CUresult res = node_target(ex, req->exec, req->graph, req->node, CU_GRAPH_NODE_TYPE_MEMCPY, &t);

	(void)rep;
	if (res == CUDA_SUCCESS && !memcpy_valid(ex, &c))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = ctx_real(ex, &ctx);
	if (res != CUDA_SUCCESS)
		return res;
	memcpy_3d(&c, &p);
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
	if (res == CUDA_SUCCESS && !memset_valid(ex, &s))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = ctx_real(ex, &ctx);
	if (res != CUDA_SUCCESS)
		return res;
	memset_params(&s, &p);
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
static CUresult exec_enabled_restore(struct exec *ex, CUgraphExec exec, const struct graph_desc *d)
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
	if (res == CUDA_SUCCESS && (!w || handle_table_add(ex->handles, HANDLE_GRAPH, embedded, ex->primary_ctx, w,
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
	out = exec_copy_buffer(ex, (size_t)req->size * 8);
	for (uint32_t k = 0; out && k < req->size; k++) {
		struct exec_graph *b = graph_info_new();

		if (!b || handle_table_add(ex->handles, HANDLE_GRAPH, node->cond.body_real[k], ex->primary_ctx, b,
					   &node->cond.body_handle[k])) {
			free(b);
			out = NULL;
			break;
		}
		b->d = &node->cond.body[k];
		b->parent = a.g;
		for (int j = 0; j < 8; j++)
			out[8 * k + (uint32_t)j] = (uint8_t)(node->cond.body_handle[k] >> (8 * j));
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
	rep->bodies = (struct wire_blob){ out, req->size * 8 };
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
			ret = handle_table_add_at(ex->handles, *handle, real, ex->primary_ctx, b);
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
		if (handle_table_add_at(ex->handles, handle, real, ex->primary_ctx, g)) {
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
		if (handle_table_add_at(ex->handles, handle, exec, ex->primary_ctx, x)) {
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
