/* Cairn control protocol over TLS: credentials and memory-BIO sessions.
 *
 * Design note.
 *
 * What is secured.  The control protocol's TCP port (control-tcp=) carries
 * every management method and, in stream mode, whole volumes between
 * servers (DESIGN §4, §5), across networks.  control-tls= puts TLS on it,
 * the way nbdkit offers TLS for NBD: off, on (each client chooses) or
 * require, with nbdkit's credentials (an X.509 directory or a PSK file,
 * tls.h) and nbdkit's --tls-verify-peer.  TLS 1.3 only: both ends are
 * Cairn, so nothing older needs to be spoken.  A PSK handshake uses
 * psk_dhe_ke (forward secrecy); session tickets are not issued (every
 * connection authenticates afresh, and a PSK file change cannot be
 * bypassed by a ticket).  The Unix socket stays plain: its mode and group
 * are its authentication.
 *
 * Choosing TLS.  A TLS client speaks first with a ClientHello, a record
 * whose first byte is 0x16; a control request line never starts with that
 * byte (it is JSON: '{' or blanks).  So the server decides from the first
 * byte of a TCP connection, with no extra round trip (control-tls.c,
 * conn_sniff): 0x16 starts a TLS session (refused with control-tls=off:
 * the connection is closed and logged); anything else is a plain client,
 * served with control-tls=on and refused with control-tls=require by one
 * plain error reply ("permission", naming --tls) before the connection is
 * shut, so the client prints why.
 *
 * Sessions in the event loop.  The control server's loop must never block,
 * so OpenSSL never touches the socket: each session's SSL has two memory
 * BIOs (SSL_set_bio), and libuv moves the bytes.
 *
 *   in:   uv read (ciphertext) → tls_session_feed (rbio) → tls_session_read
 *         until TLS_WANT_INPUT → plaintext to the connection's line or frame
 *         reader, exactly as a plain read's bytes would go
 *   out:  a reply, notification or stream frame (plaintext) →
 *         tls_session_write (SSL_write into wbio) → tls_session_take →
 *         one uv_write of the ciphertext
 *
 * Invariants:
 *
 *  1. After every call that may make output (feed+read: the handshake's
 *     flights, alerts, key updates; write; close), the caller takes all of
 *     wbio and queues it on the stream before queueing anything else, so
 *     records reach the wire in the order OpenSSL made them.
 *  2. Reading decrypts every whole record fed so far (the caller loops
 *     until TLS_WANT_INPUT); rbio keeps at most one partial record, which
 *     only more input completes.  So a connection that stops reading
 *     (stream backpressure) leaves no plaintext stranded inside OpenSSL,
 *     and one that resumes needs nothing but the next uv read.
 *  3. Flow control is unchanged: the ciphertext of a plaintext message is
 *     written as one uv_write that carries the plaintext's length, and the
 *     worker's channel (chan.h) is credited when that write completes, as
 *     for a plain write.  Input is bounded by the size of one uv read, as
 *     for a plain connection.  The memory BIOs therefore hold at most one
 *     read's worth of input and one message's worth of output.
 *  4. Plaintext goes out only once the handshake is done (nothing does
 *     before: the server answers requests, and requests come after it).
 *
 * Handshake.  The server's session is in accept state; the first feed
 * starts it and tls_session_read drives it (SSL_do_handshake), so the
 * handshake is just reads and takes in the loop.  A failure (wrong PSK key
 * or unknown user, a client certificate missing or not signed by the CA
 * with verify-peer, a client that is not TLS at all) makes an alert:
 * the connection writes it, logs "TLS handshake with PEER failed: reason"
 * and closes.  The client (control-client.c, blocking, SSL on the socket
 * itself) reports the same "TLS handshake with HOST:PORT failed: reason"
 * with a hint on what to check.
 *
 * Shutdown.  When the server shuts its side (control.c, conn_shutdown), it
 * queues close_notify before uv_shutdown.  A close_notify from the client
 * (TLS_CLOSED) is its end of input, like a plain EOF: the requests already
 * sent are answered.  TLS 1.3 allows this half close.  A TCP EOF without
 * close_notify is treated the same (the client is gone or cut).
 *
 * Errors.  A record that fails to decrypt or any protocol error closes the
 * connection after sending the alert, with a log line; the request running
 * on it is cancelled as for any dropped connection.  Functions return 0 or
 * a negative errno with a message (cairn_errmsg), and clear OpenSSL's
 * thread-local error queue, which must not leak into the next connection
 * served by the same thread.
 */
#include <config.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "tls.h"

#define PSK_MAX_USER 128

/* One entry of a PSK file. */
struct psk {
  char user[PSK_MAX_USER + 1];
  unsigned char key[PSK_MAX_PSK_LEN];
  unsigned keylen;
};

struct tls_ctx {
  SSL_CTX *ssl;
  BIO_METHOD *sock;            /* client: sockets without SIGPIPE */
  bool server;
  struct psk *psks;            /* PSK credentials, or NULL */
  size_t npsks;
  const struct psk *mine;      /* client: the identity it uses */
};

struct tls_session {
  SSL *ssl;
  struct tls_ctx *ctx;
  bool ready;                  /* handshake done */
  bool close_sent;
  char peer[300];
  char psk_user[256];          /* server: the PSK username the client
                                  named and that has a key here */
};

/* Parse a TLS mode. */
int
tls_parse_mode (const char *arg, enum tls_mode *mode)
{
  static const struct { const char *name; enum tls_mode mode; } names[] = {
    { "off", TLS_OFF }, { "no", TLS_OFF }, { "false", TLS_OFF },
    { "0", TLS_OFF }, { "on", TLS_ON }, { "yes", TLS_ON },
    { "true", TLS_ON }, { "1", TLS_ON }, { "require", TLS_REQUIRE },
    { "required", TLS_REQUIRE }, { "force", TLS_REQUIRE },
  };

  for (size_t i = 0; i < ARRAY_SIZE (names); i++)
    if (strcasecmp (arg, names[i].name) == 0) {
      *mode = names[i].mode;
      return 0;
    }
  return cairn_fail (-EINVAL, "\"%s\" is not a TLS mode: expected off, on or "
                     "require", arg);
}

/* The name of a mode. */
const char *
tls_mode_name (enum tls_mode mode)
{
  return mode == TLS_REQUIRE ? "require" : mode == TLS_ON ? "on" : "off";
}

/* OpenSSL's latest error reason, or what, and clear the queue. */
static const char *
ssl_reason (const char *what)
{
  unsigned long e = ERR_peek_last_error ();
  const char *r = e ? ERR_reason_error_string (e) : NULL;

  ERR_clear_error ();
  return r ? r : what;
}

/* ------------------------------------------------------------ PSK */

/* Parse one "username:hexkey" line into p. */
static int
parse_psk_line (const char *path, unsigned lineno, char *line, struct psk *p)
{
  char *colon = strchr (line, ':'), *hex;
  size_t ulen, hlen;

  if (colon == NULL)
    return cairn_fail (-EINVAL, "%s line %u: expected username:hexkey (make "
                       "the file with psktool -u USER -p %s)", path, lineno,
                       path);
  ulen = (size_t) (colon - line);
  hex = colon + 1;
  hlen = strlen (hex);
  if (ulen == 0 || ulen > PSK_MAX_USER)
    return cairn_fail (-EINVAL, "%s line %u: the username must be 1 to %d "
                       "bytes", path, lineno, PSK_MAX_USER);
  if (hlen == 0 || hlen % 2 || hlen / 2 > PSK_MAX_PSK_LEN)
    return cairn_fail (-EINVAL, "%s line %u: the key must be an even number "
                       "of hex digits (at most %d bytes)", path, lineno,
                       PSK_MAX_PSK_LEN);
  memcpy (p->user, line, ulen);
  p->user[ulen] = '\0';
  for (size_t i = 0; i < hlen; i += 2) {
    int hi = hex_digit_value (hex[i]), lo = hex_digit_value (hex[i + 1]);

    if (hi < 0 || lo < 0)
      return cairn_fail (-EINVAL, "%s line %u: the key is not hex", path,
                         lineno);
    p->key[i / 2] = (unsigned char) (hi << 4 | lo);
  }
  p->keylen = (unsigned) (hlen / 2);
  return 0;
}

/* Read a PSK file into ctx (blank lines and # comments are skipped). */
static int
load_psk (struct tls_ctx *ctx, const char *path)
{
  FILE *f = fopen (path, "re");
  char line[2 * PSK_MAX_PSK_LEN + PSK_MAX_USER + 8];
  unsigned lineno = 0;
  int r = 0;

  if (f == NULL)
    return cairn_fail (-errno, "PSK file %s: %s", path, strerror (errno));
  while (r == 0 && fgets (line, sizeof line, f)) {
    size_t len = strcspn (line, "\r\n");
    struct psk *p;

    lineno++;
    if (line[len] == '\0' && !feof (f)) {
      r = cairn_fail (-EINVAL, "%s line %u is too long", path, lineno);
      break;
    }
    line[len] = '\0';
    if (line[0] == '\0' || line[0] == '#')
      continue;
    p = realloc (ctx->psks, (ctx->npsks + 1) * sizeof *p);
    if (p == NULL) {
      r = cairn_fail (-ENOMEM, "out of memory");
      break;
    }
    ctx->psks = p;
    r = parse_psk_line (path, lineno, line, &ctx->psks[ctx->npsks]);
    if (r == 0)
      ctx->npsks++;
  }
  fclose (f);
  if (r == 0 && ctx->npsks == 0)
    r = cairn_fail (-EINVAL, "PSK file %s has no key (lines: "
                    "username:hexkey)", path);
  return r;
}

/* The PSK entry of user, or NULL. */
static const struct psk *
find_psk (const struct tls_ctx *ctx, const char *user)
{
  for (size_t i = 0; i < ctx->npsks; i++)
    if (strcmp (ctx->psks[i].user, user) == 0)
      return &ctx->psks[i];
  return NULL;
}

/* Server: the key of the identity the client named (0: unknown user, and
 * the handshake fails).
 */
static unsigned
psk_server_cb (SSL *ssl, const char *identity, unsigned char *psk,
               unsigned max_psk_len)
{
  const struct tls_ctx *ctx = SSL_CTX_get_app_data (SSL_get_SSL_CTX (ssl));
  const struct psk *p = identity ? find_psk (ctx, identity) : NULL;

  struct tls_session *s = SSL_get_app_data (ssl);

  if (p == NULL || p->keylen > max_psk_len)
    return 0;
  if (s)                        /* trusted once the handshake is done */
    snprintf (s->psk_user, sizeof s->psk_user, "%s", identity);
  memcpy (psk, p->key, p->keylen);
  return p->keylen;
}

/* Client: our identity and key. */
static unsigned
psk_client_cb (SSL *ssl, const char *hint, char *identity,
               unsigned max_identity_len, unsigned char *psk,
               unsigned max_psk_len)
{
  const struct tls_ctx *ctx = SSL_CTX_get_app_data (SSL_get_SSL_CTX (ssl));
  const struct psk *p = ctx->mine;

  if (strlen (p->user) >= max_identity_len || p->keylen > max_psk_len)
    return 0;
  strcpy (identity, p->user);
  memcpy (psk, p->key, p->keylen);
  return p->keylen;
}

/* ------------------------------------------------------------ client socket
 *
 * OpenSSL's socket BIO writes with write(2), so a peer that closed the
 * connection raises SIGPIPE, which kills a command-line client.  This BIO
 * does what the plain client does: send with MSG_NOSIGNAL (EPIPE instead).
 */

/* The socket of a BIO of ours. */
static int
sock_fd (BIO *b)
{
  return (int) (intptr_t) BIO_get_data (b);
}

static int
sock_write (BIO *b, const char *buf, int len)
{
  ssize_t n = send (sock_fd (b), buf, (size_t) len, MSG_NOSIGNAL);

  BIO_clear_retry_flags (b);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    BIO_set_retry_write (b);
  return (int) n;
}

static int
sock_read (BIO *b, char *buf, int len)
{
  ssize_t n = recv (sock_fd (b), buf, (size_t) len, 0);

  BIO_clear_retry_flags (b);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    BIO_set_retry_read (b);
  return (int) n;
}

static long
sock_ctrl (BIO *b, int cmd, long num, void *ptr)
{
  if (cmd == BIO_CTRL_FLUSH)
    return 1;
  if (cmd == BIO_C_GET_FD) {
    if (ptr)
      *(int *) ptr = sock_fd (b);
    return sock_fd (b);
  }
  return 0;
}

static int
sock_create (BIO *b)
{
  BIO_set_init (b, 1);
  return 1;
}

/* The method of those BIOs, for ctx. */
static int
make_sock_method (struct tls_ctx *ctx)
{
  ctx->sock = BIO_meth_new (BIO_get_new_index () | BIO_TYPE_SOURCE_SINK |
                            BIO_TYPE_DESCRIPTOR, "cairn socket");
  if (ctx->sock == NULL ||
      BIO_meth_set_write (ctx->sock, sock_write) != 1 ||
      BIO_meth_set_read (ctx->sock, sock_read) != 1 ||
      BIO_meth_set_ctrl (ctx->sock, sock_ctrl) != 1 ||
      BIO_meth_set_create (ctx->sock, sock_create) != 1)
    return cairn_fail (-ENOMEM, "out of memory");
  return 0;
}

/* ------------------------------------------------------------ contexts */

/* dir/name into buf. */
static const char *
path_in (char *buf, size_t len, const char *dir, const char *name)
{
  snprintf (buf, len, "%s/%s", dir, name);
  return buf;
}

/* Load a certificate chain and its key. */
static int
load_cert (SSL_CTX *ssl, const char *cert, const char *key)
{
  if (SSL_CTX_use_certificate_chain_file (ssl, cert) != 1)
    return cairn_fail (-EINVAL, "TLS certificate %s: %s", cert,
                       ssl_reason ("cannot load it"));
  if (SSL_CTX_use_PrivateKey_file (ssl, key, SSL_FILETYPE_PEM) != 1)
    return cairn_fail (-EINVAL, "TLS key %s: %s", key,
                       ssl_reason ("cannot load it"));
  if (SSL_CTX_check_private_key (ssl) != 1)
    return cairn_fail (-EINVAL, "TLS key %s does not match the certificate "
                       "%s", key, cert);
  return 0;
}

/* Load the CA that peers' certificates must be signed by. */
static int
load_ca (SSL_CTX *ssl, const char *ca)
{
  if (SSL_CTX_load_verify_locations (ssl, ca, NULL) != 1)
    return cairn_fail (-EINVAL, "TLS CA certificate %s: %s", ca,
                       ssl_reason ("cannot load it"));
  return 0;
}

/* A server's X.509 credentials from dir (nbdkit's layout). */
static int
server_certs (struct tls_ctx *ctx, const struct tls_config *cfg)
{
  char cert[PATH_MAX], key[PATH_MAX], ca[PATH_MAX];
  const char *dir = cfg->certificates;
  int r = load_cert (ctx->ssl, path_in (cert, sizeof cert, dir,
                                        "server-cert.pem"),
                     path_in (key, sizeof key, dir, "server-key.pem"));

  if (r < 0 || !cfg->verify_peer)
    return r;
  r = load_ca (ctx->ssl, path_in (ca, sizeof ca, dir, "ca-cert.pem"));
  if (r < 0)
    return r;
  SSL_CTX_set_client_CA_list (ctx->ssl, SSL_load_client_CA_file (ca));
  ERR_clear_error ();
  SSL_CTX_set_verify (ctx->ssl, SSL_VERIFY_PEER |
                      SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  return 0;
}

/* A client's X.509 credentials: the CA of dir (or the system's), and a
 * certificate to present if dir has one: client-cert.pem, else (a server
 * replicating with its own directory) server-cert.pem.
 */
static int
client_certs (struct tls_ctx *ctx, const struct tls_config *cfg)
{
  static const char *const pairs[][2] = {
    { "client-cert.pem", "client-key.pem" },
    { "server-cert.pem", "server-key.pem" },
  };
  char cert[PATH_MAX], key[PATH_MAX], ca[PATH_MAX];
  const char *dir = cfg->certificates;
  int r;

  SSL_CTX_set_verify (ctx->ssl, SSL_VERIFY_PEER, NULL);
  if (dir == NULL) {
    if (SSL_CTX_set_default_verify_paths (ctx->ssl) != 1)
      return cairn_fail (-EINVAL, "the system's CA certificates: %s",
                         ssl_reason ("cannot load them"));
    return 0;
  }
  r = load_ca (ctx->ssl, path_in (ca, sizeof ca, dir, "ca-cert.pem"));
  for (size_t i = 0; r == 0 && i < ARRAY_SIZE (pairs); i++) {
    path_in (cert, sizeof cert, dir, pairs[i][0]);
    path_in (key, sizeof key, dir, pairs[i][1]);
    if (access (cert, R_OK) == 0 && access (key, R_OK) == 0)
      return load_cert (ctx->ssl, cert, key);
  }
  return r;
}

/* Load the PSK table or the X.509 files of cfg into ctx. */
static int
load_credentials (struct tls_ctx *ctx, const struct tls_config *cfg,
                  bool server)
{
  int r;

  if (cfg->psk_file) {
    r = load_psk (ctx, cfg->psk_file);
    if (r == 0 && server)
      SSL_CTX_set_psk_server_callback (ctx->ssl, psk_server_cb);
    else if (r == 0) {
      ctx->mine = cfg->username ? find_psk (ctx, cfg->username)
                                : &ctx->psks[0];
      if (ctx->mine == NULL)
        r = cairn_fail (-EINVAL, "PSK file %s has no key for user '%s'",
                        cfg->psk_file, cfg->username);
      SSL_CTX_set_psk_client_callback (ctx->ssl, psk_client_cb);
      /* Only the key may authenticate the server: one that answers with a
       * certificate instead (it does not take our key) fails to verify
       * against this empty CA store.
       */
      SSL_CTX_set_verify (ctx->ssl, SSL_VERIFY_PEER, NULL);
    }
  }
  else if (server && cfg->certificates == NULL)
    r = cairn_fail (-EINVAL, "TLS needs credentials: a certificates "
                    "directory or a PSK file");
  else
    r = server ? server_certs (ctx, cfg) : client_certs (ctx, cfg);
  return r;
}

/* Make the credentials. */
int
tls_ctx_new (const struct tls_config *cfg, bool server, struct tls_ctx **out)
{
  struct tls_ctx *ctx = calloc (1, sizeof *ctx);
  int r;

  if (ctx == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  ctx->server = server;
  ctx->ssl = SSL_CTX_new (server ? TLS_server_method ()
                                 : TLS_client_method ());
  if (ctx->ssl == NULL) {
    free (ctx);
    return cairn_fail (-ENOMEM, "cannot set up TLS: %s",
                       ssl_reason ("out of memory"));
  }
  SSL_CTX_set_app_data (ctx->ssl, ctx);
  SSL_CTX_set_min_proto_version (ctx->ssl, TLS1_3_VERSION);
  SSL_CTX_set_mode (ctx->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE |
                    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (server) {
    SSL_CTX_set_num_tickets (ctx->ssl, 0);
    SSL_CTX_set_options (ctx->ssl, SSL_OP_NO_TICKET);
  }
  r = server ? 0 : make_sock_method (ctx);
  if (r == 0)
    r = load_credentials (ctx, cfg, server);
  if (r < 0) {
    tls_ctx_free (ctx);
    return r;
  }
  *out = ctx;
  return 0;
}

/* Free credentials (NULL is allowed). */
void
tls_ctx_free (struct tls_ctx *ctx)
{
  if (ctx == NULL)
    return;
  SSL_CTX_free (ctx->ssl);
  BIO_meth_free (ctx->sock);
  if (ctx->psks)
    OPENSSL_cleanse (ctx->psks, ctx->npsks * sizeof *ctx->psks);
  free (ctx->psks);
  free (ctx);
}

/* PSK credentials? */
bool
tls_ctx_psk (const struct tls_ctx *ctx)
{
  return ctx->psks != NULL;
}

/* Have a client SSL check that the server's certificate names host (an
 * address literal is matched against the certificate's IP addresses).
 */
static int
set_peer_host (SSL *ssl, const char *host)
{
  unsigned char addr[16];
  bool literal = inet_pton (AF_INET, host, addr) == 1 ||
                 inet_pton (AF_INET6, host, addr) == 1;

  if (literal)
    return X509_VERIFY_PARAM_set1_ip_asc (SSL_get0_param (ssl), host) == 1
           ? 0 : -EINVAL;
  if (SSL_set1_host (ssl, host) != 1 ||
      SSL_set_tlsext_host_name (ssl, host) != 1)
    return -EINVAL;
  return 0;
}

/* A client SSL on a connected socket. */
void *
tls_client_ssl (struct tls_ctx *ctx, int fd, const char *host)
{
  SSL *ssl = SSL_new (ctx->ssl);
  BIO *bio = BIO_new (ctx->sock);

  if (ssl == NULL || bio == NULL || set_peer_host (ssl, host) < 0) {
    cairn_fail (-ENOMEM, "cannot set up TLS to %s: %s", host,
                ssl_reason ("out of memory"));
    BIO_free (bio);
    SSL_free (ssl);
    return NULL;
  }
  BIO_set_data (bio, (void *) (intptr_t) fd);
  SSL_set_bio (ssl, bio, bio);
  SSL_set_connect_state (ssl);
  return ssl;
}

/* Why an SSL call failed. */
void
tls_describe_error (void *vssl, int ret, char *buf, size_t len)
{
  SSL *ssl = vssl;
  int e = SSL_get_error (ssl, ret);
  unsigned long code = ERR_peek_last_error ();
  long vr = SSL_get_verify_result (ssl);

  if (e == SSL_ERROR_SSL && code &&
      ERR_GET_REASON (code) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
    e = SSL_ERROR_ZERO_RETURN;
  if (e == SSL_ERROR_SSL && code) {
    const char *reason = ERR_reason_error_string (code);

    if (ERR_GET_REASON (code) == SSL_R_CERTIFICATE_VERIFY_FAILED &&
        vr != X509_V_OK)
      snprintf (buf, len, "%s (%s)", reason ? reason : "verify failed",
                X509_verify_cert_error_string (vr));
    else
      snprintf (buf, len, "%s", reason ? reason : "TLS protocol error");
  }
  else if (e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL)
    snprintf (buf, len, "the connection was closed (is control-tls= on "
              "there?)");
  else
    snprintf (buf, len, "TLS error %d", e);
  ERR_clear_error ();
}

/* What to check after a handshake failed with why. */
const char *
tls_hint (const struct tls_ctx *ctx, const char *why)
{
  bool psk = ctx->psks != NULL;

  if (strstr (why, "closed"))
    return "";
  if (ctx->server && psk && strstr (why, "binder"))
    return " (the client's key is not this PSK file's key for its username)";
  if (ctx->server && psk)
    return " (the client offered no username this PSK file has)";
  if (ctx->server && strstr (why, "certificate"))
    return " (control-tls-verify-peer: the client must present a "
           "certificate signed by ca-cert.pem)";
  if (ctx->server)
    return "";
  if (psk)
    return ": check the PSK username and key (the server's control-tls-psk "
           "file must have the same username:hexkey line)";
  if (strstr (why, "verify"))
    return ": the server's certificate must be signed by the CA "
           "(--tls-certificates DIR/ca-cert.pem) and name the host connected "
           "to";
  if (strstr (why, "handshake failure"))
    return ": the server may take pre-shared keys only (--tls-psk FILE)";
  if (strstr (why, "certificate"))
    return ": the server wants a client certificate "
           "(--tls-certificates DIR/client-cert.pem)";
  return "";
}

/* ------------------------------------------------------------ sessions */

/* Start a session with memory BIOs. */
int
tls_session_new (struct tls_ctx *ctx, const char *peer,
                 struct tls_session **out)
{
  struct tls_session *s = calloc (1, sizeof *s);
  BIO *rbio = NULL, *wbio = NULL;

  if (s == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  s->ctx = ctx;
  snprintf (s->peer, sizeof s->peer, "%s", peer);
  s->ssl = SSL_new (ctx->ssl);
  rbio = BIO_new (BIO_s_mem ());
  wbio = BIO_new (BIO_s_mem ());
  if (s->ssl == NULL || rbio == NULL || wbio == NULL) {
    BIO_free (rbio);
    BIO_free (wbio);
    tls_session_free (s);
    return cairn_fail (-ENOMEM, "out of memory: %s", ssl_reason ("SSL_new"));
  }
  /* An empty rbio means "wait for more", not end of file. */
  BIO_set_mem_eof_return (rbio, -1);
  SSL_set_bio (s->ssl, rbio, wbio);
  SSL_set_app_data (s->ssl, s);
  if (ctx->server)
    SSL_set_accept_state (s->ssl);
  else {
    char host[300], *colon;

    snprintf (host, sizeof host, "%s", peer);
    colon = strrchr (host, ':');
    if (colon && strchr (host, ':') == colon)
      *colon = '\0';
    if (set_peer_host (s->ssl, host) < 0) {
      tls_session_free (s);
      return cairn_fail (-EINVAL, "cannot check a certificate for %s", host);
    }
    SSL_set_connect_state (s->ssl);
  }
  *out = s;
  return 0;
}

/* Free a session (NULL is allowed). */
void
tls_session_free (struct tls_session *s)
{
  if (s == NULL)
    return;
  SSL_free (s->ssl);
  free (s);
}

/* Add ciphertext. */
int
tls_session_feed (struct tls_session *s, const void *data, size_t len)
{
  while (len > 0) {
    int n = BIO_write (SSL_get_rbio (s->ssl), data,
                       (int) MIN (len, (size_t) INT_MAX));

    if (n <= 0)
      return cairn_fail (-ENOMEM, "out of memory buffering TLS input");
    data = (const char *) data + n;
    len -= (size_t) n;
  }
  return 0;
}

/* Fail the session: the message says what and with whom. */
static int
session_fail (struct tls_session *s, int ret)
{
  char why[256];

  tls_describe_error (s->ssl, ret, why, sizeof why);
  if (!s->ready)
    return cairn_fail (-EPROTO, "TLS handshake with %s failed: %s%s",
                       s->peer, why, tls_hint (s->ctx, why));
  return cairn_fail (-EPROTO, "TLS error from %s: %s%s", s->peer, why,
                     tls_hint (s->ctx, why));
}

/* Handshake, then decrypt. */
int
tls_session_read (struct tls_session *s, void *buf, size_t cap, size_t *n)
{
  int r, e;

  *n = 0;
  if (!s->ready) {
    r = SSL_do_handshake (s->ssl);
    if (r != 1) {
      e = SSL_get_error (s->ssl, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return TLS_WANT_INPUT;
      return session_fail (s, r);
    }
    s->ready = true;
  }
  r = SSL_read (s->ssl, buf, (int) MIN (cap, (size_t) INT_MAX));
  if (r > 0) {
    *n = (size_t) r;
    return TLS_DATA;
  }
  e = SSL_get_error (s->ssl, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
    return TLS_WANT_INPUT;
  if (e == SSL_ERROR_ZERO_RETURN) {
    ERR_clear_error ();
    return TLS_CLOSED;
  }
  return session_fail (s, r);
}

/* Handshake done? */
bool
tls_session_ready (const struct tls_session *s)
{
  return s->ready;
}

/* Who the client authenticated as. */
bool
tls_session_identity (const struct tls_session *s, bool *psk, char *buf,
                      size_t len)
{
  X509_NAME *subject;
  X509 *cert;
  int n, first;

  if (!s->ready || len == 0)
    return false;
  if (s->psk_user[0]) {
    *psk = true;
    snprintf (buf, len, "%s", s->psk_user);
    return true;
  }
  cert = SSL_get0_peer_certificate (s->ssl);
  if (cert == NULL)
    return false;
  subject = X509_get_subject_name (cert);
  /* Exactly one CN: with several, which one names the client would be a
   * guess (cairn-grants(5), x509:NAME).
   */
  first = X509_NAME_get_index_by_NID (subject, NID_commonName, -1);
  if (first < 0 ||
      X509_NAME_get_index_by_NID (subject, NID_commonName, first) >= 0)
    return false;
  n = ASN1_STRING_length (X509_NAME_ENTRY_get_data
                          (X509_NAME_get_entry (subject, first)));
  if (n <= 0 || (size_t) n >= len)           /* empty, or too long */
    return false;
  n = X509_NAME_get_text_by_NID (subject, NID_commonName, buf, (int) len);
  if (n <= 0 || (size_t) n != strlen (buf))   /* a NUL in it */
    return false;
  *psk = false;
  return true;
}

/* Encrypt (the memory BIO takes all of it). */
int
tls_session_write (struct tls_session *s, const void *buf, size_t len)
{
  const char *p = buf;

  if (!s->ready || s->close_sent)
    return cairn_fail (-EPIPE, "TLS to %s: %s", s->peer, s->ready
                       ? "the session is closed" : "the handshake is not done");
  while (len > 0) {
    int n = SSL_write (s->ssl, p, (int) MIN (len, (size_t) (1 << 30)));

    if (n <= 0)
      return session_fail (s, n);
    p += n;
    len -= (size_t) n;
  }
  return 0;
}

/* Queue close_notify. */
void
tls_session_close (struct tls_session *s)
{
  if (s->close_sent || !s->ready)
    return;
  s->close_sent = true;
  SSL_shutdown (s->ssl);
  ERR_clear_error ();
}

/* Take the ciphertext waiting to go out. */
int
tls_session_take (struct tls_session *s, char **out, size_t *len)
{
  BIO *wbio = SSL_get_wbio (s->ssl);
  size_t pending = BIO_ctrl_pending (wbio);
  char *buf;
  int n;

  *out = NULL;
  *len = 0;
  if (pending == 0)
    return 0;
  buf = malloc (pending);
  if (buf == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  n = BIO_read (wbio, buf, (int) pending);
  if (n <= 0) {
    free (buf);
    return 0;
  }
  *out = buf;
  *len = (size_t) n;
  return 0;
}
