/* The OpenCL executor: one session's OpenCL objects, run on the host's
 * platform (cl_host.h), behind the dispatcher generated from
 * common/wire/opencl.tbl (wire_cl_dispatch.h; docs/opencl.md).
 *
 * Beside the CUDA executor (replayer/exec/) in the same worker, opened at
 * the session's first OpenCL request. Handles are virtual (the CUDA
 * executor's handle table, kinds cl_*): the guest never sees a host
 * pointer, and a restore recreates every object under its old handle. Each
 * object keeps the requests that recreate it (struct cl_journal), which is
 * what a snapshot stores of it, with memory objects' contents.
 *
 * Every field is hostile: handles are looked up by kind, records counted and
 * bounded, sizes checked before the platform sees them; a bad request fails
 * with its cl_int alone. Not thread-safe: the worker's dispatch thread.
 */
#ifndef TERN_CL_EXEC_H
#define TERN_CL_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "cl_host.h"
#include "handle_table.h"
#include "wire.h"

struct cl_exec_config {
	const char *library;            /* NULL: libOpenCL.so.1 */
	const char *platform;           /* CL_PLATFORM_NAME contains it; NULL: the first */
};

/* One request an object's recreation replays: its call and payload. */
struct cl_journal_entry {
	uint32_t call;
	uint32_t tag;                   /* a kernel argument's index; 0 otherwise */
	uint32_t len;
	uint8_t *payload;
};

struct cl_journal {
	struct cl_journal_entry *list;
	uint32_t count, cap;
};

/* What the executor keeps of each object (handle_entry.info). */
struct cl_obj {
	uint32_t refs;                  /* the guest's references (retain, release) */
	uint64_t context;               /* the owning context's handle; 0 for none */
	uint64_t size;                  /* a buffer's bytes */
	uint64_t flags;                 /* a memory object's flags */
	uint32_t mem_type;              /* CL_MEM_OBJECT_* */
	uint64_t parent;                /* a sub-buffer's buffer */
	uint64_t origin;                /* a sub-buffer's offset in it */
	cl_int failed;                  /* an event whose enqueue failed: that error */
	bool waited;                    /* an event named in a wait list */
	/* An event a restore made again (a marker or a user event standing in
	 * for a completed command): what the guest's queries answer of it. */
	bool restored;
	bool restored_profiled;
	uint32_t restored_command_type;
	uint64_t restored_profiling[5]; /* CL_PROFILING_COMMAND_QUEUED .. _COMPLETE */
	/* An event of a non-blocking read: the memory the platform reads into,
	 * until the guest fetches it (cl_read_fetch). */
	void *read_buf;
	uint64_t read_size;
	struct cl_journal journal;      /* the requests that recreate it, in order */
};

#define CL_EXEC_REPLY_BUFS 4

struct cl_exec {
	struct cl_exec_config cfg;
	bool opened;
	int open_error;                 /* of the first attempt; later requests answer it */
	struct cl_host host;
	struct handle_table *handles;
	uint64_t platform;              /* the guest's one platform */
	/* The request being served, which an object's journal copies. */
	uint32_t call;
	const uint8_t *payload;
	uint32_t payload_len;
	/* Under a restore: the handle the object being recreated gets. */
	uint64_t restore_handle;
	uint64_t lazy_read_bytes;       /* of every read_buf: at most CL_WIRE_LAZY_READ_MAX */
	/* What reply blobs point to, freed at the next dispatch. */
	void *reply_buf[CL_EXEC_REPLY_BUFS];
	unsigned reply_bufs;
};

/* Set @x up to open at its first request (nothing is loaded yet). */
void cl_exec_init(struct cl_exec *x, const struct cl_exec_config *cfg);
/* Release every object the guest left and close the platform. */
void cl_exec_close(struct cl_exec *x);

/* Serve one OpenCL request (WIRE_API_OPENCL_FIRST .. LAST): as
 * wire_cl_dispatch, opening the platform first. 0, -ENOSYS, -EPROTO. */
int cl_exec_dispatch(struct cl_exec *x, uint32_t id, struct wire_cursor *payload, struct wire_msg *reply);

/* Whether the session has OpenCL objects (a snapshot has something to keep). */
bool cl_exec_active(const struct cl_exec *x);

/* cl_exec_snapshot.c (docs/opencl.md, "Snapshots"; docs/journal.md, "OpenCL
 * objects"). save: between two requests, finish every queue and write every
 * object the guest holds into @journal (a record naming its description,
 * memory objects' contents and unfetched reads' bytes as images),
 * dropping the records of objects gone since the last save, and the
 * session's part (devices, serials). Refuses,
 * with @err saying why and the session unchanged, a user event that has no
 * status yet while commands wait for it, an object whose parent the guest
 * released, contents too large for an image. 0 or -errno.
 * restore: into a fresh executor, before any request: open the platform,
 * check its devices, recreate every object of @saved under its handle
 * (creations and their later requests replayed through the dispatcher, so
 * checked as a guest's are), refill memory objects, set the serials. A
 * record that does not decode or a request that fails refuses the restore
 * with @err naming the object. 0 or -errno (-EBADMSG, -ENODEV, -EIO). */
struct tracker;
int cl_exec_snapshot_save(struct cl_exec *x, struct tracker *journal, char *err, size_t errlen);
int cl_exec_snapshot_restore(struct cl_exec *x, struct tracker *saved, char *err, size_t errlen);
/* Open the platform now (a restore's first step; requests open it lazily). */
int cl_exec_open(struct cl_exec *x);

/* For the handlers (cl_exec_*.c). */
/* A reply blob's memory, valid until the next dispatch; NULL when out of memory. */
void *cl_exec_reply_alloc(struct cl_exec *x, size_t bytes);
/* Register @real under a new handle of @kind (or the restore's), with a new
 * cl_obj of one reference. CL_SUCCESS or CL_OUT_OF_HOST_MEMORY. */
cl_int cl_exec_object_add(struct cl_exec *x, enum handle_kind kind, void *real, uint64_t context,
			  uint64_t *handle, struct cl_obj **obj);
/* The guest's handle of host object @real, registering one (with no
 * reference of the guest's) when the guest has never seen it; 0 for NULL. */
uint64_t cl_exec_handle_of(struct cl_exec *x, enum handle_kind kind, void *real);
/* Append the request being served to @obj's journal; with @replace_tag the
 * entry with the same @tag (a kernel argument set again) is replaced. */
cl_int cl_journal_note(struct cl_exec *x, struct cl_obj *obj, uint32_t tag, bool replace_tag);
/* The cl_int of a build, compile or link as its entry's tag (a restore
 * expects the same answer). */
static inline uint32_t cl_journal_status_tag(cl_int status)
{
	return (uint32_t)status;
}
/* Note a re-encoded request instead (one without what a snapshot keeps apart). */
cl_int cl_journal_note_msg(struct cl_obj *obj, uint32_t call, const struct wire_msg *m);
void cl_journal_free(struct cl_journal *j);

/* Records to host arrays: the handles of @b (cl_handle records, each a live
 * @kind) into a malloc'd array of host objects; *n their count. CL_SUCCESS,
 * @bad for a handle that is not one, CL_INVALID_VALUE for a malformed blob,
 * CL_OUT_OF_HOST_MEMORY. *out is NULL for an empty blob. */
cl_int cl_exec_handles_get(struct cl_exec *x, struct wire_blob b, enum handle_kind kind, cl_int bad,
			   void ***out, cl_uint *n);
/* An event wait list: as cl_exec_handles_get, and an event whose enqueue
 * failed makes it CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST. */
cl_int cl_exec_waits_get(struct cl_exec *x, struct wire_blob b, cl_event **out, cl_uint *n);
/* At most @max cl_size records of @b into @out (zeros past them); *n their count. */
cl_int cl_exec_sizes_get(struct wire_blob b, size_t *out, unsigned max, unsigned *n);
/* The guest's event handle @event (0: none) may take the next serial. */
cl_int cl_exec_event_check(struct cl_exec *x, uint64_t event);
/* After an enqueue: register @event for @real, or as failed with @status. */
void cl_exec_event_done(struct cl_exec *x, uint64_t event, cl_int status, cl_event real);
/* Forget the non-blocking read of event @o (host event @real): its memory
 * freed now if the read is over, else when the platform completes it. */
void cl_exec_read_forget(struct cl_exec *x, struct cl_obj *o, cl_event real);

#endif
