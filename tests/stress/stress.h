/* Cairn stress tool (tests/stress/README.md): what its files share.
 *
 * model.c   the in-memory model of a pool's volumes and snapshots, loaded
 *           from a pool, and the journal that says what must be durable
 * child.c   the child: threads of random operations against one pool,
 *           every read checked against the model
 * main.c    the command: `run` (one child), `loop` (zloop: children killed
 *           at random, the pool reopened, checked and compared), `check`
 *           (the check of a kept failure again)
 * cache-dev.c  the device a kill empties (its design note)
 */
#ifndef CAIRN_STRESS_H
#define CAIRN_STRESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dev.h"
#include "fsck.h"
#include "pool.h"
#include "volume.h"

/* cache-dev.c */
int cache_dev_create (struct cairn_dev *lower, uint64_t seed,
                      unsigned kill_odds, unsigned writeback_odds,
                      struct cairn_dev **devp) CAIRN_WUR;
int cache_dev_flip (struct cairn_dev *dev, uint64_t off, unsigned bit)
  CAIRN_WUR;
int cache_dev_overlay (struct cairn_dev *lower, struct cairn_dev **devp)
  CAIRN_WUR;
bool cache_dev_recent (struct cairn_dev *dev, uint64_t r, uint64_t *offp);

/* ---- the model (model.c) */

#define MODEL_VOLS 8          /* volumes at most (slots) */
#define MODEL_SNAPS 4         /* snapshots of a volume at most */
#define MODEL_NAME 48
#define MODEL_RANGES 32       /* data operations in flight on one volume */

struct msnap {
  char name[MODEL_NAME];
  uint64_t size;
  uint8_t *img;
};

/* One volume: its name, size and contents, and its snapshots'. */
struct mvol {
  pthread_rwlock_t rw;        /* shared: data operations; exclusive: the
                                 rest (catalog changes, diffs) */
  bool alive;                 /* the slot holds a volume */
  bool reserved;              /* claimed by an operation making one */
  char name[MODEL_NAME];
  uint64_t size;
  uint8_t *img;
  struct msnap snap[MODEL_SNAPS];
  unsigned nsnaps;
  struct cairn_volume *h;     /* the child's open handle */
  /* Range locks: no two data operations on overlapping bytes at once. */
  pthread_mutex_t rl;
  pthread_cond_t rc;
  struct { uint64_t off, len; bool used; } range[MODEL_RANGES];
};

struct model {
  pthread_mutex_t ns;         /* claiming and freeing slots */
  struct mvol v[MODEL_VOLS];
};

void model_init (struct model *m);
void model_clear (struct model *m);
/* The model of what the pool holds now: every visible volume and
 * snapshot, read whole.
 */
int model_load (struct model *m, struct cairn_pool *pool) CAIRN_WUR;
struct mvol *model_find (struct model *m, const char *name);
struct msnap *model_find_snap (struct mvol *v, const char *snap);
void model_drop_snap (struct mvol *v, unsigned i);
/* Save and load the contents (for a kept failure). */
int model_save (const struct model *m, const char *path);
int model_read (struct model *m, const char *path);

/* Byte i of the data a write with this tag writes (i from its start). */
static inline uint8_t
pattern_byte (uint64_t tag, uint64_t i)
{
  uint64_t z = tag * 0x9e3779b97f4a7c15ull + (i >> 3) + 1;

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (uint8_t) (z >> (8 * (i & 7)));
}
void pattern_fill (uint8_t *buf, uint64_t len, uint64_t tag);

/* One operation as the journal records it and the model applies it. */
struct mop {
  char kind;                  /* W write, Z zero, T trim, S snapshot, X
                                 snapshot delete, C clone, D delete, R
                                 rename, Q resize, L rollback, N create,
                                 F flush */
  char a[2 * MODEL_NAME + 2], b[MODEL_NAME], c[MODEL_NAME];
  uint64_t off, len, tag;     /* W Z T: bytes; Q N: len is the size */
  bool fua;                   /* W Z T: durable when it returns */
};
/* Apply op to the model (the caller holds what it needs): 0, or -1 when
 * the model cannot hold it (a name it does not know, no slot free).
 */
int model_apply (struct model *m, const struct mop *op);
/* The journal line of op ("W NAME OFF LEN TAG", ...) and back. */
int mop_format (const struct mop *op, char *buf, size_t len);
int mop_parse (const char *s, struct mop *op);

/* The journal: one line per record, appended with one write(2) each, so a
 * SIGKILL leaves every record written before it (README, "The journal").
 */
struct journal {
  int fd;
  uint64_t next_id;           /* operation ids */
  pthread_mutex_t lock;
};
int journal_open (struct journal *j, const char *path) CAIRN_WUR;
void journal_close (struct journal *j);
uint64_t journal_begin (struct journal *j, const struct mop *op);
void journal_end (struct journal *j, uint64_t id, int rc);
void journal_note (struct journal *j, const char *fmt, ...)
  CAIRN_PRINTF (2, 3);

/* Check a reopened pool against the model it started from and the
 * journal of the child that was killed: 0 when it holds what it must,
 * else -1 with each difference printed to out.
 */
int model_verify (const struct model *base, const char *journal_path,
                  struct cairn_pool *pool, FILE *out);

/* ---- the pool's devices (main.c) */

struct stress_opts {
  const char *dir;            /* pool-0.img, pool-1.img, journal, log */
  uint64_t seed;
  double seconds;
  unsigned threads;
  bool mirror;                /* two devices, two copies, faults on one */
  unsigned kill_odds;         /* one flush in n kills the child; 0: none */
  bool intent_log;            /* the child's pool logs its flushes
                                 (txn-log.c), the check replays the log */
  bool verbose;
};

struct stress_devs {
  struct cairn_dev *file[2], *cache[2], *fault[2], *top;
  unsigned n;
  /* The device that faults go to (pool-F.img, F = faulty), and its
   * member index in the pool: the one that holds the first copy of the
   * data area's start, so that reads meet the damage.
   */
  unsigned faulty, faulty_member;
};
/* How stress_devs_open stacks the files: the child's (a cache that a kill
 * empties, faults), read-only for fsck, or read-write on overlays that
 * keep every write in memory (a check that replays the intent log).
 */
enum stress_devs_mode { DEVS_CHILD, DEVS_RDONLY, DEVS_OVERLAY };
int stress_devs_open (const struct stress_opts *o, enum stress_devs_mode mode,
                      uint64_t seed, struct stress_devs *d) CAIRN_WUR;
void stress_devs_close (struct stress_devs *d);
int stress_format (const struct stress_opts *o) CAIRN_WUR;

/* child.c: run the workload for o->seconds; 0 when everything checked
 * out, else non-zero with the failure printed.
 */
int stress_child (const struct stress_opts *o);

#endif /* CAIRN_STRESS_H */
