/* Virtual handles: what the guest holds instead of the backend's real handles.
 *
 * A virtual handle is (kind << 56) | serial. Serials only grow, so a handle is
 * never reused within a session and a stale one is reported as invalid, never
 * mistaken for a newer object. The replayer recreates objects under the same
 * virtual handles, so the guest's handles outlive a restore.
 *
 * Not thread-safe: a session's table is used by its worker thread only. A
 * thread that runs beside dispatch (a snapshot's drain) is given copies of
 * what it needs, taken while dispatch is paused (checkpoint.c).
 */
#ifndef TERN_HANDLE_TABLE_H
#define TERN_HANDLE_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "wire.h"

/* The kinds are the wire protocol's (calls.tbl "kind" lines, generated
 * into wire_kinds.h): the guest sees them. HANDLE_<NAME> = WIRE_HANDLE_<NAME>. */
enum handle_kind {
#define HANDLE_KIND_ENTRY(id, name) HANDLE_##name = id,
	WIRE_HANDLE_KIND_LIST(HANDLE_KIND_ENTRY)
#undef HANDLE_KIND_ENTRY
	HANDLE_KIND_MAX = WIRE_HANDLE_KIND_MAX,
};

struct handle_entry {
	uint64_t handle;        /* 0 marks a free slot */
	enum handle_kind kind;
	void *real;             /* the backend's handle */
	uint64_t parent;        /* virtual handle of the owner, 0 if none */
	void *info;             /* kind-specific data owned by the executor */
};

struct handle_table;

int handle_table_create(struct handle_table **out);
void handle_table_destroy(struct handle_table *ht);

/* Issue a new handle for @real. 0 on success, -ENOMEM. */
int handle_table_add(struct handle_table *ht, enum handle_kind kind, void *real,
		     uint64_t parent, void *info, uint64_t *handle);
/* Insert under a given handle (restore); -EEXIST if taken. */
int handle_table_add_at(struct handle_table *ht, uint64_t handle, void *real,
			uint64_t parent, void *info);
/* The entry for @handle if it is live and of @kind, else NULL. The pointer is
 * valid until the next add or remove. */
struct handle_entry *handle_table_get(struct handle_table *ht, uint64_t handle,
				      enum handle_kind kind);
/* The live entry whose real handle is @real (reverse lookup), or NULL. */
struct handle_entry *handle_table_find_real(struct handle_table *ht,
					    enum handle_kind kind, const void *real);
void handle_table_remove(struct handle_table *ht, uint64_t handle);

/* Visit every live entry; stop early when @fn returns non-zero. */
int handle_table_foreach(struct handle_table *ht,
			 int (*fn)(struct handle_entry *e, void *arg), void *arg);
unsigned handle_table_count(const struct handle_table *ht);
/* Live entries of @kind: a look at every stream costs nothing while there is none. */
unsigned handle_table_count_kind(const struct handle_table *ht, enum handle_kind kind);
/* The serial the next handle of @kind gets; a restore sets it back so that the
 * guest's handles keep growing from where they were. */
uint64_t handle_table_next_serial(const struct handle_table *ht, enum handle_kind kind);
void handle_table_next_serial_set(struct handle_table *ht, enum handle_kind kind, uint64_t serial);

static inline enum handle_kind handle_kind_of(uint64_t handle)
{
	return (enum handle_kind)(handle >> WIRE_HANDLE_KIND_SHIFT);
}

#endif
