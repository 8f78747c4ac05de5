/* nbdkit-cairn-plugin: serves the volumes of a Cairn pool as NBD exports.
 *
 * This file fills nbdkit's callback table and turns its parameters into an
 * engine configuration.  The engine (engine/) does the storage; the control
 * server (server/) will run on its own libuv thread started in .after_fork.
 *
 * State today: the parameters are parsed and validated, and the plugin loads
 * and describes itself (`nbdkit --dump-plugin cairn`); serving exports needs
 * the volume layer, which is not built yet, so opening a connection fails
 * with a message that says so.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

/* Configuration from the command line (nbdkit's statics stay here). */
static char *pool_path;
static char *control_path;
static int64_t cache_bytes = 256 * 1024 * 1024;
static unsigned commit_interval_ms = 5000;
static bool readonly_pool;
static char *default_export;

/* Free the configuration. */
static void
cairn_unload (void)
{
  free (pool_path);
  free (control_path);
  free (default_export);
}

/* Parse one key=value parameter. */
static int
cairn_config (const char *key, const char *value)
{
  if (strcmp (key, "pool") == 0) {
    free (pool_path);
    pool_path = nbdkit_realpath (value);
    if (pool_path == NULL)
      return -1;
  }
  else if (strcmp (key, "control") == 0) {
    free (control_path);
    control_path = nbdkit_absolute_path (value);
    if (control_path == NULL)
      return -1;
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
  }
  else if (strcmp (key, "readonly") == 0) {
    int r = nbdkit_parse_bool (value);
    if (r == -1)
      return -1;
    readonly_pool = r;
  }
  else if (strcmp (key, "default-export") == 0) {
    free (default_export);
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

/* Check that the required parameters were given. */
static int
cairn_config_complete (void)
{
  if (pool_path == NULL) {
    nbdkit_error ("the pool= parameter is required: nbdkit cairn pool=/path/to/pool");
    return -1;
  }
  return 0;
}

#define cairn_config_help \
  "pool=<PATH>             (required) The pool (file or block device).\n" \
  "control=<SOCKET>        Control socket path.\n" \
  "cache=<SIZE>            Node cache size (default 256M).\n" \
  "commit-interval=<MS>    Commit timer in milliseconds (default 5000).\n" \
  "readonly=<BOOL>         Serve every export read-only.\n" \
  "default-export=<NAME>   Export served for the empty export name."

/* Print version and features for `nbdkit --dump-plugin cairn`. */
static void
cairn_dump_plugin (void)
{
  printf ("cairn_version=%s\n", PACKAGE_VERSION);
  printf ("cairn_format_version=1\n");
  printf ("cairn_checksum=sha256\n");
  printf ("cairn_exports=no\n");
}

/* Open a connection: not possible until the volume layer exists. */
static void *
cairn_open (int readonly)
{
  nbdkit_error ("cairn %s: serving exports needs the volume layer, "
                "which this build does not have yet", PACKAGE_VERSION);
  errno = ENOTSUP;
  return NULL;
}

/* Size of the export (unreachable while open fails). */
static int64_t
cairn_get_size (void *handle)
{
  nbdkit_error ("no export is open");
  return -1;
}

/* Read from the export (unreachable while open fails). */
static int
cairn_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
             uint32_t flags)
{
  nbdkit_error ("no export is open");
  errno = EIO;
  return -1;
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
  .open = cairn_open,
  .get_size = cairn_get_size,
  .pread = cairn_pread,
};

NBDKIT_REGISTER_PLUGIN (plugin)
