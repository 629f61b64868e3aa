/* The module of graph_kernel_nodes: loaded as XLA loads its kernels (a cubin
 * through cuModuleLoadFatBinary) and as a library (cuLibraryLoadData). CPU
 * versions for the sim: sim_kernels.c. */

/* a[i] = a[i] * mul + add: which node ran, and in which order, shows in a. */
extern "C" __global__ void kn_affine(int *a, int mul, int add, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] = a[i] * mul + add;
}

/* XLA's SetWhileCondition kernel's part: one step of a while loop, which
 * goes on while *left is positive. */
extern "C" __global__ void kn_step(cudaGraphConditionalHandle h, int *left)
{
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		*left -= 1;
		cudaGraphSetConditional(h, *left > 0 ? 1u : 0u);
	}
}

/* XLA's barrier before CUDA 12.4: a kernel node without parameters. */
extern "C" __global__ void kn_noop(void)
{
}
