#!/usr/bin/env bash
# fio through its NBD engine (libnbd): four jobs, each on its own
# connection and its own quarter of the volume, random 4 KiB writes with
# many requests in flight, every block verified (crc32c) after the write
# phase and again, with verify_only, after nbdkit restarts.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require fio
fio --enghelp=nbd >/dev/null 2>&1 || skip "this fio has no nbd ioengine"

make_pool 512M
testctl create vol1 64M
start_plugin

# run_fio EXTRA-OPTIONS...: the workload; fails on any verify error.
# fio writes its verify state files (local-*-verify.state) into the
# current directory: run it in the test's own.
run_fio () {
  (cd "$TMPDIR_TEST" && fio --name=cairn --ioengine=nbd --uri="$(uri vol1)" \
    --rw=randwrite --bs=4k --iodepth=16 --numjobs=4 \
    --size=16M --offset_increment=16M \
    --verify=crc32c --verify_fatal=1 --verify_backlog=0 \
    --randrepeat=1 --group_reporting "$@" >"$TMPDIR_TEST/fio.out" 2>&1)
  local rc=$?
  cat "$TMPDIR_TEST/fio.out"
  [ $rc -eq 0 ] || return 1
  ! grep -qiE "verify: bad|bad magic|crc32c: verify failed|err= *[1-9]" "$TMPDIR_TEST/fio.out"
}

run_fio || fail "fio reported errors"
stop_plugin
start_plugin
run_fio --verify_only || fail "fio verify after a restart reported errors"
stop_plugin
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck after fio"
echo PASS
