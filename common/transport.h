/* Transports: where a shim reaches ternd, chosen by URL.
 *
 *   unix:/run/tern/ternd.sock   a unix stream socket (the default), upgraded
 *                               after the hello to rings in shared memory
 *                               (shm_chan.h) when the two sides can share
 *                               memfds; plain unix otherwise
 *   unix+plain:PATH             the socket alone, never upgraded
 *   shm:/run/tern/ternd.sock    the socket upgraded to the rings, or no
 *                               connection at all
 *   tcp://HOST:PORT             TCP; the guest proves the shared-secret token
 *   tls://HOST:PORT             TCP under TLS (tls.h): the same token proof,
 *                               inside a session whose certificate the guest
 *                               verified; made with transport_connect, then
 *                               tls_conn_open by the caller
 *   vsock://CID:PORT            AF_VSOCK, for VM guests (host CID is 2)
 *   virtio:/dev/virtio-ports/NAME  through the guest agent that owns that
 *                               virtio-serial port (guest-agent/): its unix
 *                               socket /run/tern/agent-NAME.sock. No token:
 *                               ternd knows the domain from the channel
 *                               (docs/vm-transport.md)
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
	TRANSPORT_VIRTIO,
	TRANSPORT_TLS,
};

struct transport_url {
	enum transport_kind kind;
	char path[108];         /* unix, shm; virtio: the port's device path */
	bool plain;             /* unix+plain: no shared-memory upgrade */
	char host[256];         /* tcp, tls */
	unsigned port;          /* tcp, tls, vsock */
	unsigned cid;           /* vsock */
};

#define TRANSPORT_DEFAULT_URL "unix:/run/tern/ternd.sock"

/* Parse @text; 0 or -EINVAL. A bare path ("/x/y.sock") means unix:. */
#define TRANSPORT_UNIX_PLAIN_SCHEME "unix+plain:"
int transport_url_parse(const char *text, struct transport_url *url);
/* Print @url back as text into @buf. */
void transport_url_format(const struct transport_url *url, char *buf, unsigned cap);
/* True for transports that cross a host boundary and so need the token. */
bool transport_url_needs_token(const struct transport_url *url);
/* True for tcp:// and tls://, which are TCP sockets alike. */
bool transport_url_is_tcp(const struct transport_url *url);

/* The agent's socket for the virtio-serial port at @port_path
 * ("/dev/virtio-ports/org.tern.0" -> "/run/tern/agent-org.tern.0.sock")
 * into @buf; -EINVAL when the port's name (its last path component) is
 * empty or holds other than [A-Za-z0-9._-] or is "." or "..",
 * -ENAMETOOLONG when the socket path does not fit @cap. */
#define TRANSPORT_AGENT_DIR "/run/tern"
int transport_virtio_agent_socket(const char *port_path, char *buf, unsigned cap);

/* Listening socket, close-on-exec. Not for virtio: (-EINVAL). A stale unix socket file is replaced. */
int transport_listen(const struct transport_url *url);
/* Accept one connection (blocking), close-on-exec. */
int transport_accept(int listen_fd);
/* Connect; TCP sockets get TCP_NODELAY; virtio: connects to the agent's
 * socket. */
int transport_connect(const struct transport_url *url);
/* A loopback TCP port free right now (the kernel's pick), for tests and
 * benchmarks that start a ternd; or -errno. */
int transport_tcp_free_port(void);

#endif
