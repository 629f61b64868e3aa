/* NVIDIA's graphConditionalNodes samples, their graphs built exactly as
 * the samples build them, each kernel's printf replaced by a count in
 * device memory that the host checks:
 *
 *  1. simple if: kernel A sets the condition from *dPtr & 1 (a handle with
 *     no default), body C;
 *  2. do-while: a handle with cudaGraphCondAssignDefault and default 1, a
 *     while node alone in its graph, its body filled by a capture into it
 *     (cudaStreamBeginCaptureToGraph, ended with a NULL graph pointer):
 *     two kernels, then one that decrements a counter and sets the
 *     condition to 0 when it reaches 0;
 *  3. captured while: a capture whose handle is made before its first
 *     node, a while node added through cudaStreamGetCaptureInfo and
 *     cudaStreamUpdateCaptureDependencies, the body captured afterwards;
 *  4. if/else: two bodies;
 *  5. switch: four bodies, launched with the condition 0 to 4.
 */
#include <cuda_runtime.h>
#include <stdio.h>

#include "check.h"

/* counts: [0] if-true body, [1] if-false body, [2] do-while empty kernels,
 * [3] captured while's last kernel, [4..7] switch bodies. */
extern "C" __global__ void cs_set_odd(char *dPtr, cudaGraphConditionalHandle handle)
{
	cudaGraphSetConditional(handle, *dPtr & 0x01);
}

extern "C" __global__ void cs_count(int *counts, int which)
{
	counts[which]++;
}

extern "C" __global__ void cs_do_while(char *dPtr, cudaGraphConditionalHandle handle)
{
	if (--(*dPtr) == 0)
		cudaGraphSetConditional(handle, 0);
}

extern "C" __global__ void cs_captured_while(char *dPtr, cudaGraphConditionalHandle handle, int *steps)
{
	(*steps)++;
	if (*dPtr)
		(*dPtr)--;
	cudaGraphSetConditional(handle, *dPtr);
}

extern "C" __global__ void cs_set_value(char *dPtr, cudaGraphConditionalHandle handle)
{
	cudaGraphSetConditional(handle, (unsigned char)*dPtr);
}

static int *counts;
static char *dPtr;

static void counts_get(int out[8])
{
	CHECK(cudaMemcpy(out, counts, 8 * sizeof(int), cudaMemcpyDeviceToHost));
}

static void counts_zero(void)
{
	CHECK(cudaMemset(counts, 0, 8 * sizeof(int)));
}

static char dptr_get(void)
{
	char v;

	CHECK(cudaMemcpy(&v, dPtr, 1, cudaMemcpyDeviceToHost));
	return v;
}

static cudaGraphNode_t add_count(cudaGraph_t g, int which)
{
	static int slot[8];
	void *args[2] = { &counts, &slot[which] };
	cudaGraphNodeParams p = { cudaGraphNodeTypeKernel };
	cudaGraphNode_t n;

	slot[which] = which;
	p.kernel.func = (void *)cs_count;
	p.kernel.gridDim = dim3(1);
	p.kernel.blockDim = dim3(1);
	p.kernel.kernelParams = args;
	CHECK(cudaGraphAddNode(&n, g, NULL, NULL, 0, &p));
	return n;
}

/* Kernel A then a conditional node of @type with @size bodies (1, 4, 5). */
static cudaGraph_t set_then_cond(void *set_fn, cudaGraphConditionalNodeType type, unsigned size, cudaGraph_t *bodies)
{
	cudaGraph_t graph;
	cudaGraphNode_t kernel_node, cond_node;
	cudaGraphConditionalHandle handle;
	void *args[2] = { &dPtr, &handle };

	CHECK(cudaGraphCreate(&graph, 0));
	CHECK(cudaGraphConditionalHandleCreate(&handle, graph));
	cudaGraphNodeParams p = { cudaGraphNodeTypeKernel };
	p.kernel.func = set_fn;
	p.kernel.gridDim = dim3(1);
	p.kernel.blockDim = dim3(1);
	p.kernel.kernelParams = args;
	CHECK(cudaGraphAddNode(&kernel_node, graph, NULL, NULL, 0, &p));
	cudaGraphNodeParams c = { cudaGraphNodeTypeConditional };
	c.conditional.handle = handle;
	c.conditional.type = type;
	c.conditional.size = size;
	CHECK(cudaGraphAddNode(&cond_node, graph, &kernel_node, NULL, 1, &c));
	for (unsigned i = 0; i < size; i++)
		bodies[i] = c.conditional.phGraph_out[i];
	return graph;
}

static void simple_if(void)
{
	cudaGraph_t body;
	cudaGraph_t graph = set_then_cond((void *)cs_set_odd, cudaGraphCondTypeIf, 1, &body);
	cudaGraphExec_t x;
	int c[8];

	add_count(body, 0);
	CHECK(cudaGraphInstantiate(&x, graph, NULL, NULL, 0));
	counts_zero();
	CHECK(cudaMemset(dPtr, 0, 1));
	CHECK(cudaGraphLaunch(x, 0));
	CHECK(cudaDeviceSynchronize());
	counts_get(c);
	REQUIRE(c[0] == 0, "simple if with 0: body ran %d times", c[0]);
	CHECK(cudaMemset(dPtr, 1, 1));
	CHECK(cudaGraphLaunch(x, 0));
	CHECK(cudaDeviceSynchronize());
	counts_get(c);
	REQUIRE(c[0] == 1, "simple if with 1: body ran %d times", c[0]);
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(graph));
	printf("graph_conditional_samples: simple if ok\n");
}

static void do_while(void)
{
	cudaGraph_t graph;
	cudaGraphExec_t x;
	cudaGraphNode_t cond_node;
	cudaGraphConditionalHandle handle;
	cudaStream_t cs;
	int c[8], two = 2;

	CHECK(cudaGraphCreate(&graph, 0));
	CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault));
	cudaGraphNodeParams p = { cudaGraphNodeTypeConditional };
	p.conditional.handle = handle;
	p.conditional.type = cudaGraphCondTypeWhile;
	p.conditional.size = 1;
	CHECK(cudaGraphAddNode(&cond_node, graph, NULL, NULL, 0, &p));
	cudaGraph_t body = p.conditional.phGraph_out[0];
	CHECK(cudaStreamCreate(&cs));
	CHECK(cudaStreamBeginCaptureToGraph(cs, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
	cs_count<<<1, 1, 0, cs>>>(counts, two);
	cs_count<<<1, 1, 0, cs>>>(counts, two);
	cs_do_while<<<1, 1, 0, cs>>>(dPtr, handle);
	CHECK(cudaStreamEndCapture(cs, nullptr));
	CHECK(cudaStreamDestroy(cs));
	CHECK(cudaGraphInstantiate(&x, graph, NULL, NULL, 0));
	for (int from = 10; from >= 1; from -= 9) {
		counts_zero();
		CHECK(cudaMemset(dPtr, from, 1));
		CHECK(cudaGraphLaunch(x, 0));
		CHECK(cudaDeviceSynchronize());
		counts_get(c);
		REQUIRE(c[2] == 2 * from && dptr_get() == 0, "do-while from %d: %d body kernels, counter %d", from,
			c[2], dptr_get());
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(graph));
	printf("graph_conditional_samples: do-while ok\n");
}

static void captured_while(void)
{
	cudaGraph_t graph;
	cudaGraphExec_t x;
	cudaStreamCaptureStatus status;
	const cudaGraphNode_t *deps;
	size_t ndeps;
	cudaStream_t cs, bs;
	int c[8], three = 3, *steps = counts + 4;

	CHECK(cudaStreamCreate(&cs));
	CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
	CHECK(cudaStreamGetCaptureInfo(cs, &status, NULL, &graph, &deps, NULL, &ndeps));
	cudaGraphConditionalHandle handle;
	CHECK(cudaGraphConditionalHandleCreate(&handle, graph));
	cs_captured_while<<<1, 1, 0, cs>>>(dPtr, handle, steps);
	CHECK(cudaStreamGetCaptureInfo(cs, &status, NULL, &graph, &deps, NULL, &ndeps));
	cudaGraphNode_t cond_node;
	cudaGraphNodeParams p = { cudaGraphNodeTypeConditional };
	p.conditional.handle = handle;
	p.conditional.type = cudaGraphCondTypeWhile;
	p.conditional.size = 1;
	CHECK(cudaGraphAddNode(&cond_node, graph, deps, NULL, ndeps, &p));
	cudaGraph_t body = p.conditional.phGraph_out[0];
	CHECK(cudaStreamUpdateCaptureDependencies(cs, &cond_node, NULL, 1, cudaStreamSetCaptureDependencies));
	cs_count<<<1, 1, 0, cs>>>(counts, three);
	CHECK(cudaStreamEndCapture(cs, &graph));
	CHECK(cudaStreamDestroy(cs));
	CHECK(cudaStreamCreate(&bs));
	CHECK(cudaStreamBeginCaptureToGraph(bs, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
	cs_captured_while<<<1, 1, 0, bs>>>(dPtr, handle, steps);
	CHECK(cudaStreamEndCapture(bs, nullptr));
	CHECK(cudaStreamDestroy(bs));
	CHECK(cudaGraphInstantiate(&x, graph, NULL, NULL, 0));
	const int from[] = { 0, 10 };
	const int want_steps[] = { 1, 10 };     /* A once; then the body until the counter is 0 */
	for (int i = 0; i < 2; i++) {
		counts_zero();
		CHECK(cudaMemset(dPtr, from[i], 1));
		CHECK(cudaGraphLaunch(x, 0));
		CHECK(cudaDeviceSynchronize());
		counts_get(c);
		REQUIRE(c[4] == want_steps[i] && c[3] == 1 && dptr_get() == 0,
			"captured while from %d: %d steps (want %d), last kernel %d times, counter %d", from[i], c[4],
			want_steps[i], c[3], dptr_get());
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(graph));
	printf("graph_conditional_samples: captured while ok\n");
}

static void if_else(void)
{
	cudaGraph_t bodies[2];
	cudaGraph_t graph = set_then_cond((void *)cs_set_odd, cudaGraphCondTypeIf, 2, bodies);
	cudaGraphExec_t x;
	int c[8];

	add_count(bodies[0], 0);
	add_count(bodies[1], 1);
	CHECK(cudaGraphInstantiate(&x, graph, NULL, NULL, 0));
	counts_zero();
	for (int v = 0; v < 2; v++) {
		CHECK(cudaMemset(dPtr, v, 1));
		CHECK(cudaGraphLaunch(x, 0));
		CHECK(cudaDeviceSynchronize());
		counts_get(c);
		REQUIRE(c[0] == v && c[1] == 1, "if/else with %d: true body %d, false body %d", v, c[0], c[1]);
	}
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(graph));
	printf("graph_conditional_samples: if/else ok\n");
}

static void switch_graph(void)
{
	cudaGraph_t bodies[4];
	cudaGraph_t graph = set_then_cond((void *)cs_set_value, cudaGraphCondTypeSwitch, 4, bodies);
	cudaGraphExec_t x;
	int c[8];

	for (int i = 0; i < 4; i++)
		add_count(bodies[i], 4 + i);
	CHECK(cudaGraphInstantiate(&x, graph, NULL, NULL, 0));
	counts_zero();
	for (char i = 0; i < 5; i++) {
		CHECK(cudaMemset(dPtr, i, 1));
		CHECK(cudaGraphLaunch(x, 0));
		CHECK(cudaDeviceSynchronize());
	}
	counts_get(c);
	for (int i = 0; i < 4; i++)
		REQUIRE(c[4 + i] == 1, "switch: body %d ran %d times", i, c[4 + i]);
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(graph));
	printf("graph_conditional_samples: switch ok\n");
}

int main(void)
{
	CHECK(cudaMalloc(&dPtr, 1));
	CHECK(cudaMalloc(&counts, 8 * sizeof(int)));
	simple_if();
	do_while();
	captured_while();
	if_else();
	switch_graph();
	CHECK(cudaFree(dPtr));
	CHECK(cudaFree(counts));
	printf("PASS graph_conditional_samples\n");
	return 0;
}
