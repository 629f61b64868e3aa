/* Fuzz target for ternd's replies to the VM requests as the libvirt hook
 * and listener read them (libvirt-hooks/vm_request.h): whatever answers on
 * the control socket.  A refusal is always said with a reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vm_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vm_reply reply;
	char err[256];

	err[0] = 0;
	if (vm_reply_decode((const char *)data, size, &reply, err, sizeof(err))) {
		if (!err[0])
			abort();
		return 0;
	}
	if (!reply.ok && !reply.error[0])
		abort();
	return 0;
}
