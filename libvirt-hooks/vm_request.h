/* The VM requests the hook and the listener send to ternd's control socket
 * (docs/libvirt.md; the ops themselves are ternd's supervisor's):
 *
 *   {"op":"vm-attach","uuid":U,"name":N}
 *   {"op":"vm-detach","uuid":U}
 *   {"op":"vm-save","uuid":U,"generation":G}
 *   {"op":"vm-restore","uuid":U,"generation":G,"check":false}
 *   {"op":"vm-drop","uuid":U}
 *
 * Encoded with json-c, one line, sent with control_request().  The answer
 * may hold progress lines ({"progress":...}) before the final one, which
 * has "ok" (a boolean) and, when false, "error" (a string).
 *
 * No globals; reentrant.
 */
#ifndef TERN_LIBVIRT_VM_REQUEST_H
#define TERN_LIBVIRT_VM_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#define VM_REQUEST_ERROR_MAX 1024       /* ternd's error text kept, bytes with the NUL */

enum vm_op {
	VM_OP_ATTACH = 1,
	VM_OP_DETACH,
	VM_OP_SAVE,
	VM_OP_RESTORE,
	VM_OP_DROP,
};

/* Which members each op sends is in vm_request.c's one table; the others
 * are ignored. */
struct vm_request {
	enum vm_op op;
	const char *uuid;
	const char *name;               /* vm-attach */
	const char *generation;         /* vm-save, vm-restore */
	bool check;                     /* vm-restore */
};

/* The final reply's content. */
struct vm_reply {
	bool ok;
	char error[VM_REQUEST_ERROR_MAX];       /* ternd's reason when !ok */
	char path[108];                         /* vm-attach: the socket ternd listens on, "" if not said */
};

const char *vm_op_name(enum vm_op op);

/* A --timeout argument: 1 to VM_TIMEOUT_MAX_S whole seconds into
 * *timeout_ms; -EINVAL for anything else. */
#define VM_TIMEOUT_MAX_S 86400
int vm_timeout_parse(const char *text, int *timeout_ms);

/* One request line (no '\n') in a malloc'd string *line.  -EINVAL if a
 * member the op needs is missing or fails domain_xml.h's checks, -ENOMEM. */
int vm_request_encode(const struct vm_request *req, char **line);

/* Decode what control_request() returned: every line but the final one
 * must be a progress object; the final one must have "ok".  -EBADMSG with a
 * reason in @err for anything else. */
int vm_reply_decode(const char *text, size_t len, struct vm_reply *reply, char *err, size_t errlen);

/* Encode, send to the control socket at @control_path and decode.  0 with
 * *reply filled (reply->ok may be false: ternd refused), or -errno from the
 * socket (-ENOENT/-ECONNREFUSED: no ternd there) or the decoder, with a
 * reason in @err. */
int vm_request_send(const char *control_path, const struct vm_request *req, int timeout_ms,
		    struct vm_reply *reply, char *err, size_t errlen);

#endif
