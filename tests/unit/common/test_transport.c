/* Transport URLs and a loopback round trip over unix and tcp. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include "transport.h"

static void test_url_parse(void **state)
{
	struct transport_url u;
	char text[300];

	assert_int_equal(transport_url_parse("unix:/run/tern/ternd.sock", &u), 0);
	assert_int_equal(u.kind, TRANSPORT_UNIX);
	assert_string_equal(u.path, "/run/tern/ternd.sock");
	assert_false(u.plain);
	assert_int_equal(transport_url_parse("/tmp/x.sock", &u), 0);
	assert_int_equal(u.kind, TRANSPORT_UNIX);
	assert_false(u.plain);
	/* The plain socket, never upgraded to shared memory. */
	assert_int_equal(transport_url_parse("unix+plain:/run/tern/ternd.sock", &u), 0);
	assert_int_equal(u.kind, TRANSPORT_UNIX);
	assert_true(u.plain);
	assert_string_equal(u.path, "/run/tern/ternd.sock");
	transport_url_format(&u, text, sizeof(text));
	assert_string_equal(text, "unix+plain:/run/tern/ternd.sock");
	assert_int_equal(transport_url_parse("unix+plain:", &u), -EINVAL);
	assert_int_equal(transport_url_parse("unix+shm:/x", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tcp://127.0.0.1:7000", &u), 0);
	assert_int_equal(u.kind, TRANSPORT_TCP);
	assert_string_equal(u.host, "127.0.0.1");
	assert_int_equal(u.port, 7000);
	assert_true(transport_url_needs_token(&u));
	assert_int_equal(transport_url_parse("tcp://[::1]:7001", &u), 0);
	assert_string_equal(u.host, "::1");
	transport_url_format(&u, text, sizeof(text));
	assert_string_equal(text, "tcp://[::1]:7001");
	assert_int_equal(transport_url_parse("tls://ternd.example.org:16514", &u), 0);
	assert_int_equal(u.kind, TRANSPORT_TLS);
	assert_string_equal(u.host, "ternd.example.org");
	assert_int_equal(u.port, 16514);
	assert_true(transport_url_needs_token(&u));
	assert_true(transport_url_is_tcp(&u));
	transport_url_format(&u, text, sizeof(text));
	assert_string_equal(text, "tls://ternd.example.org:16514");
	assert_int_equal(transport_url_parse("tls://[::1]:7002", &u), 0);
	transport_url_format(&u, text, sizeof(text));
	assert_string_equal(text, "tls://[::1]:7002");
	/* Brackets only around a whole host, which is never empty. */
	assert_int_equal(transport_url_parse("tls://[[]:1", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tls://a]:1", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tls://[]:1", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tls://:1", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tls://host", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tls:/host:1", &u), -EINVAL);
	assert_int_equal(transport_url_parse("vsock://2:9999", &u), 0);
	assert_int_equal(u.kind, TRANSPORT_VSOCK);
	assert_int_equal(u.cid, 2);
	assert_int_equal(u.port, 9999);
	assert_false(transport_url_needs_token(&u));
	assert_int_equal(transport_url_parse("tcp://host", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tcp://host:0", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tcp://host:70000", &u), -EINVAL);
	/* Found by fuzz_transport_url: a host with ':' outside brackets, whose
	 * bracketed form may not fit, and ports strtoul would take. */
	assert_int_equal(transport_url_parse("tls://h:7h:777tcp:4", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tcp://::1:8", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tcp://host:+7", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tcp://host: 7", &u), -EINVAL);
	assert_int_equal(transport_url_parse("tcp://[::1]:8", &u), 0);
	assert_int_equal(transport_url_parse("vsock://x:1", &u), -EINVAL);
	assert_int_equal(transport_url_parse("http://x", &u), -EINVAL);
	assert_int_equal(transport_url_parse("unix:", &u), -EINVAL);
	assert_int_equal(transport_url_parse("", &u), -EINVAL);
}

static void *accept_echo(void *arg)
{
	int lfd = *(int *)arg, fd = transport_accept(lfd);
	char buf[16];
	ssize_t n;

	if (fd < 0)
		return NULL;
	n = read(fd, buf, sizeof(buf));
	if (n > 0 && write(fd, buf, (size_t)n) != n)
		n = -1;
	close(fd);
	return NULL;
}

static void roundtrip(const char *text)
{
	struct transport_url u;
	pthread_t t;
	char buf[16] = { 0 };
	int lfd, fd;

	assert_int_equal(transport_url_parse(text, &u), 0);
	lfd = transport_listen(&u);
	assert_true(lfd >= 0);
	pthread_create(&t, NULL, accept_echo, &lfd);
	fd = transport_connect(&u);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "ping", 4), 4);
	assert_int_equal(read(fd, buf, sizeof(buf)), 4);
	assert_string_equal(buf, "ping");
	close(fd);
	pthread_join(t, NULL);
	close(lfd);
}

/* virtio:PORT names the agent's socket for that port; hostile names are
 * refused, the token is never needed, it cannot be listened on. */
static void test_virtio_url(void **state)
{
	struct transport_url u;
	char text[300], sock[108];
	char longname[200];

	assert_int_equal(transport_url_parse("virtio:/dev/virtio-ports/org.tern.0", &u), 0);
	assert_int_equal(u.kind, TRANSPORT_VIRTIO);
	assert_string_equal(u.path, "/dev/virtio-ports/org.tern.0");
	assert_false(transport_url_needs_token(&u));
	transport_url_format(&u, text, sizeof(text));
	assert_string_equal(text, "virtio:/dev/virtio-ports/org.tern.0");
	assert_int_equal(transport_virtio_agent_socket(u.path, sock, sizeof(sock)), 0);
	assert_string_equal(sock, "/run/tern/agent-org.tern.0.sock");
	assert_int_equal(transport_listen(&u), -EINVAL);

	assert_int_equal(transport_url_parse("virtio:", &u), -EINVAL);
	assert_int_equal(transport_url_parse("virtio:org.tern.0", &u), -EINVAL);       /* not a path */
	assert_int_equal(transport_url_parse("virtio:/dev/virtio-ports/", &u), -EINVAL);
	assert_int_equal(transport_url_parse("virtio:/dev/virtio-ports/..", &u), -EINVAL);
	assert_int_equal(transport_url_parse("virtio:/dev/virtio-ports/.", &u), -EINVAL);
	assert_int_equal(transport_url_parse("virtio:/dev/x/a b", &u), -EINVAL);
	assert_int_equal(transport_url_parse("virtio:/dev/x/a\nb", &u), -EINVAL);
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	snprintf(text, sizeof(text), "virtio:/p/%s", longname);
	assert_int_equal(transport_url_parse(text, &u), -EINVAL);
	/* A name that fits the URL but not the socket path. */
	longname[90] = 0;
	snprintf(text, sizeof(text), "virtio:/p/%s", longname);
	assert_int_equal(transport_url_parse(text, &u), -EINVAL);
	assert_int_equal(transport_virtio_agent_socket("/p/x", sock, 10), -ENAMETOOLONG);
}

static void test_unix_roundtrip(void **state)
{
	char path[64];

	snprintf(path, sizeof(path), "unix:/tmp/tern-test-%d.sock", (int)getpid());
	roundtrip(path);
	unlink(path + 5);
}

/* The socket file appears only once it accepts connections (it is bound
 * under PATH~ and renamed), a stale socket is replaced, and a file that is
 * not a socket is left alone. */
static void test_unix_listen_file(void **state)
{
	struct transport_url u;
	char path[64], staged[80], text[80];
	int lfd, fd, stale;

	snprintf(path, sizeof(path), "/tmp/tern-test-listen-%d.sock", (int)getpid());
	snprintf(staged, sizeof(staged), "%s~", path);
	snprintf(text, sizeof(text), "unix:%s", path);
	assert_int_equal(transport_url_parse(text, &u), 0);

	lfd = transport_listen(&u);
	assert_true(lfd >= 0);
	assert_int_equal(access(staged, F_OK), -1);
	fd = transport_connect(&u);	/* queued in the backlog, no accept needed */
	assert_true(fd >= 0);
	close(fd);
	close(lfd);

	/* The file of the socket just closed is stale: the next listen takes its place. */
	stale = transport_listen(&u);
	assert_true(stale >= 0);
	close(stale);
	unlink(path);

	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "data", 4), 4);
	close(fd);
	assert_int_equal(transport_listen(&u), -EADDRINUSE);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, text, sizeof(text)), 4);
	close(fd);
	assert_int_equal(access(staged, F_OK), -1);
	unlink(path);
}

static void test_tcp_roundtrip(void **state)
{
	char url[64];

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", 20000 + (int)(getpid() % 20000));
	roundtrip(url);
}

static void test_connect_refused(void **state)
{
	struct transport_url u;

	assert_int_equal(transport_url_parse("unix:/tmp/tern-no-such.sock", &u), 0);
	assert_true(transport_connect(&u) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_url_parse),
		cmocka_unit_test(test_virtio_url),
		cmocka_unit_test(test_unix_roundtrip),
		cmocka_unit_test(test_unix_listen_file),
		cmocka_unit_test(test_tcp_roundtrip),
		cmocka_unit_test(test_connect_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
