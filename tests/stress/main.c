/* Cairn stress tool, the command (tests/stress/README.md):
 *
 *   cairn-stress run DIR [OPTIONS]     one child: random operations for
 *                                      --seconds, every read checked, then
 *                                      everything read and compared
 *   cairn-stress loop DIR [OPTIONS]    zloop: children killed at random,
 *                                      the pool checked and compared after
 *                                      each, for --seconds in all
 *   cairn-stress check FAILDIR         the check of a kept failure again
 *
 * Options: --seed N, --seconds S (CAIRN_STRESS_SECONDS, else 110; 27.5 in
 * a sanitizer build), --share F (run for F, 0 < F <= 1, of those seconds:
 * make check splits its time between two loops),
 * --threads N (4), --single (one device, no faults; default: a mirror of
 * two, faults on one), --intent-log (the child's flushes and FUA writes
 * go through the pool's intent log; the check replays it), --kill-odds N
 * (a child's flush kills it part-way once in N; loop: 500, run: 0),
 * --verbose.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stress.h"
#include "../unit/test-util.h"

#define MEMBER_SIZE (256ull * 1024 * 1024)

/* The file of member i. */
static void
member_path (const struct stress_opts *o, unsigned i, char *buf, size_t len)
{
  snprintf (buf, len, "%s/pool-%u.img", o->dir, i);
}

/* The pool's devices: DEVS_CHILD, for a child (each file under a cache
 * device a kill empties, then under a fault device); DEVS_RDONLY, read
 * only, for fsck and a check without the intent log; DEVS_OVERLAY, each
 * file read-only under an overlay (cache-dev.c, C5), for a check that
 * opens the pool read-write so that it replays its intent log.
 */
int
stress_devs_open (const struct stress_opts *o, enum stress_devs_mode mode,
                  uint64_t seed, struct stress_devs *d)
{
  const char *paths[2];
  char p[2][4096];
  int r = 0;

  memset (d, 0, sizeof *d);
  d->n = o->mirror ? 2 : 1;
  for (unsigned i = 0; i < d->n; i++) {
    member_path (o, i, p[i], sizeof p[i]);
    paths[i] = p[i];
  }
  if (mode == DEVS_RDONLY)
    return dev_pool_open (paths, d->n, DEV_CHUNK_RDONLY, &d->top);
  for (unsigned i = 0; i < d->n; i++) {
    if (mode == DEVS_OVERLAY) {
      r = dev_file_open (paths[i], DEV_RDONLY, 0, &d->file[i]);
      if (r == 0)
        r = cache_dev_overlay (d->file[i], &d->cache[i]);
    }
    else {
      r = dev_file_open (paths[i], 0, 0, &d->file[i]);
      if (r == 0)
        r = cache_dev_create (d->file[i], seed + i, o->kill_odds, 8,
                              &d->cache[i]);
    }
    if (r < 0)
      return r;
  }
  if (!o->mirror) {
    d->top = d->cache[0];
    return 0;
  }
  if (mode == DEVS_OVERLAY)
    return dev_chunk_open (d->cache, 2, 0, &d->top);
  for (unsigned i = 0; i < 2 && r == 0; i++)
    r = dev_fault_create (d->cache[i], &d->fault[i]);
  if (r == 0)
    r = dev_chunk_open (d->fault, 2, 0, &d->top);
  if (r == 0)
    r = dev_chunk_locate (d->top, POOL_DATA_START, 0, &d->faulty_member,
                          &(uint64_t) { 0 }, &(uint64_t) { 0 });
  /* Members are numbered by their labels, not by the order given. */
  if (r == 0) {
    struct dev_member_info mi;

    dev_chunk_member (d->top, d->faulty_member, &mi);
    d->faulty = strcmp (mi.name, d->fault[0]->name) == 0 ? 0 : 1;
  }
  return r;
}

/* Close what stress_devs_open opened. */
void
stress_devs_close (struct stress_devs *d)
{
  if (d->top != NULL && d->top != d->cache[0])
    dev_close (d->top);
  for (unsigned i = 0; i < 2; i++) {
    if (d->fault[i] != NULL)
      dev_close (d->fault[i]);
    if (d->cache[i] != NULL)
      dev_close (d->cache[i]);
    if (d->file[i] != NULL)
      dev_close (d->file[i]);
  }
  memset (d, 0, sizeof *d);
}

/* A new pool in o->dir (whose files must not exist). */
int
stress_format (const struct stress_opts *o)
{
  struct cairn_dev *m[2] = { NULL, NULL }, *top = NULL;
  struct cairn_pool *pool = NULL;
  unsigned n = o->mirror ? 2 : 1;
  char p[4096];
  int r = 0;

  for (unsigned i = 0; i < n && r == 0; i++) {
    member_path (o, i, p, sizeof p);
    r = dev_file_open (p, DEV_CREATE, MEMBER_SIZE, &m[i]);
  }
  if (r == 0 && o->mirror) {
    r = dev_chunk_format (m, 2, &(struct dev_chunk_format_opts) {
                            .profile = DEV_PROFILE_MIRROR }, NULL);
    if (r == 0)
      r = dev_chunk_open (m, 2, 0, &top);
  }
  else if (r == 0)
    top = m[0];
  if (r == 0)
    r = pool_format (top, &(struct pool_format_opts) { .checkpoints = true },
                     NULL);
  if (r == 0)
    r = pool_open (top, &(struct pool_open_opts) { 0 }, &pool);
  /* Checkpoints come and go within a child's life. */
  if (r == 0)
    r = vol_checkpoint_set (pool, NULL, "keep-within", "5s");
  if (r == 0)
    r = vol_checkpoint_set (pool, NULL, "keep-last", "3");
  if (pool != NULL && pool_close (pool) < 0 && r == 0)
    r = -EIO;
  if (top != NULL && top != m[0])
    dev_close (top);
  for (unsigned i = 0; i < n; i++)
    if (m[i] != NULL)
      dev_close (m[i]);
  return r;
}

/* Seconds on the monotonic clock. */
static double
now_s (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* Print an fsck problem. */
static void
note_problem (void *opaque, const char *msg)
{
  FILE *out = opaque;

  fprintf (out, "stress: fsck: %s\n", msg);
}

/* fsck the pool on dev: 0 when it finds nothing, else -1 with the
 * problems printed, what naming the pool's state.
 */
static int
fsck_dev (struct cairn_dev *dev, const char *what, struct fsck_report *rep)
{
  int r = fsck_pool (dev, &(struct fsck_opts) { .problem = note_problem,
                                                .opaque = stderr }, rep);

  if (r < 0 || rep->errors > 0) {
    fprintf (stderr, "stress: FAILED: fsck%s: %s, %" PRIu64 " problems\n",
             what, r < 0 ? cairn_errmsg () : "ran", rep->errors);
    return -1;
  }
  return 0;
}

/* Reopen what a killed child left: fsck, then the journal against the
 * model it started from (verify.c), then the model of what is there now.
 * With the intent log, a read-only open would not replay it (txn-log.c,
 * IL-6) and so would miss every write that only the log holds: the pool
 * is opened read-write on overlays instead (cache-dev.c, C5), which
 * replays the log and commits into memory, leaving the files as the child
 * left them (a kept failure replays the same log again, and so does the
 * next child); after the check, fsck runs again on the replayed pool.
 * *live_recs gets the records the log held (fsck's count, before replay).
 * 0, or -1 with the reasons printed.
 */
static int
check_pool (const struct stress_opts *o, struct model *base,
            const char *journal, bool reload, uint64_t *live_recs)
{
  struct stress_devs d;
  struct fsck_report rep;
  struct cairn_pool *pool;
  int r;

  if (stress_devs_open (o, DEVS_RDONLY, 0, &d) < 0) {
    fprintf (stderr, "stress: open the devices: %s\n", cairn_errmsg ());
    return -1;
  }
  r = fsck_dev (d.top, "", &rep);
  if (r < 0 || o->intent_log)
    stress_devs_close (&d);
  if (r < 0)
    return -1;
  *live_recs = rep.intentlog_records;
  if (o->intent_log && stress_devs_open (o, DEVS_OVERLAY, 0, &d) < 0) {
    fprintf (stderr, "stress: open the devices: %s\n", cairn_errmsg ());
    return -1;
  }
  r = pool_open (d.top, &(struct pool_open_opts) {
                   .readonly = !o->intent_log }, &pool);
  if (r < 0) {
    fprintf (stderr, "stress: open the pool: %s\n", cairn_errmsg ());
    stress_devs_close (&d);
    return -1;
  }
  r = model_verify (base, journal, pool, stderr);
  if (r == 0 && reload && model_load (base, pool) < 0)
    r = -1;
  if (pool_close (pool) < 0 && o->intent_log) {
    fprintf (stderr, "stress: close the replayed pool: %s\n",
             cairn_errmsg ());
    r = -1;
  }
  if (r == 0 && o->intent_log && fsck_dev (d.top, " after replay", &rep) < 0)
    r = -1;
  stress_devs_close (&d);
  return r;
}

/* fsck the pool (after a run): 0 when it finds nothing. */
static int
fsck_only (const struct stress_opts *o)
{
  struct stress_devs d;
  struct fsck_report rep;
  int r;

  if (stress_devs_open (o, DEVS_RDONLY, 0, &d) < 0) {
    fprintf (stderr, "stress: open the devices: %s\n", cairn_errmsg ());
    return 1;
  }
  r = fsck_dev (d.top, "", &rep);
  stress_devs_close (&d);
  if (r < 0)
    return 1;
  printf ("stress: fsck: clean, generation %" PRIu64 "\n", rep.generation);
  return 0;
}

/* Operations per kind that a journal records (begin records). */
static void
journal_count (const char *path, uint64_t count[128])
{
  FILE *f = fopen (path, "r");
  char line[1024];

  if (f == NULL)
    return;
  while (fgets (line, sizeof line, f) != NULL) {
    char *p = strchr (line + 2, ' ');

    if (line[0] == 'B' && p != NULL && (unsigned char) p[1] < 128)
      count[(unsigned char) p[1]]++;
  }
  fclose (f);
}

/* Keep a failure: the pool's files, the journal, the model it started
 * from and the child's output, in DIR/failure-SEED.
 */
static void
keep_failure (const struct stress_opts *o, const struct model *base,
              uint64_t seed, unsigned iter)
{
  char fdir[4096], cmd[3 * 4096];

  snprintf (fdir, sizeof fdir, "%s/failure-%" PRIu64, o->dir, seed);
  mkdir (fdir, 0755);
  snprintf (cmd, sizeof cmd, "cp --sparse=always %s/pool-*.img %s/journal "
            "%s/child.log %s/", o->dir, o->dir, o->dir, fdir);
  if (system (cmd) != 0)
    fprintf (stderr, "stress: could not copy the pool to %s\n", fdir);
  snprintf (cmd, sizeof cmd, "%s/base.model", fdir);
  model_save (base, cmd);
  snprintf (cmd, sizeof cmd, "%s/options", fdir);
  {
    FILE *f = fopen (cmd, "w");

    if (f != NULL) {
      fprintf (f, "%s%s\n", o->mirror ? "mirror" : "single",
               o->intent_log ? " intent-log" : "");
      fclose (f);
    }
  }
  snprintf (cmd, sizeof cmd, "%s%s", o->mirror ? "" : " --single",
            o->intent_log ? " --intent-log" : "");
  fprintf (stderr, "stress: FAILED in iteration %u, child seed %" PRIu64
           " (loop seed %" PRIu64 ")\n"
           "stress: kept in %s (pool, journal, base.model, child.log)\n"
           "stress: check it again: cairn-stress check %s\n"
           "stress: run that child again: cairn-stress run DIR --seed %"
           PRIu64 "%s; the loop: cairn-stress loop DIR --seed %" PRIu64
           "%s\n", iter, seed, o->seed, fdir, fdir, seed, cmd, o->seed, cmd);
}

static const char stat_kinds[] = "WrZTFSXCNDRQLdskf";
static const char *const stat_names[] = {
  "write", "read", "zero", "trim", "flush", "snapshot", "snapdelete",
  "clone", "create", "delete", "rename", "resize", "rollback", "diff",
  "send", "collect", "fault",
};

/* zloop: children killed at random, the pool checked after each. */
static int
cmd_loop (struct stress_opts *o)
{
  struct model *base = malloc (sizeof *base);
  struct rng rs = { o->seed };
  uint64_t count[128] = { 0 };
  unsigned iter = 0, killed = 0, self_killed = 0, finished = 0;
  uint64_t live = 0, live_sum = 0, live_reopens = 0;
  char journal[4096], log[4096];
  double start = now_s ();
  int rc = 0;

  model_init (base);
  snprintf (journal, sizeof journal, "%s/journal", o->dir);
  snprintf (log, sizeof log, "%s/child.log", o->dir);
  printf ("stress: loop seed %" PRIu64 ", %.0f s, %u threads, %s pool%s in "
          "%s\n", o->seed, o->seconds, o->threads,
          o->mirror ? "mirrored" : "single",
          o->intent_log ? " with the intent log" : "", o->dir);
  fflush (stdout);
  if (stress_format (o) < 0) {
    fprintf (stderr, "stress: format: %s\n", cairn_errmsg ());
    return 2;
  }
  while (now_s () - start < o->seconds) {
    struct stress_opts co = *o;
    double left = o->seconds - (now_s () - start);
    double life = 0.3 + (double) (rng_next (&rs) % 4000) / 1000.0;
    double born;
    bool sent = false, died;
    int status;
    pid_t pid;

    co.seed = rng_next (&rs);
    co.seconds = 3600;
    life = MIN (life, MAX (left, 0.1));
    iter++;
    /* The child truncates the journal when it starts; one killed before
     * that (a slow machine, a short life) would leave the previous
     * child's journal, which the check would apply a second time to the
     * model that already holds it.  So the journal starts empty here.
     */
    {
      int fd = open (journal, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

      if (fd < 0) {
        fprintf (stderr, "stress: %s: %s\n", journal, strerror (errno));
        rc = 2;
        break;
      }
      close (fd);
    }
    fflush (NULL);
    pid = fork ();
    if (pid == 0) {
      FILE *f = freopen (log, "w", stderr);

      /* A loop that dies takes its child with it. */
      prctl (PR_SET_PDEATHSIG, SIGKILL);
      if (getppid () == 1)
        _exit (2);
      if (f == NULL || dup2 (fileno (stderr), 1) < 0)
        _exit (2);
      _exit (stress_child (&co));
    }
    born = now_s ();
    /* The kill lands at a random moment of the child's life: this wait is
     * the randomness itself, not a wait for a condition.
     */
    while (waitpid (pid, &status, WNOHANG) == 0) {
      struct timespec ts = { 0, 5 * 1000 * 1000 };

      if (!sent && now_s () - born >= life) {
        kill (pid, SIGKILL);
        sent = true;
      }
      nanosleep (&ts, NULL);
    }
    died = WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL;
    if (died)
      sent ? killed++ : self_killed++;
    else if (WIFEXITED (status) && WEXITSTATUS (status) == 0)
      finished++;
    else {
      fprintf (stderr, "stress: the child failed (%s %d); its output:\n",
               WIFEXITED (status) ? "exit" : "signal",
               WIFEXITED (status) ? WEXITSTATUS (status) : WTERMSIG (status));
      {
        char cmd[4200];

        snprintf (cmd, sizeof cmd, "cat '%s' >&2", log);
        if (system (cmd) != 0)
          fprintf (stderr, "stress: (no output)\n");
      }
      keep_failure (o, base, co.seed, iter);
      rc = 1;
      break;
    }
    journal_count (journal, count);
    /* check_pool leaves base as it was when the check fails. */
    if (check_pool (o, base, journal, true, &live) < 0) {
      keep_failure (o, base, co.seed, iter);
      rc = 1;
      break;
    }
    live_sum += live;
    live_reopens += live > 0;
    if (o->verbose)
      printf ("stress: iteration %u, child seed %" PRIu64 ": %s after %.2f s,"
              " %" PRIu64 " log records, pool checked\n", iter, co.seed,
              !died ? "ended" : sent ? "killed" : "killed in a flush",
              now_s () - born, live);
  }
  printf ("stress: %u children: %u killed by the loop, %u killed in a flush "
          "by their device, %u ran out their time; %u reopens with fsck and "
          "the model check\nstress: operations:", iter, killed, self_killed,
          finished, rc == 0 ? iter : iter - 1);
  for (size_t k = 0; k < sizeof stat_kinds - 1; k++)
    printf (" %s %" PRIu64, stat_names[k],
            count[(unsigned char) stat_kinds[k]]);
  if (o->intent_log)
    printf ("\nstress: intent log: %" PRIu64 " reopens found live records, %"
            PRIu64 " records in all", live_reopens, live_sum);
  printf ("\nstress: %s after %.0f s (loop seed %" PRIu64 ")\n",
          rc == 0 ? "no failure" : "FAILED", now_s () - start, o->seed);
  model_clear (base);
  free (base);
  return rc;
}

/* The check of a kept failure, again. */
static int
cmd_check (struct stress_opts *o)
{
  struct model *base = malloc (sizeof *base);
  char path[4096], mode[16] = "", log[16] = "";
  FILE *f;
  int r;

  snprintf (path, sizeof path, "%s/options", o->dir);
  f = fopen (path, "r");
  if (f != NULL) {
    if (fscanf (f, "%15s %15s", mode, log) < 1)
      mode[0] = '\0';
    fclose (f);
  }
  o->mirror = strcmp (mode, "single") != 0;
  o->intent_log = strcmp (log, "intent-log") == 0;
  model_init (base);
  snprintf (path, sizeof path, "%s/base.model", o->dir);
  if (model_read (base, path) < 0) {
    fprintf (stderr, "stress: %s: cannot read it\n", path);
    return 2;
  }
  snprintf (path, sizeof path, "%s/journal", o->dir);
  r = check_pool (o, base, path, false, &(uint64_t) { 0 });
  printf ("stress: %s: %s\n", o->dir, r == 0 ? "the pool holds what it must"
                                              : "FAILED");
  model_clear (base);
  free (base);
  return r == 0 ? 0 : 1;
}

/* Say how to call the command, and exit. */
static void
usage (void)
{
  fprintf (stderr, "usage: cairn-stress run|loop DIR [--seed N] "
           "[--seconds S] [--share F] [--threads N] [--single]\n"
           "       [--intent-log] [--kill-odds N] [--verbose]\n       cairn-stress check FAILDIR\n");
  exit (2);
}

/* Parse the command line and run the command. */
int
main (int argc, char **argv)
{
  struct stress_opts o = { .threads = 4, .mirror = true };
  const char *env = getenv ("CAIRN_STRESS_SECONDS");
  bool loop, kill_set = false, seed_set = false;
  double share = 1;
  char *end;

  if (argc < 3)
    usage ();
  loop = strcmp (argv[1], "loop") == 0;
  if (!loop && strcmp (argv[1], "run") != 0 && strcmp (argv[1], "check") != 0)
    usage ();
  o.dir = argv[2];
  o.seconds = env != NULL ? strtod (env, NULL) : 110 * CAIRN_TEST_SCALE_DEFAULT;
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

    if (strcmp (a, "--single") == 0)
      o.mirror = false;
    else if (strcmp (a, "--intent-log") == 0)
      o.intent_log = true;
    else if (strcmp (a, "--verbose") == 0)
      o.verbose = true;
    else if (v == NULL)
      usage ();
    else if (strcmp (a, "--seed") == 0) {
      o.seed = strtoull (v, &end, 0);
      seed_set = *end == '\0';
      if (!seed_set)
        usage ();
      i++;
    }
    else if (strcmp (a, "--seconds") == 0) {
      o.seconds = strtod (v, &end);
      if (*end != '\0' || o.seconds <= 0)
        usage ();
      i++;
    }
    else if (strcmp (a, "--share") == 0) {
      share = strtod (v, &end);
      if (*end != '\0' || !(share > 0 && share <= 1))
        usage ();
      i++;
    }
    else if (strcmp (a, "--threads") == 0) {
      o.threads = (unsigned) strtoul (v, &end, 0);
      if (*end != '\0' || o.threads == 0 || o.threads > 64)
        usage ();
      i++;
    }
    else if (strcmp (a, "--kill-odds") == 0) {
      o.kill_odds = (unsigned) strtoul (v, &end, 0);
      if (*end != '\0')
        usage ();
      kill_set = true;
      i++;
    }
    else
      usage ();
  }
  if (strcmp (argv[1], "check") == 0)
    return cmd_check (&o);
  o.seconds *= share;
  if (!seed_set) {
    struct timespec ts;

    clock_gettime (CLOCK_REALTIME, &ts);
    o.seed = (uint64_t) ts.tv_nsec ^ ((uint64_t) ts.tv_sec << 20) ^
             (uint64_t) getpid ();
  }
  if (!kill_set)
    o.kill_odds = loop ? 500 : 0;
  if (mkdir (o.dir, 0755) < 0 && errno != EEXIST) {
    perror (o.dir);
    return 2;
  }
  if (loop)
    return cmd_loop (&o);
  {
    char p[4096];

    member_path (&o, 0, p, sizeof p);
    if (access (p, F_OK) != 0 && stress_format (&o) < 0) {
      fprintf (stderr, "stress: format: %s\n", cairn_errmsg ());
      return 2;
    }
  }
  printf ("stress: run seed %" PRIu64 "\n", o.seed);
  fflush (stdout);
  if (stress_child (&o) != 0)
    return 1;
  return fsck_only (&o);
}
