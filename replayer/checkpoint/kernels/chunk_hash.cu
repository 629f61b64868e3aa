// The chunk device hash on the GPU; snapshot/snap_hash.h defines it and
// holds the CPU reference, which this must match bit for bit.
//
// One launch per region.  Block b works on chunk b / blocks_per_chunk, on
// the slice b % blocks_per_chunk of it: a grid-stride loop over that chunk's
// 16-byte vectors, so each block reads a contiguous, aligned stream (HBM
// speed).  Each thread XORs its words' terms; the block reduces with warp
// shuffles and shared memory, then one atomicXor / atomicOr per block lands
// in the chunk's result.  The caller zeroes the results first and XORs the
// chunk length in on the host.
#include <stdint.h>

#define HASH_GOLDEN 0x9E3779B97F4A7C15ull
#define HASH_THREADS 256

__device__ __forceinline__ unsigned long long fmix64(unsigned long long k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9f2fe1a85ecull;
	k ^= k >> 33;
	return k;
}

extern "C" __global__ void __launch_bounds__(HASH_THREADS)
tern_chunk_hash(const unsigned char *base, unsigned long long size, unsigned int chunk_size,
		unsigned int blocks_per_chunk, unsigned long long *hash_out,
		unsigned int *nonzero_out)
{
	__shared__ unsigned long long s_hash[HASH_THREADS / 32];
	__shared__ unsigned int s_nz[HASH_THREADS / 32];
	unsigned long long chunk = blockIdx.x / blocks_per_chunk;
	unsigned int slice = blockIdx.x % blocks_per_chunk;
	unsigned long long start = chunk * chunk_size;
	unsigned long long len = size - start < chunk_size ? size - start : chunk_size;
	unsigned long long nvec = len / 16;
	const ulonglong2 *v = (const ulonglong2 *)(base + start);
	unsigned long long h = 0, nz = 0;

	for (unsigned long long i = (unsigned long long)slice * blockDim.x + threadIdx.x; i < nvec;
	     i += (unsigned long long)blocks_per_chunk * blockDim.x) {
		ulonglong2 x = __ldg(&v[i]);
		h ^= fmix64(x.x ^ (2 * i) * HASH_GOLDEN);
		h ^= fmix64(x.y ^ (2 * i + 1) * HASH_GOLDEN);
		nz |= x.x | x.y;
	}
	// The last 1..15 bytes of a short chunk, zero-padded to whole words.
	if (slice == 0 && threadIdx.x == 0 && len % 16) {
		const unsigned char *t = base + start + nvec * 16;
		unsigned long long w[2] = { 0, 0 };
		unsigned int rest = (unsigned int)(len % 16);

		for (unsigned int b = 0; b < rest; b++)
			w[b / 8] |= (unsigned long long)t[b] << (8 * (b % 8));
		h ^= fmix64(w[0] ^ (2 * nvec) * HASH_GOLDEN);
		if (rest > 8)
			h ^= fmix64(w[1] ^ (2 * nvec + 1) * HASH_GOLDEN);
		nz |= w[0] | w[1];
	}
	for (int off = 16; off > 0; off /= 2) {
		h ^= __shfl_xor_sync(0xffffffffu, h, off);
		nz |= __shfl_xor_sync(0xffffffffu, nz, off);
	}
	if ((threadIdx.x & 31) == 0) {
		s_hash[threadIdx.x / 32] = h;
		s_nz[threadIdx.x / 32] = nz != 0;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		h = 0;
		unsigned int any = 0;
		for (unsigned int wi = 0; wi < blockDim.x / 32; wi++) {
			h ^= s_hash[wi];
			any |= s_nz[wi];
		}
		atomicXor(&hash_out[chunk], h);
		if (any)
			atomicOr(&nonzero_out[chunk], 1u);
	}
}
