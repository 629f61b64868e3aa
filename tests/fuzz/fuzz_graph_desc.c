/* Fuzz target for graph descriptions (common/graph_desc.h), which a restore
 * and `ckpt inspect` read from a snapshot's journal. A description that
 * decodes must re-encode to exactly the same bytes (one form only), copy,
 * and pair with itself node for node. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph_desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct graph_desc d, c;
	uint32_t *pair, bad;
	uint8_t *buf;
	size_t len;

	if (graph_desc_decode(&d, data, size))
		return 0;
	if (graph_desc_encode(&d, &buf, &len) || len != size || memcmp(buf, data, size))
		abort();
	free(buf);
	if (graph_desc_copy(&c, &d) || graph_desc_encode(&c, &buf, &len) || len != size ||
	    memcmp(buf, data, size))
		abort();
	free(buf);
	pair = malloc((d.count + 1) * sizeof(*pair));
	if (pair && graph_desc_pair(&d, &c, pair, &bad) == 0)
		for (uint32_t i = 0; i < d.count; i++)
			if (graph_desc_node_live(&d, i) && pair[i] >= d.count)
				abort();
	free(pair);
	graph_desc_release(&c);
	graph_desc_release(&d);
	return 0;
}
