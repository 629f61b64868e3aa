/* vmlink: a framed, multiplexed, reliable link over a VM's virtio-serial
 * port (docs/vm-transport.md).
 *
 * The port is a byte channel that may lose host->guest bytes, duplicate
 * guest->host bytes and reconnect without the guest seeing it
 * (/work/shared/VM.md). Frames carry their own magic, length, sequence and
 * checksum; each side keeps what it sent until the peer acknowledges it and
 * drops what it already received. Link epochs tell a reconnect of the same
 * two ends (resend, nothing lost) from a restart of one end (every stream
 * reset).
 *
 * Three layers, each usable alone:
 *   - the frame codec (vmlink_frame_encode, vmlink_frame_scan): pure;
 *   - struct vmlink, the state machine of one link end: bytes in
 *     (vmlink_rx_space/vmlink_rx_commit), bytes out (vmlink_tx_peek/
 *     vmlink_tx_done), time (vmlink_tick); no file descriptors, so tests can
 *     drive two ends through any lossy pipe;
 *   - struct vmlink_mux: one channel fd and many stream fds pumped with
 *     poll(), used by the guest agent and the host relay.
 * None is thread-safe: one thread owns each object. Nothing here allocates
 * by a size a peer chose; every length from the channel is bounded.
 */
#ifndef TERN_VMLINK_H
#define TERN_VMLINK_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VMLINK_MAGIC 0x4C565254u        /* "TRVL" little-endian */
#define VMLINK_HEADER_SIZE 40
/* A whole frame, header included: one write() to the port carries at most
 * 32 KiB, so one frame is never split by the guest's writes. */
#define VMLINK_FRAME_MAX 32768
#define VMLINK_PAYLOAD_MAX (VMLINK_FRAME_MAX - VMLINK_HEADER_SIZE)
#define VMLINK_HELLO_SIZE 16
/* Bytes of frames sent but not acknowledged, per direction. */
#define VMLINK_WINDOW (8u << 20)
/* Open streams per link. */
#define VMLINK_STREAMS_MAX 1024

enum vmlink_type {
	VMLINK_HELLO = 1,
	VMLINK_DATA = 2,
	VMLINK_OPEN = 3,
	VMLINK_CLOSE = 4,
	VMLINK_ACK = 5,
};

/* Flags: HELLO_REPLY marks a HELLO sent in answer (never answered back);
 * ACK_RESEND asks the peer to resend everything after ack (a gap). */
#define VMLINK_FLAG_HELLO_REPLY 0x01
#define VMLINK_FLAG_ACK_RESEND 0x01

enum vmlink_role {
	VMLINK_ROLE_GUEST,      /* opens streams */
	VMLINK_ROLE_HOST,       /* accepts them */
};

/* One frame's fields; payload points into the buffer it was decoded from
 * (or is to be encoded from) and lives as long as that buffer. */
struct vmlink_frame {
	uint8_t type;
	uint8_t flags;
	uint32_t stream;
	uint64_t seq;
	uint64_t ack;
	uint32_t length;
	const uint8_t *payload;
};

/* CRC-32C (Castagnoli) of @len bytes continuing from @crc (0 to start). */
uint32_t vmlink_crc32c(uint32_t crc, const void *buf, size_t len);

/* Write @f's 40-byte header into @hdr, checksum over it and @f->payload
 * included. The caller sends hdr then payload in one write (or writev). */
void vmlink_header_encode(uint8_t hdr[VMLINK_HEADER_SIZE], const struct vmlink_frame *f);

enum vmlink_scan_result {
	VMLINK_SCAN_MORE,       /* no whole frame yet: read more bytes */
	VMLINK_SCAN_FRAME,      /* *f holds a frame */
};

/* Find the next valid frame in @buf[0..len). Bytes before it that cannot
 * start a frame (garbage, a bad checksum, a length over the limit, an
 * unknown type, reserved bits set) are skipped, one byte past a bad magic.
 * Sets *used to the bytes the caller may drop from the front: with FRAME
 * the skipped bytes and the frame, with MORE only the bytes that cannot
 * begin a frame. *skipped counts the garbage bytes among *used. */
enum vmlink_scan_result vmlink_frame_scan(const uint8_t *buf, size_t len, struct vmlink_frame *f,
					  size_t *used, size_t *skipped);

/* HELLO's payload. */
struct vmlink_hello {
	uint64_t epoch;         /* the sender's link epoch */
	uint64_t peer_epoch;    /* the receiver's epoch as the sender knows it, 0 none */
};

void vmlink_hello_encode(uint8_t out[VMLINK_HELLO_SIZE], const struct vmlink_hello *h);
/* -EBADMSG unless @len is VMLINK_HELLO_SIZE and epoch is not 0. */
int vmlink_hello_decode(const uint8_t *buf, size_t len, struct vmlink_hello *h);

/* ---- one link end ---------------------------------------------------- */

struct vmlink;

/* What a link tells its owner. @user is the pointer given to
 * vmlink_stream_open or returned by open. All may be NULL but data. */
struct vmlink_ops {
	/* Host role: the guest opened stream @id. Return the stream's user
	 * pointer, or NULL to refuse (the link answers CLOSE). */
	void *(*open)(void *opaque, uint32_t id);
	/* Bytes for a stream, in order, exactly once. Return 0, or -EAGAIN
	 * when the owner cannot take more now: the link drops this frame
	 * unacknowledged, and every later sequenced frame, until
	 * vmlink_rx_unblock; the peer sends them again. ACK and HELLO frames
	 * are still taken meanwhile, so a full stream never stops the
	 * acknowledgements that would free the peer's window. */
	int (*data)(void *opaque, void *user, const uint8_t *buf, size_t len);
	/* The peer closed the stream, or the link was reset: @user is gone
	 * from the link. */
	void (*close)(void *opaque, void *user);
	/* The link was reset (an epoch changed); every stream was closed. */
	void (*reset)(void *opaque);
};

struct vmlink_stats {
	uint64_t frames_in, frames_out, dup_frames, gap_frames, blocked_frames, garbage_bytes, resent_frames, resets;
	uint64_t refused_opens;         /* malformed, duplicate, over the cap or refused by stream_open */
	uint64_t stale_hellos;          /* addressed to an earlier epoch of ours: ignored */
};

/* A link end with a fresh random epoch. NULL on allocation failure. */
struct vmlink *vmlink_create(enum vmlink_role role, const struct vmlink_ops *ops, void *opaque);
void vmlink_free(struct vmlink *link);      /* NULL is fine; calls no ops */

/* A new connection of the channel (and the first): input and output in
 * flight are dropped, a padding of zero bytes (so that a frame cut off in
 * the peer's decoder completes and fails its checksum) and a HELLO are
 * queued. @now_ms: a monotonic clock in milliseconds. */
void vmlink_connected(struct vmlink *link, uint64_t now_ms);
/* A new epoch: every stream is closed (ops->close, then ops->reset), both
 * windows cleared, sequences restart; a HELLO is queued. */
void vmlink_reset(struct vmlink *link);

/* Timers: HELLO again while not established, resend after silence,
 * standalone ACKs. Call at least every VMLINK_TICK_MS. */
#define VMLINK_TICK_MS 100
void vmlink_tick(struct vmlink *link, uint64_t now_ms);

/* Input: the room at the end of the receive buffer (at least one whole
 * frame's worth), then how many bytes were put there; every whole frame
 * is decoded and taken. */
uint8_t *vmlink_rx_space(struct vmlink *link, size_t *room);
void vmlink_rx_commit(struct vmlink *link, size_t n);
/* The owner has room again after ops->data said -EAGAIN: the peer is asked
 * to resend what was dropped. */
void vmlink_rx_unblock(struct vmlink *link);

/* Output: the next bytes to write to the channel (one frame or the rest of
 * one; false when nothing is due), and how many were written. */
bool vmlink_tx_peek(struct vmlink *link, const uint8_t **buf, size_t *len);
void vmlink_tx_done(struct vmlink *link, size_t n);

/* Streams. Guest role only: open a stream (OPEN is queued) and learn its
 * id; -EMFILE when VMLINK_STREAMS_MAX are open. */
int vmlink_stream_open(struct vmlink *link, void *user, uint32_t *id);
/* Close @id (CLOSE queued unless the link is reset). Calls no ops. */
void vmlink_stream_close(struct vmlink *link, uint32_t id);
/* Room for one DATA frame's payload (VMLINK_PAYLOAD_MAX bytes), or NULL
 * while the window is full. Fill it and commit @n (1..PAYLOAD_MAX) bytes
 * for stream @id; commit 0 to give it back. No copy is made. */
uint8_t *vmlink_data_reserve(struct vmlink *link);
int vmlink_data_commit(struct vmlink *link, uint32_t id, size_t n);
/* True while the window has room for another frame. */
bool vmlink_window_open(const struct vmlink *link);

bool vmlink_established(const struct vmlink *link);
uint64_t vmlink_epoch(const struct vmlink *link);
/* Bytes queued or unacknowledged (0 once the peer acknowledged all). */
size_t vmlink_unacked(const struct vmlink *link);
void vmlink_stats_get(const struct vmlink *link, struct vmlink_stats *st);

/* ---- the mux: a link, its channel fd and its stream fds --------------- */

struct vmlink_mux;

/* @stream_open: host role, a fd connected to where the guest's stream
 * goes, or -errno (the stream is refused with CLOSE). Guest role: NULL. */
struct vmlink_mux *vmlink_mux_create(enum vmlink_role role, int (*stream_open)(void *opaque),
				     void *opaque);
/* Closes every fd it owns. NULL is fine. */
void vmlink_mux_free(struct vmlink_mux *mux);

/* Take @fd (non-blocking is set) as the channel, closing the one before:
 * vmlink_connected runs. -1 detaches (channel lost). */
void vmlink_mux_set_channel(struct vmlink_mux *mux, int fd);
int vmlink_mux_channel(const struct vmlink_mux *mux);
/* Guest role: carry connected @fd as a new stream (the mux owns it). */
int vmlink_mux_add_stream(struct vmlink_mux *mux, int fd);
void vmlink_mux_reset(struct vmlink_mux *mux);
struct vmlink *vmlink_mux_link(struct vmlink_mux *mux);
size_t vmlink_mux_streams(const struct vmlink_mux *mux);

/* One poll() over the mux's fds and @extra (the caller's listen sockets
 * and the like, whose revents it reads afterwards), at most @timeout_ms,
 * then every ready fd served and the link's timers run. A channel that
 * reads EOF or fails is closed and detached (vmlink_mux_channel says -1):
 * the owner reconnects. 0, or -errno when poll fails. */
int vmlink_mux_run_once(struct vmlink_mux *mux, struct pollfd *extra, unsigned n_extra,
			int timeout_ms);

#endif
