"""Run untrusted Python in a separate, isolated, limited process (the Python tool's engine).

Each call gets a fresh process and a fresh scratch directory, so nothing persists between
calls and a fork of an episode replays tool results exactly. The walls are the operating
system's (:mod:`forkgym.envs.isolation`: bubblewrap namespaces, an unprivileged uid, a
read-only view of the interpreter only, seccomp); the limits are CPU seconds (then SIGXCPU),
address space (``MemoryError``), bytes written to any file including the captured
stdout/stderr (then SIGXFSZ), processes, and a wall-clock limit enforced here by killing the
whole sandbox. ``isolation="unsafe-local"`` runs the same runner without the OS walls (its
audit hook and limits only: not a sandbox). Whatever the code does, :func:`run_python`
returns a :class:`SandboxResult`; it never raises for the code's behaviour.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import isolation as iso

__all__ = ["SandboxLimits", "SandboxResult", "run_python"]

RUNNER = Path(__file__).with_name("sandbox_runner.py")
# No site-packages, no user site, no script directory on sys.path. Not -I: it would also
# ignore PYTHONHASHSEED, and hash() must not vary between branches (the environment passed
# to the child is built from scratch, so nothing else leaks in). Python 3.10 lacks -P.
_FLAGS = ["-P", "-s", "-S"] if sys.version_info >= (3, 11) else ["-I", "-S"]


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 2
    wall_seconds: float = 5.0
    memory_mb: int = 512
    output_bytes: int = 1 << 20  # per file, stdout and stderr included
    shown_chars: int = 2000  # of stdout and of stderr, in the tool message
    processes: int = 64  # RLIMIT_NPROC of the sandbox's uid (OS isolation as root only)


@dataclass(frozen=True)
class SandboxResult:
    status: str  # tool_ok | tool_error | tool_timeout
    stdout: str
    stderr: str
    exit_code: int | None
    reason: str  # ok, exception, cpu_limit, wall_limit, output_limit, killed
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


def _read(path: Path, limit: int) -> str:
    with path.open("rb") as fh:
        return fh.read(limit).decode("utf-8", errors="replace")


def _send_and_wait(proc: subprocess.Popen, code: str, timeout: float) -> bool:
    """Feed the code, then wait for exit; False on timeout.

    ``Popen.wait(timeout=...)`` polls with sleeps that add tens of milliseconds to every call;
    a pidfd becomes readable the moment the process exits.
    """
    deadline = time.monotonic() + timeout
    try:
        proc.stdin.write(code.encode("utf-8", errors="surrogatepass"))  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]
    except BrokenPipeError:  # it exited (or was killed) before reading everything
        pass
    remaining = max(0.0, deadline - time.monotonic())
    if hasattr(os, "pidfd_open"):
        fd = os.pidfd_open(proc.pid)
        try:
            ready, _, _ = select.select([fd], [], [], remaining)
        finally:
            os.close(fd)
        return bool(ready)
    try:
        proc.wait(timeout=remaining)
        return True
    except subprocess.TimeoutExpired:
        return False


def run_python(
    code: str, limits: SandboxLimits = SandboxLimits(), seed: int = 0, isolation: str = "auto"
) -> SandboxResult:
    """Execute ``code`` with the standard library only; capture its output and its fate.

    ``isolation``: ``auto`` or ``bwrap`` (the OS sandbox; :class:`~forkgym.envs.isolation.
    SandboxUnavailable` where this machine cannot build it), or ``unsafe-local``."""
    mode = iso.resolve(isolation)
    isolated = mode == "bwrap"
    nproc = limits.processes if isolated and os.geteuid() == 0 else 0
    numbers = (limits.cpu_seconds, limits.memory_mb << 20, limits.output_bytes, seed, nproc)
    argv = [str(v) for v in (*numbers, int(isolated))]
    with (
        tempfile.TemporaryDirectory(prefix="forkgym-py-") as scratch,
        tempfile.TemporaryDirectory(prefix="forkgym-out-") as out,
    ):
        stdout_path, stderr_path = Path(out, "stdout"), Path(out, "stderr")
        env = {
            "PYTHONHASHSEED": "0",
            "PYTHONIOENCODING": "utf-8",
            "HOME": "/scratch" if isolated else scratch,
            "TMPDIR": "/scratch" if isolated else scratch,
            "PATH": "",
        }
        pass_fds: tuple[int, ...] = ()
        if isolated:
            if os.geteuid() == 0:
                os.chown(scratch, iso.NOBODY, iso.NOBODY)  # the sandbox's uid writes here
                os.chmod(scratch, 0o711)  # bubblewrap, root without capabilities, enters it
            seccomp_fd = os.memfd_create("forkgym-seccomp", 0)
            os.write(seccomp_fd, iso.seccomp_program())
            os.lseek(seccomp_fd, 0, os.SEEK_SET)
            info_read, info_write = os.pipe()
            pass_fds = (seccomp_fd, info_write)
            cmd = iso.bwrap_command(RUNNER, scratch, [*_FLAGS, "/sandbox/runner.py", *argv], seccomp_fd, env, info_fd=info_write)  # fmt: skip
            popen_env: dict[str, str] | None = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        else:
            cmd = [sys.executable, *_FLAGS, str(RUNNER), *argv]
            popen_env = env
        start = time.perf_counter()
        try:
            with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.PIPE,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=scratch,
                    env=popen_env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=pass_fds,
                )
                try:
                    timed_out = not _send_and_wait(proc, code, limits.wall_seconds)
                finally:
                    # the session (and with bubblewrap gone, its PID namespace: everything
                    # the code started, whatever session it moved to)
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        finally:
            for fd in pass_fds:
                os.close(fd)
            if pass_fds:  # the sandbox ran (or failed to start): it is gone before we return
                with os.fdopen(info_read, "rb") as info:
                    iso.wait_for_sandbox(info.read())
        seconds = time.perf_counter() - start
        text_out = _read(stdout_path, limits.output_bytes)
        text_err = _read(stderr_path, limits.output_bytes)
    code_ = proc.returncode
    if isolated and code_ is not None and 128 < code_ < 128 + 65:
        code_ = -(code_ - 128)  # bubblewrap reports a child killed by signal N as 128 + N
    if timed_out:
        status, reason = "tool_timeout", "wall_limit"
    elif code_ in (-signal.SIGXCPU, -signal.SIGKILL):
        status, reason = "tool_timeout", "cpu_limit" if code_ == -signal.SIGXCPU else "killed"
    elif code_ == -signal.SIGXFSZ or max(len(text_out), len(text_err)) >= limits.output_bytes:
        status, reason = "tool_error", "output_limit"  # Python ignores SIGXFSZ: writes fail
    elif code_ != 0:
        status, reason = "tool_error", "exception" if code_ == 1 else "exit_status"
    else:
        status, reason = "tool_ok", "ok"
    return SandboxResult(status, text_out, text_err, code_, reason, seconds)
