/* Sizes as people write them: "4096", "64K", "64M", "16G", "1T" (powers of 1024). */
#ifndef TERN_UNITS_H
#define TERN_UNITS_H

#include <stdint.h>

/* 0 or -EINVAL (junk, overflow). */
int units_size_parse(const char *text, uint64_t *out);
/* "1.5 GiB" style, into @buf. */
void units_size_format(uint64_t bytes, char *buf, unsigned cap);

#endif
