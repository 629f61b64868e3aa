/* ckpt: snapshot, suspend, resume, restore and inspect tern sessions.
 *
 *     ckpt [GLOBAL OPTIONS] SUBCOMMAND [ARGS] [--json] [--help]
 *
 * The subcommands live in one table below, which also prints the usage.
 * Session commands talk to a running ternd over its control socket;
 * inspect, verify and rm read the snapshot store directly.  docs/ckpt.md
 * is the user's guide.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "units.h"
#include "snap_migrate.h"
#include "control.h"

static int cmd_help(struct ckpt *c);

static const struct ckpt_command commands[] = {
	{ "ls", "", "list the sessions of the running ternd and the snapshots in the store",
	  0, 0, 0, cmd_ls },
	{ "snapshot", "SESSION [--name NAME] [--incremental] | --domain NAME|UUID [PREFIX]",
	  "snapshot a session while it keeps running (--incremental: only what changed since its last snapshot); "
	  "--domain: every session of a libvirt domain at one instant, named PREFIX-0, PREFIX-1 ...",
	  0, 1, CKPT_OPT_NAME | CKPT_OPT_INCREMENTAL | CKPT_OPT_DOMAIN, cmd_snapshot },
	{ "suspend", "SESSION", "snapshot a session, then stop its worker and free its GPU memory",
	  1, 1, 0, cmd_suspend },
	{ "resume", "SESSION|SNAPSHOT [--device N]",
	  "bring a suspended session back (from its latest snapshot, or the one named)",
	  1, 1, CKPT_OPT_DEVICE, cmd_resume },
	{ "restore", "SNAPSHOT [--device N] | --process --images DIR [--device N]",
	  "restore a snapshot's session into a new worker (a live worker of that session is stopped first); "
	  "--process: a whole process dumped by `ckpt dump`, with CRIU",
	  0, 1, CKPT_OPT_DEVICE | CKPT_OPT_PROCESS | CKPT_OPT_IMAGES | CKPT_OPT_CRIU, cmd_restore },
	{ "dump", "--pid PID --images DIR [--leave-running] [--incremental]",
	  "checkpoint a whole process with CRIU: its sessions' GPU state into ternd's store, the process into DIR "
	  "(it is killed unless --leave-running)",
	  0, 0, CKPT_OPT_PID | CKPT_OPT_IMAGES | CKPT_OPT_LEAVE | CKPT_OPT_INCREMENTAL | CKPT_OPT_CRIU, cmd_dump },
	{ "inspect", "SNAPSHOT", "decode a snapshot: manifest, journal objects, regions, images, chunks (offline)",
	  1, 1, 0, cmd_inspect },
	{ "verify", "SNAPSHOT", "check every checksum of a snapshot and read every chunk (offline)",
	  1, 1, 0, cmd_verify },
	{ "rm", "SNAPSHOT... [--force]",
	  "remove snapshots and collect the chunks no other snapshot uses (offline; --force: also one a "
	  "suspended session or another snapshot needs)",
	  1, UINT_MAX, CKPT_OPT_FORCE, cmd_rm },
	{ "migrate", "SESSION --to URL [--max-downtime MS] [--max-bandwidth RATE] [--offline] | --cancel SESSION",
	  "move a running session to another ternd: pre-copy rounds, then stop-and-copy (docs/migration.md); "
	  "a libvirt domain's sessions move with `virsh migrate`, for which ternd runs "
	  "`ckpt migrate --domain UUID --to URL --switch-on-stdin`",
	  0, 1, CKPT_OPT_MIGRATE | CKPT_OPT_DEST | CKPT_OPT_DOMAIN, cmd_migrate },
	{ "push", "SNAPSHOT --to URL [--token-file FILE]",
	  "send a stored snapshot to another ternd's store over its --migrate-listen (for a restore there)",
	  1, 1, CKPT_OPT_DEST, cmd_push },
	{ "help", "[SUBCOMMAND]", "show this usage, or one subcommand's",
	  0, 1, 0, cmd_help },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const char global_usage[] =
	"Global options (anywhere on the line):\n"
	"  --control PATH    ternd's control socket (default " CONTROL_DEFAULT_PATH ", env TERN_CONTROL)\n"
	"  --state-dir DIR   ternd's state directory; the store is DIR/store\n"
	"                    (default " CKPT_DEFAULT_STATE_DIR ", env TERN_STATE_DIR)\n"
	"  --store DIR       the snapshot store itself, for inspect, verify, rm and ls\n"
	"  --timeout SEC     give up when ternd sends nothing for SEC seconds\n"
	"                    (default 600 for snapshot/suspend/resume/restore, 10 for ls)\n"
	"  --json            print one JSON object on stdout (docs/ckpt.md has the shapes)\n"
	"  --help            usage; `ckpt SUBCOMMAND --help` for one subcommand\n"
	"  --                the words after it are arguments, never options (a snapshot named -x)\n"
	"Exit status: 0 ok, 1 the operation failed, 2 usage error.\n";

static void usage_print(FILE *f)
{
	fprintf(f, "usage: ckpt [GLOBAL OPTIONS] SUBCOMMAND [ARGS] [--json]\n\nSubcommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++) {
		char head[64];

		snprintf(head, sizeof(head), "%s %s", commands[i].name, commands[i].synopsis);
		if (strlen(head) > 36)
			fprintf(f, "  %s\n  %-36s  %s\n", head, "", commands[i].help);
		else
			fprintf(f, "  %-36s  %s\n", head, commands[i].help);
	}
	fprintf(f, "\n%s", global_usage);
}

static void command_usage_print(const struct ckpt_command *cmd, FILE *f)
{
	fprintf(f, "usage: ckpt %s %s%s[--json]\n\n%s\n", cmd->name, cmd->synopsis,
		cmd->synopsis[0] ? " " : "", cmd->help);
	if (cmd->options & CKPT_OPT_NAME)
		fprintf(f, "  --name NAME       name of the new snapshot ([A-Za-z0-9._-], default SESSION-<unix ms>)\n");
	if (cmd->options & CKPT_OPT_INCREMENTAL)
		fprintf(f, "  --incremental     store only the chunks changed since the session's latest snapshot\n");
	if (cmd->options & CKPT_OPT_DOMAIN)
		fprintf(f, "  --domain D        a libvirt domain (name or uuid): all its sessions, held at a call\n"
			"                    boundary together, then copied (PREFIX default vm-UUID8-<unix ms>)\n");
	if (cmd->options & CKPT_OPT_DEVICE)
		fprintf(f, "  --device N        GPU index to restore onto (default: ternd's --device)\n");
	if (cmd->options & CKPT_OPT_FORCE)
		fprintf(f, "  --force           also remove a snapshot a suspended session waits in, or the parent\n"
			"                    of a snapshot that stays\n");
	if (cmd->options & CKPT_OPT_DEST)
		fprintf(f, "  --to URL          the destination ternd's --migrate-listen (tcp://HOST:PORT,\n"
			"                    tls://HOST:PORT, unix:PATH)\n"
			"  --token-file FILE the destination's token (default env TERN_TOKEN_FILE)\n"
			"  --tls-ca FILE     tls://: the CA the destination's certificate must chain to (default\n"
			"                    env TERN_TLS_CA, else the system's; TERN_TLS_CERT and TERN_TLS_KEY:\n"
			"                    a client certificate for a destination that asks for one)\n");
	if (cmd->options & CKPT_OPT_MIGRATE)
		fprintf(f, "  --guest-url URL   where the guest is to reconnect (default: the destination's first listener)\n"
			"  --max-downtime MS stop and copy once a round's dirty bytes take this long at the\n"
			"                    measured rate (default 100)\n"
			"  --max-rounds N    pre-copy rounds at most (default 8)\n"
			"  --max-bandwidth R bytes per second over all the streams, e.g. 100M (default: no cap)\n"
			"  --streams N       TCP connections that carry the chunks, 1 to 8 (default 4; tls://: 1)\n"
			"  --offline         suspend, transfer, resume on the destination (no pre-copy)\n"
			"  --cancel          stop the migration of SESSION under way; the session stays here\n");
	if (cmd->options & CKPT_OPT_PID)
		fprintf(f, "  --pid PID         the process to dump (a session leader: run it under setsid)\n");
	if (cmd->options & CKPT_OPT_PROCESS)
		fprintf(f, "  --process         restore the process in --images, then its sessions (docs/criu.md)\n");
	if (cmd->options & CKPT_OPT_IMAGES)
		fprintf(f, "  --images DIR      CRIU's images folder, with tern's record of the GPU snapshots\n");
	if (cmd->options & CKPT_OPT_LEAVE)
		fprintf(f, "  --leave-running   the process goes on after the dump\n");
	if (cmd->options & CKPT_OPT_CRIU)
		fprintf(f, "  --criu PATH       criu 4.x to run (default " TERN_CRIU_DEFAULT ", env TERN_CRIU)\n"
			   "  --criu-plugins DIR  where tern_criu.so is (default " TERN_CRIU_PLUGIN_DEFAULT
			   ", env TERN_CRIU_PLUGINS)\n");
	fprintf(f, "\n%s", global_usage);
}

static const struct ckpt_command *command_find(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

static int cmd_help(struct ckpt *c)
{
	const struct ckpt_command *cmd;

	if (!c->nargs && c->json) {
		struct json_writer w;

		ckpt_json_begin(c, &w);
		json_bool_put(&w, "ok", true);
		json_array_begin(&w, "commands");
		for (size_t i = 0; i < NCOMMANDS; i++) {
			json_object_begin(&w, NULL);
			json_string_put(&w, "name", commands[i].name);
			json_string_put(&w, "synopsis", commands[i].synopsis);
			json_string_put(&w, "help", commands[i].help);
			json_object_end(&w);
		}
		json_array_end(&w);
		ckpt_json_end(c, &w);
		return CKPT_EXIT_OK;
	}
	if (!c->nargs) {
		usage_print(stdout);
		return CKPT_EXIT_OK;
	}
	cmd = command_find(c->args[0]);
	if (!cmd) {
		usage_print(stderr);
		return ckpt_fail(c, CKPT_EXIT_USAGE, "no subcommand '%s'", c->args[0]);
	}
	command_usage_print(cmd, stdout);
	return CKPT_EXIT_OK;
}

/* --json is handled by main; this prints the error object when the handler
 * failed before writing its own. */
static void json_error_print(const struct ckpt *c, int status)
{
	struct json_writer w;

	json_writer_init(&w, stdout);
	json_object_begin(&w, NULL);
	json_bool_put(&w, "ok", false);
	json_string_put(&w, "error", c->error[0] ? c->error : "failed");
	json_u64_put(&w, "exit", (uint64_t)status);
	json_object_end(&w);
	fputc('\n', stdout);
}

/* Parse the command line.  Global options may appear anywhere, so that
 * `ckpt ls --json` and `ckpt --json ls` both work. */
static int args_parse(struct ckpt *c, int argc, char **argv, bool *help)
{
	const char *sub = NULL;
	unsigned opts_seen = 0;
	bool words_only = false;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		bool takes = !strcmp(a, "--control") || !strcmp(a, "--state-dir") ||
			     !strcmp(a, "--store") || !strcmp(a, "--timeout") ||
			     !strcmp(a, "--name") || !strcmp(a, "--device") || !strcmp(a, "--pid") ||
			     !strcmp(a, "--images") || !strcmp(a, "--criu") || !strcmp(a, "--criu-plugins") ||
			     !strcmp(a, "--domain") || !strcmp(a, "--to") || !strcmp(a, "--max-downtime") ||
			     !strcmp(a, "--max-bandwidth") || !strcmp(a, "--max-rounds") || !strcmp(a, "--token-file") ||
			     !strcmp(a, "--guest-url") || !strcmp(a, "--tls-ca") || !strcmp(a, "--streams");

		if (words_only) {
			takes = false;
		} else if (!strcmp(a, "--")) {
			words_only = true;
			continue;
		}
		if (takes && !val)
			return ckpt_fail(c, CKPT_EXIT_USAGE, "%s needs a value", a);
		if (words_only) {
			if (!sub) {
				sub = a;
				continue;
			}
			c->args[c->nargs++] = argv[i];
			continue;
		} else if (!strcmp(a, "--json")) {
			c->json = true;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			*help = true;
		} else if (!strcmp(a, "--control")) {
			c->control = val;
		} else if (!strcmp(a, "--state-dir")) {
			c->state_dir = val;
			c->store_explicit = true;
		} else if (!strcmp(a, "--store")) {
			c->store = val;
			c->store_explicit = true;
		} else if (!strcmp(a, "--timeout")) {
			char *end;
			long t = strtol(val, &end, 10);

			if (*end || end == val || t < 1 || t > 86400)
				return ckpt_fail(c, CKPT_EXIT_USAGE, "--timeout takes seconds, 1 to 86400: '%s'", val);
			c->timeout_s = (int)t;
		} else if (!strcmp(a, "--name")) {
			c->name = val;
			opts_seen |= CKPT_OPT_NAME;
		} else if (!strcmp(a, "--domain")) {
			c->domain = val;
			opts_seen |= CKPT_OPT_DOMAIN;
		} else if (!strcmp(a, "--incremental")) {
			c->incremental = true;
			opts_seen |= CKPT_OPT_INCREMENTAL;
		} else if (!strcmp(a, "--force")) {
			c->force = true;
			opts_seen |= CKPT_OPT_FORCE;
		} else if (!strcmp(a, "--device")) {
			char *end;
			long d = strtol(val, &end, 10);

			if (*end || end == val || d < 0 || d > 1023)
				return ckpt_fail(c, CKPT_EXIT_USAGE, "--device takes a GPU index: '%s'", val);
			c->device = (int)d;
			opts_seen |= CKPT_OPT_DEVICE;
		} else if (!strcmp(a, "--pid")) {
			char *end;
			long p = strtol(val, &end, 10);

			if (*end || end == val || p < 1 || p > 0x3fffffff)
				return ckpt_fail(c, CKPT_EXIT_USAGE, "--pid takes a process id: '%s'", val);
			c->pid = (int)p;
			opts_seen |= CKPT_OPT_PID;
		} else if (!strcmp(a, "--images")) {
			c->images = val;
			opts_seen |= CKPT_OPT_IMAGES;
		} else if (!strcmp(a, "--leave-running")) {
			c->leave_running = true;
			opts_seen |= CKPT_OPT_LEAVE;
		} else if (!strcmp(a, "--process")) {
			c->process = true;
			opts_seen |= CKPT_OPT_PROCESS;
		} else if (!strcmp(a, "--criu")) {
			c->criu = val;
			opts_seen |= CKPT_OPT_CRIU;
		} else if (!strcmp(a, "--criu-plugins")) {
			c->criu_plugins = val;
			opts_seen |= CKPT_OPT_CRIU;
		} else if (!strcmp(a, "--to")) {
			c->migrate.to = val;
			opts_seen |= CKPT_OPT_DEST;
		} else if (!strcmp(a, "--token-file")) {
			c->migrate.token_file = val;
			opts_seen |= CKPT_OPT_DEST;
		} else if (!strcmp(a, "--tls-ca")) {
			c->migrate.tls_ca = val;
			opts_seen |= CKPT_OPT_DEST;
		} else if (!strcmp(a, "--guest-url")) {
			c->migrate.guest_url = val;
			opts_seen |= CKPT_OPT_MIGRATE;
		} else if (!strcmp(a, "--max-downtime") || !strcmp(a, "--max-rounds")) {
			char *end;
			long v = strtol(val, &end, 10);

			if (*end || end == val || v < 1 || v > 3600000)
				return ckpt_fail(c, CKPT_EXIT_USAGE, "%s takes a positive number: '%s'", a, val);
			*(a[6] == 'd' ? &c->migrate.max_downtime_ms : &c->migrate.max_rounds) = (uint32_t)v;
			opts_seen |= CKPT_OPT_MIGRATE;
		} else if (!strcmp(a, "--streams")) {
			char *end;
			long v = strtol(val, &end, 10);

			if (*end || end == val || v < 1 || v > SNAP_MIGRATE_STREAMS_MAX)
				return ckpt_fail(c, CKPT_EXIT_USAGE, "--streams takes 1 to %u: '%s'", SNAP_MIGRATE_STREAMS_MAX,
						 val);
			c->migrate.streams = (uint32_t)v;
			opts_seen |= CKPT_OPT_MIGRATE;
		} else if (!strcmp(a, "--max-bandwidth")) {
			if (units_size_parse(val, &c->migrate.max_bandwidth) || !c->migrate.max_bandwidth)
				return ckpt_fail(c, CKPT_EXIT_USAGE, "--max-bandwidth takes bytes per second, e.g. 100M: '%s'",
						 val);
			opts_seen |= CKPT_OPT_MIGRATE;
		} else if (!strcmp(a, "--offline")) {
			c->migrate.offline = true;
			opts_seen |= CKPT_OPT_MIGRATE;
		} else if (!strcmp(a, "--cancel")) {
			c->migrate.cancel = true;
			opts_seen |= CKPT_OPT_MIGRATE;
		} else if (!strcmp(a, "--switch-on-stdin")) {
			c->migrate.switch_on_stdin = true;
			opts_seen |= CKPT_OPT_MIGRATE;
		} else if (a[0] == '-' && a[1]) {
			return ckpt_fail(c, CKPT_EXIT_USAGE, "unknown option '%s'; see `ckpt %s%s--help` "
					 "(a name that starts with '-' goes after `--`: ckpt %s%s-- %s)",
					 a, sub ? sub : "", sub ? " " : "", sub ? sub : "", sub ? " " : "", a);
		} else if (!sub) {
			sub = a;
			continue;
		} else {
			c->args[c->nargs++] = argv[i];
			continue;
		}
		if (takes)
			i++;
	}
	if (!sub) {
		if (*help)
			return -1;
		usage_print(stderr);
		return ckpt_fail(c, CKPT_EXIT_USAGE, "no subcommand given");
	}
	c->cmd = command_find(sub);
	if (!c->cmd) {
		usage_print(stderr);
		c->cmd = NULL;
		return ckpt_fail(c, CKPT_EXIT_USAGE, "unknown subcommand '%s'", sub);
	}
	if (*help)
		return -1;
	if (opts_seen & ~c->cmd->options) {
		unsigned bad = opts_seen & ~c->cmd->options;

		command_usage_print(c->cmd, stderr);
		return ckpt_fail(c, CKPT_EXIT_USAGE, "option %s does not apply to %s",
				 bad & CKPT_OPT_NAME ? "--name" :
				 bad & CKPT_OPT_INCREMENTAL ? "--incremental" :
				 bad & CKPT_OPT_DEVICE ? "--device" :
				 bad & CKPT_OPT_PID ? "--pid" :
				 bad & CKPT_OPT_IMAGES ? "--images" :
				 bad & CKPT_OPT_LEAVE ? "--leave-running" :
				 bad & CKPT_OPT_PROCESS ? "--process" :
				 bad & CKPT_OPT_CRIU ? "--criu" :
				 bad & CKPT_OPT_DOMAIN ? "--domain" :
				 bad & CKPT_OPT_DEST ? "--to, --token-file, --tls-ca" :
				 bad & CKPT_OPT_MIGRATE ? "migrate's --max-downtime, --offline ..." : "--force",
				 c->cmd->name);
	}
	if (c->nargs < c->cmd->min_args || c->nargs > c->cmd->max_args) {
		command_usage_print(c->cmd, stderr);
		return ckpt_fail(c, CKPT_EXIT_USAGE, "%s takes %s", c->cmd->name,
				 c->cmd->synopsis[0] ? c->cmd->synopsis : "no arguments");
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ckpt c;
	bool help = false;
	const char *env;
	int rc;

	/* A ternd that closes early must give an error, not kill ckpt. */
	signal(SIGPIPE, SIG_IGN);
	memset(&c, 0, sizeof(c));
	c.device = -1;
	c.control = CONTROL_DEFAULT_PATH;
	c.state_dir = CKPT_DEFAULT_STATE_DIR;
	env = getenv("TERN_CONTROL");
	if (env && env[0])
		c.control = env;
	c.criu = TERN_CRIU_DEFAULT;
	env = getenv("TERN_CRIU");
	if (env && env[0])
		c.criu = env;
	c.criu_plugins = TERN_CRIU_PLUGIN_DEFAULT;
	env = getenv("TERN_CRIU_PLUGINS");
	if (env && env[0])
		c.criu_plugins = env;
	env = getenv("TERN_STATE_DIR");
	if (env && env[0]) {
		c.state_dir = env;
		c.store_explicit = true;
	}
	c.args = calloc((size_t)argc + 1, sizeof(*c.args));
	if (!c.args) {
		fprintf(stderr, "ckpt: out of memory\n");
		return CKPT_EXIT_FAILED;
	}
	rc = args_parse(&c, argc, argv, &help);
	if (rc < 0) {
		/* --help: the usage goes to stdout, it was asked for. */
		if (c.cmd)
			command_usage_print(c.cmd, stdout);
		else
			usage_print(stdout);
		rc = CKPT_EXIT_OK;
	} else if (rc == 0) {
		rc = c.cmd->run(&c);
	}
	if (rc && c.json && !c.json_written)
		json_error_print(&c, rc);
	fflush(stdout);
	free(c.args);
	return rc;
}
