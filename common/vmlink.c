/* vmlink: frame codec and the state machine of one link end (vmlink.h,
 * docs/vm-transport.md). The fd side is in vmlink_mux.c. */
#define LOG_PREFIX "vmlink: "
#include "vmlink.h"
#include "le.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

_Static_assert(VMLINK_HEADER_SIZE == 40, "vmlink header is 40 bytes on the wire");
_Static_assert(VMLINK_PAYLOAD_MAX > 0 && VMLINK_FRAME_MAX <= 32768, "one frame per 32 KiB write");

/* Header field offsets (docs/vm-transport.md, "Frames"). */
enum {
	OFF_MAGIC = 0,
	OFF_TYPE = 4,
	OFF_FLAGS = 5,
	OFF_RESERVED = 6,
	OFF_STREAM = 8,
	OFF_SEQ = 12,
	OFF_ACK = 20,
	OFF_LENGTH = 28,
	OFF_CRC = 32,
	/* 36..39: reserved, zero (keeps the payload 8-byte aligned) */
	OFF_RESERVED2 = 36,
};

#define HELLO_RETRY_MS 500      /* no confirming HELLO on this connection yet */
#define RESEND_SILENCE_MS 1000  /* unacknowledged frames and no ack progress */
#define GAP_ACK_MS 200          /* at most one resend request per gap this often */
#define ACK_EVERY_FRAMES 16     /* a standalone ACK before more data, at least this often */
#define RX_CAP (8u * VMLINK_FRAME_MAX)

static const uint32_t crc32c_table[256] = {
	0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c,
	0x26a1e7e8, 0xd4ca64eb, 0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
	0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24, 0x105ec76f, 0xe235446c,
	0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
	0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc,
	0xbc267848, 0x4e4dfb4b, 0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
	0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35, 0xaa64d611, 0x580f5512,
	0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
	0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad,
	0x1642ae59, 0xe4292d5a, 0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
	0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595, 0x417b1dbc, 0xb3109ebf,
	0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
	0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f,
	0xed03a29b, 0x1f682198, 0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
	0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38, 0xdbfc821c, 0x2997011f,
	0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
	0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e,
	0x4767748a, 0xb50cf789, 0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
	0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46, 0x7198540d, 0x83f3d70e,
	0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
	0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de,
	0xdde0eb2a, 0x2f8b6829, 0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
	0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93, 0x082f63b7, 0xfa44e0b4,
	0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
	0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b,
	0xb4091bff, 0x466298fc, 0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
	0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033, 0xa24bb5a6, 0x502036a5,
	0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
	0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975,
	0x0e330a81, 0xfc588982, 0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
	0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622, 0x38cc2a06, 0xcaa7a905,
	0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
	0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8,
	0xe52cc12c, 0x1747422f, 0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
	0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0, 0xd3d3e1ab, 0x21b862a8,
	0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
	0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78,
	0x7fab5e8c, 0x8dc0dd8f, 0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
	0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1, 0x69e9f0d5, 0x9b8273d6,
	0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
	0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69,
	0xd5cf889d, 0x27a40b9e, 0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
	0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};

static uint32_t crc32c_soft(uint32_t crc, const uint8_t *p, size_t len)
{
	while (len--)
		crc = crc32c_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t crc, const uint8_t *p, size_t len)
{
	uint64_t c = crc;

	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
	}
	crc = (uint32_t)c;
	while (len--)
		crc = __builtin_ia32_crc32qi(crc, *p++);
	return crc;
}
#endif

uint32_t vmlink_crc32c(uint32_t crc, const void *buf, size_t len)
{
	crc = ~crc;
#if defined(__x86_64__)
	if (__builtin_cpu_supports("sse4.2"))
		return ~crc32c_sse42(crc, buf, len);
#endif
	return ~crc32c_soft(crc, buf, len);
}

void vmlink_header_encode(uint8_t hdr[VMLINK_HEADER_SIZE], const struct vmlink_frame *f)
{
	uint32_t crc;

	memset(hdr, 0, VMLINK_HEADER_SIZE);
	le32_put(hdr + OFF_MAGIC, VMLINK_MAGIC);
	le8_put(hdr + OFF_TYPE, f->type);
	le8_put(hdr + OFF_FLAGS, f->flags);
	le32_put(hdr + OFF_STREAM, f->stream);
	le64_put(hdr + OFF_SEQ, f->seq);
	le64_put(hdr + OFF_ACK, f->ack);
	le32_put(hdr + OFF_LENGTH, f->length);
	crc = vmlink_crc32c(0, hdr, VMLINK_HEADER_SIZE);
	if (f->length)
		crc = vmlink_crc32c(crc, f->payload, f->length);
	le32_put(hdr + OFF_CRC, crc);
}

/* A header that could start a frame: the checksum is checked later, once
 * the payload is there. */
static bool header_plausible(const uint8_t *h)
{
	uint8_t type = le8_get(h + OFF_TYPE);

	return type >= VMLINK_HELLO && type <= VMLINK_ACK && !le16_get(h + OFF_RESERVED) &&
	       !le32_get(h + OFF_RESERVED2) && le32_get(h + OFF_LENGTH) <= VMLINK_PAYLOAD_MAX;
}

static bool frame_crc_ok(const uint8_t *h, uint32_t length)
{
	uint8_t copy[VMLINK_HEADER_SIZE];
	uint32_t crc;

	memcpy(copy, h, sizeof(copy));
	le32_put(copy + OFF_CRC, 0);
	crc = vmlink_crc32c(0, copy, sizeof(copy));
	crc = vmlink_crc32c(crc, h + VMLINK_HEADER_SIZE, length);
	return crc == le32_get(h + OFF_CRC);
}

/* The first position at or after @from where the magic could begin. */
static size_t magic_find(const uint8_t *buf, size_t len, size_t from)
{
	static const uint8_t magic[4] = { 0x54, 0x52, 0x56, 0x4C };

	while (from < len) {
		const uint8_t *p = memchr(buf + from, magic[0], len - from);
		size_t at, n;

		if (!p)
			return len;
		at = (size_t)(p - buf);
		n = len - at < 4 ? len - at : 4;
		if (!memcmp(p, magic, n))
			return at;      /* whole magic, or a prefix at the end */
		from = at + 1;
	}
	return len;
}

enum vmlink_scan_result vmlink_frame_scan(const uint8_t *buf, size_t len, struct vmlink_frame *f,
					  size_t *used, size_t *skipped)
{
	size_t at = 0;

	for (;;) {
		const uint8_t *h;
		uint32_t length;

		at = magic_find(buf, len, at);
		if (len - at < VMLINK_HEADER_SIZE) {
			*used = *skipped = at;
			return VMLINK_SCAN_MORE;
		}
		h = buf + at;
		if (!header_plausible(h)) {
			at++;
			continue;
		}
		length = le32_get(h + OFF_LENGTH);
		if (len - at - VMLINK_HEADER_SIZE < length) {
			*used = *skipped = at;
			return VMLINK_SCAN_MORE;
		}
		if (!frame_crc_ok(h, length)) {
			at++;
			continue;
		}
		f->type = le8_get(h + OFF_TYPE);
		f->flags = le8_get(h + OFF_FLAGS);
		f->stream = le32_get(h + OFF_STREAM);
		f->seq = le64_get(h + OFF_SEQ);
		f->ack = le64_get(h + OFF_ACK);
		f->length = length;
		f->payload = h + VMLINK_HEADER_SIZE;
		*skipped = at;
		*used = at + VMLINK_HEADER_SIZE + length;
		return VMLINK_SCAN_FRAME;
	}
}

void vmlink_hello_encode(uint8_t out[VMLINK_HELLO_SIZE], const struct vmlink_hello *h)
{
	le64_put(out, h->epoch);
	le64_put(out + 8, h->peer_epoch);
}

int vmlink_hello_decode(const uint8_t *buf, size_t len, struct vmlink_hello *h)
{
	if (len != VMLINK_HELLO_SIZE)
		return -EBADMSG;
	h->epoch = le64_get(buf);
	h->peer_epoch = le64_get(buf + 8);
	return h->epoch ? 0 : -EBADMSG;
}

/* ---- link ------------------------------------------------------------ */

/* A sequenced frame, encoded, kept until the peer acknowledges it. */
struct tx_frame {
	struct tx_frame *next;
	uint64_t seq;
	uint32_t len;
	uint8_t bytes[];
};

struct link_stream {
	uint32_t id;
	void *user;
};

struct vmlink {
	enum vmlink_role role;
	const struct vmlink_ops *ops;
	void *opaque;
	uint64_t now_ms;

	uint64_t epoch, peer_epoch;
	bool established;       /* both epochs agreed */
	bool conn_confirmed;    /* the peer answered on this connection */
	uint64_t last_hello_ms;

	/* Sending: the window is every sequenced frame not yet acknowledged,
	 * oldest first; next_send is the first not yet written on this
	 * connection. */
	uint64_t tx_seq, peer_acked;
	struct tx_frame *head, *tail, *next_send, *spare;
	size_t window_bytes;
	uint64_t last_ack_progress_ms, last_resend_ms, last_resend_ack;

	/* What is being written: one frame, finished before another starts. */
	const uint8_t *cur;
	size_t cur_len, cur_off;
	struct tx_frame *cur_frame;     /* when cur is a window frame */
	bool cur_orphan;                /* ... that a reset removed */

	bool pad_due, hello_due, hello_reply, gap_ack_due;
	uint8_t ctl[VMLINK_HEADER_SIZE + VMLINK_HELLO_SIZE];

	/* Receiving. */
	uint64_t rx_last, ack_sent, gap_ack_at;
	bool rx_blocked;        /* the owner refused a frame: drop until unblocked */
	bool open_blocked;      /* ... or the window was far over for an OPEN */
	uint64_t gap_ack_ms;
	unsigned frames_since_ack;
	uint8_t *rx;
	size_t rx_len;

	struct link_stream streams[VMLINK_STREAMS_MAX];
	unsigned nstreams;
	uint32_t next_id;

	struct vmlink_stats st;
};

static const uint8_t zero_pad[VMLINK_FRAME_MAX];

static uint64_t epoch_new(void)
{
	uint64_t e = 0;
	struct timespec ts;

	if (getrandom(&e, sizeof(e), GRND_NONBLOCK) != sizeof(e)) {
		clock_gettime(CLOCK_REALTIME, &ts);
		e = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec << 20 ^ (uint64_t)(uintptr_t)&e;
	}
	return e ? e : 1;
}

static struct link_stream *stream_find(struct vmlink *link, uint32_t id)
{
	for (unsigned i = 0; i < link->nstreams; i++)
		if (link->streams[i].id == id)
			return &link->streams[i];
	return NULL;
}

static void stream_remove(struct vmlink *link, struct link_stream *s)
{
	*s = link->streams[--link->nstreams];
}

static void window_free(struct vmlink *link)
{
	struct tx_frame *f = link->head, *next;

	for (; f; f = next) {
		next = f->next;
		if (f == link->cur_frame)
			link->cur_orphan = true;
		else
			free(f);
	}
	link->head = link->tail = link->next_send = NULL;
	link->window_bytes = 0;
}

/* Drop acknowledged frames from the front; the one being written stays
 * until it is written. */
static void window_pop_acked(struct vmlink *link)
{
	while (link->head && link->head->seq <= link->peer_acked && link->head != link->cur_frame) {
		struct tx_frame *f = link->head;

		link->head = f->next;
		if (!link->head)
			link->tail = NULL;
		if (link->next_send == f)
			link->next_send = f->next;
		link->window_bytes -= f->len;
		free(f);
	}
}

/* Write again every frame the peer has not acknowledged. */
static void window_resend(struct vmlink *link)
{
	struct tx_frame *f = link->head;

	while (f && f->seq <= link->peer_acked)
		f = f->next;
	if (f && f != link->next_send) {
		for (struct tx_frame *g = f; g && g != link->next_send; g = g->next)
			link->st.resent_frames++;
	}
	link->next_send = f;
	link->last_resend_ms = link->now_ms;
	link->last_resend_ack = link->peer_acked;
	link->last_ack_progress_ms = link->now_ms;
}

static int control_append(struct vmlink *link, uint8_t type, uint32_t stream);

static void ack_take(struct vmlink *link, uint64_t ack)
{
	if (ack <= link->peer_acked || ack > link->tx_seq)
		return;         /* stale, or beyond what we sent: ignored */
	link->peer_acked = ack;
	link->last_ack_progress_ms = link->now_ms;
	window_pop_acked(link);
}

static void link_reset_state(struct vmlink *link)
{
	const struct vmlink_ops *ops = link->ops;

	while (link->nstreams) {
		void *user = link->streams[link->nstreams - 1].user;

		link->nstreams--;
		if (ops->close)
			ops->close(link->opaque, user);
	}
	window_free(link);
	link->epoch = epoch_new();
	link->peer_epoch = 0;
	link->established = false;
	link->conn_confirmed = false;
	link->tx_seq = link->peer_acked = 0;
	link->rx_last = link->ack_sent = link->gap_ack_at = 0;
	link->gap_ack_due = false;
	link->rx_blocked = false;
	link->open_blocked = false;
	link->next_id = 1;
	link->hello_due = true;
	link->hello_reply = false;
	link->last_hello_ms = link->now_ms;
	link->st.resets++;
	pr_info("link reset, new epoch %016llx", (unsigned long long)link->epoch);
	if (ops->reset)
		ops->reset(link->opaque);
}

struct vmlink *vmlink_create(enum vmlink_role role, const struct vmlink_ops *ops, void *opaque)
{
	struct vmlink *link = calloc(1, sizeof(*link));

	if (!link)
		return NULL;
	link->rx = malloc(RX_CAP);
	if (!link->rx) {
		free(link);
		return NULL;
	}
	link->role = role;
	link->ops = ops;
	link->opaque = opaque;
	link->epoch = epoch_new();
	link->next_id = 1;
	link->hello_due = true;
	return link;
}

void vmlink_free(struct vmlink *link)
{
	if (!link)
		return;
	if (link->cur_orphan)
		free(link->cur_frame);  /* out of the window already */
	link->cur_frame = NULL;
	window_free(link);
	free(link->spare);
	free(link->rx);
	free(link);
}

void vmlink_connected(struct vmlink *link, uint64_t now_ms)
{
	link->now_ms = now_ms;
	link->rx_len = 0;
	if (link->cur_orphan)
		free(link->cur_frame);
	link->cur = NULL;
	link->cur_frame = NULL;
	link->cur_orphan = false;
	link->next_send = NULL;         /* until the peer says what it has */
	link->conn_confirmed = false;
	link->pad_due = true;
	link->hello_due = true;
	link->hello_reply = false;
	link->last_hello_ms = now_ms;
}

void vmlink_reset(struct vmlink *link)
{
	link_reset_state(link);
}

void vmlink_tick(struct vmlink *link, uint64_t now_ms)
{
	link->now_ms = now_ms;
	if (link->open_blocked && link->window_bytes < VMLINK_WINDOW) {
		link->open_blocked = false;
		vmlink_rx_unblock(link);
	}
	if (!link->conn_confirmed && now_ms - link->last_hello_ms >= HELLO_RETRY_MS) {
		link->hello_due = true;
		link->hello_reply = false;
		link->last_hello_ms = now_ms;
	}
	if (link->conn_confirmed && link->head && !link->next_send &&
	    now_ms - link->last_ack_progress_ms >= RESEND_SILENCE_MS) {
		pr_debug("no acknowledgement for %u ms: resending", RESEND_SILENCE_MS);
		window_resend(link);
	}
}

static void hello_take(struct vmlink *link, const struct vmlink_frame *f)
{
	struct vmlink_hello h;
	bool learned = false;

	if (vmlink_hello_decode(f->payload, f->length, &h)) {
		link->st.garbage_bytes += VMLINK_HEADER_SIZE + f->length;
		return;
	}
	if (h.peer_epoch && h.peer_epoch != link->epoch) {
		/* Addressed to a pairing of ours that is gone (a HELLO that
		 * waited in a buffer, or a duplicate of one): taking it would
		 * reset a pairing that works, and the peer, seeing that, would
		 * reset back (ternd restarted under a running agent: a storm).
		 * The peer hears our current epoch from our own HELLO. */
		link->st.stale_hellos++;
		return;
	}
	if (link->peer_epoch && h.epoch != link->peer_epoch) {
		pr_info("peer epoch changed (%016llx -> %016llx)", (unsigned long long)link->peer_epoch,
			(unsigned long long)h.epoch);
		link_reset_state(link);
	}
	if (!link->peer_epoch) {
		link->peer_epoch = h.epoch;
		learned = true;
	}
	if (h.peer_epoch == link->epoch) {
		/* The peer knows this pairing: what it acknowledges is ours. */
		link->established = true;
		link->conn_confirmed = true;
		ack_take(link, f->ack);
		window_resend(link);
	}
	if (!(f->flags & VMLINK_FLAG_HELLO_REPLY) || learned || h.peer_epoch != link->epoch) {
		link->hello_due = true;
		link->hello_reply = true;
	}
}

/* A DATA, OPEN or CLOSE frame, in sequence. 0, or -EAGAIN: not taken
 * (the peer will send it again). */
static int sequenced_take(struct vmlink *link, const struct vmlink_frame *f)
{
	const struct vmlink_ops *ops = link->ops;
	struct link_stream *s = stream_find(link, f->stream);

	switch (f->type) {
	case VMLINK_DATA:
		if (!s || !f->length)
			return 0;       /* a stream closed meanwhile */
		return ops->data(link->opaque, s->user, f->payload, f->length);
	case VMLINK_OPEN: {
		void *user;

		/* Refusals are counted, logged only at debug: a guest could
		 * send millions a second. */
		if (link->role != VMLINK_ROLE_HOST || s || f->length || !f->stream) {
			link->st.refused_opens++;
			pr_debug("OPEN of stream %u refused (%s)", f->stream,
				link->role != VMLINK_ROLE_HOST ? "the host opens none" :
				s ? "already open" : "malformed");
			return 0;
		}
		if (link->window_bytes >= 2 * VMLINK_WINDOW) {
			/* Refusals are CLOSE frames past the window: a peer that
			 * opens and never acknowledges must not grow it forever. */
			link->open_blocked = true;
			return -EAGAIN;
		}
		user = link->nstreams < VMLINK_STREAMS_MAX && ops->open ? ops->open(link->opaque, f->stream)
									 : NULL;
		if (!user) {
			link->st.refused_opens++;
			pr_debug("stream %u refused (%u open)", f->stream, link->nstreams);
			if (control_append(link, VMLINK_CLOSE, f->stream))
				return -EAGAIN;        /* no memory: the peer resends it */
			return 0;
		}
		link->streams[link->nstreams].id = f->stream;
		link->streams[link->nstreams].user = user;
		link->nstreams++;
		return 0;
	}
	case VMLINK_CLOSE:
		if (s) {
			void *user = s->user;

			stream_remove(link, s);
			if (ops->close)
				ops->close(link->opaque, user);
		}
		return 0;
	}
	return 0;
}

static int frame_take(struct vmlink *link, const struct vmlink_frame *f)
{
	link->st.frames_in++;
	if (f->type == VMLINK_HELLO) {
		hello_take(link, f);
		return 0;
	}
	if (!link->established)
		return 0;       /* of a pairing before this one */
	ack_take(link, f->ack);
	if (f->type == VMLINK_ACK) {
		if ((f->flags & VMLINK_FLAG_ACK_RESEND) &&
		    (f->ack != link->last_resend_ack || link->now_ms - link->last_resend_ms >= GAP_ACK_MS))
			window_resend(link);
		return 0;
	}
	if (f->seq <= link->rx_last) {
		link->st.dup_frames++;
		return 0;
	}
	if (link->rx_blocked)
		return 0;       /* dropped; asked again by vmlink_rx_unblock */
	if (f->seq != link->rx_last + 1) {
		link->st.gap_frames++;
		if (link->gap_ack_at != link->rx_last || link->now_ms - link->gap_ack_ms >= GAP_ACK_MS) {
			link->gap_ack_due = true;
			link->gap_ack_at = link->rx_last;
			link->gap_ack_ms = link->now_ms;
		}
		return 0;
	}
	if (sequenced_take(link, f)) {
		link->rx_blocked = true;
		link->st.blocked_frames++;
		return 0;
	}
	link->rx_last = f->seq;
	link->frames_since_ack++;
	return 0;
}

void vmlink_rx_unblock(struct vmlink *link)
{
	if (!link->rx_blocked)
		return;
	link->rx_blocked = false;
	link->gap_ack_due = true;
	link->gap_ack_at = link->rx_last;
	link->gap_ack_ms = link->now_ms;
}

uint8_t *vmlink_rx_space(struct vmlink *link, size_t *room)
{
	*room = RX_CAP - link->rx_len;
	return link->rx + link->rx_len;
}

void vmlink_rx_commit(struct vmlink *link, size_t n)
{
	size_t pos = 0;

	if (n > RX_CAP - link->rx_len)
		n = RX_CAP - link->rx_len;
	link->rx_len += n;
	for (;;) {
		struct vmlink_frame f;
		size_t used, skipped;
		enum vmlink_scan_result r;

		r = vmlink_frame_scan(link->rx + pos, link->rx_len - pos, &f, &used, &skipped);
		link->st.garbage_bytes += skipped;
		pos += used;
		if (r == VMLINK_SCAN_MORE)
			break;
		frame_take(link, &f);
	}
	if (pos) {
		memmove(link->rx, link->rx + pos, link->rx_len - pos);
		link->rx_len -= pos;
	}
}

static void ctl_start(struct vmlink *link, uint8_t type, uint8_t flags, const uint8_t *payload, uint32_t len)
{
	struct vmlink_frame f = {
		.type = type, .flags = flags, .ack = link->rx_last, .length = len, .payload = payload,
	};

	if (len)
		memcpy(link->ctl + VMLINK_HEADER_SIZE, payload, len);
	f.payload = link->ctl + VMLINK_HEADER_SIZE;
	vmlink_header_encode(link->ctl, &f);
	link->cur = link->ctl;
	link->cur_len = VMLINK_HEADER_SIZE + len;
	link->cur_off = 0;
	link->ack_sent = link->rx_last;
	link->frames_since_ack = 0;
}

bool vmlink_tx_peek(struct vmlink *link, const uint8_t **buf, size_t *len)
{
	if (!link->cur) {
		bool ack_owed = link->established && link->rx_last > link->ack_sent;

		if (link->pad_due) {
			link->pad_due = false;
			link->cur = zero_pad;
			link->cur_len = sizeof(zero_pad);
			link->cur_off = 0;
		} else if (link->hello_due) {
			struct vmlink_hello h = { .epoch = link->epoch, .peer_epoch = link->peer_epoch };
			uint8_t payload[VMLINK_HELLO_SIZE];

			vmlink_hello_encode(payload, &h);
			link->hello_due = false;
			ctl_start(link, VMLINK_HELLO, link->hello_reply ? VMLINK_FLAG_HELLO_REPLY : 0, payload,
				  sizeof(payload));
		} else if (link->gap_ack_due && link->established) {
			link->gap_ack_due = false;
			ctl_start(link, VMLINK_ACK, VMLINK_FLAG_ACK_RESEND, NULL, 0);
		} else if (ack_owed && (!link->next_send || !link->conn_confirmed ||
					link->frames_since_ack >= ACK_EVERY_FRAMES)) {
			ctl_start(link, VMLINK_ACK, 0, NULL, 0);
		} else if (link->established && link->conn_confirmed && link->next_send) {
			struct tx_frame *f = link->next_send;

			link->next_send = f->next;
			link->cur = f->bytes;
			link->cur_len = f->len;
			link->cur_off = 0;
			link->cur_frame = f;
		} else {
			return false;
		}
	}
	*buf = link->cur + link->cur_off;
	*len = link->cur_len - link->cur_off;
	return true;
}

void vmlink_tx_done(struct vmlink *link, size_t n)
{
	if (!link->cur)
		return;
	link->cur_off += n < link->cur_len - link->cur_off ? n : link->cur_len - link->cur_off;
	if (link->cur_off < link->cur_len)
		return;
	link->st.frames_out++;
	if (link->cur_frame) {
		uint64_t ack = le64_get(link->cur_frame->bytes + OFF_ACK);

		if (ack > link->ack_sent)
			link->ack_sent = ack;
		if (link->cur_orphan)
			free(link->cur_frame);
	}
	link->cur = NULL;
	link->cur_frame = NULL;
	link->cur_orphan = false;
	window_pop_acked(link);
}

/* Put @f (bytes[40..] filled, @len payload bytes) at the window's end. */
static void window_append(struct vmlink *link, struct tx_frame *f, uint8_t type, uint32_t stream, uint32_t len)
{
	struct vmlink_frame fr = {
		.type = type, .stream = stream, .seq = ++link->tx_seq, .ack = link->rx_last, .length = len,
		.payload = f->bytes + VMLINK_HEADER_SIZE,
	};

	vmlink_header_encode(f->bytes, &fr);
	f->next = NULL;
	f->seq = fr.seq;
	f->len = VMLINK_HEADER_SIZE + len;
	if (link->tail)
		link->tail->next = f;
	else
		link->head = f;
	link->tail = f;
	if (!link->next_send && link->conn_confirmed)
		link->next_send = f;
	if (!link->head->next)
		link->last_ack_progress_ms = link->now_ms;
	link->window_bytes += f->len;
}

/* OPEN and CLOSE: tiny, allowed past a full window so that a stream can
 * always end. */
static int control_append(struct vmlink *link, uint8_t type, uint32_t stream)
{
	struct tx_frame *f = malloc(sizeof(*f) + VMLINK_HEADER_SIZE);

	if (!f)
		return -ENOMEM;
	window_append(link, f, type, stream, 0);
	return 0;
}

int vmlink_stream_open(struct vmlink *link, void *user, uint32_t *id)
{
	int ret;

	if (link->role != VMLINK_ROLE_GUEST)
		return -EPERM;
	if (link->nstreams >= VMLINK_STREAMS_MAX)
		return -EMFILE;
	while (!link->next_id || stream_find(link, link->next_id))
		link->next_id++;
	ret = control_append(link, VMLINK_OPEN, link->next_id);
	if (ret)
		return ret;
	link->streams[link->nstreams].id = link->next_id;
	link->streams[link->nstreams].user = user;
	link->nstreams++;
	*id = link->next_id++;
	return 0;
}

void vmlink_stream_close(struct vmlink *link, uint32_t id)
{
	struct link_stream *s = stream_find(link, id);

	if (!s)
		return;
	stream_remove(link, s);
	if (control_append(link, VMLINK_CLOSE, id))
		pr_err("stream %u: no memory for its CLOSE", id);
}

bool vmlink_window_open(const struct vmlink *link)
{
	return link->window_bytes + VMLINK_FRAME_MAX <= VMLINK_WINDOW;
}

uint8_t *vmlink_data_reserve(struct vmlink *link)
{
	if (!vmlink_window_open(link))
		return NULL;
	if (!link->spare)
		link->spare = malloc(sizeof(*link->spare) + VMLINK_FRAME_MAX);
	return link->spare ? link->spare->bytes + VMLINK_HEADER_SIZE : NULL;
}

int vmlink_data_commit(struct vmlink *link, uint32_t id, size_t n)
{
	struct tx_frame *f = link->spare, *shrunk;

	if (!n)
		return 0;
	if (!f || n > VMLINK_PAYLOAD_MAX)
		return -EINVAL;
	if (!stream_find(link, id))
		return -ENOENT;
	link->spare = NULL;
	/* Small frames give back the rest of the buffer: the window counts
	 * bytes, so memory must follow bytes. */
	if (n < VMLINK_PAYLOAD_MAX / 2) {
		shrunk = realloc(f, sizeof(*f) + VMLINK_HEADER_SIZE + n);
		if (shrunk)
			f = shrunk;
	}
	window_append(link, f, VMLINK_DATA, id, (uint32_t)n);
	return 0;
}

bool vmlink_established(const struct vmlink *link)
{
	return link->established && link->conn_confirmed;
}

uint64_t vmlink_epoch(const struct vmlink *link)
{
	return link->epoch;
}

size_t vmlink_unacked(const struct vmlink *link)
{
	return link->window_bytes;
}

void vmlink_stats_get(const struct vmlink *link, struct vmlink_stats *st)
{
	*st = link->st;
}
