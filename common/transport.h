/* Transports: where a shim reaches ternd, chosen by URL.
 *
 *   unix:/run/tern/ternd.sock   a unix stream socket (the default)
 *   shm:/run/tern/ternd.sock    the same socket, upgraded after the hello to
 *                               rings in shared memory (shm_chan.h)
 *   tcp://HOST:PORT             TCP; the guest proves the shared-secret token
 *   vsock://CID:PORT            AF_VSOCK, for VM guests (host CID is 2)
 *
 * All are stream sockets carrying the same framed protocol (wire.h), so a
 * transport is only how the socket is made (and, for shm, what replaces it
 * once the session is open); authentication happens in the challenge and
 * hello exchange (common/auth.h). Functions return a file descriptor or -errno.
 */
#ifndef TERN_TRANSPORT_H
#define TERN_TRANSPORT_H

#include <stdbool.h>

enum transport_kind {
	TRANSPORT_UNIX,
	TRANSPORT_TCP,
	TRANSPORT_VSOCK,
	TRANSPORT_SHM,
};

struct transport_url {
	enum transport_kind kind;
	char path[108];         /* unix, shm */
	char host[256];         /* tcp */
	unsigned port;          /* tcp, vsock */
	unsigned cid;           /* vsock */
};

#define TRANSPORT_DEFAULT_URL "unix:/run/tern/ternd.sock"

/* Parse @text; 0 or -EINVAL. A bare path ("/x/y.sock") means unix:. */
int transport_url_parse(const char *text, struct transport_url *url);
/* Print @url back as text into @buf. */
void transport_url_format(const struct transport_url *url, char *buf, unsigned cap);
/* True for transports that cross a host boundary and so need the token. */
bool transport_url_needs_token(const struct transport_url *url);

/* Listening socket, close-on-exec. A stale unix socket file is replaced. */
int transport_listen(const struct transport_url *url);
/* Accept one connection (blocking), close-on-exec. */
int transport_accept(int listen_fd);
/* Connect; TCP sockets get TCP_NODELAY. */
int transport_connect(const struct transport_url *url);
/* A loopback TCP port free right now (the kernel's pick), for tests and
 * benchmarks that start a ternd; or -errno. */
int transport_tcp_free_port(void);

#endif
