/* common/recv_ahead.h over unix socket pairs: many messages from one read,
 * messages split across reads, descriptors kept with the byte they came on,
 * and descriptors nobody claims closed. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/socket.h>

#include <cmocka.h>

#include "recv_ahead.h"
#include "shm_chan.h"

static int sv[2];

static int setup(void **state)
{
	(void)state;
	return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
}

static int teardown(void **state)
{
	(void)state;
	close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	return 0;
}

static void send_all(const void *p, size_t n)
{
	assert_int_equal(send(sv[1], p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static unsigned open_fds(void)
{
	unsigned n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* @n bytes, whatever the reads give each time; -EAGAIN fails. */
static void take_exact(struct recv_ahead *r, void *out, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = recv_ahead_take(r, (uint8_t *)out + got, n - got);

		assert_true(k > 0);
		got += (size_t)k;
	}
}

/* 2000 small messages sent at once come from the read-ahead: once the
 * first is taken the writer is gone, and every other is still there. */
static void test_many_small(void **state)
{
	enum { COUNT = 2000, SIZE = 24 };
	uint8_t *all = malloc(COUNT * SIZE), one[SIZE];
	struct recv_ahead r;

	(void)state;
	for (unsigned i = 0; i < COUNT * SIZE; i++)
		all[i] = (uint8_t)(i * 13);
	assert_int_equal(recv_ahead_open(&r, sv[0], NULL, 64 << 10), 0);
	send_all(all, COUNT * SIZE);
	take_exact(&r, one, SIZE);
	assert_memory_equal(one, all, SIZE);
	assert_int_equal(recv_ahead_buffered(&r), COUNT * SIZE - SIZE);
	assert_true(recv_ahead_ready(&r));
	close(sv[1]);
	sv[1] = -1;
	for (unsigned i = 1; i < COUNT; i++) {
		take_exact(&r, one, SIZE);
		assert_memory_equal(one, all + i * SIZE, SIZE);
	}
	assert_int_equal(recv_ahead_take(&r, one, 1), -ECONNRESET);
	free(all);
	recv_ahead_close(&r);
}

/* A message in three writes: what came is kept, -EAGAIN in between. */
static void test_split(void **state)
{
	const char msg[] = "0123456789abcdefghijklmnopqrstuvwxyz";
	char out[sizeof(msg)] = { 0 };
	struct recv_ahead r;
	ssize_t k;

	(void)state;
	assert_int_equal(recv_ahead_open(&r, sv[0], NULL, 4096), 0);
	assert_int_equal(recv_ahead_take(&r, out, 10), -EAGAIN);
	assert_false(recv_ahead_ready(&r));
	send_all(msg, 5);
	k = recv_ahead_take(&r, out, 10);
	assert_int_equal(k, 5);
	assert_int_equal(recv_ahead_take(&r, out + 5, 5), -EAGAIN);
	send_all(msg + 5, 20);
	take_exact(&r, out + 5, 5);
	send_all(msg + 25, sizeof(msg) - 25);
	take_exact(&r, out + 10, sizeof(msg) - 10);
	assert_string_equal(out, msg);
	close(sv[1]);
	sv[1] = -1;
	assert_int_equal(recv_ahead_take(&r, out, 1), -ECONNRESET);
	recv_ahead_close(&r);
}

/* Takes larger than the buffer go around it, after what was read ahead. */
static void test_large(void **state)
{
	static uint8_t big[200000], out[200000];
	struct recv_ahead r;
	size_t sent = 0, have = 0;
	bool open = true;

	(void)state;
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7 + 1);
	assert_int_equal(recv_ahead_open(&r, sv[0], NULL, 4096), 0);
	send_all(big, 100);
	take_exact(&r, out, 10);
	have = 10;
	sent = 100;
	for (;;) {
		ssize_t t;

		if (sent < sizeof(big)) {
			ssize_t k = send(sv[1], big + sent, sizeof(big) - sent, MSG_DONTWAIT);

			if (k > 0)
				sent += (size_t)k;
		} else if (open) {
			close(sv[1]);
			sv[1] = -1;
			open = false;
		}
		t = recv_ahead_take(&r, out + have, sizeof(out) - have);
		if (t == -ECONNRESET || (t == 0 && have == sizeof(out)))
			break;
		if (t == -EAGAIN)
			continue;
		assert_true(t > 0);
		have += (size_t)t;
	}
	assert_int_equal(have, sizeof(big));
	assert_memory_equal(out, big, sizeof(big));
	recv_ahead_close(&r);
}

/* A request, its descriptor on a byte of its own, the next request: all
 * in the read-ahead; the descriptor is taken with its byte. */
static void test_fds_kept(void **state)
{
	struct recv_ahead r;
	char out[8] = { 0 };
	int pass[2], fd = -1;

	(void)state;
	assert_int_equal(pipe(pass), 0);
	assert_int_equal(recv_ahead_open(&r, sv[0], NULL, 4096), 0);
	send_all("REQ", 3);
	assert_int_equal(shm_fds_send(sv[1], &pass[1], 1), 0);
	close(pass[1]);
	send_all("NEXT", 4);
	take_exact(&r, out, 3);
	assert_string_equal(out, "REQ");
	assert_int_equal(recv_ahead_fds_take(&r, &fd, 1, 100), 0);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	assert_int_equal(read(pass[0], out, 1), 1);
	close(fd);
	close(pass[0]);
	memset(out, 0, sizeof(out));
	take_exact(&r, out, 4);
	assert_string_equal(out, "NEXT");
	/* Nothing read ahead: the descriptor is waited for on the socket. */
	assert_int_equal(recv_ahead_fds_take(&r, &fd, 1, 50), -ETIMEDOUT);
	recv_ahead_close(&r);
}

/* Descriptors on a byte a request takes, or given where none were asked
 * for, or too few: closed, never kept. */
static void test_fds_unclaimed(void **state)
{
	struct recv_ahead r;
	char out[8];
	int pass[2], two[2], fd = -1;
	unsigned before;

	(void)state;
	assert_int_equal(pipe(pass), 0);
	before = open_fds();
	assert_int_equal(recv_ahead_open(&r, sv[0], NULL, 4096), 0);
	/* Taken as bytes. */
	send_all("AB", 2);
	assert_int_equal(shm_fds_send(sv[1], &pass[0], 1), 0);
	take_exact(&r, out, 3);
	assert_int_equal(open_fds(), before);
	/* A byte without descriptors where one is asked for. */
	send_all("Z", 1);
	assert_int_equal(recv_ahead_fds_take(&r, &fd, 1, 100), -EPROTO);
	/* Two where one is asked for (read ahead with a byte before them). */
	two[0] = pass[0];
	two[1] = pass[1];
	send_all("C", 1);
	assert_int_equal(shm_fds_send(sv[1], two, 2), 0);
	take_exact(&r, out, 1);
	assert_int_equal(recv_ahead_fds_take(&r, &fd, 1, 100), -EPROTO);
	assert_int_equal(open_fds(), before);
	/* Left unclaimed at the close. */
	send_all("D", 1);
	assert_int_equal(shm_fds_send(sv[1], &pass[0], 1), 0);
	take_exact(&r, out, 1);
	recv_ahead_close(&r);
	assert_int_equal(open_fds(), before);
	close(pass[0]);
	close(pass[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_many_small, setup, teardown),
		cmocka_unit_test_setup_teardown(test_split, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fds_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fds_unclaimed, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
