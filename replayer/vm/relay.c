/* The host end of a VM's channel: QEMU's connections in, streams into
 * ternd out (relay.h). */
#define LOG_PREFIX "vm_relay: "
#include "relay.h"
#include "log.h"
#include "vmlink.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* 'R' resets; end of file ends. false when the relay must return. */
static bool control_read(struct vmlink_mux *mux, int control_fd)
{
	char cmd[64];
	ssize_t n = read(control_fd, cmd, sizeof(cmd));

	if (n < 0)
		return errno == EINTR || errno == EAGAIN;
	if (!n)
		return false;
	if (memchr(cmd, 'R', (size_t)n)) {
		pr_info("reset asked: streams closed, new epoch");
		vmlink_mux_reset(mux);
	}
	return true;
}

/* A second connection while one is served is a migration's destination
 * (QEMU connects when it starts, long before the switchover) or a QEMU
 * that reconnected. It waits as the standby until it proves live (the guest
 * writes through it) or the served one ends (the source QEMU stopped):
 * cutting the source at once would stall the running guest for the whole
 * migration. A third replaces the standby. */
static void standby_promote(struct vmlink_mux *mux, int *standby)
{
	pr_info("channel connected%s", vmlink_mux_channel(mux) >= 0 ? ", replacing the last" : "");
	vmlink_mux_set_channel(mux, *standby);
	*standby = -1;
}

/* True when @fd reads end of file or fails rather than having bytes. */
static bool standby_ended(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

	return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

int vm_relay_serve(int listen_fd, int (*stream_open)(void *opaque), void *opaque, int control_fd)
{
	struct vmlink_mux *mux = vmlink_mux_create(VMLINK_ROLE_HOST, stream_open, opaque);
	int ret = 0, standby = -1;

	if (!mux)
		return -ENOMEM;
	for (;;) {
		struct pollfd extra[3] = {
			{ .fd = listen_fd, .events = POLLIN },
			{ .fd = control_fd, .events = POLLIN },
			{ .fd = standby, .events = POLLIN },
		};

		ret = vmlink_mux_run_once(mux, extra, 3, VMLINK_TICK_MS);
		if (ret) {
			pr_err("poll: %s", strerror(-ret));
			break;
		}
		if (extra[1].revents & (POLLIN | POLLHUP | POLLERR) && !control_read(mux, control_fd))
			break;
		if (standby >= 0 && extra[2].revents && vmlink_mux_channel(mux) >= 0 && standby_ended(standby)) {
			/* A destination that gave up (a failed migration): the
			 * source goes on. */
			pr_info("standby connection ended before it was used");
			close(standby);
			standby = -1;
		}
		if (standby >= 0 && (extra[2].revents || vmlink_mux_channel(mux) < 0))
			standby_promote(mux, &standby);
		if (extra[0].revents & POLLIN) {
			int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

			if (fd < 0) {
				if (errno != EAGAIN && errno != EINTR)
					pr_warn("accept: %s", strerror(errno));
				continue;
			}
			if (standby >= 0) {
				pr_info("a newer standby connection replaces the last");
				close(standby);
			}
			standby = fd;
			if (vmlink_mux_channel(mux) < 0)
				standby_promote(mux, &standby);
			else
				pr_info("second connection: standby until it is live or the first ends");
		}
	}
	if (standby >= 0)
		close(standby);
	vmlink_mux_free(mux);
	return ret;
}
