/* curand_gen: cuRAND's host API generating on the device, checked against a
 * CPU reference computed here. Philox4x32-10 in the legacy ordering has a
 * documented layout (each of 65536 subsequences gives 4 values in turn), so
 * its raw bits must match a CPU Philox exactly, its uniforms to float
 * rounding and its normals (Box-Muller on pairs) to 1e-4; XORWOW, the default
 * generator, is checked by its moments. Results are checked on a GPU only
 * (tools/gpu-check): the sim backend has no CPU cuRAND kernels, so CI runs it
 * with --calls-only under ternd --sim-missing-kernels skip (check.h). */
#include "check.h"

#include <curand.h>
#include <math.h>
#include <stdint.h>
#include <vector>

#define CHECK_RAND(call) CHECK_LIB("cuRAND", call)

#define SEED 0x2545f4914f6cdd1dull
#define OFFSET 1000ull
#define PHILOX_SUBSEQUENCES 65536ull
/* Uniforms: float rounding of (x + 0.5) / 2^32 is below 6e-8. Normals: the
 * device's logf and __sincosf against double precision, times a radius of at
 * most 6.8, stay below 3e-5. */
#define UNIFORM_TOL 1e-7
#define NORMAL_TOL 1e-4

static void philox_round(uint32_t c[4], const uint32_t k[2])
{
	uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
	uint32_t r[4] = { (uint32_t)(p1 >> 32) ^ c[1] ^ k[0], (uint32_t)p1,
			  (uint32_t)(p0 >> 32) ^ c[3] ^ k[1], (uint32_t)p0 };

	memcpy(c, r, sizeof(r));
}

/* Value @n of cuRAND's Philox4x32-10 stream in CURAND_ORDERING_PSEUDO_LEGACY:
 * subsequence (n / 4) mod 65536, counter (n / 4) / 65536, lane n mod 4. */
static uint32_t philox_value(uint64_t n)
{
	uint64_t q = n / 4, ctr = q / PHILOX_SUBSEQUENCES, sub = q % PHILOX_SUBSEQUENCES;
	uint32_t c[4] = { (uint32_t)ctr, (uint32_t)(ctr >> 32), (uint32_t)sub, (uint32_t)(sub >> 32) };
	uint32_t k[2] = { (uint32_t)SEED, (uint32_t)(SEED >> 32) };

	for (int r = 0; r < 10; r++) {
		philox_round(c, k);
		k[0] += 0x9E3779B9u;
		k[1] += 0xBB67AE85u;
	}
	return c[n % 4];
}

static double to_uniform(uint32_t x)
{
	return ((double)x + 0.5) * 0x1p-32;
}

static void philox(size_t n, cudaStream_t s)
{
	curandGenerator_t g;
	std::vector<unsigned> raw(n);
	std::vector<float> uni(n), nrm(n);
	unsigned *draw;
	float *duni, *dnrm;
	size_t bad = 0;
	double ue = 0, ne = 0;

	CHECK(cudaMalloc(&draw, n * sizeof(unsigned)));
	CHECK(cudaMalloc(&duni, n * sizeof(float)));
	CHECK(cudaMalloc(&dnrm, n * sizeof(float)));
	CHECK_RAND(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
	CHECK_RAND(curandSetStream(g, s));
	CHECK_RAND(curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_LEGACY));
	CHECK_RAND(curandSetPseudoRandomGeneratorSeed(g, SEED));
	CHECK_RAND(curandSetGeneratorOffset(g, OFFSET));
	/* Each call continues the stream where the previous one stopped. */
	CHECK_RAND(curandGenerate(g, draw, n));
	CHECK_RAND(curandGenerateUniform(g, duni, n));
	CHECK_RAND(curandGenerateNormal(g, dnrm, n, 0.0f, 1.0f));
	CHECK(cudaMemcpyAsync(raw.data(), draw, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
	CHECK(cudaMemcpyAsync(uni.data(), duni, n * sizeof(float), cudaMemcpyDeviceToHost, s));
	CHECK(cudaMemcpyAsync(nrm.data(), dnrm, n * sizeof(float), cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamSynchronize(s));
	CHECK_RAND(curandDestroyGenerator(g));

	for (size_t i = 0; i < n; i++) {
		if (raw[i] != philox_value(OFFSET + i) && bad++ < 4)
			fprintf(stderr, "philox value %zu: %08x, expected %08x\n", i, raw[i],
				philox_value(OFFSET + i));
		ue = fmax(ue, fabs(uni[i] - to_uniform(philox_value(OFFSET + n + i))));
	}
	for (size_t i = 0; i + 1 < n; i += 2) {
		double u = to_uniform(philox_value(OFFSET + 2 * n + i));
		double v = to_uniform(philox_value(OFFSET + 2 * n + i + 1)) * 2.0 * M_PI;
		double r = sqrt(-2.0 * log(u));

		ne = fmax(ne, fabs(nrm[i] - r * sin(v)));
		ne = fmax(ne, fabs(nrm[i + 1] - r * cos(v)));
	}
	printf("philox: %zu values, %zu raw mismatches, uniform max error %.3g, normal max error %.3g\n",
	       n, bad, ue, ne);
	REQUIRE_RESULT(bad == 0, "%zu raw Philox values differ from the CPU reference", bad);
	REQUIRE_RESULT(ue < UNIFORM_TOL, "uniform error %g is %g or more", ue, UNIFORM_TOL);
	REQUIRE_RESULT(ne < NORMAL_TOL, "normal error %g is %g or more", ne, NORMAL_TOL);
	CHECK(cudaFree(draw));
	CHECK(cudaFree(duni));
	CHECK(cudaFree(dnrm));
}

/* XORWOW's output order is the library's own: check the distribution. With
 * n = 2^22 the standard error of the mean is 1.4e-4 (uniform) and 4.9e-4
 * (normal); the bounds are about 7 of them. */
static void xorwow(size_t n)
{
	curandGenerator_t g;
	std::vector<float> uni(n);
	std::vector<double> nrm(n);
	float *duni;
	double *dnrm;
	double um = 0, uv = 0, nm = 0, nv = 0;
	size_t out_of_range = 0;

	CHECK(cudaMalloc(&duni, n * sizeof(float)));
	CHECK(cudaMalloc(&dnrm, n * sizeof(double)));
	CHECK_RAND(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT));
	CHECK_RAND(curandSetPseudoRandomGeneratorSeed(g, SEED));
	CHECK_RAND(curandGenerateUniform(g, duni, n));
	CHECK_RAND(curandGenerateNormalDouble(g, dnrm, n, 3.0, 2.0));
	CHECK(cudaMemcpy(uni.data(), duni, n * sizeof(float), cudaMemcpyDeviceToHost));
	CHECK(cudaMemcpy(nrm.data(), dnrm, n * sizeof(double), cudaMemcpyDeviceToHost));
	CHECK_RAND(curandDestroyGenerator(g));

	for (size_t i = 0; i < n; i++) {
		out_of_range += !(uni[i] > 0.0f && uni[i] <= 1.0f);
		um += uni[i];
		nm += nrm[i];
	}
	um /= n;
	nm /= n;
	for (size_t i = 0; i < n; i++) {
		uv += (uni[i] - um) * (uni[i] - um);
		nv += (nrm[i] - nm) * (nrm[i] - nm);
	}
	uv /= n - 1;
	nv /= n - 1;
	printf("xorwow: uniform mean %.5f var %.5f (0.5, %.5f), normal(3, 2) mean %.4f var %.4f\n",
	       um, uv, 1.0 / 12, nm, nv);
	REQUIRE_RESULT(out_of_range == 0, "%zu uniforms outside (0, 1]", out_of_range);
	REQUIRE_RESULT(fabs(um - 0.5) < 1e-3 && fabs(uv - 1.0 / 12) < 1e-3, "uniform moments off");
	REQUIRE_RESULT(fabs(nm - 3.0) < 7e-3 && fabs(nv - 4.0) < 2e-2, "normal moments off");
	CHECK(cudaFree(duni));
	CHECK(cudaFree(dnrm));
}

int main(int argc, char **argv)
{
	cudaStream_t s;
	int version = 0;

	test_args(argc, argv);

	CHECK_RAND(curandGetVersion(&version));
	printf("cuRAND %d\n", version);
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	philox((size_t)1 << 20, s);
	xorwow((size_t)1 << 22);
	CHECK(cudaStreamDestroy(s));
	test_pass("curand_gen");
	return 0;
}
