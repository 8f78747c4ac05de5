#!/usr/bin/env bash
# The offline subcommands of cairn: mkpool makes sparse pools and protects
# what exists, info describes a pool (as text and as JSON), fsck finds
# damage, and every mistake gets a clear message and the documented exit
# code (0 ok, 1 failure, 2 usage, 3 not found).
# The CLI under LeakSanitizer too (functions.sh says why others are not).
CAIRN_TEST_LEAKS=yes
. "$top_srcdir/tests/integration/functions.sh"
require python3

# The value of field $2 in the JSON object held in $1.
json_field () {
  python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

uuid_re='[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
pool="$TMPDIR_TEST/pool"

# help lists the offline commands; each command has its own usage.
run help
expect 0
help=$out
for c in mkpool fsck info; do
  grep -qE "^  $c +[a-z]" <<<"$help" || fail "cairn help does not list $c: $help"
  run "$c" --help
  expect 0 "^Usage: cairn $c "
done
run frobnicate
expect 2 "unknown command 'frobnicate'"

# mkpool makes a sparse file of exactly the size asked for.
run mkpool "$pool" --size 64M
expect 0 "^created pool $pool: $uuid_re, 64M, node size 16K$"
uuid1=$(grep -oE "$uuid_re" <<<"$out")
[ "$(stat -c %s "$pool")" -eq $((64 * 1024 * 1024)) ] || fail "pool is $(stat -c %s "$pool") bytes"
used_kib=$(du -k "$pool" | cut -f1)
[ "$used_kib" -lt 1024 ] || fail "pool is not sparse: du says ${used_kib}K of 64M"

# info shows the UUID and generation 1, as text and as JSON.
run info "$pool"
expect 0 "^uuid +$uuid1$"
grep -qE "^generation +1$" <<<"$out" || fail "no generation 1 in: $out"
grep -qE "^node size +16K$" <<<"$out" || fail "no node size in: $out"
grep -qE "^size +64M \(16384 blocks\)$" <<<"$out" || fail "no size in: $out"
grep -qE "^(used|free|reserve) " <<<"$out" || fail "no space lines in: $out"
# A new pool's free space is one run.
grep -qE "^free runs +1$" <<<"$out" || fail "no 'free runs 1' in: $out"
grep -qE "^high water +[^ ]+ \([0-9]+ blocks?\)$" <<<"$out" || fail "no high water in: $out"
json=$("$CAIRN" info --json "$pool") || fail "info --json failed"
python3 -c 'import json, sys; json.load(sys.stdin)' <<<"$json" || fail "info --json is not JSON: $json"
[ "$(json_field "$json" uuid)" = "$uuid1" ] || fail "JSON uuid: $json"
[ "$(json_field "$json" generation)" = 1 ] || fail "JSON generation: $json"
[ "$(json_field "$json" node_size)" = 16384 ] || fail "JSON node_size: $json"
[ "$(json_field "$json" size)" = $((64 * 1024 * 1024)) ] || fail "JSON size: $json"
python3 - "$json" <<'EOF' || fail "JSON space fields do not add up: $json"
import json, sys
j = json.loads(sys.argv[1])
assert j["data_blocks"] == j["used_blocks"] + j["free_blocks"], j
assert 0 < j["reserve_blocks"] < j["free_blocks"], j
assert j["used"] == j["used_blocks"] * j["block_size"], j
assert j["total_blocks"] * j["block_size"] == j["size"], j
assert j["free_runs"] == 1, j
assert j["used_blocks"] <= j["high_water_blocks"] < j["data_blocks"], j
assert j["high_water"] == j["high_water_blocks"] * j["block_size"], j
EOF
# The global --pool names the pool too.
run --pool "$pool" info
expect 0 "^uuid +$uuid1$"

# A fresh pool is clean.
run fsck "$pool"
expect 0 "^$pool: clean$"
grep -qE "^generation 1: " <<<"$out" || fail "no summary in: $out"
run fsck --quiet "$pool"
expect 0
[ -z "$out" ] || fail "fsck --quiet printed: $out"

# An existing path is not overwritten without --force.
run mkpool "$pool" --size 64M
expect 1 "$pool exists: use --force to overwrite it \(this destroys what it holds\)"
run info "$pool"
expect 0 "^uuid +$uuid1$"

# --force reformats (a new UUID), keeping the size or taking a new one.
run mkpool "$pool" --force
expect 0 "^created pool $pool: $uuid_re, 64M, node size 16K$"
uuid2=$(grep -oE "$uuid_re" <<<"$out")
[ "$uuid2" != "$uuid1" ] || fail "--force kept the UUID $uuid1"
run mkpool "$pool" --force --size 32M --node-size 4K
expect 0 "^created pool $pool: $uuid_re, 32M, node size 4K$"
[ "$(stat -c %s "$pool")" -eq $((32 * 1024 * 1024)) ] || fail "--size did not resize the file"
run info --json "$pool"
expect 0
[ "$(json_field "$out" node_size)" = 4096 ] || fail "node size not 4K: $out"
run fsck "$pool"
expect 0 "clean"

# A pool held open by another process is not reformatted, nor checked.
if command -v flock >/dev/null 2>&1; then
  uuid3=$(json_field "$("$CAIRN" info --json "$pool")" uuid)
  rc=0
  out=$(flock --exclusive "$pool" "$CAIRN" mkpool "$pool" --force 2>&1) || rc=$?
  args=(mkpool --force, while locked)
  expect 1 "is in use by"
  run info "$pool"
  expect 0 "^uuid +$uuid3$"
fi

# Bad sizes and node sizes are usage errors that say what is wrong.
rm -f "$TMPDIR_TEST/new"
for size in 64X abc "" -1 1.5 12.3M 99999999999999999999 16E; do
  run mkpool "$TMPDIR_TEST/new" --size "$size"
  expect 2 "invalid size '$size'"
done
run mkpool "$TMPDIR_TEST/new" --size 1M
expect 2 "too small: a pool needs at least 8M"
run mkpool "$TMPDIR_TEST/new" --size 10000001
expect 2 "not a whole number of 4K blocks"
for n in 2K 12K 128K 0; do
  run mkpool "$TMPDIR_TEST/new" --size 64M --node-size "$n"
  expect 2 "node size '$n' must be a power of two from 4K to 64K"
done
run mkpool "$TMPDIR_TEST/new" --size 64M --node-size lots
expect 2 "invalid size 'lots'"
run mkpool "$TMPDIR_TEST/new"
expect 2 "give its size with --size"
run mkpool --size 64M
expect 2 "missing PATH"
run mkpool "$TMPDIR_TEST/new" --size 64M --frobnicate
expect 2 "unrecognized option '--frobnicate'"
[ ! -e "$TMPDIR_TEST/new" ] || fail "a failed mkpool left $TMPDIR_TEST/new behind"
# Units: binary, either case, with or without "iB", with a fraction.
run mkpool "$TMPDIR_TEST/new" --size 0.0625g --node-size 64KiB
expect 0 "^created pool .*: $uuid_re, 64M, node size 64K$"

# Damage in every superblock slot (64K, 128K, 192K, 256K; byte 100 of each)
# is found and named.
run mkpool "$pool" --force --size 64M
expect 0
for slot_kib in 64 128 192 256; do
  printf '\x5a' | dd of="$pool" bs=1 seek=$((slot_kib * 1024 + 100)) conv=notrunc status=none
done
run fsck "$pool"
expect 1 "^fsck: .*superblock.*checksum mismatch"
grep -qE "^$pool: 1 problem found$" <<<"$out" || fail "no verdict in: $out"
run info "$pool"
expect 1 "no valid superblock"

# Damage in the space map (a new pool's base block: the superblock in the
# slot at 128K points to it) leaves the pool readable; a change is refused
# naming the block, and fsck finds it.
run mkpool "$pool" --force --size 64M
expect 0
sm=$(od -An -t u8 -j $((128 * 1024 + 144)) -N 8 "$pool" | tr -d ' ')
[ "$sm" -gt 0 ] || fail "no space map pointer in slot 1"
printf '\x5a' | dd of="$pool" bs=1 seek=$((sm + 100)) conv=notrunc status=none
run --pool "$pool" volume list
expect 0
run --pool "$pool" volume create v 1M
expect 1 "space map block $((sm / 4096)): .*checksum mismatch"
run fsck "$pool"
expect 1 "space map block $((sm / 4096))"

# A file that is not a pool, a path that does not exist.
truncate -s 16M "$TMPDIR_TEST/junk"
run fsck "$TMPDIR_TEST/junk"
expect 1 "is not a Cairn pool"
run info "$TMPDIR_TEST/junk"
expect 1 "is not a Cairn pool"
run fsck "$TMPDIR_TEST/missing"
expect 3 "$TMPDIR_TEST/missing: No such file or directory"
run info "$TMPDIR_TEST/missing"
expect 3 "$TMPDIR_TEST/missing: No such file or directory"
run fsck
expect 2 "missing PATH"
echo PASS
