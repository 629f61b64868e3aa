/* File descriptors over a unix socket (SCM_RIGHTS), riding on ordinary
 * bytes: the one place that builds and reads the control messages.
 *
 * A receiver takes at most the descriptors it asked for; any others that
 * came are closed at once, so a peer cannot make it leak descriptors.
 */
#ifndef TERN_FDPASS_H
#define TERN_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/* The most descriptors one message carries here. */
#define FDPASS_MAX 8

/* Send all @len bytes of @buf (at least one), the first of them with the
 * @nfds descriptors of @fds. 0 or -errno. */
int fdpass_send(int sock, const void *buf, size_t len, const int *fds, int nfds);
/* One recvmsg of at most @cap bytes (@flags: MSG_DONTWAIT, say). The
 * descriptors that came with them go to @fds (at most @nfds, the others are
 * closed), how many came to *@got; of a truncated control message all are
 * closed and *@got is -1. Returns the bytes read, 0 at end of stream, or -errno. */
ssize_t fdpass_recv(int sock, void *buf, size_t cap, int *fds, int nfds, int *got, int flags);

#endif
