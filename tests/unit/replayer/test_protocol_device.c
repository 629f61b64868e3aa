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

/* A tiled map's request: fp32, rank @rank, arrays of @dims, @strides,
 * @box and @es records (their lengths as given, whatever the rank). */
static void put_tiled(struct wire_msg *m, uint32_t rank, uint64_t addr, uint32_t dims, uint32_t strides, uint32_t box,
		      uint32_t es)
{
	uint8_t d[8 * 8], b[8 * 4];

	for (uint32_t i = 0; i < 8; i++) {
		struct wire_rec_tensor_dim dv = { .value = i ? 64 : 256 };
		struct wire_rec_tensor_box bv = { .value = i ? 1 : 32 };

		wire_rec_tensor_dim_put(d, i, &dv);
		wire_rec_tensor_box_put(b, i, &bv);
	}
	wire_msg_reset(m);
	wire_put_u32(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
	wire_put_u32(m, rank);
	wire_put_u64(m, addr);
	wire_put_blob(m, (struct wire_blob){ d, dims * 8 });
	/* strides: 1024 bytes each, 16 byte multiples as the driver wants */
	for (uint32_t i = 0; i < 8; i++) {
		struct wire_rec_tensor_dim sv = { .value = 1024u << i };

		wire_rec_tensor_dim_put(d, i, &sv);
	}
	wire_put_blob(m, (struct wire_blob){ d, strides * 8 });
	wire_put_blob(m, (struct wire_blob){ b, box * 4 });
	for (uint32_t i = 0; i < 8; i++) {
		struct wire_rec_tensor_box ev = { .value = 1 };

		wire_rec_tensor_box_put(b, i, &ev);
	}
	wire_put_blob(m, (struct wire_blob){ b, es * 4 });
	wire_put_u32(m, CU_TENSOR_MAP_INTERLEAVE_NONE);
	wire_put_u32(m, CU_TENSOR_MAP_SWIZZLE_128B);
	wire_put_u32(m, CU_TENSOR_MAP_L2_PROMOTION_NONE);
	wire_put_u32(m, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* Tensor maps: ranks the driver refuses, arrays whose lengths are not the
 * rank's, records cut short, addresses of no allocation, maps that are not
 * 128 bytes; then a map encoded and its address replaced. */
void test_tensor_map_hostile(void **state)
{
	static const struct {
		uint32_t rank, dims, strides, box, es;
	} bad[] = {
		{ 0, 0, 0, 0, 0 }, { 6, 6, 5, 6, 6 }, { 0xffffffffu, 5, 4, 5, 5 },
		{ 2, 1, 1, 2, 2 }, { 2, 2, 0, 2, 2 }, { 2, 2, 2, 2, 2 }, { 2, 2, 1, 1, 2 },
		{ 2, 2, 1, 2, 3 }, { 5, 6, 4, 5, 5 }, { 1, 1, 1, 1, 1 },
	};
	uint8_t map[128], other[128];
	uint64_t seq = 1, addr;
	struct wire_msg m;
	struct reply r;
	int fd = session_open_ctx(&seq, &m);

	(void)state;
	wire_msg_reset(&m);
	wire_put_u64(&m, 1 << 20);
	assert_int_equal(call_u64(fd, WIRE_CALL_MEM_ALLOC, ++seq, &m, &addr), CUDA_SUCCESS);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		put_tiled(&m, bad[i].rank, addr, bad[i].dims, bad[i].strides, bad[i].box, bad[i].es);
		assert_int_equal(call_status(fd, WIRE_CALL_TENSOR_MAP_ENCODE_TILED, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
	}
	/* Addresses of no allocation: none, past the arena's, one byte past the end. */
	{
		const uint64_t stray[] = { 0, 16, addr + (1 << 20) + (2 << 20), UINT64_MAX - 15 };

		for (size_t i = 0; i < sizeof(stray) / sizeof(stray[0]); i++) {
			put_tiled(&m, 2, stray[i], 2, 1, 2, 2);
			assert_int_equal(call_status(fd, WIRE_CALL_TENSOR_MAP_ENCODE_TILED, ++seq, &m, UINT32_MAX,
						     NULL), CUDA_ERROR_INVALID_VALUE);
		}
	}
	/* A payload with bytes past its last field does not decode. */
	put_tiled(&m, 2, addr, 2, 1, 2, 2);
	wire_put_u32(&m, 0);
	assert_int_equal(call_status(fd, WIRE_CALL_TENSOR_MAP_ENCODE_TILED, ++seq, &m, UINT32_MAX, NULL),
			 CUDA_ERROR_INVALID_VALUE);
	assert_alive(fd, ++seq);

	put_tiled(&m, 2, addr, 2, 1, 2, 2);
	assert_int_equal(call_reply(fd, WIRE_CALL_TENSOR_MAP_ENCODE_TILED, ++seq, &m, &r), CUDA_SUCCESS);
	assert_int_equal(r.len, 4 + 4 + 128);
	memcpy(map, r.payload + 8, 128);

	/* im2col: rank 2, corners of the wrong count. */
	{
		static const struct {
			uint32_t rank, corners;
		} ic[] = { { 2, 0 }, { 4, 1 }, { 4, 3 }, { 3, 0 }, { 6, 4 } };
		uint8_t c[4 * 4] = { 0 };
		uint8_t d[5 * 8], e[5 * 4];

		for (uint32_t i = 0; i < 5; i++) {
			struct wire_rec_tensor_dim dv = { .value = 64 };
			struct wire_rec_tensor_box ev = { .value = 1 };

			wire_rec_tensor_dim_put(d, i, &dv);
			wire_rec_tensor_box_put(e, i, &ev);
		}
		for (size_t i = 0; i < sizeof(ic) / sizeof(ic[0]); i++) {
			uint32_t rank = ic[i].rank;

			wire_msg_reset(&m);
			wire_put_u32(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
			wire_put_u32(&m, rank);
			wire_put_u64(&m, addr);
			wire_put_blob(&m, (struct wire_blob){ d, (rank > 5 ? 5 : rank) * 8 });
			wire_put_blob(&m, (struct wire_blob){ d, (rank > 5 ? 4 : rank - 1) * 8 });
			wire_put_blob(&m, (struct wire_blob){ c, ic[i].corners * 4 });
			wire_put_blob(&m, (struct wire_blob){ c, ic[i].corners * 4 });
			wire_put_u32(&m, 64);
			wire_put_u32(&m, 128);
			wire_put_blob(&m, (struct wire_blob){ e, (rank > 5 ? 5 : rank) * 4 });
			wire_put_u32(&m, CU_TENSOR_MAP_INTERLEAVE_NONE);
			wire_put_u32(&m, CU_TENSOR_MAP_SWIZZLE_128B);
			wire_put_u32(&m, CU_TENSOR_MAP_L2_PROMOTION_NONE);
			wire_put_u32(&m, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
			assert_int_equal(call_status(fd, WIRE_CALL_TENSOR_MAP_ENCODE_IM2COL, ++seq, &m, UINT32_MAX,
						     NULL), CUDA_ERROR_INVALID_VALUE);
		}
	}

	/* Replace: maps of 0, 127 and 129 bytes, junk (not a map the sim
	 * made), an address of no allocation; then a new address and back. */
	{
		static uint8_t junk[129];
		const uint32_t lens[] = { 0, 127, 129 };

		memset(junk, 0xa5, sizeof(junk));
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			wire_msg_reset(&m);
			wire_put_blob(&m, (struct wire_blob){ junk, lens[i] });
			wire_put_u64(&m, addr);
			assert_int_equal(call_status(fd, WIRE_CALL_TENSOR_MAP_REPLACE_ADDRESS, ++seq, &m, UINT32_MAX,
						     NULL), CUDA_ERROR_INVALID_VALUE);
		}
		wire_msg_reset(&m);
		wire_put_blob(&m, (struct wire_blob){ junk, 128 });
		wire_put_u64(&m, addr);
		assert_int_equal(call_status(fd, WIRE_CALL_TENSOR_MAP_REPLACE_ADDRESS, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		wire_msg_reset(&m);
		wire_put_blob(&m, (struct wire_blob){ map, 128 });
		wire_put_u64(&m, 0x1000);
		assert_int_equal(call_status(fd, WIRE_CALL_TENSOR_MAP_REPLACE_ADDRESS, ++seq, &m, UINT32_MAX, NULL),
				 CUDA_ERROR_INVALID_VALUE);
		wire_msg_reset(&m);
		wire_put_blob(&m, (struct wire_blob){ map, 128 });
		wire_put_u64(&m, addr + 4096);
		assert_int_equal(call_reply(fd, WIRE_CALL_TENSOR_MAP_REPLACE_ADDRESS, ++seq, &m, &r), CUDA_SUCCESS);
		assert_int_equal(r.len, 4 + 4 + 128);
		memcpy(other, r.payload + 8, 128);
		assert_memory_not_equal(other, map, 128);
		wire_msg_reset(&m);
		wire_put_blob(&m, (struct wire_blob){ other, 128 });
		wire_put_u64(&m, addr);
		assert_int_equal(call_reply(fd, WIRE_CALL_TENSOR_MAP_REPLACE_ADDRESS, ++seq, &m, &r), CUDA_SUCCESS);
		assert_memory_equal(r.payload + 8, map, 128);
	}
	wire_msg_release(&m);
	sock_ctx = 0;
	assert_alive(fd, ++seq);
	close(fd);
}
