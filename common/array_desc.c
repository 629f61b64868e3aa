/* Wire and journal forms of texture and surface descriptions (array_desc.h). */
#include "array_desc.h"

#include <errno.h>
#include <string.h>

#include "wire_calls.h"

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
	struct wire_rec_array_res w = {
		.type = r->type, .flags = r->flags, .handle = r->handle, .format = r->format,
		.channels = r->channels, .width = r->width, .height = r->height, .pitch = r->pitch,
	};

	wire_rec_array_res_encode(&w, out);
}

int array_res_decode(const void *p, size_t len, struct array_res *out)
{
	struct wire_rec_array_res w;

	if (wire_rec_array_res_decode(p, len, &w) < 0)
		return -EBADMSG;
	*out = (struct array_res){
		.type = w.type, .flags = w.flags, .handle = w.handle, .format = w.format,
		.channels = w.channels, .width = w.width, .height = w.height, .pitch = w.pitch,
	};
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
	struct wire_rec_array_tex w = {
		.filter_mode = (uint32_t)t->filterMode, .flags = t->flags,
		.max_anisotropy = t->maxAnisotropy, .mipmap_filter_mode = (uint32_t)t->mipmapFilterMode,
		.mipmap_level_bias = t->mipmapLevelBias, .min_mipmap_level_clamp = t->minMipmapLevelClamp,
		.max_mipmap_level_clamp = t->maxMipmapLevelClamp,
	};

	for (int i = 0; i < 3; i++)
		w.address_mode[i] = (uint32_t)t->addressMode[i];
	memcpy(w.border_color, t->borderColor, sizeof(w.border_color));
	wire_rec_array_tex_encode(&w, out);
}

int array_tex_decode(const void *p, size_t len, CUDA_TEXTURE_DESC *out)
{
	struct wire_rec_array_tex w;

	if (wire_rec_array_tex_decode(p, len, &w) < 0)
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < 3; i++)
		out->addressMode[i] = (CUaddress_mode)w.address_mode[i];
	out->filterMode = (CUfilter_mode)w.filter_mode;
	out->flags = w.flags;
	out->maxAnisotropy = w.max_anisotropy;
	out->mipmapFilterMode = (CUfilter_mode)w.mipmap_filter_mode;
	out->mipmapLevelBias = w.mipmap_level_bias;
	out->minMipmapLevelClamp = w.min_mipmap_level_clamp;
	out->maxMipmapLevelClamp = w.max_mipmap_level_clamp;
	memcpy(out->borderColor, w.border_color, sizeof(out->borderColor));
	return 0;
}

void array_view_encode(const CUDA_RESOURCE_VIEW_DESC *v, uint8_t out[ARRAY_VIEW_BYTES])
{
	struct wire_rec_array_view w = {
		.format = (uint32_t)v->format, .width = v->width, .height = v->height, .depth = v->depth,
		.first_mipmap_level = v->firstMipmapLevel, .last_mipmap_level = v->lastMipmapLevel,
		.first_layer = v->firstLayer, .last_layer = v->lastLayer,
	};

	wire_rec_array_view_encode(&w, out);
}

int array_view_decode(const void *p, size_t len, CUDA_RESOURCE_VIEW_DESC *out)
{
	struct wire_rec_array_view w;

	if (wire_rec_array_view_decode(p, len, &w) < 0)
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	out->format = (CUresourceViewFormat)w.format;
	out->width = w.width;
	out->height = w.height;
	out->depth = w.depth;
	out->firstMipmapLevel = w.first_mipmap_level;
	out->lastMipmapLevel = w.last_mipmap_level;
	out->firstLayer = w.first_layer;
	out->lastLayer = w.last_layer;
	return 0;
}
