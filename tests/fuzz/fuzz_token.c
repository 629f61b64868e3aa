/* Fuzz target for the token file's parser (common/auth.h): any bytes a file
 * could hold. What it accepts must follow every rule, and be the input less
 * at most one final newline. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct auth_token t;
	const char *why;
	size_t want;

	if (auth_token_parse(data, size, &t, &why)) {
		if (!why)
			abort();
		return 0;
	}
	want = size && data[size - 1] == '\n' ? size - 1 : size;
	if (t.len != want || t.len < AUTH_TOKEN_MIN || t.len > AUTH_TOKEN_MAX || memcmp(t.bytes, data, t.len) ||
	    memchr(t.bytes, 0, t.len) || memchr(t.bytes, '\n', t.len) || memchr(t.bytes, '\r', t.len) ||
	    t.bytes[0] == ' ' || t.bytes[t.len - 1] == ' ' || t.bytes[0] == '\t' || t.bytes[t.len - 1] == '\t')
		abort();
	return 0;
}
