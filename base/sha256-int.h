/* Cairn base: the accelerated SHA-256 of 4 KiB blocks (sha256-ni.c and
 * sha256-x16.c), private to sha256.c.
 */
#ifndef CAIRN_SHA256_INT_H
#define CAIRN_SHA256_INT_H

#include <stdbool.h>

#include "sha256.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define SHA256_HAVE_NI 1
/* FIPS 180-4's round constants (cube roots of the first 64 primes) and
 * initial hash value (square roots of the first 8), in sha256.c.
 */
extern const uint32_t sha256_k[64] __attribute__ ((aligned (64)));
extern const uint32_t sha256_h[8] __attribute__ ((aligned (32)));
/* Does this CPU have the SHA, SSSE3 and SSE4.1 extensions? */
bool sha256_ni_available (void);
/* Digests of n consecutive 4096-byte blocks (needs sha256_ni_available). */
void sha256_ni_4k (const uint8_t *data, size_t n, uint8_t *out);
/* Do the CPU and the kernel give AVX-512 F and BW? */
bool sha256_x16_available (void);
/* Digests of the first n - n % 16 of n consecutive 4096-byte blocks,
 * sixteen at a time; returns how many (needs sha256_x16_available).
 */
size_t sha256_x16_4k (const uint8_t *data, size_t n, uint8_t *out);
#define SHA256_HAVE_X16 1
#else
#define SHA256_HAVE_NI 0
#define SHA256_HAVE_X16 0
#endif

#endif /* CAIRN_SHA256_INT_H */
