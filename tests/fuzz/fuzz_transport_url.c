/* Fuzz target for the transport URL parser (common/transport.h): TERN_SERVER
 * and --listen come from whoever configures a guest or ternd. What it
 * accepts must fit its fields and read back the same once formatted. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct transport_url u, again;
	char text[1024], out[1024];

	if (size >= sizeof(text))
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	if (transport_url_parse(text, &u))
		return 0;
	if (memchr(u.path, 0, sizeof(u.path)) == NULL || memchr(u.host, 0, sizeof(u.host)) == NULL)
		abort();
	if (transport_url_is_tcp(&u) && (!u.host[0] || !u.port || u.port > 65535 || strpbrk(u.host, "[]")))
		abort();
	if (transport_url_needs_token(&u) != transport_url_is_tcp(&u))
		abort();
	transport_url_format(&u, out, sizeof(out));
	if (transport_url_parse(out, &again) || again.kind != u.kind || again.port != u.port || again.cid != u.cid ||
	    strcmp(again.host, u.host) || strcmp(again.path, u.path))
		abort();
	return 0;
}
