/* The wire codec: framing, primitives and generated encoders/decoders. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "wire.h"
#include "wire_calls.h"

/* Flatten a finished message into one buffer, as a receiver reads it. */
static size_t msg_flatten(struct wire_msg *m, const struct wire_header *h, uint8_t *out, size_t cap)
{
	struct iovec iov[WIRE_MSG_IOV_MAX];
	int n = wire_msg_finish(m, h, iov);
	size_t len = 0;

	assert_true(n > 0);
	for (int i = 0; i < n; i++) {
		assert_true(len + iov[i].iov_len <= cap);
		memcpy(out + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	return len;
}

static void test_header_roundtrip(void **state)
{
	struct wire_header h = { WIRE_MAGIC, WIRE_VERSION, WIRE_F_REPLY, 42, 1234, 0x1122334455667788ull, 0x0100000000000001ull };
	struct wire_header back;
	uint8_t raw[WIRE_HEADER_SIZE];

	wire_header_encode(raw, &h);
	/* Little endian on the wire, whatever the host. */
	assert_int_equal(raw[0], 0x54);
	assert_int_equal(raw[16], 0x88);
	assert_int_equal(wire_header_decode(raw, &back), 0);
	assert_memory_equal(&h, &back, sizeof(h));
	raw[0] ^= 1;
	assert_int_equal(wire_header_decode(raw, &back), -EPROTO);
	raw[0] ^= 1;
	raw[4] = 9;
	assert_int_equal(wire_header_decode(raw, &back), -EPROTO);
	raw[4] = 1;
	h.length = WIRE_PAYLOAD_MAX + 1;
	wire_header_encode(raw, &h);
	assert_int_equal(wire_header_decode(raw, &back), -EMSGSIZE);
}

static void test_call_roundtrip(void **state)
{
	static uint8_t big[100000], flat[200000];
	struct wire_launch_kernel_req req = { 0 }, back;
	struct wire_header h = { .call = WIRE_CALL_LAUNCH_KERNEL, .seq = 7 }, hb;
	struct wire_msg m;
	struct wire_cursor cur;
	size_t len;

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);
	req.function = 0x0400000000000009ull;
	req.grid_x = 3;
	req.block_x = 256;
	req.stream = 2;
	req.args = (struct wire_blob){ big, sizeof(big) };  /* referenced, not copied */
	wire_msg_init(&m);
	wire_launch_kernel_req_encode(&m, &req);
	len = msg_flatten(&m, &h, flat, sizeof(flat));
	assert_int_equal(wire_header_decode(flat, &hb), 0);
	assert_int_equal(hb.length, len - WIRE_HEADER_SIZE);
	wire_cursor_init(&cur, flat + WIRE_HEADER_SIZE, hb.length);
	assert_int_equal(wire_launch_kernel_req_decode(&cur, &back), 0);
	assert_int_equal(back.function, req.function);
	assert_int_equal(back.grid_x, 3);
	assert_int_equal(back.block_x, 256);
	assert_int_equal(back.stream, 2);
	assert_int_equal(back.args.len, sizeof(big));
	assert_memory_equal(back.args.ptr, big, sizeof(big));
	/* Every shorter payload is refused, and so is a longer one. */
	for (size_t cut = 0; cut < hb.length; cut += 997) {
		wire_cursor_init(&cur, flat + WIRE_HEADER_SIZE, cut);
		assert_int_equal(wire_launch_kernel_req_decode(&cur, &back), -EPROTO);
	}
	wire_cursor_init(&cur, flat + WIRE_HEADER_SIZE, hb.length + 1);
	assert_int_equal(wire_launch_kernel_req_decode(&cur, &back), -EPROTO);
	wire_msg_release(&m);
}

static void test_strings(void **state)
{
	struct wire_module_get_function_req req = { .module = 5 }, back;
	uint8_t flat[20000];
	struct wire_header h = { .call = WIRE_CALL_MODULE_GET_FUNCTION };
	struct wire_msg m;
	struct wire_cursor cur;
	size_t len;

	strcpy(req.name, "_Z6vecaddPKfS0_Pfi");
	wire_msg_init(&m);
	wire_module_get_function_req_encode(&m, &req);
	len = msg_flatten(&m, &h, flat, sizeof(flat));
	wire_cursor_init(&cur, flat + WIRE_HEADER_SIZE, len - WIRE_HEADER_SIZE);
	assert_int_equal(wire_module_get_function_req_decode(&cur, &back), 0);
	assert_string_equal(back.name, req.name);
	/* An embedded NUL is refused. */
	flat[WIRE_HEADER_SIZE + 8 + 4 + 3] = 0;
	wire_cursor_init(&cur, flat + WIRE_HEADER_SIZE, len - WIRE_HEADER_SIZE);
	assert_int_equal(wire_module_get_function_req_decode(&cur, &back), -EPROTO);
	/* A length over the cap is refused before any copy. */
	flat[WIRE_HEADER_SIZE + 8] = 0xff;
	flat[WIRE_HEADER_SIZE + 9] = 0xff;
	wire_cursor_init(&cur, flat + WIRE_HEADER_SIZE, len - WIRE_HEADER_SIZE);
	assert_int_equal(wire_module_get_function_req_decode(&cur, &back), -EPROTO);
	wire_msg_release(&m);
}

static void test_check_unknown(void **state)
{
	uint8_t zero[64] = { 0 };

	assert_int_equal(wire_request_check(65000, zero, sizeof(zero)), -ENOSYS);
	assert_int_equal(wire_request_check(WIRE_CALL_MEM_ALLOC, zero, 8), 0);
	assert_int_equal(wire_request_check(WIRE_CALL_MEM_ALLOC, zero, 7), -EPROTO);
	assert_non_null(wire_call_name(WIRE_CALL_MEM_ALLOC));
	assert_string_equal(wire_call_name(WIRE_CALL_MEM_ALLOC), "mem_alloc");
	assert_null(wire_call_name(9999));
}

static void test_socket_io(void **state)
{
	int sv[2];
	uint8_t buf[5000], got[5000];
	struct iovec iov[2] = { { buf, 1000 }, { buf + 1000, 4000 } };

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)i;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(wire_send(sv[0], iov, 2), 0);
	assert_int_equal(wire_recv_exact(sv[1], got, 100), 0);
	assert_int_equal(wire_recv_discard(sv[1], 900), 0);
	assert_int_equal(wire_recv_exact(sv[1], got + 1000, 4000), 0);
	assert_memory_equal(got + 1000, buf + 1000, 4000);
	close(sv[0]);
	assert_int_equal(wire_recv_exact(sv[1], got, 1), -ECONNRESET);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_roundtrip),
		cmocka_unit_test(test_call_roundtrip),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_check_unknown),
		cmocka_unit_test(test_socket_io),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
