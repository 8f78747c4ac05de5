#!/usr/bin/env bash
# A listing past its bound (issue #27): nbdkit 1.32 refuses a list of more
# than 10,000 exports, and the plugin used to fail the whole listing then.
# With more states than list-max=, `nbdinfo --list` succeeds, lists every
# live volume first, then snapshots up to the bound, and the last entry's
# description says how many were left out and what lists them; what is left
# out still opens by name.  list-max= out of range is refused.  (The suite
# uses a small bound to stay fast: nbdinfo opens every listed export.)
. "$top_srcdir/tests/integration/plugin-functions.sh"
require nbdinfo
require_nbdsh

make_pool 64M
for v in zeta alpha mid; do testctl create "$v" 1M; done
for s in s1 s2 s3 s4; do testctl snapshot alpha "$s"; done
for s in t1 t2; do testctl snapshot zeta "$s"; done

# 3 volumes + 6 snapshots, listed at most 5: 2 snapshots fit, 4 do not.
start_plugin list-max=5
nbdinfo --list --json "nbd+unix:///?socket=$SOCK" >"$TMPDIR_TEST/list.json" ||
  fail "nbdinfo --list failed past the bound"
python3 - "$TMPDIR_TEST/list.json" <<'PY' || fail "the bounded list is wrong"
import json, sys
ex = json.load(open(sys.argv[1]))["exports"]
names = [e["export-name"] for e in ex]
print(names)
assert names == ["alpha", "mid", "zeta", "alpha@s1", "alpha@s2"], names
last = ex[-1]["description"]
assert last.startswith("snapshot of alpha, read-only"), last
assert "the list stops here, at 5 exports: 4 more not listed" in last, last
assert "'cairn snapshot list VOL'" in last, last
for e in ex[:-1]:
    assert "not listed" not in e["description"], e
PY
# A state past the bound still opens by name.
nbdsh -u "$(uri zeta@t2)" -c 'assert h.is_read_only()' || fail "zeta@t2 does not open"
stop_plugin

# Exactly at the bound: nothing is left out, and nothing says so.
start_plugin list-max=9
nbdinfo --list --json "nbd+unix:///?socket=$SOCK" >"$TMPDIR_TEST/list.json" ||
  fail "nbdinfo --list at the bound"
python3 - "$TMPDIR_TEST/list.json" <<'PY' || fail "the list at the bound is wrong"
import json, sys
ex = json.load(open(sys.argv[1]))["exports"]
assert len(ex) == 9, [e["export-name"] for e in ex]
assert ex[-1]["export-name"] == "zeta@t2", ex[-1]
assert all("not listed" not in e["description"] for e in ex), ex
PY
stop_plugin

# Fewer bounds than volumes: the volumes come first and are cut too.
start_plugin list-max=2
nbdinfo --list --json "nbd+unix:///?socket=$SOCK" >"$TMPDIR_TEST/list.json" ||
  fail "nbdinfo --list with list-max=2"
python3 - "$TMPDIR_TEST/list.json" <<'PY' || fail "the list of two is wrong"
import json, sys
ex = json.load(open(sys.argv[1]))["exports"]
assert [e["export-name"] for e in ex] == ["alpha", "mid"], ex
assert "7 more not listed" in ex[-1]["description"], ex[-1]
PY
stop_plugin

for bad in 0 10001 x; do
  if nbdkit_env "$NBDKIT" --unix "$SOCK" "$PLUGIN" pool="$POOL" list-max=$bad \
       --run true >"$TMPDIR_TEST/bad.log" 2>&1; then
    fail "list-max=$bad was accepted"
  fi
  case $bad in
    x) want="list-max" ;;
    *) want="list-max=$bad: give how many exports a listing holds at most, 1 to 10000" ;;
  esac
  grep -qF "$want" "$TMPDIR_TEST/bad.log" ||
    fail "list-max=$bad: no message saying '$want': $(cat "$TMPDIR_TEST/bad.log")"
done
echo PASS
