/* bench-engine: what its three files share (bench-engine.c: the work
 * directory, messages, instruments and command line; bench-engine-runs.c:
 * the measurement runs; bench-engine-report.c: the table and the JSON).
 * Private to bench/bench-engine; the design notes are at the top of
 * bench-engine.c.
 */
#ifndef CAIRN_BENCH_ENGINE_H
#define CAIRN_BENCH_ENGINE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "btree.h"
#include "dev.h"
#include "fsck.h"
#include "pool.h"

#define MIB (1024ull * 1024)
#define KEY_LEN 8
#define VAL_LEN 64
#define COMMIT_EVERY 10000u
#define OPEN_COMMIT_EVERY 100000u
#define NCOMMIT 3

/* --------------------------------------------------------- bench-engine.c */

struct config {
  uint64_t items;               /* per insert run */
  uint64_t open_items;          /* in the pool whose open is timed */
  uint64_t lookups;
  uint64_t cache_bytes;
  uint64_t dirty_limit;         /* of the insert runs; 0: the engine's */
  uint64_t max_rss_kib;         /* an insert run stops beyond it */
  uint64_t seed;
  unsigned commit_reps[NCOMMIT];
  const char *dir;              /* where the work directory goes */
  const char *json;             /* NULL, a file, or "-" for stdout */
  bool quick, keep, drop_caches;
};

/* The work directory (made by work_setup). */
extern char work_dir[PATH_MAX];

/* Print a message and exit 1 (the exit handler removes the files). */
void die (const char *fmt, ...)
  __attribute__ ((noreturn)) CAIRN_PRINTF (1, 2);
/* Die with the engine's message when an engine call failed. */
void check (int r, const char *what);
/* A progress line on stderr. */
void note (const char *fmt, ...) CAIRN_PRINTF (1, 2);

/* Monotonic time in nanoseconds. */
uint64_t now_ns (void);
/* Seconds since t0 (nanoseconds). */
double secs_since (uint64_t t0);
/* The p-th percentile (nearest rank) of v[0..n), which gets sorted. */
double percentile (double *v, size_t n, double p);

/* A "Vm...:" field of /proc/self/status, in KiB (0 if absent). */
uint64_t status_kib (const char *field);
/* Reset VmHWM to the current RSS (Linux 4.0+); false if it cannot be. */
bool reset_hwm (void);
/* Drop the page cache (needs root); false if it could not be. */
bool drop_page_cache (void);

/* The timing device: counts and times every operation on the pool file. */
struct io_stats {
  uint64_t reads, writes, flushes;
  uint64_t read_bytes, write_bytes;
  uint64_t read_ns, write_ns, flush_ns;
};

struct timed_dev {
  struct cairn_dev dev;         /* must be first */
  struct cairn_dev *lower;
  struct io_stats io;           /* single-threaded: plain counters */
};

/* Stack a timing device on lower. */
struct timed_dev *timed_create (struct cairn_dev *lower);
/* b - a, field by field. */
struct io_stats io_sub (const struct io_stats *b, const struct io_stats *a);

/* ---------------------------------------------------- bench-engine-runs.c */

struct yardstick {
  uint64_t bytes;               /* the insert runs' payload */
  double secs;                  /* to write them, 1 MiB pwrites + fdatasync */
  double sync_ms, sync_p90_ms;  /* 4 KiB overwrite + fdatasync */
  double alloc_sync_ms, alloc_sync_p90_ms; /* 4 KiB into a hole + fdatasync */
};

/* A tree's shape, counted by a walk of all its nodes. */
struct tree_census {
  uint64_t nodes, leaves, items;
  unsigned height;
  uint64_t *first_keys;         /* of each leaf, in order, if asked for */
  bool want_first;              /* the next item starts a leaf */
  bool collect;
};

/* Memory and progress at one point of an insert run. */
struct mem_point {
  uint64_t items;
  double secs;                  /* since the run started */
  uint64_t hwm_kib, rss_kib;
  uint64_t pool_used;           /* bytes */
  uint64_t free_extents;
  struct nodecache_stats cache;
};

struct insert_run {
  const char *name;
  bool random;
  uint64_t items;               /* inserted: fewer than asked if stopped */
  uint64_t asked;
  bool stopped;                 /* RSS passed --max-rss-mib */
  double secs;                  /* inserts and commits, final one included */
  uint64_t commits, explicit_commits;
  uint64_t start_rss_kib;       /* after the pool was created */
  bool hwm_reset;               /* VmHWM counts from the run's start */
  struct mem_point mem[3];      /* 25%, 50%, 100% */
  struct io_stats io;
  uint32_t node_size;
  uint64_t tree_id;
  /* Random lookups of present keys after the run, same pool. */
  uint64_t lookups;
  double lookup_secs;
  uint64_t lookup_hits, lookup_misses;
  struct io_stats lookup_io;
  struct tree_census tree;       /* after the run */
  /* fsck of the pool afterwards. */
  struct fsck_report fsck;
  double fsck_secs;
  unsigned fsck_printed;
};

struct commit_run {
  unsigned want;                /* dirty leaves asked for */
  unsigned leaves;              /* dirtied: capped at the tree's leaves */
  unsigned reps;
  double ms, p90_ms, max_ms;    /* pool_commit wall time */
  double dirty_nodes;           /* median, leaves and their ancestors */
  double write_mib;             /* median bytes written per commit */
  double write_ms, flush_ms;    /* median time in pwrite, in fdatasync */
  uint64_t flushes;             /* per commit */
};

struct open_run {
  uint64_t items;
  double build_secs;
  unsigned build_reopens;       /* to empty a node cache past its limit */
  uint64_t pool_used;
  bool cold;                    /* the page cache was dropped before each */
  double cold_ms, warm_ms;      /* medians */
  double cold_max_ms, warm_max_ms;
  uint64_t reads, read_bytes;   /* by one open and lookup */
};

/* The plain-file yardstick: sequential bandwidth for the payload, and the
 * latency of a small write plus fdatasync, over written blocks and into
 * holes.
 */
void run_yardstick (const char *path, uint64_t bytes, struct yardstick *y);
/* An insert run in key or random order: memory checkpoints, then lookups,
 * a walk of the tree and fsck of the closed pool.
 */
void run_inserts (const struct config *cfg, const char *path, bool random,
                  struct insert_run *ir);
/* Commit latency with 1, 100 and 10,000 dirty leaves on the random pool. */
void run_commits (const struct config *cfg, const char *path,
                  uint64_t tree_id, struct commit_run cr[NCOMMIT],
                  uint64_t *leavesp, uint64_t *extentsp);
/* Build a large pool in random order, then time opening it cold and warm. */
void run_open (const struct config *cfg, const char *path,
               struct open_run *o);

/* -------------------------------------------------- bench-engine-report.c */

struct results {
  struct config cfg;
  double load[2];               /* 1-minute load average, start and end */
  char fs[32];
  char kernel[128];
  struct yardstick yard;
  struct insert_run ins[2];     /* sequential, random */
  struct commit_run commit[NCOMMIT];
  uint64_t commit_tree_leaves;
  uint64_t commit_free_extents;
  struct open_run open;
};

/* The whole table. */
void print_table (FILE *fp, const struct results *res);
/* The same figures as one JSON object. */
void print_json (FILE *fp, const struct results *res);

#endif /* CAIRN_BENCH_ENGINE_H */
