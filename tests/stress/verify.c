/* Cairn stress tool: what a pool must hold after its child was killed
 * (tests/stress/README.md, "What must survive a kill").
 *
 * The journal holds, in the order they happened, a begin record for every
 * operation (before the engine call) and an end record with its result
 * (after the engine returned and the model took it, before its locks
 * were let go).  A durable point is an operation that makes everything
 * acknowledged before it began durable, and itself when it returns: a
 * flush, a snapshot (snap_create commits) or a data operation with FUA
 * (vol_pwrite flushes: a commit, or with --intent-log a log write, which
 * makes as much durable: txn-log.c, IL-1, IL-2, IL-5).  Let P be the
 * begin record of the last durable point that ended with success.  Then:
 *
 *  V1. Every operation that ended with success before P was acknowledged
 *      before that durable point began, so it is durable; so is every
 *      durable point that ended with success.  Replayed in the order of
 *      their end records over the model the child started from, they give
 *      D, the durable model.  (Operations that conflict hold locks that order
 *      them, and their end records are written under those locks, so that
 *      order is the engine's.)
 *  V2. Every other operation that began (it ended after P, or never, or
 *      was a data operation that failed) may or may not be in the pool.
 *      A write, zero or trim of those may have left, per byte, its own
 *      byte: the byte read must be D's, or one of those operations' bytes
 *      that cover it.  (Looser than the engine promises, which is all or
 *      nothing per generation; it still finds every lost durable byte.)
 *  V3. A catalog operation of those makes the names it touches uncertain
 *      (they may or may not exist, with either contents): a snapshot's
 *      name for a snapshot create or delete; a volume's live state and its
 *      snapshots for a create, clone, delete or rename (both names); a
 *      volume's live state for a resize or rollback (and the new volume's
 *      names for the latter).
 *  V4. Every volume and snapshot of D whose name is not uncertain exists
 *      and reads as V2 says; every one in the pool is in D or uncertain;
 *      every read succeeds.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "stress.h"

struct jrec {
  bool begin;
  uint64_t id;
  int rc;
  struct mop op;
};

struct jop {
  const struct mop *op;       /* its begin record's */
  size_t begin;               /* index of its begin record */
  size_t end;                 /* index of its end record; SIZE_MAX: none */
  int rc;
};

struct verify {
  struct jrec *rec;
  size_t nrec;
  struct jop *ops;            /* by id */
  size_t nops;
  const struct mop **maybe;   /* data operations of V2 */
  size_t nmaybe;
  char (*unc)[256];
  size_t nunc;
  FILE *out;
  unsigned errors;
};

/* Read the journal's records and index them by operation id. */
static int
journal_read (struct verify *vf, const char *path)
{
  FILE *f = fopen (path, "r");
  char line[1024];

  if (f == NULL) {
    fprintf (vf->out, "stress: %s: %s\n", path, strerror (errno));
    return -1;
  }
  while (fgets (line, sizeof line, f) != NULL) {
    struct jrec r = { 0 };
    int used = 0;

    if (strchr (line, '\n') == NULL)
      break;                  /* cannot happen: one write(2) a line */
    if (line[0] == 'B' &&
        sscanf (line, "B %" SCNu64 " %n", &r.id, &used) == 1 && used > 0 &&
        mop_parse (line + used, &r.op) == 0)
      r.begin = true;
    else if (line[0] == 'E' && sscanf (line, "E %" SCNu64 " %d", &r.id,
                                       &r.rc) == 2)
      r.begin = false;
    else
      continue;
    if (r.id == 0 || r.id > 100000000)
      continue;
    if (vf->nrec % 4096 == 0)
      vf->rec = realloc (vf->rec, (vf->nrec + 4096) * sizeof *vf->rec);
    vf->rec[vf->nrec++] = r;
    if (r.id >= vf->nops) {
      size_t n = r.id * 2 + 16;

      vf->ops = realloc (vf->ops, n * sizeof *vf->ops);
      for (size_t i = vf->nops; i < n; i++)
        vf->ops[i] = (struct jop) { NULL, 0, SIZE_MAX, 0 };
      vf->nops = n;
    }
  }
  fclose (f);
  /* Pointers only now: the array has stopped moving. */
  for (size_t i = 0; i < vf->nrec; i++) {
    struct jrec *r = &vf->rec[i];

    if (r->begin) {
      vf->ops[r->id].op = &r->op;
      vf->ops[r->id].begin = i;
    }
    else {
      vf->ops[r->id].end = i;
      vf->ops[r->id].rc = r->rc;
    }
  }
  return 0;
}

/* Make a name uncertain (V3). */
static void
uncertain_add (struct verify *vf, const char *a, const char *suffix)
{
  vf->unc = realloc (vf->unc, (vf->nunc + 1) * sizeof *vf->unc);
  snprintf (vf->unc[vf->nunc++], sizeof vf->unc[0], "%s%s", a, suffix);
}

/* Is name uncertain? */
static bool
uncertain (const struct verify *vf, const char *name)
{
  for (size_t i = 0; i < vf->nunc; i++)
    if (strcmp (vf->unc[i], name) == 0)
      return true;
  return false;
}

/* Is kind a write, zero or trim? */
static bool
is_data (char kind)
{
  return kind == 'W' || kind == 'Z' || kind == 'T';
}

/* Is op durable once it returns, with everything acknowledged before it
 * began (V1): a flush, a snapshot (snap_create commits), a data operation
 * with FUA (vol_pwrite flushes, through the intent log when it is on)?
 */
static bool
is_durable_point (const struct mop *op)
{
  return op->kind == 'F' || op->kind == 'S' || (is_data (op->kind) && op->fua);
}

/* V3: the names an operation that may or may not have happened touches. */
static void
uncertain_op (struct verify *vf, const struct mop *op)
{
  char s[256];

  switch (op->kind) {
  case 'S': case 'X':
    snprintf (s, sizeof s, "%s@%s", op->a, op->b);
    uncertain_add (vf, s, "");
    break;
  case 'C':
    uncertain_add (vf, op->b, "");
    uncertain_add (vf, op->b, "@");
    break;
  case 'N': case 'D':
    uncertain_add (vf, op->a, "");
    uncertain_add (vf, op->a, "@");
    break;
  case 'R':
    uncertain_add (vf, op->a, "");
    uncertain_add (vf, op->a, "@");
    uncertain_add (vf, op->b, "");
    uncertain_add (vf, op->b, "@");
    break;
  case 'Q':
    uncertain_add (vf, op->a, "");
    break;
  case 'L':
    uncertain_add (vf, op->a, "");
    uncertain_add (vf, op->c, "");
    uncertain_add (vf, op->c, "@");
    break;
  }
}

/* V2: may byte b of live volume name read as x? */
static bool
byte_allowed (const struct verify *vf, const char *name, uint64_t b,
              uint8_t x)
{
  for (size_t i = 0; i < vf->nmaybe; i++) {
    const struct mop *op = vf->maybe[i];

    if (strcmp (op->a, name) == 0 && b >= op->off && b < op->off + op->len &&
        x == (op->kind == 'W' ? pattern_byte (op->tag, b - op->off) : 0))
      return true;
  }
  return false;
}

/* Compare what the pool holds with what it must (V2); live names the volume
 * whose writes in flight may show.
 */
static void
compare (struct verify *vf, const char *what, const char *live,
         const uint8_t *want, uint64_t wsize, const uint8_t *got,
         uint64_t gsize)
{
  unsigned shown = 0;
  uint64_t bad = 0;

  if (wsize != gsize) {
    fprintf (vf->out, "stress: %s is %" PRIu64 " bytes, must be %" PRIu64
             "\n", what, gsize, wsize);
    vf->errors++;
    return;
  }
  for (uint64_t b = 0; b < wsize; b++) {
    if (got[b] == want[b] ||
        (live != NULL && byte_allowed (vf, live, b, got[b])))
      continue;
    if (shown++ < 4)
      fprintf (vf->out, "stress: %s byte %" PRIu64 " (block %" PRIu64
               ") reads 0x%02x, must be 0x%02x%s\n", what, b, b / 4096,
               got[b], want[b],
               live != NULL ? " or a byte of a write in flight" : "");
    bad++;
  }
  if (bad > 0) {
    fprintf (vf->out, "stress: %s: %" PRIu64 " bytes differ from the "
             "durable model\n", what, bad);
    vf->errors++;
  }
}

/* A deep copy of a model. */
static void
model_copy (struct model *dst, const struct model *src)
{
  model_clear (dst);
  for (unsigned i = 0; i < MODEL_VOLS; i++) {
    const struct mvol *s = &src->v[i];
    struct mvol *d = &dst->v[i];

    if (!s->alive)
      continue;
    d->alive = true;
    memcpy (d->name, s->name, sizeof d->name);
    d->size = s->size;
    d->img = malloc (s->size ? s->size : 1);
    memcpy (d->img, s->img, s->size);
    d->nsnaps = s->nsnaps;
    for (unsigned k = 0; k < s->nsnaps; k++) {
      d->snap[k] = s->snap[k];
      d->snap[k].img = malloc (s->snap[k].size ? s->snap[k].size : 1);
      memcpy (d->snap[k].img, s->snap[k].img, s->snap[k].size);
    }
  }
}

int
model_verify (const struct model *base, const char *journal_path,
              struct cairn_pool *pool, FILE *out)
{
  struct verify vf = { .out = out };
  struct model *d = malloc (sizeof *d), *got = malloc (sizeof *got);
  size_t p = 0;
  char name[2 * MODEL_NAME + 2];

  model_init (d);
  model_init (got);
  if (journal_read (&vf, journal_path) < 0) {
    vf.errors++;
    goto out;
  }
  /* P: the begin of the last durable point that ended with success. */
  for (size_t id = 1; id < vf.nops; id++) {
    const struct jop *o = &vf.ops[id];

    if (o->op != NULL && is_durable_point (o->op) && o->end != SIZE_MAX &&
        o->rc == 0)
      p = MAX (p, o->begin);
  }
  /* V1: the durable model. */
  model_copy (d, base);
  for (size_t i = 0; i < vf.nrec; i++) {
    const struct jrec *r = &vf.rec[i];
    const struct jop *o = &vf.ops[r->id];

    if (r->begin || r->rc != 0 || o->op == NULL ||
        (i >= p && !is_durable_point (o->op)))
      continue;
    if (model_apply (d, o->op) < 0) {
      char s[400];

      mop_format (o->op, s, sizeof s);
      fprintf (out, "stress: the journal does not apply: %s\n", s);
      vf.errors++;
      goto out;
    }
  }
  /* V2, V3: what may or may not have happened. */
  for (size_t id = 1; id < vf.nops; id++) {
    const struct jop *o = &vf.ops[id];

    if (o->op == NULL ||
        (o->end != SIZE_MAX && o->end < p &&
         (o->rc == 0 || !is_data (o->op->kind))) ||
        (o->end != SIZE_MAX && o->rc == 0 && is_durable_point (o->op)))
      continue;
    if (is_data (o->op->kind)) {
      vf.maybe = realloc (vf.maybe, (vf.nmaybe + 1) * sizeof *vf.maybe);
      vf.maybe[vf.nmaybe++] = o->op;
    }
    else
      uncertain_op (&vf, o->op);
  }
  /* V4 */
  if (model_load (got, pool) < 0) {
    fprintf (out, "stress: the pool cannot be read whole: %s\n",
             cairn_errmsg ());
    vf.errors++;
    goto out;
  }
  for (unsigned i = 0; i < MODEL_VOLS; i++) {
    struct mvol *g = &got->v[i], *w;

    if (!g->alive)
      continue;
    w = model_find (d, g->name);
    if (!uncertain (&vf, g->name)) {
      if (w == NULL) {
        fprintf (out, "stress: volume %s exists, and must not\n", g->name);
        vf.errors++;
      }
      else
        compare (&vf, g->name, g->name, w->img, w->size, g->img, g->size);
    }
    snprintf (name, sizeof name, "%s@", g->name);
    if (uncertain (&vf, name))
      continue;
    for (unsigned k = 0; k < g->nsnaps; k++) {
      struct msnap *ws = w ? model_find_snap (w, g->snap[k].name) : NULL;

      snprintf (name, sizeof name, "%s@%s", g->name, g->snap[k].name);
      if (uncertain (&vf, name))
        continue;
      if (ws == NULL) {
        fprintf (out, "stress: snapshot %s exists, and must not\n", name);
        vf.errors++;
      }
      else
        compare (&vf, name, NULL, ws->img, ws->size, g->snap[k].img,
                 g->snap[k].size);
    }
  }
  for (unsigned i = 0; i < MODEL_VOLS; i++) {
    struct mvol *w = &d->v[i], *g;

    if (!w->alive)
      continue;
    g = model_find (got, w->name);
    if (g == NULL && !uncertain (&vf, w->name)) {
      fprintf (out, "stress: volume %s is missing\n", w->name);
      vf.errors++;
    }
    snprintf (name, sizeof name, "%s@", w->name);
    if (uncertain (&vf, name))
      continue;
    for (unsigned k = 0; k < w->nsnaps; k++) {
      snprintf (name, sizeof name, "%s@%s", w->name, w->snap[k].name);
      if (!uncertain (&vf, name) &&
          (g == NULL || model_find_snap (g, w->snap[k].name) == NULL)) {
        fprintf (out, "stress: snapshot %s is missing\n", name);
        vf.errors++;
      }
    }
  }
out:
  model_clear (d);
  model_clear (got);
  free (d);
  free (got);
  free (vf.rec);
  free (vf.ops);
  free (vf.unc);
  free (vf.maybe);
  return vf.errors ? -1 : 0;
}
