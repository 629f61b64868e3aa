#include "metrics_text.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A label value as the text format wants it: \\, \" and \n escaped. */
static void label_put(FILE *out, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fprintf(out, "\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", out);
		else
			fputc(*v, out);
	}
}

static void family(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u64(FILE *out, const char *name, uint64_t v)
{
	fprintf(out, "%s %llu\n", name, (unsigned long long)v);
}

/* Every session's value of one family, labelled by session and device (not
 * its state: a series must not change its labels as the session lives). A
 * restored session's counters start again, as a restarted process's do. */
static void per_session(FILE *out, const struct control_status *st, const char *name, const char *type,
			const char *help, size_t offset)
{
	family(out, name, type, help);
	for (uint32_t i = 0; i < st->session_count; i++) {
		const struct control_session_info *e = &st->sessions[i];
		uint64_t v;

		memcpy(&v, (const char *)e + offset, sizeof(v));
		fprintf(out, "%s{session=\"", name);
		label_put(out, e->id);
		fprintf(out, "\",device=\"%d\"} %llu\n", e->device, (unsigned long long)v);
	}
}

int metrics_text_write(FILE *out, const struct control_status *st, const struct control_snapshots *sn)
{
	static const char *const states[] = { "starting", "active", "suspended", "restoring" };
	const struct control_counters *k = &st->counters;
	uint64_t stored = 0;

	family(out, "tern_sessions", "gauge", "Sessions by state.");
	for (size_t s = 0; s < sizeof(states) / sizeof(states[0]); s++) {
		unsigned n = 0;

		for (uint32_t i = 0; i < st->session_count; i++)
			n += !strcmp(st->sessions[i].state, states[s]);
		fprintf(out, "tern_sessions{state=\"%s\"} %u\n", states[s], n);
	}
	family(out, "tern_sessions_started_total", "counter", "Sessions started since ternd started.");
	sample_u64(out, "tern_sessions_started_total", st->sessions_started);
	per_session(out, st, "tern_session_memory_bytes", "gauge", "Device memory a session holds.",
		    offsetof(struct control_session_info, memory));
	family(out, "tern_session_quota_bytes", "gauge", "Device memory a session may hold (0: no limit).");
	sample_u64(out, "tern_session_quota_bytes", k->quota);
	per_session(out, st, "tern_session_calls_total", "counter", "Driver calls a session made.",
		    offsetof(struct control_session_info, calls));
	per_session(out, st, "tern_session_round_trips_total", "counter",
		    "Calls a session's guest waited for an answer to.",
		    offsetof(struct control_session_info, round_trips));
	family(out, "tern_hellos_refused_total", "counter", "Connections refused before a worker was forked.");
	sample_u64(out, "tern_hellos_refused_total", k->hellos_refused);
	family(out, "tern_snapshots_total", "counter", "Snapshots taken, by result.");
	fprintf(out, "tern_snapshots_total{result=\"ok\"} %llu\ntern_snapshots_total{result=\"failed\"} %llu\n",
		(unsigned long long)k->snapshots_ok, (unsigned long long)k->snapshots_failed);
	family(out, "tern_snapshot_seconds_total", "counter", "Time the successful snapshots took, start to durable.");
	fprintf(out, "tern_snapshot_seconds_total %.6f\n", k->snapshot_ms / 1e3);
	family(out, "tern_restores_total", "counter", "Restores into a new worker, by result.");
	fprintf(out, "tern_restores_total{result=\"ok\"} %llu\ntern_restores_total{result=\"failed\"} %llu\n",
		(unsigned long long)k->restores_ok, (unsigned long long)k->restores_failed);
	family(out, "tern_restore_seconds_total", "counter", "Time the successful restores took in their workers.");
	fprintf(out, "tern_restore_seconds_total %.6f\n", k->restore_ms / 1e3);
	family(out, "tern_migrations_total", "counter", "Sessions migrated away (out) and in.");
	fprintf(out, "tern_migrations_total{direction=\"out\"} %llu\ntern_migrations_total{direction=\"in\"} %llu\n",
		(unsigned long long)k->migrations_out, (unsigned long long)k->migrations_in);
	for (uint32_t i = 0; i < sn->count; i++)
		stored += sn->snapshots[i].stored_bytes;
	family(out, "tern_store_snapshots", "gauge", "Snapshots in the store.");
	fprintf(out, "tern_store_snapshots %u\n", sn->count);
	family(out, "tern_store_bytes", "gauge", "Bytes the store holds: each snapshot's newly stored chunks, summed.");
	sample_u64(out, "tern_store_bytes", stored);
	return ferror(out) ? -EIO : 0;
}
