#include "json_out.h"

#include <json-c/json.h>
#include <math.h>
#include <string.h>

#include "control_msg.h"

void json_writer_init(struct json_writer *w, FILE *f)
{
	memset(w, 0, sizeof(*w));
	w->f = f;
}

/* Attach @v under @key to the open container, or make it the root. */
static void attach(struct json_writer *w, const char *key, struct json_object *v)
{
	struct json_object *top = w->depth ? w->stack[w->depth - 1] : NULL;

	if (!v) {
		w->failed = true;
		return;
	}
	if (!top) {
		/* A lone value at the top level: printed at once. */
		if (!w->failed)
			fputs(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
							     JSON_C_TO_STRING_NOSLASHESCAPE), w->f);
		json_object_put(v);
		return;
	}
	if (json_object_is_type(top, json_type_array) ? json_object_array_add(top, v) :
	    json_object_object_add(top, key ? key : "", v)) {
		json_object_put(v);
		w->failed = true;
	}
}

static void container_begin(struct json_writer *w, const char *key, struct json_object *c)
{
	if (!c || w->depth >= JSON_OUT_DEPTH_MAX) {
		json_object_put(c);
		w->failed = true;
		return;
	}
	if (w->depth)
		attach(w, key, json_object_get(c));
	w->stack[w->depth++] = c;
}

static void container_end(struct json_writer *w)
{
	struct json_object *c;

	if (!w->depth)
		return;
	c = w->stack[--w->depth];
	if (!w->depth && !w->failed)
		fputs(json_object_to_json_string_ext(c, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
		      w->f);
	json_object_put(c);
}

void json_object_begin(struct json_writer *w, const char *key)
{
	container_begin(w, key, json_object_new_object());
}

void json_object_end(struct json_writer *w)
{
	container_end(w);
}

void json_array_begin(struct json_writer *w, const char *key)
{
	container_begin(w, key, json_object_new_array());
}

void json_array_end(struct json_writer *w)
{
	container_end(w);
}

void json_string_put(struct json_writer *w, const char *key, const char *s)
{
	json_bytes_put(w, key, s, strlen(s));
}

void json_bytes_put(struct json_writer *w, const char *key, const void *s, size_t len)
{
	attach(w, key, control_json_string_new(s, len));
}

void json_u64_put(struct json_writer *w, const char *key, uint64_t v)
{
	attach(w, key, json_object_new_uint64(v));
}

void json_i64_put(struct json_writer *w, const char *key, int64_t v)
{
	attach(w, key, json_object_new_int64(v));
}

void json_double_put(struct json_writer *w, const char *key, double v)
{
	if (!isfinite(v))
		json_null_put(w, key);
	else
		attach(w, key, json_object_new_double(v));
}

void json_bool_put(struct json_writer *w, const char *key, bool v)
{
	attach(w, key, json_object_new_boolean(v));
}

void json_null_put(struct json_writer *w, const char *key)
{
	/* json-c's null is the NULL object: added as is, not as a failure. */
	struct json_object *top = w->depth ? w->stack[w->depth - 1] : NULL;

	if (!top)
		fputs("null", w->f);
	else if (json_object_is_type(top, json_type_array))
		json_object_array_add(top, NULL);
	else
		json_object_object_add(top, key ? key : "", NULL);
}

void json_value_put(struct json_writer *w, const char *key, struct json_object *v)
{
	attach(w, key, v);
}

void json_members_put(struct json_writer *w, struct json_object *obj)
{
	if (!json_object_is_type(obj, json_type_object)) {
		w->failed = true;
		return;
	}
	json_object_object_foreach(obj, k, v) {
		if (v)
			attach(w, k, json_object_get(v));
		else
			json_null_put(w, k);
	}
}
