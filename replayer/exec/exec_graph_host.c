/* Graph nodes that stand for what the backend cannot hold as such.
 *
 * Host copies: a memcpy node with one end in the guest's host memory
 * (docs/wire-protocol.md, "Host copies in graphs"). The worker cannot
 * reach that memory when the graph runs, the guest can: the backend holds
 * a child graph node whose graph is a host node and a copy through a
 * pinned staging buffer of ours, in the copy's order (host to device: the
 * host node fills the buffer from the guest over the host-function
 * channel, then the buffer is copied to the device; device to host: the
 * other way round). The description holds one memcpy node with its host
 * end named by the guest's token, which is what the guest sees, what the
 * journal keeps and what a restore builds again. A capture makes the same
 * node (memcpy_host_capture), read back like any captured node.
 *
 * Captured graph memory: cudaMallocAsync and cudaFreeAsync on a capturing
 * stream are graph allocation and free nodes. As for cuGraphAddMemAllocNode
 * (exec_graph.c) the memory comes from the arena at once and the backend
 * holds an empty node; which empty nodes stand for memory nodes is kept
 * here until the capture's description reads them back.
 */
#define LOG_PREFIX "exec: "
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exec_graph_internal.h"
#include "log.h"

/* ---- host copies -------------------------------------------------------- */

/* The backend's copy between the staging buffer and the device end of @c,
 * at the address the backend knows; false when the device end is not the
 * guest's memory. */
static bool host_copy_3d(struct exec *ex, const struct graph_node_memcpy *c, void *staging, CUDA_MEMCPY3D *p)
{
	struct graph_node_memcpy dev = *c;
	bool from_host = c->host_end == GRAPH_COPY_HOST_SRC;

	/* The host end's range is the guest's to check: here it is the
	 * staging buffer, packed. Checked as a device range, then swapped. */
	if (from_host) {
		dev.src = dev.dst;
		dev.src_pitch = dev.dst_pitch;
		dev.src_height = dev.dst_height;
	} else {
		dev.dst = dev.src;
		dev.dst_pitch = dev.src_pitch;
		dev.dst_height = dev.src_height;
	}
	dev.host_end = GRAPH_COPY_HOST_NONE;
	if (!memcpy_check(ex, &dev, p))
		return false;
	if (from_host) {
		p->srcMemoryType = CU_MEMORYTYPE_HOST;
		p->srcDevice = 0;
		p->srcHost = staging;
		p->srcPitch = c->width;
		p->srcHeight = c->height;
	} else {
		p->dstMemoryType = CU_MEMORYTYPE_HOST;
		p->dstDevice = 0;
		p->dstHost = staging;
		p->dstPitch = c->width;
		p->dstHeight = c->height;
	}
	return true;
}

/* The guest's token of @c's host end. */
static uint64_t host_copy_token(const struct graph_node_memcpy *c)
{
	return c->host_end == GRAPH_COPY_HOST_SRC ? c->src : c->dst;
}

/* The host node's and the copy's parameters of host copy @c. */
static CUresult host_copy_params(struct exec *ex, const struct graph_node_memcpy *c, CUDA_HOST_NODE_PARAMS *h,
				 CUDA_MEMCPY3D *p)
{
	uint64_t bytes;
	void *staging;
	CUresult res;

	if (!graph_node_memcpy_packed(c, &bytes))
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_hostfn_copy_params(ex, host_copy_token(c), c->host_end, bytes, h, &staging);
	if (res != CUDA_SUCCESS)
		return res;
	return host_copy_3d(ex, c, staging, p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult host_copy_child(struct exec *ex, const struct graph_node_memcpy *c, CUgraph *out)
{
	CUDA_HOST_NODE_PARAMS h;
	CUDA_MEMCPY3D p;
	CUgraphNode host, copy;
	CUcontext ctx;
	CUgraph g;
	CUresult res = host_copy_params(ex, c, &h, &p);

	if (res == CUDA_SUCCESS)
		res = ctx_real(ex, &ctx);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphCreate(&g, 0);
	if (res != CUDA_SUCCESS)
		return res;
	if (c->host_end == GRAPH_COPY_HOST_SRC) {
		res = ex->be->cuGraphAddHostNode(&host, g, NULL, 0, &h);
		if (res == CUDA_SUCCESS)
			res = ex->be->cuGraphAddMemcpyNode(&copy, g, &host, 1, &p, ctx);
	} else {
		res = ex->be->cuGraphAddMemcpyNode(&copy, g, NULL, 0, &p, ctx);
		if (res == CUDA_SUCCESS)
			res = ex->be->cuGraphAddHostNode(&host, g, &copy, 1, &h);
	}
	if (res != CUDA_SUCCESS) {
		ex->be->cuGraphDestroy(g);
		return res;
	}
	*out = g;
	return CUDA_SUCCESS;
}

/* The host node and the copy of a host copy's graph @g; false when @g is
 * no host copy of ours. */
static bool host_copy_nodes(struct exec *ex, CUgraph g, CUgraphNode *host, CUgraphNode *copy,
			    CUDA_HOST_NODE_PARAMS *h)
{
	CUgraphNode nodes[2];
	size_t count = 2;
	CUgraphNodeType t0, t1;

	if (ex->be->cuGraphGetNodes(g, NULL, &count) != CUDA_SUCCESS || count != 2 ||
	    ex->be->cuGraphGetNodes(g, nodes, &count) != CUDA_SUCCESS ||
	    ex->be->cuGraphNodeGetType(nodes[0], &t0) != CUDA_SUCCESS ||
	    ex->be->cuGraphNodeGetType(nodes[1], &t1) != CUDA_SUCCESS)
		return false;
	if (t0 == CU_GRAPH_NODE_TYPE_HOST && t1 == CU_GRAPH_NODE_TYPE_MEMCPY) {
		*host = nodes[0];
		*copy = nodes[1];
	} else if (t1 == CU_GRAPH_NODE_TYPE_HOST && t0 == CU_GRAPH_NODE_TYPE_MEMCPY) {
		*host = nodes[1];
		*copy = nodes[0];
	} else {
		return false;
	}
	return ex->be->cuGraphHostNodeGetParams(*host, h) == CUDA_SUCCESS;
}

CUresult host_copy_read(struct exec *ex, CUgraph child, struct graph_node_memcpy *c, bool *is_copy)
{
	CUDA_HOST_NODE_PARAMS h = { 0 };
	CUDA_MEMCPY3D p = { 0 };
	CUgraphNode host, copy;
	uint64_t token, bytes;
	uint32_t end;
	CUresult res;

	*is_copy = false;
	if (!host_copy_nodes(ex, child, &host, &copy, &h) || !exec_hostfn_copy_of(ex, &h, &token, &end, &bytes))
		return CUDA_SUCCESS;
	*is_copy = true;
	res = ex->be->cuGraphMemcpyNodeGetParams(copy, &p);
	if (res != CUDA_SUCCESS)
		return res;
	memset(c, 0, sizeof(*c));
	c->width = p.WidthInBytes;
	c->height = p.Height;
	c->depth = p.Depth;
	c->host_end = end;
	/* The device end at the guest's address, the host end its token. */
	if (end == GRAPH_COPY_HOST_SRC) {
		c->dst = exec_guest_addr(ex, p.dstDevice + p.dstXInBytes + (p.dstY + p.dstZ * p.dstHeight) * p.dstPitch);
		c->dst_pitch = p.dstPitch;
		c->dst_height = p.dstHeight;
		c->src = token;
		c->src_pitch = c->width;
		c->src_height = c->height;
	} else {
		c->src = exec_guest_addr(ex, p.srcDevice + p.srcXInBytes + (p.srcY + p.srcZ * p.srcHeight) * p.srcPitch);
		c->src_pitch = p.srcPitch;
		c->src_height = p.srcHeight;
		c->dst = token;
		c->dst_pitch = c->width;
		c->dst_height = c->height;
	}
	return CUDA_SUCCESS;
}

/* The description's host copy from a request's fields. */
static bool host_copy_of_req(uint32_t host_end, uint64_t token, uint64_t device, uint64_t pitch, uint64_t height,
			     uint64_t width, uint64_t rows, uint64_t depth, struct graph_node_memcpy *c)
{
	uint64_t bytes;

	if (host_end == GRAPH_COPY_HOST_SRC) {
		*c = (struct graph_node_memcpy){ device, pitch, height, token, width, rows, width, rows, depth, host_end };
	} else if (host_end == GRAPH_COPY_HOST_DST) {
		*c = (struct graph_node_memcpy){ token, width, rows, device, pitch, height, width, rows, depth, host_end };
	} else {
		return false;
	}
	return graph_node_memcpy_packed(c, &bytes);
}

#define HOST_COPY_REQ(r) (r)->host_end, (r)->token, (r)->device, (r)->dev_pitch, (r)->dev_height, \
	(r)->width, (r)->height, (r)->depth

CUresult exec_graph_add_host_copy_node(struct exec *ex, const struct wire_graph_add_host_copy_node_req *req,
				       struct wire_graph_add_host_copy_node_rep *rep)
{
	struct graph_node n = { .type = CU_GRAPH_NODE_TYPE_MEMCPY };
	CUgraphNode real = NULL;
	CUgraph child = NULL;
	struct node_add a;
	CUresult res = node_add_begin(ex, req->graph, req->deps, &a);

	if (res == CUDA_SUCCESS && !host_copy_of_req(HOST_COPY_REQ(req), &n.copy))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = host_copy_child(ex, &n.copy, &child);
	if (res == CUDA_SUCCESS) {
		res = ex->be->cuGraphAddChildGraphNode(&real, a.real, a.deps, a.ndeps, child);
		ex->be->cuGraphDestroy(child);  /* the node holds its own copy */
	}
	return node_add_end(ex, req->graph, &a, res, real, &n, &rep->node);
}

/* A graph's host copy node takes @c: its embedded graph's two nodes are
 * changed in place (the same shape: a host copy of the same end). */
static CUresult graph_host_copy_set(struct exec *ex, struct graph_node *n, const struct graph_node_memcpy *c)
{
	CUDA_HOST_NODE_PARAMS h, old;
	CUDA_MEMCPY3D p;
	CUgraphNode host, copy;
	CUgraph emb;
	CUresult res = ex->be->cuGraphChildGraphNodeGetGraph(n->real, &emb);

	if (res != CUDA_SUCCESS)
		return res;
	if (!host_copy_nodes(ex, emb, &host, &copy, &old))
		return CUDA_ERROR_INVALID_VALUE;
	res = host_copy_params(ex, c, &h, &p);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphMemcpyNodeSetParams(copy, &p);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuGraphHostNodeSetParams(host, &h);
	return res;
}

CUresult exec_graph_host_copy_node_set_params(struct exec *ex,
					      const struct wire_graph_host_copy_node_set_params_req *req,
					      struct wire_graph_host_copy_node_set_params_rep *rep)
{
	struct graph_node_memcpy c;
	struct graph_node *n;
	CUgraphExec xreal = NULL;
	struct exec_graph_exec *x = NULL;
	struct exec_graph *g = NULL;
	CUgraph child;
	CUresult res;

	(void)rep;
	if (req->exec) {
		x = graph_exec_get(ex, req->exec, &xreal);
		if (!x)
			return CUDA_ERROR_INVALID_HANDLE;
		n = req->graph == x->origin ? node_at(&x->d, req->node, CU_GRAPH_NODE_TYPE_MEMCPY) : NULL;
		if (n && !n->real)
			n = NULL;
	} else {
		g = graph_get(ex, req->graph, NULL);
		if (!g)
			return CUDA_ERROR_INVALID_HANDLE;
		if (g->capturing)
			return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		n = node_at(g->d, req->node, CU_GRAPH_NODE_TYPE_MEMCPY);
	}
	if (!n || !host_copy_of_req(HOST_COPY_REQ(req), &c))
		return CUDA_ERROR_INVALID_VALUE;
	if (n->copy.host_end != c.host_end) {
		/* An executable's copy keeps its memory types (cuda.h); a graph's
		 * node would have to change its type in the backend. */
		if (x)
			return CUDA_ERROR_INVALID_VALUE;
		pr_warn("a graph memcpy node cannot change between host and device ends through tern");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (x) {
		res = host_copy_child(ex, &c, &child);
		if (res != CUDA_SUCCESS)
			return res;
		res = ex->be->cuGraphExecChildGraphNodeSetParams(xreal, n->real, child);
		ex->be->cuGraphDestroy(child);
	} else {
		res = graph_host_copy_set(ex, n, &c);
	}
	if (res != CUDA_SUCCESS)
		return res;
	n->copy = c;
	if (x)
		journal_exec(ex, req->exec, x);
	else
		journal_graph(ex, req->graph, g);
	return CUDA_SUCCESS;
}

/* Where a capture is: its graph and the dependencies, with their edge
 * data, of the next node it adds. */
struct capture_point {
	bool active;                    /* false: the stream does not capture */
	CUgraph graph;
	const CUgraphNode *deps;
	const CUgraphEdgeData *edges;   /* NULL: all default */
	size_t n;
};

/* The capture @s is in, in @at. */
static CUresult capture_point(struct exec *ex, CUstream s, struct capture_point *at)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult res;

	*at = (struct capture_point){ 0 };
	if (!ex->graphs.capture_count)
		return CUDA_SUCCESS;
	res = ex->be->cuStreamGetCaptureInfo(s, &st, NULL, &at->graph, &at->deps, &at->edges, &at->n);
	if (res != CUDA_SUCCESS)
		return res;
	if (st == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	at->active = st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
	return CUDA_SUCCESS;
}

/* Add @child's copy (or, @child NULL, an empty node) to the capture at
 * @at on @s, after its dependencies with their edge data, and make it the
 * stream's. Edge data that is not default goes with edges added after the
 * node (the backend's child and empty node calls take none); the backend
 * refuses what does not fit the node, as a capture of it would. */
static CUresult capture_add(struct exec *ex, CUstream s, const struct capture_point *at, CUgraph child,
			    CUgraphNode *node)
{
	bool special = edge_data_special(at->edges, at->n);
	size_t nd = special ? 0 : at->n;
	CUresult res = child ? ex->be->cuGraphAddChildGraphNode(node, at->graph, at->deps, nd, child)
			     : ex->be->cuGraphAddEmptyNode(node, at->graph, at->deps, nd);

	if (res != CUDA_SUCCESS)
		return res;
	if (special) {
		CUgraphNode *to = malloc(at->n * sizeof(*to));

		for (size_t i = 0; to && i < at->n; i++)
			to[i] = *node;
		res = to ? ex->be->cuGraphAddDependencies(at->graph, at->deps, to, at->edges, at->n)
			 : CUDA_ERROR_OUT_OF_MEMORY;
		free(to);
	}
	if (res == CUDA_SUCCESS)
		res = ex->be->cuStreamUpdateCaptureDependencies(s, node, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
	if (res != CUDA_SUCCESS)
		ex->be->cuGraphDestroyNode(*node);
	return res;
}

CUresult exec_memcpy_host_capture(struct exec *ex, const struct wire_memcpy_host_capture_req *req,
				  struct wire_memcpy_host_capture_rep *rep)
{
	struct graph_node_memcpy c;
	struct capture_point at;
	CUgraphNode node;
	CUgraph child;
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	rep->captured = 0;
	if (res == CUDA_SUCCESS)
		res = capture_point(ex, s, &at);
	if (res != CUDA_SUCCESS || !at.active)
		return res;
	if (!host_copy_of_req(req->host_end, req->token, req->device, req->bytes, 1, req->bytes, 1, 1, &c))
		return CUDA_ERROR_INVALID_VALUE;
	res = host_copy_child(ex, &c, &child);
	if (res != CUDA_SUCCESS)
		return res;
	res = capture_add(ex, s, &at, child, &node);
	ex->be->cuGraphDestroy(child);
	if (res == CUDA_SUCCESS)
		rep->captured = 1;
	return res;
}

/* ---- captured graph memory ---------------------------------------------- */

static struct exec_graph_standin *standin_find(struct exec *ex, const void *node)
{
	for (unsigned i = 0; i < ex->graphs.standin_count; i++)
		if (ex->graphs.standins[i].node == node)
			return &ex->graphs.standins[i];
	return NULL;
}

bool graph_standin_take(struct exec *ex, const void *node, struct graph_node *n)
{
	struct exec_graph_standin *s = standin_find(ex, node);

	if (!s)
		return false;
	n->type = s->type;
	n->mem.address = s->addr;
	n->mem.bytes = s->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ? s->bytes : 0;
	*s = ex->graphs.standins[--ex->graphs.standin_count];
	return true;
}

void graph_standins_drop(struct exec *ex, const void *graph)
{
	for (unsigned i = 0; i < ex->graphs.standin_count;) {
		struct exec_graph_standin *s = &ex->graphs.standins[i];

		if (s->graph != graph) {
			i++;
			continue;
		}
		/* Never read into a description: its capture is gone, and
		 * with it the reference its node held. */
		exec_graph_alloc_drop(ex, s->addr, s->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC);
		*s = ex->graphs.standins[--ex->graphs.standin_count];
	}
}

static int standin_add(struct exec *ex, const void *graph, const void *node, uint32_t type, uint64_t addr,
		       uint64_t bytes)
{
	if (ex->graphs.standin_count == ex->graphs.standin_cap) {
		unsigned cap = ex->graphs.standin_cap ? ex->graphs.standin_cap * 2 : 16;
		struct exec_graph_standin *s = realloc(ex->graphs.standins, cap * sizeof(*s));

		if (!s)
			return -ENOMEM;
		ex->graphs.standins = s;
		ex->graphs.standin_cap = cap;
	}
	ex->graphs.standins[ex->graphs.standin_count++] = (struct exec_graph_standin){ graph, node, type, addr, bytes };
	return 0;
}

CUresult exec_graph_capture_alloc(struct exec *ex, CUstream s, uint64_t bytes, bool *captured, uint64_t *addr)
{
	struct capture_point at;
	CUgraphNode node;
	CUresult res = capture_point(ex, s, &at);

	*captured = false;
	if (res != CUDA_SUCCESS || !at.active)
		return res;
	*captured = true;
	res = exec_graph_alloc_new(ex, bytes, addr);
	if (res != CUDA_SUCCESS)
		return res;
	res = capture_add(ex, s, &at, NULL, &node);
	if (res == CUDA_SUCCESS && standin_add(ex, at.graph, node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, *addr, bytes)) {
		ex->be->cuGraphDestroyNode(node);
		res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (res != CUDA_SUCCESS) {
		exec_graph_alloc_drop(ex, *addr, true);
		*addr = 0;
	}
	return res;
}

CUresult exec_graph_capture_free(struct exec *ex, CUstream s, uint64_t addr, bool *captured)
{
	struct capture_point at;
	CUgraphNode node;
	CUresult res = capture_point(ex, s, &at);

	*captured = false;
	if (res != CUDA_SUCCESS || !at.active || !exec_graph_alloc_is(ex, addr))
		return res;
	*captured = true;
	res = capture_add(ex, s, &at, NULL, &node);
	if (res == CUDA_SUCCESS && standin_add(ex, at.graph, node, CU_GRAPH_NODE_TYPE_MEM_FREE, addr, 0)) {
		ex->be->cuGraphDestroyNode(node);
		res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (res == CUDA_SUCCESS)
		exec_graph_alloc_free_node(ex, addr);
	return res;
}
