/* The store directory: open, lock, clean-up after crashes, list, load. */
#define LOG_PREFIX "snapshot: "
#include "snap_internal.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int snap_store_fail(struct snap_store *s, int rc, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&s->lock);
	va_start(ap, fmt);
	vsnprintf(s->errmsg, sizeof(s->errmsg), fmt, ap);
	va_end(ap);
	pr_debug("%s", s->errmsg);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

const char *snap_write_hint(int rc)
{
	if (rc == -ENOSPC || rc == -EDQUOT)
		return "; the disk is full: free space and retry, earlier snapshots are intact";
	return "";
}

const char *snap_store_error(const struct snap_store *s)
{
	return s->errmsg;
}

int snap_store_lock(struct snap_store *s, int exclusive, int nonblock)
{
	int fd = openat(s->dir_fd, SNAP_LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	int op = (exclusive ? LOCK_EX : LOCK_SH) | (nonblock ? LOCK_NB : 0);

	if (fd < 0)
		return snap_store_fail(s, -errno, "%s/lock: %s", s->path, strerror(errno));
	while (flock(fd, op) < 0) {
		int err = errno;
		if (err == EINTR)
			continue;
		close(fd);
		if (err == EWOULDBLOCK)
			return snap_store_fail(s, -EBUSY, "store %s is in use (a snapshot is being "
					       "written or read); retry when it is done", s->path);
		return snap_store_fail(s, -err, "%s/lock: %s", s->path, strerror(err));
	}
	return fd;
}

static int has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

int snap_store_tmp_abandoned(struct snap_store *s, const char *tmpname)
{
	int fd = openat(s->snaps_fd, tmpname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc;

	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		rc = 1;
	else
		rc = errno == EWOULDBLOCK ? 0 : -errno;
	close(fd);      /* drops our lock: we only looked */
	return rc;
}

/* With the store locked exclusively nobody is writing, so temporary
 * snapshots, half-removed ones, packs without an index and index temp files
 * are leftovers of crashes. */
void snap_store_cleanup_locked(struct snap_store *s)
{
	struct dirent *de;
	DIR *d = NULL;

	snap_io_dir_open(s->snaps_fd, ".", 0, &d);
	while (d && (de = readdir(d)) != NULL) {
		if (has_prefix(de->d_name, SNAP_TMP_PREFIX) || has_prefix(de->d_name, SNAP_RM_PREFIX)) {
			pr_info("%s: removing leftover %s", s->path, de->d_name);
			snap_io_dir_remove(s->snaps_fd, de->d_name);
		}
	}
	if (d)
		closedir(d);

	d = NULL;
	snap_io_dir_open(s->packs_fd, ".", 0, &d);
	while (d && (de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		if (n > 4 && !strcmp(de->d_name + n - 4, ".tmp")) {
			unlinkat(s->packs_fd, de->d_name, 0);
		} else if (n > 5 && !strcmp(de->d_name + n - 5, ".pack")) {
			char idx[256];
			struct stat st;
			snprintf(idx, sizeof(idx), "%.*s.idx", (int)(n - 5), de->d_name);
			if (fstatat(s->packs_fd, idx, &st, 0) < 0 && errno == ENOENT) {
				pr_info("%s: removing unfinished %s", s->path, de->d_name);
				unlinkat(s->packs_fd, de->d_name, 0);
			}
		}
	}
	if (d)
		closedir(d);
	snap_io_fsync_dir(s->snaps_fd);
	snap_io_fsync_dir(s->packs_fd);
}

static int subdir_open(struct snap_store *s, const char *name, int create)
{
	int fd;

	if (create && mkdirat(s->dir_fd, name, 0755) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(s->dir_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

unsigned snap_store_workers_all(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 2 ? (unsigned)(n < 256 ? n : 256) : 2;
}

int snap_store_open(const char *dir, const struct snap_store_config *cfg,
		    unsigned flags, struct snap_store **out)
{
	int create = (flags & SNAP_STORE_CREATE) != 0;
	struct snap_store *s;
	int rc, lock_fd;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->dir_fd = s->packs_fd = s->snaps_fd = -1;
	pthread_mutex_init(&s->lock, NULL);
	if (cfg)
		s->cfg = *cfg;
	if (!s->cfg.chunk_size)
		s->cfg.chunk_size = SNAP_DEFAULT_CHUNK_SIZE;
	if (!s->cfg.workers)
		s->cfg.workers = 2;
	if (!s->cfg.queue_depth)
		s->cfg.queue_depth = 2 * s->cfg.workers + 2;
	if (!s->cfg.zstd_level)
		s->cfg.zstd_level = 1;
	if (!s->cfg.pack_max_bytes)
		s->cfg.pack_max_bytes = 1ull << 30;
	rc = -EINVAL;
	if (s->cfg.chunk_size < SNAP_CHUNK_SIZE_MIN || s->cfg.chunk_size > SNAP_CHUNK_SIZE_MAX ||
	    s->cfg.workers > 256 || s->cfg.queue_depth > 4096)
		goto out_free;
	rc = -ENOMEM;
	s->path = strdup(dir);
	if (!s->path)
		goto out_free;
	if (create && mkdir(dir, 0755) < 0 && errno != EEXIST) {
		rc = -errno;
		goto out_free;
	}
	s->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dir_fd < 0) {
		rc = -errno;
		goto out_free;
	}
	rc = subdir_open(s, "packs", create);
	if (rc < 0)
		goto out_free;
	s->packs_fd = rc;
	rc = subdir_open(s, "snaps", create);
	if (rc < 0)
		goto out_free;
	s->snaps_fd = rc;
	if (create)
		snap_io_fsync_dir(s->dir_fd);
	lock_fd = snap_store_lock(s, 1, 1);
	if (lock_fd >= 0) {
		snap_store_cleanup_locked(s);
		close(lock_fd);
	} else if (lock_fd != -EBUSY) {
		rc = lock_fd;
		goto out_free;
	}
	s->errmsg[0] = '\0';
	*out = s;
	return 0;
out_free:
	snap_store_close(s);
	return rc;
}

void snap_store_close(struct snap_store *s)
{
	if (!s)
		return;
	if (s->snaps_fd >= 0)
		close(s->snaps_fd);
	if (s->packs_fd >= 0)
		close(s->packs_fd);
	if (s->dir_fd >= 0)
		close(s->dir_fd);
	pthread_mutex_destroy(&s->lock);
	free(s->path);
	free(s);
}

int snap_store_snapshot_load(struct snap_store *s, const char *name,
			     struct snap_manifest *m, struct snap_chunk_list *cl)
{
	uint8_t hash[SNAP_HASH_BYTES];
	uint8_t *buf;
	size_t len;
	int dir, rc;

	if (!snap_name_valid(name))
		return snap_store_fail(s, -EINVAL, "invalid snapshot name \"%s\"", name);
	dir = openat(s->snaps_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0 && errno == ENOENT) {
		char tmpname[SNAP_NAME_MAX + 8];

		snprintf(tmpname, sizeof(tmpname), SNAP_TMP_PREFIX "%s", name);
		if (snap_store_tmp_abandoned(s, tmpname) == 0)
			return snap_store_fail(s, -EINPROGRESS, "snapshot %s is still being written",
					       name);
		return snap_store_fail(s, -ENOENT, "snapshot %s: no such snapshot", name);
	}
	if (dir < 0)
		return snap_store_fail(s, -errno, "snapshot %s: %s", name, strerror(errno));
	rc = snap_io_file_read(dir, SNAP_MANIFEST_FILE, SNAP_MANIFEST_MAX, &buf, &len);
	if (rc) {
		snap_store_fail(s, rc == -ENOENT ? -EBADMSG : rc, "snapshot %s: manifest: %s",
				name, rc == -ENOENT ? "missing" : strerror(-rc));
		rc = rc == -ENOENT ? -EBADMSG : rc;
		goto out_close;
	}
	rc = snap_manifest_decode(buf, len, m);
	free(buf);
	if (rc) {
		snap_store_fail(s, rc, "snapshot %s: manifest is %s", name,
				rc == -ENOTSUP ? "of an unsupported format version" :
				"damaged (checksum or structure check failed)");
		goto out_close;
	}
	if (strcmp(m->name, name) != 0) {
		rc = snap_store_fail(s, -EBADMSG, "snapshot %s: manifest names snapshot \"%s\"",
				     name, m->name);
		goto out_close;
	}
	if (!cl)
		goto out_close;
	rc = snap_io_file_read(dir, SNAP_CHUNKS_FILE, SNAP_CHUNKS_MAX, &buf, &len);
	if (rc) {
		rc = snap_store_fail(s, rc == -ENOENT ? -EBADMSG : rc,
				     "snapshot %s: chunk list: %s", name,
				     rc == -ENOENT ? "missing" : strerror(-rc));
		goto out_close;
	}
	snap_hash128(buf, len, hash);
	if (len != m->chunks_bytes || memcmp(hash, m->chunks_hash, SNAP_HASH_BYTES) != 0) {
		free(buf);
		rc = snap_store_fail(s, -EBADMSG, "snapshot %s: chunk list does not match the "
				     "checksum in the manifest (damaged)", name);
		goto out_close;
	}
	rc = snap_chunk_list_decode(buf, len, cl);
	free(buf);
	if (rc) {
		snap_store_fail(s, rc, "snapshot %s: chunk list is damaged", name);
		goto out_close;
	}
	if (cl->chunk_size != m->chunk_size || cl->region_count != m->region_count ||
	    cl->chunk_count != m->chunk_count) {
		snap_chunk_list_free(cl);
		rc = snap_store_fail(s, -EBADMSG, "snapshot %s: chunk list disagrees with the "
				     "manifest", name);
	}
out_close:
	close(dir);
	return rc;
}

int snap_store_manifest_get(struct snap_store *s, const char *name, struct snap_manifest *out)
{
	return snap_store_snapshot_load(s, name, out, NULL);
}

static int info_cmp(const void *a, const void *b)
{
	const struct snap_info *x = a, *y = b;

	if (x->created_ns != y->created_ns)
		return x->created_ns < y->created_ns ? -1 : 1;
	return strcmp(x->name, y->name);
}

int snap_store_list(struct snap_store *s, struct snap_info **out, unsigned *count)
{
	struct snap_info *list = NULL, *info;
	unsigned n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int rc;

	*out = NULL;
	*count = 0;
	rc = snap_io_dir_open(s->snaps_fd, ".", 0, &d);
	if (rc)
		return rc;
	while ((de = readdir(d)) != NULL) {
		const char *name = de->d_name;
		struct snap_manifest m;
		int tmp = has_prefix(name, SNAP_TMP_PREFIX);

		if (name[0] == '.' && !tmp)
			continue;
		if (tmp)
			name += strlen(SNAP_TMP_PREFIX);
		if (!snap_name_valid(name))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			info = realloc(list, cap * sizeof(*list));
			if (!info) {
				rc = -ENOMEM;
				break;
			}
			list = info;
		}
		info = &list[n++];
		memset(info, 0, sizeof(*info));
		snprintf(info->name, sizeof(info->name), "%s", name);
		if (tmp) {
			/* A writer that died (ternd killed mid-snapshot) left it:
			 * not a snapshot, and the next exclusive open removes it. */
			if (snap_store_tmp_abandoned(s, de->d_name) != 0) {
				n--;
				continue;
			}
			info->error = -EINPROGRESS;
			continue;
		}
		info->error = snap_store_snapshot_load(s, name, &m, NULL);
		if (info->error)
			continue;
		info->complete = 1;
		snprintf(info->parent, sizeof(info->parent), "%s", m.parent);
		info->created_ns = m.created_ns;
		info->logical_bytes = m.logical_bytes;
		info->chunk_count = m.chunk_count;
		info->stored_bytes = m.new_stored_bytes + m.journal_bytes + m.chunks_bytes;
	}
	closedir(d);
	if (rc) {
		free(list);
		return rc;
	}
	if (n)
		qsort(list, n, sizeof(*list), info_cmp);
	*out = list;
	*count = n;
	return 0;
}
