#include "log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct {
	char ident[32];
	enum log_level level;
	int fd;
	bool journal;
} log_sink = { "tern", LOG_WARN, -1, false };

/* systemd names the stream it connected to the journal in JOURNAL_STREAM
 * ("DEVICE:INODE", systemd.exec(5)); a file, a pipe of our own or an
 * inherited descriptor that is not that stream keeps the plain format. */
static bool fd_is_journal(int fd)
{
	const char *env = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char *end;

	if (!env || *env < '0' || *env > '9')
		return false;
	errno = 0;
	dev = strtoull(env, &end, 10);
	if (errno || *end != ':' || end[1] < '0' || end[1] > '9')
		return false;
	ino = strtoull(end + 1, &end, 10);
	if (errno || *end || fstat(fd, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_open(const char *ident, enum log_level level, int fd)
{
	int saved_errno = errno;

	snprintf(log_sink.ident, sizeof(log_sink.ident), "%s", ident ? ident : "tern");
	log_sink.level = level;
	log_sink.fd = fd;
	log_sink.journal = fd_is_journal(fd >= 0 ? fd : STDERR_FILENO);
	errno = saved_errno;
}

int log_level_parse(const char *text)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	if (!text || !*text)
		return -EINVAL;
	if (text[0] >= '0' && text[0] <= '3' && !text[1])
		return text[0] - '0';
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(text, names[i]))
			return (int)i;
	if (!strcasecmp(text, "warning"))
		return LOG_WARN;
	return -EINVAL;
}

enum log_level log_level_get(void)
{
	return log_sink.level;
}

void log_msg(enum log_level level, const char *prefix, const char *fmt, ...)
{
	static const char *const tags[] = { "error", "warn", "info", "debug" };
	/* syslog priorities (LOG_ERR ... LOG_DEBUG of <syslog.h>), which the
	 * journal reads from a "<N>" line prefix. */
	static const char priority[] = { '3', '4', '6', '7' };
	char line[2048];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n, saved_errno = errno;

	if (level > log_sink.level)
		return;
	if (log_sink.journal) {
		/* The journal keeps the time itself, and the level as the
		 * priority; the pid stays, for a worker's lines. */
		n = snprintf(line, sizeof(line), "<%c>%s[%d] %s: %s", priority[level],
			     log_sink.ident, (int)getpid(), tags[level], prefix);
	} else {
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s[%d] %s: %s",
			     tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
			     log_sink.ident, (int)getpid(), tags[level], prefix);
	}
	if (n < 0)
		n = 0;
	va_start(ap, fmt);
	if ((size_t)n < sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if ((size_t)n >= sizeof(line) - 1)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	/* One write per line keeps lines from different processes whole. */
	if (write(log_sink.fd >= 0 ? log_sink.fd : STDERR_FILENO, line, (size_t)n) < 0)
		(void)0;
	errno = saved_errno;
}
