/* IPC between sessions of one ternd: the supervisor's table of exported
 * memory and events, and the channel workers ask it through.
 *
 * A worker that exports (cuIpcGetMemHandle, cuIpcGetEventHandle) hands the
 * supervisor what another worker needs to reach the object: a POSIX fd of
 * the physical allocation, or the driver's own event handle. The supervisor
 * answers with an id and a random secret, which the guest's 64-byte handle
 * carries (struct ipc_handle). A worker that opens a handle sends id and
 * secret; the supervisor checks the secret (constant time) and that the
 * exporter is another live session, then passes the fd or the event handle.
 * An export goes when its allocation is freed or its session ends.
 *
 * The channel is a SOCK_SEQPACKET socketpair per worker, one struct
 * ipc_msg per packet, an fd beside it (SCM_RIGHTS) where there is one.
 * Both ends are the same ternd binary on one host; the layout is still
 * fixed-width. The supervisor is single-threaded; workers ask and wait.
 */
#ifndef TERN_IPC_CHANNEL_H
#define TERN_IPC_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>

#define IPC_HANDLE_BYTES 64
#define IPC_SECRET_BYTES 16
#define IPC_PAYLOAD_BYTES 64
#define IPC_HANDLE_MAGIC 0x43504954u   /* "TIPC" */
#define IPC_HANDLE_VERSION 1
#define IPC_EXPORTS_MAX 4096

enum ipc_kind {
	IPC_KIND_MEM = 1,
	IPC_KIND_EVENT = 2,
};

enum ipc_op {
	IPC_OP_EXPORT = 1,      /* kind, size, device, payload; fd for memory -> id, secret */
	IPC_OP_OPEN = 2,        /* kind, id, secret -> size, device, payload; fd for memory */
	IPC_OP_UNEXPORT = 3,    /* id -> status */
};

struct ipc_msg {
	uint32_t op;
	int32_t status;         /* reply: 0 or -errno */
	uint32_t kind;
	int32_t device;         /* backend device of exported memory */
	uint64_t id;
	uint64_t size;
	uint8_t secret[IPC_SECRET_BYTES];
	uint8_t payload[IPC_PAYLOAD_BYTES];
};
_Static_assert(sizeof(struct ipc_msg) == 112, "ipc_msg layout");

/* The guest's handle, little endian, in the 64 bytes of CUipcMemHandle /
 * CUipcEventHandle. */
struct ipc_handle {
	uint32_t magic;
	uint16_t version;
	uint16_t kind;
	uint64_t id;
	uint64_t size;
	uint8_t secret[IPC_SECRET_BYTES];
	int32_t device;
	uint8_t reserved[20];
};
_Static_assert(sizeof(struct ipc_handle) == IPC_HANDLE_BYTES, "ipc_handle layout");

/* Encode / decode a guest handle; decode checks magic, version, kind and
 * that the reserved bytes are zero (0 or -EINVAL). */
void ipc_handle_encode(const struct ipc_handle *h, uint8_t out[IPC_HANDLE_BYTES]);
int ipc_handle_decode(const uint8_t *in, uint32_t len, struct ipc_handle *h);

/* One message and the fd beside it (-1: none); the broker serves with
 * these. 0 or -errno (-EBADMSG: a packet of the wrong size). */
int ipc_msg_send(int chan, const struct ipc_msg *m, int fd);
/* *@fd gets the fd that came with it (-1 if none; closed if @fd is NULL). */
int ipc_msg_recv(int chan, struct ipc_msg *m, int *fd);

/* Worker side: send @req (with @fd_out >= 0 beside it), wait for the reply
 * into @rep, and take the fd that comes with it into *@fd_in (-1: none;
 * NULL: close any). 0 or -errno for a broken channel; rep->status is the
 * answer. */
int ipc_call(int chan, const struct ipc_msg *req, int fd_out, struct ipc_msg *rep, int *fd_in);

#endif
