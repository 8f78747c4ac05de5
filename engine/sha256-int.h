/* Cairn engine: the accelerated SHA-256 of 4 KiB blocks (sha256-ni.c),
 * private to sha256.c.
 */
#ifndef CAIRN_SHA256_INT_H
#define CAIRN_SHA256_INT_H

#include <stdbool.h>

#include "sha256.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define SHA256_HAVE_NI 1
/* Does this CPU have the SHA, SSSE3 and SSE4.1 extensions? */
bool sha256_ni_available (void);
/* Digests of n consecutive 4096-byte blocks (needs sha256_ni_available). */
void sha256_ni_4k (const uint8_t *data, size_t n, uint8_t *out);
#else
#define SHA256_HAVE_NI 0
#endif

#endif /* CAIRN_SHA256_INT_H */
