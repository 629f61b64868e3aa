/* SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): what the session
 * credential's and the token's challenge-response need (common/auth.h), small
 * enough to read in one sitting and pinned by the FIPS and RFC 4231 vectors
 * in tests/unit/common/test_auth.c.
 *
 * A context is plain memory owned by the caller: init, update any number of
 * times, final. No allocation, no globals; one context per thread.
 * Not hardened against timing side channels beyond what SHA-256 itself is
 * (it has no secret-dependent branches or table lookups).
 */
#ifndef TERN_SHA256_H
#define TERN_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32u
#define SHA256_BLOCK 64u

struct sha256 {
	uint32_t h[8];
	uint64_t bytes;                 /* message length so far */
	uint8_t block[SHA256_BLOCK];
	size_t fill;                    /* bytes waiting in block */
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
/* Write the digest to @out; @s must be initialised again before reuse. */
void sha256_final(struct sha256 *s, uint8_t out[SHA256_BYTES]);

/* HMAC-SHA256 of the concatenation of @nparts pieces under @key (any
 * length: keys longer than a block are hashed first, as RFC 2104 says). */
struct sha256_part {
	const void *ptr;
	size_t len;
};
void hmac_sha256(const void *key, size_t key_len, const struct sha256_part *parts, unsigned nparts,
		 uint8_t out[SHA256_BYTES]);

#endif
