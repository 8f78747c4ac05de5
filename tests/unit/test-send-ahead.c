/* Unit tests for the send path's read-ahead (server/send.c): a data run
 * longer than one WRITE record is read a record ahead by a reader thread
 * while the record before is encoded.  The tests check that such runs
 * (whole records, a partial last record, a hole between runs) arrive
 * whole and in order, that a damaged block stops the stream at its own
 * record with the read's own message, and that a sink that fails while a
 * read is under way ends the send cleanly.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "pool.h"
#include "volume.h"
#include "test-send.h"

#define BLK 4096u

/* The volume: [0, 5.5 MiB) data, a hole, [6 MiB, 8 MiB) data: runs of
 * five and a half records and of two, which the reader thread reads.
 */
#define RUN1_END (11u * MIB / 2)
#define RUN2_START (6u * MIB)

/* Write the volume's data (and keep it in model). */
static void
write_runs (struct cairn_pool *pool, uint8_t *model, uint64_t tag)
{
  struct cairn_volume *v;

  memset (model, 0, VOL_SIZE);
  fill_pattern (model, RUN1_END, tag);
  fill_pattern (model + RUN2_START, VOL_SIZE - RUN2_START, tag + 1);
  cr_assert_eq (vol_create (pool, "v", VOL_SIZE, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  for (uint64_t off = 0; off < VOL_SIZE; off += MIB)
    cr_assert_eq (vol_pwrite (v, model + off, MIB, off, 0), 0, "%s",
                  cairn_errmsg ());
  vol_close (v);
  cr_assert_eq (snap_create (pool, "v", "s1"), 0, "%s", cairn_errmsg ());
}

/* Overwrite on the device the block that holds volume block blk (its data
 * is random, so unique); the pool's own copy is left alone.
 */
static void
damage_block (struct cairn_dev *dev, const uint8_t *model, uint64_t blk)
{
  uint8_t b[BLK], bad[BLK];

  memset (bad, 0x5a, sizeof bad);
  for (uint64_t a = POOL_DATA_START; a + BLK <= dev->size; a += BLK) {
    cr_assert_eq (dev_pread (dev, b, BLK, a), 0);
    if (memcmp (b, model + blk * BLK, BLK) == 0) {
      cr_assert_eq (dev_pwrite (dev, bad, BLK, a), 0);
      return;
    }
  }
  cr_assert_fail ("block %" PRIu64 " of the volume is not on the device", blk);
}

/* Send v@s1 into b; what repl_send returned. */
static int
send_into (struct cairn_pool *pool, struct buf *b)
{
  struct repl_send_opts o = { .sink = buf_sink, .sink_opaque = b };
  struct repl_send_result res;

  return repl_send (pool, "v@s1", &o, &res);
}

Test (send, long_runs_read_ahead)
{
  struct rng rng = { test_seed ("send.long_runs_read_ahead", 1) };
  struct cairn_dev *da = mem_pool (64 * MIB, NULL), *db = mem_pool (64 * MIB, NULL);
  struct cairn_pool *a = pool_open_ok (da), *b = pool_open_ok (db);
  uint8_t *model = malloc (VOL_SIZE);
  struct buf s;

  write_runs (a, model, rng_next (&rng));
  s = send_to_buf (a, "v@s1", NULL, NULL);
  cr_assert_eq (receive_buf (b, "copy", s.p, s.len, &rng, NULL), 0, "%s",
                cairn_errmsg ());
  assert_same (a, "v@s1", b, "copy@s1");
  free (s.p);
  free (model);
  cr_assert_eq (pool_close (a), 0);
  cr_assert_eq (pool_close (b), 0);
  dev_close (da);
  dev_close (db);
}

/* Damage volume block blk and send: the send fails naming it, after the
 * records before blk's and without blk's record.
 */
static void
send_damaged (uint64_t blk)
{
  struct rng rng = { test_seed ("send.damaged_block_stops_its_record", 2) };
  struct cairn_dev *da = mem_pool (64 * MIB, NULL);
  struct cairn_pool *a = pool_open_ok (da);
  uint8_t *model = malloc (VOL_SIZE);
  struct buf s = { NULL, 0, 0 };
  uint64_t rec_start = blk * BLK / MIB * MIB;  /* records start at MiBs */
  char want[64];

  write_runs (a, model, rng_next (&rng));
  damage_block (da, model, blk);
  cr_assert_eq (send_into (a, &s), -EIO);
  snprintf (want, sizeof want, "checksum mismatch reading block %" PRIu64 " ",
            blk);
  cr_assert (strstr (cairn_errmsg (), want) != NULL, "block %" PRIu64 ": %s",
             blk, cairn_errmsg ());
  /* The data of every record before blk's went out, blk's did not (data
   * below RUN2_START that is not in run 1 is the hole: no record).
   */
  uint64_t before = MIN (rec_start, (uint64_t) RUN1_END)
    + (rec_start > RUN2_START ? rec_start - RUN2_START : 0);
  cr_assert_geq (s.len, before, "block %" PRIu64 ": %zu stream bytes", blk,
                 s.len);
  cr_assert_lt (s.len, before + MIB / 2, "block %" PRIu64 ": %zu stream bytes",
                blk, s.len);
  free (s.p);
  free (model);
  cr_assert_eq (pool_close (a), 0);
  dev_close (da);
}

Test (send, damaged_block_stops_its_record)
{
  send_damaged (0);                          /* read before the reader runs */
  send_damaged (2 * MIB / BLK + 17);         /* a record read ahead */
  send_damaged (RUN1_END / BLK - 1);         /* run 1's partial last record */
  send_damaged (VOL_SIZE / BLK - 1);         /* the last record of run 2 */
}

/* A sink that takes limit bytes, then fails with -ENOSPC. */
struct limited {
  struct buf b;
  size_t limit;
};

static int
limited_sink (void *opaque, const void *data, size_t len)
{
  struct limited *l = opaque;

  if (l->b.len + len > l->limit)
    return -ENOSPC;
  return buf_sink (&l->b, data, len);
}

Test (send, sink_fails_while_reading_ahead)
{
  struct rng rng = { test_seed ("send.sink_fails_while_reading_ahead", 3) };
  struct cairn_dev *da = mem_pool (64 * MIB, NULL);
  struct cairn_pool *a = pool_open_ok (da);
  uint8_t *model = malloc (VOL_SIZE);

  write_runs (a, model, rng_next (&rng));
  for (size_t limit = MIB / 2; limit < VOL_SIZE; limit += 3 * MIB / 2) {
    struct limited l = { { NULL, 0, 0 }, limit };
    struct repl_send_opts o = { .sink = limited_sink, .sink_opaque = &l };
    struct repl_send_result res;

    cr_assert_eq (repl_send (a, "v@s1", &o, &res), -ENOSPC,
                  "limit %zu: %s", limit, cairn_errmsg ());
    cr_assert_leq (l.b.len, limit);
    free (l.b.p);
  }
  /* Nothing is left open: the snapshot can go, and the pool closes. */
  cr_assert_eq (snap_delete (a, "v", "s1"), 0, "%s", cairn_errmsg ());
  free (model);
  cr_assert_eq (pool_close (a), 0);
  dev_close (da);
}
