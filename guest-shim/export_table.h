/* cuGetExportTable for the guest libcuda.so.1: the undocumented tables that
 * NVIDIA's runtime (libcudart, static or shared, and the copies inside cuBLAS and
 * PyTorch) asks the driver for, including the runtime's integrity check.
 *
 * What each table and slot does, and how each answer was established, is in
 * docs/export-tables.md.
 *
 * Ownership: the tables are static and live for the whole process; the pointer
 * handed out for an id is the same on every call (the integrity check hashes it).
 * Threading: every function here may be called from any thread. Table slots call
 * the shim's public driver API (cuCtxGetCurrent, cuDeviceGetAttribute ...), so
 * they must not be called with a lock held that those functions take.
 */
#ifndef TERN_EXPORT_TABLE_H
#define TERN_EXPORT_TABLE_H

#include <stdint.h>

#include <cuda.h>

/* The body of cuGetExportTable. On success *table points at the table for id and
 * 0 is returned. Like driver 580: a NULL table or id gives
 * CUDA_ERROR_INVALID_VALUE; an unknown id sets *table to NULL and gives
 * CUDA_ERROR_INVALID_VALUE. */
CUresult export_table_get(const void **table, const CUuuid *id);

/* Context-local storage (table c693336e...) keeps values per (context, key) and
 * the runtime registers a destructor with each. The shim calls this when a
 * context is destroyed (cuCtxDestroy, a primary context released to zero or
 * reset), before its handle may be reused: it forgets every value stored for
 * ctx and then calls their destructors as dtor(ctx, key, value), newest first,
 * with no lock held. Values removed by the runtime itself get no call. */
void export_table_context_destroyed(CUcontext ctx);

/* Optional hook, defined (or not) by the shim's context code: the primary context
 * handle of dev WITHOUT retaining or creating it, as the driver's own
 * 6bd5fb6c... slot 2 does. Weak: when it is absent, slot 2 falls back to
 * cuDevicePrimaryCtxRetain and keeps that reference (see the doc). */
__attribute__((weak)) CUresult context_primary_peek(CUdevice dev, CUcontext *pctx);

/* The integrity check's digest, exposed for unit tests. The runtime passes a
 * version; for version % 10 of 2..9 the answer is HMAC-MD2 keyed with a fixed
 * 16-byte key over this record followed by one device record per device. The
 * layout is fixed by NVIDIA's runtime (x86-64, little-endian). */
struct export_integrity_input {
	uint32_t driver_version;  /* what cuDriverGetVersion reports */
	uint32_t version;         /* the runtime's argument */
	uint32_t process_id;      /* getpid() */
	uint32_t thread_id;       /* low 32 bits of pthread_self() */
	uint64_t cudart_table;    /* address of table 6bd5fb6c... */
	uint64_t integrity_table; /* address of table d4082055... */
	uint64_t check_fn;        /* address in slot 1 of d4082055... */
	uint64_t unix_seconds;    /* the runtime's argument */
};
_Static_assert(sizeof(struct export_integrity_input) == 48, "hashed as raw bytes");

struct export_integrity_device {
	uint8_t uuid[16];         /* cuDeviceGetUuid_v2 */
	int32_t pci_domain;
	int32_t pci_bus;
	int32_t pci_device;
};
_Static_assert(sizeof(struct export_integrity_device) == 28, "hashed as raw bytes");

/* Write the 16-byte answer for in and devices[0..ndevices) to out. Pure. */
void export_table_integrity_digest(const struct export_integrity_input *in,
				   const struct export_integrity_device *devices,
				   unsigned ndevices, uint8_t out[16]);

#endif
