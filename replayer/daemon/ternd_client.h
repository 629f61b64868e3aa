/* `ternd status` and `ternd metrics`: a running ternd asked on its control
 * socket. Each returns the process's exit status (0, or 1 said on stderr).
 */
#ifndef TERN_TERND_CLIENT_H
#define TERN_TERND_CLIENT_H

#include <stdbool.h>

int ternd_status_print(const char *control, bool json);
/* Prometheus's text exposition format (docs/operations.md, "Metrics"). */
int ternd_metrics_print(const char *control);

#endif
