/* Stream capture: a stream's capture begun, asked about and ended, into a
 * new graph or the guest's own (cuStreamBeginCaptureToGraph). The driver
 * applies its capture rules; the graph's description is read back from it
 * when the capture ends (exec_graph.c has the overview).
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
	ex->be->cuStreamGetCaptureInfo(s, &st, NULL, &g, NULL, NULL, NULL);
	ex->graphs.captures[ex->graphs.capture_count++] = (struct exec_capture){ .stream = req->stream, .graph_real = g };
	return CUDA_SUCCESS;
}

CUresult exec_stream_begin_capture_to_graph_data(struct exec *ex,
						 const struct wire_stream_begin_capture_to_graph_data_req *req,
						 struct wire_stream_begin_capture_to_graph_data_rep *rep)
{
	struct capture_deps deps;
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
	res = capture_deps_parse(g->d, req->deps, &deps);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuStreamBeginCaptureToGraph(s, real, deps.n ? deps.reals : NULL, deps.edges, deps.n,
							  (CUstreamCaptureMode)req->mode);
	capture_deps_free(&deps);
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

CUresult graph_entry_add(struct exec *ex, CUgraph real, struct exec_graph *g, uint64_t *handle)
{
	if (handle_table_add(ex->handles, HANDLE_GRAPH, real, ex->dev.primary_ctx, g, handle))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

static CUresult capture_end_graph(struct exec *ex, uint64_t named, CUresult res, CUgraph real,
				  struct wire_stream_end_capture_rep *rep);

CUresult exec_stream_end_capture(struct exec *ex, const struct wire_stream_end_capture_req *req,
				 struct wire_stream_end_capture_rep *rep)
{
	struct exec_capture *c = capture_find(ex, req->stream);
	uint64_t named = c ? c->graph : 0;
	const void *captured = c ? c->graph_real : NULL;
	CUgraph real = NULL;
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuStreamEndCapture(s, &real);
	if (c && c->user && res != CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) {
		capture_drop(ex, c);
		res = capture_to_graph_end(ex, named, res, &rep->graph);
		graph_standins_drop(ex, captured);
		return res;
	}
	if (res == CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
		c = NULL;       /* still capturing */
	if (c)
		capture_drop(ex, c);
	res = capture_end_graph(ex, named, res, real, rep);
	/* Stand-ins the description did not take (it failed) go with it. */
	if (c)
		graph_standins_drop(ex, captured);
	return res;
}

/* The graph a capture ended in (@res: how; @real: the backend's graph) and
 * its guest handle in @rep, its description read back. */
static CUresult capture_end_graph(struct exec *ex, uint64_t named, CUresult res, CUgraph real,
				  struct wire_stream_end_capture_rep *rep)
{
	struct exec_graph *g = NULL;

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
	const void *captured;

	if (!c)
		return;
	captured = c->graph_real;
	if (c->user) {
		uint64_t handle = c->graph, unused;

		capture_drop(ex, c);
		capture_to_graph_end(ex, handle, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, &unused);
		graph_standins_drop(ex, captured);
		return;
	}
	if (c->graph) {
		struct handle_entry *e = handle_table_get(ex->handles, c->graph, HANDLE_GRAPH);

		if (e)
			graph_info_release(ex, e->info, true);
		handle_table_remove(ex->handles, c->graph);
	}
	capture_drop(ex, c);
	graph_standins_drop(ex, captured);
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

_Static_assert(WIRE_REC_GRAPH_DEP_MAX == GRAPH_DESC_DEPS_MAX, "calls.tbl's graph_dep max is the description's");
_Static_assert(WIRE_REC_GRAPH_DEP_DATA_MAX == GRAPH_DESC_DEPS_MAX,
	       "calls.tbl's graph_dep_data max is the description's");

#define CAPTURE_WANT_GRAPH 1u
#define CAPTURE_WANT_DEPS 2u

CUresult exec_stream_get_capture_info_data(struct exec *ex, const struct wire_stream_get_capture_info_data_req *req,
					   struct wire_stream_get_capture_info_data_rep *rep)
{
	static uint8_t deps_out[GRAPH_DESC_DEPS_MAX * WIRE_REC_GRAPH_DEP_DATA_BYTES];
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	const CUgraphNode *deps = NULL;
	const CUgraphEdgeData *edges = NULL;
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
	/* Always with room for the data: the shim answers a lossy query. */
	res = ex->be->cuStreamGetCaptureInfo(s, &st, &id, &real, &deps, &edges, &n);
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
			struct wire_rec_graph_dep_data d = { .node = index_of_real(map, mapped, deps[i]) };

			if (edges) {
				d.from_port = edges[i].from_port;
				d.to_port = edges[i].to_port;
				d.type = edges[i].type;
			}
			wire_rec_graph_dep_data_put(deps_out, (uint32_t)i, &d);
		}
		free(map);
		rep->deps = (struct wire_blob){ deps_out, (uint32_t)(n * WIRE_REC_GRAPH_DEP_DATA_BYTES) };
	}
	return res;
}

bool edge_data_special(const CUgraphEdgeData *e, size_t n)
{
	static const CUgraphEdgeData zero;

	for (size_t i = 0; e && i < n; i++)
		if (memcmp(&e[i], &zero, sizeof(zero)))
			return true;
	return false;
}

/* Each of the @n indices @idx a live node of @d, none twice: their
 * backend nodes in @reals. */
static CUresult deps_check(const struct graph_desc *d, const uint32_t *idx, uint32_t n, CUgraphNode *reals)
{
	for (uint32_t i = 0; i < n; i++) {
		if (!graph_desc_node_live(d, idx[i]))
			return CUDA_ERROR_INVALID_VALUE;
		reals[i] = d->nodes[idx[i]].real;
	}
	switch (graph_deps_unique(idx, n)) {
	case 1:
		return CUDA_SUCCESS;
	case 0:
		return CUDA_ERROR_INVALID_VALUE;
	default:
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
}

/* Node indices of a `deps` blob: each a live node of @d, none twice.
 * *@idx (malloc'ed) and *@reals (malloc'ed) have *@n entries. */
CUresult deps_parse(const struct graph_desc *d, struct wire_blob blob, uint32_t **idx,
		    CUgraphNode **reals, uint32_t *n)
{
	int records = wire_rec_graph_dep_count(blob);
	uint32_t count;
	CUresult res;

	*idx = NULL;
	*reals = NULL;
	*n = 0;
	if (records < 0)        /* no multiple of a record, or over GRAPH_DESC_DEPS_MAX */
		return CUDA_ERROR_INVALID_VALUE;
	count = (uint32_t)records;
	if (!count)
		return CUDA_SUCCESS;
	*idx = malloc(count * sizeof(uint32_t));
	*reals = malloc(count * sizeof(CUgraphNode));
	res = *idx && *reals ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; res == CUDA_SUCCESS && i < count; i++) {
		struct wire_rec_graph_dep r;

		wire_rec_graph_dep_get(blob, i, &r);
		(*idx)[i] = r.node;
	}
	if (res == CUDA_SUCCESS)
		res = deps_check(d, *idx, count, *reals);
	if (res != CUDA_SUCCESS) {
		free(*idx);
		free(*reals);
		*idx = NULL;
		*reals = NULL;
		return res;
	}
	*n = count;
	return CUDA_SUCCESS;
}

CUresult capture_deps_parse(const struct graph_desc *d, struct wire_blob blob, struct capture_deps *out)
{
	int records = wire_rec_graph_dep_data_count(blob);
	uint32_t count, *idx = NULL;
	CUresult res;

	*out = (struct capture_deps){ 0 };
	if (records < 0)        /* no multiple of a record, or over GRAPH_DESC_DEPS_MAX */
		return CUDA_ERROR_INVALID_VALUE;
	count = (uint32_t)records;
	if (!count)
		return CUDA_SUCCESS;
	idx = malloc(count * sizeof(*idx));
	out->reals = malloc(count * sizeof(*out->reals));
	out->edges = calloc(count, sizeof(*out->edges));
	res = idx && out->reals && out->edges ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; res == CUDA_SUCCESS && i < count; i++) {
		struct wire_rec_graph_dep_data r;

		/* A record whose reserved byte is not zero is refused here. */
		if (wire_rec_graph_dep_data_get(blob, i, &r)) {
			res = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		idx[i] = r.node;
		out->edges[i] = (CUgraphEdgeData){ .from_port = r.from_port, .to_port = r.to_port, .type = r.type };
	}
	if (res == CUDA_SUCCESS)
		res = deps_check(d, idx, count, out->reals);
	/* The edge's destination is the next node captured, not known yet:
	 * its side of the driver's rules is the driver's to check then (a
	 * kernel, the one type every rule allows, stands in for it here). */
	for (uint32_t i = 0; res == CUDA_SUCCESS && i < count; i++) {
		struct graph_edge_data e = { out->edges[i].from_port, out->edges[i].to_port, out->edges[i].type };

		if (!graph_edge_data_ok(&e, d->nodes[idx[i]].type, CU_GRAPH_NODE_TYPE_KERNEL))
			res = CUDA_ERROR_INVALID_VALUE;
	}
	free(idx);
	if (res != CUDA_SUCCESS) {
		capture_deps_free(out);
		return res;
	}
	out->n = count;
	return CUDA_SUCCESS;
}

void capture_deps_free(struct capture_deps *deps)
{
	free(deps->reals);
	free(deps->edges);
	*deps = (struct capture_deps){ 0 };
}

CUresult exec_stream_update_capture_dependencies_data(struct exec *ex,
						      const struct wire_stream_update_capture_dependencies_data_req *req,
						      struct wire_stream_update_capture_dependencies_data_rep *rep)
{
	struct capture_deps deps = { 0 };
	struct exec_graph *g;
	CUgraph real;
	CUstream s;
	CUresult res = exec_stream_real(ex, req->stream, &s);

	(void)rep;
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
			res = capture_deps_parse(g->d, req->deps, &deps);
		if (res != CUDA_SUCCESS)
			return res;
	}
	res = ex->be->cuStreamUpdateCaptureDependencies(s, deps.reals, deps.edges, deps.n, req->flags);
	capture_deps_free(&deps);
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
