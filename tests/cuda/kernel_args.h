/* Argument types of kernel_args.cu, shared with the CPU kernels of the sim
 * backend (sim_kernels.c): both sides must see the same layout. Plain C. */
#ifndef TERN_TEST_KERNEL_ARGS_H
#define TERN_TEST_KERNEL_ARGS_H

#include <stdint.h>

/* Mixed sizes and alignments, so padding inside the struct is exercised. */
struct ka_mixed {
	char c;
	int32_t i;
	double d;
	int16_t s;
	float f;
	int64_t ll;
	uint8_t tail[3];
};

#define KA_BIG_WORDS 256

/* 1 KiB by value: larger than any register-passed argument. */
struct ka_big {
	uint32_t words[KA_BIG_WORDS];
};

/* What the kernel saw, written back for the host to compare. */
struct ka_out {
	struct ka_mixed mixed;
	char c;
	double d;
	uint64_t ptr;           /* the pointer argument, as an integer */
	int16_t s;
	uint32_t big[KA_BIG_WORDS];
	uint32_t ptr_word;      /* *ptr, read through the pointer argument */
	uint32_t threads_seen;  /* one increment per thread that ran */
};

#define KA_THREADS 256

#endif
