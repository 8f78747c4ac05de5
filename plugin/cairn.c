/* nbdkit-cairn-plugin: serves the volumes of a Cairn pool as NBD exports.
 *
 * This file fills nbdkit's callback table: it turns nbdkit's parameters
 * into an engine configuration, opens the pool once for the whole server,
 * and maps each NBD connection onto one open volume of the engine
 * (engine/volume.h).  The engine does all the storage work; the control
 * server (server/) runs on its own libuv thread, started in .after_fork
 * when control= names a socket, and answers the same catalog methods as
 * `cairn --pool` does offline.
 *
 * Lifecycle (nbdkit(1) calls these in this order):
 *
 *   .get_ready   open the device and the pool.  The device is flock'ed
 *                here, before nbdkit forks into the background: the lock
 *                belongs to the open file, so the child keeps it.
 *   .after_fork  start the commit thread, the control server and the
 *                stop watch (threads do not survive a fork).  The watch
 *                (stop.c) ends idle client connections once nbdkit
 *                quits, so that a stop does not wait for them.
 *   .open ...    one connection: vol_open of the export name.
 *   .cleanup     stop the watch, the control server and the commit
 *                thread, close (and so commit) the pool, close the device.  Only here: .unload also runs in paths
 *                where the pool must not be touched, and nbdkit's parent
 *                leaves through exit() when it daemonises, so nothing that
 *                touches the pool may run from atexit or .unload.  If
 *                .cleanup is never reached (SIGKILL, crash) the pool is
 *                simply at its last durable generation.
 *
 * Exports (DESIGN §3): "VOL" is a live volume, "VOL@SNAP" a snapshot,
 * "VOL@#GEN" a pinned generation, "VOL@2026-12-02T10:00:00Z" the newest
 * kept state at or before that time (engine/volume.h); .list_exports asks
 * the engine on every
 * listing, so a new snapshot shows at once.  The empty name is the
 * default-export= parameter when given, and refused otherwise: picking "the
 * only volume" would silently change meaning the day a second volume is
 * created.  A read-only export (a snapshot, a volume flagged read-only, or
 * any export of a read-only server) opens even for a client that wants to
 * write, and advertises no write, trim, zero or FUA.
 *
 * Errors: the engine returns a negative errno and leaves a message in
 * cairn_errmsg(); each callback logs that message with nbdkit_error and
 * hands nbdkit an errno that reaches the client as itself (see
 * client_errno).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "dev.h"
#include "dev-rbd.h"
#include "pool.h"
#include "sha256.h"
#include "volume.h"
#include "control.h"
#include "methods.h"
#include "units.h"
#include "metrics.h"
#include "standby.h"
#include "stop.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

/* Block size constraints advertised to clients (DESIGN §3): any byte
 * range works, 4 KiB (the engine's block) avoids read-modify-write, and
 * 32 MiB keeps one request well inside nbdkit's 64 MiB limit.
 */
#define BLOCK_MIN 1u
#define BLOCK_PREFERRED 4096u
#define BLOCK_MAX (32u * 1024 * 1024)

/* -D cairn.verbose=1: log every request. */
NBDKIT_DLL_PUBLIC int cairn_debug_verbose = 0;

/* Configuration from the command line (nbdkit's statics stay here). */
/* pool=, once for each device of the pool (in any order); pool_path is
 * them joined by commas, for messages.
 */
static char *pool_paths[DEV_CHUNK_MAX_MEMBERS];
static unsigned npool_paths;
static char *pool_path;
static bool degraded;           /* degraded=true: open with devices missing */
/* ceph-conf=, ceph-id=, ceph-keyring=: for rbd: devices (engine/dev.h). */
static char *ceph_conf, *ceph_id, *ceph_keyring;
/* A device is an RBD image: the pool is opened in .after_fork, since
 * librados's threads do not survive nbdkit's fork (see cairn_get_ready).
 */
static bool pool_on_rbd;
/* standby=true: wait for the pool's RBD lock, taking it over from a
 * holder that is gone (standby.c).
 */
static bool standby;
static char *control_path;
static char *control_group;
static char *control_tcp_addr;  /* control-tcp=[ADDR:]PORT */
static unsigned control_tcp_port;
/* grants=FILE: who may do what (cairn-grants(5)); NULL: the trusted
 * administrator only, as before grants.
 */
static char *grants_path;
static struct grants_store *grants;
/* control-insecure=true: the operator allows control-tcp= without TLS. */
static bool control_insecure;
/* control-tls=: TLS on the TCP port, and the credentials that replication
 * jobs connect with (net/tls.h).  tls_mode_set: control-tls= was given
 * (without it, credentials mean require, as with cairnd).
 */
static struct tls_config control_tls;
static bool tls_mode_set;
static char *control_tls_certs, *control_tls_psk;
/* control-tls-username=: the PSK user this server's replication jobs
 * authenticate as on other servers (NULL: the PSK file's first entry).
 */
static char *control_tls_username;
static struct tls_ctx *control_tls_ctx;   /* from .config_complete */
static int64_t cache_bytes = 128 * 1024 * 1024;
static unsigned commit_interval_ms;    /* commit-interval=, 0: the pool's */
static unsigned reclaim_step;          /* reclaim-step=, 0: the engine's */
static unsigned handshake_timeout_s = CONTROL_DEFAULT_HANDSHAKE_TIMEOUT_S;
static bool readonly_pool;
static bool check_every_read;   /* verify=always */
static bool intent_log;         /* intent-log=true */
static char *default_export;
/* nbdkit 1.32 refuses a list of more than 10,000 exports (MAX_EXPORTS in
 * its server/exports.c): nbdkit_add_export fails past it and the whole
 * listing with it, so the client gets no list at all.  list-max= lowers
 * the bound.
 */
#define LIST_MAX_NBDKIT 10000u
static unsigned list_max = LIST_MAX_NBDKIT;
/* list-checkpoints=true: a listing also holds every volume's checkpoints
 * (VOL@#GEN), after the snapshots.  Off by default: a volume keeps one per
 * commit for an hour, thousands of them, which would flood clients.
 */
static bool list_checkpoints;
/* metrics=[ADDR:]PORT: serve Prometheus metrics there (server/metrics.h). */
static char *metrics_addr;
static unsigned metrics_port_arg;


/* The pool, open from .get_ready to .cleanup.  Set before nbdkit serves
 * anything and only read afterwards, so connections need no lock for it.
 */
static struct cairn_dev *dev;
static struct cairn_pool *pool;
/* The control server, from .after_fork to .cleanup (control= only). */
static struct control_server *control;
static struct cairn_methods_ctx methods_ctx;
/* The metrics endpoint, from .after_fork to .cleanup (metrics= only), and
 * what it reports on.
 */
static struct metrics_server *metrics;
static struct metrics_source metrics_src;
static bool pool_readonly;      /* readonly=true, or the engine said so */

/* One connection: an open volume of the engine. */
struct handle {
  struct cairn_volume *vol;
  char *name;                   /* export name, for messages */
  bool readonly;
};

/* The errno nbdkit should send for engine error r (a negative errno).
 * Only these reach an NBD client as themselves (DESIGN §3); EINVAL is an
 * out-of-range request.  Everything else is an I/O error to the client.
 */
static int
client_errno (int r)
{
  switch (-r) {
  case EIO: case EPERM: case EROFS: case ENOMEM: case ENOSPC:
  case ESHUTDOWN: case EINVAL:
    return -r;
  default:
    return EIO;
  }
}

/* Report engine error r of operation what on a connection; returns -1. */
static int
engine_error (struct handle *h, const char *what, int r)
{
  const char *msg = cairn_errmsg ();

  nbdkit_error ("%s: %s: %s", h->name, what,
                *msg ? msg : strerror (-r));
  nbdkit_set_error (client_errno (r));
  /* ESHUTDOWN comes only from a device that was cut off for good: an RBD
   * image whose lock another server broke (the cluster blocklisted this
   * one).  Nothing this server writes can land any more: stop serving.
   */
  if (r == -ESHUTDOWN) {
    nbdkit_error ("cairn: pool %s was taken over by another server (this "
                  "one is blocklisted by the Ceph cluster): stopping",
                  pool_path);
    nbdkit_shutdown ();
  }
  return -1;
}

/* Free the configuration. */
static void
cairn_unload (void)
{
  for (unsigned i = 0; i < npool_paths; i++)
    free (pool_paths[i]);
  free (pool_path);
  free (ceph_conf);
  free (ceph_id);
  free (ceph_keyring);
  free (control_path);
  free (control_group);
  free (control_tcp_addr);
  free (control_tls_certs);
  free (control_tls_psk);
  free (control_tls_username);
  tls_ctx_free (control_tls_ctx);
  free (grants_path);
  grants_store_free (grants);
  free (default_export);
  free (metrics_addr);
}

/* Parse one key=value parameter. */
static int
cairn_config (const char *key, const char *value)
{
  if (strcmp (key, "pool") == 0) {
    size_t len = pool_path ? strlen (pool_path) : 0;
    char *p, *joined;

    if (npool_paths == DEV_CHUNK_MAX_MEMBERS) {
      nbdkit_error ("pool=: a pool has at most %u devices",
                    DEV_CHUNK_MAX_MEMBERS);
      return -1;
    }
    p = dev_is_rbd_name (value) ? strdup (value) : nbdkit_realpath (value);
    if (p == NULL) {
      if (dev_is_rbd_name (value))
        nbdkit_error ("strdup: %m");
      return -1;
    }
    joined = realloc (pool_path, len + strlen (p) + 2);
    if (joined == NULL) {
      nbdkit_error ("realloc: %m");
      free (p);
      return -1;
    }
    sprintf (joined + len, "%s%s", len ? "," : "", p);
    pool_path = joined;
    pool_paths[npool_paths++] = p;
  }
  else if (strcmp (key, "ceph-conf") == 0 ||
           strcmp (key, "ceph-keyring") == 0) {
    char **dst = key[5] == 'c' ? &ceph_conf : &ceph_keyring;

    free (*dst);
    *dst = nbdkit_realpath (value);
    if (*dst == NULL)
      return -1;
  }
  else if (strcmp (key, "ceph-id") == 0) {
    free (ceph_id);
    ceph_id = strdup (value);
    if (ceph_id == NULL) {
      nbdkit_error ("strdup: %m");
      return -1;
    }
  }
  else if (strcmp (key, "standby") == 0) {
    int r = nbdkit_parse_bool (value);
    if (r == -1)
      return -1;
    standby = r;
  }
  else if (strcmp (key, "degraded") == 0) {
    int r = nbdkit_parse_bool (value);
    if (r == -1)
      return -1;
    degraded = r;
  }
  else if (strcmp (key, "control") == 0) {
    free (control_path);
    control_path = nbdkit_absolute_path (value);
    if (control_path == NULL)
      return -1;
  }
  else if (strcmp (key, "control-tcp") == 0) {
    /* ADDR defaults to 127.0.0.1: without control-tls= the control
     * protocol has no authentication, so reaching it from other hosts
     * must be asked for by naming an address.
     */
    free (control_tcp_addr);
    control_tcp_addr = NULL;
    if (listen_parse ("control-tcp", value, &control_tcp_addr,
                      &control_tcp_port) < 0) {
      nbdkit_error ("%s", cairn_errmsg ());
      return -1;
    }
  }
  else if (strcmp (key, "metrics") == 0) {
    if (!metrics_supported ()) {
      nbdkit_error ("metrics=%s: this nbdkit-cairn-plugin was built without "
                    "metrics support (configure found no libmicrohttpd: "
                    "install libmicrohttpd-dev and build again)", value);
      return -1;
    }
    free (metrics_addr);
    metrics_addr = NULL;
    if (listen_parse ("metrics", value, &metrics_addr,
                      &metrics_port_arg) < 0) {
      nbdkit_error ("%s", cairn_errmsg ());
      return -1;
    }
  }
  else if (strcmp (key, "control-tls") == 0) {
    if (tls_parse_mode (value, &control_tls.mode) < 0) {
      nbdkit_error ("control-tls=%s: expected off, on or require", value);
      return -1;
    }
    tls_mode_set = true;
  }
  else if (strcmp (key, "control-tls-certificates") == 0) {
    free (control_tls_certs);
    control_tls_certs = nbdkit_realpath (value);
    if (control_tls_certs == NULL)
      return -1;
  }
  else if (strcmp (key, "control-tls-psk") == 0) {
    free (control_tls_psk);
    control_tls_psk = nbdkit_realpath (value);
    if (control_tls_psk == NULL)
      return -1;
  }
  else if (strcmp (key, "control-tls-username") == 0) {
    free (control_tls_username);
    control_tls_username = strdup (value);
    if (control_tls_username == NULL) {
      nbdkit_error ("strdup: %m");
      return -1;
    }
  }
  else if (strcmp (key, "grants") == 0) {
    free (grants_path);
    grants_path = nbdkit_realpath (value);
    if (grants_path == NULL)
      return -1;
  }
  else if (strcmp (key, "control-insecure") == 0) {
    int r = nbdkit_parse_bool (value);
    if (r == -1)
      return -1;
    control_insecure = r;
  }
  else if (strcmp (key, "control-tls-verify-peer") == 0) {
    int r = nbdkit_parse_bool (value);
    if (r == -1)
      return -1;
    control_tls.verify_peer = r;
  }
  else if (strcmp (key, "control-group") == 0) {
    free (control_group);
    control_group = strdup (value);
    if (control_group == NULL) {
      nbdkit_error ("strdup: %m");
      return -1;
    }
  }
  else if (strcmp (key, "cache") == 0) {
    cache_bytes = nbdkit_parse_size (value);
    if (cache_bytes == -1)
      return -1;
    if (cache_bytes < 1024 * 1024) {
      nbdkit_error ("cache=%s: the node cache needs at least 1M", value);
      return -1;
    }
  }
  else if (strcmp (key, "commit-interval") == 0) {
    if (nbdkit_parse_unsigned ("commit-interval", value, &commit_interval_ms) == -1)
      return -1;
    if (commit_interval_ms == 0) {
      nbdkit_error ("commit-interval=%s: give a period in milliseconds, "
                    "at least 1", value);
      return -1;
    }
  }
  else if (strcmp (key, "reclaim-step") == 0) {
    if (nbdkit_parse_unsigned ("reclaim-step", value, &reclaim_step) == -1)
      return -1;
    if (reclaim_step == 0) {
      nbdkit_error ("reclaim-step=%s: give how many nodes, extents and "
                    "deadlist entries a background reclaim step visits, at "
                    "least 1", value);
      return -1;
    }
  }
  else if (strcmp (key, "list-max") == 0) {
    if (nbdkit_parse_unsigned ("list-max", value, &list_max) == -1)
      return -1;
    if (list_max == 0 || list_max > LIST_MAX_NBDKIT) {
      nbdkit_error ("list-max=%s: give how many exports a listing holds at "
                    "most, 1 to %u (nbdkit's own bound)", value,
                    LIST_MAX_NBDKIT);
      return -1;
    }
  }
  else if (strcmp (key, "list-checkpoints") == 0) {
    int r = nbdkit_parse_bool (value);
    if (r == -1) {
      nbdkit_error ("list-checkpoints=%s: give true or false (list every "
                    "volume's checkpoints too)", value);
      return -1;
    }
    list_checkpoints = r;
  }
  else if (strcmp (key, "control-handshake-timeout") == 0) {
    if (nbdkit_parse_unsigned ("control-handshake-timeout", value,
                               &handshake_timeout_s) == -1)
      return -1;
    if (handshake_timeout_s == 0 || handshake_timeout_s > 3600) {
      nbdkit_error ("control-handshake-timeout=%s: give seconds, 1 to 3600",
                    value);
      return -1;
    }
  }
  else if (strcmp (key, "verify") == 0) {
    if (strcmp (value, "disk") == 0)
      check_every_read = false;
    else if (strcmp (value, "always") == 0)
      check_every_read = true;
    else {
      nbdkit_error ("verify=%s: give 'disk' (check data as it comes from the "
                    "disk, the default) or 'always' (check every read, even "
                    "a copy in the host's page cache)", value);
      return -1;
    }
  }
  else if (strcmp (key, "intent-log") == 0) {
    int r = nbdkit_parse_bool (value);
    if (r == -1)
      return -1;
    intent_log = r;
  }
  else if (strcmp (key, "readonly") == 0) {
    int r = nbdkit_parse_bool (value);
    if (r == -1)
      return -1;
    readonly_pool = r;
  }
  else if (strcmp (key, "default-export") == 0) {
    free (default_export);
    default_export = NULL;
    if (*value == '\0') {
      nbdkit_error ("default-export= needs an export name (VOL or VOL@SNAP)");
      return -1;
    }
    default_export = strdup (value);
    if (default_export == NULL) {
      nbdkit_error ("strdup: %m");
      return -1;
    }
  }
  else {
    nbdkit_error ("unknown parameter '%s' (see nbdkit-cairn-plugin(1))", key);
    return -1;
  }
  return 0;
}

/* Check the control-tls* parameters and load the credentials, so that a
 * bad file stops nbdkit before it serves anything.
 */
static int
control_tls_complete (void)
{
  bool files = control_tls_certs || control_tls_psk;

  control_tls.certificates = control_tls_certs;
  control_tls.psk_file = control_tls_psk;
  control_tls.username = control_tls_username;
  if (!tls_mode_set && files)
    control_tls.mode = TLS_REQUIRE;
  if (control_tls.mode != TLS_OFF && !files) {
    nbdkit_error ("control-tls=%s needs credentials: control-tls-certificates"
                  "=DIR (X.509) or control-tls-psk=FILE (pre-shared keys)",
                  tls_mode_name (control_tls.mode));
    return -1;
  }
  if (control_tls.verify_peer && (control_tls_certs == NULL ||
                                  control_tls_psk)) {
    nbdkit_error ("control-tls-verify-peer checks client certificates: it "
                  "needs control-tls-certificates=DIR (and no PSK file)");
    return -1;
  }
  if (control_tls_username && control_tls_psk == NULL) {
    nbdkit_error ("control-tls-username=%s names a user of the PSK file: "
                  "it needs control-tls-psk=FILE", control_tls_username);
    return -1;
  }
  if (!files)
    return 0;
  if (tls_ctx_new (&control_tls, true, &control_tls_ctx) < 0) {
    nbdkit_error ("control TLS: %s", cairn_errmsg ());
    return -1;
  }
  if (control_tls_username) {
    /* The identity replication jobs use must be in the file: say so now,
     * not at the first job.
     */
    struct tls_ctx *client;

    if (tls_ctx_new (&control_tls, false, &client) < 0) {
      nbdkit_error ("control-tls-username=%s: %s", control_tls_username,
                    cairn_errmsg ());
      return -1;
    }
    tls_ctx_free (client);
  }
  return 0;
}

/* Check that the required parameters were given. */
static int
cairn_config_complete (void)
{
  if (pool_path == NULL) {
    nbdkit_error ("the pool= parameter is required: nbdkit cairn pool=/path/to/pool");
    return -1;
  }
  for (unsigned i = 0; i < npool_paths; i++) {
    char *named;

    if (!dev_is_rbd_name (pool_paths[i]))
      continue;
    pool_on_rbd = true;
    named = dev_rbd_name_opts (pool_paths[i], ceph_conf, ceph_id,
                               ceph_keyring);
    if (named == NULL) {
      nbdkit_error ("out of memory");
      return -1;
    }
    free (pool_paths[i]);
    pool_paths[i] = named;
  }
  if (standby && (!pool_on_rbd || readonly_pool)) {
    nbdkit_error ("standby=true takes over a pool on RBD images "
                  "(pool=rbd:POOL/IMAGE) from a server that is gone, to "
                  "serve it read-write");
    return -1;
  }
  if (control_tcp_addr && control_path == NULL) {
    nbdkit_error ("control-tcp= needs control=SOCKET too: the local control "
                  "socket is always served");
    return -1;
  }
  if (control_tls_complete () == -1)
    return -1;
  if (grants_path && grants_store_open (grants_path, &grants) < 0) {
    nbdkit_error ("grants=%s: %s", grants_path, cairn_errmsg ());
    return -1;
  }
  if (control_tcp_addr && control_tls.mode == TLS_OFF && !control_insecure) {
    nbdkit_error ("control-tcp=%s:%u: %s", control_tcp_addr, control_tcp_port,
                  CONTROL_INSECURE_ADVICE);
    return -1;
  }
  return 0;
}

#define cairn_config_help \
  "pool=<PATH>             (required) The pool (file, block device or\n" \
  "                        rbd:POOL/IMAGE); once for each device of a\n" \
  "                        pool of several.\n" \
  "ceph-conf=<FILE>        For rbd: pools: the Ceph configuration file.\n" \
  "ceph-id=<ID>            ... the Ceph client id (default admin).\n" \
  "ceph-keyring=<FILE>     ... the keyring.\n" \
  "standby=<BOOL>          For rbd: pools: wait for the pool's lock and\n" \
  "                        take it over from a server that is gone.\n" \
  "degraded=<BOOL>         Open a pool of several devices with some\n" \
  "                        missing, read-only (default false).\n" \
  "control=<SOCKET>        Serve the control protocol on this socket.\n" \
  "control-group=<GROUP>   Group that may use the control socket.\n" \
  "control-tcp=[ADDR:]PORT Also serve the control protocol on TCP\n" \
  "                        (ADDR defaults to 127.0.0.1); needs TLS\n" \
  "                        keys or control-insecure=true.\n" \
  "grants=<FILE>           Who may do what (cairn-grants(5)).\n" \
  "control-insecure=<BOOL> Allow control-tcp= without TLS (trusted\n" \
  "                        networks only).\n" \
  "control-tls=off|on|require  TLS on the control TCP port.\n" \
  "control-tls-certificates=<DIR>  X.509 credentials (nbdkit's layout).\n" \
  "control-tls-psk=<FILE>  Pre-shared keys (username:hexkey lines).\n" \
  "control-tls-verify-peer=<BOOL>  Require client certificates.\n" \
  "control-tls-username=<NAME>  The PSK user replication jobs connect as\n" \
  "                        (default: the PSK file's first entry).\n" \
  "control-handshake-timeout=<S>  Close TCP control clients that have not\n" \
  "                        finished TLS setup in S seconds (default 10).\n" \
  "cache=<SIZE>            Node cache size (default 128M).\n" \
  "commit-interval=<MS>    Commit timer in milliseconds (default: the pool's).\n" \
  "reclaim-step=<N>        Items a background reclaim step visits (32768).\n" \
  "verify=disk|always      Check data that comes from the disk (default)\n" \
  "                        or every read, cached copies too.\n" \
  "intent-log=<BOOL>       Flushes write the pool's intent log instead of\n" \
  "                        committing (false).\n" \
  "readonly=<BOOL>         Serve every export read-only.\n" \
  "list-max=<N>            Exports a listing holds at most (10000).\n" \
  "list-checkpoints=<BOOL> List every volume's checkpoints too (false).\n" \
  "default-export=<NAME>   Export served for the empty export name.\n" \
  "metrics=[ADDR:]PORT     Serve Prometheus metrics on HTTP at /metrics\n" \
  "                        (ADDR defaults to 127.0.0.1)."

/* Print version and features for `nbdkit --dump-plugin cairn`. */
static void
cairn_dump_plugin (void)
{
  printf ("cairn_version=%s\n", PACKAGE_VERSION);
  printf ("cairn_format_version=%u\n", POOL_FORMAT_VERSION);
  printf ("cairn_checksum=sha256\n");
  printf ("cairn_checksum_impl=%s\n", sha256_blocks_impl ());
  printf ("cairn_exports=yes\n");
  printf ("cairn_metrics=%s\n", metrics_supported () ? "yes" : "no");
}

/* Open the device and the pool; with quiet_busy, a device in use
 * returns -EBUSY without an error logged (standby.c).
 */
static int
open_pool (bool quiet_busy)
{
  struct pool_open_opts opts = {
    .cache_bytes = (uint64_t) cache_bytes,
    .readonly = readonly_pool,
    .check_every_read = check_every_read,
    .intent_log = intent_log,
  };
  int r;

  r = dev_pool_open ((const char *const *) pool_paths, npool_paths,
                     (readonly_pool ? DEV_CHUNK_RDONLY : 0) |
                     (degraded ? DEV_CHUNK_DEGRADED : 0), &dev);
  if (r == -EBUSY && quiet_busy)
    return r;
  if (r < 0) {
    nbdkit_error ("%s", cairn_errmsg ());
    return -1;
  }
  r = pool_open (dev, &opts, &pool);
  if (r < 0) {
    nbdkit_error ("%s", cairn_errmsg ());
    dev_close (dev);
    dev = NULL;
    return -1;
  }
  pool_readonly = readonly_pool || pool_is_readonly (pool);
  nbdkit_debug ("cairn: opened pool %s at generation %" PRIu64 "%s, "
                "checking %s", pool_path, pool_open_gen (pool) - 1,
                pool_readonly ? ", read-only" : "",
                dev_trusting (dev) ? "what comes from the disk"
                                   : "every read");
  if (dev_trusting (dev))
    nbdkit_debug ("cairn: a cached read is known not to have read from the "
                  "disk through %s", dev_cache_watch (dev));
  if (dev_is_chunked (dev)) {
    struct dev_chunk_info ci;

    dev_chunk_info (dev, &ci);
    nbdkit_debug ("cairn: %u devices, profile %s%s", ci.nmembers,
                  dev_profile_name (ci.profile),
                  ci.missing ? ", degraded: served read-only" : "");
  }
  if (pool_readonly && !readonly_pool && !degraded)
    nbdkit_debug ("cairn: the engine opened the pool read-only "
                  "(a feature this version cannot write)");
  return 0;
}

/* standby=true's try_open (standby.c): the pool, or -EBUSY quietly. */
static int
open_standby_pool (void)
{
  return open_pool (true);
}

/* Open the pool before nbdkit forks (see the top).  A pool on RBD images
 * is only tried here: librados runs threads of its own, which a fork
 * leaves behind, so the device is opened (its lock taken, so that a pool
 * in use fails here, where the user sees it) and closed again, and the
 * pool is opened for good in .after_fork.
 */
static int
cairn_get_ready (void)
{
  int r;

  if (!pool_on_rbd)
    return open_pool (false);
  if (standby)
    return 0;                   /* the lock is expected to be held */
  r = dev_pool_open ((const char *const *) pool_paths, npool_paths,
                     (readonly_pool ? DEV_CHUNK_RDONLY : 0) |
                     (degraded ? DEV_CHUNK_DEGRADED : 0), &dev);
  if (r < 0) {
    nbdkit_error ("%s", cairn_errmsg ());
    return -1;
  }
  dev_close (dev);
  dev = NULL;
  return 0;
}

/* The control server's log lines go to nbdkit's debug output. */
static void
control_log (void *opaque, const char *msg)
{
  nbdkit_debug ("cairn control: %s", msg);
}

/* Changes made through control go to nbdkit's log whatever its debug
 * setting (the audit trail, cairn-grants(5) AUDIT).
 */
static void
control_audit (void *opaque, const char *line)
{
  nbdkit_error ("cairn audit: %s", line);
}

/* Refused and failed TLS clients are errors in nbdkit's log. */
static void
control_warn (void *opaque, const char *msg)
{
  nbdkit_error ("cairn %s", msg);
}

/* Start the control server: for a standby that waits, with the one
 * method it answers then (pool.status: what it waits for); else with
 * every method, on the open pool.
 */
static int
start_control (bool waiting)
{
  static struct control_method_table tables[3];
  struct control_config cfg = {
    .unix_path = control_path,
    .unix_group = control_group,
    .tcp_address = control_tcp_addr,
    .tcp_port = control_tcp_port,
    .tcp_insecure = control_insecure,
    .grants = grants,
    .tls_mode = control_tls.mode,
    .tls = control_tls_ctx,
    .tables = tables,
    .n_tables = waiting ? 1 : ARRAY_SIZE (tables),
    .opaque = &methods_ctx,
    .log = control_log,
    .warn = control_warn,
    .audit = control_audit,
    .background_jobs = waiting ? NULL : cairn_background_jobs,
    .handshake_timeout_ms = handshake_timeout_s * 1000,
  };
  int r;

  if (waiting)
    tables[0] = cairn_standby_methods;
  else {
    tables[0] = cairn_catalog_methods;
    tables[1] = cairn_stream_methods;
    tables[2] = cairn_replicate_methods;
  }
  methods_ctx.pool = pool;
  methods_ctx.tls = &control_tls;
  methods_ctx.standby_status = standby_status;
  r = control_server_start (&cfg, &control);
  if (r < 0) {
    nbdkit_error ("control socket %s: %s", control_path, cairn_errmsg ());
    return -1;
  }
  nbdkit_debug ("cairn: control server on %s%s", control_path,
                waiting ? " (a standby's: pool.status only)" : "");
  if (control_tcp_addr)
    nbdkit_debug ("cairn: control server on TCP %s port %u (TLS %s)",
                  control_tcp_addr, control_server_tcp_port (control),
                  tls_mode_name (control_tls.mode));
  return 0;
}

/* standby=true: answer pool.status on the control socket while waiting
 * for the pool (standby.c), then open it; the waiting control server
 * stops, and start_control starts the full one after.
 */
static int
open_standby (void)
{
  int r;

  if (control_path && start_control (true) < 0)
    return -1;
  r = standby_wait (pool_paths, npool_paths, pool_path, open_standby_pool);
  control_server_stop (control);
  control = NULL;
  return r;
}

/* Start the threads: nbdkit has forked by now (see the top). */
static int
cairn_after_fork (void)
{
  int r;

  /* First: nbdkit's listeners are the only sockets open now. */
  if (stop_watch_start () < 0)
    return -1;
  if (pool_on_rbd && (standby ? open_standby () : open_pool (false)) < 0)
    return -1;
  /* Before any background thread can read it. */
  if (reclaim_step)
    vol_reclaim_set_budget (pool, reclaim_step);
  if (!pool_readonly) {
    pool_preload_space (pool);    /* clients read while it loads */
    r = pool_start_committer (pool, commit_interval_ms);
    if (r < 0) {
      nbdkit_error ("%s", cairn_errmsg ());
      return -1;
    }
  }
  /* A device replace that the labels say is in progress goes on (its
   * thread could not have outlived the fork).
   */
  if (dev_is_chunked (dev) && !readonly_pool &&
      dev_chunk_replace_resume (dev) < 0)
    nbdkit_error ("%s", cairn_errmsg ());
  if (control_path && start_control (false) < 0)
    return -1;
  if (metrics_addr) {
    metrics_src = (struct metrics_source) {
      .pool = pool, .control = control,
      .background_jobs = cairn_background_jobs, .opaque = &methods_ctx,
    };
    methods_ctx.pool = pool;
    r = metrics_start (metrics_addr, metrics_port_arg, &metrics_src, &metrics);
    if (r < 0) {
      nbdkit_error ("metrics=%s:%u: %s", metrics_addr, metrics_port_arg,
                    cairn_errmsg ());
      return -1;
    }
    nbdkit_debug ("cairn: metrics on http://%s:%u/metrics", metrics_addr,
                  metrics_port (metrics));
  }
  return 0;
}

/* Stop the commit thread, commit and close the pool, close the device. */
static void
cairn_cleanup (void)
{
  stop_watch_end ();
  metrics_stop (metrics);      /* it reads the control server and the pool */
  metrics = NULL;
  control_server_stop (control);
  control = NULL;
  if (pool) {
    pool_stop_committer (pool);
    if (pool_close (pool) < 0)
      nbdkit_error ("closing the pool: %s (the pool stays at its last "
                    "durable generation)", cairn_errmsg ());
    pool = NULL;
  }
  if (dev) {
    dev_close (dev);
    dev = NULL;
  }
}

/* Write the export description of info (DESIGN §3) into buf:
 * "volume, 10G, created 2026-12-02T10:00:00Z",
 * "snapshot of VOL, read-only, 10G, created ...",
 * "checkpoint #412 of VOL, read-only, 10G, taken ..." (a generation
 * without a snapshot, with a time: a checkpoint's; opened as VOL@TIME,
 * the generation says which),
 * "VOL at generation 42, read-only, 10G" (one only a clone pins).
 * The time is left out when the engine does not give one.
 */
static void
describe (const struct vol_info *info, bool readonly, char *buf, size_t len)
{
  char size[UNITS_FORMAT_MAX], when[48] = "";
  time_t t = (time_t) info->ctime;
  bool checkpoint = info->is_snapshot && !info->snap[0] && info->ctime;
  struct tm tm;

  if (info->ctime && gmtime_r (&t, &tm) != NULL)
    strftime (when, sizeof when, checkpoint ? ", taken %Y-%m-%dT%H:%M:%SZ"
              : ", created %Y-%m-%dT%H:%M:%SZ", &tm);
  units_format (info->size, size);
  if (info->is_snapshot && info->snap[0])
    snprintf (buf, len, "snapshot of %s, read-only, %s%s",
              info->name, size, when);
  else if (checkpoint)
    snprintf (buf, len, "checkpoint #%" PRIu64 " of %s, read-only, %s%s",
              info->gen, info->name, size, when);
  else if (info->is_snapshot)
    snprintf (buf, len, "%s at generation %" PRIu64 ", read-only, %s%s",
              info->name, info->gen, size, when);
  else
    snprintf (buf, len, "volume%s, %s%s",
              readonly || info->readonly ? ", read-only" : "", size, when);
}

/* The export name of a listed volume or snapshot. */
static void
export_name (const struct vol_info *info, char *buf, size_t len)
{
  if (info->is_snapshot)
    snprintf (buf, len, "%s@%s", info->name, info->snap);
  else
    snprintf (buf, len, "%s", info->name);
}

/* The sections of a listing: live volumes, snapshots. */
static bool
want_volume (const struct vol_info *info)
{
  return !info->is_snapshot;
}

static bool
want_snapshot (const struct vol_info *info)
{
  return info->is_snapshot;
}

/* A listing in progress: live volumes first, then snapshots (each
 * volume's oldest first, volumes in name order), at most list_max
 * entries.  The last entry is held back (last, last_desc) until the
 * listing knows how many did not fit, which its description then says.
 * With list-checkpoints=true the checkpoints are one more section after
 * the snapshots, read volume by volume (list_checkpoint_section).
 */
struct list_ctx {
  struct nbdkit_exports *exports;
  bool readonly;
  struct grant_peer peer;       /* the client, for grants= */
  bool (*want) (const struct vol_info *info);   /* this section's filter */
  unsigned listed;              /* entries added, the held one included */
  uint64_t left_out;            /* states past the bound */
  bool held;
  char last[2 * VOL_NAME_MAX + 2], last_desc[2 * VOL_NAME_MAX + 128];
  /* With list-checkpoints: the live volumes' names, for the checkpoints'
   * section (read before it: no listing runs inside another).
   */
  char (*vols)[VOL_NAME_MAX + 1];
  size_t nvols, capvols;
  const char *vol;              /* the volume whose checkpoints are listed */
};

/* Remember a live volume's name for the checkpoints' section. */
static int
keep_volume_name (struct list_ctx *ctx, const char *name)
{
  if (ctx->nvols == ctx->capvols) {
    size_t cap = ctx->capvols ? 2 * ctx->capvols : 64;
    char (*v)[VOL_NAME_MAX + 1] = realloc (ctx->vols, cap * sizeof *v);

    if (v == NULL) {
      nbdkit_error ("listing exports: out of memory");
      return -ENOMEM;
    }
    ctx->vols = v;
    ctx->capvols = cap;
  }
  snprintf (ctx->vols[ctx->nvols++], VOL_NAME_MAX + 1, "%s", name);
  return 0;
}

/* Add one entry (name, desc) to the listing, or hold it back when it fills
 * the list, or count it when the list is full.
 */
static int
add_entry (struct list_ctx *ctx, const char *name, const char *desc)
{
  if (ctx->listed == list_max) {
    ctx->left_out++;
    return 0;
  }
  if (++ctx->listed == list_max) {
    snprintf (ctx->last, sizeof ctx->last, "%s", name);
    snprintf (ctx->last_desc, sizeof ctx->last_desc, "%s", desc);
    ctx->held = true;
    return 0;
  }
  return nbdkit_add_export (ctx->exports, name, desc) == -1 ? -ENOMEM : 0;
}

/* vol_list callback: add one export of the section, hold back the one
 * that fills the list, count those past it.
 */
static int
add_export (void *opaque, const struct vol_info *info)
{
  struct list_ctx *ctx = opaque;
  char name[2 * VOL_NAME_MAX + 2], desc[2 * VOL_NAME_MAX + 128];

  if (!ctx->want (info))
    return 0;
  if (grants_store_nbd (grants, &ctx->peer, info->name) == GRANT_NBD_NONE)
    return 0;                   /* not this client's: not listed */
  if (list_checkpoints && ctx->want == want_volume &&
      keep_volume_name (ctx, info->name) < 0)
    return -ENOMEM;
  export_name (info, name, sizeof name);
  describe (info, ctx->readonly ||
            grants_store_nbd (grants, &ctx->peer, info->name) == GRANT_NBD_RO,
            desc, sizeof desc);
  return add_entry (ctx, name, desc);
}

/* Add the held-back last entry, saying how many states did not fit. */
static int
add_last (struct list_ctx *ctx)
{
  char desc[sizeof ctx->last_desc + 256];

  if (!ctx->held)
    return 0;
  if (ctx->left_out == 0)
    snprintf (desc, sizeof desc, "%s", ctx->last_desc);
  else {
    snprintf (desc, sizeof desc, "%s; the list stops here, at %u exports: "
              "%" PRIu64 " more not listed (all can be opened by name; "
              "'cairn snapshot list VOL' lists a volume's snapshots%s)",
              ctx->last_desc, list_max, ctx->left_out,
              list_checkpoints ? ", 'cairn checkpoint list VOL' its "
              "checkpoints" : "");
    nbdkit_debug ("listing exports: %" PRIu64 " left out past list-max=%u",
                  ctx->left_out, list_max);
  }
  return nbdkit_add_export (ctx->exports, ctx->last, desc) == -1 ? -ENOMEM : 0;
}

/* vol_list_tolerant callback: a snapshot or a volume whose record is
 * damaged is not exported (opening it fails); say so in the server's log,
 * once: volumes in the volumes' section, snapshots in the snapshots'.
 */
static int
skip_damaged (void *opaque, const struct vol_damage *d)
{
  struct list_ctx *ctx = opaque;
  bool volume = d->kind == VOL_DAMAGE_VOLUME;

  if (volume && ctx->want == want_volume)
    nbdkit_error ("listing exports: leaving out volume %s and its snapshots: "
                  "%s (run 'cairn fsck')", *d->name ? d->name : "?", d->what);
  else if (!volume && ctx->want == want_snapshot)
    nbdkit_error ("listing exports: leaving out %s@%s: %s (run 'cairn fsck')",
                  d->name, *d->snap ? d->snap : "?", d->what);
  return 0;
}

/* One section of the listing: the states that want picks. */
static int
list_section (struct list_ctx *ctx, bool (*want) (const struct vol_info *),
              bool with_snapshots)
{
  ctx->want = want;
  return vol_list_tolerant (pool, with_snapshots, add_export, skip_damaged,
                            ctx);
}

/* vol_checkpoint_list callback: add checkpoint c of ctx->vol as VOL@#GEN,
 * described as an open one is.
 */
static int
add_checkpoint (void *opaque, const struct vol_checkpoint *c)
{
  struct list_ctx *ctx = opaque;
  char name[2 * VOL_NAME_MAX + 2], desc[2 * VOL_NAME_MAX + 128];
  struct vol_info info = {
    .is_snapshot = true, .gen = c->gen, .ctime = c->ctime, .size = c->size,
  };

  snprintf (info.name, sizeof info.name, "%s", ctx->vol);
  snprintf (name, sizeof name, "%s@#%" PRIu64, ctx->vol, c->gen);
  describe (&info, true, desc, sizeof desc);
  return add_entry (ctx, name, desc);
}

/* The checkpoints' section (list-checkpoints=true): each live volume's
 * checkpoints, oldest first, volumes in name order.  A volume deleted
 * meanwhile has none; one whose checkpoints cannot be read is left out
 * and logged.
 */
static int
list_checkpoint_section (struct list_ctx *ctx)
{
  for (size_t i = 0; i < ctx->nvols; i++) {
    int r;

    ctx->vol = ctx->vols[i];
    cairn_error_clear ();
    r = vol_checkpoint_list (pool, ctx->vol, 0, UINT64_MAX, add_checkpoint,
                             ctx);
    if (r == -ENOMEM)
      return r;
    if (r < 0 && r != -ENOENT)
      nbdkit_error ("listing exports: leaving out the checkpoints of %s: %s",
                    ctx->vol, cairn_errmsg ());
  }
  return 0;
}

/* What grants= know of this NBD connection's client: its uid and gid on
 * a Unix socket, its address on TCP, whether it uses TLS, and, where
 * nbdkit tells plugins (nbdkit_peer_tls_dn, not in 1.32), its
 * certificate's subject CN.
 */
static void
nbd_peer (int is_tls, struct grant_peer *p)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;

  memset (p, 0, sizeof *p);
  p->tls = is_tls > 0;
  if (grants == NULL || nbdkit_peer_name ((struct sockaddr *) &ss, &len) == -1)
    return;
  if (ss.ss_family == AF_UNIX) {
    int64_t uid = nbdkit_peer_uid (), gid = nbdkit_peer_gid ();

    if (uid >= 0 && gid >= 0) {
      p->has_cred = true;
      p->uid = (uid_t) uid;
      p->gid = (gid_t) gid;
      p->owner = uid == 0 || (uid_t) uid == geteuid ();
    }
  }
  else if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
    p->has_addr = true;
    p->addr = ss;
  }
#if HAVE_DECL_NBDKIT_PEER_TLS_DN
  if (p->tls) {
    /* The certificate's subject CN, as the control server names it. */
    static __thread char cn[256];
    char *dn = nbdkit_peer_tls_dn ();

    if (dn && grants_dn_common_name (dn, cn, sizeof cn))
      p->x509_name = cn;
    free (dn);
  }
#endif
}

/* List the live volumes, then the snapshots, then with list-checkpoints
 * the checkpoints, up to list_max exports (see struct list_ctx), asking
 * the engine each time; one damaged record leaves out only what it
 * describes.
 */
static int
cairn_list_exports (int readonly, int is_tls, struct nbdkit_exports *exports)
{
  struct list_ctx ctx = {
    .exports = exports,
    .readonly = readonly || pool_readonly,
  };
  int r;

  nbd_peer (is_tls, &ctx.peer);
  cairn_error_clear ();
  r = list_section (&ctx, want_volume, false);
  if (r == 0)
    r = list_section (&ctx, want_snapshot, true);
  if (r == 0 && list_checkpoints)
    r = list_checkpoint_section (&ctx);
  if (r == 0)
    r = add_last (&ctx);
  free (ctx.vols);
  if (r < 0) {
    /* nbdkit_add_export has already reported its own failure. */
    if (*cairn_errmsg ())
      nbdkit_error ("listing exports: %s", cairn_errmsg ());
    return -1;
  }
  return 0;
}

/* A bounded list of volume names, for the "no default export" message. */
struct names_ctx {
  char buf[512];
  size_t len;
  unsigned n;
  bool full;
};

/* vol_list callback: append one volume name while there is room. */
static int
add_name (void *opaque, const struct vol_info *info)
{
  struct names_ctx *ctx = opaque;
  size_t room = sizeof ctx->buf - ctx->len;
  int w;

  if (ctx->full)
    return 0;
  if (ctx->n == 8 || room < strlen (info->name) + 16) {
    snprintf (ctx->buf + ctx->len, room, ", ...");
    ctx->full = true;                   /* the list is long enough */
    return 0;
  }
  w = snprintf (ctx->buf + ctx->len, room, "%s'%s'",
                ctx->n ? ", " : "", info->name);
  ctx->len += (size_t) w;
  ctx->n++;
  return 0;
}

/* vol_list_tolerant callback: a damaged volume is no export to suggest. */
static int
no_damage (void *opaque, const struct vol_damage *d)
{
  (void) opaque, (void) d;
  return 0;
}

/* The export served for the empty name: default-export=, or none. */
static const char *
cairn_default_export (int readonly, int is_tls)
{
  struct names_ctx ctx = { .buf = "" };

  if (default_export)
    return default_export;
  /* Refused.  Tell the operator (the message goes to nbdkit's log) what
   * the client could have asked for.  The result is ignored: the list is
   * only a hint.
   */
  if (vol_list_tolerant (pool, false, add_name, no_damage, &ctx) < 0)
    nbdkit_error ("no default export: default-export= is not set (listing "
                  "the volumes failed: %s)", cairn_errmsg ());
  else if (ctx.n == 0)
    nbdkit_error ("no default export: the pool has no volume yet, and "
                  "default-export= is not set");
  else
    nbdkit_error ("no default export: use one of %s (or start the server "
                  "with default-export=NAME)", ctx.buf);
  return NULL;
}

/* Open a connection: the volume or snapshot named by the export name,
 * if the client's grants give it access (a name they do not is unknown,
 * in the words used for a missing one; a read-only grant opens it
 * read-only).  The access is decided here, once: a reload of the grants
 * changes what later connections get (cairn-grants(5), RELOADING).
 */
static void *
cairn_open (int readonly)
{
  const char *name = nbdkit_export_name ();
  struct grant_peer peer;
  enum grant_nbd access;
  struct handle *h;
  int r;

  if (name == NULL)
    return NULL;
  nbd_peer (nbdkit_is_tls (), &peer);
  access = grants_store_nbd (grants, &peer, name);
  if (access == GRANT_NBD_NONE) {
    char who[300];

    grants_peer_name (&peer, who, sizeof who);
    nbdkit_debug ("cairn: grants give %s no access to '%s'", who, name);
    nbdkit_error ("unknown export '%s': no volume named '%.*s'", name,
                  (int) strcspn (name, "@"), name);
    return NULL;
  }
  if (access == GRANT_NBD_RO)
    readonly = 1;
  h = calloc (1, sizeof *h);
  if (h == NULL || (h->name = strdup (name)) == NULL) {
    nbdkit_error ("calloc: %m");
    free (h);
    return NULL;
  }
  cairn_error_clear ();
  r = vol_open (pool, name, &h->vol);
  if (r < 0) {
    if (r == -ENOENT || r == -EINVAL)
      nbdkit_error ("unknown export '%s': %s", name, cairn_errmsg ());
    else
      nbdkit_error ("opening export '%s': %s", name, cairn_errmsg ());
    free (h->name);
    free (h);
    return NULL;
  }
  /* Count this connection's I/O in the export's statistics (stats.list). */
  r = vol_stats_track (h->vol, name);
  if (r < 0) {
    nbdkit_error ("opening export '%s': %s", name, cairn_errmsg ());
    vol_close (h->vol);
    free (h->name);
    free (h);
    return NULL;
  }
  h->readonly = readonly || pool_readonly || vol_is_readonly (h->vol);
  nbdkit_debug ("cairn: opened export '%s'%s, %" PRIu64 " bytes", name,
                h->readonly ? " read-only" : "", vol_size (h->vol));
  return h;
}

/* Close a connection. */
static void
cairn_close (void *handle)
{
  struct handle *h = handle;

  vol_close (h->vol);
  free (h->name);
  free (h);
}

/* Size of the export. */
static int64_t
cairn_get_size (void *handle)
{
  struct handle *h = handle;

  return (int64_t) vol_size (h->vol);
}

/* The export's description, as in the export list. */
static const char *
cairn_export_description (void *handle)
{
  struct handle *h = handle;
  struct vol_info info;
  char desc[2 * VOL_NAME_MAX + 128];

  vol_get_info (h->vol, &info);
  describe (&info, h->readonly, desc, sizeof desc);
  return nbdkit_strdup_intern (desc);
}

/* Block size constraints (see BLOCK_*). */
static int
cairn_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
                  uint32_t *maximum)
{
  *minimum = BLOCK_MIN;
  *preferred = BLOCK_PREFERRED;
  *maximum = BLOCK_MAX;
  return 0;
}

/* Writes, trims and zeroes: only on a writable export. */
static int
cairn_can_write (void *handle)
{
  struct handle *h = handle;

  return !h->readonly;
}

/* Flush is a group commit of the whole pool. */
static int
cairn_can_flush (void *handle)
{
  return 1;
}

/* FUA is native: the engine commits before the write returns. */
static int
cairn_can_fua (void *handle)
{
  struct handle *h = handle;

  return h->readonly ? NBDKIT_FUA_NONE : NBDKIT_FUA_NATIVE;
}

/* Zero is always fast: it stores nothing, so fast-zero requests never
 * need to fail.
 */
static int
cairn_can_fast_zero (void *handle)
{
  return 1;
}

/* Extents come from the volume's extent map. */
static int
cairn_can_extents (void *handle)
{
  return 1;
}

/* Cache is native (vol_cache): the engine reads the range and drops the
 * data, which warms the node cache along the very path later reads take
 * and checks the data's checksums, and counts one cache request.
 */
static int
cairn_can_cache (void *handle)
{
  return NBDKIT_CACHE_NATIVE;
}

/* Several connections may share an export: a flush or FUA commits the
 * whole pool, so it covers the writes of every connection.
 */
static int
cairn_can_multi_conn (void *handle)
{
  return 1;
}

/* The start of a request, to time it: only with metrics= (0 otherwise,
 * and no clock is read).
 */
static inline uint64_t
time_start (void)
{
  return metrics_addr ? lat_now_ns () : 0;
}

/* Record how long a request that succeeded (r == 0) took, into its
 * export's histogram (lock-free: engine/volstats.c); pass r on.
 */
static inline int
time_end (struct handle *h, enum vol_op op, uint64_t start, int r)
{
  if (start && r == 0)
    vol_stats_time (h->vol, op, lat_now_ns () - start);
  return r;
}

/* Read from the export. */
static int
cairn_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
             uint32_t flags)
{
  struct handle *h = handle;
  int r;

  if (cairn_debug_verbose)
    nbdkit_debug ("%s: pread count=%" PRIu32 " offset=%" PRIu64,
                  h->name, count, offset);
  uint64_t t = time_start ();
  r = vol_pread (h->vol, buf, count, offset);
  return r < 0 ? engine_error (h, "pread", r) : time_end (h, VOL_OP_READ, t, 0);
}

/* Write to the export. */
static int
cairn_pwrite (void *handle, const void *buf, uint32_t count, uint64_t offset,
              uint32_t flags)
{
  struct handle *h = handle;
  unsigned vflags = flags & NBDKIT_FLAG_FUA ? VOL_FUA : 0;
  int r;

  if (cairn_debug_verbose)
    nbdkit_debug ("%s: pwrite count=%" PRIu32 " offset=%" PRIu64 "%s",
                  h->name, count, offset, vflags ? " fua" : "");
  uint64_t t = time_start ();
  r = vol_pwrite (h->vol, buf, count, offset, vflags);
  return r < 0 ? engine_error (h, "pwrite", r) : time_end (h, VOL_OP_WRITE, t, 0);
}

/* Make every acknowledged write of the pool durable. */
static int
cairn_flush (void *handle, uint32_t flags)
{
  struct handle *h = handle;
  int r;

  if (cairn_debug_verbose)
    nbdkit_debug ("%s: flush", h->name);
  if (pool_readonly)
    return 0;                   /* nothing can have been written */
  uint64_t t = time_start ();
  r = vol_flush (h->vol);
  return r < 0 ? engine_error (h, "flush", r) : time_end (h, VOL_OP_FLUSH, t, 0);
}

/* Trim, zero or cache [offset, offset + count).  A request may be up to
 * 4 GiB, more than one engine call takes (VOL_MAX_IO), so it goes in
 * pieces: VOL_MORE on all but the last, so that the statistics count one
 * request; FUA rides on the last, whose commit covers the pool and so
 * every piece.
 */
static int
punch (struct handle *h, const char *what,
       int (*fn) (struct cairn_volume *, uint32_t, uint64_t, unsigned),
       uint32_t count, uint64_t offset, uint32_t flags)
{
  unsigned fua = flags & NBDKIT_FLAG_FUA ? VOL_FUA : 0;

  if (cairn_debug_verbose)
    nbdkit_debug ("%s: %s count=%" PRIu32 " offset=%" PRIu64 "%s",
                  h->name, what, count, offset, fua ? " fua" : "");
  do {
    uint32_t n = count < VOL_MAX_IO ? count : VOL_MAX_IO;
    int r = fn (h->vol, n, offset, n == count ? fua : VOL_MORE);

    if (r < 0)
      return engine_error (h, what, r);
    count -= n;
    offset += n;
  } while (count > 0);
  return 0;
}

/* Trim: the range becomes a hole. */
static int
cairn_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  uint64_t t = time_start ();

  return time_end (handle, VOL_OP_TRIM, t,
                   punch (handle, "trim", vol_trim, count, offset, flags));
}

/* Zero: the range becomes a hole too (MAY_TRIM and FAST_ZERO need nothing
 * more: a hole is how zeroes are stored, and storing it is fast).
 */
static int
cairn_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  uint64_t t = time_start ();

  return time_end (handle, VOL_OP_ZERO, t,
                   punch (handle, "zero", vol_zero, count, offset, flags));
}

/* Cache: read and check the range, in pieces as punch does. */
static int
cairn_cache (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  return punch (handle, "cache", vol_cache, count, offset, 0);
}

/* vol_extents callback: one run of data or hole. */
static int
add_extent (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  struct nbdkit_extents *extents = opaque;
  uint32_t t = type & VOL_EXTENT_HOLE ?
    NBDKIT_EXTENT_HOLE | NBDKIT_EXTENT_ZERO : 0;

  return nbdkit_add_extent (extents, off, len, t) == -1 ? -ENOMEM : 0;
}

/* Block status (base:allocation): zeroed and trimmed ranges are holes.
 * A request may cover up to 4 GiB, more than one engine call takes
 * (VOL_MAX_IO); nbdkit lets a plugin describe only a prefix of the range,
 * and the client asks again for the rest.
 */
static int
cairn_extents (void *handle, uint32_t count, uint64_t offset, uint32_t flags,
               struct nbdkit_extents *extents)
{
  struct handle *h = handle;
  int r;

  if (cairn_debug_verbose)
    nbdkit_debug ("%s: extents count=%" PRIu32 " offset=%" PRIu64 "%s",
                  h->name, count, offset,
                  flags & NBDKIT_FLAG_REQ_ONE ? " req_one" : "");
  if (count > VOL_MAX_IO)
    count = VOL_MAX_IO;
  cairn_error_clear ();
  r = vol_extents (h->vol, count, offset, add_extent, extents);
  if (r < 0) {
    if (*cairn_errmsg () == '\0')
      return -1;                /* nbdkit_add_extent reported it */
    return engine_error (h, "extents", r);
  }
  return 0;
}

static struct nbdkit_plugin plugin = {
  .name = "cairn",
  .longname = "Cairn copy-on-write volumes",
  .version = PACKAGE_VERSION,
  .description = "Serves the volumes, snapshots and checkpoints of a Cairn pool.",
  .unload = cairn_unload,
  .config = cairn_config,
  .config_complete = cairn_config_complete,
  .config_help = cairn_config_help,
  .magic_config_key = "pool",
  .dump_plugin = cairn_dump_plugin,
  .get_ready = cairn_get_ready,
  .after_fork = cairn_after_fork,
  .cleanup = cairn_cleanup,
  .list_exports = cairn_list_exports,
  .default_export = cairn_default_export,
  .open = cairn_open,
  .close = cairn_close,
  .get_size = cairn_get_size,
  .export_description = cairn_export_description,
  .block_size = cairn_block_size,
  .can_write = cairn_can_write,
  .can_flush = cairn_can_flush,
  .can_trim = cairn_can_write,
  .can_zero = cairn_can_write,
  .can_fast_zero = cairn_can_fast_zero,
  .can_fua = cairn_can_fua,
  .can_extents = cairn_can_extents,
  .can_cache = cairn_can_cache,
  .can_multi_conn = cairn_can_multi_conn,
  .pread = cairn_pread,
  .pwrite = cairn_pwrite,
  .flush = cairn_flush,
  .trim = cairn_trim,
  .zero = cairn_zero,
  .extents = cairn_extents,
  .cache = cairn_cache,
};

NBDKIT_REGISTER_PLUGIN (plugin)
