/* Memory pools and stream-ordered allocation (cuMemPool*, cuDevice*MemPool,
 * cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync).
 *
 * A pool is the worker's own object, not the driver's: its memory comes from
 * the session's arena like cuMemAlloc's, so it lies at fixed addresses that a
 * restore maps again, and the quota counts it. An allocation is made at the
 * call (work queued earlier on the stream cannot reach the block, so this
 * orders no less than the driver does); a stream-ordered free waits for the
 * stream's earlier work and then unmaps. Nothing freed is kept for reuse, so
 * a pool reserves exactly what it has in use (rounded to the arena's
 * granularity) and trimming has nothing to give back. The attributes are
 * kept and answered as cuda.h documents them.
 *
 * Journal (docs/journal.md, "Executor records"): a pool is an object of kind
 * HANDLE_MEMPOOL whose arguments are struct pool_record; each allocation is a
 * region owned by its pool. A pool destroyed while allocations are live goes
 * at once, as the driver's handle does; the allocations stay valid until
 * freed and are no longer counted anywhere.
 */
#define LOG_PREFIX "exec: "
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"

#define POOL_RECORD_VERSION 1u
#define POOL_F_DEFAULT 1u       /* the device's default pool */
#define POOL_F_CURRENT 2u       /* the device's current pool (cuDeviceSetMemPool) */
#define POOL_REUSE_ATTRS 3      /* CU_MEMPOOL_ATTR_REUSE_* are 1 .. 3 */

/* A pool's journal arguments, little endian. */
struct pool_record {
	uint32_t version;
	uint32_t flags;
	uint64_t max_size;
	uint32_t usage;
	int32_t reuse[POOL_REUSE_ATTRS];
	uint64_t release_threshold;
};
_Static_assert(sizeof(struct pool_record) == 40, "pool record layout");

static struct exec_pool *pool_get(struct exec *ex, uint64_t handle)
{
	struct handle_entry *e = handle ? handle_table_get(ex->handles, handle, HANDLE_MEMPOOL) : NULL;

	return e ? e->info : NULL;
}

static void pool_journal(struct exec *ex, uint64_t handle)
{
	struct exec_pool *p = pool_get(ex, handle);
	struct pool_record r = { .version = POOL_RECORD_VERSION };

	if (!p)
		return;
	r.flags = (handle == ex->pools.default_pool ? POOL_F_DEFAULT : 0) |
		  (handle == ex->pools.current ? POOL_F_CURRENT : 0);
	r.max_size = p->max_size;
	r.usage = p->usage;
	memcpy(r.reuse, p->reuse, sizeof(r.reuse));
	r.release_threshold = p->release_threshold;
	exec_journal_object(ex, handle, HANDLE_MEMPOOL, 0, &r, sizeof(r));
}

/* A new pool; the driver's defaults: every reuse policy on, threshold 0. */
static CUresult pool_new(struct exec *ex, uint64_t max_size, uint32_t usage, uint64_t *handle)
{
	struct exec_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->max_size = max_size;
	p->usage = usage;
	for (int i = 0; i < POOL_REUSE_ATTRS; i++)
		p->reuse[i] = 1;
	if (handle_table_add(ex->handles, HANDLE_MEMPOOL, p, 0, p, handle)) {
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pool_journal(ex, *handle);
	return CUDA_SUCCESS;
}

/* The device's default pool, made at the first need. */
static CUresult pool_default(struct exec *ex, uint64_t *handle)
{
	CUresult res = CUDA_SUCCESS;

	if (!ex->pools.default_pool) {
		res = pool_new(ex, 0, 0, &ex->pools.default_pool);
		if (res == CUDA_SUCCESS)
			pool_journal(ex, ex->pools.default_pool);    /* now with its flag */
	}
	*handle = ex->pools.default_pool;
	return res;
}

static CUresult pool_current(struct exec *ex, uint64_t *handle)
{
	if (ex->pools.current) {
		*handle = ex->pools.current;
		return CUDA_SUCCESS;
	}
	return pool_default(ex, handle);
}

void exec_pool_release(struct handle_entry *e)
{
	free(e->info);
	e->info = NULL;
}

CUresult exec_mem_pool_create(struct exec *ex, const struct wire_mem_pool_create_req *req,
			      struct wire_mem_pool_create_rep *rep)
{
	CUdevice dev;

	if (req->alloc_type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	if (req->location_type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_NOT_SUPPORTED;        /* host pools are not remoted */
	if (exec_device_real(ex, req->location_id, &dev) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	if (req->handle_types != CU_MEM_HANDLE_TYPE_NONE)
		return CUDA_ERROR_NOT_SUPPORTED;        /* nothing is exported across processes */
	return pool_new(ex, req->max_size, req->usage, &rep->pool);
}

CUresult exec_mem_pool_destroy(struct exec *ex, const struct wire_mem_pool_destroy_req *req,
			       struct wire_mem_pool_destroy_rep *rep)
{
	if (!pool_get(ex, req->pool))
		return CUDA_ERROR_INVALID_VALUE;
	if (req->pool == ex->pools.default_pool)
		return CUDA_ERROR_INVALID_VALUE;
	if (req->pool == ex->pools.current) {
		/* As the driver does: the default pool becomes current again. */
		ex->pools.current = 0;
		pool_journal(ex, ex->pools.default_pool);
	}
	exec_pool_release(handle_table_get(ex->handles, req->pool, HANDLE_MEMPOOL));
	exec_object_remove(ex, req->pool);
	return CUDA_SUCCESS;
}

CUresult exec_device_get_default_mem_pool(struct exec *ex,
					  const struct wire_device_get_default_mem_pool_req *req,
					  struct wire_device_get_default_mem_pool_rep *rep)
{
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	return res == CUDA_SUCCESS ? pool_default(ex, &rep->pool) : res;
}

CUresult exec_device_get_mem_pool(struct exec *ex, const struct wire_device_get_mem_pool_req *req,
				  struct wire_device_get_mem_pool_rep *rep)
{
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	return res == CUDA_SUCCESS ? pool_current(ex, &rep->pool) : res;
}

CUresult exec_device_set_mem_pool(struct exec *ex, const struct wire_device_set_mem_pool_req *req,
				  struct wire_device_set_mem_pool_rep *rep)
{
	uint64_t old = ex->pools.current;
	CUdevice dev;
	CUresult res = exec_device_real(ex, req->device, &dev);

	if (res != CUDA_SUCCESS)
		return res;
	if (!pool_get(ex, req->pool))
		return CUDA_ERROR_INVALID_VALUE;
	ex->pools.current = req->pool == ex->pools.default_pool ? 0 : req->pool;
	pool_journal(ex, old ? old : ex->pools.default_pool);
	pool_journal(ex, req->pool);
	return CUDA_SUCCESS;
}

/* Where an attribute lives in @p; @settable says whether the driver lets a
 * caller write it (the high-water marks only take 0, a reset). */
static uint64_t *pool_attr(struct exec_pool *p, uint32_t attrib, bool *settable)
{
	*settable = true;
	switch (attrib) {
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		return &p->release_threshold;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
		return &p->reserved_high;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		return &p->used_high;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
		*settable = false;
		return &p->reserved;
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		*settable = false;
		return &p->used;
	default:
		return NULL;
	}
}

/* The three reuse policies (ints in the driver's API), or NULL. */
static int32_t *pool_reuse(struct exec_pool *p, uint32_t attrib)
{
	if (attrib < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
	    attrib > CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
		return NULL;
	return &p->reuse[attrib - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
}

CUresult exec_mem_pool_set_attribute(struct exec *ex, const struct wire_mem_pool_set_attribute_req *req,
				     struct wire_mem_pool_set_attribute_rep *rep)
{
	struct exec_pool *p = pool_get(ex, req->pool);
	uint64_t *v;
	int32_t *reuse;
	bool settable;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	reuse = pool_reuse(p, req->attrib);
	v = reuse ? NULL : pool_attr(p, req->attrib, &settable);
	if (reuse) {
		/* The shim sends the int as its 32 bits. */
		*reuse = (int32_t)(uint32_t)req->value;
	} else if (!v || !settable) {
		return CUDA_ERROR_INVALID_VALUE;
	} else if (v == &p->used_high || v == &p->reserved_high) {
		if (req->value)
			return CUDA_ERROR_INVALID_VALUE;
		*v = v == &p->used_high ? p->used : p->reserved;
		return CUDA_SUCCESS;    /* not journaled: counters start over after a restore */
	} else {
		*v = req->value;
	}
	pool_journal(ex, req->pool);
	return CUDA_SUCCESS;
}

CUresult exec_mem_pool_get_attribute(struct exec *ex, const struct wire_mem_pool_get_attribute_req *req,
				     struct wire_mem_pool_get_attribute_rep *rep)
{
	struct exec_pool *p = pool_get(ex, req->pool);
	const uint64_t *v;
	const int32_t *reuse;
	bool settable;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	reuse = pool_reuse(p, req->attrib);
	v = reuse ? NULL : pool_attr(p, req->attrib, &settable);
	if (!reuse && !v)
		return CUDA_ERROR_INVALID_VALUE;
	rep->value = reuse ? (uint32_t)*reuse : *v;
	return CUDA_SUCCESS;
}

CUresult exec_mem_pool_trim_to(struct exec *ex, const struct wire_mem_pool_trim_to_req *req,
			       struct wire_mem_pool_trim_to_rep *rep)
{
	/* Nothing freed is kept: there is nothing to trim. */
	return pool_get(ex, req->pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult exec_mem_pool_get_access(struct exec *ex, const struct wire_mem_pool_get_access_req *req,
				  struct wire_mem_pool_get_access_rep *rep)
{
	CUdevice dev;

	if (!pool_get(ex, req->pool) || req->location_type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (exec_device_real(ex, req->location_id, &dev) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	/* The session's one device owns every pool, and its owner may always use it. */
	rep->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return CUDA_SUCCESS;
}

/* ---- allocations ---- */

static struct exec_pool_alloc *pool_alloc_find(struct exec *ex, uint64_t addr)
{
	for (unsigned i = 0; i < ex->pools.alloc_count; i++)
		if (ex->pools.allocs[i].addr == addr)
			return &ex->pools.allocs[i];
	return NULL;
}

static int pool_alloc_add(struct exec *ex, uint64_t addr, uint64_t size, uint64_t mapped,
			  uint64_t pool)
{
	if (ex->pools.alloc_count == ex->pools.alloc_cap) {
		unsigned cap = ex->pools.alloc_cap ? 2 * ex->pools.alloc_cap : 16;
		struct exec_pool_alloc *n = realloc(ex->pools.allocs, cap * sizeof(*n));

		if (!n)
			return -1;
		ex->pools.allocs = n;
		ex->pools.alloc_cap = cap;
	}
	ex->pools.allocs[ex->pools.alloc_count++] = (struct exec_pool_alloc){ addr, size, mapped, pool };
	return 0;
}

static void pool_count(struct exec_pool *p, const struct exec_pool_alloc *a, bool add)
{
	if (!p)
		return;
	if (add) {
		p->used += a->size;
		p->reserved += a->mapped;
	} else {
		p->used -= a->size;
		p->reserved -= a->mapped;
	}
	if (p->used > p->used_high)
		p->used_high = p->used;
	if (p->reserved > p->reserved_high)
		p->reserved_high = p->reserved;
}

CUresult exec_mem_alloc_async(struct exec *ex, const struct wire_mem_alloc_async_req *req,
			      struct wire_mem_alloc_async_rep *rep)
{
	struct exec_pool_alloc *a;
	struct exec_pool *p;
	uint64_t pool = req->pool, addr = 0, before;
	CUstream s;
	CUresult res;

	bool captured;

	if (req->bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_stream_real(ex, req->stream, &s);
	if (res != CUDA_SUCCESS)
		return res;
	/* While the stream captures, an allocation node of the graph. */
	res = exec_graph_capture_alloc(ex, s, req->bytes, &captured, &rep->address);
	if (res != CUDA_SUCCESS || captured)
		return res;
	if (!pool) {
		res = pool_current(ex, &pool);
		if (res != CUDA_SUCCESS)
			return res;
	}
	p = pool_get(ex, pool);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->max_size && (req->bytes > p->max_size || p->used > p->max_size - req->bytes))
		return CUDA_ERROR_OUT_OF_MEMORY;
	before = exec_mem_used(ex);
	res = exec_mem_map(ex, req->bytes, &addr);
	if (res != CUDA_SUCCESS)
		return res;
	if (pool_alloc_add(ex, addr, req->bytes, exec_mem_used(ex) - before, pool)) {
		exec_mem_unmap(ex, addr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a = &ex->pools.allocs[ex->pools.alloc_count - 1];
	pool_count(p, a, true);
	exec_journal_region_owned(ex, addr, req->bytes, pool);
	rep->address = addr;
	return CUDA_SUCCESS;
}

bool exec_pool_alloc_forget(struct exec *ex, uint64_t addr)
{
	struct exec_pool_alloc *a = pool_alloc_find(ex, addr);

	if (!a)
		return false;
	pool_count(pool_get(ex, a->pool), a, false);
	*a = ex->pools.allocs[--ex->pools.alloc_count];
	return true;
}

CUresult exec_mem_free_async(struct exec *ex, const struct wire_mem_free_async_req *req,
			     struct wire_mem_free_async_rep *rep)
{
	bool captured;
	CUstream s;
	CUresult res;

	if (!pool_alloc_find(ex, req->address) && !exec_graph_alloc_is(ex, req->address))
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_stream_real(ex, req->stream, &s);
	if (res != CUDA_SUCCESS)
		return res;
	/* A graph allocation: a free node while the stream captures, else
	 * freed in stream order like cuMemFree's (its memory stays while a
	 * graph holds its node). */
	res = exec_graph_capture_free(ex, s, req->address, &captured);
	if (res != CUDA_SUCCESS || captured)
		return res;
	if (exec_graph_alloc_free(ex, req->address))
		return CUDA_SUCCESS;
	/* The block may be unmapped only once the stream's earlier work is done. */
	res = ex->be->cuStreamSynchronize(s);
	if (res != CUDA_SUCCESS)
		return res;
	exec_pool_alloc_forget(ex, req->address);
	return exec_mem_unmap(ex, req->address);
}

void exec_pool_reset(struct exec *ex)
{
	while (ex->pools.alloc_count)
		exec_pool_alloc_forget(ex, ex->pools.allocs[0].addr);
}

/* ---- restore ---- */

CUresult exec_pool_restore(struct exec *ex, uint64_t handle, const void *args, uint32_t len)
{
	struct pool_record r;
	struct exec_pool *p;

	if (len != sizeof(r))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&r, args, sizeof(r));
	if (r.version != POOL_RECORD_VERSION)
		return CUDA_ERROR_INVALID_VALUE;
	p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->max_size = r.max_size;
	p->usage = r.usage;
	memcpy(p->reuse, r.reuse, sizeof(p->reuse));
	p->release_threshold = r.release_threshold;
	if (handle_table_add_at(ex->handles, handle, p, 0, p)) {
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (r.flags & POOL_F_DEFAULT)
		ex->pools.default_pool = handle;
	if (r.flags & POOL_F_CURRENT)
		ex->pools.current = handle == ex->pools.default_pool ? 0 : handle;
	return CUDA_SUCCESS;
}

int exec_pool_restore_alloc(struct exec *ex, uint64_t addr, uint64_t size, uint64_t mapped,
			    uint64_t pool)
{
	return pool_alloc_add(ex, addr, size, mapped, pool);
}

/* After objects and regions: each restored pool counts its allocations
 * again; its high-water marks start over from there. */
void exec_pool_restore_finish(struct exec *ex)
{
	for (unsigned i = 0; i < ex->pools.alloc_count; i++)
		pool_count(pool_get(ex, ex->pools.allocs[i].pool), &ex->pools.allocs[i], true);
}
