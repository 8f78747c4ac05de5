/* Cairn base: SHA-256 of 4 KiB data blocks with AVX-512, sixteen blocks
 * at a time.
 *
 * Why: the SHA extensions (sha256-ni.c) are latency bound even two blocks
 * at a time, and checking data is most of the server's CPU on sequential
 * reads and a large part of it on writes, send, receive and fsck.  AVX-512
 * holds sixteen 32-bit words in a register, one per message, so one
 * instruction advances sixteen independent SHA-256 computations by the same
 * step, and it has the rotate (VPRORD) and three-input logic (VPTERNLOGD)
 * that a round needs, so a round is about seventeen instructions for
 * sixteen messages.  The work is throughput bound, not latency bound: on
 * the project's AMD EPYC (Zen 4) machine it hashes 1 MiB of 4 KiB blocks
 * at 3.7-3.9 GB/s per core against sha256-ni.c's 2.4-2.6 GB/s (the loops
 * must be unrolled whole, as the pragmas below ask, or the message words
 * live in memory and the rate falls to 3.0 GB/s).  Large reads and writes
 * (a 1 MiB request is 256 blocks) have blocks to spare; a group of fewer
 * than sixteen goes to sha256-ni.c (sha256.c).
 *
 * Loading: lane l hashes block l of the group, so the j-th 64-byte chunk of
 * each of the sixteen blocks is loaded (one cache line each), byte-swapped
 * to big-endian words, and transposed so that register w[t] holds word t of
 * every lane.  Loading words with gathers instead would touch sixteen lines
 * 4 KiB apart, which share one L1 set, for every word.
 *
 * This is plain FIPS 180-4 SHA-256: the digests are OpenSSL's (test-sha256
 * compares them on random data), so the on-disk format does not change.
 */
#include <config.h>

#include "sha256-int.h"

#if SHA256_HAVE_X16

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

#define TARGET __attribute__ ((target ("avx512f,avx512bw")))

/* The last 64-byte block of every 4096-byte message as big-endian words:
 * 0x80, zeros, and the length in bits (32768).
 */
static const uint32_t PAD4K[16] = { [0] = 0x80000000u, [15] = 4096 * 8 };

#define ROR(x, n) _mm512_ror_epi32 ((x), (n))
#define XOR3(x, y, z) _mm512_ternarylogic_epi32 ((x), (y), (z), 0x96)
#define CH(e, f, g) _mm512_ternarylogic_epi32 ((e), (f), (g), 0xCA)
#define MAJ(a, b, c) _mm512_ternarylogic_epi32 ((a), (b), (c), 0xE8)
#define ADD(x, y) _mm512_add_epi32 ((x), (y))

/* Round t on the state (a .. h) with message word w (word t of the ring):
 * only d and h change, and the caller rotates the names.
 */
#define ROUND(a, b, c, d, e, f, g, h, w, t) do {                         \
    __m512i k_ = _mm512_set1_epi32 ((int) sha256_k[t]);                  \
    __m512i s1_ = XOR3 (ROR (e, 6), ROR (e, 11), ROR (e, 25));           \
    __m512i t1_ = ADD (ADD (h, s1_), ADD (CH (e, f, g), ADD (w, k_)));   \
    __m512i t2_ = ADD (XOR3 (ROR (a, 2), ROR (a, 13), ROR (a, 22)),      \
                       MAJ (a, b, c));                                   \
    d = ADD (d, t1_);                                                    \
    h = ADD (t1_, t2_);                                                  \
  } while (0)

/* Round t + r of eight, the names rotated r places: a is s[-r mod 8]. */
#define ROUND_R(s, w, t, r)                                              \
  ROUND (s[(8 - (r)) & 7], s[(9 - (r)) & 7], s[(10 - (r)) & 7],          \
         s[(11 - (r)) & 7], s[(12 - (r)) & 7], s[(13 - (r)) & 7],        \
         s[(14 - (r)) & 7], s[(15 - (r)) & 7], w[((t) + (r)) & 15],      \
         (t) + (r))

/* Word t >= 16 of the schedule into the ring w[16]. */
#define SCHEDULE(w, t) do {                                             \
    __m512i s0_ = XOR3 (ROR (w[((t) - 15) & 15], 7),                    \
                        ROR (w[((t) - 15) & 15], 18),                   \
                        _mm512_srli_epi32 (w[((t) - 15) & 15], 3));     \
    __m512i s1_ = XOR3 (ROR (w[((t) - 2) & 15], 17),                    \
                        ROR (w[((t) - 2) & 15], 19),                    \
                        _mm512_srli_epi32 (w[((t) - 2) & 15], 10));     \
    w[(t) & 15] = ADD (ADD (w[(t) & 15], s0_),                          \
                       ADD (w[((t) - 7) & 15], s1_));                   \
  } while (0)

/* Eight rounds from t, the names rotated back to where they started. */
#define ROUNDS8(s, w, t) do {                                           \
    ROUND_R (s, w, t, 0); ROUND_R (s, w, t, 1);                         \
    ROUND_R (s, w, t, 2); ROUND_R (s, w, t, 3);                         \
    ROUND_R (s, w, t, 4); ROUND_R (s, w, t, 5);                         \
    ROUND_R (s, w, t, 6); ROUND_R (s, w, t, 7);                         \
  } while (0)

/* Words 0-15 of the 64-byte chunk at offset off of each of the sixteen
 * blocks at data: w[t] holds word t of block l in lane l.
 */
TARGET static inline void
load_transposed (const uint8_t *data, size_t off, __m512i w[16])
{
  const __m512i bswap = _mm512_set4_epi32 (0x0c0d0e0f, 0x08090a0b,
                                           0x04050607, 0x00010203);
  __m512i r[16], a[16], b[16];

#pragma GCC unroll 16
  for (int l = 0; l < 16; l++)
    r[l] = _mm512_shuffle_epi8 (
        _mm512_loadu_si512 (data + l * SHA256_DATA_BLOCK + off), bswap);
  /* 32-bit then 64-bit interleaves: lane k (128 bits) of b[4i + j] holds
   * word 4k + j of rows 4i .. 4i + 3.
   */
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {
    a[2 * i] = _mm512_unpacklo_epi32 (r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32 (r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    b[4 * i] = _mm512_unpacklo_epi64 (a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64 (a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64 (a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64 (a[4 * i + 1], a[4 * i + 3]);
  }
  /* Then gather lane k of b[j], b[4 + j], b[8 + j], b[12 + j]: word 4k + j
   * of rows 0-3, 4-7, 8-11 and 12-15.
   */
#pragma GCC unroll 4
  for (int j = 0; j < 4; j++) {
    __m512i c0 = _mm512_shuffle_i32x4 (b[j], b[4 + j], 0x44);
    __m512i c1 = _mm512_shuffle_i32x4 (b[j], b[4 + j], 0xEE);
    __m512i c2 = _mm512_shuffle_i32x4 (b[8 + j], b[12 + j], 0x44);
    __m512i c3 = _mm512_shuffle_i32x4 (b[8 + j], b[12 + j], 0xEE);

    w[j] = _mm512_shuffle_i32x4 (c0, c2, 0x88);
    w[4 + j] = _mm512_shuffle_i32x4 (c0, c2, 0xDD);
    w[8 + j] = _mm512_shuffle_i32x4 (c1, c3, 0x88);
    w[12 + j] = _mm512_shuffle_i32x4 (c1, c3, 0xDD);
  }
}

/* Compress the message words w (destroyed) into the state st. */
TARGET static inline void
compress (__m512i st[8], __m512i w[16])
{
  __m512i s[8];

  for (int i = 0; i < 8; i++)
    s[i] = st[i];
  ROUNDS8 (s, w, 0);
  ROUNDS8 (s, w, 8);
#pragma GCC unroll 6
  for (int t = 16; t < 64; t += 8) {
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++)
      SCHEDULE (w, t + u);
    ROUNDS8 (s, w, t);
  }
  for (int i = 0; i < 8; i++)
    st[i] = ADD (st[i], s[i]);
}

/* Digests of the sixteen consecutive 4096-byte blocks at data. */
TARGET static void
hash_4k_x16 (const uint8_t *data, uint8_t *out)
{
  uint32_t words[8][16] __attribute__ ((aligned (64)));
  __m512i st[8], w[16];

  for (int i = 0; i < 8; i++)
    st[i] = _mm512_set1_epi32 ((int) sha256_h[i]);
  for (size_t off = 0; off < SHA256_DATA_BLOCK; off += 64) {
    load_transposed (data, off, w);
    compress (st, w);
  }
  for (int t = 0; t < 16; t++)
    w[t] = _mm512_set1_epi32 ((int) PAD4K[t]);
  compress (st, w);
  /* Lane l of st[i] is word i of block l's digest. */
  for (int i = 0; i < 8; i++)
    _mm512_store_si512 (words[i], st[i]);
  for (int l = 0; l < 16; l++)
    for (int i = 0; i < 8; i++) {
      uint32_t v = __builtin_bswap32 (words[i][l]);

      memcpy (out + (size_t) l * SHA256_LEN + 4 * i, &v, 4);
    }
}

/* Does this CPU, and the operating system, give us AVX-512 F and BW?
 * CPUID leaf 7 names the instructions; XGETBV says the kernel saves the
 * ZMM registers (XCR0 bits 1, 2 and 5-7).
 */
bool
sha256_x16_available (void)
{
  unsigned a, b, c, d;
  unsigned lo, hi;

  if (!__get_cpuid (1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
    return false;
  if (__get_cpuid_max (0, NULL) < 7)
    return false;
  __cpuid_count (7, 0, a, b, c, d);
  if (!(b & bit_AVX512F) || !(b & bit_AVX512BW))
    return false;
  __asm__ ("xgetbv" : "=a" (lo), "=d" (hi) : "c" (0));
  return (lo & 0xe6) == 0xe6;
}

/* Digests of n consecutive blocks, sixteen at a time: returns how many it
 * did (a multiple of sixteen); the caller hashes the rest.
 */
size_t
sha256_x16_4k (const uint8_t *data, size_t n, uint8_t *out)
{
  size_t i = 0;

  for (; i + 16 <= n; i += 16)
    hash_4k_x16 (data + i * SHA256_DATA_BLOCK, out + i * SHA256_LEN);
  return i;
}

#endif /* SHA256_HAVE_X16 */
