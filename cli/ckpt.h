/* ckpt: what the subcommands share.  Internal to cli/.
 *
 * main() (ckpt.c) parses the global and per-command options into a
 * struct ckpt, looks the subcommand up in the one command table and calls its
 * handler.  A handler returns the process exit status (CKPT_EXIT_*); it
 * reports a failure once, through ckpt_fail(), which prints the message on
 * stderr and, with --json, lets main print {"ok":false,"error":...} unless
 * the handler already wrote its own object (ckpt_json_begin()).
 *
 * Single-threaded: one struct ckpt per process.
 */
#ifndef TERN_CLI_CKPT_H
#define TERN_CLI_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "control_msg.h"
#include "json_out.h"

enum ckpt_exit {
	CKPT_EXIT_OK = 0,
	CKPT_EXIT_FAILED = 1,   /* the operation failed (or found corruption) */
	CKPT_EXIT_USAGE = 2,    /* bad command line */
};

#define CKPT_DEFAULT_STATE_DIR "/var/lib/tern"

/* Per-command options a table entry may accept. */
#define CKPT_OPT_NAME        0x1u  /* --name NAME */
#define CKPT_OPT_INCREMENTAL 0x2u  /* --incremental */
#define CKPT_OPT_DEVICE      0x4u  /* --device N */
#define CKPT_OPT_FORCE       0x8u  /* --force */
#define CKPT_OPT_PID         0x10u /* --pid PID */
#define CKPT_OPT_IMAGES      0x20u /* --images DIR */
#define CKPT_OPT_LEAVE       0x40u /* --leave-running */
#define CKPT_OPT_PROCESS     0x80u /* --process */
#define CKPT_OPT_CRIU        0x100u /* --criu PATH, --criu-plugins DIR */
#define CKPT_OPT_DOMAIN      0x200u /* --domain NAME|UUID */
#define CKPT_OPT_MIGRATE     0x400u /* migrate's --max-downtime, --offline ... */
#define CKPT_OPT_DEST        0x800u /* --to URL, --token-file FILE (migrate, push) */

struct ckpt;

struct ckpt_command {
	const char *name;
	const char *synopsis;    /* arguments after the name, for the usage */
	const char *help;        /* one line */
	unsigned min_args;
	unsigned max_args;       /* positional arguments */
	unsigned options;        /* CKPT_OPT_* */
	int (*run)(struct ckpt *c);
};

struct ckpt {
	const struct ckpt_command *cmd;
	const char *control;     /* control socket path */
	const char *state_dir;
	const char *store;       /* --store, or NULL */
	bool store_explicit;     /* --store, --state-dir or TERN_STATE_DIR given */
	bool json;
	int timeout_s;           /* --timeout; 0: the command's default */
	int last_timeout_s;      /* what the last ckpt_control() waited */
	/* per-command options */
	const char *name;
	const char *domain;      /* snapshot --domain, migrate --domain */
	bool incremental;
	int device;              /* -1 when not given */
	bool force;              /* rm: also what a session or another snapshot needs */
	int pid;                 /* --pid, 0 when not given */
	const char *images;      /* --images */
	bool leave_running;
	bool process;            /* restore --process */
	const char *criu;        /* --criu, env TERN_CRIU */
	const char *criu_plugins; /* --criu-plugins, env TERN_CRIU_PLUGINS */
	struct {
		const char *to;
		const char *token_file;
		const char *tls_ca;         /* --tls-ca; NULL: TERN_TLS_CA */
		const char *guest_url;
		uint32_t max_downtime_ms;   /* 0: the default */
		uint32_t max_rounds;        /* 0: the default */
		uint64_t max_bandwidth;     /* bytes/s over all the streams, 0: none */
		uint32_t streams;           /* --streams, 0: the default */
		bool offline;
		bool cancel;
		bool switch_on_stdin;       /* --domain: the switchover comes as a line on stdin */
	} migrate;
	char **args;             /* positional arguments */
	unsigned nargs;
	char ternd_store[CONTROL_PATH_MAX + 1]; /* the store a running ternd reported, or "" */
	/* output state */
	bool quiet;              /* ckpt_fail records without printing */
	bool json_written;       /* the handler printed its own JSON object */
	char error[2048];        /* the reported failure */
	char answer_error[256];  /* why ternd's last answer did not decode */
};

/* Record and print a failure; returns @status for `return ckpt_fail(...)`. */
__attribute__((format(printf, 3, 4)))
int ckpt_fail(struct ckpt *c, int status, const char *fmt, ...);

/* Start the handler's one JSON object on stdout (marks json_written). */
void ckpt_json_begin(struct ckpt *c, struct json_writer *w);
/* Close it and end the line. */
void ckpt_json_end(struct ckpt *c, struct json_writer *w);

/* "1.5 GiB" */
void ckpt_size_format(uint64_t bytes, char *buf, unsigned cap);
/* "2024-05-01 12:00:00 UTC" from ns since the epoch. */
void ckpt_time_format(uint64_t ns, char *buf, unsigned cap);

/* Send @req to ternd and wait for its answer, drawing a progress bar
 * labelled @label (NULL: none) on a terminal.  @default_timeout_s applies
 * unless --timeout was given.  Returns 0 and the answer
 * (control_reply_release()), which may be an error; or a negative errno,
 * with *answer zeroed.  Reports nothing: ckpt_control_fail() words the error. */
int ckpt_control(struct ckpt *c, const struct control_request *req, int default_timeout_s,
		 const char *label, struct control_reply *answer);
/* Report a failed ckpt_control() (rc < 0) or an error answer; releases
 * @answer; returns CKPT_EXIT_FAILED. */
int ckpt_control_fail(struct ckpt *c, int rc, struct control_reply *answer);
/* "why" for a failed ckpt_control(), e.g. "no ternd answers on PATH". */
void ckpt_control_strerror(const struct ckpt *c, int rc, char *buf, unsigned cap);

/* Handlers (cmd_session.c, cmd_store.c, cmd_inspect.c). */
int cmd_ls(struct ckpt *c);
int cmd_snapshot(struct ckpt *c);
int cmd_suspend(struct ckpt *c);
int cmd_resume(struct ckpt *c);
int cmd_restore(struct ckpt *c);
int cmd_inspect(struct ckpt *c);
int cmd_verify(struct ckpt *c);
int cmd_rm(struct ckpt *c);
int cmd_dump(struct ckpt *c);            /* cmd_criu.c */
int cmd_migrate(struct ckpt *c);         /* cmd_migrate.c */
int cmd_push(struct ckpt *c);            /* cmd_migrate.c */
int cmd_restore_process(struct ckpt *c); /* cmd_criu.c: restore --process */

/* The store offline commands use: --store, else --state-dir/store, else
 * the store a running ternd reports, else the default.  Written to @buf. */
void ckpt_store_path(struct ckpt *c, char *buf, unsigned cap);

struct snap_store;
/* Open the store at ckpt_store_path(); on failure the message is reported
 * and CKPT_EXIT_FAILED returned. */
int ckpt_store_open(struct ckpt *c, struct snap_store **out, char *path, unsigned cap);
/* 0 when @name is a valid snapshot name; else the usage error, saying why
 * ("name too long (max 250)"), is reported and CKPT_EXIT_USAGE returned. */
int ckpt_name_refuse(struct ckpt *c, const char *name);

/* Report a failure of snapshot @name on the store (not found, busy, damaged,
 * anything else) with what to do; returns CKPT_EXIT_FAILED. */
int ckpt_store_fail(struct ckpt *c, struct snap_store *s, const char *path,
		    const char *name, const char *what, int rc);

#endif
