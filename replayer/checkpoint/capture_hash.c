/* Chunk device hashes for capture: the embedded CUDA kernel
 * (replayer/checkpoint/kernels/chunk_hash.cu), or the CPU reference (snap_hash.h) on
 * memory read in place (sim) or copied to a staging buffer first. */
#define LOG_PREFIX "capture: "
#include "capture_internal.h"
#include "capture_kernel_image.h"
#include "snap_hash.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HASH_THREADS 256u
/* Vectors (16 bytes) each thread reads per chunk, at most: enough blocks
 * per chunk that a handful of chunks still fills the GPU. */
#define HASH_VECS_PER_THREAD 32u

static uint32_t blocks_per_chunk(uint32_t chunk_size)
{
	uint64_t vecs = chunk_size / 16;
	uint64_t per_block = (uint64_t)HASH_THREADS * HASH_VECS_PER_THREAD;

	return (uint32_t)(vecs / per_block + (vecs % per_block != 0 || vecs == 0));
}

static int results_reserve(struct capture *c, uint64_t chunks)
{
	uint64_t need = chunks * 12;
	struct backend *be = c->be;
	void *h;

	if (need <= c->dres_cap)
		return 0;
	need = need < 4096 ? 4096 : need * 2;
	if (c->dres)
		be->cuMemFree(c->dres);
	if (c->hres)
		be->cuMemFreeHost(c->hres);
	c->dres = 0;
	c->hres = NULL;
	c->dres_cap = c->hres_cap = 0;
	if (capture_cu(c, be->cuMemAlloc(&c->dres, need), "cuMemAlloc (hash results)"))
		return -ENOMEM;
	if (capture_cu(c, be->cuMemHostAlloc(&h, need, 0), "cuMemHostAlloc (hash results)")) {
		be->cuMemFree(c->dres);
		c->dres = 0;
		return -ENOMEM;
	}
	c->hres = h;
	c->dres_cap = c->hres_cap = need;
	return 0;
}

/* Queue the kernel for one region; results at chunk slot @first. */
static int kernel_launch(struct capture *c, uint64_t addr, uint64_t size, uint64_t first,
			 uint64_t total)
{
	uint32_t cs = c->chunk_size, bpc = blocks_per_chunk(cs);
	uint64_t chunks = size / cs + (size % cs != 0);
	CUdeviceptr hout = c->dres + first * 8;
	CUdeviceptr nzout = c->dres + total * 8 + first * 4;
	void *args[] = { &addr, &size, &cs, &bpc, &hout, &nzout };

	if (chunks * bpc >= (1ull << 31)) {
		pr_err("region 0x%llx of %llu bytes: too many chunks for one launch",
		       (unsigned long long)addr, (unsigned long long)size);
		return -E2BIG;
	}
	return capture_cu(c, c->be->cuLaunchKernel(c->fn, (unsigned)(chunks * bpc), 1, 1,
						   HASH_THREADS, 1, 1, 0, c->streams[0], args,
						   NULL), "cuLaunchKernel (chunk hash)");
}

/* One launch per region on stream 0, one copy of the results back, one
 * synchronisation. */
static int hash_kernel(struct capture *c, const struct capture_region *regions, unsigned n,
		       uint64_t total)
{
	struct backend *be = c->be;
	uint64_t first = 0;
	int rc;

	rc = results_reserve(c, total);
	if (rc)
		return rc;
	rc = capture_cu(c, be->cuMemsetD8Async(c->dres, 0, total * 12, c->streams[0]),
			"cuMemsetD8Async (hash results)");
	for (unsigned i = 0; i < n && !rc; i++) {
		rc = kernel_launch(c, regions[i].addr, regions[i].size, first, total);
		first += regions[i].size / c->chunk_size + (regions[i].size % c->chunk_size != 0);
	}
	if (!rc)
		rc = capture_cu(c, be->cuMemcpyDtoHAsync(c->hres, c->dres, total * 12,
							 c->streams[0]), "cuMemcpyDtoHAsync");
	/* Even after an error: nothing may still write the results. */
	if (capture_cu(c, be->cuStreamSynchronize(c->streams[0]), "cuStreamSynchronize") && !rc)
		rc = -EIO;
	if (rc)
		return rc;
	first = 0;
	for (unsigned i = 0; i < n; i++) {
		uint64_t size = regions[i].size;
		uint64_t chunks = size / c->chunk_size + (size % c->chunk_size != 0);

		for (uint64_t k = 0; k < chunks; k++) {
			uint64_t len = size - k * c->chunk_size;
			uint64_t h;
			uint32_t nz;

			if (len > c->chunk_size)
				len = c->chunk_size;
			memcpy(&h, c->hres + (first + k) * 8, 8);
			memcpy(&nz, c->hres + total * 8 + (first + k) * 4, 4);
			c->hashes[first + k] = h ^ len;
			c->zero[first + k] = nz == 0;
		}
		first += chunks;
	}
	return 0;
}

struct host_job {
	struct capture *c;
	const uint8_t *base;      /* host view of the bytes */
	uint64_t size;
	uint64_t first;           /* chunk slot of base's first chunk */
};

static int host_hash_one(void *arg, uint64_t k)
{
	struct host_job *j = arg;
	uint64_t off = k * j->c->chunk_size, len = j->size - off;
	bool zero;

	if (len > j->c->chunk_size)
		len = j->c->chunk_size;
	j->c->hashes[j->first + k] = snap_hash_device(j->base + off, len, &zero);
	j->c->zero[j->first + k] = zero;
	return 0;
}

/* CPU hashing.  Sim memory is read where it is; otherwise each staging
 * buffer's worth is copied down first (the slow path of a build without
 * the kernel: every byte crosses PCIe once more). */
static int hash_host(struct capture *c, const struct capture_region *regions, unsigned n)
{
	uint64_t first = 0, cs = c->chunk_size;
	/* Whole chunks per staging buffer (staging_bytes >= chunk size). */
	uint64_t span = c->cfg.staging_bytes / cs * cs;
	int rc = 0;

	for (unsigned i = 0; i < n && !rc; i++) {
		uint64_t size = regions[i].size;
		uint64_t chunks = size / cs + (size % cs != 0);

		if (c->host_addressable) {
			struct host_job j = { c, (const uint8_t *)(uintptr_t)regions[i].addr, size,
					      first };
			rc = capture_parallel(c, chunks, host_hash_one, &j);
		}
		for (uint64_t off = 0; !c->host_addressable && off < size && !rc; off += span) {
			uint64_t len = size - off < span ? size - off : span;
			struct host_job j = { c, c->stg[0].host, len, first + off / cs };

			rc = capture_cu(c, c->be->cuMemcpyDtoH(c->stg[0].host, regions[i].addr + off,
							       len), "cuMemcpyDtoH (hash)");
			if (!rc)
				rc = capture_parallel(c, len / cs + (len % cs != 0), host_hash_one,
						      &j);
		}
		first += chunks;
	}
	return rc;
}

int capture_hash_regions(struct capture *c, const struct capture_region *regions, unsigned n)
{
	uint64_t total = 0;
	bool aligned = true;

	for (unsigned i = 0; i < n; i++) {
		total += regions[i].size / c->chunk_size + (regions[i].size % c->chunk_size != 0);
		/* The kernel reads 16-byte vectors from each chunk's start. */
		aligned = aligned && regions[i].addr % 16 == 0;
	}
	free(c->hashes);
	free(c->zero);
	c->hashes = malloc(total ? total * 8 : 1);
	c->zero = malloc(total ? total : 1);
	c->nhashes = total;
	if (!c->hashes || !c->zero)
		return -ENOMEM;
	if (!total)
		return 0;
	if (c->fn && aligned && c->chunk_size % 16 == 0) {
		c->st.engine = CAPTURE_ENGINE_KERNEL;
		return hash_kernel(c, regions, n, total);
	}
	c->st.engine = CAPTURE_ENGINE_HOST;
	return hash_host(c, regions, n);
}

uint32_t capture_engine(const struct capture *c)
{
	return c->fn ? CAPTURE_ENGINE_KERNEL : CAPTURE_ENGINE_HOST;
}

/* Hash a known pattern with the kernel and compare with the CPU
 * reference: a kernel that cannot run here (no code for this GPU, a sim
 * without its CPU version) or that disagrees is not used. */
static int kernel_self_test(struct capture *c)
{
	enum { PROBE_CHUNK = 4096, PROBE_BYTES = 3 * PROBE_CHUNK - 1000 + 13 };
	static uint8_t probe[PROBE_BYTES];
	struct capture_region r = { 0, PROBE_BYTES, 0 };
	uint32_t saved = c->chunk_size;
	uint64_t want[3];
	CUdeviceptr d = 0;
	int rc;

	for (unsigned i = 0; i < PROBE_BYTES; i++)
		probe[i] = (uint8_t)(i * 131u + (i >> 7));
	memset(probe + PROBE_CHUNK, 0, PROBE_CHUNK); /* a zero chunk */
	rc = capture_cu(c, c->be->cuMemAlloc(&d, PROBE_BYTES), "cuMemAlloc (hash self-test)");
	if (rc)
		return rc;
	rc = capture_cu(c, c->be->cuMemcpyHtoD(d, probe, PROBE_BYTES), "cuMemcpyHtoD");
	c->chunk_size = PROBE_CHUNK;
	r.addr = d;
	c->hashes = malloc(3 * 8);
	c->zero = malloc(3);
	if (!rc && (!c->hashes || !c->zero))
		rc = -ENOMEM;
	if (!rc)
		rc = hash_kernel(c, &r, 1, 3);
	for (unsigned k = 0; k < 3 && !rc; k++) {
		uint64_t len = k < 2 ? PROBE_CHUNK : PROBE_BYTES - 2 * PROBE_CHUNK;
		bool zero;

		want[k] = snap_hash_device(probe + k * PROBE_CHUNK, len, &zero);
		if (want[k] != c->hashes[k] || zero != (c->zero[k] != 0)) {
			pr_warn("chunk hash kernel disagrees with the CPU reference on chunk %u "
				"(0x%016llx, want 0x%016llx): not used", k,
				(unsigned long long)c->hashes[k], (unsigned long long)want[k]);
			rc = -EPROTO;
		}
	}
	c->chunk_size = saved;
	free(c->hashes);
	free(c->zero);
	c->hashes = NULL;
	c->zero = NULL;
	c->be->cuMemFree(d);
	return rc;
}

int capture_hash_open(struct capture *c)
{
	struct backend *be = c->be;
	CUresult cr;

	c->host_addressable = strcmp(be->name, "sim") == 0;
	if (c->cfg.flags & CAPTURE_HASH_HOST || capture_kernel_image_size == 0) {
		if (capture_kernel_image_size == 0)
			pr_info("built without nvcc: chunk hashes on the CPU");
		return 0;
	}
	cr = be->cuModuleLoadData(&c->mod, capture_kernel_image);
	if (cr == CUDA_SUCCESS)
		cr = be->cuModuleGetFunction(&c->fn, c->mod, "tern_chunk_hash");
	if (cr == CUDA_SUCCESS && kernel_self_test(c) == 0) {
		pr_debug("chunk hashes on the GPU");
		return 0;
	}
	if (cr != CUDA_SUCCESS) {
		const char *name = NULL;

		be->cuGetErrorName(cr, &name);
		pr_warn("chunk hash kernel unavailable (%s): hashing on the CPU",
			name ? name : "unknown error");
	}
	capture_hash_close(c);
	return 0;
}

void capture_hash_close(struct capture *c)
{
	if (c->mod)
		c->be->cuModuleUnload(c->mod);
	c->mod = NULL;
	c->fn = NULL;
	if (c->dres)
		c->be->cuMemFree(c->dres);
	if (c->hres)
		c->be->cuMemFreeHost(c->hres);
	c->dres = 0;
	c->hres = NULL;
	c->dres_cap = c->hres_cap = 0;
}
