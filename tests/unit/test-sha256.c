/* Unit tests for the SHA-256 wrapper: the FIPS 180-2 test vectors, and the
 * data-block digests against OpenSSL on random data.
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sha256.h"
#include "test-util.h"

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

/* Data blocks: sha256_blocks gives OpenSSL's digest of every 4 KiB block
 * with each implementation the CPU has (AVX-512 sixteen at a time, the SHA
 * extensions two at a time, OpenSSL), for counts on both sides of sixteen
 * and two (the rest of a group goes to the next implementation down);
 * sha256_blocks_check finds the first block that does not match.
 */
Test (sha256, data_blocks_match_openssl)
{
  static const size_t counts[] = { 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 48, 64, 65 };
  static const enum sha256_blocks_level levels[] = {
    SHA256_BLOCKS_X16, SHA256_BLOCKS_NI, SHA256_BLOCKS_OPENSSL
  };
  struct rng r = { test_seed ("sha256.data_blocks_match_openssl", 180) };
  size_t max = 65;
  uint8_t *data = malloc (max * SHA256_DATA_BLOCK);
  uint8_t *got = malloc (max * SHA256_LEN), *want = malloc (max * SHA256_LEN);

  cr_assert (data && got && want);
  for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
    if (!sha256_blocks_limit (levels[l])) {
      fprintf (stderr, "sha256_blocks: level %d skipped: not on this CPU\n",
               (int) levels[l]);
      continue;
    }
    fprintf (stderr, "sha256_blocks: %s\n", sha256_blocks_impl ());
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      size_t n = counts[c];
      size_t flip = rng_below (&r, n);

      fill_pattern (data, n * SHA256_DATA_BLOCK, rng_next (&r));
      if (c == 0)
        memset (data, 0, SHA256_DATA_BLOCK);   /* the all-zero block too */
      for (size_t i = 0; i < n; i++)
        sha256 (data + i * SHA256_DATA_BLOCK, SHA256_DATA_BLOCK, want + i * SHA256_LEN);
      memset (got, 0, n * SHA256_LEN);
      sha256_blocks (data, n, got);
      for (size_t i = 0; i < n; i++)
        cr_assert (memcmp (got + i * SHA256_LEN, want + i * SHA256_LEN, SHA256_LEN) == 0,
                   "%s: block %zu of %zu differs from OpenSSL's digest",
                   sha256_blocks_impl (), i, n);
      cr_assert_eq (sha256_blocks_check (data, n, want), n);
      data[flip * SHA256_DATA_BLOCK + rng_below (&r, SHA256_DATA_BLOCK)] ^=
        (uint8_t) (1u << rng_below (&r, 8));
      cr_assert_eq (sha256_blocks_check (data, n, want), flip,
                    "%s: a flipped bit in block %zu of %zu", sha256_blocks_impl (),
                    flip, n);
    }
  }
  sha256_blocks_limit (SHA256_BLOCKS_BEST);
  free (data);
  free (got);
  free (want);
}
