/* ckpt_loop: a long loop of kernels whose result depends on every step, for
 * the checkpoint tests. It prints "CHECKSUM <hex>" of its data at the end:
 * a run that was snapshotted, killed and restored must print the same as an
 * uninterrupted one.
 *
 *   ckpt_loop ITERATIONS [MARK_AT MARK_FILE [STEP_MS [SYNC_AT SYNC_MS]]]
 *
 * TERN_TEST_EXTRA_MB=N adds N MiB of pseudo-random data that never changes
 * (a large snapshot, mostly unchanged in incremental ones).
 *
 * TERN_TEST_GRAPH=1 runs the same steps through CUDA graphs made before the
 * loop: the main step is a captured graph, the every-eighth step a graph
 * built node by node; each launch gets its step number with
 * cudaGraphExecKernelNodeSetParams. The checksum is the same as without.
 * The node-by-node graph also holds a memset node that would wipe the half,
 * disabled in its executable, and a kernel node attribute: a restore must
 * keep the node disabled. Every fourth step also runs a few rounds over the
 * start of the data: in graph mode a graph whose while node runs its body
 * until the body's kernel (cudaGraphSetConditional) ends it, the round count
 * set by a kernel node re-parametrised each launch; otherwise the same
 * kernels launched one by one. A restore must rebuild the conditional node
 * with its handle, whose value kernel arguments hold (docs/limits.md).
 *
 * TERN_TEST_TWO_DEVICES=1 also keeps a buffer on device 1 (filled from
 * device 0's data by a peer copy) that a stream of device 1 mixes every
 * fourth step; it is folded into the checksum at the end. A restore must
 * bring back both devices' memory, contexts and streams.
 *
 * At iteration MARK_AT it writes MARK_FILE (the test then snapshots, kills,
 * restores ...) and goes on, sleeping STEP_MS between iterations so that the
 * test has time to act while it keeps calling. At SYNC_AT it launches a kernel
 * that runs SYNC_MS and waits for it in cudaDeviceSynchronize, after writing
 * MARK_FILE.sync: the test restores while the app waits on that call.
 *
 * Every iteration also reads a slice of its data back into pinned memory
 * with an async copy (over tern's shm transport: a buffer the worker maps),
 * and folds it into the checksum. Two buffers come from memory pools (a pool
 * of its own and the default one, stream-ordered): after a restore they must
 * hold their data, still count in their pools and free as usual. A third
 * buffer is VMM memory (cuMemAddressReserve, two cuMemCreate chunks mapped
 * back to back, the second's handle released at once so only its mapping
 * holds it): its contents, mappings and handles must survive a restore.
 *
 * Settings made once before the loop must hold after a restore: ck_mix is
 * allowed 64 KiB of dynamic shared memory (and launched with it), the stream
 * has a synchronisation policy, the context a stack size limit. A
 * __device__ counter (ck_counter) is folded with every step by a kernel that
 * names it as a symbol; its value must survive too. A 2D array
 * (outside the arena) takes rows of the state every 16 steps and is folded
 * into the checksum at the end, with a texture object on it.
 *
 * A managed allocation takes turns with the host: every iteration a kernel
 * mixes it, the host reads one word of it (folded into the checksum) and
 * writes another, which the next launch must see. After a restore it must
 * hold the snapshot's contents plus the replayed host writes, and the host
 * must read the restored device copy.
 *
 * A __managed__ array (ck_mvar, a module global in the driver's managed
 * memory, mirrored by tern's shim at the driver's address) takes turns the
 * same way: every iteration a kernel that names it as a symbol mixes one
 * word, the host reads another (folded into the checksum) and then writes a
 * third, after which MARK_AT may fire: a snapshot then finds a host write
 * that has not reached the device yet. At the end its words must equal a
 * host model and are folded into the checksum. */
#include "check.h"
#include "ckpt_extra.h"

#include <stdint.h>
#include <time.h>
#include <unistd.h>

extern "C" __global__ void ck_mix(unsigned *x, unsigned n, unsigned step)
{
	for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x)
		x[j] = x[j] * 1664525u + 1013904223u + (step ^ j);
}

extern "C" __global__ void ck_wait(unsigned ms)
{
	uint64_t start, now;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
	do {
		__nanosleep(100000);
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
	} while (now - start < (uint64_t)ms * 1000000ull);
}

/* The conditional rounds (graph mode: a while node's body): one block
 * mixes the first CK_COND_WORDS words, then the round count goes down. */
#define CK_COND_WORDS 4096u

extern "C" __global__ void ck_cinit(unsigned *rounds, unsigned step)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		*rounds = step % 5 + 1;
}

__device__ void ck_cround(unsigned *x, unsigned *rounds)
{
	unsigned r = *rounds;

	for (unsigned j = threadIdx.x; j < CK_COND_WORDS; j += blockDim.x)
		x[j] = x[j] * 2654435761u + r + j;
	__syncthreads();
	if (threadIdx.x == 0)
		*rounds = r - 1;
}

extern "C" __global__ void ck_cplain(unsigned *x, unsigned *rounds)
{
	ck_cround(x, rounds);
}

extern "C" __global__ void ck_cbody(cudaGraphConditionalHandle h, unsigned *x, unsigned *rounds)
{
	ck_cround(x, rounds);
	if (threadIdx.x == 0)
		cudaGraphSetConditional(h, *rounds > 0);
}

/* A __device__ counter folded with every step: module globals live outside
 * the arena, and a restore must bring back their contents. */
__device__ unsigned long long ck_counter;

extern "C" __global__ void ck_count(unsigned step)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		ck_counter = ck_counter * 31 + step + 1;
}

extern "C" __global__ void ck_count_read(unsigned long long *out)
{
	out[0] = ck_counter;
}

/* Taken in turns by the device (ck_mstep) and the host every iteration. */
#define CK_MVAR_WORDS 64u
__managed__ unsigned long long ck_mvar[CK_MVAR_WORDS];

static inline __host__ __device__ void ck_mvar_step(unsigned long long *v, unsigned step)
{
	unsigned a = step % CK_MVAR_WORDS, b = (step * 7u + 3u) % CK_MVAR_WORDS;

	v[a] = v[a] * 1099511628211ull + v[b] + step;
}

extern "C" __global__ void ck_mstep(unsigned step)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		ck_mvar_step(ck_mvar, step);
}

/* A linked list inside device memory: device pointers stored in device
 * memory must still be right after a restore into a new process. */
struct ck_node {
	struct ck_node *next;
	unsigned long long value;
};

extern "C" __global__ void ck_extra_fill(unsigned *c, unsigned long long words)
{
	for (unsigned long long j = blockIdx.x * blockDim.x + threadIdx.x; j < words;
	     j += (unsigned long long)gridDim.x * blockDim.x)
		c[j] = ck_extra_word(j);
}

/* out[0] += every word's term, out[1] += the words that are not what
 * ck_extra_fill wrote. */
extern "C" __global__ void ck_extra_sum(const unsigned *c, unsigned long long words, unsigned long long *out)
{
	unsigned long long sum = 0, wrong = 0;

	for (unsigned long long j = blockIdx.x * blockDim.x + threadIdx.x; j < words;
	     j += (unsigned long long)gridDim.x * blockDim.x) {
		sum += ck_extra_term(c[j], j);
		wrong += c[j] != ck_extra_word(j);
	}
	atomicAdd(&out[0], sum);
	atomicAdd(&out[1], wrong);
}

extern "C" __global__ void ck_list_build(struct ck_node *nodes, unsigned count)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
		unsigned next = (unsigned)((i * 7919ull + 1) % count);  /* a permutation: count is prime */

		nodes[i].next = next ? &nodes[next] : NULL;
		nodes[i].value = i * 2654435761ull;
	}
}

extern "C" __global__ void ck_list_walk(const struct ck_node *head, unsigned long long *out)
{
	unsigned long long sum = 0, n = 0;

	for (const struct ck_node *p = head; p; p = p->next, n++)
		sum = sum * 31 + p->value;
	out[0] = sum;
	out[1] = n;
}

/* Two chunks of one granule mapped back to back in a reservation of three. */
struct ck_vmm {
	CUdeviceptr va;
	size_t gran;
	CUmemGenericAllocationHandle h0;
};

static void vmm_setup(struct ck_vmm *v)
{
	DRV_FN(cuMemGetAllocationGranularity);
	DRV_FN(cuMemAddressReserve);
	DRV_FN(cuMemCreate);
	DRV_FN(cuMemMap);
	DRV_FN(cuMemRelease);
	DRV_FN(cuMemSetAccess);
	CUmemAllocationProp prop = {};
	CUmemAccessDesc acc = {};
	CUmemGenericAllocationHandle h1;

	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	CHECK_DRV(p_cuMemGetAllocationGranularity(&v->gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK_DRV(p_cuMemAddressReserve(&v->va, 3 * v->gran, 0, 0, 0));
	CHECK_DRV(p_cuMemCreate(&v->h0, v->gran, &prop, 0));
	CHECK_DRV(p_cuMemCreate(&h1, v->gran, &prop, 0));
	CHECK_DRV(p_cuMemMap(v->va, v->gran, 0, v->h0, 0));
	CHECK_DRV(p_cuMemMap(v->va + v->gran, v->gran, 0, h1, 0));
	CHECK_DRV(p_cuMemRelease(h1));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CHECK_DRV(p_cuMemSetAccess(v->va, 2 * v->gran, &acc, 1));
}

static void vmm_teardown(struct ck_vmm *v)
{
	DRV_FN(cuMemRetainAllocationHandle);
	DRV_FN(cuMemRelease);
	DRV_FN(cuMemUnmap);
	DRV_FN(cuMemAddressFree);
	CUmemGenericAllocationHandle h;

	/* The same virtual handle as before any restore. */
	CHECK_DRV(p_cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(v->va + 64)));
	REQUIRE(h == v->h0, "retained handle %llx, created %llx", (unsigned long long)h,
		(unsigned long long)v->h0);
	CHECK_DRV(p_cuMemRelease(h));
	CHECK_DRV(p_cuMemUnmap(v->va, 2 * v->gran));
	CHECK_DRV(p_cuMemRelease(v->h0));
	CHECK_DRV(p_cuMemAddressFree(v->va, 3 * v->gran));
}

static void mark(const char *path)
{
	FILE *f = fopen(path, "w");

	REQUIRE(f, "cannot write %s", path);
	fputs("ready\n", f);
	fclose(f);
}

/* Host-function mode (TERN_TEST_HOSTFN=1): one stream callback per step,
 * so the shim's host-function thread is alive through every checkpoint;
 * each must run exactly once, in step order, restores and replays
 * notwithstanding. */
struct ck_host {
	unsigned runs;
	unsigned out_of_order;
};

static void CUDART_CB ck_host_step(void *arg)
{
	struct ck_host *hs = (struct ck_host *)arg;

	hs->runs++;
}

int main(int argc, char **argv)
{
	unsigned iterations = argc > 1 ? (unsigned)atoi(argv[1]) : 300;
	unsigned mark_at = argc > 3 ? (unsigned)atoi(argv[2]) : ~0u;
	const char *mark_file = argc > 3 ? argv[3] : NULL;
	unsigned step_ms = argc > 4 ? (unsigned)atoi(argv[4]) : 0;
	unsigned sync_at = argc > 6 ? (unsigned)atoi(argv[5]) : ~0u;
	unsigned sync_ms = argc > 6 ? (unsigned)atoi(argv[6]) : 0;
	/* 24 MiB of state, several snapshot chunks, plus a buffer left half zero. */
	const unsigned n = 6u << 20, half = 2u << 20;
	unsigned *d, *z, *h, *c = NULL, *pin;
	cudaMemPool_t pool;
	cudaMemPoolProps props = {};
	cuuint64_t used = 0;
	const unsigned pin_words = 4096;
	size_t extra = getenv("TERN_TEST_EXTRA_MB") ? (size_t)atoi(getenv("TERN_TEST_EXTRA_MB")) << 20 : 8u << 20;
	cudaStream_t s;
	uint64_t sum = 1469598103934665603ull;
	struct ck_vmm vmm;
	const unsigned mw = 1u << 16;
	unsigned *m;

	h = (unsigned *)malloc(n * sizeof(unsigned));
	REQUIRE(h, "out of host memory");
	for (unsigned j = 0; j < n; j++)
		h[j] = j * 2654435761u;
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaMallocHost(&pin, pin_words * sizeof(unsigned)));
	CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 0;
	CHECK(cudaMemPoolCreate(&pool, &props));
	CHECK(cudaMallocFromPoolAsync(&z, 2 * half * sizeof(unsigned), pool, s));
	CHECK(cudaStreamSynchronize(s));        /* the legacy stream's memset comes next */
	CHECK(cudaMemset(z, 0, 2 * half * sizeof(unsigned)));
	CHECK(cudaMemcpy(d, h, n * sizeof(unsigned), cudaMemcpyHostToDevice));
	vmm_setup(&vmm);
	const unsigned vmm_words = (unsigned)(2 * vmm.gran / sizeof(unsigned));
	unsigned *vd = (unsigned *)(uintptr_t)vmm.va;

	CHECK(cudaMemcpy(vd, h, 2 * vmm.gran, cudaMemcpyHostToDevice));
	CHECK(cudaMallocManaged(&m, mw * sizeof(unsigned)));
	for (unsigned j = 0; j < mw; j++)
		m[j] = j * 40503u;
	const unsigned list_len = 65521;
	struct ck_node *list;
	unsigned long long *walk, walked[2];

	CHECK(cudaMalloc(&list, list_len * sizeof(*list)));
	CHECK(cudaMallocAsync(&walk, sizeof(walked), s));
	CHECK(cudaStreamSynchronize(s));
	ck_list_build<<<64, 256>>>(list, list_len);
	CHECK(cudaGetLastError());
	if (extra) {
		CHECK(cudaMalloc(&c, extra));
		ck_extra_fill<<<1024, 256>>>(c, extra / sizeof(unsigned));
		CHECK(cudaGetLastError());
	}
	/* An array (outside the arena: its contents travel in the journal) that
	 * some steps copy into, and a texture object on it. */
	const unsigned aw = 97, ah = 31;
	cudaChannelFormatDesc afd = cudaCreateChannelDesc<unsigned>();
	cudaArray_t arr;
	cudaTextureObject_t tex;
	cudaResourceDesc ard = {};
	cudaTextureDesc atd = {};

	CHECK(cudaMallocArray(&arr, &afd, aw, ah));
	CHECK(cudaMemcpy2DToArray(arr, 0, 0, h, aw * sizeof(unsigned), aw * sizeof(unsigned), ah,
				  cudaMemcpyHostToDevice));
	ard.resType = cudaResourceTypeArray;
	ard.res.array.array = arr;
	atd.filterMode = cudaFilterModePoint;
	atd.readMode = cudaReadModeElementType;
	CHECK(cudaCreateTextureObject(&tex, &ard, &atd, NULL));
	/* Graph mode: one captured graph, one built node by node. */
	bool graphs = getenv("TERN_TEST_GRAPH") && atoi(getenv("TERN_TEST_GRAPH"));
	bool hostfn = getenv("TERN_TEST_HOSTFN") && atoi(getenv("TERN_TEST_HOSTFN"));
	struct ck_host host = { 0, 0 };
	cudaGraph_t g_main = NULL, g_half = NULL, g_cond = NULL;
	cudaGraphExec_t x_main = NULL, x_half = NULL, x_cond = NULL;
	cudaGraphNode_t n_main = NULL, n_half = NULL, n_cinit = NULL;
	unsigned *rounds_d;
	/* Settings a restore must make again (docs/journal.md, "Settings"),
	 * made before the graphs: the node-by-node one launches ck_mix with
	 * the 64 KiB, so a restore must set them before it rebuilds graphs. */
	const unsigned mix_smem = 64u << 10;
	size_t stack0 = 0, stack1 = 0;
	cudaLaunchAttributeValue policy = {}, policy_back = {};
	unsigned long long counter = 0, counter_want = 0, *counter_d;
	unsigned long long mvar_want[CK_MVAR_WORDS];

	for (unsigned j = 0; j < CK_MVAR_WORDS; j++)
		ck_mvar[j] = mvar_want[j] = j * 0x9e3779b97f4a7c15ull;

	CHECK(cudaFuncSetAttribute(ck_mix, cudaFuncAttributeMaxDynamicSharedMemorySize, mix_smem));
	CHECK(cudaMalloc(&rounds_d, sizeof(unsigned)));
	if (graphs) {
		/* The rounds: init node, then a while node (its handle 1 at each
		 * launch) whose body's kernel counts the rounds down. */
		cudaGraphConditionalHandle h;
		cudaGraphNodeParams cp = {};
		cudaKernelNodeParams kp = {};
		cudaGraph_t body;
		cudaGraphNode_t loop;
		unsigned step0 = 0;
		void *init_args[] = { &rounds_d, &step0 };
		void *body_args[] = { &h, &d, &rounds_d };

		CHECK(cudaGraphCreate(&g_cond, 0));
		CHECK(cudaGraphConditionalHandleCreate(&h, g_cond, 1, cudaGraphCondAssignDefault));
		kp.func = (void *)ck_cinit;
		kp.gridDim = dim3(1);
		kp.blockDim = dim3(1);
		kp.kernelParams = init_args;
		CHECK(cudaGraphAddKernelNode(&n_cinit, g_cond, NULL, 0, &kp));
		cp.type = cudaGraphNodeTypeConditional;
		cp.conditional.handle = h;
		cp.conditional.type = cudaGraphCondTypeWhile;
		cp.conditional.size = 1;
		CHECK(cudaGraphAddNode(&loop, g_cond, &n_cinit, NULL, 1, &cp));
		body = cp.conditional.phGraph_out[0];
		kp.func = (void *)ck_cbody;
		kp.blockDim = dim3(256);
		kp.kernelParams = body_args;
		CHECK(cudaGraphAddKernelNode(&loop, body, NULL, 0, &kp));
		CHECK(cudaGraphInstantiate(&x_cond, g_cond, 0));
	}
	if (graphs) {
		size_t count = 1;
		unsigned step0 = 0;
		void *args[] = { &z, (void *)&half, &step0 };
		cudaKernelNodeParams p = {};

		CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
		ck_mix<<<256, 256, 0, s>>>(d, n, 0);
		CHECK(cudaGetLastError());
		CHECK(cudaStreamEndCapture(s, &g_main));
		CHECK(cudaGraphGetNodes(g_main, &n_main, &count));
		REQUIRE(count == 1, "the captured step has %zu nodes", count);
		CHECK(cudaGraphInstantiate(&x_main, g_main, 0));
		p.func = (void *)ck_mix;
		p.gridDim = dim3(64);
		p.blockDim = dim3(256);
		p.sharedMemBytes = mix_smem;
		p.kernelParams = args;
		CHECK(cudaGraphCreate(&g_half, 0));
		CHECK(cudaGraphAddKernelNode(&n_half, g_half, NULL, 0, &p));
		/* A node that would wipe the half, disabled in the executable, and
		 * an attribute of no effect on the result: a restore must bring
		 * both back (the checksum shows a wipe). */
		{
			cudaGraphNodeParams wp = {};
			cudaGraphNode_t wipe;
			cudaKernelNodeAttrValue prio = {};
			unsigned enabled = 1;

			wp.type = cudaGraphNodeTypeMemset;
			wp.memset.dst = z;
			wp.memset.elementSize = 4;
			wp.memset.width = half;
			wp.memset.height = 1;
			CHECK(cudaGraphAddNode(&wipe, g_half, &n_half, NULL, 1, &wp));
			prio.priority = -1;
			CHECK(cudaGraphKernelNodeSetAttribute(n_half, cudaLaunchAttributePriority, &prio));
			CHECK(cudaGraphInstantiate(&x_half, g_half, 0));
			CHECK(cudaGraphNodeSetEnabled(x_half, wipe, 0));
			CHECK(cudaGraphNodeGetEnabled(x_half, wipe, &enabled));
			REQUIRE(enabled == 0, "the wipe node is still enabled");
		}
	}
	CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 8192));
	CHECK(cudaDeviceGetLimit(&stack0, cudaLimitStackSize));
	policy.syncPolicy = cudaSyncPolicyYield;
	CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &policy));
	CHECK(cudaMalloc(&counter_d, sizeof(counter)));
	/* A second device's buffer and stream (TERN_TEST_TWO_DEVICES). */
	bool two = getenv("TERN_TEST_TWO_DEVICES") && atoi(getenv("TERN_TEST_TWO_DEVICES"));
	const unsigned n1 = 1u << 16;
	unsigned *d1 = NULL;
	cudaStream_t s1 = NULL;

	if (two) {
		CHECK(cudaSetDevice(1));
		CHECK(cudaMalloc(&d1, n1 * sizeof(unsigned)));
		CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
		CHECK(cudaMemcpyPeer(d1, 1, d, 0, n1 * sizeof(unsigned)));
		CHECK(cudaSetDevice(0));
	}
	printf("ckpt_loop: %u iterations%s%s\n", iterations, graphs ? " (graphs)" : "",
	       two ? " (two devices)" : "");
	fflush(stdout);
	for (unsigned i = 0; i < iterations; i++) {
		if (graphs) {
			unsigned *x = d, len = n;
			void *args[] = { &x, &len, &i };
			cudaKernelNodeParams p = {};

			p.func = (void *)ck_mix;
			p.gridDim = dim3(256);
			p.blockDim = dim3(256);
			p.kernelParams = args;
			CHECK(cudaGraphExecKernelNodeSetParams(x_main, n_main, &p));
			CHECK(cudaGraphLaunch(x_main, s));
			if (i % 8 == 7) {
				x = z;
				len = half;
				p.gridDim = dim3(64);
				p.sharedMemBytes = mix_smem;
				CHECK(cudaGraphExecKernelNodeSetParams(x_half, n_half, &p));
				CHECK(cudaGraphLaunch(x_half, s));
			}
		} else {
			/* Needs the attribute set before the loop. */
			ck_mix<<<256, 256, mix_smem, s>>>(d, n, i);
			CHECK(cudaGetLastError());
			if (i % 8 == 7)
				ck_mix<<<64, 256, 0, s>>>(z, half, i);  /* only the first half changes */
		}
		if (i % 4 == 1 && graphs) {     /* the rounds */
			void *args[] = { &rounds_d, &i };
			cudaKernelNodeParams p = {};

			p.func = (void *)ck_cinit;
			p.gridDim = dim3(1);
			p.blockDim = dim3(1);
			p.kernelParams = args;
			CHECK(cudaGraphExecKernelNodeSetParams(x_cond, n_cinit, &p));
			CHECK(cudaGraphLaunch(x_cond, s));
		} else if (i % 4 == 1) {
			ck_cinit<<<1, 1, 0, s>>>(rounds_d, i);
			for (unsigned r = 0; r < i % 5 + 1; r++)
				ck_cplain<<<1, 256, 0, s>>>(d, rounds_d);
			CHECK(cudaGetLastError());
		}
		if (i % 4 == 3) {       /* across the two VMM chunks */
			ck_mix<<<64, 256, 0, s>>>(vd, vmm_words, i);
			CHECK(cudaGetLastError());
		}
		ck_count<<<1, 1, 0, s>>>(i);
		CHECK(cudaGetLastError());
		if (hostfn) {
			if (host.runs != i)
				host.out_of_order++;
			CHECK(cudaLaunchHostFunc(s, ck_host_step, &host));
		}
		counter_want = counter_want * 31 + i + 1;
		if (two && i % 4 == 1) {
			CHECK(cudaSetDevice(1));
			ck_mix<<<16, 256, 0, s1>>>(d1, n1, i);
			CHECK(cudaGetLastError());
			CHECK(cudaStreamSynchronize(s1));
			CHECK(cudaSetDevice(0));
		}
		if (i % 16 == 5)
			CHECK(cudaMemcpy2DToArrayAsync(arr, 0, (i / 16) % ah, d + (i * 131u) % (n - aw),
						       aw * sizeof(unsigned), aw * sizeof(unsigned), 1,
						       cudaMemcpyDeviceToDevice, s));
		ck_mix<<<16, 256, 0, s>>>(m, mw, i);
		CHECK(cudaGetLastError());
		ck_mstep<<<1, 1, 0, s>>>(i);
		CHECK(cudaGetLastError());
		ck_mvar_step(mvar_want, i);
		CHECK(cudaMemcpyAsync(pin, d + (i * 7919u) % (n - pin_words), pin_words * sizeof(unsigned),
				      cudaMemcpyDeviceToHost, s));
		CHECK(cudaStreamSynchronize(s));
		for (unsigned j = 0; j < pin_words; j += 64)
			sum = (sum ^ pin[j]) * 1099511628211ull;
		sum = (sum ^ m[(i * 17u) % mw]) * 1099511628211ull;
		m[(i * 131u) % mw] ^= i * 2654435761u;
		sum = (sum ^ ck_mvar[(i * 5u + 1u) % CK_MVAR_WORDS]) * 1099511628211ull;
		ck_mvar[(i * 11u + 2u) % CK_MVAR_WORDS] ^= i * 0xff51afd7ed558ccdull;
		mvar_want[(i * 11u + 2u) % CK_MVAR_WORDS] ^= i * 0xff51afd7ed558ccdull;
		if (i == mark_at && mark_file)
			mark(mark_file);
		if (i == sync_at && mark_file) {
			char path[4096];

			ck_wait<<<1, 1, 0, s>>>(sync_ms);
			CHECK(cudaGetLastError());
			snprintf(path, sizeof(path), "%s.sync", mark_file);
			mark(path);
			CHECK(cudaDeviceSynchronize());
		}
		if (step_ms)
			usleep(step_ms * 1000);
	}
	CHECK(cudaMemcpy(h, d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
	for (unsigned j = 0; j < n; j++)
		sum = (sum ^ h[j]) * 1099511628211ull;
	REQUIRE(!hostfn || (host.runs == iterations && !host.out_of_order),
		"host functions ran %u times for %u steps (%u steps found one missing)", host.runs, iterations,
		host.out_of_order);
	{
		cudaResourceDesc back;

		CHECK(cudaMemcpy2DFromArray(h, aw * sizeof(unsigned), arr, 0, 0, aw * sizeof(unsigned), ah,
					    cudaMemcpyDeviceToHost));
		for (unsigned j = 0; j < aw * ah; j++)
			sum = (sum ^ h[j]) * 1099511628211ull;
		CHECK(cudaGetTextureObjectResourceDesc(&back, tex));
		REQUIRE(back.resType == cudaResourceTypeArray && back.res.array.array == arr,
			"the texture object no longer names its array");
		CHECK(cudaDestroyTextureObject(tex));
		CHECK(cudaFreeArray(arr));
	}
	CHECK(cudaMemcpy(h, z, 2 * half * sizeof(unsigned), cudaMemcpyDeviceToHost));
	for (unsigned j = 0; j < 2 * half; j++) {
		REQUIRE(j < half || h[j] == 0, "the untouched half changed at %u", j);
		sum = (sum ^ h[j]) * 1099511628211ull;
	}
	{
		unsigned *r = (unsigned *)malloc(2 * vmm.gran);

		REQUIRE(r, "out of host memory");
		CHECK(cudaMemcpy(r, vd, 2 * vmm.gran, cudaMemcpyDeviceToHost));
		for (unsigned j = 0; j < vmm_words; j++)
			sum = (sum ^ r[j]) * 1099511628211ull;
		free(r);
		vmm_teardown(&vmm);
	}
	for (unsigned j = 0; j < mw; j++)
		sum = (sum ^ m[j]) * 1099511628211ull;
	CHECK(cudaFree(m));
	CHECK(cudaDeviceSynchronize());
	for (unsigned j = 0; j < CK_MVAR_WORDS; j++) {
		REQUIRE(ck_mvar[j] == mvar_want[j], "the __managed__ ck_mvar[%u] is %llx, expected %llx", j,
			ck_mvar[j], mvar_want[j]);
		sum = (sum ^ ck_mvar[j]) * 1099511628211ull;
	}
	if (c) {
		unsigned long long *es, got[2];

		CHECK(cudaMalloc(&es, sizeof(got)));
		CHECK(cudaMemset(es, 0, sizeof(got)));
		ck_extra_sum<<<1024, 256>>>(c, extra / sizeof(unsigned), es);
		CHECK(cudaGetLastError());
		CHECK(cudaMemcpy(got, es, sizeof(got), cudaMemcpyDeviceToHost));
		REQUIRE(got[1] == 0, "%llu words of the extra memory changed", got[1]);
		sum = (sum ^ got[0]) * 1099511628211ull;
		CHECK(cudaFree(es));
		CHECK(cudaFree(c));
	}
	/* Walk the list from node 0 (whose pointers were written before any restore). */
	ck_list_walk<<<1, 1>>>(list, walk);
	CHECK(cudaMemcpy(walked, walk, sizeof(walked), cudaMemcpyDeviceToHost));
	{
		unsigned long long want_n = 0, want_sum = 0;

		for (unsigned i = 0;; i = (unsigned)((i * 7919ull + 1) % list_len)) {
			want_sum = want_sum * 31 + i * 2654435761ull;
			want_n++;
			if ((i * 7919ull + 1) % list_len == 0)
				break;
		}
		REQUIRE(walked[1] == want_n && walked[0] == want_sum,
			"the device linked list walks %llu nodes (sum %llx), expected %llu (%llx)",
			walked[1], walked[0], want_n, want_sum);
	}
	sum = (sum ^ walked[0]) * 1099511628211ull;
	ck_count_read<<<1, 1, 0, s>>>(counter_d);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpyAsync(&counter, counter_d, sizeof(counter), cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(counter == counter_want, "the __device__ counter is %llx, expected %llx", counter, counter_want);
	if (two) {
		unsigned *h1 = (unsigned *)malloc(n1 * sizeof(unsigned));

		REQUIRE(h1, "out of host memory");
		CHECK(cudaMemcpy(h1, d1, n1 * sizeof(unsigned), cudaMemcpyDeviceToHost));
		for (unsigned j = 0; j < n1; j += 16)
			sum = (sum ^ h1[j]) * 1099511628211ull;
		free(h1);
		CHECK(cudaSetDevice(1));
		CHECK(cudaStreamDestroy(s1));
		CHECK(cudaFree(d1));
		CHECK(cudaSetDevice(0));
	}
	sum = (sum ^ counter) * 1099511628211ull;
	CHECK(cudaDeviceGetLimit(&stack1, cudaLimitStackSize));
	REQUIRE(stack1 == stack0, "the stack size limit is %zu, was set to %zu", stack1, stack0);
	CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &policy_back));
	REQUIRE(policy_back.syncPolicy == cudaSyncPolicyYield, "the stream's sync policy is %d",
		(int)policy_back.syncPolicy);
	CHECK(cudaFree(counter_d));
	CHECK(cudaFree(list));
	CHECK(cudaFreeAsync(walk, s));
	printf("CHECKSUM %016llx\n", (unsigned long long)sum);
	if (graphs) {
		CHECK(cudaGraphExecDestroy(x_main));
		CHECK(cudaGraphExecDestroy(x_half));
		CHECK(cudaGraphDestroy(g_main));
		CHECK(cudaGraphDestroy(g_half));
		CHECK(cudaGraphExecDestroy(x_cond));
		CHECK(cudaGraphDestroy(g_cond));
	}
	CHECK(cudaFree(rounds_d));
	CHECK(cudaFree(d));
	CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
	REQUIRE(used >= 2 * half * sizeof(unsigned), "the pool counts %llu bytes in use",
		(unsigned long long)used);
	CHECK(cudaFreeAsync(z, s));
	CHECK(cudaStreamSynchronize(s));
	CHECK(cudaMemPoolDestroy(pool));
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFreeHost(pin));
	printf("PASS ckpt_loop\n");
	return 0;
}
