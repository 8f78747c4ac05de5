/* Unit tests of the grants file parser and of the decision (who may do
 * what on which name), server/grants.c, cairn-grants(5).  Includes
 * hostile input: every refused file must name its line, and random bytes
 * must never crash the parser or grant anything to a stranger (the seed
 * is printed; CAIRN_TEST_SEED=N replays a run).
 */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "grants.h"

/* Parse text, which must be accepted. */
static struct grants *
parse_ok (const char *text)
{
  struct grants *g = NULL;
  int r = grants_parse (text, strlen (text), "g", &g);

  cr_assert_eq (r, 0, "refused: %s\n%s", cairn_errmsg (), text);
  cr_assert_not_null (g);
  return g;
}

/* Parse text, which must be refused with a message holding want. */
static void
parse_bad (const char *text, const char *want)
{
  struct grants *g = (struct grants *) 1;
  int r = grants_parse (text, strlen (text), "g", &g);

  cr_assert_lt (r, 0, "accepted: %s", text);
  cr_assert_null (g);
  cr_assert_not_null (strstr (cairn_errmsg (), want),
                      "for %s: '%s' has no '%s'", text, cairn_errmsg (), want);
}

static struct grant_peer
psk (const char *name, bool tls)
{
  return (struct grant_peer) { .psk_identity = name, .tls = tls };
}

static struct grant_peer
unix_peer (uid_t uid, gid_t gid)
{
  return (struct grant_peer) { .has_cred = true, .uid = uid, .gid = gid };
}

static struct grant_peer
tcp (const char *addr)
{
  struct grant_peer p = { .has_addr = true };

  if (strchr (addr, ':')) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *) &p.addr;
    a->sin6_family = AF_INET6;
    cr_assert_eq (inet_pton (AF_INET6, addr, &a->sin6_addr), 1);
  }
  else {
    struct sockaddr_in *a = (struct sockaddr_in *) &p.addr;
    a->sin_family = AF_INET;
    cr_assert_eq (inet_pton (AF_INET, addr, &a->sin_addr), 1);
  }
  return p;
}

Test (parse, comments_blank_lines_and_whitespace)
{
  struct grants *g = parse_ok ("# tenants\n\n   \t\n"
                               "psk:alice tenant-a/ nbd=rw control=list,snapshot # hers\n"
                               "\tuid:1001\t tenant-b/db nbd=ro\r\n"
                               "addr:10.0.0.0/8 * nbd=ro tls=required");

  cr_assert_eq (grants_count (g), 3);
  grants_free (g);
  g = parse_ok ("");
  cr_assert_eq (grants_count (g), 0);
  grants_free (g);
}

Test (parse, errors_name_the_line)
{
  parse_bad ("psk:alice * nbd=rw\n\nbogus * nbd=rw\n", "g line 3: the principal");
  parse_bad ("psk:alice\n", "line 1: a rule needs a volume prefix");
  parse_bad ("psk:alice a/ \n", "line 1: the rule grants nothing");
  parse_bad ("psk:alice a/ nbd=write\n", "nbd= must be none, ro or rw");
  parse_bad ("psk:alice a/ nbd=ro nbd=rw\n", "nbd= is given twice");
  parse_bad ("psk:alice a/ control=list,format\n", "control= takes list");
  parse_bad ("psk:alice a/ control=list,\n", "empty operation");
  parse_bad ("psk:alice a/ control=,list\n", "empty operation");
  parse_bad ("psk:alice a/ control=\n", "names no operation");
  parse_bad ("psk:alice a/ tls=maybe\n", "tls= takes only");
  parse_bad ("psk:alice a/ nbd=rw owner=me\n", "expected nbd=ACCESS");
  parse_bad ("psk:alice a/ nbd\n", "expected nbd=ACCESS");
  parse_bad ("psk: a/ nbd=rw\n", "identity is empty");
  parse_bad ("uid:root a/ nbd=rw\n", "must be a number");
  parse_bad ("uid:-1 a/ nbd=rw\n", "must be a number");
  parse_bad ("gid:4294967295 a/ nbd=rw\n", "below 4294967295");
  parse_bad ("uid:12x a/ nbd=rw\n", "below 4294967295");
  parse_bad ("addr:example.com a/ nbd=rw\n", "not an IPv4 or IPv6 address");
  parse_bad ("addr:10.0.0.0/33 a/ nbd=rw\n", "above 32");
  parse_bad ("addr:::1/129 a/ nbd=rw\n", "above 128");
  parse_bad ("addr:10.0.0.0/ a/ nbd=rw\n", "not a number");
  parse_bad ("addr:10.0.0.1/8 a/ nbd=rw\n", "host bits set");
  parse_bad ("addr:10.0.0.0/+8 a/ nbd=rw\n", "not a number");
  parse_bad ("psk:alice /a nbd=rw\n", "empty component");
  parse_bad ("psk:alice a//b nbd=rw\n", "empty component");
  parse_bad ("psk:alice a@b nbd=rw\n", "may hold only");
  parse_bad ("psk:alice a* nbd=rw\n", "may hold only");
  parse_bad ("psk:alice a/ nbd=rw\x01\n", "control or non-ASCII");
  parse_bad ("psk:al\xc3\xa9 a/ nbd=rw\n", "control or non-ASCII");
  parse_bad ("psk:alice a/ nbd=rw\n\n\n\nuser:bob a/ nbd=rw\n", "line 5:");
}

Test (parse, hostile_sizes_and_bytes)
{
  char *big = malloc (GRANTS_MAX_LINE + 100);
  char name[300];
  struct grants *g = NULL;

  /* NUL bytes: refused, whatever follows. */
  cr_assert_lt (grants_parse ("psk:a * nbd=rw\0uid:0 * control=admin", 36,
                              "g", &g), 0);
  cr_assert_not_null (strstr (cairn_errmsg (), "NUL"));
  /* An overlong line. */
  memset (big, 'a', GRANTS_MAX_LINE + 50);
  memcpy (big, "psk:", 4);
  big[GRANTS_MAX_LINE + 50] = '\0';
  parse_bad (big, "line 1: longer than");
  free (big);
  /* Overlong identity and prefix. */
  memset (name, 'x', sizeof name);
  name[sizeof name - 1] = '\0';
  {
    char line[700];

    snprintf (line, sizeof line, "psk:%s * nbd=rw\n", name);
    parse_bad (line, "longer than 255");
    snprintf (line, sizeof line, "psk:a %s nbd=rw\n", name);
    parse_bad (line, "longer than 255");
  }
}

/* Random lines built from the file's own tokens, and random bytes: the
 * parser never crashes, and whatever it accepts gives a stranger (a PSK
 * name no line uses, uid 4242) nothing unless it has an "any" rule.
 */
Test (parse, random_input_grants_strangers_nothing)
{
  static const char *tok[] = {
    "psk:alice", "uid:7", "gid:7", "addr:10.0.0.0/8", "addr:::1", "any",
    "x509:host", "*", "a/", "a/b", "nbd=rw", "nbd=ro", "nbd=none",
    "control=list", "control=admin", "control=list,send", "tls=required",
    "#", " ", "\t", "\n", "=", ",", ":", "/", "@", "psk:", "addr:1.2.3.4/32",
  };
  const char *env = getenv ("CAIRN_TEST_SEED");
  unsigned seed = env ? (unsigned) strtoul (env, NULL, 10)
                      : (unsigned) time (NULL);
  struct grant_peer stranger = psk ("mallory", true);
  struct grant_peer local = unix_peer (4242, 4242);

  fprintf (stderr, "test-grants: seed %u (CAIRN_TEST_SEED=%u replays)\n",
           seed, seed);
  srand (seed);
  for (int iter = 0; iter < 20000; iter++) {
    char text[512];
    size_t len = 0;
    struct grants *g = NULL;
    int n = rand () % 24;

    for (int i = 0; i < n && len < sizeof text - 32; i++) {
      if (rand () % 8 == 0)
        text[len++] = (char) (rand () % 256);
      else {
        const char *t = tok[rand () % (sizeof tok / sizeof tok[0])];
        len += (size_t) snprintf (text + len, sizeof text - len, "%s%s", t,
                                  rand () % 2 ? " " : "");
      }
    }
    if (grants_parse (text, len, "g", &g) < 0) {
      cr_assert_null (g);
      cr_assert_not_null (strstr (cairn_errmsg (), "g"), "seed %u", seed);
      continue;
    }
    if (memmem (text, len, "any", 3) == NULL) {
      cr_assert_eq (grants_ops (g, &stranger, "a/b"), 0, "seed %u", seed);
      cr_assert_eq (grants_nbd (g, &stranger, "a/b"), GRANT_NBD_NONE,
                    "seed %u", seed);
      cr_assert_not (grants_is_admin (g, &stranger), "seed %u", seed);
      cr_assert_eq (grants_ops (g, &local, "x"), 0, "seed %u", seed);
    }
    grants_free (g);
  }
}

Test (decide, prefixes_cover_their_volumes_only)
{
  struct grants *g = parse_ok ("psk:alice tenant-a/ nbd=rw control=list,snapshot\n"
                               "psk:alice shared/img nbd=ro control=list\n");
  struct grant_peer a = psk ("alice", true);

  cr_assert_eq (grants_ops (g, &a, "tenant-a/db"),
                GRANT_OP_LIST | GRANT_OP_SNAPSHOT);
  cr_assert_eq (grants_ops (g, &a, "tenant-a/x/y@monday"),
                GRANT_OP_LIST | GRANT_OP_SNAPSHOT);
  cr_assert_eq (grants_ops (g, &a, "tenant-a"), 0);         /* not under */
  cr_assert_eq (grants_ops (g, &a, "tenant-a/"), 0);
  cr_assert_eq (grants_ops (g, &a, "tenant-ab/db"), 0);
  cr_assert_eq (grants_ops (g, &a, "tenant-b/db"), 0);
  cr_assert_eq (grants_nbd (g, &a, "tenant-a/db"), GRANT_NBD_RW);
  cr_assert_eq (grants_nbd (g, &a, "shared/img"), GRANT_NBD_RO);
  cr_assert_eq (grants_nbd (g, &a, "shared/img@gold"), GRANT_NBD_RO);
  cr_assert_eq (grants_nbd (g, &a, "shared/img2"), GRANT_NBD_NONE);
  cr_assert_eq (grants_nbd (g, &a, "shared/img/x"), GRANT_NBD_NONE);
  cr_assert_not (grants_is_admin (g, &a));
  cr_assert (grants_knows (g, &a));
  grants_free (g);
}

Test (decide, rights_add_up_and_admin_gives_all)
{
  struct grants *g = parse_ok ("psk:alice a/ nbd=ro control=list\n"
                               "psk:alice a/ nbd=rw control=send\n"
                               "psk:alice a/ nbd=none\n"
                               "psk:root * control=admin\n"
                               "psk:ops a/ control=admin\n");
  struct grant_peer a = psk ("alice", true), root = psk ("root", true);
  struct grant_peer ops = psk ("ops", true);

  cr_assert_eq (grants_ops (g, &a, "a/v"), GRANT_OP_LIST | GRANT_OP_SEND);
  cr_assert_eq (grants_nbd (g, &a, "a/v"), GRANT_NBD_RW);
  cr_assert_eq (grants_ops (g, &root, "anything/at/all"), GRANT_OP_ALL);
  cr_assert_eq (grants_nbd (g, &root, "z"), GRANT_NBD_RW);
  cr_assert (grants_is_admin (g, &root));
  /* Admin of a prefix is not admin of the server. */
  cr_assert_eq (grants_ops (g, &ops, "a/v"), GRANT_OP_ALL);
  cr_assert_eq (grants_ops (g, &ops, "b/v"), 0);
  cr_assert_not (grants_is_admin (g, &ops));
  grants_free (g);
}

Test (decide, principals_match_only_their_kind)
{
  struct grants *g = parse_ok ("uid:1001 a/ nbd=rw\n"
                               "gid:2000 b/ nbd=ro\n"
                               "addr:192.0.2.0/24 c/ nbd=rw\n"
                               "addr:2001:db8::/32 d/ nbd=rw\n"
                               "x509:host1.example a/ control=list\n"
                               "psk:1001 e/ nbd=rw\n"
                               "psk:bob f/ nbd=rw tls=required\n"
                               "any pub/ nbd=ro\n");
  struct grant_peer u = unix_peer (1001, 5), gg = unix_peer (5, 2000);
  struct grant_peer v4 = tcp ("192.0.2.77"), v4x = tcp ("192.0.3.1");
  struct grant_peer mapped = tcp ("::ffff:192.0.2.9"), v6 = tcp ("2001:db8:1::5");
  struct grant_peer x = { .x509_name = "host1.example", .tls = true };
  struct grant_peer bob_plain = psk ("bob", false), bob = psk ("bob", true);

  cr_assert_eq (grants_nbd (g, &u, "a/v"), GRANT_NBD_RW);
  cr_assert_eq (grants_nbd (g, &u, "b/v"), GRANT_NBD_NONE);
  cr_assert_eq (grants_nbd (g, &u, "e/v"), GRANT_NBD_NONE);  /* uid ≠ psk */
  cr_assert_eq (grants_nbd (g, &gg, "b/v"), GRANT_NBD_RO);
  cr_assert_eq (grants_nbd (g, &gg, "a/v"), GRANT_NBD_NONE);
  cr_assert_eq (grants_nbd (g, &v4, "c/v"), GRANT_NBD_RW);
  cr_assert_eq (grants_nbd (g, &v4x, "c/v"), GRANT_NBD_NONE);
  cr_assert_eq (grants_nbd (g, &mapped, "c/v"), GRANT_NBD_RW);
  cr_assert_eq (grants_nbd (g, &v6, "d/v"), GRANT_NBD_RW);
  cr_assert_eq (grants_nbd (g, &v6, "c/v"), GRANT_NBD_NONE);
  cr_assert_eq (grants_ops (g, &x, "a/v"), GRANT_OP_LIST);
  cr_assert_eq (grants_nbd (g, &x, "a/v"), GRANT_NBD_NONE);
  cr_assert_eq (grants_nbd (g, &bob_plain, "f/v"), GRANT_NBD_NONE);
  cr_assert_eq (grants_nbd (g, &bob, "f/v"), GRANT_NBD_RW);
  /* any: everyone, Unix or TCP, with or without identity. */
  cr_assert_eq (grants_nbd (g, &v4x, "pub/v"), GRANT_NBD_RO);
  cr_assert_eq (grants_nbd (g, &u, "pub/v"), GRANT_NBD_RO);
  cr_assert (grants_knows (g, &v4x));
  grants_free (g);
}

Test (decide, no_grants_is_the_trusted_administrator)
{
  struct grant_peer nobody = { 0 };

  cr_assert_eq (grants_ops (NULL, &nobody, "x"), GRANT_OP_ALL);
  cr_assert_eq (grants_nbd (NULL, &nobody, "x"), GRANT_NBD_RW);
  cr_assert (grants_is_admin (NULL, &nobody));
}

Test (decide, an_empty_file_grants_nothing)
{
  struct grants *g = parse_ok ("# nobody yet\n");
  struct grant_peer u = unix_peer (0, 0);

  cr_assert_eq (grants_ops (g, &u, "x"), 0);
  cr_assert_eq (grants_nbd (g, &u, "x"), GRANT_NBD_NONE);
  cr_assert_not (grants_is_admin (g, &u));
  cr_assert_not (grants_knows (g, &u));
  grants_free (g);
}

Test (peer, names_for_logs)
{
  char buf[128];
  struct grant_peer p = psk ("alice", true), u = unix_peer (7, 8);
  struct grant_peer t = tcp ("::ffff:10.1.2.3");

  grants_peer_name (&p, buf, sizeof buf);
  cr_assert_str_eq (buf, "psk:alice");
  grants_peer_name (&u, buf, sizeof buf);
  cr_assert_str_eq (buf, "uid:7/gid:8");
  grants_peer_name (&t, buf, sizeof buf);
  cr_assert_str_eq (buf, "addr:10.1.2.3");
}

Test (load, missing_and_odd_files)
{
  struct grants *g = NULL;

  cr_assert_eq (grants_load ("/nonexistent/grants", &g), -ENOENT);
  cr_assert_not_null (strstr (cairn_errmsg (), "/nonexistent/grants"));
  cr_assert_eq (grants_load ("/", &g), -EINVAL);
  cr_assert_null (g);
}

/* The x509 name the NBD side takes from nbdkit's DN: the one CN, as the
 * control server reads it from the certificate; nothing when there is
 * none, several, an empty one or one that does not fit.
 */
Test (x509, common_name_of_a_dn)
{
  static const struct { const char *dn, *cn; } ok[] = {
    { "CN=alice", "alice" },
    { "CN=alice,O=Example", "alice" },
    { "O=Example\\, Inc.,CN=host1.example", "host1.example" },
    { "cn=bob+UID=12,DC=example,DC=org", "bob" },
    { "2.5.4.3=carol,O=x", "carol" },
    { "CN=a\\,b\\+c\\5Cd\\20e", "a,b+c\\d e" },
    { "OU=CN\\=fake,CN=real", "real" },
  };
  static const char *const none[] = {
    "", "O=Example", "CN=", "CN=a,CN=b", "CN=a+CN=b", "CN=a\\",
    "CN=a\\00b", "CNX=a", "garbage",
  };
  char buf[16];

  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    memset (buf, 'X', sizeof buf);
    cr_assert (grants_dn_common_name (ok[i].dn, buf, sizeof buf),
               "no CN found in %s", ok[i].dn);
    cr_assert_str_eq (buf, ok[i].cn, "%s", ok[i].dn);
  }
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
    cr_assert_not (grants_dn_common_name (none[i], buf, sizeof buf),
                   "a CN was found in '%s': '%s'", none[i], buf);
  /* Exactly one byte too long for the buffer: no name, not a cut one. */
  cr_assert (grants_dn_common_name ("CN=123456789012345", buf, sizeof buf));
  cr_assert_not (grants_dn_common_name ("CN=1234567890123456", buf,
                                        sizeof buf));
}

/* A gid: rule matches the primary group or any supplementary one the
 * transport reports, and nothing else.
 */
Test (decide, gid_rules_see_supplementary_groups)
{
  struct grants *g = parse_ok ("gid:2000 a/ control=list\n"
                               "gid:3000 b/ nbd=ro\n");
  struct grant_peer primary = unix_peer (1001, 2000);
  struct grant_peer member = unix_peer (1001, 1001);
  struct grant_peer stranger = unix_peer (1001, 1001);
  struct grant_peer tcp_peer = tcp ("192.0.2.1");

  member.ngroups = 3;
  member.groups[0] = 17;
  member.groups[1] = 3000;
  member.groups[2] = 2000;
  stranger.ngroups = 2;
  stranger.groups[0] = 2001;
  stranger.groups[1] = 1999;
  cr_assert_eq (grants_ops (g, &primary, "a/v"), GRANT_OP_LIST);
  cr_assert_eq (grants_nbd (g, &primary, "b/v"), GRANT_NBD_NONE);
  cr_assert_eq (grants_ops (g, &member, "a/v"), GRANT_OP_LIST);
  cr_assert_eq (grants_nbd (g, &member, "b/v"), GRANT_NBD_RO);
  cr_assert_eq (grants_ops (g, &stranger, "a/v"), 0);
  cr_assert_eq (grants_nbd (g, &stranger, "b/v"), GRANT_NBD_NONE);
  cr_assert_not (grants_knows (g, &stranger));
  /* Groups without Unix credentials count for nothing. */
  tcp_peer.ngroups = 1;
  tcp_peer.groups[0] = 2000;
  cr_assert_eq (grants_ops (g, &tcp_peer, "a/v"), 0);
  grants_free (g);
}
