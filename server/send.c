/* Cairn replication: sending a snapshot as a stream (see replicate.h).
 *
 * A full stream walks the snapshot's extent map and sends every data run
 * as WRITE records, leaving holes out (the receiver starts from zeros).
 * An incremental stream sends what vol_diff finds between the base and the
 * snapshot: data runs as WRITE records, runs that became holes as ZERO
 * records.  Either way the ranges ascend, as the format requires, and the
 * data is read from the snapshot's own (read-only, pinned) export, so the
 * live volume can go on being written meanwhile and a snapshot being sent
 * cannot be deleted (vol_open holds it).
 *
 * A resumed stream is the same walk with every range before the token's
 * next_offset left out (a range that straddles it is cut there): the data
 * is the same, so the receiver's chain continues.
 *
 * New streams have the BLOCKSUMS feature (cairn-stream(5)): a WRITE
 * record's SHA-256 covers the SHA-256 of each 4 KiB block of its data, and
 * those are the digests the read has just checked the blocks against
 * (vol_pread_sums), so the data is hashed once, by the read, and the
 * record's SHA-256 is over 32 bytes a block.  A stream resumed from a
 * token of a stream without the feature (from an older sender) goes on
 * without it, hashing the data as that stream did.
 *
 * Reading a record's data and encoding it each cost a pass: the read
 * checks every block against its digest, and the record's SHA-256 covers
 * the digests (or, without BLOCKSUMS, the data again) in one serial
 * chain.  So a run longer than one record is read one record ahead by a
 * reader thread while this thread encodes the record before: the two
 * overlap on two CPUs.  Shorter runs (an incremental stream's usual case)
 * are read inline, where a hand-over would cost more than it saves.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "replicate.h"

/* Extents are mapped this many bytes at a time in a full stream, which
 * bounds the memory of the mapping (32 bytes of checksum per block).
 */
#define SEND_MAP_CHUNK VOL_MAX_IO

/* The reader thread: one read at a time, handed over under lock. */
struct reader {
  pthread_t thread;
  bool started;               /* the thread runs */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct cairn_volume *vol;
  bool busy;                  /* a read is asked for or under way */
  bool quit;
  uint8_t *buf;               /* the read: [off, off + len) into buf */
  uint8_t *sums;              /* and the blocks' digests, when not NULL */
  uint64_t off;
  uint32_t len;
  int r;                      /* its result, and its message if it failed */
  char msg[1024];
};

struct send_state {
  const struct repl_send_opts *opts;
  struct stream_enc *enc;
  struct cairn_volume *vol;   /* the snapshot's export */
  uint64_t start;             /* resumed: nothing below it is sent */
  uint64_t done, total;       /* data bytes, for progress */
  uint64_t sent;              /* data bytes in WRITE records */
  uint8_t *buf[2];            /* STREAM_MAX_DATA bytes each */
  uint8_t *sums[2];           /* their blocks' digests */
  struct reader rd;
};

/* Read [off, off + len) into buf and, when the range is whole blocks, the
 * blocks' verified digests into sums; else *sumsp becomes NULL (the
 * encoder then hashes the data: only a volume's last, partial block).
 */
static int
read_data (struct cairn_volume *vol, uint8_t *buf, uint8_t **sumsp,
           uint32_t len, uint64_t off)
{
  if (off % STREAM_PIECE == 0 && len % STREAM_PIECE == 0)
    return vol_pread_sums (vol, buf, len, off, *sumsp);
  *sumsp = NULL;
  return vol_pread (vol, buf, len, off);
}

static void *
reader_main (void *arg)
{
  struct reader *rd = arg;

  pthread_mutex_lock (&rd->lock);
  for (;;) {
    while (!rd->busy && !rd->quit)
      pthread_cond_wait (&rd->cond, &rd->lock);
    if (rd->quit)
      break;
    uint8_t *sums = rd->sums;
    pthread_mutex_unlock (&rd->lock);
    int r = read_data (rd->vol, rd->buf, &sums, rd->len, rd->off);
    pthread_mutex_lock (&rd->lock);
    rd->sums = sums;
    rd->r = r;
    if (r < 0)
      snprintf (rd->msg, sizeof rd->msg, "%s", cairn_errmsg ());
    rd->busy = false;
    pthread_cond_broadcast (&rd->cond);
  }
  pthread_mutex_unlock (&rd->lock);
  return NULL;
}

/* Ask the reader thread (started on first use) for [off, off + len) and
 * its digests.
 */
static int
reader_start (struct reader *rd, uint8_t *buf, uint8_t *sums, uint64_t off,
              uint32_t len)
{
  if (!rd->started) {
    int err = pthread_create (&rd->thread, NULL, reader_main, rd);

    if (err)
      return cairn_fail (-err, "cannot start the stream's reader thread: %s",
                         strerror (err));
    rd->started = true;
  }
  pthread_mutex_lock (&rd->lock);
  rd->buf = buf;
  rd->sums = sums;
  rd->off = off;
  rd->len = len;
  rd->busy = true;
  pthread_cond_broadcast (&rd->cond);
  pthread_mutex_unlock (&rd->lock);
  return 0;
}

/* Wait for the read asked for; its result. */
static int
reader_drain (struct reader *rd)
{
  int r;

  pthread_mutex_lock (&rd->lock);
  while (rd->busy)
    pthread_cond_wait (&rd->cond, &rd->lock);
  r = rd->r;
  pthread_mutex_unlock (&rd->lock);
  return r;
}

/* ... with its message, if it failed, set on this thread; *sumsp: its
 * digests, or NULL if it had none.
 */
static int
reader_wait (struct reader *rd, uint8_t **sumsp)
{
  int r = reader_drain (rd);

  *sumsp = rd->sums;
  return r < 0 ? cairn_fail (r, "%s", rd->msg) : 0;
}

/* Stop the reader thread, if it was started (no read under way). */
static void
reader_stop (struct reader *rd)
{
  if (rd->started) {
    pthread_mutex_lock (&rd->lock);
    rd->quit = true;
    pthread_cond_broadcast (&rd->cond);
    pthread_mutex_unlock (&rd->lock);
    pthread_join (rd->thread, NULL);
    rd->started = false;
  }
}

/* Encode the record of [off, off + n), read into buf with its blocks'
 * digests in sums (NULL: none), and count it.
 */
static int
send_record (struct send_state *s, uint64_t off, uint32_t n,
             const uint8_t *buf, const uint8_t *sums)
{
  int r = sums ? stream_enc_write_sums (s->enc, off, buf, n, sums)
    : stream_enc_write (s->enc, off, buf, n);

  s->done += n;
  s->sent += n;
  if (r == 0 && s->opts->progress)
    s->opts->progress (s->opts->progress_opaque, s->done, s->total);
  return r;
}

/* Send the data of [off, off + len) as WRITE records, reading each record
 * while the one before is encoded.
 */
static int
send_data_ahead (struct send_state *s, uint64_t off, uint64_t len)
{
  uint32_t n = STREAM_MAX_DATA;
  int cur = 0, r, ahead;
  uint8_t *sums;

  r = reader_start (&s->rd, s->buf[cur], s->sums[cur], off, n);
  while (r == 0) {
    uint32_t next = (uint32_t) MIN (len - n, (uint64_t) STREAM_MAX_DATA);

    r = reader_wait (&s->rd, &sums);
    if (r < 0)
      break;
    ahead = next > 0 ? reader_start (&s->rd, s->buf[!cur], s->sums[!cur],
                                     off + n, next) : 0;
    r = send_record (s, off, n, s->buf[cur], sums);
    if (ahead < 0 && r == 0)
      r = ahead;
    if (r < 0 || next == 0) {
      /* Wait out a read still under way, keeping this failure's message:
       * its buffer is freed next.
       */
      if (next > 0 && ahead == 0)
        (void) reader_drain (&s->rd);
      break;
    }
    off += n;
    len -= n;
    n = next;
    cur = !cur;
  }
  return r;
}

/* Send the data of [off, off + len) as WRITE records. */
static int
send_data (struct send_state *s, uint64_t off, uint64_t len)
{
  int r = 0;

  if (len > STREAM_MAX_DATA && !s->opts->dry_run)
    return send_data_ahead (s, off, len);
  while (r == 0 && len > 0) {
    uint32_t n = (uint32_t) MIN (len, (uint64_t) STREAM_MAX_DATA);
    uint8_t *sums = NULL;

    if (!s->opts->dry_run) {
      sums = s->sums[0];
      r = read_data (s->vol, s->buf[0], &sums, n, off);
    }
    if (r == 0)
      r = send_record (s, off, n, s->buf[0], sums);
    off += n;
    len -= n;
  }
  return r;
}

/* A run to send: data, or (in an incremental stream) a hole.  Runs come in
 * ascending order; what lies before a resumed stream's start is skipped.
 */
static int
send_run (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  struct send_state *s = opaque;

  if (off + len <= s->start) {
    if (type == VOL_DIFF_DATA)
      s->done += len;
    return 0;
  }
  if (off < s->start) {
    if (type == VOL_DIFF_DATA)
      s->done += s->start - off;
    len -= s->start - off;
    off = s->start;
  }
  if (type == VOL_DIFF_HOLE)
    return stream_enc_zero (s->enc, off, len);
  return send_data (s, off, len);
}

/* vol_extents callback of a full stream: data runs only. */
static int
send_extent (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  if (type & VOL_EXTENT_HOLE)
    return 0;
  return send_run (opaque, off, len, VOL_DIFF_DATA);
}

/* Describe snapshot or checkpoint name, refusing what is neither.  A
 * checkpoint (VOL@#GEN, or VOL@TIME finding one) has no name, so the
 * receiver names it, and a GUID derived from where it is (ckpt_guid in
 * engine/checkpoint.c), the same every time it is sent: so it can be the
 * base of a later stream too.
 */
static int
stat_snapshot (struct cairn_pool *pool, const char *name, const char *what,
               struct vol_info *info)
{
  const char *at = strchr (name, '@');
  int r;

  if (at == NULL || at[1] == '\0')
    return cairn_fail (-EINVAL, "%s '%s' is not a snapshot: name one as "
                       "VOL@SNAP or a checkpoint as VOL@#GEN (a stream carries "
                       "a state with a GUID that the receiver keeps)", what,
                       name);
  r = vol_stat (pool, name, info);
  if (r == 0 && !info->is_snapshot)
    r = cairn_fail (-EINVAL, "%s '%s' is neither a snapshot nor a checkpoint",
                    what, name);
  return r;
}

/* Describe the snapshot to send (to) and its base (from: NULL, SNAP of the
 * same volume or VOL@SNAP; *base, named from_name), refusing a base that
 * is not an older snapshot of the same volume.
 */
static int
stat_stream (struct cairn_pool *pool, const char *snap, const char *from,
             struct vol_info *to, struct vol_info *base,
             char from_name[2 * VOL_NAME_MAX + 2])
{
  int r = stat_snapshot (pool, snap, "the snapshot to send", to);

  if (r < 0 || from == NULL)
    return r;
  if (strchr (from, '@'))
    snprintf (from_name, 2 * VOL_NAME_MAX + 2, "%s", from);
  else
    snprintf (from_name, 2 * VOL_NAME_MAX + 2, "%s@%s", to->name, from);
  r = stat_snapshot (pool, from_name, "the base", base);
  if (r < 0)
    return r;
  if (base->id != to->id)
    return cairn_fail (-EINVAL, "the base '%s' is not a snapshot of volume "
                       "'%s': an incremental stream goes from one snapshot "
                       "of a volume to a newer one", from_name, to->name);
  if (base->gen >= to->gen)
    return cairn_fail (-EINVAL, "the base '%s' is not older than '%s'",
                       from_name, snap);
  return 0;
}

/* Add up the data of an incremental stream (for progress). */
static int
count_data (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  (void) off;
  if (type == VOL_DIFF_DATA)
    *(uint64_t *) opaque += len;
  return 0;
}

/* The volume data a stream of snap (from: NULL or its base, SNAP or
 * VOL@SNAP) carries: for progress over a chain of streams.
 */
int
repl_send_data (struct cairn_pool *pool, const char *snap, const char *from,
                uint64_t *bytes)
{
  char from_name[2 * VOL_NAME_MAX + 2];
  struct vol_info to, base;
  int r = stat_stream (pool, snap, from, &to, &base, from_name);

  *bytes = 0;
  if (r < 0 || from == NULL) {
    *bytes = r < 0 ? 0 : to.referenced;
    return r;
  }
  return vol_diff (pool, from_name, snap, count_data, bytes);
}

/* Fill the header of the stream from `from` (NULL) to `to`. */
static void
fill_header (struct cairn_pool *pool, const struct vol_info *from,
             const struct vol_info *to, struct stream_header *hdr)
{
  memset (hdr, 0, sizeof *hdr);
  hdr->block_size = STREAM_BLOCK_SIZE;
  hdr->incompat = STREAM_INCOMPAT_BLOCKSUMS;
  pool_uuid (pool, hdr->pool_uuid);
  hdr->vol_id = to->id;
  hdr->vol_size = to->size;
  if (from) {
    hdr->from_guid = from->guid;
    hdr->from_gen = from->gen;
  }
  hdr->to_guid = to->guid;
  hdr->to_gen = to->gen;
  hdr->ctime = to->ctime;
  snprintf (hdr->vol_name, sizeof hdr->vol_name, "%s", to->name);
  snprintf (hdr->snap_name, sizeof hdr->snap_name, "%s", to->snap);
}

/* Resuming: the token's stream has the header hdr, or hdr without the
 * BLOCKSUMS feature when an older sender (which did not have it) sent it.
 * Make hdr the one whose digest the token carries (if neither matches,
 * stream_enc_resume says how the token differs).
 */
static void
match_token_features (struct stream_header *hdr, const struct stream_token *tok)
{
  struct stream_header old = *hdr;
  uint8_t digest[STREAM_SHA_LEN];

  old.incompat &= ~STREAM_INCOMPAT_BLOCKSUMS;
  stream_header_digest (&old, digest);
  if (memcmp (digest, tok->header_digest, STREAM_SHA_LEN) == 0)
    *hdr = old;
}

int
repl_send (struct cairn_pool *pool, const char *snap,
           const struct repl_send_opts *opts, struct repl_send_result *res)
{
  char from_name[2 * VOL_NAME_MAX + 2];
  struct vol_info to, from;
  struct stream_header hdr;
  struct stream_token tok;
  struct send_state s = { .opts = opts };
  int r;

  memset (res, 0, sizeof *res);
  r = stat_stream (pool, snap, opts->from, &to, &from, from_name);
  if (r < 0)
    return r;
  fill_header (pool, opts->from ? &from : NULL, &to, &hdr);
  if (opts->resume) {
    r = stream_token_parse (opts->resume, &tok);
    if (r < 0)
      return r;
    s.start = tok.next_offset;
    match_token_features (&hdr, &tok);
  }

  for (int i = 0; i < 2; i++) {
    s.buf[i] = calloc (1, STREAM_MAX_DATA);
    s.sums[i] = malloc (STREAM_MAX_PIECES * STREAM_SHA_LEN);
  }
  if (!s.buf[0] || !s.buf[1] || !s.sums[0] || !s.sums[1]) {
    r = cairn_fail (-ENOMEM, "out of memory");
    goto out;
  }
  pthread_mutex_init (&s.rd.lock, NULL);
  pthread_cond_init (&s.rd.cond, NULL);
  r = vol_open (pool, snap, &s.vol);
  s.rd.vol = s.vol;
  if (r == 0)
    r = stream_enc_new (&hdr, NULL, opts->sink, opts->sink_opaque, &s.enc);
  if (r == 0)
    r = opts->resume ? stream_enc_resume (s.enc, &tok) : stream_enc_begin (s.enc);
  if (r == 0 && opts->from) {
    if (opts->progress)
      r = vol_diff (pool, from_name, snap, count_data, &s.total);
    if (r == 0)
      r = vol_diff (pool, from_name, snap, send_run, &s);
  }
  else if (r == 0) {
    s.total = to.referenced;
    for (uint64_t off = 0; r == 0 && off < to.size; off += SEND_MAP_CHUNK)
      r = vol_extents (s.vol, (uint32_t) MIN (SEND_MAP_CHUNK, to.size - off),
                       off, send_extent, &s);
  }
  if (r == 0)
    r = stream_enc_end (s.enc);
  if (r == 0) {
    res->stream_bytes = stream_enc_bytes (s.enc);
    res->data_bytes = s.sent;
    stream_enc_digest (s.enc, res->digest);
  }
  reader_stop (&s.rd);
  pthread_cond_destroy (&s.rd.cond);
  pthread_mutex_destroy (&s.rd.lock);
  stream_enc_free (s.enc);
  vol_close (s.vol);
 out:
  for (int i = 0; i < 2; i++) {
    free (s.buf[i]);
    free (s.sums[i]);
  }
  return r;
}
