/* The host-function channel: how a worker asks the guest to run a host
 * function (cuLaunchHostFunc, cuStreamAddCallback, a graph's host node).
 *
 * A stream socket of its own per session, beside the request connection:
 * over unix and shm one end of a socketpair the guest made and handed over
 * with host_func_attach (SCM_RIGHTS); over tcp a second connection the
 * guest opens to a port the worker names in the attach reply, proved by the
 * secret of that reply (over tls:// that connection is TLS too, with the
 * same certificates, and the secret goes inside); where neither can be (a VM's channel: its streams
 * carry no descriptor and reach only ternd), a second connection to ternd
 * whose first message is host_func_join with the session and that secret:
 * the supervisor hands it to the session's worker, which checks the secret
 * and answers the join before the records start. The worker writes RUN records, the guest runs the
 * function its token names and answers DONE with the same token; the worker
 * holds the stream (the driver's callback thread) until then, so stream
 * order is the driver's own. Tokens are the guest's: the worker never sees
 * a guest pointer.
 *
 * Records are 16 bytes, little endian: u32 type, u32 status (RUN: the
 * CUresult a stream callback receives; DONE: 0), u64 token.
 *
 * Graph memcpy nodes with a host end (docs/wire-protocol.md, "Host copies
 * in graphs") use the same channel, since the guest's memory must be read
 * or written when the graph reaches the copy: COPY_IN (the worker wants
 * the bytes of the host end @token names) and COPY_OUT (the bytes for it
 * follow) are a record followed by a u64 byte count, COPY_OUT's bytes
 * after that. The guest answers DONE: status HOSTFN_COPY_OK when the token
 * names a copy of exactly that many bytes (COPY_IN: the bytes follow the
 * DONE), else HOSTFN_COPY_UNKNOWN and nothing more (COPY_OUT's bytes were
 * read and dropped).
 */
#ifndef TERN_HOSTFN_CHAN_H
#define TERN_HOSTFN_CHAN_H

#include <stddef.h>
#include <stdint.h>

#include "tls.h"

#define HOSTFN_REC_SIZE 16
#define HOSTFN_RUN 1u
#define HOSTFN_DONE 2u
#define HOSTFN_COPY_IN 3u
#define HOSTFN_COPY_OUT 4u
/* DONE's status for the copies. */
#define HOSTFN_COPY_OK 0u
#define HOSTFN_COPY_UNKNOWN 1u
/* The secret a tcp guest proves its callback connection with. */
#define HOSTFN_SECRET_SIZE 32
/* host_func_attach modes. */
#define HOSTFN_ATTACH_FD 1u     /* a socket follows the request (SCM_RIGHTS) */
#define HOSTFN_ATTACH_TCP 2u    /* the guest connects back to the port answered */
#define HOSTFN_ATTACH_JOIN 3u   /* the guest connects to ternd again, host_func_join */

struct hostfn_rec {
	uint32_t type;
	uint32_t status;
	uint64_t token;
};

void hostfn_rec_encode(const struct hostfn_rec *r, uint8_t out[HOSTFN_REC_SIZE]);
void hostfn_rec_decode(const uint8_t in[HOSTFN_REC_SIZE], struct hostfn_rec *r);
/* Write / read one whole record on a blocking stream socket (EINTR retried,
 * MSG_NOSIGNAL). 0, -EPIPE at end of stream, or -errno. */
int hostfn_rec_send(int fd, const struct hostfn_rec *r);
int hostfn_rec_recv(int fd, struct hostfn_rec *r);
/* The same through the channel's TLS session (tls://), with the same
 * results. */
int hostfn_rec_send_tls(struct tls_conn *t, const struct hostfn_rec *r);
int hostfn_rec_recv_tls(struct tls_conn *t, struct hostfn_rec *r);
/* A copy's bytes (and its u64 count) on the channel: through @tls when it
 * is not NULL, else on @fd. _recv with @buf NULL reads and drops them.
 * 0, -EPIPE at end of stream, or -errno. */
int hostfn_bytes_send(int fd, struct tls_conn *tls, const void *buf, size_t n);
int hostfn_bytes_recv(int fd, struct tls_conn *tls, void *buf, size_t n);
int hostfn_count_send(int fd, struct tls_conn *tls, uint64_t count);
int hostfn_count_recv(int fd, struct tls_conn *tls, uint64_t *count);

#endif
