/* launch_misc: the less common launches and the calls around them.
 *
 *  1. cuLaunchCooperativeKernel: a kernel with a grid-wide barrier (its
 *     second phase reads what other blocks wrote in the first);
 *  2. cuLaunchKernelEx with cluster dimensions (2,1,1) on sm_90, a priority
 *     and programmatic stream serialization: each block reports its rank in
 *     its cluster and the cluster's size;
 *  3. a 32 KiB argument (CUDA 12.1+ allows 32764 bytes of parameters),
 *     through <<<>>>, cuLaunchKernel's kernelParams and its `extra` buffer;
 *     a function attribute (more dynamic shared memory) set, read and used;
 *  4. stream memory operations: a stream waits (cuStreamWaitValue32/64, a
 *     batch) for values another stream writes (cuStreamWriteValue32/64),
 *     then reads data that stream produced;
 *  5. user objects and graphs: a destructor runs only when the last
 *     reference goes (a graph, its clone, a child graph node, an executable
 *     graph after its launch);
 *  6. context limits, cache and shared memory configuration, context flags,
 *     stream attributes (priority, synchronisation policy, access policy
 *     window): set and read back;
 *  7. profiler start and stop;
 *  8. cuGetErrorName / cuGetErrorString for every CUresult of cuda.h (names
 *     against cuda.h; with TERN_TEST_REAL_DRIVER=PATH, names and strings
 *     against that driver's, loaded beside the one under test).
 *     `launch_misc --dump-error-strings` prints the driver's texts instead.
 *
 * On tern's sim backend, kernels run as CPU versions (sim_kernels.c); the
 * sim has no clusters and runs one stream at a time, so the cluster ranks and
 * a wait issued before its write are not checked there (the program says
 * so); the calls themselves still run. */
#include "check.h"
#include "curesults.h"

#include <atomic>
#include <cudaProfiler.h>
#include <cuda_profiler_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* 32752 bytes: after a pointer and an int, 32764, the most CUDA 12.1+
 * allows for a kernel's parameters. */
#define LM_BIG_WORDS 8188
struct lm_big {
	unsigned v[LM_BIG_WORDS];
};

extern "C" __global__ void lm_coop(unsigned *data, unsigned *out, unsigned *bar, unsigned n)
{
	unsigned tid = blockIdx.x * blockDim.x + threadIdx.x, total = gridDim.x * blockDim.x;

	for (unsigned i = tid; i < n; i += total)
		data[i] = i * 3u + 1u;
	/* Grid barrier: correct only when every block is resident, which a
	 * cooperative launch guarantees. */
	__syncthreads();
	__threadfence();
	if (threadIdx.x == 0) {
		atomicAdd(bar, 1u);
		while (*(volatile unsigned *)bar < gridDim.x)
			;
	}
	__syncthreads();
	for (unsigned i = tid; i < n; i += total)
		out[i] = data[(i + n / 2) % n] + data[i];
}

extern "C" __global__ void lm_cluster(unsigned *out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	unsigned rank, size;

	asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
	asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
	if (threadIdx.x == 0)
		out[blockIdx.x] = size << 16 | rank;
#else
	if (threadIdx.x == 0)
		out[blockIdx.x] = 0xffffffffu;
#endif
}

extern "C" __global__ void lm_big_sum(unsigned long long *out, int k, struct lm_big b)
{
	unsigned long long s = 0;

	if (blockIdx.x || threadIdx.x)
		return;
	for (unsigned i = 0; i < LM_BIG_WORDS; i++)
		s += (unsigned long long)b.v[i] * (i + 1);
	out[0] = s * (unsigned)k;
}

extern "C" __global__ void lm_fill(unsigned *a, unsigned v, unsigned n)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] = v + i;
}

/* Uses all of its dynamic shared memory: each thread writes and reads back
 * its share. */
extern "C" __global__ void lm_smem(unsigned *out, unsigned words)
{
	extern __shared__ unsigned sh[];

	for (unsigned i = threadIdx.x; i < words; i += blockDim.x)
		sh[i] = i * 7u;
	__syncthreads();
	if (threadIdx.x == 0) {
		unsigned s = 0;

		for (unsigned i = 0; i < words; i++)
			s += sh[i];
		out[0] = s;
	}
}

static bool on_sim;

static void test_cooperative(void)
{
	DRV_FN(cuLaunchCooperativeKernel);
	const unsigned n = 1u << 16;
	unsigned *data, *out, *bar, *h;
	int sms = 0, coop = 0;
	CUfunction f;

	CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
	REQUIRE(coop == 1, "the device reports no cooperative launch");
	CHECK(cudaMalloc(&data, n * 4));
	CHECK(cudaMalloc(&out, n * 4));
	CHECK(cudaMalloc(&bar, 4));
	CHECK(cudaMemset(bar, 0, 4));
	CHECK(cudaGetFuncBySymbol(&f, (const void *)lm_coop));
	{
		unsigned nn = n;
		void *args[] = { &data, &out, &bar, &nn };

		CHECK_DRV(p_cuLaunchCooperativeKernel(f, (unsigned)sms, 1, 1, 128, 1, 1, 0, NULL, args));
	}
	h = (unsigned *)malloc(n * 4);
	REQUIRE(h, "out of host memory");
	CHECK(cudaMemcpy(h, out, n * 4, cudaMemcpyDeviceToHost));
	for (unsigned i = 0; i < n; i++)
		REQUIRE(h[i] == ((i + n / 2) % n) * 3u + 1u + i * 3u + 1u, "cooperative result %u is %u", i, h[i]);
	/* Through the runtime too (cudaLaunchCooperativeKernel). */
	CHECK(cudaMemset(bar, 0, 4));
	CHECK(cudaMemset(out, 0, n * 4));
	{
		unsigned nn = n;
		void *args[] = { &data, &out, &bar, &nn };

		CHECK(cudaLaunchCooperativeKernel((const void *)lm_coop, dim3(sms), dim3(128), args, 0, 0));
	}
	CHECK(cudaMemcpy(h, out, n * 4, cudaMemcpyDeviceToHost));
	REQUIRE(h[n - 1] == ((n - 1 + n / 2) % n) * 3u + 1u + (n - 1) * 3u + 1u, "cooperative runtime launch");
	free(h);
	CHECK(cudaFree(data));
	CHECK(cudaFree(out));
	CHECK(cudaFree(bar));
	printf("cooperative launch: ok (%d blocks)\n", sms);
}

static void test_launch_ex(void)
{
	DRV_FN(cuLaunchKernelEx);
	const unsigned blocks = 8;
	unsigned *out, h[blocks];
	int major = 0;
	CUlaunchAttribute attrs[3];
	CUlaunchConfig cfg = {};
	CUfunction f;

	CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
	CHECK(cudaMalloc(&out, sizeof(h)));
	CHECK(cudaMemset(out, 0, sizeof(h)));
	CHECK(cudaGetFuncBySymbol(&f, (const void *)lm_cluster));
	memset(attrs, 0, sizeof(attrs));
	attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
	attrs[0].value.clusterDim.x = 2;
	attrs[0].value.clusterDim.y = 1;
	attrs[0].value.clusterDim.z = 1;
	attrs[1].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
	attrs[1].value.priority = -1;
	attrs[2].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	attrs[2].value.programmaticStreamSerializationAllowed = 1;
	cfg.gridDimX = blocks;
	cfg.gridDimY = cfg.gridDimZ = 1;
	cfg.blockDimX = 64;
	cfg.blockDimY = cfg.blockDimZ = 1;
	cfg.attrs = attrs;
	cfg.numAttrs = major >= 9 ? 3 : 2;      /* clusters need sm_90 */
	{
		void *args[] = { &out };

		CHECK_DRV(p_cuLaunchKernelEx(&cfg, f, args, NULL));
	}
	CHECK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
	if (on_sim) {
		printf("cluster launch: accepted; ranks not checked (the sim runs no clusters)\n");
	} else if (major < 9) {
		printf("cluster launch: skipped (compute capability %d has no clusters)\n", major);
	} else {
		for (unsigned b = 0; b < blocks; b++)
			REQUIRE(h[b] == (2u << 16 | (b % 2)), "block %u: cluster size/rank %#x", b, h[b]);
		printf("cluster launch: ok\n");
	}
	CHECK(cudaFree(out));
}

static unsigned long long big_expect(const struct lm_big *b, int k)
{
	unsigned long long s = 0;

	for (unsigned i = 0; i < LM_BIG_WORDS; i++)
		s += (unsigned long long)b->v[i] * (i + 1);
	return s * (unsigned)k;
}

static void test_big_args(void)
{
	DRV_FN(cuLaunchKernel);
	DRV_FN(cuFuncSetAttribute);
	DRV_FN(cuFuncGetAttribute);
	static struct lm_big b;
	unsigned long long *out, got = 0;
	unsigned *sout, ssum = 0, want = 0;
	int k = 3, v = 0;
	CUfunction f;

	for (unsigned i = 0; i < LM_BIG_WORDS; i++)
		b.v[i] = i * 2654435761u;
	CHECK(cudaMalloc(&out, 8));
	lm_big_sum<<<1, 32>>>(out, k, b);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(&got, out, 8, cudaMemcpyDeviceToHost));
	REQUIRE(got == big_expect(&b, k), "<<<>>> with a 32 KiB argument: %llx", got);
	CHECK(cudaGetFuncBySymbol(&f, (const void *)lm_big_sum));
	k = 5;
	b.v[LM_BIG_WORDS - 1] ^= 0x5a5a5a5a;
	{
		void *args[] = { &out, &k, &b };

		CHECK_DRV(p_cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
	}
	CHECK(cudaMemcpy(&got, out, 8, cudaMemcpyDeviceToHost));
	REQUIRE(got == big_expect(&b, k), "cuLaunchKernel with a 32 KiB argument: %llx", got);
	{
		/* The parameter buffer laid out as the kernel's: out, k, b at 12. */
		static unsigned char buf[32764];
		size_t size = sizeof(buf);
		void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
				  CU_LAUNCH_PARAM_END };

		k = 7;
		memcpy(buf, &out, 8);
		memcpy(buf + 8, &k, 4);
		memcpy(buf + 12, &b, sizeof(b));
		CHECK_DRV(p_cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
	}
	CHECK(cudaMemcpy(&got, out, 8, cudaMemcpyDeviceToHost));
	REQUIRE(got == big_expect(&b, 7), "cuLaunchKernel with a 32 KiB extra buffer: %llx", got);
	CHECK(cudaFree(out));

	/* More dynamic shared memory than the default 48 KiB, once allowed. */
	const unsigned words = 100u << 8;       /* 100 KiB */
	CHECK(cudaGetFuncBySymbol(&f, (const void *)lm_smem));
	CHECK_DRV(p_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, words * 4));
	CHECK_DRV(p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
	REQUIRE(v == (int)(words * 4), "max dynamic shared memory reads %d", v);
	CHECK(cudaMalloc(&sout, 4));
	lm_smem<<<1, 256, words * 4>>>(sout, words);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(&ssum, sout, 4, cudaMemcpyDeviceToHost));
	for (unsigned i = 0; i < words; i++)
		want += i * 7u;
	REQUIRE(ssum == want, "100 KiB of dynamic shared memory: sum %u, expected %u", ssum, want);
	CHECK(cudaFree(sout));
	printf("32 KiB arguments and dynamic shared memory: ok\n");
}

static void test_stream_values(void)
{
	DRV_FN(cuStreamWaitValue32);
	DRV_FN(cuStreamWriteValue32);
	DRV_FN(cuStreamWaitValue64);
	DRV_FN(cuStreamWriteValue64);
	DRV_FN(cuStreamBatchMemOp);
	const unsigned n = 4096;
	unsigned *data, *copy, *h;
	unsigned long long *flags;
	cudaStream_t a, b;

	CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
	CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
	CHECK(cudaMalloc(&data, n * 4));
	CHECK(cudaMalloc(&copy, n * 4));
	CHECK(cudaMalloc(&flags, 4 * 8));
	CHECK(cudaMemset(flags, 0, 4 * 8));
	h = (unsigned *)malloc(n * 4);
	REQUIRE(h, "out of host memory");

	/* a produces, then signals; b waits, then copies. */
	lm_fill<<<n / 256, 256, 0, a>>>(data, 100, n);
	CHECK(cudaGetLastError());
	CHECK_DRV(p_cuStreamWriteValue32((CUstream)a, (CUdeviceptr)&flags[0], 1, CU_STREAM_WRITE_VALUE_DEFAULT));
	CHECK_DRV(p_cuStreamWaitValue32((CUstream)b, (CUdeviceptr)&flags[0], 1, CU_STREAM_WAIT_VALUE_GEQ));
	CHECK(cudaMemcpyAsync(copy, data, n * 4, cudaMemcpyDeviceToDevice, b));
	CHECK(cudaStreamSynchronize(b));
	CHECK(cudaMemcpy(h, copy, n * 4, cudaMemcpyDeviceToHost));
	for (unsigned i = 0; i < n; i++)
		REQUIRE(h[i] == 100 + i, "32-bit wait: element %u is %u", i, h[i]);

	/* 64-bit values, equality, a value above 2^32. */
	lm_fill<<<n / 256, 256, 0, a>>>(data, 200, n);
	CHECK_DRV(p_cuStreamWriteValue64((CUstream)a, (CUdeviceptr)&flags[1], 0x100000002ull, 0));
	CHECK_DRV(p_cuStreamWaitValue64((CUstream)b, (CUdeviceptr)&flags[1], 0x100000002ull, CU_STREAM_WAIT_VALUE_EQ));
	CHECK(cudaMemcpyAsync(copy, data, n * 4, cudaMemcpyDeviceToDevice, b));
	CHECK(cudaStreamSynchronize(b));
	CHECK(cudaMemcpy(h, copy, n * 4, cudaMemcpyDeviceToHost));
	REQUIRE(h[n - 1] == 200 + n - 1, "64-bit wait: last element %u", h[n - 1]);

	/* A batch: write two values on a, wait for both (AND of a bit) on b. */
	{
		CUstreamBatchMemOpParams w[2], r[2];

		memset(w, 0, sizeof(w));
		memset(r, 0, sizeof(r));
		w[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
		w[0].writeValue.address = (CUdeviceptr)&flags[2];
		w[0].writeValue.value = 0x10;
		w[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
		w[1].writeValue.address = (CUdeviceptr)&flags[3];
		w[1].writeValue.value64 = 7;
		r[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
		r[0].waitValue.address = (CUdeviceptr)&flags[2];
		r[0].waitValue.value = 0x30;
		r[0].waitValue.flags = CU_STREAM_WAIT_VALUE_AND;
		r[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
		r[1].waitValue.address = (CUdeviceptr)&flags[3];
		r[1].waitValue.value64 = 7;
		r[1].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
		lm_fill<<<n / 256, 256, 0, a>>>(data, 300, n);
		CHECK_DRV(p_cuStreamBatchMemOp((CUstream)a, 2, w, 0));
		CHECK_DRV(p_cuStreamBatchMemOp((CUstream)b, 2, r, 0));
		CHECK(cudaMemcpyAsync(copy, data, n * 4, cudaMemcpyDeviceToDevice, b));
		CHECK(cudaStreamSynchronize(b));
		CHECK(cudaMemcpy(h, copy, n * 4, cudaMemcpyDeviceToHost));
		REQUIRE(h[7] == 307, "batch wait: element 7 is %u", h[7]);
	}
	/* A misaligned address is refused at the call. */
	EXPECT_DRV(p_cuStreamWriteValue32((CUstream)a, (CUdeviceptr)flags + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);

	/* The wait issued before its write: only a GPU runs the two streams
	 * at once (the sim's one device thread would wait forever). */
	if (on_sim) {
		printf("stream values: ok; a wait queued before its write not run (the sim runs one stream at a time)\n");
	} else {
		CHECK(cudaMemset(flags, 0, 8));
		CHECK_DRV(p_cuStreamWaitValue32((CUstream)b, (CUdeviceptr)&flags[0], 5, CU_STREAM_WAIT_VALUE_GEQ));
		CHECK(cudaMemcpyAsync(copy, data, n * 4, cudaMemcpyDeviceToDevice, b));
		usleep(20000);
		lm_fill<<<n / 256, 256, 0, a>>>(data, 400, n);
		CHECK_DRV(p_cuStreamWriteValue32((CUstream)a, (CUdeviceptr)&flags[0], 5, 0));
		CHECK(cudaStreamSynchronize(b));
		CHECK(cudaMemcpy(h, copy, n * 4, cudaMemcpyDeviceToHost));
		REQUIRE(h[0] == 400, "a wait queued first saw element 0 as %u", h[0]);
		printf("stream values: ok\n");
	}
	/* The usual use: the host releases a waiting stream through mapped
	 * pinned memory. Through tern the host's write reaches a waiting
	 * stream only where the memory is shared (shm, ivshmem); elsewhere
	 * mapped memory is a mirror the host's writes reach at the next launch
	 * (docs/limits.md), and the wait would never end. */
	{
		const char *server = getenv("TERN_SERVER"), *bar = getenv("TERN_IVSHMEM");
		bool shared = !server || !strncmp(server, "shm:", 4) || (bar && strcmp(bar, "off") && strcmp(bar, "0"));
		volatile unsigned *hflag;
		unsigned *dflag;

		CHECK(cudaHostAlloc((void **)&hflag, 4096, cudaHostAllocMapped));
		*hflag = 0;
		CHECK(cudaHostGetDevicePointer((void **)&dflag, (void *)hflag, 0));
		if (!shared) {
			printf("stream values: no wait released by the host (mapped memory is mirrored "
			       "over this transport)\n");
		} else {
			CHECK_DRV(p_cuStreamWaitValue32((CUstream)b, (CUdeviceptr)dflag, 1, CU_STREAM_WAIT_VALUE_EQ));
			lm_fill<<<n / 256, 256, 0, b>>>(copy, 500, n);
			CHECK(cudaGetLastError());
			usleep(20000);
			REQUIRE(cudaStreamQuery(b) == cudaErrorNotReady, "a stream waiting for the host went on");
			*hflag = 1;
			CHECK(cudaStreamSynchronize(b));
			CHECK(cudaMemcpy(h, copy, n * 4, cudaMemcpyDeviceToHost));
			REQUIRE(h[1] == 501, "after the host's release element 1 is %u", h[1]);
			printf("stream values: a wait released by the host: ok\n");
		}
		CHECK(cudaFreeHost((void *)hflag));
	}
	free(h);
	CHECK(cudaStreamSynchronize(a));
	CHECK(cudaFree(data));
	CHECK(cudaFree(copy));
	CHECK(cudaFree(flags));
	CHECK(cudaStreamDestroy(a));
	CHECK(cudaStreamDestroy(b));
}

static std::atomic<int> destroyed[4];

static void CUDA_CB on_destroy(void *p)
{
	destroyed[(intptr_t)p].fetch_add(1);
}

/* Destructors run on a library thread some time after the last release. */
static bool destroyed_within(int which, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (destroyed[which].load())
			return true;
		usleep(1000);
	}
	return destroyed[which].load() != 0;
}

static void test_user_objects(void)
{
	DRV_FN(cuUserObjectCreate);
	DRV_FN(cuUserObjectRetain);
	DRV_FN(cuUserObjectRelease);
	DRV_FN(cuGraphRetainUserObject);
	DRV_FN(cuGraphReleaseUserObject);
	CUuserObject o0, o1, o2, o3;
	cudaGraph_t g, clone, child, parent;
	cudaGraphExec_t x;
	cudaGraphNode_t node, cnode;
	cudaKernelNodeParams p = {};
	unsigned *buf, n = 256, v = 9;
	void *args[] = { &buf, &v, &n };

	CHECK(cudaMalloc(&buf, n * 4));
	/* 0: alone; retain and release balance, the last release destroys. */
	CHECK_DRV(p_cuUserObjectCreate(&o0, (void *)0, on_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	CHECK_DRV(p_cuUserObjectRetain(o0, 2));
	CHECK_DRV(p_cuUserObjectRelease(o0, 2));
	REQUIRE(!destroyed_within(0, 50), "user object 0 destroyed while referenced");
	CHECK_DRV(p_cuUserObjectRelease(o0, 1));
	REQUIRE(destroyed_within(0, 5000), "user object 0 not destroyed after its last release");

	/* 1: moved into a graph, which an executable outlives. */
	CHECK_DRV(p_cuUserObjectCreate(&o1, (void *)1, on_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	CHECK(cudaGraphCreate(&g, 0));
	CHECK_DRV(p_cuGraphRetainUserObject((CUgraph)g, o1, 1, CU_GRAPH_USER_OBJECT_MOVE));
	p.func = (void *)lm_fill;
	p.gridDim = dim3(1);
	p.blockDim = dim3(256);
	p.kernelParams = args;
	CHECK(cudaGraphAddKernelNode(&node, g, NULL, 0, &p));
	CHECK(cudaGraphInstantiate(&x, g, 0));
	CHECK(cudaGraphDestroy(g));
	REQUIRE(!destroyed_within(1, 50), "user object 1 destroyed while an executable holds it");
	CHECK(cudaGraphLaunch(x, 0));
	CHECK(cudaGraphExecDestroy(x));
	REQUIRE(destroyed_within(1, 5000), "user object 1 not destroyed with the last executable");
	{
		unsigned h0 = 0;

		CHECK(cudaMemcpy(&h0, buf, 4, cudaMemcpyDeviceToHost));
		REQUIRE(h0 == 9, "the graph's kernel did not run (%u)", h0);
	}

	/* 2: held by a graph and its clone. */
	CHECK_DRV(p_cuUserObjectCreate(&o2, (void *)2, on_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	CHECK(cudaGraphCreate(&g, 0));
	CHECK_DRV(p_cuGraphRetainUserObject((CUgraph)g, o2, 2, 0));
	CHECK_DRV(p_cuUserObjectRelease(o2, 1));
	CHECK_DRV(p_cuGraphReleaseUserObject((CUgraph)g, o2, 1));
	CHECK(cudaGraphClone(&clone, g));
	CHECK(cudaGraphDestroy(g));
	REQUIRE(!destroyed_within(2, 50), "user object 2 destroyed while a clone holds it");
	CHECK(cudaGraphDestroy(clone));
	REQUIRE(destroyed_within(2, 5000), "user object 2 not destroyed with the clone");

	/* 3: a child graph's reference travels into the child node. */
	CHECK_DRV(p_cuUserObjectCreate(&o3, (void *)3, on_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	CHECK(cudaGraphCreate(&child, 0));
	CHECK_DRV(p_cuGraphRetainUserObject((CUgraph)child, o3, 1, CU_GRAPH_USER_OBJECT_MOVE));
	CHECK(cudaGraphAddKernelNode(&node, child, NULL, 0, &p));
	CHECK(cudaGraphCreate(&parent, 0));
	CHECK(cudaGraphAddChildGraphNode(&cnode, parent, NULL, 0, child));
	CHECK(cudaGraphDestroy(child));
	REQUIRE(!destroyed_within(3, 50), "user object 3 destroyed while a child node holds it");
	CHECK(cudaGraphDestroyNode(cnode));
	REQUIRE(destroyed_within(3, 5000), "user object 3 not destroyed with its child node");
	CHECK(cudaGraphDestroy(parent));
	CHECK(cudaFree(buf));
	printf("user objects: ok\n");
}

/* Bank size configuration is deprecated, yet cudart still resolves its
 * entry points (driver-api-cuda13.txt): they are tested as they are. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void test_settings(void)
{
	DRV_FN(cuCtxSetLimit);
	DRV_FN(cuCtxGetLimit);
	DRV_FN(cuCtxSetCacheConfig);
	DRV_FN(cuCtxGetCacheConfig);
	DRV_FN(cuCtxSetSharedMemConfig);
	DRV_FN(cuCtxGetSharedMemConfig);
	DRV_FN(cuCtxResetPersistingL2Cache);
	DRV_FN(cuCtxGetFlags);
	DRV_FN(cuCtxSetFlags);
	DRV_FN(cuFuncSetCacheConfig);
	DRV_FN(cuFuncSetSharedMemConfig);
	DRV_FN(cuKernelSetCacheConfig);
	DRV_FN(cuStreamSetAttribute);
	DRV_FN(cuStreamGetAttribute);
	DRV_FN(cuProfilerStart);
	DRV_FN(cuProfilerStop);
	size_t v = 0;
	CUfunc_cache cc;
	CUsharedconfig sc;
	unsigned flags = 0;
	CUfunction f;
	cudaKernel_t k;
	cudaStream_t s;
	CUstreamAttrValue a, r;
	void *win;

	CHECK(cudaFree(0));
	CHECK_DRV(p_cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
	CHECK_DRV(p_cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
	REQUIRE(v >= 4096, "stack size limit reads %zu", v);
	CHECK_DRV(p_cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 2u << 20));
	CHECK_DRV(p_cuCtxGetLimit(&v, CU_LIMIT_PRINTF_FIFO_SIZE));
	REQUIRE(v >= (2u << 20), "printf FIFO limit reads %zu", v);
	{
		/* The driver documents both for a limit it does not have. */
		CUresult e = p_cuCtxSetLimit((CUlimit)0x7777, 1);

		REQUIRE(e == CUDA_ERROR_INVALID_VALUE || e == CUDA_ERROR_UNSUPPORTED_LIMIT,
			"an unknown limit gave %d", (int)e);
	}
	CHECK_DRV(p_cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1));
	CHECK_DRV(p_cuCtxGetCacheConfig(&cc));
	REQUIRE(cc == CU_FUNC_CACHE_PREFER_L1, "cache config reads %d", (int)cc);
	CHECK_DRV(p_cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_NONE));
	/* Bank sizes are fixed on recent GPUs: the call succeeds, the value is the device's. */
	CHECK_DRV(p_cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE));
	CHECK_DRV(p_cuCtxGetSharedMemConfig(&sc));
	REQUIRE((unsigned)sc <= CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE, "shared memory config %d", (int)sc);
	CHECK_DRV(p_cuCtxResetPersistingL2Cache());
	CHECK_DRV(p_cuCtxGetFlags(&flags));
	CHECK_DRV(p_cuCtxSetFlags((flags & ~CU_CTX_SCHED_MASK) | CU_CTX_SCHED_YIELD));
	CHECK_DRV(p_cuCtxGetFlags(&flags));
	REQUIRE((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_YIELD, "context flags read %#x", flags);
	CHECK(cudaGetFuncBySymbol(&f, (const void *)lm_fill));
	CHECK_DRV(p_cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED));
	CHECK_DRV(p_cuFuncSetSharedMemConfig(f, CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE));
	CHECK(cudaGetKernel(&k, (const void *)lm_fill));
	CHECK_DRV(p_cuKernelSetCacheConfig((CUkernel)k, CU_FUNC_CACHE_PREFER_EQUAL, 0));

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaMalloc(&win, 1u << 20));
	memset(&a, 0, sizeof(a));
	a.syncPolicy = CU_SYNC_POLICY_YIELD;
	CHECK_DRV(p_cuStreamSetAttribute((CUstream)s, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &a));
	CHECK_DRV(p_cuStreamGetAttribute((CUstream)s, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &r));
	REQUIRE(r.syncPolicy == CU_SYNC_POLICY_YIELD, "stream sync policy reads %d", (int)r.syncPolicy);
	memset(&a, 0, sizeof(a));
	a.accessPolicyWindow.base_ptr = win;
	a.accessPolicyWindow.num_bytes = 1u << 20;
	a.accessPolicyWindow.hitRatio = 0.5f;
	a.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
	a.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
	CHECK_DRV(p_cuStreamSetAttribute((CUstream)s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &a));
	CHECK_DRV(p_cuStreamGetAttribute((CUstream)s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &r));
	REQUIRE(r.accessPolicyWindow.base_ptr == win && r.accessPolicyWindow.num_bytes == (1u << 20) &&
		r.accessPolicyWindow.hitProp == CU_ACCESS_PROPERTY_PERSISTING,
		"access policy window reads %p+%zu", r.accessPolicyWindow.base_ptr, r.accessPolicyWindow.num_bytes);
	memset(&a, 0, sizeof(a));
	a.priority = -1;
	CHECK_DRV(p_cuStreamSetAttribute((CUstream)s, CU_STREAM_ATTRIBUTE_PRIORITY, &a));
	CHECK_DRV(p_cuStreamGetAttribute((CUstream)s, CU_STREAM_ATTRIBUTE_PRIORITY, &r));
	REQUIRE(r.priority == -1, "stream priority attribute reads %d", r.priority);
	EXPECT_DRV(p_cuStreamSetAttribute((CUstream)s, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &a), CUDA_ERROR_INVALID_VALUE);
	{
		DRV_FN(cuStreamCopyAttributes);
		cudaStream_t s2;

		CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
		CHECK_DRV(p_cuStreamCopyAttributes((CUstream)s2, (CUstream)s));
		CHECK_DRV(p_cuStreamGetAttribute((CUstream)s2, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &r));
		REQUIRE(r.syncPolicy == CU_SYNC_POLICY_YIELD, "copied sync policy reads %d", (int)r.syncPolicy);
		CHECK_DRV(p_cuStreamGetAttribute((CUstream)s2, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &r));
		REQUIRE(r.accessPolicyWindow.base_ptr == win, "copied access policy window");
		CHECK(cudaStreamDestroy(s2));
	}
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(win));

	CHECK_DRV(p_cuProfilerStart());
	CHECK_DRV(p_cuProfilerStop());
	CHECK(cudaProfilerStart());
	CHECK(cudaProfilerStop());
	printf("limits, configurations, flags, stream attributes, profiler: ok\n");
}
#pragma GCC diagnostic pop

typedef CUresult (*err_fn)(CUresult, const char **);

static void test_error_strings(void)
{
	err_fn name_of = (err_fn)drv_sym("cuGetErrorName");
	err_fn text_of = (err_fn)drv_sym("cuGetErrorString");
	err_fn real_name = NULL, real_text = NULL;
	const char *real = getenv("TERN_TEST_REAL_DRIVER");
	unsigned count = sizeof(test_curesults) / sizeof(test_curesults[0]), differ = 0;
	const char *s;

	if (real && *real) {
		/* By path: a second copy of libcuda beside the one under test. */
		void *lib = dlopen(real, RTLD_NOW | RTLD_LOCAL);

		REQUIRE(lib, "cannot load %s: %s", real, dlerror());
		real_name = (err_fn)dlsym(lib, "cuGetErrorName");
		real_text = (err_fn)dlsym(lib, "cuGetErrorString");
		REQUIRE(real_name && real_text, "%s has no cuGetErrorName/String", real);
	}
	for (unsigned i = 0; i < count; i++) {
		CUresult c = (CUresult)test_curesults[i].code;
		const char *want;

		CHECK_DRV(name_of(c, &s));
		REQUIRE(s && !strcmp(s, test_curesults[i].name), "cuGetErrorName(%d) is %s, cuda.h says %s",
			(int)c, s ? s : "NULL", test_curesults[i].name);
		CHECK_DRV(text_of(c, &s));
		REQUIRE(s && *s, "cuGetErrorString(%d) is empty", (int)c);
		if (real_text) {
			REQUIRE(real_text(c, &want) == CUDA_SUCCESS && want, "the real driver has no text for %d", (int)c);
			if (strcmp(s, want)) {
				fprintf(stderr, "cuGetErrorString(%s): \"%s\", the driver says \"%s\"\n",
					test_curesults[i].name, s, want);
				differ++;
			}
			REQUIRE(real_name(c, &want) == CUDA_SUCCESS && !strcmp(want, test_curesults[i].name),
				"the real driver names %d differently", (int)c);
		}
	}
	REQUIRE(!differ, "%u of %u error strings differ from the driver's", differ, count);
	EXPECT_DRV(name_of((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	EXPECT_DRV(text_of((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	printf("error names and strings: ok (%u codes%s)\n", count,
	       real_text ? ", strings compared with the real driver" : "; strings not compared: TERN_TEST_REAL_DRIVER unset");
}

/* The driver's texts, one `code<TAB>text` line each: run natively, this
 * writes guest-shim/driver-error-strings.txt (docs/testing.md). */
static void error_strings_dump(void)
{
	err_fn text_of = (err_fn)drv_sym("cuGetErrorString");

	printf("# cuGetErrorString of the driver launch_misc ran against, by code\n");
	for (unsigned i = 0; i < sizeof(test_curesults) / sizeof(test_curesults[0]); i++) {
		const char *s = NULL;

		CHECK_DRV(text_of((CUresult)test_curesults[i].code, &s));
		REQUIRE(s && !strchr(s, '\n') && !strchr(s, '\t'), "text of %d cannot be written", test_curesults[i].code);
		printf("%d\t%s\n", test_curesults[i].code, s);
	}
}

int main(int argc, char **argv)
{
	cudaDeviceProp prop;

	if (argc > 1 && !strcmp(argv[1], "--dump-error-strings")) {
		error_strings_dump();
		return 0;
	}

	CHECK(cudaGetDeviceProperties(&prop, 0));
	on_sim = !strncmp(prop.name, "tern sim device", 15);
	test_settings();
	test_cooperative();
	test_launch_ex();
	test_big_args();
	test_stream_values();
	test_user_objects();
	CHECK(cudaDeviceSynchronize());
	/* Last: until tern's texts are measured on a driver, this is the part
	 * that differs (docs/testing.md), and it should not hide the others. */
	test_error_strings();
	printf("PASS launch_misc\n");
	return 0;
}
