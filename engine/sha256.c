/* Cairn engine: SHA-256 wrapper over OpenSSL EVP (see sha256.h).
 *
 * OpenSSL failing to hash in memory means the library itself is broken
 * (out of memory while creating a context); that is not a condition the
 * engine can recover from, so those paths abort with a message.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "sha256-int.h"

struct sha256_ctx {
  EVP_MD_CTX *md;
};

/* Abort: OpenSSL could not hash in memory. */
static void __attribute__ ((noreturn))
sha256_die (const char *what)
{
  fprintf (stderr, "cairn: OpenSSL %s failed for SHA-256\n", what);
  abort ();
}

/* Hash one buffer. */
void
sha256 (const void *buf, size_t len, uint8_t out[SHA256_LEN])
{
  unsigned int outlen = SHA256_LEN;

  if (EVP_Digest (buf, len, out, &outlen, EVP_sha256 (), NULL) != 1)
    sha256_die ("EVP_Digest");
}

/* ------------------------------------------------------------ data blocks */

/* -1: not decided yet; 0: OpenSSL; 1: sha256-ni.c.  Process-wide like
 * OpenSSL's own CPU capability vector: it describes the CPU, not a pool.
 */
static int blocks_ni = -1;

/* Use sha256-ni.c? Decided once, from the CPU. */
static bool
use_ni (void)
{
  int v = __atomic_load_n (&blocks_ni, __ATOMIC_RELAXED);

  if (v < 0) {
#if SHA256_HAVE_NI
    v = sha256_ni_available ();
#else
    v = 0;
#endif
    __atomic_store_n (&blocks_ni, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* Allow sha256-ni.c (decided again from the CPU) or force OpenSSL. */
void
sha256_blocks_accel (bool allow)
{
  __atomic_store_n (&blocks_ni, allow ? -1 : 0, __ATOMIC_RELAXED);
}

/* Name the implementation in use. */
const char *
sha256_blocks_impl (void)
{
  return use_ni () ? "sha-ni-x2" : "openssl";
}

/* Digest n consecutive data blocks. */
void
sha256_blocks (const void *data, size_t n, uint8_t *out)
{
  const uint8_t *p = data;

#if SHA256_HAVE_NI
  if (use_ni ()) {
    sha256_ni_4k (p, n, out);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++)
    sha256 (p + i * SHA256_DATA_BLOCK, SHA256_DATA_BLOCK, out + i * SHA256_LEN);
}

/* Check n consecutive data blocks, a chunk of digests at a time. */
size_t
sha256_blocks_check (const void *data, size_t n, const uint8_t *want)
{
  enum { CHUNK = 32 };
  const uint8_t *p = data;
  uint8_t got[CHUNK * SHA256_LEN];

  for (size_t i = 0; i < n; i += CHUNK) {
    size_t k = MIN ((size_t) CHUNK, n - i);

    sha256_blocks (p + i * SHA256_DATA_BLOCK, k, got);
    for (size_t j = 0; j < k; j++)
      if (memcmp (got + j * SHA256_LEN, want + (i + j) * SHA256_LEN, SHA256_LEN) != 0)
        return i + j;
  }
  return n;
}

/* ---------------------------------------------------------- incremental */

/* Start an incremental hash. */
struct sha256_ctx *
sha256_new (void)
{
  struct sha256_ctx *ctx = malloc (sizeof *ctx);

  if (ctx == NULL || (ctx->md = EVP_MD_CTX_new ()) == NULL)
    sha256_die ("EVP_MD_CTX_new");
  if (EVP_DigestInit_ex (ctx->md, EVP_sha256 (), NULL) != 1)
    sha256_die ("EVP_DigestInit_ex");
  return ctx;
}

/* Add bytes to an incremental hash. */
void
sha256_update (struct sha256_ctx *ctx, const void *buf, size_t len)
{
  if (EVP_DigestUpdate (ctx->md, buf, len) != 1)
    sha256_die ("EVP_DigestUpdate");
}

/* Finish an incremental hash and reset the context. */
void
sha256_final (struct sha256_ctx *ctx, uint8_t out[SHA256_LEN])
{
  unsigned int outlen = SHA256_LEN;

  if (EVP_DigestFinal_ex (ctx->md, out, &outlen) != 1)
    sha256_die ("EVP_DigestFinal_ex");
  if (EVP_DigestInit_ex (ctx->md, EVP_sha256 (), NULL) != 1)
    sha256_die ("EVP_DigestInit_ex");
}

/* Release an incremental hash. */
void
sha256_free (struct sha256_ctx *ctx)
{
  if (ctx) {
    EVP_MD_CTX_free (ctx->md);
    free (ctx);
  }
}

/* Format a digest in hex. */
void
sha256_hex (const uint8_t digest[SHA256_LEN], char hex[2 * SHA256_LEN + 1])
{
  static const char digits[] = "0123456789abcdef";

  for (int i = 0; i < SHA256_LEN; i++) {
    hex[2 * i] = digits[digest[i] >> 4];
    hex[2 * i + 1] = digits[digest[i] & 15];
  }
  hex[2 * SHA256_LEN] = '\0';
}
