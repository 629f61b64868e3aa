/* A domain's relay: between the QEMU-facing socket of one libvirt domain
 * (its virtio-serial channel) and ternd's supervisor (docs/libvirt.md,
 * "ternd's side").
 *
 * The supervisor forks one relay per attached domain; the relay knows
 * nothing of sessions: every stream the guest opens becomes one fd that
 * @stream_open gets from the supervisor, and the supervisor alone decides
 * what that stream may reach.
 *
 * Two implementations have this interface: the vmlink relay (relay.c, the
 * framed, multiplexed link of common/vmlink.h) and, until it lands,
 * relay_passthrough.c, where each connection on @listen_fd is one stream.
 */
#ifndef TERN_VM_RELAY_H
#define TERN_VM_RELAY_H

/* Serve @listen_fd (the domain's unix socket, listening) until @control_fd
 * reaches EOF, then return 0 (or -errno on a failure that stops the relay).
 * A byte 'R' read from @control_fd resets the link: every stream is closed.
 * @stream_open(@opaque) returns a fresh connected stream fd into ternd, which
 * the relay owns and closes, or -errno (the stream is refused). Runs in the
 * relay's own process, single-threaded. */
int vm_relay_serve(int listen_fd, int (*stream_open)(void *opaque), void *opaque, int control_fd);

#endif
