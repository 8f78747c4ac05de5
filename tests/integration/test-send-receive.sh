#!/usr/bin/env bash
# cairn send and cairn receive between two stopped pools, through a pipe
# and through files: a full stream, an incremental one, then both pools
# served by the plugin at once and every received snapshot compared with
# the one sent by qemu-img compare over NBD.  Then what must change nothing
# visible: a stream cut short (which keeps its progress, resumed with its
# token), a corrupted one (aborted), an incremental onto a written target
# or one with a newer snapshot (refused, then received with --rollback,
# which a stream cut short leaves unchanged, and which says what it
# discarded: snapshots by name, at most 16 of them, and their count, and
# the writes since; nothing when it discarded nothing); and the usage
# errors.  Data is written through the plugin with qemu-io.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require qemu-img
require qemu-io
require python3

POOL_B="$TMPDIR_TEST/pool-b"
SOCK_B="$TMPDIR_TEST/nbd-b.sock"
PID_B=

# The second server (pool B) is stopped with the first one however the
# test ends.
trap 'rc=$?; [ -n "$PID_B" ] && kill "$PID_B" 2>/dev/null; (exit $rc); cleanup' EXIT

# Write to an export of pool A with qemu-io commands (-c CMD ...).
qio () {
  local export=$1
  shift
  start_plugin
  qemu-io -f raw "$@" "$(uri "$export")" >/dev/null || fail "qemu-io $* on $export"
  stop_plugin
}

# The catalog of pool B, to compare before and after a failed receive.
catalog_b () {
  "$CAIRN" --pool "$POOL_B" volume list --snapshots --json
}

# fsck pool B: it must be clean.
fsck_b () {
  "$CAIRN" fsck "$POOL_B" --quiet || fail "fsck of pool B found problems ($1)"
}

# Serve pool B on SOCK_B beside pool A's server.
start_b () {
  rm -f "$SOCK_B"
  nbdkit_exec "$NBDKIT" --foreground --unix "$SOCK_B" "$PLUGIN" pool="$POOL_B" \
    >>"$NBDKIT_LOG" 2>&1 &
  PID_B=$!
  wait_for_sockets "$PID_B" "nbdkit on pool B" "" "$SOCK_B"
}

stop_b () {
  kill "$PID_B"
  wait "$PID_B" || fail "nbdkit on pool B did not exit cleanly"
  PID_B=
}

# Compare export $1 of pool A with export $2 of pool B (both served).
compare () {
  qemu-img compare -f raw -F raw "$(uri "$1")" \
    "nbd+unix:///$2?socket=$SOCK_B" >/dev/null ||
    fail "qemu-img compare: A's $1 and B's $2 differ"
}

make_pool 256M
"$CAIRN" mkpool "$POOL_B" --size 256M >/dev/null || fail "mkpool B"

# ---------------------------------------------------------------- usage
# Without --pool they go to a server: none answers here.
run --socket "$TMPDIR_TEST/none.sock" send v@s1
expect 1 "no server at"
run --socket "$TMPDIR_TEST/none.sock" receive v </dev/null
expect 1 "no server at"
run --pool "$POOL" send
expect 2 "missing VOL@SNAP"
run --pool "$POOL_B" receive v --abort --token
expect 2 "exclude"
run --pool "$POOL_B" receive v --abort --rollback
expect 2 "--rollback applies to a stream: it goes without --abort"

# ---------------------------------------------------------------- data
"$CAIRN" --pool "$POOL" volume create v 64M >/dev/null || fail "volume create"
qio v -c 'write -P 0x11 0 4M' -c 'write -P 0x22 20M 1M' -c 'write -z 2M 1M' \
  -c 'write -P 0x5a 40M 64k'
"$CAIRN" --pool "$POOL" snapshot create v@s1 >/dev/null || fail "snapshot s1"
qio v -c 'write -P 0x33 1M 2M' -c 'discard 20M 512k' -c 'write -P 0x44 63M 1M' \
  -c 'write -z 40M 64k'
"$CAIRN" --pool "$POOL" snapshot create v@s2 >/dev/null || fail "snapshot s2"
qio v -c 'write -P 0x55 8M 1M'
"$CAIRN" --pool "$POOL" snapshot create v@s3 >/dev/null || fail "snapshot s3"

run --pool "$POOL" send v
expect 1 "is not a snapshot"
run --pool "$POOL" send v@nope
expect 3 "no snapshot named 'nope'"
run --pool "$POOL" send v@s1 --from s2
expect 1 "not older"

# ---------------------------------------------------------------- streams
run --pool "$POOL" send v@s1 --dry-run
expect 0 "a full stream of v@s1: .* \(([0-9]+) bytes\)"
dry=$(sed -E 's/.*\(([0-9]+) bytes\).*/\1/' <<<"$out")
"$CAIRN" --pool "$POOL" send v@s1 >"$TMPDIR_TEST/s1.stream" || fail "send v@s1 to a file"
[ "$(stat -c %s "$TMPDIR_TEST/s1.stream")" -eq "$dry" ] ||
  fail "the dry run said $dry bytes, the stream has $(stat -c %s "$TMPDIR_TEST/s1.stream")"
# A full stream of 5.06 MiB of data is hardly larger than it.
[ "$dry" -lt $((5 * 1024 * 1024 + 64 * 1024 + 20000)) ] || fail "the full stream is $dry bytes"

out=$("$CAIRN" --pool "$POOL" send v@s1 | "$CAIRN" --pool "$POOL_B" receive v 2>&1) ||
  fail "send v@s1 | receive v: $out"
grep -q "received v@s1 (full stream" <<<"$out" || fail "receive said: $out"
out=$("$CAIRN" --pool "$POOL" send v@s2 --from s1 | "$CAIRN" --pool "$POOL_B" receive v 2>&1) ||
  fail "send v@s2 --from s1 | receive v: $out"
grep -q "received v@s2 (incremental stream" <<<"$out" || fail "receive said: $out"
# The same stream again is refused: its snapshot is there.
"$CAIRN" --pool "$POOL" send v@s2 --from v@s1 >"$TMPDIR_TEST/s2.stream" || fail "send v@s2"
run --pool "$POOL_B" receive v <"$TMPDIR_TEST/s2.stream"
expect 1 "received already"
fsck_b "after receiving s1 and s2"

# The received snapshots carry the sender's GUIDs.
guid () {
  "$CAIRN" --pool "$1" volume show "$2" --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["guid"])'
}
for s in s1 s2; do
  [ "$(guid "$POOL" v@$s)" = "$(guid "$POOL_B" v@$s)" ] || fail "v@$s has another GUID in pool B"
done
[ "$(guid "$POOL" v@s1)" != "$(guid "$POOL" v@s2)" ] || fail "two snapshots share a GUID"
[ "$(guid "$POOL_B" v)" = None ] || fail "a volume has a GUID"

# Both pools served: the received snapshots are the sent ones.
start_plugin
start_b
compare v@s1 v@s1
compare v@s2 v@s2
compare v@s2 v
stop_b
stop_plugin

# ---------------------------------------------------------------- cut short
"$CAIRN" --pool "$POOL" send v@s3 --from s2 >"$TMPDIR_TEST/s3.stream" || fail "send v@s3"
size=$(stat -c %s "$TMPDIR_TEST/s3.stream")
before=$(catalog_b)
run --pool "$POOL_B" receive v < <(head -c $((size / 2)) "$TMPDIR_TEST/s3.stream")
expect 1 "truncated"
grep -q "kept its progress" <<<"$out" || fail "no word of the progress kept: $out"
token=$(grep -oE 'cairn-resume-1-[A-Za-z0-9_-]+' <<<"$out" | head -n 1)
[ -n "$token" ] || fail "no resume token in: $out"
[ "$(catalog_b)" = "$before" ] || fail "a truncated stream changed the catalog"
fsck_b "after a truncated stream"
run --pool "$POOL_B" receive v --token
expect 0 "^$token\$"
# The whole stream again is refused: it must be the resumed one.
run --pool "$POOL_B" receive v <"$TMPDIR_TEST/s3.stream"
expect 1 "resume"
out=$("$CAIRN" --pool "$POOL" send v@s3 --from s2 --resume "$token" |
      "$CAIRN" --pool "$POOL_B" receive v 2>&1) || fail "resuming: $out"
grep -q "received v@s3 (incremental, resumed stream" <<<"$out" || fail "receive said: $out"
run --pool "$POOL_B" receive v --token
expect 3 "no receive into 'v' was interrupted"
fsck_b "after resuming"

# ---------------------------------------------------------------- corrupted
qio v -c 'write -P 0x66 30M 2M'
"$CAIRN" --pool "$POOL" snapshot create v@s4 >/dev/null || fail "snapshot s4"
"$CAIRN" --pool "$POOL" send v@s4 --from s3 >"$TMPDIR_TEST/s4.stream" || fail "send v@s4"
cp "$TMPDIR_TEST/s4.stream" "$TMPDIR_TEST/bad.stream"
python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1)
f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x40]))' "$TMPDIR_TEST/bad.stream" 1500000
before=$(catalog_b)
run --pool "$POOL_B" receive v <"$TMPDIR_TEST/bad.stream"
expect 1 "SHA-256 mismatch"
[ "$(catalog_b)" = "$before" ] || fail "a corrupted stream changed the catalog"
run --pool "$POOL_B" receive v --abort
expect 0 "discarded"
[ "$(catalog_b)" = "$before" ] || fail "aborting changed the catalog"
fsck_b "after a corrupted stream"

# ---------------------------------------------------------------- diverged
# Write pool B's v through its server (qemu-io -c CMD), then try to
# receive the s4 stream (the catalog before it in $before).
receive_after_write () {
  start_b
  qemu-io -f raw -c "$1" "nbd+unix:///v?socket=$SOCK_B" >/dev/null ||
    fail "writing B's v"
  stop_b
  before=$(catalog_b)
  run --pool "$POOL_B" receive v <"$TMPDIR_TEST/s4.stream"
}

# Pool B's v is written: the next incremental is refused, saying why.
receive_after_write 'write -P 0x77 0 4k'
expect 1 "was written after its snapshot 's3' \(first change at byte 0\)"
grep -q "run the same command with --rollback to discard the writes" <<<"$out" ||
  fail "the refusal does not mention --rollback: $out"
[ "$(catalog_b)" = "$before" ] || fail "a refused incremental changed the catalog"
# A snapshot of B's own after s3, and more writes: refused, saying why.
"$CAIRN" --pool "$POOL_B" snapshot create v@local >/dev/null || fail "snapshot v@local"
receive_after_write 'write -P 0x78 8M 1M'
expect 1 "has newer snapshots \('local' is the newest\).*or run the same command with --rollback to discard them"
# With --rollback, a stream cut short destroys nothing (and keeps its
# progress, discarded here) ...
run --pool "$POOL_B" receive v --rollback < <(head -c 1000000 "$TMPDIR_TEST/s4.stream")
expect 1 "truncated"
[ "$(catalog_b)" = "$before" ] || fail "a truncated --rollback stream changed the catalog"
run --pool "$POOL_B" volume show v@local
expect 0 "local"
run --pool "$POOL_B" receive v --abort
expect 0 "discarded"
# ... and the whole one rolls v back to s3: v@local, 17 more snapshots
# and the writes since the newest of them go, and the receive says so
# (issue 33, item 8): the first 16 names, oldest first, and the count.
for i in $(seq 2 18); do
  "$CAIRN" --pool "$POOL_B" snapshot create "v@l$i" >/dev/null ||
    fail "snapshot v@l$i"
done
receive_after_write 'write -P 0x79 12M 4k'
expect 1 "has newer snapshots \('l18' is the newest\)"
run --pool "$POOL_B" receive v --rollback --json <"$TMPDIR_TEST/s4.stream"
expect 0 '"snapshot": "v@s4"'
python3 - "$out" <<'PY' || fail "receive --rollback --json did not say what it discarded: $out"
import json, sys
d = json.loads(sys.argv[1])["discarded"]
want = {"base": "v@s3", "snapshots_total": 18, "writes": True,
        "writes_since": "v@l18",
        "snapshots": ["v@local"] + ["v@l%d" % i for i in range(2, 17)]}
sys.exit(0 if d == want else 1)
PY
run --pool "$POOL_B" volume show v@local
expect 3 "no snapshot named 'local'"
fsck_b "after a receive with --rollback"
# A full stream does not replace a volume either.
run --pool "$POOL_B" receive v <"$TMPDIR_TEST/s1.stream"
expect 1 "volume 'v' exists"
# Received into a new name, a full stream makes a new volume.
run --pool "$POOL_B" receive w <"$TMPDIR_TEST/s1.stream"
expect 0 "received w@s1"
# A --rollback receive that discards nothing says nothing of it, in text
# and in JSON.
"$CAIRN" --pool "$POOL" snapshot create v@s5 >/dev/null || fail "snapshot s5"
"$CAIRN" --pool "$POOL" send v@s5 --from s4 >"$TMPDIR_TEST/s5.stream" ||
  fail "send v@s5"
run --pool "$POOL_B" receive v --rollback --json <"$TMPDIR_TEST/s5.stream"
expect 0 '"snapshot": "v@s5"'
grep -q discarded <<<"$out" && fail "a rollback that discarded nothing said: $out"
fsck_b "at the end"

start_plugin
start_b
compare v@s3 v@s3
compare v@s4 v@s4
compare v@s4 v
compare v@s1 w@s1
stop_b
stop_plugin
exit 0
