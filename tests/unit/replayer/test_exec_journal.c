/* The executor journals what the guest creates and drops what it frees, so
 * the session's tracker holds its live state (sim backend, handlers called
 * as the dispatcher calls them). */
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

#include "exec.h"
#include "tracker.h"
#include "wire_dispatch.h"

static const char ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry jt_kernel(.param .u64 jt_p, .param .u32 jt_n)\n{\n\tret;\n}\n";

struct counts {
	unsigned by_kind[HANDLE_KIND_MAX];
	unsigned regions;
};

static int count_object(void *ctx, uint64_t handle, const struct tracker_object *o)
{
	struct counts *c = ctx;

	if (o->kind < HANDLE_KIND_MAX)
		c->by_kind[o->kind]++;
	return 0;
}

static int count_region(void *ctx, uint64_t addr, const struct tracker_region *r)
{
	((struct counts *)ctx)->regions++;
	return 0;
}

static struct counts journal_count(struct exec *ex)
{
	struct counts c = { 0 };

	assert_int_equal(tracker_object_foreach(ex->journal, NULL, 0, count_object, &c), 0);
	assert_int_equal(tracker_region_foreach(ex->journal, count_region, &c), 0);
	return c;
}

/* Close the session and the backend, remove the journal's directory. */
static void fixture_close(struct exec *ex, struct backend *be, const char *dir)
{
	char cmd[128];

	exec_close(ex);
	backend_close(be);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

static void test_journal_follows_calls(void **state)
{
	struct backend_config bcfg = { .sim_memory = 1ull << 30 };
	struct exec_config cfg = { .device = 0, .arena_base = 0x340000000000ull, .arena_size = 8ull << 30 };
	char dir[] = "/tmp/tern-exec-journal-XXXXXX";
	struct backend *be;
	struct exec ex;
	struct counts c;
	struct wire_mem_alloc_req alloc = { .bytes = 3 << 20 };
	struct wire_mem_alloc_rep alloc_rep;
	struct wire_stream_create_req sc = { .flags = 1, .priority = -1 };
	struct wire_stream_create_rep sc_rep;
	struct wire_event_create_req ec = { .flags = 2 };
	struct wire_event_create_rep ec_rep;
	struct wire_module_load_data_req ml = { .image = { (const uint8_t *)ptx, sizeof(ptx) } };
	struct wire_module_load_data_rep ml_rep;
	struct wire_module_get_function_req gf = { 0 };
	struct wire_module_get_function_rep gf_rep;
	struct tracker_object o;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(backend_open("sim", &bcfg, &be), 0);
	assert_int_equal(exec_open(&ex, be, &cfg, NULL), 0);
	assert_int_equal(exec_journal_open(&ex, dir, "journal-test"), 0);
	c = journal_count(&ex);
	assert_int_equal(c.by_kind[HANDLE_CONTEXT], 1);

	assert_int_equal(exec_mem_alloc(&ex, &alloc, &alloc_rep), CUDA_SUCCESS);
	assert_int_equal(exec_stream_create(&ex, &sc, &sc_rep), CUDA_SUCCESS);
	assert_int_equal(exec_event_create(&ex, &ec, &ec_rep), CUDA_SUCCESS);
	assert_int_equal(exec_module_load_data(&ex, &ml, &ml_rep), CUDA_SUCCESS);
	/* A listed function is journaled under its name, and a lookup by name
	 * gives the same handle. Bad handles fail the request only. */
	{
		struct wire_module_get_function_count_req fc = { .module = ml_rep.module };
		struct wire_module_get_function_count_rep fc_rep;
		struct wire_module_enumerate_functions_req ef = { .module = ml_rep.module, .max = 4 };
		struct wire_module_enumerate_functions_rep ef_rep;
		uint64_t listed;

		assert_int_equal(exec_module_get_function_count(&ex, &fc, &fc_rep), CUDA_SUCCESS);
		assert_int_equal(fc_rep.count, 1);
		assert_int_equal(exec_module_enumerate_functions(&ex, &ef, &ef_rep), CUDA_SUCCESS);
		assert_int_equal(ef_rep.functions.len, 8);
		memcpy(&listed, ef_rep.functions.ptr, 8);
		gf.module = ml_rep.module;
		strcpy(gf.name, "jt_kernel");
		assert_int_equal(exec_module_get_function(&ex, &gf, &gf_rep), CUDA_SUCCESS);
		assert_int_equal(gf_rep.function, listed);
		ef.module = sc_rep.stream;
		assert_int_equal(exec_module_enumerate_functions(&ex, &ef, &ef_rep),
				 CUDA_ERROR_INVALID_HANDLE);
		fc.module = 0;
		assert_int_equal(exec_module_get_function_count(&ex, &fc, &fc_rep),
				 CUDA_ERROR_INVALID_HANDLE);
	}
	c = journal_count(&ex);
	assert_int_equal(c.regions, 1);
	assert_int_equal(c.by_kind[HANDLE_STREAM], 1);
	assert_int_equal(c.by_kind[HANDLE_EVENT], 1);
	assert_int_equal(c.by_kind[HANDLE_MODULE], 1);
	assert_int_equal(c.by_kind[HANDLE_FUNCTION], 1);

	/* Creation arguments are what a restore needs. */
	assert_int_equal(tracker_object_get(ex.journal, sc_rep.stream, &o), 0);
	assert_int_equal(o.args_len, 8);
	assert_int_equal(((const uint8_t *)o.args)[0], 1);
	assert_int_equal(tracker_object_get(ex.journal, gf_rep.function, &o), 0);
	assert_int_equal(o.parent, ml_rep.module);
	assert_int_equal(o.args_len, 4 + strlen("jt_kernel"));
	assert_memory_equal((const uint8_t *)o.args + 4, "jt_kernel", strlen("jt_kernel"));

	/* Settings follow the arguments; a second value replaces the first
	 * (docs/journal.md, "Settings"). */
	{
		struct wire_func_set_attribute_req fa = {
			.attrib = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, .function = gf_rep.function,
			.value = 64 << 10,
		};
		struct wire_func_set_attribute_rep fa_rep;
		struct wire_func_set_cache_config_req fc = {
			.function = gf_rep.function, .config = CU_FUNC_CACHE_PREFER_L1,
		};
		struct wire_func_set_cache_config_rep fc_rep;
		struct wire_stream_set_attribute_req sa = { .stream = sc_rep.stream,
			.attrib = CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY };
		struct wire_stream_set_attribute_rep sa_rep;
		struct wire_ctx_set_limit_req sl = { .limit = CU_LIMIT_STACK_SIZE, .value = 4096 };
		struct wire_ctx_set_limit_rep sl_rep;
		CUstreamAttrValue v = { 0 };
		const void *meta;
		size_t meta_len;
		uint32_t id;
		int32_t val;

		assert_int_equal(exec_context_switch(&ex, ex.dev.primary_ctx), CUDA_SUCCESS);
		assert_int_equal(exec_func_set_attribute(&ex, &fa, &fa_rep), CUDA_SUCCESS);
		fa.value = 96 << 10;
		assert_int_equal(exec_func_set_attribute(&ex, &fa, &fa_rep), CUDA_SUCCESS);
		assert_int_equal(exec_func_set_cache_config(&ex, &fc, &fc_rep), CUDA_SUCCESS);
		fa.value = 1 << 30;     /* refused by the device: not journaled */
		assert_int_equal(exec_func_set_attribute(&ex, &fa, &fa_rep), CUDA_ERROR_INVALID_VALUE);
		assert_int_equal(tracker_object_get(ex.journal, gf_rep.function, &o), 0);
		assert_int_equal(o.args_len, 4 + strlen("jt_kernel") + 2 * EXEC_FUNC_SETTING_RECORD);
		memcpy(&id, (const uint8_t *)o.args + 4 + strlen("jt_kernel"), 4);
		memcpy(&val, (const uint8_t *)o.args + 8 + strlen("jt_kernel"), 4);
		assert_int_equal(id, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
		assert_int_equal(val, 96 << 10);
		memcpy(&id, (const uint8_t *)o.args + 12 + strlen("jt_kernel"), 4);
		assert_int_equal(id, EXEC_FUNC_SETTING_CACHE_CONFIG);

		v.syncPolicy = CU_SYNC_POLICY_YIELD;
		sa.value = (struct wire_blob){ (const uint8_t *)&v, sizeof(v) };
		assert_int_equal(exec_stream_set_attribute(&ex, &sa, &sa_rep), CUDA_SUCCESS);
		assert_int_equal(exec_stream_set_attribute(&ex, &sa, &sa_rep), CUDA_SUCCESS);
		assert_int_equal(tracker_object_get(ex.journal, sc_rep.stream, &o), 0);
		assert_int_equal(o.args_len, 8 + EXEC_STREAM_SETTING_RECORD);

		assert_int_equal(exec_ctx_set_limit(&ex, &sl, &sl_rep), CUDA_SUCCESS);
		sl.value = 8192;
		assert_int_equal(exec_ctx_set_limit(&ex, &sl, &sl_rep), CUDA_SUCCESS);
		assert_int_equal(tracker_meta_bytes_get(ex.journal, EXEC_META_CTX_SETTINGS, &meta, &meta_len), 0);
		assert_int_equal(meta_len, EXEC_CTX_SETTING_RECORD);
		assert_int_equal(((const uint8_t *)meta)[8] | ((const uint8_t *)meta)[9] << 8, 8192);
	}

	/* Managed memory is a region of its own kind, freed like any other. */
	{
		struct wire_mem_alloc_managed_req ma = { .bytes = 5000, .flags = CU_MEM_ATTACH_GLOBAL };
		struct wire_mem_alloc_managed_rep ma_rep;
		struct wire_mem_free_req mf;
		struct wire_mem_free_rep mf_rep;
		struct tracker_region reg;

		assert_int_equal(exec_mem_alloc_managed(&ex, &ma, &ma_rep), CUDA_SUCCESS);
		assert_int_equal(tracker_region_get(ex.journal, ma_rep.address, &reg), 0);
		assert_int_equal(reg.kind, EXEC_REGION_MANAGED);
		assert_int_equal(reg.size, 5000);
		ma.flags = CU_MEM_ATTACH_SINGLE;        /* an attachment, not an allocation flag */
		assert_int_equal(exec_mem_alloc_managed(&ex, &ma, &ma_rep), CUDA_ERROR_INVALID_VALUE);
		mf.address = ma_rep.address;
		assert_int_equal(exec_mem_free(&ex, &mf, &mf_rep), CUDA_SUCCESS);
		assert_int_equal(tracker_region_get(ex.journal, mf.address, &reg), -ENOENT);
	}

	/* Freed objects drop their records; a module takes its functions along. */
	{
		struct wire_mem_free_req mf = { .address = alloc_rep.address };
		struct wire_mem_free_rep mf_rep;
		struct wire_stream_destroy_req sd = { .stream = sc_rep.stream };
		struct wire_stream_destroy_rep sd_rep;
		struct wire_module_unload_req mu = { .module = ml_rep.module };
		struct wire_module_unload_rep mu_rep;

		assert_int_equal(exec_mem_free(&ex, &mf, &mf_rep), CUDA_SUCCESS);
		assert_int_equal(exec_stream_destroy(&ex, &sd, &sd_rep), CUDA_SUCCESS);
		assert_int_equal(exec_module_unload(&ex, &mu, &mu_rep), CUDA_SUCCESS);
	}
	c = journal_count(&ex);
	assert_int_equal(c.regions, 0);
	assert_int_equal(c.by_kind[HANDLE_STREAM], 0);
	assert_int_equal(c.by_kind[HANDLE_MODULE], 0);
	assert_int_equal(c.by_kind[HANDLE_FUNCTION], 0);
	assert_int_equal(c.by_kind[HANDLE_EVENT], 1);
	assert_false(ex.journal_broken);

	/* Pools are objects, their blocks regions they own; cuMemFree takes a
	 * pool's block too, and its pool stops counting it. */
	{
		struct wire_device_get_default_mem_pool_req dq = { .device = 0 };
		struct wire_device_get_default_mem_pool_rep dq_rep;
		struct wire_mem_pool_create_req pc = {
			.alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED,
			.location_type = CU_MEM_LOCATION_TYPE_DEVICE,
		};
		struct wire_mem_pool_create_rep pc_rep;
		struct wire_mem_alloc_async_req aa = { .bytes = 5 << 20 };
		struct wire_mem_alloc_async_rep aa_rep, ab_rep;
		struct wire_mem_pool_get_attribute_req ga = { .attrib = CU_MEMPOOL_ATTR_USED_MEM_CURRENT };
		struct wire_mem_pool_get_attribute_rep ga_rep;
		struct wire_mem_free_req mf = { 0 };
		struct wire_mem_free_rep mf_rep;
		struct wire_mem_free_async_req fa = { .address = 0x1234 };
		struct wire_mem_free_async_rep fa_rep;
		struct wire_mem_pool_destroy_req pd = { 0 };
		struct wire_mem_pool_destroy_rep pd_rep;
		struct tracker_region r;

		assert_int_equal(exec_device_get_default_mem_pool(&ex, &dq, &dq_rep), CUDA_SUCCESS);
		assert_int_equal(exec_mem_pool_create(&ex, &pc, &pc_rep), CUDA_SUCCESS);
		pc.handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		assert_int_equal(exec_mem_pool_create(&ex, &pc, &pc_rep), CUDA_ERROR_NOT_SUPPORTED);
		aa.pool = pc_rep.pool;
		assert_int_equal(exec_mem_alloc_async(&ex, &aa, &aa_rep), CUDA_SUCCESS);
		aa.pool = 0;
		assert_int_equal(exec_mem_alloc_async(&ex, &aa, &ab_rep), CUDA_SUCCESS);
		c = journal_count(&ex);
		assert_int_equal(c.by_kind[HANDLE_MEMPOOL], 2);
		assert_int_equal(c.regions, 2);
		assert_int_equal(tracker_region_get(ex.journal, aa_rep.address, &r), 0);
		assert_int_equal(r.owner, pc_rep.pool);
		assert_int_equal(tracker_region_get(ex.journal, ab_rep.address, &r), 0);
		assert_int_equal(r.owner, dq_rep.pool);
		ga.pool = pc_rep.pool;
		assert_int_equal(exec_mem_pool_get_attribute(&ex, &ga, &ga_rep), CUDA_SUCCESS);
		assert_int_equal(ga_rep.value, 5 << 20);

		mf.address = aa_rep.address;
		assert_int_equal(exec_mem_free(&ex, &mf, &mf_rep), CUDA_SUCCESS);
		assert_int_equal(exec_mem_pool_get_attribute(&ex, &ga, &ga_rep), CUDA_SUCCESS);
		assert_int_equal(ga_rep.value, 0);
		/* Hostile frees and destroys fail alone. */
		assert_int_equal(exec_mem_free_async(&ex, &fa, &fa_rep), CUDA_ERROR_INVALID_VALUE);
		fa.address = ab_rep.address;
		fa.stream = 0x0600000000000777ull;
		assert_int_equal(exec_mem_free_async(&ex, &fa, &fa_rep), CUDA_ERROR_INVALID_HANDLE);
		pd.pool = dq_rep.pool;
		assert_int_equal(exec_mem_pool_destroy(&ex, &pd, &pd_rep), CUDA_ERROR_INVALID_VALUE);
		pd.pool = sc_rep.stream;
		assert_int_equal(exec_mem_pool_destroy(&ex, &pd, &pd_rep), CUDA_ERROR_INVALID_VALUE);
		pd.pool = pc_rep.pool;
		assert_int_equal(exec_mem_pool_destroy(&ex, &pd, &pd_rep), CUDA_SUCCESS);
		fa.stream = 0;
		assert_int_equal(exec_mem_free_async(&ex, &fa, &fa_rep), CUDA_SUCCESS);
		c = journal_count(&ex);
		assert_int_equal(c.by_kind[HANDLE_MEMPOOL], 1);
		assert_int_equal(c.regions, 0);
	}
	assert_false(ex.journal_broken);

	fixture_close(&ex, be, dir);
}

/* VMM: an allocation is an object holding its references, a mapping a region
 * with its access, the reservations one meta value; the quota counts the
 * allocation from creation; released and unmapped, all of it goes. */
static void test_journal_vmm(void **state)
{
	const uint64_t g = 2u << 20;
	struct backend_config bcfg = { .sim_memory = 1ull << 30 };
	struct exec_config cfg = { .device = 0, .arena_base = 0x3c0000000000ull, .arena_size = 8ull << 30,
				   .vmm_size = 64ull << 30, .quota = 16ull << 20 };
	char dir[] = "/tmp/tern-exec-vmm-XXXXXX";
	struct backend *be;
	struct exec ex;
	struct wire_mem_address_reserve_req rr = { .size = 4 * g };
	struct wire_mem_address_reserve_rep rr_rep;
	struct wire_mem_create_req cr = { .size = g, .alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED,
					  .location_type = CU_MEM_LOCATION_TYPE_DEVICE };
	struct wire_mem_create_rep cr_rep, big_rep;
	struct wire_vmm_map_req mr = { .size = g };
	struct wire_vmm_map_rep mr_rep;
	uint32_t desc[3] = { CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	struct wire_mem_set_access_req sa = { .size = g, .descs = { (const uint8_t *)desc, sizeof(desc) } };
	struct wire_mem_set_access_rep sa_rep;
	struct wire_mem_release_req rl;
	struct wire_mem_release_rep rl_rep;
	struct wire_vmm_unmap_req um = { .size = g };
	struct wire_vmm_unmap_rep um_rep;
	struct tracker_object o;
	struct tracker_region r;
	const void *list;
	size_t list_len;
	uint32_t refs;
	uint64_t real;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(backend_open("sim", &bcfg, &be), 0);
	assert_int_equal(exec_open(&ex, be, &cfg, NULL), 0);
	assert_int_equal(exec_journal_open(&ex, dir, "vmm-test"), 0);
	assert_int_equal(ex.vmm.base, cfg.arena_base + EXEC_DEVICES_MAX * cfg.arena_size);

	assert_int_equal(exec_mem_address_reserve(&ex, &rr, &rr_rep), CUDA_SUCCESS);
	assert_int_equal(tracker_meta_bytes_get(ex.journal, TRACKER_META_USER + 0x102, &list, &list_len), 0);
	assert_int_equal(list_len, 16);
	assert_memory_equal(list, &rr_rep.address, 8);
	assert_int_equal(exec_mem_create(&ex, &cr, &cr_rep), CUDA_SUCCESS);
	assert_int_equal(exec_mem_used(&ex), g);
	cr.size = 8 * g;                                /* past the quota with the first */
	assert_int_equal(exec_mem_create(&ex, &cr, &big_rep), CUDA_ERROR_OUT_OF_MEMORY);
	assert_int_equal(tracker_object_get(ex.journal, cr_rep.mem, &o), 0);
	assert_int_equal(o.kind, HANDLE_VMM);
	assert_int_equal(o.args_len, 32);
	memcpy(&refs, (const uint8_t *)o.args + 4, 4);
	assert_int_equal(refs, 1);

	mr.address = rr_rep.address + g;
	mr.mem = cr_rep.mem;
	assert_int_equal(exec_vmm_map(&ex, &mr, &mr_rep), CUDA_SUCCESS);
	assert_false(exec_device_range(&ex, mr.address, 64, &real));     /* no access yet */
	sa.address = mr.address;
	assert_int_equal(exec_mem_set_access(&ex, &sa, &sa_rep), CUDA_SUCCESS);
	assert_true(exec_device_range(&ex, mr.address, g, &real));
	assert_int_equal(real, mr.address);
	assert_false(exec_device_range(&ex, mr.address, g + 1, &real));
	assert_int_equal(tracker_region_get(ex.journal, mr.address, &r), 0);
	assert_int_equal(r.kind, EXEC_REGION_VMM);
	assert_int_equal(r.owner, cr_rep.mem);
	assert_int_equal(r.flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

	/* Released while mapped: kept, with no reference of the guest's. */
	rl.mem = cr_rep.mem;
	assert_int_equal(exec_mem_release(&ex, &rl, &rl_rep), CUDA_SUCCESS);
	assert_int_equal(tracker_object_get(ex.journal, cr_rep.mem, &o), 0);
	memcpy(&refs, (const uint8_t *)o.args + 4, 4);
	assert_int_equal(refs, 0);
	assert_int_equal(exec_vmm_map(&ex, &mr, &mr_rep), CUDA_ERROR_INVALID_VALUE);
	um.address = mr.address;
	assert_int_equal(exec_vmm_unmap(&ex, &um, &um_rep), CUDA_SUCCESS);
	assert_int_equal(tracker_object_get(ex.journal, cr_rep.mem, &o), -ENOENT);
	assert_int_equal(tracker_region_get(ex.journal, mr.address, &r), -ENOENT);
	assert_int_equal(exec_mem_used(&ex), 0);
	assert_false(ex.journal_broken);

	fixture_close(&ex, be, dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_journal_follows_calls),
					    cmocka_unit_test(test_journal_vmm) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
