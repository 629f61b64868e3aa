/* bench/rpc: what a remoted call costs, per transport, on the sim backend (no
 * GPU): round-trip latency of a synchronous call (p50, p99) and the rate of
 * deferred calls (lazy RPC), over unix, shm and tcp. It starts its own ternd and loads tern's
 * libcuda.so.1 like an application.
 *
 *   bench_rpc TERND SHIM_LIB [ITERATIONS]        (a few iterations: CI smoke mode)
 */
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport.h"

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

#define FN(lib, name, type) ((type)dlsym(lib, name))

/* One transport, in a child process: the shim keeps one connection per process. */
static int bench(const char *shim, const char *server, const char *token, int iterations)
{
	void *lib;
	CUresult (*init)(unsigned), (*retain)(CUcontext *, CUdevice), (*set)(CUcontext);
	CUresult (*sync)(void), (*alloc)(CUdeviceptr *, size_t), (*stream_flags)(CUstream, unsigned *);
	CUresult (*memset_async)(CUdeviceptr, unsigned char, size_t, CUstream);
	double *lat = calloc((size_t)iterations, sizeof(double)), t0, async_rate;
	CUcontext ctx;
	CUdeviceptr d;
	unsigned flags;

	setenv("TERN_SERVER", server, 1);
	if (token)
		setenv("TERN_TOKEN", token, 1);
	lib = dlopen(shim, RTLD_NOW | RTLD_LOCAL);
	if (!lib || !lat) {
		fprintf(stderr, "bench_rpc: %s\n", lib ? "out of memory" : dlerror());
		return 1;
	}
	init = FN(lib, "cuInit", CUresult (*)(unsigned));
	retain = FN(lib, "cuDevicePrimaryCtxRetain", CUresult (*)(CUcontext *, CUdevice));
	set = FN(lib, "cuCtxSetCurrent", CUresult (*)(CUcontext));
	sync = FN(lib, "cuCtxSynchronize", CUresult (*)(void));
	stream_flags = FN(lib, "cuStreamGetFlags", CUresult (*)(CUstream, unsigned *));
	alloc = FN(lib, "cuMemAlloc_v2", CUresult (*)(CUdeviceptr *, size_t));
	memset_async = FN(lib, "cuMemsetD8Async", CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream));
	if (init(0) || retain(&ctx, 0) || set(ctx) || alloc(&d, 4096)) {
		fprintf(stderr, "bench_rpc: session on %s failed\n", server);
		return 1;
	}
	/* The round trip: cuStreamGetFlags, always asked and answered from the
	 * worker's handle table (a repeated cuCtxSynchronize with nothing
	 * queued is answered in the guest). */
	for (int i = 0; i < iterations / 10 + 1; i++)
		stream_flags(NULL, &flags);
	for (int i = 0; i < iterations; i++) {
		t0 = now_us();
		if (stream_flags(NULL, &flags))
			return 1;
		lat[i] = now_us() - t0;
	}
	qsort(lat, (size_t)iterations, sizeof(double), cmp_double);
	t0 = now_us();
	for (int i = 0; i < iterations * 10; i++)
		if (memset_async(d, (unsigned char)i, 4, NULL))
			return 1;
	if (sync())
		return 1;
	async_rate = iterations * 10 / ((now_us() - t0) / 1e6);
	printf("%-22s %9.1f %9.1f %14.0f\n", server[0] == 'u' ? "unix" : server[0] == 's' ? "shm" : "tcp (token)",
	       lat[iterations / 2],
	       lat[(int)(iterations * 0.99)], async_rate);
	return 0;
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/tern-bench-rpc-XXXXXX", unix_url[128], shm_url[128], tcp_url[64], control[128],
	     token[128];
	int iterations = argc > 3 ? atoi(argv[3]) : 20000, status = 0, port = transport_tcp_free_port();
	const char *transports[3];
	pid_t ternd;
	FILE *f;

	if (argc < 3 || iterations < 10 || !mkdtemp(dir)) {
		fprintf(stderr, "usage: bench_rpc TERND SHIM_LIB [ITERATIONS >= 10]\n");
		return 2;
	}
	snprintf(unix_url, sizeof(unix_url), TRANSPORT_UNIX_PLAIN_SCHEME "%s/ternd.sock", dir);
	snprintf(shm_url, sizeof(shm_url), "shm:%s/ternd.sock", dir);
	snprintf(tcp_url, sizeof(tcp_url), "tcp://127.0.0.1:%d", port);
	snprintf(control, sizeof(control), "%s/control.sock", dir);
	snprintf(token, sizeof(token), "%s/token", dir);
	f = fopen(token, "w");
	fputs("bench-token-0123456789\n", f);
	fclose(f);
	chmod(token, 0600);
	ternd = fork();
	if (ternd == 0) {
		execl(argv[1], "ternd", "--backend", "sim", "--listen", unix_url, "--listen", tcp_url,
		      "--control", control, "--token-file", token, "--state-dir", dir, "--log-level", "warn",
		      "--sim-memory", "1G", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500 && access(control, F_OK); i++)
		usleep(10000);
	printf("%-22s %9s %9s %14s\n", "transport", "p50_us", "p99_us", "deferred/s");
	transports[0] = unix_url;
	transports[1] = shm_url;
	transports[2] = tcp_url;
	for (int t = 0; t < 3; t++) {
		pid_t child;
		int st = 1;

		fflush(stdout);
		child = fork();
		if (child == 0) {
			st = bench(argv[2], transports[t], t == 2 ? "bench-token-0123456789" : NULL, iterations);
			fflush(stdout);
			_exit(st);
		}
		waitpid(child, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			status = 1;
	}
	kill(ternd, SIGTERM);
	waitpid(ternd, NULL, 0);
	unlink(token);
	printf("%s\n", status ? "bench_rpc: FAILED" : "bench_rpc: done");
	return status;
}
