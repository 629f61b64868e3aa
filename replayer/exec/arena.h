/* The session's device-memory arena: one virtual address range, reserved at
 * a fixed address, out of which every device allocation of the session comes.
 *
 * Because the range is fixed, a restore in a new process (or on another GPU)
 * maps the same addresses again, and device pointers held by the guest, in
 * kernel arguments or inside device memory stay valid. Physical memory is
 * created and mapped per allocation with the backend's VMM entries
 * (cuMemCreate + cuMemMap + cuMemSetAccess); sizes are rounded up to the
 * allocation granularity.
 *
 * Not thread-safe: used by the session's worker thread.
 */
#ifndef TERN_ARENA_H
#define TERN_ARENA_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

struct arena_alloc {
	uint64_t addr;
	uint64_t size;          /* as asked */
	uint64_t mapped;        /* rounded to the granularity */
	uint64_t id;            /* buffer id, unique in the session */
	CUmemGenericAllocationHandle mem;
	bool imported;          /* another session's memory (IPC): not counted as mapped */
};

struct arena;

/* Reserve [base, base + size) on @device. Fails with -EADDRINUSE if the
 * backend cannot give exactly that range. */
int arena_open(struct backend *be, CUdevice device, uint64_t base, uint64_t size,
	       struct arena **out);
/* Unmap and release everything, then the reservation. Accepts NULL. */
void arena_close(struct arena *a);

/* Allocate @size bytes; CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY (no space in the
 * arena or on the device) or the backend's error. */
CUresult arena_alloc(struct arena *a, uint64_t size, uint64_t *addr);
/* Allocate at a given address (restore). */
CUresult arena_alloc_at(struct arena *a, uint64_t addr, uint64_t size);
/* Free the allocation that starts at @addr; CUDA_ERROR_INVALID_VALUE if none. */
CUresult arena_free(struct arena *a, uint64_t addr);

/* The allocation containing @addr, or NULL. Valid until the next alloc/free. */
const struct arena_alloc *arena_find(const struct arena *a, uint64_t addr);
/* True if [addr, addr + len) lies inside one live allocation. */
bool arena_range_valid(const struct arena *a, uint64_t addr, uint64_t len);

/* IPC: a POSIX fd for the allocation that starts at @addr (the caller
 * closes it): 0, -ENOENT (no such allocation, or an imported one), -ENOTSUP
 * (the backend cannot export) or -EIO. */
int arena_export_fd(struct arena *a, uint64_t addr, int *fd);
/* Map memory exported by another process (@fd stays the caller's) in a free
 * range; freed with arena_free like the rest. */
CUresult arena_import_fd(struct arena *a, int fd, uint64_t size, uint64_t *addr);
bool arena_exportable(const struct arena *a);
/* Give device @peer read/write access to every mapping, now and later. */
CUresult arena_peer_add(struct arena *a, CUdevice peer);

uint64_t arena_base(const struct arena *a);
uint64_t arena_size(const struct arena *a);
/* Bytes of device memory mapped (rounded sizes). */
uint64_t arena_bytes_mapped(const struct arena *a);
unsigned arena_count(const struct arena *a);
const struct arena_alloc *arena_at(const struct arena *a, unsigned i);

#endif
