/* The shared-memory channel: messages through the rings (larger than a ring
 * too), and a hostile peer: an unsealed memfd, a pipe for an eventfd, a
 * scribbled header, a peer that goes away. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "shm_chan.h"
#include "shm_echo.h"

#define RING SHM_RING_MIN

struct pair {
	int sock[2];                    /* [0] guest, [1] worker */
	struct shm_chan guest, worker;
};

static void pair_open(struct pair *p)
{
	int fds[SHM_CHAN_FDS], got[SHM_CHAN_FDS];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->sock), 0);
	assert_int_equal(shm_chan_create(&p->guest, RING, p->sock[0]), 0);
	shm_chan_fds(&p->guest, fds);
	assert_int_equal(shm_fds_send(p->sock[0], fds, SHM_CHAN_FDS), 0);
	assert_int_equal(shm_fds_recv(p->sock[1], got, SHM_CHAN_FDS, 1000), 0);
	assert_int_equal(shm_chan_attach(&p->worker, got, RING, p->sock[1], NULL), 0);
}

static void pair_close(struct pair *p)
{
	shm_chan_close(&p->guest);
	shm_chan_close(&p->worker);
	close(p->sock[0]);
	close(p->sock[1]);
}

static void test_echo(void **state)
{
	static const uint32_t sizes[] = { 1, 7, 4096, RING - 4, RING, 3 * RING + 17, 1u << 20 };
	struct pair p;
	pthread_t t;

	(void)state;
	pair_open(&p);
	assert_int_equal(pthread_create(&t, NULL, shm_echo, &p.worker), 0);
	for (int round = 0; round < 3; round++) {
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			uint32_t len = sizes[i], back = 0;
			uint8_t *out = malloc(len), *in = malloc(len);
			struct iovec iov[2] = { { &len, sizeof(len) }, { out, len } };

			for (uint32_t j = 0; j < len; j++)
				out[j] = (uint8_t)(j * 31 + i + round);
			assert_int_equal(shm_chan_send(&p.guest, iov, 2), 0);
			assert_int_equal(shm_chan_recv(&p.guest, &back, sizeof(back)), 0);
			assert_int_equal(back, len);
			assert_int_equal(shm_chan_recv(&p.guest, in, len), 0);
			assert_memory_equal(in, out, len);
			free(in);
			free(out);
		}
	}
	{
		uint32_t zero = 0;
		struct iovec iov = { &zero, sizeof(zero) };

		assert_int_equal(shm_chan_send(&p.guest, &iov, 1), 0);
	}
	pthread_join(t, NULL);
	pair_close(&p);
}

static void test_unsealed_refused(void **state)
{
	int fds[SHM_CHAN_FDS], pipefd[2];
	struct shm_chan c;

	(void)state;
	/* A memfd the guest could shrink under the worker's mapping. */
	fds[0] = memfd_create("unsealed", MFD_CLOEXEC);
	assert_true(fds[0] >= 0);
	assert_int_equal(ftruncate(fds[0], 4096 + 2 * RING), 0);
	fds[1] = eventfd(0, EFD_CLOEXEC);
	fds[2] = eventfd(0, EFD_CLOEXEC);
	assert_int_equal(shm_chan_attach(&c, fds, RING, -1, NULL), -EINVAL);
	/* A sealed one, but a pipe where an eventfd belongs. */
	fds[0] = shm_memfd_create("sealed", 4096 + 2 * RING);
	assert_true(fds[0] >= 0);
	assert_int_equal(pipe(pipefd), 0);
	fds[1] = eventfd(0, EFD_CLOEXEC);
	fds[2] = pipefd[1];
	assert_int_equal(shm_chan_attach(&c, fds, RING, -1, NULL), -EINVAL);
	close(pipefd[0]);
	/* Too small for the rings it claims. */
	fds[0] = shm_memfd_create("small", 4096);
	fds[1] = eventfd(0, EFD_CLOEXEC);
	fds[2] = eventfd(0, EFD_CLOEXEC);
	assert_int_equal(shm_chan_attach(&c, fds, RING, -1, NULL), -EINVAL);
}

static void test_scribbled_header(void **state)
{
	struct pair p;
	int fds[SHM_CHAN_FDS];
	uint8_t *page, buf[16];
	int memfd;

	(void)state;
	pair_open(&p);
	/* The guest keeps its memfd in this test to reach the shared page. */
	shm_chan_fds(&p.guest, fds);
	memfd = fds[0];
	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	assert_true(page != MAP_FAILED);
	memset(page + 16, 0x7f, 4096 - 16);     /* every counter and flag, past the magic */
	assert_int_equal(shm_chan_recv(&p.worker, buf, sizeof(buf)), -EPROTO);
	{
		struct iovec iov = { buf, sizeof(buf) };

		assert_int_equal(shm_chan_send(&p.worker, &iov, 1), -EPROTO);
	}
	munmap(page, 4096);
	pair_close(&p);
}

static void *recv_one(void *arg)
{
	struct shm_chan *c = arg;
	uint8_t b;

	return (void *)(intptr_t)shm_chan_recv(c, &b, 1);
}

static void test_peer_gone(void **state)
{
	struct pair p;
	pthread_t t;
	void *ret;

	(void)state;
	pair_open(&p);
	p.worker.spin_ns = 1000;
	assert_int_equal(pthread_create(&t, NULL, recv_one, &p.worker), 0);
	usleep(20000);                  /* the worker is asleep on its eventfd */
	close(p.sock[0]);
	p.sock[0] = -1;
	pthread_join(t, &ret);
	assert_int_equal((int)(intptr_t)ret, -EPIPE);
	p.guest.sock = -1;
	pair_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_echo),
		cmocka_unit_test(test_unsealed_refused),
		cmocka_unit_test(test_scribbled_header),
		cmocka_unit_test(test_peer_gone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
