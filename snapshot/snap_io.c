/* File helpers of the snapshot store: every write goes through
 * snap_io_write_all so the ENOSPC fault hook sees it. */
#define LOG_PREFIX "snapshot: "
#include "snap_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t snap_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* How many of @len bytes the fault hook lets through. */
static size_t fault_allow(struct snap_store *s, size_t len)
{
	size_t allow = len;

	if (!s->cfg.fault_enospc_after)
		return len;
	pthread_mutex_lock(&s->lock);
	if (s->written >= s->cfg.fault_enospc_after)
		allow = 0;
	else if (s->cfg.fault_enospc_after - s->written < len)
		allow = (size_t)(s->cfg.fault_enospc_after - s->written);
	s->written += allow;
	pthread_mutex_unlock(&s->lock);
	return allow;
}

int snap_io_write_all(struct snap_store *s, int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		size_t allow = fault_allow(s, len);
		ssize_t n;

		if (allow == 0)
			return -ENOSPC;
		n = write(fd, p, allow);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int snap_io_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EBADMSG; /* truncated file */
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int snap_io_file_read(int dir_fd, const char *name, size_t max, uint8_t **buf, size_t *len)
{
	struct stat st;
	uint8_t *data;
	int fd, rc;

	*buf = NULL;
	*len = 0;
	fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out_close;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		rc = -EBADMSG;
		goto out_close;
	}
	data = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!data) {
		rc = -ENOMEM;
		goto out_close;
	}
	rc = snap_io_pread_all(fd, data, (size_t)st.st_size, 0);
	if (rc) {
		free(data);
		goto out_close;
	}
	*buf = data;
	*len = (size_t)st.st_size;
out_close:
	close(fd);
	return rc;
}

int snap_io_file_write(struct snap_store *s, int dir_fd, const char *name,
		       const void *buf, size_t len)
{
	int fd, rc;

	fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	rc = snap_io_write_all(s, fd, buf, len);
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (rc)
		unlinkat(dir_fd, name, 0);
	return rc;
}

int snap_io_fsync_dir(int dir_fd)
{
	return fsync(dir_fd) < 0 ? -errno : 0;
}

int snap_io_dir_open(int dir_fd, const char *name, int flags, DIR **out)
{
	int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | flags), rc;

	if (fd < 0)
		return -errno;
	*out = fdopendir(fd);
	if (!*out) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return 0;
}

int snap_io_dir_remove(int dir_fd, const char *name)
{
	struct dirent *de;
	DIR *d;
	int rc = snap_io_dir_open(dir_fd, name, O_NOFOLLOW, &d);

	if (rc)
		return rc == -ENOENT ? 0 : rc;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
			rc = -errno;
	}
	closedir(d);
	if (unlinkat(dir_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && !rc)
		rc = -errno;
	return rc;
}
