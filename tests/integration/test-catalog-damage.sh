#!/usr/bin/env bash
# One snapshot record that does not decode (its node checksums are fine:
# the cairn-testctl fixture rewrites it through the engine with GUID 0)
# hides nothing else.  Offline (--pool) and on a running server: volume
# list and snapshot list show everything else, exit 0 and warn about the
# damaged record on stderr; the JSON has it in "damaged"; status lists it,
# says DEGRADED and exits 1 (also with --json); volume show of its volume
# lists it; using it (show, clone, send, a receive into its volume) fails
# naming it; fsck names it the same way; the NBD export list leaves it out
# and the healthy exports still serve; deleting it makes the pool clean
# again.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require python3

CTL="$TMPDIR_TEST/control.sock"

make_pool 256M
testctl create a 16M
testctl create b 16M
testctl snapshot a s1
testctl snapshot a s2
testctl snapshot a s3
testctl snapshot b s1
gen=$("$TESTCTL" list "$POOL" | awk '$1 == "a@s2" { print $4 }')
[ -n "$gen" ] || fail "no generation for a@s2"
testctl damage-snapshot a s2
id=$("$CAIRN" --pool "$POOL" volume show a --json |
       python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
rec="corrupt snapshot record \\(volume $id, generation $gen\\): its GUID is 0"

# fsck names the record.
run fsck "$POOL"
expect 1 "root tree: $rec"
grep -q "1 problem found" <<<"$out" || fail "fsck found more than the record: $out"

# The same checks offline (--pool) and through a server (--socket).
check_listings () {
  local how=("$@") damaged
  damaged='j["damaged"] == [{"kind": "snapshot", "name": "a@s2", "volume": "a", "snapshot": "s2",
    "id": '$id', "generation": '$gen', "error": "corrupt snapshot record (volume '$id', generation '$gen'): its GUID is 0"}]'

  run "${how[@]}" volume list --snapshots
  expect 0 "warning: 1 damaged catalog record left out"
  grep -qE "^  a@s2: $rec$" <<<"$out" || fail "volume list does not name a@s2: $out"
  grep -q "cairn fsck" <<<"$out" || fail "volume list does not point at fsck: $out"
  for e in a a@s1 a@s3 b b@s1; do
    grep -qE "^$e +16M" <<<"$out" || fail "volume list lost $e: $out"
  done
  grep -qE "^a@s2 " <<<"$out" && fail "volume list shows a@s2 as healthy: $out"
  jcheck_rc "[v[\"name\"] for v in j[\"volumes\"]] == [\"a\", \"a@s1\", \"a@s3\", \"b\", \"b@s1\"] and $damaged" \
    0 "${how[@]}" volume list --snapshots

  run "${how[@]}" snapshot list a
  expect 0 "^  a@s2: $rec$"
  grep -qE "^a@s1 " <<<"$out" && grep -qE "^a@s3 " <<<"$out" ||
    fail "snapshot list a lost a healthy snapshot: $out"
  jcheck_rc "[v[\"name\"] for v in j[\"snapshots\"]] == [\"a@s1\", \"a@s3\"] and $damaged" \
    0 "${how[@]}" snapshot list a
  # Another volume's listing has no damage.
  run "${how[@]}" snapshot list b
  expect 0 "^b@s1 "
  grep -q damaged <<<"$out" && fail "snapshot list b reports damage: $out"
  jcheck_rc 'j["damaged"] == []' 0 "${how[@]}" snapshot list b

  run "${how[@]}" status
  expect 1 "^damaged +a@s2: $rec$"
  grep -qE "^state +DEGRADED: 1 damaged catalog record" <<<"$out" || fail "status is not DEGRADED: $out"
  grep -qE "^snapshots +3$" <<<"$out" || fail "status does not count the 3 healthy snapshots: $out"
  jcheck_rc "j[\"volumes\"] == 2 and j[\"snapshots\"] == 3 and $damaged" 1 "${how[@]}" status

  run "${how[@]}" volume show a
  expect 0 "^damaged +a@s2: $rec$"
  jcheck_rc "j[\"snapshots\"] == [\"a@s1\", \"a@s3\"] and $damaged" 0 "${how[@]}" volume show a

  # What needs the record fails, naming it and what to do.
  run "${how[@]}" volume show a@s2
  expect 1 "'a@s2' cannot be used: $rec; 'cairn fsck' gives details"
  run "${how[@]}" clone a@s2 c2
  expect 1 "'a@s2' cannot be used: $rec"
  # The healthy snapshots still work.
  run "${how[@]}" volume show a@s3
  expect 0 "^name +a@s3$"
}

check_listings --pool "$POOL"
# Streams: the healthy snapshots still send; the damaged one does not, and
# a receive into its volume (which must see every snapshot) fails naming it.
run --pool "$POOL" send a@s2
expect 1 "'a@s2' cannot be used: $rec"
"$CAIRN" --pool "$POOL" send a@s3 --from s1 >"$TMPDIR_TEST/inc.s" ||
  fail "send a@s3 --from s1 failed with a@s2 damaged"
rc=0
out=$("$CAIRN" --pool "$POOL" receive a <"$TMPDIR_TEST/inc.s" 2>&1) || rc=$?
[ $rc -eq 1 ] && grep -q "'a@s2' cannot be used: corrupt snapshot record" <<<"$out" ||
  fail "receive into a: exit $rc: $out"
# Nothing above changed the pool (the clone of a@s2 failed).
run --pool "$POOL" volume list
expect 0
grep -q "^c2 " <<<"$out" && fail "a clone of the damaged snapshot was made: $out"

start_plugin control="$CTL"
check_listings --socket "$CTL"

# The NBD export list leaves out the damaged snapshot only; the rest serve.
if command -v nbdinfo >/dev/null 2>&1; then
  expect_exports a a@s1 a@s3 b b@s1
  grep -q "leaving out a@s2: corrupt snapshot record" "$NBDKIT_LOG" ||
    fail "the server did not log the damaged record"
  nbdinfo --size "$(uri a@s3)" >/dev/null || fail "a@s3 does not serve"
  nbdinfo --size "$(uri a@s2)" >/dev/null 2>&1 && fail "a@s2 serves with a damaged record"
  grep -q "cannot be used: corrupt snapshot record" "$NBDKIT_LOG" ||
    fail "opening a@s2 did not log why it failed"
fi

# Deleting the damaged snapshot (by its name from the name index) repairs
# the pool.
run --socket "$CTL" snapshot delete a@s2
expect 0 "deleted snapshot a@s2"
run --socket "$CTL" status
expect 0 "^state +ok"
jcheck_rc 'j["damaged"] == [] and j["snapshots"] == 3' 0 --socket "$CTL" status
run --socket "$CTL" volume list --snapshots
expect 0
grep -q warning <<<"$out" && fail "volume list still warns: $out"
stop_plugin
run fsck "$POOL"
expect 0
echo "catalog damage ok"
