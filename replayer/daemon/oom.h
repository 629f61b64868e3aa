/* The OOM killer's order among ternd's processes (docs/operations.md,
 * "Memory pressure"). Linux takes the process with the highest
 * oom_score (its memory in thousandths of RAM plus swap, plus
 * oom_score_adj); these values put ternd last and a session's worker just
 * before it, and a child that holds nothing first.
 */
#ifndef TERN_OOM_H
#define TERN_OOM_H

/* The supervisor: every session's control, the IPC table, the restores. */
#define OOM_ADJ_SUPERVISOR (-999)
/* A worker from its hello on: it holds a session's live GPU state, which
 * its death loses back to the latest snapshot. */
#define OOM_ADJ_SESSION (-900)
/* A child that holds nothing to lose: a restore check, a worker until its
 * session is open. Raising is always allowed. */
#define OOM_ADJ_NOTHING_HELD 500

/* Write @value to /proc/self/oom_score_adj. Below 0 needs CAP_SYS_RESOURCE:
 * without it the process goes as low as it may, 0, and a warning is logged.
 * 0 or -errno (the value not set). */
int oom_score_adj_set(int value);

#endif
