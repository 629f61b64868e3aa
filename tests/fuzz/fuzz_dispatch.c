/* Fuzz target for the executor behind the wire decoder: any sequence of
 * requests from a hostile guest, run by one session on the sim backend. A
 * request may fail; the worker must not crash, and the session must still
 * answer a plain call afterwards.
 *
 * Input: records of u16 call id, u16 payload length, payload. Every call of
 * the table is dispatched. Before the first input the session holds serial 1
 * of every handle kind and a 1 MiB allocation at the start of the arena
 * (session_open), so that handles and device addresses in the input can be
 * live ones; the seeds of tools/fuzz-seeds name exactly these. An input that
 * destroys one of them (or resets the primary context, which destroys them
 * all) is followed by a new session, so that every input starts from the
 * same objects. */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "fuzz_dispatch.h"
#include "le.h"
#include "log.h"
#include "wire_dispatch.h"

/* What tools/fuzz-seeds writes into the seeds (keep the two in step). */
#define FIXTURE_ARENA 0x360000000000ull
#define FIXTURE_BYTES (1u << 20)
static const char fixture_ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
				  ".visible .entry k(.param .u64 p)\n{\n\tret;\n}\n";

static struct exec ex;
static struct backend *be;
static int ready;
static fuzz_dispatch_observer observer;
static void *observer_arg;

void fuzz_dispatch_observe(fuzz_dispatch_observer fn, void *arg)
{
	observer = fn;
	observer_arg = arg;
}

/* One object of each handle kind, each the first of its kind; abort when a
 * creation fails, since the seeds would then name nothing. */
static void fixture_make(void)
{
	struct wire_blob ptx = { (const uint8_t *)fixture_ptx, sizeof(fixture_ptx) };
	struct wire_mem_alloc_req a = { .bytes = FIXTURE_BYTES };
	struct wire_mem_alloc_rep ar;
	struct wire_stream_create_req s = { 0 };
	struct wire_stream_create_rep sr;
	struct wire_event_create_req e = { 0 };
	struct wire_event_create_rep er;
	struct wire_module_load_data_req m = { .image = ptx };
	struct wire_module_load_data_rep mr;
	struct wire_module_get_function_req f = { .module = (uint64_t)WIRE_HANDLE_MODULE << 56 | 1, .name = "k" };
	struct wire_module_get_function_rep fr;
	struct wire_library_load_data_req l = { .image = ptx };
	struct wire_library_load_data_rep lr;
	struct wire_library_get_kernel_req k = { .library = (uint64_t)WIRE_HANDLE_LIBRARY << 56 | 1, .name = "k" };
	struct wire_library_get_kernel_rep kr;
	struct wire_graph_create_req g = { 0 };
	struct wire_graph_create_rep gr;
	struct wire_graph_instantiate_req gi = { .graph = (uint64_t)WIRE_HANDLE_GRAPH << 56 | 1 };
	struct wire_graph_instantiate_rep gir;
	struct wire_mem_pool_create_req p = { .alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED,
					      .location_type = CU_MEM_LOCATION_TYPE_DEVICE };
	struct wire_mem_pool_create_rep pr;
	struct wire_mem_create_req v = { .size = ex.vmm.gran, .alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED,
					 .location_type = CU_MEM_LOCATION_TYPE_DEVICE };
	struct wire_mem_create_rep vr;
	struct wire_array_create_req ac = { .format = CU_AD_FORMAT_FLOAT, .channels = 1, .width = 64, .height = 64 };
	struct wire_array_create_rep acr;
	struct wire_mipmapped_array_create_req mm = { .format = CU_AD_FORMAT_FLOAT, .channels = 1, .width = 64,
						      .height = 64, .levels = 2 };
	struct wire_mipmapped_array_create_rep mmr;

	if (exec_mem_alloc(&ex, &a, &ar) || ar.address != FIXTURE_ARENA ||
	    exec_stream_create(&ex, &s, &sr) || exec_event_create(&ex, &e, &er) ||
	    exec_module_load_data(&ex, &m, &mr) || mr.module != f.module ||
	    exec_module_get_function(&ex, &f, &fr) ||
	    exec_library_load_data(&ex, &l, &lr) || lr.library != k.library ||
	    exec_library_get_kernel(&ex, &k, &kr) ||
	    exec_graph_create(&ex, &g, &gr) || gr.graph != gi.graph ||
	    exec_graph_instantiate(&ex, &gi, &gir) || exec_mem_pool_create(&ex, &p, &pr) ||
	    exec_mem_create(&ex, &v, &vr) || exec_array_create(&ex, &ac, &acr) ||
	    exec_mipmapped_array_create(&ex, &mm, &mmr))
		abort();
}

/* Whether serial 1 of every kind fixture_make makes is still live (the
 * primary context is). Texture and surface objects are journal only (the
 * guest holds the driver's value); OpenCL's kinds have no fixture here. */
static int fixture_intact(void)
{
	static const enum handle_kind made[] = {
		HANDLE_CONTEXT, HANDLE_MODULE, HANDLE_LIBRARY, HANDLE_FUNCTION, HANDLE_KERNEL, HANDLE_STREAM,
		HANDLE_EVENT, HANDLE_GRAPH, HANDLE_GRAPH_EXEC, HANDLE_MEMPOOL, HANDLE_VMM, HANDLE_ARRAY,
		HANDLE_MIPMAP,
	};

	for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++)
		if (!handle_table_get(ex.handles, (uint64_t)made[i] << 56 | 1, made[i]))
			return 0;
	return 1;
}

static void session_open(void)
{
	struct backend_config bcfg = { .sim_memory = 256ull << 20 };
	struct exec_config cfg = { .device = 0, .arena_base = FIXTURE_ARENA, .arena_size = 4ull << 30,
				   .vmm_size = 4ull << 30, .quota = 128ull << 20 };

	if (!be)
		log_open("fuzz", LOG_ERR, -1);
	if (!be && backend_open("sim", &bcfg, &be))
		abort();
	if (exec_open(&ex, be, &cfg, NULL))
		abort();
	fixture_make();
	if (!fixture_intact())
		abort();
	ready = 1;
}

/* A wait for a value nothing writes stalls the device for good, on a GPU
 * as on the sim: a hang of that session by design, not a fault. Waits of a
 * known type become "at least 0", which holds at once, so that everything
 * else in them (stream, address, width, flag bits) still reaches the
 * handler as the input has it; types the driver does not know stay, for the
 * handler to refuse. */
static void wait_defuse(uint32_t *flags, uint64_t *value)
{
	if ((*flags & 0xf) <= CU_STREAM_WAIT_VALUE_NOR) {
		*flags &= ~0xfu;
		*value = 0;
	}
}

/* Rewrite what a request of @call must not do in a fuzzer (wait_defuse) into
 * @out; 1 if it did, 0 when the payload goes as it is (including one that
 * does not decode, for the decoder to refuse). */
static int request_defuse(uint32_t call, const uint8_t *p, size_t len, struct wire_msg *out)
{
	static uint8_t ops[WIRE_REC_BATCH_MEM_OP_MAX * WIRE_REC_BATCH_MEM_OP_BYTES];
	struct wire_cursor cur;

	wire_cursor_init(&cur, p, len);
	if (call == WIRE_CALL_STREAM_WAIT_VALUE) {
		struct wire_stream_wait_value_req w;

		if (wire_stream_wait_value_req_decode(&cur, &w) < 0)
			return 0;
		wait_defuse(&w.flags, &w.value);
		wire_stream_wait_value_req_encode(out, &w);
		return 1;
	}
	if (call == WIRE_CALL_STREAM_BATCH_MEM_OP) {
		struct wire_stream_batch_mem_op_req b;
		int n;

		if (wire_stream_batch_mem_op_req_decode(&cur, &b) < 0)
			return 0;
		n = wire_rec_batch_mem_op_count(b.ops);
		if (n < 0)
			return 0;
		for (int i = 0; i < n; i++) {
			struct wire_rec_batch_mem_op r;

			if (wire_rec_batch_mem_op_get(b.ops, (uint32_t)i, &r) < 0)
				return 0;
			if (r.operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
			    r.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64)
				wait_defuse(&r.flags, &r.value);
			wire_rec_batch_mem_op_put(ops, (uint32_t)i, &r);
		}
		b.ops.ptr = ops;
		wire_stream_batch_mem_op_req_encode(out, &b);
		return 1;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t defused_payload[1u << 16];
	struct wire_msg reply, defused;
	struct wire_device_get_count_req q;
	struct wire_device_get_count_rep qr;

	if (!ready)
		session_open();
	wire_msg_init(&reply);
	wire_msg_init(&defused);
	while (size >= 4) {
		uint32_t call = (uint32_t)data[0] | (uint32_t)data[1] << 8;
		size_t len = (size_t)data[2] | (size_t)data[3] << 8;
		struct wire_cursor cur;
		int ret = 1;

		data += 4;
		size -= 4;
		if (len > size)
			len = size;
		wire_msg_reset(&defused);
		/* A request re-encoded is no longer than it was: it fits. */
		if (request_defuse(call, data, len, &defused))
			wire_cursor_init(&cur, defused_payload,
					 wire_msg_payload_copy(&defused, defused_payload, sizeof(defused_payload)));
		else
			wire_cursor_init(&cur, data, len);
		wire_msg_reset(&reply);
		if (exec_context_switch(&ex, ex.dev.primary_ctx) == CUDA_SUCCESS)
			ret = wire_dispatch(&ex, call, &cur, &reply);
		if (observer)
			observer(call, ret, ret == 0 && reply.len >= WIRE_HEADER_SIZE + 4 ?
				 (CUresult)le32_get(reply.buf + WIRE_HEADER_SIZE) : CUDA_ERROR_UNKNOWN, observer_arg);
		data += len;
		size -= len;
	}
	wire_msg_release(&defused);
	wire_msg_release(&reply);
	/* Still a working session. */
	if (exec_device_get_count(&ex, &q, &qr) != CUDA_SUCCESS || qr.count != 1)
		abort();
	if (!fixture_intact()) {
		exec_close(&ex);
		session_open();
	}
	return 0;
}
