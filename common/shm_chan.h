/* The shared-memory channel: the framed protocol of wire.h carried over two
 * byte rings in one memfd instead of a socket.
 *
 * The guest creates the memfd (sealed against shrinking and growing, so the
 * worker can never fault on it) and two eventfds, and hands them to the worker
 * over the unix socket it connected with (SCM_RIGHTS). From then on requests
 * go through ring 0 and replies through ring 1; the socket stays open only to
 * carry file descriptors and to tell each side when the other is gone.
 *
 * Each ring is single producer, single consumer (in the guest, one thread
 * sends while another may receive: struct shm_chan's tx and rx halves are
 * apart): the producer owns `tail`,
 * the consumer owns `head`, both free-running byte counters. A side that finds
 * nothing to do spins for a while (a remoted call's answer usually comes
 * within microseconds), then announces that it sleeps and blocks on its
 * eventfd; the other side writes that eventfd only when the flag is up, so a
 * busy channel makes no system calls at all.
 *
 * The same rings can instead live in a region of memory the two sides share
 * otherwise (a slot of an ivshmem BAR, ivshmem_bar.h): the host maps the
 * region from its file and lays it out, the guest binds to its own mapping,
 * and the doorbell is a byte on the session's stream (a vmlink stream
 * through tern-agent) instead of an eventfd: the wakeup crosses the serial
 * port, the bytes never do.
 *
 * The guest is hostile: it can write anything into the shared pages at any
 * time. The worker keeps its own copies of the ring size and of the counters
 * it owns, checks the peer's counter on every read, and copies bytes out of
 * the ring before decoding them.
 */
#ifndef TERN_SHM_CHAN_H
#define TERN_SHM_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum shm_side {
	SHM_SIDE_GUEST = 0,
	SHM_SIDE_WORKER = 1,
};

/* Ring size when the guest does not ask (TERN_SHM_RING). */
#define SHM_RING_DEFAULT (8u << 20)
#define SHM_RING_MIN (64u << 10)
#define SHM_RING_MAX (256u << 20)
/* The most a channel maps: its header page and two rings of the largest. */
#define SHM_CHAN_MAP_MAX (4096u + 2 * (size_t)SHM_RING_MAX)
/* How long a side spins before it sleeps, unless told otherwise. */
#define SHM_SPIN_NS_DEFAULT 50000u

/* Bytes a channel's layout takes for rings of @ring_bytes. */
#define SHM_CHAN_BYTES(ring_bytes) (4096u + 2 * (uint64_t)(ring_bytes))

/* The descriptors handed over: the memfd and each side's eventfd. */
#define SHM_CHAN_FDS 3

struct shm_area;
struct shm_ring;

struct shm_chan {
	struct shm_area *area;          /* the shared pages */
	size_t map_len;
	bool in_reservation;            /* mapped over a reservation of the caller's */
	uint64_t ring_bytes;            /* our copy: never read back from shared memory */
	struct shm_ring *tx, *rx;
	uint8_t *tx_data, *rx_data;
	uint64_t tx_tail, rx_head;      /* the counters we own */
	enum shm_side side;
	int memfd;
	int efd_self, efd_peer;         /* we sleep on efd_self; we wake the peer on efd_peer */
	bool doorbell_stream;           /* efd_self = efd_peer = sock: wakeups are bytes on it */
	bool borrowed;                  /* the caller's mapping: not ours to unmap */
	int sock;                       /* the unix socket: its hang-up means the peer is gone */
	uint64_t spin_ns;
};

/* Guest: make the memfd and eventfds and map them. 0 or -errno. */
int shm_chan_create(struct shm_chan *c, uint64_t ring_bytes, int sock);
/* Worker: check and map what the guest sent (fds are taken over, closed on
 * failure), at @at when it is not NULL: a reservation of SHM_CHAN_MAP_MAX
 * bytes the caller owns. 0, or -EINVAL for a memfd that is not sealed, too
 * small or not laid out as asked, -errno otherwise. */
int shm_chan_attach(struct shm_chan *c, const int fds[SHM_CHAN_FDS], uint64_t ring_bytes, int sock, void *at);
/* Host: lay out rings of @ring_bytes in @len bytes of @fd at @offset (a
 * region the host assigned; the guest's view of it is hostile from now on)
 * and map them, at @at when not NULL (as for shm_chan_attach). Wakeups are
 * bytes on @sock, which is made non-blocking. @fd stays the caller's.
 * 0, -EINVAL when the rings do not fit @len, -errno. */
int shm_chan_region_host(struct shm_chan *c, int fd, uint64_t offset, uint64_t len, uint64_t ring_bytes,
			 int sock, void *at);
/* Guest: bind to rings the host laid out at @area (the caller's mapping,
 * which must outlive the channel), wakeups as bytes on @sock (made
 * non-blocking). 0, or -EINVAL when @area is not laid out for @ring_bytes. */
int shm_chan_region_guest(struct shm_chan *c, void *area, uint64_t ring_bytes, int sock);
/* Unmaps what is ours and closes the memfd and eventfds; never the socket. */
void shm_chan_close(struct shm_chan *c);
/* The fds to hand to the worker, in the order shm_chan_attach takes them. */
void shm_chan_fds(const struct shm_chan *c, int fds[SHM_CHAN_FDS]);

/* Send a whole message (blocking while the ring is full). 0 or -errno:
 * -EPIPE when the peer is gone, -EPROTO when it corrupted the ring. */
int shm_chan_send(struct shm_chan *c, const struct iovec *iov, int niov);
/* Receive exactly @n bytes (blocking). 0 or -errno as for send. */
int shm_chan_recv(struct shm_chan *c, void *buf, size_t n);
/* Receive and drop @n bytes. 0 or -errno as for recv. */
int shm_chan_discard(struct shm_chan *c, uint64_t n);
/* True when bytes are waiting to be received. */
bool shm_chan_readable(struct shm_chan *c);

/* For a side that also waits on other descriptors (the worker's poll loop):
 * shm_chan_spin spins a while for input. Before blocking, shm_chan_idle_begin
 * raises the sleeping flag; if input came meanwhile it answers true (flag
 * down again), else the caller polls efd_self with its other fds and then
 * calls shm_chan_idle_end. */
bool shm_chan_spin(struct shm_chan *c);
/* The same, ending early (false) as soon as @other(@arg) is true: the
 * worker also watches its waits, whose answers would otherwise wait out
 * the spin. */
bool shm_chan_spin_until(struct shm_chan *c, bool (*other)(void *), void *arg);
bool shm_chan_idle_begin(struct shm_chan *c);
void shm_chan_idle_end(struct shm_chan *c);

/* File descriptors over a unix socket, with one byte of payload. */
int shm_fds_send(int sock, const int *fds, int nfds);
/* Wait at most @timeout_ms for exactly @nfds descriptors. 0 or -errno;
 * descriptors beyond @nfds are closed. */
int shm_fds_recv(int sock, int *fds, int nfds, int timeout_ms);

/* A sealed memfd of @bytes for host memory both sides map (pinned buffers). */
int shm_memfd_create(const char *name, uint64_t bytes);
/* 0 when @fd is a memfd of at least @bytes sealed against shrinking. */
int shm_memfd_check(int fd, uint64_t bytes);

#endif
