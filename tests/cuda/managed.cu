/* managed: unified memory. cudaMallocManaged with host initialisation, a
 * kernel and a synchronisation before the host reads; host and device
 * taking turns on the same allocation with sparse host writes (single ints
 * in otherwise untouched pages); a __managed__ variable read, written and
 * handed to a kernel; four host threads faulting on one allocation at once;
 * the same through the driver API (a module loaded with
 * cuModuleLoadData, its variable found with cuModuleGetGlobal); a 64 MiB
 * allocation touched sparsely; copies and
 * memsets from and to managed memory; prefetch, advice and range
 * attributes; pointer attributes; a fault outside managed memory still
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
	pointer_attributes();
	own_handler_check();
	printf("PASS managed\n");
	return 0;
}
