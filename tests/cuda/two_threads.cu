/* two_threads: one thread's synchronisation must not hold another thread's
 * calls (issue 12, item 8).
 *
 *   two_threads pair [ROUNDS]    thread A queues cuStreamWaitValue32 on its
 *                                stream and then waits in cuStreamSynchronize
 *                                (odd rounds: cudaDeviceSynchronize); thread B, once
 *                                A waits, releases it with cuStreamWriteValue32
 *                                on another stream. A must return, with the
 *                                write A's stream made after the wait done.
 *   two_threads stress [THREADS] [ITERATIONS]
 *                                threads in pairs: the even one of each pair
 *                                waits (value wait, then a stream, context or
 *                                copy synchronisation) for the value its odd
 *                                partner writes every iteration, both launch
 *                                kernels and copy between; every result is
 *                                checked exactly.
 *
 * A watchdog fails the program instead of letting it hang: a deadlock
 * through tern is exit 1 after TWO_THREADS_TIMEOUT_S (default 20) seconds.
 * Runs natively on a GPU as well (tools/gpu-check).
 */
#include "check.h"

#include <atomic>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <vector>

extern "C" __global__ void se_scale_add(const int *x, int *y, int k, int add, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		y[i] = x[i] * k + add;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static std::atomic<int> progress;       /* bumped by every finished step */
static const char *stage = "start";

static void *watchdog(void *arg)
{
	int limit = *(int *)arg, last = -1;
	double since = now_s();

	for (;;) {
		sleep_ms(100);
		int now = progress.load();

		if (now != last) {
			last = now;
			since = now_s();
		} else if (now_s() - since > limit) {
			fprintf(stderr, "FAIL: no progress for %d s (%s): a synchronisation holds the "
				"other thread's calls\n", limit, stage);
			fflush(stderr);
			_exit(1);
		}
	}
	return NULL;
}

static decltype(&cuStreamWaitValue32) p_wait;
static decltype(&cuStreamWriteValue32) p_write;
static decltype(&cuStreamSynchronize) p_sync;

struct pair_round {
	CUstream a, b;
	CUdeviceptr flag, out;
	unsigned value;
	bool ctx_sync;
	std::atomic<int> a_waiting;
	double released_at, returned_at;
};

static void *pair_a(void *arg)
{
	struct pair_round *r = (struct pair_round *)arg;

	CHECK(cudaSetDevice(0));
	CHECK_DRV(p_wait(r->a, r->flag, r->value, CU_STREAM_WAIT_VALUE_GEQ));
	CHECK_DRV(p_write(r->a, r->out, r->value * 3, 0));
	r->a_waiting = 1;
	if (r->ctx_sync)
		CHECK(cudaDeviceSynchronize());
	else
		CHECK_DRV(p_sync(r->a));
	r->returned_at = now_s();
	return NULL;
}

static void *pair_b(void *arg)
{
	struct pair_round *r = (struct pair_round *)arg;

	CHECK(cudaSetDevice(0));
	while (!r->a_waiting.load())
		sleep_ms(1);
	sleep_ms(20);           /* A is inside its synchronisation by now */
	r->released_at = now_s();
	CHECK_DRV(p_write(r->b, r->flag, r->value, 0));
	CHECK_DRV(p_sync(r->b));
	return NULL;
}

static int run_pair(int rounds)
{
	CUdeviceptr d;
	double worst = 0, total = 0;

	CHECK(cudaMalloc((void **)&d, 256));
	CHECK(cudaMemset((void *)d, 0, 256));
	for (int i = 0; i < rounds; i++) {
		struct pair_round r;
		pthread_t ta, tb;
		unsigned got = 0;

		r.flag = d;
		r.out = d + 64;
		r.value = (unsigned)i + 1;
		r.ctx_sync = i & 1;
		r.a_waiting = 0;
		CHECK(cudaStreamCreateWithFlags((cudaStream_t *)&r.a, cudaStreamNonBlocking));
		CHECK(cudaStreamCreateWithFlags((cudaStream_t *)&r.b, cudaStreamNonBlocking));
		stage = r.ctx_sync ? "thread A in cuCtxSynchronize" : "thread A in cuStreamSynchronize";
		REQUIRE(!pthread_create(&ta, NULL, pair_a, &r), "thread");
		REQUIRE(!pthread_create(&tb, NULL, pair_b, &r), "thread");
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		CHECK(cudaMemcpy(&got, (void *)r.out, 4, cudaMemcpyDeviceToHost));
		REQUIRE(got == r.value * 3, "round %d: A's stream wrote %u, expected %u", i, got, r.value * 3);
		double lag = r.returned_at - r.released_at;

		total += lag;
		if (lag > worst)
			worst = lag;
		CHECK(cudaStreamDestroy((cudaStream_t)r.a));
		CHECK(cudaStreamDestroy((cudaStream_t)r.b));
		progress++;
	}
	CHECK(cudaFree((void *)d));
	printf("pair: %d rounds (stream and context synchronisation), A returned %.3f ms after B's "
	       "write on average, %.3f ms at worst\n", rounds, total / rounds * 1e3, worst * 1e3);
	return 0;
}

struct stress_thread {
	int index, iterations, n;
	CUstream s;
	CUdeviceptr flag;               /* the pair's: written by the odd one */
	int *x, *y;
	unsigned long long checksum;
};

static void *stress_main(void *arg)
{
	struct stress_thread *t = (struct stress_thread *)arg;
	bool waiter = !(t->index & 1);
	int *host;

	CHECK(cudaSetDevice(0));
	/* Pinned: the driver runs copies to pageable memory through shared
	 * staging, one at a time, and waits for each inside the call.  A
	 * waiter's copy queued behind its value wait would then hold every
	 * other thread's copy, its partner's among them, before the partner
	 * has written the value: a deadlock of the native run, not of the
	 * synchronisation under test. */
	CHECK(cudaMallocHost((void **)&host, t->n * sizeof(int)));
	for (int it = 1; it <= t->iterations; it++) {
		int k = t->index + 2, add = it;

		se_scale_add<<<4, 128, 0, (cudaStream_t)t->s>>>(t->x, t->y, k, add, t->n);
		CHECK(cudaGetLastError());
		if (waiter) {
			CHECK_DRV(p_wait(t->s, t->flag, (unsigned)it, CU_STREAM_WAIT_VALUE_GEQ));
			switch (it % 3) {
			case 0:
				CHECK_DRV(p_sync(t->s));
				break;
			case 1:
				CHECK(cudaDeviceSynchronize());
				break;
			default:
				break;          /* the copy below waits */
			}
		} else {
			if (it % 4 == 0)
				sleep_ms(1);
			CHECK_DRV(p_write(t->s, t->flag, (unsigned)it, 0));
		}
		CHECK(cudaMemcpyAsync(host, t->y, t->n * sizeof(int), cudaMemcpyDeviceToHost,
				      (cudaStream_t)t->s));
		CHECK(cudaStreamSynchronize((cudaStream_t)t->s));
		for (int i = 0; i < t->n; i++) {
			REQUIRE(host[i] == i * k + add, "thread %d iteration %d: y[%d] = %d, expected %d",
				t->index, it, i, host[i], i * k + add);
			t->checksum += (unsigned)host[i];
		}
		progress++;
	}
	CHECK(cudaFreeHost(host));
	return NULL;
}

static int run_stress(int threads, int iterations)
{
	std::vector<struct stress_thread> ts(threads);
	std::vector<pthread_t> ids(threads);
	std::vector<int> x(4096);
	CUdeviceptr flags;
	unsigned long long sum = 0, want = 0;
	double t0 = now_s();

	for (int i = 0; i < 4096; i++)
		x[i] = i;
	CHECK(cudaMalloc((void **)&flags, 64 * threads));
	CHECK(cudaMemset((void *)flags, 0, 64 * threads));
	stage = "stress";
	for (int i = 0; i < threads; i++) {
		struct stress_thread *t = &ts[i];

		t->index = i;
		t->iterations = iterations;
		t->n = 1024 + 256 * (i % 4);
		t->flag = flags + 64 * (i / 2);
		t->checksum = 0;
		CHECK(cudaStreamCreateWithFlags((cudaStream_t *)&t->s, cudaStreamNonBlocking));
		CHECK(cudaMalloc((void **)&t->x, t->n * sizeof(int)));
		CHECK(cudaMalloc((void **)&t->y, t->n * sizeof(int)));
		CHECK(cudaMemcpy(t->x, x.data(), t->n * sizeof(int), cudaMemcpyHostToDevice));
		for (int it = 1; it <= iterations; it++)
			for (int j = 0; j < t->n; j++)
				want += (unsigned)(j * (i + 2) + it);
	}
	for (int i = 0; i < threads; i++)
		REQUIRE(!pthread_create(&ids[i], NULL, stress_main, &ts[i]), "thread");
	for (int i = 0; i < threads; i++) {
		pthread_join(ids[i], NULL);
		sum += ts[i].checksum;
	}
	REQUIRE(sum == want, "checksum %llu, expected %llu", sum, want);
	for (int i = 0; i < threads; i++) {
		CHECK(cudaFree(ts[i].x));
		CHECK(cudaFree(ts[i].y));
		CHECK(cudaStreamDestroy((cudaStream_t)ts[i].s));
	}
	CHECK(cudaFree((void *)flags));
	printf("stress: %d threads x %d iterations in %.2f s, checksum %llu\n", threads, iterations,
	       now_s() - t0, sum);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "pair";
	const char *env = getenv("TWO_THREADS_TIMEOUT_S");
	int limit = env && atoi(env) > 0 ? atoi(env) : 20;
	pthread_t dog;

	REQUIRE(!pthread_create(&dog, NULL, watchdog, &limit), "watchdog");
	CHECK(cudaSetDevice(0));
	CHECK(cudaFree(0));
	p_wait = (decltype(p_wait))drv_sym("cuStreamWaitValue32");
	p_write = (decltype(p_write))drv_sym("cuStreamWriteValue32");
	p_sync = (decltype(p_sync))drv_sym("cuStreamSynchronize");
	if (!strcmp(mode, "pair"))
		run_pair(argc > 2 ? atoi(argv[2]) : 10);
	else if (!strcmp(mode, "stress"))
		run_stress(argc > 2 ? atoi(argv[2]) : 8, argc > 3 ? atoi(argv[3]) : 50);
	else
		REQUIRE(false, "unknown mode %s", mode);
	printf("PASS two_threads %s\n", mode);
	return 0;
}
