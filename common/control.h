/* The control socket: how ternd's operators and tools (ternd status, ckpt,
 * the libvirt hooks, the CRIU plugin) talk to the supervisor.
 *
 * One request per connection: a request line ending in '\n', answered by
 * lines and the close of the connection; what the lines hold is
 * control_msg.h's (this file only moves bytes). ternd makes the socket 0600
 * (0660 with --socket-group) and serves only root, its own uid and the
 * group's members (SO_PEERCRED), whatever the file's mode says.
 */
#ifndef TERN_CONTROL_H
#define TERN_CONTROL_H

#include <stddef.h>

#define CONTROL_DEFAULT_PATH "/run/tern/control.sock"
#define CONTROL_REPLY_MAX (1u << 20)

/* Send @command (one encoded request, without its '\n') to the ternd at @path; on success *reply is a NUL-terminated
 * malloc'd string the caller frees. 0 or -errno (-ECONNREFUSED/-ENOENT when no
 * ternd runs there, -ETIMEDOUT after @timeout_ms). */
int control_request(const char *path, const char *command, int timeout_ms, char **reply);

/* Read one '\n'-terminated line (without it) within @timeout_ms. Returns its
 * length or -errno; -EMSGSIZE if longer than cap - 1. */
int control_line_read(int fd, char *buf, size_t cap, int timeout_ms);
int control_write_all(int fd, const void *buf, size_t len);
/* Wait until @fd is readable: 0, -ETIMEDOUT after @timeout_ms (-1: forever) or -errno. */
int control_wait_readable(int fd, int timeout_ms);

#endif
