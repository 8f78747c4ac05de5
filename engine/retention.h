/* Cairn engine: which continuous checkpoints a retention policy keeps.
 *
 * A pure module: it sees a list of checkpoints (generation, UTC time,
 * protected or not) and a policy, and marks each one kept, with the rule
 * that kept it, or removed.  It reads no pool and keeps no state, so the
 * collector, `cairn checkpoint prune --dry-run` and the tests all call the
 * same function.  The rules follow Proxmox Backup Server's prune: the
 * design note at the top of retention.c says exactly how, and what
 * differs.
 */
#ifndef CAIRN_RETENTION_H
#define CAIRN_RETENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* A retention policy.  Zero in a field turns that rule off. */
struct ret_policy {
  uint64_t keep_within;     /* seconds: every checkpoint younger is kept */
  uint32_t keep_last;       /* the N newest checkpoints */
  uint32_t keep_minutely;   /* the newest of each of the N newest minutes */
  uint32_t keep_hourly;     /* ... hours */
  uint32_t keep_daily;      /* ... days */
  uint32_t keep_weekly;     /* ... ISO-8601 weeks */
  uint32_t keep_monthly;    /* ... months */
};

/* The default policy: keep every checkpoint for an hour, none after, as
 * NILFS2's default protection period does.  What must outlive that hour is
 * a snapshot's job; counts are the operator's choice, because each kept
 * checkpoint holds on to the space of what was overwritten after it.
 */
#define RET_POLICY_DEFAULT ((struct ret_policy) { .keep_within = 3600 })

/* What retention_apply decided for a checkpoint: removed, or kept and by
 * which rule (the first one that kept it, in this order).
 */
enum ret_mark {
  RET_REMOVE,
  RET_KEEP_WITHIN,
  RET_KEEP_LAST,
  RET_KEEP_MINUTELY,
  RET_KEEP_HOURLY,
  RET_KEEP_DAILY,
  RET_KEEP_WEEKLY,
  RET_KEEP_MONTHLY,
  RET_PROTECTED,            /* a snapshot or a lease: always kept */
};

/* One checkpoint, as the collector hands it in. */
struct ret_item {
  uint64_t gen;             /* its generation */
  int64_t time;             /* its commit time, seconds since 1970 UTC */
  bool protect;             /* a snapshot, an open export, a send reading it */
  enum ret_mark mark;       /* out: what retention_apply decided */
};

/* Mark every item of items[0..n) (in any order; the array is not
 * reordered) by policy p at time now (seconds since 1970 UTC).  Runs in
 * O(n log n) time and O(n) extra memory.  Returns 0, or -ENOMEM (nothing
 * marked, message set).
 */
int retention_apply (const struct ret_policy *p, int64_t now,
                     struct ret_item *items, size_t n) CAIRN_WUR;

/* The name of a mark, as the options are spelled: "remove",
 * "keep-within", "keep-last", "keep-minutely", ..., "protected".
 */
const char *retention_mark_name (enum ret_mark m);

/* Room for what retention_bucket_name writes, with its NUL. */
#define RET_BUCKET_MAX 48

/* Write the bucket that rule m puts time t in, in UTC: "2026-12-31 23:59"
 * (minutely), "2026-12-31 23" (hourly), "2026-12-31" (daily), "2026-W53"
 * (weekly: ISO-8601 year and week), "2026-12" (monthly); "" for the other
 * marks, which have no buckets.  Returns buf.
 */
const char *retention_bucket_name (enum ret_mark m, int64_t t,
                                   char buf[RET_BUCKET_MAX]);

/* Set one option of p from text, as the user writes it: key is
 * "keep-within" with a duration (see retention_format_duration) or one of
 * "keep-last", "keep-minutely", "keep-hourly", "keep-daily",
 * "keep-weekly", "keep-monthly" with a count from 0 to 4294967295.
 * Returns 0, or -EINVAL (p unchanged) with a message saying what form is
 * expected.
 */
int retention_parse (struct ret_policy *p, const char *key,
                     const char *value) CAIRN_WUR;

/* Room for what retention_format_duration writes, with its NUL. */
#define RET_DURATION_MAX 24

/* Write a duration in seconds as a whole number of the largest unit that
 * divides it: w (week), d, h, m or s ("1h", "90m", "2w", "90s"; "0").
 * retention_parse reads back what this writes.  Returns buf.
 */
const char *retention_format_duration (uint64_t secs,
                                       char buf[RET_DURATION_MAX]);

/* Parse a duration as keep-within takes it ("90s", "15m", "1h", "7d",
 * "2w" or seconds): 0, -EINVAL when malformed, -ERANGE when too long for
 * 64 bits (no message: the caller names the setting).
 */
int retention_parse_duration (const char *s, uint64_t *secsp) CAIRN_WUR;

/* Room for what retention_encode writes, with its NUL. */
#define RET_POLICY_TEXT_MAX 192

/* Write p in its text form, which is also how it is stored (a property
 * value of the pool's root tree) and shown: "keep-within=1h", then each
 * non-zero count in the order of the rules, comma-separated, as in
 * "keep-within=1h,keep-hourly=24,keep-daily=7".  Returns buf.
 */
const char *retention_encode (const struct ret_policy *p,
                              char buf[RET_POLICY_TEXT_MAX]);

/* Decode a stored policy (text of len bytes, no NUL needed) into *p.  It
 * must be what retention_encode writes, in any order of its options: each
 * known at most once, keep-within present, counts absent are 0.  Returns
 * 0, or -EIO (p unchanged) with a message naming what is wrong.
 */
int retention_decode (struct ret_policy *p, const char *text,
                      size_t len) CAIRN_WUR;

#endif /* CAIRN_RETENTION_H */
