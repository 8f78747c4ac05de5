/* cairn: `send` and `receive`, which move snapshots between pools as send
 * streams (cairn-stream(5)).
 *
 * Both open the pool of --pool in this process and call the replication
 * module (server/replicate.h) directly: `send` writes the stream to
 * standard output, `receive` reads it from standard input, so that
 *
 *   cairn --pool A send v@s1 | cairn --pool B receive v
 *
 * copies a snapshot, and a file or ssh can sit in the middle.  Going
 * through a running server (the control socket's stream mode, DESIGN §4)
 * is not there yet, so without --pool both refuse.  Progress goes to
 * standard error when it is a terminal.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "replicate.h"
#include "units.h"

#define READ_SIZE (1024 * 1024)

/* Refuse to run without --pool (for now). */
static int
need_pool (const struct cli *cli)
{
  return cli_usage_error (cli, "give the pool with --pool PATH: '%s' works "
                          "in-process on a stopped pool (streaming through a "
                          "running server is not implemented yet)",
                          cli->cmd->name);
}

/* ---------------------------------------------------------------- progress */

/* A progress line on standard error, redrawn at most 4 times a second. */
struct progress {
  const char *verb;             /* "sent", "received" */
  struct timespec last;
  bool shown;
};

static void
progress_show (void *opaque, uint64_t done, uint64_t total)
{
  struct progress *p = opaque;
  char d[UNITS_FORMAT_MAX], t[UNITS_FORMAT_MAX];
  struct timespec now;

  clock_gettime (CLOCK_MONOTONIC, &now);
  if (p->shown && (now.tv_sec - p->last.tv_sec) * 1000000000L +
      (now.tv_nsec - p->last.tv_nsec) < 250000000L && done != total)
    return;
  p->last = now;
  p->shown = true;
  if (total)
    fprintf (stderr, "\r%s %s of %s (%" PRIu64 "%%)   ", p->verb,
             units_format (done, d), units_format (total, t),
             done * 100 / total);
  else
    fprintf (stderr, "\r%s %s   ", p->verb, units_format (done, d));
}

/* End the progress line, if one was shown. */
static void
progress_end (struct progress *p)
{
  if (p->shown)
    fprintf (stderr, "\n");
}

/* ---------------------------------------------------------------- send */

/* The sink of `cairn send`: standard output, all of it. */
static int
write_stdout (void *opaque, const void *buf, size_t len)
{
  const char *p = buf;

  (void) opaque;
  while (len > 0) {
    ssize_t n = write (STDOUT_FILENO, p, len);

    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return cairn_fail (-errno, "writing the stream: %m");
    p += n;
    len -= (size_t) n;
  }
  return 0;
}

/* The sink of a dry run: count nothing (the encoder counts). */
static int
discard (void *opaque, const void *buf, size_t len)
{
  (void) opaque;
  (void) buf;
  (void) len;
  return 0;
}

/* cairn send VOL@SNAP [--from SNAP] [--resume TOKEN] [--dry-run] */
int
cmd_send (const struct cli *cli, int argc, char **argv)
{
  static const struct option opts[] = {
    { "from", required_argument, NULL, 'f' },
    { "resume", required_argument, NULL, 'r' },
    { "dry-run", no_argument, NULL, 'n' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct repl_send_opts so = { .sink = write_stdout };
  struct progress prog = { .verb = "sent" };
  struct repl_send_result res;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  int c, r;

  while ((c = getopt_long (argc, argv, "f:r:nh", opts, NULL)) != -1) {
    switch (c) {
    case 'f': so.from = optarg; break;
    case 'r': so.resume = optarg; break;
    case 'n': so.dry_run = true; break;
    case 'h':
      cli_usage (cli->cmd);
      return EXIT_OK;
    default:
      return cli_try_help (cli);
    }
  }
  if (argc - optind < 1)
    return cli_usage_error (cli, "missing VOL@SNAP, the snapshot to send");
  if (argc - optind > 1)
    return cli_usage_error (cli, "unexpected argument '%s'", argv[optind + 1]);
  if (cli->pool == NULL)
    return need_pool (cli);
  if (so.dry_run)
    so.sink = discard;
  else if (isatty (STDOUT_FILENO))
    return cli_usage_error (cli, "refusing to write a stream to a terminal: "
                            "redirect it to a file or a pipe (cairn send ... "
                            "> FILE, or | cairn receive VOL)");
  if (isatty (STDERR_FILENO) && !so.dry_run) {
    so.progress = progress_show;
    so.progress_opaque = &prog;
  }
  r = cli_open_pool (cli, false, &dev, &pool);
  if (r != EXIT_OK)
    return r;
  r = repl_send (pool, argv[optind], &so, &res);
  progress_end (&prog);
  if (r < 0)
    r = cli_error (cli, r == -ENOENT ? EXIT_NOT_FOUND : EXIT_FAIL, "%s",
                   cairn_errmsg ());
  else if (so.dry_run) {
    char s[UNITS_FORMAT_MAX], d[UNITS_FORMAT_MAX];

    printf ("%s stream of %s: %s (%" PRIu64 " bytes), carrying %s of data\n",
            so.from ? "an incremental" : "a full", argv[optind],
            units_format (res.stream_bytes, s), res.stream_bytes,
            units_format (res.data_bytes, d));
    r = EXIT_OK;
  }
  else
    r = EXIT_OK;
  (void) pool_close (pool);     /* read-only: nothing to commit */
  dev_close (dev);
  return r;
}

/* ---------------------------------------------------------------- receive */

/* Say how to go on after a receive that kept its progress. */
static void
explain_kept (const struct cli *cli, const char *target,
              const struct repl_recv_result *res)
{
  fprintf (stderr, "cairn %s: the receive into '%s' kept its progress: have "
           "the sender resume it with\n"
           "  cairn send --resume TOKEN%s %s | cairn receive %s\n"
           "or discard it with 'cairn receive --abort %s'.  Its token:\n",
           cli->cmd->name, target, res->incremental ? " --from BASE" : "",
           res->name[strlen (res->name) - 1] == '@' ? "VOL@SNAP" : res->name,
           target, target);
  fprintf (stderr, "%s\n", res->token);
}

/* Read the stream from standard input into a receive. */
static int
receive_stdin (const struct cli *cli, struct cairn_pool *pool,
               const char *target, struct repl_recv_result *res)
{
  static uint8_t buf[READ_SIZE];
  struct progress prog = { .verb = "received" };
  struct repl_recv_opts ro = { 0 };
  struct repl_recv *rr;
  uint64_t trailing = 0;
  int r = 0;

  if (isatty (STDERR_FILENO)) {
    ro.progress = progress_show;
    ro.progress_opaque = &prog;
  }
  r = repl_recv_new (pool, target, &ro, &rr);
  if (r < 0)
    return r;
  while (r == 0) {
    ssize_t n = read (STDIN_FILENO, buf, sizeof buf);
    size_t used;

    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      fprintf (stderr, "cairn %s: reading the stream: %m\n", cli->cmd->name);
      break;
    }
    if (n == 0)
      break;
    r = repl_recv_feed (rr, buf, (size_t) n, &used);
    if (r == 1)
      trailing += (uint64_t) n - used;
  }
  /* After the END, whatever follows is not part of the stream. */
  while (r == 1) {
    ssize_t n = read (STDIN_FILENO, buf, sizeof buf);

    if (n <= 0 && !(n < 0 && errno == EINTR))
      break;
    trailing += n > 0 ? (uint64_t) n : 0;
  }
  progress_end (&prog);
  r = repl_recv_finish (rr, res);
  repl_recv_free (rr);
  if (r == 0 && trailing)
    fprintf (stderr, "cairn %s: warning: %" PRIu64 " bytes after the end of "
             "the stream were ignored\n", cli->cmd->name, trailing);
  return r;
}

/* cairn receive VOL [--abort | --token] */
int
cmd_receive (const struct cli *cli, int argc, char **argv)
{
  static const struct option opts[] = {
    { "abort", no_argument, NULL, 'a' },
    { "token", no_argument, NULL, 't' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct repl_recv_result res = { .kept = false };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  const char *target;
  bool abort_it = false, token = false;
  char tok[STREAM_TOKEN_MAX];
  int c, r;

  while ((c = getopt_long (argc, argv, "ath", opts, NULL)) != -1) {
    switch (c) {
    case 'a': abort_it = true; break;
    case 't': token = true; break;
    case 'h':
      cli_usage (cli->cmd);
      return EXIT_OK;
    default:
      return cli_try_help (cli);
    }
  }
  if (argc - optind < 1)
    return cli_usage_error (cli, "missing VOL, the volume to receive into");
  if (argc - optind > 1)
    return cli_usage_error (cli, "unexpected argument '%s'", argv[optind + 1]);
  if (abort_it && token)
    return cli_usage_error (cli, "--abort and --token exclude each other");
  if (cli->pool == NULL)
    return need_pool (cli);
  target = argv[optind];
  if (!abort_it && !token && isatty (STDIN_FILENO))
    return cli_usage_error (cli, "refusing to read a stream from a terminal: "
                            "cairn receive %s < FILE, or cairn send ... | "
                            "cairn receive %s", target, target);
  r = cli_open_pool (cli, !token, &dev, &pool);
  if (r != EXIT_OK)
    return r;
  if (abort_it)
    r = repl_recv_abort (pool, target);
  else if (token)
    r = repl_recv_token (pool, target, tok);
  else
    r = receive_stdin (cli, pool, target, &res);
  if (r < 0) {
    r = cli_error (cli, r == -ENOENT ? EXIT_NOT_FOUND : EXIT_FAIL, "%s",
                   cairn_errmsg ());
    if (res.kept)
      explain_kept (cli, target, &res);
  }
  else if (abort_it)
    printf ("discarded the interrupted receive into %s\n", target);
  else if (token)
    printf ("%s\n", tok);
  else {
    char d[UNITS_FORMAT_MAX];

    printf ("received %s (%s%s stream, %s of data)\n", res.name,
            res.incremental ? "incremental" : "full",
            res.resumed ? ", resumed" : "", units_format (res.data_bytes, d));
    r = EXIT_OK;
  }
  /* What the receive did is durable already; this commits nothing more,
   * but its failure still says that something went wrong.
   */
  if (pool_close (pool) < 0 && r == EXIT_OK)
    r = cli_error (cli, EXIT_FAIL, "closing the pool: %s", cairn_errmsg ());
  dev_close (dev);
  return r;
}
