/* multi_tu: one program made of two .cu files linked together, so cudart
 * registers two fatbins; built with -cudart shared. This file's kernel uses a
 * C name, the other file's a C++ mangled one. */
#include "check.h"

void multi_other_twice(int *d, int n, cudaStream_t s);   /* multi_other.cu */

extern "C" __global__ void mt_square(int *d, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		d[i] = d[i] * d[i];
}

int main(void)
{
	const int n = 4096;
	static int h[4096];
	int *d;
	int rt = 0;
	cudaStream_t s;

	CHECK(cudaRuntimeGetVersion(&rt));
	REQUIRE(rt >= 12000, "runtime version %d", rt);
	for (int i = 0; i < n; i++)
		h[i] = i % 97 - 48;
	CHECK(cudaMalloc(&d, n * sizeof(int)));
	CHECK(cudaStreamCreate(&s));
	CHECK(cudaMemcpyAsync(d, h, n * sizeof(int), cudaMemcpyHostToDevice, s));
	mt_square<<<n / 256, 256, 0, s>>>(d, n);
	CHECK(cudaGetLastError());
	multi_other_twice(d, n, s);
	mt_square<<<n / 128, 128, 0, s>>>(d, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpyAsync(h, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamSynchronize(s));
	for (int i = 0; i < n; i++) {
		int v = (i % 97 - 48) * (i % 97 - 48) * 2;
		int want = v * v;

		REQUIRE(h[i] == want, "d[%d] = %d, expected %d", i, h[i], want);
	}
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(d));
	test_pass("multi_tu");
	return 0;
}
