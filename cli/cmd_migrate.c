/* ckpt migrate: a live migration of one session to another ternd
 * (docs/migration.md); and ckpt push, which sends one stored snapshot over
 * the same stream into another ternd's store.
 *
 * ckpt drives it: each pre-copy round is an incremental snapshot of the
 * session on the source ternd (the GPU hashes every chunk; the guest is
 * paused only for the copy), which ckpt streams to the destination's
 * --migrate-listen while the source writes it (following the writer's
 * progress log), changed chunks only.  Once a round's
 * dirty bytes would take less than --max-downtime at the rate measured, the
 * session is suspended (the last snapshot, at a call boundary, while the
 * guest is held), that last delta is sent, and only once the destination
 * acknowledged that it planned the restore is the source told the session
 * moved (the op `migrated`): its guest's next hello is sent there.  Any
 * failure before that leaves the session on the source: running, or resumed
 * there when it was already suspended.
 */
#include "ckpt.h"

#include "auth.h"
#include "snap_migrate.h"
#include "snap_store.h"
#include "tls.h"
#include "transport.h"
#include "wire.h"
#include "units.h"
#include "vm_id.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MIGRATE_DOWNTIME_DEFAULT_MS 100
#define MIGRATE_ROUNDS_DEFAULT 8
#define MIGRATE_ROUNDS_MAX 64
#define MIGRATE_TIMEOUT_S 600
/* The destination's silence that ends the migration (it stays here). */
#define MIGRATE_IO_TIMEOUT_S 30
#define MIGRATE_TLS_HANDSHAKE_S 10
/* Streams that carry a session's chunks unless --streams says (one core's
 * copying held one stream to about 1.7 GB/s on the H200's host). */
#define MIGRATE_STREAMS_DEFAULT 4

static volatile sig_atomic_t cancelled;

static void on_cancel(int sig)
{
	(void)sig;
	cancelled = 1;
}

/* Tests of failures at a given point (tests/cuda/migrate-e2e): with
 * TERN_MIGRATE_TEST_HOLD=POINT:FILE, ckpt creates FILE at POINT ("precopy":
 * after the first round was acknowledged; "final": after the suspend,
 * before the last round) and goes on once the test removed it (at most
 * 30 s), so that the test can kill or cut something there. */
static void test_hold(const char *point)
{
	const char *hold = getenv("TERN_MIGRATE_TEST_HOLD");
	size_t n = strlen(point);
	int fd;

	if (!hold || strncmp(hold, point, n) || hold[n] != ':')
		return;
	fd = open(hold + n + 1, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	close(fd);
	for (int i = 0; i < 3000 && !access(hold + n + 1, F_OK); i++)
		usleep(10000);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

struct migrate_round {
	char snapshot[SNAP_NAME_MAX + 1];
	double pause_ms;          /* the guest's pause for the snapshot */
	double hash_ms;           /* GPU time hashing */
	double send_ms;
	uint64_t dirty_bytes;     /* bytes of the chunks sent */
	uint64_t dirty_sent_bytes; /* what the stream carried of them (compressed) */
	uint64_t stream_bytes;
	uint64_t chunks_before_commit; /* chunks that went while the source still wrote the round */
	uint64_t journal_bytes;   /* of the journal, what the stream carried */
	uint64_t journal_reused_bytes; /* ... and what the destination copied from the previous round's */
	double rate;              /* bytes/s of the stream */
	double expected_downtime_ms;
};

/* A stream added to the first (parallel streams). */
struct migrate_extra {
	int fd;
	struct snap_migrate_conn conn;
	bool conn_open;
};

struct migration {
	struct ckpt *c;
	const char *session;
	struct auth_token token;
	struct snap_migrate_conn conn;
	bool conn_open;
	int fd;
	struct snap_migrate_cap cap;  /* --max-bandwidth, over every stream */
	unsigned streams;             /* wanted, the first included */
	struct migrate_extra extra[SNAP_MIGRATE_STREAMS_MAX - 1];
	unsigned extra_count;
	struct tls_creds *tls_creds;  /* --to tls:// */
	struct tls_conn *tls;
	uint8_t nonce[AUTH_NONCE_BYTES];
	struct snap_store *store;
	struct migrate_round rounds[MIGRATE_ROUNDS_MAX + 1];
	unsigned nrounds;
	bool suspended;           /* the source holds the session suspended */
	double start_ms;
	double suspend_ms;        /* when the stop-and-copy began */
	double switch_ms;         /* when the source let go */
	char guest_url[WIRE_MOVED_URL_MAX + 1];
	char pid_file[4200];
};

/* STATE/migrate-SESSION.pid: how `--cancel` finds the migration. */
static void pid_file_path(struct ckpt *c, const char *session, char *out, size_t cap)
{
	snprintf(out, cap, "%s/migrate-%s.pid", c->state_dir, session);
}

static int cancel_migration(struct ckpt *c, const char *session)
{
	char path[4200], buf[32] = "";
	long pid;
	int fd;
	ssize_t n;

	pid_file_path(c, session, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ckpt_fail(c, CKPT_EXIT_FAILED, "no migration of session %s is under way (%s: %s)", session,
				 path, strerror(errno));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	pid = n > 0 ? strtol(buf, NULL, 10) : 0;
	if (pid <= 0 || kill((pid_t)pid, SIGTERM))
		return ckpt_fail(c, CKPT_EXIT_FAILED, "the migration of session %s (pid %ld) is gone", session, pid);
	if (!c->json)
		printf("migration of session %s (ckpt pid %ld) cancelled: the session stays on the source\n",
		       session, pid);
	return CKPT_EXIT_OK;
}

static int token_load(struct migration *m)
{
	const char *path = m->c->migrate.token_file ? m->c->migrate.token_file : getenv("TERN_TOKEN_FILE");
	char err[512];

	if (!path || !*path)
		return ckpt_fail(m->c, CKPT_EXIT_USAGE, "%s needs the destination's token: --token-file FILE "
				 "or TERN_TOKEN_FILE", m->c->cmd->name);
	if (auth_token_file_read(path, &m->token, err, sizeof(err)))
		return ckpt_fail(m->c, CKPT_EXIT_USAGE, "%s", err);
	return 0;
}

/* A connection to the destination, with the idle timeouts. */
static int stream_connect(struct migration *m, const struct transport_url *url)
{
	struct timeval idle = { .tv_sec = MIGRATE_IO_TIMEOUT_S };
	int fd = transport_connect(url);

	if (fd < 0)
		return ckpt_fail(m->c, CKPT_EXIT_FAILED, "cannot reach the destination %s: %s", m->c->migrate.to,
				 strerror(-fd)), fd;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof(idle));
	return fd;
}

/* The streams after the first: each connected and authenticated as the
 * first, then joined to it on the destination. */
static int streams_join(struct migration *m, const struct transport_url *url)
{
	struct snap_migrate_conn *joined[SNAP_MIGRATE_STREAMS_MAX - 1];
	uint8_t key[SNAP_MIGRATE_STREAM_KEY_BYTES], nonce[AUTH_NONCE_BYTES];
	unsigned count = m->streams - 1;
	int rc;

	if (auth_random(key, sizeof(key)))
		return ckpt_fail(m->c, CKPT_EXIT_FAILED, "no random bytes");
	rc = snap_migrate_streams_offer(&m->conn, count, key);
	for (unsigned i = 0; !rc && i < count; i++) {
		struct migrate_extra *x = &m->extra[i];

		x->fd = stream_connect(m, url);
		if (x->fd < 0)
			return CKPT_EXIT_FAILED;
		m->extra_count++;
		if (snap_migrate_conn_init(&x->conn, x->fd))
			return ckpt_fail(m->c, CKPT_EXIT_FAILED, "out of memory");
		x->conn_open = true;
		x->conn.cap = &m->cap;
		rc = snap_migrate_client_auth(&x->conn, &m->token, m->session, nonce);
		if (!rc)
			rc = snap_migrate_join(&x->conn, key);
		if (rc)
			return ckpt_fail(m->c, CKPT_EXIT_FAILED, "destination %s, stream %u: %s", m->c->migrate.to,
					 i + 1, x->conn.error);
		joined[i] = &x->conn;
	}
	if (!rc)
		rc = snap_migrate_streams_wait(&m->conn, joined, count);
	if (rc)
		return ckpt_fail(m->c, CKPT_EXIT_FAILED, "destination %s: %s", m->c->migrate.to, m->conn.error);
	return 0;
}

static int connect_destination(struct migration *m)
{
	struct transport_url url;
	char err[512];
	int rc;

	if (transport_url_parse(m->c->migrate.to, &url) ||
	    (url.kind != TRANSPORT_TCP && url.kind != TRANSPORT_TLS && url.kind != TRANSPORT_UNIX))
		return ckpt_fail(m->c, CKPT_EXIT_USAGE, "--to takes tcp://HOST:PORT, tls://HOST:PORT or unix:PATH: "
				 "'%s'", m->c->migrate.to);
	if (m->c->migrate.tls_ca && url.kind != TRANSPORT_TLS)
		return ckpt_fail(m->c, CKPT_EXIT_USAGE, "--tls-ca goes with --to tls://HOST:PORT");
	if (url.kind == TRANSPORT_TLS &&
	    tls_client_creds_open(m->c->migrate.tls_ca, &m->tls_creds, err, sizeof(err)))
		return ckpt_fail(m->c, CKPT_EXIT_USAGE, "%s", err);
	m->fd = stream_connect(m, &url);
	if (m->fd < 0)
		return CKPT_EXIT_FAILED;
	/* The certificate is checked before the token's proof is sent. */
	if (m->tls_creds) {
		rc = tls_conn_start(m->tls_creds, m->fd, url.host, MIGRATE_TLS_HANDSHAKE_S, &m->tls, err, sizeof(err));
		if (rc)
			return ckpt_fail(m->c, CKPT_EXIT_FAILED, "destination %s: %s%s", m->c->migrate.to, err,
					 rc == -EPROTO ? " (is its --migrate-listen tls://?)" : "");
	}
	if (snap_migrate_conn_init(&m->conn, m->fd))
		return ckpt_fail(m->c, CKPT_EXIT_FAILED, "out of memory");
	m->conn_open = true;
	m->conn.tls = m->tls;
	m->conn.cap = &m->cap;
	rc = snap_migrate_client_auth(&m->conn, &m->token, m->session, m->nonce);
	if (rc)
		return ckpt_fail(m->c, CKPT_EXIT_FAILED, "destination %s: %s", m->c->migrate.to, m->conn.error);
	/* A joined stream's TLS session would stay in the destination's
	 * process that took it: parallel streams are plain. */
	if (m->streams > 1 && url.kind != TRANSPORT_TLS)
		return streams_join(m, &url);
	return 0;
}

/* One snapshot on the source: a pre-copy round's, or the suspend's. */
static int source_snapshot(struct migration *m, bool suspend, const char *name, struct migrate_round *r)
{
	struct control_request req = { .op = suspend ? CONTROL_OP_SUSPEND : CONTROL_OP_SNAPSHOT,
				       .incremental = m->nrounds > 0 || (suspend && !m->c->migrate.offline),
				       .device = -1 };
	struct control_reply a;
	int rc;

	snprintf(req.session, sizeof(req.session), "%s", m->session);
	if (name)
		snprintf(req.snapshot, sizeof(req.snapshot), "%s", name);
	m->c->quiet = true;
	rc = ckpt_control(m->c, &req, MIGRATE_TIMEOUT_S, NULL, &a);
	m->c->quiet = false;
	if (rc < 0 || a.kind != CONTROL_REPLY_SNAPSHOT) {
		ckpt_control_fail(m->c, rc, &a);
		return -EIO;
	}
	snprintf(r->snapshot, sizeof(r->snapshot), "%s", a.snapshot.snapshot);
	r->pause_ms = a.snapshot.pause_ms;
	r->hash_ms = a.snapshot.hash_ms;
	control_reply_release(&a);
	if (suspend)
		m->suspended = true;
	return 0;
}

/* What a round's stream did. */
static void round_account(struct migration *m, struct migrate_round *r, const struct snap_migrate_stats *st,
			  double t0)
{
	r->send_ms = now_ms() - t0;
	r->dirty_bytes = st->data_bytes;
	r->dirty_sent_bytes = st->data_sent_bytes;
	r->stream_bytes = st->stream_bytes;
	r->chunks_before_commit = st->chunks_before_commit;
	r->journal_bytes = st->journal_bytes;
	r->journal_reused_bytes = st->journal_reused_bytes;
	r->rate = r->send_ms > 0 ? (double)st->stream_bytes * 1e3 / r->send_ms : 0;
	m->nrounds++;
}

/* The previous round's snapshot: the parent of the next one. */
static const char *round_parent(const struct migration *m)
{
	return m->nrounds ? m->rounds[m->nrounds - 1].snapshot : NULL;
}

static int round_fail(struct migration *m, const char *name, int rc)
{
	ckpt_fail(m->c, CKPT_EXIT_FAILED, "round %u (%s): %s", m->nrounds, name,
		  cancelled ? "cancelled" : m->conn.error);
	return rc;
}

static int round_send(struct migration *m, struct migrate_round *r, uint32_t flags)
{
	const char *parent = round_parent(m);
	struct snap_migrate_stats st;
	char store_dir[4200];
	double t0 = now_ms();
	int rc;

	if (cancelled)
		return ckpt_fail(m->c, CKPT_EXIT_FAILED, "cancelled"), -ECANCELED;
	/* The source's store exists once it holds a snapshot: opened after the first. */
	if (!m->store && ckpt_store_open(m->c, &m->store, store_dir, sizeof(store_dir)))
		return -EIO;
	rc = snap_migrate_snapshot_send(&m->conn, m->store, r->snapshot, parent, flags, &m->token, m->nonce, &st);
	if (rc)
		return round_fail(m, r->snapshot, rc);
	round_account(m, r, &st, t0);
	return 0;
}

/* A round's snapshot, taken on a thread of its own while the calling one
 * streams it from the writer's progress log (snap_migrate_snapshot_follow). */
struct round_writer {
	struct migration *m;
	struct migrate_round *r;
	const char *name;
	bool suspend;
	bool final_held;           /* test_hold("final") came */
	pthread_t thread;
	pthread_mutex_t mu;        /* guards state */
	int state;                 /* 0 writing, 1 committed, -EIO failed (said) */
};

static void *round_writer_run(void *arg)
{
	struct round_writer *rw = arg;
	int rc = source_snapshot(rw->m, rw->suspend, rw->name, rw->r);

	pthread_mutex_lock(&rw->mu);
	rw->state = rc ? rc : 1;
	pthread_mutex_unlock(&rw->mu);
	return NULL;
}

static int round_writer_state(void *arg, uint64_t sent)
{
	struct round_writer *rw = arg;
	int state;

	(void)sent;
	pthread_mutex_lock(&rw->mu);
	state = rw->state;
	pthread_mutex_unlock(&rw->mu);
	/* The suspend is durable; its round not yet acknowledged. */
	if (state > 0 && rw->suspend && !rw->final_held) {
		rw->final_held = true;
		test_hold("final");
	}
	return state;
}

/* Snapshot round @name on the source (@suspend: the stop and copy's) and
 * stream it while it is written.  0, or -EIO (said). */
static int round_take(struct migration *m, struct migrate_round *r, const char *name, bool suspend)
{
	struct round_writer rw = { .m = m, .r = r, .name = name, .suspend = suspend };
	const char *parent = round_parent(m);
	struct snap_migrate_writer_watch watch = { .state = round_writer_state, .arg = &rw };
	struct snap_migrate_stats st;
	char store_dir[4200];
	double t0 = now_ms();
	int rc;

	if (cancelled)
		return ckpt_fail(m->c, CKPT_EXIT_FAILED, "cancelled"), -ECANCELED;
	ckpt_store_path(m->c, store_dir, sizeof(store_dir));
	pthread_mutex_init(&rw.mu, NULL);
	if (pthread_create(&rw.thread, NULL, round_writer_run, &rw)) {
		pthread_mutex_destroy(&rw.mu);
		return ckpt_fail(m->c, CKPT_EXIT_FAILED, "cannot start a thread"), -EAGAIN;
	}
	rc = snap_migrate_snapshot_follow(&m->conn, store_dir, name, parent, suspend ? SNAP_MIGRATE_FINAL : 0,
					  &m->token, m->nonce, &watch, &st);
	/* A round that failed on the stream waits for its snapshot, which
	 * stays in the store as any round's. */
	pthread_join(rw.thread, NULL);
	pthread_mutex_destroy(&rw.mu);
	if (rw.state < 0)
		return -EIO;
	if (rc)
		return round_fail(m, name, rc);
	if (!m->store && ckpt_store_open(m->c, &m->store, store_dir, sizeof(store_dir)))
		return -EIO;
	round_account(m, r, &st, t0);
	return 0;
}

/* Remove pre-copy round @name from the source's store (and the chunks only
 * it held): a migration at a high dirty rate would otherwise keep a copy of
 * the session per round. Best effort: a store in use is left as it is. */
static void round_prune(struct migration *m, const char *name)
{
	int rc = m->store ? snap_store_rm(m->store, name, NULL) : -ENOENT;

	if (rc && rc != -EBUSY && !m->c->json)
		fprintf(stderr, "migrate %s: round %s stays in the store: %s\n", m->session, name, strerror(-rc));
}

static void progress_print(struct migration *m, const struct migrate_round *r, bool final)
{
	char dirty[32], rate[32];

	if (m->c->json)
		return;
	ckpt_size_format(r->dirty_bytes, dirty, sizeof(dirty));
	ckpt_size_format((uint64_t)r->rate, rate, sizeof(rate));
	fprintf(stderr, "migrate %s: round %u%s: dirty %s, rate %s/s, expected downtime %.1f ms\n", m->session,
		m->nrounds - 1, final ? " (stop and copy)" : "", dirty, rate, r->expected_downtime_ms);
}

/* Leave the session as it was: resumed here when the migration suspended it. */
static void undo(struct migration *m)
{
	struct control_request req = { .op = CONTROL_OP_RESUME, .device = -1 };
	struct control_reply a;
	int rc;

	if (!m->suspended)
		return;
	snprintf(req.session, sizeof(req.session), "%s", m->session);
	m->c->quiet = true;
	rc = ckpt_control(m->c, &req, MIGRATE_TIMEOUT_S, NULL, &a);
	m->c->quiet = false;
	if (rc < 0 || a.kind == CONTROL_REPLY_ERROR)
		fprintf(stderr, "ckpt migrate: the session %s could not be resumed on the source: %s; "
			"`ckpt resume %s` tries again\n", m->session, rc < 0 ? strerror(-rc) : a.error, m->session);
	else
		fprintf(stderr, "ckpt migrate: session %s resumed on the source\n", m->session);
	if (rc >= 0)
		control_reply_release(&a);
}

static int switch_over(struct migration *m)
{
	struct control_request req = { .op = CONTROL_OP_MIGRATED, .device = -1 };
	struct control_reply a;
	int rc;

	snprintf(req.session, sizeof(req.session), "%s", m->session);
	snprintf(req.url, sizeof(req.url), "%s", m->guest_url);
	m->c->quiet = true;
	rc = ckpt_control(m->c, &req, MIGRATE_TIMEOUT_S, NULL, &a);
	m->c->quiet = false;
	if (rc < 0 || a.kind != CONTROL_REPLY_MIGRATED)
		return ckpt_control_fail(m->c, rc, &a), -EIO;
	control_reply_release(&a);
	return 0;
}

static void report(struct migration *m)
{
	double hash_ms = 0;
	uint64_t bytes = 0;

	for (unsigned i = 0; i < m->nrounds; i++) {
		hash_ms += m->rounds[i].hash_ms;
		bytes += m->rounds[i].stream_bytes;
	}
	if (m->c->json) {
		struct json_writer w;

		ckpt_json_begin(m->c, &w);
		json_bool_put(&w, "ok", true);
		json_string_put(&w, "session", m->session);
		json_string_put(&w, "to", m->c->migrate.to);
		json_string_put(&w, "guest_url", m->guest_url);
		json_double_put(&w, "downtime_ms", m->switch_ms - m->suspend_ms);
		json_double_put(&w, "total_ms", m->switch_ms - m->start_ms);
		json_double_put(&w, "hash_ms", hash_ms);
		json_u64_put(&w, "bytes", bytes);
		json_u64_put(&w, "rounds", m->nrounds);
		json_array_begin(&w, "per_round");
		for (unsigned i = 0; i < m->nrounds; i++) {
			json_object_begin(&w, NULL);
			json_string_put(&w, "snapshot", m->rounds[i].snapshot);
			json_u64_put(&w, "bytes", m->rounds[i].stream_bytes);
			json_u64_put(&w, "dirty_bytes", m->rounds[i].dirty_bytes);
			json_u64_put(&w, "dirty_sent_bytes", m->rounds[i].dirty_sent_bytes);
			json_u64_put(&w, "chunks_before_commit", m->rounds[i].chunks_before_commit);
			json_u64_put(&w, "journal_bytes", m->rounds[i].journal_bytes);
			json_u64_put(&w, "journal_reused_bytes", m->rounds[i].journal_reused_bytes);
			json_double_put(&w, "rate", m->rounds[i].rate);
			json_double_put(&w, "pause_ms", m->rounds[i].pause_ms);
			json_double_put(&w, "hash_ms", m->rounds[i].hash_ms);
			json_double_put(&w, "send_ms", m->rounds[i].send_ms);
			json_object_end(&w);
		}
		json_array_end(&w);
		ckpt_json_end(m->c, &w);
		return;
	}
	{
		char total[32];

		ckpt_size_format(bytes, total, sizeof(total));
		printf("session %s migrated to %s (guest reconnects to %s)\n", m->session, m->c->migrate.to,
		       m->guest_url);
		printf("  downtime %.1f ms (suspend to switch), total %.1f ms, %s in %u rounds, GPU hashing %.1f ms\n",
		       m->switch_ms - m->suspend_ms, m->switch_ms - m->start_ms, total, m->nrounds, hash_ms);
		for (unsigned i = 0; i < m->nrounds; i++) {
			char b[32];

			ckpt_size_format(m->rounds[i].stream_bytes, b, sizeof(b));
			printf("  round %u: %s, %s\n", i, m->rounds[i].snapshot, b);
		}
	}
}

static int migrate_run(struct migration *m)
{
	uint32_t max_rounds = m->c->migrate.max_rounds ? m->c->migrate.max_rounds : MIGRATE_ROUNDS_DEFAULT;
	double max_downtime = m->c->migrate.max_downtime_ms ? m->c->migrate.max_downtime_ms
							     : MIGRATE_DOWNTIME_DEFAULT_MS;
	char name[SNAP_NAME_MAX + 1];
	struct migrate_round *r;
	uint64_t stamp = (uint64_t)time(NULL);
	int rc;

	if (max_rounds > MIGRATE_ROUNDS_MAX)
		max_rounds = MIGRATE_ROUNDS_MAX;
	rc = connect_destination(m);
	if (rc)
		return rc;
	/* Pre-copy: while the guest runs. */
	while (!m->c->migrate.offline && m->nrounds < max_rounds) {
		r = &m->rounds[m->nrounds];
		snprintf(name, sizeof(name), "migrate-%llu-%d-%u", (unsigned long long)stamp, (int)getpid(),
			 m->nrounds);
		if (round_take(m, r, name, false))
			return CKPT_EXIT_FAILED;
		/* This round's changes approximate the next one's, as the stream carries them. */
		r->expected_downtime_ms = r->rate > 0 ? (double)r->dirty_sent_bytes * 1e3 / r->rate : 0;
		progress_print(m, r, false);
		if (m->nrounds == 1)
			test_hold("precopy");
		/* The source's copy of the round before is of no more use: its
		 * chunks that are still live belong to this one. */
		if (m->nrounds > 1)
			round_prune(m, m->rounds[m->nrounds - 2].snapshot);
		if (m->nrounds > 1 && r->expected_downtime_ms <= max_downtime)
			break;
		/* A dirty set that shrank by less than a quarter will not meet
		 * the target by more rounds: stop and copy now. */
		if (m->nrounds > 2 && r->dirty_bytes * 4 > m->rounds[m->nrounds - 2].dirty_bytes * 3) {
			if (!m->c->json)
				fprintf(stderr, "migrate %s: the dirty set does not shrink: stop and copy\n",
					m->session);
			break;
		}
	}
	/* Stop and copy: the guest is held from here until it reconnects. */
	m->suspend_ms = now_ms();
	r = &m->rounds[m->nrounds];
	snprintf(name, sizeof(name), "migrate-%llu-%d-%u", (unsigned long long)stamp, (int)getpid(), m->nrounds);
	if (round_take(m, r, name, true))
		return CKPT_EXIT_FAILED;
	r->expected_downtime_ms = 0;
	progress_print(m, r, true);
	{
		const char *url = m->c->migrate.guest_url ? m->c->migrate.guest_url : m->conn.ack_message;

		if (strlen(url) >= sizeof(m->guest_url))
			return ckpt_fail(m->c, CKPT_EXIT_FAILED, "the guest's URL is over %zu bytes: '%.60s...'",
					 sizeof(m->guest_url) - 1, url);
		memcpy(m->guest_url, url, strlen(url) + 1);
	}
	if (!m->guest_url[0])
		return ckpt_fail(m->c, CKPT_EXIT_FAILED, "the destination names no guest listener: pass --guest-url");
	if (cancelled)
		return ckpt_fail(m->c, CKPT_EXIT_FAILED, "cancelled");
	if (switch_over(m))
		return CKPT_EXIT_FAILED;
	m->suspended = false;       /* the destination's now */
	m->switch_ms = now_ms();
	report(m);
	return CKPT_EXIT_OK;
}

/* One stream unless the caller asks for more; NULL (said) without memory. */
static struct migration *migration_new(struct ckpt *c, const char *session)
{
	struct migration *m = calloc(1, sizeof(*m));

	if (!m) {
		ckpt_fail(c, CKPT_EXIT_FAILED, "out of memory");
		return NULL;
	}
	m->c = c;
	m->session = session;
	m->fd = -1;
	m->streams = 1;
	snap_migrate_cap_init(&m->cap, c->migrate.max_bandwidth);
	return m;
}

static void migration_free(struct migration *m);

/* ---- migrate --domain UUID --switch-on-stdin: a libvirt domain's GPU
 * state, run by the source ternd when a `virsh migrate` destination asks
 * for it (docs/migration.md, "virsh migrate").  Every round snapshots all
 * the domain's sessions at one instant (vm-snapshot); each session has a
 * stream of its own to the destination.  The stop and copy waits for
 * libvirt's switchover, a line "switch GENERATION" on stdin: then vm-save
 * holds and suspends every session at a call boundary under that
 * generation, and the finals go.  stdin's end cancels. */

#define DOMAIN_STREAMS_MAX 64
/* Between rounds once the dirty set is small: the guest runs on. */
#define DOMAIN_IDLE_MS 500

struct domain_migration {
	struct ckpt *c;
	const char *uuid;
	struct migration *streams[DOMAIN_STREAMS_MAX];
	char ids[DOMAIN_STREAMS_MAX][SNAP_NAME_MAX + 1];
	unsigned count;
	unsigned rounds;
	uint64_t bytes;
	char generation[VM_GENERATION_MAX + 1];
	bool saved;                 /* vm-save suspended the sessions here */
	double start_ms, suspend_ms, end_ms;
};

static struct migration *domain_stream(struct domain_migration *dm, const char *session)
{
	struct migration *m;

	for (unsigned i = 0; i < dm->count; i++)
		if (!strcmp(dm->ids[i], session))
			return dm->streams[i];
	if (dm->count == DOMAIN_STREAMS_MAX || strlen(session) > SNAP_NAME_MAX) {
		ckpt_fail(dm->c, CKPT_EXIT_FAILED, "domain %s: more than %d sessions, or an id over %d bytes", dm->uuid,
			  DOMAIN_STREAMS_MAX, SNAP_NAME_MAX);
		return NULL;
	}
	memcpy(dm->ids[dm->count], session, strlen(session) + 1);
	m = migration_new(dm->c, dm->ids[dm->count]);
	if (!m)
		return NULL;
	dm->streams[dm->count++] = m;
	if (token_load(m) || connect_destination(m))
		return NULL;
	return m;
}

/* One round of every session: @suspend for the final (vm-save). */
static int domain_round(struct domain_migration *dm, bool suspend, uint64_t stamp)
{
	/* After the first round, each session's snapshot is on its previous
	 * round's, which the destination holds. */
	struct control_request req = { .op = suspend ? CONTROL_OP_VM_SAVE : CONTROL_OP_VM_SNAPSHOT, .device = -1,
				       .incremental = dm->rounds > 0 };
	struct control_reply a;
	uint64_t dirty = 0;
	uint32_t sessions;
	double t0 = now_ms(), sent_ms;
	int rc;

	if (suspend) {
		snprintf(req.uuid, sizeof(req.uuid), "%s", dm->uuid);
		snprintf(req.generation, sizeof(req.generation), "%s", dm->generation);
	} else {
		snprintf(req.domain, sizeof(req.domain), "%s", dm->uuid);
		snprintf(req.snapshot, sizeof(req.snapshot), "migrate-%llu-%d-%u", (unsigned long long)stamp,
			 (int)getpid(), dm->rounds);
	}
	dm->c->quiet = true;
	rc = ckpt_control(dm->c, &req, MIGRATE_TIMEOUT_S, NULL, &a);
	dm->c->quiet = false;
	if (rc < 0 || a.kind != CONTROL_REPLY_VM) {
		ckpt_control_fail(dm->c, rc, &a);
		return -EIO;
	}
	dm->saved = suspend;
	if (suspend)
		test_hold("final");
	sessions = a.vm.count;
	for (uint32_t i = 0; i < a.vm.count && !rc; i++) {
		struct migration *m = domain_stream(dm, a.vm.snapshots[i].session);
		struct migrate_round *r;

		if (!m) {
			rc = -EIO;
			break;
		}
		if (!suspend && m->nrounds >= MIGRATE_ROUNDS_MAX)
			continue;       /* the final's room stays */
		r = &m->rounds[m->nrounds];
		snprintf(r->snapshot, sizeof(r->snapshot), "%s", a.vm.snapshots[i].snapshot);
		rc = round_send(m, r, suspend ? SNAP_MIGRATE_FINAL : 0);
		if (!rc) {
			dirty += r->dirty_bytes;
			dm->bytes += r->stream_bytes;
		}
	}
	control_reply_release(&a);
	if (rc)
		return rc;
	sent_ms = now_ms() - t0;
	if (!dm->c->json) {
		char b[32];

		ckpt_size_format(dirty, b, sizeof(b));
		fprintf(stderr, "migrate domain %s: round %u%s: %u sessions, dirty %s, %.1f ms\n", dm->uuid, dm->rounds,
			suspend ? " (stop and copy)" : "", (unsigned)sessions, b, sent_ms);
	}
	dm->rounds++;
	return (int)(dirty > 0 ? 1 : 0);
}

/* Wait up to @ms for the switchover line: 1 and the generation, 0 none
 * yet, -ECANCELED at stdin's end or a cancel. */
static int switch_wait(struct domain_migration *dm, int ms)
{
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
	char line[VM_GENERATION_MAX + 16];
	ssize_t n;

	if (cancelled)
		return -ECANCELED;
	if (poll(&p, 1, ms) <= 0)
		return cancelled ? -ECANCELED : 0;
	n = read(STDIN_FILENO, line, sizeof(line) - 1);
	if (n <= 0)
		return -ECANCELED;
	line[n] = 0;
	line[strcspn(line, "\n")] = 0;
	if (strncmp(line, "switch ", 7) || !vm_generation_valid(line + 7))
		return ckpt_fail(dm->c, CKPT_EXIT_FAILED, "not a switchover line: '%.40s'", line), -EPROTO;
	memcpy(dm->generation, line + 7, strlen(line + 7) + 1);     /* checked: it fits */
	return 1;
}

/* The sessions vm-save suspended here plan their restore again: the guest
 * goes on here. */
static void domain_undo(struct domain_migration *dm)
{
	struct control_request req;
	struct control_reply a;
	int rc;

	if (!dm->saved)
		return;
	memset(&req, 0, sizeof(req));
	req.op = CONTROL_OP_VM_RESTORE;
	req.device = -1;
	snprintf(req.uuid, sizeof(req.uuid), "%s", dm->uuid);
	snprintf(req.generation, sizeof(req.generation), "%s", dm->generation);
	dm->c->quiet = true;
	rc = ckpt_control(dm->c, &req, MIGRATE_TIMEOUT_S, NULL, &a);
	dm->c->quiet = false;
	if (rc < 0 || a.kind == CONTROL_REPLY_ERROR)
		fprintf(stderr, "ckpt migrate: domain %s's sessions could not be planned back here: %s\n", dm->uuid,
			rc < 0 ? strerror(-rc) : a.error);
	else
		fprintf(stderr, "ckpt migrate: domain %s's sessions restore here at their next call\n", dm->uuid);
	if (rc >= 0)
		control_reply_release(&a);
}

static int domain_migrate_run(struct domain_migration *dm)
{
	uint64_t stamp = (uint64_t)time(NULL);
	int rc, dirty = 1;

	for (;;) {
		rc = switch_wait(dm, dirty ? 0 : DOMAIN_IDLE_MS);
		if (rc < 0)
			return rc == -ECANCELED ? ckpt_fail(dm->c, CKPT_EXIT_FAILED, "cancelled") : CKPT_EXIT_FAILED;
		if (rc)
			break;
		dirty = domain_round(dm, false, stamp);
		if (dirty < 0)
			return CKPT_EXIT_FAILED;
		if (dm->rounds == 1)
			test_hold("precopy");
	}
	dm->suspend_ms = now_ms();
	if (domain_round(dm, true, stamp) < 0)
		return CKPT_EXIT_FAILED;
	dm->end_ms = now_ms();
	if (dm->c->json) {
		struct json_writer w;

		ckpt_json_begin(dm->c, &w);
		json_bool_put(&w, "ok", true);
		json_string_put(&w, "domain", dm->uuid);
		json_string_put(&w, "to", dm->c->migrate.to);
		json_u64_put(&w, "sessions", dm->count);
		json_double_put(&w, "downtime_ms", dm->end_ms - dm->suspend_ms);
		json_double_put(&w, "total_ms", dm->end_ms - dm->start_ms);
		json_u64_put(&w, "bytes", dm->bytes);
		json_u64_put(&w, "rounds", dm->rounds);
		ckpt_json_end(dm->c, &w);
	} else {
		printf("domain %s: %u sessions sent to %s: stop and copy %.1f ms, total %.1f ms, %u rounds, %llu bytes\n",
		       dm->uuid, dm->count, dm->c->migrate.to, dm->end_ms - dm->suspend_ms, dm->end_ms - dm->start_ms,
		       dm->rounds, (unsigned long long)dm->bytes);
	}
	return CKPT_EXIT_OK;
}

static int migrate_domain(struct ckpt *c)
{
	struct sigaction sa = { .sa_handler = on_cancel };
	struct domain_migration *dm;
	int rc;

	if (!c->migrate.switch_on_stdin)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "migrate --domain is what ternd runs for `virsh migrate` "
				 "(with --switch-on-stdin); migrate the domain with virsh");
	if (c->nargs || !vm_uuid_valid(c->domain))
		return ckpt_fail(c, CKPT_EXIT_USAGE, "migrate --domain takes a domain uuid and no SESSION");
	if (c->migrate.offline || c->migrate.guest_url)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "--offline and --guest-url are for one session, not --domain");
	dm = calloc(1, sizeof(*dm));
	if (!dm)
		return ckpt_fail(c, CKPT_EXIT_FAILED, "out of memory");
	dm->c = c;
	dm->uuid = c->domain;
	dm->start_ms = now_ms();
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	rc = domain_migrate_run(dm);
	if (rc != CKPT_EXIT_OK)
		domain_undo(dm);
	for (unsigned i = 0; i < dm->count; i++)
		migration_free(dm->streams[i]);
	free(dm);
	return rc;
}

static void migration_free(struct migration *m)
{
	for (unsigned i = 0; i < m->extra_count; i++) {
		if (m->extra[i].conn_open)
			snap_migrate_conn_fini(&m->extra[i].conn);
		close(m->extra[i].fd);
	}
	if (m->conn_open)
		snap_migrate_conn_fini(&m->conn);
	tls_conn_close(m->tls);
	tls_creds_close(m->tls_creds);
	if (m->fd >= 0)
		close(m->fd);
	snap_store_close(m->store);
	snap_migrate_cap_fini(&m->cap);
	explicit_bzero(&m->token, sizeof(m->token));
	free(m);
}

int cmd_migrate(struct ckpt *c)
{
	struct sigaction sa = { .sa_handler = on_cancel };
	struct migration *m;
	int rc, fd;

	if (!c->migrate.to && !c->migrate.cancel)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "migrate takes --to URL (the destination's --migrate-listen)");
	if (c->domain)
		return migrate_domain(c);
	if (c->nargs != 1)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "migrate takes a SESSION, or --domain UUID");
	if (c->migrate.cancel)
		return cancel_migration(c, c->args[0]);
	if (c->migrate.switch_on_stdin)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "--switch-on-stdin goes with --domain");
	if (strlen(c->args[0]) > SNAP_NAME_MAX || !snap_name_valid(c->args[0]))
		return ckpt_fail(c, CKPT_EXIT_USAGE, "'%s' is not a session id migrate can move ([A-Za-z0-9._-])",
				 c->args[0]);
	m = migration_new(c, c->args[0]);
	if (!m)
		return CKPT_EXIT_FAILED;
	m->streams = c->migrate.streams ? c->migrate.streams : MIGRATE_STREAMS_DEFAULT;
	m->start_ms = now_ms();
	rc = token_load(m);
	if (rc)
		goto out;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	pid_file_path(c, m->session, m->pid_file, sizeof(m->pid_file));
	fd = open(m->pid_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0) {
		dprintf(fd, "%d\n", (int)getpid());
		close(fd);
	} else {
		m->pid_file[0] = 0;
	}
	rc = migrate_run(m);
	if (rc != CKPT_EXIT_OK)
		undo(m);
out:
	if (m->pid_file[0])
		unlink(m->pid_file);
	migration_free(m);
	return rc;
}

/* ckpt push SNAPSHOT --to URL: one round, not final, of the migration
 * stream, sent whole (no parent): the destination stores it under its name
 * and plans nothing; `ckpt restore SNAPSHOT` or `ckpt restore --process`
 * there takes it. */
int cmd_push(struct ckpt *c)
{
	struct migration *m;
	struct snap_manifest man;
	struct snap_migrate_stats st;
	char store_dir[4200], session[SNAP_NAME_MAX + 1];
	const char *name = c->args[0];
	double t0 = now_ms();
	int rc;

	if (!c->migrate.to)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "push takes --to URL (the destination's --migrate-listen)");
	if (strlen(name) > SNAP_NAME_MAX || !snap_name_valid(name))
		return ckpt_fail(c, CKPT_EXIT_USAGE, "'%s' is not a snapshot name (%s)", name, snap_name_problem(name));
	m = migration_new(c, NULL);
	if (!m)
		return CKPT_EXIT_FAILED;
	rc = token_load(m);
	if (rc)
		goto out;
	if (ckpt_store_open(c, &m->store, store_dir, sizeof(store_dir))) {
		rc = CKPT_EXIT_FAILED;
		goto out;
	}
	if (snap_store_manifest_get(m->store, name, &man)) {
		rc = ckpt_fail(c, CKPT_EXIT_FAILED, "no complete snapshot '%s' in %s: %s", name, store_dir,
			       snap_store_error(m->store));
		goto out;
	}
	/* The stream is authenticated for the snapshot's session. */
	snprintf(session, sizeof(session), "%s", man.session_id);
	explicit_bzero(&man, sizeof(man));
	m->session = session;
	rc = connect_destination(m);
	if (rc)
		goto out;
	if (snap_migrate_snapshot_send(&m->conn, m->store, name, NULL, 0, &m->token, m->nonce, &st)) {
		rc = ckpt_fail(c, CKPT_EXIT_FAILED, "push of '%s' to %s: %s", name, c->migrate.to, m->conn.error);
		goto out;
	}
	if (c->json) {
		struct json_writer w;

		ckpt_json_begin(c, &w);
		json_bool_put(&w, "ok", true);
		json_string_put(&w, "snapshot", name);
		json_string_put(&w, "session", session);
		json_string_put(&w, "to", c->migrate.to);
		json_u64_put(&w, "bytes", st.stream_bytes);
		json_u64_put(&w, "data_bytes", st.data_bytes);
		json_u64_put(&w, "data_sent_bytes", st.data_sent_bytes);
		json_u64_put(&w, "compressed_chunks", st.compressed_chunks);
		json_u64_put(&w, "chunks", st.chunks);
		json_u64_put(&w, "zero_chunks", st.zero_chunks);
		json_double_put(&w, "ms", now_ms() - t0);
		ckpt_json_end(c, &w);
	} else {
		char b[32];

		ckpt_size_format(st.stream_bytes, b, sizeof(b));
		printf("snapshot %s (session %s) pushed to %s: %s in %.0f ms, %llu chunks (%llu zero)\n", name,
		       session, c->migrate.to, b, now_ms() - t0, (unsigned long long)st.chunks,
		       (unsigned long long)st.zero_chunks);
	}
	rc = CKPT_EXIT_OK;
out:
	migration_free(m);
	return rc;
}
