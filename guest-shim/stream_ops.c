/* Stream memory operations (cuStreamWaitValue*, cuStreamWriteValue*,
 * cuStreamBatchMemOp) and stream attributes.
 *
 * A wait or write wants no reply: it is deferred like a launch (lazy RPC),
 * after the checks the driver makes at the call. The first API version of
 * each (v8000/v9000) and the _v2 one (v11070) are the same operation since
 * CUDA 12, so both names lead here. An operation on managed memory is a
 * coherence point of it (guest-shim/managed.c), as a copy is. */
#include "shim.h"

#include <stdlib.h>
#include <string.h>


static CUresult value_op(CUstream stream, bool per_thread, CUdeviceptr addr, uint64_t value,
			 uint32_t width, unsigned flags, bool wait)
{
	uint64_t s = shim_stream(stream, per_thread);

	/* What the driver refuses at once: a misaligned address, unknown flags. */
	if (addr % width)
		return CUDA_ERROR_INVALID_VALUE;
	if (wait ? (flags & ~(0xfu | CU_STREAM_WAIT_VALUE_FLUSH)) || (flags & 0xf) > CU_STREAM_WAIT_VALUE_NOR
		 : (flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER))
		return CUDA_ERROR_INVALID_VALUE;
	if (managed_contains(addr)) {
		CUresult res = managed_device_access(!wait, s);

		if (res != CUDA_SUCCESS)
			return res;
	}
	if (wait) {
		struct wire_stream_wait_value_req req = {
			.stream = s, .address = addr, .value = value, .width = width, .flags = flags,
		};
		struct wire_stream_wait_value_rep rep;

		return shim_process()->batching.lazy ? rpc_stream_wait_value_defer(&req)
					    : rpc_stream_wait_value(&req, &rep);
	} else {
		struct wire_stream_write_value_req req = {
			.stream = s, .address = addr, .value = value, .width = width, .flags = flags,
		};
		struct wire_stream_write_value_rep rep;

		return shim_process()->batching.lazy ? rpc_stream_write_value_defer(&req)
					    : rpc_stream_write_value(&req, &rep);
	}
}

/* Each operation under its four names: v1, v2, and their per-thread forms. */
#define VALUE_ENTRY(sym, type, width, wait, ptsz)                                      \
	SHIM_API CUresult sym(CUstream stream, CUdeviceptr addr, type value, unsigned int flags) \
	{                                                                               \
		return value_op(stream, ptsz, addr, value, width, flags, wait);         \
	}
#define VALUE_ENTRIES(name, type, width, wait)                 \
	VALUE_ENTRY(name, type, width, wait, false)            \
	VALUE_ENTRY(name##_ptsz, type, width, wait, true)      \
	VALUE_ENTRY(name##_v2, type, width, wait, false)       \
	VALUE_ENTRY(name##_v2_ptsz, type, width, wait, true)

VALUE_ENTRIES(cuStreamWaitValue32, cuuint32_t, 4, true)
VALUE_ENTRIES(cuStreamWaitValue64, cuuint64_t, 8, true)
VALUE_ENTRIES(cuStreamWriteValue32, cuuint32_t, 4, false)
VALUE_ENTRIES(cuStreamWriteValue64, cuuint64_t, 8, false)

static CUresult batch_mem_op(CUstream stream, bool per_thread, unsigned count,
			     const CUstreamBatchMemOpParams *ops, unsigned flags)
{
	struct wire_stream_batch_mem_op_req req = {
		.stream = shim_stream(stream, per_thread), .flags = flags,
	};
	struct wire_stream_batch_mem_op_rep rep;
	bool reads = false, writes = false;
	uint8_t *buf;
	CUresult res;

	if (count > WIRE_REC_BATCH_MEM_OP_MAX || (count && !ops) || flags)
		return CUDA_ERROR_INVALID_VALUE;
	buf = calloc(count ? count : 1, WIRE_REC_BATCH_MEM_OP_BYTES);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned i = 0; i < count; i++) {
		const CUstreamBatchMemOpParams *o = &ops[i];
		uint32_t op = (uint32_t)o->operation, f = 0;
		uint64_t addr = 0, value = 0;

		switch (o->operation) {
		case CU_STREAM_MEM_OP_WAIT_VALUE_32:
		case CU_STREAM_MEM_OP_WAIT_VALUE_64:
			f = o->waitValue.flags;
			addr = o->waitValue.address;
			value = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? o->waitValue.value
									     : o->waitValue.value64;
			break;
		case CU_STREAM_MEM_OP_WRITE_VALUE_32:
		case CU_STREAM_MEM_OP_WRITE_VALUE_64:
			f = o->writeValue.flags;
			addr = o->writeValue.address;
			value = o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? o->writeValue.value
									      : o->writeValue.value64;
			break;
		case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
			f = o->flushRemoteWrites.flags;
			break;
		case CU_STREAM_MEM_OP_BARRIER:
			f = o->memoryBarrier.flags;
			break;
		default:
			free(buf);
			return CUDA_ERROR_INVALID_VALUE;
		}
		if (addr && managed_contains(addr)) {
			writes |= o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ||
				  o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
			reads = true;
		}
		wire_rec_batch_mem_op_put(buf, i, &(struct wire_rec_batch_mem_op){
			.operation = op, .flags = f, .address = addr, .value = value });
	}
	req.ops = (struct wire_blob){ buf, count * WIRE_REC_BATCH_MEM_OP_BYTES };
	res = reads ? managed_device_access(writes, req.stream) : CUDA_SUCCESS;
	if (res == CUDA_SUCCESS)
		res = shim_process()->batching.lazy ? rpc_stream_batch_mem_op_defer(&req)
					   : rpc_stream_batch_mem_op(&req, &rep);
	free(buf);
	return res;
}

SHIM_API CUresult cuStreamBatchMemOp(CUstream stream, unsigned int count,
				     CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
	SHIM_ENTRY();
	return batch_mem_op(stream, false, count, paramArray, flags);
}

SHIM_API CUresult cuStreamBatchMemOp_ptsz(CUstream stream, unsigned int count,
					  CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
	SHIM_ENTRY();
	return batch_mem_op(stream, true, count, paramArray, flags);
}

SHIM_API CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count,
					CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
	SHIM_ENTRY();
	return batch_mem_op(stream, false, count, paramArray, flags);
}

SHIM_API CUresult cuStreamBatchMemOp_v2_ptsz(CUstream stream, unsigned int count,
					     CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
	SHIM_ENTRY();
	return batch_mem_op(stream, true, count, paramArray, flags);
}

/* ---- attributes ---- */

static CUresult stream_set_attribute(CUstream h, bool per_thread, CUstreamAttrID attr,
				     const CUstreamAttrValue *value)
{
	struct wire_stream_set_attribute_req req = {
		.stream = shim_stream(h, per_thread), .attrib = (uint32_t)attr,
	};
	struct wire_stream_set_attribute_rep rep;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	req.value = (struct wire_blob){ (const uint8_t *)value, sizeof(*value) };
	return rpc_stream_set_attribute(&req, &rep);
}

static CUresult stream_get_attribute(CUstream h, bool per_thread, CUstreamAttrID attr,
				     CUstreamAttrValue *value)
{
	struct wire_stream_get_attribute_req req = {
		.stream = shim_stream(h, per_thread), .attrib = (uint32_t)attr,
	};
	struct wire_stream_get_attribute_rep rep;
	CUresult res;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	res = rpc_stream_get_attribute(&req, &rep);
	if (res == CUDA_SUCCESS && rep.value.len != sizeof(*value))
		res = CUDA_ERROR_UNKNOWN;
	if (res == CUDA_SUCCESS)
		memcpy(value, rep.value.ptr, sizeof(*value));
	return res;
}

SHIM_API CUresult cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
	SHIM_ENTRY();
	return stream_set_attribute(hStream, false, attr, value);
}

SHIM_API CUresult cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
	SHIM_ENTRY();
	return stream_set_attribute(hStream, true, attr, value);
}

SHIM_API CUresult cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value)
{
	SHIM_ENTRY();
	return stream_get_attribute(hStream, false, attr, value);
}

SHIM_API CUresult cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value)
{
	SHIM_ENTRY();
	return stream_get_attribute(hStream, true, attr, value);
}

/* Every attribute a stream has, read from one and set on the other. */
static CUresult stream_copy_attributes(CUstream dst, CUstream src, bool per_thread)
{
	static const CUstreamAttrID ids[] = {
		CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY,
		CU_STREAM_ATTRIBUTE_PRIORITY, CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
		CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN,
	};

	for (unsigned i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		CUstreamAttrValue v;
		CUresult res = stream_get_attribute(src, per_thread, ids[i], &v);

		if (res == CUDA_SUCCESS)
			res = stream_set_attribute(dst, per_thread, ids[i], &v);
		if (res != CUDA_SUCCESS)
			return res;
	}
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuStreamCopyAttributes(CUstream dst, CUstream src)
{
	SHIM_ENTRY();
	return stream_copy_attributes(dst, src, false);
}

SHIM_API CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src)
{
	SHIM_ENTRY();
	return stream_copy_attributes(dst, src, true);
}
