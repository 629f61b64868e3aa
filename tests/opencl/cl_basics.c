/* OpenCL through tern and on the host's platform directly: buffers, images,
 * several kernels, events (user events, profiling, callbacks), an
 * out-of-order queue and the errors a program sees. It prints what it saw,
 * one fact a line; tests/opencl/run compares the two runs' lines. Exits 1
 * when a result is wrong. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 4096

static int failures;

#define CHECK(cond, ...) \
	do { \
		if (!(cond)) { \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__); \
			printf("\n"); \
			failures++; \
		} \
	} while (0)
#define OK(call) \
	do { \
		cl_int r_ = (call); \
		CHECK(r_ == CL_SUCCESS, "%s -> %d", #call, r_); \
	} while (0)

static const char *src =
	"__kernel void scale(__global float *a, float f) { size_t i = get_global_id(0); a[i] *= f; }\n"
	"__kernel void add(__global const float *a, __global const float *b, __global float *c)\n"
	"{ size_t i = get_global_id(0); c[i] = a[i] + b[i]; }\n"
	"__kernel void sum_local(__global const float *a, __global float *out, __local float *tmp)\n"
	"{ size_t l = get_local_id(0), g = get_group_id(0), n = get_local_size(0);\n"
	"  tmp[l] = a[get_global_id(0)]; barrier(CLK_LOCAL_MEM_FENCE);\n"
	"  if (l == 0) { float s = 0; for (size_t k = 0; k < n; k++) s += tmp[k]; out[g] = s; } }\n"
	"__kernel void invert(__read_only image2d_t in, __write_only image2d_t out)\n"
	"{ int2 p = (int2)(get_global_id(0), get_global_id(1));\n"
	"  uint4 v = read_imageui(in, p);\n"   /* no sampler: NVIDIA's platform read wrong pixels with a literal one */
	"  write_imageui(out, p, (uint4)(255) - v); }\n";

static atomic_int callback_status = 1;

static void CL_CALLBACK on_complete(cl_event ev, cl_int status, void *data)
{
	atomic_store(&callback_status, status);
}

/* A non-blocking read's callback: whether its bytes were there. */
struct read_seen {
	const float *got, *want;
	size_t bytes;
};
static atomic_int read_callback_saw = -1;

static void CL_CALLBACK on_read(cl_event ev, cl_int status, void *data)
{
	const struct read_seen *r = data;

	atomic_store(&read_callback_saw, status == CL_COMPLETE && !memcmp(r->got, r->want, r->bytes));
}

int main(void)
{
	cl_platform_id platform;
	cl_device_id dev;
	cl_context ctx;
	cl_command_queue q, ooo;
	cl_program prog, bad;
	cl_kernel scale, add, sum, invert;
	cl_mem a, b, c, out;
	cl_event ev[4], user;
	cl_int err;
	float ha[N], hb[N], hc[N], sums[N / 64], f = 2.0f;
	char name[256], log[4096];
	cl_uint nplat = 0, nargs = 0;

	OK(clGetPlatformIDs(1, &platform, &nplat));
	CHECK(nplat >= 1, "platforms %u", nplat);
	OK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
	OK(clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof(name), name, NULL));
	printf("device %s\n", name);
	ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	OK(err);
	q = clCreateCommandQueueWithProperties(ctx, dev, (cl_queue_properties[]){ CL_QUEUE_PROPERTIES,
		CL_QUEUE_PROFILING_ENABLE, 0 }, &err);
	OK(err);
	ooo = clCreateCommandQueueWithProperties(ctx, dev, (cl_queue_properties[]){ CL_QUEUE_PROPERTIES,
		CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | CL_QUEUE_PROFILING_ENABLE, 0 }, &err);
	printf("out-of-order queue %d\n", err);

	/* Programs: a good one, and a build failure with its log. */
	prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
	OK(err);
	OK(clBuildProgram(prog, 1, &dev, "-cl-std=CL1.2", NULL, NULL));
	const char *broken = "__kernel void broken(__global int *a) { a[0] = undefined_thing; }";
	bad = clCreateProgramWithSource(ctx, 1, &broken, NULL, &err);
	err = clBuildProgram(bad, 1, &dev, NULL, NULL, NULL);
	printf("bad build %d\n", err);
	OK(clGetProgramBuildInfo(bad, dev, CL_PROGRAM_BUILD_LOG, sizeof(log), log, NULL));
	printf("bad build log names the symbol %d\n", strstr(log, "undefined_thing") != NULL);
	clCreateKernel(prog, "no_such_kernel", &err);
	printf("missing kernel %d\n", err);
	scale = clCreateKernel(prog, "scale", &err);
	OK(err);
	add = clCreateKernel(prog, "add", &err);
	sum = clCreateKernel(prog, "sum_local", &err);
	OK(clGetKernelInfo(add, CL_KERNEL_NUM_ARGS, sizeof(nargs), &nargs, NULL));
	printf("add args %u\n", nargs);
	{
		cl_program back;

		OK(clGetKernelInfo(add, CL_KERNEL_PROGRAM, sizeof(back), &back, NULL));
		CHECK(back == prog, "CL_KERNEL_PROGRAM is the program");
	}

	/* Buffers */
	for (int i = 0; i < N; i++) {
		ha[i] = (float)i;
		hb[i] = (float)(N - i);
	}
	a = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof(ha), ha, &err);
	OK(err);
	b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(hb), NULL, &err);
	c = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(hc), NULL, &err);
	out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, sizeof(sums), NULL, &err);
	OK(clEnqueueWriteBuffer(q, b, CL_FALSE, 0, sizeof(hb), hb, 0, NULL, NULL));
	printf("bad arg index %d\n", clSetKernelArg(scale, 7, sizeof(f), &f));
	printf("bad arg size %d\n", clSetKernelArg(scale, 1, 2, &f));
	OK(clSetKernelArg(scale, 0, sizeof(a), &a));
	OK(clSetKernelArg(scale, 1, sizeof(f), &f));
	size_t gsz = N, lsz = 64;
	OK(clEnqueueNDRangeKernel(q, scale, 1, NULL, &gsz, NULL, 0, NULL, &ev[0]));
	OK(clSetKernelArg(add, 0, sizeof(a), &a));
	OK(clSetKernelArg(add, 1, sizeof(b), &b));
	OK(clSetKernelArg(add, 2, sizeof(c), &c));
	OK(clEnqueueNDRangeKernel(q, add, 1, NULL, &gsz, NULL, 1, &ev[0], &ev[1]));
	OK(clSetKernelArg(sum, 0, sizeof(c), &c));
	OK(clSetKernelArg(sum, 1, sizeof(out), &out));
	OK(clSetKernelArg(sum, 2, lsz * sizeof(float), NULL));
	OK(clEnqueueNDRangeKernel(q, sum, 1, NULL, &gsz, &lsz, 0, NULL, &ev[2]));
	OK(clSetEventCallback(ev[2], CL_COMPLETE, on_complete, NULL));
	OK(clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof(sums), sums, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, c, CL_TRUE, 0, sizeof(hc), hc, 0, NULL, NULL));
	for (int i = 0; i < N; i++)
		CHECK(hc[i] == 2.0f * i + (N - i), "c[%d] = %f", i, hc[i]);
	double total = 0;
	for (int g = 0; g < N / 64; g++)
		total += sums[g];
	printf("sum %.1f\n", total);
	{
		cl_ulong t0 = 0, t1 = 0;
		cl_int st;

		OK(clGetEventProfilingInfo(ev[1], CL_PROFILING_COMMAND_START, sizeof(t0), &t0, NULL));
		OK(clGetEventProfilingInfo(ev[1], CL_PROFILING_COMMAND_END, sizeof(t1), &t1, NULL));
		CHECK(t1 >= t0 && t0, "profiling %llu %llu", (unsigned long long)t0, (unsigned long long)t1);
		OK(clGetEventInfo(ev[1], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL));
		printf("event status %d\n", st);
		for (int i = 0; i < 2000 && atomic_load(&callback_status) != CL_COMPLETE; i++)
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
		printf("callback status %d\n", atomic_load(&callback_status));
	}

	/* Map, fill, copy, sub-buffer */
	float *m = clEnqueueMapBuffer(q, c, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, sizeof(hc), 0, NULL, NULL, &err);
	OK(err);
	if (m) {
		printf("mapped c[10] %.1f\n", m[10]);
		m[10] = -1.0f;
		OK(clEnqueueUnmapMemObject(q, c, m, 0, NULL, NULL));
	}
	float pattern = 3.5f;
	OK(clEnqueueFillBuffer(q, b, &pattern, sizeof(pattern), 0, sizeof(hb), 0, NULL, NULL));
	OK(clEnqueueCopyBuffer(q, c, a, 0, 0, sizeof(hc), 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, a, CL_TRUE, 0, sizeof(ha), ha, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof(hb), hb, 0, NULL, NULL));
	printf("copied a[10] %.1f filled b[7] %.1f\n", ha[10], hb[7]);
	{
		cl_buffer_region r = { 1024 * sizeof(float), 16 * sizeof(float) };
		cl_mem sub = clCreateSubBuffer(a, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
		float s[16];

		OK(err);
		OK(clEnqueueReadBuffer(q, sub, CL_TRUE, 0, sizeof(s), s, 0, NULL, NULL));
		printf("sub-buffer [0] %.1f\n", s[0]);
		clReleaseMemObject(sub);
	}
	/* Errors of enqueues the platform (or tern's ICD) checks at once. */
	printf("read past the end %d\n", clEnqueueReadBuffer(q, a, CL_TRUE, sizeof(ha) - 4, 8, ha, 0, NULL, NULL));
	printf("bad wait list %d\n", clEnqueueMarkerWithWaitList(q, 1, NULL, NULL));

	/* A user event holding an out-of-order queue's work. */
	if (ooo) {
		float one = 1.0f;

		user = clCreateUserEvent(ctx, &err);
		OK(err);
		OK(clSetKernelArg(scale, 0, sizeof(c), &c));
		OK(clSetKernelArg(scale, 1, sizeof(one), &one));
		OK(clEnqueueNDRangeKernel(ooo, scale, 1, NULL, &gsz, NULL, 1, &user, &ev[3]));
		cl_int st;
		OK(clGetEventInfo(ev[3], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL));
		printf("held by user event: not complete %d\n", st != CL_COMPLETE);
		OK(clSetUserEventStatus(user, CL_COMPLETE));
		printf("user event set twice %d\n", clSetUserEventStatus(user, CL_COMPLETE));
		OK(clWaitForEvents(1, &ev[3]));
		OK(clGetEventInfo(ev[3], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL));
		printf("after user event %d\n", st);
		clReleaseEvent(user);
		clReleaseEvent(ev[3]);
	}

	/* Non-blocking reads and a map held by a user event set after they are
	 * enqueued: their bytes are there when the application may look at
	 * them (clWaitForEvents, CL_COMPLETE, a callback, clFinish). */
	{
		static float r1[N], r2[N];
		struct read_seen seen = { r2, ha, sizeof(r2) };
		cl_event gate = clCreateUserEvent(ctx, &err), rd[3];
		cl_int st = CL_QUEUED;
		float *mp;

		OK(err);
		OK(clEnqueueReadBuffer(q, a, CL_FALSE, 0, sizeof(r1), r1, 1, &gate, &rd[0]));
		OK(clEnqueueReadBuffer(q, a, CL_FALSE, 0, sizeof(r2), r2, 1, &gate, &rd[1]));
		mp = clEnqueueMapBuffer(q, a, CL_FALSE, CL_MAP_READ, 0, sizeof(ha), 1, &gate, &rd[2], &err);
		OK(err);
		OK(clSetEventCallback(rd[1], CL_COMPLETE, on_read, &seen));
		OK(clGetEventInfo(rd[0], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL));
		printf("read held by user event: not complete %d\n", st != CL_COMPLETE);
		OK(clSetUserEventStatus(gate, CL_COMPLETE));
		OK(clWaitForEvents(1, &rd[0]));
		printf("read after its wait %d\n", !memcmp(r1, ha, sizeof(r1)));
		for (int i = 0; i < 2000; i++) {
			OK(clGetEventInfo(rd[1], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL));
			if (st == CL_COMPLETE)
				break;
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
		}
		printf("read when complete %d %d\n", st, !memcmp(r2, ha, sizeof(r2)));
		for (int i = 0; i < 2000 && atomic_load(&read_callback_saw) < 0; i++)
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
		printf("read callback saw its bytes %d\n", atomic_load(&read_callback_saw));
		OK(clFinish(q));
		printf("map after finish %d\n", mp && !memcmp(mp, ha, sizeof(ha)));
		if (mp)
			OK(clEnqueueUnmapMemObject(q, a, mp, 0, NULL, NULL));
		OK(clFinish(q));
		for (int i = 0; i < 3; i++)
			clReleaseEvent(rd[i]);
		clReleaseEvent(gate);
	}

	/* Images: a 2D image inverted by a kernel, read back. */
	{
		cl_bool images = CL_FALSE;

		clGetDeviceInfo(dev, CL_DEVICE_IMAGE_SUPPORT, sizeof(images), &images, NULL);
		printf("images %d\n", images);
		if (images) {
			cl_image_format fmt = { CL_RGBA, CL_UNSIGNED_INT8 };
			cl_image_desc desc = { .image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = 32, .image_height = 16 };
			unsigned char px[16][32][4], back[16][32][4];
			cl_mem in, outi;

			for (int y = 0; y < 16; y++)
				for (int x = 0; x < 32; x++)
					for (int k = 0; k < 4; k++)
						px[y][x][k] = (unsigned char)(x * 7 + y * 3 + k);
			in = clCreateImage(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, &fmt, &desc, px, &err);
			OK(err);
			outi = clCreateImage(ctx, CL_MEM_WRITE_ONLY, &fmt, &desc, NULL, &err);
			OK(err);
			invert = clCreateKernel(prog, "invert", &err);
			OK(err);
			OK(clSetKernelArg(invert, 0, sizeof(in), &in));
			OK(clSetKernelArg(invert, 1, sizeof(outi), &outi));
			size_t g2[2] = { 32, 16 }, origin[3] = { 0, 0, 0 }, region[3] = { 32, 16, 1 };
			OK(clEnqueueNDRangeKernel(q, invert, 2, NULL, g2, NULL, 0, NULL, NULL));
			OK(clEnqueueReadImage(q, outi, CL_TRUE, origin, region, 0, 0, back, 0, NULL, NULL));
			int wrong = 0;
			for (int y = 0; y < 16; y++)
				for (int x = 0; x < 32; x++)
					for (int k = 0; k < 4; k++)
						wrong += back[y][x][k] != 255 - px[y][x][k];
			printf("image inverted, wrong pixels %d\n", wrong);
			CHECK(!wrong, "image");
			size_t elem = 0;
			OK(clGetImageInfo(in, CL_IMAGE_ELEMENT_SIZE, sizeof(elem), &elem, NULL));
			printf("image element size %zu\n", elem);
			clReleaseKernel(invert);
			clReleaseMemObject(in);
			clReleaseMemObject(outi);
		}
	}

	OK(clFinish(q));
	for (int i = 0; i < 3; i++)
		clReleaseEvent(ev[i]);
	clReleaseMemObject(a);
	clReleaseMemObject(b);
	clReleaseMemObject(c);
	clReleaseMemObject(out);
	clReleaseKernel(scale);
	clReleaseKernel(add);
	clReleaseKernel(sum);
	clReleaseProgram(prog);
	clReleaseProgram(bad);
	if (ooo)
		clReleaseCommandQueue(ooo);
	clReleaseCommandQueue(q);
	clReleaseContext(ctx);
	printf("failures %d\n", failures);
	return failures ? 1 : 0;
}
