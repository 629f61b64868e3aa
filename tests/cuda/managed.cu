/* managed: unified memory. cudaMallocManaged with host initialisation, a
 * kernel and a synchronisation before the host reads; host and device
 * taking turns on the same allocation with sparse host writes (single ints
 * in otherwise untouched pages); a __managed__ variable read, written and
 * handed to a kernel; four host threads faulting on one allocation at once;
 * the same through the driver API (a module loaded with
 * cuModuleLoadData, its variable found with cuModuleGetGlobal); a 64 MiB
 * allocation touched sparsely; copies and
 * memsets from and to managed memory; prefetch, advice and range
 * attributes; batched prefetch and discard (cuMemPrefetchBatchAsync,
 * cuMemDiscardBatchAsync, cuMemDiscardAndPrefetchBatchAsync and their
 * per-thread versions) over allocations and a __managed__ array that a
 * kernel names as a symbol, with the errors for bad batches; pointer
 * attributes; a fault outside managed memory still
 * reaching the program's own SIGSEGV handler, installed before any managed
 * memory existed. Every value is checked exactly, against a host model where
 * the device changed it.
 *
 * Through tern the device reports no concurrent managed access, so the
 * program synchronises before every host access after device work, as it
 * must on such a device (and may on any). */
#include "check.h"

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "mod_managed_fatbin.h"

__device__ __managed__ int mg_var = 41;

extern "C" __global__ void mg_affine(int *a, int k, int b, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] = a[i] * k + b;
}

extern "C" __global__ void mg_iota(int *a, int base, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] = base + i;
}

/* A __managed__ array a kernel reaches by name, for the batched calls. */
#define MG_ARR_WORDS 3000
__managed__ int mg_arr[MG_ARR_WORDS];

extern "C" __global__ void mg_arr_step(int k)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < MG_ARR_WORDS)
		mg_arr[i] = mg_arr[i] * 3 + k + i;
}

static void affine(int *a, int k, int b, int n, cudaStream_t s = 0)
{
	mg_affine<<<(n + 255) / 256, 256, 0, s>>>(a, k, b, n);
	CHECK(cudaGetLastError());
}

static bool through_tern(void)
{
	return getenv("TERN_SERVER") != NULL;
}

/* The program's own SIGSEGV handler: it must still see faults that are not
 * on managed memory (tern's handler, installed later, passes them on). */
static sigjmp_buf own_jmp;
static volatile sig_atomic_t own_faults;
static void *volatile own_addr;

static void own_segv(int sig, siginfo_t *si, void *uctx)
{
	(void)sig;
	(void)uctx;
	own_addr = si->si_addr;
	own_faults = own_faults + 1;
	siglongjmp(own_jmp, 1);
}

static void own_handler_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = own_segv;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	REQUIRE(sigaction(SIGSEGV, &sa, NULL) == 0, "sigaction");
}

static void own_handler_check(void)
{
	long page = sysconf(_SC_PAGESIZE);
	volatile int *p = (volatile int *)mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int *m;

	REQUIRE(p != (volatile int *)MAP_FAILED, "mmap");
	CHECK(cudaMallocManaged(&m, sizeof(int)));      /* managed memory exists now */
	m[0] = 3;
	if (!sigsetjmp(own_jmp, 1))
		(void)p[1];
	REQUIRE(own_faults == 1 && own_addr == (void *)(p + 1), "own handler: %d faults at %p",
		(int)own_faults, own_addr);
	/* Managed memory still works after it. */
	affine(m, 2, 0, 1);
	CHECK(cudaDeviceSynchronize());
	REQUIRE(m[0] == 6, "m[0] = %d", m[0]);
	CHECK(cudaFree(m));
	munmap((void *)p, page);
}

static void check_attributes(void)
{
	int v = -1;

	CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrManagedMemory, 0));
	REQUIRE(v == 1, "managed memory attribute %d", v);
	if (through_tern()) {
		/* What tern provides, whatever the GPU could do. */
		CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, 0));
		REQUIRE(v == 0, "concurrent managed access %d through tern", v);
		CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrPageableMemoryAccess, 0));
		REQUIRE(v == 0, "pageable memory access %d through tern", v);
	}
}

/* Host init, kernel, host read; then turns with sparse host writes. */
static void ping_pong(void)
{
	const int n = (1 << 20) + 37;
	std::vector<int> model(n);
	int *a;

	CHECK(cudaMallocManaged(&a, n * sizeof(int)));
	for (int i = 0; i < n; i++)
		a[i] = i;
	affine(a, 3, 1, n);
	CHECK(cudaDeviceSynchronize());
	for (int i = 0; i < n; i++) {
		REQUIRE(a[i] == 3 * i + 1, "a[%d] = %d after the first kernel", i, a[i]);
		model[i] = a[i];
	}
	for (int round = 0; round < 12; round++) {
		/* One int every 1000: most pages get a single host write. */
		for (int i = round; i < n; i += 1000) {
			a[i] += i % 7;
			model[i] += i % 7;
		}
		affine(a, 1, round, n);
		for (int i = 0; i < n; i++)
			model[i] += round;
		CHECK(cudaDeviceSynchronize());
		/* Read back only a part on odd rounds: the rest stays on the device. */
		for (int i = 0; i < n; i += (round & 1) ? 4093 : 1)
			REQUIRE(a[i] == model[i], "round %d: a[%d] = %d, expected %d", round, i, a[i],
				model[i]);
	}
	CHECK(cudaFree(a));
}

/* Four threads read and write their quarter at once: their faults meet in
 * tern's handler and on its one connection. */
static void threads(void)
{
	const int n = (1 << 20) + 3, parts = 4;
	std::vector<std::thread> t;
	int *a;

	CHECK(cudaMallocManaged(&a, n * sizeof(int)));
	mg_iota<<<(n + 255) / 256, 256>>>(a, 0, n);
	CHECK(cudaGetLastError());
	CHECK(cudaDeviceSynchronize());
	for (int q = 0; q < parts; q++)
		t.emplace_back([a, n, q, parts]() {
			for (int i = q * (n / parts); i < (q == parts - 1 ? n : (q + 1) * (n / parts)); i++) {
				REQUIRE(a[i] == i, "thread %d: a[%d] = %d", q, i, a[i]);
				if (i % 3 == 0)
					a[i] = -i;
			}
		});
	for (auto &th : t)
		th.join();
	affine(a, 1, 1, n);
	CHECK(cudaDeviceSynchronize());
	for (int i = 0; i < n; i++)
		REQUIRE(a[i] == (i % 3 == 0 ? -i : i) + 1, "after the threads a[%d] = %d", i, a[i]);
	CHECK(cudaFree(a));
}

static void managed_variable(void)
{
	int *dev, out = 0;
	int *p = &mg_var;

	REQUIRE(mg_var == 41, "__managed__ starts at %d", mg_var);
	mg_var += 1;
	affine(p, 2, 0, 1);
	CHECK(cudaDeviceSynchronize());
	REQUIRE(mg_var == 84, "__managed__ after the kernel: %d", mg_var);
	mg_var = 5;
	/* A copy whose source is the variable reads the host's write. */
	CHECK(cudaMalloc(&dev, sizeof(int)));
	CHECK(cudaMemcpy(dev, p, sizeof(int), cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(&out, dev, sizeof(int), cudaMemcpyDeviceToHost));
	REQUIRE(out == 5, "copied from the __managed__ variable: %d", out);
	CHECK(cudaFree(dev));

	cudaPointerAttributes pa;
	CHECK(cudaPointerGetAttributes(&pa, p));
	REQUIRE(pa.type == cudaMemoryTypeManaged, "__managed__ pointer type %d", (int)pa.type);
}

/* Driver API: a module's __managed__ variable through cuModuleGetGlobal. */
static void module_variable(void)
{
	DRV_FN(cuModuleLoadData);
	DRV_FN(cuModuleGetGlobal);
	DRV_FN(cuModuleGetFunction);
	DRV_FN(cuLaunchKernel);
	DRV_FN(cuCtxSynchronize);
	DRV_FN(cuModuleUnload);
	DRV_FN(cuPointerGetAttribute);
	CUmodule mod;
	CUfunction f;
	CUdeviceptr addr = 0;
	size_t bytes = 0;
	unsigned managed = 0;
	int k = 2, b = 1, n = 4, *p;
	void *args[] = { &p, &k, &b, &n };

	CHECK(cudaFree(0));             /* the primary context, current */
	CHECK_DRV(p_cuModuleLoadData(&mod, mod_managed_fatbin));
	CHECK_DRV(p_cuModuleGetGlobal(&addr, &bytes, mod, "mm_var"));
	REQUIRE(bytes == 4 * sizeof(int), "mm_var is %zu bytes", bytes);
	CHECK_DRV(p_cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, addr));
	REQUIRE(managed == 1, "mm_var IS_MANAGED %u", managed);
	p = (int *)(uintptr_t)addr;
	REQUIRE(p[0] == 1 && p[1] == 2 && p[2] == 3 && p[3] == 4, "mm_var starts %d %d %d %d", p[0],
		p[1], p[2], p[3]);
	p[1] = 20;
	CHECK_DRV(p_cuModuleGetFunction(&f, mod, "mg_affine"));
	CHECK_DRV(p_cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
	CHECK_DRV(p_cuCtxSynchronize());
	REQUIRE(p[0] == 3 && p[1] == 41 && p[2] == 7 && p[3] == 9, "mm_var after the kernel %d %d %d %d",
		p[0], p[1], p[2], p[3]);
	CHECK_DRV(p_cuModuleUnload(mod));
}

/* 64 MiB, of which the host touches one int every 4 MiB. */
static void large_sparse(void)
{
	const size_t n = (64u << 20) / sizeof(int), stride = (4u << 20) / sizeof(int);
	int *big;

	CHECK(cudaMallocManaged(&big, n * sizeof(int)));
	for (size_t i = 0; i < n; i += stride)
		big[i] = (int)(i / stride) + 10;
	affine(big, 2, 1, (int)n);
	CHECK(cudaDeviceSynchronize());
	for (size_t i = 0; i < n; i += stride) {
		REQUIRE(big[i] == 2 * ((int)(i / stride) + 10) + 1, "big[%zu] = %d", i, big[i]);
		REQUIRE(big[i + 1] == 1, "big[%zu] = %d", i + 1, big[i + 1]);
	}
	REQUIRE(big[n - 1] == 1, "big[last] = %d", big[n - 1]);
	CHECK(cudaFree(big));
}

static void copies(void)
{
	const int n = 300000;
	const size_t bytes = n * sizeof(int);
	std::vector<int> host(n);
	int *m, *m2, *dev;

	CHECK(cudaMallocManaged(&m, bytes));
	CHECK(cudaMallocManaged(&m2, bytes, cudaMemAttachHost));
	CHECK(cudaMalloc(&dev, bytes));
	for (int i = 0; i < n; i++)
		m[i] = 7 * i;
	/* Managed source, explicit direction: the host's writes arrive. */
	CHECK(cudaMemcpy(dev, m, bytes, cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++)
		REQUIRE(host[i] == 7 * i, "device copy [%d] = %d", i, host[i]);
	/* Managed destination: the host sees what the device wrote. */
	mg_iota<<<(n + 255) / 256, 256>>>(dev, 100, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(m2, dev, bytes, cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i += 3)
		REQUIRE(m2[i] == 100 + i, "m2[%d] = %d", i, m2[i]);
	/* Managed to managed, by unified addressing, after host writes to both. */
	m[1] = -1;
	m2[2] = -2;
	CHECK(cudaMemcpy(m2, m, bytes / 2, cudaMemcpyDefault));
	REQUIRE(m2[1] == -1 && m2[2] == 14 && m2[n / 2 - 1] == 7 * (n / 2 - 1), "m2 %d %d %d", m2[1],
		m2[2], m2[n / 2 - 1]);
	REQUIRE(m2[n / 2] == 100 + n / 2, "m2 past the copy: %d", m2[n / 2]);
	/* From pageable host memory into managed memory, then a memset. */
	for (int i = 0; i < n; i++)
		host[i] = -i;
	CHECK(cudaMemcpy(m, host.data(), bytes, cudaMemcpyHostToDevice));
	REQUIRE(m[n - 1] == -(n - 1) && m[12345] == -12345, "m after the copy: %d %d", m[n - 1],
		m[12345]);
	CHECK(cudaMemset(m + 10, 0xff, 5 * sizeof(int)));
	CHECK(cudaDeviceSynchronize());
	REQUIRE(m[9] == -9 && m[10] == -1 && m[14] == -1 && m[15] == -15, "memset: %d %d %d %d", m[9],
		m[10], m[14], m[15]);
	/* Async copies on a stream, out of managed memory into pageable memory. */
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s));
	m[0] = 4242;
	CHECK(cudaMemcpyAsync(host.data(), m, 16, cudaMemcpyDefault, s));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(host[0] == 4242 && host[3] == -3, "async out of managed memory: %d %d", host[0], host[3]);
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(dev));
	CHECK(cudaFree(m2));
	CHECK(cudaFree(m));
}

static void prefetch_advise(void)
{
	const int n = 1 << 16;
	const size_t bytes = n * sizeof(int);
	cudaMemLocation dev0 = { cudaMemLocationTypeDevice, 0 };
	cudaMemLocation host = { cudaMemLocationTypeHost, 0 };
	cudaStream_t s;
	int *m, v = -7;

	CHECK(cudaStreamCreate(&s));
	CHECK(cudaMallocManaged(&m, bytes));
	for (int i = 0; i < n; i++)
		m[i] = i;
	CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetReadMostly, dev0));
	CHECK(cudaMemRangeGetAttribute(&v, sizeof(v), cudaMemRangeAttributeReadMostly, m, bytes));
	REQUIRE(v == 1, "read mostly %d", v);
	CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseUnsetReadMostly, dev0));
	CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetPreferredLocation, dev0));
	CHECK(cudaMemRangeGetAttribute(&v, sizeof(v), cudaMemRangeAttributePreferredLocation, m, bytes));
	REQUIRE(v == 0, "preferred location %d", v);
	CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetAccessedBy, dev0));
	CHECK(cudaMemPrefetchAsync(m, bytes, dev0, 0, s));
	affine(m, 1, 5, n, s);
	CHECK(cudaMemPrefetchAsync(m, bytes, host, 0, s));
	CHECK(cudaStreamSynchronize(s));
	for (int i = 0; i < n; i++)
		REQUIRE(m[i] == i + 5, "after prefetches m[%d] = %d", i, m[i]);
	CHECK(cudaMemRangeGetAttribute(&v, sizeof(v), cudaMemRangeAttributeLastPrefetchLocation, m,
				       bytes));
	REQUIRE(v == cudaCpuDeviceId, "last prefetch location %d", v);
	CHECK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
	CHECK(cudaStreamSynchronize(s));
	CHECK(cudaFree(m));
	CHECK(cudaStreamDestroy(s));
}

typedef CUresult (*prefetch_batch_fn)(CUdeviceptr *, size_t *, size_t, CUmemLocation *, size_t *, size_t,
				      unsigned long long, CUstream);
typedef CUresult (*discard_batch_fn)(CUdeviceptr *, size_t *, size_t, unsigned long long, CUstream);

/* A driver entry point's per-thread-default-stream version. */
static void *drv_sym_per_thread(const char *name)
{
	void *fn = NULL;
	cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;

	CHECK(cudaGetDriverEntryPointByVersion(name, &fn, TEST_CUDA_VERSION, cudaEnablePerThreadDefaultStream,
					       &st));
	REQUIRE(st == cudaDriverEntryPointSuccess && fn, "per-thread %s not found (%d)", name, (int)st);
	return fn;
}

/* A bad batch must fail. tern answers @want; a native driver's other
 * answer is reported (the test is how tern's codes get checked against
 * the driver's), not failed. */
static void expect_batch_error(CUresult got, CUresult want, const char *what)
{
	REQUIRE(got != CUDA_SUCCESS, "%s succeeded", what);
	if (got == want)
		return;
	REQUIRE(!through_tern(), "%s: error %d, expected %d", what, (int)got, (int)want);
	printf("managed: note: the driver answers %d for %s (tern: %d)\n", (int)got, what, (int)want);
}

static int last_prefetch(void *p, size_t bytes)
{
	int v = 99;

	CHECK(cudaMemRangeGetAttribute(&v, sizeof(v), cudaMemRangeAttributeLastPrefetchLocation, p, bytes));
	return v;
}

static void batches(void)
{
	prefetch_batch_fn prefetch = (prefetch_batch_fn)drv_sym("cuMemPrefetchBatchAsync");
	prefetch_batch_fn prefetch_pt = (prefetch_batch_fn)drv_sym_per_thread("cuMemPrefetchBatchAsync");
	prefetch_batch_fn both = (prefetch_batch_fn)drv_sym("cuMemDiscardAndPrefetchBatchAsync");
	prefetch_batch_fn both_pt = (prefetch_batch_fn)drv_sym_per_thread("cuMemDiscardAndPrefetchBatchAsync");
	discard_batch_fn discard = (discard_batch_fn)drv_sym("cuMemDiscardBatchAsync");
	discard_batch_fn discard_pt = (discard_batch_fn)drv_sym_per_thread("cuMemDiscardBatchAsync");
	const int n = (1 << 18) + 11;
	const size_t bytes = n * sizeof(int);
	CUmemLocation dev = { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, host = { CU_MEM_LOCATION_TYPE_HOST, 0 };
	CUmemLocation locs[2] = { host, dev }, bad_dev = { CU_MEM_LOCATION_TYPE_DEVICE, 7 };
	std::vector<int> model_a(n), model_b(n), model_v(MG_ARR_WORDS);
	cudaStream_t cs;
	CUstream s;
	int *a, *b, *plain;
	size_t idx[2] = { 0, 2 }, idx0 = 0, late = 1;

	CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
	s = (CUstream)cs;
	CHECK(cudaMallocManaged(&a, bytes));
	CHECK(cudaMallocManaged(&b, bytes));
	CHECK(cudaMalloc(&plain, 4096));
	for (int i = 0; i < n; i++) {
		a[i] = model_a[i] = i;
		b[i] = model_b[i] = 2 * i;
	}
	for (int i = 0; i < MG_ARR_WORDS; i++)
		mg_arr[i] = model_v[i] = i ^ 5;

	CUdeviceptr d[3] = { (CUdeviceptr)(uintptr_t)a, (CUdeviceptr)(uintptr_t)mg_arr, (CUdeviceptr)(uintptr_t)b };
	size_t sz[3] = { bytes, sizeof(mg_arr), bytes };

	/* Everything to the device, then kernels; then a and mg_arr to the
	 * host and b to the device again (two locations). */
	CHECK_DRV(prefetch(d, sz, 3, &dev, &idx0, 1, 0, s));
	affine(a, 2, 1, n, cs);
	affine(b, 1, -3, n, cs);
	mg_arr_step<<<(MG_ARR_WORDS + 255) / 256, 256, 0, cs>>>(7);
	CHECK(cudaGetLastError());
	CHECK_DRV(prefetch(d, sz, 3, locs, idx, 2, 0, s));
	CHECK(cudaStreamSynchronize(cs));
	for (int i = 0; i < n; i++) {
		model_a[i] = model_a[i] * 2 + 1;
		model_b[i] -= 3;
		REQUIRE(a[i] == model_a[i] && b[i] == model_b[i], "after the prefetches a[%d] = %d, b = %d", i,
			a[i], b[i]);
	}
	for (int i = 0; i < MG_ARR_WORDS; i++) {
		model_v[i] = model_v[i] * 3 + 7 + i;
		REQUIRE(mg_arr[i] == model_v[i], "after the prefetches mg_arr[%d] = %d, expected %d", i, mg_arr[i],
			model_v[i]);
	}
	REQUIRE(last_prefetch(a, bytes) == cudaCpuDeviceId, "a last prefetched to %d", last_prefetch(a, bytes));
	REQUIRE(last_prefetch(b, bytes) == 0, "b last prefetched to %d", last_prefetch(b, bytes));
	REQUIRE(last_prefetch(mg_arr, sizeof(mg_arr)) == cudaCpuDeviceId, "mg_arr last prefetched to %d",
		last_prefetch(mg_arr, sizeof(mg_arr)));

	/* Discards of ranges that start and end inside pages: what lies
	 * outside them keeps the host's writes; writing the discarded bytes
	 * again (host) or whole (kernel) makes them defined again. */
	for (int i = 0; i < n; i++)
		a[i] = model_a[i] = 5 * i;
	{
		CUdeviceptr dd[2] = { (CUdeviceptr)(uintptr_t)(a + 100), (CUdeviceptr)(uintptr_t)(mg_arr + 3) };
		size_t ds[2] = { 50000 * sizeof(int), (MG_ARR_WORDS - 6) * sizeof(int) };

		CHECK_DRV(discard(dd, ds, 2, 0, s));
	}
	CHECK(cudaStreamSynchronize(cs));
	for (int i = 100; i < 100 + 50000; i++)
		a[i] = model_a[i] = 7 * i;
	for (int i = 3; i < MG_ARR_WORDS - 3; i++)
		mg_arr[i] = model_v[i] = -i;
	affine(a, 1, 3, n, cs);
	mg_arr_step<<<(MG_ARR_WORDS + 255) / 256, 256, 0, cs>>>(1);
	CHECK(cudaGetLastError());
	CHECK(cudaStreamSynchronize(cs));
	for (int i = 0; i < n; i++)
		REQUIRE(a[i] == model_a[i] + 3, "after the discard a[%d] = %d, expected %d", i, a[i], model_a[i] + 3);
	for (int i = 0; i < MG_ARR_WORDS; i++) {
		model_v[i] = model_v[i] * 3 + 1 + i;
		REQUIRE(mg_arr[i] == model_v[i], "after the discard mg_arr[%d] = %d, expected %d", i, mg_arr[i],
			model_v[i]);
	}
	/* Per-thread versions (the NULL stream is the thread's own): b is
	 * discarded whole and rewritten by a kernel; then discarded and
	 * prefetched to the device and rewritten again. */
	b[5] = -1;
	CHECK_DRV(discard_pt(&d[2], &sz[2], 1, 0, NULL));
	mg_iota<<<(n + 255) / 256, 256, 0, cudaStreamPerThread>>>(b, 9, n);
	CHECK(cudaGetLastError());
	CHECK(cudaStreamSynchronize(cudaStreamPerThread));
	for (int i = 0; i < n; i += 7)
		REQUIRE(b[i] == 9 + i, "after the per-thread discard b[%d] = %d", i, b[i]);
	b[6] = -1;
	CHECK_DRV(both(&d[2], &sz[2], 1, &dev, &idx0, 1, 0, s));
	mg_iota<<<(n + 255) / 256, 256, 0, cs>>>(b, 11, n);
	CHECK(cudaGetLastError());
	CHECK(cudaStreamSynchronize(cs));
	for (int i = 0; i < n; i++)
		REQUIRE(b[i] == 11 + i, "after discard and prefetch b[%d] = %d", i, b[i]);
	REQUIRE(last_prefetch(b, bytes) == 0, "b last prefetched to %d", last_prefetch(b, bytes));
	CHECK_DRV(both_pt(&d[2], &sz[2], 1, &host, &idx0, 1, 0, NULL));
	CHECK_DRV(prefetch_pt(&d[0], &sz[0], 1, &host, &idx0, 1, 0, NULL));
	CHECK(cudaStreamSynchronize(cudaStreamPerThread));
	REQUIRE(last_prefetch(b, bytes) == cudaCpuDeviceId, "b last prefetched to %d", last_prefetch(b, bytes));
	for (int i = 0; i < n; i += 4099)
		REQUIRE(a[i] == model_a[i] + 3, "after the per-thread prefetch a[%d] = %d", i, a[i]);

	/* Bad batches. */
	{
		CUdeviceptr bad[2] = { (CUdeviceptr)(uintptr_t)a, (CUdeviceptr)(uintptr_t)plain };
		size_t bs[2] = { 4096, 4096 };

		expect_batch_error(prefetch(d, sz, 3, &dev, &idx0, 1, 1, s), CUDA_ERROR_INVALID_VALUE,
				   "a prefetch batch with flags");
		expect_batch_error(discard(d, sz, 3, 1, s), CUDA_ERROR_INVALID_VALUE, "a discard batch with flags");
		expect_batch_error(prefetch(bad, bs, 2, &dev, &idx0, 1, 0, s), CUDA_ERROR_INVALID_VALUE,
				   "a prefetch batch naming cudaMalloc memory");
		expect_batch_error(discard(bad, bs, 2, 0, s), CUDA_ERROR_INVALID_VALUE,
				   "a discard batch naming cudaMalloc memory");
		expect_batch_error(prefetch(d, sz, 3, &dev, &late, 1, 0, s), CUDA_ERROR_INVALID_VALUE,
				   "a prefetch batch whose first location index is not 0");
		expect_batch_error(prefetch(d, sz, 1, locs, idx, 2, 0, s), CUDA_ERROR_INVALID_VALUE,
				   "a prefetch batch with more locations than operations");
		expect_batch_error(prefetch(d, sz, 3, &bad_dev, &idx0, 1, 0, s), CUDA_ERROR_INVALID_VALUE,
				   "a prefetch batch to device 7");
		expect_batch_error(prefetch(d, sz, 3, &dev, &idx0, 1, 0, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE,
				   "a prefetch batch on the legacy stream");
		expect_batch_error(discard(d, sz, 3, 0, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE,
				   "a discard batch on the legacy stream");
	}
	CHECK(cudaStreamSynchronize(cs));
	CHECK(cudaFree(plain));
	CHECK(cudaFree(b));
	CHECK(cudaFree(a));
	CHECK(cudaStreamDestroy(cs));
}

static void pointer_attributes(void)
{
	DRV_FN(cuPointerGetAttribute);
	cudaPointerAttributes pa;
	unsigned managed = 0;
	CUdeviceptr start = 0;
	size_t size = 0;
	int *m, *d;

	CHECK(cudaMallocManaged(&m, 3 << 20));
	CHECK(cudaMalloc(&d, 1 << 20));
	CHECK(cudaPointerGetAttributes(&pa, m + 100));
	REQUIRE(pa.type == cudaMemoryTypeManaged, "managed pointer type %d", (int)pa.type);
	REQUIRE(pa.hostPointer == m + 100 && pa.devicePointer == m + 100, "pointers %p %p",
		pa.hostPointer, pa.devicePointer);
	CHECK_DRV(p_cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED,
					  (CUdeviceptr)(uintptr_t)(m + 5)));
	REQUIRE(managed == 1, "IS_MANAGED %u", managed);
	CHECK_DRV(p_cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
					  (CUdeviceptr)(uintptr_t)(m + 5)));
	CHECK_DRV(p_cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
					  (CUdeviceptr)(uintptr_t)(m + 5)));
	REQUIRE(start == (CUdeviceptr)(uintptr_t)m && size >= (3u << 20), "range %#llx+%zu",
		(unsigned long long)start, size);
	CHECK_DRV(p_cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED,
					  (CUdeviceptr)(uintptr_t)d));
	REQUIRE(managed == 0, "IS_MANAGED %u for cudaMalloc memory", managed);
	CHECK(cudaPointerGetAttributes(&pa, d));
	REQUIRE(pa.type == cudaMemoryTypeDevice, "device pointer type %d", (int)pa.type);
	CHECK(cudaFree(d));
	CHECK(cudaFree(m));
}

int main(void)
{
	own_handler_install();
	check_attributes();
	ping_pong();
	threads();
	managed_variable();
	module_variable();
	large_sparse();
	copies();
	prefetch_advise();
	batches();
	pointer_attributes();
	own_handler_check();
	printf("PASS managed\n");
	return 0;
}
