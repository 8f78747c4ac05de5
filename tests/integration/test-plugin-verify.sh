#!/usr/bin/env bash
# verify=disk (the default) and verify=always through real nbdkit: a block
# that rots on the disk fails the read with EIO once its page has left the
# host's cache; with verify=always a block changed in the page cache itself
# (a program writing the pool file behind the server's back) fails too; a
# bad value is refused with a message that names the good ones; the log
# says which mode the pool runs in, and how a cached read is known not to
# have read from the disk; a sequential reader from the disk gets blocks
# read ahead, checked.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require python3
require_nbdsh

make_pool 128M
testctl create v 16M
NBDKIT_OPTS=(-v)
CTL="$TMPDIR_TEST/control.sock"

# pool.status's "verify", "blocks_trusted" and "read_ahead" (a python3
# expression on verify, trusted and ahead).
status_check () {
  local json
  json=$("$CAIRN" --socket "$CTL" status --json) || fail "cairn status failed"
  python3 -c 'import json, sys
j = json.loads(sys.argv[1])
verify, trusted, ahead = j["verify"], j["blocks_trusted"], j["read_ahead"]
assert eval(sys.argv[2]), (verify, trusted, ahead)' "$json" "$1" ||
    fail "cairn status: not ($1): $json"
}

# Write 1 MiB of byte $1 (a number) at byte 1 MiB, flush it, read it back
# twice (from the cache: trusted with verify=disk, as written from hashed
# data).
write_data () {
  nbdsh -u "$(uri v)" -c "h.pwrite(bytes([$1]) * (1 << 20), 1 << 20); h.flush()" ||
    fail "writing the data failed"
  for _ in 1 2; do
    nbdsh -u "$(uri v)" -c "assert h.pread(1 << 20, 1 << 20) == bytes([$1]) * (1 << 20)" ||
      fail "the data did not read back"
  done
}

# Damage a block of bytes $1 in the pool file.  With $2 "disk", drop the
# file's pages, so that the next read comes from the disk, as when a disk
# rots a block; with "cache" the change stays in the page cache.
damage () {
  damage_pool_block "$1"
  if [ "$2" = disk ]; then drop_page_cache "$POOL"; fi
}

# Reading the 1 MiB back must fail (EIO) and the log must name the damage.
expect_eio () {
  local err
  if err=$(nbdsh -u "$(uri v)" -c 'h.pread(1 << 20, 1 << 20)' 2>&1); then
    fail "$1: a damaged block was returned"
  fi
  grep -q "Input/output error" <<<"$err" || fail "$1: not EIO: $err"
  grep -q "checksum mismatch reading block" "$NBDKIT_LOG" ||
    fail "$1: the log does not name the damage"
}

# A bad value: refused, naming the good ones.
if err=$(nbdkit_env "$NBDKIT" --run true "$PLUGIN" pool="$POOL" verify=sometimes 2>&1); then
  fail "nbdkit accepted verify=sometimes"
fi
grep -q "verify=sometimes: give 'disk'.*or 'always'" <<<"$err" ||
  fail "unhelpful message: $err"

# ---------------------------------------------------------------- disk
start_plugin control="$CTL"
grep -q "checking what comes from the disk" "$NBDKIT_LOG" ||
  fail "the log does not say verify=disk is in force"
# A cached read is known to have read nothing from the disk through a perf
# ring where the host allows one (root and tracefs, in a build without
# ThreadSanitizer: engine/dev-iowatch.c), else through getrusage.
watch=getrusage
if [ "$(id -u)" -eq 0 ] && [ "$ENABLE_TSAN" != yes ] &&
   [ -r /sys/kernel/tracing/events/filemap/mm_filemap_add_to_page_cache/id ]; then
  watch=perf
fi
grep -q "not to have read from the disk through $watch\$" "$NBDKIT_LOG" ||
  fail "the log does not say cached reads are watched through $watch"
write_data 90
# The second read of the 256 blocks came from checked copies in the cache.
status_check 'verify == "disk" and trusted >= 256'
"$CAIRN" --socket "$CTL" status | grep -q "^checks  *data from the disk" ||
  fail "cairn status does not say what it checks"
damage 90 disk
expect_eio "verify=disk, damage on the disk"

# A sequential reader of what is not in the cache gets it read ahead, and
# every block still checks out: 8 MiB read back in 64 KiB requests from a
# cold cache.  Random reads before it read nothing ahead.
status_check 'ahead == 0'
nbdsh -u "$(uri v)" -c "
import random
for i in range(128):
    h.pwrite(random.Random(i).randbytes(65536), (8 << 20) + i * 65536)
h.flush()" || fail "writing 8 MiB failed"
drop_page_cache "$POOL"
nbdsh -u "$(uri v)" -c "
import random
for i in random.Random(7).sample(range(128), 32):
    assert h.pread(4096, (8 << 20) + i * 65536) == random.Random(i).randbytes(65536)[:4096], i" ||
  fail "random reads from the disk returned wrong data"
status_check 'ahead == 0'
nbdsh -u "$(uri v)" -c "
import random
for i in range(128):
    assert h.pread(65536, (8 << 20) + i * 65536) == random.Random(i).randbytes(65536), i" ||
  fail "a sequential read returned wrong data"
status_check 'ahead >= (4 << 20)'
"$CAIRN" --socket "$CTL" status | grep -q "^checks .*[0-9]M read ahead)" ||
  fail "cairn status does not say how much it read ahead"
stop_plugin

# ---------------------------------------------------------------- always
: >"$NBDKIT_LOG"
start_plugin verify=always control="$CTL"
grep -q "checking every read" "$NBDKIT_LOG" ||
  fail "the log does not say verify=always is in force"
write_data 107
status_check 'verify == "always" and trusted == 0'
damage 107 cache
expect_eio "verify=always, damage in the page cache"
stop_plugin
echo PASS
