/* The OpenCL executor's core: opening the platform, the dispatch, handles,
 * journals, reference counts, platforms, devices and every query. */
#define LOG_PREFIX "opencl: "

#include "cl_exec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cl_wire.h"
#include "log.h"
#include "wire_cl_dispatch.h"

/* Devices of the host platform the session may see at most. */
#define CL_EXEC_DEVICES_MAX 64

void cl_exec_init(struct cl_exec *x, const struct cl_exec_config *cfg)
{
	memset(x, 0, sizeof(*x));
	if (cfg)
		x->cfg = *cfg;
}

static void reply_bufs_free(struct cl_exec *x)
{
	for (unsigned i = 0; i < x->reply_bufs; i++)
		free(x->reply_buf[i]);
	x->reply_bufs = 0;
}

void *cl_exec_reply_alloc(struct cl_exec *x, size_t bytes)
{
	void *p;

	if (x->reply_bufs == CL_EXEC_REPLY_BUFS)
		return NULL;
	p = malloc(bytes ? bytes : 1);
	if (p)
		x->reply_buf[x->reply_bufs++] = p;
	return p;
}

void cl_journal_free(struct cl_journal *j)
{
	for (uint32_t i = 0; i < j->count; i++)
		free(j->list[i].payload);
	free(j->list);
	memset(j, 0, sizeof(*j));
}

static cl_int journal_put(struct cl_journal *j, uint32_t call, uint32_t tag, bool replace_tag, const void *p,
			  size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);
	struct cl_journal_entry *e = NULL;

	if (!copy)
		return CL_OUT_OF_HOST_MEMORY;
	memcpy(copy, p, len);
	if (replace_tag)
		for (uint32_t i = 0; i < j->count; i++)
			if (j->list[i].call == call && j->list[i].tag == tag)
				e = &j->list[i];
	if (e) {
		free(e->payload);
	} else {
		if (j->count == j->cap) {
			uint32_t cap = j->cap ? j->cap * 2 : 4;
			struct cl_journal_entry *l = realloc(j->list, cap * sizeof(*l));

			if (!l) {
				free(copy);
				return CL_OUT_OF_HOST_MEMORY;
			}
			j->list = l;
			j->cap = cap;
		}
		e = &j->list[j->count++];
	}
	*e = (struct cl_journal_entry){ call, tag, (uint32_t)len, copy };
	return CL_SUCCESS;
}

cl_int cl_journal_note(struct cl_exec *x, struct cl_obj *obj, uint32_t tag, bool replace_tag)
{
	return journal_put(&obj->journal, x->call, tag, replace_tag, x->payload, x->payload_len);
}

cl_int cl_journal_note_msg(struct cl_obj *obj, uint32_t call, const struct wire_msg *m)
{
	uint8_t *p = malloc(m->payload_len ? m->payload_len : 1);
	cl_int ret;

	if (!p || m->failed) {
		free(p);
		return CL_OUT_OF_HOST_MEMORY;
	}
	wire_msg_payload_copy(m, p, m->payload_len);
	ret = journal_put(&obj->journal, call, 0, false, p, m->payload_len);
	free(p);
	return ret;
}

static cl_int invalid_of(enum handle_kind kind)
{
	switch (kind) {
	case HANDLE_CL_PLATFORM: return CL_INVALID_PLATFORM;
	case HANDLE_CL_DEVICE: return CL_INVALID_DEVICE;
	case HANDLE_CL_CONTEXT: return CL_INVALID_CONTEXT;
	case HANDLE_CL_QUEUE: return CL_INVALID_COMMAND_QUEUE;
	case HANDLE_CL_MEM: return CL_INVALID_MEM_OBJECT;
	case HANDLE_CL_SAMPLER: return CL_INVALID_SAMPLER;
	case HANDLE_CL_PROGRAM: return CL_INVALID_PROGRAM;
	case HANDLE_CL_KERNEL: return CL_INVALID_KERNEL;
	case HANDLE_CL_EVENT: return CL_INVALID_EVENT;
	default: return CL_INVALID_VALUE;
	}
}

cl_int cl_exec_handle_lookup(struct cl_exec *x, uint64_t handle, enum handle_kind kind, struct handle_entry **e)
{
	*e = x->handles ? handle_table_get(x->handles, handle, kind) : NULL;
	return *e ? CL_SUCCESS : invalid_of(kind);
}

cl_int cl_exec_object_add(struct cl_exec *x, enum handle_kind kind, void *real, uint64_t context,
			  uint64_t *handle, struct cl_obj **obj)
{
	struct cl_obj *o = calloc(1, sizeof(*o));
	int ret;

	if (!o)
		return CL_OUT_OF_HOST_MEMORY;
	o->refs = 1;
	o->context = context;
	if (x->restore_handle && handle_kind_of(x->restore_handle) == kind) {
		ret = handle_table_add_at(x->handles, x->restore_handle, real, context, o);
		if (!ret)
			*handle = x->restore_handle;
		x->restore_handle = 0;
	} else {
		ret = handle_table_add(x->handles, kind, real, context, o, handle);
	}
	if (ret) {
		free(o);
		return CL_OUT_OF_HOST_MEMORY;
	}
	if (obj)
		*obj = o;
	return CL_SUCCESS;
}

uint64_t cl_exec_handle_of(struct cl_exec *x, enum handle_kind kind, void *real)
{
	struct handle_entry *e;
	struct cl_obj *o;
	uint64_t h = 0;

	if (!real)
		return 0;
	e = handle_table_find_real(x->handles, kind, real);
	if (e)
		return e->handle;
	/* An object the platform made itself (a device's default queue): the
	 * guest may name it but holds no reference of it. */
	if (cl_exec_object_add(x, kind, real, 0, &h, &o) != CL_SUCCESS)
		return 0;
	o->refs = 0;
	return h;
}

cl_int cl_exec_handles_get(struct cl_exec *x, struct wire_blob b, enum handle_kind kind, cl_int bad,
			   void ***out, cl_uint *n)
{
	int count = wire_rec_cl_handle_count(b);
	void **list;

	*out = NULL;
	*n = 0;
	if (count < 0)
		return CL_INVALID_VALUE;
	if (!count)
		return CL_SUCCESS;
	list = calloc((size_t)count, sizeof(*list));
	if (!list)
		return CL_OUT_OF_HOST_MEMORY;
	for (int i = 0; i < count; i++) {
		struct wire_rec_cl_handle r;
		struct handle_entry *e;

		if (wire_rec_cl_handle_get(b, (uint32_t)i, &r) || !(e = handle_table_get(x->handles, r.object, kind))) {
			free(list);
			return bad;
		}
		list[i] = e->real;
	}
	*out = list;
	*n = (cl_uint)count;
	return CL_SUCCESS;
}

cl_int cl_exec_waits_get(struct cl_exec *x, struct wire_blob b, cl_event **out, cl_uint *n)
{
	cl_int ret = cl_exec_handles_get(x, b, HANDLE_CL_EVENT, CL_INVALID_EVENT_WAIT_LIST, (void ***)out, n);

	if (ret != CL_SUCCESS)
		return ret;
	for (cl_uint i = 0; i < *n; i++) {
		struct wire_rec_cl_handle r;
		struct handle_entry *e;

		if (!(*out)[i]) {
			free(*out);
			*out = NULL;
			*n = 0;
			return CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
		}
		/* A snapshot must know whether a command may wait for a user
		 * event that has no status yet (cl_exec_snapshot.c). */
		if (!wire_rec_cl_handle_get(b, i, &r) && (e = handle_table_get(x->handles, r.object, HANDLE_CL_EVENT)))
			((struct cl_obj *)e->info)->waited = true;
	}
	return CL_SUCCESS;
}

cl_int cl_exec_sizes_get(struct wire_blob b, size_t *out, unsigned max, unsigned *n)
{
	int count = wire_rec_cl_size_count(b);

	if (count < 0 || (unsigned)count > max)
		return CL_INVALID_VALUE;
	for (unsigned i = 0; i < max; i++) {
		struct wire_rec_cl_size r = { 0 };

		if (i < (unsigned)count && wire_rec_cl_size_get(b, i, &r))
			return CL_INVALID_VALUE;
		out[i] = (size_t)r.value;
	}
	if (n)
		*n = (unsigned)count;
	return CL_SUCCESS;
}

cl_int cl_exec_event_check(struct cl_exec *x, uint64_t event)
{
	if (!event)
		return CL_SUCCESS;
	if (handle_kind_of(event) != HANDLE_CL_EVENT ||
	    (event & ((1ull << WIRE_HANDLE_KIND_SHIFT) - 1)) != handle_table_next_serial(x->handles, HANDLE_CL_EVENT))
		return CL_INVALID_VALUE;
	return CL_SUCCESS;
}

void cl_exec_event_done(struct cl_exec *x, uint64_t event, cl_int status, cl_event real)
{
	struct cl_obj *o;

	if (!event)
		return;
	x->restore_handle = event;
	if (cl_exec_object_add(x, HANDLE_CL_EVENT, status == CL_SUCCESS ? real : NULL, 0, &event, &o) != CL_SUCCESS) {
		x->restore_handle = 0;
		if (real)
			x->host.clReleaseEvent(real);
		return;
	}
	o->failed = status;
}

/* Open the platform and register its devices, once. */
int cl_exec_open(struct cl_exec *x)
{
	cl_device_id devs[CL_EXEC_DEVICES_MAX];
	cl_uint n = 0;
	uint64_t h;
	int ret;

	if (x->opened || x->open_error)
		return x->open_error;
	ret = cl_host_open(&x->host, x->cfg.library, x->cfg.platform);
	if (!ret && handle_table_create(&x->handles))
		ret = -ENOMEM;
	if (!ret && cl_exec_object_add(x, HANDLE_CL_PLATFORM, x->host.platform, 0, &x->platform, NULL))
		ret = -ENOMEM;
	if (!ret && x->host.clGetDeviceIDs &&
	    x->host.clGetDeviceIDs(x->host.platform, CL_DEVICE_TYPE_ALL, CL_EXEC_DEVICES_MAX, devs, &n) == CL_SUCCESS)
		for (cl_uint i = 0; i < n && i < CL_EXEC_DEVICES_MAX; i++)
			cl_exec_object_add(x, HANDLE_CL_DEVICE, devs[i], 0, &h, NULL);
	if (ret) {
		x->open_error = ret;
		if (x->handles)
			handle_table_destroy(x->handles);
		x->handles = NULL;
		cl_host_close(&x->host);
		return ret;
	}
	x->opened = true;
	return 0;
}

int cl_exec_dispatch(struct cl_exec *x, uint32_t id, struct wire_cursor *payload, struct wire_msg *reply)
{
	reply_bufs_free(x);
	if (cl_exec_open(x)) {
		/* Every call answers that the session has no OpenCL platform. */
		if (id < WIRE_API_OPENCL_FIRST || id > WIRE_API_OPENCL_LAST || !wire_call_name(id))
			return -ENOSYS;
		wire_put_u32(reply, (uint32_t)CL_PLATFORM_NOT_FOUND_KHR);
		return 0;
	}
	x->call = id;
	x->payload = payload->p;
	x->payload_len = (uint32_t)payload->left;
	return wire_cl_dispatch(x, id, payload, reply);
}

bool cl_exec_active(const struct cl_exec *x)
{
	return x->opened;
}

/* The host's release of an object of @kind. */
static cl_int host_release(struct cl_exec *x, enum handle_kind kind, void *real)
{
	if (!real)
		return CL_SUCCESS;
	switch (kind) {
	case HANDLE_CL_CONTEXT: return x->host.clReleaseContext(real);
	case HANDLE_CL_QUEUE: return x->host.clReleaseCommandQueue(real);
	case HANDLE_CL_MEM: return x->host.clReleaseMemObject(real);
	case HANDLE_CL_SAMPLER: return x->host.clReleaseSampler(real);
	case HANDLE_CL_PROGRAM: return x->host.clReleaseProgram(real);
	case HANDLE_CL_KERNEL: return x->host.clReleaseKernel(real);
	case HANDLE_CL_EVENT: return x->host.clReleaseEvent(real);
	default: return CL_SUCCESS;
	}
}

static void object_drop(struct cl_exec *x, struct handle_entry *e)
{
	struct cl_obj *o = e->info;
	uint64_t handle = e->handle;

	if (o && e->kind == HANDLE_CL_EVENT)
		cl_exec_read_forget(x, o, e->real);
	host_release(x, e->kind, e->real);
	if (o) {
		cl_journal_free(&o->journal);
		free(o);
	}
	handle_table_remove(x->handles, handle);
}

struct drop_walk {
	enum handle_kind kind;
	uint64_t found;
};

static int drop_find(struct handle_entry *e, void *arg)
{
	struct drop_walk *w = arg;

	if (e->kind != w->kind)
		return 0;
	w->found = e->handle;
	return 1;
}

void cl_exec_close(struct cl_exec *x)
{
	/* Dependants first: what the platform keeps implicitly goes with them. */
	static const enum handle_kind order[] = { HANDLE_CL_EVENT, HANDLE_CL_KERNEL, HANDLE_CL_PROGRAM,
						  HANDLE_CL_SAMPLER, HANDLE_CL_MEM, HANDLE_CL_QUEUE,
						  HANDLE_CL_CONTEXT, HANDLE_CL_DEVICE, HANDLE_CL_PLATFORM };

	reply_bufs_free(x);
	if (x->handles) {
		for (unsigned k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
			for (;;) {
				struct drop_walk w = { order[k], 0 };
				struct handle_entry *e;

				handle_table_foreach(x->handles, drop_find, &w);
				if (!w.found || !(e = handle_table_get(x->handles, w.found, order[k])))
					break;
				if (order[k] == HANDLE_CL_DEVICE || order[k] == HANDLE_CL_PLATFORM)
					e->real = NULL;   /* the platform's own */
				object_drop(x, e);
			}
		}
		handle_table_destroy(x->handles);
	}
	if (x->opened)
		cl_host_close(&x->host);
	memset(x, 0, sizeof(*x));
}

static bool kind_counted(enum handle_kind k)
{
	return k >= HANDLE_CL_CONTEXT && k <= HANDLE_CL_EVENT;
}

cl_int exec_cl_retain(struct cl_exec *x, const struct wire_cl_retain_req *req, struct wire_cl_retain_rep *rep)
{
	enum handle_kind k = handle_kind_of(req->object);
	struct handle_entry *e;
	struct cl_obj *o;

	if (k == HANDLE_CL_DEVICE || k == HANDLE_CL_PLATFORM)
		return cl_exec_handle_lookup(x, req->object, k, &e);
	if (!kind_counted(k) || cl_exec_handle_lookup(x, req->object, k, &e) != CL_SUCCESS)
		return invalid_of(k);
	o = e->info;
	if (o->refs == UINT32_MAX)
		return CL_OUT_OF_RESOURCES;
	o->refs++;
	return CL_SUCCESS;
}

cl_int exec_cl_release(struct cl_exec *x, const struct wire_cl_release_req *req, struct wire_cl_release_rep *rep)
{
	enum handle_kind k = handle_kind_of(req->object);
	struct handle_entry *e;
	struct cl_obj *o;

	if (k == HANDLE_CL_DEVICE || k == HANDLE_CL_PLATFORM)
		return cl_exec_handle_lookup(x, req->object, k, &e);
	if (!kind_counted(k) || cl_exec_handle_lookup(x, req->object, k, &e) != CL_SUCCESS)
		return invalid_of(k);
	o = e->info;
	if (!o->refs)
		return invalid_of(k);
	if (--o->refs == 0)
		object_drop(x, e);
	return CL_SUCCESS;
}

/* A blob of cl_handle records for @n handles, in a reply buffer. */
static cl_int handles_reply(struct cl_exec *x, const uint64_t *h, unsigned n, struct wire_blob *out)
{
	uint8_t *buf = cl_exec_reply_alloc(x, (size_t)n * WIRE_REC_CL_HANDLE_BYTES);

	if (!buf)
		return CL_OUT_OF_HOST_MEMORY;
	for (unsigned i = 0; i < n; i++)
		wire_rec_cl_handle_put(buf, i, &(struct wire_rec_cl_handle){ h[i] });
	*out = (struct wire_blob){ buf, (uint32_t)(n * WIRE_REC_CL_HANDLE_BYTES) };
	return CL_SUCCESS;
}

cl_int exec_cl_platform_list(struct cl_exec *x, const struct wire_cl_platform_list_req *req,
			     struct wire_cl_platform_list_rep *rep)
{
	return handles_reply(x, &x->platform, 1, &rep->platforms);
}

cl_int exec_cl_device_list(struct cl_exec *x, const struct wire_cl_device_list_req *req,
			   struct wire_cl_device_list_rep *rep)
{
	cl_device_id devs[CL_EXEC_DEVICES_MAX];
	uint64_t h[CL_EXEC_DEVICES_MAX];
	struct handle_entry *e;
	cl_uint n = 0;
	cl_int ret = cl_exec_lookup_cl_platform(x, req->platform, &e);

	if (ret != CL_SUCCESS)
		return ret;
	ret = x->host.clGetDeviceIDs(x->host.platform, (cl_device_type)req->type, CL_EXEC_DEVICES_MAX, devs, &n);
	if (ret != CL_SUCCESS)
		return ret;
	if (n > CL_EXEC_DEVICES_MAX)
		n = CL_EXEC_DEVICES_MAX;
	for (cl_uint i = 0; i < n; i++)
		h[i] = cl_exec_handle_of(x, HANDLE_CL_DEVICE, devs[i]);
	return handles_reply(x, h, n, &rep->devices);
}

/* Queries: where handles lie in their values. */
enum value_shape {
	SHAPE_ONE,              /* one handle */
	SHAPE_ARRAY,            /* an array of handles */
	SHAPE_CONTEXT_PROPS,    /* a context's properties: CL_CONTEXT_PLATFORM's value */
};

struct handle_param {
	uint32_t query, param;
	enum handle_kind kind;
	enum value_shape shape;
};

static const struct handle_param handle_params[] = {
	{ CL_WIRE_QUERY_DEVICE, CL_DEVICE_PLATFORM, HANDLE_CL_PLATFORM, SHAPE_ONE },
	{ CL_WIRE_QUERY_DEVICE, CL_DEVICE_PARENT_DEVICE, HANDLE_CL_DEVICE, SHAPE_ONE },
	{ CL_WIRE_QUERY_CONTEXT, CL_CONTEXT_DEVICES, HANDLE_CL_DEVICE, SHAPE_ARRAY },
	{ CL_WIRE_QUERY_CONTEXT, CL_CONTEXT_PROPERTIES, HANDLE_CL_PLATFORM, SHAPE_CONTEXT_PROPS },
	{ CL_WIRE_QUERY_QUEUE, CL_QUEUE_CONTEXT, HANDLE_CL_CONTEXT, SHAPE_ONE },
	{ CL_WIRE_QUERY_QUEUE, CL_QUEUE_DEVICE, HANDLE_CL_DEVICE, SHAPE_ONE },
	{ CL_WIRE_QUERY_QUEUE, CL_QUEUE_DEVICE_DEFAULT, HANDLE_CL_QUEUE, SHAPE_ONE },
	{ CL_WIRE_QUERY_MEM, CL_MEM_CONTEXT, HANDLE_CL_CONTEXT, SHAPE_ONE },
	{ CL_WIRE_QUERY_MEM, CL_MEM_ASSOCIATED_MEMOBJECT, HANDLE_CL_MEM, SHAPE_ONE },
	{ CL_WIRE_QUERY_IMAGE, CL_IMAGE_BUFFER, HANDLE_CL_MEM, SHAPE_ONE },
	{ CL_WIRE_QUERY_SAMPLER, CL_SAMPLER_CONTEXT, HANDLE_CL_CONTEXT, SHAPE_ONE },
	{ CL_WIRE_QUERY_PROGRAM, CL_PROGRAM_CONTEXT, HANDLE_CL_CONTEXT, SHAPE_ONE },
	{ CL_WIRE_QUERY_PROGRAM, CL_PROGRAM_DEVICES, HANDLE_CL_DEVICE, SHAPE_ARRAY },
	{ CL_WIRE_QUERY_KERNEL, CL_KERNEL_CONTEXT, HANDLE_CL_CONTEXT, SHAPE_ONE },
	{ CL_WIRE_QUERY_KERNEL, CL_KERNEL_PROGRAM, HANDLE_CL_PROGRAM, SHAPE_ONE },
	{ CL_WIRE_QUERY_EVENT, CL_EVENT_COMMAND_QUEUE, HANDLE_CL_QUEUE, SHAPE_ONE },
	{ CL_WIRE_QUERY_EVENT, CL_EVENT_CONTEXT, HANDLE_CL_CONTEXT, SHAPE_ONE },
};

/* Queries the guest's count answers: the platform's includes its own. */
static bool param_is_refcount(uint32_t query, uint32_t param)
{
	switch (query) {
	case CL_WIRE_QUERY_CONTEXT: return param == CL_CONTEXT_REFERENCE_COUNT;
	case CL_WIRE_QUERY_QUEUE: return param == CL_QUEUE_REFERENCE_COUNT;
	case CL_WIRE_QUERY_MEM: return param == CL_MEM_REFERENCE_COUNT;
	case CL_WIRE_QUERY_SAMPLER: return param == CL_SAMPLER_REFERENCE_COUNT;
	case CL_WIRE_QUERY_PROGRAM: return param == CL_PROGRAM_REFERENCE_COUNT;
	case CL_WIRE_QUERY_KERNEL: return param == CL_KERNEL_REFERENCE_COUNT;
	case CL_WIRE_QUERY_EVENT: return param == CL_EVENT_REFERENCE_COUNT;
	case CL_WIRE_QUERY_DEVICE: return param == CL_DEVICE_REFERENCE_COUNT;
	default: return false;
	}
}

static enum handle_kind query_kind(uint32_t query)
{
	switch (query) {
	case CL_WIRE_QUERY_PLATFORM: return HANDLE_CL_PLATFORM;
	case CL_WIRE_QUERY_DEVICE: return HANDLE_CL_DEVICE;
	case CL_WIRE_QUERY_CONTEXT: return HANDLE_CL_CONTEXT;
	case CL_WIRE_QUERY_QUEUE: return HANDLE_CL_QUEUE;
	case CL_WIRE_QUERY_MEM: case CL_WIRE_QUERY_IMAGE: return HANDLE_CL_MEM;
	case CL_WIRE_QUERY_SAMPLER: return HANDLE_CL_SAMPLER;
	case CL_WIRE_QUERY_PROGRAM: case CL_WIRE_QUERY_PROGRAM_BUILD: return HANDLE_CL_PROGRAM;
	case CL_WIRE_QUERY_KERNEL: case CL_WIRE_QUERY_KERNEL_WORK_GROUP: case CL_WIRE_QUERY_KERNEL_ARG:
	case CL_WIRE_QUERY_KERNEL_SUB_GROUP:
		return HANDLE_CL_KERNEL;
	case CL_WIRE_QUERY_EVENT: case CL_WIRE_QUERY_EVENT_PROFILING: return HANDLE_CL_EVENT;
	default: return 0;
	}
}

/* One clGet*Info of @query on @obj: @size bytes into @value (NULL: the size
 * into *@size_ret). */
static cl_int info_call(struct cl_exec *x, uint32_t query, void *obj, void *other_obj, uint64_t other,
			uint32_t param, struct wire_blob input, size_t size, void *value, size_t *size_ret)
{
	struct cl_host *h = &x->host;

	switch (query) {
	case CL_WIRE_QUERY_PLATFORM: return h->clGetPlatformInfo(obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_DEVICE: return h->clGetDeviceInfo(obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_CONTEXT: return h->clGetContextInfo(obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_QUEUE: return h->clGetCommandQueueInfo(obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_MEM: return h->clGetMemObjectInfo(obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_IMAGE: return h->clGetImageInfo(obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_SAMPLER: return h->clGetSamplerInfo(obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_PROGRAM: return h->clGetProgramInfo(obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_PROGRAM_BUILD: return h->clGetProgramBuildInfo(obj, other_obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_KERNEL: return h->clGetKernelInfo(obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_KERNEL_WORK_GROUP:
		return h->clGetKernelWorkGroupInfo(obj, other_obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_KERNEL_ARG:
		if (other > UINT32_MAX)
			return CL_INVALID_ARG_INDEX;
		return h->clGetKernelArgInfo ? h->clGetKernelArgInfo(obj, (cl_uint)other, param, size, value, size_ret)
					     : CL_INVALID_OPERATION;
	case CL_WIRE_QUERY_KERNEL_SUB_GROUP:
		return h->clGetKernelSubGroupInfo ? h->clGetKernelSubGroupInfo(obj, other_obj, param, input.len,
									       input.len ? input.ptr : NULL, size,
									       value, size_ret)
						  : CL_INVALID_OPERATION;
	case CL_WIRE_QUERY_EVENT: return h->clGetEventInfo(obj, param, size, value, size_ret);
	case CL_WIRE_QUERY_EVENT_PROFILING: return h->clGetEventProfilingInfo(obj, param, size, value, size_ret);
	default: return CL_INVALID_VALUE;
	}
}

/* A restored event's command type and profiling counters are those of the
 * command it stands in for; @handled says whether this answered. */
static cl_int restored_event_info(struct cl_exec *x, const struct cl_obj *o, uint32_t query, uint32_t param,
				  struct wire_blob *value, bool *handled)
{
	void *v;
	size_t n;

	*handled = false;
	if (query == CL_WIRE_QUERY_EVENT && param == CL_EVENT_COMMAND_TYPE) {
		n = sizeof(cl_command_type);
	} else if (query == CL_WIRE_QUERY_EVENT_PROFILING) {
		if (param < CL_PROFILING_COMMAND_QUEUED || param > CL_PROFILING_COMMAND_COMPLETE)
			return CL_SUCCESS;      /* the platform answers the error */
		*handled = true;
		if (!o->restored_profiled)
			return CL_PROFILING_INFO_NOT_AVAILABLE;
		n = sizeof(cl_ulong);
	} else {
		return CL_SUCCESS;
	}
	*handled = true;
	v = cl_exec_reply_alloc(x, n);
	if (!v)
		return CL_OUT_OF_HOST_MEMORY;
	if (query == CL_WIRE_QUERY_EVENT)
		*(cl_command_type *)v = o->restored_command_type;
	else
		*(cl_ulong *)v = o->restored_profiling[param - CL_PROFILING_COMMAND_QUEUED];
	*value = (struct wire_blob){ v, (uint32_t)n };
	return CL_SUCCESS;
}

/* A failed event's answers: it never ran. */
static cl_int failed_event_info(struct cl_exec *x, const struct cl_obj *o, uint32_t query, uint32_t param,
				struct wire_blob *value)
{
	cl_int *v;

	if (query != CL_WIRE_QUERY_EVENT || param != CL_EVENT_COMMAND_EXECUTION_STATUS)
		return query == CL_WIRE_QUERY_EVENT_PROFILING ? CL_PROFILING_INFO_NOT_AVAILABLE : CL_INVALID_EVENT;
	v = cl_exec_reply_alloc(x, sizeof(*v));
	if (!v)
		return CL_OUT_OF_HOST_MEMORY;
	*v = o->failed;
	*value = (struct wire_blob){ (const uint8_t *)v, sizeof(*v) };
	return CL_SUCCESS;
}

cl_int exec_cl_get_info(struct cl_exec *x, const struct wire_cl_get_info_req *req, struct wire_cl_get_info_rep *rep)
{
	enum handle_kind kind = query_kind(req->query);
	struct handle_entry *e, *oe = NULL;
	struct wire_rec_cl_handle_at *at;
	size_t size = 0;
	uint8_t *value;
	unsigned nat = 0, cap_at;
	cl_int ret;

	if (!kind)
		return CL_INVALID_VALUE;
	ret = cl_exec_handle_lookup(x, req->object, kind, &e);
	if (ret != CL_SUCCESS)
		return ret;
	if (req->query == CL_WIRE_QUERY_PROGRAM_BUILD || req->query == CL_WIRE_QUERY_KERNEL_SUB_GROUP ||
	    (req->query == CL_WIRE_QUERY_KERNEL_WORK_GROUP && req->other)) {
		ret = cl_exec_handle_lookup(x, req->other, HANDLE_CL_DEVICE, &oe);
		if (ret != CL_SUCCESS)
			return ret;
	}
	if (req->input.len > 64)
		return CL_INVALID_VALUE;
	if (kind == HANDLE_CL_EVENT && !e->real)
		return failed_event_info(x, e->info, req->query, req->param, &rep->value);
	if (kind == HANDLE_CL_EVENT && ((struct cl_obj *)e->info)->restored) {
		bool handled;

		ret = restored_event_info(x, e->info, req->query, req->param, &rep->value, &handled);
		if (handled)
			return ret;
	}
	if (param_is_refcount(req->query, req->param)) {
		cl_uint *v = cl_exec_reply_alloc(x, sizeof(*v));

		if (!v)
			return CL_OUT_OF_HOST_MEMORY;
		*v = kind == HANDLE_CL_DEVICE ? 1 : ((struct cl_obj *)e->info)->refs;
		rep->value = (struct wire_blob){ (const uint8_t *)v, sizeof(*v) };
		return CL_SUCCESS;
	}
	ret = info_call(x, req->query, e->real, oe ? oe->real : NULL, req->other, req->param, req->input, 0, NULL,
			&size);
	if (ret != CL_SUCCESS)
		return ret;
	if (size > CL_WIRE_INFO_MAX)
		return CL_OUT_OF_RESOURCES;
	if (!size)
		return CL_SUCCESS;      /* nothing to read: platforms may not take a buffer of 0 bytes */
	value = cl_exec_reply_alloc(x, size);
	if (!value)
		return CL_OUT_OF_HOST_MEMORY;
	memset(value, 0, size);
	ret = info_call(x, req->query, e->real, oe ? oe->real : NULL, req->other, req->param, req->input, size,
			value, NULL);
	if (ret != CL_SUCCESS)
		return ret;
	rep->value = (struct wire_blob){ value, (uint32_t)size };
	for (size_t i = 0; i < sizeof(handle_params) / sizeof(handle_params[0]); i++) {
		const struct handle_param *hp = &handle_params[i];

		if (hp->query != req->query || hp->param != req->param)
			continue;
		cap_at = (unsigned)(size / sizeof(void *));
		at = cl_exec_reply_alloc(x, (size_t)cap_at * WIRE_REC_CL_HANDLE_AT_BYTES);
		if (!at)
			return CL_OUT_OF_HOST_MEMORY;
		for (size_t off = 0; off + sizeof(void *) <= size; off += sizeof(void *)) {
			void *real;
			uint64_t v;

			if (hp->shape == SHAPE_ONE && off)
				break;
			if (hp->shape == SHAPE_CONTEXT_PROPS) {
				/* Pairs: only CL_CONTEXT_PLATFORM's value is a handle. */
				cl_context_properties key;

				memcpy(&key, value + off, sizeof(key));
				off += sizeof(void *);
				if (!key || off + sizeof(void *) > size)
					break;
				if (key != CL_CONTEXT_PLATFORM)
					continue;
			}
			memcpy(&real, value + off, sizeof(real));
			v = cl_exec_handle_of(x, hp->kind, real);
			memcpy(value + off, &v, sizeof(v));
			wire_rec_cl_handle_at_put((uint8_t *)at, nat++,
						  &(struct wire_rec_cl_handle_at){ (uint32_t)off, hp->kind });
		}
		rep->handles = (struct wire_blob){ (const uint8_t *)at, nat * WIRE_REC_CL_HANDLE_AT_BYTES };
		break;
	}
	return CL_SUCCESS;
}

cl_int exec_cl_unload_compiler(struct cl_exec *x, const struct wire_cl_unload_compiler_req *req,
			       struct wire_cl_unload_compiler_rep *rep)
{
	struct handle_entry *e;
	cl_int ret = cl_exec_lookup_cl_platform(x, req->platform, &e);

	if (ret != CL_SUCCESS)
		return ret;
	return x->host.clUnloadPlatformCompiler ? x->host.clUnloadPlatformCompiler(x->host.platform) : CL_SUCCESS;
}
