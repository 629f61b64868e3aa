/* Tensor maps (Hopper TMA descriptors) through the driver API:
 * cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide
 * and cuTensorMapReplaceAddress.
 *
 *  1. tiled maps of ranks 1 to 5 (interleaved, swizzled, element strides),
 *     im2col maps of ranks 3 to 5: CUDA_SUCCESS, and the same arguments give
 *     the same 128 bytes;
 *  2. arguments cuda.h forbids (ranks, alignments, strides, box sizes,
 *     element strides, swizzle and interleave rules, corners, channels,
 *     pixels, the map's own alignment): CUDA_ERROR_INVALID_VALUE;
 *  3. cuTensorMapEncodeIm2colWide (compute capability 10.0): checked where
 *     it succeeds; on an older device its answer is printed and compared;
 *  4. cuTensorMapReplaceAddress changes the map, and the first address
 *     again gives the first map back; a misaligned address is refused;
 *  5. with TERN_TEST_REAL_DRIVER=PATH (tools/gpu-check sets it), every case
 *     again through that driver, loaded beside the one under test: the same
 *     CUresult and, for a map, the same 128 bytes. Through tern that is the
 *     worker's encoding against the driver's own.
 *
 * Each map's line carries an FNV-1a digest of its bytes. On tern's sim
 * backend the maps are the sim's own encoding (docs/sim.md); no kernel
 * reads them. */
#include "check.h"

#include <dlfcn.h>
#include <stdint.h>
#include <vector>

typedef decltype(&cuTensorMapEncodeTiled) tiled_fn;
typedef decltype(&cuTensorMapEncodeIm2col) im2col_fn;
typedef decltype(&cuTensorMapEncodeIm2colWide) wide_fn;
typedef decltype(&cuTensorMapReplaceAddress) replace_fn;

struct api {
	tiled_fn tiled;
	im2col_fn im2col;
	wide_fn wide;
	replace_fn replace;
};

/* What one case answered: its CUresult and, on success, the map. */
struct outcome {
	const char *name;
	CUresult res;
	CUtensorMap map;
};

static unsigned long long digest(const CUtensorMap *m)
{
	const unsigned char *b = (const unsigned char *)m;
	unsigned long long h = 1469598103934665603ull;

	for (size_t i = 0; i < sizeof(*m); i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static char *base;      /* 4 MiB of device memory, 256-byte aligned */
static std::vector<outcome> *out;
static bool wide_checked;

static CUtensorMap *record(const char *name, CUresult res, const CUtensorMap *m)
{
	outcome o;

	o.name = name;
	o.res = res;
	memset(&o.map, 0, sizeof(o.map));
	if (res == CUDA_SUCCESS)
		o.map = *m;
	out->push_back(o);
	return &out->back().map;
}

#define F32 CU_TENSOR_MAP_DATA_TYPE_FLOAT32
#define F16 CU_TENSOR_MAP_DATA_TYPE_FLOAT16
#define BF16 CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
#define U8 CU_TENSOR_MAP_DATA_TYPE_UINT8
#define IL_NONE CU_TENSOR_MAP_INTERLEAVE_NONE
#define IL_32B CU_TENSOR_MAP_INTERLEAVE_32B
#define SW_NONE CU_TENSOR_MAP_SWIZZLE_NONE
#define SW_32B CU_TENSOR_MAP_SWIZZLE_32B
#define SW_64B CU_TENSOR_MAP_SWIZZLE_64B
#define SW_128B CU_TENSOR_MAP_SWIZZLE_128B
#define L2_NONE CU_TENSOR_MAP_L2_PROMOTION_NONE
#define L2_128B CU_TENSOR_MAP_L2_PROMOTION_L2_128B
#define OOB_NONE CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
#define OOB_NAN CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA

/* A 2D fp32 tile of 32x16 out of 256x128, 128-byte swizzle: the base case
 * the invalid ones change one argument of. */
struct tiled_args {
	CUtensorMapDataType type = F32;
	cuuint32_t rank = 2;
	char *addr;
	cuuint64_t dims[5] = { 256, 128, 1, 1, 1 };
	cuuint64_t strides[4] = { 256 * 4, 0, 0, 0 };
	cuuint32_t box[5] = { 32, 16, 1, 1, 1 };
	cuuint32_t es[5] = { 1, 1, 1, 1, 1 };
	CUtensorMapInterleave il = IL_NONE;
	CUtensorMapSwizzle sw = SW_128B;
	CUtensorMapL2promotion l2 = L2_128B;
	CUtensorMapFloatOOBfill oob = OOB_NONE;
	tiled_args() : addr(base) {}
};

static CUresult tiled_run(const api &a, const tiled_args &t, CUtensorMap *m)
{
	return a.tiled(m, t.type, t.rank, t.addr, t.dims, t.strides, t.box, t.es, t.il, t.sw, t.l2, t.oob);
}

/* bf16 in 32-byte interleave (NC/16HWC16), its 32-byte swizzle. */
static tiled_args tiled_interleaved(void)
{
	tiled_args t;

	t.type = BF16;
	t.rank = 3;
	t.dims[0] = 16, t.dims[1] = 32, t.dims[2] = 8;
	t.strides[0] = 32, t.strides[1] = 32 * 32;
	t.box[0] = 16, t.box[1] = 8, t.box[2] = 4;
	t.il = IL_32B;
	t.sw = SW_32B;
	return t;
}

/* Results that are not the expected one: each is reported, and the
 * program fails at its end, so one run lists them all. */
static unsigned mismatches;

static void expect_result(const char *kind, const char *name, CUresult res, CUresult want)
{
	if (res == want)
		return;
	fprintf(stderr, "MISMATCH %s %s: %d %s, expected %d %s\n", kind, name, (int)res, test_drv_name(res),
		(int)want, test_drv_name(want));
	mismatches++;
}

static void tiled_case(const api &a, const char *name, const tiled_args &t, CUresult want)
{
	CUtensorMap m, again;
	CUresult res = tiled_run(a, t, &m);

	expect_result("tiled", name, res, want);
	if (res == CUDA_SUCCESS) {
		REQUIRE(tiled_run(a, t, &again) == CUDA_SUCCESS && !memcmp(&m, &again, sizeof(m)),
			"tiled %s: the same arguments gave another map", name);
	}
	record(name, res, &m);
}

/* NHWC fp16: 64 channels, 32x32 pixels, 2 images; a 3x3 filter with
 * padding 1 (corners -1, -1). */
struct im2col_args {
	CUtensorMapDataType type = F16;
	cuuint32_t rank = 4;
	char *addr;
	cuuint64_t dims[5] = { 64, 32, 32, 2, 1 };
	cuuint64_t strides[4] = { 128, 128 * 32, 128 * 32 * 32, 0 };
	int lower[3] = { -1, -1, -1 };
	int upper[3] = { -1, -1, -1 };
	cuuint32_t channels = 64, pixels = 128;
	cuuint32_t es[5] = { 1, 1, 1, 1, 1 };
	CUtensorMapInterleave il = IL_NONE;
	CUtensorMapSwizzle sw = SW_128B;
	CUtensorMapL2promotion l2 = L2_128B;
	CUtensorMapFloatOOBfill oob = OOB_NONE;
	im2col_args() : addr(base) {}
};

static void im2col_case(const api &a, const char *name, const im2col_args &t, CUresult want)
{
	CUtensorMap m;
	CUresult res = a.im2col(&m, t.type, t.rank, t.addr, t.dims, t.strides, t.lower, t.upper, t.channels,
				t.pixels, t.es, t.il, t.sw, t.l2, t.oob);

	expect_result("im2col", name, res, want);
	record(name, res, &m);
}

struct wide_args {
	CUtensorMapDataType type = F16;
	cuuint32_t rank = 3;
	char *addr;
	cuuint64_t dims[3] = { 64, 128, 2 };
	cuuint64_t strides[2] = { 128, 128 * 128 };
	int lower = 0, upper = 0;
	cuuint32_t channels = 64, pixels = 128;
	cuuint32_t es[3] = { 1, 1, 1 };
	CUtensorMapIm2ColWideMode mode = CU_TENSOR_MAP_IM2COL_WIDE_MODE_W;
	CUtensorMapSwizzle sw = SW_128B;
	wide_args() : addr(base) {}
};

static CUresult wide_run(const api &a, const wide_args &t, CUtensorMap *m)
{
	return a.wide(m, t.type, t.rank, t.addr, t.dims, t.strides, t.lower, t.upper, t.channels, t.pixels, t.es,
		      IL_NONE, t.mode, t.sw, L2_128B, OOB_NONE);
}

static void cases(const api &a, std::vector<outcome> *into, int cc_major)
{
	alignas(128) static unsigned char misaligned[256];
	out = into;

	/* 1. tiled maps that cuda.h allows */
	{
		tiled_args t;
		tiled_case(a, "fp32 2d 32x16 swizzle 128B", t, CUDA_SUCCESS);
		t.box[0] = 16;
		t.box[1] = 8;
		tiled_case(a, "fp32 2d 16x8 swizzle 128B", t, CUDA_SUCCESS);
	}
	{
		tiled_args t;
		t.type = U8;
		t.rank = 1;
		t.dims[0] = 4096;
		t.box[0] = 256;
		t.sw = SW_NONE;
		t.l2 = L2_NONE;
		tiled_case(a, "u8 1d box 256", t, CUDA_SUCCESS);
	}
	{
		tiled_args t;
		t.type = F16;
		t.rank = 3;
		t.dims[0] = 64, t.dims[1] = 32, t.dims[2] = 8;
		t.strides[0] = 128, t.strides[1] = 128 * 32;
		t.box[0] = 64, t.box[1] = 8, t.box[2] = 2;
		t.oob = OOB_NAN;
		tiled_case(a, "fp16 3d oob nan", t, CUDA_SUCCESS);
	}
	{
		tiled_args t = tiled_interleaved();
		tiled_case(a, "bf16 3d interleave 32B", t, CUDA_SUCCESS);
	}
	{
		tiled_args t;
		t.rank = 5;
		const cuuint64_t d[5] = { 8, 4, 4, 4, 2 }, s[4] = { 32, 128, 512, 2048 };
		const cuuint32_t b[5] = { 8, 4, 4, 4, 2 }, e[5] = { 1, 2, 1, 1, 2 };
		memcpy(t.dims, d, sizeof(d));
		memcpy(t.strides, s, sizeof(s));
		memcpy(t.box, b, sizeof(b));
		memcpy(t.es, e, sizeof(e));
		t.sw = SW_32B;
		tiled_case(a, "fp32 5d element strides", t, CUDA_SUCCESS);
	}

	/* 2. tiled maps that cuda.h forbids */
	{
		tiled_args t;
		t.rank = 0;
		tiled_case(a, "rank 0", t, CUDA_ERROR_INVALID_VALUE);
		t.rank = 6;
		tiled_case(a, "rank 6", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t;
		t.addr = base + 8;
		tiled_case(a, "address 8-byte aligned", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t;
		t.strides[0] = 1000;
		tiled_case(a, "stride not a multiple of 16", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t;
		t.dims[1] = 0;
		tiled_case(a, "dim 0", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t;
		t.box[1] = 0;
		tiled_case(a, "box 0", t, CUDA_ERROR_INVALID_VALUE);
		t.box[1] = 257;
		tiled_case(a, "box 257", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t;
		t.box[0] = 3;
		t.sw = SW_NONE;
		tiled_case(a, "inner box 12 bytes", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t;
		t.sw = SW_32B;
		tiled_case(a, "inner box 128 bytes, swizzle 32B", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t;
		t.es[1] = 0;
		tiled_case(a, "element stride 0", t, CUDA_ERROR_INVALID_VALUE);
		t.es[1] = 9;
		tiled_case(a, "element stride 9", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t = tiled_interleaved();
		t.sw = SW_128B;
		/* cuda.h pairs it with swizzle 32B; the H200's driver takes these too. */
		tiled_case(a, "interleave 32B, swizzle 128B", t, CUDA_SUCCESS);
		t.sw = SW_64B;
		tiled_case(a, "interleave 32B, swizzle 64B", t, CUDA_SUCCESS);
		t.sw = SW_32B;
		t.addr = base + 16;
		tiled_case(a, "interleave 32B, address 16-byte aligned", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t;
		t.type = (CUtensorMapDataType)99;
		tiled_case(a, "data type 99", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t;
		t.type = U8;
		t.dims[0] = 1024;
		t.box[0] = 64;
		t.sw = SW_NONE;
		t.oob = OOB_NAN;
		tiled_case(a, "oob nan fill on u8", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		tiled_args t;
		CUresult res = tiled_run(a, t, (CUtensorMap *)(misaligned + 32));

		/* cuda.h asks for 64-byte alignment; the driver encodes it anyway. */
		expect_result("tiled", "into a map 32-byte aligned", res, CUDA_SUCCESS);
		record("map 32-byte aligned", res, (const CUtensorMap *)(misaligned + 32));
	}

	/* 1 and 2 for im2col */
	{
		im2col_args t;
		im2col_case(a, "im2col fp16 4d nhwc", t, CUDA_SUCCESS);
		t.channels = 257;
		im2col_case(a, "im2col channels 257", t, CUDA_ERROR_INVALID_VALUE);
		t.channels = 64;
		t.pixels = 1025;
		im2col_case(a, "im2col pixels 1025", t, CUDA_ERROR_INVALID_VALUE);
		t.pixels = 128;
		t.lower[0] = -129;
		im2col_case(a, "im2col rank 4 corner -129", t, CUDA_ERROR_INVALID_VALUE);
		t.lower[0] = -1;
		t.sw = SW_64B;
		im2col_case(a, "im2col 128 channel bytes, swizzle 64B", t, CUDA_ERROR_INVALID_VALUE);
		t.sw = SW_128B;
		t.rank = 2;
		im2col_case(a, "im2col rank 2", t, CUDA_ERROR_INVALID_VALUE);
	}
	{
		im2col_args t;
		t.type = F32;
		t.rank = 3;
		t.dims[0] = 32, t.dims[1] = 64, t.dims[2] = 2;
		t.strides[0] = 128, t.strides[1] = 128 * 64;
		t.lower[0] = -2, t.upper[0] = 0;
		t.channels = 32;
		t.pixels = 64;
		im2col_case(a, "im2col fp32 3d nwc", t, CUDA_SUCCESS);
	}
	{
		im2col_args t;
		t.type = U8;
		t.rank = 5;
		const cuuint64_t d[5] = { 64, 8, 8, 4, 1 }, s[4] = { 64, 512, 4096, 16384 };
		memcpy(t.dims, d, sizeof(d));
		memcpy(t.strides, s, sizeof(s));
		t.channels = 64;
		t.pixels = 256;
		t.sw = SW_64B;
		im2col_case(a, "im2col u8 5d ndhwc", t, CUDA_SUCCESS);
		t.upper[2] = 16;
		im2col_case(a, "im2col rank 5 corner 16", t, CUDA_ERROR_INVALID_VALUE);
	}

	/* 3. im2col wide */
	{
		wide_args t;
		CUtensorMap m;
		CUresult res = wide_run(a, t, &m);

		printf("tensor_map: im2col wide on compute capability %d.x: %d %s\n", cc_major, (int)res,
		       test_drv_name(res));
		REQUIRE(res == CUDA_SUCCESS || cc_major < 10, "im2col wide: %d %s", (int)res, test_drv_name(res));
		record("im2col wide fp16 3d", res, &m);
		wide_checked = res == CUDA_SUCCESS;
		if (wide_checked) {
			const struct {
				const char *name;
				void (*change)(wide_args *);
			} bad[] = {
				{ "im2col wide mode 2", [](wide_args *w) { w->mode = (CUtensorMapIm2ColWideMode)2; } },
				{ "im2col wide swizzle 32B", [](wide_args *w) { w->sw = SW_32B; } },
				{ "im2col wide pixels 1025", [](wide_args *w) { w->pixels = 1025; } },
				{ "im2col wide corner 32768", [](wide_args *w) { w->upper = 32768; } },
				{ "im2col wide rank 2", [](wide_args *w) { w->rank = 2; } },
			};
			for (const auto &b : bad) {
				wide_args w;

				b.change(&w);
				res = wide_run(a, w, &m);
				expect_result("im2col wide", b.name, res, CUDA_ERROR_INVALID_VALUE);
				record(b.name, res, &m);
			}
		}
	}

	/* 4. replace the address */
	{
		tiled_args t;
		CUtensorMap first, m;
		CUresult res;

		CHECK_DRV(tiled_run(a, t, &first));
		m = first;
		CHECK_DRV(a.replace(&m, base + 4096));
		REQUIRE(memcmp(&m, &first, sizeof(m)), "a new address left the map as it was");
		record("replaced by base + 4096", CUDA_SUCCESS, &m);
		CHECK_DRV(a.replace(&m, base));
		REQUIRE(!memcmp(&m, &first, sizeof(m)), "the first address again gave another map");
		res = a.replace(&m, base + 8);
		expect_result("replace", "by an 8-byte aligned address", res, CUDA_ERROR_INVALID_VALUE);
		record("replace by base + 8", res, NULL);
		res = a.replace((CUtensorMap *)(misaligned + 32), base);
		expect_result("replace", "in a map 32-byte aligned", res, CUDA_SUCCESS);
		record("replace in a map 32-byte aligned", res, (const CUtensorMap *)(misaligned + 32));
	}
}

/* The driver at @path, loaded beside the one under test, with a current
 * context on device 0 (its encoders may ask for one). */
static bool real_driver_api(const char *path, api *a)
{
	typedef CUresult (*init_fn)(unsigned);
	typedef CUresult (*get_fn)(CUdevice *, int);
	typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
	typedef CUresult (*current_fn)(CUcontext);
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	CUdevice dev;
	CUcontext ctx;

	REQUIRE(lib, "cannot load %s: %s", path, dlerror());
	init_fn init = (init_fn)dlsym(lib, "cuInit");
	get_fn get = (get_fn)dlsym(lib, "cuDeviceGet");
	retain_fn retain = (retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
	current_fn current = (current_fn)dlsym(lib, "cuCtxSetCurrent");
	a->tiled = (tiled_fn)dlsym(lib, "cuTensorMapEncodeTiled");
	a->im2col = (im2col_fn)dlsym(lib, "cuTensorMapEncodeIm2col");
	a->wide = (wide_fn)dlsym(lib, "cuTensorMapEncodeIm2colWide");
	a->replace = (replace_fn)dlsym(lib, "cuTensorMapReplaceAddress");
	REQUIRE(init && get && retain && current && a->tiled && a->im2col && a->wide && a->replace,
		"%s lacks an entry point", path);
	CHECK_DRV(init(0));
	CHECK_DRV(get(&dev, 0));
	CHECK_DRV(retain(&ctx, dev));
	CHECK_DRV(current(ctx));
	return true;
}

int main(void)
{
	const char *real = getenv("TERN_TEST_REAL_DRIVER");
	std::vector<outcome> mine, theirs;
	int cc_major = 0;
	api a;

	CHECK(cudaFree(0));
	CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0));
	CHECK(cudaMalloc((void **)&base, 4 << 20));
	REQUIRE((uintptr_t)base % 256 == 0, "cudaMalloc gave %p", (void *)base);
	a.tiled = (tiled_fn)drv_sym_version("cuTensorMapEncodeTiled", 12000);
	a.im2col = (im2col_fn)drv_sym_version("cuTensorMapEncodeIm2col", 12000);
	a.wide = (wide_fn)drv_sym_version("cuTensorMapEncodeIm2colWide", 12080);
	a.replace = (replace_fn)drv_sym_version("cuTensorMapReplaceAddress", 12000);

	mine.reserve(64);
	cases(a, &mine, cc_major);
	for (const auto &o : mine)
		printf("tensor_map: %-40s %3d %-26s %016llx\n", o.name, (int)o.res, test_drv_name(o.res),
		       o.res == CUDA_SUCCESS ? digest(&o.map) : 0ull);
	printf("tensor_map: %zu cases; im2col wide %s\n", mine.size(),
	       wide_checked ? "checked" : "not available on this device");

	if (real && *real) {
		api r;
		unsigned same = 0;

		real_driver_api(real, &r);
		theirs.reserve(64);
		cases(r, &theirs, cc_major);
		REQUIRE(theirs.size() == mine.size(), "%zu cases through %s, %zu here", theirs.size(), real,
			mine.size());
		for (size_t i = 0; i < mine.size(); i++) {
			REQUIRE(mine[i].res == theirs[i].res, "%s: %d here, %d from %s", mine[i].name,
				(int)mine[i].res, (int)theirs[i].res, real);
			REQUIRE(!memcmp(&mine[i].map, &theirs[i].map, sizeof(CUtensorMap)),
				"%s: the map differs from the one %s encodes (%016llx, %016llx)", mine[i].name, real,
				digest(&mine[i].map), digest(&theirs[i].map));
			same++;
		}
		printf("tensor_map: %u cases answered as %s does, maps byte for byte\n", same, real);
	} else {
		printf("tensor_map: not compared with a driver: TERN_TEST_REAL_DRIVER unset\n");
	}
	CHECK(cudaFree(base));
	REQUIRE(!mismatches, "%u results not the expected ones (MISMATCH lines above)", mismatches);
	test_pass("tensor_map");
	return 0;
}
