// Kernels whose parameter layouts and globals test_fatbin.c checks against
// the same types declared in C.  Keep the two in step.
struct pair {
	int a;
	double b;
};

struct big {
	float v[1024];
};

struct __align__(16) vec4 {
	float x, y, z, w;
};

__device__ float g_scale = 2.5f;
__device__ int g_zero[64];
__device__ double g_d[3] = {1.5, -2.0, 0.25};
__device__ unsigned short g_h = 0xbeef;
__constant__ int c_table[4] = {1, 2, 3, 4};
__constant__ int c_zero[8];
__device__ __managed__ int m_counter = 7;

extern "C" __global__ void saxpy(float *y, const float *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = g_scale * x[i] + y[i] + c_table[i & 3] + c_zero[i & 7];
}

// C++ linkage on purpose: the name is mangled.
__global__ void take_pair(pair p, char c, double d, int *out)
{
	out[0] = p.a + c + (int)d + (int)p.b + (int)g_d[out[1]] + g_h;
	m_counter++;
	g_zero[threadIdx.x & 63] = 1;
}

extern "C" __global__ void take_big(big b, int *out)
{
	out[0] = (int)b.v[threadIdx.x];
}

extern "C" __global__ void take_vec(char c, vec4 v, short s, long long ll, int *out)
{
	out[0] = c + (int)v.x + (int)v.w + s + (int)ll;
}

extern "C" __global__ void noargs(void)
{
}
