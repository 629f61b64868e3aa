/* A worker's host memory per session (issue 12, item 8: "a 64 MiB message
 * grows a worker by 128 MB outside the quota"). A hostile guest sends the
 * largest messages the protocol allows (an image to load, a copy to the
 * device, a copy back) and then only small ones: what the worker keeps
 * afterwards (its resident set, from /proc) must stay small; the buffers a
 * large message needed are given back after it.
 *
 * Usage: test_worker_memory PATH/TO/ternd. Starts its own ternd (sim,
 * unix socket in a temporary folder).
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <cuda.h>

#include "transport.h"
#include "wire.h"
#include "wire_calls.h"

/* What a worker may keep past its idle size once large messages are over. */
#define KEEP_MAX (16ull << 20)

static const char *ternd_path;
static char dir[64], sock_url[160], control[128];
static pid_t ternd_pid;
static uint64_t cur_ctx;        /* the context named in the requests' headers */

static int request_send(int fd, uint32_t call, uint64_t seq, const struct wire_msg *body)
{
	struct wire_msg m = *body;
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .call = call, .seq = seq, .ctx = cur_ctx };
	int n = wire_msg_finish(&m, &h, iov);

	return wire_send(fd, iov, n);
}

/* Read a reply: its status, and the u64 after it in *@out (if any). */
static uint32_t reply_status(int fd, uint64_t seq, uint64_t *out)
{
	uint8_t raw[WIRE_HEADER_SIZE], *body;
	struct wire_header h;
	uint32_t status;

	assert_int_equal(wire_recv_exact(fd, raw, sizeof(raw)), 0);
	assert_int_equal(wire_header_decode(raw, &h), 0);
	assert_int_equal(h.seq, seq);
	assert_true(h.length >= 4);
	body = malloc(h.length);
	assert_non_null(body);
	assert_int_equal(wire_recv_exact(fd, body, h.length), 0);
	memcpy(&status, body, 4);
	if (out && h.length >= 12)
		memcpy(out, body + 4, 8);
	free(body);
	return status;
}

static uint32_t call(int fd, uint32_t c, uint64_t seq, struct wire_msg *m, uint64_t *out)
{
	assert_int_equal(request_send(fd, c, seq, m), 0);
	return reply_status(fd, seq, out);
}

/* The worker: ternd's only child. */
static pid_t worker_pid(void)
{
	char path[64], buf[256];
	FILE *f;
	long pid = 0;

	for (int i = 0; i < 200 && !pid; i++) {
		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)ternd_pid, (int)ternd_pid);
		f = fopen(path, "r");
		if (f) {
			if (fgets(buf, sizeof(buf), f))
				pid = strtol(buf, NULL, 10);
			fclose(f);
		}
		if (!pid)
			usleep(10000);
	}
	return (pid_t)pid;
}

static uint64_t rss_of(pid_t pid)
{
	char path[64], line[256];
	uint64_t kb = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = strtoull(line + 6, NULL, 10);
	fclose(f);
	return kb << 10;
}

static void test_large_messages_given_back(void **state)
{
	const uint32_t big = WIRE_PAYLOAD_MAX - 4096;
	struct transport_url url;
	struct wire_hello_req hello = { .protocol = WIRE_PROTOCOL, .pid = (uint32_t)getpid() };
	struct wire_mem_alloc_req ar = { .bytes = 32ull << 20 };
	struct wire_msg m;
	uint8_t *junk = malloc(big);
	uint64_t seq = 1, addr = 0, idle, peak = 0, after;
	pid_t w;
	int fd;

	(void)state;
	assert_non_null(junk);
	/* An ELF header and nothing of an ELF after it: refused once read and
	 * copied (the image's own headers are all the driver API gives). */
	memset(junk, 'x', big);
	memcpy(junk, "\x7f" "ELF", 4);
	assert_int_equal(transport_url_parse(sock_url, &url), 0);
	fd = transport_connect(&url);
	assert_true(fd >= 0);
	snprintf(hello.session, sizeof(hello.session), "memory-%d", (int)getpid());
	snprintf(hello.host, sizeof(hello.host), "localhost");
	/* This ternd asks for no token: the challenge's nonce binds nothing. */
	wire_msg_init(&m);
	assert_int_equal(call(fd, WIRE_CALL_CHALLENGE, 0, &m, NULL), CUDA_SUCCESS);
	wire_hello_req_encode(&m, &hello);
	assert_int_equal(call(fd, WIRE_CALL_HELLO, seq++, &m, NULL), CUDA_SUCCESS);
	wire_msg_reset(&m);
	wire_put_i32(&m, 0);
	assert_int_equal(call(fd, WIRE_CALL_PRIMARY_CTX_RETAIN, seq++, &m, &cur_ctx), CUDA_SUCCESS);
	wire_msg_reset(&m);
	wire_mem_alloc_req_encode(&m, &ar);
	assert_int_equal(call(fd, WIRE_CALL_MEM_ALLOC, seq++, &m, &addr), CUDA_SUCCESS);
	w = worker_pid();
	assert_true(w > 0);
	/* The sim's device memory is the worker's too: filled once, before
	 * the idle figure, through a small request at a time. */
	for (uint64_t off = 0; off < ar.bytes; off += 512u << 10) {
		struct wire_memcpy_htod_req hd = { .dst = addr + off, .data = { junk, 512u << 10 } };

		wire_msg_reset(&m);
		wire_memcpy_htod_req_encode(&m, &hd);
		assert_int_equal(call(fd, WIRE_CALL_MEMCPY_HTOD, seq++, &m, NULL), CUDA_SUCCESS);
	}
	idle = rss_of(w);

	for (int round = 0; round < 3; round++) {
		/* An image as large as a message may be. */
		struct wire_module_load_data_req ml = { .image = { junk, big - 64 } };
		struct wire_memcpy_htod_req hd = { .dst = addr, .data = { junk, 32u << 20 } };
		struct wire_memcpy_dtoh_req dh = { .src = addr, .bytes = 32u << 20 };
		uint64_t r;

		wire_msg_reset(&m);
		wire_module_load_data_req_encode(&m, &ml);
		assert_int_not_equal(call(fd, WIRE_CALL_MODULE_LOAD_DATA, seq++, &m, NULL), CUDA_SUCCESS);
		r = rss_of(w);
		peak = r > peak ? r : peak;
		wire_msg_reset(&m);
		wire_memcpy_htod_req_encode(&m, &hd);
		assert_int_equal(call(fd, WIRE_CALL_MEMCPY_HTOD, seq++, &m, NULL), CUDA_SUCCESS);
		wire_msg_reset(&m);
		wire_memcpy_dtoh_req_encode(&m, &dh);
		assert_int_equal(call(fd, WIRE_CALL_MEMCPY_DTOH, seq++, &m, NULL), CUDA_SUCCESS);
		r = rss_of(w);
		peak = r > peak ? r : peak;
	}
	/* Small calls after: what the worker still holds is what it keeps. */
	for (int i = 0; i < 4; i++) {
		wire_msg_reset(&m);
		assert_int_equal(call(fd, WIRE_CALL_DEVICE_GET_COUNT, seq++, &m, NULL), CUDA_SUCCESS);
	}
	after = rss_of(w);
	printf("worker resident: %llu MiB idle (its 32 MiB of device memory filled), %llu MiB at most after a large message, %llu MiB kept after "
	       "(%llu MiB over idle; at most %llu allowed)\n",
	       (unsigned long long)(idle >> 20), (unsigned long long)(peak >> 20), (unsigned long long)(after >> 20),
	       (unsigned long long)((after > idle ? after - idle : 0) >> 20), (unsigned long long)(KEEP_MAX >> 20));
	assert_true(after <= idle + KEEP_MAX);
	wire_msg_release(&m);
	close(fd);
	free(junk);
}

static int ternd_start(void **state)
{
	char sock[128];

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/tern-wmem-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(sock, sizeof(sock), "%s/ternd.sock", dir);
	snprintf(sock_url, sizeof(sock_url), "unix:%s", sock);
	snprintf(control, sizeof(control), "%s/control.sock", dir);
	ternd_pid = fork();
	if (ternd_pid == 0) {
		execl(ternd_path, "ternd", "--backend", "sim", "--listen", sock_url, "--control", control,
		      "--log-level", "error", "--sim-memory", "1G", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500 && access(control, F_OK); i++)
		usleep(10000);
	return access(control, F_OK);
}

static int ternd_stop(void **state)
{
	int status = 0;
	char cmd[128];

	(void)state;
	kill(ternd_pid, SIGTERM);
	waitpid(ternd_pid, &status, 0);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) || !WIFEXITED(status) || WEXITSTATUS(status) ? -1 : 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_large_messages_given_back),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/TO/ternd\n", argv[0]);
		return 2;
	}
	ternd_path = argv[1];
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, ternd_start, ternd_stop);
}
