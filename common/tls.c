#define LOG_PREFIX "tls: "
#include "tls.h"
#include "log.h"
#include "wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#ifdef TERN_HAVE_GNUTLS

#include <arpa/inet.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/socket.h>

#include <gnutls/gnutls.h>

#define TLS_LIBRARY "libgnutls.so.30"

/* The GnuTLS functions used here, typed by GnuTLS's own header, looked up
 * once: the one table both ternd and the shim call through. */
#define TLS_FUNCTIONS(X)                                   \
	X(gnutls_certificate_allocate_credentials)             \
	X(gnutls_certificate_free_credentials)                 \
	X(gnutls_certificate_set_x509_key_file)                \
	X(gnutls_certificate_set_x509_trust_file)              \
	X(gnutls_certificate_set_x509_system_trust)            \
	X(gnutls_certificate_server_set_request)               \
	X(gnutls_certificate_verification_status_print)        \
	X(gnutls_session_get_verify_cert_status)               \
	X(gnutls_session_set_verify_cert)                      \
	X(gnutls_init)                                         \
	X(gnutls_deinit)                                       \
	X(gnutls_set_default_priority)                         \
	X(gnutls_credentials_set)                              \
	X(gnutls_server_name_set)                              \
	X(gnutls_transport_set_ptr)                            \
	X(gnutls_transport_set_push_function)                  \
	X(gnutls_transport_set_pull_function)                  \
	X(gnutls_transport_set_errno)                          \
	X(gnutls_handshake)                                    \
	X(gnutls_record_send)                                  \
	X(gnutls_record_recv)                                  \
	X(gnutls_record_check_pending)                         \
	X(gnutls_record_cork)                                  \
	X(gnutls_record_uncork)                                \
	X(gnutls_record_get_direction)                         \
	X(gnutls_alert_get)                                    \
	X(gnutls_alert_get_name)                               \
	X(gnutls_alert_send_appropriate)                       \
	X(gnutls_error_is_fatal)                               \
	X(gnutls_session_get_desc)                             \
	X(gnutls_strerror)

static struct {
#define TLS_FN_FIELD(name) __typeof__(name) *name;
	TLS_FUNCTIONS(TLS_FN_FIELD)
#undef TLS_FN_FIELD
	gnutls_free_function *free_fn;  /* gnutls_free is a variable */
	char why[256];                  /* set when loading failed */
} gt;

static pthread_once_t gt_once = PTHREAD_ONCE_INIT;

static void gt_load(void)
{
	void *h = dlopen(TLS_LIBRARY, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		snprintf(gt.why, sizeof(gt.why), "TLS needs GnuTLS (%s, Debian's libgnutls30): %s", TLS_LIBRARY,
			 dlerror());
		return;
	}
#define TLS_FN_LOAD(name)                                                                     \
	if (!(gt.name = (__typeof__(name) *)dlsym(h, #name))) {                               \
		snprintf(gt.why, sizeof(gt.why), "%s has no %s: GnuTLS 3.6 or later needed", \
			 TLS_LIBRARY, #name);                                                 \
		return;                                                                       \
	}
	TLS_FUNCTIONS(TLS_FN_LOAD)
#undef TLS_FN_LOAD
	gt.free_fn = (gnutls_free_function *)dlsym(h, "gnutls_free");
	if (!gt.free_fn)
		snprintf(gt.why, sizeof(gt.why), "%s has no gnutls_free", TLS_LIBRARY);
	/* Never closed: sessions may outlive any one user. */
}

/* 0 once GnuTLS is usable, or -ENOTSUP with @err saying why. */
static int gt_ready(char *err, size_t cap)
{
	pthread_once(&gt_once, gt_load);
	if (gt.why[0]) {
		snprintf(err, cap, "%s", gt.why);
		return -ENOTSUP;
	}
	return 0;
}

struct tls_creds {
	bool server;
	bool verify_peer;               /* server: a CA was given */
	gnutls_certificate_credentials_t x509;
};

/* How many of the first bytes the peer sent are kept: enough for the wire
 * header's magic, which tells a plaintext tern peer from a TLS one. */
#define TLS_FIRST_BYTES 4

struct tls_conn {
	gnutls_session_t session;
	int fd;
	bool send_wait;
	bool recv_wait;                 /* set per call: the pull function waits or not */
	bool server;
	bool handshaken;
	/* The socket said end of stream: GnuTLS reports that inside a record
	 * as GNUTLS_E_AGAIN, which must not be waited on (a poll would say
	 * readable again at once). */
	bool eof;
	uint8_t first[TLS_FIRST_BYTES];
	unsigned first_len;
};

int tls_creds_open(const struct tls_creds_config *cfg, struct tls_creds **out, char *err, size_t cap)
{
	struct tls_creds *c;
	int ret = gt_ready(err, cap), r;

	if (ret)
		return ret;
	if (cfg->server && (!cfg->cert_file || !cfg->key_file)) {
		snprintf(err, cap, "a TLS listener needs a certificate and its key (--tls-cert, --tls-key)");
		return -EINVAL;
	}
	if (!cfg->cert_file != !cfg->key_file) {
		snprintf(err, cap, "a TLS certificate needs its key and a key its certificate");
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->server = cfg->server;
	r = gt.gnutls_certificate_allocate_credentials(&c->x509);
	if (r < 0) {
		free(c);
		snprintf(err, cap, "TLS credentials: %s", gt.gnutls_strerror(r));
		return -ENOMEM;
	}
	if (cfg->cert_file) {
		r = gt.gnutls_certificate_set_x509_key_file(c->x509, cfg->cert_file, cfg->key_file,
							    GNUTLS_X509_FMT_PEM);
		if (r < 0) {
			snprintf(err, cap, "TLS certificate %s with key %s: %s", cfg->cert_file, cfg->key_file,
				 gt.gnutls_strerror(r));
			ret = -EINVAL;
			goto fail;
		}
	}
	if (cfg->ca_file) {
		/* The count of certificates read: none is as wrong as an error. */
		r = gt.gnutls_certificate_set_x509_trust_file(c->x509, cfg->ca_file, GNUTLS_X509_FMT_PEM);
		if (r <= 0) {
			snprintf(err, cap, "TLS CA %s: %s", cfg->ca_file,
				 r < 0 ? gt.gnutls_strerror(r) : "no certificate in it");
			ret = -EINVAL;
			goto fail;
		}
		c->verify_peer = true;
	} else if (!cfg->server) {
		r = gt.gnutls_certificate_set_x509_system_trust(c->x509);
		if (r <= 0) {
			snprintf(err, cap, "no CA to verify ternd's certificate with: set TERN_TLS_CA (the "
				 "system's trust store: %s)", r < 0 ? gt.gnutls_strerror(r) : "empty");
			ret = -EINVAL;
			goto fail;
		}
		c->verify_peer = true;
	}
	*out = c;
	return 0;
fail:
	gt.gnutls_certificate_free_credentials(c->x509);
	free(c);
	return ret;
}

void tls_creds_close(struct tls_creds *c)
{
	if (!c)
		return;
	gt.gnutls_certificate_free_credentials(c->x509);
	free(c);
}

static ssize_t tls_push(gnutls_transport_ptr_t ptr, const void *buf, size_t n)
{
	struct tls_conn *t = ptr;
	ssize_t r;

	do
		r = send(t->fd, buf, n, MSG_NOSIGNAL | (t->send_wait ? 0 : MSG_DONTWAIT));
	while (r < 0 && errno == EINTR);
	if (r < 0)
		gt.gnutls_transport_set_errno(t->session, errno);
	return r;
}

static ssize_t tls_pull(gnutls_transport_ptr_t ptr, void *buf, size_t n)
{
	struct tls_conn *t = ptr;
	ssize_t r;

	do
		r = recv(t->fd, buf, n, t->recv_wait ? 0 : MSG_DONTWAIT);
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		gt.gnutls_transport_set_errno(t->session, errno);
		return r;
	}
	if (r == 0)
		t->eof = true;
	if (!t->handshaken && t->first_len < TLS_FIRST_BYTES && r > 0) {
		size_t take = TLS_FIRST_BYTES - t->first_len < (size_t)r ? TLS_FIRST_BYTES - t->first_len : (size_t)r;

		memcpy(t->first + t->first_len, buf, take);
		t->first_len += (unsigned)take;
	}
	return r;
}

int tls_conn_open(struct tls_creds *creds, int fd, const char *host, struct tls_conn **out, char *err,
		  size_t cap)
{
	struct tls_conn *t;
	struct in6_addr a6;
	struct in_addr a4;
	int r;

	/* No resumption: a session is one connection, and a server that
	 * sends no tickets writes nothing after its handshake unasked. */
	unsigned flags = (creds->server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_TICKETS;

	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->fd = fd;
	t->server = creds->server;
	t->send_wait = true;
	r = gt.gnutls_init(&t->session, flags);
	if (r < 0) {
		free(t);
		snprintf(err, cap, "TLS session: %s", gt.gnutls_strerror(r));
		return -ENOMEM;
	}
	/* The system's policy (/etc/gnutls/config), as libvirt does. */
	r = gt.gnutls_set_default_priority(t->session);
	if (r >= 0)
		r = gt.gnutls_credentials_set(t->session, GNUTLS_CRD_CERTIFICATE, creds->x509);
	if (r >= 0 && !creds->server && host && inet_pton(AF_INET, host, &a4) != 1 &&
	    inet_pton(AF_INET6, host, &a6) != 1)
		r = gt.gnutls_server_name_set(t->session, GNUTLS_NAME_DNS, host, strlen(host));
	if (r >= 0 && creds->server && creds->verify_peer)
		gt.gnutls_certificate_server_set_request(t->session, GNUTLS_CERT_REQUIRE);
	if (r >= 0 && creds->verify_peer)
		/* The chain, and for a client the server's name or address. */
		gt.gnutls_session_set_verify_cert(t->session, creds->server ? NULL : host, 0);
	if (r < 0) {
		snprintf(err, cap, "TLS session: %s", gt.gnutls_strerror(r));
		gt.gnutls_deinit(t->session);
		free(t);
		return -EINVAL;
	}
	gt.gnutls_transport_set_ptr(t->session, t);
	gt.gnutls_transport_set_push_function(t->session, tls_push);
	gt.gnutls_transport_set_pull_function(t->session, tls_pull);
	*out = t;
	return 0;
}

void tls_conn_close(struct tls_conn *t)
{
	if (!t)
		return;
	gt.gnutls_deinit(t->session);
	free(t);
}

void tls_conn_set_send_wait(struct tls_conn *t, bool wait)
{
	t->send_wait = wait;
}

/* The peer began with tern's frame magic: it speaks plaintext. */
static bool first_is_wire(const struct tls_conn *t)
{
	static const uint8_t magic[4] = { WIRE_MAGIC & 0xff, (WIRE_MAGIC >> 8) & 0xff, (WIRE_MAGIC >> 16) & 0xff,
					  WIRE_MAGIC >> 24 };

	return t->first_len == TLS_FIRST_BYTES && !memcmp(t->first, magic, sizeof(magic));
}

/* A verification failure in words ("The certificate is NOT trusted..."). */
static void verify_status_say(struct tls_conn *t, char *err, size_t cap, const char *who)
{
	unsigned status = gt.gnutls_session_get_verify_cert_status(t->session);
	gnutls_datum_t text = { 0 };

	if (gt.gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text, 0) >= 0 && text.data) {
		snprintf(err, cap, "%s's certificate did not verify: %s", who, (const char *)text.data);
		(*gt.free_fn)(text.data);
	} else {
		snprintf(err, cap, "%s's certificate did not verify (status 0x%x)", who, status);
	}
}

int tls_conn_handshake(struct tls_conn *t, bool nonblock, char *err, size_t cap)
{
	const char *peer = t->server ? "the client" : "ternd";
	int r;

	t->recv_wait = !nonblock;
	/* Blocking, GNUTLS_E_AGAIN is the socket's receive timeout: over. */
	do
		r = gt.gnutls_handshake(t->session);
	while (r == GNUTLS_E_INTERRUPTED || r == GNUTLS_E_WARNING_ALERT_RECEIVED);
	if (r == 0) {
		t->handshaken = true;
		return 0;
	}
	if (r == GNUTLS_E_AGAIN && t->eof) {
		snprintf(err, cap, "TLS handshake: %s closed the connection in the middle of a record", peer);
		return -ECONNRESET;
	}
	if (r == GNUTLS_E_AGAIN) {
		/* Waiting to write means the peer reads nothing: not worth waiting for. */
		if (!t->send_wait && gt.gnutls_record_get_direction(t->session) == 1) {
			snprintf(err, cap, "TLS handshake: %s does not read what it is sent", peer);
			return -EPROTO;
		}
		return -EAGAIN;
	}
	if (first_is_wire(t)) {
		snprintf(err, cap, "%s speaks tern's plaintext protocol, not TLS", peer);
		return -EPROTONOSUPPORT;
	}
	/* The peer hears why ("unknown CA", "certificate required"), if it
	 * reads; a send that would block is not waited for on a server. */
	if (r != GNUTLS_E_PREMATURE_TERMINATION && r != GNUTLS_E_PULL_ERROR && r != GNUTLS_E_PUSH_ERROR &&
	    r != GNUTLS_E_FATAL_ALERT_RECEIVED)
		gt.gnutls_alert_send_appropriate(t->session, r);
	switch (r) {
	case GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR:
		verify_status_say(t, err, cap, peer);
		return -EACCES;
	case GNUTLS_E_NO_CERTIFICATE_FOUND:
	case GNUTLS_E_CERTIFICATE_REQUIRED:
		snprintf(err, cap, "TLS handshake: %s sent no certificate, and one is required", peer);
		return -EACCES;
	case GNUTLS_E_PREMATURE_TERMINATION:
	case GNUTLS_E_PULL_ERROR:
	case GNUTLS_E_PUSH_ERROR:
		snprintf(err, cap, "TLS handshake: %s closed the connection", peer);
		return -ECONNRESET;
	case GNUTLS_E_FATAL_ALERT_RECEIVED: {
		int alert = (int)gt.gnutls_alert_get(t->session);
		const char *name = gt.gnutls_alert_get_name((gnutls_alert_description_t)alert);

		snprintf(err, cap, "TLS handshake: %s refused it: %s", peer, name ? name : "an alert");
		return alert == GNUTLS_A_BAD_CERTIFICATE || alert == GNUTLS_A_UNKNOWN_CA ||
		       alert == GNUTLS_A_CERTIFICATE_REQUIRED || alert == GNUTLS_A_ACCESS_DENIED ?
		       -EACCES : -EPROTO;
	}
	default:
		snprintf(err, cap, "TLS handshake: %s", gt.gnutls_strerror(r));
		return -EPROTO;
	}
}

/* A record layer error as -errno, said once. */
static int record_error(struct tls_conn *t, ssize_t r, const char *what)
{
	if (r == 0 || r == GNUTLS_E_PREMATURE_TERMINATION)
		return -ECONNRESET;
	if (r == GNUTLS_E_FATAL_ALERT_RECEIVED) {
		const char *name = gt.gnutls_alert_get_name(gt.gnutls_alert_get(t->session));

		pr_err("TLS %s: the peer closed it with an alert: %s", what, name ? name : "?");
		return -EACCES;
	}
	if (r == GNUTLS_E_PUSH_ERROR || r == GNUTLS_E_PULL_ERROR)
		return -EPIPE;
	pr_err("TLS %s: %s", what, gt.gnutls_strerror((int)r));
	return -EPROTO;
}

/* One buffer through the session, whole. */
static int send_whole(struct tls_conn *t, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = gt.gnutls_record_send(t->session, p, n);

		if (r == GNUTLS_E_INTERRUPTED)
			continue;
		if (r == GNUTLS_E_AGAIN)
			return -EAGAIN;     /* would block, or the socket's timeout */
		if (r < 0)
			return record_error(t, r, "send");
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Pieces smaller than this are gathered (corked) into full records; larger
 * ones go out as they are, so a 32 MiB copy is not buffered again. */
#define TLS_CORK_MAX (16u << 10)

int tls_conn_send(struct tls_conn *t, const struct iovec *iov, int niov)
{
	bool corked = false;
	int ret = 0;

	for (int i = 0; i < niov && !ret; i++) {
		bool small = iov[i].iov_len < TLS_CORK_MAX;

		if (small && !corked) {
			gt.gnutls_record_cork(t->session);
			corked = true;
		} else if (!small && corked) {
			ret = (int)gt.gnutls_record_uncork(t->session, GNUTLS_RECORD_WAIT);
			ret = ret < 0 ? record_error(t, ret, "send") : 0;
			corked = false;
		}
		if (!ret)
			ret = send_whole(t, iov[i].iov_base, iov[i].iov_len);
	}
	if (corked) {
		ssize_t r;

		do
			r = gt.gnutls_record_uncork(t->session, GNUTLS_RECORD_WAIT);
		while (r == GNUTLS_E_INTERRUPTED);
		if (!ret && r < 0)
			ret = r == GNUTLS_E_AGAIN ? -EAGAIN : record_error(t, r, "send");
	}
	return ret;
}

static ssize_t recv_once(struct tls_conn *t, void *buf, size_t n, bool wait)
{
	for (;;) {
		ssize_t r;

		t->recv_wait = wait;
		r = gt.gnutls_record_recv(t->session, buf, n);
		if (r > 0)
			return r;
		if (r == GNUTLS_E_INTERRUPTED)
			continue;
		if (r == GNUTLS_E_AGAIN && t->eof)
			return -ECONNRESET; /* the end, in the middle of a record */
		if (r == GNUTLS_E_AGAIN)
			return -EAGAIN;     /* nothing yet, or the socket's timeout */
		if (r == GNUTLS_E_REHANDSHAKE) {
			pr_err("TLS receive: the peer asked for a new handshake, which tern does not do");
			return -EPROTO;
		}
		if (r < 0 && !gt.gnutls_error_is_fatal((int)r))
			continue;       /* a warning alert */
		return record_error(t, r, "receive");
	}
}

ssize_t tls_conn_recv_some(struct tls_conn *t, void *buf, size_t n)
{
	return recv_once(t, buf, n, false);
}

int tls_conn_recv_exact(struct tls_conn *t, void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n) {
		ssize_t r = recv_once(t, p, n, true);

		if (r < 0)
			return (int)r;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int read_exact(void *stream, void *buf, size_t n)
{
	return tls_conn_recv_exact(stream, buf, n);
}

int tls_conn_recv_discard(struct tls_conn *t, uint64_t n)
{
	return wire_discard_through(read_exact, t, n);
}

bool tls_conn_pending(const struct tls_conn *t)
{
	return gt.gnutls_record_check_pending(t->session) > 0;
}

void tls_conn_describe(const struct tls_conn *t, char *buf, size_t cap)
{
	char *desc = gt.gnutls_session_get_desc(t->session);

	snprintf(buf, cap, "%s", desc ? desc : "?");
	if (desc)
		(*gt.free_fn)(desc);
}

#else /* !TERN_HAVE_GNUTLS */

static int tls_absent(char *err, size_t cap)
{
	snprintf(err, cap, "this tern was built without TLS (meson -Dtls=enabled needs GnuTLS's headers)");
	return -ENOTSUP;
}

int tls_creds_open(const struct tls_creds_config *cfg, struct tls_creds **out, char *err, size_t cap)
{
	(void)cfg;
	*out = NULL;
	return tls_absent(err, cap);
}

void tls_creds_close(struct tls_creds *c)
{
	(void)c;
}

int tls_conn_open(struct tls_creds *creds, int fd, const char *host, struct tls_conn **out, char *err,
		  size_t cap)
{
	(void)creds, (void)fd, (void)host;
	*out = NULL;
	return tls_absent(err, cap);
}

/* No tls_conn can exist: nothing below is ever reached with one. */
void tls_conn_close(struct tls_conn *t)
{
	(void)t;
}

void tls_conn_set_send_wait(struct tls_conn *t, bool wait)
{
	(void)t, (void)wait;
}

int tls_conn_handshake(struct tls_conn *t, bool nonblock, char *err, size_t cap)
{
	(void)t, (void)nonblock;
	return tls_absent(err, cap);
}

int tls_conn_send(struct tls_conn *t, const struct iovec *iov, int niov)
{
	(void)t, (void)iov, (void)niov;
	return -ENOTSUP;
}

int tls_conn_recv_exact(struct tls_conn *t, void *buf, size_t n)
{
	(void)t, (void)buf, (void)n;
	return -ENOTSUP;
}

int tls_conn_recv_discard(struct tls_conn *t, uint64_t n)
{
	(void)t, (void)n;
	return -ENOTSUP;
}

ssize_t tls_conn_recv_some(struct tls_conn *t, void *buf, size_t n)
{
	(void)t, (void)buf, (void)n;
	return -ENOTSUP;
}

bool tls_conn_pending(const struct tls_conn *t)
{
	(void)t;
	return false;
}

void tls_conn_describe(const struct tls_conn *t, char *buf, size_t cap)
{
	(void)t;
	snprintf(buf, cap, "none");
}

#endif

/* Built on the functions above, with or without GnuTLS. */

int tls_client_creds_open(const char *ca_file, struct tls_creds **out, char *err, size_t cap)
{
	struct tls_creds_config cfg = { .ca_file = ca_file, .cert_file = getenv("TERN_TLS_CERT"),
					.key_file = getenv("TERN_TLS_KEY") };

	if (!cfg.ca_file || !*cfg.ca_file)
		cfg.ca_file = getenv("TERN_TLS_CA");
	if (cfg.ca_file && !*cfg.ca_file)
		cfg.ca_file = NULL;
	if (cfg.cert_file && !*cfg.cert_file)
		cfg.cert_file = NULL;
	if (cfg.key_file && !*cfg.key_file)
		cfg.key_file = NULL;
	return tls_creds_open(&cfg, out, err, cap);
}

int tls_conn_start(struct tls_creds *creds, int fd, const char *host, int timeout_s, struct tls_conn **out,
		   char *err, size_t cap)
{
	struct timeval before = { 0 }, tv = { .tv_sec = timeout_s };
	socklen_t n = sizeof(before);
	int ret;

	*out = NULL;
	ret = tls_conn_open(creds, fd, host, out, err, cap);
	if (ret)
		return ret;
	if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &before, &n))
		before = (struct timeval){ 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ret = tls_conn_handshake(*out, false, err, cap);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &before, sizeof(before));
	if (ret == -EAGAIN)
		snprintf(err, cap, "no TLS handshake within %d s", timeout_s);
	if (ret) {
		tls_conn_close(*out);
		*out = NULL;
	}
	return ret;
}
