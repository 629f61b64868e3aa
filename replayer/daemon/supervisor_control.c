/* The control socket's side of the supervisor: its clients (accepted,
 * checked by SO_PEERCRED, read to a whole line within their deadline, then
 * handed to control_dispatch) and the answers that only read the
 * supervisor's tables (status, snapshots).
 */
#define LOG_PREFIX "supervisor: "
#include "supervisor_internal.h"
#include "control.h"
#include "control_msg.h"
#include "log.h"
#include "metrics_text.h"
#include "monotonic.h"
#include "snap_store.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Which domain a session in status is of ("" for a guest of the sockets). */
static void session_domain_fill(struct supervisor *sv, struct control_session_info *e)
{
	const struct vm_domain *d;

	if (!vm_session_id_valid(e->id))
		return;
	memcpy(e->domain_uuid, e->id, VM_UUID_LEN);
	e->domain_uuid[VM_UUID_LEN] = 0;
	d = vm_domain_of_session(sv, e->id);
	if (d)
		snprintf(e->domain_name, sizeof(e->domain_name), "%s", d->name);
}

/* The answer to status; @r is released by the caller. */
int reply_status(struct supervisor *sv, struct control_reply *r)
{
	struct control_status *st = &r->status;
	struct control_session_info *e;

	r->kind = CONTROL_REPLY_STATUS;
	st->pid = (int32_t)getpid();
	snprintf(st->backend, sizeof(st->backend), "%s", sv->cfg->worker.backend);
	snprintf(st->state_dir, sizeof(st->state_dir), "%s", sv->cfg->state_dir);
	st->sessions_started = sv->sessions_started;
	st->counters = sv->counters;
	st->counters.quota = sv->cfg->worker.exec_cfg.quota;
	st->sessions = calloc(SESSION_SLOTS + sv->cfg->sessions_max, sizeof(*st->sessions));
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
		session_domain_fill(sv, e);
	}
	/* Suspended sessions have no worker but are sessions all the same. */
	for (unsigned i = 0; i < sv->cfg->sessions_max; i++) {
		struct session_known *k = &sv->known[i];

		if (!k->id[0] || k->plan == PLAN_NONE || slot_of_session(sv, k->id, -1) >= 0)
			continue;
		e = &st->sessions[st->session_count++];
		snprintf(e->id, sizeof(e->id), "%s", k->id);
		snprintf(e->state, sizeof(e->state), "%s", k->plan == PLAN_SUSPENDED ? "suspended" : "restoring");
		e->device = k->device;
		snprintf(e->snapshot, sizeof(e->snapshot), "%s", k->snapshot);
		session_domain_fill(sv, e);
	}
	return 0;
}

/* The snapshots answer in @r (released by the caller): 0, or -errno with
 * @r an error that says why. */
static int snapshots_list(struct supervisor *sv, struct control_reply *r)
{
	char dir[4200];
	struct snap_store *store = NULL;
	struct snap_info *list = NULL;
	struct control_snapshots *ss = &r->snapshots;
	unsigned count = 0;
	int ret;

	r->kind = CONTROL_REPLY_SNAPSHOTS;
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
		control_reply_error(r, "cannot list the snapshot store %s: %s", dir, strerror(-ret));
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
	free(list);
	snap_store_close(store);
	return ret;
}

void reply_snapshots(struct supervisor *sv, int client)
{
	struct control_reply r = { 0 };

	snapshots_list(sv, &r);
	client_finish(&client, &r);
	control_reply_release(&r);
}

int metrics_body(void *opaque, char **text, size_t *len)
{
	struct supervisor *sv = opaque;
	struct control_reply st = { 0 }, sn = { 0 };
	FILE *out;
	int ret = reply_status(sv, &st);

	*text = NULL;
	*len = 0;
	if (!ret)
		ret = snapshots_list(sv, &sn);
	if (ret)
		goto out;
	out = open_memstream(text, len);
	if (!out) {
		ret = -errno;
		goto out;
	}
	ret = metrics_text_write(out, &st.status, &sn.snapshots);
	if (fclose(out) && !ret)
		ret = -EIO;
out:
	control_reply_release(&st);
	control_reply_release(&sn);
	return ret;
}

/* snapshot (session, snapshot, incremental) and suspend (session). */
/* May this peer of the control socket snapshot, restore and list sessions?
 * root, ternd's own uid, or a member of --socket-group. */
static bool control_peer_allowed(struct supervisor *sv, int fd, struct ucred *cred)
{
	socklen_t len = sizeof(*cred);
	gid_t groups[256];
	int ngroups = 256;
	struct passwd pw, *found = NULL;
	char buf[4096];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len))
		return false;
	if (cred->uid == 0 || cred->uid == geteuid())
		return true;
	if (!sv->cfg->socket_group_set)
		return false;
	if (cred->gid == sv->cfg->socket_group)
		return true;
	if (getpwuid_r(cred->uid, &pw, buf, sizeof(buf), &found) || !found ||
	    getgrouplist(found->pw_name, found->pw_gid, groups, &ngroups) < 0)
		return false;
	for (int i = 0; i < ngroups; i++)
		if (groups[i] == sv->cfg->socket_group)
			return true;
	return false;
}

void control_accept(struct supervisor *sv)
{
	int fd = transport_accept(sv->control_fd);
	struct control_client *free_client = NULL;
	struct ucred cred;

	if (fd < 0)
		return;
	bool allowed = control_peer_allowed(sv, fd, &cred);

	if (!allowed)
		pr_warn("control socket: uid %u gid %u may not use it: refused", (unsigned)cred.uid,
			(unsigned)cred.gid);
	for (unsigned i = 0; i < CONTROL_CLIENTS_MAX && !free_client; i++)
		if (sv->clients[i].fd < 0)
			free_client = &sv->clients[i];
	if (!free_client) {
		client_fail(&fd, "%d control clients are waiting already; retry", CONTROL_CLIENTS_MAX);
		return;
	}
	/* A refused peer hears why once its request is in: an answer before
	 * it has written would only break its pipe. */
	free_client->fd = fd;
	free_client->refused = !allowed;
	free_client->uid = cred.uid;
	free_client->len = 0;
	free_client->deadline_ms = monotonic_ms() + CONTROL_CLIENT_TIMEOUT_MS;
}

void control_client_readable(struct supervisor *sv, struct control_client *cl)
{
	ssize_t n = recv(cl->fd, cl->line + cl->len, sizeof(cl->line) - cl->len, MSG_DONTWAIT);
	char *nl;
	int fd;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		close(cl->fd);
		cl->fd = -1;
		return;
	}
	cl->len += (size_t)n;
	nl = memchr(cl->line, '\n', cl->len);
	if (!nl) {
		if (cl->len == sizeof(cl->line)) {
			fd = cl->fd;
			cl->fd = -1;
			client_fail(&fd, "request longer than %d bytes", CONTROL_REQUEST_MAX);
		}
		return;
	}
	*nl = 0;
	fd = cl->fd;
	cl->fd = -1;
	if (cl->refused)
		client_fail(&fd, "uid %u may not use ternd's control socket (root, ternd's uid or its "
			    "--socket-group only)", (unsigned)cl->uid);
	else
		control_dispatch(sv, fd, cl->line, (size_t)(nl - cl->line));
}

/* Close control clients that sent no whole line in time; the ms until the
 * next deadline, or -1. */
int control_clients_expire(struct supervisor *sv)
{
	uint64_t now = monotonic_ms(), next = UINT64_MAX;

	for (unsigned i = 0; i < CONTROL_CLIENTS_MAX; i++) {
		struct control_client *cl = &sv->clients[i];

		if (cl->fd < 0)
			continue;
		if (cl->deadline_ms <= now) {
			close(cl->fd);
			cl->fd = -1;
		} else if (cl->deadline_ms < next) {
			next = cl->deadline_ms;
		}
	}
	return next == UINT64_MAX ? -1 : (int)(next - now);
}

