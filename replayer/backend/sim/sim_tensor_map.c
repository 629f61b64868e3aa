/* Tensor maps (TMA descriptors) on the sim: cuTensorMapEncodeTiled,
 * cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide and
 * cuTensorMapReplaceAddress.
 *
 * The driver's CUtensorMap is opaque, 128 bytes, filled on the host; only
 * TMA hardware reads it, and the sim's CPU kernels have no TMA. So the sim
 * checks every argument as cuda.h documents the driver's requirements
 * (CUDA_ERROR_INVALID_VALUE where it names one) and writes a map of its own
 * layout, a pure function of the arguments, so that the same arguments give
 * the same bytes and a replaced address can be replaced back:
 *
 *   0  u32 magic "TMAP"      4 u8 kind (1 tiled, 2 im2col, 3 im2col wide)
 *   5  u8 data type          6 u8 rank        7 u8 interleave
 *   8  u64 global address
 *  16  u32 global dims - 1, 5 of them
 *  36  u32 zero
 *  40  u64 global strides, 4 of them
 *  72  u8 box dims - 1 (tiled), 5     77  u8 element strides - 1, 5
 *  82  u8 swizzle  83 u8 L2 promotion  84 u8 OOB fill  85 u8 wide mode
 *  86  u16 channels per pixel          88 u16 pixels per column
 *  90  i16 lower corner, 3             96 i16 upper corner, 3
 * 102  zero to 128
 *
 * Little endian, dimensions past the rank zero. What it does not model:
 * Im2colWide's compute capability 10.0 (the sim reports 9.0 and encodes it
 * all the same), and whatever the driver checks beyond its documentation.
 */
#define LOG_PREFIX "sim: "

#include <stdint.h>
#include <string.h>

#include "le.h"
#include "sim.h"

#define TMAP_MAGIC 0x50414d54u          /* "TMAP" little endian */
#define TMAP_RANK_MAX 5

enum tmap_kind { TMAP_TILED = 1, TMAP_IM2COL = 2, TMAP_IM2COL_WIDE = 3 };

/* What the three encoders share: the tensor in global memory and the map's
 * modes. */
struct tmap_tensor {
	CUtensorMapDataType type;
	cuuint32_t rank;
	uint64_t address;
	const cuuint64_t *dims;
	const cuuint64_t *strides;
	const cuuint32_t *element_strides;
	CUtensorMapInterleave interleave;
	CUtensorMapSwizzle swizzle;
	CUtensorMapL2promotion l2;
	CUtensorMapFloatOOBfill oob;
};

/* Bits of one element; 0 for a type cuda.h does not define. */
static unsigned tmap_type_bits(CUtensorMapDataType t)
{
	switch (t) {
	case CU_TENSOR_MAP_DATA_TYPE_UINT8:
		return 8;
	case CU_TENSOR_MAP_DATA_TYPE_UINT16:
	case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
	case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
		return 16;
	case CU_TENSOR_MAP_DATA_TYPE_UINT32:
	case CU_TENSOR_MAP_DATA_TYPE_INT32:
	case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
	case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
	case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
	case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
		return 32;
	case CU_TENSOR_MAP_DATA_TYPE_UINT64:
	case CU_TENSOR_MAP_DATA_TYPE_INT64:
	case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
		return 64;
	case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B:
	case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B:
		return 4;
	case CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B:
		return 6;
	}
	return 0;
}

static bool tmap_type_float(CUtensorMapDataType t)
{
	return t >= CU_TENSOR_MAP_DATA_TYPE_FLOAT16 && t <= CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ;
}

/* The packed types laid out in 16-byte units: 32-byte alignment, dims[0] of
 * 128s, 128 channels or a box of 128. */
static bool tmap_type_align16b(CUtensorMapDataType t)
{
	return t == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B || t == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B;
}

/* The alignment of the global address and of the strides. */
static uint64_t tmap_align(CUtensorMapDataType t, CUtensorMapInterleave il)
{
	return il == CU_TENSOR_MAP_INTERLEAVE_32B || tmap_type_align16b(t) ? 32 : 16;
}

/* The bytes one swizzle pattern spans; 0 for none. */
static unsigned tmap_swizzle_span(CUtensorMapSwizzle s)
{
	switch (s) {
	case CU_TENSOR_MAP_SWIZZLE_32B:
		return 32;
	case CU_TENSOR_MAP_SWIZZLE_64B:
		return 64;
	case CU_TENSOR_MAP_SWIZZLE_128B:
	case CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B:
	case CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B:
	case CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B:
		return 128;
	default:
		return 0;
	}
}

/* The packed types take only some swizzles (cuda.h lists them; ATOM_64B is
 * store only for 16U6, still a valid map). */
static bool tmap_swizzle_type_ok(CUtensorMapDataType t, CUtensorMapSwizzle s)
{
	if (t == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B)
		return s == CU_TENSOR_MAP_SWIZZLE_NONE || s == CU_TENSOR_MAP_SWIZZLE_128B ||
		       s == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B || s == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B;
	if (t == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B)
		return s == CU_TENSOR_MAP_SWIZZLE_NONE || s == CU_TENSOR_MAP_SWIZZLE_128B ||
		       s == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B;
	return true;
}

/* The requirements every encoder shares, for ranks @min_rank..5. */
static bool tmap_tensor_ok(const struct tmap_tensor *t, cuuint32_t min_rank)
{
	unsigned bits = tmap_type_bits(t->type);
	uint64_t align = tmap_align(t->type, t->interleave);

	if (!bits || t->rank < min_rank || t->rank > TMAP_RANK_MAX)
		return false;
	if ((unsigned)t->interleave > CU_TENSOR_MAP_INTERLEAVE_32B ||
	    (unsigned)t->swizzle > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B ||
	    (unsigned)t->l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
	    (unsigned)t->oob > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
		return false;
	if (t->interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && t->rank < 3)
		return false;
	/* cuda.h pairs interleave 32B with swizzle 32B; the H200's driver
	 * takes 32B, 64B and 128B with it (measured), and so does the sim. */
	if (t->type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B && t->interleave != CU_TENSOR_MAP_INTERLEAVE_NONE)
		return false;
	if (!tmap_swizzle_type_ok(t->type, t->swizzle))
		return false;
	if (t->oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !tmap_type_float(t->type))
		return false;
	if (!t->address || t->address % align)
		return false;
	if (!t->dims || !t->element_strides || (t->rank > 1 && !t->strides))
		return false;
	for (cuuint32_t i = 0; i < t->rank; i++) {
		if (!t->dims[i] || t->dims[i] > 1ull << 32)
			return false;
		if (!t->element_strides[i] || t->element_strides[i] > 8)
			return false;
	}
	if (tmap_type_align16b(t->type) && t->dims[0] % 128)
		return false;
	if (t->type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B && t->dims[0] % 2)
		return false;
	for (cuuint32_t i = 0; i + 1 < t->rank; i++)
		if (t->strides[i] % align || t->strides[i] >= 1ull << 40)
			return false;
	return true;
}

/* The bounding box's inner dimension in bytes fits the swizzle span. */
static bool tmap_inner_ok(const struct tmap_tensor *t, uint64_t inner_elems)
{
	unsigned span = tmap_swizzle_span(t->swizzle);
	uint64_t bytes = inner_elems * tmap_type_bits(t->type) / 8;

	return t->interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || !span || bytes <= span;
}

static void tmap_write(uint8_t *m, enum tmap_kind kind, const struct tmap_tensor *t)
{
	memset(m, 0, sizeof(CUtensorMap));
	le32_put(m, TMAP_MAGIC);
	m[4] = (uint8_t)kind;
	m[5] = (uint8_t)t->type;
	m[6] = (uint8_t)t->rank;
	m[7] = (uint8_t)t->interleave;
	le64_put(m + 8, t->address);
	for (cuuint32_t i = 0; i < t->rank; i++) {
		le32_put(m + 16 + 4 * i, (uint32_t)(t->dims[i] - 1));
		m[77 + i] = (uint8_t)(t->element_strides[i] - 1);
	}
	for (cuuint32_t i = 0; i + 1 < t->rank; i++)
		le64_put(m + 40 + 8 * i, t->strides[i]);
	m[82] = (uint8_t)t->swizzle;
	m[83] = (uint8_t)t->l2;
	m[84] = (uint8_t)t->oob;
}

/* cuda.h asks for a 64-byte aligned map; the H200's driver encodes into a
 * 32-byte aligned one all the same, and so does the sim. */
static bool tmap_pointer_ok(const CUtensorMap *map)
{
	return map != NULL;
}

/* Initialised driver, valid arguments: the sim holds no state for a map. */
static CUresult tmap_enter(void)
{
	struct sim *sim;
	CUresult rc = sim_enter(&sim);

	if (rc == CUDA_SUCCESS)
		sim_leave(sim);
	return rc;
}

CUresult sim_cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
				    const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
				    const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
				    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
	struct tmap_tensor t = { type, rank, (uint64_t)(uintptr_t)address, dims, strides, element_strides,
				 interleave, swizzle, l2, oob };
	CUresult rc = tmap_enter();

	if (rc)
		return rc;
	if (!tmap_pointer_ok(map) || !box || !tmap_tensor_ok(&t, 1))
		return CUDA_ERROR_INVALID_VALUE;
	for (cuuint32_t i = 0; i < rank; i++)
		if (!box[i] || box[i] > 256)
			return CUDA_ERROR_INVALID_VALUE;
	if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && (uint64_t)box[0] * tmap_type_bits(type) % 128)
		return CUDA_ERROR_INVALID_VALUE;   /* the inner box is not a multiple of 16 bytes */
	if (tmap_type_align16b(type) && box[0] != 128)
		return CUDA_ERROR_INVALID_VALUE;
	if (!tmap_inner_ok(&t, box[0]))
		return CUDA_ERROR_INVALID_VALUE;
	tmap_write((uint8_t *)map, TMAP_TILED, &t);
	for (cuuint32_t i = 0; i < rank; i++)
		((uint8_t *)map)[72 + i] = (uint8_t)(box[i] - 1);
	return CUDA_SUCCESS;
}

/* Channels and pixels of both im2col forms. */
static bool tmap_im2col_ok(const struct tmap_tensor *t, cuuint32_t channels, cuuint32_t pixels)
{
	if (!channels || channels > 256 || !pixels || pixels > 1024)
		return false;
	if (tmap_type_align16b(t->type) && channels != 128)
		return false;
	return tmap_inner_ok(t, channels);
}

static void tmap_write_im2col(uint8_t *m, cuuint32_t channels, cuuint32_t pixels, const int *lower,
			      const int *upper, unsigned corners)
{
	le16_put(m + 86, (uint16_t)channels);
	le16_put(m + 88, (uint16_t)pixels);
	for (unsigned i = 0; i < corners; i++) {
		le16_put(m + 90 + 2 * i, (uint16_t)(int16_t)lower[i]);
		le16_put(m + 96 + 2 * i, (uint16_t)(int16_t)upper[i]);
	}
}

CUresult sim_cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
				     const cuuint64_t *dims, const cuuint64_t *strides, const int *lower,
				     const int *upper, cuuint32_t channels, cuuint32_t pixels,
				     const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
				     CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
	struct tmap_tensor t = { type, rank, (uint64_t)(uintptr_t)address, dims, strides, element_strides,
				 interleave, swizzle, l2, oob };
	CUresult rc = tmap_enter();
	int range;

	if (rc)
		return rc;
	if (!tmap_pointer_ok(map) || !lower || !upper || !tmap_tensor_ok(&t, 3) ||
	    !tmap_im2col_ok(&t, channels, pixels))
		return CUDA_ERROR_INVALID_VALUE;
	/* One corner offset per spatial dimension (D, H, W), with fewer bits
	 * the more there are. */
	range = rank == 3 ? 32768 : rank == 4 ? 128 : 16;
	for (cuuint32_t i = 0; i + 2 < rank; i++)
		if (lower[i] < -range || lower[i] >= range || upper[i] < -range || upper[i] >= range)
			return CUDA_ERROR_INVALID_VALUE;
	tmap_write((uint8_t *)map, TMAP_IM2COL, &t);
	tmap_write_im2col((uint8_t *)map, channels, pixels, lower, upper, rank - 2);
	return CUDA_SUCCESS;
}

CUresult sim_cuTensorMapEncodeIm2colWide(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
					 void *address, const cuuint64_t *dims, const cuuint64_t *strides,
					 int lower, int upper, cuuint32_t channels, cuuint32_t pixels,
					 const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
					 CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle,
					 CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
	struct tmap_tensor t = { type, rank, (uint64_t)(uintptr_t)address, dims, strides, element_strides,
				 interleave, swizzle, l2, oob };
	CUresult rc = tmap_enter();

	if (rc)
		return rc;
	if ((unsigned)mode > CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128)
		return CUDA_ERROR_INVALID_VALUE;
	/* W128 ignores the pixels per column. */
	if (mode == CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128)
		pixels = 128;
	if (!tmap_pointer_ok(map) || !tmap_tensor_ok(&t, 3) || !tmap_im2col_ok(&t, channels, pixels))
		return CUDA_ERROR_INVALID_VALUE;
	/* NONE measured on the H200 (cuda.h lists 64B, 128B and 128B_ATOM_32B). */
	if (swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && swizzle != CU_TENSOR_MAP_SWIZZLE_128B &&
	    swizzle != CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B &&
	    (swizzle != CU_TENSOR_MAP_SWIZZLE_64B || tmap_type_align16b(type)))
		return CUDA_ERROR_INVALID_VALUE;
	if (lower < -32768 || lower > 32767 || upper < -32768 || upper > 32767)
		return CUDA_ERROR_INVALID_VALUE;
	tmap_write((uint8_t *)map, TMAP_IM2COL_WIDE, &t);
	((uint8_t *)map)[85] = (uint8_t)mode;
	tmap_write_im2col((uint8_t *)map, channels, pixels, &lower, &upper, 1);
	return CUDA_SUCCESS;
}

/* Only a map the sim encoded can be changed: its alignment rule is in it. */
CUresult sim_cuTensorMapReplaceAddress(CUtensorMap *map, void *address)
{
	uint64_t addr = (uint64_t)(uintptr_t)address;
	CUresult rc = tmap_enter();
	uint8_t *m = (uint8_t *)map;

	if (rc)
		return rc;
	if (!tmap_pointer_ok(map) || le32_get(m) != TMAP_MAGIC || !m[4] || m[4] > TMAP_IM2COL_WIDE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!addr || addr % tmap_align((CUtensorMapDataType)m[5], (CUtensorMapInterleave)m[7]))
		return CUDA_ERROR_INVALID_VALUE;
	le64_put(m + 8, addr);
	return CUDA_SUCCESS;
}
