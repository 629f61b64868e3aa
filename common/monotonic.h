/* CLOCK_MONOTONIC, the clock every interval, deadline and duration of tern
 * is measured on: immune to the wall clock being set. */
#ifndef TERN_MONOTONIC_H
#define TERN_MONOTONIC_H

#include <stdint.h>
#include <time.h>

static inline uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t monotonic_ms(void)
{
	return monotonic_ns() / 1000000u;
}

/* One turn of a loop that spins on the clock and shared memory: lets the
 * core's sibling run. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

#endif
