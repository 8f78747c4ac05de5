#!/usr/bin/env bash
# The README's "Using it", run end to end as a user types it (issue #33):
# two servers on loopback, "prod" and "backup", each started with cairnd
# in the background as the README starts it, with the control protocol on
# TCP over TLS with one PSK file for replication.  On prod: cairn mkpool
# (backup: cairnd --create), a volume, a qcow2 made with qemu-img and
# imported with qemu-img convert into nbd://, a snapshot, a clone, writes
# and a diff; to backup: send | receive, then pulls of a chain in which
# prod rolls back to its first snapshot (`cairn volume rollback`), so that
# the pull after it must discard backup's newer snapshot (--rollback, which
# says so) and still send only the change; cairn stats; cairn --connect
# with the PSK; a stop with an idle NBD client connected (SIGTERM: the
# server must be gone within 5 s, the client sees its connection closed);
# a restart on the same paths with everything intact.  Data and output are
# checked at each step.
#
# What differs from the README, for a test beside colleagues' tests: paths
# in the test directory (--control, --pidfile, pools), free TCP ports
# (--port, --control-tcp, HOST:PORT), the built plugin (--plugin: nothing
# is installed), sizes that fit (a 1G volume in 256M pools), and "ssh
# backup cairn ..." run as "cairn ..." against backup's control socket
# (CAIRN_SOCKET, which the README's default socket stands for).
. "$top_srcdir/tests/integration/plugin-functions.sh"
require qemu-img
require qemu-io
require_nbdsh
require python3

A="$TMPDIR_TEST/prod" B="$TMPDIR_TEST/backup"
mkdir -p "$A" "$B"
PSK="$TMPDIR_TEST/keys.psk"
python3 -c 'import secrets; print("alice:" + secrets.token_hex(32))' >"$PSK"
PORT_A=$(free_port) PORT_B=$(free_port) CPORT_A=$(free_port) CPORT_B=$(free_port)

# At exit, kill what is still running of the servers (from their
# pidfiles: cairnd puts nbdkit in the background) and of this shell's jobs.
trap 'rc=$?; for f in "$A/nbdkit.pid" "$B/nbdkit.pid"; do
        if [ -f "$f" ]; then kill -9 "$(cat "$f")" 2>/dev/null || true; fi; done
      for p in $(jobs -p); do kill -9 "$p" 2>/dev/null || true; done
      (exit $rc); cleanup' EXIT

# Start the server of directory $1 (NBD port $2, control port $3) as the
# README's cairnd line, in the background, with the replication options;
# more options after.  Waits for its pidfile and control socket.
start_cairnd () {
  local dir=$1 port=$2 cport=$3 pid
  shift 3
  rm -f "$dir/nbdkit.pid"
  nbdkit_env "$CAIRND" --pool "$dir/pool" --listen 127.0.0.1 --port "$port" \
    --control "$dir/control.sock" --pidfile "$dir/nbdkit.pid" \
    --plugin "$PLUGIN" --control-tcp "127.0.0.1:$cport" --tls-psk "$PSK" \
    --tls off --control-tls require "$@" >>"$NBDKIT_LOG" 2>&1 ||
    fail "cairnd on $dir failed: $(tail -5 "$NBDKIT_LOG")"
  for _ in $(seq 300); do
    [ -s "$dir/nbdkit.pid" ] && [ -S "$dir/control.sock" ] && return 0
    sleep 0.1
  done
  fail "cairnd on $dir did not start: $(tail -5 "$NBDKIT_LOG")"
}

# prod CMD... and backup CMD...: a command on that server, as typed there.
prod () { CAIRN_SOCKET="$A/control.sock" "$@"; }
backup () { CAIRN_SOCKET="$B/control.sock" "$@"; }
cairn () { "$CAIRN" "$@"; }

# run WHERE cairn ARGS...: status in rc, stdout and stderr in out.
run_on () {
  local where=$1
  shift 2
  args=("cairn" "$@")
  rc=0
  out=$("$where" "$CAIRN" "$@" 2>&1) || rc=$?
}

# The data of export $1 on prod's NBD port equals export $2 on backup's.
same () {
  qemu-img compare -f raw -F raw "nbd://127.0.0.1:$PORT_A/$1" \
    "nbd://127.0.0.1:$PORT_B/$2" >/dev/null ||
    fail "prod's $1 and backup's $2 differ"
}

# Wait until prod has closed its handles on export $1 (a client's
# disconnect reaches nbdkit a little after the client exits, and a rollback
# refuses while the volume is open).
closed () {
  local n
  for _ in $(seq 100); do
    n=$(prod cairn stats "$1" --json | python3 -c 'import json, sys
print(json.load(sys.stdin)["connections"])')
    [ "$n" = 0 ] && return 0
    sleep 0.1
  done
  fail "prod still has $1 open"
}

# ---------------------------------------------------------------- servers
# cairn mkpool /srv/pool --size 100G --preallocate full # or cairnd --create
run_on prod cairn mkpool "$A/pool" --size 256M --preallocate full
expect 0
[ "$(stat -c %s "$A/pool")" = $((256 * 1024 * 1024)) ] ||
  fail "mkpool made a pool file of $(stat -c %s "$A/pool") bytes"
[ "$(du -B1 --apparent-size "$A/pool" | cut -f1)" -le "$(du -B1 "$A/pool" | cut -f1)" ] ||
  fail "--preallocate full left the pool file sparse"
start_cairnd "$A" "$PORT_A" "$CPORT_A"
start_cairnd "$B" "$PORT_B" "$CPORT_B" --create 256M
[ -f "$B/pool" ] || fail "cairnd --create made no pool"

# ---------------------------------------------------------------- import
# cairn volume create vm/disk0 20G
run_on prod cairn volume create vm/disk0 1G
expect 0 "vm/disk0"
# qemu-img convert -n disk.qcow2 nbd://server/vm/disk0
qemu-img create -q -f qcow2 "$TMPDIR_TEST/disk.qcow2" 64M
qemu-io -f qcow2 -c "write -P 0x11 0 4M" -c "write -P 0x22 32M 1M" \
  "$TMPDIR_TEST/disk.qcow2" >/dev/null || fail "qemu-io on disk.qcow2"
qemu-img convert -n "$TMPDIR_TEST/disk.qcow2" "nbd://127.0.0.1:$PORT_A/vm/disk0" ||
  fail "qemu-img convert -n disk.qcow2 nbd://.../vm/disk0 failed"
qemu-img compare -F raw "$TMPDIR_TEST/disk.qcow2" \
  "nbd://127.0.0.1:$PORT_A/vm/disk0" >/dev/null 2>&1 ||
  fail "vm/disk0 is not disk.qcow2's data"

# ---------------------------------------------------------------- snapshot, clone, diff
# cairn snapshot create vm/disk0@nightly
run_on prod cairn snapshot create vm/disk0@nightly
expect 0 "vm/disk0@nightly"
# cairn send vm/disk0@nightly | ssh backup cairn receive vm/disk0
out=$(prod cairn send vm/disk0@nightly | backup cairn receive vm/disk0 2>&1) ||
  fail "send | receive: $out"
grep -qx "received vm/disk0@nightly (full stream, 5M of data)" <<<"$out" ||
  fail "receive said: $out"
same vm/disk0@nightly vm/disk0@nightly
# The VM goes on writing.
qemu-io -f raw -c "write -P 0x33 1M 1M" "nbd://127.0.0.1:$PORT_A/vm/disk0" \
  >/dev/null || fail "writing vm/disk0"
# cairn clone vm/disk0@nightly test/disk0
run_on prod cairn clone vm/disk0@nightly test/disk0
expect 0 "test/disk0"
qemu-img compare -F raw "$TMPDIR_TEST/disk.qcow2" \
  "nbd://127.0.0.1:$PORT_A/test/disk0" >/dev/null 2>&1 ||
  fail "the clone test/disk0 is not what vm/disk0@nightly holds"
# cairn diff vm/disk0@nightly vm/disk0
run_on prod cairn diff vm/disk0@nightly vm/disk0
expect 0
grep -qE "^1048576 +1048576 +data$" <<<"$out" ||
  fail "diff does not show the 1M written at 1M: $out"
grep -qx "1 run: 1M of data, 0B of holes" <<<"$out" ||
  fail "diff shows more than the write: $out"

# ---------------------------------------------------------------- a backup chain, rolled back
run_on prod cairn snapshot create vm/disk0@mon
expect 0
# ssh backup cairn pull prod vm/disk0
run_on backup cairn pull "127.0.0.1:$CPORT_A" vm/disk0
expect 0 "^received vm/disk0@mon from 127.0.0.1:$CPORT_A \(incremental stream, 1M of data\)$"
same vm/disk0@mon vm/disk0@mon
# cairn volume rollback vm/disk0@nightly vm/disk0-old
closed vm/disk0
run_on prod cairn volume rollback vm/disk0@nightly vm/disk0-old
expect 0
qemu-img compare -F raw "$TMPDIR_TEST/disk.qcow2" \
  "nbd://127.0.0.1:$PORT_A/vm/disk0" >/dev/null 2>&1 ||
  fail "vm/disk0 is not vm/disk0@nightly after the rollback"
run_on prod cairn snapshot list vm/disk0-old
expect 0 "mon"
run_on prod cairn snapshot list vm/disk0
grep -q nightly <<<"$out" || fail "vm/disk0 lost @nightly in the rollback: $out"
grep -q mon <<<"$out" && fail "vm/disk0 kept @mon, taken after @nightly: $out"
same vm/disk0-old vm/disk0@mon
qemu-io -f raw -c "write -P 0x44 8M 512K" "nbd://127.0.0.1:$PORT_A/vm/disk0" \
  >/dev/null || fail "writing vm/disk0"
run_on prod cairn snapshot create vm/disk0@tue
expect 0
# Backup has @mon, which prod set aside: the pull says to roll back ...
run_on backup cairn pull "127.0.0.1:$CPORT_A" vm/disk0
expect 1 "--rollback"
# ... which discards @mon there, says so, and sends only the change.
run_on backup cairn pull "127.0.0.1:$CPORT_A" vm/disk0 --rollback
expect 0 "^received vm/disk0@tue from 127.0.0.1:$CPORT_A \(incremental stream, 512K of data\)$"
grep -qx "rolled back vm/disk0 to vm/disk0@nightly: destroyed 1 snapshot (vm/disk0@mon)" <<<"$out" ||
  fail "pull --rollback did not say what it discarded: $out"
same vm/disk0@tue vm/disk0@tue
same vm/disk0 vm/disk0
# The chain goes on incrementally, without --rollback.
qemu-io -f raw -c "write -P 0x55 12M 256K" "nbd://127.0.0.1:$PORT_A/vm/disk0" \
  >/dev/null || fail "writing vm/disk0"
run_on prod cairn snapshot create vm/disk0@wed
run_on backup cairn pull "127.0.0.1:$CPORT_A" vm/disk0
expect 0 "^received vm/disk0@wed from 127.0.0.1:$CPORT_A \(incremental stream, 256K of data\)$"
grep -q "rolled back" <<<"$out" && fail "a pull without rollback said: $out"
same vm/disk0@wed vm/disk0@wed

# ---------------------------------------------------------------- stats, TLS
# cairn stats
run_on prod cairn stats
expect 0
grep -qE "^vm/disk0 " <<<"$out" || fail "cairn stats has no vm/disk0: $out"
# cairn --connect backup --tls-psk keys.psk volume list
run_on prod cairn --connect "127.0.0.1:$CPORT_B" --tls-psk "$PSK" volume list
expect 0 "vm/disk0"
grep -q "test/disk0" <<<"$out" && fail "backup lists prod's clone: $out"
run_on prod cairn --connect "127.0.0.1:$CPORT_B" volume list
[ "$rc" -ne 0 ] || fail "backup's control port took a client without TLS: $out"

# ---------------------------------------------------------------- stop, restart
# Stop prod with an idle NBD client connected (it wrote and flushed, then
# waits, idle): the server must exit promptly and close its connection.
start_idle_client "nbd://127.0.0.1:$PORT_A/vm/disk0" $((16 * 1024 * 1024))
pid=$(cat "$A/nbdkit.pid")
kill "$pid"                           # kill $(cat /run/cairn/nbdkit.pid)
wait_gone "$pid" 50 "prod, with an idle client, after SIGTERM,"
check_idle_client_closed
# Restarted as it was started, with everything there.
start_cairnd "$A" "$PORT_A" "$CPORT_A"
run_on prod cairn volume list
expect 0
for v in vm/disk0 vm/disk0-old test/disk0; do
  grep -qE "^$v " <<<"$out" || fail "$v is gone after the restart: $out"
done
run_on prod cairn snapshot list vm/disk0
for s in nightly tue wed; do grep -q "$s" <<<"$out" || fail "vm/disk0@$s is gone: $out"; done
nbdsh -u "nbd://127.0.0.1:$PORT_A/vm/disk0" \
  -c 'assert h.pread(4096, 16 * 1024 * 1024) == b"kept" * 1024' ||
  fail "the idle client's flushed write is not there after the restart"
same vm/disk0@wed vm/disk0@wed
run_on backup cairn snapshot list vm/disk0
grep -q mon <<<"$out" && fail "backup kept vm/disk0@mon: $out"
qemu-img compare -F raw "$TMPDIR_TEST/disk.qcow2" \
  "nbd://127.0.0.1:$PORT_A/test/disk0" >/dev/null 2>&1 ||
  fail "test/disk0 changed across the restart"

# Both stop cleanly, and both pools check clean.
for d in "$A" "$B"; do
  pid=$(cat "$d/nbdkit.pid")
  kill "$pid"
  wait_gone "$pid" 100 "the server of $d, after SIGTERM,"
done
"$CAIRN" fsck "$A/pool" --quiet || fail "fsck of prod's pool"
"$CAIRN" fsck "$B/pool" --quiet || fail "fsck of backup's pool"
exit 0
