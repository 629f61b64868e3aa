/* Launches on the sim device: a kernel's arguments packed for its CPU
 * function, faults inside CPU kernels caught and reported as the driver
 * would, and the occupancy calculator (modules and functions: sim_module.c).
 */
#define LOG_PREFIX "sim: "
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim_module_internal.h"

/* ---- launch ------------------------------------------------------------ */

struct sim_launch_args {
	unsigned grid[3], block[3];
	unsigned shared_bytes;
	CUstream stream;
	void **params;
	void **extra;
};

CUresult sim_func_lookup(struct sim *sim, const void *h, struct sim_func **out)
{
	return sim_func_resolve(sim, h, out);
}

CUresult sim_kernel_check(const struct sim_func *f, const unsigned grid[3], const unsigned block[3],
			  unsigned shared_bytes)
{
	uint64_t threads = (uint64_t)block[0] * block[1] * block[2];

	if (!grid[0] || !grid[1] || !grid[2] || !threads)
		return CUDA_ERROR_INVALID_VALUE;
	if (grid[0] > 2147483647u || grid[1] > 65535 || grid[2] > 65535 || block[0] > 1024 ||
	    block[1] > 1024 || block[2] > 64 || threads > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	if (shared_bytes > (unsigned)f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES])
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

CUresult sim_kernel_args_pack(const struct sim_func *f, void **params, void **extra, uint8_t *args)
{
	if (params && extra)
		return CUDA_ERROR_INVALID_VALUE;
	memset(args, 0, f->param_bytes);
	if (params) {
		for (uint32_t i = 0; i < f->param_count; i++) {
			if (!params[i])
				return CUDA_ERROR_INVALID_VALUE;
			memcpy(args + f->params[i].offset, params[i], f->params[i].size);
		}
	} else if (extra) {
		const void *buf = NULL;
		const size_t *buf_size = NULL;
		unsigned i;

		for (i = 0; i < SIM_EXTRA_MAX && extra[2 * i] != CU_LAUNCH_PARAM_END; i++) {
			void *key = extra[2 * i], *value = extra[2 * i + 1];

			if (key == CU_LAUNCH_PARAM_BUFFER_POINTER)
				buf = value;
			else if (key == CU_LAUNCH_PARAM_BUFFER_SIZE)
				buf_size = value;
			else
				return CUDA_ERROR_INVALID_VALUE;
		}
		if (i == SIM_EXTRA_MAX || !buf || !buf_size || *buf_size < f->param_bytes)
			return CUDA_ERROR_INVALID_VALUE;
		memcpy(args, buf, f->param_bytes);
	} else if (f->param_count) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* The module's globals are fixed from its load to its unload, and an unload
 * drains the device first: no lock needed on the device thread. */
static void *sim_launch_global(const struct sim_launch *l, const char *name)
{
	const struct sim_module *m = l->module;

	for (uint32_t i = 0; m && i < m->global_count; i++)
		if (!strcmp(m->globals[i].name, name))
			return m->globals[i].storage;
	return NULL;
}

/* One block holds the arguments at their image offsets, then the pointer
 * array and the size array of struct sim_launch. */
struct sim_cmd *sim_kernel_cmd_new(struct sim_func *f, const uint8_t *args, const unsigned grid[3],
				   const unsigned block[3], unsigned shared_bytes)
{
	size_t ptrs_at = ((size_t)f->param_bytes + 15) & ~(size_t)15;
	size_t sizes_at = ptrs_at + f->param_count * sizeof(void *);
	struct sim_cmd *cmd = sim_cmd_new(SIM_CMD_KERNEL);
	uint8_t *b;
	void **ptrs;
	uint32_t *sizes;

	if (!cmd)
		return NULL;
	b = calloc(1, sizes_at + f->param_count * sizeof(uint32_t) + 1);
	if (!b) {
		sim_cmd_free(cmd);
		return NULL;
	}
	memcpy(b, args, f->param_bytes);
	ptrs = (void **)(b + ptrs_at);
	sizes = (uint32_t *)(b + sizes_at);
	for (uint32_t i = 0; i < f->param_count; i++) {
		ptrs[i] = b + f->params[i].offset;
		sizes[i] = f->params[i].size;
	}
	cmd->kernel.block = b;
	cmd->kernel.fn = f;
	cmd->kernel.launch.grid = (struct sim_dim3){ grid[0], grid[1], grid[2] };
	cmd->kernel.launch.block = (struct sim_dim3){ block[0], block[1], block[2] };
	cmd->kernel.launch.shared_bytes = shared_bytes;
	cmd->kernel.launch.param_count = f->param_count;
	cmd->kernel.launch.params = ptrs;
	cmd->kernel.launch.param_sizes = sizes;
	cmd->kernel.launch.global = sim_launch_global;
	cmd->kernel.launch.module = f->module;
	cmd->kernel.launch.set_conditional = sim_launch_set_conditional;
	return cmd;
}

static CUresult sim_launch(const void *hfunc, const struct sim_launch_args *a)
{
	struct sim_stream *s;
	struct sim_ctx *ctx;
	struct sim_cmd *cmd;
	struct sim_func *f;
	struct sim *sim;
	uint8_t *args = NULL;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = sim_func_resolve(sim, hfunc, &f);
	if (!rc)
		rc = sim_stream_resolve(sim, a->stream, ctx, &s);
	if (!rc)
		rc = ctx->sticky;
	if (!rc)
		rc = sim_kernel_check(f, a->grid, a->block, a->shared_bytes);
	if (rc)
		goto out;
	args = malloc(f->param_bytes + 1);
	if (!args) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	rc = sim_kernel_args_pack(f, a->params, a->extra, args);
	if (!rc && !f->cpu) {
		if (!f->warned)
			pr_warn("no CPU version of kernel %s: launch %s", f->name,
				sim->skip_missing ? "skipped" : "not supported");
		f->warned = true;
		if (sim->skip_missing) {
			/* Checked like any launch, then dropped: it would have done nothing visible to the sim. */
			goto out;
		}
		rc = CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!rc)
		rc = sim_capture_legacy_check(sim, s);
	if (rc)
		goto out;
	cmd = sim_kernel_cmd_new(f, args, a->grid, a->block, a->shared_bytes);
	if (!cmd) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	rc = sim_stream_enqueue(sim, s, cmd);
out:
	free(args);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			    unsigned int bx, unsigned int by, unsigned int bz,
			    unsigned int shared_bytes, CUstream stream, void **params, void **extra)
{
	struct sim_launch_args a = {
		{ gx, gy, gz }, { bx, by, bz }, shared_bytes, stream, params, extra,
	};

	return sim_launch(f, &a);
}

CUresult sim_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
			      void **extra)
{
	struct sim_launch_args a;

	if (!config || (config->numAttrs && !config->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	a = (struct sim_launch_args){
		{ config->gridDimX, config->gridDimY, config->gridDimZ },
		{ config->blockDimX, config->blockDimY, config->blockDimZ },
		config->sharedMemBytes, config->hStream, params, extra,
	};
	/* Launch attributes (clusters, priorities, ...) change scheduling
	 * only; the sim runs the grid in order on one thread anyway. */
	return sim_launch(f, &a);
}

/* ---- faults inside CPU kernels ----------------------------------------- */

static __thread sigjmp_buf *sim_fault_env;
static struct sigaction sim_fault_old_segv, sim_fault_old_bus;
static pthread_mutex_t sim_fault_lock = PTHREAD_MUTEX_INITIALIZER;
static bool sim_fault_on;

static void sim_fault_handler(int sig, siginfo_t *info, void *uctx)
{
	if (sim_fault_env)
		siglongjmp(*sim_fault_env, sig);
	/* Not a CPU kernel's fault: put the previous handler back and return,
	 * so the faulting instruction runs again under it. */
	sigaction(sig, sig == SIGBUS ? &sim_fault_old_bus : &sim_fault_old_segv, NULL);
}

/* (Re)install the handler for one signal if someone replaced it since (a
 * test harness, a sanitizer): theirs becomes the one faults fall back to. */
static int sim_fault_claim(int sig, struct sigaction *old)
{
	struct sigaction sa, cur;

	if (sigaction(sig, NULL, &cur))
		return -errno;
	if (cur.sa_flags & SA_SIGINFO && cur.sa_sigaction == sim_fault_handler)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = sim_fault_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL))
		return -errno;
	*old = cur;
	return 0;
}

static int sim_fault_arm(void)
{
	int ret;

	pthread_mutex_lock(&sim_fault_lock);
	ret = sim_fault_claim(SIGSEGV, &sim_fault_old_segv);
	if (!ret)
		ret = sim_fault_claim(SIGBUS, &sim_fault_old_bus);
	pthread_mutex_unlock(&sim_fault_lock);
	return ret;
}

int sim_fault_install(void)
{
	int ret = sim_fault_arm();

	if (!ret)
		sim_fault_on = true;
	return ret;
}

static void sim_fault_release(int sig, const struct sigaction *old)
{
	struct sigaction cur;

	if (!sigaction(sig, NULL, &cur) && cur.sa_flags & SA_SIGINFO &&
	    cur.sa_sigaction == sim_fault_handler)
		sigaction(sig, old, NULL);
}

void sim_fault_uninstall(void)
{
	pthread_mutex_lock(&sim_fault_lock);
	if (sim_fault_on) {
		sim_fault_release(SIGSEGV, &sim_fault_old_segv);
		sim_fault_release(SIGBUS, &sim_fault_old_bus);
		sim_fault_on = false;
	}
	pthread_mutex_unlock(&sim_fault_lock);
}

void *sim_fault_thread_init(void)
{
	stack_t ss = { 0 };

	ss.ss_size = 64 << 10;
	ss.ss_sp = malloc(ss.ss_size);
	if (ss.ss_sp && sigaltstack(&ss, NULL)) {
		free(ss.ss_sp);
		return NULL;
	}
	return ss.ss_sp;
}

void sim_fault_thread_release(void *stack)
{
	stack_t ss = { 0 };

	if (!stack)
		return;
	ss.ss_flags = SS_DISABLE;
	sigaltstack(&ss, NULL);
	free(stack);
}

void sim_kernel_run(struct sim_cmd *cmd, struct sim_ctx *ctx)
{
	struct sim_launch *l = &cmd->kernel.launch;
	struct sim_func *f = cmd->kernel.fn;
	sigjmp_buf env;

	l->shared = NULL;
	if (l->shared_bytes) {
		l->shared = calloc(1, l->shared_bytes);
		if (!l->shared) {
			__atomic_store_n(&ctx->sticky, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
					 __ATOMIC_RELEASE);
			return;
		}
	}
	if (sim_fault_arm())
		pr_warn("kernel %s runs without its fault guard", f->name);
	if (sigsetjmp(env, 1) == 0) {
		sim_fault_env = &env;
		f->cpu(l);
		sim_fault_env = NULL;
	} else {
		sim_fault_env = NULL;
		pr_err("kernel %s: illegal memory access, context poisoned", f->name);
		__atomic_store_n(&ctx->sticky, CUDA_ERROR_ILLEGAL_ADDRESS, __ATOMIC_RELEASE);
	}
	free(l->shared);
	l->shared = NULL;
}

/* ---- occupancy --------------------------------------------------------- */

static int sim_blocks_per_sm(const struct sim_func *f, int block_size, size_t dyn_smem)
{
	size_t smem;
	int warps, by_threads, by_regs, by_smem, n;

	/* Checked first: a guest's block size or shared size may be anything. */
	if (block_size > f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] ||
	    dyn_smem > (size_t)f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES])
		return 0;
	warps = (block_size + 31) / 32;
	smem = dyn_smem + (size_t)f->attrs[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES] + SIM_SMEM_RESERVED;
	by_threads = SIM_THREADS_PER_SM / 32 / warps;
	/* Registers are allocated per warp in units of 256. */
	by_regs = SIM_REGS_PER_SM / (warps * ((f->attrs[CU_FUNC_ATTRIBUTE_NUM_REGS] * 32 + 255) & ~255));
	by_smem = (int)(SIM_SMEM_PER_SM / smem);
	n = SIM_BLOCKS_PER_SM;
	if (by_threads < n)
		n = by_threads;
	if (by_regs < n)
		n = by_regs;
	if (by_smem < n)
		n = by_smem;
	return n;
}

CUresult sim_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *num_blocks, CUfunction func,
								  int block_size, size_t dyn_smem,
								  unsigned int flags)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if (!num_blocks || block_size <= 0 || flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(func, &sim, &f);
	if (rc)
		return rc;
	*num_blocks = sim_blocks_per_sm(f, block_size, dyn_smem);
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuOccupancyAvailableDynamicSMemPerBlock(size_t *dyn_smem, CUfunction func,
						     int num_blocks, int block_size)
{
	struct sim_func *f;
	struct sim *sim;
	size_t per_block, stat;
	CUresult rc;

	if (!dyn_smem || num_blocks <= 0 || block_size <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(func, &sim, &f);
	if (rc)
		return rc;
	stat = (size_t)f->attrs[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES] + SIM_SMEM_RESERVED;
	per_block = SIM_SMEM_PER_SM / (unsigned)num_blocks;
	if (num_blocks > SIM_BLOCKS_PER_SM ||
	    (uint64_t)num_blocks * (unsigned)((block_size + 31) & ~31) > SIM_THREADS_PER_SM ||
	    per_block <= stat) {
		*dyn_smem = 0;
	} else {
		per_block = (per_block - stat) & ~(size_t)127;
		if (per_block > (size_t)f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES])
			per_block = (size_t)f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES];
		*dyn_smem = per_block;
	}
	sim_leave(sim);
	return CUDA_SUCCESS;
}

/* Cluster size a config asks for: its attribute, else the function's. */
static unsigned sim_cluster_size(const struct sim_func *f, const CUlaunchConfig *config)
{
	for (unsigned i = 0; i < config->numAttrs; i++)
		if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
			return config->attrs[i].value.clusterDim.x *
			       config->attrs[i].value.clusterDim.y *
			       config->attrs[i].value.clusterDim.z;
	if (f->attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH])
		return (unsigned)(f->attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] *
				  (f->attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT] ?: 1) *
				  (f->attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH] ?: 1));
	return 1;
}

static unsigned sim_cluster_max(const struct sim_func *f)
{
	return f->attrs[CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED] ? 16 : 8;
}

CUresult sim_cuOccupancyMaxPotentialClusterSize(int *cluster_size, CUfunction func,
						const CUlaunchConfig *config)
{
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if (!cluster_size || !config || (config->numAttrs && !config->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(func, &sim, &f);
	if (rc)
		return rc;
	*cluster_size = (int)sim_cluster_max(f);
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuOccupancyMaxActiveClusters(int *num_clusters, CUfunction func,
					  const CUlaunchConfig *config)
{
	unsigned cluster, threads;
	struct sim_func *f;
	struct sim *sim;
	CUresult rc;

	if (!num_clusters || !config || (config->numAttrs && !config->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	threads = config->blockDimX * config->blockDimY * config->blockDimZ;
	if (!threads || threads > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_func(func, &sim, &f);
	if (rc)
		return rc;
	cluster = sim_cluster_size(f, config);
	if (!cluster || cluster > sim_cluster_max(f)) {
		rc = CUDA_ERROR_INVALID_CLUSTER_SIZE;
	} else {
		/* 132 SMs in GPCs of up to 18: a cluster stays inside one. */
		int per_sm = sim_blocks_per_sm(f, (int)threads, config->sharedMemBytes);

		*num_clusters = per_sm * SIM_SM_COUNT / (int)cluster;
	}
	sim_leave(sim);
	return rc;
}
