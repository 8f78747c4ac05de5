#!/usr/bin/env bash
# Background reclaim is a job: deleting a snapshot or a volume that holds
# many extents leaves its space to come back in the background, and
# `cairn job list` shows it (what, bytes freed of the total) until it is
# done; job.cancel refuses it and says why; the space is then free again.
# reclaim-step=1 makes each background step free one extent, so the work
# lasts long enough (thousands of commits) to be seen.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require python3
require_nbdsh

CTL="$TMPDIR_TEST/control.sock"
cairn_s () { "$CAIRN" --socket "$CTL" "$@"; }
N=3000                          # separate extents (every other block)

make_pool 256M
# What a deleted snapshot held is what this test watches come back: with
# checkpoints the same state would stay kept by one, so they are off.
"$CAIRN" --pool "$POOL" checkpoint set --default checkpoints=off >/dev/null ||
  fail "turning checkpoints off"
for bad in 0 x; do
  msg=$(nbdkit_env "$NBDKIT" --foreground --unix "$SOCK" "$PLUGIN" pool="$POOL" \
          reclaim-step=$bad --run true 2>&1) && fail "reclaim-step=$bad was accepted"
  grep -q "reclaim-step" <<<"$msg" || fail "reclaim-step=$bad: unclear error: $msg"
done
start_plugin control="$CTL" commit-interval=200 reclaim-step=1
for _ in $(seq 100); do [ -S "$CTL" ] && break; sleep 0.1; done
[ -S "$CTL" ] || fail "no control socket at $CTL"
used () { cairn_s status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["used"])'; }

# The job list of a quiet server is empty, in both forms.
[ "$(cairn_s job list)" = "no jobs are running" ] || fail "jobs on an idle server: $(cairn_s job list)"

# vm/a: N one-block extents, kept by snapshot s1, then overwritten by one
# long extent: s1 alone holds the N blocks (N deadlist entries).
cairn_s volume create vm/a 64M || fail "volume create"
write_extents () {
  N=$N nbdsh -u "$(uri "$1")" -c '
import os
n = int(os.environ["N"])
for i in range(n):
    h.pwrite((i + 1).to_bytes(8, "little") * 512, 2 * i * 4096)
h.flush()' || fail "writing $N extents to $1"
}
write_extents vm/a
cairn_s snapshot create vm/a@s1 || fail "snapshot create"
nbdsh -u "$(uri vm/a)" -c 'h.pwrite(b"\x77" * (2 * '$N' * 4096), 0); h.flush()' ||
  fail "overwriting vm/a"
before=$(used)

# Watch the job list while the snapshot's space comes back.  Print one
# line per sample: id, done, total (reclaim jobs of vm/a@s1 only).
watch_jobs () {
  cairn_s job list --json | WHAT=$1 python3 -c '
import json, os, sys
for j in json.load(sys.stdin)["jobs"]:
    if j["method"] == "reclaim" and j["what"].startswith(os.environ["WHAT"] + " "):
        assert j["background"] is True, j
        print(j["job"], j["done"], j["total"], j["what"].replace(" ", "_"))'
}
cairn_s snapshot delete vm/a@s1 || fail "snapshot delete"
line=$(watch_jobs vm/a@s1)
[ -n "$line" ] || fail "the snapshot's reclaim is not listed: $(cairn_s job list)"
set -- $line
id=$1
# How people see it, one job, and job.cancel refused with the reason.
cairn_s job list
cairn_s job list | grep -q "^$id  *reclaim  *vm/a@s1 (deleted snapshot) " ||
  fail "cairn job list does not show the reclaim: $(cairn_s job list)"
cairn_s job show "$id" | grep -q "vm/a@s1" || fail "job show $id: $(cairn_s job show "$id" 2>&1)"
if out=$(cairn_s job cancel "$id" 2>&1); then
  fail "cancelling a reclaim succeeded: $out"
fi
echo "$out" | grep -q "cannot be cancelled" || fail "cancel gave no reason: $out"
echo "$out" | grep -q "ends by itself" || fail "cancel does not say what happens instead: $out"
# Then its progress until it is gone.
samples="$TMPDIR_TEST/samples"
echo "$line" >"$samples"
for _ in $(seq 600); do
  line=$(watch_jobs vm/a@s1) || fail "job list failed"
  [ -n "$line" ] || break
  echo "$line" >>"$samples"
  sleep 0.02
done
[ -z "$(watch_jobs vm/a@s1)" ] || fail "the reclaim job is still listed after 12 s: $(cairn_s job list)"
echo "snapshot reclaim: $(wc -l <"$samples") samples, first: $(head -1 "$samples"), last: $(tail -1 "$samples")"
[ "$(wc -l <"$samples")" -ge 3 ] || fail "too few samples to see progress: $(cat "$samples")"
python3 - "$samples" "$N" <<'PY' || fail "the snapshot's reclaim progress is not sane: $(cat "$samples")"
import sys
rows = [l.split() for l in open(sys.argv[1])]
n = int(sys.argv[2])
assert len({r[0] for r in rows}) == 1, "the job's id changed"
assert rows[0][3] == "vm/a@s1_(deleted_snapshot)", rows[0][3]
done = [int(r[1]) for r in rows]
total = [int(r[2]) for r in rows]
assert done == sorted(done), "done went backwards"
assert done[-1] > done[0], "no progress was seen"
for d, t in zip(done, total):
    assert t == 0 or d <= t, (d, t)
known = [t for t in total if t]
assert known, "the total never became known"
# The job's total is the snapshot's N data blocks and the metadata nodes
# it held, less the one entry (an extent, or a 4-block node) the delete's
# own commit freed.
assert len(set(known)) == 1, "the total changed"
assert (n - 4) * 4096 <= known[0] <= (n + 256) * 4096, known[0]
PY

# A deleted volume: vm/b with a snapshot that holds N extents, deleted
# with it, so that its reclaim drains N deadlist entries a step at a time.
# Its total is what the volume referenced and held when it was deleted.
cairn_s volume create vm/b 64M || fail "volume create vm/b"
write_extents vm/b
cairn_s snapshot create vm/b@s || fail "snapshot vm/b@s"
nbdsh -u "$(uri vm/b)" -c 'h.pwrite(b"\x66" * (2 * '$N' * 4096), 0); h.flush()' ||
  fail "overwriting vm/b"
cairn_s volume delete vm/b --recursive || fail "volume delete"
# If the server had not yet seen nbdsh's connection close, the delete
# waits for it and the next commit (200 ms here) begins the reclaim.
for _ in $(seq 100); do
  line=$(watch_jobs vm/b)
  [ -n "$line" ] && break
  sleep 0.05
done
[ -n "$line" ] || fail "the volume's reclaim is not listed: $(cairn_s job list)"
set -- $line
[ "$4" = "vm/b_(deleted_volume)" ] || fail "the volume's reclaim is described as '$4'"
[ "$3" -ge $((3 * N * 4096 - 4 * 4096)) ] && [ "$3" -le $(((3 * N + 256) * 4096)) ] ||
  fail "the deleted volume's total is $3, not about $((3 * N * 4096)) (its data and what its snapshot held)"
[ "$2" -le "$3" ] || fail "the volume's reclaim is past its total: $line"
for _ in $(seq 600); do
  [ -z "$(watch_jobs vm/b)" ] && break
  sleep 0.02
done
[ -z "$(watch_jobs vm/b)" ] || fail "the volume's reclaim never finished: $(cairn_s job list)"

# The space is back: the snapshot's N blocks, and all of vm/b (once the
# commit after the last reclaim step has counted it).
back () { after=$(used); [ $((before - after)) -ge $(((N - 16) * 4096)) ]; }
wait_for back || true
echo "used: $before before the snapshot delete, $after after both reclaims"
[ $((before - after)) -ge $(((N - 16) * 4096)) ] ||
  fail "only $((before - after)) bytes came back, not about $((N * 4096))"
[ "$(cairn_s job list)" = "no jobs are running" ] || fail "jobs left: $(cairn_s job list)"
cairn_s status --json | python3 -c '
import json, sys
r = json.load(sys.stdin)["reclaim"]
assert r["volumes"] == 0 and r["snapshots"] == 0 and not r["error"], r' ||
  fail "status still shows reclaim work: $(cairn_s status --json)"

stop_plugin
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck after the reclaims"
echo PASS
