#!/usr/bin/env bash
# cairn mkpool --preallocate: "space" reserves a pool file's whole size in
# its filesystem, "full" also writes it (no unwritten extents left), "off"
# stays sparse; the pools work, and cairnd --create makes them so too, with
# "space" as its default (the pool a user gets is not sparse:
# bench/README.md, "The default pool"); a filesystem without the room fails mkpool and
# cairnd --create at once with a clear message and leaves no file behind.
. "$top_srcdir/tests/integration/plugin-functions.sh"

uuid_re='[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
MiB=$((1024 * 1024))
mnt="$TMPDIR_TEST/small"
# Unmount the small filesystem (if the test mounted one) before cleanup
# removes the directory, keeping the test's exit status.
trap 'rc=$?; mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"; (exit $rc); cleanup' EXIT

# Allocated KiB of file $1.
allocated_kib () { du -k "$1" | cut -f1; }
# How many of file $1's extents are allocated but unwritten ("" when the
# filesystem does not say).
unwritten_extents () {
  command -v filefrag >/dev/null 2>&1 || return 0
  local map
  map=$(filefrag -v "$1" 2>/dev/null) || return 0
  grep -c unwritten <<<"$map" || true
}

# off: the default, sparse.
pool="$TMPDIR_TEST/off.pool"
run mkpool "$pool" --size 64M --preallocate off
expect 0 "^created pool $pool: $uuid_re, 64M, node size 16K$"
[ "$(allocated_kib "$pool")" -lt 1024 ] || fail "--preallocate off is not sparse: $(allocated_kib "$pool")K"

# space: all 64M reserved, and the pool is a good pool.
pool="$TMPDIR_TEST/space.pool"
run mkpool "$pool" --size 64M --preallocate space
expect 0 "^created pool $pool: $uuid_re, 64M, node size 16K, space reserved$"
[ "$(stat -c %s "$pool")" -eq $((64 * MiB)) ] || fail "size $(stat -c %s "$pool")"
[ "$(allocated_kib "$pool")" -ge $((64 * 1024)) ] || fail "--preallocate space reserved only $(allocated_kib "$pool")K of 64M"
run fsck "$pool"
expect 0 "^$pool: clean$"
space_unwritten=$(unwritten_extents "$pool")

# full: all 64M written (where the filesystem reports extents, none is left
# unwritten), and the pool works: a volume written offline reads back.
pool="$TMPDIR_TEST/full.pool"
run mkpool "$pool" --size 64M --preallocate full
expect 0 "^created pool $pool: $uuid_re, 64M, node size 16K, space written$"
[ "$(allocated_kib "$pool")" -ge $((64 * 1024)) ] || fail "--preallocate full allocated only $(allocated_kib "$pool")K of 64M"
full_unwritten=$(unwritten_extents "$pool")
if [ -n "$full_unwritten" ] && [ -n "$space_unwritten" ] && [ "$space_unwritten" -gt 0 ]; then
  [ "$full_unwritten" -eq 0 ] || fail "--preallocate full left $full_unwritten unwritten extents: $(filefrag -v "$pool")"
fi
run --pool "$pool" volume create v 16M
expect 0
run fsck "$pool"
expect 0 "^$pool: clean$"
run info --json "$pool"
expect 0 '"generation"'

# --force over an existing pool with --preallocate full: a new pool, the
# file still wholly allocated.
uuid_old=$(grep -oE "$uuid_re" <<<"$("$CAIRN" info "$pool")" | head -n1)
run mkpool "$pool" --force --size 32M --preallocate full
expect 0 "^created pool $pool: ($uuid_re), 32M, node size 16K, space written$"
grep -q "$uuid_old" <<<"$out" && fail "--force kept the UUID $uuid_old"
[ "$(allocated_kib "$pool")" -ge $((32 * 1024)) ] || fail "--force --preallocate full allocated only $(allocated_kib "$pool")K of 32M"
run fsck "$pool"
expect 0 "^$pool: clean$"

# A mode that does not exist is a usage error that names the modes.
run mkpool "$TMPDIR_TEST/bad.pool" --size 64M --preallocate most
expect 2 "--preallocate 'most': say off, space or full"
[ ! -e "$TMPDIR_TEST/bad.pool" ] || fail "a refused mkpool left a file behind"

# cairnd --create makes the pool it serves with the same preallocation,
# and refuses a mode that does not exist before it creates anything.
dpool="$TMPDIR_TEST/d/served.pool"
run_cairnd () { RUN_CMD=$CAIRND run "$@"; }
run_cairnd --foreground --pool "$dpool" --create 64M --preallocate most \
  --socket "$TMPDIR_TEST/nbd.sock" --control "$TMPDIR_TEST/ctl.sock" --plugin "$PLUGIN"
expect 1 "cairnd: --preallocate most: say off, space or full"
[ ! -e "$dpool" ] || fail "cairnd made a pool with a bad --preallocate"

# Serve pool $1 with cairnd --create 64M and the options after it, check
# that the pool takes a volume, stop it and check the pool; the log is in
# $TMPDIR_TEST/nbdkit.log.
serve_created () {
  local p=$1
  shift
  nbdkit_exec "$CAIRND" --foreground --pool "$p" --create 64M "$@" \
    --socket "$TMPDIR_TEST/nbd.sock" --control "$TMPDIR_TEST/ctl.sock" \
    --plugin "$PLUGIN" >"$TMPDIR_TEST/nbdkit.log" 2>&1 &
  NBDKIT_PID=$!
  wait_for_sockets "$NBDKIT_PID" cairnd "$TMPDIR_TEST/nbdkit.log" \
    "$TMPDIR_TEST/nbd.sock" "$TMPDIR_TEST/ctl.sock"
  "$CAIRN" --socket "$TMPDIR_TEST/ctl.sock" volume create w 16M >/dev/null ||
    fail "the pool cairnd --create $* serves does not take a volume"
  stop_server "$NBDKIT_PID"
  NBDKIT_PID=
  run fsck "$p"
  expect 0 "^$p: clean$"
}
serve_created "$dpool" --preallocate full
grep -qE "^cairnd: created pool $dpool \(64M, $uuid_re, space written\)$" "$TMPDIR_TEST/nbdkit.log" ||
  fail "cairnd did not say it wrote the pool's space: $(cat "$TMPDIR_TEST/nbdkit.log")"
[ "$(allocated_kib "$dpool")" -ge $((64 * 1024)) ] || fail "cairnd --preallocate full allocated only $(allocated_kib "$dpool")K"

# The pool cairnd --create makes when nothing says how (what scripts/start
# and the systemd unit's config get) has its whole size reserved, not
# sparse: on a sparse one, writes after a snapshot ran at a fraction of the
# speed.  (A filesystem that cannot reserve gets it written: "space
# written".)
dpool="$TMPDIR_TEST/d/default.pool"
serve_created "$dpool"
grep -qE "^cairnd: created pool $dpool \(64M, $uuid_re, space (reserved|written)\)$" "$TMPDIR_TEST/nbdkit.log" ||
  fail "cairnd --create without --preallocate did not reserve the pool's space: $(cat "$TMPDIR_TEST/nbdkit.log")"
[ "$(allocated_kib "$dpool")" -ge $((64 * 1024)) ] ||
  fail "the default pool of cairnd --create is sparse: $(allocated_kib "$dpool")K of 64M allocated"

# --preallocate off still makes a sparse one, for whoever asks.
spool="$TMPDIR_TEST/d/sparse.pool"
serve_created "$spool" --preallocate off
grep -qE "^cairnd: created pool $spool \(64M, $uuid_re\)$" "$TMPDIR_TEST/nbdkit.log" ||
  fail "cairnd --preallocate off said: $(cat "$TMPDIR_TEST/nbdkit.log")"
[ "$(allocated_kib "$spool")" -lt 1024 ] || fail "cairnd --preallocate off is not sparse: $(allocated_kib "$spool")K"

# A filesystem without the room: mkpool fails at once, saying so, and
# leaves nothing behind (a 16M tmpfs and a 64M pool; root only).
if [ "$(id -u)" -ne 0 ] || ! command -v mountpoint >/dev/null 2>&1; then
  echo "skipping the full-filesystem case: needs root"
  exit 0
fi
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=16M tmpfs "$mnt" 2>/dev/null; then
  echo "skipping the full-filesystem case: cannot mount a tmpfs here"
  exit 0
fi
for mode in space full; do
  run mkpool "$mnt/p.pool" --size 64M --preallocate "$mode"
  expect 1 "the filesystem holding it has no room for 67108864 bytes: make the pool smaller or free space there"
  [ ! -e "$mnt/p.pool" ] || fail "--preallocate $mode left $mnt/p.pool behind on a full filesystem"
  [ "$(df -k --output=used "$mnt" | tail -n1 | tr -d ' ')" -lt 1024 ] || fail "space still used on $mnt after the failure"
done
# cairnd --create with its default fails the same way, names the way out,
# and leaves nothing behind.
run_cairnd --foreground --pool "$mnt/d.pool" --create 64M --socket "$TMPDIR_TEST/nbd.sock" \
  --control "$TMPDIR_TEST/ctl.sock" --plugin "$PLUGIN"
expect 1 "no room for 67108864 bytes: make the pool smaller or free space there \(--preallocate off makes a sparse pool file instead, whose writes are slower\)"
[ ! -e "$mnt/d.pool" ] || fail "cairnd --create left $mnt/d.pool behind on a full filesystem"
# Without preallocation the same pool is made (sparse): the choice is the
# user's.
run mkpool "$mnt/p.pool" --size 64M
expect 0 "^created pool $mnt/p.pool: $uuid_re, 64M, node size 16K$"
