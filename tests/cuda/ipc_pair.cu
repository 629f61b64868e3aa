/* ipc_pair: CUDA IPC between two processes (two tern sessions of one ternd).
 * The process forks before either touches CUDA (as CUDA requires). The
 * parent (A) allocates and fills a buffer and passes its memory handle, and
 * an interprocess event's handle, to the child (B) over a pipe. B opens the
 * memory, checks A's data, overwrites it with a kernel, records the event
 * after the kernel, closes the memory and tells A. A waits on the event and
 * sees B's data. Where the device cannot share events (the sim), the event
 * part is skipped with a printed reason and B synchronises instead. */
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
	cudaEvent_t ev = NULL;
	int *p = NULL, ok = 1;

	xfer(in, &m, sizeof(m), false);
	CHECK(cudaIpcOpenMemHandle((void **)&p, m.mem, cudaIpcMemLazyEnablePeerAccess));
	check_iota(p, 11, "B reading A's buffer");
	if (m.have_event)
		CHECK(cudaIpcOpenEventHandle(&ev, m.ev));
	ip_fill<<<N / 256, 256>>>(p, 500, N);
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
	if (ev)
		CHECK(cudaEventDestroy(ev));
	xfer(out, &ok, sizeof(ok), true);
	return 0;
}

int main(void)
{
	int to_b[2], to_a[2], ok = 0, status = 0;
	struct msg m = {};
	cudaEvent_t ev;
	cudaError_t e;
	int *buf;
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
	CHECK(cudaMalloc(&buf, N * sizeof(int)));
	ip_fill<<<N / 256, 256>>>(buf, 11, N);
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaIpcGetMemHandle(&m.mem, buf));
	CHECK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
	e = cudaIpcGetEventHandle(&m.ev, ev);
	if (e == cudaErrorNotSupported) {
		printf("ipc_pair: this device cannot share events between processes: event part skipped\n");
		(void)cudaGetLastError();
	} else {
		CHECK(e);
		m.have_event = 1;
	}
	xfer(to_b[1], &m, sizeof(m), true);
	xfer(to_a[0], &ok, sizeof(ok), false);
	REQUIRE(ok == 1, "B reported %d", ok);
	if (m.have_event)
		CHECK(cudaEventSynchronize(ev));
	check_iota(buf, 500, "A reading B's writes");
	REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		"B exited with status 0x%x", status);
	CHECK(cudaEventDestroy(ev));
	CHECK(cudaFree(buf));
	printf("ipc_pair: %s\n", m.have_event ? "memory and event" : "memory only");
	test_pass("ipc_pair");
	return 0;
}
