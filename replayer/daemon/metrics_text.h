/* ternd's counters in Prometheus's text exposition format, version 0.0.4
 * (docs/operations.md, "Metrics"): the one generator, for `ternd metrics`
 * and for the supervisor's HTTP endpoint (metrics_http.h).
 */
#ifndef TERN_METRICS_TEXT_H
#define TERN_METRICS_TEXT_H

#include <stdio.h>

#include "control_msg.h"

/* What the HTTP endpoint says the text is. */
#define METRICS_TEXT_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Write the families of status @st and the store's list @sn to @out.
 * 0, or -EIO when @out failed. Any thread; reads only its arguments. */
int metrics_text_write(FILE *out, const struct control_status *st, const struct control_snapshots *sn);

#endif
