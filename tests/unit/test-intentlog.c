/* The intent log (engine/txn-log.c, IL-1 .. IL-8): a flush is a log write
 * and one device flush, not a commit; a crash at any write or flush loses
 * no flushed write; fsck is clean with a live log and after its replay.
 *
 * CAIRN_TEST_SEED replays a workload and its cuts; CAIRN_TEST_SCALE=N
 * runs N workloads (seeds SEED .. SEED + N - 1), each cut at every write
 * and flush.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "dev.h"
#include "test-pool.h"
#include "test-util.h"

#define IL_DEV_SIZE (16u << 20)   /* a ring of 64 blocks: it wraps */
#define IL_BLOCKS 48u
#define IL_VSIZE (IL_BLOCKS * 4096u)
#define IL_OPS 160u               /* operations of a workload */
#define IL_TAGS 48u               /* writes a block may get between flushes */

/* Open the pool on dev with the intent log wanted. */
static struct cairn_pool *
open_logged (struct cairn_dev *dev)
{
  struct pool_open_opts o = { .intent_log = true, .no_background = true };
  struct cairn_pool *pool;

  cr_assert_eq (pool_open (dev, &o, &pool), 0, "%s", cairn_errmsg ());
  return pool;
}

/* A pool with volume v of IL_BLOCKS blocks and a ring (the first flush of
 * a pool opened with the log makes it), closed.
 */
static struct cairn_dev *
logged_pool (void)
{
  struct cairn_dev *dev = mem_pool (IL_DEV_SIZE, NULL);
  struct cairn_pool *pool = open_logged (dev);
  struct cairn_volume *v;
  struct pool_log_info li;

  cr_assert_eq (vol_create (pool, "v", IL_VSIZE, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_flush (v), 0, "%s", cairn_errmsg ());
  vol_close (v);
  cr_assert_eq (pool_log_info (pool, &li), 0);
  cr_assert_eq (li.nblocks, 64, "the ring has %" PRIu64 " blocks", li.nblocks);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  return dev;
}

/* The content of a block written with tag (0: zeros). */
static void
tag_block (uint8_t *buf, uint64_t tag)
{
  if (tag == 0)
    memset (buf, 0, 4096);
  else
    fill_pattern (buf, 4096, tag);
}

/* What each block may hold after a cut: its content at the last flush
 * that returned, or any written after it.
 */
struct il_model {
  uint64_t acked[IL_BLOCKS];
  uint64_t later[IL_BLOCKS][IL_TAGS];
  unsigned nlater[IL_BLOCKS];
  unsigned flushes;             /* acknowledged flushes and FUA writes */
};

/* Every write so far is durable. */
static void
model_flushed (struct il_model *m)
{
  for (unsigned b = 0; b < IL_BLOCKS; b++)
    if (m->nlater[b]) {
      m->acked[b] = m->later[b][m->nlater[b] - 1];
      m->nlater[b] = 0;
    }
  m->flushes++;
}

/* Blocks [lbn, lbn + n) were written with tags tag, tag + 1, ... (0: zeroed). */
static void
model_write (struct il_model *m, uint64_t lbn, uint64_t n, uint64_t tag)
{
  for (uint64_t i = 0; i < n; i++) {
    uint64_t b = lbn + i;

    if (m->nlater[b] == IL_TAGS) {      /* keep the newest */
      memmove (m->later[b], m->later[b] + 1,
               (IL_TAGS - 1) * sizeof m->later[b][0]);
      m->nlater[b]--;
    }
    m->later[b][m->nlater[b]++] = tag ? tag + i : 0;
  }
}

/* The write of [lbn, lbn + n) was acknowledged as durable (FUA). */
static void
model_durable (struct il_model *m, uint64_t lbn, uint64_t n)
{
  for (uint64_t b = lbn; b < lbn + n; b++) {
    m->acked[b] = m->later[b][m->nlater[b] - 1];
    m->nlater[b] = 0;
  }
}

/* Run the workload of seed on the pool on dev until the end or the first
 * failure (the cut); m says what was acknowledged.  Returns the writes
 * and flushes the device saw when dev is a power-cut device.
 */
static void
workload (struct cairn_dev *dev, uint64_t seed, struct il_model *m)
{
  struct rng r = { seed };
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *buf = malloc (8 * 4096);
  uint64_t tag = seed * 100000 + 1;
  struct pool_open_opts o = { .intent_log = true, .no_background = true };
  int err = 0;

  cr_assert_not_null (buf);
  memset (m, 0, sizeof *m);
  /* The image: every block written with tag (b + 1) * 7 and committed. */
  for (unsigned b = 0; b < IL_BLOCKS; b++)
    m->acked[b] = (b + 1) * 7;
  if (pool_open (dev, &o, &pool) < 0) {
    free (buf);
    return;
  }
  if (vol_open (pool, "v", &v) < 0)
    goto out;
  for (unsigned i = 0; i < IL_OPS && err == 0; i++) {
    unsigned what = (unsigned) rng_below (&r, 100);
    uint64_t n = 1 + rng_below (&r, 4);
    uint64_t lbn = rng_below (&r, IL_BLOCKS - n + 1);

    if (what < 55) {                    /* write, FUA now and then */
      bool fua = rng_below (&r, 10) == 0;

      for (uint64_t j = 0; j < n; j++)
        tag_block (buf + j * 4096, tag + j);
      model_write (m, lbn, n, tag);
      err = vol_pwrite (v, buf, (uint32_t) (n * 4096), lbn * 4096,
                        fua ? VOL_FUA : 0);
      if (err == 0 && fua) {
        model_durable (m, lbn, n);
        m->flushes++;
      }
      tag += n;
    }
    else if (what < 65) {               /* zero or trim: a punch */
      model_write (m, lbn, n, 0);
      err = what < 60 ? vol_zero (v, (uint32_t) (n * 4096), lbn * 4096, 0)
                      : vol_trim (v, (uint32_t) (n * 4096), lbn * 4096, 0);
    }
    else if (what < 95) {               /* a flush */
      err = vol_flush (v);
      if (err == 0)
        model_flushed (m);
    }
    else if (what < 99) {               /* the commit timer */
      err = pool_commit (pool);
      if (err == 0)
        model_flushed (m);
    }
    else {                              /* a snapshot commits first (IL-7) */
      char name[32];

      snprintf (name, sizeof name, "s%u", i);
      err = snap_create (pool, "v", name);
      if (err == 0)
        model_flushed (m);
    }
  }
  vol_close (v);
 out:
  if (pool_close (pool) < 0) {
    /* The cut: what was not acknowledged may be lost. */
  }
  free (buf);
}

/* Every block of v holds what the model allows (when names the cut). */
static void
check_blocks (struct cairn_pool *pool, const struct il_model *m,
              const char *when)
{
  struct cairn_volume *v;
  uint8_t got[4096], want[4096];

  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s: %s", when, cairn_errmsg ());
  for (unsigned b = 0; b < IL_BLOCKS; b++) {
    bool ok;

    cr_assert_eq (vol_pread (v, got, 4096, b * 4096ull), 0, "%s: block %u: %s",
                  when, b, cairn_errmsg ());
    tag_block (want, m->acked[b]);
    ok = memcmp (got, want, 4096) == 0;
    for (unsigned j = 0; !ok && j < m->nlater[b]; j++) {
      tag_block (want, m->later[b][j]);
      ok = memcmp (got, want, 4096) == 0;
    }
    cr_assert (ok, "%s: block %u holds neither what the last flush made "
               "durable (tag %" PRIu64 ") nor any of the %u writes after it",
               when, b, m->acked[b], m->nlater[b]);
  }
  vol_close (v);
}

/* The image every workload starts from: logged_pool with every block of
 * v written and committed.
 */
static struct cairn_dev *
base_image (void)
{
  struct cairn_dev *dev = logged_pool ();
  struct cairn_pool *pool = open_logged (dev);
  struct cairn_volume *v;
  uint8_t buf[4096];

  cr_assert_eq (vol_open (pool, "v", &v), 0);
  for (unsigned b = 0; b < IL_BLOCKS; b++) {
    tag_block (buf, (b + 1) * 7);
    cr_assert_eq (vol_pwrite (v, buf, 4096, b * 4096ull, 0), 0);
  }
  vol_close (v);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  return dev;
}

/* A flush writes the log and flushes once: no commit, nothing left that
 * a cut could lose (IL-2); reopened after a cut that keeps nothing
 * unflushed, fsck sees the live log and is clean, and the reopen replays
 * it.
 */
Test (intentlog, flush_is_a_log_write)
{
  struct cairn_dev *base = base_image (), *copy, *pc;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  struct pool_info before, after;
  struct pool_log_info li;
  struct fsck_report rep;
  struct il_model m = { .flushes = 0 };
  uint8_t buf[4096];

  for (unsigned b = 0; b < IL_BLOCKS; b++)
    m.acked[b] = (b + 1) * 7;
  copy = copy_dev (base, IL_DEV_SIZE);
  cr_assert_eq (dev_powercut_create (copy, 1, &pc), 0);
  dev_powercut_set_policy (pc, DEV_POWERCUT_KEEP_NONE, DEV_POWERCUT_TEAR_PREFIX);
  pool = open_logged (pc);
  cr_assert_eq (vol_open (pool, "v", &v), 0);
  /* The first flush after the open commits (IL-8); the next ones log. */
  cr_assert_eq (vol_flush (v), 0);
  pool_info (pool, &before);
  for (unsigned i = 0; i < 20; i++) {
    uint64_t b = (i * 7) % IL_BLOCKS;

    tag_block (buf, 1000 + i);
    model_write (&m, b, 1, 1000 + i);
    cr_assert_eq (vol_pwrite (v, buf, 4096, b * 4096, 0), 0);
    if (i % 4 == 3) {
      uint64_t ops = dev_powercut_ops (pc);

      cr_assert_eq (vol_flush (v), 0, "%s", cairn_errmsg ());
      model_flushed (&m);
      cr_assert_eq (dev_powercut_pending (pc), 0, "a flush leaves nothing "
                    "a cut could lose");
      /* One log block and one device flush. */
      cr_assert_eq (dev_powercut_ops (pc) - ops, 2, "a flush of 4 writes took "
                    "%" PRIu64 " writes and flushes", dev_powercut_ops (pc) - ops);
    }
  }
  /* An unflushed write, lost at the cut (the policy keeps nothing). */
  tag_block (buf, 5000);
  cr_assert_eq (vol_pwrite (v, buf, 4096, 0, 0), 0);
  pool_info (pool, &after);
  cr_assert_eq (after.commits, before.commits, "flushes committed");
  cr_assert_eq (pool_log_info (pool, &li), 0);
  cr_assert_eq (li.flushes, 5);
  cr_assert_eq (li.blocks_written, 5);
  dev_powercut_cut (pc, false);
  vol_close (v);
  (void) pool_close (pool);
  dev_close (pc);

  /* fsck before the replay: clean, and it sees the live records. */
  rep = assert_clean (copy);
  cr_assert_eq (rep.intentlog_blocks, 64);
  cr_assert_eq (rep.intentlog_live_blocks, 5);
  cr_assert_eq (rep.intentlog_records, 20);
  /* A read-only open sees the last commit: block 0 as the image had it. */
  {
    struct pool_open_opts ro = { .readonly = true };

    cr_assert_eq (pool_open (copy, &ro, &pool), 0);
    cr_assert_eq (vol_open (pool, "v", &v), 0);
    cr_assert_eq (vol_pread (v, buf, 4096, 0), 0);
    {
      uint8_t want[4096];

      tag_block (want, 7);
      cr_assert_eq (memcmp (buf, want, 4096), 0);
    }
    vol_close (v);
    cr_assert_eq (pool_close (pool), 0);
  }
  /* A read-write open replays: every flushed write is there. */
  pool = pool_open_ok (copy);
  check_blocks (pool, &m, "after the replay");
  cr_assert_eq (vol_open (pool, "v", &v), 0);
  cr_assert_eq (vol_pread (v, buf, 4096, 0), 0);
  {
    uint8_t want[4096];

    tag_block (want, 1000);     /* block 0's flushed write, not 5000 */
    cr_assert_eq (memcmp (buf, want, 4096), 0);
  }
  vol_close (v);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  rep = assert_clean (copy);
  cr_assert_eq (rep.intentlog_records, 0, "the replay's commit made the log "
                "obsolete");
  dev_close (copy);
  dev_close (base);
}

/* A pool with a ring carries the incompat flag: a cairn that does not
 * know the log refuses it rather than lose what the log holds.
 */
Test (intentlog, ring_is_incompat)
{
  struct cairn_dev *dev = logged_pool ();
  uint8_t slot[4096];
  int found = 0;

  for (unsigned i = 0; i < SB_SLOTS; i++) {
    cr_assert_eq (dev_pread (dev, slot, sizeof slot, SB_SLOT_OFFSET (i)), 0);
    if (memcmp (slot, "CAIRNSB1", 8) == 0 &&
        (get_le64 (slot + 32) & FEATURE_INCOMPAT_INTENTLOG))
      found++;
  }
  cr_assert_gt (found, 0, "no superblock carries FEATURE_INCOMPAT_INTENTLOG");
  dev_close (dev);
}

/* Cut the power at every write and flush of a random workload of writes,
 * zeros, trims, flushes, FUA writes, commits and a snapshot, each time on
 * a fresh copy of the image and with the cut's policy varied (and every
 * third time again within the first writes and flushes of the reopen that
 * replays): fsck is clean before the replay and after it, and every block
 * holds what its last acknowledged flush made durable or a write after
 * it.
 */
Test (intentlog, cut_everywhere, .timeout = 600)
{
  uint64_t seed = test_seed ("intentlog.cut_everywhere", 4242);
  unsigned rounds = test_work (1), cuts = 0, replays = 0, recuts = 0;
  struct cairn_dev *base = base_image ();

  for (unsigned k = 0; k < rounds; k++) {
    uint64_t s = seed + k, ops;
    struct cairn_dev *copy = copy_dev (base, IL_DEV_SIZE), *pc;
    struct il_model m;
    char when[96];

    /* A run without a cut counts the device's writes and flushes. */
    cr_assert_eq (dev_powercut_create (copy, s, &pc), 0);
    workload (pc, s, &m);
    ops = dev_powercut_ops (pc);
    dev_close (pc);
    snprintf (when, sizeof when, "seed %" PRIu64 ", no cut", s);
    assert_fsck_clean (copy, when);
    {
      struct cairn_pool *pool = pool_open_ok (copy);

      check_blocks (pool, &m, when);
      cr_assert_eq (pool_close (pool), 0);
    }
    dev_close (copy);
    cr_assert_gt (m.flushes, 20, "the workload flushed %u times", m.flushes);

    for (uint64_t c = 1; c <= ops; c++) {
      struct cairn_pool *pool;
      struct fsck_report rep;
      struct problems p;

      copy = copy_dev (base, IL_DEV_SIZE);
      cr_assert_eq (dev_powercut_create (copy, s * 1000003 + c, &pc), 0);
      dev_powercut_set_policy (pc, (enum dev_powercut_keep) (c % DEV_POWERCUT_KEEP_COUNT),
                               (enum dev_powercut_tear) ((c / 7) % DEV_POWERCUT_TEAR_COUNT));
      dev_powercut_arm (pc, c);
      workload (pc, s, &m);
      if (!dev_powercut_is_cut (pc))
        dev_powercut_cut (pc, true);
      dev_close (pc);
      snprintf (when, sizeof when, "seed %" PRIu64 ", cut at %" PRIu64
                " (keep %s)", s, c,
                dev_powercut_keep_name ((enum dev_powercut_keep) (c % DEV_POWERCUT_KEEP_COUNT)));
      rep = run_fsck (copy, &p);
      cr_assert_eq (rep.errors, 0, "%s, before the replay: %s", when, p.text);
      replays += rep.intentlog_records > 0;
      /* Every third cut with a log to replay cuts again, in the replay or
       * in the commit after it: the same log is replayed again (IL-4).
       */
      if (rep.intentlog_records > 0 && c % 3 == 0) {
        struct cairn_dev *pc2;
        uint64_t nth = 1 + (s * 7 + c) % 5;

        cr_assert_eq (dev_powercut_create (copy, s * 7919 + c, &pc2), 0);
        dev_powercut_arm (pc2, nth);
        if (pool_open (pc2, NULL, &pool) == 0) {
          struct cairn_volume *v;

          if (vol_open (pool, "v", &v) == 0)
            vol_close (v);
          (void) pool_close (pool);
        }
        if (!dev_powercut_is_cut (pc2))
          dev_powercut_cut (pc2, true);
        dev_close (pc2);
        recuts++;
      }
      pool = pool_open_ok (copy);
      check_blocks (pool, &m, when);
      cr_assert_eq (pool_close (pool), 0, "%s: %s", when, cairn_errmsg ());
      assert_fsck_clean (copy, when);
      dev_close (copy);
      cuts++;
    }
  }
  fprintf (stderr, "intentlog.cut_everywhere: %u workloads, %u cuts, %u of "
           "them left a live log to replay, %u cut again in the replay\n",
           rounds, cuts, replays, recuts);
  cr_assert_gt (replays, cuts / 4, "few cuts left a log to replay");
  dev_close (base);
}

/* Flip a bit of copy 0 of the logical block addr of the mirror top, on
 * the member that holds it.
 */
static void
flip_copy0 (struct cairn_dev *top, struct cairn_dev *const *members,
            uint64_t addr)
{
  unsigned mem;
  uint64_t phys, run;
  uint8_t byte;

  cr_assert_eq (dev_chunk_locate (top, addr * 4096 + 100, 0, &mem, &phys,
                                  &run), 0);
  cr_assert_eq (dev_pread (members[mem], &byte, 1, phys), 0);
  byte ^= 0x40;
  cr_assert_eq (dev_pwrite (members[mem], &byte, 1, phys), 0);
}

/* On a mirror, a crash after a logged flush, then copy 0 of every log
 * block and of every flushed write's data damaged: replay reads the other
 * copy (IL-2, IL-5 check every copy, as every checked read does) and
 * loses no flushed write.  Replay that read copy 0 alone ended the log at
 * the first damaged block, and lost what the log alone held.
 */
Test (intentlog, replay_reads_every_copy)
{
  struct cairn_dev *mem[2], *crash[2], *top, *ctop;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  struct pool_log_info li;
  struct fsck_report rep;
  uint8_t buf[4096], want[8][4096];
  uint64_t damaged = 0;

  for (unsigned i = 0; i < 2; i++)
    cr_assert_eq (dev_mem_create (IL_DEV_SIZE, &mem[i]), 0);
  cr_assert_eq (dev_chunk_format (mem, 2, &(struct dev_chunk_format_opts) {
                                    .profile = DEV_PROFILE_MIRROR }, NULL),
                0, "%s", cairn_errmsg ());
  cr_assert_eq (dev_chunk_open (mem, 2, 0, &top), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_format (top, NULL, NULL), 0, "%s", cairn_errmsg ());
  pool = open_logged (top);
  cr_assert_eq (vol_create (pool, "v", IL_VSIZE, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  /* The first flush makes the ring and commits (IL-8); the next logs. */
  cr_assert_eq (vol_flush (v), 0, "%s", cairn_errmsg ());
  for (unsigned b = 0; b < 8; b++) {
    tag_block (want[b], 9000 + b);
    cr_assert_eq (vol_pwrite (v, want[b], 4096, b * 4096ull, 0), 0);
  }
  cr_assert_eq (vol_flush (v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_log_info (pool, &li), 0);
  cr_assert_gt (li.flushes, 0, "the flush did not go to the log");
  /* The crash: the members as that flush left them. */
  for (unsigned i = 0; i < 2; i++)
    crash[i] = copy_dev (mem[i], IL_DEV_SIZE);
  vol_close (v);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  dev_close (top);
  for (unsigned i = 0; i < 2; i++)
    dev_close (mem[i]);

  cr_assert_eq (dev_chunk_open (crash, 2, 0, &ctop), 0, "%s", cairn_errmsg ());
  rep = assert_clean (ctop);
  cr_assert_eq (rep.intentlog_records, 8, "the log holds %" PRIu64
                " records", rep.intentlog_records);
  /* Copy 0 of every ring block and of every block holding a write. */
  for (uint64_t b = 0; b < li.nblocks; b++)
    flip_copy0 (ctop, crash, li.start + b);
  for (uint64_t a = 0; a < ctop->size / 4096; a++) {
    if (a >= li.start && a < li.start + li.nblocks)
      continue;
    cr_assert_eq (dev_pread (ctop, buf, 4096, a * 4096), 0);
    for (unsigned b = 0; b < 8; b++)
      if (memcmp (buf, want[b], 4096) == 0) {
        flip_copy0 (ctop, crash, a);
        damaged++;
      }
  }
  cr_assert_eq (damaged, 8, "found %" PRIu64 " of the 8 data blocks", damaged);
  pool = pool_open_ok (ctop);
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  for (unsigned b = 0; b < 8; b++) {
    cr_assert_eq (vol_pread (v, buf, 4096, b * 4096ull), 0, "%s",
                  cairn_errmsg ());
    cr_assert_eq (memcmp (buf, want[b], 4096), 0, "block %u: the flushed "
                  "write was lost in the replay", b);
  }
  vol_close (v);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  rep = assert_clean (ctop);
  cr_assert_eq (rep.intentlog_records, 0);
  dev_close (ctop);
  for (unsigned i = 0; i < 2; i++)
    dev_close (crash[i]);
}
