/* Cairn base: SHA-256 wrapper over OpenSSL EVP (see sha256.h).
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

#if SHA256_HAVE_NI
const uint32_t sha256_k[64] __attribute__ ((aligned (64))) = {
  0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u,
  0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
  0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u,
  0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
  0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu,
  0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
  0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
  0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
  0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u,
  0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
  0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u,
  0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
  0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u,
  0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
  0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u,
  0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u
};
const uint32_t sha256_h[8] __attribute__ ((aligned (32))) = {
  0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
  0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u
};
#endif

/* What the CPU offers (decided once) and what sha256_blocks may use:
 * bit 0 sha256-ni.c, bit 1 sha256-x16.c; -1 not decided yet.  Process-wide
 * like OpenSSL's own CPU capability vector: it describes the CPU, not a
 * pool.
 */
enum { USE_NI = 1, USE_X16 = 2 };
static int blocks_cpu = -1, blocks_use = -1;

/* The accelerated implementations this CPU can run. */
static int
cpu_impls (void)
{
  int v = __atomic_load_n (&blocks_cpu, __ATOMIC_RELAXED);

  if (v < 0) {
    v = 0;
#if SHA256_HAVE_NI
    if (sha256_ni_available ())
      v |= USE_NI;
#endif
#if SHA256_HAVE_X16
    if (sha256_x16_available ())
      v |= USE_X16;
#endif
    __atomic_store_n (&blocks_cpu, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* The implementations sha256_blocks uses now. */
static int
use_impls (void)
{
  int v = __atomic_load_n (&blocks_use, __ATOMIC_RELAXED);

  if (v < 0) {
    v = cpu_impls ();
    __atomic_store_n (&blocks_use, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* The bits of an implementation level and all slower ones. */
static int
level_impls (enum sha256_blocks_level level)
{
  switch (level) {
  case SHA256_BLOCKS_OPENSSL:
    return 0;
  case SHA256_BLOCKS_NI:
    return USE_NI;
  case SHA256_BLOCKS_X16:
  default:
    return USE_NI | USE_X16;
  }
}

/* Use the implementations up to level that the CPU has (sha256.h). */
bool
sha256_blocks_limit (enum sha256_blocks_level level)
{
  int want = level_impls (level), have = cpu_impls ();

  __atomic_store_n (&blocks_use, want & have, __ATOMIC_RELAXED);
  return level == SHA256_BLOCKS_OPENSSL ||
         (have & want & ~level_impls (level - 1)) != 0;
}

/* Name the implementation in use. */
const char *
sha256_blocks_impl (void)
{
  switch (use_impls ()) {
  case USE_NI | USE_X16:
    return "avx512-x16+sha-ni-x2";
  case USE_X16:
    return "avx512-x16+openssl";
  case USE_NI:
    return "sha-ni-x2";
  default:
    return "openssl";
  }
}

/* Digest n consecutive data blocks: sixteen at a time while there are
 * sixteen, the rest two at a time, or one at a time through OpenSSL.
 */
void
sha256_blocks (const void *data, size_t n, uint8_t *out)
{
  const uint8_t *p = data;
  size_t i = 0;
  int use = use_impls ();

#if SHA256_HAVE_X16
  if (use & USE_X16)
    i = sha256_x16_4k (p, n, out);
#endif
#if SHA256_HAVE_NI
  if ((use & USE_NI) && i < n) {
    sha256_ni_4k (p + i * SHA256_DATA_BLOCK, n - i, out + i * SHA256_LEN);
    return;
  }
#endif
  for (; i < n; i++)
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
