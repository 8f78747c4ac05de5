#!/usr/bin/env bash
# make check: every fuzz harness replays its seed corpus and regression
# inputs (tests/fuzz/README.md), in any build; in a --enable-fuzzing build
# it then fuzzes each harness CAIRN_FUZZ_CHECK_SECONDS (default 5) seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/run" --replay --builddir "${top_builddir:-.}"
if [ "${CAIRN_FUZZING:-}" = yes ]; then
  "$here/run" --seconds "${CAIRN_FUZZ_CHECK_SECONDS:-5}" \
    --builddir "${top_builddir:-.}"
fi
