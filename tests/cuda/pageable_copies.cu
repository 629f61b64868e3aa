/* pageable_copies: copies between the device and pageable (malloc) memory,
 * small and large, synchronous and async, as the driver's semantics say:
 *
 * - a copy to the device returns once the source may be reused: the
 *   program overwrites it at once, and the device still gets what it held;
 * - a synchronous copy to the device orders after the work before it on
 *   the legacy stream, and a kernel after it sees all of it;
 * - a copy to the host (sync or async) returns with every byte there;
 * - a copy whose range is not device memory fails at its call.
 *
 * Over shm, copies of 1 MiB and more go through tern's staging
 * (docs/wire-protocol.md, "Pageable copies over shm"): the sizes cross its
 * slots (8 MiB by default) at odd offsets. Runs natively too (gpu-check).
 */
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <vector>

extern "C" __global__ void se_scale_add(const int *x, int *y, int k, int add, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		y[i] = x[i] * k + add;
}

static int pattern(size_t i, int seed)
{
	return (int)((uint32_t)i * 2654435761u + (uint32_t)seed);
}

static void fill(int *h, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		h[i] = pattern(i, seed);
}

static void expect(const int *h, size_t n, int k, int add, int seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		REQUIRE(h[i] == pattern(i, seed) * k + add, "%s: word %zu is %d, expected %d", what, i, h[i],
			pattern(i, seed) * k + add);
}

/* One size: to the device (source overwritten as soon as the call returns),
 * a kernel, back to the host; sync and async. */
static void round_trip(size_t words, bool async, cudaStream_t s, int seed)
{
	size_t bytes = words * sizeof(int);
	int *h = (int *)malloc(bytes), *back = (int *)malloc(bytes);
	int *x, *y;

	REQUIRE(h && back, "malloc of %zu bytes", bytes);
	CHECK(cudaMalloc(&x, bytes));
	CHECK(cudaMalloc(&y, bytes));
	fill(h, words, seed);
	if (async)
		CHECK(cudaMemcpyAsync(x, h, bytes, cudaMemcpyHostToDevice, s));
	else
		CHECK(cudaMemcpy(x, h, bytes, cudaMemcpyHostToDevice));
	/* The source may be reused now. */
	memset(h, 0x5a, bytes);
	se_scale_add<<<64, 256, 0, async ? s : 0>>>(x, y, 3, seed, (int)words);
	CHECK(cudaGetLastError());
	memset(back, 0, bytes);
	if (async)
		CHECK(cudaMemcpyAsync(back, y, bytes, cudaMemcpyDeviceToHost, s));
	else
		CHECK(cudaMemcpy(back, y, bytes, cudaMemcpyDeviceToHost));
	/* A copy to pageable memory is complete when it returns, async too. */
	expect(back, words, 3, seed, seed, async ? "async round trip" : "round trip");
	/* And the plain copy back of what went in. */
	CHECK(cudaMemcpy(back, x, bytes, cudaMemcpyDeviceToHost));
	expect(back, words, 1, 0, seed, "copy back");
	CHECK(cudaFree(x));
	CHECK(cudaFree(y));
	free(h);
	free(back);
}

/* Offsets into both buffers that no slot boundary matches. */
static void unaligned(size_t words)
{
	size_t bytes = words * sizeof(int);
	std::vector<int> h(words + 3), back(words + 3, 0);
	char *d;

	fill(h.data(), words + 3, 77);
	CHECK(cudaMalloc(&d, bytes + 64));
	CHECK(cudaMemcpy(d + 12, (char *)h.data() + 4, bytes - 5, cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy((char *)back.data() + 8, d + 12, bytes - 5, cudaMemcpyDeviceToHost));
	REQUIRE(!memcmp((char *)back.data() + 8, (char *)h.data() + 4, bytes - 5), "unaligned copy differs");
	CHECK(cudaFree(d));
}

static void bad_ranges(void)
{
	size_t bytes = 4u << 20;
	std::vector<char> h(2 * bytes);
	char *d;

	CHECK(cudaMalloc(&d, bytes));
	/* Longer than the allocation: refused at the call, both ways. */
	REQUIRE(cudaMemcpy(d, h.data(), 2 * bytes, cudaMemcpyHostToDevice) != cudaSuccess,
		"a copy past the allocation succeeded");
	cudaGetLastError();
	REQUIRE(cudaMemcpy(h.data(), d, 2 * bytes, cudaMemcpyDeviceToHost) != cudaSuccess,
		"a copy from past the allocation succeeded");
	cudaGetLastError();
	CHECK(cudaFree(d));
	/* The context is fine afterwards. */
	CHECK(cudaMalloc(&d, bytes));
	CHECK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
	CHECK(cudaFree(d));
}

int main(void)
{
	/* Below, at and across the staging's threshold and slots. */
	const size_t sizes[] = { 1000, (1u << 20) / 4 - 1, (1u << 20) / 4, (3u << 20) / 4 + 17,
				 (8u << 20) / 4, (33u << 20) / 4 + 123, (100u << 20) / 4 };
	cudaStream_t s;
	int seed = 1;

	CHECK(cudaSetDevice(0));
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	for (size_t words : sizes) {
		round_trip(words, false, s, seed++);
		round_trip(words, true, s, seed++);
	}
	unaligned((40u << 20) / 4 + 9);
	bad_ranges();
	CHECK(cudaStreamDestroy(s));
	printf("PASS pageable_copies\n");
	return 0;
}
