/* JSON for ckpt: a bounded parser for ternd's control replies and a writer for
 * `--json` output.
 *
 * The parser builds a small tree.  It takes untrusted text: nesting is capped
 * at JSON_DEPTH_MAX, the input at JSON_TEXT_MAX bytes, strings must be valid
 * UTF-8 without NUL (\u0000 is refused), and anything else malformed is
 * -EBADMSG.  Numbers keep their double value and, when they are a plain
 * non-negative integer that fits, their exact u64 (sizes and nanosecond
 * times exceed a double's 53 bits).
 *
 * The writer prints one value to a FILE, inserting commas itself; strings
 * are escaped and invalid UTF-8 bytes become U+FFFD, so the output always
 * parses.
 *
 * Threading: no globals; a tree or a writer is used by one thread at a time.
 */
#ifndef TERN_CLI_JSON_H
#define TERN_CLI_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_DEPTH_MAX 64
#define JSON_TEXT_MAX (16u << 20)

enum json_type {
	JSON_NULL,
	JSON_BOOL,
	JSON_NUMBER,
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
};

struct json_value {
	enum json_type type;
	bool boolean;
	bool is_u64;            /* number is an exact non-negative integer */
	double number;
	uint64_t u64;
	char *string;           /* NUL-terminated, valid UTF-8 */
	size_t count;           /* array items, object members */
	struct json_value *items;
	char **keys;            /* object member names, count of them */
};

/* Parse exactly one value from @text (@len bytes; surrounding white space
 * allowed).  *out is freed with json_free().  0, -EBADMSG (malformed, too
 * deep), -E2BIG (longer than JSON_TEXT_MAX), -ENOMEM. */
int json_parse(const char *text, size_t len, struct json_value **out);
/* Accepts NULL. */
void json_free(struct json_value *v);

/* Member @key of object @obj (first of that name), or NULL when @obj is not
 * an object or has no such member.  The result lives as long as @obj. */
const struct json_value *json_member(const struct json_value *obj, const char *key);
/* Typed shortcuts: NULL / false when missing or of another type. */
const char *json_member_string(const struct json_value *obj, const char *key);
bool json_member_u64(const struct json_value *obj, const char *key, uint64_t *out);
bool json_member_number(const struct json_value *obj, const char *key, double *out);
bool json_member_bool(const struct json_value *obj, const char *key, bool *out);

struct json_writer {
	FILE *f;
	unsigned depth;
	uint64_t has_items;     /* bit d: the container at depth d has an item */
};

void json_writer_init(struct json_writer *w, FILE *f);
/* @key is the member name inside an object and NULL inside an array or at
 * the top level.  Containers nest at most 63 deep. */
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
/* Write a parsed value back out. */
void json_value_put(struct json_writer *w, const char *key, const struct json_value *v);

#endif
