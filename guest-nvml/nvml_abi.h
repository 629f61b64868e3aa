/* The part of NVML's C interface that tern's libnvidia-ml.so.1 serves: its
 * return codes, structures and entry points, at NVIDIA's ABI (the toolkit on
 * the build machine ships no nvml.h). Used by the library and its test. */
#ifndef TERN_NVML_ABI_H
#define TERN_NVML_ABI_H

typedef enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct {
	unsigned int version;
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
	unsigned int gpu;       /* percent of time a kernel ran */
	unsigned int memory;    /* percent of time memory was read or written */
} nvmlUtilization_t;

/* nvmlDeviceGetComputeRunningProcesses (the unversioned symbol): v1 records. */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

#define NVML_DEVICE_NAME_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80

#endif
