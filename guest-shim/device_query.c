/* Device queries beyond attributes (wire ids 350-355, replayer/exec/exec_device_query.c):
 * a device by PCI bus id, the 1D linear texture limit, atomic capabilities
 * of the host and peer links, the GPUDirect RDMA write fence, the graph
 * memory figures of the session; and cuLibraryGetUnifiedFunction, which no
 * tern device can serve. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

SHIM_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
	SHIM_ENTRY();
	struct wire_device_get_by_pci_bus_id_req req;
	struct wire_device_get_by_pci_bus_id_rep rep;
	size_t len;
	CUresult res;

	if (!dev || !pciBusId)
		return CUDA_ERROR_INVALID_VALUE;
	/* Longer than any bus id: the driver's parser refuses it too. */
	len = strnlen(pciBusId, sizeof(req.bus_id));
	if (len >= sizeof(req.bus_id))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(req.bus_id, pciBusId, len + 1);
	res = rpc_device_get_by_pci_bus_id(&req, &rep);
	if (res == CUDA_SUCCESS)
		*dev = rep.device;
	return res;
}

SHIM_API CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements, CUarray_format format,
						     unsigned numChannels, CUdevice dev)
{
	SHIM_ENTRY();
	struct wire_device_get_texture_1d_linear_max_width_req req = {
		.format = (uint32_t)format, .channels = numChannels, .device = dev,
	};
	struct wire_device_get_texture_1d_linear_max_width_rep rep;
	CUresult res;

	if (!maxWidthInElements)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_device_get_texture_1d_linear_max_width(&req, &rep);
	if (res == CUDA_SUCCESS)
		*maxWidthInElements = (size_t)rep.width;
	return res;
}

/* @peer -1: the link to the host. */
static CUresult atomic_capabilities(unsigned *caps, const CUatomicOperation *ops, unsigned count, CUdevice dev,
				    CUdevice peer)
{
	struct wire_device_get_atomic_capabilities_req req = { .device = dev, .peer = peer };
	struct wire_device_get_atomic_capabilities_rep rep;
	uint8_t *buf;
	CUresult res;

	if (!caps || !ops || !count)
		return CUDA_ERROR_INVALID_VALUE;
	/* The worker answers at most 16384 operations at once (there are 13). */
	if (count > 16384)
		return CUDA_ERROR_INVALID_VALUE;
	buf = malloc(4 * (size_t)count);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned i = 0; i < count; i++)
		for (int k = 0; k < 4; k++)
			buf[4 * i + k] = (uint8_t)((uint32_t)ops[i] >> (8 * k));
	req.operations = (struct wire_blob){ buf, 4 * count };
	res = rpc_device_get_atomic_capabilities(&req, &rep);
	free(buf);
	if (res != CUDA_SUCCESS)
		return res;
	if (rep.capabilities.len != 4 * count) {
		pr_err("device_get_atomic_capabilities: %u bytes for %u operations", rep.capabilities.len, count);
		return CUDA_ERROR_UNKNOWN;
	}
	for (unsigned i = 0; i < count; i++) {
		const uint8_t *b = rep.capabilities.ptr + 4 * i;

		caps[i] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	}
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuDeviceGetHostAtomicCapabilities(unsigned int *capabilities, const CUatomicOperation *operations,
						    unsigned int count, CUdevice dev)
{
	SHIM_ENTRY();
	return atomic_capabilities(capabilities, operations, count, dev, -1);
}

SHIM_API CUresult cuDeviceGetP2PAtomicCapabilities(unsigned int *capabilities, const CUatomicOperation *operations,
						   unsigned int count, CUdevice srcDevice, CUdevice dstDevice)
{
	SHIM_ENTRY();
	/* -1 names the host on the wire: no device is -1. */
	if (dstDevice == -1)
		return CUDA_ERROR_INVALID_DEVICE;
	return atomic_capabilities(capabilities, operations, count, srcDevice, dstDevice);
}

SHIM_API CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
					     CUflushGPUDirectRDMAWritesScope scope)
{
	SHIM_ENTRY();
	struct wire_flush_gpu_direct_rdma_writes_req req = { .target = (uint32_t)target, .scope = (uint32_t)scope };
	struct wire_flush_gpu_direct_rdma_writes_rep rep;

	return rpc_flush_gpu_direct_rdma_writes(&req, &rep);
}

static CUresult graph_mem_attribute(CUdevice device, CUgraphMem_attribute attr, void *value, uint32_t set)
{
	struct wire_device_graph_mem_attribute_req req = { .device = device, .attr = (uint32_t)attr, .set = set };
	struct wire_device_graph_mem_attribute_rep rep;
	CUresult res;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	/* Every attribute is a cuuint64_t. */
	if (set)
		memcpy(&req.value, value, sizeof(req.value));
	res = rpc_device_graph_mem_attribute(&req, &rep);
	if (res == CUDA_SUCCESS && !set)
		memcpy(value, &rep.value, sizeof(rep.value));
	return res;
}

SHIM_API CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	SHIM_ENTRY();
	return graph_mem_attribute(device, attr, value, 0);
}

SHIM_API CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	SHIM_ENTRY();
	return graph_mem_attribute(device, attr, value, 1);
}

SHIM_API CUresult cuDeviceGraphMemTrim(CUdevice device)
{
	SHIM_ENTRY();
	struct wire_device_graph_mem_trim_req req = { .device = device };
	struct wire_device_graph_mem_trim_rep rep;

	return rpc_device_graph_mem_trim(&req, &rep);
}

/* A unified function pointer is an address a host thread may call: the
 * driver's would lie in the worker's process. No tern device reports
 * CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS (exec_device.c), so no
 * symbol names one: CUDA_ERROR_INVALID_VALUE, the H200's driver's answer for
 * a symbol that is not a unified function; the library is checked first, as
 * the driver checks its handle. */
SHIM_API CUresult cuLibraryGetUnifiedFunction(void **fptr, CUlibrary library, const char *symbol)
{
	SHIM_ENTRY();
	struct wire_library_get_kernel_count_req req = { .library = (uint64_t)(uintptr_t)library };
	struct wire_library_get_kernel_count_rep rep;
	CUresult res;

	if (!fptr || !symbol)
		return CUDA_ERROR_INVALID_VALUE;
	if (!library)
		return CUDA_ERROR_INVALID_HANDLE;
	res = rpc_library_get_kernel_count(&req, &rep);
	return res == CUDA_SUCCESS ? CUDA_ERROR_INVALID_VALUE : res;
}
