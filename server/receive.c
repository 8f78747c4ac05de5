/* Cairn replication: receiving a stream into a volume (see replicate.h).
 *
 * Design note.
 *
 * A receive writes into a partial volume (engine/volume.h): a volume that
 * carries the target's name but that nothing finds by name, so that until
 * the stream's END is verified nothing anyone can see has changed.
 *
 *   full stream         the target must not exist; the partial starts
 *                       empty, and publishing gives it the target's name
 *                       and snapshots it (name and GUID from the stream)
 *   incremental stream  the target's newest snapshot must have the stream's
 *                       base GUID, and the target must not have been written
 *                       since (else the receive refuses, saying which);
 *                       the partial starts as a clone of that snapshot, and
 *                       publishing makes the received state the target's
 *                       live state and its newest snapshot, keeping every
 *                       older snapshot and the target's identity (the
 *                       engine exchanges the two trees in one generation:
 *                       see "partial volumes" in engine/catalog-recv.c)
 *   ... with rollback   (opts.rollback, `cairn receive --rollback`, like
 *                       `zfs receive -F`) the stream's base may be any
 *                       snapshot of the target, which may also have been
 *                       written since: publishing rolls the target back to
 *                       the base in the same catalog change, discarding the
 *                       live writes since the base and destroying the
 *                       snapshots newer than it, so the target mirrors its
 *                       source.  Nothing is rolled back before the END is
 *                       verified (RV-1): a failed or cut stream destroys
 *                       nothing.  A base the target does not have is
 *                       refused with or without rollback.  The result
 *                       says what was discarded (res->discarded: the
 *                       snapshots by name, the writes), so that the user
 *                       is told (issue 33, item 8).
 *
 * Invariants (tests cite them as RV-n):
 *  RV-1  Nothing visible changes before the END record is verified: WRITE
 *        and ZERO records go to the partial only, and publishing is one
 *        catalog change, made after the END (which covers the whole
 *        stream's chain) passed.
 *  RV-2  A record is applied only after the decoder verified it (stream.h
 *        invariant 1), in stream order.
 *  RV-3  The partial's saved state is a resume token for a point at or
 *        before everything applied, and it is saved by the same commit that
 *        makes what it covers durable (vol_partial_save).  Saves happen at
 *        the HEADER, at each PROGRESS record (every 16 MiB of stream), and
 *        when the stream fails verification or ends early; so a receive
 *        interrupted in any way, even by a crash, can resume from its last
 *        save.  After a failure to apply a record (ENOSPC), the last save
 *        stands.
 *  RV-4  An interrupted receive keeps its partial; the next receive into
 *        the same target must be the resumed stream (cairn send --resume
 *        TOKEN), or the partial must be discarded (repl_recv_abort).
 *
 * States: new --HEADER (checks, partial made or reopened)--> applying
 * --WRITE/ZERO/PROGRESS--> applying --END (publish)--> done; any error -->
 * failed (repl_recv_finish saves the token).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "replicate.h"

struct repl_recv {
  struct cairn_pool *pool;
  char target[VOL_NAME_MAX + 1];
  struct repl_recv_opts opts;
  struct stream_dec *dec;
  bool resuming;              /* the stream continues the saved token */
  bool have_partial;          /* this receive has a partial (made or found) */
  struct cairn_volume *part;  /* the partial, open while applying */
  struct stream_header hdr;
  char snap[VOL_NAME_MAX + 1];  /* the snapshot to publish */
  int err;                    /* the error that stopped the receive */
  bool apply_failed;          /* ... while applying a verified record */
  char errmsg[1024];
  bool done;                  /* published */
  struct vol_discarded discarded; /* what the publish's rollback discarded */
  uint64_t data_bytes;
  uint8_t digest[STREAM_SHA_LEN];
};

/* Remember the error that stops the receive (with its message). */
static int
recv_fail (struct repl_recv *rr, int err, bool applying)
{
  if (rr->err == 0) {
    rr->err = err;
    rr->apply_failed = applying;
    snprintf (rr->errmsg, sizeof rr->errmsg, "%s", cairn_errmsg ());
  }
  return err;
}

/* Save the decoder's resume token as the partial's state (RV-3). */
static int
save_token (struct repl_recv *rr)
{
  char text[STREAM_TOKEN_MAX];
  struct stream_token tok;
  int r = stream_dec_token (rr->dec, &tok);

  if (r < 0)
    return r;
  stream_token_format (&tok, text);
  return vol_partial_save (rr->pool, rr->target, text);
}

/* vol_diff callback: the first change stops the walk. */
static int
first_change (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  (void) len;
  (void) type;
  *(uint64_t *) opaque = off;
  return 1;
}

/* The target's snapshots, oldest first. */
struct snaps {
  const char *vol;
  struct vol_info *v;
  size_t n, cap;
};

/* vol_list callback: keep the target's snapshots. */
static int
collect_snap (void *opaque, const struct vol_info *info)
{
  struct snaps *s = opaque;

  if (!info->is_snapshot || strcmp (info->name, s->vol) != 0)
    return 0;
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    struct vol_info *v = realloc (s->v, cap * sizeof *v);

    if (v == NULL)
      return cairn_fail (-ENOMEM, "out of memory");
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = *info;
  return 0;
}

/* vol_list_tolerant callback: a damaged record of the target (its own or
 * a snapshot's) fails the check, which must see every snapshot; one of
 * another volume does not matter.
 */
static int
target_damaged (void *opaque, const struct vol_damage *d)
{
  const struct snaps *s = opaque;

  return strcmp (d->name, s->vol) == 0 ? vol_damage_error (d) : 0;
}

/* How a refusal names the rollback the user can ask for (item 7 of
 * issue 33): the command's own words when the method knows them, else the
 * option that every receiving command shares.  Messages name what the
 * user types, not the protocol's parameter ("rollback").
 */
static const char *
rollback_hint (const struct repl_recv *rr)
{
  return rr->opts.rollback_hint ? rr->opts.rollback_hint
                                : "the same command with --rollback";
}

/* With rollback: the stream's base may be any snapshot of the target (s,
 * oldest first); name it (NAME@SNAP) in base.  What lies after it is
 * discarded when the receive publishes, so only the snapshots up to the
 * base matter: the stream's own snapshot must not be among them, nor its
 * name.
 */
static int
check_rollback (struct repl_recv *rr, const struct snaps *s,
                char base[2 * VOL_NAME_MAX + 2])
{
  const struct stream_header *h = &rr->hdr;
  char uuid[37];
  size_t b;

  for (b = 0; b < s->n && s->v[b].guid != h->from_guid; b++)
    ;
  if (b == s->n) {
    uuid_format (h->pool_uuid, uuid);
    return cairn_fail (-ESTALE, "'%s' has no snapshot with the stream's base "
                       "GUID %016" PRIx64 " (generation %" PRIu64 " of pool "
                       "%s), even to roll back to: send from a snapshot that "
                       "both sides have", rr->target, h->from_guid,
                       h->from_gen, uuid);
  }
  for (size_t i = 0; i < s->n; i++)
    if (s->v[i].guid == h->to_guid)
      return cairn_fail (-EEXIST, "'%s@%s' is the snapshot this stream "
                         "carries: it was received already", rr->target,
                         s->v[i].snap);
  for (size_t i = 0; i <= b; i++)
    if (strcmp (s->v[i].snap, rr->snap) == 0)
      return cairn_fail (-EEXIST, "volume '%s' has a snapshot named '%s' "
                         "already (another state): rename it first",
                         rr->target, rr->snap);
  snprintf (base, 2 * VOL_NAME_MAX + 2, "%s@%s", rr->target, s->v[b].snap);
  return 0;
}

/* Check that the target can take an incremental stream, and name its base
 * snapshot (NAME@SNAP) in base.
 */
static int
check_incremental (struct repl_recv *rr, char base[2 * VOL_NAME_MAX + 2])
{
  const struct stream_header *h = &rr->hdr;
  struct snaps s = { .vol = rr->target };
  struct vol_info info, *newest;
  char uuid[37];
  uint64_t change = UINT64_MAX;
  int r = vol_stat (rr->pool, rr->target, &info);

  uuid_format (h->pool_uuid, uuid);
  if (r == -ENOENT)
    return cairn_fail (-ENOENT, "volume '%s' does not exist: an incremental "
                       "stream needs the volume that holds its base "
                       "(snapshot GUID %016" PRIx64 "); receive a full "
                       "stream first", rr->target, h->from_guid);
  if (r == 0)
    r = vol_list_tolerant (rr->pool, true, collect_snap, target_damaged, &s);
  if (r < 0)
    goto out;
  if (s.n == 0) {
    r = cairn_fail (-ESTALE, "volume '%s' has no snapshots, so it cannot be "
                    "the base of an incremental stream (from snapshot GUID "
                    "%016" PRIx64 ")", rr->target, h->from_guid);
    goto out;
  }
  newest = &s.v[s.n - 1];
  if (rr->opts.rollback) {
    r = check_rollback (rr, &s, base);
    goto out;
  }
  for (size_t i = 0; i < s.n; i++)
    if (s.v[i].guid == h->to_guid) {
      r = cairn_fail (-EEXIST, "'%s@%s' is the snapshot this stream carries: "
                      "it was received already", rr->target, s.v[i].snap);
      goto out;
    }
  if (newest->guid != h->from_guid) {
    for (size_t i = 0; i + 1 < s.n; i++)
      if (s.v[i].guid == h->from_guid) {
        r = cairn_fail (-ESTALE, "the stream's base is '%s@%s', but '%s' has "
                        "newer snapshots ('%s' is the newest): a stream only "
                        "extends the newest snapshot, so delete the newer ones "
                        "first, or run %s to discard them",
                        rr->target, s.v[i].snap, rr->target, newest->snap,
                        rollback_hint (rr));
        goto out;
      }
    r = cairn_fail (-ESTALE, "the newest snapshot of '%s' is '%s' (GUID "
                    "%016" PRIx64 "), but the stream's base is snapshot GUID "
                    "%016" PRIx64 " (generation %" PRIu64 " of pool %s), which "
                    "'%s' does not have: send from a snapshot that both sides "
                    "have", rr->target, newest->snap, newest->guid,
                    h->from_guid, h->from_gen, uuid, rr->target);
    goto out;
  }
  for (size_t i = 0; i < s.n; i++)
    if (strcmp (s.v[i].snap, rr->snap) == 0) {
      r = cairn_fail (-EEXIST, "volume '%s' has a snapshot named '%s' already "
                      "(another state): rename it first", rr->target, rr->snap);
      goto out;
    }
  snprintf (base, 2 * VOL_NAME_MAX + 2, "%s@%s", rr->target, newest->snap);
  r = vol_diff (rr->pool, base, rr->target, first_change, &change);
  if (r == 1)
    r = cairn_fail (-ESTALE, "volume '%s' was written after its snapshot '%s' "
                    "(first change at byte %" PRIu64 "), so the stream does not "
                    "apply to it: a volume that receives incremental streams "
                    "must stay as its newest snapshot left it (run %s to "
                    "discard the writes, or delete it and receive a full "
                    "stream to start over)", rr->target, newest->snap, change,
                    rollback_hint (rr));
 out:
  free (s.v);
  return r;
}

/* The HEADER: check the target and make (or reopen) the partial. */
static int
on_header (struct repl_recv *rr, const struct stream_header *h)
{
  char base[2 * VOL_NAME_MAX + 2], text[STREAM_TOKEN_MAX];
  struct stream_token tok;
  struct vol_info info;
  int r;

  rr->hdr = *h;
  if (h->snap_name[0])
    snprintf (rr->snap, sizeof rr->snap, "%s", h->snap_name);
  else
    snprintf (rr->snap, sizeof rr->snap, "gen-%" PRIu64, h->to_gen);
  if (!rr->resuming) {
    if (h->from_guid == 0) {
      r = vol_stat (rr->pool, rr->target, &info);
      if (r == 0)
        return cairn_fail (-EEXIST, "volume '%s' exists: a full stream makes "
                           "a new volume; receive it under another name, or "
                           "delete '%s' first", rr->target, rr->target);
      if (r != -ENOENT)
        return r;
    }
    else if ((r = check_incremental (rr, base)) < 0)
      return r;
    r = stream_dec_token (rr->dec, &tok);
    if (r < 0)
      return r;
    stream_token_format (&tok, text);
    r = vol_partial_create (rr->pool, rr->target, h->from_guid ? base : NULL,
                            h->vol_size, text,
                            rr->opts.rollback ? VOL_RECV_ROLLBACK : 0);
    if (r < 0)
      return r;
  }
  rr->have_partial = true;
  return vol_partial_open (rr->pool, rr->target, &rr->part);
}

/* Zero a range of the partial, VOL_MAX_IO at a time. */
static int
apply_zero (struct repl_recv *rr, uint64_t off, uint64_t len)
{
  int r = 0;

  while (r == 0 && len > 0) {
    uint32_t n = (uint32_t) MIN (len, (uint64_t) VOL_MAX_IO);

    r = vol_zero (rr->part, n, off, 0);
    off += n;
    len -= n;
  }
  return r;
}

/* Write a WRITE record's data into the partial.  A BLOCKSUMS record's
 * piece digests, which the decoder computed from this data and checked,
 * are the engine's block checksums when the pieces are the volume's
 * blocks (the record starts on a 4096-byte boundary): the engine stores
 * them instead of hashing the data again.  A last piece shorter than a
 * block (the volume's end) is written the ordinary way.
 */
static int
apply_write (struct repl_recv *rr, const struct stream_event *ev)
{
  uint64_t whole = ev->length - ev->length % STREAM_PIECE;
  const uint8_t *data = ev->data;
  int r = 0;

  if (ev->sums == NULL || ev->offset % STREAM_PIECE)
    whole = 0;
  if (whole)
    r = vol_pwrite_sums (rr->part, data, (uint32_t) whole, ev->offset,
                         ev->sums, 0);
  if (r == 0 && whole < ev->length)
    r = vol_pwrite (rr->part, data + whole, (uint32_t) (ev->length - whole),
                    ev->offset + whole, 0);
  return r;
}

/* The END: publish (RV-1). */
static int
on_end (struct repl_recv *rr, const uint8_t digest[STREAM_SHA_LEN])
{
  int r;

  memcpy (rr->digest, digest, STREAM_SHA_LEN);
  vol_close (rr->part);
  rr->part = NULL;
  r = vol_partial_publish (rr->pool, rr->target, rr->snap, rr->hdr.to_guid,
                           rr->hdr.ctime,
                           rr->opts.rollback ? VOL_RECV_ROLLBACK : 0,
                           &rr->discarded);
  if (r == 0)
    rr->done = true;
  return r;
}

/* Act on one verified record (RV-2). */
static int
apply_event (struct repl_recv *rr, const struct stream_event *ev)
{
  int r = 0;

  switch (ev->type) {
  case STREAM_EV_HEADER:
    return on_header (rr, ev->header);
  case STREAM_EV_WRITE:
    r = apply_write (rr, ev);
    if (r == 0)
      rr->data_bytes += ev->length;
    break;
  case STREAM_EV_ZERO:
    r = apply_zero (rr, ev->offset, ev->length);
    break;
  case STREAM_EV_PROGRESS:
    return save_token (rr);
  case STREAM_EV_RESUME:
    return 0;
  case STREAM_EV_END:
    return on_end (rr, ev->digest);
  }
  if (r == 0 && rr->opts.progress)
    rr->opts.progress (rr->opts.progress_opaque, rr->data_bytes, 0);
  return r;
}

int
repl_recv_new (struct cairn_pool *pool, const char *target,
               const struct repl_recv_opts *opts, struct repl_recv **rrp)
{
  char state[VOL_PARTIAL_STATE_MAX];
  struct stream_token tok;
  struct repl_recv *rr;
  int r;

  if (strchr (target, '@'))
    return cairn_fail (-EINVAL, "receive into a volume, not '%s': the "
                       "snapshot takes its name from the stream", target);
  r = vol_check_name (target);
  if (r < 0)
    return r;
  rr = calloc (1, sizeof *rr);
  if (rr == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  rr->pool = pool;
  snprintf (rr->target, sizeof rr->target, "%s", target);
  if (opts)
    rr->opts = *opts;
  r = vol_partial_get (pool, target, state, NULL);
  if (r == 0) {
    /* An interrupted receive: the stream must continue it (RV-4). */
    r = stream_token_parse (state, &tok);
    if (r < 0)
      r = cairn_fail (r, "the interrupted receive into '%s' has a damaged "
                      "resume state (%s): abort it", target, cairn_errmsg ());
    rr->resuming = true;
    rr->have_partial = true;
  }
  else if (r == -ENOENT)
    r = 0;
  if (r == 0)
    r = stream_dec_new (rr->resuming ? &tok : NULL, &rr->dec);
  if (r < 0) {
    free (rr);
    return r;
  }
  *rrp = rr;
  return 0;
}

int
repl_recv_feed (struct repl_recv *rr, const void *buf, size_t len,
                size_t *used)
{
  const uint8_t *p = buf;
  size_t off = 0;

  *used = 0;
  if (rr->err)
    return cairn_fail (rr->err, "%s", rr->errmsg);
  if (rr->done)
    return 1;
  while (off < len) {
    struct stream_event ev;
    size_t u;
    int r = stream_dec_next (rr->dec, p + off, len - off, &u, &ev);

    off += u;
    *used = off;
    if (r < 0)
      return recv_fail (rr, r, false);
    if (r == 0)
      break;
    r = apply_event (rr, &ev);
    if (r < 0)
      return recv_fail (rr, r, true);
    if (rr->done)
      return 1;
  }
  return 0;
}

int
repl_recv_finish (struct repl_recv *rr, struct repl_recv_result *res)
{
  int r;

  memset (res, 0, sizeof *res);
  snprintf (res->name, sizeof res->name, "%s@%s", rr->target, rr->snap);
  res->incremental = rr->hdr.from_guid != 0;
  res->resumed = rr->resuming;
  res->stream_bytes = stream_dec_pos (rr->dec);
  res->data_bytes = rr->data_bytes;
  memcpy (res->digest, rr->digest, STREAM_SHA_LEN);
  if (rr->done) {
    res->discarded = rr->discarded;
    return 0;
  }
  if (rr->err == 0) {
    r = stream_dec_finish (rr->dec);
    recv_fail (rr, r < 0 ? r : -EPIPE, false);
  }
  vol_close (rr->part);
  rr->part = NULL;
  if (rr->have_partial) {
    /* Keep what was applied, with a token for it (RV-3, RV-4). */
    if (!rr->apply_failed)
      (void) save_token (rr);
    res->kept = repl_recv_token (rr->pool, rr->target, res->token) == 0 &&
                res->token[0] != '\0';
  }
  return cairn_fail (rr->err, "%s", rr->errmsg);
}

void
repl_recv_free (struct repl_recv *rr)
{
  if (rr == NULL)
    return;
  vol_close (rr->part);
  stream_dec_free (rr->dec);
  free (rr);
}

int
repl_recv_token (struct cairn_pool *pool, const char *target,
                 char token[STREAM_TOKEN_MAX])
{
  char state[VOL_PARTIAL_STATE_MAX];
  int r = vol_partial_get (pool, target, state, NULL);

  if (r == -ENOENT)
    return cairn_fail (-ENOENT, "no receive into '%s' was interrupted", target);
  if (r == 0 && strlen (state) >= STREAM_TOKEN_MAX)
    r = cairn_fail (-EIO, "the interrupted receive into '%s' has a damaged "
                    "resume state: abort it", target);
  if (r == 0)
    memcpy (token, state, strlen (state) + 1);
  return r;
}

int
repl_recv_abort (struct cairn_pool *pool, const char *target)
{
  int r = vol_partial_abort (pool, target);

  if (r == -ENOENT)
    return cairn_fail (-ENOENT, "no receive into '%s' was interrupted: there "
                       "is nothing to abort", target);
  return r;
}
