/* What a restore can know before it starts: whether the snapshot is intact
 * and whether it fits the worker that would take it (docs/checkpoint.md,
 * "Restores that fail safely"). The supervisor runs checkpoint_restore_check
 * in a child before it stops a live worker; checkpoint_restore runs
 * checkpoint_target_check again on the journal it restores from, for the
 * target it really got.
 */
#define LOG_PREFIX "checkpoint: "
#include "checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cl_saved.h"
#include "snap_reader.h"
#include "snap_store.h"
#include "tracker.h"

/* Device bytes the snapshot's arenas map: a lower bound of what the quota
 * will count (VMM mappings are left out: two may share one allocation). */
static int region_arena_bytes(void *arg, uint64_t addr, const struct tracker_region *r)
{
	uint64_t *sum = arg;

	(void)addr;
	if (r->kind != EXEC_REGION_VMM)
		*sum += r->size;
	return 0;
}

struct cl_check {
	struct tracker *saved;
	uint64_t handle;
	const char *why;
};

/* An OpenCL object's record and description decode (the restore checks
 * the rest: cl_exec_snapshot.c). */
static int cl_object_check(void *arg, uint64_t handle, const struct tracker_object *o)
{
	struct cl_check *c = arg;
	struct tracker_image im;
	const void *bytes = NULL;
	uint8_t hash[TRACKER_HASH_SIZE];
	struct cl_saved s;

	if (o->kind < CL_SAVED_KIND_FIRST || o->kind > CL_SAVED_KIND_LAST)
		return 0;
	c->handle = handle;
	if (o->args_len != 2 * TRACKER_HASH_SIZE) {
		c->why = "its record is not an OpenCL object's";
		return 1;
	}
	memcpy(hash, o->args, sizeof(hash));
	if (tracker_image_get(c->saved, hash, &im, &bytes) || im.format != CL_SAVED_IMAGE_FORMAT) {
		c->why = "its description is missing";
		return 1;
	}
	if (cl_saved_decode(bytes, im.size, &s, &c->why))
		return 1;
	if (s.kind != o->kind)
		c->why = "its description is of another kind";
	cl_saved_release(&s);
	return c->why ? 1 : 0;
}

/* What the snapshot keeps of an OpenCL session decodes. */
static int cl_part_check(struct tracker *saved, const char *name, char *err, size_t errlen)
{
	struct cl_check c = { .saved = saved };
	struct cl_saved_session ss;
	const void *b = NULL;
	size_t len = 0;
	int ret;

	if (!tracker_meta_bytes_get(saved, CL_SAVED_META_SESSION, &b, &len) &&
	    cl_saved_session_decode(b, len, &ss, &c.why)) {
		snprintf(err, errlen, "snapshot '%s': its OpenCL part does not decode: %s", name, c.why);
		return -EBADMSG;
	}
	c.why = NULL;
	ret = tracker_object_foreach(saved, NULL, 0, cl_object_check, &c);
	if (ret == 1) {
		snprintf(err, errlen, "snapshot '%s': OpenCL %s 0x%llx does not decode: %s", name,
			 cl_saved_kind_name(handle_kind_of(c.handle)), (unsigned long long)c.handle,
			 c.why ? c.why : "");
		return -EBADMSG;
	}
	if (ret)
		snprintf(err, errlen, "the journal of '%s' is unreadable: %s", name, strerror(-ret));
	return ret;
}

int checkpoint_target_check(struct tracker *saved, const char *name, const struct checkpoint_target *t,
			    char *err, size_t errlen)
{
	uint64_t v = 0, devices = 1, bytes = 0;
	int ret;

	if (tracker_meta_u64_get(saved, TRACKER_META_ARENA_BASE, &v) || v != t->arena_base) {
		snprintf(err, errlen, "snapshot '%s' was taken with another arena base; start ternd "
			 "with --arena-base 0x%llx", name, (unsigned long long)v);
		return -EINVAL;
	}
	/* Each device's arena lies at base + ordinal * size: both must agree. */
	if (!tracker_meta_u64_get(saved, TRACKER_META_ARENA_SIZE, &v) && v != t->arena_size) {
		snprintf(err, errlen, "snapshot '%s' was taken with another arena size; start ternd "
			 "with --arena-size %llu", name, (unsigned long long)v);
		return -EINVAL;
	}
	if (!tracker_meta_u64_get(saved, EXEC_META_DEVICE_COUNT, &devices) && devices > t->devices) {
		snprintf(err, errlen, "snapshot '%s' holds a session of %llu devices; this ternd "
			 "gives sessions %u", name, (unsigned long long)devices, t->devices);
		return -ENODEV;
	}
	ret = cl_part_check(saved, name, err, errlen);
	if (ret)
		return ret;
	if (t->quota) {
		ret = tracker_region_foreach(saved, region_arena_bytes, &bytes);

		if (ret) {
			snprintf(err, errlen, "the journal of '%s' is unreadable: %s", name, strerror(-ret));
			return ret;
		}
		if (bytes > t->quota) {
			snprintf(err, errlen, "snapshot '%s' maps %llu bytes of device memory, over this "
				 "ternd's quota of %llu (--quota)", name, (unsigned long long)bytes,
				 (unsigned long long)t->quota);
			return -EDQUOT;
		}
	}
	return 0;
}

int checkpoint_saved_open(struct checkpoint_saved *snap, const char *store_dir, const char *name, char *err,
			  size_t errlen)
{
	struct snap_store_config scfg = { 0 };
	int ret;

	*snap = (struct checkpoint_saved){ .fd = -1 };
	snprintf(snap->copy, sizeof(snap->copy), "/tmp/tern-journal-XXXXXX");
	ret = snap_store_open(store_dir, &scfg, 0, &snap->store);
	if (ret) {
		snprintf(err, errlen, "cannot open the snapshot store %s: %s", store_dir, strerror(-ret));
		return ret;
	}
	ret = snap_reader_open(snap->store, name, &snap->reader);
	if (ret) {
		snprintf(err, errlen, "cannot read snapshot '%s': %s", name, snap_store_error(snap->store));
		return ret;
	}
	snap->fd = mkstemp(snap->copy);
	ret = snap->fd < 0 ? -errno : snap_reader_journal_write(snap->reader, snap->fd);
	if (!ret)
		ret = tracker_open(snap->copy, TRACKER_OPEN_RDONLY, &snap->journal);
	if (ret)
		snprintf(err, errlen, "the journal of '%s' is unreadable: %s", name, strerror(-ret));
	return ret;
}

void checkpoint_saved_close(struct checkpoint_saved *snap)
{
	tracker_close(snap->journal);
	if (snap->fd >= 0) {
		close(snap->fd);
		unlink(snap->copy);
	}
	snap_reader_close(snap->reader);
	snap_store_close(snap->store);
	*snap = (struct checkpoint_saved){ .fd = -1 };
}

int checkpoint_restore_check(const char *store_dir, const char *name, const struct checkpoint_target *t,
			     char *err, size_t errlen)
{
	struct checkpoint_saved snap;
	int ret = checkpoint_saved_open(&snap, store_dir, name, err, errlen);

	/* Every checksum, as `ckpt verify` checks them: a restore that would
	 * find damage half way must not start. */
	if (!ret) {
		ret = snap_store_verify(snap.store, name, NULL);
		if (ret)
			snprintf(err, errlen, "snapshot '%s' %s: %s", name,
				 ret == -EBADMSG ? "is corrupt" : "cannot be read", snap_store_error(snap.store));
	}
	if (!ret)
		ret = checkpoint_target_check(snap.journal, name, t, err, errlen);
	checkpoint_saved_close(&snap);
	return ret;
}
