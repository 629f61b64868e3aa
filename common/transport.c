#define LOG_PREFIX "transport: "
#include "transport.h"
#include "log.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

static int parse_port(const char *text, unsigned *port)
{
	char *end;
	unsigned long v;

	if (*text < '0' || *text > '9')
		return -EINVAL;         /* strtoul would take spaces and signs */
	errno = 0;
	v = strtoul(text, &end, 10);
	if (errno || end == text || *end || v == 0 || v > 65535)
		return -EINVAL;
	*port = (unsigned)v;
	return 0;
}

int transport_virtio_agent_socket(const char *port_path, char *buf, unsigned cap)
{
	const char *name = strrchr(port_path, '/');
	int n;

	name = name ? name + 1 : port_path;
	if (!*name || !strcmp(name, ".") || !strcmp(name, "..") ||
	    strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(name))
		return -EINVAL;
	n = snprintf(buf, cap, TRANSPORT_AGENT_DIR "/agent-%s.sock", name);
	if (n < 0 || (unsigned)n >= cap || (unsigned)n >= sizeof(((struct transport_url *)0)->path))
		return -ENAMETOOLONG;
	return 0;
}

int transport_url_parse(const char *text, struct transport_url *url)
{
	const char *rest;
	const char *colon;

	memset(url, 0, sizeof(*url));
	if (!text || !*text)
		return -EINVAL;
	if (text[0] == '/' || !strncmp(text, "unix:", 5) || !strncmp(text, "shm:", 4) ||
	    !strncmp(text, TRANSPORT_UNIX_PLAIN_SCHEME, strlen(TRANSPORT_UNIX_PLAIN_SCHEME))) {
		bool shm = !strncmp(text, "shm:", 4);

		url->plain = !strncmp(text, TRANSPORT_UNIX_PLAIN_SCHEME, strlen(TRANSPORT_UNIX_PLAIN_SCHEME));
		rest = text[0] == '/' ? text : strchr(text, ':') + 1;
		if (!*rest || strlen(rest) >= sizeof(url->path))
			return -EINVAL;
		url->kind = shm ? TRANSPORT_SHM : TRANSPORT_UNIX;
		strcpy(url->path, rest);
		return 0;
	}
	if (!strncmp(text, "virtio:", 7)) {
		char sock[sizeof(url->path)];

		rest = text + 7;
		if (rest[0] != '/' || strlen(rest) >= sizeof(url->path) ||
		    transport_virtio_agent_socket(rest, sock, sizeof(sock)))
			return -EINVAL;
		url->kind = TRANSPORT_VIRTIO;
		strcpy(url->path, rest);
		return 0;
	}
	if (!strncmp(text, "tcp://", 6) || !strncmp(text, "tls://", 6)) {
		rest = text + 6;
		colon = strrchr(rest, ':');
		if (!colon || colon == rest || (size_t)(colon - rest) >= sizeof(url->host))
			return -EINVAL;
		url->kind = text[1] == 'l' ? TRANSPORT_TLS : TRANSPORT_TCP;
		memcpy(url->host, rest, (size_t)(colon - rest));
		/* [::1]:port */
		bool bracketed = url->host[0] == '[';

		if (bracketed) {
			size_t n = strlen(url->host);

			if (n < 3 || url->host[n - 1] != ']')
				return -EINVAL;
			memmove(url->host, url->host + 1, n - 2);
			url->host[n - 2] = 0;
		}
		/* Brackets only around the whole host, and a host with ':' only
		 * in them (as URLs write IPv6 addresses): anything else would not
		 * read back the same once formatted. */
		if (!url->host[0] || strpbrk(url->host, "[]") || (!bracketed && strchr(url->host, ':')))
			return -EINVAL;
		return parse_port(colon + 1, &url->port);
	}
	if (!strncmp(text, "vsock://", 8)) {
		char *end;
		unsigned long cid;

		rest = text + 8;
		errno = 0;
		cid = strtoul(rest, &end, 10);
		if (errno || end == rest || *end != ':' || cid > 0xffffffffu)
			return -EINVAL;
		url->kind = TRANSPORT_VSOCK;
		url->cid = (unsigned)cid;
		return parse_port(end + 1, &url->port);
	}
	return -EINVAL;
}

void transport_url_format(const struct transport_url *url, char *buf, unsigned cap)
{
	switch (url->kind) {
	case TRANSPORT_UNIX:
		snprintf(buf, cap, url->plain ? TRANSPORT_UNIX_PLAIN_SCHEME "%s" : "unix:%s", url->path);
		break;
	case TRANSPORT_SHM:
		snprintf(buf, cap, "shm:%s", url->path);
		break;
	case TRANSPORT_VIRTIO:
		snprintf(buf, cap, "virtio:%s", url->path);
		break;
	case TRANSPORT_TCP:
	case TRANSPORT_TLS: {
		const char *scheme = url->kind == TRANSPORT_TLS ? "tls" : "tcp";

		snprintf(buf, cap, strchr(url->host, ':') ? "%s://[%s]:%u" : "%s://%s:%u", scheme,
			 url->host, url->port);
		break;
	}
	case TRANSPORT_VSOCK:
		snprintf(buf, cap, "vsock://%u:%u", url->cid, url->port);
		break;
	}
}

bool transport_url_needs_token(const struct transport_url *url)
{
	return transport_url_is_tcp(url);
}

bool transport_url_is_tcp(const struct transport_url *url)
{
	return url->kind == TRANSPORT_TCP || url->kind == TRANSPORT_TLS;
}

static int unix_addr(const struct transport_url *url, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(url->path) >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	strcpy(sa->sun_path, url->path);
	return 0;
}

static int tcp_resolve(const struct transport_url *url, bool passive, struct addrinfo **res)
{
	struct addrinfo hints = { 0 };
	char port[8];
	int ret;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = passive ? AI_PASSIVE : 0;
	snprintf(port, sizeof(port), "%u", url->port);
	ret = getaddrinfo(url->host, port, &hints, res);
	if (ret) {
		pr_err("cannot resolve %s: %s", url->host, gai_strerror(ret));
		return -EHOSTUNREACH;
	}
	return 0;
}

/* Deep enough that a flood of connections that never send a hello
 * (closed by ternd at accept or at their deadline) leaves room for the
 * guests behind them. */
#define LISTEN_BACKLOG SOMAXCONN

/* A unix socket's file appears at bind, before listen: a client that
 * connects in between is refused. So bind under "PATH~", listen, and
 * rename onto PATH; where PATH~ does not fit sun_path, bind PATH itself. */
static int unix_listen(const struct transport_url *url)
{
	struct sockaddr_un sa;
	struct stat st;
	size_t len = strlen(url->path);
	bool staged;
	int fd, ret;

	ret = unix_addr(url, &sa);
	if (ret)
		return ret;
	staged = len + 1 < sizeof(sa.sun_path);
	if (staged)
		sa.sun_path[len] = '~';
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A socket file left by a ternd that died is in the way; anything else is not ours. */
	if (!lstat(url->path, &st)) {
		if (!S_ISSOCK(st.st_mode)) {
			close(fd);
			return -EADDRINUSE;
		}
		if (!staged)
			unlink(url->path);
	}
	if (staged && !lstat(sa.sun_path, &st) && S_ISSOCK(st.st_mode))
		unlink(sa.sun_path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto fail;
	if (listen(fd, LISTEN_BACKLOG) < 0)
		goto fail_bound;
	/* rename() replaces a stale socket at PATH, and refuses a directory. */
	if (staged && rename(sa.sun_path, url->path) < 0)
		goto fail_bound;
	return fd;
fail_bound:
	ret = -errno;
	unlink(sa.sun_path);
	close(fd);
	return ret;
fail:
	ret = -errno;
	close(fd);
	return ret;
}

int transport_listen(const struct transport_url *url)
{
	int fd, one = 1, ret;

	switch (url->kind) {
	case TRANSPORT_UNIX:
	case TRANSPORT_SHM:
		return unix_listen(url);
	case TRANSPORT_TCP:
	case TRANSPORT_TLS: {
		struct addrinfo *res;

		ret = tcp_resolve(url, true, &res);
		if (ret)
			return ret;
		fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			ret = -errno;
			freeaddrinfo(res);
			return ret;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		ret = bind(fd, res->ai_addr, res->ai_addrlen);
		freeaddrinfo(res);
		if (ret < 0)
			goto fail;
		break;
	}
	case TRANSPORT_VSOCK: {
		struct sockaddr_vm sa = { 0 };

		fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		sa.svm_family = AF_VSOCK;
		sa.svm_cid = url->cid;
		sa.svm_port = url->port;
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			goto fail;
		break;
	}
	default:
		return -EINVAL;
	}
	if (listen(fd, LISTEN_BACKLOG) < 0)
		goto fail;
	return fd;
fail:
	ret = -errno;
	close(fd);
	return ret;
}

int transport_accept(int listen_fd)
{
	int fd, one = 1;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	do {
		fd = accept4(listen_fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
	} while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return -errno;
	if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int transport_connect(const struct transport_url *url)
{
	int fd, ret, one = 1;

	switch (url->kind) {
	case TRANSPORT_VIRTIO: {
		struct transport_url agent = { .kind = TRANSPORT_UNIX };

		ret = transport_virtio_agent_socket(url->path, agent.path, sizeof(agent.path));
		if (ret)
			return ret;
		return transport_connect(&agent);
	}
	case TRANSPORT_UNIX:
	case TRANSPORT_SHM: {
		struct sockaddr_un sa;

		ret = unix_addr(url, &sa);
		if (ret)
			return ret;
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			goto fail;
		return fd;
	}
	case TRANSPORT_TCP:
	case TRANSPORT_TLS: {
		struct addrinfo *res, *ai;

		ret = tcp_resolve(url, false, &res);
		if (ret)
			return ret;
		ret = -ECONNREFUSED;
		for (ai = res; ai; ai = ai->ai_next) {
			fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fd < 0)
				continue;
			if (!connect(fd, ai->ai_addr, ai->ai_addrlen)) {
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				freeaddrinfo(res);
				return fd;
			}
			ret = -errno;
			close(fd);
		}
		freeaddrinfo(res);
		return ret;
	}
	case TRANSPORT_VSOCK: {
		struct sockaddr_vm sa = { 0 };

		fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		sa.svm_family = AF_VSOCK;
		sa.svm_cid = url->cid;
		sa.svm_port = url->port;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			goto fail;
		return fd;
	}
	default:
		return -EINVAL;
	}
fail:
	ret = -errno;
	close(fd);
	return ret;
}

int transport_tcp_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -errno;

	if (fd < 0)
		return port;
	if (!bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &len))
		port = ntohs(sa.sin_port);
	else
		port = -errno;
	close(fd);
	return port;
}
