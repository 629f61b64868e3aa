/* The sessions file on disk: read whole, written atomically.  The encoding
 * is in snap_format.c with the store's other formats. */
#include "snap_sessions.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The largest file SNAP_SESSIONS_LIMIT entries of the longest names make. */
#define SESSIONS_FILE_MAX ((size_t)SNAP_SESSIONS_HEADER_BYTES + SNAP_TRAILER_BYTES + \
			   (size_t)SNAP_SESSIONS_LIMIT * (SNAP_SESSION_FIXED_BYTES + 3 * (2 + SNAP_NAME_MAX)))

int snap_state_file_read(const char *path, size_t max, uint8_t **out, size_t *len)
{
	uint8_t *buf = NULL;
	struct stat st;
	size_t got = 0;
	int fd, rc;

	*out = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out_close;
	}
	rc = -EBADMSG;
	if (!S_ISREG(st.st_mode) || st.st_size < 0 || (uint64_t)st.st_size > max)
		goto out_close;
	rc = -ENOMEM;
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf)
		goto out_close;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EBADMSG;
			goto out_close;
		}
		got += (size_t)n;
	}
	*out = buf;
	*len = got;
	buf = NULL;
	rc = 0;
out_close:
	free(buf);
	close(fd);
	return rc;
}

int snap_sessions_read(const char *path, uint32_t max, struct snap_session **out, uint32_t *count)
{
	uint8_t *buf;
	size_t len;
	int rc = snap_state_file_read(path, SESSIONS_FILE_MAX, &buf, &len);

	*out = NULL;
	*count = 0;
	if (rc)
		return rc == -ENOENT ? 0 : rc;
	rc = snap_sessions_decode(buf, len, max, out, count);
	free(buf);
	return rc;
}

int snap_state_file_write(const char *path, const struct snap_buf *b)
{
	char tmp[4200], dir[4200];
	size_t done = 0;
	int fd, dfd, rc = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	while (done < b->len) {
		ssize_t n = write(fd, b->data + done, b->len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			break;
		}
		done += (size_t)n;
	}
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (rc) {
		unlink(tmp);
		return rc;
	}
	snprintf(dir, sizeof(dir), "%s", path);
	dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		if (fsync(dfd) < 0)
			rc = -errno;
		close(dfd);
	}
	return rc;
}

int snap_sessions_write(const char *path, const struct snap_session *v, uint32_t count)
{
	struct snap_buf b = { 0 };
	int rc = snap_sessions_encode(v, count, &b);

	if (!rc)
		rc = snap_state_file_write(path, &b);
	snap_buf_free(&b);
	return rc;
}
