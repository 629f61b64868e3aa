/* vector_add: cudaMalloc, copies both ways, one launch, exact comparison. */
#include "check.h"

#include <vector>

extern "C" __global__ void vec_add(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		c[i] = a[i] + b[i];
}

int main(void)
{
	/* Not a multiple of the block size, so the bounds check matters. */
	const int n = 100003;
	const size_t bytes = n * sizeof(float);
	std::vector<float> a(n), b(n), c(n, -1.0f);
	float *da, *db, *dc;

	for (int i = 0; i < n; i++) {
		a[i] = (float)i * 0.5f;
		b[i] = (float)(n - i) * 0.25f;
	}
	CHECK(cudaMalloc(&da, bytes));
	CHECK(cudaMalloc(&db, bytes));
	CHECK(cudaMalloc(&dc, bytes));
	CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
	/* Poison the output so a launch that never ran cannot pass. */
	CHECK(cudaMemcpy(dc, c.data(), bytes, cudaMemcpyHostToDevice));

	vec_add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
	CHECK(cudaGetLastError());
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));

	for (int i = 0; i < n; i++)
		REQUIRE(c[i] == a[i] + b[i], "c[%d] = %g, expected %g", i, c[i], a[i] + b[i]);

	CHECK(cudaFree(da));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dc));
	test_pass("vector_add");
	return 0;
}
