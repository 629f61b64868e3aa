/* Fuzz target for the executor behind the wire decoder: any sequence of
 * requests from a hostile guest, run by one session on the sim backend. A
 * request may fail; the worker must not crash, and the session must still
 * answer a plain call afterwards.
 *
 * Input: records of u16 call id, u16 payload length, payload. A few objects
 * (an allocation, a stream, an event) exist before, so that handles and
 * device addresses in the input can be live ones. */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "log.h"
#include "wire_dispatch.h"

static struct exec ex;
static struct backend *be;
static int ready;

static void session_open(void)
{
	struct backend_config bcfg = { .sim_memory = 256ull << 20 };
	struct exec_config cfg = { .device = 0, .arena_base = 0x360000000000ull, .arena_size = 4ull << 30, .vmm_size = 4ull << 30,
				   .quota = 128ull << 20 };
	struct wire_mem_alloc_req a = { .bytes = 1 << 20 };
	struct wire_mem_alloc_rep ar;
	struct wire_stream_create_req s = { 0 };
	struct wire_stream_create_rep sr;
	struct wire_event_create_req e = { 0 };
	struct wire_event_create_rep er;

	log_open("fuzz", LOG_ERR, -1);
	if (backend_open("sim", &bcfg, &be) || exec_open(&ex, be, &cfg, NULL))
		abort();
	exec_mem_alloc(&ex, &a, &ar);           /* at 0x360000000000 */
	exec_stream_create(&ex, &s, &sr);       /* 0x0600000000000001 */
	exec_event_create(&ex, &e, &er);        /* 0x0700000000000001 */
	ready = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wire_msg reply;
	struct wire_device_get_count_req q;
	struct wire_device_get_count_rep qr;

	if (!ready)
		session_open();
	wire_msg_init(&reply);
	while (size >= 4) {
		uint32_t call = (uint32_t)data[0] | (uint32_t)data[1] << 8;
		size_t len = (size_t)data[2] | (size_t)data[3] << 8;
		struct wire_cursor cur;

		data += 4;
		size -= 4;
		if (len > size)
			len = size;
		/* The hello belongs to the supervisor's handshake, and a reset would
		 * only undo the fixture: neither is in reach of an established guest.
		 * A wait for a value nothing writes stalls the device for good, on a
		 * GPU as on the sim: a hang of that session by design, not a fault
		 * (their checks are in the protocol test). */
		if (call != WIRE_CALL_HELLO && call != WIRE_CALL_PRIMARY_CTX_RESET &&
		    call != WIRE_CALL_STREAM_WAIT_VALUE && call != WIRE_CALL_STREAM_BATCH_MEM_OP) {
			wire_cursor_init(&cur, data, len);
			wire_msg_reset(&reply);
			if (exec_context_switch(&ex, ex.primary_ctx) == CUDA_SUCCESS)
				wire_dispatch(&ex, call, &cur, &reply);
		}
		data += len;
		size -= len;
	}
	wire_msg_release(&reply);
	/* Still a working session. */
	if (exec_device_get_count(&ex, &q, &qr) != CUDA_SUCCESS || qr.count != 1)
		abort();
	return 0;
}
