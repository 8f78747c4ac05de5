/* cairn: how online subcommands reach the control methods.
 *
 * With --pool PATH the pool is opened in this process and each call goes
 * through control_call_local to the same method tables a server answers
 * with (server/methods.h), as a request line and back as a reply line, so
 * that the in-process path and the socket path share the codec, the
 * validation and the error codes.  Without it, the call goes to a running
 * server over its control socket (--socket, $CAIRN_SOCKET, or the default).
 */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "control-client.h"
#include "control.h"
#include "methods.h"
#include "rpc.h"
#include "tls.h"
#include "units.h"
#include "volume.h"

/* The socket path of a server. */
const char *
cli_socket_path (const struct cli *cli)
{
  const char *env = getenv ("CAIRN_SOCKET");

  if (cli->socket)
    return cli->socket;
  return env && *env ? env : CLI_DEFAULT_SOCKET;
}

int
cli_exit_code (int code, bool invalid_is_usage)
{
  if (code == CAIRN_E_NOT_FOUND)
    return EXIT_NOT_FOUND;
  if (code == CONTROL_E_INVALID_PARAMS ||
      (invalid_is_usage && code == CAIRN_E_INVALID))
    return EXIT_USAGE;
  return EXIT_FAIL;
}

/* Report a failed call; returns its exit code.  A catalog method's
 * "invalid" error refuses an argument (a name, a size, a shrink without
 * --force): a usage error.
 */
static int
call_failed (const struct cli *cli, int code, const char *message)
{
  return cli_error (cli, cli_exit_code (code, true), "%s", message);
}

/* Connect to the control port of --connect, with TLS when asked. */
static int
cli_connect_tcp (const struct cli *cli, struct control_client **cp)
{
  /* The credentials live as long as the command: the client keeps them to
   * check the server's liveness on a second connection.
   */
  static struct tls_ctx *tls;
  struct tls_config cfg = {
    .certificates = cli->tls_certs,
    .psk_file = cli->tls_psk,
    .username = cli->tls_username,
  };
  char host[256];
  unsigned port;
  int r = control_client_parse_address (cli->connect, host, sizeof host,
                                        &port);

  if (r < 0)
    return cli_error (cli, EXIT_USAGE, "--connect %s", cairn_errmsg ());
  if (cli->tls && tls == NULL && tls_ctx_new (&cfg, false, &tls) < 0)
    return cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
  r = control_client_connect_tcp (host, port, cli->tls ? tls : NULL,
                                  CLI_CONNECT_TIMEOUT_MS, cp);
  if (r < 0)
    return cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
  control_client_set_timeout (*cp, cli->timeout_ms, CLI_LIVENESS_MS);
  return EXIT_OK;
}

/* Connect to the server at the control socket (or --connect). */
int
cli_connect (const struct cli *cli, struct control_client **cp)
{
  const char *path = cli_socket_path (cli);
  int r;

  if (cli->connect)
    return cli_connect_tcp (cli, cp);
  r = control_client_connect (path, CLI_CONNECT_TIMEOUT_MS, cp);

  if (r == -ENOENT || r == -ECONNREFUSED) {
    if (strcmp (path, CLI_DEFAULT_SOCKET) == 0)
      fprintf (stderr, "cairn: no server at %s: start one with 'cairnd "
               "--pool PATH' or use --pool PATH for a stopped pool\n", path);
    else
      fprintf (stderr, "cairn: no server at %s: start one with 'cairnd "
               "--pool PATH --control %s' or use --pool PATH for a stopped "
               "pool\n", path, path);
    return EXIT_FAIL;
  }
  if (r < 0)
    return cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
  control_client_set_timeout (*cp, cli->timeout_ms, CLI_LIVENESS_MS);
  return EXIT_OK;
}

/* Call a method of the server at the control socket. */
static int
call_server (const struct cli *cli, const char *method, json_t *params,
             json_t **result)
{
  struct control_client *c;
  int r = cli_connect (cli, &c);

  if (r != EXIT_OK)
    return r;
  r = control_client_call (c, method, params, result);
  if (r < 0)
    r = call_failed (cli, control_client_error_code (c), cairn_errmsg ());
  control_client_close (c);
  return r;
}

static int open_named_devices (const struct cli *cli,
                               const char *const *paths, unsigned n,
                               unsigned flags, struct cairn_dev **devp);

/* Open the devices of a pool (cli.h). */
int
cli_open_devices (const struct cli *cli, const char *spec, unsigned flags,
                  struct cairn_dev **devp)
{
  char *paths[DEV_CHUNK_MAX_MEMBERS];
  CLEANUP_FREE char *copy = strdup (spec);
  unsigned n = 0;
  char *save = NULL;
  int r;

  if (copy == NULL)
    return cli_error (cli, EXIT_FAIL, "out of memory");
  for (char *p = strtok_r (copy, ",", &save); p; p = strtok_r (NULL, ",", &save)) {
    if (n == DEV_CHUNK_MAX_MEMBERS) {
      r = cli_usage_error (cli, "a pool has at most %u devices",
                           DEV_CHUNK_MAX_MEMBERS);
      goto out;
    }
    paths[n] = cli_device_name (cli, p);
    if (paths[n++] == NULL) {
      r = cli_error (cli, EXIT_FAIL, "out of memory");
      goto out;
    }
  }
  if (n == 0)
    return cli_usage_error (cli, "no pool path in '%s'", spec);
  if (cli->degraded)
    flags |= DEV_CHUNK_DEGRADED;
  r = open_named_devices (cli, (const char *const *) paths, n, flags, devp);
 out:
  for (unsigned i = 0; i < n; i++)
    free (paths[i]);
  return r;
}

/* A device name with the --ceph-* options (cli.h). */
char *
cli_device_name (const struct cli *cli, const char *name)
{
  return dev_rbd_name_opts (name, cli->ceph_conf, cli->ceph_id,
                            cli->ceph_keyring);
}

/* Open the pool on devices named in full; an exit code. */
static int
open_named_devices (const struct cli *cli, const char *const *paths,
                    unsigned n, unsigned flags, struct cairn_dev **devp)
{
  int r;

  r = dev_pool_open (paths, n, flags, devp);
  for (unsigned i = 0; r == -ENOENT && i < n; i++)
    if (!dev_is_rbd_name (paths[i]) && access (paths[i], F_OK) == -1)
      return cli_error (cli, EXIT_NOT_FOUND, "%s: %s", paths[i],
                        strerror (ENOENT));
  if (r == -ENOENT)
    return cli_error (cli, EXIT_NOT_FOUND, "%s", cairn_errmsg ());
  if (r == -EBUSY && cli->pool)
    return cli_error (cli, EXIT_FAIL, "%s: to manage a pool that a server "
                      "serves, leave out --pool (the command then goes to "
                      "the server's control socket)", cairn_errmsg ());
  if (r < 0)
    return cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
  return EXIT_OK;
}

/* Open the pool of --pool for a call (read-only unless modify). */
int
cli_open_pool (const struct cli *cli, bool modify, struct cairn_dev **devp,
               struct cairn_pool **poolp)
{
  struct pool_open_opts oo = { .readonly = !modify };
  int r = cli_open_devices (cli, cli->pool, modify ? 0 : DEV_CHUNK_RDONLY,
                            devp);

  if (r != EXIT_OK)
    return r;
  r = pool_open (*devp, &oo, poolp);
  if (r < 0) {
    r = cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
    dev_close (*devp);
    return r;
  }
  return EXIT_OK;
}

/* Run one request through the method tables in this process, and read its
 * reply back as a client would.
 */
static int
call_local (const struct cli *cli, struct cairn_pool *pool,
            const char *method, json_t *params, json_t **result)
{
  struct cairn_methods_ctx mctx = { .pool = pool };
  struct control_config cfg = {
    .tables = &cairn_catalog_methods,
    .n_tables = 1,
    .opaque = &mctx,
  };
  struct control_reply rep = { 0 };
  json_t *id = json_integer (1);
  char *line = NULL, *reply = NULL;
  size_t len, reply_len;
  int r = EXIT_FAIL;

  line = id ? control_format_request (id, method, params, &len) : NULL;
  if (line == NULL) {
    cli_error (cli, EXIT_FAIL, "out of memory");
    goto out;
  }
  /* Lines go without their '\n'. */
  if (control_call_local (&cfg, line, len - 1, &reply, &reply_len) < 0) {
    cli_error (cli, EXIT_FAIL, "%s", cairn_errmsg ());
    goto out;
  }
  if (reply == NULL ||
      control_parse_reply (reply, reply_len - 1, &rep) < 0 ||
      rep.kind == CONTROL_REPLY_NOTIFICATION) {
    cli_error (cli, EXIT_FAIL, "internal error: method %s gave no reply "
               "(%s)", method, cairn_errmsg ());
    goto out;
  }
  if (rep.kind == CONTROL_REPLY_ERROR) {
    r = call_failed (cli, rep.code, rep.message);
    goto out;
  }
  *result = json_incref (rep.result);
  r = EXIT_OK;

 out:
  control_reply_free (&rep);
  free (reply);
  free (line);
  json_decref (id);
  return r;
}

/* Progress of reclaiming deleted volumes, on a terminal. */
static void
reclaim_progress (void *opaque, uint64_t freed)
{
  char buf[UNITS_FORMAT_MAX];

  (void) opaque;
  fprintf (stderr, "\rreclaiming deleted volumes: %s freed", units_format (freed, buf));
}

/* A server gives a deleted volume's space back in the background; on a
 * stopped pool the command does that work before it ends, so that the
 * space is free when it returns.
 */
static int
finish_reclaim (const struct cli *cli, struct cairn_pool *pool)
{
  struct vol_reclaim_info ri;
  bool tty = isatty (STDERR_FILENO);
  int r = vol_reclaim_status (pool, &ri);

  if (r == 0 && ri.volumes > 0) {
    r = vol_reclaim_wait (pool, tty ? reclaim_progress : NULL, NULL);
    if (tty)
      fputc ('\n', stderr);
  }
  if (r < 0)
    return cli_error (cli, EXIT_FAIL, "reclaiming deleted volumes: %s (the "
                      "rest is reclaimed the next time the pool is opened)",
                      cairn_errmsg ());
  return EXIT_OK;
}

/* Call a method in-process or on the server. */
int
cli_call (const struct cli *cli, bool modify, const char *method,
          json_t *params, json_t **result)
{
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  int r;

  *result = NULL;
  if (params == NULL)
    return cli_error (cli, EXIT_FAIL, "out of memory");
  if (cli->pool == NULL)
    r = call_server (cli, method, params, result);
  else if ((r = cli_open_pool (cli, modify, &dev, &pool)) == EXIT_OK) {
    r = call_local (cli, pool, method, params, result);
    if (r == EXIT_OK && modify)
      r = finish_reclaim (cli, pool);
    /* The method's changes are durable already; this commits nothing
     * more, but its failure still says that something went wrong.
     */
    if (pool_close (pool) < 0 && r == EXIT_OK) {
      r = cli_error (cli, EXIT_FAIL, "closing the pool: %s",
                     cairn_errmsg ());
      json_decref (*result);
      *result = NULL;
    }
    dev_close (dev);
  }
  json_decref (params);
  return r;
}
