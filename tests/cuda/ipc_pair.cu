/* ipc_pair: CUDA IPC between two processes (two tern sessions of one ternd).
 * The process forks before either touches CUDA (as CUDA requires). The
 * parent (A) allocates and fills a buffer and passes its memory handle, and
 * an interprocess event's handle, to the child (B) over a pipe. B opens the
 * memory, checks A's data, overwrites it with a kernel, records the event
 * after the kernel, closes the memory and tells A. A waits on the event and
 * sees B's data. Where the device cannot share events (the sim), the event
 * part is skipped with a printed reason and B synchronises instead.
 *
 * With two devices a second round puts A's buffer on device 1 while B stays
 * on device 0: B opens it with cudaIpcMemLazyEnablePeerAccess and its
 * kernel on device 0 writes device 1's memory (synchronised, no event). */
#include "check.h"

#include <sys/wait.h>
#include <unistd.h>

#include <vector>

extern "C" __global__ void ip_fill(int *out, int base, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = base + i;
}

#define N (1 << 16)

struct msg {
	cudaIpcMemHandle_t mem;
	cudaIpcEventHandle_t ev;
	int have_event;
	int base;               /* what A wrote; B writes base + 489 */
	int last;               /* no round follows */
};

static void xfer(int fd, void *p, size_t n, bool out)
{
	char *c = (char *)p;

	while (n) {
		ssize_t k = out ? write(fd, c, n) : read(fd, c, n);

		REQUIRE(k > 0, "pipe %s failed", out ? "write" : "read");
		c += k;
		n -= (size_t)k;
	}
}

static void check_iota(const int *d, int base, const char *who)
{
	std::vector<int> h(N);

	CHECK(cudaMemcpy(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		REQUIRE(h[i] == base + i, "%s: [%d] = %d, expected %d", who, i, h[i], base + i);
}

static int child(int in, int out)
{
	struct msg m;

	do {
		cudaEvent_t ev = NULL;
		int *p = NULL, ok = 1;

		xfer(in, &m, sizeof(m), false);
		CHECK(cudaSetDevice(0));
		CHECK(cudaIpcOpenMemHandle((void **)&p, m.mem, cudaIpcMemLazyEnablePeerAccess));
		check_iota(p, m.base, "B reading A's buffer");
		if (m.have_event)
			CHECK(cudaIpcOpenEventHandle(&ev, m.ev));
		ip_fill<<<N / 256, 256>>>(p, m.base + 489, N);
		CHECK(cudaGetLastError());
		if (ev) {
			CHECK(cudaEventRecord(ev, 0));
			CHECK(cudaEventSynchronize(ev));
		} else {
			CHECK(cudaDeviceSynchronize());
		}
		CHECK(cudaIpcCloseMemHandle(p));
		/* A closed mapping is gone for this process. */
		EXPECT_RT(cudaIpcCloseMemHandle(p), cudaErrorInvalidValue);
		(void)cudaGetLastError();       /* cudart keeps that error for the next check */
		if (ev)
			CHECK(cudaEventDestroy(ev));
		xfer(out, &ok, sizeof(ok), true);
	} while (!m.last);
	return 0;
}

/* One round on A's side: a buffer on @device, shared with B. */
static int round_a(int to_b, int to_a, int device, int base, bool last)
{
	struct msg m = {};
	cudaEvent_t ev = NULL;
	cudaError_t e;
	int *buf, ok = 0;

	m.base = base;
	m.last = last;
	CHECK(cudaSetDevice(device));
	CHECK(cudaMalloc(&buf, N * sizeof(int)));
	ip_fill<<<N / 256, 256>>>(buf, base, N);
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaIpcGetMemHandle(&m.mem, buf));
	/* B records the event on device 0's stream: only a device 0 event. */
	if (device == 0) {
		CHECK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
		e = cudaIpcGetEventHandle(&m.ev, ev);
		if (e == cudaErrorNotSupported) {
			printf("ipc_pair: this device cannot share events between processes: event part skipped\n");
			(void)cudaGetLastError();
		} else {
			CHECK(e);
			m.have_event = 1;
		}
	}
	xfer(to_b, &m, sizeof(m), true);
	xfer(to_a, &ok, sizeof(ok), false);
	REQUIRE(ok == 1, "B reported %d", ok);
	if (m.have_event)
		CHECK(cudaEventSynchronize(ev));
	check_iota(buf, base + 489, "A reading B's writes");
	if (ev)
		CHECK(cudaEventDestroy(ev));
	CHECK(cudaFree(buf));
	return m.have_event;
}

int main(void)
{
	int to_b[2], to_a[2], status = 0, devices = 0, have_event;
	pid_t pid;

	REQUIRE(pipe(to_b) == 0 && pipe(to_a) == 0, "pipes");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		close(to_b[1]);
		close(to_a[0]);
		return child(to_b[0], to_a[1]);
	}
	close(to_b[0]);
	close(to_a[1]);
	CHECK(cudaGetDeviceCount(&devices));
	have_event = round_a(to_b[1], to_a[0], 0, 11, devices < 2);
	if (devices >= 2)
		round_a(to_b[1], to_a[0], 1, 1011, true);
	REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		"B exited with status 0x%x", status);
	printf("ipc_pair: %s%s\n", have_event ? "memory and event" : "memory only",
	       devices >= 2 ? "; memory of device 1 opened and written on device 0" : "");
	test_pass("ipc_pair");
	return 0;
}
