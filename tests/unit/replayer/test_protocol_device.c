/* ternd against a hostile guest: the device queries (harness:
 * test_protocol.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <cuda.h>

#include "test_protocol.h"

void test_device_query_hostile(void **state)
{
	static const char *bad_ids[] = { "", "x", "18", "18:00", "0000:18", ":18:00.0", "0000:18:00.", "18:00.0.0",
					 "0000:18:00.0 ", "00000000:18:00.0:1", "0x18:00.0" };
	static const uint8_t op_short[3] = { 0 };
	static const uint8_t op_bad[4] = { CU_ATOMIC_OPERATION_MAX, 0, 0, 0 };
	static const uint8_t op_huge[4] = { 0xff, 0xff, 0xff, 0xff };
	static const uint8_t op_cas[8] = { CU_ATOMIC_OPERATION_CAS, 0, 0, 0, CU_ATOMIC_OPERATION_AND, 0, 0, 0 };
	static uint8_t op_many[4 * 16385];
	uint64_t seq = 1, value;
	int32_t device;
	uint32_t status;
	struct wire_msg m;
	struct reply r;
	int fd = session_open(sock_url, "", &status);

	assert_int_equal(status, CUDA_SUCCESS);
	wire_msg_init(&m);
	wire_put_i32(&m, 0);
	assert_int_equal(call_reply(fd, WIRE_CALL_PRIMARY_CTX_RETAIN, ++seq, &m, &r), CUDA_SUCCESS);
	memcpy(&sock_ctx, r.payload + 4, 8);

	/* By bus id: the sim's device 0 sits at bus 0x18. */
	for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
		wire_msg_reset(&m);
		wire_put_str(&m, bad_ids[i]);
		assert_int_equal(call_status(fd, WIRE_CALL_DEVICE_GET_BY_PCI_BUS_ID, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
	}
	wire_msg_reset(&m);
	wire_put_str(&m, "0000:19:00.0");
	assert_int_equal(call_status(fd, WIRE_CALL_DEVICE_GET_BY_PCI_BUS_ID, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_DEVICE);
	wire_msg_reset(&m);
	wire_put_str(&m, "18:00.0");
	assert_int_equal(call_reply(fd, WIRE_CALL_DEVICE_GET_BY_PCI_BUS_ID, ++seq, &m, &r), CUDA_SUCCESS);
	memcpy(&device, r.payload + 4, 4);
	assert_int_equal(device, 0);

	/* 1D linear textures: a format or channel count that does not exist, no device. */
	{
		static const struct {
			uint32_t format, channels;
			int32_t device;
			uint32_t status;
		} tex[] = {
			{ 0x99, 1, 0, CUDA_ERROR_INVALID_VALUE },
			{ CU_AD_FORMAT_FLOAT, 3, 0, CUDA_ERROR_INVALID_VALUE },
			{ CU_AD_FORMAT_FLOAT, 0xffffffffu, 0, CUDA_ERROR_INVALID_VALUE },
			{ CU_AD_FORMAT_FLOAT, 1, -1, CUDA_ERROR_INVALID_DEVICE },
			{ CU_AD_FORMAT_FLOAT, 1, 77, CUDA_ERROR_INVALID_DEVICE },
			{ CU_AD_FORMAT_FLOAT, 4, 0, CUDA_SUCCESS },
		};

		for (size_t i = 0; i < sizeof(tex) / sizeof(tex[0]); i++) {
			wire_msg_reset(&m);
			wire_put_u32(&m, tex[i].format);
			wire_put_u32(&m, tex[i].channels);
			wire_put_i32(&m, tex[i].device);
			assert_int_equal(call_status(fd, WIRE_CALL_DEVICE_GET_TEXTURE_1D_LINEAR_MAX_WIDTH, ++seq, &m,
						     UINT32_MAX, NULL), tex[i].status);
		}
	}

	/* Atomic capabilities: operation lists cut short, empty, naming no
	 * operation or too many; devices out of range, a device its own peer. */
	{
		static const struct {
			int32_t device, peer;
			const uint8_t *ops;
			uint32_t len, status;
		} at[] = {
			{ 0, -1, op_short, sizeof(op_short), CUDA_ERROR_INVALID_VALUE },
			{ 0, -1, NULL, 0, CUDA_ERROR_INVALID_VALUE },
			{ 0, -1, op_bad, sizeof(op_bad), CUDA_ERROR_INVALID_VALUE },
			{ 0, -1, op_huge, sizeof(op_huge), CUDA_ERROR_INVALID_VALUE },
			{ 0, -1, op_many, sizeof(op_many), CUDA_ERROR_INVALID_VALUE },
			{ 77, -1, op_cas, sizeof(op_cas), CUDA_ERROR_INVALID_DEVICE },
			{ 0, 77, op_cas, sizeof(op_cas), CUDA_ERROR_INVALID_DEVICE },
			{ 0, -2, op_cas, sizeof(op_cas), CUDA_ERROR_INVALID_DEVICE },
			{ 0, 0, op_cas, sizeof(op_cas), CUDA_ERROR_INVALID_DEVICE },
		};

		for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
			wire_msg_reset(&m);
			wire_put_i32(&m, at[i].device);
			wire_put_i32(&m, at[i].peer);
			wire_put_blob(&m, (struct wire_blob){ at[i].ops, at[i].len });
			assert_int_equal(call_status(fd, WIRE_CALL_DEVICE_GET_ATOMIC_CAPABILITIES, ++seq, &m,
						     UINT32_MAX, NULL), at[i].status);
		}
		wire_msg_reset(&m);
		wire_put_i32(&m, 0);
		wire_put_i32(&m, -1);
		wire_put_blob(&m, (struct wire_blob){ op_cas, sizeof(op_cas) });
		assert_int_equal(call_reply(fd, WIRE_CALL_DEVICE_GET_ATOMIC_CAPABILITIES, ++seq, &m, &r),
				 CUDA_SUCCESS);
		assert_int_equal(r.len, 4 + 4 + sizeof(op_cas));
	}

	/* The RDMA fence: a target or scope that does not exist. */
	{
		static const uint32_t fence[][3] = {
			{ 1, CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER, CUDA_ERROR_INVALID_VALUE },
			{ 0, 0, CUDA_ERROR_INVALID_VALUE },
			{ 0, 150, CUDA_ERROR_INVALID_VALUE },
			{ 0, CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES, CUDA_SUCCESS },
		};

		for (size_t i = 0; i < sizeof(fence) / sizeof(fence[0]); i++) {
			wire_msg_reset(&m);
			wire_put_u32(&m, fence[i][0]);
			wire_put_u32(&m, fence[i][1]);
			assert_int_equal(call_status(fd, WIRE_CALL_FLUSH_GPU_DIRECT_RDMA_WRITES, ++seq, &m, UINT32_MAX,
						     NULL), fence[i][2]);
		}
	}

	/* Graph memory: devices out of range, attributes that do not exist or
	 * cannot be set, a watermark set to anything but zero. */
	{
		static const struct {
			int32_t device;
			uint32_t attr, set;
			uint64_t value;
			uint32_t status;
		} gm[] = {
			{ 77, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, 0, 0, CUDA_ERROR_INVALID_DEVICE },
			{ -1, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, 1, 0, CUDA_ERROR_INVALID_DEVICE },
			{ 0, 99, 0, 0, CUDA_ERROR_INVALID_VALUE },
			{ 0, 0xffffffffu, 1, 0, CUDA_ERROR_INVALID_VALUE },
			{ 0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, 1, 0, CUDA_ERROR_INVALID_VALUE },
			{ 0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, 1, 0, CUDA_ERROR_INVALID_VALUE },
			{ 0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, 1, 1, CUDA_ERROR_INVALID_VALUE },
			{ 0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, 7, UINT64_MAX, CUDA_ERROR_INVALID_VALUE },
			{ 0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, 1, 0, CUDA_SUCCESS },
		};

		for (size_t i = 0; i < sizeof(gm) / sizeof(gm[0]); i++) {
			wire_msg_reset(&m);
			wire_put_i32(&m, gm[i].device);
			wire_put_u32(&m, gm[i].attr);
			wire_put_u32(&m, gm[i].set);
			wire_put_u64(&m, gm[i].value);
			assert_int_equal(call_status(fd, WIRE_CALL_DEVICE_GRAPH_MEM_ATTRIBUTE, ++seq, &m, UINT32_MAX,
						     NULL), gm[i].status);
		}
		wire_msg_reset(&m);
		wire_put_i32(&m, 0);
		wire_put_u32(&m, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
		wire_put_u32(&m, 0);
		wire_put_u64(&m, 12345);
		assert_int_equal(call_reply(fd, WIRE_CALL_DEVICE_GRAPH_MEM_ATTRIBUTE, ++seq, &m, &r), CUDA_SUCCESS);
		memcpy(&value, r.payload + 4, 8);
		assert_int_equal(value, 0);     /* no graph, no graph memory */
		for (int32_t dev = -1; dev <= 1; dev++) {
			wire_msg_reset(&m);
			wire_put_i32(&m, dev);
			assert_int_equal(call_status(fd, WIRE_CALL_DEVICE_GRAPH_MEM_TRIM, ++seq, &m, UINT32_MAX, NULL),
					 dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE);
		}
	}
	wire_msg_release(&m);
	sock_ctx = 0;
	assert_alive(fd, ++seq);
	close(fd);
}
