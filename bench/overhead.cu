/* overhead_bench: the workloads of bench/overhead, one per run, timed inside
 * the program so that the same binary measures native CUDA (the real
 * libcuda.so.1) and tern (the shim, through with-ternd).
 *
 *   overhead_bench WORKLOAD [--reps N] [--count N] [--bytes SIZE]
 *                  [--elems N] [--iters N] [--steps N] [--kernels N]
 *                  [--streams N] [--chunk SIZE]
 *
 * Each workload runs one warm-up repetition, then --reps timed ones (wall
 * time, clock_gettime), and prints per metric
 *
 *   RESULT <metric> <unit> <median> <rep1>,<rep2>,...
 *
 * then "PASS overhead_bench <workload>". Workloads: probe (untimed: a copy
 * and a kernel, for checking a transport), launch, launch_sync, memcpy_h2d,
 * memcpy_d2h, malloc_free, bandwidth (pinned and pageable, each way),
 * reduce, pipeline, train; docs/benchmarks.md describes each. The defaults
 * are the full run's; bench/overhead --smoke passes small sizes.
 *
 * Every result is checked (data read
 * back and compared with a host reference) and a failed check exits 1 with a
 * FAIL line, so a broken run reports no time. The kernels have CPU versions
 * in tests/cuda/sim_kernels.c, so the sim backend runs all of this too. */
#include "overhead.h"

#include <algorithm>
#include <vector>

#define BLOCK 256

extern "C" __global__ void ov_empty(void)
{
}

/* Grid-stride loops: any grid covers [0, n), as the CPU versions assume. */
extern "C" __global__ void ov_affine(unsigned *x, int n, unsigned a, unsigned b)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] = x[i] * a + b;
}

extern "C" __global__ void ov_xorshift(unsigned *x, int n, unsigned s)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] ^= x[i] >> s;
}

/* *out += the sum of x[0..n), in 64 bits (the caller zeroes *out). */
extern "C" __global__ void ov_reduce(const unsigned *x, int n, unsigned long long *out)
{
	__shared__ unsigned long long part[BLOCK];
	unsigned long long s = 0;

	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		s += x[i];
	part[threadIdx.x] = s;
	__syncthreads();
	for (int w = BLOCK / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w)
			part[threadIdx.x] += part[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		atomicAdd(out, part[0]);
}

struct opts {
	long reps;
	long count;             /* calls per repetition (micro workloads) */
	size_t bytes;           /* 0: the workload's own default (bytes_or) */
	long elems;             /* reduce, train: array length */
	long iters;             /* reduce: iterations per repetition */
	long steps;             /* train: steps per repetition */
	long kernels;           /* train: kernels per step */
	long streams;           /* pipeline */
	size_t chunk;           /* pipeline */
};

static size_t bytes_or(const struct opts *o, size_t dflt)
{
	return o->bytes ? o->bytes : dflt;
}

static int grid_for(long n)
{
	long g = (n + BLOCK - 1) / BLOCK;

	return (int)std::min(std::max(g, 1L), 1024L);
}

static unsigned pattern(size_t i, unsigned seed)
{
	unsigned x = (unsigned)i * 2654435761u ^ seed;

	return x ^ (x >> 15);
}

static void wl_probe(const struct opts *o)
{
	const int n = 1000;
	unsigned h[n], *d;

	for (int i = 0; i < n; i++)
		h[i] = (unsigned)i;
	CHECK(cudaMalloc(&d, sizeof(h)));
	CHECK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
	ov_affine<<<grid_for(n), BLOCK>>>(d, n, 3u, 7u);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++)
		REQUIRE(h[i] == (unsigned)i * 3u + 7u, "probe: d[%d] = %u", i, h[i]);
	CHECK(cudaFree(d));
}

/* Back-to-back empty launches, one synchronisation at the end. */
static void wl_launch(const struct opts *o)
{
	measure("launch_async", "us/launch", o->reps, [&](int) {
		double t0 = now();

		for (long i = 0; i < o->count; i++)
			ov_empty<<<1, 1>>>();
		CHECK(cudaGetLastError());
		CHECK(cudaDeviceSynchronize());
		return us_per(t0, o->count);
	});
}

static void wl_launch_sync(const struct opts *o)
{
	measure("launch_sync", "us/iter", o->reps, [&](int) {
		double t0 = now();

		for (long i = 0; i < o->count; i++) {
			ov_empty<<<1, 1>>>();
			CHECK(cudaStreamSynchronize(0));
		}
		CHECK(cudaGetLastError());
		return us_per(t0, o->count);
	});
}

static void wl_memcpy_h2d(const struct opts *o)
{
	unsigned *d, v = 0;

	CHECK(cudaMalloc(&d, sizeof(unsigned)));
	measure("memcpy_h2d_4b", "us/copy", o->reps, [&](int r) {
		double t0 = now(), us;

		for (long i = 0; i < o->count; i++) {
			v = (unsigned)(r * o->count + i);
			CHECK(cudaMemcpy(d, &v, sizeof(v), cudaMemcpyHostToDevice));
		}
		us = us_per(t0, o->count);
		unsigned got = 0;
		CHECK(cudaMemcpy(&got, d, sizeof(got), cudaMemcpyDeviceToHost));
		REQUIRE(got == v, "device holds %u after the copies, expected %u", got, v);
		return us;
	});
	CHECK(cudaFree(d));
}

static void wl_memcpy_d2h(const struct opts *o)
{
	unsigned *d;

	CHECK(cudaMalloc(&d, sizeof(unsigned)));
	measure("memcpy_d2h_4b", "us/copy", o->reps, [&](int r) {
		unsigned want = 0x5eed0000u + (unsigned)r, got;
		double t0;

		CHECK(cudaMemcpy(d, &want, sizeof(want), cudaMemcpyHostToDevice));
		CHECK(cudaDeviceSynchronize());
		t0 = now();
		for (long i = 0; i < o->count; i++) {
			got = 0;
			CHECK(cudaMemcpy(&got, d, sizeof(got), cudaMemcpyDeviceToHost));
			REQUIRE(got == want, "copy %ld read %u, expected %u", i, got, want);
		}
		return us_per(t0, o->count);
	});
	CHECK(cudaFree(d));
}

static void wl_malloc_free(const struct opts *o)
{
	measure("malloc_free", "us/pair", o->reps, [&](int) {
		double t0 = now();

		for (long i = 0; i < o->count; i++) {
			void *p = NULL;

			CHECK(cudaMalloc(&p, bytes_or(o, 1ull << 20)));
			REQUIRE(p != NULL, "cudaMalloc gave NULL");
			CHECK(cudaFree(p));
		}
		return us_per(t0, o->count);
	});
}

static void fill(unsigned *h, size_t words, unsigned seed)
{
	for (size_t i = 0; i < words; i++)
		h[i] = pattern(i, seed);
}

static void verify(const unsigned *h, size_t words, unsigned seed, const char *what)
{
	for (size_t i = 0; i < words; i++)
		REQUIRE(h[i] == pattern(i, seed), "%s: word %zu is %#x, expected %#x", what, i, h[i],
			pattern(i, seed));
}

/* One buffer size, pinned and pageable, each way. The D2H rows copy into a
 * zeroed buffer that must end up holding what the H2D rows wrote. */
static void wl_bandwidth(const struct opts *o)
{
	size_t words = bytes_or(o, 4ull << 30) / sizeof(unsigned), bytes = words * sizeof(unsigned);
	unsigned *d, *pinned, *pageable;
	struct {
		const char *h2d, *d2h;
		unsigned **host;
		unsigned seed;
	} kinds[] = {
		{ "pinned_h2d", "pinned_d2h", &pinned, 0x1234u },
		{ "pageable_h2d", "pageable_d2h", &pageable, 0xabcdu },
	};

	REQUIRE(words > 0, "--bytes must be at least 4");
	CHECK(cudaMalloc(&d, bytes));
	CHECK(cudaMallocHost(&pinned, bytes));
	pageable = (unsigned *)malloc(bytes);
	REQUIRE(pageable != NULL, "malloc of %zu bytes failed", bytes);
	for (auto &k : kinds) {
		unsigned *h = *k.host;

		fill(h, words, k.seed);
		measure(k.h2d, "GB/s", o->reps, [&](int) {
			double t0 = now();

			CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
			return bytes / (now() - t0) / 1e9;
		});
		memset(h, 0, bytes);
		measure(k.d2h, "GB/s", o->reps, [&](int) {
			double t0 = now();

			CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
			return bytes / (now() - t0) / 1e9;
		});
		verify(h, words, k.seed, k.d2h);
	}
	free(pageable);
	CHECK(cudaFreeHost(pinned));
	CHECK(cudaFree(d));
}

/* A loop of: zero the result, reduce the array, read the sum back. */
static void wl_reduce(const struct opts *o)
{
	int n = (int)o->elems;
	std::vector<unsigned> h(n);
	std::vector<unsigned long long> got(o->iters);
	unsigned long long want = 0, *dout;
	unsigned *dx;

	fill(h.data(), n, 0x77u);
	for (int i = 0; i < n; i++)
		want += h[i];
	CHECK(cudaMalloc(&dx, n * sizeof(unsigned)));
	CHECK(cudaMalloc(&dout, sizeof(*dout)));
	CHECK(cudaMemcpy(dx, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
	CHECK(cudaDeviceSynchronize());
	measure("reduce", "us/iter", o->reps, [&](int) {
		double t0 = now(), us;

		for (long i = 0; i < o->iters; i++) {
			CHECK(cudaMemsetAsync(dout, 0, sizeof(*dout)));
			ov_reduce<<<grid_for(n), BLOCK>>>(dx, n, dout);
			CHECK(cudaMemcpy(&got[i], dout, sizeof(*dout), cudaMemcpyDeviceToHost));
		}
		us = us_per(t0, o->iters);
		CHECK(cudaGetLastError());
		for (long i = 0; i < o->iters; i++)
			REQUIRE(got[i] == want, "iteration %ld: sum %llu, expected %llu", i, got[i], want);
		return us;
	});
	CHECK(cudaFree(dout));
	CHECK(cudaFree(dx));
}

/* Pinned input split in chunks; per chunk on stream (chunk % streams): copy
 * in, y = y * A + (B + rep), copy out to pinned output. */
static void wl_pipeline(const struct opts *o)
{
	const unsigned A = 2654435769u, B = 40503u;
	size_t chunk_words = o->chunk / sizeof(unsigned);
	size_t words = bytes_or(o, 1ull << 30) / sizeof(unsigned);
	size_t chunks = (words + chunk_words - 1) / chunk_words;
	int nstreams = (int)o->streams;
	std::vector<cudaStream_t> st(nstreams);
	std::vector<unsigned *> dbuf(nstreams);
	unsigned *in, *out;
	int last = 0;

	REQUIRE(chunk_words > 0 && words > 0 && nstreams > 0 && nstreams <= 64,
		"bad --chunk, --bytes or --streams");
	CHECK(cudaMallocHost(&in, words * sizeof(unsigned)));
	CHECK(cudaMallocHost(&out, words * sizeof(unsigned)));
	fill(in, words, 0x9e37u);
	auto check_word = [&](size_t i, unsigned r) {
		REQUIRE(out[i] == in[i] * A + B + r, "repetition %u: word %zu is %#x, expected %#x",
			r, i, out[i], in[i] * A + B + r);
	};
	for (int s = 0; s < nstreams; s++) {
		CHECK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
		CHECK(cudaMalloc(&dbuf[s], chunk_words * sizeof(unsigned)));
	}
	measure("pipeline", "ms/pass", o->reps, [&](int r) {
		double t0 = now(), ms;

		for (size_t c = 0; c < chunks; c++) {
			int s = (int)(c % nstreams);
			size_t off = c * chunk_words, len = std::min(chunk_words, words - off);

			CHECK(cudaMemcpyAsync(dbuf[s], in + off, len * sizeof(unsigned),
					      cudaMemcpyHostToDevice, st[s]));
			ov_affine<<<grid_for((long)len), BLOCK, 0, st[s]>>>(dbuf[s], (int)len, A,
									  B + (unsigned)r);
			CHECK(cudaMemcpyAsync(out + off, dbuf[s], len * sizeof(unsigned),
					      cudaMemcpyDeviceToHost, st[s]));
		}
		CHECK(cudaGetLastError());
		CHECK(cudaDeviceSynchronize());
		ms = (now() - t0) * 1e3;
		/* A sample now (each chunk's ends, every 4099th word); every word
		 * after the last repetition. */
		for (size_t c = 0; c < chunks; c++) {
			check_word(c * chunk_words, (unsigned)r);
			check_word(std::min((c + 1) * chunk_words, words) - 1, (unsigned)r);
		}
		for (size_t i = 0; i < words; i += 4099)
			check_word(i, (unsigned)r);
		last = r;
		return ms;
	});
	for (size_t i = 0; i < words; i++)
		check_word(i, (unsigned)last);
	for (int s = 0; s < nstreams; s++) {
		CHECK(cudaFree(dbuf[s]));
		CHECK(cudaStreamDestroy(st[s]));
	}
	CHECK(cudaFreeHost(out));
	CHECK(cudaFreeHost(in));
}

/* Kernel k of step s in the training loop: even k an affine map, odd k an
 * xorshift; the host reference below applies the same. */
static unsigned train_a(long s, long k)
{
	return pattern((size_t)(s * 1000 + k), 0x51u) | 1u;
}

static unsigned train_b(long s, long k)
{
	return pattern((size_t)(s * 1000 + k), 0x3bu);
}

static unsigned train_shift(long k)
{
	return 5u + (unsigned)(k % 11);
}

/* Per step: kernels - 1 small elementwise kernels, then the "loss" (a
 * reduction) read back, as a training step reads its loss. */
static void wl_train(const struct opts *o)
{
	int n = (int)o->elems;
	std::vector<unsigned> init(n), x(n);
	std::vector<unsigned long long> want(o->steps), got(o->steps);
	unsigned long long *dloss;
	unsigned *dx;

	REQUIRE(o->kernels >= 2 && o->kernels < 1000, "--kernels must be 2..999");
	fill(init.data(), n, 0x7a1u);
	x = init;
	for (long s = 0; s < o->steps; s++) {
		unsigned long long sum = 0;

		for (long k = 0; k < o->kernels - 1; k++) {
			for (int i = 0; i < n; i++)
				x[i] = k % 2 ? x[i] ^ (x[i] >> train_shift(k))
					     : x[i] * train_a(s, k) + train_b(s, k);
		}
		for (int i = 0; i < n; i++)
			sum += x[i];
		want[s] = sum;
	}
	CHECK(cudaMalloc(&dx, n * sizeof(unsigned)));
	CHECK(cudaMalloc(&dloss, sizeof(*dloss)));
	measure("train", "us/step", o->reps, [&](int) {
		double t0, us;

		CHECK(cudaMemcpy(dx, init.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
		CHECK(cudaDeviceSynchronize());
		t0 = now();
		for (long s = 0; s < o->steps; s++) {
			for (long k = 0; k < o->kernels - 1; k++) {
				if (k % 2)
					ov_xorshift<<<grid_for(n), BLOCK>>>(dx, n, train_shift(k));
				else
					ov_affine<<<grid_for(n), BLOCK>>>(dx, n, train_a(s, k),
									  train_b(s, k));
			}
			CHECK(cudaMemsetAsync(dloss, 0, sizeof(*dloss)));
			ov_reduce<<<grid_for(n), BLOCK>>>(dx, n, dloss);
			CHECK(cudaMemcpy(&got[s], dloss, sizeof(*dloss), cudaMemcpyDeviceToHost));
		}
		us = us_per(t0, o->steps);
		CHECK(cudaGetLastError());
		for (long s = 0; s < o->steps; s++)
			REQUIRE(got[s] == want[s], "step %ld: loss %llu, expected %llu", s, got[s],
				want[s]);
		return us;
	});
	CHECK(cudaFree(dloss));
	CHECK(cudaFree(dx));
}

static size_t parse_size(const char *text)
{
	char *end;
	double v = strtod(text, &end);
	size_t mul = 1;

	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	}
	REQUIRE(end != text && !*end && v >= 0, "bad size %s", text);
	return (size_t)(v * mul);
}

static const struct workload {
	const char *name;
	void (*run)(const struct opts *o);
} workloads[] = {
	{ "probe", wl_probe },
	{ "launch", wl_launch },
	{ "launch_sync", wl_launch_sync },
	{ "memcpy_h2d", wl_memcpy_h2d },
	{ "memcpy_d2h", wl_memcpy_d2h },
	{ "malloc_free", wl_malloc_free },
	{ "bandwidth", wl_bandwidth },
	{ "reduce", wl_reduce },
	{ "pipeline", wl_pipeline },
	{ "train", wl_train },
};

/* An option sets one field of struct opts: a count, or a size with K, M or G. */
struct option_def {
	const char *name;
	long *count;
	size_t *size;
};

template <size_t N> static int usage(const struct option_def (&options)[N])
{
	fprintf(stderr, "usage: overhead_bench WORKLOAD");
	for (const auto &d : options)
		fprintf(stderr, " [%s %s]", d.name, d.count ? "N" : "SIZE");
	fprintf(stderr, "\nworkloads:");
	for (const auto &w : workloads)
		fprintf(stderr, " %s", w.name);
	fprintf(stderr, "\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct opts o = { 5, 20000, 0, 1l << 26, 100, 100, 50, 4, 8ull << 20 };
	const struct option_def options[] = {
		{ "--reps", &o.reps, NULL },
		{ "--count", &o.count, NULL },
		{ "--bytes", NULL, &o.bytes },
		{ "--elems", &o.elems, NULL },
		{ "--iters", &o.iters, NULL },
		{ "--steps", &o.steps, NULL },
		{ "--kernels", &o.kernels, NULL },
		{ "--streams", &o.streams, NULL },
		{ "--chunk", NULL, &o.chunk },
	};
	const struct workload *w = NULL;

	if (argc < 2)
		return usage(options);
	for (const auto &c : workloads)
		if (!strcmp(argv[1], c.name))
			w = &c;
	if (!w)
		return usage(options);
	for (int i = 2; i < argc; i += 2) {
		const struct option_def *opt = NULL;

		for (const auto &d : options)
			if (!strcmp(argv[i], d.name))
				opt = &d;
		if (!opt || i + 1 >= argc)
			return usage(options);
		if (opt->count)
			*opt->count = atol(argv[i + 1]);
		else
			*opt->size = parse_size(argv[i + 1]);
	}
	REQUIRE(o.reps > 0 && o.reps <= 1000 && o.count > 0 && o.iters > 0 && o.steps > 0 &&
		o.elems > 0 && o.elems < (1l << 31), "an option is out of range");
	w->run(&o);
	printf("PASS overhead_bench %s\n", w->name);
	return 0;
}
