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
