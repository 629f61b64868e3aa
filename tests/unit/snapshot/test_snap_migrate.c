/* The migration stream (snapshot/snap_migrate.h): rounds carried from one
 * store to another over a socketpair, compressed chunks as the source
 * stored them, and what a hostile source may send: a wrong token, a session
 * over the quota, a stream whose hash or a chunk's content hash is wrong,
 * compressed chunks that do not decompress, decompress to more or fewer
 * bytes than the chunk or to other bytes, truncated and malformed frames.
 * And rounds streamed while they are written (snap_migrate_snapshot_follow):
 * sent before the writer ended, a writer that fails halfway, progress logs
 * that are damaged, truncated, out of order or that disagree with what was
 * committed. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <cmocka.h>
#include <zstd.h>

#include "le.h"
#include "monotonic.h"
#include "sha256.h"
#include "snap_migrate.h"
#include "snap_test_util.h"

#define ADDR 0x200000000000ull
#define SIZE (8 * TEST_CHUNK)

struct fixture {
	char src_dir[256], dst_dir[256];
	struct snap_store *src, *dst;
	struct test_region r[1];
	uint8_t *data0, *data1;
};

static const struct auth_token token = { 20, "migration-token-0001" };
static const struct auth_token other = { 20, "migration-token-9999" };

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	int jfd;

	test_tmpdir(f->src_dir, sizeof(f->src_dir), "migsrc");
	test_tmpdir(f->dst_dir, sizeof(f->dst_dir), "migdst");
	assert_int_equal(snap_store_open(f->src_dir, NULL, SNAP_STORE_CREATE, &f->src), 0);
	assert_int_equal(snap_store_open(f->dst_dir, NULL, SNAP_STORE_CREATE, &f->dst), 0);
	jfd = test_journal_make(f->src_dir, "j", 3000);
	f->data0 = test_data_make(DATA_HALF_ZERO, SIZE, 1);
	f->data1 = malloc(SIZE);
	memcpy(f->data1, f->data0, SIZE);
	memset(f->data1 + 2 * TEST_CHUNK, 0x5a, TEST_CHUNK);  /* one chunk rewritten */
	f->r[0] = (struct test_region){ ADDR, SIZE, f->data0 };
	assert_int_equal(test_snapshot_write(f->src, "r0", NULL, f->r, 1, jfd, NULL), 0);
	f->r[0].data = f->data1;
	assert_int_equal(test_snapshot_write(f->src, "r1", "r0", f->r, 1, jfd, NULL), 0);
	close(jfd);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	snap_store_close(f->src);
	snap_store_close(f->dst);
	test_dir_remove(f->src_dir);
	test_dir_remove(f->dst_dir);
	free(f->data0);
	free(f->data1);
	free(f);
	return 0;
}

struct sender {
	struct fixture *f;
	int fd;
	int extra_fd[SNAP_MIGRATE_STREAMS_MAX - 1];  /* streams joined to fd */
	unsigned extra;
	const struct auth_token *token;
	uint64_t max_bandwidth;    /* over all the streams, 0: none */
	/* Set: the second round is @follow, on r0, streamed while it is
	 * written (@watch), not r1 as stored. */
	const char *follow;
	const struct snap_migrate_writer_watch *watch;
	const char *names[2];      /* the two rounds sent as stored: r0 and r1 unless set */
	int rc;
	struct snap_migrate_stats st[2];
	char error[2048];
};

static void *sender_run(void *arg)
{
	struct sender *s = arg;
	struct snap_migrate_conn c;
	uint8_t nonce[AUTH_NONCE_BYTES];

	struct snap_migrate_conn extra[SNAP_MIGRATE_STREAMS_MAX - 1], *joined[SNAP_MIGRATE_STREAMS_MAX - 1];
	uint8_t key[SNAP_MIGRATE_STREAM_KEY_BYTES] = { 7 }, extra_nonce[AUTH_NONCE_BYTES];
	struct snap_migrate_cap cap;

	snap_migrate_cap_init(&cap, s->max_bandwidth);
	snap_migrate_conn_init(&c, s->fd);
	c.cap = &cap;
	s->rc = snap_migrate_client_auth(&c, s->token, "session-1", nonce);
	if (!s->rc && s->extra)
		s->rc = snap_migrate_streams_offer(&c, s->extra, key);
	for (unsigned i = 0; i < s->extra; i++) {
		snap_migrate_conn_init(&extra[i], s->extra_fd[i]);
		extra[i].cap = &cap;
		joined[i] = &extra[i];
		if (!s->rc)
			s->rc = snap_migrate_client_auth(&extra[i], s->token, "session-1", extra_nonce);
		if (!s->rc)
			s->rc = snap_migrate_join(&extra[i], key);
	}
	if (!s->rc && s->extra)
		s->rc = snap_migrate_streams_wait(&c, joined, s->extra);
	if (!s->names[0]) {
		s->names[0] = "r0";
		s->names[1] = "r1";
	}
	if (!s->rc)
		s->rc = snap_migrate_snapshot_send(&c, s->f->src, s->names[0], NULL, 0, s->token, nonce, &s->st[0]);
	if (!s->rc && s->follow)
		s->rc = snap_migrate_snapshot_follow(&c, s->f->src_dir, s->follow, "r0", SNAP_MIGRATE_FINAL, s->token,
						     nonce, s->watch, &s->st[1]);
	else if (!s->rc)
		s->rc = snap_migrate_snapshot_send(&c, s->f->src, s->names[1], s->names[0], SNAP_MIGRATE_FINAL,
						   s->token, nonce, &s->st[1]);
	snprintf(s->error, sizeof(s->error), "%s", c.error);
	for (unsigned i = 0; i < s->extra; i++) {
		snap_migrate_conn_fini(&extra[i]);
		shutdown(s->extra_fd[i], SHUT_RDWR);
	}
	snap_migrate_conn_fini(&c);
	snap_migrate_cap_fini(&cap);
	shutdown(s->fd, SHUT_RDWR);
	return NULL;
}

/* STREAMS, then each of @extra_fd authenticated and JOINed, as ternd's
 * receivers and supervisor take them. */
static int streams_accept(struct snap_migrate_conn *c, uint32_t len, const int *extra_fd,
			  struct snap_migrate_conn *extra)
{
	struct snap_migrate_streams st;
	struct snap_migrate_join j;
	char session[SNAP_NAME_MAX + 1];
	uint8_t nonce[AUTH_NONCE_BYTES];
	uint16_t type;
	int rc = snap_migrate_streams_decode(c->buf, len, &st);

	if (!rc)
		rc = snap_migrate_ack_send(c, 0, "streams awaited");
	for (uint32_t i = 0; !rc && i < st.count; i++) {
		snap_migrate_conn_init(&extra[i], extra_fd[i]);
		rc = snap_migrate_server_auth(&extra[i], &token, session, nonce);
		if (!rc)
			rc = snap_migrate_recv(&extra[i], &type, &len);
		if (!rc && (type != SNAP_MIGRATE_JOIN || snap_migrate_join_decode(extra[i].buf, len, &j) ||
			    memcmp(j.key, st.key, sizeof(j.key))))
			rc = -EPROTO;
		if (!rc)
			rc = snap_migrate_stream_adopt(c, &extra[i]);
	}
	return rc ? rc : snap_migrate_ack_send(c, 0, "streams joined");
}

/* The destination's loop (as ternd's receiver runs it): 0 when both rounds came. */
static int receive(struct fixture *f, int fd, const int *extra_fd, uint64_t quota, char *error, size_t cap)
{
	struct snap_migrate_conn c, extra[SNAP_MIGRATE_STREAMS_MAX - 1];
	char session[SNAP_NAME_MAX + 1], name[SNAP_NAME_MAX + 1];
	uint8_t nonce[AUTH_NONCE_BYTES];
	uint32_t len, flags = 0;
	uint16_t type;
	int rc;

	snap_migrate_conn_init(&c, fd);
	rc = snap_migrate_server_auth(&c, &token, session, nonce);
	if (rc)
		snap_migrate_refuse(&c, rc, c.error);
	while (!rc && !(flags & SNAP_MIGRATE_FINAL)) {
		rc = snap_migrate_recv(&c, &type, &len);
		if (!rc && type == SNAP_MIGRATE_STREAMS) {
			rc = streams_accept(&c, len, extra_fd, extra);
			if (rc)
				snap_migrate_refuse(&c, rc, c.error);
			continue;
		}
		if (!rc)
			rc = type == SNAP_MIGRATE_BEGIN ? snap_migrate_snapshot_recv(&c, len, f->dst, session, &token,
									       nonce, quota, name, &flags)
							: -EPROTO;
		if (rc)
			snap_migrate_refuse(&c, rc, c.error);
		else
			rc = snap_migrate_ack_send(&c, 0, name);
	}
	snprintf(error, cap, "%s", c.error);
	for (unsigned i = 0; i < c.joined_count; i++)
		snap_migrate_conn_fini(c.joined[i]);
	snap_migrate_conn_fini(&c);
	return rc;
}

/* A migration over 1 + @extra streams. */
static int migrate_streams(struct fixture *f, const struct auth_token *t, uint64_t quota, unsigned extra,
			   struct sender *s, char *err, size_t cap)
{
	int far[SNAP_MIGRATE_STREAMS_MAX - 1] = { 0 };
	pthread_t th;
	int sv[2], rc;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	*s = (struct sender){ .f = f, .fd = sv[0], .token = t, .extra = extra, .max_bandwidth = s->max_bandwidth,
			      .follow = s->follow, .watch = s->watch, .names = { s->names[0], s->names[1] } };
	for (unsigned i = 0; i < extra; i++) {
		int pair[2];

		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
		s->extra_fd[i] = pair[0];
		far[i] = pair[1];
	}
	pthread_create(&th, NULL, sender_run, s);
	rc = receive(f, sv[1], far, quota, err, cap);
	shutdown(sv[1], SHUT_RDWR);
	for (unsigned i = 0; i < extra; i++)
		shutdown(far[i], SHUT_RDWR);
	pthread_join(th, NULL);
	close(sv[0]);
	close(sv[1]);
	for (unsigned i = 0; i < extra; i++) {
		close(s->extra_fd[i]);
		close(far[i]);
	}
	return rc;
}

static int migrate(struct fixture *f, const struct auth_token *t, uint64_t quota, struct sender *s, char *err,
		   size_t cap)
{
	return migrate_streams(f, t, quota, 0, s, err, cap);
}

static void test_rounds_arrive(void **state)
{
	struct fixture *f = *state;
	struct snap_manifest m;
	struct sender s = { 0 };
	char err[2048];

	assert_int_equal(migrate(f, &token, 0, &s, err, sizeof(err)), 0);
	assert_int_equal(s.rc, 0);
	/* Zero chunks and the unchanged ones carry no bytes. */
	assert_int_equal(s.st[0].zero_chunks, 4);
	assert_int_equal(s.st[0].data_chunks, 4);
	/* Random chunks, stored raw, go raw: no byte more than they hold. */
	assert_int_equal(s.st[0].compressed_chunks, 0);
	assert_int_equal(s.st[0].data_sent_bytes, s.st[0].data_bytes);
	assert_true(s.st[0].stream_bytes - s.st[0].journal_bytes - s.st[0].data_bytes < 1024);
	/* The rewritten chunk (one byte repeated) goes as its store holds it: compressed. */
	assert_int_equal(s.st[1].data_chunks, 1);
	assert_int_equal(s.st[1].compressed_chunks, 1);
	assert_int_equal(s.st[1].data_bytes, TEST_CHUNK);
	assert_true(s.st[1].data_sent_bytes < TEST_CHUNK / 100);
	assert_true(s.st[1].stream_bytes < TEST_CHUNK / 10 + s.st[1].journal_bytes);
	/* ... and is stored compressed as it came, then read back whole. */
	assert_int_equal(snap_store_manifest_get(f->dst, "r1", &m), 0);
	assert_int_equal(m.new_chunks, 1);
	assert_true(m.new_stored_bytes < TEST_CHUNK / 100);
	assert_int_equal(snap_store_verify(f->dst, "r1", NULL), 0);
	assert_int_equal(test_snapshot_check(f->dst, "r1", f->r, 1), 0);
	assert_int_equal(snap_store_manifest_get(f->dst, "r1", &m), 0);
	assert_string_equal(m.session_id, "session-1");
	assert_string_equal(m.parent, "r0");
}

/* The chunks spread over four streams make the same snapshots; a cap of
 * --max-bandwidth holds all four together. */
static void test_parallel_streams(void **state)
{
	struct fixture *f = *state;
	struct sender s = { .max_bandwidth = 1u << 20 };
	uint64_t t0 = monotonic_ns();
	char err[2048];

	assert_int_equal(migrate_streams(f, &token, 0, 3, &s, err, sizeof(err)), 0);
	assert_int_equal(s.rc, 0);
	/* 256 KiB of chunk data at 1 MiB/s over all the streams. */
	assert_true(monotonic_ns() - t0 >= 240000000ull);
	assert_int_equal(s.st[0].data_chunks, 4);
	assert_int_equal(s.st[0].zero_chunks, 4);
	/* Every stream's bytes, each counted once. */
	assert_true(s.st[0].stream_bytes >= s.st[0].data_bytes);
	assert_true(s.st[0].stream_bytes - s.st[0].journal_bytes - s.st[0].data_bytes < 1024);
	assert_true(s.st[1].stream_bytes < TEST_CHUNK / 10 + s.st[1].journal_bytes);
	assert_int_equal(s.st[1].data_chunks, 1);
	assert_int_equal(snap_store_verify(f->dst, "r1", NULL), 0);
	assert_int_equal(test_snapshot_check(f->dst, "r1", f->r, 1), 0);
}

static void test_wrong_token(void **state)
{
	struct fixture *f = *state;
	struct snap_info *list;
	unsigned n;
	struct sender s = { 0 };
	char err[2048];

	assert_int_equal(migrate(f, &other, 0, &s, err, sizeof(err)), -EPERM);
	assert_int_equal(s.rc, -EPERM);
	assert_non_null(strstr(s.error, "bad token"));
	assert_int_equal(snap_store_list(f->dst, &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
}

static void test_quota(void **state)
{
	struct fixture *f = *state;
	struct sender s = { 0 };
	char err[2048];

	assert_int_equal(migrate(f, &token, SIZE - 1, &s, err, sizeof(err)), -EDQUOT);
	assert_int_equal(s.rc, -EDQUOT);
	assert_non_null(strstr(s.error, "quota"));
}

/* Raw frames, as a hostile source writes them. */
static void frame_put(int fd, uint16_t type, const void *p, uint32_t len)
{
	uint8_t h[SNAP_MIGRATE_HEADER_BYTES];

	le32_put(h, SNAP_MIGRATE_MAGIC);
	le16_put(h + 4, SNAP_MIGRATE_VERSION);
	le16_put(h + 6, type);
	le32_put(h + 8, len);
	assert_int_equal(write(fd, h, sizeof(h)), sizeof(h));
	if (len)
		assert_int_equal(write(fd, p, len), len);
}

static uint32_t begin_make(uint8_t *b, uint32_t regions, uint32_t flags)
{
	uint8_t *p = b;

	memset(b, 0, 128);
	le32_put(p, flags);
	le32_put(p + 4, TEST_CHUNK);
	le32_put(p + 8, regions);
	p += 24 + SNAP_CREDENTIAL_BYTES + 16;
	le32_put(p, 4);
	memcpy(p + 4, "evil", 4);
	p += 8;
	le32_put(p, 0);
	le32_put(p + 4, 0);
	return (uint32_t)(p + 8 - b);
}

static uint32_t chunk_make(uint8_t *b, uint32_t kind, uint64_t index, uint32_t data_len)
{
	memset(b, 0, SNAP_MIGRATE_CHUNK_HEAD_BYTES - 4 + data_len);
	le32_put(b + 4, kind);
	le64_put(b + 8, index);
	memset(b + SNAP_MIGRATE_CHUNK_HEAD_BYTES - 4, 0x11, data_len);
	return SNAP_MIGRATE_CHUNK_HEAD_BYTES - 4 + data_len;
}

static char hostile_error[2048];

/* Feed @frames (written by @write_fn into a memfd) to the receiver; its
 * error in hostile_error. */
static int hostile_round(struct fixture *f, void (*write_fn)(int fd))
{
	uint8_t nonce[AUTH_NONCE_BYTES] = { 0 };
	char name[SNAP_NAME_MAX + 1];
	struct snap_migrate_conn c;
	uint32_t len, flags;
	uint16_t type;
	int fd = memfd_create("hostile", 0), rc;

	write_fn(fd);
	lseek(fd, 0, SEEK_SET);
	snap_migrate_conn_init(&c, fd);
	rc = snap_migrate_recv(&c, &type, &len);
	if (!rc)
		rc = snap_migrate_snapshot_recv(&c, len, f->dst, "session-1", &token, nonce, 0, name, &flags);
	snprintf(hostile_error, sizeof(hostile_error), "%s", c.error);
	snap_migrate_conn_fini(&c);
	close(fd);
	return rc;
}

static void write_bad_content(int fd)
{
	uint8_t b[SNAP_MIGRATE_CHUNK_HEAD_BYTES + TEST_CHUNK], reg[20];

	frame_put(fd, SNAP_MIGRATE_BEGIN, b, begin_make(b, 1, 0));
	le64_put(reg, ADDR);
	le64_put(reg + 8, TEST_CHUNK);
	le32_put(reg + 16, 0);
	frame_put(fd, SNAP_MIGRATE_REGION, reg, sizeof(reg));
	frame_put(fd, SNAP_MIGRATE_CHUNK, b, chunk_make(b, SNAP_MIGRATE_CHUNK_DATA, 0, TEST_CHUNK));
}

static void write_bad_stream_hash(int fd)
{
	uint8_t b[256], reg[20], end[SHA256_BYTES] = { 0 };

	frame_put(fd, SNAP_MIGRATE_BEGIN, b, begin_make(b, 1, 0));
	le64_put(reg, ADDR);
	le64_put(reg + 8, TEST_CHUNK);
	le32_put(reg + 16, 0);
	frame_put(fd, SNAP_MIGRATE_REGION, reg, sizeof(reg));
	frame_put(fd, SNAP_MIGRATE_CHUNK, b, chunk_make(b, SNAP_MIGRATE_CHUNK_ZERO, 0, 0));
	frame_put(fd, SNAP_MIGRATE_END, end, sizeof(end));
}

static void write_chunk_outside(int fd)
{
	uint8_t b[256], reg[20];

	frame_put(fd, SNAP_MIGRATE_BEGIN, b, begin_make(b, 1, 0));
	le64_put(reg, ADDR);
	le64_put(reg + 8, TEST_CHUNK);
	le32_put(reg + 16, 0);
	frame_put(fd, SNAP_MIGRATE_REGION, reg, sizeof(reg));
	frame_put(fd, SNAP_MIGRATE_CHUNK, b, chunk_make(b, SNAP_MIGRATE_CHUNK_ZERO, 7, 0));
}

static void write_truncated(int fd)
{
	uint8_t b[128];

	frame_put(fd, SNAP_MIGRATE_BEGIN, b, begin_make(b, 2, 0));
}

static void write_chunk_before_regions(int fd)
{
	uint8_t b[256];

	frame_put(fd, SNAP_MIGRATE_BEGIN, b, begin_make(b, 1, 0));
	frame_put(fd, SNAP_MIGRATE_CHUNK, b, chunk_make(b, SNAP_MIGRATE_CHUNK_ZERO, 0, 0));
}

static void test_hostile_rounds(void **state)
{
	struct fixture *f = *state;
	struct snap_info *list;
	unsigned n;

	assert_int_equal(hostile_round(f, write_bad_content), -EBADMSG);
	assert_int_equal(hostile_round(f, write_bad_stream_hash), -EBADMSG);
	assert_int_equal(hostile_round(f, write_chunk_outside), -EBADMSG);
	assert_int_equal(hostile_round(f, write_truncated), -EPIPE);
	assert_int_equal(hostile_round(f, write_chunk_before_regions), -EPROTO);
	/* Nothing half written is listed. */
	assert_int_equal(snap_store_list(f->dst, &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
}

/* A round whose first stream sends BEGIN and its REGION, then waits
 * (a socket that stays open), while its joined stream sends what
 * @write_fn writes: the joined stream's failure must stop the round, with
 * its error. */
static int hostile_joined(struct fixture *f, void (*write_fn)(int fd))
{
	uint8_t nonce[AUTH_NONCE_BYTES] = { 0 }, b[256], reg[20];
	char name[SNAP_NAME_MAX + 1];
	struct snap_migrate_conn c, j;
	uint32_t len, flags;
	uint16_t type;
	int sv[2], fd = memfd_create("hostile-joined", 0), rc;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	frame_put(sv[0], SNAP_MIGRATE_BEGIN, b, begin_make(b, 1, 0));
	le64_put(reg, ADDR);
	le64_put(reg + 8, 2 * TEST_CHUNK);
	le32_put(reg + 16, 0);
	frame_put(sv[0], SNAP_MIGRATE_REGION, reg, sizeof(reg));
	write_fn(fd);
	lseek(fd, 0, SEEK_SET);
	snap_migrate_conn_init(&c, sv[1]);
	snap_migrate_conn_init(&j, fd);
	c.joined[0] = &j;
	c.joined_count = 1;
	rc = snap_migrate_recv(&c, &type, &len);
	if (!rc)
		rc = snap_migrate_snapshot_recv(&c, len, f->dst, "session-1", &token, nonce, 0, name, &flags);
	snprintf(hostile_error, sizeof(hostile_error), "%s", c.error);
	snap_migrate_conn_fini(&j);
	snap_migrate_conn_fini(&c);
	close(fd);
	close(sv[0]);
	close(sv[1]);
	return rc;
}

static void write_joined_bad_content(int fd)
{
	uint8_t b[SNAP_MIGRATE_CHUNK_HEAD_BYTES + TEST_CHUNK];

	frame_put(fd, SNAP_MIGRATE_CHUNK, b, chunk_make(b, SNAP_MIGRATE_CHUNK_DATA, 1, TEST_CHUNK));
}

static void write_joined_bad_hash(int fd)
{
	uint8_t b[256], end[SHA256_BYTES] = { 0 };

	frame_put(fd, SNAP_MIGRATE_CHUNK, b, chunk_make(b, SNAP_MIGRATE_CHUNK_ZERO, 1, 0));
	frame_put(fd, SNAP_MIGRATE_END, end, sizeof(end));
}

static void write_joined_begin(int fd)
{
	uint8_t b[256];

	frame_put(fd, SNAP_MIGRATE_BEGIN, b, begin_make(b, 1, 0));
}

static void write_joined_nothing(int fd)
{
	(void)fd;
}

static void write_joined_outside(int fd)
{
	uint8_t b[256];

	frame_put(fd, SNAP_MIGRATE_CHUNK, b, chunk_make(b, SNAP_MIGRATE_CHUNK_ZERO, 2, 0));
}

static void test_hostile_joined(void **state)
{
	struct fixture *f = *state;
	struct snap_info *list;
	unsigned n;

	assert_int_equal(hostile_joined(f, write_joined_bad_content), -EBADMSG);
	assert_non_null(strstr(hostile_error, "stream 1: chunk 1 of region 0: content hash mismatch"));
	assert_int_equal(hostile_joined(f, write_joined_bad_hash), -EBADMSG);
	assert_non_null(strstr(hostile_error, "stream 1: stream checksum mismatch"));
	assert_int_equal(hostile_joined(f, write_joined_begin), -EPROTO);
	assert_non_null(strstr(hostile_error, "stream 1: frame type 3 on a joined stream"));
	assert_int_equal(hostile_joined(f, write_joined_outside), -EBADMSG);
	assert_non_null(strstr(hostile_error, "outside the snapshot"));
	/* A joined stream that ends mid-round. */
	assert_int_equal(hostile_joined(f, write_joined_nothing), -EPIPE);
	assert_non_null(strstr(hostile_error, "stream 1: the peer closed the stream"));
	assert_int_equal(snap_store_list(f->dst, &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
}

/* What write_zstd_chunk sends: a compressed chunk's payload, and the
 * bytes whose XXH3-128 its record names. */
static struct {
	uint8_t z[2 * TEST_CHUNK];
	uint32_t zlen;
	uint8_t hash[SNAP_HASH_BYTES];
} zc;

/* zc as a compressed chunk of @raw_len bytes of @byte, its record naming
 * @hash_byte repeated TEST_CHUNK times; @cut: send only so many bytes. */
static void zc_make(uint8_t byte, uint32_t raw_len, uint8_t hash_byte, uint32_t cut)
{
	uint8_t *raw = malloc(2 * TEST_CHUNK);
	size_t n;

	memset(raw, byte, raw_len);
	n = ZSTD_compress(zc.z, sizeof(zc.z), raw, raw_len, 1);
	assert_false(ZSTD_isError(n));
	zc.zlen = cut && cut < n ? cut : (uint32_t)n;
	memset(raw, hash_byte, TEST_CHUNK);
	snap_hash128(raw, TEST_CHUNK, zc.hash);
	free(raw);
}

/* A round of one chunk, compressed (zc), and nothing after it. */
static void write_zstd_chunk(int fd)
{
	static uint8_t b[SNAP_MIGRATE_CHUNK_HEAD_BYTES + sizeof(zc.z)];
	uint8_t reg[20];
	uint32_t n;

	frame_put(fd, SNAP_MIGRATE_BEGIN, b, begin_make(b, 1, 0));
	le64_put(reg, ADDR);
	le64_put(reg + 8, TEST_CHUNK);
	le32_put(reg + 16, 0);
	frame_put(fd, SNAP_MIGRATE_REGION, reg, sizeof(reg));
	n = chunk_make(b, SNAP_MIGRATE_CHUNK_ZSTD, 0, 0);
	memcpy(b + 24, zc.hash, SNAP_HASH_BYTES);
	memcpy(b + n, zc.z, zc.zlen);
	frame_put(fd, SNAP_MIGRATE_CHUNK, b, n + zc.zlen);
}

static void test_hostile_compressed(void **state)
{
	struct fixture *f = *state;
	struct snap_info *list;
	unsigned n;

	/* Well formed: taken, and then the stream ends before END. */
	zc_make(0x5a, TEST_CHUNK, 0x5a, 0);
	assert_int_equal(hostile_round(f, write_zstd_chunk), -EPIPE);
	/* Decompresses to the chunk's length, but to other bytes than its record's hash. */
	zc_make(0x5a, TEST_CHUNK, 0x5b, 0);
	assert_int_equal(hostile_round(f, write_zstd_chunk), -EBADMSG);
	assert_non_null(strstr(hostile_error, "content hash mismatch"));
	/* Larger than the chunk once decompressed. */
	zc_make(0x5a, 2 * TEST_CHUNK, 0x5a, 0);
	assert_int_equal(hostile_round(f, write_zstd_chunk), -EBADMSG);
	assert_non_null(strstr(hostile_error, "does not decompress"));
	/* Smaller. */
	zc_make(0x5a, TEST_CHUNK / 2, 0x5a, 0);
	assert_int_equal(hostile_round(f, write_zstd_chunk), -EBADMSG);
	assert_non_null(strstr(hostile_error, "decompresses to 32768 bytes, not 65536"));
	/* A frame cut short. */
	zc_make(0x5a, TEST_CHUNK, 0x5a, 0);
	zc_make(0x5a, TEST_CHUNK, 0x5a, zc.zlen - 3);
	assert_int_equal(hostile_round(f, write_zstd_chunk), -EBADMSG);
	assert_non_null(strstr(hostile_error, "does not decompress"));
	/* Not zstd at all. */
	memset(zc.z, 0x11, 100);
	zc.zlen = 100;
	assert_int_equal(hostile_round(f, write_zstd_chunk), -EBADMSG);
	assert_non_null(strstr(hostile_error, "does not decompress"));
	/* "Compressed" into as many bytes as the chunk holds: it would go raw. */
	memset(zc.z, 0x5a, TEST_CHUNK);
	zc.zlen = TEST_CHUNK;
	snap_hash128(zc.z, TEST_CHUNK, zc.hash);
	assert_int_equal(hostile_round(f, write_zstd_chunk), -EBADMSG);
	assert_non_null(strstr(hostile_error, "65536 compressed bytes for a chunk of 65536"));
	/* Nothing half written is listed. */
	assert_int_equal(snap_store_list(f->dst, &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
}

static void test_decoders_refuse(void **state)
{
	uint8_t b[256], h[SNAP_MIGRATE_HEADER_BYTES];
	struct snap_migrate_begin bg;
	struct snap_migrate_region rg;
	struct snap_migrate_chunk ch;
	struct snap_migrate_ack ack;
	struct snap_migrate_auth au;
	struct snap_migrate_pull pl;
	struct snap_migrate_streams sm;
	struct snap_migrate_join jn;
	uint32_t n, len;
	uint16_t type;

	(void)state;
	/* STREAMS: a count of 1 .. STREAMS_MAX - 1 and a key; JOIN: a key. */
	le32_put(b, 3);
	memset(b + 4, 0xab, SNAP_MIGRATE_STREAM_KEY_BYTES);
	assert_int_equal(snap_migrate_streams_decode(b, 4 + SNAP_MIGRATE_STREAM_KEY_BYTES, &sm), 0);
	assert_int_equal(sm.count, 3);
	assert_int_equal(sm.key[15], 0xab);
	for (uint32_t i = 0; i < 4 + SNAP_MIGRATE_STREAM_KEY_BYTES; i++)
		assert_int_equal(snap_migrate_streams_decode(b, i, &sm), -EBADMSG);       /* truncated */
	assert_int_equal(snap_migrate_streams_decode(b, 5 + SNAP_MIGRATE_STREAM_KEY_BYTES, &sm), -EBADMSG);
	le32_put(b, 0);
	assert_int_equal(snap_migrate_streams_decode(b, 4 + SNAP_MIGRATE_STREAM_KEY_BYTES, &sm), -EBADMSG);
	le32_put(b, SNAP_MIGRATE_STREAMS_MAX);
	assert_int_equal(snap_migrate_streams_decode(b, 4 + SNAP_MIGRATE_STREAM_KEY_BYTES, &sm), -EBADMSG);
	le32_put(b, UINT32_MAX);
	assert_int_equal(snap_migrate_streams_decode(b, 4 + SNAP_MIGRATE_STREAM_KEY_BYTES, &sm), -EBADMSG);
	assert_int_equal(snap_migrate_join_decode(b, SNAP_MIGRATE_STREAM_KEY_BYTES, &jn), 0);
	assert_int_equal(snap_migrate_join_decode(b, SNAP_MIGRATE_STREAM_KEY_BYTES - 1, &jn), -EBADMSG);
	assert_int_equal(snap_migrate_join_decode(b, SNAP_MIGRATE_STREAM_KEY_BYTES + 1, &jn), -EBADMSG);
	assert_int_equal(snap_migrate_join_decode(b, 0, &jn), -EBADMSG);

	n = begin_make(b, 1, 0);
	assert_int_equal(snap_migrate_begin_decode(b, n, &bg), 0);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(snap_migrate_begin_decode(b, i, &bg), -EBADMSG);
	assert_int_equal(snap_migrate_begin_decode(b, n + 1, &bg), -EBADMSG);     /* trailing byte */
	le32_put(b, 0x80);                                                        /* unknown flag */
	assert_int_equal(snap_migrate_begin_decode(b, n, &bg), -EBADMSG);
	n = begin_make(b, 1, 0);
	le32_put(b + 4, TEST_CHUNK + 1);                                          /* not a power of two */
	assert_int_equal(snap_migrate_begin_decode(b, n, &bg), -EBADMSG);
	n = begin_make(b, 1, 0);
	le32_put(b + 24 + SNAP_CREDENTIAL_BYTES + 16, 0x7fffffff);                /* a name past the end */
	assert_int_equal(snap_migrate_begin_decode(b, n, &bg), -EBADMSG);

	le64_put(b, UINT64_MAX - 10);
	le64_put(b + 8, 100);
	le32_put(b + 16, 0);
	assert_int_equal(snap_migrate_region_decode(b, 20, &rg), -EBADMSG);      /* wraps */
	le64_put(b + 8, 0);
	assert_int_equal(snap_migrate_region_decode(b, 20, &rg), -EBADMSG);      /* empty */

	n = chunk_make(b, SNAP_MIGRATE_CHUNK_ZERO, 0, 8);
	assert_int_equal(snap_migrate_chunk_decode(b, n, &ch), -EBADMSG);        /* a zero chunk with bytes */
	n = chunk_make(b, SNAP_MIGRATE_CHUNK_DATA, 0, 0);
	assert_int_equal(snap_migrate_chunk_decode(b, n, &ch), -EBADMSG);        /* data without bytes */
	n = chunk_make(b, SNAP_MIGRATE_CHUNK_ZSTD, 0, 0);
	assert_int_equal(snap_migrate_chunk_decode(b, n, &ch), -EBADMSG);        /* compressed without bytes */
	n = chunk_make(b, SNAP_MIGRATE_CHUNK_ZSTD, 0, 8);
	assert_int_equal(snap_migrate_chunk_decode(b, n, &ch), 0);
	assert_int_equal(ch.len, 8);
	n = chunk_make(b, 9, 0, 0);
	assert_int_equal(snap_migrate_chunk_decode(b, n, &ch), -EBADMSG);        /* unknown kind */
	for (uint32_t i = 0; i < SNAP_MIGRATE_CHUNK_HEAD_BYTES - 4; i++)
		assert_int_equal(snap_migrate_chunk_decode(b, i, &ch), -EBADMSG);

	le32_put(b, 5);                                                           /* a positive status */
	le32_put(b + 4, 0);
	assert_int_equal(snap_migrate_ack_decode(b, 8, &ack), -EBADMSG);
	le32_put(b, 0);
	le32_put(b + 4, SNAP_MIGRATE_MESSAGE_MAX + 1);
	assert_int_equal(snap_migrate_ack_decode(b, 8, &ack), -EBADMSG);
	le32_put(b, 0);                                                           /* an empty session */
	assert_int_equal(snap_migrate_auth_decode(b, 4 + AUTH_PROOF_BYTES, &au), -EBADMSG);

	/* PULL: two strings, neither empty, nothing after them. */
	le32_put(b, 3);
	memcpy(b + 4, "abc", 3);
	le32_put(b + 7, 5);
	memcpy(b + 11, "tcp:x", 5);
	assert_int_equal(snap_migrate_pull_decode(b, 16, &pl), 0);
	assert_int_equal(pl.uuid.len, 3);
	assert_int_equal(pl.url.len, 5);
	for (uint32_t i = 0; i < 16; i++)
		assert_int_equal(snap_migrate_pull_decode(b, i, &pl), -EBADMSG);         /* truncated */
	assert_int_equal(snap_migrate_pull_decode(b, 17, &pl), -EBADMSG);             /* a byte after */
	le32_put(b + 7, 0);
	assert_int_equal(snap_migrate_pull_decode(b, 11, &pl), -EBADMSG);             /* no address */
	le32_put(b + 7, SNAP_MIGRATE_MESSAGE_MAX + 1);
	assert_int_equal(snap_migrate_pull_decode(b, 16, &pl), -EBADMSG);             /* over its cap */
	le32_put(b, 0);
	assert_int_equal(snap_migrate_pull_decode(b, 16, &pl), -EBADMSG);             /* no uuid */

	le32_put(h, SNAP_MIGRATE_MAGIC ^ 1);
	le16_put(h + 4, SNAP_MIGRATE_VERSION);
	le16_put(h + 6, SNAP_MIGRATE_CHUNK);
	le32_put(h + 8, 16);
	assert_int_equal(snap_migrate_header_decode(h, &type, &len), -EBADMSG);
	le32_put(h, SNAP_MIGRATE_MAGIC);
	le16_put(h + 4, SNAP_MIGRATE_VERSION + 1);
	assert_int_equal(snap_migrate_header_decode(h, &type, &len), -EBADMSG);
	le16_put(h + 4, 1);                     /* version 1 hashed chunk data into END */
	assert_int_equal(snap_migrate_header_decode(h, &type, &len), -EBADMSG);
	le16_put(h + 4, 2);                     /* version 2 had no compressed chunks */
	assert_int_equal(snap_migrate_header_decode(h, &type, &len), -EBADMSG);
	le16_put(h + 4, SNAP_MIGRATE_VERSION);
	le16_put(h + 6, 99);
	assert_int_equal(snap_migrate_header_decode(h, &type, &len), -EBADMSG);
	le16_put(h + 6, SNAP_MIGRATE_CHUNK);
	le32_put(h + 8, SNAP_MIGRATE_PAYLOAD_MAX + 1);
	assert_int_equal(snap_migrate_header_decode(h, &type, &len), -EBADMSG);
	le32_put(h + 8, 16);
	assert_int_equal(snap_migrate_header_decode(h, &type, &len), 0);
}

/* ---- rounds streamed while they are written ---- */

/* A writer of r2 (on r0) with a progress log, as the source's worker
 * writes a round, that stops halfway until the streams have sent a chunk
 * (at most 10 s: a sender that waits for the commit makes the test fail,
 * not hang), then fails there or goes on. */
struct live_writer {
	struct fixture *f;
	uint8_t *data;             /* r2's bytes */
	enum { LIVE_COMMITS, LIVE_FAILS, LIVE_DAMAGES_LOG } how;
	pthread_t thread;
	pthread_mutex_t mu;        /* guards state, sent */
	int state;                 /* the watch's answer */
	uint64_t sent;             /* what the sender said it sent, last time it asked */
	uint64_t sent_at_half;     /* ... when the writer had given half of the chunks */
	int rc;
};

static int live_state(void *arg, uint64_t sent)
{
	struct live_writer *lw = arg;
	int state;

	pthread_mutex_lock(&lw->mu);
	lw->sent = sent;
	state = lw->state;
	pthread_mutex_unlock(&lw->mu);
	return state;
}

static uint64_t live_sent_wait(struct live_writer *lw)
{
	uint64_t sent = 0;

	for (int i = 0; i < 10000 && !sent; i++) {
		pthread_mutex_lock(&lw->mu);
		sent = lw->sent;
		pthread_mutex_unlock(&lw->mu);
		if (!sent)
			usleep(1000);
	}
	return sent;
}

/* A record with a wrong sum, where the writer's next one would go. */
static void progress_damage(struct fixture *f, const char *name)
{
	uint8_t bogus[SNAP_PROGRESS_RECORD_HEAD_BYTES + 64 + SNAP_PROGRESS_SUM_BYTES] = { SNAP_PROGRESS_CHUNK };
	char path[512];
	int fd;

	bogus[4] = 64;
	snprintf(path, sizeof(path), "%s/snaps/.tmp-%s/progress", f->src_dir, name);
	fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, bogus, sizeof(bogus)), sizeof(bogus));
	close(fd);
}

static void *live_writer_run(void *arg)
{
	struct live_writer *lw = arg;
	struct snap_writer_config cfg = { .name = "r2", .parent = "r0", .session_id = "session-1",
					  .device_name = "sim0", .driver_version = 13000, .chunk_size = TEST_CHUNK,
					  .progress_log = 1 };
	int jfd = test_journal_make(lw->f->src_dir, "j2", 5000), rc;
	struct snap_writer *w;
	uint32_t reg;

	memcpy(cfg.device_uuid, "0123456789abcdef", 16);
	rc = snap_writer_begin(lw->f->src, &cfg, &w);
	if (!rc)
		rc = snap_writer_region_add(w, ADDR, SIZE, 0, &reg);
	if (!rc)
		rc = snap_writer_journal_set(w, jfd);
	for (uint64_t c = 0; !rc && c < SIZE / TEST_CHUNK; c++) {
		const uint8_t *chunk = lw->data + c * TEST_CHUNK;

		if (c == SIZE / TEST_CHUNK / 2) {
			rc = snap_writer_flush(w);
			lw->sent_at_half = live_sent_wait(lw);
			if (lw->how == LIVE_FAILS)
				break;
			if (lw->how == LIVE_DAMAGES_LOG)
				progress_damage(lw->f, "r2");
		}
		if (!rc)
			rc = snap_writer_chunk_add(w, reg, c, chunk, TEST_CHUNK, test_device_hash(chunk, TEST_CHUNK),
						   NULL, NULL);
	}
	if (!rc && lw->how != LIVE_FAILS) {
		rc = snap_writer_commit(w, NULL);
	} else {
		snap_writer_abort(w);
		rc = rc ? rc : -EIO;
	}
	close(jfd);
	pthread_mutex_lock(&lw->mu);
	lw->state = rc ? rc : 1;
	pthread_mutex_unlock(&lw->mu);
	lw->rc = rc;
	return NULL;
}

/* r0 as stored, then r2 while @how's writer writes it, over 1 + @extra
 * streams: the migration's rc. */
static int live_round(struct fixture *f, struct live_writer *lw, unsigned extra, struct sender *s, char *err,
		      size_t cap)
{
	struct snap_migrate_writer_watch watch = { .state = live_state, .arg = lw };
	int rc;

	lw->f = f;
	lw->data = malloc(SIZE);
	memcpy(lw->data, f->data0, SIZE);
	/* A zero chunk and a stored one rewritten in each half; the rest as in r0. */
	memset(lw->data + 1 * TEST_CHUNK, 0x77, TEST_CHUNK);
	memset(lw->data + 2 * TEST_CHUNK, 0, TEST_CHUNK);
	memcpy(lw->data + 6 * TEST_CHUNK, f->data0 + 2 * TEST_CHUNK + 5, TEST_CHUNK);
	pthread_mutex_init(&lw->mu, NULL);
	pthread_create(&lw->thread, NULL, live_writer_run, lw);
	*s = (struct sender){ .follow = "r2", .watch = &watch };
	rc = migrate_streams(f, &token, 0, extra, s, err, cap);
	pthread_join(lw->thread, NULL);
	pthread_mutex_destroy(&lw->mu);
	return rc;
}

static bool store_has(struct snap_store *st, const char *name)
{
	struct snap_manifest m;

	return snap_store_manifest_get(st, name, &m) == 0;
}

/* The round's chunks go while it is written: the writer saw the streams
 * send before it gave its second half, and the destination's r2 is r2. */
static void test_round_followed(void **state)
{
	struct fixture *f = *state;
	struct live_writer lw = { .how = LIVE_COMMITS };
	struct test_region r;
	struct sender s = { 0 };
	char err[2048];

	if (live_round(f, &lw, 3, &s, err, sizeof(err)) || s.rc)
		fail_msg("sender: %s; receiver: %s", s.error, err);
	assert_int_equal(lw.rc, 0);
	assert_true(lw.sent_at_half > 0);
	assert_true(s.st[1].chunks_before_commit >= lw.sent_at_half);
	assert_int_equal(s.st[1].chunks, SIZE / TEST_CHUNK);
	/* Chunk 1 (now bytes), 6 (other bytes); 2 (now zero) without bytes. */
	assert_int_equal(s.st[1].data_chunks, 2);
	assert_int_equal(s.st[1].zero_chunks, 4);
	assert_int_equal(s.st[1].unchanged_chunks, 2);
	r = (struct test_region){ ADDR, SIZE, lw.data };
	assert_int_equal(snap_store_verify(f->dst, "r2", NULL), 0);
	assert_int_equal(test_snapshot_check(f->dst, "r2", &r, 1), 0);
	free(lw.data);
}

/* A writer that fails mid-round fails the round: nothing of it is stored
 * on either side, and the sender says why. */
static void test_round_writer_fails(void **state)
{
	struct fixture *f = *state;
	struct live_writer lw = { .how = LIVE_FAILS };
	struct sender s = { 0 };
	char err[2048];

	assert_int_not_equal(live_round(f, &lw, 1, &s, err, sizeof(err)), 0);
	assert_int_equal(s.rc, -EIO);
	assert_non_null(strstr(s.error, "writer failed mid-round"));
	assert_true(lw.sent_at_half > 0);
	assert_false(store_has(f->dst, "r2"));
	assert_false(store_has(f->src, "r2"));
	assert_true(store_has(f->dst, "r0"));
	free(lw.data);
}

/* A damaged record in the log refuses the round, though the writer
 * committed the snapshot. */
static void test_round_log_damaged(void **state)
{
	struct fixture *f = *state;
	struct live_writer lw = { .how = LIVE_DAMAGES_LOG };
	struct sender s = { 0 };
	char err[2048];

	assert_int_not_equal(live_round(f, &lw, 0, &s, err, sizeof(err)), 0);
	assert_int_equal(s.rc, -EBADMSG);
	assert_non_null(strstr(s.error, "progress log is refused"));
	assert_non_null(strstr(s.error, "damaged"));
	assert_int_equal(lw.rc, 0);
	assert_false(store_has(f->dst, "r2"));
	free(lw.data);
}

/* Progress logs written by hand, as a broken or hostile writer would, for
 * a writer that says it committed: each is refused with its reason. */
static uint64_t fake_sum;

static void fake_put(struct snap_buf *b, const struct snap_progress_record *r)
{
	assert_int_equal(snap_progress_record_encode(r, &fake_sum, b), 0);
}

static void fake_begin(struct snap_buf *b, const char *name)
{
	struct snap_progress_record r = { .type = SNAP_PROGRESS_BEGIN };

	r.begin.chunk_size = TEST_CHUNK;
	r.begin.driver_version = 13000;
	memcpy(r.begin.device_uuid, "0123456789abcdef", 16);
	strcpy(r.begin.name, name);
	strcpy(r.begin.parent, "r0");
	strcpy(r.begin.session_id, "session-1");
	strcpy(r.begin.device_name, "sim0");
	fake_put(b, &r);
}

static void fake_region(struct snap_buf *b)
{
	struct snap_progress_record r = { .type = SNAP_PROGRESS_REGION, .region = { ADDR, SIZE, 0, 0, NULL } };

	fake_put(b, &r);
}

static void fake_zero(struct snap_buf *b, uint64_t index)
{
	struct snap_progress_record r = { .type = SNAP_PROGRESS_CHUNK };

	r.chunk.kind = SNAP_PROGRESS_CHUNK_ZERO;
	r.chunk.index = index;
	fake_put(b, &r);
}

static void fake_commit(struct snap_buf *b, uint64_t chunks)
{
	struct snap_progress_record r = { .type = SNAP_PROGRESS_COMMIT, .commit_regions = 1,
					  .commit_chunks = chunks };

	fake_put(b, &r);
}

static void fake_all_zero(struct snap_buf *b)
{
	for (uint64_t c = 0; c < SIZE / TEST_CHUNK; c++)
		fake_zero(b, c);
}

static void log_truncated(struct snap_buf *b)
{
	fake_begin(b, "r9");
	fake_region(b);
	fake_zero(b, 0);
}

static void log_flipped(struct snap_buf *b)
{
	fake_begin(b, "r9");
	fake_region(b);
	fake_all_zero(b);
	fake_commit(b, SIZE / TEST_CHUNK);
	b->data[b->len - 40] ^= 1;
}

static void log_chunk_first(struct snap_buf *b)
{
	fake_zero(b, 0);
}

static void log_region_late(struct snap_buf *b)
{
	fake_begin(b, "r9");
	fake_region(b);
	fake_zero(b, 0);
	fake_region(b);
}

static void log_chunk_twice(struct snap_buf *b)
{
	fake_begin(b, "r9");
	fake_region(b);
	fake_zero(b, 3);
	fake_zero(b, 3);
}

static void log_chunk_outside(struct snap_buf *b)
{
	fake_begin(b, "r9");
	fake_region(b);
	fake_zero(b, SIZE / TEST_CHUNK);
}

static void log_commit_short(struct snap_buf *b)
{
	fake_begin(b, "r9");
	fake_region(b);
	fake_zero(b, 0);
	fake_commit(b, 1);
}

static void log_after_commit(struct snap_buf *b)
{
	fake_begin(b, "r9");
	fake_region(b);
	fake_all_zero(b);
	fake_commit(b, SIZE / TEST_CHUNK);
	fake_zero(b, 0);
}

static void log_other_name(struct snap_buf *b)
{
	fake_begin(b, "r8");
}

static void log_bad_header(struct snap_buf *b)
{
	b->data[3] ^= 0x20;
}

/* A stored chunk in a pack the store never had. */
static void log_pack_missing(struct snap_buf *b)
{
	struct snap_progress_record r = { .type = SNAP_PROGRESS_CHUNK };

	fake_begin(b, "r9");
	fake_region(b);
	r.chunk.kind = SNAP_PROGRESS_CHUNK_STORED;
	r.chunk.index = 0;
	memset(r.chunk.hash, 0x42, SNAP_HASH_BYTES);
	r.chunk.pack_id = 0x7777;
	r.chunk.offset = SNAP_PACK_HEADER_BYTES;
	r.chunk.stored_size = TEST_CHUNK;
	fake_put(b, &r);
	for (uint64_t c = 1; c < SIZE / TEST_CHUNK; c++)
		fake_zero(b, c);
	fake_commit(b, SIZE / TEST_CHUNK);
}

/* r1 exists, committed with other chunks than this log of it says. */
static void log_disagrees(struct snap_buf *b)
{
	fake_begin(b, "r1");
	fake_region(b);
	fake_all_zero(b);
	fake_commit(b, SIZE / TEST_CHUNK);
}

static int committed_state(void *arg, uint64_t sent)
{
	(void)arg;
	(void)sent;
	return 1;
}

/* Follow snapshot @name whose log @write_fn writes (in a temp directory
 * held as a writer holds its own); the sender's error in @err. */
static int hostile_log(struct fixture *f, const char *name, void (*write_fn)(struct snap_buf *b), char *err,
		       size_t cap)
{
	struct snap_migrate_writer_watch watch = { .state = committed_state };
	struct snap_buf b = { 0 };
	char dir[512], path[600];
	struct sender s = { 0 };
	int lock, dfd, fd, rc;

	/* The store's lock shared, as a writer holds it: an open that cleans
	 * up would take this directory for a dead writer's. */
	snprintf(dir, sizeof(dir), "%s/lock", f->src_dir);
	lock = open(dir, O_RDONLY);
	assert_int_equal(flock(lock, LOCK_SH), 0);
	snprintf(dir, sizeof(dir), "%s/snaps/.tmp-%s", f->src_dir, name);
	assert_int_equal(mkdir(dir, 0755), 0);
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	assert_int_equal(flock(dfd, LOCK_EX), 0);
	b.data = calloc(1, SNAP_PROGRESS_HEADER_BYTES);
	b.cap = b.len = SNAP_PROGRESS_HEADER_BYTES;
	snap_progress_header_encode(b.data);
	fake_sum = 0;
	write_fn(&b);
	snprintf(path, sizeof(path), "%s/progress", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_int_equal(write(fd, b.data, b.len), (ssize_t)b.len);
	close(fd);
	snap_buf_free(&b);
	s = (struct sender){ .follow = name, .watch = &watch };
	rc = migrate_streams(f, &token, 0, 0, &s, err, cap);
	snprintf(err, cap, "%s", s.error);
	unlink(path);
	rmdir(dir);
	close(dfd);
	close(lock);
	assert_false(store_has(f->dst, name));
	/* For the next case's first round. */
	snap_store_rm(f->dst, "r0", NULL);
	return s.rc ? s.rc : rc;
}

static void test_round_log_refused(void **state)
{
	static const struct {
		const char *name;
		void (*write_fn)(struct snap_buf *b);
		int rc;
		const char *says;
	} cases[] = {
		{ "r9", log_truncated, -EBADMSG, "ends before its COMMIT" },
		{ "r9", log_flipped, -EBADMSG, "damaged" },
		{ "r9", log_chunk_first, -EBADMSG, "before its BEGIN" },
		{ "r9", log_region_late, -EBADMSG, "region after a chunk" },
		{ "r9", log_chunk_twice, -EBADMSG, "or one twice" },
		{ "r9", log_chunk_outside, -EBADMSG, "outside the snapshot" },
		{ "r9", log_commit_short, -EBADMSG, "counts other records" },
		{ "r9", log_after_commit, -EBADMSG, "follows its COMMIT" },
		{ "r9", log_other_name, -EBADMSG, "names another snapshot" },
		{ "r9", log_bad_header, -EBADMSG, "header" },
		{ "r9", log_pack_missing, -ENOENT, "pack" },
		{ "r1", log_disagrees, -EBADMSG, "differs from its progress log" },
	};
	struct fixture *f = *state;
	char err[2048];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = hostile_log(f, cases[i].name, cases[i].write_fn, err, sizeof(err));

		if (rc != cases[i].rc || !strstr(err, cases[i].says))
			fail_msg("case %zu: rc %d, '%s'", i, rc, err);
	}
}

/* ---- journal deltas ---- */

#define JOURNAL_LEN (64u << 10)

/* A journal file of @len bytes at @path. */
static int journal_file(const char *dir, const char *tag, const uint8_t *p, size_t len)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/journal-%s", dir, tag);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, len), (ssize_t)len);
	return fd;
}

/* @name's journal in @store, read back whole (malloc'ed, *len). */
static uint8_t *journal_of(struct snap_store *store, const char *name, size_t *len)
{
	struct snap_reader *r;
	int fd = memfd_create("journal", 0);
	uint8_t *p;

	assert_int_equal(snap_reader_open(store, name, &r), 0);
	assert_int_equal(snap_reader_journal_write(r, fd), 0);
	snap_reader_close(r);
	*len = (size_t)lseek(fd, 0, SEEK_END);
	p = malloc(*len + 1);
	assert_int_equal(pread(fd, p, *len, 0), (ssize_t)*len);
	close(fd);
	return p;
}

/* The second round's journal, an LMDB copy with one page put in and a
 * few bytes changed, crosses as the page and the change: the rest is
 * copied from the first round's at the destination, which rebuilds it. */
static void test_journal_delta(void **state)
{
	struct fixture *f = *state;
	uint8_t *j0 = test_data_make(DATA_RANDOM, JOURNAL_LEN, 7), *j1 = malloc(JOURNAL_LEN + 4096), *got;
	struct sender s = { .names = { "d0", "d1" } };
	char err[2048];
	size_t len;
	int fd;

	memcpy(j1, j0, 16384);
	memset(j1 + 16384, 0xab, 4096);             /* a page put in: the pages after it move */
	memcpy(j1 + 20480, j0 + 16384, JOURNAL_LEN - 16384);
	j1[JOURNAL_LEN + 4096 - 100] ^= 0xff;         /* in the last page */
	fd = journal_file(f->src_dir, "d0", j0, JOURNAL_LEN);
	assert_int_equal(test_snapshot_write(f->src, "d0", NULL, f->r, 1, fd, NULL), 0);
	close(fd);
	fd = journal_file(f->src_dir, "d1", j1, JOURNAL_LEN + 4096);
	assert_int_equal(test_snapshot_write(f->src, "d1", "d0", f->r, 1, fd, NULL), 0);
	close(fd);
	assert_int_equal(migrate(f, &token, 0, &s, err, sizeof(err)), 0);
	assert_int_equal(s.rc, 0);
	/* The first round's journal goes whole; the second's as two pages. */
	assert_int_equal(s.st[0].journal_bytes, JOURNAL_LEN);
	assert_int_equal(s.st[0].journal_reused_bytes, 0);
	assert_int_equal(s.st[1].journal_bytes, 2 * 4096);
	assert_int_equal(s.st[1].journal_reused_bytes, JOURNAL_LEN - 4096);
	got = journal_of(f->dst, "d1", &len);
	assert_int_equal(len, JOURNAL_LEN + 4096);
	assert_memory_equal(got, j1, len);
	assert_int_equal(snap_store_verify(f->dst, "d1", NULL), 0);
	free(got);
	free(j0);
	free(j1);
}

/* Hostile journal deltas, in a round on r1 (which the destination holds):
 * the frames are summed as the receiver sums them, so that END matches
 * and the journal's own checks are what refuse. */
static struct sha256 delta_sum;
static struct snap_manifest delta_base;      /* r1's at the destination */
static const char *delta_parent = "r1";

static void summed_put(int fd, uint16_t type, const void *p, uint32_t len)
{
	uint8_t h[SNAP_MIGRATE_HEADER_BYTES];

	le32_put(h, SNAP_MIGRATE_MAGIC);
	le16_put(h + 4, SNAP_MIGRATE_VERSION);
	le16_put(h + 6, type);
	le32_put(h + 8, len);
	sha256_update(&delta_sum, h, sizeof(h));
	sha256_update(&delta_sum, p, len);
	frame_put(fd, type, p, len);
}

/* BEGIN of "evil" on delta_parent, its region and a zero chunk. */
static void delta_round_start(int fd)
{
	uint8_t b[256], *p = b, reg[20];

	sha256_init(&delta_sum);
	memset(b, 0, sizeof(b));
	le32_put(p + 4, TEST_CHUNK);
	le32_put(p + 8, 1);
	p += 24 + SNAP_CREDENTIAL_BYTES + 16;
	le32_put(p, 4);
	memcpy(p + 4, "evil", 4);
	p += 8;
	le32_put(p, (uint32_t)strlen(delta_parent));
	memcpy(p + 4, delta_parent, strlen(delta_parent));
	p += 4 + strlen(delta_parent);
	le32_put(p, 0);
	summed_put(fd, SNAP_MIGRATE_BEGIN, b, (uint32_t)(p + 4 - b));
	le64_put(reg, ADDR);
	le64_put(reg + 8, TEST_CHUNK);
	le32_put(reg + 16, 0);
	summed_put(fd, SNAP_MIGRATE_REGION, reg, sizeof(reg));
	summed_put(fd, SNAP_MIGRATE_CHUNK, b, chunk_make(b, SNAP_MIGRATE_CHUNK_ZERO, 0, 0));
}

static void delta_end(int fd)
{
	uint8_t end[SHA256_BYTES];

	sha256_final(&delta_sum, end);
	frame_put(fd, SNAP_MIGRATE_END, end, sizeof(end));
}

/* JOURNAL_BASE naming r1's journal (@flip: one bit of its hash wrong),
 * for a journal of @bytes bytes whose hash is @hash. */
static void base_put(int fd, bool flip, uint64_t bytes, const uint8_t hash[SNAP_HASH_BYTES])
{
	uint8_t b[2 * (SNAP_HASH_BYTES + 8)];

	memcpy(b, delta_base.journal_hash, SNAP_HASH_BYTES);
	b[0] ^= flip;
	le64_put(b + SNAP_HASH_BYTES, delta_base.journal_bytes - SNAP_JOURNAL_HEADER_BYTES);
	memcpy(b + SNAP_HASH_BYTES + 8, hash, SNAP_HASH_BYTES);
	le64_put(b + 2 * SNAP_HASH_BYTES + 8, bytes);
	summed_put(fd, SNAP_MIGRATE_JOURNAL_BASE, b, sizeof(b));
}

static void copy_put(int fd, uint64_t offset, uint64_t len)
{
	uint8_t b[16];

	le64_put(b, offset);
	le64_put(b + 8, len);
	summed_put(fd, SNAP_MIGRATE_JOURNAL_COPY, b, sizeof(b));
}

static uint64_t base_len(void)
{
	return delta_base.journal_bytes - SNAP_JOURNAL_HEADER_BYTES;
}

/* The base copied whole: the journal is r1's, whose hash it is. */
static void delta_whole(int fd)
{
	delta_round_start(fd);
	base_put(fd, false, base_len(), delta_base.journal_hash);
	copy_put(fd, 0, base_len());
	delta_end(fd);
}

static void delta_wrong_base(int fd)
{
	delta_round_start(fd);
	base_put(fd, true, base_len(), delta_base.journal_hash);
	copy_put(fd, 0, base_len());
	delta_end(fd);
}

static void delta_copy_past_end(int fd)
{
	delta_round_start(fd);
	base_put(fd, false, base_len() + 1, delta_base.journal_hash);
	copy_put(fd, 1, base_len());
	delta_end(fd);
}

static void delta_copy_wraps(int fd)
{
	delta_round_start(fd);
	base_put(fd, false, base_len(), delta_base.journal_hash);
	copy_put(fd, ~0ull - 2, 8);
	delta_end(fd);
}

static void delta_copy_without_base(int fd)
{
	delta_round_start(fd);
	copy_put(fd, 0, base_len());
	delta_end(fd);
}

static void delta_short(int fd)
{
	delta_round_start(fd);
	base_put(fd, false, base_len(), delta_base.journal_hash);
	copy_put(fd, 0, base_len() - 1);
	delta_end(fd);
}

static void delta_longer(int fd)
{
	delta_round_start(fd);
	base_put(fd, false, base_len() - 1, delta_base.journal_hash);
	copy_put(fd, 0, base_len());
	delta_end(fd);
}

/* The right length, other bytes: the last one literal and wrong. */
static void delta_other_bytes(int fd)
{
	uint8_t x = 0x5a;

	delta_round_start(fd);
	base_put(fd, false, base_len(), delta_base.journal_hash);
	copy_put(fd, 0, base_len() - 1);
	summed_put(fd, SNAP_MIGRATE_JOURNAL, &x, 1);
	delta_end(fd);
}

static void delta_base_late(int fd)
{
	uint8_t x = 1;

	delta_round_start(fd);
	summed_put(fd, SNAP_MIGRATE_JOURNAL, &x, 1);
	base_put(fd, false, base_len(), delta_base.journal_hash);
	delta_end(fd);
}

static void delta_base_twice(int fd)
{
	delta_round_start(fd);
	base_put(fd, false, base_len(), delta_base.journal_hash);
	base_put(fd, false, base_len(), delta_base.journal_hash);
	delta_end(fd);
}

static void delta_base_short(int fd)
{
	uint8_t b[SNAP_HASH_BYTES + 8] = { 0 };

	delta_round_start(fd);
	summed_put(fd, SNAP_MIGRATE_JOURNAL_BASE, b, sizeof(b));
	delta_end(fd);
}

static void delta_base_huge(int fd)
{
	delta_round_start(fd);
	base_put(fd, false, SNAP_MIGRATE_JOURNAL_MAX + 1, delta_base.journal_hash);
	delta_end(fd);
}

static void test_journal_delta_hostile(void **state)
{
	static const struct {
		void (*write_fn)(int fd);
		const char *parent;
		int rc;
		const char *says;
	} cases[] = {
		{ delta_wrong_base, "r1", -EBADMSG, "another base" },
		{ delta_copy_past_end, "r1", -EBADMSG, "past the end" },
		{ delta_copy_wraps, "r1", -EBADMSG, "malformed JOURNAL_COPY" },
		{ delta_copy_without_base, "r1", -EPROTO, "without its base" },
		{ delta_short, "r1", -EBADMSG, "rebuilds" },
		{ delta_longer, "r1", -EBADMSG, "longer than its journal" },
		{ delta_other_bytes, "r1", -EBADMSG, "does not rebuild" },
		{ delta_base_late, "r1", -EPROTO, "after the journal began" },
		{ delta_base_twice, "r1", -EPROTO, "after the journal began" },
		{ delta_base_short, "r1", -EBADMSG, "malformed JOURNAL_BASE" },
		{ delta_base_huge, "r1", -EBADMSG, "malformed JOURNAL_BASE" },
		{ delta_whole, "", -EPROTO, "without a parent" },
	};
	struct fixture *f = *state;
	struct sender s = { 0 };
	struct snap_manifest m;
	char err[2048];

	assert_int_equal(migrate(f, &token, 0, &s, err, sizeof(err)), 0);
	assert_int_equal(snap_store_manifest_get(f->dst, "r1", &delta_base), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc;

		delta_parent = cases[i].parent;
		rc = hostile_round(f, cases[i].write_fn);
		if (rc != cases[i].rc || !strstr(hostile_error, cases[i].says))
			fail_msg("case %zu: rc %d, '%s'", i, rc, hostile_error);
		assert_int_not_equal(snap_store_manifest_get(f->dst, "evil", &m), 0);
	}
	/* The same frames, right, make a snapshot: the cases above fail for
	 * their reason. */
	delta_parent = "r1";
	assert_int_equal(hostile_round(f, delta_whole), 0);
	assert_int_equal(snap_store_manifest_get(f->dst, "evil", &m), 0);
	assert_memory_equal(m.journal_hash, delta_base.journal_hash, SNAP_HASH_BYTES);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rounds_arrive, setup, teardown),
		cmocka_unit_test_setup_teardown(test_parallel_streams, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_token, setup, teardown),
		cmocka_unit_test_setup_teardown(test_quota, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_rounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_compressed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_joined, setup, teardown),
		cmocka_unit_test(test_decoders_refuse),
		cmocka_unit_test_setup_teardown(test_round_followed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_round_writer_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_round_log_damaged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_round_log_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_journal_delta, setup, teardown),
		cmocka_unit_test_setup_teardown(test_journal_delta_hostile, setup, teardown),
	};

	/* A stream the other end closed fails its send, as in ternd and ckpt. */
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
