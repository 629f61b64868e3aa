/* tern-agent: the guest's end of the virtio-serial channel to ternd
 * (docs/vm-transport.md, "The guest agent").
 *
 *   tern-agent [--port PATH | --port-connect unix:PATH] [--listen PATH]...
 *              [--log-level LEVEL]
 *
 * Listens where the shim connects (by default /run/tern/ternd.sock, the
 * shim's default URL, and /run/tern/agent-NAME.sock, which the shim's
 * virtio:/dev/virtio-ports/NAME URL names) and carries each accepted
 * connection as one vmlink stream over the port. A port whose host side is
 * away reads end of file (POLLHUP): the agent closes it and opens it again
 * every RETRY_MS, serving its local sockets meanwhile; it never exits for
 * that. --port-connect reaches a unix socket that stands in for the port
 * (tests, and machines without a VM).
 */
#define LOG_PREFIX "tern-agent: "
#include "log.h"
#include "monotonic.h"
#include "transport.h"
#include "vmlink.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_PORT "/dev/virtio-ports/org.tern.0"
#define RUN_DIR TRANSPORT_AGENT_DIR
#define LISTEN_MAX 4
#define RETRY_MS 200

struct agent {
	const char *port;               /* a device path, or NULL */
	struct transport_url stand_in;  /* --port-connect, when port is NULL */
	const char *listen[LISTEN_MAX];
	char listen_own[108];           /* agent-NAME.sock */
	unsigned nlisten;
	int listen_fd[LISTEN_MAX];
};

static void usage(FILE *to)
{
	fprintf(to, "usage: tern-agent [--port PATH | --port-connect unix:PATH] [--listen PATH]...\n"
		    "                  [--log-level error|warn|info|debug]\n"
		    "  --port PATH            the virtio-serial port (default " DEFAULT_PORT ")\n"
		    "  --port-connect URL     a unix socket standing in for the port\n"
		    "  --listen PATH          where guest programs connect (repeatable; default\n"
		    "                         " RUN_DIR "/ternd.sock and " RUN_DIR "/agent-NAME.sock)\n");
}

/* The channel: the port, or the stand-in socket. -errno while absent. */
static int channel_open(const struct agent *a)
{
	int fd;

	if (!a->port)
		return transport_connect(&a->stand_in);
	fd = open(a->port, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	return fd < 0 ? -errno : fd;
}

/* The folders above @path, as mkdir -p would: a busybox initramfs may
 * have no /run yet. */
static void parents_make(const char *path)
{
	char dir[108];

	snprintf(dir, sizeof(dir), "%s", path);
	for (char *slash = strchr(dir + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = 0;
		mkdir(dir, 0755);
		*slash = '/';
	}
}

static int listeners_open(struct agent *a)
{
	for (unsigned i = 0; i < a->nlisten; i++) {
		struct transport_url url;
		int fd;

		if (transport_url_parse(a->listen[i], &url) || url.kind != TRANSPORT_UNIX) {
			pr_err("--listen %s: not a unix socket path", a->listen[i]);
			return -EINVAL;
		}
		parents_make(url.path);
		fd = transport_listen(&url);
		if (fd < 0) {
			pr_err("cannot listen on %s: %s", url.path, strerror(-fd));
			return fd;
		}
		/* Guest programs of any user reach ternd through it, as they
		 * would a local ternd's socket. */
		chmod(url.path, 0666);
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		a->listen_fd[i] = fd;
		pr_info("listening on %s", url.path);
	}
	return 0;
}

static int args_parse(struct agent *a, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "port-connect", required_argument, NULL, 'c' },
		{ "listen", required_argument, NULL, 'l' },
		{ "log-level", required_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *connect_url = NULL;
	int c, level;

	a->port = DEFAULT_PORT;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			a->port = optarg;
			break;
		case 'c':
			connect_url = optarg;
			break;
		case 'l':
			if (a->nlisten == LISTEN_MAX) {
				fprintf(stderr, "tern-agent: at most %d --listen\n", LISTEN_MAX);
				return -EINVAL;
			}
			a->listen[a->nlisten++] = optarg;
			break;
		case 'v':
			level = log_level_parse(optarg);
			if (level < 0) {
				fprintf(stderr, "tern-agent: bad --log-level %s\n", optarg);
				return -EINVAL;
			}
			log_open("tern-agent", (enum log_level)level, -1);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return -EINVAL;
	}
	if (connect_url) {
		if (transport_url_parse(connect_url, &a->stand_in) || a->stand_in.kind != TRANSPORT_UNIX) {
			fprintf(stderr, "tern-agent: --port-connect takes unix:PATH\n");
			return -EINVAL;
		}
		a->port = NULL;
	}
	if (!a->nlisten) {
		a->listen[a->nlisten++] = RUN_DIR "/ternd.sock";
		if (a->port) {
			if (transport_virtio_agent_socket(a->port, a->listen_own, sizeof(a->listen_own))) {
				fprintf(stderr, "tern-agent: %s: not a port name the shim can name "
						"(virtio:PATH); give --listen\n", a->port);
				return -EINVAL;
			}
			a->listen[a->nlisten++] = a->listen_own;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct agent a = { 0 };
	struct vmlink_mux *mux;
	uint64_t retry_at = 0;
	bool said_absent = false;

	log_open("tern-agent", LOG_INFO, -1);
	if (args_parse(&a, argc, argv))
		return 2;
	signal(SIGPIPE, SIG_IGN);
	if (listeners_open(&a))
		return 1;
	mux = vmlink_mux_create(VMLINK_ROLE_GUEST, NULL, NULL);
	if (!mux) {
		pr_err("out of memory");
		return 1;
	}
	for (;;) {
		struct pollfd extra[LISTEN_MAX];
		int ret;

		if (vmlink_mux_channel(mux) < 0 && monotonic_ms() >= retry_at) {
			int fd = channel_open(&a);

			if (fd >= 0) {
				pr_info("channel open");
				said_absent = false;
				vmlink_mux_set_channel(mux, fd);
			} else {
				if (!said_absent)
					pr_warn("channel not there yet (%s): retrying every %d ms", strerror(-fd),
						RETRY_MS);
				said_absent = true;
			}
			/* Also after a loss: a port with its host side away reads
			 * end of file at once, and must not spin. */
			retry_at = monotonic_ms() + RETRY_MS;
		}
		for (unsigned i = 0; i < a.nlisten; i++)
			extra[i] = (struct pollfd){ .fd = a.listen_fd[i], .events = POLLIN };
		ret = vmlink_mux_run_once(mux, extra, a.nlisten, RETRY_MS);
		if (ret) {
			pr_err("poll: %s", strerror(-ret));
			return 1;
		}
		for (unsigned i = 0; i < a.nlisten; i++) {
			int fd;

			if (!(extra[i].revents & POLLIN))
				continue;
			fd = accept4(a.listen_fd[i], NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (fd < 0)
				continue;
			ret = vmlink_mux_add_stream(mux, fd);
			if (ret) {
				pr_warn("connection refused: %s", strerror(-ret));
				close(fd);
			}
		}
	}
}
