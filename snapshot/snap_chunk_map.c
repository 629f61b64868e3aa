/* Open-addressing table from content hash to pack location.  The hash is
 * already uniform (XXH3-128), so its low bits pick the slot. */
#include "snap_internal.h"
#include "le.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void snap_chunk_map_init(struct snap_chunk_map *m)
{
	memset(m, 0, sizeof(*m));
}

void snap_chunk_map_free(struct snap_chunk_map *m)
{
	if (!m)
		return;
	free(m->slots);
	memset(m, 0, sizeof(*m));
}

static uint64_t slot_of(const uint8_t hash[SNAP_HASH_BYTES], uint64_t cap)
{
	return le64_get(hash) & (cap - 1);
}

struct snap_chunk_loc *snap_chunk_map_find(const struct snap_chunk_map *m,
					   const uint8_t hash[SNAP_HASH_BYTES])
{
	if (!m->cap)
		return NULL;
	for (uint64_t i = slot_of(hash, m->cap);; i = (i + 1) & (m->cap - 1)) {
		struct snap_chunk_loc *l = &m->slots[i];
		if (!l->state)
			return NULL;
		if (!memcmp(l->hash, hash, SNAP_HASH_BYTES))
			return l;
	}
}

static int map_grow(struct snap_chunk_map *m)
{
	uint64_t cap = m->cap ? m->cap * 2 : 1024;
	struct snap_chunk_loc *slots = calloc(cap, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (uint64_t i = 0; i < m->cap; i++) {
		struct snap_chunk_loc *l = &m->slots[i];
		uint64_t j;
		if (!l->state)
			continue;
		for (j = slot_of(l->hash, cap); slots[j].state; j = (j + 1) & (cap - 1))
			;
		slots[j] = *l;
	}
	free(m->slots);
	m->slots = slots;
	m->cap = cap;
	return 0;
}

int snap_chunk_map_insert(struct snap_chunk_map *m, const uint8_t hash[SNAP_HASH_BYTES],
			  struct snap_chunk_loc **loc)
{
	struct snap_chunk_loc *l = snap_chunk_map_find(m, hash);
	uint64_t i;

	if (l) {
		*loc = l;
		return 0;
	}
	/* Keep the load under 1/2 so probes stay short. */
	if ((m->count + 1) * 2 > m->cap) {
		int rc = map_grow(m);
		if (rc)
			return rc;
	}
	for (i = slot_of(hash, m->cap); m->slots[i].state; i = (i + 1) & (m->cap - 1))
		;
	l = &m->slots[i];
	memset(l, 0, sizeof(*l));
	memcpy(l->hash, hash, SNAP_HASH_BYTES);
	/* Mark the slot used at once; callers set the real state. */
	l->state = SNAP_LOC_PENDING;
	m->count++;
	*loc = l;
	return 1;
}
