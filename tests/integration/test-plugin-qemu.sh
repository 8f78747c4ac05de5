#!/usr/bin/env bash
# Real clients move whole images: qemu-img converts a file with data and
# holes into an export and compares it; nbdcopy copies the export back out
# (in parallel, over several connections) and the copies are identical;
# qemu-img reads a snapshot; qemu-img info sees the export's size.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require qemu-img
require nbdcopy

M=$((1024 * 1024))
make_pool 512M
testctl create vol1 96M
start_plugin

# The source: random data with holes, zero runs and unaligned edges.
src="$TMPDIR_TEST/src.raw"
truncate -s 96M "$src"
for spec in 0:3 5:7 20:1 33:16 70:2 95:1; do
  off=${spec%:*} len=${spec#*:}
  head -c $((len * M - 1234)) /dev/urandom |
    dd of="$src" bs=1M seek="$off" oflag=seek_bytes conv=notrunc status=none
done
dd if=/dev/zero of="$src" bs=4096 seek=1000 count=64 conv=notrunc status=none

qemu-img info "$(uri vol1)" | grep -q "virtual size: 96 MiB" || fail "qemu-img info does not see 96 MiB"
qemu-img convert -n -f raw -O raw "$src" "$(uri vol1)" || fail "qemu-img convert into vol1"
qemu-img compare -f raw -F raw "$src" "$(uri vol1)" || fail "qemu-img compare: vol1 differs from the source"

# nbdcopy out, several connections and requests in flight.
out="$TMPDIR_TEST/out.raw"
nbdcopy --connections=4 --requests=16 "$(uri vol1)" "$out" || fail "nbdcopy out of vol1"
cmp "$src" "$out" || fail "the copy made by nbdcopy differs from the source"
[ "$(sha256sum <"$src")" = "$(sha256sum <"$out")" ] || fail "sha256 differs"

# Overwrite with a second image through nbdcopy (it zeroes what is zero),
# and read it back with qemu-img.
src2="$TMPDIR_TEST/src2.raw"
truncate -s 96M "$src2"
head -c $((10 * M + 77)) /dev/urandom | dd of="$src2" bs=1M seek=40 conv=notrunc status=none
nbdcopy "$src2" "$(uri vol1)" || fail "nbdcopy into vol1"
qemu-img compare -f raw -F raw "$src2" "$(uri vol1)" || fail "vol1 differs from the second image"

# A restart and a snapshot: qemu-img reads the snapshot export.
stop_plugin
testctl snapshot vol1 s1
start_plugin
qemu-img compare -f raw -F raw "$src2" "$(uri vol1@s1)" || fail "vol1@s1 differs from the second image"
if qemu-img convert -n -f raw -O raw "$src" "$(uri vol1@s1)" 2>"$TMPDIR_TEST/err"; then
  fail "qemu-img wrote to a snapshot"
fi
cat "$TMPDIR_TEST/err"
stop_plugin
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck after the copies"
echo PASS
