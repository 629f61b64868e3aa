/* The application side of bench/ckpt: holds GIB GiB of device memory filled
 * with one kind of data and obeys commands on stdin, so the same process can
 * be checkpointed by tern (run through the shim) or by the driver's
 * cuCheckpointProcess* (run natively).
 *
 *   ckpt_guest GIB random|halfzero|bf16
 *   stdin: "touch PERCENT" (rewrite that share of 4 MiB chunks, other chunks
 *          each time: the share of memory dirtied per touch), "ping"
 *          (a synchronous call), "sum" (checksum of all data), "quit"
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK (4ull << 20)

#define CHECK(x)                                                                      \
	do {                                                                          \
		cudaError_t e_ = (x);                                                 \
		if (e_ != cudaSuccess) {                                              \
			fprintf(stderr, "CUDA error: %s: %s\n", #x, cudaGetErrorString(e_)); \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

__device__ static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* kind 0 random, 1 every other chunk zero, 2 bf16-like weights (sign and
 * mantissa random, exponent in a narrow band: compressible, as real weights). */
extern "C" __global__ void fill(uint64_t *d, uint64_t n, int kind, uint64_t salt)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t r = mix(i ^ salt);

		if (kind == 1 && ((i * 8) / CHUNK) % 2)
			r = 0;
		else if (kind == 2) {
			uint64_t v = 0;

			for (int k = 0; k < 4; k++) {
				uint16_t sign = (uint16_t)((r >> (k * 16)) & 0x8000);
				uint16_t exp = (uint16_t)(118 + ((r >> (k * 16 + 8)) % 8)) << 7;
				uint16_t man = (uint16_t)((r >> (k * 16)) & 0x7f);

				v |= (uint64_t)(sign | exp | man) << (k * 16);
			}
			r = v;
		}
		d[i] = r;
	}
}

extern "C" __global__ void touch(uint64_t *d, uint64_t chunks, uint64_t every, uint64_t salt)
{
	uint64_t words = CHUNK / 8;

	for (uint64_t c = blockIdx.x; c < chunks; c += gridDim.x)
		if ((c + salt) % every == 0)
			for (uint64_t i = threadIdx.x; i < words; i += blockDim.x)
				d[c * words + i] ^= mix(i + salt) | 1;
}

extern "C" __global__ void sum(const uint64_t *d, uint64_t n, unsigned long long *out)
{
	uint64_t acc = 0;

	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		acc ^= mix(d[i] + i);
	atomicXor(out, (unsigned long long)acc);
}

int main(int argc, char **argv)
{
	uint64_t bytes = (uint64_t)(atof(argc > 1 ? argv[1] : "1") * (double)(1ull << 30));
	const char *kind_s = argc > 2 ? argv[2] : "random";
	int kind = !strcmp(kind_s, "halfzero") ? 1 : !strcmp(kind_s, "bf16") ? 2 : 0;
	uint64_t *d;
	unsigned long long *acc;
	char line[128];
	int salt = 1;

	CHECK(cudaMalloc(&d, bytes));
	CHECK(cudaMalloc(&acc, sizeof(*acc)));
	fill<<<1024, 256>>>(d, bytes / 8, kind, 42);
	CHECK(cudaDeviceSynchronize());
	printf("READY\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		double pct;

		if (sscanf(line, "touch %lf", &pct) == 1) {
			uint64_t every = (uint64_t)(100.0 / pct);

			touch<<<1024, 256>>>(d, bytes / CHUNK, every ? every : 1, salt++);
			CHECK(cudaDeviceSynchronize());
		} else if (!strncmp(line, "ping", 4)) {
			CHECK(cudaDeviceSynchronize());
		} else if (!strncmp(line, "sum", 3)) {
			unsigned long long h = 0;

			CHECK(cudaMemset(acc, 0, sizeof(*acc)));
			sum<<<1024, 256>>>(d, bytes / 8, acc);
			CHECK(cudaMemcpy(&h, acc, sizeof(h), cudaMemcpyDeviceToHost));
			printf("SUM %016llx\n", h);
		} else if (!strncmp(line, "quit", 4)) {
			break;
		}
		printf("DONE\n");
		fflush(stdout);
	}
	CHECK(cudaFree(d));
	return 0;
}
