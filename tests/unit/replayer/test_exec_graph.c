/* The executor's graphs on the sim backend, handlers called as the
 * dispatcher calls them: hostile requests fail alone, the journal follows
 * the graphs (descriptions as images), a description restores a graph in
 * another session, captures end in described graphs and block snapshots. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "checkpoint.h"
#include "exec.h"
#include "graph_desc.h"
#include "tracker.h"
#include "wire_dispatch.h"

#define NONE 0xffffffffu

static const char ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry poke(.param .u64 poke_p, .param .u32 poke_n)\n{\n\tret;\n}\n";
/* The sim's CPU version of `poke` (tests/unit/sim/kernels_test.c), a
 * plugin named by the first argument. */
static const char *plugin_path;

struct fixture {
	struct backend *be;
	struct exec ex;
	char dir[64];
	uint64_t mem, stream, event, function;
};

static struct fixture fx;

static int setup(void **state)
{
	const char *plugins[] = { plugin_path, NULL };
	struct backend_config bcfg = { .sim_memory = 1ull << 30, .sim_kernels = plugin_path ? plugins : NULL };
	struct exec_config cfg = { .device = 0, .arena_base = 0x380000000000ull, .arena_size = 8ull << 30 };
	struct wire_mem_alloc_req a = { .bytes = 1 << 20 };
	struct wire_mem_alloc_rep ar;
	struct wire_stream_create_req sc = { .flags = 1 };
	struct wire_stream_create_rep sr;
	struct wire_event_create_req ec = { .flags = 2 };
	struct wire_event_create_rep er;
	struct wire_module_load_data_req ml = { .image = { (const uint8_t *)ptx, sizeof(ptx) } };
	struct wire_module_load_data_rep mr;
	struct wire_module_get_function_req gf = { 0 };
	struct wire_module_get_function_rep gr;

	snprintf(fx.dir, sizeof(fx.dir), "/tmp/tern-exec-graph-XXXXXX");
	if (!mkdtemp(fx.dir) || backend_open("sim", &bcfg, &fx.be) || exec_open(&fx.ex, fx.be, &cfg, NULL) ||
	    exec_journal_open(&fx.ex, fx.dir, "graph-test"))
		return -1;
	if (exec_mem_alloc(&fx.ex, &a, &ar) || exec_stream_create(&fx.ex, &sc, &sr) ||
	    exec_event_create(&fx.ex, &ec, &er) || exec_module_load_data(&fx.ex, &ml, &mr))
		return -1;
	gf.module = mr.module;
	strcpy(gf.name, "poke");
	if (exec_module_get_function(&fx.ex, &gf, &gr))
		return -1;
	fx.mem = ar.address;
	fx.stream = sr.stream;
	fx.event = er.event;
	fx.function = gr.function;
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	exec_close(&fx.ex);
	backend_close(fx.be);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", fx.dir);
	return system(cmd) ? -1 : 0;
}

static uint64_t graph_new(void)
{
	struct wire_graph_create_req req = { 0 };
	struct wire_graph_create_rep rep;

	assert_int_equal(exec_graph_create(&fx.ex, &req, &rep), CUDA_SUCCESS);
	return rep.graph;
}

static struct wire_blob deps(uint32_t *idx, unsigned n)
{
	return (struct wire_blob){ (const uint8_t *)idx, n * 4 };
}

static CUresult empty_add(uint64_t graph, struct wire_blob d, uint32_t *node)
{
	struct wire_graph_add_empty_node_req req = { .graph = graph, .deps = d };
	struct wire_graph_add_empty_node_rep rep;
	CUresult res = exec_graph_add_empty_node(&fx.ex, &req, &rep);

	*node = rep.node;
	return res;
}

static CUresult memset_add(uint64_t graph, uint64_t dst, uint32_t value, uint32_t elem, uint64_t width,
			   uint64_t height, uint64_t pitch, uint32_t *node)
{
	struct wire_graph_add_memset_node_req req = {
		.graph = graph, .dst = dst, .pitch = pitch, .value = value, .element_size = elem,
		.width = width, .height = height,
	};
	struct wire_graph_add_memset_node_rep rep;
	CUresult res = exec_graph_add_memset_node(&fx.ex, &req, &rep);

	*node = rep.node;
	return res;
}

static CUresult memcpy_add(uint64_t graph, uint64_t dst, uint64_t src, uint64_t width, uint64_t height,
			   uint64_t pitch, uint32_t dep, uint32_t *node)
{
	struct wire_graph_add_memcpy_node_req req = {
		.graph = graph, .dst = dst, .dst_pitch = pitch, .dst_height = height, .src = src,
		.src_pitch = pitch, .src_height = height, .width = width, .height = height, .depth = 1,
		.deps = dep == NONE ? (struct wire_blob){ 0 } : deps(&dep, 1),
	};
	struct wire_graph_add_memcpy_node_rep rep;
	CUresult res = exec_graph_add_memcpy_node(&fx.ex, &req, &rep);

	*node = rep.node;
	return res;
}

static uint32_t le32_of(const void *p, size_t at)
{
	const uint8_t *b = (const uint8_t *)p + at;

	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint32_t node_count(uint64_t graph)
{
	struct wire_graph_get_nodes_req req = { .graph = graph };
	struct wire_graph_get_nodes_rep rep;

	assert_int_equal(exec_graph_get_nodes(&fx.ex, &req, &rep), CUDA_SUCCESS);
	return rep.nodes.len / 8;
}

static void test_hostile_requests(void **state)
{
	uint64_t g = graph_new();
	uint32_t n0, n1, bad[2] = { 0, 0 }, far = 5;
	struct wire_blob odd = { (const uint8_t *)bad, 3 };

	assert_int_equal(empty_add(g, (struct wire_blob){ 0 }, &n0), CUDA_SUCCESS);
	/* handles: unknown, of another kind */
	assert_int_equal(empty_add(g + 100, (struct wire_blob){ 0 }, &n1), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(empty_add(fx.stream, (struct wire_blob){ 0 }, &n1), CUDA_ERROR_INVALID_HANDLE);
	/* dependencies: a ragged blob, an index past the end, one twice */
	assert_int_equal(empty_add(g, odd, &n1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(empty_add(g, deps(&far, 1), &n1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(empty_add(g, deps(bad, 2), &n1), CUDA_ERROR_INVALID_VALUE);
	/* memset: outside the allocation, an element size of 3, a pitch that overflows */
	assert_int_equal(memset_add(g, fx.mem + (1 << 20) - 8, 0, 4, 4, 1, 0, &n1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(memset_add(g, fx.mem, 0, 3, 4, 1, 0, &n1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(memset_add(g, fx.mem, 0, 4, 4, UINT64_MAX / 2, UINT64_MAX / 4, &n1),
			 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(memset_add(g, 0x1000, 0, 1, 4, 1, 0, &n1), CUDA_ERROR_INVALID_VALUE);
	/* memcpy: nothing to copy, a source beyond the allocation, rows that overflow */
	assert_int_equal(memcpy_add(g, fx.mem, fx.mem + 4096, 0, 1, 0, NONE, &n1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(memcpy_add(g, fx.mem, fx.mem + (1 << 20) - 16, 32, 1, 0, NONE, &n1),
			 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(memcpy_add(g, fx.mem, fx.mem + 64, 16, UINT64_MAX / 8, 1ull << 40, NONE, &n1),
			 CUDA_ERROR_INVALID_VALUE);
	/* a kernel node whose arguments do not match the function's layout */
	{
		uint8_t args[4] = { 0 };
		struct wire_graph_add_kernel_node_req req = {
			.graph = g, .function = fx.function, .grid_x = 1, .grid_y = 1, .grid_z = 1,
			.block_x = 1, .block_y = 1, .block_z = 1, .args = { args, sizeof(args) },
		};
		struct wire_graph_add_kernel_node_rep rep;

		assert_int_equal(exec_graph_add_kernel_node(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
		req.function = fx.event;
		assert_int_equal(exec_graph_add_kernel_node(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_HANDLE);
	}
	/* edges: ragged, to itself, to a node that is not there, removing one that is not */
	{
		uint8_t e[2 * WIRE_REC_GRAPH_EDGE_DATA_BYTES];
		struct wire_graph_edit_edges_data_req req = { .graph = g, .edges = { e, WIRE_REC_GRAPH_EDGE_DATA_BYTES - 1 } };
		struct wire_graph_edit_edges_data_rep rep;

		wire_rec_graph_edge_data_put(e, 0, &(struct wire_rec_graph_edge_data){ .from = 0, .to = 0 });
		wire_rec_graph_edge_data_put(e, 1, &(struct wire_rec_graph_edge_data){ .from = 0, .to = 9 });
		assert_int_equal(exec_graph_edit_edges_data(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
		req.edges.len = WIRE_REC_GRAPH_EDGE_DATA_BYTES;
		assert_int_equal(exec_graph_edit_edges_data(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
		req.edges = (struct wire_blob){ e + WIRE_REC_GRAPH_EDGE_DATA_BYTES, WIRE_REC_GRAPH_EDGE_DATA_BYTES };
		assert_int_equal(exec_graph_edit_edges_data(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
		assert_int_equal(empty_add(g, (struct wire_blob){ 0 }, &n1), CUDA_SUCCESS);
		wire_rec_graph_edge_data_put(e, 0, &(struct wire_rec_graph_edge_data){ .from = n0, .to = n1 });
		req.edges = (struct wire_blob){ e, WIRE_REC_GRAPH_EDGE_DATA_BYTES };
		req.remove = 1;
		assert_int_equal(exec_graph_edit_edges_data(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
		req.remove = 2;
		assert_int_equal(exec_graph_edit_edges_data(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
		req.remove = 0;
		assert_int_equal(exec_graph_edit_edges_data(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(exec_graph_edit_edges_data(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
	}
	/* nodes by index: one out of range, one removed */
	{
		struct wire_graph_destroy_node_req req = { .graph = g, .node = 77 };
		struct wire_graph_destroy_node_rep rep;

		assert_int_equal(exec_graph_destroy_node(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
		req.node = n0;
		assert_int_equal(exec_graph_destroy_node(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(exec_graph_destroy_node(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
		assert_int_equal(empty_add(g, deps(&n0, 1), &n1), CUDA_ERROR_INVALID_VALUE);
		assert_int_equal(node_count(g), 1);
	}
	/* instantiation flags: device launch is refused, unknown bits are invalid */
	{
		struct wire_graph_instantiate_req req = { .graph = g,
							  .flags = CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH };
		struct wire_graph_instantiate_rep rep;

		assert_int_equal(exec_graph_instantiate(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(rep.status, CUDA_ERROR_NOT_SUPPORTED);
		req.flags = 1ull << 40;
		assert_int_equal(exec_graph_instantiate(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(rep.status, CUDA_ERROR_INVALID_VALUE);
		req.graph = fx.event;
		assert_int_equal(exec_graph_instantiate(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(rep.status, CUDA_ERROR_INVALID_HANDLE);
	}
	{
		struct wire_graph_launch_req req = { .exec = g, .stream = fx.stream };
		struct wire_graph_launch_rep rep;

		assert_int_equal(exec_graph_launch(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_HANDLE);
	}
	{
		struct wire_graph_destroy_req req = { .graph = g };
		struct wire_graph_destroy_rep rep;

		assert_int_equal(exec_graph_destroy(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(exec_graph_destroy(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_HANDLE);
	}
	assert_false(fx.ex.journal_broken);
}

struct journal_view {
	unsigned graphs, execs, graph_images;
	uint64_t last_graph;
	uint8_t hash[TRACKER_HASH_SIZE];
	uint64_t last_exec;
	uint8_t exec_args[TRACKER_HASH_SIZE + 16];
};

static int view_object(void *ctx, uint64_t handle, const struct tracker_object *o)
{
	struct journal_view *v = ctx;

	if (o->kind == HANDLE_GRAPH) {
		v->graphs++;
		v->last_graph = handle;
		assert_int_equal(o->args_len, TRACKER_HASH_SIZE);
		memcpy(v->hash, o->args, TRACKER_HASH_SIZE);
	} else if (o->kind == HANDLE_GRAPH_EXEC) {
		v->execs++;
		assert_int_equal(o->args_len, TRACKER_HASH_SIZE + 16);
		v->last_exec = handle;
		memcpy(v->exec_args, o->args, TRACKER_HASH_SIZE + 16);
	}
	return 0;
}

static int view_image(void *ctx, const uint8_t hash[TRACKER_HASH_SIZE], const struct tracker_image *im,
		      const void *bytes)
{
	struct journal_view *v = ctx;

	if (im->format == GRAPH_DESC_IMAGE_FORMAT)
		v->graph_images++;
	return 0;
}

static struct journal_view journal_view(void)
{
	struct journal_view v = { 0 };

	exec_graph_journal_flush(&fx.ex);
	assert_int_equal(tracker_object_foreach(fx.ex.journal, NULL, 0, view_object, &v), 0);
	assert_int_equal(tracker_image_foreach(fx.ex.journal, view_image, &v), 0);
	return v;
}

static void launch_and_sync(uint64_t exec)
{
	struct wire_graph_launch_req l = { .exec = exec, .stream = fx.stream };
	struct wire_graph_launch_rep lr;
	struct wire_stream_synchronize_req s = { .stream = fx.stream };
	struct wire_stream_synchronize_rep sr;

	assert_int_equal(exec_graph_launch(&fx.ex, &l, &lr), CUDA_SUCCESS);
	assert_int_equal(exec_stream_synchronize(&fx.ex, &s, &sr), CUDA_SUCCESS);
}

static uint32_t word_at(uint64_t addr)
{
	struct wire_memcpy_dtoh_req req = { .src = addr, .bytes = 4 };
	struct wire_memcpy_dtoh_rep rep;
	uint32_t v;

	assert_int_equal(exec_memcpy_dtoh(&fx.ex, &req, &rep), CUDA_SUCCESS);
	memcpy(&v, rep.data.ptr, 4);
	return v;
}

static void test_journal_and_restore(void **state)
{
	struct journal_view v0 = journal_view(), v;
	uint64_t g = graph_new(), exec;
	uint32_t set, copy;
	struct tracker_image im;
	const void *bytes;
	void *desc;
	char err[256];

	/* memset(mem, 0x11) -> copy mem -> mem + 4096 */
	assert_int_equal(memset_add(g, fx.mem, 0x11111111, 4, 256, 1, 0, &set), CUDA_SUCCESS);
	assert_int_equal(memcpy_add(g, fx.mem + 4096, fx.mem, 1024, 1, 0, set, &copy), CUDA_SUCCESS);
	{
		struct wire_graph_instantiate_req req = { .graph = g };
		struct wire_graph_instantiate_rep rep;

		assert_int_equal(exec_graph_instantiate(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(rep.status, CUDA_SUCCESS);
		exec = rep.exec;
	}
	launch_and_sync(exec);
	assert_int_equal(word_at(fx.mem + 4096 + 1020), 0x11111111);
	v = journal_view();
	assert_int_equal(v.graphs, v0.graphs + 1);
	assert_int_equal(v.execs, v0.execs + 1);
	/* One description, held by both graph and executable. */
	assert_int_equal(v.graph_images, v0.graph_images + 1);

	/* The journaled description rebuilds the graph under a new handle. */
	assert_int_equal(tracker_image_get(fx.ex.journal, v.hash, &im, &bytes), 0);
	desc = malloc(im.size);
	memcpy(desc, bytes, im.size);
	{
		uint64_t h = (uint64_t)HANDLE_GRAPH << 56 | 0x777;
		struct wire_graph_instantiate_req req = { .graph = h };
		struct wire_graph_instantiate_rep rep;

		assert_int_equal(exec_graph_restore(&fx.ex, h, HANDLE_GRAPH, v.hash, TRACKER_HASH_SIZE, desc, im.size,
						    err, sizeof(err)), CUDA_SUCCESS);
		assert_int_equal(node_count(h), 2);
		assert_int_equal(exec_graph_instantiate(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(rep.status, CUDA_SUCCESS);
		assert_int_equal(exec_memset(&fx.ex, &(struct wire_memset_req){ .dst = fx.mem + 4096, .width = 4,
								     .count = 256 }, NULL), CUDA_SUCCESS);
		launch_and_sync(rep.exec);
		assert_int_equal(word_at(fx.mem + 4096 + 12), 0x11111111);
		/* A damaged description is refused, with a reason. */
		((uint8_t *)desc)[im.size / 2] ^= 0xff;
		err[0] = 0;
		if (exec_graph_restore(&fx.ex, h + 1, HANDLE_GRAPH, v.hash, TRACKER_HASH_SIZE, desc, im.size,
				       err, sizeof(err)) != CUDA_SUCCESS)
			assert_true(err[0]);
	}
	free(desc);

	/* Freed graphs drop their records; the description goes with the last. */
	{
		struct wire_graph_exec_destroy_req xd = { .exec = exec };
		struct wire_graph_exec_destroy_rep xr;
		struct wire_graph_destroy_req gd = { .graph = g };
		struct wire_graph_destroy_rep gr;

		assert_int_equal(exec_graph_exec_destroy(&fx.ex, &xd, &xr), CUDA_SUCCESS);
		assert_int_equal(exec_graph_destroy(&fx.ex, &gd, &gr), CUDA_SUCCESS);
	}
	v = journal_view();
	assert_int_equal(v.execs, v0.execs + 1);        /* the restored graph's executable */
	assert_false(fx.ex.journal_broken);
}

static void memset_node_set(uint64_t exec, uint64_t g, uint32_t node, uint64_t dst, uint32_t value, CUresult want)
{
	struct wire_graph_memset_node_set_params_req req = {
		.exec = exec, .graph = g, .node = node, .dst = dst, .value = value, .element_size = 4,
		.width = 256, .height = 1,
	};
	struct wire_graph_memset_node_set_params_rep rep;

	assert_int_equal(exec_graph_memset_node_set_params(&fx.ex, &req, &rep), want);
}

static void enabled_set(uint64_t exec, uint64_t g, uint32_t node, uint32_t enabled)
{
	struct wire_graph_exec_node_set_enabled_req req = { .exec = exec, .graph = g, .node = node,
							    .enabled = enabled };
	struct wire_graph_exec_node_set_enabled_rep rep;
	struct wire_graph_exec_node_get_enabled_req gq = { .exec = exec, .graph = g, .node = node };
	struct wire_graph_exec_node_get_enabled_rep gr;

	assert_int_equal(exec_graph_exec_node_set_enabled(&fx.ex, &req, &rep), CUDA_SUCCESS);
	assert_int_equal(exec_graph_exec_node_get_enabled(&fx.ex, &gq, &gr), CUDA_SUCCESS);
	assert_int_equal(gr.enabled, enabled);
}

static void zero(uint64_t addr)
{
	assert_int_equal(exec_memset(&fx.ex, &(struct wire_memset_req){ .dst = addr, .width = 4, .count = 256 }, NULL),
			 CUDA_SUCCESS);
}

/* Node parameters changed in a graph and in an executable, a node of the
 * executable disabled: the journal follows, and a restore brings the
 * executable back as it was changed. */
static void test_changes_restore(void **state)
{
	uint64_t g = graph_new(), exec, h = (uint64_t)HANDLE_GRAPH_EXEC << 56 | 0x888;
	uint32_t set, copy;
	struct tracker_image im;
	struct journal_view v;
	const void *bytes;
	char err[256];

	assert_int_equal(memset_add(g, fx.mem, 0x11111111, 4, 256, 1, 0, &set), CUDA_SUCCESS);
	assert_int_equal(memcpy_add(g, fx.mem + 4096, fx.mem, 1024, 1, 0, set, &copy), CUDA_SUCCESS);
	memset_node_set(0, g, set, fx.mem, 0x33333333, CUDA_SUCCESS);
	{
		struct wire_graph_node_get_params_req req = { .graph = g, .node = set };
		struct wire_graph_node_get_params_rep rep;

		assert_int_equal(exec_graph_node_get_params(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(rep.type, CU_GRAPH_NODE_TYPE_MEMSET);
		assert_int_equal(rep.value, 0x33333333);
		assert_int_equal(rep.dst, fx.mem);
		assert_int_equal(rep.width, 256);
	}
	{
		struct wire_graph_instantiate_req req = { .graph = g };
		struct wire_graph_instantiate_rep rep;

		assert_int_equal(exec_graph_instantiate(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(rep.status, CUDA_SUCCESS);
		exec = rep.exec;
	}
	memset_node_set(exec, g, set, fx.mem, 0x22222222, CUDA_SUCCESS);
	memset_node_set(exec, g, copy, fx.mem, 0x22222222, CUDA_ERROR_INVALID_VALUE);
	enabled_set(exec, g, copy, 0);
	zero(fx.mem + 4096);
	launch_and_sync(exec);
	assert_int_equal(word_at(fx.mem), 0x22222222);
	assert_int_equal(word_at(fx.mem + 4096), 0);

	/* The executable's journaled description: changed and disabled. */
	v = journal_view();
	assert_int_equal(v.last_exec, exec);
	assert_int_equal(tracker_image_get(fx.ex.journal, v.exec_args, &im, &bytes), 0);
	{
		void *desc = malloc(im.size);

		memcpy(desc, bytes, im.size);
		assert_int_equal(exec_graph_restore(&fx.ex, h, HANDLE_GRAPH_EXEC, v.exec_args, sizeof(v.exec_args),
						    desc, im.size, err, sizeof(err)), CUDA_SUCCESS);
		free(desc);
	}
	zero(fx.mem);
	launch_and_sync(h);
	assert_int_equal(word_at(fx.mem), 0x22222222);
	assert_int_equal(word_at(fx.mem + 4096), 0);
	enabled_set(h, g, copy, 1);
	launch_and_sync(h);
	assert_int_equal(word_at(fx.mem + 4096 + 1020), 0x22222222);
	assert_false(fx.ex.journal_broken);
}

static CUresult host_copy_add(uint64_t graph, uint32_t end, uint64_t token, uint64_t dev, uint64_t width,
			      uint64_t height, uint64_t depth, uint32_t *node)
{
	struct wire_graph_add_host_copy_node_req req = {
		.graph = graph, .host_end = end, .token = token, .device = dev, .dev_pitch = width,
		.dev_height = height, .width = width, .height = height, .depth = depth,
	};
	struct wire_graph_add_host_copy_node_rep rep = { 0 };
	CUresult res = exec_graph_add_host_copy_node(&fx.ex, &req, &rep);

	*node = rep.node;
	return res;
}

/* Host copies (a guest's token at one end): hostile shapes refused alone,
 * a good one a memcpy node with its host end, kept in its description;
 * its end cannot change; captured copies only on a capturing stream. */
static void test_host_copies(void **state)
{
	uint64_t g = graph_new();
	uint32_t n, count = node_count(g);
	struct wire_graph_node_get_params_req gp = { .graph = g };
	struct wire_graph_node_get_params_rep gpr;
	struct wire_graph_memcpy_node_set_params_req ms = { .graph = g };
	struct wire_graph_memcpy_node_set_params_rep msr;
	struct wire_graph_host_copy_node_set_params_req hs = { .graph = g, .host_end = GRAPH_COPY_HOST_DST,
							       .token = 9, .device = 0, .dev_pitch = 4096,
							       .dev_height = 1, .width = 4096, .height = 1, .depth = 1 };
	struct wire_graph_host_copy_node_set_params_rep hsr;
	struct wire_memcpy_host_capture_req mc = { .stream = fx.stream, .host_end = GRAPH_COPY_HOST_SRC,
						   .token = 5, .device = 0, .bytes = 64 };
	struct wire_memcpy_host_capture_rep mcr;

	(void)state;
	assert_int_equal(host_copy_add(g, 0, 7, fx.mem, 4096, 1, 1, &n), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(host_copy_add(g, 3, 7, fx.mem, 4096, 1, 1, &n), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(host_copy_add(g, GRAPH_COPY_HOST_SRC, 7, fx.mem, 0, 1, 1, &n), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(host_copy_add(g, GRAPH_COPY_HOST_SRC, 7, fx.mem, 1ull << 40, 1ull << 40, 1ull << 40, &n),
			 CUDA_ERROR_INVALID_VALUE);
	/* A device end outside the session's memory. */
	assert_int_equal(host_copy_add(g, GRAPH_COPY_HOST_SRC, 7, 0x1000, 4096, 1, 1, &n), CUDA_ERROR_INVALID_VALUE);
	/* More pinned staging than the session may have. */
	assert_int_equal(host_copy_add(g, GRAPH_COPY_HOST_SRC, 7, fx.mem, 1ull << 62, 1, 1, &n),
			 CUDA_ERROR_OUT_OF_MEMORY);
	assert_int_equal(node_count(g), count);
	assert_int_equal(host_copy_add(g, GRAPH_COPY_HOST_SRC, 7, fx.mem, 4096, 2, 1, &n), CUDA_SUCCESS);
	assert_int_equal(node_count(g), count + 1);
	gp.node = n;
	assert_int_equal(exec_graph_node_get_params(&fx.ex, &gp, &gpr), CUDA_SUCCESS);
	assert_int_equal(gpr.type, CU_GRAPH_NODE_TYPE_MEMCPY);
	assert_int_equal(gpr.object, GRAPH_COPY_HOST_SRC);
	assert_int_equal(gpr.src, 7);
	assert_int_equal(gpr.dst, fx.mem);
	/* Its end stays: neither a device copy nor the other direction. */
	ms.node = n;
	ms.dst = fx.mem;
	ms.src = fx.mem + 8192;
	ms.dst_pitch = ms.src_pitch = ms.width = 4096;
	ms.dst_height = ms.src_height = ms.height = ms.depth = 1;
	assert_int_equal(exec_graph_memcpy_node_set_params(&fx.ex, &ms, &msr), CUDA_ERROR_NOT_SUPPORTED);
	hs.node = n;
	assert_int_equal(exec_graph_host_copy_node_set_params(&fx.ex, &hs, &hsr), CUDA_ERROR_NOT_SUPPORTED);
	hs.host_end = GRAPH_COPY_HOST_SRC;
	hs.device = fx.mem + 4096;
	assert_int_equal(exec_graph_host_copy_node_set_params(&fx.ex, &hs, &hsr), CUDA_SUCCESS);
	assert_int_equal(exec_graph_node_get_params(&fx.ex, &gp, &gpr), CUDA_SUCCESS);
	assert_int_equal(gpr.src, 9);
	assert_int_equal(gpr.dst, fx.mem + 4096);
	hs.node = n + 100;
	assert_int_equal(exec_graph_host_copy_node_set_params(&fx.ex, &hs, &hsr), CUDA_ERROR_INVALID_VALUE);
	/* A stream that does not capture adds nothing anywhere. */
	mcr.captured = 7;
	assert_int_equal(exec_memcpy_host_capture(&fx.ex, &mc, &mcr), CUDA_SUCCESS);
	assert_int_equal(mcr.captured, 0);
	mc.stream = 0x77;
	assert_int_equal(exec_memcpy_host_capture(&fx.ex, &mc, &mcr), CUDA_ERROR_INVALID_HANDLE);
	assert_false(fx.ex.journal_broken);
	{
		struct wire_graph_destroy_req gd = { .graph = g };
		struct wire_graph_destroy_rep gr;

		assert_int_equal(exec_graph_destroy(&fx.ex, &gd, &gr), CUDA_SUCCESS);
	}
}

/* cudaMallocAsync / cudaFreeAsync while the stream captures: allocation
 * and free nodes of the captured graph; a bad host end there refused. */
static void test_captured_mem_nodes(void **state)
{
	struct wire_stream_begin_capture_req b = { .stream = fx.stream, .mode = CU_STREAM_CAPTURE_MODE_GLOBAL };
	struct wire_stream_begin_capture_rep br;
	struct wire_mem_alloc_async_req a = { .bytes = 1 << 20, .stream = fx.stream };
	struct wire_mem_alloc_async_rep ar;
	struct wire_mem_free_async_req f = { .stream = fx.stream };
	struct wire_mem_free_async_rep fr;
	struct wire_memcpy_host_capture_req mc = { .stream = fx.stream, .host_end = 5, .token = 3, .bytes = 64 };
	struct wire_memcpy_host_capture_rep mcr;
	struct wire_stream_end_capture_req e = { .stream = fx.stream };
	struct wire_stream_end_capture_rep er;
	struct wire_graph_get_nodes_req gn;
	struct wire_graph_get_nodes_rep gnr;
	unsigned allocs = 0, frees = 0;

	(void)state;
	assert_int_equal(exec_stream_begin_capture(&fx.ex, &b, &br), CUDA_SUCCESS);
	assert_int_equal(exec_mem_alloc_async(&fx.ex, &a, &ar), CUDA_SUCCESS);
	assert_true(arena_range_valid(fx.ex.dev.arena, ar.address, 1 << 20));
	mc.device = ar.address;
	assert_int_equal(exec_memcpy_host_capture(&fx.ex, &mc, &mcr), CUDA_ERROR_INVALID_VALUE);
	f.address = ar.address;
	assert_int_equal(exec_mem_free_async(&fx.ex, &f, &fr), CUDA_SUCCESS);
	f.address = ar.address + 64;    /* no allocation */
	assert_int_equal(exec_mem_free_async(&fx.ex, &f, &fr), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(exec_stream_end_capture(&fx.ex, &e, &er), CUDA_SUCCESS);
	gn.graph = er.graph;
	assert_int_equal(exec_graph_get_nodes(&fx.ex, &gn, &gnr), CUDA_SUCCESS);
	for (uint32_t i = 0; i < gnr.nodes.len / 8; i++) {
		uint32_t t = le32_of(gnr.nodes.ptr, i * 8 + 4);

		allocs += t == CU_GRAPH_NODE_TYPE_MEM_ALLOC;
		frees += t == CU_GRAPH_NODE_TYPE_MEM_FREE;
	}
	assert_int_equal(allocs, 1);
	assert_int_equal(frees, 1);
	assert_int_equal(fx.ex.graphs.standin_count, 0);
	/* The memory stays while the graph holds its nodes, goes with it. */
	assert_true(arena_range_valid(fx.ex.dev.arena, ar.address, 1 << 20));
	{
		struct wire_graph_destroy_req gd = { .graph = er.graph };
		struct wire_graph_destroy_rep gr;

		assert_int_equal(exec_graph_destroy(&fx.ex, &gd, &gr), CUDA_SUCCESS);
	}
	assert_false(arena_range_valid(fx.ex.dev.arena, ar.address, 1 << 20));
}

static void test_mem_nodes(void **state)
{
	uint64_t g = graph_new();
	struct wire_graph_add_mem_alloc_node_req ar = { .graph = g, .bytes = 3 << 20 };
	struct wire_graph_add_mem_alloc_node_rep arep;
	struct wire_graph_add_mem_free_node_req fr = { .graph = g };
	struct wire_graph_add_mem_free_node_rep frep;
	struct wire_mem_free_req mf;
	struct wire_mem_free_rep mfr;
	struct tracker_region r;
	uint32_t set;

	assert_int_equal(exec_graph_add_mem_alloc_node(&fx.ex, &ar, &arep), CUDA_SUCCESS);
	assert_true(arena_range_valid(fx.ex.dev.arena, arep.address, 3 << 20));
	assert_int_equal(tracker_region_get(fx.ex.journal, arep.address, &r), 0);
	assert_int_equal(r.kind, EXEC_REGION_GRAPH);
	/* The graph's memory is device memory nodes may use. */
	assert_int_equal(memset_add(g, arep.address, 7, 1, 4096, 1, 0, &set), CUDA_SUCCESS);
	fr.address = arep.address + 64;
	assert_int_equal(exec_graph_add_mem_free_node(&fx.ex, &fr, &frep), CUDA_ERROR_INVALID_VALUE);
	fr.address = arep.address;
	fr.deps = deps(&set, 1);
	assert_int_equal(exec_graph_add_mem_free_node(&fx.ex, &fr, &frep), CUDA_SUCCESS);
	assert_int_equal(exec_graph_add_mem_free_node(&fx.ex, &fr, &frep), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(tracker_region_get(fx.ex.journal, arep.address, &r), 0);
	assert_int_equal(r.kind, EXEC_REGION_GRAPH_FREED);
	/* cuMemFree of it: accepted, the memory stays while the graph holds it. */
	mf.address = arep.address;
	assert_int_equal(exec_mem_free(&fx.ex, &mf, &mfr), CUDA_SUCCESS);
	assert_true(arena_range_valid(fx.ex.dev.arena, arep.address, 3 << 20));
	{
		struct wire_graph_destroy_req gd = { .graph = g };
		struct wire_graph_destroy_rep gr;

		assert_int_equal(exec_graph_destroy(&fx.ex, &gd, &gr), CUDA_SUCCESS);
	}
	assert_false(arena_range_valid(fx.ex.dev.arena, arep.address, 1));
	assert_int_equal(tracker_region_get(fx.ex.journal, arep.address, &r), -ENOENT);
}

static void test_capture(void **state)
{
	struct wire_stream_begin_capture_req b = { .stream = fx.stream, .mode = CU_STREAM_CAPTURE_MODE_GLOBAL };
	struct wire_stream_begin_capture_rep br;
	struct wire_stream_end_capture_req e = { .stream = fx.stream };
	struct wire_stream_end_capture_rep er;
	struct wire_stream_get_capture_info_data_req ci = { .stream = fx.stream, .want = 3 };
	struct wire_stream_get_capture_info_data_rep cr;
	struct checkpoint_request creq = { .store_dir = "/nonexistent", .name = "s", .session = "graph-test" };
	struct checkpoint_job *job;
	struct checkpoint ck;
	uint8_t data[16] = { 0 };
	char err[256];

	b.mode = 7;
	assert_int_equal(exec_stream_begin_capture(&fx.ex, &b, &br), CUDA_ERROR_INVALID_VALUE);
	b.mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
	assert_int_equal(exec_stream_begin_capture(&fx.ex, &b, &br), CUDA_SUCCESS);
	assert_true(exec_capture_active(&fx.ex));
	/* A snapshot now is refused, and leaves the capture alone. */
	checkpoint_init(&ck, &fx.ex, NULL);
	assert_int_equal(checkpoint_begin(&ck, &creq, &job, err, sizeof(err)), -EBUSY);
	checkpoint_close(&ck);
	assert_non_null(strstr(err, "capture"));
	assert_int_equal(exec_memset(&fx.ex, &(struct wire_memset_req){ .dst = fx.mem, .width = 4, .count = 64,
							     .stream = fx.stream, .async = 1 }, NULL),
			 CUDA_SUCCESS);
	/* Host memory cannot be in a graph. */
	assert_int_equal(exec_memcpy_htod(&fx.ex, &(struct wire_memcpy_htod_req){ .dst = fx.mem,
		.stream = fx.stream, .async = 1, .data = { data, sizeof(data) } }, NULL), CUDA_ERROR_NOT_SUPPORTED);
	assert_int_equal(exec_stream_get_capture_info_data(&fx.ex, &ci, &cr), CUDA_SUCCESS);
	assert_int_equal(cr.status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	assert_int_equal(cr.deps.len, WIRE_REC_GRAPH_DEP_DATA_BYTES);
	assert_int_equal(exec_stream_end_capture(&fx.ex, &e, &er), CUDA_SUCCESS);
	assert_false(exec_capture_active(&fx.ex));
	/* The graph named during the capture is the one that comes out. */
	assert_int_equal(er.graph, cr.graph);
	assert_int_equal(node_count(er.graph), 1);
	/* Ending again: not capturing. */
	assert_int_not_equal(exec_stream_end_capture(&fx.ex, &e, &er), CUDA_SUCCESS);
}

/* A guest may build large graphs and wide joins: the work per node must not
 * grow with the graph (no rewrite of the description per node, no pairwise
 * dependency checks). */
static void test_large_graph(void **state)
{
	enum { CHAIN = 40000, JOIN = GRAPH_DESC_DEPS_MAX };
	uint32_t *d = malloc(JOIN * sizeof(*d)), node, prev = NONE;
	uint64_t g = graph_new();
	struct wire_graph_instantiate_req ir = { .graph = g };
	struct wire_graph_instantiate_rep irep;

	assert_non_null(d);
	for (uint32_t i = 0; i < CHAIN; i++) {
		assert_int_equal(empty_add(g, prev == NONE ? (struct wire_blob){ 0 } : deps(&prev, 1), &node),
				 CUDA_SUCCESS);
		prev = node;
	}
	for (uint32_t i = 0; i < JOIN; i++)
		d[i] = CHAIN - 1 - i % CHAIN;
	/* 2^16 dependencies, some twice: refused; all distinct: accepted. */
	assert_int_equal(empty_add(g, deps(d, JOIN), &node), CUDA_ERROR_INVALID_VALUE);
	for (uint32_t i = 0; i < JOIN; i++)
		d[i] = i < CHAIN ? i : 0;
	assert_int_equal(empty_add(g, deps(d, CHAIN), &node), CUDA_SUCCESS);
	assert_int_equal(node_count(g), CHAIN + 1);
	assert_int_equal(exec_graph_instantiate(&fx.ex, &ir, &irep), CUDA_SUCCESS);
	assert_int_equal(irep.status, CUDA_SUCCESS);
	launch_and_sync(irep.exec);
	exec_graph_journal_flush(&fx.ex);
	assert_false(fx.ex.journal_broken);
	{
		struct wire_graph_exec_destroy_req xd = { .exec = irep.exec };
		struct wire_graph_exec_destroy_rep xr;
		struct wire_graph_destroy_req gd = { .graph = g };
		struct wire_graph_destroy_rep gr;

		assert_int_equal(exec_graph_exec_destroy(&fx.ex, &xd, &xr), CUDA_SUCCESS);
		assert_int_equal(exec_graph_destroy(&fx.ex, &gd, &gr), CUDA_SUCCESS);
	}
	free(d);
}

/* ---- conditional nodes ---------------------------------------------------- */

/* A new executable of graph @g. */
static uint64_t instantiated(uint64_t g)
{
	struct wire_graph_instantiate_req req = { .graph = g };
	struct wire_graph_instantiate_rep rep;

	assert_int_equal(exec_graph_instantiate(&fx.ex, &req, &rep), CUDA_SUCCESS);
	assert_int_equal(rep.status, CUDA_SUCCESS);
	return rep.exec;
}

struct hash_find {
	uint64_t handle;
	uint8_t hash[TRACKER_HASH_SIZE];
	bool found;
};

static int hash_find_one(void *ctx, uint64_t handle, const struct tracker_object *o)
{
	struct hash_find *f = ctx;

	if (handle == f->handle) {
		memcpy(f->hash, o->args, TRACKER_HASH_SIZE);
		f->found = true;
	}
	return 0;
}

/* A copy of the journaled description of graph @g (*@len bytes). */
static void *journaled_desc(uint64_t g, size_t *len, uint8_t hash[TRACKER_HASH_SIZE])
{
	struct hash_find f = { .handle = g };
	struct tracker_image im;
	const void *bytes;
	void *desc;

	exec_graph_journal_flush(&fx.ex);
	assert_int_equal(tracker_object_foreach(fx.ex.journal, NULL, 0, hash_find_one, &f), 0);
	assert_true(f.found);
	assert_int_equal(tracker_image_get(fx.ex.journal, f.hash, &im, &bytes), 0);
	desc = malloc(im.size);
	memcpy(desc, bytes, im.size);
	*len = im.size;
	memcpy(hash, f.hash, TRACKER_HASH_SIZE);
	return desc;
}

/* ---- edges with data ------------------------------------------------------ */

/* A kernel node of `poke` (which writes fx.mem's first word). */
static CUresult kernel_add(uint64_t graph, uint32_t *node)
{
	uint8_t args[12] = { 0 };
	struct wire_graph_add_kernel_node_req req = {
		.graph = graph, .function = fx.function, .grid_x = 1, .grid_y = 1, .grid_z = 1,
		.block_x = 1, .block_y = 1, .block_z = 1, .args = { args, sizeof(args) },
	};
	struct wire_graph_add_kernel_node_rep rep = { 0 };
	CUresult res;

	memcpy(args, &fx.mem, sizeof(fx.mem));
	res = exec_graph_add_kernel_node(&fx.ex, &req, &rep);
	*node = rep.node;
	return res;
}

/* Add (or remove) the edge @from -> @to carrying @type, @from_port, @to_port. */
static CUresult edge_edit(uint64_t g, uint32_t remove, uint32_t from, uint32_t to, uint8_t type, uint8_t from_port,
			  uint8_t to_port)
{
	uint8_t rec[WIRE_REC_GRAPH_EDGE_DATA_BYTES];
	struct wire_graph_edit_edges_data_req req = { .graph = g, .remove = remove, .edges = { rec, sizeof(rec) } };
	struct wire_graph_edit_edges_data_rep rep;

	wire_rec_graph_edge_data_put(rec, 0, &(struct wire_rec_graph_edge_data){
		.from = from, .to = to, .from_port = from_port, .to_port = to_port, .type = type });
	return exec_graph_edit_edges_data(&fx.ex, &req, &rep);
}

/* The edges of @g with their data, as the shim reads them: the @n of @want. */
static void edges_expect(uint64_t g, const struct wire_rec_graph_edge_data *want, unsigned n)
{
	struct wire_graph_get_edges_data_req req = { .graph = g };
	struct wire_graph_get_edges_data_rep rep;

	assert_int_equal(exec_graph_get_edges_data(&fx.ex, &req, &rep), CUDA_SUCCESS);
	assert_int_equal(wire_rec_graph_edge_data_count(rep.edges), n);
	for (unsigned i = 0; i < n; i++) {
		struct wire_rec_graph_edge_data r;

		assert_int_equal(wire_rec_graph_edge_data_get(rep.edges, i, &r), 0);
		assert_int_equal(r.from, want[i].from);
		assert_int_equal(r.to, want[i].to);
		assert_int_equal(r.type, want[i].type);
		assert_int_equal(r.from_port, want[i].from_port);
		assert_int_equal(r.to_port, 0);
	}
}

/* Programmatic edges (XLA's programmatic dependent launch): checked as the
 * driver checks them, kept in the description (version 4) and rebuilt by a
 * restore with their data. */
static void test_programmatic_edges(void **state)
{
	const uint8_t prog = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
	const uint8_t port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC, order = CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER;
	uint64_t g = graph_new(), restored = (uint64_t)HANDLE_GRAPH << 56 | 0xbbb;
	uint32_t a, b, c, e;
	uint8_t hash[TRACKER_HASH_SIZE];
	size_t len;
	uint8_t *desc;
	char err[256];
	const struct wire_rec_graph_edge_data want[] = {
		{ .from = 0, .to = 1, .type = prog, .from_port = port },
		{ .from = 1, .to = 2, .type = prog, .from_port = order },
		{ .from = 0, .to = 2, .type = prog, .from_port = port },
		{ .from = 0, .to = 3 },
	};

	if (!plugin_path)
		skip();
	assert_int_equal(kernel_add(g, &a), CUDA_SUCCESS);
	assert_int_equal(kernel_add(g, &b), CUDA_SUCCESS);
	assert_int_equal(kernel_add(g, &c), CUDA_SUCCESS);
	assert_int_equal(empty_add(g, (struct wire_blob){ 0 }, &e), CUDA_SUCCESS);
	/* What the driver refuses: a port into a node, unknown types and ports,
	 * a programmatic edge to or from a node that is not a kernel, a port
	 * out of one, the programmatic port on a default edge, a programmatic
	 * edge from port 0. */
	assert_int_equal(edge_edit(g, 0, a, b, prog, port, 1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(edge_edit(g, 0, a, b, 2, port, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(edge_edit(g, 0, a, b, prog, 3, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(edge_edit(g, 0, a, e, prog, port, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(edge_edit(g, 0, e, a, prog, port, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(edge_edit(g, 0, e, a, 0, order, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(edge_edit(g, 0, a, b, 0, port, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(edge_edit(g, 0, a, b, prog, 0, 0), CUDA_ERROR_INVALID_VALUE);
	/* A reserved byte set, ragged blobs. */
	{
		uint8_t rec[WIRE_REC_GRAPH_EDGE_DATA_BYTES + 1] = { 0 };
		struct wire_graph_edit_edges_data_req req = { .graph = g,
							      .edges = { rec, WIRE_REC_GRAPH_EDGE_DATA_BYTES } };
		struct wire_graph_edit_edges_data_rep rep;

		wire_rec_graph_edge_data_put(rec, 0, &(struct wire_rec_graph_edge_data){
			.from = a, .to = b, .from_port = port, .type = prog });
		rec[WIRE_REC_GRAPH_EDGE_DATA_BYTES - 1] = 1;
		assert_int_equal(exec_graph_edit_edges_data(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
		rec[WIRE_REC_GRAPH_EDGE_DATA_BYTES - 1] = 0;
		req.edges.len = WIRE_REC_GRAPH_EDGE_DATA_BYTES - 1;
		assert_int_equal(exec_graph_edit_edges_data(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
		req.edges.len = WIRE_REC_GRAPH_EDGE_DATA_BYTES + 1;
		assert_int_equal(exec_graph_edit_edges_data(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
	}
	edges_expect(g, want, 0);
	assert_int_equal(edge_edit(g, 0, a, b, prog, port, 0), CUDA_SUCCESS);
	assert_int_equal(edge_edit(g, 0, b, c, prog, order, 0), CUDA_SUCCESS);
	assert_int_equal(edge_edit(g, 0, a, c, prog, port, 0), CUDA_SUCCESS);
	assert_int_equal(edge_edit(g, 0, a, e, 0, order, 0), CUDA_SUCCESS);     /* launch order, default type */
	assert_int_equal(edge_edit(g, 0, a, e, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(edge_edit(g, 1, a, e, prog, port, 0), CUDA_ERROR_INVALID_VALUE);   /* not with other data */
	/* Default data removes the edge whatever its data (the H100's driver). */
	assert_int_equal(edge_edit(g, 1, a, e, 0, 0, 0), CUDA_SUCCESS);
	assert_int_equal(edge_edit(g, 1, a, e, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);   /* gone */
	assert_int_equal(edge_edit(g, 0, a, e, 0, order, 0), CUDA_SUCCESS);
	assert_int_equal(edge_edit(g, 1, a, e, 0, order, 0), CUDA_SUCCESS);
	assert_int_equal(edge_edit(g, 0, a, e, 0, 0, 0), CUDA_SUCCESS);
	edges_expect(g, want, 4);
	/* The description: version 4, node flag bit 4 on the nodes with data. */
	desc = journaled_desc(g, &len, hash);
	{
		struct graph_desc d;
		uint8_t *again;
		size_t again_len;

		assert_int_equal(le32_of(desc, 4), 4);
		assert_int_equal(graph_desc_decode(&d, desc, len), 0);
		assert_non_null(d.nodes[c].edge);
		assert_int_equal(d.nodes[c].edge[0].from_port, order);
		assert_int_equal(d.nodes[c].edge[1].from_port, port);
		assert_null(d.nodes[e].edge);
		assert_int_equal(graph_desc_encode(&d, &again, &again_len), 0);
		assert_int_equal(again_len, len);
		assert_memory_equal(again, desc, len);
		free(again);
		graph_desc_release(&d);
		/* One form only: edge data in a version 3 description, or cut short. */
		desc[4] = 3;
		assert_int_equal(graph_desc_decode(&d, desc, len), -EBADMSG);
		desc[4] = 4;
		assert_int_equal(graph_desc_decode(&d, desc, len - 1), -EBADMSG);
	}
	/* Restored: the edges again, with their data, and it instantiates. */
	assert_int_equal(exec_graph_restore(&fx.ex, restored, HANDLE_GRAPH, hash, TRACKER_HASH_SIZE, desc, len,
					    err, sizeof(err)), CUDA_SUCCESS);
	edges_expect(restored, want, 4);
	zero(fx.mem);
	launch_and_sync(instantiated(restored));
	assert_int_equal(word_at(fx.mem), 1);
	/* Removing a node takes its edges and their data along. */
	{
		struct wire_graph_destroy_node_req req = { .graph = restored, .node = b };
		struct wire_graph_destroy_node_rep rep;

		assert_int_equal(exec_graph_destroy_node(&fx.ex, &req, &rep), CUDA_SUCCESS);
		edges_expect(restored, want + 2, 2);
	}
	free(desc);
	assert_false(fx.ex.journal_broken);
}

/* ---- captures with edge data --------------------------------------------- */

/* Launch `poke` of @addr on the fixture's stream (captured while it captures). */
static CUresult poke_launch(uint64_t addr)
{
	uint8_t args[12] = { 0 };
	struct wire_launch_kernel_req req = {
		.function = fx.function, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1, .block_y = 1,
		.block_z = 1, .stream = fx.stream, .args = { args, sizeof(args) },
	};
	struct wire_launch_kernel_rep rep;

	memcpy(args, &addr, sizeof(addr));
	return exec_launch_kernel(&fx.ex, &req, &rep);
}

/* Record @i of a graph_dep_data blob. */
static void dep_data_put(uint8_t *buf, uint32_t i, uint32_t node, uint8_t type, uint8_t from_port, uint8_t to_port)
{
	wire_rec_graph_dep_data_put(buf, i, &(struct wire_rec_graph_dep_data){
		.node = node, .from_port = from_port, .to_port = to_port, .type = type });
}

static CUresult capture_to_graph(uint64_t stream, uint64_t g, const uint8_t *rec, uint32_t len)
{
	struct wire_stream_begin_capture_to_graph_data_req req = {
		.stream = stream, .graph = g, .deps = { rec, len }, .mode = CU_STREAM_CAPTURE_MODE_GLOBAL };
	struct wire_stream_begin_capture_to_graph_data_rep rep;

	return exec_stream_begin_capture_to_graph_data(&fx.ex, &req, &rep);
}

static CUresult capture_update(uint64_t g, const uint8_t *rec, uint32_t len, uint32_t flags)
{
	struct wire_stream_update_capture_dependencies_data_req req = {
		.stream = fx.stream, .graph = g, .deps = { rec, len }, .flags = flags };
	struct wire_stream_update_capture_dependencies_data_rep rep;

	return exec_stream_update_capture_dependencies_data(&fx.ex, &req, &rep);
}

/* The capture's dependencies as the shim reads them: exactly @want. */
static void capture_deps_expect(uint64_t g, const struct wire_rec_graph_dep_data *want, unsigned n)
{
	struct wire_stream_get_capture_info_data_req req = { .stream = fx.stream, .want = 3 };
	struct wire_stream_get_capture_info_data_rep rep = { 0 };

	assert_int_equal(exec_stream_get_capture_info_data(&fx.ex, &req, &rep), CUDA_SUCCESS);
	assert_int_equal(rep.status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	assert_int_equal(rep.graph, g);
	assert_int_equal(wire_rec_graph_dep_data_count(rep.deps), n);
	for (unsigned i = 0; i < n; i++) {
		struct wire_rec_graph_dep_data r;

		assert_int_equal(wire_rec_graph_dep_data_get(rep.deps, i, &r), 0);
		assert_int_equal(r.node, want[i].node);
		assert_int_equal(r.type, want[i].type);
		assert_int_equal(r.from_port, want[i].from_port);
		assert_int_equal(r.to_port, 0);
	}
}

static CUresult capture_end(uint64_t *graph)
{
	struct wire_stream_end_capture_req req = { .stream = fx.stream };
	struct wire_stream_end_capture_rep rep = { 0 };
	CUresult res = exec_stream_end_capture(&fx.ex, &req, &rep);

	*graph = rep.graph;
	return res;
}

/* Captures with programmatic edges (ids 324-326): a capture into the
 * guest's graph after a kernel with a programmatic edge, the dependencies
 * read back with their data, replaced with data, the captured graph's
 * edges and its run; hostile records and data the driver refuses fail
 * alone and begin no capture; a programmatic edge into a memset fails
 * that call and invalidates the capture. */
static void test_capture_edges(void **state)
{
	const uint8_t prog = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
	const uint8_t port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC, order = CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER;
	const uint32_t B = WIRE_REC_GRAPH_DEP_DATA_BYTES;
	uint64_t g = graph_new(), other = graph_new(), out;
	uint8_t rec[2 * WIRE_REC_GRAPH_DEP_DATA_BYTES + 1] = { 0 };
	uint32_t a, e;

	if (!plugin_path)
		skip();
	assert_int_equal(kernel_add(g, &a), CUDA_SUCCESS);
	assert_int_equal(empty_add(g, (struct wire_blob){ 0 }, &e), CUDA_SUCCESS);
	/* Hostile beginnings: a reserved byte, ragged blobs, no such node, a
	 * node twice, bad handles; then what the driver refuses out of the
	 * node (the next node is not known yet): a port into the next node,
	 * unknown types and ports, a port or a programmatic edge out of a node
	 * that is not a kernel, the programmatic port on a default edge. */
	dep_data_put(rec, 0, a, prog, port, 0);
	rec[B - 1] = 1;
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_ERROR_INVALID_VALUE);
	rec[B - 1] = 0;
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B - 1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B + 1), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 1, a, 0, 0, 0);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, 2 * B), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(capture_to_graph(fx.stream, g + 100, rec, B), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(capture_to_graph(fx.stream + 100, g, rec, B), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(capture_to_graph(fx.stream, other, rec, B), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 0, 7, prog, port, 0);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 0, a, prog, port, 1);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 0, a, 2, port, 0);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 0, a, prog, 3, 0);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 0, a, prog, 0, 0);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 0, a, 0, port, 0);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 0, e, prog, port, 0);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 0, e, 0, order, 0);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_ERROR_INVALID_VALUE);
	assert_false(exec_capture_active(&fx.ex));

	/* After a, over its programmatic port: the dependency reads back so. */
	dep_data_put(rec, 0, a, prog, port, 0);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_SUCCESS);
	capture_deps_expect(g, &(struct wire_rec_graph_dep_data){ .node = a, .type = prog, .from_port = port }, 1);
	assert_int_equal(poke_launch(fx.mem + 4), CUDA_SUCCESS);       /* b = 2 */
	capture_deps_expect(g, &(struct wire_rec_graph_dep_data){ .node = 2 }, 1);
	/* Hostile updates: a reserved byte, ragged, no such node, a node of a
	 * graph that does not capture, bad flags, a node twice, bad data. */
	dep_data_put(rec, 0, 2, prog, order, 0);
	rec[B - 1] = 1;
	assert_int_equal(capture_update(g, rec, B, CU_STREAM_SET_CAPTURE_DEPENDENCIES), CUDA_ERROR_INVALID_VALUE);
	rec[B - 1] = 0;
	assert_int_equal(capture_update(g, rec, B - 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(capture_update(g, rec, B, 2), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(capture_update(other, rec, B, CU_STREAM_SET_CAPTURE_DEPENDENCIES), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(capture_update(g + 100, rec, B, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
			 CUDA_ERROR_INVALID_HANDLE);
	dep_data_put(rec, 1, 2, 0, 0, 0);
	assert_int_equal(capture_update(g, rec, 2 * B, CU_STREAM_SET_CAPTURE_DEPENDENCIES), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 0, 9, prog, order, 0);
	assert_int_equal(capture_update(g, rec, B, CU_STREAM_SET_CAPTURE_DEPENDENCIES), CUDA_ERROR_INVALID_VALUE);
	dep_data_put(rec, 0, e, prog, port, 0);
	assert_int_equal(capture_update(g, rec, B, CU_STREAM_SET_CAPTURE_DEPENDENCIES), CUDA_ERROR_INVALID_VALUE);
	/* Refused updates left the dependencies as they were. */
	capture_deps_expect(g, &(struct wire_rec_graph_dep_data){ .node = 2 }, 1);
	/* b over its launch order port, and e added with a default edge. */
	dep_data_put(rec, 0, 2, prog, order, 0);
	assert_int_equal(capture_update(g, rec, B, CU_STREAM_SET_CAPTURE_DEPENDENCIES), CUDA_SUCCESS);
	dep_data_put(rec, 0, e, 0, 0, 0);
	assert_int_equal(capture_update(g, rec, B, CU_STREAM_ADD_CAPTURE_DEPENDENCIES), CUDA_SUCCESS);
	{
		const struct wire_rec_graph_dep_data want[] = {
			{ .node = 2, .type = prog, .from_port = order },
			{ .node = e },
		};

		capture_deps_expect(g, want, 2);
	}
	assert_int_equal(poke_launch(fx.mem + 8), CUDA_SUCCESS);       /* c = 3 */
	assert_int_equal(capture_end(&out), CUDA_SUCCESS);
	assert_int_equal(out, g);
	{
		const struct wire_rec_graph_edge_data want[] = {
			{ .from = a, .to = 2, .type = prog, .from_port = port },
			{ .from = 2, .to = 3, .type = prog, .from_port = order },
			{ .from = e, .to = 3 },
		};

		edges_expect(g, want, 3);
	}
	zero(fx.mem);
	launch_and_sync(instantiated(g));
	assert_int_equal(word_at(fx.mem), 1);
	assert_int_equal(word_at(fx.mem + 4), 1);
	assert_int_equal(word_at(fx.mem + 8), 1);

	/* A memset captured after a programmatic edge: taken, as the H200's
	 * driver takes it; the capture ends with the memset in the graph. */
	dep_data_put(rec, 0, 3, prog, port, 0);
	assert_int_equal(capture_to_graph(fx.stream, g, rec, B), CUDA_SUCCESS);
	assert_int_equal(exec_memset(&fx.ex, &(struct wire_memset_req){ .dst = fx.mem, .width = 4, .count = 4,
							     .stream = fx.stream, .async = 1 }, NULL),
			 CUDA_SUCCESS);
	assert_int_equal(capture_end(&out), CUDA_SUCCESS);
	assert_int_equal(node_count(g), 5);
	assert_false(fx.ex.journal_broken);
}

static CUresult cond_handle(uint64_t g, uint64_t ctx, uint32_t def, uint32_t flags, uint64_t *value)
{
	struct wire_graph_conditional_handle_create_req req = { .graph = g, .ctx = ctx, .default_value = def,
								 .flags = flags };
	struct wire_graph_conditional_handle_create_rep rep = { 0 };
	CUresult res = exec_graph_conditional_handle_create(&fx.ex, &req, &rep);

	*value = rep.value;
	return res;
}

static CUresult cond_add(uint64_t g, struct wire_blob d, uint64_t value, uint32_t type, uint32_t size,
			 uint32_t *node, uint64_t *bodies)
{
	struct wire_graph_add_conditional_node_req req = { .graph = g, .deps = d, .value = value, .type = type,
							   .size = size };
	struct wire_graph_add_conditional_node_rep rep = { 0 };
	CUresult res = exec_graph_add_conditional_node(&fx.ex, &req, &rep);

	if (res == CUDA_SUCCESS) {
		assert_int_equal(rep.bodies.len, size * 8);
		memcpy(bodies, rep.bodies.ptr, size * 8);
		*node = rep.node;
	}
	return res;
}

/* Conditional nodes: hostile handles, types and sizes refused; bodies are
 * graphs of their node (not destroyed, cloned, instantiated or made a
 * child alone); an if/else runs its body by the handle's default; the
 * description (version 3) restores the graph, its handles and the guest's
 * body handles; a destroyed node takes its bodies' handles along. */
static void test_conditional(void **state)
{
	uint64_t g = graph_new(), other = graph_new(), h, h2, hn, nested, bodies[2], exec, restored;
	uint32_t cond, n, dep = 0;
	uint8_t hash[TRACKER_HASH_SIZE];
	size_t len;
	void *desc;
	char err[256];

	assert_int_equal(cond_handle(g, 0, 1, 2, &h), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(cond_handle(fx.stream, 0, 1, 0, &h), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(cond_handle(g, fx.stream, 1, 0, &h), CUDA_ERROR_INVALID_CONTEXT);
	assert_int_equal(cond_handle(g, 0, 1, 0, &h), CUDA_SUCCESS);
	assert_int_equal(cond_handle(other, 0, 0, CU_GRAPH_COND_ASSIGN_DEFAULT, &h2), CUDA_SUCCESS);
	assert_true(h != h2);
	/* Types, sizes, handles, dependencies. */
	assert_int_equal(cond_add(g, (struct wire_blob){ 0 }, h, 3, 1, &cond, bodies), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(cond_add(g, (struct wire_blob){ 0 }, h, CU_GRAPH_COND_TYPE_WHILE, 2, &cond, bodies),
			 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(cond_add(g, (struct wire_blob){ 0 }, h, CU_GRAPH_COND_TYPE_IF, 3, &cond, bodies),
			 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(cond_add(g, (struct wire_blob){ 0 }, h, CU_GRAPH_COND_TYPE_SWITCH, 0, &cond, bodies),
			 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(cond_add(g, (struct wire_blob){ 0 }, h, CU_GRAPH_COND_TYPE_SWITCH, 1u << 20, &cond,
				  bodies), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(cond_add(g, (struct wire_blob){ 0 }, h2, CU_GRAPH_COND_TYPE_IF, 1, &cond, bodies),
			 CUDA_ERROR_INVALID_VALUE);     /* another graph's handle */
	assert_int_equal(cond_add(g, (struct wire_blob){ 0 }, h + 12345, CU_GRAPH_COND_TYPE_IF, 1, &cond, bodies),
			 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(cond_add(g, deps(&dep, 1), h, CU_GRAPH_COND_TYPE_IF, 1, &cond, bodies),
			 CUDA_ERROR_INVALID_VALUE);     /* no node 0 yet */
	assert_int_equal(node_count(g), 0);

	/* if (default 1) { memset 5 } else { memset 7 }, after a memset 0. */
	assert_int_equal(memset_add(g, fx.mem, 0, 4, 256, 1, 0, &n), CUDA_SUCCESS);
	assert_int_equal(cond_add(g, deps(&n, 1), h, CU_GRAPH_COND_TYPE_IF, 2, &cond, bodies), CUDA_SUCCESS);
	assert_true(bodies[0] && bodies[1] && bodies[0] != bodies[1]);
	assert_int_equal(memset_add(bodies[0], fx.mem, 5, 4, 1, 1, 0, &n), CUDA_SUCCESS);
	assert_int_equal(memset_add(bodies[1], fx.mem, 7, 4, 1, 1, 0, &n), CUDA_SUCCESS);
	assert_int_equal(node_count(bodies[0]), 1);
	/* Nested: an if (default 0: never runs) in the first body, on a handle
	 * of that body; the parent's handle is not one of the body's. */
	assert_int_equal(cond_add(bodies[0], (struct wire_blob){ 0 }, h, CU_GRAPH_COND_TYPE_IF, 1, &n, &nested),
			 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(cond_handle(bodies[0], 0, 0, 0, &hn), CUDA_SUCCESS);
	assert_int_equal(cond_add(bodies[0], (struct wire_blob){ 0 }, hn, CU_GRAPH_COND_TYPE_IF, 1, &n, &nested),
			 CUDA_SUCCESS);
	assert_int_equal(memset_add(nested, fx.mem, 0x99, 4, 1, 1, 0, &n), CUDA_SUCCESS);
	assert_int_equal(node_count(bodies[0]), 2);
	{
		struct wire_graph_get_nodes_req req = { .graph = g };
		struct wire_graph_get_nodes_rep rep;
		uint32_t type;

		assert_int_equal(exec_graph_get_nodes(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(rep.nodes.len, 16);
		memcpy(&type, rep.nodes.ptr + 12, 4);
		assert_int_equal(type, CU_GRAPH_NODE_TYPE_CONDITIONAL);
	}
	/* A body is its node's. */
	{
		struct wire_graph_destroy_req gd = { .graph = bodies[0] };
		struct wire_graph_destroy_rep gr;
		struct wire_graph_clone_req cq = { .graph = bodies[1] };
		struct wire_graph_clone_rep cr;
		struct wire_graph_instantiate_req iq = { .graph = bodies[0] };
		struct wire_graph_instantiate_rep ir;
		struct wire_graph_add_child_node_req ch = { .graph = other, .child = bodies[0] };
		struct wire_graph_add_child_node_rep chr;

		assert_int_equal(exec_graph_destroy(&fx.ex, &gd, &gr), CUDA_ERROR_INVALID_VALUE);
		/* The H200's answers: a body cannot be cloned, instantiated or
		 * made a child (NOT_SUPPORTED), nor destroyed (INVALID_VALUE). */
		assert_int_equal(exec_graph_clone(&fx.ex, &cq, &cr), CUDA_ERROR_NOT_SUPPORTED);
		assert_int_equal(exec_graph_instantiate(&fx.ex, &iq, &ir), CUDA_SUCCESS);
		assert_int_equal(ir.status, CUDA_ERROR_NOT_SUPPORTED);
		assert_int_equal(exec_graph_add_child_node(&fx.ex, &ch, &chr), CUDA_ERROR_NOT_SUPPORTED);
		cq.graph = g;   /* a graph with a conditional node cannot be cloned */
		assert_int_not_equal(exec_graph_clone(&fx.ex, &cq, &cr), CUDA_SUCCESS);
	}
	{
		struct wire_graph_instantiate_req req = { .graph = g };
		struct wire_graph_instantiate_rep rep;
		struct wire_graph_exec_update_req uq;
		struct wire_graph_exec_update_rep ur;

		assert_int_equal(exec_graph_instantiate(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(rep.status, CUDA_SUCCESS);
		exec = rep.exec;
		/* One executable at a time. */
		assert_int_equal(exec_graph_instantiate(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(rep.status, CUDA_ERROR_INVALID_VALUE);
		uq = (struct wire_graph_exec_update_req){ .exec = exec, .graph = g };
		assert_int_equal(exec_graph_exec_update(&fx.ex, &uq, &ur), CUDA_SUCCESS);
		assert_int_equal(ur.status, CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
		assert_int_equal(ur.result, CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED);
	}
	launch_and_sync(exec);
	assert_int_equal(word_at(fx.mem), 5);

	/* The description: version 3, decodes and encodes back the same. */
	desc = journaled_desc(g, &len, hash);
	{
		struct graph_desc d;
		uint8_t *again;
		size_t again_len;

		assert_int_equal(le32_of(desc, 4), 3);
		assert_int_equal(graph_desc_decode(&d, desc, len), 0);
		assert_int_equal(d.nhandles, 1);
		assert_int_equal(d.handles[0].value, h);
		assert_int_equal(d.nodes[1].type, CU_GRAPH_NODE_TYPE_CONDITIONAL);
		assert_int_equal(d.nodes[1].cond.size, 2);
		assert_int_equal(d.nodes[1].cond.body_handle[1], bodies[1]);
		assert_int_equal(d.nodes[1].cond.body[0].count, 2);
		assert_int_equal(d.nodes[1].cond.body[0].nhandles, 1);
		assert_int_equal(d.nodes[1].cond.body[0].nodes[1].cond.body_handle[0], nested);
		assert_int_equal(d.weight, 6);
		assert_int_equal(graph_desc_encode(&d, &again, &again_len), 0);
		assert_int_equal(again_len, len);
		assert_memory_equal(again, desc, len);
		free(again);
		graph_desc_release(&d);
	}
	/* Its body handles are taken: a restore beside it is refused. */
	restored = (uint64_t)HANDLE_GRAPH << 56 | 0x999;
	err[0] = 0;
	assert_int_not_equal(exec_graph_restore(&fx.ex, restored, HANDLE_GRAPH, hash, TRACKER_HASH_SIZE, desc, len,
						err, sizeof(err)), CUDA_SUCCESS);
	assert_true(err[0]);
	assert_int_equal(node_count(g), 2);
	/* The executable outlives its graph; the graph's bodies go with it. */
	{
		struct wire_graph_destroy_req gd = { .graph = g };
		struct wire_graph_destroy_rep gr;
		struct wire_graph_get_nodes_req req = { .graph = bodies[0] };
		struct wire_graph_get_nodes_rep rep;

		assert_int_equal(exec_graph_destroy(&fx.ex, &gd, &gr), CUDA_SUCCESS);
		assert_int_equal(exec_graph_get_nodes(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_HANDLE);
		req.graph = nested;
		assert_int_equal(exec_graph_get_nodes(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_HANDLE);
		memset_node_set(exec, g, 0, fx.mem, 1, CUDA_ERROR_INVALID_VALUE);   /* its node is gone */
		zero(fx.mem);
		launch_and_sync(exec);
		assert_int_equal(word_at(fx.mem), 5);
	}
	/* Restored: the bodies under the guest's handles again, the handle
	 * made again (another value on the sim: arguments translated). */
	assert_int_equal(exec_graph_restore(&fx.ex, restored, HANDLE_GRAPH, hash, TRACKER_HASH_SIZE, desc, len,
					    err, sizeof(err)), CUDA_SUCCESS);
	free(desc);
	assert_int_equal(node_count(bodies[1]), 1);
	assert_int_equal(node_count(nested), 1);
	assert_int_equal(memset_add(bodies[1], fx.mem + 4, 9, 4, 1, 1, 0, &n), CUDA_SUCCESS);
	zero(fx.mem);
	launch_and_sync(instantiated(restored));
	assert_int_equal(word_at(fx.mem), 5);
	assert_int_equal(word_at(fx.mem + 4), 0);       /* else body not run */
	/* Destroying the conditional node takes its bodies' handles along. */
	{
		struct wire_graph_destroy_node_req req = { .graph = restored, .node = cond };
		struct wire_graph_destroy_node_rep rep;

		assert_int_equal(exec_graph_destroy_node(&fx.ex, &req, &rep), CUDA_SUCCESS);
		assert_int_equal(empty_add(bodies[0], (struct wire_blob){ 0 }, &n), CUDA_ERROR_INVALID_HANDLE);
		assert_int_equal(empty_add(nested, (struct wire_blob){ 0 }, &n), CUDA_ERROR_INVALID_HANDLE);
		assert_int_equal(node_count(restored), 1);
	}
	assert_false(fx.ex.journal_broken);
}

/* cuGraphChildGraphNodeGetGraph: the embedded graph's handle, once; a node
 * added through it runs with the child node; the description keeps the
 * handle (flag bit 2) and a restore gives it again, nodes in place. */
static void test_embedded(void **state)
{
	uint64_t g = graph_new(), c = graph_new(), restored = (uint64_t)HANDLE_GRAPH << 56 | 0xaaa, e;
	struct wire_graph_child_node_get_graph_req req = { .graph = g };
	struct wire_graph_child_node_get_graph_rep rep;
	uint8_t hash[TRACKER_HASH_SIZE];
	uint32_t n, child;
	size_t len;
	void *desc;
	char err[256];

	assert_int_equal(memset_add(c, fx.mem, 3, 4, 1, 1, 0, &n), CUDA_SUCCESS);
	{
		struct wire_graph_add_child_node_req cq = { .graph = g, .child = c };
		struct wire_graph_add_child_node_rep cr;
		struct wire_graph_destroy_req gd = { .graph = c };
		struct wire_graph_destroy_rep gr;

		assert_int_equal(exec_graph_add_child_node(&fx.ex, &cq, &cr), CUDA_SUCCESS);
		child = cr.node;
		assert_int_equal(exec_graph_destroy(&fx.ex, &gd, &gr), CUDA_SUCCESS);
	}
	req.node = child + 1;
	assert_int_equal(exec_graph_child_node_get_graph(&fx.ex, &req, &rep), CUDA_ERROR_INVALID_VALUE);
	req.node = child;
	assert_int_equal(exec_graph_child_node_get_graph(&fx.ex, &req, &rep), CUDA_SUCCESS);
	e = rep.child;
	assert_int_equal(exec_graph_child_node_get_graph(&fx.ex, &req, &rep), CUDA_SUCCESS);
	assert_int_equal(rep.child, e);
	assert_int_equal(node_count(e), 1);
	assert_int_equal(memset_add(e, fx.mem + 4, 4, 4, 1, 1, 0, &n), CUDA_SUCCESS);
	assert_int_equal(node_count(e), 2);
	{
		struct wire_graph_destroy_req gd = { .graph = e };
		struct wire_graph_destroy_rep gr;

		assert_int_equal(exec_graph_destroy(&fx.ex, &gd, &gr), CUDA_ERROR_INVALID_VALUE);
	}
	desc = journaled_desc(g, &len, hash);
	{
		struct graph_desc d;

		assert_int_equal(le32_of(desc, 4), 2);
		assert_int_equal(graph_desc_decode(&d, desc, len), 0);
		assert_int_equal(d.nodes[child].child_handle, e);
		assert_int_equal(d.nodes[child].child->count, 2);
		assert_int_equal(d.weight, 3);
		graph_desc_release(&d);
	}
	{
		struct wire_graph_destroy_req gd = { .graph = g };
		struct wire_graph_destroy_rep gr;
		struct wire_graph_get_nodes_req nq = { .graph = e };
		struct wire_graph_get_nodes_rep nr;

		assert_int_equal(exec_graph_destroy(&fx.ex, &gd, &gr), CUDA_SUCCESS);
		assert_int_equal(exec_graph_get_nodes(&fx.ex, &nq, &nr), CUDA_ERROR_INVALID_HANDLE);
	}
	assert_int_equal(exec_graph_restore(&fx.ex, restored, HANDLE_GRAPH, hash, TRACKER_HASH_SIZE, desc, len,
					    err, sizeof(err)), CUDA_SUCCESS);
	free(desc);
	assert_int_equal(node_count(e), 2);
	req.graph = restored;
	assert_int_equal(exec_graph_child_node_get_graph(&fx.ex, &req, &rep), CUDA_SUCCESS);
	assert_int_equal(rep.child, e);
	zero(fx.mem);
	launch_and_sync(instantiated(restored));
	assert_int_equal(word_at(fx.mem), 3);
	assert_int_equal(word_at(fx.mem + 4), 4);
	assert_false(fx.ex.journal_broken);
}

int main(int argc, char **argv)
{
	plugin_path = argc > 1 ? argv[1] : NULL;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostile_requests),
		cmocka_unit_test(test_journal_and_restore),
		cmocka_unit_test(test_changes_restore),
		cmocka_unit_test(test_mem_nodes),
		cmocka_unit_test(test_capture),
		cmocka_unit_test(test_large_graph),
		cmocka_unit_test(test_conditional),
		cmocka_unit_test(test_embedded),
		cmocka_unit_test(test_programmatic_edges),
		cmocka_unit_test(test_capture_edges),
		cmocka_unit_test(test_host_copies),
		cmocka_unit_test(test_captured_mem_nodes),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
