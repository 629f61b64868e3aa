/* ckpt inspect: decode every part of a snapshot, offline (as CRIU's crit
 * decodes any image): the manifest, the journal copy (objects with their
 * creation arguments, regions, images, meta) and the chunk lists.
 *
 * The journal copy is verified against the manifest by snap_reader before a
 * byte of it is written out; only then is it opened with LMDB, which does
 * not defend against crafted files.  Object arguments are decoded per kind
 * (the executor's encodings, docs/ckpt.md); arguments of an unexpected size
 * or an unknown kind are shown as hex, never trusted. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "fatbin.h"
#include "snap_format.h"
#include "snap_reader.h"
#include "cl_saved.h"
#include "graph_desc.h"
#include "snap_store.h"
#include "tracker.h"
#include "le.h"

#define ARGS_HEX_MAX 64   /* undecodable arguments: show this many bytes */

/* The executor's object kinds (replayer/exec/handle_table.h; stored on disk, so
 * the numbers never change).  Listed in dependency (restore) order. */
static const struct {
	uint32_t kind;
	const char *name;
} object_kinds[] = {
	{ 1, "context" }, { 3, "library" }, { 2, "module" }, { 5, "kernel" },
	{ 4, "function" }, { 6, "stream" }, { 7, "event" }, { 8, "graph" }, { 9, "graph_exec" },
	{ 10, "mempool" }, { 11, "vmm_alloc" }, { 12, "array" }, { 13, "mipmap" }, { 14, "texobj" },
	{ 15, "surfobj" },
	/* OpenCL's (common/cl_saved.h) */
	{ 34, "cl_context" }, { 35, "cl_queue" }, { 36, "cl_mem" }, { 37, "cl_sampler" }, { 38, "cl_program" },
	{ 39, "cl_kernel" }, { 40, "cl_event" },
};

/* The executor's region kinds (replayer/exec/exec.h, enum exec_region_kind). */
static const char *region_kind_name(uint32_t kind)
{
	switch (kind) {
	case 0: return "device";
	case 1: return "graph";
	case 2: return "graph-freed";
	case 3: return "vmm-mapping";
	case 4: return "managed";
	default: return "other";
	}
}

#define NKINDS (sizeof(object_kinds) / sizeof(object_kinds[0]))

static const char *kind_name(uint32_t kind)
{
	for (size_t i = 0; i < NKINDS; i++)
		if (object_kinds[i].kind == kind)
			return object_kinds[i].name;
	return NULL;
}

static const char *const meta_names[] = {
	[TRACKER_META_FORMAT] = "format",
	[TRACKER_META_REPLY] = "last_reply",
	[TRACKER_META_DEVICE_INDEX] = "device_index",
	[TRACKER_META_DEVICE_UUID] = "device_uuid",
	[TRACKER_META_DRIVER_VERSION] = "driver_version",
	[TRACKER_META_PROTOCOL_VERSION] = "protocol_version",
	[TRACKER_META_SESSION_ID] = "session_id",
	[TRACKER_META_ARENA_BASE] = "arena_base",
	[TRACKER_META_ARENA_SIZE] = "arena_size",
};

static const char *meta_name(uint32_t key)
{
	if (key < sizeof(meta_names) / sizeof(meta_names[0]) && meta_names[key])
		return meta_names[key];
	return NULL;
}

static const char *image_format_name(uint32_t format)
{
	switch (format) {
	case CUIMAGE_FORMAT_FATBIN: return "fatbin";
	case CUIMAGE_FORMAT_WRAPPER: return "fatbin-wrapper";
	case CUIMAGE_FORMAT_ELF: return "cubin";
	case CUIMAGE_FORMAT_PTX: return "ptx";
	case GRAPH_DESC_IMAGE_FORMAT: return "graph";
	case 0x200: return "array";
	case CL_SAVED_IMAGE_FORMAT: return "cl-object";
	case CL_CONTENTS_IMAGE_FORMAT: return "cl-contents";
	default: return NULL;
	}
}

static void hex_format(const uint8_t *p, size_t n, char *out, size_t cap)
{
	size_t o = 0;

	out[0] = 0;
	for (size_t i = 0; i < n && o + 3 < cap; i++)
		o += (size_t)snprintf(out + o, cap - o, "%02x", p[i]);
	if (o + 3 < cap && n * 2 > o)
		snprintf(out + o, cap - o, "..");
}

static void uuid_format(const uint8_t u[16], char *out, size_t cap)
{
	snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
		 u[13], u[14], u[15]);
}

/* Guest-chosen bytes (kernel names, session ids) made safe for a terminal. */
static void text_escape(const void *p, size_t n, char *out, size_t cap)
{
	const unsigned char *s = p;
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		if (o + 8 >= cap) {
			snprintf(out + o, cap - o, "...");
			return;
		}
		if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\')
			out[o++] = (char)s[i];
		else
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", s[i]);
	}
	out[o] = 0;
}

/* Creation arguments decoded per kind; ok = false when the bytes are not
 * the encoding that kind uses. */
struct object_args {
	bool ok;
	bool has_device, has_flags, has_priority;
	uint32_t device, flags;
	int32_t priority;
	const uint8_t *hash;     /* 16 bytes */
	const uint8_t *contents; /* an OpenCL memory object's: 16 bytes */
	const uint8_t *name;
	uint32_t name_len;
	uint32_t settings;       /* records after the arguments (journal.md, "Settings") */
};

static struct object_args object_args_decode(const struct tracker_object *o)
{
	struct object_args a = { 0 };
	const uint8_t *p = o->args;
	uint32_t n = o->args_len;

	switch (o->kind) {
	case 1: /* context: u32 device, u32 flags */
		if (n == 8) {
			a.ok = a.has_device = a.has_flags = true;
			a.device = le32_get(p);
			a.flags = le32_get(p + 4);
		}
		break;
	case 2: /* module, library: the image's hash */
	case 3:
		if (n == 16) {
			a.ok = true;
			a.hash = p;
		}
		break;
	case 4: /* function, kernel: u32 length + name, then 8-byte settings */
	case 5:
		if (n >= 4 && le32_get(p) <= n - 4 && (n - 4 - le32_get(p)) % 8 == 0) {
			a.ok = true;
			a.name = p + 4;
			a.name_len = le32_get(p);
			a.settings = (n - 4 - a.name_len) / 8;
		}
		break;
	case 6: /* stream: u32 flags, i32 priority, then 72-byte attributes */
		if (n >= 8 && (n - 8) % 72 == 0) {
			a.ok = a.has_flags = a.has_priority = true;
			a.flags = le32_get(p);
			a.priority = (int32_t)le32_get(p + 4);
			a.settings = (n - 8) / 72;
		}
		break;
	case 7: /* event: u32 flags */
		if (n == 4) {
			a.ok = a.has_flags = true;
			a.flags = le32_get(p);
		}
		break;
	case 8: /* graph: its description's hash */
		if (n == 16) {
			a.ok = true;
			a.hash = p;
		}
		break;
	case 9: /* executable graph: hash, u64 flags, u64 origin graph */
		if (n == 32 && !le32_get(p + 20)) {
			a.ok = a.has_flags = true;
			a.hash = p;
			a.flags = le32_get(p + 16);
		}
		break;
	case 11: /* VMM allocation: u32 version 1, u32 guest references, u64 size, properties */
		if (n == 32 && le32_get(p) == 1) {
			a.ok = a.has_flags = true;
			a.flags = le32_get(p + 4);
		}
		break;
	case 34: case 35: case 36: case 37: case 38: case 39: case 40:
		/* OpenCL: its description's hash, its contents' (zero: none) */
		if (n == 32) {
			static const uint8_t zero[16];

			a.ok = true;
			a.hash = p;
			a.contents = memcmp(p + 16, zero, 16) ? p + 16 : NULL;
		}
		break;
	case 10: /* memory pool: u32 version 1, u32 flags, then its attributes (40 bytes) */
		if (n == 40 && le32_get(p) == 1) {
			a.ok = a.has_flags = true;
			a.flags = le32_get(p + 4);
		}
		break;
	}
	return a;
}

struct inspect {
	struct ckpt *c;
	struct json_writer w;
	struct tracker *t;
	/* journal cross-check against the chunk list */
	uint64_t journal_region_bytes;
};

static int object_print(void *arg, uint64_t handle, const struct tracker_object *o)
{
	struct inspect *in = arg;
	struct object_args a = object_args_decode(o);
	const char *kn = kind_name(o->kind);
	char buf[ARGS_HEX_MAX * 2 + 8], hex[40];

	if (in->c->json) {
		struct json_writer *w = &in->w;

		json_object_begin(w, NULL);
		json_u64_put(w, "handle", handle);
		json_u64_put(w, "kind", o->kind);
		if (kn)
			json_string_put(w, "kind_name", kn);
		else
			json_null_put(w, "kind_name");
		json_u64_put(w, "parent", o->parent);
		json_u64_put(w, "flags", o->flags);
		json_u64_put(w, "args_len", o->args_len);
		if (a.ok) {
			json_object_begin(w, "args");
			if (a.has_device)
				json_u64_put(w, "device", a.device);
			if (a.has_flags)
				json_u64_put(w, "flags", a.flags);
			if (a.has_priority)
				json_i64_put(w, "priority", a.priority);
			if (a.hash) {
				hex_format(a.hash, 16, hex, sizeof(hex));
				json_string_put(w, "image", hex);
			}
			if (a.contents) {
				hex_format(a.contents, 16, hex, sizeof(hex));
				json_string_put(w, "contents", hex);
			}
			if (a.name)
				json_bytes_put(w, "name", a.name, a.name_len);
			if (a.settings)
				json_u64_put(w, "settings", a.settings);
			json_object_end(w);
		} else {
			hex_format(o->args, o->args_len < ARGS_HEX_MAX ? o->args_len : ARGS_HEX_MAX,
				   buf, sizeof(buf));
			json_string_put(w, "args_hex", buf);
		}
		json_object_end(w);
		return 0;
	}
	if (a.ok && a.name) {
		text_escape(a.name, a.name_len, buf, sizeof(buf));
		if (a.settings)
			snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), ", %u settings", a.settings);
	} else if (a.ok && a.hash) {
		hex_format(a.hash, 16, hex, sizeof(hex));
		snprintf(buf, sizeof(buf), "image %s", hex);
	} else if (a.ok) {
		int n = 0;

		buf[0] = 0;
		if (a.has_device)
			n += snprintf(buf + n, sizeof(buf) - (size_t)n, "device %u, ", a.device);
		if (a.has_flags)
			n += snprintf(buf + n, sizeof(buf) - (size_t)n, "flags 0x%x, ", a.flags);
		if (a.has_priority)
			n += snprintf(buf + n, sizeof(buf) - (size_t)n, "priority %d, ", a.priority);
		if (a.settings)
			n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%u attributes, ", a.settings);
		if (n >= 2)
			buf[n - 2] = 0;  /* the last separator */
	} else if (o->args_len) {
		char h[ARGS_HEX_MAX * 2 + 4];

		hex_format(o->args, o->args_len < ARGS_HEX_MAX ? o->args_len : ARGS_HEX_MAX, h, sizeof(h));
		snprintf(buf, sizeof(buf), "%u bytes %.*s", o->args_len, (int)(sizeof(buf) - 20), h);
	} else {
		snprintf(buf, sizeof(buf), "-");
	}
	if (o->parent)
		snprintf(hex, sizeof(hex), "0x%016llx", (unsigned long long)o->parent);
	else
		snprintf(hex, sizeof(hex), "-");
	printf("    0x%016llx  %-9s  %-18s  0x%-4x  %s\n", (unsigned long long)handle,
	       kn ? kn : "?", hex, o->flags, buf);
	if (kn == NULL)
		printf("      (kind %u is unknown to this ckpt)\n", o->kind);
	return 0;
}

static int region_print(void *arg, uint64_t addr, const struct tracker_region *r)
{
	struct inspect *in = arg;
	char size[32];

	in->journal_region_bytes += r->size;
	if (in->c->json) {
		json_object_begin(&in->w, NULL);
		json_u64_put(&in->w, "addr", addr);
		json_u64_put(&in->w, "size", r->size);
		json_u64_put(&in->w, "kind", r->kind);
		json_string_put(&in->w, "kind_name", region_kind_name(r->kind));
		json_u64_put(&in->w, "flags", r->flags);
		json_u64_put(&in->w, "owner", r->owner);
		json_object_end(&in->w);
		return 0;
	}
	ckpt_size_format(r->size, size, sizeof(size));
	printf("    0x%016llx  %12s  %-8s  0x%-6x  0x%016llx\n", (unsigned long long)addr, size,
	       region_kind_name(r->kind), r->flags, (unsigned long long)r->owner);
	return 0;
}

static int image_print(void *arg, const uint8_t hash[TRACKER_HASH_SIZE],
		       const struct tracker_image *im, const void *bytes)
{
	struct inspect *in = arg;
	uint8_t h[TRACKER_HASH_SIZE];
	const char *fn = image_format_name(im->format);
	char hex[40], size[32];
	long nodes = -2;         /* not a graph */
	struct cl_saved cl;
	const char *cl_why = NULL;
	bool intact, cl_ok = false;

	/* The snapshot checksum covers the file; this checks the journal's own
	 * invariant that the key is the hash of the bytes. */
	tracker_image_hash(bytes, im->size, h);
	intact = !memcmp(h, hash, TRACKER_HASH_SIZE);
	hex_format(hash, TRACKER_HASH_SIZE, hex, sizeof(hex));
	/* A graph description: how many nodes, or that it does not decode. */
	if (im->format == GRAPH_DESC_IMAGE_FORMAT) {
		struct graph_desc d;

		nodes = graph_desc_decode(&d, bytes, im->size) ? -1 : (long)d.weight;
		graph_desc_release(&d);
	}
	/* An OpenCL object's description: its kind, references and requests. */
	if (im->format == CL_SAVED_IMAGE_FORMAT)
		cl_ok = !cl_saved_decode(bytes, im->size, &cl, &cl_why);
	if (in->c->json) {
		json_object_begin(&in->w, NULL);
		json_string_put(&in->w, "hash", hex);
		json_u64_put(&in->w, "format", im->format);
		if (fn)
			json_string_put(&in->w, "format_name", fn);
		else
			json_null_put(&in->w, "format_name");
		json_u64_put(&in->w, "size", im->size);
		json_u64_put(&in->w, "refs", im->refs);
		json_bool_put(&in->w, "hash_ok", intact);
		if (nodes >= 0)
			json_u64_put(&in->w, "graph_nodes", (uint64_t)nodes);
		else if (nodes == -1)
			json_bool_put(&in->w, "graph_ok", false);
		if (im->format == CL_SAVED_IMAGE_FORMAT) {
			json_bool_put(&in->w, "cl_ok", cl_ok);
			if (cl_ok) {
				json_string_put(&in->w, "cl_kind", cl_saved_kind_name(cl.kind));
				json_u64_put(&in->w, "cl_refs", cl.refs);
				json_u64_put(&in->w, "cl_requests", cl.count);
				json_u64_put(&in->w, "cl_contents", cl.size);
			} else {
				json_string_put(&in->w, "cl_error", cl_why ? cl_why : "");
			}
		}
		json_object_end(&in->w);
		if (cl_ok)
			cl_saved_release(&cl);
		return 0;
	}
	ckpt_size_format(im->size, size, sizeof(size));
	printf("    %s  %-14s  %10s  %6llu  %s%s\n", hex, fn ? fn : "?", size,
	       (unsigned long long)im->refs, intact ? "hash ok" : "HASH MISMATCH",
	       nodes == -1 ? ", DESCRIPTION DOES NOT DECODE" : "");
	if (nodes >= 0)
		printf("      graph of %ld nodes\n", nodes);
	if (cl_ok)
		printf("      OpenCL %s, %u references, %u requests%s\n", cl_saved_kind_name(cl.kind), cl.refs, cl.count,
		       cl.size ? ", with contents" : "");
	else if (im->format == CL_SAVED_IMAGE_FORMAT)
		printf("      OPENCL DESCRIPTION DOES NOT DECODE: %s\n", cl_why ? cl_why : "");
	if (cl_ok)
		cl_saved_release(&cl);
	return 0;
}

static int meta_print(void *arg, uint32_t key, const struct tracker_meta_value *v)
{
	struct inspect *in = arg;
	const char *name = meta_name(key);
	char text[160];

	if (in->c->json) {
		struct json_writer *w = &in->w;

		json_object_begin(w, NULL);
		json_u64_put(w, "key", key);
		if (name)
			json_string_put(w, "name", name);
		else
			json_null_put(w, "name");
		if (v->type == TRACKER_META_T_U64) {
			json_string_put(w, "type", "u64");
			json_u64_put(w, "value", v->u64);
		} else if (v->type == TRACKER_META_T_BYTES) {
			json_string_put(w, "type", "bytes");
			json_u64_put(w, "len", v->len);
			if (key == TRACKER_META_DEVICE_UUID && v->len == 16) {
				uuid_format(v->bytes, text, sizeof(text));
				json_string_put(w, "value", text);
			} else if (key == TRACKER_META_SESSION_ID) {
				json_bytes_put(w, "value", v->bytes, v->len);
			} else {
				hex_format(v->bytes, v->len < 64 ? v->len : 64, text, sizeof(text));
				json_string_put(w, "hex", text);
			}
		} else {
			json_string_put(w, "type", "reply");
			json_u64_put(w, "seq", v->u64);
			json_u64_put(w, "len", v->len);
		}
		json_object_end(w);
		return 0;
	}
	if (v->type == TRACKER_META_T_U64) {
		if (key == TRACKER_META_ARENA_BASE)
			snprintf(text, sizeof(text), "0x%llx", (unsigned long long)v->u64);
		else if (key == TRACKER_META_ARENA_SIZE)
			ckpt_size_format(v->u64, text, sizeof(text));
		else
			snprintf(text, sizeof(text), "%llu", (unsigned long long)v->u64);
	} else if (v->type == TRACKER_META_T_BYTES) {
		if (key == TRACKER_META_DEVICE_UUID && v->len == 16)
			uuid_format(v->bytes, text, sizeof(text));
		else if (key == TRACKER_META_SESSION_ID)
			text_escape(v->bytes, v->len, text, sizeof(text));
		else
			hex_format(v->bytes, v->len < 64 ? v->len : 64, text, sizeof(text));
	} else {
		snprintf(text, sizeof(text), "request %llu, reply of %u bytes",
			 (unsigned long long)v->u64, v->len);
	}
	printf("    %-6u  %-17s  %s\n", key, name ? name : "?", text);
	return 0;
}

/* Extract the verified journal copy to a temporary file and open it. */
static int journal_open(struct snap_reader *r, struct tracker **t, char *err, size_t cap)
{
	const char *tmp = getenv("TMPDIR");
	char path[4096];
	int fd, rc;

	snprintf(path, sizeof(path), "%s/ckpt-journal-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
	fd = mkstemp(path);
	if (fd < 0) {
		snprintf(err, cap, "cannot create a temporary file in %s: %s (set TMPDIR)",
			 tmp && tmp[0] ? tmp : "/tmp", strerror(errno));
		return -errno;
	}
	rc = snap_reader_journal_write(r, fd);
	if (rc) {
		snprintf(err, cap, "cannot extract the journal copy: %s", strerror(-rc));
		goto out_unlink;
	}
	rc = tracker_open(path, TRACKER_OPEN_RDONLY, t);
	if (rc)
		snprintf(err, cap, "the journal copy does not open as a journal: %s", strerror(-rc));
out_unlink:
	/* LMDB keeps its own descriptor: the name can go now. */
	unlink(path);
	close(fd);
	return rc;
}

static void manifest_print(struct inspect *in, const struct snap_manifest *m, const char *store)
{
	char uuid[64], created[64], a[32], b[32], d[32];
	struct json_writer *w = &in->w;

	uuid_format(m->device_uuid, uuid, sizeof(uuid));
	ckpt_time_format(m->created_ns, created, sizeof(created));
	if (in->c->json) {
		json_string_put(w, "store", store);
		json_object_begin(w, "manifest");
		json_string_put(w, "name", m->name);
		json_u64_put(w, "format_version", m->version);
		json_string_put(w, "session", m->session_id);
		json_string_put(w, "parent", m->parent);
		json_u64_put(w, "created_ns", m->created_ns);
		json_string_put(w, "device_name", m->device_name);
		json_string_put(w, "device_uuid", uuid);
		json_u64_put(w, "driver_version", m->driver_version);
		json_u64_put(w, "chunk_size", m->chunk_size);
		json_string_put(w, "codec", m->codec == SNAP_CODEC_ZSTD ? "zstd" :
				m->codec == SNAP_CODEC_RAW ? "raw" : "unknown");
		json_i64_put(w, "codec_level", m->codec_level);
		json_u64_put(w, "regions", m->region_count);
		json_u64_put(w, "chunks", m->chunk_count);
		json_u64_put(w, "zero_chunks", m->zero_chunks);
		json_u64_put(w, "new_chunks", m->new_chunks);
		json_u64_put(w, "logical_bytes", m->logical_bytes);
		json_u64_put(w, "new_stored_bytes", m->new_stored_bytes);
		json_u64_put(w, "ref_stored_bytes", m->ref_stored_bytes);
		json_u64_put(w, "journal_bytes", m->journal_bytes);
		json_u64_put(w, "chunks_file_bytes", m->chunks_bytes);
		if (m->ref_stored_bytes)
			json_double_put(w, "ratio", (double)m->logical_bytes / (double)m->ref_stored_bytes);
		else
			json_null_put(w, "ratio");
		json_object_end(w);
		return;
	}
	printf("snapshot %s (format %u) in %s\n", m->name, m->version, store);
	printf("  session      %s\n", m->session_id[0] ? m->session_id : "-");
	printf("  parent       %s\n", m->parent[0] ? m->parent : "- (full snapshot)");
	printf("  created      %s (%llu ns)\n", created, (unsigned long long)m->created_ns);
	printf("  device       %s, %s\n", m->device_name[0] ? m->device_name : "?", uuid);
	printf("  driver       %u.%u (%u)\n", m->driver_version / 1000, m->driver_version % 1000 / 10,
	       m->driver_version);
	ckpt_size_format(m->chunk_size, a, sizeof(a));
	printf("  chunks       %llu of %s, %llu zero; codec %s level %d\n",
	       (unsigned long long)m->chunk_count, a, (unsigned long long)m->zero_chunks,
	       m->codec == SNAP_CODEC_ZSTD ? "zstd" : m->codec == SNAP_CODEC_RAW ? "raw" : "unknown",
	       m->codec_level);
	ckpt_size_format(m->logical_bytes, a, sizeof(a));
	ckpt_size_format(m->ref_stored_bytes, b, sizeof(b));
	printf("  memory       %s in %llu regions\n", a, (unsigned long long)m->region_count);
	if (m->ref_stored_bytes)
		printf("  stored       %s referenced (%.2fx smaller than memory)\n", b,
		       (double)m->logical_bytes / (double)m->ref_stored_bytes);
	else
		printf("  stored       nothing (all chunks zero)\n");
	ckpt_size_format(m->new_stored_bytes, b, sizeof(b));
	printf("  new          %s in %llu chunks added to the store by this snapshot\n", b,
	       (unsigned long long)m->new_chunks);
	ckpt_size_format(m->journal_bytes, b, sizeof(b));
	ckpt_size_format(m->chunks_bytes, d, sizeof(d));
	printf("  files        journal %s, chunk list %s\n", b, d);
}

/* The journal section; returns 0 or -errno with @err set. */
static int journal_print(struct inspect *in, struct snap_reader *r, char *err, size_t cap)
{
	static const uint32_t order[] = { 1, 3, 2, 5, 4, 6, 7 };
	struct tracker_stats st;
	struct json_writer *w = &in->w;
	bool json = in->c->json;
	int rc;

	rc = journal_open(r, &in->t, err, cap);
	if (rc)
		return rc;
	rc = tracker_stats_get(in->t, &st);
	if (rc) {
		snprintf(err, cap, "journal statistics: %s", strerror(-rc));
		return rc;
	}
	if (json) {
		json_object_begin(w, "journal");
		json_u64_put(w, "objects_count", st.objects);
		json_u64_put(w, "regions_count", st.regions);
		json_u64_put(w, "region_bytes", st.region_bytes);
		json_u64_put(w, "images_count", st.images);
		json_u64_put(w, "image_bytes", st.image_bytes);
		json_u64_put(w, "meta_count", st.meta);
		json_array_begin(w, "objects");
	} else {
		char rb[32], ib[32];

		ckpt_size_format(st.region_bytes, rb, sizeof(rb));
		ckpt_size_format(st.image_bytes, ib, sizeof(ib));
		printf("\njournal: %llu objects, %llu regions (%s), %llu images (%s), %llu meta\n",
		       (unsigned long long)st.objects, (unsigned long long)st.regions, rb,
		       (unsigned long long)st.images, ib, (unsigned long long)st.meta);
		printf("  objects, in restore order\n    %-18s  %-9s  %-18s  %-6s  %s\n", "HANDLE",
		       "KIND", "PARENT", "FLAGS", "ARGUMENTS");
	}
	rc = tracker_object_foreach(in->t, order, sizeof(order) / sizeof(order[0]), object_print, in);
	if (json) {
		json_array_end(w);
		json_array_begin(w, "regions");
	} else {
		printf("  regions\n    %-18s  %12s  %-8s  %-8s  %s\n", "ADDRESS", "SIZE", "KIND", "FLAGS",
		       "OWNER");
	}
	if (!rc)
		rc = tracker_region_foreach(in->t, region_print, in);
	if (json) {
		json_array_end(w);
		json_array_begin(w, "images");
	} else {
		printf("  images\n    %-32s  %-14s  %10s  %6s  %s\n", "HASH", "FORMAT", "SIZE", "REFS", "CHECK");
	}
	if (!rc)
		rc = tracker_image_foreach(in->t, image_print, in);
	if (json) {
		json_array_end(w);
		json_array_begin(w, "meta");
	} else {
		printf("  meta\n    %-6s  %-17s  %s\n", "KEY", "NAME", "VALUE");
	}
	if (!rc)
		rc = tracker_meta_foreach(in->t, meta_print, in);
	if (json) {
		json_array_end(w);
		json_object_end(w);
	}
	if (rc)
		snprintf(err, cap, "journal records do not decode: %s", strerror(-rc));
	return rc;
}

/* Set of chunk hashes already met in this snapshot (open addressing; the
 * hashes are XXH3, so their first bytes index well). */
struct hash_set {
	const uint8_t **slots;
	uint64_t mask;
};

static int hash_set_init(struct hash_set *hs, uint64_t items)
{
	uint64_t n = 16;

	while (n < items * 2)
		n <<= 1;
	hs->slots = calloc(n, sizeof(*hs->slots));
	hs->mask = n - 1;
	return hs->slots ? 0 : -ENOMEM;
}

/* True if @h was new (and is now in the set). */
static bool hash_set_add(struct hash_set *hs, const uint8_t *h)
{
	uint64_t i;

	memcpy(&i, h, sizeof(i));
	for (i &= hs->mask; hs->slots[i]; i = (i + 1) & hs->mask)
		if (!memcmp(hs->slots[i], h, SNAP_HASH_BYTES))
			return false;
	hs->slots[i] = h;
	return true;
}

struct chunk_tally {
	uint64_t chunks, zero, stored, dedup, unchanged;
	uint64_t logical_bytes, stored_bytes;
};

static void tally_put(struct json_writer *w, const struct chunk_tally *t)
{
	json_u64_put(w, "chunks", t->chunks);
	json_u64_put(w, "zero", t->zero);
	json_u64_put(w, "stored", t->stored);
	json_u64_put(w, "dedup", t->dedup);
	json_u64_put(w, "unchanged", t->unchanged);
	json_u64_put(w, "logical_bytes", t->logical_bytes);
	json_u64_put(w, "stored_bytes", t->stored_bytes);
	if (t->stored_bytes)
		json_double_put(w, "ratio", (double)t->logical_bytes / (double)t->stored_bytes);
	else
		json_null_put(w, "ratio");
}

static void tally_print(const char *label, const struct chunk_tally *t)
{
	char lb[32], sb[32], ratio[32];

	ckpt_size_format(t->logical_bytes, lb, sizeof(lb));
	ckpt_size_format(t->stored_bytes, sb, sizeof(sb));
	if (t->stored_bytes)
		snprintf(ratio, sizeof(ratio), "%.2fx", (double)t->logical_bytes / (double)t->stored_bytes);
	else
		snprintf(ratio, sizeof(ratio), "-");
	printf("    %-18s  %10s  %8llu  %8llu  %8llu  %8llu  %9llu  %10s  %8s\n", label, lb,
	       (unsigned long long)t->chunks, (unsigned long long)t->zero, (unsigned long long)t->stored,
	       (unsigned long long)t->dedup, (unsigned long long)t->unchanged, sb, ratio);
}

/* Per region: zero chunks; unchanged (copied from the parent's list);
 * dedup (same bytes as a chunk met earlier in this snapshot); stored (the
 * rest).  stored_bytes counts each distinct chunk once, at its first use,
 * so the regions' stored_bytes add up to what the snapshot references. */
static int chunks_print(struct inspect *in, const struct snap_chunk_list *cl)
{
	struct chunk_tally total = { 0 };
	struct json_writer *w = &in->w;
	struct hash_set seen;
	char cs[32];

	if (hash_set_init(&seen, cl->chunk_count))
		return -ENOMEM;
	ckpt_size_format(cl->chunk_size, cs, sizeof(cs));
	if (in->c->json) {
		json_object_begin(w, "chunks");
		json_u64_put(w, "chunk_size", cl->chunk_size);
		json_array_begin(w, "regions");
	} else {
		printf("\nchunks (%s each)\n    %-18s  %10s  %8s  %8s  %8s  %8s  %9s  %10s  %8s\n", cs,
		       "REGION", "SIZE", "CHUNKS", "ZERO", "STORED", "DEDUP", "UNCHANGED", "ON DISK", "RATIO");
	}
	for (uint64_t i = 0; i < cl->region_count; i++) {
		const struct snap_region *reg = &cl->regions[i];
		struct chunk_tally t = { .chunks = reg->chunk_count, .logical_bytes = reg->size };
		char label[32];

		for (uint64_t k = 0; k < reg->chunk_count; k++) {
			const struct snap_chunk_ref *ref = &reg->chunks[k];
			bool first;

			if (ref->flags & SNAP_CHUNK_ZERO) {
				t.zero++;
				continue;
			}
			first = hash_set_add(&seen, ref->hash);
			if (first)
				t.stored_bytes += ref->stored_size;
			if (ref->flags & SNAP_CHUNK_FROM_PARENT)
				t.unchanged++;
			else if (first)
				t.stored++;
			else
				t.dedup++;
		}
		total.chunks += t.chunks;
		total.zero += t.zero;
		total.stored += t.stored;
		total.dedup += t.dedup;
		total.unchanged += t.unchanged;
		total.logical_bytes += t.logical_bytes;
		total.stored_bytes += t.stored_bytes;
		if (in->c->json) {
			json_object_begin(w, NULL);
			json_u64_put(w, "addr", reg->addr);
			json_u64_put(w, "size", reg->size);
			json_u64_put(w, "flags", reg->flags);
			tally_put(w, &t);
			json_object_end(w);
		} else {
			snprintf(label, sizeof(label), "0x%016llx", (unsigned long long)reg->addr);
			tally_print(label, &t);
		}
	}
	if (in->c->json) {
		json_array_end(w);
		json_object_begin(w, "total");
		tally_put(w, &total);
		json_object_end(w);
		json_object_end(w);
	} else {
		tally_print("total", &total);
	}
	free(seen.slots);
	return 0;
}

int cmd_inspect(struct ckpt *c)
{
	struct inspect in = { .c = c };
	struct snap_store *s;
	struct snap_reader *r;
	char path[4096], err[1024] = "";
	const char *name = c->args[0];
	int rc, jrc;

	if (ckpt_name_refuse(c, name))
		return CKPT_EXIT_USAGE;
	rc = ckpt_store_open(c, &s, path, sizeof(path));
	if (rc)
		return rc;
	rc = snap_reader_open(s, name, &r);
	if (rc) {
		rc = ckpt_store_fail(c, s, path, name, "inspect", rc);
		snap_store_close(s);
		return rc;
	}
	if (c->json)
		ckpt_json_begin(c, &in.w);
	manifest_print(&in, snap_reader_manifest(r), path);
	/* A damaged journal still leaves the manifest and chunks worth showing. */
	jrc = journal_print(&in, r, err, sizeof(err));
	if (jrc && !c->json)
		printf("\njournal: not shown (%s)\n", err);
	rc = chunks_print(&in, snap_reader_chunk_list(r));
	if (c->json) {
		json_bool_put(&in.w, "ok", !jrc && !rc);
		if (jrc)
			json_string_put(&in.w, "error", err);
		ckpt_json_end(c, &in.w);
	}
	tracker_close(in.t);
	snap_reader_close(r);
	snap_store_close(s);
	if (jrc) {
		if (jrc == -EBADMSG && !strstr(err, "decode"))
			return ckpt_fail(c, CKPT_EXIT_FAILED, "snapshot '%s': %s; `ckpt verify %s` checks the "
					 "whole snapshot", name, err, name);
		return ckpt_fail(c, CKPT_EXIT_FAILED, "snapshot '%s': %s", name, err);
	}
	if (rc)
		return ckpt_fail(c, CKPT_EXIT_FAILED, "out of memory");
	return CKPT_EXIT_OK;
}
