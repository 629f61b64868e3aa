/* ckpt subcommands that go through a running ternd: ls, snapshot, suspend,
 * resume, restore.  The control protocol is described in docs/ckpt.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "control_stream.h"
#include "progress.h"
#include "snap_format.h"
#include "snap_store.h"

#define LONG_TIMEOUT_S 600   /* a 64 GiB snapshot to a slow disk takes minutes */
#define SHORT_TIMEOUT_S 10

static void progress_cb(void *arg, const struct json_value *line)
{
	progress_line_draw(arg, line);
}

int ckpt_control(struct ckpt *c, const char *command, int default_timeout_s,
		 const char *label, struct json_value **answer)
{
	struct progress pg;
	int rc;

	c->last_timeout_s = c->timeout_s ? c->timeout_s : default_timeout_s;
	progress_init(&pg, stderr, label && !c->json && isatty(STDERR_FILENO), label);
	rc = control_stream_request(c->control, command, c->last_timeout_s * 1000,
				    progress_cb, &pg, answer);
	progress_clear(&pg);
	return rc;
}

void ckpt_control_strerror(const struct ckpt *c, int rc, char *buf, unsigned cap)
{
	switch (rc) {
	case -ENOENT:
	case -ECONNREFUSED:
		snprintf(buf, cap, "no ternd answers on %s: start ternd, or pass --control PATH", c->control);
		break;
	case -EACCES:
	case -EPERM:
		snprintf(buf, cap, "permission denied on %s: run ckpt as root (or as ternd's user)", c->control);
		break;
	case -ETIMEDOUT:
		snprintf(buf, cap, "ternd on %s sent nothing for %d s; the operation may still be running: "
			 "check `ckpt ls`, or pass a longer --timeout", c->control, c->last_timeout_s);
		break;
	case -ECONNRESET:
	case -EPIPE:
		snprintf(buf, cap, "ternd on %s closed the connection without an answer: see ternd's log",
			 c->control);
		break;
	case -EBADMSG:
	case -EMSGSIZE:
		snprintf(buf, cap, "ternd on %s sent a malformed answer (%s): is ckpt from the same build as ternd?",
			 c->control, strerror(-rc));
		break;
	case -EINVAL:
		snprintf(buf, cap, "cannot use control socket path %s: %s", c->control, strerror(-rc));
		break;
	default:
		snprintf(buf, cap, "control socket %s: %s", c->control, strerror(-rc));
		break;
	}
}

int ckpt_control_fail(struct ckpt *c, int rc, struct json_value *answer)
{
	char why[1024];
	const char *err = json_member_string(answer, "error");

	if (rc < 0) {
		ckpt_control_strerror(c, rc, why, sizeof(why));
		json_free(answer);
		return ckpt_fail(c, CKPT_EXIT_FAILED, "%s", why);
	}
	if (err) {
		ckpt_fail(c, CKPT_EXIT_FAILED, "ternd: %s", err);
	} else {
		/* Neither "ok":true nor "error": not what the protocol allows. */
		ckpt_fail(c, CKPT_EXIT_FAILED, "ternd on %s gave an answer without \"ok\" or \"error\": "
			  "is ckpt from the same build as ternd?", c->control);
	}
	json_free(answer);
	return CKPT_EXIT_FAILED;
}

/* What may go into a control line: the protocol separates words by spaces
 * and ends the request at '\n'. */
static bool word_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > SNAP_NAME_MAX)
		return false;
	for (; *s; s++)
		if ((unsigned char)*s <= 0x20 || *s == 0x7f)
			return false;
	return true;
}

static bool answer_ok(const struct json_value *a)
{
	bool ok = false;

	return json_member_bool(a, "ok", &ok) && ok && !json_member(a, "error");
}

static uint64_t member_u64(const struct json_value *a, const char *key)
{
	uint64_t v = 0;

	json_member_u64(a, key, &v);
	return v;
}

static double member_number(const struct json_value *a, const char *key)
{
	double v = 0;

	json_member_number(a, key, &v);
	return v;
}

static const char *member_string(const struct json_value *a, const char *key, const char *dflt)
{
	const char *s = json_member_string(a, key);

	return s && s[0] ? s : dflt;
}

/* The answer's members, then ours: --json output passes ternd's fields on. */
static void answer_json_print(struct ckpt *c, const struct json_value *a, bool with_ratio)
{
	struct json_writer w;

	ckpt_json_begin(c, &w);
	for (size_t i = 0; i < a->count; i++)
		json_value_put(&w, a->keys[i], &a->items[i]);
	if (with_ratio) {
		uint64_t stored = member_u64(a, "stored_bytes");

		if (stored)
			json_double_put(&w, "ratio", (double)member_u64(a, "bytes") / (double)stored);
		else
			json_null_put(&w, "ratio");
	}
	ckpt_json_end(c, &w);
}

static void snapshot_result_print(const struct json_value *a, bool suspend)
{
	char logical[32], stored[32];
	uint64_t bytes = member_u64(a, "bytes"), st = member_u64(a, "stored_bytes");
	const char *parent = member_string(a, "parent", NULL);
	const char *session = member_string(a, "session", "?"), *name = member_string(a, "snapshot", "?");

	ckpt_size_format(bytes, logical, sizeof(logical));
	ckpt_size_format(st, stored, sizeof(stored));
	if (suspend)
		printf("session %s suspended into snapshot %s", session, name);
	else
		printf("snapshot %s of session %s", name, session);
	if (parent)
		printf(" (incremental, parent %s)\n", parent);
	else
		printf(" (full)\n");
	printf("  pause      %.1f ms (guest stopped), total %.1f ms\n",
	       member_number(a, "pause_ms"), member_number(a, "total_ms"));
	printf("  memory     %s in %llu regions\n", logical, (unsigned long long)member_u64(a, "regions"));
	if (st)
		printf("  written    %s (%.2fx smaller than memory)\n", stored, (double)bytes / (double)st);
	else
		printf("  written    nothing new (all chunks zero or already stored)\n");
	printf("  chunks     %llu: %llu zero, %llu unchanged, %llu new\n",
	       (unsigned long long)member_u64(a, "chunks"), (unsigned long long)member_u64(a, "zero_chunks"),
	       (unsigned long long)member_u64(a, "unchanged_chunks"),
	       (unsigned long long)member_u64(a, "new_chunks"));
}

/* Send a session command and print its answer. */
static int session_command(struct ckpt *c, const char *command, const char *label,
			   bool snapshot_answer)
{
	struct json_value *a = NULL;
	int rc = ckpt_control(c, command, LONG_TIMEOUT_S, label, &a);

	if (rc < 0 || !answer_ok(a))
		return ckpt_control_fail(c, rc, a);
	if (c->json) {
		answer_json_print(c, a, snapshot_answer);
	} else if (snapshot_answer) {
		snapshot_result_print(a, !strcmp(label, "suspend"));
		if (!strcmp(label, "suspend"))
			printf("  the worker stopped and its GPU memory is free; bring it back with "
			       "`ckpt resume %s`\n", member_string(a, "session", "SESSION"));
	} else {
		printf("session %s %s from snapshot %s: worker %llu, %.1f ms\n",
		       member_string(a, "session", "?"), !strcmp(label, "resume") ? "resumed" : "restored",
		       member_string(a, "snapshot", "?"), (unsigned long long)member_u64(a, "pid"),
		       member_number(a, "restore_ms"));
	}
	json_free(a);
	return CKPT_EXIT_OK;
}

int cmd_snapshot(struct ckpt *c)
{
	char command[3 * SNAP_NAME_MAX];

	if (!word_valid(c->args[0]))
		return ckpt_fail(c, CKPT_EXIT_USAGE, "'%s' is not a session id (no spaces or control characters)",
				 c->args[0]);
	if (c->name && !snap_name_valid(c->name))
		return ckpt_fail(c, CKPT_EXIT_USAGE, "'%s' is not a valid snapshot name: use 1-255 of "
				 "A-Z a-z 0-9 . _ -, not starting with '.'", c->name);
	snprintf(command, sizeof(command), "snapshot %s%s%s%s", c->args[0], c->name ? " " : "",
		 c->name ? c->name : "", c->incremental ? " --incremental" : "");
	return session_command(c, command, "snapshot", true);
}

int cmd_suspend(struct ckpt *c)
{
	char command[2 * SNAP_NAME_MAX];

	if (!word_valid(c->args[0]))
		return ckpt_fail(c, CKPT_EXIT_USAGE, "'%s' is not a session id (no spaces or control characters)",
				 c->args[0]);
	snprintf(command, sizeof(command), "suspend %s", c->args[0]);
	return session_command(c, command, "suspend", true);
}

static int restore_like(struct ckpt *c, const char *verb)
{
	char command[2 * SNAP_NAME_MAX + 32];

	if (!word_valid(c->args[0]))
		return ckpt_fail(c, CKPT_EXIT_USAGE, "'%s' is not a session id or snapshot name", c->args[0]);
	if (c->device >= 0)
		snprintf(command, sizeof(command), "%s %s --device %d", verb, c->args[0], c->device);
	else
		snprintf(command, sizeof(command), "%s %s", verb, c->args[0]);
	return session_command(c, command, verb, false);
}

int cmd_resume(struct ckpt *c)
{
	return restore_like(c, "resume");
}

int cmd_restore(struct ckpt *c)
{
	if (!snap_name_valid(c->args[0]))
		return ckpt_fail(c, CKPT_EXIT_USAGE, "'%s' is not a valid snapshot name", c->args[0]);
	return restore_like(c, "restore");
}

/* ls */

struct snap_row {
	char name[SNAP_NAME_MAX + 1];
	char parent[SNAP_NAME_MAX + 1];
	char session[SNAP_NAME_MAX + 1];
	uint64_t created_ns;
	uint64_t logical_bytes;
	uint64_t stored_bytes;
	bool complete;
};

static int rows_from_answer(const struct json_value *a, struct snap_row **out, size_t *count)
{
	const struct json_value *list = json_member(a, "snapshots");
	struct snap_row *rows;

	if (!list || list->type != JSON_ARRAY)
		return -EBADMSG;
	rows = calloc(list->count ? list->count : 1, sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	for (size_t i = 0; i < list->count; i++) {
		const struct json_value *s = &list->items[i];
		bool complete = false;

		snprintf(rows[i].name, sizeof(rows[i].name), "%s", member_string(s, "name", "?"));
		snprintf(rows[i].parent, sizeof(rows[i].parent), "%s", member_string(s, "parent", ""));
		snprintf(rows[i].session, sizeof(rows[i].session), "%s", member_string(s, "session", ""));
		rows[i].created_ns = member_u64(s, "created_ns");
		rows[i].logical_bytes = member_u64(s, "logical_bytes");
		rows[i].stored_bytes = member_u64(s, "stored_bytes");
		json_member_bool(s, "complete", &complete);
		rows[i].complete = complete;
	}
	*out = rows;
	*count = list->count;
	return 0;
}

static int rows_from_store(struct ckpt *c, char *path, unsigned cap, struct snap_row **out, size_t *count)
{
	struct snap_store *s;
	struct snap_info *info = NULL;
	struct snap_row *rows;
	unsigned n = 0;
	int rc = ckpt_store_open(c, &s, path, cap);

	if (rc)
		return rc;
	rc = snap_store_list(s, &info, &n);
	if (rc) {
		rc = ckpt_fail(c, CKPT_EXIT_FAILED, "cannot list the store %s: %s", path,
			       snap_store_error(s)[0] ? snap_store_error(s) : strerror(-rc));
		snap_store_close(s);
		return rc;
	}
	rows = calloc(n ? n : 1, sizeof(*rows));
	if (!rows) {
		free(info);
		snap_store_close(s);
		return ckpt_fail(c, CKPT_EXIT_FAILED, "out of memory");
	}
	for (unsigned i = 0; i < n; i++) {
		struct snap_manifest m;

		snprintf(rows[i].name, sizeof(rows[i].name), "%s", info[i].name);
		snprintf(rows[i].parent, sizeof(rows[i].parent), "%s", info[i].parent);
		rows[i].created_ns = info[i].created_ns;
		rows[i].logical_bytes = info[i].logical_bytes;
		rows[i].stored_bytes = info[i].stored_bytes;
		rows[i].complete = info[i].complete;
		if (info[i].complete && !snap_store_manifest_get(s, info[i].name, &m))
			snprintf(rows[i].session, sizeof(rows[i].session), "%s", m.session_id);
	}
	free(info);
	snap_store_close(s);
	*out = rows;
	*count = n;
	return 0;
}

static void sessions_print(const struct json_value *status)
{
	const struct json_value *list = json_member(status, "sessions");

	printf("SESSIONS (ternd pid %llu, backend %s)\n", (unsigned long long)member_u64(status, "pid"),
	       member_string(status, "backend", "?"));
	if (!list || list->type != JSON_ARRAY || !list->count) {
		printf("  (none)\n");
		return;
	}
	printf("  %-32s %8s %6s %12s %12s %s\n", "ID", "PID", "DEVICE", "MEMORY", "CALLS", "STATE");
	for (size_t i = 0; i < list->count; i++) {
		const struct json_value *s = &list->items[i];
		char mem[32];

		ckpt_size_format(member_u64(s, "memory"), mem, sizeof(mem));
		printf("  %-32s %8llu %6llu %12s %12llu %s\n", member_string(s, "id", "?"),
		       (unsigned long long)member_u64(s, "pid"), (unsigned long long)member_u64(s, "device"),
		       mem, (unsigned long long)member_u64(s, "calls"), member_string(s, "state", "?"));
	}
}

static void snapshots_print(const char *store, const struct snap_row *rows, size_t n)
{
	printf("SNAPSHOTS in %s\n", store);
	if (!n) {
		printf("  (none)\n");
		return;
	}
	printf("  %-28s %-28s %-20s %-23s %10s %10s %s\n", "NAME", "PARENT", "SESSION", "CREATED",
	       "SIZE", "STORED", "COMPLETE");
	for (size_t i = 0; i < n; i++) {
		char created[64], size[32], stored[32];

		ckpt_time_format(rows[i].created_ns, created, sizeof(created));
		ckpt_size_format(rows[i].logical_bytes, size, sizeof(size));
		ckpt_size_format(rows[i].stored_bytes, stored, sizeof(stored));
		printf("  %-28s %-28s %-20s %-23s %10s %10s %s\n", rows[i].name,
		       rows[i].parent[0] ? rows[i].parent : "-", rows[i].session[0] ? rows[i].session : "-",
		       rows[i].created_ns ? created : "-", size, stored, rows[i].complete ? "yes" : "no");
	}
}

static void ls_json_print(struct ckpt *c, const struct json_value *status, const char *note,
			  const char *store, const struct snap_row *rows, size_t n)
{
	const struct json_value *sessions = json_member(status, "sessions");
	struct json_writer w;

	ckpt_json_begin(c, &w);
	json_bool_put(&w, "ok", true);
	json_bool_put(&w, "ternd", status != NULL);
	if (note[0])
		json_string_put(&w, "note", note);
	if (status) {
		json_u64_put(&w, "ternd_pid", member_u64(status, "pid"));
		json_string_put(&w, "backend", member_string(status, "backend", ""));
	}
	if (sessions && sessions->type == JSON_ARRAY) {
		json_value_put(&w, "sessions", sessions);
	} else {
		json_array_begin(&w, "sessions");
		json_array_end(&w);
	}
	if (store)
		json_string_put(&w, "store", store);
	else
		json_null_put(&w, "store");
	json_array_begin(&w, "snapshots");
	for (size_t i = 0; i < n; i++) {
		json_object_begin(&w, NULL);
		json_string_put(&w, "name", rows[i].name);
		json_string_put(&w, "parent", rows[i].parent);
		json_string_put(&w, "session", rows[i].session);
		json_u64_put(&w, "created_ns", rows[i].created_ns);
		json_u64_put(&w, "logical_bytes", rows[i].logical_bytes);
		json_u64_put(&w, "stored_bytes", rows[i].stored_bytes);
		json_bool_put(&w, "complete", rows[i].complete);
		json_object_end(&w);
	}
	json_array_end(&w);
	ckpt_json_end(c, &w);
}

int cmd_ls(struct ckpt *c)
{
	struct json_value *status = NULL, *snaps = NULL;
	struct snap_row *rows = NULL;
	char note[sizeof(c->error)] = "", store[4096] = "";
	size_t n = 0;
	bool have_rows = false;
	int rc;

	rc = ckpt_control(c, "status", SHORT_TIMEOUT_S, NULL, &status);
	if (rc < 0 || json_member(status, "error")) {
		if (rc < 0)
			ckpt_control_strerror(c, rc, note, sizeof(note));
		else
			snprintf(note, sizeof(note), "ternd: %s", json_member_string(status, "error") ?: "?");
		json_free(status);
		status = NULL;
	} else {
		const char *sd = json_member_string(status, "state_dir");

		if (sd && sd[0])
			snprintf(c->ternd_store, sizeof(c->ternd_store), "%s/store", sd);
	}
	/* The store ternd uses, unless the user named one. */
	if (status && !c->store_explicit) {
		rc = ckpt_control(c, "snapshots", SHORT_TIMEOUT_S, NULL, &snaps);
		if (rc == 0 && answer_ok(snaps) && !rows_from_answer(snaps, &rows, &n)) {
			snprintf(store, sizeof(store), "%s", member_string(snaps, "store", c->ternd_store));
			have_rows = true;
		}
		json_free(snaps);
	}
	if (!have_rows) {
		/* Its failure is part of the one message below, or a note. */
		c->quiet = true;
		rc = rows_from_store(c, store, sizeof(store), &rows, &n);
		c->quiet = false;
		if (rc && !status) {
			/* Neither source: say both. */
			char store_err[sizeof(c->error)];

			snprintf(store_err, sizeof(store_err), "%s", c->error);
			free(rows);
			return ckpt_fail(c, CKPT_EXIT_FAILED, "%s; and %s", note, store_err);
		}
		if (rc) {
			/* ternd answers but has no store yet: show the sessions. */
			snprintf(note, sizeof(note), "%s", c->error);
			store[0] = 0;
		}
		have_rows = rc == 0;
	}
	if (c->json) {
		ls_json_print(c, status, note, have_rows ? store : NULL, rows, n);
	} else {
		if (status)
			sessions_print(status);
		else
			printf("SESSIONS: not shown (%s)\n", note);
		printf("\n");
		if (have_rows)
			snapshots_print(store, rows, n);
		else
			printf("SNAPSHOTS: not shown\n");
	}
	free(rows);
	json_free(status);
	return CKPT_EXIT_OK;
}
