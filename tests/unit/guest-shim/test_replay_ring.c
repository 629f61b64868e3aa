/* The shim's replay log ring (guest-shim/replay_ring.c), on its own:
 * order and contents across wrap-around and growth, eviction when full,
 * a request larger than the ring, a durable request still waiting moved
 * aside in order. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replay_ring.h"

/* Entry footprint with a payload of PAYLOAD bytes: 24 + 40 = 64. */
#define PAYLOAD 40u
#define FOOTPRINT 64u

/* The requests still waiting for their replies, by sequence number. */
struct waiting {
	uint64_t seqs[4];
	unsigned n;
};

static bool is_waiting(uint64_t seq, void *arg)
{
	const struct waiting *w = arg;

	for (unsigned i = 0; i < w->n; i++)
		if (w->seqs[i] == seq)
			return true;
	return false;
}

/* Log request @seq of @len bytes, each byte (seq + i). */
static uint64_t append(struct replay_ring *r, uint64_t seq, size_t len, uint64_t durable, struct waiting *w)
{
	uint8_t *bytes = malloc(len ? len : 1);
	struct iovec iov[2];
	uint64_t lost;

	assert_non_null(bytes);
	for (size_t i = 0; i < len; i++)
		bytes[i] = (uint8_t)(seq + i);
	/* Two pieces, as a header and a payload are sent. */
	iov[0] = (struct iovec){ bytes, len / 2 };
	iov[1] = (struct iovec){ bytes + len / 2, len - len / 2 };
	lost = replay_ring_append(r, &(struct replay_request){
		.seq = seq, .call = (uint32_t)seq * 3, .no_reply = seq & 1, .iov = iov, .niov = 2,
	}, durable, is_waiting, w);
	free(bytes);
	return lost;
}

/* The ring holds exactly requests @first..@last, in order, each intact. */
static void expect_entries(const struct replay_ring *r, uint64_t first, uint64_t last, size_t len)
{
	uint64_t seq = first;

	for (struct replay_entry *e = replay_ring_oldest(r); e; e = replay_ring_next(r, e), seq++) {
		assert_int_equal(e->seq, seq);
		assert_int_equal(e->call, (uint32_t)seq * 3);
		assert_int_equal(e->no_reply, seq & 1);
		assert_int_equal(e->len, len);
		for (size_t i = 0; i < len; i++)
			assert_int_equal(e->bytes[i], (uint8_t)(seq + i));
	}
	assert_int_equal(seq, last + 1);
}

static void test_order_and_trim(void **state)
{
	struct replay_ring r;
	struct waiting w = { 0 };

	(void)state;
	replay_ring_init(&r, 1 << 20);
	assert_null(replay_ring_first(&r));
	for (uint64_t s = 1; s <= 10; s++)
		assert_int_equal(append(&r, s, PAYLOAD, 0, &w), 0);
	expect_entries(&r, 1, 10, PAYLOAD);
	assert_int_equal(r.bytes, 10 * FOOTPRINT);
	/* Durable up to 4: they go at the next append. */
	assert_int_equal(append(&r, 11, PAYLOAD, 4, &w), 0);
	expect_entries(&r, 5, 11, PAYLOAD);
	replay_ring_trim(&r, 11, is_waiting, &w);
	assert_null(replay_ring_first(&r));
	assert_int_equal(r.bytes, 0);
	replay_ring_release(&r);
}

static void test_wrap_around(void **state)
{
	struct replay_ring r;
	struct waiting w = { 0 };

	(void)state;
	/* Room for three entries and 8 bytes that an entry never fits. */
	replay_ring_init(&r, 3 * FOOTPRINT + 8);
	for (uint64_t s = 1; s <= 3; s++)
		assert_int_equal(append(&r, s, PAYLOAD, 0, &w), 0);
	/* 4 goes at the start, where 1 was (durable). */
	assert_int_equal(append(&r, 4, PAYLOAD, 1, &w), 0);
	assert_true(r.wrapped);
	expect_entries(&r, 2, 4, PAYLOAD);
	/* Many more laps, each durable up to the one before last. */
	for (uint64_t s = 5; s <= 40; s++) {
		assert_int_equal(append(&r, s, PAYLOAD, s - 2, &w), 0);
		expect_entries(&r, s - 1, s, PAYLOAD);
	}
	/* Entries of another size still wrap whole. */
	for (uint64_t s = 41; s <= 60; s++)
		assert_int_equal(append(&r, s, 2 * PAYLOAD + (s % 3), s - 1, &w), 0);
	expect_entries(&r, 60, 60, 2 * PAYLOAD + 0);
	replay_ring_release(&r);
}

static void test_eviction_when_full(void **state)
{
	struct replay_ring r;
	struct waiting w = { 0 };

	(void)state;
	replay_ring_init(&r, 4 * FOOTPRINT);
	for (uint64_t s = 1; s <= 4; s++)
		assert_int_equal(append(&r, s, PAYLOAD, 0, &w), 0);
	/* Full and nothing durable: the oldest is evicted, and said so. */
	assert_int_equal(append(&r, 5, PAYLOAD, 0, &w), 1);
	expect_entries(&r, 2, 5, PAYLOAD);
	/* One twice the size evicts two. */
	assert_int_equal(append(&r, 6, 2 * PAYLOAD + 24, 0, &w), 3);
	assert_int_equal(r.count, 3);
	replay_ring_release(&r);
}

static void test_larger_than_ring(void **state)
{
	struct replay_ring r;
	struct waiting w = { 0 };
	struct replay_entry *e;

	(void)state;
	replay_ring_init(&r, 4 * FOOTPRINT);
	assert_int_equal(append(&r, 1, PAYLOAD, 0, &w), 0);
	/* Never fits: not kept, the ones before it kept. */
	assert_int_equal(append(&r, 2, 4 * FOOTPRINT, 0, &w), 2);
	expect_entries(&r, 1, 1, PAYLOAD);
	assert_int_equal(replay_ring_push(&r, UINT64_MAX - 3, &e), -E2BIG);
	/* Exactly the ring: fits once the rest is evicted. */
	assert_int_equal(append(&r, 3, 4 * FOOTPRINT - 24, 0, &w), 1);
	expect_entries(&r, 3, 3, 4 * FOOTPRINT - 24);
	replay_ring_release(&r);
	/* A ring of no bytes keeps nothing. */
	replay_ring_init(&r, 0);
	assert_int_equal(append(&r, 7, 0, 0, &w), 7);
	assert_null(replay_ring_first(&r));
	replay_ring_release(&r);
}

/* The sequence numbers of every logged entry, in order, into @seqs. */
static unsigned logged(const struct replay_ring *r, uint64_t *seqs, unsigned max)
{
	unsigned n = 0;

	for (struct replay_entry *e = replay_ring_oldest(r); e && n < max; e = replay_ring_next(r, e))
		seqs[n++] = e->seq;
	return n;
}

static void test_waiting_held(void **state)
{
	struct replay_ring r;
	struct waiting w = { .seqs = { 2, 3 }, .n = 2 };
	uint64_t seqs[8];

	(void)state;
	replay_ring_init(&r, 4 * FOOTPRINT);
	for (uint64_t s = 1; s <= 6; s++)
		assert_int_equal(append(&r, s, PAYLOAD, 0, &w), s <= 4 ? 0 : s - 4);
	/* 3..6 logged, 2 evicted (not durable, so waiting or not). */
	expect_entries(&r, 3, 6, PAYLOAD);
	/* Durable up to 5, 3 still waits: moved aside, in order; 4, 5 go. */
	replay_ring_trim(&r, 5, is_waiting, &w);
	assert_int_equal(logged(&r, seqs, 8), 2);
	assert_int_equal(seqs[0], 3);
	assert_int_equal(seqs[1], 6);
	assert_int_equal(r.count, 1);
	/* The ring fills behind it: nothing is lost, 3 stays first. */
	for (uint64_t s = 7; s <= 9; s++)
		assert_int_equal(append(&r, s, PAYLOAD, 5, &w), 0);
	assert_int_equal(append(&r, 10, PAYLOAD, 5, &w), 6);
	assert_int_equal(logged(&r, seqs, 8), 5);
	assert_int_equal(seqs[0], 3);
	for (unsigned i = 1; i < 5; i++)
		assert_int_equal(seqs[i], 6 + i);
	{
		struct replay_entry *held = replay_ring_oldest(&r);

		assert_int_equal(held->call, 9);
		for (unsigned i = 0; i < PAYLOAD; i++)
			assert_int_equal(held->bytes[i], (uint8_t)(3 + i));
	}
	/* Its reply came: it goes at the next append. */
	w.n = 0;
	assert_int_equal(append(&r, 11, PAYLOAD, 5, &w), 7);
	expect_entries(&r, 8, 11, PAYLOAD);
	/* Cleared (fork) with entries aside: nothing left. */
	w.n = 2;
	w.seqs[0] = 8;
	replay_ring_trim(&r, 8, is_waiting, &w);
	assert_int_equal(replay_ring_oldest(&r)->seq, 8);
	replay_ring_clear(&r);
	assert_null(replay_ring_oldest(&r));
	replay_ring_release(&r);
}

static void test_growth(void **state)
{
	struct replay_ring r;
	struct waiting w = { 0 };
	uint64_t s, caps = 0, cap = 0;

	(void)state;
	replay_ring_init(&r, 1 << 20);
	/* Wrapped in the first buffer, then grown: order survives. */
	for (s = 1; s <= 900; s++) {
		assert_int_equal(append(&r, s, 1000, s > 40 && s < 500 ? s - 40 : 0, &w), 0);
		if (r.cap != cap) {
			cap = r.cap;
			caps++;
		}
	}
	assert_true(caps >= 3);
	assert_true(r.cap <= 1 << 20);
	expect_entries(&r, 460, 900, 1000);
	/* At the cap, the oldest are evicted, never the buffer grown past it. */
	for (; s <= 2000; s++)
		append(&r, s, 1000, 0, &w);
	assert_int_equal(r.cap, 1 << 20);
	assert_true(r.bytes <= 1 << 20);
	expect_entries(&r, 2001 - r.count, 2000, 1000);
	/* Cleared (fork): empty, and used again from its start. */
	replay_ring_clear(&r);
	assert_null(replay_ring_first(&r));
	assert_int_equal(append(&r, 1, PAYLOAD, 0, &w), 0);
	expect_entries(&r, 1, 1, PAYLOAD);
	replay_ring_release(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_and_trim),
		cmocka_unit_test(test_wrap_around),
		cmocka_unit_test(test_eviction_when_full),
		cmocka_unit_test(test_larger_than_ring),
		cmocka_unit_test(test_waiting_held),
		cmocka_unit_test(test_growth),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
