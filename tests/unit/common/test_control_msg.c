/* The control plane's messages (common/control_msg.h): every request, reply
 * and line-channel message round-trips, names with any bytes included, and
 * every kind of bad input is refused with a reason. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "control_msg.h"

/* Quotes, a newline, a backslash, other control characters, UTF-8. */
static const char odd[] = "a\"b\nc\\d\x01\x1f\x7f\t/ é ✓ 🙂";

static char err[256];

static int req_decode(const char *text, struct control_request *r)
{
	err[0] = 0;
	return control_request_decode(text, strlen(text), r, err, sizeof(err));
}

/* A request and what its refusal must say. */
struct refusal {
	const char *text;
	const char *why;
};

/* @text is refused with a reason that says @why (NULL: any reason). */
static void request_refused(const char *text, const char *why)
{
	struct control_request r;
	int rc = req_decode(text, &r);

	if (rc != -EBADMSG)
		fail_msg("'%s' gave %d", text, rc);
	assert_true(err[0]);
	if (why && !strstr(err, why))
		fail_msg("'%s': '%s' does not say '%s'", text, err, why);
}

static void request_round_trip(const struct control_request *in)
{
	struct control_request out;
	char *line = NULL;
	size_t len = 0;

	assert_int_equal(control_request_encode(in, &line, &len), 0);
	assert_int_equal(strlen(line), len);
	/* One line: the only '\n' is the last byte. */
	assert_ptr_equal(strchr(line, '\n'), line + len - 1);
	assert_int_equal(control_request_decode(line, len, &out, err, sizeof(err)), 0);
	assert_int_equal(out.op, in->op);
	assert_string_equal(out.session, in->session);
	assert_string_equal(out.snapshot, in->snapshot);
	assert_int_equal(out.incremental, in->incremental);
	assert_int_equal(out.device, in->device < 0 ? -1 : in->device);
	free(line);
}

static void test_request_round_trip(void **state)
{
	struct control_request r = { .op = CONTROL_OP_SNAPSHOT, .incremental = true, .device = -1 };

	(void)state;
	strcpy(r.session, odd);
	strcpy(r.snapshot, "snap-1");
	request_round_trip(&r);
	r.incremental = false;
	r.snapshot[0] = 0;
	request_round_trip(&r);
	request_round_trip(&(struct control_request){ .op = CONTROL_OP_STATUS, .device = -1 });
	request_round_trip(&(struct control_request){ .op = CONTROL_OP_SNAPSHOTS, .device = -1 });
	memset(&r, 0, sizeof(r));
	r.op = CONTROL_OP_SUSPEND;
	r.device = -1;
	strcpy(r.session, odd);
	request_round_trip(&r);
	r.incremental = true;           /* an incremental suspend (ckpt dump --incremental) */
	request_round_trip(&r);
	r.incremental = false;
	r.op = CONTROL_OP_RESUME;
	r.device = 3;
	request_round_trip(&r);
	memset(&r, 0, sizeof(r));
	r.op = CONTROL_OP_RESTORE;
	r.device = -1;
	memset(r.snapshot, 'x', CONTROL_NAME_MAX);
	request_round_trip(&r);
}

static void test_request_refused(void **state)
{
	static const struct refusal bad[] = {
		{ "", "empty" },
		{ "{\"op\":\"snapshot\",\"session\":\"s", "truncated" },
		{ "[1,2]", "not a JSON object" },
		{ "{\"op\":\"status\"} x", "malformed" },
		{ "{\"session\":\"s\"}", "\"op\" is missing" },
		{ "{\"op\":7}", "not a string" },
		{ "{\"op\":\"reboot\"}", "unknown op" },
		{ "{\"op\":\"status\",\"extra\":1}", "unknown member \"extra\"" },
		{ "{\"op\":\"snapshot\"}", "\"session\" is missing" },
		{ "{\"op\":\"snapshot\",\"session\":\"\"}", "\"session\" is empty" },
		{ "{\"op\":\"snapshot\",\"session\":5}", "not a string" },
		{ "{\"op\":\"snapshot\",\"session\":\"s\",\"incremental\":1}", "not true or false" },
		{ "{\"op\":\"suspend\",\"session\":\"s\",\"incremental\":\"yes\"}", "not true or false" },
		{ "{\"op\":\"snapshot\",\"session\":\"s\",\"device\":1}", "unknown member \"device\"" },
		{ "{\"op\":\"resume\",\"session\":\"s\",\"device\":1.5}", "not an integer" },
		{ "{\"op\":\"resume\",\"session\":\"s\",\"device\":4294967296}", "out of range" },
		{ "{\"op\":\"resume\",\"session\":\"a\\u0000b\"}", "NUL" },
		{ "{\"op\":\"resume\",\"session\":\"\xff\"}", "utf-8" },
		{ "{'op':'status'}", "malformed" },
		{ "{\"op\":\"status\",}", "malformed" },
		{ "{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":{\"g\":{\"h\":{\"i\":1}}}}}}}}}", NULL },
	};
	struct control_request r;
	char name[CONTROL_NAME_MAX + 64], text[CONTROL_NAME_MAX + 128], *big;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		request_refused(bad[i].text, bad[i].why);
	/* A raw NUL inside the text. */
	assert_int_equal(control_request_decode("{\"op\":\"st\0atus\"}", 16, &r, err, sizeof(err)), -EBADMSG);
	/* Names: CONTROL_NAME_MAX bytes fit, one more does not. */
	memset(name, 'n', CONTROL_NAME_MAX + 1);
	name[CONTROL_NAME_MAX + 1] = 0;
	snprintf(text, sizeof(text), "{\"op\":\"suspend\",\"session\":\"%s\"}", name);
	assert_int_equal(req_decode(text, &r), -EBADMSG);
	assert_non_null(strstr(err, "longer than 255 bytes"));
	name[CONTROL_NAME_MAX] = 0;
	snprintf(text, sizeof(text), "{\"op\":\"suspend\",\"session\":\"%s\"}", name);
	assert_int_equal(req_decode(text, &r), 0);
	/* Oversized input. */
	big = malloc(CONTROL_REQUEST_MAX + 2);
	memset(big, ' ', CONTROL_REQUEST_MAX + 1);
	big[CONTROL_REQUEST_MAX + 1] = 0;
	assert_int_equal(req_decode(big, &r), -EMSGSIZE);
	free(big);
}

static void test_encode_sanitizes(void **state)
{
	struct control_reply in = { .kind = CONTROL_REPLY_ERROR }, out;
	char *line = NULL;

	(void)state;
	strcpy(in.error, "bad \xff byte \xe2\x82 cut");
	assert_int_equal(control_reply_encode(&in, &line, NULL), 0);
	assert_int_equal(control_reply_decode(line, strlen(line), CONTROL_OP_STATUS, &out, err, sizeof(err)), 0);
	assert_int_equal(out.kind, CONTROL_REPLY_ERROR);
	assert_string_equal(out.error, "bad \xef\xbf\xbd byte \xef\xbf\xbd\xef\xbf\xbd cut");
	free(line);
	/* A string without its NUL is not encoded. */
	memset(in.error, 'x', sizeof(in.error));
	assert_int_equal(control_reply_encode(&in, &line, NULL), -EINVAL);
	assert_int_equal(control_request_encode(&(struct control_request){ .op = 99 }, &line, NULL), -EINVAL);
}

static void reply_round_trip(const struct control_reply *in, enum control_op op, struct control_reply *out)
{
	char *line = NULL, *again = NULL;
	size_t len = 0, len2 = 0;

	assert_int_equal(control_reply_encode(in, &line, &len), 0);
	assert_ptr_equal(strchr(line, '\n'), line + len - 1);
	if (control_reply_decode(line, len, op, out, err, sizeof(err)))
		fail_msg("%s: %s", line, err);
	assert_int_equal(out->kind, in->kind);
	assert_int_equal(control_reply_encode(out, &again, &len2), 0);
	assert_string_equal(line, again);
	free(line);
	free(again);
}

static void test_reply_round_trip(void **state)
{
	struct control_reply in = { .kind = CONTROL_REPLY_STATUS }, out;
	struct control_session_info sessions[2] = { 0 };
	struct control_snapshot_info snaps[1] = { 0 };

	(void)state;
	in.status.pid = 42;
	strcpy(in.status.backend, "sim");
	strcpy(in.status.state_dir, "/var/lib/tern");
	in.status.sessions_started = 9;
	in.status.session_count = 2;
	in.status.sessions = sessions;
	strcpy(sessions[0].id, odd);
	strcpy(sessions[0].state, "active");
	sessions[0].memory = UINT64_MAX;
	sessions[0].guest_pid = 4194303;        /* the application's pid, for ckpt dump */
	strcpy(sessions[1].id, "s2");
	strcpy(sessions[1].state, "suspended");
	sessions[1].device = 1;
	strcpy(sessions[1].snapshot, "snap");
	reply_round_trip(&in, CONTROL_OP_STATUS, &out);
	assert_int_equal(out.status.session_count, 2);
	assert_string_equal(out.status.sessions[0].id, odd);
	assert_true(out.status.sessions[0].memory == UINT64_MAX);
	assert_int_equal(out.status.sessions[0].guest_pid, 4194303);
	assert_string_equal(out.status.sessions[1].snapshot, "snap");
	control_reply_release(&out);
	{
		/* A status without guest_pid (an older ternd) decodes as not known;
		 * one of the wrong type is refused. */
		static const char old[] = "{\"ok\":true,\"pid\":1,\"backend\":\"sim\",\"state_dir\":\"/s\","
			"\"sessions_started\":1,\"sessions\":[{\"id\":\"a\",\"pid\":2,\"state\":\"active\","
			"\"device\":0,\"memory\":0,\"calls\":0,\"round_trips\":0,\"started\":0}]}";
		static const char bad[] = "{\"ok\":true,\"pid\":1,\"backend\":\"sim\",\"state_dir\":\"/s\","
			"\"sessions_started\":1,\"sessions\":[{\"id\":\"a\",\"pid\":2,\"guest_pid\":\"7\","
			"\"state\":\"active\",\"device\":0,\"memory\":0,\"calls\":0,\"round_trips\":0,\"started\":0}]}";
		char why[256];

		assert_int_equal(control_reply_decode(old, sizeof(old) - 1, CONTROL_OP_STATUS, &out, why, sizeof(why)), 0);
		assert_true(out.status.sessions[0].guest_pid <= 0);
		control_reply_release(&out);
		assert_int_equal(control_reply_decode(bad, sizeof(bad) - 1, CONTROL_OP_STATUS, &out, why, sizeof(why)),
				 -EBADMSG);
		control_reply_release(&out);
	}

	memset(&in, 0, sizeof(in));
	in.kind = CONTROL_REPLY_SNAPSHOTS;
	strcpy(in.snapshots.store, "/s");
	in.snapshots.count = 1;
	in.snapshots.snapshots = snaps;
	strcpy(snaps[0].name, "a");
	snaps[0].created_ns = 1700000000123456789ull;
	snaps[0].complete = true;
	reply_round_trip(&in, CONTROL_OP_SNAPSHOTS, &out);
	assert_true(out.snapshots.snapshots[0].created_ns == 1700000000123456789ull);
	assert_true(out.snapshots.snapshots[0].complete);
	control_reply_release(&out);

	memset(&in, 0, sizeof(in));
	in.kind = CONTROL_REPLY_SNAPSHOT;
	strcpy(in.snapshot.snapshot, "n");
	strcpy(in.snapshot.session, odd);
	strcpy(in.snapshot.hash, "gpu");
	in.snapshot.pause_ms = 1.25;
	in.snapshot.capture_ms = 0.75;
	in.snapshot.seq = 777;
	reply_round_trip(&in, CONTROL_OP_SUSPEND, &out);
	assert_true(out.snapshot.seq == 777 && out.snapshot.pause_ms == 1.25);
	assert_true(out.snapshot.capture_ms == 0.75);
	assert_string_equal(out.snapshot.session, odd);

	memset(&in, 0, sizeof(in));
	in.kind = CONTROL_REPLY_RESTORE;
	strcpy(in.restore.session, "s");
	in.restore.pid = 77;
	in.restore.fill_ms = 312.5;
	reply_round_trip(&in, CONTROL_OP_RESUME, &out);
	assert_int_equal(out.restore.pid, 77);
	assert_true(out.restore.fill_ms == 312.5);

	memset(&in, 0, sizeof(in));
	in.kind = CONTROL_REPLY_PROGRESS;
	in.progress.progress = 0.5;
	strcpy(in.progress.stage, "paused");
	reply_round_trip(&in, CONTROL_OP_SNAPSHOT, &out);
	assert_string_equal(out.progress.stage, "paused");

	control_reply_error(&in, "no session '%s'", odd);
	reply_round_trip(&in, CONTROL_OP_RESTORE, &out);
	assert_non_null(strstr(out.error, odd));
}

static void test_reply_refused(void **state)
{
	static const struct {
		enum control_op op;
		const char *text;
		const char *why;
	} bad[] = {
		{ CONTROL_OP_STATUS, "{\"snapshot\":\"x\"}", "neither \"ok\" nor \"progress\"" },
		{ CONTROL_OP_STATUS, "{\"ok\":\"yes\"}", "not true or false" },
		{ CONTROL_OP_STATUS, "{\"ok\":false}", "\"error\" is missing" },
		{ CONTROL_OP_STATUS, "{\"ok\":true,\"pid\":1,\"backend\":\"sim\",\"state_dir\":\"/\","
				     "\"sessions_started\":0}", "\"sessions\" is missing" },
		{ CONTROL_OP_STATUS, "{\"ok\":true,\"pid\":1,\"backend\":\"sim\",\"state_dir\":\"/\","
				     "\"sessions_started\":0,\"sessions\":[7]}", "not an object" },
		{ CONTROL_OP_STATUS, "{\"ok\":true,\"pid\":1,\"backend\":\"sim\",\"state_dir\":\"/\","
				     "\"sessions_started\":0,\"sessions\":{}}", "not an array" },
		{ CONTROL_OP_SNAPSHOTS, "{\"ok\":true,\"store\":\"/s\",\"snapshots\":[{\"name\":\"a\","
					"\"created_ns\":-1,\"logical_bytes\":0,\"stored_bytes\":0,\"complete\":true}]}",
		  "negative" },
		{ CONTROL_OP_RESTORE, "{\"ok\":true,\"session\":\"s\",\"pid\":1,\"device\":0,\"restore_ms\":1,"
				      "\"seq\":1,\"regions\":4294967296,\"bytes\":0}", "out of range" },
		{ CONTROL_OP_RESTORE, "{\"ok\":true,\"session\":\"s\",\"pid\":1,\"device\":0,\"restore_ms\":1,"
				      "\"seq\":1,\"regions\":1,\"bytes\":0,\"fill_ms\":\"fast\"}", "not a number" },
		{ CONTROL_OP_SNAPSHOT, "{\"ok\":true,\"snapshot\":\"n\",\"session\":\"s\",\"pause_ms\":1,"
				       "\"total_ms\":1,\"regions\":1,\"bytes\":0,\"stored_bytes\":0,\"chunks\":0,"
				       "\"zero_chunks\":0,\"unchanged_chunks\":0,\"new_chunks\":0,\"seq\":1,"
				       "\"hash\":\"gpu\",\"hash_ms\":1,\"shadowed_chunks\":0,\"direct_chunks\":0,"
				       "\"drain_ms\":1,\"capture_ms\":[1]}", "not a number" },
		{ CONTROL_OP_SNAPSHOT, "{\"progress\":\"half\"}", "not a number" },
		{ CONTROL_OP_SNAPSHOT, "{\"progress\":0.5,\"stage\":\"a very long stage name\"}", "longer than" },
	};
	struct control_reply r;
	char *text;
	size_t n = 0, cap = 16 * (CONTROL_LIST_MAX + 2);

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = control_reply_decode(bad[i].text, strlen(bad[i].text), bad[i].op, &r, err, sizeof(err));

		if (rc != -EBADMSG || !strstr(err, bad[i].why))
			fail_msg("'%s' gave %d '%s', not '%s'", bad[i].text, rc, err, bad[i].why);
		control_reply_release(&r);
	}
	/* More entries than CONTROL_LIST_MAX. */
	text = malloc(cap);
	n += (size_t)sprintf(text, "{\"ok\":true,\"store\":\"/s\",\"snapshots\":[");
	for (unsigned i = 0; i <= CONTROL_LIST_MAX; i++)
		n += (size_t)sprintf(text + n, "%s{}", i ? "," : "");
	n += (size_t)sprintf(text + n, "]}");
	assert_int_equal(control_reply_decode(text, n, CONTROL_OP_SNAPSHOTS, &r, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "more than"));
	control_reply_release(&r);
	free(text);
}

static void link_round_trip(const struct control_link *in, struct control_link *out)
{
	char *line = NULL;
	size_t len = 0;

	assert_int_equal(control_link_encode(in, &line, &len), 0);
	assert_true(len <= CONTROL_LINK_MAX);
	if (control_link_decode(line, len, out, err, sizeof(err)))
		fail_msg("%s: %s", line, err);
	assert_int_equal(out->type, in->type);
	free(line);
}

/* A migration's prepared worker: prefill and adopt, and the secrets' hex. */
static void test_link_prepared(void **state)
{
	static struct control_link in, out;
	uint8_t secret[32], back[32];
	char hex[65];
	const char *text;

	(void)state;
	for (unsigned i = 0; i < sizeof(secret); i++)
		secret[i] = (uint8_t)(i * 37 + 1);
	control_hex_put(hex, secret, sizeof(secret));
	assert_int_equal(strlen(hex), 64);
	assert_int_equal(control_hex_get(hex, back, sizeof(back)), 0);
	assert_memory_equal(secret, back, sizeof(secret));
	hex[5] = 'g';
	assert_int_equal(control_hex_get(hex, back, sizeof(back)), -EINVAL);
	hex[5] = 'A';   /* either case */
	assert_int_equal(control_hex_get(hex, back, sizeof(back)), 0);
	hex[63] = 0;
	assert_int_equal(control_hex_get(hex, back, sizeof(back)), -EINVAL);
	assert_int_equal(control_hex_get("", back, sizeof(back)), -EINVAL);

	in.type = CONTROL_LINK_PREFILL;
	strcpy(in.snapshot, "migrate-1-2-0");
	link_round_trip(&in, &out);
	assert_string_equal(out.snapshot, "migrate-1-2-0");
	memset(&in, 0, sizeof(in));
	in.type = CONTROL_LINK_ADOPT;
	strcpy(in.session, "uuid/s1");
	control_hex_put(in.secret, secret, sizeof(secret));
	control_hex_put(in.wire_secret, back, sizeof(back));
	in.has_owner_uid = true;
	in.owner_uid = UINT32_MAX;
	in.vm = true;
	in.length = 4200;
	link_round_trip(&in, &out);
	assert_string_equal(out.session, "uuid/s1");
	assert_string_equal(out.secret, in.secret);
	assert_string_equal(out.wire_secret, in.wire_secret);
	assert_true(out.has_owner_uid && out.vm);
	assert_true(out.owner_uid == UINT32_MAX && out.length == 4200);
	/* Every field is required; a length out of range is refused. */
	text = "{\"type\":\"adopt\",\"session\":\"s\",\"secret\":\"00\",\"wire_secret\":\"00\"}";
	assert_int_equal(control_link_decode(text, strlen(text), &out, err, sizeof(err)), -EBADMSG);
	text = "{\"type\":\"adopt\",\"session\":\"s\",\"secret\":\"00\",\"wire_secret\":\"00\","
	       "\"has_owner_uid\":false,\"owner_uid\":0,\"vm\":false,\"length\":-1}";
	assert_int_equal(control_link_decode(text, strlen(text), &out, err, sizeof(err)), -EBADMSG);
	text = "{\"type\":\"prefill\"}";
	assert_int_equal(control_link_decode(text, strlen(text), &out, err, sizeof(err)), -EBADMSG);
}

static void test_link(void **state)
{
	static struct control_link in, out;
	const char *text;

	(void)state;
	in.type = CONTROL_LINK_HELLO;
	strcpy(in.session, "s1");
	in.last_seq = UINT64_MAX;
	link_round_trip(&in, &out);
	assert_true(out.last_seq == UINT64_MAX);
	memset(&in, 0, sizeof(in));
	in.type = CONTROL_LINK_SNAPSHOT;
	strcpy(in.snapshot, "n");
	in.suspend = true;
	link_round_trip(&in, &out);
	assert_true(out.suspend && !out.parent[0]);
	in.type = CONTROL_LINK_RESTORE;
	in.suspend = false;
	in.device = 2;
	link_round_trip(&in, &out);
	assert_int_equal(out.device, 2);
	memset(&in, 0, sizeof(in));
	in.type = CONTROL_LINK_REFUSE;
	memset(in.reason, 'r', CONTROL_TEXT_MAX);
	link_round_trip(&in, &out);
	for (int t = CONTROL_LINK_NEW; t <= CONTROL_LINK_WAIT; t++) {
		memset(&in, 0, sizeof(in));
		in.type = (enum control_link_type)t;
		link_round_trip(&in, &out);
	}
	/* The worst a reply can be: an error text all control characters. */
	memset(&in, 0, sizeof(in));
	in.type = CONTROL_LINK_RESULT;
	in.reply.kind = CONTROL_REPLY_ERROR;
	memset(in.reply.error, 0x01, CONTROL_TEXT_MAX);
	link_round_trip(&in, &out);
	assert_int_equal(out.reply.kind, CONTROL_REPLY_ERROR);
	in.type = CONTROL_LINK_READY;
	memset(&in.reply, 0, sizeof(in.reply));
	in.reply.kind = CONTROL_REPLY_RESTORE;
	strcpy(in.reply.restore.session, "s1");
	link_round_trip(&in, &out);
	assert_string_equal(out.reply.restore.session, "s1");

	text = "{\"type\":\"progress\",\"reply\":{\"ok\":false,\"error\":\"x\"}}";
	assert_int_equal(control_link_decode(text, strlen(text), &out, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "wrong kind"));
	text = "{\"type\":\"result\"}";
	assert_int_equal(control_link_decode(text, strlen(text), &out, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "\"reply\" is missing"));
	text = "{\"type\":\"new\",\"reply\":{}}";
	assert_int_equal(control_link_decode(text, strlen(text), &out, err, sizeof(err)), -EBADMSG);
	text = "{\"type\":\"restore\",\"snapshot\":\"n\"}";
	assert_int_equal(control_link_decode(text, strlen(text), &out, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "\"device\" is missing"));
	text = "{\"type\":\"hello\",\"session\":\"s\",\"last_seq\":\"7\"}";
	assert_int_equal(control_link_decode(text, strlen(text), &out, err, sizeof(err)), -EBADMSG);
	assert_string_equal(control_link_type_name(CONTROL_LINK_WAIT), "wait");
	assert_null(control_link_type_name(0));
	assert_string_equal(control_op_name(CONTROL_OP_RESTORE), "restore");
}

/* The vm-* ops: each takes its own members and nothing else. */
static void test_vm_requests(void **state)
{
	static const struct refusal bad[] = {
		{ "{\"op\":\"vm-attach\",\"uuid\":\"u\"}", "\"name\" is missing" },
		{ "{\"op\":\"vm-attach\",\"name\":\"n\"}", "\"uuid\" is missing" },
		{ "{\"op\":\"vm-attach\",\"uuid\":\"\",\"name\":\"n\"}", "\"uuid\" is empty" },
		{ "{\"op\":\"vm-attach\",\"uuid\":\"0123456789abcdef0123456789abcdef01234\",\"name\":\"n\"}",
		  "longer than 36 bytes" },
		{ "{\"op\":\"vm-detach\",\"uuid\":\"u\",\"name\":\"n\"}", "unknown member \"name\"" },
		{ "{\"op\":\"vm-save\",\"uuid\":\"u\"}", "\"generation\" is missing" },
		{ "{\"op\":\"vm-save\",\"uuid\":\"u\",\"generation\":7}", "not a string" },
		{ "{\"op\":\"vm-save\",\"uuid\":\"u\",\"generation\":\"g\",\"check\":true}", "unknown member \"check\"" },
		{ "{\"op\":\"vm-restore\",\"uuid\":\"u\",\"generation\":\"g\",\"check\":\"no\"}", "not true or false" },
		{ "{\"op\":\"vm-drop\"}", "\"uuid\" is missing" },
		{ "{\"op\":\"vm-snapshot\",\"uuid\":\"u\"}", "unknown member \"uuid\"" },
		{ "{\"op\":\"vm-snapshot\",\"domain\":\"d\",\"session\":\"s\"}", "unknown member \"session\"" },
		{ "{\"op\":\"vm-restore\",\"uuid\":\"u\",\"generation\":\"g", "truncated" },
		{ "{\"op\":\"vm-\"}", "unknown op" },
		{ "{\"op\":\"vm-incoming\",\"uuid\":\"u\",\"name\":\"n\"}", "\"url\" is missing" },
		{ "{\"op\":\"vm-incoming\",\"uuid\":\"u\",\"url\":\"tcp://h:1\"}", "\"name\" is missing" },
		{ "{\"op\":\"vm-incoming\",\"uuid\":\"u\",\"name\":\"n\",\"url\":\"x\",\"generation\":\"g\"}",
		  "unknown member \"generation\"" },
		{ "{\"op\":\"vm-switch\",\"uuid\":\"u\"}", "\"generation\" is missing" },
		{ "{\"op\":\"vm-switch\",\"uuid\":\"u\",\"generation\":\"g\",\"incremental\":true}",
		  "unknown member \"incremental\"" },
		{ "{\"op\":\"vm-save\",\"uuid\":\"u\",\"generation\":\"g\",\"incremental\":1}", "not true or false" },
	};
	struct control_request in = { .op = CONTROL_OP_VM_RESTORE, .device = -1, .check = true }, out;
	char *line = NULL, text[600], gen[VM_GENERATION_MAX + 2];
	size_t len = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		request_refused(bad[i].text, bad[i].why);
	strcpy(in.uuid, "01234567-89ab-cdef-0123-456789abcdef");
	strcpy(in.generation, "00ff");
	assert_int_equal(control_request_encode(&in, &line, &len), 0);
	assert_int_equal(control_request_decode(line, len, &out, err, sizeof(err)), 0);
	assert_int_equal(out.op, CONTROL_OP_VM_RESTORE);
	assert_string_equal(out.uuid, in.uuid);
	assert_string_equal(out.generation, "00ff");
	assert_true(out.check);
	free(line);
	/* check is optional: false when missing. */
	assert_int_equal(req_decode("{\"op\":\"vm-restore\",\"uuid\":\"u\",\"generation\":\"g\"}", &out), 0);
	assert_false(out.check);
	in = (struct control_request){ .op = CONTROL_OP_VM_INCOMING, .device = -1 };
	strcpy(in.uuid, "01234567-89ab-cdef-0123-456789abcdef");
	strcpy(in.name, "guest");
	strcpy(in.url, "tcp://192.0.2.1:7700");
	assert_int_equal(control_request_encode(&in, &line, &len), 0);
	assert_int_equal(control_request_decode(line, len, &out, err, sizeof(err)), 0);
	assert_int_equal(out.op, CONTROL_OP_VM_INCOMING);
	assert_string_equal(out.url, in.url);
	assert_string_equal(out.name, "guest");
	free(line);
	assert_int_equal(req_decode("{\"op\":\"vm-snapshot\",\"domain\":\"d\",\"incremental\":true}", &out), 0);
	assert_true(out.incremental);
	in = (struct control_request){ .op = CONTROL_OP_VM_SNAPSHOT, .device = -1 };
	strcpy(in.domain, odd);
	assert_int_equal(control_request_encode(&in, &line, &len), 0);
	assert_int_equal(control_request_decode(line, len, &out, err, sizeof(err)), 0);
	assert_string_equal(out.domain, odd);
	assert_string_equal(out.snapshot, "");
	free(line);
	/* A generation of VM_GENERATION_MAX bytes fits, one more does not. */
	memset(gen, 'a', sizeof(gen) - 1);
	gen[sizeof(gen) - 1] = 0;
	snprintf(text, sizeof(text), "{\"op\":\"vm-save\",\"uuid\":\"u\",\"generation\":\"%s\"}", gen);
	assert_int_equal(req_decode(text, &out), -EBADMSG);
	gen[VM_GENERATION_MAX] = 0;
	snprintf(text, sizeof(text), "{\"op\":\"vm-save\",\"uuid\":\"u\",\"generation\":\"%s\"}", gen);
	assert_int_equal(req_decode(text, &out), 0);
}

/* A vm reply and its list of snapshots; status's domain fields. */
static void test_vm_replies(void **state)
{
	struct control_vm_snapshot snaps[2] = { { "u/a", "vm-a" }, { "u/b", "vm-b" } };
	struct control_session_info sessions[1] = { 0 };
	struct control_reply in = { .kind = CONTROL_REPLY_VM }, out;
	const char *text;

	(void)state;
	strcpy(in.vm.uuid, "01234567-89ab-cdef-0123-456789abcdef");
	strcpy(in.vm.name, "guest one");
	strcpy(in.vm.generation, "1f");
	in.vm.count = 2;
	in.vm.snapshots = snaps;
	reply_round_trip(&in, CONTROL_OP_VM_SAVE, &out);
	assert_int_equal(out.vm.count, 2);
	assert_string_equal(out.vm.snapshots[1].snapshot, "vm-b");
	assert_string_equal(out.vm.name, "guest one");
	control_reply_release(&out);
	in.vm.count = 0;
	in.vm.snapshots = NULL;
	strcpy(in.vm.path, "/run/tern/vm/x.sock");
	reply_round_trip(&in, CONTROL_OP_VM_ATTACH, &out);
	assert_string_equal(out.vm.path, "/run/tern/vm/x.sock");
	control_reply_release(&out);
	text = "{\"ok\":true,\"uuid\":\"u\",\"snapshots\":[{\"session\":\"u/a\"}]}";
	assert_int_equal(control_reply_decode(text, strlen(text), CONTROL_OP_VM_SAVE, &out, err, sizeof(err)),
			 -EBADMSG);
	assert_non_null(strstr(err, "\"snapshot\" is missing"));
	control_reply_release(&out);
	text = "{\"ok\":true,\"snapshots\":[]}";
	assert_int_equal(control_reply_decode(text, strlen(text), CONTROL_OP_VM_DROP, &out, err, sizeof(err)),
			 -EBADMSG);
	assert_non_null(strstr(err, "\"uuid\" is missing"));
	control_reply_release(&out);
	in = (struct control_reply){ .kind = CONTROL_REPLY_STATUS };
	strcpy(in.status.backend, "sim");
	strcpy(in.status.state_dir, "/s");
	in.status.session_count = 1;
	in.status.sessions = sessions;
	strcpy(sessions[0].id, "01234567-89ab-cdef-0123-456789abcdef/g");
	strcpy(sessions[0].state, "active");
	strcpy(sessions[0].domain_uuid, "01234567-89ab-cdef-0123-456789abcdef");
	strcpy(sessions[0].domain_name, "guest one");
	reply_round_trip(&in, CONTROL_OP_STATUS, &out);
	assert_string_equal(out.status.sessions[0].domain_name, "guest one");
	assert_string_equal(out.status.sessions[0].domain_uuid, sessions[0].domain_uuid);
	control_reply_release(&out);
}

/* The hold, held and release messages carry nothing. */
static void test_link_hold(void **state)
{
	static struct control_link in, out;
	const char *text = "{\"type\":\"hold\",\"session\":\"s\"}";

	(void)state;
	for (int t = CONTROL_LINK_HOLD; t <= CONTROL_LINK_RELEASE; t++) {
		in.type = (enum control_link_type)t;
		link_round_trip(&in, &out);
		control_link_release(&out);
	}
	assert_int_equal(control_link_decode(text, strlen(text), &out, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "unknown member \"session\""));
}

/* vm_id.h: the domain's names, well formed or refused. */
static void test_vm_ids(void **state)
{
	char name[VM_NAME_MAX + 2];

	(void)state;
	assert_true(vm_uuid_valid("01234567-89ab-cdef-0123-456789abcdef"));
	assert_false(vm_uuid_valid("01234567-89AB-cdef-0123-456789abcdef"));     /* uppercase */
	assert_false(vm_uuid_valid("0123456789ab-cdef-0123-456789abcdef--"));    /* dashes elsewhere */
	assert_false(vm_uuid_valid("01234567-89ab-cdef-0123-456789abcde"));      /* short */
	assert_false(vm_uuid_valid("01234567-89ab-cdef-0123-456789abcdef0"));    /* long */
	assert_false(vm_uuid_valid("01234567-89ab-cdef-0123-456789abcdeg"));
	assert_false(vm_uuid_valid(""));
	assert_true(vm_generation_valid("0"));
	assert_true(vm_generation_valid("deadbeef"));
	assert_false(vm_generation_valid(""));
	assert_false(vm_generation_valid("G1"));
	assert_false(vm_generation_valid("../x"));
	assert_true(vm_name_valid("guest-1 é"));
	assert_false(vm_name_valid("a/b"));
	assert_false(vm_name_valid("a\nb"));
	assert_false(vm_name_valid(""));
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	assert_false(vm_name_valid(name));
	name[VM_NAME_MAX] = 0;
	assert_true(vm_name_valid(name));
	assert_true(vm_session_id_valid("01234567-89ab-cdef-0123-456789abcdef/g1"));
	assert_false(vm_session_id_valid("01234567-89ab-cdef-0123-456789abcdef/"));
	assert_false(vm_session_id_valid("01234567-89ab-cdef-0123-456789abcdef/a/b"));
	assert_false(vm_session_id_valid("01234567-89ab-cdef-0123-456789abcdefg/a"));
	assert_false(vm_session_id_valid("plain"));
	assert_true(vm_session_of("01234567-89ab-cdef-0123-456789abcdef/g", "01234567-89ab-cdef-0123-456789abcdef"));
	assert_false(vm_session_of("01234567-89ab-cdef-0123-456789abcdef/g", "11234567-89ab-cdef-0123-456789abcdef"));
	assert_false(vm_session_of("01234567-89ab-cdef-0123-456789abcdefg", "01234567-89ab-cdef-0123-456789abcdef"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request_round_trip),
		cmocka_unit_test(test_request_refused),
		cmocka_unit_test(test_encode_sanitizes),
		cmocka_unit_test(test_reply_round_trip),
		cmocka_unit_test(test_reply_refused),
		cmocka_unit_test(test_link),
		cmocka_unit_test(test_link_prepared),
		cmocka_unit_test(test_vm_requests),
		cmocka_unit_test(test_vm_replies),
		cmocka_unit_test(test_link_hold),
		cmocka_unit_test(test_vm_ids),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
