/* Fuzz target for a libvirt domain's record in ternd's state directory
 * (snapshot/snap_vm.h).
 *
 * Input: as fuzz_record.h says.  What decodes must hold only
 * what the encoder accepts and encode back to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_record.h"
#include "snap_vm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct snap_vm_domain d;
	struct snap_buf again = { 0 };
	uint8_t *buf;

	buf = fuzz_record_copy(data, size, &size);
	if (!buf)
		return 0;
	if (snap_vm_domain_decode(buf, size, &d) == 0 &&
	    (snap_vm_domain_encode(&d, &again) || again.len != size || memcmp(again.data, buf, size)))
		abort();
	snap_vm_domain_release(&d);
	snap_buf_free(&again);
	free(buf);
	return 0;
}
