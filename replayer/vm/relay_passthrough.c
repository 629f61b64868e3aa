/* TEMPORARY relay (relay.h) until the vmlink relay (relay.c) replaces it:
 * no framing, no multiplexing, no resend.  Each connection accepted on the
 * domain's socket is one stream, copied byte for byte to the fd that
 * stream_open returns.  What the tests of ternd's side use meanwhile: a test
 * connects to VMDIR/UUID.sock as a guest's stream would arrive.
 *
 * Writes block: a peer that stops reading holds every stream of the domain.
 * Acceptable for a stand-in whose peers are ternd's workers and tests. */
#define LOG_PREFIX "relay: "
#include "relay.h"
#include "control.h"
#include "log.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PASSTHROUGH_STREAMS_MAX 64

struct stream_pair {
	int guest;                      /* accepted on the domain's socket; -1: free */
	int ternd;                      /* from stream_open */
};

static void pair_close(struct stream_pair *p)
{
	if (p->guest < 0)
		return;
	close(p->guest);
	close(p->ternd);
	p->guest = p->ternd = -1;
}

/* Copy what @from has to @to; false when either side is done. */
static bool pump(int from, int to)
{
	char buf[65536];
	ssize_t n = read(from, buf, sizeof(buf));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	return n > 0 && control_write_all(to, buf, (size_t)n) == 0;
}

int vm_relay_serve(int listen_fd, int (*stream_open)(void *opaque), void *opaque, int control_fd)
{
	struct stream_pair pairs[PASSTHROUGH_STREAMS_MAX];
	struct pollfd pfd[2 + 2 * PASSTHROUGH_STREAMS_MAX];

	for (unsigned i = 0; i < PASSTHROUGH_STREAMS_MAX; i++)
		pairs[i].guest = pairs[i].ternd = -1;
	for (;;) {
		unsigned n = 2;
		char cmd;

		pfd[0] = (struct pollfd){ .fd = control_fd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = listen_fd, .events = POLLIN };
		for (unsigned i = 0; i < PASSTHROUGH_STREAMS_MAX; i++) {
			pfd[n++] = (struct pollfd){ .fd = pairs[i].guest, .events = POLLIN };
			pfd[n++] = (struct pollfd){ .fd = pairs[i].ternd, .events = POLLIN };
		}
		if (poll(pfd, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (pfd[0].revents) {
			ssize_t got = read(control_fd, &cmd, 1);

			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0)
				break;
			if (cmd == 'R')
				for (unsigned i = 0; i < PASSTHROUGH_STREAMS_MAX; i++)
					pair_close(&pairs[i]);
			continue;
		}
		for (unsigned i = 0; i < PASSTHROUGH_STREAMS_MAX; i++) {
			struct stream_pair *p = &pairs[i];

			if (p->guest >= 0 && pfd[2 + 2 * i].revents && !pump(p->guest, p->ternd))
				pair_close(p);
			if (p->guest >= 0 && pfd[3 + 2 * i].revents && !pump(p->ternd, p->guest))
				pair_close(p);
		}
		if (pfd[1].revents & POLLIN) {
			struct stream_pair *p = NULL;
			int guest = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC), ternd;

			if (guest < 0)
				continue;
			for (unsigned i = 0; i < PASSTHROUGH_STREAMS_MAX && !p; i++)
				if (pairs[i].guest < 0)
					p = &pairs[i];
			ternd = p ? stream_open(opaque) : -EMFILE;
			if (ternd < 0) {
				pr_warn("stream refused: %s", strerror(-ternd));
				close(guest);
				continue;
			}
			p->guest = guest;
			p->ternd = ternd;
		}
	}
	for (unsigned i = 0; i < PASSTHROUGH_STREAMS_MAX; i++)
		pair_close(&pairs[i]);
	return 0;
}
