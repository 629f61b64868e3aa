/* The tern wire format: framing, and the primitives the generated codec uses.
 *
 * A message is a 32-byte header followed by `length` payload bytes. Every
 * field is fixed width and little endian. A request's payload is the call's
 * request fields in table order (common/wire/calls.tbl); a reply's payload is
 * the CUresult (u32) followed by the reply fields.
 *
 * Decoding never trusts the peer: every read is bounds checked against the
 * payload, strings are bounded and may not hold NUL, and a payload must be
 * consumed exactly. Encoding appends to a growable buffer; large blobs are
 * referenced in place (zero copy) and gathered by writev at send time.
 */
#ifndef TERN_WIRE_H
#define TERN_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define WIRE_MAGIC 0x314e5254u          /* "TRN1" */
#define WIRE_VERSION 1u               /* of the framing: the header's version */
/* Of the calls: what hello's `protocol` says. 2: the challenge and the
 * session credential (docs/wire-protocol.md, "Session start"). */
#define WIRE_PROTOCOL 2u
#define WIRE_HEADER_SIZE 32u
/* Largest payload either side accepts; larger copies are cut into pieces. */
#define WIRE_PAYLOAD_MAX (64u << 20)
/* Copies are cut into pieces of this size so that a piece and its fields fit. */
#define WIRE_COPY_PIECE (32u << 20)

/* The header of the staging of pageable copies over shm (docs/wire-protocol.md,
 * "Pageable copies over shm"), at the start of the guest's memfd: per slot,
 * the ticket of the slot's last piece the device is done with. Written by the
 * worker only (a host function queued behind each piece), read by the guest;
 * the worker never reads it, so what a guest writes there fools only itself. */
#define WIRE_STAGING_SLOTS_MAX 64u
struct wire_staging_header {
	uint32_t done[WIRE_STAGING_SLOTS_MAX];
};
_Static_assert(sizeof(struct wire_staging_header) == 256, "staging header layout");
#define WIRE_STR_MAX 8192u

/* Virtual handles: the kind of object in the top byte, a serial below
 * (replayer/exec/handle_table.h issues them). Stream handles 0, 1 and 2 are the
 * NULL, legacy and per-thread streams. */
#define WIRE_HANDLE_KIND_SHIFT 56
#include "wire_kinds.h"         /* enum wire_handle_kind, from calls.tbl */

#include "le.h"

/* Header flags. */
#define WIRE_F_REPLY     0x0001u  /* this is a reply */
#define WIRE_F_ERROR     0x0002u  /* reply to a request that could not be decoded */
#define WIRE_F_NO_REPLY  0x0004u  /* request: the sender wants no reply (lazy RPC) */

struct wire_header {
	uint32_t magic;
	uint16_t version;
	uint16_t flags;
	uint32_t call;
	uint32_t length;        /* payload bytes after the header */
	uint64_t seq;           /* request sequence number; a reply echoes it */
	/* Request: the requester's current context (virtual handle), 0 if none.
	 * Reply: the sequence number of the session's latest durable snapshot
	 * (0 if none): requests up to it need never be sent again. */
	uint64_t ctx;
};

/* Bytes on the wire are encoded field by field; this struct is never sent raw. */
void wire_header_encode(uint8_t out[WIRE_HEADER_SIZE], const struct wire_header *h);
/* 0, or -EPROTO for a bad magic or version, -EMSGSIZE for a length over the cap. */
int wire_header_decode(const uint8_t in[WIRE_HEADER_SIZE], struct wire_header *h);

/* A byte string inside a received payload (not owned), or, when encoding, one
 * the caller keeps alive until the message is sent. */
struct wire_blob {
	const uint8_t *ptr;
	uint32_t len;
};

struct wire_cursor {
	const uint8_t *p;
	size_t left;
};

static inline void wire_cursor_init(struct wire_cursor *c, const void *p, size_t n)
{
	c->p = p;
	c->left = n;
}

int wire_get_u8(struct wire_cursor *c, uint8_t *v);
int wire_get_u16(struct wire_cursor *c, uint16_t *v);
int wire_get_u32(struct wire_cursor *c, uint32_t *v);
int wire_get_u64(struct wire_cursor *c, uint64_t *v);
int wire_get_i32(struct wire_cursor *c, int32_t *v);
int wire_get_i64(struct wire_cursor *c, int64_t *v);
int wire_get_f32(struct wire_cursor *c, float *v);
/* Copies at most cap-1 bytes and terminates; -EPROTO if longer or holding NUL. */
int wire_get_str(struct wire_cursor *c, char *out, size_t cap);
int wire_get_blob(struct wire_cursor *c, struct wire_blob *v);
/* 0 if the payload was consumed exactly, else -EPROTO. */
int wire_cursor_end(const struct wire_cursor *c);

/* An outgoing message: header, fixed fields copied into buf, large blobs
 * referenced. Reusable: wire_msg_reset() keeps the buffer. */
#define WIRE_MSG_PIECES 8
#define WIRE_INLINE_BLOB 512u

struct wire_msg {
	uint8_t *buf;           /* header + inline bytes */
	size_t len, cap;
	int failed;             /* an allocation failed: the message is unusable */
	unsigned npieces;
	struct {
		size_t at;          /* inline bytes before this piece */
		const void *ptr;
		size_t len;
	} piece[WIRE_MSG_PIECES];
	size_t payload_len;     /* inline + pieces, header excluded */
};

void wire_msg_init(struct wire_msg *m);
void wire_msg_reset(struct wire_msg *m);
void wire_msg_release(struct wire_msg *m);
void wire_put_u8(struct wire_msg *m, uint8_t v);
void wire_put_u16(struct wire_msg *m, uint16_t v);
void wire_put_u32(struct wire_msg *m, uint32_t v);
void wire_put_u64(struct wire_msg *m, uint64_t v);
void wire_put_i32(struct wire_msg *m, int32_t v);
void wire_put_i64(struct wire_msg *m, int64_t v);
void wire_put_f32(struct wire_msg *m, float v);
void wire_put_str(struct wire_msg *m, const char *s);
void wire_put_blob(struct wire_msg *m, struct wire_blob b);
void wire_put_bytes(struct wire_msg *m, const void *p, size_t n);

/* Fill in the header (length from the payload) and produce the iovecs to
 * send. Returns the number of iovecs (<= WIRE_MSG_PIECES * 2 + 1) or -ENOMEM /
 * -EMSGSIZE. The iovecs point into @m and the referenced blobs. */
#define WIRE_MSG_IOV_MAX (WIRE_MSG_PIECES * 2 + 1)
int wire_msg_finish(struct wire_msg *m, const struct wire_header *h, struct iovec *iov);

/* Copy the payload of @m (inline bytes and referenced blobs, no header) into
 * @out. Returns its length, or 0 if it does not fit @cap. */
size_t wire_msg_payload_copy(const struct wire_msg *m, void *out, size_t cap);

/* Read/write whole messages on a stream socket. */
/* Send: 0 or -errno. Handles short writes and EINTR. */
int wire_send(int fd, struct iovec *iov, int niov);
/* Send a reply that is its status alone (@flags beside WIRE_F_REPLY). */
int wire_status_send(int fd, uint32_t call, uint64_t seq, uint16_t flags, uint32_t status);
/* A hello's status that is no CUresult: the session moved to another ternd
 * (a live migration, docs/migration.md).  The reply's payload says where,
 * with a proof that the sender holds the session's credential
 * (auth_moved_proof); the guest checks it and says hello there. */
#define WIRE_STATUS_MOVED 0x7e4d0001u
#define WIRE_MOVED_URL_MAX 300u
#define WIRE_MOVED_PROOF_BYTES 32u
struct wire_moved {
	char url[WIRE_MOVED_URL_MAX + 1];
	uint8_t proof[WIRE_MOVED_PROOF_BYTES];
};
void wire_moved_encode(struct wire_msg *m, const struct wire_moved *mv);
/* 0, or -EPROTO: a malformed payload, an empty url, a proof of another size,
 * trailing bytes. */
int wire_moved_decode(struct wire_cursor *c, struct wire_moved *out);

/* Read exactly n bytes: 0, -ECONNRESET on EOF, or -errno. */
int wire_recv_exact(int fd, void *buf, size_t n);
/* Read and drop n bytes (to skip an oversized payload and keep framing). */
int wire_recv_discard(int fd, uint64_t n);
/* The same through any stream's read-exactly function (TLS: tls.h). */
int wire_discard_through(int (*read_exact)(void *stream, void *buf, size_t n), void *stream, uint64_t n);

#endif
