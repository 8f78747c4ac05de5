/* Cairn power-cut campaign: the model a workload keeps of what its
 * acknowledged operations should have made, and the world a pool shows
 * (every listed export, its size and the SHA-256 of its contents).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "campaign.h"
#include "volume.h"

/* ---------------------------------------------------------------- worlds and the model */




struct entry *
model_find (struct model *m, const char *name)
{
  for (unsigned i = 0; i < m->n; i++)
    if (strcmp (m->e[i].name, name) == 0)
      return &m->e[i];
  return NULL;
}

/* Add (or replace) name with size bytes of data (NULL: zeros). */
struct entry *
model_set (struct model *m, const char *name, uint64_t size,
           const uint8_t *data)
{
  struct entry *e = model_find (m, name);

  if (e == NULL) {
    if (m->n == MAX_ENTRIES)
      abort ();
    e = &m->e[m->n++];
    snprintf (e->name, sizeof e->name, "%s", name);
    e->data = NULL;
  }
  free (e->data);
  e->size = size;
  e->data = calloc (1, size ? size : 1);
  if (e->data == NULL)
    abort ();
  if (data)
    memcpy (e->data, data, size);
  return e;
}

void
model_remove (struct model *m, const char *name)
{
  struct entry *e = model_find (m, name);

  if (e == NULL)
    return;
  free (e->data);
  *e = m->e[--m->n];
}

/* dst becomes a copy of src. */
void
model_copy (struct model *m, const char *dst, const char *src)
{
  struct entry *s = model_find (m, src);

  if (s == NULL)
    abort ();
  uint64_t size = s->size;
  uint8_t *tmp = malloc (size ? size : 1);
  if (tmp == NULL)
    abort ();
  memcpy (tmp, s->data, size);
  model_set (m, dst, size, tmp);
  free (tmp);
}

void
model_rename (struct model *m, const char *from, const char *to)
{
  struct entry *e = model_find (m, from);

  if (e == NULL)
    abort ();
  model_remove (m, to);
  e = model_find (m, from);
  snprintf (e->name, sizeof e->name, "%s", to);
}

void
model_free (struct model *m)
{
  for (unsigned i = 0; i < m->n; i++)
    free (m->e[i].data);
  m->n = 0;
}

static int
entry_cmp (const void *a, const void *b)
{
  return strcmp (((const struct entry *) a)->name,
                 ((const struct entry *) b)->name);
}

/* The model as a world (checkpoints are not modelled: see the README). */
void
model_world (const struct model *m, struct world *w)
{
  w->n = m->n;
  for (unsigned i = 0; i < m->n; i++) {
    w->e[i] = m->e[i];
    w->e[i].data = NULL;
    sha256 (m->e[i].data, m->e[i].size, w->e[i].sha);
  }
  qsort (w->e, w->n, sizeof w->e[0], entry_cmp);
}

/* Read export name whole and add it to w; 0 or the error. */
static int
world_add (struct cairn_pool *pool, struct world *w, const char *name)
{
  struct cairn_volume *v;
  struct entry *e;
  uint8_t *buf;
  int r;

  if (w->n == MAX_ENTRIES)
    return -E2BIG;
  r = vol_open (pool, name, &v);
  if (r < 0)
    return r;
  e = &w->e[w->n];
  memset (e, 0, sizeof *e);
  snprintf (e->name, sizeof e->name, "%s", name);
  e->size = vol_size (v);
  buf = malloc (e->size ? e->size : 1);
  if (buf == NULL)
    abort ();
  r = e->size ? vol_pread (v, buf, (uint32_t) e->size, 0) : 0;
  vol_close (v);
  if (r == 0) {
    sha256 (buf, e->size, e->sha);
    w->n++;
  }
  free (buf);
  return r;
}

struct listing {
  struct cairn_pool *pool;
  struct world *w;
  char names[MAX_ENTRIES][NAME_MAX_LEN];
  unsigned n;
  int err;
};

static int
list_one (void *opaque, const struct vol_info *vi)
{
  struct listing *l = opaque;

  if (l->n == MAX_ENTRIES)
    return -E2BIG;
  if (vi->is_snapshot)
    snprintf (l->names[l->n++], NAME_MAX_LEN, "%.40s@%.40s", vi->name,
              vi->snap);
  else
    snprintf (l->names[l->n++], NAME_MAX_LEN, "%.80s", vi->name);
  return 0;
}

static int
list_ckpt (void *opaque, const struct vol_checkpoint *c)
{
  uint64_t *gens = opaque;

  if (gens[0] + 1 >= MAX_ENTRIES)
    return -E2BIG;
  gens[++gens[0]] = c->gen;
  return 0;
}

/* The pool's world: every volume, snapshot and checkpoint, read whole. */
int
world_read (struct cairn_pool *pool, struct world *w)
{
  struct listing l = { .pool = pool, .w = w };
  int r;

  w->n = 0;
  r = vol_list (pool, true, list_one, &l);
  if (r < 0)
    return r;
  for (unsigned i = 0; i < l.n; i++) {
    r = world_add (pool, w, l.names[i]);
    if (r < 0)
      return r;
    if (strchr (l.names[i], '@') == NULL) {
      uint64_t gens[MAX_ENTRIES] = { 0 };
      char exp[NAME_MAX_LEN + 32];

      r = vol_checkpoint_list (pool, l.names[i], 0, UINT64_MAX, list_ckpt,
                               gens);
      if (r < 0)
        return r;
      for (uint64_t k = 1; k <= gens[0]; k++) {
        snprintf (exp, sizeof exp, "%s@#%" PRIu64, l.names[i], gens[k]);
        r = world_add (pool, w, exp);
        if (r < 0)
          return r;
      }
    }
  }
  qsort (w->e, w->n, sizeof w->e[0], entry_cmp);
  return 0;
}

bool
world_eq (const struct world *a, const struct world *b, bool with_ckpts)
{
  unsigned i = 0, j = 0;

  for (;;) {
    while (!with_ckpts && i < a->n && strstr (a->e[i].name, "@#"))
      i++;
    while (!with_ckpts && j < b->n && strstr (b->e[j].name, "@#"))
      j++;
    if (i == a->n || j == b->n)
      return i == a->n && j == b->n;
    if (strcmp (a->e[i].name, b->e[j].name) != 0 ||
        a->e[i].size != b->e[j].size ||
        memcmp (a->e[i].sha, b->e[j].sha, SHA256_LEN) != 0)
      return false;
    i++, j++;
  }
}

/* A world as one line per export, for failure messages. */
void
world_print (FILE *f, const char *title, const struct world *w)
{
  fprintf (f, "  %s:\n", title);
  for (unsigned i = 0; i < w->n; i++)
    fprintf (f, "    %-40s %8" PRIu64 " %02x%02x%02x%02x\n", w->e[i].name,
             w->e[i].size, w->e[i].sha[0], w->e[i].sha[1], w->e[i].sha[2],
             w->e[i].sha[3]);
}
