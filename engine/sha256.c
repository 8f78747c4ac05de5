/* Cairn engine: SHA-256 wrapper over OpenSSL EVP (see sha256.h).
 *
 * OpenSSL failing to hash in memory means the library itself is broken
 * (out of memory while creating a context); that is not a condition the
 * engine can recover from, so those paths abort with a message.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>

#include <openssl/evp.h>

#include "sha256.h"

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
