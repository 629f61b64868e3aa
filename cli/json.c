#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct json_parser {
	const char *p;
	const char *end;
};

static void ws_skip(struct json_parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static bool literal_take(struct json_parser *ps, const char *lit)
{
	size_t n = strlen(lit);

	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n))
		return false;
	ps->p += n;
	return true;
}

/* Length of the valid UTF-8 sequence at @s (at most @avail bytes), 0 if
 * invalid: overlong forms, surrogates and values past U+10FFFF are refused. */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
	uint32_t cp;
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (avail < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static size_t utf8_put(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static int hex4_take(const char **pp, const char *end, uint32_t *out)
{
	uint32_t v = 0;

	if (end - *pp < 4)
		return -EBADMSG;
	for (int i = 0; i < 4; i++) {
		char c = *(*pp)++;

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return -EBADMSG;
	}
	*out = v;
	return 0;
}

/* At the opening quote; leaves the parser after the closing one.  The
 * decoded string is never longer than its escaped form, so one allocation
 * of that size is enough. */
static int string_parse(struct json_parser *ps, char **out)
{
	const char *p = ps->p + 1, *close = p;
	size_t n = 0;
	char *s;

	while (close < ps->end && *close != '"')
		close += *close == '\\' && close + 1 < ps->end ? 2 : 1;
	if (close >= ps->end)
		return -EBADMSG;
	s = malloc((size_t)(close - p) + 1);
	if (!s)
		return -ENOMEM;
	while (p < close) {
		unsigned char c = (unsigned char)*p;

		if (c < 0x20)
			goto out_bad;
		if (c != '\\') {
			size_t l = utf8_len((const unsigned char *)p, (size_t)(close - p));

			if (!l)
				goto out_bad;
			memcpy(s + n, p, l);
			n += l;
			p += l;
			continue;
		}
		p++;
		switch (*p++) {
		case '"': s[n++] = '"'; break;
		case '\\': s[n++] = '\\'; break;
		case '/': s[n++] = '/'; break;
		case 'b': s[n++] = '\b'; break;
		case 'f': s[n++] = '\f'; break;
		case 'n': s[n++] = '\n'; break;
		case 'r': s[n++] = '\r'; break;
		case 't': s[n++] = '\t'; break;
		case 'u': {
			uint32_t cp, lo;

			if (hex4_take(&p, close, &cp))
				goto out_bad;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				goto out_bad;
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (close - p < 6 || p[0] != '\\' || p[1] != 'u')
					goto out_bad;
				p += 2;
				if (hex4_take(&p, close, &lo) || lo < 0xdc00 || lo > 0xdfff)
					goto out_bad;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			if (!cp)
				goto out_bad;  /* would cut the C string short */
			n += utf8_put(cp, s + n);
			break;
		}
		default:
			goto out_bad;
		}
	}
	s[n] = 0;
	ps->p = close + 1;
	*out = s;
	return 0;
out_bad:
	free(s);
	return -EBADMSG;
}

static int number_parse(struct json_parser *ps, struct json_value *v)
{
	const char *start = ps->p;
	bool integer = true;
	char buf[64];
	size_t n;

	if (ps->p < ps->end && *ps->p == '-')
		ps->p++;
	if (ps->p >= ps->end)
		return -EBADMSG;
	if (*ps->p == '0')
		ps->p++;
	else if (*ps->p >= '1' && *ps->p <= '9')
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	else
		return -EBADMSG;
	if (ps->p < ps->end && *ps->p == '.') {
		integer = false;
		ps->p++;
		if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
			return -EBADMSG;
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	}
	if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
		integer = false;
		ps->p++;
		if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
			ps->p++;
		if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
			return -EBADMSG;
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	}
	n = (size_t)(ps->p - start);
	if (n >= sizeof(buf))
		return -EBADMSG;  /* no sane reply of ours has such a number */
	memcpy(buf, start, n);
	buf[n] = 0;
	v->type = JSON_NUMBER;
	v->number = strtod(buf, NULL);
	if (integer && buf[0] != '-') {
		errno = 0;
		v->u64 = strtoull(buf, NULL, 10);
		v->is_u64 = errno == 0;
	}
	return 0;
}

static int value_parse(struct json_parser *ps, struct json_value *v, unsigned depth);

static int container_grow(struct json_value *v, size_t *cap, bool keys)
{
	size_t ncap = *cap ? *cap * 2 : 4;
	struct json_value *items;

	if (v->count < *cap)
		return 0;
	items = realloc(v->items, ncap * sizeof(*items));
	if (!items)
		return -ENOMEM;
	v->items = items;
	if (keys) {
		char **k = realloc(v->keys, ncap * sizeof(*k));

		if (!k)
			return -ENOMEM;
		v->keys = k;
	}
	*cap = ncap;
	return 0;
}

static int container_parse(struct json_parser *ps, struct json_value *v, unsigned depth, bool object)
{
	char close = object ? '}' : ']';
	size_t cap = 0;
	int rc;

	v->type = object ? JSON_OBJECT : JSON_ARRAY;
	ps->p++;
	ws_skip(ps);
	if (ps->p < ps->end && *ps->p == close) {
		ps->p++;
		return 0;
	}
	for (;;) {
		char *key = NULL;

		ws_skip(ps);
		if (object) {
			if (ps->p >= ps->end || *ps->p != '"')
				return -EBADMSG;
			rc = string_parse(ps, &key);
			if (rc)
				return rc;
			ws_skip(ps);
			if (ps->p >= ps->end || *ps->p != ':') {
				free(key);
				return -EBADMSG;
			}
			ps->p++;
		}
		rc = container_grow(v, &cap, object);
		if (rc) {
			free(key);
			return rc;
		}
		memset(&v->items[v->count], 0, sizeof(v->items[0]));
		if (object)
			v->keys[v->count] = key;
		v->count++;   /* counted before parsing so json_free sees it */
		rc = value_parse(ps, &v->items[v->count - 1], depth + 1);
		if (rc)
			return rc;
		ws_skip(ps);
		if (ps->p < ps->end && *ps->p == ',') {
			ps->p++;
			continue;
		}
		if (ps->p < ps->end && *ps->p == close) {
			ps->p++;
			return 0;
		}
		return -EBADMSG;
	}
}

static int value_parse(struct json_parser *ps, struct json_value *v, unsigned depth)
{
	if (depth > JSON_DEPTH_MAX)
		return -EBADMSG;
	ws_skip(ps);
	if (ps->p >= ps->end)
		return -EBADMSG;
	switch (*ps->p) {
	case '{':
		return container_parse(ps, v, depth, true);
	case '[':
		return container_parse(ps, v, depth, false);
	case '"':
		v->type = JSON_STRING;
		return string_parse(ps, &v->string);
	case 't':
		v->type = JSON_BOOL;
		v->boolean = true;
		return literal_take(ps, "true") ? 0 : -EBADMSG;
	case 'f':
		v->type = JSON_BOOL;
		return literal_take(ps, "false") ? 0 : -EBADMSG;
	case 'n':
		v->type = JSON_NULL;
		return literal_take(ps, "null") ? 0 : -EBADMSG;
	default:
		return number_parse(ps, v);
	}
}

static void value_clear(struct json_value *v)
{
	for (size_t i = 0; i < v->count; i++) {
		value_clear(&v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->string);
}

void json_free(struct json_value *v)
{
	if (!v)
		return;
	value_clear(v);
	free(v);
}

int json_parse(const char *text, size_t len, struct json_value **out)
{
	struct json_parser ps = { .p = text, .end = text + len };
	struct json_value *v;
	int rc;

	*out = NULL;
	if (len > JSON_TEXT_MAX)
		return -E2BIG;
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	rc = value_parse(&ps, v, 0);
	if (!rc) {
		ws_skip(&ps);
		if (ps.p != ps.end)
			rc = -EBADMSG;
	}
	if (rc) {
		json_free(v);
		return rc;
	}
	*out = v;
	return 0;
}

const struct json_value *json_member(const struct json_value *obj, const char *key)
{
	if (!obj || obj->type != JSON_OBJECT)
		return NULL;
	for (size_t i = 0; i < obj->count; i++)
		if (!strcmp(obj->keys[i], key))
			return &obj->items[i];
	return NULL;
}

const char *json_member_string(const struct json_value *obj, const char *key)
{
	const struct json_value *v = json_member(obj, key);

	return v && v->type == JSON_STRING ? v->string : NULL;
}

bool json_member_u64(const struct json_value *obj, const char *key, uint64_t *out)
{
	const struct json_value *v = json_member(obj, key);

	if (!v || v->type != JSON_NUMBER || !v->is_u64)
		return false;
	*out = v->u64;
	return true;
}

bool json_member_number(const struct json_value *obj, const char *key, double *out)
{
	const struct json_value *v = json_member(obj, key);

	if (!v || v->type != JSON_NUMBER)
		return false;
	*out = v->number;
	return true;
}

bool json_member_bool(const struct json_value *obj, const char *key, bool *out)
{
	const struct json_value *v = json_member(obj, key);

	if (!v || v->type != JSON_BOOL)
		return false;
	*out = v->boolean;
	return true;
}

/* Writer */

void json_writer_init(struct json_writer *w, FILE *f)
{
	memset(w, 0, sizeof(*w));
	w->f = f;
}

static void escaped_put(FILE *f, const unsigned char *s, size_t len)
{
	fputc('"', f);
	for (size_t i = 0; i < len;) {
		unsigned char c = s[i];
		size_t l;

		if (c == '"' || c == '\\') {
			fputc('\\', f);
			fputc(c, f);
			i++;
		} else if (c == '\n') {
			fputs("\\n", f);
			i++;
		} else if (c == '\t') {
			fputs("\\t", f);
			i++;
		} else if (c < 0x20 || c == 0x7f) {
			fprintf(f, "\\u%04x", c);
			i++;
		} else if ((l = utf8_len(s + i, len - i))) {
			fwrite(s + i, 1, l, f);
			i += l;
		} else {
			fputs("\\ufffd", f);
			i++;
		}
	}
	fputc('"', f);
}

/* Comma and key before an item of the current container. */
static void item_start(struct json_writer *w, const char *key)
{
	uint64_t bit = 1ull << (w->depth & 63);

	if (w->has_items & bit)
		fputc(',', w->f);
	w->has_items |= bit;
	if (key) {
		escaped_put(w->f, (const unsigned char *)key, strlen(key));
		fputc(':', w->f);
	}
}

static void container_begin(struct json_writer *w, const char *key, char open)
{
	item_start(w, key);
	fputc(open, w->f);
	if (w->depth < 63)
		w->depth++;
	w->has_items &= ~(1ull << w->depth);
}

static void container_end(struct json_writer *w, char close)
{
	fputc(close, w->f);
	if (w->depth)
		w->depth--;
}

void json_object_begin(struct json_writer *w, const char *key)
{
	container_begin(w, key, '{');
}

void json_object_end(struct json_writer *w)
{
	container_end(w, '}');
}

void json_array_begin(struct json_writer *w, const char *key)
{
	container_begin(w, key, '[');
}

void json_array_end(struct json_writer *w)
{
	container_end(w, ']');
}

void json_string_put(struct json_writer *w, const char *key, const char *s)
{
	json_bytes_put(w, key, s, strlen(s));
}

void json_bytes_put(struct json_writer *w, const char *key, const void *s, size_t len)
{
	item_start(w, key);
	escaped_put(w->f, s, len);
}

void json_u64_put(struct json_writer *w, const char *key, uint64_t v)
{
	item_start(w, key);
	fprintf(w->f, "%llu", (unsigned long long)v);
}

void json_i64_put(struct json_writer *w, const char *key, int64_t v)
{
	item_start(w, key);
	fprintf(w->f, "%lld", (long long)v);
}

void json_double_put(struct json_writer *w, const char *key, double v)
{
	item_start(w, key);
	if (isfinite(v))
		fprintf(w->f, "%.15g", v);
	else
		fputs("null", w->f);
}

void json_bool_put(struct json_writer *w, const char *key, bool v)
{
	item_start(w, key);
	fputs(v ? "true" : "false", w->f);
}

void json_null_put(struct json_writer *w, const char *key)
{
	item_start(w, key);
	fputs("null", w->f);
}

void json_value_put(struct json_writer *w, const char *key, const struct json_value *v)
{
	switch (v->type) {
	case JSON_NULL:
		json_null_put(w, key);
		break;
	case JSON_BOOL:
		json_bool_put(w, key, v->boolean);
		break;
	case JSON_NUMBER:
		if (v->is_u64)
			json_u64_put(w, key, v->u64);
		else
			json_double_put(w, key, v->number);
		break;
	case JSON_STRING:
		json_string_put(w, key, v->string);
		break;
	case JSON_ARRAY:
	case JSON_OBJECT:
		container_begin(w, key, v->type == JSON_OBJECT ? '{' : '[');
		for (size_t i = 0; i < v->count; i++)
			json_value_put(w, v->type == JSON_OBJECT ? v->keys[i] : NULL, &v->items[i]);
		container_end(w, v->type == JSON_OBJECT ? '}' : ']');
		break;
	}
}
