/* Private to the graph files of the executor: exec_graph.c (graph infos,
 * lookups, graph allocations, the journal, graphs and their nodes),
 * exec_graph_build.c (reading a backend graph back into a description,
 * building one from a description, restore), exec_capture.c (stream
 * capture), exec_graph_exec.c (executable graphs, node parameters, kernel
 * node attributes, dot print) and exec_graph_cond.c (conditional nodes).
 *
 * One file's concern kept apart from another's, these are what they share:
 * the wrappers kept beside the backend's graphs and the helpers more than
 * one of them calls. Everything else in those files stays static. All run
 * on the executor's one thread, under the same rules as exec.h.
 */
#ifndef TERN_EXEC_GRAPH_INTERNAL_H
#define TERN_EXEC_GRAPH_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "exec.h"
#include "graph_desc.h"
#include "tracker.h"
#include "wire_dispatch.h"

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

/* A backend node and its index in a description, sorted by node (capture
 * info and reading back map the backend's nodes to the guest's indices). */
struct real_index {
	void *real;
	uint32_t index;
};

/* The common part of adding a node: the graph, its dependencies, the
 * backend's add (by @add), the description, the journal. @n is consumed. */
struct node_add {
	struct exec_graph *g;
	CUgraph real;
	uint32_t *idx;
	CUgraphNode *deps;
	uint32_t ndeps;
};

/* A kernel node's parameters from the request fields, which the add and
 * both set-params calls name alike: checked, copied into @k (owned by the
 * caller) and given as the driver wants them in @p. */
#define KERNEL_REQ(req) (req)->function, \
	(const uint32_t[3]){ (req)->grid_x, (req)->grid_y, (req)->grid_z }, \
	(const uint32_t[3]){ (req)->block_x, (req)->block_y, (req)->block_z }, \
	(req)->shared_bytes, (req)->args

/* exec_graph.c: graph infos, lookups, graph allocations, journal, graphs and nodes */
/* A new graph wrapper, its description its own (every file that makes graphs). */
struct exec_graph *graph_info_new(void);
/* The guest's graph a conditional body belongs to, itself if not a body. */
struct exec_graph *graph_root(struct exec_graph *g);
/* How many conditional bodies deep @g is (builders and conditional nodes cap it). */
unsigned graph_nesting(const struct exec_graph *g);
/* A body grew or shrank from @before nodes: the graphs around it count them too. */
void weight_propagate(struct exec_graph *g, uint32_t before);
/* Whether @c's conditional handles differ in the backend (then arguments are translated). */
bool chain_translates(const struct cond_chain *c);
/* The conditional handles @g's kernels may name, innermost graph first. */
void graph_chain(const struct exec_graph *g, struct cond_chain *c);
/* The guest's graph @handle (its backend graph in *@real, may be NULL), or NULL. */
struct exec_graph *graph_get(struct exec *ex, uint64_t handle, CUgraph *real);
/* The guest's executable @handle (its backend one in *@real, may be NULL), or NULL. */
struct exec_graph_exec *graph_exec_get(struct exec *ex, uint64_t handle, CUgraphExec *real);
/* A negative errno of a description operation as the CUresult the guest gets. */
CUresult res_of_errno(int ret);
/* Take (+1) or drop (-1) the references of a description's alloc nodes. */
void desc_gallocs(struct exec *ex, const struct graph_desc *d, int delta);
/* Whether @d has memory alloc or free nodes (instantiate flags and updates refuse some). */
bool desc_has_mem_nodes(const struct graph_desc *d);
/* Mark graph @handle's description for the journal (written when a snapshot needs it). */
void journal_graph(struct exec *ex, uint64_t handle, struct exec_graph *g);
/* Mark executable @handle's description for the journal. */
void journal_exec(struct exec *ex, uint64_t handle, struct exec_graph_exec *x);
/* How many graphs node @n owns that the guest may hold handles of. */
uint32_t node_subgraphs(const struct graph_node *n);
/* Subgraph @k of @n (< node_subgraphs), its guest handle in *@handle. */
struct graph_desc *node_subgraph(struct graph_node *n, uint32_t k, uint64_t **handle);
/* The wrapper of the guest's handle @handle of subgraph @d, or NULL. */
struct exec_graph *subgraph_info(struct exec *ex, uint64_t handle, const struct graph_desc *d);
/* Drop the handle entries of the graphs @d's nodes own; their descriptions go with @d. */
void bodies_forget(struct exec *ex, struct graph_desc *d);
/* Free a graph wrapper, its description and (with @gallocs) its alloc references. */
void graph_info_release(struct exec *ex, struct exec_graph *g, bool gallocs);
/* Free an executable wrapper, its source graph and (with @gallocs) its alloc references. */
void exec_info_release(struct exec *ex, struct exec_graph_exec *x, bool gallocs);
/* Point @d's nodes at their copies in the backend's clone of the graph @from describes. */
CUresult nodes_find_in_clone(struct exec *ex, const struct graph_desc *from, struct graph_desc *d,
			     CUgraph clone);
/* First half of adding a node: the graph, its synced description, its dependencies. */
CUresult node_add_begin(struct exec *ex, uint64_t graph, struct wire_blob deps, struct node_add *a);
/* Second half: record the node the backend added (or undo on @res), journal the graph. */
CUresult node_add_end(struct exec *ex, uint64_t graph, struct node_add *a, CUresult res,
		      CUgraphNode real, struct graph_node *n, uint32_t *index);
/* Check a kernel node's request fields; fill @k (caller owns) and the driver's @p. */
CUresult kernel_node_prepare(struct exec *ex, uint64_t function, const uint32_t grid[3],
			     const uint32_t block[3], uint32_t shared_bytes, struct wire_blob args,
			     struct graph_node_kernel *k, CUDA_KERNEL_NODE_PARAMS *p, const struct cond_chain *c);
/* A kernel node of a graph or executable takes @k after the backend did. */
void kernel_node_replace(struct graph_node *n, struct graph_node_kernel *k);
/* Node @index of @d if it is of @type, or NULL. */
struct graph_node *node_at(struct graph_desc *d, uint32_t index, CUgraphNodeType type);
/* Kernel node @index of @d, or NULL. */
struct graph_node *kernel_node_at(struct graph_desc *d, uint32_t index);
/* Whether a memcpy node's ends lie in memory the guest may name; *@p: the
 * driver's parameters, at the addresses the backend knows (exec_device_range). */
bool memcpy_check(struct exec *ex, const struct graph_node_memcpy *c, CUDA_MEMCPY3D *p);
/* The same for a memset node's target. */
bool memset_check(struct exec *ex, const struct graph_node_memset *s, CUDA_MEMSET_NODE_PARAMS *p);
/* graph_get with a capture graph's description read back first; *@res on failure. */
struct exec_graph *graph_get_synced(struct exec *ex, uint64_t handle, CUresult *res);

/* exec_graph_build.c: reading back and building backend graphs */
/* The index of the node whose backend node is @real in @map, or GRAPH_NODE_NONE. */
uint32_t index_of_real(const struct real_index *map, uint32_t n, void *real);
/* @d's nodes sorted by backend node (malloc'ed, *@n entries), for index_of_real. */
struct real_index *real_index_build(const struct graph_desc *d, uint32_t *n);
/* Bring @d up to date with the backend graph @g (nodes keep their indices). */
CUresult desc_sync(struct exec *ex, struct graph_desc *d, CUgraph g, unsigned depth,
		   const struct cond_chain *chain);
/* desc_sync for a guest's graph (or body), its conditional handles known. */
CUresult graph_sync(struct exec *ex, struct exec_graph *g, CUgraph real);
/* The driver's parameters of kernel node @k, its arguments translated for @c. */
CUresult kernel_node_params(struct exec *ex, const struct graph_node_kernel *k,
			    CUDA_KERNEL_NODE_PARAMS *p, const struct cond_chain *c, unsigned *translated);
/* A memset node's description as the driver's CUDA_MEMSET_NODE_PARAMS, its
 * address as the guest gave it (memset_check translates it). */
void memset_params(const struct graph_node_memset *s, CUDA_MEMSET_NODE_PARAMS *p);
/* The backend's current context, or CUDA_ERROR_INVALID_CONTEXT. */
CUresult ctx_real(struct exec *ex, CUcontext *ctx);
/* The context of a conditional handle or node: @handle (0: the current). */
CUresult cond_ctx(struct exec *ex, uint64_t handle, CUcontext *ctx);

/* exec_capture.c: stream capture */
/* Give backend graph @real (wrapper @g, consumed on success) a guest handle. */
CUresult graph_entry_add(struct exec *ex, CUgraph real, struct exec_graph *g, uint64_t *handle);
/* A `deps` blob's node indices of @d (live, none twice) and backend nodes, malloc'ed. */
CUresult deps_parse(const struct graph_desc *d, struct wire_blob blob, uint32_t **idx,
		    CUgraphNode **reals, uint32_t *n);
/* A capture's dependencies with their edge data (a graph_dep_data blob),
 * as the backend takes them; both arrays malloc'ed, NULL when @n is 0. */
struct capture_deps {
	CUgraphNode *reals;
	CUgraphEdgeData *edges;
	uint32_t n;
};
/* @blob's dependencies: live nodes of @d, none twice, with edge data the
 * driver allows out of them (graph_edge_data_ok, whatever the next node
 * captured is). CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY; @out
 * is empty then. */
CUresult capture_deps_parse(const struct graph_desc *d, struct wire_blob blob, struct capture_deps *out);
void capture_deps_free(struct capture_deps *deps);
/* Whether one of the @n edge data @e (NULL: all default) is not default. */
bool edge_data_special(const CUgraphEdgeData *e, size_t n);

/* exec_graph_host.c: host copies and captured graph memory */
/* The backend's graph standing for host copy @c: its host node and its
 * copy through the staging buffer, in the copy's order (caller destroys). */
CUresult host_copy_child(struct exec *ex, const struct graph_node_memcpy *c, CUgraph *out);
/* Whether the embedded graph @child of a backend's child graph node is a
 * host copy's (*@is_copy), and then the copy it makes in *@c. */
CUresult host_copy_read(struct exec *ex, CUgraph child, struct graph_node_memcpy *c, bool *is_copy);
/* The backend's empty node @node is a captured allocation or free node:
 * its type and memory into @n (true), the record gone. */
bool graph_standin_take(struct exec *ex, const void *node, struct graph_node *n);
/* The capture into @graph ended: its stand-ins not read back go. */
void graph_standins_drop(struct exec *ex, const void *graph);

/* exec_graph.c's graph allocations for them */
/* A new graph allocation held by one node. */
CUresult exec_graph_alloc_new(struct exec *ex, uint64_t bytes, uint64_t *addr);
/* A free node of @addr's was made: it holds the allocation too. */
void exec_graph_alloc_free_node(struct exec *ex, uint64_t addr);
/* A node that held @addr's allocation went without a description (a
 * capture that ended in failure); @gone: it was the allocation node. */
void exec_graph_alloc_drop(struct exec *ex, uint64_t addr, bool gone);

/* exec_graph_exec.c: executable graphs */
/* Instantiate @source (whose nodes @d describes): the executable and its info. */
CUresult exec_make(struct exec *ex, CUgraph source, struct graph_desc *d, uint64_t flags,
		   CUstream upload, CUgraphExec *out, uint32_t *result, uint32_t *error_node);
/* A restored executable's nodes disabled as they were. */
CUresult exec_enabled_restore(struct exec *ex, CUgraphExec exec, const struct graph_desc *d);

#endif
