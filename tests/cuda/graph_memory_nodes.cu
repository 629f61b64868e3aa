/* Graph memory nodes as NVIDIA's graphMemoryNodes sample makes them:
 *
 *  1. the negate-squares work in a stream, then stream-captured: two
 *     streams joined by events, cudaMallocAsync and cudaFreeAsync inside
 *     the capture (allocation and free nodes), cudaMemcpyAsync from and to
 *     pageable host memory; the graph instantiated, the graph destroyed,
 *     the executable launched (three times, the host input changed);
 *  2. the same graph built explicitly (cudaGraphAddMemAllocNode,
 *     cudaGraphAddMemFreeNode, cudaGraphAddMemcpyNode1D with host memory),
 *     the allocation of d_negSquare one that outlives the graph: read by a
 *     kernel after the launch, then freed with cudaFree; after another
 *     launch with cudaFreeAsync; after a third by a different graph's free
 *     node;
 *  3. cudaGraphInstantiateFlagAutoFreeOnLaunch: a captured allocation that
 *     the graph does not free, launched again and again.
 *
 * Results are checked against values computed on the host, and on the
 * device by a validating kernel, as the sample does.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const int NUM = 100000;
static const int TPB = 512;

extern "C" __global__ void gm_square(const float *in, float *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = in[i] * in[i];
}

extern "C" __global__ void gm_negate(const float *in, float *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = -in[i];
}

/* Counts the elements of @got that differ from @ref. */
extern "C" __global__ void gm_validate(const float *got, const float *ref, int n, int *bad)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n && got[i] != ref[i])
		atomicAdd(bad, 1);
}

struct arrays {
	float *input, *square, *neg;
	size_t bytes;
	int blocks;
};

static void fill(float *a, int n, int seed)
{
	for (int i = 0; i < n; i++)
		a[i] = (float)((i * 31 + seed * 17) % 997) / 64.0f;
}

static void reset_outputs(struct arrays *h)
{
	memset(h->square, 0xff, h->bytes);
	memset(h->neg, 0xff, h->bytes);
}

static void validate_host(const struct arrays *h, const char *what)
{
	for (int i = 0; i < NUM; i++) {
		float sq = h->input[i] * h->input[i];

		REQUIRE(h->square[i] == sq && h->neg[i] == -sq, "%s: element %d: square %g neg %g, want %g %g",
			what, i, h->square[i], h->neg[i], sq, -sq);
	}
}

/* The sample's doNegateSquaresInStream; @neg_out: d_negSquare is not freed
 * but handed back. */
static void negate_squares_in_stream(cudaStream_t s1, struct arrays *h, float **neg_out)
{
	float *d_in, *d_sq, *d_neg;
	cudaStream_t s2;
	cudaEvent_t sq_done, neg_done, sq_freed;
	int n = NUM;

	CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CHECK(cudaEventCreate(&sq_done));
	CHECK(cudaEventCreate(&neg_done));
	CHECK(cudaEventCreate(&sq_freed));
	CHECK(cudaMallocAsync(&d_in, h->bytes, s1));
	CHECK(cudaMallocAsync(&d_sq, h->bytes, s1));
	CHECK(cudaMemcpyAsync(d_in, h->input, h->bytes, cudaMemcpyHostToDevice, s1));
	gm_square<<<h->blocks, TPB, 0, s1>>>(d_in, d_sq, n);
	CHECK(cudaGetLastError());
	CHECK(cudaEventRecord(sq_done, s1));
	CHECK(cudaStreamWaitEvent(s2, sq_done, 0));
	CHECK(cudaMemcpyAsync(h->square, d_sq, h->bytes, cudaMemcpyDeviceToHost, s2));
	CHECK(cudaFreeAsync(d_in, s1));
	CHECK(cudaMallocAsync(&d_neg, h->bytes, s1));
	gm_negate<<<h->blocks, TPB, 0, s1>>>(d_sq, d_neg, n);
	CHECK(cudaGetLastError());
	CHECK(cudaEventRecord(neg_done, s1));
	CHECK(cudaMemcpyAsync(h->neg, d_neg, h->bytes, cudaMemcpyDeviceToHost, s1));
	if (neg_out)
		*neg_out = d_neg;
	else
		CHECK(cudaFreeAsync(d_neg, s1));
	CHECK(cudaStreamWaitEvent(s2, neg_done, 0));
	CHECK(cudaFreeAsync(d_sq, s2));
	CHECK(cudaEventRecord(sq_freed, s2));
	CHECK(cudaStreamWaitEvent(s1, sq_freed, 0));
	CHECK(cudaStreamDestroy(s2));
	CHECK(cudaEventDestroy(sq_done));
	CHECK(cudaEventDestroy(neg_done));
	CHECK(cudaEventDestroy(sq_freed));
}

static void graph_captured(cudaGraphExec_t *x, struct arrays *h, float **neg_out, unsigned long long flags)
{
	cudaGraph_t g;
	cudaStream_t s;

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	negate_squares_in_stream(s, h, neg_out);
	CHECK(cudaStreamEndCapture(s, &g));

	size_t count = 0;
	int allocs = 0, frees = 0;
	CHECK(cudaGraphGetNodes(g, NULL, &count));
	cudaGraphNode_t nodes[64];
	REQUIRE(count <= 64, "%zu nodes", count);
	CHECK(cudaGraphGetNodes(g, nodes, &count));
	for (size_t i = 0; i < count; i++) {
		cudaGraphNodeType t;

		CHECK(cudaGraphNodeGetType(nodes[i], &t));
		allocs += t == cudaGraphNodeTypeMemAlloc;
		frees += t == cudaGraphNodeTypeMemFree;
	}
	REQUIRE(allocs == 3 && frees == (neg_out ? 2 : 3), "captured graph: %d allocation nodes, %d free nodes",
		allocs, frees);
	CHECK(cudaGraphInstantiateWithFlags(x, g, flags));
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaGraphDestroy(g));
}

/* The sample's createNegateSquaresGraphExplicitly. */
static void graph_explicit(cudaGraphExec_t *x, struct arrays *h, float **neg_out)
{
	float *d_in, *d_sq, *d_neg;
	cudaGraph_t g;
	cudaGraphNode_t a_in, a_sq, a_neg, c_in, c_sq, c_neg, k_sq, k_neg, f_in, f_sq;
	cudaMemAllocNodeParams ap = {};
	cudaKernelNodeParams kp = {};
	int n = NUM;

	ap.bytesize = h->bytes;
	ap.poolProps.allocType = cudaMemAllocationTypePinned;
	ap.poolProps.location.id = 0;
	ap.poolProps.location.type = cudaMemLocationTypeDevice;
	kp.gridDim = dim3(h->blocks);
	kp.blockDim = dim3(TPB);
	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphAddMemAllocNode(&a_in, g, NULL, 0, &ap));
	d_in = (float *)ap.dptr;
	CHECK(cudaGraphAddMemAllocNode(&a_sq, g, &a_in, 1, &ap));
	d_sq = (float *)ap.dptr;
	CHECK(cudaGraphAddMemcpyNode1D(&c_in, g, &a_sq, 1, d_in, h->input, h->bytes, cudaMemcpyHostToDevice));
	void *sq_args[] = { &d_in, &d_sq, &n };
	kp.func = (void *)gm_square;
	kp.kernelParams = sq_args;
	CHECK(cudaGraphAddKernelNode(&k_sq, g, &c_in, 1, &kp));
	CHECK(cudaGraphAddMemcpyNode1D(&c_sq, g, &k_sq, 1, h->square, d_sq, h->bytes, cudaMemcpyDeviceToHost));
	CHECK(cudaGraphAddMemFreeNode(&f_in, g, &k_sq, 1, d_in));
	CHECK(cudaGraphAddMemAllocNode(&a_neg, g, &f_in, 1, &ap));
	d_neg = (float *)ap.dptr;
	void *neg_args[] = { &d_sq, &d_neg, &n };
	kp.func = (void *)gm_negate;
	kp.kernelParams = neg_args;
	CHECK(cudaGraphAddKernelNode(&k_neg, g, &a_neg, 1, &kp));
	cudaGraphNode_t both[] = { c_sq, k_neg };
	CHECK(cudaGraphAddMemFreeNode(&f_sq, g, both, 2, d_sq));
	CHECK(cudaGraphAddMemcpyNode1D(&c_neg, g, &k_neg, 1, h->neg, d_neg, h->bytes, cudaMemcpyDeviceToHost));
	if (neg_out) {
		*neg_out = d_neg;
	} else {
		cudaGraphNode_t f_neg;

		CHECK(cudaGraphAddMemFreeNode(&f_neg, g, &c_neg, 1, d_neg));
	}
	CHECK(cudaGraphInstantiate(x, g, NULL, NULL, 0));
	CHECK(cudaGraphDestroy(g));
}

static void free_graph(cudaGraphExec_t *x, float *d)
{
	cudaGraph_t g;
	cudaGraphNode_t f;

	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphAddMemFreeNode(&f, g, NULL, 0, d));
	CHECK(cudaGraphInstantiate(x, g, NULL, NULL, 0));
	CHECK(cudaGraphDestroy(g));
}

/* The device's own check of d_negSquare against the reference. */
static void validate_device(cudaStream_t s, const float *d_neg, const float *d_ref, int *d_bad, const char *what)
{
	int bad = -1, n = NUM;

	CHECK(cudaMemsetAsync(d_bad, 0, sizeof(int), s));
	gm_validate<<<(NUM + TPB - 1) / TPB, TPB, 0, s>>>(d_neg, d_ref, n, d_bad);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpyAsync(&bad, d_bad, sizeof(int), cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(bad == 0, "%s: %d elements of d_negSquare wrong on the device", what, bad);
}

int main(void)
{
	struct arrays h;
	cudaStream_t s;
	cudaGraphExec_t x, x_free;
	float *d_neg = NULL, *d_ref;
	int *d_bad, supported = 0;

	CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
	REQUIRE(supported, "the device reports no memory pools");
	h.bytes = NUM * sizeof(float);
	h.blocks = (NUM + TPB - 1) / TPB;
	h.input = (float *)malloc(h.bytes);
	h.square = (float *)malloc(h.bytes);
	h.neg = (float *)malloc(h.bytes);
	float *ref = (float *)malloc(h.bytes);
	REQUIRE(h.input && h.square && h.neg && ref, "out of memory");
	fill(h.input, NUM, 1);
	for (int i = 0; i < NUM; i++)
		ref[i] = -(h.input[i] * h.input[i]);
	CHECK(cudaMalloc(&d_ref, h.bytes));
	CHECK(cudaMemcpy(d_ref, ref, h.bytes, cudaMemcpyHostToDevice));
	CHECK(cudaMalloc(&d_bad, sizeof(int)));
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

	reset_outputs(&h);
	negate_squares_in_stream(s, &h, NULL);
	CHECK(cudaStreamSynchronize(s));
	validate_host(&h, "in a stream");

	graph_captured(&x, &h, NULL, 0);
	for (int round = 0; round < 3; round++) {
		reset_outputs(&h);
		CHECK(cudaGraphLaunch(x, s));
		CHECK(cudaStreamSynchronize(s));
		validate_host(&h, "stream-captured graph");
	}
	/* The host input is read when the graph runs. */
	fill(h.input, NUM, 5);
	reset_outputs(&h);
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	validate_host(&h, "stream-captured graph, new input");
	fill(h.input, NUM, 1);
	CHECK(cudaGraphExecDestroy(x));
	printf("graph_memory_nodes: stream-captured ok\n");

	reset_outputs(&h);
	graph_explicit(&x, &h, NULL);
	CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	validate_host(&h, "explicit graph");
	CHECK(cudaGraphExecDestroy(x));
	printf("graph_memory_nodes: explicit ok\n");

	/* d_negSquare outlives the graph. */
	reset_outputs(&h);
	graph_explicit(&x, &h, &d_neg);
	CHECK(cudaGraphLaunch(x, s));
	validate_device(s, d_neg, d_ref, d_bad, "freed outside the stream");
	CHECK(cudaFree(d_neg));
	validate_host(&h, "freed outside the stream");

	reset_outputs(&h);
	CHECK(cudaGraphLaunch(x, s));
	validate_device(s, d_neg, d_ref, d_bad, "freed outside the graph");
	CHECK(cudaFreeAsync(d_neg, s));
	CHECK(cudaStreamSynchronize(s));
	validate_host(&h, "freed outside the graph");

	reset_outputs(&h);
	free_graph(&x_free, d_neg);
	CHECK(cudaGraphLaunch(x, s));
	validate_device(s, d_neg, d_ref, d_bad, "freed in a different graph");
	CHECK(cudaGraphLaunch(x_free, s));
	CHECK(cudaStreamSynchronize(s));
	validate_host(&h, "freed in a different graph");
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphExecDestroy(x_free));
	printf("graph_memory_nodes: freed outside ok\n");

	/* An allocation the graph keeps, freed by the next launch. */
	graph_captured(&x, &h, &d_neg, cudaGraphInstantiateFlagAutoFreeOnLaunch);
	for (int round = 0; round < 3; round++) {
		reset_outputs(&h);
		CHECK(cudaGraphLaunch(x, s));
		validate_device(s, d_neg, d_ref, d_bad, "auto free on launch");
		validate_host(&h, "auto free on launch");
	}
	CHECK(cudaFreeAsync(d_neg, s));
	CHECK(cudaStreamSynchronize(s));
	CHECK(cudaGraphExecDestroy(x));
	printf("graph_memory_nodes: auto free on launch ok\n");

	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(d_ref));
	CHECK(cudaFree(d_bad));
	free(h.input);
	free(h.square);
	free(h.neg);
	free(ref);
	printf("PASS graph_memory_nodes\n");
	return 0;
}
