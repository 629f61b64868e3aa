/* The control plane's messages (control_msg.h): one field table per message,
 * walked by one encoder and one decoder. */
#include "control_msg.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deepest a valid message nests: link, reply, list, entry. */
#define CONTROL_DEPTH_MAX 8

enum field_type { F_STR, F_U64, F_U32, F_I32, F_DOUBLE, F_BOOL };

/* Optional: may be missing (strings "", numbers and bools 0, an i32 -1), and
 * is left out by the encoder when it has that value.  A required string must
 * not be empty. */
#define F_OPTIONAL 1u

struct field {
	const char *key;
	uint8_t type;
	uint8_t flags;
	uint32_t cap;           /* F_STR: the array's size, NUL included */
	size_t off;
};

#define FIELD(st, m, t, fl) { #m, t, fl, 0, offsetof(st, m) }
/* A member of a nested struct, named on the wire by its own name. */
#define FIELD_IN(st, in, m, t, fl) { #m, t, fl, 0, offsetof(st, in.m) }
#define FSTR(st, m, fl) { #m, F_STR, fl, sizeof(((st *)0)->m), offsetof(st, m) }

struct table {
	const struct field *f;
	unsigned n;
};

#define TABLE(a) { a, sizeof(a) / sizeof(a[0]) }

/* Requests: the members each op takes. */
#define RQ struct control_request
static const struct field rq_none[] = { { NULL, 0, 0, 0, 0 } };
static const struct field rq_snapshot[] = {
	FSTR(RQ, session, 0), FSTR(RQ, snapshot, F_OPTIONAL), FIELD(RQ, incremental, F_BOOL, F_OPTIONAL),
};
static const struct field rq_suspend[] = {
	FSTR(RQ, session, 0), FSTR(RQ, snapshot, F_OPTIONAL), FIELD(RQ, incremental, F_BOOL, F_OPTIONAL),
};
static const struct field rq_resume[] = { FSTR(RQ, session, 0), FIELD(RQ, device, F_I32, F_OPTIONAL) };
static const struct field rq_restore[] = { FSTR(RQ, snapshot, 0), FIELD(RQ, device, F_I32, F_OPTIONAL) };
static const struct field rq_vm_attach[] = { FSTR(RQ, uuid, 0), FSTR(RQ, name, 0) };
static const struct field rq_vm_uuid[] = { FSTR(RQ, uuid, 0) };
static const struct field rq_vm_save[] = {
	FSTR(RQ, uuid, 0), FSTR(RQ, generation, 0), FIELD(RQ, incremental, F_BOOL, F_OPTIONAL),
};
static const struct field rq_vm_switch[] = { FSTR(RQ, uuid, 0), FSTR(RQ, generation, 0) };
static const struct field rq_vm_restore[] = {
	FSTR(RQ, uuid, 0), FSTR(RQ, generation, 0), FIELD(RQ, check, F_BOOL, F_OPTIONAL),
};
static const struct field rq_vm_snapshot[] = {
	FSTR(RQ, domain, 0), FSTR(RQ, snapshot, F_OPTIONAL), FIELD(RQ, incremental, F_BOOL, F_OPTIONAL),
};
static const struct field rq_migrated[] = { FSTR(RQ, session, 0), FSTR(RQ, url, 0) };
static const struct field rq_vm_incoming[] = { FSTR(RQ, uuid, 0), FSTR(RQ, name, 0), FSTR(RQ, url, 0) };

static const struct {
	const char *name;
	struct table t;
	enum control_reply_kind reply;
} ops[] = {
	[CONTROL_OP_STATUS] = { "status", { rq_none, 0 }, CONTROL_REPLY_STATUS },
	[CONTROL_OP_SNAPSHOTS] = { "snapshots", { rq_none, 0 }, CONTROL_REPLY_SNAPSHOTS },
	[CONTROL_OP_SNAPSHOT] = { "snapshot", TABLE(rq_snapshot), CONTROL_REPLY_SNAPSHOT },
	[CONTROL_OP_SUSPEND] = { "suspend", TABLE(rq_suspend), CONTROL_REPLY_SNAPSHOT },
	[CONTROL_OP_RESUME] = { "resume", TABLE(rq_resume), CONTROL_REPLY_RESTORE },
	[CONTROL_OP_RESTORE] = { "restore", TABLE(rq_restore), CONTROL_REPLY_RESTORE },
	[CONTROL_OP_VM_ATTACH] = { "vm-attach", TABLE(rq_vm_attach), CONTROL_REPLY_VM },
	[CONTROL_OP_VM_DETACH] = { "vm-detach", TABLE(rq_vm_uuid), CONTROL_REPLY_VM },
	[CONTROL_OP_VM_SAVE] = { "vm-save", TABLE(rq_vm_save), CONTROL_REPLY_VM },
	[CONTROL_OP_VM_RESTORE] = { "vm-restore", TABLE(rq_vm_restore), CONTROL_REPLY_VM },
	[CONTROL_OP_VM_DROP] = { "vm-drop", TABLE(rq_vm_uuid), CONTROL_REPLY_VM },
	[CONTROL_OP_VM_SNAPSHOT] = { "vm-snapshot", TABLE(rq_vm_snapshot), CONTROL_REPLY_VM },
	[CONTROL_OP_MIGRATED] = { "migrated", TABLE(rq_migrated), CONTROL_REPLY_MIGRATED },
	[CONTROL_OP_VM_INCOMING] = { "vm-incoming", TABLE(rq_vm_incoming), CONTROL_REPLY_VM },
	[CONTROL_OP_VM_SWITCH] = { "vm-switch", TABLE(rq_vm_switch), CONTROL_REPLY_VM },
};
#define OPS_COUNT (sizeof(ops) / sizeof(ops[0]))

/* Replies. */
/* Relative to the union, like every reply body. */
static const struct field rp_error[] = { { "error", F_STR, 0, CONTROL_TEXT_MAX + 1, 0 } };

#define SI struct control_session_info
static const struct field rp_session[] = {
	FSTR(SI, id, 0), FIELD(SI, pid, F_I32, 0), FIELD(SI, guest_pid, F_I32, F_OPTIONAL), FSTR(SI, state, 0), FIELD(SI, device, F_I32, 0),
	FIELD(SI, memory, F_U64, 0), FIELD(SI, calls, F_U64, 0), FIELD(SI, round_trips, F_U64, 0),
	FIELD(SI, started, F_U64, 0), FSTR(SI, listener, F_OPTIONAL), FSTR(SI, snapshot, F_OPTIONAL),
	FSTR(SI, domain_uuid, F_OPTIONAL), FSTR(SI, domain_name, F_OPTIONAL),
};
#define ST struct control_status
static const struct field rp_status[] = {
	FIELD(ST, pid, F_I32, 0), FSTR(ST, backend, 0), FSTR(ST, state_dir, 0),
	FIELD(ST, sessions_started, F_U64, 0),
	FIELD_IN(ST, counters, quota, F_U64, F_OPTIONAL), FIELD_IN(ST, counters, hellos_refused, F_U64, F_OPTIONAL),
	FIELD_IN(ST, counters, snapshots_ok, F_U64, F_OPTIONAL), FIELD_IN(ST, counters, snapshots_failed, F_U64, F_OPTIONAL),
	FIELD_IN(ST, counters, snapshot_ms, F_DOUBLE, F_OPTIONAL), FIELD_IN(ST, counters, restores_ok, F_U64, F_OPTIONAL),
	FIELD_IN(ST, counters, restores_failed, F_U64, F_OPTIONAL), FIELD_IN(ST, counters, restore_ms, F_DOUBLE, F_OPTIONAL),
	FIELD_IN(ST, counters, migrations_out, F_U64, F_OPTIONAL), FIELD_IN(ST, counters, migrations_in, F_U64, F_OPTIONAL),
};
#define NI struct control_snapshot_info
static const struct field rp_snapinfo[] = {
	FSTR(NI, name, 0), FSTR(NI, parent, F_OPTIONAL), FSTR(NI, session, F_OPTIONAL),
	FIELD(NI, created_ns, F_U64, 0), FIELD(NI, logical_bytes, F_U64, 0),
	FIELD(NI, stored_bytes, F_U64, 0), FIELD(NI, complete, F_BOOL, 0),
};
static const struct field rp_snapshots[] = { FSTR(struct control_snapshots, store, 0) };
#define SR struct control_snapshot_result
static const struct field rp_snapshot[] = {
	FSTR(SR, snapshot, 0), FSTR(SR, session, 0), FSTR(SR, parent, F_OPTIONAL),
	FIELD(SR, pause_ms, F_DOUBLE, 0), FIELD(SR, total_ms, F_DOUBLE, 0), FIELD(SR, regions, F_U32, 0),
	FIELD(SR, bytes, F_U64, 0), FIELD(SR, stored_bytes, F_U64, 0), FIELD(SR, chunks, F_U64, 0),
	FIELD(SR, zero_chunks, F_U64, 0), FIELD(SR, unchanged_chunks, F_U64, 0),
	FIELD(SR, new_chunks, F_U64, 0), FIELD(SR, seq, F_U64, 0), FSTR(SR, hash, 0),
	FIELD(SR, hash_ms, F_DOUBLE, 0), FIELD(SR, shadowed_chunks, F_U64, 0),
	FIELD(SR, direct_chunks, F_U64, 0), FIELD(SR, drain_ms, F_DOUBLE, 0),
	FIELD(SR, capture_ms, F_DOUBLE, F_OPTIONAL),
};
#define RR struct control_restore_result
static const struct field rp_restore[] = {
	FSTR(RR, snapshot, F_OPTIONAL), FSTR(RR, session, 0), FIELD(RR, pid, F_I32, 0),
	FIELD(RR, device, F_I32, 0), FIELD(RR, restore_ms, F_DOUBLE, 0), FIELD(RR, seq, F_U64, 0),
	FIELD(RR, regions, F_U32, 0), FIELD(RR, bytes, F_U64, 0), FIELD(RR, fill_ms, F_DOUBLE, F_OPTIONAL),
};
#define PG struct control_progress
static const struct field rp_progress[] = {
	FIELD(PG, progress, F_DOUBLE, 0), FSTR(PG, stage, F_OPTIONAL), FSTR(PG, snapshot, F_OPTIONAL),
	FIELD(PG, bytes, F_U64, F_OPTIONAL), FIELD(PG, total, F_U64, F_OPTIONAL),
};

#define VR struct control_vm_result
static const struct field rp_vm[] = {
	FSTR(VR, uuid, 0), FSTR(VR, name, F_OPTIONAL), FSTR(VR, path, F_OPTIONAL), FSTR(VR, generation, F_OPTIONAL),
};
#define MR struct control_migrated_result
static const struct field rp_migrated[] = { FSTR(MR, session, 0), FSTR(MR, url, 0) };
#define VS struct control_vm_snapshot
static const struct field rp_vm_snapshot[] = { FSTR(VS, session, 0), FSTR(VS, snapshot, 0) };

/* A reply's body sits at offset 0 of the union. */
static const struct {
	struct table t;
	const char *list;               /* the member holding its list, or NULL */
	struct table elem;
	size_t elem_size;
} replies[] = {
	[CONTROL_REPLY_ERROR] = { TABLE(rp_error), NULL, { NULL, 0 }, 0 },
	[CONTROL_REPLY_STATUS] = { TABLE(rp_status), "sessions", TABLE(rp_session), sizeof(SI) },
	[CONTROL_REPLY_SNAPSHOTS] = { TABLE(rp_snapshots), "snapshots", TABLE(rp_snapinfo), sizeof(NI) },
	[CONTROL_REPLY_SNAPSHOT] = { TABLE(rp_snapshot), NULL, { NULL, 0 }, 0 },
	[CONTROL_REPLY_RESTORE] = { TABLE(rp_restore), NULL, { NULL, 0 }, 0 },
	[CONTROL_REPLY_PROGRESS] = { TABLE(rp_progress), NULL, { NULL, 0 }, 0 },
	[CONTROL_REPLY_VM] = { TABLE(rp_vm), "snapshots", TABLE(rp_vm_snapshot), sizeof(VS) },
	[CONTROL_REPLY_MIGRATED] = { TABLE(rp_migrated), NULL, { NULL, 0 }, 0 },
};
#define REPLIES_COUNT (sizeof(replies) / sizeof(replies[0]))

/* The line channel. */
#define LK struct control_link
static const struct field lk_hello[] = { FSTR(LK, session, 0), FIELD(LK, last_seq, F_U64, 0) };
static const struct field lk_refuse[] = { FSTR(LK, reason, 0) };
static const struct field lk_hostfn[] = { FSTR(LK, secret, 0) };
static const struct field lk_prefill[] = { FSTR(LK, snapshot, 0) };
static const struct field lk_adopt[] = {
	FSTR(LK, session, 0), FSTR(LK, secret, 0), FSTR(LK, wire_secret, 0), FIELD(LK, has_owner_uid, F_BOOL, 0),
	FIELD(LK, owner_uid, F_U32, 0), FIELD(LK, vm, F_BOOL, 0), FIELD(LK, length, F_U32, 0),
};
static const struct field lk_restore[] = { FSTR(LK, snapshot, 0), FIELD(LK, device, F_I32, 0) };
static const struct field lk_snapshot[] = {
	FSTR(LK, snapshot, 0), FSTR(LK, parent, F_OPTIONAL), FIELD(LK, suspend, F_BOOL, 0),
};

static const struct {
	const char *name;
	struct table t;
	enum control_op reply_op;       /* the reply it carries answers this op; 0: none */
} links[] = {
	[CONTROL_LINK_HELLO] = { "hello", TABLE(lk_hello), 0 },
	[CONTROL_LINK_READY] = { "ready", { NULL, 0 }, CONTROL_OP_RESTORE },
	[CONTROL_LINK_PROGRESS] = { "progress", { NULL, 0 }, CONTROL_OP_SNAPSHOT },
	[CONTROL_LINK_RESULT] = { "result", { NULL, 0 }, CONTROL_OP_SNAPSHOT },
	[CONTROL_LINK_NEW] = { "new", { NULL, 0 }, 0 },
	[CONTROL_LINK_WAIT] = { "wait", { NULL, 0 }, 0 },
	[CONTROL_LINK_REFUSE] = { "refuse", TABLE(lk_refuse), 0 },
	[CONTROL_LINK_RESTORE] = { "restore", TABLE(lk_restore), 0 },
	[CONTROL_LINK_SNAPSHOT] = { "snapshot", TABLE(lk_snapshot), 0 },
	[CONTROL_LINK_HOLD] = { "hold", { NULL, 0 }, 0 },
	[CONTROL_LINK_HELD] = { "held", { NULL, 0 }, 0 },
	[CONTROL_LINK_RELEASE] = { "release", { NULL, 0 }, 0 },
	[CONTROL_LINK_HOSTFN] = { "host-function", TABLE(lk_hostfn), 0 },
	[CONTROL_LINK_PREFILL] = { "prefill", TABLE(lk_prefill), 0 },
	[CONTROL_LINK_PREFILLED] = { "prefilled", TABLE(lk_prefill), 0 },
	[CONTROL_LINK_ADOPT] = { "adopt", TABLE(lk_adopt), 0 },
};
#define LINKS_COUNT (sizeof(links) / sizeof(links[0]))

const char *control_op_name(enum control_op op)
{
	return (unsigned)op < OPS_COUNT ? ops[op].name : NULL;
}

void control_hex_put(char *out, const uint8_t *bytes, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = 0;
}

static int hex_digit(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int control_hex_get(const char *hex, uint8_t *out, size_t n)
{
	if (strlen(hex) != 2 * n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

const char *control_link_type_name(enum control_link_type type)
{
	return (unsigned)type < LINKS_COUNT ? links[type].name : NULL;
}

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EBADMSG;
}

/* Length of the valid UTF-8 sequence at @s (@n bytes left), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	uint32_t c;
	size_t len;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, c = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, c = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, c = s[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return len;
}

static bool utf8_valid(const char *s, size_t n)
{
	for (size_t i = 0, k; i < n; i += k)
		if (!(k = utf8_seq((const unsigned char *)s + i, n - i)))
			return false;
	return true;
}

struct json_object *control_json_string_new(const char *s, size_t n)
{
	size_t o = 0;
	struct json_object *j;
	char *clean;

	if (utf8_valid(s, n))
		return json_object_new_string_len(s, (int)n);
	clean = malloc(3 * n + 1);
	if (!clean)
		return NULL;
	for (size_t i = 0, k; i < n; i += k) {
		k = utf8_seq((const unsigned char *)s + i, n - i);
		if (k) {
			memcpy(clean + o, s + i, k);
			o += k;
		} else {
			memcpy(clean + o, "\xef\xbf\xbd", 3);
			o += 3;
			k = 1;
		}
	}
	j = json_object_new_string_len(clean, (int)o);
	free(clean);
	return j;
}

static int fields_encode(struct json_object *obj, const struct table *t, const void *base)
{
	for (unsigned i = 0; i < t->n; i++) {
		const struct field *f = &t->f[i];
		const char *p = (const char *)base + f->off;
		bool opt = f->flags & F_OPTIONAL;
		struct json_object *v = NULL;
		uint64_t u64;
		uint32_t u32;
		int32_t i32;
		double d;
		bool b;

		switch (f->type) {
		case F_STR:
			if (!memchr(p, 0, f->cap))
				return -EINVAL;
			if (opt && !p[0])
				continue;
			v = control_json_string_new(p, strlen(p));
			break;
		case F_U64:
			memcpy(&u64, p, sizeof(u64));
			if (opt && !u64)
				continue;
			v = json_object_new_uint64(u64);
			break;
		case F_U32:
			memcpy(&u32, p, sizeof(u32));
			if (opt && !u32)
				continue;
			v = json_object_new_int64(u32);
			break;
		case F_I32:
			memcpy(&i32, p, sizeof(i32));
			if (opt && i32 < 0)
				continue;
			v = json_object_new_int(i32);
			break;
		case F_DOUBLE:
			memcpy(&d, p, sizeof(d));
			if (!isfinite(d))
				d = 0;  /* JSON has no NaN */
			if (opt && d == 0)
				continue;
			v = json_object_new_double(d);
			break;
		case F_BOOL:
			memcpy(&b, p, sizeof(b));
			if (opt && !b)
				continue;
			v = json_object_new_boolean(b);
			break;
		}
		if (!v || json_object_object_add(obj, f->key, v)) {
			json_object_put(v);
			return -ENOMEM;
		}
	}
	return 0;
}

/* Fill @base's fields from @obj.  Members named in @extra are the caller's;
 * any other member not in @t is refused. */
static int fields_decode(struct json_object *obj, const struct table *t, void *base,
			 const char *const *extra, char *err, size_t errlen)
{
	uint64_t seen = 0;

	for (unsigned i = 0; i < t->n; i++)
		if (t->f[i].type == F_I32 && (t->f[i].flags & F_OPTIONAL))
			memcpy((char *)base + t->f[i].off, &(int32_t){ -1 }, sizeof(int32_t));
	json_object_object_foreach(obj, key, v) {
		const struct field *f = NULL;
		char *p;
		bool mine = false;
		unsigned i;

		for (const char *const *e = extra; e && *e; e++)
			mine |= !strcmp(*e, key);
		if (mine)
			continue;
		for (i = 0; i < t->n && !f; i++)
			if (!strcmp(t->f[i].key, key))
				f = &t->f[i];
		if (!f)
			return fail(err, errlen, "unknown member \"%.64s\"", key);
		seen |= 1ull << (i - 1);
		p = (char *)base + f->off;
		switch (f->type) {
		case F_STR: {
			const char *s = json_object_get_string(v);
			size_t n;

			if (!json_object_is_type(v, json_type_string))
				return fail(err, errlen, "member \"%s\" is not a string", f->key);
			n = (size_t)json_object_get_string_len(v);
			if (n >= f->cap)
				return fail(err, errlen, "member \"%s\" is longer than %u bytes", f->key, f->cap - 1);
			if (memchr(s, 0, n))
				return fail(err, errlen, "member \"%s\" holds a NUL character", f->key);
			if (!utf8_valid(s, n))
				return fail(err, errlen, "member \"%s\" is not valid UTF-8", f->key);
			if (!n && !(f->flags & F_OPTIONAL))
				return fail(err, errlen, "member \"%s\" is empty", f->key);
			memcpy(p, s, n);
			p[n] = 0;
			break;
		}
		case F_U64:
		case F_U32:
		case F_I32: {
			int64_t i64 = json_object_get_int64(v);
			uint64_t u64 = json_object_get_uint64(v);

			if (!json_object_is_type(v, json_type_int))
				return fail(err, errlen, "member \"%s\" is not an integer", f->key);
			/* json-c keeps the sign: a negative number has a negative int64. */
			if (f->type == F_U64 && i64 < 0)
				return fail(err, errlen, "member \"%s\" is negative", f->key);
			if (f->type == F_U32 && (i64 < 0 || u64 > UINT32_MAX))
				return fail(err, errlen, "member \"%s\" is out of range", f->key);
			if (f->type == F_I32 && (i64 < INT32_MIN || i64 > INT32_MAX))
				return fail(err, errlen, "member \"%s\" is out of range", f->key);
			if (f->type == F_U64)
				memcpy(p, &u64, sizeof(u64));
			else if (f->type == F_U32)
				memcpy(p, &(uint32_t){ (uint32_t)u64 }, sizeof(uint32_t));
			else
				memcpy(p, &(int32_t){ (int32_t)i64 }, sizeof(int32_t));
			break;
		}
		case F_DOUBLE: {
			double d = json_object_get_double(v);

			if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
				return fail(err, errlen, "member \"%s\" is not a number", f->key);
			if (!isfinite(d))
				return fail(err, errlen, "member \"%s\" is not finite", f->key);
			memcpy(p, &d, sizeof(d));
			break;
		}
		case F_BOOL:
			if (!json_object_is_type(v, json_type_boolean))
				return fail(err, errlen, "member \"%s\" is not true or false", f->key);
			memcpy(p, &(bool){ json_object_get_boolean(v) }, sizeof(bool));
			break;
		}
	}
	for (unsigned i = 0; i < t->n; i++)
		if (!(t->f[i].flags & F_OPTIONAL) && !(seen & (1ull << i)))
			return fail(err, errlen, "member \"%s\" is missing", t->f[i].key);
	return 0;
}

/* One JSON object from @text: -EMSGSIZE over @max, -EBADMSG otherwise. */
static int object_parse(const char *text, size_t len, size_t max, struct json_object **out,
			char *err, size_t errlen)
{
	struct json_tokener *tok;
	struct json_object *obj;
	enum json_tokener_error jerr;

	*out = NULL;
	if (len > max) {
		fail(err, errlen, "message of %zu bytes, more than the %zu allowed", len, max);
		return -EMSGSIZE;
	}
	if (memchr(text, 0, len))
		return fail(err, errlen, "NUL byte in the message");
	while (len && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ' ||
		       text[len - 1] == '\t'))
		len--;
	if (!len)
		return fail(err, errlen, "empty message");
	tok = json_tokener_new_ex(CONTROL_DEPTH_MAX);
	if (!tok)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	obj = json_tokener_parse_ex(tok, text, (int)len);
	jerr = json_tokener_get_error(tok);
	if (obj && jerr == json_tokener_success && json_tokener_get_parse_end(tok) != len) {
		json_tokener_free(tok);
		json_object_put(obj);
		return fail(err, errlen, "bytes after the message's end");
	}
	json_tokener_free(tok);
	if (jerr == json_tokener_continue) {
		json_object_put(obj);
		return fail(err, errlen, "truncated message");
	}
	if (!obj || jerr != json_tokener_success) {
		json_object_put(obj);
		return fail(err, errlen, "malformed JSON: %s", json_tokener_error_desc(jerr));
	}
	if (!json_object_is_type(obj, json_type_object)) {
		json_object_put(obj);
		return fail(err, errlen, "not a JSON object");
	}
	*out = obj;
	return 0;
}

/* @obj as one line with '\n', at most @max bytes with it. */
static int line_make(struct json_object *obj, size_t max, char **line, size_t *len)
{
	size_t n = 0;
	const char *s = json_object_to_json_string_length(obj, JSON_C_TO_STRING_PLAIN |
							  JSON_C_TO_STRING_NOSLASHESCAPE, &n);
	char *out;

	if (!s)
		return -ENOMEM;
	if (n + 1 > max)
		return -EMSGSIZE;
	out = malloc(n + 2);
	if (!out)
		return -ENOMEM;
	memcpy(out, s, n);
	out[n] = '\n';
	out[n + 1] = 0;
	*line = out;
	if (len)
		*len = n + 1;
	return 0;
}

static int member_add(struct json_object *obj, const char *key, struct json_object *v)
{
	if (!v || json_object_object_add(obj, key, v)) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

static int reply_json(const struct control_reply *r, struct json_object **out);

/* A message with its tag member (@tag_key: @tag), the fields of @t from
 * @base and, when @nested, a "reply" member: one line of at most @max. */
static int tagged_encode(const char *tag_key, const char *tag, const struct table *t, const void *base,
			 const struct control_reply *nested, size_t max, char **line, size_t *len)
{
	struct json_object *obj = json_object_new_object();
	int rc;

	if (!obj)
		return -ENOMEM;
	rc = member_add(obj, tag_key, json_object_new_string(tag));
	if (!rc)
		rc = fields_encode(obj, t, base);
	if (!rc && nested) {
		struct json_object *reply;

		rc = reply_json(nested, &reply);
		if (!rc)
			rc = member_add(obj, "reply", reply);
	}
	if (!rc)
		rc = line_make(obj, max, line, len);
	json_object_put(obj);
	return rc;
}

int control_request_encode(const struct control_request *req, char **line, size_t *len)
{
	if (!control_op_name(req->op))
		return -EINVAL;
	return tagged_encode("op", ops[req->op].name, &ops[req->op].t, req, NULL, CONTROL_REQUEST_MAX, line, len);
}

/* The value of string member @key naming an entry of @names (@count of
 * them, NULL holes allowed), or 0. */
static unsigned name_lookup(struct json_object *obj, const char *key, const char *const *names,
			    unsigned count, char *err, size_t errlen)
{
	struct json_object *v;
	const char *s;

	if (!json_object_object_get_ex(obj, key, &v)) {
		fail(err, errlen, "member \"%s\" is missing", key);
		return 0;
	}
	if (!json_object_is_type(v, json_type_string)) {
		fail(err, errlen, "member \"%s\" is not a string", key);
		return 0;
	}
	s = json_object_get_string(v);
	for (unsigned i = 1; i < count; i++)
		if (names[i] && !strcmp(names[i], s) && (size_t)json_object_get_string_len(v) == strlen(s))
			return i;
	fail(err, errlen, "unknown %s \"%.64s\"", key, s);
	return 0;
}

int control_request_decode(const char *text, size_t len, struct control_request *req,
			   char *err, size_t errlen)
{
	static const char *const extra[] = { "op", NULL };
	const char *names[OPS_COUNT];
	struct json_object *obj;
	unsigned op;
	int rc;

	memset(req, 0, sizeof(*req));
	req->device = -1;
	rc = object_parse(text, len, CONTROL_REQUEST_MAX, &obj, err, errlen);
	if (rc)
		return rc;
	for (unsigned i = 0; i < OPS_COUNT; i++)
		names[i] = ops[i].name;
	op = name_lookup(obj, "op", names, OPS_COUNT, err, errlen);
	rc = op ? fields_decode(obj, &ops[op].t, req, extra, err, errlen) : -EBADMSG;
	req->op = (enum control_op)op;
	json_object_put(obj);
	return rc;
}

void control_reply_release(struct control_reply *r)
{
	if (r->kind == CONTROL_REPLY_STATUS)
		free(r->status.sessions);
	else if (r->kind == CONTROL_REPLY_SNAPSHOTS)
		free(r->snapshots.snapshots);
	else if (r->kind == CONTROL_REPLY_VM)
		free(r->vm.snapshots);
	memset(r, 0, sizeof(*r));
}

void control_link_release(struct control_link *m)
{
	control_reply_release(&m->reply);
}

void control_reply_error(struct control_reply *r, const char *fmt, ...)
{
	va_list ap;

	control_reply_release(r);
	r->kind = CONTROL_REPLY_ERROR;
	va_start(ap, fmt);
	vsnprintf(r->error, sizeof(r->error), fmt, ap);
	va_end(ap);
}

/* Where a reply's list is: its count and its array. */
static void reply_list(struct control_reply *r, uint32_t **count, void ***items)
{
	*count = NULL;
	*items = NULL;
	if (r->kind == CONTROL_REPLY_STATUS) {
		*count = &r->status.session_count;
		*items = (void **)&r->status.sessions;
	} else if (r->kind == CONTROL_REPLY_SNAPSHOTS) {
		*count = &r->snapshots.count;
		*items = (void **)&r->snapshots.snapshots;
	} else if (r->kind == CONTROL_REPLY_VM) {
		*count = &r->vm.count;
		*items = (void **)&r->vm.snapshots;
	}
}

static int reply_json(const struct control_reply *r, struct json_object **out)
{
	struct json_object *obj, *arr;
	uint32_t *count;
	void **items;
	int rc = 0;

	*out = NULL;
	if (r->kind < CONTROL_REPLY_ERROR || (unsigned)r->kind >= REPLIES_COUNT)
		return -EINVAL;
	obj = json_object_new_object();
	if (!obj)
		return -ENOMEM;
	if (r->kind != CONTROL_REPLY_PROGRESS)
		rc = member_add(obj, "ok", json_object_new_boolean(r->kind != CONTROL_REPLY_ERROR));
	if (!rc)
		rc = fields_encode(obj, &replies[r->kind].t, &r->error);
	reply_list((struct control_reply *)r, &count, &items);
	if (!rc && count) {
		arr = json_object_new_array_ext((int)*count);
		rc = member_add(obj, replies[r->kind].list, arr);
		for (uint32_t i = 0; !rc && i < *count; i++) {
			struct json_object *e = json_object_new_object();

			rc = e ? fields_encode(e, &replies[r->kind].elem,
					       (char *)*items + i * replies[r->kind].elem_size) : -ENOMEM;
			if (!rc && json_object_array_add(arr, e))
				rc = -ENOMEM;
			if (rc)
				json_object_put(e);
		}
	}
	if (rc) {
		json_object_put(obj);
		return rc;
	}
	*out = obj;
	return 0;
}

struct json_object *control_reply_to_json(const struct control_reply *r)
{
	struct json_object *obj;

	return reply_json(r, &obj) ? NULL : obj;
}

int control_reply_encode(const struct control_reply *r, char **line, size_t *len)
{
	struct json_object *obj;
	int rc = reply_json(r, &obj);

	if (rc)
		return rc;
	rc = line_make(obj, CONTROL_REPLY_LINE_MAX, line, len);
	json_object_put(obj);
	return rc;
}

static int reply_decode_object(struct json_object *obj, enum control_op op, struct control_reply *r,
			       char *err, size_t errlen)
{
	static const char *const extra_ok[] = { "ok", NULL };
	const char *extra[] = { "ok", NULL, NULL };
	struct json_object *v, *arr;
	uint32_t *count;
	void **items;
	size_t n;
	int rc;

	memset(r, 0, sizeof(*r));
	if (!control_op_name(op))
		return -EINVAL;
	if (json_object_object_get_ex(obj, "progress", NULL)) {
		r->kind = CONTROL_REPLY_PROGRESS;
		return fields_decode(obj, &replies[r->kind].t, &r->error, NULL, err, errlen);
	}
	if (!json_object_object_get_ex(obj, "ok", &v))
		return fail(err, errlen, "neither \"ok\" nor \"progress\" in the reply");
	if (!json_object_is_type(v, json_type_boolean))
		return fail(err, errlen, "member \"ok\" is not true or false");
	if (!json_object_get_boolean(v)) {
		r->kind = CONTROL_REPLY_ERROR;
		return fields_decode(obj, &replies[r->kind].t, &r->error, extra_ok, err, errlen);
	}
	r->kind = ops[op].reply;
	extra[1] = replies[r->kind].list;
	rc = fields_decode(obj, &replies[r->kind].t, &r->error, extra, err, errlen);
	reply_list(r, &count, &items);
	if (rc || !count)
		return rc;
	if (!json_object_object_get_ex(obj, replies[r->kind].list, &arr))
		return fail(err, errlen, "member \"%s\" is missing", replies[r->kind].list);
	if (!json_object_is_type(arr, json_type_array))
		return fail(err, errlen, "member \"%s\" is not an array", replies[r->kind].list);
	n = json_object_array_length(arr);
	if (n > CONTROL_LIST_MAX)
		return fail(err, errlen, "%zu entries in \"%s\", more than %u", n, replies[r->kind].list,
			    CONTROL_LIST_MAX);
	*items = calloc(n ? n : 1, replies[r->kind].elem_size);
	if (!*items)
		return -ENOMEM;
	*count = (uint32_t)n;
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(arr, i);

		if (!json_object_is_type(e, json_type_object))
			return fail(err, errlen, "entry %zu of \"%s\" is not an object", i, replies[r->kind].list);
		rc = fields_decode(e, &replies[r->kind].elem, (char *)*items + i * replies[r->kind].elem_size,
				   NULL, err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

int control_reply_decode(const char *text, size_t len, enum control_op op, struct control_reply *r,
			 char *err, size_t errlen)
{
	struct json_object *obj;
	int rc;

	memset(r, 0, sizeof(*r));
	if (!control_op_name(op))
		return -EINVAL;
	rc = object_parse(text, len, CONTROL_REPLY_LINE_MAX, &obj, err, errlen);
	if (rc)
		return rc;
	rc = reply_decode_object(obj, op, r, err, errlen);
	json_object_put(obj);
	return rc;
}

int control_link_encode(const struct control_link *m, char **line, size_t *len)
{
	if (!control_link_type_name(m->type))
		return -EINVAL;
	return tagged_encode("type", links[m->type].name, &links[m->type].t, m,
			     links[m->type].reply_op ? &m->reply : NULL, CONTROL_LINK_MAX, line, len);
}

int control_link_decode(const char *text, size_t len, struct control_link *m, char *err, size_t errlen)
{
	static const char *const extra[] = { "type", "reply", NULL };
	const char *names[LINKS_COUNT];
	struct json_object *obj, *reply;
	unsigned type;
	int rc;

	memset(m, 0, sizeof(*m));
	rc = object_parse(text, len, CONTROL_LINK_MAX, &obj, err, errlen);
	if (rc)
		return rc;
	for (unsigned i = 0; i < LINKS_COUNT; i++)
		names[i] = links[i].name;
	type = name_lookup(obj, "type", names, LINKS_COUNT, err, errlen);
	rc = type ? fields_decode(obj, &links[type].t, m, extra, err, errlen) : -EBADMSG;
	m->type = (enum control_link_type)type;
	if (!rc && json_object_object_get_ex(obj, "reply", &reply) != (links[type].reply_op != 0))
		rc = fail(err, errlen, links[type].reply_op ? "member \"reply\" is missing" :
			  "unknown member \"reply\"");
	if (!rc && links[type].reply_op) {
		if (!json_object_is_type(reply, json_type_object))
			rc = fail(err, errlen, "member \"reply\" is not an object");
		else
			rc = reply_decode_object(reply, links[type].reply_op, &m->reply, err, errlen);
		/* A progress message carries progress, the others never. */
		if (!rc && (type == CONTROL_LINK_PROGRESS) != (m->reply.kind == CONTROL_REPLY_PROGRESS))
			rc = fail(err, errlen, "a %s message carries a reply of the wrong kind", links[type].name);
	}
	json_object_put(obj);
	return rc;
}
