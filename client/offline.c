/* cairn: the offline subcommands, which open a pool through the engine.
 *
 * mkpool formats a file or block device, fsck checks a stopped pool, info
 * describes one.  fsck and info open the device read-only (a shared lock),
 * so they fail with a message naming the holder while a server has the pool
 * open, and never change it.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "fsck.h"
#include "pool.h"
#include "progress.h"
#include "units.h"

#define INFO_CACHE_BYTES (1024 * 1024)  /* info reads one node at most */

/* "1 tree" or "2 trees". */
static const char *
plural (uint64_t n, const char *one, const char *many)
{
  return n == 1 ? one : many;
}

/* Open the device at path (flags as dev_file_open) for a command; on
 * failure report it and return the exit code: EXIT_NOT_FOUND when path does
 * not exist.
 */
static int
open_device (const struct cli *cli, const char *path, unsigned flags,
             struct cairn_dev **devp)
{
  int r = dev_file_open (path, flags, 0, devp);

  if (r == -ENOENT)
    return cli_error (cli, EXIT_NOT_FOUND, "%s: %s", path, strerror (ENOENT));
  if (r < 0)
    return cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
  return EXIT_OK;
}

/* ---------------------------------------------------------------- mkpool */

/* Parse --node-size: a power of two from NODE_SIZE_MIN to NODE_SIZE_MAX. */
static int
parse_node_size (const struct cli *cli, const char *arg, uint32_t *nodep)
{
  uint64_t n;

  if (units_parse_size (arg, &n) < 0)
    return cli_usage_error (cli, "--node-size: %s", cairn_errmsg ());
  if (n < NODE_SIZE_MIN || n > NODE_SIZE_MAX || (n & (n - 1)) != 0)
    return cli_usage_error (cli, "node size '%s' must be a power of two from "
                            "4K to 64K: 4K, 8K, 16K, 32K or 64K", arg);
  *nodep = (uint32_t) n;
  return 0;
}

/* Parse --size: at least POOL_MIN_SIZE, whole blocks. */
static int
parse_pool_size (const struct cli *cli, const char *arg, uint64_t *sizep)
{
  char min[UNITS_FORMAT_MAX];

  if (units_parse_size (arg, sizep) < 0)
    return cli_usage_error (cli, "--size: %s", cairn_errmsg ());
  if (*sizep < POOL_MIN_SIZE)
    return cli_usage_error (cli, "size '%s' is too small: a pool needs at "
                            "least %s", arg, units_format (POOL_MIN_SIZE, min));
  if (*sizep % BLOCK_SIZE != 0)
    return cli_usage_error (cli, "size '%s' is not a whole number of 4K "
                            "blocks", arg);
  if (*sizep > (uint64_t) INT64_MAX)
    return cli_usage_error (cli, "size '%s' is too large", arg);
  return 0;
}

/* Refuse to format a block device that holds a pool, unless forced. */
static int
check_no_pool (const struct cli *cli, const char *path, struct cairn_dev *dev)
{
  struct pool_open_opts oo = { .readonly = true,
                               .cache_bytes = INFO_CACHE_BYTES };
  struct cairn_pool *pool;
  struct pool_info info;
  char uuid[37];

  if (pool_open (dev, &oo, &pool) < 0) {
    cairn_error_clear ();
    return 0;             /* no pool that opens: nothing to protect */
  }
  pool_info (pool, &info);
  pool_close (pool);      /* read-only: nothing to commit */
  uuid_format (info.uuid, uuid);
  return cli_error (cli, EXIT_FAIL, "%s holds Cairn pool %s: use --force to "
                    "overwrite it (this destroys what it holds)", path, uuid);
}

/* Open an existing path for formatting, after the checks that protect what
 * it holds; resize a regular file to size when size is not 0.
 */
static int
open_existing (const struct cli *cli, const char *path, const struct stat *st,
               bool force, uint64_t size, struct cairn_dev **devp)
{
  int r;

  if (S_ISBLK (st->st_mode)) {
    if (size)
      return cli_usage_error (cli, "%s is a block device, whose size is "
                              "fixed: leave out --size", path);
  }
  else if (!S_ISREG (st->st_mode))
    return cli_error (cli, EXIT_FAIL, "%s is not a regular file or a block "
                      "device", path);
  else if (!force)
    return cli_error (cli, EXIT_FAIL, "%s exists: use --force to overwrite "
                      "it (this destroys what it holds)", path);

  /* Opening takes the pool lock: a pool in use is never touched. */
  r = open_device (cli, path, 0, devp);
  if (r != EXIT_OK)
    return r;
  if (S_ISBLK (st->st_mode) && !force)
    r = check_no_pool (cli, path, *devp);
  else if (size && truncate (path, (off_t) size) == -1)
    r = cli_error (cli, EXIT_FAIL, "%s: setting the size to %" PRIu64
                   " bytes: %m", path, size);
  else if (size)
    (*devp)->size = size;   /* what the backend would find if it reopened */
  /* Check what pool_format would, before anything is destroyed. */
  if (r == EXIT_OK && (*devp)->size < POOL_MIN_SIZE) {
    char have[UNITS_FORMAT_MAX], min[UNITS_FORMAT_MAX];

    r = cli_error (cli, EXIT_FAIL, "%s is %s, too small for a pool: at least "
                   "%s are needed%s", path, units_format ((*devp)->size, have),
                   units_format (POOL_MIN_SIZE, min),
                   S_ISREG (st->st_mode) ? " (resize it with --size)" : "");
  }
  /* What the device held is garbage now: punch it out (a file becomes
   * sparse again, a block device gets a discard hint).
   */
  if (r == EXIT_OK && dev_discard (*devp, 0, (*devp)->size) < 0)
    r = cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
  if (r != EXIT_OK) {
    dev_close (*devp);
    *devp = NULL;
  }
  return r;
}

/* Open or create an RBD image for mkpool: a new one of size (with
 * --force, made anew over one that exists), or with --force and no size
 * an existing one, whose contents are discarded.
 */
static int
mkpool_open_rbd (const struct cli *cli, const char *path, bool force,
                 uint64_t size, enum dev_prealloc prealloc,
                 struct cairn_dev **devp, bool *createdp)
{
  CLEANUP_FREE char *name = cli_device_name (cli, path);
  int r;

  if (name == NULL)
    return cli_error (cli, EXIT_FAIL, "out of memory");
  if (prealloc != DEV_PREALLOC_OFF)
    return cli_usage_error (cli, "%s: --preallocate is for pool files: an "
                            "RBD image gets its space from the cluster",
                            path);
  if (size) {
    r = dev_open (name, DEV_CREATE, size, devp);
    if (r == -EEXIST && force) {
      r = dev_rbd_remove (name);    /* refused while a server has it */
      if (r == 0)
        r = dev_open (name, DEV_CREATE, size, devp);
    }
    if (r == -EEXIST)
      return cli_error (cli, EXIT_FAIL, "%s exists: use --force to overwrite "
                        "it (this destroys what it holds)", path);
    if (r < 0)
      return cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
    *createdp = true;
    return EXIT_OK;
  }
  else if (!force)
    return cli_usage_error (cli, "%s: give the size of the image to create "
                            "with --size SIZE (or --force to format an "
                            "existing image)", path);
  r = dev_open (name, 0, 0, devp);
  if (r < 0)
    return cli_error (cli, r == -ENOENT ? EXIT_NOT_FOUND : EXIT_FAIL, "%s",
                      cairn_errmsg ());
  r = EXIT_OK;
  if (dev_discard (*devp, 0, (*devp)->size) < 0)
    r = cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
  if (r != EXIT_OK) {
    dev_close (*devp);
    *devp = NULL;
  }
  return r;
}

/* Remove a device that mkpool created, leaving nothing half made. */
static void
mkpool_remove (const struct cli *cli, const char *path)
{
  CLEANUP_FREE char *name = NULL;

  if (!dev_is_rbd_name (path)) {
    unlink (path);
    return;
  }
  name = cli_device_name (cli, path);
  if (name && dev_rbd_remove (name) < 0)
    fprintf (stderr, "cairn: %s (remove it with `rbd rm`)\n", cairn_errmsg ());
}

/* Open or create one device for mkpool: an existing one after the checks
 * that protect what it holds, a missing one as a sparse file of size; then
 * preallocate it.  *createdp says whether it was created.
 */
static int
mkpool_open (const struct cli *cli, const char *path, bool force, uint64_t size,
             enum dev_prealloc prealloc, struct cairn_dev **devp,
             bool *createdp, struct stat *st)
{
  struct progress progress;
  int r;

  *createdp = false;
  memset (st, 0, sizeof *st);
  if (dev_is_rbd_name (path))
    return mkpool_open_rbd (cli, path, force, size, prealloc, devp, createdp);
  if (stat (path, st) == 0) {
    r = open_existing (cli, path, st, force, size, devp);
    if (r != EXIT_OK)
      return r;
  }
  else if (errno != ENOENT)
    return cli_error (cli, EXIT_FAIL, "%s: %m", path);
  else if (size == 0)
    return cli_usage_error (cli, "%s does not exist: give its size with "
                            "--size SIZE", path);
  else {
    r = dev_file_open (path, DEV_CREATE, size, devp);
    if (r < 0)
      return cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
    *createdp = true;
  }
  /* Before the pool is written: full preallocation writes zeros over all. */
  progress_init (&progress, PROGRESS_AUTO, "preallocated");
  r = dev_file_preallocate (*devp, prealloc, progress_fn, &progress);
  progress_end (&progress);
  return r < 0 ? cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ()) : EXIT_OK;
}

/* mkpool of a pool of several devices (or one, with a profile): label the
 * devices, then format the pool on the logical device over them.
 */
static int
mkpool_devices (const struct cli *cli, char **paths, unsigned n, bool force,
                uint64_t size, enum dev_prealloc prealloc,
                const struct pool_format_opts *fo, enum dev_profile profile)
{
  struct dev_chunk_format_opts co = { .profile = profile };
  struct cairn_dev *members[DEV_CHUNK_MAX_MEMBERS] = { NULL }, *dev = NULL;
  bool created[DEV_CHUNK_MAX_MEMBERS] = { false };
  char uuid_str[37], size_str[UNITS_FORMAT_MAX], node_str[UNITS_FORMAT_MAX];
  struct dev_chunk_info ci;
  uint8_t uuid[16];
  struct stat st;
  int r = EXIT_OK;

  if (n > DEV_CHUNK_MAX_MEMBERS)
    return cli_usage_error (cli, "a pool has at most %u devices",
                            DEV_CHUNK_MAX_MEMBERS);
  for (unsigned i = 0; i < n && r == EXIT_OK; i++)
    r = mkpool_open (cli, paths[i], force, size, prealloc, &members[i],
                     &created[i], &st);
  if (r == EXIT_OK &&
      (dev_chunk_format (members, n, &co, NULL) < 0 ||
       dev_chunk_open (members, n, 0, &dev) < 0 ||
       pool_format (dev, fo, uuid) < 0))
    r = cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
  if (r == EXIT_OK)
    dev_chunk_info (dev, &ci);
  dev_close (dev);
  for (unsigned i = 0; i < n; i++) {
    dev_close (members[i]);
    if (r != EXIT_OK && created[i])
      mkpool_remove (cli, paths[i]);    /* leave nothing half made behind */
  }
  if (r != EXIT_OK)
    return r;
  uuid_format (uuid, uuid_str);
  printf ("created pool %s: %u device%s, profile %s, %s, node size %s\n",
          uuid_str, n, n == 1 ? "" : "s", dev_profile_name (profile),
          units_format (ci.logical_size, size_str),
          units_format (fo->node_size, node_str));
  for (unsigned i = 0; i < n; i++)
    printf ("  device %u: %s\n", i, paths[i]);
  return EXIT_OK;
}

/* The profile of --data and --metadata (one for both, for now). */
static int
mkpool_profile (const struct cli *cli, const char *data, const char *meta,
                unsigned ndevs, enum dev_profile *p)
{
  enum dev_profile d = DEV_PROFILE_SINGLE, m = DEV_PROFILE_SINGLE;

  if (data && dev_profile_parse (data, &d) < 0)
    return cli_usage_error (cli, "--data: %s", cairn_errmsg ());
  if (meta && dev_profile_parse (meta, &m) < 0)
    return cli_usage_error (cli, "--metadata: %s", cairn_errmsg ());
  if (data && meta && d != m)
    return cli_usage_error (cli, "--data %s and --metadata %s differ: this "
                            "version keeps data and metadata in one profile, "
                            "so give the same to both", data, meta);
  *p = data ? d : meta ? m : ndevs > 1 ? DEV_PROFILE_MIRROR : DEV_PROFILE_DUP;
  return 0;
}

/* cairn mkpool PATH... --size SIZE [--data PROFILE] [--metadata PROFILE]
 *              [--node-size SIZE] [--preallocate MODE] [--force]
 */
int
cmd_mkpool (const struct cli *cli, int argc, char **argv)
{
  static const struct option opts[] = {
    { "size", required_argument, NULL, 's' },
    { "node-size", required_argument, NULL, 'n' },
    { "force", no_argument, NULL, 'f' },
    { "preallocate", required_argument, NULL, 'p' },
    { "data", required_argument, NULL, 'D' },
    { "metadata", required_argument, NULL, 'M' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  const char *data_profile = NULL, *meta_profile = NULL;
  enum dev_profile profile = DEV_PROFILE_SINGLE;
  enum dev_prealloc prealloc = DEV_PREALLOC_OFF;
  const char *said;
  struct pool_format_opts fo = { .node_size = NODE_SIZE_DEFAULT,
                                 .checkpoints = true };
  struct cairn_dev *dev = NULL;
  const char *path = NULL;
  uint64_t size = 0, pool_bytes;
  bool force = false, created = false;
  uint8_t uuid[16];
  char uuid_str[37], size_str[UNITS_FORMAT_MAX], node_str[UNITS_FORMAT_MAX];
  struct stat st;
  int c, r;

  while ((c = getopt_long (argc, argv, "s:n:p:fh", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      r = parse_pool_size (cli, optarg, &size);
      if (r != 0)
        return r;
      break;
    case 'n':
      r = parse_node_size (cli, optarg, &fo.node_size);
      if (r != 0)
        return r;
      break;
    case 'f':
      force = true;
      break;
    case 'p':
      if (dev_prealloc_parse (optarg, &prealloc) < 0)
        return cli_usage_error (cli, "--preallocate '%s': say off, space or "
                                "full", optarg);
      break;
    case 'D':
      data_profile = optarg;
      break;
    case 'M':
      meta_profile = optarg;
      break;
    case 'h':
      cli_usage (cli->cmd);
      return EXIT_OK;
    default:
      return cli_try_help (cli);
    }
  }
  if (argc - optind > 1 || data_profile || meta_profile) {
    r = mkpool_profile (cli, data_profile, meta_profile,
                        (unsigned) (argc - optind), &profile);
    if (r != 0)
      return r;
    if (cli->pool && argc - optind > 0)
      return cli_usage_error (cli, "give the devices either with --pool or "
                              "as arguments, not both");
    if (argc - optind == 0)
      return cli_usage_error (cli, "missing PATH... (the pool's devices)");
    return mkpool_devices (cli, argv + optind, (unsigned) (argc - optind),
                           force, size, prealloc, &fo, profile);
  }
  r = cli_pool_path (cli, argc, argv, &path);
  if (r != 0)
    return r;

  r = mkpool_open (cli, path, force, size, prealloc, &dev, &created, &st);
  if (r == EXIT_OK && pool_format (dev, &fo, uuid) < 0)
    r = cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
  pool_bytes = dev ? dev->size / BLOCK_SIZE * BLOCK_SIZE : 0;
  dev_close (dev);
  if (r != EXIT_OK) {
    if (created)
      mkpool_remove (cli, path);    /* leave nothing half made behind */
    return r;
  }
  uuid_format (uuid, uuid_str);
  said = !created && S_ISBLK (st.st_mode) ? NULL : dev_prealloc_done (prealloc);
  printf ("created pool %s: %s, %s, node size %s%s%s\n", path, uuid_str,
          units_format (pool_bytes, size_str),
          units_format (fo.node_size, node_str), said ? ", " : "",
          said ? said : "");
  return EXIT_OK;
}

/* ---------------------------------------------------------------- fsck */

/* What fsck's callbacks need. */
struct fsck_ui {
  bool show_progress;       /* stderr is a terminal and not --quiet */
  bool progress_shown;      /* a progress line is on the terminal */
  uint64_t problems_shown;
};

/* Erase the progress line, so that other output starts on a clean line. */
static void
clear_progress (struct fsck_ui *ui)
{
  if (ui->progress_shown) {
    fprintf (stderr, "\r\033[K");
    ui->progress_shown = false;
  }
}

/* fsck callback: print a problem as soon as it is found. */
static void
fsck_on_problem (void *opaque, const char *msg)
{
  struct fsck_ui *ui = opaque;

  clear_progress (ui);
  printf ("fsck: %s\n", msg);
  fflush (stdout);
  ui->problems_shown++;
}

/* fsck callback: nodes checked so far, out of an estimate. */
static void
fsck_on_progress (void *opaque, uint64_t done, uint64_t estimate)
{
  struct fsck_ui *ui = opaque;
  uint64_t pct;

  if (!ui->show_progress)
    return;
  pct = estimate ? MIN (done * 100 / estimate, 100) : 100;
  fprintf (stderr, "\rfsck: %" PRIu64 " nodes checked (%" PRIu64 "%%)",
           done, pct);
  ui->progress_shown = true;
}

/* Print what the check covered. */
static void
fsck_summary (const struct fsck_report *rep)
{
  printf ("generation %" PRIu64 ": %" PRIu64 " %s, %" PRIu64 " %s, %"
          PRIu64 " %s\n", rep->generation,
          rep->trees, plural (rep->trees, "tree", "trees"),
          rep->nodes, plural (rep->nodes, "node", "nodes"),
          rep->items, plural (rep->items, "item", "items"));
  printf ("blocks: %" PRIu64 " reachable, %" PRIu64 " free, %" PRIu64
          " leaked", rep->blocks_reachable, rep->blocks_free,
          rep->blocks_leaked);
  if (rep->blocks_free_but_used)
    printf (", %" PRIu64 " in use but marked free", rep->blocks_free_but_used);
  printf (" (of %" PRIu64 " data blocks)\n", rep->blocks_total);
  if (rep->intentlog_records)
    printf ("intent log: %" PRIu64 " %s in %" PRIu64 " %s, replayed at the "
            "next read-write open\n", rep->intentlog_records,
            plural (rep->intentlog_records, "record", "records"),
            rep->intentlog_live_blocks,
            plural (rep->intentlog_live_blocks, "block", "blocks"));
  if (rep->scrub.ranges)
    printf ("scrub: %" PRIu64 " superblocks, nodes and data blocks read in "
            "every copy, %" PRIu64 " damaged %s, %" PRIu64 " repaired, %"
            PRIu64 " with no good copy\n", rep->scrub.ranges,
            rep->scrub.bad_copies,
            plural (rep->scrub.bad_copies, "copy", "copies"),
            rep->scrub.repaired, rep->scrub.lost);
}

/* cairn fsck PATH [--quiet] [--scrub] */
int
cmd_fsck (const struct cli *cli, int argc, char **argv)
{
  static const struct option opts[] = {
    { "quiet", no_argument, NULL, 'q' },
    { "scrub", no_argument, NULL, 's' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct fsck_ui ui = { 0 };
  struct fsck_opts fo = {
    .problem = fsck_on_problem,
    .progress = fsck_on_progress,
    .opaque = &ui,
  };
  struct fsck_report rep;
  struct cairn_dev *dev;
  const char *path = NULL;
  bool quiet = false;
  int c, r;

  while ((c = getopt_long (argc, argv, "qsh", opts, NULL)) != -1) {
    switch (c) {
    case 'q':
      quiet = true;
      break;
    case 's':
      fo.scrub = true;
      break;
    case 'h':
      cli_usage (cli->cmd);
      return EXIT_OK;
    default:
      return cli_try_help (cli);
    }
  }
  r = cli_pool_path (cli, argc, argv, &path);
  if (r != 0)
    return r;
  ui.show_progress = !quiet && isatty (STDERR_FILENO);

  /* Scrubbing rewrites damaged copies: the devices are opened writable
   * (and locked against a server, as for any change).
   */
  r = cli_open_devices (cli, path, fo.scrub ? 0 : DEV_CHUNK_RDONLY, &dev);
  if (r != EXIT_OK)
    return r;
  r = fsck_pool (dev, &fo, &rep);
  dev_close (dev);
  clear_progress (&ui);
  if (r < 0)
    return cli_error (cli, EXIT_FAIL, "%s: the check could not run: %s",
                      path, cairn_errmsg ());

  /* A pool that did not open has no generation to summarise. */
  if (!quiet && rep.generation > 0)
    fsck_summary (&rep);
  if (rep.errors == 0) {
    if (!quiet)
      printf ("%s: clean\n", path);
    return EXIT_OK;
  }
  if (!quiet) {
    printf ("%s: %" PRIu64 " %s found", path, rep.errors,
            plural (rep.errors, "problem", "problems"));
    if (rep.errors > ui.problems_shown)
      printf (" (%" PRIu64 " not shown)", rep.errors - ui.problems_shown);
    printf ("\n");
  }
  return EXIT_FAIL;
}

/* ---------------------------------------------------------------- info */

/* Print one "label  SIZE (N blocks)" line. */
static void
info_blocks_line (const char *label, uint64_t blocks)
{
  char s[UNITS_FORMAT_MAX];

  printf ("%-11s %s (%" PRIu64 " %s)\n", label,
          units_format (blocks * BLOCK_SIZE, s), blocks,
          plural (blocks, "block", "blocks"));
}

/* Print the pool's description as text. */
static void
info_text (const char *path, const struct pool_info *info, const char *uuid)
{
  char s[UNITS_FORMAT_MAX];

  printf ("%-11s %s\n", "pool", path);
  printf ("%-11s %s\n", "uuid", uuid);
  printf ("%-11s %" PRIu64 "\n", "generation", info->generation);
  printf ("%-11s %s\n", "node size", units_format (info->node_size, s));
  info_blocks_line ("size", info->total_blocks);
  info_blocks_line ("used", info->space.allocated);
  info_blocks_line ("free", info->space.free);
  printf ("%-11s %" PRIu64 "\n", "free runs", info->space.extents);
  info_blocks_line ("high water", info->space.touched);
  info_blocks_line ("reserve", info->space.reserve);
}

/* Print the pool's description as one JSON object. */
static int
info_json (const struct cli *cli, const char *path,
           const struct pool_info *info, const char *uuid)
{
  const struct space_stats *sp = &info->space;
  json_t *obj;
  int r;

  obj = json_pack ("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
                   "s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                   "path", path,
                   "uuid", uuid,
                   "generation", (json_int_t) info->generation,
                   "node_size", (json_int_t) info->node_size,
                   "block_size", (json_int_t) BLOCK_SIZE,
                   "size", (json_int_t) (info->total_blocks * BLOCK_SIZE),
                   "used", (json_int_t) (sp->allocated * BLOCK_SIZE),
                   "free", (json_int_t) (sp->free * BLOCK_SIZE),
                   "reserve", (json_int_t) (sp->reserve * BLOCK_SIZE),
                   "total_blocks", (json_int_t) info->total_blocks,
                   "data_blocks", (json_int_t) sp->total,
                   "used_blocks", (json_int_t) sp->allocated,
                   "free_blocks", (json_int_t) sp->free,
                   "reserve_blocks", (json_int_t) sp->reserve,
                   "free_runs", (json_int_t) sp->extents,
                   "high_water", (json_int_t) (sp->touched * BLOCK_SIZE),
                   "high_water_blocks", (json_int_t) sp->touched);
  if (obj == NULL)
    return cli_error (cli, EXIT_FAIL, "out of memory building the JSON "
                      "output");
  r = json_dumpf (obj, stdout, JSON_INDENT (2));
  json_decref (obj);
  if (r == -1)
    return cli_error (cli, EXIT_FAIL, "writing the JSON output failed");
  printf ("\n");
  return EXIT_OK;
}

/* cairn info PATH [--json] */
int
cmd_info (const struct cli *cli, int argc, char **argv)
{
  static const struct option opts[] = {
    { "json", no_argument, NULL, 'j' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct pool_open_opts oo = { .readonly = true,
                               .cache_bytes = INFO_CACHE_BYTES };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct pool_info info;
  const char *path = NULL;
  bool json = false;
  char uuid[37];
  int c, r;

  while ((c = getopt_long (argc, argv, "jh", opts, NULL)) != -1) {
    switch (c) {
    case 'j':
      json = true;
      break;
    case 'h':
      cli_usage (cli->cmd);
      return EXIT_OK;
    default:
      return cli_try_help (cli);
    }
  }
  r = cli_pool_path (cli, argc, argv, &path);
  if (r != 0)
    return r;

  r = cli_open_devices (cli, path, DEV_CHUNK_RDONLY, &dev);
  if (r != EXIT_OK)
    return r;
  if (pool_open (dev, &oo, &pool) < 0) {
    r = cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
    dev_close (dev);
    return r;
  }
  pool_info (pool, &info);
  r = pool_close (pool);
  dev_close (dev);
  if (r < 0)
    return cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());

  uuid_format (info.uuid, uuid);
  if (json)
    return info_json (cli, path, &info, uuid);
  info_text (path, &info, uuid);
  return EXIT_OK;
}
