/* Cairn engine: SHA-256 through OpenSSL's EVP interface.
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
 * 4096-byte block.  The same SHA-256 as sha256(), computed two blocks at a
 * time with the CPU's SHA extensions when it has them (sha256-ni.c), which
 * is about twice OpenSSL's rate for this size; OpenSSL otherwise.
 */
#define SHA256_DATA_BLOCK 4096
/* Digest each of the n consecutive blocks at data into out + i * SHA256_LEN. */
void sha256_blocks (const void *data, size_t n, uint8_t *out);
/* Check n consecutive blocks against the digests want: the index of the
 * first block that does not match, n if all do.
 */
size_t sha256_blocks_check (const void *data, size_t n, const uint8_t *want);
/* The implementation sha256_blocks uses: "sha-ni-x2" or "openssl". */
const char *sha256_blocks_impl (void);
/* For tests: allow the SHA extensions (the default) or force OpenSSL. */
void sha256_blocks_accel (bool allow);

/* Format a digest as 64 lowercase hex digits plus NUL. */
void sha256_hex (const uint8_t digest[SHA256_LEN], char hex[2 * SHA256_LEN + 1]);

#endif /* CAIRN_SHA256_H */
