/* vmlink (common/vmlink.h): the frame codec on truncated, corrupt,
 * duplicated, oversized and garbage-interleaved input, and two link ends
 * driven through a lossy pipe: host->guest bytes dropped, guest->host bytes
 * duplicated from a 32 KiB boundary, reconnects with the same epochs and
 * with a new one. Every stream's bytes must arrive exactly once and in
 * order, or the stream must be reset. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "le.h"
#include "vmlink.h"

static uint32_t rng_state = 12345;

static uint32_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 17;
	rng_state ^= rng_state << 5;
	return rng_state;
}

static size_t frame_build(uint8_t *out, uint8_t type, uint32_t stream, uint64_t seq, const uint8_t *payload,
			  uint32_t len)
{
	struct vmlink_frame f = { .type = type, .stream = stream, .seq = seq, .ack = seq / 2,
				  .length = len, .payload = payload };

	vmlink_header_encode(out, &f);
	if (len)
		memcpy(out + VMLINK_HEADER_SIZE, payload, len);
	return VMLINK_HEADER_SIZE + len;
}

static void test_crc32c_known(void **state)
{
	/* The standard check value of CRC-32C. */
	assert_int_equal(vmlink_crc32c(0, "123456789", 9), 0xE3069283u);
	/* Continuing equals one pass. */
	assert_int_equal(vmlink_crc32c(vmlink_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
}

static void test_roundtrip(void **state)
{
	uint8_t payload[1000], buf[2000];
	struct vmlink_frame f;
	size_t used, skipped, n;

	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7);
	n = frame_build(buf, VMLINK_DATA, 9, 77, payload, sizeof(payload));
	assert_int_equal(le32_get(buf), VMLINK_MAGIC);
	assert_memory_equal(buf, "TRVL", 4);
	assert_int_equal(vmlink_frame_scan(buf, n, &f, &used, &skipped), VMLINK_SCAN_FRAME);
	assert_int_equal(used, n);
	assert_int_equal(skipped, 0);
	assert_int_equal(f.type, VMLINK_DATA);
	assert_int_equal(f.stream, 9);
	assert_int_equal(f.seq, 77);
	assert_int_equal(f.ack, 38);
	assert_int_equal(f.length, sizeof(payload));
	assert_memory_equal(f.payload, payload, sizeof(payload));
}

static void test_truncated(void **state)
{
	uint8_t payload[300] = { 1, 2, 3 }, buf[400];
	struct vmlink_frame f;
	size_t used, skipped, n = frame_build(buf, VMLINK_DATA, 1, 1, payload, sizeof(payload));

	for (size_t cut = 0; cut < n; cut++) {
		assert_int_equal(vmlink_frame_scan(buf, cut, &f, &used, &skipped), VMLINK_SCAN_MORE);
		assert_int_equal(used, 0);      /* nothing of a frame's start is dropped */
	}
}

static void test_corrupt(void **state)
{
	uint8_t payload[200], buf[300];
	struct vmlink_frame f;
	size_t used, skipped, n;

	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)rng();
	n = frame_build(buf, VMLINK_DATA, 3, 5, payload, sizeof(payload));
	for (size_t i = 0; i < n; i++) {
		for (unsigned bit = 0; bit < 8; bit++) {
			buf[i] ^= (uint8_t)(1u << bit);
			assert_int_equal(vmlink_frame_scan(buf, n, &f, &used, &skipped), VMLINK_SCAN_MORE);
			assert_true(used <= n);
			buf[i] ^= (uint8_t)(1u << bit);
		}
	}
	assert_int_equal(vmlink_frame_scan(buf, n, &f, &used, &skipped), VMLINK_SCAN_FRAME);
}

static void test_oversized_and_reserved(void **state)
{
	uint8_t buf[VMLINK_FRAME_MAX + 200] = { 0 }, good[100];
	struct vmlink_frame f = { .type = VMLINK_DATA, .length = VMLINK_PAYLOAD_MAX + 1, .payload = buf + 40 };
	size_t used, skipped, g;

	/* A checksum that matches, but a length over the limit. */
	vmlink_header_encode(buf, &f);
	g = frame_build(buf + VMLINK_FRAME_MAX + 60, VMLINK_ACK, 0, 0, NULL, 0);
	assert_int_equal(vmlink_frame_scan(buf, VMLINK_FRAME_MAX + 60 + g, &f, &used, &skipped),
			 VMLINK_SCAN_FRAME);
	assert_int_equal(skipped, VMLINK_FRAME_MAX + 60);
	assert_int_equal(f.type, VMLINK_ACK);
	/* Unknown type, reserved bits: skipped though the checksum fits. */
	g = frame_build(good, VMLINK_ACK, 0, 0, NULL, 0);
	good[4] = 9;
	assert_int_equal(vmlink_frame_scan(good, g, &f, &used, &skipped), VMLINK_SCAN_MORE);
	g = frame_build(good, VMLINK_ACK, 0, 0, NULL, 0);
	good[6] = 1;
	assert_int_equal(vmlink_frame_scan(good, g, &f, &used, &skipped), VMLINK_SCAN_MORE);
}

/* Frames among garbage (some of it fake magics), duplicated: every frame
 * comes out, in order, whatever the read boundaries. */
static void test_garbage_interleaved(void **state)
{
	enum { FRAMES = 200 };
	size_t cap = FRAMES * (VMLINK_HEADER_SIZE + 2048 + 300), len = 0, have = 0, fed = 0;
	uint8_t *stream = malloc(cap), *win = malloc(cap), payload[2048];
	unsigned next = 0;

	assert_non_null(stream);
	for (unsigned i = 0; i < FRAMES; i++) {
		unsigned junk = rng() % 300, plen = rng() % sizeof(payload);

		for (unsigned j = 0; j < junk; j++)
			stream[len++] = (uint8_t)rng();
		if (junk > 8 && i % 3 == 0)
			memcpy(stream + len - 8, "TRVL\x02\x00\x00\x00", 8); /* a fake header start */
		for (unsigned j = 0; j < plen; j++)
			payload[j] = (uint8_t)(i + j);
		len += frame_build(stream + len, VMLINK_DATA, i, i, payload, plen);
	}
	while (fed < len || have) {
		struct vmlink_frame f;
		size_t used, skipped, chunk = 1 + rng() % 5000;

		if (chunk > len - fed)
			chunk = len - fed;
		memcpy(win + have, stream + fed, chunk);
		have += chunk;
		fed += chunk;
		while (vmlink_frame_scan(win, have, &f, &used, &skipped) == VMLINK_SCAN_FRAME) {
			assert_int_equal(f.seq, next);
			for (unsigned j = 0; j < f.length; j++)
				assert_int_equal(f.payload[j], (uint8_t)(next + j));
			next++;
			memmove(win, win + used, have - used);
			have -= used;
		}
		memmove(win, win + used, have - used);
		have -= used;
		if (fed == len)
			break;
	}
	assert_int_equal(next, FRAMES);
	free(stream);
	free(win);
}

static void test_hello_decode(void **state)
{
	struct vmlink_hello h = { .epoch = 5, .peer_epoch = 7 }, back;
	uint8_t buf[VMLINK_HELLO_SIZE];

	vmlink_hello_encode(buf, &h);
	assert_int_equal(vmlink_hello_decode(buf, sizeof(buf), &back), 0);
	assert_int_equal(back.epoch, 5);
	assert_int_equal(back.peer_epoch, 7);
	assert_int_equal(vmlink_hello_decode(buf, sizeof(buf) - 1, &back), -EBADMSG);
	assert_int_equal(vmlink_hello_decode(buf, 0, &back), -EBADMSG);
	memset(buf, 0, 8);
	assert_int_equal(vmlink_hello_decode(buf, sizeof(buf), &back), -EBADMSG);
}

/* ---- two ends through a lossy pipe ----------------------------------- */

#define NSTREAMS 4

static uint8_t pattern(uint32_t id, int dir, uint64_t k)
{
	return (uint8_t)((k * 2654435761u) >> 11 ^ id * 31u ^ (unsigned)dir * 101u ^ k);
}

struct rx_stream {
	uint32_t id;
	uint64_t got, sent;     /* bytes received; bytes sent the other way */
	bool closed, used;
};

struct end {
	struct vmlink *link;
	int dir;                /* the direction this end receives: 0 host, 1 guest */
	struct rx_stream s[64];
	unsigned resets;
};

static struct rx_stream *slot_for(struct end *e, uint32_t id)
{
	for (unsigned i = 0; i < 64; i++)
		if (!e->s[i].used) {
			e->s[i] = (struct rx_stream){ .id = id, .used = true };
			return &e->s[i];
		}
	return NULL;
}

static void *end_open(void *opaque, uint32_t id)
{
	return slot_for(opaque, id);
}

static int end_data(void *opaque, void *user, const uint8_t *buf, size_t len)
{
	struct end *e = opaque;
	struct rx_stream *s = user;

	for (size_t i = 0; i < len; i++)
		if (buf[i] != pattern(s->id, e->dir, s->got + i))
			fail_msg("stream %u dir %d: byte %llu wrong", s->id, e->dir,
				 (unsigned long long)(s->got + i));
	s->got += len;
	return 0;
}

static void end_close(void *opaque, void *user)
{
	((struct rx_stream *)user)->closed = true;
}

static void end_reset(void *opaque)
{
	((struct end *)opaque)->resets++;
}

static const struct vmlink_ops end_ops = { end_open, end_data, end_close, end_reset };

struct pipe {
	struct end g, h;
	uint64_t now;
	uint8_t *hist;          /* every byte the guest wrote */
	size_t hist_len;
	size_t drop_h2g;        /* bytes of the host's output to lose */
};

/* Move what @from has due into @to, in pieces of random size. */
static void carry(struct pipe *p, struct end *from, struct end *to, bool from_guest)
{
	const uint8_t *buf;
	size_t len;

	for (int rounds = 0; rounds < 64 && vmlink_tx_peek(from->link, &buf, &len); rounds++) {
		size_t n = len, room;
		uint8_t *space;

		if (!from_guest && p->drop_h2g) {
			n = len < p->drop_h2g ? len : p->drop_h2g;
			p->drop_h2g -= n;
			vmlink_tx_done(from->link, n);
			continue;
		}
		space = vmlink_rx_space(to->link, &room);
		if (n > room)
			n = room;
		if (!n)
			break;
		memcpy(space, buf, n);
		if (from_guest) {
			memcpy(p->hist + p->hist_len, buf, n);
			p->hist_len += n;
		}
		vmlink_tx_done(from->link, n);
		vmlink_rx_commit(to->link, n);
	}
}

/* Each end sends pattern bytes on its streams, up to @total per stream. */
static void produce(struct end *e, uint64_t total)
{
	for (unsigned i = 0; i < 64; i++) {
		struct rx_stream *s = &e->s[i];
		uint8_t *buf;
		size_t n;

		if (!s->used || s->closed || s->sent >= total)
			continue;
		buf = vmlink_data_reserve(e->link);
		if (!buf)
			return;
		n = 1 + rng() % VMLINK_PAYLOAD_MAX;
		if (n > total - s->sent)
			n = (size_t)(total - s->sent);
		for (size_t k = 0; k < n; k++)
			buf[k] = pattern(s->id, !e->dir, s->sent + k);
		assert_int_equal(vmlink_data_commit(e->link, s->id, n), 0);
		s->sent += n;
	}
}

static void step(struct pipe *p, uint64_t total)
{
	produce(&p->g, total);
	produce(&p->h, total);
	carry(p, &p->g, &p->h, true);
	carry(p, &p->h, &p->g, false);
	p->now += 5;
	vmlink_tick(p->g.link, p->now);
	vmlink_tick(p->h.link, p->now);
}

static void pipe_open(struct pipe *p)
{
	memset(p, 0, sizeof(*p));
	p->hist = malloc(1u << 30);
	assert_non_null(p->hist);
	p->g.dir = 1;
	p->g.link = vmlink_create(VMLINK_ROLE_GUEST, &end_ops, &p->g);
	p->h.link = vmlink_create(VMLINK_ROLE_HOST, &end_ops, &p->h);
	vmlink_connected(p->g.link, 0);
	vmlink_connected(p->h.link, 0);
}

static void pipe_close(struct pipe *p)
{
	vmlink_free(p->g.link);
	vmlink_free(p->h.link);
	free(p->hist);
}

static void guest_streams_open(struct pipe *p)
{
	for (unsigned i = 0; i < NSTREAMS; i++) {
		struct rx_stream *s = slot_for(&p->g, 0);

		assert_int_equal(vmlink_stream_open(p->g.link, s, &s->id), 0);
	}
}

static bool all_done(struct pipe *p, uint64_t total)
{
	unsigned host_streams = 0;

	for (unsigned i = 0; i < 64; i++) {
		struct rx_stream *g = &p->g.s[i], *h = &p->h.s[i];

		if (g->used && !g->closed && g->got != total)
			return false;
		if (h->used && !h->closed) {
			host_streams++;
			if (h->got != total)
				return false;
		}
	}
	return host_streams == NSTREAMS && !vmlink_unacked(p->g.link) && !vmlink_unacked(p->h.link);
}

/* Same epochs throughout: host->guest bytes lost at reconnects and once
 * without one (a gap), guest->host bytes duplicated from a 32 KiB boundary
 * of what the guest wrote. Nothing lost, nothing twice. */
static void test_lossy_same_epoch(void **state)
{
	const uint64_t total = 3u << 20;
	struct pipe p;
	struct vmlink_stats st;
	unsigned steps = 0;

	pipe_open(&p);
	guest_streams_open(&p);
	while (!all_done(&p, total)) {
		assert_true(steps < 200000);
		steps++;
		if (steps % 97 == 0) {
			/* QEMU reconnects: what the host had in flight is lost. */
			p.drop_h2g = rng() % 90000;
			vmlink_connected(p.h.link, p.now);
		} else if (steps % 61 == 0 && p.hist_len > 65536) {
			/* Migration: guest bytes again, from a 32 KiB boundary,
			 * on the new connection. */
			size_t from = (p.hist_len - (rng() % (p.hist_len < (1u << 20) ? p.hist_len : (1u << 20)))) &
				      ~(size_t)32767;
			size_t n = p.hist_len - from, room;

			vmlink_connected(p.h.link, p.now);
			while (n) {
				uint8_t *space = vmlink_rx_space(p.h.link, &room);
				size_t k = n < room ? n : room;

				memcpy(space, p.hist + from, k);
				vmlink_rx_commit(p.h.link, k);
				from += k;
				n -= k;
			}
		} else if (steps % 89 == 0) {
			p.drop_h2g = 1 + rng() % 5000;  /* a gap, no reconnect */
		}
		step(&p, total);
	}
	for (unsigned i = 0; i < NSTREAMS; i++) {
		assert_int_equal(p.g.s[i].got, total);
		assert_false(p.g.s[i].closed);
	}
	assert_int_equal(p.g.resets + p.h.resets, 0);
	vmlink_stats_get(p.h.link, &st);
	assert_true(st.dup_frames > 0);         /* the duplicates were seen and dropped */
	vmlink_stats_get(p.g.link, &st);
	assert_true(st.gap_frames > 0 || st.garbage_bytes > 0);
	pipe_close(&p);
}

/* The host resets (a save), later the guest restarts: each time every
 * stream is closed on both sides, and new streams carry their bytes. */
static void test_epoch_change(void **state)
{
	const uint64_t total = 1u << 20;
	struct pipe p;
	unsigned steps = 0;

	pipe_open(&p);
	guest_streams_open(&p);
	for (int i = 0; i < 40; i++)
		step(&p, total);
	vmlink_reset(p.h.link);
	p.drop_h2g = 3000;      /* and the first bytes after it are lost */
	vmlink_connected(p.h.link, p.now);
	for (int i = 0; i < 400 && p.g.resets == 0; i++)
		step(&p, total);
	assert_int_equal(p.h.resets, 1);
	assert_int_equal(p.g.resets, 1);
	for (unsigned i = 0; i < 64; i++) {
		if (p.g.s[i].used)
			assert_true(p.g.s[i].closed);
		if (p.h.s[i].used)
			assert_true(p.h.s[i].closed);
	}
	memset(p.g.s, 0, sizeof(p.g.s));
	memset(p.h.s, 0, sizeof(p.h.s));
	guest_streams_open(&p);
	while (!all_done(&p, total)) {
		assert_true(++steps < 100000);
		step(&p, total);
	}

	/* The guest's agent restarts: a new link end, a new epoch. */
	vmlink_free(p.g.link);
	memset(&p.g, 0, sizeof(p.g));
	p.g.dir = 1;
	p.g.link = vmlink_create(VMLINK_ROLE_GUEST, &end_ops, &p.g);
	vmlink_connected(p.g.link, p.now);
	for (int i = 0; i < 400 && p.h.resets == 1; i++)
		step(&p, total);
	assert_int_equal(p.h.resets, 2);
	for (unsigned i = 0; i < 64; i++)
		if (p.h.s[i].used)
			assert_true(p.h.s[i].closed);
	memset(p.h.s, 0, sizeof(p.h.s));
	guest_streams_open(&p);
	steps = 0;
	while (!all_done(&p, total)) {
		assert_true(++steps < 100000);
		step(&p, total);
	}
	pipe_close(&p);
}

/* Hostile frames at a host link: OPEN of an existing stream, DATA for
 * unknown streams, acks beyond what was sent, a HELLO of a wrong size.
 * None crashes, none is delivered. */
static void test_hostile_frames(void **state)
{
	struct pipe p;
	uint8_t buf[4096], payload[64] = { 0 };
	size_t n = 0, room;
	uint8_t *space;

	pipe_open(&p);
	for (int i = 0; i < 10; i++)
		step(&p, 0);
	assert_true(vmlink_established(p.h.link));
	n += frame_build(buf + n, VMLINK_OPEN, 5, 1, NULL, 0);
	n += frame_build(buf + n, VMLINK_OPEN, 5, 2, NULL, 0);          /* again */
	n += frame_build(buf + n, VMLINK_DATA, 99, 3, payload, 64);     /* unknown stream */
	n += frame_build(buf + n, VMLINK_HELLO, 0, 0, payload, 3);      /* bad hello */
	n += frame_build(buf + n, VMLINK_OPEN, 6, 4, payload, 10);      /* OPEN with payload */
	n += frame_build(buf + n, VMLINK_ACK, 0, 0, NULL, 0);
	le64_put(buf + n - VMLINK_HEADER_SIZE + 20, 1u << 30);          /* ack of unsent frames */
	space = vmlink_rx_space(p.h.link, &room);
	memcpy(space, buf, n);
	vmlink_rx_commit(p.h.link, n);
	{
		unsigned open = 0;

		for (unsigned i = 0; i < 64; i++)
			open += p.h.s[i].used;
		assert_int_equal(open, 1);
		assert_int_equal(p.h.s[0].id, 5);
		assert_int_equal(p.h.s[0].got, 0);
	}
	assert_int_equal(p.h.resets, 0);
	{
		struct vmlink_stats st;

		vmlink_stats_get(p.h.link, &st);
		assert_int_equal(st.refused_opens, 2);
	}
	/* A guest end refuses OPEN (only guests open). */
	n = frame_build(buf, VMLINK_OPEN, 7, 1, NULL, 0);
	space = vmlink_rx_space(p.g.link, &room);
	memcpy(space, buf, n);
	vmlink_rx_commit(p.g.link, n);
	for (unsigned i = 0; i < 64; i++)
		assert_false(p.g.s[i].used);
	assert_int_equal(vmlink_stream_open(p.h.link, NULL, (uint32_t[1]){ 0 }), -EPERM);
	pipe_close(&p);
}

/* A guest that opens streams the host refuses and never acknowledges the
 * CLOSEs: the host's window stops growing near twice its size (the OPENs
 * beyond are dropped unacknowledged, for the peer to send again). */
static void *refuse_open(void *opaque, uint32_t id)
{
	return NULL;
}

static const struct vmlink_ops refusing_ops = { refuse_open, end_data, end_close, end_reset };

static void test_open_flood(void **state)
{
	struct pipe p;
	struct vmlink_stats st;
	uint8_t buf[VMLINK_HEADER_SIZE];
	size_t room;
	uint64_t seq = 0;

	pipe_open(&p);
	vmlink_free(p.h.link);
	p.h.link = vmlink_create(VMLINK_ROLE_HOST, &refusing_ops, &p.h);
	vmlink_connected(p.h.link, 0);
	for (int i = 0; i < 10; i++)
		step(&p, 0);
	assert_true(vmlink_established(p.h.link));
	for (uint32_t id = 1; id <= 600000; id++) {
		uint8_t *space = vmlink_rx_space(p.h.link, &room);
		struct vmlink_frame f = { .type = VMLINK_OPEN, .stream = id, .seq = ++seq, .ack = 0 };

		vmlink_header_encode(buf, &f);     /* acknowledging nothing */
		memcpy(space, buf, sizeof(buf));
		vmlink_rx_commit(p.h.link, sizeof(buf));
	}
	assert_true(vmlink_unacked(p.h.link) <= 2 * VMLINK_WINDOW + VMLINK_FRAME_MAX);
	vmlink_stats_get(p.h.link, &st);
	assert_true(st.blocked_frames > 0);
	assert_true(st.refused_opens < 600000);
	pipe_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_known),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_oversized_and_reserved),
		cmocka_unit_test(test_garbage_interleaved),
		cmocka_unit_test(test_hello_decode),
		cmocka_unit_test(test_lossy_same_epoch),
		cmocka_unit_test(test_epoch_change),
		cmocka_unit_test(test_hostile_frames),
		cmocka_unit_test(test_open_flood),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
