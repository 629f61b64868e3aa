/* ckpt's output helpers: failures, the JSON object, sizes and times. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ckpt.h"
#include "units.h"

int ckpt_fail(struct ckpt *c, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->error, sizeof(c->error), fmt, ap);
	va_end(ap);
	if (!c->quiet)
		fprintf(stderr, "ckpt%s%s: %s\n", c->cmd ? " " : "", c->cmd ? c->cmd->name : "", c->error);
	return status;
}

void ckpt_json_begin(struct ckpt *c, struct json_writer *w)
{
	json_writer_init(w, stdout);
	json_object_begin(w, NULL);
	c->json_written = true;
}

void ckpt_json_end(struct ckpt *c, struct json_writer *w)
{
	(void)c;
	json_object_end(w);
	fputc('\n', w->f);
	fflush(w->f);
}

void ckpt_size_format(uint64_t bytes, char *buf, unsigned cap)
{
	if (bytes < 1024)
		snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
	else
		units_size_format(bytes, buf, cap);
}

void ckpt_time_format(uint64_t ns, char *buf, unsigned cap)
{
	time_t t = (time_t)(ns / 1000000000u);
	struct tm tm;

	if (!gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M:%S UTC", &tm))
		snprintf(buf, cap, "%llu ns", (unsigned long long)ns);
}
