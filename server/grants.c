/* Cairn grants: parsing a grants file and deciding (see grants.h and
 * cairn-grants(5)).
 *
 * The parser is strict: every line is a rule, a comment or blank, and
 * anything else stops the whole file with "FILE line N: what is wrong",
 * so that a typo never silently grants or drops rights.  Decisions are a
 * linear walk over the rules; files are small (people write them) and
 * the walk allocates nothing.
 */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grants.h"

/* Largest grants file read (bytes). */
#define GRANTS_MAX_FILE (16 * 1024 * 1024)
/* Longest identity or name in a rule. */
#define GRANTS_MAX_NAME 255

enum principal_kind {
  P_ANY,     /* every caller */
  P_PSK,     /* a TLS PSK username */
  P_X509,    /* a certificate name */
  P_UID,     /* a Unix socket peer's uid */
  P_GID,     /* a Unix socket peer's primary or supplementary gid */
  P_ADDR,    /* a TCP peer's address in a network */
};

struct rule {
  enum principal_kind kind;
  char name[GRANTS_MAX_NAME + 1];  /* P_PSK, P_X509 */
  uint32_t id;                     /* P_UID, P_GID */
  int family;                      /* P_ADDR: AF_INET or AF_INET6 */
  uint8_t net[16];                 /* P_ADDR: the network, masked */
  unsigned bits;                   /* P_ADDR: prefix length */
  bool need_tls;                   /* tls=required */
  char prefix[GRANTS_MAX_NAME + 2];/* "*", "a/b/" or an exact name */
  enum grant_nbd nbd;
  unsigned ops;
  unsigned line;
};

struct grants {
  struct rule *rules;
  size_t n;
};

static const struct { const char *name; unsigned bit; } op_names[] = {
  { "list", GRANT_OP_LIST }, { "create", GRANT_OP_CREATE },
  { "snapshot", GRANT_OP_SNAPSHOT }, { "clone", GRANT_OP_CLONE },
  { "delete", GRANT_OP_DELETE }, { "send", GRANT_OP_SEND },
  { "receive", GRANT_OP_RECEIVE }, { "replicate", GRANT_OP_REPLICATE },
  { "admin", GRANT_OP_ADMIN },
};

/* Parse an operation name to its bit; 0 if unknown. */
unsigned
grants_op_bit (const char *name)
{
  for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
    if (strcmp (name, op_names[i].name) == 0)
      return op_names[i].bit;
  return 0;
}

/* A character allowed in an identity: printable, no space, no '#'. */
static bool
identity_char (char c)
{
  return c > ' ' && c < 127 && c != '#';
}

/* A character of a volume name component (DESIGN §3). */
static bool
name_char (char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

/* Check a prefix: "*", components joined by '/', optionally ending in
 * '/'.  Returns an explanation, or NULL when it is valid.
 */
static const char *
check_prefix (const char *p)
{
  size_t len = strlen (p), comp = 0;

  if (strcmp (p, "*") == 0)
    return NULL;
  if (len > GRANTS_MAX_NAME)
    return "is longer than 255 bytes";
  for (size_t i = 0; i < len; i++) {
    if (p[i] == '/') {
      if (comp == 0)
        return "has an empty component ('//' or a leading '/')";
      comp = 0;
    }
    else if (name_char (p[i]))
      comp++;
    else
      return "may hold only A-Z a-z 0-9 . _ - and '/' between components "
        "(or be '*' for every volume)";
  }
  if (len == 0)
    return "is empty";
  return NULL;
}

/* Parse "ADDR" or "ADDR/BITS" into r. */
static const char *
parse_network (const char *s, struct rule *r)
{
  char buf[INET6_ADDRSTRLEN + 8];
  char *slash, *end;
  unsigned max;
  unsigned long bits;

  if (strlen (s) >= sizeof buf)
    return "is not an address or network";
  strcpy (buf, s);
  slash = strchr (buf, '/');
  if (slash)
    *slash = '\0';
  memset (r->net, 0, sizeof r->net);
  if (inet_pton (AF_INET, buf, r->net) == 1)
    r->family = AF_INET, max = 32;
  else if (inet_pton (AF_INET6, buf, r->net) == 1)
    r->family = AF_INET6, max = 128;
  else
    return "is not an IPv4 or IPv6 address (names are not looked up)";
  bits = max;
  if (slash) {
    errno = 0;
    if (slash[1] < '0' || slash[1] > '9')
      return "has a prefix length that is not a number";
    bits = strtoul (slash + 1, &end, 10);
    if (errno || *end || bits > max)
      return r->family == AF_INET ? "has a prefix length above 32"
                                  : "has a prefix length above 128";
  }
  r->bits = (unsigned) bits;
  /* Host bits set (10.0.0.1/8) are a likely typo: refuse them. */
  for (unsigned b = r->bits; b < max; b++)
    if (r->net[b / 8] & (0x80 >> (b % 8)))
      return "has host bits set past its prefix length (write the "
        "network's first address, as 10.0.0.0/8)";
  return NULL;
}

/* Parse an unsigned id (uid or gid). */
static const char *
parse_id (const char *s, uint32_t *id)
{
  char *end;
  unsigned long long v;

  if (*s < '0' || *s > '9')
    return "must be a number (names are not looked up)";
  errno = 0;
  v = strtoull (s, &end, 10);
  if (errno || *end || v >= UINT32_MAX)
    return "must be a number below 4294967295";
  *id = (uint32_t) v;
  return NULL;
}

/* Parse the principal field into r. */
static const char *
parse_principal (char *s, struct rule *r)
{
  char *colon = strchr (s, ':');
  const char *v;

  if (strcmp (s, "any") == 0) {
    r->kind = P_ANY;
    return NULL;
  }
  if (colon == NULL)
    return "the principal must be any, psk:NAME, x509:NAME, uid:N, gid:N "
      "or addr:NETWORK";
  *colon = '\0';
  v = colon + 1;
  if (strcmp (s, "psk") == 0 || strcmp (s, "x509") == 0) {
    r->kind = s[0] == 'p' ? P_PSK : P_X509;
    if (*v == '\0')
      return "the identity is empty";
    if (strlen (v) > GRANTS_MAX_NAME)
      return "the identity is longer than 255 bytes";
    for (const char *p = v; *p; p++)
      if (!identity_char (*p))
        return "the identity has a character that is not printable ASCII";
    strcpy (r->name, v);
    return NULL;
  }
  if (strcmp (s, "uid") == 0 || strcmp (s, "gid") == 0) {
    r->kind = s[0] == 'u' ? P_UID : P_GID;
    return parse_id (v, &r->id);
  }
  if (strcmp (s, "addr") == 0) {
    r->kind = P_ADDR;
    return parse_network (v, r);
  }
  return "the principal must be any, psk:NAME, x509:NAME, uid:N, gid:N "
    "or addr:NETWORK";
}

/* Parse one option ("nbd=ro") into r; seen tracks repeats. */
static const char *
parse_option (char *s, struct rule *r, unsigned *seen)
{
  char *eq = strchr (s, '=');
  char *v, *save = NULL;

  if (eq == NULL)
    return "expected nbd=ACCESS, control=OPS or tls=required";
  *eq = '\0';
  v = eq + 1;
  if (strcmp (s, "nbd") == 0) {
    if (*seen & 1)
      return "nbd= is given twice";
    *seen |= 1;
    if (strcmp (v, "none") == 0)
      r->nbd = GRANT_NBD_NONE;
    else if (strcmp (v, "ro") == 0 || strcmp (v, "read-only") == 0)
      r->nbd = GRANT_NBD_RO;
    else if (strcmp (v, "rw") == 0 || strcmp (v, "read-write") == 0)
      r->nbd = GRANT_NBD_RW;
    else
      return "nbd= must be none, ro or rw";
    return NULL;
  }
  if (strcmp (s, "control") == 0) {
    if (*seen & 2)
      return "control= is given twice";
    *seen |= 2;
    if (*v == '\0')
      return "control= names no operation";
    if (v[0] == ',' || v[strlen (v) - 1] == ',' || strstr (v, ",,"))
      return "control= has an empty operation";
    for (char *op = strtok_r (v, ",", &save); op;
         op = strtok_r (NULL, ",", &save)) {
      unsigned bit = grants_op_bit (op);

      if (bit == 0)
        return "control= takes list, create, snapshot, clone, delete, "
          "send, receive, replicate and admin, separated by commas";
      r->ops |= bit;
    }
    return NULL;
  }
  if (strcmp (s, "tls") == 0) {
    if (*seen & 4)
      return "tls= is given twice";
    *seen |= 4;
    if (strcmp (v, "required") != 0)
      return "tls= takes only 'required'";
    r->need_tls = true;
    return NULL;
  }
  return "expected nbd=ACCESS, control=OPS or tls=required";
}

/* Parse one line (NUL-terminated, no newline) into r; *empty is set for
 * blank lines and comments.
 */
static const char *
parse_line (char *line, struct rule *r, bool *empty)
{
  char *hash = strchr (line, '#');
  char *save = NULL, *field;
  const char *why;
  unsigned seen = 0;

  if (hash)
    *hash = '\0';
  memset (r, 0, sizeof *r);
  *empty = false;
  for (char *p = line; *p; p++)
    if (*p == '\t' || *p == '\r')
      *p = ' ';
    else if ((unsigned char) *p < ' ' || (unsigned char) *p >= 127)
      return "has a control or non-ASCII character";
  field = strtok_r (line, " ", &save);
  if (field == NULL) {
    *empty = true;
    return NULL;
  }
  why = parse_principal (field, r);
  if (why)
    return why;
  field = strtok_r (NULL, " ", &save);
  if (field == NULL)
    return "a rule needs a volume prefix after the principal ('*' for "
      "every volume, 'tenant-a/' for the volumes under tenant-a/)";
  why = check_prefix (field);
  if (why) {
    static __thread char msg[160];

    snprintf (msg, sizeof msg, "the prefix %.40s %s", field, why);
    return msg;
  }
  strcpy (r->prefix, field);
  while ((field = strtok_r (NULL, " ", &save)) != NULL) {
    why = parse_option (field, r, &seen);
    if (why)
      return why;
  }
  if ((seen & 3) == 0)
    return "the rule grants nothing: give nbd=ACCESS or control=OPS";
  if (r->ops & GRANT_OP_ADMIN)
    r->ops = GRANT_OP_ALL;
  return NULL;
}

/* Parse a grants file's text. */
int
grants_parse (const char *text, size_t len, const char *name,
              struct grants **out)
{
  struct grants *g = calloc (1, sizeof *g);
  size_t cap = 0, pos = 0;
  unsigned lineno = 0;
  char line[GRANTS_MAX_LINE + 1];
  int r = 0;

  *out = NULL;
  if (g == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  if (memchr (text, '\0', len)) {
    r = cairn_fail (-EINVAL, "%s: has a NUL byte: a grants file is text "
                    "(cairn-grants(5))", name);
    goto out;
  }
  while (pos < len) {
    const char *nl = memchr (text + pos, '\n', len - pos);
    size_t n = nl ? (size_t) (nl - (text + pos)) : len - pos;
    struct rule rule;
    const char *why;
    bool empty;

    lineno++;
    if (n > GRANTS_MAX_LINE) {
      r = cairn_fail (-EINVAL, "%s line %u: longer than %d bytes", name,
                      lineno, GRANTS_MAX_LINE);
      goto out;
    }
    memcpy (line, text + pos, n);
    line[n] = '\0';
    pos += n + 1;
    why = parse_line (line, &rule, &empty);
    if (why) {
      r = cairn_fail (-EINVAL, "%s line %u: %s (cairn-grants(5))", name,
                      lineno, why);
      goto out;
    }
    if (empty)
      continue;
    if (g->n == GRANTS_MAX_RULES) {
      r = cairn_fail (-E2BIG, "%s line %u: more than %d rules", name,
                      lineno, GRANTS_MAX_RULES);
      goto out;
    }
    if (g->n == cap) {
      size_t ncap = cap ? cap * 2 : 16;
      struct rule *nr = realloc (g->rules, ncap * sizeof *nr);

      if (nr == NULL) {
        r = cairn_fail (-ENOMEM, "out of memory");
        goto out;
      }
      g->rules = nr;
      cap = ncap;
    }
    rule.line = lineno;
    g->rules[g->n++] = rule;
  }
 out:
  if (r < 0)
    grants_free (g);
  else
    *out = g;
  return r;
}

/* Read and parse the file at path. */
int
grants_load (const char *path, struct grants **out)
{
  struct stat st;
  char *buf = NULL;
  size_t got = 0;
  int fd, r;

  *out = NULL;
  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd == -1)
    return cairn_fail (-errno, "grants file %s: %s", path, strerror (errno));
  if (fstat (fd, &st) == -1) {
    r = cairn_fail (-errno, "grants file %s: %s", path, strerror (errno));
    goto out;
  }
  if (!S_ISREG (st.st_mode) || st.st_size > GRANTS_MAX_FILE) {
    r = cairn_fail (-EINVAL, "grants file %s: not a regular file of at most "
                    "%d bytes", path, GRANTS_MAX_FILE);
    goto out;
  }
  buf = malloc ((size_t) st.st_size + 1);
  if (buf == NULL) {
    r = cairn_fail (-ENOMEM, "out of memory");
    goto out;
  }
  while (got < (size_t) st.st_size) {
    ssize_t k = read (fd, buf + got, (size_t) st.st_size - got);

    if (k == -1 && errno == EINTR)
      continue;
    if (k == -1) {
      r = cairn_fail (-errno, "grants file %s: %s", path, strerror (errno));
      goto out;
    }
    if (k == 0)
      break;
    got += (size_t) k;
  }
  r = grants_parse (buf, got, path, out);
 out:
  free (buf);
  close (fd);
  return r;
}

void
grants_free (struct grants *g)
{
  if (g == NULL)
    return;
  free (g->rules);
  free (g);
}

size_t
grants_count (const struct grants *g)
{
  return g ? g->n : 0;
}

/* The peer's address as family + bytes (IPv4-mapped IPv6 as IPv4). */
static int
peer_addr (const struct grant_peer *peer, uint8_t bytes[16])
{
  if (peer->addr.ss_family == AF_INET) {
    memcpy (bytes, &((const struct sockaddr_in *) &peer->addr)->sin_addr, 4);
    return AF_INET;
  }
  if (peer->addr.ss_family == AF_INET6) {
    const struct in6_addr *a =
      &((const struct sockaddr_in6 *) &peer->addr)->sin6_addr;

    if (IN6_IS_ADDR_V4MAPPED (a)) {
      memcpy (bytes, &a->s6_addr[12], 4);
      return AF_INET;
    }
    memcpy (bytes, a->s6_addr, 16);
    return AF_INET6;
  }
  return AF_UNSPEC;
}

/* Does rule r's principal (and tls=required) match peer? */
static bool
rule_matches_peer (const struct rule *r, const struct grant_peer *peer)
{
  uint8_t a[16];

  if (r->need_tls && !peer->tls)
    return false;
  switch (r->kind) {
  case P_ANY:
    return true;
  case P_PSK:
    return peer->psk_identity && strcmp (peer->psk_identity, r->name) == 0;
  case P_X509:
    return peer->x509_name && strcmp (peer->x509_name, r->name) == 0;
  case P_UID:
    return peer->has_cred && peer->uid == r->id;
  case P_GID:
    if (!peer->has_cred)
      return false;
    for (unsigned i = 0; i < peer->ngroups && i < GRANT_MAX_GROUPS; i++)
      if (peer->groups[i] == r->id)
        return true;
    return peer->gid == r->id;
  case P_ADDR:
    if (!peer->has_addr || peer_addr (peer, a) != r->family)
      return false;
    for (unsigned b = 0; b < r->bits; b++)
      if ((a[b / 8] ^ r->net[b / 8]) & (0x80 >> (b % 8)))
        return false;
    return true;
  }
  return false;
}

/* Does rule r's prefix cover the volume part of name? */
static bool
rule_covers (const struct rule *r, const char *name)
{
  size_t vlen = strcspn (name, "@"), plen = strlen (r->prefix);

  if (r->prefix[0] == '*')
    return true;
  if (r->prefix[plen - 1] == '/')
    return vlen > plen && strncmp (name, r->prefix, plen) == 0;
  return vlen == plen && strncmp (name, r->prefix, plen) == 0;
}

unsigned
grants_ops (const struct grants *g, const struct grant_peer *peer,
            const char *name)
{
  unsigned ops = 0;

  if (g == NULL)
    return GRANT_OP_ALL;
  for (size_t i = 0; i < g->n; i++)
    if (rule_matches_peer (&g->rules[i], peer) &&
        rule_covers (&g->rules[i], name))
      ops |= g->rules[i].ops;
  return ops;
}

enum grant_nbd
grants_nbd (const struct grants *g, const struct grant_peer *peer,
            const char *name)
{
  enum grant_nbd best = GRANT_NBD_NONE;

  if (g == NULL)
    return GRANT_NBD_RW;
  for (size_t i = 0; i < g->n; i++) {
    const struct rule *r = &g->rules[i];
    enum grant_nbd level = r->nbd;

    /* control=admin administers the volumes, data included. */
    if (r->ops & GRANT_OP_ADMIN)
      level = GRANT_NBD_RW;
    if (level > best && rule_matches_peer (r, peer) && rule_covers (r, name))
      best = level;
  }
  return best;
}

bool
grants_is_admin (const struct grants *g, const struct grant_peer *peer)
{
  if (g == NULL)
    return true;
  for (size_t i = 0; i < g->n; i++)
    if ((g->rules[i].ops & GRANT_OP_ADMIN) && g->rules[i].prefix[0] == '*' &&
        rule_matches_peer (&g->rules[i], peer))
      return true;
  return false;
}

bool
grants_knows (const struct grants *g, const struct grant_peer *peer)
{
  if (g == NULL)
    return true;
  for (size_t i = 0; i < g->n; i++)
    if (rule_matches_peer (&g->rules[i], peer))
      return true;
  return false;
}

void
grants_peer_name (const struct grant_peer *peer, char *buf, size_t len)
{
  char addr[INET6_ADDRSTRLEN] = "?";
  uint8_t a[16];
  int fam;

  if (peer->psk_identity)
    snprintf (buf, len, "psk:%s", peer->psk_identity);
  else if (peer->x509_name)
    snprintf (buf, len, "x509:%s", peer->x509_name);
  else if (peer->has_cred)
    snprintf (buf, len, "uid:%u/gid:%u", (unsigned) peer->uid,
              (unsigned) peer->gid);
  else if (peer->has_addr) {
    fam = peer_addr (peer, a);
    if (fam != AF_UNSPEC)
      inet_ntop (fam, a, addr, sizeof addr);
    snprintf (buf, len, "addr:%s%s", addr, peer->tls ? " (tls)" : "");
  }
  else
    snprintf (buf, len, "local");
}

/* The CN of an RFC 4514 DN.  Attributes are TYPE=VALUE, separated by ','
 * (between RDNs) or '+' (within one); in a value, '\' escapes the next
 * character or starts two hex digits.  A CN's type is "CN" (any case) or
 * its OID, 2.5.4.3.
 */
bool
grants_dn_common_name (const char *dn, char *buf, size_t len)
{
  const char *p = dn;
  unsigned found = 0;

  if (len == 0)
    return false;
  while (*p) {
    const char *type = p, *eq = strchr (p, '=');
    size_t tlen, out = 0;
    bool cn;

    if (eq == NULL)
      return false;
    tlen = (size_t) (eq - type);
    while (tlen > 0 && *type == ' ')
      type++, tlen--;
    cn = (tlen == 2 && strncasecmp (type, "CN", 2) == 0) ||
      (tlen == 7 && strncmp (type, "2.5.4.3", 7) == 0);
    for (p = eq + 1; *p && *p != ',' && *p != '+'; p++) {
      char c = *p;

      if (c == '\\') {
        int hi = hex_digit_value (p[1]);
        int lo = hi >= 0 ? hex_digit_value (p[2]) : -1;

        if (p[1] == '\0')
          return false;
        if (hi >= 0 && lo >= 0) {
          c = (char) (hi << 4 | lo);
          p += 2;
        }
        else
          c = *++p;
      }
      if (!cn)
        continue;
      if (c == '\0' || out + 1 >= len)
        return false;
      buf[out++] = c;
    }
    if (cn) {
      if (out == 0 || ++found > 1)
        return false;
      buf[out] = '\0';
    }
    if (*p)
      p++;
  }
  return found == 1;
}

/* ------------------------------------------------------------ the store */

struct grants_store {
  pthread_rwlock_t lock;
  struct grants *g;          /* in force; replaced under the write lock */
  char *path;
};

int
grants_store_open (const char *path, struct grants_store **out)
{
  struct grants_store *s;
  int r;

  *out = NULL;
  s = calloc (1, sizeof *s);
  if (s == NULL || (s->path = strdup (path)) == NULL) {
    free (s);
    return cairn_fail (-ENOMEM, "out of memory");
  }
  r = grants_load (path, &s->g);
  if (r < 0) {
    free (s->path);
    free (s);
    return r;
  }
  pthread_rwlock_init (&s->lock, NULL);
  *out = s;
  return 0;
}

void
grants_store_free (struct grants_store *s)
{
  if (s == NULL)
    return;
  pthread_rwlock_destroy (&s->lock);
  grants_free (s->g);
  free (s->path);
  free (s);
}

int
grants_store_reload (struct grants_store *s, size_t *nrules)
{
  struct grants *g, *old;
  int r = grants_load (s->path, &g);

  if (r < 0)
    return r;
  pthread_rwlock_wrlock (&s->lock);
  old = s->g;
  s->g = g;
  pthread_rwlock_unlock (&s->lock);
  grants_free (old);
  *nrules = g->n;
  return 0;
}

const char *
grants_store_path (const struct grants_store *s)
{
  return s ? s->path : NULL;
}

unsigned
grants_store_ops (struct grants_store *s, const struct grant_peer *peer,
                  const char *name)
{
  unsigned ops;

  if (s == NULL || peer->owner)
    return GRANT_OP_ALL;
  pthread_rwlock_rdlock (&s->lock);
  ops = grants_ops (s->g, peer, name);
  pthread_rwlock_unlock (&s->lock);
  return ops;
}

enum grant_nbd
grants_store_nbd (struct grants_store *s, const struct grant_peer *peer,
                  const char *name)
{
  enum grant_nbd level;

  if (s == NULL || peer->owner)
    return GRANT_NBD_RW;
  pthread_rwlock_rdlock (&s->lock);
  level = grants_nbd (s->g, peer, name);
  pthread_rwlock_unlock (&s->lock);
  return level;
}

bool
grants_store_is_admin (struct grants_store *s, const struct grant_peer *peer)
{
  bool yes;

  if (s == NULL || peer->owner)
    return true;
  pthread_rwlock_rdlock (&s->lock);
  yes = grants_is_admin (s->g, peer);
  pthread_rwlock_unlock (&s->lock);
  return yes;
}
