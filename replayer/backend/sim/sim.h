/* Internal state of the sim backend: a CPU device behind the CUDA driver API.
 *
 * The backend's entry points have the driver's signatures, which carry no
 * backend argument, so the open backend is one process-wide object (as the
 * real driver is): sim_self. Only one sim backend may be open at a time.
 *
 * Locking: one mutex, sim->lock, guards every table below and each device's
 * queue. API entry points take it for their whole body except while they wait
 * (on sim->done). A device thread takes it to pop a command and to publish its
 * completion, never while running the command, so a slow kernel does not block
 * queries. Objects referenced by queued commands (streams, events) are freed
 * only once those commands completed.
 */
#ifndef TERN_SIM_H
#define TERN_SIM_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "sim_kernel.h"

#define SIM_GRANULARITY (2ull << 20)
#define SIM_DEFAULT_MEMORY (16ull << 30)
#define SIM_MAX_DEVICES 16
#define SIM_SMEM_DEFAULT (48u << 10)
#define SIM_SMEM_OPTIN (227u << 10)
#define SIM_SMEM_PER_SM (228u << 10)
#define SIM_SMEM_RESERVED (1u << 10)
#define SIM_SM_COUNT 132
#define SIM_THREADS_PER_SM 2048
#define SIM_BLOCKS_PER_SM 32
#define SIM_REGS_PER_SM 65536
#define SIM_FUNC_REGS 32

struct sim;
struct sim_dev;

enum sim_range_kind {
	SIM_RANGE_RESERVED,     /* cuMemAddressReserve: PROT_NONE */
	SIM_RANGE_MAPPED,       /* cuMemMap inside a reservation */
	SIM_RANGE_HOST,         /* cuMemHostRegister */
	SIM_RANGE_GLOBAL,       /* a module's __device__ variable */
	SIM_RANGE_LINEAR,       /* cuMemAlloc: anonymous memory, read/write */
};

/* One address range known to the device. Reservations and mappings overlap
 * (a mapping lies inside a reservation), so lookups filter by kind. */
struct sim_range {
	struct sim_range *next;
	enum sim_range_kind kind;
	uintptr_t base;
	size_t size;
	int prot;                       /* PROT_* the device may use */
	struct sim_alloc *alloc;        /* MAPPED: backing allocation */
	struct sim_dev *dev;            /* LINEAR: the device it is counted on */
	bool owned;                     /* HOST: from cuMemHostAlloc, ours to unmap */
};

/* A cuMemCreate allocation: a memfd, alive while the handle or a mapping is. */
struct sim_alloc {
	struct sim_alloc *next;
	struct sim_dev *dev;
	int fd;
	size_t size;
	unsigned maps;
	bool released;
	bool exportable;                /* created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
	bool imported;                  /* another process's memory: not counted on a device */
};

enum sim_cmd_kind {
	SIM_CMD_COPY,
	SIM_CMD_MEMSET,
	SIM_CMD_KERNEL,
	SIM_CMD_EVENT,
	SIM_CMD_WAIT,
	SIM_CMD_HOST,           /* a host function or stream callback, on the device thread */
	SIM_CMD_VALUE,          /* cuStreamWaitValue* / cuStreamWriteValue* */
	SIM_CMD_COND,           /* a conditional node, or the reset of its handle to its default */
};

struct sim_cond;
struct sim_graph;

struct sim_func;
struct sim_event;
struct sim_stream;

struct sim_cmd {
	struct sim_cmd *next;
	enum sim_cmd_kind kind;
	struct sim_stream *stream;
	uint64_t seq;                   /* position in the device's FIFO */
	union {
		struct {
			void *dst;
			const void *src;
			size_t bytes;
			void *staging;  /* owned copy of pageable H2D source */
		} copy;
		struct {
			void *dst;
			uint32_t value;
			unsigned elem;  /* 1, 2 or 4 bytes */
			size_t count;
		} memset;
		struct {
			struct sim_func *fn;
			struct sim_launch launch;
			void *block;    /* params, pointer and size arrays */
		} kernel;
		struct {
			struct sim_event *ev;
			uint64_t gen;
		} event;
		struct {
			CUhostFn fn;            /* cuLaunchHostFunc, host nodes */
			CUstreamCallback cb;    /* cuStreamAddCallback (fn NULL) */
			CUstream hstream;       /* as the callback's caller named it */
			void *data;
		} host;
		struct {
			void *addr;
			uint64_t value;
			unsigned width;         /* 4 or 8 bytes */
			unsigned flags;         /* CUstreamWaitValue_flags */
			bool wait;              /* else a write */
		} value;
		struct {
			struct sim_cond *cond;          /* a reference */
			unsigned type, size;            /* CUgraphConditionalNodeType, bodies */
			struct sim_graph **bodies;      /* copies made at launch; NULL: a reset */
		} cond;
	};
};

struct sim_ctx {
	struct sim_dev *dev;
	unsigned refs;                  /* primary context retains */
	unsigned flags;
	bool active;
	CUresult sticky;                /* a kernel fault poisons the context */
	uint32_t peers;                 /* bit d: peer access to device d's memory enabled */
	size_t limits[CU_LIMIT_MAX];
	CUfunc_cache cache_config;
	CUsharedconfig shared_config;
	struct sim_stream *legacy;      /* NULL / CU_STREAM_LEGACY */
	struct sim_stream *per_thread;  /* CU_STREAM_PER_THREAD */
};

struct sim_dev {
	struct sim *sim;
	int ordinal;
	size_t total;
	size_t used;                    /* bytes of live cuMemCreate allocations */
	struct sim_ctx ctx;             /* the primary context */
	pthread_t thread;
	bool thread_started;
	struct sim_cmd *head, *tail;    /* pending commands, FIFO */
	uint64_t submitted, completed;  /* command sequence numbers */
	pthread_cond_t work;
};

struct sim_capture;
struct sim_gnode;

/* Nodes a capturing stream's next operation depends on (sim_capture.c),
 * or a node's dependencies. A capture's set carries the data of the edges
 * its next node takes (@data: parallel to @nodes, NULL while all are
 * default); a node's dependencies keep theirs in the graph (special). */
struct sim_node_set {
	unsigned count, cap;
	struct sim_gnode **nodes;
	CUgraphEdgeData *data;
};

struct sim_stream {
	struct sim_stream *next;
	struct sim_ctx *ctx;
	unsigned flags;
	int priority;
	bool builtin;                   /* a context's NULL or per-thread stream */
	bool destroyed;                 /* freed once its commands completed */
	uint64_t submitted, completed;
	struct sim_capture *capture;    /* the capture it takes part in, or NULL */
	struct sim_node_set cdeps;
	/* cuStreamSetAttribute's values, read back by cuStreamGetAttribute
	 * (the priority attribute is @priority). */
	CUaccessPolicyWindow access_policy;
	CUsynchronizationPolicy sync_policy;
	CUlaunchMemSyncDomainMap domain_map;
	CUlaunchMemSyncDomain domain;
};

struct sim_event {
	struct sim_event *next;
	struct sim_ctx *ctx;
	unsigned flags;
	bool destroyed;
	uint64_t gen;                   /* records enqueued */
	uint64_t done;                  /* records reached by the device */
	uint64_t pending;               /* queued commands and graph nodes referring to it */
	uint64_t time_ns;               /* CLOCK_MONOTONIC of the last one reached */
	struct sim_capture *capture;    /* last recorded in this capture, or NULL */
	struct sim_node_set cdeps;      /* what that record depended on */
};

/* A graph (sim_graph.c): nodes in creation order, each with its
 * dependencies. Every graph is in sim->graphs: the guest's, those embedded
 * in child nodes and executables' private copies. */
struct sim_graph {
	struct sim_graph *next;
	unsigned count, cap;
	struct sim_gnode **nodes;
	bool owned;                     /* embedded in a node or an executable */
	bool body;                      /* a conditional node's body (owned) */
	struct sim_capture *capture;    /* a capture adds to it */
	/* Edges whose data is not default (programmatic dependent launch):
	 * the nodes run in order on the CPU, so the data changes nothing but
	 * what is read back. */
	unsigned nspecial;
	struct sim_edge *special;
};

struct sim_edge {
	const struct sim_gnode *from, *to;
	CUgraphEdgeData data;
};

/* Kernel node attribute ids the sim keeps (CUlaunchAttributeID < this). */
#define SIM_KATTRS 17

struct sim_gnode {
	struct sim_graph *graph;
	unsigned index;                 /* in graph->nodes */
	CUgraphNodeType type;
	struct sim_node_set deps;
	const struct sim_gnode *orig;   /* what it was cloned from */
	bool disabled;                  /* an executable's node: cuGraphNodeSetEnabled(0) */
	union {
		struct {
			struct sim_func *fn;    /* NULL once its module is unloaded */
			unsigned grid[3], block[3], shared_bytes;
			uint8_t *args;          /* packed, fn->param_bytes */
			void **ptrs;            /* into args, for GetParams */
			CUkernelNodeAttrValue *attrs;   /* SIM_KATTRS of them, NULL: all default */
		} kernel;
		CUDA_MEMCPY3D copy;
		CUDA_MEMSET_NODE_PARAMS set;
		CUDA_HOST_NODE_PARAMS host;
		struct sim_event *event;
		struct sim_graph *child;
		struct {
			struct sim_cond *cond;          /* a reference */
			unsigned type, size;
			struct sim_graph **bodies;      /* owned; handed out as the node's phGraph_out */
		} cond;
	};
	unsigned mark;                  /* scratch for walks */
};

/* A conditional handle (sim_graph.c): made for one graph, referenced by
 * the conditional nodes that use it (in copies too). Its value is what
 * device code names it by: cudaGraphSetConditional's CPU form
 * (sim_kernel.h, set_conditional) finds it by value. */
struct sim_cond {
	struct sim_cond *next;
	uint64_t value;
	struct sim_graph *graph;        /* NULL once that graph is gone */
	unsigned refs;                  /* its graph and the nodes and commands using it */
	unsigned default_value, flags;
	unsigned current;               /* the condition, set by kernels */
};

struct sim_exec {
	struct sim_exec *next;
	struct sim_graph *origin;       /* the graph instantiated, NULL once it is gone */
	struct sim_graph *graph;        /* private copy; node->orig: the instantiated graph's */
	unsigned count;
	struct sim_gnode **order;       /* leaf nodes, children flattened, in a topological order */
	unsigned long long flags;
};

struct sim_capture {
	struct sim_capture *next;
	struct sim_graph *graph;
	uint64_t id;
	CUstreamCaptureMode mode;
	pthread_t thread;
	struct sim_stream *origin;
	bool invalidated;
	bool user_graph;                /* cuStreamBeginCaptureToGraph: the graph stays */
	/* The last work of streams destroyed while they took part: it must
	 * lead into the origin's at the end, as a live stream's must. */
	struct sim_node_set departed;
};

/* The guest's graph @hg a capture may add to, after @deps (its nodes). */
CUresult sim_graph_capture_target(struct sim *sim, CUgraph hg, const CUgraphNode *deps, size_t n,
				  struct sim_graph **out);

struct sim_param {
	uint32_t offset;
	uint32_t size;
};

/* A kernel of a loaded image. CUfunction and CUkernel handles both point here:
 * the sim has one device-independent function per kernel. */
struct sim_func {
	struct sim_module *module;
	char *name;
	uint32_t param_count;
	uint32_t param_bytes;
	struct sim_param *params;
	sim_kernel_fn cpu;
	bool warned;                    /* missing CPU kernel logged */
	int attrs[CU_FUNC_ATTRIBUTE_MAX];  /* cuFuncGetAttribute values */
	CUfunc_cache cache_config;
	CUsharedconfig shared_config;
};

struct sim_global {
	char *name;
	void *storage;                  /* page-aligned mmap, a SIM_RANGE_GLOBAL */
	size_t size;
	size_t map_size;
	bool managed;                   /* __managed__: cuLibraryGetManaged finds it */
};

struct sim_module {
	struct sim_module *next;
	struct sim_ctx *ctx;            /* NULL for a library's module */
	struct sim_library *library;    /* owner, if loaded by cuLibraryLoadData */
	uint32_t func_count;
	struct sim_func *funcs;
	uint32_t global_count;
	struct sim_global *globals;
};

struct sim_library {
	struct sim_library *next;
	struct sim_module *module;
};

struct sim_plugin_kernel {
	const char *name;
	sim_kernel_fn fn;
};

struct sim {
	pthread_mutex_t lock;
	pthread_cond_t done;            /* a command completed */
	bool initialized;               /* cuInit called */
	bool stopping;
	bool fault_installed;
	uint64_t generation;            /* tells this open from a previous one */
	unsigned dev_count;
	struct sim_dev *devs;
	struct sim_range *ranges;
	struct sim_alloc *allocs;
	struct sim_stream *streams;
	struct sim_event *events;
	struct sim_module *modules;
	struct sim_library *libraries;
	void **plugins;                 /* dlopen handles */
	unsigned plugin_count;
	struct sim_plugin_kernel *kernels;
	unsigned kernel_count;
	struct sim_graph *graphs;
	struct sim_exec *execs;
	struct sim_cond *conds;
	uint64_t cond_ids;
	struct sim_capture *captures;
	uint64_t capture_ids;
	unsigned walk_mark;             /* sim_gnode.mark of the current walk */
	bool skip_missing;              /* launches of kernels without a CPU version succeed, doing nothing */
	struct sim_array *arrays;       /* sim_array.c: arrays, mipmap levels included */
	struct sim_mipmap *mipmaps;
	struct sim_texobj *texobjs;     /* texture and surface objects, by value */
	uint64_t managed_base;          /* __managed__ variables' window (sim_module.c) */
	uint64_t managed_next;          /* the next one's offset in it */
};

/* Where the sim puts __managed__ variables by default: a window of their
 * own, clear of the default arena (32 TiB), the heap and the libraries in
 * the worker and the guest (which mirrors them at the same address). */
#define SIM_MANAGED_BASE 0x100000000000ull     /* 16 TiB */
#define SIM_MANAGED_SIZE (64ull << 30)

extern struct sim *sim_self;

/* Entry guard: lock and check cuInit; returns with the lock held on success. */
CUresult sim_enter(struct sim **out);
void sim_leave(struct sim *sim);
/* The calling thread's current context, or NULL; lock held. */
struct sim_ctx *sim_ctx_current(struct sim *sim);
/* Current context that is active, else CUDA_ERROR_INVALID_CONTEXT. */
CUresult sim_ctx_require(struct sim *sim, struct sim_ctx **out);

/* Ranges (sim_memory.c); lock held. */
/* Is [ptr, ptr + bytes) device memory the device may access with @prot
 * (mapped with access set, a module global or registered host memory)? */
bool sim_range_device_ok(struct sim *sim, uintptr_t ptr, size_t bytes, int prot);
bool sim_range_host_registered(struct sim *sim, uintptr_t ptr, size_t bytes);
int sim_range_add(struct sim *sim, enum sim_range_kind kind, uintptr_t base, size_t size);
void sim_range_remove(struct sim *sim, enum sim_range_kind kind, uintptr_t base);
void sim_memory_teardown(struct sim *sim);

/* Queue (sim_queue.c); lock held unless said otherwise. */
int sim_dev_start(struct sim_dev *dev);
void sim_dev_stop(struct sim_dev *dev);     /* lock not held */
CUresult sim_stream_resolve(struct sim *sim, CUstream h, struct sim_ctx *ctx,
			    struct sim_stream **out);
struct sim_cmd *sim_cmd_new(enum sim_cmd_kind kind);
/* Queue cmd on stream (takes ownership); returns its sequence number. */
uint64_t sim_cmd_submit(struct sim *sim, struct sim_stream *stream, struct sim_cmd *cmd);
void sim_cmd_free(struct sim_cmd *cmd);
/* Run one command on the device thread, without the lock. */
void sim_cmd_run(struct sim *sim, struct sim_cmd *cmd);
/* A SIM_CMD_COND (sim_graph.c): run without the lock; released with it. */
void sim_cond_run(struct sim *sim, struct sim_cmd *cmd);
void sim_cond_cmd_release(struct sim *sim, struct sim_cmd *cmd);
/* cudaGraphSetConditional for CPU kernels (struct sim_launch). */
void sim_launch_set_conditional(const struct sim_launch *launch, uint64_t handle, unsigned value);
/* Wait until the device of ctx completed seq; drops the lock while waiting. */
void sim_dev_wait(struct sim *sim, struct sim_dev *dev, uint64_t seq);
/* Wait for every device to drain (cuMemUnmap and friends are synchronous). */
void sim_all_wait(struct sim *sim);
CUresult sim_event_lookup(struct sim *sim, CUevent h, struct sim_event **out);
/* Enter, require a current context and resolve a stream in one step;
 * returns with the lock held on success. */
CUresult sim_enter_stream(CUstream h, struct sim **psim, struct sim_stream **ps);
struct sim_stream *sim_stream_new(struct sim_ctx *ctx, unsigned flags, int priority,
				  bool builtin);
void sim_ctx_streams_destroy(struct sim *sim, struct sim_ctx *ctx);

/* Stream memory operations (sim_stream_ops.c): run one on the device
 * thread, without the lock. */
void sim_value_run(struct sim *sim, struct sim_cmd *cmd);
/* Whether a stream memory wait's condition holds now (a write: always). */
bool sim_value_ready(const struct sim_cmd *cmd);

/* Modules (sim_module.c). */
int sim_plugins_load(struct sim *sim, const char *const *paths);
void sim_plugins_unload(struct sim *sim);
void sim_modules_teardown(struct sim *sim, struct sim_ctx *ctx);
/* Run a launch on the device thread; a fault inside the CPU kernel poisons
 * ctx with CUDA_ERROR_ILLEGAL_ADDRESS instead of killing the process. */
void sim_kernel_run(struct sim_cmd *cmd, struct sim_ctx *ctx);
/* Catch faults of CPU kernels: process-wide SIGSEGV/SIGBUS handlers that
 * hand any other fault to the previous handler. */
int sim_fault_install(void);
void sim_fault_uninstall(void);
/* Per device thread: an alternate signal stack, so a kernel's stack
 * overflow is caught too. Returns the stack to free with _release. */
void *sim_fault_thread_init(void);
void sim_fault_thread_release(void *stack);

/* Kernels (sim_module.c), shared by launches and graph kernel nodes; lock held. */
CUresult sim_func_lookup(struct sim *sim, const void *h, struct sim_func **out);
/* Geometry and shared memory against the limits: CUDA_ERROR_INVALID_VALUE. */
CUresult sim_kernel_check(const struct sim_func *f, const unsigned grid[3], const unsigned block[3],
			  unsigned shared_bytes);
/* Arguments from kernelParams or extra, packed at their offsets into @args
 * (f->param_bytes bytes). */
CUresult sim_kernel_args_pack(const struct sim_func *f, void **params, void **extra, uint8_t *args);
/* A launch command with a copy of packed @args; NULL when out of memory. */
struct sim_cmd *sim_kernel_cmd_new(struct sim_func *f, const uint8_t *args, const unsigned grid[3],
				   const unsigned block[3], unsigned shared_bytes);

/* Queue @cmd on @s, or add it to the graph @s is capturing (sim_capture.c).
 * Takes @cmd either way; lock held. */
CUresult sim_stream_enqueue(struct sim *sim, struct sim_stream *s, struct sim_cmd *cmd);
/* Synchronous work: queue on the legacy stream and wait; otherwise as
 * sim_stream_enqueue. Returns the context's sticky error after a wait. */
CUresult sim_stream_enqueue_sync(struct sim *sim, struct sim_stream *s, struct sim_cmd *cmd, bool sync);

/* Arrays (sim_array.c): free every array and object; lock held. */
struct sim_array;
struct sim_mipmap;
struct sim_texobj;
void sim_arrays_teardown(struct sim *sim);

/* Graphs (sim_graph.c); lock held. */
void sim_graphs_forget_funcs(struct sim *sim, const struct sim_func *funcs, unsigned count);
void sim_graphs_teardown(struct sim *sim);
struct sim_graph *sim_graph_new(struct sim *sim, bool owned);
void sim_graph_free(struct sim *sim, struct sim_graph *g);
/* A node appended to @g after @deps (nodes of @g); its parameters are the
 * caller's to fill. NULL when out of memory. */
struct sim_gnode *sim_gnode_add(struct sim_graph *g, CUgraphNodeType type, struct sim_gnode *const *deps,
				unsigned ndeps);
/* An owned deep copy of @g (nodes' orig point at @g's). */
struct sim_graph *sim_graph_clone(struct sim *sim, const struct sim_graph *g, bool owned);
bool sim_graph_live(struct sim *sim, const struct sim_graph *g);
int sim_node_set_add(struct sim_node_set *s, struct sim_gnode *n);
/* Add @n with edge data @e (NULL: default); a node already in the set
 * keeps the data it has. 0, -ENOMEM. */
int sim_node_set_add_data(struct sim_node_set *s, struct sim_gnode *n, const CUgraphEdgeData *e);
/* The edge data of entry @i (default when the set has none). */
CUgraphEdgeData sim_node_set_edge(const struct sim_node_set *s, unsigned i);
/* Whether an entry's edge data is not default. */
bool sim_node_set_special(const struct sim_node_set *s);
/* The set's edge data as an array of @s->count (made all default when it
 * had none), valid until the set changes; NULL when out of memory. */
const CUgraphEdgeData *sim_node_set_data(struct sim_node_set *s);
void sim_node_set_clear(struct sim_node_set *s);
int sim_node_set_copy(struct sim_node_set *dst, const struct sim_node_set *src);
/* Whether an edge out of a node of type @from to one of @to may carry @e,
 * as the driver allows (reserved bytes zero, graph_edge_data_ok). */
bool sim_edge_data_ok(const CUgraphEdgeData *e, CUgraphNodeType from, CUgraphNodeType to);
/* Keep the edge data of @deps (a capture's set) for the edges from them
 * to @to, a node just added after them to @g. 0, -ENOMEM (nothing kept). */
int sim_graph_edges_keep(struct sim_graph *g, const struct sim_node_set *deps, const struct sim_gnode *to);

/* Capture (sim_capture.c); lock held. */
/* Work on the legacy stream while a blocking stream of its context
 * captures: the capture is invalidated, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT. */
CUresult sim_capture_legacy_check(struct sim *sim, struct sim_stream *s);
/* A potentially unsafe call (a synchronous copy or memset) under the
 * calling thread's capture mode: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and
 * the captures that forbid it are invalidated. */
CUresult sim_capture_unsafe_check(struct sim *sim);
/* The stream a copy or memset runs on (sim_memory.c): @h, or the legacy
 * stream when @sync, which a global-mode capture forbids; the capture rules
 * of that stream and the context's sticky error are checked. Lock held. */
CUresult sim_copy_stream(struct sim *sim, CUstream h, bool sync, struct sim_ctx **ctx,
			 struct sim_stream **s);
/* Synchronising a stream or context that captures: the capture is
 * invalidated, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED. @s NULL: any in @ctx. */
CUresult sim_capture_sync_check(struct sim *sim, struct sim_ctx *ctx, struct sim_stream *s);
/* End every capture in @ctx (context teardown) or all (NULL), or one,
 * dropping their graphs. */
void sim_captures_drop(struct sim *sim, struct sim_ctx *ctx);
void sim_captures_drop_one(struct sim *sim, struct sim_capture *cap);
/* An event leaves whatever capture it was recorded in. */
void sim_event_capture_clear(struct sim_event *ev);
/* Record / wait on a capturing stream: CUDA_SUCCESS when handled here,
 * -1 (as CUresult) when @s does not capture and the caller goes on. */
#define SIM_NOT_CAPTURING ((CUresult)-1)
CUresult sim_capture_event_record(struct sim *sim, struct sim_stream *s, struct sim_event *ev,
				  unsigned flags);
CUresult sim_capture_event_wait(struct sim *sim, struct sim_stream *s, struct sim_event *ev,
				unsigned flags);
/* A graph launched into a capturing stream becomes a child node. */
CUresult sim_capture_graph(struct sim *sim, struct sim_stream *s, struct sim_exec *x);

/* Every entry point, sim_<driver name>, declared from its PFN typedef so that
 * a definition with another signature fails to compile. */
#define SIM_DECLARE(name, version) __typeof__(*(PFN_##name##_v##version)0) sim_##name;
BACKEND_ENTRIES(SIM_DECLARE)

#endif
