#define LOG_PREFIX "supervisor: "
#include "supervisor_internal.h"
#include "control.h"
#include "control_msg.h"
#include "fdpass.h"
#include "hostfn_chan.h"
#include "ipc_broker.h"
#include "log.h"
#include "monotonic.h"
#include "oom.h"
#include "restore_check.h"
#include "service_notify.h"
#include "service_sockets.h"
#include "snap_sessions.h"
#include "snap_store.h"
#include "wire_calls.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
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
_Static_assert(AUTH_CREDENTIAL_BYTES == SNAP_CREDENTIAL_BYTES, "a manifest keeps the session credential");



/* Send @r to the ckpt client on *fd; a failed write drops the client. */
void client_send(int *fd, const struct control_reply *r)
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
void client_finish(int *fd, const struct control_reply *r)
{
	client_send(fd, r);
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void client_fail(int *fd, const char *fmt, ...)
{
	struct control_reply r = { .kind = CONTROL_REPLY_ERROR };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r.error, sizeof(r.error), fmt, ap);
	va_end(ap);
	client_finish(fd, &r);
}


struct session_slot *slot_claim(struct supervisor *sv, unsigned *index)
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

/* The live worker serving @id, other than slot @except (one stopped for a
 * restore serves nothing). */
int slot_of_session(struct supervisor *sv, const char *id, int except)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if ((int)i != except && atomic_load(&sv->slots[i].state) != SESSION_FREE &&
		    atomic_load(&sv->slots[i].pid) > 0 && !sv->links[i].stopped && !strcmp(sv->slots[i].id, id))
			return (int)i;
	return -1;
}

/* In a child of the supervisor: close what is the supervisor's, wipe the
 * credentials it keeps, and keep only @keep of the connections proving
 * themselves (NULL: none). */
void supervisor_child_close(struct supervisor *sv, const struct preauth_conn *keep)
{
	for (unsigned i = 0; i < sv->cfg->listen_count; i++)
		close(sv->listen_fd[i]);
	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		if (sv->links[i].fd >= 0)
			close(sv->links[i].fd);
		if (sv->links[i].ipc_fd >= 0)
			close(sv->links[i].ipc_fd);
		if (sv->links[i].client_fd >= 0)
			close(sv->links[i].client_fd);
		explicit_bzero(&sv->links[i].cred, sizeof(sv->links[i].cred));
	}
	/* A ckpt client waiting on the supervisor must see its answer's
	 * end when the supervisor closes it, not be held open by us. */
	for (unsigned i = 0; i < sv->cfg->sessions_max; i++) {
		if (sv->known[i].client_fd >= 0)
			close(sv->known[i].client_fd);
		if (sv->known[i].check_client_fd >= 0)
			close(sv->known[i].check_client_fd);
		if (sv->known[i].check_fd >= 0)
			close(sv->known[i].check_fd);
		explicit_bzero(&sv->known[i].cred, sizeof(sv->known[i].cred));
		explicit_bzero(&sv->known[i].check_cred, sizeof(sv->known[i].check_cred));
	}
	for (unsigned i = 0; i < CONTROL_CLIENTS_MAX; i++)
		if (sv->clients[i].fd >= 0)
			close(sv->clients[i].fd);
	/* Other guests' connections are not ours; our own (and its
	 * hello, which wcfg points at) stays. */
	for (unsigned i = 0; i < sv->preauth.cfg.max; i++)
		if (&sv->preauth.conns[i] != keep && sv->preauth.conns[i].fd >= 0) {
			close(sv->preauth.conns[i].fd);
			/* Nor their TLS sessions' keys. */
			tls_conn_close(sv->preauth.conns[i].tls);
			sv->preauth.conns[i].tls = NULL;
		}
	for (unsigned i = 0; i < VM_DOMAINS_MAX; i++) {
		struct vm_domain *d = &sv->domains[i];

		if (!d->used)
			continue;
		close(d->listen_fd);
		if (d->handoff_fd >= 0)
			close(d->handoff_fd);
		if (d->relay_ctl >= 0)
			close(d->relay_ctl);
		if (d->op.client_fd >= 0)
			close(d->op.client_fd);
		for (uint32_t k = 0; d->op.check_fd && k < d->op.count; k++)
			if (d->op.check_fd[k] >= 0)
				close(d->op.check_fd[k]);
	}
	metrics_http_fds_close(sv->metrics);
	migrate_fds_close(sv);
	close(sv->control_fd);
	close(sv->signal_fd);
	close(sv->state_lock_fd);
}

/* For restore_check_start: a restore check keeps nothing of ours. */
void supervisor_fds_close(void *opaque)
{
	supervisor_child_close(opaque, NULL);
}

/* What `ternd status` shows as where the session's guest is. */
void slot_peer_name(struct supervisor *sv, struct session_slot *slot, const struct preauth_conn *c)
{
	if (c->domain >= 0)
		snprintf(slot->peer, sizeof(slot->peer), "vm:%s", sv->domains[c->domain].uuid);
	else
		transport_url_format(&sv->cfg->listen[c->listener], slot->peer, sizeof(slot->peer));
}

/* Fork a worker into slot @index (claimed) with @wcfg: the one of a hello
 * on @c, or a migration's prepared worker when @c is NULL. Its line and IPC
 * channel are made here, its link set; @cred (may be NULL) is the
 * session's. 0, or -1 with the slot freed. */
int worker_spawn(struct supervisor *sv, unsigned index, struct worker_config *wcfg, struct preauth_conn *c,
		 const struct session_cred *cred)
{
	struct session_slot *slot = &sv->slots[index];
	int pair[2], ipc[2] = { -1, -1 };
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair)) {
		pr_err("socketpair: %s", strerror(errno));
		atomic_store(&slot->state, SESSION_FREE);
		return -1;
	}
	/* IPC asks and answers in packets, an fd beside some. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ipc))
		pr_warn("no IPC channel for this session: %s", strerror(errno));
	wcfg->ipc_fd = ipc[1];
	wcfg->state_dir = sv->cfg->state_dir;
	wcfg->cmd_fd = pair[1];
	pid = fork();
	if (pid < 0) {
		pr_err("fork failed: %s", strerror(errno));
		atomic_store(&slot->state, SESSION_FREE);
		close(pair[0]);
		close(pair[1]);
		if (ipc[0] >= 0) {
			close(ipc[0]);
			close(ipc[1]);
		}
		return -1;
	}
	if (pid == 0) {
		int fd = c ? c->fd : -1;

		/* The worker keeps only its connection and its line to us. */
		supervisor_child_close(sv, c);
		close(pair[0]);
		if (ipc[0] >= 0)
			close(ipc[0]);
		sigprocmask(SIG_SETMASK, &(sigset_t){ 0 }, NULL);
		worker_signals_install();
		_exit(c ? worker_run(wcfg, fd, slot) : worker_standby_run(wcfg, slot));
	}
	close(pair[1]);
	if (ipc[1] >= 0)
		close(ipc[1]);
	sv->links[index] = (struct worker_link){ .fd = pair[0], .ipc_fd = ipc[0], .client_fd = -1,
						 .vm_domain = -1 };
	if (cred)
		sv->links[index].cred = *cred;
	atomic_store(&slot->pid, pid);
	return 0;
}

/* Fork the worker of a hello that passed every check: @c's connection and
 * its hello go to it (or to the session's prepared worker, if one waits),
 * and the supervisor keeps @cred for the session. */
static void session_start(struct supervisor *sv, struct preauth_conn *c, const char *id,
			  const struct session_cred *cred, const uint8_t credential_wire[AUTH_CREDENTIAL_BYTES])
{
	const struct vm_domain *domain = c->domain >= 0 ? &sv->domains[c->domain] : NULL;
	struct worker_config wcfg = sv->cfg->worker;
	/* The worker's own copy: the child wipes the supervisor's tables. */
	struct session_cred mine = *cred;
	struct session_slot *slot;
	unsigned index;

	if (standby_adopt(sv, c, id, &mine, credential_wire)) {
		explicit_bzero(&mine, sizeof(mine));
		return;
	}
	slot = slot_claim(sv, &index);
	if (!slot) {
		pr_warn("%d sessions already: session %s refused", SESSION_SLOTS, id);
		preauth_refuse(&sv->preauth, c, CUDA_ERROR_OUT_OF_MEMORY);
		return;
	}
	wcfg.ivshmem_dir = domain && sv->cfg->ivshmem_dir[0] ? sv->cfg->ivshmem_dir : NULL;
	wcfg.hello_header = &c->h;
	wcfg.hello_payload = c->payload;
	/* The fork copies the session (keys, sequence numbers, records read
	 * ahead); the supervisor drops its copy below and never writes. */
	wcfg.tls = c->tls;
	wcfg.tls_creds = c->tls ? sv->cfg->tls : NULL;
	wcfg.credential = mine.secret;
	wcfg.credential_wire = credential_wire;
	wcfg.has_owner_uid = mine.has_uid;
	wcfg.owner_uid = mine.uid;
	wcfg.session_id = id;
	slot_peer_name(sv, slot, c);
	/* Named before the fork: a second hello for the id finds this one. */
	snprintf(slot->id, sizeof(slot->id), "%s", id);
	if (worker_spawn(sv, index, &wcfg, c, &mine)) {
		preauth_refuse(&sv->preauth, c, CUDA_ERROR_OPERATING_SYSTEM);
		explicit_bzero(&mine, sizeof(mine));
		return;
	}
	explicit_bzero(&mine, sizeof(mine));
	sv->sessions_started++;
	preauth_forget(&sv->preauth, c, true);
}

/* Who may come back to session @id now: the worker serving it, else the
 * plan (suspended, or to be restored) that holds it. NULL: no one holds the
 * id, and a hello for it starts a new session. */
static struct session_cred *session_cred_of(struct supervisor *sv, const char *id)
{
	int live = slot_of_session(sv, id, -1);
	struct session_known *k;

	if (live >= 0)
		return &sv->links[live].cred;
	k = known_get(sv, id, false);
	if (k && k->plan != PLAN_NONE)
		return &k->cred;
	return NULL;
}

static void hello_refuse(struct supervisor *sv, struct preauth_conn *c, uint32_t status, const char *id,
			 const char *why);

/* Session @id moved away (a live migration) and no one holds it here: its
 * guest, once it proved the credential, hears where it went. True when
 * @c was answered. */
static bool moved_answer(struct supervisor *sv, struct preauth_conn *c, const struct wire_hello_req *hello,
			 const char *id)
{
	const struct migrate_moved *mv = migrate_moved_find(sv, id);
	uint8_t want[AUTH_PROOF_BYTES];
	struct wire_moved answer;

	if (!mv)
		return false;
	auth_credential_proof(mv->cred.secret, c->nonce, hello->session, want);
	if (!mv->cred.set || hello->credential_proof.len != AUTH_PROOF_BYTES ||
	    !auth_equal(want, hello->credential_proof.ptr, AUTH_PROOF_BYTES)) {
		explicit_bzero(want, sizeof(want));
		hello_refuse(sv, c, CUDA_ERROR_NOT_PERMITTED, id, "moved away; no proof of its credential");
		return true;
	}
	explicit_bzero(want, sizeof(want));
	snprintf(answer.url, sizeof(answer.url), "%s", mv->url);
	auth_moved_proof(mv->cred.secret, c->nonce, hello->session, answer.url, answer.proof);
	pr_info("%s: session %s moved to %s: its guest is sent there", c->source, id, mv->url);
	preauth_moved(&sv->preauth, c, &answer);
	return true;
}

static void hello_refuse(struct supervisor *sv, struct preauth_conn *c, uint32_t status, const char *id,
			 const char *why)
{
	sv->counters.hellos_refused++;
	pr_warn("%s: hello for session %s refused: %s (%llu refused so far)", c->source, id, why,
		(unsigned long long)sv->counters.hellos_refused);
	preauth_refuse(&sv->preauth, c, status);
}

/* The session id that @guest_id, named by the guest on @c, stands for: a
 * domain's stream reaches only that domain's sessions, "UUID/ID". 0, or -1
 * with @c refused. */
static int conn_session_id(struct supervisor *sv, struct preauth_conn *c, const char *guest_id,
			   char id[SESSION_ID_MAX])
{
	const struct vm_domain *domain = c->domain >= 0 ? &sv->domains[c->domain] : NULL;

	if (strchr(guest_id, VM_SESSION_SEP)) {
		/* "UUID/..." ids are a domain's: made here, never named by a guest. */
		hello_refuse(sv, c, CUDA_ERROR_NOT_PERMITTED, "?", domain ?
			     "a guest's session id may not hold '/'" :
			     "a session id with '/' names a libvirt domain's session: only that domain's channel reaches it");
		return -1;
	}
	if (domain && !domain->used) {
		hello_refuse(sv, c, CUDA_ERROR_NOT_PERMITTED, "?", "its domain was detached");
		return -1;
	}
	if (domain) {
		char guest[SESSION_ID_MAX];

		worker_session_id_clean(guest, guest_id);
		snprintf(id, SESSION_ID_MAX, "%s%c%.*s", domain->uuid, VM_SESSION_SEP,
			 (int)(SESSION_ID_MAX - VM_UUID_LEN - 2), guest);
	} else {
		worker_session_id_clean(id, guest_id);
	}
	return 0;
}

/* A host_func_join came on @c (hostfn_chan.h): the connection goes to the
 * worker serving the session it names, with the secret it presented, which
 * that worker checks; no worker, no session of this connection's domain,
 * nothing else is ever reached. */
static void session_join(struct supervisor *sv, struct preauth_conn *c)
{
	struct wire_host_func_join_req join;
	struct control_link m = { .type = CONTROL_LINK_HOSTFN };
	char id[SESSION_ID_MAX], *line = NULL;
	struct wire_cursor cur;
	struct worker_link *l;
	size_t len;
	int live, ret;

	if (c->tls) {
		/* A TLS session lives in this process's memory: it cannot follow
		 * the descriptor to a worker that runs already. */
		hello_refuse(sv, c, CUDA_ERROR_NOT_SUPPORTED, "?", "host_func_join over tls://");
		return;
	}
	wire_cursor_init(&cur, c->payload, c->h.length);
	if (wire_host_func_join_req_decode(&cur, &join) < 0 || wire_cursor_end(&cur) ||
	    join.secret.len != HOSTFN_SECRET_SIZE) {
		hello_refuse(sv, c, CUDA_ERROR_INVALID_VALUE, "?", "malformed host_func_join");
		return;
	}
	if (conn_session_id(sv, c, join.session, id))
		return;
	live = slot_of_session(sv, id, -1);
	l = live >= 0 ? &sv->links[live] : NULL;
	if (!l || !l->serving || l->stopped || l->fd < 0) {
		hello_refuse(sv, c, CUDA_ERROR_NOT_FOUND, id, "host_func_join: no worker serves the session");
		return;
	}
	control_hex_put(m.secret, join.secret.ptr, HOSTFN_SECRET_SIZE);
	ret = control_link_encode(&m, &line, &len);
	if (!ret)
		ret = fdpass_send(l->fd, line, len, &c->fd, 1);
	free(line);
	explicit_bzero(&m, sizeof(m));
	if (ret) {
		hello_refuse(sv, c, CUDA_ERROR_OPERATING_SYSTEM, id, "host_func_join: its worker cannot be reached");
		return;
	}
	/* The worker holds it now (and answers it). */
	preauth_forget(&sv->preauth, c, true);
}

/* A whole hello came on @c: check it, and fork its worker only if it passes.
 * A refusal touches nothing of the session it named. */
static void session_hello(struct supervisor *sv, struct preauth_conn *c)
{
	const struct transport_url *url = &sv->cfg->listen[c->listener];
	const struct vm_domain *domain = c->domain >= 0 ? &sv->domains[c->domain] : NULL;
	/* A domain's stream needs no token: only its relay can hand one over. */
	bool needs_token = !domain && transport_url_needs_token(url);
	struct wire_hello_req *hello = malloc(sizeof(*hello));
	uint8_t want[AUTH_PROOF_BYTES], wire[AUTH_CREDENTIAL_BYTES];
	char id[SESSION_ID_MAX];
	struct session_cred fresh = { 0 }, *cred;
	struct wire_cursor cur;
	uint32_t protocol = 0;

	if (!hello) {
		preauth_refuse(&sv->preauth, c, CUDA_ERROR_OUT_OF_MEMORY);
		return;
	}
	/* The protocol comes first in every version's hello: an older guest
	 * hears "not supported", not "malformed". */
	wire_cursor_init(&cur, c->payload, c->h.length);
	if (!wire_get_u32(&cur, &protocol) && protocol != WIRE_PROTOCOL) {
		pr_warn("%s: guest speaks protocol %u, this ternd %u", c->source, protocol, WIRE_PROTOCOL);
		preauth_refuse(&sv->preauth, c, CUDA_ERROR_NOT_SUPPORTED);
		goto out;
	}
	wire_cursor_init(&cur, c->payload, c->h.length);
	if (wire_hello_req_decode(&cur, hello) < 0) {
		hello_refuse(sv, c, CUDA_ERROR_INVALID_VALUE, "?", "malformed hello");
		goto out;
	}
	if (conn_session_id(sv, c, hello->session, id))
		goto out;
	if (!c->challenged) {
		hello_refuse(sv, c, CUDA_ERROR_NOT_PERMITTED, id, "no challenge before the hello");
		goto out;
	}
	if (sv->stopping) {
		/* "No device": the guest tries again, and the next ternd serves it. */
		hello_refuse(sv, c, CUDA_ERROR_NO_DEVICE, id, "ternd is stopping");
		goto out;
	}
	if (vm_incoming_waits(sv, domain, id)) {
		/* Its domain migrates here and the source has not sent its
		 * state yet: the guest tries again (its first call waits). */
		hello_refuse(sv, c, CUDA_ERROR_NO_DEVICE, id, "its GPU state is on its way from the source");
		goto out;
	}
	if (needs_token) {
		if (sv->cfg->token.len)
			auth_token_proof(&sv->cfg->token, c->nonce, hello->session, want);
		if (!sv->cfg->token.len || hello->token_proof.len != AUTH_PROOF_BYTES ||
		    !auth_equal(want, hello->token_proof.ptr, AUTH_PROOF_BYTES)) {
			hello_refuse(sv, c, CUDA_ERROR_NOT_PERMITTED, id, "bad token");
			goto out;
		}
	}
	cred = session_cred_of(sv, id);
	if (!cred && moved_answer(sv, c, hello, id))
		goto out;
	if (cred && cred->set) {
		auth_credential_proof(cred->secret, c->nonce, hello->session, want);
		if (hello->credential_proof.len != AUTH_PROOF_BYTES ||
		    !auth_equal(want, hello->credential_proof.ptr, AUTH_PROOF_BYTES)) {
			hello_refuse(sv, c, CUDA_ERROR_NOT_PERMITTED, id,
				     hello->credential_proof.len ? "wrong session credential" : "no session credential");
			goto out;
		}
		if (cred->has_uid && c->has_uid && c->uid != cred->uid && !sv->cfg->reattach_any_uid) {
			char why[96];

			snprintf(why, sizeof(why), "uid %u is not the session's owner, uid %u", (unsigned)c->uid,
				 (unsigned)cred->uid);
			hello_refuse(sv, c, CUDA_ERROR_NOT_PERMITTED, id, why);
			goto out;
		}
	} else {
		/* A new session, or one restored from a snapshot made before
		 * credentials: its guest gets a fresh credential. */
		if (cred)
			pr_warn("session %s: its snapshot holds no credential: a new one is issued", id);
		fresh.set = true;
		fresh.has_uid = c->has_uid;
		fresh.uid = c->uid;
		if (auth_random(fresh.secret, sizeof(fresh.secret))) {
			hello_refuse(sv, c, CUDA_ERROR_OPERATING_SYSTEM, id, "no random bytes");
			goto out;
		}
		if (cred)
			*cred = fresh;
		cred = &fresh;
	}
	memcpy(wire, cred->secret, sizeof(wire));
	if (needs_token)
		auth_credential_mask(&sv->cfg->token, c->nonce, hello->session, wire);
	session_start(sv, c, id, cred, wire);
	explicit_bzero(wire, sizeof(wire));
out:
	explicit_bzero(&fresh, sizeof(fresh));
	explicit_bzero(want, sizeof(want));
	free(hello);
}

int link_send(struct worker_link *l, const struct control_link *m)
{
	char *line = NULL;
	size_t len = 0;
	int ret = control_link_encode(m, &line, &len);

	if (!ret)
		ret = control_write_all(l->fd, line, len);
	free(line);
	return ret;
}

/* Whether the worker of slot @index is on its way out, not yet reaped: it
 * has exited (looked at, not reaped, so that workers_reap still hears of
 * it), or its line to us is closed. A killed process closes its files
 * before it becomes a zombie: its guest can see its connection end,
 * reconnect and send the new worker's hello in between (measured under CI
 * load: the new worker refused as if the old one still served). */
static bool worker_going(struct supervisor *sv, unsigned index)
{
	pid_t pid = atomic_load(&sv->slots[index].pid);
	struct pollfd line = { .fd = sv->links[index].fd, .events = POLLIN | POLLRDHUP };
	siginfo_t info = { 0 };

	if (pid > 0 && !waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) && info.si_pid == pid)
		return true;
	return line.fd < 0 || (poll(&line, 1, 0) == 1 && (line.revents & (POLLHUP | POLLRDHUP | POLLERR)));
}

/* A worker read the hello of @id: tell it whether to start fresh, restore,
 * wait for a resume, or give up. */
static void worker_hello(struct supervisor *sv, unsigned index, const char *id)
{
	struct worker_link *l = &sv->links[index];
	struct session_known *k = known_get(sv, id, false);
	int other = slot_of_session(sv, id, (int)index);

	l->told = true;
	/* Its hello was read before it was stopped for a restore. */
	if (l->stopped)
		return;
	if (k && k->plan == PLAN_RESTORE) {
		pr_info("session %s: worker %d restores '%s'", id, atomic_load(&sv->slots[index].pid), k->snapshot);
		struct control_link m = { .type = CONTROL_LINK_RESTORE, .device = k->device };

		memcpy(m.snapshot, k->snapshot, sizeof(k->snapshot));
		/* Until it says it is ready, its death leaves the session
		 * suspended in this snapshot (restore_failed). */
		memcpy(l->restoring, k->snapshot, sizeof(l->restoring));
		l->restoring_device = k->device;
		link_send(l, &m);
		/* Whoever asked for the restore hears when it is done. */
		l->client_fd = k->client_fd;
		k->client_fd = -1;
		k->plan = PLAN_NONE;
		known_save(sv);
		return;
	}
	if ((k && k->plan == PLAN_SUSPENDED) || (other >= 0 && sv->links[other].restoring[0]) ||
	    (k && k->check_fd >= 0 && other < 0)) {
		/* Suspended, or its restore is under way: if that fails, the
		 * session is suspended and this worker holds the guest for it.
		 * Or its worker died while a restore was being checked: the
		 * guest waits for that restore (restore_checked), not for an
		 * empty session. */
		if (!k)
			k = known_get(sv, id, true);
		if (k) {
			/* A later connection of the guest (a domain's relay reset
			 * closes the streams again) takes the place of the one
			 * waiting, which would otherwise wait for ever. */
			if (k->waiting_slot >= 0 && k->waiting_slot != (int)index && sv->links[k->waiting_slot].fd >= 0) {
				struct control_link m = { .type = CONTROL_LINK_REFUSE };

				snprintf(m.reason, sizeof(m.reason), "session %s: a later connection waits instead", id);
				link_send(&sv->links[k->waiting_slot], &m);
			}
			link_send(l, &(struct control_link){ .type = CONTROL_LINK_WAIT });
			k->waiting_slot = (int)index;
			return;
		}
	}
	if (other >= 0 && worker_going(sv, (unsigned)other)) {
		/* Its guest saw the old worker die and reconnected before
		 * ternd reaped it: answer once it is reaped (workers_reap). */
		l->hello_deferred = true;
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

/* The worker of slot @index did not complete the restore of l->restoring
 * (@why): the old worker is gone, so the session is left suspended in that
 * snapshot, recorded like any suspension, for `ckpt resume` or another
 * `ckpt restore`. Its guest's shim reconnects and waits. */
static void restore_failed(struct supervisor *sv, unsigned index, const char *why)
{
	struct worker_link *l = &sv->links[index];
	struct session_slot *slot = &sv->slots[index];
	struct session_known *k = known_get(sv, slot->id, true);

	if (!k) {
		client_fail(&l->client_fd, "%s; session %s is lost (too many sessions known)", why, slot->id);
		l->restoring[0] = 0;
		return;
	}
	k->plan = PLAN_SUSPENDED;
	memcpy(k->snapshot, l->restoring, sizeof(k->snapshot));
	known_save(sv);
	pr_warn("session %s: %s; suspended in '%s'", slot->id, why, k->snapshot);
	client_fail(&l->client_fd, "%s; session %s is suspended in '%s': `ckpt resume %s [--device N]` tries "
		    "again, `ckpt restore SNAPSHOT` restores another", why, slot->id, k->snapshot, slot->id);
	l->restoring[0] = 0;
}

/* The worker of slot @index restored its session: what was recorded for
 * the restore goes, and a worker waiting for the same session in case it
 * failed is refused. */
static void restore_done(struct supervisor *sv, unsigned index)
{
	struct session_known *k = known_get(sv, sv->slots[index].id, false);

	sv->links[index].restoring[0] = 0;
	if (!k || k->plan != PLAN_NONE)
		return;
	known_save(sv);         /* no longer to restore (known_save) */
	if (k->waiting_slot >= 0 && sv->links[k->waiting_slot].fd >= 0) {
		struct control_link m = { .type = CONTROL_LINK_REFUSE };

		snprintf(m.reason, sizeof(m.reason), "session %s was restored by worker %d", k->id,
			 atomic_load(&sv->slots[index].pid));
		link_send(&sv->links[k->waiting_slot], &m);
	}
	k->waiting_slot = -1;
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
		l->serving = m.reply.kind != CONTROL_REPLY_ERROR;
		if (l->restoring[0] && m.reply.kind == CONTROL_REPLY_ERROR) {
			sv->counters.restores_failed++;
			restore_failed(sv, index, m.reply.error);
		} else if (l->restoring[0]) {
			sv->counters.restores_ok++;
			if (m.reply.kind == CONTROL_REPLY_RESTORE)
				sv->counters.restore_ms += m.reply.restore.restore_ms;
			restore_done(sv, index);
		}
		client_finish(&l->client_fd, &m.reply);
	} else if (m.type == CONTROL_LINK_HELD) {
		vm_worker_held(sv, index);
	} else if (m.type == CONTROL_LINK_PREFILLED) {
		standby_filled(sv, index);
	} else if (m.type == CONTROL_LINK_PROGRESS) {
		client_send(&l->client_fd, &m.reply);
	} else if (m.type == CONTROL_LINK_RESULT) {
		bool ok = m.reply.kind == CONTROL_REPLY_SNAPSHOT;
		struct session_known *k = known_get(sv, slot->id, ok);

		if (ok) {
			sv->counters.snapshots_ok++;
			sv->counters.snapshot_ms += m.reply.snapshot.total_ms;
		} else {
			sv->counters.snapshots_failed++;
		}

		if (ok && k) {
			snprintf(k->latest, sizeof(k->latest), "%s", l->snapshot);
			if (l->suspending && k->resume_pending) {
				/* Its client waits on k->client_fd for the restore; its
				 * guest comes back with the credential it had. */
				k->plan = PLAN_RESTORE;
				k->cred = l->cred;
				snprintf(k->snapshot, sizeof(k->snapshot), "%s", l->snapshot);
				pr_info("session %s suspended in '%s' and resumed at its reconnect", slot->id,
					l->snapshot);
			} else if (l->suspending) {
				k->plan = PLAN_SUSPENDED;
				k->cred = l->cred;
				snprintf(k->snapshot, sizeof(k->snapshot), "%s", l->snapshot);
				pr_info("session %s suspended in '%s'", slot->id, l->snapshot);
			}
			known_save(sv);
		} else if (ok && l->suspending) {
			/* request_snapshot made the entry; nothing takes a live session's. */
			pr_err("session %s suspended in '%s' but not recorded: `ckpt restore %s` brings it back",
			       slot->id, l->snapshot, l->snapshot);
		}
		k = known_get(sv, slot->id, false);
		if (!ok && k && k->resume_pending)
			client_fail(&k->client_fd, "the suspend of session %s failed: nothing to resume", slot->id);
		if (k)
			k->resume_pending = false;
		l->suspending = false;
		client_finish(&l->client_fd, &m.reply);
		if (l->vm_domain >= 0)
			vm_worker_result(sv, index, &m.reply);
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
		bool check = false;

		if (!s && (vm_child_reaped(sv, pid) || migrate_child_reaped(sv, pid, status)))
			continue;
		/* A restore check: its answer (or its end) comes on its pipe. */
		for (unsigned i = 0; i < sv->cfg->sessions_max && !s; i++)
			if (sv->known[i].check_pid == pid) {
				sv->known[i].check_pid = 0;
				check = true;
			}
		if (check)
			continue;

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
		if (sv->links[index].restoring[0]) {
			char why[128];

			snprintf(why, sizeof(why), "the worker restoring '%s' %s %d", sv->links[index].restoring,
				 WIFSIGNALED(status) ? "was killed by signal" : "exited with",
				 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
			restore_failed(sv, index, why);
		}
		client_fail(&sv->links[index].client_fd,
			    "the session's worker exited before answering; see ternd's log");
		standby_filled(sv, index);      /* a prepared worker's receiver waits no more */
		vm_worker_gone(sv, index);
		for (unsigned i = 0; i < sv->cfg->sessions_max; i++)
			if (sv->known[i].waiting_slot == (int)index)
				sv->known[i].waiting_slot = -1;
		/* A plan keeps its own copy; the worker's goes with it. */
		explicit_bzero(&sv->links[index].cred, sizeof(sv->links[index].cred));
		atomic_store(&s->state, SESSION_FREE);
	}
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (sv->links[i].hello_deferred) {
			sv->links[i].hello_deferred = false;
			if (sv->links[i].fd >= 0 && atomic_load(&sv->slots[i].state) != SESSION_FREE)
				worker_hello(sv, i, sv->slots[i].id);
		}
}

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
		client_fail(&client, "invalid snapshot name '%s': %s (use 1-%d of A-Z a-z 0-9 . _ -, not "
			    "starting with '.')", req->snapshot, snap_name_problem(req->snapshot),
			    SNAP_SNAPSHOT_NAME_MAX);
		return;
	}
	l = &sv->links[index];
	if (l->client_fd >= 0 || l->fd < 0 || l->vm_domain >= 0) {
		client_fail(&client, "the session is busy with another snapshot; retry when it is done");
		return;
	}
	k = known_get(sv, req->session, true);
	if (!k && m.suspend) {
		/* Refused now: a suspend that could not be recorded would leave the
		 * session parked where no resume finds it. */
		client_fail(&client, "cannot suspend '%s': ternd keeps %u sessions already suspended or "
			    "being restored, its --sessions-max; resume or restore one, or raise "
			    "--sessions-max", req->session, sv->cfg->sessions_max);
		return;
	}
	if (req->incremental && store_latest(sv, req->session, m.parent, sizeof(m.parent))) {
		client_fail(&client, "no complete snapshot of session '%s' in %s/store to base an incremental "
			    "one on; take a full snapshot first", req->session, sv->cfg->state_dir);
		return;
	}
	if (req->snapshot[0]) {
		memcpy(m.snapshot, req->snapshot, sizeof(req->snapshot));
	} else {
		/* Live session ids are valid names (the worker cleans them) but
		 * for a domain's separator. */
		clock_gettime(CLOCK_REALTIME, &ts);
		snprintf(m.snapshot, sizeof(m.snapshot), "%.80s-%lld%03ld", req->session, (long long)ts.tv_sec,
			 ts.tv_nsec / 1000000);
		for (char *sep = strchr(m.snapshot, VM_SESSION_SEP); sep; sep = strchr(sep, VM_SESSION_SEP))
			*sep = '-';
	}
	memcpy(l->snapshot, m.snapshot, sizeof(l->snapshot));
	l->suspending = m.suspend;
	l->client_fd = client;
	if (link_send(l, &m)) {
		l->client_fd = -1;
		client_fail(&client, "the session's worker does not answer");
	}
}

/* SIGTERM with --on-stop suspend: every session a worker serves is
 * snapshotted at a call boundary and suspended, planned to be restored when
 * its guest reconnects, which the next ternd on this state directory
 * serves (the plan is in the sessions file). Listeners close first, and
 * hellos meanwhile hear "no device", so no new session starts. */
static void stop_begin(struct supervisor *sv)
{
	unsigned started = 0;

	sv->stopping = true;
	sv->stop_deadline_ms = monotonic_ms() + STOP_SUSPEND_MS;
	for (unsigned i = 0; i < sv->cfg->listen_count; i++) {
		if (sv->listen_fd[i] < 0)
			continue;
		close(sv->listen_fd[i]);
		sv->listen_fd[i] = -1;
		if (sv->cfg->listen[i].kind == TRANSPORT_UNIX || sv->cfg->listen[i].kind == TRANSPORT_SHM)
			unlink(sv->cfg->listen[i].path);
	}
	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		struct worker_link *l = &sv->links[i];
		struct control_request req = { .op = CONTROL_OP_SUSPEND };
		struct session_known *k;

		if (atomic_load(&sv->slots[i].state) != SESSION_ACTIVE || l->fd < 0 || !l->serving || l->stopped ||
		    l->client_fd >= 0 || l->vm_domain >= 0 || l->suspending)
			continue;
		snprintf(req.session, sizeof(req.session), "%s", sv->slots[i].id);
		k = known_get(sv, req.session, true);
		if (!k)
			continue;
		request_snapshot(sv, -1, &req);
		if (l->suspending) {
			/* Its result plans the restore (worker_message). */
			k->resume_pending = true;
			started++;
		}
	}
	pr_info("stopping: %u sessions are being suspended for the next ternd", started);
}

/* Whether a stop that suspends is over: no suspend left, or its time is up. */
static bool stop_done(struct supervisor *sv)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (sv->links[i].suspending && sv->links[i].fd >= 0)
			return monotonic_ms() >= sv->stop_deadline_ms;
	return true;
}

/* resume (session: a suspended session or a snapshot; device) and restore
 * (snapshot; device). */
static void request_restore(struct supervisor *sv, int client, const struct control_request *req)
{
	char dir[4200], session[SESSION_ID_MAX] = "", snapshot[SNAP_NAME_MAX + 1] = "";
	const char *name = req->op == CONTROL_OP_RESUME ? req->session : req->snapshot;
	struct session_known *k = NULL;
	struct session_cred cred = { 0 };
	struct snap_manifest m;
	struct snap_store *store = NULL;
	struct checkpoint_target target;
	int device = req->device >= 0 ? req->device : sv->cfg->worker.exec_cfg.device, fd;
	char err[256];
	unsigned checks = 0;
	pid_t pid;

	/* -1 is "not given" (control_msg.c); other negative values are no device. */
	if (req->device < -1) {
		client_fail(&client, "restore of '%s' refused, nothing was stopped: no device %d", name, req->device);
		return;
	}
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
			client_fail(&client, "'%s' is neither a suspended session nor a valid snapshot name (%s): "
				    "see `ckpt ls`", name, snap_name_problem(name));
			return;
		}
		if (snap_store_open(dir, NULL, 0, &store) || snap_store_manifest_get(store, name, &m)) {
			client_fail(&client, "'%s' is neither a suspended session nor a complete snapshot in %s: "
				    "see `ckpt ls`", name, dir);
			snap_store_close(store);
			return;
		}
		snap_store_close(store);
		cred_from_manifest(&cred, &m);
		snprintf(session, sizeof(session), "%s", m.session_id);
		snprintf(snapshot, sizeof(snapshot), "%s", name);
		k = known_get(sv, session, true);
		if (!k) {
			client_fail(&client, "cannot restore '%s': ternd keeps %u sessions already suspended or "
				    "being restored, its --sessions-max; resume or restore one, or raise "
				    "--sessions-max", name, sv->cfg->sessions_max);
			return;
		}
	}
	if (k->check_fd >= 0 && !strcmp(k->check_snapshot, snapshot) && k->check_device == device) {
		/* The same restore asked again while its check runs (the CRIU
		 * plugin's resume at the end of a dump, then its restore of the
		 * process's images): one check serves both, and the latest
		 * asker hears how it ends. */
		client_fail(&k->check_client_fd, "session %s: a later request for the restore of '%s' takes its answer",
			    session, snapshot);
		k->check_client_fd = client;
		explicit_bzero(&cred, sizeof(cred));
		pr_info("session %s: the restore of '%s' is being checked already: asked again", session, snapshot);
		return;
	}
	if (k->check_fd >= 0) {
		client_fail(&client, "a restore of session %s is being checked already; retry when it is done",
			    session);
		return;
	}
	for (unsigned i = 0; i < sv->cfg->sessions_max; i++)
		checks += sv->known[i].check_fd >= 0;
	if (checks >= RESTORE_CHECKS_MAX) {
		client_fail(&client, "%u restores are being checked already; retry when one is done", checks);
		return;
	}
	/* Nothing is stopped before the restore is known to be able to
	 * succeed: the device here, the snapshot and its fit in a child. */
	if (restore_check_device(&sv->cfg->worker, device, sv->backend_devices, err, sizeof(err))) {
		client_fail(&client, "restore of '%s' refused, nothing was stopped: %s", snapshot, err);
		return;
	}
	store_path(sv, dir, sizeof(dir));
	restore_check_target(&sv->cfg->worker, sv->backend_devices, &target);
	fd = restore_check_start(dir, snapshot, &target, supervisor_fds_close, sv, &pid);
	if (fd < 0) {
		client_fail(&client, "cannot check the restore of '%s': %s", snapshot, strerror(-fd));
		return;
	}
	k->check_fd = fd;
	k->check_pid = pid;
	k->check_client_fd = client;
	k->check_device = device;
	k->check_cred = cred;
	explicit_bzero(&cred, sizeof(cred));
	snprintf(k->check_snapshot, sizeof(k->check_snapshot), "%s", snapshot);
}

/* The check of @k's restore answered: go ahead, or tell why not. */
static void restore_checked(struct supervisor *sv, struct session_known *k)
{
	char err[RESTORE_CHECK_TEXT_MAX + 1];
	int live, fd = k->check_fd;

	k->check_fd = -1;
	if (restore_check_answer(fd, err, sizeof(err))) {
		pr_warn("session %s: restore of '%s' refused: %s", k->id, k->check_snapshot, err);
		client_fail(&k->check_client_fd, "restore of '%s' refused, nothing was stopped: %s",
			    k->check_snapshot, err);
		explicit_bzero(&k->check_cred, sizeof(k->check_cred));
		if (k->waiting_slot >= 0 && k->plan == PLAN_NONE) {
			/* Its guest waited for this restore: it gets what any
			 * guest whose worker died gets. */
			unsigned waiting = (unsigned)k->waiting_slot;

			k->waiting_slot = -1;
			worker_hello(sv, waiting, k->id);
		}
		return;
	}
	live = slot_of_session(sv, k->id, -1);
	if (live >= 0 && !strcmp(sv->links[live].restoring, k->check_snapshot)) {
		/* The same restore is under way already (asked twice, say by
		 * a resume that overtook its suspend and by the CRIU plugin):
		 * stopping its worker would only lose it. */
		struct worker_link *l = &sv->links[live];

		explicit_bzero(&k->check_cred, sizeof(k->check_cred));
		/* The latest asker hears how it ends, as with a plan asked for
		 * twice before its guest came back. */
		client_fail(&l->client_fd, "session %s: a later request for the restore of '%s' takes its answer",
			    k->id, k->check_snapshot);
		l->client_fd = k->check_client_fd;
		k->check_client_fd = -1;
		pr_info("session %s: '%s' is being restored already", k->id, k->check_snapshot);
		return;
	}
	/* A snapshot's state goes to the guest that made it: whoever holds
	 * the id now may have claimed it after that guest's worker died.
	 * Only a snapshot without a credential goes to the live guest. */
	if (k->check_cred.set && live >= 0 &&
	    !auth_equal(k->check_cred.secret, sv->links[live].cred.secret, AUTH_CREDENTIAL_BYTES))
		pr_warn("session %s: its live guest is not the one that made '%s': only that one can come back",
			k->id, k->check_snapshot);
	if (!k->check_cred.set && live >= 0)
		k->cred = sv->links[live].cred;
	else if (k->plan != PLAN_SUSPENDED)
		k->cred = k->check_cred;
	explicit_bzero(&k->check_cred, sizeof(k->check_cred));
	if (k->client_fd >= 0)
		close(k->client_fd);
	k->plan = PLAN_RESTORE;
	k->device = k->check_device;
	memcpy(k->snapshot, k->check_snapshot, sizeof(k->snapshot));
	k->client_fd = k->check_client_fd;
	k->check_client_fd = -1;
	/* If ternd dies before the restore is done, the next one finds the
	 * session to restore from this snapshot (known_save). */
	known_save(sv);
	if (k->waiting_slot >= 0) {
		/* A worker holds the guest's reconnect already: restore now. */
		worker_hello(sv, (unsigned)k->waiting_slot, k->id);
		k->waiting_slot = -1;
		return;
	}
	if (live >= 0 && !sv->links[live].told && slot_of_session(sv, k->id, live) >= 0)
		live = slot_of_session(sv, k->id, live);     /* the one serving it */
	if (live >= 0 && !sv->links[live].told) {
		/* Forked for a checked hello that it has not passed on yet: it
		 * hears the plan when it does (worker_hello). */
		pr_info("session %s: worker %d restores '%s' once it has read its hello", k->id,
			atomic_load(&sv->slots[live].pid), k->snapshot);
		return;
	}
	if (live >= 0) {
		/* Its guest reconnects to the restored state. */
		pr_info("session %s: stopping worker %d for the restore of '%s'", k->id,
			atomic_load(&sv->slots[live].pid), k->snapshot);
		sv->links[live].stopped = true;
		kill(atomic_load(&sv->slots[live].pid), SIGKILL);
	}
	pr_info("session %s: '%s' is restored when its guest reconnects", k->id, k->snapshot);
}

/* One whole request line from a control client: answer it (or hand the
 * client to whoever answers later). */
void control_dispatch(struct supervisor *sv, int fd, char *line, size_t n)
{
	struct control_reply reply = { 0 };
	struct control_request req;
	char err[256];

	if (control_request_decode(line, n, &req, err, sizeof(err))) {
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
	case CONTROL_OP_VM_ATTACH:
	case CONTROL_OP_VM_DETACH:
	case CONTROL_OP_VM_SAVE:
	case CONTROL_OP_VM_RESTORE:
	case CONTROL_OP_VM_DROP:
	case CONTROL_OP_VM_SNAPSHOT:
	case CONTROL_OP_VM_INCOMING:
	case CONTROL_OP_VM_SWITCH:
		vm_request(sv, fd, &req);
		break;
	case CONTROL_OP_MIGRATED:
		migrate_request(sv, fd, &req);
		break;
	}
}

static void workers_stop(struct supervisor *sv)
{
	uint64_t start;

	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (atomic_load(&sv->slots[i].state) != SESSION_FREE && atomic_load(&sv->slots[i].pid) > 0)
			kill(atomic_load(&sv->slots[i].pid), SIGTERM);
	/* A restore check changes nothing: it need not finish. */
	for (unsigned i = 0; i < sv->cfg->sessions_max; i++)
		if (sv->known[i].check_pid > 0)
			kill(sv->known[i].check_pid, SIGKILL);
	start = monotonic_ms();
	for (;;) {
		bool left = false;

		workers_reap(sv);
		for (unsigned i = 0; i < SESSION_SLOTS; i++)
			left |= atomic_load(&sv->slots[i].state) != SESSION_FREE;
		if (!left)
			return;
		if (monotonic_ms() - start > (uint64_t)sv->cfg->shutdown_grace_ms)
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

/* Enough descriptors for every connection the limits allow. */
static void nofile_raise(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int supervisor_run(struct supervisor_config *cfg)
{
	static struct supervisor sv;
	struct pollfd *pfd;
	unsigned link_of[SESSION_SLOTS], ipc_of[SESSION_SLOTS], *pre_of, client_of[CONTROL_CLIENTS_MAX],
		 check_of[RESTORE_CHECKS_MAX];
	sigset_t mask;
	unsigned i;
	int status = 1;
	bool running = true;

	sv.cfg = cfg;
	sv.control_fd = -1;
	sv.signal_fd = -1;
	/* Before any socket or journal is touched: those may be another ternd's. */
	sv.state_lock_fd = state_lock_take(&sv);
	if (sv.state_lock_fd < 0)
		return 1;
	if (cfg->passed.count)
		pr_info("socket activation: %u sockets from the service manager", cfg->passed.count);
	for (i = 0; i < CONTROL_CLIENTS_MAX; i++)
		sv.clients[i].fd = -1;
	nofile_raise();
	pfd = calloc(SUPERVISOR_LISTEN_MAX + 2 + 2 * SESSION_SLOTS + cfg->preauth.max + CONTROL_CLIENTS_MAX +
		     RESTORE_CHECKS_MAX + VM_POLL_MAX + MIGRATE_POLL_MAX + METRICS_HTTP_POLL_MAX,
		     sizeof(*pfd));
	pre_of = calloc(cfg->preauth.max + 1, sizeof(*pre_of));
	if (!pfd || !pre_of || preauth_init(&sv.preauth, &cfg->preauth)) {
		pr_err("out of memory");
		free(pfd);
		free(pre_of);
		return 1;
	}
	for (i = 0; i < SUPERVISOR_LISTEN_MAX; i++)
		sv.listen_fd[i] = -1;
	for (i = 0; i < SESSION_SLOTS; i++)
		sv.links[i] = (struct worker_link){ .fd = -1, .ipc_fd = -1, .client_fd = -1, .vm_domain = -1 };
	vm_domains_init(&sv);
	migrate_init(&sv);
	if (ipc_broker_create(&sv.ipc)) {
		pr_err("cannot create the IPC table");
		return 1;
	}
	sv.known = calloc(cfg->sessions_max, sizeof(*sv.known));
	if (!sv.known) {
		pr_err("cannot allocate the table of %u sessions (--sessions-max)", cfg->sessions_max);
		return 1;
	}
	for (i = 0; i < cfg->sessions_max; i++)
		sv.known[i] = (struct session_known){ .client_fd = -1, .waiting_slot = -1, .check_fd = -1,
						      .check_client_fd = -1 };
	if (known_load(&sv))
		return 1;
	/* The last process the OOM killer takes: every session depends on it. */
	oom_score_adj_set(OOM_ADJ_SUPERVISOR);
	sv.backend_devices = restore_check_devices_probe(&cfg->worker);
	if (sv.backend_devices < 0)
		pr_warn("cannot count the %s backend's devices (%s): a restore onto a missing device is "
			"found only by its worker", cfg->worker.backend, strerror(-sv.backend_devices));
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
	if (supervisor_sockets_open(&sv))
		goto out;
	vm_domains_load(&sv);
	pr_info("ternd ready: backend %s, control %s, state %s", cfg->worker.backend, cfg->control_path,
		cfg->state_dir);
	/* Every socket listens: a service manager may start what needs them. */
	if (service_notify("READY=1") < 0)
		pr_warn("cannot tell the service manager ternd is ready (NOTIFY_SOCKET=%s)", getenv("NOTIFY_SOCKET"));
	while (running) {
		unsigned n = 0, links = 0, ipcs = 0, ipc_at, pres = 0, pre_at, clients = 0, client_at, checks = 0,
			 check_at, vm_at, vm_end, mig_at, mig_end, met_at, met_end;
		int timeout = preauth_expire(&sv.preauth), t = control_clients_expire(&sv), v = vm_restores_waiting(&sv),
		    mt = metrics_http_expire(sv.metrics);

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
		check_at = n;
		for (i = 0; i < cfg->sessions_max && checks < RESTORE_CHECKS_MAX; i++)
			if (sv.known[i].check_fd >= 0) {
				check_of[checks++] = i;
				pfd[n++] = (struct pollfd){ .fd = sv.known[i].check_fd, .events = POLLIN };
			}
		n = vm_poll_fill(&sv, pfd, n, &vm_at);
		vm_end = n;
		n = migrate_poll_fill(&sv, pfd, n, &mig_at);
		mig_end = n;
		n = metrics_http_poll_fill(sv.metrics, pfd, n, &met_at);
		met_end = n;
		pre_at = n;
		for (i = 0; i < sv.preauth.cfg.max; i++)
			if (sv.preauth.conns[i].fd >= 0) {
				pre_of[pres++] = i;
				pfd[n++] = (struct pollfd){ .fd = sv.preauth.conns[i].fd, .events = POLLIN };
			}
		client_at = n;
		for (i = 0; i < CONTROL_CLIENTS_MAX; i++)
			if (sv.clients[i].fd >= 0) {
				client_of[clients++] = i;
				pfd[n++] = (struct pollfd){ .fd = sv.clients[i].fd, .events = POLLIN };
			}
		if (t >= 0 && (timeout < 0 || t < timeout))
			timeout = t;
		if (v >= 0 && (timeout < 0 || v < timeout))
			timeout = v;
		if (mt >= 0 && (timeout < 0 || mt < timeout))
			timeout = mt;
		/* A stop that suspends looks at its deadline every second. */
		if (sv.stopping && (timeout < 0 || timeout > 1000))
			timeout = 1000;
		if (poll(pfd, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			pr_err("poll: %s", strerror(errno));
			break;
		}
		/* Connections that are still proving themselves first: each
		 * costs a read that does not block. */
		for (i = 0; i < pres; i++) {
			struct preauth_conn *c = &sv.preauth.conns[pre_of[i]];
			enum preauth_event ev;

			if (pfd[pre_at + i].revents && c->fd >= 0 &&
			    (ev = preauth_readable(&sv.preauth, c)) != PREAUTH_DROP && ev != PREAUTH_MORE)
				(ev == PREAUTH_HELLO ? session_hello : session_join)(&sv, c);
		}
		for (i = 0; i < clients; i++)
			if (pfd[client_at + i].revents && sv.clients[client_of[i]].fd >= 0)
				control_client_readable(&sv, &sv.clients[client_of[i]]);
		for (i = 0; i < cfg->listen_count; i++)
			if (pfd[i].revents & POLLIN)
				preauth_accept(&sv.preauth, sv.listen_fd[i], i,
					       cfg->listen[i].kind == TRANSPORT_TLS ? cfg->tls : NULL);
		if (pfd[cfg->listen_count].revents & POLLIN)
			control_accept(&sv);
		for (i = 0; i < links; i++)
			if (pfd[cfg->listen_count + 2 + i].revents & (POLLIN | POLLHUP) && sv.links[link_of[i]].fd >= 0)
				worker_readable(&sv, link_of[i]);
		for (i = 0; i < ipcs; i++)
			if (pfd[ipc_at + i].revents & (POLLIN | POLLHUP | POLLERR) &&
			    sv.links[ipc_of[i]].ipc_fd >= 0 &&
			    ipc_broker_serve(sv.ipc, sv.links[ipc_of[i]].ipc_fd, ipc_of[i]))
				ipc_link_close(&sv, ipc_of[i]);
		for (i = 0; i < checks; i++)
			if (pfd[check_at + i].revents & (POLLIN | POLLHUP | POLLERR))
				restore_checked(&sv, &sv.known[check_of[i]]);
		vm_poll_handle(&sv, pfd, vm_at, vm_end);
		migrate_poll_handle(&sv, pfd, mig_at, mig_end);
		/* After whatever changed the plans: prepared workers no
		 * migration will use hold GPU memory for nothing. */
		standby_gc(&sv);
		metrics_http_poll_handle(sv.metrics, pfd, met_at, met_end);
		if (pfd[cfg->listen_count + 1].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(sv.signal_fd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGCHLD) {
					workers_reap(&sv);
				} else if (si.ssi_signo != SIGHUP && cfg->stop_suspends && !sv.stopping) {
					pr_info("signal %u: suspending the sessions, then shutting down", si.ssi_signo);
					stop_begin(&sv);
				} else if (si.ssi_signo != SIGHUP) {
					pr_info("signal %u: shutting down", si.ssi_signo);
					running = false;
				}
			}
		}
		if (sv.stopping && stop_done(&sv))
			running = false;
	}
	service_notify("STOPPING=1");
	status = 0;
out:
	supervisor_sockets_close(&sv);
	vm_domains_stop(&sv);
	migrate_stop(&sv);
	workers_stop(&sv);
	preauth_release(&sv.preauth);
	for (i = 0; i < CONTROL_CLIENTS_MAX; i++)
		if (sv.clients[i].fd >= 0)
			close(sv.clients[i].fd);
	free(pfd);
	free(pre_of);
	if (sv.signal_fd >= 0)
		close(sv.signal_fd);
	for (i = 0; i < SESSION_SLOTS; i++)
		if (sv.links[i].ipc_fd >= 0)
			close(sv.links[i].ipc_fd);
	ipc_broker_destroy(sv.ipc);
	munmap(sv.slots, SESSION_SLOTS * sizeof(*sv.slots));
	free(sv.known);
	pr_info("ternd stopped");
	close(sv.state_lock_fd);
	return status;
}
