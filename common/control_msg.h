/* The control plane's messages: what ternd's control socket and ckpt say to
 * each other, and what a session worker and the supervisor say on their line
 * channel.  One protocol, one file: every message is a typed struct with one
 * field table (control_msg.c) from which both its encoder and its decoder
 * work, so the two cannot drift apart.
 *
 * Framing: every message is one JSON object on one line ending in '\n'
 * (strings are escaped, so a name never breaks the line).
 *   control socket: one request per connection; ternd answers zero or more
 *                   progress lines and one final reply, then closes;
 *   line channel:   struct control_link, in both directions.
 *
 * Decoders take hostile text: unknown, missing or wrongly typed members,
 * truncated or oversized input, invalid UTF-8, strings with NUL or longer
 * than their field are refused with -EBADMSG (or -EMSGSIZE for input over
 * the limit) and a message in @err; they never crash and never read past
 * @len.  Encoders replace invalid UTF-8 in what they are given by U+FFFD, so
 * their output always decodes.
 *
 * Host only: this is JSON through json-c, which the guest shim must not link
 * (common/meson.build keeps it out of common_guest_lib).
 *
 * Threading: no globals; every function is reentrant.
 */
#ifndef TERN_CONTROL_MSG_H
#define TERN_CONTROL_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vm_id.h"

struct json_object;

/* One constant per limit. */
#define CONTROL_NAME_MAX 255            /* session id or snapshot name, bytes (= SNAP_NAME_MAX) */
#define CONTROL_TEXT_MAX 1023           /* an error text, a refusal, a listener */
#define CONTROL_PATH_MAX 4199           /* the state directory (PATH_MAX), the store in it */
#define CONTROL_WORD_MAX 15             /* backend, session state, hash engine, progress stage */
#define CONTROL_REQUEST_MAX 8192        /* one request line, '\n' included */
#define CONTROL_SECRET_HEX 64           /* a 32-byte secret in hex (hostfn_chan.h) */
#define CONTROL_LINK_MAX 16384          /* one line-channel message, '\n' included */
#define CONTROL_REPLY_LINE_MAX (16u << 20) /* one reply line ('snapshots' of a large store) */
#define CONTROL_LIST_MAX 65536          /* sessions or snapshots in one reply */

/* Request operations; the wire carries the name ("op":"snapshot"). */
enum control_op {
	CONTROL_OP_STATUS = 1,
	CONTROL_OP_SNAPSHOTS,
	CONTROL_OP_SNAPSHOT,
	CONTROL_OP_SUSPEND,
	CONTROL_OP_RESUME,
	CONTROL_OP_RESTORE,
	/* A libvirt domain's lifecycle (docs/libvirt.md, "ternd's side"). */
	CONTROL_OP_VM_ATTACH,
	CONTROL_OP_VM_DETACH,
	CONTROL_OP_VM_SAVE,
	CONTROL_OP_VM_RESTORE,
	CONTROL_OP_VM_DROP,
	CONTROL_OP_VM_SNAPSHOT,
	/* A live migration's switch (docs/migration.md): the suspended session
	 * went to another ternd, whose guest transport is url. */
	CONTROL_OP_MIGRATED,
	/* A libvirt domain's live migration (docs/migration.md, "virsh
	 * migrate"): on the destination, a domain coming from the ternd at url;
	 * on the source, libvirt's switchover (the GPU state's stop and copy). */
	CONTROL_OP_VM_INCOMING,
	CONTROL_OP_VM_SWITCH,
	CONTROL_OP_LAST = CONTROL_OP_VM_SWITCH,
};

/* A request on the control socket.  Which members an op takes:
 *   status, snapshots: none
 *   snapshot: session; snapshot (optional: "" lets ternd name it); incremental
 *   suspend:  session; incremental
 *   resume:   session (a suspended session's id, or a snapshot's name); device
 *   restore:  snapshot; device
 *   vm-attach: uuid, name
 *   vm-detach, vm-drop: uuid
 *   vm-save:  uuid, generation; incremental (each session's snapshot on its latest)
 *   vm-restore: uuid, generation, check
 *   vm-snapshot: domain (a name or a uuid); snapshot (optional: a prefix); incremental
 *   migrated: session (suspended here), url (where its guest is to say hello)
 *   vm-incoming: uuid, name, url (the source ternd's --migrate-listen)
 *   vm-switch: uuid, generation (the one the source's state is saved under)
 * A member an op does not take is refused by the decoder.  device < 0: ternd's
 * default device (and not sent).  The decoder bounds the domain's strings;
 * whether they are well formed (vm_id.h) is ternd's to say. */
struct control_request {
	enum control_op op;
	char session[CONTROL_NAME_MAX + 1];
	char snapshot[CONTROL_NAME_MAX + 1];
	bool incremental;
	int32_t device;
	char uuid[VM_UUID_LEN + 1];
	char name[VM_NAME_MAX + 1];
	char domain[VM_NAME_MAX + 1];
	char generation[VM_GENERATION_MAX + 1];
	bool check;
	char url[CONTROL_TEXT_MAX + 1];
};

/* What the final reply to a request holds, besides "ok". */
enum control_reply_kind {
	CONTROL_REPLY_ERROR = 1,        /* "ok":false, error */
	CONTROL_REPLY_STATUS,           /* to status */
	CONTROL_REPLY_SNAPSHOTS,        /* to snapshots */
	CONTROL_REPLY_SNAPSHOT,         /* to snapshot and suspend */
	CONTROL_REPLY_RESTORE,          /* to resume and restore; also a worker's ready */
	CONTROL_REPLY_PROGRESS,         /* a progress line before the final reply */
	CONTROL_REPLY_VM,               /* to the vm-* ops */
	CONTROL_REPLY_MIGRATED,         /* to migrated */
};

struct control_session_info {
	char id[CONTROL_NAME_MAX + 1];
	int32_t pid;                            /* 0: no worker (suspended, restoring) */
	int32_t guest_pid;                      /* the application's, as its hello said; 0: not known */
	char state[CONTROL_WORD_MAX + 1];       /* starting, active, suspended, restoring */
	int32_t device;
	uint64_t memory;
	uint64_t calls;
	uint64_t round_trips;
	uint64_t started;                       /* seconds since the epoch, 0: none */
	char listener[CONTROL_TEXT_MAX + 1];
	char snapshot[CONTROL_NAME_MAX + 1];    /* latest durable, or the one of the plan */
	char domain_uuid[VM_UUID_LEN + 1];      /* "": not a libvirt domain's session */
	char domain_name[VM_NAME_MAX + 1];
};

/* What ternd counted since it started (ternd metrics; absent from an
 * older ternd: 0). */
struct control_counters {
	uint64_t quota;                         /* --quota, 0: none */
	uint64_t hellos_refused;
	uint64_t snapshots_ok, snapshots_failed;
	double snapshot_ms;                     /* the sum of the successful ones' total_ms */
	uint64_t restores_ok, restores_failed;
	double restore_ms;                      /* the sum of the successful ones' restore_ms */
	uint64_t migrations_out, migrations_in;
};

struct control_status {
	int32_t pid;
	char backend[CONTROL_WORD_MAX + 1];
	char state_dir[CONTROL_PATH_MAX + 1];
	uint64_t sessions_started;
	struct control_counters counters;
	uint32_t session_count;
	struct control_session_info *sessions;  /* owned by the reply */
};

struct control_snapshot_info {
	char name[CONTROL_NAME_MAX + 1];
	char parent[CONTROL_NAME_MAX + 1];      /* "": a full snapshot */
	char session[CONTROL_NAME_MAX + 1];
	uint64_t created_ns;
	uint64_t logical_bytes;
	uint64_t stored_bytes;
	bool complete;
};

struct control_snapshots {
	char store[CONTROL_PATH_MAX + 1];
	uint32_t count;
	struct control_snapshot_info *snapshots; /* owned by the reply */
};

struct control_snapshot_result {
	char snapshot[CONTROL_NAME_MAX + 1];
	char session[CONTROL_NAME_MAX + 1];
	char parent[CONTROL_NAME_MAX + 1];      /* "": a full snapshot */
	double pause_ms;
	double total_ms;
	uint32_t regions;
	uint64_t bytes;
	uint64_t stored_bytes;
	uint64_t chunks;
	uint64_t zero_chunks;
	uint64_t unchanged_chunks;
	uint64_t new_chunks;
	uint64_t seq;                           /* the guest request the snapshot holds */
	char hash[CONTROL_WORD_MAX + 1];        /* "gpu" or "cpu" */
	double hash_ms;
	uint64_t shadowed_chunks;
	uint64_t direct_chunks;
	double drain_ms;
	double capture_ms;                      /* of pause_ms, in the device copy (hash included) */
};

/* Also a fresh session's ready (snapshot "", the numbers 0). */
struct control_restore_result {
	char snapshot[CONTROL_NAME_MAX + 1];
	char session[CONTROL_NAME_MAX + 1];
	int32_t pid;
	int32_t device;
	double restore_ms;
	double fill_ms;                         /* of restore_ms, writing device memory */
	uint64_t seq;
	uint32_t regions;
	uint64_t bytes;
};

struct control_progress {
	double progress;                        /* 0..1 (not checked: a bar clamps it) */
	char stage[CONTROL_WORD_MAX + 1];
	char snapshot[CONTROL_NAME_MAX + 1];
	uint64_t bytes;                         /* bytes and total: both 0 when not known */
	uint64_t total;
};

/* One session of a domain and its snapshot. */
struct control_vm_snapshot {
	char session[CONTROL_NAME_MAX + 1];
	char snapshot[CONTROL_NAME_MAX + 1];
};

/* migrated: the session whose guest is now sent to url. */
struct control_migrated_result {
	char session[CONTROL_NAME_MAX + 1];
	char url[CONTROL_TEXT_MAX + 1];
};

/* What a vm-* op did to domain @uuid. */
struct control_vm_result {
	char uuid[VM_UUID_LEN + 1];
	char name[VM_NAME_MAX + 1];             /* "": not known */
	char path[CONTROL_PATH_MAX + 1];        /* vm-attach: the QEMU-facing socket */
	char generation[VM_GENERATION_MAX + 1]; /* vm-save, vm-restore */
	uint32_t count;
	struct control_vm_snapshot *snapshots;  /* owned by the reply */
};

/* One reply line.  Release with control_reply_release() (lists are
 * allocated by the decoder and by whoever fills them). */
struct control_reply {
	enum control_reply_kind kind;
	union {
		char error[CONTROL_TEXT_MAX + 1];
		struct control_status status;
		struct control_snapshots snapshots;
		struct control_snapshot_result snapshot;
		struct control_restore_result restore;
		struct control_progress progress;
		struct control_vm_result vm;
		struct control_migrated_result migrated;
	};
};

/* The worker <-> supervisor line channel (replayer/worker.h). */
enum control_link_type {
	/* worker -> supervisor */
	CONTROL_LINK_HELLO = 1,         /* session, last_seq: before answering the guest */
	CONTROL_LINK_READY,             /* reply (restore or error): the session is open */
	CONTROL_LINK_PROGRESS,          /* reply (progress) of a snapshot */
	CONTROL_LINK_RESULT,            /* reply (snapshot or error) */
	/* supervisor -> worker */
	CONTROL_LINK_NEW,               /* start the session fresh */
	CONTROL_LINK_WAIT,              /* suspended: wait for the next message */
	CONTROL_LINK_REFUSE,            /* reason */
	CONTROL_LINK_RESTORE,           /* snapshot, device */
	CONTROL_LINK_SNAPSHOT,          /* snapshot, parent ("": full), suspend */
	/* A consistent snapshot of several sessions (a domain's): every worker
	 * holds at a call boundary before any is copied, then each takes its
	 * snapshot and is released (or ends, when suspended). */
	CONTROL_LINK_HOLD,              /* supervisor -> worker: read no request until released */
	CONTROL_LINK_HELD,              /* worker -> supervisor: holding */
	CONTROL_LINK_RELEASE,           /* supervisor -> worker: serve requests again */
	/* supervisor -> worker, with a descriptor (SCM_RIGHTS): the guest's
	 * host-function connection that came through host_func_join, and the
	 * secret it presented (hex), for the worker to check */
	CONTROL_LINK_HOSTFN,
	/* A migration's prepared worker (docs/migration.md, "The destination's
	 * prepared worker"), forked before its guest comes: */
	CONTROL_LINK_PREFILL,           /* supervisor -> worker: snapshot, a round to bring the device memory to */
	CONTROL_LINK_PREFILLED,         /* worker -> supervisor: snapshot, the round it filled (or tried to) */
	/* supervisor -> worker, with the guest's connection (SCM_RIGHTS) and
	 * followed on the line by @length raw bytes, the hello's wire header
	 * and payload: serve it. session, secret (the session credential) and
	 * wire_secret (as the hello's reply carries it) in hex, owner_uid if
	 * has_owner_uid, vm (it came through a domain's channel) */
	CONTROL_LINK_ADOPT,
};

struct control_link {
	enum control_link_type type;
	char session[CONTROL_NAME_MAX + 1];
	uint64_t last_seq;
	char snapshot[CONTROL_NAME_MAX + 1];
	char parent[CONTROL_NAME_MAX + 1];
	int32_t device;
	bool suspend;
	char reason[CONTROL_TEXT_MAX + 1];
	char secret[CONTROL_SECRET_HEX + 1];
	char wire_secret[CONTROL_SECRET_HEX + 1];
	uint32_t owner_uid;
	bool has_owner_uid;
	bool vm;
	uint32_t length;
	struct control_reply reply;     /* ready, progress, result; released with the message */
};

/* A secret as the line channel carries it: @n bytes as 2n hex digits and a
 * NUL into @out; and back, 0 or -EINVAL unless @hex is exactly 2n digits. */
void control_hex_put(char *out, const uint8_t *bytes, size_t n);
int control_hex_get(const char *hex, uint8_t *out, size_t n);

/* Names of ops and kinds ("snapshot"), or NULL for a value out of range. */
const char *control_op_name(enum control_op op);
const char *control_link_type_name(enum control_link_type type);

/* Encode @req as one line ending in '\n' into *line (malloc'd, NUL-terminated,
 * the caller frees), its length without the NUL in *len (may be NULL).
 * 0, -EINVAL (bad op, a string with no room for its NUL), -EMSGSIZE (longer
 * than CONTROL_REQUEST_MAX), -ENOMEM. */
int control_request_encode(const struct control_request *req, char **line, size_t *len);
/* Decode @len bytes of @text (one request, its '\n' optional) into *req.
 * 0, -EBADMSG (why in @err, @errlen bytes with its NUL), -EMSGSIZE, -ENOMEM. */
int control_request_decode(const char *text, size_t len, struct control_request *req,
			   char *err, size_t errlen);

/* Encode a reply, as above (limit CONTROL_REPLY_LINE_MAX). */
int control_reply_encode(const struct control_reply *r, char **line, size_t *len);
/* Decode one reply line to a request of @op: a progress line, an error, or
 * the reply kind that @op expects.  *r is released by the caller, also after
 * an error. */
int control_reply_decode(const char *text, size_t len, enum control_op op, struct control_reply *r,
			 char *err, size_t errlen);
/* Free what a reply owns and zero it; accepts a zeroed reply. */
void control_reply_release(struct control_reply *r);
/* A reply as a json-c object (the caller puts it), for output that passes
 * ternd's fields on (ckpt --json); NULL without memory. */
struct json_object *control_reply_to_json(const struct control_reply *r);

/* A json-c string of the @len bytes at @s, invalid UTF-8 as U+FFFD (a NUL
 * is kept: json-c escapes it); NULL without memory.  For output built beside these messages. */
struct json_object *control_json_string_new(const char *s, size_t len);

/* Fill @r as an error reply: printf-style, cut at CONTROL_TEXT_MAX bytes. */
void control_reply_error(struct control_reply *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The line channel, as above (limit CONTROL_LINK_MAX). */
int control_link_encode(const struct control_link *m, char **line, size_t *len);
int control_link_decode(const char *text, size_t len, struct control_link *m, char *err, size_t errlen);
/* Free what m->reply owns. */
void control_link_release(struct control_link *m);

#endif
