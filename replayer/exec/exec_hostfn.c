/* Host functions and stream callbacks: the guest's function runs in the
 * guest process, in stream order (common/hostfn_chan.h).
 *
 * The backend is given a trampoline of ours and, as its argument, a small
 * record naming the guest's token. The driver calls the trampoline on its
 * callback thread (the sim: on its device thread) when the stream reaches
 * it; the trampoline sends RUN on the session's host-function channel and
 * waits for the guest's DONE, so the stream is held exactly as long as the
 * guest's function runs, as natively. Runs are serialised (one RUN is
 * outstanding at a time): host functions of different streams do not
 * overlap, which a correct program cannot tell from a slow function.
 *
 * Records of a one-off launch (cuLaunchHostFunc outside a capture,
 * cuStreamAddCallback) are freed by the trampoline after their run. Host
 * nodes (made by the guest, by a capture, or by a restore) keep theirs, one
 * per token, for the session's life: the driver may run them any number of
 * times and from graphs the guest does not name any more.
 *
 * A guest that never answers stalls its own streams, as a function that
 * never returns would natively. The worker's shutdown still works: closing
 * the session (or SIGTERM, through exec_hostfn_interrupt) shuts the channel
 * down, and a waiting trampoline returns without the guest.
 *
 * Threading: the trampolines run on backend threads; everything else on
 * the worker thread. `lock` serialises runs and guards fd.
 */
#define LOG_PREFIX "exec: "
#include "exec.h"
#include "graph_desc.h"
#include "hostfn_chan.h"
#include "log.h"
#include "monotonic.h"
#include "shm_chan.h"
#include "wire_dispatch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* How long the worker waits for the socket that follows an attach request,
 * and for a tcp guest to connect back and prove itself. */
#define HOSTFN_FD_TIMEOUT_MS 2000
#define HOSTFN_CONNECT_TIMEOUT_MS 10000
#define HOSTFN_BUCKETS 256

struct exec_hostfn_call {
	struct exec_hostfn *chan;
	uint64_t token;
	bool oneshot;
	struct exec_hostfn_call *next;  /* persistent ones, by token bucket */
};

/* A host copy's staging buffer and what it copies (exec_hostfn_copy_params). */
struct exec_hostfn_copy {
	struct exec_hostfn *chan;
	uint64_t token, bytes;
	uint32_t host_end;
	void *staging;              /* pinned, from the backend */
	struct exec_hostfn_copy *next;
};

struct exec_hostfn {
	pthread_mutex_t lock;
	pthread_cond_t attached;        /* fd set (tcp: the guest connected back) */
	int fd;                         /* the channel, -1 until attached */
	struct tls_conn *tls;           /* its TLS session over tls://, else NULL */
	struct tls_creds *tls_creds;    /* tls://: what the callback connection's handshake uses */
	bool broken;                    /* the guest broke the protocol, or closed */
	bool closing;
	bool waiting_tcp;               /* a tcp guest is expected to connect back */
	bool waiting_join;              /* a guest is expected to join (HOSTFN_ATTACH_JOIN) */
	int listen_fd;
	pthread_t acceptor;
	bool acceptor_started;
	uint8_t secret[HOSTFN_SECRET_SIZE];
	uint64_t unexpected;            /* DONE records for tokens not run */
	uint64_t not_run;               /* runs asked for with no channel */
	struct exec_hostfn_call *calls[HOSTFN_BUCKETS];
	struct exec_hostfn_copy *copies[HOSTFN_BUCKETS];
	uint64_t copies_unknown;        /* copies the guest did not know */
};

/* The channel a SIGTERM shuts down: a signal handler can only reach a global. */
static volatile sig_atomic_t hostfn_signal_fd = -1;

void exec_hostfn_interrupt(void)
{
	int fd = hostfn_signal_fd;

	if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
}

static struct exec_hostfn *hostfn_get(struct exec *ex)
{
	struct exec_hostfn *h = ex->host.fn;

	if (h)
		return h;
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->attached, NULL);
	h->fd = -1;
	h->listen_fd = -1;
	ex->host.fn = h;
	return h;
}

/* Mark the channel unusable; lock held. Runs waiting on it return. */
static void hostfn_break_locked(struct exec_hostfn *h, const char *why)
{
	if (!h->broken && h->fd >= 0 && !h->closing) {
		pr_warn("host-function channel closed: %s", why);
		shutdown(h->fd, SHUT_RDWR);
	}
	h->broken = true;
}

/* With the lock held: whether the channel can take a run of @token,
 * after waiting (at most HOSTFN_CONNECT_TIMEOUT_MS) for a guest that is
 * to connect back or join. */
static bool hostfn_ready_locked(struct exec_hostfn *h, uint64_t token)
{
	if (h->fd < 0 && (h->waiting_tcp || h->waiting_join) && !h->closing) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += HOSTFN_CONNECT_TIMEOUT_MS / 1000;
		while (h->fd < 0 && (h->waiting_tcp || h->waiting_join) && !h->closing)
			if (pthread_cond_timedwait(&h->attached, &h->lock, &ts) == ETIMEDOUT) {
				/* No join came: later runs need not wait too. */
				h->waiting_join = false;
				break;
			}
	}
	if (h->fd < 0 || h->broken || h->closing) {
		if (!h->closing && !h->not_run++)
			pr_warn("host function %#llx not run: the guest has no host-function channel",
				(unsigned long long)token);
		return false;
	}
	return true;
}

/* With the lock held: read records until the DONE for @token, which goes
 * in *@done. 0, or -errno with the channel broken. */
static int hostfn_done_locked(struct exec_hostfn *h, uint64_t token, struct hostfn_rec *done)
{
	for (;;) {
		int ret = h->tls ? hostfn_rec_recv_tls(h->tls, done) : hostfn_rec_recv(h->fd, done);

		if (ret) {
			hostfn_break_locked(h, strerror(-ret));
			return ret;
		}
		if (done->type != HOSTFN_DONE) {
			hostfn_break_locked(h, "a record that is no answer");
			return -EPROTO;
		}
		if (done->token == token)
			return 0;
		/* An answer for a token not asked for: the guest's own confusion. */
		if (!h->unexpected++)
			pr_warn("host-function channel: DONE for %#llx, which was not run: ignored",
				(unsigned long long)done->token);
	}
}

/* Ask the guest to run @token and wait until it did. */
static void hostfn_run(struct exec_hostfn *h, uint64_t token, CUresult status)
{
	struct hostfn_rec rec = { .type = HOSTFN_RUN, .status = (uint32_t)status, .token = token };
	struct hostfn_rec done;
	int ret;

	pthread_mutex_lock(&h->lock);
	if (!hostfn_ready_locked(h, token))
		goto out;
	ret = h->tls ? hostfn_rec_send_tls(h->tls, &rec) : hostfn_rec_send(h->fd, &rec);
	if (ret) {
		hostfn_break_locked(h, strerror(-ret));
		goto out;
	}
	if (!hostfn_done_locked(h, token, &done) && done.status)
		hostfn_break_locked(h, "a record that is no answer");
out:
	pthread_mutex_unlock(&h->lock);
}

/* A host copy's run: the staging buffer filled from the guest's range, or
 * written to it, while the stream waits (the graph's copy node of the
 * staging buffer is ordered after, or before, this host node). */
static void CUDA_CB hostfn_copy_trampoline(void *data)
{
	struct exec_hostfn_copy *c = data;
	struct exec_hostfn *h = c->chan;
	bool in = c->host_end == GRAPH_COPY_HOST_SRC;
	struct hostfn_rec rec = { .type = in ? HOSTFN_COPY_IN : HOSTFN_COPY_OUT, .token = c->token };
	struct hostfn_rec done;
	int ret;

	pthread_mutex_lock(&h->lock);
	if (!hostfn_ready_locked(h, c->token))
		goto out;
	ret = h->tls ? hostfn_rec_send_tls(h->tls, &rec) : hostfn_rec_send(h->fd, &rec);
	if (!ret)
		ret = hostfn_count_send(h->fd, h->tls, c->bytes);
	if (!ret && !in)
		ret = hostfn_bytes_send(h->fd, h->tls, c->staging, c->bytes);
	if (ret) {
		hostfn_break_locked(h, strerror(-ret));
		goto out;
	}
	if (hostfn_done_locked(h, c->token, &done))
		goto out;
	if (done.status == HOSTFN_COPY_UNKNOWN) {
		/* The guest forgot the range (a hostile or confused worker's
		 * token, as the guest sees it): nothing is copied. */
		if (!h->copies_unknown++)
			pr_warn("host copy %#llx: the guest knows no range of %llu bytes for it: not copied",
				(unsigned long long)c->token, (unsigned long long)c->bytes);
		goto out;
	}
	if (done.status != HOSTFN_COPY_OK) {
		hostfn_break_locked(h, "a copy's answer of an unknown status");
		goto out;
	}
	if (in) {
		ret = hostfn_bytes_recv(h->fd, h->tls, c->staging, c->bytes);
		if (ret)
			hostfn_break_locked(h, strerror(-ret));
	}
out:
	pthread_mutex_unlock(&h->lock);
}

static void CUDA_CB hostfn_trampoline(void *data)
{
	struct exec_hostfn_call *c = data;

	hostfn_run(c->chan, c->token, CUDA_SUCCESS);
	if (c->oneshot)
		free(c);
}

static void CUDA_CB hostfn_callback_trampoline(CUstream stream, CUresult status, void *data)
{
	struct exec_hostfn_call *c = data;

	(void)stream;
	hostfn_run(c->chan, c->token, status);
	free(c);
}

static struct exec_hostfn_call *call_oneshot(struct exec *ex, uint64_t token)
{
	struct exec_hostfn *h = hostfn_get(ex);
	struct exec_hostfn_call *c = h ? calloc(1, sizeof(*c)) : NULL;

	if (!c)
		return NULL;
	c->chan = h;
	c->token = token;
	c->oneshot = true;
	return c;
}

static struct exec_hostfn_call *call_persistent(struct exec *ex, uint64_t token)
{
	struct exec_hostfn *h = hostfn_get(ex);
	struct exec_hostfn_call **b, *c;

	if (!h)
		return NULL;
	b = &h->calls[(token ^ token >> 17) % HOSTFN_BUCKETS];
	for (c = *b; c; c = c->next)
		if (c->token == token)
			return c;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->chan = h;
	c->token = token;
	c->next = *b;
	*b = c;
	return c;
}

CUresult exec_hostfn_params(struct exec *ex, uint64_t token, CUDA_HOST_NODE_PARAMS *p)
{
	struct exec_hostfn_call *c = call_persistent(ex, token);

	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->fn = hostfn_trampoline;
	p->userData = c;
	return CUDA_SUCCESS;
}

bool exec_hostfn_token_of(struct exec *ex, const CUDA_HOST_NODE_PARAMS *p, uint64_t *token)
{
	const struct exec_hostfn_call *c = p->userData;

	/* The backend hands back what we gave it; anything else is no node of ours. */
	if (p->fn != hostfn_trampoline || !c || !ex->host.fn || c->chan != ex->host.fn || c->oneshot)
		return false;
	*token = c->token;
	return true;
}

CUresult exec_hostfn_copy_params(struct exec *ex, uint64_t token, uint32_t host_end, uint64_t bytes,
				 CUDA_HOST_NODE_PARAMS *p, void **staging)
{
	struct exec_hostfn *h = hostfn_get(ex);
	struct exec_hostfn_copy **b, *c;
	CUresult res;

	if (!h)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if ((host_end != GRAPH_COPY_HOST_SRC && host_end != GRAPH_COPY_HOST_DST) || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	b = &h->copies[(token ^ token >> 17) % HOSTFN_BUCKETS];
	for (c = *b; c; c = c->next)
		if (c->token == token && c->host_end == host_end && c->bytes == bytes)
			goto found;
	/* Pinned memory the guest sized: within the session's pinned limit. */
	if (bytes > ex->host.bytes_max - ex->host.bytes || bytes > SIZE_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	{
		/* Made while a capture may be in progress (a captured copy),
		 * where the driver refuses pinned allocations in the stricter
		 * modes and invalidates the capture: the buffer is ours, not a
		 * call of the guest's. */
		CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;

		ex->be->cuThreadExchangeStreamCaptureMode(&mode);
		res = ex->be->cuMemHostAlloc(&c->staging, (size_t)bytes, 0);
		ex->be->cuThreadExchangeStreamCaptureMode(&mode);
	}
	if (res != CUDA_SUCCESS) {
		free(c);
		return res;
	}
	ex->host.bytes += bytes;
	c->chan = h;
	c->token = token;
	c->host_end = host_end;
	c->bytes = bytes;
	c->next = *b;
	*b = c;
found:
	p->fn = hostfn_copy_trampoline;
	p->userData = c;
	*staging = c->staging;
	return CUDA_SUCCESS;
}

bool exec_hostfn_copy_of(struct exec *ex, const CUDA_HOST_NODE_PARAMS *p, uint64_t *token, uint32_t *host_end,
			 uint64_t *bytes)
{
	const struct exec_hostfn_copy *c = p->userData;

	if (p->fn != hostfn_copy_trampoline || !c || !ex->host.fn || c->chan != ex->host.fn)
		return false;
	*token = c->token;
	*host_end = c->host_end;
	*bytes = c->bytes;
	return true;
}

/* ---- attaching the channel ---------------------------------------------- */

static void hostfn_install_locked(struct exec_hostfn *h, int fd, struct tls_conn *tls)
{
	h->fd = fd;
	h->tls = tls;
	h->broken = false;
	hostfn_signal_fd = fd;
	pthread_cond_broadcast(&h->attached);
}

static bool secret_equal(const uint8_t *a, const uint8_t *b)
{
	unsigned char diff = 0;

	for (size_t i = 0; i < HOSTFN_SECRET_SIZE; i++)
		diff |= (unsigned char)(a[i] ^ b[i]);
	return diff == 0;
}

/* Read exactly @n bytes within @timeout_ms. 0 or -errno. */
static int read_timed(int fd, uint8_t *buf, size_t n, int timeout_ms)
{
	size_t off = 0;

	while (off < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;
		int ret = poll(&pfd, 1, timeout_ms);

		if (ret < 0 && errno == EINTR)
			continue;
		if (ret <= 0)
			return ret < 0 ? -errno : -ETIMEDOUT;
		r = read(fd, buf + off, n - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EPIPE;
		off += (size_t)r;
	}
	return 0;
}

/* The secret on a tls:// callback connection @fd: the handshake first (the
 * session's certificates), then the secret inside, all within
 * HOSTFN_FD_TIMEOUT_MS. 0 with *@out, or -errno. */
static int tls_secret_read(struct exec_hostfn *h, int fd, uint8_t *got, struct tls_conn **out)
{
	struct timeval tv = { .tv_sec = HOSTFN_FD_TIMEOUT_MS / 1000, .tv_usec = HOSTFN_FD_TIMEOUT_MS % 1000 * 1000 };
	struct tls_conn *t;
	char err[256];
	int ret;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ret = tls_conn_open(h->tls_creds, fd, NULL, &t, err, sizeof(err));
	if (!ret) {
		ret = tls_conn_handshake(t, false, err, sizeof(err));
		if (ret)
			pr_warn("host-function channel: %s", err);
		else
			ret = tls_conn_recv_exact(t, got, HOSTFN_SECRET_SIZE);
		if (ret)
			tls_conn_close(t);
	} else {
		pr_warn("host-function channel: %s", err);
	}
	tv = (struct timeval){ 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (!ret)
		*out = t;
	return ret;
}

/* tcp: wait for the guest's callback connection; the first that proves the
 * secret is the channel. Others are closed. */
static void *hostfn_acceptor(void *arg)
{
	struct exec_hostfn *h = arg;
	uint64_t start = monotonic_ms();
	struct tls_conn *tls = NULL;
	int fd = -1;

	for (;;) {
		struct pollfd pfd = { .fd = h->listen_fd, .events = POLLIN };
		uint8_t got[HOSTFN_SECRET_SIZE];
		long left;
		int one = 1, ret;

		left = HOSTFN_CONNECT_TIMEOUT_MS - (long)(monotonic_ms() - start);
		if (left <= 0)
			break;
		ret = poll(&pfd, 1, (int)left);
		if (ret < 0 && errno == EINTR)
			continue;
		if (ret <= 0 || (pfd.revents & (POLLHUP | POLLERR | POLLNVAL)))
			break;
		fd = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		if (!(h->tls_creds ? tls_secret_read(h, fd, got, &tls) : read_timed(fd, got, sizeof(got),
											HOSTFN_FD_TIMEOUT_MS)) &&
		    secret_equal(got, h->secret)) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			break;
		}
		pr_warn("host-function channel: a connection without the secret: closed");
		tls_conn_close(tls);
		tls = NULL;
		close(fd);
		fd = -1;
	}
	pthread_mutex_lock(&h->lock);
	if (fd >= 0 && !h->closing && h->fd < 0) {
		hostfn_install_locked(h, fd, tls);
	} else if (fd >= 0) {
		tls_conn_close(tls);
		close(fd);
	}
	if (h->fd < 0)
		pr_warn("host-function channel: the guest did not connect back");
	h->waiting_tcp = false;
	pthread_cond_broadcast(&h->attached);
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

/* tcp: listen beside the session's connection, on the address the guest
 * reached; the reply names the port and the secret to prove. */
static CUresult attach_tcp(struct exec *ex, struct exec_hostfn *h, struct wire_host_func_attach_rep *rep)
{
	struct sockaddr_storage addr;
	socklen_t len = sizeof(addr);
	int fd;

	if (ex->host.conn_sock < 0 || getsockname(ex->host.conn_sock, (struct sockaddr *)&addr, &len) ||
	    (addr.ss_family != AF_INET && addr.ss_family != AF_INET6))
		return CUDA_ERROR_NOT_SUPPORTED;
	if (getrandom(h->secret, sizeof(h->secret), 0) != (ssize_t)sizeof(h->secret))
		return CUDA_ERROR_OPERATING_SYSTEM;
	if (addr.ss_family == AF_INET)
		((struct sockaddr_in *)&addr)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&addr)->sin6_port = 0;
	fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	len = addr.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	if (bind(fd, (struct sockaddr *)&addr, len) || listen(fd, 4) ||
	    getsockname(fd, (struct sockaddr *)&addr, &len)) {
		close(fd);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	h->listen_fd = fd;
	h->tls_creds = ex->host.tls;
	h->waiting_tcp = true;
	if (pthread_create(&h->acceptor, NULL, hostfn_acceptor, h)) {
		h->waiting_tcp = false;
		close(fd);
		h->listen_fd = -1;
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	h->acceptor_started = true;
	rep->port = ntohs(addr.ss_family == AF_INET ? ((struct sockaddr_in *)&addr)->sin_port
						    : ((struct sockaddr_in6 *)&addr)->sin6_port);
	rep->secret.ptr = h->secret;
	rep->secret.len = sizeof(h->secret);
	return CUDA_SUCCESS;
}

/* join: the guest opens a connection to ternd again; the reply holds the
 * secret it proves itself with there (exec_hostfn_join). */
static CUresult attach_join(struct exec_hostfn *h, struct wire_host_func_attach_rep *rep)
{
	if (getrandom(h->secret, sizeof(h->secret), 0) != (ssize_t)sizeof(h->secret))
		return CUDA_ERROR_OPERATING_SYSTEM;
	h->waiting_join = true;
	rep->port = 0;
	rep->secret.ptr = h->secret;
	rep->secret.len = sizeof(h->secret);
	return CUDA_SUCCESS;
}

CUresult exec_hostfn_join(struct exec *ex, int fd, const uint8_t *secret, size_t len)
{
	struct exec_hostfn *h = ex->host.fn;
	CUresult res = CUDA_ERROR_NOT_PERMITTED;

	if (!h)
		goto refuse;
	pthread_mutex_lock(&h->lock);
	if (h->waiting_join && h->fd < 0 && !h->closing && len == HOSTFN_SECRET_SIZE &&
	    secret_equal(secret, h->secret)) {
		/* Answered before it is installed: no RUN record can come first. */
		res = wire_status_send(fd, WIRE_CALL_HOST_FUNC_JOIN, 0, 0, CUDA_SUCCESS) ? CUDA_ERROR_UNKNOWN
											 : CUDA_SUCCESS;
		h->waiting_join = false;
		if (res == CUDA_SUCCESS)
			hostfn_install_locked(h, fd, NULL);
		else
			pthread_cond_broadcast(&h->attached);
	}
	pthread_mutex_unlock(&h->lock);
	if (res == CUDA_SUCCESS)
		return res;
refuse:
	pr_warn("host-function channel: a join %s: closed",
		res == CUDA_ERROR_NOT_PERMITTED ? "without the secret, or none awaited" : "that could not be answered");
	if (res == CUDA_ERROR_NOT_PERMITTED)
		wire_status_send(fd, WIRE_CALL_HOST_FUNC_JOIN, 0, WIRE_F_ERROR, (uint32_t)res);
	close(fd);
	return res;
}

static bool sock_is_unix(int fd)
{
	int domain = 0;
	socklen_t len = sizeof(domain);

	return fd >= 0 && !getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) && domain == AF_UNIX;
}

CUresult exec_host_func_attach(struct exec *ex, const struct wire_host_func_attach_req *req,
			       struct wire_host_func_attach_rep *rep)
{
	struct exec_hostfn *h;
	int fd = -1, type = 0, ret;
	socklen_t len = sizeof(type);
	CUresult res = CUDA_SUCCESS;

	if (req->mode == HOSTFN_ATTACH_FD) {
		if (!sock_is_unix(ex->host.conn_sock))
			return CUDA_ERROR_NOT_SUPPORTED;
		/* Taken first, whatever the answer: on the unix transport an
		 * unread descriptor would sit in the request stream. */
		ret = exec_host_fds_take(ex, ex->host.conn_sock, &fd, 1, HOSTFN_FD_TIMEOUT_MS);
		if (ret == -EPROTO) {
			/* Its byte came without the descriptor: a connection that
			 * carries none (a VM's, through its agent). The guest joins
			 * instead (HOSTFN_ATTACH_JOIN). */
			pr_info("host_func_attach: this connection carries no descriptor: the guest may join");
			return CUDA_ERROR_NOT_SUPPORTED;
		}
		if (ret) {
			pr_warn("host_func_attach: no socket from the guest (%s)", strerror(-ret));
			return CUDA_ERROR_INVALID_VALUE;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) || type != SOCK_STREAM) {
			close(fd);
			return CUDA_ERROR_INVALID_VALUE;
		}
	} else if (req->mode != HOSTFN_ATTACH_TCP && req->mode != HOSTFN_ATTACH_JOIN) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	h = hostfn_get(ex);
	if (!h) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&h->lock);
	/* One channel per session: the guest attaches once per worker. */
	if (h->fd >= 0 || h->waiting_tcp || h->waiting_join || h->acceptor_started)
		res = CUDA_ERROR_INVALID_VALUE;
	else if (fd >= 0)
		hostfn_install_locked(h, fd, NULL);
	else if (req->mode == HOSTFN_ATTACH_JOIN && ex->host.tls)
		res = CUDA_ERROR_NOT_SUPPORTED;     /* the supervisor refuses joins over TLS */
	else if (req->mode == HOSTFN_ATTACH_JOIN)
		res = attach_join(h, rep);
	else
		res = attach_tcp(ex, h, rep);
	pthread_mutex_unlock(&h->lock);
	if (res != CUDA_SUCCESS && fd >= 0)
		close(fd);
	return res;
}

/* ---- launches ----------------------------------------------------------- */

/* A host function (@callback: a stream callback) for @token on @stream. */
static CUresult host_enqueue(struct exec *ex, uint64_t stream, uint64_t token, bool callback)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	struct exec_hostfn_call *c;
	CUstream s;
	CUresult res = exec_stream_real(ex, stream, &s);

	if (res != CUDA_SUCCESS)
		return res;
	/* Captured, a host function becomes a host node the graph runs at
	 * every launch: its record must live as long as the session. (A
	 * callback cannot be captured: the backend refuses it.) */
	if (!callback && ex->be->cuStreamIsCapturing(s, &st) != CUDA_SUCCESS)
		st = CU_STREAM_CAPTURE_STATUS_NONE;
	c = st == CU_STREAM_CAPTURE_STATUS_NONE ? call_oneshot(ex, token) : call_persistent(ex, token);
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = callback ? ex->be->cuStreamAddCallback(s, hostfn_callback_trampoline, c, 0)
		       : ex->be->cuLaunchHostFunc(s, hostfn_trampoline, c);
	if (res != CUDA_SUCCESS && c->oneshot)
		free(c);
	return res;
}

CUresult exec_launch_host_func(struct exec *ex, const struct wire_launch_host_func_req *req,
			       struct wire_launch_host_func_rep *rep)
{
	(void)rep;
	return host_enqueue(ex, req->stream, req->token, false);
}

CUresult exec_stream_add_callback(struct exec *ex, const struct wire_stream_add_callback_req *req,
				  struct wire_stream_add_callback_rep *rep)
{
	(void)rep;
	if (req->flags)
		return CUDA_ERROR_INVALID_VALUE;
	return host_enqueue(ex, req->stream, req->token, true);
}

/* ---- session end -------------------------------------------------------- */

void exec_hostfn_shutdown(struct exec *ex)
{
	struct exec_hostfn *h = ex->host.fn;

	if (!h)
		return;
	/* Without the lock: a run may hold it while it waits for the guest,
	 * and this is what makes it return. */
	h->closing = true;
	hostfn_signal_fd = -1;
	if (h->fd >= 0)
		shutdown(h->fd, SHUT_RDWR);
	if (h->listen_fd >= 0)
		shutdown(h->listen_fd, SHUT_RDWR);
	pthread_mutex_lock(&h->lock);
	pthread_cond_broadcast(&h->attached);
	pthread_mutex_unlock(&h->lock);
}

void exec_hostfn_free(struct exec *ex)
{
	struct exec_hostfn *h = ex->host.fn;

	if (!h)
		return;
	exec_hostfn_shutdown(ex);
	if (h->acceptor_started)
		pthread_join(h->acceptor, NULL);
	tls_conn_close(h->tls);
	if (h->fd >= 0)
		close(h->fd);
	if (h->listen_fd >= 0)
		close(h->listen_fd);
	for (unsigned i = 0; i < HOSTFN_BUCKETS; i++)
		while (h->calls[i]) {
			struct exec_hostfn_call *c = h->calls[i];

			h->calls[i] = c->next;
			free(c);
		}
	for (unsigned i = 0; i < HOSTFN_BUCKETS; i++)
		while (h->copies[i]) {
			struct exec_hostfn_copy *c = h->copies[i];

			h->copies[i] = c->next;
			ex->be->cuMemFreeHost(c->staging);
			ex->host.bytes -= c->bytes;
			free(c);
		}
	pthread_cond_destroy(&h->attached);
	pthread_mutex_destroy(&h->lock);
	free(h);
	ex->host.fn = NULL;
}
