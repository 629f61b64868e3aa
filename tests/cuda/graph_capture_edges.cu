/* graph_capture_edges: stream captures whose dependencies carry edge data
 * (CUgraphEdgeData: Hopper's programmatic dependent launch), with the
 * driver API:
 *
 *  1. cuStreamBeginCaptureToGraph into a graph holding kernel node a, after
 *     a over a programmatic edge (type PROGRAMMATIC, port PROGRAMMATIC);
 *     cuStreamGetCaptureInfo (12.3 form) reads the dependency back with its
 *     data; without room for the data (dependencies only, and the 11.3
 *     form) it answers CUDA_ERROR_LOSSY_QUERY; edge data without the
 *     dependencies is CUDA_ERROR_INVALID_VALUE, also where nothing
 *     captures; a kernel launched into the capture (b) takes the edge;
 *  2. cuStreamUpdateCaptureDependencies_v2: b over its LAUNCH_ORDER port,
 *     read back, then an empty node e added with a default edge (ADD); a
 *     launch c takes both; the capture ends into the guest's graph;
 *  3. the graph's edges read back with their data (cuGraphGetEdges_v2),
 *     instantiated, launched and every node's result checked;
 *  4. refused data: a reserved byte set (begin and update), a port into
 *     the next node, a programmatic edge out of a node that is not a kernel
 *     (CUDA_ERROR_INVALID_VALUE, no capture begun, dependencies unchanged);
 *     a programmatic edge into a memset is taken (the driver, 580.159):
 *     the capture ends with the memset after b over that edge. Where cuda.h says
 *     nothing of when the driver checks these, the expected answers are
 *     what native runs on an H100 and an H200 gave (docs/limits.md).
 *
 * Natively on compute capability 9.0 and above; through tern on every
 * device (the sim runs nodes in order, which satisfies any programmatic
 * edge). The kernel is mod_knodes.cu's kn_affine (sim: sim_kernels.c). */
#include "check.h"
#include "mod_knodes_fatbin.h"

#include <stdlib.h>
#include <string.h>
#include <vector>

static const int N = 1000;
static const unsigned B = 128;
static const unsigned G = (N + B - 1) / B;

static bool through_tern(void)
{
	return getenv("TERN_SERVER") != NULL;
}

static bool edge_is(const CUgraphEdgeData &e, unsigned type, unsigned from_port)
{
	CUgraphEdgeData want;

	memset(&want, 0, sizeof(want));
	want.type = (unsigned char)type;
	want.from_port = (unsigned char)from_port;
	return !memcmp(&e, &want, sizeof(want));
}

/* Every element of @d is @want. */
static void expect_all(const int *d, int want, const char *what)
{
	std::vector<int> h(N);

	CHECK(cudaMemcpy(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		REQUIRE(h[i] == want, "%s: a[%d] = %d, expected %d", what, i, h[i], want);
}

int main(int argc, char **argv)
{
	DRV_FN(cuLibraryLoadData);
	DRV_FN(cuLibraryGetKernel);
	DRV_FN(cuLibraryUnload);
	DRV_FN(cuKernelGetFunction);
	DRV_FN(cuGraphCreate);
	DRV_FN(cuGraphDestroy);
	DRV_FN(cuGraphAddKernelNode);
	DRV_FN(cuGraphAddEmptyNode);
	DRV_FN(cuGraphGetNodes);
	DRV_FN(cuGraphInstantiateWithFlags);
	DRV_FN(cuGraphExecDestroy);
	DRV_FN(cuGraphLaunch);
	DRV_FN(cuStreamCreate);
	DRV_FN(cuStreamDestroy);
	DRV_FN(cuStreamSynchronize);
	DRV_FN(cuStreamBeginCaptureToGraph);
	DRV_FN(cuStreamEndCapture);
	DRV_FN(cuStreamIsCapturing);
	DRV_FN(cuLaunchKernel);
	DRV_FN(cuMemsetD32Async);
	DRV_FN(cuGraphNodeGetType);
	/* The 12.3 forms by version (cuda.h's names are the current ones). */
	decltype(&cuStreamGetCaptureInfo_v3) p_info_v3 =
		(decltype(&cuStreamGetCaptureInfo_v3))drv_sym_version("cuStreamGetCaptureInfo", 12030);
	typedef CUresult (*info_v2_fn)(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,
				       const CUgraphNode **, size_t *);
	info_v2_fn p_info_v2 = (info_v2_fn)drv_sym_version("cuStreamGetCaptureInfo", 11030);
	decltype(&cuStreamUpdateCaptureDependencies_v2) p_update_v2 =
		(decltype(&cuStreamUpdateCaptureDependencies_v2))drv_sym_version("cuStreamUpdateCaptureDependencies",
										  12030);
	decltype(&cuGraphGetEdges_v2) p_cuGraphGetEdges_v2 =
		(decltype(&cuGraphGetEdges_v2))drv_sym_version("cuGraphGetEdges", 12030);
	CUgraphEdgeData prog, order, bad;
	CUlibrary lib;
	CUkernel k;
	CUfunction f;
	CUstream s;
	int dev = 0, major = 0;

	test_args(argc, argv);
	CHECK(cudaFree(0));
	CHECK(cudaGetDevice(&dev));
	CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
	if (major < 9 && !through_tern()) {
		printf("SKIP graph_capture_edges: programmatic edges need compute capability 9.0 (have %d)\n", major);
		return 0;
	}
	CHECK_DRV(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK_DRV(p_cuLibraryLoadData(&lib, mod_knodes_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	CHECK_DRV(p_cuLibraryGetKernel(&k, lib, "kn_affine"));
	CHECK_DRV(p_cuKernelGetFunction(&f, k));
	memset(&prog, 0, sizeof(prog));
	prog.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
	prog.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
	order = prog;
	order.from_port = CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER;

	/* Nothing captures yet: edge data without the dependencies is not
	 * refused (the H100's driver, 580.159; while capturing it is), and the
	 * status answers NONE. */
	{
		CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		const CUgraphEdgeData *edges = NULL;

		CHECK_DRV(p_info_v3(s, &st, NULL, NULL, NULL, &edges, NULL));
		REQUIRE(st == CU_STREAM_CAPTURE_STATUS_NONE, "status %d before any capture", (int)st);
		st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		CHECK_DRV(p_info_v3(s, &st, NULL, NULL, NULL, NULL, NULL));
		REQUIRE(st == CU_STREAM_CAPTURE_STATUS_NONE, "status %d before any capture", (int)st);
	}

	/* Each node steps its own array (a[i] = a[i] * 1 + add), so the result
	 * does not depend on how early a programmatic dependent starts. */
	int *arr[3];
	int mul = 1, n = N, adds[3] = { 2, 3, 4 };
	void *args[3][4];
	for (int i = 0; i < 3; i++) {
		CHECK(cudaMalloc(&arr[i], N * sizeof(int)));
		CHECK(cudaMemset(arr[i], 0, N * sizeof(int)));
		args[i][0] = &arr[i];
		args[i][1] = &mul;
		args[i][2] = &adds[i];
		args[i][3] = &n;
	}
	auto launch = [&](int i) {
		CHECK_DRV(p_cuLaunchKernel(f, G, 1, 1, B, 1, 1, 0, s, args[i], NULL));
	};
	CUgraph g;
	CUgraphNode a, e;
	CHECK_DRV(p_cuGraphCreate(&g, 0));
	{
		CUDA_KERNEL_NODE_PARAMS p;

		memset(&p, 0, sizeof(p));
		p.func = f;
		p.gridDimX = G;
		p.gridDimY = p.gridDimZ = 1;
		p.blockDimX = B;
		p.blockDimY = p.blockDimZ = 1;
		p.kernelParams = args[0];
		CHECK_DRV(p_cuGraphAddKernelNode(&a, g, NULL, 0, &p));
	}
	CHECK_DRV(p_cuGraphAddEmptyNode(&e, g, NULL, 0));

	/* 4, at the beginning: refused data begins no capture. */
	bad = prog;
	bad.reserved[1] = 1;
	EXPECT_DRV(p_cuStreamBeginCaptureToGraph(s, g, &a, &bad, 1, CU_STREAM_CAPTURE_MODE_GLOBAL),
		   CUDA_ERROR_INVALID_VALUE);
	bad = prog;
	bad.to_port = 1;
	EXPECT_DRV(p_cuStreamBeginCaptureToGraph(s, g, &a, &bad, 1, CU_STREAM_CAPTURE_MODE_GLOBAL),
		   CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(p_cuStreamBeginCaptureToGraph(s, g, &e, &prog, 1, CU_STREAM_CAPTURE_MODE_GLOBAL),
		   CUDA_ERROR_INVALID_VALUE);
	{
		CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;

		CHECK_DRV(p_cuStreamIsCapturing(s, &st));
		REQUIRE(st == CU_STREAM_CAPTURE_STATUS_NONE, "a refused beginning left status %d", (int)st);
	}

	/* 1: after a over its programmatic port. */
	CHECK_DRV(p_cuStreamBeginCaptureToGraph(s, g, &a, &prog, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
	{
		CUstreamCaptureStatus st;
		const CUgraphNode *deps = NULL;
		const CUgraphEdgeData *edges = NULL;
		CUgraph into = NULL;
		size_t count = 0;

		CHECK_DRV(p_info_v3(s, &st, NULL, &into, &deps, &edges, &count));
		REQUIRE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "status %d while capturing", (int)st);
		REQUIRE(into == g, "the capture adds to another graph");
		REQUIRE(count == 1 && deps && deps[0] == a, "%zu dependencies, expected a", count);
		REQUIRE(edges && edge_is(edges[0], CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC,
					 CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC),
			"a's edge: type %u from port %u to port %u", edges ? edges[0].type : 0,
			edges ? edges[0].from_port : 0, edges ? edges[0].to_port : 0);
		/* No room for the data. */
		EXPECT_DRV(p_info_v3(s, &st, NULL, NULL, &deps, NULL, &count), CUDA_ERROR_LOSSY_QUERY);
		EXPECT_DRV(p_info_v2(s, &st, NULL, NULL, &deps, &count), CUDA_ERROR_LOSSY_QUERY);
		EXPECT_DRV(p_info_v3(s, &st, NULL, NULL, NULL, &edges, &count), CUDA_ERROR_INVALID_VALUE);
		/* The count alone has no data to lose. */
		count = 0;
		CHECK_DRV(p_info_v3(s, &st, NULL, NULL, NULL, NULL, &count));
		REQUIRE(count == 1, "%zu dependencies counted, expected 1", count);
	}
	launch(1);                      /* b */

	/* 2: b over its launch order port, then e added with a default edge. */
	CUgraphNode b;
	{
		CUstreamCaptureStatus st;
		const CUgraphNode *deps = NULL;
		const CUgraphEdgeData *edges = NULL;
		size_t count = 0;

		CHECK_DRV(p_info_v3(s, &st, NULL, NULL, &deps, &edges, &count));
		REQUIRE(count == 1 && deps[0] != a && deps[0] != e, "the launch is not the dependency");
		REQUIRE(edges && edge_is(edges[0], 0, 0), "the launch's edge is not default");
		/* The 11.3 form answers when every edge is default. */
		CHECK_DRV(p_info_v2(s, &st, NULL, NULL, &deps, &count));
		b = deps[0];
		bad = order;
		bad.reserved[4] = 1;
		EXPECT_DRV(p_update_v2(s, &b, &bad, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES), CUDA_ERROR_INVALID_VALUE);
		EXPECT_DRV(p_update_v2(s, &e, &order, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
			   CUDA_ERROR_INVALID_VALUE);
		CHECK_DRV(p_info_v3(s, &st, NULL, NULL, &deps, &edges, &count));
		REQUIRE(count == 1 && deps[0] == b && edge_is(edges[0], 0, 0), "a refused update changed the set");
		CHECK_DRV(p_update_v2(s, &b, &order, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
		CHECK_DRV(p_info_v3(s, &st, NULL, NULL, &deps, &edges, &count));
		REQUIRE(count == 1 && deps[0] == b, "%zu dependencies after the update, expected b", count);
		REQUIRE(edge_is(edges[0], CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC, CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER),
			"b's edge: type %u from port %u", edges[0].type, edges[0].from_port);
		CHECK_DRV(p_update_v2(s, &e, NULL, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES));
		CHECK_DRV(p_info_v3(s, &st, NULL, NULL, &deps, &edges, &count));
		REQUIRE(count == 2, "%zu dependencies after adding e, expected 2", count);
		for (size_t i = 0; i < count; i++)
			REQUIRE(deps[i] == b ? edge_is(edges[i], CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC,
						       CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER)
					     : deps[i] == e && edge_is(edges[i], 0, 0),
				"dependency %zu after adding e", i);
	}
	launch(2);                      /* c */
	{
		CUgraph out = NULL;

		CHECK_DRV(p_cuStreamEndCapture(s, &out));
		REQUIRE(out == g, "the capture ended in another graph");
	}

	/* 3: the edges with their data; the graph runs. */
	{
		CUgraphNode from[8], to[8];
		CUgraphEdgeData data[8];
		size_t count = 8;
		int prog_edges = 0, order_edges = 0, plain = 0;

		CHECK_DRV(p_cuGraphGetEdges_v2(g, from, to, data, &count));
		REQUIRE(count == 3, "%zu edges, expected 3", count);
		for (size_t i = 0; i < count; i++) {
			if (from[i] == a && to[i] == b)
				prog_edges += edge_is(data[i], CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC,
						      CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC);
			else if (from[i] == b)
				order_edges += edge_is(data[i], CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC,
						       CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER);
			else if (from[i] == e)
				plain += edge_is(data[i], 0, 0);
		}
		REQUIRE(prog_edges == 1 && order_edges == 1 && plain == 1,
			"edges: %d programmatic a -> b, %d launch order b -> c, %d default e -> c", prog_edges,
			order_edges, plain);
		CUgraphExec x;

		CHECK_DRV(p_cuGraphInstantiateWithFlags(&x, g, 0));
		CHECK_DRV(p_cuGraphLaunch(x, s));
		CHECK_DRV(p_cuStreamSynchronize(s));
		for (int i = 0; i < 3; i++)
			expect_all(arr[i], adds[i], "a node of the captured graph");
		CHECK_DRV(p_cuGraphExecDestroy(x));
	}

	/* 4: a programmatic edge into a memset. The driver (580.159, H100 and
	 * H200) takes the memset and ends the capture: the memset follows b
	 * over the edge as given (the H100 printed type 1, from port 1). */
	{
		CUgraph out = NULL;
		CUgraphNode from[8], to[8], nodes[8], memset_node = NULL;
		CUgraphEdgeData data[8];
		size_t before = 0, after = 8, count = 8;
		int into_memset = 0;

		CHECK_DRV(p_cuGraphGetNodes(g, NULL, &before));
		CHECK_DRV(p_cuStreamBeginCaptureToGraph(s, g, &b, &prog, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
		CHECK_DRV(p_cuMemsetD32Async((CUdeviceptr)arr[0], 7, N, s));
		CHECK_DRV(p_cuStreamEndCapture(s, &out));
		REQUIRE(out == g, "the capture ended in another graph");
		CHECK_DRV(p_cuGraphGetNodes(g, nodes, &after));
		REQUIRE(after == before + 1, "%zu nodes after the memset, expected %zu", after, before + 1);
		for (size_t i = 0; i < after; i++) {
			CUgraphNodeType type;

			CHECK_DRV(p_cuGraphNodeGetType(nodes[i], &type));
			if (type == CU_GRAPH_NODE_TYPE_MEMSET)
				memset_node = nodes[i];
		}
		REQUIRE(memset_node, "no memset node in the graph");
		CHECK_DRV(p_cuGraphGetEdges_v2(g, from, to, data, &count));
		REQUIRE(count == 4, "%zu edges, expected 4", count);
		for (size_t i = 0; i < count; i++)
			if (to[i] == memset_node) {
				REQUIRE(from[i] == b, "the memset follows another node than b");
				into_memset++;
				printf("edge b -> memset: type %u, from port %u, to port %u\n", data[i].type,
				       data[i].from_port, data[i].to_port);
				REQUIRE(edge_is(data[i], CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC,
						CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC),
					"the edge into the memset is not the programmatic one given");
			}
		REQUIRE(into_memset == 1, "%d edges from b to the memset, expected 1", into_memset);
	}

	CHECK_DRV(p_cuGraphDestroy(g));
	for (int i = 0; i < 3; i++)
		CHECK(cudaFree(arr[i]));
	CHECK_DRV(p_cuStreamDestroy(s));
	CHECK_DRV(p_cuLibraryUnload(lib));
	test_pass("graph_capture_edges");
	return 0;
}
