/* Logging for every tern process: ternd, its workers, ckpt and the guest shim.
 *
 * One sink per process, set once by log_open() before threads start; after that
 * log_msg() may be called from any thread. Messages go to a file descriptor,
 * never to the application's stdout (the shim passes stderr or TERN_LOG_FILE).
 *
 * Under systemd, when that descriptor is the journal's stream (JOURNAL_STREAM),
 * lines carry the level as a "<N>" syslog priority and no time of their own.
 *
 * Each .c file defines LOG_PREFIX before including this header, so that a line
 * says where it came from:  "tern[1234] worker: session s1: cuInit failed".
 */
#ifndef TERN_LOG_H
#define TERN_LOG_H

#include <stdarg.h>

#ifndef LOG_PREFIX
#define LOG_PREFIX ""
#endif

enum log_level {
	LOG_ERR = 0,
	LOG_WARN = 1,
	LOG_INFO = 2,
	LOG_DEBUG = 3,
};

/* Name the process and pick where lines go and how verbose they are.
 * @ident: short program name ("ternd", "libcuda"); copied.
 * @fd: destination, -1 for stderr.  The fd is not closed by the logger. */
void log_open(const char *ident, enum log_level level, int fd);

/* Parse "error", "warn", "info", "debug" or a digit 0-3; -EINVAL if neither. */
int log_level_parse(const char *text);

enum log_level log_level_get(void);

__attribute__((format(printf, 3, 4)))
void log_msg(enum log_level level, const char *prefix, const char *fmt, ...);

#define pr_err(...)   log_msg(LOG_ERR, LOG_PREFIX, __VA_ARGS__)
#define pr_warn(...)  log_msg(LOG_WARN, LOG_PREFIX, __VA_ARGS__)
#define pr_info(...)  log_msg(LOG_INFO, LOG_PREFIX, __VA_ARGS__)
#define pr_debug(...) log_msg(LOG_DEBUG, LOG_PREFIX, __VA_ARGS__)

#endif
