/* Module B of two_modules: loaded as a module and as a library. */
extern "C" __global__ void mb_axpy(float a, const int *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = a * (float)x[i] + y[i];
}
