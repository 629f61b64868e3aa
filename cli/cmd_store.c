/* ckpt subcommands that work on the snapshot store directly, without ternd:
 * verify and rm; and finding and opening the store for them and inspect. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "snap_format.h"
#include "snap_sessions.h"
#include "snap_store.h"

#define STORE_ASK_TIMEOUT_S 2

void ckpt_store_path(struct ckpt *c, char *buf, unsigned cap)
{
	struct control_request req = { .op = CONTROL_OP_SNAPSHOTS, .device = -1 };
	struct control_reply a;

	if (c->store) {
		snprintf(buf, cap, "%s", c->store);
		return;
	}
	if (c->store_explicit) {
		snprintf(buf, cap, "%s/store", c->state_dir);
		return;
	}
	/* No store named: a running ternd knows where its store is.  Asked
	 * briefly, since the default is a fine answer when none runs. */
	if (!c->ternd_store[0]) {
		int saved = c->timeout_s;

		c->timeout_s = 0;
		if (!ckpt_control(c, &req, STORE_ASK_TIMEOUT_S, NULL, &a) && a.kind == CONTROL_REPLY_SNAPSHOTS)
			snprintf(c->ternd_store, sizeof(c->ternd_store), "%s", a.snapshots.store);
		c->timeout_s = saved;
		control_reply_release(&a);
	}
	if (c->ternd_store[0])
		snprintf(buf, cap, "%s", c->ternd_store);
	else
		snprintf(buf, cap, "%s/store", c->state_dir);
}

int ckpt_store_open(struct ckpt *c, struct snap_store **out, char *path, unsigned cap)
{
	int rc;

	ckpt_store_path(c, path, cap);
	rc = snap_store_open(path, NULL, 0, out);
	if (!rc)
		return 0;
	switch (rc) {
	case -ENOENT:
	case -ENOTDIR:
		return ckpt_fail(c, CKPT_EXIT_FAILED, "no snapshot store at %s: pass --store DIR, or "
				 "--state-dir DIR as given to ternd", path);
	case -EACCES:
	case -EPERM:
	case -EROFS:
		return ckpt_fail(c, CKPT_EXIT_FAILED, "cannot open the snapshot store %s (%s): run ckpt as "
				 "root or as ternd's user (even reading takes the store's lock file)",
				 path, strerror(-rc));
	default:
		return ckpt_fail(c, CKPT_EXIT_FAILED, "cannot open the snapshot store %s: %s", path,
				 strerror(-rc));
	}
}

int ckpt_store_fail(struct ckpt *c, struct snap_store *s, const char *path,
		    const char *name, const char *what, int rc)
{
	const char *detail = s && snap_store_error(s)[0] ? snap_store_error(s) : strerror(-rc);

	switch (rc) {
	case -ENOENT:
		return ckpt_fail(c, CKPT_EXIT_FAILED, "snapshot '%s' not found in %s: run `ckpt ls`", name, path);
	case -EINPROGRESS:
		return ckpt_fail(c, CKPT_EXIT_FAILED, "snapshot '%s' is still being written: retry when it is "
				 "done", name);
	case -EBUSY:
		return ckpt_fail(c, CKPT_EXIT_FAILED, "the store %s is in use: a ternd worker is reading or "
				 "writing a snapshot in it; retry when that is done (%s)", path, detail);
	case -EBADMSG:
		return ckpt_fail(c, CKPT_EXIT_FAILED, "snapshot '%s' is damaged: %s. It cannot be restored; "
				 "`ckpt verify %s` checks all of it, `ckpt rm %s` removes it", name, detail,
				 name, name);
	case -ENOTSUP:
		return ckpt_fail(c, CKPT_EXIT_FAILED, "snapshot '%s' uses a format this ckpt does not read "
				 "(%s): use the ckpt of the tern that wrote it", name, detail);
	case -ENOSPC:
		return ckpt_fail(c, CKPT_EXIT_FAILED, "%s '%s': no space left (%s): free space and retry",
				 what, name, detail);
	default:
		return ckpt_fail(c, CKPT_EXIT_FAILED, "%s '%s' failed: %s", what, name, detail);
	}
}

int cmd_verify(struct ckpt *c)
{
	struct snap_verify_stats st = { 0 };
	struct snap_store *s;
	char path[4096], bytes[32];
	const char *name = c->args[0];
	int rc;

	if (ckpt_name_refuse(c, name))
		return CKPT_EXIT_USAGE;
	rc = ckpt_store_open(c, &s, path, sizeof(path));
	if (rc)
		return rc;
	rc = snap_store_verify(s, name, &st);
	if (rc == -EBADMSG) {
		/* The one failure verify exists to find: name what is corrupt. */
		char detail[1024];
		struct json_writer w;

		snprintf(detail, sizeof(detail), "%s", snap_store_error(s));
		ckpt_fail(c, CKPT_EXIT_FAILED, "snapshot '%s' is CORRUPT: %s. Restoring it will fail; "
			  "restore an older snapshot, and `ckpt rm %s` to drop this one", name, detail, name);
		if (c->json) {
			ckpt_json_begin(c, &w);
			json_bool_put(&w, "ok", false);
			json_string_put(&w, "snapshot", name);
			json_string_put(&w, "store", path);
			json_bool_put(&w, "intact", false);
			json_string_put(&w, "corruption", detail);
			json_string_put(&w, "error", c->error);
			ckpt_json_end(c, &w);
		}
		snap_store_close(s);
		return CKPT_EXIT_FAILED;
	}
	if (rc) {
		rc = ckpt_store_fail(c, s, path, name, "verify", rc);
		snap_store_close(s);
		return rc;
	}
	if (c->json) {
		struct json_writer w;

		ckpt_json_begin(c, &w);
		json_bool_put(&w, "ok", true);
		json_string_put(&w, "snapshot", name);
		json_string_put(&w, "store", path);
		json_bool_put(&w, "intact", true);
		json_u64_put(&w, "chunks_checked", st.chunks_checked);
		json_u64_put(&w, "bytes_checked", st.bytes_checked);
		ckpt_json_end(c, &w);
	} else {
		ckpt_size_format(st.bytes_checked, bytes, sizeof(bytes));
		printf("snapshot %s is intact: manifest, chunk list, journal and %llu distinct chunks (%s) "
		       "verified\n", name, (unsigned long long)st.chunks_checked, bytes);
	}
	snap_store_close(s);
	return CKPT_EXIT_OK;
}

int ckpt_name_refuse(struct ckpt *c, const char *name)
{
	const char *why = snap_name_problem(name);

	if (!why)
		return 0;
	ckpt_fail(c, CKPT_EXIT_USAGE, "'%s' is not a valid snapshot name: %s", name, why);
	return CKPT_EXIT_USAGE;
}

static const struct snap_info *info_find(const struct snap_info *list, unsigned count, const char *name)
{
	for (unsigned i = 0; i < count; i++)
		if (!strcmp(list[i].name, name))
			return &list[i];
	return NULL;
}

static bool arg_listed_before(const struct ckpt *c, unsigned i)
{
	for (unsigned j = 0; j < i; j++)
		if (!strcmp(c->args[j], c->args[i]))
			return true;
	return false;
}

static bool arg_listed(const struct ckpt *c, const char *name)
{
	for (unsigned i = 0; i < c->nargs; i++)
		if (!strcmp(c->args[i], name))
			return true;
	return false;
}

/* Everything rm must know before it removes anything: every name is a
 * snapshot of the store, none is where a session waits (ternd's sessions
 * file, beside the store) or the parent of a snapshot that stays, unless
 * --force.  Reports the first refusal. */
static int rm_check(struct ckpt *c, struct snap_store *s, const char *path)
{
	struct snap_session *sessions = NULL;
	struct snap_info *list = NULL;
	char sessions_file[4200], dir[4096];
	uint32_t nsessions = 0;
	unsigned count = 0;
	int rc;

	rc = snap_store_list(s, &list, &count);
	if (rc)
		return ckpt_fail(c, CKPT_EXIT_FAILED, "cannot list the snapshot store %s: %s; nothing was "
				 "removed", path, strerror(-rc));
	rc = CKPT_EXIT_FAILED;
	for (unsigned i = 0; i < c->nargs; i++) {
		const struct snap_info *e = info_find(list, count, c->args[i]);

		if (!e) {
			ckpt_fail(c, rc, "snapshot '%s' not found in %s: nothing was removed; run `ckpt ls`",
				  c->args[i], path);
			goto out_free;
		}
		if (e->error == -EINPROGRESS) {
			ckpt_fail(c, rc, "snapshot '%s' is still being written: nothing was removed; retry "
				  "when it is done", c->args[i]);
			goto out_free;
		}
	}
	snprintf(dir, sizeof(dir), "%s", path);
	snprintf(sessions_file, sizeof(sessions_file), "%s/" SNAP_SESSIONS_FILE, dirname(dir));
	rc = snap_sessions_read(sessions_file, SNAP_SESSIONS_LIMIT, &sessions, &nsessions);
	if (rc && !c->force) {
		ckpt_fail(c, CKPT_EXIT_FAILED, "cannot read ternd's sessions file %s (%s), which says "
			  "which snapshots suspended sessions need: nothing was removed; --force removes "
			  "anyway", sessions_file, rc == -EBADMSG ? "it is damaged" : strerror(-rc));
		rc = CKPT_EXIT_FAILED;
		goto out_free;
	}
	rc = CKPT_EXIT_FAILED;
	for (unsigned i = 0; i < c->nargs && !c->force; i++) {
		for (uint32_t j = 0; j < nsessions; j++)
			if (sessions[j].plan != SNAP_PLAN_NONE && !strcmp(sessions[j].snapshot, c->args[i])) {
				ckpt_fail(c, rc, "snapshot '%s' is the one session %s %s: removing it loses "
					  "the session; nothing was removed (`ckpt resume %s` first, or --force)",
					  c->args[i], sessions[j].id,
					  sessions[j].plan == SNAP_PLAN_SUSPENDED ? "is suspended in" :
					  "is to be restored from", sessions[j].id);
				goto out_free;
			}
		for (unsigned j = 0; j < count; j++)
			if (list[j].complete && !strcmp(list[j].parent, c->args[i]) &&
			    !arg_listed(c, list[j].name)) {
				ckpt_fail(c, rc, "snapshot '%s' is the parent of '%s': nothing was removed "
					  "(remove both, or --force; '%s' stays complete either way)",
					  c->args[i], list[j].name, list[j].name);
				goto out_free;
			}
	}
	rc = 0;
out_free:
	free(sessions);
	free(list);
	return rc;
}

int cmd_rm(struct ckpt *c)
{
	struct snap_gc_stats total = { 0 };
	struct snap_store *s;
	struct json_writer w;
	char path[4096], freed[32];
	unsigned failed = 0;
	int rc;

	/* Check every name first: a typo removes nothing. */
	for (unsigned i = 0; i < c->nargs; i++)
		if (ckpt_name_refuse(c, c->args[i]))
			return CKPT_EXIT_USAGE;
	rc = ckpt_store_open(c, &s, path, sizeof(path));
	if (rc)
		return rc;
	rc = rm_check(c, s, path);
	if (rc) {
		snap_store_close(s);
		return rc;
	}
	if (c->json) {
		ckpt_json_begin(c, &w);
		json_string_put(&w, "store", path);
		json_array_begin(&w, "snapshots");
	}
	for (unsigned i = 0; i < c->nargs; i++) {
		struct snap_gc_stats st = { 0 };

		if (arg_listed_before(c, i))
			continue;       /* named twice: removed once */
		rc = snap_store_rm(s, c->args[i], &st);
		if (rc) {
			failed++;
			ckpt_store_fail(c, s, path, c->args[i], "rm", rc);
		} else {
			total.packs_deleted += st.packs_deleted;
			total.packs_rewritten += st.packs_rewritten;
			total.bytes_freed += st.bytes_freed;
			total.chunks_dropped += st.chunks_dropped;
			if (!c->json)
				printf("removed %s\n", c->args[i]);
		}
		if (c->json) {
			json_object_begin(&w, NULL);
			json_string_put(&w, "name", c->args[i]);
			json_bool_put(&w, "removed", rc == 0);
			if (rc)
				json_string_put(&w, "error", c->error);
			json_object_end(&w);
		}
	}
	snap_store_close(s);
	if (c->json) {
		json_array_end(&w);
		json_bool_put(&w, "ok", failed == 0);
		json_u64_put(&w, "bytes_freed", total.bytes_freed);
		json_u64_put(&w, "packs_deleted", total.packs_deleted);
		json_u64_put(&w, "packs_rewritten", total.packs_rewritten);
		json_u64_put(&w, "chunks_dropped", total.chunks_dropped);
		ckpt_json_end(c, &w);
	} else if (failed < c->nargs) {
		ckpt_size_format(total.bytes_freed, freed, sizeof(freed));
		printf("freed %s: %llu chunks dropped, %llu packs deleted, %llu rewritten\n", freed,
		       (unsigned long long)total.chunks_dropped, (unsigned long long)total.packs_deleted,
		       (unsigned long long)total.packs_rewritten);
	}
	return failed ? CKPT_EXIT_FAILED : CKPT_EXIT_OK;
}
