/* Fuzz target for what a snapshot keeps of an OpenCL session
 * (common/cl_saved.h): objects' descriptions and the session's part, which
 * a restore and `ckpt inspect` read from a snapshot's journal. Whatever
 * decodes must re-encode to exactly the same bytes (one form only). The
 * first byte says which decoder reads the rest. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cl_saved.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf;
	size_t len;

	if (!size)
		return 0;
	if (data[0] & 1) {
		struct cl_saved_session s;

		if (cl_saved_session_decode(data + 1, size - 1, &s, NULL))
			return 0;
		if (cl_saved_session_encode(&s, &buf, &len) || len != size - 1 || memcmp(buf, data + 1, len))
			abort();
		free(buf);
		return 0;
	}
	{
		struct cl_saved s;
		const char *why = NULL;

		if (cl_saved_decode(data + 1, size - 1, &s, &why))
			return 0;
		if (cl_saved_encode(&s, &buf, &len) || len != size - 1 || memcmp(buf, data + 1, len))
			abort();
		for (uint32_t i = 0; i < s.count; i++)
			if (s.entries[i].payload + s.entries[i].len > data + size)
				abort();
		free(buf);
		cl_saved_release(&s);
	}
	return 0;
}
