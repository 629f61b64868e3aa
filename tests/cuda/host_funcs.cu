/* host_funcs: host functions and stream callbacks run in this process, in
 * stream order.
 *
 *  1. order: a kernel fills a buffer, a copy brings it to pinned memory, a
 *     host function checks it there; the host function writes mapped pinned
 *     memory that the next kernel adds (where the memory is shared: natively
 *     and over tern's shm transport; elsewhere tern mirrors mapped memory,
 *     which a host function may not touch: docs/limits.md); an event recorded after a
 *     sleeping host function is not reached until it returned;
 *  2. four streams, each with 50 host functions between kernels: every
 *     stream's functions run in the order queued;
 *  3. cuStreamAddCallback / cudaStreamAddCallback: the callback gets its
 *     stream and the CUresult (success), flags other than 0 are refused;
 *  4. 1000 host functions in a row, in order;
 *  5. a host node in a graph built by hand, launched 5 times; its parameters
 *     read back and changed in the graph and in the executable;
 *  6. a host function captured into a graph, launched 10 times;
 *  7. stream and device synchronisation wait for host functions.
 *
 * A host function must not call CUDA (the driver's rule): none here does.
 * CPU versions of the kernels for the sim: sim_kernels.c (hf_* are g_*). */
#include "check.h"

#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define N 4096

extern "C" __global__ void hf_fill(int *a, int v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] = v;
}

extern "C" __global__ void hf_add(int *y, const int *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] += x[i];
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* ---- 1. order ----------------------------------------------------------- */

struct order_ctx {
	const int *seen;        /* pinned: what the copy brought back */
	int *mapped;            /* pinned and mapped: what the next kernel reads; may be NULL */
	int want;
	int bad;
	int ran;
};

static void CUDART_CB order_fn(void *arg)
{
	struct order_ctx *c = (struct order_ctx *)arg;

	for (int i = 0; i < N; i++)
		if (c->seen[i] != c->want)
			c->bad++;
	if (c->mapped)
		for (int i = 0; i < N; i++)
			c->mapped[i] = 11 + i;
	c->ran++;
}

static void CUDART_CB slow_fn(void *arg)
{
	sleep_ms(200);
	*(volatile int *)arg = 1;
}

static void order(void)
{
	struct order_ctx c = {};
	int *dev, *seen, *mapped, *mapped_dev = NULL;
	cudaStream_t s;
	cudaEvent_t ev;
	static volatile int slow_done;
	const char *server = getenv("TERN_SERVER"), *bar = getenv("TERN_IVSHMEM");
	bool shared = !server || !strncmp(server, "shm:", 4) || (bar && strcmp(bar, "off") && strcmp(bar, "0"));

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaMalloc(&dev, N * sizeof(int)));
	CHECK(cudaMallocHost(&seen, N * sizeof(int)));
	CHECK(cudaHostAlloc(&mapped, N * sizeof(int), cudaHostAllocMapped));
	CHECK(cudaHostGetDevicePointer((void **)&mapped_dev, mapped, 0));
	if (!shared) {
		/* tern over unix, tcp ...: mapped memory is a mirror of device
		 * memory, coherent at launches and synchronisation only. */
		mapped_dev = NULL;
		printf("mapped memory is mirrored here: the mapped part is skipped\n");
	}
	memset(seen, 0, N * sizeof(int));
	c.seen = seen;
	c.mapped = mapped_dev ? mapped : NULL;
	for (int round = 0; round < 5; round++) {
		c.want = 7 + round;
		hf_fill<<<N / 256, 256, 0, s>>>(dev, c.want, N);
		CHECK(cudaGetLastError());
		CHECK(cudaMemcpyAsync(seen, dev, N * sizeof(int), cudaMemcpyDeviceToHost, s));
		CHECK(cudaLaunchHostFunc(s, order_fn, &c));
		if (mapped_dev) {
			hf_add<<<N / 256, 256, 0, s>>>(dev, mapped_dev, N);
			CHECK(cudaGetLastError());
			CHECK(cudaMemcpyAsync(seen, dev, N * sizeof(int), cudaMemcpyDeviceToHost, s));
		}
		CHECK(cudaStreamSynchronize(s));
		REQUIRE(c.ran == round + 1, "round %d: the host function ran %d times", round, c.ran);
		REQUIRE(c.bad == 0, "round %d: the host function saw %d values before the kernel wrote them",
			round, c.bad);
		if (mapped_dev)
			for (int i = 0; i < N; i++)
				REQUIRE(seen[i] == c.want + 11 + i, "round %d: [%d] = %d, want %d: the kernel "
					"after the host function did not see what it wrote", round, i, seen[i],
					c.want + 11 + i);
	}
	/* Work after a host function waits for it. */
	CHECK(cudaEventCreate(&ev));
	slow_done = 0;
	CHECK(cudaLaunchHostFunc(s, slow_fn, (void *)&slow_done));
	CHECK(cudaEventRecord(ev, s));
	sleep_ms(50);
	EXPECT_RT(cudaEventQuery(ev), cudaErrorNotReady);
	CHECK(cudaEventSynchronize(ev));
	REQUIRE(slow_done == 1, "the event after a host function completed before it returned");
	CHECK(cudaEventDestroy(ev));
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(dev));
	CHECK(cudaFreeHost(seen));
	CHECK(cudaFreeHost(mapped));
}

/* ---- 2. several streams ------------------------------------------------- */

#define STREAMS 4
#define PER_STREAM 50

struct stream_log {
	int next;               /* the sequence number expected next */
	int bad;
};

struct stream_step {
	struct stream_log *log;
	int seq;
};

static void CUDART_CB step_fn(void *arg)
{
	struct stream_step *st = (struct stream_step *)arg;

	if (st->seq != st->log->next)
		st->log->bad++;
	st->log->next = st->seq + 1;
}

static void several_streams(void)
{
	static struct stream_log logs[STREAMS];
	static struct stream_step steps[STREAMS][PER_STREAM];
	cudaStream_t s[STREAMS];
	int *dev;

	CHECK(cudaMalloc(&dev, STREAMS * N * sizeof(int)));
	for (int k = 0; k < STREAMS; k++)
		CHECK(cudaStreamCreate(&s[k]));
	for (int j = 0; j < PER_STREAM; j++)
		for (int k = 0; k < STREAMS; k++) {
			steps[k][j].log = &logs[k];
			steps[k][j].seq = j;
			hf_fill<<<N / 256, 256, 0, s[k]>>>(dev + k * N, j, N);
			CHECK(cudaGetLastError());
			CHECK(cudaLaunchHostFunc(s[k], step_fn, &steps[k][j]));
		}
	CHECK(cudaDeviceSynchronize());
	for (int k = 0; k < STREAMS; k++) {
		REQUIRE(logs[k].bad == 0, "stream %d: %d host functions out of order", k, logs[k].bad);
		REQUIRE(logs[k].next == PER_STREAM, "stream %d: %d of %d host functions ran", k, logs[k].next,
			PER_STREAM);
		CHECK(cudaStreamDestroy(s[k]));
	}
	CHECK(cudaFree(dev));
}

/* ---- 3. stream callbacks ------------------------------------------------ */

struct cb_rec {
	cudaStream_t want_rt;
	CUstream want_drv;
	int calls;
	int bad;
};

static void CUDART_CB rt_callback(cudaStream_t stream, cudaError_t status, void *arg)
{
	struct cb_rec *r = (struct cb_rec *)arg;

	if (stream != r->want_rt || status != cudaSuccess)
		r->bad++;
	r->calls++;
}

static void CUDA_CB drv_callback(CUstream stream, CUresult status, void *arg)
{
	struct cb_rec *r = (struct cb_rec *)arg;

	if (stream != r->want_drv || status != CUDA_SUCCESS)
		r->bad++;
	r->calls++;
}

static void callbacks(void)
{
	DRV_FN(cuStreamAddCallback);
	struct cb_rec rt = {}, drv = {};
	cudaStream_t s;
	int *dev;

	CHECK(cudaMalloc(&dev, N * sizeof(int)));
	CHECK(cudaStreamCreate(&s));
	rt.want_rt = s;
	drv.want_drv = (CUstream)s;
	for (int i = 0; i < 10; i++) {
		hf_fill<<<N / 256, 256, 0, s>>>(dev, i, N);
		CHECK(cudaGetLastError());
		CHECK(cudaStreamAddCallback(s, rt_callback, &rt, 0));
		CHECK_DRV(p_cuStreamAddCallback((CUstream)s, drv_callback, &drv, 0));
	}
	EXPECT_RT(cudaStreamAddCallback(s, rt_callback, &rt, 1), cudaErrorInvalidValue);
	cudaGetLastError();     /* the expected error is not for the next check */
	EXPECT_DRV(p_cuStreamAddCallback((CUstream)s, drv_callback, &drv, 1), CUDA_ERROR_INVALID_VALUE);
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(rt.calls == 10 && rt.bad == 0, "runtime callbacks: %d calls, %d with a wrong stream or status",
		rt.calls, rt.bad);
	REQUIRE(drv.calls == 10 && drv.bad == 0, "driver callbacks: %d calls, %d with a wrong stream or status",
		drv.calls, drv.bad);
	/* The NULL stream is named as NULL. */
	rt.want_rt = 0;
	CHECK(cudaStreamAddCallback(0, rt_callback, &rt, 0));
	CHECK(cudaDeviceSynchronize());
	REQUIRE(rt.calls == 11 && rt.bad == 0, "a callback on the NULL stream: %d calls, %d bad", rt.calls,
		rt.bad);
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(dev));
}

/* ---- 4. many in a row --------------------------------------------------- */

struct counter {
	int n;
	int bad;
};

struct many_step {
	struct counter *c;
	int want;
};

static void CUDART_CB many_fn(void *arg)
{
	struct many_step *st = (struct many_step *)arg;

	if (st->c->n != st->want)
		st->c->bad++;
	st->c->n++;
}

static void many(void)
{
	static struct many_step steps[1000];
	struct counter c = {};
	cudaStream_t s;

	CHECK(cudaStreamCreate(&s));
	for (int i = 0; i < 1000; i++) {
		steps[i].c = &c;
		steps[i].want = i;
		CHECK(cudaLaunchHostFunc(s, many_fn, &steps[i]));
	}
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(c.n == 1000 && c.bad == 0, "1000 host functions: %d ran, %d out of order", c.n, c.bad);
	CHECK(cudaStreamDestroy(s));
}

/* ---- 5. a host node in a graph built by hand ------------------------------ */

static void CUDART_CB count_fn(void *arg)
{
	__atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static void built_graph(void)
{
	static int first, second, third;
	cudaGraph_t g;
	cudaGraphExec_t x;
	cudaGraphNode_t fill, host, tail;
	cudaKernelNodeParams kp = {};
	cudaHostNodeParams hp = {}, got = {};
	cudaGraphNodeType type;
	int *dev, v = 3, n = N;
	void *args[3] = { &dev, &v, &n };
	cudaStream_t s;

	CHECK(cudaMalloc(&dev, N * sizeof(int)));
	CHECK(cudaStreamCreate(&s));
	CHECK(cudaGraphCreate(&g, 0));
	kp.func = (void *)hf_fill;
	kp.gridDim = dim3(N / 256);
	kp.blockDim = dim3(256);
	kp.kernelParams = args;
	CHECK(cudaGraphAddKernelNode(&fill, g, NULL, 0, &kp));
	hp.fn = count_fn;
	hp.userData = &first;
	CHECK(cudaGraphAddHostNode(&host, g, &fill, 1, &hp));
	CHECK(cudaGraphAddEmptyNode(&tail, g, &host, 1));
	CHECK(cudaGraphNodeGetType(host, &type));
	REQUIRE(type == cudaGraphNodeTypeHost, "the host node's type is %d", (int)type);
	CHECK(cudaGraphHostNodeGetParams(host, &got));
	REQUIRE(got.fn == count_fn && got.userData == &first, "host node parameters read back wrong");
	CHECK(cudaGraphInstantiate(&x, g, 0));
	for (int i = 0; i < 5; i++)
		CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(first == 5, "the host node ran %d times in 5 launches", first);
	/* Changed in the graph: a new executable runs the new function's argument. */
	hp.userData = &second;
	CHECK(cudaGraphHostNodeSetParams(host, &hp));
	CHECK(cudaGraphHostNodeGetParams(host, &got));
	REQUIRE(got.userData == &second, "the graph's host node kept its old argument");
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(first == 6 && second == 0, "the executable changed with its graph: %d %d", first, second);
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(second == 1, "the new executable ran the node %d times", second);
	/* Changed in the executable only. */
	hp.userData = &third;
	CHECK(cudaGraphExecHostNodeSetParams(x, host, &hp));
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(second == 1 && third == 2, "after cudaGraphExecHostNodeSetParams: %d %d", second, third);
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(dev));
}

/* ---- 6. captured ---------------------------------------------------------- */

static void captured_graph(void)
{
	static int count;
	cudaStream_t s;
	cudaGraph_t g;
	cudaGraphExec_t x;
	size_t nodes = 0, hosts = 0;
	int *dev;

	CHECK(cudaMalloc(&dev, N * sizeof(int)));
	CHECK(cudaStreamCreate(&s));
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	hf_fill<<<N / 256, 256, 0, s>>>(dev, 5, N);
	CHECK(cudaGetLastError());
	CHECK(cudaLaunchHostFunc(s, count_fn, &count));
	hf_add<<<N / 256, 256, 0, s>>>(dev, dev, N);
	CHECK(cudaGetLastError());
	CHECK(cudaStreamEndCapture(s, &g));
	REQUIRE(count == 0, "a captured host function ran at capture");
	CHECK(cudaGraphGetNodes(g, NULL, &nodes));
	{
		cudaGraphNode_t list[8];
		size_t n = nodes < 8 ? nodes : 8;

		CHECK(cudaGraphGetNodes(g, list, &n));
		for (size_t i = 0; i < n; i++) {
			cudaGraphNodeType t;

			CHECK(cudaGraphNodeGetType(list[i], &t));
			hosts += t == cudaGraphNodeTypeHost;
		}
	}
	REQUIRE(nodes == 3 && hosts == 1, "captured graph: %zu nodes, %zu host nodes", nodes, hosts);
	CHECK(cudaGraphInstantiate(&x, g, 0));
	for (int i = 0; i < 10; i++)
		CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(count == 10, "the captured host function ran %d times in 10 launches", count);
	{
		int h[N];

		CHECK(cudaMemcpy(h, dev, sizeof(h), cudaMemcpyDeviceToHost));
		for (int i = 0; i < N; i++)
			REQUIRE(h[i] == 10, "[%d] = %d after the captured graph", i, h[i]);
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(dev));
}

/* ---- 7. synchronisation waits for host functions ------------------------ */

static void sync_waits(void)
{
	static volatile int done;
	cudaStream_t s;

	CHECK(cudaStreamCreate(&s));
	done = 0;
	CHECK(cudaLaunchHostFunc(s, slow_fn, (void *)&done));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(done == 1, "cudaStreamSynchronize returned before the host function");
	done = 0;
	CHECK(cudaLaunchHostFunc(s, slow_fn, (void *)&done));
	CHECK(cudaDeviceSynchronize());
	REQUIRE(done == 1, "cudaDeviceSynchronize returned before the host function");
	done = 0;
	CHECK(cudaLaunchHostFunc(s, slow_fn, (void *)&done));
	while (cudaStreamQuery(s) == cudaErrorNotReady)
		sleep_ms(5);
	REQUIRE(done == 1, "cudaStreamQuery answered success before the host function returned");
	CHECK(cudaStreamDestroy(s));
}

int main(void)
{
	CHECK(cudaSetDevice(0));
	order();
	several_streams();
	callbacks();
	many();
	built_graph();
	captured_graph();
	sync_waits();
	test_pass("host_funcs");
	return 0;
}
