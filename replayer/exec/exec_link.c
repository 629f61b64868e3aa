/* JIT linking (wire `link`): the guest's whole link in one request.
 *
 * The options are (u32 option, u64 value) pairs of scalar JIT options; the
 * inputs (u32 type, u32 name length, name, u32 size, bytes) one after the
 * other. Both come from a hostile guest: every length is checked against
 * what is left of the blob, every option against the ones that carry a
 * plain value, every input type against the driver's. The worker adds its
 * own log buffers and wall-time slot; the linked image is copied out before
 * the link state is destroyed. */
#define LOG_PREFIX "exec: "

#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"
#include "le.h"

#define LINK_OPTIONS_MAX 40
#define LINK_LOG_BYTES (WIRE_STR_MAX + 1)

/* Options whose value is a plain number (not an output, not an array). */
static bool option_scalar(uint32_t option)
{
	switch (option) {
	case CU_JIT_MAX_REGISTERS:
	case CU_JIT_THREADS_PER_BLOCK:
	case CU_JIT_OPTIMIZATION_LEVEL:
	case CU_JIT_TARGET_FROM_CUCONTEXT:
	case CU_JIT_TARGET:
	case CU_JIT_FALLBACK_STRATEGY:
	case CU_JIT_GENERATE_DEBUG_INFO:
	case CU_JIT_LOG_VERBOSE:
	case CU_JIT_GENERATE_LINE_INFO:
	case CU_JIT_CACHE_MODE:
	case CU_JIT_NEW_SM3X_OPT:
	case CU_JIT_FAST_COMPILE:
	case CU_JIT_LTO:
	case CU_JIT_FTZ:
	case CU_JIT_PREC_DIV:
	case CU_JIT_PREC_SQRT:
	case CU_JIT_FMA:
	case CU_JIT_OPTIMIZE_UNUSED_DEVICE_VARIABLES:
	case CU_JIT_POSITION_INDEPENDENT_CODE:
	case CU_JIT_MIN_CTA_PER_SM:
	case CU_JIT_MAX_THREADS_PER_BLOCK:
	case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
	case CU_JIT_SPLIT_COMPILE:
		return true;
	default:
		return false;
	}
}

static CUresult link_inputs_add(struct exec *ex, CUlinkState state, struct wire_blob in)
{
	char name[WIRE_STR_MAX + 1];
	size_t off = 0;
	CUresult res = CUDA_SUCCESS;

	if (!in.len)
		return CUDA_ERROR_INVALID_VALUE;
	while (off < in.len && res == CUDA_SUCCESS) {
		uint32_t type, name_len, size;
		void *data;

		if (in.len - off < 8)
			return CUDA_ERROR_INVALID_VALUE;
		type = le32_get(in.ptr + off);
		name_len = le32_get(in.ptr + off + 4);
		off += 8;
		if (type >= CU_JIT_NUM_INPUT_TYPES || name_len > WIRE_STR_MAX || in.len - off < name_len + 4)
			return CUDA_ERROR_INVALID_VALUE;
		memcpy(name, in.ptr + off, name_len);
		name[name_len] = 0;
		off += name_len;
		size = le32_get(in.ptr + off);
		off += 4;
		if (!size || in.len - off < size)
			return CUDA_ERROR_INVALID_VALUE;
		/* The driver reads cubins as ELF, aligned; and PTX as text to a NUL. */
		data = aligned_alloc(64, ((size_t)size + 64) / 64 * 64);
		if (!data)
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(data, in.ptr + off, size);
		((uint8_t *)data)[size] = 0;
		off += size;
		res = ex->be->cuLinkAddData(state, (CUjitInputType)type, data, size,
					    name_len ? name : NULL, 0, NULL, NULL);
		free(data);
	}
	return res;
}

CUresult exec_link(struct exec *ex, const struct wire_link_req *req, struct wire_link_rep *rep)
{
	static char info[LINK_LOG_BYTES], error[LINK_LOG_BYTES];
	CUjit_option options[LINK_OPTIONS_MAX + 5];
	void *values[LINK_OPTIONS_MAX + 5];
	unsigned n = 0;
	float wall = 0;
	CUlinkState state;
	void *image = NULL, *copy;
	size_t size = 0;
	CUresult res;

	if (req->options.len % 12 || req->options.len / 12 > LINK_OPTIONS_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	for (uint32_t off = 0; off < req->options.len; off += 12) {
		uint32_t option = le32_get(req->options.ptr + off);
		uint64_t value;

		memcpy(&value, req->options.ptr + off + 4, 8);
		if (!option_scalar(option))
			return CUDA_ERROR_INVALID_VALUE;
		options[n] = (CUjit_option)option;
		values[n++] = (void *)(uintptr_t)le64toh(value);
	}
	info[0] = error[0] = 0;
	options[n] = CU_JIT_INFO_LOG_BUFFER;
	values[n++] = info;
	options[n] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
	values[n++] = (void *)(uintptr_t)sizeof(info);
	options[n] = CU_JIT_ERROR_LOG_BUFFER;
	values[n++] = error;
	options[n] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
	values[n++] = (void *)(uintptr_t)sizeof(error);
	options[n] = CU_JIT_WALL_TIME;
	values[n++] = NULL;

	exec_context_any(ex);
	res = ex->be->cuLinkCreate(n, options, values, &state);
	if (res != CUDA_SUCCESS)
		return res;
	res = link_inputs_add(ex, state, req->inputs);
	if (res == CUDA_SUCCESS)
		res = ex->be->cuLinkComplete(state, &image, &size);
	if (res == CUDA_SUCCESS && (!image || !size || size > WIRE_PAYLOAD_MAX - 2 * LINK_LOG_BYTES))
		res = CUDA_ERROR_NOT_SUPPORTED;
	if (res == CUDA_SUCCESS) {
		copy = exec_copy_buffer(ex, size);
		if (copy) {
			memcpy(copy, image, size);
			rep->image = (struct wire_blob){ copy, (uint32_t)size };
		} else {
			res = CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	memcpy(&wall, &values[n - 1], sizeof(wall));
	ex->be->cuLinkDestroy(state);
	/* Logs go back on failure too: they say why. */
	snprintf(rep->info_log, sizeof(rep->info_log), "%s", info);
	snprintf(rep->error_log, sizeof(rep->error_log), "%s", error);
	rep->wall_ms = wall;
	if (res != CUDA_SUCCESS && error[0])
		pr_debug("link failed (%d): %s", res, error);
	return res;
}
