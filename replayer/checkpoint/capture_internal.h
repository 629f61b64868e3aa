/* Shared by capture.c (open, pause, drain), capture_hash.c (chunk hashes)
 * and capture_fill.c (restore); not for callers. */
#ifndef TERN_CAPTURE_INTERNAL_H
#define TERN_CAPTURE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "capture.h"

/* A chunk to copy: where it is on the device now and where it goes. */
struct capture_job {
	uint32_t region;
	uint32_t len;
	uint64_t index;
	uint64_t src;             /* device address to read (guest or shadow) */
	uint64_t device_hash;
};

/* A pinned staging buffer.  @pending counts chunks the writer still holds
 * (its done callbacks decrement it); @ev marks the end of the copies into
 * or out of it. */
struct capture_staging {
	struct capture *c;
	uint8_t *host;
	CUevent ev;
	unsigned pending;
	bool copy_issued;         /* ev was recorded and not waited for */
	uint64_t first, count;    /* jobs of the batch in it */
};

struct capture {
	struct backend *be;
	CUdevice dev;
	CUcontext ctx;
	struct capture_config cfg;
	CUstream *streams;
	unsigned nstreams;
	struct capture_staging *stg;
	unsigned nstg;

	pthread_mutex_t mu;       /* guards pending, err */
	pthread_cond_t cv;
	int err;                  /* first writer error seen by a done callback */

	/* Hash engine. */
	CUmodule mod;
	CUfunction fn;            /* NULL: hash on the CPU */
	bool host_addressable;    /* device pointers readable here (sim) */
	CUdeviceptr dres;         /* per-chunk kernel results */
	uint64_t dres_cap;
	uint8_t *hres;            /* pinned copy of them */
	uint64_t hres_cap;

	/* One snapshot, from pause to finish. */
	struct snap_writer *w;
	uint32_t chunk_size;
	uint64_t *hashes;         /* device hash per chunk, all regions */
	uint8_t *zero;            /* 1 if the chunk is all zero */
	uint64_t nhashes;
	struct capture_job *shadow_jobs;
	uint64_t nshadow;
	CUdeviceptr shadow;
	pthread_t drain;
	bool draining;
	int drain_rc;
	struct capture_stats st;
};

/* A CUDA status as an error: 0 or -EIO, logged with @what. */
int capture_cu(struct capture *c, CUresult rc, const char *what);

/* Set up the hash engine at open (load and self-test the kernel). */
int capture_hash_open(struct capture *c);
void capture_hash_close(struct capture *c);
/* Fill c->hashes / c->zero for every chunk of @regions (c->chunk_size). */
int capture_hash_regions(struct capture *c, const struct capture_region *regions, unsigned n);

/* Run @fn(arg, i) for i in [0, count) on up to c->cfg.threads threads;
 * returns the first non-zero result. */
int capture_parallel(struct capture *c, uint64_t count, int (*fn)(void *arg, uint64_t i),
		     void *arg);

#endif
