/* The ICD's entry points (icd.c, enqueue.c), which dispatch.c puts in the
 * loader's table, and what their files share beyond icd.h. */
#ifndef TERN_CL_ICD_ENTRY_H
#define TERN_CL_ICD_ENTRY_H

#include "icd.h"

/* icd.c */
cl_int icd_get_platform_ids(cl_uint num_entries, cl_platform_id *platforms, cl_uint *num_platforms);
cl_int icd_get_platform_info(cl_platform_id platform, cl_platform_info param, size_t size, void *value, size_t *size_ret);
cl_int icd_get_device_ids(cl_platform_id platform, cl_device_type type, cl_uint num_entries, cl_device_id *devices, cl_uint *num_devices);
cl_int icd_get_device_info(cl_device_id device, cl_device_info param, size_t size, void *value, size_t *size_ret);
cl_int icd_create_sub_devices(cl_device_id in, const cl_device_partition_property *props, cl_uint n, cl_device_id *out, cl_uint *num);
cl_int icd_retain_device(cl_device_id device);
cl_int icd_release_device(cl_device_id device);
cl_int icd_retain(void *p, uint32_t kind, cl_int bad);
cl_int icd_release(void *p, uint32_t kind, cl_int bad);
cl_context icd_create_context(const cl_context_properties *properties, cl_uint num_devices, const cl_device_id *devices, void (CL_CALLBACK *pfn_notify)(const char *, const void *, size_t, void *), void *user_data, cl_int *errcode_ret);
cl_context icd_create_context_from_type(const cl_context_properties *properties, cl_device_type type, void (CL_CALLBACK *pfn_notify)(const char *, const void *, size_t, void *), void *user_data, cl_int *errcode_ret);
cl_int icd_get_context_info(cl_context c, cl_context_info param, size_t size, void *value, size_t *size_ret);
cl_command_queue icd_create_queue_props(cl_context c, cl_device_id d, const cl_queue_properties *properties, cl_int *errcode_ret);
cl_command_queue icd_create_queue(cl_context c, cl_device_id d, cl_command_queue_properties props, cl_int *errcode_ret);
cl_int icd_get_queue_info(cl_command_queue q, cl_command_queue_info param, size_t size, void *value, size_t *size_ret);
cl_mem icd_create_buffer_props(cl_context c, const cl_mem_properties *properties, cl_mem_flags flags, size_t size, void *host_ptr, cl_int *errcode_ret);
cl_mem icd_create_buffer(cl_context c, cl_mem_flags flags, size_t size, void *host_ptr, cl_int *errcode_ret);
cl_mem icd_create_sub_buffer(cl_mem buffer, cl_mem_flags flags, cl_buffer_create_type type, const void *info, cl_int *errcode_ret);
void icd_rect_copy(uint8_t *packed, uint8_t *host, size_t row, size_t rows, size_t slices, size_t row_pitch, size_t slice_pitch, bool to_packed);
cl_mem icd_create_image_props(cl_context c, const cl_mem_properties *properties, cl_mem_flags flags, const cl_image_format *fmt, const cl_image_desc *desc, void *host_ptr, cl_int *errcode_ret);
cl_mem icd_create_image(cl_context c, cl_mem_flags flags, const cl_image_format *fmt, const cl_image_desc *desc, void *host_ptr, cl_int *errcode_ret);
cl_mem icd_create_image2d(cl_context c, cl_mem_flags flags, const cl_image_format *fmt, size_t w, size_t h, size_t pitch, void *host_ptr, cl_int *errcode_ret);
cl_mem icd_create_image3d(cl_context c, cl_mem_flags flags, const cl_image_format *fmt, size_t w, size_t h, size_t depth, size_t pitch, size_t slice_pitch, void *host_ptr, cl_int *errcode_ret);
cl_int icd_get_supported_image_formats(cl_context c, cl_mem_flags flags, cl_mem_object_type type, cl_uint n, cl_image_format *formats, cl_uint *num);
void icd_mem_destroyed(cl_mem m);
cl_int icd_set_mem_destructor(cl_mem m, void (CL_CALLBACK *fn)(cl_mem, void *), void *data);
cl_int icd_get_mem_info(cl_mem m, cl_mem_info param, size_t size, void *value, size_t *size_ret);
cl_int icd_get_image_info(cl_mem m, cl_image_info param, size_t size, void *value, size_t *size_ret);
cl_sampler icd_create_sampler_props(cl_context c, const cl_sampler_properties *properties, cl_int *errcode_ret);
cl_sampler icd_create_sampler(cl_context c, cl_bool normalized, cl_addressing_mode am, cl_filter_mode fm, cl_int *errcode_ret);
cl_int icd_get_sampler_info(cl_sampler s, cl_sampler_info param, size_t size, void *value, size_t *size_ret);
cl_program icd_create_program_source(cl_context c, cl_uint count, const char **strings, const size_t *lengths, cl_int *errcode_ret);
cl_program icd_create_program_il(cl_context c, const void *il, size_t length, cl_int *errcode_ret);
cl_program icd_create_program_binary(cl_context c, cl_uint n, const cl_device_id *devices, const size_t *lengths, const unsigned char **binaries, cl_int *binary_status, cl_int *errcode_ret);
cl_program icd_create_program_builtin(cl_context c, cl_uint n, const cl_device_id *devices, const char *names, cl_int *errcode_ret);
cl_int icd_build_program(cl_program p, cl_uint n, const cl_device_id *devices, const char *options, void (CL_CALLBACK *notify)(cl_program, void *), void *data);
cl_int icd_compile_program(cl_program p, cl_uint n, const cl_device_id *devices, const char *options, cl_uint nh, const cl_program *headers, const char **names, void (CL_CALLBACK *notify)(cl_program, void *), void *data);
cl_program icd_link_program(cl_context c, cl_uint n, const cl_device_id *devices, const char *options, cl_uint np, const cl_program *programs, void (CL_CALLBACK *notify)(cl_program, void *), void *data, cl_int *errcode_ret);
cl_int icd_unload_platform_compiler(cl_platform_id platform);
cl_int icd_unload_compiler(void);
cl_int icd_get_program_info(cl_program p, cl_program_info param, size_t size, void *value, size_t *size_ret);
cl_int icd_get_program_build_info(cl_program p, cl_device_id d, cl_program_build_info param, size_t size, void *value, size_t *size_ret);
cl_kernel icd_create_kernel(cl_program p, const char *name, cl_int *errcode_ret);
cl_int icd_create_kernels(cl_program p, cl_uint n, cl_kernel *kernels, cl_uint *num);
cl_kernel icd_clone_kernel(cl_kernel src, cl_int *errcode_ret);
cl_int icd_set_kernel_arg(cl_kernel k, cl_uint index, size_t size, const void *value);
cl_int icd_get_kernel_info(cl_kernel k, cl_kernel_info param, size_t size, void *value, size_t *size_ret);
cl_int icd_get_kernel_work_group_info(cl_kernel k, cl_device_id d, cl_kernel_work_group_info param, size_t size, void *value, size_t *size_ret);
cl_int icd_get_kernel_arg_info(cl_kernel k, cl_uint index, cl_kernel_arg_info param, size_t size, void *value, size_t *size_ret);
cl_int icd_get_kernel_sub_group_info(cl_kernel k, cl_device_id d, cl_kernel_sub_group_info param, size_t in_size, const void *in, size_t size, void *value, size_t *size_ret);
/* enqueue.c */
cl_int icd_enqueue_read_buffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset, size_t size, void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_write_buffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset, size_t size, const void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_copy_buffer(cl_command_queue q, cl_mem src, cl_mem dst, size_t so, size_t dof, size_t size, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_fill_buffer(cl_command_queue q, cl_mem m, const void *pattern, size_t psize, size_t offset, size_t size, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_copy_buffer_rect(cl_command_queue q, cl_mem src, cl_mem dst, const size_t *so, const size_t *dorg, const size_t *region, size_t srp, size_t ssp, size_t drp, size_t dsp, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_write_buffer_rect(cl_command_queue q, cl_mem m, cl_bool blocking, const size_t *bo, const size_t *ho, const size_t *region, size_t brp, size_t bsp, size_t hrp, size_t hsp, const void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_read_buffer_rect(cl_command_queue q, cl_mem m, cl_bool blocking, const size_t *bo, const size_t *ho, const size_t *region, size_t brp, size_t bsp, size_t hrp, size_t hsp, void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_write_image(cl_command_queue q, cl_mem m, cl_bool blocking, const size_t *origin, const size_t *region, size_t rp, size_t sp, const void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_read_image(cl_command_queue q, cl_mem m, cl_bool blocking, const size_t *origin, const size_t *region, size_t rp, size_t sp, void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_copy_image(cl_command_queue q, cl_mem src, cl_mem dst, const size_t *so, const size_t *dorg, const size_t *region, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_copy_image_to_buffer(cl_command_queue q, cl_mem src, cl_mem dst, const size_t *so, const size_t *region, size_t dof, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_copy_buffer_to_image(cl_command_queue q, cl_mem src, cl_mem dst, size_t so, const size_t *dorg, const size_t *region, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_fill_image(cl_command_queue q, cl_mem m, const void *color, const size_t *origin, const size_t *region, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_nd_range_kernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *offset, const size_t *global, const size_t *local, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_task(cl_command_queue q, cl_kernel k, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_marker_wl(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_barrier_wl(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_enqueue_marker(cl_command_queue q, cl_event *ev);
cl_int icd_enqueue_barrier(cl_command_queue q);
cl_int icd_enqueue_wait_for_events(cl_command_queue q, cl_uint n, const cl_event *list);
cl_int icd_enqueue_migrate(cl_command_queue q, cl_uint n, const cl_mem *mems, cl_mem_migration_flags flags, cl_uint nw, const cl_event *wl, cl_event *ev);
void *icd_enqueue_map_buffer(cl_command_queue q, cl_mem m, cl_bool blocking, cl_map_flags flags, size_t offset, size_t size, cl_uint nw, const cl_event *wl, cl_event *ev, cl_int *errcode_ret);
void *icd_enqueue_map_image(cl_command_queue q, cl_mem m, cl_bool blocking, cl_map_flags flags, const size_t *origin, const size_t *region, size_t *row_pitch, size_t *slice_pitch, cl_uint nw, const cl_event *wl, cl_event *ev, cl_int *errcode_ret);
cl_int icd_enqueue_unmap(cl_command_queue q, cl_mem m, void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev);
cl_int icd_flush(cl_command_queue q);
cl_int icd_finish(cl_command_queue q);
cl_int icd_wait_for_events(cl_uint n, const cl_event *list);
cl_int icd_get_event_info(cl_event ev, cl_event_info param, size_t size, void *value, size_t *size_ret);
cl_int icd_get_event_profiling_info(cl_event ev, cl_profiling_info param, size_t size, void *value, size_t *size_ret);
cl_event icd_create_user_event(cl_context c, cl_int *errcode_ret);
cl_int icd_set_user_event_status(cl_event ev, cl_int status);
cl_int icd_set_event_callback(cl_event ev, cl_int type, void (CL_CALLBACK *fn)(cl_event, cl_int, void *), void *data);

/* reference counts of each kind (icd.c, enqueue.c) */
cl_int icd_retain_context(cl_context c);
cl_int icd_release_context(cl_context c);
cl_int icd_retain_queue(cl_command_queue q);
cl_int icd_release_queue(cl_command_queue q);
cl_int icd_retain_mem(cl_mem m);
cl_int icd_release_mem(cl_mem m);
cl_int icd_retain_sampler(cl_sampler s);
cl_int icd_release_sampler(cl_sampler s);
cl_int icd_retain_program(cl_program p);
cl_int icd_release_program(cl_program p);
cl_int icd_retain_kernel(cl_kernel k);
cl_int icd_release_kernel(cl_kernel k);
cl_int icd_retain_event(cl_event ev);
cl_int icd_release_event(cl_event ev);

#endif
