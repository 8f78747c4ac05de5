/* Cairn control server: TLS on a connection, and the setup deadline
 * (design note in control.c, invariants 9 and 10; the sessions themselves
 * are tls.c's).
 *
 * A TCP client's first byte chooses TLS or plain (conn_sniff); a TLS
 * client's input is decrypted here before control.c's line and frame
 * readers see it (conn_tls_input); and on a port with TLS on or require,
 * one timer closes the clients that have not become served clients within
 * handshake_timeout_ms of connecting (control_on_setup_timer).
 */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <uv.h>

#include "control-int.h"

/* Once its handshake is done, note who the client authenticated as, for
 * the grants (gate.c); before any of its requests is dispatched.
 */
static void
conn_tls_identify (struct conn *conn)
{
  bool psk;

  if (conn->who.tls || !tls_session_ready (conn->tls))
    return;
  conn->who.tls = true;
  if (tls_session_identity (conn->tls, &psk, conn->who_ident,
                            sizeof conn->who_ident)) {
    if (psk)
      conn->who.psk_identity = conn->who_ident;
    else
      conn->who.x509_name = conn->who_ident;
  }
}

/* Ciphertext from a TLS client: decrypt every whole record (tls.c
 * invariant 2) and hand the plaintext on, a buffer at a time.
 */
void
conn_tls_input (struct conn *conn, const char *data, size_t n)
{
  size_t got = 0, k;
  char why[512] = "";
  int r = tls_session_feed (conn->tls, data, n);

  while (r >= 0 && !conn->closing) {
    r = tls_session_read (conn->tls, conn->pbuf + got,
                          CONTROL_READ_SIZE - got, &k);
    if (r < 0)                  /* before conn_input sets other messages */
      snprintf (why, sizeof why, "%s", cairn_errmsg ());
    if (r != TLS_DATA)
      break;
    conn_tls_identify (conn);
    got += k;
    if (conn->busy)             /* refused: its requests are dropped */
      got = 0;
    if (got == CONTROL_READ_SIZE) {
      conn_input (conn, conn->pbuf, got);
      got = 0;
    }
  }
  if (got > 0 && !conn->closing)
    conn_input (conn, conn->pbuf, got);
  if (conn->closing)
    return;
  conn_tls_flush (conn);
  if (r >= 0 && conn->setup_deadline && tls_session_ready (conn->tls))
    conn->setup_deadline = 0;   /* set up in time (invariant 10) */

  if (conn->busy && r >= 0 && tls_session_ready (conn->tls) &&
      !conn->shutting) {
    conn_refuse_busy (conn);
    return;
  }
  if (r == TLS_CLOSED && !conn->closing && !conn->shutting && !conn->eof)
    conn_eof (conn);
  else if (r < 0 && !conn->closing) {
    /* The alert is on its way: let it go out, then close. */
    srv_warn (conn->srv, "control: %s", why[0] ? why : cairn_errmsg ());
    atomic_store (&conn->cancel, true);
    conn_shutdown (conn);
  }
}

/* The first byte of a TCP client chooses TLS or plain (tls.c).  Returns
 * false when the connection is refused.
 */
bool
conn_sniff (struct conn *conn, unsigned char first)
{
  struct control_server *srv = conn->srv;
  int r;

  conn->sniffed = true;
  if (tls_looks_like_hello (first)) {
    if (srv->tls == NULL) {
      srv_warn (srv, "control: %s started a TLS handshake, but this server's "
               "control port has control-tls=off: closing the connection",
               conn->peer);
      conn_close (conn);
      return false;
    }
    r = tls_session_new (srv->tls, conn->peer, &conn->tls);
    if (r == 0 && (conn->pbuf = malloc (CONTROL_READ_SIZE)) == NULL)
      r = cairn_fail (-ENOMEM, "out of memory");
    if (r < 0) {
      srv_log (srv, "control: %s: %s", conn->peer, cairn_errmsg ());
      conn_close (conn);
      return false;
    }
    return true;
  }
  if (srv->tls_mode != TLS_REQUIRE) {
    conn->setup_deadline = 0;   /* a plain client, served (invariant 10) */
    if (conn->busy)
      conn_refuse_busy (conn);
    return !conn->busy;
  }
  /* Say why, then drop what it sends until it closes (closing with its
   * request unread could reset the connection before it reads this).
   */
  srv_warn (srv, "control: refused the plain (non-TLS) client %s: this "
           "port has control-tls=require", conn->peer);
  conn->refused = true;
  /* The client may be the cairn command or another server that replicates
   * (cairn replicate, cairn pull): that one connects with its own control
   * TLS keys, so the advice names both.
   */
  conn_send_error (conn, CAIRN_E_PERMISSION, "this server's control port "
                   "requires TLS (control-tls=require): the cairn command "
                   "connects with 'cairn --connect HOST --tls-psk FILE' (or "
                   "--tls-certificates DIR); a server that replicates here "
                   "(cairn replicate, cairn pull) connects with its own "
                   "keys: start it with 'cairnd --tls-psk FILE' or 'cairnd "
                   "--tls-certs DIR' (see cairn(8), REPLICATION AND TLS)");
  return false;
}

/* Close the TCP clients past their setup deadline, with a line saying
 * who and why, and arm the timer for the next deadline (invariant 10).
 */
void
control_on_setup_timer (uv_timer_t *timer)
{
  struct control_server *srv = timer->data;
  uint64_t now = uv_now (&srv->loop), next = 0;
  unsigned secs = (srv->handshake_timeout_ms + 999) / 1000;
  struct conn *conn, *after;

  for (conn = srv->conns; conn; conn = after) {
    after = conn->next;         /* conn_close unlinks conn */
    if (conn->setup_deadline == 0 || conn->closing)
      continue;
    if (conn->setup_deadline > now) {
      if (next == 0 || conn->setup_deadline < next)
        next = conn->setup_deadline;
      continue;
    }
    if (conn->tls)
      srv_warn (srv, "control: %s did not finish its TLS handshake within "
                "%u s: closing the connection", conn->peer, secs);
    else if (conn->refused)
      srv_warn (srv, "control: %s, a plain client refused by "
                "control-tls=require, was still connected after %u s: "
                "closing the connection", conn->peer, secs);
    else
      srv_warn (srv, "control: %s sent nothing within %u s of connecting "
                "(neither a TLS handshake nor a request): closing the "
                "connection", conn->peer, secs);
    conn_close (conn);
  }
  if (next)
    uv_timer_start (timer, control_on_setup_timer, next - now, 0);
}
