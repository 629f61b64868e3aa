#define LOG_PREFIX "supervisor: "
#include "supervisor.h"
#include "control.h"
#include "control_msg.h"
#include "ipc_broker.h"
#include "log.h"
#include "snap_store.h"

#include <dirent.h>
#include <sys/stat.h>
#include <errno.h>
#include <stdarg.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

_Static_assert(CONTROL_NAME_MAX == SNAP_NAME_MAX, "a snapshot name fits a control message's");

/* The supervisor's end of a worker's line channel, and the ckpt client
 * waiting on it (snapshot, suspend, or a restore this worker performs). */
struct worker_link {
	int fd;
	int ipc_fd;                         /* the worker's IPC requests (ipc_broker.h) */
	char buf[WORKER_LINE_MAX];
	size_t len;
	int client_fd;
	bool suspending;
	char snapshot[SNAP_NAME_MAX + 1];   /* the one being written */
};

/* What the supervisor remembers of a session beyond its worker's life. */
enum session_plan {
	PLAN_NONE,
	PLAN_SUSPENDED,         /* parked in a snapshot until `resume` */
	PLAN_RESTORE,           /* the next worker of the session restores */
};

#define SESSIONS_KNOWN 256

struct session_known {
	char id[SESSION_ID_MAX];
	enum session_plan plan;
	char snapshot[SNAP_NAME_MAX + 1];  /* for the plan */
	int device;
	char latest[SNAP_NAME_MAX + 1];    /* latest durable snapshot */
	int client_fd;                     /* waiting for the restore to happen */
	int waiting_slot;                  /* a worker told to wait, or -1 */
	bool resume_pending;               /* a resume came while its suspend ran: restore once it ends */
};

struct supervisor {
	struct supervisor_config *cfg;
	int listen_fd[SUPERVISOR_LISTEN_MAX];
	int control_fd;
	int signal_fd;
	struct session_slot *slots;
	struct worker_link links[SESSION_SLOTS];
	struct session_known known[SESSIONS_KNOWN];
	unsigned long sessions_started;
	struct ipc_broker *ipc;
};

/* Send @r to the ckpt client on *fd; a failed write drops the client. */
static void client_send(int *fd, const struct control_reply *r)
{
	char *line = NULL;
	size_t len = 0;
	int ret;

	if (*fd < 0)
		return;
	ret = control_reply_encode(r, &line, &len);
	if (ret)
		pr_warn("cannot encode a reply: %s", strerror(-ret));
	if (ret || control_write_all(*fd, line, len)) {
		close(*fd);
		*fd = -1;
	}
	free(line);
}

/* The final reply: send it and close. */
static void client_finish(int *fd, const struct control_reply *r)
{
	client_send(fd, r);
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void client_fail(int *fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void client_fail(int *fd, const char *fmt, ...)
{
	struct control_reply r = { .kind = CONTROL_REPLY_ERROR };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r.error, sizeof(r.error), fmt, ap);
	va_end(ap);
	client_finish(fd, &r);
}

static struct session_known *known_get(struct supervisor *sv, const char *id, bool create)
{
	struct session_known *free_entry = NULL;

	for (unsigned i = 0; i < SESSIONS_KNOWN; i++) {
		struct session_known *k = &sv->known[i];

		if (k->id[0] && !strcmp(k->id, id))
			return k;
		if (!k->id[0] && !free_entry)
			free_entry = k;
	}
	if (!create || !free_entry)
		return NULL;
	memset(free_entry, 0, sizeof(*free_entry));
	snprintf(free_entry->id, sizeof(free_entry->id), "%s", id);
	free_entry->client_fd = -1;
	free_entry->waiting_slot = -1;
	return free_entry;
}

/* A suspended session outlives this ternd: its snapshot's name is kept in
 * STATE/suspended/SESSION, so that a ternd started later (on this host, with
 * the same state directory) can resume it. */
static void suspended_path(struct supervisor *sv, const char *id, char *out, size_t cap)
{
	snprintf(out, cap, "%s/suspended/%s", sv->cfg->state_dir, id);
}

static void suspended_save(struct supervisor *sv, const struct session_known *k)
{
	char path[4400], tmp[4410], dir[4300];
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/suspended", sv->cfg->state_dir);
	mkdir(dir, 0700);
	suspended_path(sv, k->id, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%s\n", k->snapshot) < 0 || fflush(f) || fsync(fileno(f))) {
		pr_warn("cannot record that session %s is suspended: %s", k->id, strerror(errno));
		if (f)
			fclose(f);
		return;
	}
	fclose(f);
	if (rename(tmp, path))
		pr_warn("cannot record that session %s is suspended: %s", k->id, strerror(errno));
}

static void suspended_forget(struct supervisor *sv, const char *id)
{
	char path[4400];

	suspended_path(sv, id, path, sizeof(path));
	unlink(path);
}

static struct session_known *known_get(struct supervisor *sv, const char *id, bool create);

static void suspended_load(struct supervisor *sv)
{
	char dir[4300];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/suspended", sv->cfg->state_dir);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[4600], name[SNAP_NAME_MAX + 2] = "";
		struct session_known *k;
		FILE *f;

		if (de->d_name[0] == '.' || strstr(de->d_name, ".tmp") || strlen(de->d_name) >= SESSION_ID_MAX)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(name, sizeof(name), f))
			name[strcspn(name, "\n")] = 0;
		fclose(f);
		k = snap_name_valid(name) ? known_get(sv, de->d_name, true) : NULL;
		if (!k)
			continue;
		k->plan = PLAN_SUSPENDED;
		snprintf(k->snapshot, sizeof(k->snapshot), "%s", name);
		snprintf(k->latest, sizeof(k->latest), "%s", name);
		pr_info("session %s is suspended in '%s': `ckpt resume %s` brings it back", k->id, name, k->id);
	}
	closedir(d);
}

static struct session_slot *slot_claim(struct supervisor *sv, unsigned *index)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		uint32_t expect = SESSION_FREE;

		if (atomic_compare_exchange_strong(&sv->slots[i].state, &expect, SESSION_STARTING)) {
			struct session_slot *s = &sv->slots[i];

			memset(s->id, 0, sizeof(s->id));
			memset(s->peer, 0, sizeof(s->peer));
			atomic_store(&s->pid, 0);
			atomic_store(&s->guest_pid, 0);
			atomic_store(&s->device, -1);
			atomic_store(&s->memory, 0);
			atomic_store(&s->calls, 0);
			atomic_store(&s->round_trips, 0);
			atomic_store(&s->started, (uint64_t)time(NULL));
			*index = i;
			return s;
		}
	}
	return NULL;
}

/* The live worker serving @id, other than slot @except. */
static int slot_of_session(struct supervisor *sv, const char *id, int except)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if ((int)i != except && atomic_load(&sv->slots[i].state) != SESSION_FREE &&
		    atomic_load(&sv->slots[i].pid) > 0 && !strcmp(sv->slots[i].id, id))
			return (int)i;
	return -1;
}

static void session_start(struct supervisor *sv, int listen_idx)
{
	const struct transport_url *url = &sv->cfg->listen[listen_idx];
	struct worker_config wcfg = sv->cfg->worker;
	struct session_slot *slot;
	unsigned index;
	int fd = transport_accept(sv->listen_fd[listen_idx]), pair[2], ipc[2] = { -1, -1 };
	pid_t pid;

	if (fd < 0) {
		pr_warn("accept failed: %s", strerror(-fd));
		return;
	}
	slot = slot_claim(sv, &index);
	if (!slot) {
		pr_warn("%d sessions already: connection refused", SESSION_SLOTS);
		close(fd);
		return;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair)) {
		pr_err("socketpair: %s", strerror(errno));
		atomic_store(&slot->state, SESSION_FREE);
		close(fd);
		return;
	}
	/* IPC asks and answers in packets, an fd beside some. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ipc))
		pr_warn("no IPC channel for this session: %s", strerror(errno));
	wcfg.ipc_fd = ipc[1];
	wcfg.require_token = transport_url_needs_token(url);
	wcfg.token = sv->cfg->token[0] ? sv->cfg->token : NULL;
	wcfg.state_dir = sv->cfg->state_dir;
	wcfg.cmd_fd = pair[1];
	transport_url_format(url, slot->peer, sizeof(slot->peer));
	pid = fork();
	if (pid < 0) {
		pr_err("fork failed: %s", strerror(errno));
		atomic_store(&slot->state, SESSION_FREE);
		close(fd);
		close(pair[0]);
		close(pair[1]);
		if (ipc[0] >= 0) {
			close(ipc[0]);
			close(ipc[1]);
		}
		return;
	}
	if (pid == 0) {
		/* The worker keeps only its connection and its line to us. */
		for (unsigned i = 0; i < sv->cfg->listen_count; i++)
			close(sv->listen_fd[i]);
		for (unsigned i = 0; i < SESSION_SLOTS; i++) {
			if (sv->links[i].fd >= 0)
				close(sv->links[i].fd);
			if (sv->links[i].ipc_fd >= 0)
				close(sv->links[i].ipc_fd);
			if (sv->links[i].client_fd >= 0)
				close(sv->links[i].client_fd);
		}
		/* A ckpt client waiting on the supervisor must see its answer's
		 * end when the supervisor closes it, not be held open by us. */
		for (unsigned i = 0; i < SESSIONS_KNOWN; i++)
			if (sv->known[i].client_fd >= 0)
				close(sv->known[i].client_fd);
		close(sv->control_fd);
		close(sv->signal_fd);
		close(pair[0]);
		if (ipc[0] >= 0)
			close(ipc[0]);
		sigprocmask(SIG_SETMASK, &(sigset_t){ 0 }, NULL);
		worker_signals_install();
		_exit(worker_run(&wcfg, fd, slot));
	}
	close(pair[1]);
	if (ipc[1] >= 0)
		close(ipc[1]);
	sv->links[index] = (struct worker_link){ .fd = pair[0], .ipc_fd = ipc[0], .client_fd = -1 };
	atomic_store(&slot->pid, pid);
	sv->sessions_started++;
	close(fd);
}

static int link_send(struct worker_link *l, const struct control_link *m)
{
	char *line = NULL;
	size_t len = 0;
	int ret = control_link_encode(m, &line, &len);

	if (!ret)
		ret = control_write_all(l->fd, line, len);
	free(line);
	return ret;
}

/* A worker read the hello of @id: tell it whether to start fresh, restore,
 * wait for a resume, or give up. */
static void worker_hello(struct supervisor *sv, unsigned index, const char *id)
{
	struct worker_link *l = &sv->links[index];
	struct session_known *k = known_get(sv, id, false);
	int other = slot_of_session(sv, id, (int)index);

	if (k && k->plan == PLAN_RESTORE) {
		suspended_forget(sv, id);
		pr_info("session %s: worker %d restores '%s'", id, atomic_load(&sv->slots[index].pid), k->snapshot);
		struct control_link m = { .type = CONTROL_LINK_RESTORE, .device = k->device };

		memcpy(m.snapshot, k->snapshot, sizeof(k->snapshot));
		link_send(l, &m);
		/* Whoever asked for the restore hears when it is done. */
		l->client_fd = k->client_fd;
		k->client_fd = -1;
		k->plan = PLAN_NONE;
		return;
	}
	if (k && k->plan == PLAN_SUSPENDED) {
		link_send(l, &(struct control_link){ .type = CONTROL_LINK_WAIT });
		k->waiting_slot = (int)index;
		return;
	}
	if (other >= 0) {
		struct control_link m = { .type = CONTROL_LINK_REFUSE };

		snprintf(m.reason, sizeof(m.reason), "session %s is served by worker %d", id,
			 atomic_load(&sv->slots[other].pid));
		link_send(l, &m);
		return;
	}
	link_send(l, &(struct control_link){ .type = CONTROL_LINK_NEW });
}

static void worker_line(struct supervisor *sv, unsigned index, char *line, size_t len)
{
	struct worker_link *l = &sv->links[index];
	struct session_slot *slot = &sv->slots[index];
	struct control_link m;
	char err[256];

	if (control_link_decode(line, len, &m, err, sizeof(err))) {
		pr_warn("worker %d: bad message (%s): '%.60s'", atomic_load(&slot->pid), err, line);
	} else if (m.type == CONTROL_LINK_HELLO) {
		if (strlen(m.session) < SESSION_ID_MAX)
			worker_hello(sv, index, m.session);
	} else if (m.type == CONTROL_LINK_READY) {
		pr_debug("worker %d ready", atomic_load(&slot->pid));
		client_finish(&l->client_fd, &m.reply);
	} else if (m.type == CONTROL_LINK_PROGRESS) {
		client_send(&l->client_fd, &m.reply);
	} else if (m.type == CONTROL_LINK_RESULT) {
		bool ok = m.reply.kind == CONTROL_REPLY_SNAPSHOT;
		struct session_known *k = known_get(sv, slot->id, ok);

		if (ok && k) {
			snprintf(k->latest, sizeof(k->latest), "%s", l->snapshot);
			if (l->suspending && k->resume_pending) {
				/* Its client waits on k->client_fd for the restore. */
				k->plan = PLAN_RESTORE;
				snprintf(k->snapshot, sizeof(k->snapshot), "%s", l->snapshot);
				pr_info("session %s suspended in '%s' and resumed at its reconnect", slot->id,
					l->snapshot);
			} else if (l->suspending) {
				k->plan = PLAN_SUSPENDED;
				snprintf(k->snapshot, sizeof(k->snapshot), "%s", l->snapshot);
				suspended_save(sv, k);
				pr_info("session %s suspended in '%s'", slot->id, l->snapshot);
			}
		}
		k = known_get(sv, slot->id, false);
		if (!ok && k && k->resume_pending)
			client_fail(&k->client_fd, "the suspend of session %s failed: nothing to resume", slot->id);
		if (k)
			k->resume_pending = false;
		l->suspending = false;
		client_finish(&l->client_fd, &m.reply);
	} else {
		pr_warn("worker %d: unexpected %s message", atomic_load(&slot->pid),
			control_link_type_name(m.type));
	}
	control_link_release(&m);
}

static void worker_readable(struct supervisor *sv, unsigned index)
{
	struct worker_link *l = &sv->links[index];
	ssize_t n = read(l->fd, l->buf + l->len, sizeof(l->buf) - 1 - l->len);
	char *nl;

	if (n <= 0) {
		close(l->fd);
		l->fd = -1;
		return;
	}
	l->len += (size_t)n;
	l->buf[l->len] = 0;
	while ((nl = strchr(l->buf, '\n'))) {
		*nl = 0;
		worker_line(sv, index, l->buf, (size_t)(nl - l->buf));
		memmove(l->buf, nl + 1, l->len - (size_t)(nl + 1 - l->buf) + 1);
		l->len -= (size_t)(nl + 1 - l->buf);
	}
	if (l->len == sizeof(l->buf) - 1)
		l->len = 0;
}

static void ipc_link_close(struct supervisor *sv, unsigned index)
{
	struct worker_link *l = &sv->links[index];

	if (l->ipc_fd >= 0)
		close(l->ipc_fd);
	l->ipc_fd = -1;
	ipc_broker_drop_owner(sv->ipc, index);
}

static struct session_slot *slot_by_pid(struct supervisor *sv, pid_t pid, unsigned *index)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (atomic_load(&sv->slots[i].state) != SESSION_FREE && atomic_load(&sv->slots[i].pid) == pid) {
			*index = i;
			return &sv->slots[i];
		}
	return NULL;
}

static void workers_reap(struct supervisor *sv)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		unsigned index = 0;
		struct session_slot *s = slot_by_pid(sv, pid, &index);
		const char *id = s && s->id[0] ? s->id : "(no hello)";

		if (WIFSIGNALED(status))
			pr_warn("session %s: worker %d killed by signal %d", id, pid, WTERMSIG(status));
		else if (WEXITSTATUS(status))
			pr_info("session %s: worker %d exited with %d", id, pid, WEXITSTATUS(status));
		else
			pr_info("session %s: worker %d done", id, pid);
		if (!s)
			continue;
		/* Its exports go with it; sessions that opened them keep their mappings. */
		ipc_link_close(sv, index);
		/* Read what it said last before forgetting it. */
		while (sv->links[index].fd >= 0)
			worker_readable(sv, index);
		client_fail(&sv->links[index].client_fd,
			    "the session's worker exited before answering; see ternd's log");
		for (unsigned i = 0; i < SESSIONS_KNOWN; i++)
			if (sv->known[i].waiting_slot == (int)index)
				sv->known[i].waiting_slot = -1;
		atomic_store(&s->state, SESSION_FREE);
	}
}

/* The answer to status; @r is released by the caller. */
static int reply_status(struct supervisor *sv, struct control_reply *r)
{
	struct control_status *st = &r->status;
	struct control_session_info *e;

	r->kind = CONTROL_REPLY_STATUS;
	st->pid = (int32_t)getpid();
	snprintf(st->backend, sizeof(st->backend), "%s", sv->cfg->worker.backend);
	snprintf(st->state_dir, sizeof(st->state_dir), "%s", sv->cfg->state_dir);
	st->sessions_started = sv->sessions_started;
	st->sessions = calloc(SESSION_SLOTS + SESSIONS_KNOWN, sizeof(*st->sessions));
	if (!st->sessions)
		return -ENOMEM;
	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		struct session_slot *s = &sv->slots[i];
		uint32_t state = atomic_load(&s->state);
		struct session_known *k;

		/* A connection whose hello has not named its session yet is no
		 * session to list (and an entry's id may not be empty). */
		if (state == SESSION_FREE || !atomic_load(&s->pid) || !s->id[0])
			continue;
		k = known_get(sv, s->id, false);
		e = &st->sessions[st->session_count++];
		snprintf(e->id, sizeof(e->id), "%s", s->id);
		e->pid = atomic_load(&s->pid);
		e->guest_pid = atomic_load(&s->guest_pid);
		snprintf(e->state, sizeof(e->state), "%s",
			 (k && k->plan == PLAN_SUSPENDED) || (k && k->waiting_slot == (int)i) ? "suspended" :
			 state == SESSION_ACTIVE ? "active" : "starting");
		e->device = atomic_load(&s->device);
		e->memory = atomic_load(&s->memory);
		e->calls = atomic_load(&s->calls);
		e->round_trips = atomic_load(&s->round_trips);
		e->started = atomic_load(&s->started);
		snprintf(e->listener, sizeof(e->listener), "%s", s->peer);
		snprintf(e->snapshot, sizeof(e->snapshot), "%s", k ? k->latest : "");
	}
	/* Suspended sessions have no worker but are sessions all the same. */
	for (unsigned i = 0; i < SESSIONS_KNOWN; i++) {
		struct session_known *k = &sv->known[i];

		if (!k->id[0] || k->plan == PLAN_NONE || slot_of_session(sv, k->id, -1) >= 0)
			continue;
		e = &st->sessions[st->session_count++];
		snprintf(e->id, sizeof(e->id), "%s", k->id);
		snprintf(e->state, sizeof(e->state), "%s", k->plan == PLAN_SUSPENDED ? "suspended" : "restoring");
		e->device = k->device;
		snprintf(e->snapshot, sizeof(e->snapshot), "%s", k->snapshot);
	}
	return 0;
}

static void store_path(struct supervisor *sv, char *out, size_t cap)
{
	snprintf(out, cap, "%s/store", sv->cfg->state_dir);
}

static void reply_snapshots(struct supervisor *sv, int client)
{
	char dir[4200];
	struct snap_store *store = NULL;
	struct snap_info *list = NULL;
	struct control_reply r = { .kind = CONTROL_REPLY_SNAPSHOTS };
	struct control_snapshots *ss = &r.snapshots;
	unsigned count = 0;
	int ret;

	store_path(sv, dir, sizeof(dir));
	ret = snap_store_open(dir, NULL, SNAP_STORE_CREATE, &store);
	if (!ret)
		ret = snap_store_list(store, &list, &count);
	if (!ret && count > CONTROL_LIST_MAX)
		ret = -E2BIG;
	if (!ret) {
		ss->snapshots = calloc(count ? count : 1, sizeof(*ss->snapshots));
		ret = ss->snapshots ? 0 : -ENOMEM;
	}
	if (ret) {
		control_reply_error(&r, "cannot list the snapshot store %s: %s", dir, strerror(-ret));
		goto out;
	}
	store_path(sv, ss->store, sizeof(ss->store));
	for (unsigned i = 0; i < count; i++) {
		struct control_snapshot_info *e = &ss->snapshots[ss->count++];
		struct snap_manifest m;

		if (!snap_store_manifest_get(store, list[i].name, &m))
			snprintf(e->session, sizeof(e->session), "%s", m.session_id);
		snprintf(e->name, sizeof(e->name), "%s", list[i].name);
		snprintf(e->parent, sizeof(e->parent), "%s", list[i].parent);
		e->created_ns = list[i].created_ns;
		e->logical_bytes = list[i].logical_bytes;
		e->stored_bytes = list[i].stored_bytes;
		e->complete = list[i].complete;
	}
out:
	client_finish(&client, &r);
	control_reply_release(&r);
	free(list);
	snap_store_close(store);
}

/* snapshot (session, snapshot, incremental) and suspend (session). */
static void request_snapshot(struct supervisor *sv, int client, const struct control_request *req)
{
	struct control_link m = { .type = CONTROL_LINK_SNAPSHOT, .suspend = req->op == CONTROL_OP_SUSPEND };
	struct session_known *k;
	struct worker_link *l;
	struct timespec ts;
	int index;

	index = slot_of_session(sv, req->session, -1);
	if (index < 0 || atomic_load(&sv->slots[index].state) != SESSION_ACTIVE) {
		client_fail(&client, "no active session '%s': see `ckpt ls`", req->session);
		return;
	}
	if (req->snapshot[0] && !snap_name_valid(req->snapshot)) {
		client_fail(&client, "invalid snapshot name '%s': use 1-%d of A-Z a-z 0-9 . _ -, not starting "
			    "with '.'", req->snapshot, SNAP_NAME_MAX);
		return;
	}
	l = &sv->links[index];
	if (l->client_fd >= 0 || l->fd < 0) {
		client_fail(&client, "the session is busy with another snapshot; retry when it is done");
		return;
	}
	k = known_get(sv, req->session, true);
	if (req->incremental) {
		if (!k || !k->latest[0]) {
			client_fail(&client, "no earlier snapshot of this session to base an incremental one on; "
				    "take a full snapshot first");
			return;
		}
		memcpy(m.parent, k->latest, sizeof(k->latest));
	}
	if (req->snapshot[0]) {
		memcpy(m.snapshot, req->snapshot, sizeof(req->snapshot));
	} else {
		/* Live session ids are already valid names (the worker cleans them). */
		clock_gettime(CLOCK_REALTIME, &ts);
		snprintf(m.snapshot, sizeof(m.snapshot), "%.40s-%lld%03ld", req->session, (long long)ts.tv_sec,
			 ts.tv_nsec / 1000000);
	}
	memcpy(l->snapshot, m.snapshot, sizeof(l->snapshot));
	l->suspending = m.suspend;
	l->client_fd = client;
	if (link_send(l, &m)) {
		l->client_fd = -1;
		client_fail(&client, "the session's worker does not answer");
	}
}

/* resume (session: a suspended session or a snapshot; device) and restore
 * (snapshot; device). */
static void request_restore(struct supervisor *sv, int client, const struct control_request *req)
{
	char dir[4200], session[SESSION_ID_MAX] = "", snapshot[SNAP_NAME_MAX + 1] = "";
	const char *name = req->op == CONTROL_OP_RESUME ? req->session : req->snapshot;
	struct session_known *k = NULL;
	struct snap_manifest m;
	struct snap_store *store = NULL;
	int device = req->device >= 0 ? req->device : sv->cfg->worker.exec_cfg.device, live;

	if (req->op == CONTROL_OP_RESUME) {
		int running = slot_of_session(sv, name, -1);

		k = known_get(sv, name, false);
		if (running >= 0 && sv->links[running].suspending && (!k || k->plan != PLAN_SUSPENDED)) {
			/* A resume that overtook its suspend (the CRIU plugin undoing
			 * a dump that gave up waiting): done when the suspend is. */
			k = known_get(sv, name, true);
			if (!k) {
				client_fail(&client, "too many sessions known");
				return;
			}
			if (k->client_fd >= 0)
				close(k->client_fd);
			k->client_fd = client;
			k->device = device;
			k->resume_pending = true;
			pr_info("session %s: resumed as soon as its suspend is done", name);
			return;
		}
	}
	if (k && k->plan == PLAN_SUSPENDED) {
		snprintf(session, sizeof(session), "%s", k->id);
		snprintf(snapshot, sizeof(snapshot), "%s", k->snapshot);
	} else {
		/* A snapshot name: its manifest says whose it is. */
		store_path(sv, dir, sizeof(dir));
		if (!snap_name_valid(name)) {
			client_fail(&client, "'%s' is neither a suspended session nor a valid snapshot name: "
				    "see `ckpt ls`", name);
			return;
		}
		if (snap_store_open(dir, NULL, 0, &store) || snap_store_manifest_get(store, name, &m)) {
			client_fail(&client, "'%s' is neither a suspended session nor a complete snapshot in %s: "
				    "see `ckpt ls`", name, dir);
			snap_store_close(store);
			return;
		}
		snap_store_close(store);
		snprintf(session, sizeof(session), "%s", m.session_id);
		snprintf(snapshot, sizeof(snapshot), "%s", name);
		k = known_get(sv, session, true);
		if (!k) {
			client_fail(&client, "too many sessions known");
			return;
		}
	}
	if (k->client_fd >= 0)
		close(k->client_fd);
	k->plan = PLAN_RESTORE;
	k->device = device;
	snprintf(k->snapshot, sizeof(k->snapshot), "%s", snapshot);
	k->client_fd = client;
	if (k->waiting_slot >= 0) {
		/* A worker holds the guest's reconnect already: restore now. */
		worker_hello(sv, (unsigned)k->waiting_slot, session);
		k->waiting_slot = -1;
		return;
	}
	live = slot_of_session(sv, session, -1);
	if (live >= 0) {
		/* Its guest reconnects to the restored state. */
		pr_info("session %s: stopping worker %d for the restore of '%s'", session,
			atomic_load(&sv->slots[live].pid), snapshot);
		kill(atomic_load(&sv->slots[live].pid), SIGKILL);
	}
	pr_info("session %s: '%s' is restored when its guest reconnects", session, snapshot);
}

static void control_serve(struct supervisor *sv)
{
	struct control_reply reply = { 0 };
	struct control_request req;
	char line[CONTROL_REQUEST_MAX], err[256];
	int fd = transport_accept(sv->control_fd), n;

	if (fd < 0)
		return;
	n = control_line_read(fd, line, sizeof(line), 2000);
	if (n < 0) {
		if (n == -EMSGSIZE)
			client_fail(&fd, "request longer than %d bytes", CONTROL_REQUEST_MAX);
		if (fd >= 0)
			close(fd);
		return;
	}
	if (control_request_decode(line, (size_t)n, &req, err, sizeof(err))) {
		client_fail(&fd, "bad request: %s (is ckpt from the same build as ternd?)", err);
		return;
	}
	switch (req.op) {
	case CONTROL_OP_STATUS:
		if (reply_status(sv, &reply))
			control_reply_error(&reply, "out of memory");
		client_finish(&fd, &reply);
		control_reply_release(&reply);
		break;
	case CONTROL_OP_SNAPSHOT:
	case CONTROL_OP_SUSPEND:
		request_snapshot(sv, fd, &req);
		break;
	case CONTROL_OP_RESUME:
	case CONTROL_OP_RESTORE:
		request_restore(sv, fd, &req);
		break;
	case CONTROL_OP_SNAPSHOTS:
		reply_snapshots(sv, fd);
		break;
	}
}

static void workers_stop(struct supervisor *sv)
{
	struct timespec start, now;

	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (atomic_load(&sv->slots[i].state) != SESSION_FREE && atomic_load(&sv->slots[i].pid) > 0)
			kill(atomic_load(&sv->slots[i].pid), SIGTERM);
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		bool left = false;

		workers_reap(sv);
		for (unsigned i = 0; i < SESSION_SLOTS; i++)
			left |= atomic_load(&sv->slots[i].state) != SESSION_FREE;
		if (!left)
			return;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >
		    sv->cfg->shutdown_grace_ms)
			break;
		usleep(10000);
	}
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (atomic_load(&sv->slots[i].state) != SESSION_FREE && atomic_load(&sv->slots[i].pid) > 0) {
			pr_warn("worker %d did not stop: killed", atomic_load(&sv->slots[i].pid));
			kill(atomic_load(&sv->slots[i].pid), SIGKILL);
		}
	while (waitpid(-1, NULL, 0) > 0)
		;
}

int supervisor_run(struct supervisor_config *cfg)
{
	static struct supervisor sv;
	struct pollfd pfd[SUPERVISOR_LISTEN_MAX + 2 + 2 * SESSION_SLOTS];
	unsigned link_of[SESSION_SLOTS], ipc_of[SESSION_SLOTS];
	struct transport_url control_url = { .kind = TRANSPORT_UNIX };
	sigset_t mask;
	unsigned i;
	int status = 1;
	bool running = true;

	sv.cfg = cfg;
	sv.control_fd = -1;
	sv.signal_fd = -1;
	for (i = 0; i < SUPERVISOR_LISTEN_MAX; i++)
		sv.listen_fd[i] = -1;
	for (i = 0; i < SESSION_SLOTS; i++)
		sv.links[i] = (struct worker_link){ .fd = -1, .ipc_fd = -1, .client_fd = -1 };
	if (ipc_broker_create(&sv.ipc)) {
		pr_err("cannot create the IPC table");
		return 1;
	}
	for (i = 0; i < SESSIONS_KNOWN; i++)
		sv.known[i] = (struct session_known){ .client_fd = -1, .waiting_slot = -1 };
	suspended_load(&sv);
	sv.slots = mmap(NULL, SESSION_SLOTS * sizeof(*sv.slots), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sv.slots == MAP_FAILED) {
		pr_err("cannot map the session table: %s", strerror(errno));
		return 1;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	sv.signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	for (i = 0; i < cfg->listen_count; i++) {
		char text[300];

		transport_url_format(&cfg->listen[i], text, sizeof(text));
		if (transport_url_needs_token(&cfg->listen[i]) && !cfg->token[0])
			pr_warn("%s needs a token (--token-file): every guest will be refused", text);
		sv.listen_fd[i] = transport_listen(&cfg->listen[i]);
		if (sv.listen_fd[i] < 0) {
			pr_err("cannot listen on %s: %s", text, strerror(-sv.listen_fd[i]));
			goto out;
		}
		pr_info("listening on %s", text);
	}
	snprintf(control_url.path, sizeof(control_url.path), "%s", cfg->control_path);
	sv.control_fd = transport_listen(&control_url);
	if (sv.control_fd < 0) {
		pr_err("cannot listen on the control socket %s: %s", cfg->control_path, strerror(-sv.control_fd));
		goto out;
	}
	pr_info("ternd ready: backend %s, control %s, state %s", cfg->worker.backend, cfg->control_path,
		cfg->state_dir);
	while (running) {
		unsigned n = 0, links = 0, ipcs = 0, ipc_at;

		for (i = 0; i < cfg->listen_count; i++)
			pfd[n++] = (struct pollfd){ .fd = sv.listen_fd[i], .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = sv.control_fd, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = sv.signal_fd, .events = POLLIN };
		for (i = 0; i < SESSION_SLOTS; i++)
			if (sv.links[i].fd >= 0) {
				link_of[links++] = i;
				pfd[n++] = (struct pollfd){ .fd = sv.links[i].fd, .events = POLLIN };
			}
		ipc_at = n;
		for (i = 0; i < SESSION_SLOTS; i++)
			if (sv.links[i].ipc_fd >= 0) {
				ipc_of[ipcs++] = i;
				pfd[n++] = (struct pollfd){ .fd = sv.links[i].ipc_fd, .events = POLLIN };
			}
		if (poll(pfd, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			pr_err("poll: %s", strerror(errno));
			break;
		}
		for (i = 0; i < cfg->listen_count; i++)
			if (pfd[i].revents & POLLIN)
				session_start(&sv, (int)i);
		if (pfd[cfg->listen_count].revents & POLLIN)
			control_serve(&sv);
		for (i = 0; i < links; i++)
			if (pfd[cfg->listen_count + 2 + i].revents & (POLLIN | POLLHUP) && sv.links[link_of[i]].fd >= 0)
				worker_readable(&sv, link_of[i]);
		for (i = 0; i < ipcs; i++)
			if (pfd[ipc_at + i].revents & (POLLIN | POLLHUP | POLLERR) &&
			    sv.links[ipc_of[i]].ipc_fd >= 0 &&
			    ipc_broker_serve(sv.ipc, sv.links[ipc_of[i]].ipc_fd, ipc_of[i]))
				ipc_link_close(&sv, ipc_of[i]);
		if (pfd[cfg->listen_count + 1].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(sv.signal_fd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGCHLD) {
					workers_reap(&sv);
				} else if (si.ssi_signo != SIGHUP) {
					pr_info("signal %u: shutting down", si.ssi_signo);
					running = false;
				}
			}
		}
	}
	status = 0;
out:
	for (i = 0; i < cfg->listen_count; i++) {
		if (sv.listen_fd[i] >= 0)
			close(sv.listen_fd[i]);
		if (cfg->listen[i].kind == TRANSPORT_UNIX && sv.listen_fd[i] >= 0)
			unlink(cfg->listen[i].path);
	}
	if (sv.control_fd >= 0) {
		close(sv.control_fd);
		unlink(cfg->control_path);
	}
	workers_stop(&sv);
	if (sv.signal_fd >= 0)
		close(sv.signal_fd);
	for (i = 0; i < SESSION_SLOTS; i++)
		if (sv.links[i].ipc_fd >= 0)
			close(sv.links[i].ipc_fd);
	ipc_broker_destroy(sv.ipc);
	munmap(sv.slots, SESSION_SLOTS * sizeof(*sv.slots));
	pr_info("ternd stopped");
	return status;
}
