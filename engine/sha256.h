/* Cairn engine: SHA-256 through OpenSSL's EVP interface.
 *
 * EVP picks the CPU's SHA extensions when present.  Every data block, every
 * metadata node and every superblock slot is checksummed with it.
 */
#ifndef CAIRN_SHA256_H
#define CAIRN_SHA256_H

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

/* Format a digest as 64 lowercase hex digits plus NUL. */
void sha256_hex (const uint8_t digest[SHA256_LEN], char hex[2 * SHA256_LEN + 1]);

#endif /* CAIRN_SHA256_H */
