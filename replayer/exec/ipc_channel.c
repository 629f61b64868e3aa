#define LOG_PREFIX "ipc: "
#include "ipc_channel.h"
#include "le.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void ipc_handle_encode(const struct ipc_handle *h, uint8_t out[IPC_HANDLE_BYTES])
{
	memset(out, 0, IPC_HANDLE_BYTES);
	le32_put(out, IPC_HANDLE_MAGIC);
	le16_put(out + 4, IPC_HANDLE_VERSION);
	le16_put(out + 6, h->kind);
	le64_put(out + 8, h->id);
	le64_put(out + 16, h->size);
	memcpy(out + 24, h->secret, IPC_SECRET_BYTES);
	le32_put(out + 40, (uint32_t)h->device);
}

int ipc_handle_decode(const uint8_t *in, uint32_t len, struct ipc_handle *h)
{
	if (len != IPC_HANDLE_BYTES)
		return -EINVAL;
	memset(h, 0, sizeof(*h));
	h->magic = (uint32_t)le32_get(in);
	h->version = (uint16_t)le16_get(in + 4);
	h->kind = (uint16_t)le16_get(in + 6);
	h->id = le64_get(in + 8);
	h->size = le64_get(in + 16);
	memcpy(h->secret, in + 24, IPC_SECRET_BYTES);
	h->device = (int32_t)(uint32_t)le32_get(in + 40);
	for (unsigned i = 44; i < IPC_HANDLE_BYTES; i++)
		if (in[i])
			return -EINVAL;
	if (h->magic != IPC_HANDLE_MAGIC || h->version != IPC_HANDLE_VERSION ||
	    (h->kind != IPC_KIND_MEM && h->kind != IPC_KIND_EVENT) || !h->id)
		return -EINVAL;
	return 0;
}

int ipc_msg_send(int chan, const struct ipc_msg *m, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { (void *)m, sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *c;

		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	if (sendmsg(chan, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(*m))
		return -errno ? -errno : -EIO;
	return 0;
}

int ipc_msg_recv(int chan, struct ipc_msg *m, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	ssize_t n;
	int got = -1;

	do {
		n = recvmsg(chan, &mh, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	for (c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&got, CMSG_DATA(c), sizeof(int));
	if (fd)
		*fd = got;
	else if (got >= 0)
		close(got);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0)
		return -errno;
	if (n != (ssize_t)sizeof(*m) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		if (fd && *fd >= 0) {
			close(*fd);
			*fd = -1;
		}
		return -EBADMSG;
	}
	return 0;
}

int ipc_call(int chan, const struct ipc_msg *req, int fd_out, struct ipc_msg *rep, int *fd_in)
{
	int ret;

	if (fd_in)
		*fd_in = -1;
	if (chan < 0)
		return -ENOTCONN;
	ret = ipc_msg_send(chan, req, fd_out);
	if (!ret)
		ret = ipc_msg_recv(chan, rep, fd_in);
	return ret;
}

