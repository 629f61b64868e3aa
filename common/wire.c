#include "wire.h"
#include "le.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void wire_header_encode(uint8_t out[WIRE_HEADER_SIZE], const struct wire_header *h)
{
	le32_put(out, h->magic);
	out[4] = (uint8_t)h->version;
	out[5] = (uint8_t)(h->version >> 8);
	out[6] = (uint8_t)h->flags;
	out[7] = (uint8_t)(h->flags >> 8);
	le32_put(out + 8, h->call);
	le32_put(out + 12, h->length);
	le64_put(out + 16, h->seq);
	le64_put(out + 24, h->ctx);
}

int wire_header_decode(const uint8_t in[WIRE_HEADER_SIZE], struct wire_header *h)
{
	h->magic = le32_get(in);
	h->version = (uint16_t)(in[4] | in[5] << 8);
	h->flags = (uint16_t)(in[6] | in[7] << 8);
	h->call = le32_get(in + 8);
	h->length = le32_get(in + 12);
	h->seq = le64_get(in + 16);
	h->ctx = le64_get(in + 24);
	if (h->magic != WIRE_MAGIC || h->version != WIRE_VERSION)
		return -EPROTO;
	if (h->length > WIRE_PAYLOAD_MAX)
		return -EMSGSIZE;
	return 0;
}

static int cursor_take(struct wire_cursor *c, size_t n, const uint8_t **p)
{
	if (c->left < n)
		return -EPROTO;
	*p = c->p;
	c->p += n;
	c->left -= n;
	return 0;
}

int wire_get_u8(struct wire_cursor *c, uint8_t *v)
{
	const uint8_t *p;

	if (cursor_take(c, 1, &p))
		return -EPROTO;
	*v = p[0];
	return 0;
}

int wire_get_u16(struct wire_cursor *c, uint16_t *v)
{
	const uint8_t *p;

	if (cursor_take(c, 2, &p))
		return -EPROTO;
	*v = le16_get(p);
	return 0;
}

int wire_get_u32(struct wire_cursor *c, uint32_t *v)
{
	const uint8_t *p;

	if (cursor_take(c, 4, &p))
		return -EPROTO;
	*v = le32_get(p);
	return 0;
}

int wire_get_u64(struct wire_cursor *c, uint64_t *v)
{
	const uint8_t *p;

	if (cursor_take(c, 8, &p))
		return -EPROTO;
	*v = le64_get(p);
	return 0;
}

int wire_get_i32(struct wire_cursor *c, int32_t *v)
{
	uint32_t u = 0;
	int ret = wire_get_u32(c, &u);

	*v = (int32_t)u;
	return ret;
}

int wire_get_i64(struct wire_cursor *c, int64_t *v)
{
	uint64_t u = 0;
	int ret = wire_get_u64(c, &u);

	*v = (int64_t)u;
	return ret;
}

int wire_get_f32(struct wire_cursor *c, float *v)
{
	uint32_t u = 0;
	int ret = wire_get_u32(c, &u);

	memcpy(v, &u, sizeof(*v));
	return ret;
}

int wire_get_str(struct wire_cursor *c, char *out, size_t cap)
{
	uint32_t len;
	const uint8_t *p;

	if (wire_get_u32(c, &len) || len >= cap || len > WIRE_STR_MAX || cursor_take(c, len, &p))
		return -EPROTO;
	if (memchr(p, 0, len))
		return -EPROTO;
	memcpy(out, p, len);
	out[len] = 0;
	return 0;
}

int wire_get_blob(struct wire_cursor *c, struct wire_blob *v)
{
	uint32_t len;
	const uint8_t *p;

	if (wire_get_u32(c, &len) || cursor_take(c, len, &p))
		return -EPROTO;
	v->ptr = p;
	v->len = len;
	return 0;
}

int wire_cursor_end(const struct wire_cursor *c)
{
	return c->left ? -EPROTO : 0;
}

void wire_msg_init(struct wire_msg *m)
{
	memset(m, 0, sizeof(*m));
}

void wire_msg_reset(struct wire_msg *m)
{
	m->len = 0;
	m->failed = 0;
	m->npieces = 0;
	m->payload_len = 0;
}

void wire_msg_release(struct wire_msg *m)
{
	free(m->buf);
	wire_msg_init(m);
}

static uint8_t *msg_grow(struct wire_msg *m, size_t n)
{
	uint8_t *p;

	if (m->failed)
		return NULL;
	if (!m->cap) {
		/* Room for the header is kept at the front of the buffer. */
		m->cap = 256;
		m->buf = malloc(m->cap);
		if (!m->buf) {
			m->failed = 1;
			return NULL;
		}
	}
	if (m->len == 0)
		m->len = WIRE_HEADER_SIZE;
	if (m->len + n > m->cap) {
		size_t cap = m->cap;

		while (m->len + n > cap)
			cap *= 2;
		p = realloc(m->buf, cap);
		if (!p) {
			m->failed = 1;
			return NULL;
		}
		m->buf = p;
		m->cap = cap;
	}
	p = m->buf + m->len;
	m->len += n;
	m->payload_len += n;
	return p;
}

void wire_put_bytes(struct wire_msg *m, const void *src, size_t n)
{
	uint8_t *p = msg_grow(m, n);

	if (p && n)
		memcpy(p, src, n);
}

void wire_put_u8(struct wire_msg *m, uint8_t v)
{
	wire_put_bytes(m, &v, 1);
}

void wire_put_u16(struct wire_msg *m, uint16_t v)
{
	uint8_t b[2];

	le16_put(b, v);
	wire_put_bytes(m, b, 2);
}

void wire_put_u32(struct wire_msg *m, uint32_t v)
{
	uint8_t b[4];

	le32_put(b, v);
	wire_put_bytes(m, b, 4);
}

void wire_put_u64(struct wire_msg *m, uint64_t v)
{
	uint8_t b[8];

	le64_put(b, v);
	wire_put_bytes(m, b, 8);
}

void wire_put_i32(struct wire_msg *m, int32_t v)
{
	wire_put_u32(m, (uint32_t)v);
}

void wire_put_i64(struct wire_msg *m, int64_t v)
{
	wire_put_u64(m, (uint64_t)v);
}

void wire_put_f32(struct wire_msg *m, float v)
{
	uint32_t u;

	memcpy(&u, &v, sizeof(u));
	wire_put_u32(m, u);
}

void wire_put_str(struct wire_msg *m, const char *s)
{
	size_t n = strnlen(s, WIRE_STR_MAX);

	wire_put_u32(m, (uint32_t)n);
	wire_put_bytes(m, s, n);
}

void wire_put_blob(struct wire_msg *m, struct wire_blob b)
{
	wire_put_u32(m, b.len);
	if (b.len <= WIRE_INLINE_BLOB || m->npieces == WIRE_MSG_PIECES) {
		wire_put_bytes(m, b.ptr, b.len);
		return;
	}
	if (!msg_grow(m, 0))
		return;
	m->piece[m->npieces].at = m->len;
	m->piece[m->npieces].ptr = b.ptr;
	m->piece[m->npieces].len = b.len;
	m->npieces++;
	m->payload_len += b.len;
}

int wire_msg_finish(struct wire_msg *m, const struct wire_header *h, struct iovec *iov)
{
	struct wire_header hdr = *h;
	size_t done = 0;
	int n = 0;

	if (!msg_grow(m, 0))
		return -ENOMEM;
	if (m->payload_len > WIRE_PAYLOAD_MAX)
		return -EMSGSIZE;
	hdr.magic = WIRE_MAGIC;
	hdr.version = WIRE_VERSION;
	hdr.length = (uint32_t)m->payload_len;
	wire_header_encode(m->buf, &hdr);
	for (unsigned i = 0; i < m->npieces; i++) {
		if (m->piece[i].at > done) {
			iov[n].iov_base = m->buf + done;
			iov[n++].iov_len = m->piece[i].at - done;
			done = m->piece[i].at;
		}
		iov[n].iov_base = (void *)m->piece[i].ptr;
		iov[n++].iov_len = m->piece[i].len;
	}
	if (m->len > done) {
		iov[n].iov_base = m->buf + done;
		iov[n++].iov_len = m->len - done;
	}
	return n;
}

int wire_send(int fd, struct iovec *iov, int niov)
{
	struct msghdr mh = { 0 };

	while (niov > 0) {
		ssize_t n;

		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)niov;
		n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (niov > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			niov--;
		}
		if (niov > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

int wire_status_send(int fd, uint32_t call, uint64_t seq, uint16_t flags, uint32_t status)
{
	struct wire_header h = { .flags = (uint16_t)(WIRE_F_REPLY | flags), .call = call, .seq = seq };
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_msg m;
	int n, ret;

	wire_msg_init(&m);
	wire_put_u32(&m, status);
	n = wire_msg_finish(&m, &h, iov);
	ret = n < 0 ? n : wire_send(fd, iov, n);
	wire_msg_release(&m);
	return ret;
}

int wire_recv_exact(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n) {
		ssize_t r = recv(fd, p, n, 0);

		if (r == 0)
			return -ECONNRESET;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int wire_discard_through(int (*read_exact)(void *stream, void *buf, size_t n), void *stream, uint64_t n)
{
	uint8_t sink[65536];

	while (n) {
		size_t chunk = n < sizeof(sink) ? (size_t)n : sizeof(sink);
		int ret = read_exact(stream, sink, chunk);

		if (ret)
			return ret;
		n -= chunk;
	}
	return 0;
}

static int fd_read_exact(void *stream, void *buf, size_t n)
{
	return wire_recv_exact(*(int *)stream, buf, n);
}

int wire_recv_discard(int fd, uint64_t n)
{
	return wire_discard_through(fd_read_exact, &fd, n);
}

size_t wire_msg_payload_copy(const struct wire_msg *m, void *out, size_t cap)
{
	uint8_t *dst = out;
	size_t done = WIRE_HEADER_SIZE, n = 0;

	if (m->failed || !m->buf || m->payload_len > cap)
		return 0;
	for (unsigned i = 0; i < m->npieces; i++) {
		memcpy(dst + n, m->buf + done, m->piece[i].at - done);
		n += m->piece[i].at - done;
		done = m->piece[i].at;
		memcpy(dst + n, m->piece[i].ptr, m->piece[i].len);
		n += m->piece[i].len;
	}
	memcpy(dst + n, m->buf + done, m->len - done);
	return n + m->len - done;
}

void wire_moved_encode(struct wire_msg *m, const struct wire_moved *mv)
{
	wire_put_str(m, mv->url);
	wire_put_blob(m, (struct wire_blob){ mv->proof, sizeof(mv->proof) });
}

int wire_moved_decode(struct wire_cursor *c, struct wire_moved *out)
{
	struct wire_blob proof;

	if (wire_get_str(c, out->url, sizeof(out->url)) || !out->url[0] || wire_get_blob(c, &proof) ||
	    proof.len != sizeof(out->proof) || c->left)
		return -EPROTO;
	memcpy(out->proof, proof.ptr, sizeof(out->proof));
	return 0;
}
