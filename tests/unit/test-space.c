/* Unit tests for the space layer: the rangeset (coalescing, splitting,
 * overlap errors, the augmented search, a randomised test against a bitmap)
 * and the allocator (placement, ENOSPC, the reserve, deferred and
 * immediate frees, net deltas, the commit pipeline, loading, a randomised
 * test against a per-block model, and engine bugs that must abort).
 *
 * The randomised tests print their seed; set CAIRN_TEST_SEED to replay one.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "rangeset.h"
#include "space.h"

/* ------------------------------------------------------------ helpers */

/* A splitmix64 generator: small, fast and seedable. */
struct rng {
  uint64_t s;
};

/* Next 64 random bits. */
static uint64_t
rng_next (struct rng *r)
{
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* A random number in [0, n). */
static uint64_t
rng_below (struct rng *r, uint64_t n)
{
  return rng_next (r) % n;
}

/* The seed for a randomised test: CAIRN_TEST_SEED, else time and pid;
 * printed so that a failure can be replayed.
 */
static uint64_t
test_seed (const char *test)
{
  const char *env = getenv ("CAIRN_TEST_SEED");
  uint64_t seed;

  if (env && *env)
    seed = strtoull (env, NULL, 0);
  else
    seed = (uint64_t)time (NULL) * 1000003u ^ (uint64_t)getpid ();
  fprintf (stderr,
           "%s: seed %" PRIu64 " (replay with CAIRN_TEST_SEED=%" PRIu64 ")\n",
           test, seed, seed);
  return seed;
}

/* Ranges collected from a foreach callback. */
struct runs {
  struct space_range v[64];
  size_t n;
  size_t stop_after; /* return 7 after this many (0: never) */
};

/* foreach callback: collect a range. */
static int
collect (void *opaque, uint64_t start, uint64_t len)
{
  struct runs *rr = opaque;

  cr_assert_lt (rr->n, ARRAY_SIZE (rr->v), "too many runs for the test");
  rr->v[rr->n].start = start;
  rr->v[rr->n].len = len;
  rr->n++;
  if (rr->stop_after && rr->n == rr->stop_after)
    return 7;
  return 0;
}

/* Assert that a rangeset holds exactly the n ranges given as start, len
 * pairs, and that its invariants hold.
 */
static void
expect_set (const struct rangeset *rs, size_t n, const uint64_t *pairs)
{
  struct runs rr = { .n = 0 };
  uint64_t total = 0;

  cr_assert_eq (rangeset_check (rs), 0, "%s", cairn_errmsg ());
  cr_assert_eq (rangeset_foreach (rs, collect, &rr), 0);
  cr_assert_eq (rr.n, n, "set has %zu ranges, expected %zu", rr.n, n);
  for (size_t i = 0; i < n; i++) {
    cr_assert_eq (rr.v[i].start, pairs[2 * i],
                  "range %zu start %" PRIu64 ", expected %" PRIu64, i,
                  rr.v[i].start, pairs[2 * i]);
    cr_assert_eq (rr.v[i].len, pairs[2 * i + 1],
                  "range %zu len %" PRIu64 ", expected %" PRIu64, i,
                  rr.v[i].len, pairs[2 * i + 1]);
    total += pairs[2 * i + 1];
  }
  cr_assert_eq (rangeset_count (rs), n);
  cr_assert_eq (rangeset_total (rs), total);
}

#define EXPECT_SET(rs, ...)                                                    \
  do {                                                                         \
    const uint64_t pairs_[] = { __VA_ARGS__ };                                 \
    expect_set ((rs), ARRAY_SIZE (pairs_) / 2, pairs_);                        \
  } while (0)
#define EXPECT_EMPTY(rs) expect_set ((rs), 0, NULL)

/* Add a range that must be accepted. */
static void
add_ok (struct rangeset *rs, uint64_t start, uint64_t len)
{
  int r = rangeset_add (rs, start, len);

  cr_assert_eq (r, 0, "add [%" PRIu64 ", +%" PRIu64 "): %d %s", start, len, r,
                cairn_errmsg ());
}

/* Remove a range that must be present. */
static void
remove_ok (struct rangeset *rs, uint64_t start, uint64_t len)
{
  int r = rangeset_remove (rs, start, len);

  cr_assert_eq (r, 0, "remove [%" PRIu64 ", +%" PRIu64 "): %d %s", start, len,
                r, cairn_errmsg ());
}

/* ------------------------------------------------------------ rangeset */

Test (rangeset, coalesce_on_add)
{
  struct rangeset rs;

  rangeset_init (&rs);
  EXPECT_EMPTY (&rs);
  add_ok (&rs, 10, 10);
  add_ok (&rs, 30, 10);
  EXPECT_SET (&rs, 10, 10, 30, 10);
  add_ok (&rs, 20, 10); /* fills the gap: both sides */
  EXPECT_SET (&rs, 10, 30);
  add_ok (&rs, 5, 5); /* left of the range */
  EXPECT_SET (&rs, 5, 35);
  add_ok (&rs, 40, 1); /* right of the range */
  EXPECT_SET (&rs, 5, 36);
  add_ok (&rs, 0, 4); /* a gap of one block stays */
  add_ok (&rs, 42, 3);
  EXPECT_SET (&rs, 0, 4, 5, 36, 42, 3);
  add_ok (&rs, 4, 1);
  add_ok (&rs, 41, 1);
  EXPECT_SET (&rs, 0, 45);
  /* Ranges touching the ends of the number space. */
  add_ok (&rs, UINT64_MAX - 10, 10);
  add_ok (&rs, UINT64_MAX - 20, 10);
  EXPECT_SET (&rs, 0, 45, UINT64_MAX - 20, 20);
  rangeset_destroy (&rs);
  EXPECT_EMPTY (&rs);
}

Test (rangeset, overlap_is_eexist)
{
  struct rangeset rs;

  rangeset_init (&rs);
  add_ok (&rs, 100, 100);
  add_ok (&rs, 300, 10);
  cr_assert_eq (rangeset_add (&rs, 100, 100), -EEXIST);
  cr_assert_eq (rangeset_add (&rs, 150, 1), -EEXIST);   /* inside */
  cr_assert_eq (rangeset_add (&rs, 90, 11), -EEXIST);   /* left edge */
  cr_assert_eq (rangeset_add (&rs, 199, 5), -EEXIST);   /* right edge */
  cr_assert_eq (rangeset_add (&rs, 50, 500), -EEXIST);  /* covers both */
  cr_assert_eq (rangeset_add (&rs, 200, 101), -EEXIST); /* gap + next */
  cr_assert (strstr (cairn_errmsg (), "overlaps") != NULL, "%s",
             cairn_errmsg ());
  cr_assert_eq (rangeset_add (&rs, 5, 0), -EINVAL);
  cr_assert_eq (rangeset_add (&rs, UINT64_MAX - 1, 2), -EINVAL);
  EXPECT_SET (&rs, 100, 100, 300, 10);
  rangeset_destroy (&rs);
}

Test (rangeset, remove_splits)
{
  struct rangeset rs;

  rangeset_init (&rs);
  add_ok (&rs, 0, 100);
  remove_ok (&rs, 10, 10); /* middle: split */
  EXPECT_SET (&rs, 0, 10, 20, 80);
  remove_ok (&rs, 0, 5); /* prefix */
  EXPECT_SET (&rs, 5, 5, 20, 80);
  remove_ok (&rs, 90, 10); /* suffix */
  EXPECT_SET (&rs, 5, 5, 20, 70);
  remove_ok (&rs, 5, 5); /* whole range */
  EXPECT_SET (&rs, 20, 70);

  cr_assert_eq (rangeset_remove (&rs, 10, 15), -ENOENT); /* partly out */
  cr_assert_eq (rangeset_remove (&rs, 85, 10), -ENOENT);
  cr_assert_eq (rangeset_remove (&rs, 0, 1), -ENOENT); /* absent */
  cr_assert_eq (rangeset_remove (&rs, 1000, 1), -ENOENT);
  add_ok (&rs, 100, 10);
  cr_assert_eq (rangeset_remove (&rs, 80, 30), -ENOENT); /* spans a gap */
  cr_assert_eq (rangeset_remove (&rs, 30, 0), -EINVAL);
  EXPECT_SET (&rs, 20, 70, 100, 10);
  rangeset_destroy (&rs);
}

Test (rangeset, contains_and_overlaps)
{
  struct rangeset rs;

  rangeset_init (&rs);
  add_ok (&rs, 10, 10);
  add_ok (&rs, 30, 10);
  cr_assert (rangeset_contains (&rs, 10, 10));
  cr_assert (rangeset_contains (&rs, 12, 3));
  cr_assert (rangeset_contains (&rs, 39, 1));
  cr_assert_not (rangeset_contains (&rs, 9, 2));
  cr_assert_not (rangeset_contains (&rs, 15, 20)); /* spans gap */
  cr_assert_not (rangeset_contains (&rs, 40, 1));
  cr_assert_not (rangeset_contains (&rs, 10, 0));
  cr_assert (rangeset_overlaps (&rs, 0, 11));
  cr_assert (rangeset_overlaps (&rs, 19, 100));
  cr_assert (rangeset_overlaps (&rs, 25, 6));
  cr_assert_not (rangeset_overlaps (&rs, 20, 10));
  cr_assert_not (rangeset_overlaps (&rs, 0, 10));
  cr_assert_not (rangeset_overlaps (&rs, 40, UINT64_MAX - 40));
  cr_assert (rangeset_overlaps (&rs, 35, UINT64_MAX)); /* clipped */
  cr_assert_not (rangeset_overlaps (&rs, 10, 0));
  rangeset_destroy (&rs);
}

Test (rangeset, find_uses_runs_at_or_after_hint)
{
  struct rangeset rs;
  uint64_t pos;

  rangeset_init (&rs);
  add_ok (&rs, 0, 2);
  add_ok (&rs, 10, 5);
  add_ok (&rs, 20, 10);
  add_ok (&rs, 100, 100);

  cr_assert (rangeset_find (&rs, 5, 0, &pos));
  cr_assert_eq (pos, 10);
  cr_assert (rangeset_find (&rs, 2, 0, &pos));
  cr_assert_eq (pos, 0);
  cr_assert (rangeset_find (&rs, 1, 1, &pos)); /* inside a range */
  cr_assert_eq (pos, 1);
  cr_assert (rangeset_find (&rs, 3, 11, &pos)); /* from hint on */
  cr_assert_eq (pos, 11);
  cr_assert (rangeset_find (&rs, 5, 12, &pos)); /* [12,15) too short */
  cr_assert_eq (pos, 20);
  cr_assert (rangeset_find (&rs, 11, 0, &pos));
  cr_assert_eq (pos, 100);
  cr_assert (rangeset_find (&rs, 1, 199, &pos));
  cr_assert_eq (pos, 199);
  cr_assert_not (rangeset_find (&rs, 1, 200, &pos));
  cr_assert_not (rangeset_find (&rs, 101, 0, &pos));
  cr_assert_not (rangeset_find (&rs, 0, 0, &pos));
  rangeset_destroy (&rs);
}

Test (rangeset, find_large_tree_matches_scan)
{
  /* Many ranges of varied length, so the search must use the subtree
   * maxima; compare with a linear scan for many (n, hint) pairs.
   */
  enum { N = 5000 };
  static uint64_t starts[N], lens[N];
  struct rangeset rs;
  struct rng r = { .s = 42 };
  uint64_t pos = 0;

  rangeset_init (&rs);
  for (size_t i = 0; i < N; i++) {
    pos += 1 + rng_below (&r, 50); /* gap */
    starts[i] = pos;
    lens[i] = 1
              + (rng_below (&r, 100) == 0 ? rng_below (&r, 500)
                                          : rng_below (&r, 20));
    pos += lens[i];
  }
  /* Insert in a scrambled order to exercise rotations both ways. */
  for (size_t i = 0; i < N; i++) {
    size_t j = (i * 7919) % N;
    add_ok (&rs, starts[j], lens[j]);
  }
  cr_assert_eq (rangeset_check (&rs), 0, "%s", cairn_errmsg ());
  cr_assert_eq (rangeset_count (&rs), N);

  for (int t = 0; t < 2000; t++) {
    uint64_t n = 1 + rng_below (&r, 520);
    uint64_t hint = rng_below (&r, pos + 10);
    bool expect = false;
    uint64_t want = 0, got;

    for (size_t i = 0; i < N; i++) {
      uint64_t s = MAX (starts[i], hint);
      if (s < starts[i] + lens[i] && starts[i] + lens[i] - s >= n) {
        expect = true;
        want = s;
        break;
      }
    }
    cr_assert_eq (rangeset_find (&rs, n, hint, &got), expect,
                  "find n=%" PRIu64 " hint=%" PRIu64, n, hint);
    if (expect)
      cr_assert_eq (got, want,
                    "find n=%" PRIu64 " hint=%" PRIu64 ": got %" PRIu64
                    ", expected %" PRIu64,
                    n, hint, got, want);
  }
  rangeset_destroy (&rs);
}

Test (rangeset, next)
{
  struct rangeset rs;
  uint64_t s, l;

  rangeset_init (&rs);
  cr_assert_not (rangeset_next (&rs, 0, &s, &l));
  add_ok (&rs, 10, 10);
  add_ok (&rs, 30, 10);
  cr_assert (rangeset_next (&rs, 0, &s, &l));
  cr_assert (s == 10 && l == 10);
  cr_assert (rangeset_next (&rs, 15, &s, &l)); /* containing */
  cr_assert (s == 10 && l == 10);
  cr_assert (rangeset_next (&rs, 20, &s, &l)); /* end is exclusive */
  cr_assert (s == 30 && l == 10);
  cr_assert_not (rangeset_next (&rs, 40, &s, &l));
  cr_assert_not (rangeset_next (&rs, UINT64_MAX, &s, &l));
  rangeset_destroy (&rs);
}

Test (rangeset, foreach_order_and_stop)
{
  struct rangeset rs;
  struct runs rr = { .n = 0, .stop_after = 2 };

  rangeset_init (&rs);
  for (uint64_t i = 10; i > 0; i--)
    add_ok (&rs, i * 10, 5);
  cr_assert_eq (rangeset_foreach (&rs, collect, &rr), 7);
  cr_assert_eq (rr.n, 2);
  cr_assert (rr.v[0].start == 10 && rr.v[1].start == 20);
  rangeset_destroy (&rs);
}

Test (rangeset, merge)
{
  struct rangeset a, b;

  rangeset_init (&a);
  rangeset_init (&b);
  add_ok (&a, 0, 10);
  add_ok (&a, 30, 10);
  add_ok (&b, 10, 5);
  add_ok (&b, 20, 10);
  add_ok (&b, 50, 1);
  cr_assert_eq (rangeset_merge (&a, &b), 0, "%s", cairn_errmsg ());
  EXPECT_SET (&a, 0, 15, 20, 20, 50, 1);
  EXPECT_EMPTY (&b);

  add_ok (&b, 45, 2);
  add_ok (&b, 50, 1); /* overlaps a: dropped */
  cr_assert_eq (rangeset_merge (&a, &b), -EEXIST);
  EXPECT_SET (&a, 0, 15, 20, 20, 45, 2, 50, 1);
  EXPECT_EMPTY (&b);
  rangeset_destroy (&a);
  rangeset_destroy (&b);
}

Test (rangeset, stays_balanced)
{
  /* Sequential inserts are the worst case for an unbalanced tree. */
  struct rangeset rs;

  rangeset_init (&rs);
  for (uint64_t i = 0; i < 100000; i++)
    add_ok (&rs, 2 * i, 1);
  cr_assert_eq (rangeset_check (&rs), 0, "%s", cairn_errmsg ());
  cr_assert_eq (rangeset_count (&rs), 100000);
  for (uint64_t i = 0; i < 100000; i += 2)
    add_ok (&rs, 2 * i + 1, 1); /* coalesce pairs */
  cr_assert_eq (rangeset_check (&rs), 0, "%s", cairn_errmsg ());
  cr_assert_eq (rangeset_count (&rs), 50000);
  rangeset_destroy (&rs);
}

/* The bitmap model of a rangeset for the randomised test. */
#define UNIVERSE 65536

/* Are all bits of [s, s + l) equal to v? */
static bool
all_bits (const uint8_t *bits, uint64_t s, uint64_t l, uint8_t v)
{
  for (uint64_t i = s; i < s + l; i++)
    if (bits[i] != v)
      return false;
  return true;
}

/* Compare the whole set with the model. */
static void
compare_with_bitmap (const struct rangeset *rs, const uint8_t *bits,
                     uint64_t seed, int op)
{
  uint64_t pos = 0, s, l, count = 0, total = 0;

  cr_assert_eq (rangeset_check (rs), 0, "seed %" PRIu64 " op %d: %s", seed, op,
                cairn_errmsg ());
  while (pos < UNIVERSE) {
    if (!bits[pos]) {
      pos++;
      continue;
    }
    for (l = 0; pos + l < UNIVERSE && bits[pos + l]; l++)
      ;
    cr_assert (rangeset_contains (rs, pos, l),
               "seed %" PRIu64 " op %d:"
               " run [%" PRIu64 ", +%" PRIu64 ") missing",
               seed, op, pos, l);
    cr_assert (rangeset_next (rs, pos, &s, &l) && s == pos,
               "seed %" PRIu64 " op %d: run at %" PRIu64 " not a range", seed,
               op, pos);
    count++;
    total += l;
    pos += l;
  }
  cr_assert_eq (rangeset_count (rs), count, "seed %" PRIu64 " op %d", seed, op);
  cr_assert_eq (rangeset_total (rs), total, "seed %" PRIu64 " op %d", seed, op);
}

Test (rangeset, random_against_bitmap, .timeout = 120)
{
  uint64_t seed = test_seed ("rangeset/random_against_bitmap");
  struct rng r = { .s = seed };
  uint8_t *bits = calloc (UNIVERSE, 1);
  uint64_t total = 0;
  struct rangeset rs;

  cr_assert_not_null (bits);
  rangeset_init (&rs);
  rangeset_set_chunk (&rs, 4);    /* rangeset_check recounts chunked */
  for (int op = 0; op < 100000; op++) {
    uint64_t kind = rng_below (&r, 100);
    uint64_t l
        = 1
          + (rng_below (&r, 4) == 0 ? rng_below (&r, 256) : rng_below (&r, 8));
    uint64_t s = rng_below (&r, UNIVERSE - l + 1);
    uint64_t got, gl;

    if (kind < 35) { /* add */
      bool ok = all_bits (bits, s, l, 0);
      int ret = rangeset_add (&rs, s, l);

      cr_assert_eq (ret, ok ? 0 : -EEXIST,
                    "seed %" PRIu64 " op %d: add [%" PRIu64 ", +%" PRIu64
                    ") gave %d",
                    seed, op, s, l, ret);
      if (ok) {
        memset (bits + s, 1, l);
        total += l;
      }
    } else if (kind < 65) { /* remove, often a real sub-range */
      bool ok;
      int ret;

      if (kind < 55 && bits[s]) {
        uint64_t e = s;
        while (e < UNIVERSE && bits[e] && e - s < l)
          e++;
        l = e - s;
      }
      ok = all_bits (bits, s, l, 1);
      ret = rangeset_remove (&rs, s, l);
      cr_assert_eq (ret, ok ? 0 : -ENOENT,
                    "seed %" PRIu64 " op %d: remove"
                    " [%" PRIu64 ", +%" PRIu64 ") gave %d",
                    seed, op, s, l, ret);
      if (ok) {
        memset (bits + s, 0, l);
        total -= l;
      }
    } else if (kind < 75) { /* contains / overlaps */
      bool all = all_bits (bits, s, l, 1), none = all_bits (bits, s, l, 0);

      cr_assert_eq (rangeset_contains (&rs, s, l), all,
                    "seed %" PRIu64 " op %d: contains [%" PRIu64 ", +%" PRIu64
                    ")",
                    seed, op, s, l);
      cr_assert_eq (rangeset_overlaps (&rs, s, l), !none,
                    "seed %" PRIu64 " op %d: overlaps [%" PRIu64 ", +%" PRIu64
                    ")",
                    seed, op, s, l);
    } else if (kind < 92) { /* find n blocks from hint s */
      uint64_t run = 0, p;
      bool expect = false;

      for (p = s; p < UNIVERSE; p++) {
        run = bits[p] ? run + 1 : 0;
        if (run == l) {
          expect = true;
          break;
        }
      }
      cr_assert_eq (rangeset_find (&rs, l, s, &got), expect,
                    "seed %" PRIu64 " op %d: find n=%" PRIu64 " hint=%" PRIu64,
                    seed, op, l, s);
      if (expect)
        cr_assert_eq (got, p + 1 - l,
                      "seed %" PRIu64 " op %d: find n=%" PRIu64 " hint=%" PRIu64
                      " gave %" PRIu64 ", expected %" PRIu64,
                      seed, op, l, s, got, p + 1 - l);
    } else { /* next from s */
      uint64_t a = s, e;
      bool expect;

      if (bits[a])
        while (a > 0 && bits[a - 1])
          a--;
      else
        while (a < UNIVERSE && !bits[a])
          a++;
      expect = a < UNIVERSE;
      cr_assert_eq (rangeset_next (&rs, s, &got, &gl), expect,
                    "seed %" PRIu64 " op %d: next %" PRIu64, seed, op, s);
      if (expect) {
        for (e = a; e < UNIVERSE && bits[e]; e++)
          ;
        cr_assert (got == a && gl == e - a,
                   "seed %" PRIu64 " op %d: next %" PRIu64 " gave [%" PRIu64
                   ", +%" PRIu64 "), expected [%" PRIu64 ", %" PRIu64 ")",
                   seed, op, s, got, gl, a, e);
      }
    }
    cr_assert_eq (rangeset_total (&rs), total, "seed %" PRIu64 " op %d", seed,
                  op);
    if (op % 2000 == 0)
      compare_with_bitmap (&rs, bits, seed, op);
  }
  compare_with_bitmap (&rs, bits, seed, -1);
  rangeset_destroy (&rs);
  free (bits);
}

/* ------------------------------------------------------------ allocator */

/* Create a space map that must succeed. */
static struct space *
mk (uint64_t base, uint64_t end, uint64_t reserve, uint64_t gen)
{
  struct space *sp = NULL;
  int r = space_create (base, end, reserve, gen, &sp);

  cr_assert_eq (r, 0, "space_create: %s", cairn_errmsg ());
  return sp;
}

/* Allocate exactly len blocks; expect the given start. */
static void
alloc_at (struct space *sp, uint64_t len, uint64_t hint, unsigned flags,
          uint64_t expect)
{
  uint64_t start = 0;
  int r = space_alloc (sp, len, hint, flags, &start);

  cr_assert_eq (r, 0, "alloc %" PRIu64 " hint %" PRIu64 ": %d %s", len, hint, r,
                cairn_errmsg ());
  cr_assert_eq (start, expect,
                "alloc %" PRIu64 " hint %" PRIu64 " gave %" PRIu64
                ", expected %" PRIu64,
                len, hint, start, expect);
}

/* Freeze and return the delta (caller frees). */
static struct space_delta *
freeze (struct space *sp)
{
  struct space_delta *d = NULL;
  int r = space_freeze (sp, &d);

  cr_assert_eq (r, 0, "freeze: %s", cairn_errmsg ());
  cr_assert_not_null (d);
  return d;
}

/* Assert a delta array equals the n start, len pairs. */
static void
expect_ranges (const struct space_range *v, size_t nv, size_t n,
               const uint64_t *pairs, const char *what)
{
  cr_assert_eq (nv, n, "%s: %zu ranges, expected %zu", what, nv, n);
  for (size_t i = 0; i < n; i++)
    cr_assert (v[i].start == pairs[2 * i] && v[i].len == pairs[2 * i + 1],
               "%s[%zu] = [%" PRIu64 ", +%" PRIu64 "), expected [%" PRIu64
               ", +%" PRIu64 ")",
               what, i, v[i].start, v[i].len, pairs[2 * i], pairs[2 * i + 1]);
}

#define EXPECT_RANGES(v, nv, what, ...)                                        \
  do {                                                                         \
    const uint64_t pairs_[] = { 0, __VA_ARGS__ };                              \
    expect_ranges ((v), (nv), (ARRAY_SIZE (pairs_) - 1) / 2, pairs_ + 1,       \
                   (what));                                                    \
  } while (0)

/* Assert the counters. */
static void
expect_stats (struct space *sp, uint64_t free, uint64_t pending,
              uint64_t extents)
{
  struct space_stats st;

  space_stats (sp, &st);
  cr_assert_eq (st.free, free, "free %" PRIu64 ", expected %" PRIu64, st.free,
                free);
  cr_assert_eq (st.pending, pending, "pending %" PRIu64 ", expected %" PRIu64,
                st.pending, pending);
  cr_assert_eq (st.allocated, st.total - free - pending);
  cr_assert_eq (st.extents, extents, "extents %" PRIu64 ", expected %" PRIu64,
                st.extents, extents);
}

Test (space, create_rejects_bad_geometry)
{
  struct space *sp = NULL;

  cr_assert_eq (space_create (10, 10, 0, 1, &sp), -EINVAL);
  cr_assert_eq (space_create (10, 5, 0, 1, &sp), -EINVAL);
  cr_assert_eq (space_create (0, 10, 11, 1, &sp), -EINVAL);
  cr_assert_null (sp);
}

Test (space, alloc_first_fit_and_wrap)
{
  struct space *sp = mk (100, 1100, 0, 1);
  struct space_stats st;

  space_stats (sp, &st);
  cr_assert_eq (st.touched, 0, "a new map has written nothing");
  alloc_at (sp, 10, 0, 0, 100); /* hint 0 is outside: base */
  alloc_at (sp, 10, 0, 0, 110);
  /* Nothing free below the high water (120): first fit from the hint. */
  alloc_at (sp, 10, 500, 0, 500);
  /* No room at the hint below the high water (510): the first fit below
   * it from base, before space never written.
   */
  alloc_at (sp, 5, 505, 0, 120);
  alloc_at (sp, 5, 130, 0, 130);    /* hint inside a free run below it */
  alloc_at (sp, 100, 1050, 0, 135); /* hint above it: below it first */
  alloc_at (sp, 50, 1050, 0, 235);
  alloc_at (sp, 1, 1099, 0, 125);
  alloc_at (sp, 1, 5000, 0, 126);   /* hint past end: base */
  space_stats (sp, &st);
  cr_assert_eq (st.touched, 410, "high water %" PRIu64, st.touched);
  /* No run below the high water is long enough: above it, from the hint
   * and then from base (wrapping).
   */
  alloc_at (sp, 250, 600, 0, 600);
  alloc_at (sp, 240, 1050, 0, 850);
  space_stats (sp, &st);
  cr_assert_eq (st.touched, 990);
  cr_assert_eq (st.total, 1000);
  cr_assert_eq (st.reserve, 0);
  cr_assert_eq (st.allocated, 10 + 10 + 10 + 5 + 5 + 100 + 50 + 2 + 250 + 240);
  cr_assert_eq (space_alloc (sp, 0, 0, 0, &st.free), -EINVAL);
  space_destroy (sp);
}

/* What the high water is for: after random overwrites released single
 * blocks, the reuse hint points at them; a large write that finds no run
 * there takes a freed run elsewhere rather than space never written (whose
 * page-cache pages, or a sparse file's blocks, are new).  After a load the
 * high water is the end of the last allocated block.
 */
Test (space, large_allocations_reuse_before_growing)
{
  struct space *sp = mk (0, 10000, 0, 1);
  struct space_stats st;
  uint64_t start;

  alloc_at (sp, 1000, 0, 0, 0);          /* a prefill */
  space_delta_free (freeze (sp));        /* gen 2 open */
  space_free (sp, 100, 256, 1);          /* a sequential overwrite ... */
  space_delta_free (freeze (sp));        /* gen 3 open */
  space_gen_durable (sp, 2);
  space_free (sp, 600, 1, 1);            /* ... then random ones */
  space_free (sp, 700, 1, 1);
  space_delta_free (freeze (sp));        /* gen 4 open */
  space_gen_durable (sp, 3);
  space_reuse_hint (sp, &start);
  cr_assert_eq (start, 600, "the last release's lowest block: %" PRIu64, start);
  alloc_at (sp, 256, start, 0, 100);
  alloc_at (sp, 1, start, 0, 600);
  alloc_at (sp, 256, 601, 0, 1000);      /* nothing left below: grow */
  space_stats (sp, &st);
  cr_assert_eq (st.touched, 1256);
  space_destroy (sp);

  sp = mk (0, 10000, 0, 1);
  cr_assert_eq (space_load_alloc (sp, 0, 10000), 0);
  cr_assert_eq (space_load_free (sp, 100, 256), 0);
  cr_assert_eq (space_load_free (sp, 5000, 5000), 0);
  space_stats (sp, &st);
  cr_assert_eq (st.touched, 5000, "high water after a load %" PRIu64,
                st.touched);
  alloc_at (sp, 256, 6000, 0, 100);
  alloc_at (sp, 256, 6000, 0, 6000);
  space_stats (sp, &st);
  cr_assert_eq (st.touched, 6256);
  space_destroy (sp);
}

Test (space, enospc_without_contiguous_run)
{
  struct space *sp = mk (0, 1000, 0, 1);
  uint64_t start, len;

  for (uint64_t i = 0; i < 1000; i++)
    alloc_at (sp, 1, i, 0, i);
  cr_assert_eq (space_alloc (sp, 1, 0, 0, &start), -ENOSPC);
  for (uint64_t i = 0; i < 1000; i += 2)
    space_free (sp, i, 1, 1); /* same gen: free at once */
  expect_stats (sp, 500, 0, 500);
  cairn_error_clear ();
  cr_assert_eq (space_alloc (sp, 2, 0, 0, &start), -ENOSPC);
  cr_assert (strstr (cairn_errmsg (), "contiguous") != NULL, "%s",
             cairn_errmsg ());
  alloc_at (sp, 1, 0, 0, 0);
  cr_assert_eq (space_alloc_upto (sp, 8, 0, 0, &start, &len), 0);
  cr_assert (start == 2 && len == 1);
  space_destroy (sp);
}

Test (space, map_memory_follows_the_runs)
{
  struct space *sp = mk (0, 1000, 0, 1);
  struct space_stats one, many, back;

  space_stats (sp, &one);
  for (uint64_t i = 0; i < 1000; i++)
    alloc_at (sp, 1, i, 0, i);
  for (uint64_t i = 0; i < 1000; i += 2)
    space_free (sp, i, 1, 1);
  space_stats (sp, &many);
  cr_assert_eq (many.extents, 500);
  /* A node holds at least a start, a length and two links. */
  cr_assert_geq (many.map_bytes, one.map_bytes + 499 * 4 * sizeof (uint64_t),
                 "%" PRIu64 " bytes for 500 runs, %" PRIu64 " for one",
                 many.map_bytes, one.map_bytes);
  for (uint64_t i = 0; i < 1000; i += 2)
    alloc_at (sp, 1, i, 0, i);
  space_stats (sp, &back);
  cr_assert_eq (back.extents, 0);
  cr_assert_lt (back.map_bytes, many.map_bytes / 10,
                "%" PRIu64 " bytes with no run left", back.map_bytes);
  space_destroy (sp);
}

Test (space, reserve_needs_flag)
{
  struct space *sp = mk (0, 100, 10, 1);
  uint64_t start, len;

  alloc_at (sp, 80, 0, 0, 0);
  cr_assert_eq (space_alloc (sp, 11, 0, 0, &start), -ENOSPC);
  cr_assert (strstr (cairn_errmsg (), "reserve") != NULL, "%s",
             cairn_errmsg ());
  alloc_at (sp, 10, 0, 0, 80); /* leaves exactly the reserve */
  cr_assert_eq (space_alloc (sp, 1, 0, 0, &start), -ENOSPC);
  cr_assert_eq (space_alloc_upto (sp, 5, 0, 0, &start, &len), -ENOSPC);
  alloc_at (sp, 1, 0, SPACE_RESERVE, 90);
  cr_assert_eq (space_alloc_upto (sp, 100, 0, SPACE_RESERVE, &start, &len), 0);
  cr_assert (start == 91 && len == 9);
  cr_assert_eq (space_alloc (sp, 1, 0, SPACE_RESERVE, &start), -ENOSPC);
  space_destroy (sp);
}

/* With node_blocks set, ordinary allocations stop once the free space a
 * node fits is down to the reserve, however many single blocks are free;
 * SPACE_RESERVE ones (deletes, commits) still get their nodes.
 */
Test (space, single_free_blocks_do_not_count_for_nodes)
{
  struct space *sp = mk (0, 200, 8, 1);
  uint64_t start;

  space_set_node_blocks (sp, 4);
  alloc_at (sp, 200, 0, SPACE_RESERVE, 0);
  /* Free every other block of [0, 100): 50 free, in runs of 1. */
  for (uint64_t b = 0; b < 100; b += 2)
    space_free (sp, b, 1, 1);     /* born in this generation: free at once */
  cr_assert_eq (space_alloc (sp, 1, 0, 0, &start), -ENOSPC);
  cr_assert (strstr (cairn_errmsg (), "runs that a metadata node fits"),
             "%s", cairn_errmsg ());
  /* Room for nodes: 12 blocks in runs of 4, more than the reserve. */
  space_free (sp, 100, 4, 1);
  space_free (sp, 110, 4, 1);
  space_free (sp, 120, 4, 1);
  cr_assert_eq (space_alloc (sp, 1, 0, 0, &start), 0, "%s", cairn_errmsg ());
  /* That took a block out of a node-sized run or a single one; either
   * way a node still fits, for deletes.
   */
  cr_assert_eq (space_alloc (sp, 4, 0, SPACE_RESERVE, &start), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (start % 10, 0, "a node at %" PRIu64, start);
  space_destroy (sp);
}

Test (space, alloc_upto_placement)
{
  struct space *sp = mk (0, 100, 0, 1);
  uint64_t start, len;

  alloc_at (sp, 10, 40, 0, 40); /* free: [0,40) [50,100) */
  alloc_at (sp, 10, 10, 0, 10); /* free: [0,10) [20,40) [50,100) */
  cr_assert_eq (space_alloc_upto (sp, 100, 15, 0, &start, &len), 0);
  cr_assert (start == 20 && len == 20, "got [%" PRIu64 ", +%" PRIu64 ")", start,
             len);
  cr_assert_eq (space_alloc_upto (sp, 5, 60, 0, &start, &len), 0);
  cr_assert (start == 60 && len == 5); /* from hint inside a run */
  cr_assert_eq (space_alloc_upto (sp, 100, 99, 0, &start, &len), 0);
  cr_assert (start == 99 && len == 1);
  cr_assert_eq (space_alloc_upto (sp, 100, 99, 0, &start, &len), 0);
  cr_assert (start == 0 && len == 10); /* wraps */
  cr_assert_eq (space_alloc_upto (sp, 0, 0, 0, &start, &len), -EINVAL);
  space_destroy (sp);
}

Test (space, immediate_free_of_same_generation)
{
  struct space *sp = mk (0, 100, 0, 7);
  struct space_delta *d;

  alloc_at (sp, 10, 0, 0, 0);
  space_free (sp, 0, 10, 7);
  expect_stats (sp, 100, 0, 1);
  cr_assert_not (space_is_allocated (sp, 0, 1));
  alloc_at (sp, 10, 0, 0, 0); /* reusable at once */
  space_free (sp, 3, 4, 7);   /* part of it */
  alloc_at (sp, 4, 0, 0, 3);
  d = freeze (sp);
  cr_assert_eq (d->gen, 7);
  EXPECT_RANGES (d->alloc, d->nalloc, "alloc", 0, 10);
  EXPECT_RANGES (d->freed, d->nfreed, "freed");
  space_delta_free (d);
  cr_assert_eq (space_open_gen (sp), 8);
  space_destroy (sp);
}

Test (space, deferred_free_waits_for_durable)
{
  struct space *sp = mk (0, 20, 0, 1);
  struct space_delta *d;
  uint64_t start;

  alloc_at (sp, 20, 0, 0, 0);     /* gen 1 fills the pool */
  space_delta_free (freeze (sp)); /* gen 2 open */
  space_free (sp, 5, 5, 1);       /* born earlier: deferred */
  expect_stats (sp, 0, 5, 0);
  cr_assert_not (space_is_allocated (sp, 5, 1));
  cr_assert_eq (space_alloc (sp, 1, 0, SPACE_RESERVE, &start), -ENOSPC);
  d = freeze (sp); /* gen 3 open */
  cr_assert_eq (d->gen, 2);
  EXPECT_RANGES (d->alloc, d->nalloc, "alloc");
  EXPECT_RANGES (d->freed, d->nfreed, "freed", 5, 5);
  space_delta_free (d);
  cr_assert_eq (space_alloc (sp, 1, 0, 0, &start), -ENOSPC);
  space_gen_durable (sp, 1); /* older than the free: no effect */
  cr_assert_eq (space_alloc (sp, 1, 0, 0, &start), -ENOSPC);
  expect_stats (sp, 0, 5, 0);
  space_gen_durable (sp, 2);
  expect_stats (sp, 5, 0, 1);
  alloc_at (sp, 5, 0, 0, 5);
  space_destroy (sp);
}

Test (space, reuse_hint_follows_releases)
{
  struct space *sp = mk (0, 100, 0, 1);
  uint64_t start = 99, seq0, seq;

  seq0 = space_reuse_hint (sp, &start);
  cr_assert_eq (seq0, 0);
  alloc_at (sp, 60, 0, 0, 0);
  space_delta_free (freeze (sp));   /* gen 2 open */
  space_free (sp, 40, 5, 1);        /* deferred, in two generations */
  space_free (sp, 30, 2, 1);
  space_delta_free (freeze (sp));   /* gen 3 open */
  space_free (sp, 10, 1, 1);
  space_delta_free (freeze (sp));   /* gen 4 open */
  /* Nothing released yet: the hint has not moved. */
  cr_assert_eq (space_reuse_hint (sp, &start), seq0);
  space_gen_durable (sp, 2);
  seq = space_reuse_hint (sp, &start);
  cr_assert_neq (seq, seq0);
  cr_assert_eq (start, 30, "lowest block released by gen 2: %" PRIu64, start);
  /* A release with nothing to release leaves it alone. */
  space_gen_durable (sp, 2);
  cr_assert_eq (space_reuse_hint (sp, &start), seq);
  space_gen_durable (sp, 3);
  cr_assert_neq (space_reuse_hint (sp, &start), seq);
  cr_assert_eq (start, 10);
  alloc_at (sp, 1, start, 0, 10);   /* what the data allocator then does */
  space_destroy (sp);
}

Test (space, delta_is_net)
{
  struct space *sp = mk (0, 1000, 0, 1);
  struct space_delta *d;

  cr_assert_eq (space_load_alloc (sp, 500, 100), 0); /* old data */
  alloc_at (sp, 10, 0, 0, 0);
  alloc_at (sp, 10, 0, 0, 10);
  alloc_at (sp, 10, 0, 0, 20);
  space_free (sp, 10, 10, 1);  /* cancels out */
  space_free (sp, 25, 2, 1);   /* splits the alloc delta */
  space_free (sp, 510, 10, 0); /* old: freed delta */
  space_free (sp, 520, 5, 0);  /* coalesces in the freed delta */
  space_free (sp, 590, 10, 0);
  d = freeze (sp);
  cr_assert_eq (d->gen, 1);
  EXPECT_RANGES (d->alloc, d->nalloc, "alloc", 0, 10, 20, 5, 27, 3);
  EXPECT_RANGES (d->freed, d->nfreed, "freed", 510, 15, 590, 10);
  space_delta_free (d);

  /* The next generation starts with an empty delta. */
  d = freeze (sp);
  cr_assert_eq (d->gen, 2);
  cr_assert (d->nalloc == 0 && d->nfreed == 0);
  cr_assert (d->alloc == NULL && d->freed == NULL);
  space_delta_free (d);
  space_destroy (sp);
}

Test (space, pipeline_releases_only_durable_generations)
{
  struct space *sp = mk (0, 1000, 0, 10);
  struct space_delta *d;
  struct runs rr = { .n = 0 };

  cr_assert_eq (space_load_alloc (sp, 0, 300), 0); /* old data */
  /* Gen 10: allocate X, free old O1. */
  alloc_at (sp, 10, 300, 0, 300); /* X */
  space_free (sp, 0, 10, 9);      /* O1 */
  d = freeze (sp);                /* 10 frozen, I/O in flight */
  EXPECT_RANGES (d->alloc, d->nalloc, "alloc 10", 300, 10);
  EXPECT_RANGES (d->freed, d->nfreed, "freed 10", 0, 10);
  space_delta_free (d);

  /* Gen 11 open: allocate Y, free old O2 and X (born in 10). */
  alloc_at (sp, 5, 0, 0, 310);  /* Y */
  space_free (sp, 100, 10, 3);  /* O2 */
  space_free (sp, 300, 10, 10); /* X */
  expect_stats (sp, 1000 - 315, 30, 1);

  space_gen_durable (sp, 10); /* commit of 10 done */
  expect_stats (sp, 1000 - 315 + 10, 20, 2);
  cr_assert_not (space_is_allocated (sp, 0, 1));
  cr_assert_not (space_is_allocated (sp, 100, 1));
  cr_assert_not (space_is_allocated (sp, 300, 1));
  cr_assert (space_is_allocated (sp, 10, 90));
  alloc_at (sp, 10, 0, 0, 0); /* O1 reusable, O2 and X not */
  alloc_at (sp, 10, 95, 0, 315);

  cr_assert_eq (space_foreach_free (sp, false, collect, &rr), 0);
  EXPECT_RANGES (rr.v, rr.n, "free", 325, 675);
  rr.n = 0;
  cr_assert_eq (space_foreach_free (sp, true, collect, &rr), 0);
  EXPECT_RANGES (rr.v, rr.n, "free+pending", 100, 10, 300, 10, 325, 675);

  d = freeze (sp);
  cr_assert_eq (d->gen, 11);
  EXPECT_RANGES (d->alloc, d->nalloc, "alloc 11", 0, 10, 310, 15);
  EXPECT_RANGES (d->freed, d->nfreed, "freed 11", 100, 10, 300, 10);
  space_delta_free (d);
  space_gen_durable (sp, 11);
  expect_stats (sp, 1000 - 315 + 10 - 20 + 20, 0, 3);
  space_destroy (sp);
}

Test (space, durable_releases_several_generations)
{
  struct space *sp = mk (0, 100, 0, 1);

  cr_assert_eq (space_load_alloc (sp, 0, 100), 0);
  space_free (sp, 0, 10, 0); /* freed in 1 */
  space_delta_free (freeze (sp));
  space_free (sp, 20, 10, 0); /* freed in 2 */
  space_delta_free (freeze (sp));
  space_free (sp, 40, 10, 0); /* freed in 3 */
  space_delta_free (freeze (sp));
  space_free (sp, 60, 10, 0); /* freed in 4, still open */
  expect_stats (sp, 0, 40, 0);
  space_gen_durable (sp, 2);
  expect_stats (sp, 20, 20, 2);
  space_gen_durable (sp, 2); /* repeating is harmless */
  space_gen_durable (sp, 3);
  expect_stats (sp, 30, 10, 3);
  space_destroy (sp);
}

Test (space, is_allocated)
{
  struct space *sp = mk (10, 110, 0, 2);

  alloc_at (sp, 20, 0, 0, 10);
  cr_assert (space_is_allocated (sp, 10, 20));
  cr_assert (space_is_allocated (sp, 15, 1));
  cr_assert_not (space_is_allocated (sp, 10, 21)); /* one free */
  cr_assert_not (space_is_allocated (sp, 9, 2));   /* out of bounds */
  cr_assert_not (space_is_allocated (sp, 50, 1));
  cr_assert_not (space_is_allocated (sp, 10, 0));
  cr_assert_not (space_is_allocated (sp, UINT64_MAX, 2));
  space_delta_free (freeze (sp));
  space_free (sp, 12, 2, 2);
  cr_assert_not (space_is_allocated (sp, 13, 1)); /* pending */
  cr_assert (space_is_allocated (sp, 14, 16));
  space_destroy (sp);
}

Test (space, foreach_free_coalesces_and_stops)
{
  struct space *sp = mk (0, 100, 0, 5);
  struct runs rr = { .n = 0 };

  cr_assert_eq (space_load_alloc (sp, 0, 100), 0);
  cr_assert_eq (space_load_free (sp, 10, 10), 0);
  space_free (sp, 20, 5, 4); /* pending, touches free [10,20) */
  space_delta_free (freeze (sp));
  space_free (sp, 25, 5, 4); /* pending in another gen */
  space_free (sp, 50, 1, 4);
  cr_assert_eq (space_load_free (sp, 90, 10), 0);

  cr_assert_eq (space_foreach_free (sp, false, collect, &rr), 0);
  EXPECT_RANGES (rr.v, rr.n, "free", 10, 10, 90, 10);
  rr.n = 0;
  cr_assert_eq (space_foreach_free (sp, true, collect, &rr), 0);
  EXPECT_RANGES (rr.v, rr.n, "with pending", 10, 20, 50, 1, 90, 10);
  rr.n = 0;
  rr.stop_after = 2;
  cr_assert_eq (space_foreach_free (sp, true, collect, &rr), 7);
  cr_assert_eq (rr.n, 2);
  space_destroy (sp);
}

Test (space, load_rejects_corrupt_maps)
{
  struct space *sp = mk (100, 200, 0, 1);

  cr_assert_eq (space_load_alloc (sp, 50, 10), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "50") != NULL, "%s", cairn_errmsg ());
  cr_assert_eq (space_load_alloc (sp, 195, 10), -EINVAL);
  cr_assert_eq (space_load_alloc (sp, 150, 0), -EINVAL);
  cr_assert_eq (space_load_alloc (sp, UINT64_MAX - 5, 10), -EINVAL);
  cr_assert_eq (space_load_alloc (sp, 120, 10), 0);
  cr_assert_eq (space_load_alloc (sp, 125, 10), -EINVAL); /* twice */
  cr_assert (strstr (cairn_errmsg (), "[125, 135)") != NULL, "%s",
             cairn_errmsg ());
  cr_assert_eq (space_load_free (sp, 110, 10), -EINVAL); /* not alloc'd */
  cr_assert (strstr (cairn_errmsg (), "[110, 120)") != NULL, "%s",
             cairn_errmsg ());
  cr_assert_eq (space_load_free (sp, 115, 10), -EINVAL);  /* partly */
  cr_assert_eq (space_load_free (sp, 120, 200), -EINVAL); /* out */
  cr_assert_eq (space_load_free (sp, 122, 3), 0);
  cr_assert_eq (space_load_free (sp, 122, 3), -EINVAL); /* twice */
  expect_stats (sp, 93, 0, 3);
  /* Errors left the map as it was. */
  cr_assert (space_is_allocated (sp, 120, 2));
  cr_assert (space_is_allocated (sp, 125, 5));
  space_destroy (sp);
}

/* Engine bugs abort. */
Test (space, free_of_free_blocks_aborts, .signal = SIGABRT)
{
  struct space *sp = mk (0, 100, 0, 2);

  space_free (sp, 10, 1, 1);
}

Test (space, double_deferred_free_aborts, .signal = SIGABRT)
{
  struct space *sp = mk (0, 100, 0, 2);

  cr_assert_eq (space_load_alloc (sp, 0, 100), 0);
  space_free (sp, 10, 5, 1);
  space_free (sp, 12, 1, 1);
}

Test (space, double_immediate_free_aborts, .signal = SIGABRT)
{
  struct space *sp = mk (0, 100, 0, 2);

  alloc_at (sp, 10, 0, 0, 0);
  space_free (sp, 0, 10, 2);
  space_free (sp, 0, 10, 2);
}

Test (space, partly_open_gen_with_older_birth_aborts, .signal = SIGABRT)
{
  struct space *sp = mk (0, 100, 0, 2);

  cr_assert_eq (space_load_alloc (sp, 10, 10), 0);
  alloc_at (sp, 10, 0, 0, 0);
  space_free (sp, 5, 10, 1); /* [5,10) from gen 2, [10,15) older: mixed */
}

/* Blocks allocated in the open generation but freed with an older birth
 * (a walk of a tree whose pointers carry an older birth) are deferred, not
 * freed at once, and leave the delta on both sides: free before the
 * generation and free after it, they need no space map record (space.c
 * invariant 5).
 */
Test (space, open_gen_block_with_older_birth_is_deferred)
{
  struct space *sp = mk (0, 100, 0, 2);
  struct space_stats st;
  struct space_delta *d;
  uint64_t start;

  alloc_at (sp, 10, 0, 0, 0);
  space_free (sp, 0, 10, 1);
  space_stats (sp, &st);
  cr_assert_eq (st.pending, 10);
  cr_assert_eq (space_alloc (sp, 100, 0, SPACE_RESERVE, &start), -ENOSPC);
  cr_assert_eq (space_freeze (sp, &d), 0);
  cr_assert_eq (d->nalloc, 0, "moved out of the alloc delta");
  cr_assert_eq (d->nfreed, 0, "and not into the freed delta");
  space_delta_free (d);
  space_gen_durable (sp, 2);
  space_stats (sp, &st);
  cr_assert_eq (st.free, 100);
  space_destroy (sp);
}

/* space_delta_ranges counts what the next freeze hands out: the space map
 * log sizes a generation's record blocks with it.
 */
Test (space, delta_ranges_match_the_freeze)
{
  struct space *sp = mk (0, 100, 0, 2);
  struct space_delta *d;

  cr_assert_eq (space_delta_ranges (sp), 0);
  alloc_at (sp, 10, 0, 0, 0);
  alloc_at (sp, 5, 20, 0, 20);
  cr_assert_eq (space_delta_ranges (sp), 2);
  d = freeze (sp);
  space_delta_free (d);
  space_gen_durable (sp, 2);
  cr_assert_eq (space_delta_ranges (sp), 0, "a new generation starts empty");
  space_free (sp, 0, 2, 2);             /* deferred */
  space_free (sp, 20, 5, 2);            /* deferred */
  alloc_at (sp, 3, 0, 0, 10);           /* joins nothing in the delta */
  alloc_at (sp, 1, 13, 0, 13);          /* touches [10,13): one range */
  cr_assert_eq (space_delta_ranges (sp), 3);
  space_free (sp, 13, 1, 3);            /* born now: cancels out */
  cr_assert_eq (space_delta_ranges (sp), 3);
  d = freeze (sp);
  cr_assert_eq (d->nalloc + d->nfreed, 3);
  cr_assert_eq (d->alloc[0].start, 10);
  cr_assert_eq (d->alloc[0].len, 3);
  space_delta_free (d);
  space_destroy (sp);
}

/* A moved range inside a deferred free splits the freed side of the delta
 * around it.
 */
Test (space, moved_range_splits_the_freed_delta)
{
  struct space *sp = mk (0, 100, 0, 2);
  struct space_delta *d;

  alloc_at (sp, 30, 0, 0, 0);
  d = freeze (sp);
  space_delta_free (d);
  space_gen_durable (sp, 2);
  space_free (sp, 0, 10, 2);            /* deferred: [0,10) */
  space_free (sp, 20, 10, 2);           /* deferred: [20,30) */
  alloc_at (sp, 10, 0, 0, 30);          /* [30,40) in gen 3 */
  space_free (sp, 32, 3, 2);            /* moved */
  cr_assert_geq (space_delta_ranges (sp), 4);
  space_free (sp, 10, 10, 2);           /* freed: [0,30) + moved [32,35) */
  d = freeze (sp);
  cr_assert_eq (d->nfreed, 1);
  cr_assert_eq (d->freed[0].start, 0);
  cr_assert_eq (d->freed[0].len, 30);
  cr_assert_eq (d->nalloc, 2);
  cr_assert_eq (d->alloc[0].start, 30);
  cr_assert_eq (d->alloc[0].len, 2);
  cr_assert_eq (d->alloc[1].start, 35);
  cr_assert_eq (d->alloc[1].len, 5);
  space_delta_free (d);
  space_destroy (sp);
}

Test (space, future_birth_aborts, .signal = SIGABRT)
{
  struct space *sp = mk (0, 100, 0, 2);

  alloc_at (sp, 10, 0, 0, 0);
  space_free (sp, 0, 10, 3);
}

Test (space, free_out_of_bounds_aborts, .signal = SIGABRT)
{
  struct space *sp = mk (10, 100, 0, 2);

  space_free (sp, 95, 10, 1);
}

Test (space, durable_open_generation_aborts, .signal = SIGABRT)
{
  struct space *sp = mk (0, 100, 0, 2);

  space_gen_durable (sp, 2);
}

/* ------------------------------------------------------------ random model */

/* Per-block state of the allocator model. */
struct mblock {
  uint8_t state; /* 0 free, 1 allocated, 2 deferred */
  uint64_t gen;  /* allocated: birth; deferred: freed in */
};

#define M_FREE 0
#define M_ALLOC 1
#define M_DEFER 2

/* The model's answer for space_alloc: the first fit from hint, then from
 * base, that ends at or below the high water touched; then the same two
 * without that limit.
 */
static bool
model_alloc (const struct mblock *m, uint64_t base, uint64_t end, uint64_t len,
             uint64_t hint, uint64_t touched, uint64_t *posp)
{
  for (int pass = 0; pass < 4; pass++) {
    uint64_t run = 0, limit = pass < 2 ? touched : end;

    for (uint64_t p = pass % 2 ? base : hint; p < limit; p++) {
      run = m[p - base].state == M_FREE ? run + 1 : 0;
      if (run == len) {
        *posp = p + 1 - len;
        return true;
      }
    }
  }
  return false;
}

/* Compare the runs of blocks in a state (and gen) with a delta array. */
static void
model_check_delta (const struct mblock *m, uint64_t base, uint64_t end,
                   uint8_t state, uint64_t gen, const struct space_range *v,
                   size_t nv, uint64_t seed, int op)
{
  size_t i = 0;

  for (uint64_t p = base; p < end;) {
    uint64_t e;

    if (m[p - base].state != state || m[p - base].gen != gen) {
      p++;
      continue;
    }
    for (e = p; e < end && m[e - base].state == state && m[e - base].gen == gen;
         e++)
      ;
    cr_assert (i < nv && v[i].start == p && v[i].len == e - p,
               "seed %" PRIu64 " op %d: delta %s of gen %" PRIu64
               " range %zu should be [%" PRIu64 ", %" PRIu64 ")",
               seed, op, state == M_ALLOC ? "alloc" : "freed", gen, i, p, e);
    i++;
    p = e;
  }
  cr_assert_eq (i, nv,
                "seed %" PRIu64 " op %d: delta has %zu ranges, model"
                " %zu",
                seed, op, nv, i);
}

/* foreach callback state: compare free runs with the model. */
struct model_walk {
  const struct mblock *m;
  uint64_t base, end, pos;
  bool with_pending;
  uint64_t seed;
  int op;
};

/* Is a model block free for this walk? */
static bool
walk_free (const struct model_walk *w, uint64_t p)
{
  uint8_t s = w->m[p - w->base].state;

  return s == M_FREE || (w->with_pending && s == M_DEFER);
}

/* space_foreach_free callback: the run must be the model's next run. */
static int
model_run (void *opaque, uint64_t start, uint64_t len)
{
  struct model_walk *w = opaque;
  uint64_t p = w->pos, e;

  while (p < w->end && !walk_free (w, p))
    p++;
  for (e = p; e < w->end && walk_free (w, e); e++)
    ;
  cr_assert (start == p && len == e - p,
             "seed %" PRIu64 " op %d: free run"
             " [%" PRIu64 ", +%" PRIu64 "), model [%" PRIu64 ", %" PRIu64
             ") (pending %d)",
             w->seed, w->op, start, len, p, e, w->with_pending);
  w->pos = e;
  return 0;
}

/* Compare every free run, with and without pending, and the counters. */
static void
model_compare (struct space *sp, const struct mblock *m, uint64_t base,
               uint64_t end, uint64_t seed, int op)
{
  struct space_stats st;
  uint64_t nfree = 0, npend = 0;

  for (int wp = 0; wp < 2; wp++) {
    struct model_walk w = { .m = m,
                            .base = base,
                            .end = end,
                            .pos = base,
                            .with_pending = wp,
                            .seed = seed,
                            .op = op };

    cr_assert_eq (space_foreach_free (sp, wp, model_run, &w), 0);
    while (w.pos < end && !walk_free (&w, w.pos))
      w.pos++;
    cr_assert_eq (w.pos, end,
                  "seed %" PRIu64 " op %d: free run at %" PRIu64 " missing",
                  seed, op, w.pos);
  }
  for (uint64_t p = base; p < end; p++) {
    nfree += m[p - base].state == M_FREE;
    npend += m[p - base].state == M_DEFER;
  }
  space_stats (sp, &st);
  cr_assert (st.free == nfree && st.pending == npend,
             "seed %" PRIu64 " op %d: stats free %" PRIu64 " pending %" PRIu64
             ", model %" PRIu64 " %" PRIu64,
             seed, op, st.free, st.pending, nfree, npend);
}

Test (space, random_against_model, .timeout = 120)
{
  enum { BASE = 16, END = BASE + 4096, RESERVE = 64, OPS = 50000 };
  uint64_t seed = test_seed ("space/random_against_model");
  struct rng r = { .s = seed };
  struct mblock *m = calloc (END - BASE, sizeof *m);
  struct space *sp = mk (BASE, END, RESERVE, 1);
  uint64_t gen = 1, durable = 0, nfree = END - BASE, touched = BASE;
  uint64_t nenospc = 0, nreserve = 0;

  cr_assert_not_null (m);
  for (int op = 0; op < OPS; op++) {
    uint64_t kind = rng_below (&r, 100);
    bool filling = (op / 2500) % 2 == 0;
    uint64_t hint = BASE - 3 + rng_below (&r, END - BASE + 6);
    uint64_t len
        = 1
          + (rng_below (&r, 8) == 0 ? rng_below (&r, 200) : rng_below (&r, 6));
    unsigned flags = rng_below (&r, 10) == 0 ? SPACE_RESERVE : 0;
    uint64_t h = hint >= BASE && hint < END ? hint : BASE;
    uint64_t usable = flags ? nfree : nfree > RESERVE ? nfree - RESERVE : 0;
    uint64_t start = 0, got = 0;
    int ret;

    /* Alternate phases that fill the pool (into the reserve) and drain it. */
    if (filling && kind >= 45 && kind < 70)
      kind -= 45;
    else if (!filling && kind < 25)
      kind += 45;

    if (kind < 30) { /* exact alloc */
      uint64_t want = 0;
      bool ok = usable >= len && model_alloc (m, BASE, END, len, h, touched,
                                                &want);

      ret = space_alloc (sp, len, hint, flags, &start);
      cr_assert_eq (ret, ok ? 0 : -ENOSPC,
                    "seed %" PRIu64 " op %d: alloc %" PRIu64 " hint %" PRIu64
                    " gave %d",
                    seed, op, len, hint, ret);
      if (ok) {
        cr_assert_eq (start, want,
                      "seed %" PRIu64 " op %d: alloc %" PRIu64 " hint %" PRIu64
                      " at %" PRIu64 ", model %" PRIu64,
                      seed, op, len, hint, start, want);
        got = len;
        nreserve += flags && nfree - len < RESERVE;
      } else
        nenospc++;
    } else if (kind < 45) { /* alloc_upto */
      uint64_t max = MIN (len, usable), p = h;

      ret = space_alloc_upto (sp, len, hint, flags, &start, &got);
      if (max == 0) {
        cr_assert_eq (ret, -ENOSPC, "seed %" PRIu64 " op %d", seed, op);
        got = 0;
        nenospc++;
      } else {
        uint64_t e;

        cr_assert_eq (ret, 0, "seed %" PRIu64 " op %d: alloc_upto: %s", seed,
                      op, cairn_errmsg ());
        while (p < END && m[p - BASE].state != M_FREE)
          p++;
        if (p == END)
          for (p = BASE; m[p - BASE].state != M_FREE; p++)
            ;
        for (e = p; e < END && m[e - BASE].state == M_FREE && e - p < max; e++)
          ;
        cr_assert (start == p && got == e - p,
                   "seed %" PRIu64 " op %d:"
                   " alloc_upto %" PRIu64 " hint %" PRIu64 " gave [%" PRIu64
                   ", +%" PRIu64 "), model [%" PRIu64 ", %" PRIu64 ")",
                   seed, op, len, hint, start, got, p, e);
        nreserve += flags && nfree - got < RESERVE;
      }
    } else if (kind < 80) { /* free a piece of an allocation */
      uint64_t p = BASE + rng_below (&r, END - BASE), e, b;

      while (p < END && m[p - BASE].state != M_ALLOC)
        p++;
      if (p == END)
        continue;
      b = m[p - BASE].gen;
      for (e = p; e < END && e - p < len && m[e - BASE].state == M_ALLOC
                  && m[e - BASE].gen == b;
           e++)
        ;
      space_free (sp, p, e - p, b);
      for (uint64_t q = p; q < e; q++) {
        if (b == gen) {
          m[q - BASE].state = M_FREE;
          nfree++;
        } else {
          m[q - BASE].state = M_DEFER;
          m[q - BASE].gen = gen;
        }
      }
    } else if (kind < 90) { /* freeze, checking the delta */
      struct space_delta *d = freeze (sp);

      cr_assert_eq (d->gen, gen);
      model_check_delta (m, BASE, END, M_ALLOC, gen, d->alloc, d->nalloc, seed,
                         op);
      model_check_delta (m, BASE, END, M_DEFER, gen, d->freed, d->nfreed, seed,
                         op);
      space_delta_free (d);
      gen++;
    } else if (kind < 97) { /* some closed generation durable */
      uint64_t g;

      if (durable + 1 >= gen)
        continue;
      g = durable + 1 + rng_below (&r, gen - durable - 1);
      space_gen_durable (sp, g);
      for (uint64_t q = 0; q < END - BASE; q++)
        if (m[q].state == M_DEFER && m[q].gen <= g) {
          m[q].state = M_FREE;
          nfree++;
        }
      durable = g;
    } else { /* is_allocated */
      uint64_t p = BASE + rng_below (&r, END - BASE);
      uint64_t l = MIN (len, END - p);
      bool all = true;

      for (uint64_t q = p; q < p + l; q++)
        all = all && m[q - BASE].state == M_ALLOC;
      cr_assert_eq (space_is_allocated (sp, p, l), all,
                    "seed %" PRIu64 " op %d: is_allocated [%" PRIu64
                    ", +%" PRIu64 ")",
                    seed, op, p, l);
    }

    for (uint64_t q = start; q < start + got; q++) {
      cr_assert_eq (m[q - BASE].state, M_FREE,
                    "seed %" PRIu64 " op %d:"
                    " block %" PRIu64 " handed out twice",
                    seed, op, q);
      m[q - BASE].state = M_ALLOC;
      m[q - BASE].gen = gen;
    }
    nfree -= got;
    if (got > 0)
      touched = MAX (touched, start + got);

    if (op % 500 == 0)
      model_compare (sp, m, BASE, END, seed, op);
  }
  model_compare (sp, m, BASE, END, seed, OPS);
  cr_assert_eq (space_open_gen (sp), gen);
  /* The run must have reached both a full pool and the reserve. */
  fprintf (stderr,
           "space/random_against_model: %" PRIu64 " ENOSPC, %" PRIu64
           " allocations into the reserve\n",
           nenospc, nreserve);
  cr_assert (nenospc > 0 && nreserve > 0,
             "seed %" PRIu64 ": the pool"
             " never filled",
             seed);
  space_destroy (sp);
  free (m);
}

/* ------------------------------------------------------------ speed */

Test (space, million_operations, .timeout = 60)
{
  /* A 1 GiB-ish pool (256k blocks) churned by a million allocations and
   * frees of mixed sizes, committing now and then.
   */
  enum { NBLOCKS = 1 << 18, SLOTS = 4096 };
  static uint64_t slot_start[SLOTS], slot_len[SLOTS], slot_gen[SLOTS];
  struct space *sp = mk (0, NBLOCKS, 1024, 1);
  struct rng r = { .s = 1 };
  struct timespec t0, t1;
  struct space_stats st;
  uint64_t gen = 1, hint = 0, live = 0;
  double secs;

  clock_gettime (CLOCK_MONOTONIC, &t0);
  for (int op = 0; op < 1000000; op++) {
    size_t i = rng_below (&r, SLOTS);

    if (slot_len[i]) {
      space_free (sp, slot_start[i], slot_len[i], slot_gen[i]);
      live -= slot_len[i];
      slot_len[i] = 0;
    } else {
      uint64_t len = 1 + rng_below (&r, 32);

      cr_assert_eq (space_alloc (sp, len, hint, 0, &slot_start[i]), 0,
                    "op %d: %s", op, cairn_errmsg ());
      slot_len[i] = len;
      slot_gen[i] = gen;
      hint = slot_start[i] + len;
      live += len;
    }
    if (op % 10000 == 9999) {
      space_delta_free (freeze (sp));
      space_gen_durable (sp, gen);
      gen++;
    }
  }
  clock_gettime (CLOCK_MONOTONIC, &t1);
  secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf (stderr, "space/million_operations: %.3f s\n", secs);
  space_stats (sp, &st);
  cr_assert_eq (st.allocated + st.pending, live);
  /* Generous: the point is O(log n), and sanitizers slow things down. */
  cr_assert_lt (secs, 20.0);
  space_destroy (sp);
}
