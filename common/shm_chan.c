#define LOG_PREFIX "shm: "
#include "shm_chan.h"
#include "fdpass.h"
#include "log.h"
#include "monotonic.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x314d485321524554ull         /* "TER!SHM1" */
#define SHM_DATA_OFFSET 4096u
#define CACHELINE 64

struct shm_ring {
	_Alignas(CACHELINE) uint64_t tail;      /* bytes ever written: the producer's */
	_Alignas(CACHELINE) uint64_t head;      /* bytes ever read: the consumer's */
};

struct shm_area {
	uint64_t magic;
	uint64_t ring_bytes;
	struct {
		_Alignas(CACHELINE) uint32_t flag;
	} sleeping[2];                          /* by side */
	struct shm_ring ring[2];                /* 0: guest to worker, 1: worker to guest */
};

_Static_assert(sizeof(struct shm_area) <= SHM_DATA_OFFSET, "shm header overflows its page");
_Static_assert(SHM_CHAN_MAP_MAX == SHM_DATA_OFFSET + 2 * (size_t)SHM_RING_MAX, "SHM_CHAN_MAP_MAX is stale");
_Static_assert(SHM_CHAN_BYTES(0) == SHM_DATA_OFFSET, "SHM_CHAN_BYTES is stale");


static bool power_of_two(uint64_t v)
{
	return v && !(v & (v - 1));
}

static void chan_bind(struct shm_chan *c, enum shm_side side)
{
	uint8_t *data = (uint8_t *)c->area + SHM_DATA_OFFSET;
	int out = side == SHM_SIDE_GUEST ? 0 : 1;

	c->side = side;
	c->tx = &c->area->ring[out];
	c->rx = &c->area->ring[!out];
	c->tx_data = data + (uint64_t)out * c->ring_bytes;
	c->rx_data = data + (uint64_t)!out * c->ring_bytes;
	c->tx_tail = 0;
	c->rx_head = 0;
	if (!c->spin_ns)
		c->spin_ns = SHM_SPIN_NS_DEFAULT;
}

int shm_memfd_create(const char *name, uint64_t bytes)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

int shm_memfd_check(int fd, uint64_t bytes)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	/* Only memfds carry seals; without SHRINK the peer could truncate the
	 * file under our mapping and every access would fault. */
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EINVAL;
	if (fstat(fd, &st) || (uint64_t)st.st_size < bytes)
		return -EINVAL;
	return 0;
}

/* An eventfd, not a pipe the peer could leave full and block us on. */
static int eventfd_check(int fd)
{
	char link[64], target[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return -errno;
	target[n] = 0;
	if (strcmp(target, "anon_inode:[eventfd]"))
		return -EINVAL;
	return fcntl(fd, F_SETFL, O_NONBLOCK) ? -errno : 0;
}

static int chan_map(struct shm_chan *c, int fd, uint64_t offset, void *at)
{
	c->map_len = SHM_DATA_OFFSET + 2 * c->ring_bytes;
	c->area = mmap(at, c->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), fd, (off_t)offset);
	if (c->area == MAP_FAILED) {
		c->area = NULL;
		return -errno;
	}
	c->in_reservation = at != NULL;
	return 0;
}

int shm_chan_create(struct shm_chan *c, uint64_t ring_bytes, int sock)
{
	int ret;

	memset(c, 0, sizeof(*c));
	c->memfd = c->efd_self = c->efd_peer = -1;
	c->sock = sock;
	if (!power_of_two(ring_bytes) || ring_bytes < SHM_RING_MIN || ring_bytes > SHM_RING_MAX)
		return -EINVAL;
	c->ring_bytes = ring_bytes;
	ret = shm_memfd_create("tern-shm-rings", SHM_DATA_OFFSET + 2 * ring_bytes);
	if (ret < 0)
		return ret;
	c->memfd = ret;
	c->efd_self = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->efd_peer = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd_self < 0 || c->efd_peer < 0) {
		ret = -errno;
		goto fail;
	}
	ret = chan_map(c, c->memfd, 0, NULL);
	if (ret)
		goto fail;
	c->area->magic = SHM_MAGIC;
	c->area->ring_bytes = ring_bytes;
	chan_bind(c, SHM_SIDE_GUEST);
	return 0;
fail:
	shm_chan_close(c);
	return ret;
}

void shm_chan_fds(const struct shm_chan *c, int fds[SHM_CHAN_FDS])
{
	/* The worker's own eventfd is our peer's. */
	fds[0] = c->memfd;
	fds[1] = c->efd_peer;
	fds[2] = c->efd_self;
}

int shm_chan_attach(struct shm_chan *c, const int fds[SHM_CHAN_FDS], uint64_t ring_bytes, int sock, void *at)
{
	int ret = -EINVAL;

	memset(c, 0, sizeof(*c));
	c->memfd = fds[0];
	c->efd_self = fds[1];
	c->efd_peer = fds[2];
	c->sock = sock;
	if (!power_of_two(ring_bytes) || ring_bytes < SHM_RING_MIN || ring_bytes > SHM_RING_MAX)
		goto fail;
	c->ring_bytes = ring_bytes;
	ret = shm_memfd_check(c->memfd, SHM_DATA_OFFSET + 2 * ring_bytes);
	if (!ret)
		ret = eventfd_check(c->efd_self);
	if (!ret)
		ret = eventfd_check(c->efd_peer);
	if (!ret)
		ret = chan_map(c, c->memfd, 0, at);
	if (ret)
		goto fail;
	if (__atomic_load_n(&c->area->magic, __ATOMIC_RELAXED) != SHM_MAGIC) {
		ret = -EINVAL;
		goto fail;
	}
	chan_bind(c, SHM_SIDE_WORKER);
	/* Counters start where the guest left them; ours are trusted copies. */
	c->rx_head = __atomic_load_n(&c->rx->head, __ATOMIC_ACQUIRE);
	c->tx_tail = __atomic_load_n(&c->tx->tail, __ATOMIC_ACQUIRE);
	if (c->tx_tail - __atomic_load_n(&c->tx->head, __ATOMIC_ACQUIRE) > ring_bytes) {
		ret = -EINVAL;
		goto fail;
	}
	return 0;
fail:
	shm_chan_close(c);
	return ret;
}

/* Wakeups as bytes on the session's stream; the stream's hang-up is the
 * peer's end as before. */
static int doorbell_stream_set(struct shm_chan *c, int sock)
{
	int fl = fcntl(sock, F_GETFL);

	if (fl < 0 || fcntl(sock, F_SETFL, fl | O_NONBLOCK))
		return -errno;
	c->sock = c->efd_self = c->efd_peer = sock;
	c->doorbell_stream = true;
	return 0;
}

int shm_chan_region_host(struct shm_chan *c, int fd, uint64_t offset, uint64_t len, uint64_t ring_bytes,
			 int sock, void *at)
{
	int ret;

	memset(c, 0, sizeof(*c));
	c->memfd = c->efd_self = c->efd_peer = c->sock = -1;
	if (!power_of_two(ring_bytes) || ring_bytes < SHM_RING_MIN || ring_bytes > SHM_RING_MAX ||
	    SHM_CHAN_BYTES(ring_bytes) > len || offset % SHM_DATA_OFFSET)
		return -EINVAL;
	c->ring_bytes = ring_bytes;
	ret = chan_map(c, fd, offset, at);
	if (!ret)
		ret = doorbell_stream_set(c, sock);
	if (ret) {
		shm_chan_close(c);
		return ret;
	}
	/* Whatever an earlier session or the guest left there is forgotten. */
	memset(c->area, 0, sizeof(*c->area));
	c->area->ring_bytes = ring_bytes;
	__atomic_store_n(&c->area->magic, SHM_MAGIC, __ATOMIC_RELEASE);
	chan_bind(c, SHM_SIDE_WORKER);
	return 0;
}

int shm_chan_region_guest(struct shm_chan *c, void *area, uint64_t ring_bytes, int sock)
{
	int ret;

	memset(c, 0, sizeof(*c));
	c->memfd = c->efd_self = c->efd_peer = c->sock = -1;
	c->area = area;
	c->map_len = SHM_CHAN_BYTES(ring_bytes);
	c->borrowed = true;
	if (__atomic_load_n(&c->area->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC || c->area->ring_bytes != ring_bytes ||
	    !power_of_two(ring_bytes) || ring_bytes < SHM_RING_MIN || ring_bytes > SHM_RING_MAX) {
		shm_chan_close(c);
		return -EINVAL;
	}
	c->ring_bytes = ring_bytes;
	ret = doorbell_stream_set(c, sock);
	if (ret) {
		shm_chan_close(c);
		return ret;
	}
	chan_bind(c, SHM_SIDE_GUEST);
	c->tx_tail = __atomic_load_n(&c->tx->tail, __ATOMIC_ACQUIRE);
	c->rx_head = __atomic_load_n(&c->rx->head, __ATOMIC_ACQUIRE);
	return 0;
}

void shm_chan_close(struct shm_chan *c)
{
	if (c->borrowed || c->doorbell_stream)
		c->efd_self = c->efd_peer = -1;         /* the socket is the caller's */
	if (c->borrowed)
		c->area = NULL;
	/* Pages in a caller's reservation go back to it, reserved again. */
	if (c->area && c->in_reservation)
		mmap(c->area, c->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	else if (c->area)
		munmap(c->area, c->map_len);
	if (c->memfd >= 0)
		close(c->memfd);
	if (c->efd_self >= 0)
		close(c->efd_self);
	if (c->efd_peer >= 0)
		close(c->efd_peer);
	memset(c, 0, sizeof(*c));
	c->memfd = c->efd_self = c->efd_peer = c->sock = -1;
}

/* Bytes waiting in our receive ring, or -EPROTO if the producer's counter is
 * out of range. */
static int64_t rx_avail(struct shm_chan *c)
{
	uint64_t avail = __atomic_load_n(&c->rx->tail, __ATOMIC_ACQUIRE) - c->rx_head;

	return avail > c->ring_bytes ? -EPROTO : (int64_t)avail;
}

static int64_t tx_space(struct shm_chan *c)
{
	uint64_t used = c->tx_tail - __atomic_load_n(&c->tx->head, __ATOMIC_ACQUIRE);

	return used > c->ring_bytes ? -EPROTO : (int64_t)(c->ring_bytes - used);
}

static void peer_wake(struct shm_chan *c)
{
	static const uint64_t one = 1;

	/* Pairs with the fence in chan_sleep: either the peer sees our
	 * counter, or we see its flag. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->area->sleeping[!c->side].flag, __ATOMIC_RELAXED)) {
		/* A stream the peer leaves full refuses the byte: it has
		 * wakeups enough waiting. */
		if (c->doorbell_stream) {
			if (send(c->efd_peer, "w", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN)
				pr_debug("doorbell: %s", strerror(errno));
		} else if (write(c->efd_peer, &one, sizeof(one)) < 0 && errno != EAGAIN)
			pr_debug("eventfd write: %s", strerror(errno));
	}
}

/* A count, not a flag: in the guest one thread may wait for replies while
 * another waits for room to send, and the peer wakes us while either sleeps. */
static void sleeping_set(struct shm_chan *c, uint32_t v)
{
	if (v)
		__atomic_fetch_add(&c->area->sleeping[c->side].flag, 1, __ATOMIC_RELAXED);
	else
		__atomic_fetch_sub(&c->area->sleeping[c->side].flag, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static void efd_drain(struct shm_chan *c)
{
	uint64_t v;

	if (c->doorbell_stream) {
		/* Any bytes: nothing on the stream is decoded once the rings
		 * carry the messages. End of file is left to the hang-up. */
		uint8_t sink[256];

		while (recv(c->efd_self, sink, sizeof(sink), MSG_DONTWAIT) > 0)
			;
		return;
	}
	while (read(c->efd_self, &v, sizeof(v)) == sizeof(v))
		;
}

/* How long a sleeping side blocks before it looks at the ring again: two
 * guest threads share one eventfd, and one may drain the wakeup meant for
 * the other. */
#define CHAN_BLOCK_MS 1

/* Block until the peer writes our eventfd or hangs up, or a while. */
static int chan_block(struct shm_chan *c)
{
	struct pollfd pfd[2] = {
		{ .fd = c->efd_self, .events = POLLIN },
		{ .fd = c->sock, .events = POLLRDHUP },
	};

	if (poll(pfd, c->sock >= 0 ? 2 : 1, CHAN_BLOCK_MS) < 0)
		return errno == EINTR ? 0 : -errno;
	if (pfd[0].revents & POLLIN)
		efd_drain(c);
	if (pfd[1].revents & (POLLRDHUP | POLLHUP | POLLERR))
		return -EPIPE;
	return 0;
}

/* Wait until @ready (rx_avail or tx_space) is positive: spin, then sleep. */
static int64_t chan_wait(struct shm_chan *c, int64_t (*ready)(struct shm_chan *))
{
	uint64_t start = 0;

	for (;;) {
		int64_t r = ready(c);
		int ret;

		if (r)
			return r;
		if (!start) {
			start = monotonic_ns();
			continue;
		}
		if (monotonic_ns() - start < c->spin_ns) {
			cpu_relax();
			continue;
		}
		sleeping_set(c, 1);
		r = ready(c);
		ret = r ? 0 : chan_block(c);
		sleeping_set(c, 0);
		if (ret)
			return ret;
		if (r)
			return r;
		start = 0;
	}
}

int shm_chan_send(struct shm_chan *c, const struct iovec *iov, int niov)
{
	for (int i = 0; i < niov; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;

		while (left) {
			int64_t space = tx_space(c);
			uint64_t at, n, first;

			if (space <= 0) {
				peer_wake(c);   /* what is in the ring already must drain */
				space = chan_wait(c, tx_space);
				if (space < 0)
					return (int)space;
			}
			n = left < (uint64_t)space ? left : (uint64_t)space;
			at = c->tx_tail & (c->ring_bytes - 1);
			first = n < c->ring_bytes - at ? n : c->ring_bytes - at;
			memcpy(c->tx_data + at, p, first);
			memcpy(c->tx_data, p + first, n - first);
			c->tx_tail += n;
			__atomic_store_n(&c->tx->tail, c->tx_tail, __ATOMIC_RELEASE);
			p += n;
			left -= n;
		}
	}
	peer_wake(c);
	return 0;
}

int shm_chan_recv(struct shm_chan *c, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		int64_t avail = rx_avail(c);
		uint64_t at, n, first;

		if (avail <= 0) {
			avail = chan_wait(c, rx_avail);
			if (avail < 0)
				return (int)avail;
		}
		n = len < (uint64_t)avail ? len : (uint64_t)avail;
		at = c->rx_head & (c->ring_bytes - 1);
		first = n < c->ring_bytes - at ? n : c->ring_bytes - at;
		memcpy(p, c->rx_data + at, first);
		memcpy(p + first, c->rx_data, n - first);
		c->rx_head += n;
		__atomic_store_n(&c->rx->head, c->rx_head, __ATOMIC_RELEASE);
		/* A producer blocked on a full ring waits for this. */
		if (n == (uint64_t)avail)
			peer_wake(c);
		p += n;
		len -= n;
	}
	return 0;
}

int shm_chan_discard(struct shm_chan *c, uint64_t n)
{
	uint8_t sink[4096];

	while (n) {
		size_t piece = n < sizeof(sink) ? n : sizeof(sink);
		int ret = shm_chan_recv(c, sink, piece);

		if (ret)
			return ret;
		n -= piece;
	}
	return 0;
}

bool shm_chan_readable(struct shm_chan *c)
{
	return rx_avail(c) != 0;        /* a corrupt ring reads as input: recv reports it */
}

bool shm_chan_spin_until(struct shm_chan *c, bool (*other)(void *), void *arg)
{
	uint64_t start = monotonic_ns();

	do {
		if (shm_chan_readable(c))
			return true;
		if (other && other(arg))
			return false;
		cpu_relax();
	} while (monotonic_ns() - start < c->spin_ns);
	return false;
}

bool shm_chan_spin(struct shm_chan *c)
{
	return shm_chan_spin_until(c, NULL, NULL);
}

bool shm_chan_idle_begin(struct shm_chan *c)
{
	sleeping_set(c, 1);
	if (shm_chan_readable(c)) {
		sleeping_set(c, 0);
		return true;
	}
	return false;
}

void shm_chan_idle_end(struct shm_chan *c)
{
	sleeping_set(c, 0);
	efd_drain(c);
}

int shm_fds_send(int sock, const int *fds, int nfds)
{
	char byte = 'F';

	return nfds > 0 ? fdpass_send(sock, &byte, 1, fds, nfds) : -EINVAL;
}

int shm_fds_recv(int sock, int *fds, int nfds, int timeout_ms)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	char byte;
	int got, ret;
	ssize_t n;

	if (nfds <= 0 || nfds > FDPASS_MAX)
		return -EINVAL;
	ret = poll(&pfd, 1, timeout_ms);
	if (ret <= 0)
		return ret < 0 ? -errno : -ETIMEDOUT;
	n = fdpass_recv(sock, &byte, 1, fds, nfds, &got, MSG_DONTWAIT);
	if (n <= 0)
		return n < 0 ? (int)n : -EPIPE;
	if (got == nfds)
		return 0;
	for (int i = 0; i < got && i < nfds; i++)
		close(fds[i]);
	return -EPROTO;
}
