"""Runs untrusted Python inside the sandbox process; started by :mod:`forkgym.envs.sandbox.local`.

Executed by path as ``python -P -s -S runner.py CPU MEMORY FILE SEED NPROC ISOLATED`` with the
code on stdin and stdout/stderr on pipes the host reads, in a fresh scratch space (under
bubblewrap a tmpfs at ``/scratch``), inside the OS sandbox of
:mod:`forkgym.envs.sandbox.isolation` (``ISOLATED`` = 1) or, in the unsafe local mode, in a
new session only. Before the code runs it:

1. in the unsafe local mode, leaves the network: a new, empty network namespace when the
   kernel allows it (under bubblewrap the namespace is already empty);
2. sets hard resource limits: CPU seconds, address space (``MEMORY``: the host divides the
   call's budget where no cgroup counts it), file size, open files, processes of its uid
   (``NPROC`` > 0: the uid, or the user namespace, is the call's own), no core dumps;
3. seeds ``random`` so identical code prints identical output in every branch;
4. installs an audit hook (PEP 578; it cannot be removed) that refuses sockets, processes
   (fork, exec, spawn, subprocess, system), signals to other processes, ``ctypes``, raising
   limits, and writes, renames or deletions outside the scratch directory.

The walls are the operating system's (namespaces, uid, seccomp, limits); the hook is a
courtesy that turns the commonest mistakes into clear errors, and it is not relied on: code
can switch it off. The parent kills the whole sandbox on its wall-clock limit. Only the
standard library is importable.
"""

import os
import random
import resource
import sys

_PROCESS_EVENTS = {
    "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
    "subprocess.Popen", "pty.spawn", "os.startfile", "resource.setrlimit",
    "resource.prlimit", "sys.addaudithook", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
    "ctypes.call_function", "socket.__new__", "socket.connect", "socket.bind",
    "socket.getaddrinfo", "socket.sendto", "socket.gethostbyname", "os.setuid", "os.chroot",
}  # fmt: skip
_PATH_EVENTS = {  # event -> indices of path arguments that must stay inside the scratch dir
    "os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.link": (0, 1),
    "os.symlink": (0, 1), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,),
    "os.mkdir": (0,), "os.utime": (0,), "shutil.rmtree": (0,), "shutil.move": (0, 1),
    "os.chdir": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
}  # fmt: skip
_BLOCKED_IMPORTS = {"ctypes", "_ctypes", "cffi", "_posixsubprocess", "multiprocessing"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _leave_network() -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        for flags in (0x40000000, 0x40000000 | 0x10000000):  # NEWNET, then NEWUSER|NEWNET
            if libc.unshare(flags) == 0:
                return True
    except Exception:
        pass
    finally:  # the code must not inherit an imported ctypes (a cached import skips the hook)
        for name in [
            m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))
        ]:
            del sys.modules[name]
    return False


def _install_hook(scratch: str) -> None:
    def inside(path: object) -> bool:
        if isinstance(path, int):
            return True  # an fd we were handed
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return False
        full = os.path.realpath(path)
        return full == scratch or full.startswith(scratch + os.sep)

    def hook(event: str, args: tuple) -> None:
        if event in _PROCESS_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "os.kill" or event == "os.killpg":
            if args[0] not in (0, os.getpid()):
                raise PermissionError("sandbox: signals to other processes are not allowed")
        elif event == "import" and args[0].split(".")[0] in _BLOCKED_IMPORTS:
            raise PermissionError(f"sandbox: importing {args[0]} is not allowed")
        elif event == "open":
            path, mode, flags = args
            writes = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writes and not inside(path):
                raise PermissionError(f"sandbox: writing outside the scratch directory: {path}")
        elif event in _PATH_EVENTS:
            for i in _PATH_EVENTS[event]:
                if i < len(args) and not inside(args[i]):
                    raise PermissionError(f"sandbox: {event} outside the scratch directory")

    sys.addaudithook(hook)


def main() -> int:
    # Plain integers on the command line: importing json (and with it re) would double the
    # start-up time of every tool call.
    cpu, memory_bytes, file_bytes, seed, nproc, isolated = (int(a) for a in sys.argv[1:7])
    code = sys.stdin.read()
    scratch = os.path.realpath(os.getcwd())
    if not isolated:  # under bubblewrap the network namespace is already empty
        _leave_network()
    limits = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (memory_bytes, memory_bytes)),
        (resource.RLIMIT_FSIZE, (file_bytes, file_bytes)),
        (resource.RLIMIT_NOFILE, (64, 64)),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if nproc:  # processes of the sandbox's own uid
        limits.append((resource.RLIMIT_NPROC, (nproc, nproc)))
    for limit, value in limits:
        resource.setrlimit(limit, value)
    random.seed(seed)
    _install_hook(scratch)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(code, "<python-tool>", "exec"), namespace)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:
        import traceback  # only when needed: it costs milliseconds of start-up

        frames = traceback.extract_tb(exc.__traceback__)
        user = [f for f in frames if f.filename == "<python-tool>"]
        lines = traceback.format_list(user) + traceback.format_exception_only(type(exc), exc)
        sys.stderr.write("Traceback (most recent call last):\n" + "".join(lines))
        return 1
    finally:
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
