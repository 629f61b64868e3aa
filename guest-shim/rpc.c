/* The shim's process context and its one connection to ternd.
 *
 * Round trips are serialised by conn_lock: a request and its reply are one
 * critical section, so replies need no demultiplexing; a sequence number
 * and the echoed call id catch a peer that lost framing. A transport failure
 * marks the session lost: every later call fails with
 * CUDA_ERROR_DEVICE_UNAVAILABLE instead of talking to a worker that no longer
 * holds the app's objects.
 */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "transport.h"
#include "wire.h"

#define RPC_PROTOCOL 1u

static struct shim_process shim = {
	.conn_lock = PTHREAD_MUTEX_INITIALIZER,
	.cache_lock = PTHREAD_MUTEX_INITIALIZER,
	.fd = -1,
};
static pthread_once_t shim_once = PTHREAD_ONCE_INIT;

/* Per-thread reply buffer: valid until the thread's next round trip. */
static __thread uint8_t *reply_buf;
static __thread size_t reply_cap;
static pthread_key_t reply_key;

static void reply_buf_free(void *p)
{
	free(p);
}

static void token_load(struct shim_process *p)
{
	const char *tok = getenv("TERN_TOKEN");
	const char *path = getenv("TERN_TOKEN_FILE");

	p->token_len = 0;
	if (tok && *tok) {
		p->token_len = (uint32_t)strnlen(tok, sizeof(p->token));
		memcpy(p->token, tok, p->token_len);
	} else if (path && *path) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n;

		if (fd < 0) {
			pr_err("cannot open TERN_TOKEN_FILE %s: %s", path, strerror(errno));
			return;
		}
		n = read(fd, p->token, sizeof(p->token));
		close(fd);
		if (n < 0)
			n = 0;
		while (n > 0 && (p->token[n - 1] == '\n' || p->token[n - 1] == '\r'))
			n--;
		p->token_len = (uint32_t)n;
	}
}

static void atfork_prepare(void)
{
	pthread_mutex_lock(&shim.conn_lock);
	pthread_mutex_lock(&shim.cache_lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&shim.cache_lock);
	pthread_mutex_unlock(&shim.conn_lock);
}

/* The child shares the parent's socket: it must never write to it. Closing
 * its copy leaves the parent's connection intact. Handles of the parent's
 * session mean nothing to the child's new session, so caches go too. */
static void atfork_child(void)
{
	if (shim.fd >= 0)
		close(shim.fd);
	shim.fd = -1;
	shim.forked = true;
	shim.lost = false;
	shim.seq = 0;
	shim.arena_base = shim.arena_size = 0;
	func_table_reset(&shim);
	host_range_reset(&shim);
	device_cache_reset(&shim);
	ctx_table_reset(&shim);
	pthread_mutex_unlock(&shim.cache_lock);
	pthread_mutex_unlock(&shim.conn_lock);
}

static void shim_init_once(void)
{
	const char *level_text = getenv("TERN_LOG_LEVEL");
	const char *log_file = getenv("TERN_LOG_FILE");
	const char *server = getenv("TERN_SERVER");
	int level = LOG_WARN, fd = -1;

	if (level_text) {
		level = log_level_parse(level_text);
		if (level < 0)
			level = LOG_WARN;
	}
	if (log_file && *log_file) {
		fd = open(log_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
		/* Never fall back to stdout: stderr is the app's diagnostics channel. */
	}
	log_open("libcuda", (enum log_level)level, fd);
	if (log_file && *log_file && fd < 0)
		pr_err("cannot open TERN_LOG_FILE %s: %s", log_file, strerror(errno));
	snprintf(shim.server, sizeof(shim.server), "%s",
		 server && *server ? server : TRANSPORT_DEFAULT_URL);
	token_load(&shim);
	pthread_key_create(&reply_key, reply_buf_free);
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

struct shim_process *shim_process(void)
{
	pthread_once(&shim_once, shim_init_once);
	return &shim;
}

__attribute__((constructor)) static void shim_constructor(void)
{
	shim_process();
}

void shim_unimplemented_report(const char *name)
{
	shim_process();
	pr_warn("%s is not implemented by tern: returning CUDA_ERROR_NOT_SUPPORTED", name);
}

static void session_name(struct shim_process *p)
{
	const char *s = getenv("TERN_SESSION");
	char host[128] = "localhost";

	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = 0;
	if (s && *s) {
		/* A forked child must not resume its parent's session. */
		if (p->forked)
			snprintf(p->session, sizeof(p->session), "%s-%d", s, (int)getpid());
		else
			snprintf(p->session, sizeof(p->session), "%s", s);
	} else {
		snprintf(p->session, sizeof(p->session), "%s-%d", host, (int)getpid());
	}
}

static int reply_reserve(size_t n)
{
	uint8_t *b;

	if (n <= reply_cap)
		return 0;
	b = realloc(reply_buf, n);
	if (!b)
		return -ENOMEM;
	reply_buf = b;
	reply_cap = n;
	pthread_setspecific(reply_key, b);
	return 0;
}

static void conn_drop_locked(struct shim_process *p, const char *what, int err)
{
	pr_err("connection to ternd (%s, session %s) lost: %s: %s", p->server, p->session,
	       what, strerror(-err));
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	p->lost = true;
}

/* One request/reply exchange on the connection. The reply payload lands in
 * the thread's buffer; *@status is its CUresult. Returns 0 or -errno for a
 * transport or framing failure (the caller drops the connection), -EMSGSIZE
 * for a request too large to send (the connection stays up). */
static int conn_exchange_locked(struct shim_process *p, uint32_t id, struct wire_msg *req,
				struct wire_cursor *rep, CUresult *status)
{
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .call = id, .ctx = ctx_current() };
	struct wire_header rh;
	uint8_t hdr[WIRE_HEADER_SIZE];
	uint32_t st;
	int n, ret;

	if (req->failed)
		return -EMSGSIZE;
	h.seq = ++p->seq;
	n = wire_msg_finish(req, &h, iov);
	if (n < 0)
		return -EMSGSIZE;
	ret = wire_send(p->fd, iov, n);
	if (ret)
		return ret;
	ret = wire_recv_exact(p->fd, hdr, sizeof(hdr));
	if (ret)
		return ret;
	ret = wire_header_decode(hdr, &rh);
	if (ret)
		return -EPROTO;
	if (!(rh.flags & WIRE_F_REPLY) || rh.call != id || rh.seq != h.seq || rh.length < 4) {
		pr_err("reply out of step: call %u seq %llu flags %#x, expected call %u seq %llu",
		       rh.call, (unsigned long long)rh.seq, rh.flags, id,
		       (unsigned long long)h.seq);
		return -EPROTO;
	}
	ret = reply_reserve(rh.length);
	if (ret)
		return ret;
	ret = wire_recv_exact(p->fd, reply_buf, rh.length);
	if (ret)
		return ret;
	wire_cursor_init(rep, reply_buf, rh.length);
	if (wire_get_u32(rep, &st))
		return -EPROTO;
	*status = (CUresult)st;
	if (rh.flags & WIRE_F_ERROR) {
		pr_warn("ternd rejected %s: error %u", wire_call_name(id) ? wire_call_name(id) : "?", st);
		if (*status == CUDA_SUCCESS)
			*status = CUDA_ERROR_UNKNOWN;
	}
	return 0;
}

static CUresult conn_open_locked(struct shim_process *p)
{
	struct transport_url url;
	struct wire_hello_req req = { .protocol = RPC_PROTOCOL };
	struct wire_hello_rep rep;
	struct wire_cursor cur;
	struct wire_msg m;
	char host[256] = "";
	CUresult status = CUDA_ERROR_UNKNOWN;
	int fd, ret;

	if (transport_url_parse(p->server, &url)) {
		pr_err("TERN_SERVER '%s' is not a transport URL", p->server);
		return CUDA_ERROR_NO_DEVICE;
	}
	if (transport_url_needs_token(&url) && !p->token_len)
		pr_warn("%s needs a token (TERN_TOKEN or TERN_TOKEN_FILE) and none is set", p->server);
	fd = transport_connect(&url);
	if (fd < 0) {
		pr_err("cannot reach ternd at %s: %s", p->server, strerror(-fd));
		return CUDA_ERROR_NO_DEVICE;
	}
	p->fd = fd;
	p->owner = getpid();
	p->seq = 0;
	session_name(p);
	gethostname(host, sizeof(host) - 1);
	snprintf(req.session, sizeof(req.session), "%s", p->session);
	snprintf(req.host, sizeof(req.host), "%s", host);
	req.token.ptr = (const uint8_t *)p->token;
	req.token.len = p->token_len;
	req.pid = (uint32_t)getpid();

	wire_msg_init(&m);
	wire_hello_req_encode(&m, &req);
	ret = conn_exchange_locked(p, WIRE_CALL_HELLO, &m, &cur, &status);
	wire_msg_release(&m);
	if (!ret && status == CUDA_SUCCESS && wire_hello_rep_decode(&cur, &rep))
		ret = -EPROTO;
	if (ret) {
		pr_err("hello to ternd at %s failed: %s", p->server, strerror(-ret));
		goto out_close;
	}
	if (status != CUDA_SUCCESS) {
		pr_err("ternd at %s refused session %s: CUresult %d", p->server, p->session, status);
		goto out_close;
	}
	p->arena_base = rep.arena_base;
	p->arena_size = rep.arena_size;
	p->quota = rep.quota;
	p->worker_pid = rep.worker_pid;
	pr_info("session %s on %s: worker %u, arena %#llx+%#llx, quota %llu", p->session,
		p->server, rep.worker_pid, (unsigned long long)rep.arena_base,
		(unsigned long long)rep.arena_size, (unsigned long long)rep.quota);
	return CUDA_SUCCESS;

out_close:
	close(fd);
	p->fd = -1;
	return status != CUDA_SUCCESS ? status : CUDA_ERROR_NO_DEVICE;
}

static CUresult conn_ready_locked(struct shim_process *p)
{
	if (p->lost)
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	if (p->fd >= 0)
		return CUDA_SUCCESS;
	return conn_open_locked(p);
}

CUresult rpc_connect(void)
{
	struct shim_process *p = shim_process();
	CUresult res;

	pthread_mutex_lock(&p->conn_lock);
	res = conn_ready_locked(p);
	pthread_mutex_unlock(&p->conn_lock);
	return res;
}

CUresult rpc_call(uint32_t id, struct wire_msg *req, struct wire_cursor *rep)
{
	struct shim_process *p = shim_process();
	CUresult status = CUDA_ERROR_UNKNOWN;
	int ret;

	pthread_mutex_lock(&p->conn_lock);
	status = conn_ready_locked(p);
	if (status != CUDA_SUCCESS)
		goto out_unlock;
	ret = conn_exchange_locked(p, id, req, rep, &status);
	if (ret == -EMSGSIZE) {
		pr_warn("%s: request too large for the wire", wire_call_name(id));
		status = CUDA_ERROR_INVALID_VALUE;
	} else if (ret) {
		conn_drop_locked(p, wire_call_name(id) ? wire_call_name(id) : "call", ret);
		status = CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
out_unlock:
	pthread_mutex_unlock(&p->conn_lock);
	return status;
}

bool rpc_arena_contains(uint64_t addr, uint64_t len)
{
	struct shim_process *p = shim_process();
	uint64_t base = __atomic_load_n(&p->arena_base, __ATOMIC_RELAXED);
	uint64_t size = __atomic_load_n(&p->arena_size, __ATOMIC_RELAXED);

	if (!size || addr < base)
		return false;
	return addr - base < size && len <= size - (addr - base);
}
