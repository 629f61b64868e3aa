/* The sim backend's table, devices, primary contexts and error strings. */
#define LOG_PREFIX "sim: "

#include "sim.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array_desc.h"
#include "log.h"

struct sim *sim_self;

/* The driver's current context is per thread. The generation ties it to one
 * open of the backend, so a context pointer left by a closed one is ignored. */
static __thread struct sim_ctx *sim_tls_ctx;
static __thread uint64_t sim_tls_generation;
static uint64_t sim_generation_next = 1;

CUresult sim_enter(struct sim **out)
{
	struct sim *sim = sim_self;

	if (!sim)
		return CUDA_ERROR_DEINITIALIZED;
	pthread_mutex_lock(&sim->lock);
	if (!sim->initialized) {
		pthread_mutex_unlock(&sim->lock);
		return CUDA_ERROR_NOT_INITIALIZED;
	}
	*out = sim;
	return CUDA_SUCCESS;
}

void sim_leave(struct sim *sim)
{
	pthread_mutex_unlock(&sim->lock);
}

struct sim_ctx *sim_ctx_current(struct sim *sim)
{
	if (sim_tls_generation != sim->generation)
		return NULL;
	return sim_tls_ctx;
}

CUresult sim_ctx_require(struct sim *sim, struct sim_ctx **out)
{
	struct sim_ctx *ctx = sim_ctx_current(sim);

	if (!ctx || !ctx->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = ctx;
	return CUDA_SUCCESS;
}

static struct sim_ctx *sim_ctx_lookup(struct sim *sim, CUcontext h)
{
	for (unsigned i = 0; i < sim->dev_count; i++)
		if ((CUcontext)&sim->devs[i].ctx == h)
			return &sim->devs[i].ctx;
	return NULL;
}

static CUresult sim_dev_lookup(struct sim *sim, CUdevice d, struct sim_dev **out)
{
	if (d < 0 || (unsigned)d >= sim->dev_count)
		return CUDA_ERROR_INVALID_DEVICE;
	*out = &sim->devs[d];
	return CUDA_SUCCESS;
}

static CUresult sim_dev_pair(struct sim *sim, CUdevice a, CUdevice b, struct sim_dev **da,
			     struct sim_dev **db)
{
	CUresult rc = sim_dev_lookup(sim, a, da);

	return rc ? rc : sim_dev_lookup(sim, b, db);
}

CUresult sim_cuInit(unsigned int flags)
{
	struct sim *sim = sim_self;

	if (!sim)
		return CUDA_ERROR_DEINITIALIZED;
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim->lock);
	sim->initialized = true;
	pthread_mutex_unlock(&sim->lock);
	return CUDA_SUCCESS;
}

CUresult sim_cuDriverGetVersion(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = CUDA_VERSION;
	return CUDA_SUCCESS;
}

CUresult sim_cuDeviceGetCount(int *count)
{
	struct sim *sim;
	CUresult rc;

	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	*count = (int)sim->dev_count;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuDeviceGet(CUdevice *device, int ordinal)
{
	struct sim *sim;
	CUresult rc;

	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	if (ordinal < 0 || (unsigned)ordinal >= sim->dev_count)
		rc = CUDA_ERROR_INVALID_DEVICE;
	else
		*device = ordinal;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuDeviceGetName(char *name, int len, CUdevice dev)
{
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;

	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc)
		snprintf(name, (size_t)len, "tern sim device %d", d->ordinal);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	static const uint8_t base[16] = { 0x74, 0x65, 0x72, 0x6e, 0x2d, 0x73, 0x69, 0x6d,
					  0x40, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00 };
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;

	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc) {
		/* "tern-sim" + a version-4 style tail ending in the ordinal. */
		memcpy(uuid->bytes, base, sizeof(base));
		uuid->bytes[14] = (char)(d->ordinal >> 8);
		uuid->bytes[15] = (char)d->ordinal;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;

	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc)
		*bytes = d->total;
	sim_leave(sim);
	return rc;
}

/* H200-like values; every attribute of CUDA 13 has an entry, 0 included. */
static int sim_attribute_value(CUdevice_attribute a, const struct sim_dev *d)
{
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return SIM_SMEM_DEFAULT;
	case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
	case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
	case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return SIM_SM_COUNT;
	case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
	case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: return 65536;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: return 512;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
	case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18 + d->ordinal;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
	case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 6144;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 50331648;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return SIM_THREADS_PER_SM;
	case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER: return 1;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE: return 8192;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE: return 8192;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE: return 32768;
	case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS: return 2046;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH: return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT: return 65536;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS: return 2046;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH: return 268435456;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH: return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT: return 65000;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH: return 2097120;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return SIM_SMEM_PER_SM;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return SIM_REGS_PER_SM;
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return d->ordinal;
	case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: return 2;
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: return 0;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1: return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1: return 1;
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: return 1;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return SIM_SMEM_OPTIN;
	case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: return 0;
	case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: return 0;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return SIM_BLOCKS_PER_SM;
	case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return 32505856;
	case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: return 134213632;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return SIM_SMEM_RESERVED;
	case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: return CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: return 0;
	case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return 1;
	case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: return 1;
	case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: return 4;
	case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: return 0;
	case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: return CU_DEVICE_NUMA_CONFIG_NONE;
	case CU_DEVICE_ATTRIBUTE_NUMA_ID: return -1;
	case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return 0;
	case CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK: return 0;
	case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH: return 0;
	case CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: return 0x233510de;
	case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: return 0x18a610de;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
	default: return INT32_MIN;
	}
}

CUresult sim_cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;
	int v;

	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc) {
		v = sim_attribute_value(attrib, d);
		if (v == INT32_MIN)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			*pi = v;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice dev)
{
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;

	if (!bus_id || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc)
		snprintf(bus_id, (size_t)len, "00000000:%02X:00.0", 0x18 + d->ordinal);
	sim_leave(sim);
	return rc;
}

/* One hexadecimal field of at most 8 digits (no sign, no 0x), at *s. */
static bool sim_hex_field(const char **s, unsigned long *v)
{
	unsigned n = 0;

	*v = 0;
	while (isxdigit((unsigned char)**s) && n < 9) {
		char c = (char)tolower((unsigned char)**s);

		*v = *v << 4 | (unsigned long)(c <= '9' ? c - '0' : c - 'a' + 10);
		(*s)++;
		n++;
	}
	return n >= 1 && n <= 8;
}

/* Hexadecimal fields of a PCI bus id, in the forms the driver accepts:
 * domain:bus:device.function, domain:bus:device, bus:device.function. */
static bool sim_bus_id_parse(const char *s, unsigned long f[4])
{
	unsigned long v[3];
	unsigned n = 0;

	for (;;) {
		if (!sim_hex_field(&s, &v[n++]))
			return false;
		if (*s != ':' || n == 3)
			break;
		s++;
	}
	f[3] = 0;
	if (*s == '.') {
		s++;
		if (!sim_hex_field(&s, &f[3]))
			return false;
	} else if (n != 3) {
		return false;       /* bus:device needs its function */
	}
	if (*s || n < 2)
		return false;
	f[0] = n == 3 ? v[0] : 0;
	f[1] = v[n - 2];
	f[2] = v[n - 1];
	return true;
}

/* The sim's devices sit at domain 0, bus 0x18 + ordinal, device 0
 * (sim_cuDeviceGetPCIBusId); the function is not compared. */
CUresult sim_cuDeviceGetByPCIBusId(CUdevice *dev, const char *bus_id)
{
	unsigned long f[4];
	struct sim *sim;
	CUresult rc;

	if (!dev || !bus_id || !sim_bus_id_parse(bus_id, f))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = CUDA_ERROR_INVALID_DEVICE;
	for (unsigned i = 0; i < sim->dev_count; i++)
		if (f[0] == 0 && f[1] == 0x18 + (unsigned long)sim->devs[i].ordinal && f[2] == 0) {
			*dev = (CUdevice)i;
			rc = CUDA_SUCCESS;
			break;
		}
	sim_leave(sim);
	return rc;
}

/* Every format and channel count the driver takes has the same limit in
 * elements on the sim: its MAXIMUM_TEXTURE1D_LINEAR_WIDTH attribute. */
CUresult sim_cuDeviceGetTexture1DLinearMaxWidth(size_t *width, CUarray_format format, unsigned channels,
						CUdevice dev)
{
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;

	if (!width || !array_format_elem_size((uint32_t)format, channels))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc)
		*width = (size_t)sim_attribute_value(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH, d);
	sim_leave(sim);
	return rc;
}

/* What a link with native atomics supports for each operation (the sim's
 * model of a full NVLink peer link); a link without them supports none. */
static unsigned sim_atomic_caps(CUatomicOperation op)
{
	const unsigned ints = CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED |
			      CU_ATOMIC_CAPABILITY_REDUCTION | CU_ATOMIC_CAPABILITY_SCALAR_32 |
			      CU_ATOMIC_CAPABILITY_SCALAR_64;
	const unsigned floats = CU_ATOMIC_CAPABILITY_REDUCTION | CU_ATOMIC_CAPABILITY_SCALAR_32 |
				CU_ATOMIC_CAPABILITY_SCALAR_64;

	switch (op) {
	case CU_ATOMIC_OPERATION_INTEGER_INCREMENT:
	case CU_ATOMIC_OPERATION_INTEGER_DECREMENT:
		return CU_ATOMIC_CAPABILITY_UNSIGNED | CU_ATOMIC_CAPABILITY_REDUCTION |
		       CU_ATOMIC_CAPABILITY_SCALAR_32;
	case CU_ATOMIC_OPERATION_EXCHANGE:
	case CU_ATOMIC_OPERATION_CAS:
		return CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED |
		       CU_ATOMIC_CAPABILITY_SCALAR_32 | CU_ATOMIC_CAPABILITY_SCALAR_64 |
		       CU_ATOMIC_CAPABILITY_SCALAR_128;
	case CU_ATOMIC_OPERATION_FLOAT_ADD:
		return floats | CU_ATOMIC_CAPABILITY_VECTOR_32x4;
	case CU_ATOMIC_OPERATION_FLOAT_MIN:
	case CU_ATOMIC_OPERATION_FLOAT_MAX:
		return floats;
	default:
		return ints;
	}
}

static CUresult sim_atomic_answer(unsigned *caps, const CUatomicOperation *ops, unsigned count,
				  bool native)
{
	if (!caps || !ops || !count)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < count; i++)
		if ((unsigned)ops[i] >= CU_ATOMIC_OPERATION_MAX)
			return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < count; i++)
		caps[i] = native ? sim_atomic_caps(ops[i]) : 0;
	return CUDA_SUCCESS;
}

/* The host link has no native atomics on the sim (HOST_NATIVE_ATOMIC_SUPPORTED 0). */
CUresult sim_cuDeviceGetHostAtomicCapabilities(unsigned *caps, const CUatomicOperation *ops, unsigned count,
					       CUdevice dev)
{
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc = sim_enter(&sim);

	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc)
		rc = sim_atomic_answer(caps, ops, count,
				       sim_attribute_value(CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, d) == 1);
	sim_leave(sim);
	return rc;
}

/* Peer links have native atomics on the sim (its P2P attribute says so). */
CUresult sim_cuDeviceGetP2PAtomicCapabilities(unsigned *caps, const CUatomicOperation *ops, unsigned count,
					      CUdevice src, CUdevice dst)
{
	struct sim_dev *d, *p;
	struct sim *sim;
	CUresult rc = sim_enter(&sim);

	if (rc)
		return rc;
	rc = sim_dev_pair(sim, src, dst, &d, &p);
	if (!rc && d == p)
		rc = CUDA_ERROR_INVALID_DEVICE;
	if (!rc)
		rc = sim_atomic_answer(caps, ops, count, true);
	sim_leave(sim);
	return rc;
}

/* Nothing writes the sim's memory from outside but its own threads, which
 * the copy and launch paths order already: the flush checks its arguments
 * and the current context, and has nothing to wait for. */
CUresult sim_cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
					CUflushGPUDirectRDMAWritesScope scope)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX ||
	    (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER &&
	     scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	sim_leave(sim);
	return rc;
}

static void sim_ctx_limits_default(struct sim_ctx *ctx)
{
	memset(ctx->limits, 0, sizeof(ctx->limits));
	ctx->limits[CU_LIMIT_STACK_SIZE] = 1024;
	ctx->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
	ctx->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
	ctx->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
	ctx->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
	ctx->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
	ctx->limits[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0;
	ctx->limits[CU_LIMIT_SHMEM_SIZE] = SIM_SMEM_OPTIN;
	ctx->limits[CU_LIMIT_CIG_ENABLED] = 0;
	ctx->limits[CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED] = 0;
	ctx->cache_config = CU_FUNC_CACHE_PREFER_NONE;
}

static CUresult sim_ctx_activate(struct sim *sim, struct sim_ctx *ctx)
{
	ctx->legacy = sim_stream_new(ctx, 0, 0, true);
	ctx->per_thread = sim_stream_new(ctx, 0, 0, true);
	if (!ctx->legacy || !ctx->per_thread) {
		free(ctx->legacy);
		free(ctx->per_thread);
		ctx->legacy = ctx->per_thread = NULL;
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ctx->legacy->next = ctx->per_thread;
	ctx->per_thread->next = sim->streams;
	sim->streams = ctx->legacy;
	sim_ctx_limits_default(ctx);
	ctx->sticky = CUDA_SUCCESS;
	ctx->active = true;
	return CUDA_SUCCESS;
}

/* Destroy what lives in the context, as the driver does when the primary
 * context's last reference goes or on reset. Memory from cuMemCreate belongs
 * to the device, not the context, and stays. Lock held. */
static void sim_ctx_deactivate(struct sim *sim, struct sim_ctx *ctx)
{
	sim_dev_wait(sim, ctx->dev, ctx->dev->submitted);
	sim_captures_drop(sim, ctx);
	sim_modules_teardown(sim, ctx);
	sim_ctx_streams_destroy(sim, ctx);
	ctx->legacy = ctx->per_thread = NULL;
	ctx->active = false;
	ctx->refs = 0;
}

CUresult sim_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc && !d->ctx.active)
		rc = sim_ctx_activate(sim, &d->ctx);
	if (!rc) {
		d->ctx.refs++;
		*pctx = (CUcontext)&d->ctx;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuDevicePrimaryCtxRelease(CUdevice dev)
{
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc && d->ctx.refs == 0)
		rc = CUDA_ERROR_INVALID_CONTEXT;
	if (!rc && --d->ctx.refs == 0)
		sim_ctx_deactivate(sim, &d->ctx);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	const unsigned known = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST |
			       CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_COREDUMP_ENABLE |
			       CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS;
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;

	if (flags & ~known || (flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_MASK)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc)
		d->ctx.flags = flags;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;

	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc) {
		*flags = d->ctx.flags;
		*active = d->ctx.active;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuDevicePrimaryCtxReset(CUdevice dev)
{
	struct sim_dev *d;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_lookup(sim, dev, &d);
	if (!rc) {
		if (d->ctx.active)
			sim_ctx_deactivate(sim, &d->ctx);
		d->ctx.flags = 0;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuCtxSetCurrent(CUcontext h)
{
	struct sim_ctx *ctx = NULL;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	if (h) {
		ctx = sim_ctx_lookup(sim, h);
		if (!ctx || !ctx->active)
			rc = CUDA_ERROR_INVALID_CONTEXT;
	}
	if (!rc) {
		sim_tls_ctx = ctx;
		sim_tls_generation = sim->generation;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuCtxGetCurrent(CUcontext *pctx)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	ctx = sim_ctx_current(sim);
	*pctx = (CUcontext)ctx;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuCtxSynchronize(void)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		rc = sim_capture_sync_check(sim, ctx, NULL);
	if (!rc) {
		sim_dev_wait(sim, ctx->dev, ctx->dev->submitted);
		rc = ctx->sticky;
	}
	sim_leave(sim);
	return rc;
}

/* Peer access. Every simulated device shares the process's memory, so any
 * two distinct devices can reach each other; what the driver tracks per
 * context (which peers are enabled) is tracked the same way here, with the
 * driver's errors. */

CUresult sim_cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	struct sim_dev *d, *p;
	struct sim *sim;
	CUresult rc;

	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_pair(sim, dev, peer, &d, &p);
	if (!rc)
		*can = d != p;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src,
				     CUdevice dst)
{
	struct sim_dev *d, *p;
	struct sim *sim;
	CUresult rc;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_dev_pair(sim, src, dst, &d, &p);
	if (!rc && d == p)
		rc = CUDA_ERROR_INVALID_DEVICE;
	if (!rc) {
		switch (attrib) {
		case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
			*value = 0;
			break;
		case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
		case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
		case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
			*value = 1;
			break;
		default:
			rc = CUDA_ERROR_INVALID_VALUE;
		}
	}
	sim_leave(sim);
	return rc;
}

/* The current context and @peer_ctx, both active and on distinct devices. */
static CUresult sim_peer_pair(struct sim *sim, CUcontext peer_ctx, struct sim_ctx **cur,
			      struct sim_ctx **peer)
{
	CUresult rc = sim_ctx_require(sim, cur);

	if (rc)
		return rc;
	*peer = sim_ctx_lookup(sim, peer_ctx);
	if (!*peer || !(*peer)->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	if ((*peer)->dev == (*cur)->dev)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

CUresult sim_cuCtxEnablePeerAccess(CUcontext peer_ctx, unsigned int flags)
{
	struct sim_ctx *cur, *peer;
	struct sim *sim;
	CUresult rc;

	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_peer_pair(sim, peer_ctx, &cur, &peer);
	if (!rc && cur->peers & (1u << peer->dev->ordinal))
		rc = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	if (!rc)
		cur->peers |= 1u << peer->dev->ordinal;
	sim_leave(sim);
	return rc;
}

/* Both contexts must exist; the copy itself is an ordinary device copy. */
static CUresult sim_peer_contexts(CUcontext a, CUcontext b)
{
	struct sim *sim;
	CUresult rc = sim_enter(&sim);
	struct sim_ctx *ca, *cb;

	if (rc)
		return rc;
	ca = sim_ctx_lookup(sim, a);
	cb = sim_ctx_lookup(sim, b);
	if (!ca || !cb || !ca->active || !cb->active)
		rc = CUDA_ERROR_INVALID_CONTEXT;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
			  size_t bytes)
{
	CUresult rc = sim_peer_contexts(dst_ctx, src_ctx);

	return rc ? rc : sim_cuMemcpyDtoD(dst, src, bytes);
}

CUresult sim_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
			       CUcontext src_ctx, size_t bytes, CUstream h)
{
	CUresult rc = sim_peer_contexts(dst_ctx, src_ctx);

	return rc ? rc : sim_cuMemcpyDtoDAsync(dst, src, bytes, h);
}

static bool sim_limit_settable(CUlimit limit)
{
	return limit < CU_LIMIT_MAX && limit != CU_LIMIT_SHMEM_SIZE &&
	       limit != CU_LIMIT_CIG_ENABLED;
}

CUresult sim_cuCtxSetLimit(CUlimit limit, size_t value)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!sim_limit_settable(limit))
		return CUDA_ERROR_INVALID_VALUE;
	if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc) {
		/* The driver rounds the stack size up to a multiple of 16. */
		if (limit == CU_LIMIT_STACK_SIZE)
			value = (value + 15) & ~(size_t)15;
		ctx->limits[limit] = value;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!pvalue || limit >= CU_LIMIT_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		*pvalue = ctx->limits[limit];
	sim_leave(sim);
	return rc;
}

CUresult sim_cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	sim_leave(sim);
	if (rc)
		return rc;
	/* Either pointer may be NULL, as in the driver. */
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return CUDA_SUCCESS;
}

CUresult sim_cuCtxSetCacheConfig(CUfunc_cache config)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		ctx->cache_config = config;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuCtxGetCacheConfig(CUfunc_cache *config)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		*config = ctx->cache_config;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuCtxSetSharedMemConfig(CUsharedconfig config)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if ((unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		ctx->shared_config = config;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (!rc)
		*config = ctx->shared_config;
	sim_leave(sim);
	return rc;
}

/* The sim has no L2 cache: resetting its persisting lines is only checked. */
CUresult sim_cuCtxResetPersistingL2Cache(void)
{
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	sim_leave(sim);
	return rc;
}

/* Names and strings of the driver's codes, declared once. */
static const struct {
	CUresult code;
	const char *name;
	const char *text;
} sim_errors[] = {
#define E(c, t) { c, #c, t }
	E(CUDA_SUCCESS, "no error"),
	E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
	E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
	E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
	E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
	E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
	E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
	E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
	E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
	E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
	E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
	E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
	E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
	E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
	E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
	E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
	E(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
	E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
	E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
	E(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
	E(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
	E(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array"),
	E(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer"),
	E(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
	E(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
	E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread"),
	E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
	E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
	E(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context"),
	E(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected during the execution"),
	E(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
	E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain."),
	E(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled"),
	E(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the provided execution affinity is not supported"),
	E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
	E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
	E(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
	E(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
	E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
	E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
	E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
	E(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy"),
	E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
	E(CUDA_ERROR_NOT_READY, "device not ready"),
	E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
	E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
	E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
	E(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode"),
	E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
	E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
	E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
	E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
	E(CUDA_ERROR_ASSERT, "device-side assert triggered"),
	E(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
	E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
	E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
	E(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
	E(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
	E(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
	E(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space"),
	E(CUDA_ERROR_INVALID_PC, "invalid program counter"),
	E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
	E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
	E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
	E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
	E(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
	E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
	E(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "forward compatibility was attempted on non supported HW"),
	E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
	E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
	E(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences"),
	E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
	E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
	E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream"),
	E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream"),
	E(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
	E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
	E(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
	E(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
	E(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occurred in external entity outside of CUDA"),
	E(CUDA_ERROR_INVALID_CLUSTER_SIZE, "a kernel launch error has occurred due to cluster misconfiguration"),
	E(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded when calling an API that requires a loaded function"),
	E(CUDA_ERROR_INVALID_RESOURCE_TYPE, "one or more resources passed in are not valid resource types for the operation"),
	E(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "one or more resources are insufficient or non-applicable for the operation"),
	E(CUDA_ERROR_UNKNOWN, "unknown error"),
#undef E
};

static int sim_error_index(CUresult code)
{
	for (unsigned i = 0; i < sizeof(sim_errors) / sizeof(sim_errors[0]); i++)
		if (sim_errors[i].code == code)
			return (int)i;
	return -1;
}

/* Like the driver, these answer before cuInit and set *pStr to NULL on an
 * unknown code. */
CUresult sim_cuGetErrorName(CUresult error, const char **pstr)
{
	int i = sim_error_index(error);

	if (!pstr)
		return CUDA_ERROR_INVALID_VALUE;
	*pstr = i < 0 ? NULL : sim_errors[i].name;
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult sim_cuGetErrorString(CUresult error, const char **pstr)
{
	int i = sim_error_index(error);

	if (!pstr)
		return CUDA_ERROR_INVALID_VALUE;
	*pstr = i < 0 ? NULL : sim_errors[i].text;
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static void sim_destroy(struct sim *sim)
{
	for (unsigned i = 0; i < sim->dev_count; i++)
		sim_dev_stop(&sim->devs[i]);
	pthread_mutex_lock(&sim->lock);
	sim_graphs_teardown(sim);
	for (unsigned i = 0; i < sim->dev_count; i++) {
		struct sim_ctx *ctx = &sim->devs[i].ctx;

		sim_modules_teardown(sim, ctx);
		sim_ctx_streams_destroy(sim, ctx);
		pthread_cond_destroy(&sim->devs[i].work);
	}
	sim_modules_teardown(sim, NULL);
	sim_arrays_teardown(sim);
	sim_memory_teardown(sim);
	pthread_mutex_unlock(&sim->lock);
	sim_plugins_unload(sim);
	if (sim->fault_installed)
		sim_fault_uninstall();
	pthread_cond_destroy(&sim->done);
	pthread_mutex_destroy(&sim->lock);
	free(sim->devs);
	free(sim);
}

static void sim_backend_close(struct backend *be)
{
	struct sim *sim = be->priv;

	if (sim_self == sim)
		sim_self = NULL;
	sim_destroy(sim);
	free(be);
}

int backend_sim_open(const struct backend_config *cfg, struct backend **out)
{
	unsigned count = cfg && cfg->sim_device_count ? cfg->sim_device_count : 1;
	unsigned long long memory = cfg && cfg->sim_memory ? cfg->sim_memory : SIM_DEFAULT_MEMORY;
	struct backend *be;
	struct sim *sim;
	int ret;

	if (sim_self)
		return -EBUSY;
	if (count > SIM_MAX_DEVICES)
		return -EINVAL;
	memory &= ~(SIM_GRANULARITY - 1);
	if (!memory)
		return -EINVAL;
	sim = calloc(1, sizeof(*sim));
	be = calloc(1, sizeof(*be));
	if (!sim || !be) {
		ret = -ENOMEM;
		goto out_free;
	}
	sim->devs = calloc(count, sizeof(*sim->devs));
	if (!sim->devs) {
		ret = -ENOMEM;
		goto out_free;
	}
	pthread_mutex_init(&sim->lock, NULL);
	pthread_cond_init(&sim->done, NULL);
	sim->generation = __atomic_fetch_add(&sim_generation_next, 1, __ATOMIC_RELAXED);
	sim->dev_count = count;
	sim->skip_missing = cfg && cfg->sim_skip_missing;
	sim->managed_base = cfg && cfg->sim_managed_base ? cfg->sim_managed_base : SIM_MANAGED_BASE;
	for (unsigned i = 0; i < count; i++) {
		struct sim_dev *d = &sim->devs[i];

		d->sim = sim;
		d->ordinal = (int)i;
		d->total = memory;
		d->ctx.dev = d;
		pthread_cond_init(&d->work, NULL);
	}
	ret = sim_plugins_load(sim, cfg ? cfg->sim_kernels : NULL);
	if (ret)
		goto out_destroy;
	ret = sim_fault_install();
	if (ret)
		goto out_destroy;
	sim->fault_installed = true;
	for (unsigned i = 0; i < count; i++) {
		ret = sim_dev_start(&sim->devs[i]);
		if (ret)
			goto out_destroy;
	}

	be->name = "sim";
#define SIM_FILL(name, version) be->name = sim_##name;
	BACKEND_ENTRIES(SIM_FILL)
#undef SIM_FILL
	be->priv = sim;
	be->close = sim_backend_close;
	sim_self = sim;
	*out = be;
	return 0;

out_destroy:
	sim_destroy(sim);
	free(be);
	return ret;
out_free:
	if (sim)
		free(sim->devs);
	free(sim);
	free(be);
	return ret;
}
