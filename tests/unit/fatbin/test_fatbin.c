/* cuimage: parse nvcc's real output (built from kernels.cu by meson) and
 * hand-made images; check layouts against the same types declared in C. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fatbin.h"
#include "le.h"

/* The kernels' parameters, as C lays them out: the CUDA ABI does the same. */
struct saxpy_args { float *y; const float *x; int n; };
struct pair { int a; double b; };
struct take_pair_args { struct pair p; char c; double d; int *out; };
struct big { float v[1024]; };
struct take_big_args { struct big b; int *out; };
struct vec4 { _Alignas(16) float x; float y, z, w; };
struct take_vec_args { char c; struct vec4 v; short s; long long ll; int *out; };

#define P(T, f) {offsetof(struct T, f), sizeof(((struct T *)0)->f)}
#define END(T, f) (offsetof(struct T, f) + sizeof(((struct T *)0)->f))

struct expect {
	const char *name;
	unsigned count;
	unsigned bytes;
	struct cuimage_param params[5];
};

static const struct expect expected[] = {
	{"saxpy", 3, END(saxpy_args, n), {P(saxpy_args, y), P(saxpy_args, x), P(saxpy_args, n)}},
	{"_Z9take_pair4paircdPi", 4, END(take_pair_args, out),
	 {P(take_pair_args, p), P(take_pair_args, c), P(take_pair_args, d), P(take_pair_args, out)}},
	{"take_big", 2, END(take_big_args, out), {P(take_big_args, b), P(take_big_args, out)}},
	{"take_vec", 5, END(take_vec_args, out),
	 {P(take_vec_args, c), P(take_vec_args, v), P(take_vec_args, s), P(take_vec_args, ll),
	  P(take_vec_args, out)}},
	{"noargs", 0, 0, {{0, 0}}},
};

static uint8_t *file_load(const char *var, size_t *size)
{
	const char *path = getenv(var);
	uint8_t *buf;
	FILE *f;
	long n;

	if (!path)
		return NULL;
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0; /* PTX as the driver gets it: NUL-terminated */
	fclose(f);
	*size = (size_t)n;
	return buf;
}

#define LOAD_OR_SKIP(var, size)                                     \
	({                                                          \
		uint8_t *b_ = file_load(var, size);                 \
		if (!b_) {                                          \
			print_message("%s unset (no nvcc)\n", var); \
			skip();                                     \
		}                                                   \
		b_;                                                 \
	})

static void kernels_check(const struct cuimage *img)
{
	unsigned n = sizeof(expected) / sizeof(expected[0]);

	assert_int_equal(cuimage_kernel_count(img), n);
	for (unsigned i = 0; i < n; i++) {
		const struct cuimage_kernel *k = cuimage_kernel_find(img, expected[i].name);

		if (!k)
			fail_msg("kernel %s missing", expected[i].name);
		assert_int_equal(k->param_count, expected[i].count);
		assert_int_equal(k->param_bytes, expected[i].bytes);
		for (unsigned j = 0; j < k->param_count; j++) {
			assert_int_equal(k->params[j].offset, expected[i].params[j].offset);
			assert_int_equal(k->params[j].size, expected[i].params[j].size);
		}
	}
	assert_null(cuimage_kernel_find(img, "take_pair"));
	assert_null(cuimage_kernel(img, n));
}

static const struct cuimage_global *global_get(const struct cuimage *img, const char *name,
					       uint64_t size, enum cuimage_space space)
{
	const struct cuimage_global *g = cuimage_global_find(img, name);

	if (!g)
		fail_msg("global %s missing", name);
	assert_int_equal(g->size, size);
	assert_int_equal(g->space, space);
	assert_false(g->init_unknown);
	return g;
}

static void globals_check(const struct cuimage *img)
{
	const float scale = 2.5f;
	const double d[3] = {1.5, -2.0, 0.25};
	const uint16_t h = 0xbeef;
	const int table[4] = {1, 2, 3, 4}, seven = 7;
	const struct cuimage_global *g;

	assert_int_equal(cuimage_global_count(img), 7);
	g = global_get(img, "g_scale", 4, CUIMAGE_SPACE_GLOBAL);
	assert_non_null(g->init);
	assert_memory_equal(g->init, &scale, 4);
	assert_false(g->managed);
	g = global_get(img, "g_zero", 256, CUIMAGE_SPACE_GLOBAL);
	assert_null(g->init);
	g = global_get(img, "g_d", 24, CUIMAGE_SPACE_GLOBAL);
	assert_non_null(g->init);
	assert_memory_equal(g->init, d, 24);
	g = global_get(img, "g_h", 2, CUIMAGE_SPACE_GLOBAL);
	assert_non_null(g->init);
	assert_memory_equal(g->init, &h, 2);
	g = global_get(img, "c_table", 16, CUIMAGE_SPACE_CONSTANT);
	assert_non_null(g->init);
	assert_memory_equal(g->init, table, 16);
	g = global_get(img, "c_zero", 32, CUIMAGE_SPACE_CONSTANT);
	for (unsigned i = 0; g->init && i < 32; i++)
		assert_int_equal(g->init[i], 0);
	g = global_get(img, "m_counter", 4, CUIMAGE_SPACE_GLOBAL);
	assert_true(g->managed);
	assert_non_null(g->init);
	assert_memory_equal(g->init, &seven, 4);
}

/* Touch everything a parse returned, so ASan sees any bad pointer. */
static void image_walk(const struct cuimage *img)
{
	volatile uint8_t sink = 0;
	size_t n;
	const uint8_t *code = cuimage_code(img, &n);

	for (size_t i = 0; i < n; i++)
		sink ^= code[i];
	for (unsigned i = 0; i < cuimage_kernel_count(img); i++) {
		const struct cuimage_kernel *k = cuimage_kernel(img, i);

		sink ^= (uint8_t)strlen(k->name);
		for (unsigned j = 0; j < k->param_count; j++)
			assert_true(k->params[j].offset + k->params[j].size <= k->param_bytes);
	}
	for (unsigned i = 0; i < cuimage_global_count(img); i++) {
		const struct cuimage_global *g = cuimage_global(img, i);

		sink ^= (uint8_t)strlen(g->name);
		for (uint64_t j = 0; g->init && j < g->size; j++)
			sink ^= g->init[j];
	}
	(void)sink;
}

static void test_cubin(void **state)
{
	size_t size, measured;
	uint8_t *buf = LOAD_OR_SKIP("FATBIN_TEST_CUBIN", &size);
	struct cuimage *img;

	assert_int_equal(cuimage_format_detect(buf, size), CUIMAGE_FORMAT_ELF);
	assert_int_equal(cuimage_measure(buf, size, &measured), 0);
	assert_int_equal(measured, size);
	assert_int_equal(cuimage_measure(buf, size - 1, &measured), -EINVAL);
	assert_int_equal(cuimage_parse(buf, size, 0, &img), 0);
	assert_int_equal(cuimage_entry_count(img), 1);
	assert_int_equal(cuimage_entry(img, 0)->kind, CUIMAGE_ENTRY_CUBIN);
	assert_int_equal(cuimage_entry(img, 0)->sm, 80);
	kernels_check(img);
	globals_check(img);
	cuimage_free(img);
	free(buf);
}

/* -rdc cubins use CUDA-specific section and symbol types. */
static void test_cubin_relocatable(void **state)
{
	size_t size, measured;
	uint8_t *buf = LOAD_OR_SKIP("FATBIN_TEST_RDC_CUBIN", &size);
	struct cuimage *img;

	assert_int_equal(cuimage_measure(buf, size, &measured), 0);
	assert_int_equal(measured, size);
	assert_int_equal(cuimage_parse(buf, size, 0, &img), 0);
	assert_int_equal(cuimage_entry(img, 0)->sm, 90);
	kernels_check(img);
	globals_check(img);
	cuimage_free(img);
	free(buf);
}

static void test_ptx(void **state)
{
	size_t size, measured;
	uint8_t *buf = LOAD_OR_SKIP("FATBIN_TEST_PTX", &size);
	struct cuimage *img;

	assert_int_equal(cuimage_format_detect(buf, size), CUIMAGE_FORMAT_PTX);
	assert_int_equal(cuimage_measure(buf, size + 1, &measured), 0);
	assert_int_equal(measured, size + 1);
	assert_int_equal(cuimage_measure(buf, size, &measured), -EINVAL);
	assert_int_equal(cuimage_parse(buf, size, 0, &img), 0);
	assert_int_equal(cuimage_entry(img, 0)->kind, CUIMAGE_ENTRY_PTX);
	kernels_check(img);
	globals_check(img);
	cuimage_free(img);
	free(buf);
}

struct target_case {
	unsigned target;
	enum cuimage_entry_kind kind;
	unsigned sm;
};

static const struct target_case targets[] = {
	{75, CUIMAGE_ENTRY_CUBIN, 75}, {80, CUIMAGE_ENTRY_CUBIN, 80},
	{86, CUIMAGE_ENTRY_CUBIN, 80}, {89, CUIMAGE_ENTRY_CUBIN, 80},
	{90, CUIMAGE_ENTRY_CUBIN, 90}, {100, CUIMAGE_ENTRY_CUBIN, 100},
	{103, CUIMAGE_ENTRY_CUBIN, 100}, {120, CUIMAGE_ENTRY_PTX, 90},
	{0, CUIMAGE_ENTRY_CUBIN, 100},
};

static void fatbin_check(const char *var, enum cuimage_compression cubin_comp,
			 enum cuimage_compression ptx_comp)
{
	size_t size, measured, code_size, ref_size;
	uint8_t *buf = LOAD_OR_SKIP(var, &size), *longer;
	uint8_t *ref = file_load("FATBIN_TEST_STORED", &ref_size);
	struct cuimage *img;
	unsigned seen = 0;

	assert_int_equal(cuimage_format_detect(buf, size), CUIMAGE_FORMAT_FATBIN);
	assert_int_equal(cuimage_measure(buf, size, &measured), 0);
	assert_int_equal(measured, size);
	assert_int_equal(cuimage_measure(buf, size - 1, &measured), -EINVAL);
	/* The .nv_fatbin section may hold more after this container. */
	longer = calloc(1, size + 100);
	assert_non_null(longer);
	memcpy(longer, buf, size);
	assert_int_equal(cuimage_measure(longer, size + 100, &measured), 0);
	assert_int_equal(measured, size);
	free(longer);

	assert_int_equal(cuimage_parse(buf, size, 0, &img), 0);
	assert_int_equal(cuimage_entry_count(img), 5);
	for (unsigned i = 0; i < 5; i++) {
		const struct cuimage_entry *e = cuimage_entry(img, i);

		if (e->kind == CUIMAGE_ENTRY_PTX) {
			assert_int_equal(e->sm, 90);
			assert_int_equal(e->compression, ptx_comp);
			seen |= 1;
		} else {
			assert_int_equal(e->kind, CUIMAGE_ENTRY_CUBIN);
			assert_int_equal(e->compression, cubin_comp);
			seen |= e->sm == 75 ? 2 : e->sm == 80 ? 4 : e->sm == 90 ? 8 :
				e->sm == 100 ? 16 : 0;
		}
		assert_false(e->arch_specific);
		assert_true(e->offset + e->stored_size <= size);
		if (e->compression == CUIMAGE_COMPRESSION_NONE)
			assert_int_equal(e->stored_size, e->size);
		else
			assert_true(e->stored_size < e->size);
	}
	assert_int_equal(seen, 31);
	cuimage_free(img);

	for (unsigned t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
		const struct cuimage_entry *e;
		struct cuimage *plain;
		const void *code;

		assert_int_equal(cuimage_parse(buf, size, targets[t].target, &img), 0);
		e = cuimage_entry(img, cuimage_entry_selected(img));
		assert_int_equal(e->kind, targets[t].kind);
		assert_int_equal(e->sm, targets[t].sm);
		kernels_check(img);
		globals_check(img);
		/* Decompressed bytes equal the ones nvcc stored uncompressed. */
		if (ref) {
			size_t plain_size;
			const void *plain_code;

			assert_int_equal(cuimage_parse(ref, ref_size, targets[t].target, &plain), 0);
			code = cuimage_code(img, &code_size);
			plain_code = cuimage_code(plain, &plain_size);
			/* stored entries keep their padding to 8 bytes */
			assert_true(code_size <= plain_size && plain_size - code_size < 8);
			assert_memory_equal(code, plain_code, code_size);
			cuimage_free(plain);
		}
		cuimage_free(img);
	}
	assert_int_equal(cuimage_parse(buf, size, 70, &img), -ENOENT);
	free(ref);
	free(buf);
}

static void test_fatbin_default(void **state)
{
	fatbin_check("FATBIN_TEST_DEFAULT", CUIMAGE_COMPRESSION_NONE, CUIMAGE_COMPRESSION_ZSTD);
}

static void test_fatbin_zstd(void **state)
{
	fatbin_check("FATBIN_TEST_ZSTD", CUIMAGE_COMPRESSION_ZSTD, CUIMAGE_COMPRESSION_ZSTD);
}

static void test_fatbin_lz4(void **state)
{
	fatbin_check("FATBIN_TEST_LZ4", CUIMAGE_COMPRESSION_LZ4, CUIMAGE_COMPRESSION_LZ4);
}

static void test_fatbin_stored(void **state)
{
	fatbin_check("FATBIN_TEST_STORED", CUIMAGE_COMPRESSION_NONE, CUIMAGE_COMPRESSION_NONE);
}

/* Every prefix of a real image: an error or a consistent parse, and measure
 * must never accept a prefix.  Each prefix gets its own allocation so ASan
 * catches a read past it. */
static void truncations_check(const char *var, bool prefix_may_parse)
{
	size_t size, measured;
	uint8_t *buf = LOAD_OR_SKIP(var, &size);

	for (size_t len = 0; len < size; len++) {
		uint8_t *p = malloc(len ? len : 1);
		struct cuimage *img = NULL;
		int rc;

		assert_non_null(p);
		memcpy(p, buf, len);
		rc = cuimage_parse(p, len, 90, &img);
		if (rc == 0) {
			/* under 4 bytes the magic is incomplete: that is PTX text */
			if (!prefix_may_parse && len >= 4)
				fail_msg("%s: prefix of %zu bytes parsed", var, len);
			image_walk(img);
			cuimage_free(img);
		} else {
			assert_true(rc == -EINVAL || rc == -ENOENT || rc == -ENOTSUP);
		}
		if (len && cuimage_measure(p, len, &measured) == 0)
			fail_msg("%s: prefix of %zu bytes measured as %zu", var, len, measured);
		free(p);
	}
	free(buf);
}

static void test_truncated(void **state)
{
	truncations_check("FATBIN_TEST_DEFAULT", false);
	truncations_check("FATBIN_TEST_ZSTD", false);
	truncations_check("FATBIN_TEST_LZ4", false);
	/* PTX prefixes are PTX; a cubin whose program headers are cut still
	 * has its sections. */
	truncations_check("FATBIN_TEST_CUBIN", true);
	truncations_check("FATBIN_TEST_PTX", true);
}

/* Each byte of a cubin and a compressed fatbin changed in turn. */
static void test_corrupted(void **state)
{
	static const char *vars[] = {"FATBIN_TEST_CUBIN", "FATBIN_TEST_LZ4", "FATBIN_TEST_ZSTD"};

	for (unsigned v = 0; v < 3; v++) {
		size_t size;
		uint8_t *buf = LOAD_OR_SKIP(vars[v], &size);

		for (size_t i = 0; i < size; i++) {
			struct cuimage *img;

			buf[i] ^= 0xa5;
			if (cuimage_parse(buf, size, 90, &img) == 0) {
				image_walk(img);
				cuimage_free(img);
			}
			buf[i] ^= 0xa5;
		}
		free(buf);
	}
}

/* ---- hand-made inputs: run without nvcc ---- */


/* A fatbin of one PTX entry whose payload is @payload as stored. */
static uint8_t *fatbin_make(const uint8_t *payload, size_t n, uint64_t flags,
			    uint64_t decompressed, size_t *size_out)
{
	size_t padded = (n + 7) & ~(size_t)7, size = 16 + 64 + padded;
	uint8_t *f = calloc(1, size);

	assert_non_null(f);
	le32_put(f, 0xBA55ED50);
	le16_put(f + 4, 1);
	le16_put(f + 6, 16);
	le64_put(f + 8, 64 + padded);
	le16_put(f + 16, 1);          /* PTX */
	le16_put(f + 18, 0x0101);
	le32_put(f + 20, 64);
	le64_put(f + 24, padded);
	le32_put(f + 32, (uint32_t)n);
	le32_put(f + 44, 80);         /* compute_80 */
	le64_put(f + 56, flags);
	le64_put(f + 72, decompressed);
	memcpy(f + 80, payload, n);
	*size_out = size;
	return f;
}

static void test_lz4(void **state)
{
	/* literals, a back-reference, final literals */
	static const char lit1[] = ".entry k(.param .u32 a, ", lit2[] = "b)\n{\n}\n";
	const char *want = ".entry k(.param .u32 a, .param .u32 b)\n{\n}\n";
	uint8_t block[64], *f;
	size_t n = 0, size, code_size;
	size_t l1 = strlen(lit1), l2 = sizeof(lit2); /* with its NUL */
	struct cuimage *img;
	const struct cuimage_kernel *k;

	block[n++] = 0xf0 | (12 - 4);
	block[n++] = (uint8_t)(l1 - 15);
	memcpy(block + n, lit1, l1);
	n += l1;
	le16_put(block + n, (uint16_t)(l1 - strlen(".entry k(")));
	n += 2;
	block[n++] = (uint8_t)(l2 << 4);
	memcpy(block + n, lit2, l2);
	n += l2;
	f = fatbin_make(block, n, 0x2011, strlen(want) + 1, &size);
	assert_int_equal(cuimage_parse(f, size, 80, &img), 0);
	assert_int_equal(cuimage_entry(img, 0)->compression, CUIMAGE_COMPRESSION_LZ4);
	assert_string_equal(cuimage_code(img, &code_size), want);
	assert_int_equal(code_size, strlen(want) + 1);
	k = cuimage_kernel_find(img, "k");
	assert_non_null(k);
	assert_int_equal(k->param_count, 2);
	assert_int_equal(k->params[1].offset, 4);
	cuimage_free(img);
	/* claimed size differs from what the block makes */
	le64_put(f + 72, strlen(want) + 2);
	assert_int_equal(cuimage_parse(f, size, 80, &img), -EINVAL);
	/* both compressions named */
	le64_put(f + 72, strlen(want) + 1);
	le64_put(f + 56, 0xa011);
	assert_int_equal(cuimage_parse(f, size, 80, &img), -ENOTSUP);
	free(f);

	/* an overlapping match repeats; a zero or too-far offset is refused */
	{
		uint8_t run[] = {0x1f, 'a', 1, 0, 1, 0x10, 0};
		char want_run[22];

		memset(want_run, 'a', 21);
		want_run[21] = 0;
		f = fatbin_make(run, sizeof(run), 0x2011, 22, &size);
		assert_int_equal(cuimage_parse(f, size, 80, &img), 0);
		assert_string_equal(cuimage_code(img, NULL), want_run);
		cuimage_free(img);
		free(f);
		run[2] = 0;
		f = fatbin_make(run, sizeof(run), 0x2011, 22, &size);
		assert_int_equal(cuimage_parse(f, size, 80, &img), -EINVAL);
		free(f);
		run[2] = 2;
		f = fatbin_make(run, sizeof(run), 0x2011, 22, &size);
		assert_int_equal(cuimage_parse(f, size, 80, &img), -EINVAL);
		free(f);
	}
}

static void test_ptx_text(void **state)
{
	static const char ptx[] =
		"// .entry commented_out(.param .u32 x)\n"
		".version 9.0\n.target sm_80\n.address_size 64\n"
		".file 1 \"/tmp/a /* b.cu\"\n"
		".extern .global .align 4 .b8 elsewhere[];\n"
		".global .texref tex;\n"
		".global .align 8 .u64 ptr_init = generic(g_arr);\n"
		".global .align 4 .b8 g_arr[10] = {1, 2, 0xff};\n"
		".global .align 8 .v2 .f32 g_v = {0f3F800000, 0f40000000};\n"
		".const .align 8 .f64 c_d = 0d4000000000000000;\n"
		".extern .func (.param .b32 r) helper (.param .u64 .ptr .global .align 16 p);\n"
		"/* .global .u32 hidden; */\n"
		".visible .entry k1(\n"
		"\t.param .u8 k1_c,\n"
		"\t.param .u64 .ptr .global .align 16 k1_p,\n"
		"\t.param .align 16 .b8 k1_s[20],\n"
		"\t.param .f16 k1_h,\n"
		"\t.param .b32 k1_arr[3]\n"
		")\n.maxntid 128, 1, 1\n{\n\t.reg .b32 %r<2>;\n\t{ ret; }\n}\n"
		".entry k2()\n{\n}\n";
	static const uint8_t arr[10] = {1, 2, 0xff};
	const float v[2] = {1.0f, 2.0f};
	const double two = 2.0;
	struct cuimage *img;
	const struct cuimage_kernel *k;
	const struct cuimage_global *g;
	size_t measured;

	assert_int_equal(cuimage_measure(ptx, sizeof(ptx), &measured), 0);
	assert_int_equal(measured, sizeof(ptx));
	assert_int_equal(cuimage_parse(ptx, sizeof(ptx) - 1, 0, &img), 0);
	assert_int_equal(cuimage_kernel_count(img), 2);
	k = cuimage_kernel_find(img, "k1");
	assert_non_null(k);
	assert_int_equal(k->param_count, 5);
	assert_int_equal(k->params[0].offset, 0);
	assert_int_equal(k->params[1].offset, 8);  /* .align after .ptr is the pointee's */
	assert_int_equal(k->params[1].size, 8);
	assert_int_equal(k->params[2].offset, 16);
	assert_int_equal(k->params[2].size, 20);
	assert_int_equal(k->params[3].offset, 36);
	assert_int_equal(k->params[3].size, 2);
	assert_int_equal(k->params[4].offset, 40);
	assert_int_equal(k->params[4].size, 12);
	assert_int_equal(k->param_bytes, 52);
	k = cuimage_kernel_find(img, "k2");
	assert_non_null(k);
	assert_int_equal(k->param_count, 0);
	assert_null(cuimage_kernel_find(img, "commented_out"));

	assert_int_equal(cuimage_global_count(img), 4);
	assert_null(cuimage_global_find(img, "elsewhere"));
	assert_null(cuimage_global_find(img, "hidden"));
	g = cuimage_global_find(img, "ptr_init");
	assert_non_null(g);
	assert_true(g->init_unknown);
	assert_null(g->init);
	g = cuimage_global_find(img, "g_arr");
	assert_non_null(g);
	assert_int_equal(g->size, 10);
	assert_memory_equal(g->init, arr, 10);
	g = cuimage_global_find(img, "g_v");
	assert_non_null(g);
	assert_int_equal(g->size, 8);
	assert_memory_equal(g->init, v, 8);
	g = cuimage_global_find(img, "c_d");
	assert_non_null(g);
	assert_int_equal(g->space, CUIMAGE_SPACE_CONSTANT);
	assert_memory_equal(g->init, &two, 8);
	cuimage_free(img);

	/* unbalanced or malformed text is refused */
	{
		static const char bad1[] = ".entry k(.param .u32 a\n{\n}";
		static const char bad2[] = ".entry k(.param .u32 a)\n{\n";
		static const char overlong[] = ".global .b8 x[4] = {1, 2, 3, 4, 5};";

		assert_int_equal(cuimage_parse(bad1, strlen(bad1), 0, &img), -EINVAL);
		assert_int_equal(cuimage_parse(bad2, strlen(bad2), 0, &img), -EINVAL);
		assert_int_equal(cuimage_parse(overlong, strlen(overlong), 0, &img), 0);
	}
	assert_true(cuimage_global_find(img, "x")->init_unknown);
	cuimage_free(img);
}

static void test_measure_edges(void **state)
{
	struct {
		int32_t magic, version;
		const void *data;
		void *filename;
	} wrapper = {0x466243B1, 1, NULL, NULL};
	static const uint8_t fatbin_huge[16] = {0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0,
						0, 0, 0, 0x80, 0, 0, 0, 0};
	size_t measured;
	uint8_t one = 0;

	wrapper.data = &wrapper;
	assert_int_equal(cuimage_format_detect(&wrapper, sizeof(wrapper)), CUIMAGE_FORMAT_WRAPPER);
	assert_ptr_equal(cuimage_wrapper_data(&wrapper), &wrapper);
	assert_int_equal(cuimage_measure(&wrapper, sizeof(wrapper), &measured), -EINVAL);
	wrapper.version = 3;
	assert_null(cuimage_wrapper_data(&wrapper));
	assert_null(cuimage_wrapper_data("x"));  /* stops at the first byte */
	assert_int_equal(cuimage_measure(&one, 1, &measured), 0);
	assert_int_equal(measured, 1);
	assert_int_equal(cuimage_measure("ab", 2, &measured), -EINVAL);
	assert_int_equal(cuimage_measure(fatbin_huge, sizeof(fatbin_huge), &measured), -E2BIG);
	/* three bytes of a magic and no NUL: neither a fatbin nor a string */
	assert_int_equal(cuimage_measure(fatbin_huge, 3, &measured), -EINVAL);
	cuimage_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cubin),
		cmocka_unit_test(test_cubin_relocatable),
		cmocka_unit_test(test_ptx),
		cmocka_unit_test(test_fatbin_default),
		cmocka_unit_test(test_fatbin_zstd),
		cmocka_unit_test(test_fatbin_lz4),
		cmocka_unit_test(test_fatbin_stored),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_corrupted),
		cmocka_unit_test(test_lz4),
		cmocka_unit_test(test_ptx_text),
		cmocka_unit_test(test_measure_edges),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
