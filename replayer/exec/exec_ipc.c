/* IPC between sessions: cuIpcGetMemHandle / cuIpcOpenMemHandle /
 * cuIpcCloseMemHandle and the event pair.
 *
 * The exporting worker gives the supervisor a POSIX fd of the allocation's
 * physical memory (the arena creates exportable memory) or the driver's own
 * event handle, and the guest gets tern's 64-byte handle (ipc_channel.h) with
 * the id and secret the supervisor chose. The opening worker asks the
 * supervisor with that handle, imports the fd and maps it in its own arena
 * (the device the memory lives on when the session has it, else the
 * current one), at an address of its own, as IPC addresses may differ
 * between processes natively too.
 *
 * Snapshots: exported memory is the session's own and is captured like the
 * rest, but handles given out before a snapshot name the old worker's
 * export and cannot be opened after a restore. A session that maps another
 * session's memory or opened its event refuses snapshots until it closes
 * them (docs/limits.md). */
#define LOG_PREFIX "exec: "
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "ipc_channel.h"
#include "log.h"
#include "wire_dispatch.h"

/* One export or import of the session. */
struct exec_ipc {
	bool imported;
	uint32_t kind;          /* IPC_KIND_* */
	uint64_t addr;          /* memory: the allocation's base in this session */
	uint64_t event;         /* event: the virtual handle */
	uint64_t id;            /* the supervisor's export id */
	uint32_t refs;          /* imports: opens not yet closed */
	uint8_t handle[IPC_HANDLE_BYTES];  /* exports: what the guest got */
};

static struct exec_ipc *ipc_add(struct exec *ex)
{
	if (ex->ipc.count == ex->ipc.cap) {
		unsigned cap = ex->ipc.cap ? ex->ipc.cap * 2 : 8;
		struct exec_ipc *n = realloc(ex->ipc.entries, cap * sizeof(*n));

		if (!n)
			return NULL;
		ex->ipc.entries = n;
		ex->ipc.cap = cap;
	}
	memset(&ex->ipc.entries[ex->ipc.count], 0, sizeof(*ex->ipc.entries));
	return &ex->ipc.entries[ex->ipc.count++];
}

static void ipc_remove(struct exec *ex, struct exec_ipc *x)
{
	*x = ex->ipc.entries[--ex->ipc.count];
}

static struct exec_ipc *ipc_find(struct exec *ex, bool imported, uint32_t kind, uint64_t addr,
				 uint64_t event, uint64_t id)
{
	for (unsigned i = 0; i < ex->ipc.count; i++) {
		struct exec_ipc *x = &ex->ipc.entries[i];

		if (x->imported != imported || x->kind != kind)
			continue;
		if ((addr && x->addr == addr) || (event && x->event == event) || (id && x->id == id))
			return x;
	}
	return NULL;
}

static CUresult status_of(int err)
{
	switch (err) {
	case 0:
		return CUDA_SUCCESS;
	case -EACCES:
	case -EINVAL:
		return CUDA_ERROR_INVALID_VALUE;
	case -EPERM:
		return CUDA_ERROR_INVALID_CONTEXT;
	case -ENOSPC:
	case -ENOMEM:
		return CUDA_ERROR_OUT_OF_MEMORY;
	case -ENOTCONN:
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
}

/* Register an export with the supervisor; the guest's handle into @x, or
 * @x forgotten on failure. */
static CUresult ipc_export(struct exec *ex, struct exec_ipc *x, uint32_t kind, uint64_t size,
			   int32_t device, const void *payload, int fd)
{
	struct ipc_msg req = { .op = IPC_OP_EXPORT, .kind = kind, .size = size, .device = device };
	struct ipc_msg rep;
	struct ipc_handle h = { .kind = (uint16_t)kind, .size = size, .device = device };
	int ret;

	if (payload)
		memcpy(req.payload, payload, IPC_PAYLOAD_BYTES);
	ret = ipc_call(ex->ipc.fd, &req, fd, &rep, NULL);
	if (!ret)
		ret = rep.status;
	if (ret) {
		ipc_remove(ex, x);
		return status_of(ret);
	}
	h.id = rep.id;
	memcpy(h.secret, rep.secret, IPC_SECRET_BYTES);
	ipc_handle_encode(&h, x->handle);
	x->id = rep.id;
	x->kind = kind;
	return CUDA_SUCCESS;
}

CUresult exec_ipc_get_mem_handle(struct exec *ex, const struct wire_ipc_get_mem_handle_req *req,
				 struct wire_ipc_get_mem_handle_rep *rep)
{
	unsigned d = 0;
	const struct arena_alloc *al = exec_alloc_find(ex, req->address, &d);
	struct exec_ipc *x;
	CUresult res;
	int fd = -1, ret;

	if (!al || al->imported)
		return CUDA_ERROR_INVALID_VALUE;
	if (ex->ipc.fd < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* One handle per allocation, whatever pointer inside it names it. */
	x = ipc_find(ex, false, IPC_KIND_MEM, al->addr, 0, 0);
	if (x)
		goto out;
	ret = arena_export_fd(ex->dev.list[d].arena, al->addr, &fd);
	if (ret)
		return ret == -ENOTSUP ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
	x = ipc_add(ex);
	if (!x) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	x->addr = al->addr;
	res = ipc_export(ex, x, IPC_KIND_MEM, al->mapped, ex->dev.list[d].ordinal, NULL, fd);
	close(fd);
	if (res != CUDA_SUCCESS)
		return res;
out:
	rep->handle = (struct wire_blob){ x->handle, IPC_HANDLE_BYTES };
	return CUDA_SUCCESS;
}

/* Ask the supervisor to open @blob as @kind: the reply, and the fd for memory. */
static CUresult ipc_open(struct exec *ex, struct wire_blob blob, uint32_t kind, struct ipc_msg *rep,
			 int *fd)
{
	struct ipc_msg req = { .op = IPC_OP_OPEN, .kind = kind };
	struct ipc_handle h;
	int ret;

	if (ipc_handle_decode(blob.ptr, blob.len, &h) || h.kind != kind)
		return CUDA_ERROR_INVALID_VALUE;
	if (ex->ipc.fd < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	req.id = h.id;
	memcpy(req.secret, h.secret, IPC_SECRET_BYTES);
	ret = ipc_call(ex->ipc.fd, &req, -1, rep, kind == IPC_KIND_MEM ? fd : NULL);
	if (!ret)
		ret = rep->status;
	if (!ret && kind == IPC_KIND_MEM && *fd < 0)
		ret = -EBADMSG;
	if (ret && fd && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return status_of(ret);
}

CUresult exec_ipc_open_mem_handle(struct exec *ex, const struct wire_ipc_open_mem_handle_req *req,
				  struct wire_ipc_open_mem_handle_rep *rep)
{
	struct ipc_msg r;
	struct exec_ipc *x;
	struct arena *a = exec_arena_current(ex);
	uint64_t addr = 0;
	CUresult res;
	int fd = -1;

	if (req->flags & ~(uint32_t)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
		return CUDA_ERROR_INVALID_VALUE;
	res = ipc_open(ex, req->handle, IPC_KIND_MEM, &r, &fd);
	if (res != CUDA_SUCCESS)
		return res;
	/* Opened before: the same mapping, counted (as the driver does). */
	x = ipc_find(ex, true, IPC_KIND_MEM, 0, 0, r.id);
	if (x) {
		close(fd);
		x->refs++;
		rep->address = x->addr;
		return CUDA_SUCCESS;
	}
	/* Map it on the device it lives on, when the session has that one. */
	for (unsigned i = 0; i < ex->dev.count; i++)
		if (ex->dev.list[i].ordinal == r.device)
			a = ex->dev.list[i].arena;
	x = ipc_add(ex);
	res = x ? arena_import_fd(a, fd, r.size, &addr) : CUDA_ERROR_OUT_OF_MEMORY;
	close(fd);
	if (res != CUDA_SUCCESS) {
		if (x)
			ipc_remove(ex, x);
		return res;
	}
	x->imported = true;
	x->kind = IPC_KIND_MEM;
	x->addr = addr;
	x->id = r.id;
	x->refs = 1;
	rep->address = addr;
	pr_info("opened IPC memory %llu (%llu bytes) at 0x%llx", (unsigned long long)r.id,
		(unsigned long long)r.size, (unsigned long long)addr);
	return CUDA_SUCCESS;
}

CUresult exec_ipc_close_mem_handle(struct exec *ex, const struct wire_ipc_close_mem_handle_req *req,
				   struct wire_ipc_close_mem_handle_rep *rep)
{
	struct exec_ipc *x = ipc_find(ex, true, IPC_KIND_MEM, req->address, 0, 0);
	struct arena *a;

	if (!req->address || !x)
		return CUDA_ERROR_INVALID_VALUE;
	if (--x->refs)
		return CUDA_SUCCESS;
	/* Work of this session may still read it. */
	ex->be->cuCtxSynchronize();
	a = exec_arena_of(ex, x->addr, NULL);
	if (a)
		arena_free(a, x->addr);
	ipc_remove(ex, x);
	return CUDA_SUCCESS;
}

CUresult exec_ipc_get_event_handle(struct exec *ex, const struct wire_ipc_get_event_handle_req *req,
				   struct wire_ipc_get_event_handle_rep *rep)
{
	struct handle_entry *e;
	CUipcEventHandle real;
	struct exec_ipc *x;
	CUresult res;

	res = exec_lookup_event(ex, req->event, &e);
	if (res != CUDA_SUCCESS)
		return res;
	if (ex->ipc.fd < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	x = ipc_find(ex, false, IPC_KIND_EVENT, 0, req->event, 0);
	if (x)
		goto out;
	/* The driver checks the event's flags (interprocess, no timing). */
	res = ex->be->cuIpcGetEventHandle(&real, e->real);
	if (res != CUDA_SUCCESS)
		return res;
	_Static_assert(sizeof(real.reserved) == IPC_PAYLOAD_BYTES, "event handle size");
	x = ipc_add(ex);
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	x->event = req->event;
	res = ipc_export(ex, x, IPC_KIND_EVENT, 0, ex->dev.list[ex->dev.current].ordinal, real.reserved, -1);
	if (res != CUDA_SUCCESS)
		return res;
out:
	rep->handle = (struct wire_blob){ x->handle, IPC_HANDLE_BYTES };
	return CUDA_SUCCESS;
}

CUresult exec_ipc_open_event_handle(struct exec *ex, const struct wire_ipc_open_event_handle_req *req,
				    struct wire_ipc_open_event_handle_rep *rep)
{
	CUipcEventHandle real;
	struct ipc_msg r;
	struct exec_ipc *x;
	CUevent ev;
	CUresult res;
	uint32_t flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;

	res = ipc_open(ex, req->handle, IPC_KIND_EVENT, &r, NULL);
	if (res != CUDA_SUCCESS)
		return res;
	memcpy(real.reserved, r.payload, IPC_PAYLOAD_BYTES);
	res = ex->be->cuIpcOpenEventHandle(&ev, real);
	if (res != CUDA_SUCCESS)
		return res;
	x = ipc_add(ex);
	if (!x) {
		ex->be->cuEventDestroy(ev);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	res = exec_object_add(ex, HANDLE_EVENT, ev, ex->dev.ctx_current, NULL, &flags, 4, &rep->event);
	if (res != CUDA_SUCCESS) {
		ipc_remove(ex, x);
		ex->be->cuEventDestroy(ev);
		return res;
	}
	x->imported = true;
	x->kind = IPC_KIND_EVENT;
	x->event = rep->event;
	x->id = r.id;
	x->refs = 1;
	return CUDA_SUCCESS;
}

static void ipc_unexport_one(struct exec *ex, struct exec_ipc *x)
{
	struct ipc_msg req = { .op = IPC_OP_UNEXPORT, .id = x->id }, rep;

	if (ipc_call(ex->ipc.fd, &req, -1, &rep, NULL))
		pr_warn("cannot withdraw IPC export %llu", (unsigned long long)x->id);
	ipc_remove(ex, x);
}

void exec_ipc_unexport(struct exec *ex, uint64_t addr)
{
	struct exec_ipc *x = ipc_find(ex, false, IPC_KIND_MEM, addr, 0, 0);

	if (x)
		ipc_unexport_one(ex, x);
}

void exec_ipc_event_destroyed(struct exec *ex, uint64_t event)
{
	struct exec_ipc *x;

	while ((x = ipc_find(ex, false, IPC_KIND_EVENT, 0, event, 0)))
		ipc_unexport_one(ex, x);
	while ((x = ipc_find(ex, true, IPC_KIND_EVENT, 0, event, 0)))
		ipc_remove(ex, x);
}

int exec_ipc_snapshot_check(struct exec *ex, char *err, size_t errlen)
{
	unsigned n = 0;

	for (unsigned i = 0; i < ex->ipc.count; i++)
		n += ex->ipc.entries[i].imported;
	if (!n)
		return 0;
	snprintf(err, errlen, "the session holds %u IPC mapping(s) or event(s) of another session; "
		 "close them (cuIpcCloseMemHandle, cuEventDestroy) before a snapshot", n);
	return -EBUSY;
}

void exec_ipc_close(struct exec *ex)
{
	/* Imported mappings go with the arenas; exports with the supervisor's
	 * record of this worker. */
	free(ex->ipc.entries);
	ex->ipc.entries = NULL;
	ex->ipc.count = ex->ipc.cap = 0;
}
