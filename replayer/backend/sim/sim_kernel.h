/* CPU versions of CUDA kernels, for the sim backend.
 *
 * The sim backend runs a kernel by calling a C function registered under the
 * kernel's (mangled) name, in the worker process. Device pointers are real
 * addresses there: the session's arena is mapped at the same virtual address
 * as the guest sees, so a kernel dereferences its pointer arguments directly.
 *
 * A plugin is a shared object that ternd loads at start (`--sim-kernels PATH`
 * or `sim_kernels = PATH[:PATH...]` in ternd.conf; never chosen by a guest).
 * It defines one exported table:
 *
 *     #include "sim_kernel.h"
 *
 *     static void vec_add(const struct sim_launch *l)
 *     {
 *             const float *a = SIM_ARG(l, 0, const float *);
 *             const float *b = SIM_ARG(l, 1, const float *);
 *             float *c = SIM_ARG(l, 2, float *);
 *             int n = SIM_ARG(l, 3, int);
 *
 *             SIM_FOR_EACH_THREAD(l, i)        // i = global linear x index
 *                     if (i < n)
 *                             c[i] = a[i] + b[i];
 *     }
 *
 *     SIM_KERNELS_BEGIN
 *             SIM_KERNEL("vec_add", vec_add),        // extern "C" kernel
 *             SIM_KERNEL("_Z4scalePfif", scale),     // C++ mangled name
 *     SIM_KERNELS_END
 *
 * The function is called once per launch, on the worker's stream thread, in
 * stream order; it loops over the grid itself. Kernels that need
 * __syncthreads() between phases write the phases as separate loops over the
 * block. A launch of a kernel with no CPU version fails with
 * CUDA_ERROR_NOT_SUPPORTED and a log line naming it. A kernel that faults
 * (SIGSEGV/SIGBUS) leaves its context with the sticky
 * CUDA_ERROR_ILLEGAL_ADDRESS instead of killing the worker. docs/sim.md has
 * the rest.
 */
#ifndef TERN_SIM_KERNEL_H
#define TERN_SIM_KERNEL_H

#include <stdint.h>

#define SIM_KERNEL_ABI 2

struct sim_dim3 {
	uint32_t x, y, z;
};

struct sim_launch {
	struct sim_dim3 grid;
	struct sim_dim3 block;
	uint32_t shared_bytes;          /* dynamic shared memory requested */
	void *shared;                   /* scratch of shared_bytes, per block run */
	uint32_t param_count;
	void *const *params;            /* params[i] points at argument i's bytes */
	const uint32_t *param_sizes;    /* size of each argument, from the image */
	/* A __device__ or __constant__ variable of the kernel's module by name
	 * (as cuModuleGetGlobal knows it), or NULL: a CPU kernel reaches the
	 * globals its CUDA version names as symbols through this. */
	void *(*global)(const struct sim_launch *launch, const char *name);
	const void *module;             /* the sim's, for global() */
	/* cudaGraphSetConditional(handle, value): sets the condition of the
	 * conditional handle whose value @handle the kernel got as an argument
	 * (ABI 2). An unknown handle is ignored, as a stale one on a GPU. */
	void (*set_conditional)(const struct sim_launch *launch, uint64_t handle, unsigned value);
};

typedef void (*sim_kernel_fn)(const struct sim_launch *launch);

struct sim_kernel {
	const char *name;               /* mangled name as in the cubin */
	sim_kernel_fn fn;
};

struct sim_kernel_table {
	uint32_t abi;                   /* SIM_KERNEL_ABI */
	const struct sim_kernel *kernels;  /* terminated by a NULL name */
};

#define SIM_ARG(launch, i, type) (*(type *)(launch)->params[(i)])
/* The module global @name as a pointer to @type (NULL if there is none). */
#define SIM_GLOBAL(launch, name, type) ((type *)(launch)->global((launch), (name)))

/* cudaGraphSetConditional(handle, value) in a CPU kernel. */
#define SIM_SET_CONDITIONAL(launch, handle, value) ((launch)->set_conditional((launch), (handle), (value)))

/* Loop over every thread of the grid in x, as blockIdx.x * blockDim.x + threadIdx.x. */
#define SIM_FOR_EACH_THREAD(launch, i)                                         \
	for (uint64_t i = 0;                                                   \
	     i < (uint64_t)(launch)->grid.x * (launch)->block.x; i++)

#define SIM_KERNELS_BEGIN                                                      \
	static const struct sim_kernel sim_kernel_list_[] = {
#define SIM_KERNEL(name, fn) { (name), (fn) }
#define SIM_KERNELS_END                                                        \
		{ 0, 0 }                                                       \
	};                                                                     \
	__attribute__((visibility("default")))                                 \
	const struct sim_kernel_table tern_sim_kernel_table = {                \
		SIM_KERNEL_ABI, sim_kernel_list_ };

#endif
