/* The supervisor's records in its state directory: the sessions it knows
 * (STATE/sessions, snapshot/snap_sessions.h), the lock that keeps one ternd
 * per state directory, and where the store is and what it holds of a
 * session.
 */
#define LOG_PREFIX "supervisor: "
#include "supervisor_internal.h"
#include "log.h"
#include "monotonic.h"
#include "snap_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* The credential and owner a snapshot's manifest keeps, or none. */
void cred_from_manifest(struct session_cred *cred, const struct snap_manifest *m)
{
	*cred = (struct session_cred){ .set = m->auth_flags & SNAP_AUTH_CREDENTIAL,
				       .has_uid = m->auth_flags & SNAP_AUTH_OWNER_UID, .uid = m->owner_uid };
	if (cred->set)
		memcpy(cred->secret, m->credential, sizeof(cred->secret));
}

/* An entry that only caches a latest snapshot name (the store has it too)
 * may make room for another session; one whose suspend is being written
 * may not (request_snapshot made it for that). */
static bool known_evictable(struct supervisor *sv, const struct session_known *k)
{
	int live = slot_of_session(sv, k->id, -1);

	return k->plan == PLAN_NONE && k->client_fd < 0 && k->waiting_slot < 0 &&
	       (live < 0 || !sv->links[live].suspending);
}

/* The entry of @id; with @create a new one when there is none, NULL when
 * cfg->sessions_max entries all hold a plan or a live session. */
struct session_known *known_get(struct supervisor *sv, const char *id, bool create)
{
	struct session_known *free_entry = NULL;

	for (unsigned i = 0; i < sv->cfg->sessions_max; i++) {
		struct session_known *k = &sv->known[i];

		if (k->id[0] && !strcmp(k->id, id))
			return k;
		if (!k->id[0] && !free_entry)
			free_entry = k;
	}
	if (!create)
		return NULL;
	for (unsigned i = 0; i < sv->cfg->sessions_max && !free_entry; i++)
		if (known_evictable(sv, &sv->known[i]))
			free_entry = &sv->known[i];
	if (!free_entry)
		return NULL;
	memset(free_entry, 0, sizeof(*free_entry));
	snprintf(free_entry->id, sizeof(free_entry->id), "%s", id);
	free_entry->client_fd = -1;
	free_entry->waiting_slot = -1;
	free_entry->check_fd = -1;
	free_entry->check_client_fd = -1;
	return free_entry;
}

static void sessions_path(struct supervisor *sv, char *out, size_t cap)
{
	snprintf(out, cap, "%s/" SNAP_SESSIONS_FILE, sv->cfg->state_dir);
}

/* Write what ternd knows of its sessions to STATE/sessions, so that a ternd
 * started later on this state directory resumes suspended sessions and
 * `ckpt rm` leaves their snapshots alone.  Called after every change of a
 * plan or of a latest snapshot. */
/* The worker restoring session @id from a snapshot, if one is. */
static const struct worker_link *restoring_link(const struct supervisor *sv, const char *id)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (sv->links[i].restoring[0] && !strcmp(sv->slots[i].id, id))
			return &sv->links[i];
	return NULL;
}

int known_save(struct supervisor *sv)
{
	struct snap_session *v = calloc(sv->cfg->sessions_max, sizeof(*v));
	const struct worker_link *restoring;
	char path[4200];
	uint32_t n = 0;
	int ret;

	if (!v)
		return -ENOMEM;
	for (unsigned i = 0; i < sv->cfg->sessions_max; i++) {
		const struct session_known *k = &sv->known[i];
		struct snap_session *e = &v[n];

		if (!k->id[0] || (k->plan == PLAN_NONE && !k->latest[0]))
			continue;
		snprintf(e->id, sizeof(e->id), "%s", k->id);
		e->plan = (uint32_t)k->plan;
		e->device = k->plan == PLAN_NONE ? -1 : k->device;
		if (k->plan != PLAN_NONE)
			snprintf(e->snapshot, sizeof(e->snapshot), "%s", k->snapshot);
		else if ((restoring = restoring_link(sv, k->id))) {
			/* Until its worker is ready, a ternd started later must
			 * still restore it (restore_done saves it done). */
			e->plan = PLAN_RESTORE;
			e->device = restoring->restoring_device;
			snprintf(e->snapshot, sizeof(e->snapshot), "%s", restoring->restoring);
		}
		snprintf(e->latest, sizeof(e->latest), "%s", k->latest);
		n++;
	}
	sessions_path(sv, path, sizeof(path));
	ret = snap_sessions_write(path, v, n);
	if (ret)
		pr_err("cannot write %s: %s: a ternd started later will not know of %u session(s)",
		       path, strerror(-ret), n);
	free(v);
	return ret;
}

/* Read STATE/sessions at start.  A damaged file is refused, never guessed
 * at: it may be the only record of where a suspended session waits.  Who
 * may come back to a session is in its snapshot's manifest. */
int known_load(struct supervisor *sv)
{
	struct snap_session *v = NULL;
	struct snap_store *store = NULL;
	uint32_t n = 0, plans = 0, kept = 0;
	char path[4200];
	int ret;

	snprintf(path, sizeof(path), "%s/suspended", sv->cfg->state_dir);
	if (!access(path, F_OK))
		pr_warn("%s is an older ternd's record of suspended sessions and is not read: `ckpt ls` "
			"lists their snapshots, `ckpt restore SNAPSHOT` brings each back", path);
	sessions_path(sv, path, sizeof(path));
	ret = snap_sessions_read(path, SNAP_SESSIONS_LIMIT, &v, &n);
	if (ret) {
		pr_err("cannot read the sessions file %s: %s. It lists the sessions ternd keeps "
		       "(suspended ones and the snapshots they need); move it aside to start without them",
		       path, ret == -EBADMSG ? "it is damaged (checksum, structure or a name is wrong)" :
		       ret == -ENOTSUP ? "it is of a version this ternd does not read" : strerror(-ret));
		return ret;
	}
	for (uint32_t i = 0; i < n; i++)
		plans += v[i].plan != SNAP_PLAN_NONE;
	if (plans > sv->cfg->sessions_max) {
		pr_err("%s lists %u suspended or restoring sessions, more than --sessions-max %u: "
		       "raise --sessions-max", path, plans, sv->cfg->sessions_max);
		free(v);
		return -E2BIG;
	}
	/* Sessions with a plan first; the latest-only ones while room is left. */
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < n && kept < sv->cfg->sessions_max; i++) {
			struct session_known *k;

			if ((pass == 0) != (v[i].plan != SNAP_PLAN_NONE))
				continue;
			k = &sv->known[kept++];
			snprintf(k->id, sizeof(k->id), "%s", v[i].id);
			k->plan = (enum session_plan)v[i].plan;
			k->device = v[i].device;
			snprintf(k->snapshot, sizeof(k->snapshot), "%s", v[i].snapshot);
			snprintf(k->latest, sizeof(k->latest), "%s", v[i].latest);
			if (k->plan != PLAN_NONE) {
				struct snap_manifest m;

				if (!store) {
					store_path(sv, path, sizeof(path));
					snap_store_open(path, NULL, 0, &store);
				}
				if (store && !snap_store_manifest_get(store, k->snapshot, &m))
					cred_from_manifest(&k->cred, &m);
				explicit_bzero(&m, sizeof(m));
				if (!k->cred.set)
					pr_warn("session %s: snapshot '%s' holds no credential: the first guest to "
						"name the session may resume it", k->id, k->snapshot);
			}
			/* A restore the last ternd planned (a resume, or its own
			 * stop with --on-stop suspend) still happens when the
			 * guest reconnects; should it fail, the session is left
			 * suspended in its snapshot, as any failed restore. */
			if (k->plan == PLAN_RESTORE)
				pr_info("session %s is restored from '%s' when its guest reconnects", k->id, k->snapshot);
			if (k->plan == PLAN_SUSPENDED)
				pr_info("session %s is suspended in '%s': `ckpt resume %s` brings it back", k->id,
					k->snapshot, k->id);
		}
	snap_store_close(store);
	free(v);
	return 0;
}

/* The processes that have @path open, as " 123 (ternd)" each, for the
 * message of a lock that stays taken. */
static void lock_holders(const char *path, char *out, size_t cap)
{
	DIR *proc = opendir("/proc");
	struct dirent *p;
	size_t len = 0;

	out[0] = 0;
	while (proc && (p = readdir(proc)) && len + 40 < cap) {
		char dir[300], link[600], target[4200], comm[32] = "?";
		struct dirent *f;
		DIR *fds;
		FILE *c;

		if (p->d_name[0] < '1' || p->d_name[0] > '9' || atoi(p->d_name) == (int)getpid())
			continue;
		snprintf(dir, sizeof(dir), "/proc/%s/fd", p->d_name);
		if (!(fds = opendir(dir)))
			continue;
		while ((f = readdir(fds))) {
			ssize_t n;

			snprintf(link, sizeof(link), "%s/%s", dir, f->d_name);
			n = readlink(link, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = 0;
			if (strcmp(target, path))
				continue;
			snprintf(link, sizeof(link), "/proc/%s/comm", p->d_name);
			if ((c = fopen(link, "r"))) {
				if (fgets(comm, sizeof(comm), c))
					comm[strcspn(comm, "\n")] = 0;
				fclose(c);
			}
			len += (size_t)snprintf(out + len, cap - len, " %s (%s)", p->d_name, comm);
			break;
		}
		closedir(fds);
	}
	if (proc)
		closedir(proc);
}

/* One ternd per state directory: a second one would take over the sockets
 * and replace the first one's journals.  The lock is held for ternd's life
 * (workers close their copy); the file says whose it is.  A ternd killed a
 * moment ago may still have a child on its way out, which closes its copy
 * as it goes: a lock still taken is looked at again for STATE_LOCK_WAIT_MS. */
#define STATE_LOCK_WAIT_MS 2000u
int state_lock_take(struct supervisor *sv)
{
	char path[4200], real[PATH_MAX], owner[32] = "", holders[512];
	uint64_t start = monotonic_ms();
	int fd, n, err = 0;

	snprintf(path, sizeof(path), "%s/ternd.lock", sv->cfg->state_dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		n = -errno;
		pr_err("cannot open %s: %s", path, strerror(-n));
		return n;
	}
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		err = errno;
		if (err != EWOULDBLOCK || monotonic_ms() - start >= STATE_LOCK_WAIT_MS)
			break;
		usleep(20000);
		err = 0;
	}
	if (err) {
		n = (int)pread(fd, owner, sizeof(owner) - 1, 0);
		owner[n > 0 ? n : 0] = 0;
		owner[strcspn(owner, "\n")] = 0;
		holders[0] = 0;
		if (err == EWOULDBLOCK && realpath(path, real))
			lock_holders(real, holders, sizeof(holders));
		if (err == EWOULDBLOCK)
			pr_err("another ternd%s%s%s uses the state directory %s%s%s: stop it, or give this one "
			       "another --state-dir", owner[0] ? " (pid " : "", owner, owner[0] ? ")" : "",
			       sv->cfg->state_dir, holders[0] ? "; its lock is open in" : "", holders);
		else
			pr_err("cannot lock %s: %s", path, strerror(err));
		close(fd);
		return err == EWOULDBLOCK ? -EBUSY : -err;
	}
	n = snprintf(owner, sizeof(owner), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) || pwrite(fd, owner, (size_t)n, 0) != n)
		pr_warn("cannot write %s: %s", path, strerror(errno));
	return fd;
}

void store_path(struct supervisor *sv, char *out, size_t cap)
{
	snprintf(out, cap, "%s/store", sv->cfg->state_dir);
}

/* The newest complete snapshot of @session in the store, as its manifest
 * says: the parent of an incremental one, found the same way after a ternd
 * restart or a `ckpt rm` of the latest.  0, or -ENOENT when there is none. */
int store_latest(struct supervisor *sv, const char *session, char *out, size_t cap)
{
	struct snap_store *store = NULL;
	struct snap_info *list = NULL;
	unsigned count = 0;
	char dir[4200];
	int ret;

	store_path(sv, dir, sizeof(dir));
	ret = snap_store_open(dir, NULL, 0, &store);
	if (!ret)
		ret = snap_store_list(store, &list, &count);
	if (!ret)
		ret = -ENOENT;
	/* Oldest first: the last match is the newest. */
	for (unsigned i = 0; i < count; i++) {
		struct snap_manifest m;

		if (list[i].complete && !snap_store_manifest_get(store, list[i].name, &m) &&
		    !strcmp(m.session_id, session)) {
			snprintf(out, cap, "%s", list[i].name);
			ret = 0;
		}
	}
	free(list);
	snap_store_close(store);
	return ret;
}
