#include "control.h"
#include "transport.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int control_wait_readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;

	do {
		r = poll(&p, 1, timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r ? 0 : -ETIMEDOUT;
}

int control_line_read(int fd, char *buf, size_t cap, int timeout_ms)
{
	size_t n = 0;

	while (n + 1 < cap) {
		ssize_t r;
		int ret = control_wait_readable(fd, timeout_ms);

		if (ret)
			return ret;
		r = read(fd, buf + n, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -ECONNRESET;
		if (buf[n] == '\n') {
			buf[n] = 0;
			return (int)n;
		}
		n++;
	}
	return -EMSGSIZE;
}

int control_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t w = write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int control_request(const char *path, const char *command, int timeout_ms, char **reply)
{
	struct transport_url url = { .kind = TRANSPORT_UNIX };
	size_t n = 0, cap = 4096;
	char *buf;
	int fd, ret;

	if (strlen(path) >= sizeof(url.path))
		return -ENAMETOOLONG;
	strcpy(url.path, path);
	fd = transport_connect(&url);
	if (fd < 0)
		return fd;
	ret = control_write_all(fd, command, strlen(command));
	if (!ret)
		ret = control_write_all(fd, "\n", 1);
	buf = malloc(cap);
	if (!ret && !buf)
		ret = -ENOMEM;
	while (!ret) {
		ssize_t r;

		ret = control_wait_readable(fd, timeout_ms);
		if (ret)
			break;
		if (n + 1 == cap) {
			char *p = cap < CONTROL_REPLY_MAX ? realloc(buf, cap * 2) : NULL;

			if (!p) {
				ret = -EMSGSIZE;
				break;
			}
			buf = p;
			cap *= 2;
		}
		r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			ret = -errno;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (ret) {
		free(buf);
		return ret;
	}
	buf[n] = 0;
	*reply = buf;
	return 0;
}
