/* Unit tests for the copy-on-write B-tree (engine/btree*.c): shaped
 * histories.
 *
 * Uniformly random keys (test-btree.c's model_million_ops) never build the
 * shapes that sequential and bulk work leave behind: full nodes beside a
 * lone child (the append policy), long runs of emptied leaves, nodes of
 * four huge items or of hundreds of tiny ones.  A deleted lone child that
 * stayed in the tree (BT-5) was found by a benchmark, not by a test.  Here
 * a history is a sequence of randomly chosen phases that each build or take
 * apart such a shape in bulk, with commits at random points inside them
 * and reopens between them.  After every phase the whole tree is compared
 * with the model: a cursor walk in order, point lookups of present and
 * absent keys (every key the phase touched, or an even sample of them)
 * and seeks; every few phases fsck checks the closed pool.
 *
 * Keys are 8 bytes big-endian in [0, SHAPE_KEYS), so key ranges are
 * contiguous; the model holds each key's value length and version, the tag
 * of its bytes.  Every failure message starts with the phase's number and
 * what it was doing, and names the key.  The seed is printed; replay a
 * failure with CAIRN_TEST_SEED.  CAIRN_TEST_SCALE (an integer, default 1)
 * multiplies the number of phases, for long hunts: CAIRN_TEST_SCALE=20
 * runs about twenty times as long.
 */
#include <config.h>

#include <errno.h>

#include <criterion/criterion.h>

#include "test-btree.h"

#define SHAPE_KEYS 200000u
#define SHAPE_FSCK_EVERY 8u     /* phases between two fsck runs */

/* What the tree should hold: key k's value is fill_pattern of ver[k]
 * (0: the key is absent), vlen[k] bytes long.
 */
struct shape_model {
  uint32_t ver[SHAPE_KEYS];
  uint16_t vlen[SHAPE_KEYS];
  uint64_t count;               /* keys present */
  uint64_t bytes;               /* bytes of their values */
};

/* The sizes of the values a phase writes. */
enum shape_vsize {
  VS_TINY,                      /* 0-4 bytes: hundreds of items a node */
  VS_SMALL,                     /* 5-64 */
  VS_MEDIUM,                    /* 65 to a third of the largest */
  VS_LARGE,                     /* half the largest to the largest */
  VS_NEAR_MAX,                  /* the largest, or 1-4 bytes less: 4 a node */
  VS_MIXED,                     /* the extremes and everything between */
  VS_COUNT
};

static const char *const shape_vsize_name[VS_COUNT] = {
  "tiny", "small", "medium", "large", "near-maximum", "mixed",
};

/* The phases, with their relative odds. */
enum shape_phase {
  PH_APPEND,                    /* ascending new keys past the last one */
  PH_ASCEND,                    /* ascending from a key: new and replaced */
  PH_DESCEND,                   /* descending from a key */
  PH_FILL,                      /* the gaps of a range, in random order */
  PH_REPLACE,                   /* new values for a run of present keys */
  PH_DEL_FRONT,                 /* the first keys */
  PH_DEL_END,                   /* the last keys */
  PH_DEL_MIDDLE,                /* a run of keys from a random one */
  PH_DEL_KTH,                   /* every k-th key of a run */
  PH_DEL_ALL,                   /* everything */
  PH_CHURN,                     /* random inserts and deletes in a window */
  PH_REOPEN,                    /* close and reopen the pool */
  PH_COUNT
};

static const unsigned shape_phase_odds[PH_COUNT] = {
  [PH_APPEND] = 14, [PH_ASCEND] = 6, [PH_DESCEND] = 6, [PH_FILL] = 6,
  [PH_REPLACE] = 6, [PH_DEL_FRONT] = 8, [PH_DEL_END] = 10,
  [PH_DEL_MIDDLE] = 8, [PH_DEL_KTH] = 6, [PH_DEL_ALL] = 2, [PH_CHURN] = 10,
  [PH_REOPEN] = 3,
};

/* A shaped history in progress. */
struct shaped {
  struct env e;
  struct shape_model *m;
  uint32_t *keys;               /* present keys in order (shaped_collect) */
  uint64_t nkeys;
  struct rng r;
  size_t maxv;                  /* the largest value with an 8-byte key */
  uint64_t budget;              /* most bytes of items the model may hold */
  uint32_t ver;                 /* the last version written */
  unsigned phase;
  char what[256];               /* "phase N (what it does)" */
  enum shape_vsize vs;          /* the phase's value sizes */
  uint64_t commit_odds;         /* an operation commits once in this many */
  uint64_t lo, hi;              /* the keys the phase touched; lo > hi: none */
  uint8_t *val, *want;          /* buffers of maxv bytes */
  uint64_t ops, commits, reopens, fscks, evictions;
  unsigned max_level;
};

static bool
shaped_present (const struct shaped *s, uint64_t key)
{
  return key < SHAPE_KEYS && s->m->ver[key] != 0;
}

/* Is the model at its budget of item bytes (8-byte key, value, headers)? */
static bool
shaped_full (const struct shaped *s)
{
  return s->m->bytes + 16 * s->m->count >= s->budget;
}

/* A value length of the phase's size. */
static size_t
shaped_vlen (struct shaped *s)
{
  size_t max = s->maxv;

  switch (s->vs) {
  case VS_TINY:
    return rng_below (&s->r, 5);
  case VS_SMALL:
    return 5 + rng_below (&s->r, 60);
  case VS_MEDIUM:
    return 65 + rng_below (&s->r, max / 3 - 64);
  case VS_LARGE:
    return max / 2 + rng_below (&s->r, max - max / 2 + 1);
  case VS_NEAR_MAX:
    return max - rng_below (&s->r, 5);
  default:
    switch (rng_below (&s->r, 3)) {
    case 0:
      return rng_below (&s->r, 5);
    case 1:
      return max - rng_below (&s->r, 5);
    default:
      return rng_below (&s->r, max + 1);
    }
  }
}

/* Count an operation on key and commit when the phase's odds say so. */
static void
shaped_step (struct shaped *s, uint64_t key)
{
  s->ops++;
  s->lo = MIN (s->lo, key);
  s->hi = MAX (s->hi, key);
  if (s->commit_odds && rng_below (&s->r, s->commit_odds) == 0) {
    cr_assert_eq (pool_commit (s->e.pool), 0, "%s: commit after key %" PRIu64
                  ": %s", s->what, key, cairn_errmsg ());
    s->commits++;
  }
}

/* Insert or replace key with a new value of the phase's size. */
static void
shaped_put (struct shaped *s, uint64_t key)
{
  size_t len = shaped_vlen (s);
  bool was = shaped_present (s, key);
  uint8_t k[8];
  int rc;

  fill_pattern (s->val, len, ++s->ver);
  k64 (k, key);
  rc = put (&s->e, k, 8, s->val, len, 0);
  cr_assert_eq (rc, 0, "%s: %s of key %" PRIu64 " (%zu-byte value): %d %s",
                s->what, was ? "replace" : "insert", key, len, rc,
                cairn_errmsg ());
  if (was)
    s->m->bytes -= s->m->vlen[key];
  else
    s->m->count++;
  s->m->ver[key] = s->ver;
  s->m->vlen[key] = (uint16_t) len;
  s->m->bytes += len;
  shaped_step (s, key);
}

/* Delete key, present or not. */
static void
shaped_del (struct shaped *s, uint64_t key)
{
  bool was = shaped_present (s, key);
  uint8_t k[8];
  int rc;

  k64 (k, key);
  rc = del (&s->e, k, 8);
  cr_assert_eq (rc, was ? 0 : -ENOENT, "%s: delete of %s key %" PRIu64
                ": %d %s", s->what, was ? "present" : "absent", key, rc,
                cairn_errmsg ());
  if (was) {
    s->m->count--;
    s->m->bytes -= s->m->vlen[key];
    s->m->ver[key] = 0;
    s->m->vlen[key] = 0;
  }
  shaped_step (s, key);
}

/* The present keys, in order, into s->keys. */
static void
shaped_collect (struct shaped *s)
{
  s->nkeys = 0;
  for (uint32_t key = 0; key < SHAPE_KEYS; key++)
    if (s->m->ver[key])
      s->keys[s->nkeys++] = key;
  cr_assert_eq (s->nkeys, s->m->count);
}

/* Index of the first collected key >= key (nkeys: none). */
static uint64_t
shaped_rank (const struct shaped *s, uint64_t key)
{
  uint64_t lo = 0, hi = s->nkeys;

  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;

    if (s->keys[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* A value read from the tree must be key's in the model. */
static void
shaped_check_val (struct shaped *s, uint64_t key, const uint8_t *val,
                  size_t vl, const char *how)
{
  cr_assert_eq (vl, s->m->vlen[key], "%s: %s: key %" PRIu64 " has a %zu-byte "
                "value, the model's is %u bytes", s->what, how, key, vl,
                s->m->vlen[key]);
  fill_pattern (s->want, vl, s->m->ver[key]);
  cr_assert (memcmp (val, s->want, vl) == 0, "%s: %s: key %" PRIu64 ": the "
             "value is not version %" PRIu32 "'s", s->what, how, key,
             s->m->ver[key]);
}

/* Look key up: found with its value when present, else -ENOENT. */
static void
shaped_lookup (struct shaped *s, uint64_t key)
{
  bool present = shaped_present (s, key);
  size_t vl = 0;
  uint8_t k[8];
  int rc;

  k64 (k, key);
  rc = get (&s->e, k, 8, s->val, s->maxv, &vl);
  cr_assert_eq (rc, present ? 0 : -ENOENT, "%s: lookup of %s key %" PRIu64
                ": %d %s", s->what, present ? "present" : "absent", key, rc,
                rc < 0 ? cairn_errmsg () : "found");
  if (rc == 0)
    shaped_check_val (s, key, s->val, vl, "lookup");
}

/* Seek (le: seek_le) to target and step once; compare with the model. */
static void
shaped_seek (struct shaped *s, struct btree_cursor *cur, uint64_t target,
             bool le)
{
  const char *how = le ? "seek_le" : "seek";
  uint64_t i = shaped_rank (s, target), key;
  const uint8_t *kp, *val;
  size_t kl, vl;
  uint8_t k[8];
  int rc;

  if (le && !(i < s->nkeys && s->keys[i] == target) && i > 0)
    i--;                        /* the last key <= target, else the first */
  k64 (k, target);
  rc = le ? btree_cursor_seek_le (cur, k, 8) : btree_cursor_seek (cur, k, 8);
  cr_assert_eq (rc, i < s->nkeys ? 0 : -ENOENT, "%s: %s %" PRIu64 ": %d %s "
                "(the model has %" PRIu64 " keys)", s->what, how, target, rc,
                rc < 0 ? cairn_errmsg () : "found", s->nkeys);
  if (rc < 0)
    return;
  for (int step = 0; step < 2; step++, i++) {
    if (step == 1) {
      rc = btree_cursor_next (cur);
      cr_assert_eq (rc, i < s->nkeys ? 0 : -ENOENT, "%s: %s %" PRIu64
                    ", then next: %d %s", s->what, how, target, rc,
                    rc < 0 ? cairn_errmsg () : "found");
      if (rc < 0)
        return;
    }
    btree_cursor_item (cur, &kp, &kl, &val, &vl);
    key = kl == 8 ? get_be64 (kp) : UINT64_MAX;
    cr_assert_eq (key, s->keys[i], "%s: %s %" PRIu64 "%s: on key %" PRIu64
                  " (%zu bytes), the model's is %" PRIu32, s->what, how,
                  target, step ? ", then next" : "", key, kl, s->keys[i]);
    shaped_check_val (s, key, val, vl, how);
  }
}

/* Compare the whole tree with the model: a walk in order, lookups of the
 * keys the phase touched (all of them, or an even sample) and of random
 * and boundary keys, and seeks.
 */
static void
shaped_compare (struct shaped *s)
{
  struct btree_cursor *cur;
  uint64_t j = 0, last = UINT64_MAX;
  int rc;

  shaped_collect (s);
  cr_assert_eq (btree_cursor_new (s->e.t, &cur), 0);
  btree_rdlock (s->e.t);
  for (rc = btree_cursor_seek (cur, NULL, 0); rc == 0;
       rc = btree_cursor_next (cur), j++) {
    const uint8_t *kp, *val;
    size_t kl, vl;
    uint64_t key;

    btree_cursor_item (cur, &kp, &kl, &val, &vl);
    cr_assert_eq (kl, 8, "%s: walk: item %" PRIu64 " has a %zu-byte key",
                  s->what, j, kl);
    key = get_be64 (kp);
    cr_assert_lt (j, s->nkeys, "%s: walk: key %" PRIu64 " follows the "
                  "model's last key %" PRIu64, s->what, key, last);
    cr_assert_eq (key, s->keys[j], "%s: walk: item %" PRIu64 " is key %"
                  PRIu64 " where the model has key %" PRIu32 "%s", s->what,
                  j, key, s->keys[j], shaped_present (s, key) ? "" :
                  " (not in the model)");
    shaped_check_val (s, key, val, vl, "walk");
    last = key;
  }
  cr_assert_eq (rc, -ENOENT, "%s: walk: next after key %" PRIu64 ": %d %s",
                s->what, last, rc, cairn_errmsg ());
  cr_assert_eq (j, s->nkeys, "%s: walk: the tree ends after %" PRIu64
                " keys, at key %" PRIu64 "; the model has %" PRIu64
                ", next key %" PRIu32, s->what, j, last, s->nkeys,
                j < s->nkeys ? s->keys[j] : 0);

  for (int i = 0; i < 24; i++) {
    uint64_t target = i % 2 && s->lo <= s->hi
      ? s->lo + rng_below (&s->r, s->hi - s->lo + 3) : rng_below (&s->r, SHAPE_KEYS + 2);
    shaped_seek (s, cur, target, i >= 12);
  }
  btree_unlock (s->e.t);
  btree_cursor_free (cur);

  if (s->lo <= s->hi) {
    uint64_t from = s->lo >= 2 ? s->lo - 2 : 0, to = s->hi + 2;
    uint64_t step = (to - from) / 2048 + 1;

    for (uint64_t key = from + rng_below (&s->r, step); key <= to; key += step)
      shaped_lookup (s, key);
  }
  for (int i = 0; i < 64; i++)
    shaped_lookup (s, rng_below (&s->r, SHAPE_KEYS + 2));
  if (s->nkeys) {
    uint64_t first = s->keys[0], end = s->keys[s->nkeys - 1];

    if (first > 0)
      shaped_lookup (s, first - 1);
    shaped_lookup (s, first);
    shaped_lookup (s, end);
    shaped_lookup (s, end + 1);
  }
}

/* Shuffle n keys. */
static void
shaped_shuffle (struct shaped *s, uint32_t *a, uint64_t n)
{
  for (uint64_t i = n; i > 1; i--) {
    uint64_t j = rng_below (&s->r, i);
    uint32_t t = a[i - 1];

    a[i - 1] = a[j];
    a[j] = t;
  }
}

/* Delete the collected keys first, first + stride, ... (count of them),
 * ascending, or descending when down.
 */
static void
shaped_del_run (struct shaped *s, uint64_t first, uint64_t count,
                uint64_t stride, bool down)
{
  for (uint64_t i = 0; i < count; i++)
    shaped_del (s, s->keys[first + (down ? count - 1 - i : i) * stride]);
}

/* The length of a phase: log-uniform from 1 to 32,768. */
static uint64_t
shaped_length (struct shaped *s)
{
  return 1 + rng_below (&s->r, 1ull << rng_below (&s->r, 16));
}

/* How many of c keys a delete phase takes: a length as above, or a
 * sixteenth to all of them.
 */
static uint64_t
shaped_del_length (struct shaped *s, uint64_t c)
{
  uint64_t n = rng_below (&s->r, 2) ? shaped_length (s)
    : c * (1 + rng_below (&s->r, 16)) / 16;

  return MAX (MIN (n, c), 1u);
}

/* Pick a phase: no deletes from an empty tree, deletes twice as likely
 * once the model holds three quarters of its budget.
 */
static enum shape_phase
shaped_pick (struct shaped *s)
{
  bool heavy = s->m->bytes + 16 * s->m->count >= s->budget / 4 * 3;
  unsigned odds[PH_COUNT], total = 0, x;
  enum shape_phase p;

  for (p = 0; p < PH_COUNT; p++) {
    bool removes = p == PH_REPLACE || (p >= PH_DEL_FRONT && p <= PH_DEL_ALL);

    odds[p] = s->m->count == 0 && removes ? 0 : shape_phase_odds[p];
    if (heavy && p >= PH_DEL_FRONT && p <= PH_DEL_ALL)
      odds[p] *= 2;
    total += odds[p];
  }
  x = (unsigned) rng_below (&s->r, total);
  for (p = 0; x >= odds[p]; p++)
    x -= odds[p];
  return p;
}

/* Close and reopen the pool, fsck checking it in between when fsck. */
static void
shaped_reopen (struct shaped *s, bool fsck)
{
  struct nodecache_stats st;

  nodecache_stats (pool_cache (s->e.pool), &st);
  s->evictions += st.evictions;
  env_reopen_fsck (&s->e, fsck ? s->what : NULL);
  s->reopens++;
  s->fscks += fsck;
}

/* Run one phase of the history. */
static void
shaped_phase (struct shaped *s)
{
  enum shape_phase p = shaped_pick (s);
  uint64_t n = shaped_length (s), c, step, start = 0, i, k = 0;
  bool down = rng_below (&s->r, 2);
  const char *dir = down ? "descending" : "ascending";
  char what[160];

  shaped_collect (s);
  c = s->nkeys;
  s->vs = (enum shape_vsize) rng_below (&s->r, VS_COUNT);
  step = rng_below (&s->r, 4) ? 1 : 2 + rng_below (&s->r, 3);
  s->lo = UINT64_MAX;
  s->hi = 0;
  switch (rng_below (&s->r, n <= 1024 ? 4 : 3)) {
  case 0:
    s->commit_odds = 0;
    break;
  case 1:
    s->commit_odds = 4096;
    break;
  case 2:
    s->commit_odds = 256;
    break;
  default:
    s->commit_odds = 8;
  }
  if (p == PH_APPEND && c > 0 && s->keys[c - 1] + 64 >= SHAPE_KEYS)
    p = PH_DEL_ALL;             /* no room left at the end: start again */

  switch (p) {
  case PH_APPEND:
    start = c ? s->keys[c - 1] + 1 : rng_below (&s->r, SHAPE_KEYS / 4);
    if (rng_below (&s->r, 2))
      start += rng_below (&s->r, 64);
    n = MIN (n, (SHAPE_KEYS - 1 - start) / step + 1);
    snprintf (what, sizeof what, "append %" PRIu64 " keys from %" PRIu64
              " step %" PRIu64 ", %s values", n, start, step,
              shape_vsize_name[s->vs]);
    break;
  case PH_ASCEND:
  case PH_DESCEND:
    /* From a present key, or anywhere. */
    start = c && rng_below (&s->r, 2) ? s->keys[rng_below (&s->r, c)]
      : rng_below (&s->r, SHAPE_KEYS);
    n = MIN (n, (p == PH_ASCEND ? SHAPE_KEYS - 1 - start : start) / step + 1);
    snprintf (what, sizeof what, "insert %" PRIu64 " keys %s from %" PRIu64
              " step %" PRIu64 ", %s values", n,
              p == PH_ASCEND ? "ascending" : "descending", start, step,
              shape_vsize_name[s->vs]);
    break;
  case PH_FILL:
    /* The gaps between n present keys from a random one, or of n keys. */
    start = c ? s->keys[rng_below (&s->r, c)] : rng_below (&s->r, SHAPE_KEYS);
    i = shaped_rank (s, start);
    k = c && rng_below (&s->r, 2) ? s->keys[MIN (c - 1, i + n)] : start + n;
    k = MIN (k, SHAPE_KEYS);
    snprintf (what, sizeof what, "fill the gaps of [%" PRIu64 ", %" PRIu64
              ") in random order, %s values", start, k,
              shape_vsize_name[s->vs]);
    n = k - start;
    break;
  case PH_REPLACE:
    n = MIN (n, c);
    start = rng_below (&s->r, c - n + 1);
    snprintf (what, sizeof what, "replace the values of %" PRIu64 " keys "
              "from %" PRIu32 " with %s ones, %s", n, s->keys[start],
              shape_vsize_name[s->vs], step > 1 ? "in random order" : dir);
    break;
  case PH_DEL_FRONT:
    n = shaped_del_length (s, c);
    snprintf (what, sizeof what, "delete the first %" PRIu64 " keys (of %"
              PRIu64 "), %s", n, c, dir);
    break;
  case PH_DEL_END:
    n = shaped_del_length (s, c);
    snprintf (what, sizeof what, "delete the last %" PRIu64 " keys (of %"
              PRIu64 "), %s", n, c, dir);
    break;
  case PH_DEL_MIDDLE:
    n = shaped_del_length (s, c);
    start = rng_below (&s->r, c - n + 1);
    snprintf (what, sizeof what, "delete %" PRIu64 " keys from %" PRIu32
              " (of %" PRIu64 "), %s", n, s->keys[start], c, dir);
    break;
  case PH_DEL_KTH:
    k = 2 + rng_below (&s->r, 7);
    n = shaped_del_length (s, (c + k - 1) / k);
    start = rng_below (&s->r, c - (n - 1) * k);
    snprintf (what, sizeof what, "delete every %" PRIu64 "-th key, %"
              PRIu64 " of them from %" PRIu32 " (of %" PRIu64 "), %s", k, n,
              s->keys[start], c, dir);
    break;
  case PH_DEL_ALL:
    snprintf (what, sizeof what, "delete all %" PRIu64 " keys, %s", c,
              step > 1 ? "in random order" : dir);
    break;
  case PH_CHURN:
    k = 16ull << rng_below (&s->r, 9);  /* the window: 16 to 4,096 keys */
    start = c && rng_below (&s->r, 2) ? s->keys[rng_below (&s->r, c)]
      : rng_below (&s->r, SHAPE_KEYS);
    start = start >= k / 2 ? start - k / 2 : 0;
    k = MIN (k, SHAPE_KEYS - start);
    snprintf (what, sizeof what, "churn: %" PRIu64 " random inserts, replaces "
              "and deletes over [%" PRIu64 ", %" PRIu64 "), %s values", n,
              start, start + k, shape_vsize_name[s->vs]);
    break;
  default:
    snprintf (what, sizeof what, "reopen the pool");
    break;
  }
  snprintf (s->what, sizeof s->what, "phase %u (%s; commit 1 in %" PRIu64 ")",
            s->phase, what, s->commit_odds);

  switch (p) {
  case PH_APPEND:
  case PH_ASCEND:
    for (i = 0; i < n && !shaped_full (s); i++)
      shaped_put (s, start + i * step);
    break;
  case PH_DESCEND:
    for (i = 0; i < n && !shaped_full (s); i++)
      shaped_put (s, start - i * step);
    break;
  case PH_FILL:
    for (i = 0, k = 0; i < n; i++)
      if (!shaped_present (s, start + i))
        s->keys[k++] = (uint32_t) (start + i);
    shaped_shuffle (s, s->keys, k);
    for (i = 0; i < k && !shaped_full (s); i++)
      shaped_put (s, s->keys[i]);
    break;
  case PH_REPLACE:
    if (step > 1)
      shaped_shuffle (s, s->keys + start, n);
    for (i = 0; i < n && !shaped_full (s); i++)
      shaped_put (s, s->keys[start + (down ? n - 1 - i : i)]);
    break;
  case PH_DEL_FRONT:
    shaped_del_run (s, 0, n, 1, down);
    break;
  case PH_DEL_END:
    shaped_del_run (s, c - n, n, 1, down);
    break;
  case PH_DEL_MIDDLE:
    shaped_del_run (s, start, n, 1, down);
    break;
  case PH_DEL_KTH:
    shaped_del_run (s, start, n, k, down);
    break;
  case PH_DEL_ALL:
    if (step > 1)
      shaped_shuffle (s, s->keys, c);
    shaped_del_run (s, 0, c, 1, down);
    break;
  case PH_CHURN:
    for (i = 0; i < n; i++) {
      uint64_t key = start + rng_below (&s->r, k);

      if (rng_below (&s->r, 2) && !shaped_full (s))
        shaped_put (s, key);
      else
        shaped_del (s, key);
    }
    break;
  default:
    shaped_reopen (s, false);
    break;
  }
}

/* Run a shaped history of phases (times CAIRN_TEST_SCALE) on a pool of
 * node_size nodes and a cache of cache bytes, the model holding at most
 * budget bytes of items.
 */
static void
shaped_history (const char *name, uint64_t seed, uint32_t node_size,
                uint64_t cache, uint64_t budget, unsigned phases)
{
  struct shaped *s = calloc (1, sizeof *s);
  uint64_t total = test_work (phases);
  struct nodecache_stats st;
  struct btree_root root;

  cr_assert (s);
  s->m = calloc (1, sizeof *s->m);
  s->keys = calloc (SHAPE_KEYS, sizeof *s->keys);
  cr_assert (s->m && s->keys);
  s->r.s = test_seed (name, seed);
  s->budget = budget;
  env_open (&s->e, 512 << 20, node_size, cache);
  s->maxv = btree_max_value (pool_cache (s->e.pool), 8);
  s->val = malloc (s->maxv);
  s->want = malloc (s->maxv);
  cr_assert (s->val && s->want);

  for (s->phase = 1; s->phase <= total; s->phase++) {
    shaped_phase (s);
    if (rng_below (&s->r, 3) == 0) {
      cr_assert_eq (pool_commit (s->e.pool), 0, "%s: commit at the end: %s",
                    s->what, cairn_errmsg ());
      s->commits++;
    }
    shaped_compare (s);
    btree_get_root (s->e.t, &root);
    s->max_level = MAX (s->max_level, root.bp.addr ? root.level : 0u);
    if (s->phase % SHAPE_FSCK_EVERY == 0) {
      /* fsck sees the pool as it was committed at the close. */
      shaped_reopen (s, true);
      shaped_compare (s);
    }
  }
  nodecache_stats (pool_cache (s->e.pool), &st);
  fprintf (stderr, "%s: %" PRIu64 " phases, %" PRIu64 " operations, %" PRIu64
           " commits, %" PRIu64 " reopens, %" PRIu64 " fsck runs; root level "
           "up to %u, %" PRIu64 " cache evictions\n", name, total, s->ops,
           s->commits, s->reopens, s->fscks, s->max_level,
           s->evictions + st.evictions);
  cr_assert_eq (pool_close (s->e.pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (s->e.dev, "at the end of the history");
  dev_close (s->e.dev);
  free (s->val);
  free (s->want);
  free (s->keys);
  free (s->m);
  free (s);
}

/* 4 KiB nodes, so that trees get deep, and a cache of 128 of them. */
Test (btree, shaped_histories)
{
  shaped_history ("btree.shaped_histories", 20260315, 4096, 512 << 10,
                  16 << 20, 144);
}

/* The same with 16 KiB nodes (the default size) and a cache of 64. */
Test (btree, shaped_histories_16k)
{
  shaped_history ("btree.shaped_histories_16k", 20260316, 16384, 1 << 20,
                  16 << 20, 40);
}
