"""Memory cgroups for bench/run: one per server, so that the page cache a
server causes is charged to it, limited when a profile asks ("larger than
memory"), and dropped on its own before a cold read.

A server joins its group in the child between fork and exec (join_fn), so
everything it allocates and every page it reads or writes is charged there
from its first instruction.  cgroup v1 (a "memory" hierarchy) and v2 (the
unified hierarchy with the memory controller) are both handled; the group
is made below the cgroup bench/run itself runs in, so that whatever limits
the machine puts on bench/run still hold for its servers.

Dropping a group's cache: v1 writes memory.force_empty (the kernel reclaims
every page of the group it can: clean page cache, written-back dirty
pages; anonymous memory stays, as there is no swap), v2 writes
memory.reclaim.  Neither touches other processes' caches, unlike
/proc/sys/vm/drop_caches.  Python 3 standard library only.
"""

import os

MiB = 1 << 20


class CgroupError(Exception):
    """The machine cannot give a server a memory cgroup; says why."""


def _own_v1():
    """The v1 memory hierarchy's mount point and bench/run's group in it."""
    root = "/sys/fs/cgroup/memory"
    if not os.path.exists(os.path.join(root, "memory.limit_in_bytes")):
        return None
    rel = "/"
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if "memory" in ctrls.split(","):
                rel = path
    return root, rel


def _own_v2():
    """The v2 hierarchy's mount point and bench/run's group in it, when it
    has the memory controller."""
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        ctrl = os.path.join(root, "cgroup.controllers")
        try:
            with open(ctrl) as f:
                if "memory" not in f.read().split():
                    continue
        except OSError:
            continue
        rel = "/"
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    rel = line.rstrip("\n")[3:]
        return root, rel
    return None


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _read_int(path):
    with open(path) as f:
        return int(f.read().split()[0])


class MemCgroup:
    """A memory cgroup of its own for one server: limit is bytes or None
    (no limit: the group only accounts, and can drop its own cache)."""

    def __init__(self, name, limit=None):
        self.limit, self.path = limit, None
        if os.geteuid() != 0:
            raise CgroupError("memory cgroups need root")
        found = _own_v1()
        self.version = 1
        if found is None:
            found, self.version = _own_v2(), 2
        if found is None:
            raise CgroupError("no cgroup v1 memory hierarchy and no v2 memory controller")
        root, rel = found
        parent = os.path.join(root, rel.lstrip("/"))
        if self.version == 2:
            # The memory controller must be on for the parent's children.
            ctl = os.path.join(parent, "cgroup.subtree_control")
            try:
                with open(ctl) as f:
                    on = "memory" in f.read().split()
                if not on:
                    _write(ctl, "+memory")
            except OSError as e:
                raise CgroupError("cannot enable the memory controller in %s: %s"
                                  % (parent, e))
        path = os.path.join(parent, name)
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        except OSError as e:
            raise CgroupError("cannot make %s: %s" % (path, e))
        self.path = path
        try:
            if limit is not None:
                _write(self._file("memory.limit_in_bytes", "memory.max"), str(limit))
        except OSError as e:
            self.remove()
            raise CgroupError("cannot limit %s to %d bytes: %s" % (path, limit, e))

    def _file(self, v1, v2):
        return os.path.join(self.path, v1 if self.version == 1 else v2)

    def join_fn(self):
        """A preexec_fn for subprocess.Popen: the child joins the group
        before it executes the server."""
        procs = os.path.join(self.path, "cgroup.procs")

        def join():
            _write(procs, "0")   # "0": the writing process itself
        return join

    def _number(self, v1, v2):
        """The number in the group's file V1 (cgroup v1) or V2, or None."""
        try:
            return _read_int(self._file(v1, v2))
        except OSError:
            return None

    def usage(self):
        """Bytes charged to the group now (page cache included)."""
        return self._number("memory.usage_in_bytes", "memory.current")

    def cache(self):
        """Bytes of page cache charged to the group now."""
        key = "cache" if self.version == 1 else "file"
        try:
            with open(self._file("memory.stat", "memory.stat")) as f:
                for line in f:
                    k, v = line.split()[:2]
                    if k == key:
                        return int(v)
        except OSError:
            pass
        return None

    def peak(self):
        """The most bytes ever charged to the group (v2: since 5.19)."""
        return self._number("memory.max_usage_in_bytes", "memory.peak")

    def oom_kills(self):
        """How many processes the kernel killed for want of memory in the
        group (None where it does not say)."""
        name = self._file("memory.oom_control", "memory.events")
        try:
            with open(name) as f:
                for line in f:
                    k, v = line.split()[:2]
                    if k == "oom_kill":
                        return int(v)
        except OSError:
            pass
        return None

    def drop_cache(self):
        """Reclaim the group's page cache (its dirty pages are written back
        first); return the bytes of cache left."""
        if self.version == 1:
            _write(self._file("memory.force_empty", None), "0")
        else:
            cur = self.usage() or 0
            try:
                _write(self._file(None, "memory.reclaim"), str(max(cur, MiB)))
            except OSError:
                pass   # EAGAIN: reclaimed less than asked (anonymous memory)
        return self.cache()

    def remove(self):
        """Remove the group; its processes must have exited."""
        if self.path is None:
            return
        try:
            os.rmdir(self.path)
        except OSError:
            pass
        self.path = None
