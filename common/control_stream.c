#include "control_stream.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "transport.h"

/* Lines are read in blocks (a `snapshots` answer can be large), kept in one
 * buffer that grows up to CONTROL_REPLY_LINE_MAX. */
struct line_reader {
	int fd;
	char *buf;
	size_t len;      /* bytes held */
	size_t cap;
	size_t taken;    /* bytes of the previous line, dropped on the next read */
	bool eof;
};

/* The next line, without its '\n', NUL-terminated in place. */
static int line_next(struct line_reader *lr, int timeout_ms, char **line, size_t *len)
{
	size_t scanned = 0;

	if (lr->taken) {
		memmove(lr->buf, lr->buf + lr->taken, lr->len - lr->taken);
		lr->len -= lr->taken;
		lr->taken = 0;
	}
	for (;;) {
		char *nl = memchr(lr->buf + scanned, '\n', lr->len - scanned);
		ssize_t r;
		int rc;

		if (nl) {
			*nl = 0;
			*line = lr->buf;
			*len = (size_t)(nl - lr->buf);
			lr->taken = *len + 1;
			return 0;
		}
		scanned = lr->len;
		if (lr->eof)
			return -ECONNRESET;
		if (lr->len + 1 >= lr->cap) {
			size_t ncap = lr->cap * 2;
			char *b;

			if (lr->cap > CONTROL_REPLY_LINE_MAX)
				return -EMSGSIZE;
			b = realloc(lr->buf, ncap);
			if (!b)
				return -ENOMEM;
			lr->buf = b;
			lr->cap = ncap;
		}
		rc = control_wait_readable(lr->fd, timeout_ms);
		if (rc)
			return rc;
		r = read(lr->fd, lr->buf + lr->len, lr->cap - lr->len - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0) {
			/* A final line without '\n' before the close still counts. */
			lr->eof = true;
			if (lr->len) {
				lr->buf[lr->len] = '\n';
				lr->len++;
			}
			continue;
		}
		lr->len += (size_t)r;
	}
}

int control_stream_request(const char *path, const struct control_request *req, int timeout_ms,
			   control_progress_fn progress, void *arg, struct control_reply *answer,
			   char *err, size_t errlen)
{
	struct transport_url url = { .kind = TRANSPORT_UNIX };
	struct line_reader lr = { .fd = -1 };
	char *command = NULL;
	size_t command_len = 0;
	int rc;

	memset(answer, 0, sizeof(*answer));
	if (strlen(path) >= sizeof(url.path))
		return -EINVAL;
	rc = control_request_encode(req, &command, &command_len);
	if (rc)
		return rc == -EMSGSIZE ? -EINVAL : rc;
	strcpy(url.path, path);
	lr.fd = transport_connect(&url);
	if (lr.fd < 0) {
		free(command);
		return lr.fd;
	}
	rc = control_write_all(lr.fd, command, command_len);
	free(command);
	if (rc)
		goto out_close;
	lr.cap = 4096;
	lr.buf = malloc(lr.cap);
	if (!lr.buf) {
		rc = -ENOMEM;
		goto out_close;
	}
	for (;;) {
		char *line = NULL;
		size_t len = 0;

		rc = line_next(&lr, timeout_ms, &line, &len);
		if (rc)
			break;
		if (len == 0 || (len == 1 && line[0] == '\r'))
			continue;
		rc = control_reply_decode(line, len, req->op, answer, err, errlen);
		if (rc)
			break;
		if (answer->kind == CONTROL_REPLY_PROGRESS) {
			if (progress)
				progress(arg, &answer->progress);
			control_reply_release(answer);
			continue;
		}
		break;
	}
	if (rc)
		control_reply_release(answer);
	free(lr.buf);
out_close:
	close(lr.fd);
	return rc;
}
