/* Cairn stress tool: the model of a pool and the journal of durability
 * (tests/stress/README.md, "The model" and "What must survive a kill").
 *
 * The model holds every volume's and snapshot's bytes.  The child applies
 * each operation to it right after the engine acknowledged it, under the
 * locks that order conflicting operations, and writes the operation's end
 * to the journal before it lets those locks go: so the journal's order of
 * ends is an order in which the engine executed conflicting operations.
 * The parent replays the journal over the model the child started from to
 * know what the pool must hold after a kill (model_verify).
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stress.h"

/* Fill buf with the data of a write with this tag. */
void
pattern_fill (uint8_t *buf, uint64_t len, uint64_t tag)
{
  for (uint64_t i = 0; i < len; i++)
    buf[i] = pattern_byte (tag, i);
}

/* An empty model with its locks. */
void
model_init (struct model *m)
{
  memset (m, 0, sizeof *m);
  pthread_mutex_init (&m->ns, NULL);
  for (unsigned i = 0; i < MODEL_VOLS; i++) {
    pthread_rwlock_init (&m->v[i].rw, NULL);
    pthread_mutex_init (&m->v[i].rl, NULL);
    pthread_cond_init (&m->v[i].rc, NULL);
  }
}

/* Empty a volume's slot. */
static void
mvol_free (struct mvol *v)
{
  while (v->nsnaps > 0)
    model_drop_snap (v, v->nsnaps - 1);
  free (v->img);
  v->img = NULL;
  v->alive = false;
  v->reserved = false;
  v->size = 0;
  v->name[0] = '\0';
}

/* Free every volume (the locks stay). */
void
model_clear (struct model *m)
{
  for (unsigned i = 0; i < MODEL_VOLS; i++)
    mvol_free (&m->v[i]);
}

/* The live volume named name, or NULL. */
struct mvol *
model_find (struct model *m, const char *name)
{
  for (unsigned i = 0; i < MODEL_VOLS; i++)
    if (m->v[i].alive && strcmp (m->v[i].name, name) == 0)
      return &m->v[i];
  return NULL;
}

/* Snapshot snap of v, or NULL. */
struct msnap *
model_find_snap (struct mvol *v, const char *snap)
{
  for (unsigned i = 0; i < v->nsnaps; i++)
    if (strcmp (v->snap[i].name, snap) == 0)
      return &v->snap[i];
  return NULL;
}

/* Forget v's snapshot i. */
void
model_drop_snap (struct mvol *v, unsigned i)
{
  free (v->snap[i].img);
  memmove (&v->snap[i], &v->snap[i + 1],
           (v->nsnaps - i - 1) * sizeof v->snap[0]);
  v->nsnaps--;
}

/* A copy of a volume's bytes. */
static uint8_t *
img_copy (const uint8_t *img, uint64_t size)
{
  uint8_t *p = malloc (size ? size : 1);

  if (p == NULL) {
    fprintf (stderr, "stress: out of memory\n");
    abort ();
  }
  memcpy (p, img, size);
  return p;
}

/* A slot for a new volume name: the one reserved for it, or a free one. */
static struct mvol *
model_new_slot (struct model *m, const char *name, uint64_t size)
{
  struct mvol *v = NULL;

  for (unsigned i = 0; i < MODEL_VOLS && v == NULL; i++)
    if (m->v[i].reserved && strcmp (m->v[i].name, name) == 0)
      v = &m->v[i];
  for (unsigned i = 0; i < MODEL_VOLS && v == NULL; i++)
    if (!m->v[i].alive && !m->v[i].reserved)
      v = &m->v[i];
  if (v == NULL)
    return NULL;
  v->reserved = false;
  v->alive = true;
  snprintf (v->name, sizeof v->name, "%s", name);
  v->size = size;
  v->nsnaps = 0;
  v->img = calloc (1, size ? size : 1);
  return v;
}

/* The bytes and size of src, "VOL" or "VOL@SNAP": false when the model
 * has no such state.
 */
static bool
model_state (struct model *m, const char *src, const uint8_t **imgp,
             uint64_t *sizep)
{
  char vol[MODEL_NAME];
  const char *at = strchr (src, '@');
  size_t len = at ? (size_t) (at - src) : strlen (src);
  struct mvol *v;
  struct msnap *s;

  snprintf (vol, sizeof vol, "%.*s", (int) len, src);
  v = model_find (m, vol);
  if (v == NULL)
    return false;
  if (at == NULL) {
    *imgp = v->img;
    *sizep = v->size;
    return true;
  }
  s = model_find_snap (v, at + 1);
  if (s == NULL)
    return false;
  *imgp = s->img;
  *sizep = s->size;
  return true;
}

int
model_apply (struct model *m, const struct mop *op)
{
  struct mvol *v = NULL, *k;
  const uint8_t *src;
  uint64_t size;

  if (strchr ("WZTSXDRQL", op->kind) != NULL &&
      (v = model_find (m, op->a)) == NULL)
    return -1;
  switch (op->kind) {
  case 'W':
    if (op->off + op->len > v->size)
      return -1;
    pattern_fill (v->img + op->off, op->len, op->tag);
    return 0;
  case 'Z': case 'T':
    if (op->off + op->len > v->size)
      return -1;
    memset (v->img + op->off, 0, op->len);
    return 0;
  case 'S':
    if (v->nsnaps == MODEL_SNAPS)
      return -1;
    snprintf (v->snap[v->nsnaps].name, MODEL_NAME, "%s", op->b);
    v->snap[v->nsnaps].size = v->size;
    v->snap[v->nsnaps].img = img_copy (v->img, v->size);
    v->nsnaps++;
    return 0;
  case 'X':
    for (unsigned i = 0; i < v->nsnaps; i++)
      if (strcmp (v->snap[i].name, op->b) == 0) {
        model_drop_snap (v, i);
        return 0;
      }
    return -1;
  case 'C':
    if (!model_state (m, op->a, &src, &size) ||
        (k = model_new_slot (m, op->b, size)) == NULL)
      return -1;
    memcpy (k->img, src, size);
    return 0;
  case 'N':
    return model_new_slot (m, op->a, op->len) == NULL ? -1 : 0;
  case 'D':
    mvol_free (v);
    return 0;
  case 'R':
    snprintf (v->name, sizeof v->name, "%s", op->b);
    return 0;
  case 'Q': {
    uint8_t *p = realloc (v->img, op->len ? op->len : 1);

    if (p == NULL)
      abort ();
    if (op->len > v->size)
      memset (p + v->size, 0, op->len - v->size);
    v->img = p;
    v->size = op->len;
    return 0;
  }
  case 'L': {
    struct msnap *s = model_find_snap (v, op->b);

    /* The stress tool rolls back to the newest snapshot only: KEEP_AS
     * gets the live state and no snapshots.
     */
    if (s == NULL || s != &v->snap[v->nsnaps - 1] ||
        (k = model_new_slot (m, op->c, v->size)) == NULL)
      return -1;
    memcpy (k->img, v->img, v->size);
    free (v->img);
    v->img = img_copy (s->img, s->size);
    v->size = s->size;
    return 0;
  }
  case 'F':
    return 0;
  }
  return -1;
}

int
mop_format (const struct mop *op, char *buf, size_t len)
{
  switch (op->kind) {
  case 'W':
    return snprintf (buf, len, "W %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %d",
                     op->a, op->off, op->len, op->tag, op->fua);
  case 'Z': case 'T':
    return snprintf (buf, len, "%c %s %" PRIu64 " %" PRIu64 " %d", op->kind,
                     op->a, op->off, op->len, op->fua);
  case 'S': case 'X': case 'C': case 'R':
    return snprintf (buf, len, "%c %s %s", op->kind, op->a, op->b);
  case 'D':
    return snprintf (buf, len, "D %s", op->a);
  case 'Q': case 'N':
    return snprintf (buf, len, "%c %s %" PRIu64, op->kind, op->a, op->len);
  case 'L':
    return snprintf (buf, len, "L %s %s %s", op->a, op->b, op->c);
  default:
    return snprintf (buf, len, "%c", op->kind);
  }
}

int
mop_parse (const char *s, struct mop *op)
{
  int n = 0, fua = 0;

  memset (op, 0, sizeof *op);
  op->kind = s[0];
  switch (op->kind) {
  case 'W':
    n = sscanf (s, "W %97s %" SCNu64 " %" SCNu64 " %" SCNu64 " %d", op->a,
                &op->off, &op->len, &op->tag, &fua) == 5;
    break;
  case 'Z': case 'T':
    n = sscanf (s + 1, " %97s %" SCNu64 " %" SCNu64 " %d", op->a, &op->off,
                &op->len, &fua) == 4;
    break;
  case 'S': case 'X': case 'C': case 'R':
    n = sscanf (s + 1, " %97s %47s", op->a, op->b) == 2;
    break;
  case 'D':
    n = sscanf (s, "D %97s", op->a) == 1;
    break;
  case 'Q': case 'N':
    n = sscanf (s + 1, " %97s %" SCNu64, op->a, &op->len) == 2;
    break;
  case 'L':
    n = sscanf (s, "L %97s %47s %47s", op->a, op->b, op->c) == 3;
    break;
  case 'F':
    n = 1;
    break;
  }
  op->fua = fua != 0;
  return n ? 0 : -1;
}

/* ---- reading a pool into a model */

/* Read a whole export into a new buffer. */
static int
read_export (struct cairn_pool *pool, const char *name, uint8_t **imgp,
             uint64_t *sizep)
{
  struct cairn_volume *h;
  uint64_t size;
  uint8_t *img;
  int r = vol_open (pool, name, &h);

  if (r < 0)
    return r;
  size = vol_size (h);
  img = malloc (size ? size : 1);
  if (img == NULL)
    abort ();
  for (uint64_t off = 0; off < size && r == 0; off += 1024 * 1024) {
    uint32_t n = (uint32_t) MIN (1024u * 1024, size - off);

    r = vol_pread (h, img + off, n, off);
  }
  vol_close (h);
  if (r < 0) {
    free (img);
    return r;
  }
  *imgp = img;
  *sizep = size;
  return 0;
}

struct load {
  struct model *m;
  struct cairn_pool *pool;
  int err;
};

/* Read one listed volume or snapshot into the model. */
static int
load_one (void *opaque, const struct vol_info *info)
{
  struct load *l = opaque;
  char name[2 * MODEL_NAME + 2];
  struct mvol *v;
  uint8_t *img;
  uint64_t size;
  int r;

  if (strlen (info->name) >= MODEL_NAME || strlen (info->snap) >= MODEL_NAME)
    return 0;                 /* not the stress tool's */
  if (info->is_snapshot)
    snprintf (name, sizeof name, "%s@%s", info->name, info->snap);
  else
    snprintf (name, sizeof name, "%s", info->name);
  r = read_export (l->pool, name, &img, &size);
  if (r < 0) {
    fprintf (stderr, "stress: reading %s: %s\n", name, cairn_errmsg ());
    l->err = r;
    return r;
  }
  if (!info->is_snapshot) {
    v = model_new_slot (l->m, info->name, 0);
    if (v == NULL) {
      fprintf (stderr, "stress: more than %u volumes\n", MODEL_VOLS);
      free (img);
      return l->err = -ENOSPC;
    }
    free (v->img);
    v->img = img;
    v->size = size;
    return 0;
  }
  v = model_find (l->m, info->name);
  if (v == NULL || v->nsnaps == MODEL_SNAPS) {
    fprintf (stderr, "stress: snapshot %s unexpected\n", name);
    free (img);
    return l->err = -ENOSPC;
  }
  snprintf (v->snap[v->nsnaps].name, MODEL_NAME, "%s", info->snap);
  v->snap[v->nsnaps].img = img;
  v->snap[v->nsnaps].size = size;
  v->nsnaps++;
  return 0;
}

int
model_load (struct model *m, struct cairn_pool *pool)
{
  struct load l = { m, pool, 0 };
  int r;

  model_clear (m);
  r = vol_list (pool, true, load_one, &l);
  if (r < 0 && l.err == 0)
    fprintf (stderr, "stress: listing: %s\n", cairn_errmsg ());
  return r < 0 ? r : l.err;
}

/* ---- saving a model (a kept failure's base) */

int
model_save (const struct model *m, const char *path)
{
  FILE *f = fopen (path, "w");

  if (f == NULL)
    return -errno;
  for (unsigned i = 0; i < MODEL_VOLS; i++) {
    const struct mvol *v = &m->v[i];

    if (!v->alive)
      continue;
    fprintf (f, "V %s %" PRIu64 "\n", v->name, v->size);
    fwrite (v->img, 1, v->size, f);
    for (unsigned s = 0; s < v->nsnaps; s++) {
      fprintf (f, "S %s %" PRIu64 "\n", v->snap[s].name, v->snap[s].size);
      fwrite (v->snap[s].img, 1, v->snap[s].size, f);
    }
  }
  return fclose (f) == 0 ? 0 : -EIO;
}

int
model_read (struct model *m, const char *path)
{
  FILE *f = fopen (path, "r");
  char kind, name[MODEL_NAME];
  uint64_t size;
  struct mvol *v = NULL;
  int r = 0;

  if (f == NULL)
    return -errno;
  model_clear (m);
  while (r == 0 && fscanf (f, "%c %47s %" SCNu64 "\n", &kind, name, &size) == 3) {
    uint8_t *img = malloc (size ? size : 1);

    if (img == NULL || fread (img, 1, size, f) != size) {
      free (img);
      r = -EIO;
      break;
    }
    if (kind == 'V') {
      v = model_new_slot (m, name, 0);
      if (v == NULL) {
        free (img);
        r = -EIO;
        break;
      }
      free (v->img);
      v->img = img;
      v->size = size;
    }
    else if (v != NULL && v->nsnaps < MODEL_SNAPS) {
      snprintf (v->snap[v->nsnaps].name, MODEL_NAME, "%s", name);
      v->snap[v->nsnaps].img = img;
      v->snap[v->nsnaps].size = size;
      v->nsnaps++;
    }
    else {
      free (img);
      r = -EIO;
    }
  }
  fclose (f);
  return r;
}

/* ---- the journal */

/* Start a new journal at path. */
int
journal_open (struct journal *j, const char *path)
{
  j->fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
                0644);
  if (j->fd < 0)
    return cairn_fail (-errno, "%s: %m", path);
  j->next_id = 1;
  pthread_mutex_init (&j->lock, NULL);
  return 0;
}

/* Close the journal. */
void
journal_close (struct journal *j)
{
  if (j->fd >= 0)
    close (j->fd);
  j->fd = -1;
}

/* One record, one write(2): what the kernel has survives the kill. */
static void
journal_line (struct journal *j, const char *line, size_t len)
{
  if (write (j->fd, line, len) != (ssize_t) len) {
    perror ("stress: journal");
    abort ();
  }
}

/* Journal the begin of op: its id. */
uint64_t
journal_begin (struct journal *j, const struct mop *op)
{
  char line[512], rec[400];
  uint64_t id;
  int n;

  mop_format (op, rec, sizeof rec);
  pthread_mutex_lock (&j->lock);
  id = j->next_id++;
  n = snprintf (line, sizeof line, "B %" PRIu64 " %s\n", id, rec);
  journal_line (j, line, (size_t) n);
  pthread_mutex_unlock (&j->lock);
  return id;
}

/* Journal the end of operation id with its result. */
void
journal_end (struct journal *j, uint64_t id, int rc)
{
  char line[64];
  int n = snprintf (line, sizeof line, "E %" PRIu64 " %d\n", id, rc);

  journal_line (j, line, (size_t) n);
}

/* Journal a comment line. */
void
journal_note (struct journal *j, const char *fmt, ...)
{
  char line[512];
  va_list ap;
  int n;

  line[0] = '#';
  line[1] = ' ';
  va_start (ap, fmt);
  n = vsnprintf (line + 2, sizeof line - 3, fmt, ap);
  va_end (ap);
  if (n < 0)
    return;
  n = MIN (n + 2, (int) sizeof line - 2);
  line[n++] = '\n';
  journal_line (j, line, (size_t) n);
}
