/* tern-hook: libvirt's qemu hook for domains with tern's channel
 * (installed as /etc/libvirt/hooks/qemu.d/tern; docs/libvirt.md).
 *
 *   tern-hook [--control PATH] [--timeout SECONDS] DOMAIN OP SUBOP [EXTRA]
 *
 * libvirt runs it with the domain XML on stdin and LC_ALL, PATH and HOME
 * only; a non-zero exit refuses a prepare or a restore, and what it writes
 * on stderr is the message libvirt shows.  On `restore begin` its stdout is
 * the XML libvirt restores with, and on `migrate begin` (on the
 * destination) the XML the incoming domain starts with.  It must never call libvirt (libvirtd is
 * waiting for it), so everything it knows comes from stdin.
 */
#define LOG_PREFIX "hook: "
#include "control.h"
#include "domain_xml.h"
#include "log.h"
#include "vm_request.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libxml/parser.h>     /* xmlCleanupParser */

struct hook {
	const char *control_path;
	int timeout_ms;
	struct domain_info dom;
	const char *xml;
	size_t xml_len;
};

/* The message libvirt shows: one line on stderr, "tern: ...". */
__attribute__((format(printf, 1, 2)))
static int hook_refuse(const char *fmt, ...)
{
	va_list ap;

	fputs("tern: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

/* Send a vm-* request for the domain; 0 with *answer (a CONTROL_REPLY_VM,
 * released by the caller) if ternd said ok, else 1 with the refusal on
 * stderr naming @what. */
static int hook_request(struct hook *h, enum control_op op, struct control_reply *answer, const char *what)
{
	struct control_request req;
	char err[512];
	int ret = vm_request_init(&req, op, h->dom.uuid, h->dom.name, h->dom.generation, false);

	memset(answer, 0, sizeof(*answer));
	if (ret)
		return hook_refuse("cannot %s domain %s: it has no uuid, name or generation tern can send",
				   what, h->dom.name);
	ret = vm_request_send(h->control_path, &req, h->timeout_ms, answer, err, sizeof(err));
	if (ret)
		return hook_refuse("cannot %s domain %s: %s", what, h->dom.name, err);
	if (answer->kind == CONTROL_REPLY_ERROR) {
		ret = hook_refuse("cannot %s domain %s: ternd: %s", what, h->dom.name, answer->error);
		control_reply_release(answer);
	}
	return ret;
}

static int hook_prepare(struct hook *h)
{
	struct control_reply answer;
	int ret = hook_request(h, CONTROL_OP_VM_ATTACH, &answer, "attach the GPU channel of");
	const char *path = answer.vm.path;

	if (ret)
		return ret;
	/* QEMU would connect to nothing (or wait in vain for ternd in bind
	 * mode): say where the channel must point instead. */
	if (path[0] && strcmp(path, h->dom.channel_path))
		ret = hook_refuse("domain %s: its %s channel must be <source mode='connect' path='%s'/> (it is %s%s)",
				  h->dom.name, TERN_CHANNEL_NAME, path,
				  h->dom.channel_path[0] ? "connect " : "not in connect mode", h->dom.channel_path);
	else
		pr_info("domain %s (%s) attached at %s", h->dom.name, h->dom.uuid, path);
	control_reply_release(&answer);
	return ret;
}

static int hook_restore(struct hook *h)
{
	char fresh[VM_GENERATION_MAX + 1], err[512];
	struct control_reply answer;
	char *out;
	int ret;

	if (!h->dom.generation[0])
		return hook_refuse("domain %s: this save image holds no tern GPU state (no generation in its metadata)",
				   h->dom.name);
	ret = hook_request(h, CONTROL_OP_VM_RESTORE, &answer, "restore the GPU state of");
	if (ret)
		return ret;
	control_reply_release(&answer);
	/* The restored domain's next save must be paired with its own state,
	 * never with this image's. */
	ret = domain_generation_fresh(fresh);
	if (!ret)
		ret = domain_xml_generation_set(h->xml, h->xml_len, fresh, &out, err, sizeof(err));
	if (ret)
		return hook_refuse("domain %s: cannot give the restored domain a new generation: %s", h->dom.name,
				   ret == -EBADMSG ? err : strerror(-ret));
	ret = fputs(out, stdout) < 0 || fflush(stdout) ? 1 : 0;
	free(out);
	if (ret)
		return hook_refuse("domain %s: cannot write the restored XML: %s", h->dom.name, strerror(errno));
	pr_info("domain %s (%s): GPU state of generation %s planned, next generation %s", h->dom.name, h->dom.uuid,
		h->dom.generation, fresh);
	return 0;
}

/* `migrate begin` on the destination: ternd here takes the domain (its
 * socket, and the GPU state it asks the source's ternd for, whose address
 * the metadata carries), and the channel points at that socket. Refusing
 * aborts the migration: the guest stays where it runs. */
static int hook_migrate(struct hook *h)
{
	struct domain_edit edit = { 0 };
	struct control_request req;
	struct control_reply answer;
	char err[512], *out = NULL;
	int ret;

	if (!h->dom.migrate_url[0])
		return hook_refuse("domain %s: its metadata names no ternd to take its GPU state from (run tern-libvirt "
				   "with --migrate-url on the source)", h->dom.name);
	ret = vm_request_init(&req, CONTROL_OP_VM_INCOMING, h->dom.uuid, h->dom.name, NULL, false);
	if (ret)
		return hook_refuse("cannot take domain %s: it has no uuid or name tern can send", h->dom.name);
	snprintf(req.url, sizeof(req.url), "%s", h->dom.migrate_url);
	ret = vm_request_send(h->control_path, &req, h->timeout_ms, &answer, err, sizeof(err));
	if (ret)
		return hook_refuse("cannot take domain %s: %s", h->dom.name, err);
	if (answer.kind == CONTROL_REPLY_ERROR) {
		ret = hook_refuse("cannot take domain %s: ternd: %s", h->dom.name, answer.error);
		control_reply_release(&answer);
		return ret;
	}
	if (answer.vm.path[0] && strcmp(answer.vm.path, h->dom.channel_path))
		edit.channel_path = answer.vm.path;
	ret = domain_xml_edit(h->xml, h->xml_len, &edit, &out, err, sizeof(err));
	if (ret)
		ret = hook_refuse("domain %s: cannot point its channel at %s: %s", h->dom.name, answer.vm.path,
				  ret == -EBADMSG ? err : strerror(-ret));
	else if (fputs(out, stdout) < 0 || fflush(stdout))
		ret = hook_refuse("domain %s: cannot write the migrated XML: %s", h->dom.name, strerror(errno));
	else
		pr_info("domain %s (%s) comes in at %s; its GPU state from %s", h->dom.name, h->dom.uuid,
			answer.vm.path, h->dom.migrate_url);
	free(out);
	control_reply_release(&answer);
	return ret;
}

static int hook_log(struct hook *h)
{
	pr_info("domain %s (%s) generation %s", h->dom.name, h->dom.uuid,
		h->dom.generation[0] ? h->dom.generation : "none");
	return 0;
}

/* libvirt's (op, subop) pairs tern acts on; all others exit 0. */
static const struct {
	const char *op, *subop;
	int (*run)(struct hook *h);
} hook_actions[] = {
	{ "prepare", "begin", hook_prepare },
	{ "restore", "begin", hook_restore },
	{ "migrate", "begin", hook_migrate },
	{ "started", "begin", hook_log },
	/* No vm-detach at `release end`: it comes before the listener's
	 * vm-save (STOPPED_SAVED), and detaching ends the relay that holds
	 * the sessions' streams, so their workers would end with it and the
	 * save find nothing; and a restore needs the socket to exist anyway. */
	{ "stopped", "end", hook_log },
	{ "release", "end", hook_log },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: tern-hook [--control PATH] [--timeout SECONDS] DOMAIN OP SUBOP [EXTRA]\n"
		   "  libvirt's qemu hook for tern; the domain XML on stdin\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "control", required_argument, NULL, 'c' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct hook h = { .control_path = CONTROL_DEFAULT_PATH, .timeout_ms = 300 * 1000 };
	int (*run)(struct hook *) = NULL;
	char err[512], *xml;
	int c, ret;

	log_open("tern-hook", LOG_INFO, -1);
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			h.control_path = optarg;
			break;
		case 't':
			if (vm_timeout_parse(optarg, &h.timeout_ms))
				return hook_refuse("--timeout takes 1 to %d seconds, not '%s'", VM_TIMEOUT_MAX_S, optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind < 3) {
		usage(stderr);
		return 2;
	}
	for (size_t i = 0; i < sizeof(hook_actions) / sizeof(hook_actions[0]); i++)
		if (!strcmp(argv[optind + 1], hook_actions[i].op) && !strcmp(argv[optind + 2], hook_actions[i].subop))
			run = hook_actions[i].run;
	if (!run)
		return 0;

	ret = domain_xml_read_fd(STDIN_FILENO, &xml, &h.xml_len);
	if (ret)
		return hook_refuse("domain %s: cannot read its XML: %s", argv[optind],
				   ret == -EMSGSIZE ? "larger than 4 MiB" : strerror(-ret));
	h.xml = xml;
	domain_xml_init();
	ret = domain_xml_parse(xml, h.xml_len, &h.dom, err, sizeof(err));
	if (ret)
		ret = hook_refuse("domain %s: its XML is refused: %s", argv[optind],
				  ret == -EBADMSG ? err : strerror(-ret));
	else if (h.dom.tern_channel)
		ret = run(&h);
	free(xml);
	xmlCleanupParser();
	return ret;
}
