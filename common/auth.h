/* Who may speak for a session: the shared token of remote listeners and the
 * per-session credential ternd issues in the hello reply.
 *
 * Neither secret crosses the wire in the clear: ternd answers the guest's
 * `challenge` with a fresh nonce, and the hello carries HMAC-SHA256 proofs
 * bound to that nonce and the session id (docs/wire-protocol.md, "Session
 * start"). The credential itself is sent once, in the hello reply, masked
 * with a key derived from the token on listeners that have one.
 *
 * Token files are exact bytes: 16 to 255 of them, no NUL, no CR or LF, no
 * space or tab at either end; one final "\n" is allowed and is not part of
 * the token. The file must be a regular file that others cannot read. Any
 * other content is an error, never silently trimmed.
 *
 * Pure functions but auth_random (getrandom) and auth_token_file_read (one
 * file); safe from any thread.
 */
#ifndef TERN_AUTH_H
#define TERN_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUTH_NONCE_BYTES 32u
#define AUTH_CREDENTIAL_BYTES 32u     /* 256 bits from getrandom */
#define AUTH_PROOF_BYTES 32u          /* an HMAC-SHA256 */
#define AUTH_TOKEN_MIN 16u
#define AUTH_TOKEN_MAX 255u

struct auth_token {
	uint32_t len;                   /* 0: no token */
	uint8_t bytes[AUTH_TOKEN_MAX];
};

/* Check @len bytes of a token file's contents and copy the token to @out.
 * 0, or -EINVAL with *@why saying what is wrong (a static string). */
int auth_token_parse(const uint8_t *buf, size_t len, struct auth_token *out, const char **why);
/* Read and check the token file @path. 0, or -errno with @err saying why. */
int auth_token_file_read(const char *path, struct auth_token *out, char *err, size_t errlen);

/* Compare @n bytes in time that depends on @n only. */
bool auth_equal(const uint8_t *a, const uint8_t *b, size_t n);
/* Fill @buf from the kernel's CSPRNG (getrandom). 0 or -errno. */
int auth_random(void *buf, size_t n);

/* The hello's token proof: HMAC-SHA256(token, "tern token v2" NUL nonce session). */
void auth_token_proof(const struct auth_token *t, const uint8_t nonce[AUTH_NONCE_BYTES], const char *session,
		      uint8_t out[AUTH_PROOF_BYTES]);
/* The hello's credential proof: HMAC-SHA256(credential, "tern credential v2" NUL nonce session). */
void auth_credential_proof(const uint8_t credential[AUTH_CREDENTIAL_BYTES], const uint8_t nonce[AUTH_NONCE_BYTES],
			   const char *session, uint8_t out[AUTH_PROOF_BYTES]);
/* XOR @credential in place with HMAC-SHA256(token, "tern credential mask v2" NUL nonce session):
 * how it travels in the hello reply when there is a token (its own inverse). */
void auth_credential_mask(const struct auth_token *t, const uint8_t nonce[AUTH_NONCE_BYTES], const char *session,
			  uint8_t credential[AUTH_CREDENTIAL_BYTES]);

/* A migration stream's proof (docs/migration.md): HMAC-SHA256(token, "tern migrate v1" NUL nonce session). */
void auth_migrate_proof(const struct auth_token *t, const uint8_t nonce[AUTH_NONCE_BYTES], const char *session,
			uint8_t out[AUTH_PROOF_BYTES]);
/* XOR @credential with HMAC-SHA256(token, "tern migrate credential v1" NUL nonce session):
 * how the session's credential crosses a migration stream (its own inverse). */
void auth_migrate_credential_mask(const struct auth_token *t, const uint8_t nonce[AUTH_NONCE_BYTES],
				  const char *session, uint8_t credential[AUTH_CREDENTIAL_BYTES]);
/* The proof in a "moved" hello reply, that the ternd which sends the guest
 * elsewhere holds its session's credential:
 * HMAC-SHA256(credential, "tern moved v1" NUL nonce session NUL url). */
void auth_moved_proof(const uint8_t credential[AUTH_CREDENTIAL_BYTES], const uint8_t nonce[AUTH_NONCE_BYTES],
		      const char *session, const char *url, uint8_t out[AUTH_PROOF_BYTES]);

#endif
