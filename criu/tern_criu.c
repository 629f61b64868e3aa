/* tern_criu.so: the CRIU plugin that makes `criu dump` and `criu restore`
 * of a tern application carry its GPU half (docs/criu.md).
 *
 * A tern application holds no GPU state, only its connections to ternd, so
 * CRIU dumps it as any process once those are dealt with.  At each hook of
 * CRIU 4.x (criu-plugin.h; the order is criu/seize.c's and cr-dump.c's):
 *
 *   dump  PAUSE_DEVICES(pid)       before CRIU seizes the task: find its
 *                                  sessions (status, by the pid their hello
 *                                  gave) and refuse, with the reason, when
 *                                  a CUDA process finds no ternd
 *         CHECKPOINT_DEVICES(pid)  every task frozen: suspend each session
 *                                  (a durable snapshot at a call boundary,
 *                                  then its worker ends), write the record
 *                                  of the snapshots into the images folder
 *                                  (criu_record.h)
 *         (unix sockets)           the sessions' sockets now have no peer:
 *                                  CRIU dumps them as semi-closed
 *                                  connections and restores them so, no
 *                                  DUMP_UNIX_SK takeover is needed
 *         exit(DUMP, ret)          every suspended session is set to resume
 *                                  from its snapshot when its guest comes
 *                                  back: a process left running (failed
 *                                  dump, --leave-running) reconnects at once
 *                                  and goes on; a killed one when restored
 *   restore init(RESTORE)          read the record (none: not ours), check
 *                                  that this ternd's store holds the very
 *                                  snapshots (their hashes), ask ternd to
 *                                  restore each when its guest reconnects
 *         RESUME_DEVICES_LATE      nothing left: the shim sees its socket
 *                                  at end of stream and reconnects by its
 *                                  own path (HELLO with its last sequence
 *                                  number, then the replay)
 *         exit(RESTORE, 0)         wait for ternd's answer to each restore
 *                                  and log it
 *
 * Settings come from the environment CRIU runs in (a plugin has no
 * arguments): TERN_CONTROL (ternd's control socket, default
 * /run/tern/control.sock), TERN_CRIU_DEVICE (restore onto this GPU),
 * TERN_CRIU_TIMEOUT_MS (how long ternd may take to answer, default 120000),
 * TERN_CRIU_INCREMENTAL=1 (each session's snapshot only what changed since
 * its latest one).
 *
 * State: CRIU calls hooks without a context, so the plugin's state is this
 * file's one struct (as the shim has its one process context).  CRIU is
 * single-threaded; so is this.
 */
#define LOG_PREFIX "tern_criu: "

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* CRIU finds the plugin by its descriptor, CR_PLUGIN_DESC: the one symbol
 * exported (the build hides the rest). */
#pragma GCC visibility push(default)
#include <criu-plugin.h>
#pragma GCC visibility pop

#include "control.h"
#include "control_msg.h"
#include "criu_record.h"
#include "snap_store.h"
#include "transport.h"

/* CRIU's logger, which the criu binary exports to its plugins (criu-log.h
 * declares it beside a log.h of its own, whose name tern's log.h takes). */
extern void print_on_level(unsigned int loglevel, const char *format, ...)
	__attribute__((format(printf, 2, 3)));
#define CRIU_LOG_ERROR 1u
#define CRIU_LOG_INFO 3u

/* One line in criu's log (its -o file), with this plugin's prefix. */
__attribute__((format(printf, 2, 3))) static void say_at(unsigned level, const char *fmt, ...)
{
	char line[1536];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	print_on_level(level, "%s%s\n", LOG_PREFIX, line);
}
#define say(...) say_at(CRIU_LOG_ERROR, __VA_ARGS__)
#define note(...) say_at(CRIU_LOG_INFO, __VA_ARGS__)

struct criu_session {
	char id[CONTROL_NAME_MAX + 1];
	int32_t guest_pid;
	int32_t worker_pid;     /* its worker's, until it ends */
	bool suspend_sent;      /* a suspend was asked for, answered or not */
	bool suspended;         /* its snapshot is durable and its worker gone */
	char snapshot[CONTROL_NAME_MAX + 1];
	uint64_t seq;           /* the last request its snapshot holds */
	int restore_fd;         /* a restore request whose answer is awaited, or -1 */
};

static struct tern_criu {
	char control[CONTROL_PATH_MAX + 1];
	int timeout_ms;
	int device;
	bool incremental;       /* TERN_CRIU_INCREMENTAL=1: snapshots on the session's latest */
	char store[CONTROL_PATH_MAX + 8];     /* state_dir + "/store" */
	unsigned count;
	struct criu_session sessions[CRIU_RECORD_SESSIONS_MAX];
	struct criu_record record;
	bool restoring;         /* the images carry a record: this restore is ours */
	char busy[CONTROL_TEXT_MAX + 1]; /* why sessions_find() said -EAGAIN */
} tc;

static int control_reply_read(int fd, enum control_op op, struct control_reply *answer, char *err,
			      size_t errlen);
static int restore_plan(void);

static int settings_read(void)
{
	const char *v = getenv("TERN_CONTROL");
	char *end;

	memset(&tc, 0, sizeof(tc));
	snprintf(tc.control, sizeof(tc.control), "%s", v && v[0] ? v : CONTROL_DEFAULT_PATH);
	tc.timeout_ms = 120000;
	tc.device = -1;
	v = getenv("TERN_CRIU_TIMEOUT_MS");
	if (v && v[0]) {
		long t = strtol(v, &end, 10);

		if (*end || t < 1 || t > 86400000) {
			say("TERN_CRIU_TIMEOUT_MS='%s': milliseconds, 1 to 86400000", v);
			return -EINVAL;
		}
		tc.timeout_ms = (int)t;
	}
	v = getenv("TERN_CRIU_DEVICE");
	if (v && v[0]) {
		long d = strtol(v, &end, 10);

		if (*end || d < 0 || d > 1023) {
			say("TERN_CRIU_DEVICE='%s': a GPU index", v);
			return -EINVAL;
		}
		tc.device = (int)d;
	}
	v = getenv("TERN_CRIU_INCREMENTAL");
	tc.incremental = v && !strcmp(v, "1");
	for (unsigned i = 0; i < CRIU_RECORD_SESSIONS_MAX; i++)
		tc.sessions[i].restore_fd = -1;
	return 0;
}

/* Write all of @buf to the control socket without SIGPIPE: a ternd gone
 * mid-request must fail the hook, not kill criu. */
static int send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Send @req; with @keep, return the connection (>= 0) without reading;
 * otherwise read to the final reply into @answer and return 0.  -errno,
 * the reason said. */
static int control_call(const struct control_request *req, bool keep, struct control_reply *answer)
{
	struct transport_url url = { .kind = TRANSPORT_UNIX };
	char *line = NULL, err[256];
	size_t len;
	int fd, ret;

	memset(answer, 0, sizeof(*answer));
	if (strlen(tc.control) >= sizeof(url.path))
		return -ENAMETOOLONG;
	strcpy(url.path, tc.control);
	fd = transport_connect(&url);
	if (fd < 0) {
		say("no ternd answers on %s (%s): set TERN_CONTROL to its control socket", tc.control,
		    strerror(-fd));
		return fd;
	}
	ret = control_request_encode(req, &line, &len);
	if (!ret)
		ret = send_all(fd, line, len);
	free(line);
	if (ret) {
		say("cannot send %s to ternd: %s", control_op_name(req->op), strerror(-ret));
		close(fd);
		return ret;
	}
	if (keep)
		return fd;
	ret = control_reply_read(fd, req->op, answer, err, sizeof(err));
	close(fd);
	return ret;
}

/* Read lines from @fd until the final reply (progress lines skipped). */
static int control_reply_read(int fd, enum control_op op, struct control_reply *answer, char *err, size_t errlen)
{
	char *buf = malloc(CONTROL_REPLY_LINE_MAX);
	int n, ret = -ENOMEM;

	/* An output only: what the caller's variable held is not ours to free
	 * (criu restores crashed freeing an uninitialised one). */
	*answer = (struct control_reply){ 0 };
	while (buf) {
		n = control_line_read(fd, buf, CONTROL_REPLY_LINE_MAX, tc.timeout_ms);
		if (n < 0) {
			ret = n;
			say("ternd's answer to %s: %s", control_op_name(op),
			    n == -ETIMEDOUT ? "none within TERN_CRIU_TIMEOUT_MS" : strerror(-n));
			break;
		}
		control_reply_release(answer);
		ret = control_reply_decode(buf, (size_t)n, op, answer, err, errlen);
		if (ret) {
			say("ternd's answer to %s does not decode: %s", control_op_name(op), err);
			break;
		}
		if (answer->kind != CONTROL_REPLY_PROGRESS)
			break;
	}
	free(buf);
	return ret;
}

/* Does @pid map a libcuda.so? Only such a process can need ternd. */
static bool maps_libcuda(int pid)
{
	char path[64], line[4096];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return true;    /* cannot tell: assume it might */
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "/libcuda.so") != NULL;
	fclose(f);
	return found;
}

/* ternd's status (released by the caller); notes where its store is. */
static int status_get(struct control_reply *r)
{
	struct control_request req = { .op = CONTROL_OP_STATUS, .device = -1 };
	int ret = control_call(&req, false, r);

	if (ret)
		return ret;
	if (r->kind == CONTROL_REPLY_ERROR) {
		say("ternd refused status: %s", r->error);
		control_reply_release(r);
		return -EPROTO;
	}
	snprintf(tc.store, sizeof(tc.store), "%s/store", r->status.state_dir);
	return 0;
}

/* The sessions ternd serves for @pid, added to tc.sessions. */
static int sessions_find(int pid)
{
	struct control_reply r;
	int ret = status_get(&r);

	if (ret)
		return ret;
	for (uint32_t i = 0; i < r.status.session_count; i++) {
		const struct control_session_info *s = &r.status.sessions[i];
		bool known = false;

		if (s->guest_pid != pid)
			continue;
		for (unsigned j = 0; j < tc.count; j++)
			known |= !strcmp(tc.sessions[j].id, s->id);
		if (known)
			continue;
		if (tc.count == CRIU_RECORD_SESSIONS_MAX) {
			say("process %d has more than %u sessions", pid, CRIU_RECORD_SESSIONS_MAX);
			ret = -E2BIG;
			break;
		}
		if (strcmp(s->state, "active")) {
			snprintf(tc.busy, sizeof(tc.busy), "session %s of process %d is %s, not active", s->id, pid,
				 s->state);
			ret = -EAGAIN;
			break;
		}
		snprintf(tc.sessions[tc.count].id, sizeof(tc.sessions[0].id), "%s", s->id);
		tc.sessions[tc.count].guest_pid = pid;
		tc.sessions[tc.count].worker_pid = s->pid;
		tc.count++;
	}
	control_reply_release(&r);
	return ret;
}

static int tern_criu_init(int stage)
{
	int ret = settings_read();

	if (ret)
		return ret;
	if (stage == CR_PLUGIN_STAGE__RESTORE) {
		char err[256];
		int dir = criu_get_image_dir();

		ret = criu_record_read(dir, &tc.record, err, sizeof(err));
		if (ret == -ENOENT)
			return 0;       /* not a tern process's images */
		if (ret) {
			say("the images' %s: %s", CRIU_RECORD_FILE, ret == -EBADMSG ? err : strerror(-ret));
			return ret;
		}
		tc.restoring = true;
		return restore_plan();
	}
	return 0;
}

/* Check that this ternd's store holds the recorded snapshots, then plan
 * their restores (each answered when its guest reconnects). */
static int restore_plan(void)
{
	struct snap_store *store = NULL;
	struct control_reply r;
	int ret = status_get(&r);

	if (ret)
		return ret;
	control_reply_release(&r);
	ret = snap_store_open(tc.store, NULL, 0, &store);
	if (ret) {
		say("cannot open ternd's store %s: %s", tc.store, strerror(-ret));
		return ret;
	}
	for (uint32_t i = 0; i < tc.record.count && !ret; i++) {
		const struct criu_record_entry *e = &tc.record.entries[i];
		struct snap_manifest m;

		ret = snap_store_manifest_get(store, e->snapshot, &m);
		if (ret) {
			say("snapshot '%s' (session %s) is not in ternd's store %s (%s): copy it there first",
			    e->snapshot, e->session, tc.store, strerror(-ret));
		} else if (memcmp(m.journal_hash, e->journal_hash, sizeof(m.journal_hash)) ||
			   memcmp(m.chunks_hash, e->chunks_hash, sizeof(m.chunks_hash)) ||
			   strcmp(m.session_id, e->session)) {
			say("snapshot '%s' in %s is not the one these images were dumped with "
			    "(its hashes or session differ)", e->snapshot, tc.store);
			ret = -ESTALE;
		}
	}
	snap_store_close(store);
	for (uint32_t i = 0; i < tc.record.count && !ret; i++) {
		struct control_request rq = { .op = CONTROL_OP_RESTORE, .device = tc.device };
		struct control_reply none;
		struct criu_session *s = &tc.sessions[tc.count++];

		snprintf(rq.snapshot, sizeof(rq.snapshot), "%s", tc.record.entries[i].snapshot);
		memcpy(s->id, tc.record.entries[i].session, sizeof(s->id));
		snprintf(s->snapshot, sizeof(s->snapshot), "%s", rq.snapshot);
		ret = control_call(&rq, true, &none);
		if (ret < 0)
			break;
		s->restore_fd = ret;
		ret = 0;
		note("session %s: ternd restores '%s' when it reconnects", s->id, s->snapshot);
	}
	return ret;
}

static int tern_criu_pause_devices(int pid)
{
	unsigned before = tc.count;
	int ret = sessions_find(pid);

	/* A session still coming back (the resume after a dump left running,
	 * say) is waited for: the next dump may follow at once. */
	for (int waited = 0; ret == -EAGAIN; waited += 10) {
		if (waited >= tc.timeout_ms) {
			say("%s after %d ms: retry the dump", tc.busy, waited);
			return ret;
		}
		usleep(10000);
		ret = sessions_find(pid);
	}

	if (ret == -ENOENT || ret == -ECONNREFUSED) {
		if (!maps_libcuda(pid))
			return -ENOTSUP;        /* no CUDA, no ternd needed */
		say("process %d maps libcuda.so but no ternd answers on %s: refusing the dump "
		    "(its sessions would be lost)", pid, tc.control);
		return ret;
	}
	if (ret)
		return ret;
	for (unsigned i = before; i < tc.count; i++)
		note("process %d: session %s", pid, tc.sessions[i].id);
	return tc.count > before ? 0 : -ENOTSUP;
}

static int record_write(void)
{
	struct snap_store *store = NULL;
	struct criu_record r = { 0 };
	int ret = snap_store_open(tc.store, NULL, 0, &store);

	if (ret) {
		say("cannot open ternd's store %s: %s", tc.store, strerror(-ret));
		return ret;
	}
	for (unsigned i = 0; i < tc.count && !ret; i++) {
		struct criu_record_entry *e = &r.entries[r.count];
		struct snap_manifest m;

		if (!tc.sessions[i].suspended)
			continue;
		ret = snap_store_manifest_get(store, tc.sessions[i].snapshot, &m);
		if (ret) {
			say("snapshot '%s' is not in the store %s: %s", tc.sessions[i].snapshot, tc.store,
			    strerror(-ret));
			break;
		}
		if (!r.pid)
			r.pid = (uint32_t)tc.sessions[i].guest_pid;
		snprintf(e->session, sizeof(e->session), "%s", m.session_id);
		snprintf(e->snapshot, sizeof(e->snapshot), "%s", m.name);
		e->seq = tc.sessions[i].seq;
		e->created_ns = m.created_ns;
		memcpy(e->journal_hash, m.journal_hash, sizeof(e->journal_hash));
		memcpy(e->chunks_hash, m.chunks_hash, sizeof(e->chunks_hash));
		r.count++;
	}
	snap_store_close(store);
	if (!ret)
		ret = criu_record_write(criu_get_image_dir(), &r);
	if (ret)
		say("cannot write %s into the images folder: %s", CRIU_RECORD_FILE, strerror(-ret));
	return ret;
}

/* A suspended session's worker answers before it exits: wait until ternd
 * reaped it, so that every end it held of the guest's sockets is closed, or
 * CRIU finds them still connected to a process outside the dump.  (Its
 * /proc state is no sign: with the driver's threads still tearing down, a
 * worker whose main thread has exited is a zombie that holds its files.) */
static int worker_wait_gone(const struct criu_session *s)
{
	for (int waited = 0;; waited += 10) {
		struct control_reply r;
		bool there = false;
		int ret = status_get(&r);

		if (ret)
			return ret;
		for (uint32_t i = 0; i < r.status.session_count; i++)
			there |= r.status.sessions[i].pid == s->worker_pid;
		control_reply_release(&r);
		if (!there)
			return 0;
		if (waited >= tc.timeout_ms) {
			say("session %s: its worker %d has not ended %d ms after the suspend", s->id, s->worker_pid,
			    waited);
			return -ETIMEDOUT;
		}
		usleep(10000);
	}
}

static int tern_criu_checkpoint_devices(int pid)
{
	bool mine = false;
	int ret = 0;

	for (unsigned i = 0; i < tc.count && !ret; i++) {
		struct criu_session *s = &tc.sessions[i];
		struct control_request req = { .op = CONTROL_OP_SUSPEND, .device = -1, .incremental = tc.incremental };
		struct control_reply r;

		if (s->guest_pid != pid || s->suspended)
			continue;
		mine = true;
		snprintf(req.session, sizeof(req.session), "%s", s->id);
		s->suspend_sent = true;
		ret = control_call(&req, false, &r);
		if (ret)
			break;
		if (r.kind == CONTROL_REPLY_ERROR) {
			say("the snapshot of session %s failed: %s", s->id, r.error);
			s->suspend_sent = false;        /* refused: nothing to undo */
			ret = -EIO;
		} else {
			snprintf(s->snapshot, sizeof(s->snapshot), "%s", r.snapshot.snapshot);
			s->seq = r.snapshot.seq;
			s->suspended = true;
			ret = worker_wait_gone(s);
			note("session %s: snapshot '%s' at request %llu, %llu bytes, %.1f ms", s->id, s->snapshot,
			    (unsigned long long)r.snapshot.seq, (unsigned long long)r.snapshot.bytes,
			    r.snapshot.total_ms);
		}
		control_reply_release(&r);
	}
	if (!ret && mine)
		ret = record_write();
	return ret ? ret : mine ? 0 : -ENOTSUP;
}

/* Every suspended session resumes from its snapshot when its guest comes
 * back (the pause undone, whatever CRIU's outcome).  So does one whose
 * suspend went unanswered (a ternd stopped or slow past the timeout): ternd
 * serves its control requests in order, so should that suspend still
 * happen, this resume follows it; should it have failed, the resume is
 * refused (no such suspended session) and changes nothing. */
static void dump_finish(int ret)
{
	for (unsigned i = 0; i < tc.count; i++) {
		struct criu_session *s = &tc.sessions[i];
		struct control_request req = { .op = CONTROL_OP_RESUME, .device = -1 };
		struct control_reply none;
		int fd;

		if (!s->suspended && !s->suspend_sent)
			continue;
		snprintf(req.session, sizeof(req.session), "%s", s->id);
		/* The answer comes when the guest reconnects, which a killed
		 * process does only once restored: do not wait for it. */
		fd = control_call(&req, true, &none);
		if (fd >= 0)
			close(fd);
		else
			say("session %s stays suspended in '%s': `ckpt resume %s` brings it back", s->id,
			    s->snapshot, s->id);
	}
	if (ret && tc.count)
		say("the dump failed: the process's sessions resume from their snapshots");
}

static void restore_finish(int ret)
{
	for (unsigned i = 0; i < tc.count; i++) {
		struct criu_session *s = &tc.sessions[i];
		struct control_reply r;
		char err[256];

		if (s->restore_fd < 0)
			continue;
		if (!ret && !control_reply_read(s->restore_fd, CONTROL_OP_RESTORE, &r, err, sizeof(err))) {
			if (r.kind == CONTROL_REPLY_ERROR)
				say("session %s: the restore of '%s' failed: %s", s->id, s->snapshot, r.error);
			else
				note("session %s: restored from '%s' at request %llu on device %d in %.1f ms", s->id,
				    s->snapshot, (unsigned long long)r.restore.seq, r.restore.device,
				    r.restore.restore_ms);
			control_reply_release(&r);
		}
		close(s->restore_fd);
		s->restore_fd = -1;
	}
}

static void tern_criu_exit(int stage, int ret)
{
	if (stage == CR_PLUGIN_STAGE__DUMP)
		dump_finish(ret);
	else if (stage == CR_PLUGIN_STAGE__RESTORE && tc.restoring)
		restore_finish(ret);
}

CR_PLUGIN_REGISTER("tern", tern_criu_init, tern_criu_exit)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__PAUSE_DEVICES, tern_criu_pause_devices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, tern_criu_checkpoint_devices)
