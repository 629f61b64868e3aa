/* Wire and journal forms of texture and surface descriptions (array_desc.h). */
#include "array_desc.h"

#include <errno.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the encodings below are little endian");

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

uint32_t array_format_elem_size(uint32_t format, uint32_t channels)
{
	uint32_t size;

	switch (format) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		size = 1;
		break;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		size = 2;
		break;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		size = 4;
		break;
	default:
		return 0;
	}
	if (channels != 1 && channels != 2 && channels != 4)
		return 0;
	return size * channels;
}

void array_res_from_cuda(const CUDA_RESOURCE_DESC *r, struct array_res *out)
{
	memset(out, 0, sizeof(*out));
	out->type = (uint32_t)r->resType;
	out->flags = r->flags;
	switch (r->resType) {
	case CU_RESOURCE_TYPE_ARRAY:
		out->handle = (uint64_t)(uintptr_t)r->res.array.hArray;
		break;
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		out->handle = (uint64_t)(uintptr_t)r->res.mipmap.hMipmappedArray;
		break;
	case CU_RESOURCE_TYPE_LINEAR:
		out->handle = r->res.linear.devPtr;
		out->format = (uint32_t)r->res.linear.format;
		out->channels = r->res.linear.numChannels;
		out->width = r->res.linear.sizeInBytes;
		break;
	case CU_RESOURCE_TYPE_PITCH2D:
		out->handle = r->res.pitch2D.devPtr;
		out->format = (uint32_t)r->res.pitch2D.format;
		out->channels = r->res.pitch2D.numChannels;
		out->width = r->res.pitch2D.width;
		out->height = r->res.pitch2D.height;
		out->pitch = r->res.pitch2D.pitchInBytes;
		break;
	default:
		break;
	}
}

void array_res_encode(const struct array_res *r, uint8_t out[ARRAY_RES_BYTES])
{
	put32(out, r->type);
	put32(out + 4, r->flags);
	put64(out + 8, r->handle);
	put32(out + 16, r->format);
	put32(out + 20, r->channels);
	put64(out + 24, r->width);
	put64(out + 32, r->height);
	put64(out + 40, r->pitch);
}

int array_res_decode(const void *p, size_t len, struct array_res *out)
{
	const uint8_t *b = p;

	if (len != ARRAY_RES_BYTES)
		return -EBADMSG;
	out->type = get32(b);
	out->flags = get32(b + 4);
	out->handle = get64(b + 8);
	out->format = get32(b + 16);
	out->channels = get32(b + 20);
	out->width = get64(b + 24);
	out->height = get64(b + 32);
	out->pitch = get64(b + 40);
	switch (out->type) {
	case CU_RESOURCE_TYPE_ARRAY:
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		/* Only the handle means anything: one encoding per resource. */
		if (out->format || out->channels || out->width || out->height || out->pitch)
			return -EBADMSG;
		return 0;
	case CU_RESOURCE_TYPE_LINEAR:
		return out->height || out->pitch ? -EBADMSG : 0;
	case CU_RESOURCE_TYPE_PITCH2D:
		return 0;
	default:
		return -EBADMSG;
	}
}

void array_res_to_cuda(const struct array_res *r, uint64_t real, CUDA_RESOURCE_DESC *out)
{
	memset(out, 0, sizeof(*out));
	out->resType = (CUresourcetype)r->type;
	out->flags = r->flags;
	switch (r->type) {
	case CU_RESOURCE_TYPE_ARRAY:
		out->res.array.hArray = (CUarray)(uintptr_t)real;
		break;
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		out->res.mipmap.hMipmappedArray = (CUmipmappedArray)(uintptr_t)real;
		break;
	case CU_RESOURCE_TYPE_LINEAR:
		out->res.linear.devPtr = real;
		out->res.linear.format = (CUarray_format)r->format;
		out->res.linear.numChannels = r->channels;
		out->res.linear.sizeInBytes = r->width;
		break;
	case CU_RESOURCE_TYPE_PITCH2D:
		out->res.pitch2D.devPtr = real;
		out->res.pitch2D.format = (CUarray_format)r->format;
		out->res.pitch2D.numChannels = r->channels;
		out->res.pitch2D.width = r->width;
		out->res.pitch2D.height = r->height;
		out->res.pitch2D.pitchInBytes = r->pitch;
		break;
	default:
		break;
	}
}

void array_tex_encode(const CUDA_TEXTURE_DESC *t, uint8_t out[ARRAY_TEX_BYTES])
{
	for (int i = 0; i < 3; i++)
		put32(out + 4 * i, (uint32_t)t->addressMode[i]);
	put32(out + 12, (uint32_t)t->filterMode);
	put32(out + 16, t->flags);
	put32(out + 20, t->maxAnisotropy);
	put32(out + 24, (uint32_t)t->mipmapFilterMode);
	memcpy(out + 28, &t->mipmapLevelBias, 4);
	memcpy(out + 32, &t->minMipmapLevelClamp, 4);
	memcpy(out + 36, &t->maxMipmapLevelClamp, 4);
	memcpy(out + 40, t->borderColor, 16);
	memset(out + 56, 0, 8);
}

int array_tex_decode(const void *p, size_t len, CUDA_TEXTURE_DESC *out)
{
	const uint8_t *b = p;

	if (len != ARRAY_TEX_BYTES || get64(b + 56))
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < 3; i++)
		out->addressMode[i] = (CUaddress_mode)get32(b + 4 * i);
	out->filterMode = (CUfilter_mode)get32(b + 12);
	out->flags = get32(b + 16);
	out->maxAnisotropy = get32(b + 20);
	out->mipmapFilterMode = (CUfilter_mode)get32(b + 24);
	memcpy(&out->mipmapLevelBias, b + 28, 4);
	memcpy(&out->minMipmapLevelClamp, b + 32, 4);
	memcpy(&out->maxMipmapLevelClamp, b + 36, 4);
	memcpy(out->borderColor, b + 40, 16);
	return 0;
}

void array_view_encode(const CUDA_RESOURCE_VIEW_DESC *v, uint8_t out[ARRAY_VIEW_BYTES])
{
	put32(out, (uint32_t)v->format);
	put32(out + 4, 0);
	put64(out + 8, v->width);
	put64(out + 16, v->height);
	put64(out + 24, v->depth);
	put32(out + 32, v->firstMipmapLevel);
	put32(out + 36, v->lastMipmapLevel);
	put32(out + 40, v->firstLayer);
	put32(out + 44, v->lastLayer);
}

int array_view_decode(const void *p, size_t len, CUDA_RESOURCE_VIEW_DESC *out)
{
	const uint8_t *b = p;

	if (len != ARRAY_VIEW_BYTES || get32(b + 4))
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	out->format = (CUresourceViewFormat)get32(b);
	out->width = get64(b + 8);
	out->height = get64(b + 16);
	out->depth = get64(b + 24);
	out->firstMipmapLevel = get32(b + 32);
	out->lastMipmapLevel = get32(b + 36);
	out->firstLayer = get32(b + 40);
	out->lastLayer = get32(b + 44);
	return 0;
}
