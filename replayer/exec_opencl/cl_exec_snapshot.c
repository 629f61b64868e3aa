/* Snapshots and restores of a session's OpenCL objects (cl_exec.h;
 * docs/opencl.md, "Snapshots"; docs/journal.md, "OpenCL objects").
 *
 * Each object the guest holds is kept as the requests that recreate it,
 * which the executor gathers as it serves them (struct cl_journal): a save
 * writes them, encoded (common/cl_saved.h), as a journal image named by the
 * object's record, with a memory object's contents as an image of its own
 * (OpenCL memory is not the arena's, so the snapshot data path does not see
 * it; the same as CUDA arrays). A restore replays the requests through the
 * dispatcher, under the objects' old handles: what a snapshot holds is
 * checked as a guest's requests are.
 *
 * Events: a snapshot finishes every queue, so each command's event has
 * completed (or ended with an error); a restore stands a marker on its
 * queue in for it (a user event set to its status where the queue is gone
 * or it ended with an error), answering the command's type and profiling
 * counters. A user event comes back with its status, or without one when
 * nothing waits for it; one without a status that a command waits for
 * refuses the snapshot, since finishing that command's queue would wait
 * for ever. A non-blocking read the guest has not fetched (complete once
 * the queues are finished) keeps its bytes as its event's contents, held
 * again under the event by a restore. */
#define LOG_PREFIX "opencl: "

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_exec.h"
#include "cl_saved.h"
#include "cl_wire.h"
#include "log.h"
#include "tracker.h"
#include "wire_cl_dispatch.h"

/* A record's args: its description's hash, then its contents' (zero: none). */
#define RECORD_ARGS (2 * TRACKER_HASH_SIZE)

_Static_assert(CL_WIRE_LAZY_READ_MAX <= TRACKER_IMAGE_MAX, "a non-blocking read's bytes fit one journal image");

/* Restore order: what an object's requests name comes before it (handles
 * grow, so within a kind the older first: a sub-buffer after its buffer, a
 * linked program after its inputs). */
static const uint32_t restore_order[] = { HANDLE_CL_CONTEXT, HANDLE_CL_QUEUE, HANDLE_CL_MEM, HANDLE_CL_SAMPLER,
					  HANDLE_CL_PROGRAM, HANDLE_CL_KERNEL, HANDLE_CL_EVENT };

static bool kind_is_cl(uint32_t kind)
{
	return kind >= CL_SAVED_KIND_FIRST && kind <= CL_SAVED_KIND_LAST;
}

/* Queues of the executor's own, one per context, for contents. */
struct own_queues {
	struct {
		uint64_t context;
		cl_command_queue q;
	} list[16];
	unsigned n;
};

static void own_queues_release(struct cl_exec *x, struct own_queues *oq)
{
	for (unsigned i = 0; i < oq->n; i++)
		x->host.clReleaseCommandQueue(oq->list[i].q);
	oq->n = 0;
}

static cl_int own_queue(struct cl_exec *x, struct own_queues *oq, uint64_t context, cl_command_queue *out)
{
	struct handle_entry *ce;
	cl_device_id dev;
	cl_int ret;

	for (unsigned i = 0; i < oq->n; i++)
		if (oq->list[i].context == context) {
			*out = oq->list[i].q;
			return CL_SUCCESS;
		}
	if (oq->n == sizeof(oq->list) / sizeof(oq->list[0]))
		own_queues_release(x, oq);
	if ((ret = cl_exec_handle_lookup(x, context, HANDLE_CL_CONTEXT, &ce)) != CL_SUCCESS)
		return ret;
	ret = x->host.clGetContextInfo(ce->real, CL_CONTEXT_DEVICES, sizeof(dev), &dev, NULL);
	if (ret != CL_SUCCESS && ret != CL_INVALID_VALUE)
		return ret;
	if (ret == CL_INVALID_VALUE) {
		/* More than one device: the first will do. */
		size_t n = 0;
		cl_device_id *devs;

		if ((ret = x->host.clGetContextInfo(ce->real, CL_CONTEXT_DEVICES, 0, NULL, &n)) != CL_SUCCESS || !n)
			return ret ? ret : CL_INVALID_CONTEXT;
		devs = malloc(n);
		if (!devs)
			return CL_OUT_OF_HOST_MEMORY;
		ret = x->host.clGetContextInfo(ce->real, CL_CONTEXT_DEVICES, n, devs, NULL);
		dev = devs[0];
		free(devs);
		if (ret != CL_SUCCESS)
			return ret;
	}
	*out = x->host.clCreateCommandQueueWithProperties(ce->real, dev, NULL, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	oq->list[oq->n].context = context;
	oq->list[oq->n++].q = *out;
	return CL_SUCCESS;
}

/* An image's packed extent (cl_saved.h: contents are packed, no padding). */
static cl_int image_extent(struct cl_exec *x, cl_mem img, uint32_t type, size_t region[3], size_t *elem)
{
	size_t w = 0, h = 0, d = 0, arr = 0;
	cl_uint mips = 0;
	cl_int ret;

	if ((ret = x->host.clGetImageInfo(img, CL_IMAGE_ELEMENT_SIZE, sizeof(*elem), elem, NULL)) != CL_SUCCESS ||
	    (ret = x->host.clGetImageInfo(img, CL_IMAGE_WIDTH, sizeof(w), &w, NULL)) != CL_SUCCESS ||
	    (ret = x->host.clGetImageInfo(img, CL_IMAGE_HEIGHT, sizeof(h), &h, NULL)) != CL_SUCCESS ||
	    (ret = x->host.clGetImageInfo(img, CL_IMAGE_DEPTH, sizeof(d), &d, NULL)) != CL_SUCCESS ||
	    (ret = x->host.clGetImageInfo(img, CL_IMAGE_ARRAY_SIZE, sizeof(arr), &arr, NULL)) != CL_SUCCESS)
		return ret;
	if (x->host.clGetImageInfo(img, CL_IMAGE_NUM_MIP_LEVELS, sizeof(mips), &mips, NULL) == CL_SUCCESS && mips > 1)
		return CL_IMAGE_FORMAT_NOT_SUPPORTED;
	region[0] = w;
	region[1] = region[2] = 1;
	switch (type) {
	case CL_MEM_OBJECT_IMAGE1D_ARRAY: region[1] = arr; break;
	case CL_MEM_OBJECT_IMAGE2D: region[1] = h; break;
	case CL_MEM_OBJECT_IMAGE2D_ARRAY: region[1] = h; region[2] = arr; break;
	case CL_MEM_OBJECT_IMAGE3D: region[1] = h; region[2] = d; break;
	case CL_MEM_OBJECT_IMAGE1D: break;
	default: return CL_INVALID_MEM_OBJECT;
	}
	return CL_SUCCESS;
}

/* The bytes of memory object @m: a buffer's, or an image's packed. */
static cl_int mem_bytes(struct cl_exec *x, const struct handle_entry *m, size_t region[3], uint64_t *bytes)
{
	const struct cl_obj *o = m->info;
	size_t elem = 0;
	cl_int ret;

	if (o->mem_type == CL_MEM_OBJECT_BUFFER) {
		*bytes = o->size;
		return CL_SUCCESS;
	}
	ret = image_extent(x, m->real, o->mem_type, region, &elem);
	if (ret == CL_SUCCESS)
		*bytes = (uint64_t)elem * region[0] * region[1] * region[2];
	return ret;
}

/* Move the contents of @m to (@write false) or from the host. A memory
 * object the host may not read (or write) goes through a staging buffer of
 * the executor's, copied on the device. */
static cl_int mem_transfer(struct cl_exec *x, struct own_queues *oq, const struct handle_entry *m, bool write,
			   void *buf, uint64_t bytes)
{
	const struct cl_obj *o = m->info;
	size_t origin[3] = { 0, 0, 0 }, region[3] = { 1, 1, 1 };
	cl_mem_flags denied = write ? CL_MEM_HOST_NO_ACCESS | CL_MEM_HOST_READ_ONLY
				    : CL_MEM_HOST_NO_ACCESS | CL_MEM_HOST_WRITE_ONLY;
	bool image = o->mem_type != CL_MEM_OBJECT_BUFFER;
	struct handle_entry *ce;
	cl_command_queue q;
	cl_mem staging = NULL;
	uint64_t check;
	cl_int ret;

	if ((ret = own_queue(x, oq, o->context, &q)) != CL_SUCCESS ||
	    (ret = mem_bytes(x, m, region, &check)) != CL_SUCCESS)
		return ret;
	if (check != bytes)
		return CL_INVALID_BUFFER_SIZE;
	if (!(o->flags & denied)) {
		if (image)
			return write ? x->host.clEnqueueWriteImage(q, m->real, CL_TRUE, origin, region, 0, 0, buf, 0, NULL,
								    NULL)
				     : x->host.clEnqueueReadImage(q, m->real, CL_TRUE, origin, region, 0, 0, buf, 0, NULL,
								  NULL);
		return write ? x->host.clEnqueueWriteBuffer(q, m->real, CL_TRUE, 0, bytes, buf, 0, NULL, NULL)
			     : x->host.clEnqueueReadBuffer(q, m->real, CL_TRUE, 0, bytes, buf, 0, NULL, NULL);
	}
	if ((ret = cl_exec_handle_lookup(x, o->context, HANDLE_CL_CONTEXT, &ce)) != CL_SUCCESS)
		return ret;
	staging = x->host.clCreateBuffer(ce->real, CL_MEM_READ_WRITE | (write ? CL_MEM_COPY_HOST_PTR : 0), bytes,
					 write ? buf : NULL, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	if (write)
		ret = image ? x->host.clEnqueueCopyBufferToImage(q, staging, m->real, 0, origin, region, 0, NULL, NULL)
			    : x->host.clEnqueueCopyBuffer(q, staging, m->real, 0, 0, bytes, 0, NULL, NULL);
	else
		ret = image ? x->host.clEnqueueCopyImageToBuffer(q, m->real, staging, origin, region, 0, 0, NULL, NULL)
			    : x->host.clEnqueueCopyBuffer(q, m->real, staging, 0, 0, bytes, 0, NULL, NULL);
	if (ret == CL_SUCCESS && !write)
		ret = x->host.clEnqueueReadBuffer(q, staging, CL_TRUE, 0, bytes, buf, 0, NULL, NULL);
	if (ret == CL_SUCCESS)
		ret = x->host.clFinish(q);
	x->host.clReleaseMemObject(staging);
	return ret;
}

/* ---- save ---- */

struct save_list {
	uint64_t *h;
	unsigned n, cap;
	int err;
};

static int list_add(struct save_list *l, uint64_t h)
{
	if (l->n == l->cap) {
		unsigned cap = l->cap ? l->cap * 2 : 64;
		uint64_t *p = realloc(l->h, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		l->h = p;
		l->cap = cap;
	}
	l->h[l->n++] = h;
	return 0;
}

static int collect_live(struct handle_entry *e, void *arg)
{
	struct save_list *l = arg;

	if (e->kind < HANDLE_CL_CONTEXT || e->kind > HANDLE_CL_EVENT)
		return 0;
	l->err = list_add(l, e->handle);
	return l->err;
}

static int handle_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* What the guest holds: an object the platform made and the guest was only
 * told of (a device's default queue) has no requests and no reference. */
static bool object_kept(const struct handle_entry *e)
{
	const struct cl_obj *o = e->info;

	return o && o->refs;
}

static bool is_user_event(const struct cl_obj *o)
{
	return o->journal.count && o->journal.list[0].call == WIRE_CALL_CL_USER_EVENT_CREATE;
}

static bool live(struct cl_exec *x, uint64_t h)
{
	return h && handle_table_get(x->handles, h, handle_kind_of(h));
}

/* What would make the snapshot impossible, before anything is finished or
 * written. */
static int save_check(struct cl_exec *x, const struct save_list *l, char *err, size_t errlen)
{
	for (unsigned i = 0; i < l->n; i++) {
		struct handle_entry *e = handle_table_get(x->handles, l->h[i], handle_kind_of(l->h[i]));
		struct cl_obj *o = e->info;
		uint64_t dep = o->parent && !live(x, o->parent) ? o->parent : o->context && !live(x, o->context) ? o->context : 0;
		cl_int st = CL_COMPLETE;

		if (!object_kept(e))
			continue;
		if (!dep && e->kind == HANDLE_CL_EVENT && e->real && !is_user_event(o)) {
			/* A command's event comes back in its context. */
			cl_context c = NULL;

			x->host.clGetEventInfo(e->real, CL_EVENT_CONTEXT, sizeof(c), &c, NULL);
			if (!c || !handle_table_find_real(x->handles, HANDLE_CL_CONTEXT, c))
				dep = (uint64_t)HANDLE_CL_CONTEXT << WIRE_HANDLE_KIND_SHIFT;
		}
		if (dep) {
			snprintf(err, errlen, "OpenCL %s 0x%llx depends on %s 0x%llx, which the application released: "
				 "tern cannot recreate it (docs/opencl.md, \"Snapshots\")",
				 cl_saved_kind_name(e->kind), (unsigned long long)e->handle,
				 cl_saved_kind_name(handle_kind_of(dep)), (unsigned long long)dep);
			return -EBUSY;
		}
		if (e->kind != HANDLE_CL_EVENT || !is_user_event(o) || !o->waited || !e->real)
			continue;
		if (x->host.clGetEventInfo(e->real, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL) ==
			    CL_SUCCESS && st > CL_COMPLETE) {
			snprintf(err, errlen, "OpenCL user event 0x%llx has no status yet and commands may wait for it: "
				 "set its status (clSetUserEventStatus) before a snapshot",
				 (unsigned long long)e->handle);
			return -EBUSY;
		}
	}
	return 0;
}

/* Every queue's commands done, so that events are complete and memory
 * holds what the guest's commands wrote. */
static int save_finish(struct cl_exec *x, const struct save_list *l, char *err, size_t errlen)
{
	for (unsigned i = 0; i < l->n; i++) {
		struct handle_entry *e = handle_table_get(x->handles, l->h[i], HANDLE_CL_QUEUE);
		cl_int ret;

		if (!e || !e->real)
			continue;
		ret = x->host.clFinish(e->real);
		if (ret != CL_SUCCESS) {
			snprintf(err, errlen, "finishing OpenCL queue 0x%llx failed with error %d",
				 (unsigned long long)e->handle, ret);
			return -EIO;
		}
	}
	return 0;
}

/* A kernel's argument that names an object the guest released is not kept:
 * the kernel may not run until the guest sets it again. */
static bool entry_names_dead(struct cl_exec *x, const struct cl_journal_entry *je)
{
	struct wire_cl_kernel_set_arg_req a;
	struct wire_rec_cl_handle h;
	struct wire_cursor cur;

	if (je->call != WIRE_CALL_CL_KERNEL_SET_ARG)
		return false;
	wire_cursor_init(&cur, je->payload, je->len);
	if (wire_cl_kernel_set_arg_req_decode(&cur, &a) ||
	    (a.kind != CL_WIRE_ARG_MEM && a.kind != CL_WIRE_ARG_SAMPLER) || !a.value.len)
		return false;
	return !wire_rec_cl_handle_decode(a.value.ptr, a.value.len, &h) && !live(x, h.object);
}

/* An event's fields: its status, command, queue and context, and its
 * profiling counters where its queue kept them. */
static void event_fields(struct cl_exec *x, struct handle_entry *e, struct cl_saved *s)
{
	struct cl_obj *o = e->info;
	struct handle_entry *f;
	cl_command_queue q = NULL;
	cl_context c = NULL;
	cl_ulong t;

	if (!e->real) {
		s->flags |= CL_SAVED_F_FAILED;
		s->status = o->failed < 0 ? o->failed : CL_OUT_OF_RESOURCES;
		return;
	}
	if (is_user_event(o)) {
		s->flags |= o->waited ? CL_SAVED_F_WAITED : 0;
		return;     /* its requests recreate it, its status among them */
	}
	x->host.clGetEventInfo(e->real, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(s->status), &s->status, NULL);
	x->host.clGetEventInfo(e->real, CL_EVENT_COMMAND_TYPE, sizeof(s->command_type), &s->command_type, NULL);
	x->host.clGetEventInfo(e->real, CL_EVENT_COMMAND_QUEUE, sizeof(q), &q, NULL);
	x->host.clGetEventInfo(e->real, CL_EVENT_CONTEXT, sizeof(c), &c, NULL);
	if (q && (f = handle_table_find_real(x->handles, HANDLE_CL_QUEUE, q)) && object_kept(f))
		s->queue = f->handle;
	if (c && (f = handle_table_find_real(x->handles, HANDLE_CL_CONTEXT, c)))
		s->context = f->handle;
	if (o->restored) {
		s->command_type = o->restored_command_type;
		if (o->restored_profiled) {
			s->flags |= CL_SAVED_F_PROFILED;
			memcpy(s->profiling, o->restored_profiling, sizeof(s->profiling));
		}
		return;
	}
	if (x->host.clGetEventProfilingInfo(e->real, CL_PROFILING_COMMAND_QUEUED, sizeof(t), &t, NULL) == CL_SUCCESS) {
		s->flags |= CL_SAVED_F_PROFILED;
		for (unsigned i = 0; i < CL_SAVED_PROFILING; i++)
			x->host.clGetEventProfilingInfo(e->real, CL_PROFILING_COMMAND_QUEUED + i, sizeof(t), &t, NULL) ==
					CL_SUCCESS ? (void)(s->profiling[i] = t) : (void)0;
	}
}

/* One object into @journal: its contents image, its description image and
 * its record. */
static int save_object(struct cl_exec *x, struct tracker *journal, struct own_queues *oq, struct handle_entry *e,
		       char *err, size_t errlen)
{
	struct cl_obj *o = e->info;
	struct cl_saved s = { .kind = e->kind, .refs = o->refs };
	uint8_t args[RECORD_ARGS] = { 0 };
	size_t region[3], desc_len = 0;
	uint8_t *desc = NULL;
	void *contents = NULL;
	int ret = 0;

	s.entries = calloc(o->journal.count ? o->journal.count : 1, sizeof(*s.entries));
	if (!s.entries)
		return -ENOMEM;
	for (uint32_t i = 0; i < o->journal.count; i++) {
		const struct cl_journal_entry *je = &o->journal.list[i];

		if (!entry_names_dead(x, je))
			s.entries[s.count++] = (struct cl_saved_entry){ je->call, je->tag, je->len, je->payload };
	}
	if (e->kind == HANDLE_CL_EVENT)
		event_fields(x, e, &s);
	/* A non-blocking read the guest has not fetched: the bytes its finished
	 * queue wrote, which the guest fetches from the restored worker. */
	if (e->kind == HANDLE_CL_EVENT && o->read_buf) {
		s.flags |= CL_SAVED_F_CONTENTS;
		s.size = o->read_size;
		ret = tracker_image_ref(journal, o->read_buf, s.size, CL_CONTENTS_IMAGE_FORMAT, args + TRACKER_HASH_SIZE);
	}
	/* A sub-buffer's or an image's contents are its buffer's when it has one. */
	if (e->kind == HANDLE_CL_MEM && !o->parent) {
		cl_int st = mem_bytes(x, e, region, &s.size);

		if (st == CL_SUCCESS && s.size > TRACKER_IMAGE_MAX) {
			snprintf(err, errlen, "OpenCL memory object 0x%llx holds %llu bytes, more than a journal image "
				 "may (%u)", (unsigned long long)e->handle, (unsigned long long)s.size,
				 TRACKER_IMAGE_MAX);
			ret = -EFBIG;
			goto out;
		}
		if (st == CL_SUCCESS && !(contents = malloc(s.size ? s.size : 1)))
			st = CL_OUT_OF_HOST_MEMORY;
		if (st == CL_SUCCESS)
			st = mem_transfer(x, oq, e, false, contents, s.size);
		if (st != CL_SUCCESS) {
			snprintf(err, errlen, "reading OpenCL memory object 0x%llx failed with error %d%s",
				 (unsigned long long)e->handle, st,
				 st == CL_IMAGE_FORMAT_NOT_SUPPORTED ? " (mipmapped images are not snapshotted)" : "");
			ret = -EIO;
			goto out;
		}
		s.flags |= CL_SAVED_F_CONTENTS;
		ret = tracker_image_ref(journal, contents, s.size, CL_CONTENTS_IMAGE_FORMAT, args + TRACKER_HASH_SIZE);
	}
	if (!ret)
		ret = cl_saved_encode(&s, &desc, &desc_len);
	if (!ret)
		ret = tracker_image_ref(journal, desc, desc_len, CL_SAVED_IMAGE_FORMAT, args);
	if (!ret)
		ret = tracker_object_put(journal, e->handle, &(struct tracker_object){
						 .kind = e->kind, .parent = o->parent ? o->parent : o->context,
						 .args = args, .args_len = RECORD_ARGS });
	if (ret && !err[0])
		snprintf(err, errlen, "journaling OpenCL %s 0x%llx failed: %s", cl_saved_kind_name(e->kind),
			 (unsigned long long)e->handle, strerror(-ret));
out:
	free(contents);
	free(desc);
	free(s.entries);
	return ret;
}

/* The records a save before this one wrote: their handles and args. */
struct old_records {
	uint64_t *h;
	uint8_t (*args)[RECORD_ARGS];
	unsigned n, cap;
};

static int collect_old(void *arg, uint64_t handle, const struct tracker_object *o)
{
	struct old_records *r = arg;

	if (!kind_is_cl(o->kind))
		return 0;
	if (r->n == r->cap) {
		unsigned cap = r->cap ? r->cap * 2 : 64;
		uint64_t *h = realloc(r->h, cap * sizeof(*h));
		void *a = h ? realloc(r->args, cap * sizeof(*r->args)) : NULL;

		if (h)
			r->h = h;
		if (!a)
			return -ENOMEM;
		r->args = a;
		r->cap = cap;
	}
	r->h[r->n] = handle;
	memset(r->args[r->n], 0, RECORD_ARGS);
	if (o->args_len == RECORD_ARGS)
		memcpy(r->args[r->n], o->args, RECORD_ARGS);
	r->n++;
	return 0;
}

static bool hash_set(const uint8_t *h)
{
	for (unsigned i = 0; i < TRACKER_HASH_SIZE; i++)
		if (h[i])
			return true;
	return false;
}

/* The session's part: the platform, its devices and the serials. */
static int save_session(struct cl_exec *x, struct tracker *journal)
{
	struct cl_saved_session s = { .platform = x->platform };
	char names[CL_SAVED_DEVICES_MAX][CL_SAVED_NAME_MAX];
	uint8_t *b = NULL;
	size_t len;
	int ret;

	for (unsigned k = 0; k < CL_SAVED_KINDS; k++)
		s.next_serial[k] = handle_table_next_serial(x->handles, (enum handle_kind)(CL_SAVED_KIND_FIRST + k));
	/* In the order the guest's handles name them. */
	for (uint64_t serial = 1; serial < s.next_serial[HANDLE_CL_DEVICE - CL_SAVED_KIND_FIRST]; serial++) {
		uint64_t h = (uint64_t)HANDLE_CL_DEVICE << WIRE_HANDLE_KIND_SHIFT | serial;
		struct handle_entry *e = handle_table_get(x->handles, h, HANDLE_CL_DEVICE);
		struct cl_saved_device *d;
		size_t n = 0;

		if (!e || s.devices == CL_SAVED_DEVICES_MAX)
			continue;
		d = &s.device[s.devices];
		if (x->host.clGetDeviceInfo(e->real, CL_DEVICE_NAME, CL_SAVED_NAME_MAX, names[s.devices], &n) !=
		    CL_SUCCESS)
			n = 0;
		d->handle = h;
		d->name = names[s.devices];
		d->name_len = n && n <= CL_SAVED_NAME_MAX ? (uint32_t)strnlen(names[s.devices], n) : 0;
		s.devices++;
	}
	ret = cl_saved_session_encode(&s, &b, &len);
	if (!ret)
		ret = tracker_meta_bytes_set(journal, CL_SAVED_META_SESSION, b, len);
	free(b);
	return ret;
}

int cl_exec_snapshot_save(struct cl_exec *x, struct tracker *journal, char *err, size_t errlen)
{
	struct old_records old = { 0 };
	struct own_queues oq = { .n = 0 };
	struct save_list l = { 0 };
	bool txn;
	int ret;

	if (!x->opened)
		return 0;
	handle_table_foreach(x->handles, collect_live, &l);
	ret = l.err;
	if (!ret)
		qsort(l.h, l.n, sizeof(*l.h), handle_cmp);
	if (!ret)
		ret = save_check(x, &l, err, errlen);
	if (!ret)
		ret = save_finish(x, &l, err, errlen);
	if (!ret)
		ret = tracker_object_foreach(journal, NULL, 0, collect_old, &old);
	if (ret) {
		free(l.h);
		free(old.h);
		free(old.args);
		return ret;
	}
	txn = tracker_txn_begin(journal) == 0;
	for (unsigned i = 0; i < l.n && !ret; i++) {
		struct handle_entry *e = handle_table_get(x->handles, l.h[i], handle_kind_of(l.h[i]));

		if (object_kept(e))
			ret = save_object(x, journal, &oq, e, err, errlen);
	}
	/* What the save before wrote loses its references; a record whose
	 * object is gone goes. */
	for (unsigned i = 0; i < old.n && !ret; i++) {
		struct handle_entry *e = handle_table_get(x->handles, old.h[i], handle_kind_of(old.h[i]));

		if (hash_set(old.args[i]))
			tracker_image_unref(journal, old.args[i]);
		if (hash_set(old.args[i] + TRACKER_HASH_SIZE))
			tracker_image_unref(journal, old.args[i] + TRACKER_HASH_SIZE);
		if (!e || !object_kept(e))
			ret = tracker_object_del(journal, old.h[i]);
	}
	if (!ret)
		ret = save_session(x, journal);
	if (txn) {
		int c = tracker_txn_commit(journal);

		ret = ret ? ret : c;
	}
	if (ret && !err[0])
		snprintf(err, errlen, "journaling the OpenCL objects failed: %s", strerror(-ret));
	own_queues_release(x, &oq);
	free(l.h);
	free(old.h);
	free(old.args);
	return ret;
}

/* ---- restore ---- */

struct saved_record {
	uint64_t handle;
	uint8_t args[RECORD_ARGS];
	uint32_t args_len;
};

struct restore_walk {
	struct saved_record *r;
	unsigned n, cap;
	uint64_t stray;             /* a record of a kind no restore makes */
};

static int collect_saved(void *arg, uint64_t handle, const struct tracker_object *o)
{
	struct restore_walk *w = arg;

	if (!kind_is_cl(o->kind))
		return 0;
	if (o->kind == HANDLE_CL_PLATFORM || o->kind == HANDLE_CL_DEVICE || handle_kind_of(handle) != o->kind) {
		w->stray = handle;
		return 1;
	}
	if (w->n == w->cap) {
		unsigned cap = w->cap ? w->cap * 2 : 64;
		void *p = realloc(w->r, cap * sizeof(*w->r));

		if (!p)
			return -ENOMEM;
		w->r = p;
		w->cap = cap;
	}
	w->r[w->n].handle = handle;
	w->r[w->n].args_len = o->args_len;
	memcpy(w->r[w->n].args, o->args, o->args_len == RECORD_ARGS ? RECORD_ARGS : 0);
	w->n++;
	return 0;
}

/* Serve one saved request as the guest's; its cl_int in *@status. */
static int replay(struct cl_exec *x, const struct cl_saved_entry *en, cl_int *status)
{
	struct wire_cursor cur;
	struct wire_msg reply;
	int ret;

	wire_cursor_init(&cur, en->payload, en->len);
	wire_msg_init(&reply);
	ret = cl_exec_dispatch(x, en->call, &cur, &reply);
	/* Every reply starts with the call's cl_int. */
	if (!ret && !reply.failed && reply.buf && reply.len >= WIRE_HEADER_SIZE + 4)
		*status = (cl_int)le32_get(reply.buf + WIRE_HEADER_SIZE);
	else if (!ret)
		ret = -EPROTO;
	wire_msg_release(&reply);
	x->restore_handle = 0;
	return ret;
}

/* The status a replayed request must answer: a build's, compile's or
 * link's as it was, every other one's CL_SUCCESS. */
static cl_int expected_status(const struct cl_saved_entry *en)
{
	if (en->call == WIRE_CALL_CL_PROGRAM_BUILD || en->call == WIRE_CALL_CL_PROGRAM_COMPILE ||
	    en->call == WIRE_CALL_CL_PROGRAM_LINK)
		return (cl_int)en->tag;
	return CL_SUCCESS;
}

static int restore_requests(struct cl_exec *x, uint64_t handle, const struct cl_saved *s, char *err,
			    size_t errlen)
{
	enum handle_kind kind = handle_kind_of(handle);

	for (uint32_t i = 0; i < s->count; i++) {
		const struct cl_saved_entry *en = &s->entries[i];
		cl_int st = CL_SUCCESS;
		int ret;

		/* A later request names its object first: this one's, none other. */
		if (i > 0 && (en->len < 8 || le64_get(en->payload) != handle)) {
			snprintf(err, errlen, "OpenCL %s 0x%llx: request %u names another object",
				 cl_saved_kind_name(kind), (unsigned long long)handle, i);
			return -EBADMSG;
		}
		if (i == 0) {
			x->restore_handle = handle;
			if (kind == HANDLE_CL_EVENT)     /* a user event's handle is the guest's choice, in order */
				handle_table_next_serial_set(x->handles, HANDLE_CL_EVENT,
							     handle & ((1ull << WIRE_HANDLE_KIND_SHIFT) - 1));
		}
		ret = replay(x, en, &st);
		if (ret) {
			snprintf(err, errlen, "OpenCL %s 0x%llx: request %u (%s) does not decode",
				 cl_saved_kind_name(kind), (unsigned long long)handle, i, wire_call_name(en->call));
			return -EBADMSG;
		}
		if (st != expected_status(en) || (i == 0 && !handle_table_get(x->handles, handle, kind))) {
			snprintf(err, errlen, "OpenCL %s 0x%llx: %s answered error %d again (%d before the snapshot)",
				 cl_saved_kind_name(kind), (unsigned long long)handle, wire_call_name(en->call), st,
				 expected_status(en));
			return -EIO;
		}
	}
	return 0;
}

/* A command's event, completed before the snapshot: a marker on its queue,
 * or a user event set to its status. */
static int restore_event(struct cl_exec *x, uint64_t handle, const struct cl_saved *s, char *err, size_t errlen)
{
	struct handle_entry *qe = NULL, *ce = NULL;
	cl_event ev = NULL;
	struct cl_obj *o;
	cl_int st = CL_SUCCESS;

	if (!(s->flags & CL_SAVED_F_FAILED)) {
		if (s->queue)
			cl_exec_handle_lookup(x, s->queue, HANDLE_CL_QUEUE, &qe);
		if (s->context)
			cl_exec_handle_lookup(x, s->context, HANDLE_CL_CONTEXT, &ce);
		if (qe && s->status == CL_COMPLETE) {
			st = x->host.clEnqueueMarkerWithWaitList(qe->real, 0, NULL, &ev);
			if (st == CL_SUCCESS)
				st = x->host.clWaitForEvents(1, &ev);
		} else if (ce) {
			ev = x->host.clCreateUserEvent(ce->real, &st);
			if (st == CL_SUCCESS)
				st = x->host.clSetUserEventStatus(ev, s->status);
		} else {
			st = CL_INVALID_CONTEXT;
		}
		if (st != CL_SUCCESS) {
			if (ev)
				x->host.clReleaseEvent(ev);
			snprintf(err, errlen, "OpenCL event 0x%llx: standing an event in for its command failed with "
				 "error %d", (unsigned long long)handle, st);
			return -EIO;
		}
	}
	x->restore_handle = handle;
	st = cl_exec_object_add(x, HANDLE_CL_EVENT, ev, s->context, &(uint64_t){ 0 }, &o);
	x->restore_handle = 0;
	if (st != CL_SUCCESS || !handle_table_get(x->handles, handle, HANDLE_CL_EVENT)) {
		if (ev)
			x->host.clReleaseEvent(ev);
		snprintf(err, errlen, "OpenCL event 0x%llx cannot take its handle again", (unsigned long long)handle);
		return -EBADMSG;
	}
	o->failed = (s->flags & CL_SAVED_F_FAILED) ? s->status : CL_SUCCESS;
	o->restored = ev != NULL;
	o->restored_command_type = s->command_type;
	o->restored_profiled = s->flags & CL_SAVED_F_PROFILED;
	memcpy(o->restored_profiling, s->profiling, sizeof(o->restored_profiling));
	return 0;
}

static int restore_contents(struct cl_exec *x, struct own_queues *oq, struct tracker *saved, uint64_t handle,
			    const struct cl_saved *s, const uint8_t *hash, char *err, size_t errlen)
{
	struct handle_entry *e = handle_table_get(x->handles, handle, HANDLE_CL_MEM);
	const struct cl_obj *o = e->info;
	struct tracker_image im;
	const void *bytes = NULL;
	void *copy;
	cl_int st;

	if (o->parent || tracker_image_get(saved, hash, &im, &bytes) || im.format != CL_CONTENTS_IMAGE_FORMAT ||
	    im.size != s->size) {
		snprintf(err, errlen, "OpenCL memory object 0x%llx: %s", (unsigned long long)handle,
			 o->parent ? "contents of a sub-buffer or of an image of a buffer (its buffer has them)"
				   : "contents missing from the journal");
		return -EBADMSG;
	}
	copy = malloc(im.size ? im.size : 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, bytes, im.size);
	st = mem_transfer(x, oq, e, true, copy, im.size);
	free(copy);
	if (st != CL_SUCCESS) {
		snprintf(err, errlen, "OpenCL memory object 0x%llx: writing its %llu bytes back failed with error %d%s",
			 (unsigned long long)handle, (unsigned long long)im.size, st,
			 st == CL_INVALID_BUFFER_SIZE ? " (its size is not the snapshot's)" : "");
		return -EIO;
	}
	return 0;
}

/* A non-blocking read's bytes the guest had not fetched: held again under its event. */
static int restore_read(struct cl_exec *x, struct tracker *saved, uint64_t handle, const struct cl_saved *s,
			const uint8_t *hash, char *err, size_t errlen)
{
	struct handle_entry *e = handle_table_get(x->handles, handle, HANDLE_CL_EVENT);
	struct cl_obj *o = e->info;
	struct tracker_image im;
	const void *bytes = NULL;

	if (!e->real || tracker_image_get(saved, hash, &im, &bytes) || im.format != CL_CONTENTS_IMAGE_FORMAT ||
	    im.size != s->size || !im.size || im.size > CL_WIRE_LAZY_READ_MAX - x->lazy_read_bytes) {
		snprintf(err, errlen, "OpenCL event 0x%llx: the bytes of its read are missing from the journal or "
			 "are not a read's", (unsigned long long)handle);
		return -EBADMSG;
	}
	o->read_buf = malloc(im.size);
	if (!o->read_buf)
		return -ENOMEM;
	memcpy(o->read_buf, bytes, im.size);
	o->read_size = im.size;
	x->lazy_read_bytes += im.size;
	return 0;
}

static int restore_one(struct cl_exec *x, struct own_queues *oq, struct tracker *saved,
		       const struct saved_record *r, char *err, size_t errlen)
{
	enum handle_kind kind = handle_kind_of(r->handle);
	struct tracker_image im;
	const void *bytes = NULL;
	struct cl_saved s;
	const char *why = "";
	uint8_t *desc;
	int ret;

	if (r->args_len != RECORD_ARGS || tracker_image_get(saved, r->args, &im, &bytes) ||
	    im.format != CL_SAVED_IMAGE_FORMAT) {
		snprintf(err, errlen, "OpenCL %s 0x%llx: its description is missing from the journal",
			 cl_saved_kind_name(kind), (unsigned long long)r->handle);
		return -EBADMSG;
	}
	desc = malloc(im.size ? im.size : 1);
	if (!desc)
		return -ENOMEM;
	memcpy(desc, bytes, im.size);
	ret = cl_saved_decode(desc, im.size, &s, &why);
	if (!ret && s.kind != kind) {
		why = "its description is of another kind";
		ret = -EBADMSG;
	}
	if (!ret && (hash_set(r->args + TRACKER_HASH_SIZE) != !!(s.flags & CL_SAVED_F_CONTENTS))) {
		why = "its record and its description disagree about its contents";
		ret = -EBADMSG;
	}
	if (ret) {
		snprintf(err, errlen, "OpenCL %s 0x%llx: the description does not decode: %s",
			 cl_saved_kind_name(kind), (unsigned long long)r->handle, why);
		free(desc);
		return ret == -ENOMEM ? ret : -EBADMSG;
	}
	if (kind == HANDLE_CL_EVENT && !s.count)
		ret = restore_event(x, r->handle, &s, err, errlen);
	else
		ret = restore_requests(x, r->handle, &s, err, errlen);
	if (!ret && (s.flags & CL_SAVED_F_CONTENTS))
		ret = kind == HANDLE_CL_EVENT
			      ? restore_read(x, saved, r->handle, &s, r->args + TRACKER_HASH_SIZE, err, errlen)
			      : restore_contents(x, oq, saved, r->handle, &s, r->args + TRACKER_HASH_SIZE, err, errlen);
	if (!ret) {
		struct handle_entry *e = handle_table_get(x->handles, r->handle, kind);

		((struct cl_obj *)e->info)->refs = s.refs;
		((struct cl_obj *)e->info)->waited = s.flags & CL_SAVED_F_WAITED;
	}
	cl_saved_release(&s);
	free(desc);
	return ret;
}

/* The snapshot's devices must be this platform's, under the same handles. */
static int restore_devices(struct cl_exec *x, const struct cl_saved_session *ss, char *err, size_t errlen)
{
	if (ss->platform != x->platform) {
		snprintf(err, errlen, "the snapshot's OpenCL platform handle 0x%llx is not this worker's",
			 (unsigned long long)ss->platform);
		return -EBADMSG;
	}
	for (uint32_t i = 0; i < ss->devices; i++) {
		const struct cl_saved_device *d = &ss->device[i];
		struct handle_entry *e = handle_table_get(x->handles, d->handle, HANDLE_CL_DEVICE);
		char name[CL_SAVED_NAME_MAX + 1] = "";
		size_t n = 0;

		if (e && x->host.clGetDeviceInfo(e->real, CL_DEVICE_NAME, CL_SAVED_NAME_MAX, name, &n) == CL_SUCCESS &&
		    strnlen(name, CL_SAVED_NAME_MAX) == d->name_len && !memcmp(name, d->name, d->name_len))
			continue;
		snprintf(err, errlen, "OpenCL device 0x%llx of the snapshot (%.*s) is not this worker's platform's "
			 "(ternd --opencl-platform)", (unsigned long long)d->handle, (int)d->name_len, d->name);
		return -ENODEV;
	}
	return 0;
}

int cl_exec_snapshot_restore(struct cl_exec *x, struct tracker *saved, char *err, size_t errlen)
{
	struct restore_walk w = { 0 };
	struct own_queues oq = { .n = 0 };
	struct cl_saved_session ss;
	const void *b = NULL;
	const char *why = "";
	uint8_t *copy = NULL;
	size_t len = 0;
	int ret;

	ret = tracker_object_foreach(saved, restore_order, sizeof(restore_order) / sizeof(restore_order[0]),
				     collect_saved, &w);
	if (ret == 1) {
		snprintf(err, errlen, "the journal holds OpenCL record 0x%llx of a kind no restore makes",
			 (unsigned long long)w.stray);
		ret = -EBADMSG;
		goto out;
	}
	if (ret)
		goto out;
	if (tracker_meta_bytes_get(saved, CL_SAVED_META_SESSION, &b, &len)) {
		if (w.n) {
			snprintf(err, errlen, "the journal holds OpenCL objects but not its OpenCL part");
			ret = -EBADMSG;
		}
		goto out;       /* no OpenCL in this snapshot */
	}
	copy = malloc(len ? len : 1);
	if (!copy) {
		ret = -ENOMEM;
		goto out;
	}
	memcpy(copy, b, len);
	ret = cl_saved_session_decode(copy, len, &ss, &why);
	if (ret) {
		snprintf(err, errlen, "the snapshot's OpenCL part does not decode: %s", why);
		ret = -EBADMSG;
		goto out;
	}
	ret = cl_exec_open(x);
	if (ret) {
		snprintf(err, errlen, "the snapshot holds OpenCL objects and this worker has no OpenCL platform (%s)",
			 strerror(-ret));
		goto out;
	}
	ret = restore_devices(x, &ss, err, errlen);
	for (unsigned i = 0; i < w.n && !ret; i++)
		ret = restore_one(x, &oq, saved, &w.r[i], err, errlen);
	for (unsigned k = 0; k < CL_SAVED_KINDS && !ret; k++) {
		enum handle_kind kind = (enum handle_kind)(CL_SAVED_KIND_FIRST + k);

		if (ss.next_serial[k] >= handle_table_next_serial(x->handles, kind) &&
		    ss.next_serial[k] < (1ull << WIRE_HANDLE_KIND_SHIFT))
			handle_table_next_serial_set(x->handles, kind, ss.next_serial[k]);
	}
	if (!ret)
		pr_info("%u OpenCL objects restored", w.n);
out:
	x->restore_handle = 0;
	own_queues_release(x, &oq);
	free(copy);
	free(w.r);
	return ret;
}
