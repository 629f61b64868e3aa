/* A module with a __managed__ variable, loaded with the driver API by
 * managed.cu (cuModuleLoadData, cuModuleGetGlobal). Its kernel is managed.cu's
 * mg_affine again, so the sim runs the same CPU version. */
__device__ __managed__ int mm_var[4] = { 1, 2, 3, 4 };

extern "C" __global__ void mg_affine(int *a, int k, int b, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] = a[i] * k + b;
}
