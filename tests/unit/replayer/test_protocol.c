/* ternd against a hostile guest: malformed messages, unknown calls, bad
 * handles and pointers, bad tokens. Each must get an error reply while the
 * worker (and ternd) stay up. Starts its own ternd with the sim backend.
 *
 *     test_protocol PATH/TO/ternd
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "shm_chan.h"
#include "transport.h"
#include "array_desc.h"
#include "wire.h"
#include "wire_calls.h"
#include <cuda.h>

static const char *ternd_path;
static char dir[64], sock_url[128], tcp_url[64], control[128];
static pid_t ternd_pid;

struct reply {
	struct wire_header h;
	uint32_t status;
	uint8_t payload[4096];
	uint32_t len;
};

static int request_send(int fd, uint32_t call, uint64_t seq, const struct wire_msg *body_in,
			uint32_t fake_len)
{
	struct wire_msg m = *body_in;
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .call = call, .seq = seq };
	int n = wire_msg_finish(&m, &h, iov);

	if (fake_len != UINT32_MAX) {
		/* Rewrite the length field in place: the header lies about the payload. */
		uint8_t *raw = iov[0].iov_base;

		raw[12] = (uint8_t)fake_len;
		raw[13] = (uint8_t)(fake_len >> 8);
		raw[14] = (uint8_t)(fake_len >> 16);
		raw[15] = (uint8_t)(fake_len >> 24);
	}
	return wire_send(fd, iov, n);
}

static int reply_read(int fd, struct reply *r)
{
	uint8_t raw[WIRE_HEADER_SIZE];
	int ret = wire_recv_exact(fd, raw, sizeof(raw));

	if (ret)
		return ret;
	ret = wire_header_decode(raw, &r->h);
	if (ret)
		return ret;
	if (r->h.length > sizeof(r->payload) || r->h.length < 4)
		return -EPROTO;
	ret = wire_recv_exact(fd, r->payload, r->h.length);
	if (ret)
		return ret;
	memcpy(&r->status, r->payload, 4);
	r->len = r->h.length;
	return 0;
}

static int session_open(const char *url_text, const char *token, uint32_t *status)
{
	struct transport_url url;
	struct wire_hello_req hello = { .protocol = WIRE_VERSION, .pid = (uint32_t)getpid() };
	struct wire_msg m;
	struct reply r;
	int fd;

	assert_int_equal(transport_url_parse(url_text, &url), 0);
	fd = transport_connect(&url);
	assert_true(fd >= 0);
	static int opened;

	/* A session id of its own: the worker of the previous one may still be
	 * ending, and a live session id is refused to a second connection. */
	snprintf(hello.session, sizeof(hello.session), "protocol-test-%d-%d", (int)getpid(), ++opened);
	snprintf(hello.host, sizeof(hello.host), "localhost");
	hello.token = (struct wire_blob){ (const uint8_t *)token, (uint32_t)strlen(token) };
	wire_msg_init(&m);
	wire_hello_req_encode(&m, &hello);
	assert_int_equal(request_send(fd, WIRE_CALL_HELLO, 1, &m, UINT32_MAX), 0);
	wire_msg_release(&m);
	assert_int_equal(reply_read(fd, &r), 0);
	assert_int_equal(r.h.call, WIRE_CALL_HELLO);
	assert_true(r.h.flags & WIRE_F_REPLY);
	*status = r.status;
	return fd;
}

/* A call that must still work: the worker is alive and in sync. */
static void assert_alive(int fd, uint64_t seq)
{
	struct wire_msg m;
	struct reply r;
	int32_t count;

	wire_msg_init(&m);
	wire_msg_reset(&m);
	assert_int_equal(request_send(fd, WIRE_CALL_DEVICE_GET_COUNT, seq, &m, UINT32_MAX), 0);
	wire_msg_release(&m);
	assert_int_equal(reply_read(fd, &r), 0);
	assert_int_equal(r.h.seq, seq);
	assert_int_equal(r.status, CUDA_SUCCESS);
	memcpy(&count, r.payload + 4, 4);
	assert_int_equal(count, 1);
}

static uint32_t call_status(int fd, uint32_t call, uint64_t seq, struct wire_msg *m, uint32_t fake_len,
			    uint16_t *flags)
{
	struct reply r;

	assert_int_equal(request_send(fd, call, seq, m, fake_len), 0);
	assert_int_equal(reply_read(fd, &r), 0);
	assert_int_equal(r.h.seq, seq);
	if (flags)
		*flags = r.h.flags;
	return r.status;
}

static void test_malformed(void **state)
{
	struct wire_msg m;
	uint32_t status;
	uint16_t flags;
	int fd = session_open(sock_url, "", &status);

	assert_int_equal(status, CUDA_SUCCESS);
	assert_alive(fd, 2);

	/* Truncated: mem_alloc needs 8 bytes of payload. */
	wire_msg_init(&m);
	wire_put_u32(&m, 1 << 20);
	assert_int_equal(call_status(fd, WIRE_CALL_MEM_ALLOC, 3, &m, UINT32_MAX, &flags),
			 CUDA_ERROR_INVALID_VALUE);
	assert_true(flags & WIRE_F_ERROR);
	assert_alive(fd, 4);

	/* Trailing garbage is as bad as a short payload. */
	wire_msg_reset(&m);
	wire_put_u64(&m, 1 << 20);
	wire_put_u32(&m, 0xdead);
	assert_int_equal(call_status(fd, WIRE_CALL_MEM_ALLOC, 5, &m, UINT32_MAX, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_alive(fd, 6);

	/* Unknown call id. */
	wire_msg_reset(&m);
	wire_put_u64(&m, 0);
	assert_int_equal(call_status(fd, 60000, 7, &m, UINT32_MAX, &flags), CUDA_ERROR_NOT_SUPPORTED);
	assert_true(flags & WIRE_F_ERROR);
	assert_alive(fd, 8);

	/* Bad handles of every shape: unknown, wrong kind, never issued. */
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x0600000000000999ull);
	assert_int_equal(call_status(fd, WIRE_CALL_STREAM_SYNCHRONIZE, 9, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x0700000000000001ull);      /* an event handle where a stream goes */
	assert_int_equal(call_status(fd, WIRE_CALL_STREAM_QUERY, 10, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x0200000000000001ull);
	wire_put_str(&m, "no_such_kernel");
	assert_int_equal(call_status(fd, WIRE_CALL_MODULE_GET_FUNCTION, 11, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	assert_alive(fd, 12);

	/* Device pointers outside any allocation. */
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x1000);       /* src */
	wire_put_u64(&m, 64);           /* bytes */
	wire_put_u64(&m, 0);            /* stream */
	wire_put_u32(&m, 0);            /* async */
	assert_int_equal(call_status(fd, WIRE_CALL_MEMCPY_DTOH, 13, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	wire_msg_reset(&m);
	wire_put_u64(&m, 0xffffffffffffff00ull);        /* dst near the top: no wrap-around */
	wire_put_u32(&m, 0);
	wire_put_u32(&m, 4);
	wire_put_u64(&m, 1ull << 62);
	wire_put_u64(&m, 0);
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_MEMSET, 14, &m, UINT32_MAX, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_alive(fd, 15);

	/* Oversized: the header claims more than the cap; the payload is sent and dropped. */
	{
		static uint8_t junk[1 << 20];
		uint8_t raw[WIRE_HEADER_SIZE];
		struct wire_header h = { WIRE_MAGIC, WIRE_VERSION, 0, WIRE_CALL_MEM_ALLOC,
					 WIRE_PAYLOAD_MAX + (1u << 20), 16, 0 };
		struct iovec iov = { raw, sizeof(raw) };
		struct reply r;

		wire_header_encode(raw, &h);
		assert_int_equal(wire_send(fd, &iov, 1), 0);
		for (uint32_t sent = 0; sent < h.length; sent += sizeof(junk)) {
			iov = (struct iovec){ junk, sizeof(junk) };
			assert_int_equal(wire_send(fd, &iov, 1), 0);
		}
		assert_int_equal(reply_read(fd, &r), 0);
		assert_int_equal(r.status, CUDA_ERROR_INVALID_VALUE);
	}
	assert_alive(fd, 17);

	/* Bad magic: framing is lost, so an error reply and the connection closes. */
	{
		uint8_t raw[WIRE_HEADER_SIZE] = { 'n', 'o', 'p', 'e' };
		struct iovec iov = { raw, sizeof(raw) };
		struct reply r;

		assert_int_equal(wire_send(fd, &iov, 1), 0);
		assert_int_equal(reply_read(fd, &r), 0);
		assert_int_equal(r.status, CUDA_ERROR_INVALID_VALUE);
		assert_int_equal(reply_read(fd, &r), -ECONNRESET);
	}
	wire_msg_release(&m);
	close(fd);

	/* ternd still serves new sessions. */
	fd = session_open(sock_url, "", &status);
	assert_int_equal(status, CUDA_SUCCESS);
	assert_alive(fd, 2);
	close(fd);
}

/* The context the shm test's requests run in (0 until retained). */
static uint64_t shm_ctx;

/* One request and its reply through the shared-memory rings. */
static uint32_t shm_call(struct shm_chan *c, uint32_t call, uint64_t seq, struct wire_msg *m,
			 struct reply *r)
{
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .call = call, .seq = seq, .ctx = shm_ctx };
	uint8_t raw[WIRE_HEADER_SIZE];
	int n = wire_msg_finish(m, &h, iov);

	assert_true(n > 0);
	assert_int_equal(shm_chan_send(c, iov, n), 0);
	assert_int_equal(shm_chan_recv(c, raw, sizeof(raw)), 0);
	assert_int_equal(wire_header_decode(raw, &r->h), 0);
	assert_int_equal(r->h.seq, seq);
	assert_true(r->h.length >= 4 && r->h.length <= sizeof(r->payload));
	assert_int_equal(shm_chan_recv(c, r->payload, r->h.length), 0);
	memcpy(&r->status, r->payload, 4);
	r->len = r->h.length;
	return r->status;
}

static uint32_t host_share(struct shm_chan *c, uint64_t seq, uint64_t addr, uint64_t bytes, int memfd,
			   uint64_t *device_address)
{
	struct wire_mem_host_share_req req = { .address = addr, .bytes = bytes };
	struct wire_msg m;
	struct reply r;
	uint32_t status;

	if (memfd >= 0)
		assert_int_equal(shm_fds_send(c->sock, &memfd, 1), 0);
	wire_msg_init(&m);
	wire_mem_host_share_req_encode(&m, &req);
	status = shm_call(c, WIRE_CALL_MEM_HOST_SHARE, seq, &m, &r);
	wire_msg_release(&m);
	if (status == CUDA_SUCCESS && device_address)
		memcpy(device_address, r.payload + 4, 8);
	return status;
}

/* A guest on shm lies about its host buffers and copies: each request fails
 * alone, and the worker goes on serving the session. */
static void test_shm_hostile(void **state)
{
	struct wire_shm_attach_req attach = { .ring_bytes = SHM_RING_MIN };
	struct wire_mem_alloc_req alloc = { .bytes = 65536 };
	struct shm_chan c;
	struct wire_msg m;
	struct reply r;
	uint64_t seq = 1, dev = 0, dptr;
	const uint64_t bytes = 65536;
	uint32_t status;
	int fds[SHM_CHAN_FDS], fd, memfd;
	uint8_t *buf;

	(void)state;
	fd = session_open(sock_url, "", &status);
	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	wire_shm_attach_req_encode(&m, &attach);
	assert_int_equal(request_send(fd, WIRE_CALL_SHM_ATTACH, 0, &m, UINT32_MAX), 0);
	wire_msg_release(&m);
	assert_int_equal(shm_chan_create(&c, SHM_RING_MIN, fd), 0);
	shm_chan_fds(&c, fds);
	assert_int_equal(shm_fds_send(fd, fds, SHM_CHAN_FDS), 0);
	assert_int_equal(reply_read(fd, &r), 0);
	assert_int_equal(r.status, CUDA_SUCCESS);
	{
		struct wire_primary_ctx_retain_req req = { .device = 0 };

		wire_msg_init(&m);
		wire_primary_ctx_retain_req_encode(&m, &req);
		assert_int_equal(shm_call(&c, WIRE_CALL_PRIMARY_CTX_RETAIN, seq++, &m, &r), CUDA_SUCCESS);
		wire_msg_release(&m);
		memcpy(&shm_ctx, r.payload + 4, 8);
	}

	/* A share whose memfd never comes (the worker waits 2 s for it). */
	assert_int_equal(host_share(&c, seq++, 0x310000000000ull, bytes, -1, NULL), CUDA_ERROR_INVALID_VALUE);
	/* Not page aligned, empty, wrapping: refused before any memfd is read. */
	assert_int_equal(host_share(&c, seq++, 0x310000000100ull, bytes, -1, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(host_share(&c, seq++, 0x310000000000ull, 0, -1, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(host_share(&c, seq++, UINT64_MAX - 4095, 8192, -1, NULL), CUDA_ERROR_INVALID_VALUE);
	/* An unsealed memfd (the guest could shrink it under the worker). */
	memfd = memfd_create("unsealed", MFD_CLOEXEC);
	assert_int_equal(ftruncate(memfd, (off_t)bytes), 0);
	assert_int_equal(host_share(&c, seq++, 0x310000000000ull, bytes, memfd, NULL), CUDA_ERROR_INVALID_VALUE);
	close(memfd);
	/* Sealed, but smaller than claimed. */
	memfd = shm_memfd_create("small", 4096);
	assert_int_equal(host_share(&c, seq++, 0x310000000000ull, bytes, memfd, NULL), CUDA_ERROR_INVALID_VALUE);
	close(memfd);

	/* A proper buffer, then copies that stray outside it or the device memory. */
	memfd = shm_memfd_create("good", bytes);
	buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	assert_true(buf != MAP_FAILED);
	assert_int_equal(host_share(&c, seq++, (uintptr_t)buf, bytes, memfd, &dev), CUDA_SUCCESS);
	close(memfd);
	assert_true(dev != 0);
	/* Overlapping the shared one. */
	assert_int_equal(host_share(&c, seq++, (uintptr_t)buf + 4096, bytes, -1, NULL), CUDA_ERROR_INVALID_VALUE);
	wire_msg_init(&m);
	wire_mem_alloc_req_encode(&m, &alloc);
	assert_int_equal(shm_call(&c, WIRE_CALL_MEM_ALLOC, seq++, &m, &r), CUDA_SUCCESS);
	wire_msg_release(&m);
	memcpy(&dptr, r.payload + 4, 8);
	{
		struct { uint64_t src, bytes, dst; uint32_t want; } cases[] = {
			{ (uintptr_t)buf + 4096, bytes, dptr, CUDA_ERROR_INVALID_VALUE },     /* past the buffer */
			{ (uintptr_t)buf - 4096, 4096, dptr, CUDA_ERROR_INVALID_VALUE },      /* before it */
			{ (uintptr_t)buf, UINT64_MAX, dptr, CUDA_ERROR_INVALID_VALUE },       /* wraps */
			{ (uintptr_t)buf, 4096, dptr + bytes, CUDA_ERROR_INVALID_VALUE },     /* device side outside */
			{ (uintptr_t)buf, bytes, dptr, CUDA_SUCCESS },
		};

		for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			struct wire_memcpy_htod_shared_req req = {
				.dst = cases[i].dst, .src = cases[i].src, .bytes = cases[i].bytes,
			};

			for (uint64_t j = 0; j < bytes; j++)
				buf[j] = (uint8_t)(j * 13 + i);
			wire_msg_init(&m);
			wire_memcpy_htod_shared_req_encode(&m, &req);
			assert_int_equal(shm_call(&c, WIRE_CALL_MEMCPY_HTOD_SHARED, seq++, &m, &r), cases[i].want);
			wire_msg_release(&m);
		}
	}
	/* The good copy landed: a plain copy brings the same bytes back. */
	{
		struct wire_memcpy_dtoh_req req = { .src = dptr, .bytes = 2048 };

		wire_msg_init(&m);
		wire_memcpy_dtoh_req_encode(&m, &req);
		assert_int_equal(shm_call(&c, WIRE_CALL_MEMCPY_DTOH, seq++, &m, &r), CUDA_SUCCESS);
		wire_msg_release(&m);
		/* status, blob length, bytes */
		assert_memory_equal(r.payload + 8, buf, 2048);
	}
	/* Scribbling over the rings ends this session, and only it. */
	shm_chan_fds(&c, fds);
	munmap(buf, bytes);
	{
		struct iovec junk = { (void *)"\xff\xff\xff\xff", 4 };
		uint32_t st;
		int fd2;

		assert_int_equal(shm_chan_send(&c, &junk, 1), 0);
		fd2 = session_open(sock_url, "", &st);
		assert_int_equal(st, CUDA_SUCCESS);
		assert_alive(fd2, 2);
		close(fd2);
	}
	shm_chan_close(&c);
	close(fd);
}

/* The listing, owner and pool calls against handles that are unknown, of
 * the wrong kind or never issued, and addresses never allocated: each
 * request fails alone. */
static void test_owner_queries(void **state)
{
	static const struct {
		uint32_t call;
		uint64_t handle;
		uint32_t status;
	} cases[] = {
		{ WIRE_CALL_MODULE_GET_FUNCTION_COUNT, 0x0200000000000777ull, CUDA_ERROR_INVALID_HANDLE },
		{ WIRE_CALL_LIBRARY_GET_KERNEL_COUNT, 0x0200000000000001ull, CUDA_ERROR_INVALID_HANDLE },
		{ WIRE_CALL_STREAM_GET_INFO, 0x0600000000000999ull, CUDA_ERROR_INVALID_HANDLE },
		{ WIRE_CALL_STREAM_GET_INFO, 0x0700000000000001ull, CUDA_ERROR_INVALID_HANDLE },
		{ WIRE_CALL_FUNC_GET_MODULE, 0x0500000000000001ull, CUDA_ERROR_INVALID_HANDLE },
		{ WIRE_CALL_KERNEL_GET_LIBRARY, 0x0400000000000001ull, CUDA_ERROR_INVALID_HANDLE },
		{ WIRE_CALL_KERNEL_GET_LIBRARY, 0, CUDA_ERROR_INVALID_HANDLE },
	};
	uint64_t seq = 1;
	uint32_t status;
	struct wire_msg m;
	int fd = session_open(sock_url, "", &status);

	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		wire_msg_reset(&m);
		wire_put_u64(&m, cases[i].handle);
		assert_int_equal(call_status(fd, cases[i].call, ++seq, &m, UINT32_MAX, NULL),
				 cases[i].status);
	}
	/* Listing needs its count too: without it the request does not decode. */
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x0200000000000001ull);
	assert_int_equal(call_status(fd, WIRE_CALL_MODULE_ENUMERATE_FUNCTIONS, ++seq, &m, UINT32_MAX,
				     NULL), CUDA_ERROR_INVALID_VALUE);
	wire_put_u32(&m, 0xffffffffu);
	assert_int_equal(call_status(fd, WIRE_CALL_MODULE_ENUMERATE_FUNCTIONS, ++seq, &m, UINT32_MAX,
				     NULL), CUDA_ERROR_INVALID_HANDLE);
	/* Pools and their blocks: unknown pools, wrong kinds, stray addresses. */
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x0800000000000999ull);
	assert_int_equal(call_status(fd, WIRE_CALL_MEM_POOL_DESTROY, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	wire_put_u32(&m, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
	assert_int_equal(call_status(fd, WIRE_CALL_MEM_POOL_GET_ATTRIBUTE, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	wire_msg_reset(&m);
	wire_put_u64(&m, 4096);                         /* bytes */
	wire_put_u64(&m, 0x0600000000000001ull);        /* a stream where a pool goes */
	wire_put_u64(&m, 0);                            /* stream */
	assert_int_equal(call_status(fd, WIRE_CALL_MEM_ALLOC_ASYNC, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x1000);                       /* never allocated */
	wire_put_u64(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_MEM_FREE_ASYNC, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	/* The special streams belong to the current context (none here). */
	wire_msg_reset(&m);
	wire_put_u64(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_STREAM_GET_INFO, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_CONTEXT);
	wire_msg_release(&m);
	assert_alive(fd, ++seq);
	close(fd);
}

/* Arrays, 2D/3D copies and texture objects: every geometry and handle is
 * checked before the backend sees it (exec_array.c). */
static void test_arrays_hostile(void **state)
{
	uint8_t res[ARRAY_RES_BYTES], tex[ARRAY_TEX_BYTES] = { 0 };
	struct array_res r = { .type = CU_RESOURCE_TYPE_ARRAY, .handle = 0x0c00000000000777ull };
	uint64_t seq = 1;
	uint32_t status;
	struct wire_msg m;
	int fd = session_open(sock_url, "", &status);

	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
#define CALL(name, want, ...)                                                          \
	do {                                                                           \
		struct wire_##name##_req req_ = { __VA_ARGS__ };                        \
		wire_msg_reset(&m);                                                    \
		wire_##name##_req_encode(&m, &req_);                                   \
		assert_int_equal(call_status(fd, WIRE_CALL_##name##_ID, ++seq, &m, UINT32_MAX, NULL), want); \
	} while (0)
#define WIRE_CALL_memcpy_3d_ID WIRE_CALL_MEMCPY_3D
#define WIRE_CALL_memcpy_3d_htod_ID WIRE_CALL_MEMCPY_3D_HTOD
#define WIRE_CALL_memcpy_3d_dtoh_ID WIRE_CALL_MEMCPY_3D_DTOH
#define WIRE_CALL_memset_2d_ID WIRE_CALL_MEMSET_2D
#define WIRE_CALL_mem_alloc_pitch_ID WIRE_CALL_MEM_ALLOC_PITCH
#define WIRE_CALL_array_create_ID WIRE_CALL_ARRAY_CREATE
#define WIRE_CALL_array_destroy_ID WIRE_CALL_ARRAY_DESTROY
#define WIRE_CALL_mipmapped_array_get_level_ID WIRE_CALL_MIPMAPPED_ARRAY_GET_LEVEL
#define WIRE_CALL_tex_object_create_ID WIRE_CALL_TEX_OBJECT_CREATE
#define WIRE_CALL_tex_object_destroy_ID WIRE_CALL_TEX_OBJECT_DESTROY
#define WIRE_CALL_surf_object_get_desc_ID WIRE_CALL_SURF_OBJECT_GET_DESC
	/* Device ends outside any allocation, wrapping, or with a short pitch. */
	CALL(memcpy_3d, CUDA_ERROR_INVALID_VALUE, .src_type = CU_MEMORYTYPE_DEVICE, .src = 0x1000,
	     .dst_type = CU_MEMORYTYPE_DEVICE, .dst = 0x2000, .width = 64, .height = 1, .depth = 1);
	CALL(memcpy_3d, CUDA_ERROR_INVALID_VALUE, .src_type = CU_MEMORYTYPE_DEVICE, .src = 0x1000,
	     .src_y = UINT64_MAX / 2, .src_pitch = 4, .dst_type = CU_MEMORYTYPE_DEVICE, .dst = 0x2000,
	     .width = 64, .height = 2, .depth = 1);
	CALL(memcpy_3d, CUDA_ERROR_INVALID_VALUE, .src_type = 7, .dst_type = CU_MEMORYTYPE_DEVICE,
	     .width = 1, .height = 1, .depth = 1);
	/* Array ends name arrays that do not exist, or wrong-kind handles. */
	CALL(memcpy_3d, CUDA_ERROR_INVALID_HANDLE, .src_type = CU_MEMORYTYPE_ARRAY, .src = 0x0c00000000000777ull,
	     .dst_type = CU_MEMORYTYPE_ARRAY, .dst = 0x0600000000000001ull, .width = 4, .height = 1, .depth = 1);
	/* Host data that disagrees with the extent, extents that overflow. */
	{
		static const uint8_t five[5];

		CALL(memcpy_3d_htod, CUDA_ERROR_INVALID_VALUE, .dst_type = CU_MEMORYTYPE_DEVICE, .dst = 0x1000,
		     .width = 10, .height = 2, .depth = 1, .data = { five, 5 });
	}
	CALL(memcpy_3d_dtoh, CUDA_ERROR_INVALID_VALUE, .src_type = CU_MEMORYTYPE_DEVICE, .src = 0x1000,
	     .width = 1ull << 40, .height = 1ull << 40, .depth = 1);
	CALL(memcpy_3d_dtoh, CUDA_ERROR_INVALID_VALUE, .src_type = CU_MEMORYTYPE_DEVICE, .src = 0x1000,
	     .width = 64ull << 20, .height = 1, .depth = 1);
	CALL(memset_2d, CUDA_ERROR_INVALID_VALUE, .dst = 0x1000, .pitch = 1, .width = 4, .columns = 16,
	     .rows = 1ull << 60);
	CALL(memset_2d, CUDA_ERROR_INVALID_VALUE, .dst = 0x1000, .width = 3, .columns = 1, .rows = 1);
	CALL(mem_alloc_pitch, CUDA_ERROR_INVALID_VALUE, .width = UINT64_MAX, .height = 2, .element_size = 4);
	CALL(mem_alloc_pitch, CUDA_ERROR_INVALID_VALUE, .width = 64, .height = 2, .element_size = 3);
	/* Arrays too large, of unknown formats, sparse. */
	CALL(array_create, CUDA_ERROR_INVALID_VALUE, .format = CU_AD_FORMAT_FLOAT, .channels = 4,
	     .width = 1ull << 40, .height = 1ull << 40);
	CALL(array_create, CUDA_ERROR_INVALID_VALUE, .format = CU_AD_FORMAT_FLOAT, .channels = 3, .width = 8);
	CALL(array_create, CUDA_ERROR_NOT_SUPPORTED, .format = 0x99, .channels = 1, .width = 8);
	CALL(array_create, CUDA_ERROR_NOT_SUPPORTED, .format = CU_AD_FORMAT_FLOAT, .channels = 1, .width = 8,
	     .height = 8, .flags = CUDA_ARRAY3D_SPARSE);
	CALL(array_destroy, CUDA_ERROR_INVALID_HANDLE, .array = 0x0c00000000000001ull);
	CALL(mipmapped_array_get_level, CUDA_ERROR_INVALID_HANDLE, .mipmap = 0x0c00000000000001ull);
	/* Texture objects: malformed descriptions, unknown arrays, memory outside. */
	array_res_encode(&r, res);
	CALL(tex_object_create, CUDA_ERROR_INVALID_VALUE, .resource = { res, 7 }, .texture = { tex, sizeof(tex) });
	CALL(tex_object_create, CUDA_ERROR_INVALID_HANDLE, .resource = { res, sizeof(res) },
	     .texture = { tex, sizeof(tex) });
	r = (struct array_res){ .type = CU_RESOURCE_TYPE_LINEAR, .handle = 0x1000, .format = CU_AD_FORMAT_FLOAT,
				.channels = 1, .width = 4096 };
	array_res_encode(&r, res);
	CALL(tex_object_create, CUDA_ERROR_INVALID_VALUE, .resource = { res, sizeof(res) },
	     .texture = { tex, sizeof(tex) });
	res[0] = 0x77;          /* unknown resource type */
	CALL(tex_object_create, CUDA_ERROR_INVALID_VALUE, .resource = { res, sizeof(res) },
	     .texture = { tex, sizeof(tex) });
	CALL(tex_object_destroy, CUDA_ERROR_INVALID_VALUE, .object = 12345);
	CALL(surf_object_get_desc, CUDA_ERROR_INVALID_VALUE, .object = 1);
#undef CALL
	assert_alive(fd, ++seq);
	wire_msg_release(&m);
	close(fd);
}

static void test_token(void **state)
{
	uint32_t status;
	int fd = session_open(tcp_url, "wrong-token", &status);

	assert_int_equal(status, CUDA_ERROR_NOT_PERMITTED);
	close(fd);
	fd = session_open(tcp_url, "", &status);
	assert_int_equal(status, CUDA_ERROR_NOT_PERMITTED);
	close(fd);
	fd = session_open(tcp_url, "s3cret-token", &status);
	assert_int_equal(status, CUDA_SUCCESS);
	assert_alive(fd, 2);
	close(fd);
}

static int ternd_start(void **state)
{
	char token_file[128], sock[128];
	FILE *f;
	int port = transport_tcp_free_port();

	snprintf(dir, sizeof(dir), "/tmp/tern-protocol-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(sock, sizeof(sock), "%s/ternd.sock", dir);
	snprintf(sock_url, sizeof(sock_url), "unix:%s", sock);
	snprintf(tcp_url, sizeof(tcp_url), "tcp://127.0.0.1:%d", port);
	snprintf(control, sizeof(control), "%s/control.sock", dir);
	snprintf(token_file, sizeof(token_file), "%s/token", dir);
	f = fopen(token_file, "w");
	fputs("s3cret-token\n", f);
	fclose(f);
	ternd_pid = fork();
	if (ternd_pid == 0) {
		execl(ternd_path, "ternd", "--backend", "sim", "--listen", sock_url, "--listen", tcp_url,
		      "--control", control, "--token-file", token_file, "--log-level", "warn",
		      "--sim-memory", "1G", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 200 && access(control, F_OK); i++)
		usleep(10000);
	return access(control, F_OK);
}

static int ternd_stop(void **state)
{
	int status = 0;

	kill(ternd_pid, SIGTERM);
	waitpid(ternd_pid, &status, 0);
	/* A clean SIGTERM: exit status 0 and the sockets removed. */
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !access(control, F_OK))
		return -1;
	{
		char token_file[128];

		snprintf(token_file, sizeof(token_file), "%s/token", dir);
		unlink(token_file);
	}
	rmdir(dir);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_token),
		cmocka_unit_test(test_owner_queries),
		cmocka_unit_test(test_arrays_hostile),
		cmocka_unit_test(test_shm_hostile),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/TO/ternd\n", argv[0]);
		return 2;
	}
	ternd_path = argv[1];
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, ternd_start, ternd_stop);
}
