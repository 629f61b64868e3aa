/* Texture and surface object descriptions on the wire and in the journal
 * (docs/wire-protocol.md, "Arrays and textures").
 *
 * CUDA_RESOURCE_DESC, CUDA_TEXTURE_DESC and CUDA_RESOURCE_VIEW_DESC hold
 * pointers, size_t and enums; these are their fixed-width little-endian
 * forms. A resource names arrays and mipmapped arrays by the guest's virtual
 * handle and linear memory by its device address. Decoding accepts exactly
 * one length, refuses non-zero reserved fields and unknown resource types;
 * what the values mean (bounds, handles) is the executor's to check.
 *
 * Also: the element size of an array format, shared by the shim (packing
 * host rows) and the executor (bounds). Pure functions, any thread.
 */
#ifndef TERN_ARRAY_DESC_H
#define TERN_ARRAY_DESC_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "wire_calls.h"

/* The layouts are the wire table's records (calls.tbl: array_res, array_tex,
 * array_view). */
#define ARRAY_RES_BYTES WIRE_REC_ARRAY_RES_BYTES
#define ARRAY_TEX_BYTES WIRE_REC_ARRAY_TEX_BYTES
#define ARRAY_VIEW_BYTES WIRE_REC_ARRAY_VIEW_BYTES

/* A resource in the guest's terms. */
struct array_res {
	uint32_t type;          /* CUresourcetype */
	uint32_t flags;         /* must be 0 (the driver's rule) */
	uint64_t handle;        /* array or mipmap handle, or the device address */
	uint32_t format;        /* linear, pitch2D: CUarray_format */
	uint32_t channels;
	uint64_t width;         /* linear: bytes; pitch2D: elements */
	uint64_t height;        /* pitch2D */
	uint64_t pitch;         /* pitch2D: bytes */
};

/* Bytes per element of @format with @channels channels; 0 for a format tern
 * does not handle (planar, block-compressed ...) or a channel count other
 * than 1, 2 or 4. */
uint32_t array_format_elem_size(uint32_t format, uint32_t channels);

/* From the driver's structs (guest side) to the wire form. */
void array_res_from_cuda(const CUDA_RESOURCE_DESC *r, struct array_res *out);
void array_res_encode(const struct array_res *r, uint8_t out[ARRAY_RES_BYTES]);
void array_tex_encode(const CUDA_TEXTURE_DESC *t, uint8_t out[ARRAY_TEX_BYTES]);
void array_view_encode(const CUDA_RESOURCE_VIEW_DESC *v, uint8_t out[ARRAY_VIEW_BYTES]);

/* Back: 0, or -EBADMSG for a wrong length, a non-zero reserved field or an
 * unknown resource type. The resource's handles stay the guest's. */
int array_res_decode(const void *p, size_t len, struct array_res *out);
int array_tex_decode(const void *p, size_t len, CUDA_TEXTURE_DESC *out);
int array_view_decode(const void *p, size_t len, CUDA_RESOURCE_VIEW_DESC *out);
/* The driver's struct for @r, with @real in place of the guest's handle. */
void array_res_to_cuda(const struct array_res *r, uint64_t real, CUDA_RESOURCE_DESC *out);

#endif
