#include "service_sockets.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int say(char *err, size_t cap, int ret, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int say(char *err, size_t cap, int ret, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
	return ret;
}

/* A whole decimal number of at most 9 digits (no sign, no space): what a
 * manager writes. -1 for anything else. */
static long number_parse(const char *text)
{
	size_t n = strlen(text);

	if (!n || n > 9 || strspn(text, "0123456789") != n)
		return -1;
	return strtol(text, NULL, 10);
}

/* Split LISTEN_FDNAMES into @count names; 0 or -EINVAL (said). */
static int names_parse(struct service_sockets *ss, const char *names, unsigned count, char *err, size_t cap)
{
	unsigned given = *names || count ? 1 : 0;
	const char *p = names;

	for (const char *c = names; *c; c++)
		given += *c == ':';
	if (given != count)
		return say(err, cap, -EINVAL, "LISTEN_FDNAMES has %u names for LISTEN_FDS=%u", given, count);
	for (unsigned i = 0; i < count; i++) {
		size_t len = strcspn(p, ":");
		struct service_socket *s = &ss->s[i];

		if (len > SERVICE_SOCKET_NAME_MAX)
			return say(err, cap, -EINVAL, "LISTEN_FDNAMES: name %u is longer than %d bytes", i + 1,
				   SERVICE_SOCKET_NAME_MAX);
		for (size_t k = 0; k < len; k++)
			if (p[k] < 0x20 || p[k] > 0x7e)
				return say(err, cap, -EINVAL, "LISTEN_FDNAMES: name %u holds byte 0x%02x", i + 1,
					   (unsigned char)p[k]);
		memcpy(s->name, p, len);
		s->name[len] = 0;
		s->role = !strcmp(s->name, "listen") ? SERVICE_SOCKET_LISTEN :
			  !strcmp(s->name, "control") ? SERVICE_SOCKET_CONTROL : SERVICE_SOCKET_ANY;
		p += len + (p[len] == ':');
	}
	return 0;
}

/* Is @fd a listening unix stream socket bound to a path? Fills @s->path. */
static int socket_check(struct service_socket *s, char *err, size_t cap)
{
	int type = 0, domain = 0, listening = 0, fd = s->fd;
	socklen_t len = sizeof(int);
	struct sockaddr_un sa;
	size_t n;

	if (fcntl(fd, F_GETFD) < 0)
		return say(err, cap, -EBADF, "fd %d is not open", fd);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len))
		return say(err, cap, errno == ENOTSOCK ? -ENOTSOCK : -errno, "fd %d is not a socket (%s)", fd,
			   strerror(errno));
	if (domain != AF_UNIX)
		return say(err, cap, -EAFNOSUPPORT, "fd %d is a socket of family %s: ternd takes only unix sockets "
			   "(ListenStream=/PATH)", fd, domain == AF_INET ? "AF_INET" : domain == AF_INET6 ?
			   "AF_INET6" : domain == AF_VSOCK ? "AF_VSOCK" : "other than AF_UNIX");
	len = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) || type != SOCK_STREAM)
		return say(err, cap, -EPROTOTYPE, "fd %d is a unix socket but not a stream socket (ListenStream=)",
			   fd);
	len = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) || !listening)
		return say(err, cap, -ENOTCONN, "fd %d is a unix stream socket that does not listen", fd);
	len = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &len) || len <= offsetof(struct sockaddr_un, sun_path) ||
	    !sa.sun_path[0])
		return say(err, cap, -EDESTADDRREQ, "fd %d is bound to no path (unnamed or abstract)", fd);
	n = strnlen(sa.sun_path, len - offsetof(struct sockaddr_un, sun_path));
	if (n >= sizeof(s->path))
		return say(err, cap, -EDESTADDRREQ, "fd %d: its path is too long", fd);
	memcpy(s->path, sa.sun_path, n);
	s->path[n] = 0;
	if (fcntl(fd, F_SETFD, FD_CLOEXEC))
		return say(err, cap, -errno, "fd %d: %s", fd, strerror(errno));
	return 0;
}

int service_sockets_take(struct service_sockets *ss, char *err, size_t cap)
{
	const char *pid_text = getenv("LISTEN_PID"), *fds_text = getenv("LISTEN_FDS");
	const char *names = getenv("LISTEN_FDNAMES");
	/* Copies: unsetenv below frees nothing we hold, but says so plainly. */
	char pid_copy[32] = "", fds_copy[32] = "", *names_copy = names ? strdup(names) : NULL;
	long pid, count;
	int ret = 0;

	memset(ss, 0, sizeof(*ss));
	if (names && !names_copy)
		return say(err, cap, -ENOMEM, "out of memory");
	snprintf(pid_copy, sizeof(pid_copy), "%s", pid_text ? pid_text : "");
	snprintf(fds_copy, sizeof(fds_copy), "%s", fds_text ? fds_text : "");
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (!pid_text)
		goto out;
	pid = number_parse(pid_copy);
	if (pid <= 0) {
		ret = say(err, cap, -EINVAL, "LISTEN_PID=%.20s is not a process id", pid_copy);
		goto out;
	}
	if (pid != (long)getpid())
		goto out;                       /* another process's: not ours to touch */
	if (!fds_text)
		goto out;
	count = number_parse(fds_copy);
	if (count < 0) {
		ret = say(err, cap, -EINVAL, "LISTEN_FDS=%.20s is not a number of descriptors", fds_copy);
		goto out;
	}
	if (count > SERVICE_SOCKETS_MAX) {
		ret = say(err, cap, -EINVAL, "LISTEN_FDS=%ld: more than the %d sockets ternd takes", count,
			  SERVICE_SOCKETS_MAX);
		goto out;
	}
	for (long i = 0; i < count; i++)
		ss->s[i] = (struct service_socket){ .fd = SERVICE_SOCKETS_FIRST + (int)i };
	ss->count = (unsigned)count;
	if (names_copy)
		ret = names_parse(ss, names_copy, ss->count, err, cap);
	for (unsigned i = 0; !ret && i < ss->count; i++) {
		ret = socket_check(&ss->s[i], err, cap);
		/* The same socket twice would serve one listener and leave the
		 * other copy matching nothing: say so plainly. */
		for (unsigned k = 0; !ret && k < i; k++)
			if (!strcmp(ss->s[k].path, ss->s[i].path))
				ret = say(err, cap, -EINVAL, "fd %d is bound to %s, as fd %d is", ss->s[i].fd,
					  ss->s[i].path, ss->s[k].fd);
	}
	if (ret) {
		/* Ours all the same: nothing else is to use them. */
		for (unsigned i = 0; i < ss->count; i++)
			close(ss->s[i].fd);
		ss->count = 0;
	}
out:
	free(names_copy);
	return ret;
}

static const char *role_name(enum service_socket_role role)
{
	return role == SERVICE_SOCKET_CONTROL ? "the control socket" : "a guest listener";
}

int service_sockets_claim(struct service_sockets *ss, const char *path, enum service_socket_role role,
			  char *err, size_t cap)
{
	for (unsigned i = 0; i < ss->count; i++) {
		struct service_socket *s = &ss->s[i];

		if (strcmp(s->path, path))
			continue;
		if (s->claimed)
			return say(err, cap, -EINVAL, "%s is ternd's socket twice (fd %d)", path, s->fd);
		if (s->role != SERVICE_SOCKET_ANY && s->role != role)
			return say(err, cap, -EINVAL, "fd %d is named %s but bound to %s, which is %s", s->fd,
				   s->name, path, role_name(role));
		s->claimed = true;
		return s->fd;
	}
	return -ENOENT;
}

int service_sockets_unclaimed(const struct service_sockets *ss, char *err, size_t cap)
{
	for (unsigned i = 0; i < ss->count; i++) {
		const struct service_socket *s = &ss->s[i];

		if (!s->claimed)
			return say(err, cap, -EINVAL, "fd %d%s%s%s, bound to %s, is none of ternd's unix sockets "
				   "(--listen unix:PATH, --control PATH)", s->fd, s->name[0] ? " (named " : "",
				   s->name, s->name[0] ? ")" : "", s->path);
	}
	return 0;
}

void service_sockets_release(struct service_sockets *ss)
{
	for (unsigned i = 0; i < ss->count; i++)
		if (!ss->s[i].claimed)
			close(ss->s[i].fd);
	ss->count = 0;
}
