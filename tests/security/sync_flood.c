/* A guest's synchronisations must not hold its other calls (issue 12,
 * item 8): against a ternd of its own on the sim, over its unix socket.
 *
 * A stream waits for a value nobody has written yet. The guest then sends,
 * without reading any reply, SYNCS cuStreamSynchronize requests and COPIES
 * copies to the host on that stream (more than the worker has waiters for),
 * two malformed synchronisations, and a cuDeviceGetCount. The last must be
 * answered at once, while everything else still waits; before the fix the
 * worker sat in the first synchronisation and never answered. Then the
 * value is written from another stream, and every request must be answered
 * exactly once, with its own sequence number. Last, a guest that goes away
 * while its synchronisations wait must not take the daemon with it.
 *
 *     sync_flood PATH/TO/ternd
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "transport.h"
#include "wire.h"
#include "wire_calls.h"

#define SYNCS 200
#define COPIES 40
#define COPY_BYTES 256
#define ANSWER_TIMEOUT_MS 5000

static char dir[64], sock_url[128], control[128];
static uint64_t ctx;
static pid_t ternd_pid;

/* A failed check must not leave the daemon or its workers running: they
 * are a process group of their own. */
static void ternd_kill(void)
{
	if (ternd_pid > 0)
		kill(-ternd_pid, SIGKILL);
}

/* A send that blocks for ever (a worker that reads nothing) fails too. */
static void on_alarm(int sig)
{
	static const char msg[] = "FAIL: sync_flood did not finish in time: the worker stopped reading\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	ternd_kill();
	_exit(1);
}

#define FAIL(...)                                                       \
	do {                                                            \
		fprintf(stderr, "FAIL: " __VA_ARGS__);                  \
		fputc('\n', stderr);                                    \
		exit(1);                                                \
	} while (0)

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void send_msg(int fd, uint32_t call, uint64_t seq, uint16_t flags, struct wire_msg *m)
{
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .call = call, .seq = seq, .ctx = ctx, .flags = flags };
	int n = wire_msg_finish(m, &h, iov);

	if (n < 0 || wire_send(fd, iov, n))
		FAIL("sending call %u seq %llu", call, (unsigned long long)seq);
	wire_msg_reset(m);
}

struct reply {
	struct wire_header h;
	uint32_t status;
	uint8_t payload[COPY_BYTES + 64];
};

/* The next reply, waiting at most @timeout_ms: 0, or -ETIMEDOUT. */
static int reply_read(int fd, struct reply *r, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t raw[WIRE_HEADER_SIZE];

	if (poll(&pfd, 1, timeout_ms) <= 0)
		return -ETIMEDOUT;
	if (wire_recv_exact(fd, raw, sizeof(raw)) || wire_header_decode(raw, &r->h))
		FAIL("reading a reply header");
	if (!(r->h.flags & WIRE_F_REPLY) || r->h.length < 4 || r->h.length > sizeof(r->payload))
		FAIL("reply of call %u: flags %#x, %u bytes", r->h.call, r->h.flags, r->h.length);
	if (wire_recv_exact(fd, r->payload, r->h.length))
		FAIL("reading a reply payload");
	memcpy(&r->status, r->payload, 4);
	return 0;
}

/* A round trip with nothing else in flight. */
static uint32_t call(int fd, uint32_t id, uint64_t seq, struct wire_msg *m, struct reply *r)
{
	send_msg(fd, id, seq, 0, m);
	if (reply_read(fd, r, ANSWER_TIMEOUT_MS) || r->h.seq != seq || r->h.call != id)
		FAIL("no reply to call %u seq %llu", id, (unsigned long long)seq);
	return r->status;
}

static uint64_t reply_u64(const struct reply *r)
{
	uint64_t v;

	memcpy(&v, r->payload + 4, 8);
	return v;
}

static int session_open(const char *name)
{
	struct wire_hello_req hello = { .protocol = WIRE_PROTOCOL, .pid = (uint32_t)getpid() };
	struct transport_url url;
	struct wire_msg m;
	struct reply r;
	int fd;

	if (transport_url_parse(sock_url, &url))
		FAIL("url");
	fd = transport_connect(&url);
	if (fd < 0)
		FAIL("connect: %s", strerror(-fd));
	snprintf(hello.session, sizeof(hello.session), "%s-%d", name, (int)getpid());
	snprintf(hello.host, sizeof(hello.host), "localhost");
	wire_msg_init(&m);
	ctx = 0;
	/* This ternd asks for no token: the challenge's nonce binds nothing. */
	if (call(fd, WIRE_CALL_CHALLENGE, 0, &m, &r) != CUDA_SUCCESS)
		FAIL("challenge refused: %u", r.status);
	wire_hello_req_encode(&m, &hello);
	if (call(fd, WIRE_CALL_HELLO, 0, &m, &r) != CUDA_SUCCESS)
		FAIL("hello refused: %u", r.status);
	wire_primary_ctx_retain_req_encode(&m, &(struct wire_primary_ctx_retain_req){ .device = 0 });
	if (call(fd, WIRE_CALL_PRIMARY_CTX_RETAIN, 1, &m, &r) != CUDA_SUCCESS)
		FAIL("primary context: %u", r.status);
	ctx = reply_u64(&r);
	wire_msg_release(&m);
	return fd;
}

static uint64_t stream_new(int fd, uint64_t seq, struct wire_msg *m)
{
	struct reply r;

	wire_stream_create_req_encode(m, &(struct wire_stream_create_req){ .flags = CU_STREAM_NON_BLOCKING });
	if (call(fd, WIRE_CALL_STREAM_CREATE, seq, m, &r) != CUDA_SUCCESS)
		FAIL("stream_create: %u", r.status);
	return reply_u64(&r);
}

/* A stream that waits until *@flag reaches 1. */
static void stream_block(int fd, uint64_t seq, uint64_t stream, uint64_t flag, struct wire_msg *m)
{
	wire_stream_wait_value_req_encode(m, &(struct wire_stream_wait_value_req){
		.stream = stream, .address = flag, .value = 1, .width = 4, .flags = CU_STREAM_WAIT_VALUE_GEQ });
	send_msg(fd, WIRE_CALL_STREAM_WAIT_VALUE, seq, WIRE_F_NO_REPLY, m);
}

/* 4 KiB of device memory, zeroed: the word a stream's value wait watches. */
static uint64_t flag_alloc(int fd, uint64_t *seq, struct wire_msg *m)
{
	struct reply r;
	uint64_t mem;

	wire_mem_alloc_req_encode(m, &(struct wire_mem_alloc_req){ .bytes = 4096 });
	if (call(fd, WIRE_CALL_MEM_ALLOC, ++*seq, m, &r) != CUDA_SUCCESS)
		FAIL("mem_alloc: %u", r.status);
	mem = reply_u64(&r);
	wire_memset_req_encode(m, &(struct wire_memset_req){ .dst = mem, .width = 4, .count = 1024 });
	if (call(fd, WIRE_CALL_MEMSET, ++*seq, m, &r) != CUDA_SUCCESS)
		FAIL("memset: %u", r.status);
	return mem;
}

static void flood(void)
{
	static bool answered[SYNCS + COPIES + 16];
	struct wire_msg m;
	struct reply r;
	uint64_t seq = 1, first, stream, other, mem, count_seq, release_seq;
	unsigned replies = 0, out_of_order = 0;
	uint64_t prev = 0;
	double t0, answer_ms;
	int fd = session_open("sync-flood");

	wire_msg_init(&m);
	mem = flag_alloc(fd, &seq, &m);
	stream = stream_new(fd, ++seq, &m);
	other = stream_new(fd, ++seq, &m);
	stream_block(fd, ++seq, stream, mem, &m);

	first = seq + 1;
	for (unsigned i = 0; i < SYNCS + COPIES; i++) {
		if (i % 6 == 5) {
			wire_memcpy_dtoh_req_encode(&m, &(struct wire_memcpy_dtoh_req){
				.src = mem + 512, .bytes = COPY_BYTES, .stream = stream, .async = 1 });
			send_msg(fd, WIRE_CALL_MEMCPY_DTOH, ++seq, 0, &m);
		} else {
			wire_stream_synchronize_req_encode(&m, &(struct wire_stream_synchronize_req){ .stream = stream });
			send_msg(fd, WIRE_CALL_STREAM_SYNCHRONIZE, ++seq, 0, &m);
		}
	}
	/* Hostile ones among them: a stream that is not the session's, a
	 * payload cut short. Each fails alone. */
	wire_stream_synchronize_req_encode(&m, &(struct wire_stream_synchronize_req){ .stream = 0x0600ffffffffull });
	send_msg(fd, WIRE_CALL_STREAM_SYNCHRONIZE, ++seq, 0, &m);
	wire_put_u32(&m, 7);
	send_msg(fd, WIRE_CALL_STREAM_SYNCHRONIZE, ++seq, 0, &m);
	count_seq = ++seq;
	t0 = now_ms();
	send_msg(fd, WIRE_CALL_DEVICE_GET_COUNT, count_seq, 0, &m);
	for (;;) {
		if (reply_read(fd, &r, ANSWER_TIMEOUT_MS))
			FAIL("cuDeviceGetCount unanswered after %d ms behind %u waiting synchronisations",
			     ANSWER_TIMEOUT_MS, SYNCS + COPIES);
		if (r.h.seq < first || r.h.seq > count_seq || answered[r.h.seq - first])
			FAIL("reply to seq %llu: not asked for, or twice", (unsigned long long)r.h.seq);
		answered[r.h.seq - first] = true;
		replies++;
		if (r.h.seq == count_seq)
			break;
		if (r.h.seq < first + SYNCS + COPIES)
			FAIL("request %llu answered while its stream still waits", (unsigned long long)r.h.seq);
		if (r.status == CUDA_SUCCESS)
			FAIL("malformed synchronisation %llu answered with success", (unsigned long long)r.h.seq);
	}
	answer_ms = now_ms() - t0;
	if (r.status != CUDA_SUCCESS)
		FAIL("cuDeviceGetCount: %u", r.status);
	printf("cuDeviceGetCount answered in %.3f ms with %u synchronisations and copies waiting\n",
	       answer_ms, SYNCS + COPIES);

	/* The write that releases them, from another stream. */
	release_seq = ++seq;
	wire_stream_write_value_req_encode(&m, &(struct wire_stream_write_value_req){
		.stream = other, .address = mem, .value = 1, .width = 4 });
	send_msg(fd, WIRE_CALL_STREAM_WRITE_VALUE, release_seq, 0, &m);
	t0 = now_ms();
	while (replies < SYNCS + COPIES + 4) {
		if (reply_read(fd, &r, ANSWER_TIMEOUT_MS))
			FAIL("%u of %u requests unanswered after the release", SYNCS + COPIES + 4 - replies,
			     SYNCS + COPIES + 4);
		if (r.h.seq < first || r.h.seq > release_seq || answered[r.h.seq - first])
			FAIL("reply to seq %llu: not asked for, or twice", (unsigned long long)r.h.seq);
		answered[r.h.seq - first] = true;
		if (r.h.seq < prev)
			out_of_order++;
		prev = r.h.seq;
		replies++;
		if (r.status != CUDA_SUCCESS)
			FAIL("request %llu (call %u) failed with %u", (unsigned long long)r.h.seq, r.h.call, r.status);
		if (r.h.call == WIRE_CALL_MEMCPY_DTOH && r.h.length != 4 + 4 + COPY_BYTES)
			FAIL("copy %llu answered %u bytes", (unsigned long long)r.h.seq, r.h.length);
	}
	printf("all %u requests answered once, %.3f ms after the release (%u out of request order)\n",
	       replies, now_ms() - t0, out_of_order);
	wire_msg_release(&m);
	close(fd);
}

/* A guest that leaves while its synchronisations wait for a value never
 * written: the daemon serves the next guest. */
static void leave_waiting(void)
{
	struct wire_msg m;
	struct reply r;
	uint64_t seq = 1, stream, mem;
	int fd = session_open("sync-leave");

	wire_msg_init(&m);
	mem = flag_alloc(fd, &seq, &m);
	stream = stream_new(fd, ++seq, &m);
	stream_block(fd, ++seq, stream, mem, &m);
	for (int i = 0; i < 8; i++) {
		wire_stream_synchronize_req_encode(&m, &(struct wire_stream_synchronize_req){ .stream = stream });
		send_msg(fd, WIRE_CALL_STREAM_SYNCHRONIZE, ++seq, 0, &m);
	}
	close(fd);
	fd = session_open("sync-after");
	if (call(fd, WIRE_CALL_DEVICE_GET_COUNT, 2, &m, &r) != CUDA_SUCCESS)
		FAIL("a new guest after one left waiting: %u", r.status);
	printf("a guest that left with 8 synchronisations waiting: the next one is served\n");
	wire_msg_release(&m);
	close(fd);
}

int main(int argc, char **argv)
{
	pid_t pid;
	int status;

	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/TO/ternd\n", argv[0]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm(40);
	snprintf(dir, sizeof(dir), "/tmp/tern-syncflood-XXXXXX");
	if (!mkdtemp(dir))
		FAIL("mkdtemp");
	snprintf(sock_url, sizeof(sock_url), "unix:%s/ternd.sock", dir);
	snprintf(control, sizeof(control), "%s/control.sock", dir);
	pid = fork();
	if (pid > 0) {
		setpgid(pid, pid);
		ternd_pid = pid;
		atexit(ternd_kill);
	}
	if (pid == 0) {
		char state[96];

		setpgid(0, 0);
		snprintf(state, sizeof(state), "%s/state", dir);
		execl(argv[1], "ternd", "--backend", "sim", "--listen", sock_url, "--control", control,
		      "--state-dir", state, "--log-level", "warn", "--sim-memory", "256M", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500 && access(control, F_OK); i++)
		usleep(10000);
	if (access(control, F_OK))
		FAIL("ternd did not start");
	flood();
	leave_waiting();
	kill(pid, SIGTERM);
	waitpid(pid, &status, 0);
	ternd_pid = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		FAIL("ternd ended with status %#x", status);
	printf("PASS sync_flood\n");
	return 0;
}
