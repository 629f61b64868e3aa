/* One control-socket request whose answer may stream: ternd sends zero or
 * more progress lines, then one final reply (common/control_msg.h,
 * docs/ckpt.md).
 *
 * control.h's control_request() reads a whole reply at once; ckpt needs
 * the lines as they come to draw its progress bar, and the libvirt hooks the
 * typed final reply: both use this reader.
 *
 * Threading: blocking, no globals; call from one thread.
 */
#ifndef TERN_CONTROL_STREAM_H
#define TERN_CONTROL_STREAM_H

#include <stddef.h>

#include "control_msg.h"

/* Called for each progress line; @p is valid during the call only. */
typedef void (*control_progress_fn)(void *arg, const struct control_progress *p);

/* Send @req to the ternd listening on @path and wait for its answer; no
 * more than @timeout_ms may pass between two lines.  On success *answer is
 * the final reply (control_reply_release()): an error or the kind @req's op
 * expects.
 * Errors: -ENOENT / -ECONNREFUSED (no ternd there), -EACCES, -ETIMEDOUT,
 * -ECONNRESET (closed before the answer), -EBADMSG (a line that does not
 * decode; why in @err), -EMSGSIZE (a line longer than CONTROL_REPLY_LINE_MAX),
 * -EINVAL (bad @req or @path), -ENOMEM.  *answer is zeroed on error. */
int control_stream_request(const char *path, const struct control_request *req, int timeout_ms,
			   control_progress_fn progress, void *arg, struct control_reply *answer,
			   char *err, size_t errlen);

#endif
