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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "shm_chan.h"
#include "transport.h"
#include "array_desc.h"
#include "wire.h"
#include "wire_calls.h"
#include <cuda.h>
#include "test_protocol.h"

static const char *ternd_path;
static char dir[64], tcp_url[64], control[128];
char sock_url[128];
static pid_t ternd_pid;
uint64_t sock_ctx;


static int request_send(int fd, uint32_t call, uint64_t seq, const struct wire_msg *body_in,
			uint32_t fake_len)
{
	struct wire_msg m = *body_in;
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .call = call, .seq = seq, .ctx = sock_ctx };
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

int session_open(const char *url_text, const char *token, uint32_t *status)
{
	struct transport_url url;
	struct wire_hello_req hello = { .protocol = WIRE_PROTOCOL, .pid = (uint32_t)getpid() };
	uint8_t nonce[AUTH_NONCE_BYTES], proof[AUTH_PROOF_BYTES];
	struct auth_token tok = { 0 };
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
	/* The challenge's nonce, then the token's proof bound to it. */
	wire_msg_init(&m);
	assert_int_equal(request_send(fd, WIRE_CALL_CHALLENGE, 0, &m, UINT32_MAX), 0);
	assert_int_equal(reply_read(fd, &r), 0);
	assert_int_equal(r.status, CUDA_SUCCESS);
	assert_int_equal(r.len, 4 + 4 + AUTH_NONCE_BYTES);
	memcpy(nonce, r.payload + 8, AUTH_NONCE_BYTES);
	tok.len = (uint32_t)strlen(token);
	memcpy(tok.bytes, token, tok.len);
	auth_token_proof(&tok, nonce, hello.session, proof);
	if (tok.len)
		hello.token_proof = (struct wire_blob){ proof, sizeof(proof) };
	wire_msg_reset(&m);
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
void assert_alive(int fd, uint64_t seq)
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

uint32_t call_status(int fd, uint32_t call, uint64_t seq, struct wire_msg *m, uint32_t fake_len,
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

/* A session moved onto rings of SHM_RING_MIN (*@c) with its primary
 * context current; its socket. *@seq is the next request's number. */
static int shm_session_open(struct shm_chan *c, uint64_t *seq)
{
	struct wire_shm_attach_req attach = { .ring_bytes = SHM_RING_MIN };
	struct wire_primary_ctx_retain_req retain = { .device = 0 };
	int fds[SHM_CHAN_FDS], fd;
	struct wire_msg m;
	struct reply r;
	uint32_t status;

	fd = session_open(sock_url, "", &status);
	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	wire_shm_attach_req_encode(&m, &attach);
	assert_int_equal(request_send(fd, WIRE_CALL_SHM_ATTACH, 0, &m, UINT32_MAX), 0);
	wire_msg_release(&m);
	assert_int_equal(shm_chan_create(c, SHM_RING_MIN, fd), 0);
	shm_chan_fds(c, fds);
	assert_int_equal(shm_fds_send(fd, fds, SHM_CHAN_FDS), 0);
	assert_int_equal(reply_read(fd, &r), 0);
	assert_int_equal(r.status, CUDA_SUCCESS);
	shm_ctx = 0;
	wire_msg_init(&m);
	wire_primary_ctx_retain_req_encode(&m, &retain);
	assert_int_equal(shm_call(c, WIRE_CALL_PRIMARY_CTX_RETAIN, (*seq)++, &m, &r), CUDA_SUCCESS);
	wire_msg_release(&m);
	memcpy(&shm_ctx, r.payload + 4, 8);
	return fd;
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
	struct wire_mem_alloc_req alloc = { .bytes = 65536 };
	struct shm_chan c;
	struct wire_msg m;
	struct reply r;
	uint64_t seq = 1, dev = 0, dptr;
	const uint64_t bytes = 65536;
	int fds[SHM_CHAN_FDS], fd, memfd;
	uint8_t *buf;

	(void)state;
	fd = shm_session_open(&c, &seq);

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

/* A staging attach: the memfd (or none) first, as the shim sends it. */
static uint32_t staging_attach(struct shm_chan *c, uint64_t seq, int memfd, uint64_t header_bytes, uint64_t bytes,
			       uint32_t slots)
{
	struct wire_staging_attach_tickets_req req = { .header_bytes = header_bytes, .bytes = bytes, .slots = slots };
	struct wire_msg m;
	struct reply r;
	uint32_t status;

	if (memfd >= 0)
		assert_int_equal(shm_fds_send(c->sock, &memfd, 1), 0);
	wire_msg_init(&m);
	wire_staging_attach_tickets_req_encode(&m, &req);
	status = shm_call(c, WIRE_CALL_STAGING_ATTACH_TICKETS, seq, &m, &r);
	wire_msg_release(&m);
	return status;
}

static uint32_t staged_piece(struct shm_chan *c, uint64_t seq, bool to_device, uint64_t dev, uint32_t slot,
			     uint64_t bytes, uint64_t copy_bytes, uint32_t ticket)
{
	struct wire_msg m;
	struct reply r;
	uint32_t status;

	wire_msg_init(&m);
	if (to_device) {
		struct wire_memcpy_htod_slot_req req = {
			.dst = dev, .slot = slot, .bytes = bytes, .copy_bytes = copy_bytes, .ticket = ticket,
		};

		wire_memcpy_htod_slot_req_encode(&m, &req);
		status = shm_call(c, WIRE_CALL_MEMCPY_HTOD_SLOT, seq, &m, &r);
	} else {
		struct wire_memcpy_dtoh_slot_req req = {
			.src = dev, .slot = slot, .bytes = bytes, .copy_bytes = copy_bytes, .ticket = ticket,
		};

		wire_memcpy_dtoh_slot_req_encode(&m, &req);
		status = shm_call(c, WIRE_CALL_MEMCPY_DTOH_SLOT, seq, &m, &r);
	}
	wire_msg_release(&m);
	return status;
}

static uint32_t staging_wait(struct shm_chan *c, uint64_t seq, uint32_t slot)
{
	struct wire_staging_wait_req req = { .slot = slot };
	struct wire_msg m;
	struct reply r;
	uint32_t status;

	wire_msg_init(&m);
	wire_staging_wait_req_encode(&m, &req);
	status = shm_call(c, WIRE_CALL_STAGING_WAIT, seq, &m, &r);
	wire_msg_release(&m);
	return status;
}

/* A guest lies about its staging and its pieces: each request fails alone,
 * the worker goes on, and honest pieces move the bytes both ways and have
 * their tickets written into the header; what the guest writes there does
 * not matter to the worker. */
static void test_staging_hostile(void **state)
{
	const uint64_t slot_bytes = 65536, bytes = 4 * slot_bytes;
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), map_bytes = page + bytes;
	struct wire_mem_alloc_req alloc = { .bytes = bytes };
	const struct wire_staging_header *header;
	struct shm_chan c;
	struct wire_msg m;
	struct reply r;
	uint64_t seq = 1, dptr;
	uint32_t status;
	int fd, memfd;
	uint8_t *map, *buf;

	(void)state;
	fd = shm_session_open(&c, &seq);
	/* Pieces before any staging. */
	assert_int_equal(staged_piece(&c, seq++, true, 0, 0, 4096, 4096, 1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(staging_wait(&c, seq++, 0), CUDA_ERROR_INVALID_VALUE);
	/* The retired calls of the staging without a header are gone. */
	wire_msg_init(&m);
	wire_put_u64(&m, bytes);
	wire_put_u32(&m, 4);
	assert_int_not_equal(shm_call(&c, 117, seq++, &m, &r), CUDA_SUCCESS);
	wire_msg_release(&m);
	/* No memfd at all (the worker waits 2 s for it), an unsealed one, one
	 * smaller than claimed (its header included). */
	assert_int_equal(staging_attach(&c, seq++, -1, page, bytes, 4), CUDA_ERROR_INVALID_VALUE);
	memfd = memfd_create("unsealed", MFD_CLOEXEC);
	assert_int_equal(ftruncate(memfd, (off_t)map_bytes), 0);
	assert_int_equal(staging_attach(&c, seq++, memfd, page, bytes, 4), CUDA_ERROR_INVALID_VALUE);
	close(memfd);
	memfd = shm_memfd_create("small", 4096);
	assert_int_equal(staging_attach(&c, seq++, memfd, page, bytes, 4), CUDA_ERROR_INVALID_VALUE);
	close(memfd);
	memfd = shm_memfd_create("no room for the header", bytes);
	assert_int_equal(staging_attach(&c, seq++, memfd, page, bytes, 4), CUDA_ERROR_INVALID_VALUE);
	close(memfd);
	/* Layouts the worker refuses: one slot, too many, slots not whole
	 * pages or smaller than 64 KiB, more than 1 GiB; a header of no bytes,
	 * of part of a page, of more than 64 KiB, wrapping. */
	memfd = shm_memfd_create("staging", map_bytes);
	{
		struct { uint64_t header_bytes, bytes; uint32_t slots; } bad[] = {
			{ page, bytes, 1 }, { page, bytes, 65 }, { page, bytes, 0 }, { page, bytes - 4096, 4 },
			{ page, bytes, 3 }, { page, 8 * 4096, 2 }, { page, 0, 4 }, { page, (1ull << 30) + 4 * 65536, 4 },
			{ 0, bytes, 4 }, { 256, bytes, 4 }, { page + 1, bytes, 4 }, { (64u << 10) + page, bytes, 4 },
			{ UINT64_MAX - page + 1, bytes, 4 },
		};

		for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			assert_int_equal(staging_attach(&c, seq++, memfd, bad[i].header_bytes, bad[i].bytes,
							bad[i].slots), CUDA_ERROR_INVALID_VALUE);
	}
	assert_int_equal(staging_attach(&c, seq++, memfd, page, bytes, 4), CUDA_SUCCESS);
	/* A second one is refused. */
	assert_int_equal(staging_attach(&c, seq++, memfd, page, bytes, 4), CUDA_ERROR_ALREADY_MAPPED);
	map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	assert_true(map != MAP_FAILED);
	header = (const struct wire_staging_header *)map;
	buf = map + page;
	close(memfd);
	wire_msg_init(&m);
	wire_mem_alloc_req_encode(&m, &alloc);
	assert_int_equal(shm_call(&c, WIRE_CALL_MEM_ALLOC, seq++, &m, &r), CUDA_SUCCESS);
	wire_msg_release(&m);
	memcpy(&dptr, r.payload + 4, 8);
	for (int to_device = 1; to_device >= 0; to_device--) {
		struct { uint64_t dev; uint32_t slot; uint64_t bytes, copy_bytes; } cases[] = {
			{ dptr, 4, 4096, 4096 },                        /* no such slot */
			{ dptr, UINT32_MAX, 4096, 0 },
			{ dptr, 0, slot_bytes + 1, 0 },                 /* larger than a slot */
			{ dptr, 0, 0, 0 },                              /* empty */
			{ dptr + bytes - 4096, 0, 8192, 0 },            /* past the allocation */
			{ dptr, 0, 4096, bytes + 1 },                   /* the whole copy does not fit */
			{ dptr, 0, 4096, 1 },                           /* a copy shorter than its piece */
			{ 0x10, 0, 4096, 4096 },                        /* not device memory */
			{ dptr, 0, 4096, UINT64_MAX },                  /* wraps */
		};

		for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			assert_int_equal(staged_piece(&c, seq++, to_device, cases[i].dev, cases[i].slot,
						      cases[i].bytes, cases[i].copy_bytes, 77), CUDA_ERROR_INVALID_VALUE);
	}
	/* A refused piece has no ticket written. */
	for (uint32_t s = 0; s < 4; s++)
		assert_int_equal(__atomic_load_n(&header->done[s], __ATOMIC_ACQUIRE), 0);
	assert_int_equal(staging_wait(&c, seq++, 4), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(staging_wait(&c, seq++, UINT32_MAX), CUDA_ERROR_INVALID_VALUE);
	/* The guest scribbles over its header: the worker reads none of it. */
	memset(map, 0xa5, page);
	/* Honest pieces: four slots to the device, then back through slot 2;
	 * each slot's event done, its ticket is in the header. */
	for (uint64_t i = 0; i < bytes; i++)
		buf[i] = (uint8_t)(i * 7 + 3);
	for (uint32_t s = 0; s < 4; s++)
		assert_int_equal(staged_piece(&c, seq++, true, dptr + s * slot_bytes, s, slot_bytes,
					      s ? 0 : bytes, 100 + s), CUDA_SUCCESS);
	for (uint32_t s = 0; s < 4; s++) {
		assert_int_equal(staging_wait(&c, seq++, s), CUDA_SUCCESS);
		assert_int_equal(__atomic_load_n(&header->done[s], __ATOMIC_ACQUIRE), 100 + s);
	}
	/* Waiting again for a slot waited for answers at once. */
	assert_int_equal(staging_wait(&c, seq++, 0), CUDA_SUCCESS);
	memset(buf, 0, bytes);
	assert_int_equal(staged_piece(&c, seq++, false, dptr + 1000, 2, slot_bytes, slot_bytes, 0xffffffffu),
			 CUDA_SUCCESS);
	assert_int_equal(staging_wait(&c, seq++, 2), CUDA_SUCCESS);
	assert_int_equal(__atomic_load_n(&header->done[2], __ATOMIC_ACQUIRE), 0xffffffffu);
	for (uint64_t i = 0; i < slot_bytes; i++)
		assert_int_equal(buf[2 * slot_bytes + i], (uint8_t)((i + 1000) * 7 + 3));
	munmap(map, map_bytes);
	shm_chan_close(&c);
	close(fd);
	/* ternd still serves new sessions. */
	fd = session_open(sock_url, "", &status);
	assert_int_equal(status, CUDA_SUCCESS);
	assert_alive(fd, 2);
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

/* A call's status, and the u64 its reply starts with in @out (if any). */
uint32_t call_u64(int fd, uint32_t call, uint64_t seq, struct wire_msg *m, uint64_t *out)
{
	struct reply r;

	assert_int_equal(request_send(fd, call, seq, m, UINT32_MAX), 0);
	assert_int_equal(reply_read(fd, &r), 0);
	assert_int_equal(r.h.seq, seq);
	if (out && r.status == CUDA_SUCCESS && r.len >= 12)
		memcpy(out, r.payload + 4, 8);
	return r.status;
}

static void put_reserve(struct wire_msg *m, uint64_t size, uint64_t align, uint64_t hint, uint64_t flags)
{
	wire_msg_reset(m);
	wire_put_u64(m, size);
	wire_put_u64(m, align);
	wire_put_u64(m, hint);
	wire_put_u64(m, flags);
}

static void put_create(struct wire_msg *m, uint64_t size, int32_t device, uint32_t handle_types)
{
	wire_msg_reset(m);
	wire_put_u64(m, size);
	wire_put_u32(m, CU_MEM_ALLOCATION_TYPE_PINNED);
	wire_put_u32(m, CU_MEM_LOCATION_TYPE_DEVICE);
	wire_put_u32(m, (uint32_t)device);
	wire_put_u32(m, handle_types);
	wire_put_u32(m, 0);
	wire_put_u32(m, 0);
	wire_put_u32(m, 0);
	wire_put_u64(m, 0);
}

static void put_map(struct wire_msg *m, uint64_t addr, uint64_t size, uint64_t offset, uint64_t mem)
{
	wire_msg_reset(m);
	wire_put_u64(m, addr);
	wire_put_u64(m, size);
	wire_put_u64(m, offset);
	wire_put_u64(m, mem);
	wire_put_u64(m, 0);
}

static void put_access(struct wire_msg *m, uint64_t addr, uint64_t size, unsigned count, int32_t device,
		       uint32_t flags, uint32_t blob_len)
{
	uint8_t descs[32 * 12];

	for (unsigned i = 0; i < count; i++) {
		uint32_t w[3] = { CU_MEM_LOCATION_TYPE_DEVICE, (uint32_t)device, flags };

		memcpy(descs + 12 * i, w, 12);
	}
	wire_msg_reset(m);
	wire_put_u64(m, addr);
	wire_put_u64(m, size);
	wire_put_blob(m, (struct wire_blob){ descs, blob_len ? blob_len : count * 12 });
}

static void put_addr_size(struct wire_msg *m, uint64_t addr, uint64_t size)
{
	wire_msg_reset(m);
	wire_put_u64(m, addr);
	wire_put_u64(m, size);
}

/* The VMM calls with sizes, alignments, handles, offsets, locations, access
 * descriptors and ranges a driver would refuse: each fails alone, and memory
 * mapped without access cannot be read through the worker. */
static void test_vmm_hostile(void **state)
{
	const uint64_t g = 2u << 20;
	uint64_t seq = 1, va = 0, mem = 0, other = 0;
	uint32_t status;
	struct wire_msg m;
	int fd = session_open(sock_url, "", &status);

	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	put_reserve(&m, g, 0, 0, 1);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_RESERVE, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_reserve(&m, 0, 0, 0, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_RESERVE, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_reserve(&m, 4096, 0, 0, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_RESERVE, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_reserve(&m, g, 3 * g, 0, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_RESERVE, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_reserve(&m, 1ull << 62, 0, 0, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_RESERVE, ++seq, &m, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	put_reserve(&m, 2 * g, 1ull << 63, 0, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_RESERVE, ++seq, &m, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	put_reserve(&m, 2 * g, 0, 0x1000, 0);           /* a hint outside the window is ignored */
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_RESERVE, ++seq, &m, &va), CUDA_SUCCESS);
	assert_true(va && va % g == 0);
	put_reserve(&m, g, 0, va, 0);                   /* a taken hint: elsewhere */
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_RESERVE, ++seq, &m, &other), CUDA_SUCCESS);
	assert_true(other >= va + 2 * g || other + g <= va);

	put_create(&m, g, 5, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_CREATE, ++seq, &m, NULL), CUDA_ERROR_INVALID_DEVICE);
	put_create(&m, g, 0, CU_MEM_HANDLE_TYPE_FABRIC);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_CREATE, ++seq, &m, NULL), CUDA_ERROR_NOT_SUPPORTED);
	put_create(&m, g + 4096, 0, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_CREATE, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_create(&m, g, 0, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_CREATE, ++seq, &m, &mem), CUDA_SUCCESS);
	assert_int_equal(mem >> WIRE_HANDLE_KIND_SHIFT, WIRE_HANDLE_VMM);

	put_map(&m, va, g, 0, mem | 0x999);             /* never issued */
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_MAP, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_map(&m, va, g, 0, 0x0600000000000001ull);   /* a stream's kind */
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_MAP, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_map(&m, va, g, g, mem);                     /* offsets must be 0 */
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_MAP, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_map(&m, va, 2 * g, 0, mem);                 /* larger than the allocation */
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_MAP, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_map(&m, va + 2 * g, g, 0, mem);             /* outside the reservation */
	if (other != va + 2 * g)
		assert_int_equal(call_u64(fd, WIRE_CALL_VMM_MAP, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_map(&m, 0x1000, g, 0, mem);
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_MAP, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_map(&m, 0xffffffffffe00000ull, g, 0, mem);  /* wraps */
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_MAP, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_map(&m, va + g, g, 0, mem);
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_MAP, ++seq, &m, NULL), CUDA_SUCCESS);
	put_map(&m, va + g, g, 0, mem);                 /* twice */
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_MAP, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);

	/* Mapped without access: the worker refuses to copy from it. */
	wire_msg_reset(&m);
	wire_put_u64(&m, va + g);
	wire_put_u64(&m, 64);
	wire_put_u64(&m, 0);
	wire_put_u32(&m, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEMCPY_DTOH, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_access(&m, va + g, g, 1, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 5);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_SET_ACCESS, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_access(&m, va + g, g, 17, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_SET_ACCESS, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_access(&m, va + g, g, 1, 3, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_SET_ACCESS, ++seq, &m, NULL), CUDA_ERROR_INVALID_DEVICE);
	put_access(&m, va + g, g, 1, 0, 7, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_SET_ACCESS, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_access(&m, va, 2 * g, 1, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 0);  /* half unmapped */
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_SET_ACCESS, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_access(&m, va + g, g, 1, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_SET_ACCESS, ++seq, &m, NULL), CUDA_SUCCESS);

	/* Frees and unmaps of the wrong shape, handles used up. */
	put_addr_size(&m, va, 2 * g);                   /* still mapped */
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_FREE, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_addr_size(&m, va, g);                       /* wrong size */
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_FREE, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_addr_size(&m, va, 2 * g);                   /* not all mapped */
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_UNMAP, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	wire_msg_reset(&m);
	wire_put_u64(&m, mem);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_RELEASE, ++seq, &m, NULL), CUDA_SUCCESS);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_RELEASE, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_GET_ALLOCATION_PROPERTIES, ++seq, &m, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	wire_msg_reset(&m);
	wire_put_u64(&m, va);                           /* reserved, not mapped */
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_RETAIN_ALLOCATION_HANDLE, ++seq, &m, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_addr_size(&m, va + g, g);
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_UNMAP, ++seq, &m, NULL), CUDA_SUCCESS);
	assert_int_equal(call_u64(fd, WIRE_CALL_VMM_UNMAP, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	put_addr_size(&m, va, 2 * g);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_FREE, ++seq, &m, NULL), CUDA_SUCCESS);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ADDRESS_FREE, ++seq, &m, NULL), CUDA_ERROR_INVALID_VALUE);
	wire_msg_release(&m);
	assert_alive(fd, ++seq);
	close(fd);
}

static const char misc_ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry mk(.param .u64 mk_p, .param .u32 mk_n)\n{\n\tret;\n}\n";

void put_bytes(struct wire_msg *m, const void *p, uint32_t n)
{
	wire_put_blob(m, (struct wire_blob){ p, n });
}

/* Reply fields after the status, for the calls below. */
uint32_t call_reply(int fd, uint32_t call, uint64_t seq, struct wire_msg *m, struct reply *r)
{
	assert_int_equal(request_send(fd, call, seq, m, UINT32_MAX), 0);
	assert_int_equal(reply_read(fd, r), 0);
	assert_int_equal(r->h.seq, seq);
	return r->status;
}

/* Stream memory operations, stream attributes and launch attributes and
 * arguments from a guest that lies: each request fails alone. */
static void test_misc_hostile(void **state)
{
	uint64_t seq = 1, mem, module, function;
	uint32_t status;
	struct wire_msg m;
	struct reply r;
	int fd = session_open(sock_url, "", &status);

	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	wire_put_i32(&m, 0);
	assert_int_equal(call_reply(fd, WIRE_CALL_PRIMARY_CTX_RETAIN, ++seq, &m, &r), CUDA_SUCCESS);
	memcpy(&sock_ctx, r.payload + 4, 8);
	wire_msg_reset(&m);
	wire_put_u64(&m, 65536);
	assert_int_equal(call_reply(fd, WIRE_CALL_MEM_ALLOC, ++seq, &m, &r), CUDA_SUCCESS);
	memcpy(&mem, r.payload + 4, 8);
	wire_msg_reset(&m);
	put_bytes(&m, misc_ptx, sizeof(misc_ptx));
	assert_int_equal(call_reply(fd, WIRE_CALL_MODULE_LOAD_DATA, ++seq, &m, &r), CUDA_SUCCESS);
	memcpy(&module, r.payload + 4, 8);
	wire_msg_reset(&m);
	wire_put_u64(&m, module);
	wire_put_str(&m, "mk");
	assert_int_equal(call_reply(fd, WIRE_CALL_MODULE_GET_FUNCTION, ++seq, &m, &r), CUDA_SUCCESS);
	memcpy(&function, r.payload + 4, 8);

	/* Value operations: outside any allocation, a bad width, a 32-bit
	 * value that does not fit, then one that is right. */
	static const struct {
		uint32_t call;
		bool rel;               /* addr is an offset into the allocation */
		uint64_t addr, value;
		uint32_t width;
		uint32_t status;
	} values[] = {
		{ WIRE_CALL_STREAM_WRITE_VALUE, false, 0x1000, 1, 4, CUDA_ERROR_INVALID_VALUE },
		{ WIRE_CALL_STREAM_WAIT_VALUE, false, 0x1000, 1, 8, CUDA_ERROR_INVALID_VALUE },
		{ WIRE_CALL_STREAM_WRITE_VALUE, false, 1ull << 62, 1, 8, CUDA_ERROR_INVALID_VALUE },
		{ WIRE_CALL_STREAM_WRITE_VALUE, false, UINT64_MAX - 3, 1, 8, CUDA_ERROR_INVALID_VALUE },
		{ WIRE_CALL_STREAM_WAIT_VALUE, true, 64u << 20, 1, 4, CUDA_ERROR_INVALID_VALUE },
		{ WIRE_CALL_STREAM_WRITE_VALUE, true, 0, 1, 3, CUDA_ERROR_INVALID_VALUE },
		{ WIRE_CALL_STREAM_WRITE_VALUE, true, 0, 1ull << 33, 4, CUDA_ERROR_INVALID_VALUE },
		{ WIRE_CALL_STREAM_WRITE_VALUE, true, 8, 7, 8, CUDA_SUCCESS },
		{ WIRE_CALL_STREAM_WAIT_VALUE, true, 8, 7, 8, CUDA_SUCCESS },
	};
	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		uint64_t addr = values[i].rel ? mem + values[i].addr : values[i].addr;

		wire_msg_reset(&m);
		wire_put_u64(&m, 0);            /* stream */
		wire_put_u64(&m, addr);
		wire_put_u64(&m, values[i].value);
		wire_put_u32(&m, values[i].width);
		wire_put_u32(&m, 0);            /* flags */
		assert_int_equal(call_status(fd, values[i].call, ++seq, &m, UINT32_MAX, NULL), values[i].status);
	}
	/* Batches: a record cut short, an unknown operation, too many, an
	 * address outside the allocations. */
	{
		static uint8_t ops[257 * 24];
		uint32_t op;
		uint64_t addr;

		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u32(&m, 0);
		put_bytes(&m, ops, 23);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_BATCH_MEM_OP, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		op = 99;
		memcpy(ops, &op, 4);
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u32(&m, 0);
		put_bytes(&m, ops, 24);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_BATCH_MEM_OP, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		for (int i = 0; i < 257; i++) {
			op = CU_STREAM_MEM_OP_WRITE_VALUE_32;
			addr = mem;
			memcpy(ops + 24 * i, &op, 4);
			memcpy(ops + 24 * i + 8, &addr, 8);
		}
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u32(&m, 0);
		put_bytes(&m, ops, sizeof(ops));
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_BATCH_MEM_OP, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		addr = 0x1000;
		memcpy(ops + 24 + 8, &addr, 8);
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u32(&m, 0);
		put_bytes(&m, ops, 48);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_BATCH_MEM_OP, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u32(&m, 0);
		put_bytes(&m, ops, 24);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_BATCH_MEM_OP, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_SUCCESS);
	}
	/* Stream attributes: a value of the wrong size, an id out of range, an
	 * access window outside the allocations, an unknown stream. */
	{
		CUstreamAttrValue v;

		memset(&v, 0, sizeof(v));
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u32(&m, CU_STREAM_ATTRIBUTE_PRIORITY);
		put_bytes(&m, &v, 10);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_SET_ATTRIBUTE, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u32(&m, 0x7777);
		put_bytes(&m, &v, sizeof(v));
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_SET_ATTRIBUTE, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		v.accessPolicyWindow.base_ptr = (void *)0x1000;
		v.accessPolicyWindow.num_bytes = 1 << 20;
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u32(&m, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW);
		put_bytes(&m, &v, sizeof(v));
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_SET_ATTRIBUTE, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		wire_msg_reset(&m);
		wire_put_u64(&m, 0x0600000000000999ull);
		wire_put_u32(&m, CU_STREAM_ATTRIBUTE_PRIORITY);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_GET_ATTRIBUTE, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_HANDLE);
	}
	/* Launches: attribute ids out of range, a record cut short, too many
	 * records, arguments over 32 KiB or not the function's length. */
	{
		static uint8_t attrs[17 * 72], args[(32 << 10) + 8];
		const struct {
			uint32_t attrs_len, args_len, id;
			uint32_t status;
		} launches[] = {
			{ 72, 12, 0x7777, CUDA_ERROR_INVALID_VALUE },
			{ 72, 12, 0xffffffffu, CUDA_ERROR_INVALID_VALUE },
			{ 72, 12, CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, CUDA_ERROR_NOT_SUPPORTED },
			{ 71, 12, CU_LAUNCH_ATTRIBUTE_PRIORITY, CUDA_ERROR_INVALID_VALUE },
			{ 17 * 72, 12, CU_LAUNCH_ATTRIBUTE_PRIORITY, CUDA_ERROR_INVALID_VALUE },
			{ 0, sizeof(args), 0, CUDA_ERROR_INVALID_VALUE },
			{ 0, 16, 0, CUDA_ERROR_INVALID_VALUE },
		};
		uint64_t p = mem;

		memcpy(args, &p, 8);
		for (size_t i = 0; i < sizeof(launches) / sizeof(launches[0]); i++) {
			for (int k = 0; k < 17; k++)
				memcpy(attrs + 72 * k, &launches[i].id, 4);
			wire_msg_reset(&m);
			wire_put_u64(&m, function);
			for (int k = 0; k < 6; k++)
				wire_put_u32(&m, 1);
			wire_put_u32(&m, 0);    /* shared bytes */
			wire_put_u64(&m, 0);    /* stream */
			put_bytes(&m, attrs, launches[i].attrs_len);
			put_bytes(&m, args, launches[i].args_len);
			assert_int_equal(call_status(fd, WIRE_CALL_LAUNCH_KERNEL_EX, ++seq, &m, UINT32_MAX, NULL),
					 launches[i].status);
		}
		/* The same attribute records where nothing runs: a cluster
		 * query takes a good one and refuses an unknown id. */
		for (int good = 1; good >= 0; good--) {
			CUlaunchAttribute a;

			memset(&a, 0, sizeof(a));
			a.id = good ? CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION : (CUlaunchAttributeID)0x7777;
			a.value.clusterDim.x = 2;
			a.value.clusterDim.y = a.value.clusterDim.z = 1;
			wire_msg_reset(&m);
			wire_put_u32(&m, 0);    /* cuOccupancyMaxActiveClusters */
			wire_put_u64(&m, function);
			wire_put_u32(&m, 8);
			for (int k = 0; k < 2; k++)
				wire_put_u32(&m, 1);
			wire_put_u32(&m, 64);
			for (int k = 0; k < 2; k++)
				wire_put_u32(&m, 1);
			wire_put_u32(&m, 0);
			put_bytes(&m, &a, sizeof(a));
			assert_int_equal(call_status(fd, WIRE_CALL_OCCUPANCY_CLUSTER, ++seq, &m, UINT32_MAX, NULL),
					 good ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
		}
		/* The plain launch: an argument blob over 32 KiB. */
		wire_msg_reset(&m);
		wire_put_u64(&m, function);
		for (int k = 0; k < 6; k++)
			wire_put_u32(&m, 1);
		wire_put_u32(&m, 0);
		wire_put_u64(&m, 0);
		put_bytes(&m, args, sizeof(args));
		assert_int_equal(call_status(fd, WIRE_CALL_LAUNCH_KERNEL, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
	}
	/* Settings: a limit id the journal's records could not hold, a function
	 * setting on a kernel handle. */
	wire_msg_reset(&m);
	wire_put_u32(&m, 0x100);
	wire_put_u64(&m, 1);
	assert_int_equal(call_status(fd, WIRE_CALL_CTX_SET_LIMIT, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x0500000000000001ull);
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_FUNC_SET_SHARED_MEM_CONFIG, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	wire_msg_reset(&m);
	wire_put_u64(&m, function);
	wire_put_u32(&m, 0);
	wire_put_i32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_KERNEL_SET_CACHE_CONFIG, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	wire_msg_release(&m);
	assert_alive(fd, ++seq);
	sock_ctx = 0;
	close(fd);
}

static uint32_t ipc_open_status(int fd, uint64_t seq, const uint8_t *handle, uint32_t len,
				uint32_t flags, uint64_t *addr)
{
	struct wire_msg m;
	struct reply r;
	uint32_t st;

	wire_msg_init(&m);
	wire_put_blob(&m, (struct wire_blob){ handle, len });
	wire_put_u32(&m, flags);
	st = call_reply(fd, WIRE_CALL_IPC_OPEN_MEM_HANDLE, seq, &m, &r);
	wire_msg_release(&m);
	if (addr && st == CUDA_SUCCESS)
		memcpy(addr, r.payload + 4, 8);
	return st;
}

static uint32_t u64_call(int fd, uint32_t call, uint64_t seq, uint64_t v)
{
	struct wire_msg m;
	uint32_t st;

	wire_msg_init(&m);
	wire_put_u64(&m, v);
	st = call_status(fd, call, seq, &m, UINT32_MAX, NULL);
	wire_msg_release(&m);
	return st;
}

/* IPC handles between two sessions: forged, foreign and malformed handles
 * are refused; only the exporter's handle, with its secret, opens; and
 * device ordinals out of range. */
static void test_ipc_hostile(void **state)
{
	uint64_t seq_a = 1, seq_b = 1, addr = 0, opened = 0, again = 0;
	uint8_t handle[64], bad[64];
	struct wire_msg m;
	struct reply r;
	uint32_t status;
	int a = session_open(sock_url, "", &status), b;

	assert_int_equal(status, CUDA_SUCCESS);
	b = session_open(sock_url, "", &status);
	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	wire_put_u64(&m, 4096);
	assert_int_equal(call_reply(a, WIRE_CALL_MEM_ALLOC, ++seq_a, &m, &r), CUDA_SUCCESS);
	memcpy(&addr, r.payload + 4, 8);
	/* Not an allocation: no handle. */
	assert_int_equal(u64_call(a, WIRE_CALL_IPC_GET_MEM_HANDLE, ++seq_a, 0x1000), CUDA_ERROR_INVALID_VALUE);
	wire_msg_reset(&m);
	wire_put_u64(&m, addr + 100);   /* inside it: the allocation's handle */
	assert_int_equal(call_reply(a, WIRE_CALL_IPC_GET_MEM_HANDLE, ++seq_a, &m, &r), CUDA_SUCCESS);
	assert_int_equal(r.len, 4 + 4 + 64);
	memcpy(handle, r.payload + 8, 64);
	/* Another session's handle without its secret, an unknown id, junk in
	 * the reserved bytes, a short handle, unknown flags. */
	memcpy(bad, handle, 64);
	bad[30] ^= 0x5a;
	assert_int_equal(ipc_open_status(b, ++seq_b, bad, 64, 0, NULL), CUDA_ERROR_INVALID_VALUE);
	memcpy(bad, handle, 64);
	bad[8] ^= 0x40;
	assert_int_equal(ipc_open_status(b, ++seq_b, bad, 64, 0, NULL), CUDA_ERROR_INVALID_VALUE);
	memcpy(bad, handle, 64);
	bad[60] = 1;
	assert_int_equal(ipc_open_status(b, ++seq_b, bad, 64, 0, NULL), CUDA_ERROR_INVALID_VALUE);
	memset(bad, 0xff, sizeof(bad));
	assert_int_equal(ipc_open_status(b, ++seq_b, bad, 64, 0, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(ipc_open_status(b, ++seq_b, handle, 10, 0, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(ipc_open_status(b, ++seq_b, handle, 64, 0x80, NULL), CUDA_ERROR_INVALID_VALUE);
	/* A memory handle is no event handle. */
	wire_msg_reset(&m);
	wire_put_blob(&m, (struct wire_blob){ handle, 64 });
	assert_int_equal(call_status(b, WIRE_CALL_IPC_OPEN_EVENT_HANDLE, ++seq_b, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	/* The exporter cannot open its own handle. */
	assert_int_equal(ipc_open_status(a, ++seq_a, handle, 64, 0, NULL), CUDA_ERROR_INVALID_CONTEXT);
	/* The real one opens, twice to the same mapping, and closes as often. */
	assert_int_equal(ipc_open_status(b, ++seq_b, handle, 64, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
					 &opened), CUDA_SUCCESS);
	assert_int_equal(ipc_open_status(b, ++seq_b, handle, 64, 0, &again), CUDA_SUCCESS);
	assert_true(opened == again && opened != 0);
	/* Another session's memory is not freed with cuMemFree. */
	assert_int_equal(u64_call(b, WIRE_CALL_MEM_FREE, ++seq_b, opened), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(u64_call(b, WIRE_CALL_IPC_CLOSE_MEM_HANDLE, ++seq_b, opened), CUDA_SUCCESS);
	assert_int_equal(u64_call(b, WIRE_CALL_IPC_CLOSE_MEM_HANDLE, ++seq_b, opened), CUDA_SUCCESS);
	assert_int_equal(u64_call(b, WIRE_CALL_IPC_CLOSE_MEM_HANDLE, ++seq_b, opened), CUDA_ERROR_INVALID_VALUE);
	/* The exporter's own memory is not closed, and a stray event has no handle. */
	assert_int_equal(u64_call(a, WIRE_CALL_IPC_CLOSE_MEM_HANDLE, ++seq_a, addr), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(u64_call(a, WIRE_CALL_IPC_GET_EVENT_HANDLE, ++seq_a, 0x0700000000000999ull),
			 CUDA_ERROR_INVALID_HANDLE);
	/* Freed memory is no longer exported. */
	assert_int_equal(u64_call(a, WIRE_CALL_MEM_FREE, ++seq_a, addr), CUDA_SUCCESS);
	assert_int_equal(ipc_open_status(b, ++seq_b, handle, 64, 0, NULL), CUDA_ERROR_INVALID_VALUE);
	/* Device ordinals out of range, on every call that takes one. */
	wire_msg_reset(&m);
	wire_put_i32(&m, 5);
	assert_int_equal(call_status(b, WIRE_CALL_DEVICE_GET, ++seq_b, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_DEVICE);
	wire_msg_reset(&m);
	wire_put_i32(&m, -1);
	assert_int_equal(call_status(b, WIRE_CALL_PRIMARY_CTX_RETAIN, ++seq_b, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_DEVICE);
	wire_msg_reset(&m);
	wire_put_i32(&m, 0);
	wire_put_i32(&m, 7);
	assert_int_equal(call_status(b, WIRE_CALL_DEVICE_CAN_ACCESS_PEER, ++seq_b, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_DEVICE);
	wire_msg_reset(&m);
	wire_put_u32(&m, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED);
	wire_put_i32(&m, 0);
	wire_put_i32(&m, 0x7fffffff);
	assert_int_equal(call_status(b, WIRE_CALL_DEVICE_GET_P2P_ATTRIBUTE, ++seq_b, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_DEVICE);
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x0100000000000999ull);       /* no such context */
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(b, WIRE_CALL_CTX_ENABLE_PEER_ACCESS, ++seq_b, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_CONTEXT);
	wire_msg_release(&m);
	assert_alive(a, ++seq_a);
	assert_alive(b, ++seq_b);
	close(a);
	close(b);
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

/* The JIT linker and created contexts: each malformed request fails alone. */
static void test_link_and_contexts_hostile(void **state)
{
	static const uint8_t opt_pointer[12] = { CU_JIT_INFO_LOG_BUFFER };  /* not a scalar */
	static const uint8_t opt_short[7] = { 0 };
	/* type PTX, a name length past the end */
	static const uint8_t name_past[] = { 1, 0, 0, 0, 0xff, 0xff, 0, 0, 'x' };
	/* type 99 */
	static const uint8_t bad_type[] = { 99, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 'a', 'b', 'c', 0 };
	/* type PTX, size past the end */
	static const uint8_t size_past[] = { 1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0, 0, 0, 'a' };
	/* type PTX, size 0 */
	static const uint8_t size_zero[] = { 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
	static const struct {
		const uint8_t *options, *inputs;
		uint32_t options_len, inputs_len;
	} cases[] = {
		{ opt_pointer, size_zero + 12, sizeof(opt_pointer), 0 },
		{ opt_short, NULL, sizeof(opt_short), 0 },
		{ NULL, NULL, 0, 0 },
		{ NULL, name_past, 0, sizeof(name_past) },
		{ NULL, bad_type, 0, sizeof(bad_type) },
		{ NULL, size_past, 0, sizeof(size_past) },
		{ NULL, size_zero, 0, sizeof(size_zero) },
	};
	uint64_t seq = 1;
	uint32_t status;
	struct wire_msg m;
	int fd = session_open(sock_url, "", &status);

	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		wire_msg_reset(&m);
		wire_put_blob(&m, (struct wire_blob){ cases[i].options, cases[i].options_len });
		wire_put_blob(&m, (struct wire_blob){ cases[i].inputs, cases[i].inputs_len });
		assert_int_equal(call_status(fd, WIRE_CALL_LINK, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
	}
	/* Contexts: unknown flags, a device that is not there, the primary one
	 * destroyed, a stray handle. */
	wire_msg_reset(&m);
	wire_put_u32(&m, 0x80000000u);
	wire_put_i32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_CTX_CREATE, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	wire_msg_reset(&m);
	wire_put_u32(&m, 0);
	wire_put_i32(&m, 77);
	assert_int_equal(call_status(fd, WIRE_CALL_CTX_CREATE, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_DEVICE);
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x0100000000000001ull);
	assert_int_equal(call_status(fd, WIRE_CALL_CTX_DESTROY, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_CONTEXT);
	wire_msg_reset(&m);
	wire_put_u64(&m, 0x0100000000000999ull);
	assert_int_equal(call_status(fd, WIRE_CALL_CTX_DESTROY, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_CONTEXT);
	wire_msg_release(&m);
	assert_alive(fd, ++seq);
	close(fd);
}

/* Managed memory: bad attach flags, sizes and handles fail the request only;
 * a good allocation starts zeroed and is bounded like any other. */
static void test_managed_hostile(void **state)
{
	static const struct {
		uint64_t bytes;
		uint32_t flags;
		uint32_t status;
	} allocs[] = {
		{ 4096, 0, CUDA_ERROR_INVALID_VALUE },
		{ 4096, CU_MEM_ATTACH_GLOBAL | CU_MEM_ATTACH_HOST, CUDA_ERROR_INVALID_VALUE },
		{ 4096, CU_MEM_ATTACH_SINGLE, CUDA_ERROR_INVALID_VALUE },
		{ 4096, 0x80000001u, CUDA_ERROR_INVALID_VALUE },
		{ 0, CU_MEM_ATTACH_GLOBAL, CUDA_ERROR_INVALID_VALUE },
		{ UINT64_MAX, CU_MEM_ATTACH_GLOBAL, CUDA_ERROR_OUT_OF_MEMORY },
		{ 1ull << 62, CU_MEM_ATTACH_HOST, CUDA_ERROR_OUT_OF_MEMORY },
	};
	/* handle 0: the context, where a module goes. */
	static const struct {
		uint32_t call;
		uint64_t handle;
		const char *name;
		uint32_t status;
	} lookups[] = {
		{ WIRE_CALL_LIBRARY_GET_MANAGED, 0x0300000000000777ull, "mg_var", CUDA_ERROR_INVALID_HANDLE },
		{ WIRE_CALL_LIBRARY_GET_MANAGED, 0x0200000000000001ull, "mg_var", CUDA_ERROR_INVALID_HANDLE },
		{ WIRE_CALL_LIBRARY_GET_MANAGED, 0x0300000000000001ull, NULL, CUDA_ERROR_INVALID_VALUE },
		{ WIRE_CALL_MODULE_GET_VARIABLE, 0x0200000000000777ull, "mm_var", CUDA_ERROR_INVALID_HANDLE },
		{ WIRE_CALL_MODULE_GET_VARIABLE, 0, "mm_var", CUDA_ERROR_INVALID_HANDLE },
		{ WIRE_CALL_MODULE_GET_VARIABLE, 0x0200000000000001ull, NULL, CUDA_ERROR_INVALID_VALUE },
	};
	uint64_t seq = 1, addr;
	uint32_t status;
	struct wire_msg m;
	struct reply r;
	int fd = session_open(sock_url, "", &status);

	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	for (size_t i = 0; i < sizeof(allocs) / sizeof(allocs[0]); i++) {
		wire_msg_reset(&m);
		wire_put_u64(&m, allocs[i].bytes);
		wire_put_u32(&m, allocs[i].flags);
		assert_int_equal(call_status(fd, WIRE_CALL_MEM_ALLOC_MANAGED, ++seq, &m, UINT32_MAX, NULL),
				 allocs[i].status);
	}
	/* Without its flags the request does not decode. */
	wire_msg_reset(&m);
	wire_put_u64(&m, 4096);
	assert_int_equal(call_status(fd, WIRE_CALL_MEM_ALLOC_MANAGED, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	/* A good one, in the primary context: zeroed, and a copy past its end
	 * is refused. */
	wire_msg_reset(&m);
	wire_put_i32(&m, 0);
	assert_int_equal(request_send(fd, WIRE_CALL_PRIMARY_CTX_RETAIN, ++seq, &m, UINT32_MAX), 0);
	assert_int_equal(reply_read(fd, &r), 0);
	assert_int_equal(r.status, CUDA_SUCCESS);
	memcpy(&sock_ctx, r.payload + 4, 8);
	wire_msg_reset(&m);
	wire_put_u64(&m, 4096);
	wire_put_u32(&m, CU_MEM_ATTACH_GLOBAL);
	assert_int_equal(request_send(fd, WIRE_CALL_MEM_ALLOC_MANAGED, ++seq, &m, UINT32_MAX), 0);
	assert_int_equal(reply_read(fd, &r), 0);
	assert_int_equal(r.status, CUDA_SUCCESS);
	assert_int_equal(r.len, 12);
	memcpy(&addr, r.payload + 4, 8);
	assert_true(addr != 0);
	wire_msg_reset(&m);
	wire_put_u64(&m, addr + 4000);
	wire_put_u64(&m, 96);
	wire_put_u64(&m, 0);
	wire_put_u32(&m, 0);
	assert_int_equal(request_send(fd, WIRE_CALL_MEMCPY_DTOH, ++seq, &m, UINT32_MAX), 0);
	assert_int_equal(reply_read(fd, &r), 0);
	assert_int_equal(r.status, CUDA_SUCCESS);
	assert_int_equal(r.len, 4 + 4 + 96);
	for (unsigned i = 0; i < 96; i++)
		assert_int_equal(r.payload[8 + i], 0);
	wire_msg_reset(&m);
	wire_put_u64(&m, addr + 4000);
	wire_put_u64(&m, 97);
	wire_put_u64(&m, 0);
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_MEMCPY_DTOH, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	wire_msg_reset(&m);
	wire_put_u64(&m, addr);
	assert_int_equal(call_status(fd, WIRE_CALL_MEM_FREE, ++seq, &m, UINT32_MAX, NULL), CUDA_SUCCESS);
	assert_int_equal(call_status(fd, WIRE_CALL_MEM_FREE, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	/* __managed__ lookups: unknown and wrong-kind libraries and modules, a
	 * name whose bytes are missing. */
	for (size_t i = 0; i < sizeof(lookups) / sizeof(lookups[0]); i++) {
		wire_msg_reset(&m);
		wire_put_u64(&m, lookups[i].handle ? lookups[i].handle : sock_ctx);
		if (lookups[i].name)
			wire_put_str(&m, lookups[i].name);
		else
			wire_put_u32(&m, 4);    /* a string's length, and no bytes */
		assert_int_equal(call_status(fd, lookups[i].call, ++seq, &m, UINT32_MAX, NULL),
				 lookups[i].status);
	}
	wire_msg_release(&m);
	assert_alive(fd, ++seq);
	sock_ctx = 0;
	close(fd);
}

/* A node added to @graph without dependencies; its index. */
/* A session whose requests carry device 0's primary context (sock_ctx). */
int session_open_ctx(uint64_t *seq, struct wire_msg *m)
{
	struct reply r;
	uint32_t status;
	int fd = session_open(sock_url, "", &status);

	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(m);
	wire_put_i32(m, 0);
	assert_int_equal(call_reply(fd, WIRE_CALL_PRIMARY_CTX_RETAIN, ++*seq, m, &r), CUDA_SUCCESS);
	memcpy(&sock_ctx, r.payload + 4, 8);
	return fd;
}

uint32_t graph_node_add(int fd, uint64_t *seq, uint32_t call, struct wire_msg *m)
{
	struct reply r;
	uint32_t node;

	assert_int_equal(call_reply(fd, call, ++*seq, m, &r), CUDA_SUCCESS);
	memcpy(&node, r.payload + 4, 4);
	return node;
}


void put_cond_node(struct wire_msg *m, uint64_t graph, const uint32_t *dep, uint64_t value, uint32_t type,
			  uint32_t size, uint64_t ctx)
{
	wire_msg_reset(m);
	wire_put_u64(m, graph);
	put_bytes(m, dep, dep ? 4 : 0);
	wire_put_u64(m, value);
	wire_put_u32(m, type);
	wire_put_u32(m, size);
	wire_put_u64(m, ctx);
}

/* Conditional handles and nodes from a guest that lies: bad graphs,
 * contexts, flags, handles (another graph's, none), types, sizes and
 * dependencies fail alone; a body graph cannot be destroyed alone or made
 * a child; the bodies' handles go with their graph. */
static void test_token(void **state)
{
	uint32_t status;
	int fd = session_open(tcp_url, "wrong-token", &status);

	assert_int_equal(status, CUDA_ERROR_NOT_PERMITTED);
	close(fd);
	fd = session_open(tcp_url, "", &status);
	assert_int_equal(status, CUDA_ERROR_NOT_PERMITTED);
	close(fd);
	fd = session_open(tcp_url, "s3cret-token-of-the-test", &status);
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
	fputs("s3cret-token-of-the-test\n", f);
	fclose(f);
	chmod(token_file, 0600);
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
		cmocka_unit_test(test_link_and_contexts_hostile),
		cmocka_unit_test(test_arrays_hostile),
		cmocka_unit_test(test_ipc_hostile),
		cmocka_unit_test(test_misc_hostile),
		cmocka_unit_test(test_vmm_hostile),
		cmocka_unit_test(test_managed_hostile),
		cmocka_unit_test(test_graph_nodes_hostile),
		cmocka_unit_test(test_device_query_hostile),
		cmocka_unit_test(test_tensor_map_hostile),
		cmocka_unit_test(test_conditional_hostile),
		cmocka_unit_test(test_shm_hostile),
		cmocka_unit_test(test_staging_hostile),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/TO/ternd\n", argv[0]);
		return 2;
	}
	ternd_path = argv[1];
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, ternd_start, ternd_stop);
}
