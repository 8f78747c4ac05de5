#!/usr/bin/env bash
# The Prometheus metrics endpoint (metrics=, cairnd --metrics), scraped
# with curl after a known workload over NBD: the exposition passes
# `promtool check metrics` (skipped with a message without promtool), every
# family has HELP and TYPE, and the counters are exactly what the client
# did (requests and bytes per kind, per export, a snapshot's apart from its
# volume's); each latency histogram's count is its request count and its
# buckets are cumulative; commits and their histogram agree; cairn stats
# says the same.  Errors: another method (405), another path (404), an
# address in use, addresses and ports that are not ones, and a build
# without libmicrohttpd (the option is refused, in the plugin and cairnd).
. "$top_srcdir/tests/integration/plugin-functions.sh"
require python3
require curl
require_nbdsh

CTL="$TMPDIR_TEST/control.sock"
cairn_s () { "$CAIRN" --socket "$CTL" "$@"; }
# nbdkit with the plugin, in the foreground, for runs that must fail.
nbdkit_run () { nbdkit_env timeout 30 "$NBDKIT" --foreground "$@"; }

make_pool 512M
testctl create v 64M

# ---------------------------------------------------------------- without
if [ "$HAVE_METRICS" != yes ]; then
  RUN_CMD=nbdkit_run run --unix "$SOCK" "$PLUGIN" pool="$POOL" \
    metrics=127.0.0.1:9100
  expect 1 "built without metrics support"
  RUN_CMD="$CAIRND" run --pool "$POOL" --metrics 9100 --dry-run
  expect 2 "built without metrics support"
  nbdkit_env "$NBDKIT" --dump-plugin "$PLUGIN" | grep -qx cairn_metrics=no ||
    fail "--dump-plugin does not say cairn_metrics=no"
  echo "this build has no libmicrohttpd: checked that metrics are refused"
  exit 0
fi

# ---------------------------------------------------------------- options
RUN_CMD="$CAIRND" run --pool "$POOL" --metrics 9100 --dry-run
expect 0 " metrics=9100( |$)"
printf 'pool = %s\nmetrics = [::1]:9101\n' "$POOL" >"$TMPDIR_TEST/cairnd.conf"
RUN_CMD="$CAIRND" run --config "$TMPDIR_TEST/cairnd.conf" --dry-run
expect 0 " 'metrics=\[::1\]:9101'( |$)"
RUN_CMD="$CAIRND" run --pool "$POOL" --dry-run
[ "$rc" -eq 0 ] && ! grep -q metrics= <<<"$out" || fail "metrics are on by default: $out"
nbdkit_env "$NBDKIT" --dump-plugin "$PLUGIN" | grep -qx cairn_metrics=yes ||
  fail "--dump-plugin does not say cairn_metrics=yes"
# Bad values stop the server before it serves anything.
for bad in 70000 abc 127.0.0.1: :9100 127.0.0.1:-1; do
  RUN_CMD=nbdkit_run run --unix "$SOCK" "$PLUGIN" pool="$POOL" \
    metrics="$bad"
  expect 1 "metrics=$bad: give \[ADDRESS:\]PORT"
done

# ---------------------------------------------------------------- serving
port=$(free_port)
URL="http://127.0.0.1:$port/metrics"
start_plugin control="$CTL" metrics="$port"
for _ in $(seq 100); do curl -sf "$URL" >/dev/null && break; sleep 0.1; done
curl -sf "$URL" >/dev/null || fail "nothing answers at $URL"
[ -S "$CTL" ] || fail "no control socket at $CTL"

# Scrape to $TMPDIR_TEST/$1 and check it with promtool.
scrape () {
  curl -sf -o "$TMPDIR_TEST/$1" -D "$TMPDIR_TEST/$1.headers" "$URL" ||
    fail "curl $URL failed"
  grep -qi '^content-type: text/plain; version=0.0.4' "$TMPDIR_TEST/$1.headers" ||
    fail "not the text format 0.0.4: $(cat "$TMPDIR_TEST/$1.headers")"
  if [ -n "$PROMTOOL" ] && [ -x "$PROMTOOL" ]; then
    "$PROMTOOL" check metrics <"$TMPDIR_TEST/$1" >"$TMPDIR_TEST/promtool.out" 2>&1 ||
      fail "promtool check metrics: $(cat "$TMPDIR_TEST/promtool.out")"
  else
    echo "SKIP (one check): promtool is not installed (Debian's prometheus package)"
  fi
}

# The workload, a known number of requests of known sizes: on v, 5 writes
# of 4 KiB and 2 of 64 KiB, 3 reads of 4 KiB and 1 of 1 MiB, 2 flushes,
# 1 trim of 8 KiB, 1 zero of 16 KiB; then a snapshot v@s1, and on it 4
# reads of 8 KiB; on a new volume w, zeroes of 128 MiB (more than one
# engine call: still one request) and 16 KiB.
nbdsh -u "$(uri v)" -c '
for i in range(5):
    h.pwrite(bytes([i + 1]) * 4096, i * 4096)
for i in range(2):
    h.pwrite(b"\x77" * 65536, (1 << 20) + i * 65536)
for i in range(3):
    h.pread(4096, i * 4096)
h.pread(1 << 20, 0)
h.flush()
h.trim(8192, 8 << 20)
h.zero(16384, 16 << 20)
h.flush()
' || fail "the workload on v failed"
cairn_s snapshot create v@s1 >/dev/null || fail "snapshot create v@s1"
nbdsh -u "$(uri v@s1)" -c '
for i in range(4):
    h.pread(8192, i * 8192)
' || fail "the reads of v@s1 failed"
cairn_s volume create w 256M >/dev/null || fail "volume create w"
nbdsh -u "$(uri w)" -c 'h.zero(128 << 20, 64 << 20); h.zero(16384, 0)' ||
  fail "the zeroes on w failed"

# nbdkit closes handles a moment after their clients have gone.
for _ in $(seq 100); do
  scrape m1
  grep -q '^cairn_export_connections{.*} [1-9]' "$TMPDIR_TEST/m1" || break
  sleep 0.1
done

python3 - "$TMPDIR_TEST/m1" "$(cairn_s stats --json)" "$(cairn_s status --json)" <<'PY' ||
import json, re, sys
text = open(sys.argv[1]).read()
stats, status = json.loads(sys.argv[2]), json.loads(sys.argv[3])
samples, types, helps = {}, {}, set()
line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
for line in text.splitlines():
    if line.startswith("# HELP "):
        helps.add(line.split()[2])
        continue
    if line.startswith("# TYPE "):
        _, _, name, t = line.split()
        types[name] = t
        continue
    m = line_re.match(line)
    assert m, "not a sample line: %r" % line
    labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or "")))
    key = (m.group(1), labels)
    assert key not in samples, "sample twice: %r" % (key,)
    samples[key] = float(m.group(4))
assert set(types) == helps, "families without HELP or TYPE: %r" % (set(types) ^ helps)
for name, _ in samples:
    base = re.sub(r'_(bucket|sum|count)$', '', name)
    assert name in types or (base in types and types[base] == "histogram"), name

def get(name, **labels):
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, "no sample %s%r" % (name, labels)
    return samples[key]

def check(name, want, **labels):
    got = get(name, **labels)
    assert got == want, "%s%r = %r, want %r" % (name, labels, got, want)

assert get("cairn_build_info", version=re.search(r'version="([^"]*)"', text).group(1),
           checksum="sha256",
           checksum_impl=re.search(r'checksum_impl="([^"]*)"', text).group(1)) == 1

want = {
    ("v", None): dict(read=(4, 3 * 4096 + (1 << 20)), write=(7, 5 * 4096 + 2 * 65536),
                      flush=(2, 0), trim=(1, 8192), zero=(1, 16384)),
    ("v", "s1"): dict(read=(4, 4 * 8192), write=(0, 0), flush=(0, 0), trim=(0, 0),
                      zero=(0, 0)),
    ("w", None): dict(read=(0, 0), write=(0, 0), flush=(0, 0), trim=(0, 0),
                      zero=(2, (128 << 20) + 16384)),
}
exports = {(dict(l).get("volume"), dict(l).get("state"))
           for n, l in samples if n == "cairn_export_requests_total"}
assert exports == set(want), "exports: %r" % exports
for (vol, state), ops in want.items():
    lab = dict(volume=vol, **({"state": state} if state else {}))
    for op, (n, nbytes) in ops.items():
        check("cairn_export_requests_total", n, op=op, **lab)
        if op != "flush":
            check("cairn_export_bytes_total", nbytes, op=op, **lab)
        # The histogram: count = requests, buckets cumulative up to +Inf.
        h = "cairn_export_request_duration_seconds"
        check(h + "_count", n, op=op, **lab)
        buckets = sorted((float(dict(l)["le"]), v) for (name, l), v in samples.items()
                         if name == h + "_bucket" and dict(l).get("op") == op
                         and dict(l).get("volume") == vol and dict(l).get("state") == state)
        assert len(buckets) == 20 and buckets[-1][0] == float("inf"), buckets
        assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), buckets
        assert buckets[-1][1] == n, (op, lab, buckets)
        assert (get(h + "_sum", op=op, **lab) > 0) == (n > 0), (op, lab)
    for op in ("cache", "block_status"):
        check("cairn_export_requests_total", 0, op=op, **lab)
    check("cairn_export_errors_total", 0, **lab)
    check("cairn_export_checksum_errors_total", 0, **lab)
    check("cairn_export_connections", 0, **lab)

# The same figures as cairn stats, which counts them once, in the engine.
by_name = {x["name"]: x for x in stats["exports"]}
for name, lab in (("v", dict(volume="v")), ("v@s1", dict(volume="v", state="s1")),
                  ("w", dict(volume="w"))):
    x = by_name[name]
    check("cairn_export_bytes_total", x["bytes_written"], op="write", **lab)
    check("cairn_export_bytes_total", x["bytes_read"], op="read", **lab)
    check("cairn_export_bytes_total", x["bytes_zeroed"], op="zero", **lab)
    check("cairn_export_bytes_total", x["bytes_trimmed"], op="trim", **lab)

# Commits: the two flushes at least, and snapshot and create commit too;
# the histogram counts each one.
commits = get("cairn_commits_total")
assert commits >= 3, commits
check("cairn_commit_duration_seconds_count", commits)
check("cairn_commit_duration_seconds_bucket", commits, le="+Inf")
# Space as cairn status has it.
check("cairn_pool_size_bytes", status["size"])
check("cairn_pool_reserved_bytes", status["reserve"])
assert get("cairn_pool_used_bytes") > 7 * 4096
check("cairn_pool_failed", 0)
check("cairn_damaged_volume_records", 0)
assert get("cairn_cache_hits_total") + get("cairn_cache_misses_total") > 0
PY
  fail "the exposition is not what the workload did; it began: $(head -c 2000 "$TMPDIR_TEST/m1")"

# A renamed volume's series follow it.
cairn_s volume rename w w2 >/dev/null || fail "volume rename w w2"
scrape m2
grep -q '^cairn_export_requests_total{volume="w2",op="zero"} 2$' "$TMPDIR_TEST/m2" ||
  fail "the renamed volume's requests: $(grep w2 "$TMPDIR_TEST/m2")"
! grep -q 'volume="w"' "$TMPDIR_TEST/m2" || fail "the old name is still reported"

# ---------------------------------------------------------------- HTTP errors
code=$(curl -s -o "$TMPDIR_TEST/body" -D "$TMPDIR_TEST/headers" -w '%{http_code}' \
  -X POST --data x "$URL")
[ "$code" = 405 ] || fail "POST /metrics: HTTP $code, expected 405"
grep -qi '^allow: GET, HEAD' "$TMPDIR_TEST/headers" || fail "no Allow header on 405"
grep -q "answers GET /metrics" "$TMPDIR_TEST/body" || fail "405 body: $(cat "$TMPDIR_TEST/body")"
code=$(curl -s -o "$TMPDIR_TEST/body" -w '%{http_code}' -X DELETE "$URL")
[ "$code" = 405 ] || fail "DELETE /metrics: HTTP $code, expected 405"
code=$(curl -s -o "$TMPDIR_TEST/body" -w '%{http_code}' "http://127.0.0.1:$port/")
[ "$code" = 404 ] || fail "GET /: HTTP $code, expected 404"
code=$(curl -s -o "$TMPDIR_TEST/body" -w '%{http_code}' "$URL/x")
[ "$code" = 404 ] || fail "GET /metrics/x: HTTP $code, expected 404"
grep -q "the metrics are at /metrics" "$TMPDIR_TEST/body" || fail "404 body: $(cat "$TMPDIR_TEST/body")"
code=$(curl -s -o /dev/null -w '%{http_code}' -I "$URL")
[ "$code" = 200 ] || fail "HEAD /metrics: HTTP $code, expected 200"
# The server still serves after all that.
scrape m3

# ---------------------------------------------------------------- listen errors
# A second server (its own pool) on the port the first one has: it fails,
# saying why, and the first one goes on.
POOL2="$TMPDIR_TEST/pool2"
"$CAIRN" mkpool "$POOL2" --size 64M >/dev/null || fail "mkpool $POOL2"
# second_server ADDR:PORT: run it with metrics there (it must fail).
second_server () {
  rm -f "$TMPDIR_TEST/nbd2.sock"       # left by the last one that failed
  RUN_CMD=nbdkit_run run --unix "$TMPDIR_TEST/nbd2.sock" "$PLUGIN" \
    pool="$POOL2" metrics="$1"
}
second_server 127.0.0.1:"$port"
[ "$rc" -ne 0 ] || fail "a second server on metrics port $port started"
grep -q "cannot listen on 127.0.0.1 port $port: Address already in use" <<<"$out" ||
  fail "no 'address in use' message: $out"
# An address this host does not have, and one that is no address.
second_server 192.0.2.1:"$port"
[ "$rc" -ne 0 ] || fail "metrics on 192.0.2.1 (not this host's) started"
grep -q "cannot listen on 192.0.2.1 port $port: Cannot assign requested address" <<<"$out" ||
  fail "no message for an address not of this host: $out"
second_server 999.1.2.3:"$port"
[ "$rc" -ne 0 ] || fail "metrics on 999.1.2.3 started"
grep -q "the address '999.1.2.3' is not one this host can listen on" <<<"$out" ||
  fail "no message for a bad address: $out"
curl -sf "$URL" >/dev/null || fail "the first server stopped serving metrics"

stop_plugin
curl -s "$URL" >/dev/null && fail "metrics still served after the server stopped"

# ---------------------------------------------------------------- devices
# A pool of two mirrored devices reports each device and its counters.
POOL="$TMPDIR_TEST/a,$TMPDIR_TEST/b"
"$CAIRN" mkpool "$TMPDIR_TEST/a" "$TMPDIR_TEST/b" --size 64M --data mirror \
  --metadata mirror >/dev/null || fail "mkpool a b"
rm -f "$SOCK"
NBDKIT_OPTS=()
nbdkit_exec "$NBDKIT" --foreground --unix "$SOCK" "$PLUGIN" pool="$TMPDIR_TEST/a" \
  pool="$TMPDIR_TEST/b" metrics="$port" >>"$NBDKIT_LOG" 2>&1 &
NBDKIT_PID=$!
for _ in $(seq 100); do curl -sf "$URL" >/dev/null && break; sleep 0.1; done
scrape m4
for i in 0 1; do
  grep -q "^cairn_device_online{device=\"$i\",uuid=\"[0-9a-f-]\{36\}\",path=\"$TMPDIR_TEST/[ab]\"} 1$" "$TMPDIR_TEST/m4" ||
    fail "device $i is not reported online: $(grep cairn_device "$TMPDIR_TEST/m4")"
  for c in read_errors write_errors checksum_errors repaired; do
    grep -q "^cairn_device_${c}_total{device=\"$i\"} 0$" "$TMPDIR_TEST/m4" ||
      fail "no cairn_device_${c}_total of device $i: $(grep cairn_device "$TMPDIR_TEST/m4")"
  done
done
grep -q '^cairn_pool_degraded 0$' "$TMPDIR_TEST/m4" || fail "the mirror is reported degraded"
stop_plugin
exit 0
