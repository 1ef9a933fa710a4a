"""Operating-system isolation for model-written code: bubblewrap, a uid per call, seccomp.

An audit hook or any other check inside the interpreter is not a sandbox: the code it guards
can switch it off. The walls here are the kernel's, set up by bubblewrap (``bwrap``, a small,
well-kept setuid-free tool that Flatpak uses) before the first line of model code runs:

* **namespaces**: new PID (the environment process and everything else on the host are
  invisible; the code's parent is the sandbox's own init), network (no interface but an
  unconnected loopback), IPC, UTS and cgroup namespaces, and a new session (no terminal);
* **filesystem** (:func:`sandbox_view`): only what the interpreter needs (itself, its
  standard library and shared libraries, the system's shared libraries, ``ld.so.cache``,
  the time zone database; as root ``setpriv``), read-only, with every ``site-packages`` and
  ``dist-packages`` directory among them covered by an empty read-only mount (the standard
  library is all that imports); ``/proc`` of the new PID namespace, its host-wide figures
  (load, memory, interrupts, ``/proc/sys``, the count of cgroups...) covered by empty files
  and directories (:func:`proc_masks`); the runner copied into a file of the sandbox's own
  (no path of the checkout shows in the mount table) and bubblewrap's options read from a
  file descriptor (none show in the init's command line); nothing else of
  ``/usr``, nothing of the project, the home directory or ``/work``; the root and ``/dev``
  read-only. The one writable place
  is ``/scratch`` (the working directory; ``/tmp`` links to it), a tmpfs of a fixed size
  that bubblewrap mounts inside the sandbox: what the code writes is memory of the call
  (counted in its cgroup), never the host's disk, and it vanishes with the sandbox's mount
  namespace, so the host never walks a tree the code built;
* **identity**: run as root, the sandbox drops to the call's own uid and gid (one per
  concurrent call, :mod:`forkgym.envs.sandbox.uid_slots`) with no supplementary groups, no
  capabilities (the bounding set emptied: ``setpriv`` keeps ``CAP_SETPCAP`` just long
  enough to clear it) and ``no_new_privs``; run as another user, bubblewrap maps that user
  to 65534 in a new user namespace (whose process count is the sandbox's own) and drops
  every capability, the bounding set included;
* **seccomp** (:func:`seccomp_program`, built with libseccomp): ``ptrace``,
  ``process_vm_readv``/``writev``, ``setns``, ``unshare``, ``mount`` and the rest of the
  kernel surface that namespaces do not cover fail with ``EPERM``, and so do
  ``memfd_create`` and System V shared memory and message queues (memory no rlimit counts
  outside a cgroup), ``inotify``/``fanotify`` (which would time other calls' start-up on
  the shared read-only binds), ``sysinfo`` (the host's load) and ``setsid`` (an autogroup,
  and so a CPU share, per process); a ``clone`` that asks for a new namespace is refused;
  sockets of any family but ``AF_UNIX`` (``AF_INET``/``AF_INET6``, whose buffers a cgroup v1
  does not charge, ``AF_VSOCK``, ``AF_NETLINK``, ``AF_PACKET``, ...) fail with
  ``EAFNOSUPPORT``; other architectures' system call ABIs (i386, x32) kill the process;
* **limits** are set per call by :mod:`forkgym.envs.sandbox` (a cgroup, or rlimits where no
  cgroup is writable) and the caller kills the whole sandbox at its wall-clock limit
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
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ISOLATIONS",
    "NOBODY",
    "SOCKET_FAMILIES",
    "SandboxUnavailable",
    "available",
    "bwrap_command",
    "child_pid",
    "hidden_package_dirs",
    "make_non_dumpable",
    "proc_masks",
    "resolve",
    "sandbox_view",
    "seccomp_program",
    "split_options",
    "wait_for_sandbox",
]

ISOLATIONS = ("auto", "bwrap", "unsafe-local")
NOBODY = 65534
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; it also needs libseccomp, "
    "`apt-get install libseccomp2`), or pass isolation='unsafe-local' to run model code "
    "with interpreter-level checks only (not a sandbox: do not train on it)"
)

# syscalls a sandboxed program never needs and an escape would: EPERM. memfd_create and
# System V shared memory and message queues hold memory that rlimits do not count (a memfd
# takes fallocate(FALLOC_FL_KEEP_SIZE) past RLIMIT_FSIZE, without bound).
_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "setns", "unshare", "mount",
    "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount",
    "fsconfig", "fspick", "mount_setattr", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at", "swapon",
    "swapoff", "reboot", "acct", "quotactl", "syslog", "iopl", "ioperm", "lookup_dcookie",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "pidfd_getfd", "kcmp",
    "sethostname", "setdomainname", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "nfsservctl", "vhangup", "uselib", "personality", "memfd_create",
    "memfd_secret", "shmget", "msgget",
    # side channels and scheduling: inotify and fanotify on the read-only binds would time
    # other calls' start-up; sysinfo is the host's load, uptime and free memory; setsid would
    # give each process an autogroup of its own (a larger CPU share where no cgroup bounds it)
    "inotify_init", "inotify_init1", "fanotify_init", "sysinfo", "setsid",
)  # fmt: skip
# CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC, CLONE_NEWUTS,
# CLONE_NEWCGROUP
_NAMESPACE_FLAGS = (0x10000000, 0x00020000, 0x40000000, 0x20000000, 0x08000000, 0x04000000, 0x02000000)  # fmt: skip
# socket families the sandbox may create: AF_UNIX only. Its network namespace has only a
# loopback, so AF_INET and AF_INET6 reach nothing, and their buffers are the one memory a
# cgroup v1 does not charge unless told to (memory.kmem.tcp): they are refused too. AF_MAX is
# 46 on Linux 6.x, and every larger number is refused as well.
SOCKET_FAMILIES = (1,)
_AF_LAST = 63


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
    # the socket family is the first argument, compared as the full 64-bit register: any
    # value but the three allowed ones (upper bits set included) is refused
    refuse = seccomp.ERRNO(errno.EAFNOSUPPORT)
    for call in ("socket", "socketpair"):
        for family in range(_AF_LAST + 1):
            if family not in SOCKET_FAMILIES:
                flt.add_rule(refuse, call, seccomp.Arg(0, seccomp.EQ, family))
        flt.add_rule(refuse, call, seccomp.Arg(0, seccomp.GT, _AF_LAST))
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
    python, _ = _python()
    if not os.access(python, os.X_OK):  # e.g. an installation under /root, run by a user
        return (
            f"this user cannot run the interpreter at {python} (a directory above it is "
            "closed to it); use a Python installation it can read, or "
            "isolation='unsafe-local' (not a sandbox)"
        )
    try:
        seccomp_program()
    except SandboxUnavailable as exc:
        return str(exc)
    return _probe()


def _probe() -> str | None:
    """Run bubblewrap once with what the sandbox needs of it (the namespaces, a sized tmpfs,
    a user namespace when not root): an old bubblewrap or a kernel that refuses unprivileged
    user namespaces says so here, not in every tool call."""
    import subprocess

    cmd = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent"]
    cmd += ["--ro-bind", "/", "/", "--perms", "0777", "--size", "4096", "--tmpfs", "/tmp"]
    cmd += ["--remount-ro", "/"] + ([] if os.geteuid() == 0 else ["--unshare-user"])
    cmd += ["--", shutil.which("true") or "/bin/true"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap did not run: {exc}; {INSTALL_HINT}"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return (
            f"bubblewrap cannot build the sandbox here ({why}): it needs a bubblewrap with "
            "--size and --perms (Debian 12's 0.8 has both) and, run by a user, "
            "unprivileged user namespaces (kernel."
            "unprivileged_userns_clone, or AppArmor's kernel.apparmor_restrict_unprivileged_"
            "userns on Ubuntu); or pass isolation='unsafe-local' (not a sandbox)"
        )
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


_PACKAGE_GLOBS = (
    "/usr/lib/python3*/*-packages", "/usr/lib64/python3*/*-packages",
    "/usr/local/lib/python3*/*-packages", "/usr/local/lib64/python3*/*-packages",
)  # fmt: skip


def _setpriv() -> str:
    return os.path.realpath(shutil.which("setpriv") or "/usr/bin/setpriv")


@dataclass(frozen=True)
class View:
    """What of the host's filesystem the sandbox sees, all of it read-only."""

    binds: tuple[str, ...]  # host paths, bound where they are
    links: tuple[tuple[str, str], ...]  # (target, path): merged-/usr links such as /lib
    hidden: tuple[str, ...]  # package directories among the binds, covered by empty mounts


@functools.cache
def sandbox_view() -> View:
    """The interpreter, its standard library and shared libraries (an installation of its own,
    such as pyenv's or conda's: its whole ``lib``), the system's shared libraries
    (``/usr/lib/<multiarch>``, ``/usr/lib64``), ``ld.so.cache``, the time zone database and,
    as root, ``setpriv``: nothing else of ``/usr`` (no other programs, no other Python
    installation). The third-party package directories those include (the base
    installation's ``site-packages``, ``dist-packages``) are hidden, so only the standard
    library imports."""
    import glob
    import sysconfig

    python, _ = _python()
    names = {
        "base": sys.base_prefix, "platbase": sys.base_exec_prefix,
        "installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix,
    }  # fmt: skip
    binds = {python}
    binds.update(
        os.path.realpath(sysconfig.get_path(k, vars=names)) for k in ("stdlib", "platstdlib")
    )
    soname = sysconfig.get_config_var("INSTSONAME")
    libdir = os.path.realpath(sysconfig.get_config_var("LIBDIR") or "/nonexistent")
    if libdir.startswith(os.path.realpath(sys.base_prefix) + os.sep) and not libdir.startswith("/usr/"):  # fmt: skip
        binds.add(libdir)  # an installation's own lib (libpython; a conda one's libssl, libffi...)
    elif sysconfig.get_config_var("Py_ENABLE_SHARED") and soname:
        binds.add(os.path.join(libdir, soname))
    links = []
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for top in ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib32", "/usr/lib32"):
        if os.path.islink(top):
            links.append((os.readlink(top), top))
        elif os.path.isdir(top):
            arch = os.path.join(top, multiarch)
            binds.add(arch if multiarch and top.endswith("lib") and os.path.isdir(arch) else top)
    for extra in ("/etc/ld.so.cache", "/usr/share/zoneinfo"):
        if os.path.exists(extra):
            binds.add(extra)
    if os.geteuid() == 0:
        binds.add(_setpriv())
    binds = {b for b in binds if os.path.exists(b)}
    found = {sysconfig.get_path(key, vars=names) for key in ("purelib", "platlib")}
    for pattern in _PACKAGE_GLOBS:
        found.update(glob.glob(pattern))
    hidden = set()
    for path in found:
        real = os.path.realpath(path)
        if os.path.isdir(real) and any(real.startswith(b + os.sep) for b in binds):
            hidden.add(real)
    # a bind inside another is redundant (and would hide the other's masks)
    top_binds = [b for b in binds if not any(b.startswith(o + os.sep) for o in binds)]
    return View(tuple(sorted(top_binds)), tuple(links), tuple(sorted(hidden)))


def hidden_package_dirs() -> tuple[str, ...]:
    """The package directories covered inside the sandbox (see :func:`sandbox_view`)."""
    return sandbox_view().hidden


# host-wide figures in /proc, readable by any uid, that change with what other processes do:
# the load, free memory and swap, interrupts, forks since boot, the count of cgroups (each call
# makes some) and the file locks (each call holds one on its uid slot). Each is covered with
# ``/dev/null`` (it reads empty), and the directories with an empty read-only tmpfs, as
# container runtimes mask them; files only root may read are left (the sandbox's uid cannot),
# since every mount costs set-up time. What is left is listed in docs/environments.md.
_PROC_MASKED_FILES = (
    "stat", "loadavg", "meminfo", "uptime", "vmstat", "zoneinfo", "buddyinfo", "diskstats",
    "interrupts", "softirqs", "schedstat", "swaps", "locks", "key-users", "cgroups",
)  # fmt: skip
_PROC_MASKED_DIRS = ("pressure", "sys")


@functools.cache
def proc_masks() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ``/proc`` files and directories this kernel has that the sandbox sees empty."""
    files = tuple(f"/proc/{n}" for n in _PROC_MASKED_FILES if os.path.isfile(f"/proc/{n}"))
    dirs = tuple(f"/proc/{n}" for n in _PROC_MASKED_DIRS if os.path.isdir(f"/proc/{n}"))
    return files, dirs


RUNNER_PATH = "/sandbox/runner.py"


def bwrap_command(
    runner_fd: int,
    args: list[str],
    seccomp_fd: int,
    env: dict[str, str],
    *,
    scratch_bytes: int,
    uid: int | None = None,
    info_fd: int | None = None,
    block_fd: int | None = None,
) -> list[str]:
    """The command line that runs the runner (its source readable at ``runner_fd``; it is
    copied to :data:`RUNNER_PATH`, a file of the sandbox's own, so no host path of the
    checkout shows inside) with ``args`` inside the sandbox, in a tmpfs of ``scratch_bytes``
    at ``/scratch`` (the working directory; ``/tmp`` links to it). Pass it to bubblewrap
    through :func:`split_options` (``bwrap --args FD``): the sandbox's init is a copy of
    bubblewrap, and its ``/proc/1/cmdline`` then holds only the command.

    ``uid``: the uid and gid the code runs as (this process must be root); None runs it as
    this process's user, mapped to 65534 in a new user namespace. ``info_fd``: bubblewrap
    writes ``{"child-pid": N}`` (the sandbox's init, as the host numbers it) there.
    ``block_fd``: the sandbox waits, namespaces made, until a byte arrives there."""
    python, _ = _python()
    view = sandbox_view()
    cmd = [
        "bwrap",
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--die-with-parent", "--new-session",
    ]  # fmt: skip
    # the binds' parents as traversable empty directories: a host parent may be one nobody
    # else can enter (/root)
    parents = {str(p) for b in view.binds for p in Path(b).parents if str(p) != "/"}
    for parent in sorted(parents, key=lambda p: p.count("/")):
        cmd += ["--perms", "0755", "--dir", parent]
    for path in view.binds:
        cmd += ["--ro-bind", path, path]
    for target, path in view.links:
        cmd += ["--symlink", target, path]
    for hidden in view.hidden:
        cmd += ["--perms", "0555", "--size", "4096", "--tmpfs", hidden, "--remount-ro", hidden]
    cmd += [
        "--perms", "0755", "--dir", "/sandbox",
        "--perms", "0444", "--ro-bind-data", str(runner_fd), RUNNER_PATH,
        "--proc", "/proc", "--dev", "/dev",
    ]  # fmt: skip
    files, dirs = proc_masks()
    for path in files:  # /dev/null reads empty and discards writes (a plain bind is nodev)
        cmd += ["--dev-bind", "/dev/null", path]
    for path in dirs:
        cmd += ["--perms", "0555", "--size", "4096", "--tmpfs", path, "--remount-ro", path]
    cmd += [
        "--perms", "0777", "--size", str(scratch_bytes), "--tmpfs", "/scratch",
        "--symlink", "/scratch", "/tmp", "--chdir", "/scratch",
        "--remount-ro", "/dev", "--remount-ro", "/",
        "--clearenv", "--seccomp", str(seccomp_fd),
    ]  # fmt: skip
    if info_fd is not None:
        cmd += ["--info-fd", str(info_fd)]
    if block_fd is not None:
        cmd += ["--block-fd", str(block_fd)]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    if uid is not None:
        # root outside: drop to the call's uid inside, for real (a uid 0 outside would be
        # exempt from RLIMIT_NPROC and own every root file the binds expose). CAP_SETPCAP
        # lets setpriv empty the bounding set; setuid then clears every capability set.
        caps = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")
        cmd += ["--cap-drop", "ALL", *(x for c in caps for x in ("--cap-add", c))]
        cmd += ["--", _setpriv(), f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        cmd += ["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    else:
        cmd += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY), "--cap-drop", "ALL", "--"]  # fmt: skip
    return [*cmd, python, *args]


def split_options(cmd: list[str], fd: int) -> tuple[list[str], bytes]:
    """``cmd`` as ``bwrap --args FD -- COMMAND...`` and the options it reads from ``fd``
    (NUL-terminated): the sandbox's init, a copy of bubblewrap, then shows no bind, path or
    variable in its ``/proc/1/cmdline``."""
    end = cmd.index("--")
    data = b"".join(os.fsencode(a) + b"\0" for a in cmd[1:end])
    return [cmd[0], "--args", str(fd), *cmd[end:]], data


def make_non_dumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)`` on this process: its ``/proc/<pid>/mem``, ``environ`` and
    ``fd`` become unreadable to other processes of its uid (and it cannot be ptraced by
    them). Python keeps working; a debugger attaching to it needs root."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def child_pid(info: bytes) -> int | None:
    """The sandbox's init, as the host numbers it, from what bubblewrap wrote to
    ``--info-fd`` (None if it wrote nothing: it failed before starting the sandbox)."""
    import json

    try:
        pid = int(json.loads(info.decode() or "{}").get("child-pid", 0))
    except (ValueError, AttributeError):
        return None
    return pid if pid > 0 else None


def wait_for_sandbox(pid: int | None, timeout: float = 5.0) -> None:
    """Wait until the sandbox's init ``pid`` is gone; the kernel empties its PID namespace
    before that, so nothing of it is left."""
    import select
    import time

    if pid is None:
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
