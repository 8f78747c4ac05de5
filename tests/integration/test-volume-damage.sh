#!/usr/bin/env bash
# One volume record that does not decode (its node checksums are fine: the
# cairn-testctl fixture rewrites it through the engine with a name length
# past its end) takes that volume out of service and nothing else.
# Offline (--pool) and on a running server: volume list shows the other
# volumes, exits 0 and warns about the damaged record; the JSON has it in
# "damaged" with "kind": "volume", and its clone still names it as origin;
# status lists it, says DEGRADED and exits 1; using the volume (show,
# snapshot, clone, send, receive, rename, delete) fails naming the record,
# and its name cannot be taken; fsck names it the same way; the NBD export
# list leaves it out and another volume's export still serves and takes
# writes.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require python3

CTL="$TMPDIR_TEST/control.sock"

make_pool 256M
testctl create a 16M
testctl create b 16M
testctl create d 16M
testctl snapshot a s1
testctl clone a@s1 c
testctl snapshot b s1
gen=$("$TESTCTL" list "$POOL" | awk '$1 == "c" { print $5 }')
[ -n "$gen" ] || fail "no origin generation for c"
id=$("$CAIRN" --pool "$POOL" volume show a --json |
       python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
# A full stream of b@s1, to receive into a later.
"$CAIRN" --pool "$POOL" send b@s1 >"$TMPDIR_TEST/full.s" || fail "send b@s1 failed"

# Data in b, written over NBD before the damage.
head -c 1M /dev/urandom >"$TMPDIR_TEST/data1"
if command -v nbdcopy >/dev/null 2>&1; then
  start_plugin
  nbdcopy "$TMPDIR_TEST/data1" "$(uri b)" || fail "nbdcopy into b failed"
  stop_plugin
fi

testctl damage-volume a
rec="corrupt volume record \\(volume $id\\): 83 bytes, but its name length 200 makes 274 or 282"
recj="corrupt volume record (volume $id): 83 bytes, but its name length 200 makes 274 or 282"

# fsck names the record, and finds nothing else (no leaked blocks).
run fsck "$POOL"
expect 1 "root tree: $rec"
grep -q "1 problem found" <<<"$out" || fail "fsck found more than the record: $out"

# The same checks offline (--pool) and through a server (--socket).
check_volume_damage () {
  local how=("$@") damaged
  damaged='j["damaged"] == [{"kind": "volume", "name": "a", "volume": "a",
    "snapshot": None, "id": '$id', "generation": None, "error": "'$recj'"}]'

  run "${how[@]}" volume list --snapshots
  expect 0 "warning: 1 damaged catalog record left out"
  grep -qE "^  a: $rec$" <<<"$out" || fail "volume list does not name a: $out"
  grep -q "a damaged volume cannot be used or deleted" <<<"$out" ||
    fail "volume list does not say what a damaged volume means: $out"
  for e in b b@s1 c d; do
    grep -qE "^$e +16M" <<<"$out" || fail "volume list lost $e: $out"
  done
  grep -qE "^a(@s1)? " <<<"$out" && fail "volume list shows a as healthy: $out"
  jcheck_rc "[v[\"name\"] for v in j[\"volumes\"]] == [\"b\", \"b@s1\", \"c\", \"d\"] and $damaged" \
    0 "${how[@]}" volume list --snapshots
  jcheck_rc "[v[\"origin\"] for v in j[\"volumes\"] if v[\"name\"] == \"c\"] == [\"a@#$gen\"]" \
    0 "${how[@]}" volume list

  run "${how[@]}" status
  expect 1 "^damaged +a: $rec$"
  grep -qE "^state +DEGRADED: 1 damaged catalog record" <<<"$out" || fail "status is not DEGRADED: $out"
  grep -qE "^volumes +3$" <<<"$out" || fail "status does not count the 3 healthy volumes: $out"
  jcheck_rc "j[\"volumes\"] == 3 and j[\"snapshots\"] == 1 and $damaged" 1 "${how[@]}" status

  # Every use of a fails, naming the record and what to do.
  run "${how[@]}" volume show a
  expect 1 "'a' cannot be used: $rec; 'cairn fsck' gives details \\(the volume's data is kept as it is\\)"
  run "${how[@]}" volume show a@s1
  expect 1 "'a@s1' cannot be used: $rec"
  run "${how[@]}" snapshot create a@s2
  expect 1 "'a' cannot be used: $rec"
  run "${how[@]}" clone a@s1 e
  expect 1 "'a' cannot be used: $rec"
  run "${how[@]}" volume rename a e
  expect 1 "'a' cannot be used: $rec"
  run "${how[@]}" volume delete a --recursive
  expect 1 "volume 'a' cannot be deleted: $rec; without its record its origin is unknown"
  # Its name cannot be taken.
  run "${how[@]}" volume create a 16M
  expect 1 "a volume named 'a' exists already, and its record is damaged: $rec"
  run "${how[@]}" volume rename d a
  expect 1 "a volume named 'a' exists already"
  # The others still work.
  run "${how[@]}" volume show c
  expect 0 "^origin +a@#$gen$"
  run "${how[@]}" snapshot create d@t1
  expect 0
  run "${how[@]}" snapshot delete d@t1
  expect 0
}

check_volume_damage --pool "$POOL"
# Streams: a's cannot be sent, nothing can be received into it, and b's
# still go.
run --pool "$POOL" send a@s1
expect 1 "'a@s1' cannot be used: $rec"
rc=0
out=$("$CAIRN" --pool "$POOL" receive a <"$TMPDIR_TEST/full.s" 2>&1) || rc=$?
[ $rc -eq 1 ] && grep -q "corrupt volume record (volume $id)" <<<"$out" ||
  fail "receive into a: exit $rc: $out"
"$CAIRN" --pool "$POOL" send b@s1 >/dev/null || fail "send b@s1 failed with a damaged"

start_plugin control="$CTL"
check_volume_damage --socket "$CTL"

# The NBD export list leaves out a and its snapshot; b serves its data and
# takes writes.
if command -v nbdinfo >/dev/null 2>&1; then
  expect_exports b b@s1 c d
  grep -q "leaving out volume a and its snapshots: corrupt volume record" "$NBDKIT_LOG" ||
    fail "the server did not log the damaged record"
  nbdinfo --size "$(uri a)" >/dev/null 2>&1 && fail "a serves with a damaged record"
  grep -q "'a' cannot be used: corrupt volume record" "$NBDKIT_LOG" ||
    fail "opening a did not log why it failed"
  nbdinfo --size "$(uri c)" >/dev/null || fail "c, a clone of a, does not serve"
fi
if command -v nbdcopy >/dev/null 2>&1; then
  nbdcopy "$(uri b)" "$TMPDIR_TEST/back1" || fail "reading b failed"
  cmp -n 1048576 "$TMPDIR_TEST/data1" "$TMPDIR_TEST/back1" ||
    fail "b does not read what was written before the damage"
  head -c 1M /dev/urandom >"$TMPDIR_TEST/data2"
  nbdcopy "$TMPDIR_TEST/data2" "$(uri b)" || fail "writing b failed"
  nbdcopy "$(uri b)" "$TMPDIR_TEST/back2" || fail "reading b again failed"
  cmp -n 1048576 "$TMPDIR_TEST/data2" "$TMPDIR_TEST/back2" ||
    fail "b does not read what was written with a damaged"
fi
stop_plugin

# Still only the record: the server's writes, snapshots and deletes leaked
# nothing, and a's name item and data are as they were.
run fsck "$POOL"
expect 1 "root tree: $rec"
grep -q "1 problem found" <<<"$out" || fail "fsck found more than the record: $out"
run --pool "$POOL" volume create a 16M
expect 1 "exists already"
echo "volume damage ok"
