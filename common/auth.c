#include "auth.h"
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int auth_token_parse(const uint8_t *buf, size_t len, struct auth_token *out, const char **why)
{
	*why = NULL;
	out->len = 0;
	/* One final newline is how editors and `echo` end a file. */
	if (len && buf[len - 1] == '\n')
		len--;
	if (len > AUTH_TOKEN_MAX) {
		*why = "longer than 255 bytes";
		return -EINVAL;
	}
	if (len < AUTH_TOKEN_MIN) {
		*why = "shorter than 16 bytes";
		return -EINVAL;
	}
	for (size_t i = 0; i < len; i++) {
		if (!buf[i]) {
			*why = "holds a NUL byte";
			return -EINVAL;
		}
		if (buf[i] == '\n' || buf[i] == '\r') {
			*why = "holds a line break other than one final newline";
			return -EINVAL;
		}
	}
	if (buf[0] == ' ' || buf[0] == '\t' || buf[len - 1] == ' ' || buf[len - 1] == '\t') {
		*why = "begins or ends with white space";
		return -EINVAL;
	}
	memcpy(out->bytes, buf, len);
	out->len = (uint32_t)len;
	return 0;
}

int auth_token_file_read(const char *path, struct auth_token *out, char *err, size_t errlen)
{
	uint8_t buf[AUTH_TOKEN_MAX + 2];
	const char *why;
	struct stat st;
	ssize_t n;
	int fd, ret;

	out->len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s is not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	if (st.st_mode & 0007) {
		snprintf(err, errlen, "%s can be read by others (mode %04o): chmod o-rwx it", path,
			 (unsigned)(st.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	/* One byte more than a token and its newline tells a long file apart. */
	n = read(fd, buf, sizeof(buf));
	ret = n < 0 ? -errno : 0;
	close(fd);
	if (ret) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(-ret));
		return ret;
	}
	ret = auth_token_parse(buf, (size_t)n, out, &why);
	explicit_bzero(buf, sizeof(buf));
	if (ret)
		snprintf(err, errlen, "token file %s %s (a token is 16-255 bytes, no NUL, CR or LF, no white "
			 "space at either end; one final newline is allowed)", path, why);
	return ret;
}

bool auth_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
	volatile uint8_t diff = 0;

	for (size_t i = 0; i < n; i++)
		diff |= a[i] ^ b[i];
	return diff == 0;
}

int auth_random(void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n) {
		ssize_t got = getrandom(p, n, 0);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

/* HMAC-SHA256(key, label NUL nonce session): every proof names its purpose,
 * so that one can never stand in for another. */
static void auth_mac(const void *key, size_t key_len, const char *label, const uint8_t nonce[AUTH_NONCE_BYTES],
		     const char *session, uint8_t out[AUTH_PROOF_BYTES])
{
	struct sha256_part parts[3] = {
		{ label, strlen(label) + 1 },
		{ nonce, AUTH_NONCE_BYTES },
		{ session, strlen(session) },
	};

	hmac_sha256(key, key_len, parts, 3, out);
}

void auth_token_proof(const struct auth_token *t, const uint8_t nonce[AUTH_NONCE_BYTES], const char *session,
		      uint8_t out[AUTH_PROOF_BYTES])
{
	auth_mac(t->bytes, t->len, "tern token v2", nonce, session, out);
}

void auth_credential_proof(const uint8_t credential[AUTH_CREDENTIAL_BYTES], const uint8_t nonce[AUTH_NONCE_BYTES],
			   const char *session, uint8_t out[AUTH_PROOF_BYTES])
{
	auth_mac(credential, AUTH_CREDENTIAL_BYTES, "tern credential v2", nonce, session, out);
}

void auth_credential_mask(const struct auth_token *t, const uint8_t nonce[AUTH_NONCE_BYTES], const char *session,
			  uint8_t credential[AUTH_CREDENTIAL_BYTES])
{
	uint8_t pad[AUTH_PROOF_BYTES];

	_Static_assert(AUTH_PROOF_BYTES == AUTH_CREDENTIAL_BYTES, "one pad masks the credential");
	auth_mac(t->bytes, t->len, "tern credential mask v2", nonce, session, pad);
	for (unsigned i = 0; i < AUTH_CREDENTIAL_BYTES; i++)
		credential[i] ^= pad[i];
	explicit_bzero(pad, sizeof(pad));
}

void auth_migrate_proof(const struct auth_token *t, const uint8_t nonce[AUTH_NONCE_BYTES], const char *session,
			uint8_t out[AUTH_PROOF_BYTES])
{
	auth_mac(t->bytes, t->len, "tern migrate v1", nonce, session, out);
}

void auth_migrate_credential_mask(const struct auth_token *t, const uint8_t nonce[AUTH_NONCE_BYTES],
				  const char *session, uint8_t credential[AUTH_CREDENTIAL_BYTES])
{
	uint8_t pad[AUTH_PROOF_BYTES];

	auth_mac(t->bytes, t->len, "tern migrate credential v1", nonce, session, pad);
	for (unsigned i = 0; i < AUTH_CREDENTIAL_BYTES; i++)
		credential[i] ^= pad[i];
	explicit_bzero(pad, sizeof(pad));
}

void auth_moved_proof(const uint8_t credential[AUTH_CREDENTIAL_BYTES], const uint8_t nonce[AUTH_NONCE_BYTES],
		      const char *session, const char *url, uint8_t out[AUTH_PROOF_BYTES])
{
	static const char label[] = "tern moved v1";
	struct sha256_part parts[5] = {
		{ label, sizeof(label) },
		{ nonce, AUTH_NONCE_BYTES },
		{ session, strlen(session) + 1 },
		{ url, strlen(url) },
	};

	hmac_sha256(credential, AUTH_CREDENTIAL_BYTES, parts, 4, out);
}
