/* Fuzz target for the supervisor's pre-authentication stage
 * (replayer/daemon/preauth.h): the bytes a connection sends before its
 * hello, through a socket pair, cut into two writes where the input's first
 * byte says. The stage must answer or drop, never read past a frame, and
 * hand over only a whole hello (or host_func_join) frame that fits its
 * buffer; that frame then goes through the generated decoder, as the
 * supervisor does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preauth.h"
#include "wire_calls.h"

static void drain(int fd)
{
	uint8_t sink[4096];

	while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
		;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct wire_hello_req hello;
	static struct wire_host_func_join_req join;
	struct preauth_config cfg = { .timeout_ms = 1000, .per_source_max = 4, .max = 4 };
	struct preauth pa;
	struct preauth_conn *c;
	enum preauth_event ev = PREAUTH_MORE;
	size_t cut;
	int sv[2];

	if (size < 1 || size > 256 * 1024 || preauth_init(&pa, &cfg))
		return 0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		preauth_release(&pa);
		return 0;
	}
	c = &pa.conns[0];
	c->fd = sv[0];
	c->payload = malloc(PREAUTH_PAYLOAD_MAX);
	pa.used = 1;
	cut = (size_t)data[0] * (size - 1) / 255;
	data++;
	size--;
	for (int part = 0; part < 2 && ev == PREAUTH_MORE; part++) {
		const uint8_t *p = part ? data + cut : data;
		size_t n = part ? size - cut : cut;

		if (n && write(sv[1], p, n) != (ssize_t)n)
			break;
		if (part)
			shutdown(sv[1], SHUT_WR);
		ev = preauth_readable(&pa, c);
		drain(sv[1]);
		if (ev == PREAUTH_MORE && part)
			ev = preauth_readable(&pa, c);      /* sees the end */
	}
	if (ev == PREAUTH_HELLO) {
		struct wire_cursor cur;

		if (c->h.call != WIRE_CALL_HELLO || c->h.length > PREAUTH_PAYLOAD_MAX)
			abort();
		wire_cursor_init(&cur, c->payload, c->h.length);
		(void)wire_hello_req_decode(&cur, &hello);
	}
	if (ev == PREAUTH_JOIN) {
		struct wire_cursor cur;

		if (c->h.call != WIRE_CALL_HOST_FUNC_JOIN || c->h.length > PREAUTH_PAYLOAD_MAX)
			abort();
		wire_cursor_init(&cur, c->payload, c->h.length);
		(void)wire_host_func_join_req_decode(&cur, &join);
	}
	if (ev == PREAUTH_DROP && c->fd >= 0)
		abort();
	preauth_release(&pa);
	close(sv[1]);
	return 0;
}
