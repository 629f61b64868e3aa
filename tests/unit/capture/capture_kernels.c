/* CPU version of the chunk hash kernel (replayer/checkpoint/kernels/chunk_hash.cu) for
 * the sim backend.  It walks the grid exactly as the GPU does (block ->
 * chunk and slice, grid-stride loop over 16-byte vectors, the tail by the
 * first thread of slice 0, one XOR/OR per block into the chunk's result),
 * so a launch with a wrong grid or wrong arguments gives hashes that differ
 * from snap_hash_device() and the capture tests fail. */
#include <string.h>

#include "sim_kernel.h"
#include "snap_hash.h"

static void chunk_hash(const struct sim_launch *l)
{
	const uint8_t *base = SIM_ARG(l, 0, const uint8_t *);
	uint64_t size = SIM_ARG(l, 1, uint64_t);
	uint32_t cs = SIM_ARG(l, 2, uint32_t);
	uint32_t bpc = SIM_ARG(l, 3, uint32_t);
	uint64_t *hash_out = SIM_ARG(l, 4, uint64_t *);
	uint32_t *nonzero_out = SIM_ARG(l, 5, uint32_t *);
	uint32_t bdim = l->block.x;

	for (uint64_t b = 0; b < l->grid.x; b++) {
		uint64_t chunk = b / bpc, slice = b % bpc, start = chunk * cs;
		uint64_t len = size - start < cs ? size - start : cs, nvec = len / 16;
		uint64_t bh = 0, bnz = 0;

		for (uint32_t t = 0; t < bdim; t++) {
			for (uint64_t i = slice * bdim + t; i < nvec; i += (uint64_t)bpc * bdim) {
				uint64_t x[2];

				memcpy(x, base + start + i * 16, 16);
				bh ^= snap_hash_word(x[0], 2 * i) ^ snap_hash_word(x[1], 2 * i + 1);
				bnz |= x[0] | x[1];
			}
		}
		if (slice == 0 && len % 16) {
			uint64_t w[2] = { 0, 0 };
			uint32_t rest = (uint32_t)(len % 16);

			for (uint32_t k = 0; k < rest; k++)
				w[k / 8] |= (uint64_t)base[start + nvec * 16 + k] << (8 * (k % 8));
			bh ^= snap_hash_word(w[0], 2 * nvec);
			if (rest > 8)
				bh ^= snap_hash_word(w[1], 2 * nvec + 1);
			bnz |= w[0] | w[1];
		}
		hash_out[chunk] ^= bh;
		if (bnz)
			nonzero_out[chunk] |= 1;
	}
}

SIM_KERNELS_BEGIN
	SIM_KERNEL("tern_chunk_hash", chunk_hash),
SIM_KERNELS_END
