/* `virsh migrate` of a libvirt domain's GPU state (docs/migration.md,
 * "virsh migrate"): ternd's part on both hosts.
 *
 * Destination: the hook's vm-incoming at libvirt's `migrate begin` attaches
 * the domain and forks a puller, which asks the source ternd (the address
 * the domain's metadata carries) on its migration listener for the
 * domain's state (a PULL frame, after the usual AUTH, for the domain's
 * uuid).  While the puller lives the domain is incoming: a hello of one of
 * its sessions whose final round has not been planned yet hears "no
 * device", which the shim retries, so the guest's first call after the
 * switchover waits for its GPU state.  The sessions arrive as ordinary
 * migration streams of ids "UUID/ID" (supervisor_migrate.c).
 *
 * Source: the receiver that got the PULL runs `ckpt migrate --domain UUID
 * --to URL --switch-on-stdin` and tells the supervisor it serves that
 * domain; libvirt's switchover (tern-libvirt's vm-switch at
 * SUSPENDED_MIGRATED) reaches ckpt as a line "switch GENERATION" on its
 * stdin, and ckpt's exit status becomes the PULL's ACK.
 */
#include "supervisor_internal.h"

#include "log.h"
#include "monotonic.h"
#include "snap_migrate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* How long a pull may take, pre-copy and libvirt's own migration included. */
#define PULL_TIMEOUT_S 900

/* ---- destination ---- */

/* The puller: connect to the source, authenticate for @uuid, ask for the
 * state to be sent to @advertise, wait for the end.  Its exit status. */
static int pull(struct supervisor *sv, const char *uuid, const struct transport_url *source,
		const char *advertise)
{
	struct timeval idle = { .tv_sec = PULL_TIMEOUT_S };
	struct snap_migrate_conn c;
	uint8_t nonce[AUTH_NONCE_BYTES];
	int fd = transport_connect(source), rc;

	if (fd < 0) {
		pr_err("domain %s: cannot reach the source ternd: %s", uuid, strerror(-fd));
		return 1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof(idle));
	if (snap_migrate_conn_init(&c, fd))
		return 1;
	rc = snap_migrate_client_auth(&c, &sv->cfg->token, uuid, nonce);
	if (!rc)
		rc = snap_migrate_pull(&c, uuid, advertise);
	if (rc)
		pr_err("domain %s: the source did not send its GPU state: %s", uuid, c.error);
	else
		pr_info("domain %s: the source sent its GPU state", uuid);
	snap_migrate_conn_fini(&c);
	close(fd);
	return rc ? 1 : 0;
}

/* Where the source is to send the streams: --migrate-advertise, else
 * --migrate-listen when it names one address. */
static int advertise_url(struct supervisor *sv, char *out, size_t cap)
{
	const struct transport_url *u = &sv->cfg->migrate_listen;

	if (sv->cfg->migrate_advertise[0]) {
		snprintf(out, cap, "%s", sv->cfg->migrate_advertise);
		return 0;
	}
	if (!sv->cfg->migrate_listen_set)
		return -ENOENT;
	if (u->kind == TRANSPORT_TCP && (!strcmp(u->host, "0.0.0.0") || !strcmp(u->host, "::") || !u->host[0]))
		return -EADDRNOTAVAIL;
	transport_url_format(u, out, cap);
	return 0;
}

int vm_incoming_start(struct supervisor *sv, struct vm_domain *d, int client, const char *url, char *err,
		      size_t errlen)
{
	struct transport_url source;
	char advertise[CONTROL_TEXT_MAX + 1];
	pid_t pid;
	int rc;

	if (transport_url_parse(url, &source) || (source.kind != TRANSPORT_TCP && source.kind != TRANSPORT_UNIX)) {
		snprintf(err, errlen, "'%.200s' is not a source ternd's migration address (tcp://HOST:PORT or unix:PATH)",
			 url);
		return -EINVAL;
	}
	if (!sv->cfg->token.len) {
		snprintf(err, errlen, "this ternd has no --token-file: it takes no migration");
		return -EPERM;
	}
	rc = advertise_url(sv, advertise, sizeof(advertise));
	if (rc) {
		snprintf(err, errlen, rc == -ENOENT ? "this ternd has no --migrate-listen: it takes no migration"
			 : "--migrate-listen is a wildcard address: say with --migrate-advertise where the source reaches it");
		return rc;
	}
	if (d->mig.puller > 0) {
		pr_warn("domain %s: a new migration replaces the one still asking its source", d->uuid);
		kill(d->mig.puller, SIGTERM);
	}
	pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		return -errno;
	}
	if (pid == 0) {
		supervisor_child_close(sv, NULL);
		/* The hook waits for the end of ternd's answer. */
		if (client >= 0)
			close(client);
		sigprocmask(SIG_SETMASK, &(sigset_t){ 0 }, NULL);
		signal(SIGPIPE, SIG_IGN);
		_exit(pull(sv, d->uuid, &source, advertise));
	}
	d->mig.puller = pid;
	d->mig.incoming = true;
	pr_info("domain %s (%s) comes in: its GPU state asked of %s, to %s", d->uuid, d->name, url, advertise);
	return 0;
}

bool vm_incoming_waits(struct supervisor *sv, const struct vm_domain *d, const char *id)
{
	struct session_known *k;

	if (!d || !d->mig.incoming)
		return false;
	k = known_get(sv, id, false);
	return !k || k->plan != PLAN_RESTORE;
}

bool vm_incoming_expects(struct supervisor *sv, const char *id)
{
	const struct vm_domain *d = vm_domain_of_session(sv, id);

	return d && d->mig.incoming;
}

/* ---- source ---- */

int vm_switch(struct supervisor *sv, struct vm_domain *d, const char *generation)
{
	struct migrate_receiver *r = d->mig.sender >= 0 ? &sv->receivers[d->mig.sender] : NULL;

	if (r && r->pid > 0 && r->line_fd >= 0) {
		pr_info("domain %s: libvirt's switchover: the GPU state's stop and copy (generation %s)", d->uuid,
			generation);
		return dprintf(r->line_fd, "switch %s\n", generation) < 0 ? -EIO : 0;
	}
	/* A non-live migration pauses the guest before the destination asks. */
	pr_info("domain %s: libvirt's switchover before the destination asked for the GPU state: it waits", d->uuid);
	snprintf(d->mig.switch_generation, sizeof(d->mig.switch_generation), "%s", generation);
	return 0;
}

const char *vm_pull_accept(struct supervisor *sv, unsigned receiver, const char *uuid, char *more, size_t cap)
{
	struct vm_domain *d = NULL;

	more[0] = 0;
	for (unsigned i = 0; i < VM_DOMAINS_MAX && !d; i++)
		if (sv->domains[i].used && !strcmp(sv->domains[i].uuid, uuid))
			d = &sv->domains[i];
	if (!d)
		return "no such domain is attached here";
	if (d->mig.sender >= 0 && d->mig.sender != (int)receiver && sv->receivers[d->mig.sender].pid > 0)
		return "a migration of this domain is under way";
	d->mig.sender = (int)receiver;
	if (d->mig.switch_generation[0]) {
		snprintf(more, cap, "switch %s\n", d->mig.switch_generation);
		d->mig.switch_generation[0] = 0;
	}
	return NULL;
}

void vm_migration_end(struct supervisor *sv, struct vm_domain *d)
{
	if (d->mig.puller > 0)
		kill(d->mig.puller, SIGTERM);
	if (d->mig.sender >= 0 && sv->receivers[d->mig.sender].pid > 0)
		kill(sv->receivers[d->mig.sender].pid, SIGTERM);
	d->mig.switch_generation[0] = 0;
}

bool vm_migration_reaped(struct supervisor *sv, pid_t pid, int status)
{
	for (unsigned i = 0; i < VM_DOMAINS_MAX; i++) {
		struct vm_domain *d = &sv->domains[i];

		if (d->used && d->mig.puller == pid) {
			d->mig.puller = 0;
			d->mig.incoming = false;
			if (WIFEXITED(status) && !WEXITSTATUS(status))
				pr_info("domain %s: its GPU state is here", d->uuid);
			else
				pr_warn("domain %s: its migration ended without its GPU state; sessions not sent start afresh",
					d->uuid);
			return true;
		}
	}
	return false;
}

void vm_receiver_gone(struct supervisor *sv, unsigned receiver)
{
	for (unsigned i = 0; i < VM_DOMAINS_MAX; i++)
		if (sv->domains[i].used && sv->domains[i].mig.sender == (int)receiver)
			sv->domains[i].mig.sender = -1;
}

/* In the receiver child: serve a PULL whose frame is in c->buf. */

/* Read what ckpt prints into the log, line by line; false at its end. */
static bool ckpt_output(int fd, char *buf, size_t cap, size_t *used, char *last, size_t last_cap)
{
	ssize_t n = read(fd, buf + *used, cap - 1 - *used);
	char *nl;

	if (n <= 0)
		return false;
	*used += (size_t)n;
	buf[*used] = 0;
	while ((nl = strchr(buf, '\n')) || *used == cap - 1) {
		size_t len = nl ? (size_t)(nl - buf) : *used;

		buf[len] = 0;
		if (len) {
			pr_info("ckpt: %s", buf);
			snprintf(last, last_cap, "%s", buf);
		}
		len = nl ? len + 1 : len;
		memmove(buf, buf + len, *used - len + 1);
		*used -= len;
	}
	return true;
}

static pid_t ckpt_spawn(struct supervisor *sv, const char *uuid, const char *url, int *to, int *from)
{
	const struct supervisor_config *cfg = sv->cfg;
	int in[2], out[2];
	pid_t pid;

	if (pipe2(in, O_CLOEXEC))
		return -1;
	if (pipe2(out, O_CLOEXEC)) {
		close(in[0]);
		close(in[1]);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		dup2(out[1], STDERR_FILENO);
		execl(cfg->ckpt_path, "ckpt", "--control", cfg->control_path, "--state-dir", cfg->state_dir, "migrate",
		      "--domain", uuid, "--to", url, "--token-file", cfg->token_path, "--switch-on-stdin", (char *)NULL);
		dprintf(STDERR_FILENO, "cannot run %s: %s\n", cfg->ckpt_path, strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	if (pid < 0) {
		close(in[1]);
		close(out[0]);
		return -1;
	}
	*to = in[1];
	*from = out[0];
	return pid;
}

int migrate_pull_serve(struct supervisor *sv, struct snap_migrate_conn *c, uint32_t len, int line,
		       const char *session)
{
	struct snap_migrate_pull p;
	struct transport_url dest;
	char uuid[SNAP_NAME_MAX + 1], url[SNAP_MIGRATE_MESSAGE_MAX + 1], answer[CONTROL_TEXT_MAX + 1] = "";
	char out[4096], last[512] = "", text[300];
	size_t used = 0;
	int to = -1, from = -1, status = 0;
	bool running = true;
	pid_t pid;
	ssize_t n;

	if (snap_migrate_pull_decode(c->buf, len, &p) || snap_migrate_str_copy(p.uuid, uuid, sizeof(uuid)) ||
	    snap_migrate_str_copy(p.url, url, sizeof(url)))
		return snap_migrate_refuse(c, -EBADMSG, "malformed PULL"), 1;
	if (strcmp(uuid, session) || !vm_uuid_valid(uuid))
		return snap_migrate_refuse(c, -EPERM, "a PULL is for the domain uuid the AUTH named"), 1;
	if (transport_url_parse(url, &dest) || (dest.kind != TRANSPORT_TCP && dest.kind != TRANSPORT_UNIX))
		return snap_migrate_refuse(c, -EINVAL, "the PULL's address is not tcp://HOST:PORT or unix:PATH"), 1;
	if (!sv->cfg->token_path[0])
		return snap_migrate_refuse(c, -EPERM, "this ternd's token was not given as a file"), 1;
	transport_url_format(&dest, text, sizeof(text));
	dprintf(line, "pull %s\n", uuid);
	n = read(line, answer, sizeof(answer) - 1);
	if (n <= 0 || strncmp(answer, "ok", 2)) {
		if (n <= 0)
			snprintf(answer, sizeof(answer), "err ternd did not take the pull");
		answer[strcspn(answer, "\n")] = 0;
		pr_warn("domain %s: pull from %s refused: %s", uuid, text, answer + 4);
		return snap_migrate_refuse(c, -EBUSY, answer + 4), 1;
	}
	pid = ckpt_spawn(sv, uuid, text, &to, &from);
	if (pid < 0)
		return snap_migrate_refuse(c, -errno, "cannot run ckpt"), 1;
	pr_info("domain %s: sending its GPU state to %s (ckpt %d)", uuid, text, pid);
	while (running) {
		struct pollfd pfd[3] = { { .fd = from, .events = POLLIN }, { .fd = line, .events = POLLIN },
					 { .fd = c->fd, .events = POLLIN } };

		if (poll(pfd, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[0].revents)
			running = ckpt_output(from, out, sizeof(out), &used, last, sizeof(last));
		if (pfd[1].revents & POLLIN) {
			n = read(line, answer, sizeof(answer) - 1);
			if (n > 0 && !strncmp(answer, "switch ", 7) && to >= 0) {
				if (write(to, answer, (size_t)n) != n)
					pr_warn("domain %s: ckpt did not take the switchover", uuid);
			} else if (n <= 0) {
				pfd[1].revents = POLLHUP;
			}
		}
		/* The destination gave up, or the supervisor went: cancel. */
		if ((pfd[1].revents & (POLLHUP | POLLERR)) || (pfd[2].revents & (POLLIN | POLLHUP | POLLERR))) {
			pr_warn("domain %s: the migration is cancelled (%s)", uuid,
				pfd[2].revents ? "the destination hung up" : "ternd stopped");
			kill(pid, SIGTERM);
			if (to >= 0)
				close(to);
			to = -1;
			while (ckpt_output(from, out, sizeof(out), &used, last, sizeof(last)))
				;
			running = false;
		}
	}
	if (to >= 0)
		close(to);
	close(from);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && !WEXITSTATUS(status))
		return snap_migrate_ack_send(c, 0, "sent") ? 1 : 0;
	snap_migrate_ack_send(c, -EIO, last[0] ? last : "ckpt failed");
	return 1;
}
