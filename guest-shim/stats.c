/* What the session cost, for TERN_STATS (docs/operations.md): 1 logs the
 * totals at exit; 2 adds a table with a row per driver entry point the
 * application called: its calls, how many of them waited for a reply (round
 * trips), the requests it sent without waiting (deferred) and the calls
 * answered without any request (local).
 *
 * Every entry point begins with SHIM_ENTRY() (shim.h), which names the
 * outermost one on the calling thread; the RPC layer charges its requests
 * to it. Entry points the shim calls itself (cuCtxGetFlags asking
 * cuDevicePrimaryCtxGetState) are the caller's work, not calls of their own.
 * Requests made outside any entry point (cudart's export tables, the shim's
 * own threads) are charged to one row of their own. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

bool shim_stats_by_entry;

/* Every entry point called so far, pushed at its first counted call. */
static struct shim_entry_count *entries;
static struct shim_entry_count outside = { .name = "(outside entry points)" };

static __thread struct {
	struct shim_entry_count *current;       /* the outermost entry point, or NULL */
	unsigned depth;
	uint64_t sends;                         /* requests this thread made */
} entry_tls;

static void entry_list(struct shim_entry_count *e)
{
	if (__atomic_exchange_n(&e->listed, 1, __ATOMIC_ACQ_REL))
		return;
	e->next = __atomic_load_n(&entries, __ATOMIC_ACQUIRE);
	while (!__atomic_compare_exchange_n(&entries, &e->next, e, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
}

struct shim_entry_scope stats_entry_enter_counted(struct shim_entry_count *e)
{
	if (entry_tls.depth++)
		return (struct shim_entry_scope){ .nested = true };
	entry_list(e);
	__atomic_add_fetch(&e->calls, 1, __ATOMIC_RELAXED);
	entry_tls.current = e;
	return (struct shim_entry_scope){ .entry = e, .sends_before = entry_tls.sends };
}

void stats_entry_leave_counted(struct shim_entry_scope *s)
{
	entry_tls.depth--;
	if (s->nested)
		return;
	if (entry_tls.sends == s->sends_before)
		__atomic_add_fetch(&s->entry->local, 1, __ATOMIC_RELAXED);
	entry_tls.current = NULL;
}

static struct shim_entry_count *entry_charged(void)
{
	entry_tls.sends++;
	if (entry_tls.current)
		return entry_tls.current;
	entry_list(&outside);
	return &outside;
}

void stats_round_trip(void)
{
	if (shim_stats_by_entry)
		__atomic_add_fetch(&entry_charged()->round_trips, 1, __ATOMIC_RELAXED);
}

void stats_deferred(void)
{
	if (shim_stats_by_entry)
		__atomic_add_fetch(&entry_charged()->deferred, 1, __ATOMIC_RELAXED);
}

static int entry_cmp(const void *a, const void *b)
{
	const struct shim_entry_count *x = *(const struct shim_entry_count *const *)a;
	const struct shim_entry_count *y = *(const struct shim_entry_count *const *)b;

	if (x->round_trips != y->round_trips)
		return x->round_trips < y->round_trips ? 1 : -1;
	if (x->calls != y->calls)
		return x->calls < y->calls ? 1 : -1;
	return strcmp(x->name, y->name);
}

/* The table, most round trips first. The format is read by
 * tests/cuda/local_answers.c: keep the columns. */
static void stats_table_report(void)
{
	struct shim_entry_count **rows, *e;
	uint64_t calls = 0, trips = 0, deferred = 0, local = 0, lookups = 0, lookup_trips = 0;
	size_t n = 0, i = 0;

	for (e = __atomic_load_n(&entries, __ATOMIC_ACQUIRE); e; e = e->next)
		n++;
	rows = calloc(n ? n : 1, sizeof(*rows));
	if (!rows)
		return;
	for (e = __atomic_load_n(&entries, __ATOMIC_ACQUIRE); e && i < n; e = e->next)
		rows[i++] = e;
	qsort(rows, i, sizeof(*rows), entry_cmp);
	pr_warn("%-44s %10s %12s %10s %10s", "entry point", "calls", "round-trips", "deferred", "local");
	for (size_t k = 0; k < i; k++) {
		e = rows[k];
		pr_warn("%-44s %10llu %12llu %10llu %10llu", e->name, (unsigned long long)e->calls,
			(unsigned long long)e->round_trips, (unsigned long long)e->deferred,
			(unsigned long long)e->local);
		calls += e->calls;
		trips += e->round_trips;
		deferred += e->deferred;
		local += e->local;
		if (!strncmp(e->name, "cuGetProcAddress", 16)) {
			lookups += e->calls;
			lookup_trips += e->round_trips;
		}
	}
	pr_warn("%-44s %10llu %12llu %10llu %10llu", "total", (unsigned long long)calls,
		(unsigned long long)trips, (unsigned long long)deferred, (unsigned long long)local);
	/* cudart looks up every entry point once: the calls that do work are the others. */
	pr_warn("round trips: %.1f%% of %llu calls, %.1f%% of the %llu other than cuGetProcAddress",
		calls ? 100.0 * (double)trips / (double)calls : 0.0, (unsigned long long)calls,
		calls - lookups ? 100.0 * (double)(trips - lookup_trips) / (double)(calls - lookups) : 0.0,
		(unsigned long long)(calls - lookups));
	free(rows);
}

static void stats_report(void)
{
	const struct shim_process *p = shim_process();

	pr_warn("session %s: %llu calls, %llu round trips, %llu batches of deferred calls", p->who.session,
		(unsigned long long)p->stats.calls, (unsigned long long)p->stats.round_trips,
		(unsigned long long)p->stats.batches);
	if (shim_stats_by_entry)
		stats_table_report();
}

void stats_configure(const char *level)
{
	if (!level || (strcmp(level, "1") && strcmp(level, "2")))
		return;
	shim_stats_by_entry = !strcmp(level, "2");
	atexit(stats_report);
}
