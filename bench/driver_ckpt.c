/* The driver's own checkpoint of another process, timed: what cuda-checkpoint
 * and CRIU's CUDA plugin do (cuCheckpointProcessLock + Checkpoint, then
 * Restore + Unlock). bench/ckpt compares tern against it in the same run.
 *
 *   driver_ckpt PID checkpoint|restore
 * prints "lock_ms X checkpoint_ms Y" or "restore_ms X unlock_ms Y".
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*fn_lock)(int, CUcheckpointLockArgs *);
typedef CUresult (*fn_ckpt)(int, CUcheckpointCheckpointArgs *);
typedef CUresult (*fn_restore)(int, CUcheckpointRestoreArgs *);
typedef CUresult (*fn_unlock)(int, CUcheckpointUnlockArgs *);

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	const char *lib = getenv("TERN_BENCH_DRIVER") ? getenv("TERN_BENCH_DRIVER") : "libcuda.so.1";
	void *h = dlopen(lib, RTLD_NOW);
	int pid = argc > 2 ? atoi(argv[1]) : 0;
	CUresult r;
	double t0, t1, t2;

	if (!h || !pid) {
		fprintf(stderr, "usage: driver_ckpt PID checkpoint|restore (%s)\n", h ? "" : dlerror());
		return 2;
	}
	if (((CUresult (*)(unsigned))dlsym(h, "cuInit"))(0)) {
		fprintf(stderr, "cuInit failed\n");
		return 1;
	}
	if (!strcmp(argv[2], "checkpoint")) {
		CUcheckpointLockArgs la = { 0 };
		CUcheckpointCheckpointArgs ca = { 0 };

		t0 = now_ms();
		r = ((fn_lock)dlsym(h, "cuCheckpointProcessLock"))(pid, &la);
		t1 = now_ms();
		if (!r)
			r = ((fn_ckpt)dlsym(h, "cuCheckpointProcessCheckpoint"))(pid, &ca);
		t2 = now_ms();
		printf("lock_ms %.1f checkpoint_ms %.1f\n", t1 - t0, t2 - t1);
	} else {
		CUcheckpointRestoreArgs ra = { 0 };
		CUcheckpointUnlockArgs ua = { 0 };

		t0 = now_ms();
		r = ((fn_restore)dlsym(h, "cuCheckpointProcessRestore"))(pid, &ra);
		t1 = now_ms();
		if (!r)
			r = ((fn_unlock)dlsym(h, "cuCheckpointProcessUnlock"))(pid, &ua);
		t2 = now_ms();
		printf("restore_ms %.1f unlock_ms %.1f\n", t1 - t0, t2 - t1);
	}
	if (r) {
		fprintf(stderr, "driver checkpoint call failed: %d\n", r);
		return 1;
	}
	return 0;
}
