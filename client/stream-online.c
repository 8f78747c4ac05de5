/* cairn: streams through running servers, replication between servers, and
 * jobs.
 *
 * `cairn send` and `cairn receive` without --pool call stream.send and
 * stream.receive on the server of the control socket, whose connection then
 * carries the stream (cairn-protocol(7) STREAM MODE): standard output and
 * standard input on this side.
 *
 * `cairn replicate` (push) and `cairn pull` move streams between two
 * servers: the local one (control socket) and a remote one (its control
 * port on TCP, control-tcp=).  Design choice: this command pumps the
 * stream between its two connections, rather than the local server
 * connecting out as a job of its own.  Both servers run their half as a job
 * (job.list and job.cancel work on either side), the bytes cross one TCP
 * connection to the remote's control port as the design asks, and the
 * client needs no new trust between servers (the remote control port is
 * reached only by whoever may run this command).  The cost: the stream
 * passes through this process, so it must stay up; a server job that
 * connects out is the later step (it would reuse stream.send/receive as
 * they are).
 *
 * Resuming: the receiving server says in its stream.ready whether the
 * target has an interrupted receive and, if so, its token and the GUIDs of
 * the snapshots it joins; the sender is then asked for that stream resumed
 * from the token.  So running the same command again after a dropped
 * connection, a killed client or a restarted server continues where the
 * receiver's last saved point was, and nobody copies tokens by hand.
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
/* The remote control port when HOST has none. */
#define DEFAULT_CONTROL_PORT 10810

/* Report the failure of a call on c: exit code from its error code. */
static int
call_error (const struct cli *cli, struct control_client *c, const char *what)
{
  int code = control_client_error_code (c);

  return cli_error (cli, code == CAIRN_E_NOT_FOUND ? EXIT_NOT_FOUND
                    : EXIT_FAIL, "%s%s%s", what ? what : "", what ? ": " : "",
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

static const char *
jstr (json_t *obj, const char *key)
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

/* A sink into another server's receive. */
static int
stream_to (void *opaque, const void *buf, size_t len)
{
  return control_client_stream_write (opaque, buf, len);
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

  if (data && jstr (data, "token"))
    cli_explain_kept (cli, target, jstr (data, "snapshot"),
                      json_is_true (json_object_get (data, "incremental")),
                      jstr (data, "token"));
  return r;
}

int
cli_receive_online (const struct cli *cli, const char *target, bool abort_it,
                    bool token, struct progress *prog)
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
      printf ("%s\n", jstr (result, "token"));
    json_decref (result);
    return r;
  }
  r = cli_connect (cli, &c);
  if (r != EXIT_OK)
    return r;
  params = json_pack ("{s:s}", "volume", target);
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
  cli_print_received (jstr (result, "snapshot"),
                      json_is_true (json_object_get (result, "incremental")),
                      json_is_true (json_object_get (result, "resumed")),
                      juint (result, "data_bytes"));
  r = EXIT_OK;
 out:
  json_decref (ready);
  json_decref (result);
  control_client_close (c);
  return r;
}

/* ---------------------------------------------------------------- servers */

/* A server: the local one (host NULL: the control socket) or a remote one
 * (its control port on TCP).
 */
struct server {
  const char *host;
  unsigned port;
  char name[300];               /* for messages */
};

/* Parse HOST[:PORT] or [V6ADDR][:PORT] into s (host points into buf). */
static int
parse_server (const struct cli *cli, const char *arg, char *buf, size_t size,
              struct server *s)
{
  char *colon;
  unsigned long port = DEFAULT_CONTROL_PORT;

  snprintf (buf, size, "%s", arg);
  s->host = buf;
  if (buf[0] == '[') {
    char *end = strchr (buf, ']');

    if (end == NULL)
      return cli_usage_error (cli, "'%s': an IPv6 address is written "
                              "[ADDR] or [ADDR]:PORT", arg);
    *end = '\0';
    s->host = buf + 1;
    colon = end[1] == ':' ? end + 1 : NULL;
    if (end[1] && !colon)
      return cli_usage_error (cli, "'%s' is not HOST[:PORT]", arg);
  }
  else {
    colon = strchr (buf, ':');
    if (colon && strchr (colon + 1, ':'))
      return cli_usage_error (cli, "'%s': write an IPv6 address as "
                              "[ADDR]:PORT", arg);
  }
  if (colon) {
    char *end;

    *colon = '\0';
    port = strtoul (colon + 1, &end, 10);
    if (*end || end == colon + 1 || port == 0 || port > 65535)
      return cli_usage_error (cli, "'%s': the port must be 1 to 65535", arg);
  }
  if (*s->host == '\0')
    return cli_usage_error (cli, "'%s' names no host", arg);
  s->port = (unsigned) port;
  snprintf (s->name, sizeof s->name, strchr (s->host, ':') ? "[%s]:%u"
            : "%s:%u", s->host, s->port);
  return 0;
}

/* Connect to a server. */
static int
server_connect (const struct cli *cli, const struct server *s,
                struct control_client **cp)
{
  int r;

  if (s->host == NULL)
    return cli_connect (cli, cp) == EXIT_OK ? 0 : -1;
  r = control_client_connect_tcp (s->host, s->port, CLI_TIMEOUT_MS, cp);
  if (r < 0)
    cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
  return r < 0 ? -1 : 0;
}

/* The snapshots of vol on a server, oldest first (an empty array when vol
 * does not exist).  Returns 0, or -1 after saying what went wrong.
 */
static int
list_snapshots (const struct cli *cli, const struct server *s, const char *vol,
                json_t **snaps)
{
  struct control_client *c;
  json_t *result = NULL, *params;
  int r;

  if (server_connect (cli, s, &c) < 0)
    return -1;
  params = json_pack ("{s:s}", "volume", vol);
  r = control_client_call (c, "snapshot.list", params, &result);
  json_decref (params);
  if (r == -ENOENT)
    *snaps = json_array ();
  else if (r < 0) {
    call_error (cli, c, s->host ? s->name : NULL);
    control_client_close (c);
    return -1;
  }
  else
    *snaps = json_incref (json_object_get (result, "snapshots"));
  json_decref (result);
  control_client_close (c);
  return *snaps ? 0 : -1;
}

/* The snapshot of snaps with this GUID, or NULL. */
static json_t *
find_guid (json_t *snaps, const char *guid)
{
  size_t i;
  json_t *v;

  json_array_foreach (snaps, i, v)
    if (guid && jstr (v, "guid") && strcmp (jstr (v, "guid"), guid) == 0)
      return v;
  return NULL;
}

/* End a receive that will get no stream (it keeps what it had). */
static void
abandon (struct control_client *dc)
{
  json_t *result = NULL;

  if (control_client_stream_finish (dc, true, &result) == 0)
    json_decref (result);
}

/* One stream from src to dst: snapshot snap ("VOL@SNAP"), from base (NULL:
 * full; "SNAP") with guid to_guid, into volume vol.  Returns EXIT_OK or
 * an exit code after saying what went wrong.
 */
static int
transfer (const struct cli *cli, const struct server *src,
          const struct server *dst, const char *snap, const char *base,
          const char *to_guid, const char *vol, struct progress *prog)
{
  struct control_client *sc = NULL, *dc = NULL;
  json_t *ready = NULL, *sready = NULL, *result = NULL, *sresult = NULL;
  json_t *resume, *params;
  const char *token = NULL;
  int r, sr = 0, ret = EXIT_FAIL;

  if (server_connect (cli, dst, &dc) < 0)
    return EXIT_FAIL;
  control_client_set_notify (dc, NULL, NULL);
  params = json_pack ("{s:s}", "volume", vol);
  r = control_client_stream_start (dc, "stream.receive", params, &ready,
                                   &result);
  json_decref (params);
  if (r < 0) {
    ret = call_error (cli, dc, dst->host ? dst->name : NULL);
    goto out;
  }
  resume = json_object_get (ready, "resume");
  if (json_is_object (resume)) {
    if (strcmp (jstr (resume, "to_guid"), to_guid) != 0) {
      abandon (dc);
      ret = cli_error (cli, EXIT_FAIL, "'%s' on %s has an interrupted receive "
                       "of another snapshot (GUID %s) than %s (GUID %s): "
                       "finish it with the command that started it, or "
                       "discard it with 'cairn receive --abort %s' there",
                       vol, dst->host ? dst->name : "this server",
                       jstr (resume, "to_guid"), snap, to_guid, vol);
      goto out;
    }
    token = jstr (resume, "token");
    fprintf (stderr, "cairn %s: resuming %s at byte %" PRIu64 " of its "
             "data\n", cli->cmd->name, snap, juint (resume, "next_offset"));
  }

  if (server_connect (cli, src, &sc) < 0) {
    abandon (dc);
    goto out;
  }
  control_client_set_notify (sc, on_notify, prog);
  params = json_pack ("{s:s, s:s*, s:s*}", "snapshot", snap, "from", base,
                      "resume", token);
  r = control_client_stream_start (sc, "stream.send", params, &sready,
                                   &sresult);
  json_decref (params);
  if (r < 0) {
    ret = call_error (cli, sc, src->host ? src->name : NULL);
    abandon (dc);
    goto out;
  }

  /* r: 0, 1 the receiver replied early, or its error. */
  sr = pump_from (sc, stream_to, dc, &r);
  if (r == 0 && sr == 0)
    sr = control_client_stream_finish (sc, false, &sresult);
  if (sr < 0)
    call_error (cli, sc, src->host ? src->name : "sending");
  progress_end (prog);
  /* After a sender's failure, the end frame makes the receiver keep what
   * it has (the stream is cut short).
   */
  r = r < 0 ? r : control_client_stream_finish (dc, true, &result);
  if (r < 0) {
    ret = call_error (cli, dc, dst->host ? dst->name : "receiving");
    goto out;
  }
  if (sr == 0) {
    cli_print_received (jstr (result, "snapshot"), base != NULL,
                        json_is_true (json_object_get (result, "resumed")),
                        juint (result, "data_bytes"));
    ret = EXIT_OK;
  }
 out:
  json_decref (ready);
  json_decref (sready);
  json_decref (result);
  json_decref (sresult);
  control_client_close (sc);
  control_client_close (dc);
  return ret;
}

/* Options shared by replicate and pull. */
static int
parse_common (const struct cli *cli, int argc, char **argv, const char **to,
              const char **from, enum progress_mode *pmode)
{
  static const struct option opts[] = {
    { "to", required_argument, NULL, 't' },
    { "from", required_argument, NULL, 'f' },
    { "progress", required_argument, NULL, 'P' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  int c;

  while ((c = getopt_long (argc, argv, to ? "t:f:h" : "h", opts, NULL)) != -1) {
    switch (c) {
    case 't':
    case 'f':
      if (to == NULL)
        return cli_usage_error (cli, "'cairn pull' takes no --%s",
                                c == 't' ? "to" : "from");
      *(c == 't' ? to : from) = optarg;
      break;
    case 'P':
      if (cli_progress_option (cli, optarg, pmode) != 0)
        return EXIT_USAGE;
      break;
    case 'h':
      cli_usage (cli->cmd);
      return EXIT_OK;
    default:
      return cli_try_help (cli);
    }
  }
  if (cli->pool)
    return cli_usage_error (cli, "'%s' works between running servers: leave "
                            "out --pool", cli->cmd->name);
  return -1;
}

/* cairn replicate VOL@SNAP --to HOST[:PORT] [--from SNAP] */
int
cmd_replicate (const struct cli *cli, int argc, char **argv)
{
  enum progress_mode pmode = PROGRESS_AUTO;
  const char *to = NULL, *from = NULL, *snap, *at, *base = NULL;
  struct server local = { .name = "this server" }, remote;
  json_t *lsnaps = NULL, *rsnaps = NULL, *mine, *newest;
  char hostbuf[300], vol[VOL_NAME_MAX + 1];
  struct progress prog;
  int r = parse_common (cli, argc, argv, &to, &from, &pmode);

  if (r >= 0)
    return r;
  if (argc - optind != 1)
    return cli_usage_error (cli, argc - optind ? "unexpected argument '%s'"
                            : "missing VOL@SNAP%s", argc - optind
                            ? argv[optind + 1] : ", the snapshot to send");
  if (to == NULL)
    return cli_usage_error (cli, "missing --to HOST[:PORT], the server to "
                            "send to");
  snap = argv[optind];
  at = strchr (snap, '@');
  if (at == NULL || at == snap || at[1] == '\0' ||
      (size_t) (at - snap) > VOL_NAME_MAX)
    return cli_usage_error (cli, "'%s' is not a snapshot: write VOL@SNAP",
                            snap);
  snprintf (vol, sizeof vol, "%.*s", (int) (at - snap), snap);
  if (parse_server (cli, to, hostbuf, sizeof hostbuf, &remote) != 0)
    return EXIT_USAGE;
  if (list_snapshots (cli, &local, vol, &lsnaps) < 0 ||
      list_snapshots (cli, &remote, vol, &rsnaps) < 0) {
    r = EXIT_FAIL;
    goto out;
  }
  mine = NULL;
  for (size_t i = 0; i < json_array_size (lsnaps); i++)
    if (strcmp (jstr (json_array_get (lsnaps, i), "snapshot"), at + 1) == 0)
      mine = json_array_get (lsnaps, i);
  if (mine == NULL) {
    r = cli_error (cli, EXIT_NOT_FOUND, "there is no snapshot '%s' here",
                   snap);
    goto out;
  }
  newest = json_array_size (rsnaps)
           ? json_array_get (rsnaps, json_array_size (rsnaps) - 1) : NULL;
  if (find_guid (rsnaps, jstr (mine, "guid"))) {
    printf ("%s has %s already\n", remote.name, snap);
    r = EXIT_OK;
    goto out;
  }
  if (from)
    base = from;
  else if (newest) {
    json_t *common = find_guid (lsnaps, jstr (newest, "guid"));

    if (common == NULL) {
      r = cli_error (cli, EXIT_FAIL, "the newest snapshot of '%s' on %s "
                     "('%s') is not one of this server's: there is no base "
                     "for an incremental stream (give --from, or delete '%s' "
                     "there to send it whole)", vol, remote.name,
                     jstr (newest, "snapshot"), vol);
      goto out;
    }
    base = jstr (common, "snapshot");
  }
  progress_init (&prog, pmode, "sent");
  r = transfer (cli, &local, &remote, snap, base, jstr (mine, "guid"), vol,
                &prog);
 out:
  json_decref (lsnaps);
  json_decref (rsnaps);
  return r;
}

/* cairn pull HOST[:PORT] VOL */
int
cmd_pull (const struct cli *cli, int argc, char **argv)
{
  enum progress_mode pmode = PROGRESS_AUTO;
  struct server local = { .name = "this server" }, remote;
  json_t *lsnaps = NULL, *rsnaps = NULL;
  const char *vol, *base = NULL;
  char hostbuf[300], snap[2 * VOL_NAME_MAX + 2];
  size_t start = 0, n;
  int r = parse_common (cli, argc, argv, NULL, NULL, &pmode);

  if (r >= 0)
    return r;
  if (argc - optind != 2)
    return cli_usage_error (cli, argc - optind > 2 ? "unexpected argument '%s'"
                            : "missing %s", argc - optind > 2
                            ? argv[optind + 2] : argc - optind
                            ? "VOL, the volume to pull"
                            : "HOST[:PORT], the server to pull from");
  vol = argv[optind + 1];
  if (parse_server (cli, argv[optind], hostbuf, sizeof hostbuf, &remote) != 0)
    return EXIT_USAGE;
  if (list_snapshots (cli, &remote, vol, &rsnaps) < 0 ||
      list_snapshots (cli, &local, vol, &lsnaps) < 0) {
    r = EXIT_FAIL;
    goto out;
  }
  n = json_array_size (rsnaps);
  if (n == 0) {
    r = cli_error (cli, EXIT_NOT_FOUND, "%s has no snapshot of '%s' (or no "
                   "volume '%s'): there is nothing to pull", remote.name, vol,
                   vol);
    goto out;
  }
  /* The newest snapshot both sides have: the chain starts after it. */
  for (size_t i = json_array_size (lsnaps); i-- > 0; ) {
    json_t *common = find_guid (rsnaps, jstr (json_array_get (lsnaps, i),
                                              "guid"));

    if (common) {
      base = jstr (common, "snapshot");
      while (json_array_get (rsnaps, start) != common)
        start++;
      start++;
      break;
    }
  }
  if (base == NULL && json_array_size (lsnaps) > 0) {
    r = cli_error (cli, EXIT_FAIL, "'%s' here and on %s have no snapshot in "
                   "common: pull into another volume, or delete '%s' here",
                   vol, remote.name, vol);
    goto out;
  }
  if (start == n) {
    printf ("'%s' is up to date with %s (newest snapshot: %s)\n", vol,
            remote.name, base);
    r = EXIT_OK;
    goto out;
  }
  for (r = EXIT_OK; r == EXIT_OK && start < n; start++) {
    json_t *s = json_array_get (rsnaps, start);
    struct progress prog;

    snprintf (snap, sizeof snap, "%s@%s", vol, jstr (s, "snapshot"));
    progress_init (&prog, pmode, "received");
    r = transfer (cli, &remote, &local, snap, base, jstr (s, "guid"), vol,
                  &prog);
    base = jstr (s, "snapshot");
  }
 out:
  json_decref (lsnaps);
  json_decref (rsnaps);
  return r;
}

/* ---------------------------------------------------------------- jobs */

/* Print one job for people. */
static void
print_job (json_t *j)
{
  char d[UNITS_FORMAT_MAX], t[UNITS_FORMAT_MAX], rate[UNITS_FORMAT_MAX];

  printf ("%-5" JSON_INTEGER_FORMAT " %-15s %-30s %s", json_integer_value
          (json_object_get (j, "job")), jstr (j, "method"), jstr (j, "what"),
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
            jstr (result, "method"), jstr (result, "what"));
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
"List the jobs the server runs (send, receive): id, method, what it works\n"
"on, bytes done (of the total when known), rate and time so far.\n"
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
"transfer to resume it); a cancelled send ends its stream.\n"
"\n"
"  -j, --json            print the job as JSON\n",
    cmd_job_cancel, NULL, CMD_ONLINE },
  { NULL, NULL, NULL, NULL, NULL, NULL, CMD_ONLINE },
};
