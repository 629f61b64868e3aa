/* Connections that have not proved who they are yet: the supervisor's
 * pre-authentication stage.
 *
 * ternd forks no worker for a connection until it has sent a complete hello
 * that passed the checks (protocol, token proof, session credential): until
 * then the connection is an entry here, read without blocking from the
 * supervisor's poll loop. Each entry has a deadline (from accept to a whole
 * hello) and there is a cap per source (tcp: the address; unix: the peer's
 * uid; vsock: the CID) and in all, so that connections that send nothing,
 * or one byte, cost a file descriptor and a few bytes for a few seconds and
 * never a process or a session slot.
 *
 * The exchange it reads (docs/wire-protocol.md, "Session start"): a
 * `challenge`, which it answers with a fresh nonce, then the `hello`. On a
 * tls:// listener the TLS handshake comes first, driven from the same poll
 * loop without blocking and under the same deadline and limits; the
 * challenge and hello are then read through the session (tls.h), and the
 * worker forked for the hello inherits that session with the rest of the
 * supervisor's memory (docs/architecture.md, "TLS and the worker").
 *
 * Owned and used by the supervisor's one thread.
 */
#ifndef TERN_PREAUTH_H
#define TERN_PREAUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "tls.h"
#include "wire.h"

/* A hello holds two strings and two proofs: nothing larger is read. */
#define PREAUTH_PAYLOAD_MAX (2 * WIRE_STR_MAX + 256)

struct preauth_config {
	int timeout_ms;             /* from accept to a complete hello */
	unsigned per_source_max;    /* connections of one source in this stage */
	unsigned max;               /* all connections in this stage */
};

struct preauth_conn {
	int fd;                     /* -1: a free entry */
	unsigned listener;          /* index into the supervisor's listeners */
	int domain;                 /* a libvirt domain's stream (its index), or -1 */
	char source[64];
	bool has_uid;               /* a unix peer: its uid (SO_PEERCRED) */
	uint32_t uid;
	uint64_t deadline_ms;       /* CLOCK_MONOTONIC */
	bool challenged;            /* the nonce was sent */
	uint8_t nonce[AUTH_NONCE_BYTES];
	uint8_t raw[WIRE_HEADER_SIZE];
	struct wire_header h;       /* of the frame being read, once raw is whole */
	uint8_t *payload;           /* PREAUTH_PAYLOAD_MAX bytes */
	uint32_t have;              /* bytes of the frame read so far, header included */
	struct tls_conn *tls;       /* a tls:// listener's connection, or NULL */
	bool tls_done;              /* its handshake is over */
};

struct preauth {
	struct preauth_config cfg;
	struct preauth_conn *conns; /* cfg.max entries */
	unsigned used;
	uint64_t refused;           /* connections closed at accept by a limit */
	uint64_t expired;           /* closed at their deadline */
	uint64_t tls_failed;        /* closed in their TLS handshake */
};

enum preauth_event {
	PREAUTH_MORE,               /* nothing to do until more bytes come */
	PREAUTH_HELLO,              /* c->h and c->payload hold a whole hello */
	PREAUTH_JOIN,               /* ... a whole host_func_join (hostfn_chan.h) */
	PREAUTH_DROP,               /* the connection was answered (if at all) and closed */
};

/* 0 or -ENOMEM; @pa is released with preauth_release. */
int preauth_init(struct preauth *pa, const struct preauth_config *cfg);
/* Close every connection and free the table; @pa may be zeroed or initialised. */
void preauth_release(struct preauth *pa);

/* Accept one connection from @listen_fd (listener number @listener): a new
 * entry, or closed at once when a limit is reached. @tls: the listener's
 * credentials when it is a tls:// one, else NULL. */
void preauth_accept(struct preauth *pa, int listen_fd, unsigned listener, struct tls_creds *tls);
/* Take @fd, a stream of libvirt domain @domain that its relay handed over
 * (docs/libvirt.md): an entry like an accepted one, counted under @source. */
void preauth_adopt(struct preauth *pa, int fd, int domain, const char *source);
/* Read what @c sent: answers a challenge itself. */
enum preauth_event preauth_readable(struct preauth *pa, struct preauth_conn *c);
/* Answer @c's hello (or join) with @status alone, then close it. */
void preauth_refuse(struct preauth *pa, struct preauth_conn *c, uint32_t status);
/* Answer @c's hello with WIRE_STATUS_MOVED and @mv, then close it. */
void preauth_moved(struct preauth *pa, struct preauth_conn *c, const struct wire_moved *mv);
/* Forget @c, closing its fd (@close_fd) or not (a worker has it now), and
 * dropping this process's copy of its TLS session either way (a worker
 * has its own). */
void preauth_forget(struct preauth *pa, struct preauth_conn *c, bool close_fd);
/* Close the connections past their deadline; the ms until the next one, or -1. */
int preauth_expire(struct preauth *pa);

#endif
