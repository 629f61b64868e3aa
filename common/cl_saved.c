/* The encodings of an OpenCL session's snapshot part (cl_saved.h;
 * docs/journal.md, "OpenCL objects"). */
#include "cl_saved.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "le.h"
#include "wire.h"
#include "wire_calls.h"

/* magic, version, kind, flags, refs, status, command type, context, queue,
 * size, profiling counters, count, reserved */
#define DESC_FIXED (4 + 2 + 2 + 4 + 4 + 4 + 4 + 8 + 8 + 8 + 8 * CL_SAVED_PROFILING + 4 + 4)
#define ENTRY_FIXED 12u
/* magic, version, reserved, kinds, devices, platform, serials */
#define SESSION_FIXED (4 + 2 + 2 + 4 + 4 + 8 + 8 * CL_SAVED_KINDS)
_Static_assert(DESC_FIXED == 96, "the description's fixed part is pinned by docs/journal.md");
_Static_assert(SESSION_FIXED == 96, "the session part's fixed part is pinned by docs/journal.md");

const char *cl_saved_kind_name(uint32_t kind)
{
	switch (kind) {
	case WIRE_HANDLE_CL_PLATFORM: return "platform";
	case WIRE_HANDLE_CL_DEVICE: return "device";
	case WIRE_HANDLE_CL_CONTEXT: return "context";
	case WIRE_HANDLE_CL_QUEUE: return "queue";
	case WIRE_HANDLE_CL_MEM: return "memory object";
	case WIRE_HANDLE_CL_SAMPLER: return "sampler";
	case WIRE_HANDLE_CL_PROGRAM: return "program";
	case WIRE_HANDLE_CL_KERNEL: return "kernel";
	case WIRE_HANDLE_CL_EVENT: return "event";
	default: return "object";
	}
}

int cl_saved_call_creates(uint32_t kind, uint32_t call)
{
	switch (kind) {
	case WIRE_HANDLE_CL_CONTEXT: return call == WIRE_CALL_CL_CONTEXT_CREATE;
	case WIRE_HANDLE_CL_QUEUE: return call == WIRE_CALL_CL_QUEUE_CREATE;
	case WIRE_HANDLE_CL_MEM:
		return call == WIRE_CALL_CL_BUFFER_CREATE || call == WIRE_CALL_CL_SUB_BUFFER_CREATE ||
		       call == WIRE_CALL_CL_IMAGE_CREATE;
	case WIRE_HANDLE_CL_SAMPLER: return call == WIRE_CALL_CL_SAMPLER_CREATE;
	case WIRE_HANDLE_CL_PROGRAM:
		return call == WIRE_CALL_CL_PROGRAM_CREATE_SOURCE || call == WIRE_CALL_CL_PROGRAM_CREATE_IL ||
		       call == WIRE_CALL_CL_PROGRAM_CREATE_BINARY || call == WIRE_CALL_CL_PROGRAM_CREATE_BUILTIN ||
		       call == WIRE_CALL_CL_PROGRAM_LINK;
	case WIRE_HANDLE_CL_KERNEL: return call == WIRE_CALL_CL_KERNEL_CREATE;
	case WIRE_HANDLE_CL_EVENT: return call == WIRE_CALL_CL_USER_EVENT_CREATE;
	default: return 0;
	}
}

int cl_saved_call_follows(uint32_t kind, uint32_t call)
{
	switch (kind) {
	case WIRE_HANDLE_CL_PROGRAM: return call == WIRE_CALL_CL_PROGRAM_BUILD || call == WIRE_CALL_CL_PROGRAM_COMPILE;
	case WIRE_HANDLE_CL_KERNEL: return call == WIRE_CALL_CL_KERNEL_SET_ARG;
	case WIRE_HANDLE_CL_EVENT: return call == WIRE_CALL_CL_USER_EVENT_SET_STATUS;
	default: return 0;
	}
}

/* The rules every description obeys, the encoder's and the decoder's. */
static const char *desc_check(const struct cl_saved *s)
{
	int event = s->kind == WIRE_HANDLE_CL_EVENT;

	if (s->kind < WIRE_HANDLE_CL_CONTEXT || s->kind > WIRE_HANDLE_CL_EVENT)
		return "not an object kind of OpenCL";
	if (s->flags & ~CL_SAVED_F_ALL)
		return "unknown flags";
	if ((s->flags & CL_SAVED_F_CONTENTS) && s->kind != WIRE_HANDLE_CL_MEM && !event)
		return "contents on an object that is no memory object or event";
	if (!(s->flags & CL_SAVED_F_CONTENTS) && s->size)
		return "a size without contents";
	if (!event && (s->flags & (CL_SAVED_F_FAILED | CL_SAVED_F_PROFILED | CL_SAVED_F_WAITED)))
		return "event flags on an object that is no event";
	if (!event && (s->status || s->command_type || s->context || s->queue))
		return "event fields on an object that is no event";
	for (unsigned i = 0; i < CL_SAVED_PROFILING; i++)
		if (s->profiling[i] && !(s->flags & CL_SAVED_F_PROFILED))
			return "profiling counters without the flag";
	if (s->count > CL_SAVED_ENTRIES_MAX)
		return "too many requests";
	if (!event && !s->count)
		return "no request creates it";
	if (!s->refs)
		return "no reference of the guest's";
	if (event) {
		int user = s->count && s->entries[0].call == WIRE_CALL_CL_USER_EVENT_CREATE;

		if ((s->flags & CL_SAVED_F_FAILED) && (s->count || s->status >= 0 || (s->flags & CL_SAVED_F_PROFILED)))
			return "a failed event with requests, profiling or a status that is no error";
		if ((s->flags & CL_SAVED_F_WAITED) && !user)
			return "a wait flag on an event that is no user event";
		if (!user && !(s->flags & CL_SAVED_F_FAILED) && s->status > 0)
			return "a command's event that had not completed";
	}
	for (uint32_t i = 0; i < s->count; i++) {
		const struct cl_saved_entry *e = &s->entries[i];

		if (e->len > CL_SAVED_ENTRY_MAX)
			return "a request too long";
		if (i == 0 ? !cl_saved_call_creates(s->kind, e->call) : !cl_saved_call_follows(s->kind, e->call))
			return i == 0 ? "its first request does not create an object of its kind"
				      : "a request that does not belong to an object of its kind";
	}
	return NULL;
}

int cl_saved_encode(const struct cl_saved *s, uint8_t **out, size_t *len)
{
	size_t n = DESC_FIXED;
	uint8_t *b, *p;

	if (desc_check(s))
		return -EINVAL;
	for (uint32_t i = 0; i < s->count; i++)
		n += ENTRY_FIXED + s->entries[i].len;
	b = malloc(n);
	if (!b)
		return -ENOMEM;
	le32_put(b, CL_SAVED_MAGIC);
	le16_put(b + 4, CL_SAVED_VERSION);
	le16_put(b + 6, (uint16_t)s->kind);
	le32_put(b + 8, s->flags);
	le32_put(b + 12, s->refs);
	le32_put(b + 16, (uint32_t)s->status);
	le32_put(b + 20, s->command_type);
	le64_put(b + 24, s->context);
	le64_put(b + 32, s->queue);
	le64_put(b + 40, s->size);
	for (unsigned i = 0; i < CL_SAVED_PROFILING; i++)
		le64_put(b + 48 + 8 * i, s->profiling[i]);
	le32_put(b + 88, s->count);
	le32_put(b + 92, 0);
	p = b + DESC_FIXED;
	for (uint32_t i = 0; i < s->count; i++) {
		le32_put(p, s->entries[i].call);
		le32_put(p + 4, s->entries[i].tag);
		le32_put(p + 8, s->entries[i].len);
		if (s->entries[i].len)
			memcpy(p + ENTRY_FIXED, s->entries[i].payload, s->entries[i].len);
		p += ENTRY_FIXED + s->entries[i].len;
	}
	*out = b;
	*len = n;
	return 0;
}

static int bad(const char **why, const char *what)
{
	if (why)
		*why = what;
	return -EBADMSG;
}

void cl_saved_release(struct cl_saved *s)
{
	free(s->entries);
	memset(s, 0, sizeof(*s));
}

/* The fixed part's length, the magic and the version both encodings start with. */
static int header_check(const uint8_t *buf, size_t len, size_t fixed, uint32_t magic, const char *not_magic,
			const char **why)
{
	if (len < fixed)
		return bad(why, "truncated");
	if (le32_get(buf) != magic)
		return bad(why, not_magic);
	if (le16_get(buf + 4) != CL_SAVED_VERSION) {
		if (why)
			*why = "a version this build does not know";
		return -EPROTONOSUPPORT;
	}
	return 0;
}

int cl_saved_decode(const uint8_t *buf, size_t len, struct cl_saved *s, const char **why)
{
	const char *rule;
	size_t at = DESC_FIXED;
	int ret;

	memset(s, 0, sizeof(*s));
	ret = header_check(buf, len, DESC_FIXED, CL_SAVED_MAGIC, "not an OpenCL object's description (magic)", why);
	if (ret)
		return ret;
	s->kind = le16_get(buf + 6);
	s->flags = le32_get(buf + 8);
	s->refs = le32_get(buf + 12);
	s->status = (int32_t)le32_get(buf + 16);
	s->command_type = le32_get(buf + 20);
	s->context = le64_get(buf + 24);
	s->queue = le64_get(buf + 32);
	s->size = le64_get(buf + 40);
	for (unsigned i = 0; i < CL_SAVED_PROFILING; i++)
		s->profiling[i] = le64_get(buf + 48 + 8 * i);
	s->count = le32_get(buf + 88);
	if (le32_get(buf + 92))
		return bad(why, "reserved field set");
	if (s->count > CL_SAVED_ENTRIES_MAX || s->count > (len - DESC_FIXED) / ENTRY_FIXED)
		return bad(why, "more requests than the bytes hold");
	s->entries = calloc(s->count ? s->count : 1, sizeof(*s->entries));
	if (!s->entries)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->count; i++) {
		struct cl_saved_entry *e = &s->entries[i];

		if (len - at < ENTRY_FIXED)
			goto truncated;
		e->call = le32_get(buf + at);
		e->tag = le32_get(buf + at + 4);
		e->len = le32_get(buf + at + 8);
		at += ENTRY_FIXED;
		if (e->len > len - at)
			goto truncated;
		e->payload = buf + at;
		at += e->len;
	}
	if (at != len) {
		cl_saved_release(s);
		return bad(why, "trailing bytes");
	}
	rule = desc_check(s);
	if (rule) {
		cl_saved_release(s);
		return bad(why, rule);
	}
	return 0;
truncated:
	cl_saved_release(s);
	return bad(why, "a request past the end");
}

int cl_saved_session_encode(const struct cl_saved_session *s, uint8_t **out, size_t *len)
{
	size_t n = SESSION_FIXED;
	uint8_t *b, *p;

	if (s->devices > CL_SAVED_DEVICES_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < s->devices; i++) {
		if (s->device[i].name_len > CL_SAVED_NAME_MAX || !s->device[i].handle)
			return -EINVAL;
		n += 12 + s->device[i].name_len;
	}
	b = malloc(n);
	if (!b)
		return -ENOMEM;
	le32_put(b, CL_SAVED_SESSION_MAGIC);
	le16_put(b + 4, CL_SAVED_VERSION);
	le16_put(b + 6, 0);
	le32_put(b + 8, CL_SAVED_KINDS);
	le32_put(b + 12, s->devices);
	le64_put(b + 16, s->platform);
	for (unsigned k = 0; k < CL_SAVED_KINDS; k++)
		le64_put(b + 24 + 8 * k, s->next_serial[k]);
	p = b + SESSION_FIXED;
	for (uint32_t i = 0; i < s->devices; i++) {
		le64_put(p, s->device[i].handle);
		le32_put(p + 8, s->device[i].name_len);
		memcpy(p + 12, s->device[i].name, s->device[i].name_len);
		p += 12 + s->device[i].name_len;
	}
	*out = b;
	*len = n;
	return 0;
}

int cl_saved_session_decode(const uint8_t *buf, size_t len, struct cl_saved_session *s, const char **why)
{
	size_t at = SESSION_FIXED;
	int ret;

	memset(s, 0, sizeof(*s));
	ret = header_check(buf, len, SESSION_FIXED, CL_SAVED_SESSION_MAGIC, "not an OpenCL session's part (magic)",
			   why);
	if (ret)
		return ret;
	if (le16_get(buf + 6))
		return bad(why, "reserved field set");
	if (le32_get(buf + 8) != CL_SAVED_KINDS)
		return bad(why, "another number of handle kinds");
	s->devices = le32_get(buf + 12);
	if (s->devices > CL_SAVED_DEVICES_MAX)
		return bad(why, "too many devices");
	s->platform = le64_get(buf + 16);
	for (unsigned k = 0; k < CL_SAVED_KINDS; k++)
		s->next_serial[k] = le64_get(buf + 24 + 8 * k);
	for (uint32_t i = 0; i < s->devices; i++) {
		struct cl_saved_device *d = &s->device[i];

		if (len - at < 12)
			return bad(why, "a device past the end");
		d->handle = le64_get(buf + at);
		d->name_len = le32_get(buf + at + 8);
		at += 12;
		if (!d->handle || d->name_len > CL_SAVED_NAME_MAX || d->name_len > len - at)
			return bad(why, "a device without a handle, or its name too long");
		d->name = (const char *)buf + at;
		at += d->name_len;
	}
	if (at != len)
		return bad(why, "trailing bytes");
	return 0;
}
