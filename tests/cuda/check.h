/* Checks shared by the CUDA C test programs.
 *
 * Every CUDA call in a test goes through one of these macros: a failure prints
 * one line "CUDA error: <call> returned <code> <name> (<text>) at file:line"
 * on stderr and exits 1, so a harness that sees a non-zero status also has the
 * call that failed. expect_*() check a call that must fail with a given code.
 * Driver API functions are never linked (the stub libcuda.so must not be a
 * dependency): programs resolve them at run time with drv_sym(), through the
 * runtime's cudaGetDriverEntryPointByVersion.
 */
#ifndef TERN_TEST_CHECK_H
#define TERN_TEST_CHECK_H

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CUDA_VERSION 13000

static inline void test_fail_rt(cudaError_t e, const char *call, const char *file, int line)
{
	fprintf(stderr, "CUDA error: %s returned %d %s (%s) at %s:%d\n", call, (int)e,
		cudaGetErrorName(e), cudaGetErrorString(e), file, line);
	exit(1);
}

#define CHECK(call)                                                            \
	do {                                                                   \
		cudaError_t check_e_ = (call);                                 \
		if (check_e_ != cudaSuccess)                                   \
			test_fail_rt(check_e_, #call, __FILE__, __LINE__);     \
	} while (0)

/* Driver-API status: names come from the driver itself when it can give them. */
typedef CUresult (*test_get_error_name_fn)(CUresult, const char **);
static test_get_error_name_fn test_drv_error_name;

static inline const char *test_drv_name(CUresult r)
{
	const char *name = NULL;

	if (test_drv_error_name && test_drv_error_name(r, &name) == CUDA_SUCCESS && name)
		return name;
	return "?";
}

static inline void test_fail_drv(CUresult r, const char *call, const char *file, int line)
{
	fprintf(stderr, "CUDA error: %s returned %d %s at %s:%d\n", call, (int)r,
		test_drv_name(r), file, line);
	exit(1);
}

#define CHECK_DRV(call)                                                        \
	do {                                                                   \
		CUresult check_r_ = (call);                                    \
		if (check_r_ != CUDA_SUCCESS)                                  \
			test_fail_drv(check_r_, #call, __FILE__, __LINE__);    \
	} while (0)

/* A call that must fail with exactly `want` (a runtime error code). */
#define EXPECT_RT(call, want)                                                  \
	do {                                                                   \
		cudaError_t check_e_ = (call);                                 \
		if (check_e_ != (want)) {                                      \
			fprintf(stderr, "FAIL: %s returned %d %s, expected %d %s at %s:%d\n", \
				#call, (int)check_e_, cudaGetErrorName(check_e_), \
				(int)(want), cudaGetErrorName(want), __FILE__, __LINE__); \
			exit(1);                                               \
		}                                                              \
	} while (0)

#define EXPECT_DRV(call, want)                                                 \
	do {                                                                   \
		CUresult check_r_ = (call);                                    \
		if (check_r_ != (want)) {                                      \
			fprintf(stderr, "FAIL: %s returned %d %s, expected %d %s at %s:%d\n", \
				#call, (int)check_r_, test_drv_name(check_r_),  \
				(int)(want), test_drv_name(want), __FILE__, __LINE__); \
			exit(1);                                               \
		}                                                              \
	} while (0)

#define REQUIRE(cond, ...)                                                     \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "FAIL: %s at %s:%d: ", #cond, __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			exit(1);                                               \
		}                                                              \
	} while (0)

/* Resolves a driver entry point through the runtime (which asks libcuda's
 * cuGetProcAddress), so the program never links libcuda. */
static inline void *drv_sym_version(const char *name, unsigned version)
{
	void *fn = NULL;
	cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;

	CHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &status));
	REQUIRE(status == cudaDriverEntryPointSuccess && fn,
		"driver entry point %s not found (status %d)", name, (int)status);
	if (!test_drv_error_name && strcmp(name, "cuGetErrorName") != 0)
		test_drv_error_name = (test_get_error_name_fn)drv_sym_version("cuGetErrorName",
									     TEST_CUDA_VERSION);
	return fn;
}

static inline void *drv_sym(const char *name)
{
	return drv_sym_version(name, TEST_CUDA_VERSION);
}

/* DRV_FN(cuMemsetD32) declares p_cuMemsetD32 with the prototype cuda.h gives
 * (cuda.h maps the name to its current version, e.g. cuMemsetD32_v2). */
#define DRV_FN(name) decltype(&name) p_##name = (decltype(&name))drv_sym(#name)

/* A CUDA library's status (cublasStatus_t, cufftResult ...: 0 is success in
 * every one): CHECK_LIB("cuFFT", cufftExecC2C(...)). */
#define CHECK_LIB(lib, call)                                                   \
	do {                                                                   \
		int check_st_ = (int)(call);                                   \
		if (check_st_ != 0) {                                          \
			fprintf(stderr, "%s error: %s returned %d at %s:%d\n", lib, #call, \
				check_st_, __FILE__, __LINE__);                \
			exit(1);                                               \
		}                                                              \
	} while (0)

/* Test data: a 64-bit LCG per program, values uniform in [-1, 1) with 24
 * bits, exact in float. */
static inline double test_rnd(unsigned long long *state)
{
	*state = *state * 6364136223846793005ull + 1442695040888963407ull;
	return (double)((*state >> 40) & 0xffffff) / (double)0x1000000 * 2.0 - 1.0;
}

#ifdef __cplusplus
#include <vector>

template <class T> static inline void test_fill(std::vector<T> &v, unsigned long long *state)
{
	for (auto &x : v)
		x = (T)test_rnd(state);
}

/* A new device buffer holding @v's elements. */
template <class T> static inline T *test_to_device(const std::vector<T> &v)
{
	T *d;

	CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
	CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
	return d;
}

/* @n elements of @d, once the whole device is idle (libraries may work on
 * streams that the legacy stream does not wait for). */
template <class T> static inline std::vector<T> test_from_device(const T *d, size_t n)
{
	std::vector<T> v(n);

	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
	return v;
}
#endif

/* The library programs (cuFFT, cuBLAS ...) take --calls-only: run every call
 * but leave the results unchecked. CI runs them so on the sim backend with
 * `ternd --sim-missing-kernels skip`, which runs no library kernel, to prove
 * that every driver call the libraries make is served; on a GPU they check
 * everything. */
static bool test_calls_only;

static inline void test_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		REQUIRE(!strcmp(argv[i], "--calls-only"), "unknown argument %s", argv[i]);
		test_calls_only = true;
	}
}

/* REQUIRE for a computed result: skipped (and said so) under --calls-only. */
#define REQUIRE_RESULT(cond, ...)                                              \
	do {                                                                   \
		if (test_calls_only) {                                         \
			if (!(cond))                                           \
				fprintf(stderr, "calls only: not checked: %s\n", #cond); \
		} else {                                                       \
			REQUIRE(cond, __VA_ARGS__);                            \
		}                                                              \
	} while (0)

static inline void test_pass(const char *name)
{
	printf("PASS %s%s\n", name, test_calls_only ? " (calls only, results not checked)" : "");
	fflush(stdout);
}

#endif
