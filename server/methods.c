/* Cairn control server: the built-in "server.*" methods.
 *
 *   server.version  → {"version": "0.1.0", "protocol": 1}
 *   server.methods  → {"methods": ["server.methods", ...]}
 *   server.ping     {..., "delay_ms"?: 0..10000} → the params, echoed
 *
 * server.ping is a blocking method: it always goes through the threadpool,
 * so a ping measures the path every engine method takes, and its optional
 * delay (cancelled when the server stops) lets tests hold a request open.
 */
#include <config.h>

#include <errno.h>
#include <time.h>

#include "control-int.h"

/* Report the server's version and protocol version. */
static int
server_version (struct control_ctx *ctx, json_t *params, json_t **result)
{
  *result = json_pack ("{s:s, s:i}", "version", PACKAGE_VERSION,
                       "protocol", CONTROL_PROTOCOL_VERSION);
  return *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
}

/* List the names of every method, sorted. */
static int
server_methods (struct control_ctx *ctx, json_t *params, json_t **result)
{
  json_t *names = json_array ();

  if (names == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  for (size_t i = 0; i < ctx->reg->n; i++) {
    json_t *name = json_string (ctx->reg->methods[i]->name);

    if (json_array_append_new (names, name) == -1) {
      json_decref (names);
      return cairn_fail (-ENOMEM, "out of memory");
    }
  }
  *result = json_pack ("{s:o}", "methods", names);
  return *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
}

/* Sleep for ms milliseconds in short slices, stopping if cancelled. */
static int
sleep_cancellable (struct control_ctx *ctx, long ms)
{
  struct timespec now, end;

  clock_gettime (CLOCK_MONOTONIC, &end);
  end.tv_sec += ms / 1000;
  end.tv_nsec += (ms % 1000) * 1000000;
  if (end.tv_nsec >= 1000000000) {
    end.tv_sec++;
    end.tv_nsec -= 1000000000;
  }
  for (;;) {
    long left_ms;
    struct timespec slice;

    if (control_ctx_cancelled (ctx))
      return cairn_fail (-ECANCELED, "the ping was cancelled: the server is "
                         "stopping or the client went away");
    clock_gettime (CLOCK_MONOTONIC, &now);
    left_ms = (end.tv_sec - now.tv_sec) * 1000 +
              (end.tv_nsec - now.tv_nsec) / 1000000;
    if (left_ms <= 0)
      return 0;
    slice.tv_sec = 0;
    slice.tv_nsec = MIN (left_ms, 10) * 1000000;
    nanosleep (&slice, NULL);
  }
}

/* Echo the params, after an optional delay. */
static int
server_ping (struct control_ctx *ctx, json_t *params, json_t **result)
{
  json_t *delay = json_is_object (params)
                  ? json_object_get (params, "delay_ms") : NULL;
  int r;

  if (delay) {
    if (!json_is_integer (delay) || json_integer_value (delay) < 0 ||
        json_integer_value (delay) > CONTROL_PING_MAX_DELAY_MS)
      return control_invalid_params (ctx, "server.ping: \"delay_ms\" must be "
                                     "an integer from 0 to %d",
                                     CONTROL_PING_MAX_DELAY_MS);
    r = sleep_cancellable (ctx, (long) json_integer_value (delay));
    if (r < 0)
      return r;
  }
  *result = params ? json_incref (params) : json_object ();
  return *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
}

static const struct control_method builtin_methods[] = {
  { .name = "server.methods", .handler = server_methods },
  { .name = "server.ping", .handler = server_ping, .blocking = true },
  { .name = "server.version", .handler = server_version },
};

const struct control_method_table control_builtin_methods = {
  .methods = builtin_methods,
  .n = ARRAY_SIZE (builtin_methods),
};
