/* Managed memory: the guest's host mirror of device memory, kept coherent by
 * page faults (docs/wire-protocol.md, "Managed memory").
 *
 * A managed allocation is device memory of the session's arena (the worker
 * zeroes it); a __managed__ variable is the driver's own. Either way the shim
 * maps host memory at the SAME virtual address, so the application's pointer
 * works on both sides. The mirror is a memfd mapped twice: the application's
 * view at the device address, whose protection tracks each page's state, and
 * a private read-write view the shim fills and reads without ever faulting.
 *
 * Page states (one byte a page):
 *   INVALID  PROT_NONE   the device copy is newer; a host access faults and
 *                        fetches a chunk of INVALID pages (memcpy_dtoh);
 *   CLEAN    PROT_READ   host and device agree; a write faults and makes the
 *                        chunk's CLEAN pages DIRTY;
 *   DIRTY    read-write  the host copy is newer; pushed (memcpy_htod) before
 *                        the next device work.
 * Coherence points: before a launch, graph launch, copy or memset that may
 * reach managed memory (managed_device_access), DIRTY pages are pushed; when
 * that work may write managed memory (launches, graph launches, copies and
 * memsets into managed memory) every page becomes INVALID. The device is
 * never told of host accesses while it works: the host must synchronise
 * first, as on a GPU without concurrent managed access (the attribute reads
 * 0 through tern).
 *
 * The fault handler (SIGSEGV, installed at the first managed mirror; faults
 * elsewhere go to the previous handler) relies on:
 *   - the fault being synchronous: the faulting thread was running the
 *     application's code, so it holds neither managed_lock nor the shim's
 *     connection lock. The shim itself never touches the application's view
 *     while holding either: copies whose host side is managed memory are sent
 *     as device-to-device copies, and the shim's own reads and writes go
 *     through the private view;
 *   - pthread mutexes, malloc and the RPC being usable from the handler,
 *     which holds for a synchronous fault outside malloc and the shim (not
 *     async-signal-safe in POSIX terms: a fault inside a libc function that
 *     holds a lock the RPC needs, such as malloc's, would deadlock; libc's
 *     string and memory functions hold none);
 *   - errno and the thread's reply buffer being saved and restored around
 *     the RPC (rpc_reply_stash); the shim's thread-local variables may be
 *     allocated by glibc at their first use in a thread, with malloc, which
 *     is safe here for the same reason.
 * A system call given a PROT_NONE page (write(2) from managed memory the
 * host has not touched since the last device work) fails with EFAULT
 * instead of faulting: docs/limits.md.
 */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

enum managed_page {
	PAGE_INVALID = 0,
	PAGE_CLEAN = 1,
	PAGE_DIRTY = 2,
};

/* Pages fetched or made writable per fault, at most. */
#define MANAGED_CHUNK_BYTES (64u << 10)
/* Device pieces of a mirror: the bytes that exist on the device (a page of a
 * __managed__ variable's mirror may hold other bytes, which stay zero). */
#define MANAGED_SEGMENTS_MAX 64u

struct managed_segment {
	uint64_t addr, size;
	uint64_t owner;                 /* a variable's module or library, 0 for an allocation */
};

struct managed_range {
	uint64_t base, len;             /* page aligned: the application's view */
	uint64_t alloc_bytes;           /* what cuMemAllocManaged asked; 0 for variables */
	unsigned flags;                 /* CU_MEM_ATTACH_* */
	/* Mapped pinned memory (cuMemHostAlloc with DEVICEMAP over a transport
	 * that cannot share memory): mirrored as an allocation is, but host
	 * memory to the application, never managed memory. */
	bool pinned;
	int memfd;
	uint8_t *shadow;                /* the shim's read-write view */
	uint8_t *state;                 /* enum managed_page, one a page */
	uint64_t resident, dirty;       /* pages not INVALID, pages DIRTY */
	struct managed_segment seg[MANAGED_SEGMENTS_MAX];
	unsigned nseg;
	/* cuMemAdvise / cuMemPrefetchAsync, for cuMemRangeGetAttribute(s):
	 * one record for the whole range. */
	bool read_mostly;
	CUmemLocation preferred, last_prefetch;
	bool accessed_by_device, accessed_by_host;
	struct managed_range *next;
};

static pthread_mutex_t managed_lock = PTHREAD_MUTEX_INITIALIZER;
static struct managed_range *managed_ranges;
static struct sigaction managed_old_segv;
static bool managed_handler_installed;
static bool managed_stale;              /* the session was restored: refetch */
static size_t managed_page;

static size_t page_size(void)
{
	if (!managed_page) {
		long p = sysconf(_SC_PAGESIZE);

		managed_page = p > 0 ? (size_t)p : 4096;
	}
	return managed_page;
}

static struct managed_range *range_find_locked(uint64_t addr)
{
	for (struct managed_range *r = managed_ranges; r; r = r->next)
		if (addr >= r->base && addr - r->base < r->len)
			return r;
	return NULL;
}

/* Copy between the device and the shadow for pages [first, first+n) of @r,
 * only where device bytes exist. @push: host to device. A thread with no
 * current context (managed memory needs none) names a primary context. */
static CUresult range_move_locked(struct managed_range *r, uint64_t first, uint64_t n, bool push)
{
	uint64_t lo = r->base + first * page_size(), hi = lo + n * page_size();
	uint64_t stand_in = rpc_ctx_stand_in(ctx_primary_any());
	CUresult res = CUDA_SUCCESS;

	for (unsigned i = 0; i < r->nseg && res == CUDA_SUCCESS; i++) {
		uint64_t a = r->seg[i].addr > lo ? r->seg[i].addr : lo;
		uint64_t b = r->seg[i].addr + r->seg[i].size < hi ? r->seg[i].addr + r->seg[i].size : hi;

		while (a < b && res == CUDA_SUCCESS) {
			uint64_t piece = b - a < WIRE_COPY_PIECE ? b - a : WIRE_COPY_PIECE;
			uint8_t *host = r->shadow + (a - r->base);

			if (push) {
				struct wire_memcpy_htod_req req = {
					.dst = a, .data = { .ptr = host, .len = (uint32_t)piece },
				};
				struct wire_memcpy_htod_rep rep;

				res = rpc_memcpy_htod(&req, &rep);
			} else {
				struct wire_memcpy_dtoh_req req = { .src = a, .bytes = piece };
				struct wire_memcpy_dtoh_rep rep;

				res = rpc_memcpy_dtoh(&req, &rep);
				if (res == CUDA_SUCCESS && rep.data.len != piece)
					res = CUDA_ERROR_UNKNOWN;
				if (res == CUDA_SUCCESS)
					memcpy(host, rep.data.ptr, piece);
			}
			a += piece;
		}
	}
	rpc_ctx_stand_in(stand_in);
	return res;
}

/* A failure (ENOMEM: the process's map count, vm.max_map_count) leaves the
 * pages as they were: logged, as the mirror may then be stale. */
static int range_protect_locked(struct managed_range *r, uint64_t first, uint64_t n, int prot)
{
	int ret = mprotect((void *)(uintptr_t)(r->base + first * page_size()), n * page_size(), prot);

	if (ret)
		pr_err("protecting managed memory at %#llx (+%llu) failed: %s",
		       (unsigned long long)(r->base + first * page_size()),
		       (unsigned long long)(n * page_size()), strerror(errno));
	return ret;
}

/* Set pages [first, first+n) to @st, keeping the counters. */
static void range_state_locked(struct managed_range *r, uint64_t first, uint64_t n, uint8_t st)
{
	for (uint64_t i = first; i < first + n; i++) {
		r->resident += (st != PAGE_INVALID) - (r->state[i] != PAGE_INVALID);
		r->dirty += (st == PAGE_DIRTY) - (r->state[i] == PAGE_DIRTY);
		r->state[i] = st;
	}
}

/* Push every DIRTY page; runs are joined across CLEAN pages (equal on both
 * sides) but never across INVALID ones (the host copy is stale there). */
static CUresult range_push_locked(struct managed_range *r)
{
	uint64_t pages = r->len / page_size(), i = 0;

	while (r->dirty && i < pages) {
		uint64_t start, end, last;

		while (i < pages && r->state[i] != PAGE_DIRTY)
			i++;
		if (i == pages)
			break;
		start = last = i;
		for (end = i; end < pages && r->state[end] != PAGE_INVALID; end++)
			if (r->state[end] == PAGE_DIRTY)
				last = end;
		/* Read-only first: a write racing with the push faults and
		 * waits for us, then marks its page dirty again. */
		if (range_protect_locked(r, start, last + 1 - start, PROT_READ))
			return CUDA_ERROR_UNKNOWN;
		range_state_locked(r, start, last + 1 - start, PAGE_CLEAN);
		if (range_move_locked(r, start, last + 1 - start, true) != CUDA_SUCCESS) {
			/* Still the host's newest bytes: keep them dirty. */
			range_protect_locked(r, start, last + 1 - start, PROT_READ | PROT_WRITE);
			range_state_locked(r, start, last + 1 - start, PAGE_DIRTY);
			return CUDA_ERROR_UNKNOWN;
		}
		i = last + 1;
	}
	return CUDA_SUCCESS;
}

static void range_invalidate_locked(struct managed_range *r, bool keep_dirty)
{
	uint64_t pages = r->len / page_size();

	if (!r->resident)
		return;
	if (!keep_dirty || !r->dirty) {
		range_protect_locked(r, 0, pages, PROT_NONE);
		range_state_locked(r, 0, pages, PAGE_INVALID);
		return;
	}
	for (uint64_t i = 0; i < pages;) {
		uint64_t end = i;

		while (end < pages && r->state[end] == PAGE_CLEAN)
			end++;
		if (end > i) {
			range_protect_locked(r, i, end - i, PROT_NONE);
			range_state_locked(r, i, end - i, PAGE_INVALID);
			i = end;
		} else {
			i++;
		}
	}
}

static void stale_check_locked(void)
{
	if (!__atomic_exchange_n(&managed_stale, false, __ATOMIC_ACQ_REL))
		return;
	/* A restored worker replayed what we sent, so CLEAN pages should still
	 * match; refetching them costs little and trusts nothing. DIRTY pages
	 * are the host's newest bytes and are pushed as usual. */
	for (struct managed_range *r = managed_ranges; r; r = r->next)
		range_invalidate_locked(r, true);
}

CUresult managed_device_access(bool writes, uint64_t stream)
{
	/* Registered mapped memory shares managed memory's coherence points. */
	CUresult res = registered_device_access(writes, stream);

	if (res != CUDA_SUCCESS || !__atomic_load_n(&managed_ranges, __ATOMIC_ACQUIRE))
		return res;
	if (capture_active() && capture_tracked(stream))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&managed_lock);
	stale_check_locked();
	for (struct managed_range *r = managed_ranges; r && res == CUDA_SUCCESS; r = r->next) {
		if (r->dirty)
			res = range_push_locked(r);
		if (res == CUDA_SUCCESS && writes)
			range_invalidate_locked(r, false);
	}
	pthread_mutex_unlock(&managed_lock);
	if (res != CUDA_SUCCESS)
		pr_err("pushing the host's writes to managed memory failed: %d", res);
	return res;
}

void managed_session_restored(void)
{
	__atomic_store_n(&managed_stale, true, __ATOMIC_RELEASE);
}

bool managed_contains(uint64_t addr)
{
	bool found;

	if (!__atomic_load_n(&managed_ranges, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&managed_lock);
	found = range_find_locked(addr) != NULL;
	pthread_mutex_unlock(&managed_lock);
	return found;
}

bool managed_info(uint64_t addr, uint64_t *base, uint64_t *bytes)
{
	struct managed_range *r;
	bool found = false;

	if (!__atomic_load_n(&managed_ranges, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&managed_lock);
	r = range_find_locked(addr);
	if (r && r->pinned)
		r = NULL;       /* host memory to the application */
	for (unsigned i = 0; r && i < r->nseg && !found; i++) {
		if (addr >= r->seg[i].addr && addr - r->seg[i].addr < r->seg[i].size) {
			*base = r->alloc_bytes ? r->base : r->seg[i].addr;
			*bytes = r->alloc_bytes ? r->alloc_bytes : r->seg[i].size;
			found = true;
		}
	}
	pthread_mutex_unlock(&managed_lock);
	return found;
}

/* The fault handler's work: 0 when the access can be retried. */
static int managed_fault(uint64_t addr)
{
	size_t pg = page_size();
	uint64_t chunk = MANAGED_CHUNK_BYTES > pg ? MANAGED_CHUNK_BYTES / pg : 1, idx, c0, c1, lo, hi;
	struct managed_range *r;
	int ret = -1;

	pthread_mutex_lock(&managed_lock);
	r = range_find_locked(addr);
	if (!r)
		goto out_unlock;
	idx = (addr - r->base) / pg;
	c0 = idx - idx % chunk;
	c1 = c0 + chunk < r->len / pg ? c0 + chunk : r->len / pg;
	switch (r->state[idx]) {
	case PAGE_INVALID: {
		struct rpc_reply_stash stash;
		CUresult res;

		for (lo = idx; lo > c0 && r->state[lo - 1] == PAGE_INVALID; lo--)
			;
		for (hi = idx + 1; hi < c1 && r->state[hi] == PAGE_INVALID; hi++)
			;
		if (hostfn_in_callback()) {
			/* Its stream waits for it: a fetch would wait for the stream. */
			pr_err("a host function touched managed memory at %#llx that the host does not hold "
			       "(docs/limits.md)", (unsigned long long)addr);
			goto out_unlock;
		}
		rpc_reply_stash(&stash);
		res = range_move_locked(r, lo, hi - lo, false);
		rpc_reply_unstash(&stash);
		if (res != CUDA_SUCCESS) {
			char msg[200];
			int n = snprintf(msg, sizeof(msg), "tern: the application touched managed memory at "
					 "%#llx, whose contents are on the device, and fetching them failed "
					 "with CUDA error %d: it cannot go on\n", (unsigned long long)addr, res);

			pr_err("fetching managed memory at %#llx from the device failed: %d",
			       (unsigned long long)addr, res);
			/* No call returns an error for a plain load: say so where the
			 * user looks before the access kills the process. */
			if (n > 0 && write(STDERR_FILENO, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1) < 0)
				n = 0;
			goto out_unlock;
		}
		if (range_protect_locked(r, lo, hi - lo, PROT_READ))
			goto out_unlock;
		range_state_locked(r, lo, hi - lo, PAGE_CLEAN);
		break;
	}
	case PAGE_CLEAN:
		for (lo = idx; lo > c0 && r->state[lo - 1] == PAGE_CLEAN; lo--)
			;
		for (hi = idx + 1; hi < c1 && r->state[hi] == PAGE_CLEAN; hi++)
			;
		if (range_protect_locked(r, lo, hi - lo, PROT_READ | PROT_WRITE))
			goto out_unlock;
		range_state_locked(r, lo, hi - lo, PAGE_DIRTY);
		break;
	default:
		break;          /* another thread got here first */
	}
	ret = 0;
out_unlock:
	pthread_mutex_unlock(&managed_lock);
	return ret;
}

static void managed_sigsegv(int sig, siginfo_t *si, void *uctx)
{
	int saved = errno;

	if (si->si_code == SEGV_ACCERR && managed_fault((uint64_t)(uintptr_t)si->si_addr) == 0) {
		errno = saved;
		return;
	}
	errno = saved;
	/* Not ours: what the application (or the system) would have done. */
	if (managed_old_segv.sa_flags & SA_SIGINFO) {
		managed_old_segv.sa_sigaction(sig, si, uctx);
	} else if (managed_old_segv.sa_handler != SIG_DFL && managed_old_segv.sa_handler != SIG_IGN) {
		managed_old_segv.sa_handler(sig);
	} else {
		/* Returning re-runs the access, which now kills as it would have. */
		signal(SIGSEGV, SIG_DFL);
	}
}

static int handler_install_locked(void)
{
	struct sigaction sa;

	if (managed_handler_installed)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = managed_sigsegv;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, &managed_old_segv))
		return -errno;
	managed_handler_installed = true;
	return 0;
}

static void range_destroy(struct managed_range *r)
{
	if (r->shadow)
		munmap(r->shadow, r->len);
	munmap((void *)(uintptr_t)r->base, r->len);
	if (r->memfd >= 0)
		close(r->memfd);
	free(r->state);
	free(r);
}

/* A mirror of [base, base+len) (page aligned) at the same address. @clean:
 * the device bytes are zero, as the fresh mirror is. */
static int range_create(uint64_t base, uint64_t len, bool clean, struct managed_range **out)
{
	struct managed_range *r = calloc(1, sizeof(*r));
	void *view;

	if (!r)
		return -ENOMEM;
	r->base = base;
	r->len = len;
	r->preferred.type = CU_MEM_LOCATION_TYPE_INVALID;
	r->last_prefetch.type = CU_MEM_LOCATION_TYPE_INVALID;
	r->memfd = shm_memfd_create("tern-managed", len);
	r->state = calloc(len / page_size(), 1);
	if (r->memfd < 0 || !r->state)
		goto out_free;
	r->shadow = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->memfd, 0);
	if (r->shadow == MAP_FAILED) {
		r->shadow = NULL;
		goto out_free;
	}
	view = mmap((void *)(uintptr_t)base, len, clean ? PROT_READ : PROT_NONE,
		    MAP_SHARED | MAP_FIXED_NOREPLACE, r->memfd, 0);
	if (view == MAP_FAILED || view != (void *)(uintptr_t)base) {
		if (view != MAP_FAILED)
			munmap(view, len);
		pr_err("cannot map managed memory's host side at %#llx (+%llu): %s",
		       (unsigned long long)base, (unsigned long long)len,
		       view == MAP_FAILED ? strerror(errno) : "the address is taken");
		munmap(r->shadow, len);
		close(r->memfd);
		free(r->state);
		free(r);
		return -EADDRINUSE;
	}
	if (clean)
		range_state_locked(r, 0, len / page_size(), PAGE_CLEAN);
	*out = r;
	return 0;
out_free:
	if (r->memfd >= 0)
		close(r->memfd);
	free(r->state);
	free(r);
	return -ENOMEM;
}

static void range_link_locked(struct managed_range *r)
{
	r->next = managed_ranges;
	__atomic_store_n(&managed_ranges, r, __ATOMIC_RELEASE);
}

static CUresult alloc_mirror(uint64_t addr, uint64_t bytes, unsigned flags, bool pinned)
{
	uint64_t len = (bytes + page_size() - 1) & ~(uint64_t)(page_size() - 1);
	struct managed_range *r;
	int ret;

	pthread_mutex_lock(&managed_lock);
	ret = handler_install_locked();
	if (!ret)
		ret = range_create(addr, len, true, &r);
	if (!ret) {
		r->alloc_bytes = bytes;
		r->flags = flags;
		r->pinned = pinned;
		/* The device range is what was asked: the worker checks copies
		 * against it, not against the page-rounded mirror. */
		r->seg[0] = (struct managed_segment){ addr, bytes, 0 };
		r->nseg = 1;
		range_link_locked(r);
	}
	pthread_mutex_unlock(&managed_lock);
	return ret ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

CUresult managed_alloc_mirror(uint64_t addr, uint64_t bytes, unsigned flags)
{
	return alloc_mirror(addr, bytes, flags, false);
}

CUresult managed_pinned_mirror(uint64_t addr, uint64_t bytes)
{
	return alloc_mirror(addr, bytes, CU_MEM_ATTACH_GLOBAL, true);
}

/* A __managed__ variable at [addr, addr+bytes): its pages get a mirror,
 * shared with variables that lie in the same pages. */
/* The variables' mirror that holds [@lo, @hi) whole, with segment @seg. */
static bool variable_known_locked(uint64_t lo, uint64_t hi, struct managed_segment seg)
{
	struct managed_range *r = range_find_locked(lo);

	for (unsigned i = 0; r && lo >= r->base && hi <= r->base + r->len && i < r->nseg; i++)
		if (r->seg[i].addr == seg.addr && r->seg[i].size == seg.size)
			return true;
	return false;
}

CUresult managed_variable_mirror(uint64_t addr, uint64_t bytes, uint64_t library)
{
	uint64_t pg = page_size(), lo = addr & ~(pg - 1), hi = (addr + bytes + pg - 1) & ~(pg - 1);
	struct managed_segment segs[MANAGED_SEGMENTS_MAX], seg = { addr, bytes, library };
	struct managed_range *merged = NULL, kept = { 0 };
	CUresult res = CUDA_SUCCESS;
	unsigned n = 0, found = 0;
	bool again = true;

	if (!bytes || addr + bytes < addr)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&managed_lock);
	if (handler_install_locked())
		res = CUDA_ERROR_OPERATING_SYSTEM;
	if (res != CUDA_SUCCESS || variable_known_locked(lo, hi, seg))
		goto out;
	/* A variable lies in one mirror, as prefetches and advice want: the
	 * mirrors its pages touch (the driver packs several modules' variables
	 * into a page) become one. Their host writes go to the device first;
	 * the new mirror fetches every page again when touched. */
	while (again && res == CUDA_SUCCESS) {
		again = false;
		for (struct managed_range **pp = &managed_ranges; *pp;) {
			struct managed_range *r = *pp;

			if (r->alloc_bytes || r->base >= hi || r->base + r->len <= lo) {
				pp = &r->next;
				continue;
			}
			if (n + r->nseg >= MANAGED_SEGMENTS_MAX) {
				res = CUDA_ERROR_OUT_OF_MEMORY;
				break;
			}
			if (r->dirty && range_push_locked(r) != CUDA_SUCCESS) {
				res = CUDA_ERROR_UNKNOWN;
				break;
			}
			for (unsigned i = 0; i < r->nseg; i++)
				segs[n++] = r->seg[i];
			if (!found++)
				kept = *r;      /* its advice and prefetch record carry over */
			again |= r->base < lo || r->base + r->len > hi;
			lo = r->base < lo ? r->base : lo;
			hi = r->base + r->len > hi ? r->base + r->len : hi;
			*pp = r->next;
			range_destroy(r);
		}
	}
	if (res == CUDA_SUCCESS && range_create(lo, hi - lo, false, &merged))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	if (res == CUDA_SUCCESS) {
		bool have = false;

		for (unsigned i = 0; i < n; i++)
			have |= segs[i].addr == seg.addr && segs[i].size == seg.size;
		if (!have)
			segs[n++] = seg;
		memcpy(merged->seg, segs, n * sizeof(segs[0]));
		merged->nseg = n;
		if (found) {
			merged->preferred = kept.preferred;
			merged->last_prefetch = kept.last_prefetch;
			merged->read_mostly = kept.read_mostly;
			merged->accessed_by_device = kept.accessed_by_device;
			merged->accessed_by_host = kept.accessed_by_host;
		}
		range_link_locked(merged);
	}
out:
	pthread_mutex_unlock(&managed_lock);
	return res;
}

int managed_free(uint64_t addr)
{
	struct managed_range **pp, *r = NULL;

	if (!__atomic_load_n(&managed_ranges, __ATOMIC_ACQUIRE))
		return -ENOENT;
	pthread_mutex_lock(&managed_lock);
	for (pp = &managed_ranges; *pp; pp = &(*pp)->next) {
		if ((*pp)->base == addr && (*pp)->alloc_bytes) {
			r = *pp;
			*pp = r->next;
			break;
		}
	}
	if (r)
		range_destroy(r);
	pthread_mutex_unlock(&managed_lock);
	return r ? 0 : -ENOENT;
}

void managed_drop_owner(uint64_t library)
{
	struct managed_range **pp;

	if (!__atomic_load_n(&managed_ranges, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&managed_lock);
	for (pp = &managed_ranges; *pp;) {
		struct managed_range *r = *pp;

		unsigned kept = 0;

		/* Its variables go; pages other modules' variables share stay. */
		for (unsigned i = 0; i < r->nseg && !r->alloc_bytes; i++)
			if (r->seg[i].owner != library)
				r->seg[kept++] = r->seg[i];
		if (!r->alloc_bytes)
			r->nseg = kept;
		if (!r->alloc_bytes && !kept) {
			*pp = r->next;
			range_destroy(r);
		} else {
			pp = &r->next;
		}
	}
	pthread_mutex_unlock(&managed_lock);
}

void managed_reset(void)
{
	/* The child of a fork: the mirrors are shared memory with the parent,
	 * whose session they belong to; the child's new session has none.
	 * The mappings stay (the child may not use them), the records go. */
	while (managed_ranges) {
		struct managed_range *r = managed_ranges;

		managed_ranges = r->next;
		if (r->memfd >= 0)
			close(r->memfd);
		free(r->state);
		free(r);
	}
}

void managed_fork_lock(void)
{
	pthread_mutex_lock(&managed_lock);
}

void managed_fork_unlock(void)
{
	pthread_mutex_unlock(&managed_lock);
}

/* The range [addr, addr+count) must lie in one managed mirror. */
static struct managed_range *range_span_locked(uint64_t addr, uint64_t count)
{
	struct managed_range *r = range_find_locked(addr);

	/* Pinned memory is no managed memory: prefetch, advice and range
	 * attributes refuse it as the driver does. */
	if (!r || r->pinned || !count || count > r->len - (addr - r->base))
		return NULL;
	return r;
}

static bool location_valid(CUmemLocation loc, bool host_ok)
{
	switch (loc.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return loc.id == 0;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		return host_ok;
	default:
		return false;
	}
}

/* A prefetch's destination: the session's device or the host. */
static CUresult prefetch_location_check(CUmemLocation loc)
{
	if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && loc.id != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	return location_valid(loc, true) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* One prefetch of (part of) @r, already checked. To the device: the host's
 * writes go now. To the host: pages are fetched when touched, after the
 * stream's work, as the application must synchronise before it touches
 * them. */
static CUresult range_prefetch_locked(struct managed_range *r, CUmemLocation loc)
{
	r->last_prefetch = loc;
	if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && r->dirty)
		return range_push_locked(r);
	return CUDA_SUCCESS;
}

/* A discard of [addr, addr+count) in @r: its contents become undefined, so
 * the host's writes to pages wholly inside it need not reach the device;
 * they are dropped (the pages fetch the device copy when touched again).
 * Pages the range covers in part keep their other bytes, and so their
 * state. Keeping data is always a legal discard: work on a capturing
 * stream is recorded, not run, so there the host keeps its writes. */
static void range_discard_locked(struct managed_range *r, uint64_t addr, uint64_t count,
				 uint64_t stream)
{
	uint64_t pg = page_size(), first = (addr - r->base + pg - 1) / pg,
		 end = (addr - r->base + count) / pg;

	if (!r->dirty || (capture_active() && capture_tracked(stream)))
		return;
	for (uint64_t i = first; i < end;) {
		uint64_t j = i;

		while (j < end && r->state[j] == PAGE_DIRTY)
			j++;
		if (j > i && range_protect_locked(r, i, j - i, PROT_NONE) == 0)
			range_state_locked(r, i, j - i, PAGE_INVALID);
		i = j > i ? j : i + 1;
	}
}

CUresult managed_prefetch(uint64_t addr, uint64_t count, CUmemLocation loc, uint64_t stream)
{
	struct managed_range *r;
	CUresult res;

	if (stream > 2 && !handle_kind_is(stream, WIRE_HANDLE_STREAM))
		return CUDA_ERROR_INVALID_HANDLE;
	res = prefetch_location_check(loc);
	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&managed_lock);
	r = range_span_locked(addr, count);
	res = r ? range_prefetch_locked(r, loc) : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&managed_lock);
	return res;
}

/* The location of operation @i of a batch: prefetchLocIdxs[k] is the first
 * operation that prefetchLocs[k] applies to (checked increasing). */
static CUmemLocation batch_location(const struct managed_batch *b, size_t i)
{
	size_t k = b->nlocs - 1;

	while (k && b->loc_idxs[k] > i)
		k--;
	return b->locs[k];
}

CUresult managed_batch(const struct managed_batch *b)
{
	struct managed_range **ranges;
	CUresult res = CUDA_SUCCESS;

	/* Everything is checked before anything is done: a batch that fails
	 * has no effect. */
	if (b->flags || !b->dptrs || !b->sizes || !b->count)
		return CUDA_ERROR_INVALID_VALUE;
	if (b->stream == 0 || b->stream == (uint64_t)(uintptr_t)CU_STREAM_LEGACY)
		return CUDA_ERROR_INVALID_VALUE;        /* "must not be the legacy NULL stream" */
	if (b->stream > 2 && !handle_kind_is(b->stream, WIRE_HANDLE_STREAM))
		return CUDA_ERROR_INVALID_HANDLE;
	if (b->prefetch) {
		if (!b->locs || !b->loc_idxs || !b->nlocs || b->nlocs > b->count || b->loc_idxs[0] != 0 ||
		    b->loc_idxs[b->nlocs - 1] >= b->count)
			return CUDA_ERROR_INVALID_VALUE;
		for (size_t k = 0; k < b->nlocs && res == CUDA_SUCCESS; k++) {
			if (k && b->loc_idxs[k] <= b->loc_idxs[k - 1])
				return CUDA_ERROR_INVALID_VALUE;
			res = prefetch_location_check(b->locs[k]);
		}
		/* A batch answers a device it lacks as any bad location (measured
		 * on the H200); a single prefetch says INVALID_DEVICE. */
		if (res != CUDA_SUCCESS)
			return CUDA_ERROR_INVALID_VALUE;
	}
	ranges = calloc(b->count, sizeof(*ranges));
	if (!ranges)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&managed_lock);
	for (size_t i = 0; i < b->count && res == CUDA_SUCCESS; i++) {
		ranges[i] = range_span_locked(b->dptrs[i], b->sizes[i]);
		if (!ranges[i])
			res = CUDA_ERROR_INVALID_VALUE;
	}
	/* Discards first, then prefetches: a range may appear twice. */
	for (size_t i = 0; i < b->count && res == CUDA_SUCCESS && b->discard; i++)
		range_discard_locked(ranges[i], b->dptrs[i], b->sizes[i], b->stream);
	for (size_t i = 0; i < b->count && res == CUDA_SUCCESS && b->prefetch; i++)
		res = range_prefetch_locked(ranges[i], batch_location(b, i));
	pthread_mutex_unlock(&managed_lock);
	free(ranges);
	return res;
}

CUresult managed_advise(uint64_t addr, uint64_t count, CUmem_advise advice, CUmemLocation loc)
{
	struct managed_range *r;
	CUresult res = CUDA_SUCCESS;
	bool needs_loc = advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
			 advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY &&
			 advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION;

	if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
		return CUDA_ERROR_INVALID_VALUE;
	if (needs_loc && loc.type == CU_MEM_LOCATION_TYPE_DEVICE && loc.id != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	if (needs_loc && !location_valid(loc, true))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&managed_lock);
	r = range_span_locked(addr, count);
	if (!r) {
		res = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	/* Advice changes where pages live natively, never what they hold:
	 * the mirror's coherence does not depend on it. */
	switch (advice) {
	case CU_MEM_ADVISE_SET_READ_MOSTLY:
	case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
		r->read_mostly = advice == CU_MEM_ADVISE_SET_READ_MOSTLY;
		break;
	case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
		r->preferred = loc;
		break;
	case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
		r->preferred.type = CU_MEM_LOCATION_TYPE_INVALID;
		break;
	default:
		if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE)
			r->accessed_by_device = advice == CU_MEM_ADVISE_SET_ACCESSED_BY;
		else
			r->accessed_by_host = advice == CU_MEM_ADVISE_SET_ACCESSED_BY;
		break;
	}
out:
	pthread_mutex_unlock(&managed_lock);
	return res;
}

/* A location as the legacy int attributes give it: a device ordinal,
 * CU_DEVICE_CPU (-1) or CU_DEVICE_INVALID (-2). */
static int location_legacy(CUmemLocation loc)
{
	if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE)
		return loc.id;
	if (loc.type == CU_MEM_LOCATION_TYPE_INVALID)
		return CU_DEVICE_INVALID;
	return CU_DEVICE_CPU;
}

static CUresult range_attribute_locked(const struct managed_range *r, void *data, size_t size,
				       CUmem_range_attribute attr)
{
	int32_t v;

	switch (attr) {
	case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
		v = r->read_mostly;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
		v = location_legacy(r->preferred);
		break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
		v = location_legacy(r->last_prefetch);
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
		v = r->preferred.type;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
		v = r->preferred.id;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
		v = r->last_prefetch.type;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
		v = r->last_prefetch.id;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
		/* An array of device ordinals, CU_DEVICE_INVALID past the last. */
		int32_t *out = data;
		size_t n = size / sizeof(int32_t), k = 0;

		if (!size || size % sizeof(int32_t))
			return CUDA_ERROR_INVALID_VALUE;
		if (r->accessed_by_device && k < n)
			out[k++] = 0;
		if (r->accessed_by_host && k < n)
			out[k++] = CU_DEVICE_CPU;
		while (k < n)
			out[k++] = CU_DEVICE_INVALID;
		return CUDA_SUCCESS;
	}
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (size != sizeof(int32_t))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(data, &v, sizeof(v));
	return CUDA_SUCCESS;
}

CUresult managed_range_attributes(void **data, size_t *sizes, CUmem_range_attribute *attrs,
				  size_t n, uint64_t addr, uint64_t count)
{
	struct managed_range *r;
	CUresult res = CUDA_SUCCESS;

	if (!data || !sizes || !attrs || !n)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&managed_lock);
	r = range_span_locked(addr, count);
	if (!r)
		res = CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < n && res == CUDA_SUCCESS; i++)
		res = data[i] ? range_attribute_locked(r, data[i], sizes[i], attrs[i])
			      : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&managed_lock);
	return res;
}

CUresult managed_attach(uint64_t stream, uint64_t addr, uint64_t length, unsigned flags)
{
	struct managed_range *r;

	if (stream > 2 && !handle_kind_is(stream, WIRE_HANDLE_STREAM))
		return CUDA_ERROR_INVALID_HANDLE;
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
	    flags != CU_MEM_ATTACH_SINGLE)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&managed_lock);
	r = range_find_locked(addr);
	/* The whole allocation (length 0) or, as the driver allows, a part. */
	if (r && (r->pinned || (length && length > r->len - (addr - r->base))))
		r = NULL;
	if (r)
		r->flags = flags;
	pthread_mutex_unlock(&managed_lock);
	/* Attaching narrows which kernels may touch the memory; every launch
	 * still hands all managed memory to the device, which is coherent
	 * for any attachment. */
	return r ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Entry points */

static CUmemLocation location_of_device(CUdevice dev)
{
	CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev };

	if (dev == CU_DEVICE_CPU)
		loc = (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_HOST, .id = 0 };
	else if (dev < 0)
		loc.type = CU_MEM_LOCATION_TYPE_INVALID;
	return loc;
}

SHIM_API CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
				     CUstream hStream)
{
	SHIM_ENTRY();
	return managed_prefetch(devPtr, count, location_of_device(dstDevice), shim_stream(hStream, false));
}

SHIM_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
					  CUstream hStream)
{
	SHIM_ENTRY();
	return managed_prefetch(devPtr, count, location_of_device(dstDevice), shim_stream(hStream, true));
}

SHIM_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
					unsigned int flags, CUstream hStream)
{
	SHIM_ENTRY();
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	return managed_prefetch(devPtr, count, location, shim_stream(hStream, false));
}

CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
				    unsigned int flags, CUstream hStream);
SHIM_API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
					     unsigned int flags, CUstream hStream)
{
	SHIM_ENTRY();
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	return managed_prefetch(devPtr, count, location, shim_stream(hStream, true));
}

static CUresult batch_call(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
			   size_t *loc_idxs, size_t nlocs, unsigned long long flags, CUstream s,
			   bool per_thread, bool discard, bool prefetch)
{
	struct managed_batch b = {
		.dptrs = dptrs, .sizes = sizes, .count = count, .locs = locs, .loc_idxs = loc_idxs,
		.nlocs = nlocs, .flags = flags, .stream = shim_stream(s, per_thread),
		.discard = discard, .prefetch = prefetch,
	};

	return managed_batch(&b);
}

SHIM_API CUresult cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
					  CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
					  size_t numPrefetchLocs, unsigned long long flags, CUstream hStream)
{
	SHIM_ENTRY();
	return batch_call(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
			  hStream, false, false, true);
}

CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
				      CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
				      size_t numPrefetchLocs, unsigned long long flags, CUstream hStream);
SHIM_API CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
					       CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
					       size_t numPrefetchLocs, unsigned long long flags,
					       CUstream hStream)
{
	SHIM_ENTRY();
	return batch_call(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
			  hStream, true, false, true);
}

SHIM_API CUresult cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
					 unsigned long long flags, CUstream hStream)
{
	SHIM_ENTRY();
	return batch_call(dptrs, sizes, count, NULL, NULL, 0, flags, hStream, false, true, false);
}

CUresult cuMemDiscardBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
				     unsigned long long flags, CUstream hStream);
SHIM_API CUresult cuMemDiscardBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
					      unsigned long long flags, CUstream hStream)
{
	SHIM_ENTRY();
	return batch_call(dptrs, sizes, count, NULL, NULL, 0, flags, hStream, true, true, false);
}

SHIM_API CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
						    CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
						    size_t numPrefetchLocs, unsigned long long flags,
						    CUstream hStream)
{
	SHIM_ENTRY();
	return batch_call(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
			  hStream, false, true, true);
}

CUresult cuMemDiscardAndPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
						CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
						size_t numPrefetchLocs, unsigned long long flags,
						CUstream hStream);
SHIM_API CUresult cuMemDiscardAndPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
							 CUmemLocation *prefetchLocs,
							 size_t *prefetchLocIdxs, size_t numPrefetchLocs,
							 unsigned long long flags, CUstream hStream)
{
	SHIM_ENTRY();
	return batch_call(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
			  hStream, true, true, true);
}

SHIM_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
	SHIM_ENTRY();
	return managed_advise(devPtr, count, advice, location_of_device(device));
}

SHIM_API CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
				 CUmemLocation location)
{
	SHIM_ENTRY();
	return managed_advise(devPtr, count, advice, location);
}

SHIM_API CUresult cuMemRangeGetAttribute(void *data, size_t dataSize, CUmem_range_attribute attribute,
					 CUdeviceptr devPtr, size_t count)
{
	SHIM_ENTRY();
	return managed_range_attributes(&data, &dataSize, &attribute, 1, devPtr, count);
}

SHIM_API CUresult cuMemRangeGetAttributes(void **data, size_t *dataSizes,
					  CUmem_range_attribute *attributes, size_t numAttributes,
					  CUdeviceptr devPtr, size_t count)
{
	SHIM_ENTRY();
	return managed_range_attributes(data, dataSizes, attributes, numAttributes, devPtr, count);
}

SHIM_API CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length,
					 unsigned int flags)
{
	SHIM_ENTRY();
	return managed_attach(shim_stream(hStream, false), dptr, length, flags);
}

CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length,
				     unsigned int flags);
SHIM_API CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length,
					      unsigned int flags)
{
	SHIM_ENTRY();
	return managed_attach(shim_stream(hStream, true), dptr, length, flags);
}
