/* Graph memcpy nodes with host memory at one end, as software not written
 * for tern makes them (NVIDIA's simpleCudaGraphs, graphMemoryNodes):
 *
 *  1. a stream capture of cudaMemcpyAsync host to device, a kernel and
 *     cudaMemcpyAsync device to host, from pinned and from pageable
 *     memory; the graph launched many times, the host input changed
 *     between launches: every launch reads and writes the host memory
 *     when it runs;
 *  2. cudaGraphAddMemcpyNode with pitched host rows (3D parameters) and
 *     cudaGraphAddMemcpyNode1D with cudaMemcpyDefault, the node's
 *     parameters read back;
 *  3. cudaGraphMemcpyNodeSetParams1D on the graph and
 *     cudaGraphExecMemcpyNodeSetParams1D on an executable: another host
 *     buffer from the next launch on;
 *  4. two launches queued back to back, each followed by a host function
 *     that checks and changes the host buffers: stream order.
 *
 * Every result is checked against values computed on the host.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "check.h"

extern "C" __global__ void hc_scale(const float *in, float *out, float k, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = in[i] * k;
}

static const int N = 4096;
static const int B = 256;

static void fill(float *h, int n, int seed)
{
	for (int i = 0; i < n; i++)
		h[i] = (float)((i * 7 + seed * 13) % 1000) - 250.0f;
}

static void expect_scaled(const float *in, const float *out, int n, float k, const char *what, int round)
{
	for (int i = 0; i < n; i++)
		REQUIRE(out[i] == in[i] * k, "%s round %d: out[%d] = %g, want %g", what, round, i, out[i],
			in[i] * k);
}

static size_t memcpy_nodes(cudaGraph_t g, size_t *all)
{
	size_t n = 0, m = 0;

	CHECK(cudaGraphGetNodes(g, NULL, &n));
	std::vector<cudaGraphNode_t> nodes(n);
	CHECK(cudaGraphGetNodes(g, nodes.data(), &n));
	for (size_t i = 0; i < n; i++) {
		cudaGraphNodeType t;

		CHECK(cudaGraphNodeGetType(nodes[i], &t));
		m += t == cudaGraphNodeTypeMemcpy;
	}
	*all = n;
	return m;
}

/* 1: a captured round trip through the device, launched many times. */
static void test_captured(cudaStream_t s, bool pinned)
{
	const size_t bytes = N * sizeof(float);
	const char *what = pinned ? "captured pinned" : "captured pageable";
	float *hin, *hout, *din, *dout;
	cudaGraph_t g;
	cudaGraphExec_t x;
	float k = 3.0f;
	int n = N;

	if (pinned) {
		CHECK(cudaMallocHost(&hin, bytes));
		CHECK(cudaMallocHost(&hout, bytes));
	} else {
		hin = (float *)malloc(bytes);
		hout = (float *)malloc(bytes);
		REQUIRE(hin && hout, "out of memory");
	}
	CHECK(cudaMalloc(&din, bytes));
	CHECK(cudaMalloc(&dout, bytes));
	fill(hin, N, 0);
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	CHECK(cudaMemcpyAsync(din, hin, bytes, cudaMemcpyHostToDevice, s));
	hc_scale<<<(N + B - 1) / B, B, 0, s>>>(din, dout, k, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpyAsync(hout, dout, bytes, cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamEndCapture(s, &g));
	size_t all, copies = memcpy_nodes(g, &all);
	REQUIRE(all == 3 && copies == 2, "%s: %zu nodes, %zu memcpy nodes (want 3, 2)", what, all, copies);
	CHECK(cudaGraphInstantiate(&x, g, 0));
	for (int round = 0; round < 5; round++) {
		fill(hin, N, round + 1);
		memset(hout, 0, bytes);
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		expect_scaled(hin, hout, N, k, what, round);
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaFree(din));
	CHECK(cudaFree(dout));
	if (pinned) {
		CHECK(cudaFreeHost(hin));
		CHECK(cudaFreeHost(hout));
	} else {
		free(hin);
		free(hout);
	}
	printf("graph_host_copies: %s ok\n", what);
}

/* 2 and 3: explicit nodes, pitched host rows, parameters changed. */
static void test_explicit(cudaStream_t s)
{
	const int W = 48, H = 32;               /* floats per row, rows */
	const size_t hpitch = 64 * sizeof(float); /* host rows 64 floats apart */
	const size_t bytes = (size_t)W * H * sizeof(float);
	float *hin = (float *)calloc(64 * H, sizeof(float));
	float *hout = (float *)calloc(W * H, sizeof(float));
	float *hout2 = (float *)calloc(W * H, sizeof(float));
	float *din, *dout;
	float k = -2.0f;
	int n = W * H;

	REQUIRE(hin && hout && hout2, "out of memory");
	CHECK(cudaMalloc(&din, bytes));
	CHECK(cudaMalloc(&dout, bytes));

	cudaGraph_t g;
	cudaGraphNode_t in_node, kernel, out_node;
	CHECK(cudaGraphCreate(&g, 0));
	cudaMemcpy3DParms p = {};
	p.srcPtr = make_cudaPitchedPtr(hin, hpitch, W * sizeof(float), H);
	p.dstPtr = make_cudaPitchedPtr(din, W * sizeof(float), W * sizeof(float), H);
	p.extent = make_cudaExtent(W * sizeof(float), H, 1);
	p.kind = cudaMemcpyHostToDevice;
	CHECK(cudaGraphAddMemcpyNode(&in_node, g, NULL, 0, &p));
	void *args[] = { &din, &dout, &k, &n };
	cudaKernelNodeParams kp = {};
	kp.func = (void *)hc_scale;
	kp.gridDim = dim3((n + B - 1) / B);
	kp.blockDim = dim3(B);
	kp.kernelParams = args;
	CHECK(cudaGraphAddKernelNode(&kernel, g, &in_node, 1, &kp));
	CHECK(cudaGraphAddMemcpyNode1D(&out_node, g, &kernel, 1, hout, dout, bytes, cudaMemcpyDefault));

	cudaMemcpy3DParms back = {};
	CHECK(cudaGraphMemcpyNodeGetParams(in_node, &back));
	REQUIRE(back.srcPtr.ptr == hin && back.srcPtr.pitch == hpitch && back.dstPtr.ptr == din,
		"memcpy node parameters read back: src %p pitch %zu dst %p", back.srcPtr.ptr, back.srcPtr.pitch,
		back.dstPtr.ptr);

	cudaGraphExec_t x;
	CHECK(cudaGraphInstantiate(&x, g, 0));
	for (int round = 0; round < 3; round++) {
		for (int r = 0; r < H; r++)
			fill(hin + r * 64, W, round * 100 + r);
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		for (int r = 0; r < H; r++)
			expect_scaled(hin + r * 64, hout + r * W, W, k, "explicit pitched", round);
	}

	/* The executable writes another host buffer from now on (of the
	 * node's own kind: the H200's driver refuses an executable's memcpy
	 * node a change of kind at its next launch, and a pitched node another
	 * host source at the call). */
	CHECK(cudaGraphExecMemcpyNodeSetParams1D(x, out_node, hout2, dout, bytes, cudaMemcpyDefault));
	for (int r = 0; r < H; r++)
		fill(hin + r * 64, W, 7000 + r);
	memset(hout, 0, bytes);
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	for (int r = 0; r < H; r++)
		expect_scaled(hin + r * 64, hout2 + r * W, W, k, "executable set params", 0);
	for (int i = 0; i < W * H; i++)
		REQUIRE(hout[i] == 0.0f, "the old output buffer was written after the executable's change");

	/* The graph's own node changed; a new executable takes it. */
	CHECK(cudaGraphMemcpyNodeSetParams1D(out_node, hout2, dout, bytes, cudaMemcpyDeviceToHost));
	cudaGraphExec_t x2;
	CHECK(cudaGraphInstantiate(&x2, g, 0));
	memset(hout2, 0, bytes);
	for (int r = 0; r < H; r++)
		fill(hin + r * 64, W, 9000 + r);
	CHECK(cudaGraphLaunch(x2, s));
	CHECK(cudaStreamSynchronize(s));
	for (int r = 0; r < H; r++)
		expect_scaled(hin + r * 64, hout2 + r * W, W, k, "graph set params", 0);

	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphExecDestroy(x2));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaFree(din));
	CHECK(cudaFree(dout));
	free(hin);
	free(hout);
	free(hout2);
	printf("graph_host_copies: explicit nodes ok\n");
}

/* 4: launches queued back to back, a host function after each that checks
 * the output and changes the input for the next: each launch reads the
 * host buffer when the stream reaches it. */
struct chain {
	float *hin, *hout;
	int round, bad;
};

static void CUDART_CB chain_step(void *arg)
{
	struct chain *c = (struct chain *)arg;

	for (int i = 0; i < N; i++)
		if (c->hout[i] != c->hin[i] * 5.0f)
			c->bad++;
	c->round++;
	fill(c->hin, N, 500 + c->round);
}

static void test_stream_order(cudaStream_t s)
{
	const size_t bytes = N * sizeof(float);
	struct chain c = {};
	float *din, *dout, k = 5.0f;
	cudaGraph_t g;
	cudaGraphExec_t x;
	int n = N;

	CHECK(cudaMallocHost(&c.hin, bytes));
	CHECK(cudaMallocHost(&c.hout, bytes));
	CHECK(cudaMalloc(&din, bytes));
	CHECK(cudaMalloc(&dout, bytes));
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	CHECK(cudaMemcpyAsync(din, c.hin, bytes, cudaMemcpyHostToDevice, s));
	hc_scale<<<(N + B - 1) / B, B, 0, s>>>(din, dout, k, n);
	CHECK(cudaMemcpyAsync(c.hout, dout, bytes, cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamEndCapture(s, &g));
	CHECK(cudaGraphInstantiate(&x, g, 0));
	fill(c.hin, N, 500);
	for (int i = 0; i < 6; i++) {
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaLaunchHostFunc(s, chain_step, &c));
	}
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(c.round == 6 && c.bad == 0, "stream order: %d rounds, %d wrong values", c.round, c.bad);
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaFree(din));
	CHECK(cudaFree(dout));
	CHECK(cudaFreeHost(c.hin));
	CHECK(cudaFreeHost(c.hout));
	printf("graph_host_copies: stream order ok\n");
}

int main(void)
{
	cudaStream_t s;

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	test_captured(s, true);
	test_captured(s, false);
	test_explicit(s);
	test_stream_order(s);
	CHECK(cudaStreamDestroy(s));
	printf("PASS graph_host_copies\n");
	return 0;
}
