/* ckpt subcommands that go through a running ternd: ls, snapshot, suspend,
 * resume, restore.  The control protocol is described in docs/ckpt.md. */
#include <errno.h>
#include <json-c/json.h>
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

static void progress_cb(void *arg, const struct control_progress *p)
{
	progress_line_draw(arg, p);
}

int ckpt_control(struct ckpt *c, const struct control_request *req, int default_timeout_s,
		 const char *label, struct control_reply *answer)
{
	struct progress pg;
	int rc;

	c->last_timeout_s = c->timeout_s ? c->timeout_s : default_timeout_s;
	c->answer_error[0] = 0;
	progress_init(&pg, stderr, label && !c->json && isatty(STDERR_FILENO), label);
	rc = control_stream_request(c->control, req, c->last_timeout_s * 1000, progress_cb, &pg, answer,
				    c->answer_error, sizeof(c->answer_error));
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
			 c->control, c->answer_error[0] ? c->answer_error : strerror(-rc));
		break;
	case -EINVAL:
		snprintf(buf, cap, "cannot use control socket path %s: %s", c->control, strerror(-rc));
		break;
	default:
		snprintf(buf, cap, "control socket %s: %s", c->control, strerror(-rc));
		break;
	}
}

int ckpt_control_fail(struct ckpt *c, int rc, struct control_reply *answer)
{
	char why[1024];

	if (rc < 0) {
		ckpt_control_strerror(c, rc, why, sizeof(why));
		control_reply_release(answer);
		return ckpt_fail(c, CKPT_EXIT_FAILED, "%s", why);
	}
	ckpt_fail(c, CKPT_EXIT_FAILED, "ternd: %s", answer->kind == CONTROL_REPLY_ERROR ? answer->error : "?");
	control_reply_release(answer);
	return CKPT_EXIT_FAILED;
}

/* An operator's name for a request: the request carries any bytes (they are
 * escaped), but it must fit and hold no NUL, which argv cannot anyway. */
static int name_check(struct ckpt *c, const char *s, const char *what)
{
	size_t n = strlen(s);

	if (n == 0 || n > CONTROL_NAME_MAX)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "a %s is 1 to %d bytes, not %zu", what, CONTROL_NAME_MAX, n);
	return 0;
}

/* The answer's members, then ours: --json output passes ternd's fields on. */
static void answer_json_print(struct ckpt *c, const struct control_reply *a)
{
	struct json_object *obj = control_reply_to_json(a);
	struct json_writer w;

	ckpt_json_begin(c, &w);
	if (obj)
		json_members_put(&w, obj);
	else
		w.failed = true;
	if (a->kind == CONTROL_REPLY_SNAPSHOT) {
		if (a->snapshot.stored_bytes)
			json_double_put(&w, "ratio", (double)a->snapshot.bytes / (double)a->snapshot.stored_bytes);
		else
			json_null_put(&w, "ratio");
	}
	ckpt_json_end(c, &w);
	json_object_put(obj);
}

static void snapshot_result_print(const struct control_snapshot_result *a, bool suspend)
{
	char logical[32], stored[32];

	ckpt_size_format(a->bytes, logical, sizeof(logical));
	ckpt_size_format(a->stored_bytes, stored, sizeof(stored));
	if (suspend)
		printf("session %s suspended into snapshot %s", a->session, a->snapshot);
	else
		printf("snapshot %s of session %s", a->snapshot, a->session);
	if (a->parent[0])
		printf(" (incremental, parent %s)\n", a->parent);
	else
		printf(" (full)\n");
	printf("  pause      %.1f ms (guest stopped), total %.1f ms\n", a->pause_ms, a->total_ms);
	printf("  memory     %s in %u regions\n", logical, a->regions);
	if (a->stored_bytes)
		printf("  written    %s (%.2fx smaller than memory)\n", stored,
		       (double)a->bytes / (double)a->stored_bytes);
	else
		printf("  written    nothing new (all chunks zero or already stored)\n");
	printf("  chunks     %llu: %llu zero, %llu unchanged, %llu new\n", (unsigned long long)a->chunks,
	       (unsigned long long)a->zero_chunks, (unsigned long long)a->unchanged_chunks,
	       (unsigned long long)a->new_chunks);
}

/* Send a session request and print its answer. */
static int session_command(struct ckpt *c, const struct control_request *req, const char *label)
{
	struct control_reply a;
	int rc = ckpt_control(c, req, LONG_TIMEOUT_S, label, &a);

	if (rc < 0 || a.kind == CONTROL_REPLY_ERROR)
		return ckpt_control_fail(c, rc, &a);
	if (c->json) {
		answer_json_print(c, &a);
	} else if (a.kind == CONTROL_REPLY_VM) {
		printf("domain %s (%s): %u sessions snapshotted together\n", a.vm.uuid, a.vm.name, a.vm.count);
		for (uint32_t i = 0; i < a.vm.count; i++)
			printf("  %-40s %s\n", a.vm.snapshots[i].session, a.vm.snapshots[i].snapshot);
	} else if (a.kind == CONTROL_REPLY_SNAPSHOT) {
		snapshot_result_print(&a.snapshot, req->op == CONTROL_OP_SUSPEND);
		if (req->op == CONTROL_OP_SUSPEND)
			printf("  the worker stopped and its GPU memory is free; bring it back with "
			       "`ckpt resume %s`\n", a.snapshot.session);
	} else {
		printf("session %s %s from snapshot %s: worker %d, %.1f ms\n", a.restore.session,
		       req->op == CONTROL_OP_RESUME ? "resumed" : "restored", a.restore.snapshot, a.restore.pid,
		       a.restore.restore_ms);
	}
	control_reply_release(&a);
	return CKPT_EXIT_OK;
}

/* snapshot --domain NAME|UUID [PREFIX]: every session of a libvirt domain
 * at one instant (vm-snapshot). */
static int domain_snapshot(struct ckpt *c)
{
	struct control_request req = { .op = CONTROL_OP_VM_SNAPSHOT, .device = -1 };

	if (c->incremental || c->name)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "snapshot --domain takes a PREFIX, not --name or --incremental");
	if (name_check(c, c->domain, "domain name or uuid") ||
	    (c->nargs && name_check(c, c->args[0], "snapshot prefix")))
		return CKPT_EXIT_USAGE;
	if (strlen(c->domain) > VM_NAME_MAX)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "a domain name has at most %d bytes", VM_NAME_MAX);
	memcpy(req.domain, c->domain, strlen(c->domain) + 1);
	if (c->nargs)
		memcpy(req.snapshot, c->args[0], strlen(c->args[0]) + 1);
	return session_command(c, &req, "snapshot");
}

int cmd_snapshot(struct ckpt *c)
{
	struct control_request req = { .op = CONTROL_OP_SNAPSHOT, .incremental = c->incremental, .device = -1 };

	if (c->domain)
		return domain_snapshot(c);
	if (!c->nargs)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "snapshot takes a SESSION, or --domain NAME|UUID");
	if (name_check(c, c->args[0], "session id"))
		return CKPT_EXIT_USAGE;
	if (c->name && ckpt_name_refuse(c, c->name))
		return CKPT_EXIT_USAGE;
	memcpy(req.session, c->args[0], strlen(c->args[0]) + 1);
	if (c->name)
		memcpy(req.snapshot, c->name, strlen(c->name) + 1);
	return session_command(c, &req, "snapshot");
}

int cmd_suspend(struct ckpt *c)
{
	struct control_request req = { .op = CONTROL_OP_SUSPEND, .device = -1 };

	if (name_check(c, c->args[0], "session id"))
		return CKPT_EXIT_USAGE;
	memcpy(req.session, c->args[0], strlen(c->args[0]) + 1);
	return session_command(c, &req, "suspend");
}

int cmd_resume(struct ckpt *c)
{
	struct control_request req = { .op = CONTROL_OP_RESUME, .device = c->device };

	if (name_check(c, c->args[0], "session id or snapshot name"))
		return CKPT_EXIT_USAGE;
	memcpy(req.session, c->args[0], strlen(c->args[0]) + 1);
	return session_command(c, &req, "resume");
}

int cmd_restore(struct ckpt *c)
{
	struct control_request req = { .op = CONTROL_OP_RESTORE, .device = c->device };

	if (c->process || c->images) {
		if (!c->process || !c->images || c->nargs)
			return ckpt_fail(c, CKPT_EXIT_USAGE, "restore --process takes --images DIR and no snapshot "
					 "(the images' record names it)");
		return cmd_restore_process(c);
	}
	if (c->nargs != 1)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "restore takes SNAPSHOT, or --process --images DIR");
	if (ckpt_name_refuse(c, c->args[0]))
		return CKPT_EXIT_USAGE;
	memcpy(req.snapshot, c->args[0], strlen(c->args[0]) + 1);
	return session_command(c, &req, "restore");
}

/* ls */

/* A row of the snapshot table, from ternd or read from the store. */
#define snap_row control_snapshot_info

static int rows_from_answer(const struct control_snapshots *a, struct snap_row **out, size_t *count)
{
	struct snap_row *rows = calloc(a->count ? a->count : 1, sizeof(*rows));

	if (!rows)
		return -ENOMEM;
	memcpy(rows, a->snapshots, a->count * sizeof(*rows));
	*out = rows;
	*count = a->count;
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

static void sessions_print(const struct control_status *st)
{
	printf("SESSIONS (ternd pid %d, backend %s)\n", st->pid, st->backend);
	if (!st->session_count) {
		printf("  (none)\n");
		return;
	}
	printf("  %-40s %8s %6s %12s %12s %-10s %s\n", "ID", "PID", "DEVICE", "MEMORY", "CALLS", "STATE", "DOMAIN");
	for (uint32_t i = 0; i < st->session_count; i++) {
		const struct control_session_info *e = &st->sessions[i];
		char mem[32];

		ckpt_size_format(e->memory, mem, sizeof(mem));
		printf("  %-40s %8d %6d %12s %12llu %-10s %s\n", e->id, e->pid, e->device, mem,
		       (unsigned long long)e->calls, e->state,
		       e->domain_name[0] ? e->domain_name : e->domain_uuid[0] ? e->domain_uuid : "-");
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

static void ls_json_print(struct ckpt *c, const struct control_reply *status, const char *note,
			  const char *store, const struct snap_row *rows, size_t n)
{
	struct json_object *st = status ? control_reply_to_json(status) : NULL, *sessions = NULL;
	struct json_writer w;

	ckpt_json_begin(c, &w);
	json_bool_put(&w, "ok", true);
	json_bool_put(&w, "ternd", status != NULL);
	if (note[0])
		json_string_put(&w, "note", note);
	if (status) {
		json_u64_put(&w, "ternd_pid", (uint64_t)status->status.pid);
		json_string_put(&w, "backend", status->status.backend);
	}
	if (st && json_object_object_get_ex(st, "sessions", &sessions)) {
		json_value_put(&w, "sessions", json_object_get(sessions));
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
	json_object_put(st);
}

int cmd_ls(struct ckpt *c)
{
	struct control_request status_req = { .op = CONTROL_OP_STATUS, .device = -1 };
	struct control_request snaps_req = { .op = CONTROL_OP_SNAPSHOTS, .device = -1 };
	struct control_reply status, snaps;
	struct snap_row *rows = NULL;
	char note[sizeof(c->error)] = "", store[CONTROL_PATH_MAX + 1] = "";
	size_t n = 0;
	bool have_rows = false, have_status;
	int rc;

	rc = ckpt_control(c, &status_req, SHORT_TIMEOUT_S, NULL, &status);
	have_status = rc == 0 && status.kind == CONTROL_REPLY_STATUS;
	if (!have_status) {
		if (rc < 0)
			ckpt_control_strerror(c, rc, note, sizeof(note));
		else
			snprintf(note, sizeof(note), "ternd: %s", status.error);
		control_reply_release(&status);
	} else if (status.status.state_dir[0]) {
		snprintf(c->ternd_store, sizeof(c->ternd_store), "%.4000s/store", status.status.state_dir);
	}
	/* The store ternd uses, unless the user named one. */
	if (have_status && !c->store_explicit) {
		rc = ckpt_control(c, &snaps_req, SHORT_TIMEOUT_S, NULL, &snaps);
		if (rc == 0 && snaps.kind == CONTROL_REPLY_SNAPSHOTS && !rows_from_answer(&snaps.snapshots, &rows, &n)) {
			snprintf(store, sizeof(store), "%s", snaps.snapshots.store);
			have_rows = true;
		}
		control_reply_release(&snaps);
	}
	if (!have_rows) {
		/* Its failure is part of the one message below, or a note. */
		c->quiet = true;
		rc = rows_from_store(c, store, sizeof(store), &rows, &n);
		c->quiet = false;
		if (rc && !have_status) {
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
		ls_json_print(c, have_status ? &status : NULL, note, have_rows ? store : NULL, rows, n);
	} else {
		if (have_status)
			sessions_print(&status.status);
		else
			printf("SESSIONS: not shown (%s)\n", note);
		printf("\n");
		if (have_rows)
			snapshots_print(store, rows, n);
		else
			printf("SNAPSHOTS: not shown\n");
	}
	free(rows);
	if (have_status)
		control_reply_release(&status);
	return CKPT_EXIT_OK;
}
