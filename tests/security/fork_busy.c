/* fork() of a guest whose other threads keep the shim's locked paths busy
 * (issue 12, item 8: "fork hazards"): context-local storage (the export
 * table cudart uses), stream capture, managed memory faults and graph
 * kernel-node parameters. A lock one of them held at fork would stay held
 * in the child for ever; the shim takes every lock across fork, so each
 * child must work (a new session) or fail with a CUDA error, never hang.
 *
 * Run by with-ternd on the sim. Prints how many children worked, failed
 * cleanly and hung, and "PASS" when none hung.
 */
#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FORKS 12
#define STORAGE_KEYS 20000          /* a long list: its lock is held most of the time */
#define CHILD_DEADLINE_S 20

typedef CUresult (*storage_put_fn)(CUcontext, void *, void *, void *);
typedef CUresult (*storage_get_fn)(void **, CUcontext, void *);

static const CUuuid storage_id = { { (char)0xc6, (char)0x93, 0x33, 0x6e, 0x11, 0x21, (char)0xdf, 0x11,
				     (char)0xa8, (char)0xc3, 0x68, (char)0xf3, 0x55, (char)0xd8, (char)0x95,
				     (char)0x93 } };

static const char ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry fk(.param .u64 fk_p, .param .u32 fk_n)\n{\n\tret;\n}\n";

static CUcontext ctx;
static atomic_bool stop;
static char storage_key[STORAGE_KEYS];
static char child_key[16];          /* the parent's keys stay in the child's copy of the list */

#define CK(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { \
	fprintf(stderr, "%s: %s failed: %d\n", who, #call, r_); return r_; } } while (0)

/* ---- what the busy threads and the children do ---- */

static CUresult storage_work(const char *who, CUcontext c, char *key, unsigned keys)
{
	const void **tbl;
	void *v = NULL;

	CK(cuGetExportTable((const void **)&tbl, &storage_id));
	for (unsigned i = 0; i < keys; i++)
		CK(((storage_put_fn)tbl[0])(c, &key[i], &key[i], NULL));
	CK(((storage_get_fn)tbl[2])(&v, c, &key[0]));
	return v == &key[0] ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

static CUresult capture_work(const char *who, CUstream s)
{
	CUgraph g;

	CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
	CK(cuStreamEndCapture(s, &g));
	CK(cuGraphDestroy(g));
	return CUDA_SUCCESS;
}

static CUresult managed_work(const char *who, volatile uint8_t *m, CUstream s, unsigned round)
{
	/* A device write makes the host's pages stale: the next touch faults
	 * and fetches them under the managed lock. (Its own stream: another
	 * thread's capture forbids syncing the context.) */
	CK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)m, (unsigned char)round, 1 << 16, s));
	CK(cuStreamSynchronize(s));
	return m[round % (1 << 16)] == (uint8_t)round ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

static CUresult graph_setup(const char *who, CUgraph *g, CUgraphNode *node, CUdeviceptr buf)
{
	CUmodule mod;
	CUfunction fn;
	unsigned n = 16;
	void *args[] = { &buf, &n };
	CUDA_KERNEL_NODE_PARAMS p = { 0 };

	CK(cuModuleLoadData(&mod, ptx));
	CK(cuModuleGetFunction(&fn, mod, "fk"));
	CK(cuGraphCreate(g, 0));
	p.func = fn;
	p.gridDimX = p.gridDimY = p.gridDimZ = 1;
	p.blockDimX = p.blockDimY = p.blockDimZ = 1;
	p.kernelParams = args;
	CK(cuGraphAddKernelNode(node, *g, NULL, 0, &p));
	return CUDA_SUCCESS;
}

static CUresult graph_work(const char *who, CUgraphNode node)
{
	CUDA_KERNEL_NODE_PARAMS p;

	CK(cuGraphKernelNodeGetParams(node, &p));
	return p.kernelParams ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

/* ---- the parent's busy threads ---- */

static void *busy_storage(void *arg)
{
	const void **tbl;
	void *v;

	(void)arg;
	cuCtxSetCurrent(ctx);
	if (storage_work("storage", ctx, storage_key, STORAGE_KEYS) || cuGetExportTable((const void **)&tbl, &storage_id))
		abort();
	/* A key that is not there: every lookup walks the whole list. */
	while (!atomic_load(&stop))
		((storage_get_fn)tbl[2])(&v, ctx, &stop);
	return NULL;
}

static void *busy_capture(void *arg)
{
	CUstream s;

	(void)arg;
	cuCtxSetCurrent(ctx);
	if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
		abort();
	while (!atomic_load(&stop))
		if (capture_work("capture", s))
			abort();
	return NULL;
}

static void *busy_managed(void *arg)
{
	CUdeviceptr m;
	CUstream s;

	(void)arg;
	cuCtxSetCurrent(ctx);
	if (cuMemAllocManaged(&m, 1 << 20, CU_MEM_ATTACH_GLOBAL) || cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
		abort();
	for (unsigned r = 1; !atomic_load(&stop); r++)
		if (managed_work("managed", (volatile uint8_t *)(uintptr_t)m, s, r))
			abort();
	return NULL;
}

static void *busy_graph(void *arg)
{
	CUdeviceptr buf;
	CUgraphNode node;
	CUgraph g;

	(void)arg;
	cuCtxSetCurrent(ctx);
	if (cuMemAlloc(&buf, 4096) || graph_setup("graph", &g, &node, buf))
		abort();
	while (!atomic_load(&stop))
		if (graph_work("graph", node))
			abort();
	return NULL;
}

/* ---- the child ---- */

static int child_main(void)
{
	const char *who = "child";
	CUdevice dev;
	CUcontext c;
	CUstream s;
	CUdeviceptr m, buf;
	CUgraphNode node;
	CUgraph g;

	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&c, dev));
	CK(cuCtxSetCurrent(c));
	CK(storage_work(who, c, child_key, sizeof(child_key)));
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CK(capture_work(who, s));
	CK(cuMemAllocManaged(&m, 1 << 20, CU_MEM_ATTACH_GLOBAL));
	CK(managed_work(who, (volatile uint8_t *)(uintptr_t)m, s, 7));
	CK(cuMemAlloc(&buf, 4096));
	CK(graph_setup(who, &g, &node, buf));
	CK(graph_work(who, node));
	return 0;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int main(void)
{
	void *(*busy[])(void *) = { busy_storage, busy_capture, busy_managed, busy_graph };
	pthread_t tids[4];
	pid_t kids[FORKS];
	unsigned worked = 0, failed = 0, hung = 0, left = FORKS;
	CUdevice dev;
	double end;

	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	for (unsigned i = 0; i < 4; i++)
		if (pthread_create(&tids[i], NULL, busy[i], NULL))
			return 1;
	usleep(300000);         /* the storage list filled, every path running */
	for (unsigned i = 0; i < FORKS; i++) {
		kids[i] = fork();
		if (kids[i] < 0)
			return 1;
		if (kids[i] == 0)
			_exit(child_main() ? 3 : 0);
		usleep(20000);
	}
	end = now_s() + CHILD_DEADLINE_S;
	while (left && now_s() < end) {
		for (unsigned i = 0; i < FORKS; i++) {
			int st;

			if (kids[i] <= 0 || waitpid(kids[i], &st, WNOHANG) != kids[i])
				continue;
			if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
				worked++;
			else
				failed++;
			kids[i] = 0;
			left--;
		}
		usleep(10000);
	}
	for (unsigned i = 0; i < FORKS; i++)
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
			hung++;
		}
	atomic_store(&stop, true);
	for (unsigned i = 0; i < 4; i++)
		pthread_join(tids[i], NULL);
	printf("fork with 4 busy threads: %u children worked, %u failed cleanly, %u hung (%d s deadline)\n",
	       worked, failed, hung, CHILD_DEADLINE_S);
	if (hung)
		return 1;
	printf("PASS fork_busy\n");
	return 0;
}
