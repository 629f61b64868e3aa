#include "ternd_client.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "control_msg.h"
#include "units.h"

/* One request to the ternd on @control, its decoded answer in @r (released
 * by the caller) and its text in *@text (freed by the caller). */
static int ask(const char *control, enum control_op op, enum control_reply_kind want, struct control_reply *r,
	       char **text)
{
	struct control_request req = { .op = op, .device = -1 };
	char *line = NULL, err[256];
	size_t len = 0;
	int ret = control_request_encode(&req, &line, &len);

	*text = NULL;
	memset(r, 0, sizeof(*r));
	if (!ret) {
		line[len - 1] = 0;      /* control_request() ends the line */
		ret = control_request(control, line, 5000, text);
	}
	free(line);
	if (ret) {
		fprintf(stderr, "ternd: no ternd answers on %s (%s); is it running? start it with `ternd`\n",
			control, strerror(-ret));
		return 1;
	}
	ret = control_reply_decode(*text, strlen(*text), op, r, err, sizeof(err));
	if (ret || r->kind != want) {
		fprintf(stderr, "ternd: the ternd on %s %s: %s\n", control,
			ret ? "sent a malformed answer" : "refused", ret ? err : r->error);
		control_reply_release(r);
		free(*text);
		*text = NULL;
		return 1;
	}
	return 0;
}

int ternd_status_print(const char *control, bool json)
{
	struct control_reply r;
	char *text;

	if (ask(control, CONTROL_OP_STATUS, CONTROL_REPLY_STATUS, &r, &text))
		return 1;
	if (json) {
		fputs(text, stdout);
	} else {
		printf("%-32s %8s %6s %12s %10s %11s %s\n", "SESSION", "PID", "DEVICE", "MEMORY", "CALLS",
		       "ROUND_TRIPS", "STATE");
		for (uint32_t i = 0; i < r.status.session_count; i++) {
			const struct control_session_info *e = &r.status.sessions[i];
			char mem[32];

			units_size_format(e->memory, mem, sizeof(mem));
			printf("%-32s %8d %6d %12s %10llu %11llu %s\n", e->id, e->pid, e->device, mem,
			       (unsigned long long)e->calls, (unsigned long long)e->round_trips, e->state);
		}
	}
	control_reply_release(&r);
	free(text);
	return 0;
}

/* A label value as the text format wants it: \\, \" and \n escaped. */
static void label_put(const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			printf("\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", stdout);
		else
			putchar(*v);
	}
}

static void family(const char *name, const char *type, const char *help)
{
	printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u64(const char *name, uint64_t v)
{
	printf("%s %llu\n", name, (unsigned long long)v);
}

/* Every session's value of one family, labelled by session and device (not
 * its state: a series must not change its labels as the session lives). A
 * restored session's counters start again, as a restarted process's do. */
static void per_session(const struct control_status *st, const char *name, const char *type, const char *help,
			size_t offset)
{
	family(name, type, help);
	for (uint32_t i = 0; i < st->session_count; i++) {
		const struct control_session_info *e = &st->sessions[i];
		uint64_t v;

		memcpy(&v, (const char *)e + offset, sizeof(v));
		printf("%s{session=\"", name);
		label_put(e->id);
		printf("\",device=\"%d\"} %llu\n", e->device, (unsigned long long)v);
	}
}

int ternd_metrics_print(const char *control)
{
	static const char *const states[] = { "starting", "active", "suspended", "restoring" };
	struct control_reply st, sn;
	const struct control_counters *k;
	uint64_t stored = 0;
	char *text, *text2;

	if (ask(control, CONTROL_OP_STATUS, CONTROL_REPLY_STATUS, &st, &text))
		return 1;
	if (ask(control, CONTROL_OP_SNAPSHOTS, CONTROL_REPLY_SNAPSHOTS, &sn, &text2)) {
		control_reply_release(&st);
		free(text);
		return 1;
	}
	k = &st.status.counters;
	family("tern_sessions", "gauge", "Sessions by state.");
	for (size_t s = 0; s < sizeof(states) / sizeof(states[0]); s++) {
		unsigned n = 0;

		for (uint32_t i = 0; i < st.status.session_count; i++)
			n += !strcmp(st.status.sessions[i].state, states[s]);
		printf("tern_sessions{state=\"%s\"} %u\n", states[s], n);
	}
	family("tern_sessions_started_total", "counter", "Sessions started since ternd started.");
	sample_u64("tern_sessions_started_total", st.status.sessions_started);
	per_session(&st.status, "tern_session_memory_bytes", "gauge", "Device memory a session holds.",
		    offsetof(struct control_session_info, memory));
	family("tern_session_quota_bytes", "gauge", "Device memory a session may hold (0: no limit).");
	sample_u64("tern_session_quota_bytes", k->quota);
	per_session(&st.status, "tern_session_calls_total", "counter", "Driver calls a session made.",
		    offsetof(struct control_session_info, calls));
	per_session(&st.status, "tern_session_round_trips_total", "counter",
		    "Calls a session's guest waited for an answer to.",
		    offsetof(struct control_session_info, round_trips));
	family("tern_hellos_refused_total", "counter", "Connections refused before a worker was forked.");
	sample_u64("tern_hellos_refused_total", k->hellos_refused);
	family("tern_snapshots_total", "counter", "Snapshots taken, by result.");
	printf("tern_snapshots_total{result=\"ok\"} %llu\ntern_snapshots_total{result=\"failed\"} %llu\n",
	       (unsigned long long)k->snapshots_ok, (unsigned long long)k->snapshots_failed);
	family("tern_snapshot_seconds_total", "counter", "Time the successful snapshots took, start to durable.");
	printf("tern_snapshot_seconds_total %.6f\n", k->snapshot_ms / 1e3);
	family("tern_restores_total", "counter", "Restores into a new worker, by result.");
	printf("tern_restores_total{result=\"ok\"} %llu\ntern_restores_total{result=\"failed\"} %llu\n",
	       (unsigned long long)k->restores_ok, (unsigned long long)k->restores_failed);
	family("tern_restore_seconds_total", "counter", "Time the successful restores took in their workers.");
	printf("tern_restore_seconds_total %.6f\n", k->restore_ms / 1e3);
	family("tern_migrations_total", "counter", "Sessions migrated away (out) and in.");
	printf("tern_migrations_total{direction=\"out\"} %llu\ntern_migrations_total{direction=\"in\"} %llu\n",
	       (unsigned long long)k->migrations_out, (unsigned long long)k->migrations_in);
	for (uint32_t i = 0; i < sn.snapshots.count; i++)
		stored += sn.snapshots.snapshots[i].stored_bytes;
	family("tern_store_snapshots", "gauge", "Snapshots in the store.");
	printf("tern_store_snapshots %u\n", sn.snapshots.count);
	family("tern_store_bytes", "gauge", "Bytes the store holds: each snapshot's newly stored chunks, summed.");
	sample_u64("tern_store_bytes", stored);
	control_reply_release(&st);
	control_reply_release(&sn);
	free(text);
	free(text2);
	return 0;
}
