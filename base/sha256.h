/* Cairn base: SHA-256 through OpenSSL's EVP interface.
 *
 * EVP picks the CPU's SHA extensions when present.  Every data block, every
 * metadata node and every superblock slot is checksummed with it.
 */
#ifndef CAIRN_SHA256_H
#define CAIRN_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define SHA256_LEN 32

/* Hash len bytes at buf into out. */
void sha256 (const void *buf, size_t len, uint8_t out[SHA256_LEN]);

/* Incremental hashing, for chained digests over a stream. */
struct sha256_ctx;
struct sha256_ctx *sha256_new (void);
void sha256_update (struct sha256_ctx *ctx, const void *buf, size_t len);
/* Write the digest into out and reset ctx for reuse. */
void sha256_final (struct sha256_ctx *ctx, uint8_t out[SHA256_LEN]);
void sha256_free (struct sha256_ctx *ctx);

/* Data blocks: the digests the volume layer stores and checks, one per
 * 4096-byte block.  The same SHA-256 as sha256(), computed sixteen blocks
 * at a time with AVX-512 (sha256-x16.c) and two at a time with the SHA
 * extensions (sha256-ni.c) when the CPU has them, which for this size is
 * about 2.5 and 1.7 times OpenSSL's rate; OpenSSL otherwise.
 */
#define SHA256_DATA_BLOCK 4096
/* Digest each of the n consecutive blocks at data into out + i * SHA256_LEN. */
void sha256_blocks (const void *data, size_t n, uint8_t *out);
/* Check n consecutive blocks against the digests want: the index of the
 * first block that does not match, n if all do.
 */
size_t sha256_blocks_check (const void *data, size_t n, const uint8_t *want);
/* The implementation sha256_blocks uses: "avx512-x16+sha-ni-x2",
 * "avx512-x16+openssl", "sha-ni-x2" or "openssl".
 */
const char *sha256_blocks_impl (void);

/* The implementations, slowest first: each level may use those below it
 * for what it does not do itself (sixteen blocks at a time leaves a rest).
 */
enum sha256_blocks_level {
  SHA256_BLOCKS_OPENSSL,
  SHA256_BLOCKS_NI,
  SHA256_BLOCKS_X16,
  SHA256_BLOCKS_BEST = SHA256_BLOCKS_X16
};
/* For tests: use only the implementations up to level that the CPU has
 * (SHA256_BLOCKS_BEST, the default, for all of them).  False when the CPU
 * lacks level's own, so that a test can say it skipped it.
 */
bool sha256_blocks_limit (enum sha256_blocks_level level);

/* Format a digest as 64 lowercase hex digits plus NUL. */
void sha256_hex (const uint8_t digest[SHA256_LEN], char hex[2 * SHA256_LEN + 1]);

#endif /* CAIRN_SHA256_H */
