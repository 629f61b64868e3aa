/* Live migration in ternd (docs/migration.md): the destination's listener
 * for migration streams, whose receivers are children of the supervisor,
 * and the source's record of sessions that moved, whose guests' hellos are
 * answered with where to go.
 *
 * A receiver child reads hostile bytes: it authenticates the stream, writes
 * each round into the store (snapshot/snap_migrate.h) and, at the final
 * round, asks the supervisor on its line to plan the session's restore;
 * only once that is recorded does it acknowledge, so the source never ends
 * a session the destination could not take.
 */
#include "supervisor_internal.h"

#include "fdpass.h"
#include "log.h"
#include "snap_migrate.h"
#include "snap_store.h"
#include "tls.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* How long a receiver waits for the next frame before giving up. */
#define MIGRATE_IDLE_S 30
#define MIGRATE_TLS_HANDSHAKE_S 10

void migrate_init(struct supervisor *sv)
{
	sv->migrate_fd = -1;
	for (unsigned i = 0; i < MIGRATE_RECEIVERS_MAX; i++)
		sv->receivers[i] = (struct migrate_receiver){ .line_fd = -1 };
}

int migrate_listen_open(struct supervisor *sv)
{
	char text[300];

	if (!sv->cfg->migrate_listen_set)
		return 0;
	transport_url_format(&sv->cfg->migrate_listen, text, sizeof(text));
	if (!sv->cfg->token.len)
		pr_warn("migrations on %s need a token (--token-file): every stream will be refused", text);
	sv->migrate_fd = socket_listen(sv->cfg, &sv->cfg->migrate_listen, 0600);
	if (sv->migrate_fd < 0) {
		pr_err("cannot listen for migrations on %s: %s", text, strerror(-sv->migrate_fd));
		return -1;
	}
	pr_info("listening for migrations on %s", text);
	return 0;
}

/* In a child of the supervisor: the listener and the receivers' lines are
 * not its own (a worker keeping the listener open would keep a restarted
 * ternd from binding its port). */
void migrate_fds_close(struct supervisor *sv)
{
	if (sv->migrate_fd >= 0)
		close(sv->migrate_fd);
	for (unsigned i = 0; i < MIGRATE_RECEIVERS_MAX; i++)
		if (sv->receivers[i].line_fd >= 0)
			close(sv->receivers[i].line_fd);
}

void migrate_stop(struct supervisor *sv)
{
	if (sv->migrate_fd >= 0) {
		close(sv->migrate_fd);
		if (sv->cfg->migrate_listen.kind == TRANSPORT_UNIX)
			unlink(sv->cfg->migrate_listen.path);
	}
	sv->migrate_fd = -1;
	for (unsigned i = 0; i < MIGRATE_RECEIVERS_MAX; i++) {
		struct migrate_receiver *r = &sv->receivers[i];

		if (r->pid > 0)
			kill(r->pid, SIGKILL);
		if (r->line_fd >= 0)
			close(r->line_fd);
		r->line_fd = -1;
	}
}

/* How long a receiver waits for the prepared worker to fill a round before
 * it acknowledges the round all the same (well within the source's 30 s). */
#define PREFILL_WAIT_MS 20000

/* One answer line from the supervisor into @answer, waiting at most
 * @timeout_ms: its length, or 0 (none came). */
static ssize_t line_answer(int line, char *answer, size_t cap, int timeout_ms)
{
	struct pollfd p = { .fd = line, .events = POLLIN };
	ssize_t n;

	answer[0] = 0;
	if (poll(&p, 1, timeout_ms) != 1)
		return 0;
	n = read(line, answer, cap - 1);
	if (n <= 0)
		return 0;
	answer[n] = 0;
	return n;
}

static void stream_key_hex(const uint8_t key[SNAP_MIGRATE_STREAM_KEY_BYTES],
			   char hex[2 * SNAP_MIGRATE_STREAM_KEY_BYTES + 1])
{
	for (unsigned i = 0; i < SNAP_MIGRATE_STREAM_KEY_BYTES; i++)
		snprintf(hex + 2 * i, 3, "%02x", key[i]);
}

/* A stream that JOINs another migration's: hand it over, through the
 * supervisor, to the receiver that awaits it, which acknowledges it. 0 (it
 * is that receiver's now), or refused here. */
static int stream_hand_over(struct supervisor *sv, struct snap_migrate_conn *c, uint32_t len, int line,
			    const char *session)
{
	char hex[2 * SNAP_MIGRATE_STREAM_KEY_BYTES + 1], msg[2 * SNAP_NAME_MAX + 64], answer[CONTROL_TEXT_MAX + 1];
	struct snap_migrate_join j;
	int n;

	if (snap_migrate_join_decode(c->buf, len, &j))
		return snap_migrate_refuse(c, -EBADMSG, "malformed JOIN"), -EBADMSG;
	if (c->tls)
		return snap_migrate_refuse(c, -EPROTONOSUPPORT, "no parallel streams over TLS"), -EPROTONOSUPPORT;
	stream_key_hex(j.key, hex);
	n = snprintf(msg, sizeof(msg), "join %s %s\n", session, hex);
	if (fdpass_send(line, msg, (size_t)n, &c->fd, 1) || !line_answer(line, answer, sizeof(answer), MIGRATE_IDLE_S * 1000) ||
	    strncmp(answer, "ok", 2)) {
		answer[strcspn(answer, "\n")] = 0;
		snap_migrate_refuse(c, -ENOENT, strncmp(answer, "err ", 4) ? "no migration awaits this stream" : answer + 4);
		return -ENOENT;
	}
	pr_info("migration of session %s: a stream joined", session);
	return 0;
}

/* STREAMS: await that many streams that JOIN with its key (handed over by
 * the supervisor) into @extra, and join them to @c. */
static int streams_take(struct supervisor *sv, struct snap_migrate_conn *c, uint32_t len, int line,
			const char *session, struct snap_migrate_conn *extra)
{
	struct timeval idle = { .tv_sec = MIGRATE_IDLE_S };
	char hex[2 * SNAP_MIGRATE_STREAM_KEY_BYTES + 1], answer[CONTROL_TEXT_MAX + 1];
	struct snap_migrate_streams st;
	int rc;

	if (snap_migrate_streams_decode(c->buf, len, &st))
		return snap_migrate_refuse(c, -EBADMSG, "malformed STREAMS"), -EBADMSG;
	if (c->tls)
		return snap_migrate_refuse(c, -EPROTONOSUPPORT, "no parallel streams over TLS"), -EPROTONOSUPPORT;
	stream_key_hex(st.key, hex);
	dprintf(line, "streams %s %s %u\n", session, hex, st.count);
	if (!line_answer(line, answer, sizeof(answer), MIGRATE_IDLE_S * 1000) || strncmp(answer, "ok", 2))
		return snap_migrate_refuse(c, -EBUSY, "ternd takes no streams for this session"), -EBUSY;
	rc = snap_migrate_ack_send(c, 0, "streams awaited");
	if (rc)
		return rc;
	for (uint32_t i = 0; i < st.count; i++) {
		struct pollfd p = { .fd = line, .events = POLLIN };
		int fd = -1, got = 0;
		ssize_t n = poll(&p, 1, MIGRATE_IDLE_S * 1000) == 1 ?
				    fdpass_recv(line, answer, sizeof(answer) - 1, &fd, 1, &got, 0) : 0;

		if (n <= 0 || got != 1 || strncmp(answer, "joined", 6)) {
			if (got == 1)
				close(fd);
			return snap_migrate_refuse(c, -ETIMEDOUT, "the streams did not join"), -ETIMEDOUT;
		}
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof(idle));
		rc = snap_migrate_conn_init(&extra[i], fd);
		if (!rc)
			rc = snap_migrate_stream_adopt(c, &extra[i]);
		if (rc) {
			if (extra[i].buf)
				snap_migrate_conn_fini(&extra[i]);
			close(fd);
			return snap_migrate_refuse(c, rc, c->error[0] ? c->error : "out of memory"), rc;
		}
	}
	pr_info("migration of session %s: %u more streams joined", session, st.count);
	return snap_migrate_ack_send(c, 0, "streams joined");
}

/* The receiver: returns its exit status. @tls: the stream's TLS session on
 * @fd, or NULL. */
static int receive(struct supervisor *sv, int fd, struct tls_conn *tls, int line)
{
	struct timeval idle = { .tv_sec = MIGRATE_IDLE_S };
	struct snap_migrate_conn c;
	struct snap_store *store = NULL;
	char session[SNAP_NAME_MAX + 1], name[SNAP_NAME_MAX + 1], previous[SNAP_NAME_MAX + 1] = "", dir[4200];
	uint8_t nonce[AUTH_NONCE_BYTES];
	struct snap_migrate_conn extra[SNAP_MIGRATE_STREAMS_MAX - 1];
	uint16_t type;
	uint32_t len, flags;
	bool first = true, began = false;
	int rc;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof(idle));
	if (snap_migrate_conn_init(&c, fd))
		return 1;
	c.tls = tls;
	rc = snap_migrate_server_auth(&c, &sv->cfg->token, session, nonce);
	if (rc) {
		pr_warn("migration stream refused: %s", c.error);
		snap_migrate_refuse(&c, rc, c.error);
		goto out;
	}
	store_path(sv, dir, sizeof(dir));
	rc = snap_store_open(dir, &(struct snap_store_config){ .workers = snap_store_workers_all() },
			     SNAP_STORE_CREATE, &store);
	if (rc) {
		snap_migrate_refuse(&c, rc, "this ternd cannot open its snapshot store");
		goto out;
	}
	pr_info("migration of session %s: stream authenticated", session);
	for (;;) {
		char answer[CONTROL_TEXT_MAX + 1] = "";
		ssize_t n;

		rc = snap_migrate_recv(&c, &type, &len);
		if (rc == -EPIPE) {
			rc = 0;     /* the source is done, or gave up: its rounds stay in the store */
			break;
		}
		if (!rc && type == SNAP_MIGRATE_PULL && first) {
			/* A destination asks for a domain's state: this end sends. */
			rc = migrate_pull_serve(sv, &c, len, line, session);
			snap_store_close(store);
			snap_migrate_conn_fini(&c);
			return rc;
		}
		if (!rc && type == SNAP_MIGRATE_JOIN && first) {
			/* A stream of another receiver's migration. */
			rc = stream_hand_over(sv, &c, len, line, session);
			snap_store_close(store);
			snap_migrate_conn_fini(&c);
			return rc ? 1 : 0;
		}
		if (!rc && type == SNAP_MIGRATE_STREAMS && first) {
			/* Refused there, or the streams joined: rounds follow. */
			rc = streams_take(sv, &c, len, line, session, extra);
			first = false;
			if (rc)
				break;
			continue;
		}
		if (!rc && type == SNAP_MIGRATE_BEGIN && !began)
			/* The prepared worker starts its backend while the first
			 * round comes; the supervisor answers nothing. */
			dprintf(line, "prepare %s\n", session);
		first = false;
		began = true;
		if (!rc && type != SNAP_MIGRATE_BEGIN)
			rc = -EPROTO;
		if (!rc)
			rc = snap_migrate_snapshot_recv(&c, len, store, session, &sv->cfg->token, nonce,
							sv->cfg->worker.exec_cfg.quota, name, &flags);
		if (rc) {
			pr_warn("migration of session %s failed: %s", session, c.error);
			snap_migrate_refuse(&c, rc, c.error);
			break;
		}
		if (!(flags & SNAP_MIGRATE_FINAL)) {
			/* The prepared worker fills the round before the source
			 * hears it came: the next, its difference, is then all
			 * that is left to fill at the switch. */
			dprintf(line, "round %s %s\n", session, name);
			line_answer(line, answer, sizeof(answer), PREFILL_WAIT_MS);
			rc = snap_migrate_ack_send(&c, 0, name);
			if (rc)
				break;
			/* The round before is of no more use here either (the
			 * prepared worker holds this one); best effort. */
			if (previous[0] && strcmp(previous, name))
				snap_store_rm(store, previous, NULL);
			snprintf(previous, sizeof(previous), "%s", name);
			continue;
		}
		/* The supervisor plans the restore; its answer is one line (a
		 * round's "filled" that came after its wait is passed over). */
		dprintf(line, "final %s %s\n", session, name);
		do
			n = read(line, answer, sizeof(answer) - 1);
		while (n > 0 && !strncmp(answer, "filled", 6));
		if (n > 0 && !strncmp(answer, "ok", 2)) {
			char guest[300] = "";

			/* Where the guest is to say hello: this ternd's first listener. */
			if (sv->cfg->listen_count)
				transport_url_format(&sv->cfg->listen[0], guest, sizeof(guest));
			pr_info("migration of session %s: '%s' stored, its restore planned", session, name);
			rc = snap_migrate_ack_send(&c, 0, guest);
		} else {
			if (n <= 0)
				snprintf(answer, sizeof(answer), "ternd did not plan the restore");
			answer[strcspn(answer, "\n")] = 0;
			rc = -EBUSY;
			snap_migrate_ack_send(&c, rc, answer);
		}
		break;
	}
out:
	for (unsigned i = 0; i < c.joined_count; i++) {
		close(c.joined[i]->fd);
		snap_migrate_conn_fini(c.joined[i]);
	}
	snap_store_close(store);
	snap_migrate_conn_fini(&c);
	return rc ? 1 : 0;
}

/* On a tls:// listener the handshake comes first: the source checks this
 * ternd's certificate before it sends its token's proof. */
static int receive_stream(struct supervisor *sv, int fd, int line)
{
	struct tls_conn *tls = NULL;
	char err[512];
	int rc;

	if (sv->cfg->migrate_listen.kind == TRANSPORT_TLS) {
		rc = tls_conn_start(sv->cfg->tls, fd, NULL, MIGRATE_TLS_HANDSHAKE_S, &tls, err, sizeof(err));
		if (rc) {
			pr_warn("migration stream refused: %s", err);
			return 1;
		}
		tls_conn_describe(tls, err, sizeof(err));
		pr_info("migration stream over TLS: %s", err);
	}
	rc = receive(sv, fd, tls, line);
	tls_conn_close(tls);
	return rc;
}

static void accept_stream(struct supervisor *sv)
{
	struct migrate_receiver *r = NULL;
	int fd = accept4(sv->migrate_fd, NULL, NULL, SOCK_CLOEXEC), pair[2];
	pid_t pid;

	if (fd < 0)
		return;
	for (unsigned i = 0; i < MIGRATE_RECEIVERS_MAX && !r; i++)
		if (!sv->receivers[i].pid && sv->receivers[i].line_fd < 0)
			r = &sv->receivers[i];
	if (!r) {
		pr_warn("migration stream refused: %u already under way", MIGRATE_RECEIVERS_MAX);
		close(fd);
		return;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair)) {
		close(fd);
		return;
	}
	pid = fork();
	if (pid < 0) {
		pr_err("fork: %s", strerror(errno));
		close(fd);
		close(pair[0]);
		close(pair[1]);
		return;
	}
	if (pid == 0) {
		supervisor_child_close(sv, NULL);
		close(pair[0]);
		sigprocmask(SIG_SETMASK, &(sigset_t){ 0 }, NULL);
		signal(SIGPIPE, SIG_IGN);
		_exit(receive_stream(sv, fd, pair[1]));
	}
	close(fd);
	close(pair[1]);
	*r = (struct migrate_receiver){ .pid = pid, .line_fd = pair[0] };
}

/* A receiver's final round is stored: plan the restore of @session from
 * @snapshot for its guest's next hello here. NULL, or why not. */
static const char *plan_restore(struct supervisor *sv, const char *session, const char *snapshot)
{
	struct snap_store *store = NULL;
	struct snap_manifest m;
	struct session_known *k;
	char dir[4200];
	int rc;

	if (strchr(session, '/') && !vm_incoming_expects(sv, session))
		return "no migration of that session's domain is coming here";
	if (slot_of_session(sv, session, -1) >= 0)
		return "a session of that id runs here";
	k = known_get(sv, session, false);
	if (k && (k->plan != PLAN_NONE || k->check_fd >= 0))
		return "a session of that id is suspended or restoring here";
	store_path(sv, dir, sizeof(dir));
	rc = snap_store_open(dir, NULL, 0, &store);
	if (!rc)
		rc = snap_store_manifest_get(store, snapshot, &m);
	snap_store_close(store);
	if (rc || strcmp(m.session_id, session))
		return "the stored snapshot cannot be read";
	k = known_get(sv, session, true);
	if (!k)
		return "ternd keeps --sessions-max sessions already";
	cred_from_manifest(&k->cred, &m);
	explicit_bzero(&m, sizeof(m));
	k->plan = PLAN_RESTORE;
	k->device = sv->cfg->worker.exec_cfg.device;
	snprintf(k->snapshot, sizeof(k->snapshot), "%s", snapshot);
	snprintf(k->latest, sizeof(k->latest), "%s", snapshot);
	if (known_save(sv)) {
		k->plan = PLAN_NONE;
		return "the sessions file cannot be written";
	}
	sv->counters.migrations_in++;
	return NULL;
}

/* "SESSION KEY" of a receiver's streams or join line: false if malformed. */
static bool stream_key_parse(char *text, const char **session, const char **key)
{
	char *sp = strrchr(text, ' ');

	if (!sp || strlen(sp + 1) != 2 * SNAP_MIGRATE_STREAM_KEY_BYTES ||
	    strspn(sp + 1, "0123456789abcdef") != 2 * SNAP_MIGRATE_STREAM_KEY_BYTES || sp == text ||
	    (size_t)(sp - text) > SNAP_NAME_MAX)
		return false;
	*sp = 0;
	*session = text;
	*key = sp + 1;
	return true;
}

/* A receiver's stream JOINed with @key for @session: to the receiver that
 * awaits it (another), with @fd. NULL, or why not. */
static const char *stream_join(struct supervisor *sv, struct migrate_receiver *from, const char *session,
			       const char *key, int fd)
{
	for (unsigned i = 0; i < MIGRATE_RECEIVERS_MAX; i++) {
		struct migrate_receiver *r = &sv->receivers[i];

		if (r == from || r->line_fd < 0 || !r->pid || !r->join_left || strcmp(r->join_key, key) ||
		    strcmp(r->join_session, session))
			continue;
		r->join_left--;
		return fdpass_send(r->line_fd, "joined\n", 7, &fd, 1) ? "the migration's receiver is gone" : NULL;
	}
	return "no migration of that session awaits this stream";
}

static void receiver_readable(struct supervisor *sv, struct migrate_receiver *r)
{
	char line[2 * SNAP_NAME_MAX + 16], more[VM_GENERATION_MAX + 16] = "", *name;
	const char *why = "malformed", *session = "?", *key;
	int fd = -1, got = 0;
	ssize_t n = fdpass_recv(r->line_fd, line, sizeof(line) - 1, &fd, 1, &got, 0);

	if (n <= 0) {
		close(r->line_fd);
		r->line_fd = -1;
		return;
	}
	line[n] = 0;
	line[strcspn(line, "\n")] = 0;
	/* A descriptor comes only with a join, and is handed on from here. */
	if (got == 1 && strncmp(line, "join ", 5)) {
		close(fd);
		got = 0;
	}
	if (got == 1) {
		why = stream_key_parse(line + 5, &session, &key) ? stream_join(sv, r, session, key, fd) : why;
		close(fd);
		if (why)
			pr_warn("migration stream of session %s refused: %s", session, why);
	} else if (!strncmp(line, "streams ", 8) && (name = strrchr(line, ' ')) &&
		   (*name++ = 0, stream_key_parse(line + 8, &session, &key))) {
		unsigned long count = strtoul(name, NULL, 10);

		if (count && count < SNAP_MIGRATE_STREAMS_MAX) {
			snprintf(r->join_key, sizeof(r->join_key), "%s", key);
			snprintf(r->join_session, sizeof(r->join_session), "%s", session);
			r->join_left = (unsigned)count;
			why = NULL;
		}
	} else if (!strncmp(line, "final ", 6) && (name = strchr(line + 6, ' '))) {
		*name++ = 0;
		session = line + 6;
		why = plan_restore(sv, session, name);
		if (why)
			pr_warn("migration of session %s refused at the switch: %s", session, why);
		else
			standby_round(sv, session, name, (int)(r - sv->receivers), true);
	} else if (!strncmp(line, "round ", 6) && (name = strchr(line + 6, ' '))) {
		*name++ = 0;
		/* Answered once the prepared worker holds the round. */
		if (!standby_round(sv, line + 6, name, (int)(r - sv->receivers), false))
			dprintf(r->line_fd, "filled\n");
		return;
	} else if (!strncmp(line, "prepare ", 8)) {
		standby_round(sv, line + 8, NULL, (int)(r - sv->receivers), false);
		return;
	} else if (!strncmp(line, "pull ", 5)) {
		session = line + 5;
		why = vm_pull_accept(sv, (unsigned)(r - sv->receivers), session, more, sizeof(more));
	}
	dprintf(r->line_fd, why ? "err %s\n" : "ok\n", why);
	if (!why && more[0])
		dprintf(r->line_fd, "%s", more);
}

unsigned migrate_poll_fill(struct supervisor *sv, struct pollfd *pfd, unsigned n, unsigned *first)
{
	*first = n;
	if (sv->migrate_fd >= 0)
		pfd[n++] = (struct pollfd){ .fd = sv->migrate_fd, .events = POLLIN };
	for (unsigned i = 0; i < MIGRATE_RECEIVERS_MAX; i++)
		if (sv->receivers[i].line_fd >= 0)
			pfd[n++] = (struct pollfd){ .fd = sv->receivers[i].line_fd, .events = POLLIN };
	return n;
}

void migrate_poll_handle(struct supervisor *sv, const struct pollfd *pfd, unsigned first, unsigned end)
{
	unsigned at = first;

	if (sv->migrate_fd >= 0 && at < end) {
		if (pfd[at].revents & POLLIN)
			accept_stream(sv);
		at++;
	}
	for (unsigned i = 0; i < MIGRATE_RECEIVERS_MAX && at < end; i++) {
		struct migrate_receiver *r = &sv->receivers[i];

		if (r->line_fd < 0 || pfd[at].fd != r->line_fd)
			continue;
		if (pfd[at].revents & (POLLIN | POLLHUP | POLLERR))
			receiver_readable(sv, r);
		at++;
	}
}

bool migrate_child_reaped(struct supervisor *sv, pid_t pid, int status)
{
	if (vm_migration_reaped(sv, pid, status))
		return true;
	for (unsigned i = 0; i < MIGRATE_RECEIVERS_MAX; i++)
		if (sv->receivers[i].pid == pid) {
			sv->receivers[i].pid = 0;
			vm_receiver_gone(sv, i);
			standby_receiver_gone(sv, (int)i);
			if (WIFSIGNALED(status) || WEXITSTATUS(status))
				pr_info("migration receiver %d ended with %s %d", pid,
					WIFSIGNALED(status) ? "signal" : "status",
					WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
			return true;
		}
	return false;
}

/* The source's side. */

const struct migrate_moved *migrate_moved_find(struct supervisor *sv, const char *id)
{
	for (unsigned i = 0; i < MIGRATE_MOVED_MAX; i++)
		if (sv->moved[i].used && !strcmp(sv->moved[i].id, id))
			return &sv->moved[i];
	return NULL;
}

void migrate_request(struct supervisor *sv, int client, const struct control_request *req)
{
	struct session_known *k = known_get(sv, req->session, false);
	struct control_reply reply = { .kind = CONTROL_REPLY_MIGRATED };
	struct migrate_moved *mv = NULL;
	struct transport_url url;

	if (!k || k->plan != PLAN_SUSPENDED) {
		client_fail(&client, "session %s is not suspended here: suspend it before it moves", req->session);
		return;
	}
	if (strlen(req->url) > WIRE_MOVED_URL_MAX || transport_url_parse(req->url, &url)) {
		client_fail(&client, "'%s' is not a guest transport URL", req->url);
		return;
	}
	for (unsigned i = 0; i < MIGRATE_MOVED_MAX && !mv; i++)
		if (!sv->moved[i].used || !strcmp(sv->moved[i].id, req->session))
			mv = &sv->moved[i];
	if (!mv) {
		/* The oldest goes: its guest most likely came back long ago. */
		memmove(&sv->moved[0], &sv->moved[1], (MIGRATE_MOVED_MAX - 1) * sizeof(sv->moved[0]));
		mv = &sv->moved[MIGRATE_MOVED_MAX - 1];
	}
	*mv = (struct migrate_moved){ .used = true, .cred = k->cred };
	snprintf(mv->id, sizeof(mv->id), "%s", req->session);
	snprintf(mv->url, sizeof(mv->url), "%s", req->url);
	/* The session is the destination's now: nothing of it stays here but
	 * where its guest is to go. */
	/* Every worker it still has goes: the suspended one winding down, one
	 * holding its reconnected guest for a resume, and one forked for a
	 * reconnect whose hello it has not passed on, which would otherwise
	 * find no plan and start the session afresh. Their guests reconnect
	 * and hear where it went (moved_answer). */
	for (int live; (live = slot_of_session(sv, req->session, -1)) >= 0;) {
		pid_t pid = atomic_load(&sv->slots[live].pid);

		sv->links[live].stopped = true;
		if (pid > 0)
			kill(pid, SIGKILL);
	}
	k->waiting_slot = -1;
	k->plan = PLAN_NONE;
	explicit_bzero(&k->cred, sizeof(k->cred));
	known_save(sv);
	sv->counters.migrations_out++;
	pr_info("session %s moved to %s", req->session, req->url);
	snprintf(reply.migrated.session, sizeof(reply.migrated.session), "%s", req->session);
	snprintf(reply.migrated.url, sizeof(reply.migrated.url), "%s", req->url);
	client_finish(&client, &reply);
}
