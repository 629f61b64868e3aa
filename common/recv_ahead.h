/* A session socket's bytes read ahead: a worker takes many requests from
 * one read instead of asking the socket for each header and payload.
 *
 * On a unix socket the bytes are read with their control messages
 * (common/fdpass.h): descriptors a peer passes ride on one byte of their
 * own after the request they belong to (shm_fds_send), and the kernel ends
 * a read with the bytes they came on, so a read-ahead holds at most one
 * group, kept with that byte until recv_ahead_fds_take() claims it. A group
 * whose byte is taken as request bytes instead is closed: a peer cannot
 * make the reader keep descriptors it never asks for. Over TLS the records
 * are read through the session (common/tls.h); bytes the session decrypted
 * ahead are its own, tls_conn_pending() tells.
 *
 * One reader at a time; not thread-safe. The socket must be nonblocking or
 * read only when poll says so: no call here waits, but recv_ahead_fds_take()
 * with nothing read ahead (it waits up to its timeout, as shm_fds_recv).
 */
#ifndef TERN_RECV_AHEAD_H
#define TERN_RECV_AHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fdpass.h"

struct tls_conn;

struct recv_ahead {
	int fd;
	struct tls_conn *tls;           /* NULL: the socket's own bytes */
	bool unix_fds;                  /* read with control messages (a unix socket) */
	uint8_t *buf;
	size_t cap, start, end;         /* buf[start, end) is read and not taken */
	int fds[FDPASS_MAX];            /* came with buf[fds_at]; nfds 0: none */
	int nfds;
	size_t fds_at;
	bool fds_truncated;             /* buf[fds_at] came with too many: all closed */
	bool starved;                   /* the last read found the socket empty */
};

/* Read @fd (over TLS session @tls when not NULL) ahead, @cap bytes at a time.
 * 0, or -ENOMEM. */
int recv_ahead_open(struct recv_ahead *r, int fd, struct tls_conn *tls, size_t cap);
/* Frees the buffer and closes descriptors nobody claimed; the socket stays
 * open. Accepts a zeroed or closed reader. */
void recv_ahead_close(struct recv_ahead *r);
/* Up to @n bytes into @out: what was read ahead, else what the socket has
 * now, without waiting. The count, -EAGAIN when nothing came, -ECONNRESET
 * at the end of the stream, or -errno. */
ssize_t recv_ahead_take(struct recv_ahead *r, void *out, size_t n);
/* The byte after the bytes taken, with the @nfds descriptors that came on
 * it, into @fds: 0; -EPROTO when it came with none or another count (those
 * are closed); with nothing read ahead, from the socket, waiting up to
 * @timeout_ms (-ETIMEDOUT). */
int recv_ahead_fds_take(struct recv_ahead *r, int *fds, int nfds, int timeout_ms);
/* Bytes read ahead and not taken. */
size_t recv_ahead_buffered(const struct recv_ahead *r);
/* Worth a take without polling first: bytes are read ahead and the last
 * read did not find the socket empty, or the TLS session holds records. */
bool recv_ahead_ready(const struct recv_ahead *r);

#endif
