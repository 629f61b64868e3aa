/* The JIT linker: cuLinkCreate, cuLinkAddData, cuLinkAddFile, cuLinkComplete,
 * cuLinkDestroy, and the JIT options they share with cuModuleLoadDataEx.
 *
 * The link state lives in the guest: inputs are collected here and linked in
 * one request (`link`, wire 300) by the worker's driver, which answers the
 * linked image. The image stays here until cuLinkDestroy, as the driver keeps
 * it in the state. Logs, their sizes and the wall time are written back where
 * the app's option arrays say, when the driver would write them. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

#define JIT_SCALARS_MAX (sizeof(((struct jit_options *)0)->scalars) / 12)
/* A link's inputs travel in one message, beside the options. */
#define LINK_INPUTS_MAX (WIRE_PAYLOAD_MAX - 64 * 1024)

struct shim_link {
	struct jit_options options;
	uint8_t *inputs;            /* (u32 type, u32 name length, name, u32 size, bytes)... */
	size_t len, cap;
	void *image;                /* the linked image, after cuLinkComplete */
	size_t image_len;
};

CUresult jit_options_parse(unsigned count, CUjit_option *options, void **values,
			   struct jit_options *out)
{
	memset(out, 0, sizeof(*out));
	if (count && (!options || !values))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < count; i++) {
		uint64_t value = (uint64_t)(uintptr_t)values[i];
		uint32_t option = (uint32_t)options[i];

		switch (options[i]) {
		case CU_JIT_WALL_TIME:
			out->wall_slot = &values[i];
			continue;
		case CU_JIT_INFO_LOG_BUFFER:
			out->info_log = values[i];
			continue;
		case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
			out->info_cap = (size_t)value;
			out->info_size_slot = &values[i];
			continue;
		case CU_JIT_ERROR_LOG_BUFFER:
			out->error_log = values[i];
			continue;
		case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
			out->error_cap = (size_t)value;
			out->error_size_slot = &values[i];
			continue;
		case CU_JIT_GLOBAL_SYMBOL_NAMES:
		case CU_JIT_GLOBAL_SYMBOL_ADDRESSES:
		case CU_JIT_GLOBAL_SYMBOL_COUNT:
		case CU_JIT_REFERENCED_KERNEL_NAMES:
		case CU_JIT_REFERENCED_KERNEL_COUNT:
		case CU_JIT_REFERENCED_VARIABLE_NAMES:
		case CU_JIT_REFERENCED_VARIABLE_COUNT:
			/* Arrays of the app's pointers: the worker's linker cannot see them. */
			pr_warn("JIT option %u (symbol tables) is not supported by tern", option);
			return CUDA_ERROR_NOT_SUPPORTED;
		default:
			break;
		}
		if (option >= CU_JIT_NUM_OPTIONS)
			return CUDA_ERROR_INVALID_VALUE;
		if (out->scalars_len / 12 == JIT_SCALARS_MAX)
			return CUDA_ERROR_INVALID_VALUE;
		option = htole32(option);
		value = htole64(value);
		memcpy(out->scalars + out->scalars_len, &option, 4);
		memcpy(out->scalars + out->scalars_len + 4, &value, 8);
		out->scalars_len += 12;
	}
	return CUDA_SUCCESS;
}

/* As the driver does: the text (cut to the buffer, NUL-terminated) and, in
 * the size option's slot, the bytes it filled. */
static void log_answer(char *buf, size_t cap, void **size_slot, const char *text)
{
	size_t n = 0;

	if (buf && cap) {
		n = strnlen(text, cap - 1);
		memcpy(buf, text, n);
		buf[n] = 0;
	}
	if (size_slot)
		*size_slot = (void *)(uintptr_t)(n ? n + 1 : 0);
}

void jit_options_answer(const struct jit_options *jo, const char *info, const char *error, float wall_ms)
{
	log_answer(jo->info_log, jo->info_cap, jo->info_size_slot, info);
	log_answer(jo->error_log, jo->error_cap, jo->error_size_slot, error);
	if (jo->wall_slot) {
		*jo->wall_slot = NULL;
		memcpy(jo->wall_slot, &wall_ms, sizeof(wall_ms));
	}
}

static CUresult link_create(unsigned count, CUjit_option *options, void **values, CUlinkState *out)
{
	struct shim_link *l;
	CUresult res;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* The option arrays stay the app's until cuLinkComplete writes the outputs. */
	res = jit_options_parse(count, options, values, &l->options);
	if (res != CUDA_SUCCESS) {
		free(l);
		return res;
	}
	*out = (CUlinkState)l;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
				  CUlinkState *stateOut)
{
	SHIM_ENTRY();
	return link_create(numOptions, options, optionValues, stateOut);
}

SHIM_API CUresult cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues,
			       CUlinkState *stateOut)
{
	SHIM_ENTRY();
	return link_create(numOptions, options, optionValues, stateOut);
}

static CUresult link_append(struct shim_link *l, const void *bytes, size_t len)
{
	if (l->len + len > l->cap) {
		size_t cap = l->cap ? l->cap : 64 * 1024;
		uint8_t *p;

		while (cap < l->len + len)
			cap *= 2;
		p = realloc(l->inputs, cap);
		if (!p)
			return CUDA_ERROR_OUT_OF_MEMORY;
		l->inputs = p;
		l->cap = cap;
	}
	memcpy(l->inputs + l->len, bytes, len);
	l->len += len;
	return CUDA_SUCCESS;
}

static CUresult link_add(CUlinkState state, CUjitInputType type, const void *data, size_t size,
			 const char *name)
{
	struct shim_link *l = (struct shim_link *)state;
	size_t name_len = name ? strnlen(name, WIRE_STR_MAX) : 0;
	uint32_t w;
	CUresult res;

	if (!l || !data || !size || (unsigned)type >= CU_JIT_NUM_INPUT_TYPES)
		return CUDA_ERROR_INVALID_VALUE;
	if (l->image)               /* completed: the driver takes no more inputs */
		return CUDA_ERROR_INVALID_HANDLE;
	if (l->len + 12 + name_len + size > LINK_INPUTS_MAX) {
		pr_err("link inputs of more than %u bytes exceed the wire limit", (unsigned)LINK_INPUTS_MAX);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	w = htole32((uint32_t)type);
	res = link_append(l, &w, 4);
	w = htole32((uint32_t)name_len);
	if (res == CUDA_SUCCESS)
		res = link_append(l, &w, 4);
	if (res == CUDA_SUCCESS && name_len)
		res = link_append(l, name, name_len);
	w = htole32((uint32_t)size);
	if (res == CUDA_SUCCESS)
		res = link_append(l, &w, 4);
	if (res == CUDA_SUCCESS)
		res = link_append(l, data, size);
	return res;
}

SHIM_API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
				   const char *name, unsigned int numOptions, CUjit_option *options,
				   void **optionValues)
{
	SHIM_ENTRY();
	/* Per-input options tune the same compilation; they are not forwarded. */
	return link_add(state, type, data, size, name);
}

SHIM_API CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size,
				const char *name, unsigned int numOptions, CUjit_option *options,
				void **optionValues)
{
	SHIM_ENTRY();
	return link_add(state, type, data, size, name);
}

static CUresult link_add_file(CUlinkState state, CUjitInputType type, const char *path)
{
	void *buf = NULL;
	size_t size = 0;
	CUresult res = shim_file_read(path, &buf, &size);

	if (res != CUDA_SUCCESS)
		return res;
	/* PTX is text: its NUL goes with it, as the driver reads it to the end. */
	res = link_add(state, type, buf, type == CU_JIT_INPUT_PTX ? size + 1 : size, path);
	free(buf);
	return res;
}

SHIM_API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
				   unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	SHIM_ENTRY();
	return link_add_file(state, type, path);
}

SHIM_API CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path,
				unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	SHIM_ENTRY();
	return link_add_file(state, type, path);
}

SHIM_API CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
	SHIM_ENTRY();
	struct shim_link *l = (struct shim_link *)state;
	struct wire_link_req req;
	struct wire_link_rep rep;
	CUresult res;

	if (!l || !cubinOut || !sizeOut)
		return CUDA_ERROR_INVALID_VALUE;
	if (!l->len)
		return CUDA_ERROR_INVALID_VALUE;
	req.options = (struct wire_blob){ l->options.scalars, l->options.scalars_len };
	req.inputs = (struct wire_blob){ l->inputs, (uint32_t)l->len };
	res = rpc_link(&req, &rep);
	if (res == CUDA_SUCCESS || res == CUDA_ERROR_INVALID_PTX || res == CUDA_ERROR_INVALID_IMAGE)
		jit_options_answer(&l->options, rep.info_log, rep.error_log, rep.wall_ms);
	if (res != CUDA_SUCCESS)
		return res;
	free(l->image);
	l->image = malloc(rep.image.len ? rep.image.len : 1);
	if (!l->image)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(l->image, rep.image.ptr, rep.image.len);
	l->image_len = rep.image.len;
	*cubinOut = l->image;
	*sizeOut = l->image_len;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuLinkDestroy(CUlinkState state)
{
	SHIM_ENTRY();
	struct shim_link *l = (struct shim_link *)state;

	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	free(l->inputs);
	free(l->image);
	free(l);
	return CUDA_SUCCESS;
}
