/* The images folder's record of its GPU snapshots (criu_record.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "criu_record.h"
#include "le.h"
#include "snap_format.h"

_Static_assert(sizeof(CRIU_RECORD_MAGIC) - 1 == 8, "the magic is 8 bytes");
_Static_assert(CRIU_RECORD_ENTRY_SIZE == 560, "an entry's layout is fixed");
_Static_assert(CRIU_RECORD_NAME_MAX == SNAP_NAME_MAX, "names are snapshot names");
_Static_assert(CRIU_RECORD_HASH_BYTES == SNAP_HASH_BYTES, "hashes are the manifest's");

static void name_put(uint8_t *p, const char *s)
{
	size_t n = strnlen(s, CRIU_RECORD_NAME_MAX + 1);

	memset(p, 0, CRIU_RECORD_NAME_MAX + 1);
	memcpy(p, s, n);
}

static bool name_ok(const char *s)
{
	size_t n = strnlen(s, CRIU_RECORD_NAME_MAX + 1);

	return n > 0 && n <= CRIU_RECORD_NAME_MAX;
}

int criu_record_encode(const struct criu_record *r, uint8_t *out, size_t cap)
{
	size_t len;
	uint8_t *p;

	if (!r->count || r->count > CRIU_RECORD_SESSIONS_MAX)
		return -EINVAL;
	len = CRIU_RECORD_SIZE(r->count);
	if (cap < len)
		return -ENOSPC;
	memcpy(out, CRIU_RECORD_MAGIC, 8);
	le32_put(out + 8, CRIU_RECORD_VERSION);
	le32_put(out + 12, r->count);
	le32_put(out + 16, r->pid);
	le32_put(out + 20, 0);
	p = out + CRIU_RECORD_HEAD_SIZE;
	for (uint32_t i = 0; i < r->count; i++) {
		const struct criu_record_entry *e = &r->entries[i];

		if (!name_ok(e->session) || !name_ok(e->snapshot))
			return -EINVAL;
		name_put(p, e->session);
		name_put(p + CRIU_RECORD_NAME_MAX + 1, e->snapshot);
		p += 2 * (CRIU_RECORD_NAME_MAX + 1);
		le64_put(p, e->seq);
		le64_put(p + 8, e->created_ns);
		memcpy(p + 16, e->journal_hash, CRIU_RECORD_HASH_BYTES);
		memcpy(p + 16 + CRIU_RECORD_HASH_BYTES, e->chunks_hash, CRIU_RECORD_HASH_BYTES);
		p += 16 + 2 * CRIU_RECORD_HASH_BYTES;
	}
	le64_put(p, XXH64(out, (size_t)(p - out), 0));
	return (int)len;
}

__attribute__((format(printf, 3, 4)))
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EBADMSG;
}

/* A NUL-padded name field: terminated inside the field, a valid snapshot
 * name (session ids are cleaned by the worker into the same alphabet). */
static int name_get(const uint8_t *p, char *out, const char *what, uint32_t i, char *err, size_t errlen)
{
	if (!memchr(p, 0, CRIU_RECORD_NAME_MAX + 1))
		return bad(err, errlen, "entry %u: the %s has no end", i, what);
	memcpy(out, p, CRIU_RECORD_NAME_MAX + 1);
	if (!snap_name_valid(out))
		return bad(err, errlen, "entry %u: '%.64s' is no valid %s", i, out, what);
	return 0;
}

int criu_record_decode(const uint8_t *in, size_t len, struct criu_record *r, char *err, size_t errlen)
{
	const uint8_t *p;
	uint32_t count, version;

	memset(r, 0, sizeof(*r));
	if (len < CRIU_RECORD_HEAD_SIZE + 8)
		return bad(err, errlen, "%zu bytes: shorter than a record's header", len);
	if (memcmp(in, CRIU_RECORD_MAGIC, 8))
		return bad(err, errlen, "not a tern record (wrong magic)");
	version = le32_get(in + 8);
	if (version != CRIU_RECORD_VERSION)
		return bad(err, errlen, "record version %u, this tern reads %u", version, CRIU_RECORD_VERSION);
	count = le32_get(in + 12);
	if (!count || count > CRIU_RECORD_SESSIONS_MAX)
		return bad(err, errlen, "%u sessions: 1 to %u expected", count, CRIU_RECORD_SESSIONS_MAX);
	if (len != CRIU_RECORD_SIZE(count))
		return bad(err, errlen, "%zu bytes for %u sessions, %u expected", len, count,
			   CRIU_RECORD_SIZE(count));
	if (le32_get(in + 20))
		return bad(err, errlen, "reserved field set");
	if (le64_get(in + len - 8) != XXH64(in, len - 8, 0))
		return bad(err, errlen, "checksum mismatch: the record is damaged");
	r->pid = le32_get(in + 16);
	r->count = count;
	p = in + CRIU_RECORD_HEAD_SIZE;
	for (uint32_t i = 0; i < count; i++) {
		struct criu_record_entry *e = &r->entries[i];

		if (name_get(p, e->session, "session id", i, err, errlen) ||
		    name_get(p + CRIU_RECORD_NAME_MAX + 1, e->snapshot, "snapshot name", i, err, errlen))
			return -EBADMSG;
		p += 2 * (CRIU_RECORD_NAME_MAX + 1);
		e->seq = le64_get(p);
		e->created_ns = le64_get(p + 8);
		memcpy(e->journal_hash, p + 16, CRIU_RECORD_HASH_BYTES);
		memcpy(e->chunks_hash, p + 16 + CRIU_RECORD_HASH_BYTES, CRIU_RECORD_HASH_BYTES);
		p += 16 + 2 * CRIU_RECORD_HASH_BYTES;
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(r->entries[j].session, e->session))
				return bad(err, errlen, "session '%s' is recorded twice", e->session);
	}
	return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int criu_record_write(int dirfd, const struct criu_record *r)
{
	static const char tmp[] = CRIU_RECORD_FILE ".tmp";
	uint8_t buf[CRIU_RECORD_SIZE_MAX];
	int len = criu_record_encode(r, buf, sizeof(buf)), fd, ret;

	if (len < 0)
		return len;
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	ret = write_all(fd, buf, (size_t)len);
	if (!ret && fsync(fd))
		ret = -errno;
	if (close(fd) && !ret)
		ret = -errno;
	if (!ret && renameat(dirfd, tmp, dirfd, CRIU_RECORD_FILE))
		ret = -errno;
	if (ret)
		unlinkat(dirfd, tmp, 0);
	return ret;
}

int criu_record_read(int dirfd, struct criu_record *r, char *err, size_t errlen)
{
	uint8_t buf[CRIU_RECORD_SIZE_MAX + 1];
	size_t len = 0;
	int fd = openat(dirfd, CRIU_RECORD_FILE, O_RDONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	/* One byte more than the largest record: a longer file is refused. */
	while (len < sizeof(buf)) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			break;
		}
		if (!n)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (ret)
		return ret;
	if (len > CRIU_RECORD_SIZE_MAX)
		return bad(err, errlen, "longer than a record of %u sessions", CRIU_RECORD_SESSIONS_MAX);
	return criu_record_decode(buf, len, r, err, errlen);
}
