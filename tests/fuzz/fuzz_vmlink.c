/* Fuzz target for vmlink (common/vmlink.h): the frame scanner over any
 * bytes, and a host and a guest link end fed those bytes in pieces whose
 * sizes the input picks. A decoded frame must re-encode to the same bytes;
 * the scanner must drop only what cannot begin a frame; a link must never
 * deliver to a stream it did not open, and must always have output ready
 * to drain. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmlink.h"

/* A HELLO whose peer_epoch is this stands for "the epoch of the link end
 * under test" (random at each start): the target writes it in, so that
 * seeds reach the established state. */
#define EPOCH_PLACEHOLDER 0x1111111111111111ull

struct fuzz_stream {
	uint32_t id;
	int open;
};

static void *fuzz_open(void *opaque, uint32_t id)
{
	struct fuzz_stream *streams = opaque;

	for (unsigned i = 0; i < 8; i++)
		if (!streams[i].open) {
			streams[i] = (struct fuzz_stream){ .id = id, .open = 1 };
			return &streams[i];
		}
	return NULL;
}

static int fuzz_data(void *opaque, void *user, const uint8_t *buf, size_t len)
{
	struct fuzz_stream *s = user;

	if (!s->open || !len || len > VMLINK_PAYLOAD_MAX)
		abort();
	/* Now and then refuse, so the dropping path runs. */
	return buf[0] == 0xee ? -11 /* -EAGAIN */ : 0;
}

static void fuzz_close(void *opaque, void *user)
{
	struct fuzz_stream *s = user;

	if (!s->open)
		abort();
	s->open = 0;
}

static const struct vmlink_ops fuzz_ops = { fuzz_open, fuzz_data, fuzz_close, NULL };

static void scan_all(const uint8_t *data, size_t size)
{
	size_t pos = 0;

	while (pos < size) {
		struct vmlink_frame f;
		size_t used, skipped;
		uint8_t hdr[VMLINK_HEADER_SIZE];

		if (vmlink_frame_scan(data + pos, size - pos, &f, &used, &skipped) == VMLINK_SCAN_MORE) {
			if (used > size - pos || skipped != used)
				abort();
			break;
		}
		if (used > size - pos || skipped + VMLINK_HEADER_SIZE + f.length != used ||
		    f.length > VMLINK_PAYLOAD_MAX || f.payload != data + pos + skipped + VMLINK_HEADER_SIZE)
			abort();
		vmlink_header_encode(hdr, &f);
		if (memcmp(hdr, data + pos + skipped, VMLINK_HEADER_SIZE))
			abort();
		pos += used;
	}
}

/* Write @epoch into every HELLO of @buf that names the placeholder. */
static void epoch_patch(uint8_t *buf, size_t size, uint64_t epoch)
{
	size_t pos = 0;

	while (pos < size) {
		struct vmlink_frame f;
		struct vmlink_hello h;
		size_t used, skipped;

		if (vmlink_frame_scan(buf + pos, size - pos, &f, &used, &skipped) == VMLINK_SCAN_MORE)
			break;
		if (f.type == VMLINK_HELLO && !vmlink_hello_decode(f.payload, f.length, &h) &&
		    h.peer_epoch == EPOCH_PLACEHOLDER) {
			h.peer_epoch = epoch;
			vmlink_hello_encode((uint8_t *)f.payload, &h);
			vmlink_header_encode(buf + pos + skipped, &f);
		}
		pos += used;
	}
}

static void feed(enum vmlink_role role, const uint8_t *input, size_t size)
{
	struct fuzz_stream streams[8] = { 0 };
	struct vmlink *link = vmlink_create(role, &fuzz_ops, streams);
	uint8_t *data = malloc(size ? size : 1);
	size_t pos = 0;
	uint64_t now = 0;
	uint32_t id;

	if (!link || !data)
		goto out;
	memcpy(data, input, size);
	epoch_patch(data, size, vmlink_epoch(link));
	vmlink_connected(link, 0);
	if (role == VMLINK_ROLE_GUEST && !vmlink_stream_open(link, fuzz_open(streams, 0), &id))
		streams[0].id = id;
	while (pos < size) {
		size_t room, n = 1 + (data[pos] * 131u) % 4096;
		uint8_t *space = vmlink_rx_space(link, &room);
		const uint8_t *out;
		size_t len;

		if (n > size - pos)
			n = size - pos;
		if (n > room)
			n = room;
		if (n)
			memcpy(space, data + pos, n);
		pos += n;
		vmlink_rx_commit(link, n);
		now += 37;
		vmlink_tick(link, now);
		for (int i = 0; i < 16 && vmlink_tx_peek(link, &out, &len); i++) {
			if (!len || len > VMLINK_FRAME_MAX)
				abort();
			vmlink_tx_done(link, len);
		}
		if (now % 5 == 0)
			vmlink_rx_unblock(link);
	}
out:
	vmlink_free(link);
	free(data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	scan_all(data, size);
	feed(VMLINK_ROLE_HOST, data, size);
	feed(VMLINK_ROLE_GUEST, data, size);
	return 0;
}
