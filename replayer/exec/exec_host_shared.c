/* Host buffers shared with the guest (the shm transport).
 *
 * The guest allocates pinned memory (cuMemHostAlloc and friends) as a sealed
 * memfd and hands it over with mem_host_share, or, for a libvirt domain's
 * session on ivshmem, carves it from its slot of the BAR past the rings and
 * names its offset with ivshmem_host_share; the worker maps the same pages,
 * at the guest's address when that is free here, and registers them with the
 * driver. Copies between such a buffer and the device are then the driver's
 * own DMA on the guest's bytes, with nothing in between, and a kernel can
 * write mapped memory the guest reads without a copy call.
 *
 * Addresses on the wire are the guest's; every range is checked against one
 * buffer before it is translated.
 */
#define LOG_PREFIX "exec: "
#include "exec.h"
#include "log.h"
#include "monotonic.h"
#include "shm_chan.h"
#include "wire_dispatch.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* How long a share waits for its memfd, which the guest sends just before. */
#define HOST_FD_TIMEOUT_MS 2000

static struct exec_host_buf *host_buf_find(struct exec *ex, uint64_t addr, uint64_t bytes)
{
	for (struct exec_host_buf *b = ex->host.bufs; b; b = b->next) {
		if (addr >= b->guest_addr && addr - b->guest_addr < b->bytes &&
		    bytes <= b->bytes - (addr - b->guest_addr))
			return b;
	}
	return NULL;
}

static bool host_buf_overlaps(struct exec *ex, uint64_t addr, uint64_t bytes)
{
	for (struct exec_host_buf *b = ex->host.bufs; b; b = b->next) {
		if (addr < b->guest_addr + b->bytes && b->guest_addr < addr + bytes)
			return true;
	}
	return false;
}

static void host_buf_release(struct exec *ex, struct exec_host_buf *b)
{
	ex->be->cuMemHostUnregister(b->local);
	munmap(b->local, b->bytes);
	ex->host.bytes -= b->bytes;
	free(b);
}

static void host_bufs_release(struct exec *ex, struct exec_host_buf **list)
{
	while (*list) {
		struct exec_host_buf *b = *list;

		*list = b->next;
		host_buf_release(ex, b);
	}
}

CUresult exec_shm_attach(struct exec *ex, const struct wire_shm_attach_req *req,
			 struct wire_shm_attach_rep *rep)
{
	/* The worker's connection serves it (worker.c); a dispatch here means
	 * the request came where no channel can be attached. */
	(void)ex;
	(void)req;
	(void)rep;
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult exec_ivshmem_attach(struct exec *ex, const struct wire_ivshmem_attach_req *req,
			     struct wire_ivshmem_attach_rep *rep)
{
	/* Likewise: only a domain's session on its worker's connection. */
	(void)ex;
	(void)req;
	(void)rep;
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* Whether a share may be made: CUDA_SUCCESS with *@again set when it was
 * made already (the guest shares again after a reconnect; its address in
 * *@device), else a CUresult for a request out of bounds. */
static CUresult host_share_check(struct exec *ex, uint64_t address, uint64_t bytes, uint64_t *device, bool *again)
{
	long page = sysconf(_SC_PAGESIZE);
	struct exec_host_buf *b = host_buf_find(ex, address, bytes);

	*again = b && b->guest_addr == address && b->bytes == bytes;
	if (*again) {
		*device = (uint64_t)(uintptr_t)b->local;
		return CUDA_SUCCESS;
	}
	if (!bytes || address % (uint64_t)page || bytes % (uint64_t)page || address + bytes < address ||
	    host_buf_overlaps(ex, address, bytes))
		return CUDA_ERROR_INVALID_VALUE;
	if (bytes > ex->host.bytes_max - ex->host.bytes)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

/* Map @bytes of @fd at @offset, at the guest's @address when that is free
 * here, register them with the driver and keep them as a shared buffer. */
static CUresult host_share_map(struct exec *ex, uint64_t address, uint64_t bytes, int fd, uint64_t offset,
			       uint64_t *device)
{
	struct exec_host_buf *b;
	CUresult res;
	void *local;

	/* The guest's address if it is free here: then host and device
	 * pointers agree on both sides, as unified addressing promises. */
	local = mmap((void *)(uintptr_t)address, bytes, PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_FIXED_NOREPLACE, fd, (off_t)offset);
	if (local != MAP_FAILED && local != (void *)(uintptr_t)address) {
		munmap(local, bytes);           /* an old kernel took it as a hint */
		local = MAP_FAILED;
	}
	if (local == MAP_FAILED)
		local = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
	if (local == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = ex->be->cuMemHostRegister(local, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
	b = res == CUDA_SUCCESS ? calloc(1, sizeof(*b)) : NULL;
	if (!b) {
		if (res == CUDA_SUCCESS)
			ex->be->cuMemHostUnregister(local);
		munmap(local, bytes);
		return res == CUDA_SUCCESS ? CUDA_ERROR_OUT_OF_MEMORY : res;
	}
	b->guest_addr = address;
	b->bytes = bytes;
	b->local = local;
	b->next = ex->host.bufs;
	ex->host.bufs = b;
	ex->host.bytes += bytes;
	*device = (uint64_t)(uintptr_t)local;
	return CUDA_SUCCESS;
}

int exec_host_fds_take(struct exec *ex, int sock, int *fds, int nfds, int timeout_ms)
{
	if (ex->host.fds_take)
		return ex->host.fds_take(ex->host.fds_arg, fds, nfds, timeout_ms);
	return shm_fds_recv(sock, fds, nfds, timeout_ms);
}

CUresult exec_mem_host_share(struct exec *ex, const struct wire_mem_host_share_req *req,
			     struct wire_mem_host_share_rep *rep)
{
	CUresult res;
	bool again;
	int fd, ret;

	if (ex->host.sock < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	res = host_share_check(ex, req->address, req->bytes, &rep->device_address, &again);
	if (res != CUDA_SUCCESS || again)
		return res;             /* again: no second memfd comes */
	ret = exec_host_fds_take(ex, ex->host.sock, &fd, 1, HOST_FD_TIMEOUT_MS);
	if (ret) {
		pr_warn("mem_host_share: no memfd from the guest (%d)", ret);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (shm_memfd_check(fd, req->bytes)) {
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	res = host_share_map(ex, req->address, req->bytes, fd, 0, &rep->device_address);
	close(fd);
	return res;
}

/* The buffer is in the session's own slot, past its rings: checked against
 * the slot the worker claimed, never against anything in the BAR. */
CUresult exec_ivshmem_host_share(struct exec *ex, const struct wire_ivshmem_host_share_req *req,
				 struct wire_ivshmem_host_share_rep *rep)
{
	long page = sysconf(_SC_PAGESIZE);
	CUresult res;
	bool again;

	if (ex->host.bar_fd < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (req->offset % (uint64_t)page || req->offset < ex->host.bar_carve || req->offset > ex->host.bar_bytes ||
	    req->bytes > ex->host.bar_bytes - req->offset)
		return CUDA_ERROR_INVALID_VALUE;
	res = host_share_check(ex, req->address, req->bytes, &rep->device_address, &again);
	if (res != CUDA_SUCCESS || again)
		return res;
	pr_debug("pinned buffer %#llx+%#llx at %#llx of the ivshmem slot", (unsigned long long)req->address,
		 (unsigned long long)req->bytes, (unsigned long long)req->offset);
	return host_share_map(ex, req->address, req->bytes, ex->host.bar_fd, ex->host.bar_offset + req->offset,
			      &rep->device_address);
}

struct exec_host_buf *exec_host_buf_detach(struct exec *ex, uint64_t guest_addr)
{
	for (struct exec_host_buf **pp = &ex->host.bufs; *pp; pp = &(*pp)->next) {
		struct exec_host_buf *b = *pp;

		if (b->guest_addr == guest_addr) {
			*pp = b->next;
			return b;
		}
	}
	return NULL;
}

void exec_host_buf_attach(struct exec *ex, struct exec_host_buf *b)
{
	b->next = ex->host.bufs;
	ex->host.bufs = b;
}

/* A buffer the guest freed is unregistered once nothing the session queued
 * is pending. The driver's cuMemHostUnregister waits for all the context's
 * work, and while it waits every other driver call of the process waits too
 * (measured on the H200: launches, copies, event records, registrations);
 * on the dispatch thread, or on a waiter, it would hold the write that
 * another guest thread's value wait needs (two_threads stress over shm hung
 * 4 runs in 5 so). Until then it stays pinned and counts against the
 * session's pinned bytes; the guest has unmapped its side already. */
void exec_host_buf_retire(struct exec *ex, struct exec_host_buf *b)
{
	if (exec_streams_idle(ex)) {
		host_buf_release(ex, b);
		return;
	}
	b->next = ex->host.retired;
	ex->host.retired = b;
}

bool exec_host_retired_pending(const struct exec *ex)
{
	return ex->host.retired != NULL;
}

void exec_host_retired_reap(struct exec *ex)
{
	uint64_t now;

	if (!ex->host.retired)
		return;
	/* A look at every stream, at most once a millisecond. */
	now = monotonic_ns();
	if (now - ex->host.retired_looked_ns < 1000000u)
		return;
	ex->host.retired_looked_ns = now;
	if (exec_streams_idle(ex))
		host_bufs_release(ex, &ex->host.retired);
}

/* Served here when the context was idle, or nothing could wait aside; else
 * a waiter waits for the context first (exec_wait.c): cuMemFreeHost
 * synchronises, and the dispatch thread must go on serving the other guest
 * threads meanwhile. */
CUresult exec_mem_host_unshare(struct exec *ex, const struct wire_mem_host_unshare_req *req,
			       struct wire_mem_host_unshare_rep *rep)
{
	struct exec_host_buf *b = exec_host_buf_detach(ex, req->address);

	(void)rep;
	if (!b)
		return CUDA_ERROR_INVALID_VALUE;
	ex->be->cuCtxSynchronize();
	exec_host_buf_retire(ex, b);
	return CUDA_SUCCESS;
}

void exec_host_shared_close(struct exec *ex)
{
	host_bufs_release(ex, &ex->host.bufs);
	host_bufs_release(ex, &ex->host.retired);
}

/* The stream, or NULL for a synchronous copy. */
/* A graph holding our mapping of the guest's buffer could not be rebuilt by
 * a restore, which runs before the buffers are shared again: refused too. */
static CUresult copy_stream(struct exec *ex, uint64_t handle, uint32_t async, CUstream *s)
{
	*s = NULL;
	return async ? exec_host_copy_stream(ex, handle, s) : CUDA_SUCCESS;
}

CUresult exec_memcpy_htod_shared(struct exec *ex, const struct wire_memcpy_htod_shared_req *req,
				 struct wire_memcpy_htod_shared_rep *rep)
{
	struct exec_host_buf *b = host_buf_find(ex, req->src, req->bytes);
	const uint8_t *src;
	uint64_t dst;
	CUstream s;
	CUresult res;

	(void)rep;
	if (!b || !exec_device_range(ex, req->dst, req->bytes, &dst))
		return CUDA_ERROR_INVALID_VALUE;
	src = b->local + (req->src - b->guest_addr);
	res = copy_stream(ex, req->stream, req->async, &s);
	if (res != CUDA_SUCCESS)
		return res;
	return req->async ? ex->be->cuMemcpyHtoDAsync(dst, src, req->bytes, s)
			  : ex->be->cuMemcpyHtoD(dst, src, req->bytes);
}

CUresult exec_memcpy_dtoh_shared(struct exec *ex, const struct wire_memcpy_dtoh_shared_req *req,
				 struct wire_memcpy_dtoh_shared_rep *rep)
{
	struct exec_host_buf *b = host_buf_find(ex, req->dst, req->bytes);
	uint8_t *dst;
	uint64_t src;
	CUstream s;
	CUresult res;

	(void)rep;
	if (!b || !exec_device_range(ex, req->src, req->bytes, &src))
		return CUDA_ERROR_INVALID_VALUE;
	dst = b->local + (req->dst - b->guest_addr);
	res = copy_stream(ex, req->stream, req->async, &s);
	if (res != CUDA_SUCCESS)
		return res;
	return req->async ? ex->be->cuMemcpyDtoHAsync(dst, src, req->bytes, s)
			  : ex->be->cuMemcpyDtoH(dst, src, req->bytes);
}

bool exec_host_shared_device_range(struct exec *ex, uint64_t addr, uint64_t len)
{
	for (struct exec_host_buf *b = ex->host.bufs; b; b = b->next) {
		uint64_t dev = (uint64_t)(uintptr_t)b->local;

		if (addr >= dev && addr - dev < b->bytes && len <= b->bytes - (addr - dev))
			return true;
	}
	return false;
}
