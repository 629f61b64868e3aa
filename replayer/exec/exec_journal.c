/* The executor's side of the journal: every object and region the guest
 * creates is recorded in the session's tracker (tracker/), in the order the
 * calls are applied, and dropped when the guest frees it. Record arguments
 * follow docs/journal.md ("Executor records").
 *
 * A journal write that fails does not fail the guest's call: the session
 * goes on, and only snapshots are refused (ex->journal_broken). */
#define LOG_PREFIX "journal: "
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "exec.h"
#include "log.h"
#include "tracker.h"

static void journal_failed(struct exec *ex, const char *what, int err)
{
	if (!ex->journal_broken)
		pr_err("%s: %s; snapshots of this session are refused from now on", what, strerror(-err));
	ex->journal_broken = true;
}

int exec_journal_open(struct exec *ex, const char *dir, const char *session)
{
	int ret;

	ret = tracker_open(dir, 0, &ex->journal);
	if (ret) {
		pr_err("cannot open the journal in %s: %s", dir, strerror(-ret));
		return ret;
	}
	ret = tracker_meta_bytes_set(ex->journal, TRACKER_META_SESSION_ID, session, strlen(session));
	if (!ret)
		ret = tracker_meta_u64_set(ex->journal, TRACKER_META_ARENA_BASE, arena_base(ex->dev.arena));
	if (!ret)
		ret = tracker_meta_u64_set(ex->journal, TRACKER_META_ARENA_SIZE, arena_size(ex->dev.arena));
	if (!ret)
		ret = tracker_meta_u64_set(ex->journal, TRACKER_META_DEVICE_INDEX, (uint64_t)ex->cfg.device);
	if (!ret)
		ret = tracker_meta_u64_set(ex->journal, TRACKER_META_PROTOCOL_VERSION, WIRE_VERSION);
	if (!ret)
		ret = tracker_meta_u64_set(ex->journal, EXEC_META_DEVICE_COUNT, ex->dev.count);
	for (unsigned i = 0; i < ex->dev.count && !ret; i++)
		ret = exec_journal_object(ex, ex->dev.list[i].ctx, HANDLE_CONTEXT, 0, NULL, 0);
	if (ret)
		journal_failed(ex, "cannot initialise the journal", ret);
	return 0;
}

void exec_journal_close(struct exec *ex)
{
	tracker_close(ex->journal);
	ex->journal = NULL;
}

int exec_journal_object(struct exec *ex, uint64_t handle, enum handle_kind kind, uint64_t parent,
			const void *args, uint32_t args_len)
{
	struct tracker_object o = { .kind = kind, .parent = parent, .args = args, .args_len = args_len };
	int ret;

	if (!ex->journal || ex->journal_broken)
		return 0;
	ret = tracker_object_put(ex->journal, handle, &o);
	if (ret)
		journal_failed(ex, "cannot journal an object", ret);
	return ret;
}

CUresult exec_object_add(struct exec *ex, enum handle_kind kind, void *real, uint64_t parent,
			 void *info, const void *args, uint32_t args_len, uint64_t *handle)
{
	if (handle_table_add(ex->handles, kind, real, parent, info, handle))
		return CUDA_ERROR_OUT_OF_MEMORY;
	exec_journal_object(ex, *handle, kind, parent, args, args_len);
	return CUDA_SUCCESS;
}

CUresult exec_object_add_image(struct exec *ex, enum handle_kind kind, void *real,
			       const void *image, size_t size, uint64_t *handle)
{
	uint8_t hash[TRACKER_HASH_SIZE] = { 0 };
	int ret;

	if (handle_table_add(ex->handles, kind, real, 0, NULL, handle))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!ex->journal || ex->journal_broken)
		return CUDA_SUCCESS;
	ret = tracker_image_ref(ex->journal, image, size, 0, hash);
	if (ret) {
		journal_failed(ex, "cannot journal a module image", ret);
		return CUDA_SUCCESS;
	}
	/* A module belongs to the context it was loaded in: one of another
	 * device than 0 names its device after the hash. */
	if (kind == HANDLE_MODULE && ex->dev.current) {
		uint8_t args[TRACKER_HASH_SIZE + 4];
		uint32_t d = ex->dev.current;

		memcpy(args, hash, sizeof(hash));
		for (int k = 0; k < 4; k++)
			args[TRACKER_HASH_SIZE + k] = (uint8_t)(d >> (8 * k));
		exec_journal_object(ex, *handle, kind, 0, args, sizeof(args));
		return CUDA_SUCCESS;
	}
	exec_journal_object(ex, *handle, kind, 0, hash, sizeof(hash));
	return CUDA_SUCCESS;
}

void exec_object_remove(struct exec *ex, uint64_t handle)
{
	struct tracker_object o;
	uint8_t hash[TRACKER_HASH_SIZE];
	int ret;

	handle_table_remove(ex->handles, handle);
	if (!ex->journal || ex->journal_broken)
		return;
	ret = tracker_object_get(ex->journal, handle, &o);
	if (ret == -ENOENT)
		return;
	/* Modules and libraries name their image, graphs and executables their
	 * description (docs/journal.md), by the hash in their first bytes. */
	if (!ret && (((o.kind == HANDLE_MODULE || o.kind == HANDLE_LIBRARY || o.kind == HANDLE_GRAPH) &&
		      o.args_len == TRACKER_HASH_SIZE) ||
		     (o.kind == HANDLE_MODULE && o.args_len == TRACKER_HASH_SIZE + 4) ||
		     (o.kind == HANDLE_GRAPH_EXEC && o.args_len == TRACKER_HASH_SIZE + 16))) {
		/* The record's bytes live until the next write: copy the hash first. */
		memcpy(hash, o.args, sizeof(hash));
		ret = tracker_object_del(ex->journal, handle);
		if (!ret)
			ret = tracker_image_unref(ex->journal, hash);
	} else if (!ret) {
		ret = tracker_object_del(ex->journal, handle);
	}
	if (ret)
		journal_failed(ex, "cannot drop an object from the journal", ret);
}

void exec_journal_region(struct exec *ex, uint64_t addr, uint64_t size)
{
	exec_journal_region_as(ex, addr, size, EXEC_REGION_DEVICE, ex->dev.primary_ctx, 0);
}

void exec_journal_region_kind(struct exec *ex, uint64_t addr, uint64_t size,
			      enum exec_region_kind kind)
{
	exec_journal_region_as(ex, addr, size, kind, ex->dev.primary_ctx, 0);
}

void exec_journal_region_owned(struct exec *ex, uint64_t addr, uint64_t size, uint64_t owner)
{
	exec_journal_region_as(ex, addr, size, EXEC_REGION_DEVICE, owner, 0);
}

void exec_journal_region_as(struct exec *ex, uint64_t addr, uint64_t size,
			    enum exec_region_kind kind, uint64_t owner, uint32_t flags)
{
	struct tracker_region r = { .size = size, .owner = owner, .flags = flags, .kind = kind };
	int ret;

	if (!ex->journal || ex->journal_broken)
		return;
	ret = tracker_region_put(ex->journal, addr, &r);
	if (ret)
		journal_failed(ex, "cannot journal a region", ret);
}

void exec_journal_region_drop(struct exec *ex, uint64_t addr)
{
	int ret;

	if (!ex->journal || ex->journal_broken)
		return;
	ret = tracker_region_del(ex->journal, addr);
	if (ret && ret != -ENOENT)
		journal_failed(ex, "cannot drop a region from the journal", ret);
}

/* Settings made after creation (function attributes, stream attributes,
 * context limits) are fixed-size records after a fixed prefix, each naming
 * what it sets in its first @key_len bytes: a new value replaces the record
 * with the same key, or is appended. @out holds @cap bytes. */
static int records_upsert(const uint8_t *old, uint32_t old_len, uint32_t prefix, const void *rec,
			  uint32_t rec_len, uint32_t key_len, uint8_t *out, uint32_t cap,
			  uint32_t *out_len)
{
	uint32_t n;

	if (old_len < prefix || (old_len - prefix) % rec_len)
		return -EBADMSG;
	if (old_len > cap)
		return -ENOSPC;
	memcpy(out, old, old_len);
	for (n = prefix; n < old_len; n += rec_len)
		if (!memcmp(out + n, rec, key_len)) {
			memcpy(out + n, rec, rec_len);
			*out_len = old_len;
			return 0;
		}
	if (old_len + rec_len > cap)
		return -ENOSPC;
	memcpy(out + old_len, rec, rec_len);
	*out_len = old_len + rec_len;
	return 0;
}

/* An object's arguments may be 64 KiB (docs/journal.md): a long mangled
 * name and its settings fit. */
#define SETTINGS_CAP 65536

void exec_journal_object_setting(struct exec *ex, uint64_t handle, uint32_t prefix, const void *rec,
				 uint32_t rec_len, uint32_t key_len)
{
	static uint8_t buf[SETTINGS_CAP];
	struct tracker_object o;
	uint32_t len;
	int ret;

	if (!ex->journal || ex->journal_broken)
		return;
	ret = tracker_object_get(ex->journal, handle, &o);
	if (!ret)
		ret = records_upsert(o.args, o.args_len, prefix, rec, rec_len, key_len, buf, sizeof(buf), &len);
	if (!ret) {
		o.args = buf;
		o.args_len = len;
		ret = tracker_object_put(ex->journal, handle, &o);
	}
	if (ret)
		journal_failed(ex, "cannot journal a setting of an object", ret);
}

void exec_journal_meta_setting(struct exec *ex, uint32_t key, const void *rec, uint32_t rec_len,
			       uint32_t key_len)
{
	static uint8_t buf[SETTINGS_CAP];
	const void *old = NULL;
	size_t old_len = 0;
	uint32_t len;
	int ret;

	if (!ex->journal || ex->journal_broken)
		return;
	ret = tracker_meta_bytes_get(ex->journal, key, &old, &old_len);
	if (ret == -ENOENT) {
		old_len = 0;
		ret = 0;
	}
	if (!ret)
		ret = records_upsert(old, (uint32_t)old_len, 0, rec, rec_len, key_len, buf, sizeof(buf), &len);
	if (!ret)
		ret = tracker_meta_bytes_set(ex->journal, key, buf, len);
	if (ret)
		journal_failed(ex, "cannot journal a context setting", ret);
}

void exec_journal_ctx_setting(struct exec *ex, uint32_t id, uint64_t value)
{
	uint8_t rec[EXEC_CTX_SETTING_RECORD] = { 0 };

	memcpy(rec, &id, 4);
	memcpy(rec + 8, &value, 8);
	exec_journal_meta_setting(ex, EXEC_META_CTX_SETTINGS, rec, sizeof(rec), 4);
}

void exec_journal_func_setting(struct exec *ex, uint64_t handle, uint32_t id, int32_t value)
{
	uint8_t rec[EXEC_FUNC_SETTING_RECORD];
	struct tracker_object o;
	uint32_t name_len;

	if (!ex->journal || ex->journal_broken || tracker_object_get(ex->journal, handle, &o))
		return;
	/* The prefix is the name: u32 length, bytes. */
	if (o.args_len < 4)
		return;
	memcpy(&name_len, o.args, 4);
	memcpy(rec, &id, 4);
	memcpy(rec + 4, &value, 4);
	exec_journal_object_setting(ex, handle, 4 + name_len, rec, sizeof(rec), 4);
}
