/* Cairn base: SHA-256 of 4 KiB data blocks with the x86 SHA extensions,
 * two blocks at a time.
 *
 * Why: every data block read is checked against its SHA-256 (DESIGN §2.1),
 * and on the read path that hash is most of the server's CPU.  OpenSSL uses
 * the SHA instructions already, but hashes one message at a time, and one
 * SHA-256 message is a single dependency chain: each SHA256RNDS2 waits for
 * the previous one's result, so the unit sits idle most of the time (latency
 * bound).  Two independent blocks hashed in the same loop fill those gaps:
 * on the project's AMD EPYC (Zen 4) machine this hashes 4 KiB blocks at
 * 2.6-3.0 GB/s per core against OpenSSL's 1.35-1.5 GB/s.  Four lanes spill
 * the 16 XMM registers and came out slower (1.9-2.4 GB/s).
 *
 * This is plain FIPS 180-4 SHA-256, not another checksum: the digests are
 * the ones OpenSSL computes (test-sha256 compares them on random data), so
 * the on-disk format does not change.  It only handles what the data path
 * needs: messages of exactly one 4 KiB block, whose padding block is a
 * constant.  sha256.c picks it at run time when the CPU has the SHA, SSSE3
 * and SSE4.1 extensions and falls back to OpenSSL otherwise (and on other
 * architectures, where this file compiles to nothing).
 *
 * The layout of the state (ABEF/CDGH) and the round structure follow Intel's
 * SHA extensions white paper (Gulley et al., 2013).  The round constants and
 * initial hash value are FIPS 180-4's (sha256_k and sha256_h, in sha256.c).
 */
#include <config.h>

#include "sha256-int.h"

#if SHA256_HAVE_NI

#include <cpuid.h>
#include <immintrin.h>

#define TARGET __attribute__ ((target ("sha,sse4.1,ssse3")))

/* The last 64-byte block of every 4096-byte message: 0x80, zeros, and the
 * length in bits (32768) big-endian.
 */
static const uint8_t pad4k[64] = { [0] = 0x80, [62] = 0x80 };

/* Byte order shuffle: big-endian words of the message. */
#define BSWAP_MASK _mm_set_epi64x (0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL)

/* Four 32-bit words from an aligned table. */
#define LOAD4(table, i) _mm_load_si128 ((const __m128i *) &(table)[i])

/* Four rounds of group g with message words w on state (s0, s1). */
#define ROUNDS4(s0, s1, w, g) do {                                      \
    __m128i m_ = _mm_add_epi32 ((w), LOAD4 (sha256_k, 4 * (g)));        \
    s1 = _mm_sha256rnds2_epu32 (s1, s0, m_);                            \
    m_ = _mm_shuffle_epi32 (m_, 0x0E);                                  \
    s0 = _mm_sha256rnds2_epu32 (s0, s1, m_);                            \
  } while (0)

/* Message words of group g >= 4 from the previous four groups, kept in the
 * ring w[g % 4].
 */
#define SCHEDULE(w, g)                                                  \
  _mm_sha256msg2_epu32 (                                                \
    _mm_add_epi32 (_mm_sha256msg1_epu32 (w[(g) & 3], w[((g) + 1) & 3]), \
                   _mm_alignr_epi8 (w[((g) + 3) & 3], w[((g) + 2) & 3], 4)), \
    w[((g) + 3) & 3])

/* The initial hash value in the ABEF/CDGH layout. */
TARGET static inline void
init_state (__m128i *s0, __m128i *s1)
{
  __m128i t = _mm_shuffle_epi32 (LOAD4 (sha256_h, 0), 0xB1);
  __m128i u = _mm_shuffle_epi32 (LOAD4 (sha256_h, 4), 0x1B);

  *s0 = _mm_alignr_epi8 (t, u, 8);
  *s1 = _mm_blend_epi16 (u, t, 0xF0);
}

/* Message words g of a 64-byte block, big-endian. */
TARGET static inline __m128i
load_words (const uint8_t *p, int g)
{
  return _mm_shuffle_epi8 (_mm_loadu_si128 ((const __m128i *) (p + 16 * g)),
                           BSWAP_MASK);
}

/* Write the digest of state (s0, s1). */
TARGET static inline void
store_digest (__m128i s0, __m128i s1, uint8_t out[SHA256_LEN])
{
  __m128i t = _mm_shuffle_epi32 (s0, 0x1B);

  s1 = _mm_shuffle_epi32 (s1, 0xB1);
  s0 = _mm_blend_epi16 (t, s1, 0xF0);
  s1 = _mm_alignr_epi8 (s1, t, 8);
  _mm_storeu_si128 ((__m128i *) out, _mm_shuffle_epi8 (s0, BSWAP_MASK));
  _mm_storeu_si128 ((__m128i *) (out + 16), _mm_shuffle_epi8 (s1, BSWAP_MASK));
}

/* Compress one 64-byte block into each of two independent states. */
TARGET static inline void
compress_x2 (__m128i st[4], const uint8_t *pa, const uint8_t *pb)
{
  __m128i a0 = st[0], a1 = st[1], b0 = st[2], b1 = st[3];
  __m128i wa[4], wb[4];

  for (int g = 0; g < 4; g++) {
    wa[g] = load_words (pa, g);
    wb[g] = load_words (pb, g);
    ROUNDS4 (a0, a1, wa[g], g);
    ROUNDS4 (b0, b1, wb[g], g);
  }
#pragma GCC unroll 12
  for (int g = 4; g < 16; g++) {
    wa[g & 3] = SCHEDULE (wa, g);
    wb[g & 3] = SCHEDULE (wb, g);
    ROUNDS4 (a0, a1, wa[g & 3], g);
    ROUNDS4 (b0, b1, wb[g & 3], g);
  }
  st[0] = _mm_add_epi32 (st[0], a0);
  st[1] = _mm_add_epi32 (st[1], a1);
  st[2] = _mm_add_epi32 (st[2], b0);
  st[3] = _mm_add_epi32 (st[3], b1);
}

/* Compress one 64-byte block into one state. */
TARGET static inline void
compress_x1 (__m128i st[2], const uint8_t *p)
{
  __m128i s0 = st[0], s1 = st[1];
  __m128i w[4];

  for (int g = 0; g < 4; g++) {
    w[g] = load_words (p, g);
    ROUNDS4 (s0, s1, w[g], g);
  }
#pragma GCC unroll 12
  for (int g = 4; g < 16; g++) {
    w[g & 3] = SCHEDULE (w, g);
    ROUNDS4 (s0, s1, w[g & 3], g);
  }
  st[0] = _mm_add_epi32 (st[0], s0);
  st[1] = _mm_add_epi32 (st[1], s1);
}

/* Digests of the two 4096-byte blocks a and b. */
TARGET static void
hash_4k_x2 (const uint8_t *a, const uint8_t *b, uint8_t *outa, uint8_t *outb)
{
  __m128i st[4];

  init_state (&st[0], &st[1]);
  st[2] = st[0];
  st[3] = st[1];
  for (size_t off = 0; off < SHA256_DATA_BLOCK; off += 64)
    compress_x2 (st, a + off, b + off);
  compress_x2 (st, pad4k, pad4k);
  store_digest (st[0], st[1], outa);
  store_digest (st[2], st[3], outb);
}

/* Digest of one 4096-byte block. */
TARGET static void
hash_4k_x1 (const uint8_t *a, uint8_t *out)
{
  __m128i st[2];

  init_state (&st[0], &st[1]);
  for (size_t off = 0; off < SHA256_DATA_BLOCK; off += 64)
    compress_x1 (st, a + off);
  compress_x1 (st, pad4k);
  store_digest (st[0], st[1], out);
}

/* Does this CPU have what the code above needs (CPUID leaves 1 and 7)? */
bool
sha256_ni_available (void)
{
  unsigned a, b, c, d;

  if (!__get_cpuid (1, &a, &b, &c, &d) ||
      !(c & bit_SSSE3) || !(c & bit_SSE4_1))
    return false;
  if (__get_cpuid_max (0, NULL) < 7)
    return false;
  __cpuid_count (7, 0, a, b, c, d);
  return (b & bit_SHA) != 0;
}

/* Digests of n consecutive blocks: pairs, then the odd one alone. */
void
sha256_ni_4k (const uint8_t *data, size_t n, uint8_t *out)
{
  size_t i = 0;

  for (; i + 2 <= n; i += 2)
    hash_4k_x2 (data + i * SHA256_DATA_BLOCK,
                data + (i + 1) * SHA256_DATA_BLOCK,
                out + i * SHA256_LEN, out + (i + 1) * SHA256_LEN);
  if (i < n)
    hash_4k_x1 (data + i * SHA256_DATA_BLOCK, out + i * SHA256_LEN);
}

#endif /* SHA256_HAVE_NI */
