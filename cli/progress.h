/* A progress bar on a terminal: one line on stderr, redrawn in place.
 * Disabled (every call a no-op) when stderr is not a terminal or the output
 * is JSON, so logs and pipes never see carriage returns.
 * Single-threaded. */
#ifndef TERN_CLI_PROGRESS_H
#define TERN_CLI_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "control_msg.h"

struct progress {
	FILE *f;
	bool enabled;
	bool drawn;          /* a bar is on the line now */
	const char *label;   /* "snapshot", "restore" ... */
};

/* @enabled: the caller's decision (isatty(stderr) and not --json). */
void progress_init(struct progress *p, FILE *f, bool enabled, const char *label);
/* Draw from a progress line of ternd; bytes and total only when both are known. */
void progress_line_draw(struct progress *p, const struct control_progress *line);
/* Draw @fraction (clamped to 0..1) with an optional stage and byte counts
 * (@total 0: none). */
void progress_draw(struct progress *p, double fraction, const char *stage,
		   uint64_t bytes, uint64_t total);
/* Erase the bar so the next output starts on a clean line. */
void progress_clear(struct progress *p);

#endif
