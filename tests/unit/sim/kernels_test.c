/* CPU versions of kernels_test.cu's kernels: the plugin the sim unit tests
 * load, written the way docs/sim.md tells a test program to. `no_cpu` is
 * left out on purpose. */
#include <time.h>

#include "sim_kernel.h"

struct packed3 {
	int a;
	short b;
	char c;
};

static void vec_add(const struct sim_launch *l)
{
	const float *a = SIM_ARG(l, 0, const float *);
	const float *b = SIM_ARG(l, 1, const float *);
	float *c = SIM_ARG(l, 2, float *);
	int n = SIM_ARG(l, 3, int);

	SIM_FOR_EACH_THREAD(l, i)
		if (i < (uint64_t)n)
			c[i] = a[i] + b[i];
}

/* Sleeps first, so tests can observe work that is still pending. */
static void slow_fill(const struct sim_launch *l)
{
	unsigned *p = SIM_ARG(l, 0, unsigned *);
	unsigned value = SIM_ARG(l, 1, unsigned);
	unsigned n = SIM_ARG(l, 2, unsigned);
	unsigned ms = SIM_ARG(l, 3, unsigned);
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < n)
			p[i] = value;
}

static void poke(const struct sim_launch *l)
{
	*SIM_ARG(l, 0, volatile int *) = 1;
}

static void mixed(const struct sim_launch *l)
{
	char c = SIM_ARG(l, 0, char);
	double d = SIM_ARG(l, 1, double);
	struct packed3 s = SIM_ARG(l, 2, struct packed3);
	int *out = SIM_ARG(l, 3, int *);

	out[0] = c + (int)d + s.a + s.b + s.c;
}

static void scale(const struct sim_launch *l)
{
	float *x = SIM_ARG(l, 0, float *);
	float f = SIM_ARG(l, 1, float);
	int n = SIM_ARG(l, 2, int);

	SIM_FOR_EACH_THREAD(l, i)
		if (i < (uint64_t)n)
			x[i] *= f;
}

SIM_KERNELS_BEGIN
	SIM_KERNEL("vec_add", vec_add),
	SIM_KERNEL("slow_fill", slow_fill),
	SIM_KERNEL("poke", poke),
	SIM_KERNEL("mixed", mixed),
	SIM_KERNEL("_Z5scalePffi", scale),
SIM_KERNELS_END
