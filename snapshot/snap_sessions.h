/* The sessions file: what ternd remembers of sessions beyond their workers'
 * lives, kept in its state directory (STATE/sessions) so that a ternd
 * started later on the same state directory, and `ckpt rm`, know it.
 *
 * It says which snapshot each suspended session waits in (and which one a
 * restore that has not happened yet will use), so that those snapshots are
 * not removed from under a session, and each session's latest snapshot.
 * docs/snapshot-format.md "Sessions file" is the reference.
 *
 * Errors: 0 or a negative errno.  -EBADMSG: the bytes are damaged or not a
 * sessions file (bad magic, checksum, structure, an invalid name, a
 * duplicate id); -ENOTSUP: a version this build does not read; -E2BIG:
 * more entries than the caller's limit.  The decoder takes untrusted bytes:
 * every length is checked against the input and every allocation is bounded
 * by the input size.
 *
 * Threading: pure functions and whole-file operations; callers serialise
 * writers of one file (ternd's supervisor is its only writer).
 */
#ifndef TERN_SNAP_SESSIONS_H
#define TERN_SNAP_SESSIONS_H

#include <stddef.h>
#include <stdint.h>

#include "snap_format.h"

#define SNAP_MAGIC_SESSIONS "TRNSSESS"
#define SNAP_SESSIONS_VERSION 1u
#define SNAP_SESSIONS_FILE "sessions"
/* However ternd is configured, a file with more entries is not ours. */
#define SNAP_SESSIONS_LIMIT 65536u
#define SNAP_SESSIONS_HEADER_BYTES 16u
#define SNAP_SESSION_FIXED_BYTES 8u     /* plan, device; then three strings */

/* What a session waits for; ids are never reused. */
enum snap_session_plan {
	SNAP_PLAN_NONE = 0,             /* only its latest snapshot is known */
	SNAP_PLAN_SUSPENDED = 1,        /* parked in @snapshot until `resume` */
	SNAP_PLAN_RESTORE = 2,          /* its next worker restores @snapshot */
};

struct snap_session {
	char id[SNAP_NAME_MAX + 1];             /* 1-255 of A-Z a-z 0-9 . _ - */
	uint32_t plan;                          /* enum snap_session_plan */
	int32_t device;                         /* for the plan; -1: ternd's default */
	char snapshot[SNAP_NAME_MAX + 1];       /* the plan's; "" with SNAP_PLAN_NONE */
	char latest[SNAP_NAME_MAX + 1];         /* latest durable snapshot, or "" */
};

/* Encode @count entries into @out (snap_buf_free()).  -EINVAL for an entry
 * the decoder would refuse. */
int snap_sessions_encode(const struct snap_session *v, uint32_t count, struct snap_buf *out);

/* Decode @len bytes.  *out is malloc'ed (free()), NULL when *count is 0.
 * -E2BIG when the file holds more than @max entries. */
int snap_sessions_decode(const uint8_t *buf, size_t len, uint32_t max,
			 struct snap_session **out, uint32_t *count);

/* Read and decode @path.  A missing file is an empty list (0, *count 0). */
int snap_sessions_read(const char *path, uint32_t max, struct snap_session **out, uint32_t *count);

/* Write @path atomically and durably: PATH.tmp, fsync, rename, fsync of the
 * directory.  A crash leaves the old file or the new one. */
int snap_sessions_write(const char *path, const struct snap_session *v, uint32_t count);

/* The state directory's records, read whole (at most @max bytes, else
 * -EBADMSG; -ENOENT when missing) and written as snap_sessions_write does.
 * *out is malloc'd.  Shared by the sessions file and the domain records
 * (snap_vm.h). */
int snap_state_file_read(const char *path, size_t max, uint8_t **out, size_t *len);
int snap_state_file_write(const char *path, const struct snap_buf *b);

/* Whether @id may name a session in the file: 1-255 of A-Z a-z 0-9 . _ -,
 * or a libvirt domain's session, "UUID/" and such an id (vm_id.h). */
int snap_session_id_valid(const char *id);

#endif
