"""One uid per concurrent sandbox (as root): process limits, ``/proc`` and signals per call.

``RLIMIT_NPROC`` counts every process of a uid on the host, the kernel lets a uid signal and
inspect its own processes, and files belong to uids: sandboxes sharing one uid share all of
that, so one episode's fork bomb made another's ``fork`` fail. Each call therefore runs as a
uid of its own, taken from a small range no account uses (:data:`DEFAULT_RANGE`, or
``FORKGYM_SANDBOX_UIDS=first:count``) for the length of the call.

The allocation is host-wide: slot ``uid`` is held by an exclusive ``flock`` on
``/run/forkgym-sandbox/<uid>.lock`` (a root-only directory), taken without blocking; the
kernel releases it when the holder closes it or dies, so two processes, or two threads, never
hold one uid at once, and a crash frees its slot. The caller releases a slot only after
everything that ran as its uid is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import pwd
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["DEFAULT_RANGE", "LOCK_DIR", "SlotsBusy", "uid_range", "uid_slot"]

# systemd leaves 1879048192-2147483647 unassigned (its UIDS-GIDS document); nothing here uses
# these, and `getent passwd` must not know them either (checked on first use)
DEFAULT_RANGE = (1_879_048_192 + 0x5A00, 32)
LOCK_DIR = Path("/run/forkgym-sandbox")


class SlotsBusy(RuntimeError):
    """Every uid of the range stayed taken for the whole wait."""


@functools.cache
def uid_range() -> tuple[int, int]:
    """(first uid, count), checked: no account may own one of them."""
    setting = os.environ.get("FORKGYM_SANDBOX_UIDS", "")
    if setting:
        try:
            first, count = (int(x) for x in setting.split(":"))
        except ValueError:
            raise ValueError(
                f"FORKGYM_SANDBOX_UIDS={setting!r}: expected 'first:count', e.g. "
                f"'{DEFAULT_RANGE[0]}:{DEFAULT_RANGE[1]}'"
            ) from None
    else:
        first, count = DEFAULT_RANGE
    if not (first >= 1000 and 1 <= count <= 4096 and first + count < 2**31):
        raise ValueError(f"sandbox uid range {first}:{count} is out of bounds")
    for uid in range(first, first + count):
        try:
            owner = pwd.getpwuid(uid).pw_name
        except KeyError:
            continue
        raise ValueError(
            f"uid {uid} belongs to account {owner!r}; set FORKGYM_SANDBOX_UIDS=first:count to "
            "a range no account uses"
        )
    return first, count


def _lock_dir() -> int:
    """An fd of the lock directory, made root-only; refused if anyone else could write it."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(LOCK_DIR, 0o700)
    fd = os.open(LOCK_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise PermissionError(f"{LOCK_DIR} must be owned by uid {os.geteuid()} and not shared")
    return fd


def _try(dir_fd: int, uid: int) -> int | None:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(f"{uid}.lock", flags, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextmanager
def uid_slot(timeout: float = 60.0) -> Iterator[int]:
    """Hold a sandbox uid nobody else holds, for the ``with`` block; waits (polling) while all
    are taken, :class:`SlotsBusy` after ``timeout`` seconds."""
    first, count = uid_range()
    dir_fd = _lock_dir()
    try:
        deadline = time.monotonic() + timeout
        # spread the callers over the range (not `random`: the caller's stream stays its own)
        start = (os.getpid() * 7919 + threading.get_ident()) % count
        while True:
            for i in range(count):
                uid = first + (start + i) % count
                fd = _try(dir_fd, uid)
                if fd is not None:
                    break
            else:
                if time.monotonic() > deadline:
                    raise SlotsBusy(
                        f"all {count} sandbox uids stayed busy for {timeout:g} s; widen "
                        "FORKGYM_SANDBOX_UIDS or run fewer calls at once"
                    )
                time.sleep(0.005)
                continue
            break
    finally:
        os.close(dir_fd)
    try:
        yield uid
    finally:
        os.close(fd)
