/* The shim's replay log storage: requests as sent, in one ring buffer.
 *
 * Entries are appended at the tail, contiguously (an entry never wraps:
 * one that does not fit before the buffer's end goes to its start, the
 * space left at the end unused until the head passes it), and leave only
 * from the head, in order: no allocation per entry. The buffer starts
 * small and doubles when an entry does not fit, up to @max bytes, entry
 * headers included; past that room is made by dropping the head:
 * replay_ring_append's rules (durable entries go, others are evicted). A
 * durable entry still waiting for its reply is moved aside, in order,
 * before the ring's entries, until its reply comes: the only allocation.
 *
 * Not thread-safe: the shim calls it under conn_lock. Entries returned are
 * valid until the next push, pop or clear.
 */
#ifndef TERN_SHIM_REPLAY_RING_H
#define TERN_SHIM_REPLAY_RING_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

/* One request as sent: header and payload, flattened. */
struct replay_entry {
	uint64_t seq;
	uint32_t call;
	uint32_t no_reply;      /* deferred: the worker sends no reply */
	uint64_t len;
	uint8_t bytes[];
};

/* A durable request still waiting for its reply, moved out of the ring so
 * that the ones after it can go (rare: a synchronisation in flight across
 * a snapshot). */
struct replay_held;

struct replay_ring {
	struct replay_held *held;       /* oldest first; all before the ring's entries */
	uint8_t *buf;
	uint64_t cap;           /* bytes of buf */
	uint64_t max;           /* cap grows up to it */
	uint64_t head, tail;    /* the first entry; where the next goes */
	uint64_t end;           /* wrapped: where the entries before the buffer's start end */
	bool wrapped;           /* entries lie in [head, end) then [0, tail) */
	uint64_t count;
	uint64_t bytes;         /* of the entries, headers included */
};

/* An empty ring of at most @max bytes; nothing allocated before the first push. */
void replay_ring_init(struct replay_ring *r, uint64_t max);
/* Drop every entry; the buffer is kept. */
void replay_ring_clear(struct replay_ring *r);
/* Drop every entry and free the buffer (the ring stays usable). */
void replay_ring_release(struct replay_ring *r);
/* A new last entry with room for @len payload bytes (its seq, call,
 * no_reply and bytes are the caller's to fill): 0 with *@out set;
 * -E2BIG when it can never fit (larger than max), -ENOSPC when it does not
 * fit now (drop the head and try again), -ENOMEM. */
int replay_ring_push(struct replay_ring *r, uint64_t len, struct replay_entry **out);
/* The first (oldest) entry in the ring, or NULL when it is empty. */
struct replay_entry *replay_ring_first(const struct replay_ring *r);
/* Drop the ring's first entry (the ring must not be empty). */
void replay_ring_pop(struct replay_ring *r);
/* Every logged entry in order, the ones moved aside first: the oldest, and
 * the one after @e; NULL at the end. */
struct replay_entry *replay_ring_oldest(const struct replay_ring *r);
struct replay_entry *replay_ring_next(const struct replay_ring *r, const struct replay_entry *e);

/* The log's rules, over the ring. */
struct replay_request {
	uint64_t seq;
	uint32_t call;
	bool no_reply;
	const struct iovec *iov;
	int niov;
};
/* Whether the request of @seq still waits for its reply (@arg: the caller's). */
typedef bool (*replay_waiting_fn)(uint64_t seq, void *arg);
/* Entries up to @durable leave from the head; one still waiting
 * (@waiting) is moved aside, to be sent again after a restore (kept in the
 * ring when that allocation fails), and the ones moved aside go once their
 * replies came. */
void replay_ring_trim(struct replay_ring *r, uint64_t durable, replay_waiting_fn waiting, void *arg);
/* Trim, then log @q last. When it does not fit, the oldest entries that
 * are not durable are evicted until it does; when @q can never fit (or
 * memory runs out), it is not kept. Returns the largest sequence number so lost (a restore before it
 * cannot continue), or 0 when nothing was. */
uint64_t replay_ring_append(struct replay_ring *r, const struct replay_request *q, uint64_t durable,
			    replay_waiting_fn waiting, void *arg);

#endif
