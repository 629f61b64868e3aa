/* The VM channel end to end, without a VM (docs/vm-transport.md, "Tests").
 *
 *   client threads -> tern-agent --port-connect unix:PORT --listen AGENT
 *                  -> port stand-in (this process) -> vm_relay_serve
 *                  -> stream_open: a connection to an echo server
 *
 * The stand-in behaves like QEMU's side of a virtio-serial port: the agent's
 * connection to it never breaks, while its connection to the relay is cut
 * and made again; then what the host had sent and the guest had not read is
 * lost, what the guest had sent continues on the new connection (a frame
 * split across the two), and the last guest bytes are sent again from a
 * 32 KiB boundary, as a migration does; and a migration's order: the
 * destination connects while the source still carries the bytes, then the
 * source ends. Four streams push 16 MiB each and
 * must get every byte back, once, in order. A reset ('R' on the control
 * pipe) must end every stream; end of file on it must end the relay.
 *
 *     test_vm_relay PATH_TO_TERN_AGENT
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "log.h"
#include "relay.h"
#include "transport.h"

#define STREAMS 4
#define PER_STREAM (16u << 20)
#define HIST (256u << 10)

static const char *agent_path;
static char dir[64], port_sock[96], relay_sock[96], agent_sock[96], echo_sock[96];

static int unix_listen(const char *path)
{
	struct transport_url u = { .kind = TRANSPORT_UNIX };

	snprintf(u.path, sizeof(u.path), "%s", path);
	return transport_listen(&u);
}

static int unix_connect(const char *path)
{
	struct transport_url u = { .kind = TRANSPORT_UNIX };

	snprintf(u.path, sizeof(u.path), "%s", path);
	return transport_connect(&u);
}

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ---- echo server ------------------------------------------------------ */

static void *echo_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint8_t buf[65536];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (write_all(fd, buf, (size_t)n))
			break;
	close(fd);
	return NULL;
}

static void *echo_server(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	for (;;) {
		int fd = transport_accept(lfd);
		pthread_t t;

		if (fd < 0)
			return NULL;
		pthread_create(&t, NULL, echo_conn, (void *)(intptr_t)fd);
		pthread_detach(t);
	}
}

static int echo_open(void *opaque)
{
	return unix_connect(echo_sock);
}

/* ---- the port stand-in ------------------------------------------------ */

struct stand_in {
	int port_lfd;
	int guest, host;        /* the agent's connection; ours to the relay */
	int standby;            /* a migration's destination, connected early */
	int bounce_pipe[2];     /* a byte: cut the host side and reconnect */
	uint8_t hist[HIST];     /* the last guest->host bytes */
	uint64_t hist_total;
	uint64_t lost;          /* host->guest bytes dropped at bounces */
	unsigned relay_cuts;    /* connections the relay ended */
	unsigned bounces;
};

static void hist_add(struct stand_in *s, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		s->hist[(s->hist_total + i) % HIST] = p[i];
	s->hist_total += n;
}

static void bounce(struct stand_in *s)
{
	uint64_t from, n;
	uint8_t dup[HIST];

	uint8_t lost[32768];
	ssize_t n_lost;

	/* Whatever the relay had sent that we did not pass on is gone with
	 * the old connection: make sure some is. */
	fcntl(s->host, F_SETFL, O_NONBLOCK);
	for (int i = 0; i < 4 && (n_lost = read(s->host, lost, sizeof(lost))) > 0; i++)
		s->lost += (uint64_t)n_lost;
	close(s->host);
	s->host = unix_connect(relay_sock);
	assert_true(s->host >= 0);
	/* A migration's duplicates: guest bytes again from a 32 KiB boundary. */
	n = s->hist_total < 96 * 1024 ? s->hist_total : 96 * 1024;
	from = (s->hist_total - n + 32767) & ~32767ull;
	if (from < s->hist_total) {
		n = s->hist_total - from;
		for (uint64_t i = 0; i < n; i++)
			dup[i] = s->hist[(from + i) % HIST];
		write_all(s->host, dup, (size_t)n);
	}
	s->bounces++;
}

/* A migration's switchover: the source's connection ends, the guest's
 * bytes go on (and repeat) through the destination's, open since 'm'. */
static void switchover(struct stand_in *s)
{
	int old = s->host;

	s->host = s->standby;
	s->standby = -1;
	assert_true(s->host >= 0);
	close(old);
	s->bounces++;
}

/* Not a real port's habit but the stand-in's: the agent's connection ends
 * (end of file, as a port shows while its host side is away). The agent
 * must connect again; the link's epochs are the same, nothing is lost. */
static void bounce_guest(struct stand_in *s)
{
	close(s->guest);
	close(s->host);
	s->guest = transport_accept(s->port_lfd);
	assert_true(s->guest >= 0);
	s->host = unix_connect(relay_sock);
	assert_true(s->host >= 0);
	s->bounces++;
}

static void *stand_in_run(void *arg)
{
	struct stand_in *s = arg;
	uint8_t buf[65536];
	size_t carry = 0;       /* guest bytes of a frame cut by a bounce */

	s->guest = transport_accept(s->port_lfd);
	assert_true(s->guest >= 0);
	s->host = unix_connect(relay_sock);
	assert_true(s->host >= 0);
	for (;;) {
		struct pollfd p[3] = {
			{ .fd = s->guest, .events = POLLIN },
			{ .fd = s->host, .events = POLLIN },
			{ .fd = s->bounce_pipe[0], .events = POLLIN },
		};
		ssize_t n;

		if (poll(p, 3, 1000) < 0)
			continue;
		if (p[2].revents) {
			char c;

			if (read(s->bounce_pipe[0], &c, 1) != 1)
				break;
			if (c == 'g')
				bounce_guest(s);
			else if (c == 'm') {
				/* First a destination that gives up (a failed
				 * migration), then the one that succeeds. */
				close(unix_connect(relay_sock));
				s->standby = unix_connect(relay_sock);
			}
			else if (c == 'M')
				switchover(s);
			else
				bounce(s);
			continue;
		}
		if (p[0].revents) {
			/* Split guest writes: half now, the rest maybe on a new
			 * connection. */
			n = read(s->guest, buf, sizeof(buf));
			if (n <= 0)
				break;
			carry = (size_t)n / 2;
			hist_add(s, buf, (size_t)n);
			write_all(s->host, buf, (size_t)n - carry);
			write_all(s->host, buf + n - carry, carry);
		}
		if (p[1].revents) {
			n = read(s->host, buf, sizeof(buf));
			if (n <= 0) {
				/* The relay cut us: QEMU's reconnect, without the
				 * duplicates. It should not: it cuts no connection
				 * that is served until a newer one is live. */
				s->relay_cuts++;
				close(s->host);
				s->host = unix_connect(relay_sock);
				if (s->host < 0)
					break;
				continue;
			}
			if (write_all(s->guest, buf, (size_t)n))
				break;
		}
	}
	return NULL;
}

/* ---- clients ---------------------------------------------------------- */

static uint8_t pattern(unsigned stream, uint64_t k)
{
	return (uint8_t)((k * 2654435761u) >> 9 ^ stream * 77u ^ k);
}

struct client {
	unsigned index;
	int fd;
	uint64_t sent, got;
	bool ok;
};

static void *client_run(void *arg)
{
	struct client *c = arg;
	uint8_t out[40000], in[65536];

	fcntl(c->fd, F_SETFL, O_NONBLOCK);
	while (c->got < PER_STREAM) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN | (c->sent < PER_STREAM ? POLLOUT : 0) };
		ssize_t n;

		if (poll(&p, 1, 10000) <= 0)
			return NULL;    /* stuck: c->ok stays false */
		if (p.revents & POLLOUT && c->sent < PER_STREAM) {
			size_t len = 1 + (size_t)(c->sent * 7919 % sizeof(out));

			if (len > PER_STREAM - c->sent)
				len = (size_t)(PER_STREAM - c->sent);
			for (size_t i = 0; i < len; i++)
				out[i] = pattern(c->index, c->sent + i);
			n = send(c->fd, out, len, MSG_NOSIGNAL);
			if (n > 0)
				c->sent += (uint64_t)n;
		}
		if (p.revents & (POLLIN | POLLHUP)) {
			n = read(c->fd, in, sizeof(in));
			if (n == 0 || (n < 0 && errno != EAGAIN))
				return NULL;
			for (ssize_t i = 0; i < n; i++)
				if (in[i] != pattern(c->index, c->got + (uint64_t)i)) {
					fprintf(stderr, "stream %u: byte %llu wrong\n", c->index,
						(unsigned long long)(c->got + (uint64_t)i));
					return NULL;
				}
			if (n > 0)
				c->got += (uint64_t)n;
		}
	}
	c->ok = true;
	return NULL;
}

static int agent_connect(void)
{
	for (int i = 0; i < 200; i++) {
		int fd = unix_connect(agent_sock);

		if (fd >= 0)
			return fd;
		usleep(20000);
	}
	return -1;
}

/* A new stream through the agent that echoes @word: its fd. */
static int echo_once(const char *word)
{
	size_t len = strlen(word);
	char buf[16];
	int fd = agent_connect();

	assert_true(fd >= 0 && len < sizeof(buf));
	assert_int_equal(write_all(fd, word, len), 0);
	for (size_t got = 0; got < len;) {
		ssize_t n = read(fd, buf + got, len - got);

		assert_true(n > 0);
		got += (size_t)n;
	}
	assert_memory_equal(buf, word, len);
	return fd;
}

static void test_end_to_end(void **state)
{
	struct stand_in *s = calloc(1, sizeof(*s));
	struct client c[STREAMS];
	pthread_t echo_t, stand_t, ct[STREAMS];
	int relay_lfd, echo_lfd, control[2];
	pid_t relay, agent;
	int status, fd;
	char buf[16];
	struct timespec t0, t1;
	uint64_t got_at_standby = 0;
	double secs;

	assert_non_null(s);
	s->standby = -1;
	echo_lfd = unix_listen(echo_sock);
	relay_lfd = unix_listen(relay_sock);
	assert_true(echo_lfd >= 0 && relay_lfd >= 0);
	assert_int_equal(pipe2(control, O_CLOEXEC), 0);
	assert_int_equal(pipe2(s->bounce_pipe, O_CLOEXEC), 0);

	relay = fork();
	if (!relay) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		log_open("vm_relay", LOG_INFO, -1);
		close(control[1]);
		_exit(vm_relay_serve(relay_lfd, echo_open, NULL, control[0]) ? 1 : 0);
	}
	close(control[0]);
	pthread_create(&echo_t, NULL, echo_server, (void *)(intptr_t)echo_lfd);
	agent = fork();
	if (!agent) {
		char url[160];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		snprintf(url, sizeof(url), "unix:%s", port_sock);
		execl(agent_path, "tern-agent", "--port-connect", url, "--listen", agent_sock, "--log-level",
		      "warn", (char *)NULL);
		_exit(127);
	}
	/* The port appears after the agent started: it must keep trying. */
	usleep(300000);
	s->port_lfd = unix_listen(port_sock);
	assert_true(s->port_lfd >= 0);
	pthread_create(&stand_t, NULL, stand_in_run, s);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0; i < STREAMS; i++) {
		c[i] = (struct client){ .index = i, .fd = agent_connect() };
		assert_true(c[i].fd >= 0);
		pthread_create(&ct[i], NULL, client_run, &c[i]);
	}
	/* Cut the host side three times while the bytes flow, then the
	 * agent's side once; then a migration: the destination connects
	 * ('m') and bytes must keep flowing through the source until the
	 * switchover ('M'). */
	for (int b = 0; b < 6; b++) {
		uint64_t want = (uint64_t)(b + 1) * PER_STREAM / 7;

		for (int w = 0; w < 3000 && c[0].got < want; w++)
			usleep(1000);
		/* In the middle: bytes still to come back on every stream. */
		for (unsigned i = 0; i < STREAMS; i++)
			assert_true(c[i].got < PER_STREAM);
		if (b == 5)
			assert_true(c[0].got >= got_at_standby + PER_STREAM / 8);
		got_at_standby = c[0].got;
		assert_int_equal(write(s->bounce_pipe[1], &"bbbgmM"[b], 1), 1);
	}
	for (unsigned i = 0; i < STREAMS; i++) {
		pthread_join(ct[i], NULL);
		if (!c[i].ok)
			fail_msg("stream %u: sent %llu, got back %llu of %u", i, (unsigned long long)c[i].sent,
				 (unsigned long long)c[i].got, PER_STREAM);
		close(c[i].fd);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	/* The figure: each byte went out and came back through the link. */
	printf("vm relay: %u MiB each way over %d streams in %.2f s (%.0f MiB/s each way), %u cuts\n",
	       STREAMS * (PER_STREAM >> 20), STREAMS, secs, STREAMS * (PER_STREAM >> 20) / secs, s->bounces);
	assert_int_equal(s->bounces, 5);
	assert_int_equal(s->relay_cuts, 0);
	assert_true(s->lost > 0);

	/* A reset ends every stream: the client reads end of file. */
	fd = echo_once("ping");
	assert_int_equal(write(control[1], "R", 1), 1);
	{
		struct pollfd p = { .fd = fd, .events = POLLIN };

		assert_int_equal(poll(&p, 1, 10000), 1);
		assert_int_equal(read(fd, buf, sizeof(buf)), 0);
	}
	close(fd);
	/* ... and new streams work after it. */
	close(echo_once("pong"));

	/* End of file on the control pipe ends the relay, with status 0. */
	close(control[1]);
	assert_int_equal(waitpid(relay, &status, 0), relay);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	kill(agent, SIGTERM);
	waitpid(agent, &status, 0);
	/* The stand-in ends at end of file on its pipe. */
	close(s->bounce_pipe[1]);
	pthread_join(stand_t, NULL);
	close(s->guest);
	close(s->host);
	close(s->port_lfd);
	free(s);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_end_to_end) };

	if (argc != 2) {
		fprintf(stderr, "usage: test_vm_relay PATH_TO_TERN_AGENT\n");
		return 2;
	}
	agent_path = argv[1];
	signal(SIGPIPE, SIG_IGN);
	snprintf(dir, sizeof(dir), "/tmp/tern-vm-relay-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	snprintf(port_sock, sizeof(port_sock), "%s/port.sock", dir);
	snprintf(relay_sock, sizeof(relay_sock), "%s/relay.sock", dir);
	snprintf(agent_sock, sizeof(agent_sock), "%s/agent.sock", dir);
	snprintf(echo_sock, sizeof(echo_sock), "%s/echo.sock", dir);
	int ret = cmocka_run_group_tests(tests, NULL, NULL);

	unlink(port_sock);
	unlink(relay_sock);
	unlink(agent_sock);
	unlink(echo_sock);
	rmdir(dir);
	return ret;
}
