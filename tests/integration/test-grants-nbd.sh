#!/usr/bin/env bash
# Grants on the NBD side (cairn-grants(5), plugin/cairn.c): two tenants by
# Unix uid on the NBD socket (clients run as other uids with setpriv), then
# two by address on TCP (127.0.0.1 and ::1).  Each lists, opens and writes
# only its own exports; the other's is unknown exactly as a missing name
# is; a read-only grant is listed read-only and refuses writes.  A reload
# that revokes a uid: its new connections see nothing, and a connection it
# opened before keeps the access it was opened with (documented).
. "$top_srcdir/tests/integration/plugin-functions.sh"
require setpriv
require nbdinfo
require python3
require_nbdsh
[ "$(id -u)" -eq 0 ] || skip "running clients as other uids needs root"

CTL="$TMPDIR_TEST/ctl.sock" GRANTS="$TMPDIR_TEST/grants"
trap 'rc=$?; for p in $(jobs -p); do kill -9 "$p" 2>/dev/null || true; done; (exit $rc); cleanup' EXIT
chmod 0755 "$TMPDIR_TEST"              # the other uids reach the socket

cat >"$GRANTS" <<'EOF'
uid:4101 tenant-a/ nbd=rw
uid:4102 tenant-b/ nbd=rw
uid:4102 shared/img nbd=ro
addr:127.0.0.1 tenant-a/ nbd=rw
addr:::1/128 tenant-b/ nbd=rw
EOF

# The exports uid $1 lists, sorted, one line.
exports_of () {
  setpriv --reuid="$1" --regid="$1" --clear-groups \
    nbdinfo --list --json "nbd+unix:///?socket=$SOCK" |
    python3 -c 'import json, sys
e = json.load(sys.stdin)["exports"]
print(" ".join(sorted(x["export-name"] + ("(ro)" if "read-only" in x.get("description", "") else "") for x in e)))'
}
# Run nbdsh as uid $1 on export $2 with the Python of $3; rc and out.
nbd_as () {
  rc=0
  out=$(setpriv --reuid="$1" --regid="$1" --clear-groups \
        nbdsh -u "nbd+unix:///$2?socket=$SOCK" -c "$3" 2>&1) || rc=$?
}
# Opening $2 as uid $1 fails, and says what it says of the missing name $3.
refused_as () {
  local first
  nbd_as "$1" "$2" 'h.pread(512, 0)'
  [ "$rc" -ne 0 ] || fail "uid $1 opened $2"
  first=${out//$2/X}
  nbd_as "$1" "$3" 'h.pread(512, 0)'
  [ "$rc" -ne 0 ] || fail "uid $1 opened $3"
  [ "$first" = "${out//$3/X}" ] || fail "uid $1: $2 and the missing $3 differ: '$first' vs '${out//$3/X}'"
}

make_pool 1G
testctl create tenant-a/v 16M
testctl create tenant-b/v 16M
testctl create shared/img 16M
testctl snapshot tenant-a/v s1
start_plugin control="$CTL" grants="$GRANTS"
wait_for_sockets "$NBDKIT_PID" nbdkit "$NBDKIT_LOG" "$CTL"
chmod 0666 "$SOCK"

# Lists: each uid its own; the server's own user (root) everything.
[ "$(exports_of 4101)" = "tenant-a/v tenant-a/v@s1(ro)" ] || fail "uid 4101 lists: $(exports_of 4101)"
[ "$(exports_of 4102)" = "shared/img(ro) tenant-b/v" ] || fail "uid 4102 lists: $(exports_of 4102)"
[ "$(exports_of 4103)" = "" ] || fail "uid 4103, with no grant, lists: $(exports_of 4103)"
expect_exports shared/img tenant-a/v tenant-a/v@s1 tenant-b/v

# Each writes its own; the other's is unknown, as a missing name is.
nbd_as 4101 tenant-a/v 'h.pwrite(b"A" * 4096, 0); h.flush(); assert h.pread(4096, 0) == b"A" * 4096'
[ "$rc" -eq 0 ] || fail "uid 4101 cannot write tenant-a/v: $out"
nbd_as 4102 tenant-b/v 'h.pwrite(b"B" * 4096, 0); h.flush()'
[ "$rc" -eq 0 ] || fail "uid 4102 cannot write tenant-b/v: $out"
refused_as 4101 tenant-b/v tenant-b/ghost
refused_as 4102 tenant-a/v@s1 tenant-a/ghost@s1
refused_as 4103 shared/img shared/ghost
# Read-only grant: reads work, writes fail with EPERM, nothing changes.
nbd_as 4102 shared/img 'assert h.is_read_only(); h.pread(4096, 0)
try:
    h.pwrite(b"X" * 4096, 0)
except nbd.Error as e:
    assert "EPERM" in str(e) or "EROFS" in str(e), e; print("refused")'
[ "$rc" -eq 0 ] && grep -q refused <<<"$out" || fail "the read-only grant let a write through: $out"
[ "$(nbdsh -u "nbd+unix:///shared/img?socket=$SOCK" -c 'print(h.pread(4096, 0) == bytes(4096))')" = True ] ||
  fail "shared/img changed"
[ "$(nbdsh -u "nbd+unix:///tenant-b/v?socket=$SOCK" -c 'print(h.pread(4096, 0) == b"B" * 4096)')" = True ] ||
  fail "tenant-b/v does not hold what uid 4102 wrote"

# Revoking uid 4101 while it has a connection open.
FLAGS="$TMPDIR_TEST/flags"             # where uid 4101 may write
mkdir -m 1777 "$FLAGS"
setpriv --reuid=4101 --regid=4101 --clear-groups nbdsh \
  -u "nbd+unix:///tenant-a/v?socket=$SOCK" -c "
import os, time
open('$FLAGS/ready', 'w').close()
while not os.path.exists('$FLAGS/go'):
    time.sleep(0.05)
h.pwrite(b'C' * 4096, 4096)
h.flush()
print('held connection wrote')" >"$TMPDIR_TEST/held.out" 2>&1 &
held=$!
for _ in $(seq 300); do [ -e "$FLAGS/ready" ] && break; sleep 0.1; done
[ -e "$FLAGS/ready" ] || fail "the held connection did not open"
grep -v "uid:4101" "$GRANTS" >"$GRANTS.new" && mv "$GRANTS.new" "$GRANTS"
"$CAIRN" --socket "$CTL" grants reload >/dev/null || fail "grants reload"
[ "$(exports_of 4101)" = "" ] || fail "revoked uid 4101 still lists: $(exports_of 4101)"
nbd_as 4101 tenant-a/v 'h.pread(512, 0)'
[ "$rc" -ne 0 ] || fail "revoked uid 4101 opened tenant-a/v"
touch "$FLAGS/go"
wait $held || fail "the connection opened before the reload was cut: $(cat "$TMPDIR_TEST/held.out")"
grep -q "held connection wrote" "$TMPDIR_TEST/held.out" || fail "held: $(cat "$TMPDIR_TEST/held.out")"
stop_plugin

# By address on TCP: 127.0.0.1 is tenant a, ::1 tenant b.
PORT=$(free_port)
echo "=== tcp" >>"$NBDKIT_LOG"
nbdkit_exec "$NBDKIT" --foreground -p "$PORT" "$PLUGIN" pool="$POOL" \
  grants="$GRANTS" >>"$NBDKIT_LOG" 2>&1 &
NBDKIT_PID=$!
for _ in $(seq 300); do nbdinfo --list "nbd://127.0.0.1:$PORT" >/dev/null 2>&1 && break; sleep 0.1; done
list_tcp () {
  nbdinfo --list --json "nbd://$1:$PORT" | python3 -c 'import json, sys
print(" ".join(sorted(x["export-name"] for x in json.load(sys.stdin)["exports"])))'
}
[ "$(list_tcp 127.0.0.1)" = "tenant-a/v tenant-a/v@s1" ] || fail "127.0.0.1 lists: $(list_tcp 127.0.0.1)"
[ "$(list_tcp '[::1]')" = "tenant-b/v" ] || fail "::1 lists: $(list_tcp '[::1]')"
nbdsh -u "nbd://127.0.0.1:$PORT/tenant-a/v" -c 'h.pwrite(b"D" * 4096, 8192); h.flush()' ||
  fail "127.0.0.1 cannot write tenant-a/v"
a=$(nbdsh -u "nbd://127.0.0.1:$PORT/tenant-b/v" -c 'h.pread(1, 0)' 2>&1) &&
  fail "127.0.0.1 opened tenant-b/v"
b=$(nbdsh -u "nbd://127.0.0.1:$PORT/tenant-b/ghost" -c 'h.pread(1, 0)' 2>&1) &&
  fail "127.0.0.1 opened a missing export"
[ "${a//tenant-b\/v/X}" = "${b//tenant-b\/ghost/X}" ] || fail "TCP: '$a' vs '$b'"
nbdsh -u "nbd://[::1]:$PORT/tenant-a/v" -c 'h.pread(1, 0)' 2>/dev/null &&
  fail "::1 opened tenant-a/v"
stop_plugin
echo PASS
