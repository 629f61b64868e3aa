/* vmm: the driver's virtual memory management, as PyTorch's expandable
 * segments use it. Granularity; a reservation; three chunks mapped back to
 * back and made accessible in one call; a kernel and copies across the chunk
 * boundaries; properties of a handle; a handle retained from an address;
 * pointer attributes and the address range of mapped addresses; a chunk
 * unmapped and mapped again at another offset with its contents; a handle
 * released while mapped (its memory stays until unmapped); refused calls
 * (a mapping past the reservation, a second mapping of mapped addresses,
 * handle 0, a free of the wrong size). Results are checked exactly. */
#include "check.h"

#include <stdint.h>
#include <vector>

extern "C" __global__ void vm_fill(int *out, int base, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = base + i;
}

int main(void)
{
	DRV_FN(cuMemGetAllocationGranularity);
	DRV_FN(cuMemAddressReserve);
	DRV_FN(cuMemAddressFree);
	DRV_FN(cuMemCreate);
	DRV_FN(cuMemRelease);
	DRV_FN(cuMemMap);
	DRV_FN(cuMemUnmap);
	DRV_FN(cuMemSetAccess);
	DRV_FN(cuMemGetAccess);
	DRV_FN(cuMemGetAllocationPropertiesFromHandle);
	DRV_FN(cuMemRetainAllocationHandle);
	DRV_FN(cuPointerGetAttribute);
	DRV_FN(cuDeviceGetAttribute);
	DRV_FN(cuMemGetAddressRange);
	CUmemAllocationProp prop = {}, got = {};
	CUmemAccessDesc acc = {};
	CUmemGenericAllocationHandle h[3], r;
	CUdeviceptr va, base = 0;
	size_t gran = 0, rec = 0, size = 0;
	unsigned long long flags = 0;
	unsigned type = 0;
	int ordinal = -1;

	CHECK(cudaFree(0));
	{
		int vmm = 0;

		CHECK_DRV(p_cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
		REQUIRE(vmm == 1, "virtual memory management supported: %d", vmm);
	}
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	CHECK_DRV(p_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK_DRV(p_cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	REQUIRE(gran > 0 && rec >= gran && rec % gran == 0, "granularity %zu, recommended %zu", gran, rec);
	printf("vmm: granularity %zu, recommended %zu\n", gran, rec);

	/* Six granules of address space, three chunks mapped at the start. */
	CHECK_DRV(p_cuMemAddressReserve(&va, 6 * gran, 0, 0, 0));
	REQUIRE(va && va % gran == 0, "reservation at %llx", (unsigned long long)va);
	CHECK_DRV(p_cuMemCreate(&h[0], gran, &prop, 0));
	CHECK_DRV(p_cuMemCreate(&h[1], gran, &prop, 0));
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  /* as PyTorch asks */
	CHECK_DRV(p_cuMemCreate(&h[2], gran, &prop, 0));
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
	for (int k = 0; k < 3; k++)
		CHECK_DRV(p_cuMemMap(va + k * gran, gran, 0, h[k], 0));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CHECK_DRV(p_cuMemSetAccess(va, 3 * gran, &acc, 1));
	CHECK_DRV(p_cuMemGetAccess(&flags, &prop.location, va + gran + 8));
	REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access %llu", flags);

	/* A kernel writes across both chunk boundaries; one copy reads it all back. */
	const int n = (int)(3 * gran / sizeof(int));
	int *d = (int *)(uintptr_t)va;
	std::vector<int> out(n);

	vm_fill<<<(n + 255) / 256, 256>>>(d, 7, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(out.data(), d, 3 * gran, cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++)
		REQUIRE(out[i] == 7 + i, "[%d] = %d, expected %d", i, out[i], 7 + i);
	/* A device-to-device copy out of the VMM range, straddling a boundary. */
	{
		int *lin;
		const size_t off = gran - 4096;
		std::vector<int> back(8192 / sizeof(int));

		CHECK(cudaMalloc(&lin, 8192));
		CHECK(cudaMemcpy(lin, (char *)d + off, 8192, cudaMemcpyDeviceToDevice));
		CHECK(cudaMemcpy(back.data(), lin, 8192, cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < back.size(); i++)
			REQUIRE(back[i] == 7 + (int)(off / sizeof(int) + i), "copied [%zu] = %d", i, back[i]);
		CHECK(cudaFree(lin));
	}

	/* Properties and a retained handle. */
	CHECK_DRV(p_cuMemGetAllocationPropertiesFromHandle(&got, h[2]));
	REQUIRE(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
		got.location.id == 0 && got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		"properties: type %d location %d/%d handle types %d", (int)got.type, (int)got.location.type,
		got.location.id, (int)got.requestedHandleTypes);
	CHECK_DRV(p_cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(va + gran + 100)));
	REQUIRE(r == h[1], "retained %llx, mapped %llx", (unsigned long long)r, (unsigned long long)h[1]);
	CHECK_DRV(p_cuMemRelease(r));

	/* Pointer attributes and the address range inside the second chunk. */
	CHECK_DRV(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + gran + 4));
	REQUIRE(type == CU_MEMORYTYPE_DEVICE, "memory type %u", type);
	CHECK_DRV(p_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va + gran + 4));
	REQUIRE(ordinal == 0, "device ordinal %d", ordinal);
	CHECK_DRV(p_cuMemGetAddressRange(&base, &size, va + gran + 4));
	REQUIRE(base % gran == 0 && base <= va + gran + 4 && va + gran + 4 < base + size &&
		base >= va && base + size <= va + 6 * gran,
		"range %llx+%zu for %llx in %llx+%zu", (unsigned long long)base, size,
		(unsigned long long)(va + gran + 4), (unsigned long long)va, 6 * gran);
	{
		cudaPointerAttributes pa;

		CHECK(cudaPointerGetAttributes(&pa, d + n - 1));
		REQUIRE(pa.type == cudaMemoryTypeDevice && pa.device == 0, "runtime type %d device %d",
			(int)pa.type, pa.device);
	}

	/* Refused: past the reservation's end, over a mapping, handle 0. */
	REQUIRE(p_cuMemMap(va + 5 * gran, 2 * gran, 0, h[0], 0) != CUDA_SUCCESS,
		"a mapping past the reservation was accepted");
	REQUIRE(p_cuMemMap(va, gran, 0, h[1], 0) != CUDA_SUCCESS, "a second mapping was accepted");
	REQUIRE(p_cuMemMap(va + 4 * gran, gran, 0, 0, 0) != CUDA_SUCCESS, "handle 0 was mapped");
	REQUIRE(p_cuMemAddressFree(va, 5 * gran) != CUDA_SUCCESS, "a free of the wrong size was accepted");

	/* The middle chunk moves to the end of the reservation with its contents. */
	CHECK_DRV(p_cuMemUnmap(va + gran, gran));
	CHECK_DRV(p_cuMemMap(va + 4 * gran, gran, 0, h[1], 0));
	CHECK_DRV(p_cuMemSetAccess(va + 4 * gran, gran, &acc, 1));
	CHECK(cudaMemcpy(out.data(), (void *)(uintptr_t)(va + 4 * gran), gran, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < gran / sizeof(int); i++) {
		int want = 7 + (int)(gran / sizeof(int) + i);

		REQUIRE(out[i] == want, "moved chunk [%zu] = %d, expected %d", i, out[i], want);
	}

	/* Released while mapped: the memory stays until its mapping goes. */
	CHECK_DRV(p_cuMemRelease(h[0]));
	vm_fill<<<1, 256>>>(d, 100, 256);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(out.data(), d, 256 * sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < 256; i++)
		REQUIRE(out[i] == 100 + i, "released chunk [%d] = %d", i, out[i]);
	CHECK_DRV(p_cuMemUnmap(va, gran));
	CHECK_DRV(p_cuMemUnmap(va + 2 * gran, gran));
	CHECK_DRV(p_cuMemUnmap(va + 4 * gran, gran));
	CHECK_DRV(p_cuMemRelease(h[1]));
	CHECK_DRV(p_cuMemRelease(h[2]));
	CHECK_DRV(p_cuMemAddressFree(va, 6 * gran));

	/* Ordinary allocation still works. */
	{
		int *x;

		CHECK(cudaMalloc(&x, 1 << 20));
		CHECK(cudaFree(x));
	}
	printf("PASS vmm\n");
	return 0;
}
