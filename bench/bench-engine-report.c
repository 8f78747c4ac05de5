/* bench-engine: the report, as a table and as JSON.
 *
 * Formats the figures the runs (bench-engine-runs.c) left in struct results:
 * print_table for people, print_json for scripts.  It computes only ratios
 * and rates from them; README-engine.md says what each row means.
 */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench-engine.h"

/* ---------------------------------------------------------------- report */

/* The dirty limit of the insert runs. */
static uint64_t
dirty_limit (const struct config *cfg)
{
  return cfg->dirty_limit ? cfg->dirty_limit : cfg->cache_bytes / 4;
}

/* A count with thousands separators, in one of a few rotating buffers. */
static const char *
cnt (uint64_t v)
{
  static char bufs[8][32];
  static unsigned next;
  char tmp[32], *out = bufs[next++ % 8];
  int len = snprintf (tmp, sizeof tmp, "%" PRIu64, v), o = 0;

  for (int i = 0; i < len; i++) {
    if (i > 0 && (len - i) % 3 == 0)
      out[o++] = ',';
    out[o++] = tmp[i];
  }
  out[o] = '\0';
  return out;
}

/* Bytes in MiB. */
static double
mib (uint64_t bytes)
{
  return (double) bytes / MIB;
}

/* Items per second, 0 for no time. */
static double
rate (uint64_t n, double secs)
{
  return secs > 0 ? (double) n / secs : 0;
}

/* a / b, or 0 when b is 0. */
static double
ratio (double a, double b)
{
  return b != 0 ? a / b : 0;
}

/* A row of the two-column table: two numbers with prec decimals, each
 * followed by unit ("", "x" or "%").
 */
static void
row (FILE *fp, const char *label, int prec, const char *unit, double a,
     double b)
{
  int w = 14 - (int) strlen (unit);

  fprintf (fp, "  %-40s %*.*f%s %*.*f%s\n", label, w, prec, a, unit, w, prec,
           b, unit);
}

/* A row of the two-column table: two counts. */
static void
row_count (FILE *fp, const char *label, uint64_t a, uint64_t b)
{
  fprintf (fp, "  %-40s %14s %14s\n", label, cnt (a), cnt (b));
}

/* Seconds of I/O outside the engine during an insert run. */
static double
io_secs (const struct io_stats *io)
{
  return (double) (io->read_ns + io->write_ns + io->flush_ns) / 1e9;
}

/* The insert-run half of the table. */
static void
print_inserts (FILE *fp, const struct results *res)
{
  const struct insert_run *s = &res->ins[0], *r = &res->ins[1];
  const char *seg[3] = { "0-25%", "25-50%", "50-100%" };
  const double cache = (double) res->cfg.cache_bytes;
  const double item = KEY_LEN + VAL_LEN;

  fprintf (fp, "\nInserts (%s items each, one txn_begin/insert/txn_end per "
           "item, pool_commit every %u)\n", cnt (s->asked), COMMIT_EVERY);
  for (int i = 0; i < 2; i++)
    if (res->ins[i].stopped)
      fprintf (fp, "  !! %s run STOPPED after %s items: RSS passed %.0f MiB "
               "(--max-rss-mib)\n", res->ins[i].name, cnt (res->ins[i].items),
               (double) res->cfg.max_rss_kib / 1024);
  fprintf (fp, "  %-40s %14s %14s\n", "", "sequential", "random");
  row_count (fp, "items inserted", s->items, r->items);
  row (fp, "inserts/s (whole run, commits incl.)", 0, "",
       rate (s->items, s->secs), rate (r->items, r->secs));
  for (int i = 0; i < 3 && !s->stopped && !r->stopped; i++) {
    const struct mem_point *s0 = i ? &s->mem[i - 1] : NULL;
    const struct mem_point *r0 = i ? &r->mem[i - 1] : NULL;
    char label[64];

    snprintf (label, sizeof label, "  inserts/s over %s", seg[i]);
    row (fp, label, 0, "",
         rate (s->mem[i].items - (s0 ? s0->items : 0),
               s->mem[i].secs - (s0 ? s0->secs : 0)),
         rate (r->mem[i].items - (r0 ? r0->items : 0),
               r->mem[i].secs - (r0 ? r0->secs : 0)));
  }
  row (fp, "time, s", 1, "", s->secs, r->secs);
  row_count (fp, "commits (explicit + dirty limit)", s->commits, r->commits);
  row_count (fp, "tree nodes (leaves + internal)", s->tree.nodes,
             r->tree.nodes);
  row (fp, "tree height", 0, "", s->tree.height, r->tree.height);
  row (fp, "tree size, MiB (nodes x node size)", 1, "",
       mib (s->tree.nodes * s->node_size), mib (r->tree.nodes * r->node_size));
  row (fp, "tree size / node cache", 1, "x",
       ratio ((double) (s->tree.nodes * s->node_size), cache),
       ratio ((double) (r->tree.nodes * r->node_size), cache));
  row (fp, "items per leaf (avg)", 1, "",
       ratio ((double) s->tree.items, (double) s->tree.leaves),
       ratio ((double) r->tree.items, (double) r->tree.leaves));
  row (fp, "MiB written to the pool", 1, "", mib (s->io.write_bytes),
       mib (r->io.write_bytes));
  row (fp, "  / payload (8 + 64 bytes per item)", 1, "x",
       ratio ((double) s->io.write_bytes, (double) s->items * item),
       ratio ((double) r->io.write_bytes, (double) r->items * item));
  row (fp, "MiB read from the pool (cache misses)", 1, "",
       mib (s->io.read_bytes), mib (r->io.read_bytes));
  row (fp, "time in pwrite, s", 1, "", (double) s->io.write_ns / 1e9,
       (double) r->io.write_ns / 1e9);
  row (fp, "time in pread, s", 1, "", (double) s->io.read_ns / 1e9,
       (double) r->io.read_ns / 1e9);
  row (fp, "time in fdatasync, s", 1, "", (double) s->io.flush_ns / 1e9,
       (double) r->io.flush_ns / 1e9);
  row (fp, "time in the engine (the rest), s", 1, "",
       s->secs - io_secs (&s->io), r->secs - io_secs (&r->io));
  row_count (fp, "free extents at the end (space map ranges)",
             s->mem[2].free_extents, r->mem[2].free_extents);
  row_count (fp, "node cache misses", s->mem[2].cache.misses,
             r->mem[2].cache.misses);
  row_count (fp, "node cache evictions", s->mem[2].cache.evictions,
             r->mem[2].cache.evictions);

  fprintf (fp, "\nLookups (%s random present keys, after the run, same pool "
           "and cache)\n", cnt (s->lookups));
  row (fp, "lookups/s", 0, "", rate (s->lookups, s->lookup_secs),
       rate (r->lookups, r->lookup_secs));
  row (fp, "node cache hit ratio", 1, "%",
       100 * ratio ((double) s->lookup_hits,
                    (double) (s->lookup_hits + s->lookup_misses)),
       100 * ratio ((double) r->lookup_hits,
                    (double) (r->lookup_hits + r->lookup_misses)));
  row (fp, "node reads per lookup", 2, "",
       ratio ((double) s->lookup_io.reads, (double) s->lookups),
       ratio ((double) r->lookup_io.reads, (double) r->lookups));
  row (fp, "time in pread, s", 1, "", (double) s->lookup_io.read_ns / 1e9,
       (double) r->lookup_io.read_ns / 1e9);
}

/* The memory part of the table. */
static void
print_memory (FILE *fp, const struct results *res)
{
  fprintf (fp, "\nMemory during the insert runs (node cache limit %.0f MiB; "
           "VmHWM %s)\n", mib (res->cfg.cache_bytes),
           res->ins[0].hwm_reset ? "reset at each run's start" :
           "NOT reset: peak of the whole process");
  fprintf (fp, "  %-11s %5s %10s %13s %10s %10s %11s %9s %7s\n", "run", "at",
           "items", "pool used MiB", "VmHWM MiB", "VmRSS MiB", "cache MiB",
           "nodes", "dirty");
  for (int r = 0; r < 2; r++) {
    const struct insert_run *ir = &res->ins[r];

    fprintf (fp, "  %-11s %5s %10s %13s %10.1f %10s %11s %9s %7s\n", ir->name,
             "start", "0", "-", (double) ir->start_rss_kib / 1024, "-", "-",
             "-", "-");
    for (int i = 0; i < 3; i++) {
      const struct mem_point *m = &ir->mem[i];
      char at[8];

      if (m->items == 0)
        continue;             /* not reached: the run stopped */
      if (i == 2 && ir->stopped)
        snprintf (at, sizeof at, "stop");
      else
        snprintf (at, sizeof at, "%d%%", i == 2 ? 100 : 25 << i);
      fprintf (fp, "  %-11s %5s %10s %13.1f %10.1f %10.1f %11.1f %9s %7s\n",
               ir->name, at, cnt (m->items), mib (m->pool_used),
               (double) m->hwm_kib / 1024, (double) m->rss_kib / 1024,
               mib (m->cache.bytes), cnt (m->cache.nodes),
               cnt (m->cache.dirty_nodes));
    }
  }
}

/* The whole table. */
void
print_table (FILE *fp, const struct results *res)
{
  const struct config *cfg = &res->cfg;
  const struct yardstick *y = &res->yard;

  fprintf (fp, "Cairn engine benchmark (%s %s)\n", PACKAGE_NAME,
           PACKAGE_VERSION);
  fprintf (fp, "  pool files in %s (%s), kernel %s, %ld CPUs\n", work_dir,
           res->fs, res->kernel, sysconf (_SC_NPROCESSORS_ONLN));
  fprintf (fp, "  node size %u bytes, node cache %.0f MiB, dirty limit %.0f "
           "MiB%s,\n  RSS guard %.0f MiB, seed %" PRIu64 "%s, load average "
           "%.1f at the start, %.1f at the end\n", res->ins[0].node_size,
           mib (cfg->cache_bytes), mib (dirty_limit (cfg)),
           cfg->dirty_limit ? "" : " (the engine's: cache / 4)",
           (double) cfg->max_rss_kib / 1024, cfg->seed,
           cfg->quick ? ", --quick" : "", res->load[0], res->load[1]);

  fprintf (fp, "\nYardstick: a plain file on the same file system\n");
  fprintf (fp, "  %-58s %8.2f s  (%.0f MiB/s; %.0f items/s of payload)\n",
           "write the insert payload, 1 MiB pwrites + 1 fdatasync",
           y->secs, mib (y->bytes) / MAX (y->secs, 1e-9),
           rate (res->cfg.items, y->secs));
  fprintf (fp, "  %-58s %8.2f ms (p90 %.2f)\n",
           "4 KiB pwrite over written data + fdatasync, median",
           y->sync_ms, y->sync_p90_ms);
  fprintf (fp, "  %-58s %8.2f ms (p90 %.2f)\n",
           "4 KiB pwrite into a hole + fdatasync, median",
           y->alloc_sync_ms, y->alloc_sync_p90_ms);

  print_inserts (fp, res);
  print_memory (fp, res);

  fprintf (fp, "\nCommit latency (pool_commit on the random tree: %s leaves, "
           "%s free extents)\nEach commit writes the nodes and the whole space "
           "map, fdatasyncs, writes the\nsuperblock and fdatasyncs again, all "
           "on the real file.\n", cnt (res->commit_tree_leaves),
           cnt (res->commit_free_extents));
  fprintf (fp, "  %7s %7s %5s %10s %8s %8s %10s %10s %11s\n", "leaves",
           "dirty", "reps", "median ms", "p90 ms", "max ms", "MiB wrtn",
           "pwrite ms", "fdatasync ms");
  for (int s = 0; s < NCOMMIT; s++) {
    const struct commit_run *c = &res->commit[s];

    fprintf (fp, "  %7s %7.0f %5u %10.2f %8.2f %8.2f %10.2f %10.2f %11.2f%s\n",
             cnt (c->leaves), c->dirty_nodes, c->reps, c->ms, c->p90_ms,
             c->max_ms, c->write_mib, c->write_ms, c->flush_ms,
             c->leaves < c->want ? "  (capped: tree too small)" : "");
  }

  fprintf (fp, "\nOpen (dev_file_open + pool_open + pool_tree_open + one "
           "lookup)\n");
  fprintf (fp, "  pool of %s items in random order, %.1f MiB used, built in "
           "%.1f s\n  (setup: no dirty limit, a commit every %s items)",
           cnt (res->open.items), mib (res->open.pool_used),
           res->open.build_secs, cnt (OPEN_COMMIT_EVERY));
  if (res->open.build_reopens)
    fprintf (fp, " (reopened %u times to empty an overgrown node cache)",
             res->open.build_reopens);
  fprintf (fp, "\n");
  fprintf (fp, "  %-40s %8.2f ms (max %.2f), %s reads, %.1f KiB\n",
           res->open.cold ? "cold (page cache dropped), median" :
           "NOT cold (could not drop the page cache)",
           res->open.cold_ms, res->open.cold_max_ms, cnt (res->open.reads),
           (double) res->open.read_bytes / 1024);
  fprintf (fp, "  %-40s %8.2f ms (max %.2f)\n", "warm, median",
           res->open.warm_ms, res->open.warm_max_ms);

  fprintf (fp, "\nfsck (fsck_pool, default 64 MiB cache, page cache warm)\n");
  for (int r = 0; r < 2; r++) {
    const struct insert_run *ir = &res->ins[r];

    fprintf (fp, "  %-11s %8.2f s  %s nodes, %s items, %s problems%s\n",
             ir->name, ir->fsck_secs, cnt (ir->fsck.nodes),
             cnt (ir->fsck.items), cnt (ir->fsck.errors),
             ir->fsck.errors ? "  <-- NOT CLEAN" : "");
  }
}

/* A JSON object of I/O counters. */
static void
json_io (FILE *fp, const char *name, const struct io_stats *io)
{
  fprintf (fp, "\"%s\": {\"reads\": %" PRIu64 ", \"read_bytes\": %" PRIu64
           ", \"read_s\": %.6f, \"writes\": %" PRIu64 ", \"write_bytes\": %"
           PRIu64 ", \"write_s\": %.6f, \"flushes\": %" PRIu64
           ", \"flush_s\": %.6f}", name, io->reads, io->read_bytes,
           (double) io->read_ns / 1e9, io->writes, io->write_bytes,
           (double) io->write_ns / 1e9, io->flushes,
           (double) io->flush_ns / 1e9);
}

/* A string as a JSON literal. */
static void
json_str (FILE *fp, const char *s)
{
  fputc ('"', fp);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fputc ('\\', fp);
    if ((unsigned char) *s < 0x20)
      fprintf (fp, "\\u%04x", (unsigned char) *s);
    else
      fputc (*s, fp);
  }
  fputc ('"', fp);
}

/* The same figures as one JSON object. */
void
print_json (FILE *fp, const struct results *res)
{
  const struct config *cfg = &res->cfg;

  fprintf (fp, "{\n  \"config\": {\"items\": %" PRIu64 ", \"open_items\": %"
           PRIu64 ", \"lookups\": %" PRIu64 ", \"cache_bytes\": %" PRIu64
           ", \"dirty_limit_bytes\": %" PRIu64 ", \"max_rss_kib\": %" PRIu64
           ", \"node_size\": %u"
           ", \"seed\": %" PRIu64 ", \"quick\": %s, \"commit_every\": %u"
           ", \"key_bytes\": %d, \"value_bytes\": %d, \"dir\": ",
           cfg->items, cfg->open_items, cfg->lookups, cfg->cache_bytes,
           dirty_limit (cfg), cfg->max_rss_kib, res->ins[0].node_size,
           cfg->seed,
           cfg->quick ? "true" : "false", COMMIT_EVERY, KEY_LEN, VAL_LEN);
  json_str (fp, work_dir);
  fprintf (fp, ", \"fs\": ");
  json_str (fp, res->fs);
  fprintf (fp, ", \"kernel\": ");
  json_str (fp, res->kernel);
  fprintf (fp, ", \"load_start\": %.2f, \"load_end\": %.2f", res->load[0],
           res->load[1]);
  fprintf (fp, "},\n  \"yardstick\": {\"bytes\": %" PRIu64 ", \"write_s\": %.6f"
           ", \"sync_ms\": %.4f, \"sync_p90_ms\": %.4f, \"alloc_sync_ms\": %.4f"
           ", \"alloc_sync_p90_ms\": %.4f},\n  \"inserts\": [",
           res->yard.bytes, res->yard.secs, res->yard.sync_ms,
           res->yard.sync_p90_ms, res->yard.alloc_sync_ms,
           res->yard.alloc_sync_p90_ms);
  for (int r = 0; r < 2; r++) {
    const struct insert_run *ir = &res->ins[r];

    fprintf (fp, "%s\n    {\"keys\": \"%s\", \"items\": %" PRIu64
             ", \"asked\": %" PRIu64 ", \"stopped\": %s, \"secs\": %.6f"
             ", \"inserts_per_s\": %.1f, \"commits\": %" PRIu64
             ", \"explicit_commits\": %" PRIu64 ", \"tree_nodes\": %" PRIu64
             ", \"tree_bytes\": %" PRIu64 ", \"tree_items\": %" PRIu64
             ", \"start_rss_kib\": %" PRIu64 ", \"hwm_reset\": %s, ",
             r ? "," : "", ir->name, ir->items, ir->asked,
             ir->stopped ? "true" : "false", ir->secs,
             rate (ir->items, ir->secs), ir->commits, ir->explicit_commits,
             ir->tree.nodes, ir->tree.nodes * ir->node_size, ir->tree.items,
             ir->start_rss_kib, ir->hwm_reset ? "true" : "false");
    json_io (fp, "io", &ir->io);
    fprintf (fp, ",\n     \"memory\": [");
    for (int i = 0; i < 3; i++) {
      const struct mem_point *m = &ir->mem[i];

      fprintf (fp, "%s{\"pct\": %d, \"items\": %" PRIu64 ", \"secs\": %.6f"
               ", \"vm_hwm_kib\": %" PRIu64 ", \"vm_rss_kib\": %" PRIu64
               ", \"pool_used_bytes\": %" PRIu64 ", \"free_extents\": %" PRIu64
               ", \"cache_bytes\": %" PRIu64
               ", \"cache_nodes\": %" PRIu64 ", \"dirty_nodes\": %" PRIu64
               ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
               ", \"evictions\": %" PRIu64 "}", i ? ", " : "",
               i == 2 ? 100 : 25 << i, m->items, m->secs, m->hwm_kib,
               m->rss_kib, m->pool_used, m->free_extents, m->cache.bytes,
               m->cache.nodes,
               m->cache.dirty_nodes, m->cache.hits, m->cache.misses,
               m->cache.evictions);
    }
    fprintf (fp, "],\n     \"lookups\": {\"count\": %" PRIu64 ", \"secs\": %.6f"
             ", \"per_s\": %.1f, \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
             ", ", ir->lookups, ir->lookup_secs,
             rate (ir->lookups, ir->lookup_secs), ir->lookup_hits,
             ir->lookup_misses);
    json_io (fp, "io", &ir->lookup_io);
    fprintf (fp, "},\n     \"fsck\": {\"secs\": %.6f, \"nodes\": %" PRIu64
             ", \"items\": %" PRIu64 ", \"errors\": %" PRIu64 "}}",
             ir->fsck_secs, ir->fsck.nodes, ir->fsck.items, ir->fsck.errors);
  }
  fprintf (fp, "\n  ],\n  \"commit\": {\"tree_leaves\": %" PRIu64
           ", \"free_extents\": %" PRIu64 ", \"runs\": [",
           res->commit_tree_leaves, res->commit_free_extents);
  for (int s = 0; s < NCOMMIT; s++) {
    const struct commit_run *c = &res->commit[s];

    fprintf (fp, "%s\n    {\"want_leaves\": %u, \"leaves\": %u, \"reps\": %u"
             ", \"median_ms\": %.4f, \"p90_ms\": %.4f, \"max_ms\": %.4f"
             ", \"dirty_nodes\": %.0f, \"write_mib\": %.4f, \"write_ms\": %.4f"
             ", \"flush_ms\": %.4f, \"flushes\": %" PRIu64 "}", s ? "," : "",
             c->want, c->leaves, c->reps, c->ms, c->p90_ms, c->max_ms,
             c->dirty_nodes, c->write_mib, c->write_ms, c->flush_ms,
             c->flushes);
  }
  fprintf (fp, "\n  ]},\n  \"open\": {\"items\": %" PRIu64 ", \"build_s\": %.6f"
           ", \"build_reopens\": %u"
           ", \"pool_used_bytes\": %" PRIu64 ", \"cold\": %s"
           ", \"cold_ms\": %.4f, \"cold_max_ms\": %.4f, \"warm_ms\": %.4f"
           ", \"warm_max_ms\": %.4f, \"reads\": %" PRIu64
           ", \"read_bytes\": %" PRIu64 "}\n}\n", res->open.items,
           res->open.build_secs, res->open.build_reopens, res->open.pool_used,
           res->open.cold ? "true" : "false", res->open.cold_ms,
           res->open.cold_max_ms, res->open.warm_ms, res->open.warm_max_ms,
           res->open.reads, res->open.read_bytes);
}
