"""Operating-system isolation for model-written code: bubblewrap, an unprivileged uid, seccomp.

An audit hook or any other check inside the interpreter is not a sandbox: the code it guards
can switch it off. The walls here are the kernel's, set up by bubblewrap (``bwrap``, a small,
well-kept setuid-free tool that Flatpak uses) before the first line of model code runs:

* **namespaces**: new PID (the environment process and everything else on the host are
  invisible; the code's parent is the sandbox's own init), network (no interface but an
  unconnected loopback), IPC, UTS and cgroup namespaces, and a new session (no terminal);
* **filesystem**: only what the interpreter needs (``/usr``, ``/lib*``, ``/bin``, the
  Python installation), read-only; a private ``/tmp``; one writable scratch directory;
  ``/proc`` of the new PID namespace; nothing of the project, the home directory or ``/work``;
* **identity**: run as root, the sandbox drops to uid/gid 65534 (``nobody``) with no
  supplementary groups, no capabilities (bounding set emptied) and ``no_new_privs``, by
  ``setpriv`` inside the sandbox; run as another user, bubblewrap maps that user into a new
  user namespace and drops every capability;
* **seccomp** (:func:`seccomp_program`, built with libseccomp): ``ptrace``,
  ``process_vm_readv``/``writev``, ``setns``, ``unshare``, ``mount`` and the rest of the
  kernel surface that namespaces do not cover fail with ``EPERM``, and a ``clone`` that asks
  for a new namespace is refused;
* **limits** are set by the runner (CPU seconds, address space, file size, open files,
  processes, no core dumps) and the caller kills the whole sandbox at its wall-clock limit
  (``--die-with-parent``: when bubblewrap dies the PID namespace and everything in it goes).

:func:`available` says whether this machine can do all of that; where it cannot, the
Python tool refuses to run model code unless the caller names the unsafe local mode.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = [
    "ISOLATIONS",
    "NOBODY",
    "SandboxUnavailable",
    "available",
    "bwrap_command",
    "make_non_dumpable",
    "resolve",
    "seccomp_program",
    "wait_for_sandbox",
]

ISOLATIONS = ("auto", "bwrap", "unsafe-local")
NOBODY = 65534
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; it also needs libseccomp, "
    "`apt-get install libseccomp2`), or pass isolation='unsafe-local' to run model code "
    "with interpreter-level checks only (not a sandbox: do not train on it)"
)

# syscalls a sandboxed program never needs and an escape would: EPERM
_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "setns", "unshare", "mount",
    "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount",
    "fsconfig", "fspick", "mount_setattr", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at", "swapon",
    "swapoff", "reboot", "acct", "quotactl", "syslog", "iopl", "ioperm", "lookup_dcookie",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "pidfd_getfd", "kcmp",
    "sethostname", "setdomainname", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "nfsservctl", "vhangup", "uselib", "personality",
)  # fmt: skip
# CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC, CLONE_NEWUTS,
# CLONE_NEWCGROUP
_NAMESPACE_FLAGS = (0x10000000, 0x00020000, 0x40000000, 0x20000000, 0x08000000, 0x04000000, 0x02000000)  # fmt: skip


class SandboxUnavailable(RuntimeError):
    """This machine cannot isolate model code; the message says how to make it able to."""


@functools.cache
def seccomp_program() -> bytes:
    """The compiled BPF filter (libseccomp through ``pyseccomp``), for ``bwrap --seccomp``."""
    try:
        import pyseccomp as seccomp
    except Exception as exc:  # ImportError, or libseccomp.so missing (an OSError)
        raise SandboxUnavailable(f"no libseccomp ({exc}); {INSTALL_HINT}") from exc
    flt = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in _DENIED:
        try:
            flt.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except Exception:  # a syscall this architecture does not have
            continue
    # clone3 passes its flags in a struct a filter cannot read: make glibc fall back to clone
    flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in _NAMESPACE_FLAGS:  # a clone asking for any new namespace
        flt.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))  # fmt: skip
    with tempfile.TemporaryFile() as out:  # libseccomp writes to a file descriptor
        flt.export_bpf(out)
        out.seek(0)
        return out.read()


@functools.cache
def available() -> str | None:
    """None when ``bwrap`` isolation works here, else why not (with the install hint)."""
    if sys.platform != "linux":
        return f"OS isolation needs Linux; {INSTALL_HINT}"
    if shutil.which("bwrap") is None:
        return f"bubblewrap (bwrap) is not installed; {INSTALL_HINT}"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return f"setpriv (util-linux) is missing; {INSTALL_HINT}"
    try:
        seccomp_program()
    except SandboxUnavailable as exc:
        return str(exc)
    return None


def resolve(isolation: str) -> str:
    """``auto`` -> ``bwrap`` where it works; ``bwrap`` where it does not -> an error."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
    if isolation == "unsafe-local":
        return isolation
    problem = available()
    if problem is not None:
        raise SandboxUnavailable(problem)
    return "bwrap"


def _python() -> tuple[str, str]:
    """The base interpreter (not a virtual environment's link to it) and its installation."""
    executable = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    return executable, os.path.realpath(sys.base_prefix)


def bwrap_command(
    runner: Path,
    scratch: str,
    args: list[str],
    seccomp_fd: int,
    env: dict[str, str],
    info_fd: int | None = None,
) -> list[str]:
    """The command line that runs ``runner`` with ``args`` inside the sandbox; the scratch
    directory appears as ``/scratch`` (the working directory)."""
    python, prefix = _python()
    cmd = [
        "bwrap",
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--die-with-parent", "--new-session",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for path in ("/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache"):
        if os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    # the installation's own path may lie under a directory nobody can enter (/root): lay
    # traversable empty directories over its ancestors, then bind it where it was
    parents = [p for p in Path(prefix).parents if str(p) != "/"][::-1]
    if parents:
        cmd += ["--perms", "0755", "--tmpfs", str(parents[0])]
        for parent in parents[1:]:
            cmd += ["--perms", "0755", "--dir", str(parent)]
    cmd += ["--ro-bind", prefix, prefix]
    if not python.startswith(prefix + os.sep):
        cmd += ["--ro-bind", python, python]
    cmd += [
        "--perms", "0755", "--dir", "/sandbox", "--ro-bind", str(runner), "/sandbox/runner.py",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
        "--bind", scratch, "/scratch", "--chdir", "/scratch",
        "--clearenv", "--seccomp", str(seccomp_fd),
    ]  # fmt: skip
    if info_fd is not None:  # bubblewrap writes {"child-pid": N}: the sandbox's init
        cmd += ["--info-fd", str(info_fd)]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    if os.geteuid() == 0:
        # root outside: drop to nobody inside, for real (a uid 0 outside would be exempt
        # from RLIMIT_NPROC and own every root file the binds expose)
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        cmd += ["--", setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        cmd += ["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    else:
        cmd += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY), "--cap-drop", "ALL", "--"]  # fmt: skip
    return [*cmd, python, *args]


def make_non_dumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)`` on this process: its ``/proc/<pid>/mem``, ``environ`` and
    ``fd`` become unreadable to other processes of its uid (and it cannot be ptraced by
    them). Python keeps working; a debugger attaching to it needs root."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def wait_for_sandbox(info: bytes, timeout: float = 5.0) -> None:
    """Wait until the sandbox's init (``info``: what bubblewrap wrote to ``--info-fd``) is
    gone; the kernel empties its PID namespace before that, so nothing of it is left."""
    import json
    import select
    import time

    try:
        pid = int(json.loads(info.decode() or "{}").get("child-pid", 0))
    except (ValueError, AttributeError):
        return
    if pid <= 0:
        return
    deadline = time.monotonic() + timeout
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # already gone
        return
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if ready or not os.path.exists(f"/proc/{pid}"):
                return
    finally:
        os.close(fd)
