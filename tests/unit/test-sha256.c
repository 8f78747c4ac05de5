/* Unit tests for the SHA-256 wrapper: the FIPS 180-2 test vectors. */
#include <config.h>

#include <string.h>

#include <criterion/criterion.h>

#include "sha256.h"

/* Hash msg (repeated reps times) incrementally and in one call; both must
 * give expect.
 */
static void
check_vector (const char *msg, size_t reps, const char *expect)
{
  uint8_t digest[SHA256_LEN];
  char hex[2 * SHA256_LEN + 1];
  struct sha256_ctx *ctx = sha256_new ();
  size_t len = strlen (msg);

  for (size_t i = 0; i < reps; i++)
    sha256_update (ctx, msg, len);
  sha256_final (ctx, digest);
  sha256_hex (digest, hex);
  cr_assert_str_eq (hex, expect, "incremental SHA-256 of \"%s\" x %zu", msg, reps);

  if (reps == 1) {
    sha256 (msg, len, digest);
    sha256_hex (digest, hex);
    cr_assert_str_eq (hex, expect, "one-shot SHA-256 of \"%s\"", msg);
  }

  /* The context is reset by final and can be reused. */
  sha256_update (ctx, "abc", 3);
  sha256_final (ctx, digest);
  sha256_hex (digest, hex);
  cr_assert_str_eq (hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  sha256_free (ctx);
}

Test (sha256, fips180_2_one_block)
{
  check_vector ("abc", 1,
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

Test (sha256, fips180_2_two_blocks)
{
  check_vector ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

Test (sha256, fips180_2_million_a)
{
  check_vector ("a", 1000000,
                "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

Test (sha256, empty_message)
{
  check_vector ("", 1,
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

Test (sha256, one_bit_changes_digest)
{
  uint8_t block[4096], a[SHA256_LEN], b[SHA256_LEN];

  memset (block, 0x5a, sizeof block);
  sha256 (block, sizeof block, a);
  block[1234] ^= 0x10;
  sha256 (block, sizeof block, b);
  cr_assert (memcmp (a, b, SHA256_LEN) != 0);
}
