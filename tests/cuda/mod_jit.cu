/* The kernel jit_link compiles at run time: built to PTX only (nvcc -ptx),
 * embedded, and handed to the JIT linker. */
extern "C" __global__ void jl_affine(float *x, float a, float b, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		x[i] = a * x[i] + b;
}
