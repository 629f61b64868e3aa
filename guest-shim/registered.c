/* Host memory registered as mapped (cuMemHostRegister with DEVICEMAP): a
 * device copy in the session's arena, kept coherent with the application's
 * own pages by comparison (docs/wire-protocol.md, "Mapped pinned memory").
 *
 * The pages are the application's (malloc'd, mmap'd, shared with whatever
 * else lies in the same pages), so the shim cannot protect them as it does
 * a managed mirror: it keeps a copy of what both sides last agreed on, the
 * shadow, and
 *   - pushes, before device work that may read the device copy (the same
 *     points as managed memory: launches, graph launches, copies and memsets
 *     on the copy), every block where the host's bytes differ from the
 *     shadow;
 *   - pulls, at synchronisation (context, stream and event synchronisation,
 *     queries that report completion, synchronous copies) after device work
 *     that may have written it, every byte where the device copy differs
 *     from the shadow: the host's own writes since the last push are kept,
 *     the device's land.
 * A byte both sides wrote between two coherence points was a race natively
 * too; the device's value wins. Which stream a kernel ran on is not known
 * here, so pulls go on at every synchronisation until a context-wide one
 * has seen all device work end.
 *
 * Locking: registered_lock guards the list; round trips are made under it
 * (never under the shim's connection lock), and the application's pages are
 * read and written with plain memcpy, outside any fault handling.
 */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Bytes compared and pushed as one piece. */
#define REGISTERED_BLOCK 4096u

struct registered_range {
	uintptr_t host;                 /* the application's bytes */
	uint64_t len;
	uint64_t dev;                   /* the device copy, arena memory */
	uint8_t *shadow;                /* what both sides last agreed on */
	struct registered_range *next;
};

static pthread_mutex_t registered_lock = PTHREAD_MUTEX_INITIALIZER;
static struct registered_range *registered_ranges;
/* Device work that may have written a device copy was sent since the last
 * context-wide synchronisation. */
static bool registered_device_wrote;

static CUresult dev_push(uint64_t dev, const uint8_t *src, uint64_t n)
{
	CUresult res = CUDA_SUCCESS;

	while (n && res == CUDA_SUCCESS) {
		uint64_t piece = n < WIRE_COPY_PIECE ? n : WIRE_COPY_PIECE;
		struct wire_memcpy_htod_req req = { .dst = dev, .data = { .ptr = src, .len = (uint32_t)piece } };
		struct wire_memcpy_htod_rep rep;

		res = rpc_memcpy_htod(&req, &rep);
		dev += piece;
		src += piece;
		n -= piece;
	}
	return res;
}

/* Whether the host changed the block of @r at @off since the shadow took
 * it; *@len gets the block's length. */
static bool block_changed(const struct registered_range *r, uint64_t off, uint64_t *len)
{
	*len = r->len - off < REGISTERED_BLOCK ? r->len - off : REGISTERED_BLOCK;
	return memcmp((const uint8_t *)r->host + off, r->shadow + off, *len) != 0;
}

/* Push the blocks of @r the host changed; the shadow takes the bytes pushed
 * (copied out of the application's pages first, so a host write racing
 * with the push is a difference again at the next point). */
static CUresult range_push_locked(struct registered_range *r)
{
	const uint8_t *host = (const uint8_t *)r->host;
	uint64_t off = 0, len;

	while (off < r->len) {
		uint64_t start, end;

		while (off < r->len && !block_changed(r, off, &len))
			off += len;
		start = off;
		while (off < r->len && block_changed(r, off, &len))
			off += len;
		end = off;
		if (start == end)
			break;
		memcpy(r->shadow + start, host + start, end - start);
		if (dev_push(r->dev + start, r->shadow + start, end - start) != CUDA_SUCCESS)
			return CUDA_ERROR_UNKNOWN;
	}
	return CUDA_SUCCESS;
}

/* Bring the device's writes to @r into the application's pages. */
static CUresult range_pull_locked(struct registered_range *r)
{
	uint8_t *host = (uint8_t *)r->host;

	for (uint64_t off = 0; off < r->len;) {
		uint64_t piece = r->len - off < WIRE_COPY_PIECE ? r->len - off : WIRE_COPY_PIECE;
		struct wire_memcpy_dtoh_req req = { .src = r->dev + off, .bytes = piece };
		struct wire_memcpy_dtoh_rep rep;
		CUresult res = rpc_memcpy_dtoh(&req, &rep);

		if (res == CUDA_SUCCESS && rep.data.len != piece)
			res = CUDA_ERROR_UNKNOWN;
		if (res != CUDA_SUCCESS)
			return res;
		for (uint64_t i = 0; i < piece; i++) {
			if (rep.data.ptr[i] != r->shadow[off + i]) {
				r->shadow[off + i] = rep.data.ptr[i];
				host[off + i] = rep.data.ptr[i];
			}
		}
		off += piece;
	}
	return CUDA_SUCCESS;
}

CUresult registered_map(uintptr_t host, uint64_t len, uint64_t *dev)
{
	struct wire_mem_alloc_req req = { .bytes = len };
	struct wire_mem_alloc_rep rep;
	struct wire_mem_free_req freq;
	struct wire_mem_free_rep frep;
	struct registered_range *r = calloc(1, sizeof(*r));
	CUresult res;

	if (!r || !(r->shadow = malloc(len))) {
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	res = rpc_mem_alloc(&req, &rep);
	if (res != CUDA_SUCCESS)
		goto out_free;
	r->host = host;
	r->len = len;
	r->dev = rep.address;
	memcpy(r->shadow, (const void *)host, len);
	pthread_mutex_lock(&registered_lock);
	res = dev_push(r->dev, r->shadow, len);
	if (res == CUDA_SUCCESS) {
		r->next = registered_ranges;
		__atomic_store_n(&registered_ranges, r, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&registered_lock);
	if (res == CUDA_SUCCESS) {
		*dev = r->dev;
		return CUDA_SUCCESS;
	}
	freq.address = rep.address;
	rpc_mem_free(&freq, &frep);
out_free:
	free(r->shadow);
	free(r);
	return res;
}

CUresult registered_unmap(uintptr_t host)
{
	struct wire_mem_free_req req;
	struct wire_mem_free_rep rep;
	struct registered_range **pp, *r = NULL;
	CUresult res = CUDA_SUCCESS;

	pthread_mutex_lock(&registered_lock);
	for (pp = &registered_ranges; *pp; pp = &(*pp)->next) {
		if ((*pp)->host == host) {
			r = *pp;
			*pp = r->next;
			break;
		}
	}
	/* What the device wrote is the application's once it unregisters. */
	if (r && registered_device_wrote)
		res = range_pull_locked(r);
	pthread_mutex_unlock(&registered_lock);
	if (!r)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	if (res != CUDA_SUCCESS)
		pr_err("fetching the device's writes to registered memory at %#llx failed: %d",
		       (unsigned long long)host, res);
	req.address = r->dev;
	if (rpc_mem_free(&req, &rep) != CUDA_SUCCESS)
		pr_warn("freeing the device copy of registered memory at %#llx failed",
			(unsigned long long)host);
	free(r->shadow);
	free(r);
	return res;
}

bool registered_contains(uint64_t dev)
{
	bool found = false;

	if (!__atomic_load_n(&registered_ranges, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&registered_lock);
	for (struct registered_range *r = registered_ranges; r && !found; r = r->next)
		found = dev >= r->dev && dev - r->dev < r->len;
	pthread_mutex_unlock(&registered_lock);
	return found;
}

CUresult registered_device_access(bool writes, uint64_t stream)
{
	CUresult res = CUDA_SUCCESS;

	if (!__atomic_load_n(&registered_ranges, __ATOMIC_ACQUIRE))
		return CUDA_SUCCESS;
	if (capture_active() && capture_tracked(stream))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&registered_lock);
	for (struct registered_range *r = registered_ranges; r && res == CUDA_SUCCESS; r = r->next)
		res = range_push_locked(r);
	if (writes)
		registered_device_wrote = true;
	pthread_mutex_unlock(&registered_lock);
	if (res != CUDA_SUCCESS)
		pr_err("pushing the host's writes to registered memory failed: %d", res);
	return res;
}

CUresult registered_synchronized(bool all_work)
{
	CUresult res = CUDA_SUCCESS;

	if (!__atomic_load_n(&registered_ranges, __ATOMIC_ACQUIRE))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&registered_lock);
	if (registered_device_wrote) {
		for (struct registered_range *r = registered_ranges; r && res == CUDA_SUCCESS; r = r->next)
			res = range_pull_locked(r);
		if (res == CUDA_SUCCESS && all_work)
			registered_device_wrote = false;
	}
	pthread_mutex_unlock(&registered_lock);
	if (res != CUDA_SUCCESS)
		pr_err("fetching the device's writes to registered memory failed: %d", res);
	return res;
}

void registered_session_restored(void)
{
	/* The restored device copies may hold what the host has not seen. */
	__atomic_store_n(&registered_device_wrote, true, __ATOMIC_RELEASE);
}

void registered_fork_lock(void)
{
	pthread_mutex_lock(&registered_lock);
}

void registered_fork_unlock(void)
{
	pthread_mutex_unlock(&registered_lock);
}

void registered_reset(void)
{
	/* The child of a fork (registered_lock held): the device copies are
	 * the parent's session's; the child's memory is its own copy. */
	while (registered_ranges) {
		struct registered_range *r = registered_ranges;

		registered_ranges = r->next;
		free(r->shadow);
		free(r);
	}
	registered_device_wrote = false;
}
