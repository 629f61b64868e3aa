/* Fuzz target for the control plane's request decoder (common/control_msg.h):
 * text a confused or hostile peer could send on the control socket or the
 * worker's line channel. What decodes must encode, and encoding what that
 * decodes to must give the same text again (one form only). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct control_request a, b;
	char err[256], *one = NULL, *two = NULL;
	size_t n1 = 0, n2 = 0;

	if (control_request_decode((const char *)data, size, &a, err, sizeof(err)))
		return 0;
	if (control_request_encode(&a, &one, &n1) ||
	    control_request_decode(one, n1, &b, err, sizeof(err)) ||
	    control_request_encode(&b, &two, &n2) || n1 != n2 || memcmp(one, two, n1))
		abort();
	free(one);
	free(two);
	return 0;
}
