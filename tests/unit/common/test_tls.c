/* common/tls.h over a socket pair: records under the framing, the peer's
 * certificate and name checked, plaintext peers told apart, hostile and
 * cut-short handshakes. Certificates are made at test time by
 * tests/cuda/tls_certs.py (certtool), whose path is the first argument.
 *
 *     test_tls TLS_CERTS_PY
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "tls.h"
#include "wire.h"

static char dir[64];
static char ca[128], other_ca[128], server_cert[128], server_key[128], client_cert[128], client_key[128];

static void path_of(char *out, const char *rel)
{
	snprintf(out, 128, "%s/%s", dir, rel);
}

static struct tls_creds *creds(bool server, const char *cert, const char *key, const char *ca_file)
{
	struct tls_creds_config cfg = { .server = server, .cert_file = cert, .key_file = key, .ca_file = ca_file };
	struct tls_creds *c = NULL;
	char err[512];

	if (tls_creds_open(&cfg, &c, err, sizeof(err)))
		fail_msg("tls_creds_open: %s", err);
	return c;
}

/* The end of one case's pair: its TLS session, both ends, its credentials. */
static void pair_end(struct tls_conn *t, const int sv[2], struct tls_creds *c)
{
	tls_conn_close(t);
	close(sv[0]);
	close(sv[1]);
	tls_creds_close(c);
}

/* The server's half, on a thread of its own. */
struct server {
	struct tls_creds *creds;
	int fd;
	int ret;
	char err[512];
	bool echo;              /* after the handshake: read 4 bytes of length, then echo that many */
	pthread_t thread;
};

static void *server_main(void *arg)
{
	struct server *s = arg;
	struct tls_conn *t;

	s->ret = tls_conn_open(s->creds, s->fd, NULL, &t, s->err, sizeof(s->err));
	if (s->ret)
		return NULL;
	s->ret = tls_conn_handshake(t, false, s->err, sizeof(s->err));
	if (!s->ret && s->echo) {
		uint8_t len[4], *buf;
		uint32_t n;

		s->ret = tls_conn_recv_exact(t, len, 4);
		n = (uint32_t)len[0] | (uint32_t)len[1] << 8 | (uint32_t)len[2] << 16 | (uint32_t)len[3] << 24;
		buf = malloc(n);
		if (!s->ret)
			s->ret = tls_conn_recv_exact(t, buf, n);
		if (!s->ret)
			s->ret = tls_conn_send(t, &(struct iovec){ buf, n }, 1);
		free(buf);
	}
	tls_conn_close(t);
	shutdown(s->fd, SHUT_WR);
	return NULL;
}

static void server_start(struct server *s, struct tls_creds *c, int fd, bool echo)
{
	*s = (struct server){ .creds = c, .fd = fd, .echo = echo };
	assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
}

static int server_join(struct server *s)
{
	pthread_join(s->thread, NULL);
	return s->ret;
}

/* A client handshake to @host against @ca_file over a fresh pair with a
 * server of @srv_creds: its result; the server's in *@server_ret. */
static int client_try(struct tls_creds *srv_creds, const char *ca_file, const char *host, const char *cert,
		      const char *key, int *server_ret, char *err, size_t cap)
{
	struct tls_creds *cc = creds(false, cert, key, ca_file);
	struct tls_conn *t;
	struct server s;
	int sv[2], ret;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	server_start(&s, srv_creds, sv[1], false);
	assert_int_equal(tls_conn_open(cc, sv[0], host, &t, err, cap), 0);
	ret = tls_conn_handshake(t, false, err, cap);
	if (!ret) {
		uint8_t b;

		/* TLS 1.3: a refused client certificate shows at the first read. */
		ret = tls_conn_recv_exact(t, &b, 1);
	}
	shutdown(sv[0], SHUT_RDWR);
	*server_ret = server_join(&s);
	pair_end(t, sv, cc);
	return ret;
}

static void test_roundtrip(void **state)
{
	struct tls_creds *sc = creds(true, server_cert, server_key, NULL), *cc = creds(false, NULL, NULL, ca);
	static uint8_t big[100000], back[sizeof(big) + 14];
	/* The length the echo server reads first: what follows it. */
	uint8_t len[4] = { (sizeof(big) + 10) & 0xff, (sizeof(big) + 10) >> 8 & 0xff, (sizeof(big) + 10) >> 16, 0 };
	struct iovec iov[4] = { { len, 4 }, { "head:", 5 }, { big, sizeof(big) }, { ":tail", 5 } };
	struct tls_conn *t;
	struct server s;
	char err[512];
	int sv[2];

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	server_start(&s, sc, sv[1], true);
	assert_int_equal(tls_conn_open(cc, sv[0], "127.0.0.1", &t, err, sizeof(err)), 0);
	assert_int_equal(tls_conn_handshake(t, false, err, sizeof(err)), 0);
	/* Nothing yet: the nonblocking read says so rather than waiting. */
	assert_int_equal(tls_conn_recv_some(t, back, 1), -EAGAIN);
	/* Small pieces around a large one: corked, uncorked, corked again. */
	assert_int_equal(tls_conn_send(t, iov, 4), 0);
	assert_int_equal(tls_conn_recv_exact(t, back, 5), 0);
	assert_memory_equal(back, "head:", 5);
	assert_int_equal(tls_conn_recv_exact(t, back, sizeof(big)), 0);
	assert_memory_equal(back, big, sizeof(big));
	assert_int_equal(tls_conn_recv_exact(t, back, 4), 0);
	/* The rest of that record is decrypted already: pending, and read without the socket. */
	assert_true(tls_conn_pending(t));
	assert_int_equal(tls_conn_recv_some(t, back + 4, 10), 1);
	assert_memory_equal(back, ":tail", 5);
	assert_int_equal(tls_conn_recv_exact(t, back, 1), -ECONNRESET);
	assert_int_equal(server_join(&s), 0);
	pair_end(t, sv, cc);
	tls_creds_close(sc);
}

static void test_discard(void **state)
{
	struct tls_creds *sc = creds(true, server_cert, server_key, NULL), *cc = creds(false, NULL, NULL, ca);
	uint8_t len[4] = { 0x10, 0x27, 0, 0 }, payload[10000] = { 0 }, last;
	struct tls_conn *t;
	struct server s;
	char err[512];
	int sv[2];

	payload[9999] = 0x5a;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	server_start(&s, sc, sv[1], true);
	assert_int_equal(tls_conn_open(cc, sv[0], "localhost", &t, err, sizeof(err)), 0);
	assert_int_equal(tls_conn_handshake(t, false, err, sizeof(err)), 0);
	assert_int_equal(tls_conn_send(t, (struct iovec[]){ { len, 4 }, { payload, sizeof(payload) } }, 2), 0);
	assert_int_equal(tls_conn_recv_discard(t, 9999), 0);
	assert_int_equal(tls_conn_recv_exact(t, &last, 1), 0);
	assert_int_equal(last, 0x5a);
	assert_int_equal(server_join(&s), 0);
	pair_end(t, sv, cc);
	tls_creds_close(sc);
}

static void test_certificate_checks(void **state)
{
	struct tls_creds *sc = creds(true, server_cert, server_key, NULL);
	struct tls_creds *sc_ca = creds(true, server_cert, server_key, ca);
	char err[512];
	int srv;

	assert_int_equal(client_try(sc, ca, "127.0.0.1", NULL, NULL, &srv, err, sizeof(err)), -ECONNRESET);
	assert_int_equal(srv, 0);
	assert_int_equal(client_try(sc, other_ca, "127.0.0.1", NULL, NULL, &srv, err, sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "did not verify"));
	assert_int_not_equal(srv, 0);
	/* The address and the name must be the certificate's. */
	assert_int_equal(client_try(sc, ca, "127.0.0.2", NULL, NULL, &srv, err, sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "does not match"));
	assert_int_equal(client_try(sc, ca, "ternd.example.org", NULL, NULL, &srv, err, sizeof(err)), -EACCES);
	/* A server with a CA wants a client certificate of it. */
	assert_int_not_equal(client_try(sc_ca, ca, "127.0.0.1", NULL, NULL, &srv, err, sizeof(err)), 0);
	assert_int_equal(srv, -EACCES);
	assert_int_equal(client_try(sc_ca, ca, "127.0.0.1", client_cert, client_key, &srv, err, sizeof(err)),
			 -ECONNRESET);
	assert_int_equal(srv, 0);
	/* A client certificate of another CA is refused too: the server's own. */
	tls_creds_close(sc);
	sc = creds(true, server_cert, server_key, other_ca);
	assert_int_not_equal(client_try(sc, ca, "127.0.0.1", client_cert, client_key, &srv, err, sizeof(err)), 0);
	assert_int_equal(srv, -EACCES);
	tls_creds_close(sc);
	tls_creds_close(sc_ca);
}

/* The server's handshake against @bytes (then the peer's end of stream). */
static int server_against(const void *bytes, size_t n, bool nonblock, char *err, size_t cap)
{
	struct tls_creds *sc = creds(true, server_cert, server_key, NULL);
	struct tls_conn *t;
	int sv[2], ret;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	if (n)
		assert_int_equal(write(sv[0], bytes, n), (ssize_t)n);
	if (!nonblock)
		shutdown(sv[0], SHUT_WR);
	assert_int_equal(tls_conn_open(sc, sv[1], NULL, &t, err, cap), 0);
	tls_conn_set_send_wait(t, !nonblock);
	ret = tls_conn_handshake(t, nonblock, err, cap);
	pair_end(t, sv, sc);
	return ret;
}

static void test_hostile_handshakes(void **state)
{
	uint8_t hdr[WIRE_HEADER_SIZE], garbage[600];
	struct wire_header h = { .magic = WIRE_MAGIC, .version = WIRE_VERSION, .call = 3 };
	char err[512];

	/* A plaintext tern client: its frame magic is recognised. */
	wire_header_encode(hdr, &h);
	assert_int_equal(server_against(hdr, sizeof(hdr), false, err, sizeof(err)), -EPROTONOSUPPORT);
	assert_non_null(strstr(err, "plaintext"));
	for (size_t i = 0; i < sizeof(garbage); i++)
		garbage[i] = (uint8_t)(i * 131 + 17);
	assert_int_equal(server_against(garbage, sizeof(garbage), false, err, sizeof(err)), -EPROTO);
	/* A handshake record that claims 16 KiB and ends after 3 bytes. */
	assert_int_equal(server_against("\x16\x03\x01\x40\x00" "abc", 8, false, err, sizeof(err)), -ECONNRESET);
	/* Nothing at all, then the end; nothing yet, nonblocking. */
	assert_int_equal(server_against(NULL, 0, false, err, sizeof(err)), -ECONNRESET);
	assert_int_equal(server_against(NULL, 0, true, err, sizeof(err)), -EAGAIN);
	assert_int_equal(server_against("\x16\x03\x01", 3, true, err, sizeof(err)), -EAGAIN);
}

static void test_plaintext_server(void **state)
{
	struct tls_creds *cc = creds(false, NULL, NULL, ca);
	struct wire_header h = { .magic = WIRE_MAGIC, .version = WIRE_VERSION, .flags = WIRE_F_REPLY | WIRE_F_ERROR,
				 .call = 3, .length = 4 };
	uint8_t reply[WIRE_HEADER_SIZE + 4] = { 0 };
	struct tls_conn *t;
	char err[512];
	int sv[2];

	/* What a plaintext listener answers a ClientHello: its error reply. */
	wire_header_encode(reply, &h);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(write(sv[1], reply, sizeof(reply)), (ssize_t)sizeof(reply));
	shutdown(sv[1], SHUT_WR);
	assert_int_equal(tls_conn_open(cc, sv[0], "127.0.0.1", &t, err, sizeof(err)), 0);
	assert_int_equal(tls_conn_handshake(t, false, err, sizeof(err)), -EPROTONOSUPPORT);
	assert_non_null(strstr(err, "ternd speaks tern's plaintext protocol"));
	pair_end(t, sv, cc);
}

static void test_creds_errors(void **state)
{
	struct tls_creds_config cfg = { .server = true, .cert_file = server_cert };
	struct tls_creds *c = NULL;
	char err[512], missing[160];

	assert_int_equal(tls_creds_open(&cfg, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "--tls-key"));
	cfg.key_file = client_key;
	assert_int_equal(tls_creds_open(&cfg, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "do not match"));
	snprintf(missing, sizeof(missing), "%s/nosuch.pem", dir);
	cfg = (struct tls_creds_config){ .cert_file = server_cert, .key_file = server_key, .ca_file = missing };
	assert_int_equal(tls_creds_open(&cfg, &c, err, sizeof(err)), -EINVAL);
	/* A key is no CA. */
	cfg.ca_file = server_key;
	assert_int_equal(tls_creds_open(&cfg, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no certificate"));
	cfg = (struct tls_creds_config){ .cert_file = client_cert };
	assert_int_equal(tls_creds_open(&cfg, &c, err, sizeof(err)), -EINVAL);
	tls_creds_close(NULL);
	tls_conn_close(NULL);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_discard),
		cmocka_unit_test(test_certificate_checks),
		cmocka_unit_test(test_hostile_handshakes),
		cmocka_unit_test(test_plaintext_server),
		cmocka_unit_test(test_creds_errors),
	};
	char cmd[512];
	int ret;

	alarm(50);      /* a handshake that waits forever fails the test */
	if (argc != 2) {
		fprintf(stderr, "usage: test_tls TLS_CERTS_PY\n");
		return 2;
	}
	snprintf(dir, sizeof(dir), "/tmp/tern-test-tls-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	snprintf(cmd, sizeof(cmd), "python3 '%s' '%s' >/dev/null", argv[1], dir);
	if (system(cmd)) {
		fprintf(stderr, "test_tls: no certificates (%s)\n", cmd);
		return 1;
	}
	path_of(ca, "CA/cacert.pem");
	path_of(other_ca, "other-CA/cacert.pem");
	path_of(server_cert, "tern/servercert.pem");
	path_of(server_key, "tern/private/serverkey.pem");
	path_of(client_cert, "tern/clientcert.pem");
	path_of(client_key, "tern/private/clientkey.pem");
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "test_tls: %s left behind\n", dir);
	return ret;
}
