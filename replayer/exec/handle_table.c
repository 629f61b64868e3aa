#include "handle_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Open addressing with linear probing; tombstones keep probe chains intact. */
#define TOMBSTONE UINT64_MAX

struct handle_table {
	struct handle_entry *slots;
	unsigned cap;           /* power of two */
	unsigned live, used;    /* used counts tombstones too */
	unsigned live_of[HANDLE_KIND_MAX];
	uint64_t next_serial[HANDLE_KIND_MAX];
};

static uint64_t hash64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

int handle_table_create(struct handle_table **out)
{
	struct handle_table *ht = calloc(1, sizeof(*ht));

	if (!ht)
		return -ENOMEM;
	ht->cap = 256;
	ht->slots = calloc(ht->cap, sizeof(*ht->slots));
	if (!ht->slots) {
		free(ht);
		return -ENOMEM;
	}
	for (unsigned k = 0; k < HANDLE_KIND_MAX; k++)
		ht->next_serial[k] = 1;
	*out = ht;
	return 0;
}

void handle_table_destroy(struct handle_table *ht)
{
	if (!ht)
		return;
	free(ht->slots);
	free(ht);
}

static struct handle_entry *slot_find(struct handle_table *ht, uint64_t handle)
{
	unsigned mask = ht->cap - 1;

	for (unsigned i = (unsigned)hash64(handle) & mask, n = 0; n < ht->cap; i = (i + 1) & mask, n++) {
		struct handle_entry *e = &ht->slots[i];

		if (e->handle == 0)
			return NULL;
		if (e->handle == handle)
			return e;
	}
	return NULL;
}

static int table_grow(struct handle_table *ht)
{
	struct handle_entry *old = ht->slots;
	unsigned old_cap = ht->cap;
	unsigned cap = ht->live * 4 >= old_cap ? old_cap * 2 : old_cap;
	struct handle_entry *slots = calloc(cap, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	ht->slots = slots;
	ht->cap = cap;
	ht->used = ht->live;
	for (unsigned i = 0; i < old_cap; i++) {
		if (old[i].handle && old[i].handle != TOMBSTONE) {
			unsigned j = (unsigned)hash64(old[i].handle) & (cap - 1);

			while (slots[j].handle)
				j = (j + 1) & (cap - 1);
			slots[j] = old[i];
		}
	}
	free(old);
	return 0;
}

int handle_table_add_at(struct handle_table *ht, uint64_t handle, void *real,
			uint64_t parent, void *info)
{
	enum handle_kind kind = handle_kind_of(handle);
	unsigned mask, i;

	if (kind <= 0 || kind >= HANDLE_KIND_MAX || handle == TOMBSTONE)
		return -EINVAL;
	if (slot_find(ht, handle))
		return -EEXIST;
	if ((ht->used + 1) * 4 > ht->cap * 3 && table_grow(ht))
		return -ENOMEM;
	mask = ht->cap - 1;
	for (i = (unsigned)hash64(handle) & mask; ht->slots[i].handle && ht->slots[i].handle != TOMBSTONE;
	     i = (i + 1) & mask)
		;
	if (!ht->slots[i].handle)
		ht->used++;
	ht->slots[i] = (struct handle_entry){ handle, kind, real, parent, info };
	ht->live++;
	ht->live_of[kind]++;
	if ((handle & ((1ull << 56) - 1)) >= ht->next_serial[kind])
		ht->next_serial[kind] = (handle & ((1ull << 56) - 1)) + 1;
	return 0;
}

int handle_table_add(struct handle_table *ht, enum handle_kind kind, void *real,
		     uint64_t parent, void *info, uint64_t *handle)
{
	uint64_t h;
	int ret;

	if (kind <= 0 || kind >= HANDLE_KIND_MAX)
		return -EINVAL;
	h = (uint64_t)kind << 56 | ht->next_serial[kind];
	ret = handle_table_add_at(ht, h, real, parent, info);
	if (!ret)
		*handle = h;
	return ret;
}

struct handle_entry *handle_table_get(struct handle_table *ht, uint64_t handle,
				      enum handle_kind kind)
{
	struct handle_entry *e;

	if (handle_kind_of(handle) != kind || handle == TOMBSTONE)
		return NULL;
	e = slot_find(ht, handle);
	return e && e->kind == kind ? e : NULL;
}

struct handle_entry *handle_table_find_real(struct handle_table *ht,
					    enum handle_kind kind, const void *real)
{
	for (unsigned i = 0; i < ht->cap; i++) {
		struct handle_entry *e = &ht->slots[i];

		if (e->handle && e->handle != TOMBSTONE && e->kind == kind && e->real == real)
			return e;
	}
	return NULL;
}

void handle_table_remove(struct handle_table *ht, uint64_t handle)
{
	struct handle_entry *e = slot_find(ht, handle);

	if (!e)
		return;
	ht->live_of[e->kind]--;
	memset(e, 0, sizeof(*e));
	e->handle = TOMBSTONE;
	ht->live--;
}

int handle_table_foreach(struct handle_table *ht,
			 int (*fn)(struct handle_entry *e, void *arg), void *arg)
{
	for (unsigned i = 0; i < ht->cap; i++) {
		struct handle_entry *e = &ht->slots[i];
		int ret;

		if (!e->handle || e->handle == TOMBSTONE)
			continue;
		ret = fn(e, arg);
		if (ret)
			return ret;
	}
	return 0;
}

unsigned handle_table_count(const struct handle_table *ht)
{
	return ht->live;
}

unsigned handle_table_count_kind(const struct handle_table *ht, enum handle_kind kind)
{
	return kind > 0 && kind < HANDLE_KIND_MAX ? ht->live_of[kind] : 0;
}

uint64_t handle_table_next_serial(const struct handle_table *ht, enum handle_kind kind)
{
	return kind > 0 && kind < HANDLE_KIND_MAX ? ht->next_serial[kind] : 0;
}

void handle_table_next_serial_set(struct handle_table *ht, enum handle_kind kind, uint64_t serial)
{
	if (kind > 0 && kind < HANDLE_KIND_MAX && serial > ht->next_serial[kind])
		ht->next_serial[kind] = serial;
}
