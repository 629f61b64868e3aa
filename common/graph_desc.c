/* Graph descriptions: the model, its limits and its encoding
 * (docs/journal.md, "Graph descriptions"). */
#include "graph_desc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"
#include "le.h"

void graph_desc_init(struct graph_desc *d)
{
	memset(d, 0, sizeof(*d));
}

void graph_node_release(struct graph_node *n)
{
	free(n->deps);
	n->deps = NULL;
	free(n->edge);
	n->edge = NULL;
	n->ndeps = 0;
	free(n->attrs);
	n->attrs = NULL;
	n->nattrs = 0;
	if (n->type == CU_GRAPH_NODE_TYPE_KERNEL) {
		free(n->kernel.args);
		n->kernel.args = NULL;
	} else if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child) {
		graph_desc_release(n->child);
		free(n->child);
		n->child = NULL;
	} else if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
		for (uint32_t k = 0; n->cond.body && k < n->cond.size; k++)
			graph_desc_release(&n->cond.body[k]);
		free(n->cond.body);
		free(n->cond.body_handle);
		free(n->cond.body_real);
		n->cond.body = NULL;
		n->cond.body_handle = NULL;
		n->cond.body_real = NULL;
	}
}

void graph_desc_release(struct graph_desc *d)
{
	for (uint32_t i = 0; i < d->count; i++)
		graph_node_release(&d->nodes[i]);
	free(d->nodes);
	free(d->handles);
	graph_desc_init(d);
}

static uint32_t node_weight(const struct graph_node *n)
{
	uint32_t w = 1;

	if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child)
		return 1 + n->child->weight;
	if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && n->cond.body)
		for (uint32_t k = 0; k < n->cond.size; k++)
			w += n->cond.body[k].weight;     /* each <= GRAPH_DESC_NODES_MAX: no overflow */
	return w;
}

int graph_cond_shape_ok(uint32_t type, uint32_t size)
{
	switch (type) {
	case CU_GRAPH_COND_TYPE_WHILE:
		return size == 1;
	case CU_GRAPH_COND_TYPE_IF:
		return size == 1 || size == 2;
	case CU_GRAPH_COND_TYPE_SWITCH:
		return size >= 1 && size <= GRAPH_DESC_COND_SIZE_MAX;
	default:
		return 0;
	}
}

int graph_node_cond_init(struct graph_node *n, uint32_t type, uint32_t size, uint32_t handle)
{
	memset(n, 0, sizeof(*n));
	if (!graph_cond_shape_ok(type, size))
		return -EINVAL;
	n->type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
	n->cond.type = type;
	n->cond.size = size;
	n->cond.handle = handle;
	n->cond.body = calloc(size, sizeof(*n->cond.body));
	n->cond.body_handle = calloc(size, sizeof(*n->cond.body_handle));
	n->cond.body_real = calloc(size, sizeof(*n->cond.body_real));
	if (!n->cond.body || !n->cond.body_handle || !n->cond.body_real) {
		graph_node_release(n);
		return -ENOMEM;
	}
	return 0;
}

int graph_desc_has_cond(const struct graph_desc *d)
{
	if (d->nhandles)
		return 1;
	for (uint32_t i = 0; i < d->count; i++)
		if (d->nodes[i].type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
			return 1;
	return 0;
}

int graph_edge_data_ok(const struct graph_edge_data *e, uint32_t from_type, uint32_t to_type)
{
	bool from_kernel = from_type == CU_GRAPH_NODE_TYPE_KERNEL;

	if (e->to_port || e->type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC ||
	    e->from_port > CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER)
		return 0;
	if (e->from_port && !from_kernel)
		return 0;
	if (e->from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC && e->type != CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
		return 0;
	if (e->type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC &&
	    (!e->from_port || !from_kernel || to_type != CU_GRAPH_NODE_TYPE_KERNEL))
		return 0;
	return 1;
}

/* Edge data a graph may hold out of a node of @from_type. Its side of the
 * node it leads to is judged as a kernel's: a capture leaves a programmatic
 * edge into a memset, say, where the driver's graph edits refuse one
 * (580.159, H100). */
static bool edge_data_held_ok(const struct graph_edge_data *e, uint32_t from_type)
{
	return graph_edge_data_ok(e, from_type, CU_GRAPH_NODE_TYPE_KERNEL);
}

/* The edge data of @n's dependencies fit the nodes of @d they come from. */
static bool node_edges_ok(const struct graph_desc *d, const struct graph_node *n)
{
	for (uint32_t j = 0; n->edge && j < n->ndeps; j++)
		if (!edge_data_held_ok(&n->edge[j], d->nodes[n->deps[j]].type))
			return false;
	return true;
}

static bool node_has_edge_data(const struct graph_node *n)
{
	for (uint32_t j = 0; n->edge && j < n->ndeps; j++)
		if (!graph_edge_data_default(&n->edge[j]))
			return true;
	return false;
}

int graph_desc_has_edge_data(const struct graph_desc *d)
{
	for (uint32_t i = 0; i < d->count; i++)
		if (node_has_edge_data(&d->nodes[i]))
			return 1;
	return 0;
}

int graph_desc_handle_add(struct graph_desc *d, uint64_t value, uint64_t real, uint32_t default_value,
			  uint32_t flags)
{
	struct graph_cond_handle *h;

	if (d->nhandles >= GRAPH_DESC_COND_HANDLES_MAX)
		return -E2BIG;
	for (uint32_t i = 0; i < d->nhandles; i++)
		if (d->handles[i].value == value)
			return -EEXIST;
	h = realloc(d->handles, (d->nhandles + 1) * sizeof(*h));
	if (!h)
		return -ENOMEM;
	d->handles = h;
	h[d->nhandles++] = (struct graph_cond_handle){ value, real, default_value, flags };
	return 0;
}

int graph_kattr_id_ok(uint32_t id)
{
	switch (id) {
	case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
	case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
	case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
	case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
	case CU_LAUNCH_ATTRIBUTE_PRIORITY:
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
	case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
	case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
	case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
		return 1;
	default:
		return 0;
	}
}

int graph_node_kattr_set(struct graph_node *n, uint32_t id, const void *value)
{
	uint32_t i = 0;
	struct graph_kattr *a;

	if (n->type != CU_GRAPH_NODE_TYPE_KERNEL || !graph_kattr_id_ok(id))
		return -EINVAL;
	while (i < n->nattrs && n->attrs[i].id < id)
		i++;
	if (i == n->nattrs || n->attrs[i].id != id) {
		if (n->nattrs >= GRAPH_DESC_KATTRS_MAX)
			return -EINVAL;
		a = realloc(n->attrs, (n->nattrs + 1) * sizeof(*a));
		if (!a)
			return -ENOMEM;
		n->attrs = a;
		memmove(&a[i + 1], &a[i], (n->nattrs - i) * sizeof(*a));
		n->nattrs++;
		a[i].id = id;
	}
	memcpy(n->attrs[i].value, value, sizeof(n->attrs[i].value));
	return 0;
}

int graph_node_kattrs_copy(struct graph_node *dst, const struct graph_node *src)
{
	struct graph_kattr *a = NULL;

	if (src->nattrs) {
		a = malloc(src->nattrs * sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(a, src->attrs, src->nattrs * sizeof(*a));
	}
	free(dst->attrs);
	dst->attrs = a;
	dst->nattrs = src->nattrs;
	return 0;
}

static int node_copy(struct graph_node *dst, const struct graph_node *src)
{
	*dst = *src;
	dst->real = NULL;
	dst->child_handle = 0;
	dst->deps = NULL;
	dst->edge = NULL;
	dst->attrs = NULL;
	dst->nattrs = 0;
	if (graph_node_kattrs_copy(dst, src))
		goto out_nomem;
	if (src->ndeps) {
		dst->deps = malloc(src->ndeps * sizeof(uint32_t));
		if (!dst->deps)
			goto out_nomem;
		memcpy(dst->deps, src->deps, src->ndeps * sizeof(uint32_t));
	}
	if (src->ndeps && src->edge) {
		dst->edge = malloc(src->ndeps * sizeof(*dst->edge));
		if (!dst->edge)
			goto out_nomem;
		memcpy(dst->edge, src->edge, src->ndeps * sizeof(*dst->edge));
	}
	if (src->type == CU_GRAPH_NODE_TYPE_KERNEL) {
		dst->kernel.args = NULL;
		if (src->kernel.args_len) {
			dst->kernel.args = malloc(src->kernel.args_len);
			if (!dst->kernel.args)
				goto out_nomem;
			memcpy(dst->kernel.args, src->kernel.args, src->kernel.args_len);
		}
	} else if (src->type == CU_GRAPH_NODE_TYPE_GRAPH) {
		dst->child = calloc(1, sizeof(*dst->child));
		if (!dst->child || graph_desc_copy(dst->child, src->child))
			goto out_nomem;
	} else if (src->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
		uint32_t size = src->cond.size;

		dst->cond.body = calloc(size, sizeof(*dst->cond.body));
		dst->cond.body_handle = calloc(size, sizeof(*dst->cond.body_handle));
		dst->cond.body_real = calloc(size, sizeof(*dst->cond.body_real));
		if (!dst->cond.body || !dst->cond.body_handle || !dst->cond.body_real)
			goto out_nomem;
		for (uint32_t k = 0; k < size; k++)
			if (graph_desc_copy(&dst->cond.body[k], &src->cond.body[k]))
				goto out_nomem;
	}
	return 0;
out_nomem:
	graph_node_release(dst);
	return -ENOMEM;
}

int graph_desc_copy(struct graph_desc *dst, const struct graph_desc *src)
{
	graph_desc_init(dst);
	dst->nodes = calloc(src->count ? src->count : 1, sizeof(*dst->nodes));
	if (!dst->nodes)
		return -ENOMEM;
	dst->cap = src->count;
	if (src->nhandles) {
		dst->handles = malloc(src->nhandles * sizeof(*dst->handles));
		if (!dst->handles) {
			graph_desc_release(dst);
			return -ENOMEM;
		}
		memcpy(dst->handles, src->handles, src->nhandles * sizeof(*dst->handles));
		dst->nhandles = src->nhandles;
	}
	for (uint32_t i = 0; i < src->count; i++) {
		if (node_copy(&dst->nodes[i], &src->nodes[i])) {
			graph_desc_release(dst);
			return -ENOMEM;
		}
		dst->count++;
	}
	dst->weight = src->weight;
	dst->edges = src->edges;
	return 0;
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int graph_deps_unique(const uint32_t *v, uint32_t n)
{
	uint32_t *s;
	int ret = 1;

	/* Sorted, not pairwise: a hostile node may have 2^16 dependencies. */
	if (n < 16) {
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t j = 0; j < i; j++)
				if (v[i] == v[j])
					return 0;
		return 1;
	}
	s = malloc(n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), u32_cmp);
	for (uint32_t i = 1; i < n && ret == 1; i++)
		if (s[i] == s[i - 1])
			ret = 0;
	free(s);
	return ret;
}

int graph_desc_append(struct graph_desc *d, struct graph_node *node)
{
	uint32_t w = node_weight(node);
	int unique;

	if (node->ndeps > GRAPH_DESC_DEPS_MAX || d->edges + node->ndeps > GRAPH_DESC_EDGES_MAX ||
	    w > GRAPH_DESC_NODES_MAX - d->weight)
		return -E2BIG;
	for (uint32_t i = 0; i < node->ndeps; i++)
		if (!graph_desc_node_live(d, node->deps[i]))
			return -EINVAL;
	if (!node_edges_ok(d, node))
		return -EINVAL;
	if (node->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && node->cond.handle >= d->nhandles)
		return -EINVAL;
	unique = graph_deps_unique(node->deps, node->ndeps);
	if (unique <= 0)
		return unique < 0 ? unique : -EINVAL;
	if (d->count == d->cap) {
		uint32_t cap = d->cap ? d->cap * 2 : 16;
		struct graph_node *n = realloc(d->nodes, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		d->nodes = n;
		d->cap = cap;
	}
	d->nodes[d->count++] = *node;
	d->weight += w;
	d->edges += node->ndeps;
	return 0;
}

/* An edge's data in one u32, as the encoding holds it. */
static uint32_t edge_pack(struct graph_edge_data e)
{
	return (uint32_t)e.from_port | (uint32_t)e.to_port << 8 | (uint32_t)e.type << 16;
}

/* A dependency as a sort key (to << 32 | from, or a node's own dependency
 * index alone) with its packed edge data. */
struct edge_key {
	uint64_t key;
	uint32_t data;
};

static int edge_key_cmp(const void *a, const void *b)
{
	return u64_cmp(&((const struct edge_key *)a)->key, &((const struct edge_key *)b)->key);
}

/* The pairs as sorted (to << 32 | from) keys; NULL when out of memory. */
static struct edge_key *edge_keys(const uint32_t *from, const uint32_t *to, const struct graph_edge_data *edge,
				  uint32_t n)
{
	struct edge_key *keys = malloc((n ? n : 1) * sizeof(*keys));

	if (!keys)
		return NULL;
	for (uint32_t k = 0; k < n; k++)
		keys[k] = (struct edge_key){ (uint64_t)to[k] << 32 | from[k], edge ? edge_pack(edge[k]) : 0 };
	qsort(keys, n, sizeof(*keys), edge_key_cmp);
	return keys;
}

int graph_desc_edges_check(const struct graph_desc *d, const uint32_t *from, const uint32_t *to,
			   const struct graph_edge_data *edge, uint32_t n, int remove)
{
	struct edge_key *keys, *sorted = NULL;
	int ret = 0;

	if (n > GRAPH_DESC_EDGES_MAX || (!remove && d->edges + n > GRAPH_DESC_EDGES_MAX))
		return -E2BIG;
	for (uint32_t k = 0; k < n; k++) {
		if (!graph_desc_node_live(d, from[k]) || !graph_desc_node_live(d, to[k]) || from[k] == to[k])
			return -EINVAL;
		if (!remove && edge && !graph_edge_data_ok(&edge[k], d->nodes[from[k]].type, d->nodes[to[k]].type))
			return -EINVAL;
	}
	keys = edge_keys(from, to, edge, n);
	if (!keys)
		return -ENOMEM;
	for (uint32_t k = 1; k < n && !ret; k++)
		if (keys[k].key == keys[k - 1].key)
			ret = -EINVAL;
	/* By target: each pair absent (adding) or present with its data (removing). */
	for (uint32_t i = 0, j; i < n && !ret; i = j) {
		const struct graph_node *t = &d->nodes[keys[i].key >> 32];

		for (j = i; j < n && keys[j].key >> 32 == keys[i].key >> 32; j++)
			;
		if (!remove && t->ndeps + (j - i) > GRAPH_DESC_DEPS_MAX) {
			ret = -E2BIG;
			break;
		}
		free(sorted);
		sorted = malloc((t->ndeps ? t->ndeps : 1) * sizeof(*sorted));
		if (!sorted) {
			ret = -ENOMEM;
			break;
		}
		for (uint32_t m = 0; m < t->ndeps; m++)
			sorted[m] = (struct edge_key){ t->deps[m], edge_pack(graph_node_dep_edge(t, m)) };
		qsort(sorted, t->ndeps, sizeof(*sorted), edge_key_cmp);
		for (uint32_t m = i; m < j && !ret; m++) {
			struct edge_key f = { (uint32_t)keys[m].key, 0 };
			const struct edge_key *hit = bsearch(&f, sorted, t->ndeps, sizeof(*sorted), edge_key_cmp);

			/* Default data removes an edge whatever its data, as the
			 * H100's driver (580.159) does, though cuda.h asks for a match. */
			if ((hit != NULL) != (remove != 0) || (hit && keys[m].data && hit->data != keys[m].data))
				ret = -EINVAL;
		}
	}
	free(sorted);
	free(keys);
	return ret;
}

/* Room for @more dependencies of @t, edge data too where @t has some or
 * @data says a new one is not default; the count stays. 0 or -ENOMEM. */
static int deps_reserve(struct graph_node *t, uint32_t more, bool data)
{
	uint32_t *deps = realloc(t->deps, (t->ndeps + more) * sizeof(uint32_t));

	if (!deps)
		return -ENOMEM;
	t->deps = deps;
	if (data || t->edge) {
		struct graph_edge_data *e = realloc(t->edge, (t->ndeps + more) * sizeof(*e));

		if (!e)
			return -ENOMEM;
		if (!t->edge)
			memset(e, 0, t->ndeps * sizeof(*e));
		t->edge = e;
	}
	return 0;
}

int graph_desc_edges_apply(struct graph_desc *d, const uint32_t *from, const uint32_t *to,
			   const struct graph_edge_data *edge, uint32_t n, int remove)
{
	struct edge_key *keys = edge_keys(from, to, edge, n);

	if (!keys)
		return -ENOMEM;
	for (uint32_t i = 0, j; i < n; i = j) {
		struct graph_node *t = &d->nodes[keys[i].key >> 32];
		bool data = false;

		for (j = i; j < n && keys[j].key >> 32 == keys[i].key >> 32; j++)
			data |= keys[j].data != 0;
		if (remove) {
			uint32_t kept = 0;

			for (uint32_t m = 0; m < t->ndeps; m++) {
				struct edge_key key = { (keys[i].key >> 32) << 32 | t->deps[m], 0 };

				if (bsearch(&key, keys + i, j - i, sizeof(*keys), edge_key_cmp))
					continue;
				if (t->edge)
					t->edge[kept] = t->edge[m];
				t->deps[kept++] = t->deps[m];
			}
			t->ndeps = kept;
		} else if (deps_reserve(t, j - i, data)) {
			/* Room first, for every target: nothing changes unless all fit. */
			free(keys);
			return -ENOMEM;
		}
	}
	free(keys);
	/* New dependencies go last, in the order given, as the driver adds them. */
	for (uint32_t k = 0; !remove && k < n; k++) {
		struct graph_node *t = &d->nodes[to[k]];

		if (t->edge)
			t->edge[t->ndeps] = edge ? edge[k] : (struct graph_edge_data){ 0 };
		t->deps[t->ndeps++] = from[k];
	}
	d->edges = remove ? d->edges - n : d->edges + n;
	return 0;
}

int graph_desc_deps_reset(struct graph_desc *d, const uint32_t *from, const uint32_t *to,
			  const struct graph_edge_data *edge, size_t n)
{
	uint32_t *count;
	uint32_t **deps;
	struct graph_edge_data **data;
	bool *has_data;
	int ret = 0;

	if (n > GRAPH_DESC_EDGES_MAX)
		return -E2BIG;
	for (size_t k = 0; k < n; k++) {
		if (!graph_desc_node_live(d, from[k]) || !graph_desc_node_live(d, to[k]) || from[k] == to[k])
			return -EINVAL;
		if (edge && !edge_data_held_ok(&edge[k], d->nodes[from[k]].type))
			return -EINVAL;
	}
	count = calloc(d->count + 1, sizeof(*count));
	deps = calloc(d->count + 1, sizeof(*deps));
	data = calloc(d->count + 1, sizeof(*data));
	has_data = calloc(d->count + 1, sizeof(*has_data));
	if (!count || !deps || !data || !has_data) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t k = 0; k < n; k++) {
		count[to[k]]++;
		if (edge && !graph_edge_data_default(&edge[k]))
			has_data[to[k]] = true;
	}
	for (uint32_t i = 0; i < d->count && !ret; i++) {
		if (count[i] > GRAPH_DESC_DEPS_MAX)
			ret = -E2BIG;
		else if (count[i] && !(deps[i] = malloc(count[i] * sizeof(uint32_t))))
			ret = -ENOMEM;
		else if (has_data[i] && !(data[i] = malloc(count[i] * sizeof(**data))))
			ret = -ENOMEM;
		count[i] = 0;
	}
	for (size_t k = 0; k < n && !ret; k++) {
		if (data[to[k]])
			data[to[k]][count[to[k]]] = edge[k];
		deps[to[k]][count[to[k]]++] = from[k];
	}
	for (uint32_t i = 0; i < d->count && !ret; i++) {
		int unique = graph_deps_unique(deps[i], count[i]);

		if (unique <= 0)
			ret = unique < 0 ? unique : -EINVAL;
	}
	if (!ret) {
		for (uint32_t i = 0; i < d->count; i++) {
			free(d->nodes[i].deps);
			free(d->nodes[i].edge);
			d->nodes[i].deps = deps[i];
			d->nodes[i].edge = data[i];
			d->nodes[i].ndeps = count[i];
			deps[i] = NULL;
			data[i] = NULL;
		}
		d->edges = (uint32_t)n;
	}
out:
	for (uint32_t i = 0; deps && data && i < d->count; i++) {
		free(deps[i]);
		free(data[i]);
	}
	free(deps);
	free(data);
	free(has_data);
	free(count);
	return ret;
}

/* Remove the dependency @from of @to, if there is one. */
static void edge_remove(struct graph_desc *d, uint32_t from, uint32_t to)
{
	struct graph_node *n = &d->nodes[to];

	for (uint32_t i = 0; i < n->ndeps; i++)
		if (n->deps[i] == from) {
			memmove(n->deps + i, n->deps + i + 1, (n->ndeps - i - 1) * sizeof(uint32_t));
			if (n->edge)
				memmove(n->edge + i, n->edge + i + 1, (n->ndeps - i - 1) * sizeof(*n->edge));
			n->ndeps--;
			d->edges--;
			return;
		}
}

int graph_desc_node_remove(struct graph_desc *d, uint32_t i)
{
	if (!graph_desc_node_live(d, i))
		return -EINVAL;
	for (uint32_t j = 0; j < d->count; j++)
		if (d->nodes[j].type != GRAPH_NODE_REMOVED)
			edge_remove(d, i, j);
	d->edges -= d->nodes[i].ndeps;
	d->weight -= node_weight(&d->nodes[i]) - 1;
	graph_node_release(&d->nodes[i]);
	memset(&d->nodes[i], 0, sizeof(d->nodes[i]));
	d->nodes[i].type = GRAPH_NODE_REMOVED;
	return 0;
}

int graph_desc_node_params_set(struct graph_desc *d, uint32_t i, const struct graph_node *src)
{
	struct graph_node *n, tmp, from;
	uint32_t old_w, new_w;

	if (!graph_desc_node_live(d, i) || d->nodes[i].type != src->type)
		return -EINVAL;
	n = &d->nodes[i];
	old_w = node_weight(n);
	new_w = node_weight(src);
	if (new_w > old_w && new_w - old_w > GRAPH_DESC_NODES_MAX - d->weight)
		return -E2BIG;
	from = *src;            /* its parameters, not its dependencies */
	from.ndeps = 0;
	from.deps = NULL;
	from.edge = NULL;
	if (node_copy(&tmp, &from))
		return -ENOMEM;
	tmp.deps = n->deps;
	tmp.edge = n->edge;
	tmp.ndeps = n->ndeps;
	tmp.real = n->real;
	tmp.disabled = n->disabled;
	n->deps = NULL;
	n->edge = NULL;
	n->ndeps = 0;
	graph_node_release(n);
	*n = tmp;
	d->weight = d->weight - old_w + new_w;
	return 0;
}

static bool *dependents_mark(const struct graph_desc *d)
{
	bool *has = calloc(d->count + 1, sizeof(bool));

	if (!has)
		return NULL;
	for (uint32_t i = 0; i < d->count; i++)
		for (uint32_t j = 0; j < d->nodes[i].ndeps; j++)
			has[d->nodes[i].deps[j]] = true;
	return has;
}

int graph_desc_pair(const struct graph_desc *a, const struct graph_desc *b, uint32_t *pair, uint32_t *bad)
{
	bool *ha = dependents_mark(a), *hb = dependents_mark(b);
	uint32_t *rev = malloc((b->count + 1) * sizeof(uint32_t));
	uint32_t *queue = malloc((a->count + 1) * sizeof(uint32_t));
	uint32_t live_a = 0, live_b = 0, head = 0, tail = 0, ib = 0;
	int ret = -ENOENT;

	*bad = GRAPH_NODE_NONE;
	if (!ha || !hb || !rev || !queue) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < a->count; i++) {
		pair[i] = GRAPH_NODE_NONE;
		live_a += graph_desc_node_live(a, i);
	}
	for (uint32_t i = 0; i < b->count; i++) {
		rev[i] = GRAPH_NODE_NONE;
		live_b += graph_desc_node_live(b, i);
	}
	if (live_a != live_b)
		goto out;
	/* Exit nodes, in order. */
	for (uint32_t i = 0; i < a->count; i++) {
		if (!graph_desc_node_live(a, i) || ha[i])
			continue;
		while (ib < b->count && (!graph_desc_node_live(b, ib) || hb[ib]))
			ib++;
		if (ib == b->count)
			goto out;
		pair[i] = ib;
		rev[ib] = i;
		queue[tail++] = i;
		ib++;
	}
	while (ib < b->count && (!graph_desc_node_live(b, ib) || hb[ib]))
		ib++;
	if (ib < b->count) {
		*bad = ib;      /* more exit nodes than the executable has */
		goto out;
	}
	while (head < tail) {
		const struct graph_node *x = &a->nodes[queue[head]], *y = &b->nodes[pair[queue[head]]];
		uint32_t at = pair[queue[head++]];

		if (x->type != y->type || x->ndeps != y->ndeps) {
			*bad = at;
			goto out;
		}
		for (uint32_t k = 0; k < x->ndeps; k++) {
			uint32_t p = x->deps[k], q = y->deps[k];

			if (pair[p] == GRAPH_NODE_NONE && rev[q] == GRAPH_NODE_NONE) {
				pair[p] = q;
				rev[q] = p;
				queue[tail++] = p;
			} else if (pair[p] != q) {
				*bad = at;
				goto out;
			}
		}
	}
	ret = head == live_a ? 0 : -ENOENT;
out:
	free(ha);
	free(hb);
	free(rev);
	free(queue);
	return ret;
}

/* ---- encoding ---------------------------------------------------------- */

struct out {
	uint8_t *buf;
	size_t len, cap;
	int failed;
};

static void out_bytes(struct out *o, const void *p, size_t n)
{
	if (o->failed)
		return;
	if (o->len + n > o->cap) {
		size_t cap = o->cap ? o->cap : 256;
		uint8_t *b;

		while (cap < o->len + n)
			cap *= 2;
		b = realloc(o->buf, cap);
		if (!b) {
			o->failed = 1;
			return;
		}
		o->buf = b;
		o->cap = cap;
	}
	if (n)
		memcpy(o->buf + o->len, p, n);
	o->len += n;
}

static void out_u32(struct out *o, uint32_t v)
{
	uint8_t b[4];

	le32_put(b, v);
	out_bytes(o, b, 4);
}

static void out_u64(struct out *o, uint64_t v)
{
	out_u32(o, (uint32_t)v);
	out_u32(o, (uint32_t)(v >> 32));
}

static uint32_t node_flags(const struct graph_node *n)
{
	return (n->disabled ? 1u : 0u) | (n->nattrs ? 2u : 0u) |
	       (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child_handle ? 4u : 0u) |
	       (n->type == CU_GRAPH_NODE_TYPE_MEMCPY && n->copy.host_end ? 8u : 0u) |
	       (node_has_edge_data(n) ? 16u : 0u);
}

static bool desc_has_flags(const struct graph_desc *d)
{
	for (uint32_t i = 0; i < d->count; i++)
		if (node_flags(&d->nodes[i]))
			return true;
	return false;
}

static void desc_encode(const struct graph_desc *d, struct out *o);

/* A description inside another (child graph, conditional body): its
 * length, then itself. */
static void nested_encode(const struct graph_desc *d, struct out *o)
{
	size_t at = o->len;

	out_u32(o, 0);          /* length, filled in below */
	desc_encode(d, o);
	if (!o->failed) {
		uint32_t len = (uint32_t)(o->len - at - 4);

		for (int k = 0; k < 4; k++)
			o->buf[at + (size_t)k] = (uint8_t)(len >> (8 * k));
	}
}

static void desc_encode(const struct graph_desc *d, struct out *o)
{
	bool edge = graph_desc_has_edge_data(d);
	bool cond = edge || graph_desc_has_cond(d);
	bool flags = cond || desc_has_flags(d);

	out_u32(o, GRAPH_DESC_MAGIC);
	out_u32(o, edge ? 4u : cond ? 3u : flags ? 2u : 1u);    /* u16 version, u16 reserved */
	out_u32(o, d->count);
	out_u32(o, 0);
	if (cond) {
		out_u32(o, d->nhandles);
		for (uint32_t k = 0; k < d->nhandles; k++) {
			out_u64(o, d->handles[k].value);
			out_u32(o, d->handles[k].default_value);
			out_u32(o, d->handles[k].flags);
		}
	}
	for (uint32_t i = 0; i < d->count; i++) {
		const struct graph_node *n = &d->nodes[i];

		out_u32(o, n->type);
		if (flags)
			out_u32(o, node_flags(n));
		out_u32(o, n->ndeps);
		for (uint32_t j = 0; j < n->ndeps; j++)
			out_u32(o, n->deps[j]);
		for (uint32_t j = 0; node_has_edge_data(n) && j < n->ndeps; j++)
			out_u32(o, edge_pack(n->edge[j]));
		switch (n->type) {
		case CU_GRAPH_NODE_TYPE_KERNEL:
			out_u64(o, n->kernel.function);
			for (int k = 0; k < 3; k++)
				out_u32(o, n->kernel.grid[k]);
			for (int k = 0; k < 3; k++)
				out_u32(o, n->kernel.block[k]);
			out_u32(o, n->kernel.shared_bytes);
			out_u32(o, n->kernel.args_len);
			out_bytes(o, n->kernel.args, n->kernel.args_len);
			if (n->nattrs) {
				out_u32(o, n->nattrs);
				for (uint32_t k = 0; k < n->nattrs; k++) {
					out_u32(o, n->attrs[k].id);
					out_bytes(o, n->attrs[k].value, sizeof(n->attrs[k].value));
				}
			}
			break;
		case CU_GRAPH_NODE_TYPE_MEMCPY:
			out_u64(o, n->copy.dst);
			out_u64(o, n->copy.dst_pitch);
			out_u64(o, n->copy.dst_height);
			out_u64(o, n->copy.src);
			out_u64(o, n->copy.src_pitch);
			out_u64(o, n->copy.src_height);
			out_u64(o, n->copy.width);
			out_u64(o, n->copy.height);
			out_u64(o, n->copy.depth);
			if (n->copy.host_end)
				out_u32(o, n->copy.host_end);
			break;
		case CU_GRAPH_NODE_TYPE_MEMSET:
			out_u64(o, n->set.dst);
			out_u64(o, n->set.pitch);
			out_u64(o, n->set.width);
			out_u64(o, n->set.height);
			out_u32(o, n->set.value);
			out_u32(o, n->set.element_size);
			break;
		case CU_GRAPH_NODE_TYPE_GRAPH:
			nested_encode(n->child, o);
			if (n->child_handle)
				out_u64(o, n->child_handle);
			break;
		case CU_GRAPH_NODE_TYPE_CONDITIONAL:
			out_u32(o, n->cond.type);
			out_u32(o, n->cond.size);
			out_u32(o, n->cond.handle);
			for (uint32_t k = 0; k < n->cond.size; k++) {
				out_u64(o, n->cond.body_handle[k]);
				nested_encode(&n->cond.body[k], o);
			}
			break;
		case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
			out_u64(o, n->event);
			break;
		case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
			out_u64(o, n->mem.address);
			out_u64(o, n->mem.bytes);
			break;
		case CU_GRAPH_NODE_TYPE_MEM_FREE:
			out_u64(o, n->mem.address);
			break;
		case CU_GRAPH_NODE_TYPE_HOST:
			out_u64(o, n->host);
			break;
		default:                /* empty, removed */
			break;
		}
	}
}

int graph_desc_encode(const struct graph_desc *d, uint8_t **buf, size_t *len)
{
	struct out o = { 0 };

	desc_encode(d, &o);
	if (o.failed) {
		free(o.buf);
		return -ENOMEM;
	}
	*buf = o.buf;
	*len = o.len;
	return 0;
}

/* ---- decoding ---------------------------------------------------------- */

/* A kernel node's attributes: 1 to GRAPH_DESC_KATTRS_MAX, ids known and
 * increasing (one form only). */
static int kattrs_decode(struct wire_cursor *c, struct graph_node *n)
{
	uint32_t count, id;

	if (wire_get_u32(c, &count) || !count || count > GRAPH_DESC_KATTRS_MAX)
		return -EBADMSG;
	for (uint32_t k = 0; k < count; k++) {
		if (wire_get_u32(c, &id) || c->left < sizeof(n->attrs[0].value) ||
		    (n->nattrs && id <= n->attrs[n->nattrs - 1].id) || !graph_kattr_id_ok(id))
			return -EBADMSG;
		if (graph_node_kattr_set(n, id, c->p))
			return -ENOMEM;
		c->p += sizeof(n->attrs[0].value);
		c->left -= sizeof(n->attrs[0].value);
	}
	return 0;
}

static int desc_decode(struct graph_desc *d, struct wire_cursor *c, unsigned depth, uint32_t *budget);

/* The edge data of @n's dependencies (flag bit 4): one packed u32 each,
 * the top byte zero, not all default (one form only). Whether each fits
 * the nodes it joins is checked once all nodes are read. */
static int edges_decode(struct wire_cursor *c, struct graph_node *n)
{
	if (!n->ndeps || n->ndeps > c->left / 4)
		return -EBADMSG;
	n->edge = malloc(n->ndeps * sizeof(*n->edge));
	if (!n->edge)
		return -ENOMEM;
	for (uint32_t j = 0; j < n->ndeps; j++) {
		uint32_t v;

		if (wire_get_u32(c, &v) || v >> 24)
			return -EBADMSG;
		n->edge[j] = (struct graph_edge_data){ (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16) };
	}
	return node_has_edge_data(n) ? 0 : -EBADMSG;
}

/* A description inside another, into an empty @d: its length, then
 * itself, at @depth (the nesting of @d). The node that holds it is
 * counted against @budget before its contents. */
static int nested_decode(struct graph_desc *d, struct wire_cursor *c, unsigned depth, uint32_t *budget)
{
	struct wire_cursor sub;
	uint32_t len;
	int ret;

	if (depth >= GRAPH_DESC_DEPTH_MAX || wire_get_u32(c, &len) || len > c->left || !*budget)
		return -EBADMSG;
	wire_cursor_init(&sub, c->p, len);
	c->p += len;
	c->left -= len;
	(*budget)--;            /* the node, before what it holds */
	ret = desc_decode(d, &sub, depth, budget);
	(*budget)++;
	if (!ret && wire_cursor_end(&sub))
		ret = -EBADMSG;
	return ret;
}

/* The handles of a version 3 description: values distinct, flags known. */
static int handles_decode(struct graph_desc *d, struct wire_cursor *c)
{
	uint32_t count;

	if (wire_get_u32(c, &count) || count > GRAPH_DESC_COND_HANDLES_MAX || count > c->left / 16)
		return -EBADMSG;
	for (uint32_t k = 0; k < count; k++) {
		uint64_t value;
		uint32_t def, flags;
		int ret;

		if (wire_get_u64(c, &value) || wire_get_u32(c, &def) || wire_get_u32(c, &flags) ||
		    flags & ~(uint32_t)CU_GRAPH_COND_ASSIGN_DEFAULT)
			return -EBADMSG;
		ret = graph_desc_handle_add(d, value, value, def, flags);
		if (ret)
			return ret == -ENOMEM ? ret : -EBADMSG;
	}
	return 0;
}

/* @budget: nodes the whole description may still hold (children included). */
static int desc_decode(struct graph_desc *d, struct wire_cursor *c, unsigned depth, uint32_t *budget)
{
	uint32_t magic, version, count, reserved;
	int ret;

	if (wire_get_u32(c, &magic) || wire_get_u32(c, &version) || wire_get_u32(c, &count) ||
	    wire_get_u32(c, &reserved))
		return -EBADMSG;
	if (magic != GRAPH_DESC_MAGIC || reserved || version >> 16)
		return -EBADMSG;
	if (version < 1 || version > GRAPH_DESC_VERSION)
		return -EPROTONOSUPPORT;
	if (count > *budget)
		return -EBADMSG;
	if (version >= 3) {
		ret = handles_decode(d, c);
		if (ret)
			return ret;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct graph_node n = { 0 };
		uint32_t ndeps, flags = 0;

		if (wire_get_u32(c, &n.type))
			return -EBADMSG;
		if (version >= 2 && (wire_get_u32(c, &flags) || flags > 31 || ((flags & 16) && version < 4) ||
				     ((flags & 8) && n.type != CU_GRAPH_NODE_TYPE_MEMCPY) ||
				     ((flags & 2) && n.type != CU_GRAPH_NODE_TYPE_KERNEL) ||
				     ((flags & 4) && n.type != CU_GRAPH_NODE_TYPE_GRAPH)))
			return -EBADMSG;
		n.disabled = flags & 1;
		if (wire_get_u32(c, &ndeps))
			return -EBADMSG;
		/* Dependencies may name later nodes (edges added afterwards):
		 * check them against the count, and append them once all are read. */
		if (ndeps > GRAPH_DESC_DEPS_MAX || ndeps > c->left / 4)
			return -EBADMSG;
		if (ndeps) {
			n.deps = malloc(ndeps * sizeof(uint32_t));
			if (!n.deps)
				return -ENOMEM;
		}
		for (uint32_t j = 0; j < ndeps; j++)
			if (wire_get_u32(c, &n.deps[j]) || n.deps[j] >= count || n.deps[j] == i) {
				free(n.deps);
				return -EBADMSG;
			}
		ret = graph_deps_unique(n.deps, ndeps);
		if (ret <= 0) {
			free(n.deps);
			return ret < 0 ? ret : -EBADMSG;
		}
		n.ndeps = ndeps;
		ret = (flags & 16) ? edges_decode(c, &n) : 0;
		if (ret) {
			graph_node_release(&n);
			return ret;
		}
		switch (n.type) {
		case CU_GRAPH_NODE_TYPE_KERNEL:
			if (wire_get_u64(c, &n.kernel.function))
				ret = -EBADMSG;
			for (int k = 0; k < 3 && !ret; k++)
				if (wire_get_u32(c, &n.kernel.grid[k]))
					ret = -EBADMSG;
			for (int k = 0; k < 3 && !ret; k++)
				if (wire_get_u32(c, &n.kernel.block[k]))
					ret = -EBADMSG;
			if (!ret && (wire_get_u32(c, &n.kernel.shared_bytes) ||
				     wire_get_u32(c, &n.kernel.args_len) ||
				     n.kernel.args_len > GRAPH_DESC_ARGS_MAX || n.kernel.args_len > c->left))
				ret = -EBADMSG;
			if (!ret && n.kernel.args_len) {
				n.kernel.args = malloc(n.kernel.args_len);
				if (!n.kernel.args) {
					ret = -ENOMEM;
				} else {
					memcpy(n.kernel.args, c->p, n.kernel.args_len);
					c->p += n.kernel.args_len;
					c->left -= n.kernel.args_len;
				}
			}
			if (!ret && (flags & 2))
				ret = kattrs_decode(c, &n);
			break;
		case CU_GRAPH_NODE_TYPE_MEMCPY:
			if (wire_get_u64(c, &n.copy.dst) || wire_get_u64(c, &n.copy.dst_pitch) ||
			    wire_get_u64(c, &n.copy.dst_height) || wire_get_u64(c, &n.copy.src) ||
			    wire_get_u64(c, &n.copy.src_pitch) || wire_get_u64(c, &n.copy.src_height) ||
			    wire_get_u64(c, &n.copy.width) || wire_get_u64(c, &n.copy.height) ||
			    wire_get_u64(c, &n.copy.depth))
				ret = -EBADMSG;
			/* One form only: a host copy names its one host end. */
			if (!ret && (flags & 8) &&
			    (wire_get_u32(c, &n.copy.host_end) ||
			     (n.copy.host_end != GRAPH_COPY_HOST_SRC && n.copy.host_end != GRAPH_COPY_HOST_DST)))
				ret = -EBADMSG;
			break;
		case CU_GRAPH_NODE_TYPE_MEMSET:
			if (wire_get_u64(c, &n.set.dst) || wire_get_u64(c, &n.set.pitch) ||
			    wire_get_u64(c, &n.set.width) || wire_get_u64(c, &n.set.height) ||
			    wire_get_u32(c, &n.set.value) || wire_get_u32(c, &n.set.element_size))
				ret = -EBADMSG;
			break;
		case CU_GRAPH_NODE_TYPE_GRAPH:
			n.child = calloc(1, sizeof(*n.child));
			ret = n.child ? nested_decode(n.child, c, depth + 1, budget) : -ENOMEM;
			if (!ret && (flags & 4) && (wire_get_u64(c, &n.child_handle) || !n.child_handle))
				ret = -EBADMSG;
			break;
		case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
			uint32_t type, size, handle;

			if (version < 3 || wire_get_u32(c, &type) || wire_get_u32(c, &size) ||
			    wire_get_u32(c, &handle) || !graph_cond_shape_ok(type, size) || handle >= d->nhandles ||
			    size > c->left / 12) {
				ret = -EBADMSG;
				break;
			}
			{
				struct graph_node keep = n;     /* its dependencies and flags */

				ret = graph_node_cond_init(&n, type, size, handle);
				n.deps = keep.deps;
				n.edge = keep.edge;
				n.ndeps = keep.ndeps;
				n.disabled = keep.disabled;
			}
			if (ret) {
				n.type = CU_GRAPH_NODE_TYPE_EMPTY;      /* only its dependencies to release */
				break;
			}
			for (uint32_t k = 0; k < size && !ret; k++) {
				if (wire_get_u64(c, &n.cond.body_handle[k]))
					ret = -EBADMSG;
				else
					ret = nested_decode(&n.cond.body[k], c, depth + 1, budget);
			}
			break;
		}
		case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
			if (wire_get_u64(c, &n.event))
				ret = -EBADMSG;
			break;
		case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
			if (wire_get_u64(c, &n.mem.address) || wire_get_u64(c, &n.mem.bytes))
				ret = -EBADMSG;
			break;
		case CU_GRAPH_NODE_TYPE_MEM_FREE:
			if (wire_get_u64(c, &n.mem.address))
				ret = -EBADMSG;
			break;
		case CU_GRAPH_NODE_TYPE_HOST:
			if (wire_get_u64(c, &n.host))
				ret = -EBADMSG;
			break;
		case CU_GRAPH_NODE_TYPE_EMPTY:
			break;
		case GRAPH_NODE_REMOVED:
			if (ndeps)
				ret = -EBADMSG;
			break;
		default:
			ret = -EBADMSG;
			break;
		}
		if (!ret) {
			/* Dependencies on later nodes are legal here: append without
			 * the existence check, then account as graph_desc_append does. */
			uint32_t w = node_weight(&n);

			if (w > *budget || d->edges + ndeps > GRAPH_DESC_EDGES_MAX) {
				ret = -EBADMSG;
			} else if (d->count == d->cap) {
				uint32_t cap = d->cap ? d->cap * 2 : 16;
				struct graph_node *nodes = realloc(d->nodes, cap * sizeof(*nodes));

				if (!nodes) {
					ret = -ENOMEM;
				} else {
					d->nodes = nodes;
					d->cap = cap;
				}
			}
			if (!ret) {
				d->nodes[d->count++] = n;
				d->weight += w;
				d->edges += ndeps;
				*budget -= w;
			}
		}
		if (ret) {
			graph_node_release(&n);
			return ret;
		}
	}
	/* A removed slot has no edges: nothing may depend on one. Edge data
	 * fits the nodes it joins, now that all are known. */
	for (uint32_t i = 0; i < d->count; i++) {
		for (uint32_t j = 0; j < d->nodes[i].ndeps; j++)
			if (d->nodes[d->nodes[i].deps[j]].type == GRAPH_NODE_REMOVED)
				return -EBADMSG;
		if (!node_edges_ok(d, &d->nodes[i]))
			return -EBADMSG;
	}
	/* One form only: version 2 when a node is disabled, and only then; a
	 * removed slot is not disabled. */
	for (uint32_t i = 0; i < d->count; i++)
		if (d->nodes[i].disabled && d->nodes[i].type == GRAPH_NODE_REMOVED)
			return -EBADMSG;
	if ((version == 4) != (graph_desc_has_edge_data(d) != 0) ||
	    (version == 3) != (version < 4 && graph_desc_has_cond(d)) ||
	    (version == 2) != (version < 3 && desc_has_flags(d)))
		return -EBADMSG;
	return 0;
}

int graph_desc_decode(struct graph_desc *d, const void *buf, size_t len)
{
	struct wire_cursor c;
	uint32_t budget = GRAPH_DESC_NODES_MAX;
	int ret;

	graph_desc_init(d);
	wire_cursor_init(&c, buf, len);
	ret = desc_decode(d, &c, 0, &budget);
	if (!ret && wire_cursor_end(&c))
		ret = -EBADMSG;
	if (ret)
		graph_desc_release(d);
	return ret;
}

const char *graph_node_type_name(uint32_t type)
{
	switch (type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: return "kernel";
	case CU_GRAPH_NODE_TYPE_MEMCPY: return "memcpy";
	case CU_GRAPH_NODE_TYPE_MEMSET: return "memset";
	case CU_GRAPH_NODE_TYPE_HOST: return "host";
	case CU_GRAPH_NODE_TYPE_GRAPH: return "graph";
	case CU_GRAPH_NODE_TYPE_EMPTY: return "empty";
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "wait_event";
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "event_record";
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "mem_alloc";
	case CU_GRAPH_NODE_TYPE_MEM_FREE: return "mem_free";
	case CU_GRAPH_NODE_TYPE_CONDITIONAL: return "conditional";
	case GRAPH_NODE_REMOVED: return "removed";
	default: return "unknown";
	}
}
