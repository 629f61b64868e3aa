/* Fuzz target for common/fatbin.c: cuimage_parse() on arbitrary bytes, for
 * "any" target and for two real ones (so selection and the PTX fallback run),
 * and cuimage_measure() bounded by the input's length. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fatbin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned image_touch(const struct cuimage *img)
{
	unsigned acc = 0;
	size_t n;
	const uint8_t *code = cuimage_code(img, &n);

	for (size_t i = 0; i < n; i++)
		acc += code[i];
	for (unsigned i = 0; i < cuimage_entry_count(img); i++)
		acc += cuimage_entry(img, i)->sm;
	for (unsigned i = 0; i < cuimage_kernel_count(img); i++) {
		const struct cuimage_kernel *k = cuimage_kernel(img, i);

		acc += (unsigned)strlen(k->name) + k->param_bytes;
		for (uint32_t j = 0; j < k->param_count; j++)
			acc += k->params[j].offset + k->params[j].size;
		if (cuimage_kernel_find(img, k->name) == NULL)
			__builtin_trap();
	}
	for (unsigned i = 0; i < cuimage_global_count(img); i++) {
		const struct cuimage_global *g = cuimage_global(img, i);

		acc += (unsigned)strlen(g->name);
		for (uint64_t j = 0; g->init && j < g->size; j++)
			acc += g->init[j];
	}
	return acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned targets[] = {0, 90, 120};
	volatile unsigned sink = 0;
	size_t measured;

	for (unsigned t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
		struct cuimage *img;

		if (cuimage_parse(data, size, targets[t], &img) == 0) {
			sink += image_touch(img);
			cuimage_free(img);
		}
	}
	if (size && cuimage_measure(data, size, &measured) == 0 && measured > size)
		__builtin_trap();
	(void)sink;
	return 0;
}
