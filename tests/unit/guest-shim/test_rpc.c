/* The shim's client side against a fake ternd: a thread that speaks the wire
 * protocol over a unix socket. Checks the hello exchange, the attribute
 * cache, parameter packing for launches, cutting of large copies, host
 * memory attributes, batched prefetch and discard of managed memory (what
 * they check, push and drop), __managed__ variables of two modules sharing
 * a page (one mirror; the unloaded module's variable no longer fetched),
 * and that a worker that dies mid-run gives the app an error instead of a
 * crash. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport.h"
#include "wire.h"
#include "wire_calls.h"

#define ARENA_BASE 0x7e0000000000ull
#define ARENA_SIZE (1ull << 34)
#define FAKE_FUNCTION 0x0500000000000007ull
#define FAKE_CONTEXT 0x0100000000000001ull
#define MANAGED_ADDR (ARENA_BASE + (1ull << 30))
/* __managed__ variables as the H200's driver packs them: "a" of module A
 * and "b" of module B in one page, "b" running into the next. */
#define VAR_PAGE 0x7c0000000000ull
#define VAR_A (VAR_PAGE + 0x80)
#define VAR_A_BYTES 0x40
#define VAR_B (VAR_PAGE + 0xf00)
#define VAR_B_BYTES 0x200
#define MODULE_A ((uint64_t)WIRE_HANDLE_MODULE << 56 | 1)
#define MODULE_B ((uint64_t)WIRE_HANDLE_MODULE << 56 | 2)

static void *lib;
static char dir[] = "/tmp/tern-shim-rpc-XXXXXX";
static char sock_path[128];
static int listen_fd;

/* What the fake server saw; read after the call that caused it returned. */
static struct {
	int hello, attrs_fetches, dtoh_pieces, htod_pushes;
	uint64_t dtoh_src[64], dtoh_len[64];    /* the latest pieces, dtoh_pieces % 64 */
	uint64_t htod_bytes;
	uint8_t launch_args[64];
	uint32_t launch_len;
	uint64_t launch_stream;
	char session[256];
} seen;

static void reply(int fd, const struct wire_header *req, struct wire_msg *m)
{
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .flags = WIRE_F_REPLY, .call = req->call, .seq = req->seq };
	int n = wire_msg_finish(m, &h, iov);

	if (n > 0)
		wire_send(fd, iov, n);
}

/* Serve one connection; false when the worker "died" on it. */
static bool serve(int fd);

static void *server(void *arg)
{
	/* The second connection is the shim coming back after the worker died:
	 * a fresh session (resume_seq 0), which must make it give up. */
	for (int conn = 0; conn < 2; conn++) {
		int fd = transport_accept(listen_fd);

		if (fd < 0 || serve(fd))
			break;
	}
	return NULL;
}

static bool serve(int fd)
{
	static uint8_t payload[WIRE_PAYLOAD_MAX];

	while (fd >= 0) {
		uint8_t hdr[WIRE_HEADER_SIZE];
		struct wire_header h;
		struct wire_cursor cur;
		struct wire_msg m;

		if (wire_recv_exact(fd, hdr, sizeof(hdr)) || wire_header_decode(hdr, &h) ||
		    wire_recv_exact(fd, payload, h.length))
			break;
		wire_cursor_init(&cur, payload, h.length);
		wire_msg_init(&m);
		switch (h.call) {
		case WIRE_CALL_HELLO: {
			struct wire_hello_req r;

			if (wire_hello_req_decode(&cur, &r) == 0) {
				seen.hello++;
				snprintf(seen.session, sizeof(seen.session), "%.200s", r.session);
			}
			wire_put_u32(&m, CUDA_SUCCESS);
			wire_put_u32(&m, 4242);
			wire_put_u64(&m, ARENA_BASE);
			wire_put_u64(&m, ARENA_SIZE);
			wire_put_u64(&m, 1 << 30);
			wire_put_u64(&m, 0);    /* resume_seq: a fresh session */
			wire_put_blob(&m, (struct wire_blob){ (const uint8_t *)"0123456789abcdef0123456789abcdef", 32 });
			break;
		}
		case WIRE_CALL_CHALLENGE: {
			static const uint8_t nonce[32] = { 1, 2, 3 };

			wire_put_u32(&m, CUDA_SUCCESS);
			wire_put_blob(&m, (struct wire_blob){ nonce, sizeof(nonce) });
			break;
		}
		case WIRE_CALL_INIT:
			wire_put_u32(&m, CUDA_SUCCESS);
			break;
		case WIRE_CALL_DEVICE_GET_COUNT:
			wire_put_u32(&m, CUDA_SUCCESS);
			wire_put_i32(&m, 3);
			break;
		case WIRE_CALL_DEVICE_GET_ATTRIBUTES: {
			struct wire_device_get_attributes_req r;
			/* Static: the reply points at it until reply() sends it,
			 * after this block. */
			static uint8_t vals[4 * 512];

			seen.attrs_fetches++;
			if (wire_device_get_attributes_req_decode(&cur, &r) || r.count > 512) {
				wire_put_u32(&m, CUDA_ERROR_INVALID_VALUE);
				wire_put_blob(&m, (struct wire_blob){ NULL, 0 });
				break;
			}
			for (uint32_t i = 0; i < r.count; i++) {
				uint32_t v = (r.first + i) * 10;

				memcpy(vals + 4 * i, &v, 4);
			}
			wire_put_u32(&m, CUDA_SUCCESS);
			wire_put_blob(&m, (struct wire_blob){ vals, 4 * r.count });
			break;
		}
		case WIRE_CALL_MODULE_GET_FUNCTION: {
			/* int at 0, u64 at 8, char at 16 */
			static const uint8_t layout[] = { 0, 0, 0, 0, 4, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0, 0,
							  16, 0, 0, 0, 1, 0, 0, 0 };

			wire_put_u32(&m, CUDA_SUCCESS);
			wire_put_u64(&m, FAKE_FUNCTION);
			wire_put_blob(&m, (struct wire_blob){ layout, sizeof(layout) });
			break;
		}
		case WIRE_CALL_LAUNCH_KERNEL: {
			struct wire_launch_kernel_req r;

			if (wire_launch_kernel_req_decode(&cur, &r) == 0 && r.args.len <= 64) {
				memcpy(seen.launch_args, r.args.ptr, r.args.len);
				seen.launch_len = r.args.len;
				seen.launch_stream = r.stream;
			}
			wire_put_u32(&m, CUDA_SUCCESS);
			break;
		}
		case WIRE_CALL_MEMCPY_DTOH: {
			struct wire_memcpy_dtoh_req r;
			static uint8_t data[WIRE_COPY_PIECE];

			if (wire_memcpy_dtoh_req_decode(&cur, &r) || r.bytes > WIRE_COPY_PIECE) {
				wire_put_u32(&m, CUDA_ERROR_INVALID_VALUE);
				wire_put_blob(&m, (struct wire_blob){ NULL, 0 });
				break;
			}
			/* Each byte tells where it came from. */
			for (uint64_t i = 0; i < r.bytes; i++)
				data[i] = (uint8_t)((r.src - ARENA_BASE + i) * 7);
			seen.dtoh_src[seen.dtoh_pieces % 64] = r.src;
			seen.dtoh_len[seen.dtoh_pieces % 64] = r.bytes;
			__atomic_add_fetch(&seen.dtoh_pieces, 1, __ATOMIC_RELEASE);
			wire_put_u32(&m, CUDA_SUCCESS);
			wire_put_blob(&m, (struct wire_blob){ data, (uint32_t)r.bytes });
			break;
		}
		case WIRE_CALL_MODULE_GET_VARIABLE: {
			struct wire_module_get_variable_req r;
			bool a;

			if (wire_module_get_variable_req_decode(&cur, &r) ||
			    (r.module != MODULE_A && r.module != MODULE_B)) {
				wire_put_u32(&m, CUDA_ERROR_NOT_FOUND);
				wire_put_u64(&m, 0);
				wire_put_u64(&m, 0);
				wire_put_u32(&m, 0);
				break;
			}
			a = r.module == MODULE_A;
			wire_put_u32(&m, CUDA_SUCCESS);
			wire_put_u64(&m, a ? VAR_A : VAR_B);
			wire_put_u64(&m, a ? VAR_A_BYTES : VAR_B_BYTES);
			wire_put_u32(&m, 1);    /* __managed__ */
			break;
		}
		case WIRE_CALL_MODULE_UNLOAD:
			wire_put_u32(&m, CUDA_SUCCESS);
			break;
		case WIRE_CALL_MEM_ALLOC_MANAGED:
			wire_put_u32(&m, CUDA_SUCCESS);
			wire_put_u64(&m, MANAGED_ADDR);
			break;
		case WIRE_CALL_MEMCPY_HTOD: {
			struct wire_memcpy_htod_req r;

			if (wire_memcpy_htod_req_decode(&cur, &r) == 0) {
				seen.htod_pushes++;
				seen.htod_bytes += r.data.len;
			}
			wire_put_u32(&m, CUDA_SUCCESS);
			break;
		}
		case WIRE_CALL_PRIMARY_CTX_RETAIN:
			wire_put_u32(&m, CUDA_SUCCESS);
			wire_put_u64(&m, FAKE_CONTEXT);
			break;
		case WIRE_CALL_DEVICE_GET:
			/* The worker dies in the middle of a call. */
			close(fd);
			wire_msg_release(&m);
			return false;
		default:
			wire_put_u32(&m, CUDA_ERROR_NOT_SUPPORTED);
			break;
		}
		/* A deferred request (lazy RPC) gets no reply, like from a worker. */
		if (!(h.flags & WIRE_F_NO_REPLY))
			reply(fd, &h, &m);
		wire_msg_release(&m);
	}
	close(fd);
	return true;
}

#define FN(name, type) ((type)dlsym(lib, name))

static void test_session_and_cache(void **state)
{
	CUresult (*init)(unsigned) = FN("cuInit", CUresult (*)(unsigned));
	CUresult (*count)(int *) = FN("cuDeviceGetCount", CUresult (*)(int *));
	CUresult (*attr)(int *, CUdevice_attribute, CUdevice) =
		FN("cuDeviceGetAttribute", CUresult (*)(int *, CUdevice_attribute, CUdevice));
	int n = 0, v = 0;

	assert_int_equal(init(0), CUDA_SUCCESS);
	assert_int_equal(seen.hello, 1);
	assert_string_equal(seen.session, "test-session");
	assert_int_equal(count(&n), CUDA_SUCCESS);
	assert_int_equal(n, 3);
	assert_int_equal(attr(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_SUCCESS);
	assert_int_equal(v, CU_DEVICE_ATTRIBUTE_WARP_SIZE * 10);
	assert_int_equal(attr(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
	assert_int_equal(v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT * 10);
	assert_int_equal(attr(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
	/* One round trip served every attribute of device 0. */
	assert_int_equal(seen.attrs_fetches, 1);
}

static void test_launch_packs_params(void **state)
{
	CUresult (*get)(CUfunction *, CUmodule, const char *) =
		FN("cuModuleGetFunction", CUresult (*)(CUfunction *, CUmodule, const char *));
	CUresult (*info)(CUfunction, size_t, size_t *, size_t *) =
		FN("cuFuncGetParamInfo", CUresult (*)(CUfunction, size_t, size_t *, size_t *));
	CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			   unsigned, CUstream, void **, void **) =
		FN("cuLaunchKernel_ptsz", CUresult (*)(CUfunction, unsigned, unsigned, unsigned,
						       unsigned, unsigned, unsigned, unsigned,
						       CUstream, void **, void **));
	CUresult (*retain)(CUcontext *, CUdevice) =
		FN("cuDevicePrimaryCtxRetain", CUresult (*)(CUcontext *, CUdevice));
	CUresult (*set_current)(CUcontext) = FN("cuCtxSetCurrent", CUresult (*)(CUcontext));
	CUcontext ctx = NULL;
	CUfunction f;
	size_t off = 0, size = 0;
	int a = 0x01020304;
	uint64_t b = 0x1122334455667788ull;
	char c = 'x';
	void *params[] = { &a, &b, &c };
	uint8_t want[17] = { 0 };

	assert_int_equal(get(&f, (CUmodule)0x42, "kern"), CUDA_SUCCESS);
	assert_int_equal((uint64_t)(uintptr_t)f, FAKE_FUNCTION);
	assert_int_equal(info(f, 1, &off, &size), CUDA_SUCCESS);
	assert_int_equal(off, 8);
	assert_int_equal(size, 8);
	assert_int_equal(info(f, 3, &off, &size), CUDA_ERROR_INVALID_VALUE);
	/* The fake device's attributes are their ids times ten: at most 10
	 * threads a block (MAX_THREADS_PER_BLOCK is 1), 20 in x. The shim checks
	 * a launch against them, those of the current context's device,
	 * before deferring it; without a current context it fails. */
	assert_int_equal(launch(f, 1, 1, 1, 8, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_CONTEXT);
	assert_int_equal(retain(&ctx, 0), CUDA_SUCCESS);
	assert_int_equal((uint64_t)(uintptr_t)ctx, FAKE_CONTEXT);
	assert_int_equal(set_current(ctx), CUDA_SUCCESS);
	assert_int_equal(launch(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(launch(f, 1, 1, 1, 8, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
	/* The launch is deferred (lazy RPC); the next call that waits for a
	 * reply carries it along, ahead of itself, in order. */
	assert_int_equal(seen.launch_len, 0);
	{
		/* Not cuDeviceGetCount: its answer is kept and makes no round trip. */
		CUresult (*limit)(size_t *, CUlimit) = FN("cuCtxGetLimit", CUresult (*)(size_t *, CUlimit));
		size_t v = 0;

		assert_int_equal(limit(&v, CU_LIMIT_STACK_SIZE), CUDA_ERROR_NOT_SUPPORTED);
	}
	memcpy(want, &a, 4);
	memcpy(want + 8, &b, 8);
	want[16] = 'x';
	assert_int_equal(seen.launch_len, 17);
	assert_memory_equal(seen.launch_args, want, 17);
	/* The _ptsz entry point turns the NULL stream into the per-thread one. */
	assert_int_equal(seen.launch_stream, (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD);
}

static void test_copy_is_cut(void **state)
{
	CUresult (*dtoh)(void *, CUdeviceptr, size_t) =
		FN("cuMemcpyDtoH_v2", CUresult (*)(void *, CUdeviceptr, size_t));
	CUresult (*copy)(CUdeviceptr, CUdeviceptr, size_t) =
		FN("cuMemcpy", CUresult (*)(CUdeviceptr, CUdeviceptr, size_t));
	size_t n = 2 * (size_t)WIRE_COPY_PIECE + 5;
	uint8_t *buf = malloc(n);
	uint8_t small[16];

	assert_non_null(buf);
	assert_int_equal(dtoh(buf, ARENA_BASE, n), CUDA_SUCCESS);
	assert_int_equal(seen.dtoh_pieces, 3);
	for (size_t i = 0; i < n; i += 4093)
		assert_int_equal(buf[i], (uint8_t)(i * 7));
	assert_int_equal(buf[n - 1], (uint8_t)((n - 1) * 7));
	/* cuMemcpy classifies by the arena: device source, host destination. */
	assert_int_equal(copy((CUdeviceptr)(uintptr_t)small, ARENA_BASE + 100, sizeof(small)),
			 CUDA_SUCCESS);
	assert_int_equal(seen.dtoh_pieces, 4);
	assert_int_equal(small[3], (uint8_t)(103 * 7));
	free(buf);
}

static void test_host_memory_attributes(void **state)
{
	CUresult (*alloc)(void **, size_t) = FN("cuMemAllocHost_v2", CUresult (*)(void **, size_t));
	CUresult (*release)(void *) = FN("cuMemFreeHost", CUresult (*)(void *));
	CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr) =
		FN("cuPointerGetAttribute", CUresult (*)(void *, CUpointer_attribute, CUdeviceptr));
	CUresult (*attrs)(unsigned, CUpointer_attribute *, void **, CUdeviceptr) =
		FN("cuPointerGetAttributes",
		   CUresult (*)(unsigned, CUpointer_attribute *, void **, CUdeviceptr));
	CUpointer_attribute which[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
					CU_POINTER_ATTRIBUTE_HOST_POINTER };
	unsigned type = 99;
	void *host = (void *)1, *p = NULL;
	void *data[] = { &type, &host };
	int plain;

	assert_int_equal(alloc(&p, 100), CUDA_SUCCESS);
	assert_int_equal((uintptr_t)p % 4096, 0);
	assert_int_equal(attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p + 50),
			 CUDA_SUCCESS);
	assert_int_equal(type, CU_MEMORYTYPE_HOST);
	/* Memory CUDA never saw. */
	assert_int_equal(attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)&plain),
			 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(attrs(2, which, data, (CUdeviceptr)(uintptr_t)&plain), CUDA_SUCCESS);
	assert_int_equal(type, 0);
	assert_null(host);
	assert_int_equal(release(p), CUDA_SUCCESS);
	assert_int_equal(release(p), CUDA_ERROR_INVALID_VALUE);
}

typedef CUresult (*prefetch_batch_fn)(CUdeviceptr *, size_t *, size_t, CUmemLocation *, size_t *, size_t,
				      unsigned long long, CUstream);
typedef CUresult (*discard_batch_fn)(CUdeviceptr *, size_t *, size_t, unsigned long long, CUstream);

static int last_prefetch(CUdeviceptr p, size_t bytes)
{
	CUresult (*get)(void *, size_t, CUmem_range_attribute, CUdeviceptr, size_t) =
		FN("cuMemRangeGetAttribute",
		   CUresult (*)(void *, size_t, CUmem_range_attribute, CUdeviceptr, size_t));
	int v = 99;

	assert_int_equal(get(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, p, bytes),
			 CUDA_SUCCESS);
	return v;
}

/* Batched prefetch and discard are answered in the shim (guest-shim/managed.c):
 * what they refuse, and what they push and drop of the host's writes. */
/* Two modules' __managed__ variables in one page, the second running into
 * the next: one mirror holds both (a prefetch of the whole second one
 * finds one), and once the first module is unloaded a fetch of the shared
 * page no longer asks for the first variable's bytes, which the worker
 * would refuse as no longer the session's. Part of test_managed_batches:
 * cmocka puts its own SIGSEGV handler back after each test, and the shim
 * installs its handler once. */
static void managed_variables_share_a_page(void)
{
	CUresult (*get)(CUdeviceptr *, size_t *, CUmodule, const char *) =
		FN("cuModuleGetGlobal_v2", CUresult (*)(CUdeviceptr *, size_t *, CUmodule, const char *));
	CUresult (*unload)(CUmodule) = FN("cuModuleUnload", CUresult (*)(CUmodule));
	CUresult (*prefetch)(CUdeviceptr, size_t, CUdevice, CUstream) =
		FN("cuMemPrefetchAsync", CUresult (*)(CUdeviceptr, size_t, CUdevice, CUstream));
	CUstream s = (CUstream)(uintptr_t)CU_STREAM_PER_THREAD;
	CUdeviceptr a = 0, b = 0;
	size_t na = 0, nb = 0;
	volatile uint8_t *ha, *hb;
	int first, last;

	assert_int_equal(get(&a, &na, (CUmodule)(uintptr_t)MODULE_A, "a"), CUDA_SUCCESS);
	assert_int_equal(a, VAR_A);
	assert_int_equal(na, VAR_A_BYTES);
	ha = (volatile uint8_t *)(uintptr_t)a;
	ha[0] = 1;                      /* fetched, then written: dirty */
	assert_int_equal(get(&b, &nb, (CUmodule)(uintptr_t)MODULE_B, "b"), CUDA_SUCCESS);
	assert_int_equal(b, VAR_B);
	hb = (volatile uint8_t *)(uintptr_t)b;
	assert_int_equal(prefetch(b, VAR_B_BYTES, 0, s), CUDA_SUCCESS);
	assert_int_equal(prefetch(a, VAR_A_BYTES, 0, s), CUDA_SUCCESS);

	assert_int_equal(unload((CUmodule)(uintptr_t)MODULE_A), CUDA_SUCCESS);
	first = __atomic_load_n(&seen.dtoh_pieces, __ATOMIC_ACQUIRE);
	(void)hb[0];                    /* the shared page, fetched again */
	(void)hb[VAR_B_BYTES - 1];      /* and the next one */
	/* The fetches ran in the fault handler, with no call here between:
	 * read what the server saw afresh. */
	last = __atomic_load_n(&seen.dtoh_pieces, __ATOMIC_ACQUIRE);
	assert_true(last > first);
	for (int i = first; i < last; i++) {
		uint64_t src = seen.dtoh_src[i % 64], len = seen.dtoh_len[i % 64];

		assert_true(src >= VAR_B && src + len <= VAR_B + VAR_B_BYTES);
	}
}

static void test_managed_batches(void **state)
{
	CUresult (*alloc)(CUdeviceptr *, size_t, unsigned) =
		FN("cuMemAllocManaged", CUresult (*)(CUdeviceptr *, size_t, unsigned));
	prefetch_batch_fn prefetch = FN("cuMemPrefetchBatchAsync", prefetch_batch_fn);
	prefetch_batch_fn prefetch_pt = FN("cuMemPrefetchBatchAsync_ptsz", prefetch_batch_fn);
	prefetch_batch_fn both = FN("cuMemDiscardAndPrefetchBatchAsync", prefetch_batch_fn);
	discard_batch_fn discard = FN("cuMemDiscardBatchAsync", discard_batch_fn);
	discard_batch_fn discard_pt = FN("cuMemDiscardBatchAsync_ptsz", discard_batch_fn);
	const size_t pg = (size_t)sysconf(_SC_PAGESIZE), bytes = 4 * pg;
	CUmemLocation dev = { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, host = { CU_MEM_LOCATION_TYPE_HOST, 0 };
	CUmemLocation locs[2] = { host, dev }, bad_dev = { CU_MEM_LOCATION_TYPE_DEVICE, 3 };
	CUmemLocation bad_type = { CU_MEM_LOCATION_TYPE_INVALID, 0 };
	CUstream s = (CUstream)(uintptr_t)CU_STREAM_PER_THREAD, legacy = (CUstream)(uintptr_t)CU_STREAM_LEGACY;
	CUstream not_stream = (CUstream)(uintptr_t)0x0500000000000009ull;
	CUdeviceptr p = 0, d[2];
	size_t sz[2], idx[2] = { 0, 1 }, idx0 = 0, bad_idx[2] = { 0, 0 }, late_idx = 1;
	volatile uint8_t *h;
	int pushes;

	assert_int_equal(alloc(&p, bytes, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
	assert_int_equal(p, MANAGED_ADDR);
	h = (volatile uint8_t *)(uintptr_t)p;
	d[0] = p;
	d[1] = p + 2 * pg;
	sz[0] = sz[1] = pg;

	/* Refused whole, before anything is done. */
	assert_int_equal(prefetch(d, sz, 2, locs, idx, 2, 1, s), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(prefetch(NULL, sz, 2, locs, idx, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(prefetch(d, NULL, 2, locs, idx, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(prefetch(d, sz, 0, locs, idx, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(prefetch(d, sz, 2, NULL, idx, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(prefetch(d, sz, 2, locs, NULL, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(prefetch(d, sz, 2, locs, idx, 0, 0, s), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(prefetch(d, sz, 1, locs, idx, 2, 0, s), CUDA_ERROR_INVALID_VALUE);    /* more locations than operations */
	assert_int_equal(prefetch(d, sz, 2, locs, &late_idx, 1, 0, s), CUDA_ERROR_INVALID_VALUE); /* first is not 0 */
	assert_int_equal(prefetch(d, sz, 2, locs, bad_idx, 2, 0, s), CUDA_ERROR_INVALID_VALUE);  /* not increasing */
	assert_int_equal(prefetch(d, sz, 2, &bad_dev, &idx0, 1, 0, s), CUDA_ERROR_INVALID_VALUE);   /* as the H200 answers */
	assert_int_equal(prefetch(d, sz, 2, &bad_type, &idx0, 1, 0, s), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(prefetch(d, sz, 2, locs, idx, 2, 0, NULL), CUDA_ERROR_INVALID_VALUE);   /* the legacy stream */
	assert_int_equal(prefetch(d, sz, 2, locs, idx, 2, 0, legacy), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(prefetch(d, sz, 2, locs, idx, 2, 0, not_stream), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(discard(d, sz, 2, 0, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(discard(d, sz, 2, 2, s), CUDA_ERROR_INVALID_VALUE);
	/* A range outside managed memory, or past the allocation's end, fails
	 * the batch, and the good range before it is not prefetched. */
	d[1] = ARENA_BASE;
	assert_int_equal(prefetch(d, sz, 2, locs, idx, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
	d[1] = p + 3 * pg;
	sz[1] = pg + 1;
	assert_int_equal(prefetch(d, sz, 2, locs, idx, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
	sz[1] = 0;
	assert_int_equal(discard(d, sz, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(last_prefetch(p, bytes), CU_DEVICE_INVALID);
	assert_int_equal(seen.htod_pushes, 0);

	/* To the host moves nothing; to the device pushes the host's writes.
	 * The per-thread entry point takes the NULL stream. */
	h[10] = 1;                      /* every page of the 64 KiB chunk becomes dirty */
	d[1] = p + 2 * pg;
	sz[1] = pg;
	assert_int_equal(prefetch_pt(d, sz, 1, locs, idx, 1, 0, NULL), CUDA_SUCCESS);
	assert_int_equal(seen.htod_pushes, 0);
	assert_int_equal(last_prefetch(p, bytes), CU_DEVICE_CPU);
	assert_int_equal(prefetch(d, sz, 2, locs, idx, 2, 0, s), CUDA_SUCCESS);
	assert_int_equal(seen.htod_pushes, 1);  /* one run: the whole allocation */
	assert_int_equal(seen.htod_bytes, bytes);
	assert_int_equal(last_prefetch(p, bytes), 0);

	/* A discard drops the host's writes to the pages wholly inside its
	 * range and keeps those it covers in part: page 0 and 3 are pushed
	 * next, 1 and 2 are fetched from the device when touched. */
	h[10] = 2;
	d[0] = p + 100;
	sz[0] = 3 * pg;
	assert_int_equal(discard_pt(d, sz, 1, 0, NULL), CUDA_SUCCESS);
	pushes = seen.htod_pushes;
	assert_int_equal(prefetch(d, sz, 1, &dev, &idx0, 1, 0, s), CUDA_SUCCESS);
	assert_int_equal(seen.htod_pushes, pushes + 2);
	assert_int_equal(seen.htod_bytes, bytes + 2 * pg);
	assert_int_equal(h[10], 2);
	assert_int_equal(seen.dtoh_pieces, 4);
	/* The fake device's bytes tell their address. */
	assert_int_equal(h[pg + 3], (uint8_t)((MANAGED_ADDR - ARENA_BASE + pg + 3) * 7));
	assert_int_equal(seen.dtoh_pieces, 5);

	/* Discard and prefetch: the dropped pages are not pushed, the rest is.
	 * (The fetch above took pages 1 and 2; a write makes the chunk's
	 * CLEAN pages, all four, dirty.) */
	h[pg] = 3;
	h[3 * pg] = 4;
	d[0] = p;
	sz[0] = 2 * pg;
	pushes = seen.htod_pushes;
	assert_int_equal(both(d, sz, 1, &dev, &idx0, 1, 0, s), CUDA_SUCCESS);
	assert_int_equal(seen.htod_pushes, pushes + 1);
	assert_int_equal(seen.htod_bytes, bytes + 4 * pg);     /* pages 2 and 3 */
	assert_int_equal(h[3 * pg], 4);
	assert_int_equal(last_prefetch(p, bytes), 0);
	managed_variables_share_a_page();
}

static void test_worker_death(void **state)
{
	CUresult (*get)(CUdevice *, int) = FN("cuDeviceGet", CUresult (*)(CUdevice *, int));
	CUresult (*count)(int *) = FN("cuDeviceGetCount", CUresult (*)(int *));
	CUdevice d = 77;
	int n = 0;

	/* The shim reconnects once; the session comes back empty (no restore),
	 * so the call fails instead of running against missing objects. */
	assert_int_equal(get(&d, 0), CUDA_ERROR_DEVICE_UNAVAILABLE);
	assert_int_equal(seen.hello, 2);
	/* A lost session fails fast, with no further reconnect. */
	assert_int_equal(count(&n), CUDA_ERROR_DEVICE_UNAVAILABLE);
	assert_int_equal(seen.hello, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_session_and_cache),
		cmocka_unit_test(test_launch_packs_params),
		cmocka_unit_test(test_copy_is_cut),
		cmocka_unit_test(test_host_memory_attributes),
		cmocka_unit_test(test_managed_batches),
		cmocka_unit_test(test_worker_death),
	};
	struct transport_url url;
	char text[200];
	pthread_t th;
	int ret;

	if (!mkdtemp(dir))
		return 1;
	snprintf(sock_path, sizeof(sock_path), "%s/ternd.sock", dir);
	/* The plain socket: the fake ternd answers no shared-memory upgrade. */
	snprintf(text, sizeof(text), TRANSPORT_UNIX_PLAIN_SCHEME "%s", sock_path);
	if (transport_url_parse(text, &url))
		return 1;
	listen_fd = transport_listen(&url);
	if (listen_fd < 0)
		return 1;
	pthread_create(&th, NULL, server, NULL);
	setenv("TERN_SERVER", text, 1);
	setenv("TERN_SESSION", "test-session", 1);
	setenv("TERN_LOG_LEVEL", "error", 1);
	lib = dlopen(getenv("SHIM_LIB"), RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	pthread_join(th, NULL);
	close(listen_fd);
	unlink(sock_path);
	rmdir(dir);
	return ret;
}
