/* Tensor maps (wire ids 360-363, replayer/exec/exec_tensor_map.c): the
 * worker's driver encodes the 128-byte CUtensorMap and the shim writes it
 * into the application's map. The arrays are read by the rank, as the
 * driver reads them, so a rank the driver refuses is refused here before
 * any array is touched. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stdint.h>
#include <string.h>

#include "log.h"

#define TMAP_RANK_MAX 5

/* The arguments every encoder shares, packed as the table's records. */
struct tmap_pack {
	uint8_t dims[TMAP_RANK_MAX * WIRE_REC_TENSOR_DIM_BYTES];
	uint8_t strides[(TMAP_RANK_MAX - 1) * WIRE_REC_TENSOR_DIM_BYTES];
	uint8_t element_strides[TMAP_RANK_MAX * WIRE_REC_TENSOR_BOX_BYTES];
	struct wire_blob dims_blob, strides_blob, element_strides_blob;
};

/* The map's pointer only must not be NULL: the driver encodes into one
 * that is not 64-byte aligned too, whatever cuda.h says; @min_rank is the
 * encoder's least rank. */
static CUresult tmap_pack(struct tmap_pack *p, const CUtensorMap *map, cuuint32_t rank, cuuint32_t min_rank,
			  const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *element_strides)
{
	if (!map || rank < min_rank || rank > TMAP_RANK_MAX || !dims || !element_strides ||
	    (rank > 1 && !strides))
		return CUDA_ERROR_INVALID_VALUE;
	for (cuuint32_t i = 0; i < rank; i++) {
		struct wire_rec_tensor_dim d = { .value = dims[i] };
		struct wire_rec_tensor_box e = { .value = element_strides[i] };

		wire_rec_tensor_dim_put(p->dims, i, &d);
		wire_rec_tensor_box_put(p->element_strides, i, &e);
	}
	for (cuuint32_t i = 0; i + 1 < rank; i++) {
		struct wire_rec_tensor_dim s = { .value = strides[i] };

		wire_rec_tensor_dim_put(p->strides, i, &s);
	}
	p->dims_blob = (struct wire_blob){ p->dims, rank * WIRE_REC_TENSOR_DIM_BYTES };
	p->strides_blob = (struct wire_blob){ p->strides, (rank - 1) * WIRE_REC_TENSOR_DIM_BYTES };
	p->element_strides_blob = (struct wire_blob){ p->element_strides, rank * WIRE_REC_TENSOR_BOX_BYTES };
	return CUDA_SUCCESS;
}

/* The worker's map into the application's; the map is left as it was on
 * failure. */
static CUresult tmap_unpack(CUresult res, struct wire_blob got, CUtensorMap *map, const char *call)
{
	struct wire_rec_tensor_map r;

	if (res != CUDA_SUCCESS)
		return res;
	if (wire_rec_tensor_map_decode(got.ptr, got.len, &r)) {
		pr_err("%s: a map of %u bytes", call, got.len);
		return CUDA_ERROR_UNKNOWN;
	}
	memcpy(map, r.opaque, sizeof(*map));
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
					 cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
					 const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
					 const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
					 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
					 CUtensorMapFloatOOBfill oobFill)
{
	SHIM_ENTRY();
	uint8_t box[TMAP_RANK_MAX * WIRE_REC_TENSOR_BOX_BYTES];
	struct wire_tensor_map_encode_tiled_req req = {
		.data_type = (uint32_t)tensorDataType, .rank = tensorRank,
		.address = (uint64_t)(uintptr_t)globalAddress, .interleave = (uint32_t)interleave,
		.swizzle = (uint32_t)swizzle, .l2_promotion = (uint32_t)l2Promotion, .oob_fill = (uint32_t)oobFill,
	};
	struct wire_tensor_map_encode_tiled_rep rep;
	struct tmap_pack p;
	CUresult res;

	res = tmap_pack(&p, tensorMap, tensorRank, 1, globalDim, globalStrides, elementStrides);
	if (res != CUDA_SUCCESS || !boxDim)
		return res != CUDA_SUCCESS ? res : CUDA_ERROR_INVALID_VALUE;
	for (cuuint32_t i = 0; i < tensorRank; i++) {
		struct wire_rec_tensor_box b = { .value = boxDim[i] };

		wire_rec_tensor_box_put(box, i, &b);
	}
	req.dims = p.dims_blob;
	req.strides = p.strides_blob;
	req.box = (struct wire_blob){ box, tensorRank * WIRE_REC_TENSOR_BOX_BYTES };
	req.element_strides = p.element_strides_blob;
	res = rpc_tensor_map_encode_tiled(&req, &rep);
	return tmap_unpack(res, rep.map, tensorMap, "tensor_map_encode_tiled");
}

SHIM_API CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
					  cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
					  const cuuint64_t *globalStrides, const int *pixelBoxLowerCorner,
					  const int *pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
					  cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
					  CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
					  CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	SHIM_ENTRY();
	uint8_t lower[(TMAP_RANK_MAX - 2) * WIRE_REC_TENSOR_CORNER_BYTES];
	uint8_t upper[(TMAP_RANK_MAX - 2) * WIRE_REC_TENSOR_CORNER_BYTES];
	struct wire_tensor_map_encode_im2col_req req = {
		.data_type = (uint32_t)tensorDataType, .rank = tensorRank,
		.address = (uint64_t)(uintptr_t)globalAddress, .channels = channelsPerPixel,
		.pixels = pixelsPerColumn, .interleave = (uint32_t)interleave, .swizzle = (uint32_t)swizzle,
		.l2_promotion = (uint32_t)l2Promotion, .oob_fill = (uint32_t)oobFill,
	};
	struct wire_tensor_map_encode_im2col_rep rep;
	struct tmap_pack p;
	CUresult res;

	res = tmap_pack(&p, tensorMap, tensorRank, 3, globalDim, globalStrides, elementStrides);
	if (res != CUDA_SUCCESS || !pixelBoxLowerCorner || !pixelBoxUpperCorner)
		return res != CUDA_SUCCESS ? res : CUDA_ERROR_INVALID_VALUE;
	/* One corner offset per spatial dimension: rank - 2. */
	for (cuuint32_t i = 0; i + 2 < tensorRank; i++) {
		struct wire_rec_tensor_corner lo = { .offset = pixelBoxLowerCorner[i] };
		struct wire_rec_tensor_corner hi = { .offset = pixelBoxUpperCorner[i] };

		wire_rec_tensor_corner_put(lower, i, &lo);
		wire_rec_tensor_corner_put(upper, i, &hi);
	}
	req.dims = p.dims_blob;
	req.strides = p.strides_blob;
	req.lower = (struct wire_blob){ lower, (tensorRank - 2) * WIRE_REC_TENSOR_CORNER_BYTES };
	req.upper = (struct wire_blob){ upper, (tensorRank - 2) * WIRE_REC_TENSOR_CORNER_BYTES };
	req.element_strides = p.element_strides_blob;
	res = rpc_tensor_map_encode_im2col(&req, &rep);
	return tmap_unpack(res, rep.map, tensorMap, "tensor_map_encode_im2col");
}

SHIM_API CUresult cuTensorMapEncodeIm2colWide(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
					      cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
					      const cuuint64_t *globalStrides, int pixelBoxLowerCornerWidth,
					      int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
					      cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
					      CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
					      CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
					      CUtensorMapFloatOOBfill oobFill)
{
	SHIM_ENTRY();
	struct wire_tensor_map_encode_im2col_wide_req req = {
		.data_type = (uint32_t)tensorDataType, .rank = tensorRank,
		.address = (uint64_t)(uintptr_t)globalAddress, .lower = pixelBoxLowerCornerWidth,
		.upper = pixelBoxUpperCornerWidth, .channels = channelsPerPixel, .pixels = pixelsPerColumn,
		.interleave = (uint32_t)interleave, .mode = (uint32_t)mode, .swizzle = (uint32_t)swizzle,
		.l2_promotion = (uint32_t)l2Promotion, .oob_fill = (uint32_t)oobFill,
	};
	struct wire_tensor_map_encode_im2col_wide_rep rep;
	struct tmap_pack p;
	CUresult res;

	res = tmap_pack(&p, tensorMap, tensorRank, 3, globalDim, globalStrides, elementStrides);
	if (res != CUDA_SUCCESS)
		return res;
	req.dims = p.dims_blob;
	req.strides = p.strides_blob;
	req.element_strides = p.element_strides_blob;
	res = rpc_tensor_map_encode_im2col_wide(&req, &rep);
	return tmap_unpack(res, rep.map, tensorMap, "tensor_map_encode_im2col_wide");
}

SHIM_API CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
	SHIM_ENTRY();
	struct wire_tensor_map_replace_address_req req = { .address = (uint64_t)(uintptr_t)globalAddress };
	struct wire_tensor_map_replace_address_rep rep;
	CUresult res;

	if (!tensorMap)
		return CUDA_ERROR_INVALID_VALUE;
	req.map = (struct wire_blob){ (const uint8_t *)tensorMap, sizeof(*tensorMap) };
	res = rpc_tensor_map_replace_address(&req, &rep);
	return tmap_unpack(res, rep.map, tensorMap, "tensor_map_replace_address");
}
