#!/usr/bin/env bash
# Grants on the control protocol (cairn-grants(5), server/gate.c): two
# tenants on the TCP control port by TLS PSK identity (keys made by
# openssl).  Each lists, snapshots, clones and sends only its own volumes;
# every attempt on the other's (by name, clone from its snapshot, receive
# into its volume, diff against it, its snapshot list) fails and names
# nothing: the error is the one a name that does not exist gets.  The
# server's own user on the Unix socket stays the administrator.  A reload
# revokes a tenant at once; a file that does not parse is refused with its
# line and the grants in force stay.
. "$top_srcdir/tests/integration/grants-functions.sh"
require openssl
require python3

CTL="$TMPDIR_TEST/ctl.sock" GRANTS="$TMPDIR_TEST/grants"
KEYS="$TMPDIR_TEST/keys.psk" ALICE="$TMPDIR_TEST/alice.psk" BOB="$TMPDIR_TEST/bob.psk"
trap 'rc=$?; for p in $(jobs -p); do kill -9 "$p" 2>/dev/null || true; done; (exit $rc); cleanup' EXIT
PORT=$(free_port)

echo "alice:$(openssl rand -hex 32)" >"$ALICE"
echo "bob:$(openssl rand -hex 32)" >"$BOB"
cat "$ALICE" "$BOB" >"$KEYS"
cat >"$GRANTS" <<'EOF'
# two tenants
psk:alice tenant-a/ nbd=rw control=list,create,snapshot,clone,delete,send,receive
psk:bob   tenant-b/ nbd=rw control=list,create,snapshot,clone,send,receive
gid:4300  tenant-b/ control=list
EOF

admin () { "$CAIRN" --socket "$CTL" "$@"; }
as () {
  local who=$1
  shift
  args=("cairn as $who" "$@")
  rc=0
  out=$(timeout -s KILL 60 "$CAIRN" --connect "127.0.0.1:$PORT" \
        --tls-psk "$TMPDIR_TEST/$who.psk" "$@" 2>&1) || rc=$?
}
# The last `as` failed exactly as for a name that does not exist, without
# a word of permission: run the same command with $2 in place of $1 and
# compare the messages.
as_missing () {
  local name=$1 ghost=$2
  shift 2
  grep -q "forbidden\|not permitted" <<<"$out" &&
    fail "${args[*]}: said forbidden instead of not found: $out"
  same_as_missing "$name" "$ghost" as "$@"
}

make_pool 1G
start_plugin control="$CTL" control-tcp="127.0.0.1:$PORT" \
  control-tls-psk="$KEYS" grants="$GRANTS"
wait_for_sockets "$NBDKIT_PID" nbdkit "$NBDKIT_LOG" "$CTL"

# The administrator (this user, on the Unix socket) sets up both tenants.
for t in a b; do
  admin volume create "tenant-$t/v" 64M >/dev/null || fail "create tenant-$t/v"
  admin snapshot create "tenant-$t/v@s1" >/dev/null || fail "snapshot tenant-$t/v"
done
admin volume create other 16M >/dev/null || fail "create other"

# Lists: each tenant sees its own volumes and snapshots only.
as alice volume list --snapshots --json
[ "$rc" -eq 0 ] || fail "alice volume list: $out"
python3 -c 'import json, sys
names = sorted(v["name"] for v in json.loads(sys.argv[1])["volumes"])
assert names == ["tenant-a/v", "tenant-a/v@s1"], names' "$out" ||
  fail "alice's list is not her own: $out"
as bob volume list --snapshots
expect 0 "tenant-b/v"
grep -q "tenant-a\|other" <<<"$out" && fail "bob sees what is not his: $out"

# A gid: rule on the Unix socket: a member of group 4300, primary or
# supplementary (setpriv --groups), sees tenant-b/; without the group,
# nothing.
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
  chmod 0755 "$TMPDIR_TEST"
  chmod 0666 "$CTL"
  as_uid () {
    local opts=$1
    shift
    args=("cairn as $opts" "$@")
    rc=0
    # shellcheck disable=SC2086
    out=$(setpriv $opts "$CAIRN" --socket "$CTL" "$@" 2>&1) || rc=$?
  }
  for opts in "--regid=4300 --clear-groups" "--regid=4201 --groups=4300" \
              "--regid=4201 --groups=17,4300,23"; do
    as_uid "--reuid=4201 $opts" volume list
    expect 0 "^tenant-b/v "
    grep -q "tenant-a\|other" <<<"$out" && fail "$opts: sees what is not its: $out"
  done
  as_uid "--reuid=4201 --regid=4201 --groups=4301" volume list --json
  expect 0 '"volumes": \[\]'
  as_uid "--reuid=4201 --regid=4201 --groups=4300" volume show tenant-a/v
  expect 3 "no volume named 'tenant-a/v'"
  as_uid "--reuid=4201 --regid=4201 --groups=4300" snapshot create tenant-b/v@g
  expect 1 "not permitted: the grants give uid:4201/gid:4201 no 'snapshot'"
else
  echo "SKIP (part): gid: rules need root and setpriv" >&2
fi

# Her own: snapshot, clone, diff, send, receive.
as alice snapshot create tenant-a/v@s2
expect 0
as alice clone tenant-a/v@s1 tenant-a/c
expect 0 "tenant-a/c"
as alice diff tenant-a/v@s1 tenant-a/v
expect 0
"$CAIRN" --connect "127.0.0.1:$PORT" --tls-psk "$ALICE" send tenant-a/v@s1 \
  >"$TMPDIR_TEST/a.stream" || fail "alice cannot send her own snapshot"
"$CAIRN" --connect "127.0.0.1:$PORT" --tls-psk "$ALICE" receive tenant-a/r \
  <"$TMPDIR_TEST/a.stream" >/dev/null || fail "alice cannot receive into her prefix"
# An incremental stream's base named as a snapshot of the same volume
# ("--from s1") is judged as that volume, not as a volume called "s1".
"$CAIRN" --connect "127.0.0.1:$PORT" --tls-psk "$ALICE" send tenant-a/v@s2 \
  --from s1 >/dev/null || fail "alice cannot send her own incremental stream"

# The other's: every attempt fails as a missing name would.
as alice volume show tenant-b/v
as_missing tenant-b/v tenant-b/ghost alice volume show tenant-b/ghost
as alice snapshot list tenant-b/v
as_missing tenant-b/v tenant-b/ghost alice snapshot list tenant-b/ghost
as alice snapshot create tenant-b/v@mine
as_missing tenant-b/v tenant-b/ghost alice snapshot create tenant-b/ghost@mine
as alice clone tenant-b/v@s1 tenant-a/stolen
as_missing tenant-b/v tenant-b/ghost alice clone tenant-b/ghost@s1 tenant-a/stolen
as alice diff tenant-b/v@s1 tenant-b/v
as_missing tenant-b/v tenant-b/ghost alice diff tenant-b/ghost@s1 tenant-b/ghost
as alice volume delete tenant-b/v
as_missing tenant-b/v tenant-b/ghost alice volume delete tenant-b/ghost
as alice send tenant-b/v@s1
as_missing tenant-b/v tenant-b/ghost alice send tenant-b/ghost@s1
as alice replicate tenant-b/v@s1 --to 127.0.0.1:1
as_missing tenant-b/v tenant-b/ghost alice replicate tenant-b/ghost@s1 --to 127.0.0.1:1
as bob volume show other
as_missing other ghost bob volume show ghost
# Receiving into the other's volume, or creating in its prefix, is refused
# the same whether the name exists or not.
rc=0
out=$("$CAIRN" --connect "127.0.0.1:$PORT" --tls-psk "$ALICE" receive tenant-b/v \
      <"$TMPDIR_TEST/a.stream" 2>&1) || rc=$?
[ "$rc" -ne 0 ] || fail "alice received into bob's volume"
first=${out//tenant-b\/v/X}
out=$("$CAIRN" --connect "127.0.0.1:$PORT" --tls-psk "$ALICE" receive tenant-b/ghost \
      <"$TMPDIR_TEST/a.stream" 2>&1) && fail "alice received into bob's prefix"
[ "$first" = "${out//tenant-b\/ghost/X}" ] || fail "receive: '$first' vs '$out'"
as alice volume create tenant-b/new 16M
expect 1 "not permitted"
# Server-wide methods are the administrator's.
as alice grants reload
expect 1 "administrator"
as alice status
expect 1 "administrator"
# Statistics: a tenant sees its own exports, and a total of those only.
if command -v qemu-io >/dev/null; then
  for w in "tenant-a/v 1" "tenant-b/v 3"; do
    read -r vol mib <<<"$w"
    qemu-io -f raw -c "write 0 ${mib}M" "nbd+unix:///$vol?socket=$SOCK" >/dev/null ||
      fail "writing to $vol"
  done
  as alice stats --json
  expect 0
  python3 -c 'import json, sys
j = json.loads(sys.argv[1])
names = sorted(x["name"] for x in j["exports"])
assert names == ["tenant-a/v"], names
assert j["total"]["bytes_written"] == 1 << 20, j["total"]' "$out" ||
    fail "alice's stats are not hers alone: $out"
  jcheck_rc 'j["total"]["bytes_written"] == 4 << 20' 0 --socket "$CTL" stats
else
  echo "SKIP (part): no qemu-io: statistics under grants not tested" >&2
fi
# Nothing of bob's changed.
admin snapshot list tenant-b/v | grep -q "mine" && fail "alice snapshotted bob's volume"
admin volume show tenant-b/v >/dev/null || fail "bob's volume is gone"
admin volume show tenant-a/stolen >/dev/null 2>&1 && fail "alice cloned bob's snapshot"

# Reload: a file that does not parse is refused with its line; the grants
# in force stay.
cp "$GRANTS" "$GRANTS.good"
echo "psk:alice tenant-a/ nbd=everything" >>"$GRANTS"
run --socket "$CTL" grants reload
expect 2 "line 5: nbd= must be none, ro or rw.*unchanged"
as alice volume list
expect 0 "tenant-a/v"
# Revoking alice: her next request sees nothing; bob is untouched.
grep -v alice "$GRANTS.good" >"$GRANTS"
run --socket "$CTL" grants reload
expect 0 "reloaded .*: 2 rules in force"
as alice volume list --json
expect 0
python3 -c 'import json, sys
assert json.loads(sys.argv[1])["volumes"] == []' "$out" || fail "revoked alice still sees: $out"
as alice volume show tenant-a/v
expect 3 "no volume named 'tenant-a/v'"
as bob volume list
expect 0 "tenant-b/v"

# A scrub is the pool's, so the administrator's; its commands are changes.
as alice scrub start
expect 1 "administrator"
admin scrub start --wait >/dev/null || fail "the administrator's scrub"

# The audit trail: the changes, refused or not, with principal and outcome,
# in audit.list (the administrator's) and in the server log.
as alice audit
expect 1 "administrator"
admin audit --json >"$TMPDIR_TEST/audit.json" || fail "cairn audit"
python3 - "$TMPDIR_TEST/audit.json" <<'PY' || fail "audit trail: $(cat "$TMPDIR_TEST/audit.json")"
import json, sys
a = json.load(open(sys.argv[1]))
e = [(x["principal"], x["method"], x["target"], x["outcome"].split(":")[0]) for x in a["entries"]]
def has(p, m, t, o):
    assert (p, m, t, o) in e, (p, m, t, o, e)
has("psk:alice", "snapshot.create", "tenant-a/v", "ok")
has("psk:alice", "volume.clone", "tenant-a/v@s1", "ok")
has("psk:alice", "stream.receive", "tenant-a/r", "ok")
has("psk:alice", "volume.clone", "tenant-b/v@s1", "failed (not-found)")
has("psk:alice", "volume.delete", "tenant-b/v", "failed (not-found)")
has("psk:alice", "volume.create", "tenant-b/new", "failed (permission)")
has("psk:alice", "grants.reload", "", "failed (permission)")
has("uid:0/gid:0", "volume.create", "tenant-a/v", "ok")
has("uid:0/gid:0", "grants.reload", "", "ok")
has("psk:alice", "scrub.start", "", "failed (permission)")
has("uid:0/gid:0", "scrub.start", "", "ok")
assert any(x[1] == "grants.reload" and x[3] == "failed (invalid)" for x in e), e
assert all(x["time"].endswith("Z") for x in a["entries"]), a
assert a["dropped"] == 0, a
assert not any(x[1] in ("volume.list", "volume.show", "snapshot.list") for x in e), e
PY
grep -q "cairn audit: .* psk:alice volume.delete tenant-b/v: failed (not-found)" "$NBDKIT_LOG" ||
  fail "the server log has no audit line for alice's delete"

# cairnd hands its --grants (or the config key) to the plugin.
"$CAIRND" --pool "$POOL" --grants "$GRANTS" -n | grep -q " grants=$GRANTS\$" ||
  fail "cairnd --grants"
# SIGHUP does not reload: nbdkit stops as on SIGTERM, cleanly, with what
# was done committed (cairn-grants(5), RELOADING).
admin snapshot create tenant-a/v@before-hup >/dev/null || fail "snapshot before SIGHUP"
kill -HUP "$NBDKIT_PID"
wait_gone "$NBDKIT_PID" 300 "nbdkit after SIGHUP"
rc=0
wait "$NBDKIT_PID" || rc=$?
[ "$rc" -eq 0 ] || fail "nbdkit exited with status $rc on SIGHUP"
NBDKIT_PID=
"$CAIRN" --pool "$POOL" snapshot list tenant-a/v | grep -q "before-hup" ||
  fail "the snapshot made before SIGHUP is not in the pool"
# Without a grants file there is nothing to reload.
start_plugin control="$CTL"
wait_for_sockets "$NBDKIT_PID" nbdkit "$NBDKIT_LOG" "$CTL"
run --socket "$CTL" grants reload
expect 2 "no grants file"
stop_plugin
# A bad grants file stops the server at start, with its line.
echo "uid:nobody * nbd=rw" >"$GRANTS"
msg=$(nbdkit_env timeout -s KILL 20 "$NBDKIT" --foreground --unix "$SOCK" \
      "$PLUGIN" pool="$POOL" control="$CTL" grants="$GRANTS" 2>&1) &&
  fail "nbdkit started with a bad grants file"
grep -q "grants.*line 1: .*must be a number" <<<"$msg" || fail "bad grants file: $msg"
echo "PASS"
