/* Fuzz target for the control plane's reply decoder (common/control_msg.h):
 * text a confused or hostile peer could send on the control socket or the
 * worker's line channel. What decodes must encode, and encoding what that
 * decodes to must give the same text again (one form only). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control_msg.h"

/* The first byte picks the request the reply answers (each op's reply kind
 * has its own table). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct control_reply a, b;
	char err[256], *one = NULL, *two = NULL;
	size_t n1 = 0, n2 = 0;
	enum control_op op;

	if (size < 1)
		return 0;
	op = (enum control_op)(CONTROL_OP_STATUS + data[0] % CONTROL_OP_LAST);
	if (control_reply_decode((const char *)data + 1, size - 1, op, &a, err, sizeof(err))) {
		control_reply_release(&a);
		return 0;
	}
	if (control_reply_encode(&a, &one, &n1) ||
	    control_reply_decode(one, n1, op, &b, err, sizeof(err)) ||
	    control_reply_encode(&b, &two, &n2) || n1 != n2 || memcmp(one, two, n1))
		abort();
	control_reply_release(&a);
	control_reply_release(&b);
	free(one);
	free(two);
	return 0;
}
