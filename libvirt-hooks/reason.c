#include "reason.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int reason_refuse(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EBADMSG;
}
