/* Arrays, mipmapped arrays, texture and surface objects, 2D/3D copies and
 * 2D memsets on the sim device (docs/sim.md, "Arrays and textures").
 *
 * An array is linear host memory: rows of width * element bytes, height rows
 * per layer, depth layers, with no padding. Texture and surface objects are
 * their descriptions under a value the sim hands out, the lowest free one
 * from 1 (texture and surface objects share the numbering); CPU kernels do
 * not sample them. Handles the guest passes are looked up in the sim's lists
 * before anything is dereferenced.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "array_desc.h"
#include "sim.h"

struct sim_array {
	struct sim_array *next;
	CUDA_ARRAY3D_DESCRIPTOR desc;
	uint32_t elem;
	size_t row, height, depth;      /* bytes per row, rows per layer, layers */
	uint8_t *data;
	struct sim_mipmap *owner;       /* a level of this mipmapped array, or NULL */
};

struct sim_mipmap {
	struct sim_mipmap *next;
	CUDA_ARRAY3D_DESCRIPTOR desc;
	unsigned levels;
	struct sim_array **level;
};

struct sim_texobj {
	struct sim_texobj *next;
	unsigned long long value;
	bool surface;
	bool has_view;
	CUDA_RESOURCE_DESC res;
	CUDA_TEXTURE_DESC tex;
	CUDA_RESOURCE_VIEW_DESC view;
};

#define SIM_ARRAY_FLAGS (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP | \
			 CUDA_ARRAY3D_TEXTURE_GATHER)

static struct sim_array *array_find(struct sim *sim, const void *h)
{
	for (struct sim_array *a = sim->arrays; a; a = a->next)
		if (a == h)
			return a;
	return NULL;
}

static struct sim_mipmap *mipmap_find(struct sim *sim, const void *h)
{
	for (struct sim_mipmap *m = sim->mipmaps; m; m = m->next)
		if (m == h)
			return m;
	return NULL;
}

/* Checks a descriptor as the driver documents it; 0 or the CUresult. */
static CUresult desc_check(const CUDA_ARRAY3D_DESCRIPTOR *d, uint32_t *elem)
{
	*elem = array_format_elem_size((uint32_t)d->Format, d->NumChannels);
	if (!*elem || !d->Width || (d->Flags & ~(unsigned)SIM_ARRAY_FLAGS))
		return CUDA_ERROR_INVALID_VALUE;
	if (!d->Height && d->Depth)
		return CUDA_ERROR_INVALID_VALUE;
	if (d->Flags & CUDA_ARRAY3D_CUBEMAP) {
		if (d->Width != d->Height || !d->Depth ||
		    ((d->Flags & CUDA_ARRAY3D_LAYERED) ? d->Depth % 6 : d->Depth != 6))
			return CUDA_ERROR_INVALID_VALUE;
	} else if ((d->Flags & CUDA_ARRAY3D_LAYERED) && !d->Depth) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	/* The H200's 3D limits bound every dimension. */
	if (d->Width > 65536 || d->Height > 65536 || d->Depth > 65536)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult array_new(struct sim *sim, const CUDA_ARRAY3D_DESCRIPTOR *d, uint32_t elem,
			  struct sim_mipmap *owner, struct sim_array **out)
{
	struct sim_array *a = calloc(1, sizeof(*a));
	size_t bytes;

	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->desc = *d;
	a->elem = elem;
	a->row = d->Width * elem;
	a->height = d->Height ? d->Height : 1;
	a->depth = d->Depth ? d->Depth : 1;
	if (__builtin_mul_overflow(a->row, a->height, &bytes) ||
	    __builtin_mul_overflow(bytes, a->depth, &bytes) || !(a->data = calloc(1, bytes))) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->owner = owner;
	a->next = sim->arrays;
	sim->arrays = a;
	*out = a;
	return CUDA_SUCCESS;
}

static void array_unlink(struct sim *sim, struct sim_array *a)
{
	for (struct sim_array **pp = &sim->arrays; *pp; pp = &(*pp)->next) {
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	}
	free(a->data);
	free(a);
}

CUresult sim_cuArray3DCreate(CUarray *ph, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	struct sim_array *a = NULL;
	struct sim_ctx *ctx;
	struct sim *sim;
	uint32_t elem;
	CUresult rc;

	if (!ph || !d)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = desc_check(d, &elem);
	if (!rc)
		rc = array_new(sim, d, elem, NULL, &a);
	if (!rc)
		*ph = (CUarray)a;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuArrayDestroy(CUarray h)
{
	struct sim_array *a;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	a = array_find(sim, h);
	if (!a || a->owner) {
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else {
		sim_all_wait(sim);      /* queued copies may still name it */
		array_unlink(sim, a);
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray h)
{
	struct sim_array *a;
	struct sim *sim;
	CUresult rc;

	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	a = array_find(sim, h);
	if (a)
		*d = a->desc;
	else
		rc = CUDA_ERROR_INVALID_HANDLE;
	sim_leave(sim);
	return rc;
}

/* The sim's answer: the bytes, rounded to the 512-byte texture alignment. */
static void requirements(size_t bytes, CUDA_ARRAY_MEMORY_REQUIREMENTS *r)
{
	memset(r, 0, sizeof(*r));
	r->alignment = 512;
	r->size = (bytes + 511) / 512 * 512;
}

CUresult sim_cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *r, CUarray h, CUdevice dev)
{
	struct sim_array *a;
	struct sim *sim;
	CUresult rc;

	if (!r)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	a = array_find(sim, h);
	if (!a)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (dev < 0 || (unsigned)dev >= sim->dev_count)
		rc = CUDA_ERROR_INVALID_DEVICE;
	else
		requirements(a->row * a->height * a->depth, r);
	sim_leave(sim);
	return rc;
}

static size_t level_dim(size_t d, unsigned l)
{
	return d ? (d >> l ? d >> l : 1) : 0;
}

static void mipmap_free(struct sim *sim, struct sim_mipmap *m)
{
	for (unsigned l = 0; l < m->levels; l++)
		if (m->level[l])
			array_unlink(sim, m->level[l]);
	free(m->level);
	free(m);
}

CUresult sim_cuMipmappedArrayCreate(CUmipmappedArray *ph, const CUDA_ARRAY3D_DESCRIPTOR *d,
				    unsigned int levels)
{
	struct sim_mipmap *m;
	struct sim_ctx *ctx;
	struct sim *sim;
	size_t big;
	uint32_t elem;
	unsigned max_levels = 0;
	CUresult rc;

	if (!ph || !d)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = desc_check(d, &elem);
	if (rc)
		goto out;
	big = d->Width > d->Height ? d->Width : d->Height;
	big = big > d->Depth ? big : d->Depth;
	while (big >> max_levels)
		max_levels++;
	if (!levels || levels > max_levels) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (m)
		m->level = calloc(levels, sizeof(*m->level));
	if (!m || !m->level) {
		free(m);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	m->desc = *d;
	m->levels = levels;
	for (unsigned l = 0; l < levels && !rc; l++) {
		CUDA_ARRAY3D_DESCRIPTOR ld = *d;

		ld.Width = level_dim(d->Width, l);
		ld.Height = level_dim(d->Height, l);
		/* Layers and cube faces do not shrink. */
		if (!(d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)))
			ld.Depth = level_dim(d->Depth, l);
		rc = array_new(sim, &ld, elem, m, &m->level[l]);
	}
	if (rc) {
		mipmap_free(sim, m);
		goto out;
	}
	m->next = sim->mipmaps;
	sim->mipmaps = m;
	*ph = (CUmipmappedArray)m;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMipmappedArrayDestroy(CUmipmappedArray h)
{
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = CUDA_ERROR_INVALID_HANDLE;
	for (struct sim_mipmap **pp = &sim->mipmaps; *pp; pp = &(*pp)->next) {
		if (*pp == (struct sim_mipmap *)h) {
			struct sim_mipmap *m = *pp;

			*pp = m->next;
			sim_all_wait(sim);
			mipmap_free(sim, m);
			rc = CUDA_SUCCESS;
			break;
		}
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMipmappedArrayGetLevel(CUarray *out, CUmipmappedArray h, unsigned int level)
{
	struct sim_mipmap *m;
	struct sim *sim;
	CUresult rc;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	m = mipmap_find(sim, h);
	if (!m)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (level >= m->levels)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		*out = (CUarray)m->level[level];
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *r, CUmipmappedArray h,
						   CUdevice dev)
{
	struct sim_mipmap *m;
	struct sim *sim;
	size_t bytes = 0;
	CUresult rc;

	if (!r)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	m = mipmap_find(sim, h);
	if (!m) {
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else if (dev < 0 || (unsigned)dev >= sim->dev_count) {
		rc = CUDA_ERROR_INVALID_DEVICE;
	} else {
		for (unsigned l = 0; l < m->levels; l++)
			bytes += m->level[l]->row * m->level[l]->height * m->level[l]->depth;
		requirements(bytes, r);
	}
	sim_leave(sim);
	return rc;
}

void sim_arrays_teardown(struct sim *sim)
{
	while (sim->texobjs) {
		struct sim_texobj *t = sim->texobjs;

		sim->texobjs = t->next;
		free(t);
	}
	while (sim->mipmaps) {
		struct sim_mipmap *m = sim->mipmaps;

		sim->mipmaps = m->next;
		mipmap_free(sim, m);
	}
	while (sim->arrays)
		array_unlink(sim, sim->arrays);
}

/* ---- copies and memsets ------------------------------------------------- */

/* One end of a copy: its first byte, pitch and rows per layer. */
struct end {
	uint8_t *base;
	size_t pitch, rows;
	bool host;
};

static CUresult end_resolve(struct sim *sim, const CUDA_MEMCPY3D *p, bool src, struct end *e)
{
	CUmemorytype type = src ? p->srcMemoryType : p->dstMemoryType;
	size_t x = src ? p->srcXInBytes : p->dstXInBytes, y = src ? p->srcY : p->dstY;
	size_t z = src ? p->srcZ : p->dstZ, off, span, b;

	memset(e, 0, sizeof(*e));
	if (type == CU_MEMORYTYPE_ARRAY) {
		struct sim_array *a = array_find(sim, src ? (void *)p->srcArray : (void *)p->dstArray);

		if (!a)
			return CUDA_ERROR_INVALID_HANDLE;
		if (x % a->elem || p->WidthInBytes % a->elem || x > a->row || p->WidthInBytes > a->row - x ||
		    y > a->height || p->Height > a->height - y || z > a->depth || p->Depth > a->depth - z)
			return CUDA_ERROR_INVALID_VALUE;
		e->pitch = a->row;
		e->rows = a->height;
		e->base = a->data + (z * a->height + y) * a->row + x;
		return CUDA_SUCCESS;
	}
	if (type == CU_MEMORYTYPE_HOST) {
		e->base = (uint8_t *)(src ? (uintptr_t)p->srcHost : (uintptr_t)p->dstHost);
		e->host = true;
	} else if (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED) {
		e->base = (uint8_t *)(uintptr_t)(src ? p->srcDevice : p->dstDevice);
	} else {
		return CUDA_ERROR_INVALID_VALUE;
	}
	e->pitch = src ? p->srcPitch : p->dstPitch;
	e->rows = src ? p->srcHeight : p->dstHeight;
	if (p->Height == 1 && p->Depth == 1 && !e->pitch)
		e->pitch = p->WidthInBytes;
	if (p->Depth == 1 && !e->rows)
		e->rows = p->Height;
	if (!e->base || ((p->Height > 1 || p->Depth > 1) && e->pitch < p->WidthInBytes) ||
	    (p->Depth > 1 && e->rows < p->Height))
		return CUDA_ERROR_INVALID_VALUE;
	if (__builtin_mul_overflow(z, e->rows, &off) || __builtin_add_overflow(off, y, &off) ||
	    __builtin_mul_overflow(off, e->pitch, &off) || __builtin_add_overflow(off, x, &off) ||
	    __builtin_mul_overflow(p->Depth - 1, e->rows, &span) || __builtin_mul_overflow(span, e->pitch, &span) ||
	    __builtin_mul_overflow(p->Height - 1, e->pitch, &b) || __builtin_add_overflow(span, b, &span) ||
	    __builtin_add_overflow(span, p->WidthInBytes, &span) ||
	    __builtin_add_overflow((uintptr_t)e->base, off, &b))
		return CUDA_ERROR_INVALID_VALUE;
	e->base += off;
	/* Device memory must be the device's; host memory is the caller's. */
	if (!e->host && !sim_range_device_ok(sim, (uintptr_t)e->base, span, src ? PROT_READ : PROT_WRITE))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult memcpy_3d(const CUDA_MEMCPY3D *p, CUstream h, bool sync)
{
	struct sim_stream *s;
	struct sim_ctx *ctx;
	struct end src, dst;
	struct sim *sim;
	CUresult rc;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_copy_stream(sim, h, sync, &ctx, &s);
	if (rc)
		goto out;
	if (s->capture) {
		rc = CUDA_ERROR_NOT_SUPPORTED;  /* docs/sim.md: 2D/3D copies are not captured */
		goto out;
	}
	if (p->srcLOD || p->dstLOD || p->reserved0 || p->reserved1) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (!p->WidthInBytes || !p->Height || !p->Depth)
		goto out;       /* nothing to copy */
	rc = end_resolve(sim, p, true, &src);
	if (!rc)
		rc = end_resolve(sim, p, false, &dst);
	if (rc)
		goto out;
	for (size_t z = 0; z < p->Depth && !rc; z++) {
		for (size_t y = 0; y < p->Height && !rc; y++) {
			struct sim_cmd *cmd = sim_cmd_new(SIM_CMD_COPY);
			bool last = z + 1 == p->Depth && y + 1 == p->Height;

			if (!cmd) {
				rc = CUDA_ERROR_OUT_OF_MEMORY;
				break;
			}
			cmd->copy.src = src.base + (z * src.rows + y) * src.pitch;
			cmd->copy.dst = dst.base + (z * dst.rows + y) * dst.pitch;
			cmd->copy.bytes = p->WidthInBytes;
			/* Pageable host rows are read now, as the driver stages them. */
			if (src.host && !sync &&
			    !sim_range_host_registered(sim, (uintptr_t)cmd->copy.src, p->WidthInBytes)) {
				cmd->copy.staging = malloc(p->WidthInBytes);
				if (!cmd->copy.staging) {
					sim_cmd_free(cmd);
					rc = CUDA_ERROR_OUT_OF_MEMORY;
					break;
				}
				memcpy(cmd->copy.staging, cmd->copy.src, p->WidthInBytes);
			}
			rc = sim_stream_enqueue_sync(sim, s, cmd, sync && last);
		}
	}
	/* A synchronous copy that failed half-way waits for what it queued. */
	if (rc && sync)
		sim_all_wait(sim);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemcpy3D(const CUDA_MEMCPY3D *p)
{
	return memcpy_3d(p, NULL, true);
}

CUresult sim_cuMemcpy3DAsync(const CUDA_MEMCPY3D *p, CUstream h)
{
	return memcpy_3d(p, h, false);
}

static CUresult memset_2d(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem, size_t width,
			  size_t height, CUstream h, bool sync)
{
	struct sim_stream *s;
	struct sim_ctx *ctx;
	struct sim *sim;
	size_t row, span;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_copy_stream(sim, h, sync, &ctx, &s);
	if (!rc && s->capture)
		rc = CUDA_ERROR_NOT_SUPPORTED;
	if (rc || !width || !height)
		goto out;
	if (dst % elem || __builtin_mul_overflow(width, (size_t)elem, &row) ||
	    (height > 1 && pitch < row) || __builtin_mul_overflow(height - 1, pitch, &span) ||
	    __builtin_add_overflow(span, row, &span) ||
	    !sim_range_device_ok(sim, (uintptr_t)dst, span, PROT_WRITE)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	for (size_t y = 0; y < height && !rc; y++) {
		struct sim_cmd *cmd = sim_cmd_new(SIM_CMD_MEMSET);

		if (!cmd) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		cmd->memset.dst = (void *)(uintptr_t)(dst + y * pitch);
		cmd->memset.value = value;
		cmd->memset.elem = elem;
		cmd->memset.count = width;
		rc = sim_stream_enqueue_sync(sim, s, cmd, sync && y + 1 == height);
	}
	if (rc && sync)
		sim_all_wait(sim);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemsetD2D8(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h)
{
	return memset_2d(d, pitch, v, 1, w, h, NULL, true);
}

CUresult sim_cuMemsetD2D16(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h)
{
	return memset_2d(d, pitch, v, 2, w, h, NULL, true);
}

CUresult sim_cuMemsetD2D32(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h)
{
	return memset_2d(d, pitch, v, 4, w, h, NULL, true);
}

CUresult sim_cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s)
{
	return memset_2d(d, pitch, v, 1, w, h, s, false);
}

CUresult sim_cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s)
{
	return memset_2d(d, pitch, v, 2, w, h, s, false);
}

CUresult sim_cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s)
{
	return memset_2d(d, pitch, v, 4, w, h, s, false);
}

/* ---- texture and surface objects ----------------------------------------- */

static CUresult res_check(struct sim *sim, const CUDA_RESOURCE_DESC *r, bool surface)
{
	size_t span;
	uint32_t elem;

	if (r->flags)
		return CUDA_ERROR_INVALID_VALUE;
	switch (r->resType) {
	case CU_RESOURCE_TYPE_ARRAY: {
		struct sim_array *a = array_find(sim, r->res.array.hArray);

		if (!a)
			return CUDA_ERROR_INVALID_HANDLE;
		if (surface && !(a->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST))
			return CUDA_ERROR_INVALID_VALUE;
		return CUDA_SUCCESS;
	}
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		if (surface)
			return CUDA_ERROR_INVALID_VALUE;
		return mipmap_find(sim, r->res.mipmap.hMipmappedArray) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	case CU_RESOURCE_TYPE_LINEAR:
		elem = array_format_elem_size((uint32_t)r->res.linear.format, r->res.linear.numChannels);
		if (surface || !elem || !r->res.linear.sizeInBytes || r->res.linear.devPtr % 256 ||
		    !sim_range_device_ok(sim, (uintptr_t)r->res.linear.devPtr, r->res.linear.sizeInBytes,
					 PROT_READ))
			return CUDA_ERROR_INVALID_VALUE;
		return CUDA_SUCCESS;
	case CU_RESOURCE_TYPE_PITCH2D:
		elem = array_format_elem_size((uint32_t)r->res.pitch2D.format, r->res.pitch2D.numChannels);
		if (surface || !elem || !r->res.pitch2D.width || !r->res.pitch2D.height ||
		    r->res.pitch2D.devPtr % 256 || r->res.pitch2D.pitchInBytes % 32 ||
		    __builtin_mul_overflow(r->res.pitch2D.width, (size_t)elem, &span) ||
		    r->res.pitch2D.pitchInBytes < span ||
		    __builtin_mul_overflow(r->res.pitch2D.height, r->res.pitch2D.pitchInBytes, &span) ||
		    !sim_range_device_ok(sim, (uintptr_t)r->res.pitch2D.devPtr, span, PROT_READ))
			return CUDA_ERROR_INVALID_VALUE;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult object_create(unsigned long long *out, const CUDA_RESOURCE_DESC *res,
			      const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view, bool surface)
{
	struct sim_texobj *t, **pp;
	unsigned long long value = 1;
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!out || !res || (!surface && !tex))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = res_check(sim, res, surface);
	if (rc)
		goto out;
	t = calloc(1, sizeof(*t));
	if (!t) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	t->surface = surface;
	t->res = *res;
	if (tex)
		t->tex = *tex;
	if (view) {
		t->view = *view;
		t->has_view = true;
	}
	/* The list is kept by value: the first gap is the lowest free value. */
	for (pp = &sim->texobjs; *pp && (*pp)->value == value; pp = &(*pp)->next)
		value++;
	t->value = value;
	t->next = *pp;
	*pp = t;
	*out = value;
out:
	sim_leave(sim);
	return rc;
}

static CUresult object_find(unsigned long long value, bool surface, struct sim **psim, struct sim_texobj ***out)
{
	CUresult rc = sim_enter(psim);

	if (rc)
		return rc;
	for (struct sim_texobj **pp = &(*psim)->texobjs; *pp; pp = &(*pp)->next) {
		if ((*pp)->value == value && (*pp)->surface == surface) {
			*out = pp;
			return CUDA_SUCCESS;
		}
	}
	sim_leave(*psim);
	return CUDA_ERROR_INVALID_HANDLE;
}

static CUresult object_destroy(unsigned long long value, bool surface)
{
	struct sim_texobj **pp, *t;
	struct sim *sim;
	CUresult rc = object_find(value, surface, &sim, &pp);

	if (rc)
		return rc;
	t = *pp;
	*pp = t->next;
	free(t);
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
			       const CUDA_RESOURCE_VIEW_DESC *view)
{
	return object_create(out, res, tex, view, false);
}

CUresult sim_cuTexObjectDestroy(CUtexObject value)
{
	return object_destroy(value, false);
}

CUresult sim_cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUtexObject value)
{
	struct sim_texobj **pp;
	struct sim *sim;
	CUresult rc;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	rc = object_find(value, false, &sim, &pp);
	if (rc)
		return rc;
	*out = (*pp)->res;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *out, CUtexObject value)
{
	struct sim_texobj **pp;
	struct sim *sim;
	CUresult rc;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	rc = object_find(value, false, &sim, &pp);
	if (rc)
		return rc;
	*out = (*pp)->tex;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *out, CUtexObject value)
{
	struct sim_texobj **pp;
	struct sim *sim;
	CUresult rc;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	rc = object_find(value, false, &sim, &pp);
	if (rc)
		return rc;
	if ((*pp)->has_view)
		*out = (*pp)->view;
	else
		rc = CUDA_ERROR_INVALID_VALUE;  /* no view was given */
	sim_leave(sim);
	return rc;
}

CUresult sim_cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *res)
{
	return object_create(out, res, NULL, NULL, true);
}

CUresult sim_cuSurfObjectDestroy(CUsurfObject value)
{
	return object_destroy(value, true);
}

CUresult sim_cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUsurfObject value)
{
	struct sim_texobj **pp;
	struct sim *sim;
	CUresult rc;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	rc = object_find(value, true, &sim, &pp);
	if (rc)
		return rc;
	*out = (*pp)->res;
	sim_leave(sim);
	return CUDA_SUCCESS;
}
