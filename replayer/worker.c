#define LOG_PREFIX "worker: "
#include "worker.h"
#include "log.h"
#include "wire_dispatch.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct worker_conn {
	int fd;
	uint8_t *payload;
	size_t cap;
	struct wire_msg reply;
};

static int reply_send(struct worker_conn *c, const struct wire_header *req, uint16_t flags)
{
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_header h = { .flags = (uint16_t)(WIRE_F_REPLY | flags), .call = req->call,
				 .seq = req->seq };
	int n = wire_msg_finish(&c->reply, &h, iov);

	if (n < 0)
		return n;
	return wire_send(c->fd, iov, n);
}

/* A reply holding only a status: for requests that could not be served at all. */
static int reply_status(struct worker_conn *c, const struct wire_header *req, CUresult status,
			uint16_t flags)
{
	wire_msg_reset(&c->reply);
	wire_put_u32(&c->reply, (uint32_t)status);
	return reply_send(c, req, flags);
}

/* Read one request. 0 with the payload in c->payload, 1 if the request was
 * answered already (oversized), or -errno when the connection is unusable. */
static int request_read(struct worker_conn *c, struct wire_header *h)
{
	uint8_t raw[WIRE_HEADER_SIZE];
	int ret = wire_recv_exact(c->fd, raw, sizeof(raw));

	if (ret)
		return ret;
	ret = wire_header_decode(raw, h);
	if (ret == -EMSGSIZE) {
		pr_warn("request %u of %u bytes is over the limit: dropped", h->call, h->length);
		ret = wire_recv_discard(c->fd, h->length);
		if (ret)
			return ret;
		ret = reply_status(c, h, CUDA_ERROR_INVALID_VALUE, WIRE_F_ERROR);
		return ret ? ret : 1;
	}
	if (ret) {
		pr_warn("bad message header (magic 0x%08x version %u): closing", h->magic, h->version);
		reply_status(c, h, CUDA_ERROR_INVALID_VALUE, WIRE_F_ERROR);
		return -EPROTO;
	}
	if (h->length > c->cap) {
		size_t cap = h->length < 65536 ? 65536 : h->length;
		uint8_t *p = realloc(c->payload, cap);

		if (!p)
			return -ENOMEM;
		c->payload = p;
		c->cap = cap;
	}
	return wire_recv_exact(c->fd, c->payload, h->length);
}

static bool token_equal(const char *want, struct wire_blob got)
{
	size_t n = strlen(want);
	unsigned char diff = (unsigned char)(n != got.len);

	/* Constant time in the length of the expected token. */
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(want[i] ^ (i < got.len ? got.ptr[i] : 0));
	return diff == 0;
}

static void slot_set_id(struct session_slot *slot, const char *id)
{
	size_t i;

	/* The id is shown by `ternd status`: keep it printable. */
	for (i = 0; id[i] && i < SESSION_ID_MAX - 1; i++)
		slot->id[i] = (id[i] > 0x20 && id[i] < 0x7f && id[i] != '"' && id[i] != '\\') ? id[i] : '_';
	slot->id[i] = 0;
}

static int hello_wait(struct worker_conn *c, const struct worker_config *cfg,
		      struct wire_header *h, struct wire_hello_req *hello)
{
	struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
	struct wire_cursor cur;
	int ret;

	ret = poll(&pfd, 1, cfg->hello_timeout_ms);
	if (ret <= 0) {
		pr_warn("no hello within %d ms", cfg->hello_timeout_ms);
		return -ETIMEDOUT;
	}
	ret = request_read(c, h);
	if (ret)
		return ret < 0 ? ret : -EPROTO;
	wire_cursor_init(&cur, c->payload, h->length);
	if (h->call != WIRE_CALL_HELLO || wire_hello_req_decode(&cur, hello) < 0) {
		reply_status(c, h, CUDA_ERROR_INVALID_VALUE, WIRE_F_ERROR);
		return -EPROTO;
	}
	if (hello->protocol != WIRE_VERSION) {
		pr_warn("guest speaks protocol %u, this ternd %u", hello->protocol, WIRE_VERSION);
		reply_status(c, h, CUDA_ERROR_NOT_SUPPORTED, 0);
		return -EPROTO;
	}
	if (cfg->require_token && (!cfg->token || !token_equal(cfg->token, hello->token))) {
		pr_warn("session %s from pid %u: bad token, refused", hello->session, hello->pid);
		reply_status(c, h, CUDA_ERROR_NOT_PERMITTED, 0);
		return -EACCES;
	}
	return 0;
}

int worker_run(const struct worker_config *cfg, int fd, struct session_slot *slot)
{
	struct worker_conn c = { .fd = fd };
	struct wire_hello_req *hello = calloc(1, sizeof(*hello));
	struct backend *be = NULL;
	struct exec ex;
	struct wire_header h;
	struct wire_cursor cur;
	int ret, status = 1;

	wire_msg_init(&c.reply);
	if (!hello)
		goto out;
	ret = hello_wait(&c, cfg, &h, hello);
	if (ret)
		goto out;
	if (slot)
		slot_set_id(slot, hello->session);
	ret = backend_open(cfg->backend, &cfg->backend_cfg, &be);
	if (!ret)
		ret = exec_open(&ex, be, &cfg->exec_cfg, slot);
	if (ret) {
		pr_err("session %s: cannot open the %s backend (%d)", hello->session, cfg->backend, ret);
		reply_status(&c, &h, CUDA_ERROR_NO_DEVICE, 0);
		goto out_backend;
	}
	if (slot)
		atomic_store_explicit(&slot->state, SESSION_ACTIVE, memory_order_release);
	pr_info("session %s: guest pid %u on device %d", hello->session, hello->pid, cfg->exec_cfg.device);
	wire_cursor_init(&cur, c.payload, h.length);
	for (;;) {
		uint16_t flags = 0;

		wire_msg_reset(&c.reply);
		ret = exec_context_switch(&ex, h.ctx);
		if (ret != CUDA_SUCCESS) {
			wire_put_u32(&c.reply, (uint32_t)ret);
			flags = WIRE_F_ERROR;
		} else {
			ret = wire_dispatch(&ex, h.call, &cur, &c.reply);
			if (ret < 0) {
				pr_warn("request %u (%s): %s", h.call, wire_call_name(h.call) ? wire_call_name(h.call) : "unknown",
					ret == -ENOSYS ? "unknown call" : "malformed payload");
				wire_msg_reset(&c.reply);
				wire_put_u32(&c.reply, ret == -ENOSYS ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE);
				flags = WIRE_F_ERROR;
			}
		}
		if (slot)
			atomic_fetch_add_explicit(&slot->calls, 1, memory_order_relaxed);
		if (!(h.flags & WIRE_F_NO_REPLY) && reply_send(&c, &h, flags)) {
			pr_info("session %s: guest gone", hello->session);
			break;
		}
		if (h.call == WIRE_CALL_GOODBYE)
			break;
		do {
			ret = request_read(&c, &h);
		} while (ret == 1);
		if (ret) {
			if (ret != -ECONNRESET)
				pr_info("session %s: connection closed (%s)", hello->session, strerror(-ret));
			break;
		}
		wire_cursor_init(&cur, c.payload, h.length);
	}
	status = 0;
	exec_close(&ex);
out_backend:
	backend_close(be);
out:
	free(hello);
	free(c.payload);
	wire_msg_release(&c.reply);
	close(fd);
	return status;
}
