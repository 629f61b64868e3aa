// Device code for the sim unit tests: built by nvcc into a fatbin and a cubin
// whose kernel names and parameter layouts the sim must read. The CPU
// versions live in kernels_test.c.

struct packed3 {
	int a;
	short b;
	char c;
};

__device__ int counter = 42;
__managed__ int mvar[5] = { 1, 2, 3, 4, 5 };

extern "C" __global__ void vec_add(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		c[i] = a[i] + b[i];
}

extern "C" __global__ void slow_fill(unsigned *p, unsigned value, unsigned n, unsigned ms)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;

	(void)ms;
	if (i < n)
		p[i] = value;
}

extern "C" __global__ void poke(int *p)
{
	*p = 1;
}

extern "C" __global__ void mixed(char c, double d, packed3 s, int *out)
{
	out[0] = c + (int)d + s.a + s.b + s.c;
}

extern "C" __global__ void no_cpu(int *out)
{
	*out = 7;
}

__global__ void scale(float *x, float f, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		x[i] *= f + counter;
}
