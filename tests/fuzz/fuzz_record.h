/* For the fuzz targets of the state directory's records (fuzz_sessions.c,
 * fuzz_vm_domain.c): input is one flags byte, then a record. */
#ifndef TERN_FUZZ_RECORD_H
#define TERN_FUZZ_RECORD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "snap_format.h"

/* A malloc'd copy of the record after the flags byte in *buf, its length in
 * *len; NULL when there is none.  Flag bit 0 re-seals the XXH3-128 trailer
 * over the mutated bytes, so that mutations get past the checksum and reach
 * the structure checks behind it. */
static inline uint8_t *fuzz_record_copy(const uint8_t *data, size_t size, size_t *len)
{
	uint8_t *buf;

	if (size < 1 || !(buf = malloc(size)))
		return NULL;
	memcpy(buf, data + 1, size - 1);
	*len = size - 1;
	if ((data[0] & 1) && *len >= SNAP_TRAILER_BYTES)
		snap_hash128(buf, *len - SNAP_TRAILER_BYTES, buf + *len - SNAP_TRAILER_BYTES);
	return buf;
}

#endif
