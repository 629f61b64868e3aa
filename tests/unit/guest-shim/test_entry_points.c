/* The shim's entry points, seen through dlopen as an application sees them:
 * cuGetProcAddress resolution, the exact export list, the not-supported
 * defaults and the error tables. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *lib;
static char log_path[] = "/tmp/tern-shim-test-XXXXXX";

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t,
				   CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*err_fn)(CUresult, const char **);

static void *sym(const char *name)
{
	void *p = dlsym(lib, name);

	assert_non_null(p);
	return p;
}

static void *resolve(const char *name, int version, cuuint64_t flags, CUresult *res,
		     CUdriverProcAddressQueryResult *status)
{
	get_proc_v2_fn gp = (get_proc_v2_fn)sym("cuGetProcAddress_v2");
	void *fn = (void *)1;

	*res = gp(name, &fn, version, flags, status);
	return fn;
}

static void expect_resolves(const char *name, int version, cuuint64_t flags, const char *symbol)
{
	CUdriverProcAddressQueryResult st = -1;
	CUresult res;
	void *fn = resolve(name, version, flags, &res, &st);

	assert_int_equal(res, CUDA_SUCCESS);
	assert_int_equal(st, CU_GET_PROC_ADDRESS_SUCCESS);
	if (fn != sym(symbol))
		fail_msg("%s v%d flags %llu: not %s", name, version, (unsigned long long)flags, symbol);
}

static void test_proc_address_versions(void **state)
{
	expect_resolves("cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
	expect_resolves("cuMemAlloc", 13000, 0, "cuMemAlloc_v2");
	expect_resolves("cuMemAlloc", 2000, 0, "cuMemAlloc");
	expect_resolves("cuCtxCreate", 2000, 0, "cuCtxCreate");
	expect_resolves("cuCtxCreate", 3020, 0, "cuCtxCreate_v2");
	expect_resolves("cuCtxCreate", 11040, 0, "cuCtxCreate_v3");
	expect_resolves("cuCtxCreate", 12050, 0, "cuCtxCreate_v4");
	expect_resolves("cuCtxCreate", 12049, 0, "cuCtxCreate_v3");
	expect_resolves("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
	expect_resolves("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
	expect_resolves("cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2");
	expect_resolves("cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2");
	expect_resolves("cuDeviceGetUuid", 11040, 0, "cuDeviceGetUuid_v2");
}

static void test_proc_address_per_thread(void **state)
{
	expect_resolves("cuMemcpyHtoD", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
			"cuMemcpyHtoD_v2_ptds");
	expect_resolves("cuMemcpyHtoD", 7000, 0, "cuMemcpyHtoD_v2");
	expect_resolves("cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
			"cuLaunchKernel_ptsz");
	expect_resolves("cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel");
	expect_resolves("cuStreamBeginCapture", 10010,
			CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamBeginCapture_v2_ptsz");
	/* No per-thread variant: the plain symbol. */
	expect_resolves("cuMemAlloc", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
			"cuMemAlloc_v2");
}

static void test_proc_address_not_found(void **state)
{
	get_proc_fn gp1 = (get_proc_fn)sym("cuGetProcAddress");
	CUdriverProcAddressQueryResult st = -1;
	CUresult res;
	void *fn;

	fn = resolve("cuNoSuchFunction", 13000, 0, &res, &st);
	assert_int_equal(res, CUDA_ERROR_NOT_FOUND);
	assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	assert_null(fn);
	fn = resolve("cuLaunchKernelEx", 11000, 0, &res, &st);
	assert_int_equal(res, CUDA_ERROR_NOT_FOUND);
	assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	assert_null(fn);
	/* Versioned names are not entry-point names. */
	resolve("cuMemAlloc_v2", 13000, 0, &res, &st);
	assert_int_equal(res, CUDA_ERROR_NOT_FOUND);
	assert_int_equal(gp1("cuNoSuchFunction", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
	assert_int_equal(gp1("cuInit", NULL, 13000, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(gp1("cuInit", &fn, 13000, 0), CUDA_SUCCESS);
	assert_ptr_equal(fn, sym("cuInit"));
	/* GL interop is not exported by the stub, yet the runtime asks for it. */
	fn = resolve("cuGLInit", 2000, 0, &res, &st);
	assert_int_equal(res, CUDA_SUCCESS);
	assert_non_null(fn);
	assert_int_equal(((CUresult(*)(void))fn)(), CUDA_ERROR_NOT_SUPPORTED);
}

static int lines_read(const char *path, char ***out)
{
	FILE *f = fopen(path, "r");
	char buf[256], **v = NULL;
	int n = 0;

	assert_non_null(f);
	while (fgets(buf, sizeof(buf), f)) {
		buf[strcspn(buf, "\n")] = 0;
		if (!*buf)
			continue;
		v = realloc(v, sizeof(*v) * (n + 1));
		v[n++] = strdup(buf);
	}
	fclose(f);
	*out = v;
	return n;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_exports_exact(void **state)
{
	char **want, **got = NULL, cmd[1024], buf[256];
	int nwant = lines_read(getenv("SHIM_SYMBOLS"), &want), ngot = 0;
	FILE *p;

	assert_true(nwant > 600);
	for (int i = 0; i < nwant; i++)
		if (!dlsym(lib, want[i]))
			fail_msg("%s is not exported", want[i]);
	snprintf(cmd, sizeof(cmd), "%s -D --defined-only '%s'", getenv("SHIM_NM"),
		 getenv("SHIM_LIB"));
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(buf, sizeof(buf), p)) {
		char name[200];

		if (sscanf(buf, "%*s %*s %199s", name) != 1)
			continue;
		got = realloc(got, sizeof(*got) * (ngot + 1));
		got[ngot++] = strdup(name);
	}
	assert_int_equal(pclose(p), 0);
	qsort(want, nwant, sizeof(*want), str_cmp);
	qsort(got, ngot, sizeof(*got), str_cmp);
	for (int i = 0; i < ngot && i < nwant; i++)
		if (strcmp(got[i], want[i]))
			fail_msg("export %d: %s, expected %s", i, got[i], want[i]);
	assert_int_equal(ngot, nwant);
}

static int count_in_file(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, needle))
			n++;
	fclose(f);
	return n;
}

static void test_unimplemented_logs_once(void **state)
{
	/* Planar arrays are not remoted (docs/limits.md). */
	CUresult (*arr)(CUarray *, CUarray, unsigned) =
		(CUresult(*)(CUarray *, CUarray, unsigned))sym("cuArrayGetPlane");
	/* Host nodes are not remoted (docs/limits.md): the default answers. */
	CUresult (*host)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_HOST_NODE_PARAMS *) =
		(CUresult(*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
			     const CUDA_HOST_NODE_PARAMS *))sym("cuGraphAddHostNode");
	CUarray a;
	CUgraphNode n;

	assert_int_equal(arr(&a, NULL, 0), CUDA_ERROR_NOT_SUPPORTED);
	assert_int_equal(arr(&a, NULL, 0), CUDA_ERROR_NOT_SUPPORTED);
	assert_int_equal(host(&n, NULL, NULL, 0, NULL), CUDA_ERROR_NOT_SUPPORTED);
	assert_int_equal(count_in_file(log_path, "cuArrayGetPlane is not implemented"), 1);
	assert_int_equal(count_in_file(log_path, "cuGraphAddHostNode is not implemented"), 1);
}

static void test_error_tables(void **state)
{
	err_fn name_of = (err_fn)sym("cuGetErrorName"), text_of = (err_fn)sym("cuGetErrorString");
	FILE *f = fopen(getenv("SHIM_CUDA_H"), "r");
	char line[512];
	int in_enum = 0, codes = 0;
	const char *s;

	assert_non_null(f);
	/* Every value of cuda.h's CUresult enum has its own name and a text. */
	while (fgets(line, sizeof(line), f)) {
		char name[128];
		int value;

		if (strstr(line, "typedef enum cudaError_enum"))
			in_enum = 1;
		else if (in_enum && strstr(line, "} CUresult;"))
			break;
		if (!in_enum || sscanf(line, " %127[A-Z0-9_] = %d", name, &value) != 2)
			continue;
		assert_int_equal(name_of((CUresult)value, &s), CUDA_SUCCESS);
		assert_string_equal(s, name);
		assert_int_equal(text_of((CUresult)value, &s), CUDA_SUCCESS);
		assert_true(strlen(s) > 3);
		codes++;
	}
	fclose(f);
	assert_true(codes > 90);
	assert_int_equal(name_of((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	assert_null(s);
	assert_int_equal(text_of((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(name_of(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proc_address_versions),
		cmocka_unit_test(test_proc_address_per_thread),
		cmocka_unit_test(test_proc_address_not_found),
		cmocka_unit_test(test_exports_exact),
		cmocka_unit_test(test_unimplemented_logs_once),
		cmocka_unit_test(test_error_tables),
	};
	int fd = mkstemp(log_path), ret;

	if (fd < 0)
		return 1;
	close(fd);
	/* The shim reads its environment when it is loaded. */
	setenv("TERN_LOG_FILE", log_path, 1);
	setenv("TERN_SERVER", "unix:/nonexistent/tern.sock", 1);
	lib = dlopen(getenv("SHIM_LIB"), RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(log_path);
	return ret;
}
