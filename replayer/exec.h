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

/* A stream capture in progress (exec_graph.c), by its origin stream. */
struct exec_capture {
	uint64_t stream;            /* virtual handle (or 2, the per-thread stream) */
	void *graph_real;           /* the backend's graph being captured into */
	uint64_t graph;             /* its handle once the guest asked for it, else 0 */
};

/* Device memory of a graph's memory allocation node: mapped in the arena
 * from the node's creation until no graph or executable holds the node and
 * the memory was freed (a free node, cuMemFree). */
struct exec_graph_alloc {
	uint64_t addr, bytes;
	uint32_t refs;              /* graphs and executables holding the alloc node */
	bool freed;
};

/* Region kinds in the journal (docs/journal.md, "Executor records"). */
enum exec_region_kind {
	EXEC_REGION_DEVICE = 0,     /* cuMemAlloc */
	EXEC_REGION_GRAPH = 1,      /* a graph allocation node's memory */
	EXEC_REGION_GRAPH_FREED = 2,  /* the same, freed, kept while a graph holds it */
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
	struct exec_capture *captures;
	unsigned capture_count, capture_cap;
	uint32_t capture_mode;      /* the worker thread's capture mode, as the guest set it */
	struct exec_graph_alloc *gallocs;
	unsigned galloc_count, galloc_cap;
	bool graph_dirty;           /* a graph description awaits its journal write */
	uint64_t array_bytes;       /* arrays and mipmapped arrays, counted against the quota */
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
void exec_journal_region_kind(struct exec *ex, uint64_t addr, uint64_t size,
			      enum exec_region_kind kind);
/* A region owned by another object than the primary context (a pool). */
void exec_journal_region_owned(struct exec *ex, uint64_t addr, uint64_t size, uint64_t owner);
/* The one that writes them all: a region of @kind owned by @owner. */
void exec_journal_region_as(struct exec *ex, uint64_t addr, uint64_t size,
			    enum exec_region_kind kind, uint64_t owner);
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

/* exec_graph.c */
/* Write the descriptions of graphs and executables changed since their
 * last write; the journal has them all afterwards (a snapshot calls it
 * before it copies the journal). */
void exec_graph_journal_flush(struct exec *ex);
/* Free a graph's or executable's info at session end (no backend calls). */
void exec_graph_info_free(struct exec *ex, struct handle_entry *e);
/* True while a stream capture is in progress: no snapshot then. */
static inline bool exec_capture_active(const struct exec *ex)
{
	return ex->capture_count > 0;
}
/* A copy between the guest's memory and the device cannot be part of a
 * graph (the worker cannot reach the guest's memory when the graph runs):
 * CUDA_ERROR_NOT_SUPPORTED when @s is capturing. */
CUresult exec_host_copy_capture_check(struct exec *ex, CUstream s);
/* A stream was destroyed: a capture begun on it is gone. */
void exec_graph_stream_destroyed(struct exec *ex, uint64_t stream);
/* cuMemFree of a graph allocation: marks it freed (true), or false when
 * @addr is no graph allocation. */
bool exec_graph_alloc_free(struct exec *ex, uint64_t addr);
/* Restore: a graph allocation's region came back mapped. */
int exec_graph_alloc_restore(struct exec *ex, uint64_t addr, uint64_t bytes, bool freed);
/* Restore a graph or executable (@o, kind GRAPH or GRAPH_EXEC) from its
 * encoded description. CUDA_SUCCESS or why not; @err says which part. */
CUresult exec_graph_restore(struct exec *ex, uint64_t handle, uint32_t kind, const uint8_t *args,
			    uint32_t args_len, const void *desc, size_t desc_len, char *err,
			    size_t errlen);

/* exec_array.c: arrays, mipmapped arrays, texture and surface objects. */
/* Free @e's info (an array, mipmap or object entry; others are left alone);
 * @destroy: destroy it in the backend and drop its journal record too. */
void exec_array_entry_release(struct exec *ex, struct handle_entry *e, bool destroy);
/* Copy every array's contents into the journal (images of format 0x200);
 * a snapshot calls it once the device is idle. 0 or -errno with @err set. */
int exec_array_journal_flush(struct exec *ex, char *err, size_t errlen);
/* Restore an array (@parent: its mipmapped array, for a level) or a
 * mipmapped array from its record, contents from @saved. */
CUresult exec_array_restore(struct exec *ex, uint64_t handle, uint32_t kind, uint64_t parent, const uint8_t *args,
			    uint32_t len, struct tracker *saved, char *err, size_t errlen);
/* A texture or surface object's record, held until all are restored at once. */
struct exec_object_record {
	uint64_t handle, value;
	uint32_t kind, args_len;
	uint8_t *args;
};
uint64_t exec_object_record_value(const void *args, uint32_t len);
/* Recreate them so that each gets the value the guest holds (sorts @recs). */
int exec_texobj_restore_all(struct exec *ex, struct exec_object_record *recs, unsigned count, char *err,
			    size_t errlen);

/* The guest sees its session's device as device 0. */
static inline CUresult exec_device_real(struct exec *ex, int32_t device, CUdevice *out)
{
	if (device != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*out = ex->device;
	return CUDA_SUCCESS;
}
#endif
