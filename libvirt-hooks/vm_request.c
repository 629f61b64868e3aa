#include "vm_request.h"
#include "control.h"
#include "domain_xml.h"
#include "reason.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

/* Which members an op sends: one row per op. */
enum { M_NAME = 1, M_GENERATION = 2, M_CHECK = 4 };

static const struct {
	const char *name;
	unsigned members;
} vm_ops[] = {
	[VM_OP_ATTACH] = { "vm-attach", M_NAME },
	[VM_OP_DETACH] = { "vm-detach", 0 },
	[VM_OP_SAVE] = { "vm-save", M_GENERATION },
	[VM_OP_RESTORE] = { "vm-restore", M_GENERATION | M_CHECK },
	[VM_OP_DROP] = { "vm-drop", 0 },
};

const char *vm_op_name(enum vm_op op)
{
	if ((unsigned)op >= sizeof(vm_ops) / sizeof(vm_ops[0]))
		return NULL;
	return vm_ops[op].name;
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

static int member_put(struct json_object *obj, const char *key, struct json_object *v)
{
	if (!v || json_object_object_add(obj, key, v)) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

int vm_request_encode(const struct vm_request *req, char **line)
{
	const char *name = vm_op_name(req->op);
	struct json_object *obj;
	unsigned m;
	int ret;

	if (!name || !req->uuid || !vm_uuid_valid(req->uuid))
		return -EINVAL;
	m = vm_ops[req->op].members;
	if ((m & M_NAME) && (!req->name || !vm_name_valid(req->name)))
		return -EINVAL;
	if ((m & M_GENERATION) && (!req->generation || !vm_generation_valid(req->generation)))
		return -EINVAL;
	obj = json_object_new_object();
	if (!obj)
		return -ENOMEM;
	ret = member_put(obj, "op", json_object_new_string(name));
	if (!ret)
		ret = member_put(obj, "uuid", json_object_new_string(req->uuid));
	if (!ret && (m & M_NAME))
		ret = member_put(obj, "name", json_object_new_string(req->name));
	if (!ret && (m & M_GENERATION))
		ret = member_put(obj, "generation", json_object_new_string(req->generation));
	if (!ret && (m & M_CHECK))
		ret = member_put(obj, "check", json_object_new_boolean(req->check));
	if (!ret) {
		*line = strdup(json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN));
		if (!*line)
			ret = -ENOMEM;
	}
	json_object_put(obj);
	return ret;
}

/* One line, all of it one JSON object. */
static int line_object(const char *line, size_t len, struct json_object **obj, char *err, size_t errlen)
{
	struct json_tokener *tok = json_tokener_new();
	int ret = 0;

	if (!tok)
		return -ENOMEM;
	*obj = json_tokener_parse_ex(tok, line, (int)len);
	if (!*obj || json_tokener_get_error(tok) != json_tokener_success ||
	    json_tokener_get_parse_end(tok) != len || !json_object_is_type(*obj, json_type_object)) {
		json_object_put(*obj);
		*obj = NULL;
		ret = reason_refuse(err, errlen, "a reply line from ternd is not one JSON object");
	}
	json_tokener_free(tok);
	return ret;
}

/* Copy string member @key of @obj into @out (truncated to @cap); false if
 * present and not a string. */
static bool string_member(struct json_object *obj, const char *key, char *out, size_t cap, bool *present)
{
	struct json_object *v;

	*present = json_object_object_get_ex(obj, key, &v);
	out[0] = 0;
	if (!*present)
		return true;
	if (!json_object_is_type(v, json_type_string))
		return false;
	snprintf(out, cap, "%s", json_object_get_string(v));
	return true;
}

static int final_decode(struct json_object *obj, struct vm_reply *reply, char *err, size_t errlen)
{
	struct json_object *ok;
	bool present;

	if (!json_object_object_get_ex(obj, "ok", &ok) || !json_object_is_type(ok, json_type_boolean))
		return reason_refuse(err, errlen, "ternd's reply has no \"ok\" true or false");
	reply->ok = json_object_get_boolean(ok);
	if (!string_member(obj, "error", reply->error, sizeof(reply->error), &present))
		return reason_refuse(err, errlen, "ternd's reply has an \"error\" that is not a string");
	if (!reply->ok && (!present || !reply->error[0]))
		return reason_refuse(err, errlen, "ternd refused without saying why");
	if (!string_member(obj, "path", reply->path, sizeof(reply->path), &present))
		return reason_refuse(err, errlen, "ternd's reply has a \"path\" that is not a string");
	return 0;
}

int vm_reply_decode(const char *text, size_t len, struct vm_reply *reply, char *err, size_t errlen)
{
	const char *end = text + len, *p = text;
	bool final_seen = false;
	int ret = 0;

	memset(reply, 0, sizeof(*reply));
	if (memchr(text, 0, len))
		return reason_refuse(err, errlen, "ternd's reply holds a NUL byte");
	while (p < end && !ret) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((nl ? nl : end) - p);
		struct json_object *obj;

		if (final_seen)
			return reason_refuse(err, errlen, "ternd's reply goes on after its final line");
		if (!nl)
			return reason_refuse(err, errlen, "ternd's reply is cut off (no end of line)");
		ret = line_object(p, n, &obj, err, errlen);
		if (ret)
			break;
		if (!json_object_object_get_ex(obj, "progress", NULL)) {
			final_seen = true;
			ret = final_decode(obj, reply, err, errlen);
		}
		json_object_put(obj);
		p = nl + 1;
	}
	if (!ret && !final_seen)
		ret = reason_refuse(err, errlen, "ternd closed the connection without a final reply");
	return ret;
}

int vm_request_send(const char *control_path, const struct vm_request *req, int timeout_ms,
		    struct vm_reply *reply, char *err, size_t errlen)
{
	char *line, *text;
	int ret = vm_request_encode(req, &line);

	if (ret) {
		snprintf(err, errlen, "cannot encode %s: %s", vm_op_name(req->op) ? vm_op_name(req->op) : "request",
			 strerror(-ret));
		return ret;
	}
	ret = control_request(control_path, line, timeout_ms, &text);
	free(line);
	if (ret) {
		if (ret == -ENOENT || ret == -ECONNREFUSED)
			snprintf(err, errlen, "ternd is not running (no control socket at %s)", control_path);
		else
			snprintf(err, errlen, "ternd's control socket %s: %s", control_path, strerror(-ret));
		return ret;
	}
	ret = vm_reply_decode(text, strlen(text), reply, err, errlen);
	free(text);
	return ret;
}
