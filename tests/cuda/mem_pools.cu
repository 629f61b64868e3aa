/* mem_pools: stream-ordered allocation. cudaMallocAsync and cudaFreeAsync on
 * a stream with kernels and copies in between, the default pool's
 * attributes (used and reserved memory, their high-water marks and resets,
 * the release threshold, the reuse policies, trimming), a created pool
 * (cudaMallocFromPoolAsync, made the device's current pool, destroyed while
 * its blocks are live, which stay usable until freed) and the owning
 * device's access to a pool. Results are checked exactly. */
#include "check.h"

#include <vector>

extern "C" __global__ void mp_fill(int *out, int base, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = base + i;
}

static cuuint64_t attr(cudaMemPool_t pool, cudaMemPoolAttr a)
{
	cuuint64_t v = 0;

	CHECK(cudaMemPoolGetAttribute(pool, a, &v));
	return v;
}

/* Fills @n ints of @d on @s and checks them through a copy on the same stream. */
static void fill_check(int *d, int n, int base, cudaStream_t s)
{
	std::vector<int> h(n);

	mp_fill<<<(n + 255) / 256, 256, 0, s>>>(d, base, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamSynchronize(s));
	for (int i = 0; i < n; i++)
		REQUIRE(h[i] == base + i, "[%d] = %d, expected %d", i, h[i], base + i);
}

int main(void)
{
	const int n = (1 << 18) + 123;          /* not a multiple of any granule */
	const size_t bytes = n * sizeof(int);
	cudaMemPool_t dflt, cur, mine;
	cudaStream_t s;
	int *a, *b, *c, *d;
	int reuse = -1;
	cuuint64_t v, reserved;

	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaDeviceGetDefaultMemPool(&dflt, 0));
	CHECK(cudaDeviceGetMemPool(&cur, 0));
	REQUIRE(cur == dflt, "current pool %p, default %p", (void *)cur, (void *)dflt);

	/* The default pool: a block in stream order, counted while it lives. */
	CHECK(cudaMallocAsync(&a, bytes, s));
	fill_check(a, n, 1000, s);
	REQUIRE(attr(dflt, cudaMemPoolAttrUsedMemCurrent) >= bytes, "used %llu < %zu",
		(unsigned long long)attr(dflt, cudaMemPoolAttrUsedMemCurrent), bytes);
	REQUIRE(attr(dflt, cudaMemPoolAttrReservedMemCurrent) >= attr(dflt, cudaMemPoolAttrUsedMemCurrent),
		"reserved below used");
	REQUIRE(attr(dflt, cudaMemPoolAttrUsedMemHigh) >= bytes, "used high-water mark too low");
	CHECK(cudaFreeAsync(a, s));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(attr(dflt, cudaMemPoolAttrUsedMemCurrent) == 0, "used %llu after the free",
		(unsigned long long)attr(dflt, cudaMemPoolAttrUsedMemCurrent));
	REQUIRE(attr(dflt, cudaMemPoolAttrUsedMemHigh) >= bytes, "high-water mark lost");
	v = 0;
	CHECK(cudaMemPoolSetAttribute(dflt, cudaMemPoolAttrUsedMemHigh, &v));
	REQUIRE(attr(dflt, cudaMemPoolAttrUsedMemHigh) == 0, "used high-water mark not reset");
	v = 1;
	EXPECT_RT(cudaMemPoolSetAttribute(dflt, cudaMemPoolAttrUsedMemCurrent, &v),
		  cudaErrorInvalidValue);
	EXPECT_RT(cudaGetLastError(), cudaErrorInvalidValue);  /* the runtime kept it: clear it */

	/* Settable attributes read back. */
	v = ~0ull;
	CHECK(cudaMemPoolSetAttribute(dflt, cudaMemPoolAttrReleaseThreshold, &v));
	REQUIRE(attr(dflt, cudaMemPoolAttrReleaseThreshold) == ~0ull, "release threshold");
	v = 0;
	CHECK(cudaMemPoolSetAttribute(dflt, cudaMemPoolAttrReleaseThreshold, &v));
	reuse = 0;
	CHECK(cudaMemPoolSetAttribute(dflt, cudaMemPoolReuseAllowOpportunistic, &reuse));
	reuse = -1;
	CHECK(cudaMemPoolGetAttribute(dflt, cudaMemPoolReuseAllowOpportunistic, &reuse));
	REQUIRE(reuse == 0, "reuse policy %d, set 0", reuse);
	reuse = 1;
	CHECK(cudaMemPoolSetAttribute(dflt, cudaMemPoolReuseAllowOpportunistic, &reuse));
	reserved = attr(dflt, cudaMemPoolAttrReservedMemCurrent);
	CHECK(cudaMemPoolTrimTo(dflt, 0));
	REQUIRE(attr(dflt, cudaMemPoolAttrReservedMemCurrent) <= reserved, "trimming grew the pool");

	/* A pool of our own, then made the device's current one. */
	cudaMemPoolProps props = {};
	props.allocType = cudaMemAllocationTypePinned;
	props.handleTypes = cudaMemHandleTypeNone;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 0;
	CHECK(cudaMemPoolCreate(&mine, &props));
	REQUIRE(mine != dflt, "a new pool is the default one");
	CHECK(cudaMallocFromPoolAsync(&b, 3 * bytes, mine, s));
	fill_check(b, 3 * n, -7, s);
	REQUIRE(attr(mine, cudaMemPoolAttrUsedMemCurrent) >= 3 * bytes, "own pool used too low");
	REQUIRE(attr(dflt, cudaMemPoolAttrUsedMemCurrent) == 0, "default pool charged for another's block");
	CHECK(cudaDeviceSetMemPool(0, mine));
	CHECK(cudaDeviceGetMemPool(&cur, 0));
	REQUIRE(cur == mine, "current pool %p, set %p", (void *)cur, (void *)mine);
	CHECK(cudaMallocAsync(&c, 1000, s));
	REQUIRE(attr(mine, cudaMemPoolAttrUsedMemCurrent) >= 3 * bytes + 1000,
		"cudaMallocAsync did not use the current pool");
	REQUIRE(attr(dflt, cudaMemPoolAttrUsedMemCurrent) == 0, "default pool used after the switch");

	/* The owning device has read-write access. */
	cudaMemLocation loc = {};
	cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
	loc.type = cudaMemLocationTypeDevice;
	loc.id = 0;
	CHECK(cudaMemPoolGetAccess(&flags, mine, &loc));
	REQUIRE(flags == cudaMemAccessFlagsProtReadWrite, "access flags %d", (int)flags);

	/* Destroyed with live blocks: the default pool is current again, and the
	 * blocks stay usable until they are freed. */
	CHECK(cudaMemPoolDestroy(mine));
	CHECK(cudaDeviceGetMemPool(&cur, 0));
	REQUIRE(cur == dflt, "after destroying the current pool: %p, default %p", (void *)cur,
		(void *)dflt);
	fill_check(b, 3 * n, 42, s);
	CHECK(cudaFreeAsync(b, s));
	CHECK(cudaFreeAsync(c, s));

	/* The default pool serves again. */
	CHECK(cudaMallocAsync(&d, bytes, s));
	fill_check(d, n, 5, s);
	CHECK(cudaFreeAsync(d, s));
	CHECK(cudaStreamSynchronize(s));
	REQUIRE(attr(dflt, cudaMemPoolAttrUsedMemCurrent) == 0, "used %llu at the end",
		(unsigned long long)attr(dflt, cudaMemPoolAttrUsedMemCurrent));
	CHECK(cudaStreamDestroy(s));
	test_pass("mem_pools");
	return 0;
}
