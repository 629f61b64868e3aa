/* Pitched memory, 2D/3D copies, 2D memsets, arrays, mipmapped arrays,
 * texture and surface objects.
 *
 * Pitched allocations are ordinary arena memory. Arrays live where the
 * driver puts them (outside the arena): they are virtual handles of kind
 * ARRAY, counted against the session's quota by their size, and a snapshot
 * copies their contents into the journal as images (exec_array_journal_flush).
 * Texture and surface objects reach kernels as arguments, so the guest holds
 * the driver's own 64-bit value; the worker journals each under a handle of
 * its own (kind TEXOBJ / SURFOBJ) and finds it again by value.
 *
 * Every size, pitch, offset and handle of a copy is checked here against the
 * allocation or the array it names before the backend sees it.
 */
#define LOG_PREFIX "exec: "
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array_desc.h"
#include "exec.h"
#include "log.h"
#include "tracker.h"
#include "wire_dispatch.h"

/* Image format of an array's contents in the journal (docs/journal.md). */
#define ARRAY_IMAGE_FORMAT 0x200u
/* A level array's journal record says so with its level; plain arrays: */
#define ARRAY_NO_LEVEL 0xffffffffu
#define ARRAY_ARGS_LEN (40 + TRACKER_HASH_SIZE)
#define MIPMAP_ARGS_LEN 40
#define TEXOBJ_ARGS_LEN (16 + ARRAY_RES_BYTES + ARRAY_TEX_BYTES + ARRAY_VIEW_BYTES)
#define SURFOBJ_ARGS_LEN (8 + ARRAY_RES_BYTES)
/* The allocation pitch cuMemAllocPitch answers: a multiple of every
 * texture pitch alignment of current GPUs. */
#define PITCH_ALIGN 512u
/* The flags an array may carry through tern (docs/limits.md for the rest). */
#define ARRAY_FLAGS_OK (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP | \
			CUDA_ARRAY3D_TEXTURE_GATHER)

struct exec_array {
	CUDA_ARRAY3D_DESCRIPTOR desc;
	uint32_t elem;
	uint32_t level;             /* ARRAY_NO_LEVEL, or its mipmapped array's level */
	uint64_t row, height, depth, bytes;
	uint8_t hash[TRACKER_HASH_SIZE];  /* contents in the journal, zero until a snapshot */
	bool hashed;
};

struct exec_mipmap {
	CUDA_ARRAY3D_DESCRIPTOR desc;
	uint32_t levels;
	uint64_t bytes;
	uint64_t *level;            /* handles issued by get_level, 0 until asked */
};

/* ---- descriptors, sizes, quota ------------------------------------------ */

/* Checks what the guest asks for and computes the bytes it spans. */
static CUresult desc_check(uint32_t format, uint32_t channels, uint64_t w, uint64_t h, uint64_t d,
			   uint32_t flags, uint32_t *elem, uint64_t *bytes)
{
	*elem = array_format_elem_size(format, channels);
	if (!*elem) {
		/* Planar and block-compressed formats exist on the driver, not here. */
		if (format && (channels == 1 || channels == 2 || channels == 4)) {
			pr_warn("array format 0x%x is not supported by tern", format);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (flags & ~(uint32_t)ARRAY_FLAGS_OK) {
		pr_warn("array flags 0x%x (sparse, deferred mapping ...) are not supported by tern", flags);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!w || w > (1u << 20) || h > (1u << 20) || d > (1u << 20) || (!h && d))
		return CUDA_ERROR_INVALID_VALUE;
	if (__builtin_mul_overflow(w, (uint64_t)*elem, bytes) ||
	    __builtin_mul_overflow(*bytes, h ? h : 1, bytes) || __builtin_mul_overflow(*bytes, d ? d : 1, bytes))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* Arrays count against the quota like mapped memory. */
static CUresult quota_take(struct exec *ex, uint64_t bytes)
{
	uint64_t used = exec_mem_used(ex);

	if (ex->cfg.quota && (bytes > ex->cfg.quota || used > ex->cfg.quota - bytes))
		return CUDA_ERROR_OUT_OF_MEMORY;
	ex->charges.array_bytes += bytes;
	return CUDA_SUCCESS;
}

static void quota_give(struct exec *ex, uint64_t bytes)
{
	ex->charges.array_bytes -= bytes < ex->charges.array_bytes ? bytes : ex->charges.array_bytes;
}

static void desc_fill(CUDA_ARRAY3D_DESCRIPTOR *d, uint32_t format, uint32_t channels, uint64_t w, uint64_t h,
		      uint64_t depth, uint32_t flags)
{
	memset(d, 0, sizeof(*d));
	d->Format = (CUarray_format)format;
	d->NumChannels = channels;
	d->Width = w;
	d->Height = h;
	d->Depth = depth;
	d->Flags = flags;
}

static void desc_args(const CUDA_ARRAY3D_DESCRIPTOR *d, uint32_t last, uint8_t *args)
{
	le32_put(args, (uint32_t)d->Format);
	le32_put(args + 4, d->NumChannels);
	le64_put(args + 8, d->Width);
	le64_put(args + 16, d->Height);
	le64_put(args + 24, d->Depth);
	le32_put(args + 32, d->Flags);
	le32_put(args + 36, last);
}

static struct exec_array *array_info_new(const CUDA_ARRAY3D_DESCRIPTOR *d, uint32_t level)
{
	struct exec_array *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->desc = *d;
	a->elem = array_format_elem_size((uint32_t)d->Format, d->NumChannels);
	a->level = level;
	a->row = d->Width * a->elem;
	a->height = d->Height ? d->Height : 1;
	a->depth = d->Depth ? d->Depth : 1;
	a->bytes = a->row * a->height * a->depth;
	return a;
}

static void array_journal(struct exec *ex, uint64_t handle, uint64_t parent, const struct exec_array *a)
{
	uint8_t args[ARRAY_ARGS_LEN];

	desc_args(&a->desc, a->level, args);
	memcpy(args + 40, a->hash, TRACKER_HASH_SIZE);
	exec_journal_object(ex, handle, HANDLE_ARRAY, parent, args, sizeof(args));
}

/* ---- pitched memory and 2D memsets ---------------------------------------- */

CUresult exec_mem_alloc_pitch(struct exec *ex, const struct wire_mem_alloc_pitch_req *req,
			      struct wire_mem_alloc_pitch_rep *rep)
{
	uint64_t pitch, bytes, addr = 0;
	CUresult res;

	if (!req->width || !req->height ||
	    (req->element_size != 4 && req->element_size != 8 && req->element_size != 16) ||
	    req->width > UINT64_MAX - PITCH_ALIGN)
		return CUDA_ERROR_INVALID_VALUE;
	pitch = (req->width + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
	if (__builtin_mul_overflow(pitch, req->height, &bytes))
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = exec_mem_map(ex, bytes, &addr);
	if (res != CUDA_SUCCESS)
		return res;
	exec_journal_region(ex, addr, bytes);
	rep->address = addr;
	rep->pitch = pitch;
	return CUDA_SUCCESS;
}

CUresult exec_memset_2d(struct exec *ex, const struct wire_memset_2d_req *req, struct wire_memset_2d_rep *rep)
{
	uint64_t row, span, dst;
	CUstream s = NULL;
	CUresult res;

	if (req->width != 1 && req->width != 2 && req->width != 4)
		return CUDA_ERROR_INVALID_VALUE;
	if (!req->columns || !req->rows)
		return CUDA_SUCCESS;
	if (req->dst % req->width || __builtin_mul_overflow(req->columns, (uint64_t)req->width, &row) ||
	    (req->rows > 1 && req->pitch < row) || __builtin_mul_overflow(req->rows - 1, req->pitch, &span) ||
	    __builtin_add_overflow(span, row, &span) || !exec_device_range(ex, req->dst, span, &dst))
		return CUDA_ERROR_INVALID_VALUE;
	if (req->async) {
		res = exec_stream_real(ex, req->stream, &s);
		if (res != CUDA_SUCCESS)
			return res;
	}
	switch (req->width) {
	case 1:
		return req->async ? ex->be->cuMemsetD2D8Async(dst, req->pitch, (unsigned char)req->value,
							      req->columns, req->rows, s)
				  : ex->be->cuMemsetD2D8(dst, req->pitch, (unsigned char)req->value,
							 req->columns, req->rows);
	case 2:
		return req->async ? ex->be->cuMemsetD2D16Async(dst, req->pitch, (unsigned short)req->value,
							       req->columns, req->rows, s)
				  : ex->be->cuMemsetD2D16(dst, req->pitch, (unsigned short)req->value,
							  req->columns, req->rows);
	default:
		return req->async ? ex->be->cuMemsetD2D32Async(dst, req->pitch, req->value, req->columns,
							       req->rows, s)
				  : ex->be->cuMemsetD2D32(dst, req->pitch, req->value, req->columns, req->rows);
	}
}

/* ---- 2D/3D copies ----------------------------------------------------------- */

/* One end of a copy as the guest describes it. */
struct copy_end {
	uint32_t type;
	uint64_t ptr, x, y, z, pitch, height;
};

struct copy_extent {
	uint64_t width, height, depth;
};

/* Fill @p's side of @e after checking it lies inside its allocation or array. */
static CUresult copy_end_prepare(struct exec *ex, const struct copy_end *e, const struct copy_extent *c,
				 bool src, CUDA_MEMCPY3D *p)
{
	uint64_t pitch = e->pitch, rows = e->height, off, span, b;

	if (e->type == CU_MEMORYTYPE_ARRAY) {
		struct handle_entry *he = handle_table_get(ex->handles, e->ptr, HANDLE_ARRAY);
		const struct exec_array *a = he ? he->info : NULL;

		if (!a)
			return CUDA_ERROR_INVALID_HANDLE;
		if (e->x % a->elem || c->width % a->elem || e->x > a->row || c->width > a->row - e->x ||
		    e->y > a->height || c->height > a->height - e->y || e->z > a->depth ||
		    c->depth > a->depth - e->z)
			return CUDA_ERROR_INVALID_VALUE;
		if (src) {
			p->srcMemoryType = CU_MEMORYTYPE_ARRAY;
			p->srcArray = he->real;
			p->srcXInBytes = e->x;
			p->srcY = e->y;
			p->srcZ = e->z;
		} else {
			p->dstMemoryType = CU_MEMORYTYPE_ARRAY;
			p->dstArray = he->real;
			p->dstXInBytes = e->x;
			p->dstY = e->y;
			p->dstZ = e->z;
		}
		return CUDA_SUCCESS;
	}
	if (e->type != CU_MEMORYTYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->height == 1 && c->depth == 1 && !pitch)
		pitch = c->width;
	if (c->depth == 1 && !rows)
		rows = c->height;
	if (((c->height > 1 || c->depth > 1) && pitch < c->width) || (c->depth > 1 && rows < c->height))
		return CUDA_ERROR_INVALID_VALUE;
	/* Offsets folded into the address, then the whole span checked. */
	if (__builtin_mul_overflow(e->z, rows, &off) || __builtin_add_overflow(off, e->y, &off) ||
	    __builtin_mul_overflow(off, pitch, &off) || __builtin_add_overflow(off, e->x, &off) ||
	    __builtin_add_overflow(e->ptr, off, &off) ||
	    __builtin_mul_overflow(c->depth - 1, rows, &span) || __builtin_mul_overflow(span, pitch, &span) ||
	    __builtin_mul_overflow(c->height - 1, pitch, &b) || __builtin_add_overflow(span, b, &span) ||
	    __builtin_add_overflow(span, c->width, &span) || !exec_device_range(ex, off, span, &off))
		return CUDA_ERROR_INVALID_VALUE;
	if (src) {
		p->srcMemoryType = CU_MEMORYTYPE_DEVICE;
		p->srcDevice = off;
		p->srcPitch = pitch;
		p->srcHeight = rows;
	} else {
		p->dstMemoryType = CU_MEMORYTYPE_DEVICE;
		p->dstDevice = off;
		p->dstPitch = pitch;
		p->dstHeight = rows;
	}
	return CUDA_SUCCESS;
}

/* A host end: the packed rows of the message (or of the reply buffer). */
static void copy_host_end(void *buf, const struct copy_extent *c, bool src, CUDA_MEMCPY3D *p)
{
	if (src) {
		p->srcMemoryType = CU_MEMORYTYPE_HOST;
		p->srcHost = buf;
		p->srcPitch = c->width;
		p->srcHeight = c->height;
	} else {
		p->dstMemoryType = CU_MEMORYTYPE_HOST;
		p->dstHost = buf;
		p->dstPitch = c->width;
		p->dstHeight = c->height;
	}
}

static bool copy_bytes(const struct copy_extent *c, uint64_t *bytes)
{
	return !__builtin_mul_overflow(c->width, c->height, bytes) &&
	       !__builtin_mul_overflow(*bytes, c->depth, bytes);
}

static CUresult copy_run(struct exec *ex, const CUDA_MEMCPY3D *p, uint64_t stream, bool async, bool host)
{
	CUstream s;
	CUresult res;

	if (!async)
		return ex->be->cuMemcpy3D(p);
	res = host ? exec_host_copy_stream(ex, stream, &s) : exec_stream_real(ex, stream, &s);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuMemcpy3DAsync(p, s);
	/* A device-to-host reply carries the bytes: the copy must be done. */
	if (res == CUDA_SUCCESS && host && p->dstMemoryType == CU_MEMORYTYPE_HOST)
		res = ex->be->cuStreamSynchronize(s);
	return res;
}

#define COPY_END(r, side) { (r)->side##_type, (r)->side, (r)->side##_x, (r)->side##_y, (r)->side##_z, \
			    (r)->side##_pitch, (r)->side##_height }

CUresult exec_memcpy_3d(struct exec *ex, const struct wire_memcpy_3d_req *req, struct wire_memcpy_3d_rep *rep)
{
	struct copy_end src = COPY_END(req, src), dst = COPY_END(req, dst);
	struct copy_extent c = { req->width, req->height, req->depth };
	CUDA_MEMCPY3D p = { 0 };
	CUresult res;

	if (!c.width || !c.height || !c.depth)
		return CUDA_SUCCESS;
	res = copy_end_prepare(ex, &src, &c, true, &p);
	if (res == CUDA_SUCCESS)
		res = copy_end_prepare(ex, &dst, &c, false, &p);
	if (res != CUDA_SUCCESS)
		return res;
	p.WidthInBytes = c.width;
	p.Height = c.height;
	p.Depth = c.depth;
	return copy_run(ex, &p, req->stream, req->async, false);
}

CUresult exec_memcpy_3d_htod(struct exec *ex, const struct wire_memcpy_3d_htod_req *req,
			     struct wire_memcpy_3d_htod_rep *rep)
{
	struct copy_end dst = COPY_END(req, dst);
	struct copy_extent c = { req->width, req->height, req->depth };
	CUDA_MEMCPY3D p = { 0 };
	uint64_t bytes;
	CUresult res;

	if (!copy_bytes(&c, &bytes) || bytes != req->data.len)
		return CUDA_ERROR_INVALID_VALUE;
	if (!bytes)
		return CUDA_SUCCESS;
	res = copy_end_prepare(ex, &dst, &c, false, &p);
	if (res != CUDA_SUCCESS)
		return res;
	/* The payload is consumed before the driver returns (pageable source). */
	copy_host_end((void *)req->data.ptr, &c, true, &p);
	p.WidthInBytes = c.width;
	p.Height = c.height;
	p.Depth = c.depth;
	return copy_run(ex, &p, req->stream, req->async, true);
}

CUresult exec_memcpy_3d_dtoh(struct exec *ex, const struct wire_memcpy_3d_dtoh_req *req,
			     struct wire_memcpy_3d_dtoh_rep *rep)
{
	struct copy_end src = COPY_END(req, src);
	struct copy_extent c = { req->width, req->height, req->depth };
	CUDA_MEMCPY3D p = { 0 };
	uint64_t bytes;
	void *buf;
	CUresult res;

	if (!copy_bytes(&c, &bytes) || bytes > WIRE_COPY_PIECE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!bytes)
		return CUDA_SUCCESS;
	res = copy_end_prepare(ex, &src, &c, true, &p);
	if (res != CUDA_SUCCESS)
		return res;
	buf = exec_copy_buffer(ex, bytes);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	copy_host_end(buf, &c, false, &p);
	p.WidthInBytes = c.width;
	p.Height = c.height;
	p.Depth = c.depth;
	res = copy_run(ex, &p, req->stream, req->async, true);
	if (res == CUDA_SUCCESS)
		rep->data = (struct wire_blob){ buf, (uint32_t)bytes };
	return res;
}

/* ---- arrays ------------------------------------------------------------------ */

CUresult exec_array_create(struct exec *ex, const struct wire_array_create_req *req,
			   struct wire_array_create_rep *rep)
{
	CUDA_ARRAY3D_DESCRIPTOR d;
	struct exec_array *a;
	uint64_t bytes;
	uint32_t elem;
	CUarray real;
	CUresult res;

	res = desc_check(req->format, req->channels, req->width, req->height, req->depth, req->flags, &elem,
			 &bytes);
	if (res != CUDA_SUCCESS)
		return res;
	desc_fill(&d, req->format, req->channels, req->width, req->height, req->depth, req->flags);
	a = array_info_new(&d, ARRAY_NO_LEVEL);
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = quota_take(ex, bytes);
	if (res == CUDA_SUCCESS) {
		res = ex->be->cuArray3DCreate(&real, &d);
		if (res != CUDA_SUCCESS)
			quota_give(ex, bytes);
	}
	if (res != CUDA_SUCCESS) {
		free(a);
		return res;
	}
	if (handle_table_add(ex->handles, HANDLE_ARRAY, real, 0, a, &rep->array)) {
		ex->be->cuArrayDestroy(real);
		quota_give(ex, bytes);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	array_journal(ex, rep->array, 0, a);
	return CUDA_SUCCESS;
}

/* Drop an array's handle and journal record (its contents image too). */
static void array_forget(struct exec *ex, uint64_t handle, struct exec_array *a)
{
	if (a->hashed && ex->journal && !ex->journal_broken && tracker_image_unref(ex->journal, a->hash))
		ex->journal_broken = true;
	if (a->level == ARRAY_NO_LEVEL)
		quota_give(ex, a->bytes);
	exec_object_remove(ex, handle);
	free(a);
}

CUresult exec_array_destroy(struct exec *ex, const struct wire_array_destroy_req *req,
			    struct wire_array_destroy_rep *rep)
{
	struct handle_entry *e;
	struct exec_array *a;
	CUresult res;

	res = exec_lookup_array(ex, req->array, &e);
	if (res != CUDA_SUCCESS)
		return res;
	a = e->info;
	if (a->level != ARRAY_NO_LEVEL)
		return CUDA_ERROR_INVALID_HANDLE;   /* a level goes with its mipmapped array */
	res = ex->be->cuArrayDestroy(e->real);
	if (res == CUDA_SUCCESS)
		array_forget(ex, req->array, a);
	return res;
}

CUresult exec_array_get_descriptor(struct exec *ex, const struct wire_array_get_descriptor_req *req,
				   struct wire_array_get_descriptor_rep *rep)
{
	struct handle_entry *e = handle_table_get(ex->handles, req->array, HANDLE_ARRAY);
	const struct exec_array *a;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	a = e->info;
	rep->format = (uint32_t)a->desc.Format;
	rep->channels = a->desc.NumChannels;
	rep->width = a->desc.Width;
	rep->height = a->desc.Height;
	rep->depth = a->desc.Depth;
	rep->flags = a->desc.Flags;
	return CUDA_SUCCESS;
}

CUresult exec_array_get_memory_requirements(struct exec *ex,
					    const struct wire_array_get_memory_requirements_req *req,
					    struct wire_array_get_memory_requirements_rep *rep)
{
	struct handle_entry *e;
	CUDA_ARRAY_MEMORY_REQUIREMENTS r = { 0 };
	CUresult res;

	res = exec_lookup_array(ex, req->array, &e);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuArrayGetMemoryRequirements(&r, e->real, ex->dev.device);
	rep->size = r.size;
	rep->alignment = r.alignment;
	return res;
}

/* ---- mipmapped arrays ---------------------------------------------------- */

/* Bytes of all @levels levels (upper bound of what the driver takes). */
static bool mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, uint32_t elem, uint32_t levels, uint64_t *out)
{
	bool layers = d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP);
	uint64_t total = 0;

	for (uint32_t l = 0; l < levels; l++) {
		uint64_t w = d->Width >> l ? d->Width >> l : 1;
		uint64_t h = d->Height >> l ? d->Height >> l : 1;
		uint64_t z = layers ? d->Depth : (d->Depth >> l ? d->Depth >> l : 1);

		total += w * elem * h * (z ? z : 1);   /* each factor <= 2^20: no overflow */
	}
	*out = total;
	return true;
}

CUresult exec_mipmapped_array_create(struct exec *ex, const struct wire_mipmapped_array_create_req *req,
				     struct wire_mipmapped_array_create_rep *rep)
{
	CUDA_ARRAY3D_DESCRIPTOR d;
	struct exec_mipmap *m;
	uint8_t args[MIPMAP_ARGS_LEN];
	CUmipmappedArray real;
	uint64_t bytes;
	uint32_t elem;
	CUresult res;

	res = desc_check(req->format, req->channels, req->width, req->height, req->depth, req->flags, &elem,
			 &bytes);
	if (res != CUDA_SUCCESS)
		return res;
	if (!req->levels || req->levels > 32)
		return CUDA_ERROR_INVALID_VALUE;
	desc_fill(&d, req->format, req->channels, req->width, req->height, req->depth, req->flags);
	mipmap_bytes(&d, elem, req->levels, &bytes);
	m = calloc(1, sizeof(*m));
	if (m)
		m->level = calloc(req->levels, sizeof(*m->level));
	if (!m || !m->level) {
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->desc = d;
	m->levels = req->levels;
	m->bytes = bytes;
	res = quota_take(ex, bytes);
	if (res == CUDA_SUCCESS) {
		res = ex->be->cuMipmappedArrayCreate(&real, &d, req->levels);
		if (res != CUDA_SUCCESS)
			quota_give(ex, bytes);
	}
	if (res == CUDA_SUCCESS && handle_table_add(ex->handles, HANDLE_MIPMAP, real, 0, m, &rep->mipmap)) {
		ex->be->cuMipmappedArrayDestroy(real);
		quota_give(ex, bytes);
		res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (res != CUDA_SUCCESS) {
		free(m->level);
		free(m);
		return res;
	}
	desc_args(&d, req->levels, args);
	exec_journal_object(ex, rep->mipmap, HANDLE_MIPMAP, 0, args, sizeof(args));
	return CUDA_SUCCESS;
}

static void mipmap_forget(struct exec *ex, uint64_t handle, struct exec_mipmap *m)
{
	for (uint32_t l = 0; l < m->levels; l++) {
		struct handle_entry *e = m->level[l] ? handle_table_get(ex->handles, m->level[l], HANDLE_ARRAY)
						     : NULL;

		if (e)
			array_forget(ex, m->level[l], e->info);
	}
	quota_give(ex, m->bytes);
	exec_object_remove(ex, handle);
	free(m->level);
	free(m);
}

CUresult exec_mipmapped_array_destroy(struct exec *ex, const struct wire_mipmapped_array_destroy_req *req,
				      struct wire_mipmapped_array_destroy_rep *rep)
{
	struct handle_entry *e;
	CUresult res;

	res = exec_lookup_mipmap(ex, req->mipmap, &e);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuMipmappedArrayDestroy(e->real);
	if (res == CUDA_SUCCESS)
		mipmap_forget(ex, req->mipmap, e->info);
	return res;
}

/* Issue (or find) the handle of level @level; @handle given on restore. */
static CUresult mipmap_level(struct exec *ex, uint64_t mipmap, uint32_t level, uint64_t *out)
{
	struct handle_entry *e = handle_table_get(ex->handles, mipmap, HANDLE_MIPMAP);
	struct exec_mipmap *m;
	CUDA_ARRAY3D_DESCRIPTOR d;
	struct exec_array *a;
	CUarray real;
	CUresult res;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	m = e->info;
	if (level >= m->levels)
		return CUDA_ERROR_INVALID_VALUE;
	if (m->level[level] && !*out) {
		*out = m->level[level];
		return CUDA_SUCCESS;
	}
	res = ex->be->cuMipmappedArrayGetLevel(&real, e->real, level);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuArray3DGetDescriptor(&d, real);
	if (res != CUDA_SUCCESS)
		return res;
	a = array_info_new(&d, level);
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (*out ? handle_table_add_at(ex->handles, *out, real, mipmap, a)
		 : handle_table_add(ex->handles, HANDLE_ARRAY, real, mipmap, a, out)) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->level[level] = *out;
	array_journal(ex, *out, mipmap, a);
	return CUDA_SUCCESS;
}

CUresult exec_mipmapped_array_get_level(struct exec *ex, const struct wire_mipmapped_array_get_level_req *req,
					struct wire_mipmapped_array_get_level_rep *rep)
{
	rep->array = 0;
	return mipmap_level(ex, req->mipmap, req->level, &rep->array);
}

CUresult exec_mipmapped_array_get_memory_requirements(
	struct exec *ex, const struct wire_mipmapped_array_get_memory_requirements_req *req,
	struct wire_mipmapped_array_get_memory_requirements_rep *rep)
{
	struct handle_entry *e;
	CUDA_ARRAY_MEMORY_REQUIREMENTS r = { 0 };
	CUresult res;

	res = exec_lookup_mipmap(ex, req->mipmap, &e);
	if (res != CUDA_SUCCESS)
		return res;
	res = ex->be->cuMipmappedArrayGetMemoryRequirements(&r, e->real, ex->dev.device);
	rep->size = r.size;
	rep->alignment = r.alignment;
	return res;
}

/* ---- texture and surface objects ------------------------------------------- */

/* The driver's resource for @r: handles looked up, device ranges checked. */
static CUresult res_resolve(struct exec *ex, const struct array_res *r, CUDA_RESOURCE_DESC *out)
{
	struct handle_entry *e;
	uint64_t row, span, real;
	uint32_t elem;

	switch (r->type) {
	case CU_RESOURCE_TYPE_ARRAY:
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		e = handle_table_get(ex->handles, r->handle,
				     r->type == CU_RESOURCE_TYPE_ARRAY ? HANDLE_ARRAY : HANDLE_MIPMAP);
		if (!e)
			return CUDA_ERROR_INVALID_HANDLE;
		array_res_to_cuda(r, (uint64_t)(uintptr_t)e->real, out);
		return CUDA_SUCCESS;
	case CU_RESOURCE_TYPE_LINEAR:
		if (!array_format_elem_size(r->format, r->channels) || !exec_device_range(ex, r->handle, r->width, &real))
			return CUDA_ERROR_INVALID_VALUE;
		break;
	default:        /* pitch2D: rows of width elements, pitch apart */
		elem = array_format_elem_size(r->format, r->channels);
		if (!elem || !r->width || !r->height || __builtin_mul_overflow(r->width, (uint64_t)elem, &row) ||
		    r->pitch < row || __builtin_mul_overflow(r->height - 1, r->pitch, &span) ||
		    __builtin_add_overflow(span, row, &span) || !exec_device_range(ex, r->handle, span, &real))
			return CUDA_ERROR_INVALID_VALUE;
		break;
	}
	array_res_to_cuda(r, real, out);
	return CUDA_SUCCESS;
}

/* The guest's resource for what the driver answers: real handles back to virtual. */
static CUresult res_virtual(struct exec *ex, const CUDA_RESOURCE_DESC *d, struct wire_blob *out, uint8_t *buf)
{
	struct array_res r;

	array_res_from_cuda(d, &r);
	if (r.type == CU_RESOURCE_TYPE_ARRAY || r.type == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
		struct handle_entry *e = handle_table_find_real(ex->handles,
								r.type == CU_RESOURCE_TYPE_ARRAY ? HANDLE_ARRAY
												 : HANDLE_MIPMAP,
								(void *)(uintptr_t)r.handle);

		if (!e)
			return CUDA_ERROR_INVALID_HANDLE;
		r.handle = e->handle;
	}
	array_res_encode(&r, buf);
	*out = (struct wire_blob){ buf, ARRAY_RES_BYTES };
	return CUDA_SUCCESS;
}

/* Create a texture (@tex non-NULL) or surface object from its journal args. */
static CUresult object_create(struct exec *ex, bool surface, const uint8_t *res_b, const uint8_t *tex_b,
			      const uint8_t *view_b, uint64_t *value)
{
	CUDA_RESOURCE_VIEW_DESC view;
	CUDA_RESOURCE_DESC res;
	CUDA_TEXTURE_DESC tex;
	struct array_res r;
	CUresult rc;

	if (array_res_decode(res_b, ARRAY_RES_BYTES, &r) || r.flags)
		return CUDA_ERROR_INVALID_VALUE;
	rc = res_resolve(ex, &r, &res);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (surface)
		return ex->be->cuSurfObjectCreate((CUsurfObject *)value, &res);
	if (array_tex_decode(tex_b, ARRAY_TEX_BYTES, &tex) ||
	    (view_b && array_view_decode(view_b, ARRAY_VIEW_BYTES, &view)))
		return CUDA_ERROR_INVALID_VALUE;
	return ex->be->cuTexObjectCreate((CUtexObject *)value, &res, &tex, view_b ? &view : NULL);
}

static CUresult object_add(struct exec *ex, enum handle_kind kind, uint64_t value, const uint8_t *args,
			   uint32_t len, uint64_t handle)
{
	uint64_t h = handle;

	/* The driver never hands out a live value twice; a guest cannot make it. */
	if (!value || handle_table_find_real(ex->handles, kind, (void *)(uintptr_t)value))
		return CUDA_ERROR_UNKNOWN;
	if (h ? handle_table_add_at(ex->handles, h, (void *)(uintptr_t)value, ex->dev.primary_ctx, NULL)
	      : handle_table_add(ex->handles, kind, (void *)(uintptr_t)value, ex->dev.primary_ctx, NULL, &h))
		return CUDA_ERROR_OUT_OF_MEMORY;
	exec_journal_object(ex, h, kind, ex->dev.primary_ctx, args, len);
	return CUDA_SUCCESS;
}

CUresult exec_tex_object_create(struct exec *ex, const struct wire_tex_object_create_req *req,
				struct wire_tex_object_create_rep *rep)
{
	uint8_t args[TEXOBJ_ARGS_LEN] = { 0 };
	bool view = req->view.len != 0;
	uint64_t value = 0;
	CUresult res;

	if (req->resource.len != ARRAY_RES_BYTES || req->texture.len != ARRAY_TEX_BYTES ||
	    (view && req->view.len != ARRAY_VIEW_BYTES))
		return CUDA_ERROR_INVALID_VALUE;
	le32_put(args + 8, view);
	memcpy(args + 16, req->resource.ptr, ARRAY_RES_BYTES);
	memcpy(args + 16 + ARRAY_RES_BYTES, req->texture.ptr, ARRAY_TEX_BYTES);
	if (view)
		memcpy(args + 16 + ARRAY_RES_BYTES + ARRAY_TEX_BYTES, req->view.ptr, ARRAY_VIEW_BYTES);
	res = object_create(ex, false, req->resource.ptr, req->texture.ptr, view ? req->view.ptr : NULL, &value);
	if (res != CUDA_SUCCESS)
		return res;
	le64_put(args, value);
	res = object_add(ex, HANDLE_TEXOBJ, value, args, sizeof(args), 0);
	if (res != CUDA_SUCCESS) {
		ex->be->cuTexObjectDestroy(value);
		return res;
	}
	rep->object = value;
	return CUDA_SUCCESS;
}

CUresult exec_surf_object_create(struct exec *ex, const struct wire_surf_object_create_req *req,
				 struct wire_surf_object_create_rep *rep)
{
	uint8_t args[SURFOBJ_ARGS_LEN];
	uint64_t value = 0;
	CUresult res;

	if (req->resource.len != ARRAY_RES_BYTES)
		return CUDA_ERROR_INVALID_VALUE;
	res = object_create(ex, true, req->resource.ptr, NULL, NULL, &value);
	if (res != CUDA_SUCCESS)
		return res;
	le64_put(args, value);
	memcpy(args + 8, req->resource.ptr, ARRAY_RES_BYTES);
	res = object_add(ex, HANDLE_SURFOBJ, value, args, sizeof(args), 0);
	if (res != CUDA_SUCCESS) {
		ex->be->cuSurfObjectDestroy(value);
		return res;
	}
	rep->object = value;
	return CUDA_SUCCESS;
}

static struct handle_entry *object_find(struct exec *ex, enum handle_kind kind, uint64_t value)
{
	return value ? handle_table_find_real(ex->handles, kind, (void *)(uintptr_t)value) : NULL;
}

CUresult exec_tex_object_destroy(struct exec *ex, const struct wire_tex_object_destroy_req *req,
				 struct wire_tex_object_destroy_rep *rep)
{
	struct handle_entry *e = object_find(ex, HANDLE_TEXOBJ, req->object);
	CUresult res;

	if (!e)
		return CUDA_ERROR_INVALID_VALUE;
	res = ex->be->cuTexObjectDestroy(req->object);
	if (res == CUDA_SUCCESS)
		exec_object_remove(ex, e->handle);
	return res;
}

CUresult exec_surf_object_destroy(struct exec *ex, const struct wire_surf_object_destroy_req *req,
				  struct wire_surf_object_destroy_rep *rep)
{
	struct handle_entry *e = object_find(ex, HANDLE_SURFOBJ, req->object);
	CUresult res;

	if (!e)
		return CUDA_ERROR_INVALID_VALUE;
	res = ex->be->cuSurfObjectDestroy(req->object);
	if (res == CUDA_SUCCESS)
		exec_object_remove(ex, e->handle);
	return res;
}

CUresult exec_tex_object_get_desc(struct exec *ex, const struct wire_tex_object_get_desc_req *req,
				  struct wire_tex_object_get_desc_rep *rep)
{
	static uint8_t res_b[ARRAY_RES_BYTES], tex_b[ARRAY_TEX_BYTES], view_b[ARRAY_VIEW_BYTES];
	CUDA_RESOURCE_VIEW_DESC view;
	CUDA_RESOURCE_DESC res;
	CUDA_TEXTURE_DESC tex;
	CUresult rc;

	if (!object_find(ex, HANDLE_TEXOBJ, req->object))
		return CUDA_ERROR_INVALID_VALUE;
	rc = ex->be->cuTexObjectGetResourceDesc(&res, req->object);
	if (rc == CUDA_SUCCESS)
		rc = ex->be->cuTexObjectGetTextureDesc(&tex, req->object);
	if (rc == CUDA_SUCCESS)
		rc = res_virtual(ex, &res, &rep->resource, res_b);
	if (rc != CUDA_SUCCESS)
		return rc;
	array_tex_encode(&tex, tex_b);
	rep->texture = (struct wire_blob){ tex_b, ARRAY_TEX_BYTES };
	/* No view: an empty blob (the driver answers an error for the view only). */
	if (ex->be->cuTexObjectGetResourceViewDesc(&view, req->object) == CUDA_SUCCESS) {
		array_view_encode(&view, view_b);
		rep->view = (struct wire_blob){ view_b, ARRAY_VIEW_BYTES };
	}
	return CUDA_SUCCESS;
}

CUresult exec_surf_object_get_desc(struct exec *ex, const struct wire_surf_object_get_desc_req *req,
				   struct wire_surf_object_get_desc_rep *rep)
{
	static uint8_t res_b[ARRAY_RES_BYTES];
	CUDA_RESOURCE_DESC res;
	CUresult rc;

	if (!object_find(ex, HANDLE_SURFOBJ, req->object))
		return CUDA_ERROR_INVALID_VALUE;
	rc = ex->be->cuSurfObjectGetResourceDesc(&res, req->object);
	if (rc == CUDA_SUCCESS)
		rc = res_virtual(ex, &res, &rep->resource, res_b);
	return rc;
}

/* ---- lifetime, snapshot and restore ------------------------------------------ */

void exec_array_entry_release(struct exec *ex, struct handle_entry *e, bool destroy)
{
	switch (e->kind) {
	case HANDLE_ARRAY: {
		struct exec_array *a = e->info;

		if (destroy && a && a->level == ARRAY_NO_LEVEL)
			ex->be->cuArrayDestroy(e->real);
		free(a);
		break;
	}
	case HANDLE_MIPMAP: {
		struct exec_mipmap *m = e->info;

		if (destroy)
			ex->be->cuMipmappedArrayDestroy(e->real);
		if (m)
			free(m->level);
		free(m);
		break;
	}
	case HANDLE_TEXOBJ:
		if (destroy)
			ex->be->cuTexObjectDestroy((CUtexObject)(uintptr_t)e->real);
		break;
	case HANDLE_SURFOBJ:
		if (destroy)
			ex->be->cuSurfObjectDestroy((CUsurfObject)(uintptr_t)e->real);
		break;
	default:
		return;
	}
	e->info = NULL;
	if (destroy)
		exec_object_remove(ex, e->handle);
}

/* Copy an array's contents out (@out) or in (@in) with one 3D copy. */
static CUresult array_contents(struct exec *ex, void *real, const struct exec_array *a, void *out,
			       const void *in)
{
	CUDA_MEMCPY3D p = { 0 };
	struct copy_extent c = { a->row, a->height, a->depth };

	if (out) {
		p.srcMemoryType = CU_MEMORYTYPE_ARRAY;
		p.srcArray = real;
		copy_host_end(out, &c, false, &p);
	} else {
		p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
		p.dstArray = real;
		copy_host_end((void *)in, &c, true, &p);
	}
	p.WidthInBytes = c.width;
	p.Height = c.height;
	p.Depth = c.depth;
	return ex->be->cuMemcpy3D(&p);
}

struct flush_ctx {
	struct exec *ex;
	int ret;
	char *err;
	size_t errlen;
};

static int array_flush_one(struct handle_entry *e, void *arg)
{
	struct flush_ctx *fc = arg;
	struct exec *ex = fc->ex;
	struct exec_array *a = e->info;
	uint8_t old[TRACKER_HASH_SIZE];
	bool had;
	void *buf;
	CUresult res;
	int ret;

	if (e->kind != HANDLE_ARRAY)
		return 0;
	if (a->bytes > TRACKER_IMAGE_MAX) {
		snprintf(fc->err, fc->errlen, "array 0x%llx holds %llu bytes, more than a journal image may",
			 (unsigned long long)e->handle, (unsigned long long)a->bytes);
		fc->ret = -EFBIG;
		return 1;
	}
	buf = malloc(a->bytes);
	if (!buf) {
		fc->ret = -ENOMEM;
		return 1;
	}
	res = array_contents(ex, e->real, a, buf, NULL);
	if (res != CUDA_SUCCESS) {
		free(buf);
		snprintf(fc->err, fc->errlen, "reading array 0x%llx failed with CUDA error %d",
			 (unsigned long long)e->handle, res);
		fc->ret = -EIO;
		return 1;
	}
	memcpy(old, a->hash, sizeof(old));
	had = a->hashed;
	ret = tracker_image_ref(ex->journal, buf, a->bytes, ARRAY_IMAGE_FORMAT, a->hash);
	free(buf);
	if (!ret && had)
		ret = tracker_image_unref(ex->journal, old);
	if (ret) {
		ex->journal_broken = true;
		snprintf(fc->err, fc->errlen, "journaling array 0x%llx failed: %s", (unsigned long long)e->handle,
			 strerror(-ret));
		fc->ret = ret;
		return 1;
	}
	a->hashed = true;
	array_journal(ex, e->handle, e->parent, a);
	return 0;
}

int exec_array_journal_flush(struct exec *ex, char *err, size_t errlen)
{
	struct flush_ctx fc = { ex, 0, err, errlen };

	if (!ex->journal || ex->journal_broken)
		return 0;
	handle_table_foreach(ex->handles, array_flush_one, &fc);
	return fc.ret;
}

static CUresult restore_desc(const uint8_t *args, CUDA_ARRAY3D_DESCRIPTOR *d, uint32_t *last)
{
	uint32_t elem;
	uint64_t bytes;
	CUresult res;

	desc_fill(d, le32_get(args), le32_get(args + 4), le64_get(args + 8), le64_get(args + 16), le64_get(args + 24),
		  le32_get(args + 32));
	*last = le32_get(args + 36);
	res = desc_check((uint32_t)d->Format, d->NumChannels, d->Width, d->Height, d->Depth, d->Flags, &elem,
			 &bytes);
	return res;
}

CUresult exec_array_restore(struct exec *ex, uint64_t handle, uint32_t kind, uint64_t parent, const uint8_t *args,
			    uint32_t len, struct tracker *saved, char *err, size_t errlen)
{
	CUDA_ARRAY3D_DESCRIPTOR d;
	struct tracker_image im;
	const void *bytes = NULL;
	struct exec_array *a;
	struct handle_entry *e;
	uint32_t last;
	CUarray real;
	CUresult res;

	if (kind == HANDLE_MIPMAP) {
		struct exec_mipmap *m;

		if (len != MIPMAP_ARGS_LEN || restore_desc(args, &d, &last) != CUDA_SUCCESS)
			goto bad;
		m = calloc(1, sizeof(*m));
		if (m)
			m->level = calloc(last ? last : 1, sizeof(*m->level));
		if (!m || !m->level) {
			free(m);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		m->desc = d;
		m->levels = last;
		mipmap_bytes(&d, array_format_elem_size((uint32_t)d.Format, d.NumChannels), last, &m->bytes);
		res = last && last <= 32 ? ex->be->cuMipmappedArrayCreate((CUmipmappedArray *)&real, &d, last)
					 : CUDA_ERROR_INVALID_VALUE;
		if (res == CUDA_SUCCESS && handle_table_add_at(ex->handles, handle, real, 0, m))
			res = CUDA_ERROR_OUT_OF_MEMORY;
		if (res != CUDA_SUCCESS) {
			free(m->level);
			free(m);
			snprintf(err, errlen, "mipmapped array 0x%llx: CUDA error %d", (unsigned long long)handle, res);
			return res;
		}
		ex->charges.array_bytes += m->bytes;
		exec_journal_object(ex, handle, HANDLE_MIPMAP, 0, args, len);
		return CUDA_SUCCESS;
	}
	if (len != ARRAY_ARGS_LEN || restore_desc(args, &d, &last) != CUDA_SUCCESS)
		goto bad;
	if (parent) {
		uint64_t h = handle;

		res = mipmap_level(ex, parent, last, &h);
	} else {
		a = array_info_new(&d, ARRAY_NO_LEVEL);
		if (!a)
			return CUDA_ERROR_OUT_OF_MEMORY;
		res = ex->be->cuArray3DCreate(&real, &d);
		if (res == CUDA_SUCCESS && handle_table_add_at(ex->handles, handle, real, 0, a))
			res = CUDA_ERROR_OUT_OF_MEMORY;
		if (res != CUDA_SUCCESS)
			free(a);
		else
			ex->charges.array_bytes += a->bytes;
	}
	if (res != CUDA_SUCCESS) {
		snprintf(err, errlen, "array 0x%llx: CUDA error %d", (unsigned long long)handle, res);
		return res;
	}
	e = handle_table_get(ex->handles, handle, HANDLE_ARRAY);
	a = e->info;
	/* Contents: the image the snapshot wrote (none before the first one). */
	memcpy(a->hash, args + 40, TRACKER_HASH_SIZE);
	for (unsigned i = 0; i < TRACKER_HASH_SIZE; i++)
		a->hashed |= a->hash[i] != 0;
	if (a->hashed) {
		if (tracker_image_get(saved, a->hash, &im, &bytes) || im.size != a->bytes) {
			snprintf(err, errlen, "array 0x%llx: contents missing from the journal",
				 (unsigned long long)handle);
			return CUDA_ERROR_INVALID_VALUE;
		}
		res = array_contents(ex, e->real, a, NULL, bytes);
		if (res != CUDA_SUCCESS) {
			snprintf(err, errlen, "array 0x%llx: filling it failed with CUDA error %d",
				 (unsigned long long)handle, res);
			return res;
		}
		if (ex->journal && tracker_image_ref(ex->journal, bytes, im.size, ARRAY_IMAGE_FORMAT, a->hash))
			ex->journal_broken = true;
	}
	array_journal(ex, handle, parent, a);
	return CUDA_SUCCESS;
bad:
	snprintf(err, errlen, "array 0x%llx: malformed record", (unsigned long long)handle);
	return CUDA_ERROR_INVALID_VALUE;
}

/* Texture and surface objects, in the order of their values: the driver
 * numbers them, so each is recreated in turn; when the driver answers a
 * lower value than the one the guest holds, that value is held as a filler
 * (the gap an object destroyed before the snapshot left) and asked again.
 * A higher value cannot be fixed: the restore fails with the object named. */
#define OBJECT_FILLERS_MAX 4096

static int object_cmp(const void *a, const void *b)
{
	const struct exec_object_record *x = a, *y = b;

	return x->value < y->value ? -1 : x->value > y->value;
}

int exec_texobj_restore_all(struct exec *ex, struct exec_object_record *recs, unsigned count, char *err,
			    size_t errlen)
{
	uint64_t fillers[OBJECT_FILLERS_MAX];
	bool filler_surface[OBJECT_FILLERS_MAX];
	unsigned nfill = 0;
	int ret = 0;

	qsort(recs, count, sizeof(*recs), object_cmp);
	for (unsigned i = 0; i < count && !ret; i++) {
		struct exec_object_record *r = &recs[i];
		bool surface = r->kind == HANDLE_SURFOBJ;
		const uint8_t *a = r->args;
		CUresult res;

		for (;;) {
			uint64_t value = 0;

			if (surface)
				res = r->args_len == SURFOBJ_ARGS_LEN
					      ? object_create(ex, true, a + 8, NULL, NULL, &value)
					      : CUDA_ERROR_INVALID_VALUE;
			else
				res = r->args_len == TEXOBJ_ARGS_LEN
					      ? object_create(ex, false, a + 16, a + 16 + ARRAY_RES_BYTES,
							      le32_get(a + 8) ? a + 16 + ARRAY_RES_BYTES + ARRAY_TEX_BYTES
									   : NULL,
							      &value)
					      : CUDA_ERROR_INVALID_VALUE;
			if (res != CUDA_SUCCESS) {
				CUcontext cur = NULL;
				int d = -1;

				ex->be->cuCtxGetCurrent(&cur);
				for (unsigned k = 0; k < ex->dev.count; k++) {
					struct handle_entry *c = handle_table_get(ex->handles, ex->dev.list[k].ctx,
										  HANDLE_CONTEXT);

					if (c && c->real == cur)
						d = (int)k;
				}
				snprintf(err, errlen, "%s object 0x%llx: recreating it in device %d's context failed "
					 "with CUDA error %d", surface ? "surface" : "texture",
					 (unsigned long long)r->value, d, res);
				ret = -EIO;
				break;
			}
			if (value == r->value) {
				res = object_add(ex, (enum handle_kind)r->kind, value, a, r->args_len, r->handle);
				if (res != CUDA_SUCCESS) {
					snprintf(err, errlen, "object 0x%llx: CUDA error %d",
						 (unsigned long long)value, res);
					ret = -EIO;
				}
				break;
			}
			if (value > r->value || nfill == OBJECT_FILLERS_MAX) {
				snprintf(err, errlen, "%s object 0x%llx came back as 0x%llx: the guest's kernels would "
					 "name the wrong object (docs/limits.md)", surface ? "surface" : "texture",
					 (unsigned long long)r->value, (unsigned long long)value);
				if (surface)
					ex->be->cuSurfObjectDestroy(value);
				else
					ex->be->cuTexObjectDestroy(value);
				ret = -EIO;
				break;
			}
			filler_surface[nfill] = surface;
			fillers[nfill++] = value;
		}
	}
	for (unsigned i = 0; i < nfill; i++) {
		if (filler_surface[i])
			ex->be->cuSurfObjectDestroy(fillers[i]);
		else
			ex->be->cuTexObjectDestroy(fillers[i]);
	}
	return ret;
}

uint64_t exec_object_record_value(const void *args, uint32_t len)
{
	return len >= 8 ? le64_get(args) : 0;
}
