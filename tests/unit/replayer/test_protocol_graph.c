/* ternd against a hostile guest: graph nodes and conditional nodes
 * (harness: test_protocol.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <cuda.h>

#include "test_protocol.h"

void test_conditional_hostile(void **state)
{
	uint64_t seq = 1, graph, other, event, value, other_value, bodies[2];
	uint32_t status, node, blob_len;
	struct wire_msg m;
	struct reply r;
	int fd = session_open(sock_url, "", &status);

	(void)state;
	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	wire_put_i32(&m, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_PRIMARY_CTX_RETAIN, ++seq, &m, &sock_ctx), CUDA_SUCCESS);
	wire_msg_reset(&m);
	wire_put_u32(&m, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_GRAPH_CREATE, ++seq, &m, &graph), CUDA_SUCCESS);
	assert_int_equal(call_u64(fd, WIRE_CALL_GRAPH_CREATE, ++seq, &m, &other), CUDA_SUCCESS);
	assert_int_equal(call_u64(fd, WIRE_CALL_EVENT_CREATE, ++seq, &m, &event), CUDA_SUCCESS);

	static const struct {
		int graph;              /* 0: the graph, 1: the event, 2: a graph that never was */
		uint64_t ctx;           /* 1: the event */
		uint32_t flags, status;
	} hcs[] = {
		{ 1, 0, 0, CUDA_ERROR_INVALID_HANDLE },
		{ 2, 0, 0, CUDA_ERROR_INVALID_HANDLE },
		{ 0, 0, 2, CUDA_ERROR_INVALID_VALUE },
		{ 0, 0, 0xffffffffu, CUDA_ERROR_INVALID_VALUE },
		{ 0, 1, 0, CUDA_ERROR_INVALID_CONTEXT },
		{ 0, 0x0100000000000777ull, 0, CUDA_ERROR_INVALID_CONTEXT },
	};
	for (size_t i = 0; i < sizeof(hcs) / sizeof(hcs[0]); i++) {
		wire_msg_reset(&m);
		wire_put_u64(&m, hcs[i].graph == 1 ? event : hcs[i].graph == 2 ? 0x0800000000000777ull : graph);
		wire_put_u64(&m, hcs[i].ctx == 1 ? event : hcs[i].ctx);
		wire_put_u32(&m, 1);
		wire_put_u32(&m, hcs[i].flags);
		assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_CONDITIONAL_HANDLE_CREATE, ++seq, &m, UINT32_MAX,
					     NULL), hcs[i].status);
	}
	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	wire_put_u64(&m, sock_ctx);
	wire_put_u32(&m, 1);
	wire_put_u32(&m, CU_GRAPH_COND_ASSIGN_DEFAULT);
	assert_int_equal(call_u64(fd, WIRE_CALL_GRAPH_CONDITIONAL_HANDLE_CREATE, ++seq, &m, &value), CUDA_SUCCESS);
	wire_msg_reset(&m);
	wire_put_u64(&m, other);
	wire_put_u64(&m, 0);
	wire_put_u32(&m, 0);
	wire_put_u32(&m, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_GRAPH_CONDITIONAL_HANDLE_CREATE, ++seq, &m, &other_value),
			 CUDA_SUCCESS);

	static const struct {
		int graph;              /* 0: the graph, 1: the event */
		int value;              /* 0: its handle, 1: the other graph's, 2: none */
		uint32_t dep, type, size, status;
		uint64_t ctx;           /* 1: the event */
	} cases[] = {
		{ 1, 0, NONE_DEP, 1, 1, CUDA_ERROR_INVALID_HANDLE, 0 },
		{ 0, 1, NONE_DEP, 1, 1, CUDA_ERROR_INVALID_VALUE, 0 },
		{ 0, 2, NONE_DEP, 1, 1, CUDA_ERROR_INVALID_VALUE, 0 },
		{ 0, 0, NONE_DEP, 3, 1, CUDA_ERROR_INVALID_VALUE, 0 },
		{ 0, 0, NONE_DEP, 0xffffffffu, 1, CUDA_ERROR_INVALID_VALUE, 0 },
		{ 0, 0, NONE_DEP, 1, 0, CUDA_ERROR_INVALID_VALUE, 0 },          /* while of no body */
		{ 0, 0, NONE_DEP, 1, 2, CUDA_ERROR_INVALID_VALUE, 0 },          /* while of two */
		{ 0, 0, NONE_DEP, 0, 3, CUDA_ERROR_INVALID_VALUE, 0 },          /* if of three */
		{ 0, 0, NONE_DEP, 2, 0, CUDA_ERROR_INVALID_VALUE, 0 },
		{ 0, 0, NONE_DEP, 2, 0xffffffffu, CUDA_ERROR_INVALID_VALUE, 0 }, /* a switch too large */
		{ 0, 0, 0, 1, 1, CUDA_ERROR_INVALID_VALUE, 0 },                 /* no node 0 */
		{ 0, 0, 0xffffffffu, 1, 1, CUDA_ERROR_INVALID_VALUE, 0 },
		{ 0, 0, NONE_DEP, 1, 1, CUDA_ERROR_INVALID_CONTEXT, 1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t v = cases[i].value == 0 ? value : cases[i].value == 1 ? other_value : value ^ 0x5555;

		put_cond_node(&m, cases[i].graph ? event : graph, cases[i].dep == NONE_DEP ? NULL : &cases[i].dep, v,
			      cases[i].type, cases[i].size, cases[i].ctx == 1 ? event : cases[i].ctx);
		assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_ADD_CONDITIONAL_NODE, ++seq, &m, UINT32_MAX, NULL),
				 cases[i].status);
	}
	/* A payload cut short of its context. */
	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	wire_put_u32(&m, 0);
	wire_put_u64(&m, value);
	wire_put_u32(&m, 1);
	wire_put_u32(&m, 1);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_ADD_CONDITIONAL_NODE, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);

	/* An if/else: two bodies, graphs of the node. */
	put_cond_node(&m, graph, NULL, value, CU_GRAPH_COND_TYPE_IF, 2, 0);
	assert_int_equal(call_reply(fd, WIRE_CALL_GRAPH_ADD_CONDITIONAL_NODE, ++seq, &m, &r), CUDA_SUCCESS);
	memcpy(&node, r.payload + 4, 4);
	memcpy(&blob_len, r.payload + 8, 4);
	assert_int_equal(blob_len, 16);
	memcpy(bodies, r.payload + 12, 16);
	assert_int_equal(node, 0);
	for (int k = 0; k < 2; k++) {
		wire_msg_reset(&m);
		wire_put_u64(&m, bodies[k]);
		assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_DESTROY, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		wire_msg_reset(&m);
		wire_put_u64(&m, other);
		wire_put_u32(&m, 0);
		wire_put_u64(&m, bodies[k]);
		assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_ADD_CHILD_NODE, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_NOT_SUPPORTED);
		/* Host and event nodes have no place in a body (the driver's rule). */
		wire_msg_reset(&m);
		wire_put_u64(&m, bodies[k]);
		wire_put_u32(&m, 0);
		wire_put_u64(&m, event);
		wire_put_u32(&m, 0);
		assert_int_not_equal(call_status(fd, WIRE_CALL_GRAPH_ADD_EVENT_NODE, ++seq, &m, UINT32_MAX, NULL),
				     CUDA_SUCCESS);
		/* A node in a body that names the parent's node 0 as its dependency. */
		wire_msg_reset(&m);
		wire_put_u64(&m, bodies[k]);
		put_bytes(&m, &node, 4);
		assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_ADD_EMPTY_NODE, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
	}
	/* A nested conditional needs a handle of its body. */
	put_cond_node(&m, bodies[0], NULL, value, CU_GRAPH_COND_TYPE_WHILE, 1, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_ADD_CONDITIONAL_NODE, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	/* Embedded graphs: only a child graph node has one. */
	static const struct {
		int graph;              /* 0: the graph, 1: the event */
		uint32_t node, status;
	} embeds[] = {
		{ 1, 0, CUDA_ERROR_INVALID_HANDLE },
		{ 0, 0, CUDA_ERROR_INVALID_VALUE },             /* the conditional node */
		{ 0, 1, CUDA_ERROR_INVALID_VALUE },
		{ 0, 0xffffffffu, CUDA_ERROR_INVALID_VALUE },
	};
	for (size_t i = 0; i < sizeof(embeds) / sizeof(embeds[0]); i++) {
		wire_msg_reset(&m);
		wire_put_u64(&m, embeds[i].graph ? event : graph);
		wire_put_u32(&m, embeds[i].node);
		assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_CHILD_NODE_GET_GRAPH, ++seq, &m, UINT32_MAX, NULL),
				 embeds[i].status);
	}
	/* The graph goes, its bodies with it. */
	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_DESTROY, ++seq, &m, UINT32_MAX, NULL), CUDA_SUCCESS);
	wire_msg_reset(&m);
	wire_put_u64(&m, bodies[1]);
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_ADD_EMPTY_NODE, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	wire_msg_release(&m);
	assert_alive(fd, ++seq);
	close(fd);
}

static void put_memset(struct wire_msg *m, uint64_t exec, uint64_t graph, uint32_t node, uint64_t dst,
		       uint32_t element_size, uint64_t width)
{
	wire_msg_reset(m);
	wire_put_u64(m, exec);
	wire_put_u64(m, graph);
	wire_put_u32(m, node);
	wire_put_u64(m, dst);
	wire_put_u64(m, 0);             /* pitch */
	wire_put_u32(m, 1);             /* value */
	wire_put_u32(m, element_size);
	wire_put_u64(m, width);
	wire_put_u64(m, 1);             /* height */
}

static void put_node_ref(struct wire_msg *m, uint64_t exec, uint64_t graph, uint32_t node)
{
	wire_msg_reset(m);
	if (exec != UINT64_MAX)
		wire_put_u64(m, exec);
	wire_put_u64(m, graph);
	wire_put_u32(m, node);
}

/* Graph node parameters read and changed by a guest that lies: bad node
 * indices, nodes of another type, bad graphs, executables and events. */
void test_graph_nodes_hostile(void **state)
{
	uint64_t seq = 1, graph, other, addr, event, exec;
	uint32_t status, nempty, nset, nrec, nchild, type, enabled;
	struct wire_msg m;
	struct reply r;
	int fd = session_open(sock_url, "", &status);

	(void)state;
	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	wire_put_i32(&m, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_PRIMARY_CTX_RETAIN, ++seq, &m, &sock_ctx), CUDA_SUCCESS);
	wire_msg_reset(&m);
	wire_put_u32(&m, 0);
	assert_int_equal(call_u64(fd, WIRE_CALL_GRAPH_CREATE, ++seq, &m, &graph), CUDA_SUCCESS);
	assert_int_equal(call_u64(fd, WIRE_CALL_GRAPH_CREATE, ++seq, &m, &other), CUDA_SUCCESS);
	assert_int_equal(call_u64(fd, WIRE_CALL_EVENT_CREATE, ++seq, &m, &event), CUDA_SUCCESS);
	wire_msg_reset(&m);
	wire_put_u64(&m, 4096);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ALLOC, ++seq, &m, &addr), CUDA_SUCCESS);

	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	wire_put_u32(&m, 0);            /* no dependencies */
	nempty = graph_node_add(fd, &seq, WIRE_CALL_GRAPH_ADD_EMPTY_NODE, &m);
	/* graph_add_memset_node: graph, deps, then the memset's fields. */
	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	wire_put_u32(&m, 0);
	wire_put_u64(&m, addr);
	wire_put_u64(&m, 0);
	wire_put_u32(&m, 1);
	wire_put_u32(&m, 4);
	wire_put_u64(&m, 16);
	wire_put_u64(&m, 1);
	nset = graph_node_add(fd, &seq, WIRE_CALL_GRAPH_ADD_MEMSET_NODE, &m);
	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	wire_put_u32(&m, 0);
	wire_put_u64(&m, event);
	wire_put_u32(&m, 0);
	nrec = graph_node_add(fd, &seq, WIRE_CALL_GRAPH_ADD_EVENT_NODE, &m);
	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	wire_put_u32(&m, 0);
	wire_put_u64(&m, other);
	nchild = graph_node_add(fd, &seq, WIRE_CALL_GRAPH_ADD_CHILD_NODE, &m);

	/* Read back: bad graphs and indices fail, a good node answers. */
	put_node_ref(&m, UINT64_MAX, 0x0800000000000777ull, nset);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_NODE_GET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	put_node_ref(&m, UINT64_MAX, event, nset);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_NODE_GET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	for (uint32_t bad = 4; bad; bad = bad == 4 ? 0xffffffffu : bad == 0xffffffffu ? 0x7fffffffu : 0) {
		put_node_ref(&m, UINT64_MAX, graph, bad);
		assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_NODE_GET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
	}
	put_node_ref(&m, UINT64_MAX, other, nset);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_NODE_GET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_node_ref(&m, UINT64_MAX, graph, nset);
	assert_int_equal(call_reply(fd, WIRE_CALL_GRAPH_NODE_GET_PARAMS, ++seq, &m, &r), CUDA_SUCCESS);
	memcpy(&type, r.payload + 4, 4);
	assert_int_equal(type, CU_GRAPH_NODE_TYPE_MEMSET);
	/* Truncated: the node index is missing. */
	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_NODE_GET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);

	/* Memset setters: wrong node type, memory outside the session,
	 * element sizes and widths that do not fit, then a good one. */
	put_memset(&m, 0, graph, nempty, addr, 4, 16);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMSET_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_memset(&m, 0, graph, nset, 0x1000, 4, 16);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMSET_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_memset(&m, 0, graph, nset, addr, 3, 16);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMSET_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_memset(&m, 0, graph, nset, addr, 4, UINT64_MAX / 2);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMSET_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_memset(&m, 0, graph, nset, addr, 4, 1025);          /* one past the allocation */
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMSET_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_memset(&m, 0x0900000000000777ull, graph, nset, addr, 4, 16);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMSET_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	put_memset(&m, 0, graph, nset, addr, 4, 1024);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMSET_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_SUCCESS);

	/* A memcpy setter on a memset node. */
	put_node_ref(&m, 0, graph, nset);
	for (int k = 0; k < 9; k++)
		wire_put_u64(&m, k == 0 || k == 3 ? addr : 1);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMCPY_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);

	/* Event setters: a bad wait flag, the wrong kind of event node, a
	 * node of another type, an event that is not one. */
	static const struct {
		uint32_t node_of;       /* 0: the record node, 1: the memset node */
		uint64_t event;         /* 0: the real one */
		uint32_t wait;
		uint32_t status;
	} evs[] = {
		{ 0, 0, 2, CUDA_ERROR_INVALID_VALUE },
		{ 0, 0, 1, CUDA_ERROR_INVALID_VALUE },
		{ 1, 0, 0, CUDA_ERROR_INVALID_VALUE },
		{ 0, 0x0700000000000777ull, 0, CUDA_ERROR_INVALID_HANDLE },
		{ 0, 0x0800000000000001ull, 0, CUDA_ERROR_INVALID_HANDLE },
		{ 0, 0, 0, CUDA_SUCCESS },
	};
	for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
		put_node_ref(&m, 0, graph, evs[i].node_of ? nset : nrec);
		wire_put_u64(&m, evs[i].event ? evs[i].event : event);
		wire_put_u32(&m, evs[i].wait);
		assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_EVENT_NODE_SET_EVENT, ++seq, &m, UINT32_MAX, NULL),
				 evs[i].status);
	}

	/* Executables: nodes named in another graph, enabled state of nodes
	 * that have none, of no executable. */
	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	wire_put_u64(&m, 0);
	wire_put_u64(&m, 0);
	assert_int_equal(call_reply(fd, WIRE_CALL_GRAPH_INSTANTIATE, ++seq, &m, &r), CUDA_SUCCESS);
	memcpy(&status, r.payload + 4, 4);
	assert_int_equal(status, CUDA_SUCCESS);
	memcpy(&exec, r.payload + 8, 8);
	put_memset(&m, exec, other, nset, addr, 4, 16);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMSET_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_memset(&m, graph, graph, nset, addr, 4, 16);        /* a graph as the executable */
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMSET_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	put_memset(&m, exec, graph, nset, addr, 4, 8);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_MEMSET_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_SUCCESS);
	put_node_ref(&m, exec, graph, nrec);
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_EXEC_NODE_SET_ENABLED, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_node_ref(&m, 0, graph, nset);
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_EXEC_NODE_SET_ENABLED, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_node_ref(&m, exec, graph, 0xffffffffu);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_EXEC_NODE_GET_ENABLED, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_node_ref(&m, exec, graph, nset);
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_EXEC_NODE_SET_ENABLED, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_SUCCESS);
	put_node_ref(&m, exec, graph, nset);
	assert_int_equal(call_reply(fd, WIRE_CALL_GRAPH_EXEC_NODE_GET_ENABLED, ++seq, &m, &r), CUDA_SUCCESS);
	memcpy(&enabled, r.payload + 4, 4);
	assert_int_equal(enabled, 0);

	/* A child node's graph replaced: no executable, a node that is not a
	 * child graph node, a child that is not a graph. */
	static const struct {
		bool exec, child_node;
		uint64_t child;         /* 0: the other graph */
		uint32_t status;
	} kids[] = {
		{ false, true, 0, CUDA_ERROR_INVALID_VALUE },
		{ true, false, 0, CUDA_ERROR_INVALID_VALUE },
		{ true, true, 0x0800000000000777ull, CUDA_ERROR_INVALID_HANDLE },
		{ true, true, 1, CUDA_ERROR_INVALID_HANDLE },   /* the event, below */
		{ true, true, 0, CUDA_SUCCESS },
	};
	for (size_t i = 0; i < sizeof(kids) / sizeof(kids[0]); i++) {
		put_node_ref(&m, kids[i].exec ? exec : 0, graph, kids[i].child_node ? nchild : nset);
		wire_put_u64(&m, kids[i].child == 1 ? event : kids[i].child ? kids[i].child : other);
		assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_EXEC_CHILD_NODE_SET_PARAMS, ++seq, &m, UINT32_MAX,
					     NULL), kids[i].status);
	}

	/* Kernel node attributes of nodes that are not kernel nodes, of graphs
	 * that are not graphs, values of the wrong size. */
	put_node_ref(&m, UINT64_MAX, graph, nset);
	wire_put_u32(&m, CU_LAUNCH_ATTRIBUTE_PRIORITY);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_KERNEL_NODE_GET_ATTRIBUTE, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_node_ref(&m, UINT64_MAX, exec, nset);
	wire_put_u32(&m, CU_LAUNCH_ATTRIBUTE_PRIORITY);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_KERNEL_NODE_GET_ATTRIBUTE, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	{
		uint8_t value[65] = { 0 };

		for (uint32_t len = 64; len <= 65; len++) {
			put_node_ref(&m, UINT64_MAX, graph, len == 64 ? nset : 0xffffffffu);
			wire_put_u32(&m, CU_LAUNCH_ATTRIBUTE_PRIORITY);
			put_bytes(&m, value, len);
			assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_KERNEL_NODE_SET_ATTRIBUTE, ++seq, &m,
						     UINT32_MAX, NULL), CUDA_ERROR_INVALID_VALUE);
		}
	}
	put_node_ref(&m, UINT64_MAX, graph, nset);
	wire_put_u64(&m, 0x0800000000000777ull);
	wire_put_u32(&m, nset);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_KERNEL_NODE_COPY_ATTRIBUTES, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	put_node_ref(&m, UINT64_MAX, other, 0);
	wire_put_u64(&m, graph);
	wire_put_u32(&m, nset);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_KERNEL_NODE_COPY_ATTRIBUTES, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);

	/* Captures into a graph: a bad mode, a graph that is not one, a
	 * dependency that is not a node of it, edge data the driver refuses
	 * or whose reserved byte is set, a record cut short (the old 4-byte
	 * form) and a request cut short; the legacy stream cannot. */
	static const struct {
		uint64_t graph;         /* 0: the graph */
		uint32_t dep, mode, status;
		uint8_t data[4];        /* from_port, to_port, type, reserved */
		uint32_t len;           /* of the deps blob; 0: one record */
	} caps[] = {
		{ 0, 0, 3, CUDA_ERROR_INVALID_VALUE, { 0 }, 0 },
		{ 0x0800000000000777ull, 0, 0, CUDA_ERROR_INVALID_HANDLE, { 0 }, 0 },
		{ 1, 0, 0, CUDA_ERROR_INVALID_HANDLE, { 0 }, 0 },         /* the event */
		{ 0, 99, 0, CUDA_ERROR_INVALID_VALUE, { 0 }, 0 },
		{ 0, 0xffffffffu, 0, CUDA_ERROR_INVALID_VALUE, { 0 }, 0 },
		{ 0, 0, 0, CUDA_ERROR_INVALID_VALUE, { 0, 0, 0, 1 }, 0 },
		{ 0, 0, 0, CUDA_ERROR_INVALID_VALUE, { 1, 0, 1, 0 }, 0 },  /* programmatic out of an empty node */
		{ 0, 0, 0, CUDA_ERROR_INVALID_VALUE, { 0, 0, 0, 0 }, 4 },
		{ 0, 0, 0, CUDA_ERROR_INVALID_VALUE, { 0, 0, 0, 0 }, 7 },
	};
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		uint8_t dep[WIRE_REC_GRAPH_DEP_DATA_BYTES];

		memcpy(dep, &caps[i].dep, 4);
		memcpy(dep + 4, caps[i].data, 4);
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);    /* the NULL stream */
		wire_put_u64(&m, caps[i].graph == 1 ? event : caps[i].graph ? caps[i].graph : graph);
		put_bytes(&m, dep, caps[i].len ? caps[i].len : sizeof(dep));
		wire_put_u32(&m, caps[i].mode);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_BEGIN_CAPTURE_TO_GRAPH_DATA, ++seq, &m, UINT32_MAX,
					     NULL), caps[i].status);
	}
	wire_msg_reset(&m);
	wire_put_u64(&m, 0);
	wire_put_u64(&m, graph);
	wire_put_u32(&m, 0);            /* no dependencies, and no mode */
	assert_int_equal(call_status(fd, WIRE_CALL_STREAM_BEGIN_CAPTURE_TO_GRAPH_DATA, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_STREAM_BEGIN_CAPTURE_TO_GRAPH_DATA, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	/* Dependencies of a capture that is not there: a stream that is not
	 * one, a graph that does not capture, a record cut short. */
	{
		uint8_t dep[WIRE_REC_GRAPH_DEP_DATA_BYTES] = { 0 };

		wire_msg_reset(&m);
		wire_put_u64(&m, event);
		wire_put_u64(&m, graph);
		put_bytes(&m, dep, sizeof(dep));
		wire_put_u32(&m, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_UPDATE_CAPTURE_DEPENDENCIES_DATA, ++seq, &m,
					     UINT32_MAX, NULL), CUDA_ERROR_INVALID_HANDLE);
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u64(&m, graph);
		put_bytes(&m, dep, sizeof(dep));
		wire_put_u32(&m, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_UPDATE_CAPTURE_DEPENDENCIES_DATA, ++seq, &m,
					     UINT32_MAX, NULL), CUDA_ERROR_INVALID_VALUE);
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u64(&m, graph);
		put_bytes(&m, dep, sizeof(dep) - 1);
		wire_put_u32(&m, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_UPDATE_CAPTURE_DEPENDENCIES_DATA, ++seq, &m,
					     UINT32_MAX, NULL), CUDA_ERROR_INVALID_VALUE);
		/* Capture info: unknown want bits, a request cut short. */
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		wire_put_u32(&m, 4);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_GET_CAPTURE_INFO_DATA, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		wire_msg_reset(&m);
		wire_put_u64(&m, 0);
		assert_int_equal(call_status(fd, WIRE_CALL_STREAM_GET_CAPTURE_INFO_DATA, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
	}

	/* Dot text: a graph that is not one, flags no driver knows. */
	wire_msg_reset(&m);
	wire_put_u64(&m, exec);
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_DEBUG_DOT_PRINT, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_HANDLE);
	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	wire_put_u32(&m, 1u << 20);
	assert_int_equal(call_status(fd, WIRE_CALL_GRAPH_DEBUG_DOT_PRINT, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	wire_msg_reset(&m);
	wire_put_u64(&m, graph);
	wire_put_u32(&m, 1);
	assert_int_equal(call_reply(fd, WIRE_CALL_GRAPH_DEBUG_DOT_PRINT, ++seq, &m, &r), CUDA_SUCCESS);
	assert_true(r.len > 8 && memmem(r.payload + 8, r.len - 8, "digraph", 7));

	wire_msg_release(&m);
	assert_alive(fd, ++seq);
	sock_ctx = 0;
	close(fd);
}

/* Device queries (ids 350-355): bus ids that do not parse or name no
 * device, formats, operation lists and attributes that do not exist, devices
 * out of range; each fails alone, and good ones answer in guest terms. */
