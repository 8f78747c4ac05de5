/* cairn: `send` and `receive`, which move snapshots between pools as send
 * streams (cairn-stream(5)).
 *
 * `send` writes the stream to standard output, `receive` reads it from
 * standard input, so that
 *
 *   cairn --pool A send v@s1 | cairn --pool B receive v
 *   cairn send v@s1 | ssh host cairn receive v
 *
 * copy a snapshot, and a file or ssh can sit in the middle.  With --pool
 * both open the pool in this process and call the replication module
 * (server/replicate.h) directly; without it they go to a running server,
 * whose control connection switches to stream mode (stream-online.c).
 * Progress goes to standard error (progress.h).  `receive --rollback`
 * sets repl_recv_opts.rollback (or the stream.receive param): an
 * incremental may then roll a diverged target back to its base.
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
#include "methods.h"
#include "progress.h"
#include "replicate.h"
#include "units.h"

#define READ_SIZE (1024 * 1024)

/* ---------------------------------------------------------------- send */

/* The sink of `cairn send`: standard output, all of it. */
int
cli_write_stdout (void *opaque, const void *buf, size_t len)
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
    { "progress", required_argument, NULL, 'P' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct repl_send_opts so = { .sink = cli_write_stdout };
  enum progress_mode pmode = PROGRESS_AUTO;
  struct progress prog;
  struct repl_send_result res;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  int c, r;

  while ((c = getopt_long (argc, argv, "f:r:nh", opts, NULL)) != -1) {
    switch (c) {
    case 'f': so.from = optarg; break;
    case 'r': so.resume = optarg; break;
    case 'n': so.dry_run = true; break;
    case 'P':
      if (cli_progress_option (cli, optarg, &pmode) != 0)
        return EXIT_USAGE;
      break;
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
  if (so.dry_run)
    so.sink = discard;
  else if (isatty (STDOUT_FILENO))
    return cli_usage_error (cli, "refusing to write a stream to a terminal: "
                            "redirect it to a file or a pipe (cairn send ... "
                            "> FILE, or | cairn receive VOL)");
  progress_init (&prog, so.dry_run ? PROGRESS_NONE : pmode, "sent");
  if (cli->pool == NULL)
    return cli_send_online (cli, argv[optind], &so, &prog);
  so.progress = progress_fn;
  so.progress_opaque = &prog;
  r = cli_open_pool (cli, false, &dev, &pool);
  if (r != EXIT_OK)
    return r;
  r = repl_send (pool, argv[optind], &so, &res);
  progress_end (&prog);
  if (r < 0)
    r = cli_error (cli, r == -ENOENT ? EXIT_NOT_FOUND : EXIT_FAIL, "%s",
                   cairn_errmsg ());
  else {
    if (so.dry_run)
      cli_print_dry_run (argv[optind], so.from != NULL, res.stream_bytes,
                         res.data_bytes);
    r = EXIT_OK;
  }
  (void) pool_close (pool);     /* read-only: nothing to commit */
  dev_close (dev);
  return r;
}

/* ---------------------------------------------------------------- receive */

/* Take --progress WHEN: 0, or EXIT_USAGE after saying what is wrong. */
int
cli_progress_option (const struct cli *cli, const char *arg,
                     enum progress_mode *mode)
{
  if (progress_parse (arg, mode) == 0)
    return 0;
  return cli_usage_error (cli, "--progress: '%s' is not auto, none, text or "
                          "json", arg);
}

/* Read some of the stream from standard input: the bytes read, 0 at its
 * end, -1 after saying why it cannot be read.
 */
ssize_t
cli_read_stdin (const struct cli *cli, void *buf, size_t size)
{
  for (;;) {
    ssize_t n = read (STDIN_FILENO, buf, size);

    if (n >= 0)
      return n;
    if (errno != EINTR) {
      fprintf (stderr, "cairn %s: reading the stream: %m\n", cli->cmd->name);
      return -1;
    }
  }
}

/* Print the outcome of a dry run. */
void
cli_print_dry_run (const char *snap, bool incremental, uint64_t stream_bytes,
                   uint64_t data_bytes)
{
  char s[UNITS_FORMAT_MAX], d[UNITS_FORMAT_MAX];

  printf ("%s stream of %s: %s (%" PRIu64 " bytes), carrying %s of data\n",
          incremental ? "an incremental" : "a full", snap,
          units_format (stream_bytes, s), stream_bytes,
          units_format (data_bytes, d));
}

/* Say how to go on after a receive that kept its progress. */
void
cli_explain_kept (const struct cli *cli, const char *target, const char *snap,
                  bool incremental, const char *token)
{
  fprintf (stderr, "cairn %s: the receive into '%s' kept its progress: have "
           "the sender resume it with\n"
           "  cairn send --resume TOKEN%s %s | cairn receive %s\n"
           "or discard it with 'cairn receive --abort %s'.  Its token:\n",
           cli->cmd->name, target, incremental ? " --from BASE" : "",
           snap && snap[0] && snap[strlen (snap) - 1] != '@' ? snap
           : "VOL@SNAP", target, target);
  fprintf (stderr, "%s\n", token);
}

/* Say what a rollback discarded (d: a reply's "discarded", NULL for
 * nothing), on the server at where (NULL: this one).
 */
static void
print_discarded (json_t *d, const char *where)
{
  const char *base = jstr (d, "base"), *at = strchr (base, '@');
  json_t *snaps = json_object_get (d, "snapshots"), *s;
  uint64_t total = jnum (d, "snapshots_total");
  size_t i;

  if (!json_is_object (d))
    return;
  printf ("rolled back %.*s%s%s to %s:", at ? (int) (at - base)
          : (int) strlen (base), base, where ? " on " : "", where ? where : "",
          base);
  if (total) {
    printf (" destroyed %" PRIu64 " snapshot%s (", total,
            total == 1 ? "" : "s");
    json_array_foreach (snaps, i, s)
      printf ("%s%s", i ? ", " : "", json_string_value (s));
    if (total > json_array_size (snaps))
      printf (" and %" PRIu64 " more", total - json_array_size (snaps));
    printf (")");
  }
  if (json_is_true (json_object_get (d, "writes")))
    printf ("%s discarded the writes made since %s", total ? ";" : "",
            jstr (d, "writes_since"));
  printf ("\n");
}

/* Print a snapshot received or sent (verb), from or to the server at where
 * (NULL: a receive from standard input), and what a rollback of the
 * receiving volume discarded for it (on where when it was sent there).
 */
void
cli_print_transfer (const char *verb, json_t *t, const char *where)
{
  bool sent = verb[0] == 's';
  char d[UNITS_FORMAT_MAX];

  printf ("%s %s%s%s (%s%s stream, %s of data)\n", verb, jstr (t, "snapshot"),
          where ? (sent ? " to " : " from ") : "", where ? where : "",
          json_is_true (json_object_get (t, "incremental")) ? "incremental"
          : "full", json_is_true (json_object_get (t, "resumed"))
          ? ", resumed" : "", units_format (jnum (t, "data_bytes"), d));
  print_discarded (json_object_get (t, "discarded"), sent ? where : NULL);
}

/* Read the stream from standard input into a receive. */
static int
receive_stdin (const struct cli *cli, struct cairn_pool *pool,
               const char *target, bool rollback, struct progress *prog,
               struct repl_recv_result *res)
{
  static uint8_t buf[READ_SIZE];
  struct repl_recv_opts ro = { .progress = progress_fn,
                               .progress_opaque = prog,
                               .rollback = rollback };
  struct repl_recv *rr;
  uint64_t trailing = 0;
  int r = 0;

  r = repl_recv_new (pool, target, &ro, &rr);
  if (r < 0)
    return r;
  while (r == 0) {
    ssize_t n = cli_read_stdin (cli, buf, sizeof buf);
    size_t used;

    if (n <= 0)
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
  progress_end (prog);
  r = repl_recv_finish (rr, res);
  repl_recv_free (rr);
  if (r == 0 && trailing)
    fprintf (stderr, "cairn %s: warning: %" PRIu64 " bytes after the end of "
             "the stream were ignored\n", cli->cmd->name, trailing);
  return r;
}

/* cairn receive VOL [--abort | --token | --rollback] */
int
cmd_receive (const struct cli *cli, int argc, char **argv)
{
  static const struct option opts[] = {
    { "abort", no_argument, NULL, 'a' },
    { "token", no_argument, NULL, 't' },
    { "rollback", no_argument, NULL, 'R' },
    { "progress", required_argument, NULL, 'P' },
    { "json", no_argument, NULL, 'j' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  enum progress_mode pmode = PROGRESS_AUTO;
  struct progress prog;
  struct repl_recv_result res = { .kept = false };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  const char *target;
  bool abort_it = false, token = false, rollback = false, json = false;
  char tok[STREAM_TOKEN_MAX];
  int c, r;

  while ((c = getopt_long (argc, argv, "atjh", opts, NULL)) != -1) {
    switch (c) {
    case 'a': abort_it = true; break;
    case 't': token = true; break;
    case 'R': rollback = true; break;
    case 'j': json = true; break;
    case 'P':
      if (cli_progress_option (cli, optarg, &pmode) != 0)
        return EXIT_USAGE;
      break;
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
  if (rollback && (abort_it || token))
    return cli_usage_error (cli, "--rollback applies to a stream: it goes "
                            "without --%s", abort_it ? "abort" : "token");
  target = argv[optind];
  if (!abort_it && !token && isatty (STDIN_FILENO))
    return cli_usage_error (cli, "refusing to read a stream from a terminal: "
                            "cairn receive %s < FILE, or cairn send ... | "
                            "cairn receive %s", target, target);
  progress_init (&prog, pmode, "received");
  if (cli->pool == NULL)
    return cli_receive_online (cli, target, abort_it, token, rollback,
                               json, &prog);
  r = cli_open_pool (cli, !token, &dev, &pool);
  if (r != EXIT_OK)
    return r;
  if (abort_it)
    r = repl_recv_abort (pool, target);
  else if (token)
    r = repl_recv_token (pool, target, tok);
  else
    r = receive_stdin (cli, pool, target, rollback, &prog, &res);
  if (r < 0) {
    r = cli_error (cli, r == -ENOENT ? EXIT_NOT_FOUND : EXIT_FAIL, "%s",
                   cairn_errmsg ());
    if (res.kept)
      cli_explain_kept (cli, target, res.name, res.incremental, res.token);
  }
  else if (abort_it)
    printf ("discarded the interrupted receive into %s\n", target);
  else if (token)
    printf ("%s\n", tok);
  else {
    json_t *result = repl_recv_result_json (&res);

    if (result == NULL)
      r = cli_error (cli, EXIT_FAIL, "out of memory");
    else if (json)
      r = print_json (cli, result);
    else {
      cli_print_transfer ("received", result, NULL);
      r = EXIT_OK;
    }
    json_decref (result);
  }
  /* What the receive did is durable already; this commits nothing more,
   * but its failure still says that something went wrong.
   */
  if (pool_close (pool) < 0 && r == EXIT_OK)
    r = cli_error (cli, EXIT_FAIL, "closing the pool: %s", cairn_errmsg ());
  dev_close (dev);
  return r;
}
