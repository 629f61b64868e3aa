#define LOG_PREFIX "preauth: "
#include "preauth.h"
#include "log.h"
#include "monotonic.h"
#include "transport.h"
#include "wire_calls.h"

#include <arpa/inet.h>
#include <cuda.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/vm_sockets.h>


int preauth_init(struct preauth *pa, const struct preauth_config *cfg)
{
	memset(pa, 0, sizeof(*pa));
	pa->cfg = *cfg;
	pa->conns = calloc(cfg->max ? cfg->max : 1, sizeof(*pa->conns));
	if (!pa->conns)
		return -ENOMEM;
	for (unsigned i = 0; i < cfg->max; i++)
		pa->conns[i].fd = -1;
	return 0;
}

void preauth_forget(struct preauth *pa, struct preauth_conn *c, bool close_fd)
{
	if (c->fd < 0)
		return;
	if (close_fd)
		close(c->fd);
	tls_conn_close(c->tls);
	free(c->payload);
	explicit_bzero(c->nonce, sizeof(c->nonce));
	*c = (struct preauth_conn){ .fd = -1 };
	pa->used--;
}

void preauth_release(struct preauth *pa)
{
	if (pa->conns)
		for (unsigned i = 0; i < pa->cfg.max; i++)
			preauth_forget(pa, &pa->conns[i], true);
	free(pa->conns);
	pa->conns = NULL;
}

/* Who is behind @fd, as the per-source limit counts: a unix peer by uid, a
 * tcp one by address (not port), a vsock one by CID. */
static void peer_source(struct preauth_conn *c)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	char addr[INET6_ADDRSTRLEN] = "?";

	snprintf(c->source, sizeof(c->source), "unknown");
	if (getpeername(c->fd, (struct sockaddr *)&ss, &len))
		return;
	if (ss.ss_family == AF_UNIX && !getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen)) {
		c->has_uid = true;
		c->uid = cred.uid;
		snprintf(c->source, sizeof(c->source), "uid %u", (unsigned)cred.uid);
	} else if (ss.ss_family == AF_INET) {
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, addr, sizeof(addr));
		snprintf(c->source, sizeof(c->source), "%s", addr);
	} else if (ss.ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, addr, sizeof(addr));
		snprintf(c->source, sizeof(c->source), "%s", addr);
	} else if (ss.ss_family == AF_VSOCK) {
		snprintf(c->source, sizeof(c->source), "cid %u", ((struct sockaddr_vm *)&ss)->svm_cid);
	}
}

/* Enter @probe (its fd and source set) into the table, or close it when a
 * limit is reached. */
static void preauth_enter(struct preauth *pa, struct preauth_conn *probe, unsigned listener, int domain)
{
	struct preauth_conn *slot = NULL;
	unsigned same = 0;

	for (unsigned i = 0; i < pa->cfg.max; i++) {
		struct preauth_conn *c = &pa->conns[i];

		if (c->fd < 0) {
			if (!slot)
				slot = c;
		} else if (!strcmp(c->source, probe->source)) {
			same++;
		}
	}
	if (!slot || same >= pa->cfg.per_source_max) {
		/* Said once per hundred: a flood must not flood the log too. */
		if (pa->refused++ % 100 == 0)
			pr_warn("%s: %u connections of this source and %u in all wait for their hello: "
				"connection closed (%llu so far)", probe->source, same, pa->used,
				(unsigned long long)pa->refused);
		tls_conn_close(probe->tls);
		close(probe->fd);
		return;
	}
	probe->payload = malloc(PREAUTH_PAYLOAD_MAX);
	if (!probe->payload) {
		tls_conn_close(probe->tls);
		close(probe->fd);
		return;
	}
	probe->listener = listener;
	probe->domain = domain;
	probe->deadline_ms = monotonic_ms() + (uint64_t)pa->cfg.timeout_ms;
	*slot = *probe;
	pa->used++;
}

void preauth_accept(struct preauth *pa, int listen_fd, unsigned listener, struct tls_creds *tls)
{
	struct preauth_conn probe = { .fd = transport_accept(listen_fd) };
	char err[256];

	if (probe.fd < 0) {
		pr_warn("accept failed: %s", strerror(-probe.fd));
		return;
	}
	peer_source(&probe);
	if (tls) {
		if (tls_conn_open(tls, probe.fd, NULL, &probe.tls, err, sizeof(err))) {
			pr_warn("%s: %s: connection closed", probe.source, err);
			close(probe.fd);
			return;
		}
		/* The supervisor never waits on a guest. */
		tls_conn_set_send_wait(probe.tls, false);
	}
	preauth_enter(pa, &probe, listener, -1);
}

void preauth_adopt(struct preauth *pa, int fd, int domain, const char *source)
{
	/* The relay's socketpair says nothing of the guest: no uid. */
	struct preauth_conn probe = { .fd = fd };

	snprintf(probe.source, sizeof(probe.source), "%s", source);
	preauth_enter(pa, &probe, 0, domain);
}

static int frame_send(struct preauth_conn *c, uint32_t call, uint16_t flags, struct wire_msg *m)
{
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .flags = (uint16_t)(WIRE_F_REPLY | flags), .call = call, .seq = c->h.seq };
	int n = wire_msg_finish(m, &h, iov);

	/* A few dozen bytes into an empty socket buffer: this does not block
	 * (and a TLS session's sends would fail rather than wait). */
	if (n < 0)
		return n;
	if (c->tls)     /* nothing in clear once TLS is on (tls_step's refusal aside) */
		return c->tls_done ? tls_conn_send(c->tls, iov, n) : -ENOTCONN;
	return wire_send(c->fd, iov, n);
}

static void status_send(struct preauth_conn *c, uint32_t call, uint32_t status, uint16_t flags)
{
	struct wire_msg m;

	wire_msg_init(&m);
	wire_put_u32(&m, status);
	frame_send(c, call, flags, &m);
	wire_msg_release(&m);
}

/* What the connection has now, up to @want bytes: the count, 0 at its end,
 * -EAGAIN when nothing more came yet, or -errno. */
static ssize_t conn_recv_some(struct preauth_conn *c, void *dst, size_t want)
{
	ssize_t n;

	if (c->tls) {
		n = tls_conn_recv_some(c->tls, dst, want);
		return n == -ECONNRESET ? 0 : n;
	}
	do
		n = recv(c->fd, dst, want, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return n;
}

/* Drive @c's TLS handshake on: PREAUTH_MORE until it is over (c->tls_done
 * then), or PREAUTH_DROP. A plaintext guest hears why in its own framing,
 * as the answer to its challenge. */
static enum preauth_event tls_step(struct preauth *pa, struct preauth_conn *c)
{
	char err[512];
	int ret = tls_conn_handshake(c->tls, true, err, sizeof(err));

	if (ret == -EAGAIN)
		return PREAUTH_MORE;
	if (!ret) {
		c->tls_done = true;
		return PREAUTH_MORE;
	}
	/* Said once per hundred: garbage in a flood must not flood the log. */
	if (pa->tls_failed++ % 100 == 0)
		pr_warn("%s: %s%s: closed (%llu so far)", c->source, err,
			ret == -EPROTONOSUPPORT ? " (a tcp:// guest on a tls:// listener: it needs "
						  "TERN_SERVER=tls://...)" : "",
			(unsigned long long)pa->tls_failed);
	if (ret == -EPROTONOSUPPORT)
		wire_status_send(c->fd, WIRE_CALL_CHALLENGE, 0, WIRE_F_ERROR, CUDA_ERROR_NOT_PERMITTED);
	preauth_forget(pa, c, true);
	return PREAUTH_DROP;
}

void preauth_refuse(struct preauth *pa, struct preauth_conn *c, uint32_t status)
{
	status_send(c, c->h.call, status, 0);     /* the hello's or the join's */
	preauth_forget(pa, c, true);
}

void preauth_moved(struct preauth *pa, struct preauth_conn *c, const struct wire_moved *mv)
{
	struct wire_msg m;

	wire_msg_init(&m);
	wire_put_u32(&m, WIRE_STATUS_MOVED);
	wire_moved_encode(&m, mv);
	frame_send(c, WIRE_CALL_HELLO, 0, &m);
	wire_msg_release(&m);
	preauth_forget(pa, c, true);
}

static enum preauth_event challenge_answer(struct preauth *pa, struct preauth_conn *c)
{
	struct wire_challenge_rep rep;
	struct wire_msg m;
	int ret;

	if (c->challenged || c->h.length) {
		status_send(c, WIRE_CALL_CHALLENGE, CUDA_ERROR_INVALID_VALUE, WIRE_F_ERROR);
		preauth_forget(pa, c, true);
		return PREAUTH_DROP;
	}
	if (auth_random(c->nonce, sizeof(c->nonce))) {
		pr_err("no random bytes for a challenge: %s", strerror(errno));
		status_send(c, WIRE_CALL_CHALLENGE, CUDA_ERROR_OPERATING_SYSTEM, 0);
		preauth_forget(pa, c, true);
		return PREAUTH_DROP;
	}
	rep.nonce = (struct wire_blob){ c->nonce, sizeof(c->nonce) };
	wire_msg_init(&m);
	wire_put_u32(&m, CUDA_SUCCESS);
	wire_challenge_rep_encode(&m, &rep);
	ret = frame_send(c, WIRE_CALL_CHALLENGE, 0, &m);
	wire_msg_release(&m);
	if (ret) {
		preauth_forget(pa, c, true);
		return PREAUTH_DROP;
	}
	c->challenged = true;
	c->have = 0;
	return PREAUTH_MORE;
}

enum preauth_event preauth_readable(struct preauth *pa, struct preauth_conn *c)
{
	if (c->tls && !c->tls_done) {
		if (tls_step(pa, c) == PREAUTH_DROP)
			return PREAUTH_DROP;
		if (!c->tls_done)
			return PREAUTH_MORE;
		/* The challenge may have come with the handshake's end. */
	}
	for (;;) {
		bool in_header = c->have < WIRE_HEADER_SIZE;
		uint8_t *dst = in_header ? c->raw + c->have : c->payload + (c->have - WIRE_HEADER_SIZE);
		size_t want = in_header ? WIRE_HEADER_SIZE - c->have : WIRE_HEADER_SIZE + c->h.length - c->have;
		ssize_t n = want ? conn_recv_some(c, dst, want) : 0;

		if (n == -EAGAIN)
			return PREAUTH_MORE;
		if (want && n <= 0) {
			preauth_forget(pa, c, true);
			return PREAUTH_DROP;
		}
		c->have += (uint32_t)n;
		if (in_header && c->have == WIRE_HEADER_SIZE) {
			int ret = wire_header_decode(c->raw, &c->h);

			if (ret || c->h.flags & WIRE_F_REPLY || c->h.length > PREAUTH_PAYLOAD_MAX) {
				/* 0x16: a TLS handshake record, a ClientHello. */
				pr_warn("%s: not a hello (header: %s): closed", c->source,
					!c->tls && c->raw[0] == 0x16 ? "a TLS ClientHello: the guest wants tls://, "
								       "this listener is plaintext" :
					ret ? "bad magic or version" : "a reply or too long");
				status_send(c, c->h.call, CUDA_ERROR_INVALID_VALUE, WIRE_F_ERROR);
				preauth_forget(pa, c, true);
				return PREAUTH_DROP;
			}
		}
		if (c->have < WIRE_HEADER_SIZE || c->have < WIRE_HEADER_SIZE + c->h.length)
			continue;
		if (c->h.call == WIRE_CALL_CHALLENGE) {
			if (challenge_answer(pa, c) == PREAUTH_DROP)
				return PREAUTH_DROP;
			continue;
		}
		if (c->h.call == WIRE_CALL_HELLO)
			return PREAUTH_HELLO;
		if (c->h.call == WIRE_CALL_HOST_FUNC_JOIN)
			return PREAUTH_JOIN;
		pr_warn("%s: call %u before the hello: closed", c->source, c->h.call);
		status_send(c, c->h.call, CUDA_ERROR_NOT_PERMITTED, WIRE_F_ERROR);
		preauth_forget(pa, c, true);
		return PREAUTH_DROP;
	}
}

int preauth_expire(struct preauth *pa)
{
	uint64_t now = monotonic_ms(), next = UINT64_MAX;

	for (unsigned i = 0; i < pa->cfg.max; i++) {
		struct preauth_conn *c = &pa->conns[i];

		if (c->fd < 0)
			continue;
		if (c->deadline_ms <= now) {
			if (pa->expired++ % 100 == 0)
				pr_warn("%s: no hello within %d ms: closed (%llu so far)", c->source,
					pa->cfg.timeout_ms, (unsigned long long)pa->expired);
			preauth_forget(pa, c, true);
		} else if (c->deadline_ms < next) {
			next = c->deadline_ms;
		}
	}
	return next == UINT64_MAX ? -1 : (int)(next - now);
}
