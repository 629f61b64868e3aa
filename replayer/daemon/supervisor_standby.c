/* The destination's prepared workers of incoming live migrations
 * (docs/migration.md, "The prepared worker").
 *
 * A restore at the guest's first hello would fill all of a session's
 * memory while the guest waits: about a second for 16 GiB. Instead, as
 * soon as a receiver has stored a pre-copy round, a worker is forked for
 * the session with no guest (worker_standby_run) and fills that round into
 * its device memory while the source goes on; each later round, and the
 * final one, is filled over it, so that when the guest's hello comes (the
 * planned restore of the final round) only objects and the last difference
 * are left to restore. The hello's connection is handed to it with the
 * credentials the supervisor checked, as session_start would give a fresh
 * worker.
 *
 * A prepared worker holds GPU memory and serves nobody: it is ended as soon
 * as no migration will use it (its receiver ended with no restore planned,
 * a hello it cannot take, ternd's stop).
 */
#include "supervisor_internal.h"

#include "fdpass.h"
#include "log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int standby_of(struct supervisor *sv, const char *session)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (sv->links[i].standby && sv->links[i].fd >= 0 && atomic_load(&sv->slots[i].pid) > 0 &&
		    atomic_load(&sv->slots[i].state) != SESSION_FREE &&
		    !strcmp(sv->links[i].standby_for, session))
			return (int)i;
	return -1;
}

void standby_filled(struct supervisor *sv, unsigned index)
{
	struct worker_link *l = &sv->links[index];
	int r = l->standby_receiver;

	if (!l->standby_answer)
		return;
	l->standby_answer = false;
	if (r >= 0 && sv->receivers[r].line_fd >= 0)
		dprintf(sv->receivers[r].line_fd, "filled\n");
}

static void standby_end(struct supervisor *sv, unsigned index, const char *why)
{
	struct worker_link *l = &sv->links[index];
	pid_t pid = atomic_load(&sv->slots[index].pid);

	pr_info("session %s: prepared worker %d ended: %s", l->standby_for, pid, why);
	standby_filled(sv, index);
	l->standby = false;
	l->stopped = true;
	if (pid > 0)
		kill(pid, SIGKILL);
}

static int standby_fork(struct supervisor *sv, const char *session, int receiver)
{
	struct worker_config wcfg = sv->cfg->worker;
	unsigned index;

	if (!slot_claim(sv, &index)) {
		pr_warn("session %s: no slot for a prepared worker: restored at its hello", session);
		return -1;
	}
	wcfg.session_id = session;
	/* A domain's session ("UUID/ID") may take a slot of its domain's BAR. */
	wcfg.ivshmem_dir = strchr(session, '/') && sv->cfg->ivshmem_dir[0] ? sv->cfg->ivshmem_dir : NULL;
	snprintf(sv->slots[index].peer, sizeof(sv->slots[index].peer), "migration");
	if (worker_spawn(sv, index, &wcfg, NULL, NULL))
		return -1;
	sv->links[index].standby = true;
	sv->links[index].standby_receiver = receiver;
	snprintf(sv->links[index].standby_for, sizeof(sv->links[index].standby_for), "%s", session);
	pr_info("session %s: prepared worker %d forked for its migration", session,
		atomic_load(&sv->slots[index].pid));
	return (int)index;
}

bool standby_round(struct supervisor *sv, const char *session, const char *snapshot, int receiver, bool final)
{
	struct control_link m = { .type = CONTROL_LINK_PREFILL };
	struct session_known *k = known_get(sv, session, false);
	int at = standby_of(sv, session);

	/* A session served or planned here already is no migration's to
	 * prepare (the final round's plan is the migration's own). */
	if (at < 0 && (slot_of_session(sv, session, -1) >= 0 ||
		       (k && ((k->plan != PLAN_NONE && !final) || k->check_fd >= 0))))
		return false;
	if (at < 0)
		at = standby_fork(sv, session, receiver);
	if (at < 0)
		return false;
	if (receiver >= 0)
		sv->links[at].standby_receiver = receiver;
	if (!snapshot)
		return false;   /* forked ahead of the first round */
	snprintf(m.snapshot, sizeof(m.snapshot), "%s", snapshot);
	if (link_send(&sv->links[at], &m)) {
		standby_end(sv, (unsigned)at, "its line is closed");
		return false;
	}
	sv->links[at].standby_answer = !final && receiver >= 0;
	return sv->links[at].standby_answer;
}

bool standby_adopt(struct supervisor *sv, struct preauth_conn *c, const char *id, const struct session_cred *cred,
		   const uint8_t credential_wire[AUTH_CREDENTIAL_BYTES])
{
	struct control_link m = { .type = CONTROL_LINK_ADOPT };
	struct session_known *k = known_get(sv, id, false);
	int at = standby_of(sv, id);
	struct worker_link *l;
	char *line = NULL;
	size_t len = 0, blob = sizeof(c->h) + c->h.length;
	uint8_t *msg;
	int ret;

	if (at < 0)
		return false;
	l = &sv->links[at];
	/* A TLS session lives in this process's memory and cannot follow its
	 * descriptor; a hello that restores nothing needs no prepared memory. */
	if (c->tls || !k || k->plan != PLAN_RESTORE) {
		standby_end(sv, (unsigned)at, c->tls ? "its guest came over tls://" : "no restore is planned");
		return false;
	}
	snprintf(m.session, sizeof(m.session), "%s", id);
	control_hex_put(m.secret, cred->secret, sizeof(cred->secret));
	control_hex_put(m.wire_secret, credential_wire, AUTH_CREDENTIAL_BYTES);
	m.has_owner_uid = cred->has_uid;
	m.owner_uid = cred->uid;
	m.vm = c->domain >= 0;
	m.length = (uint32_t)blob;
	ret = control_link_encode(&m, &line, &len);
	explicit_bzero(&m, sizeof(m));
	msg = ret ? NULL : malloc(len + blob);
	if (msg) {
		memcpy(msg, line, len);
		memcpy(msg + len, &c->h, sizeof(c->h));
		memcpy(msg + len + sizeof(c->h), c->payload, c->h.length);
		/* The descriptor rides on the first byte; the rest follows. */
		ret = fdpass_send(l->fd, msg, len + blob, &c->fd, 1);
		explicit_bzero(msg, len + blob);
	} else {
		ret = -ENOMEM;
	}
	if (line)
		explicit_bzero(line, len);
	free(line);
	free(msg);
	if (ret) {
		standby_end(sv, (unsigned)at, "the session's hello could not be handed over");
		return false;
	}
	pr_info("%s: session %s goes to its prepared worker %d", c->source, id, atomic_load(&sv->slots[at].pid));
	l->standby = false;
	l->standby_receiver = -1;
	l->cred = *cred;
	slot_peer_name(sv, &sv->slots[at], c);
	snprintf(sv->slots[at].id, sizeof(sv->slots[at].id), "%s", id);
	sv->sessions_started++;
	preauth_forget(&sv->preauth, c, true);
	return true;
}

void standby_receiver_gone(struct supervisor *sv, int receiver)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (sv->links[i].standby && sv->links[i].standby_receiver == receiver)
			sv->links[i].standby_receiver = -1;
	standby_gc(sv);
}

void standby_gc(struct supervisor *sv)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		struct worker_link *l = &sv->links[i];
		struct session_known *k;

		if (!l->standby || l->standby_receiver >= 0 || atomic_load(&sv->slots[i].state) == SESSION_FREE)
			continue;
		k = known_get(sv, l->standby_for, false);
		if (!k || k->plan != PLAN_RESTORE)
			standby_end(sv, i, "its migration ended with no restore planned here");
	}
}
