/* The guest shim's internals: tern's libcuda.so.1.
 *
 * Every driver entry point the shim implements is a strong definition marked
 * SHIM_API (the project compiles with -fvisibility=hidden; the version script
 * then limits the exports to the driver's own list). Everything else is
 * hidden.
 *
 * State: one process context (struct shim_process, rpc.c) holds the
 * connection and every cache; each part has its own lock so that a slow round
 * trip never blocks a cache lookup. Per-thread state (the context stack and
 * the reply buffer) is thread-local. After fork() the child drops the parent's
 * connection and caches and starts a new session at its next call.
 */
#ifndef TERN_SHIM_H
#define TERN_SHIM_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "auth.h"
#include "le.h"
#include "ivshmem_bar.h"
#include "replay_ring.h"
#include "shm_chan.h"
#include "tls.h"
#include "wire_client.h"

#define SHIM_API __attribute__((visibility("default")))

/* stats.c: TERN_STATS. Every SHIM_API function's body begins with
 * SHIM_ENTRY() (the shim_entry_marks test checks it), which counts the call
 * for TERN_STATS=2 and charges the requests it makes to it; with the table
 * off it costs a predicted branch. */
struct shim_entry_count {
	const char *name;
	uint64_t calls, round_trips, deferred, local;
	struct shim_entry_count *next;
	int listed;
};

struct shim_entry_scope {
	struct shim_entry_count *entry;         /* NULL: not counted */
	bool nested;                            /* inside another entry point */
	uint64_t sends_before;
};

/* Set once while the library loads (TERN_STATS=2); read-only after. */
extern bool shim_stats_by_entry;
struct shim_entry_scope stats_entry_enter_counted(struct shim_entry_count *e);
void stats_entry_leave_counted(struct shim_entry_scope *s);

static inline struct shim_entry_scope stats_entry_enter(struct shim_entry_count *e)
{
	if (__builtin_expect(!shim_stats_by_entry, 1))
		return (struct shim_entry_scope){ 0 };
	return stats_entry_enter_counted(e);
}

static inline void stats_entry_leave(struct shim_entry_scope *s)
{
	if (__builtin_expect(s->entry || s->nested, 0))
		stats_entry_leave_counted(s);
}

#define SHIM_ENTRY()                                                                              \
	static struct shim_entry_count shim_entry_count_ = { .name = __func__ };                  \
	__attribute__((cleanup(stats_entry_leave))) struct shim_entry_scope shim_entry_scope_ =   \
		stats_entry_enter(&shim_entry_count_)

/* The RPC layer's requests, charged to the thread's entry point. */
void stats_round_trip(void);
void stats_deferred(void);
/* TERN_STATS's value (NULL: unset): 1 or 2 report at exit. */
void stats_configure(const char *level);

/* Devices whose attributes are cached; a larger ordinal asks every time. */
#define SHIM_DEVICE_CACHE 64

/* Function attributes below this one are fixed when the code is compiled
 * (threads per block, static shared/const/local sizes, registers, PTX and
 * binary versions, cache mode): cached at the first answer. The rest can be
 * set, so they are always asked. */
#define SHIM_FUNC_FIXED_ATTRS 8
/* CU_FUNC_ATTRIBUTE_MAX in CUDA 13: a set of a later attribute is always sent. */
#define SHIM_FUNC_ATTRS 16
/* Contexts per kernel whose cuKernelGetFunction answer is kept. */
#define SHIM_KERNEL_CTXS 4
/* Occupancy answers kept per function (the last ones asked). */
#define SHIM_OCC_ANSWERS 8
/* Cluster occupancy answers kept per function (the last ones asked). */
#define SHIM_CLUSTER_ANSWERS 4

/* A kernel's parameter layout, as the worker reported it. */
struct shim_param {
	uint32_t offset;
	uint32_t size;
};

/* A cached cluster occupancy answer (func_table.c). */
struct shim_cluster_answer;

/* What the shim remembers about a function or kernel handle. Entries are
 * never freed while the session lives (handles are never reused within a
 * session), so a pointer returned by func_table_lookup() stays valid; the
 * name is what cuFuncGetName/cuKernelGetName hand out. */
struct shim_func {
	uint64_t handle;
	bool have_params;
	uint32_t param_count;
	uint32_t args_bytes;            /* last offset + size */
	struct shim_param *params;
	char *name;                     /* NULL until asked for */
	uint64_t kernel;                /* the kernel cuKernelGetFunction made it from, or 0 */
	uint32_t attr_known;            /* bit a: attr_value[a] is cached */
	int32_t attr_value[SHIM_FUNC_FIXED_ATTRS];
	/* The driver object behind it, as far as the shim knows: the kernel
	 * it is or was made from, 0 when unknown. A set may change what every
	 * handle of its family answers (a kernel's and its functions' settings
	 * alias), and an unknown one may be of any family. */
	uint64_t family;
	/* Cached answers, all forgotten by func_table_forget_answers(); the
	 * settings and occupancies also by any set in the family. */
	struct {
		uint64_t ctx, function;
	} kernel_fn[SHIM_KERNEL_CTXS];  /* cuKernelGetFunction per context; ctx 0: empty */
	unsigned kernel_fn_next;
	struct shim_func_set {
		bool known;
		bool kernel_set;        /* cuKernelSetAttribute, for @device; else cuFuncSetAttribute */
		int32_t device;
		int32_t value;
		uint64_t ctx;
	} last_set[SHIM_FUNC_ATTRS];    /* the last set of each attribute that worked */
	/* Settable attributes' answers (below SHIM_FUNC_ATTRS), of one way of
	 * asking: cuKernelGetAttribute (device 0) or cuFuncGetAttribute, in
	 * one context. */
	uint32_t settable_known;
	bool settable_kernel;
	uint64_t settable_ctx;
	int32_t settable_value[SHIM_FUNC_ATTRS];
	struct shim_occupancy {
		bool known;
		uint64_t ctx;
		int32_t block_size;
		uint32_t flags;
		uint64_t smem;
		int32_t blocks;
	} occupancy[SHIM_OCC_ANSWERS];
	unsigned occupancy_next;
	/* cuOccupancyMaxActiveClusters / MaxPotentialClusterSize answers, each
	 * its own allocation (a launch configuration with its attributes). */
	struct shim_cluster_answer *cluster[SHIM_CLUSTER_ANSWERS];
	unsigned cluster_next;
	struct shim_func *next;
};

#define SHIM_FUNC_BUCKETS 256
#define SHIM_LOOKUP_BUCKETS 256

/* A host range the shim handed out or registered (cuMemHostAlloc,
 * cuMemHostRegister): pointer attributes answer "host" for it. */
struct shim_host_range {
	uintptr_t base;
	size_t size;
	unsigned flags;
	bool owned;                     /* allocated here: cuMemFreeHost frees it */
	int memfd;                      /* >= 0: shared with the worker (shm transport) */
	bool in_bar;                    /* shared: carved from the ivshmem slot, at bar_offset in it */
	uint64_t bar_offset;
	uint64_t device_addr;           /* shared or mirrored: where kernels reach it */
	bool mirrored;                  /* mapped memory mirrored in arena memory (managed.c) */
	struct shim_host_range *next;
};

/* A context the shim has seen created or retained. */
struct shim_ctx {
	uint64_t handle;
	CUdevice device;
	unsigned flags;
	bool primary;
	struct shim_ctx *next;
};

/* The array a conditional node's phGraph_out points to (graph.c): the
 * guest's handles of its bodies, kept until the graph @graph it was added
 * to is destroyed. */
struct shim_cond_bodies {
	uint64_t graph;
	CUgraph *bodies;
	struct shim_cond_bodies *next;
};

#define SHIM_HOSTFN_BUCKETS 256

/* A host function the worker may ask us to run, by token (hostfn.c). */
struct shim_hostfn {
	uint64_t token;
	CUhostFn fn;                    /* cuLaunchHostFunc, host nodes */
	CUstreamCallback cb;            /* cuStreamAddCallback (fn NULL) */
	CUstream stream;                /* the callback's stream, as the app named it */
	void *data;
	bool oneshot;                   /* forgotten when run; else kept for the process */
	struct shim_host_copy *copy;    /* a graph's host copy (fn, cb NULL); owned */
	struct shim_hostfn *next_token, *next_fn;
};

/* The host end of a graph memcpy node (graph.c, hostfn.c): rows of @width
 * bytes, @pitch apart, @layer_rows rows a layer, from @base (the
 * application's pointer, offsets folded in). */
struct shim_host_copy {
	uint32_t end;                   /* GRAPH_COPY_HOST_SRC or _DST */
	uintptr_t base;
	uint64_t pitch, layer_rows;
	uint64_t width, height, depth;
};

struct shim_pending;

/* The transport under the connection. */
struct shim_conn {
	int fd;                         /* -1 when not connected */
	struct shm_chan shm;            /* the rings, when shm_on */
	bool shm_on;
	/* tls://: the session over fd (common/tls.h), and the certificates
	 * it was verified with, loaded at the first connection and kept. */
	struct tls_conn *tls;
	struct tls_creds *tls_creds;
	bool ivshmem_on;                /* the rings are in a slot of the BAR: no fds on the socket */
	bool moved;                     /* the last hello heard where the session went */
};

/* A libvirt domain's ivshmem BAR (TERN_IVSHMEM or found on the PCI bus),
 * mapped once per process and kept across reconnects and forks. */
struct shim_ivshmem {
	struct ivshmem_guest bar;
	bool bar_tried;                 /* looked for it once; bar.base NULL: none */
	/* The slot the worker assigned (kept across reconnects: pinned buffers
	 * carved from it must find it again): slot_base NULL before the first. */
	uint32_t slot;
	uint8_t *slot_base;
	uint64_t slot_bytes, slot_carve;        /* its size; where buffers may start */
};

/* Where the session is and what proves it is ours. */
struct shim_identity {
	char server[512];
	char session[256];
	struct auth_token token;        /* TERN_TOKEN or TERN_TOKEN_FILE; len 0: none */
	/* The session credential ternd issued in the first hello reply: every
	 * reconnect proves it (common/auth.h). In process memory only, so it
	 * lives through a restore, a CRIU dump or a VM save with the process. */
	uint8_t credential[AUTH_CREDENTIAL_BYTES];
	bool has_credential;
};

/* What the worker's hello reply granted. */
struct shim_grant {
	uint64_t arena_base, arena_size, quota;
	uint32_t worker_pid;
};

/* Requests since the latest durable snapshot, to send again after a
 * restore (docs/checkpoint.md, "Session continuity"). */
struct shim_replay_log {
	struct replay_ring ring;        /* the requests, oldest first; TERN_REPLAY_MAX bytes at most */
	uint64_t durable_seq;           /* requests up to it need no replay */
	uint64_t resume_seq;            /* the worker restored the session at it */
	uint64_t gap;                   /* requests up to it were evicted */
	/* A reply said the session has a snapshot to restore from (its trim
	 * point fell behind it): requests from now on must be replayable. */
	bool snapshot_held;
};

/* The latest round trip whose reply proved work ended (completion.c). */
struct shim_completion {
	uint64_t seq;                   /* its request; 0: none */
	uint64_t ctx;                   /* the context it covers */
	uint64_t stream;                /* the stream whose work ended (0: every one of @ctx) */
	const void *thread;             /* its thread, for CU_STREAM_PER_THREAD */
};

/* Lazy RPC: requests that want no reply wait here, flushed before the
 * next request that does, when full, or by the flusher thread. */
struct shim_batch {
	bool lazy;
	uint8_t *buf;
	size_t len, cap;
	unsigned count;
	uint64_t since_ns;
	pthread_cond_t cond;
	bool flusher_running;
};

/* Staging for pageable copies over shm (staging.c): a memfd the worker
 * maps, a header the worker writes each slot's done ticket into, then the
 * slots it registers; made at the first large pageable copy. @lock
 * serialises the copies through it, as the driver's staging does, and
 * guards everything below it. */
#define SHIM_STAGING_SLOTS_MAX WIRE_STAGING_SLOTS_MAX
/* The threads that copy a piece into or out of a slot (staging_copy.c):
 * @lock guards the current copy's fields; given work only by the holder of
 * the staging's lock. */
#define STAGING_COPY_THREADS_MAX 8u
struct staging_copier {
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	unsigned threads;               /* TERN_SHM_STAGING_THREADS: in all, the caller included */
	unsigned helpers;               /* started */
	bool started;
	uint64_t gen;                   /* of the current copy */
	uint8_t *dst;
	const uint8_t *src;
	size_t n, part;
	unsigned parts, parts_left;
};
struct shim_staging {
	pthread_mutex_t lock;
	int memfd;                      /* -1: none yet */
	uint8_t *map;                   /* the header, then the slots */
	const struct wire_staging_header *header;
	uint8_t *base;                  /* the first slot */
	uint64_t map_bytes, header_bytes, bytes, slot_bytes;
	uint32_t slots;
	bool attached;                  /* this connection's worker has it (conn_lock) */
	bool unavailable;               /* off (TERN_SHM_STAGING=0) or it failed: not tried again */
	uint32_t ticket_last;           /* the last ticket given to a piece (never 0) */
	unsigned ticket_misses;         /* waits in a row whose ticket did not come */
	/* The ticket of the slot's last piece not waited for; 0: none. */
	uint32_t pending[SHIM_STAGING_SLOTS_MAX];
	struct staging_copier copier;
};

/* Host functions by token and, for host nodes, by function and data; the
 * channel their callbacks come on. */
struct shim_hostfn_table {
	bool attached;                  /* this connection's worker has our host-function channel */
	bool wanted;                    /* attach it again after a reconnect */
	int fd;                         /* our end, read by the callback thread; -1 */
	pthread_mutex_t lock;
	struct shim_hostfn *by_token[SHIM_HOSTFN_BUCKETS];
	struct shim_hostfn *by_fn[SHIM_HOSTFN_BUCKETS];
	uint64_t next;
};

/* What the shim knows of one device (device.c): each answer is kept from
 * the first time the worker gave it, and forgotten when the connection is
 * made again (the session may be on another GPU then: a migration or a
 * restore elsewhere), except what the guest did itself: its primary
 * context's retains, which no worker may answer for (a restored worker
 * starts with none). */
#define SHIM_BUS_ID_MAX 64
#define SHIM_NAME_MAX 256
struct shim_device_info {
	int32_t *attrs;                 /* CU_DEVICE_ATTRIBUTE_MAX values, or NULL */
	bool have_handle, have_name, have_uuid, have_total, have_bus_id, have_priorities;
	int32_t handle;                 /* cuDeviceGet of this ordinal */
	char name[SHIM_NAME_MAX];
	uint8_t uuid[16];
	uint64_t total_mem;
	char bus_id[SHIM_BUS_ID_MAX];
	int32_t least_priority, greatest_priority;
	uint8_t peer[SHIM_DEVICE_CACHE]; /* cuDeviceCanAccessPeer + 1: 0 not asked */
	/* The primary context: its handle, the guest's retains less its
	 * releases (a reset ends them), its flags as the worker last said.
	 * @primary_gen counts changes: an answer asked before a change that
	 * came back after it is not kept. */
	uint64_t primary_ctx;
	int primary_refs;
	bool primary_flags_known;
	unsigned primary_flags;
	uint64_t primary_gen;
};

/* What the shim knows of the session's objects; guarded by lock. */
struct shim_cache {
	pthread_mutex_t lock;
	struct shim_device_info devices[SHIM_DEVICE_CACHE];
	bool have_count, have_driver_version;
	int32_t device_count, driver_version;
	uint64_t epoch;                     /* connections made: an answer of an older one is not kept */
	struct shim_func *funcs[SHIM_FUNC_BUCKETS];
	uint64_t answers_gen;               /* cached function answers forgotten: see func_table_forget_answers */
	struct shim_lookup *lookups[SHIM_LOOKUP_BUCKETS]; /* lookup_table.c */
	uint64_t lookups_gen;               /* lookups forgotten: an answer asked before is not kept */
	struct shim_host_range *host_ranges;
	struct shim_ctx *ctxs;
	struct shim_uobj *uobjs;            /* user objects (user_object.c) */
	struct shim_uobj_ref *uobj_refs;    /* references graphs and executables hold */
	struct shim_cond_bodies *cond_bodies;
};

struct shim_process {
	/* Connection; guarded by conn_lock, which serialises sends. Replies are
	 * read by one thread at a time (the reader, @reading), without the
	 * lock, and handed to the round trip of their sequence number. */
	pthread_mutex_t conn_lock;
	pthread_cond_t reply_cond;      /* a reply was handed over, or the reader left */
	struct shim_pending *pending;   /* round trips waiting for their replies */
	bool reading;                   /* a thread reads replies; only it may reconnect */
	bool broken;                    /* a send or read failed: the reader reconnects */
	struct shim_conn conn;
	struct shim_ivshmem ivshmem;
	bool lost;                      /* the session died: calls fail at once */
	pid_t owner;                    /* process that made conn.fd */
	bool forked;                    /* this process is a fork of a shim user */
	bool connected_before;          /* a connection was made: the next is another worker */
	uint64_t seq;
	int reconnect_ms;
	struct shim_identity who;
	struct shim_grant granted;
	struct shim_replay_log replay;
	struct shim_completion completion;      /* guarded by conn_lock */
	struct shim_batch batching;
	struct {
		uint64_t calls, round_trips, batches;
	} stats;
	uint32_t worker_capture_mode;   /* the capture mode last sent to the worker */
	struct shim_hostfn_table hostfn;
	struct shim_staging staging;
	struct shim_cache cache;
};

/* user_object.c: user objects live in the guest only (their destructors are
 * the application's functions). Graphs and executable graphs hold
 * references by their handle; a node index tags those a child graph node
 * holds. The graph calls report what happened to their handles: */
#define SHIM_UOBJ_NODE_NONE 0xffffffffu
/* @owner (a graph or executable) is destroyed: its references go. */
void uobj_owner_drop(uint64_t owner);
/* Node @node of graph @owner is destroyed: the references it held go. */
void uobj_owner_drop_node(uint64_t owner, uint32_t node);
/* @to takes a reference for each of @from's: all under their own node tags
 * (@node NONE, a clone keeps indices), or all under @node (a child graph
 * node, or NONE for an executable). */
void uobj_owner_copy(uint64_t from, uint64_t to, uint32_t node, bool retag);
bool uobj_owner_holds(uint64_t owner);
void uobj_reset(struct shim_process *p);

/* The process context, initialised on first use (logging, environment). */
struct shim_process *shim_process(void);

/* staging.c: a pageable copy of @n bytes through the staging, when the
 * connection has one (*@staged false: the caller copies another way). The
 * copy's CUresult otherwise. */
CUresult staging_copy_htod(uint64_t dst, const void *src, size_t n, uint64_t stream, bool async, bool *staged);
CUresult staging_copy_dtoh(void *dst, uint64_t src, size_t n, uint64_t stream, bool async, bool *staged);
/* A forked child's staging is its parent's pages: dropped. */
void staging_reset(struct shim_process *p);
/* staging_copy.c: the copier's settings (TERN_SHM_STAGING_THREADS), no
 * thread started; a copy of @n bytes, split among the threads when it is
 * large enough. The caller holds the staging's lock. */
void staging_copier_init(struct staging_copier *cp);
void staging_copier_copy(struct staging_copier *cp, void *dst, const void *src, size_t n);

/* rpc.c */
/* rpc_call() that first hands @fd to the worker (shm transport only). */
/* JIT options (link.c): scalar ones forwarded to the worker's linker, the
 * outputs (logs, their sizes, wall time) written back into the app's arrays. */
struct jit_options {
	uint8_t scalars[12 * 40];   /* (u32 option, u64 value) pairs */
	uint32_t scalars_len;
	char *info_log, *error_log;
	size_t info_cap, error_cap;
	void **info_size_slot, **error_size_slot, **wall_slot;
};

CUresult jit_options_parse(unsigned count, CUjit_option *options, void **values,
			   struct jit_options *out);
void jit_options_answer(const struct jit_options *jo, const char *info, const char *error, float wall_ms);
CUresult shim_file_read(const char *path, void **out, size_t *size);

CUresult rpc_call_fd(uint32_t id, struct wire_msg *req, struct wire_cursor *rep, int fd);
/* Connect now if not connected (cuInit does this so that a missing ternd is
 * reported there). CUDA_SUCCESS or the error the app should see. */
CUresult rpc_connect(void);
/* True when [addr, addr+len) lies in the session's device arena. Answers
 * false before the first successful connection. */
bool rpc_arena_contains(uint64_t addr, uint64_t len);
/* The session is gone (every call fails with CUDA_ERROR_DEVICE_UNAVAILABLE):
 * calls answered from caches fail so too. */
bool rpc_session_lost(void);
/* Logged once by each unimplemented entry point (generated defaults). */
void shim_unimplemented_report(const char *name);
/* A request the shim refuses itself, without a round trip (the worker never
 * sees it, so ternd's log cannot name it): SHIM_REFUSE("what", ...) logs why
 * at info, once per call site, and is CUDA_ERROR_NOT_SUPPORTED. */
CUresult shim_refused(atomic_flag *said, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define SHIM_REFUSE(...)                                                       \
	({                                                                     \
		static atomic_flag shim_refuse_said_ = ATOMIC_FLAG_INIT;       \
		shim_refused(&shim_refuse_said_, __VA_ARGS__);                 \
	})

/* The context the calling thread's requests name in their header. */
uint64_t rpc_header_ctx(void);
/* The sequence number of the calling thread's latest round trip that got a
 * reply (0 before the first). */
uint64_t rpc_trip_seq(void);

/* completion.c: synchronisations answered in the guest (the file's comment
 * has the rules). The notes are made right after the successful round trip
 * that proves them, before the thread makes another request; stream
 * handles are as the worker sees them (shim_stream). Any thread. */
/* The thread's latest round trip waited for the work queued on @stream before it. */
void completion_note_stream(uint64_t stream);
/* The thread's latest round trip waited for all of context @ctx's work. */
void completion_note_context(uint64_t ctx);
/* True when a synchronisation of @stream (the calling thread's context)
 * has CUDA_SUCCESS for its only answer: nothing was sent since a proof
 * that covers it. */
bool completion_covers_stream(uint64_t stream);
/* The same for context @ctx as a whole. */
bool completion_covers_context(uint64_t ctx);
/* Forget the proof: the worker that gave it may be gone (a reconnect, the
 * child after fork). conn_lock held. */
void completion_forget_locked(struct shim_process *p);

/* Make sure the worker can call us back (host functions): the channel is
 * opened at the first use and again after every reconnect. CUDA_SUCCESS, or
 * CUDA_ERROR_NOT_SUPPORTED when the transport cannot carry it. */
CUresult rpc_hostfn_ready(void);
/* The staging of pageable copies on this connection's worker (made at the
 * first call, handed over again after a reconnect). CUDA_SUCCESS, or
 * CUDA_ERROR_NOT_SUPPORTED where there is none (not shm, or it failed). */
CUresult rpc_staging_ready(void);

/* hostfn.c */
/* Run the host-function channel on @fd and, over tls://, its session @tls
 * (both taken over, @tls may be NULL) in a thread of its own.
 * 0 or -errno. */
int hostfn_thread_start(int fd, struct tls_conn *tls);
/* True on the thread that runs host functions: CUDA calls are refused there,
 * as the driver forbids them in a host function. */
bool hostfn_in_callback(void);
/* The token a host node's parameters run under (kept for the process; the
 * same for the same function and argument), the channel made ready. */
CUresult hostfn_node_token(const CUDA_HOST_NODE_PARAMS *p, uint64_t *token);
/* The token of a graph memcpy node's host end @c (kept for the process;
 * the same for the same range, shape and direction), the channel made
 * ready: the worker reads or writes the range over the channel when the
 * graph reaches the copy. */
CUresult hostfn_copy_token(const struct shim_host_copy *c, uint64_t *token);
/* The host end a token names; false when none. */
bool hostfn_copy_lookup(uint64_t token, struct shim_host_copy *out);

/* guest_table.c: tern's own export table; true (and *table set) for its UUID. */
bool guest_table_get(const void **table, const CUuuid *id);

/* context.c */
/* The calling thread's current context handle, 0 if none. */
uint64_t ctx_current(void);
/* The device of context @ctx as the shim knows it, without asking: false
 * for 0 or a context it has not seen made. */
bool ctx_device_known(uint64_t ctx, CUdevice *dev);
/* A primary context the process retained, 0 if none. */
uint64_t ctx_primary_any(void);
/* Forget everything about contexts (the child after fork). */
void ctx_table_reset(struct shim_process *p);

/* cache_answer.c: a driver answer kept in the guest. How one kind of
 * answer is found, asked and kept; @call is that kind's question and where
 * its answer goes. */
struct shim_cache_answer_ops {
	/* Copies the kept answer of @call out; false when there is none. */
	bool (*find_locked)(struct shim_process *p, void *call);
	/* Asks the worker (or the driver), without the cache lock. */
	CUresult (*ask)(void *call);
	/* Keeps the answer just asked; only called when nothing was forgotten
	 * since it was asked. */
	void (*remember_locked)(struct shim_process *p, void *call);
	/* What every successful answer tells, kept or not; may be NULL. */
	void (*learned_locked)(struct shim_process *p, void *call);
};
/* The answer of @call: the kept one (unless the session was lost), else
 * asked; a successful one is remembered when *@gen, a counter under the
 * cache lock that every forget of this kind of answer increments, did not
 * change while it was asked. CUDA_SUCCESS or @ask's error. Takes the cache
 * lock; the _locked callbacks run with it held, @ask without. */
CUresult shim_cache_answer(const struct shim_cache_answer_ops *ops, const uint64_t *gen, void *call);

/* func_table.c: parameter layouts and names by function/kernel handle. */
/* Record the layout blob (u32 offset, u32 size pairs) for @handle. 0 or
 * -EINVAL for a malformed blob, -ENOMEM. */
int func_table_set_params(uint64_t handle, const uint8_t *blob, uint32_t len);
/* The entry for @handle, fetching the layout from the worker when unknown.
 * NULL with *@res set when the worker does not know the handle. */
struct shim_func *func_table_get(uint64_t handle, CUresult *res);
/* The handle's name, fetched once with kernel_get_name/func_get_name. */
CUresult func_table_name(uint64_t handle, bool kernel, const char **name);
void func_table_reset(struct shim_process *p);
/* An attribute of a function or kernel (@kernel_get: cuKernelGetAttribute
 * of device 0): from the cache, or asked with @ask and remembered. Fixed
 * ones (SHIM_FUNC_FIXED_ATTRS) are kept until an unload; settable ones
 * until a set in the family, and per context. */
CUresult func_table_attribute(uint64_t handle, unsigned attr, bool kernel_get, int *value,
			      CUresult (*ask)(uint64_t handle, unsigned attr, int *value));
/* A module or library was unloaded, a context destroyed or reset, or the
 * connection made again: every cached answer about functions and kernels
 * (attributes, cuKernelGetFunction, last sets, occupancy, cluster
 * occupancy) and every lookup of a module's function or a library's module
 * (lookup_table_forget_modules_locked) is asked again,
 * so that a handle that ended gets the driver's CUDA_ERROR_INVALID_HANDLE
 * (the shim does not know which handles a module or context made). */
void func_table_forget_answers(void);
/* cuKernelGetFunction of @kernel in the current context: cached, or asked
 * with @ask (which records the function's layout) and remembered. */
CUresult func_table_kernel_function(uint64_t kernel, uint64_t *function,
				    CUresult (*ask)(uint64_t kernel, uint64_t *function));
/* @handle is a kernel from cuLibraryGetKernel: the head of its family. */
void func_table_kernel_seen(uint64_t kernel);
/* A set of @attr to @value on @handle (cuKernelSetAttribute for @device
 * when @kernel_set, else cuFuncSetAttribute): true when it repeats the last
 * set that worked, in the same context, so the driver would answer
 * CUDA_SUCCESS and change nothing. Else the family's settings and
 * occupancies are forgotten and *@gen is what func_table_set_done wants. */
bool func_table_set_repeats(uint64_t handle, unsigned attr, int value, bool kernel_set,
			    int device, uint64_t *gen);
/* After the set was sent: its family forgotten again, and a set that worked
 * remembered when no other forget came between (@gen). */
void func_table_set_done(uint64_t handle, unsigned attr, int value, bool kernel_set, int device,
			 uint64_t gen, CUresult res);
/* Any other change of a function's settings (cache or shared memory
 * config): call before and after it is sent. */
void func_table_settings_changed(uint64_t handle);
/* cuOccupancyMaxActiveBlocksPerMultiprocessor(WithFlags) of one query: cached
 * per context, or asked with @ask and remembered. */
CUresult func_table_occupancy(uint64_t handle, int block_size, uint64_t smem, unsigned flags,
			      int *blocks,
			      CUresult (*ask)(uint64_t handle, int block_size, uint64_t smem,
					      unsigned flags, int *blocks));
/* cuOccupancyMaxActiveClusters / cuOccupancyMaxPotentialClusterSize of
 * @req: cached per function and context for that exact request (its query,
 * dimensions, shared memory and attribute records byte for byte), or asked
 * with @ask and remembered when it succeeds. Forgotten with the other
 * occupancies. */
CUresult func_table_cluster(const struct wire_occupancy_cluster_req *req, int *value,
			    CUresult (*ask)(const struct wire_occupancy_cluster_req *req, int *value));

/* lookup_table.c: lookups the driver answers the same while their owner
 * lives, remembered at the first success (errors are always asked). */
enum lookup_kind {
	LOOKUP_KERNEL = 1,      /* cuLibraryGetKernel: (library, name) -> kernel */
	LOOKUP_KERNEL_LIBRARY,  /* cuKernelGetLibrary: kernel -> library */
	LOOKUP_MODULE,          /* cuLibraryGetModule: (library, current context) -> module */
	LOOKUP_FUNCTION,        /* cuModuleGetFunction: (module, name) -> function */
};
/* The answer of @kind about @owner (and @name, NULL for the kinds without
 * one): remembered, or asked with @ask and remembered when it succeeds and
 * nothing was forgotten meanwhile. A kernel found also answers
 * LOOKUP_KERNEL_LIBRARY. Takes the cache lock; @ask runs without it. */
CUresult lookup_table_answer(enum lookup_kind kind, uint64_t owner, const char *name,
			     uint64_t *answer,
			     CUresult (*ask)(uint64_t owner, const char *name, uint64_t *answer));
/* For lookup_table_kernels_listed: take it before the enumeration is asked. */
uint64_t lookup_table_gen(void);
/* cuLibraryEnumerateKernels answered @kernels of @library. */
void lookup_table_kernels_listed(uint64_t library, const CUkernel *kernels, unsigned count,
				 uint64_t gen);
/* @library was unloaded: its kernels, their library and its modules. */
void lookup_table_library_unloaded(uint64_t library);
/* Modules and contexts may have ended (func_table_forget_answers, cache
 * lock held): every module's function and library's module. */
void lookup_table_forget_modules_locked(struct shim_process *p);
/* Another worker (a reconnect): everything. */
void lookup_table_forget_all(void);
/* The child after fork, with the cache lock held: everything. */
void lookup_table_reset(struct shim_process *p);

/* memory.c */
void host_range_reset(struct shim_process *p);
/* Copies in WIRE_COPY_PIECE pieces. */
CUresult memory_copy_htod(uint64_t dst, const void *src, size_t n, uint64_t stream, bool async);
CUresult memory_copy_dtoh(void *dst, uint64_t src, size_t n, uint64_t stream, bool async);
/* Device to device; between two devices the worker makes it a peer copy. */
CUresult memory_copy_dtod(uint64_t dst, uint64_t src, size_t n, uint64_t stream, bool async);
/* Any direction, told by the arena (cuMemcpy). */
CUresult memory_copy(uint64_t dst, uint64_t src, size_t n, uint64_t stream, bool async);

/* rpc.c: the calling thread's reply buffer set aside (a fault handler's
 * RPC must not overwrite the reply its thread is reading) and put back. */
struct rpc_reply_stash {
	uint8_t *buf;
	size_t cap;
};
void rpc_reply_stash(struct rpc_reply_stash *s);
void rpc_reply_unstash(struct rpc_reply_stash *s);
/* The context the calling thread's requests name while it has none of its
 * own (managed memory is touched from threads that never made one current);
 * returns the previous stand-in, to put back. */
uint64_t rpc_ctx_stand_in(uint64_t ctx);

/* registered.c: host memory registered as mapped, a device copy kept
 * coherent by comparison (the file's comment has the rules). */
/* A device copy of [@host, @host+@len) at *@dev, with the host's bytes. */
CUresult registered_map(uintptr_t host, uint64_t len, uint64_t *dev);
/* The device's writes brought to the host, the device copy freed. */
CUresult registered_unmap(uintptr_t host);
/* Does device address @dev lie in a device copy? */
bool registered_contains(uint64_t dev);
/* Device work on @stream that may read the device copies is about to be
 * sent (@writes: and may write them): the host's writes are pushed. */
CUresult registered_device_access(bool writes, uint64_t stream);
/* A synchronisation returned (@all_work: all of the context's work ended):
 * the device's writes are brought to the host. */
CUresult registered_synchronized(bool all_work);
void registered_session_restored(void);
void registered_fork_lock(void);
void registered_fork_unlock(void);
/* Forget the parent's copies (the child after fork, registered_lock held). */
void registered_reset(void);

/* managed.c: managed memory's host mirror (the file's comment has the rules). */
/* Device work on @stream that may read managed memory is about to be sent:
 * push the host's writes; @writes: it may also write, so host copies become
 * invalid. Nothing for work a capture records (its graph's launch is the
 * coherence point). */
CUresult managed_device_access(bool writes, uint64_t stream);
/* Does @addr lie in a managed mirror (allocation or __managed__ variable)? */
bool managed_contains(uint64_t addr);
/* The allocation (or variable) holding @addr, for pointer attributes. */
bool managed_info(uint64_t addr, uint64_t *base, uint64_t *bytes);
CUresult managed_alloc_mirror(uint64_t addr, uint64_t bytes, unsigned flags);
/* Mapped pinned memory at @addr, device memory of the arena: mirrored and
 * kept coherent as an allocation is, but not managed memory to the
 * application (managed_info, prefetches and advice do not see it); freed
 * with managed_free. */
CUresult managed_pinned_mirror(uint64_t addr, uint64_t bytes);
CUresult managed_variable_mirror(uint64_t addr, uint64_t bytes, uint64_t library);
/* 0, or -ENOENT when @addr starts no managed allocation. */
int managed_free(uint64_t addr);
void managed_drop_owner(uint64_t library);
/* The session was restored from a snapshot (called under conn_lock). */
void managed_session_restored(void);
/* Forget the parent's mirrors (the child after fork, managed_lock held). */
void managed_reset(void);
/* Fork: the shim's locks are all held across fork() (rpc.c's atfork
 * handlers take them in one order: managed, connection, cache, host
 * functions, then the leaf locks: capture, graph kernel arguments, export
 * table storage) and given back in the parent and in the child, so the
 * child never finds one held by a thread it does not have. The primary
 * context's lock (context.c) comes before them all: its holder makes
 * round trips. */
void context_fork_lock(void);
void context_fork_unlock(void);
void managed_fork_lock(void);
void managed_fork_unlock(void);
void capture_fork_lock(void);
void capture_fork_unlock(void);
void graph_exec_fork_lock(void);
void graph_exec_fork_unlock(void);
void export_table_fork_lock(void);
void export_table_fork_unlock(void);
CUresult managed_prefetch(uint64_t addr, uint64_t count, CUmemLocation loc, uint64_t stream);
/* cuMemPrefetchBatchAsync, cuMemDiscardBatchAsync and
 * cuMemDiscardAndPrefetchBatchAsync: every range must lie in one managed
 * mirror; discards (when @discard) come before prefetches (when
 * @prefetch). Checked whole before anything is done. */
struct managed_batch {
	const CUdeviceptr *dptrs;
	const size_t *sizes;
	size_t count;
	const CUmemLocation *locs;
	const size_t *loc_idxs;         /* first operation of each location */
	size_t nlocs;
	unsigned long long flags;
	uint64_t stream;                /* as the worker names it (shim_stream) */
	bool discard, prefetch;
};
CUresult managed_batch(const struct managed_batch *b);
CUresult managed_advise(uint64_t addr, uint64_t count, CUmem_advise advice, CUmemLocation loc);
CUresult managed_range_attributes(void **data, size_t *sizes, CUmem_range_attribute *attrs,
				  size_t n, uint64_t addr, uint64_t count);
CUresult managed_attach(uint64_t stream, uint64_t addr, uint64_t length, unsigned flags);

/* launch.c */
/* A launch's arguments packed by @fn's parameter layout (kernelParams) or
 * as the caller's `extra` buffer: *@buf is malloc'ed (free it) or NULL for
 * none, *@len its length. */
/* Pack @n launch attributes as the wire's launch_attr records into @buf
 * (n * WIRE_REC_LAUNCH_ATTR_BYTES); INVALID_VALUE for more than
 * WIRE_REC_LAUNCH_ATTR_MAX or a NULL array. Handles in values stay the
 * guest's: the worker translates them. */
CUresult launch_attrs_encode(const CUlaunchAttribute *attrs, unsigned n, uint8_t *buf);
CUresult launch_args(uint64_t fn, void **kernelParams, void **extra, uint8_t **buf, uint32_t *len);

/* capture.c */
/* Streams with a capture begun through this process: while there is one,
 * calls that are usually deferred are sent at once, so that an error the
 * driver gives during capture comes back from the call that caused it. */
bool capture_active(void);
/* Is @stream capturing (or may it be: more captures than the table holds)? */
bool capture_tracked(uint64_t stream);
/* A capture begun on @stream (capture.c); @to_graph: into the
 * application's own graph (cuStreamBeginCaptureToGraph). */
void capture_track(uint64_t stream, bool to_graph);
/* The calling thread's capture mode (cuThreadExchangeStreamCaptureMode). */
uint32_t capture_mode_current(void);
/* Forget the parent's captures (the child after fork, capture_lock held). */
void capture_reset(void);
/* The first of @n edge data that is not the default one (all zero: a full
 * dependency), or NULL (also for @edges NULL). Graph edits and captures
 * carry edge data (programmatic dependent launch). */
const CUgraphEdgeData *graph_edge_special(const CUgraphEdgeData *edges, size_t n);
/* @e into the record's fields; false when its reserved bytes are not zero
 * (the driver refuses those: CUDA_ERROR_INVALID_VALUE). */
bool graph_edge_data_put(const CUgraphEdgeData *e, struct wire_rec_graph_edge_data *r);
/* A capture's @n dependencies @deps with their data @edges (NULL: all
 * default) as graph_dep_data records in *@buf (malloc'ed, NULL when @n is
 * 0; free it) and @out. Every node must be of one graph: *@graph when it
 * is not 0, else the first node's, answered in *@graph.
 * CUDA_ERROR_INVALID_VALUE for a node of another graph, a reserved byte
 * set, @deps NULL with @n > 0 or more than a request takes. */
CUresult capture_deps_blob(const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n, uint64_t *graph,
			   uint8_t **buf, struct wire_blob *out);

/* device.c */
/* Forget every device answer and the guest's primary retains (the child after fork). */
void device_cache_reset(struct shim_process *p);
/* A new connection was made (a reconnect, perhaps to another GPU): forget
 * what a worker answered, keep what the guest did. cache.lock not held. */
void device_cache_reconnected(struct shim_process *p);
/* The cached device info of ordinal @dev, or NULL when out of the cache's
 * range; cache.lock held by the caller. */
struct shim_device_info *device_info_locked(struct shim_process *p, CUdevice dev);
/* One attribute, from the per-device cache. */
CUresult device_attribute(CUdevice dev, int attrib, int *value);

/* Virtual handles carry their kind (common/wire.h): the shim can refuse a
 * handle of the wrong kind, or NULL, without a round trip. */
static inline bool handle_kind_is(uint64_t handle, enum wire_handle_kind kind)
{
	return handle && (handle >> WIRE_HANDLE_KIND_SHIFT) == kind;
}

/* Graph nodes are named on the wire by their graph and index; the guest's
 * CUgraphNode packs both: a tag byte, the graph handle's serial (32 bits)
 * and the index (24 bits). */
#define SHIM_NODE_TAG 0x88ull
#define SHIM_NODE_INDEX_BITS 24

static inline CUgraphNode shim_node(uint64_t graph, uint32_t index)
{
	uint64_t serial = graph & ((1ull << WIRE_HANDLE_KIND_SHIFT) - 1);

	if (serial >> 32 || index >> SHIM_NODE_INDEX_BITS)
		return NULL;
	return (CUgraphNode)(uintptr_t)(SHIM_NODE_TAG << 56 | serial << SHIM_NODE_INDEX_BITS | index);
}

static inline bool shim_node_decode(CUgraphNode node, uint64_t *graph, uint32_t *index)
{
	uint64_t v = (uint64_t)(uintptr_t)node;

	if (v >> 56 != SHIM_NODE_TAG)
		return false;
	*graph = (uint64_t)WIRE_HANDLE_GRAPH << WIRE_HANDLE_KIND_SHIFT |
		 ((v >> SHIM_NODE_INDEX_BITS) & 0xffffffffull);
	*index = (uint32_t)(v & ((1u << SHIM_NODE_INDEX_BITS) - 1));
	return true;
}

/* Stream handles as the worker sees them; the per-thread (_ptds, _ptsz) entry points treat
 * the NULL stream as the per-thread default stream. */
static inline uint64_t shim_stream(CUstream s, bool per_thread)
{
	if (!s && per_thread)
		return (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD;
	return (uint64_t)(uintptr_t)s;
}

#endif
