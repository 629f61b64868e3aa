/* The shim's client side against a fake ternd: a thread that speaks the wire
 * protocol over a unix socket. Checks the hello exchange, the attribute
 * cache, parameter packing for launches, cutting of large copies, host
 * memory attributes, and that a worker that dies mid-run gives the app an
 * error instead of a crash. */
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

static void *lib;
static char dir[] = "/tmp/tern-shim-rpc-XXXXXX";
static char sock_path[128];
static int listen_fd;

/* What the fake server saw; read after the call that caused it returned. */
static struct {
	int hello, attrs_fetches, dtoh_pieces;
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
			uint8_t vals[4 * 512];

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
			seen.dtoh_pieces++;
			wire_put_u32(&m, CUDA_SUCCESS);
			wire_put_blob(&m, (struct wire_blob){ data, (uint32_t)r.bytes });
			break;
		}
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
	assert_int_equal(launch(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
	/* The launch is deferred (lazy RPC); the next call that waits for a
	 * reply carries it along, ahead of itself, in order. */
	assert_int_equal(seen.launch_len, 0);
	{
		CUresult (*count)(int *) = FN("cuDeviceGetCount", CUresult (*)(int *));
		int n = 0;

		assert_int_equal(count(&n), CUDA_SUCCESS);
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
		cmocka_unit_test(test_worker_death),
	};
	struct transport_url url;
	char text[200];
	pthread_t th;
	int ret;

	if (!mkdtemp(dir))
		return 1;
	snprintf(sock_path, sizeof(sock_path), "%s/ternd.sock", dir);
	snprintf(text, sizeof(text), "unix:%s", sock_path);
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
