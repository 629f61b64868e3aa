/* Fuzz target for the wire decoder: a header, then the payload as the request
 * and as the reply of the call the header names (and of a call id taken from
 * the data, so every decoder is reached). */
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "wire.h"
#include "wire_calls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wire_header h;
	const uint8_t *payload;
	size_t len;

	if (size < WIRE_HEADER_SIZE)
		return 0;
	payload = data + WIRE_HEADER_SIZE;
	len = size - WIRE_HEADER_SIZE;
	if (wire_header_decode(data, &h) == 0 && h.length <= len)
		len = h.length;
	wire_request_check(h.call, payload, len);
	wire_reply_check(h.call, payload, len);
	/* The low byte of the sequence field picks another decoder. */
	wire_request_check(data[16], payload, len);
	wire_reply_check(data[16], payload, len);
	/* The next byte picks one of the OpenCL table's (common/wire/opencl.tbl). */
	wire_request_check(WIRE_API_OPENCL_FIRST + data[17] % 64u, payload, len);
	wire_reply_check(WIRE_API_OPENCL_FIRST + data[17] % 64u, payload, len);
	return 0;
}
