/* One control-socket request whose answer may stream: ternd sends zero or
 * more progress lines, then one final line, each a JSON object on its own
 * line (see /work/notes/ckpt-spec.md and docs/ckpt.md).  A line with a
 * "progress" member is progress; the first line without one is the answer.
 *
 * common/control.h's control_request() reads a whole reply at once; ckpt
 * needs the lines as they come to draw its progress bar, hence this reader.
 *
 * Threading: blocking, no globals; call from one thread.
 */
#ifndef TERN_CLI_CONTROL_STREAM_H
#define TERN_CLI_CONTROL_STREAM_H

#include "json.h"

/* Called for each progress line; @line is valid during the call only. */
typedef void (*control_progress_fn)(void *arg, const struct json_value *line);

/* Send @command (one line, no '\n' inside) to the ternd listening on @path
 * and wait for its answer; no more than @timeout_ms may pass between two
 * lines.  On success *answer is the final JSON object (json_free()); it may
 * hold "error", which is the caller's to report.
 * Errors: -ENOENT / -ECONNREFUSED (no ternd there), -EACCES, -ETIMEDOUT,
 * -ECONNRESET (closed before the answer), -EBADMSG (a line is not a JSON
 * object), -EMSGSIZE (a line longer than JSON_TEXT_MAX), -EINVAL (bad
 * @command or @path), -ENOMEM. */
int control_stream_request(const char *path, const char *command, int timeout_ms,
			   control_progress_fn progress, void *arg, struct json_value **answer);

#endif
