/* The cuGetProcAddress table, generated at build time by
 * gen_entry_points.py from cudaTypedefs.h and the stub libcuda.so. This
 * header is also included by the generated file, which never sees cuda.h,
 * so it uses plain C types only. The tables are immutable. */
#ifndef TERN_SHIM_PROC_ADDRESS_H
#define TERN_SHIM_PROC_ADDRESS_H

#include <stdint.h>

/* One ABI version of an entry point: valid for requests of @version or
 * later (up to the next row's version). */
struct proc_version {
	uint32_t version;
	void *fn;
	void *fn_per_thread;            /* the _ptds/_ptsz symbol, or NULL */
};

struct proc_name {
	const char *name;
	const struct proc_version *versions;    /* ascending by version */
	unsigned count;
};

extern const struct proc_name proc_names[];     /* sorted by strcmp(name) */
extern const unsigned proc_name_count;
/* The driver's exported symbols (for diagnostics and tests). */
extern const char *const proc_exported[];
extern const unsigned proc_exported_count;

/* Logged once by each unimplemented entry point. */
void shim_unimplemented_report(const char *name);

#endif
