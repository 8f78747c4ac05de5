/* Cairn engine, layer "reclaim": background reclaims as jobs that people
 * can list (volume.h, vol_reclaim_jobs; the control server's job.list).
 *
 * Each destroy or free record of reaper.c is a job while it exists: an
 * entry in memory, listed in the freeze that stores the record
 * (reaper_begin, reaper_defer_range) or when the catalog loads one that a
 * restart left (reaper_load_jobs), credited with the data blocks each step
 * frees, and forgotten in the freeze that deletes the record
 * (reaper_apply, reaper_drop_ranges), or when a step finds no record left
 * at all (reap_jobs_prune: a freeze that failed after listing one).
 *
 * Totals.  A deleted volume's is known when it was not a clone: the data
 * it referenced and held at the delete (a clone's referenced data includes
 * its origin's, which stays).  A deleted snapshot's is counted by the
 * reaper thread before the record's first step (reclaim_range_blocks,
 * outside the freeze: the count costs as much as the freeing).  After a
 * restart a volume's name and total are lost (the destroy record holds
 * neither), so it is listed by id with total 0; a snapshot by its
 * volume's name and generation, counted again.
 *
 * The entries are for people: nothing else reads them, and a lost one
 * (out of memory) only goes unlisted.  Their lock is a leaf lock, held
 * only to copy or change entries, so listing them is safe from an event
 * loop.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog-int.h"

/* A record as a job. */
struct reap_job {
  bool is_free;               /* a free record (else a destroy record) */
  uint64_t id, lo_d, lo_b;    /* which record (lo_*: a free record's) */
  bool counted;               /* total known, or not to be counted */
  struct vol_reclaim_job pub;
};

struct reap_jobs {
  pthread_mutex_t lock;       /* everything below */
  struct reap_job *v;         /* oldest first */
  size_t n, cap;
  uint64_t next_seq;
};

/* Make a catalog's (empty) job table. */
int
reap_jobs_new (struct catalog *cat)
{
  struct reap_jobs *t = calloc (1, sizeof *t);

  if (t == NULL)
    return cairn_fail (-ENOMEM, "out of memory loading the catalog");
  pthread_mutex_init (&t->lock, NULL);
  cat->reap_jobs = t;
  return 0;
}

/* Free a catalog's job table. */
void
reap_jobs_free (struct catalog *cat)
{
  struct reap_jobs *t = cat->reap_jobs;

  if (t == NULL)
    return;
  pthread_mutex_destroy (&t->lock);
  free (t->v);
  free (t);
  cat->reap_jobs = NULL;
}

/* The job of a record, or NULL (lock held). */
static struct reap_job *
job_find (struct reap_jobs *t, bool is_free, uint64_t id, uint64_t lo_d,
          uint64_t lo_b)
{
  for (size_t i = 0; i < t->n; i++) {
    struct reap_job *j = &t->v[i];

    if (j->is_free == is_free && j->id == id &&
        (!is_free || (j->lo_d == lo_d && j->lo_b == lo_b)))
      return j;
  }
  return NULL;
}

/* List a record as a job (total_blocks 0: unknown). */
void
reap_jobs_add (struct catalog *cat, bool is_free, uint64_t id, uint64_t lo_d,
               uint64_t lo_b, const char *what, uint64_t total_blocks)
{
  struct reap_jobs *t = cat->reap_jobs;
  struct reap_job *j;

  pthread_mutex_lock (&t->lock);
  j = job_find (t, is_free, id, lo_d, lo_b);
  if (j == NULL && t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 8;
    struct reap_job *nv = realloc (t->v, cap * sizeof *nv);

    if (nv) {
      t->v = nv;
      t->cap = cap;
    }
  }
  if (j == NULL && t->n < t->cap) {
    j = &t->v[t->n++];
    memset (j, 0, sizeof *j);
    j->is_free = is_free;
    j->id = id;
    j->lo_d = lo_d;
    j->lo_b = lo_b;
    j->counted = !is_free;
    j->pub.seq = ++t->next_seq;
    j->pub.snapshot = is_free;
    j->pub.started = (int64_t) time (NULL);
    j->pub.total_bytes = total_blocks * BLOCK_SIZE;
    snprintf (j->pub.what, sizeof j->pub.what, "%s", what);
  }
  pthread_mutex_unlock (&t->lock);
}

/* Credit a record's job with freed data blocks; forget it when the
 * record is gone.
 */
void
reap_jobs_update (struct catalog *cat, bool is_free, uint64_t id,
                  uint64_t lo_d, uint64_t lo_b, uint64_t blocks, bool gone)
{
  struct reap_jobs *t = cat->reap_jobs;
  struct reap_job *j;

  pthread_mutex_lock (&t->lock);
  j = job_find (t, is_free, id, lo_d, lo_b);
  if (j && gone) {
    memmove (j, j + 1, (t->n - (size_t) (j - t->v) - 1) * sizeof *j);
    t->n--;
  }
  else if (j) {
    j->pub.done_bytes += blocks * BLOCK_SIZE;
    if (j->pub.total_bytes && j->pub.done_bytes > j->pub.total_bytes)
      j->pub.total_bytes = j->pub.done_bytes;   /* an estimate fell short */
  }
  pthread_mutex_unlock (&t->lock);
}

/* The number of the newest job listed so far. */
uint64_t
reap_jobs_seq (struct catalog *cat)
{
  uint64_t seq;

  pthread_mutex_lock (&cat->reap_jobs->lock);
  seq = cat->reap_jobs->next_seq;
  pthread_mutex_unlock (&cat->reap_jobs->lock);
  return seq;
}

/* No record is left: forget the jobs listed up to seq, whose records were
 * there to be seen.  Later ones may be records stored after the look.
 */
void
reap_jobs_prune (struct catalog *cat, uint64_t seq)
{
  struct reap_jobs *t = cat->reap_jobs;
  size_t kept = 0;

  pthread_mutex_lock (&t->lock);
  for (size_t i = 0; i < t->n; i++)
    if (t->v[i].pub.seq > seq)
      t->v[kept++] = t->v[i];
  t->n = kept;
  pthread_mutex_unlock (&t->lock);
}

/* Count what a free record's job has left to free, once, before its first
 * step (the reaper's step lock held: only steps remove its entries).
 */
int
reap_jobs_count (struct catalog *cat, uint64_t id, uint64_t lo_d,
                 uint64_t hi_d, uint64_t lo_b, uint64_t hi_b)
{
  struct reap_jobs *t = cat->reap_jobs;
  struct reap_job *j;
  uint64_t blocks;
  bool counted;
  int r;

  pthread_mutex_lock (&t->lock);
  j = job_find (t, true, id, lo_d, lo_b);
  counted = j == NULL || j->counted;
  pthread_mutex_unlock (&t->lock);
  if (counted)
    return 0;
  r = reclaim_range_blocks (cat, id, lo_d, hi_d, lo_b, hi_b, &blocks);
  if (r < 0)
    return r;
  pthread_mutex_lock (&t->lock);
  j = job_find (t, true, id, lo_d, lo_b);
  if (j) {
    j->counted = true;
    j->pub.total_bytes = j->pub.done_bytes + blocks * BLOCK_SIZE;
  }
  pthread_mutex_unlock (&t->lock);
  return 0;
}

/* cat_foreach_prefix callback: list a record a restart left as a job. */
static int
load_job (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
          size_t vl)
{
  struct catalog *cat = opaque;
  char what[sizeof ((struct vol_reclaim_job *) 0)->what];
  struct volstate *vs;
  uint64_t id, range[4];
  int r;

  if (k[0] == RK_DESTROY) {
    if (kl != 9)
      return cairn_fail (-EIO, "corrupt destroy record key (%zu bytes)", kl);
    snprintf (what, sizeof what, "volume #%" PRIu64, get_be64 (k + 1));
    reap_jobs_add (cat, false, get_be64 (k + 1), 0, 0, what, 0);
    return 0;
  }
  r = freerec_decode (k, kl, v, vl, &id, range);
  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_id_locked (cat, id);
  if (vs)
    snprintf (what, sizeof what, "%s, generation %" PRIu64, vs->name,
              range[0]);
  else
    snprintf (what, sizeof what, "volume #%" PRIu64 ", generation %" PRIu64,
              id, range[0]);
  pthread_mutex_unlock (&cat->tlock);
  reap_jobs_add (cat, true, id, range[0], range[2], what, 0);
  return 0;
}

/* List the records a restart left as jobs (loading the catalog). */
int
reaper_load_jobs (struct catalog *cat)
{
  uint8_t type = RK_FREE;
  int r = cat_foreach_prefix (cat, &type, 1, load_job, cat);

  type = RK_DESTROY;
  return r < 0 ? r : cat_foreach_prefix (cat, &type, 1, load_job, cat);
}

/* The reclaims in progress (volume.h). */
int
vol_reclaim_jobs (struct cairn_pool *pool, struct vol_reclaim_job **jobsp,
                  size_t *np)
{
  struct catalog *cat;
  struct reap_jobs *t;
  int r = catalog_get (pool, &cat);

  *jobsp = NULL;
  *np = 0;
  if (r < 0)
    return r;
  t = cat->reap_jobs;
  pthread_mutex_lock (&t->lock);
  if (t->n) {
    *jobsp = malloc (t->n * sizeof **jobsp);
    if (*jobsp == NULL) {
      pthread_mutex_unlock (&t->lock);
      return cairn_fail (-ENOMEM, "out of memory listing reclaims");
    }
    for (size_t i = 0; i < t->n; i++)
      (*jobsp)[i] = t->v[i].pub;
    *np = t->n;
  }
  pthread_mutex_unlock (&t->lock);
  return 0;
}
