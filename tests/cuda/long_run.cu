/* long_run: kernels and synchronisations in a loop for a while (argv[1]
 * seconds, default 20), checking the data as it goes. The killed-worker test
 * kills its ternd worker mid-run: the program must then stop with a CUDA error
 * (exit status 1, a "CUDA error:" line) instead of hanging. */
#include "check.h"

#include <time.h>

extern "C" __global__ void lr_step(unsigned *d, unsigned add, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		d[i] = d[i] + add + (unsigned)i;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 20.0;
	const int n = 1 << 16;
	static unsigned h[1 << 16];
	unsigned *d;
	unsigned long long iter = 0, adds = 0;
	double t0 = now();

	REQUIRE(seconds > 0 && seconds < 3600, "bad duration %s", argv[1]);
	CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
	CHECK(cudaMemset(d, 0, n * sizeof(unsigned)));
	CHECK(cudaDeviceSynchronize());
	printf("long_run: running for %.1f s\n", seconds);
	fflush(stdout);

	while (now() - t0 < seconds) {
		unsigned add = (unsigned)(iter % 5);

		lr_step<<<n / 256, 256>>>(d, add, n);
		CHECK(cudaGetLastError());
		CHECK(cudaDeviceSynchronize());
		adds += add;
		iter++;
		if (iter % 64 == 0) {
			CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
			for (int i = 0; i < n; i++) {
				unsigned want = (unsigned)(adds + iter * (unsigned long long)i);

				REQUIRE(h[i] == want, "iteration %llu: d[%d] = %u, expected %u",
					iter, i, h[i], want);
			}
		}
	}
	CHECK(cudaFree(d));
	printf("long_run: %llu iterations in %.1f s\n", iter, now() - t0);
	test_pass("long_run");
	return 0;
}
