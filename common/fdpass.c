#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdpass.h"
#include "control.h"

int fdpass_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * FDPASS_MAX)];
	} u;
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;
	ssize_t n;

	if (!len || nfds < 0 || nfds > FDPASS_MAX)
		return -EINVAL;
	if (nfds) {
		memset(&u, 0, sizeof(u));
		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	do {
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	/* The descriptors went with the first byte; the rest is plain. */
	return (size_t)n == len ? 0 : control_write_all(sock, (const char *)buf + n, len - (size_t)n);
}

ssize_t fdpass_recv(int sock, void *buf, size_t cap, int *fds, int nfds, int *got, int flags)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * FDPASS_MAX)];
	} u;
	struct iovec iov = { buf, cap };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			      .msg_controllen = sizeof(u.buf) };
	ssize_t n;
	int count = 0;

	do {
		n = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	*got = 0;
	if (n < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t off = 0; off + sizeof(int) <= cm->cmsg_len - CMSG_LEN(0); off += sizeof(int)) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + off, sizeof(fd));
			if (count < nfds)
				fds[count] = fd;
			else
				close(fd);
			count++;
		}
	}
	if (msg.msg_flags & MSG_CTRUNC) {
		for (int i = 0; i < count && i < nfds; i++)
			close(fds[i]);
		*got = -1;
		return n;
	}
	*got = count;
	return n;
}
