/* CHECK_BLAS: check.h's CHECK for cuBLAS calls (cublas_sgemm, and
 * bench/overhead_sgemm). A failure prints "cuBLAS error: <call> returned
 * <status> at file:line" on stderr and exits 1. */
#ifndef TERN_TEST_CHECK_BLAS_H
#define TERN_TEST_CHECK_BLAS_H

#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_BLAS(call)                                                       \
	do {                                                                   \
		cublasStatus_t st_ = (call);                                   \
		if (st_ != CUBLAS_STATUS_SUCCESS) {                            \
			fprintf(stderr, "cuBLAS error: %s returned %d at %s:%d\n", #call, \
				(int)st_, __FILE__, __LINE__);                 \
			exit(1);                                               \
		}                                                              \
	} while (0)

#endif
