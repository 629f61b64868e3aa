/* graph_conditional: CUDA graphs with conditional nodes, through the runtime
 * API, every result checked against values computed on the host.
 *
 *  1. an IF node whose condition a kernel sets from device memory, its body
 *     a kernel; launched again and again with the flag changed between
 *     launches;
 *  2. an IF/ELSE node (size 2): one body or the other, by the flag;
 *  3. a WHILE node (default 1, applied at each launch) whose body kernel
 *     adds a counter to a sum, decrements the counter and sets the
 *     condition (cudaGraphSetConditional in device code) until it is 0;
 *     launched with several counters: the sum is n(n+1)/2;
 *  4. a SWITCH node of 3 bodies, the selector set by a kernel: each value
 *     runs its body, a value past the bodies none;
 *  5. the pattern of NVIDIA's graphConditionalNodes sample: a conditional
 *     node added to the graph a stream capture builds (its handle made on
 *     that graph), the capture's dependencies moved after it, and its
 *     body filled afterwards by a capture into it (cudaStreamBeginCaptureToGraph);
 *  6. what the driver documents as refused: a graph with conditional nodes
 *     cloned, or instantiated while an executable of it exists;
 *  7. nesting: a while node whose body holds, after its counting kernel, a
 *     kernel setting a handle made on the body graph and an if node on that
 *     handle whose body holds a child graph node;
 *  8. a child graph node's embedded graph (cudaGraphChildGraphNodeGetGraph,
 *     a graph the node owns, like a body): a kernel node added to it runs
 *     with the node.
 *
 * CPU versions of the kernels for the sim: sim_kernels.c (they set
 * conditions with SIM_SET_CONDITIONAL). */
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

extern "C" __global__ void cg_set(cudaGraphConditionalHandle h, const int *flag)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		cudaGraphSetConditional(h, (unsigned)*flag);
}

extern "C" __global__ void cg_add(int *a, int v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] += v;
}

/* One step of the while loop: sum += counter, counter -= 1, go on while
 * the counter is positive. */
extern "C" __global__ void cg_step(cudaGraphConditionalHandle h, int *counter, long long *sum)
{
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		*sum += *counter;
		*counter -= 1;
		cudaGraphSetConditional(h, *counter > 0 ? 1u : 0u);
	}
}

static const int N = 1000;
static const int B = 128;
static const int G = (N + B - 1) / B;

static void put_int(int *d, int v)
{
	CHECK(cudaMemcpy(d, &v, sizeof(v), cudaMemcpyHostToDevice));
}

static std::vector<int> fetch(const int *d)
{
	std::vector<int> h(N);

	CHECK(cudaMemcpy(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));
	return h;
}

static void expect_all(const int *d, int want, const char *what)
{
	std::vector<int> h = fetch(d);

	for (int i = 0; i < N; i++)
		REQUIRE(h[i] == want, "%s: a[%d] = %d, want %d", what, i, h[i], want);
}

static cudaGraphNode_t add_kernel(cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps, void *fn,
				  dim3 grid, dim3 block, void **args)
{
	cudaKernelNodeParams p = {};
	cudaGraphNode_t n;

	p.func = fn;
	p.gridDim = grid;
	p.blockDim = block;
	p.kernelParams = args;
	CHECK(cudaGraphAddKernelNode(&n, g, deps, ndeps, &p));
	return n;
}

/* A conditional node of @type and @size after @dep in @g; its bodies in @bodies. */
static cudaGraphNode_t add_cond(cudaGraph_t g, cudaGraphNode_t dep, cudaGraphConditionalHandle h,
				cudaGraphConditionalNodeType type, unsigned size, cudaGraph_t *bodies)
{
	cudaGraphNodeParams p = {};
	cudaGraphNode_t n;

	p.type = cudaGraphNodeTypeConditional;
	p.conditional.handle = h;
	p.conditional.type = type;
	p.conditional.size = size;
	CHECK(cudaGraphAddNode(&n, g, dep ? &dep : NULL, NULL, dep ? 1 : 0, &p));
	REQUIRE(p.conditional.phGraph_out != NULL, "no body graphs");
	for (unsigned k = 0; k < size; k++) {
		bodies[k] = p.conditional.phGraph_out[k];
		REQUIRE(bodies[k] != NULL, "body %u is NULL", k);
	}
	cudaGraphNodeType t;
	CHECK(cudaGraphNodeGetType(n, &t));
	REQUIRE(t == cudaGraphNodeTypeConditional, "node type %d", (int)t);
	return n;
}

/* 1 and 2: if, and if/else. */
static void test_if(cudaStream_t s, int *a, int *flag, bool with_else)
{
	cudaGraphConditionalHandle h;
	cudaGraph_t g, bodies[2];
	cudaGraphExec_t x;
	int n = N, plus = 5, minus = -3;
	int want = 0;

	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
	void *set_args[] = { &h, &flag };
	cudaGraphNode_t set = add_kernel(g, NULL, 0, (void *)cg_set, 1, 1, set_args);
	add_cond(g, set, h, cudaGraphCondTypeIf, with_else ? 2 : 1, bodies);
	void *add_args[] = { &a, &plus, &n };
	add_kernel(bodies[0], NULL, 0, (void *)cg_add, G, B, add_args);
	if (with_else) {
		void *sub_args[] = { &a, &minus, &n };
		add_kernel(bodies[1], NULL, 0, (void *)cg_add, G, B, sub_args);
	}
	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaMemset(a, 0, N * sizeof(int)));
	const int flags[] = { 1, 0, 1, 1, 0, 7 };
	for (int f : flags) {
		put_int(flag, f);
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		want += f ? plus : (with_else ? minus : 0);
		expect_all(a, want, with_else ? "if/else" : "if");
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	printf("graph_conditional: %s ok\n", with_else ? "if/else" : "if");
}

/* 3: while, its condition set by the body's kernel. */
static void test_while(cudaStream_t s, int *counter, long long *sum)
{
	cudaGraphConditionalHandle h;
	cudaGraph_t g, body;
	cudaGraphExec_t x;

	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
	add_cond(g, NULL, h, cudaGraphCondTypeWhile, 1, &body);
	void *args[] = { &h, &counter, &sum };
	add_kernel(body, NULL, 0, (void *)cg_step, 1, 1, args);
	CHECK(cudaGraphInstantiate(&x, g, 0));

	/* Documented restrictions of graphs with conditional nodes. */
	cudaGraph_t clone;
	cudaGraphExec_t second;
	REQUIRE(cudaGraphClone(&clone, g) != cudaSuccess, "a graph with a conditional node was cloned");
	REQUIRE(cudaGraphInstantiate(&second, g, 0) != cudaSuccess, "a second executable of the graph");
	cudaGetLastError();

	const int counters[] = { 5, 1, 10, 0, 3 };
	for (int c : counters) {
		long long zero = 0, got;
		int left;
		long long want = c > 0 ? (long long)c * (c + 1) / 2 : 0;

		put_int(counter, c);
		CHECK(cudaMemcpy(sum, &zero, sizeof(zero), cudaMemcpyHostToDevice));
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		CHECK(cudaMemcpy(&got, sum, sizeof(got), cudaMemcpyDeviceToHost));
		CHECK(cudaMemcpy(&left, counter, sizeof(left), cudaMemcpyDeviceToHost));
		/* The body runs once at least (default 1), then while counter > 0. */
		REQUIRE(got == want, "while from %d: sum %lld, want %lld", c, got, want);
		REQUIRE(left == (c > 0 ? 0 : c - 1), "while from %d: counter %d", c, left);
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	printf("graph_conditional: while ok\n");
}

/* 4: switch of three bodies. */
static void test_switch(cudaStream_t s, int *a, int *sel)
{
	cudaGraphConditionalHandle h;
	cudaGraph_t g, bodies[3];
	cudaGraphExec_t x;
	int n = N, adds[3] = { 10, 20, 30 };
	int want = 0;

	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
	void *set_args[] = { &h, &sel };
	cudaGraphNode_t set = add_kernel(g, NULL, 0, (void *)cg_set, 1, 1, set_args);
	add_cond(g, set, h, cudaGraphCondTypeSwitch, 3, bodies);
	for (int k = 0; k < 3; k++) {
		void *args[] = { &a, &adds[k], &n };
		add_kernel(bodies[k], NULL, 0, (void *)cg_add, G, B, args);
	}
	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaMemset(a, 0, N * sizeof(int)));
	const int sels[] = { 0, 2, 1, 3, 2, 100 };
	for (int v : sels) {
		put_int(sel, v);
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		want += v < 3 ? adds[v] : 0;
		expect_all(a, want, "switch");
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	printf("graph_conditional: switch ok\n");
}

/* 5: the conditional node made inside a stream capture, its body captured. */
static void test_captured(cudaStream_t s, int *a, int *counter, long long *sum)
{
	cudaStreamCaptureStatus st;
	const cudaGraphNode_t *deps;
	size_t ndeps;
	cudaGraphConditionalHandle h;
	cudaGraph_t cg, g, body;
	cudaGraphNode_t cond;
	cudaGraphExec_t x;
	cudaStream_t s2;
	int one = 1, n = N;

	CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	cg_add<<<G, B, 0, s>>>(a, one, n);
	CHECK(cudaStreamGetCaptureInfo(s, &st, NULL, &cg, &deps, NULL, &ndeps));
	REQUIRE(st == cudaStreamCaptureStatusActive && ndeps == 1, "capture status %d, %zu dependencies",
		(int)st, ndeps);
	CHECK(cudaGraphConditionalHandleCreate(&h, cg, 1, cudaGraphCondAssignDefault));
	cudaGraphNodeParams p = {};
	p.type = cudaGraphNodeTypeConditional;
	p.conditional.handle = h;
	p.conditional.type = cudaGraphCondTypeWhile;
	p.conditional.size = 1;
	CHECK(cudaGraphAddNode(&cond, cg, deps, NULL, ndeps, &p));
	body = p.conditional.phGraph_out[0];
	CHECK(cudaStreamUpdateCaptureDependencies(s, &cond, NULL, 1, cudaStreamSetCaptureDependencies));
	cg_add<<<G, B, 0, s>>>(a, one, n);
	CHECK(cudaStreamEndCapture(s, &g));
	REQUIRE(g == cg, "the capture ended in another graph");

	/* The body, by a capture into it. */
	CHECK(cudaStreamBeginCaptureToGraph(s2, body, NULL, NULL, 0, cudaStreamCaptureModeGlobal));
	cg_step<<<1, 1, 0, s2>>>(h, counter, sum);
	cudaGraph_t same;
	CHECK(cudaStreamEndCapture(s2, &same));
	REQUIRE(same == body, "the capture into the body ended in another graph");

	size_t count = 0;
	CHECK(cudaGraphGetNodes(g, NULL, &count));
	REQUIRE(count == 3, "captured graph has %zu nodes, want 3", count);
	CHECK(cudaGraphGetNodes(body, NULL, &count));
	REQUIRE(count == 1, "captured body has %zu nodes, want 1", count);

	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaMemset(a, 0, N * sizeof(int)));
	const int counters[] = { 4, 7, 2 };
	int launches = 0;
	for (int c : counters) {
		long long zero = 0, got;

		put_int(counter, c);
		CHECK(cudaMemcpy(sum, &zero, sizeof(zero), cudaMemcpyHostToDevice));
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		launches++;
		CHECK(cudaMemcpy(&got, sum, sizeof(got), cudaMemcpyDeviceToHost));
		REQUIRE(got == (long long)c * (c + 1) / 2, "captured while from %d: sum %lld", c, got);
		expect_all(a, 2 * launches, "captured");
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaStreamDestroy(s2));
	printf("graph_conditional: captured while ok\n");
}

/* 7: an if node inside a while body, on a handle of the body graph, its
 * own body a child graph. */
static void test_nested(cudaStream_t s, int *a, int *flag, int *counter, long long *sum)
{
	cudaGraphConditionalHandle h, hb;
	cudaGraph_t g, body, inner, child;
	cudaGraphExec_t x;
	int n = N, hundred = 100;

	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
	add_cond(g, NULL, h, cudaGraphCondTypeWhile, 1, &body);
	void *step_args[] = { &h, &counter, &sum };
	cudaGraphNode_t step = add_kernel(body, NULL, 0, (void *)cg_step, 1, 1, step_args);
	CHECK(cudaGraphConditionalHandleCreate(&hb, body, 0, 0));
	void *set_args[] = { &hb, &flag };
	cudaGraphNode_t set = add_kernel(body, &step, 1, (void *)cg_set, 1, 1, set_args);
	add_cond(body, set, hb, cudaGraphCondTypeIf, 1, &inner);
	CHECK(cudaGraphCreate(&child, 0));
	void *add_args[] = { &a, &hundred, &n };
	add_kernel(child, NULL, 0, (void *)cg_add, G, B, add_args);
	cudaGraphNode_t cn;
	CHECK(cudaGraphAddChildGraphNode(&cn, inner, NULL, 0, child));
	CHECK(cudaGraphDestroy(child));         /* the node holds its own copy */
	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaMemset(a, 0, N * sizeof(int)));
	int want = 0;
	const int runs[][2] = { { 3, 1 }, { 4, 0 }, { 2, 1 } };
	for (const auto &r : runs) {
		long long zero = 0, got;

		put_int(counter, r[0]);
		put_int(flag, r[1]);
		CHECK(cudaMemcpy(sum, &zero, sizeof(zero), cudaMemcpyHostToDevice));
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		CHECK(cudaMemcpy(&got, sum, sizeof(got), cudaMemcpyDeviceToHost));
		REQUIRE(got == (long long)r[0] * (r[0] + 1) / 2, "nested while from %d: sum %lld", r[0], got);
		want += r[1] ? r[0] * hundred : 0;
		expect_all(a, want, "nested if");
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	printf("graph_conditional: nested ok\n");
}

/* 8: a node added to a child graph node's embedded graph. */
static void test_embedded(cudaStream_t s, int *a)
{
	cudaGraph_t g, child, embedded, again;
	cudaGraphNode_t cn, first;
	cudaGraphExec_t x;
	int n = N, one = 1, ten = 10;
	size_t count = 1;

	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphCreate(&child, 0));
	void *one_args[] = { &a, &one, &n };
	add_kernel(child, NULL, 0, (void *)cg_add, G, B, one_args);
	CHECK(cudaGraphAddChildGraphNode(&cn, g, NULL, 0, child));
	CHECK(cudaGraphDestroy(child));
	CHECK(cudaGraphChildGraphNodeGetGraph(cn, &embedded));
	CHECK(cudaGraphChildGraphNodeGetGraph(cn, &again));
	REQUIRE(again == embedded, "the embedded graph has two handles");
	CHECK(cudaGraphGetNodes(embedded, &first, &count));
	REQUIRE(count == 1, "the embedded graph has %zu nodes", count);
	void *ten_args[] = { &a, &ten, &n };
	add_kernel(embedded, &first, 1, (void *)cg_add, G, B, ten_args);
	CHECK(cudaGraphGetNodes(embedded, NULL, &count));
	REQUIRE(count == 2, "the embedded graph has %zu nodes after an add", count);
	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaMemset(a, 0, N * sizeof(int)));
	for (int i = 1; i <= 3; i++) {
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		expect_all(a, 11 * i, "embedded");
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	printf("graph_conditional: embedded child graph ok\n");
}

int main(void)
{
	cudaStream_t s;
	int *a, *flag, *counter;
	long long *sum;

	CHECK(cudaSetDevice(0));
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaMalloc(&a, N * sizeof(int)));
	CHECK(cudaMalloc(&flag, sizeof(int)));
	CHECK(cudaMalloc(&counter, sizeof(int)));
	CHECK(cudaMalloc(&sum, sizeof(long long)));
	test_if(s, a, flag, false);
	test_if(s, a, flag, true);
	test_while(s, counter, sum);
	test_switch(s, a, flag);
	test_captured(s, a, counter, sum);
	test_nested(s, a, flag, counter, sum);
	test_embedded(s, a);
	CHECK(cudaFree(a));
	CHECK(cudaFree(flag));
	CHECK(cudaFree(counter));
	CHECK(cudaFree(sum));
	CHECK(cudaStreamDestroy(s));
	test_pass("graph_conditional");
	return 0;
}
