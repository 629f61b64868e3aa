/* Fuzz target for texture and surface descriptions (common/array_desc.h),
 * which the executor decodes from a hostile guest's requests and a restore
 * from a snapshot's journal. The first byte picks the decoder. A
 * description that decodes must encode back to exactly the same bytes (one
 * form only), and its element size query must not misbehave. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "array_desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t back[ARRAY_TEX_BYTES];
	struct array_res res;
	CUDA_TEXTURE_DESC tex;
	CUDA_RESOURCE_VIEW_DESC view;
	CUDA_RESOURCE_DESC cuda;

	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0:
		if (array_res_decode(data + 1, size - 1, &res))
			return 0;
		array_res_encode(&res, back);
		if (size - 1 != ARRAY_RES_BYTES || memcmp(back, data + 1, ARRAY_RES_BYTES))
			abort();
		array_format_elem_size(res.format, res.channels);
		array_res_to_cuda(&res, 0x1234, &cuda);
		break;
	case 1:
		if (array_tex_decode(data + 1, size - 1, &tex))
			return 0;
		array_tex_encode(&tex, back);
		if (size - 1 != ARRAY_TEX_BYTES || memcmp(back, data + 1, ARRAY_TEX_BYTES))
			abort();
		break;
	default:
		if (array_view_decode(data + 1, size - 1, &view))
			return 0;
		array_view_encode(&view, back);
		if (size - 1 != ARRAY_VIEW_BYTES || memcmp(back, data + 1, ARRAY_VIEW_BYTES))
			abort();
		array_format_elem_size(view.format, 1);
		break;
	}
	return 0;
}
