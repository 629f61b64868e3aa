/* Fuzz target for the generated record decoders (calls.tbl, "records"):
 * the blobs of launch attributes, kernel parameter layouts, occupancy
 * queries, texture descriptions ... that the worker decodes from a hostile
 * guest and the shim from the worker. The first byte picks the record; the
 * rest is a blob of them. Every record that decodes must encode back to the
 * same bytes (one form only). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "wire_calls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (wire_record_check(data[0] % WIRE_REC_COUNT, data + 1, size - 1) == -EILSEQ)
		abort();
	return 0;
}
