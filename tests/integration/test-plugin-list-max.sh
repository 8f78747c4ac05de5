#!/usr/bin/env bash
# A listing past its bound (issue #27): nbdkit 1.32 refuses a list of more
# than 10,000 exports, and the plugin used to fail the whole listing then.
# With more states than list-max=, `nbdinfo --list` succeeds, lists every
# live volume first, then snapshots up to the bound, and the last entry's
# description says how many were left out and what lists them; what is left
# out still opens by name.  With list-checkpoints=true the volumes'
# checkpoints follow the snapshots within the same bound; without it they
# are not listed.  list-max= out of range and list-checkpoints= not a
# boolean are refused.  (The suite
# uses a small bound to stay fast: nbdinfo opens every listed export.)
# Last, nbdkit's own bound: a pool with more states than 10,000 (10,048
# snapshots by default; CAIRN_LIST_STATES=100000 for the issue's count)
# lists 10,000 exports to a client that asks for the list alone.
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

# Checkpoints (list-checkpoints=true) come after the snapshots, each
# volume's oldest first, within the same bound; without it they are not
# listed.  Each FUA write is a commit, so a checkpoint.
start_plugin
nbdsh -u "$(uri alpha)" -c '
for i in range(3):
    h.pwrite(b"%d" % i * 4096, 4096 * i, nbd.CMD_FLAG_FUA)
' || fail "writing alpha"
nbdsh -u "$(uri zeta)" -c 'h.pwrite(b"z" * 4096, 0, nbd.CMD_FLAG_FUA)' || fail "writing zeta"
expect_exports alpha alpha@s1 alpha@s2 alpha@s3 alpha@s4 mid zeta zeta@t1 zeta@t2
stop_plugin
"$CAIRN" --pool "$POOL" checkpoint list alpha --json >"$TMPDIR_TEST/ca.json" || fail "checkpoint list alpha"
"$CAIRN" --pool "$POOL" checkpoint list zeta --json >"$TMPDIR_TEST/cz.json" || fail "checkpoint list zeta"
start_plugin list-checkpoints=true
nbdinfo --list --json "nbd+unix:///?socket=$SOCK" >"$TMPDIR_TEST/list.json" ||
  fail "nbdinfo --list with list-checkpoints=true"
python3 - "$TMPDIR_TEST/list.json" "$TMPDIR_TEST/ca.json" "$TMPDIR_TEST/cz.json" <<'PY' || fail "the list with checkpoints is wrong"
import json, re, sys
ex = json.load(open(sys.argv[1]))["exports"]
ck = [c for f in sys.argv[2:] for c in json.load(open(f))["checkpoints"]]
assert len(ck) >= 4, ck
names = [e["export-name"] for e in ex]
print(names)
assert names == ["alpha", "mid", "zeta", "alpha@s1", "alpha@s2", "alpha@s3",
                 "alpha@s4", "zeta@t1", "zeta@t2"] + [c["name"] for c in ck], names
for e, c in zip(ex[9:], ck):
    vol = c["name"].split("@")[0]
    want = "checkpoint #%d of %s, read-only, 1M, taken %s" % (c["generation"], vol, c["ctime"])
    assert e["description"] == want, (e["description"], want)
    assert e["is_read_only"] and e["export-size"] == 1 << 20, e
PY
nbdsh -c "
h.set_export_name('$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["checkpoints"][-1]["name"])' "$TMPDIR_TEST/ca.json")')
h.connect_unix('$SOCK')
assert h.pread(4096, 8192) == b'2' * 4096
" || fail "alpha's newest checkpoint does not hold the last write"
stop_plugin
# Past the bound: what is left out is counted, checkpoints included.
start_plugin list-checkpoints=true list-max=10
nbdinfo --list --json "nbd+unix:///?socket=$SOCK" >"$TMPDIR_TEST/list.json" ||
  fail "nbdinfo --list with list-checkpoints=true list-max=10"
python3 - "$TMPDIR_TEST/list.json" "$TMPDIR_TEST/ca.json" "$TMPDIR_TEST/cz.json" <<'PY' || fail "the bounded list with checkpoints is wrong"
import json, sys
ex = json.load(open(sys.argv[1]))["exports"]
ck = [c for f in sys.argv[2:] for c in json.load(open(f))["checkpoints"]]
assert len(ex) == 10 and ex[-1]["export-name"] == ck[0]["name"], ex
last = ex[-1]["description"]
assert last.startswith("checkpoint #%d of alpha, read-only, 1M, taken " % ck[0]["generation"]), last
assert "the list stops here, at 10 exports: %d more not listed" % (len(ck) - 1) in last, last
assert "'cairn checkpoint list VOL' its checkpoints" in last, last
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
if nbdkit_env "$NBDKIT" --unix "$SOCK" "$PLUGIN" pool="$POOL" list-checkpoints=maybe \
     --run true >"$TMPDIR_TEST/bad.log" 2>&1; then
  fail "list-checkpoints=maybe was accepted"
fi
grep -qF "list-checkpoints=maybe: give true or false" "$TMPDIR_TEST/bad.log" ||
  fail "list-checkpoints=maybe: no message naming it: $(cat "$TMPDIR_TEST/bad.log")"

# nbdkit's real bound (10,000), past which the plugin once failed the
# whole listing ("Operation not supported"): 64 volumes snapshotted
# together, so the states take one commit per 64.
states=${CAIRN_LIST_STATES:-10048}
POOL=$TMPDIR_TEST/many.pool
make_pool 1G
testctl many t 64 $(( (states + 63) / 64 ))
start_plugin
nbdsh -c "
import time
ex = []
h.set_opt_mode(True)
h.connect_unix('$SOCK')
t = time.monotonic()
h.opt_list(lambda name, desc: ex.append((name, desc)))
print('listed %d exports of %d states and 64 volumes in %.0f ms'
      % (len(ex), 64 * ((${states} + 63) // 64), (time.monotonic() - t) * 1e3))
assert len(ex) == 10000, len(ex)
names = [e[0] for e in ex]
assert names[:64] == ['t/v%05d' % i for i in range(64)], names[:64]
assert names[64] == 't/v00000@s00000', names[64]
left = 64 + 64 * ((${states} + 63) // 64) - 10000
assert 'the list stops here, at 10000 exports: %d more not listed' % left in ex[-1][1], ex[-1]
" || fail "listing $states states"
nbdsh -u "$(uri "t/v00063@s$(printf %05d $(( (states + 63) / 64 - 1 )))")" \
  -c 'assert h.is_read_only()' || fail "the newest state past the bound does not open"
stop_plugin
echo PASS
