/* Cairn control protocol over TLS (OpenSSL): credentials and the memory-BIO
 * session the control server runs inside its event loop.  The design note
 * is at the top of tls.c.
 *
 * Credentials are laid out as nbdkit's (nbdkit-tls(1)): a directory of
 * X.509 files (ca-cert.pem, server-cert.pem, server-key.pem, and for a
 * client client-cert.pem, client-key.pem), or a PSK file of lines
 * "username:hexkey" (psktool's format).  A PSK file wins over certificates
 * when both are given, as in nbdkit.
 */
#ifndef CAIRN_NET_TLS_H
#define CAIRN_NET_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "util.h"

/* TLS on the control server's TCP port (control-tls=). */
enum tls_mode {
  TLS_OFF,              /* plain only */
  TLS_ON,               /* TLS or plain, as each client starts */
  TLS_REQUIRE,          /* TLS only: a plain client is refused */
};

/* Where credentials come from. */
struct tls_config {
  enum tls_mode mode;          /* server side; a client ignores it */
  const char *certificates;    /* X.509 directory, or NULL */
  const char *psk_file;        /* PSK file, or NULL (wins over certificates) */
  const char *username;        /* client PSK identity; NULL: the file's
                                  first entry */
  bool verify_peer;            /* server with certificates: require a client
                                  certificate signed by ca-cert.pem */
};

/* Parse "off", "on" or "require" (also yes/no/true/false/1/0 for on/off, as
 * nbdkit's --tls takes).  Returns 0 or -EINVAL with a message.
 */
int tls_parse_mode (const char *arg, enum tls_mode *mode) CAIRN_WUR;
/* "off", "on" or "require". */
const char *tls_mode_name (enum tls_mode mode);

/* Credentials loaded once: an OpenSSL SSL_CTX and the PSK table. */
struct tls_ctx;

/* Load the credentials of cfg for a server or a client.  A client without
 * certificates or a PSK file verifies servers against the system's CA
 * store.  Fails with a message naming the file and what is wrong with it.
 */
int tls_ctx_new (const struct tls_config *cfg, bool server,
                 struct tls_ctx **out) CAIRN_WUR;
void tls_ctx_free (struct tls_ctx *ctx);
/* True if the credentials are pre-shared keys. */
bool tls_ctx_psk (const struct tls_ctx *ctx);

/* For a blocking client on a connected socket (control-client.c): an SSL
 * object of a client ctx bound to fd, set to check that the server's
 * certificate names host.  Returns the SSL * (as void *, so that callers
 * need no OpenSSL header) or NULL with a message.
 */
void *tls_client_ssl (struct tls_ctx *ctx, int fd, const char *host);
/* Describe why an OpenSSL call on ssl failed (ret: its return value) in
 * buf, for "TLS handshake with HOST failed: <this>", and clear OpenSSL's
 * error queue.
 */
void tls_describe_error (void *ssl, int ret, char *buf, size_t len);
/* A hint on what to check after a handshake of ctx failed with why (as
 * tls_describe_error put it): "" or text starting with " (" or ": ".
 */
const char *tls_hint (const struct tls_ctx *ctx, const char *why);

/* ------------------------------------------------------------ sessions */

/* One TLS connection whose ciphertext goes through memory (tls.c). */
struct tls_session;

enum {
  TLS_WANT_INPUT = 0,     /* tls_session_read: nothing more until fed */
  TLS_DATA = 1,           /* tls_session_read: plaintext in buf */
  TLS_CLOSED = 2,         /* tls_session_read: the peer sent close_notify */
};

/* Start a session of ctx (the server or client side, as ctx was made).
 * peer names the other end in messages ("127.0.0.1:40312"); a client also
 * checks that the server's certificate names it (host part only).
 */
int tls_session_new (struct tls_ctx *ctx, const char *peer,
                     struct tls_session **out) CAIRN_WUR;
void tls_session_free (struct tls_session *s);
/* Ciphertext that arrived from the peer. */
int tls_session_feed (struct tls_session *s, const void *data, size_t len)
  CAIRN_WUR;
/* Advance the handshake, then decrypt: TLS_DATA with up to cap bytes in
 * buf (*n), TLS_WANT_INPUT, TLS_CLOSED, or a negative errno with the
 * message "TLS handshake with PEER failed: ..." (or "TLS error from PEER:
 * ..." once established).  Call until it returns TLS_WANT_INPUT so that
 * every whole record is decrypted; then take the output (an alert, the
 * handshake's next flight).
 */
int tls_session_read (struct tls_session *s, void *buf, size_t cap,
                      size_t *n) CAIRN_WUR;
/* Is the handshake done (plaintext can go out)? */
bool tls_session_ready (const struct tls_session *s);
/* Who the client authenticated as (handshake done): its PSK username
 * (*psk true), or its certificate's subject CN (*psk false).  Returns
 * false when it showed neither: no certificate, or one whose subject has
 * no CN, several, or one of len bytes or more (a name that is not whole
 * must not match a grant).
 */
bool tls_session_identity (const struct tls_session *s, bool *psk,
                           char *buf, size_t len);
/* Encrypt len bytes (handshake done): the records join the output. */
int tls_session_write (struct tls_session *s, const void *buf, size_t len)
  CAIRN_WUR;
/* Queue close_notify (once; nothing after it is sent). */
void tls_session_close (struct tls_session *s);
/* Take every byte of ciphertext waiting to go to the peer: 0 with *out
 * malloc'd and *len > 0, 0 with *out NULL when there is none, or -ENOMEM.
 */
int tls_session_take (struct tls_session *s, char **out, size_t *len)
  CAIRN_WUR;

/* Does the first byte a client sent start a TLS handshake (a TLS record of
 * type handshake, 0x16)?  A control request line never starts with it.
 */
static inline bool
tls_looks_like_hello (unsigned char first)
{
  return first == 0x16;
}

#endif /* CAIRN_NET_TLS_H */
