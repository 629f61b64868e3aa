/* Module A of two_modules: loaded as a fatbin with cuModuleLoadData. */
extern "C" __global__ void ma_iota(int *out, int base, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = base + i;
}
