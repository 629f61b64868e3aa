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

int checkpoint_target_check(struct tracker *saved, const char *name, const struct checkpoint_target *t,
			    char *err, size_t errlen)
{
	uint64_t v = 0, devices = 1, bytes = 0;

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
	if (t->quota) {
		int ret = tracker_region_foreach(saved, region_arena_bytes, &bytes);

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
