/* The interface between a session's executor and the device that runs its calls.
 *
 * A backend is a table of CUDA driver API entry points. The executor is written
 * once against that table; the two backends fill it:
 *   - cuda: each entry resolved from the real libcuda.so.1 with cuGetProcAddress
 *     at the version named below, so its signature is exactly the typedef's;
 *   - sim:  a CPU device implementing the same signatures (replayer/backend/sim/).
 * An entry a backend leaves NULL is filled by backend_open() with one that
 * answers CUDA_ERROR_NOT_SUPPORTED, so the executor calls any entry safely
 * (libvirt's driver-table rule).
 *
 * BACKEND_ENTRY(name, version): `name` is the unversioned driver name, `version`
 * the CUDA version whose PFN_<name>_v<version> typedef (cudaTypedefs.h) gives
 * the signature. Handles in and out are the backend's real handles; the
 * executor maps them to the guest's virtual handles.
 *
 * Threading: a backend is used by one session worker. The cuda backend is
 * thread-safe as the driver is; the sim backend serialises internally.
 */
#ifndef TERN_BACKEND_H
#define TERN_BACKEND_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdbool.h>

#define BACKEND_ENTRIES(BACKEND_ENTRY)                                  \
	BACKEND_ENTRY(cuInit, 2000)                                     \
	BACKEND_ENTRY(cuDriverGetVersion, 2020)                         \
	BACKEND_ENTRY(cuDeviceGet, 2000)                                \
	BACKEND_ENTRY(cuDeviceGetCount, 2000)                           \
	BACKEND_ENTRY(cuDeviceGetName, 2000)                            \
	BACKEND_ENTRY(cuDeviceGetUuid, 11040)                           \
	BACKEND_ENTRY(cuDeviceTotalMem, 3020)                           \
	BACKEND_ENTRY(cuDeviceGetAttribute, 2000)                       \
	BACKEND_ENTRY(cuDeviceGetPCIBusId, 4010)                        \
	BACKEND_ENTRY(cuDevicePrimaryCtxRetain, 7000)                   \
	BACKEND_ENTRY(cuDevicePrimaryCtxRelease, 11000)                 \
	BACKEND_ENTRY(cuDevicePrimaryCtxSetFlags, 11000)                \
	BACKEND_ENTRY(cuDevicePrimaryCtxGetState, 7000)                 \
	BACKEND_ENTRY(cuDevicePrimaryCtxReset, 11000)                   \
	BACKEND_ENTRY(cuCtxSetCurrent, 4000)                            \
	BACKEND_ENTRY(cuCtxGetCurrent, 4000)                            \
	BACKEND_ENTRY(cuCtxSynchronize, 2000)                           \
	BACKEND_ENTRY(cuCtxSetLimit, 3010)                              \
	BACKEND_ENTRY(cuCtxGetLimit, 3010)                              \
	BACKEND_ENTRY(cuCtxGetStreamPriorityRange, 5050)                \
	BACKEND_ENTRY(cuCtxSetCacheConfig, 3020)                        \
	BACKEND_ENTRY(cuCtxGetCacheConfig, 3020)                        \
	BACKEND_ENTRY(cuModuleLoadData, 2000)                           \
	BACKEND_ENTRY(cuModuleUnload, 2000)                             \
	BACKEND_ENTRY(cuLinkCreate, 6050)                               \
	BACKEND_ENTRY(cuLinkAddData, 6050)                              \
	BACKEND_ENTRY(cuLinkComplete, 5050)                             \
	BACKEND_ENTRY(cuLinkDestroy, 5050)                              \
	BACKEND_ENTRY(cuModuleGetFunction, 2000)                        \
	BACKEND_ENTRY(cuModuleGetGlobal, 3020)                          \
	BACKEND_ENTRY(cuLibraryLoadData, 12000)                         \
	BACKEND_ENTRY(cuLibraryUnload, 12000)                           \
	BACKEND_ENTRY(cuLibraryGetKernel, 12000)                        \
	BACKEND_ENTRY(cuLibraryGetModule, 12000)                        \
	BACKEND_ENTRY(cuLibraryGetGlobal, 12000)                        \
	BACKEND_ENTRY(cuLibraryGetManaged, 12000)                       \
	BACKEND_ENTRY(cuPointerGetAttribute, 4000)                      \
	BACKEND_ENTRY(cuModuleGetFunctionCount, 12040)                  \
	BACKEND_ENTRY(cuModuleEnumerateFunctions, 12040)                \
	BACKEND_ENTRY(cuLibraryGetKernelCount, 12040)                   \
	BACKEND_ENTRY(cuLibraryEnumerateKernels, 12040)                 \
	BACKEND_ENTRY(cuKernelGetFunction, 12000)                       \
	BACKEND_ENTRY(cuFuncGetAttribute, 2020)                         \
	BACKEND_ENTRY(cuFuncSetAttribute, 9000)                         \
	BACKEND_ENTRY(cuFuncSetCacheConfig, 3000)                       \
	BACKEND_ENTRY(cuFuncGetParamInfo, 12040)                        \
	BACKEND_ENTRY(cuFuncGetName, 12030)                             \
	BACKEND_ENTRY(cuKernelGetAttribute, 12000)                      \
	BACKEND_ENTRY(cuKernelSetAttribute, 12000)                      \
	BACKEND_ENTRY(cuKernelGetParamInfo, 12040)                      \
	BACKEND_ENTRY(cuKernelGetName, 12030)                           \
	BACKEND_ENTRY(cuLaunchKernel, 4000)                             \
	BACKEND_ENTRY(cuLaunchKernelEx, 11060)                          \
	BACKEND_ENTRY(cuMemAddressReserve, 10020)                       \
	BACKEND_ENTRY(cuMemAddressFree, 10020)                          \
	BACKEND_ENTRY(cuMemCreate, 10020)                               \
	BACKEND_ENTRY(cuMemRelease, 10020)                              \
	BACKEND_ENTRY(cuMemMap, 10020)                                  \
	BACKEND_ENTRY(cuMemUnmap, 10020)                                \
	BACKEND_ENTRY(cuMemSetAccess, 10020)                            \
	BACKEND_ENTRY(cuMemGetAllocationGranularity, 10020)             \
	BACKEND_ENTRY(cuMemGetInfo, 3020)                               \
	BACKEND_ENTRY(cuMemAlloc, 3020)                                 \
	BACKEND_ENTRY(cuMemFree, 3020)                                  \
	BACKEND_ENTRY(cuMemHostAlloc, 2020)                             \
	BACKEND_ENTRY(cuMemFreeHost, 2000)                              \
	BACKEND_ENTRY(cuMemHostRegister, 6050)                          \
	BACKEND_ENTRY(cuMemHostUnregister, 4000)                        \
	BACKEND_ENTRY(cuMemcpyHtoD, 3020)                               \
	BACKEND_ENTRY(cuMemcpyDtoH, 3020)                               \
	BACKEND_ENTRY(cuMemcpyDtoD, 3020)                               \
	BACKEND_ENTRY(cuMemcpyHtoDAsync, 3020)                          \
	BACKEND_ENTRY(cuMemcpyDtoHAsync, 3020)                          \
	BACKEND_ENTRY(cuMemcpyDtoDAsync, 3020)                          \
	BACKEND_ENTRY(cuMemsetD8, 3020)                                 \
	BACKEND_ENTRY(cuMemsetD16, 3020)                                \
	BACKEND_ENTRY(cuMemsetD32, 3020)                                \
	BACKEND_ENTRY(cuMemsetD8Async, 3020)                            \
	BACKEND_ENTRY(cuMemsetD16Async, 3020)                           \
	BACKEND_ENTRY(cuMemsetD32Async, 3020)                           \
	BACKEND_ENTRY(cuStreamCreate, 2000)                             \
	BACKEND_ENTRY(cuStreamCreateWithPriority, 5050)                 \
	BACKEND_ENTRY(cuStreamDestroy, 4000)                            \
	BACKEND_ENTRY(cuStreamSynchronize, 2000)                        \
	BACKEND_ENTRY(cuStreamQuery, 2000)                              \
	BACKEND_ENTRY(cuStreamWaitEvent, 3020)                          \
	BACKEND_ENTRY(cuStreamGetFlags, 5050)                           \
	BACKEND_ENTRY(cuStreamGetPriority, 5050)                        \
	BACKEND_ENTRY(cuEventCreate, 2000)                              \
	BACKEND_ENTRY(cuEventRecord, 2000)                              \
	BACKEND_ENTRY(cuEventRecordWithFlags, 11010)                    \
	BACKEND_ENTRY(cuEventSynchronize, 2000)                         \
	BACKEND_ENTRY(cuEventQuery, 2000)                               \
	BACKEND_ENTRY(cuEventElapsedTime, 2000)                         \
	BACKEND_ENTRY(cuEventDestroy, 4000)                             \
	BACKEND_ENTRY(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, 7000) \
	BACKEND_ENTRY(cuOccupancyAvailableDynamicSMemPerBlock, 10020)   \
	BACKEND_ENTRY(cuOccupancyMaxActiveClusters, 11070)              \
	BACKEND_ENTRY(cuOccupancyMaxPotentialClusterSize, 11070)        \
	BACKEND_ENTRY(cuGetErrorName, 6000)                             \
	BACKEND_ENTRY(cuGetErrorString, 6000)                           \
	BACKEND_ENTRY(cuStreamBeginCapture, 10010)                      \
	BACKEND_ENTRY(cuStreamEndCapture, 10000)                        \
	BACKEND_ENTRY(cuStreamIsCapturing, 10000)                       \
	BACKEND_ENTRY(cuStreamGetCaptureInfo, 12030)                    \
	BACKEND_ENTRY(cuStreamUpdateCaptureDependencies, 12030)         \
	BACKEND_ENTRY(cuThreadExchangeStreamCaptureMode, 10010)         \
	BACKEND_ENTRY(cuGraphCreate, 10000)                             \
	BACKEND_ENTRY(cuGraphDestroy, 10000)                            \
	BACKEND_ENTRY(cuGraphClone, 10000)                              \
	BACKEND_ENTRY(cuGraphNodeFindInClone, 10000)                    \
	BACKEND_ENTRY(cuGraphGetNodes, 10000)                           \
	BACKEND_ENTRY(cuGraphGetEdges, 12030)                           \
	BACKEND_ENTRY(cuGraphNodeGetType, 10000)                        \
	BACKEND_ENTRY(cuGraphAddDependencies, 12030)                    \
	BACKEND_ENTRY(cuGraphRemoveDependencies, 12030)                 \
	BACKEND_ENTRY(cuGraphDestroyNode, 10000)                        \
	BACKEND_ENTRY(cuGraphAddKernelNode, 12000)                      \
	BACKEND_ENTRY(cuGraphKernelNodeGetParams, 12000)                \
	BACKEND_ENTRY(cuGraphKernelNodeSetParams, 12000)                \
	BACKEND_ENTRY(cuGraphAddMemcpyNode, 10000)                      \
	BACKEND_ENTRY(cuGraphMemcpyNodeGetParams, 10000)                \
	BACKEND_ENTRY(cuGraphAddMemsetNode, 10000)                      \
	BACKEND_ENTRY(cuGraphMemsetNodeGetParams, 10000)                \
	BACKEND_ENTRY(cuGraphAddEmptyNode, 10000)                       \
	BACKEND_ENTRY(cuGraphAddChildGraphNode, 10000)                  \
	BACKEND_ENTRY(cuGraphChildGraphNodeGetGraph, 10000)             \
	BACKEND_ENTRY(cuGraphAddEventRecordNode, 11010)                 \
	BACKEND_ENTRY(cuGraphEventRecordNodeGetEvent, 11010)            \
	BACKEND_ENTRY(cuGraphAddEventWaitNode, 11010)                   \
	BACKEND_ENTRY(cuGraphEventWaitNodeGetEvent, 11010)              \
	BACKEND_ENTRY(cuGraphInstantiateWithParams, 12000)              \
	BACKEND_ENTRY(cuGraphExecDestroy, 10000)                        \
	BACKEND_ENTRY(cuGraphLaunch, 10000)                             \
	BACKEND_ENTRY(cuGraphUpload, 11010)                             \
	BACKEND_ENTRY(cuGraphExecUpdate, 12000)                         \
	BACKEND_ENTRY(cuGraphExecKernelNodeSetParams, 12000)             \
	BACKEND_ENTRY(cuLaunchHostFunc, 10000)                          \
	BACKEND_ENTRY(cuStreamAddCallback, 5000)                        \
	BACKEND_ENTRY(cuGraphAddHostNode, 10000)                        \
	BACKEND_ENTRY(cuGraphHostNodeGetParams, 10000)                  \
	BACKEND_ENTRY(cuGraphHostNodeSetParams, 10000)                  \
	BACKEND_ENTRY(cuGraphExecHostNodeSetParams, 10020)              \
	BACKEND_ENTRY(cuGraphMemcpyNodeSetParams, 10000)                \
	BACKEND_ENTRY(cuGraphMemsetNodeSetParams, 10000)                \
	BACKEND_ENTRY(cuGraphEventRecordNodeSetEvent, 11010)            \
	BACKEND_ENTRY(cuGraphEventWaitNodeSetEvent, 11010)              \
	BACKEND_ENTRY(cuGraphExecMemcpyNodeSetParams, 10020)            \
	BACKEND_ENTRY(cuGraphExecMemsetNodeSetParams, 10020)            \
	BACKEND_ENTRY(cuGraphExecEventRecordNodeSetEvent, 11010)        \
	BACKEND_ENTRY(cuGraphExecEventWaitNodeSetEvent, 11010)          \
	BACKEND_ENTRY(cuGraphNodeSetEnabled, 11060)                     \
	BACKEND_ENTRY(cuGraphDebugDotPrint, 11030)                      \
	BACKEND_ENTRY(cuGraphExecChildGraphNodeSetParams, 11010)        \
	BACKEND_ENTRY(cuGraphKernelNodeGetAttribute, 11000)             \
	BACKEND_ENTRY(cuGraphKernelNodeSetAttribute, 11000)             \
	BACKEND_ENTRY(cuGraphKernelNodeCopyAttributes, 11000)           \
	BACKEND_ENTRY(cuStreamBeginCaptureToGraph, 12030)               \
	BACKEND_ENTRY(cuGraphConditionalHandleCreate, 12030)            \
	BACKEND_ENTRY(cuGraphAddNode, 12030)                            \
	BACKEND_ENTRY(cuStreamWaitValue32, 11070)                       \
	BACKEND_ENTRY(cuStreamWaitValue64, 11070)                       \
	BACKEND_ENTRY(cuStreamWriteValue32, 11070)                      \
	BACKEND_ENTRY(cuStreamWriteValue64, 11070)                      \
	BACKEND_ENTRY(cuStreamBatchMemOp, 11070)                        \
	BACKEND_ENTRY(cuStreamSetAttribute, 11000)                      \
	BACKEND_ENTRY(cuStreamGetAttribute, 11000)                      \
	BACKEND_ENTRY(cuCtxResetPersistingL2Cache, 11000)               \
	BACKEND_ENTRY(cuCtxSetSharedMemConfig, 4020)                    \
	BACKEND_ENTRY(cuCtxGetSharedMemConfig, 4020)                    \
	BACKEND_ENTRY(cuFuncSetSharedMemConfig, 4020)                   \
	BACKEND_ENTRY(cuKernelSetCacheConfig, 12000)                    \
	BACKEND_ENTRY(cuDeviceCanAccessPeer, 4000)                      \
	BACKEND_ENTRY(cuDeviceGetP2PAttribute, 8000)                    \
	BACKEND_ENTRY(cuDeviceGetByPCIBusId, 4010)                      \
	BACKEND_ENTRY(cuDeviceGetTexture1DLinearMaxWidth, 11010)        \
	BACKEND_ENTRY(cuDeviceGetHostAtomicCapabilities, 13000)         \
	BACKEND_ENTRY(cuDeviceGetP2PAtomicCapabilities, 13000)          \
	BACKEND_ENTRY(cuFlushGPUDirectRDMAWrites, 11030)                \
	BACKEND_ENTRY(cuCtxEnablePeerAccess, 4000)                      \
	BACKEND_ENTRY(cuMemcpyPeer, 4000)                               \
	BACKEND_ENTRY(cuMemcpyPeerAsync, 4000)                          \
	BACKEND_ENTRY(cuMemExportToShareableHandle, 10020)              \
	BACKEND_ENTRY(cuMemImportFromShareableHandle, 10020)            \
	BACKEND_ENTRY(cuIpcGetEventHandle, 4010)                        \
	BACKEND_ENTRY(cuIpcOpenEventHandle, 4010)                       \
	BACKEND_ENTRY(cuMemcpy3D, 3020)                                 \
	BACKEND_ENTRY(cuMemcpy3DAsync, 3020)                            \
	BACKEND_ENTRY(cuMemsetD2D8, 3020)                               \
	BACKEND_ENTRY(cuMemsetD2D16, 3020)                              \
	BACKEND_ENTRY(cuMemsetD2D32, 3020)                              \
	BACKEND_ENTRY(cuMemsetD2D8Async, 3020)                          \
	BACKEND_ENTRY(cuMemsetD2D16Async, 3020)                         \
	BACKEND_ENTRY(cuMemsetD2D32Async, 3020)                         \
	BACKEND_ENTRY(cuArray3DCreate, 3020)                            \
	BACKEND_ENTRY(cuArrayDestroy, 2000)                             \
	BACKEND_ENTRY(cuArray3DGetDescriptor, 3020)                     \
	BACKEND_ENTRY(cuArrayGetMemoryRequirements, 11060)              \
	BACKEND_ENTRY(cuMipmappedArrayCreate, 5000)                     \
	BACKEND_ENTRY(cuMipmappedArrayDestroy, 5000)                    \
	BACKEND_ENTRY(cuMipmappedArrayGetLevel, 5000)                   \
	BACKEND_ENTRY(cuMipmappedArrayGetMemoryRequirements, 11060)     \
	BACKEND_ENTRY(cuTexObjectCreate, 5000)                          \
	BACKEND_ENTRY(cuTexObjectDestroy, 5000)                         \
	BACKEND_ENTRY(cuTexObjectGetResourceDesc, 5000)                 \
	BACKEND_ENTRY(cuTexObjectGetTextureDesc, 5000)                  \
	BACKEND_ENTRY(cuTexObjectGetResourceViewDesc, 5000)             \
	BACKEND_ENTRY(cuSurfObjectCreate, 5000)                         \
	BACKEND_ENTRY(cuSurfObjectDestroy, 5000)                        \
	BACKEND_ENTRY(cuSurfObjectGetResourceDesc, 5000)                \
	BACKEND_ENTRY(cuTensorMapEncodeTiled, 12000)                    \
	BACKEND_ENTRY(cuTensorMapEncodeIm2col, 12000)                   \
	BACKEND_ENTRY(cuTensorMapEncodeIm2colWide, 12080)               \
	BACKEND_ENTRY(cuTensorMapReplaceAddress, 12000)

#define BACKEND_MEMBER(name, version) PFN_##name##_v##version name;

struct backend {
	const char *name;               /* "cuda" or "sim" */
	BACKEND_ENTRIES(BACKEND_MEMBER)
	/* Backend-private state, released by close. */
	void *priv;
	void (*close)(struct backend *be);
};

/* Options for opening a backend; strings are borrowed for the call only. */
struct backend_config {
	const char *driver_path;        /* cuda: libcuda.so.1 to dlopen; NULL = system one */
	const char *const *sim_kernels; /* sim: NULL-terminated list of kernel plugins (.so) */
	unsigned sim_device_count;      /* sim: devices to present (default 1) */
	unsigned long long sim_memory;  /* sim: bytes per device (default 16 GiB) */
	bool sim_skip_missing;          /* sim: a kernel with no CPU version is skipped, not refused */
	unsigned long long sim_managed_base;  /* sim: where __managed__ variables go (0: the default) */
};

/* Open a backend by name. Must be called in the worker process (after fork):
 * the CUDA driver does not survive fork. Returns 0 or -errno (-ENOENT for an
 * unknown name or a driver that cannot be loaded); *out is owned by the caller
 * and released with backend_close(). */
int backend_open(const char *name, const struct backend_config *cfg, struct backend **out);
void backend_close(struct backend *be);
/* Whether @entry (a member of @be) is really implemented. */
bool backend_has(const struct backend *be, const void *entry);

int backend_cuda_open(const struct backend_config *cfg, struct backend **out);
int backend_sim_open(const struct backend_config *cfg, struct backend **out);

#endif
