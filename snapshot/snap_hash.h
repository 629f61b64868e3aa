/* The chunk device hash: the change-detection hash computed where the
 * memory lives (a CUDA kernel in replayer/checkpoint/kernels/, the CPU on sim) and
 * recorded as snap_chunk_ref.device_hash.  This file is its CPU reference;
 * the kernel must give the same value for the same bytes.
 *
 * For a chunk of len bytes, zero-padded to a multiple of 8, read as 64-bit
 * little-endian words w_i (i = 0, 1, ...):
 *
 *     h = XOR over i of fmix64(w_i ^ (i * 0x9E3779B97F4A7C15))
 *     device_hash = h ^ len          (len: the unpadded byte count)
 *     zero        = every w_i == 0
 *
 * fmix64 is MurmurHash3's 64-bit finalizer.  The XOR makes the value
 * independent of the order words are combined in, so a GPU grid reduces it
 * in any order; the index term makes it depend on where each word sits.
 * It is not a content hash (the store uses XXH3-128 for that): it only
 * tells "changed since the parent" with a 2^-64 chance of a miss per chunk.
 *
 * Pure functions, safe from any thread.
 */
#ifndef TERN_SNAP_HASH_H
#define TERN_SNAP_HASH_H

#include <stdbool.h>
#include <stdint.h>

#define SNAP_HASH_GOLDEN 0x9E3779B97F4A7C15ull

static inline uint64_t snap_hash_fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9f2fe1a85ecull;
	k ^= k >> 33;
	return k;
}

/* One word's term: w at word index i of its chunk. */
static inline uint64_t snap_hash_word(uint64_t w, uint64_t i)
{
	return snap_hash_fmix64(w ^ (i * SNAP_HASH_GOLDEN));
}

/* XOR of the terms of the @nbytes bytes at @p (any length: a short tail is
 * zero-padded), whose first byte is byte 8 * @first_word of its chunk.
 * *@nonzero receives the OR of the words.  Partial sums of disjoint word
 * ranges XOR together into the chunk's h. */
uint64_t snap_hash_words(const void *p, uint64_t nbytes, uint64_t first_word, uint64_t *nonzero);

/* The device hash of a whole chunk of @len bytes at @p; *@zero (may be
 * NULL) tells whether every byte is zero. */
uint64_t snap_hash_device(const void *p, uint64_t len, bool *zero);

#endif
