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
#include "wire.h"

struct tracker;
struct exec_hostfn;

/* Devices a session may see at most (guest ordinals 0 .. EXEC_DEVICES_MAX-1). */
#define EXEC_DEVICES_MAX 16

struct exec_config {
	int device;                 /* backend device the guest's device 0 runs on */
	/* Backend devices the session sees, in order; 0 = every device the
	 * backend has. The guest's ordinal i runs on the i-th of this list
	 * counted from @device (wrapping), so a restore onto another device
	 * moves the session's devices as a whole. */
	int devices[EXEC_DEVICES_MAX];
	unsigned device_count;
	uint64_t arena_base;        /* the guest's device i has [base + i * size, +size) */
	uint64_t arena_size;
	uint64_t quota;             /* bytes of device memory, all devices together; 0 = no limit */
	uint64_t vmm_size;          /* the VMM window after the arenas; 0 = no guest VMM */
};

/* One device of the session, by the guest's ordinal. */
struct exec_device {
	int ordinal;                /* the backend's device index */
	CUdevice dev;
	uint64_t ctx;               /* its primary context's virtual handle */
	int primary_refs;           /* the guest's retains */
	struct arena *arena;
	uint32_t peers;             /* bit j: this context enabled access to guest device j */
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
	CUfunction function[EXEC_DEVICES_MAX];  /* cuKernelGetFunction, per device's context */
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

/* The guest's virtual memory management (exec_vmm.c). A physical
 * allocation is the info of a HANDLE_VMM entry (real: the backend's handle);
 * it lives while the guest holds a reference or a mapping uses it. */
struct exec_vmm_alloc {
	uint64_t size;
	uint32_t refs;              /* cuMemCreate's and each cuMemRetainAllocationHandle's */
	uint32_t maps;              /* live mappings of it */
	uint32_t handle_types, compression, rdma, usage;
};

/* A reservation in the VMM window, and a mapping inside one (sorted by address). */
struct exec_vmm_range {
	uint64_t addr, size;
};

struct exec_vmm_map {
	uint64_t addr, size;
	uint64_t mem;               /* the allocation's virtual handle */
	uint64_t buffer_id;
	uint32_t access;            /* CUmemAccess_flags of the session's device */
};

/* A device range outside the arena that the guest may copy to and from:
 * module and library globals. */
struct exec_extra_range {
	uint64_t addr, size;
	uint64_t owner;             /* module or library handle */
	uint64_t now;               /* where a restore found it; 0: at addr */
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
	bool user;                  /* the guest's own graph (cuStreamBeginCaptureToGraph) */
};

/* Device memory of a graph's memory allocation node: mapped in the arena
 * from the node's creation until no graph or executable holds the node and
 * the memory was freed (a free node, cuMemFree). */
struct exec_graph_alloc {
	uint64_t addr, bytes;
	uint32_t refs;              /* graphs and executables holding the alloc node */
	bool freed;
};

/* A backend node a capture holds for what the backend cannot hold as such
 * (exec_graph_host.c): an empty node that is the guest's graph allocation
 * or free node, until the capture's description reads it back. */
struct exec_graph_standin {
	const void *graph;          /* the backend's graph being captured into */
	const void *node;           /* the backend's node */
	uint32_t type;              /* CU_GRAPH_NODE_TYPE_MEM_ALLOC or _MEM_FREE */
	uint64_t addr, bytes;
};

/* Journal meta keys of the executor (the tracker reserves those below
 * TRACKER_META_USER; checkpoint.c uses USER + kind and USER + 0x100..). */
#define EXEC_META_DEVICE_COUNT (TRACKER_META_USER + 0x110)
/* u64 bitmask of the guest devices whose memory device @i's context reaches. */
#define EXEC_META_PEERS(i) (TRACKER_META_USER + 0x120 + (uint32_t)(i))

/* Region kinds in the journal (docs/journal.md, "Executor records"). */
enum exec_region_kind {
	EXEC_REGION_DEVICE = 0,     /* cuMemAlloc */
	EXEC_REGION_GRAPH = 1,      /* a graph allocation node's memory */
	EXEC_REGION_GRAPH_FREED = 2,  /* the same, freed, kept while a graph holds it */
	EXEC_REGION_VMM = 3,        /* a guest's cuMemMap: owner its allocation, flags its access */
	EXEC_REGION_MANAGED = 4,    /* cuMemAllocManaged: device memory the guest mirrors */
};

/* Told of the session's device memory whenever it changes (the worker
 * publishes it to the supervisor's slot); @memory_changed may be NULL. */
struct exec_observer {
	void (*memory_changed)(void *opaque, uint64_t bytes);
	void *opaque;
};

/* Device ranges outside the arena the guest may copy to and from: module
 * and library globals (exec_extra_range_*). */
struct exec_globals {
	struct exec_extra_range *ranges;
	unsigned count, cap;
};

/* Device memory the driver takes for the guest outside any allocation,
 * counted against the quota (exec_module.c, exec_context.c): module and
 * library globals (zero-filled ones included, which no image byte holds),
 * and the per-thread stack, printf FIFO and malloc heap cuCtxSetLimit sizes. */
struct exec_charges {
	struct exec_image_charge {
		uint64_t handle;    /* the module or library */
		uint64_t bytes;
	} *images;
	unsigned image_count, image_cap;
	uint64_t image_bytes;
	uint64_t array_bytes;       /* arrays and mipmapped arrays */
	/* By CUlimit (stack, printf FIFO, malloc heap): what the guest's size
	 * takes beyond the size the context started with, which every
	 * context has (base: that one's bytes, once known). */
	uint64_t limit[EXEC_DEVICES_MAX][3];
	uint64_t limit_base[EXEC_DEVICES_MAX][3];
	bool limit_base_known[EXEC_DEVICES_MAX][3];
};
/* No one charge is counted above this, so their sums cannot wrap. */
#define EXEC_CHARGE_MAX (1ull << 50)

/* Stream-ordered allocation (exec_pool.c). */
struct exec_pools {
	uint64_t default_pool;      /* handle, 0 until first asked for */
	uint64_t current;           /* cuDeviceSetMemPool's, 0 = the default */
	struct exec_pool_alloc *allocs;
	unsigned alloc_count, alloc_cap;
};

/* The guest's virtual memory management (exec_vmm.c). */
struct exec_vmm {
	uint64_t base, size;        /* the window reserved in the backend; size 0: none */
	uint64_t gran;              /* the backend's minimum granularity */
	uint64_t bytes;             /* physical allocations, counted in the quota */
	uint64_t next_id;           /* buffer ids of mappings */
	struct exec_vmm_range *res;
	unsigned res_count, res_cap;
	struct exec_vmm_map *maps;
	unsigned map_count, map_cap;
};

/* What the session shares with the guest's process: pinned host buffers
 * (exec_host_shared.c) and the host-function channel (exec_hostfn.c). */
struct exec_host {
	int sock;                   /* where shared buffers' memfds arrive; -1: not offered */
	struct exec_host_buf *bufs;
	struct exec_host_buf *retired; /* freed by the guest, pinned until the session is idle */
	uint64_t retired_looked_ns; /* when the dispatch loop last looked whether it is */
	uint64_t bytes, bytes_max;  /* pinned, retired buffers included */
	int conn_sock;              /* the session's socket (host_func_attach), -1: none */
	/* Takes the @nfds descriptors that follow a request on the session's
	 * socket, which the worker may have read ahead with their byte
	 * (common/recv_ahead.h): 0 or -errno as shm_fds_recv. NULL: read the
	 * socket itself. */
	int (*fds_take)(void *arg, int *fds, int nfds, int timeout_ms);
	void *fds_arg;
	struct tls_creds *tls;      /* tls://: the callback connection is TLS too, with these; NULL: plain */
	struct exec_hostfn *fn;     /* host-function channel and records */
	/* The session's slot of its domain's ivshmem BAR (ivshmem_host_share):
	 * the BAR file (the worker's), the slot's offset in it and size, and
	 * where buffers may start in it (past the rings). bar_fd -1: none. */
	int bar_fd;
	uint64_t bar_offset, bar_bytes, bar_carve;
};

/* The guest's staging for pageable copies over shm (exec_staging.c): its
 * memfd mapped here, the slots registered with the driver; each slot's last
 * piece is behind an event recorded on the piece's stream, and before the
 * event a host function that writes the piece's ticket into the header. */
#define EXEC_STAGING_SLOTS_MAX WIRE_STAGING_SLOTS_MAX
#define EXEC_STAGING_BYTES_MAX (1ull << 30)
struct exec_staging_slot {
	CUevent done;               /* behind the slot's last piece; NULL: none, or a waiter holds it */
};
struct exec_staging_tickets;        /* exec_staging.c: what the host functions write */
struct exec_staging {
	uint8_t *map;               /* NULL: no staging */
	uint64_t map_bytes;
	uint8_t *base;              /* the first slot, past the header */
	uint64_t bytes, slot_bytes;
	uint32_t slots;
	struct exec_staging_tickets *tickets;
	struct exec_staging_slot slot[EXEC_STAGING_SLOTS_MAX];
};

/* IPC exports and imports (exec_ipc.c), asked of the supervisor. */
struct exec_ipc_table {
	int fd;                     /* the channel (ipc_channel.h); -1: none */
	struct exec_ipc *entries;
	unsigned count, cap;
};

/* Stream captures and graph memory (exec_graph.c). */
struct exec_graphs {
	struct exec_capture *captures;
	unsigned capture_count, capture_cap;
	uint32_t capture_mode;      /* the worker thread's capture mode, as the guest set it */
	struct exec_graph_alloc *allocs;
	unsigned alloc_count, alloc_cap;
	struct exec_graph_standin *standins;
	unsigned standin_count, standin_cap;
	/* High watermarks of graph allocations per guest device since the
	 * guest last reset them (exec_device_query.c): used and mapped bytes. */
	uint64_t mem_high_used[EXEC_DEVICES_MAX], mem_high_reserved[EXEC_DEVICES_MAX];
	bool dirty;                 /* a graph description awaits its journal write */
};

/* The session's devices by guest ordinal; the guest's device 0 is where
 * the session's own work (snapshots, graphs) runs: device, primary_ctx and
 * arena alias list[0]'s. */
struct exec_devices {
	struct exec_device list[EXEC_DEVICES_MAX];
	unsigned count;
	CUdevice device;
	uint64_t primary_ctx;
	struct arena *arena;
	uint64_t ctx_current;       /* the context made current in the backend */
	unsigned current;           /* the guest ordinal of ctx_current's device */
	char name[256];
};

/* Who the session is, as the worker set it up. */
struct exec_session {
	uint32_t guest_pid;
	uint64_t resume_seq;        /* restored at this request, 0 for a fresh session */
	/* The session credential as the hello reply carries it (masked on
	 * token listeners; common/auth.h), set by the worker; NULL: none. */
	const uint8_t *credential;
	uint32_t credential_len;
};

struct exec {
	struct backend *be;
	struct handle_table *handles;
	struct exec_observer observer;
	struct exec_config cfg;
	struct exec_devices dev;
	struct exec_session session;
	struct exec_globals globals;
	struct exec_charges charges;
	struct exec_pools pools;
	struct exec_vmm vmm;
	struct exec_host host;
	struct exec_staging staging;
	struct exec_ipc_table ipc;
	struct exec_graphs graphs;
	struct {
		void *buf;          /* device-to-host replies, reused */
		size_t cap;
	} copy;
	struct tracker *journal;    /* NULL when the session is not journaled */
	bool journal_broken;        /* a journal write failed: no snapshots */
};

/* Open the backend's device and reserve the arena. 0 or -errno. */
int exec_open(struct exec *ex, struct backend *be, const struct exec_config *cfg,
	      const struct exec_observer *observer);
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
/* The one that writes them all: a region of @kind owned by @owner, with the
 * kind's @flags (a VMM mapping's access flags; 0 for the others). */
void exec_journal_region_as(struct exec *ex, uint64_t addr, uint64_t size,
			    enum exec_region_kind kind, uint64_t owner, uint32_t flags);
void exec_journal_region_drop(struct exec *ex, uint64_t addr);

/* Settings made after an object's creation, journaled so that a restore
 * makes them again (docs/journal.md, "Settings"): fixed-size records after
 * a fixed prefix of the object's arguments, or in a meta record of the
 * context's. A record whose first @key_len bytes equal the new one's is
 * replaced, else the new one is appended. */
void exec_journal_object_setting(struct exec *ex, uint64_t handle, uint32_t prefix, const void *rec,
				 uint32_t rec_len, uint32_t key_len);
void exec_journal_meta_setting(struct exec *ex, uint32_t key, const void *rec, uint32_t rec_len,
			       uint32_t key_len);

/* Meta keys (from TRACKER_META_USER) of the settings and module globals. */
#define EXEC_META_CTX_SETTINGS 0x10260u     /* records of 16 bytes: u32 id, u32 0, u64 value */
#define EXEC_META_STREAM_SETTINGS 0x10261u  /* the NULL/legacy and per-thread streams' attributes */
#define EXEC_META_MODULE_GLOBALS 0x10262u   /* contents of module globals, written by a snapshot */
/* Context setting ids: a CUlimit, or one of these. */
#define EXEC_CTX_SETTING_CACHE_CONFIG 0x100u
#define EXEC_CTX_SETTING_SHARED_CONFIG 0x101u
#define EXEC_CTX_SETTING_FLAGS 0x102u       /* the primary context's flags */
#define EXEC_CTX_SETTING_RECORD 16u
/* Function and kernel settings after the name: u32 id, i32 value; the id is
 * a CUfunction_attribute or one of these. */
#define EXEC_FUNC_SETTING_CACHE_CONFIG 0x100u
#define EXEC_FUNC_SETTING_SHARED_CONFIG 0x101u
#define EXEC_FUNC_SETTING_RECORD 8u
/* Stream attributes after the stream's flags and priority: u32 attribute,
 * u32 builtin stream (0 in an object's record), the 64-byte value. */
#define EXEC_STREAM_SETTING_RECORD 72u
void exec_journal_ctx_setting(struct exec *ex, uint32_t id, uint64_t value);
void exec_journal_func_setting(struct exec *ex, uint64_t handle, uint32_t id, int32_t value);

/* Helpers shared by the handler files. */
CUresult exec_stream_real(struct exec *ex, uint64_t handle, CUstream *out);
/* Whether nothing the session queued is pending: the current context's
 * legacy and per-thread streams and every stream it made are idle. Only the
 * dispatch thread queues work, so it stays so until that thread queues more. */
bool exec_streams_idle(struct exec *ex);
CUresult exec_function_real(struct exec *ex, uint64_t handle, CUfunction *out,
			    const struct exec_params **params);
/* Whether the guest's device range [@addr, +@len) lies in one live
 * allocation, VMM mapping with access, or module global; if so *@real is the
 * address the backend must be given for @addr (else it is left as it was:
 * a graph rebuilt at a restore keeps a node whose memory is gone as the
 * guest made it). The two are one call
 * because a global a restore moved keeps the guest's old address as a second
 * name (exec_extra_range_move): a handler that checked @addr and passed it on
 * would reach whatever now lies there. Every handler that hands a guest
 * device address to the backend takes it from here. */
bool exec_device_range(struct exec *ex, uint64_t addr, uint64_t len, uint64_t *real);
CUresult exec_params_query(struct exec *ex, CUfunction fn, CUkernel kernel,
			   struct exec_params *out);
void exec_params_release(struct exec_params *p);
void exec_extra_range_add(struct exec *ex, uint64_t addr, uint64_t size, uint64_t owner);
/* A global the guest knows at @addr that a restore found at @now
 * (checkpoint_state.c): copies and memsets at @addr reach @now. */
void exec_extra_range_move(struct exec *ex, uint64_t addr, uint64_t size, uint64_t owner, uint64_t now);
/* The guest's address for a backend one: inside a moved global, the same
 * offset from the guest's old address (graphs read back from the driver). */
uint64_t exec_guest_addr(const struct exec *ex, uint64_t now);
void exec_extra_range_drop_owner(struct exec *ex, uint64_t owner);
/* Encode a params layout as the wire's params blob into @buf (2 * count u32). */
struct wire_blob exec_params_blob(const struct exec_params *p, uint32_t *buf);
/* The reusable buffer of device-to-host replies, at least @size bytes (NULL
 * if it cannot grow); valid until the reply is sent. */
void *exec_copy_buffer(struct exec *ex, size_t size);
/* Between requests (the worker, before each): give back a copy buffer over
 * EXEC_COPY_KEEP, so that a session keeps what its largest copy needed only
 * while it was served. */
#define EXEC_COPY_KEEP (1u << 20)
void exec_host_trim(struct exec *ex);

/* exec_context.c: cuCtxSetLimit on the current context, the stack, printf
 * FIFO and malloc heap sizes counted in the quota (the new size replaces
 * the old one's share): CUDA_ERROR_OUT_OF_MEMORY past it. Used by the
 * handler and by a restore, which sets the journal's limits again. */
CUresult exec_ctx_limit_set(struct exec *ex, uint32_t limit, uint64_t value);

/* exec_module.c: an image's share of the quota (struct exec_charges).
 * exec_image_charge checks that @image's globals fit beside what the
 * session holds and then counts them for @handle (a module or library just
 * loaded): CUDA_ERROR_OUT_OF_MEMORY past the quota, and the caller unloads
 * it. exec_image_uncharge gives @handle's share back (no-op if none). */
CUresult exec_image_charge(struct exec *ex, uint64_t handle, const void *image, size_t size);
void exec_image_uncharge(struct exec *ex, uint64_t handle);

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

/* exec_vmm.c */
/* Reserve the VMM window after the arena (a failure only disables guest VMM). */
void exec_vmm_open(struct exec *ex);
/* Unmap and release everything the guest mapped and created; the window. */
void exec_vmm_close(struct exec *ex);
/* The mapping containing @addr, or NULL. */
const struct exec_vmm_map *exec_vmm_find(const struct exec *ex, uint64_t addr);
/* True if [addr, addr + len) lies in adjacent mappings the device may access. */
bool exec_vmm_range_valid(const struct exec *ex, uint64_t addr, uint64_t len);
/* Restore, before regions: the reservations and the physical allocations of
 * @saved; then each mapping from its region; then, once the contents are
 * back, the mappings' access. 0 or -errno with @err filled. */
int exec_vmm_restore_begin(struct exec *ex, struct tracker *saved, char *err, size_t errlen);
int exec_vmm_restore_map(struct exec *ex, uint64_t addr, uint64_t size, uint64_t mem,
			 uint32_t access, char *err, size_t errlen);
int exec_vmm_restore_finish(struct exec *ex, char *err, size_t errlen);
/* exec_staging.c: a staging_wait's slot event for the waiter (1), or 0 when
 * it is served at once; the event back to its slot; the staging dropped
 * (session end, after the device went idle). */
struct exec_wait;
int exec_staging_wait_prepare(struct exec *ex, const struct wire_cursor *cur, struct exec_wait *w);
void exec_staging_event_return(struct exec *ex, struct exec_wait *w);
void exec_staging_close(struct exec *ex);
/* exec_host_shared.c: drop every shared host buffer (session end). */
void exec_host_shared_close(struct exec *ex);
/* Whether [addr, addr+len) lies in one shared host buffer as the device
 * sees it (the address mem_host_share answered). */
bool exec_host_shared_device_range(struct exec *ex, uint64_t addr, uint64_t len);

/* exec_hostfn.c: host functions run by the guest over its channel. */
/* Host node parameters for the guest's @token: our trampoline and the
 * token's record (kept for the session). CUDA_SUCCESS or OUT_OF_MEMORY. */
CUresult exec_hostfn_params(struct exec *ex, uint64_t token, CUDA_HOST_NODE_PARAMS *p);
/* The token of host node parameters the backend handed back; false when
 * they are not a host node of this session's. */
bool exec_hostfn_token_of(struct exec *ex, const CUDA_HOST_NODE_PARAMS *p, uint64_t *token);
/* A host copy's host node (docs/wire-protocol.md, "Host copies in
 * graphs"): parameters of a trampoline that, when the graph reaches it,
 * fills the staging buffer *@staging from the guest's range @token names
 * (@host_end GRAPH_COPY_HOST_SRC) or writes the buffer there
 * (GRAPH_COPY_HOST_DST). One pinned buffer of @bytes per token, end and
 * size, kept for the session and counted in its pinned bytes.
 * CUDA_SUCCESS, OUT_OF_MEMORY (no room), or the backend's error. */
CUresult exec_hostfn_copy_params(struct exec *ex, uint64_t token, uint32_t host_end, uint64_t bytes,
				 CUDA_HOST_NODE_PARAMS *p, void **staging);
/* What a host node the backend handed back copies; false when it is no
 * host copy of this session's. */
bool exec_hostfn_copy_of(struct exec *ex, const CUDA_HOST_NODE_PARAMS *p, uint64_t *token, uint32_t *host_end,
			 uint64_t *bytes);
/* Session end: shut the channel down so that waiting runs return (before
 * the last synchronisation), then free everything (after it). */
/* The guest's host-function connection @fd, handed over by the supervisor
 * with the @secret (@len bytes) its host_func_join presented: installed
 * and answered when a join was awaited and the secret is the attach's,
 * else answered "not permitted" and closed. Takes @fd either way. */
CUresult exec_hostfn_join(struct exec *ex, int fd, const uint8_t *secret, size_t len);
void exec_hostfn_shutdown(struct exec *ex);
void exec_hostfn_free(struct exec *ex);
/* Async-signal-safe: shut the channel down (SIGTERM while a run waits). */
void exec_hostfn_interrupt(void);

/* exec_graph.c */
/* Write the descriptions of graphs and executables changed since their
 * last write; the journal has them all afterwards (a snapshot calls it
 * before it copies the journal). */
void exec_graph_journal_flush(struct exec *ex);
/* Free a graph's or executable's info at session end (no backend calls). */
void exec_graph_info_free(struct exec *ex, struct handle_entry *e);
/* exec_wait.c: a synchronising request (the table's `wait` calls) whose wait runs
 * off the dispatch thread, so that other guest threads' requests go on.
 * exec_wait_prepare, on the dispatch thread with the request's context
 * current: 1 when the request now waits in @w (run exec_wait_run on any
 * thread, then exec_wait_complete on the dispatch thread; exec_wait_finish
 * drops one instead), 0 when the request is to be dispatched as
 * usual (another call, work already done, a capture in progress, or input
 * the handler refuses). */
struct exec_wait {
	uint32_t call;
	CUcontext ctx;              /* cuCtxSynchronize's context */
	CUevent marker;             /* recorded on the stream waited for */
	CUresult status;
	void *request;              /* a copy's request, served when the wait is over */
	size_t request_len;
	/* An unshare's buffer, out of the session's list: retired on
	 * completion, once the waiter synchronised the context. */
	struct exec_host_buf *host_buf;
	/* A staging slot's event, taken from the slot to wait for (marker):
	 * given back when the wait is served at once after all. */
	bool staging;
	uint32_t staging_slot;
};
int exec_wait_prepare(struct exec *ex, uint32_t call, const struct wire_cursor *cur, struct exec_wait *w);
/* The guest's pinned buffer at @guest_addr, taken out of the session's
 * list (NULL: none such), and put back. */
struct exec_host_buf *exec_host_buf_detach(struct exec *ex, uint64_t guest_addr);
void exec_host_buf_attach(struct exec *ex, struct exec_host_buf *b);
/* Unregister @b, out of the session's list, now or once the session is
 * idle (exec_host_retired_reap, called by the dispatch loop). */
void exec_host_buf_retire(struct exec *ex, struct exec_host_buf *b);
bool exec_host_retired_pending(const struct exec *ex);
void exec_host_retired_reap(struct exec *ex);
/* The descriptors that follow a request on @sock, the session's socket:
 * through host.fds_take when the worker set it, else from @sock. */
int exec_host_fds_take(struct exec *ex, int sock, int *fds, int nfds, int timeout_ms);
/* Blocks; touches nothing of the session but @w and the backend. */
void exec_wait_run(const struct backend *be, struct exec_wait *w);
void exec_wait_finish(struct exec *ex, struct exec_wait *w);
/* On the dispatch thread, with the request's context current, once
 * exec_wait_run returned: 0 with the request's answer in @reply, or (only
 * when @may_wait) 1 when it waits again, @w prepared anew. */
int exec_wait_complete(struct exec *ex, struct exec_wait *w, bool may_wait, struct wire_msg *reply);

/* True while a stream capture is in progress: no snapshot then. */
static inline bool exec_capture_active(const struct exec *ex)
{
	return ex->graphs.capture_count > 0;
}
/* The stream of an async copy between the guest's memory and the device, or
 * of a stream memory operation. Neither can be part of a graph (the worker
 * cannot reach the guest's memory when the graph runs; descriptions hold no
 * memory-operation nodes): CUDA_ERROR_NOT_SUPPORTED when the stream is
 * capturing. */
CUresult exec_host_copy_stream(struct exec *ex, uint64_t handle, CUstream *s);
/* A stream was destroyed: a capture begun on it is gone. */
void exec_graph_stream_destroyed(struct exec *ex, uint64_t stream);
/* cuMemFree of a graph allocation: marks it freed (true), or false when
 * @addr is no graph allocation. */
bool exec_graph_alloc_free(struct exec *ex, uint64_t addr);
/* Whether @addr is a graph allocation. */
bool exec_graph_alloc_is(struct exec *ex, uint64_t addr);
/* exec_graph_host.c: cuMemAllocAsync / cuMemFreeAsync on stream @s while
 * it captures: a graph allocation of @bytes at *@addr (or a free of
 * @addr's), made an allocation (free) node of the capture. *@captured
 * false, and nothing done, when @s does not capture (a free: or @addr is
 * no graph allocation). */
CUresult exec_graph_capture_alloc(struct exec *ex, CUstream s, uint64_t bytes, bool *captured, uint64_t *addr);
CUresult exec_graph_capture_free(struct exec *ex, CUstream s, uint64_t addr, bool *captured);
/* exec_device_query.c: a graph allocation was added; raise the high watermarks. */
void exec_graph_mem_note(struct exec *ex);
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


/* The guest's device ordinals are indices into ex->dev.list. */
static inline CUresult exec_device_real(struct exec *ex, int32_t device, CUdevice *out)
{
	if (device < 0 || (unsigned)device >= ex->dev.count)
		return CUDA_ERROR_INVALID_DEVICE;
	*out = ex->dev.list[device].dev;
	return CUDA_SUCCESS;
}

/* exec.c: the session's devices and their arenas. */
/* The arena of the current context's device: where new memory comes from. */
static inline struct arena *exec_arena_current(struct exec *ex)
{
	return ex->dev.list[ex->dev.current].arena;
}
/* The arena whose range holds @addr and its guest ordinal, or NULL. */
struct arena *exec_arena_of(struct exec *ex, uint64_t addr, unsigned *ordinal);
/* The live allocation holding @addr on any device, or NULL. */
const struct arena_alloc *exec_alloc_find(struct exec *ex, uint64_t addr, unsigned *ordinal);
/* Device memory the session holds: every device's arena and the guest's VMM
 * allocations (what the quota counts); and its publication to the
 * observer. */
uint64_t exec_mem_used(const struct exec *ex);
void exec_mem_publish(struct exec *ex);
/* The guest ordinal whose primary context is @ctx; -1 if none. */
int exec_device_of_ctx(const struct exec *ex, uint64_t ctx);

/* exec_peer.c: give each device access to the arena of every device it can
 * reach, at session open (why: exec_peer.c). */
CUresult exec_peers_open(struct exec *ex);
/* Re-apply peer access after a restore (from the journal). */
CUresult exec_peer_restore(struct exec *ex, unsigned ordinal, uint32_t peers);
/* A device-to-device copy, checked; between two devices a peer copy. */
CUresult exec_copy_dtod(struct exec *ex, uint64_t dst, uint64_t src, uint64_t bytes, CUstream s,
			bool async);
/* exec_ipc.c: the allocation at @addr is going: its export (if any) too. */
void exec_ipc_unexport(struct exec *ex, uint64_t addr);
/* exec_ipc.c: an event went: its export, or its being opened, too. */
void exec_ipc_event_destroyed(struct exec *ex, uint64_t event);
/* exec_ipc.c: drop the session's exports and imports (session end). */
void exec_ipc_close(struct exec *ex);
/* Nonzero (with @err) while the session maps another session's memory:
 * that memory is not the session's to snapshot. */
int exec_ipc_snapshot_check(struct exec *ex, char *err, size_t errlen);
#endif
