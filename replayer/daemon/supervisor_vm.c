/* The supervisor's libvirt domains (docs/libvirt.md, "ternd's side"): the
 * registry of attached domains, each with its QEMU-facing socket and its
 * relay child; the vm-* control ops; the consistent snapshot of all of a
 * domain's sessions (every worker held at a call boundary before any is
 * copied); the checks and plans of a saved generation's restore.
 *
 * Identity comes from the channel: the relay of domain U hands each stream
 * it opens to the supervisor over a socketpair that only it holds
 * (SCM_RIGHTS), and the stream enters the pre-authentication stage marked
 * with U, so that its session id becomes "U/guest-id" (session_hello).
 */
#define LOG_PREFIX "supervisor: "
#include "supervisor_internal.h"
#include "control.h"
#include "fdpass.h"
#include "log.h"
#include "monotonic.h"
#include "relay.h"
#include "restore_check.h"
#include "snap_store.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A vm-snapshot's prefix: room for "-N" after it in a snapshot name. */
#define VM_PREFIX_MAX (SNAP_SNAPSHOT_NAME_MAX - 11)
/* How long a restore waits for the domain's previous run to be saved. */
#define VM_RESTORE_WAIT_MS 30000

static int domain_index(struct supervisor *sv, const struct vm_domain *d)
{
	return (int)(d - sv->domains);
}

static struct vm_domain *domain_find(struct supervisor *sv, const char *uuid)
{
	for (unsigned i = 0; i < VM_DOMAINS_MAX; i++)
		if (sv->domains[i].used && !strcmp(sv->domains[i].uuid, uuid))
			return &sv->domains[i];
	return NULL;
}

/* vm-snapshot names a domain by its name or its uuid. */
static struct vm_domain *domain_find_named(struct supervisor *sv, const char *name_or_uuid)
{
	struct vm_domain *d = domain_find(sv, name_or_uuid);

	for (unsigned i = 0; i < VM_DOMAINS_MAX && !d; i++)
		if (sv->domains[i].used && !strcmp(sv->domains[i].name, name_or_uuid))
			d = &sv->domains[i];
	return d;
}

const struct vm_domain *vm_domain_of_session(struct supervisor *sv, const char *id)
{
	char uuid[VM_UUID_LEN + 1];

	if (!vm_session_id_valid(id))
		return NULL;
	memcpy(uuid, id, VM_UUID_LEN);
	uuid[VM_UUID_LEN] = 0;
	return domain_find(sv, uuid);
}

static void record_path(struct supervisor *sv, const char *uuid, char *out, size_t cap)
{
	snprintf(out, cap, "%s/vm/%s" SNAP_VM_DOMAIN_EXT, sv->cfg->state_dir, uuid);
}

static int socket_path(struct supervisor *sv, const char *uuid, char *out, size_t cap)
{
	return snprintf(out, cap, "%s/%s.sock", sv->cfg->vm_dir, uuid) < (int)cap ? 0 : -ENAMETOOLONG;
}

/* The domain's record, or a fresh one (no generations) when it has none. */
static int record_load(struct supervisor *sv, const char *uuid, const char *name, struct snap_vm_domain *rec)
{
	char path[4300];
	int ret;

	record_path(sv, uuid, path, sizeof(path));
	ret = snap_vm_domain_read(path, rec);
	if (ret == -ENOENT && name) {
		snprintf(rec->uuid, sizeof(rec->uuid), "%s", uuid);
		snprintf(rec->name, sizeof(rec->name), "%s", name);
		return 0;
	}
	if (ret)
		pr_warn("domain %s: its record %s: %s", uuid, path, strerror(-ret));
	return ret;
}

static int record_save(struct supervisor *sv, const struct snap_vm_domain *rec)
{
	char path[4300];
	int ret;

	snprintf(path, sizeof(path), "%s/vm", sv->cfg->state_dir);
	mkdir(path, 0700);
	record_path(sv, rec->uuid, path, sizeof(path));
	ret = snap_vm_domain_write(path, rec);
	if (ret)
		pr_err("domain %s: cannot write its record %s: %s", rec->uuid, path, strerror(-ret));
	return ret;
}

/* ---- the relay and its streams ---- */

/* One fd in an SCM_RIGHTS message of one byte. */
static int fd_send(int sock, int fd)
{
	char byte = 'S';

	return fdpass_send(sock, &byte, 1, &fd, 1);
}

/* The next fd the relay sent: >= 0, -EAGAIN (none now), -EPIPE (the relay
 * is gone), -EBADMSG (a message without exactly one fd: dropped). */
static int fd_recv(int sock)
{
	char byte;
	int fd = -1, got;
	ssize_t n = fdpass_recv(sock, &byte, 1, &fd, 1, &got, MSG_DONTWAIT);

	if (n < 0)
		return n == -EAGAIN || n == -EWOULDBLOCK ? -EAGAIN : -EPIPE;
	if (n == 0)
		return -EPIPE;
	if (got == 1)
		return fd;
	if (got > 1)
		close(fd);
	return -EBADMSG;
}

/* In the relay child: a fresh stream into the supervisor (relay.h). */
static int relay_stream_open(void *opaque)
{
	int handoff = *(int *)opaque, pair[2], ret;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair))
		return -errno;
	ret = fd_send(handoff, pair[1]);
	close(pair[1]);
	if (ret) {
		close(pair[0]);
		return ret;
	}
	return pair[0];
}

/* @client: the control client being answered (the relay must not hold
 * its connection open), or -1. */
static int relay_start(struct supervisor *sv, struct vm_domain *d, int client)
{
	int handoff[2], ctl[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, handoff))
		return -errno;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl)) {
		close(handoff[0]);
		close(handoff[1]);
		return -errno;
	}
	pid = fork();
	if (pid < 0) {
		int ret = -errno;

		close(handoff[0]);
		close(handoff[1]);
		close(ctl[0]);
		close(ctl[1]);
		return ret;
	}
	if (pid == 0) {
		int listen_fd = dup(d->listen_fd), mine = handoff[1];

		/* The relay keeps its domain's socket and its two lines to us. */
		supervisor_child_close(sv, NULL);
		if (client >= 0)
			close(client);
		close(handoff[0]);
		close(ctl[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		sigprocmask(SIG_SETMASK, &(sigset_t){ 0 }, NULL);
		_exit(vm_relay_serve(listen_fd, relay_stream_open, &mine, ctl[1]) ? 1 : 0);
	}
	close(handoff[1]);
	close(ctl[1]);
	d->handoff_fd = handoff[0];
	d->relay_ctl = ctl[0];
	d->relay_pid = pid;
	pr_info("domain %s (%s): relay %d", d->uuid, d->name, pid);
	return 0;
}

/* Closing its control line ends the relay; it is reaped with the workers. */
static void relay_stop(struct supervisor *sv, struct vm_domain *d)
{
	int index = domain_index(sv, d);

	/* Its streams that have not sent their hello go too: the entry may be
	 * another domain's before their deadline. */
	for (unsigned i = 0; i < sv->preauth.cfg.max; i++)
		if (sv->preauth.conns[i].fd >= 0 && sv->preauth.conns[i].domain == index)
			preauth_forget(&sv->preauth, &sv->preauth.conns[i], true);
	if (d->relay_ctl >= 0)
		close(d->relay_ctl);
	if (d->handoff_fd >= 0)
		close(d->handoff_fd);
	d->relay_ctl = d->handoff_fd = -1;
}

/* Every stream of the domain is closed: its guest's shims reconnect and
 * find what the op left (docs/libvirt.md). */
static void relay_reset(struct vm_domain *d)
{
	if (d->relay_ctl >= 0 && write(d->relay_ctl, "R", 1) != 1)
		pr_warn("domain %s: cannot reset its relay: %s", d->uuid, strerror(errno));
}

bool vm_child_reaped(struct supervisor *sv, pid_t pid)
{
	/* A restore check: its answer came on its pipe. */
	for (unsigned i = 0; i < VM_CHECK_PIDS_MAX; i++)
		if (sv->vm_check_pids[i] == pid) {
			sv->vm_check_pids[i] = 0;
			return true;
		}
	for (unsigned i = 0; i < VM_DOMAINS_MAX; i++) {
		struct vm_domain *d = &sv->domains[i];

		if (d->relay_pid != pid)
			continue;
		d->relay_pid = 0;
		if (d->used) {
			/* Its guest's streams are gone; vm-attach starts another. */
			pr_warn("domain %s: its relay %d ended: `vm-attach` starts it again", d->uuid, pid);
			relay_stop(sv, d);
		}
		return true;
	}
	return false;
}

static void op_clear(struct supervisor *sv, struct vm_domain *d);

void vm_domains_init(struct supervisor *sv)
{
	for (unsigned i = 0; i < VM_DOMAINS_MAX; i++)
		sv->domains[i] = (struct vm_domain){ .listen_fd = -1, .handoff_fd = -1, .relay_ctl = -1,
						     .op = { .client_fd = -1 },
						     .waiting_restore = { .client_fd = -1 },
						     .mig = { .sender = -1 } };
}

/* Listen for @uuid (idempotent: an attached domain keeps its socket and
 * relay, and takes @name). NULL with @err when it cannot. */
static struct vm_domain *domain_attach(struct supervisor *sv, const char *uuid, const char *name, int client,
				       char *err, size_t errlen)
{
	struct vm_domain *d = domain_find(sv, uuid);
	struct transport_url url = { .kind = TRANSPORT_UNIX };
	struct snap_vm_domain rec;
	int ret;

	if (!d) {
		for (unsigned i = 0; i < VM_DOMAINS_MAX && !d; i++)
			if (!sv->domains[i].used && !sv->domains[i].relay_pid)
				d = &sv->domains[i];
		if (!d) {
			snprintf(err, errlen, "%d domains are attached already", VM_DOMAINS_MAX);
			return NULL;
		}
		ret = socket_path(sv, uuid, url.path, sizeof(url.path));
		if (ret) {
			snprintf(err, errlen, "the socket path %s/%s.sock is too long for a unix socket",
				 sv->cfg->vm_dir, uuid);
			return NULL;
		}
		mkdir(sv->cfg->vm_dir, 0755);
		/* QEMU's group, and only it: the control socket stays closed to QEMU. */
		d->listen_fd = sv->cfg->vm_socket_group_set
				       ? socket_listen_group(&url, 0660, true, sv->cfg->vm_socket_group)
				       : socket_listen(sv->cfg, &url, 0660);
		if (d->listen_fd < 0) {
			snprintf(err, errlen, "cannot listen on %s: %s", url.path, strerror(-d->listen_fd));
			d->listen_fd = -1;
			return NULL;
		}
		d->used = true;
		memset(&d->mig, 0, sizeof(d->mig));
		d->mig.sender = -1;
		snprintf(d->uuid, sizeof(d->uuid), "%s", uuid);
		pr_info("domain %s (%s): listening on %s", uuid, name, url.path);
	}
	snprintf(d->name, sizeof(d->name), "%s", name);
	if (!d->relay_pid && (ret = relay_start(sv, d, client))) {
		snprintf(err, errlen, "cannot start the relay of domain %s: %s", uuid, strerror(-ret));
		return d;       /* listening: QEMU's connection waits for the next attach */
	}
	if (!record_load(sv, uuid, name, &rec)) {
		snprintf(rec.name, sizeof(rec.name), "%s", name);
		rec.flags |= SNAP_VM_ATTACHED;
		record_save(sv, &rec);
	}
	snap_vm_domain_release(&rec);
	return d;
}

static void domain_detach(struct supervisor *sv, struct vm_domain *d)
{
	char path[sizeof(((struct transport_url *)0)->path)];
	struct snap_vm_domain rec;

	relay_stop(sv, d);
	close(d->listen_fd);
	d->listen_fd = -1;
	if (!socket_path(sv, d->uuid, path, sizeof(path)))
		unlink(path);
	/* Its generations stay: a saved domain is released, then restored. */
	if (!record_load(sv, d->uuid, NULL, &rec)) {
		rec.flags &= ~SNAP_VM_ATTACHED;
		record_save(sv, &rec);
	}
	snap_vm_domain_release(&rec);
	client_fail(&d->op.client_fd, "domain %s was detached", d->uuid);
	client_fail(&d->waiting_restore.client_fd, "domain %s was detached", d->uuid);
	op_clear(sv, d);
	vm_migration_end(sv, d);
	d->used = false;
	pr_info("domain %s (%s) detached", d->uuid, d->name);
}

void vm_domains_load(struct supervisor *sv)
{
	char dir[4200], err[256];
	struct dirent *e;
	DIR *dp;

	snprintf(dir, sizeof(dir), "%s/vm", sv->cfg->state_dir);
	dp = opendir(dir);
	if (!dp)
		return;
	while ((e = readdir(dp))) {
		size_t n = strlen(e->d_name), ext = strlen(SNAP_VM_DOMAIN_EXT);
		char uuid[VM_UUID_LEN + 1];
		struct snap_vm_domain rec;

		if (n != VM_UUID_LEN + ext || strcmp(e->d_name + VM_UUID_LEN, SNAP_VM_DOMAIN_EXT))
			continue;
		memcpy(uuid, e->d_name, VM_UUID_LEN);
		uuid[VM_UUID_LEN] = 0;
		if (!vm_uuid_valid(uuid) || record_load(sv, uuid, NULL, &rec))
			continue;
		if ((rec.flags & SNAP_VM_ATTACHED) && strcmp(rec.uuid, uuid))
			pr_warn("%s/%s names domain %s: ignored", dir, e->d_name, rec.uuid);
		else if ((rec.flags & SNAP_VM_ATTACHED) && !domain_attach(sv, uuid, rec.name, -1, err, sizeof(err)))
			pr_warn("domain %s: %s", uuid, err);
		snap_vm_domain_release(&rec);
	}
	closedir(dp);
}

void vm_domains_stop(struct supervisor *sv)
{
	char path[sizeof(((struct transport_url *)0)->path)];

	for (unsigned i = 0; i < VM_DOMAINS_MAX; i++) {
		struct vm_domain *d = &sv->domains[i];

		if (!d->used)
			continue;
		/* The record stays attached: the next ternd listens again. */
		relay_stop(sv, d);
		close(d->listen_fd);
		d->listen_fd = -1;
		if (!socket_path(sv, d->uuid, path, sizeof(path)))
			unlink(path);
		client_fail(&d->op.client_fd, "ternd is shutting down");
		op_clear(sv, d);
		d->used = false;        /* its relay, reaped at the end, is expected to go */
	}
}

/* ---- a domain's sessions ---- */

/* Stop the live workers and forget the plans of the domain's sessions that
 * @keep (an op's entries, @keep_count of them) does not name. */
static unsigned sessions_drop(struct supervisor *sv, const char *uuid, const struct snap_vm_entry *keep,
			      uint32_t keep_count)
{
	unsigned dropped = 0;

	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		struct session_slot *s = &sv->slots[i];
		bool kept = false;

		if (atomic_load(&s->state) == SESSION_FREE || atomic_load(&s->pid) <= 0 || sv->links[i].stopped ||
		    !vm_session_of(s->id, uuid))
			continue;
		for (uint32_t k = 0; k < keep_count && !kept; k++)
			kept = !strcmp(keep[k].session, s->id);
		if (kept)
			continue;
		/* SIGTERM ends an active one between two requests; one still
		 * waiting for its hello's answer (suspended) reads no signal. */
		sv->links[i].stopped = true;
		kill(atomic_load(&s->pid), atomic_load(&s->state) == SESSION_ACTIVE ? SIGTERM : SIGKILL);
		dropped++;
	}
	for (unsigned i = 0; i < sv->cfg->sessions_max; i++) {
		struct session_known *k = &sv->known[i];
		bool kept = false;

		/* One whose restore is being checked is left to that check. */
		if (!k->id[0] || !vm_session_of(k->id, uuid) || k->check_fd >= 0)
			continue;
		for (uint32_t e = 0; e < keep_count && !kept; e++)
			kept = !strcmp(keep[e].session, k->id);
		if (kept)
			continue;
		if (k->plan != PLAN_NONE)
			dropped += slot_of_session(sv, k->id, -1) < 0;
		client_fail(&k->client_fd, "session %s was dropped with its domain", k->id);
		client_fail(&k->check_client_fd, "session %s was dropped with its domain", k->id);
		explicit_bzero(k, sizeof(*k));
		*k = (struct session_known){ .client_fd = -1, .waiting_slot = -1, .check_fd = -1, .check_client_fd = -1 };
	}
	known_save(sv);
	return dropped;
}

/* ---- ops over all of a domain's sessions ---- */

static void op_clear(struct supervisor *sv, struct vm_domain *d)
{
	struct vm_op *op = &d->op;
	int index = domain_index(sv, d);

	/* Every pause is undone, whatever ended the op (a suspended worker
	 * ends by itself and ignores it). */
	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		struct worker_link *l = &sv->links[i];

		if (l->vm_domain != index)
			continue;
		if (l->fd >= 0 && !l->stopped)
			link_send(l, &(struct control_link){ .type = CONTROL_LINK_RELEASE });
		l->vm_domain = -1;
	}
	for (uint32_t k = 0; op->check_fd && k < op->count; k++)
		if (op->check_fd[k] >= 0)
			close(op->check_fd[k]);
	if (op->creds)
		explicit_bzero(op->creds, op->count * sizeof(*op->creds));
	free(op->entries);
	free(op->slots);
	free(op->check_fd);
	free(op->creds);
	if (op->client_fd >= 0)
		close(op->client_fd);
	*op = (struct vm_op){ .client_fd = -1 };
}

static void op_fail(struct vm_op *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Keep the first failure: it is what the reply names. */
static void op_fail(struct vm_op *op, const char *fmt, ...)
{
	va_list ap;

	if (op->error[0])
		return;
	va_start(ap, fmt);
	vsnprintf(op->error, sizeof(op->error), fmt, ap);
	va_end(ap);
}

/* The reply to a successful op: the domain and the op's entries. */
static void op_reply(struct vm_domain *d, int *client, const char *path)
{
	struct control_reply r = { .kind = CONTROL_REPLY_VM };
	struct control_vm_snapshot *list = calloc(d->op.count ? d->op.count : 1, sizeof(*list));

	if (!list) {
		client_fail(client, "out of memory");
		return;
	}
	snprintf(r.vm.uuid, sizeof(r.vm.uuid), "%s", d->uuid);
	snprintf(r.vm.name, sizeof(r.vm.name), "%s", d->name);
	snprintf(r.vm.path, sizeof(r.vm.path), "%s", path ? path : "");
	snprintf(r.vm.generation, sizeof(r.vm.generation), "%s", d->op.generation);
	for (uint32_t k = 0; k < d->op.count; k++) {
		memcpy(list[k].session, d->op.entries[k].session, sizeof(list[k].session));
		memcpy(list[k].snapshot, d->op.entries[k].snapshot, sizeof(list[k].snapshot));
	}
	r.vm.count = d->op.count;
	r.vm.snapshots = list;
	client_finish(client, &r);
	control_reply_release(&r);
}

/* Save and snapshot end here: every worker answered (or died). */
static void op_copy_done(struct supervisor *sv, struct vm_domain *d)
{
	struct vm_op *op = &d->op;
	struct snap_vm_domain rec;

	if (!op->error[0] && op->kind == VM_OP_SAVE) {
		int ret = record_load(sv, d->uuid, d->name, &rec);

		if (!ret)
			ret = snap_vm_generation_set(&rec, op->generation, op->entries, op->count);
		if (!ret)
			ret = record_save(sv, &rec);
		snap_vm_domain_release(&rec);
		if (ret)
			op_fail(op, "the sessions were saved but generation %s could not be recorded: %s",
				op->generation, strerror(-ret));
		else
			relay_reset(d);
		pr_info("domain %s: generation %s saved (%u sessions)", d->uuid, op->generation, op->count);
	}
	if (op->error[0]) {
		pr_warn("domain %s: %s", d->uuid, op->error);
		client_fail(&op->client_fd, "%s%s", op->error, op->kind == VM_OP_SAVE ?
			    "; sessions whose snapshot was written are suspended in it (`ckpt ls`)" : "");
	} else {
		op_reply(d, &op->client_fd, NULL);
	}
	op_clear(sv, d);
}

/* Every worker holds: copy each. */
static void op_copy(struct supervisor *sv, struct vm_domain *d)
{
	struct vm_op *op = &d->op;

	op->copying = true;
	op->pending = 0;
	for (uint32_t k = 0; k < op->count; k++) {
		struct control_link m = { .type = CONTROL_LINK_SNAPSHOT, .suspend = op->kind == VM_OP_SAVE };
		struct worker_link *l;
		int slot = op->slots[k];

		if (slot < 0 || op->error[0])
			continue;
		l = &sv->links[slot];
		if (m.suspend && !known_get(sv, op->entries[k].session, true)) {
			op_fail(op, "cannot suspend session %s: ternd keeps %u sessions already (--sessions-max)",
				op->entries[k].session, sv->cfg->sessions_max);
			continue;
		}
		memcpy(m.snapshot, op->entries[k].snapshot, sizeof(m.snapshot));
		memcpy(l->snapshot, m.snapshot, sizeof(l->snapshot));
		/* A session with no snapshot yet is copied whole. */
		if (op->incremental && store_latest(sv, op->entries[k].session, m.parent, sizeof(m.parent)))
			m.parent[0] = 0;
		l->suspending = m.suspend;
		if (link_send(l, &m)) {
			op_fail(op, "the worker of session %s does not answer", op->entries[k].session);
			l->suspending = false;
			continue;
		}
		op->pending++;
	}
	if (!op->pending)
		op_copy_done(sv, d);
}

static int op_entry_of_slot(const struct vm_op *op, unsigned index)
{
	for (uint32_t k = 0; op->slots && k < op->count; k++)
		if (op->slots[k] == (int)index)
			return (int)k;
	return -1;
}

void vm_worker_held(struct supervisor *sv, unsigned index)
{
	struct worker_link *l = &sv->links[index];
	struct vm_domain *d;

	if (l->vm_domain < 0 || l->vm_held) {
		pr_warn("worker %d: held without being asked", atomic_load(&sv->slots[index].pid));
		return;
	}
	d = &sv->domains[l->vm_domain];
	l->vm_held = true;
	if (--d->op.pending)
		return;
	if (d->op.error[0])
		op_copy_done(sv, d);
	else
		op_copy(sv, d);
}

void vm_worker_result(struct supervisor *sv, unsigned index, const struct control_reply *r)
{
	struct worker_link *l = &sv->links[index];
	struct vm_domain *d = &sv->domains[l->vm_domain];
	int k = op_entry_of_slot(&d->op, index);

	if (k < 0 || !d->op.copying || l->vm_done)
		return;
	l->vm_done = true;
	if (r->kind != CONTROL_REPLY_SNAPSHOT)
		op_fail(&d->op, "snapshot '%s' of session %s failed: %s", d->op.entries[k].snapshot,
			d->op.entries[k].session, r->kind == CONTROL_REPLY_ERROR ? r->error : "no result");
	if (!--d->op.pending)
		op_copy_done(sv, d);
}

void vm_worker_gone(struct supervisor *sv, unsigned index)
{
	struct worker_link *l = &sv->links[index];
	struct vm_domain *d;
	bool counted;
	int k;

	if (l->vm_domain < 0)
		return;
	d = &sv->domains[l->vm_domain];
	l->vm_domain = -1;
	k = op_entry_of_slot(&d->op, index);
	if (k < 0)
		return;
	d->op.slots[k] = -1;
	/* A suspended worker ends after its result: only one the op still
	 * waits for (its hold, or its result) fails it. */
	counted = d->op.copying ? !l->vm_done : !l->vm_held;
	if (!counted)
		return;
	op_fail(&d->op, "the worker of session %s ended during the snapshot of its domain",
		d->op.entries[k].session);
	if (!--d->op.pending) {
		if (d->op.copying || d->op.error[0])
			op_copy_done(sv, d);
		else
			op_copy(sv, d);
	}
}

/* vm-save and vm-snapshot: hold every worker of @d, then copy each. */
static void op_snapshot_start(struct supervisor *sv, struct vm_domain *d, int client, enum vm_op_kind kind,
			      const char *generation, const char *prefix, bool incremental)
{
	struct vm_op *op = &d->op;
	char base[SNAP_NAME_MAX + 1];
	uint32_t count = 0;
	struct timespec ts;

	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		struct session_slot *s = &sv->slots[i];
		struct worker_link *l = &sv->links[i];

		if (atomic_load(&s->state) == SESSION_FREE || atomic_load(&s->pid) <= 0 || l->stopped ||
		    !vm_session_of(s->id, d->uuid))
			continue;
		if (atomic_load(&s->state) != SESSION_ACTIVE || l->fd < 0 || l->client_fd >= 0 || l->vm_domain >= 0 ||
		    l->restoring[0]) {
			client_fail(&client, "session %s of domain %s is starting, restoring or being snapshotted: "
				    "retry", s->id, d->uuid);
			return;
		}
		count++;
	}
	*op = (struct vm_op){ .kind = kind, .client_fd = client, .count = 0, .incremental = incremental };
	snprintf(op->generation, sizeof(op->generation), "%s", generation);
	op->entries = calloc(count ? count : 1, sizeof(*op->entries));
	op->slots = calloc(count ? count : 1, sizeof(*op->slots));
	if (!op->entries || !op->slots) {
		client_fail(&op->client_fd, "out of memory");
		op_clear(sv, d);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	/* A time in every name: a generation saved again after a failed save
	 * does not meet the first attempt's snapshots. */
	if (prefix[0])
		snprintf(base, sizeof(base), "%s", prefix);
	else
		snprintf(base, sizeof(base), "vm-%.8s%s%s-%lld%03ld", d->uuid, generation[0] ? "-" : "", generation,
			 (long long)ts.tv_sec, ts.tv_nsec / 1000000);
	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		struct session_slot *s = &sv->slots[i];
		struct worker_link *l = &sv->links[i];
		struct snap_vm_entry *e = &op->entries[op->count];

		if (atomic_load(&s->state) == SESSION_FREE || atomic_load(&s->pid) <= 0 || l->stopped ||
		    !vm_session_of(s->id, d->uuid) || op->count == count)
			continue;
		snprintf(e->session, sizeof(e->session), "%s", s->id);
		snprintf(e->snapshot, sizeof(e->snapshot), "%.*s-%u", VM_PREFIX_MAX, base, op->count);
		op->slots[op->count++] = (int)i;
		l->vm_domain = domain_index(sv, d);
		l->vm_held = l->vm_done = false;
		if (link_send(l, &(struct control_link){ .type = CONTROL_LINK_HOLD }))
			op_fail(op, "the worker of session %s does not answer", s->id);
		else
			op->pending++;
	}
	pr_info("domain %s: %s of %u sessions: holding them", d->uuid, kind == VM_OP_SAVE ? "save" : "snapshot",
		op->count);
	if (!op->pending)
		op_copy_done(sv, d);    /* no session, or none answered */
}

/* ---- vm-restore: the checks of a generation, then its plans ---- */

static void restore_checks_start(struct supervisor *sv, struct vm_domain *d)
{
	struct vm_op *op = &d->op;
	struct checkpoint_target target;
	char dir[4200];

	store_path(sv, dir, sizeof(dir));
	restore_check_target(&sv->cfg->worker, sv->backend_devices, &target);
	while (op->checks_started < op->count && op->pending < RESTORE_CHECKS_MAX) {
		uint32_t k = op->checks_started++;
		pid_t pid;
		int fd = restore_check_start(dir, op->entries[k].snapshot, &target, supervisor_fds_close, sv, &pid);

		if (fd < 0) {
			op_fail(op, "cannot check snapshot '%s' of session %s: %s", op->entries[k].snapshot,
				op->entries[k].session, strerror(-fd));
			continue;
		}
		op->check_fd[k] = fd;
		for (unsigned i = 0; i < VM_CHECK_PIDS_MAX; i++)
			if (!sv->vm_check_pids[i]) {
				sv->vm_check_pids[i] = pid;
				break;
			}
		op->pending++;
	}
}

/* Every check answered: plan the restores, or say what is wrong. */
static void restore_checks_done(struct supervisor *sv, struct vm_domain *d)
{
	struct vm_op *op = &d->op;
	struct snap_store *store = NULL;
	char dir[4200];
	int device = sv->cfg->worker.exec_cfg.device;

	if (!op->error[0] && !op->check_only) {
		store_path(sv, dir, sizeof(dir));
		if (snap_store_open(dir, NULL, 0, &store))
			op_fail(op, "cannot open the snapshot store %s", dir);
		for (uint32_t k = 0; k < op->count && !op->error[0]; k++) {
			struct snap_manifest m;

			if (snap_store_manifest_get(store, op->entries[k].snapshot, &m))
				op_fail(op, "snapshot '%s' of session %s is gone", op->entries[k].snapshot,
					op->entries[k].session);
			else
				cred_from_manifest(&op->creds[k], &m);
			explicit_bzero(&m, sizeof(m));
		}
		snap_store_close(store);
	}
	if (op->error[0]) {
		pr_warn("domain %s: restore of generation %s refused: %s", d->uuid, op->generation, op->error);
		client_fail(&op->client_fd, "restore of generation %s of domain %s refused, nothing was changed: %s",
			    op->generation, d->uuid, op->error);
		op_clear(sv, d);
		return;
	}
	if (!op->check_only) {
		/* Sessions the generation does not hold are not the saved guest's. */
		sessions_drop(sv, d->uuid, op->entries, op->count);
		for (uint32_t k = 0; k < op->count; k++) {
			struct session_known *k_entry = known_get(sv, op->entries[k].session, true);
			int live = slot_of_session(sv, op->entries[k].session, -1);

			if (!k_entry) {
				pr_err("session %s: not recorded for its restore (--sessions-max)", op->entries[k].session);
				continue;
			}
			k_entry->plan = PLAN_RESTORE;
			k_entry->device = device;
			k_entry->cred = op->creds[k];
			snprintf(k_entry->snapshot, sizeof(k_entry->snapshot), "%s", op->entries[k].snapshot);
			if (live >= 0) {
				/* Its guest reconnects to the restored state. */
				sv->links[live].stopped = true;
				kill(atomic_load(&sv->slots[live].pid), SIGKILL);
			}
		}
		known_save(sv);
		relay_reset(d);
		pr_info("domain %s: generation %s restores %u sessions when its guest reconnects", d->uuid,
			op->generation, op->count);
	}
	op_reply(d, &op->client_fd, NULL);
	op_clear(sv, d);
}

/* Whether @d has sessions with a live worker. A restore starts the
 * domain anew, so these are of its previous run, saved (libvirt's listener
 * sends vm-save once the save is over) or destroyed (vm-drop) but not told
 * yet: the restore waits for that, or it would lose the state of the
 * image being saved. */
static bool domain_has_live_sessions(struct supervisor *sv, const struct vm_domain *d)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		const struct session_slot *s = &sv->slots[i];
		const struct worker_link *l = &sv->links[i];
		struct session_known *k;

		if (atomic_load(&s->state) != SESSION_ACTIVE || l->stopped || l->suspending ||
		    !vm_session_of(s->id, d->uuid))
			continue;
		/* Suspended: its worker holds a reconnected guest that waits. */
		k = known_get(sv, s->id, false);
		if (!k || (k->plan != PLAN_SUSPENDED && k->waiting_slot != (int)i))
			return true;
	}
	return false;
}

static void op_restore_start(struct supervisor *sv, struct vm_domain *d, int client, const char *generation,
			     bool check_only)
{
	struct vm_op *op = &d->op;
	struct snap_vm_domain rec;
	struct snap_vm_generation *g;

	if (record_load(sv, d->uuid, d->name, &rec)) {
		client_fail(&client, "the record of domain %s is damaged (see ternd's log)", d->uuid);
		return;
	}
	g = snap_vm_generation_find(&rec, generation);
	if (!g) {
		client_fail(&client, "domain %s has no GPU state saved under generation %s", d->uuid, generation);
		snap_vm_domain_release(&rec);
		return;
	}
	*op = (struct vm_op){ .kind = VM_OP_RESTORE, .client_fd = client, .check_only = check_only, .count = g->count };
	snprintf(op->generation, sizeof(op->generation), "%s", generation);
	op->entries = calloc(g->count ? g->count : 1, sizeof(*op->entries));
	op->check_fd = calloc(g->count ? g->count : 1, sizeof(*op->check_fd));
	op->creds = calloc(g->count ? g->count : 1, sizeof(*op->creds));
	if (!op->entries || !op->check_fd || !op->creds) {
		snap_vm_domain_release(&rec);
		client_fail(&op->client_fd, "out of memory");
		op_clear(sv, d);
		return;
	}
	memcpy(op->entries, g->entries, g->count * sizeof(*op->entries));
	for (uint32_t k = 0; k < g->count; k++)
		op->check_fd[k] = -1;
	snap_vm_domain_release(&rec);
	restore_checks_start(sv, d);
	if (!op->pending)
		restore_checks_done(sv, d);
}

unsigned vm_poll_fill(struct supervisor *sv, struct pollfd *pfd, unsigned n, unsigned *first)
{
	*first = n;
	for (unsigned i = 0; i < VM_DOMAINS_MAX; i++) {
		struct vm_domain *d = &sv->domains[i];

		if (!d->used)
			continue;
		if (d->handoff_fd >= 0)
			pfd[n++] = (struct pollfd){ .fd = d->handoff_fd, .events = POLLIN };
		for (uint32_t k = 0; d->op.check_fd && k < d->op.count; k++)
			if (d->op.check_fd[k] >= 0)
				pfd[n++] = (struct pollfd){ .fd = d->op.check_fd[k], .events = POLLIN };
	}
	return n;
}

/* A stream the relay handed over: into the pre-authentication stage. */
static void handoff_readable(struct supervisor *sv, struct vm_domain *d)
{
	char source[64];

	/* Named by the domain: the per-source cap counts its streams. */
	snprintf(source, sizeof(source), "domain %.36s", d->uuid);
	for (int i = 0; i < 16; i++) {
		int fd = fd_recv(d->handoff_fd);

		if (fd == -EAGAIN)
			return;
		if (fd == -EPIPE) {
			close(d->handoff_fd);
			d->handoff_fd = -1;
			return;
		}
		if (fd >= 0)
			preauth_adopt(&sv->preauth, fd, domain_index(sv, d), source);
	}
}

void vm_poll_handle(struct supervisor *sv, const struct pollfd *pfd, unsigned first, unsigned end)
{
	for (unsigned p = first; p < end; p++) {
		if (!pfd[p].revents)
			continue;
		for (unsigned i = 0; i < VM_DOMAINS_MAX; i++) {
			struct vm_domain *d = &sv->domains[i];
			char err[RESTORE_CHECK_TEXT_MAX + 1];

			if (!d->used)
				continue;
			if (d->handoff_fd == pfd[p].fd) {
				handoff_readable(sv, d);
				break;
			}
			for (uint32_t k = 0; d->op.check_fd && k < d->op.count; k++) {
				if (d->op.check_fd[k] != pfd[p].fd)
					continue;
				d->op.check_fd[k] = -1;
				if (restore_check_answer(pfd[p].fd, err, sizeof(err)))
					op_fail(&d->op, "snapshot '%s' of session %s: %s", d->op.entries[k].snapshot,
						d->op.entries[k].session, err);
				d->op.pending--;
				break;
			}
		}
	}
	/* Only now the next checks: a new check's fd may take the number of
	 * one answered above, whose entry in @pfd is not read yet. */
	for (unsigned i = 0; i < VM_DOMAINS_MAX; i++) {
		struct vm_domain *d = &sv->domains[i];

		if (!d->used || d->op.kind != VM_OP_RESTORE || d->op.pending >= RESTORE_CHECKS_MAX)
			continue;
		restore_checks_start(sv, d);
		if (!d->op.pending)
			restore_checks_done(sv, d);
	}
}

/* ---- the control ops ---- */

void vm_request(struct supervisor *sv, int client, const struct control_request *req)
{
	const char *uuid = req->op == CONTROL_OP_VM_SNAPSHOT ? "" : req->uuid;
	char err[CONTROL_TEXT_MAX + 1] = "", path[sizeof(((struct transport_url *)0)->path)];
	struct snap_vm_domain rec;
	struct vm_domain *d;
	unsigned dropped;

	if (req->op != CONTROL_OP_VM_SNAPSHOT && !vm_uuid_valid(uuid)) {
		client_fail(&client, "'%s' is not a domain uuid (36 characters, lowercase hex and '-', "
			    "as `virsh domuuid` prints it)", uuid);
		return;
	}
	if ((req->op == CONTROL_OP_VM_SAVE || req->op == CONTROL_OP_VM_RESTORE || req->op == CONTROL_OP_VM_SWITCH) &&
	    !vm_generation_valid(req->generation)) {
		client_fail(&client, "'%s' is not a generation (1-%d of 0-9 a-f)", req->generation, VM_GENERATION_MAX);
		return;
	}
	switch (req->op) {
	case CONTROL_OP_VM_ATTACH:
	case CONTROL_OP_VM_INCOMING:
		if (!vm_name_valid(req->name)) {
			client_fail(&client, "'%s' is not a domain name (1-%d printable bytes, no '/')", req->name,
				    VM_NAME_MAX);
			return;
		}
		d = domain_attach(sv, uuid, req->name, client, err, sizeof(err));
		/* An incoming migration's domain asks its source for the GPU state. */
		if (d && !err[0] && req->op == CONTROL_OP_VM_INCOMING)
			vm_incoming_start(sv, d, client, req->url, err, sizeof(err));
		if (!d || err[0]) {
			client_fail(&client, "cannot %s domain %s: %s", req->op == CONTROL_OP_VM_ATTACH ? "attach" : "take",
				    uuid, err);
			return;
		}
		socket_path(sv, uuid, path, sizeof(path));
		op_reply(d, &client, path);
		return;
	case CONTROL_OP_VM_SWITCH:
		d = domain_find(sv, uuid);
		if (!d) {
			client_fail(&client, "domain %s is not attached", uuid);
			return;
		}
		if (vm_switch(sv, d, req->generation))
			client_fail(&client, "domain %s: its migration does not answer", uuid);
		else
			op_reply(d, &client, NULL);
		return;
	case CONTROL_OP_VM_DETACH:
		d = domain_find(sv, uuid);
		if (!d) {
			client_fail(&client, "domain %s is not attached", uuid);
			return;
		}
		domain_detach(sv, d);
		op_reply(d, &client, NULL);     /* its uuid and name stay until the entry is reused */
		return;
	case CONTROL_OP_VM_DROP:
		dropped = sessions_drop(sv, uuid, NULL, 0);
		d = domain_find(sv, uuid);
		if (d) {
			/* A migration of it in either direction ends with it. */
			vm_migration_end(sv, d);
			relay_reset(d);
		}
		pr_info("domain %s: %u sessions dropped", uuid, dropped);
		if (d) {
			op_reply(d, &client, NULL);
		} else {
			struct control_reply r = { .kind = CONTROL_REPLY_VM };

			snprintf(r.vm.uuid, sizeof(r.vm.uuid), "%s", uuid);
			client_finish(&client, &r);
		}
		return;
	case CONTROL_OP_VM_SAVE:
	case CONTROL_OP_VM_SNAPSHOT:
		d = req->op == CONTROL_OP_VM_SAVE ? domain_find(sv, uuid) : domain_find_named(sv, req->domain);
		if (!d) {
			client_fail(&client, "domain %s is not attached (vm-attach, or see `ckpt ls`)",
				    req->op == CONTROL_OP_VM_SAVE ? uuid : req->domain);
			return;
		}
		if (req->snapshot[0] && (!snap_name_valid(req->snapshot) ||
					 strlen(req->snapshot) > VM_PREFIX_MAX)) {
			client_fail(&client, "invalid snapshot prefix '%s': %s (1-%d of A-Z a-z 0-9 . _ -)",
				    req->snapshot, snap_name_problem(req->snapshot), VM_PREFIX_MAX);
			return;
		}
		break;
	case CONTROL_OP_VM_RESTORE:
		/* The restored QEMU connects to the socket, which libvirt wants
		 * to exist before it starts: the restore attaches the domain. */
		d = domain_find(sv, uuid);
		if (!d) {
			if (record_load(sv, uuid, NULL, &rec)) {
				client_fail(&client, "domain %s has no saved GPU state in %s/vm", uuid, sv->cfg->state_dir);
				return;
			}
			d = domain_attach(sv, uuid, rec.name, client, err, sizeof(err));
			snap_vm_domain_release(&rec);
			if (!d) {
				client_fail(&client, "cannot attach domain %s for its restore: %s", uuid, err);
				return;
			}
		}
		break;
	default:
		client_fail(&client, "not a domain op");
		return;
	}
	if (req->op == CONTROL_OP_VM_RESTORE && d->waiting_restore.client_fd < 0 &&
	    (d->op.kind == VM_OP_SAVE || (d->op.kind == VM_OP_NONE && domain_has_live_sessions(sv, d)))) {
		d->waiting_restore.client_fd = client;
		snprintf(d->waiting_restore.generation, sizeof(d->waiting_restore.generation), "%s", req->generation);
		d->waiting_restore.check_only = req->check;
		d->waiting_restore.deadline_ms = monotonic_ms() + VM_RESTORE_WAIT_MS;
		pr_info("domain %s: the restore of generation %s waits for the save or drop of its live sessions", d->uuid, req->generation);
		return;
	}
	if (d->op.kind != VM_OP_NONE) {
		client_fail(&client, "domain %s is busy with another save, restore or snapshot; retry when it is done",
			    d->uuid);
		return;
	}
	if (req->op == CONTROL_OP_VM_RESTORE)
		op_restore_start(sv, d, client, req->generation, req->check);
	else
		op_snapshot_start(sv, d, client, req->op == CONTROL_OP_VM_SAVE ? VM_OP_SAVE : VM_OP_SNAPSHOT,
				  req->op == CONTROL_OP_VM_SAVE ? req->generation : "", req->snapshot, req->incremental);
}

int vm_restores_waiting(struct supervisor *sv)
{
	uint64_t now = monotonic_ms(), next = UINT64_MAX;

	for (unsigned i = 0; i < VM_DOMAINS_MAX; i++) {
		struct vm_domain *d = &sv->domains[i];
		int client = d->waiting_restore.client_fd;

		if (!d->used || client < 0 || d->op.kind == VM_OP_SAVE)
			continue;       /* a save under way ends by itself, however long it takes */
		if (d->op.kind == VM_OP_NONE && domain_has_live_sessions(sv, d))
			goto deadline;
		if (d->op.kind != VM_OP_NONE) {
			/* A snapshot or restore took the domain meanwhile. */
			d->waiting_restore.client_fd = -1;
			client_fail(&client, "domain %s is busy with another save, restore or snapshot; retry when it "
				    "is done", d->uuid);
			continue;
		}
		d->waiting_restore.client_fd = -1;
		op_restore_start(sv, d, client, d->waiting_restore.generation, d->waiting_restore.check_only);
		continue;
deadline:
		if (client < 0)
			continue;
		if (d->waiting_restore.deadline_ms <= now) {
			d->waiting_restore.client_fd = -1;
			client_fail(&client, "domain %s: its previous run's sessions are still live after %d s (no "
				    "vm-save or vm-drop came for them: is tern-libvirt running?); generation %s was not "
				    "restored", d->uuid, VM_RESTORE_WAIT_MS / 1000, d->waiting_restore.generation);
		} else if (d->waiting_restore.deadline_ms < next) {
			next = d->waiting_restore.deadline_ms;
		}
	}
	return next == UINT64_MAX ? -1 : (int)(next - now);
}
