/* Shared by checkpoint.c (snapshot, restore) and checkpoint_prefill.c (a
 * migration's prepared worker); not for callers. */
#ifndef TERN_CHECKPOINT_INTERNAL_H
#define TERN_CHECKPOINT_INTERNAL_H

#include "checkpoint.h"

struct snap_chunk_list;
struct snap_region;
struct tracker;

/* The session's data path, opened at first use in device 0's context. */
int checkpoint_capture_get(struct checkpoint *ck, struct capture **out);

/* ck->held: the region prepared at @addr of @size, or NULL. */
const struct snap_region *checkpoint_held_find(const struct checkpoint *ck, uint64_t addr, uint64_t size);
/* Unmap the prepared regions that snapshot @cl (journal @saved) does not
 * have at the same address and size: 0, or -EIO. */
int checkpoint_held_trim(struct checkpoint *ck, struct tracker *saved, const struct snap_chunk_list *cl);
/* Forget what is prepared (the memory stays mapped: the session's now). */
void checkpoint_held_free(struct checkpoint *ck);

#endif
