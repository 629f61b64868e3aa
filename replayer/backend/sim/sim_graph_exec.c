/* Executable graphs on the sim device: instantiation into a node order,
 * conditional nodes, launch, update, node setters, dot output and kernel
 * node attributes (graphs themselves: sim_graph.c).
 */
#define LOG_PREFIX "sim: "
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim_graph_internal.h"

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
	rc = sim_graph_resolve(sim, hg, &g);
	if (!rc && g->capture)
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	/* "Only one instantiation of the graph may exist at any point in time." */
	for (struct sim_exec *e = sim->execs; !rc && e; e = e->next)
		if (e->origin == g && sim_graph_has_cond(g))
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
	rc = sim_graph_exec_resolve(sim, h, &x);
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
		CUresult rc = sim_graph_copy_check(sim, p, &geom);

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
		CUresult rc = sim_graph_memset_check(sim, p);

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
		sim_graph_cond_unref(sim, cmd->cond.cond);
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
	rc = sim_graph_resolve(sim, hg, &g);
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
	rc = sim_graph_enter_add(ph, hg, deps, ndeps, &sim, &g);
	if (rc)
		return rc;
	/* The handle must be one made for this graph. */
	for (c = sim->conds; c; c = c->next)
		if (c->value == cp->handle && c->graph == g)
			break;
	if (!c)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = sim_graph_node_append(g, CU_GRAPH_NODE_TYPE_CONDITIONAL, deps, ndeps, ph, &n);
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
			sim_graph_gnode_drop_last(sim, g);
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
	rc = sim_graph_exec_resolve(sim, h, &x);
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
	rc = sim_graph_exec_resolve(sim, h, &x);
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
		if (sim_graph_gnode_params_copy(sim, &tmp, y)) {
			sim_graph_gnode_params_release(sim, &tmp);
			ret = -ENOMEM;
			break;
		}
		sim_graph_gnode_params_release(sim, x);
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
	rc = sim_graph_exec_resolve(sim, h, &x);
	if (!rc)
		rc = sim_graph_resolve(sim, hg, &g);
	if (!rc && g->capture)
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	/* The sim does not pair conditional bodies: refused, never half done. */
	if (!rc && (sim_graph_has_cond(g) || sim_graph_has_cond(x->graph))) {
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
	rc = sim_graph_exec_resolve(sim, h, &x);
	if (!rc && !(n = exec_node_find(x, node, CU_GRAPH_NODE_TYPE_KERNEL)))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = sim_graph_kernel_params_set(sim, n, p);
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
	rc = sim_graph_exec_resolve(sim, h, &x);
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
		return sim_graph_enter_node(h, type, psim, pn);
	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(psim);
	if (rc)
		return rc;
	rc = sim_graph_exec_resolve(*psim, hx, &x);
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
	rc = sim_graph_copy_check(sim, p, &geom);
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
	rc = sim_graph_memset_check(sim, p);
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
	rc = sim_graph_exec_resolve(sim, hx, &x);
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
	rc = sim_graph_resolve(sim, hg, &g);
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
	rc = sim_graph_exec_resolve(sim, hx, &x);
	if (!rc && !(n = exec_node_find(x, node, CU_GRAPH_NODE_TYPE_GRAPH)))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = sim_graph_resolve(sim, hchild, &child);
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
	rc = sim_graph_enter_node(h, CU_GRAPH_NODE_TYPE_KERNEL, &sim, &n);
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
	rc = sim_graph_enter_node(h, CU_GRAPH_NODE_TYPE_KERNEL, &sim, &n);
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

	rc = sim_graph_enter_node(dst, CU_GRAPH_NODE_TYPE_KERNEL, &sim, &d);
	if (rc)
		return rc;
	rc = sim_graph_node_resolve(sim, src, &s);
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
	CUresult rc = sim_graph_resolve(sim, hg, out);

	if (!rc && ((*out)->capture || ((*out)->owned && !(*out)->body)))
		rc = (*out)->capture ? CUDA_ERROR_ILLEGAL_STATE : CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = sim_graph_deps_check(sim, *out, deps, n);
	return rc;
}
