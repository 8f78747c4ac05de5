/* Cairn engine: what the files of continuous checkpoints share
 * (checkpoint.c: records, settings, taking, dropping, collecting;
 * checkpoint-api.c: accounting, listing and the public calls).  Private
 * to them; the design note is at the top of checkpoint.c.
 */
#ifndef CAIRN_CHECKPOINT_INT_H
#define CAIRN_CHECKPOINT_INT_H

#include "catalog-int.h"
#include "retention.h"

#define CKPT_KEY_TIME_LEN 25u
#define CKPT_DROP_BATCH 256u
/* Checkpoints dropped at a time under pressure. */
#define CKPT_RELIEVE_BATCH 64u
/* The collector frees space beyond the policy when less than this per
 * cent of the pool's data space is free.
 */
#define CKPT_PRESSURE 5u       /* the default space-threshold (per cent) */
#define CKPT_PRESSURE_MAX 50u
/* Seconds between two passes of the collector. */
#define CKPT_COLLECT_PERIOD 60

/* A volume's checkpoint generations, read from its records. */
struct genvec {
  uint64_t *gen;
  int64_t *time;
  size_t n, cap;
  uint64_t since, until;      /* times, inclusive */
};

/* Up to CKPT_RELIEVE_BATCH checkpoints of a volume, oldest first, from the
 * time index.
 */
struct ckbatch {
  uint64_t gen[CKPT_RELIEVE_BATCH], ctime[CKPT_RELIEVE_BATCH];
  size_t n;
};

/* checkpoint.c */
/* The key of a checkpoint's time index item. */
void ckpt_time_key (uint8_t key[CKPT_KEY_TIME_LEN], uint64_t id,
                    uint64_t ctime, uint64_t gen);
/* Decode a checkpoint record of (id, gen), range-checked. */
int ckptrec_decode (const uint8_t *v, size_t vl, uint64_t id, uint64_t gen,
                    struct vol_checkpoint *c) CAIRN_WUR;
/* Settings: "on"/"off"; the policy of volume id (0: the pool's) and
 * whether it is its own; store one; the pool's default "checkpoints"
 * when none is stored; does vs take checkpoints?
 */
int parse_onoff (const char *value, int *on) CAIRN_WUR;
int policy_get (struct catalog *cat, uint64_t id, struct ret_policy *p,
                bool *own) CAIRN_WUR;
int setting_put (struct catalog *cat, uint64_t id, const char *name,
                 const char *value) CAIRN_WUR;
int pool_default (struct catalog *cat);
/* The pool's commit-interval: parse one (1 s to CKPT_INTERVAL_MAX), and
 * read the stored one (the default, *own false, when none or a bad one is
 * stored).
 */
#define CKPT_INTERVAL_MAX 3600u
int parse_interval (const char *value, uint64_t *secsp) CAIRN_WUR;
int interval_get (struct catalog *cat, uint64_t *secsp, bool *own)
  CAIRN_WUR;
/* The pool's space-threshold, the same way ("5%" or "5": 1 to
 * CKPT_PRESSURE_MAX per cent; CKPT_PRESSURE when not set).
 */
int parse_threshold (const char *value, unsigned *pctp) CAIRN_WUR;
int threshold_get (struct catalog *cat, unsigned *pctp, bool *own)
  CAIRN_WUR;
/* Make the stored pool settings (commit-interval, space-threshold) the
 * ones in use: when the catalog loads and when one changes.
 */
int pool_settings_apply (struct catalog *cat) CAIRN_WUR;
bool ckpt_enabled (const struct catalog *cat, const struct volstate *vs);
/* A volume's checkpoints from their records (genvec_item is the
 * cat_foreach_prefix callback), and freeing them.
 */
int genvec_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
                 size_t vl);
int genvec_read (struct catalog *cat, uint64_t id, struct genvec *gv)
  CAIRN_WUR;
void genvec_free (struct genvec *gv);
/* Submit the drop of n checkpoints of volume id (*droppedp counts those
 * that went); prune volume id by its policy (fn may be NULL).
 */
int ckpt_submit_drop (struct cairn_pool *pool, uint64_t id, uint64_t *gens,
                      size_t n, uint64_t *droppedp) CAIRN_WUR;
int ckpt_prune_vs (struct catalog *cat, uint64_t id, bool dry_run,
                   int (*fn) (void *opaque, uint64_t gen, int64_t ctime,
                              const char *mark),
                   void *opaque, uint64_t *droppedp) CAIRN_WUR;
/* The ids of the visible volumes, in a malloc'd array. */
int visible_ids (struct catalog *cat, uint64_t **idsp, size_t *np)
  CAIRN_WUR;
/* cat_foreach_prefix callback over the time index: collect a batch. */
int batch_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
                size_t vl);

#endif /* CAIRN_CHECKPOINT_INT_H */
