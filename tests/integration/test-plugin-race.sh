#!/usr/bin/env bash
# Everything at once on one server: random reads and writes on one volume
# and sequential writes on another, each from its own connections, while
# the control socket makes and deletes snapshots, reads them, clones,
# sends and receives, resizes, renames, rolls back and deletes volumes.
# Every command must succeed, fio must see no error, a snapshot must read
# the same twice, the server must stop cleanly and fsck find the pool
# clean.
#
# Its main use is under ThreadSanitizer (configure --enable-tsan; scripts/
# test runs it so): a data race stops the server with the report in its
# log, and the test fails showing it.  In the other builds it is a short
# concurrency test like any other.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require fio
require nbdcopy
fio --enghelp=nbd >/dev/null 2>&1 || skip "this fio has no nbd ioengine"

# ThreadSanitizer slows the server about tenfold: give it longer.  Under
# ASan, beside the other builds' tests on two cores, a round of control
# commands once took 7 s, and 15 s of load saw only 2 rounds.
runtime=15
[ "$ENABLE_SANITIZERS" = yes ] && runtime=40
[ "$ENABLE_TSAN" = yes ] && runtime=60

CTL="$TMPDIR_TEST/control.sock"
head -c 8M /dev/urandom >"$TMPDIR_TEST/random8m"
make_pool 3G        # sparse: room for the snapshots a slow reclaim keeps
testctl create v 128M
testctl create u 64M
start_plugin control="$CTL" commit-interval=150 cache=4M reclaim-step=64
wait_for_sockets "$NBDKIT_PID" nbdkit "$NBDKIT_LOG" "$CTL"

# ctl ARGS...: a cairn command through the server; it must succeed.
ctl () {
  "$CAIRN" --socket "$CTL" "$@" >>"$TMPDIR_TEST/ctl.out" 2>&1 ||
    fail "cairn $* failed: $(tail -n 3 "$TMPDIR_TEST/ctl.out")"
}

# read_export NAME: read a whole export through a new connection.
read_export () {
  nbdcopy "$(uri "$1")" null: || fail "reading $1 failed"
}

(cd "$TMPDIR_TEST" && fio --name=mix --ioengine=nbd --uri="$(uri v)" \
  --rw=randrw --bs=4k --iodepth=16 --numjobs=2 --size=128M \
  --time_based --runtime=$runtime --group_reporting >fio-v.out 2>&1) &
fio_v=$!
(cd "$TMPDIR_TEST" && fio --name=seq --ioengine=nbd --uri="$(uri u)" \
  --rw=write --bs=256k --iodepth=4 --size=64M \
  --time_based --runtime=$runtime >fio-u.out 2>&1) &
fio_u=$!

i=0
while kill -0 $fio_v 2>/dev/null || kill -0 $fio_u 2>/dev/null; do
  i=$((i + 1))
  ctl snapshot create v@s$i
  ctl snapshot create u@s$i
  if [ $i -gt 2 ]; then
    ctl snapshot delete v@s$((i - 2))
    ctl snapshot delete u@s$((i - 2))
  fi
  read_export v@s$i &
  readers+=" $!"
  if [ $((i % 3)) = 0 ]; then
    ctl clone v@s$i c$i
    read_export c$i
    ctl volume delete c$i
  fi
  if [ $((i % 4)) = 0 ]; then
    "$CAIRN" --socket "$CTL" send u@s$((i - 1)) 2>>"$TMPDIR_TEST/ctl.out" |
      "$CAIRN" --socket "$CTL" receive r$i >>"$TMPDIR_TEST/ctl.out" 2>&1 ||
      fail "send | receive of u@s$((i - 1)) failed: $(tail -n 3 "$TMPDIR_TEST/ctl.out")"
    ctl volume delete --recursive r$i
  fi
  if [ $((i % 5)) = 0 ]; then
    ctl volume create w$i 32M
    nbdcopy "$TMPDIR_TEST/random8m" "$(uri w$i)" || fail "writing w$i failed"
    ctl snapshot create w$i@a
    ctl volume resize w$i 64M
    ctl volume rename w$i x$i
    ctl volume rollback x$i@a old$i
    ctl volume delete --recursive x$i
    ctl volume delete --recursive old$i
  fi
  ctl stats
  ctl status
  ctl job list
  sleep 0.3
done
echo "$i rounds of control commands during the load"
[ $i -ge 3 ] || fail "only $i rounds ran: the load ended too soon to test anything"

wait $fio_v || fail "fio on v failed: $(tail -n 5 "$TMPDIR_TEST/fio-v.out")"
wait $fio_u || fail "fio on u failed: $(tail -n 5 "$TMPDIR_TEST/fio-u.out")"
for f in fio-v.out fio-u.out; do
  grep -q "err= 0" "$TMPDIR_TEST/$f" && ! grep -qE "err= *[1-9]" "$TMPDIR_TEST/$f" ||
    fail "$f reports errors: $(grep err= "$TMPDIR_TEST/$f")"
done
for p in $readers; do
  wait "$p" || fail "a snapshot read failed"
done

# A snapshot taken during the load reads the same twice, with writes
# between the reads.
ctl snapshot create v@last
nbdcopy "$(uri v@last)" "$TMPDIR_TEST/last.1" || fail "reading v@last failed"
nbdcopy "$TMPDIR_TEST/random8m" "$(uri v)" || fail "writing v failed"
nbdcopy "$(uri v@last)" "$TMPDIR_TEST/last.2" || fail "reading v@last again failed"
cmp -s "$TMPDIR_TEST/last.1" "$TMPDIR_TEST/last.2" || fail "snapshot v@last changed"

stop_plugin
if grep -qE "ThreadSanitizer|AddressSanitizer|runtime error" "$NBDKIT_LOG"; then
  grep -E -A 40 "WARNING: ThreadSanitizer|ERROR: AddressSanitizer|runtime error" \
    "$NBDKIT_LOG" | head -n 120
  fail "the server's log has a sanitizer report (above)"
fi
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck after the load: $("$CAIRN" fsck "$POOL" 2>&1 | tail -n 5)"
echo PASS
