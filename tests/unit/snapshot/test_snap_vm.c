/* A libvirt domain's record (snap_vm.h): round trips, the generation list's
 * limits, the file, and refusal of truncated, flipped and hostile records
 * (resealed, so that the checks behind the checksum are reached). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "le.h"
#include "snap_test_patch.h"
#include "snap_vm.h"

#define UUID "01234567-89ab-cdef-0123-456789abcdef"
#define OTHER "11234567-89ab-cdef-0123-456789abcdef"

static void sample(struct snap_vm_domain *d)
{
	struct snap_vm_entry e[2] = { { UUID "/a", "vm-a-1" }, { UUID "/b", "vm-b-1" } };

	memset(d, 0, sizeof(*d));
	strcpy(d->uuid, UUID);
	strcpy(d->name, "guest one");
	d->flags = SNAP_VM_ATTACHED;
	assert_int_equal(snap_vm_generation_set(d, "1f", e, 2), 0);
	assert_int_equal(snap_vm_generation_set(d, "20", e, 1), 0);
	assert_int_equal(snap_vm_generation_set(d, "21", NULL, 0), 0);
}

static void reseal(uint8_t *buf, size_t len)
{
	snap_hash128(buf, len - SNAP_TRAILER_BYTES, buf + len - SNAP_TRAILER_BYTES);
}

static void test_round_trip(void **state)
{
	struct snap_vm_domain d, got;
	struct snap_buf b = { 0 }, again = { 0 };
	struct snap_vm_generation *g;

	(void)state;
	sample(&d);
	assert_int_equal(snap_vm_domain_encode(&d, &b), 0);
	assert_int_equal(snap_vm_domain_decode(b.data, b.len, &got), 0);
	assert_string_equal(got.uuid, UUID);
	assert_string_equal(got.name, "guest one");
	assert_int_equal(got.flags, SNAP_VM_ATTACHED);
	assert_int_equal(got.generation_count, 3);
	g = snap_vm_generation_find(&got, "1f");
	assert_non_null(g);
	assert_int_equal(g->count, 2);
	assert_string_equal(g->entries[1].snapshot, "vm-b-1");
	assert_null(snap_vm_generation_find(&got, "22"));
	assert_int_equal(snap_vm_domain_encode(&got, &again), 0);
	assert_int_equal(again.len, b.len);
	assert_memory_equal(again.data, b.data, b.len);
	snap_vm_domain_release(&got);
	snap_vm_domain_release(&d);
	snap_buf_free(&b);
	snap_buf_free(&again);
}

static void test_generations(void **state)
{
	struct snap_vm_domain d;
	struct snap_vm_entry e = { UUID "/a", "s" }, bad[] = {
		{ OTHER "/a", "s" },            /* another domain's session */
		{ "plain", "s" },               /* not a domain's session */
		{ UUID "/a", ".hidden" },       /* not a snapshot name */
	};
	char gen[8];

	(void)state;
	sample(&d);
	/* The same generation again replaces it. */
	assert_int_equal(snap_vm_generation_set(&d, "1f", &e, 1), 0);
	assert_int_equal(d.generation_count, 3);
	assert_int_equal(snap_vm_generation_find(&d, "1f")->count, 1);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(snap_vm_generation_set(&d, "30", &bad[i], 1), -EINVAL);
	assert_int_equal(snap_vm_generation_set(&d, "G", &e, 1), -EINVAL);
	assert_int_equal(snap_vm_generation_set(&d, "30", &e, SNAP_VM_SESSIONS_MAX + 1), -E2BIG);
	/* Past the limit the oldest goes. */
	for (unsigned i = 0; i < SNAP_VM_GENERATIONS_MAX; i++) {
		snprintf(gen, sizeof(gen), "a%x", i);
		assert_int_equal(snap_vm_generation_set(&d, gen, &e, 1), 0);
	}
	assert_int_equal(d.generation_count, SNAP_VM_GENERATIONS_MAX);
	assert_null(snap_vm_generation_find(&d, "21"));
	assert_non_null(snap_vm_generation_find(&d, "a0"));
	snap_vm_domain_release(&d);
}

static void test_damage(void **state)
{
	struct snap_vm_domain d, got;
	struct snap_buf b = { 0 };

	(void)state;
	sample(&d);
	assert_int_equal(snap_vm_domain_encode(&d, &b), 0);
	/* Every truncation, and every flipped byte, without resealing. */
	for (size_t n = 0; n < b.len; n++) {
		assert_int_not_equal(snap_vm_domain_decode(b.data, n, &got), 0);
		snap_vm_domain_release(&got);
	}
	for (size_t i = 0; i < b.len; i++) {
		b.data[i] ^= 0x20;
		assert_int_not_equal(snap_vm_domain_decode(b.data, b.len, &got), 0);
		snap_vm_domain_release(&got);
		b.data[i] ^= 0x20;
	}
	snap_vm_domain_release(&d);
	snap_buf_free(&b);
}

/* Resealed changes: the structure checks must refuse them. */
static void test_hostile(void **state)
{
	/* Layout: header 20 (flags at 12, count at 16); uuid at 20 (2 + 36);
	 * name at 58 (2 + 9); generation "1f" at 69 (2 + 2); its count at 73;
	 * first session at 77. */
	struct record_patch cases[] = {
		{ 8, 2, 4, -ENOTSUP },                  /* another version */
		{ 12, 2, 4, -EBADMSG },                 /* an unknown flag */
		{ 16, SNAP_VM_GENERATIONS_MAX + 1, 4, -EBADMSG },
		{ 16, 4, 4, -EBADMSG },                 /* one generation more than there is */
		{ 16, 2, 4, -EBADMSG },                 /* bytes left over */
		{ 22, 'A', 1, -EBADMSG },               /* an uppercase uuid */
		{ 58, 300, 2, -EBADMSG },               /* a name longer than the rest */
		{ 62, '/', 1, -EBADMSG },               /* a '/' in the name */
		{ 71, 'g', 1, -EBADMSG },               /* not a hex generation */
		{ 73, 0xffffffffu, 4, -EBADMSG },       /* a count the bytes cannot hold */
		{ 79, '2', 1, -EBADMSG },               /* a session of another domain */
		{ 77 + 2 + 36, '.', 1, -EBADMSG },      /* "UUID.a": not a domain's session */
	};
	struct snap_vm_domain d, got;
	struct snap_buf b = { 0 };

	(void)state;
	sample(&d);
	assert_int_equal(snap_vm_domain_encode(&d, &b), 0);
	assert_memory_equal(b.data + 77 + 2, UUID "/a", 38);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t *p = malloc(b.len);

		memcpy(p, b.data, b.len);
		record_patch_apply(p, b.len, &cases[i]);
		if (snap_vm_domain_decode(p, b.len, &got) != cases[i].want)
			fail_msg("case %zu: not refused with %d", i, cases[i].want);
		snap_vm_domain_release(&got);
		free(p);
	}
	/* A duplicate generation: "20" renamed "1f". */
	{
		uint8_t *p = malloc(b.len);
		size_t at;

		memcpy(p, b.data, b.len);
		/* generation "1f" entries end at 77 + 2 * (2+38 + 2+6) = 173: "20" there. */
		at = 173;
		assert_memory_equal(p + at + 2, "20", 2);
		memcpy(p + at + 2, "1f", 2);
		reseal(p, b.len);
		assert_int_equal(snap_vm_domain_decode(p, b.len, &got), -EBADMSG);
		snap_vm_domain_release(&got);
		free(p);
	}
	/* The encoder refuses what the decoder would. */
	strcpy(d.name, "a/b");
	snap_buf_free(&b);
	assert_int_equal(snap_vm_domain_encode(&d, &b), -EINVAL);
	snap_vm_domain_release(&d);
	snap_buf_free(&b);
}

static void test_file(void **state)
{
	char dir[] = "/tmp/snap-vm-XXXXXX", path[64];
	struct snap_vm_domain d, got;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/" UUID SNAP_VM_DOMAIN_EXT, dir);
	assert_int_equal(snap_vm_domain_read(path, &got), -ENOENT);
	sample(&d);
	assert_int_equal(snap_vm_domain_write(path, &d), 0);
	assert_int_equal(snap_vm_domain_read(path, &got), 0);
	assert_int_equal(got.generation_count, 3);
	snap_vm_domain_release(&got);
	assert_int_equal(truncate(path, 30), 0);
	assert_int_equal(snap_vm_domain_read(path, &got), -EBADMSG);
	snap_vm_domain_release(&got);
	unlink(path);
	rmdir(dir);
	snap_vm_domain_release(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_generations),
		cmocka_unit_test(test_damage),
		cmocka_unit_test(test_hostile),
		cmocka_unit_test(test_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
