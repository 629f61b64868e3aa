// Pinned host memory without copies in between.
//
// 1. Mapped pinned memory (cudaHostAllocMapped): a kernel writes the host
//    buffer through its device pointer and the program reads the bytes with
//    no copy call; the host writes the next input and the next kernel reads
//    it. Natively this is the driver's zero copy; through tern's shm
//    transport the buffer is a memfd both processes map, registered with the
//    driver by the worker; over unix and tcp it is device memory with a host
//    mirror at the same address, coherent at launches and synchronisation
//    (docs/wire-protocol.md, "Mapped pinned memory").
// 2. The same after each way of waiting for a kernel: a stream's
//    synchronisation, an event's, a stream query that reports completion;
//    the flags and pointer attributes of mapped memory; the host pointer
//    itself handed to a kernel (unified addressing).
// 3. A malloc'd buffer registered with cudaHostRegisterMapped: kernels reach
//    it through its device pointer, the host through its own.
// 4. Async copies to and from pinned memory in a loop on two streams, each
//    round checked: the copies run as DMA on the program's own pages.
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

static int32_t affine_want(int32_t in, int32_t k, int32_t i)
{
	return (int32_t)((uint32_t)in * (uint32_t)k + (uint32_t)i);
}

/* out[i] == in[i] * k + i for every i, else a FAIL line naming @what. */
static int affine_check(const char *what, const int32_t *in, const int32_t *out, int32_t k, int32_t n)
{
	for (int32_t i = 0; i < n; i++) {
		if (out[i] != affine_want(in[i], k, i)) {
			fprintf(stderr, "FAIL: %s: out[%d] = %d, want %d\n", what, i, out[i],
				affine_want(in[i], k, i));
			return 1;
		}
	}
	return 0;
}

static void affine_fill(int32_t *in, int32_t *out, int32_t n, int32_t seed)
{
	for (int32_t i = 0; i < n; i++) {
		in[i] = i ^ (seed * 7919);
		out[i] = -1;
	}
}

static int mapped_round_trip(void)
{
	const int32_t n = 1 << 16;
	int32_t *in, *out, *d_in, *d_out;

	CHECK(cudaHostAlloc((void **)&in, n * sizeof(int32_t), cudaHostAllocMapped));
	CHECK(cudaHostAlloc((void **)&out, n * sizeof(int32_t), cudaHostAllocMapped));
	CHECK(cudaHostGetDevicePointer((void **)&d_in, in, 0));
	CHECK(cudaHostGetDevicePointer((void **)&d_out, out, 0));
	for (int32_t round = 0; round < 4; round++) {
		affine_fill(in, out, n, round);
		zc_affine<<<64, 256>>>(d_in, d_out, round + 2, n);
		CHECK(cudaGetLastError());
		CHECK(cudaDeviceSynchronize());
		if (affine_check("mapped, device synchronised", in, out, round + 2, n))
			return 1;
	}
	CHECK(cudaFreeHost(in));
	CHECK(cudaFreeHost(out));
	printf("mapped host memory: 4 rounds written by kernels, read without copies\n");
	return 0;
}

/* Each way of waiting for a kernel that wrote mapped memory, on a stream of
 * its own; and a kernel given the host pointers themselves. */
static int mapped_waits(void)
{
	const int32_t n = 3 * 4096 + 17;        /* pages and a part of one */
	int32_t *in, *out, *d_in, *d_out;
	unsigned flags = 0;
	cudaPointerAttributes attr;
	cudaStream_t s;
	cudaEvent_t done;

	CHECK(cudaHostAlloc((void **)&in, n * sizeof(int32_t), cudaHostAllocMapped | cudaHostAllocPortable));
	CHECK(cudaHostAlloc((void **)&out, n * sizeof(int32_t), cudaHostAllocMapped));
	CHECK(cudaHostGetFlags(&flags, in));
	REQUIRE(flags & cudaHostAllocMapped, "cudaHostGetFlags of mapped memory: %#x", flags);
	REQUIRE(flags & cudaHostAllocPortable, "cudaHostGetFlags of portable memory: %#x", flags);
	CHECK(cudaHostGetDevicePointer((void **)&d_in, in, 0));
	CHECK(cudaHostGetDevicePointer((void **)&d_out, out, 0));
	CHECK(cudaPointerGetAttributes(&attr, out + 5));
	REQUIRE(attr.type == cudaMemoryTypeHost, "mapped memory's type %d", (int)attr.type);
	REQUIRE(attr.devicePointer == (void *)(d_out + 5) && attr.hostPointer == (void *)(out + 5),
		"mapped memory's pointers %p %p, want %p %p", attr.devicePointer, attr.hostPointer,
		(void *)(d_out + 5), (void *)(out + 5));
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaEventCreate(&done));

	affine_fill(in, out, n, 11);
	zc_affine<<<16, 128, 0, s>>>(d_in, d_out, 3, n);
	CHECK(cudaStreamSynchronize(s));
	if (affine_check("mapped, stream synchronised", in, out, 3, n))
		return 1;

	/* The host's writes since the last kernel reach the next one. */
	for (int32_t i = 0; i < n; i += 3)
		in[i] = -i;
	zc_affine<<<16, 128, 0, s>>>(d_in, d_out, 5, n);
	CHECK(cudaEventRecord(done, s));
	CHECK(cudaEventSynchronize(done));
	if (affine_check("mapped, event synchronised", in, out, 5, n))
		return 1;

	affine_fill(in, out, n, 12);
	zc_affine<<<16, 128, 0, s>>>(d_in, d_out, 7, n);
	while (cudaStreamQuery(s) == cudaErrorNotReady)
		;
	CHECK(cudaGetLastError());
	if (affine_check("mapped, stream query", in, out, 7, n))
		return 1;

	/* Under unified addressing the host pointer is the device pointer of
	 * memory cudaHostAlloc made. Through tern that holds unless the worker
	 * found the guest's address taken (shm, ivshmem: docs/limits.md). */
	REQUIRE(getenv("TERN_SERVER") || (d_in == in && d_out == out),
		"natively the device pointers %p %p are not the host pointers %p %p", (void *)d_in,
		(void *)d_out, (void *)in, (void *)out);
	if (d_in == in && d_out == out) {
		affine_fill(in, out, n, 13);
		zc_affine<<<16, 128>>>(in, out, 9, n);
		CHECK(cudaDeviceSynchronize());
		if (affine_check("mapped, host pointers in the kernel", in, out, 9, n))
			return 1;
	} else {
		printf("mapped host memory: the device pointer is not the host pointer here\n");
	}

	CHECK(cudaEventDestroy(done));
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFreeHost(in));
	CHECK(cudaFreeHost(out));
	printf("mapped host memory: read after stream, event and query waits; flags, attributes, host pointers\n");
	return 0;
}

/* malloc'd memory registered as mapped: the device pointer in kernels, the
 * host's own pointer on the host, written by either side in turn. */
static int registered_mapped(void)
{
	const int32_t n = 5000;                 /* not a whole number of pages */
	int32_t *buf, *d_buf, *in, *out;
	unsigned flags = 0;

	buf = (int32_t *)malloc(2 * n * sizeof(int32_t));
	REQUIRE(buf, "malloc");
	in = buf;
	out = buf + n;
	CHECK(cudaHostRegister(buf, 2 * n * sizeof(int32_t), cudaHostRegisterMapped));
	CHECK(cudaHostGetFlags(&flags, buf));
	REQUIRE(flags & cudaHostRegisterMapped, "cudaHostGetFlags of registered memory: %#x", flags);
	CHECK(cudaHostGetDevicePointer((void **)&d_buf, buf, 0));
	for (int32_t round = 0; round < 3; round++) {
		affine_fill(in, out, n, 20 + round);
		zc_affine<<<8, 128>>>(d_buf, d_buf + n, round + 2, n);
		CHECK(cudaDeviceSynchronize());
		if (affine_check("registered mapped", in, out, round + 2, n))
			return 1;
	}
	CHECK(cudaHostUnregister(buf));
	free(buf);
	printf("registered mapped memory: 3 rounds through its device pointer\n");
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
	if (mapped_round_trip() || mapped_waits() || registered_mapped() || async_copies())
		return 1;
	printf("PASS pinned_zero_copy\n");
	return 0;
}
