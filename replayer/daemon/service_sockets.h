/* Sockets a service manager made for ternd: systemd's socket activation
 * (sd_listen_fds(3)), taken without libsystemd. The manager binds and
 * listens, then starts ternd with the sockets as descriptors 3, 4, ... and
 * says so in three variables: LISTEN_PID (the process they are for),
 * LISTEN_FDS (how many) and optionally LISTEN_FDNAMES (their names,
 * ':'-separated; FileDescriptorName= of the socket unit).
 *
 * ternd takes unix stream sockets that listen, for its guest listeners
 * (unix:, shm:) and its control socket. Each is matched to one of them by
 * the path it is bound to (getsockname); a name of "listen" or "control"
 * says its role too, and then must agree. A socket that matches nothing, or
 * is not such a socket, is an error: ternd refuses to start and names it.
 *
 * One struct service_sockets per process, filled once at start-up by the
 * supervisor's thread; no locking.
 */
#ifndef TERN_SERVICE_SOCKETS_H
#define TERN_SERVICE_SOCKETS_H

#include <stdbool.h>
#include <stddef.h>

/* The first descriptor passed (SD_LISTEN_FDS_START). */
#define SERVICE_SOCKETS_FIRST 3
/* At most this many: ternd's 8 guest listeners and its control socket, with
 * room to spare; more is a unit written for another program. */
#define SERVICE_SOCKETS_MAX 16
/* A name's length at most (systemd's FDNAME_MAX). */
#define SERVICE_SOCKET_NAME_MAX 255

enum service_socket_role {
	SERVICE_SOCKET_ANY,             /* no name, or systemd's default (the unit's) */
	SERVICE_SOCKET_LISTEN,          /* named "listen": a guest listener */
	SERVICE_SOCKET_CONTROL,         /* named "control": the control socket */
};

struct service_socket {
	int fd;
	bool claimed;
	enum service_socket_role role;
	char name[SERVICE_SOCKET_NAME_MAX + 1];
	char path[108];                 /* what it is bound to */
};

struct service_sockets {
	unsigned count;
	struct service_socket s[SERVICE_SOCKETS_MAX];
};

/* Take the sockets passed to this process into @ss and unset LISTEN_PID,
 * LISTEN_FDS and LISTEN_FDNAMES, whatever they held, so that no child sees
 * them. Variables for another process (LISTEN_PID not ours, or unset) are
 * dropped and its descriptors left alone: @ss->count is 0. Each descriptor
 * taken is checked (open, a unix stream socket, listening, bound to a path)
 * and made close-on-exec.
 *
 * Returns 0, or -EINVAL (a variable that is no number, a count over
 * SERVICE_SOCKETS_MAX, names that do not count as many), -EBADF (a
 * descriptor not open), -ENOTSOCK, -EAFNOSUPPORT, -EPROTOTYPE, -ENOTCONN
 * (not listening) or -EDESTADDRREQ (bound to no path), with @err saying which
 * variable or descriptor and why. On an error @ss holds nothing, and the
 * descriptors are closed. */
int service_sockets_take(struct service_sockets *ss, char *err, size_t cap);

/* The passed socket bound to @path, for @role (LISTEN or CONTROL): its
 * descriptor, now claimed and owned by the caller; -ENOENT when none is
 * bound there; -EINVAL (with @err) when the one there is named for the other
 * role, or was claimed already. */
int service_sockets_claim(struct service_sockets *ss, const char *path, enum service_socket_role role,
			  char *err, size_t cap);

/* 0 when every passed socket was claimed; else -EINVAL with @err naming the
 * first that was not (its descriptor, name and path). */
int service_sockets_unclaimed(const struct service_sockets *ss, char *err, size_t cap);

/* Close the sockets nobody claimed. */
void service_sockets_release(struct service_sockets *ss);

#endif
