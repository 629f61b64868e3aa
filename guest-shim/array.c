/* Pitched memory, 2D/3D copies, 2D memsets, arrays, mipmapped arrays,
 * texture and surface objects, batched copies.
 *
 * Every copy becomes one shape: two ends (host, device or array) and an
 * extent in bytes, rows and layers. Host ends stay in this process: their
 * rows are packed into the request (or unpacked from the reply) with the
 * caller's pitch, in pieces of at most WIRE_COPY_PIECE bytes. Arrays and
 * mipmapped arrays are the worker's virtual handles; texture and surface
 * objects are the driver's values, which kernels receive as arguments.
 */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stdlib.h>
#include <string.h>

#include "array_desc.h"
#include "log.h"

struct xend {
	uint32_t type;          /* CU_MEMORYTYPE_HOST, _DEVICE or _ARRAY */
	uint64_t ptr;           /* host address, device address or array handle */
	uint64_t x, y, z, pitch, rows;
};

struct xcopy {
	struct xend src, dst;
	uint64_t width, height, depth;
};

static CUresult xend_from(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray array, size_t x, size_t y,
			  size_t z, size_t pitch, size_t rows, struct xend *e)
{
	memset(e, 0, sizeof(*e));
	switch (type) {
	case CU_MEMORYTYPE_HOST:
		e->type = CU_MEMORYTYPE_HOST;
		e->ptr = (uintptr_t)host;
		break;
	case CU_MEMORYTYPE_DEVICE:
		e->type = CU_MEMORYTYPE_DEVICE;
		e->ptr = dev;
		break;
	case CU_MEMORYTYPE_UNIFIED:
		e->type = rpc_arena_contains(dev, 1) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
		e->ptr = dev;
		break;
	case CU_MEMORYTYPE_ARRAY:
		e->type = CU_MEMORYTYPE_ARRAY;
		e->ptr = (uint64_t)(uintptr_t)array;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	e->x = x;
	e->y = y;
	e->z = z;
	e->pitch = pitch;
	e->rows = rows;
	return CUDA_SUCCESS;
}

/* Address of row (@y, @z) of a host end, checked for overflow. */
static uint8_t *host_row(const struct xend *e, uint64_t y, uint64_t z)
{
	return (uint8_t *)(uintptr_t)(e->ptr + e->x + ((e->y + y) + (e->z + z) * e->rows) * e->pitch);
}

static CUresult host_end_check(struct xend *e, const struct xcopy *c)
{
	if (!e->ptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (!e->pitch && c->height == 1 && c->depth == 1)
		e->pitch = c->width;
	if (!e->rows)
		e->rows = c->height;
	if (((c->height > 1 || c->depth > 1) && e->pitch < c->width) || (c->depth > 1 && e->rows < c->height))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* One piece: layers [z0, z0 + nz), rows [y0, y0 + ny), bytes [x0, x0 + nx). */
struct piece {
	uint64_t x0, nx, y0, ny, z0, nz;
};

static void dev_end_piece(const struct xend *e, const struct piece *p, uint32_t *type, uint64_t *ptr, uint64_t *x,
			  uint64_t *y, uint64_t *z, uint64_t *pitch, uint64_t *rows)
{
	*type = e->type;
	*ptr = e->ptr;
	*x = e->x + p->x0;
	*y = e->y + p->y0;
	*z = e->z + p->z0;
	*pitch = e->pitch;
	*rows = e->rows;
}

static CUresult piece_run(const struct xcopy *c, const struct piece *p, uint64_t stream, bool async, uint8_t *buf)
{
	bool lazy = async && shim_process()->batching.lazy;
	uint64_t bytes = p->nx * p->ny * p->nz;

	if (c->src.type != CU_MEMORYTYPE_HOST && c->dst.type != CU_MEMORYTYPE_HOST) {
		struct wire_memcpy_3d_req req = { .width = p->nx, .height = p->ny, .depth = p->nz,
						  .stream = stream, .async = async };
		struct wire_memcpy_3d_rep rep;

		dev_end_piece(&c->src, p, &req.src_type, &req.src, &req.src_x, &req.src_y, &req.src_z,
			      &req.src_pitch, &req.src_height);
		dev_end_piece(&c->dst, p, &req.dst_type, &req.dst, &req.dst_x, &req.dst_y, &req.dst_z,
			      &req.dst_pitch, &req.dst_height);
		return lazy ? rpc_memcpy_3d_defer(&req) : rpc_memcpy_3d(&req, &rep);
	}
	if (c->src.type == CU_MEMORYTYPE_HOST) {
		struct wire_memcpy_3d_htod_req req = { .width = p->nx, .height = p->ny, .depth = p->nz,
						       .stream = stream, .async = async,
						       .data = { buf, (uint32_t)bytes } };
		struct wire_memcpy_3d_htod_rep rep;
		uint8_t *o = buf;

		for (uint64_t z = 0; z < p->nz; z++)
			for (uint64_t y = 0; y < p->ny; y++, o += p->nx)
				memcpy(o, host_row(&c->src, p->y0 + y, p->z0 + z) + p->x0, p->nx);
		dev_end_piece(&c->dst, p, &req.dst_type, &req.dst, &req.dst_x, &req.dst_y, &req.dst_z,
			      &req.dst_pitch, &req.dst_height);
		return lazy ? rpc_memcpy_3d_htod_defer(&req) : rpc_memcpy_3d_htod(&req, &rep);
	} else {
		struct wire_memcpy_3d_dtoh_req req = { .width = p->nx, .height = p->ny, .depth = p->nz,
						       .stream = stream, .async = async };
		struct wire_memcpy_3d_dtoh_rep rep;
		const uint8_t *in;
		CUresult res;

		dev_end_piece(&c->src, p, &req.src_type, &req.src, &req.src_x, &req.src_y, &req.src_z,
			      &req.src_pitch, &req.src_height);
		res = rpc_memcpy_3d_dtoh(&req, &rep);
		if (res != CUDA_SUCCESS)
			return res;
		if (rep.data.len != bytes) {
			pr_err("memcpy_3d_dtoh: asked %llu bytes, got %u", (unsigned long long)bytes, rep.data.len);
			return CUDA_ERROR_UNKNOWN;
		}
		in = rep.data.ptr;
		for (uint64_t z = 0; z < p->nz; z++)
			for (uint64_t y = 0; y < p->ny; y++, in += p->nx)
				memcpy(host_row(&c->dst, p->y0 + y, p->z0 + z) + p->x0, in, p->nx);
		return CUDA_SUCCESS;
	}
}

/* Cut @c into pieces of at most WIRE_COPY_PIECE bytes: whole layers, else
 * rows of a layer, else parts of a row. */
static CUresult xcopy_run(struct xcopy *c, uint64_t stream, bool async)
{
	const uint64_t max = WIRE_COPY_PIECE;
	uint64_t w = c->width, h = c->height, d = c->depth;
	uint8_t *buf = NULL;
	CUresult res = CUDA_SUCCESS;

	if (!w || !h || !d)
		return CUDA_SUCCESS;
	if (c->src.type == CU_MEMORYTYPE_HOST && (res = host_end_check(&c->src, c)) != CUDA_SUCCESS)
		return res;
	if (c->dst.type == CU_MEMORYTYPE_HOST && (res = host_end_check(&c->dst, c)) != CUDA_SUCCESS)
		return res;
	if (c->src.type == CU_MEMORYTYPE_HOST && c->dst.type == CU_MEMORYTYPE_HOST) {
		/* Host to host: the driver copies on the CPU too. */
		for (uint64_t z = 0; z < d; z++)
			for (uint64_t y = 0; y < h; y++)
				memmove(host_row(&c->dst, y, z), host_row(&c->src, y, z), w);
		return CUDA_SUCCESS;
	}
	if (c->src.type == CU_MEMORYTYPE_HOST) {
		buf = malloc(w * h * d < max ? w * h * d : max);
		if (!buf)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (w * h <= max && (w * h * d <= max || d > 1)) {
		uint64_t per = max / (w * h);

		for (uint64_t z = 0; z < d && res == CUDA_SUCCESS; z += per) {
			struct piece p = { 0, w, 0, h, z, d - z < per ? d - z : per };

			res = piece_run(c, &p, stream, async, buf);
		}
	} else if (w <= max) {
		uint64_t per = max / w;

		for (uint64_t z = 0; z < d && res == CUDA_SUCCESS; z++)
			for (uint64_t y = 0; y < h && res == CUDA_SUCCESS; y += per) {
				struct piece p = { 0, w, y, h - y < per ? h - y : per, z, 1 };

				res = piece_run(c, &p, stream, async, buf);
			}
	} else {
		for (uint64_t z = 0; z < d && res == CUDA_SUCCESS; z++)
			for (uint64_t y = 0; y < h && res == CUDA_SUCCESS; y++)
				for (uint64_t x = 0; x < w && res == CUDA_SUCCESS; x += max) {
					struct piece p = { x, w - x < max ? w - x : max, y, 1, z, 1 };

					res = piece_run(c, &p, stream, async, buf);
				}
	}
	free(buf);
	return res;
}

static CUresult copy_3d(const CUDA_MEMCPY3D *p, uint64_t stream, bool async)
{
	struct xcopy c;
	CUresult res;

	if (!p || p->srcLOD || p->dstLOD || p->reserved0 || p->reserved1)
		return CUDA_ERROR_INVALID_VALUE;
	res = xend_from(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, p->srcZ,
			p->srcPitch, p->srcHeight, &c.src);
	if (res == CUDA_SUCCESS)
		res = xend_from(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY,
				p->dstZ, p->dstPitch, p->dstHeight, &c.dst);
	if (res != CUDA_SUCCESS)
		return res;
	c.width = p->WidthInBytes;
	c.height = p->Height;
	c.depth = p->Depth;
	return xcopy_run(&c, stream, async);
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p, uint64_t stream, bool async)
{
	struct xcopy c;
	CUresult res;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	res = xend_from(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, 0,
			p->srcPitch, p->Height, &c.src);
	if (res == CUDA_SUCCESS)
		res = xend_from(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, 0,
				p->dstPitch, p->Height, &c.dst);
	if (res != CUDA_SUCCESS)
		return res;
	c.width = p->WidthInBytes;
	c.height = p->Height;
	c.depth = 1;
	return xcopy_run(&c, stream, async);
}

/* The session has one device and one context: a peer copy is a 3D copy. */
static CUresult copy_3d_peer(const CUDA_MEMCPY3D_PEER *p, uint64_t stream, bool async)
{
	CUDA_MEMCPY3D q = { 0 };

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	q.srcXInBytes = p->srcXInBytes;
	q.srcY = p->srcY;
	q.srcZ = p->srcZ;
	q.srcLOD = p->srcLOD;
	q.srcMemoryType = p->srcMemoryType;
	q.srcHost = p->srcHost;
	q.srcDevice = p->srcDevice;
	q.srcArray = p->srcArray;
	q.srcPitch = p->srcPitch;
	q.srcHeight = p->srcHeight;
	q.dstXInBytes = p->dstXInBytes;
	q.dstY = p->dstY;
	q.dstZ = p->dstZ;
	q.dstLOD = p->dstLOD;
	q.dstMemoryType = p->dstMemoryType;
	q.dstHost = p->dstHost;
	q.dstDevice = p->dstDevice;
	q.dstArray = p->dstArray;
	q.dstPitch = p->dstPitch;
	q.dstHeight = p->dstHeight;
	q.WidthInBytes = p->WidthInBytes;
	q.Height = p->Height;
	q.Depth = p->Depth;
	return copy_3d(&q, stream, async);
}

/* A 1D copy with an array end (cuMemcpyAtoH and friends): offsets in bytes. */
static CUresult copy_1d(CUmemorytype st, const void *sh, CUdeviceptr sd, CUarray sa, size_t soff, CUmemorytype dt,
			void *dh, CUdeviceptr dd, CUarray da, size_t doff, size_t n, uint64_t stream, bool async)
{
	struct xcopy c;

	xend_from(st, sh, sd, sa, st == CU_MEMORYTYPE_ARRAY ? soff : 0, 0, 0, 0, 0, &c.src);
	xend_from(dt, dh, dd, da, dt == CU_MEMORYTYPE_ARRAY ? doff : 0, 0, 0, 0, 0, &c.dst);
	c.width = n;
	c.height = 1;
	c.depth = 1;
	return xcopy_run(&c, stream, async);
}

#define S(h, pt) shim_stream((h), (pt))
#define HOST CU_MEMORYTYPE_HOST
#define DEV CU_MEMORYTYPE_DEVICE
#define ARR CU_MEMORYTYPE_ARRAY

SHIM_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { SHIM_ENTRY(); return copy_2d(p, 0, false); }
SHIM_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p) { SHIM_ENTRY(); return copy_2d(p, S(NULL, true), false); }
SHIM_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { SHIM_ENTRY(); return copy_2d(p, 0, false); }
SHIM_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p) { SHIM_ENTRY(); return copy_2d(p, S(NULL, true), false); }
SHIM_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s) { SHIM_ENTRY(); return copy_2d(p, S(s, false), true); }
SHIM_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s) { SHIM_ENTRY(); return copy_2d(p, S(s, true), true); }
SHIM_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { SHIM_ENTRY(); return copy_3d(p, 0, false); }
SHIM_API CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p) { SHIM_ENTRY(); return copy_3d(p, S(NULL, true), false); }
SHIM_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s) { SHIM_ENTRY(); return copy_3d(p, S(s, false), true); }
SHIM_API CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s) { SHIM_ENTRY(); return copy_3d(p, S(s, true), true); }
SHIM_API CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p) { SHIM_ENTRY(); return copy_3d_peer(p, 0, false); }
SHIM_API CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p) { SHIM_ENTRY(); return copy_3d_peer(p, S(NULL, true), false); }
SHIM_API CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s) { SHIM_ENTRY(); return copy_3d_peer(p, S(s, false), true); }
SHIM_API CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream s) { SHIM_ENTRY(); return copy_3d_peer(p, S(s, true), true); }

#define ATOH(h, a, off, n, st, as) copy_1d(ARR, NULL, 0, a, off, HOST, h, 0, NULL, 0, n, st, as)
#define HTOA(a, off, h, n, st, as) copy_1d(HOST, h, 0, NULL, 0, ARR, NULL, 0, a, off, n, st, as)

SHIM_API CUresult cuMemcpyAtoH_v2(void *h, CUarray a, size_t off, size_t n) { SHIM_ENTRY(); return ATOH(h, a, off, n, 0, false); }
SHIM_API CUresult cuMemcpyAtoH_v2_ptds(void *h, CUarray a, size_t off, size_t n) { SHIM_ENTRY(); return ATOH(h, a, off, n, S(NULL, true), false); }
SHIM_API CUresult cuMemcpyAtoHAsync_v2(void *h, CUarray a, size_t off, size_t n, CUstream s) { SHIM_ENTRY(); return ATOH(h, a, off, n, S(s, false), true); }
SHIM_API CUresult cuMemcpyAtoHAsync_v2_ptsz(void *h, CUarray a, size_t off, size_t n, CUstream s) { SHIM_ENTRY(); return ATOH(h, a, off, n, S(s, true), true); }
SHIM_API CUresult cuMemcpyHtoA_v2(CUarray a, size_t off, const void *h, size_t n) { SHIM_ENTRY(); return HTOA(a, off, h, n, 0, false); }
SHIM_API CUresult cuMemcpyHtoA_v2_ptds(CUarray a, size_t off, const void *h, size_t n) { SHIM_ENTRY(); return HTOA(a, off, h, n, S(NULL, true), false); }
SHIM_API CUresult cuMemcpyHtoAAsync_v2(CUarray a, size_t off, const void *h, size_t n, CUstream s) { SHIM_ENTRY(); return HTOA(a, off, h, n, S(s, false), true); }
SHIM_API CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray a, size_t off, const void *h, size_t n, CUstream s) { SHIM_ENTRY(); return HTOA(a, off, h, n, S(s, true), true); }
SHIM_API CUresult cuMemcpyAtoD_v2(CUdeviceptr d, CUarray a, size_t off, size_t n)
{
	SHIM_ENTRY();
	return copy_1d(ARR, NULL, 0, a, off, DEV, NULL, d, NULL, 0, n, 0, false);
}
SHIM_API CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr d, CUarray a, size_t off, size_t n)
{
	SHIM_ENTRY();
	return copy_1d(ARR, NULL, 0, a, off, DEV, NULL, d, NULL, 0, n, S(NULL, true), false);
}
SHIM_API CUresult cuMemcpyDtoA_v2(CUarray a, size_t off, CUdeviceptr d, size_t n)
{
	SHIM_ENTRY();
	return copy_1d(DEV, NULL, d, NULL, 0, ARR, NULL, 0, a, off, n, 0, false);
}
SHIM_API CUresult cuMemcpyDtoA_v2_ptds(CUarray a, size_t off, CUdeviceptr d, size_t n)
{
	SHIM_ENTRY();
	return copy_1d(DEV, NULL, d, NULL, 0, ARR, NULL, 0, a, off, n, S(NULL, true), false);
}
SHIM_API CUresult cuMemcpyAtoA_v2(CUarray da, size_t doff, CUarray sa, size_t soff, size_t n)
{
	SHIM_ENTRY();
	return copy_1d(ARR, NULL, 0, sa, soff, ARR, NULL, 0, da, doff, n, 0, false);
}
SHIM_API CUresult cuMemcpyAtoA_v2_ptds(CUarray da, size_t doff, CUarray sa, size_t soff, size_t n)
{
	SHIM_ENTRY();
	return copy_1d(ARR, NULL, 0, sa, soff, ARR, NULL, 0, da, doff, n, S(NULL, true), false);
}

/* Batches: each copy in turn on the stream, as the driver orders them. */
static CUresult batch_check(size_t count, const CUmemcpyAttributes *attrs, const size_t *idxs, size_t nattrs)
{
	if (!count || !attrs || !idxs || !nattrs || nattrs > count || idxs[0] != 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < nattrs; i++) {
		if ((i && idxs[i] <= idxs[i - 1]) || idxs[i] >= count ||
		    attrs[i].srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
		    attrs[i].srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

static CUresult batch_copy(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,
			   size_t *idxs, size_t nattrs, size_t *fail, uint64_t stream)
{
	CUresult res = batch_check(count, attrs, idxs, nattrs);

	if (fail)
		*fail = SIZE_MAX;
	if (res == CUDA_SUCCESS && (!dsts || !srcs || !sizes))
		res = CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count && res == CUDA_SUCCESS; i++) {
		res = sizes[i] ? memory_copy(dsts[i], srcs[i], sizes[i], stream, true) : CUDA_ERROR_INVALID_VALUE;
		if (res != CUDA_SUCCESS && fail)
			*fail = i;
	}
	return res;
}

SHIM_API CUresult cuMemcpyBatchAsync(CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count, CUmemcpyAttributes *a,
				     size_t *idx, size_t na, size_t *fail, CUstream st)
{
	SHIM_ENTRY();
	return batch_copy(d, s, n, count, a, idx, na, fail, S(st, false));
}

SHIM_API CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count,
					  CUmemcpyAttributes *a, size_t *idx, size_t na, size_t *fail, CUstream st)
{
	SHIM_ENTRY();
	return batch_copy(d, s, n, count, a, idx, na, fail, S(st, true));
}

SHIM_API CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count, CUmemcpyAttributes *a,
					size_t *idx, size_t na, CUstream st)
{
	SHIM_ENTRY();
	return batch_copy(d, s, n, count, a, idx, na, NULL, S(st, false));
}

SHIM_API CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count,
					     CUmemcpyAttributes *a, size_t *idx, size_t na, CUstream st)
{
	SHIM_ENTRY();
	return batch_copy(d, s, n, count, a, idx, na, NULL, S(st, true));
}

/* An operand of cuMemcpy3DBatchAsync; @elem: bytes per element. */
static CUresult operand_end(const CUmemcpy3DOperand *o, uint32_t elem, const CUextent3D *ext, struct xend *e)
{
	if (o->type == CU_MEMCPY_OPERAND_TYPE_ARRAY)
		return xend_from(CU_MEMORYTYPE_ARRAY, NULL, 0, o->op.array.array, o->op.array.offset.x * elem,
				 o->op.array.offset.y, o->op.array.offset.z, 0, 0, e);
	if (o->type != CU_MEMCPY_OPERAND_TYPE_POINTER)
		return CUDA_ERROR_INVALID_VALUE;
	return xend_from(CU_MEMORYTYPE_UNIFIED, NULL, o->op.ptr.ptr, NULL, 0, 0, 0,
			 (o->op.ptr.rowLength ? o->op.ptr.rowLength : ext->width) * elem,
			 o->op.ptr.layerHeight ? o->op.ptr.layerHeight : ext->height, e);
}

static uint32_t array_elem(CUarray a)
{
	CUDA_ARRAY3D_DESCRIPTOR d;

	return cuArray3DGetDescriptor_v2(&d, a) == CUDA_SUCCESS
		       ? array_format_elem_size((uint32_t)d.Format, d.NumChannels) : 0;
}

static CUresult batch_3d(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags, size_t *fail, uint64_t stream)
{
	CUresult res = n && ops && !flags ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;

	if (fail)
		*fail = SIZE_MAX;
	for (size_t i = 0; i < n && res == CUDA_SUCCESS; i++) {
		const CUDA_MEMCPY3D_BATCH_OP *op = &ops[i];
		uint32_t elem = 1;
		struct xcopy c;

		/* Extents count elements of the array operand, bytes otherwise. */
		if (op->src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY)
			elem = array_elem(op->src.op.array.array);
		else if (op->dst.type == CU_MEMCPY_OPERAND_TYPE_ARRAY)
			elem = array_elem(op->dst.op.array.array);
		if (!elem || !op->extent.width || !op->extent.height || !op->extent.depth ||
		    op->srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
		    op->srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
			res = CUDA_ERROR_INVALID_VALUE;
		if (res == CUDA_SUCCESS)
			res = operand_end(&op->src, elem, &op->extent, &c.src);
		if (res == CUDA_SUCCESS)
			res = operand_end(&op->dst, elem, &op->extent, &c.dst);
		if (res == CUDA_SUCCESS) {
			c.width = op->extent.width * elem;
			c.height = op->extent.height;
			c.depth = op->extent.depth;
			res = xcopy_run(&c, stream, true);
		}
		if (res != CUDA_SUCCESS && fail)
			*fail = i;
	}
	return res;
}

SHIM_API CUresult cuMemcpy3DBatchAsync(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long flags,
				       CUstream s)
{
	SHIM_ENTRY();
	return batch_3d(n, ops, flags, fail, S(s, false));
}

SHIM_API CUresult cuMemcpy3DBatchAsync_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail,
					    unsigned long long flags, CUstream s)
{
	SHIM_ENTRY();
	return batch_3d(n, ops, flags, fail, S(s, true));
}

SHIM_API CUresult cuMemcpy3DBatchAsync_v2(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags, CUstream s)
{
	SHIM_ENTRY();
	return batch_3d(n, ops, flags, NULL, S(s, false));
}

SHIM_API CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,
					       CUstream s)
{
	SHIM_ENTRY();
	return batch_3d(n, ops, flags, NULL, S(s, true));
}

/* Pitched memory and 2D memsets */

SHIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem)
{
	SHIM_ENTRY();
	struct wire_mem_alloc_pitch_req req = { .width = width, .height = height, .element_size = elem };
	struct wire_mem_alloc_pitch_rep rep;
	CUresult res;

	if (!dptr || !pitch)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mem_alloc_pitch(&req, &rep);
	if (res == CUDA_SUCCESS) {
		*dptr = rep.address;
		*pitch = (size_t)rep.pitch;
	}
	return res;
}

static CUresult memset_2d(CUdeviceptr d, size_t pitch, uint32_t v, uint32_t width, size_t w, size_t h,
			  uint64_t stream, bool async)
{
	struct wire_memset_2d_req req = { .dst = d, .pitch = pitch, .value = v, .width = width, .columns = w,
					  .rows = h, .stream = stream, .async = async };
	struct wire_memset_2d_rep rep;

	if (!w || !h)
		return CUDA_SUCCESS;
	return async && shim_process()->batching.lazy ? rpc_memset_2d_defer(&req) : rpc_memset_2d(&req, &rep);
}

SHIM_API CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) { SHIM_ENTRY(); return memset_2d(d, p, v, 1, w, h, 0, false); }
SHIM_API CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) { SHIM_ENTRY(); return memset_2d(d, p, v, 1, w, h, S(NULL, true), false); }
SHIM_API CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) { SHIM_ENTRY(); return memset_2d(d, p, v, 2, w, h, 0, false); }
SHIM_API CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) { SHIM_ENTRY(); return memset_2d(d, p, v, 2, w, h, S(NULL, true), false); }
SHIM_API CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) { SHIM_ENTRY(); return memset_2d(d, p, v, 4, w, h, 0, false); }
SHIM_API CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) { SHIM_ENTRY(); return memset_2d(d, p, v, 4, w, h, S(NULL, true), false); }
SHIM_API CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s) { SHIM_ENTRY(); return memset_2d(d, p, v, 1, w, h, S(s, false), true); }
SHIM_API CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s) { SHIM_ENTRY(); return memset_2d(d, p, v, 1, w, h, S(s, true), true); }
SHIM_API CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s) { SHIM_ENTRY(); return memset_2d(d, p, v, 2, w, h, S(s, false), true); }
SHIM_API CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s) { SHIM_ENTRY(); return memset_2d(d, p, v, 2, w, h, S(s, true), true); }
SHIM_API CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s) { SHIM_ENTRY(); return memset_2d(d, p, v, 4, w, h, S(s, false), true); }
SHIM_API CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s) { SHIM_ENTRY(); return memset_2d(d, p, v, 4, w, h, S(s, true), true); }

/* Arrays */

static CUresult array_create(CUarray *out, uint32_t format, uint32_t channels, size_t w, size_t h, size_t d,
			     uint32_t flags)
{
	struct wire_array_create_req req = { .format = format, .channels = channels, .width = w, .height = h,
					     .depth = d, .flags = flags };
	struct wire_array_create_rep rep;
	CUresult res;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_array_create(&req, &rep);
	if (res == CUDA_SUCCESS)
		*out = (CUarray)(uintptr_t)rep.array;
	return res;
}

SHIM_API CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
	SHIM_ENTRY();
	return d ? array_create(out, (uint32_t)d->Format, d->NumChannels, d->Width, d->Height, 0, 0)
		 : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	SHIM_ENTRY();
	return d ? array_create(out, (uint32_t)d->Format, d->NumChannels, d->Width, d->Height, d->Depth, d->Flags)
		 : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuArrayDestroy(CUarray a)
{
	SHIM_ENTRY();
	struct wire_array_destroy_req req = { .array = (uint64_t)(uintptr_t)a };
	struct wire_array_destroy_rep rep;

	return rpc_array_destroy(&req, &rep);
}

SHIM_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray a)
{
	SHIM_ENTRY();
	struct wire_array_get_descriptor_req req = { .array = (uint64_t)(uintptr_t)a };
	struct wire_array_get_descriptor_rep rep;
	CUresult res;

	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_array_get_descriptor(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	memset(d, 0, sizeof(*d));
	d->Format = (CUarray_format)rep.format;
	d->NumChannels = rep.channels;
	d->Width = rep.width;
	d->Height = rep.height;
	d->Depth = rep.depth;
	d->Flags = rep.flags;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray a)
{
	SHIM_ENTRY();
	CUDA_ARRAY3D_DESCRIPTOR d3;
	CUresult res;

	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	res = cuArray3DGetDescriptor_v2(&d3, a);
	if (res != CUDA_SUCCESS)
		return res;
	/* The driver refuses a 3D array here. */
	if (d3.Depth)
		return CUDA_ERROR_INVALID_VALUE;
	d->Format = d3.Format;
	d->NumChannels = d3.NumChannels;
	d->Width = d3.Width;
	d->Height = d3.Height;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *r, CUarray a, CUdevice dev)
{
	SHIM_ENTRY();
	struct wire_array_get_memory_requirements_req req = { .array = (uint64_t)(uintptr_t)a };
	struct wire_array_get_memory_requirements_rep rep;
	CUresult res;

	if (!r)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	res = rpc_array_get_memory_requirements(&req, &rep);
	if (res == CUDA_SUCCESS) {
		memset(r, 0, sizeof(*r));
		r->size = rep.size;
		r->alignment = rep.alignment;
	}
	return res;
}

SHIM_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *out, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
	SHIM_ENTRY();
	struct wire_mipmapped_array_create_req req;
	struct wire_mipmapped_array_create_rep rep;
	CUresult res;

	if (!out || !d)
		return CUDA_ERROR_INVALID_VALUE;
	req = (struct wire_mipmapped_array_create_req){ .format = (uint32_t)d->Format, .channels = d->NumChannels,
							.width = d->Width, .height = d->Height, .depth = d->Depth,
							.flags = d->Flags, .levels = levels };
	res = rpc_mipmapped_array_create(&req, &rep);
	if (res == CUDA_SUCCESS)
		*out = (CUmipmappedArray)(uintptr_t)rep.mipmap;
	return res;
}

SHIM_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray m)
{
	SHIM_ENTRY();
	struct wire_mipmapped_array_destroy_req req = { .mipmap = (uint64_t)(uintptr_t)m };
	struct wire_mipmapped_array_destroy_rep rep;

	return rpc_mipmapped_array_destroy(&req, &rep);
}

SHIM_API CUresult cuMipmappedArrayGetLevel(CUarray *out, CUmipmappedArray m, unsigned int level)
{
	SHIM_ENTRY();
	struct wire_mipmapped_array_get_level_req req = { .mipmap = (uint64_t)(uintptr_t)m, .level = level };
	struct wire_mipmapped_array_get_level_rep rep;
	CUresult res;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_mipmapped_array_get_level(&req, &rep);
	if (res == CUDA_SUCCESS)
		*out = (CUarray)(uintptr_t)rep.array;
	return res;
}

SHIM_API CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *r, CUmipmappedArray m,
							CUdevice dev)
{
	SHIM_ENTRY();
	struct wire_mipmapped_array_get_memory_requirements_req req = { .mipmap = (uint64_t)(uintptr_t)m };
	struct wire_mipmapped_array_get_memory_requirements_rep rep;
	CUresult res;

	if (!r)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	res = rpc_mipmapped_array_get_memory_requirements(&req, &rep);
	if (res == CUDA_SUCCESS) {
		memset(r, 0, sizeof(*r));
		r->size = rep.size;
		r->alignment = rep.alignment;
	}
	return res;
}

/* Texture and surface objects */

SHIM_API CUresult cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
				    const CUDA_RESOURCE_VIEW_DESC *view)
{
	SHIM_ENTRY();
	uint8_t rb[ARRAY_RES_BYTES], tb[ARRAY_TEX_BYTES], vb[ARRAY_VIEW_BYTES];
	struct wire_tex_object_create_req req = { { rb, sizeof(rb) }, { tb, sizeof(tb) }, { vb, 0 } };
	struct wire_tex_object_create_rep rep;
	struct array_res r;
	CUresult rc;

	if (!out || !res || !tex)
		return CUDA_ERROR_INVALID_VALUE;
	array_res_from_cuda(res, &r);
	array_res_encode(&r, rb);
	array_tex_encode(tex, tb);
	if (view) {
		array_view_encode(view, vb);
		req.view.len = sizeof(vb);
	}
	rc = rpc_tex_object_create(&req, &rep);
	if (rc == CUDA_SUCCESS)
		*out = rep.object;
	return rc;
}

SHIM_API CUresult cuTexObjectDestroy(CUtexObject t)
{
	SHIM_ENTRY();
	struct wire_tex_object_destroy_req req = { .object = t };
	struct wire_tex_object_destroy_rep rep;

	return rpc_tex_object_destroy(&req, &rep);
}

static CUresult tex_desc(CUtexObject t, CUDA_RESOURCE_DESC *res, CUDA_TEXTURE_DESC *tex, CUDA_RESOURCE_VIEW_DESC *view)
{
	struct wire_tex_object_get_desc_req req = { .object = t };
	struct wire_tex_object_get_desc_rep rep;
	struct array_res r;
	CUresult rc = rpc_tex_object_get_desc(&req, &rep);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (res) {
		if (array_res_decode(rep.resource.ptr, rep.resource.len, &r))
			return CUDA_ERROR_UNKNOWN;
		array_res_to_cuda(&r, r.handle, res);
	}
	if (tex && array_tex_decode(rep.texture.ptr, rep.texture.len, tex))
		return CUDA_ERROR_UNKNOWN;
	if (view) {
		if (!rep.view.len)
			return CUDA_ERROR_INVALID_VALUE;        /* created without a view */
		if (array_view_decode(rep.view.ptr, rep.view.len, view))
			return CUDA_ERROR_UNKNOWN;
	}
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUtexObject t)
{
	SHIM_ENTRY();
	return out ? tex_desc(t, out, NULL, NULL) : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *out, CUtexObject t)
{
	SHIM_ENTRY();
	return out ? tex_desc(t, NULL, out, NULL) : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *out, CUtexObject t)
{
	SHIM_ENTRY();
	return out ? tex_desc(t, NULL, NULL, out) : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *res)
{
	SHIM_ENTRY();
	uint8_t rb[ARRAY_RES_BYTES];
	struct wire_surf_object_create_req req = { { rb, sizeof(rb) } };
	struct wire_surf_object_create_rep rep;
	struct array_res r;
	CUresult rc;

	if (!out || !res)
		return CUDA_ERROR_INVALID_VALUE;
	array_res_from_cuda(res, &r);
	array_res_encode(&r, rb);
	rc = rpc_surf_object_create(&req, &rep);
	if (rc == CUDA_SUCCESS)
		*out = rep.object;
	return rc;
}

SHIM_API CUresult cuSurfObjectDestroy(CUsurfObject s)
{
	SHIM_ENTRY();
	struct wire_surf_object_destroy_req req = { .object = s };
	struct wire_surf_object_destroy_rep rep;

	return rpc_surf_object_destroy(&req, &rep);
}

SHIM_API CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUsurfObject s)
{
	SHIM_ENTRY();
	struct wire_surf_object_get_desc_req req = { .object = s };
	struct wire_surf_object_get_desc_rep rep;
	struct array_res r;
	CUresult rc;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	rc = rpc_surf_object_get_desc(&req, &rep);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (array_res_decode(rep.resource.ptr, rep.resource.len, &r))
		return CUDA_ERROR_UNKNOWN;
	array_res_to_cuda(&r, r.handle, out);
	return CUDA_SUCCESS;
}
