/* multi_device: every device of the session. Enumerates them, allocates and
 * launches on each (cudaSetDevice switching, per-device streams and events,
 * a stream of one device waiting on an event of another), checks that
 * pointers say which device holds them, copies between devices
 * (cudaMemcpyPeer, cudaMemcpyPeerAsync, cudaMemcpy with unified addressing)
 * and enables and disables peer access, with the driver's errors for doing
 * it twice. With one device the peer parts are skipped with a printed
 * reason. Results are checked exactly. */
#include "check.h"

#include <vector>

extern "C" __global__ void md_fill(int *out, int base, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = base + i;
}

#define N (1 << 16)
#define DEVICES_MAX 16

static void expect_iota(const int *d, int base, const char *what)
{
	std::vector<int> h(N);

	CHECK(cudaMemcpy(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		REQUIRE(h[i] == base + i, "%s: [%d] = %d, expected %d", what, i, h[i], base + i);
}

int main(void)
{
	int count = 0;
	int *buf[DEVICES_MAX];
	cudaStream_t stream[DEVICES_MAX];
	cudaEvent_t done[DEVICES_MAX];

	CHECK(cudaGetDeviceCount(&count));
	REQUIRE(count >= 1 && count <= DEVICES_MAX, "%d devices", count);
	printf("multi_device: %d device(s)\n", count);
	for (int d = 0; d < count; d++) {
		cudaDeviceProp p;
		cudaPointerAttributes a;
		int cur = -1;

		CHECK(cudaSetDevice(d));
		CHECK(cudaGetDevice(&cur));
		REQUIRE(cur == d, "cudaGetDevice says %d after cudaSetDevice(%d)", cur, d);
		CHECK(cudaGetDeviceProperties(&p, d));
		printf("  device %d: %s, %zu MiB\n", d, p.name, p.totalGlobalMem >> 20);
		CHECK(cudaMalloc(&buf[d], N * sizeof(int)));
		CHECK(cudaStreamCreateWithFlags(&stream[d], cudaStreamNonBlocking));
		CHECK(cudaEventCreateWithFlags(&done[d], cudaEventDisableTiming));
		md_fill<<<N / 256, 256, 0, stream[d]>>>(buf[d], 1000 * (d + 1), N);
		CHECK(cudaGetLastError());
		CHECK(cudaEventRecord(done[d], stream[d]));
		CHECK(cudaPointerGetAttributes(&a, buf[d]));
		REQUIRE(a.type == cudaMemoryTypeDevice && a.device == d,
			"buffer of device %d: type %d on device %d", d, (int)a.type, a.device);
	}
	/* Allocations of distinct devices never share an address. */
	for (int d = 0; d < count; d++)
		for (int e = d + 1; e < count; e++)
			REQUIRE(buf[d] + N <= buf[e] || buf[e] + N <= buf[d], "buffers of %d and %d overlap", d, e);
	for (int d = 0; d < count; d++) {
		CHECK(cudaSetDevice(d));
		CHECK(cudaEventSynchronize(done[d]));
		expect_iota(buf[d], 1000 * (d + 1), "fill");
	}
	if (count < 2) {
		printf("multi_device: one device: peer access and copies between devices skipped\n");
	} else {
		int can01 = 0, can10 = 0, *peer = NULL;

		CHECK(cudaDeviceCanAccessPeer(&can01, 0, 1));
		CHECK(cudaDeviceCanAccessPeer(&can10, 1, 0));
		printf("multi_device: peer access 0->1 %d, 1->0 %d\n", can01, can10);
		/* Device 1's stream waits for device 0's event, then overwrites
		 * its own buffer from device 0's (a peer copy on its stream). */
		CHECK(cudaSetDevice(0));
		md_fill<<<N / 256, 256, 0, stream[0]>>>(buf[0], 7, N);
		CHECK(cudaEventRecord(done[0], stream[0]));
		CHECK(cudaSetDevice(1));
		CHECK(cudaStreamWaitEvent(stream[1], done[0], 0));
		CHECK(cudaMemcpyPeerAsync(buf[1], 1, buf[0], 0, N * sizeof(int), stream[1]));
		CHECK(cudaStreamSynchronize(stream[1]));
		expect_iota(buf[1], 7, "cudaMemcpyPeerAsync 0->1");
		/* Synchronous peer copy back, after a fill on device 1. */
		md_fill<<<N / 256, 256>>>(buf[1], 55, N);
		CHECK(cudaDeviceSynchronize());
		CHECK(cudaMemcpyPeer(buf[0], 0, buf[1], 1, N * sizeof(int)));
		expect_iota(buf[0], 55, "cudaMemcpyPeer 1->0");
		/* Unified addressing: cudaMemcpy between devices by address alone. */
		CHECK(cudaSetDevice(0));
		CHECK(cudaMalloc(&peer, N * sizeof(int)));
		CHECK(cudaMemcpy(peer, buf[1], N * sizeof(int), cudaMemcpyDefault));
		expect_iota(peer, 55, "cudaMemcpy default 1->0");
		CHECK(cudaFree(peer));
		if (can01 && can10) {
			int attr = 0;

			CHECK(cudaDeviceGetP2PAttribute(&attr, cudaDevP2PAttrAccessSupported, 0, 1));
			REQUIRE(attr == 1, "P2P access supported attribute %d", attr);
			CHECK(cudaDeviceEnablePeerAccess(1, 0));
			EXPECT_RT(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
			/* Device 0's kernel writes into device 1's memory directly. */
			md_fill<<<N / 256, 256>>>(buf[1], 99, N);
			CHECK(cudaDeviceSynchronize());
			CHECK(cudaSetDevice(1));
			expect_iota(buf[1], 99, "device 0 writing device 1's memory");
			CHECK(cudaSetDevice(0));
			CHECK(cudaDeviceDisablePeerAccess(1));
			EXPECT_RT(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
		} else {
			printf("multi_device: no peer access between devices 0 and 1: direct access skipped\n");
		}
	}
	for (int d = 0; d < count; d++) {
		CHECK(cudaSetDevice(d));
		CHECK(cudaEventDestroy(done[d]));
		CHECK(cudaStreamDestroy(stream[d]));
		CHECK(cudaFree(buf[d]));
	}
	EXPECT_RT(cudaSetDevice(count), cudaErrorInvalidDevice);
	test_pass("multi_device");
	return 0;
}
