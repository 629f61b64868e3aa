/* The module of module_enumerate: three kernels to list. */
extern "C" __global__ void me_set(int *out, int value, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = value + i;
}

extern "C" __global__ void me_add(int *out, int value, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] += value;
}

extern "C" __global__ void me_scale(float *out, float f, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] *= f;
}
