/* graphs: CUDA graphs through the runtime API.
 *
 *  1. stream capture across two streams (fork and join with events) of a
 *     memset, kernels and a device-to-device copy; the graph is launched 50
 *     times and its results checked after every launch;
 *  2. capture details: status and id, the capture graph and its dependencies
 *     (a node added to it by hand, cudaStreamUpdateCaptureDependencies),
 *     relaxed mode with cudaMalloc inside the capture, the capture mode of a
 *     thread, and the errors: a synchronisation during capture invalidates
 *     it, the legacy stream cannot capture; a copy from pinned host memory in
 *     a capture (native: a memcpy node; tern: cudaErrorNotSupported);
 *  3. a graph built node by node: memset, kernel, 1D copy, empty, child graph,
 *     event record and wait nodes, memory allocation and free nodes, edges
 *     added afterwards; its shape read back (nodes, roots, edges, types);
 *     instantiated, uploaded, launched, cloned;
 *  4. cudaGraphExecKernelNodeSetParams and cudaGraphExecUpdate (one that
 *     works, one refused for a changed topology);
 *  5. a host node: runs in the program's process (through tern too: the
 *     worker calls the shim back; host_funcs.cu tests that in depth);
 *  6. node parameters read back (kernel with its arguments, memcpy, memset,
 *     event record and wait, allocation and free nodes) and compared with
 *     what was given; memcpy, memset and event nodes changed in the graph
 *     and in an executable (cudaGraphExecNodeSetParams too), a node of an
 *     executable disabled and enabled again, each checked by a launch; kernel
 *     node attributes set, read back and copied; an
 *     executable's child graph node given another child graph of the same
 *     shape (and refused one of another); a capture into a graph of the
 *     program's after one of its nodes; the graph printed as dot text at
 *     a path of this process.
 *
 * CPU versions of the kernels for the sim: sim_kernels.c. */
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vector>

extern "C" __global__ void g_iota(int *a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] = i;
}

extern "C" __global__ void g_scale(int *a, int k, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] *= k;
}

extern "C" __global__ void g_fill(int *a, int v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] = v;
}

extern "C" __global__ void g_add(int *y, const int *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] += x[i];
}

static const int N = 3000;
static const int B = 256;
static const int G = (N + B - 1) / B;

static std::vector<int> fetch(const int *d, int n = N)
{
	std::vector<int> h(n);

	CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
	return h;
}

/* 1. Fork/join capture; c accumulates, so every launch must run whole and in order. */
static void captured_graph(void)
{
	cudaStream_t s0, s1;
	cudaEvent_t fork, join;
	cudaStreamCaptureStatus st;
	unsigned long long id = 0;
	cudaGraph_t g;
	cudaGraphExec_t x;
	int *a, *b, *c, *d;
	size_t count = 0;

	CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
	CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
	CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
	CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
	CHECK(cudaMalloc(&a, N * sizeof(int)));
	CHECK(cudaMalloc(&b, N * sizeof(int)));
	CHECK(cudaMalloc(&c, N * sizeof(int)));
	CHECK(cudaMalloc(&d, N * sizeof(int)));
	CHECK(cudaMemset(c, 0, N * sizeof(int)));

	CHECK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
	CHECK(cudaStreamIsCapturing(s0, &st));
	REQUIRE(st == cudaStreamCaptureStatusActive, "s0 not capturing (%d)", (int)st);
	CHECK(cudaStreamIsCapturing(s1, &st));
	REQUIRE(st == cudaStreamCaptureStatusNone, "s1 capturing before it joined (%d)", (int)st);
	CHECK(cudaStreamGetCaptureInfo(s0, &st, &id));
	REQUIRE(st == cudaStreamCaptureStatusActive && id != 0, "capture info %d id %llu", (int)st, id);

	CHECK(cudaMemsetAsync(a, 0xff, N * sizeof(int), s0));
	g_iota<<<G, B, 0, s0>>>(a, N);
	CHECK(cudaGetLastError());
	CHECK(cudaEventRecord(fork, s0));
	CHECK(cudaStreamWaitEvent(s1, fork, 0));
	CHECK(cudaStreamIsCapturing(s1, &st));
	REQUIRE(st == cudaStreamCaptureStatusActive, "s1 did not join the capture (%d)", (int)st);
	g_scale<<<G, B, 0, s1>>>(a, 2, N);              /* a = 2i, on the fork */
	CHECK(cudaGetLastError());
	g_fill<<<G, B, 0, s0>>>(b, 3, N);               /* b = 3, beside it */
	CHECK(cudaGetLastError());
	CHECK(cudaEventRecord(join, s1));
	CHECK(cudaStreamWaitEvent(s0, join, 0));
	g_add<<<G, B, 0, s0>>>(b, a, N);                /* b = 3 + 2i */
	g_add<<<G, B, 0, s0>>>(c, b, N);                /* c += 3 + 2i */
	CHECK(cudaMemcpyAsync(d, b, N * sizeof(int), cudaMemcpyDeviceToDevice, s0));
	CHECK(cudaGetLastError());
	CHECK(cudaStreamEndCapture(s0, &g));
	CHECK(cudaStreamIsCapturing(s0, &st));
	REQUIRE(st == cudaStreamCaptureStatusNone, "s0 still capturing (%d)", (int)st);
	CHECK(cudaStreamIsCapturing(s1, &st));
	REQUIRE(st == cudaStreamCaptureStatusNone, "s1 still capturing (%d)", (int)st);

	CHECK(cudaGraphGetNodes(g, NULL, &count));
	REQUIRE(count == 7, "captured graph has %zu nodes, expected 7", count);
	CHECK(cudaGraphInstantiate(&x, g, 0));
	for (int k = 1; k <= 50; k++) {
		CHECK(cudaGraphLaunch(x, s0));
		CHECK(cudaStreamSynchronize(s0));
		std::vector<int> hc = fetch(c), hd = fetch(d);

		for (int i = 0; i < N; i++) {
			REQUIRE(hc[i] == k * (3 + 2 * i), "launch %d: c[%d] = %d, expected %d", k, i, hc[i],
				k * (3 + 2 * i));
			REQUIRE(hd[i] == 3 + 2 * i, "launch %d: d[%d] = %d", k, i, hd[i]);
		}
	}
	/* Launches queued back to back, checked once. */
	for (int k = 0; k < 20; k++)
		CHECK(cudaGraphLaunch(x, s1));
	CHECK(cudaStreamSynchronize(s1));
	{
		std::vector<int> hc = fetch(c);

		for (int i = 0; i < N; i++)
			REQUIRE(hc[i] == 70 * (3 + 2 * i), "after 70 launches c[%d] = %d", i, hc[i]);
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaFree(a));
	CHECK(cudaFree(b));
	CHECK(cudaFree(c));
	CHECK(cudaFree(d));
	CHECK(cudaEventDestroy(fork));
	CHECK(cudaEventDestroy(join));
	CHECK(cudaStreamDestroy(s0));
	CHECK(cudaStreamDestroy(s1));
}

/* 2. The capture graph, its dependencies, modes and errors. */
static void capture_details(void)
{
	cudaStream_t s;
	cudaStreamCaptureStatus st;
	cudaStreamCaptureMode mode;
	cudaGraph_t g = NULL, cg = NULL;
	cudaGraphExec_t x;
	const cudaGraphNode_t *deps = NULL;
	size_t ndeps = 0;
	cudaGraphNode_t manual;
	int *a, *tmp = NULL;
	int n = N;

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaMalloc(&a, N * sizeof(int)));

	/* A node added to the graph being captured, then made the stream's
	 * dependency: a = 5, then += a (10), in that order. */
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	g_fill<<<G, B, 0, s>>>(a, 5, N);
	CHECK(cudaGetLastError());
	CHECK(cudaStreamGetCaptureInfo(s, &st, NULL, &cg, &deps, NULL, &ndeps));
	REQUIRE(st == cudaStreamCaptureStatusActive && cg && ndeps == 1, "capture info: %d %p %zu", (int)st,
		(void *)cg, ndeps);
	{
		void *args[] = { &a, &a, &n };
		cudaKernelNodeParams p = {};

		p.func = (void *)g_add;
		p.gridDim = dim3(G);
		p.blockDim = dim3(B);
		p.kernelParams = args;
		CHECK(cudaGraphAddKernelNode(&manual, cg, deps, ndeps, &p));
	}
	CHECK(cudaStreamUpdateCaptureDependencies(s, &manual, NULL, 1, cudaStreamSetCaptureDependencies));
	g_scale<<<G, B, 0, s>>>(a, 3, N);               /* after the manual node: 30 */
	CHECK(cudaGetLastError());
	CHECK(cudaStreamEndCapture(s, &g));
	REQUIRE(g == cg, "the captured graph is not the one being captured into");
	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	for (int v : fetch(a))
		REQUIRE(v == 30, "manual node out of order: %d, expected 30", v);
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));

	/* Relaxed mode: cudaMalloc is allowed while capturing. */
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
	CHECK(cudaMalloc(&tmp, 4096));
	g_fill<<<1, 32, 0, s>>>(tmp, 1, 32);
	CHECK(cudaGetLastError());
	CHECK(cudaStreamEndCapture(s, &g));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaFree(tmp));

	/* A copy from pinned host memory in a capture: a memcpy node that
	 * reads the buffer when the graph runs (through tern too:
	 * graph_host_copies has the rest). */
	{
		int *pinned;

		CHECK(cudaMallocHost(&pinned, N * sizeof(int)));
		for (int i = 0; i < N; i++)
			pinned[i] = 7 * i;
		CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
		CHECK(cudaMemcpyAsync(a, pinned, N * sizeof(int), cudaMemcpyHostToDevice, s));
		CHECK(cudaStreamEndCapture(s, &g));
		CHECK(cudaGraphInstantiate(&x, g, 0));
		for (int i = 0; i < N; i++)
			pinned[i] = 30;         /* read when the graph runs */
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		CHECK(cudaGraphExecDestroy(x));
		CHECK(cudaGraphDestroy(g));
		CHECK(cudaFreeHost(pinned));
		for (int v : fetch(a))
			REQUIRE(v == 30, "after the host copy's capture a holds %d", v);
	}

	/* The thread's mode. */
	mode = cudaStreamCaptureModeRelaxed;
	CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
	REQUIRE(mode == cudaStreamCaptureModeGlobal, "the default mode is %d", (int)mode);
	CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
	REQUIRE(mode == cudaStreamCaptureModeRelaxed, "the mode read back is %d", (int)mode);

	/* A synchronisation in a capture is refused and invalidates it. */
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	g_fill<<<G, B, 0, s>>>(a, 1, N);
	CHECK(cudaGetLastError());
	EXPECT_RT(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
	CHECK(cudaStreamIsCapturing(s, &st));
	REQUIRE(st == cudaStreamCaptureStatusInvalidated, "status after the sync: %d", (int)st);
	g = (cudaGraph_t)1;
	EXPECT_RT(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
	REQUIRE(g == NULL, "an invalidated capture gave a graph");
	cudaGetLastError();
	/* The legacy stream cannot capture. */
	EXPECT_RT(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal),
		  cudaErrorStreamCaptureUnsupported);
	cudaGetLastError();
	/* Nothing of the failed capture ran: a is still 30. */
	CHECK(cudaStreamSynchronize(s));
	for (int v : fetch(a))
		REQUIRE(v == 30, "a failed capture ran: %d", v);
	CHECK(cudaFree(a));
	CHECK(cudaStreamDestroy(s));
}

/* 3. Node by node. */
static void built_graph(void)
{
	cudaStream_t s;
	cudaEvent_t ev;
	cudaGraph_t g, child, clone;
	cudaGraphExec_t x, xc;
	cudaGraphNode_t set, iota, copy, empty, sub, rec, wait, alloc, fill, out, freed;
	cudaGraphNodeType type;
	int *a, *b, *r, n = N;
	size_t count = 0;

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	CHECK(cudaMalloc(&a, N * sizeof(int)));
	CHECK(cudaMalloc(&b, N * sizeof(int)));
	CHECK(cudaMalloc(&r, N * sizeof(int)));
	CHECK(cudaGraphCreate(&g, 0));

	{
		cudaMemsetParams p = {};

		p.dst = b;
		p.value = 0;
		p.elementSize = 4;
		p.width = N;
		p.height = 1;
		CHECK(cudaGraphAddMemsetNode(&set, g, NULL, 0, &p));        /* b = 0 */
	}
	{
		void *args[] = { &a, &n };
		cudaKernelNodeParams p = {};

		p.func = (void *)g_iota;
		p.gridDim = dim3(G);
		p.blockDim = dim3(B);
		p.kernelParams = args;
		CHECK(cudaGraphAddKernelNode(&iota, g, NULL, 0, &p));       /* a = i */
	}
	/* b = a, after both: dependencies given now. */
	{
		cudaGraphNode_t deps[] = { set, iota };

		CHECK(cudaGraphAddMemcpyNode1D(&copy, g, deps, 2, b, a, N * sizeof(int),
					       cudaMemcpyDeviceToDevice));
	}
	CHECK(cudaGraphAddEmptyNode(&empty, g, &copy, 1));
	/* A child graph: b *= 4. */
	CHECK(cudaGraphCreate(&child, 0));
	{
		int k = 4;
		void *args[] = { &b, &k, &n };
		cudaKernelNodeParams p = {};
		cudaGraphNode_t cn;

		p.func = (void *)g_scale;
		p.gridDim = dim3(G);
		p.blockDim = dim3(B);
		p.kernelParams = args;
		CHECK(cudaGraphAddKernelNode(&cn, child, NULL, 0, &p));
	}
	CHECK(cudaGraphAddChildGraphNode(&sub, g, &empty, 1, child));
	CHECK(cudaGraphDestroy(child));         /* the node holds its own copy */
	CHECK(cudaGraphAddEventRecordNode(&rec, g, &sub, 1, ev));
	CHECK(cudaGraphAddEventWaitNode(&wait, g, &rec, 1, ev));
	/* A clone of what is there so far (memory nodes tie a graph to one
	 * executable at a time; the clone is made before them). */
	CHECK(cudaGraphClone(&clone, g));
	/* Scratch memory of the graph's own: filled with b + 1000 in two steps, copied to r, freed. */
	{
		cudaMemAllocNodeParams p = {};
		int *m;

		p.poolProps.allocType = cudaMemAllocationTypePinned;
		p.poolProps.location.type = cudaMemLocationTypeDevice;
		p.poolProps.location.id = 0;
		p.bytesize = N * sizeof(int);
		CHECK(cudaGraphAddMemAllocNode(&alloc, g, NULL, 0, &p));
		m = (int *)p.dptr;
		REQUIRE(m != NULL, "no address for the allocation node");
		{
			int v = 1000;
			void *args[] = { &m, &v, &n };
			cudaKernelNodeParams k = {};

			k.func = (void *)g_fill;
			k.gridDim = dim3(G);
			k.blockDim = dim3(B);
			k.kernelParams = args;
			CHECK(cudaGraphAddKernelNode(&fill, g, &alloc, 1, &k));
		}
		{
			void *args[] = { &m, &b, &n };
			cudaKernelNodeParams k = {};
			cudaGraphNode_t deps[] = { fill, wait };

			k.func = (void *)g_add;
			k.gridDim = dim3(G);
			k.blockDim = dim3(B);
			k.kernelParams = args;
			CHECK(cudaGraphAddKernelNode(&out, g, deps, 2, &k));
		}
		{
			cudaGraphNode_t c2;

			CHECK(cudaGraphAddMemcpyNode1D(&c2, g, &out, 1, r, m, N * sizeof(int),
						       cudaMemcpyDeviceToDevice));
			CHECK(cudaGraphAddMemFreeNode(&freed, g, &c2, 1, m));
		}
	}
	/* An edge added afterwards: the alloc node after the event wait. */
	CHECK(cudaGraphAddDependencies(g, &wait, &alloc, NULL, 1));

	CHECK(cudaGraphGetNodes(g, NULL, &count));
	REQUIRE(count == 12, "%zu nodes, expected 12", count);
	{
		cudaGraphNode_t roots[4];
		size_t nroots = 4, nedges = 0;

		CHECK(cudaGraphGetRootNodes(g, roots, &nroots));
		REQUIRE(nroots == 2, "%zu roots, expected 2", nroots);
		CHECK(cudaGraphGetEdges(g, NULL, NULL, NULL, &nedges));
		REQUIRE(nedges == 12, "%zu edges, expected 12", nedges);
	}
	CHECK(cudaGraphNodeGetType(copy, &type));
	REQUIRE(type == cudaGraphNodeTypeMemcpy, "copy node type %d", (int)type);
	CHECK(cudaGraphNodeGetType(sub, &type));
	REQUIRE(type == cudaGraphNodeTypeGraph, "child node type %d", (int)type);
	CHECK(cudaGraphNodeGetType(alloc, &type));
	REQUIRE(type == cudaGraphNodeTypeMemAlloc, "alloc node type %d", (int)type);
	{
		cudaGraphNode_t deps[4];
		size_t nd = 4;

		CHECK(cudaGraphNodeGetDependencies(out, deps, NULL, &nd));
		REQUIRE(nd == 2, "the output kernel has %zu dependencies", nd);
	}

	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaGraphUpload(x, s));
	for (int k = 0; k < 5; k++) {
		CHECK(cudaMemset(r, 0, N * sizeof(int)));
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		std::vector<int> hb = fetch(b), hr = fetch(r);

		for (int i = 0; i < N; i++) {
			REQUIRE(hb[i] == 4 * i, "launch %d: b[%d] = %d, expected %d", k, i, hb[i], 4 * i);
			REQUIRE(hr[i] == 1000 + 4 * i, "launch %d: r[%d] = %d", k, i, hr[i]);
		}
	}
	CHECK(cudaGraphExecDestroy(x));

	/* The clone runs what it holds, also once its original is gone. */
	{
		cudaGraphNode_t found;

		CHECK(cudaGraphNodeFindInClone(&found, copy, clone));
		CHECK(cudaGraphNodeGetType(found, &type));
		REQUIRE(type == cudaGraphNodeTypeMemcpy, "the clone's copy node has type %d", (int)type);
		CHECK(cudaGraphGetNodes(clone, NULL, &count));
		REQUIRE(count == 7, "the clone has %zu nodes, expected 7", count);
	}
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaMemset(b, 0, N * sizeof(int)));
	CHECK(cudaGraphInstantiate(&xc, clone, 0));
	CHECK(cudaGraphLaunch(xc, s));
	CHECK(cudaStreamSynchronize(s));
	{
		std::vector<int> hb = fetch(b);

		for (int i = 0; i < N; i++)
			REQUIRE(hb[i] == 4 * i, "clone: b[%d] = %d", i, hb[i]);
	}
	CHECK(cudaGraphExecDestroy(xc));
	CHECK(cudaGraphDestroy(clone));
	CHECK(cudaFree(a));
	CHECK(cudaFree(b));
	CHECK(cudaFree(r));
	CHECK(cudaEventDestroy(ev));
	CHECK(cudaStreamDestroy(s));
}

static cudaGraph_t fill_graph(int *p, int *v, int n, cudaGraphNode_t *node)
{
	void *args[] = { &p, v, &n };
	cudaKernelNodeParams k = {};
	cudaGraph_t g;

	k.func = (void *)g_fill;
	k.gridDim = dim3((n + B - 1) / B);
	k.blockDim = dim3(B);
	k.kernelParams = args;
	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphAddKernelNode(node, g, NULL, 0, &k));
	return g;
}

/* 4. Changing an executable graph. */
static void exec_changes(void)
{
	cudaStream_t s;
	cudaGraph_t g1, g2, g3;
	cudaGraphExec_t x;
	cudaGraphNode_t n1, n2, n3, extra;
	cudaGraphExecUpdateResultInfo info;
	int *p, v;

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaMalloc(&p, N * sizeof(int)));
	v = 5;
	g1 = fill_graph(p, &v, N, &n1);
	CHECK(cudaGraphInstantiate(&x, g1, 0));
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	for (int e : fetch(p))
		REQUIRE(e == 5, "first launch: %d", e);

	/* New arguments for the node, launched many times with a new value each time. */
	for (int k = 0; k < 40; k++) {
		int *q = p;
		int n = N;
		void *args[] = { &q, &k, &n };
		cudaKernelNodeParams kp = {};

		kp.func = (void *)g_fill;
		kp.gridDim = dim3(G);
		kp.blockDim = dim3(B);
		kp.kernelParams = args;
		CHECK(cudaGraphExecKernelNodeSetParams(x, n1, &kp));
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		for (int e : fetch(p))
			REQUIRE(e == k, "after set params %d: %d", k, e);
	}

	/* A graph of the same shape updates the executable. */
	v = 7;
	g2 = fill_graph(p, &v, N, &n2);
	memset(&info, 0, sizeof(info));
	CHECK(cudaGraphExecUpdate(x, g2, &info));
	REQUIRE(info.result == cudaGraphExecUpdateSuccess, "update result %d", (int)info.result);
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	for (int e : fetch(p))
		REQUIRE(e == 7, "after the update: %d", e);
	/* The executable's nodes still take parameters after an update. */
	{
		int *q = p, k = 8, n = N;
		void *args[] = { &q, &k, &n };
		cudaKernelNodeParams kp = {};
		unsigned enabled = 0;

		kp.func = (void *)g_fill;
		kp.gridDim = dim3(G);
		kp.blockDim = dim3(B);
		kp.kernelParams = args;
		CHECK(cudaGraphExecKernelNodeSetParams(x, n1, &kp));
		CHECK(cudaGraphNodeGetEnabled(x, n1, &enabled));
		REQUIRE(enabled == 1, "a node of the updated executable reads disabled");
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		for (int e : fetch(p))
			REQUIRE(e == 8, "set params after the update: %d", e);
	}

	/* Another shape does not. */
	v = 9;
	g3 = fill_graph(p, &v, N, &n3);
	CHECK(cudaGraphAddEmptyNode(&extra, g3, &n3, 1));
	memset(&info, 0, sizeof(info));
	EXPECT_RT(cudaGraphExecUpdate(x, g3, &info), cudaErrorGraphExecUpdateFailure);
	REQUIRE(info.result == cudaGraphExecUpdateErrorTopologyChanged, "refused update result %d",
		(int)info.result);
	cudaGetLastError();
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	for (int e : fetch(p))
		REQUIRE(e == 8, "after a refused update: %d", e);

	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g1));
	CHECK(cudaGraphDestroy(g2));
	CHECK(cudaGraphDestroy(g3));
	CHECK(cudaFree(p));
	CHECK(cudaStreamDestroy(s));
}

static void host_fn(void *arg)
{
	*(int *)arg = 42;
}

/* 5. A host node: the function runs in this process when the graph reaches it. */
static void host_node(void)
{
	cudaGraph_t g;
	cudaGraphNode_t n;
	cudaGraphExec_t x;
	cudaHostNodeParams p = {};
	static int flag;

	p.fn = host_fn;
	p.userData = &flag;
	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphAddHostNode(&n, g, NULL, 0, &p));
	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaGraphLaunch(x, 0));
	CHECK(cudaDeviceSynchronize());
	REQUIRE(flag == 42, "the host node did not run");
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
}

static cudaMemsetParams memset_of(int *dst, unsigned value)
{
	cudaMemsetParams mp = {};

	mp.dst = dst;
	mp.value = value;
	mp.elementSize = 4;
	mp.width = N;
	mp.height = 1;
	return mp;
}

static void kernel_params_check(cudaGraphNode_t k, const int *a, int mult, const char *when)
{
	cudaKernelNodeParams kp = {};

	CHECK(cudaGraphKernelNodeGetParams(k, &kp));
	REQUIRE(kp.func == (void *)g_scale, "%s: kernel node function %p", when, kp.func);
	REQUIRE(kp.gridDim.x == (unsigned)G && kp.gridDim.y == 1 && kp.blockDim.x == (unsigned)B &&
		kp.blockDim.y == 1 && kp.sharedMemBytes == 0, "%s: kernel node geometry", when);
	REQUIRE(kp.kernelParams && kp.extra == NULL, "%s: kernel node arguments missing", when);
	REQUIRE(*(int **)kp.kernelParams[0] == a && *(int *)kp.kernelParams[1] == mult &&
		*(int *)kp.kernelParams[2] == N, "%s: kernel node arguments (%p %d %d)", when,
		*(void **)kp.kernelParams[0], *(int *)kp.kernelParams[1], *(int *)kp.kernelParams[2]);
}

static void memset_params_check(cudaGraphNode_t n, const int *dst, unsigned value, const char *when)
{
	cudaMemsetParams mp = {};

	CHECK(cudaGraphMemsetNodeGetParams(n, &mp));
	REQUIRE(mp.dst == dst && mp.value == value && mp.elementSize == 4 && mp.width == (size_t)N &&
		mp.height == 1, "%s: memset node %p %u %u %zu %zu", when, mp.dst, mp.value, mp.elementSize,
		mp.width, mp.height);
}

static void all_equal(const int *d, int want, const char *when)
{
	for (int e : fetch(d))
		REQUIRE(e == want, "%s: %d, not %d", when, e, want);
}

/* 6. Node parameters read back and changed, nodes disabled. */
static void node_params(void)
{
	cudaStream_t s;
	cudaEvent_t e1, e2, got;
	cudaGraph_t g, ga;
	cudaGraphExec_t x;
	cudaGraphNode_t ms, k, cp, er, ew, an, fn;
	cudaMemsetParams mp = {};
	cudaKernelNodeParams kp = {};
	cudaMemcpy3DParms cpp = {};
	cudaMemAllocNodeParams ap = {};
	cudaGraphNodeParams np = {};
	unsigned enabled;
	int *a, *b, *c, mult = 3, n = N;
	void *args[] = { &a, &mult, &n };
	void *dptr;

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
	CHECK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
	CHECK(cudaMalloc(&a, N * sizeof(int)));
	CHECK(cudaMalloc(&b, N * sizeof(int)));
	CHECK(cudaMalloc(&c, N * sizeof(int)));
	CHECK(cudaMemset(b, 0, N * sizeof(int)));
	CHECK(cudaMemset(c, 0, N * sizeof(int)));
	CHECK(cudaEventRecord(e2, s));
	CHECK(cudaStreamSynchronize(s));

	CHECK(cudaGraphCreate(&g, 0));
	mp = memset_of(a, 5);
	CHECK(cudaGraphAddMemsetNode(&ms, g, NULL, 0, &mp));
	kp.func = (void *)g_scale;
	kp.gridDim = dim3(G);
	kp.blockDim = dim3(B);
	kp.kernelParams = args;
	CHECK(cudaGraphAddKernelNode(&k, g, &ms, 1, &kp));
	CHECK(cudaGraphAddMemcpyNode1D(&cp, g, &k, 1, b, a, N * sizeof(int), cudaMemcpyDeviceToDevice));
	CHECK(cudaGraphAddEventRecordNode(&er, g, &cp, 1, e1));
	CHECK(cudaGraphAddEventWaitNode(&ew, g, NULL, 0, e2));

	/* Read back: what was given, in the program's own terms. */
	memset_params_check(ms, a, 5, "graph");
	kernel_params_check(k, a, 3, "graph");
	mult = 99;      /* the node holds its own copy */
	kernel_params_check(k, a, 3, "graph, again");
	CHECK(cudaGraphMemcpyNodeGetParams(cp, &cpp));
	REQUIRE(cpp.srcPtr.ptr == a && cpp.dstPtr.ptr == b && cpp.extent.width == N * sizeof(int) &&
		cpp.extent.height == 1 && cpp.extent.depth == 1, "memcpy node %p %p %zu", cpp.srcPtr.ptr,
		cpp.dstPtr.ptr, cpp.extent.width);
	CHECK(cudaGraphEventRecordNodeGetEvent(er, &got));
	REQUIRE(got == e1, "event record node's event");
	CHECK(cudaGraphEventWaitNodeGetEvent(ew, &got));
	REQUIRE(got == e2, "event wait node's event");
	REQUIRE(cudaGraphMemsetNodeGetParams(k, &mp) == cudaErrorInvalidValue,
		"a kernel node read as a memset node");
	cudaGetLastError();
	REQUIRE(cudaGraphEventWaitNodeGetEvent(er, &got) == cudaErrorInvalidValue,
		"a record node read as a wait node");
	cudaGetLastError();

	/* Allocation and free nodes. */
	CHECK(cudaGraphCreate(&ga, 0));
	ap.poolProps.allocType = cudaMemAllocationTypePinned;
	ap.poolProps.location.type = cudaMemLocationTypeDevice;
	ap.poolProps.location.id = 0;
	ap.bytesize = 1 << 20;
	CHECK(cudaGraphAddMemAllocNode(&an, ga, NULL, 0, &ap));
	dptr = ap.dptr;
	CHECK(cudaGraphAddMemFreeNode(&fn, ga, &an, 1, dptr));
	ap = {};
	CHECK(cudaGraphMemAllocNodeGetParams(an, &ap));
	REQUIRE(ap.dptr == dptr && ap.bytesize == 1 << 20 && ap.poolProps.location.type == cudaMemLocationTypeDevice &&
		ap.poolProps.location.id == 0, "allocation node %p %zu", ap.dptr, ap.bytesize);
	dptr = NULL;
	CHECK(cudaGraphMemFreeNodeGetParams(fn, &dptr));
	REQUIRE(dptr == ap.dptr, "free node %p", dptr);
	CHECK(cudaGraphDestroy(ga));

	/* Changed in the graph: memset 7, the copy into c, the other event. */
	mp = memset_of(a, 7);
	CHECK(cudaGraphMemsetNodeSetParams(ms, &mp));
	CHECK(cudaGraphMemcpyNodeSetParams1D(cp, c, a, N * sizeof(int), cudaMemcpyDeviceToDevice));
	CHECK(cudaGraphEventRecordNodeSetEvent(er, e2));
	CHECK(cudaGraphEventWaitNodeSetEvent(ew, e1));
	memset_params_check(ms, a, 7, "graph, changed");
	CHECK(cudaGraphMemcpyNodeGetParams(cp, &cpp));
	REQUIRE(cpp.dstPtr.ptr == c, "memcpy node changed: %p", cpp.dstPtr.ptr);
	CHECK(cudaGraphEventRecordNodeGetEvent(er, &got));
	REQUIRE(got == e2, "event record node changed");
	CHECK(cudaGraphEventWaitNodeSetEvent(ew, e2));
	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	all_equal(c, 21, "after the graph's nodes changed");
	all_equal(b, 0, "the old copy target");

	/* Changed in the executable only. */
	mp.value = 2;
	CHECK(cudaGraphExecMemsetNodeSetParams(x, ms, &mp));
	CHECK(cudaGraphExecMemcpyNodeSetParams1D(x, cp, b, a, N * sizeof(int), cudaMemcpyDeviceToDevice));
	CHECK(cudaGraphExecEventRecordNodeSetEvent(x, er, e1));
	CHECK(cudaGraphExecEventWaitNodeSetEvent(x, ew, e2));
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	all_equal(b, 6, "after the executable's nodes changed");
	REQUIRE(cudaEventQuery(e1) == cudaSuccess, "the executable's record node did not record e1");
	memset_params_check(ms, a, 7, "graph, after the executable changed");

	/* A node disabled, then enabled again. */
	CHECK(cudaGraphNodeGetEnabled(x, k, &enabled));
	REQUIRE(enabled == 1, "kernel node enabled: %u", enabled);
	CHECK(cudaGraphNodeSetEnabled(x, k, 0));
	CHECK(cudaGraphNodeGetEnabled(x, k, &enabled));
	REQUIRE(enabled == 0, "kernel node disabled: %u", enabled);
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	all_equal(b, 2, "with the kernel node disabled");
	CHECK(cudaGraphNodeSetEnabled(x, k, 1));
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	all_equal(b, 6, "with the kernel node enabled again");

	/* The generic forms. */
	np.type = cudaGraphNodeTypeMemset;
	np.memset.dst = a;
	np.memset.elementSize = 4;
	np.memset.width = N;
	np.memset.height = 1;
	np.memset.value = 4;
	CHECK(cudaGraphExecNodeSetParams(x, ms, &np));
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	all_equal(b, 12, "after cudaGraphExecNodeSetParams");
	np.memset.value = 1;
	CHECK(cudaGraphNodeSetParams(ms, &np));
	memset_params_check(ms, a, 1, "graph, after cudaGraphNodeSetParams");
	np = {};
	np.type = cudaGraphNodeTypeEventRecord;
	np.eventRecord.event = e2;
	CHECK(cudaGraphNodeSetParams(er, &np));
	CHECK(cudaGraphEventRecordNodeGetEvent(er, &got));
	REQUIRE(got == e2, "event record node after cudaGraphNodeSetParams");

	/* Kernel node attributes: set, read back, copied to another node. */
	{
		cudaKernelNodeAttrValue av = {}, got_av = {};
		cudaGraphNode_t k2;

		kp.kernelParams = args;
		CHECK(cudaGraphAddKernelNode(&k2, g, NULL, 0, &kp));
		CHECK(cudaGraphKernelNodeGetAttribute(k2, cudaLaunchAttributePriority, &got_av));
		av.priority = -1;    /* in the range of every device: 0 .. -5 on the H200 */
		CHECK(cudaGraphKernelNodeSetAttribute(k, cudaLaunchAttributePriority, &av));
		av = {};
		av.accessPolicyWindow.base_ptr = a;
		av.accessPolicyWindow.num_bytes = 4096;
		av.accessPolicyWindow.hitRatio = 0.5f;
		av.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
		av.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
		CHECK(cudaGraphKernelNodeSetAttribute(k, cudaLaunchAttributeAccessPolicyWindow, &av));
		CHECK(cudaGraphKernelNodeGetAttribute(k, cudaLaunchAttributeAccessPolicyWindow, &got_av));
		REQUIRE(got_av.accessPolicyWindow.base_ptr == a && got_av.accessPolicyWindow.num_bytes == 4096 &&
			got_av.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting,
			"access policy window read back");
		CHECK(cudaGraphKernelNodeCopyAttributes(k2, k));
		got_av = {};
		CHECK(cudaGraphKernelNodeGetAttribute(k2, cudaLaunchAttributeAccessPolicyWindow, &got_av));
		REQUIRE(got_av.accessPolicyWindow.base_ptr == a && got_av.accessPolicyWindow.num_bytes == 4096,
			"access policy window copied");
		CHECK(cudaGraphKernelNodeGetAttribute(k, cudaLaunchAttributePriority, &got_av));
		av.priority = got_av.priority;
		CHECK(cudaGraphKernelNodeGetAttribute(k2, cudaLaunchAttributePriority, &got_av));
		REQUIRE(got_av.priority == av.priority, "priority copied: %d, not %d", got_av.priority, av.priority);
		REQUIRE(cudaGraphKernelNodeGetAttribute(ms, cudaLaunchAttributePriority, &got_av) != cudaSuccess,
			"a memset node's kernel attribute");
		cudaGetLastError();
		CHECK(cudaGraphDestroyNode(k2));
	}

	/* An executable's child graph node changed: same shape, then another. */
	{
		cudaGraph_t gc, gc2, gc3, gp;
		cudaGraphExec_t xp;
		cudaGraphNode_t cn, m1, m2;

		CHECK(cudaGraphCreate(&gc, 0));
		CHECK(cudaGraphCreate(&gc2, 0));
		CHECK(cudaGraphCreate(&gc3, 0));
		CHECK(cudaGraphCreate(&gp, 0));
		mp = memset_of(c, 1);
		CHECK(cudaGraphAddMemsetNode(&m1, gc, NULL, 0, &mp));
		mp.value = 9;
		CHECK(cudaGraphAddMemsetNode(&m1, gc2, NULL, 0, &mp));
		CHECK(cudaGraphAddMemsetNode(&m1, gc3, NULL, 0, &mp));
		CHECK(cudaGraphAddMemsetNode(&m2, gc3, &m1, 1, &mp));
		CHECK(cudaGraphAddChildGraphNode(&cn, gp, NULL, 0, gc));
		CHECK(cudaGraphInstantiate(&xp, gp, 0));
		CHECK(cudaGraphLaunch(xp, s));
		CHECK(cudaStreamSynchronize(s));
		all_equal(c, 1, "child graph");
		CHECK(cudaGraphExecChildGraphNodeSetParams(xp, cn, gc2));
		CHECK(cudaGraphLaunch(xp, s));
		CHECK(cudaStreamSynchronize(s));
		all_equal(c, 9, "child graph changed in the executable");
		REQUIRE(cudaGraphExecChildGraphNodeSetParams(xp, cn, gc3) != cudaSuccess,
			"a child graph of another shape taken");
		cudaGetLastError();
		CHECK(cudaGraphExecDestroy(xp));
		CHECK(cudaGraphDestroy(gp));
		CHECK(cudaGraphDestroy(gc));
		CHECK(cudaGraphDestroy(gc2));
		CHECK(cudaGraphDestroy(gc3));
	}

	/* A capture that adds to a graph of the program's, after its memset. */
	{
		cudaGraph_t gt, ended = NULL;
		cudaGraphExec_t xt;
		cudaGraphNode_t m0, nodes[4], dep;
		size_t count = 4, ndep = 1;
		int two = 2;

		CHECK(cudaGraphCreate(&gt, 0));
		mp = memset_of(c, 3);
		CHECK(cudaGraphAddMemsetNode(&m0, gt, NULL, 0, &mp));
		CHECK(cudaStreamBeginCaptureToGraph(s, gt, &m0, NULL, 1, cudaStreamCaptureModeGlobal));
		g_scale<<<G, B, 0, s>>>(c, two, N);
		CHECK(cudaGetLastError());
		CHECK(cudaStreamEndCapture(s, &ended));
		REQUIRE(ended == gt, "the capture ended in another graph");
		CHECK(cudaGraphGetNodes(gt, nodes, &count));
		REQUIRE(count == 2, "the graph has %zu nodes after the capture", count);
		for (size_t i = 0; i < count; i++)
			if (nodes[i] != m0) {
				CHECK(cudaGraphNodeGetDependencies(nodes[i], &dep, NULL, &ndep));
				REQUIRE(ndep == 1 && dep == m0, "the captured kernel does not follow the memset");
			}
		CHECK(cudaGraphInstantiate(&xt, gt, 0));
		CHECK(cudaGraphLaunch(xt, s));
		CHECK(cudaStreamSynchronize(s));
		all_equal(c, 6, "graph captured into");
		CHECK(cudaGraphExecDestroy(xt));
		CHECK(cudaGraphDestroy(gt));
	}

	/* The graph as dot text, written at this process's path. */
	{
		char path[] = "/tmp/graphs-dot-XXXXXX", text[4096];
		int fd = mkstemp(path);
		FILE *f;
		size_t len;

		REQUIRE(fd >= 0, "no temporary file");
		close(fd);
		CHECK(cudaGraphDebugDotPrint(g, path, cudaGraphDebugDotFlagsVerbose));
		f = fopen(path, "r");
		REQUIRE(f, "cudaGraphDebugDotPrint wrote no file");
		len = fread(text, 1, sizeof(text) - 1, f);
		text[len] = 0;
		fclose(f);
		unlink(path);
		REQUIRE(strstr(text, "digraph"), "cudaGraphDebugDotPrint: not dot text: %.80s", text);
		REQUIRE(cudaGraphDebugDotPrint(g, "/nonexistent-dir/x.dot", 0) != cudaSuccess,
			"a dot file written where no directory is");
		cudaGetLastError();
	}

	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaFree(a));
	CHECK(cudaFree(b));
	CHECK(cudaFree(c));
	CHECK(cudaEventDestroy(e1));
	CHECK(cudaEventDestroy(e2));
	CHECK(cudaStreamDestroy(s));
}

int main(void)
{
	CHECK(cudaSetDevice(0));
	captured_graph();
	capture_details();
	built_graph();
	exec_changes();
	host_node();
	node_params();
	test_pass("graphs");
	return 0;
}
