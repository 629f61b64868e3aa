/* The executor's review findings (issue 12, item 8) as a hostile guest
 * would use them, on the sim backend, handlers called as the dispatcher
 * calls them:
 *  - a module global a restore moved: every call that names the guest's old
 *    address reaches the global where it is now (exec_device_range);
 *  - the quota: cuCtxSetLimit sizes and images' zero-filled globals count
 *    against it;
 * Each test prints the figure it checks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "exec.h"
#include "wire_dispatch.h"

#define GLOBAL_BYTES 4096u

static const char ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .global .align 8 .b8 gv[4096];\n"
	".visible .entry gk(.param .u64 gk_p)\n{\n\tret;\n}\n";

struct fixture {
	struct backend *be;
	struct exec ex;
	uint64_t mem;           /* 1 MiB in the arena */
	uint64_t module;
	uint64_t now;           /* where the sim put gv */
	uint64_t old;           /* the guest's address of gv, from "before the restore" */
	void *old_map;
};

static struct fixture fx;

static int open_session(uint64_t quota)
{
	struct backend_config bcfg = { .sim_memory = 1ull << 30 };
	struct exec_config cfg = { .device = 0, .arena_base = 0x3a0000000000ull, .arena_size = 8ull << 30,
				   .quota = quota };

	memset(&fx, 0, sizeof(fx));
	return backend_open("sim", &bcfg, &fx.be) || exec_open(&fx.ex, fx.be, &cfg, NULL) ? -1 : 0;
}

static void close_session(void)
{
	exec_close(&fx.ex);
	backend_close(fx.be);
	if (fx.old_map)
		munmap(fx.old_map, GLOBAL_BYTES);
}

/* A session with gv loaded, then moved as a restore moves it: the worker
 * reserves the old address PROT_NONE (checkpoint.md, "Module globals") and
 * keeps it as a second name of the new one. */
static int setup_moved(void **state)
{
	struct wire_mem_alloc_req a = { .bytes = 1 << 20 };
	struct wire_mem_alloc_rep ar;
	struct wire_module_load_data_req ml = { .image = { (const uint8_t *)ptx, sizeof(ptx) } };
	struct wire_module_load_data_rep mr;
	struct wire_module_get_global_req gg = { 0 };
	struct wire_module_get_global_rep gr;

	(void)state;
	if (open_session(0) || exec_mem_alloc(&fx.ex, &a, &ar) || exec_module_load_data(&fx.ex, &ml, &mr))
		return -1;
	gg.module = mr.module;
	strcpy(gg.name, "gv");
	if (exec_module_get_global(&fx.ex, &gg, &gr) || gr.bytes != GLOBAL_BYTES)
		return -1;
	fx.mem = ar.address;
	fx.module = mr.module;
	fx.now = gr.address;
	fx.old_map = mmap(NULL, GLOBAL_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fx.old_map == MAP_FAILED)
		return -1;
	fx.old = (uint64_t)(uintptr_t)fx.old_map;
	exec_extra_range_move(&fx.ex, fx.old, GLOBAL_BYTES, fx.module, fx.now);
	/* The arena's memory holds a pattern the copies take. */
	for (unsigned i = 0; i < 256; i++)
		if (fx.be->cuMemsetD8(fx.mem + i, (unsigned char)(0xa0 + i % 16), 1))
			return -1;
	return fx.be->cuMemsetD8(fx.now, 0, GLOBAL_BYTES) ? -1 : 0;
}

static int teardown_session(void **state)
{
	(void)state;
	close_session();
	return 0;
}

/* Bytes of gv where the sim holds it now. */
static void global_read(uint64_t off, void *out, size_t n)
{
	assert_int_equal(fx.be->cuCtxSynchronize(), CUDA_SUCCESS);
	assert_int_equal(fx.be->cuMemcpyDtoH(out, fx.now + off, n), CUDA_SUCCESS);
}

static bool reached(const char *what, CUresult res, uint64_t off, const void *want, size_t n)
{
	uint8_t got[64];

	if (res != CUDA_SUCCESS) {
		printf("  %-26s at the old address: CUDA error %d\n", what, res);
		return false;
	}
	global_read(off, got, n);
	if (memcmp(got, want, n)) {
		printf("  %-26s at the old address: accepted, but the moved global did not change\n", what);
		return false;
	}
	printf("  %-26s at the old address: reached the moved global\n", what);
	return true;
}

/* Instantiate @graph and launch it on @stream. */
static CUresult graph_run(uint64_t graph, uint64_t stream)
{
	struct wire_graph_instantiate_req gi = { .graph = graph };
	struct wire_graph_instantiate_rep gir;
	struct wire_graph_launch_req gl = { .stream = stream };
	struct wire_graph_launch_rep glr;
	CUresult res = exec_graph_instantiate(&fx.ex, &gi, &gir);

	if (res != CUDA_SUCCESS)
		return res;
	gl.exec = gir.exec;
	return exec_graph_launch(&fx.ex, &gl, &glr);
}

static void test_moved_global_reached(void **state)
{
	uint8_t rows[32], want[16];
	unsigned ok = 0, total = 0;
	CUresult res;

	(void)state;
	/* A 2D copy from the host: two rows of 16 bytes, 64 apart. */
	for (unsigned i = 0; i < sizeof(rows); i++)
		rows[i] = (uint8_t)(1 + i);
	{
		struct wire_memcpy_3d_htod_req r = {
			.dst_type = CU_MEMORYTYPE_DEVICE, .dst = fx.old, .dst_pitch = 64, .width = 16, .height = 2,
			.depth = 1, .data = { rows, sizeof(rows) },
		};
		struct wire_memcpy_3d_htod_rep rep;

		res = exec_memcpy_3d_htod(&fx.ex, &r, &rep);
		total++;
		ok += reached("2D copy (host to device)", res, 64, rows + 16, 16);
	}
	/* A 2D copy between device ranges, from the arena into gv. */
	{
		struct wire_memcpy_3d_req r = {
			.src_type = CU_MEMORYTYPE_DEVICE, .src = fx.mem, .src_pitch = 16,
			.dst_type = CU_MEMORYTYPE_DEVICE, .dst = fx.old + 256, .dst_pitch = 32,
			.width = 16, .height = 1, .depth = 1,
		};
		struct wire_memcpy_3d_rep rep;

		for (unsigned i = 0; i < 16; i++)
			want[i] = (uint8_t)(0xa0 + i);
		res = exec_memcpy_3d(&fx.ex, &r, &rep);
		total++;
		ok += reached("2D copy (device to device)", res, 256, want, 16);
	}
	/* A 2D memset. */
	{
		struct wire_memset_2d_req r = { .dst = fx.old + 512, .pitch = 16, .value = 0x5a, .width = 1,
						.columns = 8, .rows = 2 };
		struct wire_memset_2d_rep rep;

		memset(want, 0x5a, 8);
		res = exec_memset_2d(&fx.ex, &r, &rep);
		total++;
		ok += reached("2D memset", res, 512 + 16, want, 8);
	}
	/* A stream write-value. */
	{
		struct wire_stream_write_value_req r = { .address = fx.old + 1024, .value = 0x12345678, .width = 4 };
		struct wire_stream_write_value_rep rep;
		uint32_t v = 0x12345678;

		res = exec_stream_write_value(&fx.ex, &r, &rep);
		total++;
		ok += reached("stream write-value", res, 1024, &v, 4);
	}
	/* A batch of memory operations: one 64-bit write. */
	{
		uint8_t op[WIRE_REC_BATCH_MEM_OP_BYTES];
		struct wire_rec_batch_mem_op o = { .operation = CU_STREAM_MEM_OP_WRITE_VALUE_64,
						   .address = fx.old + 1032, .value = 0x1122334455667788ull };
		struct wire_stream_batch_mem_op_req r = { .ops = { op, sizeof(op) } };
		struct wire_stream_batch_mem_op_rep rep;
		uint64_t v = o.value;

		wire_rec_batch_mem_op_put(op, 0, &o);
		res = exec_stream_batch_mem_op(&fx.ex, &r, &rep);
		total++;
		ok += reached("batch memory operation", res, 1032, &v, 8);
	}
	/* A graph's memcpy and memset nodes, launched. */
	{
		struct wire_graph_create_req gc = { 0 };
		struct wire_graph_create_rep gcr;
		struct wire_graph_add_memcpy_node_req cn = { .dst = fx.old + 2048, .dst_pitch = 16, .dst_height = 1,
							     .src = fx.mem, .src_pitch = 16, .src_height = 1,
							     .width = 16, .height = 1, .depth = 1 };
		struct wire_graph_add_memcpy_node_rep cnr;
		struct wire_graph_add_memset_node_req sn = { .dst = fx.old + 3072, .pitch = 8, .value = 0x77,
							     .element_size = 1, .width = 8, .height = 1 };
		struct wire_graph_add_memset_node_rep snr;
		uint8_t set[8];

		assert_int_equal(exec_graph_create(&fx.ex, &gc, &gcr), CUDA_SUCCESS);
		cn.graph = sn.graph = gcr.graph;
		res = exec_graph_add_memcpy_node(&fx.ex, &cn, &cnr);
		if (res == CUDA_SUCCESS)
			res = exec_graph_add_memset_node(&fx.ex, &sn, &snr);
		if (res == CUDA_SUCCESS)
			res = graph_run(gcr.graph, 0);
		for (unsigned i = 0; i < 16; i++)
			want[i] = (uint8_t)(0xa0 + i);
		memset(set, 0x77, sizeof(set));
		total += 2;
		ok += reached("graph memcpy node", res, 2048, want, 16);
		ok += reached("graph memset node", res, 3072, set, 8);
	}
	/* A captured memset: the graph read back from the driver names the
	 * guest's address, and its launch reaches the global. */
	{
		struct wire_stream_create_req sc = { .flags = 1 };
		struct wire_stream_create_rep scr;
		struct wire_stream_begin_capture_req bc = { .mode = CU_STREAM_CAPTURE_MODE_GLOBAL };
		struct wire_stream_begin_capture_rep bcr;
		struct wire_stream_end_capture_req ec;
		struct wire_stream_end_capture_rep ecr = { 0 };
		struct wire_memset_req ms = { .dst = fx.old + 3584, .width = 1, .count = 8, .value = 0x66, .async = 1 };
		struct wire_memset_rep msr;
		struct wire_graph_node_get_params_req gp = { .node = 0 };
		struct wire_graph_node_get_params_rep gpr = { 0 };
		uint8_t set[8];

		assert_int_equal(exec_stream_create(&fx.ex, &sc, &scr), CUDA_SUCCESS);
		bc.stream = ms.stream = ec.stream = scr.stream;
		res = exec_stream_begin_capture(&fx.ex, &bc, &bcr);
		if (res == CUDA_SUCCESS)
			res = exec_memset(&fx.ex, &ms, &msr);
		if (res == CUDA_SUCCESS)
			res = exec_stream_end_capture(&fx.ex, &ec, &ecr);
		gp.graph = ecr.graph;
		if (res == CUDA_SUCCESS)
			res = exec_graph_node_get_params(&fx.ex, &gp, &gpr);
		total++;
		if (res == CUDA_SUCCESS && gpr.dst == fx.old + 3584) {
			printf("  %-26s names the guest's old address\n", "captured memset read back");
			ok++;
		} else {
			printf("  %-26s names 0x%llx (CUDA status %d)\n", "captured memset read back",
			       (unsigned long long)gpr.dst, res);
		}
		if (res == CUDA_SUCCESS)
			res = graph_run(ecr.graph, scr.stream);
		memset(set, 0x66, sizeof(set));
		total++;
		ok += reached("captured memset, launched", res, 3584, set, 8);
	}
	/* What was already translated stays so: a copy back to the host. */
	{
		struct wire_memcpy_dtoh_req r = { .src = fx.old + 64, .bytes = 16 };
		struct wire_memcpy_dtoh_rep rep;

		res = exec_memcpy_dtoh(&fx.ex, &r, &rep);
		total++;
		if (res == CUDA_SUCCESS && rep.data.len == 16 && !memcmp(rep.data.ptr, rows + 16, 16)) {
			printf("  %-26s at the old address: read the moved global\n", "copy to the host");
			ok++;
		} else {
			printf("  %-26s at the old address: CUDA error %d\n", "copy to the host", res);
		}
	}
	/* A range that runs past the global is refused, old name or new. */
	{
		uint64_t real = 7;

		assert_false(exec_device_range(&fx.ex, fx.old + GLOBAL_BYTES - 8, 16, &real));
		assert_int_equal(real, 7);
		assert_false(exec_device_range(&fx.ex, fx.now + GLOBAL_BYTES - 8, 16, &real));
		assert_true(exec_device_range(&fx.ex, fx.old + 8, 8, &real));
		assert_int_equal(real, fx.now + 8);
	}
	printf("moved global: %u of %u calls at the guest's old address reached it where it is now\n", ok, total);
	assert_int_equal(ok, total);
}

/* ---- the quota ---- */

#define QUOTA (64ull << 20)

static int setup_quota(void **state)
{
	(void)state;
	return open_session(QUOTA);
}

static CUresult limit_set(uint32_t limit, uint64_t value)
{
	struct wire_ctx_set_limit_req r = { .limit = limit, .value = value };
	struct wire_ctx_set_limit_rep rep;

	return exec_ctx_set_limit(&fx.ex, &r, &rep);
}

static CUresult alloc(uint64_t bytes, uint64_t *addr)
{
	struct wire_mem_alloc_req r = { .bytes = bytes };
	struct wire_mem_alloc_rep rep = { 0 };
	CUresult res = exec_mem_alloc(&fx.ex, &r, &rep);

	*addr = rep.address;
	return res;
}

static void test_limits_in_quota(void **state)
{
	static const struct {
		const char *what;
		uint32_t limit;
		uint64_t value, bytes;      /* what the device would lose */
	} over[] = {
		{ "malloc heap 1 GiB", CU_LIMIT_MALLOC_HEAP_SIZE, 1ull << 30, 1ull << 30 },
		{ "printf FIFO 512 MiB", CU_LIMIT_PRINTF_FIFO_SIZE, 512ull << 20, 512ull << 20 },
		/* 4 KiB for each of 132 SMs x 2048 resident threads */
		{ "stack 4 KiB a thread", CU_LIMIT_STACK_SIZE, 4096, 4096ull * 132 * 2048 },
	};
	uint64_t granted = 0, addr, used;
	CUresult res;

	(void)state;
	for (unsigned i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
		res = limit_set(over[i].limit, over[i].value);
		printf("  %-22s with a %llu MiB quota: CUDA status %d\n", over[i].what,
		       (unsigned long long)(QUOTA >> 20), res);
		if (res == CUDA_SUCCESS)
			granted += over[i].bytes;
		else
			assert_int_equal(res, CUDA_ERROR_OUT_OF_MEMORY);
		limit_set(over[i].limit, over[i].limit == CU_LIMIT_STACK_SIZE ? 1024 :
					 over[i].limit == CU_LIMIT_PRINTF_FIFO_SIZE ? 1 << 20 : 8 << 20);
	}
	/* A heap within the quota counts beside allocations: 8 MiB is the
	 * context's own, 16 more are the guest's. */
	assert_int_equal(limit_set(CU_LIMIT_MALLOC_HEAP_SIZE, 24 << 20), CUDA_SUCCESS);
	used = exec_mem_used(&fx.ex);
	res = alloc(56ull << 20, &addr);
	printf("  heap of 24 MiB, then 56 MiB allocated: CUDA status %d (used %llu MiB)\n", res,
	       (unsigned long long)(used >> 20));
	if (res == CUDA_SUCCESS) {
		struct wire_mem_free_req f = { .address = addr };
		struct wire_mem_free_rep fr;

		granted += 16ull << 20;
		exec_mem_free(&fx.ex, &f, &fr);
	} else {
		assert_int_equal(res, CUDA_ERROR_OUT_OF_MEMORY);
	}
	/* Back to the context's own size: the allocation fits again. */
	assert_int_equal(limit_set(CU_LIMIT_MALLOC_HEAP_SIZE, 8 << 20), CUDA_SUCCESS);
	assert_int_equal(alloc(56ull << 20, &addr), CUDA_SUCCESS);
	/* Other limits are not memory: set as before. */
	assert_int_equal(limit_set(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 32), CUDA_SUCCESS);
	/* Garbage ids fail that call only. */
	assert_int_not_equal(limit_set(0x7fu, 1), CUDA_SUCCESS);
	assert_int_equal(limit_set(EXEC_CTX_SETTING_CACHE_CONFIG, 1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(limit_set(CU_LIMIT_MALLOC_HEAP_SIZE, UINT64_MAX), CUDA_ERROR_OUT_OF_MEMORY);
	printf("limits: %llu MiB of device memory granted past a %llu MiB quota\n",
	       (unsigned long long)(granted >> 20), (unsigned long long)(QUOTA >> 20));
	assert_int_equal(granted, 0);
}

static const char ptx_bss[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .global .align 8 .b8 big[268435456];\n"
	".visible .global .align 8 .b8 big2[268435456];\n"
	".visible .entry gk(.param .u64 gk_p)\n{\n\tret;\n}\n";

static void test_image_globals_in_quota(void **state)
{
	struct wire_module_load_data_req ml = { .image = { (const uint8_t *)ptx_bss, sizeof(ptx_bss) } };
	struct wire_module_load_data_rep mr;
	struct wire_library_load_data_req ll = { .image = { (const uint8_t *)ptx_bss, sizeof(ptx_bss) } };
	struct wire_library_load_data_rep lr;
	struct wire_module_load_data_req small = { .image = { (const uint8_t *)ptx, sizeof(ptx) } };
	struct wire_module_unload_req mu = { 0 };
	struct wire_module_unload_rep mur;
	uint64_t granted = 0, before = exec_mem_used(&fx.ex), with;
	CUresult res;

	(void)state;
	res = exec_module_load_data(&fx.ex, &ml, &mr);
	printf("  module of %zu bytes with 512 MiB of zero-filled globals: CUDA status %d\n", sizeof(ptx_bss), res);
	if (res == CUDA_SUCCESS)
		granted += 512ull << 20;
	else
		assert_int_equal(res, CUDA_ERROR_OUT_OF_MEMORY);
	res = exec_library_load_data(&fx.ex, &ll, &lr);
	printf("  library of the same image: CUDA status %d\n", res);
	if (res == CUDA_SUCCESS)
		granted += 512ull << 20;
	else
		assert_int_equal(res, CUDA_ERROR_OUT_OF_MEMORY);
	assert_int_equal(exec_mem_used(&fx.ex), before + granted);
	/* A module that fits is counted, and given back when unloaded. */
	assert_int_equal(exec_module_load_data(&fx.ex, &small, &mr), CUDA_SUCCESS);
	with = exec_mem_used(&fx.ex);
	mu.module = mr.module;
	assert_int_equal(exec_module_unload(&fx.ex, &mu, &mur), CUDA_SUCCESS);
	printf("  a module with a 4 KiB global: %llu bytes counted while loaded, %llu after unload\n",
	       (unsigned long long)(with - before - granted),
	       (unsigned long long)(exec_mem_used(&fx.ex) - before - granted));
	assert_int_equal(with, before + granted + GLOBAL_BYTES);
	assert_int_equal(exec_mem_used(&fx.ex), before + granted);
	printf("images: %llu MiB of globals loaded past a %llu MiB quota\n", (unsigned long long)(granted >> 20),
	       (unsigned long long)(QUOTA >> 20));
	assert_int_equal(granted, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_moved_global_reached, setup_moved, teardown_session),
		cmocka_unit_test_setup_teardown(test_limits_in_quota, setup_quota, teardown_session),
		cmocka_unit_test_setup_teardown(test_image_globals_in_quota, setup_quota, teardown_session),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
