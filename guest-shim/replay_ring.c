/* The replay log's ring (replay_ring.h). */
#include "replay_ring.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The first buffer: a session's first requests after a snapshot are
 * usually few and small. */
#define RING_START_BYTES (64u << 10)

/* An entry's footprint: header, payload, padding that keeps the next aligned. */
static uint64_t entry_size(uint64_t len)
{
	return (sizeof(struct replay_entry) + len + 7) & ~(uint64_t)7;
}

static struct replay_entry *entry_at(const struct replay_ring *r, uint64_t off)
{
	return (struct replay_entry *)(void *)(r->buf + off);
}

struct replay_held {
	struct replay_held *next;
	uint64_t entry[];               /* a struct replay_entry, 8-byte aligned */
};

static struct replay_entry *held_entry(struct replay_held *h)
{
	return (struct replay_entry *)(void *)h->entry;
}

static bool in_ring(const struct replay_ring *r, const struct replay_entry *e)
{
	uintptr_t at = (uintptr_t)e, base = (uintptr_t)r->buf;

	return r->buf && at >= base && at - base < r->cap;
}

static void held_free_all(struct replay_ring *r)
{
	while (r->held) {
		struct replay_held *h = r->held;

		r->held = h->next;
		free(h);
	}
}

/* Move the ring's first entry aside, after the others moved: 0 or -ENOMEM. */
static int held_take_first(struct replay_ring *r)
{
	struct replay_entry *e = replay_ring_first(r);
	uint64_t size = entry_size(e->len);
	struct replay_held *h = malloc(sizeof(*h) + size), **link = &r->held;

	if (!h)
		return -ENOMEM;
	h->next = NULL;
	memcpy(h->entry, e, size);
	while (*link)
		link = &(*link)->next;
	*link = h;
	replay_ring_pop(r);
	return 0;
}

void replay_ring_init(struct replay_ring *r, uint64_t max)
{
	*r = (struct replay_ring){ .max = max };
}

/* The ring's own entries only: the ones moved aside stay. */
static void ring_empty(struct replay_ring *r)
{
	r->head = r->tail = r->end = 0;
	r->wrapped = false;
	r->count = r->bytes = 0;
}

void replay_ring_clear(struct replay_ring *r)
{
	held_free_all(r);
	ring_empty(r);
}

void replay_ring_release(struct replay_ring *r)
{
	free(r->buf);
	r->buf = NULL;
	r->cap = 0;
	replay_ring_clear(r);
}

struct replay_entry *replay_ring_first(const struct replay_ring *r)
{
	return r->count ? entry_at(r, r->head) : NULL;
}

struct replay_entry *replay_ring_oldest(const struct replay_ring *r)
{
	return r->held ? held_entry(r->held) : replay_ring_first(r);
}

struct replay_entry *replay_ring_next(const struct replay_ring *r, const struct replay_entry *e)
{
	uint64_t off;

	if (!in_ring(r, e)) {
		const struct replay_held *h = (const struct replay_held *)(const void *)
			((const uint8_t *)e - offsetof(struct replay_held, entry));

		return h->next ? held_entry(h->next) : replay_ring_first(r);
	}
	off = (uint64_t)((const uint8_t *)e - r->buf) + entry_size(e->len);

	if (r->wrapped && off == r->end)
		off = 0;
	return off == r->tail ? NULL : entry_at(r, off);
}

void replay_ring_pop(struct replay_ring *r)
{
	uint64_t size = entry_size(entry_at(r, r->head)->len);

	r->head += size;
	r->bytes -= size;
	if (!--r->count) {
		ring_empty(r);
	} else if (r->wrapped && r->head == r->end) {
		r->head = 0;
		r->wrapped = false;
		r->end = r->tail;
	}
}

/* Where an entry of @size goes without growing, or false when it does not fit. */
static bool ring_place(struct replay_ring *r, uint64_t size, uint64_t *off)
{
	if (!r->count)
		ring_empty(r);
	if (r->wrapped) {
		if (r->head - r->tail < size)
			return false;
		*off = r->tail;
		r->tail += size;
		return true;
	}
	if (r->cap - r->tail >= size) {
		*off = r->tail;
		r->tail += size;
		r->end = r->tail;
		return true;
	}
	/* Past the end: from the start, up to the head. */
	if (r->head < size)
		return false;
	r->end = r->tail;
	r->wrapped = true;
	*off = 0;
	r->tail = size;
	return true;
}

/* A larger buffer, the entries in order from its start. 0 or -ENOMEM. */
static int ring_grow(struct replay_ring *r, uint64_t cap)
{
	uint8_t *buf = malloc(cap);
	uint64_t off = 0;

	if (!buf)
		return -ENOMEM;
	for (struct replay_entry *e = replay_ring_first(r); e; e = replay_ring_next(r, e)) {
		uint64_t size = entry_size(e->len);

		memcpy(buf + off, e, size);
		off += size;
	}
	free(r->buf);
	r->buf = buf;
	r->cap = cap;
	r->head = 0;
	r->tail = r->end = off;
	r->wrapped = false;
	return 0;
}

int replay_ring_push(struct replay_ring *r, uint64_t len, struct replay_entry **out)
{
	uint64_t size, off, cap;
	int ret;

	if (len > r->max || (size = entry_size(len)) > r->max)
		return -E2BIG;
	if (!ring_place(r, size, &off)) {
		if (r->bytes + size > r->max)
			return -ENOSPC;
		/* Doubled until the entries and this one fit, at most max. */
		cap = r->cap ? r->cap * 2 : RING_START_BYTES;
		while (cap < r->bytes + size)
			cap *= 2;
		if (cap > r->max)
			cap = r->max;
		/* At max already: the space left is split by the wrap. */
		if (cap <= r->cap)
			return -ENOSPC;
		ret = ring_grow(r, cap);
		if (ret)
			return ret;
		if (!ring_place(r, size, &off))
			return -ENOSPC;
	}
	*out = entry_at(r, off);
	(*out)->len = len;
	r->count++;
	r->bytes += size;
	return 0;
}

void replay_ring_trim(struct replay_ring *r, uint64_t durable, replay_waiting_fn waiting, void *arg)
{
	struct replay_entry *e;

	for (struct replay_held **link = &r->held; *link;) {
		struct replay_held *h = *link;

		if (waiting(held_entry(h)->seq, arg)) {
			link = &h->next;
			continue;
		}
		*link = h->next;
		free(h);
	}
	while ((e = replay_ring_first(r)) && e->seq <= durable) {
		if (!waiting(e->seq, arg))
			replay_ring_pop(r);
		else if (held_take_first(r))
			break;
	}
}

uint64_t replay_ring_append(struct replay_ring *r, const struct replay_request *q, uint64_t durable,
			    replay_waiting_fn waiting, void *arg)
{
	struct replay_entry *e, *oldest;
	uint64_t len = 0, lost = 0;
	int ret;

	for (int i = 0; i < q->niov; i++)
		len += q->iov[i].iov_len;
	replay_ring_trim(r, durable, waiting, arg);
	while ((ret = replay_ring_push(r, len, &e)) == -ENOSPC) {
		oldest = replay_ring_first(r);
		if (!oldest || oldest->seq <= durable)
			break;
		lost = oldest->seq;
		replay_ring_pop(r);
	}
	if (ret)
		return q->seq;
	e->seq = q->seq;
	e->call = q->call;
	e->no_reply = q->no_reply;
	len = 0;
	for (int i = 0; i < q->niov; i++) {
		memcpy(e->bytes + len, q->iov[i].iov_base, q->iov[i].iov_len);
		len += q->iov[i].iov_len;
	}
	return lost;
}
