// Pinned host memory without copies in between.
//
// 1. Mapped pinned memory (cudaHostAllocMapped): a kernel writes the host
//    buffer through its device pointer and the program reads the bytes with
//    no copy call; the host writes the next input and the next kernel reads
//    it. Natively this is the driver's zero copy; through tern's shm
//    transport the buffer is a memfd both processes map, registered with the
//    driver by the worker.
// 2. Async copies to and from pinned memory in a loop on two streams, each
//    round checked: the copies run as DMA on the program's own pages.
//
// Over transports that cannot share memory (unix, tcp) tern has no device
// pointer for host memory and says so (cudaErrorNotSupported); part 1 is then
// skipped with a message, and only then. Part 2 must pass everywhere.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

__global__ void zc_affine(const int32_t *in, int32_t *out, int32_t k, int32_t n)
{
	for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		out[i] = in[i] * k + i;
}

static bool mapped_expected(void)
{
	const char *server = getenv("TERN_SERVER");

	/* Native runs (no tern) and tern's shm transport must map. */
	return !server || !strncmp(server, "shm:", 4);
}

static int mapped_round_trip(void)
{
	const int32_t n = 1 << 16;
	int32_t *in, *out, *d_in, *d_out;
	cudaError_t e;

	CHECK(cudaHostAlloc((void **)&in, n * sizeof(int32_t), cudaHostAllocMapped));
	CHECK(cudaHostAlloc((void **)&out, n * sizeof(int32_t), cudaHostAllocMapped));
	e = cudaHostGetDevicePointer((void **)&d_in, in, 0);
	if (e == cudaErrorNotSupported && !mapped_expected()) {
		printf("mapped host memory: not offered over %s (skipped)\n", getenv("TERN_SERVER"));
		(void)cudaGetLastError();
		CHECK(cudaFreeHost(in));
		CHECK(cudaFreeHost(out));
		return 0;
	}
	CHECK(e);
	CHECK(cudaHostGetDevicePointer((void **)&d_out, out, 0));
	for (int32_t round = 0; round < 4; round++) {
		for (int32_t i = 0; i < n; i++) {
			in[i] = i ^ (round * 7919);
			out[i] = -1;
		}
		zc_affine<<<64, 256>>>(d_in, d_out, round + 2, n);
		CHECK(cudaGetLastError());
		CHECK(cudaDeviceSynchronize());
		for (int32_t i = 0; i < n; i++) {
			int32_t want = (int32_t)((uint32_t)(i ^ (round * 7919)) * (uint32_t)(round + 2) + (uint32_t)i);

			if (out[i] != want) {
				fprintf(stderr, "FAIL: mapped round %d: out[%d] = %d, want %d\n", round, i, out[i], want);
				return 1;
			}
		}
	}
	CHECK(cudaFreeHost(in));
	CHECK(cudaFreeHost(out));
	printf("mapped host memory: 4 rounds written by kernels, read without copies\n");
	return 0;
}

static int async_copies(void)
{
	const size_t n = 1 << 20;
	const int rounds = 8;
	uint32_t *h[2], *back[2], *d[2];
	cudaStream_t s[2];

	for (int k = 0; k < 2; k++) {
		CHECK(cudaMallocHost((void **)&h[k], n * sizeof(uint32_t)));
		CHECK(cudaMallocHost((void **)&back[k], n * sizeof(uint32_t)));
		CHECK(cudaMalloc((void **)&d[k], n * sizeof(uint32_t)));
		CHECK(cudaStreamCreate(&s[k]));
	}
	for (int r = 0; r < rounds; r++) {
		int k = r & 1;

		/* The previous use of this stream's buffers is done before they are refilled. */
		CHECK(cudaStreamSynchronize(s[k]));
		if (r >= 2) {
			for (size_t i = 0; i < n; i++) {
				if (back[k][i] != (uint32_t)(i * 2654435761u) + (uint32_t)(r - 2)) {
					fprintf(stderr, "FAIL: async round %d: back[%zu] = %u\n", r - 2, i, back[k][i]);
					return 1;
				}
			}
		}
		for (size_t i = 0; i < n; i++) {
			h[k][i] = (uint32_t)(i * 2654435761u) + (uint32_t)r;
			back[k][i] = 0;
		}
		CHECK(cudaMemcpyAsync(d[k], h[k], n * sizeof(uint32_t), cudaMemcpyHostToDevice, s[k]));
		CHECK(cudaMemcpyAsync(back[k], d[k], n * sizeof(uint32_t), cudaMemcpyDeviceToHost, s[k]));
	}
	for (int k = 0; k < 2; k++) {
		int r = rounds - 2 + k;

		CHECK(cudaStreamSynchronize(s[k]));
		for (size_t i = 0; i < n; i++) {
			if (back[k][i] != (uint32_t)(i * 2654435761u) + (uint32_t)r) {
				fprintf(stderr, "FAIL: async round %d: back[%zu] = %u\n", r, i, back[k][i]);
				return 1;
			}
		}
		CHECK(cudaFreeHost(h[k]));
		CHECK(cudaFreeHost(back[k]));
		CHECK(cudaFree(d[k]));
		CHECK(cudaStreamDestroy(s[k]));
	}
	printf("pinned async copies: %d rounds of %zu KiB on two streams\n", rounds, n * 4 / 1024);
	return 0;
}

int main(void)
{
	if (mapped_round_trip() || async_copies())
		return 1;
	printf("PASS pinned_zero_copy\n");
	return 0;
}
