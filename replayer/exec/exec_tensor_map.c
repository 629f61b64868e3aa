/* Tensor maps (ids 360-363): cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col,
 * cuTensorMapEncodeIm2colWide and cuTensorMapReplaceAddress.
 *
 * A CUtensorMap is 128 opaque bytes that the driver fills on the host; a
 * kernel takes it by value (a __grid_constant__ parameter) or from memory,
 * so the guest holds the driver's own bytes and the launch carries them
 * as they are. The worker's driver encodes it: its global address is a
 * device address of the session, the same in guest and worker.
 *
 * The arrays come as records whose counts must be what the rank says
 * (dims and element strides rank, strides rank - 1, im2col corners
 * rank - 2), and the rank must be one the driver takes (1-5 tiled, 3-5
 * im2col), before anything is copied: the driver reads its arrays by the
 * rank alone. The global address must lie in one of the session's
 * allocations (a module global a restore moved is reached where it is
 * now); only its first byte is checked, as a map's extent is the driver's
 * reading of its arguments and a replaced address carries none.
 * Everything else is the driver's to check.
 */
#define LOG_PREFIX "exec: "
#include <string.h>

#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"

#define TMAP_RANK_MAX 5

/* The arguments that every encoder shares, unpacked. */
struct tmap_args {
	cuuint64_t dims[TMAP_RANK_MAX];
	cuuint64_t strides[TMAP_RANK_MAX - 1];
	cuuint32_t element_strides[TMAP_RANK_MAX];
	void *address;
};

/* The reply's map: the dispatch thread encodes a reply before it reads the
 * next request. */
static uint8_t tmap_reply[WIRE_REC_TENSOR_MAP_BYTES];

static bool tmap_dims_get(struct wire_blob b, uint32_t want, cuuint64_t *out)
{
	struct wire_rec_tensor_dim r;

	if (wire_rec_tensor_dim_count(b) != (int)want)
		return false;
	for (uint32_t i = 0; i < want; i++) {
		if (wire_rec_tensor_dim_get(b, i, &r))
			return false;
		out[i] = r.value;
	}
	return true;
}

static bool tmap_box_get(struct wire_blob b, uint32_t want, cuuint32_t *out)
{
	struct wire_rec_tensor_box r;

	if (wire_rec_tensor_box_count(b) != (int)want)
		return false;
	for (uint32_t i = 0; i < want; i++) {
		if (wire_rec_tensor_box_get(b, i, &r))
			return false;
		out[i] = r.value;
	}
	return true;
}

static bool tmap_corner_get(struct wire_blob b, uint32_t want, int *out)
{
	struct wire_rec_tensor_corner r;

	if (wire_rec_tensor_corner_count(b) != (int)want)
		return false;
	for (uint32_t i = 0; i < want; i++) {
		if (wire_rec_tensor_corner_get(b, i, &r))
			return false;
		out[i] = r.offset;
	}
	return true;
}

/* The guest's address as the backend must see it; a range of no
 * allocation is CUDA_ERROR_INVALID_VALUE, as every other device range. */
static CUresult tmap_address(struct exec *ex, uint64_t addr, void **out)
{
	uint64_t real = addr;

	if (!exec_device_range(ex, addr, 1, &real))
		return CUDA_ERROR_INVALID_VALUE;
	*out = (void *)(uintptr_t)real;
	return CUDA_SUCCESS;
}

static CUresult tmap_args_get(struct exec *ex, uint32_t rank, uint32_t min_rank, uint64_t address,
			      struct wire_blob dims, struct wire_blob strides, struct wire_blob element_strides,
			      struct tmap_args *a)
{
	if (rank < min_rank || rank > TMAP_RANK_MAX || !tmap_dims_get(dims, rank, a->dims) ||
	    !tmap_dims_get(strides, rank - 1, a->strides) ||
	    !tmap_box_get(element_strides, rank, a->element_strides))
		return CUDA_ERROR_INVALID_VALUE;
	return tmap_address(ex, address, &a->address);
}

static CUresult tmap_answer(CUresult res, const CUtensorMap *map, struct wire_blob *out)
{
	struct wire_rec_tensor_map r;

	if (res != CUDA_SUCCESS)
		return res;
	_Static_assert(sizeof(r.opaque) == sizeof(*map), "a tensor map is 128 bytes");
	memcpy(r.opaque, map, sizeof(r.opaque));
	wire_rec_tensor_map_encode(&r, tmap_reply);
	*out = (struct wire_blob){ tmap_reply, sizeof(tmap_reply) };
	return CUDA_SUCCESS;
}

CUresult exec_tensor_map_encode_tiled(struct exec *ex, const struct wire_tensor_map_encode_tiled_req *req,
				      struct wire_tensor_map_encode_tiled_rep *rep)
{
	cuuint32_t box[TMAP_RANK_MAX];
	struct tmap_args a;
	CUtensorMap map;
	CUresult res;

	res = tmap_args_get(ex, req->rank, 1, req->address, req->dims, req->strides, req->element_strides, &a);
	if (res == CUDA_SUCCESS && !tmap_box_get(req->box, req->rank, box))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res != CUDA_SUCCESS)
		return res;
	memset(&map, 0, sizeof(map));
	res = ex->be->cuTensorMapEncodeTiled(&map, (CUtensorMapDataType)req->data_type, req->rank, a.address,
					     a.dims, a.strides, box, a.element_strides,
					     (CUtensorMapInterleave)req->interleave, (CUtensorMapSwizzle)req->swizzle,
					     (CUtensorMapL2promotion)req->l2_promotion,
					     (CUtensorMapFloatOOBfill)req->oob_fill);
	return tmap_answer(res, &map, &rep->map);
}

CUresult exec_tensor_map_encode_im2col(struct exec *ex, const struct wire_tensor_map_encode_im2col_req *req,
				       struct wire_tensor_map_encode_im2col_rep *rep)
{
	int lower[TMAP_RANK_MAX - 2], upper[TMAP_RANK_MAX - 2];
	struct tmap_args a;
	CUtensorMap map;
	CUresult res;

	res = tmap_args_get(ex, req->rank, 3, req->address, req->dims, req->strides, req->element_strides, &a);
	if (res == CUDA_SUCCESS &&
	    (!tmap_corner_get(req->lower, req->rank - 2, lower) || !tmap_corner_get(req->upper, req->rank - 2, upper)))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res != CUDA_SUCCESS)
		return res;
	memset(&map, 0, sizeof(map));
	res = ex->be->cuTensorMapEncodeIm2col(&map, (CUtensorMapDataType)req->data_type, req->rank, a.address,
					      a.dims, a.strides, lower, upper, req->channels, req->pixels,
					      a.element_strides, (CUtensorMapInterleave)req->interleave,
					      (CUtensorMapSwizzle)req->swizzle, (CUtensorMapL2promotion)req->l2_promotion,
					      (CUtensorMapFloatOOBfill)req->oob_fill);
	return tmap_answer(res, &map, &rep->map);
}

CUresult exec_tensor_map_encode_im2col_wide(struct exec *ex,
					    const struct wire_tensor_map_encode_im2col_wide_req *req,
					    struct wire_tensor_map_encode_im2col_wide_rep *rep)
{
	struct tmap_args a;
	CUtensorMap map;
	CUresult res;

	res = tmap_args_get(ex, req->rank, 3, req->address, req->dims, req->strides, req->element_strides, &a);
	if (res != CUDA_SUCCESS)
		return res;
	memset(&map, 0, sizeof(map));
	res = ex->be->cuTensorMapEncodeIm2colWide(&map, (CUtensorMapDataType)req->data_type, req->rank, a.address,
						  a.dims, a.strides, req->lower, req->upper, req->channels,
						  req->pixels, a.element_strides, (CUtensorMapInterleave)req->interleave,
						  (CUtensorMapIm2ColWideMode)req->mode, (CUtensorMapSwizzle)req->swizzle,
						  (CUtensorMapL2promotion)req->l2_promotion,
						  (CUtensorMapFloatOOBfill)req->oob_fill);
	return tmap_answer(res, &map, &rep->map);
}

/* The guest's map is whatever bytes it sent: the driver only rewrites the
 * address in it (and checks the alignment its other fields ask for). */
CUresult exec_tensor_map_replace_address(struct exec *ex, const struct wire_tensor_map_replace_address_req *req,
					 struct wire_tensor_map_replace_address_rep *rep)
{
	struct wire_rec_tensor_map r;
	CUtensorMap map;
	void *address;
	CUresult res;

	if (wire_rec_tensor_map_decode(req->map.ptr, req->map.len, &r))
		return CUDA_ERROR_INVALID_VALUE;
	res = tmap_address(ex, req->address, &address);
	if (res != CUDA_SUCCESS)
		return res;
	memcpy(&map, r.opaque, sizeof(map));
	res = ex->be->cuTensorMapReplaceAddress(&map, address);
	return tmap_answer(res, &map, &rep->map);
}
