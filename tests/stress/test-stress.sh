#!/usr/bin/env bash
# make check: the stress loop (tests/stress/README.md) for
# CAIRN_STRESS_SECONDS (default: 120 s, 30 s in a sanitizer build): children
# doing random operations on a mirrored pool with faults on one copy,
# killed at random, the pool reopened, checked with fsck and compared with
# the model each time.  A failure keeps the pool, journal and model in
# $CAIRN_STRESS_KEEP (default tests/stress/failures in the build tree) and
# prints the commands that replay it.
set -euo pipefail
builddir=${top_builddir:-.}
stress=$builddir/tests/stress/cairn-stress
keep=${CAIRN_STRESS_KEEP:-$builddir/tests/stress/failures}
work=$(mktemp -d "${TMPDIR:-/tmp}/cairn-stress.XXXXXX")
trap 'rm -rf "$work"' EXIT

status=0
"$stress" loop "$work/pool" || status=$?
if [ "$status" -ne 0 ]; then
  mkdir -p "$keep"
  for f in "$work"/pool/failure-*; do
    [ -d "$f" ] && cp -r "$f" "$keep/" && echo "kept: $keep/$(basename "$f")"
  done
  exit "$status"
fi
