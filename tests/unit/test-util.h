/* Helpers shared by the unit tests: seeds, scale, a small PRNG and a
 * poll for a condition another thread makes true.
 *
 * Randomised tests take their seed from CAIRN_TEST_SEED (a number, or
 * "random" for a fresh one), else a fixed default so that CI is
 * repeatable; they print it so that any failure can be replayed.
 */
#ifndef CAIRN_TEST_UTIL_H
#define CAIRN_TEST_UTIL_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The work multiplier of long randomised tests: CAIRN_TEST_SCALE (a
 * positive number such as 20 for bug hunts far longer than CI's runs, or
 * 0.1), else the build's default, CAIRN_TEST_SCALE_DEFAULT from configure:
 * 1 in a normal build, a fraction in sanitizer builds (configure.ac says
 * why).  A seed replays in the same build, or with the same scale.
 */
static inline double
test_scale (void)
{
  const char *s = getenv ("CAIRN_TEST_SCALE");
  double n = s && *s ? strtod (s, NULL) : CAIRN_TEST_SCALE_DEFAULT;

  return n > 0 && n <= 100000 ? n : CAIRN_TEST_SCALE_DEFAULT;
}

/* n units of a randomised test's work (rounds, operations, cuts) at
 * test_scale (), and at least one.
 */
static inline unsigned
test_work (unsigned n)
{
  double w = n * test_scale () + 0.5;

  return w < 1 ? 1 : w > UINT32_MAX ? UINT32_MAX : (unsigned) w;
}

/* n units of work, never fewer, more at a CAIRN_TEST_SCALE above 1: for
 * a test whose assertions need all of its work (a sanitizer build's
 * fraction would prove nothing).
 */
static inline unsigned
test_work_full (unsigned n)
{
  unsigned w = test_work (n);

  return w < n ? n : w;
}

/* The seed for a randomised test, printed with the test's name (and the
 * scale, where it is not 1: what a replay needs outside this build).
 */
static inline uint64_t
test_seed (const char *name, uint64_t fallback)
{
  const char *s = getenv ("CAIRN_TEST_SEED");
  uint64_t seed = fallback;

  if (s && strcmp (s, "random") == 0)
    seed = (uint64_t) time (NULL) ^ ((uint64_t) clock () << 32);
  else if (s && *s)
    seed = strtoull (s, NULL, 0);
  if (test_scale () == 1)
    fprintf (stderr, "%s: seed %" PRIu64 " (replay with CAIRN_TEST_SEED=%"
             PRIu64 ")\n", name, seed, seed);
  else
    fprintf (stderr, "%s: seed %" PRIu64 " (replay with CAIRN_TEST_SEED=%"
             PRIu64 " CAIRN_TEST_SCALE=%g)\n", name, seed, seed, test_scale ());
  return seed;
}

/* splitmix64: small, fast, seedable. */
struct rng {
  uint64_t s;
};

static inline uint64_t
rng_next (struct rng *r)
{
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A number in [0, n). */
static inline uint64_t
rng_below (struct rng *r, uint64_t n)
{
  return n ? rng_next (r) % n : 0;
}

/* Fill buf with bytes determined by tag alone. */
static inline void
fill_pattern (void *buf, size_t len, uint64_t tag)
{
  struct rng r = { tag * 0x2545f4914f6cdd1dull + 1 };
  uint8_t *p = buf;

  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = rng_next (&r);
    memcpy (p + i, &v, len - i < 8 ? len - i : 8);
  }
}

/* Poll cond every 10 ms, for 10 s at most; the caller asserts it after. */
#define WAIT_UNTIL(cond)                                                \
  do {                                                                  \
    for (int waited_ = 0; waited_ < 1000 && !(cond); waited_++)         \
      usleep (10000);                                                   \
  } while (0)

#endif /* CAIRN_TEST_UTIL_H */
