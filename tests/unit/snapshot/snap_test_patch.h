/* For the tests of the state directory's records (test_snap_sessions.c,
 * test_snap_vm.c): change one field of an encoded record and re-seal it, so
 * that the decoder's structure checks, not its checksum, must refuse it. */
#ifndef TERN_SNAP_TEST_PATCH_H
#define TERN_SNAP_TEST_PATCH_H

#include <stddef.h>
#include <stdint.h>

#include "le.h"
#include "snap_format.h"

/* One hostile change: @width bytes (4, 2 or 1) at @off become @v. */
struct record_patch {
	size_t off;
	uint32_t v;
	int width;
	int want;       /* what the decoder must answer */
};

static inline void record_patch_apply(uint8_t *p, size_t len, const struct record_patch *c)
{
	if (c->width == 4)
		le32_put(p + c->off, c->v);
	else if (c->width == 2)
		le16_put(p + c->off, (uint16_t)c->v);
	else
		p[c->off] = (uint8_t)c->v;
	snap_hash128(p, len - SNAP_TRAILER_BYTES, p + len - SNAP_TRAILER_BYTES);
}

#endif
