/* The host end of a VM's virtio-serial channel (docs/vm-transport.md).
 *
 * One relay per domain, run in a process of its own that ternd forks: it
 * accepts QEMU's connections to the domain's socket and carries each of the
 * guest's streams (one per guest connection to its agent) to a fd into
 * ternd, through a vmlink_mux (common/vmlink.h).
 */
#ifndef TERN_VM_RELAY_H
#define TERN_VM_RELAY_H

/* Serve until @control_fd reads end of file.
 * @listen_fd: listening unix socket QEMU connects to. A connection that
 *   comes while another is served waits as the standby (a migration's
 *   destination connects when it starts) and replaces the served one when
 *   the guest writes through it or the served one ends; a standby that
 *   ends first is dropped; a newer standby replaces an older one.
 * @stream_open: called for each OPEN from the guest; returns a connected
 *   stream fd into ternd (the relay owns it from then on) or -errno, and
 *   the guest's stream is refused with CLOSE.
 * @control_fd: the byte 'R' means reset the link (new epoch, every stream
 *   closed: ternd's vm-save, vm-restore and vm-drop); other bytes are
 *   ignored; end of file means return.
 * Returns 0 at end of file on @control_fd, or -errno when it cannot go on
 * (no memory, poll failing). Neither fd is closed. Blocks its thread. */
int vm_relay_serve(int listen_fd, int (*stream_open)(void *opaque), void *opaque, int control_fd);

#endif
