"""A cgroup per sandboxed call: the kernel's accounting of memory and processes for the call as
a whole, whatever it forks.

rlimits are per process (``RLIMIT_AS``) or per uid across the host (``RLIMIT_NPROC``): N
processes may hold N times the memory limit. A cgroup counts every page its processes touch
(their memory, the tmpfs they write to, kernel memory such as pipe buffers) and every task
(process or thread) they start, and the kernel enforces the sum: past ``memory.max`` it
reclaims, then kills a process of the group (the whole group on cgroup v2); past
``pids.max`` ``fork`` and ``clone`` fail with ``EAGAIN``. Where the ``cpu`` controller can be
had too (v1: the ``cpu`` and ``cpuacct`` hierarchies; v2: ``cpu`` offered to forkgym's group),
the group is one scheduling entity with a CPU quota, and its CPU time is counted as one.

Where forkgym creates groups (decided once per process by :func:`hierarchy`):

* ``FORKGYM_CGROUP=/path``: a cgroup v2 directory given to forkgym (for example a systemd
  unit's with ``Delegate=yes``), which holds no process and whose ``cgroup.controllers`` has
  ``memory`` and ``pids``; forkgym enables them for its children and creates one group per
  call inside it. ``FORKGYM_CGROUP=off``: no cgroups, the rlimit fallback.
* cgroup v2, otherwise: a group ``forkgym-<uid>`` under the nearest group at or above this
  process's own that this process may write to and that already enables ``memory`` and
  ``pids`` for its children (root on a systemd machine: this process's slice; a user: the
  delegated ``user@<uid>.service``). Nothing else is enabled, moved or changed.
* cgroup v1 (as root): ``forkgym`` under the roots of the ``memory`` and ``pids``
  hierarchies.

Only groups forkgym made are written to; a call's group is killed (every process in it) and
removed when the call ends, and one left by a crashed process is reaped before its name is
used again. :func:`hierarchy` returns None where there is no writable cgroup, and
:func:`why_not` says why.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import re
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CallGroup", "Hierarchy", "hierarchy", "why_not"]

_CONTROLLERS = ("memory", "pids")
_CPU = ("cpu", "cpuacct")  # v1's names; cgroup v2 has one "cpu" (and counts CPU time without it)
_PERIOD_US = 100_000
_names = itertools.count()


@dataclass(frozen=True)
class Hierarchy:
    """Where per-call groups go: one directory on cgroup v2, or on cgroup v1 the memory and
    the pids directories (in that order), then the cpu and cpuacct ones where they could be
    had (one directory where the two are mounted together). ``controllers[i]`` names what
    ``roots[i]`` carries."""

    version: int
    roots: tuple[Path, ...]
    controllers: tuple[tuple[str, ...], ...]

    def root(self, controller: str) -> Path | None:
        """The directory whose groups ``controller`` governs (None: no such controller)."""
        for path, names in zip(self.roots, self.controllers, strict=True):
            if controller in names:
                return path
        return None

    @property
    def cpu(self) -> bool:
        """Whether a call's group can be given a CPU quota (the ``cpu`` controller)."""
        return self.root("cpu") is not None

    def describe(self) -> str:
        return f"cgroup v{self.version} ({', '.join(map(str, self.roots))})"


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    with open(path, "rb") as fh:
        return fh.read().decode()


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, filesystem type, super options) of this process's cgroup mounts."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
                found.append((fields[4], rest[0], set(rest[2].split(","))))
    # the system's own mounts first (another mount of a hierarchy elsewhere is not forkgym's)
    return sorted(found, key=lambda m: not m[0].startswith("/sys/fs/cgroup/"))


def _own_group_v2() -> str | None:
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            hid, _, path = line.rstrip("\n").split(":", 2)
            if hid == "0":
                return path
    return None


def _ours(path: Path) -> bool:
    """``path`` is a real directory (not a link) owned by this process's uid."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _make_own(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o755)
    if not _ours(path):
        raise PermissionError(f"{path} exists but is not a directory this user owns")


def _enables(group: Path, controllers: tuple[str, ...]) -> bool:
    try:
        return set(controllers) <= set(_read(group / "cgroup.subtree_control").split())
    except OSError:
        return False


def _v2(mount: Path, explicit: Path | None) -> Path:
    """The directory per-call groups go in, on the v2 hierarchy mounted at ``mount``."""
    if explicit is not None:
        base = explicit
        if not _ours(base) and os.geteuid() != 0:
            raise PermissionError(f"FORKGYM_CGROUP={base} is not a directory this user owns")
    else:
        own = _own_group_v2()
        if own is None:
            raise FileNotFoundError("this process is in no cgroup v2 group")
        group = mount / own.lstrip("/")
        candidates = [group, *group.parents]
        parent = None
        for candidate in candidates:
            if candidate != mount and mount not in candidate.parents:
                break
            # a group with processes in it enables no controllers (only the root may)
            if candidate == group and candidate != mount:
                continue
            if _enables(candidate, _CONTROLLERS) and os.access(candidate, os.W_OK):
                parent = candidate
                break
        if parent is None:
            raise PermissionError(
                "no cgroup v2 group above this process is writable with memory and pids enabled"
            )
        base = parent / f"forkgym-{os.geteuid()}"
        _make_own(base)
    available = set(_read(base / "cgroup.controllers").split())
    if not set(_CONTROLLERS) <= available:
        raise PermissionError(f"{base} cannot have memory and pids (has {sorted(available)})")
    if not _enables(base, _CONTROLLERS):
        _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in _CONTROLLERS))
    if "cpu" in available and not _enables(base, ("cpu",)):
        with contextlib.suppress(OSError):  # optional: the share is then best-effort
            _write(base / "cgroup.subtree_control", "+cpu")
    return base


def _v2_hierarchy(base: Path) -> Hierarchy:
    names = _CONTROLLERS + (("cpu",) if _enables(base, ("cpu",)) else ())
    return Hierarchy(2, (base,), (names,))


def _v1_cpu(mounts: list[tuple[str, str, set[str]]]) -> list[tuple[Path, tuple[str, ...]]]:
    """forkgym's directories under the v1 ``cpu`` and ``cpuacct`` hierarchies (both or none;
    one where they are mounted together)."""
    found: dict[str, Path] = {}
    for point, kind, options in mounts:
        for c in _CPU:
            if kind == "cgroup" and c in options:
                found.setdefault(c, Path(point))
    if set(found) != set(_CPU):
        return []
    dirs: list[tuple[Path, tuple[str, ...]]] = []
    try:
        for c in _CPU:
            if dirs and dirs[0][0].parent == found[c]:  # co-mounted: cpu,cpuacct
                dirs[0] = (dirs[0][0], _CPU)
                continue
            _make_own(found[c] / "forkgym")
            dirs.append((found[c] / "forkgym", (c,)))
    except OSError:
        return []
    return dirs


def _discover() -> tuple[Hierarchy | None, str]:
    setting = os.environ.get("FORKGYM_CGROUP", "").strip()
    if setting.lower() in ("off", "none", "0"):
        return None, "FORKGYM_CGROUP=off"
    if not os.path.exists("/proc/self/mountinfo"):
        return None, "no /proc/self/mountinfo (not Linux)"
    mounts = _mounts()
    problems = []
    unified = [m for m in mounts if m[1] == "cgroup2"]
    if setting:
        path = Path(setting)
        mount = next((Path(m[0]) for m in unified if Path(m[0]) in [path, *path.parents]), None)
        if mount is None:
            return None, f"FORKGYM_CGROUP={setting} is not on a cgroup v2 mount"
        try:
            return _v2_hierarchy(_v2(mount, path)), ""
        except OSError as exc:
            return None, f"FORKGYM_CGROUP={setting}: {exc}"
    for point, _, _ in unified:
        try:
            return _v2_hierarchy(_v2(Path(point), None)), ""
        except OSError as exc:
            problems.append(f"cgroup v2 at {point}: {exc}")
    v1: dict[str, Path] = {}
    for point, kind, options in mounts:  # the first mount of each (the system's, in order)
        for c in _CONTROLLERS:
            if kind == "cgroup" and c in options:
                v1.setdefault(c, Path(point))
    if set(v1) == set(_CONTROLLERS):
        if os.geteuid() != 0:
            problems.append("cgroup v1 memory and pids need root")
        else:
            try:
                roots = []
                for c in _CONTROLLERS:
                    _make_own(v1[c] / "forkgym")
                    roots.append((v1[c] / "forkgym", (c,)))
                roots += _v1_cpu(mounts)
                paths, names = zip(*roots, strict=True)
                return Hierarchy(1, paths, names), ""
            except OSError as exc:
                problems.append(f"cgroup v1: {exc}")
    elif not unified:
        problems.append("no cgroup mount with memory and pids")
    return None, "; ".join(problems) or "no cgroup v2 with memory and pids, no v1 memory and pids"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _reap_orphans(where: Hierarchy) -> None:
    """Remove the groups of forkgym processes that died during a call (``call-<pid>-<n>``)."""
    for root in where.roots:
        for entry in os.scandir(root):
            found = re.fullmatch(r"call-(\d+)-\d+", entry.name)
            if found and entry.is_dir(follow_symlinks=False) and not _alive(int(found[1])):
                _remove(Path(entry.path), where.version == 2)


@functools.cache
def _cached() -> tuple[Hierarchy | None, str]:
    where, why = _discover()
    if where is not None:
        _reap_orphans(where)
    return where, why


def hierarchy() -> Hierarchy | None:
    """Where this process creates per-call groups; None where it may create none."""
    return _cached()[0]


def why_not() -> str:
    """Why :func:`hierarchy` is None ('' where it is not)."""
    return _cached()[1]


def _kill_members(group: Path, v2: bool) -> None:
    """SIGKILL everything in ``group`` (a pidfd each: a recycled pid number is re-checked)."""
    if v2 and (group / "cgroup.kill").exists():
        _write(group / "cgroup.kill", "1")
        return
    for line in _read(group / "cgroup.procs").split():
        pid = int(line)
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if str(pid) in _read(group / "cgroup.procs").split():
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)


def _remove(group: Path, v2: bool, timeout: float = 5.0) -> None:
    """Kill what is in ``group`` and remove it; a group that is already gone is fine."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _kill_members(group, v2)
            os.rmdir(group)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
        time.sleep(0.002)  # members exit: the kernel releases them a moment after SIGKILL


class CallGroup:
    """One call's group, made with its limits; :meth:`add` the sandbox's first process before
    it runs anything, :meth:`close` when the call ends.

    ``cpus``: the CPUs the group's processes may use together (a CFS quota per 100 ms
    period), where the hierarchy has the ``cpu`` controller; None sets none."""

    def __init__(
        self,
        where: Hierarchy,
        memory_bytes: int,
        processes: int,
        name: str = "",
        cpus: float | None = None,
    ) -> None:
        self.where = where
        self.name = name or f"call-{os.getpid()}-{next(_names)}"
        self.dirs = tuple(root / self.name for root in where.roots)
        self.cpus = cpus if where.cpu else None
        try:
            for d in self.dirs:
                _remove(d, where.version == 2)  # a stale group of a crashed process, reaped
                os.mkdir(d, 0o755)
            if where.version == 2:
                self._limit_v2(memory_bytes, processes)
            else:
                self._limit_v1(memory_bytes, processes)
        except BaseException:
            self.close()
            raise

    def _dir(self, controller: str) -> Path:
        root = self.where.root(controller)
        if root is None:
            raise KeyError(controller)
        return root / self.name

    def _limit_v2(self, memory_bytes: int, processes: int) -> None:
        (group,) = self.dirs
        _write(group / "memory.max", str(memory_bytes))  # sockets included: v2 charges them
        if (group / "memory.swap.max").exists():
            _write(group / "memory.swap.max", "0")
        _write(group / "memory.oom.group", "1")  # an out-of-memory kill takes all
        _write(group / "pids.max", str(processes))
        if self.cpus is not None:
            _write(group / "cpu.max", f"{round(self.cpus * _PERIOD_US)} {_PERIOD_US}")

    def _limit_v1(self, memory_bytes: int, processes: int) -> None:
        memory = self._dir("memory")
        _write(memory / "memory.limit_in_bytes", str(memory_bytes))
        if (memory / "memory.memsw.limit_in_bytes").exists():  # memory + swap
            _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))
        else:  # no swap accounting on this kernel: keep the group out of swap
            _write(memory / "memory.swappiness", "0")
        # v1 charges TCP buffers to a group only once this is set (the sandbox refuses
        # AF_INET anyway; this keeps the budget whole if that ever changes)
        with contextlib.suppress(OSError):
            _write(memory / "memory.kmem.tcp.limit_in_bytes", str(memory_bytes))
        _write(self._dir("pids") / "pids.max", str(processes))
        if self.cpus is not None:
            cpu = self._dir("cpu")
            _write(cpu / "cpu.cfs_period_us", str(_PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(round(self.cpus * _PERIOD_US)))

    def add(self, pid: int) -> None:
        """Move process ``pid`` (not yet running the code) into the group."""
        for d in self.dirs:
            _write(d / "cgroup.procs", str(pid))

    def kill(self) -> None:
        """SIGKILL every process in the group."""
        for d in self.dirs:
            with contextlib.suppress(FileNotFoundError):
                _kill_members(d, self.where.version == 2)

    def oom_kills(self) -> int:
        """How many processes of the group the kernel killed for memory."""
        name = "memory.events" if self.where.version == 2 else "memory.oom_control"
        try:
            for line in _read(self._dir("memory") / name).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def cpu_seconds(self) -> float | None:
        """CPU time the group's processes have used together, dead ones included (None where
        the kernel does not count it: v1 without ``cpuacct``)."""
        try:
            if self.where.version == 2:
                for line in _read(self.dirs[0] / "cpu.stat").splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
                return None
            return int(_read(self._dir("cpuacct") / "cpuacct.usage")) / 1e9
        except (OSError, ValueError, KeyError):
            return None

    def peak_memory(self) -> int | None:
        """The most memory the group has held, in bytes (None where the kernel does not say)."""
        name = "memory.peak" if self.where.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int(_read(self._dir("memory") / name))
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        for d in self.dirs:
            _remove(d, self.where.version == 2)
