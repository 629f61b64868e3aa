/* Second translation unit of multi_tu (see multi_main.cu). */
#include "check.h"

/* Deliberately not extern "C": the sim looks it up by its mangled name. */
__global__ void mt_twice(int *d, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		d[i] *= 2;
}

void multi_other_twice(int *d, int n, cudaStream_t s)
{
	mt_twice<<<(n + 63) / 64, 64, 0, s>>>(d, n);
	CHECK(cudaGetLastError());
}
