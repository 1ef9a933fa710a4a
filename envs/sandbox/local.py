"""Run untrusted Python in a separate, isolated, limited process (the Python tool's engine).

Each call gets a fresh process and a fresh scratch space, so nothing persists between calls
and a fork of an episode replays tool results exactly. The walls are the operating system's
(:mod:`forkgym.envs.sandbox.isolation`: bubblewrap namespaces, a uid of the call's own, a read-only
view of the interpreter only, seccomp). The limits hold for the call as a whole:

* **memory**: ``memory_mb`` for everything the call's processes hold, its scratch tmpfs
  included, in a cgroup of its own (:mod:`forkgym.envs.sandbox.cgroups`; swap counted or off), and
  ``memory_mb`` of address space per process (``MemoryError`` rather than a kill for one big
  allocation);
* **processes**: ``processes`` tasks (processes and threads) in the cgroup, and as many for
  the call's uid (``RLIMIT_NPROC``; the uid is the call's alone);
* **disk**: none of the host's. The working directory ``/scratch`` (and ``/tmp``) is a tmpfs
  of ``scratch_mb`` inside the sandbox, in the memory budget; files are capped at
  ``output_bytes`` each (``RLIMIT_FSIZE``);
* **CPU**: ``cpus`` CPUs at once for the call's processes together (a quota on the group's
  ``cpu`` controller: one scheduling entity however many processes it forks), and
  ``cpu_seconds`` of CPU time for the whole call (the group's count, read when it could
  first be spent) as well as for each process (``RLIMIT_CPU``, SIGXCPU);
* **time**: a wall-clock limit at which the whole sandbox dies.

Where no cgroup is writable (not root, no delegated cgroup v2) the same budget is kept with
rlimits alone, by dividing it: at most ``fallback_processes`` tasks, each with an equal share
of ``memory_mb`` (less the scratch) as its address space, so their product is the budget; the
env's ``info["sandbox"]`` says which (:func:`containment`). Kernel buffers (pipes, sockets)
are then bounded per descriptor but outside the budget.

stdout and stderr are pipes the host reads while the code runs (at most ``output_bytes`` of
each; past that the pipe is closed and writes fail), never files: nothing of the call is on
the host's disk, and the host never opens, walks or removes a path the code could name.

``isolation="unsafe-local"`` runs the same runner without the OS walls (its audit hook and
per-process limits only, a scratch directory on the host's disk: not a sandbox). Whatever the
code does, :func:`run_python` returns a :class:`SandboxResult`; it never raises for the code's
behaviour.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import cgroups
from . import isolation as iso
from .uid_slots import SlotsBusy, uid_range, uid_slot

__all__ = ["SandboxLimits", "SandboxResult", "containment", "run_python"]

RUNNER = Path(__file__).with_name("runner.py")
# No site-packages, no user site, no script directory on sys.path. Not -I: it would also
# ignore PYTHONHASHSEED, and hash() must not vary between branches (the environment passed
# to the child is built from scratch, so nothing else leaks in). Python 3.10 lacks -P.
_FLAGS = ["-P", "-s", "-S"] if sys.version_info >= (3, 11) else ["-I", "-S"]
# the least address space the runner needs to start a thread and do a little work
MIN_PROCESS_MB = 48
_CHUNK = 1 << 16


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 2
    wall_seconds: float = 5.0
    memory_mb: int = 512  # the whole call: every process and the scratch tmpfs
    output_bytes: int = 1 << 20  # of stdout and of stderr, and of any one file
    shown_chars: int = 2000  # of stdout and of stderr, in the tool message
    processes: int = 64  # tasks (processes and threads) of the call, with a cgroup
    scratch_mb: int = 64  # the tmpfs at /scratch (at most a quarter of memory_mb)
    fallback_processes: int = 4  # tasks of the call where no cgroup is writable
    cpus: float = 1.0  # CPUs the call's processes may use at once, together (a cgroup quota)


@dataclass(frozen=True)
class SandboxResult:
    status: str  # tool_ok | tool_error | tool_timeout
    stdout: str
    stderr: str
    exit_code: int | None
    reason: str  # ok, exception, exit_status, cpu_limit, wall_limit, memory_limit,
    # output_limit, killed, sandbox_unavailable
    seconds: float

    def render(self, shown_chars: int = 2000) -> str:
        """The tool message the model sees."""

        def clip(text: str) -> str:
            return (
                text
                if len(text) <= shown_chars
                else text[:shown_chars] + f"\n... ({len(text) - shown_chars} more characters)"
            )

        parts = []
        if self.stdout:
            parts.append(f"[stdout]\n{clip(self.stdout)}")
        if self.stderr:
            parts.append(f"[stderr]\n{clip(self.stderr)}")
        if self.reason != "ok":
            parts.append(f"[{self.reason.replace('_', ' ')}; exit code {self.exit_code}]")
        return "\n".join(parts) or "[no output]"


@dataclass(frozen=True)
class _Budget:
    """What one call may take, as the kernel will enforce it."""

    group: cgroups.Hierarchy | None  # None: rlimits only
    process_bytes: int  # RLIMIT_AS of each process
    tasks: int  # pids.max / RLIMIT_NPROC
    scratch_bytes: int


def _budget(limits: SandboxLimits) -> _Budget:
    scratch_mb = max(1, min(limits.scratch_mb, limits.memory_mb // 4))
    where = cgroups.hierarchy()
    if where is not None:
        return _Budget(where, limits.memory_mb << 20, limits.processes, scratch_mb << 20)
    left = max(MIN_PROCESS_MB, limits.memory_mb - scratch_mb)
    tasks = max(1, min(limits.fallback_processes, left // MIN_PROCESS_MB))
    return _Budget(None, (left << 20) // tasks, tasks, scratch_mb << 20)


def containment(limits: SandboxLimits, isolation: str) -> dict[str, Any]:
    """What bounds a call here, for the env's ``info``: the isolation, how the memory and
    process limits are kept (a cgroup, or rlimits alone), the figures, and whose uid."""
    if isolation != "bwrap":
        return {
            "isolation": isolation,
            "accounting": "none" if isolation == "remote" else "rlimits per process",
            "note": "not a sandbox: no OS walls"
            if isolation == "unsafe-local"
            else "the remote service's",
        }
    budget = _budget(limits)
    if os.geteuid() == 0:
        first, count = uid_range()
        uid = f"one per concurrent call, from {first}-{first + count - 1}"
    else:
        uid = "this user's, as 65534 in a user namespace of the call's own"
    info: dict[str, Any] = {
        "isolation": "bwrap",
        "accounting": budget.group.describe() if budget.group else "rlimits",
        "memory_mb": limits.memory_mb,
        "process_memory_mb": budget.process_bytes >> 20,
        "tasks": budget.tasks,
        "scratch_mb": budget.scratch_bytes >> 20,
        "uid": uid,
    }
    if budget.group is None:
        info["note"] = (
            f"no writable cgroup ({cgroups.why_not()}): the budget is kept by rlimits alone, "
            f"{budget.tasks} tasks of {budget.process_bytes >> 20} MiB address space each"
        )
    if budget.group is not None and budget.group.cpu:
        info["cpus"] = limits.cpus
    else:
        info["cpus"] = "best-effort: no cpu controller (setsid refused, so no autogroup each)"
    return info


class _Streams:
    """The call's stdin (the code), stdout and stderr pipes, served in one select loop."""

    def __init__(self, code: str, limit: int) -> None:
        self.limit = limit
        self.stdin_r, self.stdin_w = os.pipe()  # (not inherited but by the child's 0, 1, 2)
        self.out_r, self.out_w = os.pipe()
        self.err_r, self.err_w = os.pipe()
        self.pending = memoryview(code.encode("utf-8", errors="surrogatepass"))
        self.data = {self.out_r: bytearray(), self.err_r: bytearray()}
        self.readers = [self.out_r, self.err_r]
        self.children_open = True

    def child_ends(self) -> tuple[int, int, int]:
        return self.stdin_r, self.out_w, self.err_w

    def _close_child_ends(self) -> None:
        if self.children_open:
            for fd in self.child_ends():
                os.close(fd)
            self.children_open = False

    def started(self) -> None:
        """The child has its ends: close ours of them."""
        self._close_child_ends()
        os.set_blocking(self.stdin_w, False)
        if not self.pending:
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self.stdin_w >= 0:
            os.close(self.stdin_w)
            self.stdin_w = -1

    def _read(self, fd: int) -> bool:
        """One read from ``fd``; False when it needs no more (end of file, or full)."""
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return True
        buf = self.data[fd]
        buf += chunk
        if chunk and len(buf) < self.limit:
            return True
        del buf[self.limit :]
        os.close(fd)  # full: the writer's next write fails (EPIPE)
        self.readers.remove(fd)
        return False

    def serve(self, proc: subprocess.Popen, deadline: float, cpu: _CpuWatch | None = None) -> str:
        """Feed stdin and read stdout/stderr until ``proc`` exits (``"exited"``), ``deadline``
        passes (``"wall_limit"``) or the call's processes together have used their CPU time
        (``"cpu_limit"``, read from ``cpu`` when it is due). A pidfd wakes the loop the moment
        it exits (``Popen.wait`` would poll with sleeps that add milliseconds to every call);
        without one, it polls."""
        pidfd = os.pidfd_open(proc.pid) if hasattr(os, "pidfd_open") else None
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    return "wall_limit"
                if cpu is not None and cpu.spent(now):
                    return "cpu_limit"
                remaining = min(deadline, cpu.due if cpu is not None else deadline) - now
                if pidfd is None:
                    if proc.poll() is not None:
                        return "exited"
                    remaining = min(remaining, 0.005)
                writers = [self.stdin_w] if self.stdin_w >= 0 else []
                waits = [*self.readers, *([pidfd] if pidfd is not None else [])]
                readable, writable, _ = select.select(waits, writers, [], max(0.0, remaining))
                if pidfd is not None and pidfd in readable:
                    return "exited"
                for fd in readable:
                    self._read(fd)
                self._feed(writable)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _feed(self, writable: list[int]) -> None:
        if writable:
            try:
                sent = os.write(self.stdin_w, self.pending[:_CHUNK])
            except BrokenPipeError:  # it exited (or was killed) before reading all
                sent = len(self.pending)
            except BlockingIOError:
                sent = 0
            self.pending = self.pending[sent:]
            if not self.pending:
                self._close_stdin()

    def drain(self) -> None:
        """Read what is left: the writers are gone (or, unsandboxed, may linger: stop at an
        empty pipe rather than wait for them)."""
        self._close_stdin()
        for fd in list(self.readers):
            os.set_blocking(fd, False)
            while fd in self.readers:
                try:
                    if not self._read(fd):
                        break
                except BlockingIOError:
                    break
                if not select.select([fd], [], [], 0)[0]:
                    break
        for fd in self.readers:
            os.close(fd)
        self.readers = []

    def text(self, fd: int) -> str:
        return bytes(self.data[fd]).decode("utf-8", errors="replace")

    def close(self) -> None:
        self._close_child_ends()
        self._close_stdin()
        for fd in self.readers:
            os.close(fd)
        self.readers = []


class _CpuWatch:
    """The CPU time of a call's whole group against ``cpu_seconds`` (``RLIMIT_CPU`` counts one
    process: four processes could take four times it). Read only when the budget could first
    be spent: the group uses at most ``cpus`` CPUs at once, so a call that ends sooner than
    ``cpu_seconds / cpus`` is never read at all."""

    def __init__(self, group: cgroups.CallGroup, seconds: float, cpus: float) -> None:
        self.group, self.seconds, self.cpus = group, seconds, cpus
        self.due = time.monotonic() + seconds / cpus

    def spent(self, now: float) -> bool:
        if now < self.due:
            return False
        used = self.group.cpu_seconds()
        if used is None:  # not counted here: the per-process limit alone
            self.due = float("inf")
            return False
        if used >= self.seconds:
            return True
        self.due = now + max(0.01, (self.seconds - used) / self.cpus)
        return False


def _cpu_watch(group: cgroups.CallGroup | None, limits: SandboxLimits) -> _CpuWatch | None:
    if group is None:
        return None
    cpus = group.cpus if group.cpus is not None else float(os.cpu_count() or 1)
    return _CpuWatch(group, limits.cpu_seconds, cpus)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: by parent pid
        found = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1] == str(pid):  # fmt: skip
                        found.append(int(entry.name))
        return found


def _join(group: cgroups.CallGroup, init: int) -> None:
    """Move the sandbox's init, and the runner it has started if it has, into the call's
    group. No model code exists yet (the runner waits for it on stdin, and the init forks
    nothing else), and a fork during the move lands in one group or the other, never
    between: once both are moved, everything the code will start is in the group.

    Not a ``--block-fd`` wait before the runner starts: a move into a cgroup waits for an
    RCU grace period (milliseconds), which the interpreter's start-up now overlaps."""
    group.add(init)
    for child in _children(init):
        group.add(child)


def _read_info(fd: int, timeout: float = 10.0) -> bytes:
    """What bubblewrap writes to ``--info-fd`` once the sandbox's init exists: one JSON
    object (empty if bubblewrap failed first)."""
    out = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            break
        chunk = os.read(fd, 4096)
        out += chunk
        if not chunk or out.rstrip().endswith(b"}"):
            break
    return bytes(out)


def _remove_tree(path: str) -> None:
    """Remove the unsafe mode's scratch directory: ``shutil.rmtree`` (file descriptors, no
    links followed, no chmod), then GNU ``rm`` (no recursion limit) for what it leaves."""
    try:
        shutil.rmtree(path)
    except (OSError, RecursionError):
        with contextlib.suppress(OSError):
            subprocess.run(
                ["rm", "-rf", "--one-file-system", "--", path],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=60,
                check=False,
            )


def _classify(
    code_: int | None, ended: str, streams: _Streams, limit: int, oom: bool
) -> tuple[str, str]:
    out, err = (len(streams.data[fd]) for fd in (streams.out_r, streams.err_r))
    if ended in ("wall_limit", "cpu_limit"):
        return "tool_timeout", ended
    if oom and code_ != 0:
        return "tool_error", "memory_limit"
    if code_ in (-signal.SIGXCPU, -signal.SIGKILL):
        return "tool_timeout", "cpu_limit" if code_ == -signal.SIGXCPU else "killed"
    if code_ == -signal.SIGXFSZ or max(out, err) >= limit:
        return "tool_error", "output_limit"  # Python ignores SIGXFSZ: writes fail
    if code_ != 0:
        return "tool_error", "exception" if code_ == 1 else "exit_status"
    return "tool_ok", "ok"


def _close_quietly(group: cgroups.CallGroup) -> None:
    with contextlib.suppress(OSError):
        group.close()


@functools.cache
def _runner_source() -> bytes:
    return RUNNER.read_bytes()


def _memfd(name: str, data: bytes) -> int:
    """An anonymous file holding ``data``, read from its start (for bubblewrap's fds)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _unavailable(why: str) -> SandboxResult:
    return SandboxResult("tool_error", "", why, None, "sandbox_unavailable", 0.0)


def run_python(
    code: str, limits: SandboxLimits = SandboxLimits(), seed: int = 0, isolation: str = "auto"
) -> SandboxResult:
    """Execute ``code`` with the standard library only; capture its output and its fate.

    ``isolation``: ``auto`` or ``bwrap`` (the OS sandbox; :class:`~forkgym.envs.sandbox.isolation.
    SandboxUnavailable` where this machine cannot build it), or ``unsafe-local``."""
    mode = iso.resolve(isolation)
    if mode == "unsafe-local":
        return _run_unsafe(code, limits, seed)
    budget = _budget(limits)
    with contextlib.ExitStack() as stack:
        try:
            uid = stack.enter_context(uid_slot()) if os.geteuid() == 0 else None
            group = None
            if budget.group is not None:
                group = cgroups.CallGroup(
                    budget.group,
                    limits.memory_mb << 20,
                    budget.tasks + 1,  # and bubblewrap's init
                    name=f"slot-{uid}" if uid is not None else "",
                    cpus=limits.cpus,
                )
                # before the uid is released (LIFO); a group the kernel cannot empty in
                # seconds is left to be reaped when its name is used again
                stack.callback(_close_quietly, group)
        except (SlotsBusy, OSError, ValueError) as exc:
            result = _unavailable(f"the sandbox could not start: {exc}")
        else:
            result = _run_bwrap(code, limits, seed, budget, uid, group)
    return result


def _run_bwrap(
    code: str,
    limits: SandboxLimits,
    seed: int,
    budget: _Budget,
    uid: int | None,
    group: cgroups.CallGroup | None,
) -> SandboxResult:
    # in a user namespace, bubblewrap's init counts towards the call's RLIMIT_NPROC too
    tasks = budget.tasks + (0 if uid is not None else 1)
    numbers = (limits.cpu_seconds, budget.process_bytes, limits.output_bytes, seed, tasks, 1)
    args = [*_FLAGS, "/sandbox/runner.py", *(str(v) for v in numbers)]
    env = {
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "HOME": "/scratch",
        "TMPDIR": "/scratch",
        "PATH": "",
    }
    streams = _Streams(code, limits.output_bytes)
    seccomp_fd = _memfd("forkgym-seccomp", iso.seccomp_program())
    runner_fd = _memfd("forkgym-runner", _runner_source())
    info_r, info_w = os.pipe()
    ours = [info_r]
    theirs = [seccomp_fd, runner_fd, info_w]
    proc = None
    sandbox = None
    ended = "exited"
    start = time.perf_counter()
    try:
        cmd = iso.bwrap_command(
            runner_fd,
            args,
            seccomp_fd,
            env,
            scratch_bytes=budget.scratch_bytes,
            uid=uid,
            info_fd=info_w,
        )
        args_fd = os.memfd_create("forkgym-bwrap-args", os.MFD_CLOEXEC)
        theirs.append(args_fd)
        cmd, options = iso.split_options(cmd, args_fd)
        os.write(args_fd, options)
        os.lseek(args_fd, 0, os.SEEK_SET)
        stdin, stdout, stderr = streams.child_ends()
        proc = subprocess.Popen(
            cmd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd="/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            start_new_session=True,
            close_fds=True,
            pass_fds=tuple(theirs),
        )
        streams.started()
        for fd in theirs:
            os.close(fd)
        theirs = []
        sandbox = iso.child_pid(_read_info(info_r))  # reported at once
        if group is not None and sandbox is not None:
            try:
                _join(group, sandbox)
            except OSError as exc:  # no code was sent: it must not run outside the group
                joined = f"the sandbox could not join its cgroup: {exc}"
                return _unavailable(joined)
        deadline = time.monotonic() + limits.wall_seconds
        ended = streams.serve(proc, deadline, _cpu_watch(group, limits))
    finally:
        if group is not None:
            with contextlib.suppress(OSError):
                group.kill()
        if proc is not None:
            # the session (and with bubblewrap gone, its PID namespace: everything the code
            # started, whatever session it moved to)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        iso.wait_for_sandbox(sandbox)  # the sandbox is gone before we read or return
        for fd in [*ours, *theirs]:
            os.close(fd)
        if proc is not None:
            streams.drain()
        streams.close()
    seconds = time.perf_counter() - start
    code_ = proc.returncode
    if code_ is not None and 128 < code_ < 128 + 65:
        code_ = -(code_ - 128)  # bubblewrap reports a child killed by signal N as 128 + N
    oom = group is not None and group.oom_kills() > 0
    status, reason = _classify(code_, ended, streams, limits.output_bytes, oom)
    return SandboxResult(
        status, streams.text(streams.out_r), streams.text(streams.err_r), code_, reason, seconds
    )


def _run_unsafe(code: str, limits: SandboxLimits, seed: int) -> SandboxResult:
    numbers = (limits.cpu_seconds, limits.memory_mb << 20, limits.output_bytes, seed, 0, 0)
    scratch = tempfile.mkdtemp(prefix="forkgym-py-")
    env = {
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "HOME": scratch,
        "TMPDIR": scratch,
        "PATH": "",
    }
    streams = _Streams(code, limits.output_bytes)
    proc = None
    ended = "exited"
    start = time.perf_counter()
    try:
        stdin, stdout, stderr = streams.child_ends()
        proc = subprocess.Popen(
            [sys.executable, *_FLAGS, str(RUNNER), *(str(v) for v in numbers)],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=scratch,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        streams.started()
        ended = streams.serve(proc, time.monotonic() + limits.wall_seconds)
    finally:
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            streams.drain()
        streams.close()
        _remove_tree(scratch)
    seconds = time.perf_counter() - start
    status, reason = _classify(proc.returncode, ended, streams, limits.output_bytes, False)
    return SandboxResult(
        status,
        streams.text(streams.out_r),
        streams.text(streams.err_r),
        proc.returncode,
        reason,
        seconds,
    )
