#!/usr/bin/env bash
# Pools on Ceph RBD images, against a real single-machine cluster
# (tests/ceph/cluster) that this test starts once and shares with every
# check below: the errors of rbd: names, one writer per image (a second
# server fails naming the first), cairn status of a server and of a
# standby, takeover and split brain, a cluster that stops answering under
# load, a pool of two images mirrored, the Ceph options, and then plugin
# tests that run on a pool file, run again
# with their pool on an RBD image (CAIRN_TEST_RBD_POOL, plugin-functions.sh).
#
# Skipped where Ceph is not installed, where this build has no librbd, and
# in sanitizer builds (librados is not built with them; the device code is
# plain librbd calls, and the rest is what the other tests check there).
# CAIRN_TEST_RBD_TESTS="test-a test-b": which plugin tests to run again.
# The default, fio verify from several connections (13 s), keeps this test
# near 150 s at load average 20; send and receive between RBD pools are checked here, and the
# whole test-send-receive (76 s on RBD at load average 20, each of its
# many offline commands connecting to the cluster anew),
# test-plugin-data (60 s on RBD) and test-plugin-snapshot-load (10 minutes
# on RBD, where each of its many small reads and commits is a round trip
# to the cluster) pass too, run on demand:
#   CAIRN_TEST_RBD_TESTS="test-send-receive test-plugin-data" \
#     make check TESTS=tests/integration/test-rbd.sh

. "$top_srcdir/tests/integration/plugin-functions.sh"

[ "$HAVE_RBD" = yes ] || skip "this build has no RBD support (librbd-dev, librados-dev)"
[ "$ENABLE_SANITIZERS" != yes ] && [ "$ENABLE_TSAN" != yes ] ||
  skip "RBD tests run in the normal build only"
# scripts/test installs Ceph's daemons while the builds and the first
# tests run, and names the file where it leaves apt's exit status: wait
# for it (20 minutes at most), and fail, not skip, when the install did.
if [ -n "${CAIRN_CEPH_INSTALL:-}" ]; then
  for _ in $(seq 1200); do
    [ -e "$CAIRN_CEPH_INSTALL" ] && break
    sleep 1
  done
  [ -e "$CAIRN_CEPH_INSTALL" ] || fail "Ceph's install did not end within 20 minutes"
  [ "$(cat "$CAIRN_CEPH_INSTALL")" = 0 ] ||
    fail "installing Ceph failed: $(tail -n 20 "$CAIRN_CEPH_INSTALL.log" 2>/dev/null)"
fi
for b in ceph-mon ceph-osd ceph-mgr ceph rbd; do
  command -v "$b" >/dev/null || skip "$b is not installed (Ceph: ceph-mon ceph-osd ceph-mgr ceph-common)"
done
require_nbdsh

CLUSTER="$top_srcdir/tests/ceph/cluster"
CEPH_DIR="$TMPDIR_TEST/ceph"
t0=$SECONDS
# The cluster goes with the test however it ends; functions.sh's cleanup
# then removes the directory.
cleanup_rbd () {
  local rc=$?
  [ -z "${OSD_PID:-}" ] || kill -CONT "$OSD_PID" 2>/dev/null || true
  [ -z "${orphan_daemon:-}" ] || kill -9 "$orphan_daemon" 2>/dev/null || true
  [ -z "${PRIMARY_PID:-}" ] || kill -9 "$PRIMARY_PID" 2>/dev/null || true
  [ -z "${STANDBY_PID:-}" ] || kill -9 "$STANDBY_PID" 2>/dev/null || true
  "$CLUSTER" stop "$CEPH_DIR" || true
  set +e
  (exit $rc)
  cleanup                     # exits with $rc
}
trap 'cleanup_rbd' EXIT
# An orphaned cluster (its starter was SIGKILLed): a registered directory
# whose owner is gone, with a "daemon" (a sleep) in its pid files.  The
# next start stops it.
ORPHAN="$TMPDIR_TEST/orphan"
mkdir -p "$ORPHAN/run"
: >"$ORPHAN/ceph.conf"
# (in a subshell: not this shell's child, which would stay a zombie)
( sleep 600 >/dev/null 2>&1 & echo $! >"$ORPHAN/run/osd.0.pid" )
orphan_daemon=$(cat "$ORPHAN/run/osd.0.pid")
sh -c 'exit 0' &
dead_owner=$!
wait "$dead_owner"
registry=${CEPH_CLUSTER_REGISTRY:-${TMPDIR:-/tmp}/cairn-ceph-clusters}
mkdir -p "$registry"
echo "$dead_owner $ORPHAN" >"$registry/test-rbd-orphan-$$"
CEPH_CLUSTER_WAIT_MGR=no "$CLUSTER" start "$CEPH_DIR" ||
  fail "the test cluster did not start (logs were in $CEPH_DIR/log)"
wait_gone "$orphan_daemon" 100 "the orphaned cluster's daemon"
[ ! -e "$ORPHAN" ] && [ ! -e "$registry/test-rbd-orphan-$$" ] ||
  fail "the orphaned cluster was not swept at the next start"
eval "$("$CLUSTER" env "$CEPH_DIR")"
echo "cluster ready in $(( SECONDS - t0 )) s"

POOL=rbd:rbd/main

# --- errors of names and options: clear, and nothing made
expect_fail () {
  local want=$1 out
  shift
  if out=$("$@" 2>&1); then fail "$* succeeded"; fi
  grep -q -- "$want" <<<"$out" || fail "$*: expected '$want' in: $out"
  echo "refused as it should: $out"
}
expect_fail "named rbd:POOL/IMAGE" "$CAIRN" mkpool rbd:rbd --size 64M
expect_fail "named rbd:POOL/IMAGE" "$CAIRN" mkpool rbd:rbd/a/b --size 64M
expect_fail "unknown option 'bogus'" "$CAIRN" mkpool rbd:rbd/x:bogus=1 --size 64M
expect_fail "Ceph pool nopool: no such pool" "$CAIRN" mkpool rbd:nopool/x --size 64M
expect_fail "give the size" "$CAIRN" mkpool rbd:rbd/x
expect_fail "no such image" "$CAIRN" fsck rbd:rbd/none
expect_fail "reading the Ceph configuration $TMPDIR_TEST/nothing" \
  "$CAIRN" --ceph-conf "$TMPDIR_TEST/nothing" mkpool rbd:rbd/x --size 64M
expect_fail "--create makes pool files" "$CAIRND" --pool rbd:rbd/x --create 1G \
  --foreground --socket "$TMPDIR_TEST/x.sock" --control "$TMPDIR_TEST/x.ctl"
[ -z "$(rbd ls rbd)" ] || fail "a refused command left an image: $(rbd ls rbd)"

# --- make a pool; the options instead of CEPH_CONF; no overwrite without --force
conf=$CEPH_CONF
out=$(env -u CEPH_CONF "$CAIRN" --ceph-conf "$conf" --ceph-id admin \
        mkpool "$POOL" --size 256M) || fail "mkpool with --ceph-conf failed: $out"
echo "$out"
expect_fail "exists: use --force" "$CAIRN" mkpool "$POOL" --size 256M
[ "$(rbd info rbd/main --format json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["size"], "exclusive-lock" in j["features"])')" = "268435456 True" ] ||
  fail "the image is not 256 MiB with exclusive-lock: $(rbd info rbd/main)"
testctl create vol1 64M

# --- one writer: a second server and an offline command fail, naming the first
CTL="$TMPDIR_TEST/ctl.sock"
start_plugin control="$CTL"
PRIMARY_PID=$NBDKIT_PID
# cairn status names the cluster, the image and the lock's holder: us.
fsid=$(ceph fsid 2>/dev/null) || fail "ceph fsid"
FSID=$fsid PID=$NBDKIT_PID jcheck_rc '[(r["device"], r["pool"], r["image"],
  r["fsid"], "127.0.0.1" in r["mon_host"], r["lock_ours"], r["lock_owner_alive"],
  "(pid %s on " % os.environ["PID"] in r["lock_owner_name"],
  r["lock_owner"] in r["client"] or r["client"] in r["lock_owner"])
  for r in j["rbd"]] == [("rbd:rbd/main", "rbd", "main", os.environ["FSID"],
  True, True, True, True, True)]' 0 --socket "$CTL" status
out=$("$CAIRN" --socket "$CTL" status) || fail "cairn status: $out"
grep -q "^rbd image *rbd:rbd/main$" <<<"$out" &&
  grep -q "^  cluster *fsid $fsid, monitors .*127.0.0.1" <<<"$out" &&
  grep -q "^  lock *held by this server (" <<<"$out" ||
  fail "cairn status does not show the image, cluster and lock: $out"
export TMPDIR_TEST
nbdsh -u "$(uri vol1)" -c '
import os
data = os.urandom(1 << 20)
h.pwrite(data, 3 << 20)
h.flush()
assert h.pread(1 << 20, 3 << 20) == data
open(os.environ["TMPDIR_TEST"] + "/data", "wb").write(data)
' || fail "write and read back through the RBD pool"
if out=$(nbdkit_env "$NBDKIT" --foreground --unix "$TMPDIR_TEST/b.sock" \
           "$PLUGIN" pool="$POOL" 2>&1); then
  fail "a second server opened the pool: $out"
fi
grep -q "pool $POOL is in use by nbdkit (pid $NBDKIT_PID on " <<<"$out" ||
  fail "the second server's message does not name the owner: $out"
echo "second server refused: $out"
expect_fail "is in use by nbdkit (pid $NBDKIT_PID" "$CAIRN" --pool "$POOL" volume list
expect_fail "in use" "$CAIRN" mkpool "$POOL" --size 256M --force
stop_plugin
PRIMARY_PID=
# Stopped: the lock is free and the data is there.
nbdkit_env "$NBDKIT" -U - "$PLUGIN" pool="$POOL" --run \
  "nbdcopy --synchronous \"\$uri\" $TMPDIR_TEST/copy" -e vol1 ||
  fail "reading vol1 after a restart"
cmp <(dd if="$TMPDIR_TEST/copy" bs=1M skip=3 count=1 status=none) "$TMPDIR_TEST/data" ||
  fail "vol1 does not hold what was written"
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck of the RBD pool"

# --- cut off: the cluster blocklists the server (as it does when a standby
# breaks its lock); its next write fails with ESHUTDOWN and it stops
# serving, saying why
POOL=rbd:rbd/cut
make_pool 128M
testctl create vol1 16M
start_plugin
addr=$(rbd status rbd/cut --format json | python3 -c 'import json, sys
w = json.load(sys.stdin)["watchers"]
assert len(w) == 1, w
print(w[0]["address"])') || fail "the server does not watch its image"
ceph osd blocklist add "$addr" >/dev/null 2>&1 || fail "ceph osd blocklist add $addr"
if out=$(nbdsh -u "$(uri vol1)" -c 'h.pwrite(b"y" * 65536, 0); h.flush()' 2>&1); then
  fail "a write of a blocklisted server succeeded"
fi
grep -q "ESHUTDOWN\|EIO\|transport endpoint shutdown" <<<"$out" || fail "the write failed otherwise: $out"
wait_gone "$NBDKIT_PID" 300 "the blocklisted server"
wait "$NBDKIT_PID" 2>/dev/null || true
NBDKIT_PID=
grep -q "pool rbd:rbd/cut was taken over by another server .*: stopping" \
  "$NBDKIT_LOG" || fail "the server did not say why it stopped: $(tail -5 "$NBDKIT_LOG")"
echo "blocklisted server stopped: $(grep -o 'pool rbd:rbd/cut was taken.*' "$NBDKIT_LOG" | head -1)"
ceph osd blocklist rm "$addr" >/dev/null 2>&1 || true

# --- takeover: a standby waits while the primary serves; the primary is
# killed under writes that flush; the standby breaks its lock and serves,
# and every block flushed before the kill reads back
t_ha=$SECONDS
POOL=rbd:rbd/ha
SOCK2="$TMPDIR_TEST/standby.sock"
make_pool 128M
testctl create vol1 16M
start_plugin
PRIMARY_PID=$NBDKIT_PID
CTL2="$TMPDIR_TEST/standby.ctl"
start_standby () {
  rm -f "$SOCK2"
  nbdkit_exec "$NBDKIT" --foreground --unix "$SOCK2" "$PLUGIN" pool="$POOL" \
    standby=true control="$CTL2" >"$TMPDIR_TEST/standby.log" 2>&1 &
  STANDBY_PID=$!
  for _ in $(seq 600); do
    grep -q "waiting for it to stop or go" "$TMPDIR_TEST/standby.log" && return 0
    kill -0 "$STANDBY_PID" 2>/dev/null || fail "the standby exited: $(cat "$TMPDIR_TEST/standby.log")"
    sleep 0.1
  done
  fail "the standby does not say what it waits for: $(cat "$TMPDIR_TEST/standby.log")"
}
# Wait until a read through the standby succeeds; sets took to the
# seconds since $1 (a time.monotonic(), the same clock in every process).
standby_reads () {
  grep -q "serving pool" "$TMPDIR_TEST/standby.log" &&
    nbdsh -u "nbd+unix:///vol1?socket=$SOCK2" -c 'h.pread(4096, 0)' >/dev/null 2>&1
}
wait_standby_serves () {
  for _ in $(seq 1200); do
    standby_reads && break
    kill -0 "$STANDBY_PID" 2>/dev/null || fail "the standby exited: $(cat "$TMPDIR_TEST/standby.log")"
    sleep 0.1
  done
  took=$(python3 -c "import time; print('%.1f' % (time.monotonic() - $1))")
  standby_reads ||
    fail "the standby does not serve 120 s later: $(cat "$TMPDIR_TEST/standby.log")"
}
flushed () { cat "$TMPDIR_TEST/flushed" 2>/dev/null | wc -l; }
seed=${CAIRN_TEST_SEED:-$RANDOM}
echo "writer seed $seed"
# start_writer URI: 64 KiB at a random place, then a flush, and only then
# the record "offset seq" that says it is durable; until it is killed or
# a request fails (the error goes to $TMPDIR_TEST/writer.err).  Sets writer.
start_writer () {
  rm -f "$TMPDIR_TEST/flushed" "$TMPDIR_TEST/writer.err"
  SEED=$seed nbdsh -u "$1" -c '
import os, random, sys
rng = random.Random(int(os.environ["SEED"]))
log = open(os.environ["TMPDIR_TEST"] + "/flushed", "a", buffering=1)
seq = 0
while True:
    off = rng.randrange(256) * 65536
    seq += 1
    h.pwrite(bytes([seq % 251 + 1]) * 65536, off)
    h.flush()
    log.write("%d %d\n" % (off, seq))
' 2>"$TMPDIR_TEST/writer.err" &
  writer=$!
}
# wait_flushed N: until the writer has N flushed writes (60 s at most).
wait_flushed () {
  for _ in $(seq 600); do [ "$(flushed)" -ge "$1" ] && return 0; sleep 0.1; done
  fail "the writer did not get to $1 flushed writes: $(flushed); $(cat "$TMPDIR_TEST/writer.err")"
}
# check_flushed URI: every place the writer flushed holds its last
# flushed write (or the one after it, which may have landed too).
check_flushed () {
  SEED=$seed nbdsh -u "$1" -c '
import os, random
last, n = {}, 0
for line in open(os.environ["TMPDIR_TEST"] + "/flushed"):
    off, seq = map(int, line.split())
    last[off], n = seq, seq
# The write after the last flushed one (same random places) may have
# landed too: it is the only other version a place may hold.
rng = random.Random(int(os.environ["SEED"]))
offs = [rng.randrange(256) * 65536 for _ in range(n + 1)]
for off, seq in last.items():
    got = h.pread(65536, off)
    ok = [bytes([seq % 251 + 1]) * 65536]
    if offs[n] == off:
        ok.append(bytes([(n + 1) % 251 + 1]) * 65536)
    assert got in ok, "offset %d: flushed write %d lost" % (off, seq)
print("all %d flushed places read back" % len(last))
'
}
start_standby
grep "standby" "$TMPDIR_TEST/standby.log"
grep -q "is served by nbdkit (pid $PRIMARY_PID on " "$TMPDIR_TEST/standby.log" ||
  fail "the standby does not name the primary: $(cat "$TMPDIR_TEST/standby.log")"
# Its status says what it waits for: the live primary's lock.
PID=$PRIMARY_PID FSID=$fsid jcheck_rc '(j["standby"]["state"] == "waiting" and
  j["standby"]["pool"] == "rbd:rbd/ha" and j["standby"]["polls"] >= 1 and
  "served by nbdkit (pid %s on " % os.environ["PID"] in j["standby"]["waiting_for"] and
  [(r["image"], r["fsid"], r["lock_ours"], r["lock_owner_alive"]) for r in
   j["standby"]["rbd"]] == [("ha", os.environ["FSID"], False, True)])' 0 \
  --socket "$CTL2" status
out=$("$CAIRN" --socket "$CTL2" status) || fail "cairn status of the standby: $out"
grep -q "^standby *waiting$" <<<"$out" &&
  grep -q "^  lock *held by nbdkit (pid $PRIMARY_PID on " <<<"$out" ||
  fail "the standby's status does not say what it waits for: $out"
echo "$out"
start_writer "$(uri vol1)"
wait_flushed 20
kill -9 "$PRIMARY_PID"
killed=$(python3 -c 'import time; print(time.monotonic())')
wait "$PRIMARY_PID" 2>/dev/null || true
PRIMARY_PID= NBDKIT_PID=
wait "$writer" 2>/dev/null || true
wait_standby_serves "$killed"
echo "standby serves (a read succeeds) $took s after the primary was killed; $(flushed) flushed writes to check"
# Serving now: the full control server, and the lock is its own.
jcheck_rc '([(r["image"], r["lock_ours"]) for r in j["rbd"]] == [("ha", True)]
  and "standby" not in j)' 0 --socket "$CTL2" status
check_flushed "nbd+unix:///vol1?socket=$SOCK2" || fail "a flushed write was lost in the takeover"
grep "standby" "$TMPDIR_TEST/standby.log"
stop_server "$STANDBY_PID"
STANDBY_PID=
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck after the takeover"

# --- split brain: the primary is frozen, the standby takes over, the
# primary is resumed: its writes fail, it stops and says why, and the
# data is what the standby's client wrote
start_plugin
PRIMARY_PID=$NBDKIT_PID
start_standby
kill -STOP "$PRIMARY_PID"
frozen=$(python3 -c 'import time; print(time.monotonic())')
wait_standby_serves "$frozen"
echo "standby serves (a read succeeds) $took s after the primary was frozen"
nbdsh -u "nbd+unix:///vol1?socket=$SOCK2" -c 'h.pwrite(b"S" * 1048576, 0); h.flush()' ||
  fail "writing through the standby"
kill -CONT "$PRIMARY_PID"
if out=$(nbdsh -u "$(uri vol1)" -c 'h.pwrite(b"P" * 1048576, 0); h.flush()' 2>&1); then
  fail "the old primary took a write after the takeover"
fi
echo "the old primary refused: $out"
wait_gone "$PRIMARY_PID" 300 "the old primary"
PRIMARY_PID= NBDKIT_PID=
grep -q "pool rbd:rbd/ha was taken over by another server .*: stopping" \
  "$NBDKIT_LOG" ||
  fail "the old primary did not say why it stopped: $(tail -5 "$NBDKIT_LOG")"
nbdsh -u "nbd+unix:///vol1?socket=$SOCK2" -c 'assert h.pread(1048576, 0) == b"S" * 1048576' ||
  fail "the old primary's write landed"
stop_server "$STANDBY_PID"
STANDBY_PID=
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck after the split brain"
echo "takeover and split-brain tests in $(( SECONDS - t_ha )) s"

# --- the cluster stops answering under load (its OSD frozen): by default
# librbd waits for it, so requests stall, nothing fails, and everything
# goes on when it answers again; with an op timeout (rados osd op
# timeout) requests fail with EIO after it, the pool is FAILED until the
# server restarts, and everything flushed before is there after
t_out=$SECONDS
OSD_PID=$(cat "$CEPH_DIR/run/osd.0.pid")
thaw_osd () { kill -CONT "$OSD_PID" 2>/dev/null || true; }
POOL=rbd:rbd/stall
make_pool 128M
testctl create vol1 16M
start_plugin control="$CTL"
start_writer "$(uri vol1)"
wait_flushed 10
kill -STOP "$OSD_PID"
n0=$(flushed)
# Frozen: the writer stalls (at most the request that was in flight
# completes) and sees no error; the server stays up.
for _ in $(seq 30); do
  sleep 0.1
  [ "$(flushed)" -le $(( n0 + 1 )) ] || { thaw_osd; fail "writes went on while the OSD was frozen"; }
done
kill -0 "$writer" 2>/dev/null || { thaw_osd; fail "the writer failed while the cluster was frozen: $(cat "$TMPDIR_TEST/writer.err")"; }
n1=$(flushed)
thaw_osd
wait_flushed $(( n1 + 10 ))
kill "$writer" 2>/dev/null || true
wait "$writer" 2>/dev/null || true
echo "stalled at $n1 flushed writes while the OSD was frozen, then went on to $(flushed)"
check_flushed "$(uri vol1)" || fail "a flushed write was lost across the stall"
jcheck_rc '(j["failed"] is False)' 0 --socket "$CTL" status
stop_plugin
# With a timeout of 3 s (CEPH_ARGS, which librados reads like its
# configuration file): errors, not a hang and not wrong data.
CEPH_ARGS="--rados_osd_op_timeout=3" start_plugin control="$CTL"
start_writer "$(uri vol1)"
wait_flushed 10
kill -STOP "$OSD_PID"
for _ in $(seq 600); do kill -0 "$writer" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$writer" 2>/dev/null; then thaw_osd; fail "the writer did not fail within 60 s with an op timeout of 3 s"; fi
wait "$writer" 2>/dev/null || true
thaw_osd
grep -q "Input/output error" "$TMPDIR_TEST/writer.err" ||
  fail "the writer failed otherwise: $(cat "$TMPDIR_TEST/writer.err")"
echo "with an op timeout, the writer got: $(grep -o "nbd_[a-z]*: .*Input/output error" "$TMPDIR_TEST/writer.err" | head -1)"
jcheck_rc '(j["failed"] is True and "librbd: Connection timed out" in j["failure"])' 1 \
  --socket "$CTL" status
stop_plugin
start_plugin
check_flushed "$(uri vol1)" || fail "a flushed write was lost after an op timeout"
stop_plugin
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck after the cluster stalled"
echo "cluster stall tests in $(( SECONDS - t_out )) s"

# --- a pool of two images, mirrored: both hold every block
"$CAIRN" mkpool rbd:rbd/m0 rbd:rbd/m1 --size 128M --data mirror >/dev/null ||
  fail "mkpool of two mirrored images"
POOL=rbd:rbd/m0,rbd:rbd/m1
"$CAIRN" --pool "$POOL" volume create mv 16M >/dev/null || fail "volume create on the mirror"
nbdkit_env "$NBDKIT" -U - "$PLUGIN" pool=rbd:rbd/m0 pool=rbd:rbd/m1 --run \
  "nbdcopy --synchronous $TMPDIR_TEST/data \"\$uri\"" -e mv || fail "writing the mirror"
for img in m0 m1; do
  rbd export "rbd/$img" "$TMPDIR_TEST/$img.raw" >/dev/null 2>&1 || fail "rbd export $img"
  python3 - "$TMPDIR_TEST/$img.raw" "$TMPDIR_TEST/data" <<'PY' || fail "image $img lacks a copy of the data"
import sys
raw = open(sys.argv[1], "rb").read()
want = open(sys.argv[2], "rb").read()
assert raw.find(want[:65536]) >= 0 and raw.find(want[-65536:]) >= 0
PY
done
echo "each of the two images holds a copy"
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck of the mirrored RBD pool"

# --- send and receive between RBD pools: a full and an incremental
# stream from one into the other, and each received snapshot holds what
# was sent (test-send-receive, on demand below, checks the rest of the
# streams' behaviour, none of which depends on the device)
t_sr=$SECONDS
POOL=rbd:rbd/sa
make_pool 128M
testctl create v 16M
# write_v OFFSET SIZE: random data into v through the plugin.
write_v () {
  nbdkit_env "$NBDKIT" -U - "$PLUGIN" pool="$POOL" --run \
    "nbdsh -u \"\$uri\" -c 'import os; h.pwrite(os.urandom($2), $1); h.flush()'" -e v ||
    fail "writing v at $1"
}
write_v 0 4194304
"$CAIRN" --pool "$POOL" snapshot create v@s1 >/dev/null || fail "snapshot v@s1 on RBD"
write_v 8388608 1048576
"$CAIRN" --pool "$POOL" snapshot create v@s2 >/dev/null || fail "snapshot v@s2 on RBD"
POOL=rbd:rbd/sb
make_pool 128M
out=$("$CAIRN" --pool rbd:rbd/sa send v@s1 | "$CAIRN" --pool rbd:rbd/sb receive v 2>&1) ||
  fail "send v@s1 | receive v between RBD pools: $out"
grep -q "received v@s1 (full stream" <<<"$out" || fail "receive said: $out"
out=$("$CAIRN" --pool rbd:rbd/sa send v@s2 --from s1 | "$CAIRN" --pool rbd:rbd/sb receive v 2>&1) ||
  fail "send v@s2 --from s1 | receive v between RBD pools: $out"
grep -q "received v@s2 (incremental stream" <<<"$out" || fail "receive said: $out"
for img in sa sb; do
  nbdkit_env "$NBDKIT" -U - "$PLUGIN" pool=rbd:rbd/$img --run \
    "nbdcopy --synchronous \"\$uri\" $TMPDIR_TEST/$img.s1" -e v@s1 &&
  nbdkit_env "$NBDKIT" -U - "$PLUGIN" pool=rbd:rbd/$img --run \
    "nbdcopy --synchronous \"\$uri\" $TMPDIR_TEST/$img.s2" -e v@s2 ||
    fail "reading the snapshots of rbd:rbd/$img"
done
cmp "$TMPDIR_TEST/sa.s1" "$TMPDIR_TEST/sb.s1" && cmp "$TMPDIR_TEST/sa.s2" "$TMPDIR_TEST/sb.s2" ||
  fail "a received snapshot differs from the one sent"
! cmp -s "$TMPDIR_TEST/sa.s1" "$TMPDIR_TEST/sa.s2" || fail "v@s1 and v@s2 are the same: nothing was tested"
"$CAIRN" fsck rbd:rbd/sb >/dev/null || fail "fsck of the receiving RBD pool"
echo "send and receive between RBD pools in $(( SECONDS - t_sr )) s"

# --- the plugin tests, again, on RBD pools of this cluster
t1=$SECONDS
for t in ${CAIRN_TEST_RBD_TESTS:-test-plugin-fio}; do
  s=$SECONDS rc=0
  CAIRN_TEST_RBD_POOL=rbd bash "$top_srcdir/tests/integration/$t.sh" \
    >"$TMPDIR_TEST/$t.log" 2>&1 || rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    tail -n 40 "$TMPDIR_TEST/$t.log"
    fail "$t on an RBD pool: exit $rc"
  fi
  echo "$t on an RBD pool: $([ $rc -eq 0 ] && echo passed || echo skipped) in $(( SECONDS - s )) s"
done
echo "plugin tests on RBD in $(( SECONDS - t1 )) s; whole test $(( SECONDS - t0 )) s"
