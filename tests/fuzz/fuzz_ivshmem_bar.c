/* Fuzz target for the ivshmem BAR's header parser (common/ivshmem_bar.h):
 * the first 8 bytes are the BAR's size (little-endian), the rest the header
 * copy as a hostile guest may have left it. What it accepts must describe
 * slots inside the BAR, after the header, none overlapping another, each
 * re-encoding to the bytes it came from. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ivshmem_bar.h"
#include "le.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ivshmem_slot slots[IVSHMEM_SLOTS_MAX];
	struct ivshmem_layout l, planned;
	uint8_t entry[IVSHMEM_SLOT_ENTRY];
	uint64_t bar;

	if (size < 8)
		return 0;
	bar = le64_get(data);
	if (ivshmem_header_parse(data + 8, size - 8, bar, &l, slots))
		return 0;
	if (l.bar_bytes != bar || !l.slot_count || l.slot_count > IVSHMEM_SLOTS_MAX ||
	    ivshmem_layout_plan(bar, l.slot_bytes, &planned) || planned.slot_count < l.slot_count)
		abort();
	for (uint32_t i = 0; i < l.slot_count; i++) {
		uint64_t at;
		uint32_t index;

		if (slots[i].offset < IVSHMEM_HEADER_BYTES || slots[i].bytes > bar ||
		    slots[i].offset > bar - slots[i].bytes ||
		    !ivshmem_range_in_slot(&l, slots[i].offset, slots[i].bytes, &index) || index != i)
			abort();
		if (i && slots[i].offset < slots[i - 1].offset + slots[i - 1].bytes)
			abort();
		if (slots[i].state == IVSHMEM_SLOT_CLAIMED && !ivshmem_ring_bytes_fit(&l, slots[i].ring_bytes))
			abort();
		at = ivshmem_slot_entry_encode(&l, i, slots[i].state, slots[i].ring_bytes, entry);
		if (memcmp(entry, data + 8 + at, sizeof(entry)))
			abort();
	}
	return 0;
}
