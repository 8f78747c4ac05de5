/* Cairn base: small helpers shared by every module, below all the others.
 *
 * Little-endian field codecs (on-disk structures are always encoded and
 * decoded field by field, never cast), the cleanup attribute helpers, the
 * warn_unused_result marker, the error reporting every layer uses
 * (error.c) and UUIDs (uuid.c).
 */
#ifndef CAIRN_UTIL_H
#define CAIRN_UTIL_H

#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every function that returns an error is declared with this. */
#define CAIRN_WUR __attribute__ ((warn_unused_result))
#define CAIRN_PRINTF(a, b) __attribute__ ((format (printf, a, b)))

#define ARRAY_SIZE(a) (sizeof (a) / sizeof ((a)[0]))
/* <sys/param.h> (which <uv.h> includes) has the same two. */
#ifndef MIN
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#endif
#ifndef MAX
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#endif
#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))

/* Free a heap buffer when it goes out of scope. */
static inline void
cleanup_free (void *ptr)
{
  free (*(void **) ptr);
}
#define CLEANUP_FREE __attribute__ ((cleanup (cleanup_free)))

/* Little-endian decoders: read a field from a byte buffer. */
static inline uint16_t
get_le16 (const uint8_t *p)
{
  return (uint16_t) (p[0] | (p[1] << 8));
}

static inline uint32_t
get_le32 (const uint8_t *p)
{
  return (uint32_t) p[0] | ((uint32_t) p[1] << 8) |
         ((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}

static inline uint64_t
get_le64 (const uint8_t *p)
{
  return (uint64_t) get_le32 (p) | ((uint64_t) get_le32 (p + 4) << 32);
}

/* Little-endian encoders: write a field into a byte buffer. */
static inline void
put_le16 (uint8_t *p, uint16_t v)
{
  p[0] = v & 0xff;
  p[1] = v >> 8;
}

static inline void
put_le32 (uint8_t *p, uint32_t v)
{
  p[0] = v & 0xff;
  p[1] = (v >> 8) & 0xff;
  p[2] = (v >> 16) & 0xff;
  p[3] = v >> 24;
}

static inline void
put_le64 (uint8_t *p, uint64_t v)
{
  put_le32 (p, (uint32_t) v);
  put_le32 (p + 4, (uint32_t) (v >> 32));
}

/* Big-endian integers inside B-tree keys, so that memcmp order is
 * numeric order.
 */
static inline uint64_t
get_be64 (const uint8_t *p)
{
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = (v << 8) | p[i];
  return v;
}

static inline void
put_be64 (uint8_t *p, uint64_t v)
{
  for (int i = 7; i >= 0; i--) {
    p[i] = v & 0xff;
    v >>= 8;
  }
}

/* Counters that many threads add to at once.
 *
 * A statistic that every request adds to (bytes read, node cache hits) is
 * kept per CPU and summed when read: a single counter is a cache line that
 * the CPUs hand each other at every add, and a random read made five such
 * adds, which cost about 0.45 us of its 7 with two threads reading.  SHARDED (T)
 * follows a T with a line's worth of padding, so that an array of them
 * puts no two shards' counters on one cache line, however the array is
 * aligned.  A sum taken while adds run may miss those, as a single
 * counter read then would.
 */
#define COUNTER_SHARDS 8u
#define SHARDED(type) struct { type c; uint8_t pad_[64]; }

/* The value of the hex digit c, or -1 when it is not one. */
static inline int
hex_digit_value (int c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* The shard of the CPU the caller runs on (rseq makes it a load). */
static inline unsigned
counter_shard (void)
{
  int cpu = sched_getcpu ();

  return cpu < 0 ? 0 : (unsigned) cpu % COUNTER_SHARDS;
}

/* Add up COUNTER_SHARDS shards, stride bytes apart, of words uint64_t
 * counters each, into out (COUNTERS_SUM).
 */
static inline void
counters_sum (const void *shards, size_t stride, size_t words, uint64_t *out)
{
  for (size_t w = 0; w < words; w++) {
    out[w] = 0;
    for (unsigned s = 0; s < COUNTER_SHARDS; s++)
      out[w] += __atomic_load_n ((const uint64_t *) ((const uint8_t *) shards +
                                                     s * stride) + w,
                                 __ATOMIC_RELAXED);
  }
}

/* Sum an array of COUNTER_SHARDS SHARDED (T) into *out, a T made of
 * uint64_t counters only; counter by counter, as other threads add.
 */
#define COUNTERS_SUM(shards, out)                                           \
  do {                                                                      \
    _Static_assert (sizeof (shards)[0].c == sizeof *(out) &&                \
                    sizeof *(out) % sizeof (uint64_t) == 0,                 \
                    "counters are shards of uint64_t counters");           \
    counters_sum ((shards), sizeof (shards)[0],                             \
                  sizeof *(out) / sizeof (uint64_t), (uint64_t *) (out));   \
  } while (0)

/* Error reporting.
 *
 * A failing engine function returns a negative errno and leaves a message
 * saying what failed and what to do in a per-thread buffer, so that the
 * plugin, the server and the CLI can show it.  The buffer is per thread
 * because nbdkit serves one pool from many threads at once; it is the only
 * engine state that is not reached through a handle.
 */
void cairn_error (const char *fmt, ...) CAIRN_PRINTF (1, 2);
void cairn_verror (const char *fmt, va_list ap) CAIRN_PRINTF (1, 0);
/* The last message set on this thread ("" if none). */
const char *cairn_errmsg (void);
/* Forget the last message. */
void cairn_error_clear (void);

/* Set an error message and return -err: `return cairn_fail (-EIO, "...")`. */
int cairn_fail (int err, const char *fmt, ...) CAIRN_PRINTF (2, 3);

/* UUIDs (uuid.c).  Format one as 36 characters plus NUL; make a random
 * (version 4) one as RFC 4122 spells it, so tools that parse UUIDs take
 * it: 0, or a negative errno with the message set.
 */
void uuid_format (const uint8_t uuid[16], char out[37]);
int uuid_generate (uint8_t uuid[16]) CAIRN_WUR;

#endif /* CAIRN_UTIL_H */
