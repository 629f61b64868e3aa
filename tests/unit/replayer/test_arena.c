/* The arena over the sim backend's VMM entries. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "arena.h"

#define BASE 0x300000000000ull
#define SIZE (64ull << 30)

static void test_alloc_free(void **state)
{
	struct backend_config cfg = { .sim_memory = 1ull << 30 };
	struct backend *be;
	struct arena *a;
	CUcontext ctx;
	uint64_t p[8], q;

	assert_int_equal(backend_open("sim", &cfg, &be), 0);
	assert_int_equal(be->cuInit(0), CUDA_SUCCESS);
	assert_int_equal(be->cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
	assert_int_equal(be->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
	assert_int_equal(arena_open(be, 0, BASE, SIZE, &a), 0);
	assert_int_equal(arena_base(a), BASE);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(arena_alloc(a, 1000 + i, &p[i]), CUDA_SUCCESS);
		assert_true(p[i] >= BASE && p[i] < BASE + SIZE);
		/* The memory is really there at the address handed out. */
		memset((void *)(uintptr_t)p[i], i, 1000 + i);
	}
	assert_true(arena_range_valid(a, p[3], 1003));
	assert_false(arena_range_valid(a, p[3], 1004));
	assert_false(arena_range_valid(a, p[3] - 1, 1));
	assert_non_null(arena_find(a, p[5] + 500));
	assert_int_equal(arena_find(a, p[5] + 500)->addr, p[5]);
	assert_null(arena_find(a, BASE + SIZE - 1));
	/* Free in the middle; the hole is reused first-fit. */
	assert_int_equal(arena_free(a, p[2]), CUDA_SUCCESS);
	assert_int_equal(arena_free(a, p[2]), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(arena_free(a, p[3] + 8), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(arena_alloc(a, 10, &q), CUDA_SUCCESS);
	assert_int_equal(q, p[2]);
	/* More than the device has: out of memory, nothing leaks. */
	assert_int_equal(arena_alloc(a, 2ull << 30, &q), CUDA_ERROR_OUT_OF_MEMORY);
	assert_int_equal(arena_count(a), 8);
	/* Restore-style placement at a chosen address. */
	assert_int_equal(arena_alloc_at(a, p[7] + (64ull << 20), 4096), CUDA_SUCCESS);
	assert_int_equal(arena_alloc_at(a, p[7], 4096), CUDA_ERROR_INVALID_VALUE);
	arena_close(a);
	backend_close(be);
}

static void test_base_taken(void **state)
{
	struct backend_config cfg = { .sim_memory = 1ull << 30 };
	struct backend *be;
	struct arena *a, *b;
	CUcontext ctx;

	assert_int_equal(backend_open("sim", &cfg, &be), 0);
	be->cuInit(0);
	be->cuDevicePrimaryCtxRetain(&ctx, 0);
	be->cuCtxSetCurrent(ctx);
	assert_int_equal(arena_open(be, 0, BASE, SIZE, &a), 0);
	/* The same range twice cannot be had: the fixed address is refused, not moved. */
	assert_int_not_equal(arena_open(be, 0, BASE, SIZE, &b), 0);
	arena_close(a);
	backend_close(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alloc_free),
		cmocka_unit_test(test_base_taken),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
