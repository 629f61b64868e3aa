/* memsets: cudaMemset (sync and async) and the driver's cuMemsetD8/D16/D32
 * (sync and async), at offsets and odd lengths inside a larger buffer; every
 * byte of the buffer is compared with a host model afterwards, so a set that
 * spills past its range fails too. */
#include "check.h"

#include <vector>

static const size_t buf_bytes = 1 << 20;

static void fill16(std::vector<unsigned char> &m, size_t off, unsigned short v, size_t count)
{
	for (size_t i = 0; i < count; i++)
		memcpy(&m[off + 2 * i], &v, 2);
}

static void fill32(std::vector<unsigned char> &m, size_t off, unsigned v, size_t count)
{
	for (size_t i = 0; i < count; i++)
		memcpy(&m[off + 4 * i], &v, 4);
}

static void compare(const char *step, unsigned char *dbuf, const std::vector<unsigned char> &model)
{
	std::vector<unsigned char> got(buf_bytes);

	CHECK(cudaMemcpy(got.data(), dbuf, buf_bytes, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < buf_bytes; i++)
		REQUIRE(got[i] == model[i], "after %s: byte %zu is %#x, expected %#x", step, i,
			got[i], model[i]);
}

int main(void)
{
	DRV_FN(cuMemsetD8);
	DRV_FN(cuMemsetD16);
	DRV_FN(cuMemsetD32);
	DRV_FN(cuMemsetD8Async);
	DRV_FN(cuMemsetD16Async);
	DRV_FN(cuMemsetD32Async);
	std::vector<unsigned char> model(buf_bytes, 0xee);
	unsigned char *dbuf;
	cudaStream_t s;

	CHECK(cudaMalloc(&dbuf, buf_bytes));
	CHECK(cudaStreamCreate(&s));
	CHECK(cudaMemcpy(dbuf, model.data(), buf_bytes, cudaMemcpyHostToDevice));

	/* Whole buffer, then ranges that start and end off any natural boundary. */
	CHECK(cudaMemset(dbuf, 0x11, buf_bytes));
	memset(model.data(), 0x11, buf_bytes);
	compare("cudaMemset whole", dbuf, model);

	CHECK(cudaMemset(dbuf + 3, 0xa5, 1001));
	memset(&model[3], 0xa5, 1001);
	compare("cudaMemset +3", dbuf, model);

	CHECK(cudaMemsetAsync(dbuf + 4099, 0x00, 77777, s));
	CHECK(cudaStreamSynchronize(s));
	memset(&model[4099], 0x00, 77777);
	compare("cudaMemsetAsync", dbuf, model);

	CHECK_DRV(p_cuMemsetD8((CUdeviceptr)(dbuf + 100001), 0x7f, 12345));
	memset(&model[100001], 0x7f, 12345);
	compare("cuMemsetD8", dbuf, model);

	/* D16 needs 2-byte alignment, D32 4-byte. */
	CHECK_DRV(p_cuMemsetD16((CUdeviceptr)(dbuf + 200002), 0xbeef, 30001));
	fill16(model, 200002, 0xbeef, 30001);
	compare("cuMemsetD16", dbuf, model);

	CHECK_DRV(p_cuMemsetD32((CUdeviceptr)(dbuf + 300004), 0xdeadc0de, 50003));
	fill32(model, 300004, 0xdeadc0de, 50003);
	compare("cuMemsetD32", dbuf, model);

	CHECK_DRV(p_cuMemsetD8Async((CUdeviceptr)(dbuf + 600001), 0x3c, 999, (CUstream)s));
	CHECK_DRV(p_cuMemsetD16Async((CUdeviceptr)(dbuf + 700002), 0x1234, 4097, (CUstream)s));
	CHECK_DRV(p_cuMemsetD32Async((CUdeviceptr)(dbuf + 800000), 0x89abcdef, 16385, (CUstream)s));
	/* Later sets on the stream overlap earlier ones: order must hold. */
	CHECK(cudaMemsetAsync(dbuf + 800010, 0x42, 20, s));
	CHECK(cudaStreamSynchronize(s));
	memset(&model[600001], 0x3c, 999);
	fill16(model, 700002, 0x1234, 4097);
	fill32(model, 800000, 0x89abcdef, 16385);
	memset(&model[800010], 0x42, 20);
	compare("async driver memsets", dbuf, model);

	/* Misaligned D32 is an error natively (CUDA_ERROR_INVALID_VALUE). */
	EXPECT_DRV(p_cuMemsetD32((CUdeviceptr)(dbuf + 2), 0, 4), CUDA_ERROR_INVALID_VALUE);
	compare("rejected cuMemsetD32", dbuf, model);

	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(dbuf));
	test_pass("memsets");
	return 0;
}
