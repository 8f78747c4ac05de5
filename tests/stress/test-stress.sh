#!/usr/bin/env bash
# make check: the stress loop (tests/stress/README.md) for
# CAIRN_STRESS_SECONDS (default: 110 s, 27.5 s in a sanitizer build): children
# doing random operations on a mirrored pool with faults on one copy,
# killed at random, the pool reopened, checked with fsck and compared with
# the model each time.  The time is split: 60/110 of it with flushes that
# commit, 50/110 with the intent log on (flushes and FUA writes logged,
# the log replayed at each check).  A failure keeps the pool, journal and model in
# $CAIRN_STRESS_KEEP (default tests/stress/failures in the build tree) and
# prints the commands that replay it.
set -euo pipefail
builddir=${top_builddir:-.}
stress=$builddir/tests/stress/cairn-stress
keep=${CAIRN_STRESS_KEEP:-$builddir/tests/stress/failures}
work=$(mktemp -d "${TMPDIR:-/tmp}/cairn-stress.XXXXXX")
trap 'rm -rf "$work"' EXIT

# First, the check can fail: a pool left by one child (`run`), checked
# against its own journal, passes; with a flushed 4 KiB write added to the
# journal that the pool does not hold, it must fail and name the bytes.
self=$work/self
"$stress" run "$self" --single --seconds 2 --seed 1 > "$work/self.out"
echo single > "$self/options"
: > "$self/base.model"
"$stress" check "$self"
vol=$("$builddir/cairn" --pool "$self/pool-0.img" volume list | awk 'NR == 2 { print $1 }')
n=$(wc -l < "$self/journal")
printf 'B %d W %s 0 4096 4242 0\nE %d 0\nB %d F\nE %d 0\n' \
  $((n + 1)) "$vol" $((n + 1)) $((n + 2)) $((n + 2)) >> "$self/journal"
if "$stress" check "$self" 2> "$work/self.err"; then
  echo "FAIL: the check took a pool without a flushed write"; exit 1
fi
grep -E "stress: $vol: [0-9]+ bytes differ from the durable model" "$work/self.err" || {
  cat "$work/self.err"; echo "FAIL: the check did not name the lost write"; exit 1; }

status=0
"$stress" loop "$work/pool" --share 0.5454 || status=$?
if [ "$status" -eq 0 ]; then
  "$stress" loop "$work/pool-log" --share 0.4545 --intent-log || status=$?
fi
if [ "$status" -ne 0 ]; then
  mkdir -p "$keep"
  for f in "$work"/pool/failure-* "$work"/pool-log/failure-*; do
    [ -d "$f" ] && cp -r "$f" "$keep/" && echo "kept: $keep/$(basename "$f")"
  done
  exit "$status"
fi
