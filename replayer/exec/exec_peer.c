/* Peer access between the session's devices.
 *
 * The arena maps memory with the driver's VMM calls, whose access is given
 * per mapping (cuMemSetAccess). Without it a device cannot even copy from
 * another's mapping (where cudaMalloc memory is reached through unified
 * addressing from any context), and a snapshot copies every device's memory
 * from device 0's context. So when the session opens, each device that the
 * hardware lets reach another gets peer access to it for the worker's whole
 * life: the driver's (cuCtxEnablePeerAccess, which the driver wants
 * alongside such mappings: texture objects failed with PEER_ACCESS_NOT_ENABLED
 * without it) and access to every mapping of its arena. What the guest
 * enables and disables is a bit in ex->dev.list[].peers, with the driver's
 * answers, journaled with a snapshot (EXEC_META_PEERS) so a restore sets it
 * again (docs/limits.md). */
#define LOG_PREFIX "exec: "
#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"

static void *ctx_real(struct exec *ex, unsigned d)
{
	struct handle_entry *e = handle_table_get(ex->handles, ex->dev.list[d].ctx, HANDLE_CONTEXT);

	return e ? e->real : NULL;
}

CUresult exec_device_can_access_peer(struct exec *ex, const struct wire_device_can_access_peer_req *req,
				     struct wire_device_can_access_peer_rep *rep)
{
	CUdevice a, b;
	int can = 0;
	CUresult res = exec_device_real(ex, req->device, &a);

	if (res == CUDA_SUCCESS)
		res = exec_device_real(ex, req->peer, &b);
	if (res != CUDA_SUCCESS)
		return res;
	/* A device is not its own peer; two guest devices on one backend
	 * device (never made here) would be. */
	res = req->device == req->peer ? CUDA_SUCCESS : ex->be->cuDeviceCanAccessPeer(&can, a, b);
	rep->can = can;
	return res;
}

CUresult exec_device_get_p2p_attribute(struct exec *ex,
				       const struct wire_device_get_p2p_attribute_req *req,
				       struct wire_device_get_p2p_attribute_rep *rep)
{
	CUdevice a, b;
	int v = 0;
	CUresult res = exec_device_real(ex, req->src, &a);

	if (res == CUDA_SUCCESS)
		res = exec_device_real(ex, req->dst, &b);
	if (res == CUDA_SUCCESS && req->src == req->dst)
		res = CUDA_ERROR_INVALID_DEVICE;
	if (res == CUDA_SUCCESS)
		res = ex->be->cuDeviceGetP2PAttribute(&v, (CUdevice_P2PAttribute)req->attrib, a, b);
	rep->value = v;
	return res;
}

/* Device @d's context reaches device @p's memory (the backend's context is
 * @d's): the driver's answer for a pair it cannot join, else a success. */
static CUresult peer_enable(struct exec *ex, unsigned d, unsigned p)
{
	CUresult res = ex->be->cuCtxEnablePeerAccess(ctx_real(ex, p), 0);

	return res == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED ? CUDA_SUCCESS : res;
}

CUresult exec_peers_open(struct exec *ex)
{
	CUresult res = CUDA_SUCCESS;

	for (unsigned d = 0; d < ex->dev.count && res == CUDA_SUCCESS; d++)
		for (unsigned p = 0; p < ex->dev.count && res == CUDA_SUCCESS; p++) {
			int can = 0;

			if (p == d || ex->be->cuDeviceCanAccessPeer(&can, ex->dev.list[d].dev,
								    ex->dev.list[p].dev) != CUDA_SUCCESS || !can)
				continue;
			res = exec_context_switch(ex, ex->dev.list[d].ctx);
			if (res == CUDA_SUCCESS)
				res = peer_enable(ex, d, p);
			if (res == CUDA_SUCCESS)
				res = arena_peer_add(ex->dev.list[p].arena, ex->dev.list[d].dev);
		}
	return res;
}

CUresult exec_ctx_enable_peer_access(struct exec *ex, const struct wire_ctx_enable_peer_access_req *req,
				     struct wire_ctx_enable_peer_access_rep *rep)
{
	int p = exec_device_of_ctx(ex, req->peer_ctx);
	unsigned d = ex->dev.current;
	CUresult res;

	if (!ex->dev.ctx_current)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (p < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (req->flags)
		return CUDA_ERROR_INVALID_VALUE;
	if ((unsigned)p == d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (ex->dev.list[d].peers & (1u << p))
		return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	res = peer_enable(ex, d, (unsigned)p);
	if (res == CUDA_SUCCESS)
		ex->dev.list[d].peers |= 1u << p;
	return res;
}

CUresult exec_ctx_disable_peer_access(struct exec *ex,
				      const struct wire_ctx_disable_peer_access_req *req,
				      struct wire_ctx_disable_peer_access_rep *rep)
{
	int p = exec_device_of_ctx(ex, req->peer_ctx);
	unsigned d = ex->dev.current;

	if (!ex->dev.ctx_current || p < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!(ex->dev.list[d].peers & (1u << p)))
		return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
	/* The worker's own peer access stays (exec_peers_open). */
	ex->dev.list[d].peers &= ~(1u << p);
	return CUDA_SUCCESS;
}

CUresult exec_peer_restore(struct exec *ex, unsigned ordinal, uint32_t peers)
{
	CUresult res;

	if (ordinal >= ex->dev.count)
		return CUDA_ERROR_INVALID_DEVICE;
	res = exec_context_switch(ex, ex->dev.list[ordinal].ctx);
	for (unsigned p = 0; p < ex->dev.count && res == CUDA_SUCCESS; p++)
		if (p != ordinal && peers & (1u << p)) {
			res = peer_enable(ex, ordinal, p);
			if (res == CUDA_SUCCESS)
				ex->dev.list[ordinal].peers |= 1u << p;
		}
	/* Peers the snapshot names beyond this session's devices cannot be. */
	if (res == CUDA_SUCCESS && peers >> ex->dev.count)
		res = CUDA_ERROR_INVALID_DEVICE;
	return res;
}

CUresult exec_copy_dtod(struct exec *ex, uint64_t dst, uint64_t src, uint64_t bytes, CUstream s,
			bool async)
{
	unsigned dd = 0, sd = 0;

	if (!exec_device_range(ex, dst, bytes, &dst) || !exec_device_range(ex, src, bytes, &src))
		return CUDA_ERROR_INVALID_VALUE;
	/* Module globals lie outside the arenas: the current device's. */
	if (!exec_arena_of(ex, dst, &dd))
		dd = ex->dev.current;
	if (!exec_arena_of(ex, src, &sd))
		sd = ex->dev.current;
	if (dd == sd)
		return async ? ex->be->cuMemcpyDtoDAsync(dst, src, bytes, s)
			     : ex->be->cuMemcpyDtoD(dst, src, bytes);
	/* Between devices the driver wants both contexts (cuMemcpyPeer): it
	 * goes over NVLink/PCIe peer-to-peer where it can, staged where not. */
	return async ? ex->be->cuMemcpyPeerAsync(dst, ctx_real(ex, dd), src, ctx_real(ex, sd), bytes, s)
		     : ex->be->cuMemcpyPeer(dst, ctx_real(ex, dd), src, ctx_real(ex, sd), bytes);
}
