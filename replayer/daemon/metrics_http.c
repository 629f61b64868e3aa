#define LOG_PREFIX "metrics: "
#include "metrics_http.h"
#include "http_request.h"
#include "log.h"
#include "metrics_text.h"
#include "monotonic.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A client this many accepts at most per poll round: a flood of connects
 * takes turns with the supervisor's other work. */
#define ACCEPTS_PER_ROUND 64

enum conn_state {
	CONN_FREE,
	CONN_READING,           /* the request head */
	CONN_WRITING,           /* the answer */
	CONN_DRAINING,          /* answered: what the client still sends is dropped */
};

struct metrics_conn {
	enum conn_state state;
	int fd;
	uint64_t deadline_ms;
	size_t len;
	char buf[HTTP_HEAD_MAX];
	char *out;
	size_t out_len, out_off;
};

struct metrics_http {
	int listen_fd;
	metrics_http_body_fn body;
	void *opaque;
	struct metrics_conn conns[METRICS_HTTP_CLIENTS_MAX];
};

static bool sockaddr_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

int metrics_http_open(const struct transport_url *url, bool public, metrics_http_body_fn body, void *opaque,
		      struct metrics_http **out, char *err, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct metrics_http *m;
	int fd, ret;

	*out = NULL;
	if (url->kind != TRANSPORT_TCP) {
		snprintf(err, cap, "only tcp://HOST:PORT");
		return -EINVAL;
	}
	fd = transport_listen(url);
	if (fd < 0) {
		snprintf(err, cap, "%s", strerror(-fd));
		return fd;
	}
	/* Judged on what was bound, not on the name: nothing is accepted
	 * before, so a refused address serves no one. */
	if (getsockname(fd, (struct sockaddr *)&ss, &len)) {
		ret = -errno;
		snprintf(err, cap, "getsockname: %s", strerror(errno));
		close(fd);
		return ret;
	}
	if (!public && !sockaddr_loopback(&ss)) {
		snprintf(err, cap, "%s is not a loopback address: the metrics name every session and HTTP has no "
			 "authentication here; write public:tcp://%s:%u to serve them beyond this host", url->host,
			 url->host, url->port);
		close(fd);
		return -EPERM;
	}
	/* accept4 until EAGAIN must not wait for the next client. */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)) {
		ret = -errno;
		snprintf(err, cap, "O_NONBLOCK: %s", strerror(errno));
		close(fd);
		return ret;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		close(fd);
		snprintf(err, cap, "out of memory");
		return -ENOMEM;
	}
	m->listen_fd = fd;
	m->body = body;
	m->opaque = opaque;
	for (unsigned i = 0; i < METRICS_HTTP_CLIENTS_MAX; i++)
		m->conns[i].fd = -1;
	*out = m;
	return 0;
}

static void conn_close(struct metrics_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->out);
	c->out = NULL;
	c->fd = -1;
	c->state = CONN_FREE;
}

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	}
	return "Error";
}

/* The whole answer in memory: @body (owned, may be NULL for an error's
 * text) of @len bytes, sent unless @head_only. 0 or -ENOMEM. */
static int answer_make(struct metrics_conn *c, int status, char *body, size_t len, bool head_only)
{
	char head[256], text[64];
	int n;

	if (!body) {
		n = snprintf(text, sizeof(text), "%d %s\n", status, reason(status));
		body = text;
		len = (size_t)n;
	}
	n = snprintf(head, sizeof(head),
		     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
		     status, reason(status), status == 200 ? METRICS_TEXT_CONTENT_TYPE : "text/plain; charset=utf-8",
		     len, status == 405 ? "Allow: GET, HEAD\r\n" : "");
	free(c->out);
	c->out_len = (size_t)n + (head_only ? 0 : len);
	c->out = malloc(c->out_len);
	c->out_off = 0;
	if (c->out) {
		memcpy(c->out, head, (size_t)n);
		if (!head_only)
			memcpy(c->out + n, body, len);
	}
	if (body != text)
		free(body);
	return c->out ? 0 : -ENOMEM;
}

/* Write what the socket takes now; once all is out, half-close and drain. */
static void conn_send(struct metrics_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			conn_close(c);
			return;
		}
		c->out_off += (size_t)n;
	}
	free(c->out);
	c->out = NULL;
	shutdown(c->fd, SHUT_WR);
	c->state = CONN_DRAINING;
	c->deadline_ms = monotonic_ms() + METRICS_HTTP_LINGER_MS;
}

static void conn_answer(struct metrics_conn *c, int status, char *body, size_t len, bool head_only)
{
	if (answer_make(c, status, body, len, head_only)) {
		conn_close(c);
		return;
	}
	c->state = CONN_WRITING;
	c->deadline_ms = monotonic_ms() + METRICS_HTTP_SEND_MS;
	conn_send(c);
}

static void conn_request(struct metrics_http *m, struct metrics_conn *c, const struct http_request *req)
{
	char *text = NULL;
	size_t len = 0;
	int ret;

	if (strcmp(req->path, "/metrics")) {
		conn_answer(c, 404, NULL, 0, req->method == HTTP_METHOD_HEAD);
		return;
	}
	if (req->method == HTTP_METHOD_OTHER) {
		conn_answer(c, 405, NULL, 0, false);
		return;
	}
	ret = m->body(m->opaque, &text, &len);
	if (ret) {
		pr_warn("cannot make the metrics: %s", strerror(-ret));
		free(text);
		conn_answer(c, 500, NULL, 0, req->method == HTTP_METHOD_HEAD);
		return;
	}
	conn_answer(c, 200, text, len, req->method == HTTP_METHOD_HEAD);
}

static void conn_readable(struct metrics_http *m, struct metrics_conn *c)
{
	struct http_request req;
	ssize_t n;
	int ret;

	if (c->state == CONN_DRAINING) {
		char sink[4096];

		n = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			conn_close(c);
		return;
	}
	n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n < 0 || (n == 0 && !c->len)) {
		conn_close(c);
		return;
	}
	c->len += (size_t)n;
	ret = http_request_parse(c->buf, c->len, &req);
	if (ret == -EAGAIN && n == 0)
		ret = 400;              /* the client ended its half: the head will never be whole */
	if (ret == -EAGAIN)
		return;
	if (ret > 0) {
		pr_debug("client answered %d", ret);
		conn_answer(c, ret, NULL, 0, false);
		return;
	}
	conn_request(m, c, &req);
}

static void listener_accept(struct metrics_http *m)
{
	for (unsigned k = 0; k < ACCEPTS_PER_ROUND; k++) {
		int fd = accept4(m->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct metrics_conn *c = NULL;

		if (fd < 0)
			return;
		for (unsigned i = 0; i < METRICS_HTTP_CLIENTS_MAX && !c; i++)
			if (m->conns[i].state == CONN_FREE)
				c = &m->conns[i];
		if (!c) {
			static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
						   "Connection: close\r\nRetry-After: 1\r\n\r\n";
			ssize_t sent = send(fd, busy, sizeof(busy) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);

			(void)sent;     /* best effort: the client is dropped either way */
			close(fd);
			continue;
		}
		*c = (struct metrics_conn){ .state = CONN_READING, .fd = fd,
					    .deadline_ms = monotonic_ms() + METRICS_HTTP_REQUEST_MS };
	}
}

unsigned metrics_http_poll_fill(struct metrics_http *m, struct pollfd *pfd, unsigned n, unsigned *first)
{
	*first = n;
	if (!m)
		return n;
	pfd[n++] = (struct pollfd){ .fd = m->listen_fd, .events = POLLIN };
	for (unsigned i = 0; i < METRICS_HTTP_CLIENTS_MAX; i++) {
		struct metrics_conn *c = &m->conns[i];

		/* A free one is polled as -1, so that each stays at its place. */
		pfd[n++] = (struct pollfd){ .fd = c->state == CONN_FREE ? -1 : c->fd,
					    .events = c->state == CONN_WRITING ? POLLOUT : POLLIN };
	}
	return n;
}

void metrics_http_poll_handle(struct metrics_http *m, const struct pollfd *pfd, unsigned first, unsigned end)
{
	if (!m || end - first != METRICS_HTTP_POLL_MAX)
		return;
	for (unsigned i = 0; i < METRICS_HTTP_CLIENTS_MAX; i++) {
		struct metrics_conn *c = &m->conns[i];
		short ev = pfd[first + 1 + i].revents;

		if (!ev || c->state == CONN_FREE || pfd[first + 1 + i].fd != c->fd)
			continue;
		if (c->state == CONN_WRITING)
			conn_send(c);
		else
			conn_readable(m, c);
	}
	/* After the clients: one accepted now was not polled yet. */
	if (pfd[first].revents & POLLIN)
		listener_accept(m);
}

int metrics_http_expire(struct metrics_http *m)
{
	uint64_t now = monotonic_ms(), next = UINT64_MAX;

	if (!m)
		return -1;
	for (unsigned i = 0; i < METRICS_HTTP_CLIENTS_MAX; i++) {
		struct metrics_conn *c = &m->conns[i];

		if (c->state == CONN_FREE)
			continue;
		if (c->deadline_ms <= now && c->state == CONN_READING)
			conn_answer(c, 408, NULL, 0, false);
		else if (c->deadline_ms <= now)
			conn_close(c);
		if (c->state != CONN_FREE && c->deadline_ms < next)
			next = c->deadline_ms;
	}
	return next == UINT64_MAX ? -1 : (int)(next > now ? next - now : 0);
}

void metrics_http_fds_close(struct metrics_http *m)
{
	if (!m)
		return;
	close(m->listen_fd);
	for (unsigned i = 0; i < METRICS_HTTP_CLIENTS_MAX; i++)
		if (m->conns[i].state != CONN_FREE)
			close(m->conns[i].fd);
}

void metrics_http_close(struct metrics_http *m)
{
	if (!m)
		return;
	for (unsigned i = 0; i < METRICS_HTTP_CLIENTS_MAX; i++)
		if (m->conns[i].state != CONN_FREE)
			conn_close(&m->conns[i]);
	close(m->listen_fd);
	free(m);
}
