#include "vm_request.h"
#include "control_stream.h"
#include "vm_id.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copy @s into a member of @cap bytes; false if it does not fit. */
static bool member_set(char *dst, size_t cap, const char *s)
{
	size_t n = strlen(s);

	if (n >= cap)
		return false;
	memcpy(dst, s, n + 1);
	return true;
}

int vm_request_init(struct control_request *req, enum control_op op, const char *uuid, const char *name,
		    const char *generation, bool check)
{
	bool needs_name = op == CONTROL_OP_VM_ATTACH || op == CONTROL_OP_VM_INCOMING;
	bool needs_generation = op == CONTROL_OP_VM_SAVE || op == CONTROL_OP_VM_RESTORE || op == CONTROL_OP_VM_SWITCH;

	memset(req, 0, sizeof(*req));
	req->device = -1;
	if (op != CONTROL_OP_VM_ATTACH && op != CONTROL_OP_VM_DETACH && op != CONTROL_OP_VM_SAVE &&
	    op != CONTROL_OP_VM_RESTORE && op != CONTROL_OP_VM_DROP && op != CONTROL_OP_VM_SWITCH &&
	    op != CONTROL_OP_VM_INCOMING)
		return -EINVAL;
	if (!uuid || !vm_uuid_valid(uuid) || !member_set(req->uuid, sizeof(req->uuid), uuid))
		return -EINVAL;
	if (needs_name && (!name || !vm_name_valid(name) || !member_set(req->name, sizeof(req->name), name)))
		return -EINVAL;
	if (needs_generation && (!generation || !vm_generation_valid(generation) ||
				 !member_set(req->generation, sizeof(req->generation), generation)))
		return -EINVAL;
	req->op = op;
	req->check = op == CONTROL_OP_VM_RESTORE && check;
	return 0;
}

int vm_timeout_parse(const char *text, int *timeout_ms)
{
	char *end;
	long v;

	if (*text < '0' || *text > '9')
		return -EINVAL;         /* strtol would take spaces and signs */
	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || *end || end == text || v < 1 || v > VM_TIMEOUT_MAX_S)
		return -EINVAL;
	*timeout_ms = (int)v * 1000;
	return 0;
}

int vm_request_send(const char *control_path, const struct control_request *req, int timeout_ms,
		    struct control_reply *answer, char *err, size_t errlen)
{
	char why[CONTROL_TEXT_MAX + 1] = "";
	int ret = control_stream_request(control_path, req, timeout_ms, NULL, NULL, answer, why, sizeof(why));

	if (!ret)
		return 0;
	if (ret == -ENOENT || ret == -ECONNREFUSED)
		snprintf(err, errlen, "ternd is not running (no control socket at %s)", control_path);
	else if (ret == -EBADMSG)
		snprintf(err, errlen, "ternd's reply to %s: %s", control_op_name(req->op), why);
	else if (ret == -ECONNRESET)
		snprintf(err, errlen, "ternd closed the connection without a final reply to %s",
			 control_op_name(req->op));
	else
		snprintf(err, errlen, "ternd's control socket %s: %s", control_path, strerror(-ret));
	return ret;
}
