/* What a snapshot keeps of an OpenCL session (docs/journal.md, "OpenCL
 * objects"): per object a description, the requests that recreate it and
 * what a restore needs beside them (its references, an event's status and
 * profiling counters), and per session the platform's devices and the next
 * serial of every OpenCL handle kind.
 *
 * The OpenCL executor (replayer/exec_opencl/cl_exec_snapshot.c) writes a
 * description as a journal image and names it from the object's record; a
 * memory object's contents are an image of their own. The encodings are
 * versioned, little endian and decode in exactly one way: a decoded value
 * re-encodes to the same bytes. Decoding treats the bytes as hostile (fuzz
 * target tests/fuzz/fuzz_cl_saved.c); the requests it returns are still to
 * be checked as a guest's are, by the dispatcher that replays them.
 *
 * No state; any thread. Decoded pointers point into the decoded buffer.
 */
#ifndef TERN_CL_SAVED_H
#define TERN_CL_SAVED_H

#include <stddef.h>
#include <stdint.h>

#define CL_SAVED_MAGIC 0x314c4354u          /* "TCL1" */
#define CL_SAVED_SESSION_MAGIC 0x31534354u  /* "TCS1" */
#define CL_SAVED_VERSION 1u
/* The journal's image formats: a description, a memory object's contents. */
#define CL_SAVED_IMAGE_FORMAT 0x300u
#define CL_CONTENTS_IMAGE_FORMAT 0x301u
/* The journal's meta key of the session's part (TRACKER_META_USER + 0x300). */
#define CL_SAVED_META_SESSION 0x10300u
/* Bounds: requests per object, bytes per request (a program's source is at
 * most 32 MiB, docs/opencl.md), devices of the platform, a device's name. */
#define CL_SAVED_ENTRIES_MAX 65536u
#define CL_SAVED_ENTRY_MAX (40u << 20)
#define CL_SAVED_DEVICES_MAX 64u
#define CL_SAVED_NAME_MAX 256u
/* The handle kinds of the OpenCL table (opencl.tbl): platform .. event. */
#define CL_SAVED_KIND_FIRST 32u
#define CL_SAVED_KIND_LAST 40u
#define CL_SAVED_KINDS (CL_SAVED_KIND_LAST - CL_SAVED_KIND_FIRST + 1)
/* The profiling counters kept: CL_PROFILING_COMMAND_QUEUED .. _COMPLETE. */
#define CL_SAVED_PROFILING 5u

/* Description flags. */
/* memory object: `size` bytes of contents, in their image; event of a
 * non-blocking read: the `size` bytes read that the guest has not fetched */
#define CL_SAVED_F_CONTENTS 0x1u
#define CL_SAVED_F_FAILED 0x2u      /* event: its enqueue failed (status), no host event */
#define CL_SAVED_F_PROFILED 0x4u    /* event: `profiling` holds its counters */
#define CL_SAVED_F_WAITED 0x8u      /* user event: named in a wait list */
#define CL_SAVED_F_ALL 0xfu

/* One request: its call (opencl.tbl id), the executor's tag (a kernel
 * argument's index; the status a build, compile or link answered) and its
 * payload as the wire carries it. */
struct cl_saved_entry {
	uint32_t call;
	uint32_t tag;
	uint32_t len;
	const uint8_t *payload;
};

struct cl_saved {
	uint32_t kind;                  /* a handle kind, context .. event */
	uint32_t flags;                 /* CL_SAVED_F_* */
	uint32_t refs;                  /* the guest's references */
	/* Events only (zero otherwise): */
	int32_t status;                 /* CL_COMPLETE, or the error it ended with */
	uint32_t command_type;          /* CL_COMMAND_* */
	uint64_t context, queue;        /* handles; queue 0: none the guest holds */
	uint64_t profiling[CL_SAVED_PROFILING];
	uint64_t size;                  /* bytes of contents (CL_SAVED_F_CONTENTS) */
	uint32_t count;
	struct cl_saved_entry *entries; /* decode: malloc'd, into the buffer */
};

/* The session's part: the devices the guest's handles name (handle and
 * CL_DEVICE_NAME, in the platform's order), its platform, and the next
 * serial of each kind, CL_SAVED_KIND_FIRST first. */
struct cl_saved_device {
	uint64_t handle;
	uint32_t name_len;
	const char *name;               /* not terminated */
};

struct cl_saved_session {
	uint64_t platform;
	uint64_t next_serial[CL_SAVED_KINDS];
	uint32_t devices;
	struct cl_saved_device device[CL_SAVED_DEVICES_MAX];
};

/* Encode into a malloc'd buffer (*out, *len). 0, -EINVAL for a value the
 * decoder would refuse, -ENOMEM. */
int cl_saved_encode(const struct cl_saved *s, uint8_t **out, size_t *len);
/* 0; -EBADMSG for bytes that are not exactly one valid description, with
 * @why (may be NULL) saying what is wrong; -EPROTONOSUPPORT for another
 * version; -ENOMEM. Free with cl_saved_release. */
int cl_saved_decode(const uint8_t *buf, size_t len, struct cl_saved *s, const char **why);
void cl_saved_release(struct cl_saved *s);

int cl_saved_session_encode(const struct cl_saved_session *s, uint8_t **out, size_t *len);
int cl_saved_session_decode(const uint8_t *buf, size_t len, struct cl_saved_session *s, const char **why);

/* Whether @call may be the first request of an object of @kind (its
 * creation), and one of the later ones. */
int cl_saved_call_creates(uint32_t kind, uint32_t call);
int cl_saved_call_follows(uint32_t kind, uint32_t call);

/* The kind's name for messages ("buffer or image", "kernel"). */
const char *cl_saved_kind_name(uint32_t kind);

#endif
