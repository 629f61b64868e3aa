/* arrays_textures: pitched memory, 2D and 3D copies, arrays (HtoA, AtoD,
 * DtoA, AtoH, 1D and 2D), 2D memsets, mipmapped array levels, texture and
 * surface objects, cuMemcpyBatchAsync and copies that must fail.
 *
 * Every copy is checked byte for byte against a host model, including the
 * bytes around it (odd widths, offsets), so a copy that spills fails too.
 * On the sim (device name "tern sim ...") the kernels that sample a texture
 * or write a surface are skipped with a line saying so: the sim's CPU
 * kernels do not sample; the objects' lifetimes and descriptions are still
 * checked there. */
#include "check.h"

#include <math.h>
#include <vector>

static bool on_sim;

__global__ void tex_sample(cudaTextureObject_t t, float *out, int w, int h, int normalized)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;

	if (x >= w || y >= h)
		return;
	float u = x + 0.25f, v = y + 0.75f;

	if (normalized) {
		u /= w;
		v /= h;
	}
	out[y * w + x] = tex2D<float>(t, u, v);
}

__global__ void surf_write(cudaSurfaceObject_t s, int w, int h)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;

	if (x < w && y < h)
		surf2Dwrite((float)(x * 1000 + y), s, x * (int)sizeof(float), y);
}

static float texel(const std::vector<float> &img, int w, int h, int x, int y)
{
	x = x < 0 ? 0 : x >= w ? w - 1 : x;     /* clamp addressing */
	y = y < 0 ? 0 : y >= h ? h - 1 : y;
	return img[y * w + x];
}

/* The hardware's linear filter: 9-bit fixed-point weights. */
static float lerp_ref(const std::vector<float> &img, int w, int h, float u, float v)
{
	float xb = u - 0.5f, yb = v - 0.5f;
	int x0 = (int)floorf(xb), y0 = (int)floorf(yb);
	float a = roundf((xb - x0) * 256.0f) / 256.0f, b = roundf((yb - y0) * 256.0f) / 256.0f;

	return (1 - a) * (1 - b) * texel(img, w, h, x0, y0) + a * (1 - b) * texel(img, w, h, x0 + 1, y0) +
	       (1 - a) * b * texel(img, w, h, x0, y0 + 1) + a * b * texel(img, w, h, x0 + 1, y0 + 1);
}

static void fill(std::vector<unsigned char> &v, unsigned seed)
{
	for (size_t i = 0; i < v.size(); i++)
		v[i] = (unsigned char)(i * 31 + seed * 7 + (i >> 8));
}

static void pitched_2d(void)
{
	const size_t w = 333, h = 17, hpitch = 401;
	std::vector<unsigned char> host(hpitch * h), back(hpitch * h, 0xcd), model(hpitch * h, 0xcd);
	unsigned char *a, *b;
	size_t pa, pb;

	fill(host, 1);
	CHECK(cudaMallocPitch((void **)&a, &pa, w, h));
	CHECK(cudaMallocPitch((void **)&b, &pb, w + 64, h + 3));
	REQUIRE(pa >= w && pb >= w + 64, "pitches %zu %zu", pa, pb);
	CHECK(cudaMemset2D(b, pb, 0x5a, w + 64, h + 3));
	CHECK(cudaMemcpy2D(a, pa, host.data(), hpitch, w, h, cudaMemcpyHostToDevice));
	/* Device to device into (x 7, y 2) of the larger buffer. */
	CHECK(cudaMemcpy2D(b + 2 * pb + 7, pb, a, pa, w, h, cudaMemcpyDeviceToDevice));
	CHECK(cudaMemcpy2D(back.data(), hpitch, a, pa, w, h, cudaMemcpyDeviceToHost));
	for (size_t y = 0; y < h; y++)
		memcpy(&model[y * hpitch], &host[y * hpitch], w);
	REQUIRE(memcmp(back.data(), model.data(), back.size()) == 0, "2D H2D/D2H round trip differs");

	std::vector<unsigned char> big(pb * (h + 3));
	CHECK(cudaMemcpy(big.data(), b, big.size(), cudaMemcpyDeviceToHost));
	for (size_t y = 0; y < h + 3; y++)
		for (size_t x = 0; x < w + 64; x++) {
			bool in = y >= 2 && y < h + 2 && x >= 7 && x < w + 7;
			unsigned char want = in ? host[(y - 2) * hpitch + x - 7] : 0x5a;

			REQUIRE(big[y * pb + x] == want, "D2D 2D: (%zu, %zu) is %#x, expected %#x", x, y,
				big[y * pb + x], want);
		}
	/* Async on a stream, back again. */
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s));
	CHECK(cudaMemset2DAsync(a, pa, 0x11, w, h, s));
	CHECK(cudaMemcpy2DAsync(back.data(), hpitch, a, pa, w, h, cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamSynchronize(s));
	for (size_t y = 0; y < h; y++)
		for (size_t x = 0; x < w; x++)
			REQUIRE(back[y * hpitch + x] == 0x11, "memset2D async at (%zu, %zu)", x, y);
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(a));
	CHECK(cudaFree(b));
	printf("pitched 2D: ok (pitch %zu)\n", pa);
}

static void copies_3d(void)
{
	cudaExtent ext = make_cudaExtent(123, 7, 5);
	cudaPitchedPtr dev;
	const size_t hp = 130, hrows = 9;
	std::vector<unsigned char> host(hp * hrows * ext.depth), back(hp * hrows * ext.depth, 0);

	fill(host, 2);
	CHECK(cudaMalloc3D(&dev, ext));
	cudaMemcpy3DParms p = {};
	p.srcPtr = make_cudaPitchedPtr(host.data(), hp, ext.width, hrows);
	p.dstPtr = dev;
	p.extent = ext;
	p.kind = cudaMemcpyHostToDevice;
	CHECK(cudaMemcpy3D(&p));
	cudaMemcpy3DParms q = {};
	q.srcPtr = dev;
	q.dstPtr = make_cudaPitchedPtr(back.data(), hp, ext.width, hrows);
	q.extent = ext;
	q.kind = cudaMemcpyDeviceToHost;
	CHECK(cudaMemcpy3D(&q));
	for (size_t z = 0; z < ext.depth; z++)
		for (size_t y = 0; y < ext.height; y++)
			for (size_t x = 0; x < ext.width; x++) {
				size_t i = (z * hrows + y) * hp + x;

				REQUIRE(back[i] == host[i], "3D at (%zu, %zu, %zu)", x, y, z);
			}
	CHECK(cudaFree(dev.ptr));
	printf("3D copies: ok\n");
}

static void arrays(void)
{
	const int w = 45, h = 13;
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
	std::vector<float> img(w * h), back(w * h), back2(w * h);
	cudaArray_t a, b;
	float *d;
	size_t dp;

	for (int i = 0; i < w * h; i++)
		img[i] = (float)(i % 97) * 0.5f - 3.0f;
	CHECK(cudaMallocArray(&a, &fd, w, h));
	CHECK(cudaMallocArray(&b, &fd, w, h));
	CHECK(cudaMemcpy2DToArray(a, 0, 0, img.data(), w * sizeof(float), w * sizeof(float), h,
				  cudaMemcpyHostToDevice));                   /* HtoA */
	CHECK(cudaMallocPitch((void **)&d, &dp, w * sizeof(float), h));
	CHECK(cudaMemcpy2DFromArray(d, dp, a, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToDevice));  /* AtoD */
	CHECK(cudaMemcpy2DToArray(b, 0, 0, d, dp, w * sizeof(float), h, cudaMemcpyDeviceToDevice));    /* DtoA */
	CHECK(cudaMemcpy2DFromArray(back.data(), w * sizeof(float), b, 0, 0, w * sizeof(float), h,
				    cudaMemcpyDeviceToHost));                 /* AtoH */
	REQUIRE(memcmp(back.data(), img.data(), back.size() * sizeof(float)) == 0, "array round trip differs");
	/* A window: rows 3..7, columns 5..14 of a into b at (0, 0). */
	CHECK(cudaMemcpy2DArrayToArray(b, 0, 0, a, 5 * sizeof(float), 3, 10 * sizeof(float), 5,
				       cudaMemcpyDeviceToDevice));
	CHECK(cudaMemcpy2DFromArray(back2.data(), w * sizeof(float), b, 0, 0, w * sizeof(float), h,
				    cudaMemcpyDeviceToHost));
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			float want = y < 5 && x < 10 ? img[(y + 3) * w + x + 5] : img[y * w + x];

			REQUIRE(back2[y * w + x] == want, "AtoA window at (%d, %d)", x, y);
		}
	cudaChannelFormatDesc got;
	cudaExtent e;
	unsigned flags;
	CHECK(cudaArrayGetInfo(&got, &e, &flags, a));
	REQUIRE(got.x == 32 && got.f == cudaChannelFormatKindFloat && e.width == (size_t)w && e.height == (size_t)h,
		"array info: %d bits, %zux%zu", got.x, e.width, e.height);

	/* Out of bounds copies fail and leave the array alone. */
	EXPECT_RT(cudaMemcpy2DToArray(a, 4, 0, img.data(), w * sizeof(float), w * sizeof(float), h,
				      cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	EXPECT_RT(cudaMemcpy2DFromArray(back.data(), w * sizeof(float), a, 0, 1, w * sizeof(float), h,
					cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
	/* Rows far past the pitched allocation (and past its 2 MiB mapping). */
	std::vector<float> tall(w * (h + 5000));
	EXPECT_RT(cudaMemcpy2D(d, dp, tall.data(), w * sizeof(float), w * sizeof(float), h + 5000,
			       cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	CHECK(cudaMemcpy2DFromArray(back.data(), w * sizeof(float), a, 0, 0, w * sizeof(float), h,
				    cudaMemcpyDeviceToHost));
	REQUIRE(memcmp(back.data(), img.data(), back.size() * sizeof(float)) == 0, "a failed copy changed the array");

	/* The driver's 1D array copies, at byte offsets. */
	DRV_FN(cuArrayCreate);
	DRV_FN(cuArrayDestroy);
	DRV_FN(cuMemcpyHtoA);
	DRV_FN(cuMemcpyAtoH);
	DRV_FN(cuMemcpyAtoD);
	DRV_FN(cuMemcpyDtoA);
	CUDA_ARRAY_DESCRIPTOR ad = { 1000, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1 };
	CUarray one;
	std::vector<unsigned char> bytes(1000), bb(1000, 0);
	fill(bytes, 3);
	CHECK_DRV(p_cuArrayCreate(&one, &ad));
	CHECK_DRV(p_cuMemcpyHtoA(one, 0, bytes.data(), 1000));
	CHECK_DRV(p_cuMemcpyAtoD((CUdeviceptr)d, one, 17, 501));
	CHECK_DRV(p_cuMemcpyDtoA(one, 3, (CUdeviceptr)d, 501));
	CHECK_DRV(p_cuMemcpyAtoH(bb.data(), one, 0, 1000));
	for (int i = 0; i < 1000; i++) {
		unsigned char want = i >= 3 && i < 504 ? bytes[i - 3 + 17] : bytes[i];

		REQUIRE(bb[i] == want, "1D array byte %d", i);
	}
	EXPECT_DRV(p_cuMemcpyAtoH(bb.data(), one, 990, 11), CUDA_ERROR_INVALID_VALUE);
	CHECK_DRV(p_cuArrayDestroy(one));
	CHECK(cudaFreeArray(b));
	CHECK(cudaFree(d));

	/* The failures expected above stay the runtime's last error: clear it,
	 * so that the launches below report their own. */
	(void)cudaGetLastError();

	/* Textures: point and linear filtering, unnormalized and normalized. */
	cudaResourceDesc rd = {};
	rd.resType = cudaResourceTypeArray;
	rd.res.array.array = a;
	float *out;
	CHECK(cudaMalloc(&out, w * h * sizeof(float)));
	std::vector<float> res(w * h);
	for (int mode = 0; mode < 4; mode++) {
		bool linear = mode & 1, norm = mode & 2;
		cudaTextureDesc td = {};
		td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
		td.filterMode = linear ? cudaFilterModeLinear : cudaFilterModePoint;
		td.readMode = cudaReadModeElementType;
		td.normalizedCoords = norm;
		cudaTextureObject_t t;
		CHECK(cudaCreateTextureObject(&t, &rd, &td, NULL));
		REQUIRE(t != 0, "texture object 0");
		cudaResourceDesc rback;
		cudaTextureDesc tback;
		CHECK(cudaGetTextureObjectResourceDesc(&rback, t));
		REQUIRE(rback.resType == cudaResourceTypeArray && rback.res.array.array == a,
			"texture resource names another array");
		CHECK(cudaGetTextureObjectTextureDesc(&tback, t));
		REQUIRE(tback.filterMode == td.filterMode && tback.normalizedCoords == td.normalizedCoords,
			"texture description changed");
		if (on_sim) {
			if (mode == 0)
				printf("texture sampling skipped: the sim's CPU kernels do not sample textures\n");
		} else {
			tex_sample<<<dim3((w + 63) / 64, h), 64>>>(t, out, w, h, norm);
			CHECK(cudaGetLastError());
			CHECK(cudaMemcpy(res.data(), out, res.size() * sizeof(float), cudaMemcpyDeviceToHost));
			for (int y = 0; y < h; y++)
				for (int x = 0; x < w; x++) {
					float u = x + 0.25f, v = y + 0.75f;
					float want = linear ? lerp_ref(img, w, h, u, v)
							    : texel(img, w, h, (int)floorf(u), (int)floorf(v));

					REQUIRE(fabsf(res[y * w + x] - want) <= 1e-3f * (1 + fabsf(want)),
						"mode %d (%s%s) at (%d, %d): %g, expected %g", mode,
						linear ? "linear" : "point", norm ? ", normalized" : "", x, y,
						res[y * w + x], want);
				}
		}
		CHECK(cudaDestroyTextureObject(t));
	}
	CHECK(cudaFree(out));
	CHECK(cudaFreeArray(a));
	printf("arrays and textures: ok\n");
}

static void surfaces_and_mipmaps(void)
{
	const int w = 40, h = 9;
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
	cudaArray_t a;
	std::vector<float> back(w * h, -1.0f);

	CHECK(cudaMallocArray(&a, &fd, w, h, cudaArraySurfaceLoadStore));
	cudaResourceDesc rd = {};
	rd.resType = cudaResourceTypeArray;
	rd.res.array.array = a;
	cudaSurfaceObject_t s;
	CHECK(cudaCreateSurfaceObject(&s, &rd));
	cudaResourceDesc rback;
	CHECK(cudaGetSurfaceObjectResourceDesc(&rback, s));
	REQUIRE(rback.res.array.array == a, "surface resource names another array");
	if (on_sim) {
		printf("surface write skipped: the sim's CPU kernels do not write surfaces\n");
	} else {
		surf_write<<<dim3(1, h), 64>>>(s, w, h);
		CHECK(cudaGetLastError());
		CHECK(cudaMemcpy2DFromArray(back.data(), w * sizeof(float), a, 0, 0, w * sizeof(float), h,
					    cudaMemcpyDeviceToHost));
		for (int y = 0; y < h; y++)
			for (int x = 0; x < w; x++)
				REQUIRE(back[y * w + x] == (float)(x * 1000 + y), "surface at (%d, %d)", x, y);
	}
	CHECK(cudaDestroySurfaceObject(s));
	CHECK(cudaFreeArray(a));

	/* Mipmapped: level sizes halve; a level takes copies like an array. */
	cudaMipmappedArray_t m;
	CHECK(cudaMallocMipmappedArray(&m, &fd, make_cudaExtent(64, 32, 0), 4));
	for (unsigned l = 0; l < 4; l++) {
		cudaArray_t lv;
		cudaExtent e;
		cudaChannelFormatDesc got;
		CHECK(cudaGetMipmappedArrayLevel(&lv, m, l));
		CHECK(cudaArrayGetInfo(&got, &e, NULL, lv));
		REQUIRE(e.width == (size_t)(64 >> l) && e.height == (size_t)(32 >> l), "level %u is %zux%zu", l,
			e.width, e.height);
		std::vector<float> in(e.width * e.height), out(e.width * e.height);
		for (size_t i = 0; i < in.size(); i++)
			in[i] = (float)(l * 10000 + i);
		CHECK(cudaMemcpy2DToArray(lv, 0, 0, in.data(), e.width * 4, e.width * 4, e.height,
					  cudaMemcpyHostToDevice));
		CHECK(cudaMemcpy2DFromArray(out.data(), e.width * 4, lv, 0, 0, e.width * 4, e.height,
					    cudaMemcpyDeviceToHost));
		REQUIRE(in == out, "mipmap level %u round trip", l);
	}
	cudaResourceDesc mr = {};
	mr.resType = cudaResourceTypeMipmappedArray;
	mr.res.mipmap.mipmap = m;
	cudaTextureDesc td = {};
	td.filterMode = cudaFilterModePoint;
	td.mipmapFilterMode = cudaFilterModePoint;
	td.normalizedCoords = 1;
	td.maxMipmapLevelClamp = 3;
	cudaTextureObject_t t;
	CHECK(cudaCreateTextureObject(&t, &mr, &td, NULL));
	CHECK(cudaDestroyTextureObject(t));
	CHECK(cudaFreeMipmappedArray(m));
	printf("surfaces and mipmaps: ok\n");
}

static void batch(void)
{
	DRV_FN(cuMemcpyBatchAsync);
	const size_t n = 4096;
	std::vector<unsigned char> h1(n), h2(n), back(3 * n, 0);
	unsigned char *d;
	fill(h1, 4);
	fill(h2, 5);
	CHECK(cudaMalloc(&d, 3 * n));
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s));
	CUdeviceptr dsts[3] = { (CUdeviceptr)d, (CUdeviceptr)(d + n), (CUdeviceptr)(d + 2 * n) };
	CUdeviceptr srcs[3] = { (CUdeviceptr)h1.data(), (CUdeviceptr)h2.data(), (CUdeviceptr)d };
	size_t sizes[3] = { n, n, n };
	CUmemcpyAttributes attr = {};
	attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	size_t idx = 0;
	CHECK_DRV(p_cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, (CUstream)s));
	CHECK(cudaStreamSynchronize(s));
	CHECK(cudaMemcpy(back.data(), d, 3 * n, cudaMemcpyDeviceToHost));
	REQUIRE(memcmp(back.data(), h1.data(), n) == 0 && memcmp(back.data() + n, h2.data(), n) == 0 &&
		memcmp(back.data() + 2 * n, h1.data(), n) == 0, "batched copies differ");
	attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_INVALID;
	EXPECT_DRV(p_cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, (CUstream)s), CUDA_ERROR_INVALID_VALUE);
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(d));
	printf("batched copies: ok\n");
}

int main(void)
{
	cudaDeviceProp prop;

	CHECK(cudaGetDeviceProperties(&prop, 0));
	on_sim = strncmp(prop.name, "tern sim", 8) == 0;
	pitched_2d();
	copies_3d();
	arrays();
	surfaces_and_mipmaps();
	batch();
	printf("PASS arrays_textures%s\n", on_sim ? " (texture sampling and surface writes skipped on the sim)" : "");
	return 0;
}
