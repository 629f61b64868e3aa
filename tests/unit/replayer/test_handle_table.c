#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <cmocka.h>

#include "handle_table.h"

static int count_kind(struct handle_entry *e, void *arg)
{
	if (e->kind == HANDLE_STREAM)
		(*(unsigned *)arg)++;
	return 0;
}

static void test_add_get_remove(void **state)
{
	struct handle_table *ht;
	uint64_t h[5000], ev;
	unsigned streams = 0;

	assert_int_equal(handle_table_create(&ht), 0);
	for (unsigned i = 0; i < 5000; i++) {
		assert_int_equal(handle_table_add(ht, HANDLE_STREAM, (void *)(uintptr_t)(i + 1), 0, NULL, &h[i]), 0);
		assert_int_equal(handle_kind_of(h[i]), HANDLE_STREAM);
	}
	assert_int_equal(handle_table_add(ht, HANDLE_EVENT, (void *)1, 0, NULL, &ev), 0);
	for (unsigned i = 0; i < 5000; i++) {
		struct handle_entry *e = handle_table_get(ht, h[i], HANDLE_STREAM);

		assert_non_null(e);
		assert_ptr_equal(e->real, (void *)(uintptr_t)(i + 1));
	}
	/* The right id with the wrong kind is no handle at all. */
	assert_null(handle_table_get(ht, ev, HANDLE_STREAM));
	assert_null(handle_table_get(ht, h[0] ^ (3ull << 56), HANDLE_STREAM));
	for (unsigned i = 0; i < 5000; i += 2)
		handle_table_remove(ht, h[i]);
	for (unsigned i = 0; i < 5000; i++)
		assert_true((handle_table_get(ht, h[i], HANDLE_STREAM) != NULL) == (i % 2 == 1));
	handle_table_foreach(ht, count_kind, &streams);
	assert_int_equal(streams, 2500);
	assert_int_equal(handle_table_count(ht), 2501);
	/* Serials never repeat: a new handle differs from every freed one. */
	{
		uint64_t n;

		assert_int_equal(handle_table_add(ht, HANDLE_STREAM, (void *)7, 0, NULL, &n), 0);
		for (unsigned i = 0; i < 5000; i++)
			assert_true(n != h[i]);
	}
	assert_non_null(handle_table_find_real(ht, HANDLE_STREAM, (void *)(uintptr_t)2));
	assert_null(handle_table_find_real(ht, HANDLE_STREAM, (void *)(uintptr_t)1));
	/* Restore puts a handle back at its old value. */
	assert_int_equal(handle_table_add_at(ht, h[0], (void *)99, 0, NULL), 0);
	assert_int_equal(handle_table_add_at(ht, h[0], (void *)99, 0, NULL), -EEXIST);
	handle_table_destroy(ht);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_add_get_remove) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
