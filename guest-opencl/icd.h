/* The guest's OpenCL ICD, libtern-opencl.so: what its files share.
 *
 * The Khronos loader finds it through its .icd file and calls it through
 * the dispatch table every object begins with (cl_icd.h). Calls go to ternd
 * through the CUDA shim's connection (tern's guest table,
 * common/tern_guest_table.h), so OpenCL sessions have the shim's
 * transports, lazy batching, replay log and reconnects: enqueues are
 * deferred and their errors surface at the next synchronising call.
 *
 * Every object is a struct cl_gobj first: the dispatch pointer, then the
 * worker's virtual handle. Objects live until the guest's last release;
 * their kind-specific state (sizes, host pointers, maps, argument caches)
 * is what the ICD checks and answers locally. Any thread: the object map
 * and the event order have their own locks.
 */
#ifndef TERN_CL_ICD_H
#define TERN_CL_ICD_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl_icd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "wire_calls.h"

extern cl_icd_dispatch icd_dispatch;

struct cl_gobj {
	cl_icd_dispatch *dispatch;      /* first: the loader's */
	uint64_t handle;                /* the worker's */
	uint32_t kind;                  /* WIRE_HANDLE_CL_* (wire_kinds.h) */
	atomic_uint refs;               /* the application's */
};

struct icd_map {                        /* a mapped region of a memory object */
	struct icd_map *next;
	void *ptr;                      /* what the application got */
	bool owned;                     /* ptr is ours to free (not a host pointer) */
	cl_map_flags flags;
	size_t offset, size;            /* buffers */
	size_t origin[3], region[3];    /* images */
};

/* A kernel argument that succeeded before: the same kind and size again
 * succeeds again, so it can be deferred (icd_kernel_set_arg). */
#define ICD_ARGS_CACHED 64
struct icd_arg_ok {
	uint32_t kind;
	uint64_t size;
};

struct icd_callback {
	struct icd_callback *next;
	cl_int status;                  /* when to call it */
	void (CL_CALLBACK *fn)(cl_event, cl_int, void *);
	void *data;
};

struct icd_destructor {
	struct icd_destructor *next;
	void (CL_CALLBACK *fn)(cl_mem, void *);
	void *data;
};

struct _cl_platform_id { struct cl_gobj o; };
struct _cl_device_id { struct cl_gobj o; cl_device_type type; };
struct _cl_context { struct cl_gobj o; };
struct _cl_command_queue {
	struct cl_gobj o;
	cl_context context;
	bool in_order;                  /* a command done means every earlier one is */
};
struct _cl_sampler { struct cl_gobj o; };
struct _cl_program { struct cl_gobj o; cl_context context; };

struct _cl_mem {
	struct cl_gobj o;
	cl_context context;
	cl_mem_flags flags;
	cl_mem_object_type type;
	size_t size;                    /* buffers */
	void *host_ptr;                 /* CL_MEM_USE_HOST_PTR's */
	size_t elem;                    /* images: bytes per pixel */
	size_t width, height, depth, array;
	pthread_mutex_t lock;           /* maps, destructors */
	struct icd_map *maps;
	unsigned map_count;
	struct icd_destructor *destructors;
};

struct _cl_kernel {
	struct cl_gobj o;
	cl_program program;
	cl_context context;
	uint32_t num_args;
	struct icd_arg_ok ok[ICD_ARGS_CACHED];
};

struct _cl_event {
	struct cl_gobj o;
	cl_context context;
	cl_command_queue queue;
	bool user;
	bool user_status_set;           /* a user event's, under lock; status_set signalled */
	cl_command_type type;
	pthread_mutex_t lock;
	pthread_cond_t status_set;
	struct icd_callback *callbacks;
	cl_int read_error;              /* a non-blocking read's that failed to arrive (enqueue.c) */
};

/* rpc.c */
/* Find tern's guest table (once): false when the shim is not loaded or not tern's. */
bool icd_connect(void);
/* The status of a remote call: a cl_int, or the shim's failure (the
 * session is gone) as CL_OUT_OF_RESOURCES. */
cl_int icd_status(uint32_t res);

/* objects.c: the map from handles to objects. */
/* A new object of @kind for @handle, @bytes large, one reference; NULL
 * without memory. */
void *icd_object_new(uint32_t kind, uint64_t handle, size_t bytes);
/* The object the guest has for @handle, made (with no reference) if the
 * worker named one the guest never saw; NULL for 0 or no memory. */
void *icd_object_of(uint32_t kind, uint64_t handle);
/* Forget @o (its last release). */
void icd_object_free(void *o);
/* Whether @o is a live object of @kind (the application's pointers are checked). */
bool icd_object_valid(const void *o, uint32_t kind);
/* The next event handle, in the order the worker takes them: call with
 * icd_event_lock held until the request naming it is sent. */
uint64_t icd_event_next(void);
extern pthread_mutex_t icd_event_lock;

/* A wait list's handles as cl_handle records, in a buffer of the caller's
 * (@buf: WIRE_REC_CL_HANDLE_BYTES each; heap when more than @cap). Returns
 * the blob, CL_INVALID_EVENT_WAIT_LIST for a bad list. */
cl_int icd_waits(cl_uint n, const cl_event *list, uint8_t *buf, size_t cap, uint8_t **heap,
		 struct wire_blob *out);

/* enqueue.c */
/* A new event object for @handle of @queue's (NULL: a user event of @ctx). */
cl_event icd_event_new(uint64_t handle, cl_command_queue queue, cl_context ctx);

/* A query of the worker's: value into the caller's (param_value_size,
 * param_value, param_value_size_ret), with the guest's objects put where
 * the worker's handles are. */
cl_int icd_info(uint32_t query, uint64_t object, uint64_t other, cl_uint param, const void *input,
		size_t input_size, size_t size, void *value, size_t *size_ret);
/* Answer a query with @bytes of @data, as every clGet*Info does. */
cl_int icd_info_answer(const void *data, size_t bytes, size_t size, void *value, size_t *size_ret);

#endif
