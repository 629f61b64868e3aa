/* TLS under the framed stream, for tls://HOST:PORT (docs/wire-protocol.md,
 * "TLS"): x509 certificates as libvirt uses them, through GnuTLS.
 *
 * GnuTLS is loaded with dlopen("libgnutls.so.30") the first time TLS is
 * asked for, by ternd and by the guest shim alike: the shim is loaded into
 * every CUDA application and must not pull GnuTLS into those that never use
 * TLS, and one loader means ternd's tests run the shim's very code. A build
 * without GnuTLS's headers (meson -Dtls=disabled) keeps these functions,
 * which then fail with -ENOTSUP.
 *
 * Only the records change: the messages above them are framed by wire.h as
 * on every stream, and the challenge and hello (common/auth.h) run inside
 * the TLS session as they do on plain tcp. A tls_conn reads and writes the
 * socket it was opened on through its own push and pull functions, so it
 * can say when the peer spoke tern's plaintext framing instead of TLS.
 *
 * No close_notify is ever sent: a session ends with its socket, and a
 * message cut short shows in the framing. Nothing here writes to a socket
 * but tls_conn_handshake and tls_conn_send, so a process that forked with a
 * session may drop its copy with tls_conn_close and leave the socket to
 * the other (ternd's supervisor hands a session to its worker that way).
 *
 * Errors are -errno; the handshake's also say why in @err:
 *   -ENOTSUP          GnuTLS is not there (or not built in)
 *   -EPROTONOSUPPORT  the peer spoke tern's plaintext framing, not TLS
 *   -EACCES           the peer's certificate did not verify (or was missing)
 *   -ECONNRESET       the peer closed the connection
 *   -EPROTO           anything else the TLS layer refused (garbage, alerts)
 *   -EAGAIN           nonblocking: call again once the socket is readable
 *
 * Threads: a tls_conn may be read by one thread while another writes it
 * (GnuTLS allows one sender and one receiver); each direction is the
 * caller's to serialise. tls_creds are read-only once open and may be
 * shared by any number of connections and threads.
 */
#ifndef TERN_TLS_H
#define TERN_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct tls_creds;
struct tls_conn;

struct tls_creds_config {
	bool server;
	/* Server: required. Client: optional, both or neither (a client
	 * certificate for a server that asks for one). PEM files. */
	const char *cert_file;
	const char *key_file;
	/* Server: when set, clients must present a certificate this CA
	 * signed. Client: the CA the server's certificate must chain to;
	 * NULL: the system's trust store. */
	const char *ca_file;
};

/* Load GnuTLS if need be, then the certificates of @cfg. 0 and *@out
 * (freed with tls_creds_close), or -errno with @err saying why. */
int tls_creds_open(const struct tls_creds_config *cfg, struct tls_creds **out, char *err, size_t cap);
/* NULL is fine. Every connection opened with @c must be closed first. */
void tls_creds_close(struct tls_creds *c);

/* A TLS session on the connected socket @fd, which stays the caller's to
 * close (after tls_conn_close). @host: a client's server name, checked
 * against the certificate's names or, for an address, its IP addresses;
 * NULL for a server. 0 and *@out, or -errno with @err. */
int tls_conn_open(struct tls_creds *creds, int fd, const char *host, struct tls_conn **out, char *err,
		  size_t cap);
/* Free @t (NULL is fine); sends nothing. */
void tls_conn_close(struct tls_conn *t);
/* With @wait false a send that would block fails with -EAGAIN and the
 * connection is unusable: for ternd's supervisor, which must never block
 * on a guest. The default is true. */
void tls_conn_set_send_wait(struct tls_conn *t, bool wait);

/* Run the handshake: 0 when done. @nonblock: -EAGAIN while the peer's
 * bytes have not all come. A server's certificate and name are checked
 * here (client side); so is a client's when the server has a CA. */
int tls_conn_handshake(struct tls_conn *t, bool nonblock, char *err, size_t cap);

/* The same contracts as wire_send, wire_recv_exact and wire_recv_discard
 * (wire.h), through the session. A failure is logged once here. */
int tls_conn_send(struct tls_conn *t, const struct iovec *iov, int niov);
int tls_conn_recv_exact(struct tls_conn *t, void *buf, size_t n);
int tls_conn_recv_discard(struct tls_conn *t, uint64_t n);
/* What has come, up to @n bytes, without waiting: the count, -EAGAIN when
 * nothing yet, -ECONNRESET at the end, or -errno. */
ssize_t tls_conn_recv_some(struct tls_conn *t, void *buf, size_t n);
/* A client's credentials as tern's clients take them (the guest shim,
 * ckpt migrate): the CA @ca_file, else TERN_TLS_CA, else the system's trust
 * store; TERN_TLS_CERT and TERN_TLS_KEY, when set, a client certificate for
 * a server that asks for one. As tls_creds_open. */
int tls_client_creds_open(const char *ca_file, struct tls_creds **out, char *err, size_t cap);

/* tls_conn_open and a blocking tls_conn_handshake on @fd, which must end
 * within @timeout_s (the socket's receive timeout is as before after it):
 * 0 and *@out, or -errno with @err (-EAGAIN: no handshake in time), as
 * they return. @host: as tls_conn_open's. */
int tls_conn_start(struct tls_creds *creds, int fd, const char *host, int timeout_s, struct tls_conn **out,
		   char *err, size_t cap);

/* The protocol and ciphers agreed, in words, into @buf (after the
 * handshake): "(TLS1.3)-(ECDHE-SECP256R1)-...". */
void tls_conn_describe(const struct tls_conn *t, char *buf, size_t cap);
/* Bytes already decrypted and not read yet: a poll on the socket would
 * not see them, so read before polling while this is true. */
bool tls_conn_pending(const struct tls_conn *t);

#endif
