/* The VM requests the hook and the listener send to ternd's control socket
 * (docs/libvirt.md; the ops themselves are ternd's supervisor's):
 *
 *   vm-attach uuid name · vm-detach uuid · vm-save uuid generation ·
 *   vm-restore uuid generation check · vm-drop uuid ·
 *   vm-incoming uuid name url · vm-switch uuid generation
 *
 * They are control_msg.h's requests and replies, sent with
 * control_stream.h's reader: this file only builds them from a domain's
 * strings, checks those first, and says in words what went wrong.
 *
 * No globals; reentrant.
 */
#ifndef TERN_LIBVIRT_VM_REQUEST_H
#define TERN_LIBVIRT_VM_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "control_msg.h"

/* A vm-* request for domain @uuid into *req; @name (vm-attach,
 * vm-incoming) and @generation (vm-save, vm-restore, vm-switch) may be NULL
 * for the other ops; vm-incoming's url is the caller's to set.
 * -EINVAL if @op is not a vm-* op the hooks send, or a member it needs is
 * missing or fails vm_id.h's checks. */
int vm_request_init(struct control_request *req, enum control_op op, const char *uuid, const char *name,
		    const char *generation, bool check);

/* A --timeout argument: 1 to VM_TIMEOUT_MAX_S whole seconds into
 * *timeout_ms; -EINVAL for anything else. */
#define VM_TIMEOUT_MAX_S 86400
int vm_timeout_parse(const char *text, int *timeout_ms);

/* Send @req to the control socket at @control_path and wait for the final
 * reply.  0 with *answer filled: CONTROL_REPLY_ERROR (ternd refused; why in
 * answer->error) or CONTROL_REPLY_VM; release it with control_reply_release().
 * Else -errno from the socket (-ENOENT/-ECONNREFUSED: no ternd there) or the
 * decoder (-EBADMSG), with a reason in @err and *answer zeroed. */
int vm_request_send(const char *control_path, const struct control_request *req, int timeout_ms,
		    struct control_reply *answer, char *err, size_t errlen);

#endif
