/* Records of the host-function channel (hostfn_chan.h). */
#include "hostfn_chan.h"
#include "le.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

void hostfn_rec_encode(const struct hostfn_rec *r, uint8_t out[HOSTFN_REC_SIZE])
{
	le32_put(out, r->type);
	le32_put(out + 4, r->status);
	le32_put(out + 8, (uint32_t)r->token);
	le32_put(out + 12, (uint32_t)(r->token >> 32));
}

void hostfn_rec_decode(const uint8_t in[HOSTFN_REC_SIZE], struct hostfn_rec *r)
{
	r->type = le32_get(in);
	r->status = le32_get(in + 4);
	r->token = (uint64_t)le32_get(in + 8) | (uint64_t)le32_get(in + 12) << 32;
}

int hostfn_rec_send(int fd, const struct hostfn_rec *r)
{
	uint8_t b[HOSTFN_REC_SIZE];
	size_t off = 0;

	hostfn_rec_encode(r, b);
	while (off < sizeof(b)) {
		ssize_t n = send(fd, b + off, sizeof(b) - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? (errno == ECONNRESET ? -EPIPE : -errno) : -EPIPE;
		off += (size_t)n;
	}
	return 0;
}

int hostfn_rec_recv(int fd, struct hostfn_rec *r)
{
	uint8_t b[HOSTFN_REC_SIZE];
	size_t off = 0;

	while (off < sizeof(b)) {
		ssize_t n = read(fd, b + off, sizeof(b) - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? (errno == ECONNRESET ? -EPIPE : -errno) : -EPIPE;
		off += (size_t)n;
	}
	hostfn_rec_decode(b, r);
	return 0;
}

int hostfn_rec_send_tls(struct tls_conn *t, const struct hostfn_rec *r)
{
	uint8_t b[HOSTFN_REC_SIZE];
	struct iovec iov = { b, sizeof(b) };
	int ret;

	hostfn_rec_encode(r, b);
	ret = tls_conn_send(t, &iov, 1);
	return ret == -ECONNRESET ? -EPIPE : ret;
}

int hostfn_rec_recv_tls(struct tls_conn *t, struct hostfn_rec *r)
{
	uint8_t b[HOSTFN_REC_SIZE];
	int ret = tls_conn_recv_exact(t, b, sizeof(b));

	if (ret)
		return ret == -ECONNRESET ? -EPIPE : ret;
	hostfn_rec_decode(b, r);
	return 0;
}

int hostfn_bytes_send(int fd, struct tls_conn *tls, const void *buf, size_t n)
{
	const uint8_t *b = buf;

	if (tls) {
		struct iovec iov = { (void *)buf, n };
		int ret = n ? tls_conn_send(tls, &iov, 1) : 0;

		return ret == -ECONNRESET ? -EPIPE : ret;
	}
	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? (errno == ECONNRESET ? -EPIPE : -errno) : -EPIPE;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

int hostfn_bytes_recv(int fd, struct tls_conn *tls, void *buf, size_t n)
{
	uint8_t drop[4096], *b = buf;

	if (tls) {
		int ret = !n ? 0 : buf ? tls_conn_recv_exact(tls, buf, n) : tls_conn_recv_discard(tls, n);

		return ret == -ECONNRESET ? -EPIPE : ret;
	}
	while (n) {
		size_t want = buf ? n : (n < sizeof(drop) ? n : sizeof(drop));
		ssize_t r = read(fd, buf ? b : drop, want);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? (errno == ECONNRESET ? -EPIPE : -errno) : -EPIPE;
		if (buf)
			b += r;
		n -= (size_t)r;
	}
	return 0;
}

int hostfn_count_send(int fd, struct tls_conn *tls, uint64_t count)
{
	uint8_t b[8];

	le64_put(b, count);
	return hostfn_bytes_send(fd, tls, b, sizeof(b));
}

int hostfn_count_recv(int fd, struct tls_conn *tls, uint64_t *count)
{
	uint8_t b[8];
	int ret = hostfn_bytes_recv(fd, tls, b, sizeof(b));

	if (!ret)
		*count = le64_get(b);
	return ret;
}
