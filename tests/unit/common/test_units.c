#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <cmocka.h>

#include "units.h"

static void test_parse(void **state)
{
	uint64_t v;

	assert_int_equal(units_size_parse("4096", &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(units_size_parse("64M", &v), 0);
	assert_int_equal(v, 64ull << 20);
	assert_int_equal(units_size_parse("16GiB", &v), 0);
	assert_int_equal(v, 16ull << 30);
	assert_int_equal(units_size_parse("1t", &v), 0);
	assert_int_equal(v, 1ull << 40);
	assert_int_equal(units_size_parse("0x200000000000", &v), 0);
	assert_int_equal(v, 0x200000000000ull);
	assert_int_equal(units_size_parse("12X", &v), -EINVAL);
	assert_int_equal(units_size_parse("-1", &v), -EINVAL);
	assert_int_equal(units_size_parse("99999999999T", &v), -EINVAL);
	assert_int_equal(units_size_parse("", &v), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_parse) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
