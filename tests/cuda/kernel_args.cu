/* kernel_args: a kernel taking a struct by value, char, double, a pointer,
 * short and a 1 KiB struct by value; it writes back what it received and the
 * host compares every field. */
#include "check.h"
#include "kernel_args.h"

extern "C" __global__ void ka_echo(struct ka_mixed m, char c, double d, const uint32_t *p,
				   short s, struct ka_big big, struct ka_out *out)
{
	unsigned t = blockIdx.x * blockDim.x + threadIdx.x;

	if (t < KA_BIG_WORDS)
		out->big[t] = big.words[t];
	if (t == 0) {
		out->mixed = m;
		out->c = c;
		out->d = d;
		out->ptr = (uint64_t)(uintptr_t)p;
		out->s = s;
		out->ptr_word = *p;
	}
	atomicAdd(&out->threads_seen, 1u);
}

static void check_out(const struct ka_out *o, const struct ka_mixed *m, char c, double d,
		      const uint32_t *p, short s, const struct ka_big *big, uint32_t word)
{
	REQUIRE(o->mixed.c == m->c, "mixed.c %d != %d", o->mixed.c, m->c);
	REQUIRE(o->mixed.i == m->i, "mixed.i %d != %d", o->mixed.i, m->i);
	REQUIRE(o->mixed.d == m->d, "mixed.d %.17g != %.17g", o->mixed.d, m->d);
	REQUIRE(o->mixed.s == m->s, "mixed.s %d != %d", o->mixed.s, m->s);
	REQUIRE(o->mixed.f == m->f, "mixed.f %g != %g", o->mixed.f, m->f);
	REQUIRE(o->mixed.ll == m->ll, "mixed.ll %lld != %lld", (long long)o->mixed.ll,
		(long long)m->ll);
	REQUIRE(memcmp(o->mixed.tail, m->tail, sizeof(m->tail)) == 0, "mixed.tail differs");
	REQUIRE(o->c == c, "c %d != %d", o->c, c);
	REQUIRE(o->d == d, "d %.17g != %.17g", o->d, d);
	REQUIRE(o->ptr == (uint64_t)(uintptr_t)p, "ptr %#llx != %p", (unsigned long long)o->ptr,
		(const void *)p);
	REQUIRE(o->s == s, "s %d != %d", o->s, s);
	REQUIRE(o->ptr_word == word, "*ptr %#x != %#x", o->ptr_word, word);
	for (int i = 0; i < KA_BIG_WORDS; i++)
		REQUIRE(o->big[i] == big->words[i], "big[%d] %#x != %#x", i, o->big[i],
			big->words[i]);
	REQUIRE(o->threads_seen == KA_THREADS, "threads_seen %u != %u", o->threads_seen,
		KA_THREADS);
}

static void run_once(int variant, struct ka_out *dout, uint32_t *dword)
{
	struct ka_mixed m;
	struct ka_big big;
	struct ka_out out;
	/* Values with distinctive bytes everywhere, different per variant. */
	char c = (char)(variant ? -7 : 'x');
	double d = variant ? -1.0e300 : 3.141592653589793;
	short s = (short)(variant ? -12345 : 31000);
	uint32_t word = 0xfeedbeefu ^ (uint32_t)variant;

	memset(&m, 0, sizeof(m));
	m.c = (char)(variant ? 'Q' : -100);
	m.i = variant ? -2000000000 : 123456789;
	m.d = variant ? 2.5e-310 : -0.1;     /* a subnormal in one variant */
	m.s = (int16_t)(variant ? 7 : -32768);
	m.f = variant ? 1.0e-30f : 6.25f;
	m.ll = variant ? INT64_MIN + 3 : 0x0123456789abcdefLL;
	m.tail[0] = 0xa1;
	m.tail[1] = (uint8_t)(0xb2 + variant);
	m.tail[2] = 0xc3;
	for (int i = 0; i < KA_BIG_WORDS; i++)
		big.words[i] = 0x9e3779b9u * (uint32_t)(i + 1) + (uint32_t)variant;

	CHECK(cudaMemcpy(dword, &word, sizeof(word), cudaMemcpyHostToDevice));
	CHECK(cudaMemset(dout, 0, sizeof(*dout)));
	/* Two launch shapes: one block, and two blocks of half the threads. */
	if (variant == 0)
		ka_echo<<<1, KA_THREADS>>>(m, c, d, dword, s, big, dout);
	else
		ka_echo<<<2, KA_THREADS / 2>>>(m, c, d, dword, s, big, dout);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(&out, dout, sizeof(out), cudaMemcpyDeviceToHost));
	check_out(&out, &m, c, d, dword, s, &big, word);
}

int main(void)
{
	struct ka_out *dout;
	uint32_t *dword;

	CHECK(cudaMalloc(&dout, sizeof(*dout)));
	CHECK(cudaMalloc(&dword, 64));
	run_once(0, dout, dword);
	/* The pointer argument at an offset, not at an allocation's start. */
	run_once(1, dout, dword + 5);
	CHECK(cudaFree(dout));
	CHECK(cudaFree(dword));
	test_pass("kernel_args");
	return 0;
}
