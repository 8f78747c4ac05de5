/* cairn: the "device" subcommands of a pool of several devices: cairn
 * device replace OLD NEW, --status and --cancel, which call the device.*
 * control methods (engine/dev-replace.c says what a replace does).  Every
 * form prints the replace's status after it acted, as text or, with
 * --json, as the method's result.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Print a replace's status as text. */
static void
print_replace (json_t *st)
{
  char a[UNITS_FORMAT_MAX], b[UNITS_FORMAT_MAX], line[640];
  uint64_t done = jnum (st, "done"), total = jnum (st, "total");
  const char *state = jstr (st, "state");

  if (strcmp (state, "none") == 0) {
    printf ("no device is being replaced\n");
    return;
  }
  snprintf (line, sizeof line, "%s%s", state,
            strcmp (state, "stopped") == 0
            ? " (the server stopped or the pool was opened: 'cairn device "
              "replace --resume' continues)" : "");
  field ("state", line);
  snprintf (line, sizeof line, "device %" PRIu64 "%s by %s (UUID %s)",
            jnum (st, "index"),
            json_is_true (json_object_get (st, "source_missing"))
            ? " (missing: redundancy is lost until the end)" : "",
            json_is_string (json_object_get (st, "target"))
            ? jstr (st, "target") : "a device not named at open",
            jstr (st, "uuid"));
  field ("replacing", line);
  snprintf (line, sizeof line, "%s of %s (%.1f%%)", units_format (done, a),
            units_format (total, b),
            total ? 100.0 * (double) MIN (done, total) / (double) total : 0.0);
  field ("copied", line);
  if (json_is_string (json_object_get (st, "started")))
    field ("started", jstr (st, "started"));
  if (json_is_string (json_object_get (st, "error")))
    field ("error", jstr (st, "error"));
}

/* Print the result of a device method: JSON or text.  A replace that
 * failed is a failure.
 */
static int
report (const struct cli *cli, int r, bool json, json_t *res)
{
  if (r == EXIT_OK && json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    print_replace (res);
  if (r == EXIT_OK && strcmp (jstr (res, "state"), "failed") == 0)
    r = EXIT_FAIL;
  json_decref (res);
  return r;
}

/* NEW as the server will open it: an absolute path for a file or block
 * device (the server runs elsewhere), an RBD name as given.
 */
static char *
new_device_name (const struct cli *cli, const char *arg)
{
  char path[PATH_MAX];

  if (strncmp (arg, "rbd:", 4) == 0)
    return cli_device_name (cli, arg);
  if (realpath (arg, path) == NULL)
    return NULL;
  return strdup (path);
}

/* cairn device replace OLD NEW | --resume | --status | --cancel
 * [--wait] [--json]
 */
static int
cmd_device_replace (const struct cli *cli, int argc, char **argv)
{
  static const struct option longs[] = {
    { "status", no_argument, NULL, 's' },
    { "cancel", no_argument, NULL, 'c' },
    { "resume", no_argument, NULL, 'r' },
    { "wait", no_argument, NULL, 'w' },
    { "json", no_argument, NULL, 'j' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  json_t *params = json_object (), *res = NULL;
  bool json = false, wait = false;
  int c, r, mode = 0;
  char *name;

  while ((c = getopt_long (argc, argv, "scrwjh", longs, NULL)) != -1) {
    switch (c) {
    case 's': case 'c': case 'r':
      if (mode && mode != c) {
        json_decref (params);
        return cli_usage_error (cli, "give one of --status, --cancel and "
                                "--resume");
      }
      mode = c;
      break;
    case 'w': wait = true; break;
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
  if (mode == 's' || mode == 'c') {
    json_decref (params);
    if (optind < argc)
      return cli_usage_error (cli, "unexpected argument '%s'", argv[optind]);
    r = cli_call (cli, mode == 'c', mode == 's' ? "device.replace_status"
                  : "device.replace_cancel", json_object (), &res);
    return report (cli, r, json, res);
  }
  if (argc - optind != (mode == 'r' ? 0 : 2)) {
    json_decref (params);
    return mode == 'r'
           ? cli_usage_error (cli, "--resume takes no devices")
           : cli_usage_error (cli, "name the device to replace (its index, "
                              "UUID or path, as 'cairn status' lists them) "
                              "and the new device");
  }
  json_object_set_new (params, "old", json_string (mode == 'r' ? "-"
                                                   : argv[optind]));
  if (mode != 'r') {
    name = new_device_name (cli, argv[optind + 1]);
    if (name == NULL) {
      json_decref (params);
      return cli_error (cli, EXIT_NOT_FOUND, "%s: %s", argv[optind + 1],
                        strerror (errno));
    }
    json_object_set_new (params, "new", json_string (name));
    free (name);
  }
  /* In process on a stopped pool, the replace lives only as long as this
   * command: it waits for its end (a replace cut short there resumes at
   * the next open).
   */
  if (wait || cli->pool)
    json_object_set_new (params, "wait", json_true ());
  r = cli_call (cli, true, "device.replace", params, &res);
  return report (cli, r, json, res);
}

const struct command cli_device_commands[] = {
  { "device replace", "replace a device of the pool by a new one",
    "OLD NEW | --resume | --status | --cancel [--wait] [--json]",
"Copy everything device OLD holds (named by its index, UUID or path as\n"
"'cairn status' lists them) onto NEW, a file or block device at least as\n"
"large as what OLD holds, then make NEW that device of the pool in every\n"
"device label.  Each block is read from another device's copy where there\n"
"is one, and from OLD only where there is none, so OLD may be missing (the\n"
"pool opened degraded) as long as every block has another copy.  Writes\n"
"go on meanwhile and reach NEW too.  The replace runs in the background;\n"
"its place is saved in the labels, and a restart (with NEW named among the\n"
"pool's devices) resumes it.  Prints the replace's status; exits 1 when it\n"
"failed.\n"
"\n"
"  -s, --status          show the replace's progress only\n"
"  -c, --cancel          stop the replace; NEW is no longer part of the pool\n"
"                        (refused when OLD missed writes meanwhile)\n"
"  -r, --resume          continue a replace that stopped or failed\n"
"  -w, --wait            return when the replace has ended (always so with\n"
"                        --pool, in process on a stopped pool)\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_device_replace, NULL, CMD_ONLINE },
  { .name = NULL },
};
