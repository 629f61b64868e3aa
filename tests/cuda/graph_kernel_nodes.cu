/* graph_kernel_nodes: graphs built node by node with the driver API, the way
 * XLA's command buffers build them (xla/stream_executor/cuda/
 * cuda_command_buffer.cc), each way a kernel node can be named:
 *
 *  1. cuGraphAddKernelNode (CUDA_KERNEL_NODE_PARAMS_v2) with `func` from a
 *     cubin loaded by cuModuleLoadFatBinary (XLA's LoadKernel), arguments
 *     through `kernelParams`, a chain of dependencies; `ctx` set beside
 *     `func` (the driver ignores it); `kern` from cuLibraryGetKernel with
 *     `func` NULL, with and without `ctx`; `func` from cuKernelGetFunction;
 *     `func` from cudaGetFuncBySymbol (XLA's in-process kernels); arguments
 *     as `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE); a node without
 *     parameters (XLA's no-op barrier); `func` and `kern` both set (`func`
 *     wins);
 *  2. cuGraphAddNode (CUgraphNodeParams of type KERNEL) in its 12.2 and 12.3
 *     forms, the latter with no edge data and with default edge data;
 *  3. kernel node priority (cuGraphKernelNodeSetAttribute
 *     CU_LAUNCH_ATTRIBUTE_PRIORITY, read back) and an executable made with
 *     CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY, as XLA instantiates;
 *  4. updates: cuGraphExecKernelNodeSetParams (XLA's UpdateKernelNode) with
 *     new arguments, cuGraphKernelNodeSetParams before instantiation, and
 *     cuGraphExecNodeSetParams of a kernel node;
 *  5. a while loop as XLA builds one: a conditional handle and node (context
 *     given), kernel nodes in its body that step the loop's condition;
 *  6. a capture into the graph (cuStreamBeginCaptureToGraph in thread-local
 *     mode, XLA's Trace) of a cuLaunchKernel;
 *  7. programmatic dependency edges (Hopper's programmatic dependent launch:
 *     CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC from port PROGRAMMATIC and from
 *     port LAUNCH_ORDER) between kernel nodes, through cuGraphAddNode_v2 and
 *     cuGraphAddDependencies_v2; read back with their data (_v2 getters) and
 *     refused without room for it (CUDA_ERROR_LOSSY_QUERY); removed with
 *     their data only; the driver's refusals of bad data (reserved bytes,
 *     ports, types, a programmatic edge out of an empty node), a node added
 *     with refused data not added. Natively on compute capability 9.0 and
 *     above; through tern on every device (the sim runs nodes in order,
 *     which satisfies any programmatic edge).
 *
 * Every executable is launched and its results checked. The kernels are in
 * mod_knodes.cu (embedded as a cubin and as a fatbin) and, for
 * cudaGetFuncBySymbol, compiled into this program too; CPU versions for the
 * sim: sim_kernels.c. */
#include "check.h"
#include "mod_knodes_cubin.h"
#include "mod_knodes_fatbin.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "mod_knodes.cu"

static const int N = 1000;
static const unsigned B = 128;
static const unsigned G = (N + B - 1) / B;

struct affine_args {
	int *a;
	int mul, add, n;
};

static bool through_tern(void)
{
	return getenv("TERN_SERVER") != NULL;
}

/* A kernel node's parameters for kn_affine over N elements. */
static CUDA_KERNEL_NODE_PARAMS affine_node(CUfunction f, CUkernel k, void **params, void **extra)
{
	CUDA_KERNEL_NODE_PARAMS p;

	memset(&p, 0, sizeof(p));
	p.func = f;
	p.kern = k;
	p.gridDimX = G;
	p.gridDimY = 1;
	p.gridDimZ = 1;
	p.blockDimX = B;
	p.blockDimY = 1;
	p.blockDimZ = 1;
	p.kernelParams = params;
	p.extra = extra;
	return p;
}

/* Whether a holds, everywhere, what @start becomes through the affine steps
 * (mul, add) of @steps in order. */
static void expect(const int *d, int start, const std::vector<std::pair<int, int>> &steps, const char *what)
{
	std::vector<int> h(N);
	int want = start;

	for (const auto &s : steps)
		want = want * s.first + s.second;
	CHECK(cudaMemcpy(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		REQUIRE(h[i] == want, "%s: a[%d] = %d, expected %d", what, i, h[i], want);
}

int main(int argc, char **argv)
{
	DRV_FN(cuCtxGetCurrent);
	DRV_FN(cuModuleLoadFatBinary);
	DRV_FN(cuModuleGetFunction);
	DRV_FN(cuModuleUnload);
	DRV_FN(cuLibraryLoadData);
	DRV_FN(cuLibraryGetKernel);
	DRV_FN(cuLibraryUnload);
	DRV_FN(cuKernelGetFunction);
	DRV_FN(cuGraphCreate);
	DRV_FN(cuGraphDestroy);
	DRV_FN(cuGraphAddKernelNode);
	DRV_FN(cuGraphAddEmptyNode);
	DRV_FN(cuGraphKernelNodeSetParams);
	DRV_FN(cuGraphKernelNodeSetAttribute);
	DRV_FN(cuGraphKernelNodeGetAttribute);
	DRV_FN(cuGraphInstantiateWithFlags);
	DRV_FN(cuGraphExecKernelNodeSetParams);
	DRV_FN(cuGraphExecNodeSetParams);
	DRV_FN(cuGraphExecDestroy);
	DRV_FN(cuGraphLaunch);
	DRV_FN(cuGraphGetNodes);
	DRV_FN(cuGraphGetRootNodes);
	DRV_FN(cuGraphConditionalHandleCreate);
	DRV_FN(cuStreamCreate);
	DRV_FN(cuStreamDestroy);
	DRV_FN(cuStreamSynchronize);
	DRV_FN(cuStreamBeginCaptureToGraph);
	DRV_FN(cuStreamEndCapture);
	DRV_FN(cuLaunchKernel);
	/* cuda.h names only the current form; the 12.2 one is asked by version. */
	typedef CUresult (*add_node_v1_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
					   CUgraphNodeParams *);
	add_node_v1_fn p_cuGraphAddNode_v1 = (add_node_v1_fn)drv_sym_version("cuGraphAddNode", 12020);
	decltype(&cuGraphAddNode_v2) p_cuGraphAddNode_v2 =
		(decltype(&cuGraphAddNode_v2))drv_sym_version("cuGraphAddNode", 12030);
	decltype(&cuGraphAddDependencies_v2) p_cuGraphAddDependencies_v2 =
		(decltype(&cuGraphAddDependencies_v2))drv_sym_version("cuGraphAddDependencies", 12030);
	decltype(&cuGraphRemoveDependencies_v2) p_cuGraphRemoveDependencies_v2 =
		(decltype(&cuGraphRemoveDependencies_v2))drv_sym_version("cuGraphRemoveDependencies", 12030);
	decltype(&cuGraphGetEdges_v2) p_cuGraphGetEdges_v2 =
		(decltype(&cuGraphGetEdges_v2))drv_sym_version("cuGraphGetEdges", 12030);
	decltype(&cuGraphNodeGetDependencies_v2) p_cuGraphNodeGetDependencies_v2 =
		(decltype(&cuGraphNodeGetDependencies_v2))drv_sym_version("cuGraphNodeGetDependencies", 12030);
	typedef CUresult (*get_edges_v1_fn)(CUgraph, CUgraphNode *, CUgraphNode *, size_t *);
	get_edges_v1_fn p_cuGraphGetEdges_v1 = (get_edges_v1_fn)drv_sym_version("cuGraphGetEdges", 10000);
	CUcontext ctx;
	CUmodule mod;
	CUlibrary lib;
	CUfunction f_mod, f_kern, f_noop, f_sym;
	CUkernel k_lib;
	CUstream s;
	int *d, *left;
	int mul = 2, add = 1, n = N, dev = 0, major = 0;
	void *params[] = { &d, &mul, &add, &n };

	test_args(argc, argv);
	CHECK(cudaFree(0));
	CHECK_DRV(p_cuCtxGetCurrent(&ctx));
	CHECK_DRV(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cudaMalloc(&d, N * sizeof(int)));
	CHECK(cudaMalloc(&left, sizeof(int)));
	/* a filled with @start, @x launched, a checked. */
	auto run = [&](CUgraphExec x, int start, const std::vector<std::pair<int, int>> &steps, const char *what) {
		std::vector<int> init(N, start);

		CHECK(cudaMemcpy(d, init.data(), N * sizeof(int), cudaMemcpyHostToDevice));
		CHECK_DRV(p_cuGraphLaunch(x, s));
		CHECK_DRV(p_cuStreamSynchronize(s));
		expect(d, start, steps, what);
	};

	/* The ways to name the kernel. */
	CHECK_DRV(p_cuModuleLoadFatBinary(&mod, mod_knodes_cubin));
	CHECK_DRV(p_cuModuleGetFunction(&f_mod, mod, "kn_affine"));
	CHECK_DRV(p_cuModuleGetFunction(&f_noop, mod, "kn_noop"));
	CHECK_DRV(p_cuLibraryLoadData(&lib, mod_knodes_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	CHECK_DRV(p_cuLibraryGetKernel(&k_lib, lib, "kn_affine"));
	CHECK_DRV(p_cuKernelGetFunction(&f_kern, k_lib));
	CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&f_sym, (const void *)kn_affine));

	/* 1, 3, 4: a chain of kernel nodes, one per way, launched; then updated. */
	{
		struct affine_args packed = { NULL, 3, 0, N };
		/* The parameters' extent, without the struct's tail padding. */
		size_t packed_size = offsetof(struct affine_args, n) + sizeof(int);
		void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
				  CU_LAUNCH_PARAM_END };
		std::vector<std::pair<int, int>> steps;
		std::vector<CUgraphNode> nodes;
		CUlaunchAttributeValue prio, back;
		CUgraphNodeParams np;
		CUgraphExec x;
		CUgraph g;
		size_t count = 0;

		packed.a = d;
		CHECK_DRV(p_cuGraphCreate(&g, 0));
		auto chain = [&](CUDA_KERNEL_NODE_PARAMS p, int m, int a) {
			CUgraphNode node;

			mul = m;
			add = a;
			CHECK_DRV(p_cuGraphAddKernelNode(&node, g, nodes.empty() ? NULL : &nodes.back(),
							 nodes.empty() ? 0 : 1, &p));
			nodes.push_back(node);
			steps.push_back({ m, a });
		};
		/* XLA's CreateKernelNode: func, kernelParams, ctx and kern NULL. */
		chain(affine_node(f_mod, NULL, params, NULL), 2, 1);
		/* ctx beside func: ignored. */
		{
			CUDA_KERNEL_NODE_PARAMS p = affine_node(f_mod, NULL, params, NULL);

			p.ctx = ctx;
			chain(p, 1, 5);
		}
		/* kern with func NULL, without and with the context. */
		chain(affine_node(NULL, k_lib, params, NULL), 3, -2);
		{
			CUDA_KERNEL_NODE_PARAMS p = affine_node(NULL, k_lib, params, NULL);

			p.ctx = ctx;
			chain(p, 1, 7);
		}
		chain(affine_node(f_kern, NULL, params, NULL), 2, 0);
		chain(affine_node(f_sym, NULL, params, NULL), 1, -4);
		/* func and kern: kern is not looked at. */
		chain(affine_node(f_mod, k_lib, params, NULL), 1, 3);
		/* extra: the packed buffer (3, 0 above). */
		chain(affine_node(f_mod, NULL, NULL, extra), 3, 0);
		/* No parameters: XLA's barrier. */
		{
			CUDA_KERNEL_NODE_PARAMS p = affine_node(f_noop, NULL, NULL, NULL);
			CUgraphNode node;

			CHECK_DRV(p_cuGraphAddKernelNode(&node, g, &nodes.back(), 1, &p));
			nodes.push_back(node);
		}
		/* 2: the generic forms. */
		memset(&np, 0, sizeof(np));
		np.type = CU_GRAPH_NODE_TYPE_KERNEL;
		np.kernel.func = f_mod;
		np.kernel.gridDimX = G;
		np.kernel.gridDimY = np.kernel.gridDimZ = 1;
		np.kernel.blockDimX = B;
		np.kernel.blockDimY = np.kernel.blockDimZ = 1;
		np.kernel.kernelParams = params;
		{
			CUgraphEdgeData zero[1];
			CUgraphNode node;

			memset(zero, 0, sizeof(zero));
			mul = 1;
			add = 10;
			CHECK_DRV(p_cuGraphAddNode_v1(&node, g, &nodes.back(), 1, &np));
			nodes.push_back(node);
			steps.push_back({ 1, 10 });
			mul = 2;
			add = -3;
			CHECK_DRV(p_cuGraphAddNode_v2(&node, g, &nodes.back(), NULL, 1, &np));
			nodes.push_back(node);
			steps.push_back({ 2, -3 });
			mul = 1;
			add = 1;
			CHECK_DRV(p_cuGraphAddNode_v2(&node, g, &nodes.back(), zero, 1, &np));
			nodes.push_back(node);
			steps.push_back({ 1, 1 });
		}
		CHECK_DRV(p_cuGraphGetNodes(g, NULL, &count));
		REQUIRE(count == nodes.size(), "%zu nodes, expected %zu", count, nodes.size());

		/* 4: a node changed before instantiation. */
		mul = 5;
		add = 0;
		{
			CUDA_KERNEL_NODE_PARAMS p = affine_node(f_mod, NULL, params, NULL);

			CHECK_DRV(p_cuGraphKernelNodeSetParams(nodes[0], &p));
			steps[0] = { 5, 0 };
		}
		/* 3: priority, as XLA sets it, and the executable that uses it. */
		memset(&prio, 0, sizeof(prio));
		prio.priority = -1;
		CHECK_DRV(p_cuGraphKernelNodeSetAttribute(nodes[1], CU_LAUNCH_ATTRIBUTE_PRIORITY, &prio));
		memset(&back, 0, sizeof(back));
		CHECK_DRV(p_cuGraphKernelNodeGetAttribute(nodes[1], CU_LAUNCH_ATTRIBUTE_PRIORITY, &back));
		REQUIRE(back.priority == -1, "priority read back %d, expected -1", back.priority);
		CHECK_DRV(p_cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));

		run(x, 0, steps, "kernel nodes of every kind");

		/* 4: XLA's UpdateKernelNode, and the generic setter. */
		mul = 4;
		add = 2;
		{
			CUDA_KERNEL_NODE_PARAMS p = affine_node(f_mod, NULL, params, NULL);

			CHECK_DRV(p_cuGraphExecKernelNodeSetParams(x, nodes[2], &p));
			steps[2] = { 4, 2 };
		}
		mul = 1;
		add = 100;
		CHECK_DRV(p_cuGraphExecNodeSetParams(x, nodes[nodes.size() - 1], &np));
		steps[steps.size() - 1] = { 1, 100 };
		run(x, 0, steps, "kernel nodes updated in the executable");
		CHECK_DRV(p_cuGraphExecDestroy(x));
		CHECK_DRV(p_cuGraphDestroy(g));
	}

	/* 5: a while loop as XLA's WhileCmd makes it: the condition set before
	 * the loop and by the body's last kernel node. */
	{
		CUgraphConditionalHandle h;
		CUgraphNode set, loop, body_affine, body_step;
		CUgraphNodeParams cp;
		CUgraphExec x;
		CUgraph g, body;
		void *step_params[] = { &h, &left };
		const int trips = 4, start = 3;

		CHECK_DRV(p_cuGraphCreate(&g, 0));
		CHECK_DRV(p_cuGraphConditionalHandleCreate(&h, g, ctx, 0, 0));
		{
			CUDA_KERNEL_NODE_PARAMS p;
			CUfunction f_step;

			CHECK_DRV(p_cuModuleGetFunction(&f_step, mod, "kn_step"));
			/* left = trips + 1: the first step before the loop leaves trips. */
			p = affine_node(f_step, NULL, step_params, NULL);
			p.gridDimX = p.blockDimX = 1;
			CHECK_DRV(p_cuGraphAddKernelNode(&set, g, NULL, 0, &p));
			memset(&cp, 0, sizeof(cp));
			cp.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
			cp.conditional.handle = h;
			cp.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
			cp.conditional.size = 1;
			cp.conditional.ctx = ctx;
			CHECK_DRV(p_cuGraphAddNode_v2(&loop, g, &set, NULL, 1, &cp));
			body = cp.conditional.phGraph_out[0];
			mul = 2;
			add = 1;
			p = affine_node(f_mod, NULL, params, NULL);
			CHECK_DRV(p_cuGraphAddKernelNode(&body_affine, body, NULL, 0, &p));
			p = affine_node(f_step, NULL, step_params, NULL);
			p.gridDimX = p.blockDimX = 1;
			CHECK_DRV(p_cuGraphAddKernelNode(&body_step, body, &body_affine, 1, &p));
		}
		CHECK_DRV(p_cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));
		{
			int l = trips + 1;

			CHECK(cudaMemcpy(left, &l, sizeof(l), cudaMemcpyHostToDevice));
			run(x, start, std::vector<std::pair<int, int>>(trips, { 2, 1 }), "a while loop of kernel nodes");
			CHECK(cudaMemcpy(&l, left, sizeof(l), cudaMemcpyDeviceToHost));
			REQUIRE(l == 0, "the loop left its counter at %d, expected 0", l);
		}
		CHECK_DRV(p_cuGraphExecDestroy(x));
		CHECK_DRV(p_cuGraphDestroy(g));
	}

	/* 6: XLA's Trace: a launch captured into the graph after a node of its own. */
	{
		CUgraphNode first;
		CUgraphExec x;
		CUgraph g, captured;
		size_t roots = 0, count = 0;
		std::vector<std::pair<int, int>> steps = { { 1, 7 }, { 3, 1 } };

		CHECK_DRV(p_cuGraphCreate(&g, 0));
		mul = 1;
		add = 7;
		{
			CUDA_KERNEL_NODE_PARAMS p = affine_node(f_mod, NULL, params, NULL);

			CHECK_DRV(p_cuGraphAddKernelNode(&first, g, NULL, 0, &p));
		}
		CHECK_DRV(p_cuStreamBeginCaptureToGraph(s, g, &first, NULL, 1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
		mul = 3;
		add = 1;
		CHECK_DRV(p_cuLaunchKernel(f_mod, G, 1, 1, B, 1, 1, 0, s, params, NULL));
		CHECK_DRV(p_cuStreamEndCapture(s, &captured));
		REQUIRE(captured == g, "the capture ended in another graph");
		CHECK_DRV(p_cuGraphGetRootNodes(g, NULL, &roots));
		CHECK_DRV(p_cuGraphGetNodes(g, NULL, &count));
		REQUIRE(roots == 1 && count == 2, "%zu roots and %zu nodes, expected 1 and 2", roots, count);
		CHECK_DRV(p_cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));
		run(x, 0, steps, "a launch captured into the graph");
		CHECK_DRV(p_cuGraphExecDestroy(x));
		CHECK_DRV(p_cuGraphDestroy(g));
	}

	/* 7: programmatic edges between kernel nodes, as XLA's command buffers
	 * add them: a -> b (PROGRAMMATIC type, PROGRAMMATIC port) and b -> c
	 * (PROGRAMMATIC type, LAUNCH_ORDER port) through cuGraphAddNode_v2, a
	 * -> c through cuGraphAddDependencies_v2. Each node steps its own array,
	 * so the result does not depend on how early a dependent starts. */
	CHECK(cudaGetDevice(&dev));
	CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
	if (major >= 9 || through_tern()) {
		CUgraphEdgeData prog, order, bad, got[4];
		CUgraphNode a, b, c, e, from[4], to[4], deps[3];
		CUgraphNodeParams np;
		CUgraph g;
		CUgraphExec x;
		int *arr[3];
		void *args[3][4];
		size_t count;

		memset(&prog, 0, sizeof(prog));
		prog.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
		prog.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
		order = prog;
		order.from_port = CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER;
		mul = 1;
		for (int k = 0; k < 3; k++) {
			CHECK(cudaMalloc(&arr[k], N * sizeof(int)));
			CHECK(cudaMemset(arr[k], 0, N * sizeof(int)));
			args[k][0] = &arr[k];
			args[k][1] = &mul;
			args[k][2] = &add;
			args[k][3] = &n;
		}
		/* The arguments are copied when a node is made: add differs per node. */
		auto kernel_params = [&](int k) {
			CUDA_KERNEL_NODE_PARAMS p = affine_node(f_mod, NULL, args[k], NULL);

			memset(&np, 0, sizeof(np));
			np.type = CU_GRAPH_NODE_TYPE_KERNEL;
			/* CUDA_KERNEL_NODE_PARAMS_v3 has v2's fields in v2's order. */
			static_assert(sizeof(np.kernel) == sizeof(p), "kernel node parameters v2 and v3");
			memcpy(&np.kernel, &p, sizeof(p));
			add = 2 + k;
			return p;
		};
		CHECK_DRV(p_cuGraphCreate(&g, 0));
		{
			CUDA_KERNEL_NODE_PARAMS p = kernel_params(0);

			CHECK_DRV(p_cuGraphAddKernelNode(&a, g, NULL, 0, &p));
		}
		kernel_params(1);
		CHECK_DRV(p_cuGraphAddNode_v2(&b, g, &a, &prog, 1, &np));
		kernel_params(2);
		CHECK_DRV(p_cuGraphAddNode_v2(&c, g, &b, &order, 1, &np));
		CHECK_DRV(p_cuGraphAddDependencies_v2(g, &a, &c, &prog, 1));

		/* Read back with their data; without room for it, a lossy query. */
		count = 4;
		CHECK_DRV(p_cuGraphGetEdges_v2(g, from, to, got, &count));
		REQUIRE(count == 3, "%zu edges, expected 3", count);
		for (size_t i = 0; i < count; i++) {
			const CUgraphEdgeData *want = from[i] == b && to[i] == c ? &order : &prog;

			REQUIRE((from[i] == a && (to[i] == b || to[i] == c)) || (from[i] == b && to[i] == c),
				"edge %zu joins the wrong nodes", i);
			REQUIRE(!memcmp(&got[i], want, sizeof(*want)), "edge %zu: type %u from port %u to port %u", i,
				got[i].type, got[i].from_port, got[i].to_port);
		}
		count = 4;
		EXPECT_DRV(p_cuGraphGetEdges_v1(g, from, to, &count), CUDA_ERROR_LOSSY_QUERY);
		CHECK_DRV(p_cuGraphGetEdges_v1(g, NULL, NULL, &count));
		REQUIRE(count == 3, "%zu edges counted, expected 3", count);
		count = 3;
		CHECK_DRV(p_cuGraphNodeGetDependencies_v2(c, deps, got, &count));
		REQUIRE(count == 2 && deps[0] == b && deps[1] == a, "c's dependencies: %zu, not b then a", count);
		REQUIRE(!memcmp(&got[0], &order, sizeof(order)) && !memcmp(&got[1], &prog, sizeof(prog)),
			"c's dependencies' data");
		count = 3;
		EXPECT_DRV(p_cuGraphNodeGetDependencies_v2(c, deps, NULL, &count), CUDA_ERROR_LOSSY_QUERY);

		/* An edge is removed with the data it has, or with default data
		 * whatever it has: the H100's driver (580.159) removes a -> c given
		 * none, though cuda.h asks for data that matches. */
		CHECK_DRV(p_cuGraphRemoveDependencies_v2(g, &a, &c, NULL, 1));
		count = 4;
		CHECK_DRV(p_cuGraphGetEdges_v2(g, from, to, got, &count));
		REQUIRE(count == 2, "%zu edges after removing a -> c without its data, expected 2", count);
		CHECK_DRV(p_cuGraphAddDependencies_v2(g, &a, &c, &prog, 1));
		CHECK_DRV(p_cuGraphRemoveDependencies_v2(g, &a, &c, &prog, 1));
		CHECK_DRV(p_cuGraphAddDependencies_v2(g, &a, &c, &prog, 1));

		CHECK_DRV(p_cuGraphInstantiateWithFlags(&x, g, 0));
		CHECK_DRV(p_cuGraphLaunch(x, s));
		CHECK_DRV(p_cuStreamSynchronize(s));
		for (int k = 0; k < 3; k++)
			expect(arr[k], 0, { { 1, 2 + k } }, "a programmatic edge's node");
		CHECK_DRV(p_cuGraphExecDestroy(x));

		/* What the driver refuses: a reserved byte set, a port into a node,
		 * an unknown type or port, a programmatic edge out of a node that is
		 * not a kernel, the programmatic port with a default edge. */
		CHECK_DRV(p_cuGraphAddEmptyNode(&e, g, NULL, 0));
		bad = prog;
		bad.reserved[2] = 1;
		EXPECT_DRV(p_cuGraphAddDependencies_v2(g, &b, &e, &bad, 1), CUDA_ERROR_INVALID_VALUE);
		bad = prog;
		bad.to_port = 1;
		EXPECT_DRV(p_cuGraphAddDependencies_v2(g, &b, &e, &bad, 1), CUDA_ERROR_INVALID_VALUE);
		bad = prog;
		bad.type = 7;
		EXPECT_DRV(p_cuGraphAddDependencies_v2(g, &b, &e, &bad, 1), CUDA_ERROR_INVALID_VALUE);
		bad = prog;
		bad.from_port = 9;
		EXPECT_DRV(p_cuGraphAddDependencies_v2(g, &b, &e, &bad, 1), CUDA_ERROR_INVALID_VALUE);
		EXPECT_DRV(p_cuGraphAddDependencies_v2(g, &e, &a, &prog, 1), CUDA_ERROR_INVALID_VALUE);
		bad = prog;
		bad.type = CU_GRAPH_DEPENDENCY_TYPE_DEFAULT;
		EXPECT_DRV(p_cuGraphAddDependencies_v2(g, &b, &e, &bad, 1), CUDA_ERROR_INVALID_VALUE);
		/* A node added with a refused edge is not added. */
		kernel_params(0);
		bad = prog;
		bad.reserved[0] = 1;
		count = 0;
		CHECK_DRV(p_cuGraphGetNodes(g, NULL, &count));
		EXPECT_DRV(p_cuGraphAddNode_v2(&b, g, &a, &bad, 1, &np), CUDA_ERROR_INVALID_VALUE);
		{
			size_t after = 0;

			CHECK_DRV(p_cuGraphGetNodes(g, NULL, &after));
			REQUIRE(after == count, "%zu nodes after a refused add, expected %zu", after, count);
		}
		CHECK_DRV(p_cuGraphDestroy(g));
		for (int k = 0; k < 3; k++)
			CHECK(cudaFree(arr[k]));
	}

	CHECK_DRV(p_cuStreamDestroy(s));
	CHECK_DRV(p_cuLibraryUnload(lib));
	CHECK_DRV(p_cuModuleUnload(mod));
	CHECK(cudaFree(d));
	CHECK(cudaFree(left));
	test_pass("graph_kernel_nodes");
	return 0;
}
