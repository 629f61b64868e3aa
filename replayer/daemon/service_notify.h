/* Readiness for a service manager: systemd's notify protocol (sd_notify(3)),
 * spoken without libsystemd. Under a unit of Type=notify, systemd sets
 * NOTIFY_SOCKET and waits for "READY=1" before it starts what is ordered
 * after ternd (libvirtd, whose hook asks ternd for domains' sessions).
 */
#ifndef TERN_SERVICE_NOTIFY_H
#define TERN_SERVICE_NOTIFY_H

/* Send @state ("READY=1", "STOPPING=1", "STATUS=...") to $NOTIFY_SOCKET: a
 * unix datagram path, or "@name" in the abstract namespace. 0 when sent,
 * 1 when no manager asked (no NOTIFY_SOCKET), or -errno. */
int service_notify(const char *state);

#endif
