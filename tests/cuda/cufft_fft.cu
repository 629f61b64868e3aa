/* cufft_fft: cuFFT in the guest, checked against a direct DFT computed on the
 * CPU in double precision. A batched 1D complex-to-complex transform (forward
 * and inverse, on a stream of its own) and a 2D real-to-complex one. Results
 * are checked on a GPU only (tools/gpu-check): the sim backend has no CPU
 * cuFFT kernels, so CI runs it with --calls-only under ternd
 * --sim-missing-kernels skip (check.h). */
#include "check.h"

#include <cufft.h>
#include <math.h>
#include <vector>

#define CHECK_FFT(call) CHECK_LIB("cuFFT", call)

/* Single precision FFTs of these sizes land near 1e-7 relative error. */
#define TOLERANCE 1e-5

static unsigned long long rng = 0x13198a2e03707344ull;

static float rnd(void)
{
	return (float)test_rnd(&rng);
}

/* Accumulates the squared error and the squared reference for a relative
 * Frobenius norm. */
struct err_acc {
	double num = 0, den = 0;
	void add(double got_re, double got_im, double ref_re, double ref_im)
	{
		num += (got_re - ref_re) * (got_re - ref_re) + (got_im - ref_im) * (got_im - ref_im);
		den += ref_re * ref_re + ref_im * ref_im;
	}
	double rel() const { return sqrt(num / den); }
};

/* Batched 1D C2C of length n: forward against a DFT, then the inverse must
 * give back n times the input (cuFFT does not normalise). */
static void c2c_1d(int n, int batch, double *fwd_err, double *inv_err)
{
	std::vector<cufftComplex> in((size_t)n * batch), out(in.size()), back(in.size());
	cufftComplex *d;
	cufftHandle plan;
	cudaStream_t s;
	err_acc ef, ei;

	for (auto &c : in) {
		c.x = rnd();
		c.y = rnd();
	}
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	d = test_to_device(in);
	CHECK_FFT(cufftPlan1d(&plan, n, CUFFT_C2C, batch));
	CHECK_FFT(cufftSetStream(plan, s));
	CHECK_FFT(cufftExecC2C(plan, d, d, CUFFT_FORWARD));
	CHECK(cudaMemcpyAsync(out.data(), d, out.size() * sizeof(cufftComplex),
			      cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamSynchronize(s));
	CHECK_FFT(cufftExecC2C(plan, d, d, CUFFT_INVERSE));
	CHECK(cudaMemcpyAsync(back.data(), d, back.size() * sizeof(cufftComplex),
			      cudaMemcpyDeviceToHost, s));
	CHECK(cudaStreamSynchronize(s));

	for (int b = 0; b < batch; b++) {
		const cufftComplex *x = &in[(size_t)b * n];

		for (int k = 0; k < n; k++) {
			double re = 0, im = 0;

			for (int j = 0; j < n; j++) {
				/* (j * k) mod n keeps the angle small and exact. */
				double a = -2.0 * M_PI * (double)(((long long)j * k) % n) / n;

				re += x[j].x * cos(a) - x[j].y * sin(a);
				im += x[j].x * sin(a) + x[j].y * cos(a);
			}
			const cufftComplex &g = out[(size_t)b * n + k];
			ef.add(g.x, g.y, re, im);
			const cufftComplex &r = back[(size_t)b * n + k];
			ei.add(r.x, r.y, (double)x[k].x * n, (double)x[k].y * n);
		}
	}
	CHECK_FFT(cufftDestroy(plan));
	CHECK(cudaFree(d));
	CHECK(cudaStreamDestroy(s));
	*fwd_err = ef.rel();
	*inv_err = ei.rel();
}

/* 2D R2C of nx x ny (row-major, ny fastest): ny/2+1 outputs per row. */
static double r2c_2d(int nx, int ny)
{
	int nyc = ny / 2 + 1;
	std::vector<float> in((size_t)nx * ny);
	std::vector<cufftComplex> out((size_t)nx * nyc);
	float *din;
	cufftComplex *dout;
	cufftHandle plan;
	err_acc e;

	test_fill(in, &rng);
	din = test_to_device(in);
	CHECK(cudaMalloc(&dout, out.size() * sizeof(cufftComplex)));
	CHECK_FFT(cufftPlan2d(&plan, nx, ny, CUFFT_R2C));
	CHECK_FFT(cufftExecR2C(plan, din, dout));
	out = test_from_device(dout, out.size());

	for (int kx = 0; kx < nx; kx++) {
		for (int ky = 0; ky < nyc; ky++) {
			double re = 0, im = 0;

			for (int x = 0; x < nx; x++) {
				for (int y = 0; y < ny; y++) {
					double a = -2.0 * M_PI * ((double)((x * kx) % nx) / nx +
								  (double)((y * ky) % ny) / ny);
					double v = in[(size_t)x * ny + y];

					re += v * cos(a);
					im += v * sin(a);
				}
			}
			const cufftComplex &g = out[(size_t)kx * nyc + ky];
			e.add(g.x, g.y, re, im);
		}
	}
	CHECK_FFT(cufftDestroy(plan));
	CHECK(cudaFree(din));
	CHECK(cudaFree(dout));
	return e.rel();
}

int main(int argc, char **argv)
{
	double f1, i1, f2, i2, r;
	int version = 0;

	test_args(argc, argv);

	CHECK_FFT(cufftGetVersion(&version));
	c2c_1d(1024, 8, &f1, &i1);      /* power of two */
	c2c_1d(360, 4, &f2, &i2);       /* mixed radix 2^3 3^2 5 */
	r = r2c_2d(48, 64);
	printf("cuFFT %d relative error: C2C 1024x8 fwd %.3g inv %.3g, C2C 360x4 fwd %.3g inv %.3g, "
	       "R2C 48x64 %.3g (tolerance %g)\n", version, f1, i1, f2, i2, r, TOLERANCE);
	REQUIRE_RESULT(f1 < TOLERANCE && i1 < TOLERANCE && f2 < TOLERANCE && i2 < TOLERANCE &&
		r < TOLERANCE, "a relative error is %g or more", TOLERANCE);
	test_pass("cufft_fft");
	return 0;
}
