/* ckpt's `--json` output: one object written to a FILE, built with json-c.
 *
 * The calls mirror the output's structure (begin, put members, end); the
 * tree is printed on one line when the outermost container ends.  Strings
 * are escaped by json-c, and invalid UTF-8 in them becomes U+FFFD, so the
 * output always parses.  Parsing is not done here: what ternd answers is
 * decoded by common/control_msg.h.
 *
 * Threading: no globals; a writer is used by one thread at a time.
 */
#ifndef TERN_CLI_JSON_OUT_H
#define TERN_CLI_JSON_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct json_object;

#define JSON_OUT_DEPTH_MAX 63

struct json_writer {
	FILE *f;
	unsigned depth;
	bool failed;                                    /* out of memory: nothing is printed */
	struct json_object *stack[JSON_OUT_DEPTH_MAX + 1];
};

void json_writer_init(struct json_writer *w, FILE *f);
/* @key is the member name inside an object and NULL inside an array or at
 * the top level.  Containers nest at most JSON_OUT_DEPTH_MAX deep. */
void json_object_begin(struct json_writer *w, const char *key);
void json_object_end(struct json_writer *w);
void json_array_begin(struct json_writer *w, const char *key);
void json_array_end(struct json_writer *w);
void json_string_put(struct json_writer *w, const char *key, const char *s);
void json_bytes_put(struct json_writer *w, const char *key, const void *s, size_t len);
void json_u64_put(struct json_writer *w, const char *key, uint64_t v);
void json_i64_put(struct json_writer *w, const char *key, int64_t v);
/* NaN and infinities are written as null. */
void json_double_put(struct json_writer *w, const char *key, double v);
void json_bool_put(struct json_writer *w, const char *key, bool v);
void json_null_put(struct json_writer *w, const char *key);
/* Put @v (a json-c value; the writer takes the reference). */
void json_value_put(struct json_writer *w, const char *key, struct json_object *v);
/* Put every member of object @obj into the current object (@obj stays the
 * caller's). */
void json_members_put(struct json_writer *w, struct json_object *obj);

#endif
