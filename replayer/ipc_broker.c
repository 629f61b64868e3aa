#define LOG_PREFIX "ipc: "
#include "ipc_broker.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

struct ipc_export {
	uint64_t id;            /* 0: free entry */
	unsigned owner;
	uint32_t kind;
	int32_t device;
	uint64_t size;
	int fd;                 /* memory: the exporter's allocation; events: -1 */
	uint8_t secret[IPC_SECRET_BYTES];
	uint8_t payload[IPC_PAYLOAD_BYTES];
};

struct ipc_broker {
	struct ipc_export exports[IPC_EXPORTS_MAX];
	uint64_t next_id;
};

static void le_put(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le_get(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

void ipc_handle_encode(const struct ipc_handle *h, uint8_t out[IPC_HANDLE_BYTES])
{
	memset(out, 0, IPC_HANDLE_BYTES);
	le_put(out, IPC_HANDLE_MAGIC, 4);
	le_put(out + 4, IPC_HANDLE_VERSION, 2);
	le_put(out + 6, h->kind, 2);
	le_put(out + 8, h->id, 8);
	le_put(out + 16, h->size, 8);
	memcpy(out + 24, h->secret, IPC_SECRET_BYTES);
	le_put(out + 40, (uint32_t)h->device, 4);
}

int ipc_handle_decode(const uint8_t *in, uint32_t len, struct ipc_handle *h)
{
	if (len != IPC_HANDLE_BYTES)
		return -EINVAL;
	memset(h, 0, sizeof(*h));
	h->magic = (uint32_t)le_get(in, 4);
	h->version = (uint16_t)le_get(in + 4, 2);
	h->kind = (uint16_t)le_get(in + 6, 2);
	h->id = le_get(in + 8, 8);
	h->size = le_get(in + 16, 8);
	memcpy(h->secret, in + 24, IPC_SECRET_BYTES);
	h->device = (int32_t)(uint32_t)le_get(in + 40, 4);
	for (unsigned i = 44; i < IPC_HANDLE_BYTES; i++)
		if (in[i])
			return -EINVAL;
	if (h->magic != IPC_HANDLE_MAGIC || h->version != IPC_HANDLE_VERSION ||
	    (h->kind != IPC_KIND_MEM && h->kind != IPC_KIND_EVENT) || !h->id)
		return -EINVAL;
	return 0;
}

static int msg_send(int chan, const struct ipc_msg *m, int fd)
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

/* One message, and the fd beside it into *@fd (-1 if none; closed if @fd is NULL). */
static int msg_recv(int chan, struct ipc_msg *m, int *fd)
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
	ret = msg_send(chan, req, fd_out);
	if (!ret)
		ret = msg_recv(chan, rep, fd_in);
	return ret;
}

int ipc_broker_create(struct ipc_broker **out)
{
	struct ipc_broker *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (unsigned i = 0; i < IPC_EXPORTS_MAX; i++)
		b->exports[i].fd = -1;
	b->next_id = 1;
	*out = b;
	return 0;
}

static void export_drop(struct ipc_export *e)
{
	if (e->fd >= 0)
		close(e->fd);
	memset(e, 0, sizeof(*e));
	e->fd = -1;
}

void ipc_broker_destroy(struct ipc_broker *b)
{
	if (!b)
		return;
	for (unsigned i = 0; i < IPC_EXPORTS_MAX; i++)
		if (b->exports[i].id)
			export_drop(&b->exports[i]);
	free(b);
}

void ipc_broker_drop_owner(struct ipc_broker *b, unsigned owner)
{
	for (unsigned i = 0; b && i < IPC_EXPORTS_MAX; i++)
		if (b->exports[i].id && b->exports[i].owner == owner)
			export_drop(&b->exports[i]);
}

static struct ipc_export *export_find(struct ipc_broker *b, uint64_t id)
{
	for (unsigned i = 0; id && i < IPC_EXPORTS_MAX; i++)
		if (b->exports[i].id == id)
			return &b->exports[i];
	return NULL;
}

static bool secret_equal(const uint8_t *a, const uint8_t *b)
{
	uint8_t diff = 0;

	for (unsigned i = 0; i < IPC_SECRET_BYTES; i++)
		diff |= a[i] ^ b[i];
	return diff == 0;
}

static void serve_export(struct ipc_broker *b, const struct ipc_msg *req, int fd, unsigned owner,
			 struct ipc_msg *rep)
{
	struct ipc_export *e = NULL;

	if ((req->kind == IPC_KIND_MEM) != (fd >= 0) ||
	    (req->kind != IPC_KIND_MEM && req->kind != IPC_KIND_EVENT)) {
		rep->status = -EINVAL;
		return;
	}
	for (unsigned i = 0; i < IPC_EXPORTS_MAX && !e; i++)
		if (!b->exports[i].id)
			e = &b->exports[i];
	if (!e) {
		rep->status = -ENOSPC;
		return;
	}
	if (getrandom(e->secret, IPC_SECRET_BYTES, 0) != IPC_SECRET_BYTES) {
		rep->status = -EIO;
		return;
	}
	e->id = b->next_id++;
	e->owner = owner;
	e->kind = req->kind;
	e->device = req->device;
	e->size = req->size;
	e->fd = fd;
	memcpy(e->payload, req->payload, IPC_PAYLOAD_BYTES);
	rep->id = e->id;
	memcpy(rep->secret, e->secret, IPC_SECRET_BYTES);
	rep->status = 0;
	pr_info("slot %u exports %s %llu (%llu bytes)", owner, e->kind == IPC_KIND_MEM ? "memory" : "event",
		(unsigned long long)e->id, (unsigned long long)e->size);
}

int ipc_broker_serve(struct ipc_broker *b, int chan, unsigned owner)
{
	struct ipc_msg req, rep = { 0 };
	struct ipc_export *e;
	int fd = -1, ret, reply_fd = -1;

	ret = msg_recv(chan, &req, &fd);
	if (ret == -EBADMSG) {
		/* A malformed packet: answered, the channel stays. */
		rep.status = -EBADMSG;
		return msg_send(chan, &rep, -1);
	}
	if (ret)
		return ret;
	rep.op = req.op;
	switch (req.op) {
	case IPC_OP_EXPORT:
		serve_export(b, &req, fd, owner, &rep);
		if (rep.status == 0)
			fd = -1;        /* kept by the export */
		break;
	case IPC_OP_OPEN:
		e = export_find(b, req.id);
		/* A wrong secret and an unknown id look alike to the asker. */
		if (!e || e->kind != req.kind || !secret_equal(e->secret, req.secret)) {
			pr_warn("slot %u: IPC open of %llu refused (no such export or wrong secret)", owner,
				(unsigned long long)req.id);
			rep.status = -EACCES;
		} else if (e->owner == owner) {
			rep.status = -EPERM;    /* a process cannot open its own handle */
		} else {
			rep.status = 0;
			rep.kind = e->kind;
			rep.size = e->size;
			rep.device = e->device;
			rep.id = e->id;
			memcpy(rep.payload, e->payload, IPC_PAYLOAD_BYTES);
			reply_fd = e->fd;
		}
		break;
	case IPC_OP_UNEXPORT:
		e = export_find(b, req.id);
		if (e && e->owner == owner) {
			export_drop(e);
			rep.status = 0;
		} else {
			rep.status = -ENOENT;
		}
		break;
	default:
		rep.status = -EINVAL;
	}
	if (fd >= 0)
		close(fd);
	return msg_send(chan, &rep, reply_fd);
}
