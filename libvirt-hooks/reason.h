/* The one-line reasons the hook's parsers give: a printf into the caller's
 * @err buffer that returns -EBADMSG, so a refusal is one statement. */
#ifndef TERN_LIBVIRT_REASON_H
#define TERN_LIBVIRT_REASON_H

#include <stddef.h>

__attribute__((format(printf, 3, 4)))
int reason_refuse(char *err, size_t errlen, const char *fmt, ...);

#endif
