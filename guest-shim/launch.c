/* Kernel launches. kernelParams is an array of pointers whose sizes only the
 * kernel's parameter layout knows: the shim packs the arguments into one
 * buffer by that layout (docs/wire-protocol.md, "params blob"). An `extra`
 * launch already holds such a buffer and sends it as is. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define LAUNCH_ARGS_MAX 32768u
_Static_assert(sizeof(CUlaunchAttributeValue) == sizeof(((struct wire_rec_launch_attr *)0)->value),
	       "CUlaunchAttributeValue is 64 bytes in CUDA 13");

CUresult launch_attrs_encode(const CUlaunchAttribute *attrs, unsigned n, uint8_t *buf)
{
	if (n > WIRE_REC_LAUNCH_ATTR_MAX || (n && !attrs))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		struct wire_rec_launch_attr r = { .id = (uint32_t)attrs[i].id };

		memcpy(r.value, &attrs[i].value, sizeof(r.value));
		wire_rec_launch_attr_put(buf, i, &r);
	}
	return CUDA_SUCCESS;
}

CUresult launch_args(uint64_t fn, void **kernelParams, void **extra, uint8_t **buf, uint32_t *len)
{
	*buf = NULL;
	*len = 0;
	if (kernelParams && extra)
		return CUDA_ERROR_INVALID_VALUE;
	if (kernelParams) {
		struct shim_func *f;
		CUresult res;

		f = func_table_get(fn, &res);
		if (!f)
			return res;
		if (!f->args_bytes)
			return CUDA_SUCCESS;
		*buf = calloc(1, f->args_bytes);
		if (!*buf)
			return CUDA_ERROR_OUT_OF_MEMORY;
		for (uint32_t i = 0; i < f->param_count; i++) {
			if (!kernelParams[i]) {
				free(*buf);
				*buf = NULL;
				return CUDA_ERROR_INVALID_VALUE;
			}
			memcpy(*buf + f->params[i].offset, kernelParams[i], f->params[i].size);
		}
		*len = f->args_bytes;
		return CUDA_SUCCESS;
	}
	if (extra) {
		const void *ptr = NULL;
		size_t size = 0;
		bool have_size = false;

		for (unsigned i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
			if (i >= 64)
				return CUDA_ERROR_INVALID_VALUE;
			if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
				ptr = extra[i + 1];
			} else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
				if (!extra[i + 1])
					return CUDA_ERROR_INVALID_VALUE;
				size = *(const size_t *)extra[i + 1];
				have_size = true;
			} else {
				return CUDA_ERROR_INVALID_VALUE;
			}
		}
		if (!ptr || !have_size || size > LAUNCH_ARGS_MAX)
			return CUDA_ERROR_INVALID_VALUE;
		*buf = malloc(size ? size : 1);
		if (!*buf)
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(*buf, ptr, size);
		*len = (uint32_t)size;
	}
	return CUDA_SUCCESS;
}

/* What the driver checks before it accepts a launch, from the cached device
 * attributes: a deferred launch must fail here, at once, as a native one
 * does, not at the next synchronisation. */
static CUresult launch_geometry_check(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
				      unsigned bz, unsigned shmem)
{
	static const int attr[] = {
		CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
		CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
		CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
		CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
		CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
	};
	const uint64_t want[] = { bx, by, bz, gx, gy, gz, (uint64_t)bx * by * bz, shmem };

	CUdevice dev;

	if (!gx || !gy || !gz || !bx || !by || !bz)
		return CUDA_ERROR_INVALID_VALUE;
	/* The current context's device sets the limits; for a context the
	 * shim does not know the worker checks them. */
	if (!ctx_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ctx_device_known(ctx_current(), &dev))
		return CUDA_SUCCESS;
	for (unsigned i = 0; i < sizeof(attr) / sizeof(attr[0]); i++) {
		int limit = 0;

		/* An attribute the device does not report is no limit of ours. */
		if (device_attribute(dev, attr[i], &limit) == CUDA_SUCCESS && limit > 0 &&
		    want[i] > (uint64_t)limit)
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

static CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			      unsigned by, unsigned bz, unsigned shmem, uint64_t stream,
			      void **kernelParams, void **extra)
{
	struct wire_launch_kernel_req req = {
		.function = (uint64_t)(uintptr_t)f,
		.grid_x = gx, .grid_y = gy, .grid_z = gz,
		.block_x = bx, .block_y = by, .block_z = bz,
		.shared_bytes = shmem, .stream = stream,
	};
	struct wire_launch_kernel_rep rep;
	uint8_t *args;
	CUresult res;

	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	res = launch_args(req.function, kernelParams, extra, &args, &req.args.len);
	if (res != CUDA_SUCCESS)
		return res;
	req.args.ptr = args;
	res = managed_device_access(true, stream);
	if (res != CUDA_SUCCESS) {
		free(args);
		return res;
	}
	if (shim_process()->batching.lazy) {
		res = launch_geometry_check(gx, gy, gz, bx, by, bz, shmem);
		if (res == CUDA_SUCCESS)
			res = rpc_launch_kernel_defer(&req);
	} else {
		res = rpc_launch_kernel(&req, &rep);
	}
	if (res != CUDA_SUCCESS)
		pr_debug("cuLaunchKernel: CUresult %d", res);
	free(args);
	return res;
}

SHIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				 unsigned int gridDimZ, unsigned int blockDimX,
				 unsigned int blockDimY, unsigned int blockDimZ,
				 unsigned int sharedMemBytes, CUstream hStream,
				 void **kernelParams, void **extra)
{
	SHIM_ENTRY();
	return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			     sharedMemBytes, shim_stream(hStream, false), kernelParams, extra);
}

SHIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				      unsigned int gridDimZ, unsigned int blockDimX,
				      unsigned int blockDimY, unsigned int blockDimZ,
				      unsigned int sharedMemBytes, CUstream hStream,
				      void **kernelParams, void **extra)
{
	SHIM_ENTRY();
	return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			     sharedMemBytes, shim_stream(hStream, true), kernelParams, extra);
}

static CUresult launch_kernel_ex(const CUlaunchConfig *config, CUfunction f,
				 void **kernelParams, void **extra, bool per_thread)
{
	struct wire_launch_kernel_ex_req req = { .function = (uint64_t)(uintptr_t)f };
	struct wire_launch_kernel_ex_rep rep;
	uint8_t *args = NULL, *attrs = NULL;
	CUresult res;

	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (config->numAttrs > WIRE_REC_LAUNCH_ATTR_MAX || (config->numAttrs && !config->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	req.grid_x = config->gridDimX;
	req.grid_y = config->gridDimY;
	req.grid_z = config->gridDimZ;
	req.block_x = config->blockDimX;
	req.block_y = config->blockDimY;
	req.block_z = config->blockDimZ;
	req.shared_bytes = config->sharedMemBytes;
	req.stream = shim_stream(config->hStream, per_thread);
	if (config->numAttrs) {
		attrs = calloc(config->numAttrs, WIRE_REC_LAUNCH_ATTR_BYTES);
		if (!attrs)
			return CUDA_ERROR_OUT_OF_MEMORY;
		launch_attrs_encode(config->attrs, config->numAttrs, attrs);
		req.attrs.ptr = attrs;
		req.attrs.len = config->numAttrs * WIRE_REC_LAUNCH_ATTR_BYTES;
	}
	res = launch_args(req.function, kernelParams, extra, &args, &req.args.len);
	if (res == CUDA_SUCCESS)
		res = managed_device_access(true, req.stream);
	if (res == CUDA_SUCCESS) {
		req.args.ptr = args;
		/* Deferred like cuLaunchKernel: the runtime launches <<<>>> this way. */
		if (shim_process()->batching.lazy) {
			res = launch_geometry_check(req.grid_x, req.grid_y, req.grid_z, req.block_x,
						    req.block_y, req.block_z, req.shared_bytes);
			if (res == CUDA_SUCCESS)
				res = rpc_launch_kernel_ex_defer(&req);
		} else {
			res = rpc_launch_kernel_ex(&req, &rep);
		}
	}
	if (res != CUDA_SUCCESS)
		pr_debug("cuLaunchKernelEx: CUresult %d", res);
	free(args);
	free(attrs);
	return res;
}

SHIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
				   void **kernelParams, void **extra)
{
	SHIM_ENTRY();
	return launch_kernel_ex(config, f, kernelParams, extra, false);
}

SHIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
					void **kernelParams, void **extra)
{
	SHIM_ENTRY();
	return launch_kernel_ex(config, f, kernelParams, extra, true);
}

/* A cooperative launch is cuLaunchKernelEx with the cooperative attribute:
 * the driver checks that the grid fits the device at once either way. */
static CUresult launch_cooperative(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
				   unsigned by, unsigned bz, unsigned shmem, CUstream s,
				   void **kernelParams, bool per_thread)
{
	CUlaunchAttribute attr = { .id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE };
	CUlaunchConfig cfg = {
		.gridDimX = gx, .gridDimY = gy, .gridDimZ = gz,
		.blockDimX = bx, .blockDimY = by, .blockDimZ = bz,
		.sharedMemBytes = shmem, .hStream = s, .attrs = &attr, .numAttrs = 1,
	};

	attr.value.cooperative = 1;
	return launch_kernel_ex(&cfg, f, kernelParams, NULL, per_thread);
}

SHIM_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					    unsigned int gridDimZ, unsigned int blockDimX,
					    unsigned int blockDimY, unsigned int blockDimZ,
					    unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
	SHIM_ENTRY();
	return launch_cooperative(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
				  sharedMemBytes, hStream, kernelParams, false);
}

SHIM_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
						 unsigned int gridDimZ, unsigned int blockDimX,
						 unsigned int blockDimY, unsigned int blockDimZ,
						 unsigned int sharedMemBytes, CUstream hStream,
						 void **kernelParams)
{
	SHIM_ENTRY();
	return launch_cooperative(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
				  sharedMemBytes, hStream, kernelParams, true);
}
