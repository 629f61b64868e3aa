/* Fuzz target for ckpt's JSON parser (cli/json.c): it reads ternd's control
 * replies, which a confused or hostile peer on the control socket could send.
 * Whatever parses must be walkable and freed without fault. */
#include <stdint.h>
#include <stddef.h>

#include "json.h"

static size_t json_walk(const struct json_value *v, unsigned depth)
{
	size_t n = 1;

	if (depth > JSON_DEPTH_MAX + 1)
		__builtin_trap();
	if (v->type == JSON_ARRAY || v->type == JSON_OBJECT)
		for (size_t i = 0; i < v->count; i++)
			n += json_walk(&v->items[i], depth + 1);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct json_value *v = NULL;

	if (json_parse((const char *)data, size, &v) == 0 && v) {
		json_walk(v, 0);
		json_member(v, "ok");
	}
	json_free(v);
	return 0;
}
