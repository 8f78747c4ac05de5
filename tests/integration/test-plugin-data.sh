#!/usr/bin/env bash
# Data through the plugin: writes of every alignment and size read back as
# written (checked against a model), zero and trim read back as zeroes,
# requests past the end fail, FUA and flush work, the advertised
# capabilities are the documented ones, and everything survives a restart
# (the pool is committed when nbdkit stops).  A server that forks into the
# background keeps the pool locked.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require_nbdsh

make_pool 512M
testctl create vol1 128M
start_plugin

# The model of the volume lives in a file between the two nbdsh runs.
cat >"$TMPDIR_TEST/data.py" <<'EOF'
import hashlib, os, random, sys
MODEL = os.environ["MODEL"]
SIZE = 128 * 1024 * 1024
rng = random.Random(int(os.environ.get("SEED", "1")))

def check_caps():
    assert h.get_size() == SIZE, h.get_size()
    assert not h.is_read_only()
    for name in ("can_flush", "can_fua", "can_trim", "can_zero",
                 "can_fast_zero", "can_multi_conn", "can_cache"):
        assert getattr(h, name)(), name + " is not advertised"
    assert h.get_block_size(nbd.SIZE_MINIMUM) == 1
    assert h.get_block_size(nbd.SIZE_PREFERRED) == 4096
    assert h.get_block_size(nbd.SIZE_MAXIMUM) == 32 * 1024 * 1024

def compare(model, off, n):
    got = h.pread(n, off)
    if got != bytes(model[off:off + n]):
        bad = next(i for i in range(n) if got[i] != model[off + i])
        sys.exit("mismatch at byte %d (read %d bytes at %d): got %d, want %d"
                 % (off + bad, n, off, got[bad], model[off + bad]))

def compare_all(model):
    step = 32 * 1024 * 1024
    for off in range(0, SIZE, step):
        compare(model, off, step)

def must_fail(what, fn):
    try:
        fn()
    except nbd.Error as e:
        print("%s failed as it should: %s" % (what, e))
        return
    sys.exit(what + " succeeded")

def fill():
    model = bytearray(SIZE)
    compare_all(model)                      # a new volume reads as zeroes
    # Writes: aligned blocks, unaligned bytes, runs across block edges,
    # tiny and 32 MiB (the advertised maximum), some with FUA; zeroes and
    # trims in between, aligned and not.
    sizes = [1, 2, 511, 512, 513, 4095, 4096, 4097, 8192, 12345, 65536,
             65537, 1048576, 1048577 + 3]
    for i in range(400):
        op = rng.random()
        if i % 5 == 0:
            n = 4096 * rng.randint(1, 64)
            off = 4096 * rng.randrange(0, (SIZE - n) // 4096)
        else:
            n = rng.choice(sizes)
            off = rng.randrange(0, SIZE - n)
        if op < 0.7:
            buf = rng.randbytes(n)
            flags = nbd.CMD_FLAG_FUA if i % 17 == 0 else 0
            h.pwrite(buf, off, flags)
            model[off:off + n] = buf
        elif op < 0.85:
            flags = nbd.CMD_FLAG_FAST_ZERO if i % 2 else 0
            h.zero(n, off, flags)
            model[off:off + n] = bytes(n)
        else:
            h.trim(n, off)
            model[off:off + n] = bytes(n)
        if i % 50 == 0:
            compare(model, max(0, off - 5000), min(SIZE - max(0, off - 5000), n + 10000))
        if i % 100 == 99:
            h.flush()
    big = rng.randbytes(32 * 1024 * 1024)
    h.pwrite(big, 40 * 1024 * 1024 + 7, nbd.CMD_FLAG_FUA)
    model[40 * 1024 * 1024 + 7:72 * 1024 * 1024 + 7] = big
    # Zero and trim larger than one engine call (the plugin splits them).
    h.zero(70 * 1024 * 1024, 50 * 1024 * 1024 + 3)
    model[50 * 1024 * 1024 + 3:120 * 1024 * 1024 + 3] = bytes(70 * 1024 * 1024)
    h.pwrite(b"\xaa" * 4096, 60 * 1024 * 1024)
    model[60 * 1024 * 1024:60 * 1024 * 1024 + 4096] = b"\xaa" * 4096
    h.trim(SIZE - 100 * 1024 * 1024, 100 * 1024 * 1024)
    model[100 * 1024 * 1024:] = bytes(SIZE - 100 * 1024 * 1024)
    # The last byte of the volume, and a read of it.
    h.pwrite(b"Z", SIZE - 1)
    model[SIZE - 1] = ord("Z")
    h.cache(1024 * 1024, 0)
    compare_all(model)
    # Past the end: refused by the server (libnbd would refuse them itself
    # without sending them; it is told not to), and nothing changes.
    h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_BOUNDS)
    must_fail("a write past the end", lambda: h.pwrite(b"x", SIZE))
    must_fail("a write across the end", lambda: h.pwrite(b"xy", SIZE - 1))
    must_fail("a read past the end", lambda: h.pread(1, SIZE))
    must_fail("a zero past the end", lambda: h.zero(4096, SIZE - 2048))
    compare(model, SIZE - 4096, 4096)
    # Writes after the last flush, left to the commit at close.
    h.flush()
    h.pwrite(b"after the last flush", 12345)
    model[12345:12345 + 20] = b"after the last flush"
    with open(MODEL, "wb") as f:
        f.write(model)

def verify():
    with open(MODEL, "rb") as f:
        model = f.read()
    compare_all(model)

check_caps()
if os.environ["MODE"] == "fill":
    fill()
else:
    verify()
print("data", os.environ["MODE"], "ok")
EOF
export MODEL="$TMPDIR_TEST/model"
run_data () {
  MODE=$1 nbdsh -u "$(uri vol1)" -c "exec(open('$TMPDIR_TEST/data.py').read())"
}
run_data fill || fail "writing and reading vol1"

# Sub-block writes in parallel: four connections, each with many requests
# in flight, write the eight 512-byte sectors of the same 4 KiB blocks (of
# a region the model does not use, kept apart below).  The engine must
# merge them (read-modify-write) without losing any.
nbdsh -c "
import hashlib
base = 126 * 1024 * 1024
hs = [nbd.NBD() for _ in range(4)]
for x in hs:
    x.connect_uri('$(uri vol1)')
def sector(b, s):
    return hashlib.sha256(b'%d.%d' % (b, s)).digest() * 16
for rnd in range(2):
    for b in range(256):
        for s in range(8):
            x = hs[(b + s + rnd) % 4]
            x.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(sector(b + rnd, s))),
                         base + b * 4096 + s * 512)
    for x in hs:
        while x.aio_in_flight() > 0:
            x.poll(-1)
    for b in range(256):
        got = hs[0].pread(4096, base + b * 4096)
        want = b''.join(sector(b + rnd, s) for s in range(8))
        assert got == want, 'round %d block %d lost a sector' % (rnd, b)
# Leave the region as the model has it: zeroes.
hs[0].zero(1024 * 1024, base)
print('parallel sub-block writes ok')
" || fail "parallel sub-block writes"

# Stop (the pool commits at close) and start again: the data is there.
stop_plugin
start_plugin
run_data verify || fail "vol1 after a restart"
stop_plugin

# A daemonised nbdkit (it forks; the child serves) still holds the pool's
# lock: a second server and fsck are refused while it runs.
rm -f "$SOCK"
nbdkit_env "$NBDKIT" --unix "$SOCK" --pidfile "$TMPDIR_TEST/nbdkit.pid" \
  "$PLUGIN" pool="$POOL" >>"$NBDKIT_LOG" 2>&1 || fail "nbdkit did not start in the background"
for _ in $(seq 100); do [ -s "$TMPDIR_TEST/nbdkit.pid" ] && break; sleep 0.1; done
NBDKIT_PID=$(cat "$TMPDIR_TEST/nbdkit.pid")
if err=$(nbdkit_env "$NBDKIT" --run true -U - "$PLUGIN" pool="$POOL" 2>&1); then
  fail "a second nbdkit opened a pool in use"
fi
echo "second server: $err"
grep -qiE "busy|in use|locked" <<<"$err" || fail "unhelpful message for a pool in use: $err"
run_data verify || fail "vol1 through the daemonised server"
kill "$NBDKIT_PID"
for _ in $(seq 100); do kill -0 "$NBDKIT_PID" 2>/dev/null || break; sleep 0.1; done
NBDKIT_PID=
"$CAIRN" fsck "$POOL" || fail "fsck after the servers stopped"

# A full pool: the writer gets ENOSPC (not EIO), what was written before
# reads back, a trim makes room again, and the pool stays consistent.
rm -f "$POOL"
make_pool 16M
testctl create thin 64M
start_plugin
nbdsh -u "$(uri thin)" -c '
import hashlib
def block(i):
    return hashlib.sha256(b"%d" % i).digest() * 32768      # 1 MiB
written = 0
try:
    for i in range(64):
        h.pwrite(block(i), i << 20)
        written = i + 1
    raise SystemExit("64 MiB fit in a 16 MiB pool")
except nbd.Error as e:
    print("after %d MiB: %s" % (written, e))
    assert e.errno == "ENOSPC", e.errno
assert written >= 4, written
h.flush()
for i in range(written):
    assert h.pread(1 << 20, i << 20) == block(i), i
# Trimming frees space once the trim is committed: writing works again.
h.trim(4 << 20, 0)
h.flush()
for i in range(32, 35):
    h.pwrite(block(i), i << 20)
for i in range(4, written):
    assert h.pread(1 << 20, i << 20) == block(i), i
for i in range(32, 35):
    assert h.pread(1 << 20, i << 20) == block(i), i
' || fail "filling a pool"
stop_plugin
"$CAIRN" fsck "$POOL" || fail "fsck after filling the pool"
echo PASS
