/* The ICD's entry points: platform, devices, contexts, queues, memory
 * objects, samplers, programs, kernels (enqueue.c: enqueues and events). */
#define LOG_PREFIX "opencl: "

#include "icd_entry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_wire.h"
#include "log.h"
#include "wire_cl_client.h"

/* Extensions the ICD remotes: those of the kernel language and of queries
 * alone. Any other (GL sharing, SVM, command buffers, sub-groups' entry
 * points, vendors' calls) would need entry points tern does not remote, so
 * a platform's list is cut to these (docs/opencl.md). */
static const char *const ext_allowed[] = {
	"cl_khr_icd", "cl_khr_fp16", "cl_khr_fp64", "cl_khr_int64_base_atomics", "cl_khr_int64_extended_atomics",
	"cl_khr_global_int32_base_atomics", "cl_khr_global_int32_extended_atomics",
	"cl_khr_local_int32_base_atomics", "cl_khr_local_int32_extended_atomics", "cl_khr_byte_addressable_store",
	"cl_khr_3d_image_writes", "cl_khr_image2d_from_buffer", "cl_khr_depth_images", "cl_khr_spir",
	"cl_khr_extended_versioning", "cl_khr_device_uuid", "cl_khr_pci_bus_info", "cl_khr_integer_dot_product",
	"cl_khr_subgroup_ballot", "cl_khr_subgroup_shuffle", "cl_khr_subgroup_shuffle_relative",
	"cl_khr_subgroup_extended_types", "cl_khr_subgroup_non_uniform_vote", "cl_khr_subgroup_non_uniform_arithmetic",
	"cl_khr_subgroup_clustered_reduce", "cl_khr_work_group_uniform_arithmetic", "cl_khr_expect_assume",
	"cl_khr_kernel_clock", "cl_khr_priority_hints", "cl_khr_throttle_hints", "cl_khr_srgb_image_writes",
	"cl_khr_mipmap_image", "cl_khr_mipmap_image_writes", "cl_khr_async_work_group_copy_fence",
	"cl_khr_extended_async_copies", "cl_khr_select_fprounding_mode", "cl_khr_int64", "cl_nv_device_attribute_query",
	"cl_nv_pragma_unroll", "cl_nv_compiler_options", "cl_ext_float_atomics", "cl_ext_atomic_counters_32",
	"__opencl_c_", NULL,
};

static bool ext_ok(const char *name, size_t len)
{
	for (unsigned i = 0; ext_allowed[i]; i++) {
		size_t n = strlen(ext_allowed[i]);

		/* "__opencl_c_" is a prefix: OpenCL C 3.0's features. */
		if ((n == len && !memcmp(name, ext_allowed[i], n)) ||
		    (ext_allowed[i][n - 1] == '_' && len > n && !memcmp(name, ext_allowed[i], n)))
			return true;
	}
	return false;
}

/* A space-separated list cut to what the ICD remotes, in place. */
static size_t ext_filter(char *s, size_t len)
{
	char *out = s, *p = s, *end = s + strnlen(s, len);

	while (p < end) {
		char *w = p;

		while (w < end && *w != ' ')
			w++;
		if (w > p && ext_ok(p, (size_t)(w - p))) {
			if (out != s)
				*out++ = ' ';
			memmove(out, p, (size_t)(w - p));
			out += w - p;
		}
		p = w + 1;
	}
	*out++ = 0;
	return (size_t)(out - s);
}

static size_t ext_filter_versioned(cl_name_version *v, size_t bytes)
{
	size_t n = bytes / sizeof(*v), k = 0;

	for (size_t i = 0; i < n; i++)
		if (ext_ok(v[i].name, strnlen(v[i].name, sizeof(v[i].name))))
			v[k++] = v[i];
	return k * sizeof(*v);
}

/* A query whose value the ICD edits: the whole value fetched first. */
static cl_int info_edited(uint32_t query, uint64_t object, cl_uint param, size_t size, void *value,
			  size_t *size_ret, size_t (*edit)(void *, size_t, const void *), const void *arg)
{
	size_t n = 0;
	cl_int ret = icd_info(query, object, 0, param, NULL, 0, 0, NULL, &n);
	void *buf;

	if (ret != CL_SUCCESS)
		return ret;
	buf = calloc(1, n + 64);
	if (!buf)
		return CL_OUT_OF_HOST_MEMORY;
	ret = icd_info(query, object, 0, param, NULL, 0, n, buf, NULL);
	if (ret == CL_SUCCESS) {
		n = edit(buf, n, arg);
		ret = icd_info_answer(buf, n, size, value, size_ret);
	}
	free(buf);
	return ret;
}

static size_t edit_ext(void *buf, size_t n, const void *arg)
{
	return ext_filter(buf, n);
}

static size_t edit_ext_versioned(void *buf, size_t n, const void *arg)
{
	return ext_filter_versioned(buf, n);
}

/* Platforms and devices */

cl_int icd_get_platform_ids(cl_uint num_entries, cl_platform_id *platforms, cl_uint *num_platforms)
{
	struct wire_cl_platform_list_req req = { 0 };
	struct wire_cl_platform_list_rep rep;
	int n;

	if ((num_entries == 0 && platforms) || (!platforms && !num_platforms))
		return CL_INVALID_VALUE;
	if (!icd_connect() || rpc_cl_platform_list(&req, &rep) != CL_SUCCESS)
		return CL_PLATFORM_NOT_FOUND_KHR;
	n = wire_rec_cl_handle_count(rep.platforms);
	if (n <= 0)
		return CL_PLATFORM_NOT_FOUND_KHR;
	for (int i = 0; platforms && i < n && (cl_uint)i < num_entries; i++) {
		struct wire_rec_cl_handle h;

		wire_rec_cl_handle_get(rep.platforms, (uint32_t)i, &h);
		platforms[i] = icd_object_of(WIRE_HANDLE_CL_PLATFORM, h.object);
		if (!platforms[i])
			return CL_OUT_OF_HOST_MEMORY;
	}
	if (num_platforms)
		*num_platforms = (cl_uint)n;
	return CL_SUCCESS;
}

cl_int icd_get_platform_info(cl_platform_id platform, cl_platform_info param, size_t size, void *value,
			     size_t *size_ret)
{
	if (!icd_object_valid(platform, WIRE_HANDLE_CL_PLATFORM))
		return CL_INVALID_PLATFORM;
	switch (param) {
	case CL_PLATFORM_ICD_SUFFIX_KHR:
		return icd_info_answer("tern", 5, size, value, size_ret);
	case CL_PLATFORM_EXTENSIONS:
		return info_edited(CL_WIRE_QUERY_PLATFORM, platform->o.handle, param, size, value, size_ret,
				   edit_ext, NULL);
	case CL_PLATFORM_EXTENSIONS_WITH_VERSION:
		return info_edited(CL_WIRE_QUERY_PLATFORM, platform->o.handle, param, size, value, size_ret,
				   edit_ext_versioned, NULL);
	default:
		return icd_info(CL_WIRE_QUERY_PLATFORM, platform->o.handle, 0, param, NULL, 0, size, value, size_ret);
	}
}

cl_int icd_get_device_ids(cl_platform_id platform, cl_device_type type, cl_uint num_entries, cl_device_id *devices,
			  cl_uint *num_devices)
{
	struct wire_cl_device_list_req req;
	struct wire_cl_device_list_rep rep;
	cl_int ret;
	int n;

	if (!icd_object_valid(platform, WIRE_HANDLE_CL_PLATFORM))
		return CL_INVALID_PLATFORM;
	if ((num_entries == 0 && devices) || (!devices && !num_devices))
		return CL_INVALID_VALUE;
	req = (struct wire_cl_device_list_req){ platform->o.handle, type };
	ret = rpc_cl_device_list(&req, &rep);
	if (ret != CL_SUCCESS)
		return ret;
	n = wire_rec_cl_handle_count(rep.devices);
	if (n < 0)
		return CL_OUT_OF_RESOURCES;
	if (!n)
		return CL_DEVICE_NOT_FOUND;
	for (int i = 0; devices && i < n && (cl_uint)i < num_entries; i++) {
		struct wire_rec_cl_handle h;

		wire_rec_cl_handle_get(rep.devices, (uint32_t)i, &h);
		devices[i] = icd_object_of(WIRE_HANDLE_CL_DEVICE, h.object);
		if (!devices[i])
			return CL_OUT_OF_HOST_MEMORY;
	}
	if (num_devices)
		*num_devices = (cl_uint)n;
	return CL_SUCCESS;
}

cl_int icd_get_device_info(cl_device_id device, cl_device_info param, size_t size, void *value, size_t *size_ret)
{
	static const cl_device_partition_property none = 0;
	const cl_device_svm_capabilities no_svm = 0;
	const cl_uint zero = 0;

	if (!icd_object_valid(device, WIRE_HANDLE_CL_DEVICE))
		return CL_INVALID_DEVICE;
	switch (param) {
	case CL_DEVICE_EXTENSIONS:
		return info_edited(CL_WIRE_QUERY_DEVICE, device->o.handle, param, size, value, size_ret, edit_ext,
				   NULL);
	case CL_DEVICE_EXTENSIONS_WITH_VERSION:
		return info_edited(CL_WIRE_QUERY_DEVICE, device->o.handle, param, size, value, size_ret,
				   edit_ext_versioned, NULL);
	/* Shared virtual memory needs one address space with the device's host:
	 * the guest's is not the worker's (docs/opencl.md). */
	case CL_DEVICE_SVM_CAPABILITIES:
		return icd_info_answer(&no_svm, sizeof(no_svm), size, value, size_ret);
	/* Sub-devices are not remoted: the device offers no partition. */
	case CL_DEVICE_PARTITION_MAX_SUB_DEVICES:
		return icd_info_answer(&zero, sizeof(zero), size, value, size_ret);
	case CL_DEVICE_PARTITION_PROPERTIES:
		return icd_info_answer(&none, sizeof(none), size, value, size_ret);
	default:
		return icd_info(CL_WIRE_QUERY_DEVICE, device->o.handle, 0, param, NULL, 0, size, value, size_ret);
	}
}

cl_int icd_create_sub_devices(cl_device_id in, const cl_device_partition_property *props, cl_uint n,
			      cl_device_id *out, cl_uint *num)
{
	if (!icd_object_valid(in, WIRE_HANDLE_CL_DEVICE))
		return CL_INVALID_DEVICE;
	return CL_INVALID_VALUE;        /* no partition type is offered */
}

cl_int icd_retain_device(cl_device_id device)
{
	return icd_object_valid(device, WIRE_HANDLE_CL_DEVICE) ? CL_SUCCESS : CL_INVALID_DEVICE;
}

cl_int icd_release_device(cl_device_id device)
{
	return icd_object_valid(device, WIRE_HANDLE_CL_DEVICE) ? CL_SUCCESS : CL_INVALID_DEVICE;
}

/* Reference counts: the guest's, with the worker's kept in step by deferred
 * requests; the last release frees the object here. */
cl_int icd_retain(void *p, uint32_t kind, cl_int bad)
{
	struct cl_gobj *o = p;
	struct wire_cl_retain_req req;
	unsigned r;

	if (!icd_object_valid(o, kind))
		return bad;
	r = atomic_load(&o->refs);
	do {
		if (!r)
			return bad;
	} while (!atomic_compare_exchange_weak(&o->refs, &r, r + 1));
	req.object = o->handle;
	return rpc_cl_retain_defer(&req);
}

cl_int icd_release(void *p, uint32_t kind, cl_int bad)
{
	struct cl_gobj *o = p;
	struct wire_cl_release_req req;
	unsigned r;
	cl_int ret;

	if (!icd_object_valid(o, kind))
		return bad;
	r = atomic_load(&o->refs);
	do {
		if (!r)
			return bad;
	} while (!atomic_compare_exchange_weak(&o->refs, &r, r - 1));
	req.object = o->handle;
	ret = rpc_cl_release_defer(&req);
	if (r == 1) {
		if (kind == WIRE_HANDLE_CL_MEM)
			icd_mem_destroyed((cl_mem)o);
		icd_object_free(o);
	}
	return ret;
}

/* Properties lists into cl_property records; a context's platform becomes
 * its handle. Returns the count, or -1 for a list too long or malformed. */
static int props_pack(const intptr_t *props, bool context, struct wire_rec_cl_property out[WIRE_REC_CL_PROPERTY_MAX])
{
	int n = 0;

	for (; props && props[0]; props += 2) {
		uint64_t v = (uint64_t)props[1];

		if (n == WIRE_REC_CL_PROPERTY_MAX)
			return -1;
		if (context && props[0] == CL_CONTEXT_PLATFORM) {
			if (!icd_object_valid((void *)props[1], WIRE_HANDLE_CL_PLATFORM))
				return -2;
			v = ((struct cl_gobj *)props[1])->handle;
		}
		out[n++] = (struct wire_rec_cl_property){ (uint64_t)props[0], v };
	}
	return n;
}

static struct wire_blob props_blob(const struct wire_rec_cl_property *p, int n, uint8_t *buf)
{
	for (int i = 0; i < n; i++)
		wire_rec_cl_property_put(buf, (uint32_t)i, &p[i]);
	return (struct wire_blob){ buf, (uint32_t)n * WIRE_REC_CL_PROPERTY_BYTES };
}

#define PROPS_BUF (WIRE_REC_CL_PROPERTY_MAX * WIRE_REC_CL_PROPERTY_BYTES)

static void *fail(cl_int *errcode_ret, cl_int err)
{
	if (errcode_ret)
		*errcode_ret = err;
	return NULL;
}

static void *ok(cl_int *errcode_ret, void *o)
{
	if (errcode_ret)
		*errcode_ret = o ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
	return o;
}

/* Handles of @n objects of @kind as cl_handle records (heap); *@bad when one is not. */
static uint8_t *handles_pack(cl_uint n, const void *const *list, uint32_t kind, bool *bad)
{
	uint8_t *buf;

	*bad = (n == 0) != (list == NULL) || n > WIRE_REC_CL_HANDLE_MAX;
	if (*bad || !n)
		return NULL;
	buf = malloc((size_t)n * WIRE_REC_CL_HANDLE_BYTES);
	for (cl_uint i = 0; buf && i < n; i++) {
		if (!icd_object_valid(list[i], kind)) {
			*bad = true;
			free(buf);
			return NULL;
		}
		wire_rec_cl_handle_put(buf, i, &(struct wire_rec_cl_handle){ ((const struct cl_gobj *)list[i])->handle });
	}
	return buf;
}

/* Contexts */

static cl_context context_create(const cl_context_properties *properties, cl_uint n, const cl_device_id *devices,
				 cl_device_type type, cl_int *errcode_ret)
{
	struct wire_rec_cl_property p[WIRE_REC_CL_PROPERTY_MAX];
	struct wire_cl_context_create_req req = { .type = type };
	struct wire_cl_context_create_rep rep;
	uint8_t pbuf[PROPS_BUF], *dbuf = NULL;
	int np = props_pack(properties, true, p);
	bool bad = false;
	cl_int ret;

	if (np < 0)
		return fail(errcode_ret, np == -2 ? CL_INVALID_PLATFORM : CL_INVALID_PROPERTY);
	if (devices || n) {
		dbuf = handles_pack(n, (const void *const *)devices, WIRE_HANDLE_CL_DEVICE, &bad);
		if (bad || !dbuf)
			return fail(errcode_ret, !devices || !n ? CL_INVALID_VALUE : bad ? CL_INVALID_DEVICE
											: CL_OUT_OF_HOST_MEMORY);
		req.devices = (struct wire_blob){ dbuf, n * WIRE_REC_CL_HANDLE_BYTES };
	}
	req.properties = props_blob(p, np, pbuf);
	ret = rpc_cl_context_create(&req, &rep);
	free(dbuf);
	if (ret != CL_SUCCESS)
		return fail(errcode_ret, ret);
	return ok(errcode_ret, icd_object_new(WIRE_HANDLE_CL_CONTEXT, rep.context, sizeof(struct _cl_context)));
}

cl_context icd_create_context(const cl_context_properties *properties, cl_uint num_devices, const cl_device_id *devices,
			      void (CL_CALLBACK *pfn_notify)(const char *, const void *, size_t, void *), void *user_data,
			      cl_int *errcode_ret)
{
	if (!devices || !num_devices || (!pfn_notify && user_data))
		return fail(errcode_ret, CL_INVALID_VALUE);
	/* The platform's error reports stay in the worker's log: pfn_notify is
	 * never called (the specification leaves that to the platform). */
	return context_create(properties, num_devices, devices, 0, errcode_ret);
}

cl_context icd_create_context_from_type(const cl_context_properties *properties, cl_device_type type,
					void (CL_CALLBACK *pfn_notify)(const char *, const void *, size_t, void *),
					void *user_data, cl_int *errcode_ret)
{
	if (!pfn_notify && user_data)
		return fail(errcode_ret, CL_INVALID_VALUE);
	return context_create(properties, 0, NULL, type, errcode_ret);
}

cl_int icd_retain_context(cl_context c) { return icd_retain(c, WIRE_HANDLE_CL_CONTEXT, CL_INVALID_CONTEXT); }
cl_int icd_release_context(cl_context c) { return icd_release(c, WIRE_HANDLE_CL_CONTEXT, CL_INVALID_CONTEXT); }

cl_int icd_get_context_info(cl_context c, cl_context_info param, size_t size, void *value, size_t *size_ret)
{
	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return CL_INVALID_CONTEXT;
	return icd_info(CL_WIRE_QUERY_CONTEXT, c->o.handle, 0, param, NULL, 0, size, value, size_ret);
}

/* Queues */

cl_command_queue icd_create_queue_props(cl_context c, cl_device_id d, const cl_queue_properties *properties,
					cl_int *errcode_ret)
{
	struct wire_rec_cl_property p[WIRE_REC_CL_PROPERTY_MAX];
	struct wire_cl_queue_create_req req;
	struct wire_cl_queue_create_rep rep;
	uint8_t pbuf[PROPS_BUF];
	struct _cl_command_queue *q;
	int np;
	cl_int ret;

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return fail(errcode_ret, CL_INVALID_CONTEXT);
	if (!icd_object_valid(d, WIRE_HANDLE_CL_DEVICE))
		return fail(errcode_ret, CL_INVALID_DEVICE);
	np = props_pack((const intptr_t *)properties, false, p);
	if (np < 0)
		return fail(errcode_ret, CL_INVALID_VALUE);
	req = (struct wire_cl_queue_create_req){ c->o.handle, d->o.handle, props_blob(p, np, pbuf) };
	ret = rpc_cl_queue_create(&req, &rep);
	if (ret != CL_SUCCESS)
		return fail(errcode_ret, ret);
	q = icd_object_new(WIRE_HANDLE_CL_QUEUE, rep.queue, sizeof(*q));
	if (q) {
		q->context = c;
		q->in_order = true;
		for (int i = 0; i < np; i++)
			if (p[i].name == CL_QUEUE_PROPERTIES && (p[i].value & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE))
				q->in_order = false;
	}
	return ok(errcode_ret, q);
}

cl_command_queue icd_create_queue(cl_context c, cl_device_id d, cl_command_queue_properties props, cl_int *errcode_ret)
{
	cl_queue_properties p[3] = { CL_QUEUE_PROPERTIES, props, 0 };

	return icd_create_queue_props(c, d, props ? p : NULL, errcode_ret);
}

cl_int icd_retain_queue(cl_command_queue q) { return icd_retain(q, WIRE_HANDLE_CL_QUEUE, CL_INVALID_COMMAND_QUEUE); }
cl_int icd_release_queue(cl_command_queue q) { return icd_release(q, WIRE_HANDLE_CL_QUEUE, CL_INVALID_COMMAND_QUEUE); }

cl_int icd_get_queue_info(cl_command_queue q, cl_command_queue_info param, size_t size, void *value, size_t *size_ret)
{
	if (!icd_object_valid(q, WIRE_HANDLE_CL_QUEUE))
		return CL_INVALID_COMMAND_QUEUE;
	return icd_info(CL_WIRE_QUERY_QUEUE, q->o.handle, 0, param, NULL, 0, size, value, size_ret);
}

/* Memory objects */

static cl_mem mem_new(uint64_t handle, cl_context c, cl_mem_flags flags, cl_mem_object_type type, void *host_ptr)
{
	struct _cl_mem *m = icd_object_new(WIRE_HANDLE_CL_MEM, handle, sizeof(*m));

	if (!m)
		return NULL;
	m->context = c;
	m->flags = flags;
	m->type = type;
	m->host_ptr = flags & CL_MEM_USE_HOST_PTR ? host_ptr : NULL;
	return m;
}

cl_mem icd_create_buffer_props(cl_context c, const cl_mem_properties *properties, cl_mem_flags flags, size_t size,
			       void *host_ptr, cl_int *errcode_ret)
{
	struct wire_rec_cl_property p[WIRE_REC_CL_PROPERTY_MAX];
	struct wire_cl_buffer_create_req req;
	struct wire_cl_buffer_create_rep rep;
	uint8_t pbuf[PROPS_BUF];
	bool data = flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR);
	struct _cl_mem *m;
	int np;
	cl_int ret;

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return fail(errcode_ret, CL_INVALID_CONTEXT);
	if (data != (host_ptr != NULL))
		return fail(errcode_ret, CL_INVALID_HOST_PTR);
	if (!size)
		return fail(errcode_ret, CL_INVALID_BUFFER_SIZE);
	/* Initial contents travel in the request (docs/opencl.md, "Limits"). */
	if (data && size > WIRE_COPY_PIECE)
		return fail(errcode_ret, CL_OUT_OF_HOST_MEMORY);
	np = props_pack((const intptr_t *)properties, false, p);
	if (np < 0)
		return fail(errcode_ret, CL_INVALID_PROPERTY);
	req = (struct wire_cl_buffer_create_req){ c->o.handle, flags, size, props_blob(p, np, pbuf),
						  { host_ptr, data ? (uint32_t)size : 0 } };
	ret = rpc_cl_buffer_create(&req, &rep);
	if (ret != CL_SUCCESS)
		return fail(errcode_ret, ret);
	m = mem_new(rep.mem, c, flags, CL_MEM_OBJECT_BUFFER, host_ptr);
	if (m)
		m->size = size;
	return ok(errcode_ret, m);
}

cl_mem icd_create_buffer(cl_context c, cl_mem_flags flags, size_t size, void *host_ptr, cl_int *errcode_ret)
{
	return icd_create_buffer_props(c, NULL, flags, size, host_ptr, errcode_ret);
}

cl_mem icd_create_sub_buffer(cl_mem buffer, cl_mem_flags flags, cl_buffer_create_type type, const void *info,
			     cl_int *errcode_ret)
{
	const cl_buffer_region *r = info;
	struct wire_cl_sub_buffer_create_req req;
	struct wire_cl_sub_buffer_create_rep rep;
	struct _cl_mem *m;
	cl_int ret;

	if (!icd_object_valid(buffer, WIRE_HANDLE_CL_MEM) || buffer->type != CL_MEM_OBJECT_BUFFER)
		return fail(errcode_ret, CL_INVALID_MEM_OBJECT);
	if (type != CL_BUFFER_CREATE_TYPE_REGION || !r)
		return fail(errcode_ret, CL_INVALID_VALUE);
	req = (struct wire_cl_sub_buffer_create_req){ buffer->o.handle, flags, r->origin, r->size };
	ret = rpc_cl_sub_buffer_create(&req, &rep);
	if (ret != CL_SUCCESS)
		return fail(errcode_ret, ret);
	/* What the platform inherits from the buffer, the ICD's maps too. */
	m = mem_new(rep.mem, buffer->context, flags ? flags | (buffer->flags & CL_MEM_USE_HOST_PTR) : buffer->flags,
		    CL_MEM_OBJECT_BUFFER, buffer->host_ptr ? (char *)buffer->host_ptr + r->origin : NULL);
	if (m)
		m->size = r->size;
	return ok(errcode_ret, m);
}

/* Bytes per pixel of @f; 0 for a format the ICD does not know. */
static size_t format_bytes(const cl_image_format *f)
{
	size_t ch, sz;

	switch (f->image_channel_data_type) {
	case CL_UNORM_SHORT_565: case CL_UNORM_SHORT_555: return 2;
	case CL_UNORM_INT_101010: case CL_UNORM_INT_101010_2: case CL_UNORM_INT24: return 4;
	case CL_SNORM_INT8: case CL_UNORM_INT8: case CL_SIGNED_INT8: case CL_UNSIGNED_INT8: sz = 1; break;
	case CL_SNORM_INT16: case CL_UNORM_INT16: case CL_SIGNED_INT16: case CL_UNSIGNED_INT16: case CL_HALF_FLOAT:
		sz = 2;
		break;
	case CL_SIGNED_INT32: case CL_UNSIGNED_INT32: case CL_FLOAT: sz = 4; break;
	default: return 0;
	}
	switch (f->image_channel_order) {
	case CL_R: case CL_A: case CL_INTENSITY: case CL_LUMINANCE: case CL_DEPTH: ch = 1; break;
	case CL_RG: case CL_RA: case CL_Rx: ch = 2; break;
	case CL_RGB: case CL_RGx: case CL_sRGB: ch = 3; break;
	case CL_RGBA: case CL_BGRA: case CL_ARGB: case CL_ABGR: case CL_RGBx: case CL_sRGBA: case CL_sBGRA:
	case CL_sRGBx:
		ch = 4;
		break;
	default: return 0;
	}
	return ch * sz;
}

/* @region's rows of @row bytes, from @src with pitches into a packed @dst (or back). */
void icd_rect_copy(uint8_t *packed, uint8_t *host, size_t row, size_t rows, size_t slices, size_t row_pitch,
		   size_t slice_pitch, bool to_packed)
{
	for (size_t z = 0; z < slices; z++)
		for (size_t y = 0; y < rows; y++) {
			uint8_t *h = host + z * slice_pitch + y * row_pitch;
			uint8_t *p = packed + (z * rows + y) * row;

			if (to_packed)
				memcpy(p, h, row);
			else
				memcpy(h, p, row);
		}
}

cl_mem icd_create_image_props(cl_context c, const cl_mem_properties *properties, cl_mem_flags flags,
			      const cl_image_format *fmt, const cl_image_desc *desc, void *host_ptr,
			      cl_int *errcode_ret)
{
	struct wire_rec_cl_property p[WIRE_REC_CL_PROPERTY_MAX];
	struct wire_rec_cl_image_desc d;
	struct wire_cl_image_create_req req;
	struct wire_cl_image_create_rep rep;
	uint8_t pbuf[PROPS_BUF], dbuf[WIRE_REC_CL_IMAGE_DESC_BYTES], *packed = NULL;
	bool data = flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR);
	size_t elem, rows = 1, slices = 1, row, bytes = 0;
	struct _cl_mem *m;
	int np;
	cl_int ret;

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return fail(errcode_ret, CL_INVALID_CONTEXT);
	if (!fmt)
		return fail(errcode_ret, CL_INVALID_IMAGE_FORMAT_DESCRIPTOR);
	if (!desc)
		return fail(errcode_ret, CL_INVALID_IMAGE_DESCRIPTOR);
	if (data != (host_ptr != NULL))
		return fail(errcode_ret, CL_INVALID_HOST_PTR);
	if (desc->mem_object && !icd_object_valid(desc->mem_object, WIRE_HANDLE_CL_MEM))
		return fail(errcode_ret, CL_INVALID_IMAGE_DESCRIPTOR);
	elem = format_bytes(fmt);
	np = props_pack((const intptr_t *)properties, false, p);
	if (np < 0)
		return fail(errcode_ret, CL_INVALID_PROPERTY);
	switch (desc->image_type) {
	case CL_MEM_OBJECT_IMAGE1D_ARRAY: rows = desc->image_array_size; break;
	case CL_MEM_OBJECT_IMAGE2D: rows = desc->image_height; break;
	case CL_MEM_OBJECT_IMAGE2D_ARRAY: rows = desc->image_height; slices = desc->image_array_size; break;
	case CL_MEM_OBJECT_IMAGE3D: rows = desc->image_height; slices = desc->image_depth; break;
	default: break;
	}
	if (data) {
		/* The guest's pitches are its own: the rows travel packed. */
		size_t rp, sp;

		if (!elem)
			return fail(errcode_ret, CL_IMAGE_FORMAT_NOT_SUPPORTED);
		row = desc->image_width * elem;
		rp = desc->image_row_pitch ? desc->image_row_pitch : row;
		sp = desc->image_slice_pitch ? desc->image_slice_pitch : rp * (desc->image_type == CL_MEM_OBJECT_IMAGE1D_ARRAY ? 1 : rows);
		if (desc->image_type == CL_MEM_OBJECT_IMAGE1D_ARRAY) {
			/* a 1D array's rows are its images: the slice pitch is their pitch */
			rp = desc->image_slice_pitch ? desc->image_slice_pitch : rp;
		}
		if (!row || !rows || !slices || rp < row || row > WIRE_COPY_PIECE || rows > WIRE_COPY_PIECE / row ||
		    slices > WIRE_COPY_PIECE / (row * rows))
			return fail(errcode_ret, !row || rp < row ? CL_INVALID_IMAGE_DESCRIPTOR : CL_OUT_OF_HOST_MEMORY);
		bytes = row * rows * slices;
		packed = malloc(bytes);
		if (!packed)
			return fail(errcode_ret, CL_OUT_OF_HOST_MEMORY);
		icd_rect_copy(packed, host_ptr, row, rows, slices, rp, sp, true);
	}
	d = (struct wire_rec_cl_image_desc){ .type = desc->image_type, .width = desc->image_width,
					     .height = desc->image_height, .depth = desc->image_depth,
					     .array_size = desc->image_array_size, .row_pitch = desc->image_row_pitch,
					     .slice_pitch = desc->image_slice_pitch, .mip_levels = desc->num_mip_levels,
					     .samples = desc->num_samples,
					     .buffer = desc->mem_object ? desc->mem_object->o.handle : 0 };
	wire_rec_cl_image_desc_encode(&d, dbuf);
	req = (struct wire_cl_image_create_req){ c->o.handle, flags, props_blob(p, np, pbuf), fmt->image_channel_order,
						 fmt->image_channel_data_type, { dbuf, sizeof(dbuf) },
						 { packed, (uint32_t)bytes } };
	ret = rpc_cl_image_create(&req, &rep);
	free(packed);
	if (ret != CL_SUCCESS)
		return fail(errcode_ret, ret);
	m = mem_new(rep.mem, c, flags, desc->image_type, host_ptr);
	if (m) {
		m->elem = elem;
		m->width = desc->image_width;
		m->height = rows;
		m->depth = slices;
	}
	return ok(errcode_ret, m);
}

cl_mem icd_create_image(cl_context c, cl_mem_flags flags, const cl_image_format *fmt, const cl_image_desc *desc,
			void *host_ptr, cl_int *errcode_ret)
{
	return icd_create_image_props(c, NULL, flags, fmt, desc, host_ptr, errcode_ret);
}

cl_mem icd_create_image2d(cl_context c, cl_mem_flags flags, const cl_image_format *fmt, size_t w, size_t h,
			  size_t pitch, void *host_ptr, cl_int *errcode_ret)
{
	cl_image_desc d = { .image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = w, .image_height = h,
			    .image_row_pitch = pitch };

	return icd_create_image_props(c, NULL, flags, fmt, &d, host_ptr, errcode_ret);
}

cl_mem icd_create_image3d(cl_context c, cl_mem_flags flags, const cl_image_format *fmt, size_t w, size_t h,
			  size_t depth, size_t pitch, size_t slice_pitch, void *host_ptr, cl_int *errcode_ret)
{
	cl_image_desc d = { .image_type = CL_MEM_OBJECT_IMAGE3D, .image_width = w, .image_height = h,
			    .image_depth = depth, .image_row_pitch = pitch, .image_slice_pitch = slice_pitch };

	return icd_create_image_props(c, NULL, flags, fmt, &d, host_ptr, errcode_ret);
}

cl_int icd_get_supported_image_formats(cl_context c, cl_mem_flags flags, cl_mem_object_type type, cl_uint n,
				       cl_image_format *formats, cl_uint *num)
{
	struct wire_cl_image_formats_req req;
	struct wire_cl_image_formats_rep rep;
	cl_int ret;
	int count;

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return CL_INVALID_CONTEXT;
	if (n == 0 && formats)
		return CL_INVALID_VALUE;
	req = (struct wire_cl_image_formats_req){ c->o.handle, flags, type };
	ret = rpc_cl_image_formats(&req, &rep);
	if (ret != CL_SUCCESS)
		return ret;
	count = wire_rec_cl_image_format_count(rep.formats);
	if (count < 0)
		return CL_OUT_OF_RESOURCES;
	for (int i = 0; formats && i < count && (cl_uint)i < n; i++) {
		struct wire_rec_cl_image_format f;

		wire_rec_cl_image_format_get(rep.formats, (uint32_t)i, &f);
		formats[i] = (cl_image_format){ f.order, f.data_type };
	}
	if (num)
		*num = (cl_uint)count;
	return CL_SUCCESS;
}

cl_int icd_retain_mem(cl_mem m) { return icd_retain(m, WIRE_HANDLE_CL_MEM, CL_INVALID_MEM_OBJECT); }
cl_int icd_release_mem(cl_mem m) { return icd_release(m, WIRE_HANDLE_CL_MEM, CL_INVALID_MEM_OBJECT); }

void icd_mem_destroyed(cl_mem m)
{
	/* Newest first, as the specification orders them. */
	for (struct icd_destructor *d = m->destructors, *next; d; d = next) {
		next = d->next;
		d->fn(m, d->data);
		free(d);
	}
	for (struct icd_map *p = m->maps, *next; p; p = next) {
		next = p->next;
		if (p->owned)
			free(p->ptr);
		free(p);
	}
	pthread_mutex_destroy(&m->lock);
}

cl_int icd_set_mem_destructor(cl_mem m, void (CL_CALLBACK *fn)(cl_mem, void *), void *data)
{
	struct icd_destructor *d;

	if (!icd_object_valid(m, WIRE_HANDLE_CL_MEM))
		return CL_INVALID_MEM_OBJECT;
	if (!fn)
		return CL_INVALID_VALUE;
	d = malloc(sizeof(*d));
	if (!d)
		return CL_OUT_OF_HOST_MEMORY;
	d->fn = fn;
	d->data = data;
	pthread_mutex_lock(&m->lock);
	d->next = m->destructors;
	m->destructors = d;
	pthread_mutex_unlock(&m->lock);
	return CL_SUCCESS;
}

cl_int icd_get_mem_info(cl_mem m, cl_mem_info param, size_t size, void *value, size_t *size_ret)
{
	cl_bool no = CL_FALSE;
	cl_uint count;

	if (!icd_object_valid(m, WIRE_HANDLE_CL_MEM))
		return CL_INVALID_MEM_OBJECT;
	switch (param) {
	case CL_MEM_FLAGS:      /* the guest's: the worker's copy has its own host pointer flags */
		return icd_info_answer(&m->flags, sizeof(m->flags), size, value, size_ret);
	case CL_MEM_HOST_PTR:
		return icd_info_answer(&m->host_ptr, sizeof(m->host_ptr), size, value, size_ret);
	case CL_MEM_MAP_COUNT:
		count = m->map_count;
		return icd_info_answer(&count, sizeof(count), size, value, size_ret);
	case CL_MEM_USES_SVM_POINTER:
		return icd_info_answer(&no, sizeof(no), size, value, size_ret);
	default:
		return icd_info(CL_WIRE_QUERY_MEM, m->o.handle, 0, param, NULL, 0, size, value, size_ret);
	}
}

cl_int icd_get_image_info(cl_mem m, cl_image_info param, size_t size, void *value, size_t *size_ret)
{
	if (!icd_object_valid(m, WIRE_HANDLE_CL_MEM))
		return CL_INVALID_MEM_OBJECT;
	return icd_info(CL_WIRE_QUERY_IMAGE, m->o.handle, 0, param, NULL, 0, size, value, size_ret);
}

/* Samplers */

cl_sampler icd_create_sampler_props(cl_context c, const cl_sampler_properties *properties, cl_int *errcode_ret)
{
	struct wire_rec_cl_property p[WIRE_REC_CL_PROPERTY_MAX];
	struct wire_cl_sampler_create_req req;
	struct wire_cl_sampler_create_rep rep;
	uint8_t pbuf[PROPS_BUF];
	int np;
	cl_int ret;

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return fail(errcode_ret, CL_INVALID_CONTEXT);
	np = props_pack((const intptr_t *)properties, false, p);
	if (np < 0)
		return fail(errcode_ret, CL_INVALID_VALUE);
	req = (struct wire_cl_sampler_create_req){ c->o.handle, props_blob(p, np, pbuf) };
	ret = rpc_cl_sampler_create(&req, &rep);
	if (ret != CL_SUCCESS)
		return fail(errcode_ret, ret);
	return ok(errcode_ret, icd_object_new(WIRE_HANDLE_CL_SAMPLER, rep.sampler, sizeof(struct _cl_sampler)));
}

cl_sampler icd_create_sampler(cl_context c, cl_bool normalized, cl_addressing_mode am, cl_filter_mode fm,
			      cl_int *errcode_ret)
{
	cl_sampler_properties p[] = { CL_SAMPLER_NORMALIZED_COORDS, normalized, CL_SAMPLER_ADDRESSING_MODE, am,
				      CL_SAMPLER_FILTER_MODE, fm, 0 };

	return icd_create_sampler_props(c, p, errcode_ret);
}

cl_int icd_retain_sampler(cl_sampler s) { return icd_retain(s, WIRE_HANDLE_CL_SAMPLER, CL_INVALID_SAMPLER); }
cl_int icd_release_sampler(cl_sampler s) { return icd_release(s, WIRE_HANDLE_CL_SAMPLER, CL_INVALID_SAMPLER); }

cl_int icd_get_sampler_info(cl_sampler s, cl_sampler_info param, size_t size, void *value, size_t *size_ret)
{
	if (!icd_object_valid(s, WIRE_HANDLE_CL_SAMPLER))
		return CL_INVALID_SAMPLER;
	return icd_info(CL_WIRE_QUERY_SAMPLER, s->o.handle, 0, param, NULL, 0, size, value, size_ret);
}

/* Programs */

static cl_program program_new(cl_int ret, uint64_t handle, cl_context c, cl_int *errcode_ret)
{
	struct _cl_program *p;

	if (ret != CL_SUCCESS)
		return fail(errcode_ret, ret);
	p = icd_object_new(WIRE_HANDLE_CL_PROGRAM, handle, sizeof(*p));
	if (p)
		p->context = c;
	return ok(errcode_ret, p);
}

cl_program icd_create_program_source(cl_context c, cl_uint count, const char **strings, const size_t *lengths,
				     cl_int *errcode_ret)
{
	struct wire_cl_program_create_source_req req;
	struct wire_cl_program_create_source_rep rep;
	size_t total = 0, at = 0;
	char *src;
	cl_int ret;

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return fail(errcode_ret, CL_INVALID_CONTEXT);
	if (!count || !strings)
		return fail(errcode_ret, CL_INVALID_VALUE);
	for (cl_uint i = 0; i < count; i++) {
		if (!strings[i])
			return fail(errcode_ret, CL_INVALID_VALUE);
		total += lengths && lengths[i] ? lengths[i] : strlen(strings[i]);
	}
	if (total > WIRE_COPY_PIECE)
		return fail(errcode_ret, CL_OUT_OF_HOST_MEMORY);
	src = malloc(total + 1);
	if (!src)
		return fail(errcode_ret, CL_OUT_OF_HOST_MEMORY);
	for (cl_uint i = 0; i < count; i++) {
		size_t n = lengths && lengths[i] ? lengths[i] : strlen(strings[i]);

		memcpy(src + at, strings[i], n);
		at += n;
	}
	req = (struct wire_cl_program_create_source_req){ c->o.handle, { (uint8_t *)src, (uint32_t)total } };
	ret = total ? rpc_cl_program_create_source(&req, &rep) : CL_INVALID_VALUE;
	free(src);
	return program_new(ret, rep.program, c, errcode_ret);
}

cl_program icd_create_program_il(cl_context c, const void *il, size_t length, cl_int *errcode_ret)
{
	struct wire_cl_program_create_il_req req;
	struct wire_cl_program_create_il_rep rep = { 0 };

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return fail(errcode_ret, CL_INVALID_CONTEXT);
	if (!il || !length || length > WIRE_COPY_PIECE)
		return fail(errcode_ret, CL_INVALID_VALUE);
	req = (struct wire_cl_program_create_il_req){ c->o.handle, { il, (uint32_t)length } };
	return program_new(rpc_cl_program_create_il(&req, &rep), rep.program, c, errcode_ret);
}

cl_program icd_create_program_binary(cl_context c, cl_uint n, const cl_device_id *devices, const size_t *lengths,
				     const unsigned char **binaries, cl_int *binary_status, cl_int *errcode_ret)
{
	struct wire_cl_program_create_binary_req req;
	struct wire_cl_program_create_binary_rep rep = { 0 };
	uint8_t *dbuf, *lbuf, *bins;
	size_t total = 0, at = 0;
	bool bad;
	cl_int ret;

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return fail(errcode_ret, CL_INVALID_CONTEXT);
	if (!n || !devices || !lengths || !binaries)
		return fail(errcode_ret, CL_INVALID_VALUE);
	for (cl_uint i = 0; i < n; i++) {
		if (!lengths[i] || !binaries[i]) {
			if (binary_status)
				binary_status[i] = CL_INVALID_VALUE;
			return fail(errcode_ret, CL_INVALID_VALUE);
		}
		total += lengths[i];
	}
	if (total > WIRE_COPY_PIECE)
		return fail(errcode_ret, CL_OUT_OF_HOST_MEMORY);
	dbuf = handles_pack(n, (const void *const *)devices, WIRE_HANDLE_CL_DEVICE, &bad);
	if (bad || !dbuf)
		return fail(errcode_ret, bad ? CL_INVALID_DEVICE : CL_OUT_OF_HOST_MEMORY);
	lbuf = malloc((size_t)n * WIRE_REC_CL_SIZE_BYTES);
	bins = malloc(total);
	if (!lbuf || !bins) {
		free(dbuf);
		free(lbuf);
		free(bins);
		return fail(errcode_ret, CL_OUT_OF_HOST_MEMORY);
	}
	for (cl_uint i = 0; i < n; i++) {
		wire_rec_cl_size_put(lbuf, i, &(struct wire_rec_cl_size){ lengths[i] });
		memcpy(bins + at, binaries[i], lengths[i]);
		at += lengths[i];
	}
	req = (struct wire_cl_program_create_binary_req){ c->o.handle, { dbuf, n * WIRE_REC_CL_HANDLE_BYTES },
							  { lbuf, n * WIRE_REC_CL_SIZE_BYTES },
							  { bins, (uint32_t)total } };
	ret = rpc_cl_program_create_binary(&req, &rep);
	if (binary_status && wire_rec_cl_status_count(rep.statuses) == (int)n)
		for (cl_uint i = 0; i < n; i++) {
			struct wire_rec_cl_status s;

			wire_rec_cl_status_get(rep.statuses, i, &s);
			binary_status[i] = s.status;
		}
	free(dbuf);
	free(lbuf);
	free(bins);
	return program_new(ret, rep.program, c, errcode_ret);
}

cl_program icd_create_program_builtin(cl_context c, cl_uint n, const cl_device_id *devices, const char *names,
				      cl_int *errcode_ret)
{
	struct wire_cl_program_create_builtin_req req = { 0 };
	struct wire_cl_program_create_builtin_rep rep = { 0 };
	uint8_t *dbuf;
	bool bad;
	cl_int ret;

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return fail(errcode_ret, CL_INVALID_CONTEXT);
	if (!n || !devices || !names || strlen(names) > WIRE_STR_MAX)
		return fail(errcode_ret, CL_INVALID_VALUE);
	dbuf = handles_pack(n, (const void *const *)devices, WIRE_HANDLE_CL_DEVICE, &bad);
	if (bad || !dbuf)
		return fail(errcode_ret, bad ? CL_INVALID_DEVICE : CL_OUT_OF_HOST_MEMORY);
	req.context = c->o.handle;
	req.devices = (struct wire_blob){ dbuf, n * WIRE_REC_CL_HANDLE_BYTES };
	snprintf(req.names, sizeof(req.names), "%s", names);
	ret = rpc_cl_program_create_builtin(&req, &rep);
	free(dbuf);
	return program_new(ret, rep.program, c, errcode_ret);
}

/* A device list of a build, compile or link: packed, or CL_INVALID_* in *@ret. */
static struct wire_blob devices_blob(cl_uint n, const cl_device_id *devices, uint8_t **heap, cl_int *ret)
{
	bool bad;

	*heap = NULL;
	*ret = CL_SUCCESS;
	if ((n == 0) != (devices == NULL)) {
		*ret = CL_INVALID_VALUE;
		return (struct wire_blob){ NULL, 0 };
	}
	if (!n)
		return (struct wire_blob){ NULL, 0 };
	*heap = handles_pack(n, (const void *const *)devices, WIRE_HANDLE_CL_DEVICE, &bad);
	if (bad || !*heap)
		*ret = bad ? CL_INVALID_DEVICE : CL_OUT_OF_HOST_MEMORY;
	return (struct wire_blob){ *heap, n * WIRE_REC_CL_HANDLE_BYTES };
}

cl_int icd_build_program(cl_program p, cl_uint n, const cl_device_id *devices, const char *options,
			 void (CL_CALLBACK *notify)(cl_program, void *), void *data)
{
	struct wire_cl_program_build_req req = { 0 };
	struct wire_cl_program_build_rep rep;
	uint8_t *heap;
	cl_int ret;

	if (!icd_object_valid(p, WIRE_HANDLE_CL_PROGRAM))
		return CL_INVALID_PROGRAM;
	if (!notify && data)
		return CL_INVALID_VALUE;
	if (options && strlen(options) > WIRE_STR_MAX)
		return CL_INVALID_BUILD_OPTIONS;
	req.program = p->o.handle;
	req.devices = devices_blob(n, devices, &heap, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	snprintf(req.options, sizeof(req.options), "%s", options ? options : "");
	ret = rpc_cl_program_build(&req, &rep);
	free(heap);
	/* The build is done when the reply comes: its notification follows. */
	if (notify)
		notify(p, data);
	return ret;
}

cl_int icd_compile_program(cl_program p, cl_uint n, const cl_device_id *devices, const char *options, cl_uint nh,
			   const cl_program *headers, const char **names,
			   void (CL_CALLBACK *notify)(cl_program, void *), void *data)
{
	struct wire_cl_program_compile_req req = { 0 };
	struct wire_cl_program_compile_rep rep;
	uint8_t *heap, *hbuf = NULL;
	size_t at = 0;
	bool bad = false;
	cl_int ret;

	if (!icd_object_valid(p, WIRE_HANDLE_CL_PROGRAM))
		return CL_INVALID_PROGRAM;
	if ((!notify && data) || (nh == 0) != (headers == NULL) || (nh && !names))
		return CL_INVALID_VALUE;
	if (options && strlen(options) > WIRE_STR_MAX)
		return CL_INVALID_COMPILER_OPTIONS;
	req.program = p->o.handle;
	for (cl_uint i = 0; i < nh; i++) {
		size_t len = names[i] ? strlen(names[i]) : 0;

		if (!len || strchr(names[i], '\n') || at + len + 1 > WIRE_STR_MAX)
			return CL_INVALID_VALUE;
		memcpy(req.header_names + at, names[i], len);
		at += len;
		req.header_names[at++] = i + 1 < nh ? '\n' : 0;
	}
	if (nh) {
		hbuf = handles_pack(nh, (const void *const *)headers, WIRE_HANDLE_CL_PROGRAM, &bad);
		if (bad || !hbuf)
			return bad ? CL_INVALID_VALUE : CL_OUT_OF_HOST_MEMORY;
		req.headers = (struct wire_blob){ hbuf, nh * WIRE_REC_CL_HANDLE_BYTES };
	}
	req.devices = devices_blob(n, devices, &heap, &ret);
	if (ret == CL_SUCCESS) {
		snprintf(req.options, sizeof(req.options), "%s", options ? options : "");
		ret = rpc_cl_program_compile(&req, &rep);
	}
	free(heap);
	free(hbuf);
	if (notify && ret != CL_INVALID_VALUE)
		notify(p, data);
	return ret;
}

cl_program icd_link_program(cl_context c, cl_uint n, const cl_device_id *devices, const char *options, cl_uint np,
			    const cl_program *programs, void (CL_CALLBACK *notify)(cl_program, void *), void *data,
			    cl_int *errcode_ret)
{
	struct wire_cl_program_link_req req = { 0 };
	struct wire_cl_program_link_rep rep = { 0 };
	uint8_t *heap, *pbuf;
	cl_program out = NULL;
	bool bad;
	cl_int ret;

	if (!icd_object_valid(c, WIRE_HANDLE_CL_CONTEXT))
		return fail(errcode_ret, CL_INVALID_CONTEXT);
	if ((!notify && data) || !np || !programs)
		return fail(errcode_ret, CL_INVALID_VALUE);
	if (options && strlen(options) > WIRE_STR_MAX)
		return fail(errcode_ret, CL_INVALID_LINKER_OPTIONS);
	pbuf = handles_pack(np, (const void *const *)programs, WIRE_HANDLE_CL_PROGRAM, &bad);
	if (bad || !pbuf)
		return fail(errcode_ret, bad ? CL_INVALID_PROGRAM : CL_OUT_OF_HOST_MEMORY);
	req.context = c->o.handle;
	req.programs = (struct wire_blob){ pbuf, np * WIRE_REC_CL_HANDLE_BYTES };
	req.devices = devices_blob(n, devices, &heap, &ret);
	if (ret == CL_SUCCESS) {
		snprintf(req.options, sizeof(req.options), "%s", options ? options : "");
		ret = rpc_cl_program_link(&req, &rep);
	}
	free(heap);
	free(pbuf);
	if (rep.program)
		out = program_new(CL_SUCCESS, rep.program, c, NULL);
	if (notify && out)
		notify(out, data);
	if (errcode_ret)
		*errcode_ret = ret;
	return out;
}

cl_int icd_unload_platform_compiler(cl_platform_id platform)
{
	struct wire_cl_unload_compiler_req req;
	struct wire_cl_unload_compiler_rep rep;

	if (!icd_object_valid(platform, WIRE_HANDLE_CL_PLATFORM))
		return CL_INVALID_PLATFORM;
	req.platform = platform->o.handle;
	return rpc_cl_unload_compiler(&req, &rep);
}

cl_int icd_unload_compiler(void)
{
	return CL_SUCCESS;      /* a hint, and deprecated: no platform is named */
}

cl_int icd_retain_program(cl_program p) { return icd_retain(p, WIRE_HANDLE_CL_PROGRAM, CL_INVALID_PROGRAM); }
cl_int icd_release_program(cl_program p) { return icd_release(p, WIRE_HANDLE_CL_PROGRAM, CL_INVALID_PROGRAM); }

cl_int icd_get_program_info(cl_program p, cl_program_info param, size_t size, void *value, size_t *size_ret)
{
	struct wire_cl_program_binaries_req req;
	struct wire_cl_program_binaries_rep rep;
	uint64_t at = 0;
	cl_int ret;
	int n;

	if (!icd_object_valid(p, WIRE_HANDLE_CL_PROGRAM))
		return CL_INVALID_PROGRAM;
	if (param != CL_PROGRAM_BINARIES)
		return icd_info(CL_WIRE_QUERY_PROGRAM, p->o.handle, 0, param, NULL, 0, size, value, size_ret);
	/* An array of the application's buffers, each filled with a binary. */
	req.program = p->o.handle;
	ret = rpc_cl_program_binaries(&req, &rep);
	if (ret != CL_SUCCESS)
		return ret;
	n = wire_rec_cl_size_count(rep.lengths);
	if (n < 0)
		return CL_OUT_OF_RESOURCES;
	if (size_ret)
		*size_ret = (size_t)n * sizeof(unsigned char *);
	if (!value)
		return CL_SUCCESS;
	if (size < (size_t)n * sizeof(unsigned char *))
		return CL_INVALID_VALUE;
	for (int i = 0; i < n; i++) {
		struct wire_rec_cl_size l;
		unsigned char *dst = ((unsigned char **)value)[i];

		wire_rec_cl_size_get(rep.lengths, (uint32_t)i, &l);
		if (l.value > rep.binaries.len - at)
			return CL_OUT_OF_RESOURCES;
		if (dst)
			memcpy(dst, rep.binaries.ptr + at, l.value);
		at += l.value;
	}
	return CL_SUCCESS;
}

cl_int icd_get_program_build_info(cl_program p, cl_device_id d, cl_program_build_info param, size_t size,
				  void *value, size_t *size_ret)
{
	if (!icd_object_valid(p, WIRE_HANDLE_CL_PROGRAM))
		return CL_INVALID_PROGRAM;
	if (!icd_object_valid(d, WIRE_HANDLE_CL_DEVICE))
		return CL_INVALID_DEVICE;
	return icd_info(CL_WIRE_QUERY_PROGRAM_BUILD, p->o.handle, d->o.handle, param, NULL, 0, size, value, size_ret);
}

/* Kernels */

static cl_kernel kernel_new(uint64_t handle, cl_program p, uint32_t num_args)
{
	struct _cl_kernel *k = icd_object_new(WIRE_HANDLE_CL_KERNEL, handle, sizeof(*k));

	if (k) {
		k->program = p;
		k->context = p->context;
		k->num_args = num_args;
	}
	return k;
}

cl_kernel icd_create_kernel(cl_program p, const char *name, cl_int *errcode_ret)
{
	struct wire_cl_kernel_create_req req = { 0 };
	struct wire_cl_kernel_create_rep rep;
	cl_int ret;

	if (!icd_object_valid(p, WIRE_HANDLE_CL_PROGRAM))
		return fail(errcode_ret, CL_INVALID_PROGRAM);
	if (!name)
		return fail(errcode_ret, CL_INVALID_VALUE);
	if (strlen(name) > WIRE_STR_MAX)
		return fail(errcode_ret, CL_INVALID_KERNEL_NAME);
	req.program = p->o.handle;
	snprintf(req.name, sizeof(req.name), "%s", name);
	ret = rpc_cl_kernel_create(&req, &rep);
	if (ret != CL_SUCCESS)
		return fail(errcode_ret, ret);
	return ok(errcode_ret, kernel_new(rep.kernel, p, rep.num_args));
}

cl_int icd_create_kernels(cl_program p, cl_uint n, cl_kernel *kernels, cl_uint *num)
{
	struct wire_cl_kernels_create_req req;
	struct wire_cl_kernels_create_rep rep;
	cl_int ret;
	int count;

	if (!icd_object_valid(p, WIRE_HANDLE_CL_PROGRAM))
		return CL_INVALID_PROGRAM;
	req.program = p->o.handle;
	ret = rpc_cl_kernels_create(&req, &rep);
	if (ret != CL_SUCCESS)
		return ret;
	count = wire_rec_cl_handle_count(rep.kernels);
	if (count < 0)
		return CL_OUT_OF_RESOURCES;
	for (int i = 0; i < count; i++) {
		struct wire_rec_cl_handle h;
		cl_uint args = 0;
		cl_kernel k;

		wire_rec_cl_handle_get(rep.kernels, (uint32_t)i, &h);
		if (!kernels || n < (cl_uint)count) {
			/* Not the application's: the worker's made them all. */
			struct wire_cl_release_req rel = { h.object };

			rpc_cl_release_defer(&rel);
			continue;
		}
		k = kernel_new(h.object, p, 0);
		if (k)
			icd_info(CL_WIRE_QUERY_KERNEL, h.object, 0, CL_KERNEL_NUM_ARGS, NULL, 0, sizeof(args), &args, NULL);
		if (k)
			k->num_args = args;
		kernels[i] = k;
	}
	if (kernels && n < (cl_uint)count)
		return CL_INVALID_VALUE;
	if (num)
		*num = (cl_uint)count;
	return CL_SUCCESS;
}

cl_kernel icd_clone_kernel(cl_kernel src, cl_int *errcode_ret)
{
	struct wire_cl_kernel_clone_req req;
	struct wire_cl_kernel_clone_rep rep;
	struct _cl_kernel *k;
	cl_int ret;

	if (!icd_object_valid(src, WIRE_HANDLE_CL_KERNEL))
		return fail(errcode_ret, CL_INVALID_KERNEL);
	req.kernel = src->o.handle;
	ret = rpc_cl_kernel_clone(&req, &rep);
	if (ret != CL_SUCCESS)
		return fail(errcode_ret, ret);
	k = kernel_new(rep.clone, src->program, src->num_args);
	if (k)
		memcpy(k->ok, src->ok, sizeof(k->ok));
	return ok(errcode_ret, k);
}

cl_int icd_set_kernel_arg(cl_kernel k, cl_uint index, size_t size, const void *value)
{
	struct wire_cl_kernel_set_arg_req req = { 0 };
	struct wire_cl_kernel_set_arg_rep rep;
	uint8_t hbuf[WIRE_REC_CL_HANDLE_BYTES];
	cl_int ret;

	if (!icd_object_valid(k, WIRE_HANDLE_CL_KERNEL))
		return CL_INVALID_KERNEL;
	if (index >= k->num_args)
		return CL_INVALID_ARG_INDEX;
	req.kernel = k->o.handle;
	req.index = index;
	req.size = size;
	/* What the value is, the platform knows by the kernel's signature; the
	 * guest tells its own objects by their pointers: a NULL value is local
	 * memory or a NULL buffer alike to the platform. */
	if (!value) {
		req.kind = CL_WIRE_ARG_LOCAL;
	} else if (size == sizeof(cl_mem) && icd_object_valid(*(void *const *)value, WIRE_HANDLE_CL_MEM)) {
		req.kind = CL_WIRE_ARG_MEM;
		wire_rec_cl_handle_encode(&(struct wire_rec_cl_handle){ (*(const cl_mem *)value)->o.handle }, hbuf);
		req.value = (struct wire_blob){ hbuf, sizeof(hbuf) };
	} else if (size == sizeof(cl_sampler) && icd_object_valid(*(void *const *)value, WIRE_HANDLE_CL_SAMPLER)) {
		req.kind = CL_WIRE_ARG_SAMPLER;
		wire_rec_cl_handle_encode(&(struct wire_rec_cl_handle){ (*(const cl_sampler *)value)->o.handle }, hbuf);
		req.value = (struct wire_blob){ hbuf, sizeof(hbuf) };
	} else {
		if (size > WIRE_COPY_PIECE)
			return CL_INVALID_ARG_SIZE;
		req.kind = CL_WIRE_ARG_VALUE;
		req.value = (struct wire_blob){ value, (uint32_t)size };
	}
	/* The same kind and size as an earlier success succeeds again: deferred. */
	if (index < ICD_ARGS_CACHED && k->ok[index].kind == req.kind && k->ok[index].size == size)
		return rpc_cl_kernel_set_arg_defer(&req);
	ret = rpc_cl_kernel_set_arg(&req, &rep);
	if (ret == CL_SUCCESS && index < ICD_ARGS_CACHED)
		k->ok[index] = (struct icd_arg_ok){ req.kind, size };
	return ret;
}

cl_int icd_retain_kernel(cl_kernel k) { return icd_retain(k, WIRE_HANDLE_CL_KERNEL, CL_INVALID_KERNEL); }
cl_int icd_release_kernel(cl_kernel k) { return icd_release(k, WIRE_HANDLE_CL_KERNEL, CL_INVALID_KERNEL); }

cl_int icd_get_kernel_info(cl_kernel k, cl_kernel_info param, size_t size, void *value, size_t *size_ret)
{
	if (!icd_object_valid(k, WIRE_HANDLE_CL_KERNEL))
		return CL_INVALID_KERNEL;
	return icd_info(CL_WIRE_QUERY_KERNEL, k->o.handle, 0, param, NULL, 0, size, value, size_ret);
}

cl_int icd_get_kernel_work_group_info(cl_kernel k, cl_device_id d, cl_kernel_work_group_info param, size_t size,
				      void *value, size_t *size_ret)
{
	if (!icd_object_valid(k, WIRE_HANDLE_CL_KERNEL))
		return CL_INVALID_KERNEL;
	if (d && !icd_object_valid(d, WIRE_HANDLE_CL_DEVICE))
		return CL_INVALID_DEVICE;
	return icd_info(CL_WIRE_QUERY_KERNEL_WORK_GROUP, k->o.handle, d ? d->o.handle : 0, param, NULL, 0, size, value,
			size_ret);
}

cl_int icd_get_kernel_arg_info(cl_kernel k, cl_uint index, cl_kernel_arg_info param, size_t size, void *value,
			       size_t *size_ret)
{
	if (!icd_object_valid(k, WIRE_HANDLE_CL_KERNEL))
		return CL_INVALID_KERNEL;
	return icd_info(CL_WIRE_QUERY_KERNEL_ARG, k->o.handle, index, param, NULL, 0, size, value, size_ret);
}

cl_int icd_get_kernel_sub_group_info(cl_kernel k, cl_device_id d, cl_kernel_sub_group_info param, size_t in_size,
				     const void *in, size_t size, void *value, size_t *size_ret)
{
	if (!icd_object_valid(k, WIRE_HANDLE_CL_KERNEL))
		return CL_INVALID_KERNEL;
	if (!icd_object_valid(d, WIRE_HANDLE_CL_DEVICE))
		return CL_INVALID_DEVICE;
	if (in_size > 64)
		return CL_INVALID_VALUE;
	return icd_info(CL_WIRE_QUERY_KERNEL_SUB_GROUP, k->o.handle, d->o.handle, param, in, in_size, size, value,
			size_ret);
}
