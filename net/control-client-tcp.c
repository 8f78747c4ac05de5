/* Cairn control client: TCP and TLS (control-client.h).
 *
 * A TCP connection (control-tcp=) is the Unix socket's client with a
 * different connect; with credentials (net/tls.h) it runs a TLS 1.3
 * handshake first, on the same non-blocking socket with the same
 * deadlines and cancellation, and every later read and write of the
 * client goes through client_send and client_recv, which keep send and
 * recv's conventions.  OpenSSL reads one record at a time, so a record's
 * plaintext left in SSL (SSL_pending) is the only input a poll cannot
 * see: client_wait_fd checks it first.  A failed handshake says "TLS
 * handshake with HOST:PORT failed: why: what to check"; TLS 1.3 servers
 * refuse a client certificate after the client's side of the handshake,
 * so the first read can still fail that way.
 */
#include <config.h>

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <openssl/err.h>

#include "control-client-int.h"

/* ------------------------------------------------------------ I/O
 *
 * client_send and client_recv behave like send and recv on the non-blocking socket
 * (-1 with errno EAGAIN when they would block), through TLS when the
 * connection has it.  A TLS failure sets errno to EPROTO and says why in
 * c->tls_why.
 */

/* Map a failed SSL call to recv/send's convention. */
static ssize_t
tls_io_error (struct control_client *c, int ret, bool reading)
{
  int e = SSL_get_error (c->ssl, ret);
  char why[200];

  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    errno = EAGAIN;
    return -1;
  }
  if (reading && c->tls_confirmed &&
      (e == SSL_ERROR_ZERO_RETURN ||
       (e == SSL_ERROR_SSL && ERR_GET_REASON (ERR_peek_last_error ()) ==
        SSL_R_UNEXPECTED_EOF_WHILE_READING) ||
       (e == SSL_ERROR_SYSCALL && ERR_peek_error () == 0 &&
        (ret == 0 || errno == 0 || errno == ECONNRESET)))) {
    ERR_clear_error ();
    return 0;                   /* the end, with or without close_notify */
  }
  if (e == SSL_ERROR_SYSCALL && ERR_peek_error () == 0 && errno) {
    int err = errno;

    ERR_clear_error ();
    errno = err;
    return -1;
  }
  tls_describe_error (c->ssl, ret, why, sizeof why);
  /* TLS 1.3: the server checks our certificate after our side of the
   * handshake is done, and says no on the first read.
   */
  snprintf (c->tls_why, sizeof c->tls_why, "%s%s%s",
            c->tls_confirmed ? "" : "the TLS handshake failed: ", why,
            c->tls_confirmed ? "" : tls_hint (c->tls, why));
  errno = EPROTO;
  return -1;
}

/* send (2), through TLS if the connection has it. */
ssize_t
client_send (struct control_client *c, const void *buf, size_t len)
{
  int n;

  if (c->ssl == NULL)
    return send (c->fd, buf, len, MSG_NOSIGNAL);
  ERR_clear_error ();
  n = SSL_write (c->ssl, buf, (int) MIN (len, (size_t) (1 << 30)));
  return n > 0 ? n : tls_io_error (c, n, false);
}

/* recv (2), through TLS if the connection has it. */
ssize_t
client_recv (struct control_client *c, void *buf, size_t len)
{
  int n;

  if (c->ssl == NULL)
    return recv (c->fd, buf, len, 0);
  ERR_clear_error ();
  n = SSL_read (c->ssl, buf, (int) MIN (len, (size_t) (1 << 30)));
  if (n > 0)
    c->tls_confirmed = true;
  return n > 0 ? n : tls_io_error (c, n, true);
}

/* The message for a failed client_send or client_recv (errno). */
const char *
client_io_why (const struct control_client *c)
{
  return errno == EPROTO && c->tls_why[0] ? c->tls_why : strerror (errno);
}

/* ------------------------------------------------------------ TCP */

/* Split "HOST[:PORT]" or "[V6ADDR][:PORT]". */
int
control_client_parse_address (const char *arg, char *host, size_t hostlen,
                              unsigned *port)
{
  char *colon, *end;
  unsigned long p = CONTROL_DEFAULT_TCP_PORT;
  const char *h;
  char buf[256];

  if (strlen (arg) >= sizeof buf)
    return cairn_fail (-EINVAL, "\"%s\": the host is too long", arg);
  strcpy (buf, arg);
  h = buf;
  if (buf[0] == '[') {
    end = strchr (buf, ']');
    if (end == NULL || (end[1] && end[1] != ':'))
      return cairn_fail (-EINVAL, "\"%s\" is not [ADDR]:PORT", arg);
    *end = '\0';
    h = buf + 1;
    colon = end[1] ? end + 1 : NULL;
  }
  else {
    colon = strchr (buf, ':');
    if (colon && strchr (colon + 1, ':'))
      return cairn_fail (-EINVAL, "\"%s\": write an IPv6 address as "
                         "[ADDR]:PORT", arg);
  }
  if (colon) {
    *colon = '\0';
    errno = 0;
    p = strtoul (colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || p == 0 || p > 65535)
      return cairn_fail (-EINVAL, "\"%s\": the port must be 1 to 65535",
                         arg);
  }
  if (*h == '\0')
    return cairn_fail (-EINVAL, "\"%s\" names no host", arg);
  if (strlen (h) >= hostlen)
    return cairn_fail (-EINVAL, "\"%s\": the host is too long", arg);
  strcpy (host, h);
  *port = (unsigned) p;
  return 0;
}

/* Run the TLS handshake on the connected socket. */
int
control_client_start_tls (struct control_client *c, struct tls_ctx *tls)
{
  int64_t deadline = client_deadline_after (c->timeout_ms);

  if (c->host == NULL || c->ssl)
    return cairn_fail (-EINVAL, "TLS is for a new TCP connection");
  c->tls = tls;
  c->ssl = tls_client_ssl (c->tls, c->fd, c->host);
  if (c->ssl == NULL)
    return -ENOMEM;
  for (;;) {
    int r, e;

    ERR_clear_error ();
    r = SSL_connect (c->ssl);
    if (r == 1)
      return 0;
    e = SSL_get_error (c->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      r = client_wait_fd (c, c->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
                   deadline);
      if (r == -ETIMEDOUT)
        return cairn_fail (r, "TLS handshake with %s failed: no answer "
                           "within %d ms (does it serve TLS? control-tls= "
                           "on or require)", c->path, c->timeout_ms);
      if (r < 0)
        return r;
      continue;
    }
    tls_describe_error (c->ssl, r, c->tls_why, sizeof c->tls_why);
    return cairn_fail (-EPROTO, "TLS handshake with %s failed: %s%s",
                       c->path, c->tls_why, tls_hint (c->tls, c->tls_why));
  }
}

/* Connect to a server's control port. */
int
control_client_connect_tcp (const char *host, unsigned port,
                            struct tls_ctx *tls, int timeout_ms,
                            struct control_client **out)
{
  struct addrinfo hints = { .ai_family = AF_UNSPEC,
                            .ai_socktype = SOCK_STREAM,
                            .ai_flags = AI_NUMERICSERV };
  struct addrinfo *res = NULL, *ai;
  struct control_client *c;
  char portstr[16], name[300];
  int64_t deadline = client_deadline_after (timeout_ms);
  int r, one = 1;

  snprintf (portstr, sizeof portstr, "%u", port);
  snprintf (name, sizeof name, strchr (host, ':') ? "[%s]:%u" : "%s:%u",
            host, port);
  r = getaddrinfo (host, portstr, &hints, &res);
  if (r != 0)
    return cairn_fail (-EHOSTUNREACH, "cannot find the Cairn server %s: %s",
                       name, gai_strerror (r));
  c = calloc (1, sizeof *c);
  if (c == NULL || (c->path = strdup (name)) == NULL ||
      (c->host = strdup (host)) == NULL) {
    if (c)
      free (c->path);
    free (c);
    freeaddrinfo (res);
    return cairn_fail (-ENOMEM, "out of memory");
  }
  c->port = port;
  c->fd = -1;
  c->timeout_ms = timeout_ms;
  c->next_id = 1;
  control_lines_init (&c->lines, CONTROL_CLIENT_MAX_REPLY);
  r = -ECONNREFUSED;
  for (ai = res; ai; ai = ai->ai_next) {
    c->fd = socket (ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC |
                    SOCK_NONBLOCK, ai->ai_protocol);
    if (c->fd == -1) {
      r = -errno;
      continue;
    }
    r = client_connect_addr (c->fd, ai->ai_addr, ai->ai_addrlen, deadline);
    if (r == 0)
      break;
    close (c->fd);
    c->fd = -1;
  }
  freeaddrinfo (res);
  if (r < 0) {
    free (c->path);
    free (c->host);
    free (c);
    if (r == -ECONNREFUSED)
      return cairn_fail (r, "no Cairn server listens at %s: start it with "
                         "control-tcp=ADDR:%u (cairnd --control-tcp)", name,
                         port);
    return cairn_fail (r, "cannot connect to the Cairn server at %s: %s",
                       name, strerror (-r));
  }
  setsockopt (c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (tls && (r = control_client_start_tls (c, tls)) < 0) {
    control_client_close (c);
    return r;
  }
  *out = c;
  return 0;
}

