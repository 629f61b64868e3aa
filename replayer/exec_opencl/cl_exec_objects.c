/* Contexts, queues, memory objects, samplers, programs and kernels: their
 * creation, each journaled as the request that recreates it. */
#define LOG_PREFIX "opencl: "

#include <stdlib.h>
#include <string.h>

#include "cl_exec.h"
#include "cl_wire.h"
#include "log.h"
#include "wire_cl_dispatch.h"

/* The longest properties list a call takes (cl_property records) and its 0. */
#define PROPS_MAX (WIRE_REC_CL_PROPERTY_MAX * 2 + 1)

/* A properties blob as the platform takes it: NULL for none. Handles in it
 * (a context's CL_CONTEXT_PLATFORM) become the host's; a context's other
 * keys pass only where they hold plain values. */
static cl_int props_get(struct cl_exec *x, struct wire_blob b, bool context, cl_ulong out[PROPS_MAX], bool *any)
{
	int n = wire_rec_cl_property_count(b);

	*any = n > 0;
	if (n < 0)
		return CL_INVALID_PROPERTY;
	for (int i = 0; i < n; i++) {
		struct wire_rec_cl_property p;

		if (wire_rec_cl_property_get(b, (uint32_t)i, &p))
			return CL_INVALID_PROPERTY;
		if (context) {
			struct handle_entry *e;

			if (p.name == CL_CONTEXT_PLATFORM) {
				if (cl_exec_lookup_cl_platform(x, p.value, &e) != CL_SUCCESS)
					return CL_INVALID_PLATFORM;
				p.value = (uint64_t)(uintptr_t)e->real;
			} else if (p.name != CL_CONTEXT_INTEROP_USER_SYNC) {
				/* Interop with the guest's GL, D3D, VA, EGL: nothing to share. */
				return CL_INVALID_PROPERTY;
			}
		}
		out[2 * i] = p.name;
		out[2 * i + 1] = p.value;
	}
	out[2 * n] = 0;
	return CL_SUCCESS;
}

cl_int exec_cl_context_create(struct cl_exec *x, const struct wire_cl_context_create_req *req,
			      struct wire_cl_context_create_rep *rep)
{
	cl_ulong props[PROPS_MAX];
	cl_device_id *devs = NULL;
	cl_context ctx;
	struct cl_obj *o;
	cl_uint n = 0;
	bool any;
	cl_int ret = props_get(x, req->properties, true, props, &any);

	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_handles_get(x, req->devices, HANDLE_CL_DEVICE, CL_INVALID_DEVICE, (void ***)&devs, &n);
	if (ret != CL_SUCCESS)
		return ret;
	/* The guest's callback is the guest's (docs/opencl.md): none here. */
	if (n)
		ctx = x->host.clCreateContext(any ? (cl_context_properties *)props : NULL, n, devs, NULL, NULL, &ret);
	else
		ctx = x->host.clCreateContextFromType(any ? (cl_context_properties *)props : NULL,
						      (cl_device_type)req->type, NULL, NULL, &ret);
	free(devs);
	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_object_add(x, HANDLE_CL_CONTEXT, ctx, 0, &rep->context, &o);
	if (ret == CL_SUCCESS)
		ret = cl_journal_note(x, o, 0, false);
	return ret;
}

cl_int exec_cl_queue_create(struct cl_exec *x, const struct wire_cl_queue_create_req *req,
			    struct wire_cl_queue_create_rep *rep)
{
	struct handle_entry *ce, *de;
	cl_ulong props[PROPS_MAX];
	cl_command_queue q;
	struct cl_obj *o;
	bool any;
	cl_int ret;

	if ((ret = cl_exec_lookup_cl_context(x, req->context, &ce)) != CL_SUCCESS ||
	    (ret = cl_exec_lookup_cl_device(x, req->device, &de)) != CL_SUCCESS ||
	    (ret = props_get(x, req->properties, false, props, &any)) != CL_SUCCESS)
		return ret;
	if (!x->host.clCreateCommandQueueWithProperties)
		return CL_INVALID_OPERATION;
	q = x->host.clCreateCommandQueueWithProperties(ce->real, de->real, any ? (cl_queue_properties *)props : NULL,
						       &ret);
	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_object_add(x, HANDLE_CL_QUEUE, q, req->context, &rep->queue, &o);
	if (ret == CL_SUCCESS)
		ret = cl_journal_note(x, o, 0, false);
	return ret;
}

/* The host's flags of a guest's memory object: the guest's memory is not
 * the worker's, so a host pointer is always a copy (docs/opencl.md). */
static cl_mem_flags mem_flags_host(uint64_t flags, bool data)
{
	flags &= ~(uint64_t)(CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR | CL_MEM_ALLOC_HOST_PTR);
	return (cl_mem_flags)(data ? flags | CL_MEM_COPY_HOST_PTR : flags);
}

/* Whether the guest's flags ask for initial contents. */
static bool mem_flags_data(uint64_t flags)
{
	return flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR);
}

cl_int exec_cl_buffer_create(struct cl_exec *x, const struct wire_cl_buffer_create_req *req,
			     struct wire_cl_buffer_create_rep *rep)
{
	struct handle_entry *ce;
	cl_ulong props[PROPS_MAX];
	struct cl_obj *o;
	struct wire_msg m;
	cl_mem mem;
	bool any, data = mem_flags_data(req->flags);
	cl_int ret;

	if ((ret = cl_exec_lookup_cl_context(x, req->context, &ce)) != CL_SUCCESS ||
	    (ret = props_get(x, req->properties, false, props, &any)) != CL_SUCCESS)
		return ret;
	if (data != (req->data.len > 0) || (data && req->data.len != req->size))
		return CL_INVALID_HOST_PTR;
	if (any && !x->host.clCreateBufferWithProperties)
		return CL_INVALID_PROPERTY;
	if (any)
		mem = x->host.clCreateBufferWithProperties(ce->real, (cl_mem_properties *)props,
							   mem_flags_host(req->flags, data), (size_t)req->size,
							   data ? (void *)req->data.ptr : NULL, &ret);
	else
		mem = x->host.clCreateBuffer(ce->real, mem_flags_host(req->flags, data), (size_t)req->size,
					     data ? (void *)req->data.ptr : NULL, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_object_add(x, HANDLE_CL_MEM, mem, req->context, &rep->mem, &o);
	if (ret != CL_SUCCESS)
		return ret;
	o->size = req->size;
	o->flags = req->flags;
	o->mem_type = CL_MEM_OBJECT_BUFFER;
	/* Journaled without its contents: a snapshot keeps those apart. */
	{
		struct wire_cl_buffer_create_req j = *req;

		j.flags &= ~(uint64_t)(CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR);
		j.data = (struct wire_blob){ NULL, 0 };
		wire_msg_init(&m);
		wire_cl_buffer_create_req_encode(&m, &j);
		ret = cl_journal_note_msg(o, WIRE_CALL_CL_BUFFER_CREATE, &m);
		wire_msg_release(&m);
	}
	return ret;
}

cl_int exec_cl_sub_buffer_create(struct cl_exec *x, const struct wire_cl_sub_buffer_create_req *req,
				 struct wire_cl_sub_buffer_create_rep *rep)
{
	cl_buffer_region region = { (size_t)req->origin, (size_t)req->size };
	struct handle_entry *be;
	struct cl_obj *o;
	cl_mem mem;
	cl_int ret = cl_exec_lookup_cl_mem(x, req->buffer, &be);

	if (ret != CL_SUCCESS)
		return ret;
	mem = x->host.clCreateSubBuffer(be->real, (cl_mem_flags)req->flags, CL_BUFFER_CREATE_TYPE_REGION, &region,
					&ret);
	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_object_add(x, HANDLE_CL_MEM, mem, ((struct cl_obj *)be->info)->context, &rep->mem, &o);
	if (ret != CL_SUCCESS)
		return ret;
	o->size = req->size;
	o->flags = req->flags;
	o->mem_type = CL_MEM_OBJECT_BUFFER;
	o->parent = req->buffer;
	o->origin = req->origin;
	return cl_journal_note(x, o, 0, false);
}

cl_int exec_cl_image_create(struct cl_exec *x, const struct wire_cl_image_create_req *req,
			    struct wire_cl_image_create_rep *rep)
{
	cl_image_format fmt = { req->order, req->data_type };
	struct wire_rec_cl_image_desc d;
	struct handle_entry *ce, *be = NULL;
	cl_ulong props[PROPS_MAX];
	cl_image_desc desc;
	struct cl_obj *o;
	struct wire_msg m;
	cl_mem mem;
	bool any, data = mem_flags_data(req->flags);
	cl_int ret;

	if ((ret = cl_exec_lookup_cl_context(x, req->context, &ce)) != CL_SUCCESS ||
	    (ret = props_get(x, req->properties, false, props, &any)) != CL_SUCCESS)
		return ret;
	if (wire_rec_cl_image_desc_decode(req->desc.ptr, req->desc.len, &d))
		return CL_INVALID_IMAGE_DESCRIPTOR;
	if (d.buffer && cl_exec_lookup_cl_mem(x, d.buffer, &be) != CL_SUCCESS)
		return CL_INVALID_IMAGE_DESCRIPTOR;
	if (data != (req->data.len > 0))
		return CL_INVALID_HOST_PTR;
	memset(&desc, 0, sizeof(desc));
	desc.image_type = d.type;
	desc.image_width = (size_t)d.width;
	desc.image_height = (size_t)d.height;
	desc.image_depth = (size_t)d.depth;
	desc.image_array_size = (size_t)d.array_size;
	/* The guest packs its rows: the pitches are the platform's when the
	 * contents come from the guest (a host pointer's pitch was the guest's). */
	desc.image_row_pitch = data ? 0 : (size_t)d.row_pitch;
	desc.image_slice_pitch = data ? 0 : (size_t)d.slice_pitch;
	desc.num_mip_levels = d.mip_levels;
	desc.num_samples = d.samples;
	desc.mem_object = be ? be->real : NULL;
	if (data) {
		/* The packed size must be what the platform will read. */
		size_t elem = 0;
		cl_mem probe;

		probe = x->host.clCreateImage(ce->real, mem_flags_host(req->flags, false), &fmt, &desc, NULL, &ret);
		if (ret != CL_SUCCESS)
			return ret;
		ret = x->host.clGetImageInfo(probe, CL_IMAGE_ELEMENT_SIZE, sizeof(elem), &elem, NULL);
		x->host.clReleaseMemObject(probe);
		if (ret != CL_SUCCESS)
			return ret;
		{
			uint64_t h = d.type == CL_MEM_OBJECT_IMAGE1D_ARRAY ? d.array_size : d.height ? d.height : 1;
			uint64_t z = d.type == CL_MEM_OBJECT_IMAGE2D_ARRAY ? d.array_size : d.depth ? d.depth : 1;

			if (d.type == CL_MEM_OBJECT_IMAGE1D || d.type == CL_MEM_OBJECT_IMAGE1D_BUFFER)
				h = 1;
			if (d.type != CL_MEM_OBJECT_IMAGE3D && d.type != CL_MEM_OBJECT_IMAGE2D_ARRAY)
				z = 1;
			if (!d.width || h > UINT32_MAX || z > UINT32_MAX ||
			    (uint64_t)req->data.len != d.width * h * z * elem)
				return CL_INVALID_HOST_PTR;
		}
	}
	if (any && x->host.clCreateImageWithProperties)
		mem = x->host.clCreateImageWithProperties(ce->real, (cl_mem_properties *)props,
							  mem_flags_host(req->flags, data), &fmt, &desc,
							  data ? (void *)req->data.ptr : NULL, &ret);
	else if (any)
		return CL_INVALID_PROPERTY;
	else
		mem = x->host.clCreateImage(ce->real, mem_flags_host(req->flags, data), &fmt, &desc,
					    data ? (void *)req->data.ptr : NULL, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_object_add(x, HANDLE_CL_MEM, mem, req->context, &rep->mem, &o);
	if (ret != CL_SUCCESS)
		return ret;
	o->flags = req->flags;
	o->mem_type = d.type;
	o->parent = d.buffer;
	{
		struct wire_cl_image_create_req j = *req;

		j.flags &= ~(uint64_t)(CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR);
		j.data = (struct wire_blob){ NULL, 0 };
		wire_msg_init(&m);
		wire_cl_image_create_req_encode(&m, &j);
		ret = cl_journal_note_msg(o, WIRE_CALL_CL_IMAGE_CREATE, &m);
		wire_msg_release(&m);
	}
	return ret;
}

cl_int exec_cl_image_formats(struct cl_exec *x, const struct wire_cl_image_formats_req *req,
			     struct wire_cl_image_formats_rep *rep)
{
	struct handle_entry *ce;
	cl_image_format *f;
	uint8_t *buf;
	cl_uint n = 0;
	cl_int ret = cl_exec_lookup_cl_context(x, req->context, &ce);

	if (ret != CL_SUCCESS)
		return ret;
	ret = x->host.clGetSupportedImageFormats(ce->real, (cl_mem_flags)req->flags, req->type, 0, NULL, &n);
	if (ret != CL_SUCCESS)
		return ret;
	if (n > WIRE_REC_CL_IMAGE_FORMAT_MAX)
		n = WIRE_REC_CL_IMAGE_FORMAT_MAX;
	f = calloc(n ? n : 1, sizeof(*f));
	buf = cl_exec_reply_alloc(x, (size_t)n * WIRE_REC_CL_IMAGE_FORMAT_BYTES);
	if (!f || !buf) {
		free(f);
		return CL_OUT_OF_HOST_MEMORY;
	}
	ret = x->host.clGetSupportedImageFormats(ce->real, (cl_mem_flags)req->flags, req->type, n, f, NULL);
	for (cl_uint i = 0; ret == CL_SUCCESS && i < n; i++)
		wire_rec_cl_image_format_put(buf, i, &(struct wire_rec_cl_image_format){ f[i].image_channel_order,
											   f[i].image_channel_data_type });
	free(f);
	if (ret == CL_SUCCESS)
		rep->formats = (struct wire_blob){ buf, n * WIRE_REC_CL_IMAGE_FORMAT_BYTES };
	return ret;
}

cl_int exec_cl_sampler_create(struct cl_exec *x, const struct wire_cl_sampler_create_req *req,
			      struct wire_cl_sampler_create_rep *rep)
{
	struct handle_entry *ce;
	cl_ulong props[PROPS_MAX];
	cl_sampler s;
	struct cl_obj *o;
	bool any;
	cl_int ret;

	if ((ret = cl_exec_lookup_cl_context(x, req->context, &ce)) != CL_SUCCESS ||
	    (ret = props_get(x, req->properties, false, props, &any)) != CL_SUCCESS)
		return ret;
	if (!x->host.clCreateSamplerWithProperties)
		return CL_INVALID_OPERATION;
	s = x->host.clCreateSamplerWithProperties(ce->real, any ? (cl_sampler_properties *)props : NULL, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_object_add(x, HANDLE_CL_SAMPLER, s, req->context, &rep->sampler, &o);
	if (ret == CL_SUCCESS)
		ret = cl_journal_note(x, o, 0, false);
	return ret;
}

/* A new program's handle, journaled by its creating request, whose cl_int
 * was @status (a link that failed may leave a program). */
static cl_int program_add(struct cl_exec *x, cl_program p, uint64_t context, cl_int status, uint64_t *handle)
{
	struct cl_obj *o;
	cl_int ret = cl_exec_object_add(x, HANDLE_CL_PROGRAM, p, context, handle, &o);

	if (ret != CL_SUCCESS) {
		x->host.clReleaseProgram(p);
		return ret;
	}
	return cl_journal_note(x, o, cl_journal_status_tag(status), false);
}

cl_int exec_cl_program_create_source(struct cl_exec *x, const struct wire_cl_program_create_source_req *req,
				     struct wire_cl_program_create_source_rep *rep)
{
	const char *src = (const char *)req->source.ptr;
	size_t len = req->source.len;
	struct handle_entry *ce;
	cl_program p;
	cl_int ret = cl_exec_lookup_cl_context(x, req->context, &ce);

	if (ret != CL_SUCCESS)
		return ret;
	if (!len)
		return CL_INVALID_VALUE;
	p = x->host.clCreateProgramWithSource(ce->real, 1, &src, &len, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	return program_add(x, p, req->context, CL_SUCCESS, &rep->program);
}

cl_int exec_cl_program_create_il(struct cl_exec *x, const struct wire_cl_program_create_il_req *req,
				 struct wire_cl_program_create_il_rep *rep)
{
	struct handle_entry *ce;
	cl_program p;
	cl_int ret = cl_exec_lookup_cl_context(x, req->context, &ce);

	if (ret != CL_SUCCESS)
		return ret;
	if (!x->host.clCreateProgramWithIL)
		return CL_INVALID_OPERATION;
	if (!req->il.len)
		return CL_INVALID_VALUE;
	p = x->host.clCreateProgramWithIL(ce->real, req->il.ptr, req->il.len, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	return program_add(x, p, req->context, CL_SUCCESS, &rep->program);
}

cl_int exec_cl_program_create_binary(struct cl_exec *x, const struct wire_cl_program_create_binary_req *req,
				     struct wire_cl_program_create_binary_rep *rep)
{
	struct handle_entry *ce;
	cl_device_id *devs = NULL;
	const unsigned char **bins = NULL;
	size_t *lens = NULL;
	cl_int *st = NULL;
	uint64_t at = 0;
	cl_uint n = 0;
	cl_program p;
	uint8_t *sbuf;
	cl_int ret = cl_exec_lookup_cl_context(x, req->context, &ce);

	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_handles_get(x, req->devices, HANDLE_CL_DEVICE, CL_INVALID_DEVICE, (void ***)&devs, &n);
	if (ret != CL_SUCCESS)
		return ret;
	if (!n || wire_rec_cl_size_count(req->lengths) != (int)n) {
		ret = CL_INVALID_VALUE;
		goto out;
	}
	bins = calloc(n, sizeof(*bins));
	lens = calloc(n, sizeof(*lens));
	st = calloc(n, sizeof(*st));
	sbuf = cl_exec_reply_alloc(x, (size_t)n * WIRE_REC_CL_STATUS_BYTES);
	if (!bins || !lens || !st || !sbuf) {
		ret = CL_OUT_OF_HOST_MEMORY;
		goto out;
	}
	for (cl_uint i = 0; i < n; i++) {
		struct wire_rec_cl_size l;

		wire_rec_cl_size_get(req->lengths, i, &l);
		if (!l.value || l.value > req->binaries.len - at) {
			ret = CL_INVALID_VALUE;
			goto out;
		}
		bins[i] = req->binaries.ptr + at;
		lens[i] = (size_t)l.value;
		at += l.value;
	}
	if (at != req->binaries.len) {
		ret = CL_INVALID_VALUE;
		goto out;
	}
	p = x->host.clCreateProgramWithBinary(ce->real, n, devs, lens, bins, st, &ret);
	for (cl_uint i = 0; i < n; i++)
		wire_rec_cl_status_put(sbuf, i, &(struct wire_rec_cl_status){ st[i] });
	rep->statuses = (struct wire_blob){ sbuf, n * WIRE_REC_CL_STATUS_BYTES };
	if (ret == CL_SUCCESS)
		ret = program_add(x, p, req->context, CL_SUCCESS, &rep->program);
out:
	free(devs);
	free(bins);
	free(lens);
	free(st);
	return ret;
}

cl_int exec_cl_program_create_builtin(struct cl_exec *x, const struct wire_cl_program_create_builtin_req *req,
				      struct wire_cl_program_create_builtin_rep *rep)
{
	struct handle_entry *ce;
	cl_device_id *devs = NULL;
	cl_uint n = 0;
	cl_program p;
	cl_int ret = cl_exec_lookup_cl_context(x, req->context, &ce);

	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_handles_get(x, req->devices, HANDLE_CL_DEVICE, CL_INVALID_DEVICE, (void ***)&devs, &n);
	if (ret != CL_SUCCESS)
		return ret;
	p = x->host.clCreateProgramWithBuiltInKernels(ce->real, n, devs, req->names, &ret);
	free(devs);
	if (ret != CL_SUCCESS)
		return ret;
	return program_add(x, p, req->context, CL_SUCCESS, &rep->program);
}

cl_int exec_cl_program_build(struct cl_exec *x, const struct wire_cl_program_build_req *req,
			     struct wire_cl_program_build_rep *rep)
{
	struct handle_entry *pe;
	cl_device_id *devs = NULL;
	cl_uint n = 0;
	cl_int ret = cl_exec_lookup_cl_program(x, req->program, &pe);

	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_handles_get(x, req->devices, HANDLE_CL_DEVICE, CL_INVALID_DEVICE, (void ***)&devs, &n);
	if (ret != CL_SUCCESS)
		return ret;
	/* Built at once: the guest calls its own pfn_notify after the reply. */
	ret = x->host.clBuildProgram(pe->real, n, devs, req->options, NULL, NULL);
	free(devs);
	/* A failed build is kept too: a restore fails it again, and the log
	 * answers the same. */
	cl_journal_note(x, pe->info, cl_journal_status_tag(ret), false);
	return ret;
}

cl_int exec_cl_program_compile(struct cl_exec *x, const struct wire_cl_program_compile_req *req,
			       struct wire_cl_program_compile_rep *rep)
{
	struct handle_entry *pe;
	cl_device_id *devs = NULL;
	cl_program *headers = NULL;
	const char **names = NULL;
	char *copy = NULL, *save = NULL;
	cl_uint n = 0, nh = 0;
	cl_int ret = cl_exec_lookup_cl_program(x, req->program, &pe);

	if (ret != CL_SUCCESS)
		return ret;
	if (!x->host.clCompileProgram)
		return CL_INVALID_OPERATION;
	ret = cl_exec_handles_get(x, req->devices, HANDLE_CL_DEVICE, CL_INVALID_DEVICE, (void ***)&devs, &n);
	if (ret != CL_SUCCESS)
		return ret;
	ret = cl_exec_handles_get(x, req->headers, HANDLE_CL_PROGRAM, CL_INVALID_VALUE, (void ***)&headers, &nh);
	if (ret != CL_SUCCESS)
		goto out;
	if (nh) {
		/* The names, one a line, one per header. */
		cl_uint k = 0;

		names = calloc(nh, sizeof(*names));
		copy = strdup(req->header_names);
		if (!names || !copy) {
			ret = CL_OUT_OF_HOST_MEMORY;
			goto out;
		}
		for (char *t = strtok_r(copy, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
			if (k == nh) {
				k++;
				break;
			}
			names[k++] = t;
		}
		if (k != nh) {
			ret = CL_INVALID_VALUE;
			goto out;
		}
	}
	ret = x->host.clCompileProgram(pe->real, n, devs, req->options, nh, headers, names, NULL, NULL);
	cl_journal_note(x, pe->info, cl_journal_status_tag(ret), false);
out:
	free(devs);
	free(headers);
	free(names);
	free(copy);
	return ret;
}

cl_int exec_cl_program_link(struct cl_exec *x, const struct wire_cl_program_link_req *req,
			    struct wire_cl_program_link_rep *rep)
{
	struct handle_entry *ce;
	cl_device_id *devs = NULL;
	cl_program *progs = NULL, p;
	cl_uint n = 0, np = 0;
	cl_int ret = cl_exec_lookup_cl_context(x, req->context, &ce), made;

	if (ret != CL_SUCCESS)
		return ret;
	if (!x->host.clLinkProgram)
		return CL_INVALID_OPERATION;
	ret = cl_exec_handles_get(x, req->devices, HANDLE_CL_DEVICE, CL_INVALID_DEVICE, (void ***)&devs, &n);
	if (ret == CL_SUCCESS)
		ret = cl_exec_handles_get(x, req->programs, HANDLE_CL_PROGRAM, CL_INVALID_PROGRAM, (void ***)&progs,
					  &np);
	if (ret != CL_SUCCESS)
		goto out;
	p = x->host.clLinkProgram(ce->real, n, devs, req->options, np, progs, NULL, NULL, &ret);
	/* A link that failed may still leave a program for its log. */
	if (p) {
		made = program_add(x, p, req->context, ret, &rep->program);
		if (made != CL_SUCCESS)
			ret = made;
	}
out:
	free(devs);
	free(progs);
	return ret;
}

cl_int exec_cl_program_binaries(struct cl_exec *x, const struct wire_cl_program_binaries_req *req,
				struct wire_cl_program_binaries_rep *rep)
{
	struct handle_entry *pe;
	size_t *sizes = NULL, total = 0;
	unsigned char **ptrs = NULL;
	uint8_t *lens, *bins;
	cl_uint n = 0;
	cl_int ret = cl_exec_lookup_cl_program(x, req->program, &pe);

	if (ret != CL_SUCCESS)
		return ret;
	ret = x->host.clGetProgramInfo(pe->real, CL_PROGRAM_NUM_DEVICES, sizeof(n), &n, NULL);
	if (ret != CL_SUCCESS)
		return ret;
	if (!n || n > 64)
		return CL_OUT_OF_RESOURCES;
	sizes = calloc(n, sizeof(*sizes));
	ptrs = calloc(n, sizeof(*ptrs));
	if (!sizes || !ptrs) {
		ret = CL_OUT_OF_HOST_MEMORY;
		goto out;
	}
	ret = x->host.clGetProgramInfo(pe->real, CL_PROGRAM_BINARY_SIZES, n * sizeof(*sizes), sizes, NULL);
	if (ret != CL_SUCCESS)
		goto out;
	for (cl_uint i = 0; i < n; i++) {
		if (sizes[i] > CL_WIRE_INFO_MAX || total + sizes[i] > CL_WIRE_INFO_MAX * 2) {
			ret = CL_OUT_OF_RESOURCES;
			goto out;
		}
		total += sizes[i];
	}
	lens = cl_exec_reply_alloc(x, (size_t)n * WIRE_REC_CL_SIZE_BYTES);
	bins = cl_exec_reply_alloc(x, total);
	if (!lens || !bins) {
		ret = CL_OUT_OF_HOST_MEMORY;
		goto out;
	}
	total = 0;
	for (cl_uint i = 0; i < n; i++) {
		ptrs[i] = sizes[i] ? bins + total : NULL;
		total += sizes[i];
		wire_rec_cl_size_put(lens, i, &(struct wire_rec_cl_size){ sizes[i] });
	}
	ret = x->host.clGetProgramInfo(pe->real, CL_PROGRAM_BINARIES, n * sizeof(*ptrs), ptrs, NULL);
	if (ret == CL_SUCCESS) {
		rep->lengths = (struct wire_blob){ lens, n * WIRE_REC_CL_SIZE_BYTES };
		rep->binaries = (struct wire_blob){ bins, (uint32_t)total };
	}
out:
	free(sizes);
	free(ptrs);
	return ret;
}

/* A kernel's handle, journaled as its creation (@journal: the request being
 * served; otherwise a cl_kernel_create by its name, for kernels made all at
 * once or cloned). */
static cl_int kernel_add(struct cl_exec *x, cl_kernel k, uint64_t program, bool journal, uint64_t *handle)
{
	struct handle_entry *pe = handle_table_get(x->handles, program, HANDLE_CL_PROGRAM);
	struct cl_obj *o;
	cl_int ret = cl_exec_object_add(x, HANDLE_CL_KERNEL, k, pe ? ((struct cl_obj *)pe->info)->context : 0,
					handle, &o);

	if (ret != CL_SUCCESS) {
		x->host.clReleaseKernel(k);
		return ret;
	}
	o->parent = program;
	if (journal)
		return cl_journal_note(x, o, 0, false);
	{
		struct wire_cl_kernel_create_req j = { .program = program };
		struct wire_msg m;

		if (x->host.clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(j.name), j.name, NULL) != CL_SUCCESS)
			return CL_OUT_OF_RESOURCES;
		wire_msg_init(&m);
		wire_cl_kernel_create_req_encode(&m, &j);
		ret = cl_journal_note_msg(o, WIRE_CALL_CL_KERNEL_CREATE, &m);
		wire_msg_release(&m);
	}
	return ret;
}

cl_int exec_cl_kernel_create(struct cl_exec *x, const struct wire_cl_kernel_create_req *req,
			     struct wire_cl_kernel_create_rep *rep)
{
	struct handle_entry *pe;
	cl_kernel k;
	cl_int ret = cl_exec_lookup_cl_program(x, req->program, &pe);

	if (ret != CL_SUCCESS)
		return ret;
	k = x->host.clCreateKernel(pe->real, req->name, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	x->host.clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof(rep->num_args), &rep->num_args, NULL);
	return kernel_add(x, k, req->program, true, &rep->kernel);
}

cl_int exec_cl_kernels_create(struct cl_exec *x, const struct wire_cl_kernels_create_req *req,
			      struct wire_cl_kernels_create_rep *rep)
{
	struct handle_entry *pe;
	cl_kernel *ks = NULL;
	uint8_t *buf;
	cl_uint n = 0;
	cl_int ret = cl_exec_lookup_cl_program(x, req->program, &pe);

	if (ret != CL_SUCCESS)
		return ret;
	ret = x->host.clCreateKernelsInProgram(pe->real, 0, NULL, &n);
	if (ret != CL_SUCCESS)
		return ret;
	if (n > 4096)
		return CL_OUT_OF_RESOURCES;
	ks = calloc(n ? n : 1, sizeof(*ks));
	buf = cl_exec_reply_alloc(x, (size_t)n * WIRE_REC_CL_HANDLE_BYTES);
	if (!ks || !buf) {
		free(ks);
		return CL_OUT_OF_HOST_MEMORY;
	}
	ret = n ? x->host.clCreateKernelsInProgram(pe->real, n, ks, NULL) : CL_SUCCESS;
	for (cl_uint i = 0; ret == CL_SUCCESS && i < n; i++) {
		uint64_t h = 0;

		ret = kernel_add(x, ks[i], req->program, false, &h);
		ks[i] = NULL;
		wire_rec_cl_handle_put(buf, i, &(struct wire_rec_cl_handle){ h });
	}
	for (cl_uint i = 0; i < n; i++)
		if (ks[i])
			x->host.clReleaseKernel(ks[i]);
	free(ks);
	if (ret == CL_SUCCESS)
		rep->kernels = (struct wire_blob){ buf, n * WIRE_REC_CL_HANDLE_BYTES };
	return ret;
}

cl_int exec_cl_kernel_clone(struct cl_exec *x, const struct wire_cl_kernel_clone_req *req,
			    struct wire_cl_kernel_clone_rep *rep)
{
	struct handle_entry *ke;
	struct cl_obj *src, *o;
	cl_kernel k;
	cl_int ret = cl_exec_lookup_cl_kernel(x, req->kernel, &ke);

	if (ret != CL_SUCCESS)
		return ret;
	if (!x->host.clCloneKernel)
		return CL_INVALID_OPERATION;
	src = ke->info;
	k = x->host.clCloneKernel(ke->real, &ret);
	if (ret != CL_SUCCESS)
		return ret;
	ret = kernel_add(x, k, src->parent, false, &rep->clone);
	if (ret != CL_SUCCESS)
		return ret;
	/* The clone has the arguments set on its original. */
	o = handle_table_get(x->handles, rep->clone, HANDLE_CL_KERNEL)->info;
	for (uint32_t i = 0; i < src->journal.count && ret == CL_SUCCESS; i++) {
		const struct cl_journal_entry *e = &src->journal.list[i];
		struct wire_cl_kernel_set_arg_req a;
		struct wire_cursor cur;
		struct wire_msg m;

		if (e->call != WIRE_CALL_CL_KERNEL_SET_ARG)
			continue;
		wire_cursor_init(&cur, e->payload, e->len);
		if (wire_cl_kernel_set_arg_req_decode(&cur, &a))
			continue;
		a.kernel = rep->clone;
		wire_msg_init(&m);
		wire_cl_kernel_set_arg_req_encode(&m, &a);
		ret = cl_journal_note_msg(o, WIRE_CALL_CL_KERNEL_SET_ARG, &m);
		o->journal.list[o->journal.count - 1].tag = a.index;
		wire_msg_release(&m);
	}
	return ret;
}

cl_int exec_cl_kernel_set_arg(struct cl_exec *x, const struct wire_cl_kernel_set_arg_req *req,
			      struct wire_cl_kernel_set_arg_rep *rep)
{
	struct handle_entry *ke, *oe;
	struct wire_rec_cl_handle h;
	const void *value = NULL;
	void *real;
	cl_int ret = cl_exec_lookup_cl_kernel(x, req->kernel, &ke);

	if (ret != CL_SUCCESS)
		return ret;
	switch (req->kind) {
	case CL_WIRE_ARG_VALUE:
		if (req->value.len && req->value.len != req->size)
			return CL_INVALID_ARG_SIZE;
		value = req->value.len ? req->value.ptr : NULL;
		break;
	case CL_WIRE_ARG_LOCAL:
		if (req->value.len)
			return CL_INVALID_ARG_VALUE;
		break;
	case CL_WIRE_ARG_MEM:
	case CL_WIRE_ARG_SAMPLER:
		if (!req->value.len) {
			real = NULL;       /* a NULL buffer */
		} else {
			if (wire_rec_cl_handle_decode(req->value.ptr, req->value.len, &h))
				return CL_INVALID_ARG_VALUE;
			if (cl_exec_handle_lookup(x, h.object, req->kind == CL_WIRE_ARG_MEM ? HANDLE_CL_MEM
											: HANDLE_CL_SAMPLER, &oe))
				return req->kind == CL_WIRE_ARG_MEM ? CL_INVALID_MEM_OBJECT : CL_INVALID_SAMPLER;
			real = oe->real;
		}
		value = &real;
		/* The platform checks @size against its own handle's. */
		break;
	default:
		return CL_INVALID_ARG_VALUE;
	}
	ret = x->host.clSetKernelArg(ke->real, req->index, (size_t)req->size, value);
	if (ret == CL_SUCCESS)
		ret = cl_journal_note(x, ke->info, req->index, true);
	return ret;
}
