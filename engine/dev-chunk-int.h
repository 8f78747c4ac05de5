/* Cairn engine, layer "dev": what dev-chunk.c (the chunked device) and
 * dev-replace.c (replacing one of its members) share.  Not for other
 * files: dev.h is the interface.
 */
#ifndef CAIRN_DEV_CHUNK_INT_H
#define CAIRN_DEV_CHUNK_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "dev.h"

#define LABEL_SIZE (128u * 1024)
#define LABEL_VERSION 1u
#define LABEL_MAGIC "CAIRNDEV"
#define MEMBER_DATA_START (1024u * 1024)     /* both labels fit before */
#define LABEL_MEMBERS_OFF 128u
#define LABEL_MEMBER_SIZE 32u
#define LABEL_CSUM_OFF (LABEL_SIZE - 32)
#define STRIPE_LEN (64u * 1024)
#define STRIPES_MAX 16u                      /* ncopies * width */

/* Label bits of the replace flags (label offset 12). */
#define LABEL_REPLACING 1u        /* a replace is in progress */
#define LABEL_SOURCE_STALE 2u     /* the replaced member missed writes */

/* One stripe of a chunk: where it lies on which member. */
struct stripe {
  uint32_t member;
  uint64_t phys;
};

struct chunk {
  uint64_t logical, length;
  struct stripe *stripe;      /* ncopies * width, column-major */
};

/* A member and what it has counted. */
struct member {
  struct cairn_dev *dev;      /* NULL: missing (atomic: a replace's end
                                 swaps it under readers) */
  uint8_t uuid[16];
  uint64_t size;
  uint64_t read_errors, write_errors, cksum_errors, repaired;   /* atomic */
  bool own;                   /* closed with the device (a replace's
                                 target that took its place) */
};

/* A replace in progress (dev-replace.c has its design note).  The fields
 * the labels hold are set under chunk_dev.io_lock held for writing; the
 * thread's under lock.
 */
struct replace {
  bool active;                /* the labels say a replace is in progress */
  unsigned index;             /* the member being replaced (OLD) */
  uint8_t uuid[16];           /* NEW's member UUID */
  struct cairn_dev *target;   /* NEW; NULL when not named at open */
  bool own_target;            /* close target with the device */
  bool source_stale;          /* OLD missed writes: never read or write it */
  uint64_t cursor;            /* logical bytes below it copied (saved in
                                 the labels from time to time) */
  uint64_t saved;             /* the cursor the labels hold */
  /* The thread and its state, under lock. */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  pthread_t thread;
  bool running, joinable, stop;
  enum dev_replace_state state;
  int error;
  char errmsg[512];
  int64_t started;            /* wall clock, seconds since 1970 */
  uint64_t save_bytes;        /* copy this much between label saves */
};

struct chunk_dev {
  struct cairn_dev dev;       /* must be first */
  uint8_t pool_uuid[16];
  enum dev_profile profile;
  unsigned ncopies, width, nmembers, nchunks, missing;
  uint64_t stripe_size, stripe_len;
  uint64_t gen;               /* label generation */
  bool readonly, own_members, members_rdonly;
  struct member member[DEV_CHUNK_MAX_MEMBERS];
  struct chunk *chunk;
  struct stripe *stripes;     /* every chunk's, one allocation */
  /* Writes hold it for reading, a replace's copy step, its start and its
   * end for writing: a write never lands between a copy's read and its
   * write to NEW.
   */
  pthread_rwlock_t io_lock;
  struct replace rep;
  /* Devices named at open that are no longer members (replaced), and
   * members that a replace retired: closed with the device when it owns
   * its members.
   */
  struct cairn_dev *others[2 * DEV_CHUNK_MAX_MEMBERS];
  bool others_own[2 * DEV_CHUNK_MAX_MEMBERS];  /* closed even when the
                                 members are the caller's */
  unsigned nothers;
};

static inline struct chunk_dev *
to_chunk_dev (struct cairn_dev *dev)
{
  return (struct chunk_dev *) dev;
}

/* dev-chunk.c */
const struct chunk *chunk_find (const struct chunk_dev *c, uint64_t off);
void chunk_map (const struct chunk_dev *c, uint64_t off, unsigned k,
                const struct stripe **sp, uint64_t *physp, uint64_t *runp);
int chunk_read_copy (struct chunk_dev *c, void *buf, size_t len,
                     uint64_t off, unsigned k) CAIRN_WUR;
struct cairn_dev *member_dev (struct chunk_dev *c, unsigned i);
void count_missing (struct chunk_dev *c);
/* Write every present member's label (and NEW's during a replace) at
 * generation gen + 1, with io_lock held for writing or no I/O possible
 * (dev-chunk.c, "Label updates").
 */
int labels_update (struct chunk_dev *c) CAIRN_WUR;
/* Make dev's labels unrecognisable (a member that left the pool). */
int label_wipe (struct cairn_dev *dev) CAIRN_WUR;
/* The bytes a member must have to hold member i's stripes. */
uint64_t member_bytes_needed (const struct chunk_dev *c, unsigned i);

/* dev-replace.c */
void replace_init (struct chunk_dev *c);
void replace_fini (struct chunk_dev *c);

#endif /* CAIRN_DEV_CHUNK_INT_H */
