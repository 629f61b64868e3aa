/* bench/opencl's workloads (docs/benchmarks.md, "bench/opencl"): one OpenCL
 * program, one workload a run, on the first GPU of the loader's first
 * platform (the first device of any type without one). Set-up (context,
 * build, buffers, one warm-up repetition) is not timed; then REPS timed
 * repetitions, each ended by clFinish, and it prints
 *
 *     WORKLOAD <name> ms <median of the repetitions> check <checksum>
 *
 * and exits 1 when a call fails or the result is wrong.
 *
 *     opencl_workloads compute|sgemm|bandwidth|small [SCALE] [REPS]
 *
 * SCALE (default 1) multiplies the work (smaller than 1 for a CPU platform).
 *   compute    a long kernel: FMA chains in registers, every work-item
 *   sgemm      C = A * B, square matrices, 16x16 tiles in local memory
 *   bandwidth  a buffer copied by a kernel, many passes
 *   small      many tiny kernels back to back (the remoting's cost per launch)
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *source =
	"__kernel void fma_loop(__global float *out, int iters) {\n"
	"  size_t i = get_global_id(0);\n"
	"  float a = (float)(i & 255) * 1e-3f, b = 0.999f, c = 1e-4f, d = 0.5f;\n"
	"  for (int k = 0; k < iters; k++) {\n"
	"    a = fma(a, b, c); d = fma(d, b, c); a = fma(a, b, c); d = fma(d, b, c);\n"
	"  }\n"
	"  out[i] = a + d;\n"
	"}\n"
	"#define T 16\n"
	"__kernel void sgemm(__global const float *A, __global const float *B, __global float *C, int n) {\n"
	"  __local float As[T][T], Bs[T][T];\n"
	"  int r = get_local_id(1), c = get_local_id(0);\n"
	"  int row = get_group_id(1) * T + r, col = get_group_id(0) * T + c;\n"
	"  float acc = 0.0f;\n"
	"  for (int t = 0; t < n; t += T) {\n"
	"    As[r][c] = A[row * n + t + c]; Bs[r][c] = B[(t + r) * n + col];\n"
	"    barrier(CLK_LOCAL_MEM_FENCE);\n"
	"    for (int k = 0; k < T; k++) acc += As[r][k] * Bs[k][c];\n"
	"    barrier(CLK_LOCAL_MEM_FENCE);\n"
	"  }\n"
	"  C[row * n + col] = acc;\n"
	"}\n"
	"__kernel void copy4(__global const float4 *src, __global float4 *dst) {\n"
	"  size_t i = get_global_id(0); dst[i] = src[i];\n"
	"}\n"
	"__kernel void bump(__global int *x) { x[get_global_id(0)] += 1; }\n";

static cl_context ctx;
static cl_command_queue queue;
static cl_program program;

#define CHECK(call) \
	do { \
		cl_int err_ = (call); \
		if (err_ != CL_SUCCESS) { \
			fprintf(stderr, "%s:%d: %s: %d\n", __FILE__, __LINE__, #call, err_); \
			exit(1); \
		} \
	} while (0)

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Filled by a write: a creation's contents travel in one request through
 * tern, at most 32 MiB (docs/opencl.md, "Limits"). */
static cl_mem buffer(size_t bytes, const void *init)
{
	cl_int err;
	cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);

	CHECK(err);
	if (init)
		CHECK(clEnqueueWriteBuffer(queue, m, CL_TRUE, 0, bytes, init, 0, NULL, NULL));
	return m;
}

static cl_kernel kernel(const char *name)
{
	cl_int err;
	cl_kernel k = clCreateKernel(program, name, &err);

	CHECK(err);
	return k;
}

/* One workload: its set-up, one repetition, its check. */
struct workload {
	const char *name;
	void (*setup)(double scale);
	void (*once)(void);
	double (*check)(void);      /* the checksum; NAN when wrong */
};

/* compute */
static cl_kernel fma_k;
static cl_mem fma_out;
static size_t fma_items;
static cl_int fma_iters;

static void compute_setup(double scale)
{
	fma_items = 1 << 20;
	fma_iters = (cl_int)(20000 * scale) + 1;
	fma_out = buffer(fma_items * sizeof(float), NULL);
	fma_k = kernel("fma_loop");
	CHECK(clSetKernelArg(fma_k, 0, sizeof(fma_out), &fma_out));
	CHECK(clSetKernelArg(fma_k, 1, sizeof(fma_iters), &fma_iters));
}

static void compute_once(void)
{
	CHECK(clEnqueueNDRangeKernel(queue, fma_k, 1, NULL, &fma_items, NULL, 0, NULL, NULL));
}

static double compute_check(void)
{
	float *out = malloc(fma_items * sizeof(float));
	double sum = 0;

	CHECK(clEnqueueReadBuffer(queue, fma_out, CL_TRUE, 0, fma_items * sizeof(float), out, 0, NULL, NULL));
	for (size_t i = 0; i < fma_items; i++) {
		if (!isfinite(out[i]) || out[i] <= 0)
			sum = NAN;
		sum += out[i];
	}
	free(out);
	return sum;
}

/* sgemm */
static cl_kernel gemm_k;
static cl_mem gemm_a, gemm_b, gemm_c;
static cl_int gemm_n;

static void sgemm_setup(double scale)
{
	size_t bytes;
	float *a, *b;

	gemm_n = (cl_int)(4096 * sqrt(scale)) / 16 * 16;
	if (gemm_n < 16)
		gemm_n = 16;
	bytes = (size_t)gemm_n * gemm_n * sizeof(float);
	a = malloc(bytes);
	b = malloc(bytes);
	/* A is all ones, B's column j is j: C[i][j] = n * j, exact in floats for these sizes. */
	for (size_t i = 0; i < (size_t)gemm_n * gemm_n; i++) {
		a[i] = 1.0f;
		b[i] = (float)(i % gemm_n) / gemm_n;
	}
	gemm_a = buffer(bytes, a);
	gemm_b = buffer(bytes, b);
	gemm_c = buffer(bytes, NULL);
	free(a);
	free(b);
	gemm_k = kernel("sgemm");
	CHECK(clSetKernelArg(gemm_k, 0, sizeof(cl_mem), &gemm_a));
	CHECK(clSetKernelArg(gemm_k, 1, sizeof(cl_mem), &gemm_b));
	CHECK(clSetKernelArg(gemm_k, 2, sizeof(cl_mem), &gemm_c));
	CHECK(clSetKernelArg(gemm_k, 3, sizeof(cl_int), &gemm_n));
}

static void sgemm_once(void)
{
	size_t global[2] = { (size_t)gemm_n, (size_t)gemm_n }, local[2] = { 16, 16 };

	CHECK(clEnqueueNDRangeKernel(queue, gemm_k, 2, NULL, global, local, 0, NULL, NULL));
}

static double sgemm_check(void)
{
	size_t n = (size_t)gemm_n;
	float *c = malloc(n * n * sizeof(float));
	double sum = 0;

	CHECK(clEnqueueReadBuffer(queue, gemm_c, CL_TRUE, 0, n * n * sizeof(float), c, 0, NULL, NULL));
	for (size_t i = 0; i < n * n; i++) {
		if (fabsf(c[i] - (float)(i % n)) > 1e-3f * n)
			sum = NAN;
		sum += c[i];
	}
	free(c);
	return sum;
}

/* bandwidth */
static cl_kernel copy_k;
static cl_mem copy_src, copy_dst;
static size_t copy_items;
static int copy_passes;

static void bandwidth_setup(double scale)
{
	size_t bytes = (size_t)(1024.0 * 1024 * 1024 * (scale < 1 ? scale : 1));
	float *init;

	bytes = bytes / 64 * 64;
	copy_items = bytes / sizeof(cl_float4);
	copy_passes = (int)(20 * (scale > 1 ? scale : 1));
	init = malloc(bytes);
	for (size_t i = 0; i < bytes / sizeof(float); i++)
		init[i] = (float)(i & 1023);
	copy_src = buffer(bytes, init);
	copy_dst = buffer(bytes, NULL);
	free(init);
	copy_k = kernel("copy4");
	CHECK(clSetKernelArg(copy_k, 0, sizeof(cl_mem), &copy_src));
	CHECK(clSetKernelArg(copy_k, 1, sizeof(cl_mem), &copy_dst));
}

static void bandwidth_once(void)
{
	for (int p = 0; p < copy_passes; p++)
		CHECK(clEnqueueNDRangeKernel(queue, copy_k, 1, NULL, &copy_items, NULL, 0, NULL, NULL));
}

static double bandwidth_check(void)
{
	size_t n = copy_items * 4;
	float *out = malloc(n * sizeof(float));
	double sum = 0;

	CHECK(clEnqueueReadBuffer(queue, copy_dst, CL_TRUE, 0, n * sizeof(float), out, 0, NULL, NULL));
	for (size_t i = 0; i < n; i++) {
		if (out[i] != (float)(i & 1023))
			sum = NAN;
		sum += out[i];
	}
	free(out);
	return sum;
}

/* small */
static cl_kernel bump_k;
static cl_mem bump_x;
static int bump_launches, bump_done;

static void small_setup(double scale)
{
	bump_launches = (int)(20000 * scale) + 1;
	bump_x = buffer(256 * sizeof(cl_int), NULL);
	bump_k = kernel("bump");
	CHECK(clEnqueueFillBuffer(queue, bump_x, &(cl_int){ 0 }, sizeof(cl_int), 0, 256 * sizeof(cl_int), 0, NULL,
				  NULL));
	CHECK(clSetKernelArg(bump_k, 0, sizeof(cl_mem), &bump_x));
}

static void small_once(void)
{
	size_t items = 256;

	for (int i = 0; i < bump_launches; i++)
		CHECK(clEnqueueNDRangeKernel(queue, bump_k, 1, NULL, &items, NULL, 0, NULL, NULL));
	bump_done += bump_launches;
}

static double small_check(void)
{
	cl_int x[256];
	double sum = 0;

	CHECK(clEnqueueReadBuffer(queue, bump_x, CL_TRUE, 0, sizeof(x), x, 0, NULL, NULL));
	for (int i = 0; i < 256; i++) {
		if (x[i] != bump_done)
			sum = NAN;
		sum += x[i];
	}
	return sum;
}

static const struct workload workloads[] = {
	{ "compute", compute_setup, compute_once, compute_check },
	{ "sgemm", sgemm_setup, sgemm_once, sgemm_check },
	{ "bandwidth", bandwidth_setup, bandwidth_once, bandwidth_check },
	{ "small", small_setup, small_once, small_check },
};

static void open_device(void)
{
	cl_platform_id platform;
	cl_device_id dev;
	cl_int err;

	CHECK(clGetPlatformIDs(1, &platform, NULL));
	if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS)
		CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
	ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	CHECK(err);
	queue = clCreateCommandQueue(ctx, dev, 0, &err);
	CHECK(err);
	program = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
	CHECK(err);
	CHECK(clBuildProgram(program, 1, &dev, "", NULL, NULL));
}

int main(int argc, char **argv)
{
	const struct workload *w = NULL;
	double scale = argc > 2 ? atof(argv[2]) : 1, *ms, check;
	int reps = argc > 3 ? atoi(argv[3]) : 5;

	for (size_t i = 0; argc > 1 && i < sizeof(workloads) / sizeof(workloads[0]); i++)
		if (!strcmp(argv[1], workloads[i].name))
			w = &workloads[i];
	if (!w || scale <= 0 || reps < 1) {
		fprintf(stderr, "usage: %s compute|sgemm|bandwidth|small [SCALE] [REPS]\n", argv[0]);
		return 2;
	}
	open_device();
	w->setup(scale);
	w->once();              /* the warm-up: first launches compile and allocate */
	CHECK(clFinish(queue));
	ms = calloc((size_t)reps, sizeof(*ms));
	for (int r = 0; r < reps; r++) {
		double t0 = now_ms();

		w->once();
		CHECK(clFinish(queue));
		ms[r] = now_ms() - t0;
	}
	qsort(ms, (size_t)reps, sizeof(*ms), cmp_double);
	check = w->check();
	if (isnan(check)) {
		fprintf(stderr, "%s: wrong result\n", w->name);
		return 1;
	}
	printf("WORKLOAD %s ms %.3f check %.6e\n", w->name, ms[reps / 2], check);
	free(ms);
	return 0;
}
