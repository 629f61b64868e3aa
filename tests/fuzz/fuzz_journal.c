/* Fuzz target for the journal's record decoders (tracker/record.h): every
 * record type is decoded from the same bytes.  A record that decodes must
 * re-encode to exactly those bytes, since decoding accepts one form only.
 * No LMDB is involved: this is what `ckpt inspect` and the replayer trust. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "record.h"

static uint8_t out[TRACKER_META_FIXED + 8 + (1u << 20) + 64];

static void same_bytes_check(int rc, const uint8_t *data, size_t size, size_t encoded)
{
	if (rc || encoded != size || memcmp(out, data, size))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tracker_object o;
	struct tracker_region r;
	struct tracker_image im;
	struct tracker_meta_value mv;

	if (size > sizeof(out))
		return 0;
	if (tracker_object_decode(&o, data, size) == 0) {
		if (o.args_len && (const uint8_t *)o.args + o.args_len != data + size)
			abort();
		same_bytes_check(tracker_object_encode(&o, out, sizeof(out)), data, size,
				 tracker_object_encoded_size(&o));
	}
	if (tracker_region_decode(&r, data, size) == 0)
		same_bytes_check(tracker_region_encode(&r, out, sizeof(out)), data, size,
				 TRACKER_REGION_SIZE);
	if (tracker_image_decode(&im, data, size) == 0)
		same_bytes_check(tracker_image_encode(&im, out, sizeof(out)), data, size,
				 TRACKER_IMAGE_SIZE);
	if (tracker_meta_decode(&mv, data, size) == 0)
		same_bytes_check(tracker_meta_encode(&mv, out, sizeof(out)), data, size,
				 tracker_meta_encoded_size(&mv));
	if (size >= 8 && tracker_key_u64_decode(data) != tracker_key_u64_decode(data))
		abort();
	return 0;
}
