/* The read-ahead of a session socket (recv_ahead.h). */
#include "recv_ahead.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/socket.h>

#include "shm_chan.h"
#include "tls.h"

static bool socket_is_unix(int fd)
{
	int domain = 0;
	socklen_t len = sizeof(domain);

	return !getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) && domain == AF_UNIX;
}

int recv_ahead_open(struct recv_ahead *r, int fd, struct tls_conn *tls, size_t cap)
{
	*r = (struct recv_ahead){ .fd = fd, .tls = tls, .cap = cap };
	r->unix_fds = !tls && socket_is_unix(fd);
	r->buf = malloc(cap);
	return r->buf ? 0 : -ENOMEM;
}

static void group_close(struct recv_ahead *r)
{
	for (int i = 0; i < r->nfds; i++)
		close(r->fds[i]);
	r->nfds = 0;
	r->fds_truncated = false;
}

void recv_ahead_close(struct recv_ahead *r)
{
	group_close(r);
	free(r->buf);
	r->buf = NULL;
	r->start = r->end = r->cap = 0;
}

size_t recv_ahead_buffered(const struct recv_ahead *r)
{
	return r->end - r->start;
}

bool recv_ahead_ready(const struct recv_ahead *r)
{
	return (r->end > r->start && !r->starved) || (r->tls && tls_conn_pending(r->tls));
}

/* One read of what the socket has, up to @n bytes into @dst. Descriptors
 * that came go to the group when @keep (dst is the buffer's tail), else
 * are closed: they came on bytes a request takes. */
static ssize_t read_some(struct recv_ahead *r, uint8_t *dst, size_t n, bool keep)
{
	int fds[FDPASS_MAX], got = 0;
	ssize_t k;

	if (r->tls) {
		k = tls_conn_recv_some(r->tls, dst, n);
	} else if (r->unix_fds) {
		k = fdpass_recv(r->fd, dst, n, fds, FDPASS_MAX, &got, MSG_DONTWAIT);
		if (k == 0)
			k = -ECONNRESET;
	} else {
		do
			k = recv(r->fd, dst, n, MSG_DONTWAIT);
		while (k < 0 && errno == EINTR);
		if (k == 0)
			k = -ECONNRESET;
		else if (k < 0)
			k = errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
	if (k == -EWOULDBLOCK)
		k = -EAGAIN;
	r->starved = k == -EAGAIN;
	if (k <= 0)
		return k;
	if (got != 0 && keep) {
		/* The kernel ends a read with the bytes descriptors came on. */
		r->fds_at = r->end + (size_t)k - 1;
		r->fds_truncated = got < 0;
		r->nfds = got < 0 ? 0 : got;
		memcpy(r->fds, fds, sizeof(int) * (size_t)r->nfds);
	} else {
		for (int i = 0; i < got; i++)
			close(fds[i]);
	}
	return k;
}

/* @n bytes of the buffer taken as request bytes: a group among them is
 * not claimed as descriptors, so it goes. */
static void consume(struct recv_ahead *r, size_t n)
{
	if ((r->nfds || r->fds_truncated) && r->fds_at >= r->start && r->fds_at < r->start + n)
		group_close(r);
	r->start += n;
	if (r->start == r->end)
		r->start = r->end = 0;
}

ssize_t recv_ahead_take(struct recv_ahead *r, void *out, size_t n)
{
	size_t k;

	if (!n)
		return 0;
	if (r->start == r->end) {
		ssize_t got;

		/* A large payload goes straight where it is wanted. */
		if (n >= r->cap)
			return read_some(r, out, n, false);
		got = read_some(r, r->buf, r->cap, true);
		if (got < 0)
			return got;
		r->end = (size_t)got;
	}
	k = r->end - r->start < n ? r->end - r->start : n;
	memcpy(out, r->buf + r->start, k);
	consume(r, k);
	return (ssize_t)k;
}

int recv_ahead_fds_take(struct recv_ahead *r, int *fds, int nfds, int timeout_ms)
{
	bool with_fds;

	if (nfds <= 0 || nfds > FDPASS_MAX)
		return -EINVAL;
	if (r->start == r->end)
		return r->tls ? -EPROTO : shm_fds_recv(r->fd, fds, nfds, timeout_ms);
	with_fds = r->nfds && r->fds_at == r->start;
	if (!with_fds) {
		consume(r, 1);
		return -EPROTO;
	}
	if (r->nfds != nfds) {
		group_close(r);
		consume(r, 1);
		return -EPROTO;
	}
	memcpy(fds, r->fds, sizeof(int) * (size_t)nfds);
	r->nfds = 0;
	consume(r, 1);
	return 0;
}
