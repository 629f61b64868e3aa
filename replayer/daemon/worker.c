#define LOG_PREFIX "worker: "
#include "worker.h"
#include "auth.h"
#include "snap_format.h"
#include "worker_wait.h"
#include "checkpoint.h"
#include "control.h"
#include "fdpass.h"
#include "recv_ahead.h"
#include "hostfn_chan.h"
#include "log.h"
#include "monotonic.h"
#include "oom.h"
#include "shm_chan.h"
#include "wire_dispatch.h"
#include "cl_exec.h"
#include "le.h"
#include "ivshmem_bar.h"
#include "vm_id.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Set by SIGTERM: the worker ends its session between two requests and cleans
 * up. A signal handler can only reach a global. */
static volatile sig_atomic_t worker_stopping;

static void worker_on_sigterm(int sig)
{
	(void)sig;
	worker_stopping = 1;
	/* A host function waiting for the guest would hold the worker in the
	 * driver (a synchronisation) where no signal reaches it. */
	exec_hostfn_interrupt();
}

void worker_signals_install(void)
{
	struct sigaction sa = { .sa_handler = worker_on_sigterm };

	/* No SA_RESTART: the wait for the next request must return. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* How long a shm attach waits for the descriptors the guest sends first. */
#define SHM_FDS_TIMEOUT_MS 2000
/* With requests streaming through the rings, look at the other descriptors
 * after this many. */
#define POLL_EVERY 64

/* Replies up to this size are kept with a snapshot for a resend after restore;
 * larger ones are reads, served again instead. */
#define KEPT_REPLY_MAX (1u << 20)

/* How long the dispatch thread looks for a synchronisation it handed to a
 * waiter to complete before it serves other requests: a short wait is
 * answered without a wakeup, as when the dispatch thread waited itself. */
#define WAIT_SPIN_NS 50000ull
/* How long the dispatch thread looks at a synchronisation's marker itself
 * before it hands the wait to a waiter: a short kernel is done by then, and
 * the hop to a waiter thread and back costs more than the wait. */
#define WAIT_QUICK_NS 20000ull

struct worker_conn {
	int fd;                         /* the socket; with shm on, only fds and hang-ups */
	struct shm_chan shm;
	void *shm_at;                   /* where the rings will be mapped: shm_reserve */
	bool shm_on;                    /* messages go through the rings */
	struct tls_conn *tls;           /* tls://: the socket's bytes are this session's records */
	struct ivshmem_host bar;        /* the domain's BAR slot the rings are in; fd -1: none */
	uint8_t *payload;
	size_t cap;
	struct wire_msg reply;
	uint64_t durable_seq;           /* latest durable snapshot's sequence number */
	bool snapshot_running;          /* a snapshot was taken and is not durable yet */
	/* A request that came in part over the socket (a guest stops wherever
	 * it is paused, or on purpose): kept here while the supervisor's
	 * messages are read; it is no call yet, so a hold or a snapshot is at
	 * the boundary before it. */
	uint8_t head[WIRE_HEADER_SIZE];
	size_t head_got;
	struct wire_header pending;     /* decoded once head_got is the whole header */
	uint64_t body_got;              /* of pending.length, into payload */
	uint64_t skip_left;             /* an oversized request's payload still to drop */
	/* The socket's bytes (or TLS records) read ahead: many requests a read,
	 * passed descriptors kept with their byte (common/recv_ahead.h). */
	struct recv_ahead ahead;
};

/* How much a read of the session's socket takes at most. */
#define WORKER_READ_AHEAD (256u << 10)

struct worker_session {
	const struct worker_config *cfg;
	struct worker_conn c;
	struct exec ex;
	struct cl_exec cl;              /* the session's OpenCL objects, opened at its first OpenCL call */
	struct checkpoint ck;           /* the snapshots' and restores' state of ex */
	char id[SESSION_ID_MAX];
	uint64_t seq;                   /* last request applied */
	uint64_t resume_seq;            /* restored at this sequence number, 0 if fresh */
	void *resume_reply;             /* the reply of resume_seq, as snapshotted */
	size_t resume_reply_len;
	struct checkpoint_job *job;
	bool suspend_after_job;
	bool held;                      /* a domain's consistent snapshot: read no request */
	char journal_dir[4400];         /* removed when the session ends: snapshots keep copies */
	CUresult deferred_error;        /* first failure of a request that wanted no reply */
	struct worker_waits *waits;     /* synchronisations waiting off the dispatch thread, or NULL */
	struct wire_msg wait_reply;     /* a waited request's reply; c.reply stays the last request's */
	char job_name[CONTROL_NAME_MAX + 1];
	int passed_fd;                  /* came with the supervisor's message being read, or -1 */
};

/* What the guest's replay log may forget (the reply header's ctx). A restore
 * starts from the latest durable snapshot, so everything after it is kept;
 * a session never snapshotted can only be restored from a snapshot taken
 * later, at a request at least this one, so nothing up to it is needed. */
static uint64_t reply_trim_point(const struct worker_conn *c, const struct wire_header *req)
{
	if (c->durable_seq || c->snapshot_running)
		return c->durable_seq;
	return req->seq;
}

/* The one place that picks how bytes travel: rings, TLS records or the
 * socket itself; the framing above is the same for all. */
static int conn_send(struct worker_conn *c, struct iovec *iov, int n)
{
	if (c->shm_on)
		return shm_chan_send(&c->shm, iov, n);
	return c->tls ? tls_conn_send(c->tls, iov, n) : wire_send(c->fd, iov, n);
}

static int conn_recv(struct worker_conn *c, void *buf, size_t n)
{
	if (c->shm_on)
		return shm_chan_recv(&c->shm, buf, n);
	return c->tls ? tls_conn_recv_exact(c->tls, buf, n) : wire_recv_exact(c->fd, buf, n);
}

static int conn_discard(struct worker_conn *c, uint64_t n)
{
	if (c->shm_on)
		return shm_chan_discard(&c->shm, n);
	return c->tls ? tls_conn_recv_discard(c->tls, n) : wire_recv_discard(c->fd, n);
}

static int reply_msg_send(struct worker_conn *c, struct wire_msg *m, const struct wire_header *req,
			  uint16_t flags)
{
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .flags = (uint16_t)(WIRE_F_REPLY | flags), .call = req->call,
				 .seq = req->seq, .ctx = reply_trim_point(c, req) };
	int n = wire_msg_finish(m, &h, iov);

	if (n < 0)
		return n;
	return conn_send(c, iov, n);
}

static int reply_send(struct worker_conn *c, const struct wire_header *req, uint16_t flags)
{
	return reply_msg_send(c, &c->reply, req, flags);
}

/* A reply holding only a status: for requests that could not be served at all. */
static int reply_status(struct worker_conn *c, const struct wire_header *req, CUresult status,
			uint16_t flags)
{
	wire_msg_reset(&c->reply);
	wire_put_u32(&c->reply, (uint32_t)status);
	return reply_send(c, req, flags);
}

/* Request buffers up to this size are reused; a larger one is freed
 * before the next smaller request. */
#define WORKER_PAYLOAD_KEEP (1u << 20)

/* Read one request. 0 with the payload in c->payload, 1 if the request was
 * answered already (oversized), or -errno when the connection is unusable. */
/* What was read ahead or the socket has now, up to @n bytes, without
 * waiting: the count, or -EAGAIN when nothing came, -ECONNRESET at end of
 * file, -errno. */
static ssize_t conn_recv_some(struct worker_conn *c, void *buf, size_t n)
{
	return recv_ahead_take(&c->ahead, buf, n);
}

/* The header is whole: check it and make room for the payload. 1 when the
 * request is refused (its payload is dropped), 0 to read the payload. */
static int request_head_take(struct worker_conn *c)
{
	struct wire_header *h = &c->pending;
	int ret = wire_header_decode(c->head, h);

	if (ret == -EMSGSIZE) {
		pr_warn("request %u of %u bytes is over the limit: dropped", h->call, h->length);
		c->skip_left = h->length;
		return 1;
	}
	if (ret) {
		pr_warn("bad message header (magic 0x%08x version %u): closing", h->magic, h->version);
		reply_status(c, h, CUDA_ERROR_INVALID_VALUE, WIRE_F_ERROR);
		return -EPROTO;
	}
	/* A large request's buffer is not kept for the small ones after it:
	 * a session holds what its largest message needed only while it is
	 * served (docs/limits.md, "Host memory"). */
	if (c->cap > WORKER_PAYLOAD_KEEP && h->length <= WORKER_PAYLOAD_KEEP) {
		free(c->payload);
		c->payload = NULL;
		c->cap = 0;
	}
	if (h->length > c->cap) {
		size_t cap = h->length < 65536 ? 65536 : h->length;
		uint8_t *p = realloc(c->payload, cap);

		if (!p)
			return -ENOMEM;
		c->payload = p;
		c->cap = cap;
	}
	c->body_got = 0;
	return 0;
}

/* The next request into @h and c->payload: 0 when one is whole, 1 when one
 * was refused (read on), -EAGAIN when the socket has no more of it for now
 * (what came is kept: call again once it is readable), -errno when the
 * connection is over. The rings deliver whole messages and are read as
 * before. */
static int request_read(struct worker_conn *c, struct wire_header *h)
{
	uint8_t sink[65536];
	ssize_t n;
	int ret;

	if (c->shm_on) {
		uint8_t raw[WIRE_HEADER_SIZE];

		ret = conn_recv(c, raw, sizeof(raw));
		if (ret)
			return ret;
		memcpy(c->head, raw, sizeof(raw));
		ret = request_head_take(c);
		*h = c->pending;
		if (ret == 1) {
			ret = conn_discard(c, c->skip_left);
			c->skip_left = 0;
			if (!ret)
				ret = reply_status(c, h, CUDA_ERROR_INVALID_VALUE, WIRE_F_ERROR);
			return ret ? ret : 1;
		}
		return ret ? ret : conn_recv(c, c->payload, h->length);
	}
	while (c->skip_left) {
		n = conn_recv_some(c, sink, c->skip_left < sizeof(sink) ? (size_t)c->skip_left : sizeof(sink));
		if (n < 0)
			return (int)n;
		c->skip_left -= (uint64_t)n;
		if (!c->skip_left) {
			*h = c->pending;
			ret = reply_status(c, h, CUDA_ERROR_INVALID_VALUE, WIRE_F_ERROR);
			return ret ? ret : 1;
		}
	}
	while (c->head_got < WIRE_HEADER_SIZE) {
		n = conn_recv_some(c, c->head + c->head_got, WIRE_HEADER_SIZE - c->head_got);
		if (n < 0)
			return (int)n;
		c->head_got += (size_t)n;
		if (c->head_got == WIRE_HEADER_SIZE) {
			ret = request_head_take(c);
			if (ret < 0)
				return ret;
			if (ret == 1) {
				c->head_got = 0;
				return request_read(c, h);
			}
		}
	}
	while (c->body_got < c->pending.length) {
		n = conn_recv_some(c, c->payload + c->body_got, c->pending.length - c->body_got);
		if (n < 0)
			return (int)n;
		c->body_got += (uint64_t)n;
	}
	*h = c->pending;
	c->head_got = 0;
	c->body_got = 0;
	return 0;
}

void worker_session_id_clean(char *out, const char *id)
{
	size_t i;

	for (i = 0; id[i] && i < SESSION_ID_MAX - 1; i++)
		out[i] = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z') ||
			 (id[i] >= 'A' && id[i] <= 'Z') || id[i] == '-' || id[i] == '.' || id[i] == '_' ?
			 id[i] : '_';
	out[i] = 0;
	if (!i || out[0] == '.')
		out[0] = '_';
}

/* The hello the supervisor checked: into the connection's buffer, where
 * every request lands. */
static int hello_take(struct worker_conn *c, const struct worker_config *cfg, struct wire_header *h,
		      struct wire_hello_req *hello)
{
	struct wire_cursor cur;

	*h = *cfg->hello_header;
	c->cap = h->length < 65536 ? 65536 : h->length;
	c->payload = malloc(c->cap);
	if (!c->payload)
		return -ENOMEM;
	memcpy(c->payload, cfg->hello_payload, h->length);
	wire_cursor_init(&cur, c->payload, h->length);
	return wire_hello_req_decode(&cur, hello) < 0 ? -EPROTO : 0;
}

static int cmd_send(const struct worker_config *cfg, const struct control_link *m)
{
	char *line = NULL;
	size_t len = 0;
	int ret;

	if (cfg->cmd_fd < 0)
		return 0;
	ret = control_link_encode(m, &line, &len);
	if (ret)
		pr_warn("cannot encode a %s message: %s", control_link_type_name(m->type), strerror(-ret));
	else
		ret = control_write_all(cfg->cmd_fd, line, len);
	free(line);
	return ret;
}

/* A reply for the supervisor to pass on (a snapshot's result or progress). */
static int cmd_reply_send(const struct worker_config *cfg, enum control_link_type type,
			  const struct control_reply *r)
{
	struct control_link m = { .type = type, .reply = *r };

	return cmd_send(cfg, &m);
}

/* Remove the files of a journal directory (LMDB's data and lock files). */
static int journal_dir_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char file[4400];

		if (de->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
		unlink(file);
	}
	closedir(d);
	return 0;
}

/* A fresh, empty journal directory for the session. */
static int journal_dir_reset(const char *state_dir, const char *id, char *path, size_t cap)
{
	snprintf(path, cap, "%s/journal", state_dir);
	mkdir(state_dir, 0700);
	mkdir(path, 0700);
	snprintf(path, cap, "%s/journal/%s", state_dir, id);
	if (strchr(id, VM_SESSION_SEP)) {
		/* A domain's session: journal/UUID/ID. */
		char *sep = strrchr(path, VM_SESSION_SEP);

		*sep = 0;
		mkdir(path, 0700);
		*sep = VM_SESSION_SEP;
	}
	if (mkdir(path, 0700) && errno != EEXIST)
		return -errno;
	return journal_dir_empty(path);
}

static void store_dir(const struct worker_config *cfg, char *out, size_t cap)
{
	snprintf(out, cap, "%s/store", cfg->state_dir);
}

static void snapshot_start(struct worker_session *s, const char *name, const char *parent, bool suspend)
{
	struct checkpoint_request req = { 0 };
	char sdir[4200], err[512] = "";
	static uint8_t kept[KEPT_REPLY_MAX];
	struct control_reply r = { .kind = CONTROL_REPLY_PROGRESS };
	size_t kept_len = 0;

	if (s->job) {
		control_reply_error(&r, "a snapshot of this session is still being written; retry when it is done");
		cmd_reply_send(s->cfg, CONTROL_LINK_RESULT, &r);
		return;
	}
	store_dir(s->cfg, sdir, sizeof(sdir));
	if (s->seq)
		kept_len = wire_msg_payload_copy(&s->c.reply, kept, sizeof(kept));
	req.store_dir = sdir;
	req.name = name;
	req.parent = parent[0] ? parent : NULL;
	req.session = s->id;
	req.seq = s->seq;
	req.reply = kept;
	req.reply_len = kept_len;
	req.auth_flags = (s->cfg->credential ? SNAP_AUTH_CREDENTIAL : 0) |
			 (s->cfg->has_owner_uid ? SNAP_AUTH_OWNER_UID : 0);
	req.credential = s->cfg->credential;
	req.owner_uid = s->cfg->owner_uid;
	if (checkpoint_begin(&s->ck, &req, &s->job, err, sizeof(err))) {
		control_reply_error(&r, "snapshot '%s': %s", name, err);
		cmd_reply_send(s->cfg, CONTROL_LINK_RESULT, &r);
		return;
	}
	s->suspend_after_job = suspend;
	s->c.snapshot_running = true;
	snprintf(s->job_name, sizeof(s->job_name), "%s", name);
	r.progress.progress = 0.5;
	snprintf(r.progress.stage, sizeof(r.progress.stage), "paused");
	snprintf(r.progress.snapshot, sizeof(r.progress.snapshot), "%s", name);
	cmd_reply_send(s->cfg, CONTROL_LINK_PROGRESS, &r);
}

/* The drain finished: report, and remember what is durable. Returns true
 * when the session should end (suspended). */
static bool snapshot_end(struct worker_session *s)
{
	struct control_reply result;
	int ret;

	ret = checkpoint_end(s->job, &result);
	s->job = NULL;
	s->c.snapshot_running = false;
	if (!ret)
		s->c.durable_seq = result.snapshot.seq;
	cmd_reply_send(s->cfg, CONTROL_LINK_RESULT, &result);
	return !ret && s->suspend_after_job;
}

/* The supervisor handed over the guest's host-function connection (the
 * descriptor that came with its message) and the secret it presented. */
static void hostfn_join(struct worker_session *s, const char *hex)
{
	uint8_t secret[HOSTFN_SECRET_SIZE];
	int fd = s->passed_fd;

	s->passed_fd = -1;
	if (fd < 0) {
		pr_warn("session %s: a host-function connection without its descriptor", s->id);
		return;
	}
	/* Any length but the secret's is refused by the check itself. */
	exec_hostfn_join(&s->ex, fd, secret, control_hex_get(hex, secret, sizeof(secret)) ? 0 : sizeof(secret));
	explicit_bzero(secret, sizeof(secret));
}

/* Read what the supervisor sent next into @line (@cap bytes, *@len used,
 * kept NUL-terminated): fdpass_recv's result. A descriptor that came with
 * the bytes belongs to the message they begin: it replaces *@passed_fd. A
 * full buffer with no line end is an overlong line from a confused peer:
 * dropped. */
static ssize_t cmd_read(int fd, char *line, size_t cap, size_t *len, int *passed_fd)
{
	int passed = -1, got = 0;
	ssize_t n;

	if (*len == cap - 1)
		*len = 0;
	n = fdpass_recv(fd, line + *len, cap - 1 - *len, &passed, 1, &got, 0);
	if (got > 0) {
		if (*passed_fd >= 0)
			close(*passed_fd);
		*passed_fd = passed;
	}
	if (n > 0) {
		*len += (size_t)n;
		line[*len] = 0;
	}
	return n;
}

/* The first @used bytes of @line (a line and its end) are handled. */
static void cmd_consume(char *line, size_t *len, size_t used)
{
	memmove(line, line + used, *len - used + 1);
	*len -= used;
}

/* Returns true when the session should end (suspended). */
static bool cmd_handle(struct worker_session *s, const char *line, size_t len)
{
	struct control_link m;
	char err[256];

	if (control_link_decode(line, len, &m, err, sizeof(err))) {
		pr_warn("bad message from the supervisor: %s", err);
	} else if (m.type == CONTROL_LINK_SNAPSHOT) {
		snapshot_start(s, m.snapshot, m.parent, m.suspend);
		/* A suspend keeps the guest out until the snapshot is durable. */
		return s->job && m.suspend ? snapshot_end(s) : false;
	} else if (m.type == CONTROL_LINK_HOLD) {
		/* Read between two requests: this is a call boundary. */
		s->held = true;
		cmd_send(s->cfg, &(struct control_link){ .type = CONTROL_LINK_HELD });
	} else if (m.type == CONTROL_LINK_RELEASE) {
		s->held = false;
	} else if (m.type == CONTROL_LINK_HOSTFN) {
		hostfn_join(s, m.secret);
	} else {
		pr_warn("unexpected %s message from the supervisor", control_link_type_name(m.type));
	}
	control_link_release(&m);
	return false;
}

static uint32_t reply_status_of(const struct wire_msg *m)
{
	const uint8_t *p = m->buf + WIRE_HEADER_SIZE;

	if (!m->buf || m->len < WIRE_HEADER_SIZE + 4)
		return CUDA_ERROR_UNKNOWN;
	return le32_get(p);
}

static bool call_is_opencl(uint32_t call)
{
	return call >= WIRE_API_OPENCL_FIRST && call <= WIRE_API_OPENCL_LAST;
}

/* A request to the executor of its API: 0, or the dispatcher's -ENOSYS and
 * -EPROTO, whose answer is request_refused_status. */
static int request_dispatch(struct worker_session *s, uint32_t call, struct wire_cursor *cur, struct wire_msg *reply)
{
	if (call_is_opencl(call))
		return cl_exec_dispatch(&s->cl, call, cur, reply);
	return wire_dispatch(&s->ex, call, cur, reply);
}

/* The status of a request the dispatcher refused (@ret), in its API's terms. */
static uint32_t request_refused_status(uint32_t call, int ret)
{
	if (call_is_opencl(call))
		return (uint32_t)(ret == -ENOSYS ? CL_INVALID_OPERATION : CL_INVALID_VALUE);
	return ret == -ENOSYS ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
}

/* Answer a request the restored session already applied before its snapshot. */
static int request_resend(struct worker_session *s, const struct wire_header *h, struct wire_cursor *cur)
{
	if (h->seq == s->resume_seq && s->resume_reply_len) {
		wire_msg_reset(&s->c.reply);
		wire_put_bytes(&s->c.reply, s->resume_reply, s->resume_reply_len);
		return reply_send(&s->c, h, 0);
	}
	if (h->seq == s->resume_seq && h->call == WIRE_CALL_MEMCPY_DTOH) {
		/* A read: serving it again is harmless. */
		wire_msg_reset(&s->c.reply);
		if (wire_dispatch(&s->ex, h->call, cur, &s->c.reply) == 0)
			return reply_send(&s->c, h, 0);
	}
	pr_warn("request %llu was applied before the snapshot and its reply is gone",
		(unsigned long long)h->seq);
	return reply_status(&s->c, h, CUDA_ERROR_ILLEGAL_STATE, WIRE_F_ERROR);
}

/* The descriptors that follow a request on the session's socket (exec's
 * host_func_attach and mem_host_share): read ahead perhaps, with their byte. */
static int conn_fds_take(void *arg, int *fds, int nfds, int timeout_ms)
{
	return recv_ahead_fds_take(arg, fds, nfds, timeout_ms);
}

/* The guest moves the session onto shared-memory rings: its memfd and
 * eventfds come on the socket, the answer goes back on the socket, and from
 * then on every message uses the rings. */
static int shm_attach(struct worker_session *s, const struct wire_header *h, struct wire_cursor *cur)
{
	struct wire_shm_attach_req req;
	int fds[SHM_CHAN_FDS], ret;
	CUresult status = CUDA_SUCCESS;

	if (s->c.shm_on || wire_shm_attach_req_decode(cur, &req) < 0)
		return reply_status(&s->c, h, CUDA_ERROR_INVALID_VALUE, WIRE_F_ERROR);
	/* Descriptors cannot come over TCP, and raw bytes read here would
	 * break the TLS records. */
	if (s->c.tls)
		return reply_status(&s->c, h, CUDA_ERROR_NOT_SUPPORTED, 0);
	ret = recv_ahead_fds_take(&s->c.ahead, fds, SHM_CHAN_FDS, SHM_FDS_TIMEOUT_MS);
	/* From now on requests come on the rings: bytes sent after this one,
	 * before its answer, would be lost. */
	if (!ret && recv_ahead_buffered(&s->c.ahead)) {
		for (int i = 0; i < SHM_CHAN_FDS; i++)
			close(fds[i]);
		ret = -EPROTO;
	}
	if (!ret)
		ret = shm_chan_attach(&s->c.shm, fds, req.ring_bytes, s->c.fd, s->c.shm_at);
	if (ret) {
		pr_warn("session %s: shared-memory channel refused (%s)", s->id, strerror(-ret));
		status = CUDA_ERROR_INVALID_VALUE;
	}
	ret = reply_status(&s->c, h, status, 0);
	if (!ret && status == CUDA_SUCCESS) {
		s->c.shm_on = true;
		s->ex.host.sock = s->c.fd;
		pr_info("session %s: on shared memory (rings of %llu bytes)", s->id,
			(unsigned long long)req.ring_bytes);
	}
	return ret;
}

/* A domain's session moves onto rings in a slot of the domain's ivshmem BAR:
 * the host's file of the domain the channel belongs to (never a path the
 * guest names), a slot nobody else holds, mapped alone. The reply goes on
 * the stream; from then on the stream carries only doorbell bytes. */
static int ivshmem_attach(struct worker_session *s, const struct wire_header *h, struct wire_cursor *cur)
{
	const struct worker_config *cfg = s->cfg;
	struct wire_ivshmem_attach_req req;
	struct wire_ivshmem_attach_rep rep = { 0 };
	struct ivshmem_layout planned;
	char uuid[VM_UUID_LEN + 1], path[4200];
	CUresult status = CUDA_SUCCESS;
	struct stat st;
	int ret;

	if (s->c.shm_on || wire_ivshmem_attach_req_decode(cur, &req) < 0)
		return reply_status(&s->c, h, CUDA_ERROR_INVALID_VALUE, WIRE_F_ERROR);
	if (!cfg->ivshmem_dir || !cfg->session_id || !vm_session_id_valid(cfg->session_id))
		return reply_status(&s->c, h, CUDA_ERROR_NOT_SUPPORTED, WIRE_F_ERROR);
	memcpy(uuid, cfg->session_id, VM_UUID_LEN);
	uuid[VM_UUID_LEN] = 0;
	ret = ivshmem_host_path(cfg->ivshmem_dir, uuid, path, sizeof(path));
	if (ret || stat(path, &st))
		return reply_status(&s->c, h, CUDA_ERROR_NOT_SUPPORTED, WIRE_F_ERROR);
	/* The ring size is checked against the layout before anything is claimed. */
	if (!req.ring_bytes && !ivshmem_layout_plan((uint64_t)st.st_size, cfg->ivshmem_slot_bytes, &planned))
		req.ring_bytes = ivshmem_ring_bytes_pick(&planned);
	ret = ivshmem_host_claim(&s->c.bar, path, cfg->ivshmem_slot_bytes, req.ring_bytes, req.want_slot);
	if (!ret) {
		ret = shm_chan_region_host(&s->c.shm, s->c.bar.fd, s->c.bar.offset, s->c.bar.layout.slot_bytes,
					   req.ring_bytes, s->c.fd, s->c.shm_at);
		if (ret)
			ivshmem_host_release(&s->c.bar);
	}
	if (ret) {
		pr_warn("session %s: ivshmem %s refused (%s)", s->id, path, strerror(-ret));
		status = ret == -EBUSY ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
		return reply_status(&s->c, h, status, WIRE_F_ERROR);
	}
	rep.slot = s->c.bar.slot;
	rep.offset = s->c.bar.offset;
	rep.bytes = s->c.bar.layout.slot_bytes;
	rep.ring_bytes = req.ring_bytes;
	wire_msg_reset(&s->c.reply);
	wire_put_u32(&s->c.reply, CUDA_SUCCESS);
	wire_ivshmem_attach_rep_encode(&s->c.reply, &rep);
	ret = reply_send(&s->c, h, 0);
	if (ret) {
		shm_chan_close(&s->c.shm);
		ivshmem_host_release(&s->c.bar);
		return ret;
	}
	s->c.shm_on = true;
	/* Pinned buffers may be carved from the slot past the rings. */
	s->ex.host.bar_fd = s->c.bar.fd;
	s->ex.host.bar_offset = s->c.bar.offset;
	s->ex.host.bar_bytes = s->c.bar.layout.slot_bytes;
	s->ex.host.bar_carve = SHM_CHAN_BYTES(rep.ring_bytes);
	/* The stream's bytes are doorbells now, drained unread: a host
	 * function's descriptor (HOSTFN_ATTACH_FD) cannot come on it. */
	s->ex.host.conn_sock = -1;
	pr_info("session %s: on ivshmem %s slot %u (rings of %llu bytes)", s->id, path, rep.slot,
		(unsigned long long)rep.ring_bytes);
	return 0;
}

/* The supervisor's slot shows the session's device memory (ternd status). */
static void slot_memory_changed(void *opaque, uint64_t bytes)
{
	struct session_slot *slot = opaque;

	atomic_store_explicit(&slot->memory, bytes, memory_order_relaxed);
}

/* Reserve the address range the shared-memory rings will take, before the
 * driver starts: mapped later, where the kernel would choose, they can land
 * in the hole right below the driver's own reservations, where the driver
 * then places __managed__ variables (32 MiB aligned, just below what it
 * holds). A new session maps the rings before its guest loads its modules,
 * a restored one after the restore loaded them: without this the restored
 * worker's driver may place a variable 32 MiB away from where the guest
 * mirrors it (checkpoint.md, "Module globals"). */
static void shm_reserve(struct worker_conn *c)
{
	void *at = mmap(NULL, SHM_CHAN_MAP_MAX, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	c->shm_at = at == MAP_FAILED ? NULL : at;
}

/* The OpenCL executor's part of a snapshot (docs/opencl.md, "Snapshots"). */
static int opencl_save(void *arg, struct tracker *journal, char *err, size_t errlen)
{
	return cl_exec_snapshot_save(arg, journal, err, errlen);
}

static int opencl_restore(void *arg, struct tracker *saved, char *err, size_t errlen)
{
	return cl_exec_snapshot_restore(arg, saved, err, errlen);
}

/* The backend on @ecfg's device, the session's exec and checkpoint state
 * on it. 0, or -errno with nothing left open. */
static int session_backend_open(struct worker_session *s, const struct exec_config *ecfg,
				struct session_slot *slot)
{
	struct backend *be = NULL;
	int ret;

	if (!s->c.shm_at)
		shm_reserve(&s->c);
	ret = backend_open(s->cfg->backend, &s->cfg->backend_cfg, &be);
	if (!ret)
		ret = exec_open(&s->ex, be, ecfg, &(struct exec_observer){ slot ? slot_memory_changed : NULL, slot });
	if (ret) {
		pr_err("session %s: cannot open the %s backend on device %d (%d)", s->id, s->cfg->backend,
		       ecfg->device, ret);
		backend_close(be);
		memset(&s->ex, 0, sizeof(s->ex));
		return ret;
	}
	checkpoint_init(&s->ck, &s->ex, &(struct checkpoint_part){ &s->cl, HANDLE_CL_PLATFORM, HANDLE_CL_EVENT,
								   opencl_save, opencl_restore });
	if (slot)
		atomic_store_explicit(&slot->device, s->ex.dev.list[0].ordinal, memory_order_relaxed);
	return 0;
}

static void session_backend_close(struct worker_session *s)
{
	struct backend *be = s->ex.be;

	checkpoint_close(&s->ck);
	exec_close(&s->ex);
	backend_close(be);
	memset(&s->ex, 0, sizeof(s->ex));
}

static int session_open(struct worker_session *s, const struct wire_hello_req *hello,
			struct session_slot *slot, struct control_reply *ready)
{
	const struct worker_config *cfg = s->cfg;
	struct worker_config local = *cfg;
	struct control_link m;
	char answer[WORKER_LINE_MAX], snap[CONTROL_NAME_MAX + 1] = "", err[256];
	int device = cfg->exec_cfg.device, ret;

	if (cfg->cmd_fd >= 0) {
		memset(&m, 0, sizeof(m));
		m.type = CONTROL_LINK_HELLO;
		m.last_seq = hello->last_seq;
		snprintf(m.session, sizeof(m.session), "%s", s->id);
		if (cmd_send(cfg, &m))
			return -EPIPE;
		for (;;) {
			ret = control_line_read(cfg->cmd_fd, answer, sizeof(answer), -1);
			if (ret < 0)
				return ret;
			if (control_link_decode(answer, (size_t)ret, &m, err, sizeof(err))) {
				pr_err("session %s: bad answer to its hello from the supervisor: %s", s->id, err);
				return -EPROTO;
			}
			if (m.type == CONTROL_LINK_WAIT) {
				pr_info("session %s is suspended: waiting for ckpt resume", s->id);
				continue;
			}
			break;
		}
		if (m.type == CONTROL_LINK_REFUSE) {
			pr_warn("session %s refused: %s", s->id, m.reason);
			return -EBUSY;
		}
		if (m.type == CONTROL_LINK_RESTORE) {
			memcpy(snap, m.snapshot, sizeof(snap));
			device = m.device;
		} else if (m.type != CONTROL_LINK_NEW) {
			pr_err("session %s: unexpected %s answer to its hello", s->id, control_link_type_name(m.type));
			return -EPROTO;
		}
	}
	local.exec_cfg.device = device;
	/* A prepared worker's device is the plan's; were it another, the
	 * prepared memory is of no use. */
	if (s->ex.be && s->ex.cfg.device != device)
		session_backend_close(s);
	if (!s->ex.be) {
		ret = session_backend_open(s, &local.exec_cfg, slot);
		if (ret) {
			control_reply_error(ready, "session %s: no device %d on the %s backend", s->id, device,
					    cfg->backend);
			return ret;
		}
	}
	s->ex.ipc.fd = cfg->ipc_fd;
	if (cfg->state_dir &&
	    journal_dir_reset(cfg->state_dir, s->id, s->journal_dir, sizeof(s->journal_dir)) == 0)
		exec_journal_open(&s->ex, s->journal_dir, s->id);
	if (snap[0]) {
		char sdir[4200];
		bool prefilled = s->ck.held != NULL;

		store_dir(cfg, sdir, sizeof(sdir));
		ret = checkpoint_restore(&s->ck, sdir, snap, &s->resume_seq, &s->resume_reply,
					 &s->resume_reply_len, ready);
		if (ret && prefilled) {
			/* Over what a prefill left, the restore failed: once more
			 * in a worker as fresh as any. */
			pr_warn("session %s: restore over the prepared memory failed: restoring afresh", s->id);
			session_backend_close(s);
			cl_exec_close(&s->cl);
			cl_exec_init(&s->cl, &cfg->opencl);
			control_reply_release(ready);
			memset(ready, 0, sizeof(*ready));
			ret = session_backend_open(s, &local.exec_cfg, slot);
			if (!ret && cfg->state_dir &&
			    journal_dir_reset(cfg->state_dir, s->id, s->journal_dir, sizeof(s->journal_dir)) == 0)
				exec_journal_open(&s->ex, s->journal_dir, s->id);
			if (!ret)
				ret = checkpoint_restore(&s->ck, sdir, snap, &s->resume_seq, &s->resume_reply,
							 &s->resume_reply_len, ready);
		}
		if (ret)
			return ret;
		s->seq = s->resume_seq;
		s->c.durable_seq = s->resume_seq;
		s->ex.session.resume_seq = s->resume_seq;
		pr_info("session %s restored from '%s' at request %llu", s->id, snap,
			(unsigned long long)s->resume_seq);
	} else {
		ready->kind = CONTROL_REPLY_RESTORE;
		snprintf(ready->restore.session, sizeof(ready->restore.session), "%s", s->id);
	}
	return 0;
}

/* Answer every synchronisation whose wait completed. 0, or -errno when the
 * guest is gone. */
static int waits_answer(struct worker_session *s, struct session_slot *slot)
{
	struct wire_header h;
	struct exec_wait w;

	while (worker_waits_reap(s->waits, &h, &w)) {
		wire_msg_reset(&s->wait_reply);
		/* A copy is served now, in its request's context, unless other
		 * threads queued more on its stream: then it waits again. */
		exec_context_switch(&s->ex, h.ctx);
		if (exec_wait_complete(&s->ex, &w, true, &s->wait_reply) &&
		    (!worker_waits_start(s->waits, &h, &w) ||
		     exec_wait_complete(&s->ex, &w, false, &s->wait_reply)))
			continue;
		/* A replayed one whose guest had its answer (rpc.c's replay)
		 * asked for none: a failure now is a deferred error's. */
		if (h.flags & WIRE_F_NO_REPLY) {
			uint32_t st = reply_status_of(&s->wait_reply);

			if (st != CUDA_SUCCESS && s->deferred_error == CUDA_SUCCESS)
				s->deferred_error = (CUresult)st;
			continue;
		}
		/* A synchronisation answers the first error of earlier deferred
		 * calls, as when it was served on the dispatch thread. */
		if (s->deferred_error != CUDA_SUCCESS && wire_call_synchronises(h.call)) {
			wire_msg_reset(&s->wait_reply);
			wire_put_u32(&s->wait_reply, (uint32_t)s->deferred_error);
			s->deferred_error = CUDA_SUCCESS;
		}
		if (log_level_get() >= LOG_DEBUG)
			pr_debug("request %llu %s -> %u (waited)", (unsigned long long)h.seq,
				 wire_call_name(h.call), reply_status_of(&s->wait_reply));
		if (slot)
			atomic_fetch_add_explicit(&slot->round_trips, 1, memory_order_relaxed);
		if (reply_msg_send(&s->c, &s->wait_reply, &h, 0))
			return -EPIPE;
	}
	return 0;
}

/* Whether the work @w waits for is done within WAIT_QUICK_NS, while no
 * other request is waiting on the ring. An error of the marker is left to
 * the usual paths to report. */
static bool wait_quick(struct worker_session *s, const struct exec_wait *w)
{
	uint64_t t0 = monotonic_ns();

	if (!w->marker)
		return false;
	for (;;) {
		CUresult r = s->ex.be->cuEventQuery(w->marker);

		if (r == CUDA_SUCCESS)
			return true;
		if (r != CUDA_ERROR_NOT_READY || (s->c.shm_on && shm_chan_readable(&s->c.shm)))
			return false;
		if (monotonic_ns() - t0 >= WAIT_QUICK_NS)
			return false;
	}
}

/* Request @h, a synchronisation, waits off the dispatch thread: true when
 * it was handed to a waiter (answered by waits_answer), false when the
 * dispatcher is to serve it. Its context is current. */
static bool wait_aside(struct worker_session *s, const struct wire_header *h, const struct wire_cursor *cur)
{
	struct exec_wait w;

	if (!s->waits || !exec_wait_prepare(&s->ex, h->call, cur, &w))
		return false;
	if (wait_quick(s, &w)) {
		/* Done already: served here as any request, without waiting. */
		exec_wait_finish(&s->ex, &w);
		return false;
	}
	if (worker_waits_start(s->waits, h, &w)) {
		exec_wait_finish(&s->ex, &w);
		return false;
	}
	if (h->seq > s->seq)
		s->seq = h->seq;
	worker_waits_spin(s->waits, WAIT_SPIN_NS);
	return true;
}

/* For the ring's spin: a synchronisation's answer is due. */
static bool wait_done(void *waits)
{
	return worker_waits_spin(waits, 0);
}

static struct worker_session *session_alloc(const struct worker_config *cfg, int fd)
{
	struct worker_session *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->c.bar.fd = -1;
	s->cfg = cfg;
	s->c.fd = fd;
	s->passed_fd = -1;
	cl_exec_init(&s->cl, &cfg->opencl);
	wire_msg_init(&s->c.reply);
	wire_msg_init(&s->wait_reply);
	return s;
}

/* From the hello on: open the session and serve it until it ends; frees @s
 * and closes its connection. Returns the process exit status. */
static int session_serve(struct worker_session *s, struct session_slot *slot)
{
	const struct worker_config *cfg = s ? s->cfg : NULL;
	struct wire_hello_req *hello = calloc(1, sizeof(*hello));
	struct wire_header h;
	struct wire_cursor cur;
	struct control_reply ready = { 0 };
	char line[WORKER_LINE_MAX];
	size_t line_len = 0;
	unsigned unpolled = 0;
	int ret, status = 1, fd = s ? s->c.fd : -1;
	bool opened = false, end = false;

	if (!s || !hello)
		goto out;
	s->c.tls = cfg->tls;
	if (s->c.tls)
		tls_conn_set_send_wait(s->c.tls, true);     /* the supervisor's sends did not wait */
	if (recv_ahead_open(&s->c.ahead, fd, s->c.tls, WORKER_READ_AHEAD))
		goto out;
	ret = hello_take(&s->c, cfg, &h, hello);
	if (ret)
		goto out;
	if (cfg->session_id)
		snprintf(s->id, sizeof(s->id), "%s", cfg->session_id);
	else
		worker_session_id_clean(s->id, hello->session);
	if (slot) {
		snprintf(slot->id, sizeof(slot->id), "%s", s->id);
		atomic_store_explicit(&slot->guest_pid, (int32_t)hello->pid, memory_order_relaxed);
	}
	ret = session_open(s, hello, slot, &ready);
	if (ret && ready.kind != CONTROL_REPLY_ERROR)
		control_reply_error(&ready, "session %s refused: %s", s->id, strerror(-ret));
	cmd_reply_send(cfg, CONTROL_LINK_READY, &ready);
	if (ret) {
		reply_status(&s->c, &h, ret == -EBUSY ? CUDA_ERROR_NOT_PERMITTED : CUDA_ERROR_NO_DEVICE, 0);
		if (s->ex.be)
			goto out_exec;
		goto out;
	}
	opened = true;
	oom_score_adj_set(OOM_ADJ_SESSION);
	s->ex.host.conn_sock = s->c.fd;
	s->ex.host.fds_take = conn_fds_take;
	s->ex.host.fds_arg = &s->c.ahead;
	/* The callback connection of a tls:// session is TLS as well. */
	s->ex.host.tls = s->c.tls ? cfg->tls_creds : NULL;
	s->waits = worker_waits_open(s->ex.be);
	if (!s->waits)
		pr_warn("session %s: no waiters: a synchronisation holds every thread's requests", s->id);
	if (slot)
		atomic_store_explicit(&slot->state, SESSION_ACTIVE, memory_order_release);
	pr_info("session %s: guest pid %u on device %d", s->id, hello->pid, s->ex.cfg.device);
	wire_cursor_init(&cur, s->c.payload, h.length);
	s->ex.session.credential = cfg->credential_wire;
	s->ex.session.credential_len = cfg->credential_wire ? AUTH_CREDENTIAL_BYTES : 0;
	/* The hello is answered like any call, with where to resume. */
	wire_msg_reset(&s->c.reply);
	ret = wire_dispatch(&s->ex, h.call, &cur, &s->c.reply);
	if (ret || reply_send(&s->c, &h, 0))
		goto out_exec;
	while (!end && !worker_stopping) {
		/* A ring is watched by spinning, without a system call, as long as
		 * requests keep coming. */
		bool input = !s->held && s->c.shm_on &&
			     shm_chan_spin_until(&s->c.shm, worker_waits_active(s->waits) ? wait_done : NULL, s->waits);
		/* Requests read ahead are taken without a poll each, too. */
		input = input || (!s->held && !s->c.shm_on && recv_ahead_ready(&s->c.ahead));
		uint16_t flags = 0;

		if (waits_answer(s, slot)) {
			pr_info("session %s: guest gone", s->id);
			break;
		}
		exec_host_retired_reap(&s->ex);

		/* The supervisor's and the snapshot's descriptors still get a look
		 * every POLL_EVERY requests. */
		if (!input || ++unpolled >= POLL_EVERY) {
			/* A snapshot waits until no request does: its own
			 * synchronisation would wait for what they wait for. */
			struct pollfd pfd[5] = {
				{ .fd = s->held ? -1 : s->c.shm_on ? s->c.shm.efd_self : s->c.fd, .events = POLLIN },
				{ .fd = worker_waits_active(s->waits) ? -1 : cfg->cmd_fd, .events = POLLIN },
				{ .fd = s->job ? checkpoint_job_fd(s->job) : -1, .events = POLLIN },
				{ .fd = s->c.shm_on && !s->held ? s->c.fd : -1, .events = POLLRDHUP },
				{ .fd = worker_waits_fd(s->waits), .events = POLLIN },
			};
			bool slept = false;
			/* Bytes read ahead (ours, or records GnuTLS decrypted) are
			 * not on the socket any more. */
			bool buffered = !s->held && !s->c.shm_on && recv_ahead_ready(&s->c.ahead);
			/* Buffers the guest freed wait for an idle moment, not for its next request. */
			int timeout = input || buffered ? 0 : exec_host_retired_pending(&s->ex) ? 2 : -1;

			unpolled = 0;
			if (!input && s->c.shm_on && !s->held) {
				if (shm_chan_idle_begin(&s->c.shm))
					timeout = 0;
				else
					slept = true;
			}
			ret = poll(pfd, 5, timeout);
			if (slept)
				shm_chan_idle_end(&s->c.shm);
			if (ret < 0) {
				if (errno == EINTR)
					continue;
				break;
			}
			if (pfd[2].revents & POLLIN) {
				if (snapshot_end(s))
					break;  /* suspended: the guest comes back through a restore */
			}
			if (pfd[1].revents & (POLLIN | POLLHUP)) {
				char *nl;

				if (cmd_read(cfg->cmd_fd, line, sizeof(line), &line_len, &s->passed_fd) <= 0) {
					pr_info("session %s: supervisor gone", s->id);
					break;
				}
				while (!end && (nl = memchr(line, '\n', line_len))) {
					*nl = 0;
					end = cmd_handle(s, line, (size_t)(nl - line));
					cmd_consume(line, &line_len, (size_t)(nl + 1 - line));
				}
				if (end)
					break;
			}
			if (s->held)
				continue;       /* until the supervisor releases it */
			if (s->c.shm_on) {
				input = shm_chan_readable(&s->c.shm);
				if (!input && (pfd[3].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
					pr_info("session %s: guest gone", s->id);
					break;
				}
			} else {
				input = buffered || pfd[0].revents & (POLLIN | POLLHUP | POLLERR);
			}
			if (!input)
				continue;
		}
		do {
			ret = request_read(&s->c, &h);
		} while (ret == 1);
		if (ret == -EAGAIN)
			continue;       /* the rest of it, or the supervisor, first */
		if (ret) {
			if (ret != -ECONNRESET)
				pr_info("session %s: connection closed (%s)", s->id, strerror(-ret));
			break;
		}
		wire_cursor_init(&cur, s->c.payload, h.length);
		if (h.call == WIRE_CALL_SHM_ATTACH) {
			if (shm_attach(s, &h, &cur))
				break;
			continue;
		}
		if (h.call == WIRE_CALL_IVSHMEM_ATTACH) {
			if (ivshmem_attach(s, &h, &cur))
				break;
			continue;
		}
		/* Sequence number 0 is session plumbing (a buffer shared again
		 * after a reconnect): outside the request order. */
		if (s->resume_seq && h.seq && h.seq <= s->resume_seq && !wire_call_waits(h.call)) {
			if (request_resend(s, &h, &cur))
				break;
			continue;
		}
		wire_msg_reset(&s->c.reply);
		exec_host_trim(&s->ex);
		ret = exec_context_switch(&s->ex, h.ctx);
		if (ret != CUDA_SUCCESS) {
			wire_put_u32(&s->c.reply, (uint32_t)ret);
			flags = WIRE_F_ERROR;
		} else if (wait_aside(s, &h, &cur)) {
			/* A snapshot keeps c.reply as the answer to s->seq; a
			 * waited request is waited for again instead, but the
			 * message must be a whole one. */
			wire_put_u32(&s->c.reply, (uint32_t)CUDA_SUCCESS);
			if (slot)
				atomic_fetch_add_explicit(&slot->calls, 1, memory_order_relaxed);
			continue;
		} else {
			ret = request_dispatch(s, h.call, &cur, &s->c.reply);
			if (ret < 0) {
				pr_warn("request %u (%s): %s", h.call,
					wire_call_name(h.call) ? wire_call_name(h.call) : "unknown",
					ret == -ENOSYS ? "unknown call" : "malformed payload");
				wire_msg_reset(&s->c.reply);
				wire_put_u32(&s->c.reply, request_refused_status(h.call, ret));
				flags = WIRE_F_ERROR;
			}
		}
		if (h.seq > s->seq)
			s->seq = h.seq;
		/* The per-call trace point: every request with its CUresult. */
		if (log_level_get() >= LOG_DEBUG)
			pr_debug("request %llu %s -> %u", (unsigned long long)h.seq,
				 wire_call_name(h.call) ? wire_call_name(h.call) : "?",
				 reply_status_of(&s->c.reply));
		if (slot)
			atomic_fetch_add_explicit(&slot->calls, 1, memory_order_relaxed);
		if (h.flags & WIRE_F_NO_REPLY) {
			uint32_t st = reply_status_of(&s->c.reply);

			if (st != CUDA_SUCCESS && s->deferred_error == CUDA_SUCCESS) {
				pr_debug("deferred %s failed with %u", wire_call_name(h.call) ? wire_call_name(h.call) : "?", st);
				s->deferred_error = (CUresult)st;
			}
			continue;
		}
		/* The calls at which CUDA reports the errors of earlier
		 * asynchronous work (the table's `sync` flag): a deferred
		 * request's failure is their answer (docs/wire-protocol.md). */
		if (s->deferred_error != CUDA_SUCCESS && wire_call_synchronises(h.call)) {
			wire_msg_reset(&s->c.reply);
			wire_put_u32(&s->c.reply, (uint32_t)s->deferred_error);
			s->deferred_error = CUDA_SUCCESS;
		}
		if (slot)
			atomic_fetch_add_explicit(&slot->round_trips, 1, memory_order_relaxed);
		if (reply_send(&s->c, &h, flags)) {
			pr_info("session %s: guest gone", s->id);
			break;
		}
		if (h.call == WIRE_CALL_GOODBYE)
			end = true;
	}
	if (s->job) {
		/* Never leave a snapshot half written: finish it before leaving. */
		snapshot_end(s);
	}
	status = 0;
out_exec:
	worker_waits_close(s->waits);
	cl_exec_close(&s->cl);
	if (opened || s->ex.be)
		session_backend_close(s);
	if (s && s->journal_dir[0] && !journal_dir_empty(s->journal_dir))
		rmdir(s->journal_dir);
out:
	if (s) {
		if (s->passed_fd >= 0)
			close(s->passed_fd);
		free(s->resume_reply);
		free(s->c.payload);
		recv_ahead_close(&s->c.ahead);
		if (s->c.shm_on)
			shm_chan_close(&s->c.shm);
		ivshmem_host_release(&s->c.bar);
		if (s->c.shm_at)
			munmap(s->c.shm_at, SHM_CHAN_MAP_MAX);
		wire_msg_release(&s->c.reply);
		wire_msg_release(&s->wait_reply);
		free(s);
	}
	if (cfg)
		tls_conn_close(cfg->tls);
	free(hello);
	if (fd >= 0)
		close(fd);
	return status;
}

int worker_run(const struct worker_config *cfg, int fd, struct session_slot *slot)
{
	struct worker_session *s;

	/* Forked from the supervisor, last in the OOM killer's order: not
	 * before there is a session to lose (oom.h). */
	oom_score_adj_set(OOM_ADJ_NOTHING_HELD);
	s = session_alloc(cfg, fd);
	if (!s) {
		close(fd);
		return 1;
	}
	return session_serve(s, slot);
}

/* What came with an adopt message: the guest's connection and hello, and
 * the session's credentials (the adopted worker's configuration points at
 * them until it exits). */
struct adoption {
	struct worker_config cfg;
	struct wire_header hello_header;
	uint8_t *hello_payload;
	uint8_t credential[AUTH_CREDENTIAL_BYTES];
	uint8_t credential_wire[AUTH_CREDENTIAL_BYTES];
	char session_id[SESSION_ID_MAX];
	int fd;
};

/* Read the @m.length bytes of hello that follow an adopt message: @have of
 * them came with it at @rest. 0, or -errno. */
static int adoption_take(struct adoption *a, const struct control_link *m, const char *rest, size_t have,
			 int fd, int cmd_fd)
{
	size_t want = m->length, got = have < want ? have : want;
	uint8_t *blob;

	a->fd = fd;
	if (fd < 0 || want < sizeof(a->hello_header) || want > sizeof(a->hello_header) + (1u << 20) ||
	    have > want || control_hex_get(m->secret, a->credential, sizeof(a->credential)) ||
	    control_hex_get(m->wire_secret, a->credential_wire, sizeof(a->credential_wire)))
		return -EPROTO;
	blob = malloc(want);
	if (!blob)
		return -ENOMEM;
	memcpy(blob, rest, got);
	while (got < want) {
		ssize_t n = read(cmd_fd, blob + got, want - got);

		if (n <= 0) {
			free(blob);
			return n ? -errno : -EPIPE;
		}
		got += (size_t)n;
	}
	memcpy(&a->hello_header, blob, sizeof(a->hello_header));
	if (a->hello_header.length != want - sizeof(a->hello_header)) {
		free(blob);
		return -EPROTO;
	}
	a->hello_payload = blob;
	memmove(blob, blob + sizeof(a->hello_header), a->hello_header.length);
	snprintf(a->session_id, sizeof(a->session_id), "%s", m->session);
	a->cfg.hello_header = &a->hello_header;
	a->cfg.hello_payload = a->hello_payload;
	a->cfg.credential = a->credential;
	a->cfg.credential_wire = a->credential_wire;
	a->cfg.has_owner_uid = m->has_owner_uid;
	a->cfg.owner_uid = m->owner_uid;
	a->cfg.session_id = a->session_id;
	a->cfg.tls = NULL;
	a->cfg.tls_creds = NULL;
	if (!m->vm)
		a->cfg.ivshmem_dir = NULL;
	return 0;
}

int worker_standby_run(const struct worker_config *cfg, struct session_slot *slot)
{
	static struct adoption a;
	struct worker_session *s;
	char line[WORKER_LINE_MAX], prefill[CONTROL_NAME_MAX + 1] = "", sdir[4200], err[512];
	size_t line_len = 0;
	int status;

	oom_score_adj_set(OOM_ADJ_NOTHING_HELD);
	a.cfg = *cfg;
	a.fd = -1;
	s = session_alloc(&a.cfg, -1);
	if (!s)
		return 1;
	snprintf(s->id, sizeof(s->id), "%s", cfg->session_id ? cfg->session_id : "prepared");
	if (session_backend_open(s, &cfg->exec_cfg, slot)) {
		free(s);
		return 1;
	}
	store_dir(cfg, sdir, sizeof(sdir));
	pr_info("prepared worker of session %s on device %d", s->id, cfg->exec_cfg.device);
	while (!worker_stopping) {
		struct pollfd pfd = { .fd = cfg->cmd_fd, .events = POLLIN };
		ssize_t n;
		char *nl;

		/* Only the latest round named is worth filling: rounds that came
		 * while one was filled are passed over. */
		if (prefill[0] && poll(&pfd, 1, 0) == 0) {
			struct control_link done = { .type = CONTROL_LINK_PREFILLED };

			if (checkpoint_prefill(&s->ck, sdir, prefill, err, sizeof(err)))
				pr_warn("session %s: prefill of '%s' failed: %s", s->id, prefill, err);
			/* The receiver acknowledges the round to the source once
			 * it is here: the next round's delta comes over it. */
			snprintf(done.snapshot, sizeof(done.snapshot), "%s", prefill);
			cmd_send(cfg, &done);
			prefill[0] = 0;
			continue;
		}
		n = cmd_read(cfg->cmd_fd, line, sizeof(line), &line_len, &a.fd);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;  /* the supervisor gave the session up */
		while ((nl = memchr(line, '\n', line_len))) {
			struct control_link m;
			size_t used = (size_t)(nl - line) + 1;

			*nl = 0;
			if (control_link_decode(line, used - 1, &m, err, sizeof(err))) {
				pr_warn("bad message from the supervisor: %s", err);
			} else if (m.type == CONTROL_LINK_PREFILL) {
				snprintf(prefill, sizeof(prefill), "%s", m.snapshot);
			} else if (m.type == CONTROL_LINK_ADOPT) {
				int fd = a.fd, ret;

				a.fd = -1;
				ret = adoption_take(&a, &m, nl + 1, line_len - used, fd, cfg->cmd_fd);
				control_link_release(&m);
				if (ret) {
					pr_err("session %s: cannot take its guest: %s", s->id, strerror(-ret));
					if (fd >= 0)
						close(fd);
					break;
				}
				s->c.fd = a.fd;
				status = session_serve(s, slot);
				free(a.hello_payload);
				explicit_bzero(&a, sizeof(a));
				return status;
			} else {
				pr_warn("unexpected %s message to a prepared worker", control_link_type_name(m.type));
			}
			control_link_release(&m);
			cmd_consume(line, &line_len, used);
		}
	}
	pr_info("prepared worker of session %s: no guest came", s->id);
	if (a.fd >= 0)
		close(a.fd);
	session_backend_close(s);
	wire_msg_release(&s->c.reply);
	wire_msg_release(&s->wait_reply);
	if (s->c.shm_at)
		munmap(s->c.shm_at, SHM_CHAN_MAP_MAX);
	free(s);
	return 0;
}
