/* Graph descriptions: what a CUDA graph is made of, as tern records it.
 *
 * The executor keeps one description per graph and per executable graph the
 * guest holds: the nodes in the order they were made, each with its type,
 * its dependencies (indices of earlier or later nodes of the same graph) and
 * the parameters it was built from, in the guest's terms (virtual handles,
 * device addresses, packed kernel arguments). A node's index is its name on
 * the wire, so indices never move: a destroyed node leaves a removed slot.
 *
 * The journal keeps each description, encoded, as an image (docs/journal.md,
 * "Graph descriptions"); a restore rebuilds the graph node by node from it,
 * since a driver's graph cannot be serialised. The encoding is versioned,
 * little endian and decodes in exactly one way; decoding treats the bytes as
 * hostile (fuzz target tests/fuzz/fuzz_graph_desc.c).
 *
 * Not thread-safe; a description is owned by one executor.
 */
#ifndef TERN_GRAPH_DESC_H
#define TERN_GRAPH_DESC_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#define GRAPH_DESC_MAGIC 0x31444754u    /* "TGD1" */
/* Version 2 adds a u32 of flags after each node's type (bit 0: disabled in
 * its executable, bit 1: kernel attributes follow the kernel's fields, bit
 * 2: a child graph node's embedded graph has a guest handle, which follows
 * the nested description; bit 3: a memcpy node is a host copy, its u32
 * host end follows the copy's fields);
 * descriptions with no flag set are still written as 1. Version 3 adds the
 * graph's conditional handles after the header and conditional nodes; a
 * description (each level on its own) is written as 3 exactly when it has
 * a conditional handle or node, as 2 exactly when not but a flag is set.
 * Version 4 is version 3 with flag bit 4: a node's dependencies carry edge
 * data (a u32 per dependency after the indices: from_port, to_port, type
 * in its low three bytes, the top byte zero); a description (each level on
 * its own) is written as 4 exactly when one of its edges is not default. */
#define GRAPH_DESC_VERSION 4u
/* Conditional handles of one graph, and bodies of one conditional node
 * (a switch's; if and while nodes have one or two). */
#define GRAPH_DESC_COND_HANDLES_MAX 1024u
#define GRAPH_DESC_COND_SIZE_MAX 1024u
/* Nodes of one graph, those of embedded child graphs included. */
#define GRAPH_DESC_NODES_MAX (1u << 20)
/* Dependencies of one node, and edges of one graph in all. */
#define GRAPH_DESC_DEPS_MAX (1u << 16)
#define GRAPH_DESC_EDGES_MAX (1u << 22)
/* Child graphs inside child graphs. */
#define GRAPH_DESC_DEPTH_MAX 8u
/* Packed kernel arguments: the driver's parameter limit. */
#define GRAPH_DESC_ARGS_MAX (32u << 10)
/* The type of a destroyed node's slot. */
#define GRAPH_NODE_REMOVED 0xffffffffu
/* The journal's image format number of an encoded description. */
#define GRAPH_DESC_IMAGE_FORMAT 0x100u
/* "No node" in an index field. */
#define GRAPH_NODE_NONE 0xffffffffu

struct graph_desc;

struct graph_node_kernel {
	uint64_t function;              /* virtual function or kernel handle */
	uint32_t grid[3], block[3];
	uint32_t shared_bytes;
	uint32_t args_len;
	uint8_t *args;                  /* packed by the function's layout; owned */
};

/* Which end of a memcpy node is the guest's host memory (a host copy,
 * docs/wire-protocol.md "Host copies in graphs"): none, the source (host
 * to device) or the destination (device to host). */
#define GRAPH_COPY_HOST_NONE 0u
#define GRAPH_COPY_HOST_SRC 1u
#define GRAPH_COPY_HOST_DST 2u

/* A copy between device ranges, offsets folded into the addresses. In a
 * host copy (@host_end set) that end's address is the guest's token for
 * its host range, its pitch the width and its height the rows: the rows
 * travel packed (version 2, flag bit 3). */
struct graph_node_memcpy {
	uint64_t dst, dst_pitch, dst_height;
	uint64_t src, src_pitch, src_height;
	uint64_t width, height, depth;  /* width in bytes */
	uint32_t host_end;              /* GRAPH_COPY_HOST_* */
};

/* A CUDA_MEMCPY3D as a memcpy node holds it, offsets folded into the
 * addresses. A device or unified end keeps its address; one host end
 * (CU_MEMORYTYPE_HOST) is the source's or destination's host pointer, with
 * @host_end saying which. CUDA_ERROR_NOT_SUPPORTED for array endpoints,
 * levels of detail and two host ends. The same mapping for the shim's
 * requests and the worker's reads of a backend's node. */
CUresult graph_node_memcpy_from_3d(const CUDA_MEMCPY3D *p, struct graph_node_memcpy *c);
/* And back, for the backend: both ends device memory. */
void graph_node_memcpy_to_3d(const struct graph_node_memcpy *c, CUDA_MEMCPY3D *p);
/* Bytes a host copy's rows take packed (width x height x depth); false on
 * overflow or a zero extent. */
int graph_node_memcpy_packed(const struct graph_node_memcpy *c, uint64_t *bytes);

struct graph_node_memset {
	uint64_t dst, pitch, width, height;     /* width in elements */
	uint32_t value, element_size;
};

/* A kernel node's attribute set with cuGraphKernelNodeSetAttribute (or
 * copied): its id (a CUlaunchAttributeID whose value is plain data,
 * graph_kattr_id_ok) and value. */
struct graph_kattr {
	uint32_t id;
	uint8_t value[64];              /* CUkernelNodeAttrValue */
};

/* A conditional handle of a graph (cuGraphConditionalHandleCreate). The
 * guest's value is the one the backend gave when the guest made it; a
 * restore makes the handle again, and the backend may give another value
 * (@real), which kernel arguments are translated to (docs/limits.md). */
struct graph_cond_handle {
	uint64_t value;                 /* as the guest knows it */
	uint64_t real;                  /* the backend's now; not encoded (= value when decoded) */
	uint32_t default_value;
	uint32_t flags;                 /* CU_GRAPH_COND_ASSIGN_DEFAULT */
};

/* A conditional node: its type, its bodies (graphs the node owns) and the
 * handle that drives it, an index into its graph's handles. */
struct graph_node_cond {
	uint32_t type;                  /* CUgraphConditionalNodeType */
	uint32_t size;                  /* bodies */
	uint32_t handle;                /* index into the graph's handles */
	struct graph_desc *body;        /* @size descriptions; owned */
	uint64_t *body_handle;          /* the guest's handles of the bodies, 0 for none; owned */
	void **body_real;               /* the backend's body graphs, NULL when not built; owned, not encoded */
};

/* What a dependency edge carries (CUgraphEdgeData without its reserved
 * bytes, which must be zero): all zero is the default edge, the full
 * completion of the upstream node. */
struct graph_edge_data {
	uint8_t from_port;              /* CU_GRAPH_KERNEL_NODE_PORT_* */
	uint8_t to_port;                /* always 0 */
	uint8_t type;                   /* CUgraphDependencyType */
};

struct graph_node {
	uint32_t type;                  /* CUgraphNodeType or GRAPH_NODE_REMOVED */
	uint32_t ndeps;
	uint32_t *deps;                 /* owned */
	/* Each dependency's edge data, NULL when all are default (version 4). */
	struct graph_edge_data *edge;   /* owned, ndeps entries */
	uint32_t disabled;              /* executables: cuGraphNodeSetEnabled(0) (version 2) */
	uint32_t nattrs;                /* kernel nodes: attributes set (version 2) */
	struct graph_kattr *attrs;      /* owned, ids increasing */
	/* GRAPH: the guest's handle of the embedded graph
	 * (cuGraphChildGraphNodeGetGraph), 0 for none (flag bit 2). */
	uint64_t child_handle;
	void *real;                     /* the backend's node, NULL when not built */
	union {
		struct graph_node_kernel kernel;
		struct graph_node_memcpy copy;
		struct graph_node_memset set;
		uint64_t event;                 /* WAIT_EVENT, EVENT_RECORD: virtual handle */
		uint64_t host;                  /* HOST: the guest's token for its function */
		struct graph_desc *child;       /* GRAPH: an owned copy */
		struct graph_node_cond cond;    /* CONDITIONAL (version 3) */
		struct {
			uint64_t address, bytes;
		} mem;                          /* MEM_ALLOC (address, bytes), MEM_FREE (address) */
	};
};

struct graph_desc {
	uint32_t count, cap;
	struct graph_node *nodes;
	uint32_t weight;                /* nodes here and in children, removed slots included */
	uint32_t edges;                 /* dependencies here */
	uint32_t nhandles;              /* conditional handles (version 3) */
	struct graph_cond_handle *handles;      /* owned */
};

void graph_desc_init(struct graph_desc *d);
/* Free everything the description owns; it is empty afterwards. */
void graph_desc_release(struct graph_desc *d);
/* Deep copy into an empty @dst; backend nodes are not copied (NULL), nor
 * the guest's handles of conditional bodies and embedded child graphs (0:
 * a copy's are the copy's, which the guest cannot name). 0, -ENOMEM. */
int graph_desc_copy(struct graph_desc *dst, const struct graph_desc *src);

/* Whether an edge from a node of type @from_type to one of @to_type may
 * carry @e, as the driver allows: to_port 0; from a non-zero port (kernel
 * ports: PROGRAMMATIC, LAUNCH_ORDER) only out of a kernel node; the
 * PROGRAMMATIC type only between kernel nodes, out of a non-zero port;
 * the PROGRAMMATIC port only with that type. */
int graph_edge_data_ok(const struct graph_edge_data *e, uint32_t from_type, uint32_t to_type);
/* True when @e is the default edge (all zero). */
static inline int graph_edge_data_default(const struct graph_edge_data *e)
{
	return !e->from_port && !e->to_port && !e->type;
}
/* The edge data of dependency @j of @n (default when it has none). */
static inline struct graph_edge_data graph_node_dep_edge(const struct graph_node *n, uint32_t j)
{
	return n->edge ? n->edge[j] : (struct graph_edge_data){ 0 };
}

/* Append @node, taking ownership of what it points to (deps, edge, args,
 * child) on success only. Checks the limits, that every dependency names
 * an existing node and that its edge data fits (graph_edge_data_ok).
 * 0, -EINVAL (bad dependency), -E2BIG (a limit), -ENOMEM. */
int graph_desc_append(struct graph_desc *d, struct graph_node *node);
/* Dependencies @from[k] -> @to[k] (to depends on from) with edge data
 * @edge[k] (NULL: all default), k < @n, added or (@remove) removed, all or
 * none. _check: 0 when every pair names two live, different nodes, none
 * twice, each absent (adding, its data fitting the two nodes) or present
 * with that data (removing); -EINVAL, -E2BIG past a limit, -ENOMEM. _apply
 * makes the change _check accepted, new dependencies last in the order
 * given: 0, or -ENOMEM with nothing changed. Both sort: O(n log n)
 * whatever the guest sends. */
int graph_desc_edges_check(const struct graph_desc *d, const uint32_t *from, const uint32_t *to,
			   const struct graph_edge_data *edge, uint32_t n, int remove);
int graph_desc_edges_apply(struct graph_desc *d, const uint32_t *from, const uint32_t *to,
			   const struct graph_edge_data *edge, uint32_t n, int remove);
/* Replace every dependency of @d with the @n edges given, in their order,
 * with their data (@edge NULL: all default): a graph read back from the
 * backend. 0, -EINVAL (a bad or removed node, a self edge, an edge twice,
 * data that does not fit), -E2BIG, -ENOMEM; nothing changes on an error. */
int graph_desc_deps_reset(struct graph_desc *d, const uint32_t *from, const uint32_t *to,
			  const struct graph_edge_data *edge, size_t n);
/* True when an edge of @d (this level) carries data: what makes its
 * encoding version 4. */
int graph_desc_has_edge_data(const struct graph_desc *d);
/* 1 when the @n values are distinct, 0 when not, -ENOMEM. */
int graph_deps_unique(const uint32_t *v, uint32_t n);
/* Mark node @i removed, with its edges in both directions. 0, -EINVAL. */
int graph_desc_node_remove(struct graph_desc *d, uint32_t i);
/* True when @i names a node that is not removed. */
static inline int graph_desc_node_live(const struct graph_desc *d, uint32_t i)
{
	return i < d->count && d->nodes[i].type != GRAPH_NODE_REMOVED;
}
/* Give node @i of @d a copy of @src's parameters (same type); its
 * dependencies and backend node stay. 0, -EINVAL, -E2BIG, -ENOMEM. */
int graph_desc_node_params_set(struct graph_desc *d, uint32_t i, const struct graph_node *src);
/* Pair the nodes of @a with those of @b as cuGraphExecUpdate does: exit
 * nodes in index order, then each pair's dependencies by position. On
 * success pair[i] is the node of @b paired with node i of @a (removed
 * slots: GRAPH_NODE_NONE) and 0 is returned; -ENOENT when the shapes
 * differ, with *@bad the node of @b at fault (or GRAPH_NODE_NONE);
 * -ENOMEM. @pair holds a->count entries. */
int graph_desc_pair(const struct graph_desc *a, const struct graph_desc *b, uint32_t *pair, uint32_t *bad);
/* Add a conditional handle (guest value @value, backend value @real).
 * 0, -E2BIG (GRAPH_DESC_COND_HANDLES_MAX), -EEXIST (@value known), -ENOMEM. */
int graph_desc_handle_add(struct graph_desc *d, uint64_t value, uint64_t real, uint32_t default_value,
			  uint32_t flags);
/* True when @d (this level, not its children or bodies) has conditional
 * handles or nodes: what makes its encoding version 3. */
int graph_desc_has_cond(const struct graph_desc *d);
/* A conditional node's shape is valid: type known, size allowed for it
 * (while: 1, if: 1 or 2, switch: 1 to GRAPH_DESC_COND_SIZE_MAX). */
int graph_cond_shape_ok(uint32_t type, uint32_t size);
/* A conditional node of @type and @size with empty bodies, no guest
 * handles, into @n (type CONDITIONAL). 0, -EINVAL, -ENOMEM. */
int graph_node_cond_init(struct graph_node *n, uint32_t type, uint32_t size, uint32_t handle);
/* Free what one node owns (for a node never appended). */
void graph_node_release(struct graph_node *node);

/* The encoding. Appends to a growable buffer: *@buf (malloc'ed, the
 * caller frees) of *@len bytes. 0 or -ENOMEM. */
int graph_desc_encode(const struct graph_desc *d, uint8_t **buf, size_t *len);
/* Decode into an empty @d. 0, -EBADMSG (not a description, limits,
 * trailing bytes), -EPROTONOSUPPORT (another version), -ENOMEM. */
int graph_desc_decode(struct graph_desc *d, const void *buf, size_t len);

/* Kernel node attributes a description may hold: those whose value is
 * plain data (no handles), at most GRAPH_DESC_KATTRS_MAX of them. */
#define GRAPH_DESC_KATTRS_MAX 32u
int graph_kattr_id_ok(uint32_t id);
/* Set attribute @id of kernel node @n to @value (sizeof(struct
 * graph_kattr) value bytes), keeping the ids in order. 0, -EINVAL, -ENOMEM. */
int graph_node_kattr_set(struct graph_node *n, uint32_t id, const void *value);
/* Give kernel node @dst @src's attributes. 0, -ENOMEM. */
int graph_node_kattrs_copy(struct graph_node *dst, const struct graph_node *src);

/* Name of a node type for logs and `ckpt inspect` ("kernel", "memcpy" ...). */
const char *graph_node_type_name(uint32_t type);

#endif
