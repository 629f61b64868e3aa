/* What the OpenCL table's fields mean beyond their types (common/wire/opencl.tbl):
 * the queries of cl_get_info and the kinds of kernel arguments. Numbers on the
 * wire: never reused. */
#ifndef TERN_CL_WIRE_H
#define TERN_CL_WIRE_H

/* cl_get_info's `query`: which clGet*Info, and what `other` names. */
enum cl_wire_query {
	CL_WIRE_QUERY_PLATFORM = 1,
	CL_WIRE_QUERY_DEVICE = 2,
	CL_WIRE_QUERY_CONTEXT = 3,
	CL_WIRE_QUERY_QUEUE = 4,
	CL_WIRE_QUERY_MEM = 5,
	CL_WIRE_QUERY_IMAGE = 6,
	CL_WIRE_QUERY_SAMPLER = 7,
	CL_WIRE_QUERY_PROGRAM = 8,
	CL_WIRE_QUERY_PROGRAM_BUILD = 9,        /* other: a device handle */
	CL_WIRE_QUERY_KERNEL = 10,
	CL_WIRE_QUERY_KERNEL_WORK_GROUP = 11,   /* other: a device handle (0: none) */
	CL_WIRE_QUERY_KERNEL_ARG = 12,          /* other: the argument's index */
	CL_WIRE_QUERY_EVENT = 13,
	CL_WIRE_QUERY_EVENT_PROFILING = 14,
	CL_WIRE_QUERY_KERNEL_SUB_GROUP = 15,    /* other: a device handle; input: the input value */
	CL_WIRE_QUERY_MAX
};

/* cl_kernel_set_arg's `kind`. */
enum cl_wire_arg {
	CL_WIRE_ARG_VALUE = 1,          /* `size` bytes in `value` */
	CL_WIRE_ARG_LOCAL = 2,          /* local memory of `size` bytes; no value */
	CL_WIRE_ARG_MEM = 3,            /* one cl_mem handle record, or none: a NULL buffer */
	CL_WIRE_ARG_SAMPLER = 4,        /* one cl_sampler handle record */
};

/* Largest value one query answers (a program's source, a build log). */
#define CL_WIRE_INFO_MAX (16u << 20)

/* Bytes of non-blocking reads a session's worker holds at once for the guest
 * to fetch (cl_enqueue_read_buffer_lazy): past them the guest reads at once
 * and the worker refuses (docs/opencl.md, "Non-blocking reads"). */
#define CL_WIRE_LAZY_READ_MAX (1ull << 30)

#endif
