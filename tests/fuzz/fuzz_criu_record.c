/* Fuzz target for the images folder's record of its GPU snapshots
 * (criu/criu_record.h): a file anyone who can write the images folder
 * controls. What decodes must encode to the same bytes (one form only). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "criu_record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct criu_record r;
	static uint8_t out[CRIU_RECORD_SIZE_MAX];
	char err[256];
	int n;

	if (criu_record_decode(data, size, &r, err, sizeof(err)))
		return 0;
	n = criu_record_encode(&r, out, sizeof(out));
	if (n < 0 || (size_t)n != size || memcmp(out, data, size))
		abort();
	return 0;
}
