/* common/sha256 and common/auth: SHA-256 against FIPS 180-4's examples,
 * HMAC-SHA256 against RFC 4231, the token file's rules edge by edge, the
 * constant-time compare and the proofs' binding to nonce, session and
 * purpose. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "sha256.h"

static void hex(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
}

static void sha_check(const void *msg, size_t len, const char *want)
{
	struct sha256 s;
	uint8_t d[SHA256_BYTES];
	char text[65];

	sha256_init(&s);
	sha256_update(&s, msg, len);
	sha256_final(&s, d);
	hex(d, sizeof(d), text);
	assert_string_equal(text, want);
}

static void test_sha256(void **state)
{
	static uint8_t million[1000000];
	struct sha256 s;
	uint8_t d[SHA256_BYTES];
	char text[65];

	sha_check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	sha_check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	sha_check("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
		  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	memset(million, 'a', sizeof(million));
	sha_check(million, sizeof(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	/* Fed in odd pieces, the same digest. */
	sha256_init(&s);
	for (size_t at = 0, step = 1; at < sizeof(million); at += step, step = step * 3 % 1000 + 1)
		sha256_update(&s, million + at, at + step > sizeof(million) ? sizeof(million) - at : step);
	sha256_final(&s, d);
	hex(d, sizeof(d), text);
	assert_string_equal(text, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void hmac_check(const void *key, size_t klen, const void *msg, size_t mlen, const char *want)
{
	struct sha256_part part = { msg, mlen };
	uint8_t d[SHA256_BYTES];
	char text[65];

	hmac_sha256(key, klen, &part, 1, d);
	hex(d, sizeof(d), text);
	assert_string_equal(text, want);
}

static void test_hmac(void **state)
{
	uint8_t key[131];

	memset(key, 0x0b, 20);
	hmac_check(key, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	hmac_check("Jefe", 4, "what do ya want for nothing?", 28,
		   "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	/* A key longer than a block is hashed first (RFC 4231 case 6). */
	memset(key, 0xaa, sizeof(key));
	hmac_check(key, sizeof(key), "Test Using Larger Than Block-Size Key - Hash Key First", 54,
		   "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static int parse(const char *bytes, size_t len, const char **why)
{
	struct auth_token t;

	return auth_token_parse((const uint8_t *)bytes, len, &t, why);
}

static void test_token_parse(void **state)
{
	char longer[300];
	struct auth_token t;
	const char *why;

	assert_int_equal(auth_token_parse((const uint8_t *)"0123456789abcdef\n", 17, &t, &why), 0);
	assert_int_equal(t.len, 16);
	assert_memory_equal(t.bytes, "0123456789abcdef", 16);
	assert_int_equal(parse("0123456789abcdef", 16, &why), 0);
	/* Exactly one newline is forgiven; nothing else is. */
	assert_int_equal(parse("0123456789abcdef\n\n", 18, &why), -EINVAL);
	assert_string_equal(why, "holds a line break other than one final newline");
	assert_int_equal(parse("0123456789abcdef\r\n", 18, &why), -EINVAL);
	assert_int_equal(parse("0123456789abcdef ", 17, &why), -EINVAL);
	assert_string_equal(why, "begins or ends with white space");
	assert_int_equal(parse("\t0123456789abcdef", 17, &why), -EINVAL);
	assert_int_equal(parse("0123456789abcdef \n", 18, &why), -EINVAL);
	/* A NUL anywhere: the bytes after it would not count. */
	assert_int_equal(parse("\xc7\x00" "23456789abcdefgh", 18, &why), -EINVAL);
	assert_string_equal(why, "holds a NUL byte");
	assert_int_equal(parse("0123456789abcde", 15, &why), -EINVAL);
	assert_string_equal(why, "shorter than 16 bytes");
	assert_int_equal(parse("", 0, &why), -EINVAL);
	assert_int_equal(parse("\n", 1, &why), -EINVAL);
	memset(longer, 'x', sizeof(longer));
	assert_int_equal(parse(longer, 255, &why), 0);
	longer[255] = '\n';
	assert_int_equal(parse(longer, 256, &why), 0);
	longer[255] = 'x';
	assert_int_equal(parse(longer, 256, &why), -EINVAL);
	assert_string_equal(why, "longer than 255 bytes");
	/* Any other byte is the token's: binary tokens are fine. */
	assert_int_equal(parse("\x01\xff\x80 inner space ok\x7f", 19, &why), 0);
}

static void test_token_file(void **state)
{
	char dir[] = "/tmp/tern-auth-XXXXXX", path[64], err[512];
	struct auth_token t;
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/token", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "a-good-token-of-test\n", 21), 21);
	close(fd);
	assert_int_equal(auth_token_file_read(path, &t, err, sizeof(err)), 0);
	assert_int_equal(t.len, 20);
	/* Others may not read it. */
	chmod(path, 0644);
	assert_int_equal(auth_token_file_read(path, &t, err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "can be read by others"));
	assert_int_equal(t.len, 0);
	unlink(path);
	assert_int_equal(auth_token_file_read(path, &t, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "cannot open"));
	assert_int_equal(auth_token_file_read(dir, &t, err, sizeof(err)), -EINVAL);
	/* A file longer than any token is refused, not cut. */
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	for (int i = 0; i < 40; i++)
		assert_int_equal(write(fd, "0123456789", 10), 10);
	close(fd);
	assert_int_equal(auth_token_file_read(path, &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "longer than 255 bytes"));
	unlink(path);
	rmdir(dir);
}

static void test_equal_and_proofs(void **state)
{
	uint8_t a[32] = { 0 }, b[32] = { 0 }, nonce[AUTH_NONCE_BYTES], cred[AUTH_CREDENTIAL_BYTES];
	uint8_t p1[AUTH_PROOF_BYTES], p2[AUTH_PROOF_BYTES], masked[AUTH_CREDENTIAL_BYTES];
	struct auth_token tok = { .len = 16 };
	char text[65];

	assert_true(auth_equal(a, b, 32));
	b[31] = 1;
	assert_false(auth_equal(a, b, 32));
	b[31] = 0;
	b[0] = 0x80;
	assert_false(auth_equal(a, b, 32));
	assert_int_equal(auth_random(nonce, sizeof(nonce)), 0);
	assert_int_equal(auth_random(cred, sizeof(cred)), 0);
	assert_memory_not_equal(nonce, cred, sizeof(cred));
	/* The proof is HMAC(key, label NUL nonce session): a fixed vector, also
	 * computed by Python's hmac in tests/security. */
	memset(tok.bytes, 't', 16);
	memset(nonce, 0x11, sizeof(nonce));
	auth_token_proof(&tok, nonce, "s1", p1);
	hex(p1, sizeof(p1), text);
	{
		const char msg[] = "tern token v2";
		uint8_t buf[sizeof(msg) + AUTH_NONCE_BYTES + 2];
		struct sha256_part part = { buf, sizeof(buf) };

		memcpy(buf, msg, sizeof(msg));
		memcpy(buf + sizeof(msg), nonce, AUTH_NONCE_BYTES);
		memcpy(buf + sizeof(msg) + AUTH_NONCE_BYTES, "s1", 2);
		hmac_sha256(tok.bytes, tok.len, &part, 1, p2);
		assert_memory_equal(p1, p2, sizeof(p1));
	}
	/* Another session, nonce or purpose: another proof. */
	auth_token_proof(&tok, nonce, "s2", p2);
	assert_memory_not_equal(p1, p2, sizeof(p1));
	nonce[0] ^= 1;
	auth_token_proof(&tok, nonce, "s1", p2);
	assert_memory_not_equal(p1, p2, sizeof(p1));
	auth_credential_proof(tok.bytes, nonce, "s1", p2);
	auth_token_proof(&tok, nonce, "s1", p1);
	assert_memory_not_equal(p1, p2, sizeof(p1));
	/* The mask is its own inverse and hides the credential. */
	memcpy(masked, cred, sizeof(cred));
	auth_credential_mask(&tok, nonce, "s1", masked);
	assert_memory_not_equal(masked, cred, sizeof(cred));
	auth_credential_mask(&tok, nonce, "s1", masked);
	assert_memory_equal(masked, cred, sizeof(cred));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256),
		cmocka_unit_test(test_hmac),
		cmocka_unit_test(test_token_parse),
		cmocka_unit_test(test_token_file),
		cmocka_unit_test(test_equal_and_proofs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
