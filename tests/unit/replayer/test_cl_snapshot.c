/* OpenCL snapshots at the executor (cl_exec_snapshot.c) on the host's
 * platform (PoCL in CI): a session's objects saved into a journal come back
 * in a fresh executor under their handles, with their contents, and a
 * hostile journal (a description that does not decode, one whose requests
 * name another object or do not decode, contents of the wrong size, a
 * record of a kind no restore makes, another platform's devices) is
 * refused with a message naming the object, never half trusted. The
 * descriptions' codec (common/cl_saved.c) round-trips and refuses what is
 * not exactly one encoding. Skips (77) without an OpenCL platform. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cl_exec.h"
#include "cl_saved.h"
#include "tracker.h"
#include "wire_cl_dispatch.h"

#define DEVICE ((uint64_t)HANDLE_CL_DEVICE << WIRE_HANDLE_KIND_SHIFT | 1)
#define BYTES 4096u

struct fixture {
	char dir[64];
	struct tracker *t;
	struct cl_exec x, y;            /* the snapshotted session, the restored one */
	uint64_t context, queue, buffer;
	uint8_t data[BYTES];
};

/* Serve @m's request on @x: its cl_int, and the rest of the reply in
 * *@rest (malloc'd; may be NULL). */
static cl_int call(struct cl_exec *x, uint32_t id, struct wire_msg *m, uint8_t **rest, size_t *rest_len)
{
	uint8_t *req = malloc(m->payload_len + 1), *rep;
	struct wire_cursor cur;
	struct wire_msg reply;
	cl_int st;

	assert_non_null(req);
	assert_int_equal(wire_msg_payload_copy(m, req, m->payload_len), m->payload_len);
	wire_cursor_init(&cur, req, m->payload_len);
	wire_msg_init(&reply);
	assert_int_equal(cl_exec_dispatch(x, id, &cur, &reply), 0);
	rep = malloc(reply.payload_len + 1);
	assert_non_null(rep);
	assert_int_equal(wire_msg_payload_copy(&reply, rep, reply.payload_len), reply.payload_len);
	assert_true(reply.payload_len >= 4);
	st = (cl_int)le32_get(rep);
	if (rest) {
		*rest_len = reply.payload_len - 4;
		memmove(rep, rep + 4, *rest_len);
		*rest = rep;
	} else {
		free(rep);
	}
	wire_msg_release(&reply);
	wire_msg_release(m);
	free(req);
	return st;
}

static uint64_t handle_of_reply(uint8_t *rest, size_t len)
{
	uint64_t h;

	assert_true(len >= 8);
	h = le64_get(rest);
	free(rest);
	return h;
}

/* The session: a context, a queue, a buffer holding @data. */
static void session_make(struct fixture *f)
{
	uint8_t dev[8], *rest;
	size_t len;
	struct wire_msg m;

	le64_put(dev, DEVICE);
	wire_msg_init(&m);
	wire_cl_context_create_req_encode(&m, &(struct wire_cl_context_create_req){ .devices = { dev, 8 } });
	assert_int_equal(call(&f->x, WIRE_CALL_CL_CONTEXT_CREATE, &m, &rest, &len), CL_SUCCESS);
	f->context = handle_of_reply(rest, len);
	wire_msg_init(&m);
	wire_cl_queue_create_req_encode(&m, &(struct wire_cl_queue_create_req){ .context = f->context, .device = DEVICE });
	assert_int_equal(call(&f->x, WIRE_CALL_CL_QUEUE_CREATE, &m, &rest, &len), CL_SUCCESS);
	f->queue = handle_of_reply(rest, len);
	for (unsigned i = 0; i < BYTES; i++)
		f->data[i] = (uint8_t)(i * 31 + 7);
	wire_msg_init(&m);
	wire_cl_buffer_create_req_encode(&m, &(struct wire_cl_buffer_create_req){
						 .context = f->context, .flags = CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
						 .size = BYTES, .data = { f->data, BYTES } });
	assert_int_equal(call(&f->x, WIRE_CALL_CL_BUFFER_CREATE, &m, &rest, &len), CL_SUCCESS);
	f->buffer = handle_of_reply(rest, len);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[256] = "";

	snprintf(f->dir, sizeof(f->dir), "/tmp/tern-clsnap-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(tracker_open(f->dir, 0, &f->t), 0);
	cl_exec_init(&f->x, NULL);
	cl_exec_init(&f->y, NULL);
	session_make(f);
	assert_int_equal(cl_exec_snapshot_save(&f->x, f->t, err, sizeof(err)), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	cl_exec_close(&f->x);
	cl_exec_close(&f->y);
	tracker_close(f->t);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static void test_round_trip(void **state)
{
	struct fixture *f = *state;
	char err[256] = "";
	struct wire_msg m;
	uint8_t *rest;
	size_t len;

	assert_int_equal(cl_exec_snapshot_restore(&f->y, f->t, err, sizeof(err)), 0);
	/* The buffer holds its bytes under its old handle, read through its
	 * old queue. */
	wire_msg_init(&m);
	wire_cl_enqueue_read_buffer_req_encode(&m, &(struct wire_cl_enqueue_read_buffer_req){
						       .queue = f->queue, .mem = f->buffer, .size = BYTES });
	assert_int_equal(call(&f->y, WIRE_CALL_CL_ENQUEUE_READ_BUFFER, &m, &rest, &len), CL_SUCCESS);
	assert_int_equal(len, 4 + BYTES);       /* the blob's length, its bytes */
	assert_memory_equal(rest + 4, f->data, BYTES);
	free(rest);
	/* New objects take new handles, past the old ones. */
	wire_msg_init(&m);
	wire_cl_queue_create_req_encode(&m, &(struct wire_cl_queue_create_req){ .context = f->context, .device = DEVICE });
	assert_int_equal(call(&f->y, WIRE_CALL_CL_QUEUE_CREATE, &m, &rest, &len), CL_SUCCESS);
	assert_true(handle_of_reply(rest, len) > f->queue);
}

/* A non-blocking read the guest has not fetched at the snapshot: its bytes
 * come from the restored worker, under its event, once. */
/* A non-blocking read of the buffer past its first 16 bytes, saved before
 * the guest fetches it; its event. */
static uint64_t pending_read_saved(struct fixture *f)
{
	uint64_t ev = (uint64_t)HANDLE_CL_EVENT << WIRE_HANDLE_KIND_SHIFT |
		      handle_table_next_serial(f->x.handles, HANDLE_CL_EVENT);
	char err[256] = "";
	struct wire_msg m;

	wire_msg_init(&m);
	wire_cl_enqueue_read_buffer_lazy_req_encode(&m, &(struct wire_cl_enqueue_read_buffer_lazy_req){
		.queue = f->queue, .mem = f->buffer, .offset = 16, .size = BYTES - 16, .event = ev });
	assert_int_equal(call(&f->x, WIRE_CALL_CL_ENQUEUE_READ_BUFFER_LAZY, &m, NULL, NULL), CL_SUCCESS);
	assert_int_equal(cl_exec_snapshot_save(&f->x, f->t, err, sizeof(err)), 0);
	return ev;
}

static void test_pending_read(void **state)
{
	struct fixture *f = *state;
	uint64_t ev = pending_read_saved(f);
	char err[256] = "";
	struct wire_msg m;
	uint8_t *rest;
	size_t len;

	assert_int_equal(cl_exec_snapshot_restore(&f->y, f->t, err, sizeof(err)), 0);
	assert_int_equal(f->y.lazy_read_bytes, BYTES - 16);
	wire_msg_init(&m);
	wire_cl_read_fetch_req_encode(&m, &(struct wire_cl_read_fetch_req){ ev, 0, BYTES - 16 });
	assert_int_equal(call(&f->y, WIRE_CALL_CL_READ_FETCH, &m, &rest, &len), CL_SUCCESS);
	assert_int_equal(len, 4 + BYTES - 16);
	assert_memory_equal(rest + 4, f->data + 16, BYTES - 16);
	free(rest);
	wire_msg_init(&m);
	wire_cl_read_fetch_req_encode(&m, &(struct wire_cl_read_fetch_req){ ev, 0, 1 });
	assert_int_equal(call(&f->y, WIRE_CALL_CL_READ_FETCH, &m, NULL, NULL), CL_INVALID_EVENT);
	assert_int_equal(f->y.lazy_read_bytes, 0);
}

/* Replace object @h's description by @bytes. */
static void description_set(struct fixture *f, uint64_t h, const void *bytes, size_t len)
{
	struct tracker_object o;
	uint8_t args[32];

	assert_int_equal(tracker_object_get(f->t, h, &o), 0);
	assert_int_equal(o.args_len, 32);
	memcpy(args, o.args, 32);
	assert_int_equal(tracker_image_ref(f->t, bytes, len, CL_SAVED_IMAGE_FORMAT, args), 0);
	o.args = args;
	assert_int_equal(tracker_object_put(f->t, h, &o), 0);
}

/* A restore of the journal as it is now fails, naming @what. */
static void refused(struct fixture *f, const char *what)
{
	char err[512] = "";

	assert_int_not_equal(cl_exec_snapshot_restore(&f->y, f->t, err, sizeof(err)), 0);
	if (!strstr(err, what))
		fail_msg("restore refused with \"%s\", not \"%s\"", err, what);
}

static void test_garbage_description(void **state)
{
	struct fixture *f = *state;
	uint8_t junk[100];

	memset(junk, 0x5a, sizeof(junk));
	description_set(f, f->queue, junk, sizeof(junk));
	refused(f, "does not decode: not an OpenCL object's description");
}

/* The queue's description with @entries instead of its own. */
static void queue_requests_set(struct fixture *f, struct cl_saved_entry *entries, uint32_t count)
{
	struct cl_saved s = { .kind = HANDLE_CL_QUEUE, .refs = 1, .count = count, .entries = entries };
	uint8_t *b;
	size_t len;

	assert_int_equal(cl_saved_encode(&s, &b, &len), 0);
	description_set(f, f->queue, b, len);
	free(b);
}

static void test_truncated_request(void **state)
{
	struct fixture *f = *state;
	uint8_t p[5] = { 1, 2, 3, 4, 5 };
	struct cl_saved_entry e = { WIRE_CALL_CL_QUEUE_CREATE, 0, sizeof(p), p };

	queue_requests_set(f, &e, 1);
	refused(f, "queue 0x2300000000000001: request 0 (cl_queue_create) does not decode");
}

static void test_request_of_another_context(void **state)
{
	struct fixture *f = *state;
	struct wire_msg m;
	uint8_t p[256];
	size_t n;
	struct cl_saved_entry e;

	/* A queue of a context the snapshot does not hold: the dispatcher's
	 * own check refuses it. */
	wire_msg_init(&m);
	wire_cl_queue_create_req_encode(&m, &(struct wire_cl_queue_create_req){ .context = f->context + 7,
										 .device = DEVICE });
	n = wire_msg_payload_copy(&m, p, sizeof(p));
	wire_msg_release(&m);
	e = (struct cl_saved_entry){ WIRE_CALL_CL_QUEUE_CREATE, 0, (uint32_t)n, p };
	queue_requests_set(f, &e, 1);
	refused(f, "queue 0x2300000000000001: cl_queue_create answered error -34");
}

static void test_wrong_kind_of_request(void **state)
{
	struct fixture *f = *state;
	struct cl_saved s = { .kind = HANDLE_CL_QUEUE, .refs = 1, .count = 2 };
	struct cl_saved_entry e[2];
	struct tracker_image im;
	const void *bytes;
	struct tracker_object o;
	struct cl_saved good;
	uint8_t *b, *raw;
	size_t len;

	/* The queue's own creation, then a build: no request of a queue's. */
	assert_int_equal(tracker_object_get(f->t, f->queue, &o), 0);
	assert_int_equal(tracker_image_get(f->t, o.args, &im, &bytes), 0);
	raw = malloc(im.size);
	memcpy(raw, bytes, im.size);
	assert_int_equal(cl_saved_decode(raw, im.size, &good, NULL), 0);
	e[0] = good.entries[0];
	e[1] = (struct cl_saved_entry){ WIRE_CALL_CL_PROGRAM_BUILD, 0, 8, raw };
	s.entries = e;
	assert_int_equal(cl_saved_encode(&s, &b, &len), -EINVAL);       /* the encoder will not */
	/* Written by hand: the decoder will not either. */
	s.count = 1;
	assert_int_equal(cl_saved_encode(&s, &b, &len), 0);
	{
		size_t n = len + 12 + 8;
		uint8_t *h = malloc(n);

		memcpy(h, b, len);
		le32_put(h + 88, 2);
		le32_put(h + len, WIRE_CALL_CL_PROGRAM_BUILD);
		le32_put(h + len + 4, 0);
		le32_put(h + len + 8, 8);
		le64_put(h + len + 12, f->queue);
		description_set(f, f->queue, h, n);
		free(h);
	}
	free(b);
	cl_saved_release(&good);
	free(raw);
	refused(f, "a request that does not belong to an object of its kind");
}

static void test_contents_of_another_size(void **state)
{
	struct fixture *f = *state;
	struct tracker_object o;
	uint8_t args[32], small[16] = { 0 };

	assert_int_equal(tracker_object_get(f->t, f->buffer, &o), 0);
	memcpy(args, o.args, 32);
	assert_int_equal(tracker_image_ref(f->t, small, sizeof(small), CL_CONTENTS_IMAGE_FORMAT, args + 16), 0);
	o.args = args;
	assert_int_equal(tracker_object_put(f->t, f->buffer, &o), 0);
	refused(f, "memory object 0x2400000000000001: contents missing from the journal");
}

/* A read's bytes of another length than its description's are refused. */
static void test_pending_read_of_another_size(void **state)
{
	struct fixture *f = *state;
	uint64_t ev = pending_read_saved(f);
	struct tracker_object o;
	uint8_t args[32], small[16] = { 0 };
	char what[96];

	assert_int_equal(tracker_object_get(f->t, ev, &o), 0);
	memcpy(args, o.args, 32);
	assert_int_equal(tracker_image_ref(f->t, small, sizeof(small), CL_CONTENTS_IMAGE_FORMAT, args + 16), 0);
	o.args = args;
	assert_int_equal(tracker_object_put(f->t, ev, &o), 0);
	snprintf(what, sizeof(what), "event 0x%llx: the bytes of its read are missing", (unsigned long long)ev);
	refused(f, what);
}

static void test_record_of_a_platform(void **state)
{
	struct fixture *f = *state;
	uint8_t args[32] = { 0 };

	assert_int_equal(tracker_object_put(f->t, (uint64_t)HANDLE_CL_PLATFORM << WIRE_HANDLE_KIND_SHIFT | 1,
					    &(struct tracker_object){ .kind = HANDLE_CL_PLATFORM, .args = args,
								      .args_len = 32 }),
			 0);
	refused(f, "of a kind no restore makes");
}

static void test_record_args(void **state)
{
	struct fixture *f = *state;
	struct tracker_object o;
	uint8_t args[5];

	assert_int_equal(tracker_object_get(f->t, f->context, &o), 0);
	memcpy(args, o.args, sizeof(args));
	o.args = args;
	o.args_len = sizeof(args);
	assert_int_equal(tracker_object_put(f->t, f->context, &o), 0);
	refused(f, "context 0x2200000000000001: its description is missing");
}

static void test_other_devices(void **state)
{
	struct fixture *f = *state;
	struct cl_saved_session s;
	const void *b;
	size_t len;
	uint8_t *copy, *enc;

	assert_int_equal(tracker_meta_bytes_get(f->t, CL_SAVED_META_SESSION, &b, &len), 0);
	copy = malloc(len);
	memcpy(copy, b, len);
	assert_int_equal(cl_saved_session_decode(copy, len, &s, NULL), 0);
	assert_true(s.devices >= 1);
	s.device[0].name = "another device";
	s.device[0].name_len = 14;
	assert_int_equal(cl_saved_session_encode(&s, &enc, &len), 0);
	assert_int_equal(tracker_meta_bytes_set(f->t, CL_SAVED_META_SESSION, enc, len), 0);
	free(enc);
	free(copy);
	refused(f, "(another device) is not this worker's platform's");
	/* A truncated part does not decode. */
	assert_int_equal(tracker_meta_bytes_set(f->t, CL_SAVED_META_SESSION, "TCS1", 4), 0);
	refused(f, "the snapshot's OpenCL part does not decode: truncated");
}

/* The codec alone: every description re-encodes to its bytes, and any
 * change of a byte of the fixed part is refused or decodes to another one. */
static void test_codec(void **state)
{
	uint8_t payload[8] = { 1, 0, 0, 0, 0, 0, 0, 0x27 };
	struct cl_saved_entry e[2] = { { WIRE_CALL_CL_USER_EVENT_CREATE, 0, 8, payload },
				       { WIRE_CALL_CL_USER_EVENT_SET_STATUS, 1, 8, payload } };
	struct cl_saved s = { .kind = HANDLE_CL_EVENT, .flags = CL_SAVED_F_WAITED, .refs = 2, .count = 2,
			      .entries = e }, d;
	uint8_t *b, *b2;
	size_t len, len2;

	(void)state;
	assert_int_equal(cl_saved_encode(&s, &b, &len), 0);
	assert_int_equal(cl_saved_decode(b, len, &d, NULL), 0);
	assert_int_equal(cl_saved_encode(&d, &b2, &len2), 0);
	assert_int_equal(len, len2);
	assert_memory_equal(b, b2, len);
	cl_saved_release(&d);
	free(b2);
	for (size_t cut = 0; cut < len; cut++)
		assert_int_not_equal(cl_saved_decode(b, cut, &d, NULL), 0);
	b[92] = 1;      /* reserved */
	assert_int_equal(cl_saved_decode(b, len, &d, NULL), -EBADMSG);
	b[92] = 0;
	b[6] = HANDLE_CL_QUEUE;     /* a queue made by a user event's creation */
	assert_int_equal(cl_saved_decode(b, len, &d, NULL), -EBADMSG);
	free(b);
	/* A command's event that had not completed is no snapshot's. */
	s = (struct cl_saved){ .kind = HANDLE_CL_EVENT, .refs = 1, .status = CL_RUNNING };
	assert_int_equal(cl_saved_encode(&s, &b, &len), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pending_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pending_read_of_another_size, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage_description, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated_request, setup, teardown),
		cmocka_unit_test_setup_teardown(test_request_of_another_context, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_kind_of_request, setup, teardown),
		cmocka_unit_test_setup_teardown(test_contents_of_another_size, setup, teardown),
		cmocka_unit_test_setup_teardown(test_record_of_a_platform, setup, teardown),
		cmocka_unit_test_setup_teardown(test_record_args, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_devices, setup, teardown),
		cmocka_unit_test(test_codec),
	};
	struct cl_exec probe;
	int ret;

	/* No platform on this host: nothing to test against. */
	cl_exec_init(&probe, NULL);
	ret = cl_exec_open(&probe);
	cl_exec_close(&probe);
	if (ret) {
		printf("no OpenCL platform: skipped\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
