/* cl_ckpt_loop: an OpenCL loop whose result depends on every step, for the
 * checkpoint tests (tests/opencl/ckpt-opencl), as tests/cuda/ckpt_loop.cu
 * is for CUDA. It prints "CHECKSUM <hex>" of its data at the end: a run
 * that was snapshotted, killed and restored must print the same as an
 * uninterrupted one, and the same as a run on the host's platform.
 *
 *   cl_ckpt_loop ITERATIONS [MARK_AT MARK_FILE [STEP_MS]]
 *
 * What a restore must bring back, all made before the loop: a profiling
 * queue; a state buffer every step rewrites; a salt buffer the host may
 * not access (CL_MEM_HOST_NO_ACCESS, filled at creation); a sub-buffer of
 * the state's second half that a kernel with local memory mixes every
 * fourth step; a 2D image written by one kernel every eighth step and read
 * through a sampler by another; a program built from source with options;
 * kernels whose arguments were set once (only the step is set again); a
 * user event set complete at the start that every eighth step waits for;
 * an event of the first step, kept to the end, whose status, command type
 * and profiling counters are printed then. Every step also reads one word
 * back (a synchronising call) into the checksum.
 *
 * At iteration MARK_AT it writes MARK_FILE (the test then snapshots, kills
 * the worker and restores) and goes on, sleeping STEP_MS between steps. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N (1u << 16)
#define W 64u
#define H 32u
#define SALT 1024u
#define LOCAL 64u

#define CHECK(call)                                                                  \
	do {                                                                         \
		cl_int err_ = (call);                                                \
		if (err_ != CL_SUCCESS) {                                            \
			fprintf(stderr, "%s:%d: %s: error %d\n", __FILE__, __LINE__, #call, err_); \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

static const char *source =
	"__kernel void ck_mix(__global uint *x, uint n, uint step, __global const uint *salt)\n"
	"{\n"
	"	uint j = get_global_id(0);\n"
	"	if (j < n)\n"
	"		x[j] = x[j] * 1664525u + 1013904223u + (step ^ j) + salt[j % SALT] * MUL;\n"
	"}\n"
	"__kernel void ck_tail(__global uint *y, __local uint *tmp)\n"
	"{\n"
	"	uint l = get_local_id(0), g = get_global_id(0), s = get_local_size(0);\n"
	"	tmp[l] = y[g];\n"
	"	barrier(CLK_LOCAL_MEM_FENCE);\n"
	"	y[g] ^= tmp[(l + 1) % s] + 7u;\n"
	"}\n"
	"__kernel void ck_to_image(__global const uint *x, __write_only image2d_t img, uint step)\n"
	"{\n"
	"	int2 p = (int2)(get_global_id(0), get_global_id(1));\n"
	"	uint i = p.y * get_global_size(0) + p.x;\n"
	"	write_imageui(img, p, (uint4)(x[i], x[i] ^ step, i, step));\n"
	"}\n"
	"__kernel void ck_from_image(__global uint *x, __read_only image2d_t img, sampler_t s)\n"
	"{\n"
	"	int2 p = (int2)(get_global_id(0), get_global_id(1));\n"
	"	uint i = p.y * get_global_size(0) + p.x;\n"
	"	uint4 v = read_imageui(img, s, p);\n"
	"	x[i + 4096u] ^= v.x + v.y * 3u + v.z + v.w;\n"
	"}\n";

static uint64_t fold(uint64_t h, uint32_t v)
{
	return (h ^ v) * 0x100000001b3ull;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	unsigned iters = argc > 1 ? (unsigned)atoi(argv[1]) : 200;
	unsigned mark_at = argc > 3 ? (unsigned)atoi(argv[2]) : 0;
	const char *mark = argc > 3 ? argv[3] : NULL;
	unsigned step_ms = argc > 4 ? (unsigned)atoi(argv[4]) : 0;
	cl_platform_id plat;
	cl_device_id dev;
	cl_int err;
	uint32_t *host = malloc(N * sizeof(uint32_t)), salt[SALT];
	uint64_t h = 0xcbf29ce484222325ull;
	cl_ulong t[4];

	for (unsigned i = 0; i < N; i++)
		host[i] = i * 2654435761u;
	for (unsigned i = 0; i < SALT; i++)
		salt[i] = i * 40503u + 17u;
	CHECK(clGetPlatformIDs(1, &plat, NULL));
	CHECK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
	cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	CHECK(err);
	cl_queue_properties qp[] = { CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0 };
	cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, qp, &err);
	CHECK(err);
	cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, N * sizeof(uint32_t), host, &err);
	CHECK(err);
	cl_mem s = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_HOST_NO_ACCESS | CL_MEM_COPY_HOST_PTR, sizeof(salt),
				  salt, &err);
	CHECK(err);
	cl_buffer_region half = { N / 2 * sizeof(uint32_t), N / 2 * sizeof(uint32_t) };
	cl_mem y = clCreateSubBuffer(x, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &half, &err);
	CHECK(err);
	cl_image_format fmt = { CL_RGBA, CL_UNSIGNED_INT32 };
	cl_image_desc desc = { .image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = W, .image_height = H };
	cl_mem img = clCreateImage(ctx, CL_MEM_READ_WRITE, &fmt, &desc, NULL, &err);
	CHECK(err);
	cl_sampler_properties sp[] = { CL_SAMPLER_NORMALIZED_COORDS, CL_FALSE, CL_SAMPLER_ADDRESSING_MODE,
				       CL_ADDRESS_CLAMP_TO_EDGE, CL_SAMPLER_FILTER_MODE, CL_FILTER_NEAREST, 0 };
	cl_sampler smp = clCreateSamplerWithProperties(ctx, sp, &err);
	CHECK(err);
	cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
	CHECK(err);
	CHECK(clBuildProgram(prog, 1, &dev, "-DMUL=5u -DSALT=1024u", NULL, NULL));
	cl_kernel mix = clCreateKernel(prog, "ck_mix", &err);
	CHECK(err);
	cl_kernel tail = clCreateKernel(prog, "ck_tail", &err);
	CHECK(err);
	cl_kernel to_image = clCreateKernel(prog, "ck_to_image", &err);
	CHECK(err);
	cl_kernel from_image = clCreateKernel(prog, "ck_from_image", &err);
	CHECK(err);
	cl_uint n = N;
	CHECK(clSetKernelArg(mix, 0, sizeof(x), &x));
	CHECK(clSetKernelArg(mix, 1, sizeof(n), &n));
	CHECK(clSetKernelArg(mix, 3, sizeof(s), &s));
	CHECK(clSetKernelArg(tail, 0, sizeof(y), &y));
	CHECK(clSetKernelArg(tail, 1, LOCAL * sizeof(uint32_t), NULL));
	CHECK(clSetKernelArg(to_image, 0, sizeof(x), &x));
	CHECK(clSetKernelArg(to_image, 1, sizeof(img), &img));
	CHECK(clSetKernelArg(from_image, 0, sizeof(x), &x));
	CHECK(clSetKernelArg(from_image, 1, sizeof(img), &img));
	CHECK(clSetKernelArg(from_image, 2, sizeof(smp), &smp));
	cl_event gate = clCreateUserEvent(ctx, &err);
	CHECK(err);
	CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
	cl_event first = NULL;
	size_t global = N, local = LOCAL, half_n = N / 2, wh[2] = { W, H };

	for (unsigned it = 0; it < iters; it++) {
		cl_uint step = it;
		uint32_t word;

		CHECK(clSetKernelArg(mix, 2, sizeof(step), &step));
		CHECK(clSetKernelArg(to_image, 2, sizeof(step), &step));
		CHECK(clEnqueueNDRangeKernel(q, mix, 1, NULL, &global, NULL, it % 8 == 0 ? 1 : 0,
					     it % 8 == 0 ? &gate : NULL, it == 0 ? &first : NULL));
		if (it % 4 == 1)
			CHECK(clEnqueueNDRangeKernel(q, tail, 1, NULL, &half_n, &local, 0, NULL, NULL));
		if (it % 8 == 3) {
			CHECK(clEnqueueNDRangeKernel(q, to_image, 2, NULL, wh, NULL, 0, NULL, NULL));
			CHECK(clEnqueueNDRangeKernel(q, from_image, 2, NULL, wh, NULL, 0, NULL, NULL));
		}
		CHECK(clEnqueueReadBuffer(q, x, CL_TRUE, (it * 977u % N) * sizeof(uint32_t), sizeof(word), &word, 0,
					  NULL, NULL));
		h = fold(h, word);
		if (mark && it == mark_at) {
			FILE *f = fopen(mark, "w");

			if (f)
				fclose(f);
		}
		if (mark && it >= mark_at && step_ms)
			sleep_ms(step_ms);
	}
	CHECK(clFinish(q));
	CHECK(clEnqueueReadBuffer(q, x, CL_TRUE, 0, N * sizeof(uint32_t), host, 0, NULL, NULL));
	for (unsigned i = 0; i < N; i++)
		h = fold(h, host[i]);
	{
		uint32_t px[W * H * 4];
		size_t origin[3] = { 0, 0, 0 }, region[3] = { W, H, 1 };

		CHECK(clEnqueueReadImage(q, img, CL_TRUE, origin, region, 0, 0, px, 0, NULL, NULL));
		for (unsigned i = 0; i < W * H * 4; i++)
			h = fold(h, px[i]);
	}
	{
		cl_int st = 1;
		cl_command_type type = 0;

		CHECK(clGetEventInfo(first, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL));
		CHECK(clGetEventInfo(first, CL_EVENT_COMMAND_TYPE, sizeof(type), &type, NULL));
		for (unsigned i = 0; i < 4; i++)
			CHECK(clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_QUEUED + i, sizeof(t[i]), &t[i], NULL));
		printf("first event: status %d, command 0x%x, profiling %s\n", st, type,
		       t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3] ? "ordered" : "out of order");
		CHECK(clGetEventInfo(gate, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL));
		printf("user event: status %d\n", st);
	}
	printf("CHECKSUM %016llx\n", (unsigned long long)h);
	clReleaseEvent(first);
	clReleaseEvent(gate);
	clReleaseKernel(mix);
	clReleaseKernel(tail);
	clReleaseKernel(to_image);
	clReleaseKernel(from_image);
	clReleaseProgram(prog);
	clReleaseSampler(smp);
	clReleaseMemObject(img);
	clReleaseMemObject(y);
	clReleaseMemObject(s);
	clReleaseMemObject(x);
	clReleaseCommandQueue(q);
	clReleaseContext(ctx);
	free(host);
	return 0;
}
