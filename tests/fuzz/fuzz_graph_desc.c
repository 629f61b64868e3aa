/* Fuzz target for graph descriptions (common/graph_desc.h), which a restore
 * and `ckpt inspect` read from a snapshot's journal. A description that
 * decodes must re-encode to exactly the same bytes (one form only), copy
 * (a copy names no conditional bodies or embedded graphs: as the original
 * with their guest handles cleared), and pair with itself node for node. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph_desc.h"

/* What graph_desc_copy leaves out: the guest's handles of bodies. */
static void body_handles_clear(struct graph_desc *d)
{
	for (uint32_t i = 0; i < d->count; i++) {
		struct graph_node *n = &d->nodes[i];

		n->child_handle = 0;
		if (n->type == CU_GRAPH_NODE_TYPE_GRAPH)
			body_handles_clear(n->child);
		for (uint32_t k = 0; n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && k < n->cond.size; k++) {
			n->cond.body_handle[k] = 0;
			body_handles_clear(&n->cond.body[k]);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct graph_desc d, c;
	uint32_t *pair, bad;
	uint8_t *buf, *want;
	size_t len, want_len;

	if (graph_desc_decode(&d, data, size))
		return 0;
	if (graph_desc_encode(&d, &buf, &len) || len != size || memcmp(buf, data, size))
		abort();
	free(buf);
	body_handles_clear(&d);
	if (graph_desc_encode(&d, &want, &want_len))
		abort();
	if (graph_desc_copy(&c, &d) || graph_desc_encode(&c, &buf, &len) || len != want_len ||
	    memcmp(buf, want, want_len))
		abort();
	free(buf);
	free(want);
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
