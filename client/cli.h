/* cairn: what the subcommands share (private to client/cairn).
 *
 * cairn.c holds the command table, the global options and the dispatch;
 * each group of subcommands lives in its own file (offline.c: the ones that
 * open a pool through the engine; online.c, online-volume.c and
 * online-snapshot.c: the ones that call control methods, through call.c)
 * and is reached only through the table.
 */
#ifndef CAIRN_CLI_H
#define CAIRN_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "units.h"
#include "util.h"

/* Exit codes (cairn(8), EXIT STATUS). */
#define EXIT_OK 0
#define EXIT_FAIL 1               /* the engine or server reported a failure */
#define EXIT_USAGE 2              /* bad command line */
#define EXIT_NOT_FOUND 3          /* the named pool or object does not exist */

struct command;

enum command_kind {
  CMD_OTHER,                      /* help, version */
  CMD_OFFLINE,                    /* opens a stopped pool through the engine */
  CMD_ONLINE,                     /* calls control methods (call.c) */
};

/* The control socket of a server when neither --socket nor $CAIRN_SOCKET
 * names one.
 */
#define CLI_DEFAULT_SOCKET "/run/cairn/control.sock"
/* How long an online command waits to connect to the server, and how
 * often, while it waits for a reply, it checks that the server is alive,
 * in milliseconds.  The reply itself has no time limit unless --timeout
 * sets one: a long method takes as long as it needs, and a dead or hung
 * server fails the call within two liveness intervals.
 */
#define CLI_CONNECT_TIMEOUT_MS (30 * 1000)
#define CLI_LIVENESS_MS (10 * 1000)

/* What every subcommand gets: its table entry and the global options. */
struct cli {
  const struct command *cmd;
  const char *pool;               /* --pool PATH, or NULL; PATH,PATH,...
                                     names a pool's several devices */
  bool degraded;                  /* --degraded: open without missing
                                     devices, read-only */
  const char *socket;             /* --socket PATH, or NULL */
  const char *connect;            /* --connect HOST[:PORT], or NULL */
  bool tls;                       /* --tls (or a --tls-* option) */
  const char *tls_certs;          /* --tls-certificates DIR */
  const char *tls_psk;            /* --tls-psk FILE */
  const char *tls_username;       /* --tls-username NAME */
  int timeout_ms;                 /* --timeout SECONDS; -1: none */
  /* --ceph-conf, --ceph-id, --ceph-keyring: for rbd: devices (NULL: Ceph's
   * defaults).
   */
  const char *ceph_conf, *ceph_id, *ceph_keyring;
};

/* A device name with the --ceph-* options added when it is an rbd: name
 * (dev_rbd_name_opts); a new string, NULL when out of memory.
 */
char *cli_device_name (const struct cli *cli, const char *name);

struct command {
  const char *name;               /* "mkpool", or "volume create" */
  const char *summary;            /* one line for `cairn help` */
  const char *args;               /* "PATH --size SIZE [...]" */
  const char *help;               /* the options, one per line */
  /* Run with argv[0] = "cairn NAME" and the command's arguments after it.
   * Returns the exit code.
   */
  int (*run) (const struct cli *cli, int argc, char **argv);
  /* A group ("volume") has subcommands instead (run is cli_run_group),
   * ended by an entry whose name is NULL.
   */
  const struct command *subs;
  enum command_kind kind;
};

/* Print the command's usage to stdout. */
void cli_usage (const struct command *cmd);
/* Say how to get the command's usage, on stderr; returns EXIT_USAGE (for
 * errors that getopt has already described).
 */
int cli_try_help (const struct cli *cli);
/* Report a usage error ("cairn NAME: message", then how to get help) on
 * stderr; returns EXIT_USAGE.
 */
int cli_usage_error (const struct cli *cli, const char *fmt, ...)
  CAIRN_PRINTF (2, 3);
/* Report a failure ("cairn NAME: message") on stderr and return code. */
int cli_error (const struct cli *cli, int code, const char *fmt, ...)
  CAIRN_PRINTF (3, 4);

/* The exit code for a failed method call's error code (proto/rpc.h):
 * EXIT_NOT_FOUND for "not-found", EXIT_USAGE for "invalid-params" (the
 * request's arguments) and, when invalid_is_usage, for "invalid" (an
 * argument the method refused: a bad name, a size out of range; not for
 * the stream methods, where "invalid" can be a damaged stream), else
 * EXIT_FAIL (cairn(8), EXIT STATUS).
 */
int cli_exit_code (int code, bool invalid_is_usage);

/* Parse the options of a command that takes none but --help: returns -1
 * to go on with the words from optind, or the exit code to stop with.
 */
int cli_parse_no_options (const struct cli *cli, int argc, char **argv);

/* After getopt, take the pool's PATH from the one word left, or from the
 * global --pool when none is left.  Returns 0 with *pathp set, or
 * EXIT_USAGE after saying what is wrong.
 */
int cli_pool_path (const struct cli *cli, int argc, char **argv,
                   const char **pathp);

/* Run a group's subcommand: the first word after the group names it. */
int cli_run_group (const struct cli *cli, int argc, char **argv);

/* The subcommands of offline.c. */
int cmd_mkpool (const struct cli *cli, int argc, char **argv);
int cmd_fsck (const struct cli *cli, int argc, char **argv);
int cmd_info (const struct cli *cli, int argc, char **argv);

/* Call a control method for an online subcommand (call.c): in-process on
 * the pool of --pool (opened read-only unless modify, and closed again),
 * else through the control socket of a running server.  params is a new
 * reference, consumed (NULL: out of memory building it).  Returns EXIT_OK
 * with the result in *result (a new reference; NULL for a null result), or
 * the exit code after reporting the failure: EXIT_NOT_FOUND for a
 * "not-found" error, else EXIT_FAIL.
 */
int cli_call (const struct cli *cli, bool modify, const char *method,
              json_t *params, json_t **result);
/* Open the pool of --pool in this process (read-only unless modify), as
 * cli_call does.  Returns EXIT_OK, or the exit code after reporting the
 * failure (EXIT_NOT_FOUND when there is no such file).
 */
struct cairn_dev;
struct cairn_pool;
/* Open the devices a pool lives on: spec is one path, or the paths of a
 * pool's devices joined by commas; flags as dev_pool_open (--degraded adds
 * DEV_CHUNK_DEGRADED).  On failure report it and return the exit code:
 * EXIT_NOT_FOUND when a path does not exist.
 */
int cli_open_devices (const struct cli *cli, const char *spec, unsigned flags,
                      struct cairn_dev **devp);
int cli_open_pool (const struct cli *cli, bool modify, struct cairn_dev **devp,
                   struct cairn_pool **poolp);

/* The online subcommands: two groups (online-volume.c,
 * online-snapshot.c) and three single ones (online.c).
 */
extern const struct command cli_volume_commands[];
extern const struct command cli_snapshot_commands[];
extern const struct command cli_checkpoint_commands[];
extern const struct command cli_scrub_commands[];
extern const struct command cli_device_commands[];
/* online-checkpoint.c: is key (klen bytes) a checkpoint setting, which
 * `cairn volume set` passes to checkpoint.set; print what that returns.
 */
bool cli_checkpoint_key (const char *key, size_t klen);
void cli_print_checkpoint_settings (const char *what, json_t *settings);
int cmd_clone (const struct cli *cli, int argc, char **argv);
int cmd_diff (const struct cli *cli, int argc, char **argv);
int cmd_status (const struct cli *cli, int argc, char **argv);

/* Output helpers of online.c, for the other online subcommands. */
#define TABLE_MAX_COLS 16
/* A table of text cells, printed in aligned columns. */
struct table {
  size_t ncols, nrows, cap;
  char **cells;                     /* row by row */
  int width[TABLE_MAX_COLS];
};
int table_add (struct table *t, const char *const *row);
void table_print (const struct table *t);
void table_free (struct table *t);
/* Print a method's result as JSON (null for none); returns the exit code. */
int print_json (const struct cli *cli, json_t *result);
/* A number member of obj (0 if absent), and one as a size in units. */
uint64_t jnum (json_t *obj, const char *key);
const char *jsize (json_t *obj, const char *key, char buf[UNITS_FORMAT_MAX]);
/* Print "label  value" with the labels aligned. */
void field (const char *label, const char *value);

/* More of online.c, for online-volume.c and online-snapshot.c. */

/* The options of an online subcommand. */
struct opts {
  bool json, recursive, force, snapshots;
  bool dry_run, pool_default;     /* --dry-run, --default */
  const char *since, *until;      /* --since TIME, --until TIME */
};
/* Parse the options of a subcommand: --json and --help, and those of the
 * letters in extra ("r", "f", "s"); then check that from min to max words
 * are left (names: what they are, for the message).  Returns -1 to go on
 * with the words from optind, or the exit code to stop with.
 */
int parse_opts (const struct cli *cli, int argc, char **argv,
                const char *extra, int min, int max,
                const char *const *names, struct opts *o);
/* Parse a size argument (what) into bytes: a usage error if it is not
 * one.
 */
int parse_size (const struct cli *cli, const char *what, const char *arg,
                uint64_t *bytesp);
/* A string member, or "-". */
const char *jstr (json_t *obj, const char *key);
/* An ISO 8601 UTC time member ("2026-12-02T10:00:00Z") in local time. */
const char *jtime (json_t *obj, const char *key, char buf[32]);
/* Print an array of volume or snapshot objects as a table. */
int print_volume_table (const struct cli *cli, json_t *arr);
/* Print one "label  SIZE (N bytes)" line. */
void field_size (const char *label, json_t *obj, const char *key);
/* What to do about damaged catalog records, after listing them. */
#define DAMAGE_HINT "run 'cairn fsck' for details; 'cairn snapshot delete " \
  "VOL@SNAP' removes a damaged snapshot; a damaged volume cannot be used " \
  "or deleted, and its data is kept (the rest of the pool is usable)"
/* Warn on stderr about the "damaged" records of a listing's result (left
 * out of it), one per line; returns how many there were.
 */
size_t warn_damaged (const struct cli *cli, json_t *res);
/* Print the "damaged" records of res as fields, one per line. */
void field_damaged (json_t *res);

/* online.c: cairn grants reload. */
int cmd_grants (const struct cli *cli, int argc, char **argv);
/* online.c: cairn audit. */
int cmd_audit (const struct cli *cli, int argc, char **argv);

/* stats.c: the I/O statistics of a running server. */
int cmd_stats (const struct cli *cli, int argc, char **argv);

/* The subcommands of send-receive.c: streams in and out of a pool, in
 * process with --pool, else through a server (stream-online.c).
 */
int cmd_send (const struct cli *cli, int argc, char **argv);
int cmd_receive (const struct cli *cli, int argc, char **argv);
/* Read from standard input: bytes read, 0 at the end, -1 after saying
 * why not.
 */
#include <sys/types.h>
ssize_t cli_read_stdin (const struct cli *cli, void *buf, size_t size);
/* Write all of buf to standard output (a stream_sink_fn). */
int cli_write_stdout (void *opaque, const void *buf, size_t len);
void cli_print_dry_run (const char *snap, bool incremental,
                        uint64_t stream_bytes, uint64_t data_bytes);
void cli_print_transfer (const char *verb, json_t *t, const char *where);
void cli_explain_kept (const struct cli *cli, const char *target,
                       const char *snap, bool incremental, const char *token);

/* stream-online.c: send and receive through a server's stream mode,
 * replication between servers, and jobs.
 */
struct progress;
struct repl_send_opts;
int cli_send_online (const struct cli *cli, const char *snap,
                     const struct repl_send_opts *so, struct progress *prog);
int cli_receive_online (const struct cli *cli, const char *target,
                        bool abort_it, bool token, bool rollback,
                        bool json, struct progress *prog);
int cmd_replicate (const struct cli *cli, int argc, char **argv);
int cmd_pull (const struct cli *cli, int argc, char **argv);
extern const struct command cli_job_commands[];
/* The control socket of the server (--socket, $CAIRN_SOCKET, default). */
const char *cli_socket_path (const struct cli *cli);
/* Connect to it, or to the TCP port of --connect (with TLS when --tls):
 * EXIT_OK, or the exit code after saying what is wrong (how to start a
 * server when none answers).
 */
struct control_client;
int cli_connect (const struct cli *cli, struct control_client **cp);

#endif /* CAIRN_CLI_H */
