/* Host functions in the executor on the sim backend, with this test as the
 * guest at the other end of the host-function channel: the stream waits
 * for the guest's answer, a hostile guest (an answer for a token never
 * run, garbage, an attach without a socket, a second attach) fails alone,
 * a guest that never answers cannot hold the session's end, host nodes
 * keep their token through the graph description and a restore. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "exec.h"
#include "graph_desc.h"
#include "hostfn_chan.h"
#include "shm_chan.h"
#include "wire_dispatch.h"

enum guest_mode {
	GUEST_ANSWER,           /* DONE for every RUN */
	GUEST_STRAY_FIRST,      /* DONE for a token never run, then the right one */
	GUEST_GARBAGE,          /* a record that is no DONE */
	GUEST_SILENT,           /* never answers */
	GUEST_COPY_UNKNOWN,     /* answers copies: no such range */
};

struct fixture {
	struct backend *be;
	struct exec ex;
	int transport[2];       /* [0] the worker's session socket, [1] the guest's */
	int chan;               /* the guest's end of the host-function channel */
	pthread_t guest;
	int mode;
	pthread_mutex_t lock;
	uint64_t ran[64];
	uint32_t status[64];
	unsigned runs;
	uint64_t stream;
	uint8_t copied[4096];   /* what the last COPY_OUT brought */
	uint64_t copied_len;
};

static struct fixture fx = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void *guest_main(void *arg)
{
	struct hostfn_rec rec;

	(void)arg;
	while (!hostfn_rec_recv(fx.chan, &rec)) {
		struct hostfn_rec done = { .type = HOSTFN_DONE, .token = rec.token };
		int mode = __atomic_load_n(&fx.mode, __ATOMIC_ACQUIRE);

		pthread_mutex_lock(&fx.lock);
		if (fx.runs < 64) {
			fx.ran[fx.runs] = rec.token;
			fx.status[fx.runs] = rec.status;
		}
		fx.runs++;
		pthread_mutex_unlock(&fx.lock);
		if (mode == GUEST_SILENT)
			continue;
		if (rec.type == HOSTFN_COPY_IN || rec.type == HOSTFN_COPY_OUT) {
			/* A host copy: bytes 0, 1, 2 ... in; the bytes out kept. */
			uint8_t buf[4096];
			uint64_t count;

			if (hostfn_count_recv(fx.chan, NULL, &count) || count > sizeof(buf))
				break;
			if (rec.type == HOSTFN_COPY_OUT) {
				if (hostfn_bytes_recv(fx.chan, NULL, buf, count))
					break;
				memcpy(fx.copied, buf, count);
				fx.copied_len = count;
			}
			done.status = mode == GUEST_COPY_UNKNOWN ? HOSTFN_COPY_UNKNOWN : HOSTFN_COPY_OK;
			if (hostfn_rec_send(fx.chan, &done))
				break;
			for (uint64_t i = 0; i < count; i++)
				buf[i] = (uint8_t)i;
			if (rec.type == HOSTFN_COPY_IN && mode != GUEST_COPY_UNKNOWN &&
			    hostfn_bytes_send(fx.chan, NULL, buf, count))
				break;
			continue;
		}
		if (mode == GUEST_GARBAGE)
			done.type = 99;
		if (mode == GUEST_STRAY_FIRST) {
			struct hostfn_rec stray = { .type = HOSTFN_DONE, .token = rec.token + 1000 };

			hostfn_rec_send(fx.chan, &stray);
		}
		if (hostfn_rec_send(fx.chan, &done))
			break;
	}
	return NULL;
}

static int setup(void **state)
{
	struct backend_config bcfg = { .sim_memory = 1ull << 30 };
	struct exec_config cfg = { .device = 0, .arena_base = 0x380000000000ull, .arena_size = 8ull << 30 };
	struct wire_stream_create_req sc = { .flags = 1 };
	struct wire_stream_create_rep sr;

	(void)state;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, fx.transport) || backend_open("sim", &bcfg, &fx.be) ||
	    exec_open(&fx.ex, fx.be, &cfg, NULL) || exec_stream_create(&fx.ex, &sc, &sr))
		return -1;
	fx.ex.host.conn_sock = fx.transport[0];
	fx.stream = sr.stream;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	exec_close(&fx.ex);
	backend_close(fx.be);
	close(fx.transport[0]);
	close(fx.transport[1]);
	return 0;
}

static CUresult attach(int fd_to_send)
{
	struct wire_host_func_attach_req req = { .mode = HOSTFN_ATTACH_FD };
	struct wire_host_func_attach_rep rep;

	if (fd_to_send >= 0)
		assert_int_equal(shm_fds_send(fx.transport[1], &fd_to_send, 1), 0);
	return exec_host_func_attach(&fx.ex, &req, &rep);
}

static CUresult launch(uint64_t token)
{
	struct wire_launch_host_func_req req = { .stream = fx.stream, .token = token };

	return exec_launch_host_func(&fx.ex, &req, NULL);
}

static CUresult sync_stream(void)
{
	struct wire_stream_synchronize_req req = { .stream = fx.stream };

	return exec_stream_synchronize(&fx.ex, &req, NULL);
}

static unsigned runs(void)
{
	unsigned n;

	pthread_mutex_lock(&fx.lock);
	n = fx.runs;
	pthread_mutex_unlock(&fx.lock);
	return n;
}

static void test_attach_hostile(void **state)
{
	struct wire_host_func_attach_req req = { .mode = 7 };
	struct wire_host_func_attach_rep rep;
	int sv[2], pipefd[2];

	(void)state;
	assert_int_equal(exec_host_func_attach(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
	/* tcp attach on a unix session: no address to listen beside. */
	req.mode = HOSTFN_ATTACH_TCP;
	assert_int_equal(exec_host_func_attach(&fx.ex, &req, &rep), CUDA_ERROR_NOT_SUPPORTED);
	/* A pipe and a datagram socket are no channel. */
	assert_int_equal(pipe(pipefd), 0);
	assert_int_equal(attach(pipefd[0]), CUDA_ERROR_INVALID_VALUE);
	close(pipefd[0]);
	close(pipefd[1]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv), 0);
	assert_int_equal(attach(sv[0]), CUDA_ERROR_INVALID_VALUE);
	close(sv[0]);
	close(sv[1]);
	/* The real one, then a second: refused, the first stays. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(attach(sv[0]), CUDA_SUCCESS);
	close(sv[0]);
	fx.chan = sv[1];
	assert_int_equal(pthread_create(&fx.guest, NULL, guest_main, NULL), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(attach(sv[0]), CUDA_ERROR_INVALID_VALUE);
	close(sv[0]);
	close(sv[1]);
	/* Hostile launches. */
	{
		struct wire_launch_host_func_req l = { .stream = fx.stream + 99, .token = 1 };
		struct wire_stream_add_callback_req c = { .stream = fx.stream, .token = 1, .flags = 1 };

		assert_int_equal(exec_launch_host_func(&fx.ex, &l, NULL), CUDA_ERROR_INVALID_HANDLE);
		assert_int_equal(exec_stream_add_callback(&fx.ex, &c, NULL), CUDA_ERROR_INVALID_VALUE);
	}
}

static void test_order_and_stray_answers(void **state)
{
	struct wire_stream_add_callback_req cb = { .stream = fx.stream, .token = 33 };
	unsigned base = runs();

	(void)state;
	__atomic_store_n(&fx.mode, GUEST_ANSWER, __ATOMIC_RELEASE);
	for (uint64_t t = 1; t <= 10; t++)
		assert_int_equal(launch(t), CUDA_SUCCESS);
	assert_int_equal(exec_stream_add_callback(&fx.ex, &cb, NULL), CUDA_SUCCESS);
	assert_int_equal(sync_stream(), CUDA_SUCCESS);
	assert_int_equal(runs(), base + 11);
	for (unsigned i = 0; i < 10; i++)
		assert_int_equal(fx.ran[base + i], i + 1);
	assert_int_equal(fx.ran[base + 10], 33);
	assert_int_equal(fx.status[base + 10], CUDA_SUCCESS);
	/* An answer for a token that was never run is ignored: the run still
	 * waits for its own. */
	__atomic_store_n(&fx.mode, GUEST_STRAY_FIRST, __ATOMIC_RELEASE);
	assert_int_equal(launch(50), CUDA_SUCCESS);
	assert_int_equal(launch(51), CUDA_SUCCESS);
	assert_int_equal(sync_stream(), CUDA_SUCCESS);
	assert_int_equal(runs(), base + 13);
	assert_int_equal(fx.ran[base + 12], 51);
}

static void test_host_node_restore(void **state)
{
	struct wire_graph_create_req gc = { 0 };
	struct wire_graph_create_rep gr;
	struct wire_graph_add_host_node_req an = { .token = 0x77 };
	struct wire_graph_add_host_node_rep ar;
	struct wire_graph_host_node_get_params_req gp;
	struct wire_graph_host_node_get_params_rep gpr;
	struct wire_graph_host_node_set_params_req sp;
	struct wire_graph_instantiate_req in = { 0 };
	struct wire_graph_instantiate_rep ir;
	struct wire_graph_launch_req la = { .stream = fx.stream };
	struct graph_desc d;
	struct graph_node n = { .type = CU_GRAPH_NODE_TYPE_HOST, .host = 0x99 };
	uint64_t restored = (uint64_t)HANDLE_GRAPH << 56 | 0x555;
	uint8_t hash[16] = { 0 }, *buf = NULL;
	size_t len = 0;
	char err[256];
	unsigned base = runs();

	(void)state;
	__atomic_store_n(&fx.mode, GUEST_ANSWER, __ATOMIC_RELEASE);
	assert_int_equal(exec_graph_create(&fx.ex, &gc, &gr), CUDA_SUCCESS);
	an.graph = gr.graph;
	assert_int_equal(exec_graph_add_host_node(&fx.ex, &an, &ar), CUDA_SUCCESS);
	gp = (struct wire_graph_host_node_get_params_req){ .graph = gr.graph, .node = ar.node };
	assert_int_equal(exec_graph_host_node_get_params(&fx.ex, &gp, &gpr), CUDA_SUCCESS);
	assert_int_equal(gpr.token, 0x77);
	/* Hostile: a node that is not there, one of another type. */
	gp.node = 5;
	assert_int_equal(exec_graph_host_node_get_params(&fx.ex, &gp, &gpr), CUDA_ERROR_INVALID_VALUE);
	sp = (struct wire_graph_host_node_set_params_req){ .graph = gr.graph, .node = 5, .token = 0x78 };
	assert_int_equal(exec_graph_host_node_set_params(&fx.ex, &sp, NULL), CUDA_ERROR_INVALID_VALUE);
	sp.node = ar.node;
	assert_int_equal(exec_graph_host_node_set_params(&fx.ex, &sp, NULL), CUDA_SUCCESS);
	in.graph = gr.graph;
	assert_int_equal(exec_graph_instantiate(&fx.ex, &in, &ir), CUDA_SUCCESS);
	assert_int_equal(ir.status, CUDA_SUCCESS);
	{
		struct wire_graph_exec_host_node_set_params_req xp = {
			.exec = ir.exec, .graph = gr.graph + 1, .node = ar.node, .token = 0x79,
		};

		assert_int_equal(exec_graph_exec_host_node_set_params(&fx.ex, &xp, NULL), CUDA_ERROR_INVALID_VALUE);
		xp.graph = gr.graph;
		assert_int_equal(exec_graph_exec_host_node_set_params(&fx.ex, &xp, NULL), CUDA_SUCCESS);
	}
	la.exec = ir.exec;
	assert_int_equal(exec_graph_launch(&fx.ex, &la, NULL), CUDA_SUCCESS);
	assert_int_equal(exec_graph_launch(&fx.ex, &la, NULL), CUDA_SUCCESS);
	assert_int_equal(sync_stream(), CUDA_SUCCESS);
	assert_int_equal(runs(), base + 2);
	assert_int_equal(fx.ran[base], 0x79);
	assert_int_equal(fx.ran[base + 1], 0x79);

	/* A description with a host node rebuilds it around the same token. */
	graph_desc_init(&d);
	assert_int_equal(graph_desc_append(&d, &n), 0);
	assert_int_equal(graph_desc_encode(&d, &buf, &len), 0);
	graph_desc_release(&d);
	graph_desc_init(&d);
	assert_int_equal(graph_desc_decode(&d, buf, len), 0);
	assert_int_equal(d.nodes[0].type, CU_GRAPH_NODE_TYPE_HOST);
	assert_int_equal(d.nodes[0].host, 0x99);
	graph_desc_release(&d);
	assert_int_equal(exec_graph_restore(&fx.ex, restored, HANDLE_GRAPH, hash, sizeof(hash), buf, len, err,
					    sizeof(err)), CUDA_SUCCESS);
	free(buf);
	in.graph = restored;
	assert_int_equal(exec_graph_instantiate(&fx.ex, &in, &ir), CUDA_SUCCESS);
	la.exec = ir.exec;
	assert_int_equal(exec_graph_launch(&fx.ex, &la, NULL), CUDA_SUCCESS);
	assert_int_equal(sync_stream(), CUDA_SUCCESS);
	assert_int_equal(runs(), base + 3);
	assert_int_equal(fx.ran[base + 2], 0x99);
}

/* A graph's host copies (docs/wire-protocol.md, "Host copies in graphs"):
 * in, through device memory, and out again, over the channel at launch;
 * a range the guest does not know copies nothing. */
static void test_host_copies(void **state)
{
	struct wire_mem_alloc_req ma = { .bytes = 1 << 20 };
	struct wire_mem_alloc_rep mar;
	struct wire_graph_create_req gc = { 0 };
	struct wire_graph_create_rep gcr;
	struct wire_graph_add_host_copy_node_req in = { .host_end = GRAPH_COPY_HOST_SRC, .token = 901,
							.dev_pitch = 1000, .dev_height = 1, .width = 1000,
							.height = 1, .depth = 1 };
	struct wire_graph_add_host_copy_node_req out = { .host_end = GRAPH_COPY_HOST_DST, .token = 902,
							 .dev_pitch = 1000, .dev_height = 1, .width = 1000,
							 .height = 1, .depth = 1 };
	struct wire_graph_add_host_copy_node_rep inr, outr;
	struct wire_graph_instantiate_req gi = { 0 };
	struct wire_graph_instantiate_rep gir;
	struct wire_graph_launch_req gl = { .stream = fx.stream };

	(void)state;
	__atomic_store_n(&fx.mode, GUEST_ANSWER, __ATOMIC_RELEASE);
	assert_int_equal(exec_mem_alloc(&fx.ex, &ma, &mar), CUDA_SUCCESS);
	assert_int_equal(exec_graph_create(&fx.ex, &gc, &gcr), CUDA_SUCCESS);
	in.graph = out.graph = gcr.graph;
	in.device = out.device = mar.address;
	assert_int_equal(exec_graph_add_host_copy_node(&fx.ex, &in, &inr), CUDA_SUCCESS);
	out.deps = (struct wire_blob){ (const uint8_t *)&inr.node, 4 };
	assert_int_equal(exec_graph_add_host_copy_node(&fx.ex, &out, &outr), CUDA_SUCCESS);
	gi.graph = gcr.graph;
	assert_int_equal(exec_graph_instantiate(&fx.ex, &gi, &gir), CUDA_SUCCESS);
	assert_int_equal(gir.status, CUDA_SUCCESS);
	gl.exec = gir.exec;
	fx.copied_len = 0;
	assert_int_equal(exec_graph_launch(&fx.ex, &gl, NULL), CUDA_SUCCESS);
	assert_int_equal(sync_stream(), CUDA_SUCCESS);
	assert_int_equal(fx.copied_len, 1000);
	for (unsigned i = 0; i < 1000; i++)
		assert_int_equal(fx.copied[i], (uint8_t)i);
	/* Unknown to the guest: the device keeps what it had, the channel
	 * stays usable. */
	__atomic_store_n(&fx.mode, GUEST_COPY_UNKNOWN, __ATOMIC_RELEASE);
	memset(fx.copied, 0, sizeof(fx.copied));
	assert_int_equal(exec_graph_launch(&fx.ex, &gl, NULL), CUDA_SUCCESS);
	assert_int_equal(sync_stream(), CUDA_SUCCESS);
	assert_int_equal(fx.copied[999], (uint8_t)999);   /* sent again, dropped by the guest */
	__atomic_store_n(&fx.mode, GUEST_ANSWER, __ATOMIC_RELEASE);
	{
		unsigned base = runs();

		assert_int_equal(launch(77), CUDA_SUCCESS);
		assert_int_equal(sync_stream(), CUDA_SUCCESS);
		assert_int_equal(runs(), base + 1);
	}
}

static void test_garbage_breaks_channel(void **state)
{
	unsigned base = runs();

	(void)state;
	/* A record that is no answer: the channel is closed, the stream goes
	 * on, and later host functions run nothing. */
	__atomic_store_n(&fx.mode, GUEST_GARBAGE, __ATOMIC_RELEASE);
	assert_int_equal(launch(70), CUDA_SUCCESS);
	assert_int_equal(launch(71), CUDA_SUCCESS);
	assert_int_equal(sync_stream(), CUDA_SUCCESS);
	assert_int_equal(runs(), base + 1);
	pthread_join(fx.guest, NULL);
	close(fx.chan);
}

/* A guest that never answers: its stream waits (as natively), but the
 * session's end does not. Runs last: it closes the session itself. */
static void test_silent_guest_cannot_hold_close(void **state)
{
	struct exec ex2;
	struct exec_config cfg = { .device = 0, .arena_base = 0x3a0000000000ull, .arena_size = 8ull << 30 };
	struct wire_stream_create_req sc = { .flags = 1 };
	struct wire_stream_create_rep sr;
	int sv[2];

	(void)state;
	/* A second session on the same backend, with a fresh channel. */
	exec_close(&fx.ex);
	assert_int_equal(exec_open(&ex2, fx.be, &cfg, NULL), 0);
	assert_int_equal(exec_stream_create(&ex2, &sc, &sr), CUDA_SUCCESS);
	ex2.host.conn_sock = fx.transport[0];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(shm_fds_send(fx.transport[1], &sv[0], 1), 0);
	{
		struct wire_host_func_attach_req req = { .mode = HOSTFN_ATTACH_FD };
		struct wire_host_func_attach_rep rep;
		struct wire_launch_host_func_req l = { .stream = sr.stream, .token = 5 };
		struct hostfn_rec rec;

		assert_int_equal(exec_host_func_attach(&ex2, &req, &rep), CUDA_SUCCESS);
		close(sv[0]);
		assert_int_equal(exec_launch_host_func(&ex2, &l, NULL), CUDA_SUCCESS);
		assert_int_equal(hostfn_rec_recv(sv[1], &rec), 0);
		assert_int_equal(rec.token, 5);
	}
	alarm(30);              /* a hang is a failure, not a stuck test run */
	exec_close(&ex2);
	alarm(0);
	close(sv[1]);
	/* teardown closes fx.ex again: an exec_close'd exec is all zero. */
	assert_int_equal(exec_open(&fx.ex, fx.be, &(struct exec_config){ .device = 0,
		.arena_base = 0x380000000000ull, .arena_size = 8ull << 30 }, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attach_hostile),
		cmocka_unit_test(test_order_and_stray_answers),
		cmocka_unit_test(test_host_node_restore),
		cmocka_unit_test(test_host_copies),
		cmocka_unit_test(test_garbage_breaks_channel),
		cmocka_unit_test(test_silent_guest_cannot_hold_close),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
