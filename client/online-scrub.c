/* cairn: the "scrub" subcommands (cairn scrub start, pause, resume, cancel,
 * status), which call the scrub.* control methods (engine/scrub.c says what
 * a scrub reads and how it repairs).  Every one prints the scrub's status
 * after it acted, as text or, with --json, as the method's result.
 */
#include <config.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* An integer member. */
static uint64_t
jint (json_t *obj, const char *key)
{
  json_int_t v = json_integer_value (json_object_get (obj, key));

  return (uint64_t) (v < 0 ? 0 : v);
}

/* Print a status as text. */
static void
print_status (json_t *st)
{
  char a[UNITS_FORMAT_MAX], b[UNITS_FORMAT_MAX], c[UNITS_FORMAT_MAX];
  char line[512];
  uint64_t total = jint (st, "bytes_total"), done = jint (st, "bytes_done");
  json_t *v;
  size_t i;

  if (strcmp (jstr (st, "state"), "none") == 0) {
    printf ("no scrub has run on this pool\n");
    return;
  }
  snprintf (line, sizeof line, "%s%s%s", jstr (st, "state"),
            json_is_true (json_object_get (st, "interrupted"))
            ? " (interrupted: the server stopped; 'cairn scrub resume' "
              "continues)" : "",
            json_is_true (json_object_get (st, "since_last"))
            ? ", blocks born since the last complete pass" : "");
  field ("state", line);
  snprintf (line, sizeof line, "%s of %s (%.1f%%), %llu blocks",
            units_format (done, a), units_format (total, b),
            total ? 100.0 * (double) MIN (done, total) / (double) total : 0.0,
            (unsigned long long) jint (st, "blocks"));
  field ("checked", line);
  snprintf (line, sizeof line, "%s/s over %.1f s (%s read, every copy)%s%s%s",
            units_format (jint (st, "rate"), a),
            json_real_value (json_object_get (st, "elapsed")),
            units_format (jint (st, "bytes_read"), b),
            jint (st, "rate_limit") ? ", limit " : "",
            jint (st, "rate_limit") ? units_format (jint (st, "rate_limit"), c)
                                    : "",
            jint (st, "rate_limit") ? "/s" : "");
  field ("rate", line);
  if (json_is_string (json_object_get (st, "started")))
    field ("started", jstr (st, "started"));
  snprintf (line, sizeof line, "%llu bad %s, %llu repaired, %llu unrepairable",
            (unsigned long long) jint (st, "errors"),
            jint (st, "errors") == 1 ? "copy" : "copies",
            (unsigned long long) jint (st, "repaired"),
            (unsigned long long) jint (st, "unrepairable"));
  field ("found", line);
  json_array_foreach (json_object_get (st, "devices"), i, v) {
    char label[32];

    snprintf (label, sizeof label, "device %llu",
              (unsigned long long) jint (v, "index"));
    snprintf (line, sizeof line, "%s: %llu bad, %llu repaired",
              jstr (v, "path"), (unsigned long long) jint (v, "errors"),
              (unsigned long long) jint (v, "repaired"));
    field (label, line);
  }
  json_array_foreach (json_object_get (st, "damage"), i, v) {
    if (json_is_true (json_object_get (v, "metadata")))
      snprintf (line, sizeof line, "%s: metadata node at pool byte %llu "
                "(%llu bytes): the state cannot be read", jstr (v, "state"),
                (unsigned long long) jint (v, "offset"),
                (unsigned long long) jint (v, "length"));
    else
      snprintf (line, sizeof line, "%s: bytes %llu-%llu", jstr (v, "state"),
                (unsigned long long) jint (v, "offset"),
                (unsigned long long) (jint (v, "offset") +
                                      jint (v, "length") - 1));
    field ("unrepairable", line);
  }
  json_array_foreach (json_object_get (st, "unread"), i, v) {
    snprintf (line, sizeof line, "volume '%s': its catalog record is "
              "damaged, so nothing of it can be read ('cairn status')",
              json_string_value (v));
    field ("not read", line);
  }
  if (json_is_true (json_object_get (st, "damage_truncated")))
    field ("unrepairable", "... (more: the first 64 ranges are named)");
}

/* Print the result of a scrub method: JSON or text. */
static int
report (const struct cli *cli, int r, bool json, json_t *res)
{
  if (r == EXIT_OK && json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    print_status (res);
  /* A pass that ended with damage it could not repair is a failure. */
  if (r == EXIT_OK && jint (res, "unrepairable") &&
      strcmp (jstr (res, "state"), "finished") == 0)
    r = EXIT_FAIL;
  json_decref (res);
  return r;
}

/* cairn scrub start|resume [--rate RATE] [--since-last] [--wait] [--json] */
static int
start_or_resume (const struct cli *cli, int argc, char **argv, bool start)
{
  static const struct option longs[] = {
    { "rate", required_argument, NULL, 'r' },
    { "since-last", no_argument, NULL, 's' },
    { "wait", no_argument, NULL, 'w' },
    { "json", no_argument, NULL, 'j' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  json_t *params = json_object (), *res = NULL;
  bool json = false;
  int c, r;

  while ((c = getopt_long (argc, argv, start ? "r:swjh" : "r:wjh", longs,
                           NULL)) != -1) {
    uint64_t rate;

    switch (c) {
    case 'r':
      r = parse_size (cli, "--rate", optarg, &rate);
      if (r != 0) {
        json_decref (params);
        return r;
      }
      if (rate == 0) {
        json_decref (params);
        return cli_usage_error (cli, "--rate: give bytes a second above 0 "
                                "(leave it out for no limit)");
      }
      json_object_set_new (params, "rate", json_integer ((json_int_t) rate));
      break;
    case 's':
      if (!start) {
        json_decref (params);
        return cli_try_help (cli);
      }
      json_object_set_new (params, "since_last", json_true ());
      break;
    case 'w': json_object_set_new (params, "wait", json_true ()); break;
    case 'j': json = true; break;
    case 'h':
      json_decref (params);
      cli_usage (cli->cmd);
      return EXIT_OK;
    default:
      json_decref (params);
      return cli_try_help (cli);
    }
  }
  if (optind < argc) {
    json_decref (params);
    return cli_usage_error (cli, "unexpected argument '%s'", argv[optind]);
  }
  /* In process on a stopped pool, the pass lives only as long as this
   * command: it waits for its end (a pass cut short there would only be
   * left interrupted).
   */
  if (cli->pool)
    json_object_set_new (params, "wait", json_true ());
  r = cli_call (cli, true, start ? "scrub.start" : "scrub.resume", params,
                &res);
  return report (cli, r, json, res);
}

static int
cmd_scrub_start (const struct cli *cli, int argc, char **argv)
{
  return start_or_resume (cli, argc, argv, true);
}

static int
cmd_scrub_resume (const struct cli *cli, int argc, char **argv)
{
  return start_or_resume (cli, argc, argv, false);
}

/* cairn scrub pause|cancel|status [--json] */
static int
simple (const struct cli *cli, int argc, char **argv, const char *method,
        bool modify)
{
  struct opts o;
  json_t *res = NULL;
  int r = parse_opts (cli, argc, argv, "", 0, 0, NULL, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, modify, method, json_object (), &res);
  return report (cli, r, o.json, res);
}

static int
cmd_scrub_pause (const struct cli *cli, int argc, char **argv)
{
  return simple (cli, argc, argv, "scrub.pause", true);
}

static int
cmd_scrub_cancel (const struct cli *cli, int argc, char **argv)
{
  return simple (cli, argc, argv, "scrub.cancel", true);
}

static int
cmd_scrub_status (const struct cli *cli, int argc, char **argv)
{
  return simple (cli, argc, argv, "scrub.status", false);
}

const struct command cli_scrub_commands[] = {
  { "scrub start", "read and check every copy of every block, repairing",
    "[--rate RATE] [--since-last] [--wait] [--json]",
"Start a scrub: in the background, read every copy of every block that\n"
"the pool's volumes, snapshots and kept checkpoints reference, in the\n"
"order the blocks lie on the devices, check each against its SHA-256,\n"
"and rewrite a damaged copy from a good one.  Its progress is saved in the\n"
"pool: a pause or a restart of the server resumes where it was.  Prints\n"
"its status; exits 1 when a finished pass found damage it could not\n"
"repair (named as VOL, VOL@SNAP or VOL@#GEN and a byte range).\n"
"\n"
"  -r, --rate RATE       read at most RATE bytes a second from the devices\n"
"                        (every copy counts), e.g. 50M\n"
"  -s, --since-last      check only the blocks born since the last complete\n"
"                        pass started\n"
"  -w, --wait            return when the pass has ended (always so with\n"
"                        --pool, in process on a stopped pool)\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_scrub_start, NULL, CMD_ONLINE },
  { "scrub pause", "pause the running scrub, keeping its place", "[--json]",
"Pause the running scrub once the batch it reads is checked (about two\n"
"seconds at a rate limit); its place and counts are saved in the pool.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_scrub_pause, NULL, CMD_ONLINE },
  { "scrub resume", "resume a paused or interrupted scrub",
    "[--rate RATE] [--wait] [--json]",
"Continue a scrub that was paused, or interrupted by a restart, from the\n"
"place it saved.\n"
"\n"
"  -r, --rate RATE       a new rate limit (bytes a second)\n"
"  -w, --wait            return when the pass has ended\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_scrub_resume, NULL, CMD_ONLINE },
  { "scrub cancel", "end a running or paused scrub", "[--json]",
"End the running or paused scrub; what it found stays in its status.  A\n"
"cancelled pass is not a complete one for --since-last.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_scrub_cancel, NULL, CMD_ONLINE },
  { "scrub status", "show the scrub's progress and what it found",
    "[--json]",
"Show the state of the last scrub (running, paused, finished, cancelled),\n"
"its progress, its rate, the bad copies it found and repaired on each\n"
"device, and the ranges it could not repair.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_scrub_status, NULL, CMD_ONLINE },
  { .name = NULL },
};
