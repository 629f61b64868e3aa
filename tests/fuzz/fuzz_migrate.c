/* Fuzz target for the migration stream (snapshot/snap_migrate.h) and the
 * hello's "moved" reply (common/wire.h): what a hostile source sends a
 * destination's receiver, and what a hostile ternd sends a guest.
 *
 * The first byte picks: 0-6 one frame decoder over the rest (a payload),
 * 7 wire_moved_decode, 8 the PULL decoder, 9 the receiver itself: the rest is the byte stream
 * after the handshake, a round read into a store (a fresh directory, made
 * once per process) as snap_migrate_snapshot_recv reads it, compressed
 * chunks decompressed into the chunk's bytes and no further; 10 the
 * STREAMS decoder, 11 JOIN's; 12 the receiver with a joined stream: a u32
 * length, that many bytes of the first stream, and the joined stream's
 * bytes after them (its CHUNKs and END, read on a thread of its own once
 * the first stream's regions are declared); 13 the JOURNAL_BASE decoder,
 * 14 JOURNAL_COPY's (a round's journal as a delta against its parent's,
 * which the receiver seeds of 9 also send).  Nothing may crash, and what
 * decodes must lie inside the input.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "snap_migrate.h"
#include "wire.h"

static void str_inside(struct snap_migrate_str s, const uint8_t *p, size_t n)
{
	if ((const uint8_t *)s.ptr < p || (const uint8_t *)s.ptr + s.len > p + n)
		abort();
}

static struct snap_store *fuzz_store(void)
{
	static struct snap_store *store;
	static char dir[] = "/tmp/tern-fuzz-migrate-XXXXXX";

	if (!store && mkdtemp(dir))
		snap_store_open(dir, NULL, SNAP_STORE_CREATE, &store);
	return store;
}

/* A memfd holding @size bytes of @data at offset 0; -1 if not. */
static int bytes_fd(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz-migrate", 0);

	if (fd >= 0 && (write(fd, data, size) != (ssize_t)size || lseek(fd, 0, SEEK_SET))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* One connection per stream for the process: their 64 MiB buffers are
 * not made per input.  NULL without memory. */
static struct snap_migrate_conn *fuzz_conn(unsigned which, int fd)
{
	static struct snap_migrate_conn conns[2];
	static bool ready[2];
	struct snap_migrate_conn *c = &conns[which];

	if (!ready[which] && snap_migrate_conn_init(c, -1))
		return NULL;
	ready[which] = true;
	c->fd = fd;
	c->joined_count = 0;
	sha256_init(&c->sent);
	sha256_init(&c->received);
	return c;
}

/* The rounds of the first stream's bytes, @joined_fd joined to it (-1: none). */
static void stream_run(const uint8_t *data, size_t size, int joined_fd)
{
	static const struct auth_token token = { 16, "fuzz-token-01234" };
	uint8_t nonce[AUTH_NONCE_BYTES] = { 0 };
	struct snap_store *store = fuzz_store();
	struct snap_migrate_conn *c, *j = NULL;
	char name[SNAP_NAME_MAX + 1];
	uint32_t len, flags;
	uint16_t type;
	int fd = bytes_fd(data, size);

	if (fd < 0 || !store || !(c = fuzz_conn(0, fd)))
		goto out;
	if (joined_fd >= 0 && !(j = fuzz_conn(1, joined_fd)))
		goto out;
	if (j) {
		c->joined[0] = j;
		c->joined_count = 1;
	}
	while (!snap_migrate_recv(c, &type, &len) && type == SNAP_MIGRATE_BEGIN)
		if (snap_migrate_snapshot_recv(c, len, store, "fuzz", &token, nonce, 64u << 20, name, &flags))
			break;
out:
	if (fd >= 0)
		close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data + 1;
	uint32_t n = (uint32_t)(size - 1);

	if (size < 1 || size > (1u << 24))
		return 0;
	switch (data[0] % 15) {
	case 0: {
		struct snap_migrate_challenge v;

		snap_migrate_challenge_decode(p, n, &v);
		break;
	}
	case 1: {
		struct snap_migrate_auth v;

		if (!snap_migrate_auth_decode(p, n, &v))
			str_inside(v.session, p, n);
		break;
	}
	case 2: {
		struct snap_migrate_begin v;

		if (!snap_migrate_begin_decode(p, n, &v)) {
			str_inside(v.name, p, n);
			str_inside(v.parent, p, n);
			str_inside(v.device_name, p, n);
			if (v.chunk_size < SNAP_CHUNK_SIZE_MIN || v.flags & ~SNAP_MIGRATE_FLAGS_KNOWN)
				abort();
		}
		break;
	}
	case 3: {
		struct snap_migrate_region v;

		if (!snap_migrate_region_decode(p, n, &v) && (!v.size || v.addr + v.size < v.addr))
			abort();
		break;
	}
	case 4: {
		struct snap_migrate_chunk v;

		if (!snap_migrate_chunk_decode(p, n, &v) &&
		    (v.data < p || v.data + v.len > p + n || snap_migrate_chunk_has_data(v.kind) != (v.len > 0) ||
		     v.kind > SNAP_MIGRATE_CHUNK_ZSTD))
			abort();
		break;
	}
	case 5: {
		struct snap_migrate_end v;

		snap_migrate_end_decode(p, n, &v);
		break;
	}
	case 6: {
		struct snap_migrate_ack v;

		if (!snap_migrate_ack_decode(p, n, &v)) {
			str_inside(v.message, p, n);
			if (v.status > 0)
				abort();
		}
		break;
	}
	case 8: {
		struct snap_migrate_pull v;

		if (!snap_migrate_pull_decode(p, n, &v)) {
			str_inside(v.uuid, p, n);
			str_inside(v.url, p, n);
			if (!v.uuid.len || !v.url.len)
				abort();
		}
		break;
	}
	case 7: {
		struct wire_cursor cur;
		struct wire_moved mv;

		wire_cursor_init(&cur, p, n);
		if (!wire_moved_decode(&cur, &mv) && (!mv.url[0] || strlen(mv.url) > WIRE_MOVED_URL_MAX))
			abort();
		break;
	}
	case 10: {
		struct snap_migrate_streams v;

		if (!snap_migrate_streams_decode(p, n, &v) && (!v.count || v.count >= SNAP_MIGRATE_STREAMS_MAX))
			abort();
		break;
	}
	case 11: {
		struct snap_migrate_join v;

		snap_migrate_join_decode(p, n, &v);
		break;
	}
	case 12: {
		uint32_t first = n >= 4 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
					      (uint32_t)p[3] << 24 : 0;
		int joined;

		if (n < 4 || first > n - 4)
			break;
		joined = bytes_fd(p + 4 + first, n - 4 - first);
		if (joined >= 0) {
			stream_run(p + 4, first, joined);
			close(joined);
		}
		break;
	}
	case 13: {
		struct snap_migrate_journal_base v;

		if (!snap_migrate_journal_base_decode(p, n, &v) &&
		    (v.bytes > SNAP_MIGRATE_JOURNAL_MAX || v.base_bytes > SNAP_MIGRATE_JOURNAL_MAX))
			abort();
		break;
	}
	case 14: {
		struct snap_migrate_journal_copy v;

		if (!snap_migrate_journal_copy_decode(p, n, &v) && (!v.len || v.offset + v.len < v.offset))
			abort();
		break;
	}
	default:
		stream_run(p, n, -1);
		break;
	}
	return 0;
}
