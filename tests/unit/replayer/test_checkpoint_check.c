/* What a restore checks before a live worker is stopped
 * (checkpoint_target_check): a journal of another arena, of more devices
 * than a session gets, over the quota, or without the bookkeeping a restore
 * needs is refused with a message naming the setting; a fitting one passes.
 * checkpoint_restore_check of a store without the snapshot fails clearly. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "checkpoint.h"
#include "cl_saved.h"
#include "tracker.h"
#include "wire_calls.h"

#define BASE 0x200000000000ull
#define SIZE (512ull << 30)

struct fixture {
	char dir[64];
	struct tracker *t;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	snprintf(f->dir, sizeof(f->dir), "/tmp/tern-ckcheck-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(tracker_open(f->dir, 0, &f->t), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	tracker_close(f->t);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

/* A journal as a snapshot of @devices devices with @bytes in its arena. */
static void journal_fill(struct tracker *t, uint64_t devices, uint64_t bytes)
{
	struct tracker_region arena = { .size = bytes, .kind = EXEC_REGION_DEVICE };
	struct tracker_region vmm = { .size = 64ull << 30, .kind = EXEC_REGION_VMM };

	assert_int_equal(tracker_meta_u64_set(t, TRACKER_META_ARENA_BASE, BASE), 0);
	assert_int_equal(tracker_meta_u64_set(t, TRACKER_META_ARENA_SIZE, SIZE), 0);
	assert_int_equal(tracker_meta_u64_set(t, EXEC_META_DEVICE_COUNT, devices), 0);
	assert_int_equal(tracker_region_put(t, BASE, &arena), 0);
	/* VMM mappings may share an allocation: not counted against the quota. */
	assert_int_equal(tracker_region_put(t, BASE + 16 * SIZE, &vmm), 0);
}

static const struct checkpoint_target fits = { .arena_base = BASE, .arena_size = SIZE, .devices = 2,
					       .quota = 1ull << 30 };

static void test_fits(void **state)
{
	struct fixture *f = *state;
	char err[256] = "";

	journal_fill(f->t, 2, 512ull << 20);
	assert_int_equal(checkpoint_target_check(f->t, "s", &fits, err, sizeof(err)), 0);
	assert_string_equal(err, "");
}

static void test_refused(void **state)
{
	struct fixture *f = *state;
	struct checkpoint_target t;
	char err[256];

	journal_fill(f->t, 2, 512ull << 20);
	t = fits;
	t.arena_base = BASE + SIZE;
	assert_int_equal(checkpoint_target_check(f->t, "s", &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "--arena-base 0x200000000000"));
	t = fits;
	t.arena_size = SIZE / 2;
	assert_int_equal(checkpoint_target_check(f->t, "s", &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "--arena-size"));
	t = fits;
	t.devices = 1;
	assert_int_equal(checkpoint_target_check(f->t, "s", &t, err, sizeof(err)), -ENODEV);
	assert_non_null(strstr(err, "2 devices"));
	t = fits;
	t.quota = 256ull << 20;
	assert_int_equal(checkpoint_target_check(f->t, "s", &t, err, sizeof(err)), -EDQUOT);
	assert_non_null(strstr(err, "--quota"));
	t.quota = 0;    /* no quota: anything fits */
	assert_int_equal(checkpoint_target_check(f->t, "s", &t, err, sizeof(err)), 0);
}

/* A journal without the bookkeeping (a hostile or damaged snapshot). */
static void test_empty_journal(void **state)
{
	struct fixture *f = *state;
	char err[256];

	assert_int_equal(checkpoint_target_check(f->t, "s", &fits, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "arena base"));
}

/* A hostile OpenCL record is refused before any worker stops: one whose
 * description does not decode, one without a description, a session part
 * that does not decode. A valid one passes. */
static void test_opencl_records(void **state)
{
	struct fixture *f = *state;
	uint64_t queue = (uint64_t)WIRE_HANDLE_CL_QUEUE << WIRE_HANDLE_KIND_SHIFT | 1;
	uint8_t payload[24] = { 0 }, args[32] = { 0 }, junk[96] = { 0x41 };
	struct cl_saved_entry e = { WIRE_CALL_CL_QUEUE_CREATE, 0, sizeof(payload), payload };
	struct cl_saved s = { .kind = WIRE_HANDLE_CL_QUEUE, .refs = 1, .count = 1, .entries = &e };
	struct tracker_object o = { .kind = WIRE_HANDLE_CL_QUEUE, .args = args, .args_len = sizeof(args) };
	char err[256];
	uint8_t *b;
	size_t len;

	journal_fill(f->t, 1, 1 << 20);
	assert_int_equal(tracker_object_put(f->t, queue, &o), 0);
	assert_int_equal(checkpoint_target_check(f->t, "s", &fits, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "OpenCL queue 0x2300000000000001 does not decode: its description is missing"));
	assert_int_equal(tracker_image_ref(f->t, junk, sizeof(junk), CL_SAVED_IMAGE_FORMAT, args), 0);
	assert_int_equal(tracker_object_put(f->t, queue, &o), 0);
	assert_int_equal(checkpoint_target_check(f->t, "s", &fits, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "(magic)"));
	assert_int_equal(cl_saved_encode(&s, &b, &len), 0);
	assert_int_equal(tracker_image_ref(f->t, b, len, CL_SAVED_IMAGE_FORMAT, args), 0);
	free(b);
	assert_int_equal(tracker_object_put(f->t, queue, &o), 0);
	assert_int_equal(checkpoint_target_check(f->t, "s", &fits, err, sizeof(err)), 0);
	assert_int_equal(tracker_meta_bytes_set(f->t, CL_SAVED_META_SESSION, "TCS1xxxx", 8), 0);
	assert_int_equal(checkpoint_target_check(f->t, "s", &fits, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "OpenCL part does not decode: truncated"));
}

static void test_no_snapshot(void **state)
{
	struct fixture *f = *state;
	char err[256] = "", store[96];

	snprintf(store, sizeof(store), "%s/store", f->dir);
	assert_int_not_equal(checkpoint_restore_check(store, "nosuch", &fits, err, sizeof(err)), 0);
	assert_non_null(strstr(err, store));
	assert_int_not_equal(checkpoint_restore_check(f->dir, "nosuch", &fits, err, sizeof(err)), 0);
	assert_true(err[0]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_opencl_records, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_snapshot, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
