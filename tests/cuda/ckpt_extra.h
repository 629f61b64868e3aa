/* ckpt_loop's extra memory (TERN_TEST_EXTRA_MB): word j holds
 * ck_extra_word(j), made and summed on the device (ck_extra_fill,
 * ck_extra_sum) so that a session of tens of GiB is set up and checked in
 * seconds; the same function serves the sim's kernels (sim_kernels.c).
 * Incompressible, as a snapshot of real data would be. */
#ifndef TERN_TEST_CKPT_EXTRA_H
#define TERN_TEST_CKPT_EXTRA_H

#ifdef __CUDACC__
#define CK_EXTRA_FN __host__ __device__ static inline
#else
#define CK_EXTRA_FN static inline
#endif

CK_EXTRA_FN unsigned ck_extra_word(unsigned long long j)
{
	unsigned long long x = (j + 1) * 0x9E3779B97F4A7C15ull;

	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 32;
	return (unsigned)x;
}

/* What word j adds to the sum: any wrong word changes it. */
CK_EXTRA_FN unsigned long long ck_extra_term(unsigned v, unsigned long long j)
{
	return ((unsigned long long)v + 1) * (2 * j + 1);
}

#endif
