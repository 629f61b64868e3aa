/* Host functions and stream callbacks: cuLaunchHostFunc, cuStreamAddCallback
 * and graph host nodes. The function runs here, in the application's
 * process, in stream order.
 *
 * The worker only ever sees a token: each function and its argument are
 * kept in a table here, and the worker's trampoline, when the stream reaches
 * it, asks over the host-function channel (common/hostfn_chan.h) to run a
 * token and holds the stream until we answer. A thread of ours reads those
 * requests, runs the function and answers. So:
 *
 *   - work queued after a host function starts only once it returned, and
 *     it runs only once the work before it finished (the driver's order);
 *   - a launch's token is forgotten when it ran (a token the table does not
 *     know is answered without running anything: a restored worker may
 *     replay a launch that already ran before the snapshot's requests were
 *     replayed, and a confused or hostile worker cannot make us call
 *     anything we were not given);
 *   - a host node's token (cuGraphAddHostNode, a cuLaunchHostFunc captured
 *     into a graph) is kept for the process's life: graphs run it any number
 *     of times, and a restored worker rebuilds the graph around the token.
 *     Host nodes share a token per (function, argument) pair.
 *
 * A host function must not call CUDA (as with the driver): calls from the
 * callback thread answer CUDA_ERROR_NOT_PERMITTED (rpc.c).
 *
 * Graph memcpy nodes with a host end are tokens of the same table (a
 * shim_host_copy instead of a function): when the graph reaches the copy
 * the worker asks for the range's bytes (COPY_IN) or sends them
 * (COPY_OUT), and this thread reads or writes the application's memory
 * then, in stream order, as the driver's copy would.
 */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph_desc.h"
#include "hostfn_chan.h"
#include "log.h"

static __thread bool in_callback;

bool hostfn_in_callback(void)
{
	return in_callback;
}

static unsigned token_bucket(uint64_t token)
{
	return (unsigned)((token ^ token >> 13) % SHIM_HOSTFN_BUCKETS);
}

static unsigned fn_bucket(CUhostFn fn, void *data)
{
	uint64_t v = (uint64_t)(uintptr_t)fn * 31 ^ (uint64_t)(uintptr_t)data;

	return (unsigned)((v ^ v >> 17) % SHIM_HOSTFN_BUCKETS);
}

/* A new token for @fn/@cb and @data: 0 when out of memory. Host nodes
 * (!@oneshot) reuse the token of the same function and argument. */
static uint64_t hostfn_register(CUhostFn fn, CUstreamCallback cb, CUstream stream, void *data, bool oneshot)
{
	struct shim_process *p = shim_process();
	struct shim_hostfn *e;
	uint64_t token = 0;

	pthread_mutex_lock(&p->hostfn.lock);
	if (!oneshot) {
		for (e = p->hostfn.by_fn[fn_bucket(fn, data)]; e; e = e->next_fn)
			if (e->fn == fn && e->data == data) {
				token = e->token;
				goto out;
			}
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		goto out;
	e->token = token = ++p->hostfn.next;
	e->fn = fn;
	e->cb = cb;
	e->stream = stream;
	e->data = data;
	e->oneshot = oneshot;
	e->next_token = p->hostfn.by_token[token_bucket(token)];
	p->hostfn.by_token[token_bucket(token)] = e;
	if (!oneshot) {
		e->next_fn = p->hostfn.by_fn[fn_bucket(fn, data)];
		p->hostfn.by_fn[fn_bucket(fn, data)] = e;
	}
out:
	pthread_mutex_unlock(&p->hostfn.lock);
	return token;
}

static unsigned copy_bucket(const struct shim_host_copy *c)
{
	uint64_t v = (uint64_t)c->base * 31 ^ c->width ^ c->end;

	return (unsigned)((v ^ v >> 17) % SHIM_HOSTFN_BUCKETS);
}

static bool copy_same(const struct shim_host_copy *a, const struct shim_host_copy *b)
{
	return a->end == b->end && a->base == b->base && a->pitch == b->pitch && a->layer_rows == b->layer_rows &&
	       a->width == b->width && a->height == b->height && a->depth == b->depth;
}

CUresult hostfn_copy_token(const struct shim_host_copy *c, uint64_t *token)
{
	struct shim_process *p = shim_process();
	struct shim_hostfn *e;
	CUresult res = rpc_hostfn_ready();

	if (res != CUDA_SUCCESS)
		return res;
	*token = 0;
	pthread_mutex_lock(&p->hostfn.lock);
	for (e = p->hostfn.by_fn[copy_bucket(c)]; e; e = e->next_fn)
		if (e->copy && copy_same(e->copy, c)) {
			*token = e->token;
			goto out;
		}
	e = calloc(1, sizeof(*e));
	if (e)
		e->copy = malloc(sizeof(*e->copy));
	if (!e || !e->copy) {
		free(e);
		goto out;
	}
	*e->copy = *c;
	e->token = *token = ++p->hostfn.next;
	e->next_token = p->hostfn.by_token[token_bucket(e->token)];
	p->hostfn.by_token[token_bucket(e->token)] = e;
	e->next_fn = p->hostfn.by_fn[copy_bucket(c)];
	p->hostfn.by_fn[copy_bucket(c)] = e;
out:
	pthread_mutex_unlock(&p->hostfn.lock);
	return *token ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

bool hostfn_copy_lookup(uint64_t token, struct shim_host_copy *out)
{
	struct shim_process *p = shim_process();
	struct shim_hostfn *e;
	bool found = false;

	pthread_mutex_lock(&p->hostfn.lock);
	for (e = p->hostfn.by_token[token_bucket(token)]; e && !found; e = e->next_token)
		if (e->token == token && e->copy) {
			*out = *e->copy;
			found = true;
		}
	pthread_mutex_unlock(&p->hostfn.lock);
	return found;
}

/* Copy out what @token names; a one-off entry is removed (and freed). */
static bool hostfn_take(uint64_t token, struct shim_hostfn *out)
{
	struct shim_process *p = shim_process();
	struct shim_hostfn **pp, *e;
	bool found = false;

	pthread_mutex_lock(&p->hostfn.lock);
	for (pp = &p->hostfn.by_token[token_bucket(token)]; (e = *pp); pp = &e->next_token) {
		if (e->token != token)
			continue;
		*out = *e;
		found = true;
		if (e->oneshot) {
			*pp = e->next_token;
			free(e);
		}
		break;
	}
	pthread_mutex_unlock(&p->hostfn.lock);
	return found;
}

/* A launch that failed never runs: forget its one-off token. */
static void hostfn_forget(uint64_t token)
{
	struct shim_hostfn e;

	hostfn_take(token, &e);
}

/* The token of a host node's parameters: fn and argument as the app gave them. */
static bool hostfn_lookup(uint64_t token, CUDA_HOST_NODE_PARAMS *out)
{
	struct shim_process *p = shim_process();
	struct shim_hostfn *e;
	bool found = false;

	pthread_mutex_lock(&p->hostfn.lock);
	for (e = p->hostfn.by_token[token_bucket(token)]; e && !found; e = e->next_token)
		if (e->token == token && e->fn) {
			out->fn = e->fn;
			out->userData = e->data;
			found = true;
		}
	pthread_mutex_unlock(&p->hostfn.lock);
	return found;
}

/* The callback thread's connection: its socket, and its TLS session over tls://. */
struct hostfn_conn {
	int fd;
	struct tls_conn *tls;
};

/* The host end's rows as one span when they lie end to end. */
static bool copy_contiguous(const struct shim_host_copy *c)
{
	return (c->height == 1 || c->pitch == c->width) &&
	       (c->depth == 1 || (c->pitch == c->width && c->layer_rows == c->height));
}

/* Serve a COPY_IN or COPY_OUT record: the application's memory read or
 * written now, while the worker's stream waits for the answer. 0, or
 * -errno when the channel broke. */
static int copy_serve(const struct hostfn_conn *c, const struct hostfn_rec *rec)
{
	bool in = rec->type == HOSTFN_COPY_IN;
	struct hostfn_rec done = { .type = HOSTFN_DONE, .status = HOSTFN_COPY_UNKNOWN, .token = rec->token };
	struct shim_host_copy h;
	struct graph_node_memcpy shape;
	uint64_t count, bytes = 0;
	bool ok;
	int ret = hostfn_count_recv(c->fd, c->tls, &count);

	if (ret)
		return ret;
	ok = hostfn_copy_lookup(rec->token, &h) && h.end == (in ? GRAPH_COPY_HOST_SRC : GRAPH_COPY_HOST_DST);
	if (ok) {
		shape = (struct graph_node_memcpy){ .width = h.width, .height = h.height, .depth = h.depth };
		ok = graph_node_memcpy_packed(&shape, &bytes) && bytes == count;
	}
	if (!ok)
		pr_warn("host-function channel: copy %#llx of %llu bytes unknown: not copied",
			(unsigned long long)rec->token, (unsigned long long)count);
	if (!in) {
		/* The bytes come first; unknown ones are read and dropped. */
		if (!ok) {
			ret = hostfn_bytes_recv(c->fd, c->tls, NULL, count);
		} else if (copy_contiguous(&h)) {
			ret = hostfn_bytes_recv(c->fd, c->tls, (void *)h.base, count);
		} else {
			for (uint64_t z = 0; z < h.depth && !ret; z++)
				for (uint64_t y = 0; y < h.height && !ret; y++)
					ret = hostfn_bytes_recv(c->fd, c->tls,
								(void *)(h.base + (z * h.layer_rows + y) * h.pitch),
								h.width);
		}
		if (ret)
			return ret;
	}
	if (ok)
		done.status = HOSTFN_COPY_OK;
	ret = c->tls ? hostfn_rec_send_tls(c->tls, &done) : hostfn_rec_send(c->fd, &done);
	if (ret || !in || !ok)
		return ret;
	if (copy_contiguous(&h))
		return hostfn_bytes_send(c->fd, c->tls, (const void *)h.base, count);
	for (uint64_t z = 0; z < h.depth && !ret; z++)
		for (uint64_t y = 0; y < h.height && !ret; y++)
			ret = hostfn_bytes_send(c->fd, c->tls, (const void *)(h.base + (z * h.layer_rows + y) * h.pitch),
						h.width);
	return ret;
}

static void *hostfn_thread(void *arg)
{
	struct hostfn_conn c = *(struct hostfn_conn *)arg;
	struct hostfn_rec rec;

	free(arg);
	in_callback = true;
	while (!(c.tls ? hostfn_rec_recv_tls(c.tls, &rec) : hostfn_rec_recv(c.fd, &rec))) {
		struct hostfn_rec done = { .type = HOSTFN_DONE, .token = rec.token };
		struct shim_hostfn e;

		if (rec.type == HOSTFN_COPY_IN || rec.type == HOSTFN_COPY_OUT) {
			if (copy_serve(&c, &rec))
				break;
			continue;
		}
		if (rec.type != HOSTFN_RUN) {
			pr_warn("host-function channel: record of type %u ignored", rec.type);
			continue;
		}
		if (hostfn_take(rec.token, &e) && (e.fn || e.cb)) {
			if (e.fn)
				e.fn(e.data);
			else
				e.cb(e.stream, (CUresult)rec.status, e.data);
		} else {
			pr_debug("host-function channel: token %#llx unknown (ran already, or never ours)",
				 (unsigned long long)rec.token);
		}
		if (c.tls ? hostfn_rec_send_tls(c.tls, &done) : hostfn_rec_send(c.fd, &done))
			break;
	}
	/* The worker is gone (or a restore replaced it): so is this channel. */
	pthread_mutex_lock(&shim_process()->conn_lock);
	if (shim_process()->hostfn.fd == c.fd)
		shim_process()->hostfn.fd = -1;
	pthread_mutex_unlock(&shim_process()->conn_lock);
	tls_conn_close(c.tls);
	close(c.fd);
	return NULL;
}

int hostfn_thread_start(int fd, struct tls_conn *tls)
{
	struct hostfn_conn *c = malloc(sizeof(*c));
	pthread_attr_t attr;
	pthread_t t;
	int ret;

	if (!c)
		return -ENOMEM;
	*c = (struct hostfn_conn){ .fd = fd, .tls = tls };
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	ret = pthread_create(&t, &attr, hostfn_thread, c);
	pthread_attr_destroy(&attr);
	if (ret)
		free(c);
	return -ret;
}

/* ---- launches ----------------------------------------------------------- */

static CUresult launch_host_func(uint64_t stream, CUhostFn fn, void *data)
{
	struct wire_launch_host_func_req req = { .stream = stream };
	/* Captured, the launch becomes a host node the graph runs again. */
	bool captured = capture_active();
	CUresult res;

	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_hostfn_ready();
	if (res != CUDA_SUCCESS)
		return res;
	req.token = hostfn_register(fn, NULL, NULL, data, !captured);
	if (!req.token)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = rpc_launch_host_func_defer(&req);
	if (res != CUDA_SUCCESS && !captured)
		hostfn_forget(req.token);
	return res;
}

SHIM_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	SHIM_ENTRY();
	return launch_host_func(shim_stream(hStream, false), fn, userData);
}

SHIM_API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
	SHIM_ENTRY();
	return launch_host_func(shim_stream(hStream, true), fn, userData);
}

static CUresult stream_add_callback(CUstream app_stream, uint64_t stream, CUstreamCallback cb, void *data,
				    unsigned flags)
{
	struct wire_stream_add_callback_req req = { .stream = stream, .flags = flags };
	CUresult res;

	if (!cb || flags)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_hostfn_ready();
	if (res != CUDA_SUCCESS)
		return res;
	req.token = hostfn_register(NULL, cb, app_stream, data, true);
	if (!req.token)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = rpc_stream_add_callback_defer(&req);
	if (res != CUDA_SUCCESS)
		hostfn_forget(req.token);
	return res;
}

SHIM_API CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
				      unsigned int flags)
{
	SHIM_ENTRY();
	return stream_add_callback(hStream, shim_stream(hStream, false), callback, userData, flags);
}

SHIM_API CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData,
					   unsigned int flags)
{
	SHIM_ENTRY();
	return stream_add_callback(hStream, shim_stream(hStream, true), callback, userData, flags);
}

/* ---- graph host nodes --------------------------------------------------- */

/* The persistent token of host node parameters, the channel ready. */
CUresult hostfn_node_token(const CUDA_HOST_NODE_PARAMS *p, uint64_t *token)
{
	CUresult res;

	if (!p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_hostfn_ready();
	if (res != CUDA_SUCCESS)
		return res;
	*token = hostfn_register(p->fn, NULL, NULL, p->userData, false);
	return *token ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SHIM_API CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
	SHIM_ENTRY();
	struct wire_graph_host_node_get_params_req req;
	struct wire_graph_host_node_get_params_rep rep;
	CUresult res;

	if (!nodeParams || !shim_node_decode(hNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_graph_host_node_get_params(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	/* A token the table does not know is none of ours to hand out. */
	return hostfn_lookup(rep.token, nodeParams) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	SHIM_ENTRY();
	struct wire_graph_host_node_set_params_req req;
	struct wire_graph_host_node_set_params_rep rep;
	CUresult res;

	if (!shim_node_decode(hNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	res = hostfn_node_token(nodeParams, &req.token);
	return res == CUDA_SUCCESS ? rpc_graph_host_node_set_params(&req, &rep) : res;
}

SHIM_API CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
					       const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	SHIM_ENTRY();
	struct wire_graph_exec_host_node_set_params_req req = { .exec = (uint64_t)(uintptr_t)hGraphExec };
	struct wire_graph_exec_host_node_set_params_rep rep;
	CUresult res;

	if (!handle_kind_is(req.exec, WIRE_HANDLE_GRAPH_EXEC) || !shim_node_decode(hNode, &req.graph, &req.node))
		return CUDA_ERROR_INVALID_VALUE;
	res = hostfn_node_token(nodeParams, &req.token);
	return res == CUDA_SUCCESS ? rpc_graph_exec_host_node_set_params(&req, &rep) : res;
}
