/* Stream capture. The worker runs the captured calls on its real stream, so
 * the driver captures them itself; the shim forwards the capture calls,
 * keeps each thread's capture mode (sent to the worker ahead of that
 * thread's calls, rpc.c) and, while a capture it began is in progress,
 * sends calls it would otherwise defer at once (rpc_defer), so that the
 * driver's errors during capture come back from the call that caused them. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Origin streams of the captures this process began. */
#define CAPTURES_TRACKED 256

static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t capture_streams[CAPTURES_TRACKED];
/* Whether each capture adds to the application's graph (cuStreamBeginCaptureToGraph). */
static bool capture_to_graph[CAPTURES_TRACKED];
static unsigned capture_count;
/* Beyond the table: counted, so that deferral stays off until all end. */
static unsigned capture_untracked;

static __thread uint32_t capture_mode_tls = CU_STREAM_CAPTURE_MODE_GLOBAL;

bool capture_active(void)
{
	return __atomic_load_n(&capture_count, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&capture_untracked, __ATOMIC_RELAXED);
}

uint32_t capture_mode_current(void)
{
	return capture_mode_tls;
}

void capture_reset(void)
{
	capture_count = 0;
	capture_untracked = 0;
}

void capture_fork_lock(void)
{
	pthread_mutex_lock(&capture_lock);
}

void capture_fork_unlock(void)
{
	pthread_mutex_unlock(&capture_lock);
}

void capture_track(uint64_t stream, bool to_graph)
{
	pthread_mutex_lock(&capture_lock);
	if (capture_count < CAPTURES_TRACKED) {
		unsigned i = __atomic_add_fetch(&capture_count, 1, __ATOMIC_RELAXED) - 1;

		capture_streams[i] = stream;
		capture_to_graph[i] = to_graph;
	} else
		__atomic_add_fetch(&capture_untracked, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&capture_lock);
}

static void capture_untrack(uint64_t stream)
{
	pthread_mutex_lock(&capture_lock);
	for (unsigned i = 0; i < capture_count; i++)
		if (capture_streams[i] == stream) {
			capture_streams[i] = capture_streams[capture_count - 1];
			capture_to_graph[i] = capture_to_graph[capture_count - 1];
			__atomic_sub_fetch(&capture_count, 1, __ATOMIC_RELAXED);
			goto out;
		}
	if (capture_untracked)
		__atomic_sub_fetch(&capture_untracked, 1, __ATOMIC_RELAXED);
out:
	pthread_mutex_unlock(&capture_lock);
}

/* Whether @stream's capture adds to the application's own graph. */
static bool capture_into_graph(uint64_t stream)
{
	bool found = false;

	pthread_mutex_lock(&capture_lock);
	for (unsigned i = 0; i < capture_count; i++)
		found |= capture_streams[i] == stream && capture_to_graph[i];
	pthread_mutex_unlock(&capture_lock);
	return found;
}

bool capture_tracked(uint64_t stream)
{
	bool found = capture_untracked > 0;

	pthread_mutex_lock(&capture_lock);
	for (unsigned i = 0; i < capture_count; i++)
		found |= capture_streams[i] == stream;
	pthread_mutex_unlock(&capture_lock);
	return found;
}

static CUresult begin_capture(uint64_t stream, CUstreamCaptureMode mode)
{
	struct wire_stream_begin_capture_req req = { .stream = stream, .mode = (uint32_t)mode };
	struct wire_stream_begin_capture_rep rep;
	CUresult res;

	if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_stream_begin_capture(&req, &rep);
	if (res == CUDA_SUCCESS)
		capture_track(stream, false);
	return res;
}

/* CUDA 10.0's entry point had no mode: global, the default. */
SHIM_API CUresult cuStreamBeginCapture(CUstream hStream)
{
	SHIM_ENTRY();
	return begin_capture(shim_stream(hStream, false), CU_STREAM_CAPTURE_MODE_GLOBAL);
}

SHIM_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
	SHIM_ENTRY();
	return begin_capture(shim_stream(hStream, true), CU_STREAM_CAPTURE_MODE_GLOBAL);
}

SHIM_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	SHIM_ENTRY();
	return begin_capture(shim_stream(hStream, false), mode);
}

SHIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	SHIM_ENTRY();
	return begin_capture(shim_stream(hStream, true), mode);
}

static CUresult end_capture(uint64_t stream, CUgraph *phGraph)
{
	struct wire_stream_end_capture_req req = { .stream = stream };
	struct wire_stream_end_capture_rep rep;
	CUresult res;

	/* A capture into the application's graph may end without asking for
	 * it back (NVIDIA's graphConditionalNodes sample does). */
	if (!phGraph && !capture_into_graph(stream))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_stream_end_capture(&req, &rep);
	/* Ended (or ended in failure) unless it was the wrong stream. */
	if (res != CUDA_ERROR_STREAM_CAPTURE_UNMATCHED && capture_tracked(stream))
		capture_untrack(stream);
	if (phGraph)
		*phGraph = res == CUDA_SUCCESS ? (CUgraph)(uintptr_t)rep.graph : NULL;
	return res;
}

SHIM_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	SHIM_ENTRY();
	return end_capture(shim_stream(hStream, false), phGraph);
}

SHIM_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	SHIM_ENTRY();
	return end_capture(shim_stream(hStream, true), phGraph);
}

static CUresult is_capturing(uint64_t stream, CUstreamCaptureStatus *status)
{
	struct wire_stream_is_capturing_req req = { .stream = stream };
	struct wire_stream_is_capturing_rep rep;
	CUresult res;

	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	/* No capture begun here: nothing can capture. The runtime and PyTorch
	 * ask on every allocation; that needs no round trip. */
	if (!capture_active()) {
		*status = CU_STREAM_CAPTURE_STATUS_NONE;
		return CUDA_SUCCESS;
	}
	res = rpc_stream_is_capturing(&req, &rep);
	if (res == CUDA_SUCCESS)
		*status = (CUstreamCaptureStatus)rep.status;
	return res;
}

SHIM_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	SHIM_ENTRY();
	return is_capturing(shim_stream(hStream, false), captureStatus);
}

SHIM_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	SHIM_ENTRY();
	return is_capturing(shim_stream(hStream, true), captureStatus);
}

/* The dependency and edge data arrays handed out stay valid until the
 * thread's next call here, as the driver's stay valid until the stream's
 * next capture call. */
static __thread CUgraphNode *capture_deps_buf;
static __thread CUgraphEdgeData *capture_edges_buf;
static __thread size_t capture_deps_cap;

#define WANT_GRAPH 1u
#define WANT_DEPS 2u

/* Room for @n dependencies and their data in the thread's arrays. */
static CUresult capture_deps_reserve(size_t n)
{
	CUgraphNode *d;
	CUgraphEdgeData *e;

	if (n <= capture_deps_cap)
		return CUDA_SUCCESS;
	d = realloc(capture_deps_buf, n * sizeof(*d));
	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	capture_deps_buf = d;
	e = realloc(capture_edges_buf, n * sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	capture_edges_buf = e;
	capture_deps_cap = n;
	return CUDA_SUCCESS;
}

/* @edges NULL is the forms without edge data (cuStreamGetCaptureInfo_v2):
 * as the driver, CUDA_ERROR_LOSSY_QUERY when @deps is asked and an edge
 * is not default. */
static CUresult capture_info(uint64_t stream, CUstreamCaptureStatus *status, cuuint64_t *id,
			     CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
			     size_t *ndeps)
{
	struct wire_stream_get_capture_info_data_req req = { .stream = stream };
	struct wire_stream_get_capture_info_data_rep rep;
	size_t n;
	int count;
	CUresult res;

	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	/* As is_capturing; the other outputs are only written while capturing. */
	if (!capture_active()) {
		*status = CU_STREAM_CAPTURE_STATUS_NONE;
		return CUDA_SUCCESS;
	}
	if (graph)
		req.want |= WANT_GRAPH;
	if (deps || ndeps)
		req.want |= WANT_GRAPH | WANT_DEPS;
	res = rpc_stream_get_capture_info_data(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	*status = (CUstreamCaptureStatus)rep.status;
	if (rep.status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		return CUDA_SUCCESS;
	/* cuda.h: edge data only with the dependencies. Only while capturing:
	 * the H100's driver (580.159) answers CUDA_SUCCESS when nothing does. */
	if (edges && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	if (req.want & WANT_DEPS) {
		count = wire_rec_graph_dep_data_count(rep.deps);
		if (count < 0)
			return CUDA_ERROR_UNKNOWN;      /* not a list of dependencies */
		n = (size_t)count;
		res = capture_deps_reserve(n);
		if (res != CUDA_SUCCESS)
			return res;
		for (size_t i = 0; i < n; i++) {
			struct wire_rec_graph_dep_data d;

			if (wire_rec_graph_dep_data_get(rep.deps, (uint32_t)i, &d))
				return CUDA_ERROR_UNKNOWN;      /* a reserved byte set */
			capture_deps_buf[i] = shim_node(rep.graph, d.node);
			capture_edges_buf[i] = (CUgraphEdgeData){ .from_port = d.from_port, .to_port = d.to_port,
								  .type = d.type };
		}
		if (deps && !edges && graph_edge_special(capture_edges_buf, n))
			return CUDA_ERROR_LOSSY_QUERY;
		if (deps)
			*deps = n ? capture_deps_buf : NULL;
		if (edges)
			*edges = n ? capture_edges_buf : NULL;
		if (ndeps)
			*ndeps = n;
	}
	if (id)
		*id = rep.id;
	if (graph)
		*graph = (CUgraph)(uintptr_t)rep.graph;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					 cuuint64_t *id_out)
{
	SHIM_ENTRY();
	return capture_info(shim_stream(hStream, false), captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

SHIM_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					      cuuint64_t *id_out)
{
	SHIM_ENTRY();
	return capture_info(shim_stream(hStream, true), captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

SHIM_API CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					    cuuint64_t *id_out, CUgraph *graph_out,
					    const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
	SHIM_ENTRY();
	return capture_info(shim_stream(hStream, false), captureStatus_out, id_out, graph_out,
			    dependencies_out, NULL, numDependencies_out);
}

SHIM_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						 cuuint64_t *id_out, CUgraph *graph_out,
						 const CUgraphNode **dependencies_out,
						 size_t *numDependencies_out)
{
	SHIM_ENTRY();
	return capture_info(shim_stream(hStream, true), captureStatus_out, id_out, graph_out,
			    dependencies_out, NULL, numDependencies_out);
}

SHIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					    cuuint64_t *id_out, CUgraph *graph_out,
					    const CUgraphNode **dependencies_out,
					    const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	SHIM_ENTRY();
	return capture_info(shim_stream(hStream, false), captureStatus_out, id_out, graph_out,
			    dependencies_out, edgeData_out, numDependencies_out);
}

SHIM_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						 cuuint64_t *id_out, CUgraph *graph_out,
						 const CUgraphNode **dependencies_out,
						 const CUgraphEdgeData **edgeData_out,
						 size_t *numDependencies_out)
{
	SHIM_ENTRY();
	return capture_info(shim_stream(hStream, true), captureStatus_out, id_out, graph_out,
			    dependencies_out, edgeData_out, numDependencies_out);
}

const CUgraphEdgeData *graph_edge_special(const CUgraphEdgeData *edges, size_t n)
{
	static const CUgraphEdgeData zero;

	for (size_t i = 0; edges && i < n; i++)
		if (memcmp(&edges[i], &zero, sizeof(zero)))
			return &edges[i];
	return NULL;
}

/* @e's ports and type; false when its reserved bytes are not zero (the
 * driver refuses those: CUDA_ERROR_INVALID_VALUE). */
static bool edge_data_fields(const CUgraphEdgeData *e, uint8_t *from_port, uint8_t *to_port, uint8_t *type)
{
	for (size_t k = 0; k < sizeof(e->reserved); k++)
		if (e->reserved[k])
			return false;
	*from_port = e->from_port;
	*to_port = e->to_port;
	*type = e->type;
	return true;
}

bool graph_edge_data_put(const CUgraphEdgeData *e, struct wire_rec_graph_edge_data *r)
{
	return edge_data_fields(e, &r->from_port, &r->to_port, &r->type);
}

CUresult capture_deps_blob(const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n, uint64_t *graph,
			   uint8_t **buf, struct wire_blob *out)
{
	*buf = NULL;
	*out = (struct wire_blob){ NULL, 0 };
	if (n && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	if (!n)
		return CUDA_SUCCESS;
	if (n > WIRE_REC_GRAPH_DEP_DATA_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	*buf = malloc(n * WIRE_REC_GRAPH_DEP_DATA_BYTES);
	if (!*buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < n; i++) {
		struct wire_rec_graph_dep_data r = { 0 };
		uint64_t g;

		if (!shim_node_decode(deps[i], &g, &r.node) || (*graph && g != *graph) ||
		    (edges && !edge_data_fields(&edges[i], &r.from_port, &r.to_port, &r.type))) {
			free(*buf);
			*buf = NULL;
			return CUDA_ERROR_INVALID_VALUE;
		}
		*graph = g;
		wire_rec_graph_dep_data_put(*buf, (uint32_t)i, &r);
	}
	*out = (struct wire_blob){ *buf, (uint32_t)(n * WIRE_REC_GRAPH_DEP_DATA_BYTES) };
	return CUDA_SUCCESS;
}

static CUresult update_deps(uint64_t stream, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n,
			    unsigned flags)
{
	struct wire_stream_update_capture_dependencies_data_req req = { .stream = stream, .flags = flags };
	struct wire_stream_update_capture_dependencies_data_rep rep;
	uint8_t *buf;
	CUresult res;

	/* All of one graph: the one the capture adds to (the worker checks). */
	res = capture_deps_blob(deps, edges, n, &req.graph, &buf, &req.deps);
	if (res == CUDA_SUCCESS)
		res = rpc_stream_update_capture_dependencies_data(&req, &rep);
	free(buf);
	return res;
}

SHIM_API CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies,
						    size_t numDependencies, unsigned int flags)
{
	SHIM_ENTRY();
	return update_deps(shim_stream(hStream, false), dependencies, NULL, numDependencies, flags);
}

SHIM_API CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream, CUgraphNode *dependencies,
							 size_t numDependencies, unsigned int flags)
{
	SHIM_ENTRY();
	return update_deps(shim_stream(hStream, true), dependencies, NULL, numDependencies, flags);
}

SHIM_API CUresult cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode *dependencies,
						       const CUgraphEdgeData *dependencyData,
						       size_t numDependencies, unsigned int flags)
{
	SHIM_ENTRY();
	return update_deps(shim_stream(hStream, false), dependencies, dependencyData, numDependencies, flags);
}

SHIM_API CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream hStream, CUgraphNode *dependencies,
							    const CUgraphEdgeData *dependencyData,
							    size_t numDependencies, unsigned int flags)
{
	SHIM_ENTRY();
	return update_deps(shim_stream(hStream, true), dependencies, dependencyData, numDependencies, flags);
}

SHIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	SHIM_ENTRY();
	uint32_t old = capture_mode_tls;

	if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	capture_mode_tls = (uint32_t)*mode;
	*mode = (CUstreamCaptureMode)old;
	return CUDA_SUCCESS;
}
