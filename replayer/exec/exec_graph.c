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

#include "exec_graph_internal.h"
#include "log.h"
#include "le.h"

struct exec_graph *graph_info_new(void)
{
	struct exec_graph *g = calloc(1, sizeof(*g));

	if (g)
		g->d = &g->own;
	return g;
}

/* The guest's graph a conditional body belongs to (itself if not a body). */
struct exec_graph *graph_root(struct exec_graph *g)
{
	while (g->parent)
		g = g->parent;
	return g;
}

unsigned graph_nesting(const struct exec_graph *g)
{
	unsigned n = 0;

	for (; g->parent; g = g->parent)
		n++;
	return n;
}

/* A body's description changed from @before nodes (its weight) to what it
 * is: the descriptions around it count its nodes too. */
void weight_propagate(struct exec_graph *g, uint32_t before)
{
	uint32_t delta = g->d->weight - before;         /* modulo 2^32: may shrink */

	for (struct exec_graph *p = g->parent; p; p = p->parent)
		p->d->weight += delta;
}

/* True when a handle of @c has another value in the backend than the
 * guest's (after a restore): only then are arguments looked at. */
bool chain_translates(const struct cond_chain *c)
{
	for (unsigned j = 0; c && j < c->n; j++)
		for (uint32_t k = 0; k < c->d[j]->nhandles; k++)
			if (c->d[j]->handles[k].value != c->d[j]->handles[k].real)
				return true;
	return false;
}

void graph_chain(const struct exec_graph *g, struct cond_chain *c)
{
	c->n = 0;
	for (; g && c->n <= GRAPH_DESC_DEPTH_MAX; g = g->parent)
		c->d[c->n++] = g->d;
}


/* ---- lookups ------------------------------------------------------------ */

struct exec_graph *graph_get(struct exec *ex, uint64_t handle, CUgraph *real)
{
	struct handle_entry *e = handle_table_get(ex->handles, handle, HANDLE_GRAPH);

	if (!e)
		return NULL;
	if (real)
		*real = e->real;
	return e->info;
}

struct exec_graph_exec *graph_exec_get(struct exec *ex, uint64_t handle, CUgraphExec *real)
{
	struct handle_entry *e = handle_table_get(ex->handles, handle, HANDLE_GRAPH_EXEC);

	if (!e)
		return NULL;
	if (real)
		*real = e->real;
	return e->info;
}

_Static_assert(WIRE_REC_GRAPH_NODE_MAX == GRAPH_DESC_NODES_MAX, "calls.tbl's graph_node max is the description's");
_Static_assert(WIRE_REC_GRAPH_EDGE_DATA_MAX == GRAPH_DESC_EDGES_MAX, "calls.tbl's graph_edge_data max is the description's");

CUresult res_of_errno(int ret)
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

/* Take (+1) or drop (-1) the references of a description's alloc and free nodes. */
void desc_gallocs(struct exec *ex, const struct graph_desc *d, int delta)
{
	for (uint32_t i = 0; i < d->count; i++) {
		struct exec_graph_alloc *ga;

		/* Free nodes hold the allocation too: a capture's free of
		 * memory no graph holds any more must not unmap it mid-capture. */
		if (d->nodes[i].type != CU_GRAPH_NODE_TYPE_MEM_ALLOC && d->nodes[i].type != CU_GRAPH_NODE_TYPE_MEM_FREE)
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

bool desc_has_mem_nodes(const struct graph_desc *d)
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

CUresult exec_graph_alloc_new(struct exec *ex, uint64_t bytes, uint64_t *addr)
{
	/* The quota counts what is mapped, as for cuMemAlloc. */
	CUresult res = bytes ? exec_mem_map(ex, bytes, addr) : CUDA_ERROR_INVALID_VALUE;

	if (res != CUDA_SUCCESS)
		return res;
	if (galloc_add(ex, *addr, bytes, false)) {
		exec_mem_unmap(ex, *addr);
		*addr = 0;
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ex->graphs.allocs[ex->graphs.alloc_count - 1].refs = 1;
	galloc_journal(ex, &ex->graphs.allocs[ex->graphs.alloc_count - 1]);
	return CUDA_SUCCESS;
}

bool exec_graph_alloc_is(struct exec *ex, uint64_t addr)
{
	return galloc_find(ex, addr) != NULL;
}

void exec_graph_alloc_free_node(struct exec *ex, uint64_t addr)
{
	struct exec_graph_alloc *ga = galloc_find(ex, addr);

	if (!ga)
		return;
	/* Freed for good once the graphs holding its nodes go. */
	ga->refs++;
	if (!ga->freed) {
		ga->freed = true;
		galloc_journal(ex, ga);
	}
}

void exec_graph_alloc_drop(struct exec *ex, uint64_t addr, bool gone)
{
	struct exec_graph_alloc *ga = galloc_find(ex, addr);

	if (!ga)
		return;
	if (gone && !ga->freed) {
		ga->freed = true;
		galloc_journal(ex, ga);
	}
	if (ga->refs) {
		ga->refs--;
		galloc_settle(ex, ga);
	}
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
	exec_journal_object(ex, handle, kind, ex->dev.primary_ctx, args,
			    kind == HANDLE_GRAPH ? TRACKER_HASH_SIZE : sizeof(args));
	if (had && !ex->journal_broken && tracker_image_unref(ex->journal, old))
		ex->journal_broken = true;
}

/* A description is written when a snapshot needs it, not at every change:
 * rewriting a whole description per node would make building a graph of N
 * nodes cost N^2, and per cuGraphExecKernelNodeSetParams would put a
 * journal write in a loop that launches. */
void journal_graph(struct exec *ex, uint64_t handle, struct exec_graph *g)
{
	(void)handle;
	/* A body is journaled with the graph that owns it. */
	graph_root(g)->dirty = true;
	ex->graphs.dirty = true;
}

void journal_exec(struct exec *ex, uint64_t handle, struct exec_graph_exec *x)
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
uint32_t node_subgraphs(const struct graph_node *n)
{
	if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
		return n->cond.size;
	return n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child ? 1 : 0;
}

/* Subgraph @k of @n (< node_subgraphs), its guest handle in *@handle. */
struct graph_desc *node_subgraph(struct graph_node *n, uint32_t k, uint64_t **handle)
{
	if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
		*handle = &n->cond.body_handle[k];
		return &n->cond.body[k];
	}
	*handle = &n->child_handle;
	return n->child;
}

/* The wrapper of the guest's handle @handle of subgraph @d, or NULL. */
struct exec_graph *subgraph_info(struct exec *ex, uint64_t handle, const struct graph_desc *d)
{
	struct handle_entry *e = handle ? handle_table_get(ex->handles, handle, HANDLE_GRAPH) : NULL;

	return e && e->info && ((struct exec_graph *)e->info)->d == d ? e->info : NULL;
}

/* The handle entries of the graphs @d's nodes own (conditional bodies,
 * embedded child graphs; nested ones too) go: their descriptions go with
 * @d. */
void bodies_forget(struct exec *ex, struct graph_desc *d)
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

void graph_info_release(struct exec *ex, struct exec_graph *g, bool gallocs)
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

void exec_info_release(struct exec *ex, struct exec_graph_exec *x, bool gallocs)
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
CUresult nodes_find_in_clone(struct exec *ex, const struct graph_desc *from, struct graph_desc *d,
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

CUresult node_add_begin(struct exec *ex, uint64_t graph, struct wire_blob deps, struct node_add *a)
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
CUresult node_add_end(struct exec *ex, uint64_t graph, struct node_add *a, CUresult res,
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

CUresult kernel_node_prepare(struct exec *ex, uint64_t function, const uint32_t grid[3],
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
void kernel_node_replace(struct graph_node *n, struct graph_node_kernel *k)
{
	free(n->kernel.args);
	n->kernel = *k;
}

/* Node @index of @d if it is of @type, or NULL. */
struct graph_node *node_at(struct graph_desc *d, uint32_t index, CUgraphNodeType type)
{
	if (!graph_desc_node_live(d, index) || d->nodes[index].type != (uint32_t)type)
		return NULL;
	return &d->nodes[index];
}

struct graph_node *kernel_node_at(struct graph_desc *d, uint32_t index)
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

bool memcpy_check(struct exec *ex, const struct graph_node_memcpy *c, CUDA_MEMCPY3D *p)
{
	uint64_t span, src = c->src, dst = c->dst;
	bool src_ok, dst_ok;

	/* Both ends looked at, so that each one that is valid is translated. */
	src_ok = extent(c->width, c->src_pitch, c->height, c->src_height, c->depth, &span) &&
		 exec_device_range(ex, c->src, span, &src);
	dst_ok = extent(c->width, c->dst_pitch, c->height, c->dst_height, c->depth, &span) &&
		 exec_device_range(ex, c->dst, span, &dst);
	graph_node_memcpy_to_3d(c, p);
	p->srcDevice = src;
	p->dstDevice = dst;
	return src_ok && dst_ok;
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

	if (res == CUDA_SUCCESS && !memcpy_check(ex, &n.copy, &p))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = ctx_real(ex, &ctx);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphAddMemcpyNode(&real, a.real, a.deps, a.ndeps, &p, ctx);
	return node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
}

bool memset_check(struct exec *ex, const struct graph_node_memset *s, CUDA_MEMSET_NODE_PARAMS *p)
{
	uint64_t width, span, dst = s->dst;
	bool ok;

	memset_params(s, p);
	if (s->element_size != 1 && s->element_size != 2 && s->element_size != 4)
		return false;
	if (s->dst % s->element_size || __builtin_mul_overflow(s->width, (uint64_t)s->element_size, &width))
		return false;
	ok = extent(width, s->pitch, s->height, s->height, 1, &span) && exec_device_range(ex, s->dst, span, &dst);
	p->dst = dst;
	return ok;
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

	if (res == CUDA_SUCCESS && !memset_check(ex, &n.set, &p))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = ctx_real(ex, &ctx);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphAddMemsetNode(&real, a.real, a.deps, a.ndeps, &p, ctx);
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
	CUgraphNode real = NULL;
	uint64_t addr = 0;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS && !req->bytes)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS && a.g->execs)  /* one executable at a time, as in the driver */
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = exec_graph_alloc_new(ex, req->bytes, &addr);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphAddEmptyNode(&real, a.real, a.deps, a.ndeps);
	n.mem.address = addr;
	n.mem.bytes = req->bytes;
	res = node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
	if (res != CUDA_SUCCESS) {
		if (addr)
			exec_graph_alloc_drop(ex, addr, true);
		return res;
	}
	rep->address = addr;
	return CUDA_SUCCESS;
}

/* Whether @d already frees @addr (a graph frees an allocation once). */
static bool desc_frees(const struct graph_desc *d, uint64_t addr)
{
	for (uint32_t i = 0; i < d->count; i++)
		if (d->nodes[i].type == CU_GRAPH_NODE_TYPE_MEM_FREE && d->nodes[i].mem.address == addr)
			return true;
	return false;
}

CUresult exec_graph_add_mem_free_node(struct exec *ex, const struct wire_graph_add_mem_free_node_req *req,
				      struct wire_graph_add_mem_free_node_rep *rep)
{
	struct graph_node n = { .type = CU_GRAPH_NODE_TYPE_MEM_FREE, .mem = { req->address, 0 } };
	CUgraphNode real = NULL;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	/* Any graph allocation: one freed before (by a launch, cuMemFree,
	 * another graph) is allocated again by the next launch of its graph. */
	if (res == CUDA_SUCCESS && (!galloc_find(ex, req->address) || desc_frees(a.g->d, req->address)))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS && a.g->execs)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphAddEmptyNode(&real, a.real, a.deps, a.ndeps);
	res = node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
	if (res == CUDA_SUCCESS)
		exec_graph_alloc_free_node(ex, req->address);
	return res;
}

/* A capture graph's description is read back before it is shown. */
struct exec_graph *graph_get_synced(struct exec *ex, uint64_t handle, CUresult *res)
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
	if ((uint64_t)g->d->count * WIRE_REC_GRAPH_NODE_BYTES > WIRE_COPY_PIECE)
		return CUDA_ERROR_NOT_SUPPORTED;
	out = exec_copy_buffer(ex, (size_t)g->d->count * WIRE_REC_GRAPH_NODE_BYTES + 1);
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; i < g->d->count; i++) {
		if (g->d->nodes[i].type == GRAPH_NODE_REMOVED)
			continue;
		wire_rec_graph_node_put(out, n++, &(struct wire_rec_graph_node){ .index = i, .type = g->d->nodes[i].type });
	}
	rep->nodes = (struct wire_blob){ out, n * WIRE_REC_GRAPH_NODE_BYTES };
	return CUDA_SUCCESS;
}

CUresult exec_graph_get_edges_data(struct exec *ex, const struct wire_graph_get_edges_data_req *req,
				   struct wire_graph_get_edges_data_rep *rep)
{
	CUresult res;
	struct exec_graph *g = graph_get_synced(ex, req->graph, &res);
	uint8_t *buf;
	uint32_t n = 0;

	if (!g)
		return res;
	if ((uint64_t)g->d->edges * WIRE_REC_GRAPH_EDGE_DATA_BYTES > WIRE_COPY_PIECE)
		return CUDA_ERROR_NOT_SUPPORTED;
	buf = exec_copy_buffer(ex, (size_t)g->d->edges * WIRE_REC_GRAPH_EDGE_DATA_BYTES + 1);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; i < g->d->count; i++) {
		const struct graph_node *t = &g->d->nodes[i];

		for (uint32_t j = 0; j < t->ndeps && n < g->d->edges; j++) {
			struct graph_edge_data e = graph_node_dep_edge(t, j);

			wire_rec_graph_edge_data_put(buf, n++, &(struct wire_rec_graph_edge_data){
				.from = t->deps[j], .to = i, .from_port = e.from_port, .to_port = e.to_port,
				.type = e.type });
		}
	}
	rep->edges = (struct wire_blob){ buf, n * WIRE_REC_GRAPH_EDGE_DATA_BYTES };
	return CUDA_SUCCESS;
}

/* The backend's edges of @d as @a (from) and @b (to) name them, with their
 * data in the driver's form (NULL when @edge is). */
static CUresult edges_real(const struct graph_desc *d, const uint32_t *a, const uint32_t *b,
			   const struct graph_edge_data *edge, uint32_t n, CUgraphNode *from, CUgraphNode *to,
			   CUgraphEdgeData **data)
{
	*data = NULL;
	if (edge) {
		*data = calloc(n, sizeof(**data));
		if (!*data)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (uint32_t i = 0; i < n; i++) {
		from[i] = d->nodes[a[i]].real;
		to[i] = d->nodes[b[i]].real;
		if (edge)
			(*data)[i] = (CUgraphEdgeData){ .from_port = edge[i].from_port, .to_port = edge[i].to_port,
							.type = edge[i].type };
	}
	return CUDA_SUCCESS;
}

/* Add or (@remove) remove the @n edges @a[k] -> @b[k] with data @edge[k]
 * (NULL: default), all or none, in the backend and the description. */
static CUresult edges_edit(struct exec *ex, uint64_t graph, uint32_t remove, const uint32_t *a,
			   const uint32_t *b, const struct graph_edge_data *edge, uint32_t n)
{
	CUgraphNode *from = NULL, *to = NULL;
	CUgraphEdgeData *data = NULL;
	CUgraph real;
	struct exec_graph *g = graph_get(ex, graph, &real);
	CUresult res = CUDA_SUCCESS;
	int ret;

	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (n > GRAPH_DESC_DEPS_MAX || remove > 1)
		return CUDA_ERROR_INVALID_VALUE;
	if (g->capturing)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (!n)
		return CUDA_SUCCESS;
	/* All or nothing: every pair is checked before the backend sees one. */
	ret = graph_desc_edges_check(g->d, a, b, edge, n, remove);
	if (ret)
		return ret == -EINVAL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
	from = malloc(n * sizeof(*from));
	to = malloc(n * sizeof(*to));
	res = from && to ? edges_real(g->d, a, b, edge, n, from, to, &data) : CUDA_ERROR_OUT_OF_MEMORY;
	if (res != CUDA_SUCCESS)
		goto out;
	res = remove ? ex->be->cuGraphRemoveDependencies(real, from, to, data, n)
		     : ex->be->cuGraphAddDependencies(real, from, to, data, n);
	if (res != CUDA_SUCCESS)
		goto out;
	if (graph_desc_edges_apply(g->d, a, b, edge, n, remove)) {
		/* Out of memory: the backend's edges go back as they were. */
		if (remove)
			ex->be->cuGraphAddDependencies(real, from, to, data, n);
		else
			ex->be->cuGraphRemoveDependencies(real, from, to, data, n);
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	journal_graph(ex, graph, g);
out:
	free(from);
	free(to);
	free(data);
	return res;
}

CUresult exec_graph_edit_edges_data(struct exec *ex, const struct wire_graph_edit_edges_data_req *req,
				    struct wire_graph_edit_edges_data_rep *rep)
{
	int count = wire_rec_graph_edge_data_count(req->edges);
	struct graph_edge_data *edge;
	uint32_t *a, *b;
	CUresult res;

	if (count < 0 || (uint32_t)count > GRAPH_DESC_DEPS_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	a = malloc(((uint32_t)count + 1) * sizeof(*a));
	b = malloc(((uint32_t)count + 1) * sizeof(*b));
	edge = malloc(((uint32_t)count + 1) * sizeof(*edge));
	res = a && b && edge ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; res == CUDA_SUCCESS && i < (uint32_t)count; i++) {
		struct wire_rec_graph_edge_data r;

		/* A record whose reserved byte is not zero is refused here. */
		if (wire_rec_graph_edge_data_get(req->edges, i, &r)) {
			res = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		a[i] = r.from;
		b[i] = r.to;
		edge[i] = (struct graph_edge_data){ r.from_port, r.to_port, r.type };
	}
	if (res == CUDA_SUCCESS)
		res = edges_edit(ex, req->graph, req->remove, a, b, edge, (uint32_t)count);
	free(a);
	free(b);
	free(edge);
	return res;
}

CUresult exec_graph_destroy_node(struct exec *ex, const struct wire_graph_destroy_node_req *req,
				 struct wire_graph_destroy_node_rep *rep)
{
	CUgraph real;
	struct exec_graph *g = graph_get(ex, req->graph, &real);
	struct graph_node *n;
	uint64_t alloc = 0;
	bool gone = false;
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
	if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
		alloc = n->mem.address;
	gone = n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC;
	{
		struct graph_desc one = { .count = 1, .nodes = n };

		bodies_forget(ex, &one);        /* its bodies' (embedded graph's) handles go with it */
	}
	shared_execs_forget(ex, req->graph, req->node);
	before = g->d->weight;
	graph_desc_node_remove(g->d, req->node);
	weight_propagate(g, before);
	/* Nothing can use memory whose alloc node is gone. */
	if (alloc)
		exec_graph_alloc_drop(ex, alloc, gone);
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
