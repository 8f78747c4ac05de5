/* Cairn engine: which continuous checkpoints a retention policy keeps.
 *
 * Design note.
 *
 * The rules are Proxmox Backup Server's prune, read in proxmox-backup's
 * pbs-datastore/src/prune.rs (compute_prune_info and mark_selections, at
 * commit 02db72678ffb) and described in its docs/maintenance.rst
 * ("Pruning": each option covers only what the ones before it did not, and
 * considers only older backups; the Prune Simulator shows the same).  PBS
 * sorts the list newest first and runs mark_selections once per option, in
 * the order last, hourly, daily, weekly, monthly, yearly: the bucket ids of
 * every item already marked Keep form a set "already included"; walking
 * newest first, an item that already has a mark is skipped, a protected
 * one is marked Protected and skipped, one whose bucket is already
 * included is skipped; the first item of any other bucket is kept if the
 * option has taken fewer than N buckets, else the walk stops; later items
 * of a bucket the option took are marked Remove.  At the end, protected
 * items are Protected and every unmarked item is removed.
 *
 * Where Cairn differs, and why:
 * - Buckets are in UTC, not local time (PBS uses strftime_local): a
 *   server's checkpoints must not be thinned differently because its
 *   time zone changed or a daylight-saving hour repeated.
 * - keep-minutely exists (checkpoints come every few seconds, backups
 *   rarely more than hourly) and keep-yearly does not (issue #27).
 * - keep-within runs first, as borg's and restic's do: it marks kept
 *   every item younger than the duration, and these count as kept for
 *   "already included" as PBS's Keep marks do.
 * - keep-last's bucket is the checkpoint itself.  PBS's is the backup's
 *   time string, which is unique among the backups of one group; two
 *   checkpoints can share a second, and keep-last 3 must keep 3.
 * - Nothing is "incomplete": a checkpoint exists only once committed, so
 *   PBS's KeepPartial has no counterpart.
 *
 * Invariants (the tests in tests/unit/test-retention.c cite them):
 * 1. Every item gets exactly one mark; an item is RET_PROTECTED if and
 *    only if it is protected.
 * 2. Items are ranked newest first by time, then by generation (higher is
 *    newer); the result does not depend on the order they are given in.
 * 3. keep-within W > 0 keeps exactly the unprotected items with
 *    now - time < W: one exactly W seconds old is not kept by it, and one
 *    dated after now (the clock was stepped back) is.  W = 0 keeps none.
 * 4. A thinning rule with count N keeps at most N items, each the newest
 *    unmarked item of a bucket that held no kept item before the rule
 *    ran, taking buckets newest first and stopping at the first bucket it
 *    cannot take; it removes the other unmarked items of the buckets it
 *    took and marks nothing past where it stopped.  A bucket no item falls
 *    in is not counted.
 * 5. Protected items take no bucket: they neither count toward N nor make
 *    their bucket already included.
 * 6. Each bucket id is a non-decreasing function of time, so in the ranked
 *    order a bucket's items are consecutive.  A rule therefore needs no set
 *    of buckets: it walks the runs of equal bucket once, and the whole
 *    policy costs the sort, O(n log n), plus O(n) per rule.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "retention.h"

/* An item in the ranked order, with its mark while the rules run. */
struct slot {
  int64_t time;
  uint64_t gen;
  size_t idx;               /* its index in the caller's array */
  enum ret_mark mark;
  bool marked;
};

static const char *const mark_names[] = {
  [RET_REMOVE] = "remove",
  [RET_KEEP_WITHIN] = "keep-within",
  [RET_KEEP_LAST] = "keep-last",
  [RET_KEEP_MINUTELY] = "keep-minutely",
  [RET_KEEP_HOURLY] = "keep-hourly",
  [RET_KEEP_DAILY] = "keep-daily",
  [RET_KEEP_WEEKLY] = "keep-weekly",
  [RET_KEEP_MONTHLY] = "keep-monthly",
  [RET_PROTECTED] = "protected",
};

/* Where each thinning rule's count is in a policy. */
static const size_t count_offset[] = {
  [RET_KEEP_LAST] = offsetof (struct ret_policy, keep_last),
  [RET_KEEP_MINUTELY] = offsetof (struct ret_policy, keep_minutely),
  [RET_KEEP_HOURLY] = offsetof (struct ret_policy, keep_hourly),
  [RET_KEEP_DAILY] = offsetof (struct ret_policy, keep_daily),
  [RET_KEEP_WEEKLY] = offsetof (struct ret_policy, keep_weekly),
  [RET_KEEP_MONTHLY] = offsetof (struct ret_policy, keep_monthly),
};

#define SECS_PER_DAY 86400

/* The count of thinning rule r (RET_KEEP_LAST to RET_KEEP_MONTHLY) in p. */
static uint32_t *
count_field (struct ret_policy *p, enum ret_mark r)
{
  return (uint32_t *) ((char *) p + count_offset[r]);
}

/* a / b rounded toward minus infinity (b > 0). */
static int64_t
floor_div (int64_t a, int64_t b)
{
  return a / b - (a % b < 0);
}

/* The proleptic Gregorian date of day z since 1970-01-01 (Howard
 * Hinnant's civil_from_days, the inverse of catalog-rec.c's
 * days_from_civil).
 */
static void
civil_from_days (int64_t z, int64_t *yp, unsigned *mp, unsigned *dp)
{
  int64_t era;
  unsigned doe, yoe, doy, mp0;

  z += 719468;
  era = (z >= 0 ? z : z - 146096) / 146097;
  doe = (unsigned) (z - era * 146097);
  yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  mp0 = (5 * doy + 2) / 153;
  *dp = doy - (153 * mp0 + 2) / 5 + 1;
  *mp = mp0 < 10 ? mp0 + 3 : mp0 - 9;
  *yp = (int64_t) yoe + era * 400 + (*mp <= 2);
}

/* The day number of the Monday that starts the ISO-8601 week of day
 * (1970-01-01 was a Thursday): it names the week as %G-W%V does.
 */
static int64_t
iso_monday (int64_t day)
{
  return day - (day + 3 - floor_div (day + 3, 7) * 7);
}

/* The bucket of rule r that time t falls in, as a number that grows with
 * t (invariant 6); rank is t's place in the ranked order, which keep-last
 * uses since its bucket is the item itself.
 */
static int64_t
bucket_of (enum ret_mark r, int64_t t, size_t rank)
{
  int64_t day = floor_div (t, SECS_PER_DAY), y;
  unsigned m, d;

  switch (r) {
  case RET_KEEP_LAST:
    return -(int64_t) rank;     /* ranked newest first: it must not grow */
  case RET_KEEP_MINUTELY:
    return floor_div (t, 60);
  case RET_KEEP_HOURLY:
    return floor_div (t, 3600);
  case RET_KEEP_DAILY:
    return day;
  case RET_KEEP_WEEKLY:
    return iso_monday (day);
  case RET_KEEP_MONTHLY:
    civil_from_days (day, &y, &m, &d);
    return y * 12 + m - 1;
  default:
    abort ();                   /* not a thinning rule: a caller's bug */
  }
}

/* Whether a mark keeps its item because a rule took its bucket. */
static bool
kept_by_rule (const struct slot *s)
{
  return s->marked && s->mark != RET_REMOVE && s->mark != RET_PROTECTED;
}

/* qsort order: newest first by time, then generation, then input index. */
static int
cmp_newest_first (const void *a, const void *b)
{
  const struct slot *x = a, *y = b;

  if (x->time != y->time)
    return x->time > y->time ? -1 : 1;
  if (x->gen != y->gen)
    return x->gen > y->gen ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Run thinning rule r with count n over the ranked slots (PBS's
 * mark_selections, walking runs of one bucket: invariants 4 to 6).
 */
static void
mark_rule (struct slot *s, size_t n, enum ret_mark r, uint32_t count)
{
  uint32_t taken = 0;
  size_t i = 0, j;

  while (i < n) {
    int64_t b = bucket_of (r, s[i].time, i);
    bool included = false, took = false;

    for (j = i; j < n && bucket_of (r, s[j].time, j) == b; j++)
      included |= kept_by_rule (&s[j]);
    for (size_t k = i; k < j && !included; k++) {
      if (s[k].marked)
        continue;
      if (!took) {
        if (taken >= count)
          return;
        s[k].mark = r;
        took = true;
        taken++;
      }
      else
        s[k].mark = RET_REMOVE;
      s[k].marked = true;
    }
    i = j;
  }
}

/* Mark every item by the policy: protected, keep-within, then each rule. */
int
retention_apply (const struct ret_policy *p, int64_t now,
                 struct ret_item *items, size_t n)
{
  struct ret_policy pol = *p;
  struct slot *s;

  if (n == 0)
    return 0;
  s = calloc (n, sizeof *s);
  if (s == NULL)
    return cairn_fail (-ENOMEM, "retention: no memory to rank %zu checkpoints",
                       n);
  for (size_t i = 0; i < n; i++)
    s[i] = (struct slot) { .time = items[i].time, .gen = items[i].gen,
                           .idx = i };
  qsort (s, n, sizeof *s, cmp_newest_first);

  /* Protected items first (invariant 5: whenever PBS's walk meets one it
   * marks it and moves on, so marking them all before changes nothing),
   * then keep-within (invariant 3).
   */
  for (size_t i = 0; i < n; i++) {
    if (items[s[i].idx].protect) {
      s[i].mark = RET_PROTECTED;
      s[i].marked = true;
    }
    else if (pol.keep_within > 0 &&
             (s[i].time >= now ||
              (uint64_t) now - (uint64_t) s[i].time < pol.keep_within)) {
      s[i].mark = RET_KEEP_WITHIN;
      s[i].marked = true;
    }
  }
  for (enum ret_mark r = RET_KEEP_LAST; r <= RET_KEEP_MONTHLY; r++)
    if (*count_field (&pol, r) > 0)
      mark_rule (s, n, r, *count_field (&pol, r));

  for (size_t i = 0; i < n; i++)
    items[s[i].idx].mark = s[i].marked ? s[i].mark : RET_REMOVE;
  free (s);
  return 0;
}

/* The option's spelling of a mark. */
const char *
retention_mark_name (enum ret_mark m)
{
  if ((unsigned) m < ARRAY_SIZE (mark_names))
    return mark_names[m];
  return "unknown";
}

/* Write the name of the bucket that rule m puts t in (UTC). */
const char *
retention_bucket_name (enum ret_mark m, int64_t t, char buf[RET_BUCKET_MAX])
{
  int64_t day = floor_div (t, SECS_PER_DAY), y;
  int64_t sod = t - day * SECS_PER_DAY;
  unsigned mo, d, hour = (unsigned) (sod / 3600), min = (unsigned) (sod / 60 % 60);
  static const unsigned days_before[12] = {
    0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334
  };

  civil_from_days (m == RET_KEEP_WEEKLY ? iso_monday (day) + 3 : day, &y, &mo,
                   &d);
  switch (m) {
  case RET_KEEP_MINUTELY:
    snprintf (buf, RET_BUCKET_MAX, "%04" PRId64 "-%02u-%02u %02u:%02u", y, mo,
              d, hour, min);
    break;
  case RET_KEEP_HOURLY:
    snprintf (buf, RET_BUCKET_MAX, "%04" PRId64 "-%02u-%02u %02u", y, mo, d,
              hour);
    break;
  case RET_KEEP_DAILY:
    snprintf (buf, RET_BUCKET_MAX, "%04" PRId64 "-%02u-%02u", y, mo, d);
    break;
  case RET_KEEP_WEEKLY: {
    /* The ISO year is the year of the week's Thursday, and the week its
     * day of that year divided by 7, plus one.
     */
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    unsigned doy = days_before[mo - 1] + d - 1 + (mo > 2 && leap);

    snprintf (buf, RET_BUCKET_MAX, "%04" PRId64 "-W%02u", y, doy / 7 + 1);
    break;
  }
  case RET_KEEP_MONTHLY:
    snprintf (buf, RET_BUCKET_MAX, "%04" PRId64 "-%02u", y, mo);
    break;
  default:
    buf[0] = '\0';
  }
  return buf;
}

/* ---------------------------------------------------------------- text form */

/* The unsigned decimal number of len bytes at s, at most max, into *vp;
 * -1 if it is not one (no sign, no blanks, at least one digit).
 */
static int
parse_number (const char *s, size_t len, uint64_t max, uint64_t *vp)
{
  uint64_t v = 0;

  if (len == 0)
    return -1;
  for (size_t i = 0; i < len; i++) {
    unsigned digit = (unsigned) (s[i] - '0');

    if (s[i] < '0' || s[i] > '9' || v > (max - digit) / 10)
      return -1;
    v = v * 10 + digit;
  }
  *vp = v;
  return 0;
}

/* The units of a duration, largest first. */
static const struct {
  char letter;
  uint64_t secs;
} duration_units[] = {
  { 'w', 7 * SECS_PER_DAY }, { 'd', SECS_PER_DAY }, { 'h', 3600 },
  { 'm', 60 }, { 's', 1 },
};

/* The duration of len bytes at s ("90s", "15m", "1h", "7d", "2w", or plain
 * seconds) into *secsp: 0, -EINVAL if it is not one, -ERANGE if it does not
 * fit in 64 bits of seconds.
 */
static int
parse_duration (const char *s, size_t len, uint64_t *secsp)
{
  uint64_t mult = 1, v;

  if (len > 0 && (s[len - 1] < '0' || s[len - 1] > '9')) {
    size_t u;

    for (u = 0; u < ARRAY_SIZE (duration_units); u++)
      if (duration_units[u].letter == s[len - 1])
        break;
    if (u == ARRAY_SIZE (duration_units))
      return -EINVAL;
    mult = duration_units[u].secs;
    len--;
  }
  if (parse_number (s, len, UINT64_MAX, &v) < 0) {
    /* All digits but too many for 64 bits is out of range, not malformed. */
    for (size_t i = 0; i < len; i++)
      if (s[i] < '0' || s[i] > '9')
        return -EINVAL;
    return len ? -ERANGE : -EINVAL;
  }
  if (v > UINT64_MAX / mult)
    return -ERANGE;
  *secsp = v * mult;
  return 0;
}

int
retention_parse_duration (const char *s, uint64_t *secsp)
{
  return parse_duration (s, strlen (s), secsp);
}

/* Write secs in the largest unit that divides it. */
const char *
retention_format_duration (uint64_t secs, char buf[RET_DURATION_MAX])
{
  size_t u = 0;

  if (secs == 0) {
    snprintf (buf, RET_DURATION_MAX, "0");
    return buf;
  }
  while (secs % duration_units[u].secs != 0)
    u++;
  snprintf (buf, RET_DURATION_MAX, "%" PRIu64 "%c",
            secs / duration_units[u].secs, duration_units[u].letter);
  return buf;
}

/* The rule whose option is named by len bytes at key (RET_KEEP_WITHIN to
 * RET_KEEP_MONTHLY), or RET_REMOVE if none is.
 */
static enum ret_mark
option_of (const char *key, size_t len)
{
  for (enum ret_mark r = RET_KEEP_WITHIN; r <= RET_KEEP_MONTHLY; r++)
    if (strlen (mark_names[r]) == len && memcmp (mark_names[r], key, len) == 0)
      return r;
  return RET_REMOVE;
}

/* Set option r of p from len bytes of value: 0, -EINVAL or -ERANGE (p
 * unchanged, no message).
 */
static int
set_option (struct ret_policy *p, enum ret_mark r, const char *value,
            size_t len)
{
  uint64_t v;

  if (r == RET_KEEP_WITHIN)
    return parse_duration (value, len, &p->keep_within);
  if (parse_number (value, len, UINT32_MAX, &v) < 0)
    return -EINVAL;
  *count_field (p, r) = (uint32_t) v;
  return 0;
}

/* Set one option of a policy from the user's text. */
int
retention_parse (struct ret_policy *p, const char *key, const char *value)
{
  enum ret_mark r = option_of (key, strlen (key));
  int err;

  if (r == RET_REMOVE)
    return cairn_fail (-EINVAL, "unknown retention option '%s': use "
                       "keep-within, keep-last, keep-minutely, keep-hourly, "
                       "keep-daily, keep-weekly or keep-monthly", key);
  err = set_option (p, r, value, strlen (value));
  if (err == 0)
    return 0;
  if (r == RET_KEEP_WITHIN && err == -ERANGE)
    return cairn_fail (-EINVAL, "keep-within '%s' is too long: at most "
                       "%" PRIu64 " seconds", value, UINT64_MAX);
  if (r == RET_KEEP_WITHIN)
    return cairn_fail (-EINVAL, "keep-within '%s' is not a duration: write a "
                       "whole number of seconds, or one followed by s, m, h, "
                       "d or w (90s, 15m, 1h, 7d, 2w); 0 keeps none by age",
                       value);
  return cairn_fail (-EINVAL, "%s '%s' is not a count: write a whole number "
                     "from 0 to %" PRIu32 " (0 turns the rule off)",
                     mark_names[r], value, UINT32_MAX);
}

/* Write a policy's text form; the longest (every field at its maximum)
 * is 171 bytes, so nothing is ever cut.
 */
const char *
retention_encode (const struct ret_policy *p, char buf[RET_POLICY_TEXT_MAX])
{
  struct ret_policy pol = *p;
  char within[RET_DURATION_MAX];
  int off;

  off = snprintf (buf, RET_POLICY_TEXT_MAX, "keep-within=%s",
                  retention_format_duration (pol.keep_within, within));
  for (enum ret_mark r = RET_KEEP_LAST; r <= RET_KEEP_MONTHLY; r++)
    if (*count_field (&pol, r) > 0)
      off += snprintf (buf + off, RET_POLICY_TEXT_MAX - (size_t) off,
                       ",%s=%" PRIu32, mark_names[r], *count_field (&pol, r));
  return buf;
}

/* Decode a stored policy, checking every option and value. */
int
retention_decode (struct ret_policy *p, const char *text, size_t len)
{
  struct ret_policy q = { 0 };
  const char *s = text, *end = text + len;
  unsigned seen = 0;

  if (len == 0)
    return cairn_fail (-EIO, "corrupt retention policy: it is empty");
  if (len >= RET_POLICY_TEXT_MAX)
    return cairn_fail (-EIO, "corrupt retention policy: %zu bytes long, at "
                       "most %d expected", len, RET_POLICY_TEXT_MAX - 1);
  if (memchr (text, '\0', len) != NULL)
    return cairn_fail (-EIO, "corrupt retention policy: it holds a NUL byte");
  for (;;) {
    const char *comma = memchr (s, ',', (size_t) (end - s));
    const char *e = comma ? comma : end;
    const char *eq = memchr (s, '=', (size_t) (e - s));
    enum ret_mark r;

    if (eq == NULL)
      return cairn_fail (-EIO, "corrupt retention policy '%.*s': '%.*s' is "
                         "not OPTION=VALUE", (int) len, text, (int) (e - s), s);
    r = option_of (s, (size_t) (eq - s));
    if (r == RET_REMOVE)
      return cairn_fail (-EIO, "corrupt retention policy '%.*s': unknown "
                         "option '%.*s'", (int) len, text, (int) (eq - s), s);
    if (seen & (1u << r))
      return cairn_fail (-EIO, "corrupt retention policy '%.*s': %s appears "
                         "twice", (int) len, text, mark_names[r]);
    seen |= 1u << r;
    if (set_option (&q, r, eq + 1, (size_t) (e - eq - 1)) < 0)
      return cairn_fail (-EIO, "corrupt retention policy '%.*s': %s has the "
                         "bad value '%.*s'", (int) len, text, mark_names[r],
                         (int) (e - eq - 1), eq + 1);
    if (comma == NULL)
      break;
    s = comma + 1;
  }
  if (!(seen & (1u << RET_KEEP_WITHIN)))
    return cairn_fail (-EIO, "corrupt retention policy '%.*s': keep-within is "
                       "missing", (int) len, text);
  *p = q;
  return 0;
}
