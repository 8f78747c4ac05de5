#!/usr/bin/env bash
# make check: the power-cut campaign at its default size (2,000 cut points
# over every scenario; a quarter in sanitizer builds; CAIRN_POWERCUT_CUTS
# or CAIRN_TEST_SCALE change it), then every cut point that once failed
# (tests/powercut/regressions), each replayed alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
campaign=${top_builddir:-.}/tests/powercut/campaign
"$campaign" --jobs 2
{ grep -v '^[[:space:]]*\(#\|$\)' "$here/regressions" || true; } |
  while read -r scenario seed cut rest; do
    echo "regression: $scenario seed $seed cut $cut $rest"
    "$campaign" --jobs 1 --scenario "$scenario" --seed "$seed" --cut "$cut"
  done
