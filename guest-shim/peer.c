/* Peer access between the session's devices, and copies between them.
 * Device addresses are unique across the session's devices (each has its own
 * arena range), so a peer copy is a device-to-device copy whose ends the
 * worker places by address; the contexts are checked here as the driver
 * checks them. */
#define LOG_PREFIX "shim: "

#include "shim.h"

SHIM_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct wire_device_can_access_peer_req req = { .device = dev, .peer = peerDev };
	struct wire_device_can_access_peer_rep rep;
	struct shim_device_info *d;
	bool in_cache = peerDev >= 0 && peerDev < SHIM_DEVICE_CACHE;
	uint64_t epoch;
	CUresult res;

	if (!canAccessPeer)
		return CUDA_ERROR_INVALID_VALUE;
	/* Fixed for the pair: the first answer is kept (shim.h, shim_device_info). */
	pthread_mutex_lock(&p->cache.lock);
	epoch = p->cache.epoch;
	d = in_cache ? device_info_locked(p, dev) : NULL;
	if (d && d->peer[peerDev] && !rpc_session_lost()) {
		*canAccessPeer = d->peer[peerDev] - 1;
		pthread_mutex_unlock(&p->cache.lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&p->cache.lock);
	res = rpc_device_can_access_peer(&req, &rep);
	if (res != CUDA_SUCCESS)
		return res;
	*canAccessPeer = rep.can;
	pthread_mutex_lock(&p->cache.lock);
	if (d && p->cache.epoch == epoch && (rep.can == 0 || rep.can == 1))
		d->peer[peerDev] = (uint8_t)(rep.can + 1);
	pthread_mutex_unlock(&p->cache.lock);
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib,
					  CUdevice srcDevice, CUdevice dstDevice)
{
	SHIM_ENTRY();
	struct wire_device_get_p2p_attribute_req req = {
		.attrib = (uint32_t)attrib, .src = srcDevice, .dst = dstDevice,
	};
	struct wire_device_get_p2p_attribute_rep rep;
	CUresult res;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_device_get_p2p_attribute(&req, &rep);
	if (res == CUDA_SUCCESS)
		*value = rep.value;
	return res;
}

SHIM_API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
	SHIM_ENTRY();
	struct wire_ctx_enable_peer_access_req req = {
		.peer_ctx = (uint64_t)(uintptr_t)peerContext, .flags = Flags,
	};
	struct wire_ctx_enable_peer_access_rep rep;

	if (!ctx_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!handle_kind_is(req.peer_ctx, WIRE_HANDLE_CONTEXT))
		return CUDA_ERROR_INVALID_CONTEXT;
	return rpc_ctx_enable_peer_access(&req, &rep);
}

SHIM_API CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
	SHIM_ENTRY();
	struct wire_ctx_disable_peer_access_req req = { .peer_ctx = (uint64_t)(uintptr_t)peerContext };
	struct wire_ctx_disable_peer_access_rep rep;

	if (!ctx_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!handle_kind_is(req.peer_ctx, WIRE_HANDLE_CONTEXT))
		return CUDA_ERROR_INVALID_CONTEXT;
	return rpc_ctx_disable_peer_access(&req, &rep);
}

static CUresult peer_copy(CUdeviceptr dst, CUcontext dstContext, CUdeviceptr src,
			  CUcontext srcContext, size_t n, uint64_t stream, bool async)
{
	if (!handle_kind_is((uint64_t)(uintptr_t)dstContext, WIRE_HANDLE_CONTEXT) ||
	    !handle_kind_is((uint64_t)(uintptr_t)srcContext, WIRE_HANDLE_CONTEXT))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!n)
		return CUDA_SUCCESS;
	return memory_copy_dtod(dst, src, n, stream, async);
}

SHIM_API CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
			       CUcontext srcContext, size_t ByteCount)
{
	SHIM_ENTRY();
	return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 0, false);
}

SHIM_API CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext,
				    CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)
{
	SHIM_ENTRY();
	return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount,
			 shim_stream(NULL, true), false);
}

SHIM_API CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
				    CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,
				    CUstream hStream)
{
	SHIM_ENTRY();
	return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount,
			 shim_stream(hStream, false), true);
}

SHIM_API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
					 CUdeviceptr srcDevice, CUcontext srcContext,
					 size_t ByteCount, CUstream hStream)
{
	SHIM_ENTRY();
	return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount,
			 shim_stream(hStream, true), true);
}
