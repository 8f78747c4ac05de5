/* Cairn power-cut campaign: what its files share (README.md).
 *
 * world.c: the model a workload keeps and the world a pool shows;
 * scenarios.c: the steps and the workloads; campaign.c: images, runs,
 * checks after a cut, and the driver.
 */
#ifndef CAIRN_POWERCUT_CAMPAIGN_H
#define CAIRN_POWERCUT_CAMPAIGN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dev.h"
#include "pool.h"
#include "sha256.h"

#define KiB 1024u
#define MiB (1024u * 1024)
#define DEV_SIZE (16u * MiB)
#define VSIZE (256u * KiB)
#define NAME_MAX_LEN 96
#define MAX_ENTRIES 64
#define MAX_STEPS 256
#define NSCENARIOS 22

/* ---------------------------------------------------------------- a small PRNG */

struct rng {
  uint64_t s;
};

/* splitmix64. */
static inline uint64_t
rng_next (struct rng *r)
{
  uint64_t z = (r->s += UINT64_C (0x9e3779b97f4a7c15));

  z = (z ^ (z >> 30)) * UINT64_C (0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C (0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* A number in [0, n). */
static inline uint64_t
rng_below (struct rng *r, uint64_t n)
{
  return n ? rng_next (r) % n : 0;
}

/* One 64-bit value from a few: the seed of cut i of scenario s. */
static inline uint64_t
mix (uint64_t a, uint64_t b, uint64_t c)
{
  struct rng r = { a ^ (b * UINT64_C (0x9e3779b97f4a7c15)) ^
                   (c * UINT64_C (0xc2b2ae3d27d4eb4f)) };

  rng_next (&r);
  return rng_next (&r);
}

/* ---------------------------------------------------------------- worlds and the model (world.c) */

/* One export as a world holds it: name, size, digest of its contents. */
struct entry {
  char name[NAME_MAX_LEN];
  uint64_t size;
  uint8_t sha[SHA256_LEN];
  uint8_t *data;              /* the model's contents; NULL in a world */
};

/* What the pool shows: its exports in name order. */
struct world {
  struct entry e[MAX_ENTRIES];
  unsigned n;
};

/* The model: what the acknowledged operations should have made. */
struct model {
  struct entry e[MAX_ENTRIES];
  unsigned n;
};

struct entry *model_find (struct model *m, const char *name);
/* Add (or replace) name with size bytes of data (NULL: zeros). */
struct entry *model_set (struct model *m, const char *name, uint64_t size,
                         const uint8_t *data);
void model_remove (struct model *m, const char *name);
/* dst becomes a copy of src. */
void model_copy (struct model *m, const char *dst, const char *src);
void model_rename (struct model *m, const char *from, const char *to);
void model_free (struct model *m);
/* The model as a world (checkpoints are not modelled). */
void model_world (const struct model *m, struct world *w);
/* The pool's world: every volume, snapshot and checkpoint, read whole. */
int world_read (struct cairn_pool *pool, struct world *w);
/* Equal worlds; without with_ckpts, checkpoints are left out. */
bool world_eq (const struct world *a, const struct world *b, bool with_ckpts);
void world_print (FILE *f, const char *title, const struct world *w);

/* ---------------------------------------------------------------- runs and scenarios (scenarios.c) */

/* One run of a scenario's workload: the dry run or a cut run. */
struct run {
  const struct scenario *sc;
  struct cairn_pool *pool;
  struct cairn_dev *pc;       /* one power-cut device of the supply */
  bool dry;                   /* no cut: record worlds, check the model */
  struct rng rng;             /* the workload's choices: the same every run */
  int64_t now;                /* the pool's clock */
  unsigned step;              /* steps begun */
  unsigned acked;             /* the last step durable when it returned */
  unsigned reached;           /* the step that failed (0: none did) */
  int err;                    /* its error */
  const char *what;           /* the step's description */
  char lie[256];              /* C3: a step durable after the cut */
  struct model model;         /* dry run only */
  struct world *worlds;       /* dry run: after each step (0: before) */
  char fail[512];             /* a dry run's failure */
};

struct scenario {
  const char *name;
  void (*workload) (struct run *run);
  bool mirror;
  bool checkpoints;           /* the image takes checkpoints */
  bool intentlog;             /* flushes and FUA writes go to the intent
                                 log (engine/txn-log.c) */
};

extern const struct scenario scenarios[NSCENARIOS];

/* The streams the receive scenario receives, made once per process. */
struct streams {
  uint8_t *full, *incr;
  size_t full_len, incr_len;
  uint8_t *s1, *s2;           /* the source's states */
};
extern struct streams streams;

/* Whether the workload goes on (not after a step failed): begins step
 * `what`.
 */
bool step_begin (struct run *run, const char *what);
/* End a step that returned r; durable: it said everything before it is
 * durable when it returned 0 (the model is updated already).
 */
void step_end (struct run *run, int r, bool durable);
/* Fill buf with bytes determined by tag. */
void fill (void *buf, size_t len, uint64_t tag);

#endif /* CAIRN_POWERCUT_CAMPAIGN_H */
