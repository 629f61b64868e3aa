/* jit_link: the JIT linker and JIT options, as programs that compile their
 * kernels at run time use them (hashcat: NVRTC, then cuLinkCreate ...
 * cuLinkComplete, then cuModuleLoadDataEx). PTX embedded at build time is
 * linked from memory and from a file, with log buffers and the wall-time
 * option; the linked image is loaded and launched; PTX that is not PTX must
 * fail the link; cuModuleLoadDataEx answers its log options. */
#include "check.h"
#include "mod_jit_ptx.h"

#include <unistd.h>

#include <string>
#include <vector>

static std::string ptx_text()
{
	return std::string((const char *)mod_jit_ptx, mod_jit_ptx_size);
}

int main(void)
{
	DRV_FN(cuInit);
	DRV_FN(cuLinkCreate);
	DRV_FN(cuLinkAddData);
	DRV_FN(cuLinkAddFile);
	DRV_FN(cuLinkComplete);
	DRV_FN(cuLinkDestroy);
	DRV_FN(cuModuleLoadData);
	DRV_FN(cuModuleLoadDataEx);
	DRV_FN(cuModuleGetFunction);
	DRV_FN(cuModuleUnload);
	DRV_FN(cuLaunchKernel);
	const int n = 1000;
	std::string ptx = ptx_text();
	std::vector<float> h(n);
	float *d;

	CHECK(cudaFree(0));             /* the runtime's context, current on this thread */
	CHECK_DRV(p_cuInit(0));
	CHECK(cudaMalloc(&d, n * sizeof(float)));

	for (int round = 0; round < 2; round++) {
		char info[4096] = "stale", error[4096] = "stale";
		CUjit_option opts[] = { CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
					CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
					CU_JIT_WALL_TIME, CU_JIT_LOG_VERBOSE, CU_JIT_OPTIMIZATION_LEVEL };
		void *vals[] = { info, (void *)(uintptr_t)sizeof(info), error,
				 (void *)(uintptr_t)sizeof(error), NULL, (void *)(uintptr_t)1,
				 (void *)(uintptr_t)3 };
		CUlinkState link;
		CUmodule mod;
		CUfunction fn;
		void *image = NULL;
		size_t size = 0;

		CHECK_DRV(p_cuLinkCreate(7, opts, vals, &link));
		if (round == 0) {
			CHECK_DRV(p_cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)ptx.c_str(), ptx.size() + 1,
						  "mod_jit.ptx", 0, NULL, NULL));
		} else {
			char path[] = "/tmp/jit_link_XXXXXX";
			int fd = mkstemp(path);

			REQUIRE(fd >= 0, "mkstemp");
			REQUIRE(write(fd, ptx.data(), ptx.size()) == (ssize_t)ptx.size(), "write");
			close(fd);
			CHECK_DRV(p_cuLinkAddFile(link, CU_JIT_INPUT_PTX, path, 0, NULL, NULL));
			unlink(path);
		}
		CHECK_DRV(p_cuLinkComplete(link, &image, &size));
		REQUIRE(image && size > 0, "linked image %p of %zu bytes", image, size);
		REQUIRE((uintptr_t)vals[1] <= sizeof(info) && strlen(info) < sizeof(info),
			"info log size %zu", (size_t)(uintptr_t)vals[1]);
		REQUIRE(strcmp(info, "stale") != 0 && strcmp(error, "stale") != 0,
			"the link answered its log buffers");
		REQUIRE(error[0] == 0, "error log after a good link: %s", error);
		/* The image outlives nothing but the link state: load it before destroying. */
		CHECK_DRV(p_cuModuleLoadData(&mod, image));
		CHECK_DRV(p_cuLinkDestroy(link));
		CHECK_DRV(p_cuModuleGetFunction(&fn, mod, "jl_affine"));
		for (int i = 0; i < n; i++)
			h[i] = (float)i;
		CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
		float a = 2.0f + round, b = -1.0f;
		int count = n;
		void *args[] = { &d, &a, &b, &count };
		CHECK_DRV(p_cuLaunchKernel(fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
		CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
		for (int i = 0; i < n; i++)
			REQUIRE(h[i] == a * (float)i + b, "round %d: x[%d] = %g", round, i, h[i]);
		CHECK_DRV(p_cuModuleUnload(mod));
	}

	/* Not PTX: the driver refuses it when it is added; tern when the link
	 * completes (the inputs travel together). Either way the link fails. */
	{
		const char junk[] = "this is not PTX at all";
		CUlinkState link;
		void *image = NULL;
		size_t size = 0;
		CUresult r;

		CHECK_DRV(p_cuLinkCreate(0, NULL, NULL, &link));
		r = p_cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)junk, sizeof(junk), "junk", 0, NULL, NULL);
		if (r == CUDA_SUCCESS)
			r = p_cuLinkComplete(link, &image, &size);
		REQUIRE(r != CUDA_SUCCESS, "a link of junk succeeded");
		CHECK_DRV(p_cuLinkDestroy(link));
	}

	/* cuModuleLoadDataEx with log options: the PTX loads, the logs are answered. */
	{
		char info[1024] = "stale";
		CUjit_option opts[] = { CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES };
		void *vals[] = { info, (void *)(uintptr_t)sizeof(info) };
		CUmodule mod;
		CUfunction fn;

		CHECK_DRV(p_cuModuleLoadDataEx(&mod, ptx.c_str(), 2, opts, vals));
		REQUIRE(strcmp(info, "stale") != 0, "cuModuleLoadDataEx answered its info log");
		CHECK_DRV(p_cuModuleGetFunction(&fn, mod, "jl_affine"));
		CHECK_DRV(p_cuModuleUnload(mod));
	}
	CHECK(cudaFree(d));
	test_pass("jit_link");
	return 0;
}
