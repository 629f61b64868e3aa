/* The host's OpenCL platform, as the worker reaches it: the Khronos loader
 * (libOpenCL.so.1, or the library --opencl-library names) opened with
 * dlopen in the worker that serves an OpenCL session, never in ternd's
 * supervisor, and one platform of it chosen by name (--opencl-platform).
 *
 * An entry the library lacks (an OpenCL 1.2 platform's 2.x calls) is NULL;
 * its handlers answer CL_INVALID_OPERATION. One session's worker thread.
 */
#ifndef TERN_CL_HOST_H
#define TERN_CL_HOST_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl_icd.h>

/* Every entry point the executor calls, X(name) each. */
#define CL_HOST_ENTRY_LIST(X) \
	X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) \
	X(clCreateContext) X(clCreateContextFromType) X(clReleaseContext) X(clGetContextInfo) \
	X(clCreateCommandQueueWithProperties) X(clReleaseCommandQueue) X(clGetCommandQueueInfo) \
	X(clCreateBuffer) X(clCreateBufferWithProperties) X(clCreateSubBuffer) X(clCreateImage) \
	X(clCreateImageWithProperties) X(clReleaseMemObject) X(clGetSupportedImageFormats) \
	X(clGetMemObjectInfo) X(clGetImageInfo) X(clCreateSamplerWithProperties) X(clReleaseSampler) \
	X(clGetSamplerInfo) X(clCreateProgramWithSource) X(clCreateProgramWithIL) \
	X(clCreateProgramWithBinary) X(clCreateProgramWithBuiltInKernels) X(clReleaseProgram) \
	X(clBuildProgram) X(clCompileProgram) X(clLinkProgram) X(clUnloadPlatformCompiler) \
	X(clGetProgramInfo) X(clGetProgramBuildInfo) X(clCreateKernel) X(clCreateKernelsInProgram) \
	X(clCloneKernel) X(clReleaseKernel) X(clSetKernelArg) X(clGetKernelInfo) \
	X(clGetKernelWorkGroupInfo) X(clGetKernelArgInfo) X(clGetKernelSubGroupInfo) \
	X(clWaitForEvents) X(clGetEventInfo) X(clCreateUserEvent) X(clRetainEvent) X(clReleaseEvent) \
	X(clSetUserEventStatus) X(clGetEventProfilingInfo) X(clFlush) X(clFinish) \
	X(clEnqueueReadBuffer) X(clEnqueueReadBufferRect) X(clEnqueueWriteBuffer) \
	X(clEnqueueWriteBufferRect) X(clEnqueueFillBuffer) X(clEnqueueCopyBuffer) \
	X(clEnqueueCopyBufferRect) X(clEnqueueReadImage) X(clEnqueueWriteImage) X(clEnqueueFillImage) \
	X(clEnqueueCopyImage) X(clEnqueueCopyImageToBuffer) X(clEnqueueCopyBufferToImage) \
	X(clEnqueueMigrateMemObjects) X(clEnqueueNDRangeKernel) X(clEnqueueMarkerWithWaitList) \
	X(clEnqueueBarrierWithWaitList) X(clSetEventCallback)

struct cl_host {
	void *lib;
#define CL_HOST_FIELD(name) cl_api_##name name;
	CL_HOST_ENTRY_LIST(CL_HOST_FIELD)
#undef CL_HOST_FIELD
	cl_platform_id platform;        /* the one the guest sees */
};

/* Open @library (NULL: libOpenCL.so.1) and choose the platform whose
 * CL_PLATFORM_NAME contains @platform_name, ignoring case (NULL or "": the
 * first). 0, -ENOENT (no library, no such platform), -ENOSYS (the library
 * lacks clGetPlatformIDs). */
int cl_host_open(struct cl_host *h, const char *library, const char *platform_name);
void cl_host_close(struct cl_host *h);

#endif
