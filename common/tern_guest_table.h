/* tern's own export table: how guest libraries other than libcuda.so.1
 * (guest-nvml/'s libnvidia-ml.so.1) reach ternd through the shim's one
 * connection. They find it with cuGetExportTable and this UUID; a real
 * driver does not know it, which tells them they are not under tern. */
#ifndef TERN_GUEST_TABLE_H
#define TERN_GUEST_TABLE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "wire.h"

/* "tern guest table" in ASCII, padded. */
#define TERN_GUEST_TABLE_UUID \
	{ 't', 'e', 'r', 'n', ' ', 'g', 'u', 'e', 's', 't', ' ', 't', 'a', 'b', 'l', 'e' }

struct tern_nvml_info {
	char name[256];
	uint8_t uuid[16];
	uint64_t memory_total, memory_used;
	uint32_t gpu_util, memory_util;
	char driver_version[96];
	int32_t cc_major, cc_minor;
};

struct tern_guest_table {
	uint64_t size;          /* bytes of this struct: later versions only grow */
	/* The session's device, as NVML shows it (exec_nvml.c). */
	CUresult (*nvml_device_info)(struct tern_nvml_info *out);
	/* Its current PCIe link (CUDA_ERROR_NOT_SUPPORTED when the host's NVML
	 * does not say). Since the second version of the table. */
	CUresult (*nvml_device_pcie)(unsigned int *generation, unsigned int *width);
	/* A request of another API's table (common/wire/opencl.tbl: the guest's
	 * OpenCL ICD) on the session's connection, with the shim's own order,
	 * replay log and reconnects: as wire_client.h's rpc_call and rpc_defer.
	 * The reply's status is that API's (a cl_int as a u32); a status the
	 * API cannot have (a CUresult > 0) is the shim's: the session is gone. */
	CUresult (*call)(uint32_t id, struct wire_msg *req, struct wire_cursor *rep);
	CUresult (*defer)(uint32_t id, struct wire_msg *req);
};

/* Whether @t (of t->size bytes) has @member: the table only grows. */
#define TERN_GUEST_TABLE_HAS(t, member) \
	((t)->size >= offsetof(struct tern_guest_table, member) + sizeof((t)->member) && (t)->member)

/* NVML's text form of a device UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx. */
static inline void tern_uuid_text(const uint8_t u[16], char *out, size_t cap)
{
	snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
		 u[14], u[15]);
}

#endif
