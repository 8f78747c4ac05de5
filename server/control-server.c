/* Cairn control server: its lifecycle (control.h: control_server_start,
 * control_server_stop).
 *
 * A server is a libuv loop on a thread of its own with two listeners (the
 * Unix socket, and TCP when configured), a stop async and a wake async,
 * all embedded in struct control_server (control-int.h); connections and
 * requests are control.c's (with control-request.c and control-tls.c).
 * Starting binds the listeners and starts the loop thread with every
 * signal blocked (so signals go to the host's threads, and a write to a
 * vanished client returns EPIPE instead of raising SIGPIPE).  Stopping
 * sets the stopping flag (running requests see it as cancellation), has
 * the loop close every handle and connection, joins the thread once
 * uv_run returns (after the last job thread has finished), and frees the
 * server; closing the bound Unix listener removes the socket file.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "control-int.h"


/* Close a handle unless it is unset or already closing. */
static void
close_handle (uv_handle_t *handle, bool inited)
{
  if (inited && !uv_is_closing (handle))
    uv_close (handle, NULL);
}

/* Stop requested (loop thread): close everything; uv_run then returns
 * once the close callbacks and running requests are done.
 */
static void
on_stop (uv_async_t *async)
{
  struct control_server *srv = async->data;

  close_handle ((uv_handle_t *) &srv->stop_async, srv->async_inited);
  close_handle ((uv_handle_t *) &srv->unix_listener, srv->unix_inited);
  close_handle ((uv_handle_t *) &srv->tcp_listener, srv->tcp_inited);
  close_handle ((uv_handle_t *) &srv->setup_timer, srv->timer_inited);
  control_conns_close (srv);
  /* Job threads see their conn gone and end; the last one's wake closes
   * the wake handle (control_on_wake).
   */
  if (srv->threads == NULL)
    close_handle ((uv_handle_t *) &srv->wake_async, srv->wake_inited);
}

/* The loop thread. */
static void *
loop_thread (void *arg)
{
  struct control_server *srv = arg;

  uv_run (&srv->loop, UV_RUN_DEFAULT);
  return NULL;
}

/* Free a server whose loop thread is not running (never started, or
 * joined): close what is open, run the close callbacks, free.  Closing the
 * bound listener removes the socket file (libuv unlinks it).
 */
static void
server_destroy (struct control_server *srv)
{
  int r;

  if (srv->loop_inited) {
    close_handle ((uv_handle_t *) &srv->stop_async, srv->async_inited);
    close_handle ((uv_handle_t *) &srv->wake_async, srv->wake_inited);
    close_handle ((uv_handle_t *) &srv->unix_listener, srv->unix_inited);
    close_handle ((uv_handle_t *) &srv->tcp_listener, srv->tcp_inited);
    close_handle ((uv_handle_t *) &srv->setup_timer, srv->timer_inited);
    uv_run (&srv->loop, UV_RUN_DEFAULT);
    r = uv_loop_close (&srv->loop);
    if (r < 0) {
      /* A handle is still open: a bug.  Leak rather than free under it. */
      if (srv->log) {
        char msg[160];

        snprintf (msg, sizeof msg, "control: the loop is still busy at "
                  "exit: %s", uv_strerror (r));
        srv->log (srv->opaque, msg);
      }
      return;
    }
  }
  control_registry_free (srv->reg);
  control_jobs_destroy (&srv->jobs);
  control_audit_destroy (&srv->audit);
  free (srv);
}

/* Start the loop thread with every signal blocked (see the top). */
static int
start_thread (struct control_server *srv)
{
  sigset_t all, old;
  int r;

  sigfillset (&all);
  pthread_sigmask (SIG_SETMASK, &all, &old);
  r = pthread_create (&srv->thread, NULL, loop_thread, srv);
  pthread_sigmask (SIG_SETMASK, &old, NULL);
  if (r != 0)
    return cairn_fail (-r, "cannot start the control server thread: %s",
                       strerror (r));
  pthread_setname_np (srv->thread, "cairn-control");
  return 0;
}

/* Set up and start a server. */
int
control_server_start (const struct control_config *cfg,
                      struct control_server **out)
{
  struct control_server *srv;
  int r;

  if (cfg->unix_path == NULL || cfg->unix_path[0] == '\0')
    return cairn_fail (-EINVAL, "the control server needs a socket path");
  if (cfg->tls_mode != TLS_OFF && cfg->tls == NULL)
    return cairn_fail (-EINVAL, "control-tls=%s needs credentials "
                       "(control-tls-certificates= or control-tls-psk=)",
                       tls_mode_name (cfg->tls_mode));
  if (cfg->tcp_address && cfg->tls_mode == TLS_OFF && !cfg->tcp_insecure)
    return cairn_fail (-EPERM, "%s", CONTROL_INSECURE_ADVICE);
  srv = calloc (1, sizeof *srv);
  if (srv == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  atomic_init (&srv->stopping, false);
  control_jobs_init (&srv->jobs);
  control_audit_init (&srv->audit);
  srv->audit.log = cfg->audit;
  srv->audit.opaque = cfg->opaque;
  srv->jobs.background = cfg->background_jobs;
  srv->jobs.opaque = cfg->opaque;
  srv->opaque = cfg->opaque;
  srv->log = cfg->log;
  srv->warn = cfg->warn;
  srv->max_output = cfg->max_output ? cfg->max_output
                                    : CONTROL_DEFAULT_MAX_OUTPUT;
  srv->max_clients = cfg->max_clients ? cfg->max_clients
                                      : CONTROL_DEFAULT_MAX_CLIENTS;
  srv->tls_mode = cfg->tls_mode;
  srv->tls = cfg->tls_mode == TLS_OFF ? NULL : cfg->tls;
  srv->grants = cfg->grants;
  srv->handshake_timeout_ms = cfg->handshake_timeout_ms
    ? cfg->handshake_timeout_ms : CONTROL_DEFAULT_HANDSHAKE_TIMEOUT_S * 1000;
  r = control_registry_new (cfg->tables, cfg->n_tables, &srv->reg);
  if (r < 0)
    goto fail;

  r = uv_loop_init (&srv->loop);
  if (r < 0) {
    r = cairn_fail (-EIO, "uv_loop_init: %s", uv_strerror (r));
    goto fail;
  }
  srv->loop_inited = true;
  r = control_listen_unix (&srv->loop, &srv->unix_listener, &srv->unix_inited,
                           cfg, srv, control_on_connection);
  if (r < 0)
    goto fail;
  if (cfg->tcp_address) {
    r = control_listen_tcp (&srv->loop, &srv->tcp_listener, &srv->tcp_inited,
                            cfg, srv, control_on_connection,
                            &srv->tcp_port);
    if (r < 0)
      goto fail;
  }
  r = uv_async_init (&srv->loop, &srv->stop_async, on_stop);
  if (r < 0) {
    r = cairn_fail (-EIO, "uv_async_init: %s", uv_strerror (r));
    goto fail;
  }
  srv->async_inited = true;
  srv->stop_async.data = srv;
  r = uv_async_init (&srv->loop, &srv->wake_async, control_on_wake);
  if (r < 0) {
    r = cairn_fail (-EIO, "uv_async_init: %s", uv_strerror (r));
    goto fail;
  }
  srv->wake_inited = true;
  srv->wake_async.data = srv;
  r = uv_timer_init (&srv->loop, &srv->setup_timer);
  if (r < 0) {
    r = cairn_fail (-EIO, "uv_timer_init: %s", uv_strerror (r));
    goto fail;
  }
  srv->timer_inited = true;
  srv->setup_timer.data = srv;
  r = start_thread (srv);
  if (r < 0)
    goto fail;
  *out = srv;
  return 0;

 fail:
  server_destroy (srv);
  return r;
}

/* Stop the loop thread and free the server. */
void
control_server_stop (struct control_server *srv)
{
  if (srv == NULL)
    return;
  atomic_store (&srv->stopping, true);
  uv_async_send (&srv->stop_async);
  pthread_join (srv->thread, NULL);
  server_destroy (srv);
}

/* The bound TCP port. */
unsigned
control_server_tcp_port (const struct control_server *srv)
{
  return srv->tcp_port;
}
