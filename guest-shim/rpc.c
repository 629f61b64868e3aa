/* The shim's process context and its one connection to ternd.
 *
 * Many threads share the connection. Sends are serialised by conn_lock; a
 * thread that waits for its reply does not hold it, so other threads send
 * meanwhile. One waiting thread at a time is the reader: it reads replies
 * (without the lock) and hands each to the round trip of its sequence number
 * (struct shim_pending), until its own comes; then another waiter takes
 * over. A lone thread reads its own reply, with no handover. The worker may
 * answer a `wait` call (a synchronisation) after requests that came later
 * (docs/wire-protocol.md, "Waiting calls"); every other reply comes in
 * request order. The echoed call id catches a peer that lost framing.
 *
 * Session continuity: when the connection breaks, the shim reconnects under
 * the same session id. If ternd restored the session from a snapshot taken
 * at request R, the shim sends again, in order, every request after R (kept
 * in the replay log since the latest durable snapshot) and then the one in
 * flight, so the app sees each call applied exactly once. If the session
 * came back empty, or the log no longer reaches back to R, the session is
 * lost: every later call fails with CUDA_ERROR_DEVICE_UNAVAILABLE instead of
 * talking to a worker that does not hold the app's objects.
 */
#define LOG_PREFIX "shim: "

#include "shim.h"
#include "monotonic.h"
#include "rpc_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hostfn_chan.h"
#include "log.h"
#include "transport.h"
#include "wire.h"

#include <sys/socket.h>

#define REPLAY_MAX_DEFAULT (256ull << 20)
#define RECONNECT_MS_DEFAULT 60000

/* A round trip waiting for its reply: on the waiting thread's stack, and
 * in shim.pending while it is sent. The reader fills it. */
struct shim_pending {
	struct shim_pending *next;
	uint64_t seq;
	uint32_t call;
	bool done;
	uint16_t flags;
	uint8_t *buf;                   /* the reply's payload; the thread's reply buffer */
	size_t len, cap;
};

static struct shim_process shim = {
	.conn_lock = PTHREAD_MUTEX_INITIALIZER,
	.reply_cond = PTHREAD_COND_INITIALIZER,
	.cache.lock = PTHREAD_MUTEX_INITIALIZER,
	.batching.cond = PTHREAD_COND_INITIALIZER,
	.hostfn.lock = PTHREAD_MUTEX_INITIALIZER,
	.staging.lock = PTHREAD_MUTEX_INITIALIZER,
	.conn.fd = -1,
	.hostfn.fd = -1,
	.staging.memfd = -1,
};

/* A batch goes out when it holds this much, or this many requests, or has
 * waited this long: launches stay cheap and still start promptly. */
#define BATCH_BYTES_MAX (256u << 10)
#define BATCH_COUNT_MAX 512u
#define BATCH_DELAY_NS 200000ull
static pthread_once_t shim_once = PTHREAD_ONCE_INIT;

/* Per-thread reply buffer: valid until the thread's next round trip. */
static __thread uint8_t *reply_buf;
static __thread size_t reply_cap;
static pthread_key_t reply_key;
/* The request of the thread's latest round trip that got a reply. */
static __thread uint64_t trip_seq;

static void reply_buf_free(void *p)
{
	free(p);
}

/* A token that breaks the rules (common/auth.h) is not used: the hello then
 * fails on listeners that need one, with this said in the log. */
static void token_load(struct shim_process *p)
{
	const char *tok = getenv("TERN_TOKEN");
	const char *path = getenv("TERN_TOKEN_FILE");
	const char *why;
	char err[512];

	p->who.token.len = 0;
	if (tok && *tok) {
		if (auth_token_parse((const uint8_t *)tok, strlen(tok), &p->who.token, &why))
			pr_err("TERN_TOKEN %s: not used", why);
	} else if (path && *path) {
		if (auth_token_file_read(path, &p->who.token, err, sizeof(err)))
			pr_err("TERN_TOKEN_FILE: %s: not used", err);
	}
}

static void conn_close_locked(struct shim_process *p);

/* Every lock of the shim, in the order its code nests them (shim.h): a
 * managed mirror's coherence makes round trips under managed_lock, a
 * registered mirror's under registered_lock; the
 * last three are leaves, held by code that takes no other lock. */
static void atfork_prepare(void)
{
	registered_fork_lock();
	context_fork_lock();
	managed_fork_lock();
	pthread_mutex_lock(&shim.staging.lock);
	pthread_mutex_lock(&shim.conn_lock);
	pthread_mutex_lock(&shim.cache.lock);
	pthread_mutex_lock(&shim.hostfn.lock);
	capture_fork_lock();
	graph_exec_fork_lock();
	export_table_fork_lock();
}

static void atfork_unlock(void)
{
	export_table_fork_unlock();
	graph_exec_fork_unlock();
	capture_fork_unlock();
	pthread_mutex_unlock(&shim.hostfn.lock);
	pthread_mutex_unlock(&shim.cache.lock);
	pthread_mutex_unlock(&shim.conn_lock);
	pthread_mutex_unlock(&shim.staging.lock);
	managed_fork_unlock();
	context_fork_unlock();
	registered_fork_unlock();
}

static void atfork_parent(void)
{
	atfork_unlock();
}

/* The child shares the parent's socket: it must never write to it. Closing
 * its copy leaves the parent's connection intact. Handles of the parent's
 * session mean nothing to the child's new session, so caches go too. */
static void atfork_child(void)
{
	/* The rings and the socket are the parent's: drop our copies only. The
	 * parent's other threads and their round trips stayed there. Its TLS
	 * session too: its reader may have been inside it at the fork, so our
	 * copy is left as it is rather than freed. */
	shim.conn.tls = NULL;
	conn_close_locked(&shim);
	shim.pending = NULL;
	shim.reading = false;
	shim.broken = false;
	pthread_cond_init(&shim.reply_cond, NULL);
	shim.forked = true;
	shim.connected_before = false;
	shim.lost = false;
	shim.seq = 0;
	shim.granted.arena_base = shim.granted.arena_size = 0;
	/* The child's session is a new one: the parent's replay log is not its history. */
	replay_ring_clear(&shim.replay.ring);
	shim.replay.durable_seq = shim.replay.resume_seq = shim.replay.gap = 0;
	shim.replay.snapshot_held = false;
	completion_forget_locked(&shim);
	/* The parent's credential is the parent's session's. */
	explicit_bzero(shim.who.credential, sizeof(shim.who.credential));
	shim.who.has_credential = false;
	shim.worker_capture_mode = 0;   /* a new session's worker starts in global mode */
	/* The callback thread stayed in the parent; its socket is the parent's. */
	if (shim.hostfn.fd >= 0)
		close(shim.hostfn.fd);
	shim.hostfn.fd = -1;
	shim.hostfn.wanted = false;
	/* The flusher thread stayed in the parent; the parent's batch is its own. */
	shim.batching.flusher_running = false;
	shim.batching.len = 0;
	shim.batching.count = 0;
	pthread_cond_init(&shim.batching.cond, NULL);
	func_table_reset(&shim);
	lookup_table_reset(&shim);
	host_range_reset(&shim);
	device_cache_reset(&shim);
	ctx_table_reset(&shim);
	uobj_reset(&shim);
	capture_reset();
	managed_reset();
	registered_reset();
	staging_reset(&shim);
	atfork_unlock();
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
	snprintf(shim.who.server, sizeof(shim.who.server), "%s",
		 server && *server ? server : TRANSPORT_DEFAULT_URL);
	token_load(&shim);
	replay_ring_init(&shim.replay.ring, getenv("TERN_REPLAY_MAX") ? strtoull(getenv("TERN_REPLAY_MAX"), NULL, 0)
								   : REPLAY_MAX_DEFAULT);
	shim.reconnect_ms = getenv("TERN_RECONNECT_TIMEOUT_MS") ? atoi(getenv("TERN_RECONNECT_TIMEOUT_MS"))
								 : RECONNECT_MS_DEFAULT;
	shim.batching.lazy = !getenv("TERN_LAZY") || strcmp(getenv("TERN_LAZY"), "0");
	stats_configure(getenv("TERN_STATS"));
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

CUresult shim_refused(atomic_flag *said, const char *fmt, ...)
{
	char why[512];
	va_list ap;

	if (atomic_flag_test_and_set(said))
		return CUDA_ERROR_NOT_SUPPORTED;
	shim_process();         /* the log is open */
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	pr_info("refused without asking the worker (CUDA_ERROR_NOT_SUPPORTED): %s", why);
	return CUDA_ERROR_NOT_SUPPORTED;
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
			snprintf(p->who.session, sizeof(p->who.session), "%s-%d", s, (int)getpid());
		else
			snprintf(p->who.session, sizeof(p->who.session), "%s", s);
	} else {
		snprintf(p->who.session, sizeof(p->who.session), "%s-%d", host, (int)getpid());
	}
}

static __thread uint64_t ctx_stand_in;

uint64_t rpc_ctx_stand_in(uint64_t ctx)
{
	uint64_t old = ctx_stand_in;

	ctx_stand_in = ctx;
	return old;
}

uint64_t rpc_header_ctx(void)
{
	uint64_t ctx = ctx_current();

	return ctx ? ctx : ctx_stand_in;
}

void rpc_reply_stash(struct rpc_reply_stash *s)
{
	s->buf = reply_buf;
	s->cap = reply_cap;
	reply_buf = NULL;
	reply_cap = 0;
}

void rpc_reply_unstash(struct rpc_reply_stash *s)
{
	free(reply_buf);
	reply_buf = s->buf;
	reply_cap = s->cap;
	pthread_setspecific(reply_key, reply_buf);
}

/* A failed send marks the connection broken and wakes the reader, which
 * reconnects; nothing more is sent on it. */
static int conn_send_locked(struct shim_process *p, struct iovec *iov, int niov)
{
	int ret;

	if (p->broken)
		return -EPIPE;
	if (p->conn.shm_on)
		ret = shm_chan_send(&p->conn.shm, iov, niov);
	else
		ret = p->conn.tls ? tls_conn_send(p->conn.tls, iov, niov) : wire_send(p->conn.fd, iov, niov);
	if (ret && p->conn.fd >= 0) {
		p->broken = true;
		shutdown(p->conn.fd, SHUT_RDWR);
	}
	return ret;
}

/* Called by the reader, with or without conn_lock: only the reader reads,
 * and only the reader closes the connection. */
static int conn_recv(struct shim_process *p, void *buf, size_t n)
{
	if (p->conn.shm_on)
		return shm_chan_recv(&p->conn.shm, buf, n);
	return p->conn.tls ? tls_conn_recv_exact(p->conn.tls, buf, n) : wire_recv_exact(p->conn.fd, buf, n);
}

static int conn_discard(struct shim_process *p, uint64_t n)
{
	if (p->conn.shm_on)
		return shm_chan_discard(&p->conn.shm, n);
	return p->conn.tls ? tls_conn_recv_discard(p->conn.tls, n) : wire_recv_discard(p->conn.fd, n);
}

static void conn_close_locked(struct shim_process *p)
{
	if (p->conn.shm_on)
		shm_chan_close(&p->conn.shm);
	p->conn.shm_on = false;
	p->conn.ivshmem_on = false;
	tls_conn_close(p->conn.tls);
	p->conn.tls = NULL;
	if (p->conn.fd >= 0)
		close(p->conn.fd);
	p->conn.fd = -1;
	p->broken = false;
	/* The worker's end goes with it: the callback thread sees the end. */
	p->hostfn.attached = false;
	p->staging.attached = false;
}

static void conn_drop_locked(struct shim_process *p, const char *what, int err)
{
	pr_err("connection to ternd (%s, session %s) lost: %s: %s", p->who.server, p->who.session,
	       what, strerror(-err));
	conn_close_locked(p);
	p->lost = true;
}

static struct shim_pending *pending_find(struct shim_process *p, struct shim_pending *want,
					 uint64_t seq, uint32_t call)
{
	if (want && want->seq == seq && want->call == call)
		return want;
	if (!seq)
		return NULL;            /* session plumbing: only the one asked for */
	for (struct shim_pending *e = p->pending; e; e = e->next)
		if (e->seq == seq && e->call == call)
			return e;
	return NULL;
}

static void pending_remove(struct shim_process *p, struct shim_pending *me)
{
	for (struct shim_pending **link = &p->pending; *link; link = &(*link)->next)
		if (*link == me) {
			*link = me->next;
			return;
		}
}

/* A round trip of this thread: its reply lands in the thread's buffer. */
static void pending_init(struct shim_pending *me, uint64_t seq, uint32_t call)
{
	*me = (struct shim_pending){ .seq = seq, .call = call, .buf = reply_buf, .cap = reply_cap };
	reply_buf = NULL;
	reply_cap = 0;
}

/* The thread takes its buffer back, the reply in it: *@rep and *@status
 * are the reply's. 0, or -EPROTO for a reply without a status. */
static int pending_adopt(struct shim_pending *me, struct wire_cursor *rep, CUresult *status)
{
	uint32_t st;

	reply_buf = me->buf;
	reply_cap = me->cap;
	pthread_setspecific(reply_key, reply_buf);
	if (!rep)
		return 0;
	if (!me->done)
		return -EPIPE;
	wire_cursor_init(rep, reply_buf, me->len);
	if (wire_get_u32(rep, &st))
		return -EPROTO;
	*status = (CUresult)st;
	if (me->flags & WIRE_F_ERROR) {
		pr_warn("ternd rejected %s: error %u", wire_call_name(me->call) ? wire_call_name(me->call) : "?", st);
		if (*status == CUDA_SUCCESS)
			*status = CUDA_ERROR_UNKNOWN;
	}
	return 0;
}

/* The reader reads one reply and hands it to its round trip: @want, or one
 * in p->pending; a reply nobody waits for (of a request replayed after a
 * reconnect, answered before) is dropped. With @unlocked the lock is let go
 * while it blocks, so that other threads send meanwhile. Returns 0 or -errno
 * for a transport or framing failure. */
static int reply_next_locked(struct shim_process *p, struct shim_pending *want, bool unlocked)
{
	struct shim_pending *to;
	struct wire_header rh;
	uint8_t hdr[WIRE_HEADER_SIZE];
	int ret;

	if (unlocked)
		pthread_mutex_unlock(&p->conn_lock);
	ret = conn_recv(p, hdr, sizeof(hdr));
	if (unlocked)
		pthread_mutex_lock(&p->conn_lock);
	if (ret)
		return ret;
	if (wire_header_decode(hdr, &rh))
		return -EPROTO;
	to = pending_find(p, want, rh.seq, rh.call);
	if (!(rh.flags & WIRE_F_REPLY) || rh.length < 4 || (!to && !rh.seq)) {
		pr_err("reply out of step: call %u seq %llu flags %#x", rh.call, (unsigned long long)rh.seq,
		       rh.flags);
		return -EPROTO;
	}
	if (rh.ctx > p->replay.durable_seq)
		p->replay.durable_seq = rh.ctx;
	if (rh.seq && rh.ctx < rh.seq)
		p->replay.snapshot_held = true;
	if (to && rh.length > to->cap) {
		uint8_t *b = realloc(to->buf, rh.length);

		if (!b)
			return -ENOMEM;
		to->buf = b;
		to->cap = rh.length;
	}
	if (unlocked)
		pthread_mutex_unlock(&p->conn_lock);
	ret = to ? conn_recv(p, to->buf, rh.length) : conn_discard(p, rh.length);
	if (unlocked)
		pthread_mutex_lock(&p->conn_lock);
	if (ret || !to)
		return ret;
	to->len = rh.length;
	to->flags = rh.flags;
	to->done = true;
	if (to != want)
		pthread_cond_broadcast(&p->reply_cond);
	return 0;
}

/* Read, holding the lock, until @want's reply came (the connection's
 * plumbing and the replay after a reconnect: nothing else is sent then). */
static int reply_until_locked(struct shim_process *p, struct shim_pending *want)
{
	int ret = 0;

	while (!want->done && !ret)
		ret = reply_next_locked(p, want, false);
	return ret;
}

int reply_read_locked(struct shim_process *p, uint32_t id, uint64_t seq,
		      struct wire_cursor *rep, CUresult *status)
{
	struct shim_pending me;
	int ret;

	pending_init(&me, seq, id);
	ret = reply_until_locked(p, &me);
	if (ret) {
		pending_adopt(&me, NULL, status);
		return ret;
	}
	return pending_adopt(&me, rep, status);
}

int conn_exchange_locked(struct shim_process *p, uint32_t id, uint64_t seq, struct wire_msg *req,
			 struct iovec *iov, int *niov, struct wire_cursor *rep, CUresult *status)
{
	struct wire_header h = { .call = id, .ctx = rpc_header_ctx(), .seq = seq };
	struct iovec sent[WIRE_MSG_IOV_MAX + 1];
	int ret, n = 0;

	if (req->failed)
		return -EMSGSIZE;
	*niov = wire_msg_finish(req, &h, iov);
	if (*niov < 0)
		return -EMSGSIZE;
	/* Deferred requests go first, in the same write. wire_send consumes its
	 * iovec array; ours is kept for the replay log. */
	if (p->batching.len) {
		sent[n].iov_base = p->batching.buf;
		sent[n++].iov_len = p->batching.len;
	}
	memcpy(sent + n, iov, sizeof(*iov) * (size_t)*niov);
	ret = conn_send_locked(p, sent, n + *niov);
	if (p->batching.len) {
		p->stats.batches++;
		p->batching.len = 0;
		p->batching.count = 0;
	}
	if (ret)
		return ret;
	return reply_read_locked(p, id, seq, rep, status);
}

static bool pending_has(const struct shim_process *p, uint64_t seq)
{
	for (const struct shim_pending *e = p->pending; e; e = e->next)
		if (e->seq == seq)
			return true;
	return false;
}

/* replay_ring's test of a request still waiting for its reply (another
 * thread's synchronisation): kept, to be sent again after a restore. */
static bool replay_waiting(uint64_t seq, void *p)
{
	return pending_has(p, seq);
}

static void replay_append_locked(struct shim_process *p, uint32_t id, uint64_t seq, bool no_reply,
				 const struct iovec *iov, int niov)
{
	uint64_t lost;

	if (seq <= p->replay.durable_seq)
		return;                 /* answered already, and no restore can need it */
	/* Its bytes are in a staging slot the next piece overwrites, not in the
	 * request: a restore before it cannot bring them back (staging.c). */
	if (id == WIRE_CALL_MEMCPY_HTOD_SLOT) {
		p->replay.gap = seq;
		return;
	}
	lost = replay_ring_append(&p->replay.ring, &(struct replay_request){
		.seq = seq, .call = id, .no_reply = no_reply, .iov = iov, .niov = niov,
	}, p->replay.durable_seq, replay_waiting, p);
	if (lost)
		p->replay.gap = lost;   /* a restore before it cannot continue */
}

static void batch_flush_locked(struct shim_process *p);
static CUresult conn_ready_locked(struct shim_process *p);
static void reader_enter_locked(struct shim_process *p, const struct shim_pending *me);
static void reader_leave_locked(struct shim_process *p);

/* Ask this connection's worker for a host-function channel of @mode, outside
 * the request sequence (sequence number 0, like the buffers shared again
 * after a restore); @pass (or -1) follows the request on the socket. The
 * reply's secret and port (tcp and join) land in @secret and *@port.
 * 0, -EOPNOTSUPP when the worker cannot do @mode, or -errno. */
static int hostfn_ask_locked(struct shim_process *p, uint32_t mode, int pass, uint8_t secret[HOSTFN_SECRET_SIZE],
			     uint32_t *port)
{
	struct wire_host_func_attach_req req = { .mode = mode };
	struct wire_host_func_attach_rep rep;
	struct wire_header h = { .call = WIRE_CALL_HOST_FUNC_ATTACH };
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_cursor cur;
	struct wire_msg m;
	CUresult status = CUDA_ERROR_UNKNOWN;
	int niov, ret;

	batch_flush_locked(p);
	wire_msg_init(&m);
	wire_host_func_attach_req_encode(&m, &req);
	niov = wire_msg_finish(&m, &h, iov);
	ret = niov < 0 ? niov : conn_send_locked(p, iov, niov);
	wire_msg_release(&m);
	/* The socket after the request: the worker reads the request first. */
	if (!ret && pass >= 0)
		ret = shm_fds_send(p->conn.fd, &pass, 1);
	if (!ret)
		ret = reply_read_locked(p, WIRE_CALL_HOST_FUNC_ATTACH, 0, &cur, &status);
	if (!ret && status != CUDA_SUCCESS)
		ret = status == CUDA_ERROR_NOT_SUPPORTED ? -EOPNOTSUPP : -EPROTO;
	if (!ret && mode != HOSTFN_ATTACH_FD) {
		if (wire_host_func_attach_rep_decode(&cur, &rep) || rep.secret.len != HOSTFN_SECRET_SIZE ||
		    (mode == HOSTFN_ATTACH_TCP && (!rep.port || rep.port > 65535)))
			return -EPROTO;
		memcpy(secret, rep.secret.ptr, HOSTFN_SECRET_SIZE);
		*port = rep.port;
	}
	return ret;
}

/* How long a TLS handshake may take: a server that never answers must not
 * hang the application. */
#define TLS_HANDSHAKE_TIMEOUT_S 10

/* TLS over @fd, a new connection to @url (the session's, or its callback
 * connection), into *@out: ternd's certificate is checked against
 * TERN_TLS_CA (else the system's CAs) and @url's host; TERN_TLS_CERT and
 * TERN_TLS_KEY are ours, for a ternd that asks. A certificate that does not
 * verify is final, as a refused hello is. conn_lock held. */
static CUresult tls_start(struct shim_process *p, const struct transport_url *url, int fd,
			  struct tls_conn **out)
{
	char err[512];
	int ret;

	if (!p->conn.tls_creds) {
		ret = tls_client_creds_open(NULL, &p->conn.tls_creds, err, sizeof(err));
		if (ret) {
			pr_err("TLS to ternd at %s: %s", p->who.server, err);
			return ret == -ENOTSUP ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_PERMITTED;
		}
	}
	ret = tls_conn_start(p->conn.tls_creds, fd, url->host, TLS_HANDSHAKE_TIMEOUT_S, out, err, sizeof(err));
	if (!ret) {
		tls_conn_describe(*out, err, sizeof(err));
		pr_info("ternd at %s (port %u): over TLS, its certificate verified: %s", p->who.server, url->port, err);
		return CUDA_SUCCESS;
	}
	pr_err("TLS to ternd at %s: %s%s", p->who.server, err,
	       ret == -EPROTONOSUPPORT ? " (a plaintext listener: use tcp://, or give ternd --listen tls://)" : "");
	/* A wrong certificate or protocol stays wrong: no retrying. */
	return ret == -EACCES || ret == -EPROTONOSUPPORT ? CUDA_ERROR_NOT_PERMITTED : CUDA_ERROR_NO_DEVICE;
}

/* A second connection to ternd at @url whose first message is
 * host_func_join (hostfn_chan.h); its socket once the worker answered yes,
 * or -errno (-EACCES: refused). */
static int hostfn_join(struct shim_process *p, const struct transport_url *url,
		       const uint8_t secret[HOSTFN_SECRET_SIZE])
{
	struct wire_host_func_join_req req = { .secret = { secret, HOSTFN_SECRET_SIZE } };
	struct wire_header h = { .call = WIRE_CALL_HOST_FUNC_JOIN }, rh;
	struct timeval tv = { .tv_sec = 10 };
	uint8_t raw[WIRE_HEADER_SIZE + 4];
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_msg m;
	int fd, niov, ret;

	snprintf(req.session, sizeof(req.session), "%s", p->who.session);
	fd = transport_connect(url);
	if (fd < 0)
		return fd;
	/* A worker that never answers must not hang the guest. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	wire_msg_init(&m);
	wire_host_func_join_req_encode(&m, &req);
	niov = wire_msg_finish(&m, &h, iov);
	ret = niov < 0 ? niov : wire_send(fd, iov, niov);
	wire_msg_release(&m);
	if (!ret)
		ret = wire_recv_exact(fd, raw, sizeof(raw));
	if (!ret && (wire_header_decode(raw, &rh) || rh.call != WIRE_CALL_HOST_FUNC_JOIN ||
		     !(rh.flags & WIRE_F_REPLY) || rh.length != 4))
		ret = -EPROTO;
	if (!ret && le32_get(raw + WIRE_HEADER_SIZE) != CUDA_SUCCESS) {
		pr_err("host functions: ternd refused the channel's join: CUresult %u",
		       le32_get(raw + WIRE_HEADER_SIZE));
		ret = -EACCES;
	}
	if (ret) {
		close(fd);
		return ret;
	}
	tv.tv_sec = 0;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Open the host-function channel to this connection's worker: over unix and
 * shm one end of a socketpair follows the request on the socket; over tcp
 * we connect to the port the worker answers and prove ourselves with its
 * secret; where no descriptor can cross (a VM's channel, or a unix socket
 * that is the guest agent's: the worker answers "not supported" to the
 * descriptor) we connect to ternd again and join with the secret.
 * 0 or -errno. */
static int hostfn_attach_locked(struct shim_process *p)
{
	uint8_t secret[HOSTFN_SECRET_SIZE];
	struct transport_url url;
	struct tls_conn *tls = NULL;
	uint32_t port = 0;
	int sv[2] = { -1, -1 }, ours = -1, ret;

	if (transport_url_parse(p->who.server, &url))
		return -EINVAL;
	if (transport_url_is_tcp(&url)) {
		ret = hostfn_ask_locked(p, HOSTFN_ATTACH_TCP, -1, secret, &port);
		if (!ret) {
			url.port = port;
			ours = transport_connect(&url);
			ret = ours < 0 ? ours : 0;
			/* tls://: the callback connection is verified as the session's was. */
			if (!ret && url.kind == TRANSPORT_TLS)
				ret = tls_start(p, &url, ours, &tls) == CUDA_SUCCESS ? 0 : -EACCES;
			if (!ret && tls)
				ret = tls_conn_send(tls, &(struct iovec){ secret, sizeof(secret) }, 1);
			else if (!ret && send(ours, secret, sizeof(secret), MSG_NOSIGNAL) != (ssize_t)sizeof(secret))
				ret = -EIO;
		}
	} else {
		ret = -EOPNOTSUPP;
		/* On ivshmem the stream carries doorbells, which the worker
		 * drains: a descriptor's byte would be lost among them (and a
		 * domain's stream carries none anyway). */
		if ((url.kind == TRANSPORT_UNIX || url.kind == TRANSPORT_SHM) && !p->conn.ivshmem_on) {
			if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
				return -errno;
			ret = hostfn_ask_locked(p, HOSTFN_ATTACH_FD, sv[1], secret, &port);
			close(sv[1]);
			ours = sv[0];
			if (ret) {
				close(ours);
				ours = -1;
			}
		}
		if (ret == -EOPNOTSUPP) {
			ret = hostfn_ask_locked(p, HOSTFN_ATTACH_JOIN, -1, secret, &port);
			if (!ret) {
				ours = hostfn_join(p, &url, secret);
				ret = ours < 0 ? ours : 0;
			}
		}
	}
	explicit_bzero(secret, sizeof(secret));
	if (!ret)
		ret = hostfn_thread_start(ours, tls);
	if (ret) {
		tls_conn_close(tls);
		if (ours >= 0)
			close(ours);
		return ret;
	}
	p->hostfn.fd = ours;
	p->hostfn.attached = true;
	return 0;
}

CUresult rpc_staging_ready(void)
{
	struct shim_process *p = shim_process();
	CUresult res;
	int ret;

	pthread_mutex_lock(&p->conn_lock);
	res = conn_ready_locked(p);
	/* Only where the worker can map our memfd. */
	if (res == CUDA_SUCCESS && (!p->conn.shm_on || p->conn.ivshmem_on))
		res = CUDA_ERROR_NOT_SUPPORTED;
	if (res == CUDA_SUCCESS && !p->staging.attached) {
		/* Its reply is read here: no other thread may read meanwhile. */
		reader_enter_locked(p, NULL);
		ret = staging_attach_locked(p);
		reader_leave_locked(p);
		if (ret) {
			pr_warn("no staging for pageable copies (%s): they go through the rings", strerror(-ret));
			p->staging.unavailable = true;
			res = CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	pthread_mutex_unlock(&p->conn_lock);
	return res;
}

CUresult rpc_hostfn_ready(void)
{
	struct shim_process *p = shim_process();
	CUresult res;
	int ret;

	pthread_mutex_lock(&p->conn_lock);
	res = conn_ready_locked(p);
	if (res == CUDA_SUCCESS && !p->hostfn.attached) {
		/* Its reply is read here: no other thread may read meanwhile. */
		reader_enter_locked(p, NULL);
		ret = hostfn_attach_locked(p);
		reader_leave_locked(p);
		if (ret) {
			pr_err("host functions: no callback channel to ternd at %s: %s", p->who.server,
			       strerror(-ret));
			res = ret == -EOPNOTSUPP ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_UNKNOWN;
		} else {
			p->hostfn.wanted = true;
		}
	}
	pthread_mutex_unlock(&p->conn_lock);
	return res;
}

/* The session moved to another ternd (a live migration): believe where the
 * reply says only if it proves the session's credential, which only our
 * ternd and the destination hold (common/auth.h, auth_moved_proof). Then
 * the next hello goes there: CUDA_ERROR_NO_DEVICE makes the caller retry. */
static CUresult moved_follow_locked(struct shim_process *p, struct wire_cursor *cur,
				    const uint8_t nonce[AUTH_NONCE_BYTES], const char *session)
{
	uint8_t want[AUTH_PROOF_BYTES];
	struct wire_moved mv;
	struct transport_url url;
	bool good;

	if (wire_moved_decode(cur, &mv) || transport_url_parse(mv.url, &url) || !p->who.has_credential) {
		pr_err("ternd at %s says session %s moved, but not in a form this shim takes", p->who.server, session);
		return CUDA_ERROR_NOT_PERMITTED;
	}
	auth_moved_proof(p->who.credential, nonce, session, mv.url, want);
	good = auth_equal(want, mv.proof, sizeof(want));
	explicit_bzero(want, sizeof(want));
	if (!good) {
		pr_err("ternd at %s says session %s moved to %s without proof of its credential: ignored", p->who.server,
		       session, mv.url);
		return CUDA_ERROR_NOT_PERMITTED;
	}
	pr_info("session %s moved from %s to %s", session, p->who.server, mv.url);
	snprintf(p->who.server, sizeof(p->who.server), "%s", mv.url);
	p->conn.moved = true;
	return CUDA_ERROR_NO_DEVICE;
}

static CUresult conn_open_locked(struct shim_process *p)
{
	struct transport_url url;
	struct wire_hello_req req = { .protocol = WIRE_PROTOCOL };
	struct wire_challenge_rep challenge;
	uint8_t nonce[AUTH_NONCE_BYTES], token_proof[AUTH_PROOF_BYTES], cred_proof[AUTH_PROOF_BYTES];
	struct wire_hello_rep rep;
	struct wire_cursor cur;
	struct wire_msg m;
	char host[256] = "";
	CUresult status = CUDA_ERROR_UNKNOWN;
	int fd, ret;

	if (transport_url_parse(p->who.server, &url)) {
		pr_err("TERN_SERVER '%s' is not a transport URL", p->who.server);
		return CUDA_ERROR_NO_DEVICE;
	}
	if (transport_url_needs_token(&url) && !p->who.token.len)
		pr_warn("%s needs a token (TERN_TOKEN or TERN_TOKEN_FILE) and none is set", p->who.server);
	fd = transport_connect(&url);
	if (fd < 0) {
		pr_err("cannot reach ternd at %s: %s", p->who.server, strerror(-fd));
		return CUDA_ERROR_NO_DEVICE;
	}
	p->conn.fd = fd;
	if (url.kind == TRANSPORT_TLS) {
		status = tls_start(p, &url, p->conn.fd, &p->conn.tls);
		if (status != CUDA_SUCCESS)
			goto out_close;
	}
	p->owner = getpid();
	session_name(p);
	gethostname(host, sizeof(host) - 1);
	snprintf(req.session, sizeof(req.session), "%s", p->who.session);
	snprintf(req.host, sizeof(req.host), "%s", host);
	req.pid = (uint32_t)getpid();
	req.last_seq = p->seq;

	/* The challenge and the hello are outside the request sequence. */
	wire_msg_init(&m);
	{
		struct iovec iov[WIRE_MSG_IOV_MAX];
		int niov;

		ret = conn_exchange_locked(p, WIRE_CALL_CHALLENGE, 0, &m, iov, &niov, &cur, &status);
		/* A tls:// listener answers a plaintext challenge so (preauth.c). */
		if (!ret && status == CUDA_ERROR_NOT_PERMITTED && url.kind == TRANSPORT_TCP)
			pr_err("ternd at %s refused a plaintext connection: that port wants TLS "
			       "(TERN_SERVER=tls://..., docs/operations.md)", p->who.server);
		if (!ret && status == CUDA_SUCCESS &&
		    (wire_challenge_rep_decode(&cur, &challenge) || challenge.nonce.len != AUTH_NONCE_BYTES))
			ret = -EPROTO;
		if (!ret && status == CUDA_SUCCESS) {
			/* The reply buffer is the next exchange's: keep the nonce. */
			memcpy(nonce, challenge.nonce.ptr, sizeof(nonce));
			/* Proofs, never the secrets (common/auth.h). */
			if (p->who.token.len) {
				auth_token_proof(&p->who.token, nonce, req.session, token_proof);
				req.token_proof = (struct wire_blob){ token_proof, sizeof(token_proof) };
			}
			if (p->who.has_credential) {
				auth_credential_proof(p->who.credential, nonce, req.session, cred_proof);
				req.credential_proof = (struct wire_blob){ cred_proof, sizeof(cred_proof) };
			}
			wire_msg_reset(&m);
			wire_hello_req_encode(&m, &req);
			ret = conn_exchange_locked(p, WIRE_CALL_HELLO, 0, &m, iov, &niov, &cur, &status);
		}
	}
	wire_msg_release(&m);
	if (!ret && status == WIRE_STATUS_MOVED) {
		status = moved_follow_locked(p, &cur, nonce, req.session);
		goto out_close;
	}
	if (!ret && status == CUDA_SUCCESS &&
	    (wire_hello_rep_decode(&cur, &rep) || rep.credential.len != AUTH_CREDENTIAL_BYTES))
		ret = -EPROTO;
	if (ret) {
		pr_err("hello to ternd at %s failed: %s", p->who.server, strerror(-ret));
		goto out_close;
	}
	if (status != CUDA_SUCCESS) {
		pr_err("ternd at %s refused session %s: CUresult %d", p->who.server, p->who.session, status);
		goto out_close;
	}
	p->granted.arena_base = rep.arena_base;
	p->granted.arena_size = rep.arena_size;
	p->granted.quota = rep.quota;
	p->granted.worker_pid = rep.worker_pid;
	p->replay.resume_seq = rep.resume_seq;
	{
		uint8_t cred[AUTH_CREDENTIAL_BYTES];

		memcpy(cred, rep.credential.ptr, sizeof(cred));
		if (transport_url_needs_token(&url))
			auth_credential_mask(&p->who.token, nonce, req.session, cred);
		/* Issued with the session; a resumed one hears its own again. */
		memcpy(p->who.credential, cred, sizeof(cred));
		p->who.has_credential = true;
		explicit_bzero(cred, sizeof(cred));
	}
	pr_info("session %s on %s: worker %u, arena %#llx+%#llx, quota %llu", p->who.session,
		p->who.server, rep.worker_pid, (unsigned long long)rep.arena_base,
		(unsigned long long)rep.arena_size, (unsigned long long)rep.quota);
	if (url.kind != TRANSPORT_SHM && !transport_url_is_tcp(&url) && ivshmem_wanted(p, &url)) {
		ret = ivshmem_upgrade_locked(p);
		if (ret && ret != -EOPNOTSUPP) {
			pr_err("ivshmem channel to ternd at %s failed: %s", p->who.server, strerror(-ret));
			status = CUDA_ERROR_NO_DEVICE;
			goto out_close;
		}
		ret = ret ? 0 : host_shared_reshare_locked(p);
		if (ret) {
			status = CUDA_ERROR_NO_DEVICE;
			goto out_close;
		}
	} else if (url.kind == TRANSPORT_SHM || (url.kind == TRANSPORT_UNIX && !url.plain)) {
		/* unix: shm where both sides can share memfds, the socket
		 * alone where not; shm: the rings or nothing. */
		ret = shm_upgrade_locked(p);
		if (ret && (ret != -EOPNOTSUPP || url.kind == TRANSPORT_SHM)) {
			pr_err("shared-memory channel to ternd at %s failed: %s", p->who.server, strerror(-ret));
			status = CUDA_ERROR_NO_DEVICE;
			goto out_close;
		}
		if (ret)
			pr_info("session %s on %s: plain unix socket", p->who.session, p->who.server);
		ret = ret ? 0 : host_shared_reshare_locked(p);
		if (ret) {
			status = CUDA_ERROR_NO_DEVICE;
			goto out_close;
		}
		/* Before the replay, whose copies to the host may use it. */
		if (p->conn.shm_on && p->staging.memfd >= 0 && staging_attach_locked(p))
			p->staging.unavailable = true;
	}
	/* Another worker, perhaps on another GPU (a migration, a restore
	 * elsewhere): what the last one answered about devices is not kept. */
	if (p->connected_before) {
		device_cache_reconnected(p);
		func_table_forget_answers();
		lookup_table_forget_all();
	}
	p->connected_before = true;
	/* A new worker (a restore) runs the graphs' host nodes: it needs the
	 * channel before anything is replayed. */
	if (p->hostfn.wanted) {
		ret = hostfn_attach_locked(p);
		if (ret) {
			pr_err("host-function channel to the new worker failed: %s", strerror(-ret));
			status = CUDA_ERROR_NO_DEVICE;
			goto out_close;
		}
	}
	return CUDA_SUCCESS;

out_close:
	conn_close_locked(p);
	return status != CUDA_SUCCESS ? status : CUDA_ERROR_NO_DEVICE;
}

static CUresult conn_ready_locked(struct shim_process *p)
{
	if (p->lost)
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	if (p->conn.fd >= 0)
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

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Hops to where the session moved that are taken without a pause: a live
 * migration needs one; more are ternds that send each other's guests back
 * and forth, and get the backoff. */
#define MOVED_HOPS_AT_ONCE 4

/* Open the connection again, retrying while ternd restarts or a restore is
 * under way: a connection refused, a hello the worker could not serve
 * (CUDA_ERROR_NO_DEVICE: a restore that failed leaves the session suspended,
 * and the next hello waits for it) and a hello whose worker died before it
 * answered (CUDA_ERROR_UNKNOWN: killed during the restore, or when the
 * session moved away) are tried again, at once the first time (the
 * downtime of a live migration counts each pause), then backing off from
 * 50 ms to 1 s, for up to reconnect_ms in all (*@waited counts it); a hello
 * that heard where the session went goes there at once. A refusal (bad
 * credentials, another protocol) is final. */
static CUresult conn_reopen_locked(struct shim_process *p, int *waited)
{
	int backoff = 0, hops = 0;

	for (;;) {
		CUresult res;

		p->conn.moved = false;
		res = conn_open_locked(p);
		if ((res != CUDA_ERROR_NO_DEVICE && res != CUDA_ERROR_UNKNOWN) || *waited >= p->reconnect_ms)
			return res;
		if (p->conn.moved && ++hops <= MOVED_HOPS_AT_ONCE)
			continue;
		sleep_ms(backoff);
		*waited += backoff;
		backoff = backoff ? (backoff * 2 < 1000 ? backoff * 2 : 1000) : 50;
	}
}

/* Send logged request @e again after a reconnect. A round trip's reply is
 * read at once (into its waiting thread's round trip, if any), except a
 * `wait` call's: the worker answers that when its wait is over, which may
 * take a request replayed after it. A `wait` call whose thread had its
 * answer already goes without asking for one: nobody would read it before
 * the replay ends, and a large one (a copy to the host) would fill the
 * socket while this thread still writes, and neither end would go on. 0 or
 * -errno. */
static int replay_one_locked(struct shim_process *p, const struct replay_entry *e)
{
	struct shim_pending *waiting = pending_find(p, NULL, e->seq, e->call), replayed;
	uint8_t head[WIRE_HEADER_SIZE];
	struct iovec iov[2] = { { (void *)e->bytes, e->len } };
	struct wire_cursor cur;
	CUresult st = CUDA_SUCCESS;
	int ret, n = 1;

	if (wire_call_waits(e->call) && !e->no_reply && !waiting && e->len >= WIRE_HEADER_SIZE) {
		struct wire_header h;

		if (wire_header_decode(e->bytes, &h) == 0) {
			h.flags |= WIRE_F_NO_REPLY;
			wire_header_encode(head, &h);
			iov[0] = (struct iovec){ head, sizeof(head) };
			iov[1] = (struct iovec){ (void *)(e->bytes + WIRE_HEADER_SIZE), e->len - WIRE_HEADER_SIZE };
			n = 2;
		}
	}
	ret = conn_send_locked(p, iov, n);
	if (ret || e->no_reply || wire_call_waits(e->call))
		return ret;
	if (waiting)
		return reply_until_locked(p, waiting);
	pending_init(&replayed, e->seq, e->call);
	ret = reply_until_locked(p, &replayed);
	if (pending_adopt(&replayed, ret ? NULL : &cur, &st) == 0 && !ret && st != CUDA_SUCCESS)
		pr_warn("replayed request %llu (%s) now fails with %d", (unsigned long long)e->seq,
			wire_call_name(e->call) ? wire_call_name(e->call) : "?", st);
	return ret;
}

/* The connection broke: reconnect under the same session and send again,
 * in order, what the worker lacks: every logged request after the one it
 * resumed at, and the round trips still waiting for their replies. The
 * caller is the reader. 0 when the session goes on; -ESTALE when it cannot
 * be brought back. */
static int session_recover_locked(struct shim_process *p)
{
	int waited = 0;

	/* Deferred requests are in the replay log; the batch belongs to the old connection. */
	p->batching.len = 0;
	p->batching.count = 0;
	for (;;) {
		struct replay_entry *e;
		CUresult res;
		uint64_t resume;
		int ret = 0;

		conn_close_locked(p);
		res = conn_reopen_locked(p, &waited);
		if (res != CUDA_SUCCESS)
			return -ESTALE;
		resume = p->replay.resume_seq;
		if (!resume || resume > p->seq) {
			pr_err("session %s came back %s: its objects are gone", p->who.session,
			       resume ? "ahead of the app" : "empty");
			return -ESTALE;
		}
		if (resume < p->seq && p->replay.gap > resume) {
			pr_err("session %s was restored at request %llu, but requests after it were "
			       "dropped from the replay log (TERN_REPLAY_MAX)", p->who.session,
			       (unsigned long long)resume);
			return -ESTALE;
		}
		/* The old worker's proof says nothing of what the new one replays. */
		completion_forget_locked(p);
		pr_info("session %s restored at request %llu: replaying %llu requests", p->who.session,
			(unsigned long long)resume, (unsigned long long)(p->seq - resume));
		p->replay.durable_seq = resume;
		managed_session_restored();
		registered_session_restored();
		for (e = replay_ring_oldest(&p->replay.ring); e && !ret; e = replay_ring_next(&p->replay.ring, e)) {
			if (e->seq <= resume && !pending_has(p, e->seq))
				continue;
			/* Shared buffers were shared again, as they are now, on connecting. */
			if (e->call == WIRE_CALL_MEM_HOST_SHARE || e->call == WIRE_CALL_MEM_HOST_UNSHARE)
				continue;
			ret = replay_one_locked(p, e);
		}
		if (!ret)
			return 0;
		pr_warn("connection lost again during the replay: %s", strerror(-ret));
	}
}


/* Send what the batch holds. A broken connection is left for the next
 * round trip to notice and recover (the batch is in the replay log). */
static void batch_flush_locked(struct shim_process *p)
{
	struct iovec iov = { p->batching.buf, p->batching.len };

	if (!p->batching.len || p->conn.fd < 0)
		return;
	if (conn_send_locked(p, &iov, 1))
		pr_warn("sending %u deferred requests failed; the next call reconnects", p->batching.count);
	p->stats.batches++;
	p->batching.len = 0;
	p->batching.count = 0;
}

static void *batch_flusher(void *arg)
{
	struct shim_process *p = arg;

	pthread_mutex_lock(&p->conn_lock);
	for (;;) {
		uint64_t now = monotonic_ns();

		if (p->batching.count && now - p->batching.since_ns >= BATCH_DELAY_NS) {
			batch_flush_locked(p);
		} else if (p->batching.count) {
			uint64_t due = p->batching.since_ns + BATCH_DELAY_NS;
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += (long)(due - now);
			while (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&p->batching.cond, &p->conn_lock, &ts);
		} else {
			pthread_cond_wait(&p->batching.cond, &p->conn_lock);
		}
	}
	return NULL;
}

/* Room for @len more bytes in the batch: 0, or -ENOMEM. */
static int batch_reserve_locked(struct shim_process *p, size_t len)
{
	size_t cap = p->batching.cap ? p->batching.cap : 65536;
	uint8_t *b;

	if (p->batching.len + len <= p->batching.cap)
		return 0;
	while (cap < p->batching.len + len)
		cap *= 2;
	b = realloc(p->batching.buf, cap);
	if (!b)
		return -ENOMEM;
	p->batching.buf = b;
	p->batching.cap = cap;
	return 0;
}

/* Queue @req in the batch of requests that want no reply. */
static CUresult defer_locked(struct shim_process *p, uint32_t id, struct wire_msg *req)
{
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .call = id, .flags = WIRE_F_NO_REPLY };
	CUresult status = CUDA_SUCCESS;
	size_t len = 0;
	int niov;

	h.ctx = rpc_header_ctx();
	h.seq = ++p->seq;
	niov = req->failed ? -EMSGSIZE : wire_msg_finish(req, &h, iov);
	if (niov < 0) {
		p->seq--;
		status = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	p->stats.calls++;
	stats_deferred();
	replay_append_locked(p, id, h.seq, true, iov, niov);
	for (int i = 0; i < niov; i++)
		len += iov[i].iov_len;
	if (p->conn.shm_on || batch_reserve_locked(p, len)) {
		/* Straight onto the channel, after what is batched: with shm the
		 * worker picks it up while we go on. A failure is for the next
		 * round trip to notice and recover (the request is in the log). */
		batch_flush_locked(p);
		if (conn_send_locked(p, iov, niov))
			pr_warn("sending a deferred request failed; the next call reconnects");
		goto out;
	}
	for (int i = 0; i < niov; i++) {
		memcpy(p->batching.buf + p->batching.len, iov[i].iov_base, iov[i].iov_len);
		p->batching.len += iov[i].iov_len;
	}
	if (!p->batching.count++)
		p->batching.since_ns = monotonic_ns();
	if (p->batching.len >= BATCH_BYTES_MAX || p->batching.count >= BATCH_COUNT_MAX) {
		batch_flush_locked(p);
	} else if (!p->batching.flusher_running) {
		pthread_t t;

		if (!pthread_create(&t, NULL, batch_flusher, p)) {
			pthread_detach(t);
			p->batching.flusher_running = true;
		} else {
			batch_flush_locked(p);
		}
	} else {
		pthread_cond_signal(&p->batching.cond);
	}
out:
	return status;
}

/* The worker runs every guest thread's calls on one thread: before a call,
 * it takes the calling thread's capture mode (cuThreadExchangeStreamCaptureMode),
 * sent as a deferred request ahead of it when the mode differs from the one
 * the worker has. */
static void capture_mode_sync_locked(struct shim_process *p)
{
	struct wire_capture_mode_set_req req = { .mode = capture_mode_current() };
	struct wire_msg m;

	if (req.mode == p->worker_capture_mode)
		return;
	wire_msg_init(&m);
	wire_capture_mode_set_req_encode(&m, &req);
	if (defer_locked(p, WIRE_CALL_CAPTURE_MODE_SET, &m) == CUDA_SUCCESS)
		p->worker_capture_mode = req.mode;
	wire_msg_release(&m);
}

CUresult rpc_defer(uint32_t id, struct wire_msg *req)
{
	struct shim_process *p = shim_process();
	struct wire_cursor unused;
	CUresult status;

	if (hostfn_in_callback())
		return CUDA_ERROR_NOT_PERMITTED;
	/* During a capture every call gets the driver's answer at once; so does
	 * a call the table does not mark `defer` (only those have stubs). */
	if (!p->batching.lazy || capture_active() || !wire_call_deferrable(id))
		return rpc_call(id, req, &unused);
	pthread_mutex_lock(&p->conn_lock);
	status = conn_ready_locked(p);
	if (status == CUDA_SUCCESS) {
		capture_mode_sync_locked(p);
		status = defer_locked(p, id, req);
	}
	pthread_mutex_unlock(&p->conn_lock);
	return status;
}

CUresult rpc_call(uint32_t id, struct wire_msg *req, struct wire_cursor *rep)
{
	return rpc_call_fd(id, req, rep, -1);
}

/* Become the reader: wait while another thread is. */
static void reader_enter_locked(struct shim_process *p, const struct shim_pending *me)
{
	while (p->reading && !(me && me->done))
		pthread_cond_wait(&p->reply_cond, &p->conn_lock);
	if (!(me && me->done))
		p->reading = true;
}

static void reader_leave_locked(struct shim_process *p)
{
	p->reading = false;
	pthread_cond_broadcast(&p->reply_cond);
}

/* Wait for @me's reply, reading for every waiting thread while no other
 * does, and reconnecting when the connection broke. 0, or -ESTALE when the
 * session is lost (then every waiting round trip fails). */
static int pending_wait_locked(struct shim_process *p, struct shim_pending *me)
{
	int ret = 0;

	while (!me->done) {
		reader_enter_locked(p, me);
		if (me->done)
			break;
		if (p->lost) {
			ret = -ESTALE;
		} else if (p->broken || p->conn.fd < 0) {
			pr_warn("connection to ternd lost during %s: reconnecting",
				wire_call_name(me->call) ? wire_call_name(me->call) : "call");
			ret = session_recover_locked(p);
			/* The other waiting threads learn it from p->lost. */
			if (ret)
				conn_drop_locked(p, wire_call_name(me->call) ? wire_call_name(me->call) : "call", ret);
		} else if (reply_next_locked(p, me, true)) {
			p->broken = true;       /* reconnect at the next turn */
		}
		reader_leave_locked(p);
		if (ret)
			return ret;
	}
	return 0;
}

CUresult rpc_call_fd(uint32_t id, struct wire_msg *req, struct wire_cursor *rep, int fd)
{
	struct shim_process *p = shim_process();
	struct wire_header h = { .call = id };
	struct iovec iov[WIRE_MSG_IOV_MAX + 1];
	struct shim_pending me;
	CUresult status = CUDA_ERROR_UNKNOWN;
	int niov, n = 0, ret;

	/* A host function must not call CUDA (the driver's rule): here it
	 * would wait for the stream that waits for it. */
	if (hostfn_in_callback())
		return CUDA_ERROR_NOT_PERMITTED;
	pthread_mutex_lock(&p->conn_lock);
	status = conn_ready_locked(p);
	if (status != CUDA_SUCCESS)
		goto out_unlock;
	capture_mode_sync_locked(p);
	h.ctx = rpc_header_ctx();
	h.seq = p->seq + 1;
	niov = req->failed ? -EMSGSIZE : wire_msg_finish(req, &h, iov + 1);
	if (niov < 0) {
		pr_warn("%s: request too large for the wire", wire_call_name(id));
		status = CUDA_ERROR_INVALID_VALUE;
		goto out_unlock;
	}
	p->seq++;
	p->stats.calls++;
	/* In the log before it is sent: a reconnect sends it again in its
	 * place among other threads' requests. */
	replay_append_locked(p, id, h.seq, false, iov + 1, niov);
	pending_init(&me, h.seq, id);
	me.next = p->pending;
	p->pending = &me;
	/* After a reconnect the buffer went over with the others: send once. */
	ret = fd >= 0 && p->conn.shm_on && !p->conn.ivshmem_on && !p->broken ? shm_fds_send(p->conn.fd, &fd, 1) : 0;
	if (ret) {
		p->broken = true;
		shutdown(p->conn.fd, SHUT_RDWR);
	} else {
		/* Deferred requests go first, in the same write. */
		if (p->batching.len) {
			iov[0].iov_base = p->batching.buf;
			iov[0].iov_len = p->batching.len;
			n = 1;
		}
		ret = conn_send_locked(p, iov + 1 - n, niov + n);
		if (n) {
			p->stats.batches++;
			p->batching.len = 0;
			p->batching.count = 0;
		}
	}
	/* A failed send is the reader's to recover: the request is logged. */
	ret = pending_wait_locked(p, &me);
	pending_remove(p, &me);
	if (ret) {
		pending_adopt(&me, NULL, &status);
		status = CUDA_ERROR_DEVICE_UNAVAILABLE;
	} else if (pending_adopt(&me, rep, &status)) {
		status = CUDA_ERROR_UNKNOWN;
	} else {
		p->stats.round_trips++;
		stats_round_trip();
		trip_seq = h.seq;
	}
out_unlock:
	pthread_mutex_unlock(&p->conn_lock);
	if (status != CUDA_SUCCESS)
		pr_debug("%s: CUresult %d", wire_call_name(id) ? wire_call_name(id) : "call", status);
	return status;
}

bool rpc_arena_contains(uint64_t addr, uint64_t len)
{
	struct shim_process *p = shim_process();
	uint64_t base = __atomic_load_n(&p->granted.arena_base, __ATOMIC_RELAXED);
	uint64_t size = __atomic_load_n(&p->granted.arena_size, __ATOMIC_RELAXED);

	if (!size || addr < base)
		return false;
	return addr - base < size && len <= size - (addr - base);
}

uint64_t rpc_trip_seq(void)
{
	return trip_seq;
}

bool rpc_session_lost(void)
{
	return __atomic_load_n(&shim_process()->lost, __ATOMIC_RELAXED);
}
