/* vmlink_mux: one link end pumped between a channel fd and its stream fds
 * with poll() (vmlink.h). The guest agent and the host relay both run it. */
#define LOG_PREFIX "vmlink_mux: "
#include "vmlink.h"
#include "log.h"
#include "monotonic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Bytes a stream may hold for a local end that is not reading; past it the
 * channel is not read until that stream drains (no deadlock: its fd is
 * still read and written). */
#define STREAM_OUT_MAX (1u << 20)
/* ... and all streams together, so that a guest with many streams whose
 * far ends do not read cannot make the relay hold more. */
#define MUX_OUT_MAX (32u << 20)

struct mux_stream {
	int fd;
	uint32_t id;
	bool peer_closed;       /* CLOSE received or link reset: no more input */
	bool dead;              /* closed: the loop removes it */
	uint8_t *out;           /* bytes for fd not yet written */
	size_t out_len, out_off, out_cap;
};

struct vmlink_mux {
	enum vmlink_role role;
	struct vmlink *link;
	int channel;
	bool channel_is_socket;
	bool rx_blocked;        /* ops.data refused: unblock when a stream drains */
	size_t out_total;       /* bytes all streams hold for their fds */
	int (*stream_open)(void *opaque);
	void *opaque;
	struct mux_stream **streams;
	size_t nstreams, cap;
	struct pollfd *pfds;
	size_t pfds_cap;
};


static int fd_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* A write that never raises SIGPIPE on a socket whose peer left. */
static ssize_t fd_write(int fd, bool is_socket, const void *buf, size_t len)
{
	return is_socket ? send(fd, buf, len, MSG_NOSIGNAL) : write(fd, buf, len);
}

static struct mux_stream *stream_add(struct vmlink_mux *mux, int fd)
{
	struct mux_stream *ms;

	if (mux->nstreams == mux->cap) {
		size_t cap = mux->cap ? mux->cap * 2 : 16;
		struct mux_stream **n = realloc(mux->streams, cap * sizeof(*n));

		if (!n)
			return NULL;
		mux->streams = n;
		mux->cap = cap;
	}
	ms = calloc(1, sizeof(*ms));
	if (!ms)
		return NULL;
	ms->fd = fd;
	mux->streams[mux->nstreams++] = ms;
	return ms;
}

static void stream_kill(struct mux_stream *ms)
{
	if (ms->fd >= 0)
		close(ms->fd);
	ms->fd = -1;
	ms->dead = true;
}

/* A stream whose local end failed or ended: the peer is told (CLOSE)
 * unless it closed first. */
static void stream_drop(struct vmlink_mux *mux, struct mux_stream *ms)
{
	if (!ms->peer_closed)
		vmlink_stream_close(mux->link, ms->id);
	ms->peer_closed = true;
	stream_kill(ms);
}

/* Write what @ms holds; false when its fd failed. */
static bool stream_flush(struct vmlink_mux *mux, struct mux_stream *ms)
{
	while (ms->out_off < ms->out_len) {
		ssize_t n = fd_write(ms->fd, true, ms->out + ms->out_off, ms->out_len - ms->out_off);

		if (n < 0 && errno == ENOTSOCK)
			n = write(ms->fd, ms->out + ms->out_off, ms->out_len - ms->out_off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN;
		}
		ms->out_off += (size_t)n;
		mux->out_total -= (size_t)n;
	}
	ms->out_off = ms->out_len = 0;
	return true;
}

/* No stream, nor all together, over half its cap. */
static bool streams_have_room(const struct vmlink_mux *mux)
{
	if (mux->out_total >= MUX_OUT_MAX / 2)
		return false;
	for (size_t i = 0; i < mux->nstreams; i++) {
		const struct mux_stream *ms = mux->streams[i];

		if (!ms->dead && ms->out_len - ms->out_off >= STREAM_OUT_MAX / 2)
			return false;
	}
	return true;
}

static void *op_open(void *opaque, uint32_t id)
{
	struct vmlink_mux *mux = opaque;
	struct mux_stream *ms;
	int fd;

	if (!mux->stream_open)
		return NULL;
	fd = mux->stream_open(mux->opaque);
	if (fd < 0) {
		pr_debug("stream %u: cannot connect it: %s", id, strerror(-fd));
		return NULL;
	}
	if (fd_nonblock(fd) || !(ms = stream_add(mux, fd))) {
		close(fd);
		return NULL;
	}
	ms->id = id;
	return ms;
}

static int op_data(void *opaque, void *user, const uint8_t *buf, size_t len)
{
	struct vmlink_mux *mux = opaque;
	struct mux_stream *ms = user;

	if (ms->dead)
		return 0;
	if (ms->out_len - ms->out_off >= STREAM_OUT_MAX || mux->out_total >= MUX_OUT_MAX) {
		mux->rx_blocked = true;
		return -EAGAIN;
	}
	if (ms->out_len == ms->out_off) {
		/* Straight to the fd; only what it does not take is copied. */
		ssize_t n = send(ms->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == ENOTSOCK)
			n = write(ms->fd, buf, len);
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			pr_debug("stream %u: write: %s", ms->id, strerror(errno));
			stream_drop(mux, ms);
			return 0;
		}
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		}
		if (!len)
			return 0;
	}
	if (ms->out_len + len > ms->out_cap) {
		size_t cap = ms->out_len + len + (64u << 10);
		uint8_t *n = realloc(ms->out, cap);

		if (!n) {
			mux->rx_blocked = true;
			return -EAGAIN;
		}
		ms->out = n;
		ms->out_cap = cap;
	}
	memcpy(ms->out + ms->out_len, buf, len);
	ms->out_len += len;
	mux->out_total += len;
	return 0;
}

static void op_close(void *opaque, void *user)
{
	struct mux_stream *ms = user;

	ms->peer_closed = true;
	if (ms->out_len == ms->out_off)
		stream_kill(ms);
	/* else closed once flushed */
}

static const struct vmlink_ops mux_ops = {
	.open = op_open,
	.data = op_data,
	.close = op_close,
};

struct vmlink_mux *vmlink_mux_create(enum vmlink_role role, int (*stream_open)(void *opaque), void *opaque)
{
	struct vmlink_mux *mux = calloc(1, sizeof(*mux));

	if (!mux)
		return NULL;
	mux->role = role;
	mux->channel = -1;
	mux->stream_open = stream_open;
	mux->opaque = opaque;
	mux->link = vmlink_create(role, &mux_ops, mux);
	if (!mux->link) {
		free(mux);
		return NULL;
	}
	return mux;
}

static void streams_reap(struct vmlink_mux *mux)
{
	size_t j = 0;

	for (size_t i = 0; i < mux->nstreams; i++) {
		struct mux_stream *ms = mux->streams[i];

		if (ms->dead) {
			mux->out_total -= ms->out_len - ms->out_off;
			free(ms->out);
			free(ms);
		} else {
			mux->streams[j++] = ms;
		}
	}
	mux->nstreams = j;
}

void vmlink_mux_free(struct vmlink_mux *mux)
{
	if (!mux)
		return;
	for (size_t i = 0; i < mux->nstreams; i++)
		stream_kill(mux->streams[i]);
	streams_reap(mux);
	if (mux->channel >= 0)
		close(mux->channel);
	vmlink_free(mux->link);
	free(mux->streams);
	free(mux->pfds);
	free(mux);
}

void vmlink_mux_set_channel(struct vmlink_mux *mux, int fd)
{
	struct stat st;

	if (mux->channel >= 0)
		close(mux->channel);
	mux->channel = fd;
	if (fd < 0)
		return;
	fd_nonblock(fd);
	mux->channel_is_socket = !fstat(fd, &st) && S_ISSOCK(st.st_mode);
	vmlink_connected(mux->link, monotonic_ms());
}

int vmlink_mux_channel(const struct vmlink_mux *mux)
{
	return mux->channel;
}

int vmlink_mux_add_stream(struct vmlink_mux *mux, int fd)
{
	struct mux_stream *ms;
	int ret;

	ret = fd_nonblock(fd);
	if (ret)
		return ret;
	ms = stream_add(mux, fd);
	if (!ms)
		return -ENOMEM;
	ret = vmlink_stream_open(mux->link, ms, &ms->id);
	if (ret) {
		mux->nstreams--;
		free(ms);
		return ret;
	}
	return 0;
}

void vmlink_mux_reset(struct vmlink_mux *mux)
{
	vmlink_reset(mux->link);
	streams_reap(mux);
}

struct vmlink *vmlink_mux_link(struct vmlink_mux *mux)
{
	return mux->link;
}

size_t vmlink_mux_streams(const struct vmlink_mux *mux)
{
	size_t n = 0;

	for (size_t i = 0; i < mux->nstreams; i++)
		n += !mux->streams[i]->dead;
	return n;
}

static void channel_lost(struct vmlink_mux *mux, const char *why)
{
	pr_info("channel lost: %s", why);
	close(mux->channel);
	mux->channel = -1;
}

/* After a failed read or write of the channel: true to try again (a
 * signal); otherwise stop, and a real error loses the channel. */
static bool channel_retry(struct vmlink_mux *mux)
{
	if (errno == EINTR)
		return true;
	if (errno != EAGAIN)
		channel_lost(mux, strerror(errno));
	return false;
}

/* Write whatever the link has due, until the channel would block. */
static void channel_write(struct vmlink_mux *mux)
{
	const uint8_t *buf;
	size_t len;

	while (mux->channel >= 0 && vmlink_tx_peek(mux->link, &buf, &len)) {
		ssize_t n = fd_write(mux->channel, mux->channel_is_socket, buf, len);

		if (n < 0) {
			if (channel_retry(mux))
				continue;
			return;
		}
		vmlink_tx_done(mux->link, (size_t)n);
	}
}

static void channel_read(struct vmlink_mux *mux)
{
	/* A few reads per wakeup so that streams get their turn. */
	for (int i = 0; i < 4 && mux->channel >= 0; i++) {
		size_t room;
		uint8_t *space = vmlink_rx_space(mux->link, &room);
		ssize_t n;

		if (!room)
			return;
		n = read(mux->channel, space, room);
		if (n < 0) {
			if (channel_retry(mux))
				continue;
			return;
		}
		if (!n) {
			channel_lost(mux, "end of file");
			return;
		}
		vmlink_rx_commit(mux->link, (size_t)n);
		if ((size_t)n < room)
			return;
	}
}

/* Local bytes of @ms into DATA frames, as many as the window takes. */
static void stream_read(struct vmlink_mux *mux, struct mux_stream *ms)
{
	for (int i = 0; i < 4; i++) {
		uint8_t *buf = vmlink_data_reserve(mux->link);
		ssize_t n;

		if (!buf)
			return;
		n = read(ms->fd, buf, VMLINK_PAYLOAD_MAX);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0 || vmlink_data_commit(mux->link, ms->id, (size_t)n)) {
			stream_drop(mux, ms);
			return;
		}
		if (n < VMLINK_PAYLOAD_MAX)
			return;
	}
}

int vmlink_mux_run_once(struct vmlink_mux *mux, struct pollfd *extra, unsigned n_extra, int timeout_ms)
{
	size_t need = 1 + mux->nstreams + n_extra, k = 0;
	const uint8_t *buf;
	size_t len;
	bool window = vmlink_window_open(mux->link);
	int ret;

	if (need > mux->pfds_cap) {
		struct pollfd *p = realloc(mux->pfds, need * sizeof(*p));

		if (!p)
			return -ENOMEM;
		mux->pfds = p;
		mux->pfds_cap = need;
	}
	/* An fd with nothing wanted of it is left out (-1): poll would report
	 * its hang-up at once, over and over, while the window is full. */
	mux->pfds[k].fd = mux->channel;
	mux->pfds[k].events = POLLIN | (vmlink_tx_peek(mux->link, &buf, &len) ? POLLOUT : 0);
	k++;
	for (size_t i = 0; i < mux->nstreams; i++, k++) {
		struct mux_stream *ms = mux->streams[i];
		short ev = (window && !ms->peer_closed ? POLLIN : 0) | (ms->out_len > ms->out_off ? POLLOUT : 0);

		mux->pfds[k].fd = ev ? ms->fd : -1;
		mux->pfds[k].events = ev;
	}
	memcpy(mux->pfds + k, extra, n_extra * sizeof(*extra));
	if (timeout_ms < 0 || timeout_ms > VMLINK_TICK_MS)
		timeout_ms = VMLINK_TICK_MS;
	ret = poll(mux->pfds, k + n_extra, timeout_ms);
	if (ret < 0 && errno != EINTR)
		return -errno;
	if (ret < 0)
		memset(mux->pfds, 0, (k + n_extra) * sizeof(*mux->pfds));
	for (unsigned i = 0; i < n_extra; i++)
		extra[i].revents = mux->pfds[k + i].revents;

	if (mux->channel >= 0 && mux->pfds[0].revents & (POLLIN | POLLHUP | POLLERR))
		channel_read(mux);
	/* Streams: only those that were polled (the array may grow while
	 * frames are taken: new ones wait for the next round). */
	for (size_t i = 0; i < k - 1; i++) {
		struct mux_stream *ms = mux->streams[i];
		short re = mux->pfds[1 + i].revents;

		if (ms->dead || !re)
			continue;
		if (re & POLLOUT || (ms->peer_closed && re & (POLLHUP | POLLERR))) {
			if (!stream_flush(mux, ms) || (ms->peer_closed && ms->out_len == ms->out_off)) {
				stream_drop(mux, ms);
				continue;
			}
		}
		if (!ms->dead && !ms->peer_closed && re & (POLLIN | POLLHUP | POLLERR))
			stream_read(mux, ms);
	}
	if (mux->rx_blocked && streams_have_room(mux)) {
		/* A stream refused a frame and has drained: ask for it again. */
		mux->rx_blocked = false;
		vmlink_rx_unblock(mux->link);
	}
	vmlink_tick(mux->link, monotonic_ms());
	channel_write(mux);
	streams_reap(mux);
	return 0;
}
