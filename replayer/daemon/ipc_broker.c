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

	ret = ipc_msg_recv(chan, &req, &fd);
	if (ret == -EBADMSG) {
		/* A malformed packet: answered, the channel stays. */
		rep.status = -EBADMSG;
		return ipc_msg_send(chan, &rep, -1);
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
	return ipc_msg_send(chan, &rep, reply_fd);
}
