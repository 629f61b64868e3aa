/* The migration stream (snap_migrate.h, docs/migration.md). */
#include "snap_migrate.h"
#include "monotonic.h"

#include "le.h"
#include "snap_internal.h"
#include "snap_reader.h"
#include "snap_sessions.h"
#include "snap_writer.h"
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

static int conn_fail(struct snap_migrate_conn *c, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int conn_fail(struct snap_migrate_conn *c, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->error, sizeof(c->error), fmt, ap);
	va_end(ap);
	return rc;
}

/* A cursor over one payload: every get checks the bytes left. */
struct cursor {
	const uint8_t *p;
	uint32_t left;
};

static int get_bytes(struct cursor *c, void *out, uint32_t n)
{
	if (c->left < n)
		return -EBADMSG;
	memcpy(out, c->p, n);
	c->p += n;
	c->left -= n;
	return 0;
}

static int get_u32(struct cursor *c, uint32_t *v)
{
	uint8_t b[4];
	int rc = get_bytes(c, b, 4);

	if (!rc)
		*v = le32_get(b);
	return rc;
}

static int get_u64(struct cursor *c, uint64_t *v)
{
	uint8_t b[8];
	int rc = get_bytes(c, b, 8);

	if (!rc)
		*v = le64_get(b);
	return rc;
}

/* A string: u32 length (at most SNAP_NAME_MAX), then its bytes. */
static int get_str(struct cursor *c, struct snap_migrate_str *s, uint32_t max)
{
	uint32_t n;

	if (get_u32(c, &n) || n > max || c->left < n)
		return -EBADMSG;
	s->ptr = (const char *)c->p;
	s->len = n;
	c->p += n;
	c->left -= n;
	return 0;
}

static int cursor_done(const struct cursor *c)
{
	return c->left ? -EBADMSG : 0;
}

int snap_migrate_str_copy(struct snap_migrate_str s, char *out, size_t cap)
{
	if (s.len >= cap)
		return -ENAMETOOLONG;
	if (memchr(s.ptr, 0, s.len))
		return -EBADMSG;
	memcpy(out, s.ptr, s.len);
	out[s.len] = 0;
	return 0;
}

int snap_migrate_header_decode(const uint8_t h[SNAP_MIGRATE_HEADER_BYTES], uint16_t *type, uint32_t *len)
{
	if (le32_get(h) != SNAP_MIGRATE_MAGIC || le16_get(h + 4) != SNAP_MIGRATE_VERSION)
		return -EBADMSG;
	*type = le16_get(h + 6);
	*len = le32_get(h + 8);
	if (*type < SNAP_MIGRATE_CHALLENGE || *type > SNAP_MIGRATE_JOURNAL_COPY || *len > SNAP_MIGRATE_PAYLOAD_MAX)
		return -EBADMSG;
	return 0;
}

int snap_migrate_challenge_decode(const uint8_t *p, uint32_t len, struct snap_migrate_challenge *out)
{
	struct cursor c = { p, len };

	if (get_bytes(&c, out->nonce, sizeof(out->nonce)))
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_auth_decode(const uint8_t *p, uint32_t len, struct snap_migrate_auth *out)
{
	struct cursor c = { p, len };

	if (get_str(&c, &out->session, SNAP_NAME_MAX) || !out->session.len ||
	    get_bytes(&c, out->proof, sizeof(out->proof)))
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_pull_decode(const uint8_t *p, uint32_t len, struct snap_migrate_pull *out)
{
	struct cursor c = { p, len };

	if (get_str(&c, &out->uuid, SNAP_NAME_MAX) || !out->uuid.len ||
	    get_str(&c, &out->url, SNAP_MIGRATE_MESSAGE_MAX) || !out->url.len)
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_streams_decode(const uint8_t *p, uint32_t len, struct snap_migrate_streams *out)
{
	struct cursor c = { p, len };

	if (get_u32(&c, &out->count) || get_bytes(&c, out->key, sizeof(out->key)) || !out->count ||
	    out->count >= SNAP_MIGRATE_STREAMS_MAX)
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_join_decode(const uint8_t *p, uint32_t len, struct snap_migrate_join *out)
{
	struct cursor c = { p, len };

	if (get_bytes(&c, out->key, sizeof(out->key)))
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_journal_base_decode(const uint8_t *p, uint32_t len, struct snap_migrate_journal_base *out)
{
	struct cursor c = { p, len };

	if (get_bytes(&c, out->base_hash, sizeof(out->base_hash)) || get_u64(&c, &out->base_bytes) ||
	    get_bytes(&c, out->hash, sizeof(out->hash)) || get_u64(&c, &out->bytes) ||
	    out->bytes > SNAP_MIGRATE_JOURNAL_MAX || out->base_bytes > SNAP_MIGRATE_JOURNAL_MAX)
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_journal_copy_decode(const uint8_t *p, uint32_t len, struct snap_migrate_journal_copy *out)
{
	struct cursor c = { p, len };

	if (get_u64(&c, &out->offset) || get_u64(&c, &out->len) || !out->len || out->offset + out->len < out->offset)
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_begin_decode(const uint8_t *p, uint32_t len, struct snap_migrate_begin *out)
{
	struct cursor c = { p, len };

	if (get_u32(&c, &out->flags) || get_u32(&c, &out->chunk_size) || get_u32(&c, &out->region_count) ||
	    get_u32(&c, &out->driver_version) || get_u32(&c, &out->auth_flags) || get_u32(&c, &out->owner_uid) ||
	    get_bytes(&c, out->credential, sizeof(out->credential)) ||
	    get_bytes(&c, out->device_uuid, sizeof(out->device_uuid)) || get_str(&c, &out->name, SNAP_NAME_MAX) ||
	    get_str(&c, &out->parent, SNAP_NAME_MAX) || get_str(&c, &out->device_name, SNAP_NAME_MAX))
		return -EBADMSG;
	if (out->flags & ~SNAP_MIGRATE_FLAGS_KNOWN || out->auth_flags & ~SNAP_AUTH_KNOWN ||
	    out->chunk_size < SNAP_CHUNK_SIZE_MIN || out->chunk_size > SNAP_CHUNK_SIZE_MAX ||
	    out->chunk_size & (out->chunk_size - 1) || out->region_count > SNAP_MIGRATE_REGIONS_MAX ||
	    !out->name.len)
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_region_decode(const uint8_t *p, uint32_t len, struct snap_migrate_region *out)
{
	struct cursor c = { p, len };

	if (get_u64(&c, &out->addr) || get_u64(&c, &out->size) || get_u32(&c, &out->flags))
		return -EBADMSG;
	if (!out->size || out->addr + out->size < out->addr)
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_chunk_decode(const uint8_t *p, uint32_t len, struct snap_migrate_chunk *out)
{
	struct cursor c = { p, len };
	uint32_t reserved;

	if (get_u32(&c, &out->region) || get_u32(&c, &out->kind) || get_u64(&c, &out->index) ||
	    get_u64(&c, &out->device_hash) || get_bytes(&c, out->hash, sizeof(out->hash)) ||
	    get_u32(&c, &reserved) || reserved)
		return -EBADMSG;
	_Static_assert(4 + 4 + 8 + 8 + SNAP_HASH_BYTES + 4 == SNAP_MIGRATE_CHUNK_HEAD_BYTES - 4,
		       "chunk record head");
	if (out->kind > SNAP_MIGRATE_CHUNK_ZSTD)
		return -EBADMSG;
	out->data = c.p;
	out->len = c.left;
	/* Only data carries bytes, and data is never empty. */
	if (snap_migrate_chunk_has_data(out->kind) != (out->len > 0))
		return -EBADMSG;
	return 0;
}

int snap_migrate_end_decode(const uint8_t *p, uint32_t len, struct snap_migrate_end *out)
{
	struct cursor c = { p, len };

	if (get_bytes(&c, out->stream_hash, sizeof(out->stream_hash)))
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_ack_decode(const uint8_t *p, uint32_t len, struct snap_migrate_ack *out)
{
	struct cursor c = { p, len };
	uint32_t status;

	if (get_u32(&c, &status) || get_str(&c, &out->message, SNAP_MIGRATE_MESSAGE_MAX))
		return -EBADMSG;
	out->status = (int32_t)status;
	/* 0 or an errno, never a positive or absurd value. */
	if (out->status > 0 || out->status < -4095)
		return -EBADMSG;
	return cursor_done(&c);
}

int snap_migrate_conn_init(struct snap_migrate_conn *c, int fd)
{
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	sha256_init(&c->sent);
	sha256_init(&c->received);
	c->buf = malloc(SNAP_MIGRATE_PAYLOAD_MAX);
	return c->buf ? 0 : -ENOMEM;
}

void snap_migrate_conn_fini(struct snap_migrate_conn *c)
{
	free(c->buf);
	c->buf = NULL;
}


void snap_migrate_cap_init(struct snap_migrate_cap *cap, uint64_t bytes_per_s)
{
	memset(cap, 0, sizeof(*cap));
	cap->bytes_per_s = bytes_per_s;
	pthread_mutex_init(&cap->mu, NULL);
}

void snap_migrate_cap_fini(struct snap_migrate_cap *cap)
{
	pthread_mutex_destroy(&cap->mu);
}

/* --max-bandwidth: sleep until what every stream sent fits the rate. */
static void bandwidth_wait(struct snap_migrate_conn *c, uint64_t bytes)
{
	struct snap_migrate_cap *cap = c->cap;
	uint64_t due_ns, now;

	if (!cap || !cap->bytes_per_s)
		return;
	pthread_mutex_lock(&cap->mu);
	if (!cap->start_ns)
		cap->start_ns = monotonic_ns();
	cap->bytes += bytes;
	due_ns = cap->start_ns + (uint64_t)((double)cap->bytes * 1e9 / (double)cap->bytes_per_s);
	pthread_mutex_unlock(&cap->mu);
	now = monotonic_ns();
	if (due_ns > now) {
		struct timespec ts = { (time_t)((due_ns - now) / 1000000000ull), (long)((due_ns - now) % 1000000000ull) };

		nanosleep(&ts, NULL);
	}
}

static int write_iov(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* What of a frame's payload the stream hash covers: all of it, but of a
 * CHUNK only its record, whose XXH3-128 covers the data and is checked on
 * arrival. Hashing the chunk bytes a second time, in SHA-256, held both ends
 * to about 100 MiB/s. */
static uint32_t stream_hashed_bytes(uint16_t type, uint32_t len)
{
	const uint32_t record = SNAP_MIGRATE_CHUNK_HEAD_BYTES - 4;

	return type == SNAP_MIGRATE_CHUNK && len > record ? record : len;
}

int snap_migrate_send(struct snap_migrate_conn *c, uint16_t type, const void *head, uint32_t head_len,
		      const void *data, uint32_t data_len)
{
	uint8_t h[SNAP_MIGRATE_HEADER_BYTES];
	uint32_t len = head_len + data_len, hashed;
	struct iovec iov[3] = {
		{ h, sizeof(h) },
		{ (void *)head, head_len },
		{ (void *)data, data_len },
	};
	int rc;

	if (len > SNAP_MIGRATE_PAYLOAD_MAX)
		return conn_fail(c, -EMSGSIZE, "frame of %u bytes", len);
	le32_put(h, SNAP_MIGRATE_MAGIC);
	le16_put(h + 4, SNAP_MIGRATE_VERSION);
	le16_put(h + 6, type);
	le32_put(h + 8, len);
	hashed = stream_hashed_bytes(type, len);
	sha256_update(&c->sent, h, sizeof(h));
	sha256_update(&c->sent, head, hashed < head_len ? hashed : head_len);
	if (hashed > head_len)
		sha256_update(&c->sent, data, hashed - head_len);
	bandwidth_wait(c, sizeof(h) + len);
	rc = c->tls ? tls_conn_send(c->tls, iov, 3) : write_iov(c->fd, iov, 3);
	if (rc)
		return conn_fail(c, rc, "send: %s", strerror(-rc));
	c->bytes_sent += sizeof(h) + len;
	return 0;
}

static int read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t r = read(fd, p, len);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!r)
			return -EPIPE;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

/* The end of the stream is -EPIPE over TLS too (where it reads -ECONNRESET). */
static int conn_read(struct snap_migrate_conn *c, void *buf, size_t len)
{
	int rc;

	if (!c->tls)
		return read_full(c->fd, buf, len);
	rc = tls_conn_recv_exact(c->tls, buf, len);
	return rc == -ECONNRESET ? -EPIPE : rc;
}

int snap_migrate_recv(struct snap_migrate_conn *c, uint16_t *type, uint32_t *len)
{
	uint8_t h[SNAP_MIGRATE_HEADER_BYTES];
	int rc = conn_read(c, h, sizeof(h));

	if (rc)
		return conn_fail(c, rc, rc == -EPIPE ? "the peer closed the stream" : "receive: %s", strerror(-rc));
	if (snap_migrate_header_decode(h, type, len))
		return conn_fail(c, -EBADMSG, "malformed frame header");
	rc = conn_read(c, c->buf, *len);
	if (rc)
		return conn_fail(c, rc, rc == -EPIPE ? "the peer closed the stream mid-frame" : "receive: %s",
				 strerror(-rc));
	sha256_update(&c->received, h, sizeof(h));
	sha256_update(&c->received, c->buf, stream_hashed_bytes(*type, *len));
	c->bytes_received += sizeof(h) + *len;
	return 0;
}

static void put_str(uint8_t **p, const char *s)
{
	uint32_t n = (uint32_t)strlen(s);

	le32_put(*p, n);
	memcpy(*p + 4, s, n);
	*p += 4 + n;
}

int snap_migrate_ack_send(struct snap_migrate_conn *c, int status, const char *message)
{
	uint8_t buf[4 + 4 + SNAP_MIGRATE_MESSAGE_MAX], *p = buf + 4;
	char msg[SNAP_MIGRATE_MESSAGE_MAX + 1];

	snprintf(msg, sizeof(msg), "%s", message ? message : "");
	le32_put(buf, (uint32_t)status);
	put_str(&p, msg);
	return snap_migrate_send(c, SNAP_MIGRATE_ACK, buf, (uint32_t)(p - buf), NULL, 0);
}

/* The source's side of one round. */

static int send_begin(struct snap_migrate_conn *c, const struct snap_manifest *m, const char *parent,
		      uint32_t flags, uint32_t regions, const struct auth_token *token,
		      const uint8_t nonce[AUTH_NONCE_BYTES])
{
	uint8_t buf[24 + SNAP_CREDENTIAL_BYTES + 16 + 3 * (4 + SNAP_NAME_MAX)], *p = buf;
	uint8_t cred[SNAP_CREDENTIAL_BYTES];
	int rc;

	le32_put(p, flags);
	le32_put(p + 4, m->chunk_size);
	le32_put(p + 8, regions);
	le32_put(p + 12, m->driver_version);
	le32_put(p + 16, m->auth_flags);
	le32_put(p + 20, m->owner_uid);
	p += 24;
	memcpy(cred, m->credential, sizeof(cred));
	auth_migrate_credential_mask(token, nonce, m->session_id, cred);
	memcpy(p, cred, sizeof(cred));
	explicit_bzero(cred, sizeof(cred));
	p += SNAP_CREDENTIAL_BYTES;
	memcpy(p, m->device_uuid, 16);
	p += 16;
	put_str(&p, m->name);
	put_str(&p, parent ? parent : "");
	put_str(&p, m->device_name);
	rc = snap_migrate_send(c, SNAP_MIGRATE_BEGIN, buf, (uint32_t)(p - buf), NULL, 0);
	explicit_bzero(buf, sizeof(buf));
	return rc;
}

static int send_chunk(struct snap_migrate_conn *c, uint32_t region, uint64_t index, uint32_t kind,
		      const struct snap_chunk_ref *ref, const void *data, uint32_t len)
{
	uint8_t head[SNAP_MIGRATE_CHUNK_HEAD_BYTES - 4];

	le32_put(head, region);
	le32_put(head + 4, kind);
	le64_put(head + 8, index);
	le64_put(head + 16, ref->device_hash);
	memcpy(head + 24, snap_migrate_chunk_has_data(kind) ? ref->hash : (const uint8_t[SNAP_HASH_BYTES]){ 0 },
	       SNAP_HASH_BYTES);
	le32_put(head + 24 + SNAP_HASH_BYTES, 0);
	return snap_migrate_send(c, SNAP_MIGRATE_CHUNK, head, sizeof(head), data, len);
}

/* A snapshot's journal (the caller's file, without the store's header)
 * in a memfd, mapped read-only: *p is NULL for an empty one. */
struct journal_map {
	int fd;
	const uint8_t *p;
	size_t len;
};

static int journal_map_open(struct snap_migrate_conn *c, struct snap_reader *r, struct journal_map *jm)
{
	off_t n;
	int rc;

	*jm = (struct journal_map){ .fd = memfd_create("tern-migrate-journal", MFD_CLOEXEC) };
	if (jm->fd < 0)
		return conn_fail(c, -errno, "memfd: %s", strerror(errno));
	rc = snap_reader_journal_write(r, jm->fd);
	if (rc)
		return conn_fail(c, rc, "journal: %s", strerror(-rc));
	n = lseek(jm->fd, 0, SEEK_END);
	if (n < 0)
		return conn_fail(c, -errno, "journal: %s", strerror(errno));
	jm->len = (size_t)n;
	if (!n)
		return 0;
	jm->p = mmap(NULL, jm->len, PROT_READ, MAP_PRIVATE, jm->fd, 0);
	if (jm->p == MAP_FAILED) {
		jm->p = NULL;
		return conn_fail(c, -errno, "journal: mmap: %s", strerror(errno));
	}
	return 0;
}

static void journal_map_close(struct journal_map *jm)
{
	if (jm->p)
		munmap((void *)jm->p, jm->len);
	if (jm->fd >= 0)
		close(jm->fd);
	jm->fd = -1;
	jm->p = NULL;
}

/* Literal journal bytes, in JOURNAL frames. */
static int journal_literal_send(struct snap_migrate_conn *c, const uint8_t *p, size_t len,
				struct snap_migrate_stats *st)
{
	int rc = 0;

	while (!rc && len) {
		uint32_t n = len < SNAP_MIGRATE_JOURNAL_PIECE ? (uint32_t)len : SNAP_MIGRATE_JOURNAL_PIECE;

		rc = snap_migrate_send(c, SNAP_MIGRATE_JOURNAL, p, n, NULL, 0);
		p += n;
		len -= n;
		st->journal_bytes += n;
	}
	return rc;
}

static int journal_copy_send(struct snap_migrate_conn *c, uint64_t offset, uint64_t len,
			     struct snap_migrate_stats *st)
{
	uint8_t b[16];

	if (!len)
		return 0;
	le64_put(b, offset);
	le64_put(b + 8, len);
	st->journal_reused_bytes += len;
	return snap_migrate_send(c, SNAP_MIGRATE_JOURNAL_COPY, b, sizeof(b), NULL, 0);
}

/* A journal is a compacting LMDB copy (tracker_copy_fd): a page the
 * parent's journal holds may sit elsewhere in the next, but pages move
 * whole, so the delta matches page-sized blocks wherever they are. */
#define JOURNAL_BLOCK 4096u

struct block_slot {
	uint64_t hash;
	uint64_t offset_1;         /* the block's offset + 1; 0: empty */
};

/* Where the parent's journal holds block @p, or -1. */
static int64_t block_find(const struct block_slot *slots, uint64_t mask, const struct journal_map *base,
			  const uint8_t *p)
{
	uint64_t h = XXH3_64bits(p, JOURNAL_BLOCK);

	for (uint64_t i = h & mask; slots[i].offset_1; i = (i + 1) & mask)
		if (slots[i].hash == h && !memcmp(base->p + slots[i].offset_1 - 1, p, JOURNAL_BLOCK))
			return (int64_t)(slots[i].offset_1 - 1);
	return -1;
}

/* JOURNAL_BASE, then the journal as literal bytes and ranges of the
 * parent's journal, in the journal's order. */
static int journal_delta_send(struct snap_migrate_conn *c, const struct snap_manifest *m,
			      const struct snap_manifest *pm, const struct journal_map *cur,
			      const struct journal_map *base, struct snap_migrate_stats *st)
{
	uint64_t blocks = base->len / JOURNAL_BLOCK, cap = 16, copy_off = 0, copy_len = 0;
	size_t literal = 0;            /* where the bytes not yet sent begin */
	struct block_slot *slots;
	uint8_t head[2 * (SNAP_HASH_BYTES + 8)];
	int rc;

	while (cap < 2 * blocks)
		cap *= 2;
	slots = calloc(cap, sizeof(*slots));
	if (!slots)
		return conn_fail(c, -ENOMEM, "out of memory");
	for (uint64_t i = 0; i < blocks; i++) {
		uint64_t h = XXH3_64bits(base->p + i * JOURNAL_BLOCK, JOURNAL_BLOCK), j = h & (cap - 1);

		while (slots[j].offset_1 && slots[j].hash != h)
			j = (j + 1) & (cap - 1);
		if (!slots[j].offset_1)
			slots[j] = (struct block_slot){ h, i * JOURNAL_BLOCK + 1 };
	}
	memcpy(head, pm->journal_hash, SNAP_HASH_BYTES);
	le64_put(head + SNAP_HASH_BYTES, base->len);
	memcpy(head + SNAP_HASH_BYTES + 8, m->journal_hash, SNAP_HASH_BYTES);
	le64_put(head + 2 * SNAP_HASH_BYTES + 8, cur->len);
	rc = snap_migrate_send(c, SNAP_MIGRATE_JOURNAL_BASE, head, sizeof(head), NULL, 0);
	for (size_t off = 0; !rc && off + JOURNAL_BLOCK <= cur->len; off += JOURNAL_BLOCK) {
		int64_t at = block_find(slots, cap - 1, base, cur->p + off);

		if (at < 0)
			continue;
		if (off > literal) {
			rc = journal_copy_send(c, copy_off, copy_len, st);
			if (!rc)
				rc = journal_literal_send(c, cur->p + literal, off - literal, st);
			copy_len = 0;
		}
		if (copy_len && copy_off + copy_len == (uint64_t)at) {
			copy_len += JOURNAL_BLOCK;
		} else if (!rc) {
			rc = journal_copy_send(c, copy_off, copy_len, st);
			copy_off = (uint64_t)at;
			copy_len = JOURNAL_BLOCK;
		}
		literal = off + JOURNAL_BLOCK;
	}
	if (!rc)
		rc = journal_copy_send(c, copy_off, copy_len, st);
	if (!rc)
		rc = journal_literal_send(c, cur->p + literal, cur->len - literal, st);
	free(slots);
	return rc;
}

/* The round's journal: whole, or as a delta against @parent's (the
 * previous round, which the destination holds). */
static int send_journal(struct snap_migrate_conn *c, struct snap_reader *r, struct snap_reader *parent,
			struct snap_migrate_stats *st)
{
	struct journal_map cur = { .fd = -1 }, base = { .fd = -1 };
	int rc = journal_map_open(c, r, &cur);

	if (!rc && parent)
		rc = journal_map_open(c, parent, &base);
	if (!rc && parent)
		rc = journal_delta_send(c, snap_reader_manifest(r), snap_reader_manifest(parent), &cur, &base, st);
	else if (!rc)
		rc = journal_literal_send(c, cur.p, cur.len, st);
	journal_map_close(&base);
	journal_map_close(&cur);
	return rc;
}

static int ack_wait(struct snap_migrate_conn *c);

/* The destination answers a round only at its end, unless it refused it:
 * then its ACK is waiting, and the rest of the round need not be sent. */
static int refusal_check(struct snap_migrate_conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	int rc;

	/* A TLS record already read holds what poll would not see. */
	if (!(c->tls && tls_conn_pending(c->tls)) && (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR))))
		return 0;
	rc = ack_wait(c);
	return rc ? rc : conn_fail(c, -EPROTO, "the destination acknowledged a round it had not received");
}

static int ack_wait(struct snap_migrate_conn *c)
{
	struct snap_migrate_ack ack;
	uint16_t type;
	uint32_t len;
	char msg[SNAP_MIGRATE_MESSAGE_MAX + 1] = "";
	int rc = snap_migrate_recv(c, &type, &len);

	if (rc)
		return rc;
	if (type != SNAP_MIGRATE_ACK || snap_migrate_ack_decode(c->buf, len, &ack))
		return conn_fail(c, -EPROTO, "the destination sent no acknowledgement");
	if (snap_migrate_str_copy(ack.message, msg, sizeof(msg)))
		snprintf(msg, sizeof(msg), "?");
	memcpy(c->ack_message, msg, sizeof(c->ack_message));
	if (ack.status)
		return conn_fail(c, ack.status, "the destination refused: %s", msg);
	return 0;
}

/* The previous round's entry for the chunk at @addr holds the same bytes
 * and device hash: the destination copies it from its copy of that round
 * (snap_writer_chunk_unchanged).  A snapshot whose capture hashed on the
 * host stores such chunks as new entries (deduplicated), not from the
 * parent: this finds them too. */
static bool same_as_parent(const struct snap_chunk_list *pcl, uint64_t addr, uint32_t len,
			   const struct snap_chunk_ref *ref)
{
	if (!pcl || pcl->chunk_size == 0)
		return false;
	for (uint64_t i = 0; i < pcl->region_count; i++) {
		const struct snap_region *pr = &pcl->regions[i];
		uint64_t index;
		const struct snap_chunk_ref *pref;
		uint32_t plen;

		if (addr < pr->addr || addr >= pr->addr + pr->size || (addr - pr->addr) % pcl->chunk_size)
			continue;
		index = (addr - pr->addr) / pcl->chunk_size;
		plen = (uint32_t)(index + 1 < pr->chunk_count ? pcl->chunk_size : pr->size - index * pcl->chunk_size);
		pref = &pr->chunks[index];
		return plen == len && !(pref->flags & SNAP_CHUNK_ZERO) && pref->device_hash == ref->device_hash &&
		       !memcmp(pref->hash, ref->hash, SNAP_HASH_BYTES);
	}
	return false;
}

/* How long a source whose joined stream broke waits for the refusal that
 * says why on the first. */
#define REFUSAL_WAIT_MS 1000

/* END: the running hash of the frames this end sent before it. */
static int end_send(struct snap_migrate_conn *c)
{
	struct sha256 copy = c->sent;
	uint8_t end[SHA256_BYTES];

	sha256_final(&copy, end);
	return snap_migrate_send(c, SNAP_MIGRATE_END, end, sizeof(end), NULL, 0);
}

/* A round's chunks, taken in turn by the streams that send them. */
struct send_job {
	uint32_t region;
	uint64_t index;
	uint32_t kind;             /* SNAP_MIGRATE_CHUNK_*; DATA: with bytes, sent as stored */
	uint32_t len;              /* the chunk's bytes */
	struct snap_chunk_ref ref;
	/* A round followed while it is written: where its frame is (pack_id
	 * 0: read it from the committed snapshot, sr->r). */
	uint64_t pack_id, offset;
	uint32_t stored_size;
};

struct send_round {
	struct snap_store *store;
	struct snap_reader *r;     /* the committed snapshot; NULL while it is followed */
	const char *name;
	uint32_t chunk_size;
	pthread_mutex_t mu;        /* guards the rest */
	pthread_cond_t more;
	struct send_job *jobs;
	uint64_t njobs, jobs_cap;
	uint64_t next;
	bool closed;               /* no job comes after njobs */
	bool failed;               /* a stream failed: the others stop */
	bool writing;              /* the writer has not committed the round yet */
	uint64_t sent;             /* chunk frames the streams sent */
	struct snap_migrate_stats *st;
};

struct send_stream {
	struct send_round *sr;
	struct snap_migrate_conn *c;
	bool first;                /* the first stream: it watches for a refusal */
	pthread_t thread;
	uint64_t pack_id;          /* the pack open on pack_fd */
	int pack_fd;
	int rc;
};

static void send_round_init(struct send_round *sr, struct snap_store *store, const char *name,
			    struct snap_migrate_stats *st)
{
	*sr = (struct send_round){ .store = store, .name = name, .st = st };
	pthread_mutex_init(&sr->mu, NULL);
	pthread_cond_init(&sr->more, NULL);
}

static void send_round_fini(struct send_round *sr)
{
	free(sr->jobs);
	pthread_cond_destroy(&sr->more);
	pthread_mutex_destroy(&sr->mu);
}

/* Queue @job for the streams. */
static int send_job_add(struct send_round *sr, const struct send_job *job)
{
	int rc = 0;

	pthread_mutex_lock(&sr->mu);
	if (sr->njobs == sr->jobs_cap) {
		uint64_t cap = sr->jobs_cap ? 2 * sr->jobs_cap : 256;
		struct send_job *jobs = realloc(sr->jobs, cap * sizeof(*jobs));

		if (jobs) {
			sr->jobs = jobs;
			sr->jobs_cap = cap;
		} else {
			rc = -ENOMEM;
		}
	}
	if (!rc) {
		sr->jobs[sr->njobs++] = *job;
		pthread_cond_signal(&sr->more);
	}
	pthread_mutex_unlock(&sr->mu);
	return rc;
}

/* No more jobs (@failed: and stop the streams). */
static void send_jobs_close(struct send_round *sr, bool failed)
{
	pthread_mutex_lock(&sr->mu);
	sr->closed = true;
	sr->failed |= failed;
	pthread_cond_broadcast(&sr->more);
	pthread_mutex_unlock(&sr->mu);
}

/* The next job, waiting for one while the round is followed. */
static bool send_job_take(struct send_round *sr, struct send_job *job)
{
	bool got;

	pthread_mutex_lock(&sr->mu);
	while (!sr->failed && sr->next == sr->njobs && !sr->closed)
		pthread_cond_wait(&sr->more, &sr->mu);
	got = !sr->failed && sr->next < sr->njobs;
	if (got)
		*job = sr->jobs[sr->next++];
	pthread_mutex_unlock(&sr->mu);
	return got;
}

/* A followed round's chunk, its frame as the writer wrote it into a pack
 * it has not indexed yet: header and stored bytes checked (the frame's
 * checksums; the destination checks the content hash). */
static int pack_frame_get(struct send_stream *ss, const struct send_job *job, uint8_t *buf, uint32_t *codec)
{
	struct snap_chunk_loc loc = { .pack_id = job->pack_id, .offset = job->offset, .raw_size = job->len,
				      .stored_size = job->stored_size };
	struct snap_frame f;
	char name[64];
	int rc;

	if (job->stored_size > job->len)
		return conn_fail(ss->c, -EBADMSG, "snapshot %s: region %u chunk %llu: %u stored bytes for %u",
				 ss->sr->name, job->region, (unsigned long long)job->index, job->stored_size, job->len);
	if (ss->pack_id != job->pack_id) {
		if (ss->pack_fd >= 0)
			close(ss->pack_fd);
		snap_pack_name(name, sizeof(name), job->pack_id, "pack");
		ss->pack_fd = openat(ss->sr->store->packs_fd, name, O_RDONLY | O_CLOEXEC);
		ss->pack_id = ss->pack_fd >= 0 ? job->pack_id : 0;
		if (ss->pack_fd < 0)
			return conn_fail(ss->c, -errno, "snapshot %s: pack %s: %s", ss->sr->name, name, strerror(errno));
	}
	memcpy(loc.hash, job->ref.hash, SNAP_HASH_BYTES);
	rc = snap_pack_frame_read(ss->pack_fd, &loc, &f, buf);
	if (!rc && f.codec == SNAP_CODEC_ZSTD && f.stored_size >= job->len)
		rc = -EBADMSG;  /* the writer stores none: a compressed frame is smaller */
	if (rc)
		return conn_fail(ss->c, rc, "snapshot %s: region %u chunk %llu: its frame in pack %016llx at %llu: %s",
				 ss->sr->name, job->region, (unsigned long long)job->index,
				 (unsigned long long)job->pack_id, (unsigned long long)job->offset, strerror(-rc));
	*codec = f.codec;
	return 0;
}

/* One stream's share of the round's chunks; a joined stream ends its
 * share with its own END. */
static void *send_stream_run(void *arg)
{
	struct send_stream *ss = arg;
	struct send_round *sr = ss->sr;
	uint8_t *chunk = malloc(sr->chunk_size);
	struct send_job job;
	int rc = chunk ? 0 : conn_fail(ss->c, -ENOMEM, "out of memory");

	while (!rc && send_job_take(sr, &job)) {
		uint32_t codec = SNAP_CODEC_RAW, stored = 0;
		bool data = snap_migrate_chunk_has_data(job.kind);

		/* As stored: compressed where zstd paid when it was written. */
		if (data && job.pack_id) {
			rc = pack_frame_get(ss, &job, chunk, &codec);
			stored = job.stored_size;
		} else if (data) {
			rc = snap_reader_chunk_stored(sr->r, job.region, job.index, chunk, sr->chunk_size, &codec,
						      &stored);
			if (rc)
				conn_fail(ss->c, rc, "snapshot %s: %s", sr->name, snap_store_error(sr->store));
		}
		if (rc)
			break;
		if (data && codec == SNAP_CODEC_ZSTD)
			job.kind = SNAP_MIGRATE_CHUNK_ZSTD;
		rc = send_chunk(ss->c, job.region, job.index, job.kind, &job.ref, data ? chunk : NULL, stored);
		if (!rc && ss->first)
			rc = refusal_check(ss->c);
		pthread_mutex_lock(&sr->mu);
		sr->sent++;
		sr->st->chunks_before_commit += sr->writing;
		if (data) {
			sr->st->data_chunks++;
			sr->st->data_bytes += job.len;
			sr->st->data_sent_bytes += stored;
			sr->st->compressed_chunks += codec == SNAP_CODEC_ZSTD;
		}
		pthread_mutex_unlock(&sr->mu);
	}
	if (!rc && !ss->first)
		rc = end_send(ss->c);
	if (rc) {
		pthread_mutex_lock(&sr->mu);
		sr->failed = true;
		pthread_cond_broadcast(&sr->more);
		pthread_mutex_unlock(&sr->mu);
	}
	if (ss->pack_fd >= 0)
		close(ss->pack_fd);
	free(chunk);
	ss->rc = rc;
	return NULL;
}

/* The streams that send a round's chunks: c's and every stream joined to
 * it, each on a thread of its own while the caller queues the jobs. */
struct send_streams {
	struct send_stream ss[SNAP_MIGRATE_STREAMS_MAX];
	unsigned started;
};

static int send_streams_start(struct snap_migrate_conn *c, struct send_round *sr, struct send_streams *sx)
{
	sx->started = 0;
	for (unsigned i = 0; i <= c->joined_count; i++) {
		sx->ss[i] = (struct send_stream){ .sr = sr, .c = i ? c->joined[i - 1] : c, .first = !i, .pack_fd = -1 };
		if (pthread_create(&sx->ss[i].thread, NULL, send_stream_run, &sx->ss[i])) {
			send_jobs_close(sr, true);
			return conn_fail(c, -EAGAIN, "cannot start a stream's thread");
		}
		sx->started++;
	}
	return 0;
}

/* Wait for the streams once the jobs are closed: 0, or the first error. */
static int send_streams_end(struct snap_migrate_conn *c, struct send_streams *sx, int rc)
{
	int first_rc;

	for (unsigned i = 0; i < sx->started; i++)
		pthread_join(sx->ss[i].thread, NULL);
	/* The first stream's error (a refusal it read) before a joined one's. */
	first_rc = sx->started ? sx->ss[0].rc : 0;
	if (!rc)
		rc = first_rc;
	for (unsigned i = 1; i < sx->started; i++)
		if (!rc && sx->ss[i].rc)
			rc = conn_fail(c, sx->ss[i].rc, "stream %u: %s", i, c->joined[i - 1]->error);
	/* A destination that refused says why on the first stream, maybe
	 * only after a joined stream saw it hang up. */
	if (rc && !first_rc && sx->started) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int refused = poll(&p, 1, REFUSAL_WAIT_MS) == 1 ? ack_wait(c) : 0;

		if (refused)
			rc = refused;
	}
	sx->started = 0;
	return rc;
}

static int send_regions(struct snap_migrate_conn *c, const struct snap_region *regions, uint64_t count,
			size_t stride)
{
	int rc = 0;

	for (uint64_t i = 0; !rc && i < count; i++) {
		const struct snap_region *reg = (const void *)((const uint8_t *)regions + i * stride);
		uint8_t head[20];

		le64_put(head, reg->addr);
		le64_put(head + 8, reg->size);
		le32_put(head + 16, reg->flags);
		rc = snap_migrate_send(c, SNAP_MIGRATE_REGION, head, sizeof(head), NULL, 0);
	}
	return rc;
}

/* The stream's kind of a chunk with bytes: unchanged where the previous
 * round holds it at the same address. */
static uint32_t stored_chunk_kind(const struct snap_chunk_list *pcl, const struct snap_region *reg,
				  uint32_t chunk_size, uint64_t index, const struct snap_chunk_ref *ref)
{
	uint32_t len = snap_region_chunk_bytes(reg, chunk_size, index);

	if (ref->flags & SNAP_CHUNK_FROM_PARENT || same_as_parent(pcl, reg->addr + index * chunk_size, len, ref))
		return SNAP_MIGRATE_CHUNK_UNCHANGED;
	return SNAP_MIGRATE_CHUNK_DATA;
}

static void stats_count(struct snap_migrate_stats *st, uint32_t kind)
{
	st->chunks++;
	st->zero_chunks += kind == SNAP_MIGRATE_CHUNK_ZERO;
	st->unchanged_chunks += kind == SNAP_MIGRATE_CHUNK_UNCHANGED;
}

/* The tail of a round once its chunks went: the journal, END, ACK. */
static int round_finish(struct snap_migrate_conn *c, struct snap_reader *r, struct snap_reader *parent,
			uint64_t start, struct snap_migrate_stats *st)
{
	int rc = send_journal(c, r, parent, st);

	if (!rc)
		rc = end_send(c);
	/* Every stream's bytes (start: all of theirs before the round). */
	st->stream_bytes = c->bytes_sent - start;
	for (unsigned i = 0; i < c->joined_count; i++)
		st->stream_bytes += c->joined[i]->bytes_sent;
	if (!rc)
		rc = ack_wait(c);
	return rc;
}

static uint64_t streams_bytes_sent(const struct snap_migrate_conn *c)
{
	uint64_t n = c->bytes_sent;

	for (unsigned i = 0; i < c->joined_count; i++)
		n += c->joined[i]->bytes_sent;
	return n;
}

int snap_migrate_snapshot_send(struct snap_migrate_conn *c, struct snap_store *store, const char *name,
			       const char *parent, uint32_t flags, const struct auth_token *token,
			       const uint8_t nonce[AUTH_NONCE_BYTES], struct snap_migrate_stats *stats)
{
	const struct snap_chunk_list *cl;
	const struct snap_manifest *m;
	struct snap_migrate_stats st = { 0 };
	struct snap_reader *r = NULL, *pr = NULL;
	const struct snap_chunk_list *pcl = NULL;
	struct send_round sr;
	struct send_streams sx = { .started = 0 };
	uint64_t start = streams_bytes_sent(c);
	int rc;

	send_round_init(&sr, store, name, &st);
	rc = snap_reader_open(store, name, &r);
	if (rc) {
		conn_fail(c, rc, "snapshot %s: %s", name, snap_store_error(store));
		goto out;
	}
	sr.r = r;
	m = snap_reader_manifest(r);
	cl = snap_reader_chunk_list(r);
	sr.chunk_size = cl->chunk_size;
	if (parent && parent[0]) {
		rc = snap_reader_open(store, parent, &pr);
		if (rc) {
			conn_fail(c, rc, "snapshot %s: %s", parent, snap_store_error(store));
			goto out;
		}
		pcl = snap_reader_chunk_list(pr);
		if (pcl->chunk_size != cl->chunk_size)
			pcl = NULL;
	}
	/* Unchanged entries name the previous round: only so may they be sent. */
	if (strcmp(m->parent, parent ? parent : "")) {
		rc = conn_fail(c, -EINVAL, "snapshot %s: its parent is '%s', not the previous round's", name,
			       m->parent);
		goto out;
	}
	rc = send_begin(c, m, parent, flags, (uint32_t)cl->region_count, token, nonce);
	if (!rc)
		rc = refusal_check(c);
	if (!rc)
		rc = send_regions(c, cl->regions, cl->region_count, sizeof(*cl->regions));
	/* The records without bytes go at once on the first stream; the
	 * chunks with bytes are spread over every stream after them. */
	for (uint64_t i = 0; !rc && i < cl->region_count; i++) {
		const struct snap_region *reg = &cl->regions[i];

		for (uint64_t j = 0; !rc && j < reg->chunk_count; j++) {
			const struct snap_chunk_ref *ref = &reg->chunks[j];
			struct send_job job = { .region = (uint32_t)i, .index = j, .ref = *ref,
						.len = snap_region_chunk_bytes(reg, cl->chunk_size, j) };

			job.kind = ref->flags & SNAP_CHUNK_ZERO ? SNAP_MIGRATE_CHUNK_ZERO
								 : stored_chunk_kind(pcl, reg, cl->chunk_size, j, ref);
			stats_count(&st, job.kind);
			if (snap_migrate_chunk_has_data(job.kind))
				rc = send_job_add(&sr, &job) ? conn_fail(c, -ENOMEM, "out of memory") : 0;
			else
				rc = send_chunk(c, job.region, j, job.kind, ref, NULL, 0);
		}
	}
	if (!rc)
		rc = send_streams_start(c, &sr, &sx);
	send_jobs_close(&sr, rc != 0);
	rc = send_streams_end(c, &sx, rc);
	if (!rc)
		rc = round_finish(c, r, pr, start, &st);
out:
	send_round_fini(&sr);
	snap_reader_close(pr);
	snap_reader_close(r);
	if (stats)
		*stats = st;
	return rc;
}

/* ---- A round followed while its writer writes it ---- */

/* How often the follower looks for more of the progress log. */
#define FOLLOW_POLL_US 1000
/* Read from the log at a time. */
#define FOLLOW_READ_BYTES (64u << 10)

struct follow_region {
	struct snap_region r;           /* r.chunks: the entries logged, for the check at commit */
	uint8_t *logged;                /* one byte per chunk */
};

struct follow {
	struct snap_migrate_conn *c;
	struct snap_store *store;
	const char *name;
	const char *parent;
	uint32_t flags;
	const struct auth_token *token;
	const uint8_t *nonce;
	const struct snap_migrate_writer_watch *watch;
	struct snap_migrate_stats *st;
	struct send_round sr;
	struct send_streams sx;
	int lock_fd;                    /* the store's, shared: no gc moves a frame we send */
	int log_fd;
	uint8_t *buf;                   /* bytes of the log read and not yet decoded */
	size_t len;
	uint64_t sum;                   /* the chain's */
	uint64_t records;
	struct snap_manifest m;         /* BEGIN's */
	bool begun, announced, committed;
	struct follow_region *regions;
	uint64_t nregions;
	uint64_t chunks_logged, chunks_total;
	struct snap_reader *pr;         /* the previous round */
	const struct snap_chunk_list *pcl;
	int writer;                     /* the watch's last word */
};

static uint64_t follow_sent(struct follow *f)
{
	uint64_t n;

	pthread_mutex_lock(&f->sr.mu);
	n = f->sr.sent;
	pthread_mutex_unlock(&f->sr.mu);
	return n;
}

/* Ask the watch; once the writer committed, what the streams send is no
 * more "before the commit". */
static int follow_writer(struct follow *f)
{
	f->writer = f->watch->state(f->watch->arg, follow_sent(f));
	if (f->writer) {
		pthread_mutex_lock(&f->sr.mu);
		f->sr.writing = false;
		pthread_mutex_unlock(&f->sr.mu);
	}
	return f->writer;
}

static int follow_bad(struct follow *f, const char *what)
{
	return conn_fail(f->c, -EBADMSG, "snapshot %s: its progress log is refused: record %llu %s", f->name,
			 (unsigned long long)f->records, what);
}

/* BEGIN and the REGIONs go once every region is known (at the first chunk,
 * or at COMMIT for a snapshot of none); then the streams start. */
static int follow_announce(struct follow *f)
{
	int rc;

	if (f->announced)
		return 0;
	f->announced = true;
	rc = send_begin(f->c, &f->m, f->parent, f->flags, (uint32_t)f->nregions, f->token, f->nonce);
	if (!rc)
		rc = refusal_check(f->c);
	if (!rc)
		rc = send_regions(f->c, &f->regions[0].r, f->nregions, sizeof(*f->regions));
	if (!rc)
		rc = send_streams_start(f->c, &f->sr, &f->sx);
	return rc;
}

static int follow_begin(struct follow *f, const struct snap_manifest *m)
{
	int rc;

	if (strcmp(m->name, f->name) || strcmp(m->parent, f->parent))
		return follow_bad(f, "names another snapshot or parent");
	f->m = *m;
	f->sr.chunk_size = m->chunk_size;
	f->begun = true;
	if (!f->parent[0])
		return 0;
	rc = snap_reader_open(f->store, f->parent, &f->pr);
	if (rc)
		return conn_fail(f->c, rc, "snapshot %s: %s", f->parent, snap_store_error(f->store));
	f->pcl = snap_reader_chunk_list(f->pr);
	if (f->pcl->chunk_size != m->chunk_size)
		f->pcl = NULL;
	return 0;
}

static int follow_region(struct follow *f, const struct snap_region *reg)
{
	struct follow_region *regions, *fr;
	uint64_t chunks = reg->size / f->m.chunk_size + (reg->size % f->m.chunk_size != 0);

	if (f->nregions >= SNAP_MIGRATE_REGIONS_MAX || chunks > UINT32_MAX)
		return follow_bad(f, "declares too many regions or chunks");
	regions = realloc(f->regions, (f->nregions + 1) * sizeof(*regions));
	if (!regions)
		return conn_fail(f->c, -ENOMEM, "out of memory");
	f->regions = regions;
	fr = &regions[f->nregions];
	fr->r = *reg;
	fr->r.chunk_count = chunks;
	fr->r.chunks = calloc(chunks ? chunks : 1, sizeof(*fr->r.chunks));
	fr->logged = calloc(chunks ? chunks : 1, 1);
	if (!fr->r.chunks || !fr->logged) {
		free(fr->r.chunks);
		free(fr->logged);
		return conn_fail(f->c, -ENOMEM, "out of memory");
	}
	f->nregions++;
	f->chunks_total += chunks;
	return 0;
}

/* A chunk settled: queued for the streams at once. */
static int follow_chunk(struct follow *f, const struct snap_progress_chunk *pc)
{
	struct follow_region *fr = pc->region < f->nregions ? &f->regions[pc->region] : NULL;
	struct snap_chunk_ref *ref;
	struct send_job job = { .region = pc->region, .index = pc->index };
	int rc;

	if (!fr || pc->index >= fr->r.chunk_count || fr->logged[pc->index])
		return follow_bad(f, "names a chunk outside the snapshot, or one twice");
	fr->logged[pc->index] = 1;
	f->chunks_logged++;
	ref = &fr->r.chunks[pc->index];
	ref->device_hash = pc->device_hash;
	memcpy(ref->hash, pc->hash, SNAP_HASH_BYTES);
	ref->flags = pc->kind == SNAP_PROGRESS_CHUNK_ZERO ? SNAP_CHUNK_ZERO
		   : pc->kind == SNAP_PROGRESS_CHUNK_PARENT ? SNAP_CHUNK_FROM_PARENT : 0;
	rc = follow_announce(f);
	if (rc)
		return rc;
	job.ref = *ref;
	job.len = snap_region_chunk_bytes(&fr->r, f->m.chunk_size, pc->index);
	job.kind = pc->kind == SNAP_PROGRESS_CHUNK_ZERO ? SNAP_MIGRATE_CHUNK_ZERO
		 : stored_chunk_kind(f->pcl, &fr->r, f->m.chunk_size, pc->index, ref);
	if (job.kind == SNAP_MIGRATE_CHUNK_DATA) {
		job.pack_id = pc->pack_id;
		job.offset = pc->offset;
		job.stored_size = pc->stored_size;
	}
	stats_count(f->st, job.kind);
	return send_job_add(&f->sr, &job) ? conn_fail(f->c, -ENOMEM, "out of memory") : 0;
}

static int follow_record(struct follow *f, const struct snap_progress_record *rec)
{
	if (!f->begun && rec->type != SNAP_PROGRESS_BEGIN)
		return follow_bad(f, "comes before its BEGIN");
	switch (rec->type) {
	case SNAP_PROGRESS_BEGIN:
		return f->begun ? follow_bad(f, "is a second BEGIN") : follow_begin(f, &rec->begin);
	case SNAP_PROGRESS_REGION:
		return f->announced ? follow_bad(f, "is a region after a chunk") : follow_region(f, &rec->region);
	case SNAP_PROGRESS_CHUNK:
		return follow_chunk(f, &rec->chunk);
	default:
		if (rec->commit_regions != f->nregions || rec->commit_chunks != f->chunks_logged ||
		    f->chunks_logged != f->chunks_total)
			return follow_bad(f, "(COMMIT) counts other records than the log holds");
		f->committed = true;
		return follow_announce(f);
	}
}

/* Decode what the log holds so far: 0 (maybe more to come), or the error. */
static int follow_decode(struct follow *f)
{
	size_t off = 0;
	int rc = 0;

	while (!f->committed && !rc) {
		struct snap_progress_record rec;
		size_t used;
		uint64_t sum;

		rc = snap_progress_record_decode(f->buf + off, f->len - off, f->sum, &rec, &used, &sum);
		if (rc == -EAGAIN) {
			rc = 0;
			break;
		}
		if (rc) {
			rc = follow_bad(f, "is damaged (checksum or layout)");
			break;
		}
		f->sum = sum;
		off += used;
		rc = follow_record(f, &rec);
		f->records++;
	}
	memmove(f->buf, f->buf + off, f->len - off);
	f->len -= off;
	if (!rc && f->committed && f->len)
		rc = follow_bad(f, "follows its COMMIT");
	return rc;
}

/* follow_log's word for a stream that failed: its error is the one to tell. */
#define FOLLOW_STREAM_FAILED 1

static bool follow_streams_failed(struct follow *f)
{
	bool failed;

	pthread_mutex_lock(&f->sr.mu);
	failed = f->sr.failed;
	pthread_mutex_unlock(&f->sr.mu);
	return failed;
}

/* Read the log until its COMMIT and the writer's end: 0,
 * FOLLOW_STREAM_FAILED, or the error. */
static int follow_log(struct follow *f)
{
	bool header = false;
	int rc = 0;

	f->buf = malloc(SNAP_PROGRESS_HEADER_BYTES + FOLLOW_READ_BYTES + SNAP_PROGRESS_BODY_MAX + 64);
	if (!f->buf)
		return conn_fail(f->c, -ENOMEM, "out of memory");
	while (!rc) {
		ssize_t n;

		if (follow_streams_failed(f))
			return FOLLOW_STREAM_FAILED;
		n = read(f->log_fd, f->buf + f->len, FOLLOW_READ_BYTES);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return conn_fail(f->c, -errno, "snapshot %s: its progress log: %s", f->name, strerror(errno));
		f->len += (size_t)n;
		if (!header && f->len >= SNAP_PROGRESS_HEADER_BYTES) {
			if (snap_progress_header_decode(f->buf, f->len))
				return follow_bad(f, "is no progress log's header");
			header = true;
			f->len -= SNAP_PROGRESS_HEADER_BYTES;
			memmove(f->buf, f->buf + SNAP_PROGRESS_HEADER_BYTES, f->len);
		}
		if (header)
			rc = follow_decode(f);
		if (rc || n > 0)
			continue;
		/* At the log's end for now: the writer's word. */
		rc = follow_writer(f);
		if (rc < 0)
			return conn_fail(f->c, rc, "snapshot %s: the source's writer failed mid-round (%s)", f->name,
					 strerror(-rc));
		if (rc > 0 && f->committed)
			return 0;
		/* Committed with the log read to its end, but no COMMIT in it. */
		if (rc > 0 && !f->committed) {
			n = read(f->log_fd, f->buf + f->len, FOLLOW_READ_BYTES);
			if (n > 0) {
				f->len += (size_t)n;
				rc = 0;
				continue;
			}
			return follow_bad(f, "is missing: the log ends before its COMMIT");
		}
		usleep(FOLLOW_POLL_US);
	}
	return rc;
}

/* What the streams sent from the log must be what was committed. */
static int follow_check(struct follow *f, struct snap_reader *r)
{
	const struct snap_manifest *m = snap_reader_manifest(r);
	const struct snap_chunk_list *cl = snap_reader_chunk_list(r);

	if (m->chunk_size != f->m.chunk_size || m->driver_version != f->m.driver_version ||
	    m->auth_flags != f->m.auth_flags || m->owner_uid != f->m.owner_uid ||
	    memcmp(m->credential, f->m.credential, sizeof(m->credential)) ||
	    memcmp(m->device_uuid, f->m.device_uuid, sizeof(m->device_uuid)) ||
	    strcmp(m->device_name, f->m.device_name) || strcmp(m->parent, f->m.parent) ||
	    strcmp(m->session_id, f->m.session_id) || cl->region_count != f->nregions)
		return conn_fail(f->c, -EBADMSG, "snapshot %s: its progress log disagrees with its manifest", f->name);
	for (uint64_t i = 0; i < cl->region_count; i++) {
		const struct snap_region *reg = &cl->regions[i], *fr = &f->regions[i].r;

		if (reg->addr != fr->addr || reg->size != fr->size || reg->flags != fr->flags)
			return conn_fail(f->c, -EBADMSG, "snapshot %s: region %llu differs from its progress log",
					 f->name, (unsigned long long)i);
		for (uint64_t j = 0; j < reg->chunk_count; j++) {
			const struct snap_chunk_ref *a = &reg->chunks[j], *b = &fr->chunks[j];

			if ((a->flags & SNAP_CHUNK_ZERO) != (b->flags & SNAP_CHUNK_ZERO) ||
			    a->device_hash != b->device_hash || memcmp(a->hash, b->hash, SNAP_HASH_BYTES))
				return conn_fail(f->c, -EBADMSG, "snapshot %s: region %llu chunk %llu differs from "
						 "its progress log", f->name, (unsigned long long)i,
						 (unsigned long long)j);
		}
	}
	return 0;
}

/* Open the store and the round's progress log once they are there: 1 when
 * the writer ended first (the log is gone: send the committed snapshot),
 * 0 with the log open, or the error. */
static int follow_open(struct follow *f, const char *store_dir)
{
	char path[SNAP_NAME_MAX + 32];

	snprintf(path, sizeof(path), SNAP_TMP_PREFIX "%s/" SNAP_PROGRESS_FILE, f->name);
	for (;;) {
		int state = follow_writer(f);

		if (!f->store && snap_store_open(store_dir, NULL, 0, &f->store))
			f->store = NULL;
		if (f->store && f->lock_fd < 0 && (f->lock_fd = snap_store_lock(f->store, 0, 0)) < 0)
			return conn_fail(f->c, f->lock_fd, "the source's store %s: lock: %s", store_dir,
					 strerror(-f->lock_fd));
		if (f->store && (f->log_fd = openat(f->store->snaps_fd, path, O_RDONLY | O_CLOEXEC)) >= 0)
			return 0;
		if (state < 0)
			return conn_fail(f->c, state, "snapshot %s: the source's writer failed (%s)", f->name,
					 strerror(-state));
		if (state > 0 && !f->store) {
			int rc = snap_store_open(store_dir, NULL, 0, &f->store);

			return rc ? conn_fail(f->c, rc, "the source's store %s: %s", store_dir, strerror(-rc)) : 1;
		}
		if (state > 0)
			return 1;
		usleep(FOLLOW_POLL_US);
	}
}

static void follow_free(struct follow *f)
{
	for (uint64_t i = 0; i < f->nregions; i++) {
		free(f->regions[i].r.chunks);
		free(f->regions[i].logged);
	}
	free(f->regions);
	free(f->buf);
	if (f->log_fd >= 0)
		close(f->log_fd);
	if (f->lock_fd >= 0)
		close(f->lock_fd);
	snap_reader_close(f->pr);
	explicit_bzero(&f->m, sizeof(f->m));
}

int snap_migrate_snapshot_follow(struct snap_migrate_conn *c, const char *store_dir, const char *name,
				 const char *parent, uint32_t flags, const struct auth_token *token,
				 const uint8_t nonce[AUTH_NONCE_BYTES],
				 const struct snap_migrate_writer_watch *watch, struct snap_migrate_stats *stats)
{
	struct snap_migrate_stats st = { 0 };
	struct follow f = { .c = c, .name = name, .parent = parent ? parent : "", .flags = flags, .token = token,
			    .nonce = nonce, .watch = watch, .st = &st, .lock_fd = -1,
			    .log_fd = -1 };
	struct snap_reader *r = NULL;
	uint64_t start = streams_bytes_sent(c);
	int rc;

	send_round_init(&f.sr, NULL, name, &st);
	f.sr.writing = true;
	rc = follow_open(&f, store_dir);
	f.sr.store = f.store;
	if (rc == 1) {
		/* Written before its log could be followed: sent as stored. */
		rc = snap_migrate_snapshot_send(c, f.store, name, parent, flags, token, nonce, &st);
		goto out;
	}
	if (!rc)
		rc = follow_log(&f);
	send_jobs_close(&f.sr, rc != 0);
	rc = send_streams_end(c, &f.sx, rc == FOLLOW_STREAM_FAILED ? 0 : rc);
	/* Before END, which commits the round at the destination. */
	if (!rc) {
		rc = snap_reader_open(f.store, name, &r);
		if (rc)
			conn_fail(c, rc, "snapshot %s: %s", name, snap_store_error(f.store));
	}
	if (!rc)
		rc = follow_check(&f, r);
	if (!rc)
		rc = round_finish(c, r, f.pr, start, &st);
out:
	snap_reader_close(r);
	send_round_fini(&f.sr);
	follow_free(&f);
	snap_store_close(f.store);
	if (stats)
		*stats = st;
	return rc;
}

/* The destination's side of one round. */

/* Chunks in flight to the writer, each in a buffer of its own until the
 * writer is done with it, so that its workers hash and store several at
 * once while the next frames come in (one chunk at a time held a 16 GiB
 * round to 0.8 GB/s on the H200's host). */
#define RECV_BUFFERS 16

struct recv_round;
struct recv_buffer {
	struct recv_round *rr;
	uint8_t *raw;              /* the chunk's bytes, chunk_size */
	uint8_t *zstd;             /* and as they came compressed, chunk_size; NULL until one does */
	bool busy;                 /* the writer holds it */
};

/* One stream's reading of a round: the first's on the caller's thread,
 * each joined one's on a thread of its own (from the last REGION to its
 * END). */
struct recv_stream {
	struct recv_round *rr;
	struct snap_migrate_conn *c;
	ZSTD_DCtx *zctx;
	pthread_t thread;
	bool running;
	int rc;
};

struct recv_round {
	struct snap_migrate_conn *c;
	struct snap_writer *w;
	struct recv_stream streams[SNAP_MIGRATE_STREAMS_MAX];   /* [0]: c's */
	struct recv_buffer bufs[RECV_BUFFERS];
	pthread_mutex_t mu;        /* guards bufs[].busy (the writer's threads give them back), stopping, failed */
	pthread_cond_t freed;
	bool stopping;             /* the first stream's reader stops the joined ones */
	struct recv_stream *failed; /* the joined stream that failed first, on its own */
	/* The writer takes one caller at a time (snap_writer.h): the streams
	 * check and decompress their chunks at once, and queue them in turn. */
	pthread_mutex_t writer_mu;
	uint32_t chunk_size;
	uint32_t regions_declared;
	uint32_t region_count;
	uint64_t logical_bytes;
	uint64_t quota_bytes;
	uint64_t journal_bytes;
	int journal_fd;
	/* A journal sent as a delta (JOURNAL_BASE): the parent's, and what
	 * the rebuilt one must be. */
	struct snap_store *store;
	const char *parent;
	bool delta;
	struct journal_map base;
	uint8_t delta_hash[SNAP_HASH_BYTES];
	uint64_t delta_bytes;
};

static int journal_append(struct snap_migrate_conn *c, int fd, const uint8_t *p, uint32_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return conn_fail(c, n < 0 ? -errno : -EIO, "journal: %s", strerror(n < 0 ? errno : EIO));
		p += n;
		len -= (uint32_t)n;
	}
	return 0;
}

/* JOURNAL_BASE: the parent's journal, checked against what this store
 * holds of it, is mapped for the JOURNAL_COPYs after it. */
static int recv_journal_base(struct recv_round *rr, uint32_t len)
{
	struct snap_migrate_journal_base b;
	struct snap_manifest pm;
	struct snap_reader *r;
	int rc;

	if (rr->delta || rr->journal_bytes)
		return conn_fail(rr->c, -EPROTO, "a journal base after the journal began");
	if (snap_migrate_journal_base_decode(rr->c->buf, len, &b))
		return conn_fail(rr->c, -EBADMSG, "malformed JOURNAL_BASE");
	if (!rr->parent[0])
		return conn_fail(rr->c, -EPROTO, "a journal delta in a round without a parent");
	rc = snap_store_manifest_get(rr->store, rr->parent, &pm);
	if (rc)
		return conn_fail(rr->c, rc, "the journal's base %s: %s", rr->parent, snap_store_error(rr->store));
	explicit_bzero(pm.credential, sizeof(pm.credential));
	if (memcmp(pm.journal_hash, b.base_hash, SNAP_HASH_BYTES) ||
	    pm.journal_bytes != b.base_bytes + SNAP_JOURNAL_HEADER_BYTES)
		return conn_fail(rr->c, -EBADMSG, "a journal delta against another base than %s's journal", rr->parent);
	rc = snap_reader_open(rr->store, rr->parent, &r);
	if (rc)
		return conn_fail(rr->c, rc, "the journal's base %s: %s", rr->parent, snap_store_error(rr->store));
	rc = journal_map_open(rr->c, r, &rr->base);
	snap_reader_close(r);
	if (rc)
		return rc;
	if (rr->base.len != b.base_bytes)
		return conn_fail(rr->c, -EBADMSG, "the journal's base %s has %zu bytes, not %llu", rr->parent,
				 rr->base.len, (unsigned long long)b.base_bytes);
	rr->delta = true;
	memcpy(rr->delta_hash, b.hash, SNAP_HASH_BYTES);
	rr->delta_bytes = b.bytes;
	return 0;
}

/* JOURNAL (bytes) or JOURNAL_COPY (a range of the base's), appended. */
static int recv_journal(struct recv_round *rr, uint16_t type, uint32_t len)
{
	struct snap_migrate_journal_copy cp = { .len = len };
	const uint8_t *p = rr->c->buf;

	if (type == SNAP_MIGRATE_JOURNAL_COPY) {
		if (!rr->delta)
			return conn_fail(rr->c, -EPROTO, "a journal copy without its base");
		if (snap_migrate_journal_copy_decode(rr->c->buf, len, &cp))
			return conn_fail(rr->c, -EBADMSG, "malformed JOURNAL_COPY");
		if (cp.offset + cp.len > rr->base.len)
			return conn_fail(rr->c, -EBADMSG, "a journal copy past the end of %s's journal", rr->parent);
		p = rr->base.p + cp.offset;
	}
	if (cp.len > SNAP_MIGRATE_JOURNAL_MAX - rr->journal_bytes)
		return conn_fail(rr->c, -EFBIG, "journal over %llu bytes", (unsigned long long)SNAP_MIGRATE_JOURNAL_MAX);
	rr->journal_bytes += cp.len;
	if (rr->delta && rr->journal_bytes > rr->delta_bytes)
		return conn_fail(rr->c, -EBADMSG, "the journal delta is longer than its journal");
	for (uint64_t done = 0; done < cp.len;) {
		uint32_t n = cp.len - done < SNAP_MIGRATE_JOURNAL_PIECE ? (uint32_t)(cp.len - done)
									: SNAP_MIGRATE_JOURNAL_PIECE;
		int rc = journal_append(rr->c, rr->journal_fd, p + done, n);

		if (rc)
			return rc;
		done += n;
	}
	return 0;
}

/* A delta's journal, rebuilt: its length and hash as JOURNAL_BASE said. */
static int journal_delta_check(struct recv_round *rr)
{
	struct journal_map got = { .fd = rr->journal_fd };
	uint8_t hdr[SNAP_JOURNAL_HEADER_BYTES], hash[SNAP_HASH_BYTES];
	XXH3_state_t *st;

	if (!rr->delta)
		return 0;
	if (rr->journal_bytes != rr->delta_bytes)
		return conn_fail(rr->c, -EBADMSG, "the journal delta rebuilds %llu of the journal's %llu bytes",
				 (unsigned long long)rr->journal_bytes, (unsigned long long)rr->delta_bytes);
	st = XXH3_createState();
	if (!st)
		return conn_fail(rr->c, -ENOMEM, "out of memory");
	got.len = rr->journal_bytes;
	got.p = got.len ? mmap(NULL, got.len, PROT_READ, MAP_SHARED, rr->journal_fd, 0) : NULL;
	if (got.p == MAP_FAILED) {
		XXH3_freeState(st);
		return conn_fail(rr->c, -errno, "journal: mmap: %s", strerror(errno));
	}
	/* As the store hashes a journal file: its header, then the bytes. */
	snap_journal_header_encode(hdr);
	XXH3_128bits_reset(st);
	XXH3_128bits_update(st, hdr, sizeof(hdr));
	if (got.len)
		XXH3_128bits_update(st, got.p, got.len);
	snap_hash128_digest(st, hash);
	XXH3_freeState(st);
	if (got.p)
		munmap((void *)got.p, got.len);
	if (memcmp(hash, rr->delta_hash, SNAP_HASH_BYTES))
		return conn_fail(rr->c, -EBADMSG, "the journal delta does not rebuild the journal (hash mismatch)");
	return 0;
}

static int recv_region(struct recv_round *rr, uint32_t len)
{
	struct snap_migrate_region reg;
	uint32_t index;
	int rc;

	if (snap_migrate_region_decode(rr->c->buf, len, &reg))
		return conn_fail(rr->c, -EBADMSG, "malformed region");
	if (rr->regions_declared == rr->region_count)
		return conn_fail(rr->c, -EPROTO, "more regions than BEGIN announced");
	rr->logical_bytes += reg.size;
	if (rr->quota_bytes && rr->logical_bytes > rr->quota_bytes)
		return conn_fail(rr->c, -EDQUOT, "the session's %llu bytes exceed this ternd's quota of %llu",
				 (unsigned long long)rr->logical_bytes, (unsigned long long)rr->quota_bytes);
	rc = snap_writer_region_add(rr->w, reg.addr, reg.size, reg.flags, &index);
	if (rc)
		return conn_fail(rr->c, rc, "region %#llx+%#llx refused: %s", (unsigned long long)reg.addr,
				 (unsigned long long)reg.size, strerror(-rc));
	rr->regions_declared++;
	return 0;
}

static void recv_buffer_done(void *arg, const void *buf, int status)
{
	struct recv_buffer *b = arg;

	(void)buf;
	(void)status;
	pthread_mutex_lock(&b->rr->mu);
	b->busy = false;
	pthread_cond_signal(&b->rr->freed);
	pthread_mutex_unlock(&b->rr->mu);
}

/* A buffer the writer does not hold, with room for a compressed chunk if
 * @zstd; NULL without memory. */
static struct recv_buffer *recv_buffer_take(struct recv_round *rr, bool zstd)
{
	struct recv_buffer *b = NULL;

	pthread_mutex_lock(&rr->mu);
	while (!b) {
		for (unsigned i = 0; i < RECV_BUFFERS && !b; i++)
			if (!rr->bufs[i].busy)
				b = &rr->bufs[i];
		if (!b)
			pthread_cond_wait(&rr->freed, &rr->mu);
	}
	b->busy = true;
	pthread_mutex_unlock(&rr->mu);
	b->rr = rr;
	if (!b->raw)
		b->raw = malloc(rr->chunk_size);
	if (zstd && !b->zstd)
		b->zstd = malloc(rr->chunk_size);
	if (!b->raw || (zstd && !b->zstd)) {
		recv_buffer_done(b, NULL, 0);
		return NULL;
	}
	return b;
}

/* Once the writer is committed or aborted, nothing holds the buffers. */
static void recv_buffers_free(struct recv_round *rr)
{
	for (unsigned i = 0; i < RECV_BUFFERS; i++) {
		free(rr->bufs[i].raw);
		free(rr->bufs[i].zstd);
	}
	pthread_cond_destroy(&rr->freed);
	pthread_mutex_destroy(&rr->mu);
}

/* A compressed chunk into @raw: smaller than the chunk it stands for,
 * and decompressing to exactly its @len bytes, no more (zstd writes no
 * further than the buffer it is given), no fewer. */
static int chunk_decompress(struct recv_stream *rs, const struct snap_migrate_chunk *ch, uint32_t len, uint8_t *raw)
{
	size_t n;

	if (ch->len >= len)
		return conn_fail(rs->c, -EBADMSG, "chunk %llu of region %u: %u compressed bytes for a chunk of %u",
				 (unsigned long long)ch->index, ch->region, ch->len, len);
	n = ZSTD_decompressDCtx(rs->zctx, raw, len, ch->data, ch->len);
	if (ZSTD_isError(n))
		return conn_fail(rs->c, -EBADMSG, "chunk %llu of region %u does not decompress: %s",
				 (unsigned long long)ch->index, ch->region, ZSTD_getErrorName(n));
	if (n != len)
		return conn_fail(rs->c, -EBADMSG, "chunk %llu of region %u decompresses to %zu bytes, not %u",
				 (unsigned long long)ch->index, ch->region, n, len);
	return 0;
}

static int recv_chunk(struct recv_stream *rs, uint32_t frame_len)
{
	struct recv_round *rr = rs->rr;
	struct snap_migrate_chunk ch;
	struct recv_buffer *b = NULL;
	uint8_t hash[SNAP_HASH_BYTES];
	uint64_t chunks;
	uint32_t len;
	int rc;

	if (snap_migrate_chunk_decode(rs->c->buf, frame_len, &ch))
		return conn_fail(rs->c, -EBADMSG, "malformed chunk");
	if (rr->regions_declared != rr->region_count)
		return conn_fail(rs->c, -EPROTO, "a chunk before every region was declared");
	pthread_mutex_lock(&rr->writer_mu);
	chunks = snap_writer_region_chunks(rr->w, ch.region);
	len = snap_writer_region_chunk_bytes(rr->w, ch.region, ch.index);
	pthread_mutex_unlock(&rr->writer_mu);
	if (ch.region >= rr->region_count || ch.index >= chunks)
		return conn_fail(rs->c, -EBADMSG, "chunk %llu of region %u is outside the snapshot",
				 (unsigned long long)ch.index, ch.region);
	switch (ch.kind) {
	case SNAP_MIGRATE_CHUNK_ZERO:
		pthread_mutex_lock(&rr->writer_mu);
		rc = snap_writer_chunk_zero(rr->w, ch.region, ch.index, ch.device_hash);
		pthread_mutex_unlock(&rr->writer_mu);
		break;
	case SNAP_MIGRATE_CHUNK_UNCHANGED:
		pthread_mutex_lock(&rr->writer_mu);
		rc = snap_writer_chunk_unchanged(rr->w, ch.region, ch.index, ch.device_hash);
		pthread_mutex_unlock(&rr->writer_mu);
		break;
	case SNAP_MIGRATE_CHUNK_ZSTD:
		if (!(b = recv_buffer_take(rr, true)))
			return conn_fail(rs->c, -ENOMEM, "out of memory");
		rc = chunk_decompress(rs, &ch, len, b->raw);
		if (!rc) {
			snap_hash128(b->raw, len, hash);
			if (memcmp(hash, ch.hash, sizeof(hash)))
				rc = conn_fail(rs->c, -EBADMSG, "chunk %llu of region %u: content hash mismatch",
					       (unsigned long long)ch.index, ch.region);
		}
		if (rc) {
			recv_buffer_done(b, NULL, 0);
			return rc;
		}
		/* Stored compressed as it came; the next frame overwrites the
		 * connection's buffer, not these. */
		memcpy(b->zstd, ch.data, ch.len);
		pthread_mutex_lock(&rr->writer_mu);
		rc = snap_writer_chunk_add_zstd(rr->w, ch.region, ch.index, b->raw, len, b->zstd, ch.len,
						ch.device_hash, recv_buffer_done, b);
		pthread_mutex_unlock(&rr->writer_mu);
		break;
	default:
		snap_hash128(ch.data, ch.len, hash);
		if (memcmp(hash, ch.hash, sizeof(hash)))
			return conn_fail(rs->c, -EBADMSG, "chunk %llu of region %u: content hash mismatch",
					 (unsigned long long)ch.index, ch.region);
		if (!(b = recv_buffer_take(rr, false)))
			return conn_fail(rs->c, -ENOMEM, "out of memory");
		memcpy(b->raw, ch.data, ch.len);
		pthread_mutex_lock(&rr->writer_mu);
		rc = snap_writer_chunk_add(rr->w, ch.region, ch.index, b->raw, ch.len, ch.device_hash,
					   recv_buffer_done, b);
		pthread_mutex_unlock(&rr->writer_mu);
		break;
	}
	/* A chunk the writer refused is not its: the buffer is free again. */
	if (rc && b)
		recv_buffer_done(b, NULL, 0);
	if (rc)
		return conn_fail(rs->c, rc, "chunk %llu of region %u refused: %s", (unsigned long long)ch.index,
				 ch.region, strerror(-rc));
	return 0;
}

/* The END of a stream's share of a round: the hash of the frames before it
 * (@before, the received hash then). */
static int end_check(struct snap_migrate_conn *c, uint32_t len, struct sha256 *before)
{
	struct snap_migrate_end e;
	uint8_t want[SHA256_BYTES];

	sha256_final(before, want);
	if (snap_migrate_end_decode(c->buf, len, &e) || memcmp(want, e.stream_hash, sizeof(want)))
		return conn_fail(c, -EBADMSG, "stream checksum mismatch");
	return 0;
}

/* A joined stream's share of the round: CHUNKs, then its END. */
static void *recv_stream_run(void *arg)
{
	struct recv_stream *rs = arg;
	struct sha256 before;
	uint16_t type;
	uint32_t len;
	int rc;

	do {
		before = rs->c->received;
		rc = snap_migrate_recv(rs->c, &type, &len);
		if (!rc && type == SNAP_MIGRATE_CHUNK)
			rc = recv_chunk(rs, len);
	} while (!rc && type == SNAP_MIGRATE_CHUNK);
	if (!rc && type != SNAP_MIGRATE_END)
		rc = conn_fail(rs->c, -EPROTO, "frame type %u on a joined stream", type);
	if (!rc)
		rc = end_check(rs->c, len, &before);
	rs->rc = rc;
	/* Unless the first stream's reader is stopping this one, it stops
	 * too: the round is refused there, with this stream's error. */
	pthread_mutex_lock(&rs->rr->mu);
	if (rc && !rs->rr->stopping && !rs->rr->failed) {
		rs->rr->failed = rs;
		shutdown(rs->rr->c->fd, SHUT_RD);
	}
	pthread_mutex_unlock(&rs->rr->mu);
	return NULL;
}

/* Once every region is declared, the joined streams' chunks may come. */
static int recv_streams_start(struct recv_round *rr)
{
	for (unsigned i = 1; i <= rr->c->joined_count; i++) {
		struct recv_stream *rs = &rr->streams[i];

		rs->zctx = ZSTD_createDCtx();
		if (!rs->zctx)
			return conn_fail(rr->c, -ENOMEM, "out of memory");
		if (pthread_create(&rs->thread, NULL, recv_stream_run, rs))
			return conn_fail(rr->c, -EAGAIN, "cannot start a stream's thread");
		rs->running = true;
	}
	return 0;
}

/* Wait for the joined streams' shares (@abort: the round failed; stop them
 * reading first): 0, or the error of the one that failed on its own, in
 * c->error. */
static int recv_streams_end(struct recv_round *rr, bool abort)
{
	int rc = 0;

	pthread_mutex_lock(&rr->mu);
	rr->stopping = abort;
	pthread_mutex_unlock(&rr->mu);
	for (unsigned i = 1; i <= rr->c->joined_count; i++) {
		struct recv_stream *rs = &rr->streams[i];

		if (rs->running && abort)
			shutdown(rs->c->fd, SHUT_RD);
		if (rs->running)
			pthread_join(rs->thread, NULL);
		if (rs->running && rs->rc && !rc && (!abort || rr->failed == rs))
			rc = conn_fail(rr->c, rs->rc, "stream %u: %s", i, rs->c->error);
		rs->running = false;
		ZSTD_freeDCtx(rs->zctx);
		rs->zctx = NULL;
	}
	return rc;
}

int snap_migrate_snapshot_recv(struct snap_migrate_conn *c, uint32_t len, struct snap_store *store,
			       const char *session, const struct auth_token *token,
			       const uint8_t nonce[AUTH_NONCE_BYTES], uint64_t quota_bytes,
			       char name[SNAP_NAME_MAX + 1], uint32_t *flags)
{
	char parent[SNAP_NAME_MAX + 1], device[SNAP_NAME_MAX + 1];
	struct recv_round rr = { .c = c, .quota_bytes = quota_bytes, .journal_fd = -1, .store = store,
				 .parent = parent, .base = { .fd = -1 } };
	struct snap_writer_config cfg = { 0 };
	struct snap_migrate_begin b;
	struct sha256 before;
	bool started = false;
	uint16_t type;
	int rc, joined_rc;

	if (snap_migrate_begin_decode(c->buf, len, &b) || snap_migrate_str_copy(b.name, name, SNAP_NAME_MAX + 1) ||
	    snap_migrate_str_copy(b.parent, parent, sizeof(parent)) ||
	    snap_migrate_str_copy(b.device_name, device, sizeof(device)) || !snap_name_valid(name) ||
	    (parent[0] && !snap_name_valid(parent)))
		return conn_fail(c, -EBADMSG, "malformed BEGIN");
	*flags = b.flags;
	auth_migrate_credential_mask(token, nonce, session, b.credential);
	cfg.name = name;
	cfg.parent = parent;
	cfg.session_id = session;
	cfg.device_name = device;
	memcpy(cfg.device_uuid, b.device_uuid, 16);
	cfg.driver_version = b.driver_version;
	cfg.chunk_size = b.chunk_size;
	cfg.auth_flags = b.auth_flags;
	cfg.owner_uid = b.owner_uid;
	memcpy(cfg.credential, b.credential, sizeof(cfg.credential));
	explicit_bzero(b.credential, sizeof(b.credential));
	rr.chunk_size = b.chunk_size;
	rr.region_count = b.region_count;
	for (unsigned i = 0; i <= c->joined_count; i++)
		rr.streams[i] = (struct recv_stream){ .rr = &rr, .c = i ? c->joined[i - 1] : c };
	rc = snap_writer_begin(store, &cfg, &rr.w);
	explicit_bzero(cfg.credential, sizeof(cfg.credential));
	if (rc)
		return conn_fail(c, rc, "snapshot %s: %s", name, snap_store_error(store));
	pthread_mutex_init(&rr.mu, NULL);
	pthread_mutex_init(&rr.writer_mu, NULL);
	pthread_cond_init(&rr.freed, NULL);
	rr.streams[0].zctx = ZSTD_createDCtx();
	if (!rr.streams[0].zctx) {
		rc = conn_fail(c, -ENOMEM, "out of memory");
		goto out_abort;
	}
	rr.journal_fd = memfd_create("tern-migrate-journal", MFD_CLOEXEC);
	if (rr.journal_fd < 0) {
		rc = conn_fail(c, -errno, "memfd: %s", strerror(errno));
		goto out_abort;
	}
	for (;;) {
		if (!started && rr.regions_declared == rr.region_count) {
			started = true;
			rc = recv_streams_start(&rr);
			if (rc)
				goto out_abort;
		}
		before = c->received;   /* END covers the frames before it */
		rc = snap_migrate_recv(c, &type, &len);
		if (rc)
			goto out_abort;
		if (type == SNAP_MIGRATE_REGION)
			rc = recv_region(&rr, len);
		else if (type == SNAP_MIGRATE_CHUNK)
			rc = recv_chunk(&rr.streams[0], len);
		else if (type == SNAP_MIGRATE_JOURNAL_BASE)
			rc = recv_journal_base(&rr, len);
		else if (type == SNAP_MIGRATE_JOURNAL || type == SNAP_MIGRATE_JOURNAL_COPY)
			rc = recv_journal(&rr, type, len);
		else if (type == SNAP_MIGRATE_END)
			break;
		else
			rc = conn_fail(c, -EPROTO, "frame type %u inside a round", type);
		if (rc)
			goto out_abort;
	}
	if (rr.regions_declared != rr.region_count) {
		rc = conn_fail(c, -EPROTO, "%u of %u regions came", rr.regions_declared, rr.region_count);
		goto out_abort;
	}
	rc = end_check(c, len, &before);
	if (rc)
		goto out_abort;
	rc = recv_streams_end(&rr, false);
	if (!rc)
		rc = journal_delta_check(&rr);
	if (rc)
		goto out_abort;
	rc = snap_writer_journal_set(rr.w, rr.journal_fd);
	if (rc) {
		conn_fail(c, rc, "journal refused: %s", snap_store_error(store));
		goto out_abort;
	}
	rc = snap_writer_commit(rr.w, NULL);
	rr.w = NULL;
	if (rc)
		conn_fail(c, rc, "snapshot %s not stored: %s", name, snap_store_error(store));
	goto out;

out_abort:
	/* A joined stream that failed stopped the first's reader: its error
	 * is the one to tell. */
	joined_rc = recv_streams_end(&rr, true);
	if (joined_rc)
		rc = joined_rc;
	snap_writer_abort(rr.w);
out:
	if (rr.journal_fd >= 0)
		close(rr.journal_fd);
	journal_map_close(&rr.base);
	ZSTD_freeDCtx(rr.streams[0].zctx);
	recv_buffers_free(&rr);
	pthread_mutex_destroy(&rr.writer_mu);
	return rc;
}

int snap_migrate_client_auth(struct snap_migrate_conn *c, const struct auth_token *token, const char *session,
			     uint8_t nonce[AUTH_NONCE_BYTES])
{
	struct snap_migrate_challenge ch;
	uint8_t buf[4 + SNAP_NAME_MAX + AUTH_PROOF_BYTES], *p = buf;
	uint16_t type;
	uint32_t len;
	int rc;

	if (strlen(session) > SNAP_NAME_MAX)
		return conn_fail(c, -ENAMETOOLONG, "session id too long");
	rc = snap_migrate_recv(c, &type, &len);
	if (rc)
		return rc;
	if (type != SNAP_MIGRATE_CHALLENGE || snap_migrate_challenge_decode(c->buf, len, &ch))
		return conn_fail(c, -EPROTO, "the destination sent no challenge: is it a migration listener?");
	memcpy(nonce, ch.nonce, AUTH_NONCE_BYTES);
	put_str(&p, session);
	auth_migrate_proof(token, nonce, session, p);
	p += AUTH_PROOF_BYTES;
	rc = snap_migrate_send(c, SNAP_MIGRATE_AUTH, buf, (uint32_t)(p - buf), NULL, 0);
	/* Known before the source snapshots or suspends anything. */
	return rc ? rc : ack_wait(c);
}

int snap_migrate_server_auth(struct snap_migrate_conn *c, const struct auth_token *token,
			     char session[SNAP_NAME_MAX + 1], uint8_t nonce[AUTH_NONCE_BYTES])
{
	struct snap_migrate_auth a;
	uint8_t want[AUTH_PROOF_BYTES];
	uint16_t type;
	uint32_t len;
	int rc;

	rc = auth_random(nonce, AUTH_NONCE_BYTES);
	if (rc)
		return conn_fail(c, rc, "no random bytes");
	rc = snap_migrate_send(c, SNAP_MIGRATE_CHALLENGE, nonce, AUTH_NONCE_BYTES, NULL, 0);
	if (rc)
		return rc;
	rc = snap_migrate_recv(c, &type, &len);
	if (rc)
		return rc;
	if (type != SNAP_MIGRATE_AUTH || snap_migrate_auth_decode(c->buf, len, &a) ||
	    snap_migrate_str_copy(a.session, session, SNAP_NAME_MAX + 1) || !snap_session_id_valid(session))
		return conn_fail(c, -EBADMSG, "malformed AUTH");
	if (!token->len)
		return conn_fail(c, -EPERM, "this ternd has no --token-file: it takes no migration");
	auth_migrate_proof(token, nonce, session, want);
	rc = auth_equal(want, a.proof, sizeof(want)) ? 0 : conn_fail(c, -EPERM, "bad token");
	explicit_bzero(want, sizeof(want));
	return rc ? rc : snap_migrate_ack_send(c, 0, "authenticated");
}

int snap_migrate_pull(struct snap_migrate_conn *c, const char *uuid, const char *url)
{
	uint8_t buf[8 + SNAP_NAME_MAX + SNAP_MIGRATE_MESSAGE_MAX], *p = buf;
	int rc;

	if (strlen(uuid) > SNAP_NAME_MAX || strlen(url) > SNAP_MIGRATE_MESSAGE_MAX)
		return conn_fail(c, -ENAMETOOLONG, "uuid or address too long");
	put_str(&p, uuid);
	put_str(&p, url);
	rc = snap_migrate_send(c, SNAP_MIGRATE_PULL, buf, (uint32_t)(p - buf), NULL, 0);
	return rc ? rc : ack_wait(c);
}

void snap_migrate_refuse(struct snap_migrate_conn *c, int status, const char *message)
{
	uint8_t sink[4096];

	snap_migrate_ack_send(c, status, message);
	/* The source's joined streams stop sending at once, rather than wait
	 * for buffers nobody reads here. */
	for (unsigned i = 0; i < c->joined_count; i++)
		shutdown(c->joined[i]->fd, SHUT_RDWR);
	/* Closing with the source's frames unread would reset the link and
	 * could drop the ACK before the source read it: let the source see it
	 * and hang up first (its receive timeout bounds the wait). */
	shutdown(c->fd, SHUT_WR);
	for (int i = 0; i < 100000 && read(c->fd, sink, sizeof(sink)) > 0; i++)
		;
}

int snap_migrate_streams_offer(struct snap_migrate_conn *c, uint32_t count,
			       const uint8_t key[SNAP_MIGRATE_STREAM_KEY_BYTES])
{
	uint8_t buf[4 + SNAP_MIGRATE_STREAM_KEY_BYTES];
	int rc;

	if (!count || count >= SNAP_MIGRATE_STREAMS_MAX)
		return conn_fail(c, -EINVAL, "%u streams to join (1 to %u)", count, SNAP_MIGRATE_STREAMS_MAX - 1);
	le32_put(buf, count);
	memcpy(buf + 4, key, SNAP_MIGRATE_STREAM_KEY_BYTES);
	rc = snap_migrate_send(c, SNAP_MIGRATE_STREAMS, buf, sizeof(buf), NULL, 0);
	/* The destination awaits them before they connect. */
	return rc ? rc : ack_wait(c);
}

/* A joined stream's hashes cover what comes after its JOIN's ACK: the
 * frames before were read by another process on the destination. */
static void stream_hashes_restart(struct snap_migrate_conn *c)
{
	sha256_init(&c->sent);
	sha256_init(&c->received);
}

int snap_migrate_join(struct snap_migrate_conn *extra, const uint8_t key[SNAP_MIGRATE_STREAM_KEY_BYTES])
{
	int rc = snap_migrate_send(extra, SNAP_MIGRATE_JOIN, key, SNAP_MIGRATE_STREAM_KEY_BYTES, NULL, 0);

	if (!rc)
		rc = ack_wait(extra);
	if (!rc)
		stream_hashes_restart(extra);
	return rc;
}

int snap_migrate_streams_wait(struct snap_migrate_conn *c, struct snap_migrate_conn **extra, unsigned count)
{
	int rc = ack_wait(c);

	if (rc)
		return rc;
	if (count >= SNAP_MIGRATE_STREAMS_MAX)
		return conn_fail(c, -EINVAL, "%u streams joined", count);
	memcpy(c->joined, extra, count * sizeof(*extra));
	c->joined_count = count;
	return 0;
}

int snap_migrate_stream_adopt(struct snap_migrate_conn *c, struct snap_migrate_conn *extra)
{
	int rc;

	if (c->joined_count == SNAP_MIGRATE_STREAMS_MAX - 1)
		return conn_fail(c, -ENOSPC, "more than %u streams", SNAP_MIGRATE_STREAMS_MAX);
	rc = snap_migrate_ack_send(extra, 0, "joined");
	if (rc)
		return conn_fail(c, rc, "a joined stream: %s", extra->error);
	stream_hashes_restart(extra);
	c->joined[c->joined_count++] = extra;
	return 0;
}
