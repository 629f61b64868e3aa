/* CPU reference of the chunk device hash (snap_hash.h). */
#include "snap_hash.h"
#include "le.h"

#include <string.h>

uint64_t snap_hash_words(const void *p, uint64_t nbytes, uint64_t first_word, uint64_t *nonzero)
{
	const uint8_t *b = p;
	uint64_t h = 0, nz = 0, i = first_word;
	uint64_t whole = nbytes / 8;

	for (uint64_t k = 0; k < whole; k++, i++) {
		uint64_t w;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		memcpy(&w, b + 8 * k, 8);
#else
		w = le64_get(b + 8 * k);
#endif
		nz |= w;
		h ^= snap_hash_word(w, i);
	}
	if (nbytes % 8) {
		uint8_t pad[8] = {0};
		uint64_t w;

		memcpy(pad, b + 8 * whole, nbytes % 8);
		w = le64_get(pad);
		nz |= w;
		h ^= snap_hash_word(w, i);
	}
	if (nonzero)
		*nonzero = nz;
	return h;
}

uint64_t snap_hash_device(const void *p, uint64_t len, bool *zero)
{
	uint64_t nz;
	uint64_t h = snap_hash_words(p, len, 0, &nz);

	if (zero)
		*zero = nz == 0;
	return h ^ len;
}
