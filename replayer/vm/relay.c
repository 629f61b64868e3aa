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

int vm_relay_serve(int listen_fd, int (*stream_open)(void *opaque), void *opaque, int control_fd)
{
	struct vmlink_mux *mux = vmlink_mux_create(VMLINK_ROLE_HOST, stream_open, opaque);
	int ret = 0;

	if (!mux)
		return -ENOMEM;
	for (;;) {
		struct pollfd extra[2] = {
			{ .fd = listen_fd, .events = POLLIN },
			{ .fd = control_fd, .events = POLLIN },
		};

		ret = vmlink_mux_run_once(mux, extra, 2, VMLINK_TICK_MS);
		if (ret) {
			pr_err("poll: %s", strerror(-ret));
			break;
		}
		if (extra[1].revents & (POLLIN | POLLHUP | POLLERR) && !control_read(mux, control_fd))
			break;
		if (extra[0].revents & POLLIN) {
			int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

			if (fd >= 0) {
				pr_info("channel connected%s", vmlink_mux_channel(mux) >= 0 ? ", replacing the last" : "");
				vmlink_mux_set_channel(mux, fd);
			} else if (errno != EAGAIN && errno != EINTR) {
				pr_warn("accept: %s", strerror(errno));
			}
		}
	}
	vmlink_mux_free(mux);
	return ret;
}
