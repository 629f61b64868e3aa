/* tern-libvirt: follows libvirt's lifecycle events for domains with tern's
 * channel and tells ternd what became of their GPU state (docs/libvirt.md).
 *
 *   tern-libvirt [--connect URI] [--control PATH] [--migrate-url URL] [--timeout SECONDS] [--log-level L]
 *
 * What the hook cannot do, because nothing runs on a save before the guest
 * pauses and a hook must not call libvirt:
 *   started (booted)        -> a fresh generation in the live metadata
 *   stopped, saved          -> vm-save uuid generation (also managedsave)
 *   stopped, destroyed, shut down, crashed, failed -> vm-drop uuid
 * and, for `virsh migrate` (docs/migration.md, "virsh migrate"):
 *   started (booted, restored, migrated in) -> the metadata's migrate
 *                           address is this host's ternd's (--migrate-url)
 *   suspended, migrated (the switchover) -> vm-switch uuid generation
 *   stopped, migrated       -> vm-drop uuid (the destination has it now)
 *   resumed after a switchover here (the migration failed)
 *                           -> vm-restore uuid generation
 * Everything else is logged.  It keeps each tern domain's generation in
 * memory, read back from the live metadata when it (re)connects, and
 * reconnects when libvirtd restarts.
 *
 * Single-threaded: libvirt's default event loop.  A request to ternd runs
 * in a child process, so a long vm-save never stops the loop from
 * answering libvirtd's keepalive.
 */
#define LOG_PREFIX "listener: "
#include "control.h"
#include "domain_xml.h"
#include "log.h"
#include "vm_request.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <libxml/parser.h>     /* xmlCleanupParser */

#define LISTENER_DOMAINS_MAX 4096       /* tern domains followed at once */
#define LISTENER_RETRY_S 2              /* between attempts to reach libvirtd */

struct tracked_domain {
	char uuid[VM_UUID_LEN + 1];
	char name[VM_NAME_MAX + 1];
	char generation[VM_GENERATION_MAX + 1];
	bool switched;                  /* vm-switch sent: the GPU state is on its way out */
};

struct listener {
	const char *uri;
	const char *control_path;
	const char *migrate_url;        /* this ternd's migration listener as peers reach it, or NULL */
	int timeout_ms;
	virConnectPtr conn;
	int lifecycle_id;
	bool closed;                    /* libvirtd went away: reconnect */
	struct tracked_domain *doms;
	size_t count;
};

static volatile sig_atomic_t listener_stop;

static void on_signal(int sig)
{
	listener_stop = 1;
}

static struct tracked_domain *tracked_find(struct listener *l, const char *uuid)
{
	for (size_t i = 0; i < l->count; i++)
		if (!strcmp(l->doms[i].uuid, uuid))
			return &l->doms[i];
	return NULL;
}

static void tracked_forget(struct listener *l, const char *uuid)
{
	struct tracked_domain *t = tracked_find(l, uuid);

	if (t)
		*t = l->doms[--l->count];
}

static int tracked_set(struct listener *l, const struct domain_info *info, const char *generation)
{
	struct tracked_domain *t = tracked_find(l, info->uuid);

	if (!t) {
		if (l->count == LISTENER_DOMAINS_MAX)
			return -ENOSPC;
		t = &l->doms[l->count++];
		memset(t, 0, sizeof(*t));       /* a slot left by another domain */
	}
	strcpy(t->uuid, info->uuid);
	strcpy(t->name, info->name);
	strcpy(t->generation, generation);
	return 0;
}

/* The live XML of @dom parsed; false (and logged) when it cannot be read. */
static bool domain_inspect(virDomainPtr dom, struct domain_info *info)
{
	char err[256], *xml = virDomainGetXMLDesc(dom, 0);
	int ret;

	if (!xml) {
		pr_warn("domain %s: cannot read its XML: %s", virDomainGetName(dom), virGetLastErrorMessage());
		return false;
	}
	ret = domain_xml_parse(xml, strlen(xml), info, err, sizeof(err));
	free(xml);
	if (ret) {
		pr_warn("domain %s: its XML is refused: %s", virDomainGetName(dom),
			ret == -EBADMSG ? err : strerror(-ret));
		return false;
	}
	return true;
}

/* Follow @info's domain with @kept, or a fresh generation when NULL, and
 * write the tern metadata: the generation and this host's migrate address.
 * A migration's incoming domain does not take live metadata until it runs
 * (libvirt: "domain is not running"): it is written again at its resume. */
static void generation_assign(struct listener *l, virDomainPtr dom, const struct domain_info *info,
			      const char *kept)
{
	char generation[VM_GENERATION_MAX + 1], element[128 + DOMAIN_MIGRATE_URL_MAX];
	int ret = kept ? 0 : domain_generation_fresh(generation);

	if (ret) {
		pr_err("domain %s: no random generation: %s", info->name, strerror(-ret));
		return;
	}
	if (kept)
		snprintf(generation, sizeof(generation), "%s", kept);
	if (tracked_set(l, info, generation)) {
		pr_err("domain %s: more than %d tern domains followed; not this one", info->name, LISTENER_DOMAINS_MAX);
		return;
	}
	if (l->migrate_url)
		snprintf(element, sizeof(element), "<%s generation='%s' migrate='%s'/>", TERN_METADATA_ELEMENT,
			 generation, l->migrate_url);
	else
		snprintf(element, sizeof(element), "<%s generation='%s'/>", TERN_METADATA_ELEMENT, generation);
	if (virDomainSetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, element, TERN_XMLNS_KEY, TERN_XMLNS_URI,
				 VIR_DOMAIN_AFFECT_LIVE) < 0) {
		if (kept)
			pr_info("domain %s: its tern metadata is written once it runs (%s)", info->name,
				virGetLastErrorMessage());
		else
			pr_err("domain %s: cannot set its tern generation: %s", info->name, virGetLastErrorMessage());
		return;
	}
	pr_info("domain %s (%s): generation %s%s", info->name, info->uuid, generation, kept ? " kept" : "");
}

/* A running domain seen: at a boot (@fresh) it gets a new generation; a
 * restored or migrated one, or one found at start-up, keeps the one its
 * metadata carries, or gets one if it has none. */
static void domain_follow(struct listener *l, virDomainPtr dom, bool fresh)
{
	struct domain_info info;

	if (!domain_inspect(dom, &info) || !info.tern_channel)
		return;
	if (fresh || !info.generation[0]) {
		generation_assign(l, dom, &info, NULL);
		return;
	}
	/* Come from elsewhere: its next migration takes the state from here. */
	if (l->migrate_url && strcmp(info.migrate_url, l->migrate_url)) {
		generation_assign(l, dom, &info, info.generation);
		return;
	}
	if (tracked_set(l, &info, info.generation))
		pr_err("domain %s: more than %d tern domains followed; not this one", info.name, LISTENER_DOMAINS_MAX);
	else
		pr_info("domain %s (%s): generation %s kept", info.name, info.uuid, info.generation);
}

/* Send a vm-* request for @t from a child, so that the event loop goes on
 * meanwhile. */
static void request_spawn(struct listener *l, const struct tracked_domain *t, enum control_op op)
{
	const char *what = control_op_name(op);
	struct control_request req;
	pid_t pid;

	if (vm_request_init(&req, op, t->uuid, t->name, t->generation, false)) {
		pr_err("domain %s: no %s: its uuid or generation cannot be sent", t->name, what);
		return;
	}
	pid = fork();
	if (pid < 0) {
		pr_err("domain %s: cannot fork for %s: %s", t->name, what, strerror(errno));
		return;
	}
	if (pid == 0) {
		struct control_reply answer;
		char err[512];
		int ret = vm_request_send(l->control_path, &req, l->timeout_ms, &answer, err, sizeof(err));

		if (ret)
			pr_err("domain %s: %s: %s", t->name, what, err);
		else if (answer.kind == CONTROL_REPLY_ERROR)
			pr_err("domain %s: %s refused by ternd: %s", t->name, what, answer.error);
		else
			pr_info("domain %s: %s done", t->name, what);
		_exit(ret || answer.kind == CONTROL_REPLY_ERROR);
	}
}

static void domain_stopped(struct listener *l, virDomainPtr dom, int detail)
{
	char uuid[VIR_UUID_STRING_BUFLEN];
	struct tracked_domain *t;
	enum control_op op = 0;

	if (virDomainGetUUIDString(dom, uuid) < 0)
		return;
	t = tracked_find(l, uuid);
	if (!t)
		return;         /* not a tern domain, or it started while libvirtd was out of reach */
	switch (detail) {
	case VIR_DOMAIN_EVENT_STOPPED_SAVED:
		op = CONTROL_OP_VM_SAVE;
		break;
	case VIR_DOMAIN_EVENT_STOPPED_DESTROYED:
	case VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN:
	case VIR_DOMAIN_EVENT_STOPPED_CRASHED:
	case VIR_DOMAIN_EVENT_STOPPED_FAILED:
	case VIR_DOMAIN_EVENT_STOPPED_MIGRATED:
		/* Migrated: the destination restores the state it was sent. */
		op = CONTROL_OP_VM_DROP;
		break;
	default:
		/* Reverted to a snapshot: its state is someone else's now. */
		pr_info("domain %s stopped (detail %d): GPU state left as it is", t->name, detail);
		break;
	}
	if (op) {
		pr_info("domain %s stopped (detail %d): %s", t->name, detail, control_op_name(op));
		request_spawn(l, t, op);
	}
	tracked_forget(l, uuid);
}

/* The switchover of a migration away (@event SUSPENDED, detail MIGRATED),
 * and a resume after it (the migration failed: the guest goes on here). */
static void domain_migrating(struct listener *l, virDomainPtr dom, int event, int detail)
{
	char uuid[VIR_UUID_STRING_BUFLEN];
	struct tracked_domain *t;

	if (virDomainGetUUIDString(dom, uuid) < 0 || !(t = tracked_find(l, uuid)))
		return;
	if (event == VIR_DOMAIN_EVENT_SUSPENDED && detail == VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED) {
		pr_info("domain %s: migration switchover: vm-switch", t->name);
		t->switched = true;
		request_spawn(l, t, CONTROL_OP_VM_SWITCH);
	} else if (event == VIR_DOMAIN_EVENT_RESUMED && t->switched) {
		pr_info("domain %s resumed here after a switchover (detail %d): vm-restore", t->name, detail);
		t->switched = false;
		request_spawn(l, t, CONTROL_OP_VM_RESTORE);
	} else if (event == VIR_DOMAIN_EVENT_RESUMED) {
		/* Migrated in: its metadata can be written now. */
		domain_follow(l, dom, false);
	}
}

static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque)
{
	struct listener *l = opaque;

	switch (event) {
	case VIR_DOMAIN_EVENT_SUSPENDED:
	case VIR_DOMAIN_EVENT_RESUMED:
		domain_migrating(l, dom, event, detail);
		pr_debug("domain %s: event %d detail %d", virDomainGetName(dom), event, detail);
		break;
	case VIR_DOMAIN_EVENT_STARTED:
		domain_follow(l, dom, detail == VIR_DOMAIN_EVENT_STARTED_BOOTED);
		break;
	case VIR_DOMAIN_EVENT_STOPPED:
		domain_stopped(l, dom, detail);
		break;
	default:
		pr_debug("domain %s: event %d detail %d", virDomainGetName(dom), event, detail);
		break;
	}
	return 0;
}

static void on_close(virConnectPtr conn, int reason, void *opaque)
{
	struct listener *l = opaque;

	pr_warn("connection to libvirtd closed (reason %d)", reason);
	l->closed = true;
}

static void listener_disconnect(struct listener *l)
{
	if (!l->conn)
		return;
	if (l->lifecycle_id >= 0)
		virConnectDomainEventDeregisterAny(l->conn, l->lifecycle_id);
	virConnectUnregisterCloseCallback(l->conn, on_close);
	virConnectClose(l->conn);
	l->conn = NULL;
	l->lifecycle_id = -1;
	l->closed = false;
}

/* Connect, subscribe, and take stock of the running domains.  What the
 * table holds is kept: a libvirtd that has just started lists its running
 * domains only once it has reconnected to their QEMUs, which may be after
 * this, and their stop events still need their generations.  (A domain
 * that stopped while libvirtd was out of reach is never heard of again; its
 * entry is replaced when it starts next.) */
static int listener_connect(struct listener *l)
{
	virDomainPtr *doms = NULL;
	int n;

	l->conn = virConnectOpen(l->uri);
	if (!l->conn)
		return -ECONNREFUSED;
	if (virConnectSetKeepAlive(l->conn, 5, 3) < 0)
		pr_warn("no keepalive with libvirtd: %s", virGetLastErrorMessage());
	if (virConnectRegisterCloseCallback(l->conn, on_close, l, NULL) < 0)
		pr_warn("no close callback: %s", virGetLastErrorMessage());
	l->lifecycle_id = virConnectDomainEventRegisterAny(l->conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
							   VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), l, NULL);
	if (l->lifecycle_id < 0) {
		pr_err("cannot subscribe to lifecycle events: %s", virGetLastErrorMessage());
		listener_disconnect(l);
		return -EIO;
	}
	n = virConnectListAllDomains(l->conn, &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
	if (n < 0) {
		pr_warn("cannot list the running domains: %s; trying again", virGetLastErrorMessage());
		listener_disconnect(l);
		return -EAGAIN;
	}
	pr_debug("libvirtd lists %d running domains", n);
	for (int i = 0; i < n; i++) {
		domain_follow(l, doms[i], false);
		virDomainFree(doms[i]);
	}
	free(doms);
	pr_info("connected to %s, following %zu tern domains", l->uri ? l->uri : "the default URI", l->count);
	return 0;
}

/* Wakes the event loop so that signals and reconnects are looked at. */
static void on_tick(int timer, void *opaque)
{
}

/* libvirt's own errors are reported where they are handled, not on stderr. */
static void on_libvirt_error(void *opaque, virErrorPtr e)
{
	pr_debug("libvirt: %s", e && e->message ? e->message : "error");
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tern-libvirt [--connect URI] [--control PATH] [--migrate-url URL] [--timeout SECONDS]\n"
		   "                    [--log-level L]\n\n"
		   "Follows libvirt's domain lifecycle events and tells ternd of the tern\n"
		   "domains' saves, restores and ends (docs/libvirt.md). Run it as root,\n"
		   "beside libvirtd.\n"
		   "  --connect URI      libvirt's connection (default qemu:///system)\n"
		   "  --control PATH     ternd's control socket (default " CONTROL_DEFAULT_PATH ")\n"
		   "  --migrate-url URL  where other hosts' ternd reach this one's --migrate-listen;\n"
		   "                     written into each tern domain's metadata, so that `virsh\n"
		   "                     migrate` destinations ask it for the GPU state\n"
		   "  --timeout SECONDS  bound of each request to ternd (default 600; a save\n"
		   "                     copies GPU memory)\n"
		   "  --log-level L      error, warn, info (default) or debug\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "connect", required_argument, NULL, 'c' },
		{ "control", required_argument, NULL, 'C' },
		{ "timeout", required_argument, NULL, 't' },
		{ "migrate-url", required_argument, NULL, 'm' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct listener l = { .uri = "qemu:///system", .control_path = CONTROL_DEFAULT_PATH,
			      .timeout_ms = 600 * 1000, .lifecycle_id = -1 };
	struct sigaction sa = { .sa_handler = on_signal };
	enum log_level level = LOG_INFO;
	time_t last_attempt = 0;
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			l.uri = optarg;
			break;
		case 'C':
			l.control_path = optarg;
			break;
		case 'm':
			if (!domain_migrate_url_valid(optarg)) {
				fprintf(stderr, "tern-libvirt: --migrate-url takes tcp://HOST:PORT or unix:PATH, "
					"at most %d bytes, no spaces or quotes\n", DOMAIN_MIGRATE_URL_MAX);
				return 2;
			}
			l.migrate_url = optarg;
			break;
		case 't':
			if (vm_timeout_parse(optarg, &l.timeout_ms)) {
				fprintf(stderr, "tern-libvirt: --timeout takes 1 to %d seconds\n", VM_TIMEOUT_MAX_S);
				return 2;
			}
			break;
		case 'l':
			if (log_level_parse(optarg) < 0) {
				fprintf(stderr, "tern-libvirt: --log-level takes error, warn, info or debug\n");
				return 2;
			}
			level = (enum log_level)log_level_parse(optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	log_open("tern-libvirt", level, -1);
	l.doms = calloc(LISTENER_DOMAINS_MAX, sizeof(*l.doms));
	if (!l.doms)
		return 1;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	/* Requests run in children nobody waits for. */
	signal(SIGCHLD, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	domain_xml_init();
	virSetErrorFunc(NULL, on_libvirt_error);
	if (virEventRegisterDefaultImpl() < 0 || virEventAddTimeout(1000, on_tick, NULL, NULL) < 0) {
		pr_err("cannot start libvirt's event loop");
		return 1;
	}
	while (!listener_stop) {
		if (l.closed)
			listener_disconnect(&l);
		if (!l.conn && time(NULL) - last_attempt >= LISTENER_RETRY_S) {
			last_attempt = time(NULL);
			if (listener_connect(&l))
				pr_warn("libvirtd at %s not reachable: %s; trying again", l.uri, virGetLastErrorMessage());
		}
		if (virEventRunDefaultImpl() < 0)
			pr_warn("event loop: %s", virGetLastErrorMessage());
	}
	listener_disconnect(&l);
	free(l.doms);
	xmlCleanupParser();
	pr_info("stopped");
	return 0;
}
