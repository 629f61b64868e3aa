/* CPU versions of the test programs' kernels, for ternd's sim backend
 * (loaded with `ternd --backend sim --sim-kernels libtern_test_kernels.so`;
 * see replayer/backend/sim/sim_kernel.h). Each mirrors its .cu kernel exactly,
 * including integer wrap-around, so the programs' exact checks hold on sim.
 *
 * Every kernel first checks the argument count and sizes the sim took from
 * the image. On a mismatch it logs and writes nothing, so the program's own
 * check fails instead of the kernel reading past an argument. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sim_kernel.h"
#include "kernel_args.h"
#include "ckpt_extra.h"

static int args_ok(const struct sim_launch *l, const char *kernel, uint32_t count,
		   const uint32_t *sizes)
{
	if (l->param_count != count) {
		fprintf(stderr, "tern_test_kernels: %s: %u arguments, expected %u\n", kernel,
			l->param_count, count);
		return 0;
	}
	for (uint32_t i = 0; i < count; i++) {
		if (l->param_sizes[i] != sizes[i]) {
			fprintf(stderr, "tern_test_kernels: %s: argument %u is %u bytes, expected %u\n",
				kernel, i, l->param_sizes[i], sizes[i]);
			return 0;
		}
	}
	return 1;
}

#define ARGS_OK(l, ...)                                                        \
	args_ok((l), __func__, sizeof((const uint32_t[]){ __VA_ARGS__ }) / sizeof(uint32_t), \
		(const uint32_t[]){ __VA_ARGS__ })

/* Arguments are copied out: the sim gives no alignment promise for them. */
static void arg_get(const struct sim_launch *l, uint32_t i, void *dst, size_t size)
{
	memcpy(dst, l->params[i], size);
}

#define ARG(l, i, var) arg_get((l), (i), &(var), sizeof(var))

static uint64_t thread_count(const struct sim_launch *l)
{
	return (uint64_t)l->grid.x * l->grid.y * l->grid.z * l->block.x * l->block.y *
	       l->block.z;
}

/* vector_add.cu */
static void vec_add(const struct sim_launch *l)
{
	const float *a, *b;
	float *c;
	int32_t n;

	if (!ARGS_OK(l, 8, 8, 8, 4))
		return;
	ARG(l, 0, a);
	ARG(l, 1, b);
	ARG(l, 2, c);
	ARG(l, 3, n);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < (uint64_t)(int64_t)n)
			c[i] = a[i] + b[i];
}

/* kernel_args.cu */
static void ka_echo(const struct sim_launch *l)
{
	struct ka_mixed m;
	char c;
	double d;
	const uint32_t *p;
	int16_t s;
	struct ka_big big;
	struct ka_out *out;
	uint64_t threads = thread_count(l);

	if (!ARGS_OK(l, sizeof(struct ka_mixed), 1, 8, 8, 2, sizeof(struct ka_big), 8))
		return;
	ARG(l, 0, m);
	ARG(l, 1, c);
	ARG(l, 2, d);
	ARG(l, 3, p);
	ARG(l, 4, s);
	ARG(l, 5, big);
	ARG(l, 6, out);
	for (uint64_t t = 0; t < threads && t < KA_BIG_WORDS; t++)
		out->big[t] = big.words[t];
	if (threads > 0) {
		out->mixed = m;
		out->c = c;
		out->d = d;
		out->ptr = (uint64_t)(uintptr_t)p;
		out->s = s;
		out->ptr_word = *p;
	}
	out->threads_seen += (uint32_t)threads;
}

/* streams_events.cu: grid-stride loops cover [0, n) whatever the grid. */
static void se_scale_add(const struct sim_launch *l)
{
	const int32_t *x;
	int32_t *y, k, add, n;

	if (!ARGS_OK(l, 8, 8, 4, 4, 4))
		return;
	ARG(l, 0, x);
	ARG(l, 1, y);
	ARG(l, 2, k);
	ARG(l, 3, add);
	ARG(l, 4, n);
	if (thread_count(l) == 0)
		return;
	for (int32_t i = 0; i < n; i++)
		y[i] = (int32_t)((uint32_t)x[i] * (uint32_t)k + (uint32_t)add);
}

static void se_sum(const struct sim_launch *l)
{
	const int32_t *a, *b;
	int32_t *z, n;

	if (!ARGS_OK(l, 8, 8, 8, 4))
		return;
	ARG(l, 0, a);
	ARG(l, 1, b);
	ARG(l, 2, z);
	ARG(l, 3, n);
	if (thread_count(l) == 0)
		return;
	for (int32_t i = 0; i < n; i++)
		z[i] = (int32_t)((uint32_t)a[i] + (uint32_t)b[i]);
}

/* mod_a.cu, mod_b.cu (two_modules.cu) */
static void ma_iota(const struct sim_launch *l)
{
	int32_t *out, base, n;

	if (!ARGS_OK(l, 8, 4, 4))
		return;
	ARG(l, 0, out);
	ARG(l, 1, base);
	ARG(l, 2, n);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < (uint64_t)(int64_t)n)
			out[i] = (int32_t)((uint32_t)base + (uint32_t)i);
}

static void mb_axpy(const struct sim_launch *l)
{
	float a, *y;
	const int32_t *x;
	int32_t n;

	if (!ARGS_OK(l, 4, 8, 8, 4))
		return;
	ARG(l, 0, a);
	ARG(l, 1, x);
	ARG(l, 2, y);
	ARG(l, 3, n);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < (uint64_t)(int64_t)n)
			y[i] = a * (float)x[i] + y[i];
}

/* multi_main.cu, multi_other.cu */
static void mt_square(const struct sim_launch *l)
{
	int32_t *d, n;

	if (!ARGS_OK(l, 8, 4))
		return;
	ARG(l, 0, d);
	ARG(l, 1, n);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < (uint64_t)(int64_t)n)
			d[i] = (int32_t)((uint32_t)d[i] * (uint32_t)d[i]);
}

static void mt_twice(const struct sim_launch *l)
{
	int32_t *d, n;

	if (!ARGS_OK(l, 8, 4))
		return;
	ARG(l, 0, d);
	ARG(l, 1, n);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < (uint64_t)(int64_t)n)
			d[i] = (int32_t)((uint32_t)d[i] * 2u);
}

/* errors.cu */
static void err_affine(const struct sim_launch *l)
{
	const int32_t *x;
	int32_t *y, k, n;

	if (!ARGS_OK(l, 8, 8, 4, 4))
		return;
	ARG(l, 0, x);
	ARG(l, 1, y);
	ARG(l, 2, k);
	ARG(l, 3, n);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < (uint64_t)(int64_t)n)
			y[i] = (int32_t)((uint32_t)k * (uint32_t)x[i] + (uint32_t)i);
}

/* long_run.cu */
static void lr_step(const struct sim_launch *l)
{
	uint32_t *d, add;
	int32_t n;

	if (!ARGS_OK(l, 8, 4, 4))
		return;
	ARG(l, 0, d);
	ARG(l, 1, add);
	ARG(l, 2, n);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < (uint64_t)(int64_t)n)
			d[i] = d[i] + add + (uint32_t)i;
}

/* ckpt_loop.cu */
static void ck_mix(const struct sim_launch *l)
{
	unsigned *x, n, step;

	if (!ARGS_OK(l, 8, 4, 4))
		return;
	ARG(l, 0, x);
	ARG(l, 1, n);
	ARG(l, 2, step);
	for (unsigned j = 0; j < n; j++)
		x[j] = x[j] * 1664525u + 1013904223u + (step ^ j);
}

/* ckpt_loop.cu: the conditional rounds over the first 4096 words. */
static void ck_cround(const struct sim_launch *l, unsigned *x, unsigned *rounds)
{
	unsigned r = *rounds;

	(void)l;
	for (unsigned j = 0; j < 4096u; j++)
		x[j] = x[j] * 2654435761u + r + j;
	*rounds = r - 1;
}

static void ck_cinit(const struct sim_launch *l)
{
	unsigned *rounds, step;

	if (!ARGS_OK(l, 8, 4))
		return;
	ARG(l, 0, rounds);
	ARG(l, 1, step);
	*rounds = step % 5 + 1;
}

static void ck_cplain(const struct sim_launch *l)
{
	unsigned *x, *rounds;

	if (!ARGS_OK(l, 8, 8))
		return;
	ARG(l, 0, x);
	ARG(l, 1, rounds);
	ck_cround(l, x, rounds);
}

static void ck_cbody(const struct sim_launch *l)
{
	uint64_t h;
	unsigned *x, *rounds;

	if (!ARGS_OK(l, 8, 8, 8))
		return;
	ARG(l, 0, h);
	ARG(l, 1, x);
	ARG(l, 2, rounds);
	ck_cround(l, x, rounds);
	SIM_SET_CONDITIONAL(l, h, *rounds > 0);
}

static void ck_wait(const struct sim_launch *l)
{
	unsigned ms;

	if (!ARGS_OK(l, 4))
		return;
	ARG(l, 0, ms);
	usleep(ms * 1000u);
}

/* two_threads' busy kernel: as long on the CPU. */
static void tt_spin(const struct sim_launch *l)
{
	unsigned us;

	if (!ARGS_OK(l, 4))
		return;
	ARG(l, 0, us);
	usleep(us);
}

struct ck_node {
	struct ck_node *next;
	unsigned long long value;
};

static void ck_extra_fill(const struct sim_launch *l)
{
	unsigned long long words;
	unsigned *c;

	if (!ARGS_OK(l, 8, 8))
		return;
	ARG(l, 0, c);
	ARG(l, 1, words);
	for (unsigned long long j = 0; j < words; j++)
		c[j] = ck_extra_word(j);
}

static void ck_extra_sum(const struct sim_launch *l)
{
	unsigned long long words, *out;
	const unsigned *c;

	if (!ARGS_OK(l, 8, 8, 8))
		return;
	ARG(l, 0, c);
	ARG(l, 1, words);
	ARG(l, 2, out);
	for (unsigned long long j = 0; j < words; j++) {
		out[0] += ck_extra_term(c[j], j);
		out[1] += c[j] != ck_extra_word(j);
	}
}

static void ck_list_build(const struct sim_launch *l)
{
	struct ck_node *nodes;
	unsigned count;

	if (!ARGS_OK(l, 8, 4))
		return;
	ARG(l, 0, nodes);
	ARG(l, 1, count);
	for (unsigned i = 0; i < count; i++) {
		unsigned next = (unsigned)((i * 7919ull + 1) % count);

		nodes[i].next = next ? &nodes[next] : NULL;
		nodes[i].value = i * 2654435761ull;
	}
}

static void ck_list_walk(const struct sim_launch *l)
{
	const struct ck_node *p;
	unsigned long long *out, sum = 0, n = 0;

	if (!ARGS_OK(l, 8, 8))
		return;
	ARG(l, 0, p);
	ARG(l, 1, out);
	for (; p; p = p->next, n++)
		sum = sum * 31 + p->value;
	out[0] = sum;
	out[1] = n;
}

/* ckpt_loop.cu: a __device__ counter, reached by name as the kernel does. */
static void ck_count(const struct sim_launch *l)
{
	unsigned long long *c = SIM_GLOBAL(l, "ck_counter", unsigned long long);
	unsigned step;

	if (!c || !ARGS_OK(l, 4)) {
		fprintf(stderr, "tern_test_kernels: ck_count: no global ck_counter\n");
		return;
	}
	ARG(l, 0, step);
	*c = *c * 31 + step + 1;
}

static void ck_count_read(const struct sim_launch *l)
{
	unsigned long long *c = SIM_GLOBAL(l, "ck_counter", unsigned long long), *out;

	if (!c || !ARGS_OK(l, 8))
		return;
	ARG(l, 0, out);
	*out = *c;
}

/* ckpt_loop.cu: a __managed__ array, reached by name as the kernel does. */
static void ck_mstep(const struct sim_launch *l)
{
	unsigned long long *v = SIM_GLOBAL(l, "ck_mvar", unsigned long long);
	unsigned step, a, b;

	if (!v || !ARGS_OK(l, 4)) {
		fprintf(stderr, "tern_test_kernels: ck_mstep: no global ck_mvar\n");
		return;
	}
	ARG(l, 0, step);
	a = step % 64u;
	b = (step * 7u + 3u) % 64u;
	v[a] = v[a] * 1099511628211ull + v[b] + step;
}

/* launch_misc.cu */
static void lm_coop(const struct sim_launch *l)
{
	unsigned *data, *out, *bar, n;

	if (!ARGS_OK(l, 8, 8, 8, 4))
		return;
	ARG(l, 0, data);
	ARG(l, 1, out);
	ARG(l, 2, bar);
	ARG(l, 3, n);
	/* The grid barrier separates two phases: two loops. */
	for (unsigned i = 0; i < n; i++)
		data[i] = i * 3u + 1u;
	*bar += l->grid.x;
	for (unsigned i = 0; i < n; i++)
		out[i] = data[(i + n / 2) % n] + data[i];
}

/* The sim runs no clusters: what the kernel writes below sm_90. */
static void lm_cluster(const struct sim_launch *l)
{
	unsigned *out;

	if (!ARGS_OK(l, 8))
		return;
	ARG(l, 0, out);
	for (unsigned b = 0; b < l->grid.x; b++)
		out[b] = 0xffffffffu;
}

#define LM_BIG_WORDS 8188

static void lm_big_sum(const struct sim_launch *l)
{
	const unsigned *v = l->params[2];
	unsigned long long s = 0, *out;
	int k;

	if (!ARGS_OK(l, 8, 4, LM_BIG_WORDS * 4))
		return;
	ARG(l, 0, out);
	ARG(l, 1, k);
	for (unsigned i = 0; i < LM_BIG_WORDS; i++) {
		unsigned w;

		memcpy(&w, v + i, 4);
		s += (unsigned long long)w * (i + 1);
	}
	*out = s * (unsigned)k;
}

static void lm_fill(const struct sim_launch *l)
{
	unsigned *a, v, n;

	if (!ARGS_OK(l, 8, 4, 4))
		return;
	ARG(l, 0, a);
	ARG(l, 1, v);
	ARG(l, 2, n);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < n)
			a[i] = v + (unsigned)i;
}

static void lm_smem(const struct sim_launch *l)
{
	unsigned *sh = l->shared, *out, words, s = 0;

	if (!ARGS_OK(l, 8, 4))
		return;
	ARG(l, 0, out);
	ARG(l, 1, words);
	if ((uint64_t)words * 4 > l->shared_bytes)
		return;
	for (unsigned i = 0; i < words; i++)
		sh[i] = i * 7u;
	for (unsigned i = 0; i < words; i++)
		s += sh[i];
	*out = s;
}

/* pinned_zero_copy.cu: the pointers may be host memory the worker maps. */
static void zc_affine(const struct sim_launch *l)
{
	const int32_t *in;
	int32_t *out, k, n;

	if (!ARGS_OK(l, 8, 8, 4, 4))
		return;
	ARG(l, 0, in);
	ARG(l, 1, out);
	ARG(l, 2, k);
	ARG(l, 3, n);
	if (thread_count(l) == 0)
		return;
	for (int32_t i = 0; i < n; i++)
		out[i] = (int32_t)((uint32_t)in[i] * (uint32_t)k + (uint32_t)i);
}

/* jit_link.cu (mod_jit.cu): x[i] = a * x[i] + b */
static void jl_affine(const struct sim_launch *l)
{
	float *x, a, b;
	int32_t n;

	if (!ARGS_OK(l, 8, 4, 4, 4))
		return;
	ARG(l, 0, x);
	ARG(l, 1, a);
	ARG(l, 2, b);
	ARG(l, 3, n);
	if (thread_count(l) == 0)
		return;
	for (int32_t i = 0; i < n; i++)
		x[i] = a * x[i] + b;
}

/* bench/overhead.cu: grid-stride loops and a reduction that adds into *out,
 * so any grid with a thread covers [0, n). */
static void ov_empty(const struct sim_launch *l)
{
	if (l->param_count != 0)
		fprintf(stderr, "tern_test_kernels: ov_empty: %u arguments, expected 0\n",
			l->param_count);
}

static void ov_affine(const struct sim_launch *l)
{
	uint32_t *x, a, b;
	int32_t n;

	if (!ARGS_OK(l, 8, 4, 4, 4))
		return;
	ARG(l, 0, x);
	ARG(l, 1, n);
	ARG(l, 2, a);
	ARG(l, 3, b);
	if (thread_count(l) == 0)
		return;
	for (int32_t i = 0; i < n; i++)
		x[i] = x[i] * a + b;
}

static void ov_xorshift(const struct sim_launch *l)
{
	uint32_t *x, s;
	int32_t n;

	if (!ARGS_OK(l, 8, 4, 4))
		return;
	ARG(l, 0, x);
	ARG(l, 1, n);
	ARG(l, 2, s);
	if (thread_count(l) == 0)
		return;
	for (int32_t i = 0; i < n; i++)
		x[i] ^= x[i] >> s;
}

static void ov_reduce(const struct sim_launch *l)
{
	const uint32_t *x;
	uint64_t *out, sum = 0;
	int32_t n;

	if (!ARGS_OK(l, 8, 4, 8))
		return;
	ARG(l, 0, x);
	ARG(l, 1, n);
	ARG(l, 2, out);
	if (thread_count(l) == 0)
		return;
	for (int32_t i = 0; i < n; i++)
		sum += x[i];
	*out += sum;
}

/* graph_conditional.cu: conditions set as cudaGraphSetConditional does. */
static void cg_set(const struct sim_launch *l)
{
	uint64_t h;
	const int *flag;

	if (!ARGS_OK(l, 8, 8))
		return;
	ARG(l, 0, h);
	ARG(l, 1, flag);
	SIM_SET_CONDITIONAL(l, h, (unsigned)*flag);
}

static void cg_step(const struct sim_launch *l)
{
	uint64_t h;
	int *counter;
	long long *sum;

	if (!ARGS_OK(l, 8, 8, 8))
		return;
	ARG(l, 0, h);
	ARG(l, 1, counter);
	ARG(l, 2, sum);
	*sum += *counter;
	*counter -= 1;
	SIM_SET_CONDITIONAL(l, h, *counter > 0 ? 1u : 0u);
}

/* graph_host_copies.cu */
static void hc_scale(const struct sim_launch *l)
{
	const float *in;
	float *out, k;
	int32_t n;

	if (!ARGS_OK(l, 8, 8, 4, 4))
		return;
	ARG(l, 0, in);
	ARG(l, 1, out);
	ARG(l, 2, k);
	ARG(l, 3, n);
	for (uint64_t i = 0; i < thread_count(l) && i < (uint64_t)(n < 0 ? 0 : n); i++)
		out[i] = in[i] * k;
}

/* graph_memory_nodes.cu */
static void gm_unary(const struct sim_launch *l, float sign, bool square)
{
	const float *in;
	float *out;
	int32_t n;

	if (!ARGS_OK(l, 8, 8, 4))
		return;
	ARG(l, 0, in);
	ARG(l, 1, out);
	ARG(l, 2, n);
	for (uint64_t i = 0; i < thread_count(l) && i < (uint64_t)(n < 0 ? 0 : n); i++)
		out[i] = square ? in[i] * in[i] : sign * in[i];
}

static void gm_square(const struct sim_launch *l)
{
	gm_unary(l, 1.0f, true);
}

static void gm_negate(const struct sim_launch *l)
{
	gm_unary(l, -1.0f, false);
}

static void gm_validate(const struct sim_launch *l)
{
	const float *got, *ref;
	int32_t n, *bad;

	if (!ARGS_OK(l, 8, 8, 4, 8))
		return;
	ARG(l, 0, got);
	ARG(l, 1, ref);
	ARG(l, 2, n);
	ARG(l, 3, bad);
	for (uint64_t i = 0; i < thread_count(l) && i < (uint64_t)(n < 0 ? 0 : n); i++)
		if (got[i] != ref[i])
			(*bad)++;
}

/* graph_conditional_samples.cu: one thread each, as the samples launch them. */
static void cs_set_odd(const struct sim_launch *l)
{
	const char *d;
	uint64_t h;

	if (!ARGS_OK(l, 8, 8))
		return;
	ARG(l, 0, d);
	ARG(l, 1, h);
	SIM_SET_CONDITIONAL(l, h, (unsigned)(*d & 0x01));
}

static void cs_count(const struct sim_launch *l)
{
	int32_t *counts, which;

	if (!ARGS_OK(l, 8, 4))
		return;
	ARG(l, 0, counts);
	ARG(l, 1, which);
	counts[which]++;
}

static void cs_do_while(const struct sim_launch *l)
{
	char *d;
	uint64_t h;

	if (!ARGS_OK(l, 8, 8))
		return;
	ARG(l, 0, d);
	ARG(l, 1, h);
	if (--(*d) == 0)
		SIM_SET_CONDITIONAL(l, h, 0);
}

static void cs_captured_while(const struct sim_launch *l)
{
	char *d;
	uint64_t h;
	int32_t *steps;

	if (!ARGS_OK(l, 8, 8, 8))
		return;
	ARG(l, 0, d);
	ARG(l, 1, h);
	ARG(l, 2, steps);
	(*steps)++;
	if (*d)
		(*d)--;
	SIM_SET_CONDITIONAL(l, h, (unsigned)(int)*d);
}

static void cs_set_value(const struct sim_launch *l)
{
	const char *d;
	uint64_t h;

	if (!ARGS_OK(l, 8, 8))
		return;
	ARG(l, 0, d);
	ARG(l, 1, h);
	SIM_SET_CONDITIONAL(l, h, (unsigned)(unsigned char)*d);
}

/* graphs.cu: each thread i < n of the grid touches element i. */
static uint64_t graph_span(const struct sim_launch *l, int n)
{
	uint64_t t = thread_count(l);

	return n < 0 ? 0 : (uint64_t)n < t ? (uint64_t)n : t;
}

static void g_iota(const struct sim_launch *l)
{
	int *a, n;

	if (!ARGS_OK(l, 8, 4))
		return;
	ARG(l, 0, a);
	ARG(l, 1, n);
	for (uint64_t i = 0; i < graph_span(l, n); i++)
		a[i] = (int)i;
}

static void g_scale(const struct sim_launch *l)
{
	int *a, k, n;

	if (!ARGS_OK(l, 8, 4, 4))
		return;
	ARG(l, 0, a);
	ARG(l, 1, k);
	ARG(l, 2, n);
	for (uint64_t i = 0; i < graph_span(l, n); i++)
		a[i] *= k;
}

static void g_fill(const struct sim_launch *l)
{
	int *a, v, n;

	if (!ARGS_OK(l, 8, 4, 4))
		return;
	ARG(l, 0, a);
	ARG(l, 1, v);
	ARG(l, 2, n);
	for (uint64_t i = 0; i < graph_span(l, n); i++)
		a[i] = v;
}

static void g_add(const struct sim_launch *l)
{
	int *y, n;
	const int *x;

	if (!ARGS_OK(l, 8, 8, 4))
		return;
	ARG(l, 0, y);
	ARG(l, 1, x);
	ARG(l, 2, n);
	for (uint64_t i = 0; i < graph_span(l, n); i++)
		y[i] += x[i];
}

static void cg_add(const struct sim_launch *l)
{
	int *a, v, n;

	if (!ARGS_OK(l, 8, 4, 4))
		return;
	ARG(l, 0, a);
	ARG(l, 1, v);
	ARG(l, 2, n);
	for (uint64_t i = 0; i < graph_span(l, n); i++)
		a[i] += v;
}

/* managed.cu */
static void mg_affine(const struct sim_launch *l)
{
	int32_t *a, k, b, n;

	if (!ARGS_OK(l, 8, 4, 4, 4))
		return;
	ARG(l, 0, a);
	ARG(l, 1, k);
	ARG(l, 2, b);
	ARG(l, 3, n);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < (uint64_t)(int64_t)n)
			a[i] = (int32_t)((uint32_t)a[i] * (uint32_t)k + (uint32_t)b);
}

/* managed.cu: a __managed__ array, reached by name as the kernel does. */
static void mg_arr_step(const struct sim_launch *l)
{
	int32_t *v = SIM_GLOBAL(l, "mg_arr", int32_t), k;

	if (!v || !ARGS_OK(l, 4)) {
		fprintf(stderr, "tern_test_kernels: mg_arr_step: no global mg_arr\n");
		return;
	}
	ARG(l, 0, k);
	SIM_FOR_EACH_THREAD(l, i)
		if (i < 3000)
			v[i] = (int32_t)((uint32_t)v[i] * 3u + (uint32_t)k + (uint32_t)i);
}

/* bench/ckpt_guest.cu (bench/ckpt, bench/migrate on the sim): the same data
 * and checksums as its kernels, computed once for the whole grid. */
#define CG_CHUNK (4ull << 20)

static uint64_t cg_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static void cg_fill(const struct sim_launch *l)
{
	uint64_t *d, n, salt;
	int kind;

	if (!ARGS_OK(l, 8, 8, 4, 8))
		return;
	ARG(l, 0, d);
	ARG(l, 1, n);
	ARG(l, 2, kind);
	ARG(l, 3, salt);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = cg_mix(i ^ salt);

		if (kind == 1 && ((i * 8) / CG_CHUNK) % 2)
			r = 0;
		else if (kind == 2) {
			uint64_t v = 0;

			for (int k = 0; k < 4; k++) {
				uint16_t sign = (uint16_t)((r >> (k * 16)) & 0x8000);
				uint16_t exp = (uint16_t)((118 + ((r >> (k * 16 + 8)) % 8)) << 7);
				uint16_t man = (uint16_t)((r >> (k * 16)) & 0x7f);

				v |= (uint64_t)(sign | exp | man) << (k * 16);
			}
			r = v;
		}
		d[i] = r;
	}
}

static void cg_touch(const struct sim_launch *l)
{
	uint64_t *d, chunks, every, salt, words = CG_CHUNK / 8;

	if (!ARGS_OK(l, 8, 8, 8, 8))
		return;
	ARG(l, 0, d);
	ARG(l, 1, chunks);
	ARG(l, 2, every);
	ARG(l, 3, salt);
	for (uint64_t c = 0; c < chunks; c++)
		if (every && (c + salt) % every == 0)
			for (uint64_t i = 0; i < words; i++)
				d[c * words + i] ^= cg_mix(i + salt) | 1;
}

static void cg_sum(const struct sim_launch *l)
{
	uint64_t *d, n, *out, acc = 0;

	if (!ARGS_OK(l, 8, 8, 8))
		return;
	ARG(l, 0, d);
	ARG(l, 1, n);
	ARG(l, 2, out);
	for (uint64_t i = 0; i < n; i++)
		acc ^= cg_mix(d[i] + i);
	*out ^= acc;
}

/* mod_knodes.cu (graph_kernel_nodes.cu); its kn_affine is managed.cu's mg_affine */
static void kn_step(const struct sim_launch *l)
{
	uint64_t h;
	int *left;

	if (!ARGS_OK(l, 8, 8))
		return;
	ARG(l, 0, h);
	ARG(l, 1, left);
	*left -= 1;
	SIM_SET_CONDITIONAL(l, h, *left > 0 ? 1u : 0u);
}

static void kn_noop(const struct sim_launch *l)
{
	(void)l;
}

SIM_KERNELS_BEGIN
	SIM_KERNEL("vec_add", vec_add),
	SIM_KERNEL("jl_affine", jl_affine),
	SIM_KERNEL("ka_echo", ka_echo),
	SIM_KERNEL("se_scale_add", se_scale_add),
	SIM_KERNEL("se_sum", se_sum),
	SIM_KERNEL("ma_iota", ma_iota),
	SIM_KERNEL("mb_axpy", mb_axpy),
	SIM_KERNEL("me_set", ma_iota),         /* mod_enum.cu: the same computation */
	SIM_KERNEL("mp_fill", ma_iota),        /* mem_pools.cu: the same again */
	SIM_KERNEL("vm_fill", ma_iota),        /* vmm.cu: and again */
	SIM_KERNEL("fill", cg_fill),           /* bench/ckpt_guest.cu */
	SIM_KERNEL("touch", cg_touch),
	SIM_KERNEL("sum", cg_sum),
	SIM_KERNEL("md_fill", ma_iota),        /* multi_device.cu */
	SIM_KERNEL("ip_fill", ma_iota),        /* ipc_pair.cu */
	SIM_KERNEL("mt_square", mt_square),
	SIM_KERNEL("_Z8mt_twicePii", mt_twice),
	SIM_KERNEL("err_affine", err_affine),
	SIM_KERNEL("lr_step", lr_step),
	SIM_KERNEL("ck_mix", ck_mix),
	SIM_KERNEL("ck_wait", ck_wait),
	SIM_KERNEL("tt_spin", tt_spin),
	SIM_KERNEL("ck_extra_fill", ck_extra_fill),
	SIM_KERNEL("ck_extra_sum", ck_extra_sum),
	SIM_KERNEL("ck_list_build", ck_list_build),
	SIM_KERNEL("ck_list_walk", ck_list_walk),
	SIM_KERNEL("ck_count", ck_count),
	SIM_KERNEL("ck_count_read", ck_count_read),
	SIM_KERNEL("ck_mstep", ck_mstep),
	SIM_KERNEL("lm_coop", lm_coop),
	SIM_KERNEL("lm_cluster", lm_cluster),
	SIM_KERNEL("lm_big_sum", lm_big_sum),
	SIM_KERNEL("lm_fill", lm_fill),
	SIM_KERNEL("lm_smem", lm_smem),
	SIM_KERNEL("_Z9zc_affinePKiPiii", zc_affine),
	SIM_KERNEL("ov_empty", ov_empty),
	SIM_KERNEL("ov_affine", ov_affine),
	SIM_KERNEL("ov_xorshift", ov_xorshift),
	SIM_KERNEL("ov_reduce", ov_reduce),
	SIM_KERNEL("ck_cinit", ck_cinit),
	SIM_KERNEL("ck_cplain", ck_cplain),
	SIM_KERNEL("ck_cbody", ck_cbody),
	SIM_KERNEL("cg_set", cg_set),
	SIM_KERNEL("hc_scale", hc_scale),
	SIM_KERNEL("gm_square", gm_square),
	SIM_KERNEL("gm_negate", gm_negate),
	SIM_KERNEL("gm_validate", gm_validate),
	SIM_KERNEL("cs_set_odd", cs_set_odd),
	SIM_KERNEL("cs_count", cs_count),
	SIM_KERNEL("cs_do_while", cs_do_while),
	SIM_KERNEL("cs_captured_while", cs_captured_while),
	SIM_KERNEL("cs_set_value", cs_set_value),
	SIM_KERNEL("cg_step", cg_step),
	SIM_KERNEL("cg_add", cg_add),
	SIM_KERNEL("g_iota", g_iota),
	SIM_KERNEL("g_scale", g_scale),
	SIM_KERNEL("g_fill", g_fill),
	SIM_KERNEL("g_add", g_add),
	SIM_KERNEL("hf_fill", g_fill),         /* host_funcs.cu: the same computations */
	SIM_KERNEL("hf_add", g_add),
	SIM_KERNEL("mg_affine", mg_affine),
	SIM_KERNEL("mg_arr_step", mg_arr_step),
	SIM_KERNEL("mg_iota", ma_iota),        /* managed.cu: as ma_iota */
	SIM_KERNEL("kn_affine", mg_affine),     /* mod_knodes.cu: the same computation */
	SIM_KERNEL("kn_step", kn_step),
	SIM_KERNEL("kn_noop", kn_noop),
SIM_KERNELS_END
