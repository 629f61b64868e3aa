/* Stream memory operations (cuStreamWaitValue*, cuStreamWriteValue*,
 * cuStreamBatchMemOp) and stream attributes.
 *
 * A wait is a command like any other, but the device thread starts it only
 * once its value is there: until then its stream is parked and the device
 * runs other streams' commands (sim_queue.c), as a GPU would, so the value
 * may come from another stream, the host or another device. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "sim.h"

bool sim_value_ready(const struct sim_cmd *cmd)
{
	uint64_t v, want = cmd->value.value;

	if (!cmd->value.wait)
		return true;
	if (cmd->value.width == 4)
		v = __atomic_load_n((uint32_t *)cmd->value.addr, __ATOMIC_ACQUIRE);
	else
		v = __atomic_load_n((uint64_t *)cmd->value.addr, __ATOMIC_ACQUIRE);
	switch (cmd->value.flags & 0xf) {
	case CU_STREAM_WAIT_VALUE_GEQ:
		/* Wrapping comparison, as the driver documents it. */
		return cmd->value.width == 4 ? (int32_t)((uint32_t)v - (uint32_t)want) >= 0
					     : (int64_t)(v - want) >= 0;
	case CU_STREAM_WAIT_VALUE_EQ:
		return v == want;
	case CU_STREAM_WAIT_VALUE_AND:
		return (v & want) != 0;
	default:        /* NOR */
		return cmd->value.width == 4 ? (uint32_t)~(v | want) != 0 : ~(v | want) != 0;
	}
}

void sim_value_run(struct sim *sim, struct sim_cmd *cmd)
{
	if (!cmd->value.wait) {
		if (cmd->value.width == 4)
			__atomic_store_n((uint32_t *)cmd->value.addr, (uint32_t)cmd->value.value,
					 __ATOMIC_RELEASE);
		else
			__atomic_store_n((uint64_t *)cmd->value.addr, cmd->value.value, __ATOMIC_RELEASE);
		return;
	}
	/* A wait is picked once its value is there (sim_value_ready), or
	 * when the device stops: nothing is left to do. */
}

static bool wait_flags_ok(unsigned flags)
{
	return (flags & ~(0xfu | CU_STREAM_WAIT_VALUE_FLUSH)) == 0 &&
	       (flags & 0xf) <= CU_STREAM_WAIT_VALUE_NOR;
}

/* Check and queue one operation; lock held. */
static CUresult value_queue(struct sim *sim, struct sim_stream *s, uintptr_t addr, uint64_t value,
			    unsigned width, unsigned flags, bool wait)
{
	struct sim_cmd *cmd;

	if (wait ? !wait_flags_ok(flags) : (flags & ~CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (addr % width || !sim_range_device_ok(sim, addr, width, wait ? PROT_READ : PROT_WRITE))
		return CUDA_ERROR_INVALID_VALUE;
	if (s->ctx->sticky)
		return s->ctx->sticky;
	cmd = sim_cmd_new(SIM_CMD_VALUE);
	if (!cmd)
		return CUDA_ERROR_OUT_OF_MEMORY;
	cmd->value.addr = (void *)addr;
	cmd->value.value = width == 4 ? (uint32_t)value : value;
	cmd->value.width = width;
	cmd->value.flags = flags;
	cmd->value.wait = wait;
	return sim_stream_enqueue(sim, s, cmd);
}

static CUresult value_op(CUstream h, CUdeviceptr addr, uint64_t value, unsigned width, unsigned flags,
			 bool wait)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc = sim_enter_stream(h, &sim, &s);

	if (rc)
		return rc;
	rc = value_queue(sim, s, (uintptr_t)addr, value, width, flags, wait);
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamWaitValue32(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
	return value_op(h, addr, value, 4, flags, true);
}

CUresult sim_cuStreamWaitValue64(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
	return value_op(h, addr, value, 8, flags, true);
}

CUresult sim_cuStreamWriteValue32(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
	return value_op(h, addr, value, 4, flags, false);
}

CUresult sim_cuStreamWriteValue64(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
	return value_op(h, addr, value, 8, flags, false);
}

/* The driver's limit on one batch (CU_DEVICE_ATTRIBUTE_... has none; 256 is
 * what cuStreamBatchMemOp documents as its maximum). */
#define SIM_BATCH_MAX 256

CUresult sim_cuStreamBatchMemOp(CUstream h, unsigned int count, CUstreamBatchMemOpParams *ops,
				unsigned int flags)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	if (flags || count > SIM_BATCH_MAX || (count && !ops))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	/* Every operation is checked before any is queued: a bad batch queues nothing. */
	for (unsigned i = 0; i < count && !rc; i++) {
		const CUstreamBatchMemOpParams *o = &ops[i];

		switch (o->operation) {
		case CU_STREAM_MEM_OP_WAIT_VALUE_32:
		case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
			unsigned w = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? 4 : 8;

			if (!wait_flags_ok(o->waitValue.flags) || o->waitValue.address % w ||
			    !sim_range_device_ok(sim, (uintptr_t)o->waitValue.address, w, PROT_READ))
				rc = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		case CU_STREAM_MEM_OP_WRITE_VALUE_32:
		case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
			unsigned w = o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4 : 8;

			if (o->writeValue.flags & ~CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER ||
			    o->writeValue.address % w ||
			    !sim_range_device_ok(sim, (uintptr_t)o->writeValue.address, w, PROT_WRITE))
				rc = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
			if (o->flushRemoteWrites.flags)
				rc = CUDA_ERROR_INVALID_VALUE;
			break;
		case CU_STREAM_MEM_OP_BARRIER:
			if (o->memoryBarrier.flags > CU_STREAM_MEMORY_BARRIER_TYPE_GPU)
				rc = CUDA_ERROR_INVALID_VALUE;
			break;
		default:
			rc = CUDA_ERROR_INVALID_VALUE;
		}
	}
	/* Flushes and barriers order nothing more on a device that runs its
	 * commands one at a time, in order. */
	for (unsigned i = 0; i < count && !rc; i++) {
		const CUstreamBatchMemOpParams *o = &ops[i];

		if (o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
		    o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64)
			rc = value_queue(sim, s, (uintptr_t)o->waitValue.address, o->waitValue.value64,
					 o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? 4 : 8,
					 o->waitValue.flags, true);
		else if (o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ||
			 o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64)
			rc = value_queue(sim, s, (uintptr_t)o->writeValue.address, o->writeValue.value64,
					 o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4 : 8,
					 o->writeValue.flags, false);
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamSetAttribute(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue *v)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	switch (attr) {
	case CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW:
		if (v->accessPolicyWindow.hitRatio < 0.0f || v->accessPolicyWindow.hitRatio > 1.0f ||
		    (unsigned)v->accessPolicyWindow.hitProp > CU_ACCESS_PROPERTY_PERSISTING ||
		    (unsigned)v->accessPolicyWindow.missProp > CU_ACCESS_PROPERTY_PERSISTING)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			s->access_policy = v->accessPolicyWindow;
		break;
	case CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY:
		if (v->syncPolicy < CU_SYNC_POLICY_AUTO || v->syncPolicy > CU_SYNC_POLICY_BLOCKING_SYNC)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			s->sync_policy = v->syncPolicy;
		break;
	case CU_STREAM_ATTRIBUTE_PRIORITY:
		/* Clamped to the range, as cuStreamCreateWithPriority does. */
		s->priority = v->priority > 0 ? 0 : v->priority < -5 ? -5 : v->priority;
		break;
	case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
		s->domain_map = v->memSyncDomainMap;
		break;
	case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN:
		if ((unsigned)v->memSyncDomain > CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			s->domain = v->memSyncDomain;
		break;
	default:
		rc = CUDA_ERROR_INVALID_VALUE;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamGetAttribute(CUstream h, CUstreamAttrID attr, CUstreamAttrValue *v)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	memset(v, 0, sizeof(*v));
	switch (attr) {
	case CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW:
		v->accessPolicyWindow = s->access_policy;
		break;
	case CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY:
		v->syncPolicy = s->sync_policy ? s->sync_policy : CU_SYNC_POLICY_AUTO;
		break;
	case CU_STREAM_ATTRIBUTE_PRIORITY:
		v->priority = s->priority;
		break;
	case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
		v->memSyncDomainMap = s->domain_map;
		break;
	case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN:
		v->memSyncDomain = s->domain;
		break;
	default:
		rc = CUDA_ERROR_INVALID_VALUE;
	}
	sim_leave(sim);
	return rc;
}
