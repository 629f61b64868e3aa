/* CUresult names and descriptions, generated from cuda.h at build time;
 * sorted by code. Immutable. */
#ifndef TERN_SHIM_ERROR_TABLE_H
#define TERN_SHIM_ERROR_TABLE_H

struct error_entry {
	int code;
	const char *name;
	const char *text;
};

extern const struct error_entry error_table[];
extern const unsigned error_table_count;

#endif
