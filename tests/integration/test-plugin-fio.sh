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

fio_verify vol1 4 16 16M || fail "fio reported errors"
stop_plugin
start_plugin
fio_verify vol1 4 16 16M --verify_only || fail "fio verify after a restart reported errors"
stop_plugin
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck after fio"
echo PASS
