/* cairn: streams through running servers, replication between servers, and
 * jobs.
 *
 * `cairn send` and `cairn receive` without --pool call stream.send and
 * stream.receive on the server of the control socket, whose connection then
 * carries the stream (cairn-protocol(7) STREAM MODE): standard output and
 * standard input on this side.
 *
 * `cairn replicate` (push) and `cairn pull` ask the running server for the
 * job replicate.push or replicate.pull (server/methods-replicate.c): the
 * server connects to the other one's control port and moves the stream
 * itself; this command shows the progress it reports and the outcome.
 * Closing the connection cancels the job (the receiver keeps what it has,
 * and the same command resumes it).  A push moves a chain of snapshots and
 * its reply lists each one ("sent"), which is what this command prints.
 * --rollback (receive, replicate, pull) only passes the request's
 * "rollback" on: the receiving side decides and does the rollback
 * (server/receive.c).
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "control-client.h"
#include "progress.h"
#include "replicate.h"
#include "rpc.h"
#include "units.h"

#define READ_SIZE (1024 * 1024)

/* Report the failure of a call on c: exit code from its error code. */
static int
call_error (const struct cli *cli, struct control_client *c, const char *what)
{
  int code = control_client_error_code (c);

  return cli_error (cli, cli_exit_code (code, false), "%s%s%s",
                    what ? what : "", what ? ": " : "",
                    cairn_errmsg ());
}

/* job.progress notifications drive the progress display. */
static void
on_notify (void *opaque, const char *method, json_t *params)
{
  struct progress *prog = opaque;

  if (prog && strcmp (method, "job.progress") == 0)
    progress_update (prog, (uint64_t) json_integer_value
                     (json_object_get (params, "done")),
                     (uint64_t) json_integer_value
                     (json_object_get (params, "total")));
}

static uint64_t
juint (json_t *obj, const char *key)
{
  return (uint64_t) json_integer_value (json_object_get (obj, key));
}

/* A string member, or NULL (cli.h's jstr gives "-" for people). */
static const char *
jstr_or_null (json_t *obj, const char *key)
{
  return json_string_value (json_object_get (obj, key));
}

/* Pass the stream from c to sink until its end, the sink's first
 * non-zero return (in *sink_r), or a failure reading it (returned).
 */
static int
pump_from (struct control_client *c,
           int (*sink) (void *opaque, const void *buf, size_t len),
           void *opaque, int *sink_r)
{
  *sink_r = 0;
  for (;;) {
    const void *d;
    size_t n;
    int r = control_client_stream_read (c, &d, &n);

    if (r < 0 || n == 0)
      return r;
    *sink_r = sink (opaque, d, n);
    if (*sink_r != 0)
      return 0;
  }
}

/* ---------------------------------------------------------------- send */

int
cli_send_online (const struct cli *cli, const char *snap,
                 const struct repl_send_opts *so, struct progress *prog)
{
  struct control_client *c;
  json_t *params, *ready = NULL, *result = NULL;
  int r = cli_connect (cli, &c);

  if (r != EXIT_OK)
    return r;
  control_client_set_notify (c, on_notify, prog);
  params = json_pack ("{s:s, s:s*, s:s*, s:b}", "snapshot", snap,
                      "from", so->from, "resume", so->resume,
                      "dry_run", so->dry_run);
  r = params ? control_client_stream_start (c, "stream.send", params, &ready,
                                            &result)
             : cairn_fail (-ENOMEM, "out of memory");
  json_decref (params);
  if (r < 0) {
    r = call_error (cli, c, NULL);
    goto out;
  }
  if (r == 0) {
    int wr = 0;

    r = pump_from (c, cli_write_stdout, NULL, &wr);
    if (r == 0 && wr == 0)
      r = control_client_stream_finish (c, false, &result);
    else if (r == 0)
      r = wr;
    progress_end (prog);
    if (r < 0) {
      r = call_error (cli, c, NULL);
      goto out;
    }
  }
  if (so->dry_run)
    cli_print_dry_run (snap, so->from != NULL, juint (result, "stream_bytes"),
                       juint (result, "data_bytes"));
  r = EXIT_OK;
 out:
  json_decref (ready);
  json_decref (result);
  control_client_close (c);
  return r;
}

/* ---------------------------------------------------------------- receive */

/* Report a failed receive, with how to resume it when it kept its
 * progress.
 */
static int
receive_failed (const struct cli *cli, struct control_client *c,
                const char *target)
{
  json_t *data = control_client_error_data (c);
  int r = call_error (cli, c, NULL);

  if (data && jstr_or_null (data, "token"))
    cli_explain_kept (cli, target, jstr_or_null (data, "snapshot"),
                      json_is_true (json_object_get (data, "incremental")),
                      jstr_or_null (data, "token"));
  return r;
}

int
cli_receive_online (const struct cli *cli, const char *target, bool abort_it,
                    bool token, bool rollback, bool json,
                    struct progress *prog)
{
  static uint8_t buf[READ_SIZE];
  struct control_client *c;
  json_t *ready = NULL, *result = NULL, *params;
  uint64_t sent = 0;
  int r;

  if (abort_it || token) {
    r = cli_call (cli, abort_it, abort_it ? "stream.abort" : "stream.token",
                  json_pack ("{s:s}", "volume", target), &result);
    if (r == EXIT_OK && abort_it)
      printf ("discarded the interrupted receive into %s\n", target);
    else if (r == EXIT_OK)
      printf ("%s\n", jstr_or_null (result, "token"));
    json_decref (result);
    return r;
  }
  r = cli_connect (cli, &c);
  if (r != EXIT_OK)
    return r;
  params = rollback ? json_pack ("{s:s, s:b}", "volume", target,
                                  "rollback", true)
                    : json_pack ("{s:s}", "volume", target);
  r = params ? control_client_stream_start (c, "stream.receive", params,
                                            &ready, &result)
             : cairn_fail (-ENOMEM, "out of memory");
  json_decref (params);
  if (r < 0) {
    r = call_error (cli, c, NULL);
    goto out;
  }
  if (json_is_object (json_object_get (ready, "resume")))
    fprintf (stderr, "cairn %s: '%s' has an interrupted receive: the stream "
             "must be the one that resumes it (cairn send --resume TOKEN)\n",
             cli->cmd->name, target);
  while (r == 0) {
    ssize_t n = cli_read_stdin (cli, buf, sizeof buf);

    if (n <= 0)
      break;
    r = control_client_stream_write (c, buf, (size_t) n);
    sent += (uint64_t) n;
    progress_update (prog, sent, 0);
  }
  progress_end (prog);
  if (r >= 0)
    r = control_client_stream_finish (c, true, &result);
  if (r < 0) {
    r = receive_failed (cli, c, target);
    goto out;
  }
  if (json)
    r = print_json (cli, result);
  else {
    cli_print_transfer ("received", result, NULL);
    r = EXIT_OK;
  }
 out:
  json_decref (ready);
  json_decref (result);
  control_client_close (c);
  return r;
}

/* ---------------------------------------------------------------- servers */

/* Call a replication method on the server, with progress from its
 * job.progress notifications; *result on success.
 */
static int
call_job (const struct cli *cli, const char *method, json_t *params,
          struct progress *prog, json_t **result)
{
  struct control_client *c;
  int r = cli_connect (cli, &c);

  *result = NULL;
  if (r != EXIT_OK) {
    json_decref (params);
    return r;
  }
  control_client_set_notify (c, on_notify, prog);
  r = params ? control_client_call (c, method, params, result)
             : cairn_fail (-ENOMEM, "out of memory");
  progress_end (prog);
  json_decref (params);
  r = r < 0 ? call_error (cli, c, NULL) : EXIT_OK;
  control_client_close (c);
  return r;
}

/* Options shared by replicate and pull (*tls: -1 when neither --tls nor
 * --no-tls was given, else 1 or 0; *json: --json).
 */
static int
parse_common (const struct cli *cli, int argc, char **argv, const char **to,
              const char **from, bool *rollback, enum progress_mode *pmode,
              int *tls, bool *json)
{
  static const struct option opts[] = {
    { "to", required_argument, NULL, 't' },
    { "from", required_argument, NULL, 'f' },
    { "rollback", no_argument, NULL, 'R' },
    { "progress", required_argument, NULL, 'P' },
    { "tls", no_argument, NULL, 'L' },
    { "no-tls", no_argument, NULL, 'N' },
    { "json", no_argument, NULL, 'j' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  int c;

  *tls = -1;
  while ((c = getopt_long (argc, argv, to ? "t:f:jh" : "jh", opts, NULL))
         != -1) {
    switch (c) {
    case 't':
    case 'f':
      if (to == NULL)
        return cli_usage_error (cli, "'cairn pull' takes no --%s",
                                c == 't' ? "to" : "from");
      *(c == 't' ? to : from) = optarg;
      break;
    case 'R':
      *rollback = true;
      break;
    case 'P':
      if (cli_progress_option (cli, optarg, pmode) != 0)
        return EXIT_USAGE;
      break;
    case 'L':
    case 'N':
      *tls = c == 'L';
      break;
    case 'j':
      *json = true;
      break;
    case 'h':
      cli_usage (cli->cmd);
      return EXIT_OK;
    default:
      return cli_try_help (cli);
    }
  }
  if (cli->pool)
    return cli_usage_error (cli, "'%s' is a job of a running server: leave "
                            "out --pool", cli->cmd->name);
  return -1;
}

/* Add "tls" to a job's params when --tls or --no-tls was given. */
static json_t *
with_tls (json_t *params, int tls)
{
  if (params && tls >= 0 &&
      json_object_set_new (params, "tls", json_boolean (tls)) == -1) {
    json_decref (params);
    return NULL;
  }
  return params;
}

/* cairn replicate VOL@SNAP --to HOST[:PORT] [--from SNAP] */
int
cmd_replicate (const struct cli *cli, int argc, char **argv)
{
  enum progress_mode pmode = PROGRESS_AUTO;
  const char *to = NULL, *from = NULL;
  bool rollback = false, json = false;
  struct progress prog;
  json_t *result, *list, *t;
  size_t i;
  int tls;
  int r = parse_common (cli, argc, argv, &to, &from, &rollback, &pmode, &tls,
                        &json);

  if (r >= 0)
    return r;
  if (argc - optind != 1)
    return cli_usage_error (cli, argc - optind ? "unexpected argument '%s'"
                            : "missing VOL@SNAP%s", argc - optind
                            ? argv[optind + 1] : ", the snapshot to send");
  if (to == NULL)
    return cli_usage_error (cli, "missing --to HOST[:PORT], the server to "
                            "send to");
  if (strchr (argv[optind], '@') == NULL)
    return cli_usage_error (cli, "'%s' is not a snapshot: write VOL@SNAP",
                            argv[optind]);
  progress_init (&prog, pmode, "sent");
  r = call_job (cli, "replicate.push",
                with_tls (json_pack ("{s:s, s:s, s:s*, s:b}", "snapshot",
                                     argv[optind], "to", to, "from", from,
                                     "rollback", rollback), tls),
                &prog, &result);
  if (r != EXIT_OK)
    return r;
  list = json_object_get (result, "sent");
  if (json)
    r = print_json (cli, result);
  else if (json_is_true (json_object_get (result, "already")))
    printf ("%s has %s already\n", to, argv[optind]);
  else if (json_is_array (list))
    json_array_foreach (list, i, t)
      cli_print_transfer ("sent", t, to);
  else
    cli_print_transfer ("sent", result, to);
  json_decref (result);
  return r;
}

/* cairn pull HOST[:PORT] VOL */
int
cmd_pull (const struct cli *cli, int argc, char **argv)
{
  enum progress_mode pmode = PROGRESS_AUTO;
  bool rollback = false, json = false;
  struct progress prog;
  json_t *result, *list, *t;
  size_t i;
  int tls;
  int r = parse_common (cli, argc, argv, NULL, NULL, &rollback, &pmode, &tls,
                        &json);

  if (r >= 0)
    return r;
  if (argc - optind != 2)
    return cli_usage_error (cli, argc - optind > 2 ? "unexpected argument '%s'"
                            : "missing %s", argc - optind > 2
                            ? argv[optind + 2] : argc - optind
                            ? "VOL, the volume to pull"
                            : "HOST[:PORT], the server to pull from");
  progress_init (&prog, pmode, "received");
  r = call_job (cli, "replicate.pull",
                with_tls (json_pack ("{s:s, s:s, s:b}", "from", argv[optind],
                                     "volume", argv[optind + 1],
                                     "rollback", rollback), tls),
                &prog, &result);
  if (r != EXIT_OK)
    return r;
  list = json_object_get (result, "received");
  if (json)
    r = print_json (cli, result);
  else if (json_array_size (list) == 0)
    printf ("'%s' is up to date with %s (newest snapshot: %s)\n",
            argv[optind + 1], argv[optind], jstr_or_null (result, "newest"));
  else
    json_array_foreach (list, i, t)
      cli_print_transfer ("received", t, argv[optind]);
  json_decref (result);
  return r;
}

/* ---------------------------------------------------------------- jobs */

/* Print one job for people. */
static void
print_job (json_t *j)
{
  char d[UNITS_FORMAT_MAX], t[UNITS_FORMAT_MAX], rate[UNITS_FORMAT_MAX];

  printf ("%-5" JSON_INTEGER_FORMAT " %-15s %-30s %s", json_integer_value
          (json_object_get (j, "job")), jstr_or_null (j, "method"),
          jstr_or_null (j, "what"),
          units_format (juint (j, "done"), d));
  if (juint (j, "total"))
    printf (" of %s", units_format (juint (j, "total"), t));
  printf (", %s/s, %.0f s\n", units_format (juint (j, "rate"), rate),
          json_real_value (json_object_get (j, "elapsed")));
}

/* Parse [--json] and the words: returns -1 to go on. */
static int
job_opts (const struct cli *cli, int argc, char **argv, int words, bool *json)
{
  static const struct option opts[] = {
    { "json", no_argument, NULL, 'j' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  int c;

  *json = false;
  while ((c = getopt_long (argc, argv, "jh", opts, NULL)) != -1) {
    if (c == 'j')
      *json = true;
    else if (c == 'h') {
      cli_usage (cli->cmd);
      return EXIT_OK;
    }
    else
      return cli_try_help (cli);
  }
  if (argc - optind < words)
    return cli_usage_error (cli, "missing ID, the job's number (cairn job "
                            "list)");
  if (argc - optind > words)
    return cli_usage_error (cli, "unexpected argument '%s'",
                            argv[optind + words]);
  if (words) {
    char *end;
    long long id = strtoll (argv[optind], &end, 10);

    if (*end || id <= 0)
      return cli_usage_error (cli, "'%s' is not a job number", argv[optind]);
  }
  return -1;
}

/* cairn job list | show ID | cancel ID */
static int
job_command (const struct cli *cli, int argc, char **argv, const char *method,
             int words)
{
  json_t *result = NULL, *params;
  bool json;
  int r = job_opts (cli, argc, argv, words, &json);

  if (r >= 0)
    return r;
  params = words ? json_pack ("{s:I}", "job", (json_int_t) strtoll
                              (argv[optind], NULL, 10)) : json_object ();
  r = cli_call (cli, false, method, params, &result);
  if (r != EXIT_OK)
    return r;
  if (json) {
    char *s = json_dumps (result, JSON_COMPACT);

    printf ("%s\n", s ? s : "null");
    free (s);
  }
  else if (words == 0) {
    json_t *jobs = json_object_get (result, "jobs"), *j;
    size_t i;

    if (json_array_size (jobs) == 0)
      printf ("no jobs are running\n");
    json_array_foreach (jobs, i, j)
      print_job (j);
  }
  else if (strcmp (method, "job.cancel") == 0)
    printf ("cancelling job %s (%s %s)\n", argv[optind],
            jstr_or_null (result, "method"), jstr_or_null (result, "what"));
  else
    print_job (result);
  json_decref (result);
  return EXIT_OK;
}

static int
cmd_job_list (const struct cli *cli, int argc, char **argv)
{
  return job_command (cli, argc, argv, "job.list", 0);
}

static int
cmd_job_show (const struct cli *cli, int argc, char **argv)
{
  return job_command (cli, argc, argv, "job.show", 1);
}

static int
cmd_job_cancel (const struct cli *cli, int argc, char **argv)
{
  return job_command (cli, argc, argv, "job.cancel", 1);
}

const struct command cli_job_commands[] = {
  { "job list", "list the server's running jobs", "[--json]",
"List the jobs the server runs (send, receive, and \"reclaim\": a deleted\n"
"volume's or snapshot's space coming back in the background): id, method,\n"
"what it works on, bytes done (of the total when known), rate and time so\n"
"far.  A job leaves the list when it is done.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_job_list, NULL, CMD_ONLINE },
  { "job show", "show one job's progress", "ID [--json]",
"Show the progress of job ID.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_job_show, NULL, CMD_ONLINE },
  { "job cancel", "cancel a job", "ID [--json]",
"Ask job ID to stop.  A cancelled receive keeps what it received (rerun the\n"
"transfer to resume it); a cancelled send ends its stream.  A reclaim cannot\n"
"be cancelled: the delete is committed, and it ends by itself.\n"
"\n"
"  -j, --json            print the job as JSON\n",
    cmd_job_cancel, NULL, CMD_ONLINE },
  { NULL, NULL, NULL, NULL, NULL, NULL, CMD_ONLINE },
};
