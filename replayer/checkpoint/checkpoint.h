/* Snapshot and restore of the session a worker serves (docs/checkpoint.md).
 *
 * A snapshot is cut at a call boundary: the worker stops reading requests,
 * synchronises the device, records the journal's bookkeeping (handle serials,
 * the last sequence number and its reply) and copies the journal, then hands
 * the device memory to capture (capture.h): hashed on the device, unchanged
 * and zero chunks skipped, changed ones copied to a shadow buffer or straight
 * to the host. The guest runs again as soon as nothing reads its memory any
 * more; a background thread drains the rest and commits the snapshot, which
 * is listed only once durable.
 *
 * A restore runs in a fresh worker before it answers the guest's hello: the
 * arena at the recorded addresses, memory filled, objects recreated under
 * their old virtual handles in dependency order.
 *
 * Used by the worker thread only; the drain thread touches only its job.
 */
#ifndef TERN_CHECKPOINT_H
#define TERN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "control_msg.h"
#include "exec.h"

struct checkpoint_job;
struct capture;
struct checkpoint_image_globals;

/* What the checkpoint part keeps for one session between snapshots: the
 * data path, opened at the first snapshot or restore, and the globals each
 * module image lists (parsed once; a snapshot's pause must not parse). The
 * worker owns it beside its exec and closes it first. */
struct snap_chunk_list;
struct tracker;

/* A part of the session kept beside the CUDA executor's (the OpenCL
 * executor's, docs/opencl.md "Snapshots"): its objects are records of the
 * handle kinds [kind_first, kind_last], which the CUDA restore leaves to it.
 * save writes them into the live journal once the devices are idle, before
 * the journal is copied (refusing the snapshot with @err: nothing is taken);
 * restore recreates them from the snapshot's journal once the CUDA objects
 * are back. Both return 0 or -errno. A zero part has no kinds and nothing
 * to do. */
struct checkpoint_part {
	void *arg;
	uint32_t kind_first, kind_last;
	int (*save)(void *arg, struct tracker *journal, char *err, size_t errlen);
	int (*restore)(void *arg, struct tracker *saved, char *err, size_t errlen);
};

struct checkpoint {
	struct exec *ex;
	struct capture *capture;
	struct checkpoint_image_globals *image_globals;
	struct snap_chunk_list *held;   /* what checkpoint_prefill left mapped and filled; NULL: nothing */
	struct checkpoint_part part;
};

static inline void checkpoint_init(struct checkpoint *ck, struct exec *ex, const struct checkpoint_part *part)
{
	*ck = (struct checkpoint){ .ex = ex };
	if (part)
		ck->part = *part;
}
/* Free what a session's snapshots and restores opened (NULL-safe fields). */
void checkpoint_close(struct checkpoint *ck);

struct checkpoint_request {
	const char *store_dir;
	const char *name;
	const char *parent;         /* NULL or "" for a full snapshot */
	const char *session;
	uint64_t seq;               /* last request applied */
	const void *reply;          /* its encoded reply, kept for a resend */
	size_t reply_len;
	/* The session credential and the uid of its unix guest, for the
	 * manifest (SNAP_AUTH_* of snap_format.h says which are set). */
	uint32_t auth_flags;
	uint32_t owner_uid;
	const uint8_t *credential;  /* SNAP_CREDENTIAL_BYTES, when flagged */
};

/* Take the paused part of a snapshot. On success the guest may run again
 * and *@job drains in the background; its eventfd (checkpoint_job_fd)
 * becomes readable when it is done. On failure nothing is left behind and
 * @err says why. */
int checkpoint_begin(struct checkpoint *ck, const struct checkpoint_request *req,
		     struct checkpoint_job **job, char *err, size_t errlen);
int checkpoint_job_fd(const struct checkpoint_job *job);
/* Wait for the drain and the commit; fill @result (a snapshot result, or
 * an error saying why) and free the job. Returns 0 or -errno. */
int checkpoint_end(struct checkpoint_job *job, struct control_reply *result);

/* Restore snapshot @name of @store_dir into @ex (opened fresh, journal open).
 * *@seq and the reply of the last applied request are given back so the
 * worker can answer a resend. */
int checkpoint_restore(struct checkpoint *ck, const char *store_dir, const char *name,
		       uint64_t *seq, void **reply, size_t *reply_len,
		       struct control_reply *result);

/* checkpoint_prefill.c: a migration's prepared worker, which has no guest
 * yet, brings its device memory to snapshot @name (a pre-copy round):
 * maps its arena regions and fills what differs from the round before.
 * A checkpoint_restore after it fills only what differs again. 0, or
 * -errno with @err saying why (the restore then fills what it cannot
 * trust). */
int checkpoint_prefill(struct checkpoint *ck, const char *store_dir, const char *name, char *err, size_t errlen);

/* checkpoint_check.c: what a restore can check before a live worker stops.
 * The worker that would take the snapshot: its arenas, the devices a session
 * gets, the quota (0: none). */
struct snap_store;
struct snap_reader;
struct checkpoint_target {
	uint64_t arena_base;
	uint64_t arena_size;
	unsigned devices;           /* devices a session of this ternd gets */
	uint64_t quota;
};
struct tracker;
/* A snapshot opened for reading, with its journal copied out and open
 * (read only): what a restore and its check start from. Close it with
 * checkpoint_saved_close (also after a failed open). */
struct checkpoint_saved {
	struct snap_store *store;
	struct snap_reader *reader;
	struct tracker *journal;
	int fd;                     /* the journal's copy, removed at close */
	char copy[32];
};
int checkpoint_saved_open(struct checkpoint_saved *snap, const char *store_dir, const char *name, char *err,
			  size_t errlen);
void checkpoint_saved_close(struct checkpoint_saved *snap);
/* Every checksum of snapshot @name of @store_dir (as snap_store_verify),
 * then checkpoint_target_check on its journal. Touches no backend: safe in
 * the supervisor's children. 0, or -errno with @err saying what a restore
 * would fail on (-EBADMSG, -ENOENT, -EINVAL, -ENODEV, -EDQUOT). */
int checkpoint_restore_check(const char *store_dir, const char *name, const struct checkpoint_target *t,
			     char *err, size_t errlen);
/* The arena base and size, the device count and the quota of the journal
 * @saved of snapshot @name against @t. */
int checkpoint_target_check(struct tracker *saved, const char *name, const struct checkpoint_target *t,
			    char *err, size_t errlen);

/* checkpoint_state.c: settings and module globals (docs/journal.md).
 * save: write the contents of every module global into the journal (the
 * device is idle); restore_ctx: the context's settings, before objects;
 * func/stream: an object's own settings from its record, right after it is
 * made again; restore_late: the built-in streams' attributes and the module
 * globals, once every object is back. */
struct tracker_object;
void checkpoint_image_globals_free(struct checkpoint *ck);
int checkpoint_state_save(struct checkpoint *ck, char *err, size_t errlen);
int checkpoint_state_restore_ctx(struct exec *ex, struct tracker *saved, char *err, size_t errlen);
CUresult checkpoint_state_func(struct exec *ex, const struct tracker_object *o, void *real);
CUresult checkpoint_state_stream(struct exec *ex, const struct tracker_object *o, CUstream s);
int checkpoint_state_restore_late(struct exec *ex, struct tracker *saved, char *err, size_t errlen);
/* After the modules are loaded and before the restore allocates host
 * memory of its own: look up each __managed__ variable of the snapshot, so
 * that the driver places it while its old address is still free. 0, or a
 * damaged record (-EBADMSG, as restore_late would say). */
int checkpoint_state_globals_place(struct exec *ex, struct tracker *saved, char *err, size_t errlen);
/* Whether @saved records a __managed__ module variable. */
bool checkpoint_state_has_managed_globals(struct tracker *saved);

#endif
