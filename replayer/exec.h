/* The executor: one session's state and the handlers of every remoted call.
 *
 * A worker process owns one struct exec. Requests are decoded by the
 * generated dispatcher (wire_dispatch.h) and land in exec_<call>() handlers,
 * spread over exec_*.c by object. Handlers treat every field as hostile:
 * handles are looked up by kind, device ranges must lie inside one live
 * allocation (or a module global), sizes are capped, and any failure is the
 * CUresult of that request alone.
 *
 * Not thread-safe: one worker thread drives it.
 */
#ifndef TERN_EXEC_H
#define TERN_EXEC_H

#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "handle_table.h"
#include "session_slot.h"
#include "wire.h"

struct tracker;
struct capture;

struct exec_config {
	int device;                 /* real device index the session runs on */
	uint64_t arena_base;
	uint64_t arena_size;
	uint64_t quota;             /* bytes of device memory; 0 = no limit */
};

/* Parameter layout of a function or kernel, cached at lookup. */
struct exec_params {
	uint32_t count;
	uint32_t bytes;             /* last offset + size */
	uint32_t *offset;
	uint32_t *size;
};

struct exec_kernel_info {
	struct exec_params params;
	CUfunction function;        /* cuKernelGetFunction for the session context */
};

/* A memory pool (exec_pool.c): the worker's own object, its memory from the arena. */
struct exec_pool {
	uint64_t max_size;          /* 0: bounded by the quota only */
	uint32_t usage;
	int32_t reuse[3];           /* CU_MEMPOOL_ATTR_REUSE_*, in attribute order */
	uint64_t release_threshold;
	uint64_t used, used_high;   /* bytes asked for */
	uint64_t reserved, reserved_high;  /* bytes mapped */
};

/* A live allocation from a pool; its pool handle may outlive the pool. */
struct exec_pool_alloc {
	uint64_t addr, size, mapped;
	uint64_t pool;
};

/* A device range outside the arena that the guest may copy to and from:
 * module and library globals. */
struct exec_extra_range {
	uint64_t addr, size;
	uint64_t owner;             /* module or library handle */
};

/* A guest host buffer both sides map (mem_host_share): pinned here, so
 * copies to and from it are DMA on the guest's own pages. */
struct exec_host_buf {
	uint64_t guest_addr, bytes;
	uint8_t *local;             /* our mapping; equal to guest_addr when we could */
	struct exec_host_buf *next;
};

struct exec {
	struct backend *be;
	struct handle_table *handles;
	struct arena *arena;
	struct session_slot *slot;  /* shared with the supervisor, may be NULL */
	struct exec_config cfg;
	CUdevice device;
	uint64_t primary_ctx;       /* virtual handle, 0 until first retained */
	int primary_refs;
	uint64_t ctx_current;       /* the context made current in the backend */
	struct exec_extra_range *extra;
	unsigned extra_count, extra_cap;
	uint64_t default_pool;      /* handle, 0 until first asked for */
	uint64_t current_pool;      /* cuDeviceSetMemPool's, 0 = the default */
	struct exec_pool_alloc *pool_allocs;
	unsigned pool_alloc_count, pool_alloc_cap;
	void *copy_buf;             /* device-to-host replies, reused */
	size_t copy_cap;
	uint32_t guest_pid;
	uint64_t resume_seq;        /* restored at this request, 0 for a fresh session */
	struct tracker *journal;    /* NULL when the session is not journaled */
	struct capture *capture;    /* snapshot data path, opened at the first snapshot */
	char device_name[256];
	bool journal_broken;        /* a journal write failed: no snapshots */
	int host_sock;              /* where shared buffers' memfds arrive; -1: not offered */
	struct exec_host_buf *host_bufs;
	uint64_t host_bytes, host_bytes_max;
};

/* Open the backend's device and reserve the arena. 0 or -errno. */
int exec_open(struct exec *ex, struct backend *be, const struct exec_config *cfg,
	      struct session_slot *slot);
void exec_close(struct exec *ex);

/* Make the request's context current before dispatch (0 = none). */
CUresult exec_context_switch(struct exec *ex, uint64_t ctx);
/* Calls the driver API serves with no context (cuLibraryGetKernel) may need
 * one in the backend (the kernel's parameter layout): with none current, the
 * session's primary context stands in until the next request switches. */
void exec_context_any(struct exec *ex);

/* exec_journal.c: objects and regions, recorded as they are created. */
int exec_journal_open(struct exec *ex, const char *dir, const char *session);
void exec_journal_close(struct exec *ex);
int exec_journal_object(struct exec *ex, uint64_t handle, enum handle_kind kind, uint64_t parent,
			const void *args, uint32_t args_len);
/* Issue a virtual handle for @real and journal it with its creation arguments. */
CUresult exec_object_add(struct exec *ex, enum handle_kind kind, void *real, uint64_t parent,
			 void *info, const void *args, uint32_t args_len, uint64_t *handle);
/* The same for a module or library: its image is journaled by hash. */
CUresult exec_object_add_image(struct exec *ex, enum handle_kind kind, void *real,
			       const void *image, size_t size, uint64_t *handle);
void exec_object_remove(struct exec *ex, uint64_t handle);
void exec_journal_region(struct exec *ex, uint64_t addr, uint64_t size);
/* A region owned by another object than the primary context (a pool). */
void exec_journal_region_owned(struct exec *ex, uint64_t addr, uint64_t size, uint64_t owner);
void exec_journal_region_drop(struct exec *ex, uint64_t addr);

/* Helpers shared by the handler files. */
CUresult exec_stream_real(struct exec *ex, uint64_t handle, CUstream *out);
CUresult exec_function_real(struct exec *ex, uint64_t handle, CUfunction *out,
			    const struct exec_params **params);
bool exec_device_range_valid(struct exec *ex, uint64_t addr, uint64_t len);
CUresult exec_params_query(struct exec *ex, CUfunction fn, CUkernel kernel,
			   struct exec_params *out);
void exec_params_release(struct exec_params *p);
void exec_extra_range_add(struct exec *ex, uint64_t addr, uint64_t size, uint64_t owner);
void exec_extra_range_drop_owner(struct exec *ex, uint64_t owner);
/* Encode a params layout as the wire's params blob into @buf (2 * count u32). */
struct wire_blob exec_params_blob(const struct exec_params *p, uint32_t *buf);
void *exec_copy_buffer(struct exec *ex, size_t size);

/* exec_memory.c: map @bytes in the arena within the quota (not journaled),
 * and unmap what starts at @addr (its region dropped from the journal). */
CUresult exec_mem_map(struct exec *ex, uint64_t bytes, uint64_t *addr);
CUresult exec_mem_unmap(struct exec *ex, uint64_t addr);

/* exec_pool.c */
void exec_pool_release(struct handle_entry *e);
/* Forget @addr's pool accounting; false if it is no pool allocation. */
bool exec_pool_alloc_forget(struct exec *ex, uint64_t addr);
/* The primary context was reset: every allocation is gone. */
void exec_pool_reset(struct exec *ex);
/* Restore: a pool object from its journal record, a pool's allocation from
 * its region, then the pools' counters once both are back. */
CUresult exec_pool_restore(struct exec *ex, uint64_t handle, const void *args, uint32_t len);
int exec_pool_restore_alloc(struct exec *ex, uint64_t addr, uint64_t size, uint64_t mapped,
			    uint64_t pool);
void exec_pool_restore_finish(struct exec *ex);
/* exec_host_shared.c: drop every shared host buffer (session end). */
void exec_host_shared_close(struct exec *ex);


/* The guest sees its session's device as device 0. */
static inline CUresult exec_device_real(struct exec *ex, int32_t device, CUdevice *out)
{
	if (device != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*out = ex->device;
	return CUDA_SUCCESS;
}
#endif
