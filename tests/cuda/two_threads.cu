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
 *   two_threads scaling [ITERATIONS] [KERNEL_US] [MIN] [--reps N]
 *                                each iteration a kernel that runs KERNEL_US
 *                                on the thread's own stream, then
 *                                cuStreamSynchronize: ITERATIONS of them on
 *                                one thread alone, then on two threads at
 *                                once. The device runs the two threads'
 *                                kernels side by side, so two threads do
 *                                twice the work in the time of one, unless
 *                                one thread's synchronisation holds the
 *                                other's calls. Prints the times and the
 *                                throughput scaling (2.0: perfect, 1.0: the
 *                                threads serialised; RESULT lines for
 *                                bench/overhead, median of N repetitions)
 *                                and fails below MIN (0: no check; the sim
 *                                runs every kernel on one device thread, so
 *                                it scales 1.0 whatever tern does).
 *
 * A watchdog fails the program instead of letting it hang: a deadlock
 * through tern is exit 1 after TWO_THREADS_TIMEOUT_S (default 20) seconds.
 * Runs natively on a GPU as well (tools/gpu-check).
 */
#include "check.h"

#include <algorithm>
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

/* Busy for @us microseconds of the device's clock (the sim's CPU version
 * sleeps as long, tests/cuda/sim_kernels.c). */
extern "C" __global__ void tt_spin(unsigned us)
{
	unsigned long long t0, t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while (t - t0 < us * 1000ull);
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

struct scaling_thread {
	CUstream s;
	int iterations;
	unsigned us;
	pthread_barrier_t *start;
};

static void *scaling_main(void *arg)
{
	struct scaling_thread *t = (struct scaling_thread *)arg;

	CHECK(cudaSetDevice(0));
	pthread_barrier_wait(t->start);
	for (int i = 0; i < t->iterations; i++) {
		tt_spin<<<1, 1, 0, (cudaStream_t)t->s>>>(t->us);
		CHECK(cudaGetLastError());
		CHECK_DRV(p_sync(t->s));
		progress++;
	}
	return NULL;
}

/* Wall time of @threads threads doing @iterations each, started together. */
static double scaling_run(struct scaling_thread *ts, int threads)
{
	pthread_barrier_t start;
	pthread_t ids[2];
	double t0;

	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++) {
		ts[i].start = &start;
		REQUIRE(!pthread_create(&ids[i], NULL, scaling_main, &ts[i]), "thread");
	}
	pthread_barrier_wait(&start);
	t0 = now_s();
	for (int i = 0; i < threads; i++)
		pthread_join(ids[i], NULL);
	t0 = now_s() - t0;
	pthread_barrier_destroy(&start);
	return t0;
}

static double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

static void result_print(const char *metric, const char *unit, const std::vector<double> &v)
{
	printf("RESULT %s %s %g ", metric, unit, median(v));
	for (size_t i = 0; i < v.size(); i++)
		printf("%s%g", i ? "," : "", v[i]);
	printf("\n");
}

static int run_scaling(int iterations, unsigned us, double min, int reps)
{
	struct scaling_thread ts[2];
	std::vector<double> one, two, scale;

	stage = "scaling";
	for (int i = 0; i < 2; i++) {
		CHECK(cudaStreamCreateWithFlags((cudaStream_t *)&ts[i].s, cudaStreamNonBlocking));
		ts[i].iterations = iterations;
		ts[i].us = us;
	}
	/* One warm-up repetition, then the timed ones. */
	for (int r = 0; r <= reps; r++) {
		double t1 = scaling_run(ts, 1), t2 = scaling_run(ts, 2);

		if (!r)
			continue;
		one.push_back(t1 / iterations * 1e6);
		two.push_back(t2 / iterations * 1e6);
		scale.push_back(2 * t1 / t2);
	}
	for (int i = 0; i < 2; i++)
		CHECK(cudaStreamDestroy((cudaStream_t)ts[i].s));
	result_print("threads_one", "us/iter", one);
	result_print("threads_two", "us/iter", two);
	result_print("threads_scaling", "x", scale);
	printf("scaling: %d iterations of a %u us kernel and a stream synchronisation: one thread %.1f us "
	       "each, two threads %.1f us each at once: throughput x%.2f\n", iterations, us, median(one),
	       median(two), median(scale));
	REQUIRE(min <= 0 || median(scale) >= min,
		"two threads did %.2f times the work of one in the same time, expected at least %.2f: "
		"one thread's synchronisation holds the other's calls", median(scale), min);
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
	else if (!strcmp(mode, "scaling")) {
		int reps = 3, pos = 0;
		const char *num[3] = { "200", "2000", "0" };

		for (int i = 2; i < argc; i++) {
			if (!strcmp(argv[i], "--reps") && i + 1 < argc)
				reps = atoi(argv[++i]);
			else if (pos < 3)
				num[pos++] = argv[i];
		}
		REQUIRE(reps > 0 && atoi(num[0]) > 0, "scaling: ITERATIONS and --reps must be positive");
		run_scaling(atoi(num[0]), (unsigned)atoi(num[1]), atof(num[2]), reps);
	}
	else
		REQUIRE(false, "unknown mode %s", mode);
	printf("PASS two_threads %s\n", mode);
	return 0;
}
