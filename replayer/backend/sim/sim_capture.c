/* Stream capture on the sim device.
 *
 * A capturing stream adds nodes to its capture's graph instead of queueing
 * commands: each new node depends on the stream's current dependency set
 * (cdeps) and becomes that set. Recording an event on a capturing stream
 * notes the set in the event; a stream waiting on such an event joins the
 * capture (or widens its set), which is how captures fork and join across
 * streams. Ending the capture on its origin stream checks that every other
 * stream's work was joined back, then hands over the graph.
 *
 * Errors follow the driver's rules as documented: synchronising a capturing
 * stream, work on the legacy stream while a blocking stream captures, a
 * potentially unsafe call under the thread's capture mode, a wait on an
 * event recorded outside the capture: the call fails and the capture is
 * invalidated, which cuStreamEndCapture then reports.
 */
#define LOG_PREFIX "sim: "

#include "sim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "log.h"
#include "sim_graph_internal.h"

/* cuThreadExchangeStreamCaptureMode: per thread, as in the driver. */
static __thread CUstreamCaptureMode sim_tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static void capture_end(struct sim *sim, struct sim_capture *cap, bool keep_graph)
{
	for (struct sim_stream *s = sim->streams; s; s = s->next)
		if (s->capture == cap) {
			s->capture = NULL;
			sim_node_set_clear(&s->cdeps);
		}
	for (struct sim_event *e = sim->events; e; e = e->next)
		if (e->capture == cap)
			sim_event_capture_clear(e);
	for (struct sim_capture **p = &sim->captures; *p; p = &(*p)->next)
		if (*p == cap) {
			*p = cap->next;
			break;
		}
	cap->graph->capture = NULL;
	if (!keep_graph && !cap->user_graph)
		sim_graph_free(sim, cap->graph);
	sim_node_set_clear(&cap->departed);
	free(cap);
}

void sim_captures_drop(struct sim *sim, struct sim_ctx *ctx)
{
	struct sim_capture *cap = sim->captures;

	while (cap) {
		struct sim_capture *next = cap->next;

		if (!ctx || cap->origin->ctx == ctx)
			capture_end(sim, cap, false);
		cap = next;
	}
}

void sim_captures_drop_one(struct sim *sim, struct sim_capture *cap)
{
	capture_end(sim, cap, false);
}

void sim_event_capture_clear(struct sim_event *ev)
{
	ev->capture = NULL;
	sim_node_set_clear(&ev->cdeps);
}

static void capture_invalidate(struct sim_capture *cap)
{
	if (!cap->invalidated)
		pr_debug("capture %llu invalidated", (unsigned long long)cap->id);
	cap->invalidated = true;
}

/* Does a blocking stream of @ctx capture? */
static bool blocking_capture(struct sim *sim, struct sim_ctx *ctx, bool invalidate)
{
	bool found = false;

	for (struct sim_stream *s = sim->streams; s; s = s->next)
		if (s->capture && s->ctx == ctx && !(s->flags & CU_STREAM_NON_BLOCKING)) {
			found = true;
			if (invalidate)
				capture_invalidate(s->capture);
		}
	return found;
}

CUresult sim_capture_legacy_check(struct sim *sim, struct sim_stream *s)
{
	if (s != s->ctx->legacy || !sim->captures)
		return CUDA_SUCCESS;
	return blocking_capture(sim, s->ctx, true) ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
}

CUresult sim_capture_unsafe_check(struct sim *sim)
{
	CUstreamCaptureMode mode = sim_tls_capture_mode;
	pthread_t self = pthread_self();
	CUresult rc = CUDA_SUCCESS;

	if (mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_SUCCESS;
	for (struct sim_capture *c = sim->captures; c; c = c->next) {
		bool mine = pthread_equal(c->thread, self);

		if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
		    (!mine && mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
			capture_invalidate(c);
			rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		}
	}
	return rc;
}

CUresult sim_capture_sync_check(struct sim *sim, struct sim_ctx *ctx, struct sim_stream *s)
{
	CUresult rc = CUDA_SUCCESS;

	if (s) {
		if (s->capture) {
			capture_invalidate(s->capture);
			return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		}
		if (s == s->ctx->legacy && sim->captures && blocking_capture(sim, s->ctx, true))
			return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
		return CUDA_SUCCESS;
	}
	for (struct sim_capture *c = sim->captures; c; c = c->next)
		if (c->origin->ctx == ctx) {
			capture_invalidate(c);
			rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		}
	return rc;
}

/* A new node of @s's capture after its current dependencies, with their
 * edge data, which it replaces. The data was checked when it was given,
 * with a kernel standing in for this node: the driver (580.159, H100 and
 * H200) keeps a programmatic edge into a memset as given, where its graph
 * edits would refuse one, and so does the sim. */
static CUresult capture_node(struct sim *sim, struct sim_stream *s, CUgraphNodeType type, struct sim_gnode **out)
{
	struct sim_graph *g = s->capture->graph;
	struct sim_gnode *n;

	*out = NULL;
	n = sim_gnode_add(g, type, s->cdeps.nodes, s->cdeps.count);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (sim_graph_edges_keep(g, &s->cdeps, n)) {
		sim_graph_gnode_drop_last(sim, g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	sim_node_set_clear(&s->cdeps);
	if (sim_node_set_add(&s->cdeps, n)) {
		/* The node stays in the graph; the stream depends on nothing
		 * now, which only loses ordering under memory exhaustion. */
		pr_warn("out of memory while capturing");
	}
	*out = n;
	return CUDA_SUCCESS;
}

static CUresult capture_event_node(struct sim *sim, struct sim_stream *s, CUgraphNodeType type,
				   struct sim_event *ev)
{
	struct sim_gnode *n;
	CUresult rc = capture_node(sim, s, type, &n);

	if (rc)
		return rc;
	n->event = ev;
	ev->pending++;
	return CUDA_SUCCESS;
}

CUresult sim_stream_enqueue_sync(struct sim *sim, struct sim_stream *s, struct sim_cmd *cmd, bool sync)
{
	uint64_t target;

	if (!sync)
		return sim_stream_enqueue(sim, s, cmd);
	sim_cmd_submit(sim, s, cmd);
	/* The stream's own commands complete in order, and the command itself
	 * ran after the work it orders after: a parked non-blocking stream
	 * earlier in the FIFO is not waited for, as on a GPU. */
	target = s->submitted;
	while (s->completed < target && s->ctx->dev->thread_started)
		pthread_cond_wait(&sim->done, &sim->lock);
	return s->ctx->sticky;
}

CUresult sim_stream_enqueue(struct sim *sim, struct sim_stream *s, struct sim_cmd *cmd)
{
	struct sim_gnode *n = NULL;
	CUresult rc = CUDA_SUCCESS;

	if (!s->capture) {
		sim_cmd_submit(sim, s, cmd);
		return CUDA_SUCCESS;
	}
	if (s->capture->invalidated) {
		sim_cmd_free(cmd);
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	}
	switch (cmd->kind) {
	case SIM_CMD_COPY: {
		size_t len = cmd->copy.bytes;

		/* A graph reads its source when it runs: pageable host memory
		 * (staged now) cannot be in one. */
		if (cmd->copy.staging ||
		    !sim_range_device_ok(sim, (uintptr_t)cmd->copy.src, len, PROT_READ) ||
		    !sim_range_device_ok(sim, (uintptr_t)cmd->copy.dst, len, PROT_WRITE)) {
			capture_invalidate(s->capture);
			rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
			break;
		}
		rc = capture_node(sim, s, CU_GRAPH_NODE_TYPE_MEMCPY, &n);
		if (rc)
			break;
		memset(&n->copy, 0, sizeof(n->copy));
		n->copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
		n->copy.srcDevice = (CUdeviceptr)(uintptr_t)cmd->copy.src;
		n->copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
		n->copy.dstDevice = (CUdeviceptr)(uintptr_t)cmd->copy.dst;
		n->copy.WidthInBytes = len;
		n->copy.Height = 1;
		n->copy.Depth = 1;
		break;
	}
	case SIM_CMD_MEMSET:
		rc = capture_node(sim, s, CU_GRAPH_NODE_TYPE_MEMSET, &n);
		if (rc)
			break;
		memset(&n->set, 0, sizeof(n->set));
		n->set.dst = (CUdeviceptr)(uintptr_t)cmd->memset.dst;
		n->set.value = cmd->memset.value;
		n->set.elementSize = cmd->memset.elem;
		n->set.width = cmd->memset.count;
		n->set.height = 1;
		break;
	case SIM_CMD_KERNEL: {
		struct sim_func *f = cmd->kernel.fn;

		rc = capture_node(sim, s, CU_GRAPH_NODE_TYPE_KERNEL, &n);
		if (rc)
			break;
		n->kernel.fn = f;
		n->kernel.grid[0] = cmd->kernel.launch.grid.x;
		n->kernel.grid[1] = cmd->kernel.launch.grid.y;
		n->kernel.grid[2] = cmd->kernel.launch.grid.z;
		n->kernel.block[0] = cmd->kernel.launch.block.x;
		n->kernel.block[1] = cmd->kernel.launch.block.y;
		n->kernel.block[2] = cmd->kernel.launch.block.z;
		n->kernel.shared_bytes = cmd->kernel.launch.shared_bytes;
		n->kernel.args = malloc(f->param_bytes + 1);
		n->kernel.ptrs = calloc(f->param_count + 1, sizeof(void *));
		if (!n->kernel.args || !n->kernel.ptrs) {
			n->kernel.fn = NULL;    /* a launch of it fails */
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		memcpy(n->kernel.args, cmd->kernel.block, f->param_bytes);
		for (uint32_t i = 0; i < f->param_count; i++)
			n->kernel.ptrs[i] = n->kernel.args + f->params[i].offset;
		break;
	}
	case SIM_CMD_HOST:
		/* cuLaunchHostFunc becomes a host node; cuStreamAddCallback is
		 * not allowed in a capture (the driver documents it so). */
		if (!cmd->host.fn) {
			capture_invalidate(s->capture);
			rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
			break;
		}
		rc = capture_node(sim, s, CU_GRAPH_NODE_TYPE_HOST, &n);
		if (rc)
			break;
		n->host.fn = cmd->host.fn;
		n->host.userData = cmd->host.data;
		break;
	default:
		rc = CUDA_ERROR_NOT_SUPPORTED;
		break;
	}
	if (!rc && !n)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	sim_cmd_free(cmd);
	return rc;
}

CUresult sim_capture_event_record(struct sim *sim, struct sim_stream *s, struct sim_event *ev,
				  unsigned flags)
{
	if (!s->capture) {
		if (ev->capture)
			sim_event_capture_clear(ev);
		return SIM_NOT_CAPTURING;
	}
	if (s->capture->invalidated)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	/* An event record node: the graph records it when it runs. */
	if (flags & CU_EVENT_RECORD_EXTERNAL)
		return capture_event_node(sim, s, CU_GRAPH_NODE_TYPE_EVENT_RECORD, ev);
	if (sim_node_set_copy(&ev->cdeps, &s->cdeps))
		return CUDA_ERROR_OUT_OF_MEMORY;
	ev->capture = s->capture;
	return CUDA_SUCCESS;
}

CUresult sim_capture_event_wait(struct sim *sim, struct sim_stream *s, struct sim_event *ev,
				unsigned flags)
{
	if (ev->capture) {
		if (s->capture && s->capture != ev->capture) {
			capture_invalidate(s->capture);
			capture_invalidate(ev->capture);
			return CUDA_ERROR_STREAM_CAPTURE_MERGE;
		}
		if (!s->capture) {
			if (s == s->ctx->legacy)
				return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
			s->capture = ev->capture;       /* the stream joins the capture */
			sim_node_set_clear(&s->cdeps);
		}
		/* The recorded dependencies join with their edge data. */
		for (unsigned i = 0; i < ev->cdeps.count; i++) {
			CUgraphEdgeData e = sim_node_set_edge(&ev->cdeps, i);

			if (sim_node_set_add_data(&s->cdeps, ev->cdeps.nodes[i], &e))
				return CUDA_ERROR_OUT_OF_MEMORY;
		}
		return CUDA_SUCCESS;
	}
	if (!s->capture)
		return SIM_NOT_CAPTURING;
	if (s->capture->invalidated)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	if (flags & CU_EVENT_WAIT_EXTERNAL)
		return capture_event_node(sim, s, CU_GRAPH_NODE_TYPE_WAIT_EVENT, ev);
	if (!ev->gen)
		return CUDA_SUCCESS;    /* never recorded: nothing to wait for */
	/* Work outside the capture cannot be a dependency of the graph. */
	capture_invalidate(s->capture);
	return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
}

CUresult sim_capture_graph(struct sim *sim, struct sim_stream *s, struct sim_exec *x)
{
	struct sim_gnode *n;
	CUresult rc;

	if (s->capture->invalidated)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	rc = capture_node(sim, s, CU_GRAPH_NODE_TYPE_GRAPH, &n);
	if (rc)
		return rc;
	n->child = sim_graph_clone(sim, x->graph, true);
	if (!n->child) {
		n->type = CU_GRAPH_NODE_TYPE_EMPTY;
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* ---- entry points ------------------------------------------------------- */

/* A capture into a new graph, or into @hg after @deps (its nodes). */
static CUresult begin_capture(CUstream h, CUgraph hg, const CUgraphNode *deps, const CUgraphEdgeData *edges,
			      size_t ndeps, CUstreamCaptureMode mode)
{
	struct sim_graph *user = NULL;
	struct sim_capture *cap;
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	if (s == s->ctx->legacy) {
		/* The legacy stream synchronises with everything: it cannot capture. */
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		goto out;
	}
	if (s->capture) {
		rc = CUDA_ERROR_ILLEGAL_STATE;
		goto out;
	}
	if (hg) {
		rc = sim_graph_capture_target(sim, hg, deps, ndeps, &user);
		/* The edges' destination is the first node captured: their
		 * rules on it are checked there (capture_node). */
		for (size_t i = 0; !rc && edges && i < ndeps; i++)
			if (!sim_edge_data_ok(&edges[i], ((struct sim_gnode *)deps[i])->type, CU_GRAPH_NODE_TYPE_KERNEL))
				rc = CUDA_ERROR_INVALID_VALUE;
		if (rc)
			goto out;
	}
	cap = calloc(1, sizeof(*cap));
	if (cap && user) {
		cap->graph = user;
		cap->user_graph = true;
	}
	if (!cap || (!cap->graph && !(cap->graph = sim_graph_new(sim, false)))) {
		free(cap);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	sim_node_set_clear(&s->cdeps);
	for (size_t i = 0; i < ndeps && !rc; i++)
		if (sim_node_set_add_data(&s->cdeps, (struct sim_gnode *)deps[i], edges ? &edges[i] : NULL))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc) {
		sim_node_set_clear(&s->cdeps);
		if (!cap->user_graph)
			sim_graph_free(sim, cap->graph);
		free(cap);
		goto out;
	}
	cap->graph->capture = cap;
	cap->id = ++sim->capture_ids;
	cap->mode = mode;
	cap->thread = pthread_self();
	cap->origin = s;
	cap->next = sim->captures;
	sim->captures = cap;
	s->capture = cap;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode)
{
	return begin_capture(h, NULL, NULL, NULL, 0, mode);
}

CUresult sim_cuStreamBeginCaptureToGraph(CUstream h, CUgraph hg, const CUgraphNode *deps,
					 const CUgraphEdgeData *edges, size_t ndeps, CUstreamCaptureMode mode)
{
	return hg ? begin_capture(h, hg, deps, edges, ndeps, mode) : CUDA_ERROR_INVALID_VALUE;
}

/* Mark every ancestor of the nodes in @set (and the nodes). */
static void mark_ancestors(struct sim *sim, const struct sim_node_set *set)
{
	struct sim_gnode **stack;
	unsigned top = 0, cap = 64;

	stack = malloc(cap * sizeof(*stack));
	if (!stack)
		return;
	for (unsigned i = 0; i < set->count; i++)
		if (set->nodes[i]->mark != sim->walk_mark) {
			set->nodes[i]->mark = sim->walk_mark;
			stack[top++] = set->nodes[i];
			if (top == cap) {
				struct sim_gnode **p = realloc(stack, (cap *= 2) * sizeof(*stack));

				if (!p)
					goto out;
				stack = p;
			}
		}
	while (top) {
		struct sim_gnode *n = stack[--top];

		for (unsigned i = 0; i < n->deps.count; i++) {
			struct sim_gnode *d = n->deps.nodes[i];

			if (d->mark == sim->walk_mark)
				continue;
			d->mark = sim->walk_mark;
			stack[top++] = d;
			if (top == cap) {
				struct sim_gnode **p = realloc(stack, (cap *= 2) * sizeof(*stack));

				if (!p)
					goto out;
				stack = p;
			}
		}
	}
out:
	free(stack);
}

CUresult sim_cuStreamEndCapture(CUstream h, CUgraph *ph)
{
	struct sim_capture *cap;
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	*ph = NULL;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	cap = s->capture;
	if (!cap) {
		rc = CUDA_ERROR_ILLEGAL_STATE;
		goto out;
	}
	if (cap->origin != s) {
		rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
		goto out;
	}
	if (cap->invalidated) {
		capture_end(sim, cap, false);
		rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		goto out;
	}
	/* Every forked stream's last work must lead into the origin's. */
	sim->walk_mark++;
	mark_ancestors(sim, &s->cdeps);
	for (struct sim_stream *t = sim->streams; t && !rc; t = t->next)
		if (t->capture == cap && t != s)
			for (unsigned i = 0; i < t->cdeps.count; i++)
				if (t->cdeps.nodes[i]->mark != sim->walk_mark)
					rc = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
	for (unsigned i = 0; i < cap->departed.count && !rc; i++)
		if (cap->departed.nodes[i]->mark != sim->walk_mark)
			rc = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
	if (rc) {
		capture_end(sim, cap, false);
		goto out;
	}
	*ph = (CUgraph)cap->graph;
	capture_end(sim, cap, true);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	if (!st)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	if (s == s->ctx->legacy && sim->captures && blocking_capture(sim, s->ctx, false))
		rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	else if (!s->capture)
		*st = CU_STREAM_CAPTURE_STATUS_NONE;
	else
		*st = s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
					      : CU_STREAM_CAPTURE_STATUS_ACTIVE;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
				    const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	/* cuda.h: edge data only with the dependencies. */
	if (!st || (edges && !deps))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	if (s == s->ctx->legacy && sim->captures && blocking_capture(sim, s->ctx, false)) {
		rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
		goto out;
	}
	if (!s->capture) {
		*st = CU_STREAM_CAPTURE_STATUS_NONE;
		goto out;
	}
	*st = s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
	/* The data has nowhere to go: the driver's answer (cuda.h). */
	if (deps && !edges && sim_node_set_special(&s->cdeps)) {
		rc = CUDA_ERROR_LOSSY_QUERY;
		goto out;
	}
	if (edges && !(*edges = sim_node_set_data(&s->cdeps))) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (id)
		*id = s->capture->id;
	if (graph)
		*graph = (CUgraph)s->capture->graph;
	/* Valid until the stream's next capture operation, as documented. */
	if (deps)
		*deps = (const CUgraphNode *)s->cdeps.nodes;
	if (ndeps)
		*ndeps = s->cdeps.count;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamUpdateCaptureDependencies(CUstream h, CUgraphNode *deps, const CUgraphEdgeData *edges,
					       size_t n, unsigned int flags)
{
	struct sim_node_set set = { 0 };
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	if (flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES || (n && !deps))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	if (!s->capture) {
		rc = CUDA_ERROR_ILLEGAL_STATE;
		goto out;
	}
	if (flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES && sim_node_set_copy(&set, &s->cdeps)) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		struct sim_gnode *d = (struct sim_gnode *)deps[i];
		struct sim_graph *g = s->capture->graph;

		if (!d || d->index >= g->count || g->nodes[d->index] != d)
			rc = CUDA_ERROR_INVALID_VALUE;
		/* The destination, the next node captured, is checked there. */
		else if (edges && !sim_edge_data_ok(&edges[i], d->type, CU_GRAPH_NODE_TYPE_KERNEL))
			rc = CUDA_ERROR_INVALID_VALUE;
		else if (sim_node_set_add_data(&set, d, edges ? &edges[i] : NULL))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc) {
		sim_node_set_clear(&set);
		goto out;
	}
	sim_node_set_clear(&s->cdeps);
	s->cdeps = set;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	CUstreamCaptureMode old = sim_tls_capture_mode;

	if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	sim_tls_capture_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}
