/* Fuzz target for the sessions file decoder (snapshot/snap_sessions.h).
 *
 * Input: one flags byte, then the bytes of a file.  Flag bit 0 re-seals the
 * XXH3-128 trailer over the mutated bytes first, so mutations get past the
 * checksum and reach the structure checks behind it; bits 1-7 are the
 * caller's entry limit.  A decoded list must hold only what the encoder
 * accepts, and encode back to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_record.h"
#include "snap_sessions.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct snap_session *v = NULL;
	struct snap_buf again = { 0 };
	uint32_t n = 0, max;
	uint8_t *buf;

	buf = fuzz_record_copy(data, size, &size);
	if (!buf)
		return 0;
	max = data[0] >> 1;
	if (snap_sessions_decode(buf, size, max, &v, &n) == 0) {
		if (n > max || (n && !v))
			abort();
		if (snap_sessions_encode(v, n, &again) || again.len != size || memcmp(again.data, buf, size))
			abort();
	} else if (v || n) {
		abort();
	}
	snap_buf_free(&again);
	free(v);
	free(buf);
	return 0;
}
