/* cufft_convolution: a 2D convolution through cuFFT as NVIDIA's
 * convolutionFFT2D sample does it, at the size that failed through tern on
 * the H200 (issue 16) while smaller FFTs passed: data and a 7x6 kernel
 * zero-padded to 2048 x 1024 complex, one C2C plan, the kernel transformed
 * first, then the data, a pointwise multiply (with the 1/N scale) by a kernel
 * of ours, and the inverse transform. The result is checked at 64 points
 * (corners, edges, the wrap-around and random ones) against the direct
 * circular convolution in double precision on the CPU.
 *
 * Every step says what it was doing when it fails: the cufftResult by name,
 * and the runtime's last error (the CUresult of the driver call that failed
 * under cuFFT, as cudart reports it), so that a failure on the GPU names the
 * call; through tern, ternd's log (gpu-check --logs) has the request.
 * Results are checked on a GPU only (tools/gpu-check): the sim has no cuFFT
 * kernels, so CI runs it with --calls-only (check.h). */
#include "check.h"

#include <cufft.h>
#include <math.h>
#include <vector>

/* Single precision over 2^21 points: about 1e-6 relative error. */
#define TOLERANCE 1e-4

static const int fft_h = 2048, fft_w = 1024;
static const int data_h = 2040, data_w = 1016;
static const int kernel_h = 7, kernel_w = 6, kernel_y = 3, kernel_x = 4;

static const char *fft_result_name(cufftResult r)
{
	switch (r) {
	case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
	case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
	case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
	case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
	case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
	case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
	case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
	case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
	case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
	case CUFFT_UNALIGNED_DATA: return "CUFFT_UNALIGNED_DATA";
	case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
	case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
	case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
	case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
	default: return "unknown cufftResult";
	}
}

/* One cuFFT call of step @what; on failure names both statuses and exits. */
static void fft_step(const char *what, cufftResult r)
{
	cudaError_t last;

	if (r == CUFFT_SUCCESS)
		return;
	last = cudaGetLastError();
	fprintf(stderr, "cuFFT error: %s returned %d %s; the runtime's last error: %d %s (%s)\n",
		what, (int)r, fft_result_name(r), (int)last, cudaGetErrorName(last),
		cudaGetErrorString(last));
	exit(1);
}

/* A runtime call of step @what. */
static void rt_step(const char *what, cudaError_t e)
{
	if (e == cudaSuccess)
		return;
	fprintf(stderr, "CUDA error: %s returned %d %s (%s)\n", what, (int)e, cudaGetErrorName(e),
		cudaGetErrorString(e));
	exit(1);
}

/* a = a * b * scale, elementwise. */
__global__ void modulate_and_scale(cufftComplex *a, const cufftComplex *b, int n, float scale)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
		cufftComplex x = a[i], y = b[i];

		a[i].x = (x.x * y.x - x.y * y.y) * scale;
		a[i].y = (x.x * y.y + x.y * y.x) * scale;
	}
}

/* out(y, x) = sum over the kernel of kernel(ky, kx) * D((y - ky + kernel_y) mod H,
 * (x - kx + kernel_x) mod W), D the zero-padded data: what the padded
 * kernel's spectrum times the data's computes. */
static void reference_point(const std::vector<cufftComplex> &data, const std::vector<cufftComplex> &kernel,
			    int y, int x, double *re, double *im)
{
	*re = *im = 0;
	for (int ky = 0; ky < kernel_h; ky++) {
		for (int kx = 0; kx < kernel_w; kx++) {
			int py = ((y - ky + kernel_y) % fft_h + fft_h) % fft_h;
			int px = ((x - kx + kernel_x) % fft_w + fft_w) % fft_w;
			const cufftComplex &k = kernel[(size_t)ky * kernel_w + kx];
			double dr = 0, di = 0;

			if (py < data_h && px < data_w) {
				dr = data[(size_t)py * data_w + px].x;
				di = data[(size_t)py * data_w + px].y;
			}
			*re += dr * k.x - di * k.y;
			*im += dr * k.y + di * k.x;
		}
	}
}

int main(int argc, char **argv)
{
	const size_t n = (size_t)fft_h * fft_w;
	unsigned long long rng = 0x243f6a8885a308d3ull;
	std::vector<cufftComplex> data((size_t)data_h * data_w), kernel((size_t)kernel_h * kernel_w);
	std::vector<cufftComplex> padded_data(n), padded_kernel(n), result;
	cufftComplex *d_data, *d_kernel;
	cufftHandle plan;
	size_t work = 0;
	double num = 0, den = 0, worst = 0;
	int version = 0, worst_y = 0, worst_x = 0;

	test_args(argc, argv);
	fft_step("cufftGetVersion", cufftGetVersion(&version));
	for (auto &c : data) {
		c.x = (float)test_rnd(&rng);
		c.y = (float)test_rnd(&rng);
	}
	for (auto &c : kernel) {
		c.x = (float)test_rnd(&rng);
		c.y = (float)test_rnd(&rng);
	}
	/* The data at the origin, zeros around it; the kernel's centre at the
	 * origin, its other taps wrapped around the edges (padKernel). */
	for (int y = 0; y < data_h; y++)
		for (int x = 0; x < data_w; x++)
			padded_data[(size_t)y * fft_w + x] = data[(size_t)y * data_w + x];
	for (int ky = 0; ky < kernel_h; ky++) {
		for (int kx = 0; kx < kernel_w; kx++) {
			int py = (ky - kernel_y + fft_h) % fft_h, px = (kx - kernel_x + fft_w) % fft_w;

			padded_kernel[(size_t)py * fft_w + px] = kernel[(size_t)ky * kernel_w + kx];
		}
	}

	rt_step("cudaMalloc(data)", cudaMalloc(&d_data, n * sizeof(cufftComplex)));
	rt_step("cudaMalloc(kernel)", cudaMalloc(&d_kernel, n * sizeof(cufftComplex)));
	rt_step("cudaMemcpy(data)", cudaMemcpy(d_data, padded_data.data(), n * sizeof(cufftComplex),
					       cudaMemcpyHostToDevice));
	rt_step("cudaMemcpy(kernel)", cudaMemcpy(d_kernel, padded_kernel.data(), n * sizeof(cufftComplex),
						 cudaMemcpyHostToDevice));

	fft_step("cufftPlan2d(2048, 1024, C2C)", cufftPlan2d(&plan, fft_h, fft_w, CUFFT_C2C));
	fft_step("cufftGetSize", cufftGetSize(plan, &work));
	printf("cuFFT %d: C2C %dx%d plan, %zu bytes of workspace\n", version, fft_h, fft_w, work);
	fft_step("cufftExecC2C(kernel, forward)", cufftExecC2C(plan, d_kernel, d_kernel, CUFFT_FORWARD));
	rt_step("cudaDeviceSynchronize after the kernel's transform", cudaDeviceSynchronize());
	fft_step("cufftExecC2C(data, forward)", cufftExecC2C(plan, d_data, d_data, CUFFT_FORWARD));
	rt_step("cudaDeviceSynchronize after the data's transform", cudaDeviceSynchronize());
	modulate_and_scale<<<256, 256>>>(d_data, d_kernel, (int)n, 1.0f / (float)n);
	rt_step("modulate_and_scale<<<256, 256>>>", cudaGetLastError());
	fft_step("cufftExecC2C(product, inverse)", cufftExecC2C(plan, d_data, d_data, CUFFT_INVERSE));
	rt_step("cudaDeviceSynchronize after the inverse", cudaDeviceSynchronize());
	result = test_from_device(d_data, n);

	/* Corners, the edges of the data and of the padding (where the
	 * kernel wraps), then random points. */
	const int fixed[][2] = { { 0, 0 }, { 0, data_w - 1 }, { data_h - 1, 0 }, { data_h - 1, data_w - 1 },
				 { fft_h - 1, fft_w - 1 }, { fft_h - 3, 5 }, { 2, fft_w - 2 }, { 1024, 512 } };
	for (int i = 0; i < 64; i++) {
		int y, x;
		double re, im, e;

		if (i < (int)(sizeof(fixed) / sizeof(fixed[0]))) {
			y = fixed[i][0];
			x = fixed[i][1];
		} else {
			y = (int)((test_rnd(&rng) + 1.0) / 2.0 * fft_h) % fft_h;
			x = (int)((test_rnd(&rng) + 1.0) / 2.0 * fft_w) % fft_w;
		}
		reference_point(data, kernel, y, x, &re, &im);
		const cufftComplex &g = result[(size_t)y * fft_w + x];
		e = (g.x - re) * (g.x - re) + (g.y - im) * (g.y - im);
		num += e;
		den += re * re + im * im;
		if (e > worst) {
			worst = e;
			worst_y = y;
			worst_x = x;
		}
	}
	printf("convolution 2048x1024 C2C, %dx%d kernel: relative error %.3g over 64 points, worst at (%d, %d) "
	       "(tolerance %g)\n", kernel_h, kernel_w, sqrt(num / den), worst_y, worst_x, TOLERANCE);
	REQUIRE_RESULT(sqrt(num / den) < TOLERANCE, "relative error %g", sqrt(num / den));

	fft_step("cufftDestroy", cufftDestroy(plan));
	rt_step("cudaFree(data)", cudaFree(d_data));
	rt_step("cudaFree(kernel)", cudaFree(d_kernel));
	test_pass("cufft_convolution");
	return 0;
}
