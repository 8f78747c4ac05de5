"""bench/run's second suite: operations against volume size, side by side.

For every volume size, repetition and backend (backends alternate, as in
the fio suite), one volume goes through one life:

  1. a new volume, served; prefilled with one sequential pass of 1 MiB
     writes and a flush (fill-mib-s);
  2. snapshot s1 (snap-create-ms, every snapshot of the volume averaged);
  3. for each change size C in turn: C random distinct 4 KiB writes and a
     flush, then the next snapshot (so s1->s2 holds exactly C1 changed
     blocks, s2->s3 exactly C2, ...);
  4. nbdcopy of the newest snapshot (Cairn: its export VOL@sN; peers: the
     live volume, which holds the same data) to null: (copy-mib-s);
  5. random 4 KiB writes (queue depth 32) over the whole volume, capped by a
     time, then a flush: write amplification (server wchar and write_bytes
     from /proc/PID/io over the bytes fio wrote; for btrfs also the loop
     device's sectors written, after a filesystem sync) and the server's
     VmHWM;
  6. a crash: random writes again, kill -9 of the server after 1.5 s, the
     time from restarting it until it answers and a 1 MiB read succeeds
     (crash-open-ms);
  7. the server stopped: diff and incremental send between consecutive
     snapshots (Cairn offline on the stopped pool; btrfs `send --no-data -p`
     and `send -p`), stream size over changed data, full send of the newest
     snapshot to /dev/null, and fsck (Cairn `cairn fsck`, qcow2 `qemu-img
     check`, btrfs `btrfs check --readonly` after unmounting).

The harness module (bench/run) is passed in as `h`: its backends, Server,
fio and formatting helpers are reused, nothing is duplicated here.
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
BLOCK = 4 * KiB

# key, unit, better, meaning.  Keys that end in -C are per change size.
METRICS = [
    ("fill-mib-s", "MiB/s", "higher", "sequential prefill of the whole volume (1 MiB, qd8, with the flush)"),
    ("snap-create-ms", "ms", "lower", "one snapshot of the fully written volume (mean over the volume's snapshots)"),
    ("copy-mib-s", "MiB/s", "higher", "nbdcopy of the volume (Cairn: its newest snapshot's export) to null:"),
    ("fullsend-mib-s", "MiB/s", "higher", "full send of the newest snapshot to /dev/null, volume bytes per second"),
    ("fullsend-overhead-pct", "%", "lower", "full stream size over the (fully written) volume size, minus 100%"),
    ("wa-syscall", "x", "lower", "write amplification: bytes the server passed to write calls (wchar, /proc/PID/io) / bytes written by fio"),
    ("wa-proc", "x", "lower", "write amplification: server write_bytes (/proc/PID/io: page-cache folios it dirtied) / bytes written by fio"),
    ("wa-dev", "x", "lower", "write amplification: loop device bytes written / bytes written by fio (btrfs only)"),
    ("hwm-mib", "MiB", "lower", "server VmHWM after the random writes"),
    ("crash-open-ms", "ms", "lower", "kill -9 during writes: restart until it answers and a 1 MiB read succeeds"),
    ("fsck-ms", "ms", "lower", "fsck of the stopped pool/image/filesystem"),
    ("fsck-clean", "0/1", "higher", "fsck found no problem (after the crash)"),
    ("pool-used-mib", "MiB", "lower", "space the pool/image/filesystem uses at fsck time"),
    ("diff-ms", "ms", "lower", "diff between consecutive snapshots (btrfs: send --no-data -p)"),
    ("isend-ms", "ms", "lower", "incremental send between consecutive snapshots to a file"),
    ("isend-overhead-pct", "%", "lower", "incremental stream bytes over changed bytes, minus 100%"),
    ("diff-mismatch", "0/1", "lower", "1 when Cairn's diff did not find exactly the changed bytes (shown only then)"),
]
UNIT = {m[0]: m[1] for m in METRICS}
BETTER = {m[0]: m[2] for m in METRICS}
MEANING = {m[0]: m[3] for m in METRICS}
PER_CHANGE = ("diff-ms", "isend-ms", "isend-overhead-pct", "diff-mismatch")


def try_import_nbd():
    """libnbd's Python binding, from the system's dist-packages if the
    running interpreter does not see it (pyenv and the like)."""
    try:
        import nbd
        return nbd
    except ImportError:
        pass
    for d in ("/usr/lib/python3/dist-packages",):
        if os.path.isdir(d) and d not in sys.path:
            sys.path.append(d)
    try:
        import nbd
        return nbd
    except ImportError:
        return None


NBD = try_import_nbd()


def elapsed(fn):
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def io_counters(pid):
    """/proc/PID/io as a dict (wchar, write_bytes, ...), {} if unreadable."""
    try:
        with open("/proc/%d/io" % pid) as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except (OSError, ValueError):
        return {}


def loop_sectors_written(loop):
    """Sectors (512 bytes) written to a block device, from /sys/block/X/stat."""
    try:
        with open("/sys/block/%s/stat" % os.path.basename(loop)) as f:
            return int(f.read().split()[6])
    except (OSError, IndexError, ValueError):
        return None


def readable(uri, export, sock):
    """One attempt: connect, read 1 MiB at offset 0.  True on success."""
    if NBD is None:
        r = subprocess.run(["nbdinfo", "--size", uri], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        return r.returncode == 0
    h = NBD.NBD()
    try:
        h.set_export_name(export)
        h.connect_unix(sock)
        h.pread(MiB, 0)
        h.shutdown()
        return True
    except NBD.Error:
        return False
    finally:
        del h


def restart_timed(server, timeout=120):
    """Start SERVER's command again; seconds until it serves a 1 MiB read."""
    if os.path.exists(server.sock):
        os.unlink(server.sock)
    logf = open(server.logpath, "a")
    t = time.monotonic()
    server.proc = subprocess.Popen(server.cmd, stdout=logf, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    logf.close()
    while time.monotonic() - t < timeout:
        if server.proc.poll() is not None:
            raise RuntimeError("%s exited with %d after the crash:\n%s"
                               % (server.cmd[0], server.proc.returncode, server.log_tail()))
        if os.path.exists(server.sock) and readable(server.uri, server.export, server.sock):
            return time.monotonic() - t
        time.sleep(0.005)
    raise RuntimeError("%s did not serve a read %ds after the crash:\n%s"
                       % (server.cmd[0], timeout, server.log_tail()))


def crash(h, server, size, wd):
    """Random writes, kill -9 of the server after 1.5 s, restart: seconds
    until the restarted server answers a read."""
    fio = subprocess.Popen(
        ["fio", "--name=crash", "--ioengine=nbd", "--uri=" + server.uri,
         "--rw=randwrite", "--bs=4k", "--iodepth=32", "--size=%d" % size,
         "--time_based", "--runtime=30", "--randseed=77", "--output-format=json",
         "--output=" + os.path.join(wd, "crash-fio.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        if fio.poll() is not None:
            raise RuntimeError("fio for the crash test ended early (exit %d)" % fio.returncode)
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait()
        server.proc = None
        fio.wait(30)
    finally:
        if fio.poll() is None:
            fio.kill()
            fio.wait()
    return restart_timed(server)


def randwrite(h, uri, size, wd, name, seed, nblocks=None, runtime=None):
    """Random distinct 4 KiB writes over the whole volume at queue depth 32,
    NBLOCKS of them (exact) or for RUNTIME seconds, then a flush.  Returns
    the bytes fio wrote."""
    args = ["--rw=randwrite", "--bs=4k", "--iodepth=32", "--size=%d" % size,
            "--randseed=%d" % seed, "--end_fsync=1"]
    if nblocks:
        args.append("--io_size=%d" % (nblocks * BLOCK))
    if runtime:
        args.append("--runtime=%d" % runtime)
    job = h.fio(uri, name, os.path.join(wd, name + ".json"), args)
    written = job["write"]["io_bytes"]
    if nblocks and written != nblocks * BLOCK:
        raise RuntimeError("fio %s wrote %d bytes, expected %d" % (name, written, nblocks * BLOCK))
    return written


def timed(cmd, out=subprocess.DEVNULL):
    """Run CMD; (seconds, CompletedProcess).  Raises on failure."""
    t = time.monotonic()
    r = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE)
    took = time.monotonic() - t
    if r.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s"
                           % (" ".join(os.path.basename(c) if i == 0 else c
                                       for i, c in enumerate(cmd)), r.returncode,
                              r.stderr.decode(errors="replace").strip()[-300:]))
    return took, r


def timed_to_file(cmd, path):
    """Run CMD with its standard output in PATH; (seconds, bytes written)."""
    with open(path, "wb") as f:
        took, _ = timed(cmd, f)
    return took, os.path.getsize(path)


def timed_check(cmd):
    """A checker: (seconds, exit status, last line of its output)."""
    t = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = r.stdout.strip().splitlines()
    return time.monotonic() - t, r.returncode, lines[-1] if lines else ""


class Figures(dict):
    """The figures of one volume, and the steps that failed.  A failed step
    costs its own figures only: attempt() logs and records the error."""

    def __init__(self, h, tag):
        super().__init__()
        self.h, self.tag, self.errors = h, tag, {}

    def attempt(self, what, fn):
        try:
            fn()
        except RuntimeError as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
            self.errors[what] = msg
            self.h.log("%s %s FAILED: %s" % (self.tag, what, msg))


def one_volume(h, b, size, changes, wa_runtime, wd, rep, tag):
    """The whole life of one volume on backend B; returns its Figures:
    {metric: value}, per-change metrics keyed (metric, C)."""
    got = Figures(h, tag)
    b.setup(wd, size)
    t = elapsed(lambda: h.prefill(b.server.uri, size, os.path.join(wd, "prefill.json")))
    got["fill-mib-s"] = size / MiB / t
    snap_times, names = [], []
    if b.snapshots:
        names.append("s1")
        snap_times.append(b.snapshot("s1"))
    for i, c in enumerate(changes):
        randwrite(h, b.server.uri, size, wd, "change%d" % (i + 1), 500 + i, nblocks=c)
        if b.snapshots:
            names.append("s%d" % (i + 2))
            snap_times.append(b.snapshot(names[-1]))
    if snap_times:
        got["snap-create-ms"] = 1000 * sum(snap_times) / len(snap_times)

    # Copy out what the newest snapshot holds (peers: the live volume, the same data).
    src = b.server.uri
    if b.name == "cairn":
        src = "nbd+unix:///%s@%s?socket=%s" % (b.vol, names[-1], b.server.sock)

    def copy():
        got["copy-mib-s"] = size / MiB / timed(["nbdcopy", src, "null:"])[0]
    got.attempt("nbdcopy", copy)
    got.attempt("write amplification", lambda: amplification(h, b, size, wd, rep, wa_runtime, got))

    def crashed():
        got["crash-open-ms"] = 1000 * crash(h, b.server, size, wd)
    got.attempt("crash", crashed)
    b.server.stop()

    offline = {"cairn": cairn_offline, "btrfs": btrfs_offline, "qcow2": qcow2_offline}
    if b.name in offline:
        offline[b.name](h, b, size, changes, names, wd, got)
    return got


def amplification(h, b, size, wd, rep, wa_runtime, got):
    """Random writes: server write_bytes (and btrfs's loop device) over the
    bytes fio wrote; the server's VmHWM after them."""
    pid = b.server.pid
    io0 = io_counters(pid)
    dev0 = loop_sectors_written(b.loop) if b.name == "btrfs" else None
    written = randwrite(h, b.server.uri, size, wd, "wa", 900 + rep, runtime=wa_runtime)
    io1 = io_counters(pid)
    for key, metric in (("wchar", "wa-syscall"), ("write_bytes", "wa-proc")):
        if key in io0 and key in io1 and written:
            got[metric] = (io1[key] - io0[key]) / written
    if dev0 is not None:
        h.run(["btrfs", "filesystem", "sync", b.mnt])
        dev1 = loop_sectors_written(b.loop)
        if dev1 is not None and written:
            got["wa-dev"] = (dev1 - dev0) * 512 / written
    _, hwm = h.proc_mem(pid)
    if hwm:
        got["hwm-mib"] = hwm / 1024


def incremental(got, c, diff_cmd, send_cmd, path):
    """Diff and incremental send of one change of C blocks."""
    def diff():
        got[("diff-ms", c)] = 1000 * timed(diff_cmd)[0]

    def send():
        t, n = timed_to_file(send_cmd, path)
        os.unlink(path)
        got[("isend-ms", c)] = 1000 * t
        got[("isend-overhead-pct", c)] = 100.0 * (n / (c * BLOCK) - 1)
    got.attempt("diff of %d blocks" % c, diff)
    got.attempt("incremental send of %d blocks" % c, send)


def cairn_offline(h, b, size, changes, names, wd, got):
    """Cairn on the stopped pool: diff, incremental and full send, fsck."""
    pool, vol = b.pool, b.vol
    for i, c in enumerate(changes):
        frm, to = "%s@%s" % (vol, names[i]), "%s@%s" % (vol, names[i + 1])
        incremental(got, c, [h.CAIRN, "--pool", pool, "diff", frm, to, "--json"],
                    [h.CAIRN, "--pool", pool, "send", to, "--from", names[i]],
                    os.path.join(wd, "isend.stream"))

        def check_diff():
            _, r = timed([h.CAIRN, "--pool", pool, "diff", frm, to, "--json"], subprocess.PIPE)
            runs = json.loads(r.stdout).get("runs", [])
            data = sum(x["length"] for x in runs if x.get("type") == "data")
            if data != c * BLOCK:
                got[("diff-mismatch", c)] = 1
                raise RuntimeError("diff %s %s found %d bytes of data, fio changed %d"
                                   % (frm, to, data, c * BLOCK))
        got.attempt("diff check of %d blocks" % c, check_diff)
    last = "%s@%s" % (vol, names[-1])

    def full():
        got["fullsend-mib-s"] = size / MiB / timed_to_file(
            [h.CAIRN, "--pool", pool, "send", last], os.devnull)[0]
        _, r = timed([h.CAIRN, "--pool", pool, "send", last, "--dry-run"], subprocess.PIPE)
        n = dry_run_bytes(r.stdout.decode())
        if n:
            got["fullsend-overhead-pct"] = 100.0 * (n / size - 1)
    got.attempt("full send", full)
    t, rc, line = timed_check([h.CAIRN, "fsck", pool])
    got["fsck-ms"] = 1000 * t
    got["fsck-clean"] = 1 if rc == 0 else 0
    if rc != 0:
        h.log("%s cairn fsck after the crash: %s" % (got.tag, line))

    def info():
        _, r = timed([h.CAIRN, "info", pool, "--json"], subprocess.PIPE)
        got["pool-used-mib"] = json.loads(r.stdout)["used"] / MiB
    got.attempt("cairn info", info)


def btrfs_offline(h, b, size, changes, names, wd, got):
    """btrfs, server stopped: send --no-data -p (its diff), send -p, a
    full send, then btrfs check --readonly on the unmounted filesystem."""
    for i, c in enumerate(changes):
        frm, to = os.path.join(b.mnt, names[i]), os.path.join(b.mnt, names[i + 1])
        incremental(got, c, ["btrfs", "send", "-q", "--no-data", "-p", frm, to, "-f", os.devnull],
                    ["btrfs", "send", "-q", "-p", frm, to], os.path.join(wd, "isend.stream"))

    def full():
        got["fullsend-mib-s"] = size / MiB / timed_to_file(
            ["btrfs", "send", "-q", os.path.join(b.mnt, names[-1])], os.devnull)[0]
    got.attempt("full send", full)
    h.run(["btrfs", "filesystem", "sync", b.mnt])
    got["pool-used-mib"] = shutil.disk_usage(b.mnt).used / MiB
    h.run(["umount", b.mnt])
    b.mounted = False
    t, rc, line = timed_check(["btrfs", "check", "--readonly", b.loop])
    got["fsck-ms"] = 1000 * t
    got["fsck-clean"] = 1 if rc == 0 else 0
    if rc != 0:
        h.log("%s btrfs check: %s" % (got.tag, line))


def qcow2_offline(h, b, size, changes, names, wd, got):
    """qcow2, qemu-nbd stopped: qemu-img check (exit 3 = leaked clusters,
    which a kill -9 leaves and which count as not clean here)."""
    t, rc, line = timed_check(["qemu-img", "check", "-f", "qcow2", b.img])
    got["fsck-ms"] = 1000 * t
    got["fsck-clean"] = 1 if rc == 0 else 0
    if rc != 0:
        h.log("%s qemu-img check exit %d: %s" % (got.tag, rc, line))
    got["pool-used-mib"] = os.stat(b.img).st_blocks * 512 / MiB


def dry_run_bytes(text):
    """The stream size `cairn send --dry-run` prints (first integer that is
    a byte count, or a size with a unit)."""
    import re
    m = re.search(r"(\d+) bytes", text)
    if m:
        return int(m.group(1))
    m = re.search(r"([\d.]+)\s*([KMGT])(?:iB)?\b", text)
    if m:
        return float(m.group(1)) * {"K": KiB, "M": MiB, "G": GiB, "T": 1 << 40}[m.group(2)]
    return None


def run_suite(h, backends, unavailable, sizes, reps, changes, wa_runtime, workdir, keep):
    """Run the suite; return the list of samples
    {rep, size, backend, metric, change, value}."""
    samples = []
    failed = {}
    errors = {}
    for size in sizes:
        for rep in range(1, reps + 1):
            for b in backends:
                if b.name in unavailable or (b.name, size) in failed:
                    continue
                wd = os.path.join(workdir, "ops-%s-%s-%d" % (b.name, h.human_size(size), rep))
                os.mkdir(wd)
                tag = "[ops %-5s rep %d/%d %-5s]" % (h.human_size(size), rep, reps, b.name)
                t0 = time.monotonic()
                try:
                    got = one_volume(h, b, size, changes, wa_runtime, wd, rep, tag)
                except h.NotAvailable as e:
                    unavailable[b.name] = str(e)
                    h.log("%s not available: %s" % (tag, e))
                    continue
                except RuntimeError as e:
                    failed[(b.name, size)] = str(e).splitlines()[0]
                    h.log("%s FAILED, dropping it at this size: %s" % (tag, e))
                    continue
                finally:
                    b.teardown()
                    if keep:
                        h.drop_images(wd)
                    else:
                        shutil.rmtree(wd, ignore_errors=True)
                for k, v in got.items():
                    metric, change = (k if isinstance(k, tuple) else (k, None))
                    samples.append(dict(rep=rep, size=size, backend=b.name, metric=metric,
                                        change=change, value=v))
                for what, why in got.errors.items():
                    errors.setdefault((b.name, what), "%s: %s" % (h.human_size(size), why))
                h.log("%s %.0fs | %s" % (tag, time.monotonic() - t0, " ".join(
                    "%s=%s" % (k if isinstance(k, str) else "%s@%d" % k, h.fmt_num(v))
                    for k, v in got.items())))
    for (name, size), why in failed.items():
        unavailable.setdefault(name, "failed at %s: %s" % (h.human_size(size), why))
    return samples, errors


def summarise(h, samples):
    """{(metric, change, size, backend): summary}"""
    groups = {}
    for s in samples:
        groups.setdefault((s["metric"], s["change"], s["size"], s["backend"]), []).append(s["value"])
    return {k: h.summarise(v) for k, v in groups.items()}


def render(h, summary, names, sizes, changes, unavailable):
    peers = [b for b in names if b != "cairn"]
    head = ["figure", "size", "unit"] + names + \
           (["cairn/" + p for p in peers] if "cairn" in names else [])
    rows = [head]
    for key, unit, better, _ in METRICS:
        for c in (changes if key in PER_CHANGE else [None]):
            label = key if c is None else "%s (%d blocks)" % (key, c)
            for size in sizes:
                cells = {b: summary.get((key, c, size, b)) for b in names}
                if all(v is None for v in cells.values()):
                    continue
                row = [label, h.human_size(size), unit]
                for b in names:
                    row.append(h.fmt_cell(cells[b]) if cells[b] else
                               ("n/a" if b in unavailable else "-"))
                if "cairn" in names:
                    row += ["-" if unit == "0/1" else h.fmt_ratio(cells["cairn"], cells[p])
                            for p in peers]
                rows.append(row)
    lines = ["Operations against volume size (median ±half-range over repetitions; "
             "each figure's direction is in bench/README.md)",
             "ratios cairn/peer of the medians: for MiB/s > 1 means Cairn is faster, "
             "for ms, x, MiB and % < 1 means Cairn is better; '-' = the backend has no such "
             "operation"]
    if len(rows) == 1:
        return "\n".join(lines + ["(no figures)"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[j]) if j < 3 else c.rjust(widths[j])
                               for j, c in enumerate(r)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def targets(h, summary, sizes, changes):
    """The issues' targets on this suite's figures: list of
    (issue, what, figure, target, met or None)."""
    out = []

    def med(key, c, size, b="cairn"):
        s = summary.get((key, c, size, b))
        return s["median"] if s else None

    small, big = min(sizes), max(sizes)
    note = "" if (small, big) == (GiB, 16 * GiB) else \
        " (run sizes %s and %s, not 1G and 16G)" % (h.human_size(small), h.human_size(big))
    c0 = changes[0]
    if len(sizes) > 1:
        a, z = med("isend-ms", c0, small), med("isend-ms", c0, big)
        if a and z:
            out.append(("#7", "incremental send of %d blocks, %s / %s%s"
                        % (c0, h.human_size(big), h.human_size(small), note),
                        "%.2fx" % (z / a), "<= 2x", z / a <= 2))
        a, z = med("snap-create-ms", None, small), med("snap-create-ms", None, big)
        if a and z:
            out.append(("bench-volume", "snapshot create, %s / %s%s"
                        % (h.human_size(big), h.human_size(small), note),
                        "%.2fx" % (z / a), "<= 1.5x", z / a <= 1.5))
        a, z = med("diff-ms", c0, small), med("diff-ms", c0, big)
        if a and z:
            out.append(("bench-volume", "diff of %d blocks, %s / %s%s"
                        % (c0, h.human_size(big), h.human_size(small), note),
                        "%.2fx" % (z / a), "<= 2x", z / a <= 2))
    for c in changes:
        worst = max((med("isend-overhead-pct", c, s) for s in sizes
                     if med("isend-overhead-pct", c, s) is not None), default=None)
        if worst is not None:
            out.append(("#7", "stream overhead over changed data, %d blocks (worst size)" % c,
                        "%.2f%%" % worst, "<= 2%", worst <= 2))
    for s in sizes:
        fs, cp = med("fullsend-mib-s", None, s), med("copy-mib-s", None, s)
        if fs and cp:
            out.append(("#7", "full send / nbdcopy throughput, %s" % h.human_size(s),
                        "%.2fx" % (fs / cp), "(no number given)", None))
    m = med("hwm-mib", None, big)
    if m:
        out.append(("#5", "server VmHWM after random writes, %s volume%s"
                    % (h.human_size(big), "" if big == 16 * GiB else " (not 16G)"),
                    "%.0f MiB" % m, "< 256 MiB", m < 256))
    for s in sizes:
        c = med("fsck-clean", None, s)
        if c is not None:
            out.append(("#5", "fsck clean after kill -9 during writes, %s" % h.human_size(s),
                        "yes" if c == 1 else "NO", "clean", c == 1))
    return out


def write_files(out, samples, summary, names):
    with open(os.path.join(out, "ops-samples.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=["rep", "size", "backend", "metric", "change", "value"])
        wr.writeheader()
        wr.writerows(samples)
    rows = []
    for (metric, change, size, b), s in sorted(summary.items(),
                                               key=lambda kv: tuple(str(x) for x in kv[0])):
        cairn = summary.get((metric, change, size, "cairn"))
        rows.append({"metric": metric, "change_blocks": change, "size": size, "backend": b,
                     "unit": UNIT[metric], "better": BETTER[metric],
                     "n": s["n"], "median": s["median"], "min": s["min"], "max": s["max"],
                     "cairn_over_this": cairn["median"] / s["median"]
                     if cairn and b != "cairn" and s["median"] else None})
    with open(os.path.join(out, "ops-results.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["metric"])
        wr.writeheader()
        wr.writerows(rows)
    return rows


def render_targets(goals):
    """The targets table: issue, what, figure, target, met."""
    if not goals:
        return "Targets: none measured in this run"
    rows = [("issue", "target", "figure", "wanted", "verdict")]
    for issue, what, fig, want, met in goals:
        rows.append((issue, what, fig, want, "-" if met is None else ("met" if met else "MISSED")))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["Targets from the issues (Cairn's figures; quick runs use smaller volumes)"]
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[j]) for j, c in enumerate(r)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
