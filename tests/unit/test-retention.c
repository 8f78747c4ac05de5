/* Unit tests for the retention policy (engine/retention.c): a table of
 * histories written from Proxmox Backup Server's documented prune
 * behaviour, a randomised comparison with a literal transcription of PBS's
 * mark_selections over strftime buckets, the calendar against the C
 * library, 100,000 checkpoints, and the policy's text form.  "Inv. N"
 * cites the invariants of retention.c's design note.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "retention.h"
#include "test-util.h"

/* ---------------------------------------------------------------- helpers */

/* Seconds since 1970 of a UTC time written "YYYY-MM-DDTHH:MM:SSZ". */
static int64_t
at (const char *s)
{
  struct tm tm = { 0 };
  const char *end = strptime (s, "%Y-%m-%dT%H:%M:%SZ", &tm);

  cr_assert (end != NULL && *end == '\0', "bad time in the test: %s", s);
  return (int64_t) timegm (&tm);
}

/* t as "YYYY-MM-DDTHH:MM:SSZ", for messages. */
static const char *
iso (int64_t t, char buf[32])
{
  time_t tt = (time_t) t;
  struct tm tm;

  if (gmtime_r (&tt, &tm) == NULL)
    snprintf (buf, 32, "%" PRId64, t);
  else
    strftime (buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/* Shuffle items (Fisher-Yates) so that no test relies on input order. */
static void
shuffle (struct ret_item *items, size_t n, struct rng *r)
{
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t) rng_below (r, i);
    struct ret_item tmp = items[i - 1];

    items[i - 1] = items[j];
    items[j] = tmp;
  }
}

/* ---------------------------------------------------------------- the table */

/* One checkpoint of a case: its time, whether it is protected, and the
 * mark it must get.
 */
struct ck {
  const char *when;
  const char *expect;
  bool protect;
};

/* A history (listed newest first: the first listed has the highest
 * generation), a policy and the time the collector runs at.
 */
struct tcase {
  const char *name;
  struct ret_policy pol;
  const char *now;
  struct ck cks[16];
};

#define NOW_LATE "2030-01-01T00:00:00Z"
#define CK(when, expect) { (when), (expect), false }
#define PROT(when) { (when), "protected", true }

static const struct tcase cases[] = {
  { "keep-last alone keeps the N newest",
    { .keep_last = 3 }, NOW_LATE, {
      CK ("2026-12-02T10:00:05Z", "keep-last"),
      CK ("2026-12-02T10:00:04Z", "keep-last"),
      CK ("2026-12-01T09:00:00Z", "keep-last"),
      CK ("2026-11-01T09:00:00Z", "remove"),
      CK ("2025-11-01T09:00:00Z", "remove"),
    } },
  { "keep-last counts checkpoints, not seconds",
    { .keep_last = 2 }, NOW_LATE, {
      CK ("2026-12-02T10:00:00Z", "keep-last"),
      CK ("2026-12-02T10:00:00Z", "keep-last"),
      CK ("2026-12-02T10:00:00Z", "remove"),
    } },
  { "hourly over a history with gaps: empty hours do not count",
    { .keep_hourly = 3 }, NOW_LATE, {
      CK ("2026-12-02T10:50:00Z", "keep-hourly"),
      CK ("2026-12-02T10:10:00Z", "remove"),       /* its hour is taken */
      CK ("2026-12-02T08:59:59Z", "keep-hourly"),  /* hour 09 is empty */
      CK ("2026-12-02T08:00:00Z", "remove"),
      CK ("2026-12-02T05:30:00Z", "keep-hourly"),
      CK ("2026-12-02T04:00:00Z", "remove"),       /* past the third hour */
      CK ("2026-12-01T23:00:00Z", "remove"),
    } },
  { "daily only considers what hourly did not cover",
    { .keep_hourly = 2, .keep_daily = 2 }, NOW_LATE, {
      CK ("2026-12-02T10:50:00Z", "keep-hourly"),
      CK ("2026-12-02T10:10:00Z", "remove"),
      CK ("2026-12-02T09:30:00Z", "keep-hourly"),
      CK ("2026-12-02T08:00:00Z", "remove"),       /* day 12-02 is included */
      CK ("2026-12-01T22:00:00Z", "keep-daily"),
      CK ("2026-12-01T21:00:00Z", "remove"),
      CK ("2026-11-30T12:00:00Z", "keep-daily"),
      CK ("2026-11-29T12:00:00Z", "remove"),
    } },
  { "weekly across the ISO year boundary (2027-01-01 is in 2026-W53)",
    { .keep_weekly = 3 }, NOW_LATE, {
      CK ("2027-01-05T12:00:00Z", "keep-weekly"),  /* 2027-W01 */
      CK ("2027-01-03T12:00:00Z", "keep-weekly"),  /* Sunday of 2026-W53 */
      CK ("2027-01-01T12:00:00Z", "remove"),       /* 2026-W53 */
      CK ("2026-12-31T12:00:00Z", "remove"),       /* 2026-W53 */
      CK ("2026-12-28T00:00:00Z", "remove"),       /* its Monday */
      CK ("2026-12-27T23:59:59Z", "keep-weekly"),  /* 2026-W52 */
      CK ("2026-12-21T00:00:00Z", "remove"),
      CK ("2026-12-20T00:00:00Z", "remove"),       /* past the third week */
    } },
  { "monthly, with an empty January",
    { .keep_monthly = 3 }, NOW_LATE, {
      CK ("2027-03-01T00:00:00Z", "keep-monthly"),
      CK ("2027-02-28T23:59:59Z", "keep-monthly"),
      CK ("2027-02-01T00:00:00Z", "remove"),
      CK ("2026-12-31T23:59:59Z", "keep-monthly"),
      CK ("2026-12-01T00:00:00Z", "remove"),
      CK ("2026-11-30T23:59:59Z", "remove"),
    } },
  { "minutely, then hourly, daily, weekly and monthly together",
    { .keep_minutely = 2, .keep_hourly = 2, .keep_daily = 2,
      .keep_weekly = 2, .keep_monthly = 2 }, NOW_LATE, {
      CK ("2026-12-02T10:59:30Z", "keep-minutely"),
      CK ("2026-12-02T10:59:10Z", "remove"),
      CK ("2026-12-02T10:58:00Z", "keep-minutely"),
      CK ("2026-12-02T10:30:00Z", "remove"),       /* hour 10 is included */
      CK ("2026-12-02T09:15:00Z", "keep-hourly"),
      CK ("2026-12-02T08:15:00Z", "keep-hourly"),
      CK ("2026-12-02T07:15:00Z", "remove"),       /* day 12-02 is included */
      CK ("2026-12-01T07:15:00Z", "keep-daily"),   /* Tuesday, W49 */
      CK ("2026-11-30T07:15:00Z", "keep-daily"),   /* Monday, W49 */
      CK ("2026-11-29T07:15:00Z", "keep-weekly"),  /* Sunday, W48 */
      CK ("2026-11-23T07:15:00Z", "remove"),       /* Monday, W48 */
      CK ("2026-11-22T07:15:00Z", "keep-weekly"),  /* W47; November included */
      CK ("2026-11-15T07:15:00Z", "remove"),
      CK ("2026-10-15T07:15:00Z", "keep-monthly"),
      CK ("2026-09-15T07:15:00Z", "keep-monthly"),
      CK ("2026-08-15T07:15:00Z", "remove"),
    } },
  { "protected checkpoints are kept and take no bucket",
    { .keep_hourly = 3 }, NOW_LATE, {
      CK ("2026-12-02T10:50:00Z", "keep-hourly"),
      PROT ("2026-12-02T10:20:00Z"),
      PROT ("2026-12-02T09:40:00Z"),
      CK ("2026-12-02T09:30:00Z", "keep-hourly"),  /* hour 09 is still free */
      PROT ("2026-12-02T08:30:00Z"), /* alone: not counted */
      CK ("2026-12-02T07:15:00Z", "keep-hourly"),
      CK ("2026-12-02T07:00:00Z", "remove"),
      CK ("2026-12-02T06:00:00Z", "remove"),
      PROT ("2026-12-02T05:00:00Z"), /* past the walk */
    } },
  { "a protected checkpoint does not make its day included",
    { .keep_hourly = 1, .keep_daily = 1 }, NOW_LATE, {
      PROT ("2026-12-02T10:00:00Z"),
      CK ("2026-12-02T09:00:00Z", "keep-hourly"),
      PROT ("2026-12-01T10:00:00Z"),
      CK ("2026-12-01T09:00:00Z", "keep-daily"),
      CK ("2026-11-30T09:00:00Z", "remove"),
    } },
  { "keep-within: younger than 1h is kept, exactly 1h old is not, the "
    "future is",
    { .keep_within = 3600, .keep_hourly = 1 }, "2026-12-02T12:00:00Z", {
      CK ("2026-12-02T12:30:00Z", "keep-within"),  /* clock stepped back */
      CK ("2026-12-02T12:00:00Z", "keep-within"),  /* age 0 */
      PROT ("2026-12-02T11:30:00Z"),
      CK ("2026-12-02T11:00:01Z", "keep-within"),  /* age 3599 */
      CK ("2026-12-02T11:00:00Z", "remove"),       /* age 3600, hour included */
      CK ("2026-12-02T10:59:59Z", "keep-hourly"),
      CK ("2026-12-02T10:00:00Z", "remove"),
      CK ("2026-12-02T09:00:00Z", "remove"),
    } },
  { "keep-within items count as included for the rules after it",
    { .keep_within = 7200, .keep_last = 1, .keep_daily = 1 },
    "2026-12-02T12:00:00Z", {
      CK ("2026-12-02T11:00:00Z", "keep-within"),
      CK ("2026-12-02T10:00:01Z", "keep-within"),
      CK ("2026-12-02T09:00:00Z", "keep-last"),    /* the newest unmarked */
      CK ("2026-12-02T08:00:00Z", "remove"),       /* day 12-02 is included */
      CK ("2026-12-01T08:00:00Z", "keep-daily"),
      CK ("2026-11-30T08:00:00Z", "remove"),
    } },
  { "an all-zero policy removes everything not protected, the future too",
    { 0 }, "2026-12-02T12:00:00Z", {
      CK ("2026-12-03T12:00:00Z", "remove"),
      CK ("2026-12-02T12:00:00Z", "remove"),
      PROT ("2026-12-02T11:59:59Z"),
      CK ("2026-12-02T11:00:00Z", "remove"),
    } },
  { "the same second several times: the highest generation is the newest",
    { .keep_last = 1, .keep_minutely = 2 }, NOW_LATE, {
      CK ("2026-12-02T10:00:30Z", "keep-last"),
      CK ("2026-12-02T10:00:30Z", "remove"),       /* minute is included */
      CK ("2026-12-02T10:00:30Z", "remove"),
      CK ("2026-12-02T09:59:10Z", "keep-minutely"),
      CK ("2026-12-02T09:59:10Z", "remove"),
      CK ("2026-12-02T09:58:00Z", "keep-minutely"),
      CK ("2026-12-02T09:57:00Z", "remove"),
    } },
  { "before 1970, buckets round down",
    { .keep_hourly = 2 }, NOW_LATE, {
      CK ("1970-01-01T00:00:00Z", "keep-hourly"),
      CK ("1969-12-31T23:59:59Z", "keep-hourly"),
      CK ("1969-12-31T23:00:00Z", "remove"),
      CK ("1969-12-31T22:59:59Z", "remove"),
    } },
};

/* Inv. 1-5 on every case of the table, each run with its input shuffled
 * several ways (inv. 2).
 */
Test (retention, table)
{
  uint64_t seed = test_seed ("retention/table", 27);
  struct rng rng = { seed };

  for (size_t c = 0; c < ARRAY_SIZE (cases); c++) {
    const struct tcase *tc = &cases[c];
    struct ret_item items[16];
    size_t n = 0;

    while (n < ARRAY_SIZE (tc->cks) && tc->cks[n].when)
      n++;
    for (int round = 0; round < 4; round++) {
      for (size_t i = 0; i < n; i++)
        items[i] = (struct ret_item) {
          .gen = 100 + n - i, .time = at (tc->cks[i].when),
          .protect = tc->cks[i].protect, .mark = RET_PROTECTED + 1,
        };
      if (round > 0)
        shuffle (items, n, &rng);
      cr_assert_eq (retention_apply (&tc->pol, at (tc->now), items, n), 0);
      for (size_t i = 0; i < n; i++) {
        size_t k = 100 + n - items[i].gen;     /* its row in the table */

        cr_expect_str_eq (retention_mark_name (items[i].mark),
                          tc->cks[k].expect, "%s: %s (gen %" PRIu64
                          ", round %d)", tc->name, tc->cks[k].when,
                          items[i].gen, round);
      }
    }
  }
}

/* No checkpoints: nothing to do, nothing touched. */
Test (retention, empty)
{
  struct ret_policy p = RET_POLICY_DEFAULT;

  cr_assert_eq (retention_apply (&p, 0, NULL, 0), 0);
}

/* ---------------------------------------------------------------- PBS model */

/* The bucket of rule r that t falls in, as strftime of gmtime_r prints
 * it (%G-W%V for the week), or "" for a rule with none.
 */
static const char *
libc_bucket (enum ret_mark r, int64_t t, char buf[64])
{
  time_t tt = (time_t) t;
  struct tm tm;

  cr_assert_not_null (gmtime_r (&tt, &tm));
  switch (r) {
  case RET_KEEP_MINUTELY: strftime (buf, 64, "%Y-%m-%d %H:%M", &tm); break;
  case RET_KEEP_HOURLY: strftime (buf, 64, "%Y-%m-%d %H", &tm); break;
  case RET_KEEP_DAILY: strftime (buf, 64, "%Y-%m-%d", &tm); break;
  case RET_KEEP_WEEKLY: strftime (buf, 64, "%G-W%V", &tm); break;
  case RET_KEEP_MONTHLY: strftime (buf, 64, "%Y-%m", &tm); break;
  default: buf[0] = '\0';
  }
  return buf;
}

/* A bucket of rule r as PBS names it: strftime of the UTC time (PBS uses
 * local time), keep-last by the checkpoint.
 */
static void
model_bucket (enum ret_mark r, const struct ret_item *it, char buf[64])
{
  if (r == RET_KEEP_LAST)
    snprintf (buf, 64, "%" PRIu64, it->gen);
  else
    libc_bucket (r, it->time, buf);
}

/* Whether set (of n strings of 64 bytes) holds s. */
static bool
set_has (char (*set)[64], size_t n, const char *s)
{
  for (size_t i = 0; i < n; i++)
    if (strcmp (set[i], s) == 0)
      return true;
  return false;
}

#define UNMARKED (-1)

/* PBS's mark_selections, line for line over the sorted list, with sets as
 * arrays (this is the quadratic reference the module must agree with).
 */
static void
model_select (struct ret_item *list, int *mark, size_t n, enum ret_mark r,
              uint32_t keep)
{
  char (*included)[64] = calloc (n + 1, 64), (*already)[64] = calloc (n + 1, 64);
  size_t ninc = 0, nalr = 0;
  char id[64];

  cr_assert (included && already);
  for (size_t i = 0; i < n; i++)
    if (mark[i] != UNMARKED && mark[i] != RET_REMOVE &&
        mark[i] != RET_PROTECTED) {
      model_bucket (r, &list[i], id);
      strcpy (already[nalr++], id);
    }
  for (size_t i = 0; i < n; i++) {
    if (mark[i] != UNMARKED)
      continue;
    if (list[i].protect) {
      mark[i] = RET_PROTECTED;
      continue;
    }
    model_bucket (r, &list[i], id);
    if (set_has (already, nalr, id))
      continue;
    if (!set_has (included, ninc, id)) {
      if (ninc >= keep)
        break;
      strcpy (included[ninc++], id);
      mark[i] = (int) r;
    }
    else
      mark[i] = RET_REMOVE;
  }
  free (included);
  free (already);
}

/* qsort order of the model: newest first by time, then generation. */
static int
model_cmp (const void *a, const void *b)
{
  const struct ret_item *x = a, *y = b;

  if (x->time != y->time)
    return x->time > y->time ? -1 : 1;
  return x->gen > y->gen ? -1 : x->gen < y->gen;
}

/* PBS's compute_prune_info with keep-within first, on a sorted copy;
 * writes the marks into items (whose generations are 1 to n).
 */
static void
model_apply (const struct ret_policy *p, int64_t now, struct ret_item *items,
             size_t n)
{
  static const enum ret_mark rules[] = {
    RET_KEEP_LAST, RET_KEEP_MINUTELY, RET_KEEP_HOURLY, RET_KEEP_DAILY,
    RET_KEEP_WEEKLY, RET_KEEP_MONTHLY,
  };
  const uint32_t counts[] = {
    p->keep_last, p->keep_minutely, p->keep_hourly, p->keep_daily,
    p->keep_weekly, p->keep_monthly,
  };
  struct ret_item *list = malloc ((n + 1) * sizeof *list);
  int *mark = malloc ((n + 1) * sizeof *mark);
  size_t *where = malloc ((n + 1) * sizeof *where);

  cr_assert (list && mark && where);
  memcpy (list, items, n * sizeof *list);
  qsort (list, n, sizeof *list, model_cmp);
  for (size_t i = 0; i < n; i++) {
    mark[i] = UNMARKED;
    /* Younger than keep_within: now - time < keep_within, in 128 bits. */
    if (!list[i].protect && p->keep_within > 0 &&
        (__int128) now - list[i].time < (__int128) p->keep_within)
      mark[i] = RET_KEEP_WITHIN;
  }
  for (size_t r = 0; r < ARRAY_SIZE (rules); r++)
    model_select (list, mark, n, rules[r], counts[r]);
  /* Generations are 1 to n: where each one is in items. */
  for (size_t j = 0; j < n; j++)
    where[items[j].gen - 1] = j;
  for (size_t i = 0; i < n; i++)
    items[where[list[i].gen - 1]].mark = list[i].protect ? RET_PROTECTED
      : mark[i] == UNMARKED ? RET_REMOVE : (enum ret_mark) mark[i];
  free (list);
  free (mark);
  free (where);
}

/* A random gap between two checkpoints: often none or seconds, sometimes
 * minutes, hours, days or weeks, so that buckets are both shared and empty.
 */
static int64_t
random_gap (struct rng *r)
{
  switch (rng_below (r, 8)) {
  case 0: return 0;
  case 1: case 2: return (int64_t) rng_below (r, 60);
  case 3: return (int64_t) rng_below (r, 3600);
  case 4: return (int64_t) rng_below (r, 4 * 3600);
  case 5: return (int64_t) rng_below (r, 2 * 86400);
  case 6: return (int64_t) rng_below (r, 10 * 86400);
  default: return (int64_t) rng_below (r, 60 * 86400);
  }
}

/* A random count: off a third of the time, else 1 to 6. */
static uint32_t
random_count (struct rng *r)
{
  return rng_below (r, 3) == 0 ? 0 : 1 + (uint32_t) rng_below (r, 6);
}

/* Inv. 1-5: on random histories and policies, the module marks exactly as
 * the transcription of PBS does (its buckets from strftime: %G/%V for
 * weeks), whatever the input order.
 */
Test (retention, agrees_with_pbs_model)
{
  uint64_t seed = test_seed ("retention/agrees_with_pbs_model", 2027);
  struct rng rng = { seed };
  unsigned rounds = test_work (1500);
  struct ret_item *items = calloc (400, sizeof *items);
  struct ret_item *want = calloc (400, sizeof *want);

  cr_assert (items && want);
  for (unsigned round = 0; round < rounds; round++) {
    size_t n = (size_t) rng_below (&rng, 400);
    /* Newest between 1960 and 2060. */
    int64_t t = -315619200 + (int64_t) rng_below (&rng, 3155760000u);
    int64_t newest = t, now;
    struct ret_policy p = {
      .keep_last = random_count (&rng), .keep_minutely = random_count (&rng),
      .keep_hourly = random_count (&rng), .keep_daily = random_count (&rng),
      .keep_weekly = random_count (&rng), .keep_monthly = random_count (&rng),
    };
    char tb[32];

    switch (rng_below (&rng, 4)) {
    case 0: p.keep_within = 0; break;
    case 1: p.keep_within = 3600; break;
    default: p.keep_within = rng_below (&rng, 3 * 86400); break;
    }
    now = newest + (int64_t) rng_below (&rng, 4 * 3600) - 3600;
    for (size_t i = 0; i < n; i++) {
      items[i] = (struct ret_item) { .gen = 1 + i, .time = t,
                                     .protect = rng_below (&rng, 8) == 0,
                                     .mark = RET_PROTECTED + 1 };
      t -= random_gap (&rng);
    }
    /* Generations in a random order: clocks step back. */
    for (size_t i = 0; i + 1 < n; i++)
      if (rng_below (&rng, 10) == 0) {
        uint64_t g = items[i].gen;
        items[i].gen = items[i + 1].gen;
        items[i + 1].gen = g;
      }
    shuffle (items, n, &rng);
    memcpy (want, items, n * sizeof *items);
    model_apply (&p, now, want, n);
    cr_assert_eq (retention_apply (&p, now, items, n), 0);
    for (size_t i = 0; i < n; i++)
      cr_assert_eq (items[i].mark, want[i].mark,
                    "seed %" PRIu64 " round %u: checkpoint %" PRIu64 " at %s "
                    "(%s) is %s, PBS's rules say %s", seed, round, items[i].gen,
                    iso (items[i].time, tb),
                    items[i].protect ? "protected" : "not protected",
                    retention_mark_name (items[i].mark),
                    retention_mark_name (want[i].mark));
  }
  free (items);
  free (want);
}

/* ---------------------------------------------------------------- calendar */

/* Buckets of real dates, checked with GNU date +%G-W%V (and by hand). */
Test (retention, bucket_names)
{
  static const struct {
    const char *when;
    enum ret_mark rule;
    const char *want;
  } t[] = {
    { "2026-12-28T00:00:00Z", RET_KEEP_WEEKLY, "2026-W53" },
    { "2026-12-31T12:00:00Z", RET_KEEP_WEEKLY, "2026-W53" },
    { "2027-01-01T00:00:00Z", RET_KEEP_WEEKLY, "2026-W53" },
    { "2027-01-03T23:59:59Z", RET_KEEP_WEEKLY, "2026-W53" },
    { "2027-01-04T00:00:00Z", RET_KEEP_WEEKLY, "2027-W01" },
    { "2024-12-30T00:00:00Z", RET_KEEP_WEEKLY, "2025-W01" },
    { "2021-01-03T12:00:00Z", RET_KEEP_WEEKLY, "2020-W53" },
    { "2008-12-29T12:00:00Z", RET_KEEP_WEEKLY, "2009-W01" },
    { "2010-01-03T12:00:00Z", RET_KEEP_WEEKLY, "2009-W53" },
    { "1969-12-29T00:00:00Z", RET_KEEP_WEEKLY, "1970-W01" },
    { "1969-12-28T23:59:59Z", RET_KEEP_WEEKLY, "1969-W52" },
    { "2026-12-31T23:59:59Z", RET_KEEP_MONTHLY, "2026-12" },
    { "2027-01-01T00:00:00Z", RET_KEEP_MONTHLY, "2027-01" },
    { "2028-02-29T12:00:00Z", RET_KEEP_MONTHLY, "2028-02" },
    { "2028-02-29T12:00:00Z", RET_KEEP_DAILY, "2028-02-29" },
    { "2028-03-01T00:00:00Z", RET_KEEP_DAILY, "2028-03-01" },
    { "2026-12-31T23:59:59Z", RET_KEEP_HOURLY, "2026-12-31 23" },
    { "2026-12-31T23:59:59Z", RET_KEEP_MINUTELY, "2026-12-31 23:59" },
    { "1969-12-31T23:59:59Z", RET_KEEP_MINUTELY, "1969-12-31 23:59" },
    { "2026-12-31T23:59:59Z", RET_KEEP_LAST, "" },
    { "2026-12-31T23:59:59Z", RET_REMOVE, "" },
  };
  char buf[RET_BUCKET_MAX];

  for (size_t i = 0; i < ARRAY_SIZE (t); i++)
    cr_expect_str_eq (retention_bucket_name (t[i].rule, at (t[i].when), buf),
                      t[i].want, "%s bucket of %s",
                      retention_mark_name (t[i].rule), t[i].when);
}

/* Every day from 1800 to 2400, at a random second of it: the bucket names
 * are what strftime of gmtime_r prints (%G-W%V for the week).
 */
Test (retention, calendar_against_libc)
{
  uint64_t seed = test_seed ("retention/calendar_against_libc", 1582);
  struct rng rng = { seed };
  static const enum ret_mark rules[] = {
    RET_KEEP_MINUTELY, RET_KEEP_HOURLY, RET_KEEP_DAILY, RET_KEEP_WEEKLY,
    RET_KEEP_MONTHLY,
  };
  char got[RET_BUCKET_MAX], want[64];

  for (int64_t day = -62135; day < 157054; day++) {
    int64_t t = day * 86400 + (int64_t) rng_below (&rng, 86400);

    for (size_t i = 0; i < ARRAY_SIZE (rules); i++) {
      libc_bucket (rules[i], t, want);
      retention_bucket_name (rules[i], t, got);
      if (strcmp (got, want) != 0)
        cr_assert_str_eq (got, want, "seed %" PRIu64 ": %s bucket of %" PRId64,
                          seed, retention_mark_name (rules[i]), t);
    }
  }
}

/* ---------------------------------------------------------------- scale */

/* 100,000 checkpoints, one a minute for 69 days, shuffled: keep-hourly 24
 * keeps exactly the newest of each of the 24 newest hours, keep-daily 7
 * the last of each of the 7 days before those hours' oldest day, and
 * nothing else stays.
 */
Test (retention, hundred_thousand)
{
  uint64_t seed = test_seed ("retention/hundred_thousand", 100000);
  struct rng rng = { seed };
  const size_t n = 100000;
  const int64_t base = at ("2026-01-01T00:00:00Z");
  const int64_t newest = base + 60 * (int64_t) (n - 1);
  struct ret_policy p = { .keep_hourly = 24, .keep_daily = 7 };
  struct ret_item *items = calloc (n, sizeof *items);
  size_t hourly = 0, daily = 0;
  int64_t oldest_hour = newest / 3600 - 23;
  int64_t oldest_day = oldest_hour * 3600 / 86400;
  char tb[32];

  cr_assert_not_null (items);
  for (size_t i = 0; i < n; i++)
    items[i] = (struct ret_item) { .gen = i + 1, .time = base + 60 * (int64_t) i };
  shuffle (items, n, &rng);
  cr_assert_eq (retention_apply (&p, newest + 1, items, n), 0);
  for (size_t i = 0; i < n; i++) {
    int64_t t = items[i].time;
    bool newest_of_hour = t % 3600 == 3540 || t == newest;

    if (t / 3600 >= oldest_hour && newest_of_hour) {
      cr_assert_eq (items[i].mark, RET_KEEP_HOURLY, "%s is %s", iso (t, tb),
                    retention_mark_name (items[i].mark));
      hourly++;
    }
    else if (t / 86400 < oldest_day && t / 86400 >= oldest_day - 7 &&
             t % 86400 == 86340) {
      cr_assert_eq (items[i].mark, RET_KEEP_DAILY, "%s is %s", iso (t, tb),
                    retention_mark_name (items[i].mark));
      daily++;
    }
    else
      cr_assert_eq (items[i].mark, RET_REMOVE, "%s is %s", iso (t, tb),
                    retention_mark_name (items[i].mark));
  }
  cr_assert_eq (hourly, 24);
  cr_assert_eq (daily, 7);
  free (items);
}

/* ---------------------------------------------------------------- text form */

Test (retention, mark_names)
{
  static const char *const want[] = {
    "remove", "keep-within", "keep-last", "keep-minutely", "keep-hourly",
    "keep-daily", "keep-weekly", "keep-monthly", "protected",
  };

  for (int m = RET_REMOVE; m <= RET_PROTECTED; m++)
    cr_expect_str_eq (retention_mark_name ((enum ret_mark) m), want[m]);
  cr_expect_str_eq (retention_mark_name ((enum ret_mark) 99), "unknown");
}

/* The default is NILFS2's protection period: an hour, no counts. */
Test (retention, default_policy)
{
  struct ret_policy p = RET_POLICY_DEFAULT;
  char buf[RET_POLICY_TEXT_MAX];

  cr_assert_str_eq (retention_encode (&p, buf), "keep-within=1h");
}

/* Durations in every unit and plain seconds, and what is not one. */
Test (retention, parse_durations)
{
  static const struct {
    const char *s;
    uint64_t secs;
  } ok[] = {
    { "90s", 90 }, { "15m", 900 }, { "1h", 3600 }, { "7d", 604800 },
    { "2w", 1209600 }, { "3600", 3600 }, { "0", 0 }, { "0h", 0 },
    { "007m", 420 }, { "18446744073709551615", UINT64_MAX },
    { "30500568904943w", 30500568904943ull * 604800 },
  };
  static const struct {
    const char *s, *msg;
  } bad[] = {
    { "", "is not a duration: write a whole number of seconds, or one "
      "followed by s, m, h, d or w (90s, 15m, 1h, 7d, 2w); 0 keeps none by age" },
    { "h", "is not a duration" }, { "1.5h", "is not a duration" },
    { "-1", "is not a duration" }, { "+1", "is not a duration" },
    { "1H", "is not a duration" }, { "1 h", "is not a duration" },
    { " 1h", "is not a duration" }, { "1hh", "is not a duration" },
    { "1y", "is not a duration" }, { "one hour", "is not a duration" },
    { "18446744073709551616", "is too long: at most 18446744073709551615 "
      "seconds" },
    { "30500568904944w", "is too long" },
    { "99999999999999999999999h", "is too long" },
  };

  for (size_t i = 0; i < ARRAY_SIZE (ok); i++) {
    struct ret_policy p = { .keep_within = 12345 };

    cr_assert_eq (retention_parse (&p, "keep-within", ok[i].s), 0, "%s: %s",
                  ok[i].s, cairn_errmsg ());
    cr_expect_eq (p.keep_within, ok[i].secs, "%s", ok[i].s);
  }
  for (size_t i = 0; i < ARRAY_SIZE (bad); i++) {
    struct ret_policy p = { .keep_within = 12345 };
    char want[256];

    cairn_error_clear ();
    cr_assert_eq (retention_parse (&p, "keep-within", bad[i].s), -EINVAL,
                  "'%s'", bad[i].s);
    snprintf (want, sizeof want, "keep-within '%s' %s", bad[i].s, bad[i].msg);
    cr_expect (strncmp (cairn_errmsg (), want, strlen (want)) == 0,
               "'%s': message '%s'", bad[i].s, cairn_errmsg ());
    cr_expect_eq (p.keep_within, 12345, "'%s' changed the policy", bad[i].s);
  }
}

/* Counts for each rule, and what is not one. */
Test (retention, parse_counts)
{
  static const char *const keys[] = {
    "keep-last", "keep-minutely", "keep-hourly", "keep-daily", "keep-weekly",
    "keep-monthly",
  };
  static const char *const bad[] = {
    "", "-1", "+1", "4294967296", "1e3", "abc", " 1", "1 ", "24h", "0x10",
  };

  for (size_t k = 0; k < ARRAY_SIZE (keys); k++) {
    struct ret_policy p = { 0 }, before;
    uint32_t *fields[] = {
      &p.keep_last, &p.keep_minutely, &p.keep_hourly, &p.keep_daily,
      &p.keep_weekly, &p.keep_monthly,
    };

    cr_assert_eq (retention_parse (&p, keys[k], "24"), 0);
    cr_expect_eq (*fields[k], 24, "%s", keys[k]);
    cr_assert_eq (retention_parse (&p, keys[k], "4294967295"), 0);
    cr_expect_eq (*fields[k], UINT32_MAX, "%s", keys[k]);
    cr_assert_eq (retention_parse (&p, keys[k], "0"), 0);
    cr_expect_eq (*fields[k], 0, "%s", keys[k]);
    /* Only that field. */
    for (size_t j = 0; j < ARRAY_SIZE (fields); j++)
      cr_expect_eq (*fields[j], 0);
    cr_expect_eq (p.keep_within, 0);

    *fields[k] = 7;
    before = p;
    for (size_t b = 0; b < ARRAY_SIZE (bad); b++) {
      char want[256];

      cr_assert_eq (retention_parse (&p, keys[k], bad[b]), -EINVAL, "%s '%s'",
                    keys[k], bad[b]);
      snprintf (want, sizeof want, "%s '%s' is not a count: write a whole "
                "number from 0 to 4294967295 (0 turns the rule off)", keys[k],
                bad[b]);
      cr_expect_str_eq (cairn_errmsg (), want);
      cr_expect (memcmp (&p, &before, sizeof p) == 0, "%s '%s' changed it",
                 keys[k], bad[b]);
    }
  }
}

Test (retention, parse_unknown_option)
{
  struct ret_policy p = { 0 };

  cr_assert_eq (retention_parse (&p, "keep-yearly", "3"), -EINVAL);
  cr_expect_str_eq (cairn_errmsg (), "unknown retention option 'keep-yearly': "
                    "use keep-within, keep-last, keep-minutely, keep-hourly, "
                    "keep-daily, keep-weekly or keep-monthly");
  cr_assert_eq (retention_parse (&p, "", "3"), -EINVAL);
  cr_assert_eq (retention_parse (&p, "keep-within=", "3"), -EINVAL);
  cr_assert_eq (retention_parse (&p, "remove", "3"), -EINVAL);
  cr_assert_eq (retention_parse (&p, "protected", "3"), -EINVAL);
}

/* The largest unit that divides, and back. */
Test (retention, format_durations)
{
  static const struct {
    uint64_t secs;
    const char *s;
  } t[] = {
    { 0, "0" }, { 1, "1s" }, { 59, "59s" }, { 60, "1m" }, { 90, "90s" },
    { 3600, "1h" }, { 5400, "90m" }, { 86400, "1d" }, { 604800, "1w" },
    { 1209600, "2w" }, { 691200, "8d" }, { 90000, "25h" },
    { UINT64_MAX, "18446744073709551615s" },
  };
  uint64_t seed = test_seed ("retention/format_durations", 3600);
  struct rng rng = { seed };
  char buf[RET_DURATION_MAX];

  for (size_t i = 0; i < ARRAY_SIZE (t); i++)
    cr_expect_str_eq (retention_format_duration (t[i].secs, buf), t[i].s);
  for (int i = 0; i < 10000; i++) {
    static const uint64_t unit[] = { 1, 60, 3600, 86400, 604800 };
    uint64_t secs = rng_next (&rng) >> rng_below (&rng, 64);
    struct ret_policy p = { 0 };

    if (i % 2)
      secs = (secs % 100000) * unit[rng_below (&rng, 5)];
    retention_format_duration (secs, buf);
    cr_assert_eq (retention_parse (&p, "keep-within", buf), 0, "seed %" PRIu64
                  ": %s: %s", seed, buf, cairn_errmsg ());
    cr_assert_eq (p.keep_within, secs, "seed %" PRIu64 ": %s", seed, buf);
  }
}

/* What is stored, and that decoding gives back what was encoded. */
Test (retention, encode_decode)
{
  struct ret_policy full = {
    .keep_within = 1209600, .keep_last = 1, .keep_minutely = 2,
    .keep_hourly = 24, .keep_daily = 7, .keep_weekly = 4, .keep_monthly = 12,
  };
  struct ret_policy most = {
    .keep_within = UINT64_MAX, .keep_last = UINT32_MAX,
    .keep_minutely = UINT32_MAX, .keep_hourly = UINT32_MAX,
    .keep_daily = UINT32_MAX, .keep_weekly = UINT32_MAX,
    .keep_monthly = UINT32_MAX,
  };
  struct ret_policy zero = { 0 }, q;
  uint64_t seed = test_seed ("retention/encode_decode", 12);
  struct rng rng = { seed };
  char buf[RET_POLICY_TEXT_MAX];

  cr_expect_str_eq (retention_encode (&full, buf),
                    "keep-within=2w,keep-last=1,keep-minutely=2,"
                    "keep-hourly=24,keep-daily=7,keep-weekly=4,"
                    "keep-monthly=12");
  cr_expect_str_eq (retention_encode (&zero, buf), "keep-within=0");
  retention_encode (&most, buf);
  cr_assert_eq (strlen (buf), 171, "the longest encoding: %s", buf);
  cr_assert_eq (retention_decode (&q, buf, strlen (buf)), 0, "%s",
                cairn_errmsg ());
  cr_assert (memcmp (&q, &most, sizeof q) == 0);

  /* Any order of the options, any form of the duration. */
  cr_assert_eq (retention_decode (&q, "keep-daily=7,keep-within=3600", 29), 0,
                "%s", cairn_errmsg ());
  cr_expect_eq (q.keep_within, 3600);
  cr_expect_eq (q.keep_daily, 7);
  cr_expect_eq (q.keep_last + q.keep_minutely + q.keep_hourly + q.keep_weekly +
                q.keep_monthly, 0);
  /* len is what counts, not a NUL. */
  cr_assert_eq (retention_decode (&q, "keep-within=1h,keep-last=5XYZ", 26), 0,
                "%s", cairn_errmsg ());
  cr_expect_eq (q.keep_last, 5);

  for (int i = 0; i < 10000; i++) {
    struct ret_policy p = {
      .keep_within = rng_next (&rng) >> rng_below (&rng, 64),
      .keep_last = (uint32_t) (rng_next (&rng) >> rng_below (&rng, 33)),
      .keep_minutely = (uint32_t) rng_below (&rng, 3),
      .keep_hourly = (uint32_t) rng_below (&rng, 100),
      .keep_daily = (uint32_t) rng_below (&rng, 2),
      .keep_weekly = (uint32_t) (rng_next (&rng) >> 32),
      .keep_monthly = (uint32_t) rng_below (&rng, 20),
    };

    retention_encode (&p, buf);
    cr_assert_eq (retention_decode (&q, buf, strlen (buf)), 0, "seed %" PRIu64
                  ": %s: %s", seed, buf, cairn_errmsg ());
    cr_assert (memcmp (&q, &p, sizeof q) == 0, "seed %" PRIu64 ": %s", seed,
               buf);
  }
}

/* Corrupt records: -EIO naming what is wrong, and the policy untouched. */
Test (retention, decode_corrupt)
{
  static const struct {
    const char *text;
    size_t len;
    const char *msg;
  } t[] = {
    { "", 0, "corrupt retention policy: it is empty" },
    { "keep-within=1h\0keep-last=3", 26,
      "corrupt retention policy: it holds a NUL byte" },
    { "keep-hourly=24", 14,
      "corrupt retention policy 'keep-hourly=24': keep-within is missing" },
    { "keep-within=1h,keep-within=2h", 29,
      "corrupt retention policy 'keep-within=1h,keep-within=2h': "
      "keep-within appears twice" },
    { "keep-within=1h,keep-yearly=3", 28,
      "corrupt retention policy 'keep-within=1h,keep-yearly=3': unknown "
      "option 'keep-yearly'" },
    { "keep-within=1h,", 15,
      "corrupt retention policy 'keep-within=1h,': '' is not OPTION=VALUE" },
    { "keep-within", 11,
      "corrupt retention policy 'keep-within': 'keep-within' is not "
      "OPTION=VALUE" },
    { "keep-within=1x", 14,
      "corrupt retention policy 'keep-within=1x': keep-within has the bad "
      "value '1x'" },
    { "keep-within=", 12,
      "corrupt retention policy 'keep-within=': keep-within has the bad "
      "value ''" },
    { "keep-within=1h,keep-daily=4294967296", 36,
      "corrupt retention policy 'keep-within=1h,keep-daily=4294967296': "
      "keep-daily has the bad value '4294967296'" },
    { "keep-within=1h,keep-daily=-1", 28,
      "corrupt retention policy 'keep-within=1h,keep-daily=-1': keep-daily "
      "has the bad value '-1'" },
    { "=1h", 3, "corrupt retention policy '=1h': unknown option ''" },
    { "\x01\x02\x03\x04", 4, "corrupt retention policy '\x01\x02\x03\x04': "
      "'\x01\x02\x03\x04' is not OPTION=VALUE" },
  };
  char big[RET_POLICY_TEXT_MAX + 8];
  struct ret_policy q;

  for (size_t i = 0; i < ARRAY_SIZE (t); i++) {
    struct ret_policy p = { .keep_within = 77, .keep_daily = 5 };

    cairn_error_clear ();
    cr_assert_eq (retention_decode (&p, t[i].text, t[i].len), -EIO, "%s",
                  t[i].msg);
    cr_expect_str_eq (cairn_errmsg (), t[i].msg);
    cr_expect (p.keep_within == 77 && p.keep_daily == 5 && p.keep_last == 0,
               "%s: the policy changed", t[i].msg);
  }

  /* Longer than any encoding: refused before it is parsed.  One byte
   * shorter is parsed (and its number is too big).
   */
  memset (big, '1', sizeof big);
  memcpy (big, "keep-within=", 12);
  cr_assert_eq (retention_decode (&q, big, RET_POLICY_TEXT_MAX - 1), -EIO);
  cr_expect (strstr (cairn_errmsg (), "keep-within has the bad value '111") !=
             NULL, "%s", cairn_errmsg ());
  for (size_t len = RET_POLICY_TEXT_MAX; len <= RET_POLICY_TEXT_MAX + 1; len++) {
    struct ret_policy p = { 0 };
    char want[128];

    cr_assert_eq (retention_decode (&p, big, len), -EIO);
    snprintf (want, sizeof want, "corrupt retention policy: %zu bytes long, "
              "at most %d expected", len, RET_POLICY_TEXT_MAX - 1);
    cr_expect_str_eq (cairn_errmsg (), want);
  }
}
