/* Cairn engine: I/O statistics per export (engine/volume.h, "statistics").
 *
 * Where the counters live, and why here: the plugin serves the exports,
 * but the control methods that report them (server/, libcairnserver) must
 * not include nbdkit, and the engine is what both of them link and share
 * through the pool handle.  So the engine keeps them, beside the volume
 * handles that do the I/O.
 *
 * The data path takes no lock for them (nbdkit's PARALLEL thread model):
 *
 *  1. Every open handle counts its own I/O in its struct vol_stats with
 *     relaxed atomic adds (volume.c).  Nothing else writes them.
 *  2. A handle that serves an export registers here (vol_stats_track) in
 *     the entry of its export: (volume id, generation), 0 for the live
 *     volume.  The registry is a table on the catalog with its own mutex,
 *     taken only by track, close and listings, never by I/O.
 *  3. vol_close folds the handle's counters into its entry and drops the
 *     handle from it, under that mutex, before freeing the handle: so a
 *     listing, which sums an entry's folded counters and the live counters
 *     of the handles still registered, never reads a freed handle and never
 *     counts one twice.  A live count may be a few operations behind the
 *     handle's threads (relaxed loads), never ahead of them.
 *     Request latencies (struct vol_latency) go the same way: each handle
 *     records into its own histograms, close folds them into the entry.
 *  4. Entries outlive their volumes: statistics are kept from the pool's
 *     opening (the server's start) to its close, for exports since deleted
 *     too.  Nothing is stored on disk.
 *
 * Names are resolved when listed, from the catalog as it is then: a renamed
 * volume's statistics follow it; a generation that a snapshot pins is
 * listed as VOL@SNAP however it was opened (VOL@SNAP or VOL@#GEN are one
 * state); an entry whose volume or snapshot is gone keeps the name it had
 * when last listed (or opened, if that came later) and is marked gone.  Handles opened for other work (send,
 * diff) do not register, so only what NBD clients do is counted.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "catalog-int.h"

/* One export's counters. */
struct xstats_entry {
  uint64_t id, gen;
  char name[VOL_EXPORT_NAME_MAX];    /* as last opened */
  char state[VOL_NAME_MAX + 2];       /* the state's name as last opened:
                                       * "daily", "#GEN"; "" when live */
  struct vol_stats folded;            /* of the handles closed */
  struct vol_latency folded_lat;
  struct cairn_volume **open;         /* handles registered now */
  size_t nopen, open_cap;
};

/* The table of every export opened since the pool was opened. */
struct xstats {
  pthread_mutex_t lock;
  struct xstats_entry *e;
  size_t n, cap;
};

/* Free the table (catalog_destroy). */
void
xstats_free (struct xstats *xs)
{
  if (xs == NULL)
    return;
  for (size_t i = 0; i < xs->n; i++)
    free (xs->e[i].open);
  free (xs->e);
  pthread_mutex_destroy (&xs->lock);
  free (xs);
}

/* The catalog's table, created on first use; NULL when create is false and
 * there is none yet.
 */
static struct xstats *
xstats_get (struct catalog *cat, bool create)
{
  struct xstats *xs;

  pthread_mutex_lock (&cat->tlock);
  xs = cat->xstats;
  if (xs == NULL && create && (xs = calloc (1, sizeof *xs)) != NULL) {
    pthread_mutex_init (&xs->lock, NULL);
    cat->xstats = xs;
  }
  pthread_mutex_unlock (&cat->tlock);
  return xs;
}

/* The entry of (id, gen), or NULL (lock held). */
static struct xstats_entry *
find_entry (struct xstats *xs, uint64_t id, uint64_t gen)
{
  for (size_t i = 0; i < xs->n; i++)
    if (xs->e[i].id == id && xs->e[i].gen == gen)
      return &xs->e[i];
  return NULL;
}

/* Add s into *sum. */
static void
stats_add (struct vol_stats *sum, const struct vol_stats *s)
{
  sum->bytes_read += s->bytes_read;
  sum->bytes_written += s->bytes_written;
  sum->reads += s->reads;
  sum->writes += s->writes;
  sum->trims += s->trims;
  sum->zeros += s->zeros;
  sum->flushes += s->flushes;
  sum->extents += s->extents;
  sum->caches += s->caches;
  sum->errors += s->errors;
  sum->csum_errors += s->csum_errors;
  sum->bytes_trimmed += s->bytes_trimmed;
  sum->bytes_zeroed += s->bytes_zeroed;
}

/* Add the histograms of b into a. */
static void
latency_add (struct vol_latency *a, const struct vol_latency *b)
{
  for (unsigned op = 0; op < VOL_OPS; op++)
    lat_add (&a->op[op], &b->op[op]);
}

/* Add the live counters and histograms of handle v into o. */
static void
add_handle (struct vol_export_stats *o, struct cairn_volume *v)
{
  struct vol_stats st;
  struct vol_latency lat;

  vol_stats (v, &st);
  stats_add (&o->st, &st);
  vol_latency (v, &lat);
  latency_add (&o->lat, &lat);
}

/* Count v's I/O in the statistics of its export. */
int
vol_stats_track (struct cairn_volume *v, const char *export_name)
{
  struct volstate *vs = vol_state (v);
  struct xstats *xs = xstats_get (vs->cat, true);
  struct xstats_entry *e;
  uint64_t gen = vol_pin_gen (v);
  int r = 0;

  if (xs == NULL)
    return cairn_fail (-ENOMEM, "out of memory counting the I/O of '%s'",
                       export_name);
  pthread_mutex_lock (&xs->lock);
  e = find_entry (xs, vs->id, gen);
  if (e == NULL && xs->n == xs->cap) {
    size_t cap = xs->cap ? 2 * xs->cap : 16;
    struct xstats_entry *ne = realloc (xs->e, cap * sizeof *ne);

    if (ne == NULL)
      r = -ENOMEM;
    else {
      xs->e = ne;
      xs->cap = cap;
    }
  }
  if (r == 0 && e == NULL) {
    e = &xs->e[xs->n++];
    *e = (struct xstats_entry) { .id = vs->id, .gen = gen };
  }
  if (r == 0 && e->nopen == e->open_cap) {
    size_t cap = e->open_cap ? 2 * e->open_cap : 4;
    struct cairn_volume **no = realloc (e->open, cap * sizeof *no);

    if (no == NULL)
      r = -ENOMEM;
    else {
      e->open = no;
      e->open_cap = cap;
    }
  }
  if (r == 0) {
    snprintf (e->name, sizeof e->name, "%s", export_name);
    struct vol_info info;

    vol_get_info (v, &info);
    if (gen == 0)
      e->state[0] = '\0';
    else if (info.snap[0])
      snprintf (e->state, sizeof e->state, "%s", info.snap);
    else
      snprintf (e->state, sizeof e->state, "#%" PRIu64, gen);
    e->open[e->nopen++] = v;
  }
  pthread_mutex_unlock (&xs->lock);
  if (r < 0)
    return cairn_fail (r, "out of memory counting the I/O of '%s'",
                       export_name);
  return 0;
}

/* Fold a closing handle's counters into its export (volume.c, vol_close;
 * a handle that never registered is not found, and nothing happens).
 */
void
xstats_close (struct cairn_volume *v)
{
  struct volstate *vs = vol_state (v);
  struct xstats *xs = xstats_get (vs->cat, false);
  struct xstats_entry *e;

  if (xs == NULL)
    return;
  pthread_mutex_lock (&xs->lock);
  e = find_entry (xs, vs->id, vol_pin_gen (v));
  for (size_t i = 0; e && i < e->nopen; i++)
    if (e->open[i] == v) {
      struct vol_stats st;
      struct vol_latency lat;

      vol_stats (v, &st);
      stats_add (&e->folded, &st);
      vol_latency (v, &lat);
      latency_add (&e->folded_lat, &lat);
      e->open[i] = e->open[--e->nopen];
      break;
    }
  pthread_mutex_unlock (&xs->lock);
}

/* Copy the table: each entry's counters, folded and live, summed. */
static int
snapshot_table (struct catalog *cat, struct vol_export_stats **outp,
                size_t *np)
{
  struct xstats *xs = xstats_get (cat, false);
  struct vol_export_stats *out = NULL;
  size_t n = 0;

  if (xs == NULL)
    goto done;
  pthread_mutex_lock (&xs->lock);
  out = calloc (xs->n ? xs->n : 1, sizeof *out);
  for (size_t i = 0; out && i < xs->n; i++) {
    struct xstats_entry *e = &xs->e[i];
    struct vol_export_stats *o = &out[n++];

    o->id = e->id;
    o->gen = e->gen;
    o->opens = (unsigned) e->nopen;
    snprintf (o->name, sizeof o->name, "%s", e->name);
    snprintf (o->state, sizeof o->state, "%s", e->state);
    o->st = e->folded;
    o->lat = e->folded_lat;
    for (size_t h = 0; h < e->nopen; h++)
      add_handle (o, e->open[h]);
  }
  pthread_mutex_unlock (&xs->lock);
  if (out == NULL)
    return cairn_fail (-ENOMEM, "out of memory listing I/O statistics");
 done:
  *outp = out;
  *np = n;
  return 0;
}

/* Current names of listed states, for resolving entries. */
struct names {
  struct vol_export_stats *x;
  size_t n;
};

/* vol_list callback: name the entries of this volume or snapshot. */
static int
name_entries (void *opaque, const struct vol_info *info)
{
  struct names *nm = opaque;

  for (size_t i = 0; i < nm->n; i++) {
    struct vol_export_stats *x = &nm->x[i];

    if (x->id != info->id)
      continue;
    if (info->is_snapshot && x->gen == info->gen)
      snprintf (x->name, sizeof x->name, "%s@%s", info->name, info->snap);
    else if (!info->is_snapshot && x->gen == 0)
      snprintf (x->name, sizeof x->name, "%s", info->name);
    else if (!info->is_snapshot && x->gen != 0 && x->gone)
      /* A generation no snapshot names (yet; a snapshot's own callback
       * comes after its volume's and overrides this): VOL@#GEN.
       */
      snprintf (x->name, sizeof x->name, "%s@#%" PRIu64, info->name, x->gen);
    else
      continue;
    x->gone = false;
  }
  return 0;
}

/* Keep the names found for the entries that exist, so that one deleted
 * later is still listed by the name it had when last seen.
 */
static void
remember_names (struct catalog *cat, const struct vol_export_stats *x,
                size_t n)
{
  struct xstats *xs = xstats_get (cat, false);

  if (xs == NULL)
    return;
  pthread_mutex_lock (&xs->lock);
  for (size_t i = 0; i < n; i++) {
    struct xstats_entry *e = x[i].gone ? NULL : find_entry (xs, x[i].id, x[i].gen);

    if (e)
      snprintf (e->name, sizeof e->name, "%s", x[i].name);
  }
  pthread_mutex_unlock (&xs->lock);
}

/* vol_list_tolerant callback: a snapshot whose record is damaged keeps
 * the name it had, or is named by its generation (VOL@#GEN).  A volume
 * whose record is damaged was never opened since the pool was (it cannot
 * be): it has no entries.
 */
static int
skip_damaged (void *opaque, const struct vol_damage *d)
{
  (void) opaque, (void) d;
  return 0;
}

/* Name every entry from the catalog as it is now (see the top). */
static int
resolve_names (struct catalog *cat, struct vol_export_stats *x, size_t n)
{
  struct names nm = { x, n };
  int r;

  for (size_t i = 0; i < n; i++)
    x[i].gone = true;
  r = vol_list_tolerant (cat->pool, true, name_entries, skip_damaged, &nm);
  if (r < 0)
    return r;
  /* A generation that only a clone or a checkpoint pins: still there while
   * its pin record is.
   */
  for (size_t i = 0; i < n; i++)
    if (!x[i].gone && x[i].gen != 0 && strchr (x[i].name, '#') &&
        cat_lookup_pin (cat, x[i].id, x[i].gen, NULL, NULL, NULL) == -ENOENT)
      x[i].gone = true;
  remember_names (cat, x, n);
  return 0;
}

/* Sort by name, then live before pinned states. */
static int
cmp_export (const void *a, const void *b)
{
  const struct vol_export_stats *x = a, *y = b;
  int c = strcmp (x->name, y->name);

  return c ? c : (x->gen > y->gen) - (x->gen < y->gen);
}

/* Name the entries from the catalog's trees, in name order. */
static int
name_sorted (struct catalog *cat, struct vol_export_stats *x, size_t n)
{
  int r = resolve_names (cat, x, n);

  if (r == 0 && n > 1)
    qsort (x, n, sizeof *x, cmp_export);
  return r;
}

/* Call fn for every export opened since the pool was opened, named by
 * namer.
 */
static int
each_export (struct cairn_pool *pool,
             int (*namer) (struct catalog *cat, struct vol_export_stats *x,
                           size_t n),
             int (*fn) (void *opaque, const struct vol_export_stats *x),
             void *opaque)
{
  struct vol_export_stats *x;
  struct catalog *cat;
  size_t n;
  int r = catalog_get (pool, &cat);

  if (r == 0)
    r = snapshot_table (cat, &x, &n);
  if (r < 0)
    return r;
  r = namer (cat, x, n);
  for (size_t i = 0; r == 0 && i < n; i++)
    r = fn (opaque, &x[i]);
  free (x);
  return r;
}

int
vol_stats_list (struct cairn_pool *pool,
                int (*fn) (void *opaque, const struct vol_export_stats *x),
                void *opaque)
{
  return each_export (pool, name_sorted, fn, opaque);
}

/* The statistics of one export, by any of its names. */
int
vol_stats_export (struct cairn_pool *pool, const char *export_name,
                  struct vol_export_stats *out)
{
  struct cairn_volume *v;
  struct vol_export_stats *x;
  struct catalog *cat;
  uint64_t id, gen;
  size_t n, i;
  int r = vol_open (pool, export_name, &v);

  if (r < 0)
    return r;
  id = vol_state (v)->id;
  gen = vol_pin_gen (v);
  cat = vol_state (v)->cat;
  vol_close (v);
  r = snapshot_table (cat, &x, &n);
  if (r < 0)
    return r;
  for (i = 0; i < n; i++)
    if (x[i].id == id && x[i].gen == gen)
      break;
  if (i == n) {
    /* Never opened: no I/O yet, named as a listing would name it. */
    struct vol_export_stats *nx = realloc (x, (n + 1) * sizeof *nx);

    if (nx == NULL) {
      free (x);
      return cairn_fail (-ENOMEM, "out of memory listing I/O statistics");
    }
    x = nx;
    x[n++] = (struct vol_export_stats) { .id = id, .gen = gen };
    snprintf (x[i].name, sizeof x[i].name, "%s", export_name);
  }
  r = resolve_names (cat, x, n);
  if (r == 0)
    *out = x[i];
  free (x);
  return r;
}

/* Name the entries from the catalog's table of volumes only (see
 * vol_stats_peek in volume.h).
 */
static int
name_from_table (struct catalog *cat, struct vol_export_stats *x, size_t n)
{
  pthread_mutex_lock (&cat->tlock);
  for (size_t i = 0; i < n; i++) {
    struct volstate *vs = cat_find_id_locked (cat, x[i].id);

    x[i].gone = vs == NULL || !vs_visible (vs);
    if (x[i].gone) {
      /* The volume's name as last opened: the export name up to '@'. */
      size_t len = strcspn (x[i].name, "@");

      snprintf (x[i].vol, sizeof x[i].vol, "%.*s", (int) len, x[i].name);
    }
    else
      snprintf (x[i].vol, sizeof x[i].vol, "%s", vs->name);
  }
  pthread_mutex_unlock (&cat->tlock);
  for (size_t i = 0; i < n; i++) {
    if (x[i].state[0])
      snprintf (x[i].name, sizeof x[i].name, "%s@%s", x[i].vol, x[i].state);
    else
      snprintf (x[i].name, sizeof x[i].name, "%s", x[i].vol);
  }
  return 0;
}

int
vol_stats_peek (struct cairn_pool *pool,
                int (*fn) (void *opaque, const struct vol_export_stats *x),
                void *opaque)
{
  return each_export (pool, name_from_table, fn, opaque);
}
