/* The loader's table, the ICD's two exported symbols, and the answers of
 * what is not remoted: optional features the devices are reported not to
 * have (SVM, pipes, device-side queues, timers, sub-devices), so each call
 * refuses as the specification says a device without it does; and the
 * interop of GL, D3D and EGL, whose objects are the guest's (docs/opencl.md). */
#define LOG_PREFIX "opencl: "

#include <string.h>

#include "icd_entry.h"

#define EXPORT __attribute__((visibility("default")))

static cl_int CL_API_CALL no_queue_property(cl_command_queue q, cl_command_queue_properties p, cl_bool e,
					    cl_command_queue_properties *old)
{
	return CL_INVALID_OPERATION;    /* deprecated in 1.1: queues are made with their properties */
}

static cl_int CL_API_CALL no_native_kernel(cl_command_queue q, void (CL_CALLBACK *fn)(void *), void *args, size_t n,
					   cl_uint nm, const cl_mem *m, const void **loc, cl_uint nw,
					   const cl_event *wl, cl_event *ev)
{
	return CL_INVALID_OPERATION;    /* the device reports no native kernels: the guest's code */
}

static cl_mem CL_API_CALL no_pipe(cl_context c, cl_mem_flags f, cl_uint size, cl_uint n,
				  const cl_pipe_properties *p, cl_int *err)
{
	if (err)
		*err = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL no_pipe_info(cl_mem m, cl_pipe_info p, size_t s, void *v, size_t *r)
{
	return CL_INVALID_MEM_OBJECT;   /* no memory object is a pipe */
}

static void *CL_API_CALL no_svm_alloc(cl_context c, cl_svm_mem_flags f, size_t size, cl_uint align)
{
	return NULL;
}

static void CL_API_CALL no_svm_free(cl_context c, void *p)
{
}

static cl_int CL_API_CALL no_svm_enqueue_free(cl_command_queue q, cl_uint n, void *ptrs[],
					      void (CL_CALLBACK *fn)(cl_command_queue, cl_uint, void *[], void *),
					      void *data, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL no_svm_memcpy(cl_command_queue q, cl_bool b, void *d, const void *s, size_t n, cl_uint nw,
					const cl_event *wl, cl_event *ev)
{
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL no_svm_fill(cl_command_queue q, void *p, const void *pat, size_t ps, size_t n, cl_uint nw,
				      const cl_event *wl, cl_event *ev)
{
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL no_svm_map(cl_command_queue q, cl_bool b, cl_map_flags f, void *p, size_t n, cl_uint nw,
				     const cl_event *wl, cl_event *ev)
{
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL no_svm_unmap(cl_command_queue q, void *p, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL no_svm_migrate(cl_command_queue q, cl_uint n, const void **p, const size_t *s,
					 cl_mem_migration_flags f, cl_uint nw, const cl_event *wl, cl_event *ev)
{
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL no_svm_arg(cl_kernel k, cl_uint i, const void *v)
{
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL no_exec_info(cl_kernel k, cl_kernel_exec_info p, size_t s, const void *v)
{
	return CL_INVALID_OPERATION;    /* its parameters are SVM's */
}

static cl_int CL_API_CALL no_timer(cl_device_id d, cl_ulong *dev, cl_ulong *host)
{
	return CL_INVALID_OPERATION;    /* the worker's clock is not the guest's */
}

static cl_int CL_API_CALL no_host_timer(cl_device_id d, cl_ulong *host)
{
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL no_default_queue(cl_context c, cl_device_id d, cl_command_queue q)
{
	return CL_INVALID_OPERATION;    /* no device-side enqueue */
}

static cl_int CL_API_CALL no_release_callback(cl_program p, void (CL_CALLBACK *fn)(cl_program, void *), void *d)
{
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL no_spec_constant(cl_program p, cl_uint id, size_t s, const void *v)
{
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL no_context_destructor(cl_context c, void (CL_CALLBACK *fn)(cl_context, void *), void *d)
{
	return CL_INVALID_OPERATION;
}

cl_icd_dispatch icd_dispatch = {
	.clGetPlatformIDs = icd_get_platform_ids,
	.clGetPlatformInfo = icd_get_platform_info,
	.clGetDeviceIDs = icd_get_device_ids,
	.clGetDeviceInfo = icd_get_device_info,
	.clCreateContext = icd_create_context,
	.clCreateContextFromType = icd_create_context_from_type,
	.clRetainContext = icd_retain_context,
	.clReleaseContext = icd_release_context,
	.clGetContextInfo = icd_get_context_info,
	.clCreateCommandQueue = icd_create_queue,
	.clRetainCommandQueue = icd_retain_queue,
	.clReleaseCommandQueue = icd_release_queue,
	.clGetCommandQueueInfo = icd_get_queue_info,
	.clSetCommandQueueProperty = no_queue_property,
	.clCreateBuffer = icd_create_buffer,
	.clCreateImage2D = icd_create_image2d,
	.clCreateImage3D = icd_create_image3d,
	.clRetainMemObject = icd_retain_mem,
	.clReleaseMemObject = icd_release_mem,
	.clGetSupportedImageFormats = icd_get_supported_image_formats,
	.clGetMemObjectInfo = icd_get_mem_info,
	.clGetImageInfo = icd_get_image_info,
	.clCreateSampler = icd_create_sampler,
	.clRetainSampler = icd_retain_sampler,
	.clReleaseSampler = icd_release_sampler,
	.clGetSamplerInfo = icd_get_sampler_info,
	.clCreateProgramWithSource = icd_create_program_source,
	.clCreateProgramWithBinary = icd_create_program_binary,
	.clRetainProgram = icd_retain_program,
	.clReleaseProgram = icd_release_program,
	.clBuildProgram = icd_build_program,
	.clUnloadCompiler = icd_unload_compiler,
	.clGetProgramInfo = icd_get_program_info,
	.clGetProgramBuildInfo = icd_get_program_build_info,
	.clCreateKernel = icd_create_kernel,
	.clCreateKernelsInProgram = icd_create_kernels,
	.clRetainKernel = icd_retain_kernel,
	.clReleaseKernel = icd_release_kernel,
	.clSetKernelArg = icd_set_kernel_arg,
	.clGetKernelInfo = icd_get_kernel_info,
	.clGetKernelWorkGroupInfo = icd_get_kernel_work_group_info,
	.clWaitForEvents = icd_wait_for_events,
	.clGetEventInfo = icd_get_event_info,
	.clRetainEvent = icd_retain_event,
	.clReleaseEvent = icd_release_event,
	.clGetEventProfilingInfo = icd_get_event_profiling_info,
	.clFlush = icd_flush,
	.clFinish = icd_finish,
	.clEnqueueReadBuffer = icd_enqueue_read_buffer,
	.clEnqueueWriteBuffer = icd_enqueue_write_buffer,
	.clEnqueueCopyBuffer = icd_enqueue_copy_buffer,
	.clEnqueueReadImage = icd_enqueue_read_image,
	.clEnqueueWriteImage = icd_enqueue_write_image,
	.clEnqueueCopyImage = icd_enqueue_copy_image,
	.clEnqueueCopyImageToBuffer = icd_enqueue_copy_image_to_buffer,
	.clEnqueueCopyBufferToImage = icd_enqueue_copy_buffer_to_image,
	.clEnqueueMapBuffer = icd_enqueue_map_buffer,
	.clEnqueueMapImage = icd_enqueue_map_image,
	.clEnqueueUnmapMemObject = icd_enqueue_unmap,
	.clEnqueueNDRangeKernel = icd_enqueue_nd_range_kernel,
	.clEnqueueTask = icd_enqueue_task,
	.clEnqueueNativeKernel = no_native_kernel,
	.clEnqueueMarker = icd_enqueue_marker,
	.clEnqueueWaitForEvents = icd_enqueue_wait_for_events,
	.clEnqueueBarrier = icd_enqueue_barrier,
	.clGetExtensionFunctionAddress = clGetExtensionFunctionAddress,
	.clSetEventCallback = icd_set_event_callback,
	.clCreateSubBuffer = icd_create_sub_buffer,
	.clSetMemObjectDestructorCallback = icd_set_mem_destructor,
	.clCreateUserEvent = icd_create_user_event,
	.clSetUserEventStatus = icd_set_user_event_status,
	.clEnqueueReadBufferRect = icd_enqueue_read_buffer_rect,
	.clEnqueueWriteBufferRect = icd_enqueue_write_buffer_rect,
	.clEnqueueCopyBufferRect = icd_enqueue_copy_buffer_rect,
	.clCreateSubDevices = icd_create_sub_devices,
	.clRetainDevice = icd_retain_device,
	.clReleaseDevice = icd_release_device,
	.clCreateImage = icd_create_image,
	.clCreateProgramWithBuiltInKernels = icd_create_program_builtin,
	.clCompileProgram = icd_compile_program,
	.clLinkProgram = icd_link_program,
	.clUnloadPlatformCompiler = icd_unload_platform_compiler,
	.clGetKernelArgInfo = icd_get_kernel_arg_info,
	.clEnqueueFillBuffer = icd_enqueue_fill_buffer,
	.clEnqueueFillImage = icd_enqueue_fill_image,
	.clEnqueueMigrateMemObjects = icd_enqueue_migrate,
	.clEnqueueMarkerWithWaitList = icd_enqueue_marker_wl,
	.clEnqueueBarrierWithWaitList = icd_enqueue_barrier_wl,
	.clCreateCommandQueueWithProperties = icd_create_queue_props,
	.clCreatePipe = no_pipe,
	.clGetPipeInfo = no_pipe_info,
	.clSVMAlloc = no_svm_alloc,
	.clSVMFree = no_svm_free,
	.clEnqueueSVMFree = no_svm_enqueue_free,
	.clEnqueueSVMMemcpy = no_svm_memcpy,
	.clEnqueueSVMMemFill = no_svm_fill,
	.clEnqueueSVMMap = no_svm_map,
	.clEnqueueSVMUnmap = no_svm_unmap,
	.clCreateSamplerWithProperties = icd_create_sampler_props,
	.clSetKernelArgSVMPointer = no_svm_arg,
	.clSetKernelExecInfo = no_exec_info,
	.clCloneKernel = icd_clone_kernel,
	.clCreateProgramWithIL = icd_create_program_il,
	.clEnqueueSVMMigrateMem = no_svm_migrate,
	.clGetDeviceAndHostTimer = no_timer,
	.clGetHostTimer = no_host_timer,
	.clGetKernelSubGroupInfo = icd_get_kernel_sub_group_info,
	.clSetDefaultDeviceCommandQueue = no_default_queue,
	.clSetProgramReleaseCallback = no_release_callback,
	.clSetProgramSpecializationConstant = no_spec_constant,
	.clCreateBufferWithProperties = icd_create_buffer_props,
	.clCreateImageWithProperties = icd_create_image_props,
	.clSetContextDestructorCallback = no_context_destructor,
};

/* The loader's way in (cl_khr_icd): with clGetPlatformInfo below, the only
 * symbols the library exports. */
EXPORT cl_int CL_API_CALL clIcdGetPlatformIDsKHR(cl_uint num_entries, cl_platform_id *platforms, cl_uint *num_platforms)
{
	return icd_get_platform_ids(num_entries, platforms, num_platforms);
}

EXPORT void *CL_API_CALL clGetExtensionFunctionAddress(const char *name)
{
	if (name && !strcmp(name, "clIcdGetPlatformIDsKHR"))
		return (void *)clIcdGetPlatformIDsKHR;
	return NULL;
}

EXPORT void *CL_API_CALL clGetExtensionFunctionAddressForPlatform(cl_platform_id platform, const char *name)
{
	return clGetExtensionFunctionAddress(name);
}

/* ocl-icd asks the library itself for the platform's ICD suffix. */
EXPORT cl_int CL_API_CALL clGetPlatformInfo(cl_platform_id platform, cl_platform_info param, size_t size, void *value,
					    size_t *size_ret)
{
	return icd_get_platform_info(platform, param, size, value, size_ret);
}
