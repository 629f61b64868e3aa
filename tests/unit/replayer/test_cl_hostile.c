/* Hostile OpenCL requests at the executor (replayer/exec_opencl) on the
 * host's platform (PoCL in CI). Every call of common/wire/opencl.tbl, its
 * request's layout read from opencl.golden (argv[1]), gets requests that
 * decode but carry hostile fields: the session's live handles (a context,
 * a queue, a buffer) where any handle goes, handles of other kinds,
 * unknown ones, zero and extreme numbers, blobs of random bytes or of live
 * handles, strings with garbage. Each must be answered with a cl_int
 * first; the same request cut short anywhere, or with a byte more, must be
 * refused as one that does not decode. The executor must not crash, and
 * the session must still answer a plain call after each call's rounds.
 * Skips (77) without an OpenCL platform. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <CL/cl.h>

#include "cl_exec.h"
#include "cl_wire.h"
#include "le.h"
#include "wire_cl_dispatch.h"

#define DEVICE ((uint64_t)HANDLE_CL_DEVICE << WIRE_HANDLE_KIND_SHIFT | 1)
#define ROUNDS 200
#define FIELDS_MAX 16
#define LONGEST 8192

static struct cl_exec x;
static uint64_t live[3];                /* context, queue, buffer */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static unsigned decoded;                /* requests that reached a handler */
static const char *golden;

static uint64_t next_random(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Serve @len bytes as call @id: 0 with a reply that starts with a cl_int,
 * or a refusal (< 0) with nothing sent. */
static int serve(uint32_t id, const uint8_t *payload, size_t len, cl_int *status, uint8_t *rest, size_t cap)
{
	struct wire_cursor cur;
	struct wire_msg reply;
	uint8_t *rep;
	int ret;

	wire_cursor_init(&cur, payload, len);
	wire_msg_init(&reply);
	ret = cl_exec_dispatch(&x, id, &cur, &reply);
	if (ret == 0) {
		decoded++;
		rep = malloc(reply.payload_len + 1);
		assert_non_null(rep);
		assert_int_equal(wire_msg_payload_copy(&reply, rep, reply.payload_len), reply.payload_len);
		assert_true(reply.payload_len >= 4);
		*status = (cl_int)le32_get(rep);
		if (rest)
			memcpy(rest, rep + 4, reply.payload_len - 4 < cap ? reply.payload_len - 4 : cap);
		free(rep);
	}
	wire_msg_release(&reply);
	return ret;
}

static uint64_t create(uint32_t id, struct wire_msg *m)
{
	uint8_t *req = malloc(m->payload_len + 1), rest[8];
	cl_int status = -1;

	assert_non_null(req);
	assert_int_equal(wire_msg_payload_copy(m, req, m->payload_len), m->payload_len);
	assert_int_equal(serve(id, req, m->payload_len, &status, rest, sizeof(rest)), 0);
	assert_int_equal(status, CL_SUCCESS);
	wire_msg_release(m);
	free(req);
	return le64_get(rest);
}

static void session_make(void)
{
	uint8_t dev[8];
	struct wire_msg m;

	le64_put(dev, DEVICE);
	wire_msg_init(&m);
	wire_cl_context_create_req_encode(&m, &(struct wire_cl_context_create_req){ .devices = { dev, 8 } });
	live[0] = create(WIRE_CALL_CL_CONTEXT_CREATE, &m);
	wire_msg_init(&m);
	wire_cl_queue_create_req_encode(&m, &(struct wire_cl_queue_create_req){ .context = live[0], .device = DEVICE });
	live[1] = create(WIRE_CALL_CL_QUEUE_CREATE, &m);
	wire_msg_init(&m);
	wire_cl_buffer_create_req_encode(&m, &(struct wire_cl_buffer_create_req){
						 .context = live[0], .flags = CL_MEM_READ_WRITE, .size = 4096 });
	live[2] = create(WIRE_CALL_CL_BUFFER_CREATE, &m);
}

/* The session still serves: the platform list answers CL_SUCCESS. */
static void still_serves(uint32_t after)
{
	cl_int status = -1;

	decoded--;              /* not a hostile one */
	if (serve(WIRE_CALL_CL_PLATFORM_LIST, NULL, 0, &status, NULL, 0) != 0 || status != CL_SUCCESS)
		fail_msg("after a hostile call %u the session does not answer (%d)", after, status);
}

static uint64_t pick(const uint64_t *v, size_t n)
{
	return v[next_random() % n];
}

/* A handle where @kind's go (0: any kind). */
static uint64_t hostile_handle(unsigned kind)
{
	const uint64_t kinds[] = { HANDLE_CL_PLATFORM, HANDLE_CL_DEVICE, HANDLE_CL_CONTEXT, HANDLE_CL_QUEUE,
				   HANDLE_CL_MEM, HANDLE_CL_EVENT };
	uint64_t r = next_random();

	switch (r % 6) {
	case 0: return 0;
	case 1: return DEVICE;
	case 2: return pick(kinds, 6) << WIRE_HANDLE_KIND_SHIFT | (r >> 40);
	case 3: return r;
	default:
		for (int i = 0; kind && i < 3; i++)
			if (live[i] >> WIRE_HANDLE_KIND_SHIFT == kind && r % 2)
				return live[i];
		return live[(r >> 8) % 3];
	}
}

static uint64_t hostile_number(void)
{
	const uint64_t v[] = { 0, 1, 2, 3, 8, 16, 64, 4095, 4096, 4097, 1u << 20, INT32_MAX, (uint64_t)INT32_MAX + 1,
			       UINT32_MAX, (uint64_t)UINT32_MAX + 1, INT64_MAX, UINT64_MAX, UINT64_MAX - 4095 };

	return next_random() % 4 ? pick(v, sizeof(v) / sizeof(v[0])) : next_random();
}

static void put(uint8_t *p, size_t *at, const void *v, size_t n)
{
	assert_true(*at + n <= LONGEST);
	memcpy(p + *at, v, n);
	*at += n;
}

static void put_u32(uint8_t *p, size_t *at, uint32_t v)
{
	uint8_t b[4];

	le32_put(b, v);
	put(p, at, b, 4);
}

static void put_u64(uint8_t *p, size_t *at, uint64_t v)
{
	uint8_t b[8];

	le64_put(b, v);
	put(p, at, b, 8);
}

/* A blob: empty, random bytes, records of handles and numbers (as wait
 * lists, device lists, sizes and properties are), or a string. */
static void put_blob(uint8_t *p, size_t *at)
{
	uint64_t r = next_random();
	uint32_t n = (uint32_t)(r >> 8) % 512;

	if (r % 4 == 0) {
		put_u32(p, at, 0);
		return;
	}
	if (r % 4 == 1) {
		put_u32(p, at, n);
		for (uint32_t i = 0; i < n; i++)
			p[(*at)++] = (uint8_t)next_random();
		return;
	}
	n = n % 16 * 8;
	put_u32(p, at, n);
	for (uint32_t i = 0; i < n; i += 8)
		put_u64(p, at, r % 4 == 2 ? hostile_handle(0) : hostile_number());
}

static void put_str(uint8_t *p, size_t *at)
{
	const char *v[] = { "", "k", "-cl-fast-relaxed-math", "-I /etc -D X=1", "no such kernel",
			    "__kernel void k(__global int *p) { p[0] = 1; }" };
	const char *str = v[next_random() % (sizeof(v) / sizeof(v[0]))];

	put_u32(p, at, (uint32_t)strlen(str));
	put(p, at, str, strlen(str));
}

static unsigned kind_named(const char *name)
{
	static const char *const names[] = { "cl_platform", "cl_device", "cl_context", "cl_queue", "cl_mem",
					     "cl_sampler", "cl_program", "cl_kernel", "cl_event" };

	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(name, names[i]))
			return HANDLE_CL_PLATFORM + i;
	return 0;
}

/* One request of @fields' layout ("handle:cl_mem", "u64", "blob"...). */
static size_t hostile_request(char fields[][32], int n, uint8_t *p)
{
	size_t at = 0;

	for (int i = 0; i < n; i++) {
		if (!strncmp(fields[i], "handle", 6))
			put_u64(p, &at, hostile_handle(fields[i][6] == ':' ? kind_named(fields[i] + 7) : 0));
		else if (!strcmp(fields[i], "u64"))
			put_u64(p, &at, hostile_number());
		else if (!strcmp(fields[i], "u32") || !strcmp(fields[i], "i32"))
			put_u32(p, &at, (uint32_t)hostile_number());
		else if (!strcmp(fields[i], "blob"))
			put_blob(p, &at);
		else if (!strcmp(fields[i], "str"))
			put_str(p, &at);
		else
			fail_msg("opencl.golden: a field of type %s", fields[i]);
	}
	return at;
}

/* Call @id's request fields from its golden line "ID NAME [flags] (A, B) -> (...)". */
static int request_fields(const char *line, char fields[][32])
{
	const char *open = strchr(line, '('), *close = open ? strchr(open, ')') : NULL;
	int n = 0;

	assert_non_null(close);
	for (const char *f = open + 1; f < close && n < FIELDS_MAX;) {
		size_t len = strcspn(f, ",)");

		while (*f == ' ')
			f++, len--;
		if (len) {
			assert_true(len < 32);
			memcpy(fields[n], f, len);
			fields[n++][len] = 0;
		}
		f += strcspn(f, ",)") + 1;
	}
	return n;
}

static void hostile_rounds(uint32_t id, const char *line)
{
	static uint8_t buf[LONGEST + 1];
	char fields[FIELDS_MAX][32];
	int n = request_fields(line, fields);
	cl_int status;

	serve(id, NULL, 0, &status, NULL, 0);
	for (unsigned r = 0; r < ROUNDS; r++) {
		size_t len = hostile_request(fields, n, buf);

		if (r % 20 == 0) {
			/* Cut short anywhere, or a byte more: refused. */
			for (size_t cut = 0; cut < len; cut += 1 + cut / 8)
				if (serve(id, buf, cut, &status, NULL, 0) == 0)
					fail_msg("call %u served a request cut to %zu of %zu bytes", id, cut, len);
			buf[len] = 0;
			if (serve(id, buf, len + 1, &status, NULL, 0) == 0)
				fail_msg("call %u served a request with a byte more", id);
		}
		if (serve(id, buf, len, &status, NULL, 0) != 0)
			fail_msg("call %u refused a request of its layout (%s)", id, line);
	}
	still_serves(id);
}

static void every_call(void **state)
{
	FILE *f = fopen(golden, "r");
	char line[512], release[512] = "";
	unsigned calls = 0;

	(void)state;
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		uint32_t id = (uint32_t)strtoul(line, NULL, 10);

		if (id < WIRE_API_OPENCL_FIRST || id > WIRE_API_OPENCL_LAST)
			continue;
		calls++;
		if (id == WIRE_CALL_CL_RELEASE)
			snprintf(release, sizeof(release), "%s", line);     /* last: it may end the live objects */
		else
			hostile_rounds(id, line);
	}
	fclose(f);
	assert_true(release[0]);
	hostile_rounds(WIRE_CALL_CL_RELEASE, release);
	assert_true(calls >= 40);      /* the table's calls, not an empty loop */
	assert_true(decoded >= calls * ROUNDS);
	printf("%u OpenCL calls, %u hostile requests served\n", calls, decoded);
}

/* A call id outside the table is refused, not served. */
static void unknown_call(void **state)
{
	cl_int status;

	(void)state;
	assert_true(serve(WIRE_API_OPENCL_LAST, NULL, 0, &status, NULL, 0) < 0);
	assert_true(serve(WIRE_CALL_CL_READ_FETCH + 1, NULL, 0, &status, NULL, 0) < 0);
	still_serves(0);
}

/* Serve encoded request @m as call @id: its cl_int, what follows it in @rest. */
static cl_int call(uint32_t id, struct wire_msg *m, uint8_t *rest, size_t cap)
{
	uint8_t *req = malloc(m->payload_len + 1);
	cl_int status = 1;

	assert_non_null(req);
	assert_int_equal(wire_msg_payload_copy(m, req, m->payload_len), m->payload_len);
	assert_int_equal(serve(id, req, m->payload_len, &status, rest, cap), 0);
	wire_msg_release(m);
	free(req);
	return status;
}

static uint64_t event_next(void)
{
	return (uint64_t)HANDLE_CL_EVENT << WIRE_HANDLE_KIND_SHIFT | handle_table_next_serial(x.handles, HANDLE_CL_EVENT);
}

static uint64_t user_event(void)
{
	uint64_t ev = event_next();
	struct wire_msg m;

	wire_msg_init(&m);
	wire_cl_user_event_create_req_encode(&m, &(struct wire_cl_user_event_create_req){ live[0], ev });
	assert_int_equal(call(WIRE_CALL_CL_USER_EVENT_CREATE, &m, NULL, 0), CL_SUCCESS);
	return ev;
}

static void user_event_set(uint64_t ev)
{
	struct wire_msg m;

	wire_msg_init(&m);
	wire_cl_user_event_set_status_req_encode(&m, &(struct wire_cl_user_event_set_status_req){ ev, CL_COMPLETE });
	assert_int_equal(call(WIRE_CALL_CL_USER_EVENT_SET_STATUS, &m, NULL, 0), CL_SUCCESS);
}

/* A lazy read of @size bytes at @offset of the live buffer after @wait (0: none), as event @ev. */
static cl_int read_lazy(uint64_t offset, uint64_t size, uint64_t wait, uint64_t ev)
{
	uint8_t w[8];
	struct wire_msg m;

	le64_put(w, wait);
	wire_msg_init(&m);
	wire_cl_enqueue_read_buffer_lazy_req_encode(&m, &(struct wire_cl_enqueue_read_buffer_lazy_req){
		live[1], live[2], offset, size, { w, wait ? 8 : 0 }, ev });
	return call(WIRE_CALL_CL_ENQUEUE_READ_BUFFER_LAZY, &m, NULL, 0);
}

/* A fetch of a read's bytes: its cl_int; the bytes (after their length) in @rest. */
static cl_int fetch(uint64_t ev, uint64_t offset, uint64_t size, uint8_t *rest, size_t cap)
{
	struct wire_msg m;

	wire_msg_init(&m);
	wire_cl_read_fetch_req_encode(&m, &(struct wire_cl_read_fetch_req){ ev, offset, size });
	return call(WIRE_CALL_CL_READ_FETCH, &m, rest, cap);
}

/* Non-blocking reads: the bytes after the read's wait list completes, once;
 * fetches out of the read's range, of another event or of one fetched
 * already refused; a read's error as the fetch's answer; a read released
 * while the platform still writes it freed when it completes. */
static void lazy_reads(void **state)
{
	static uint8_t pattern[4096], got[4 + 4096];
	uint64_t gate, ev, failed, orphan;
	struct wire_msg m;

	(void)state;
	for (unsigned i = 0; i < sizeof(pattern); i++)
		pattern[i] = (uint8_t)(i * 7 + 3);
	wire_msg_init(&m);
	wire_cl_enqueue_write_buffer_req_encode(&m, &(struct wire_cl_enqueue_write_buffer_req){
		.queue = live[1], .mem = live[2], .data = { pattern, sizeof(pattern) } });
	assert_int_equal(call(WIRE_CALL_CL_ENQUEUE_WRITE_BUFFER, &m, NULL, 0), CL_SUCCESS);

	assert_int_equal(read_lazy(0, 4096, 0, 0), CL_INVALID_VALUE);           /* no event to fetch by */
	assert_int_equal(read_lazy(0, 0, 0, event_next()), CL_INVALID_VALUE);
	assert_int_equal(read_lazy(0, CL_WIRE_LAZY_READ_MAX + 1, 0, event_next()), CL_OUT_OF_HOST_MEMORY);
	assert_int_equal(x.lazy_read_bytes, 0);

	gate = user_event();
	ev = event_next();
	assert_int_equal(read_lazy(0, 4096, gate, ev), CL_SUCCESS);
	assert_int_equal(x.lazy_read_bytes, 4096);
	user_event_set(gate);
	assert_int_equal(fetch(ev, 0, 0, NULL, 0), CL_INVALID_VALUE);
	assert_int_equal(fetch(ev, 4096, 1, NULL, 0), CL_INVALID_VALUE);
	assert_int_equal(fetch(ev, 1, 4096, NULL, 0), CL_INVALID_VALUE);
	assert_int_equal(fetch(ev, UINT64_MAX, 2, NULL, 0), CL_INVALID_VALUE);
	assert_int_equal(fetch(ev, 0, UINT64_MAX, NULL, 0), CL_INVALID_VALUE);
	assert_int_equal(fetch(gate, 0, 1, NULL, 0), CL_INVALID_EVENT);          /* no read */
	assert_int_equal(fetch(ev + 1000, 0, 1, NULL, 0), CL_INVALID_EVENT);     /* unknown */
	assert_int_equal(fetch(live[2], 0, 1, NULL, 0), CL_INVALID_EVENT);       /* another kind */
	assert_int_equal(fetch(ev, 0, 1024, got, sizeof(got)), CL_SUCCESS);
	assert_int_equal(le32_get(got), 1024);
	assert_memory_equal(got + 4, pattern, 1024);
	assert_int_equal(fetch(ev, 1024, 3072, got, sizeof(got)), CL_SUCCESS);
	assert_int_equal(le32_get(got), 3072);
	assert_memory_equal(got + 4, pattern + 1024, 3072);
	assert_int_equal(fetch(ev, 0, 1, NULL, 0), CL_INVALID_EVENT);            /* fetched already */
	assert_int_equal(x.lazy_read_bytes, 0);

	/* Past the buffer's end: the platform refuses the read, the fetch answers it. */
	failed = event_next();
	assert_true(read_lazy(4000, 200, 0, failed) < 0);
	assert_true(fetch(failed, 0, 200, NULL, 0) < 0);
	assert_int_equal(x.lazy_read_bytes, 0);

	/* Released before its wait list completes: the platform's to free. */
	gate = user_event();
	orphan = event_next();
	assert_int_equal(read_lazy(0, 4096, gate, orphan), CL_SUCCESS);
	wire_msg_init(&m);
	wire_cl_release_req_encode(&m, &(struct wire_cl_release_req){ orphan });
	assert_int_equal(call(WIRE_CALL_CL_RELEASE, &m, NULL, 0), CL_SUCCESS);
	assert_int_equal(x.lazy_read_bytes, 0);
	assert_int_equal(fetch(orphan, 0, 4096, NULL, 0), CL_INVALID_EVENT);
	user_event_set(gate);
	wire_msg_init(&m);
	wire_cl_finish_req_encode(&m, &(struct wire_cl_finish_req){ live[1] });
	assert_int_equal(call(WIRE_CALL_CL_FINISH, &m, NULL, 0), CL_SUCCESS);
	still_serves(0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(unknown_call),
		cmocka_unit_test(lazy_reads),
		cmocka_unit_test(every_call),
	};
	int ret;

	if (argc != 2) {
		fprintf(stderr, "usage: %s OPENCL_GOLDEN\n", argv[0]);
		return 2;
	}
	golden = argv[1];
	cl_exec_init(&x, NULL);
	if (cl_exec_open(&x)) {
		printf("no OpenCL platform: skipped\n");
		return 77;
	}
	session_make();
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	cl_exec_close(&x);
	return ret;
}
