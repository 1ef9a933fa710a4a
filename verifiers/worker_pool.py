"""A bounded pool of worker processes with a hard wall-clock limit per task.

Python cannot stop a stuck computation from inside: ``signal.alarm`` works only on the main
thread and cannot interrupt a long C call (a big gmpy2 power), and a thread or
``ProcessPoolExecutor`` timeout just stops waiting while the worker keeps burning a core.
pebble's ``ProcessPool`` kills the worker that overruns and starts a fresh one, and tells a
timeout apart from a crash (exit code). Workers come from a ``forkserver`` that preloads the
heavy modules once: forking a warmed, single-threaded server is as cheap as ``fork`` but safe to
do from a threaded caller (an HTTP server, a trainer with data-loader threads).

Unlike a stock ``forkserver`` (or ``spawn``) pool, the workers never re-import the caller's
``__main__``: a script without an ``if __name__ == "__main__":`` guard, a REPL or a heredoc
would otherwise re-run (or fail to find) its top-level code in every worker. The price is that
tasks must be importable functions (library code or builtins), never ones defined in
``__main__``.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import context as mp_context
from multiprocessing import forkserver, popen_forkserver, spawn, util
from typing import Any

from pebble import ProcessExpired, ProcessPool

from .outcome import Status

__all__ = ["WorkerPool", "failure_status"]


def _init_worker(memory_limit_bytes: int | None) -> None:
    """Runs in each worker: cap its address space, no core dumps, die at once on SIGTERM.

    pebble installs a Python-level SIGTERM handler, which only runs between bytecodes: a worker
    stuck in one long C call (a gmpy2 power) would ignore it for pebble's 3 s grace period
    before SIGKILL. The default action ends the process immediately; workers hold no state.
    """
    import resource

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_limit_bytes:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = (
            memory_limit_bytes if hard == resource.RLIM_INFINITY else min(hard, memory_limit_bytes)
        )
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


class _MainFreePopen(popen_forkserver.Popen):
    """Launches a fork-server child without asking it to re-import the parent's ``__main__``.

    The launch protocol is the standard one (preparation data and the pickled process object,
    written to the fork server's pipe); only the two ``init_main_*`` entries are left out.
    """

    def _launch(self, process_obj: Any) -> None:
        data = spawn.get_preparation_data(process_obj._name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        payload = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            for obj in (data, process_obj):
                mp_context.reduction.dump(obj, payload)
        finally:
            mp_context.set_spawning_popen(None)
        self.sentinel, write_fd = forkserver.connect_to_new_process(self._fds)
        keep_open = os.dup(write_fd)  # lets the child notice if this parent dies
        self.finalizer = util.Finalize(self, util.close_fds, (keep_open, self.sentinel))
        with open(write_fd, "wb", closefd=True) as pipe:
            pipe.write(payload.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _MainFreeProcess(mp_context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> _MainFreePopen:
        return _MainFreePopen(process_obj)


class _MainFreeForkServerContext(mp_context.ForkServerContext):
    Process = _MainFreeProcess


def _ping() -> int:
    return os.getpid()


def failure_status(exc: BaseException, timeout: float | None) -> tuple[Status, dict[str, Any]]:
    """Map what a pool future raised to an infrastructure status and its details."""
    if isinstance(exc, TimeoutError):
        return Status.TIMEOUT, {"reason": "time_limit", "limit_s": timeout}
    if isinstance(exc, ProcessExpired):
        return Status.ERROR, {"reason": "worker_crashed", "exitcode": exc.exitcode}
    if isinstance(exc, MemoryError):
        return Status.TIMEOUT, {"reason": "memory_limit"}
    if isinstance(exc, BrokenProcessPool):
        return Status.ERROR, {"reason": "pool_broken", "exception": str(exc)}
    if isinstance(exc, CancelledError):
        return Status.ERROR, {"reason": "cancelled"}
    return Status.ERROR, {
        "reason": "worker_exception",
        "exception": f"{type(exc).__name__}: {exc}"[:500],
    }


def _close_at_exit(ref: weakref.ref[WorkerPool]) -> None:
    pool = ref()
    if pool is not None:
        pool.close()


class WorkerPool:
    """``workers`` processes, started lazily, shared by every thread of the caller.

    ``submit`` is thread-safe and returns a future; a task running longer than its ``timeout``
    is killed together with its worker, which the pool replaces. A broken pool is rebuilt on the
    next submit, so one bad item never takes the service down.

    The workers stop as the calling process exits, a ``multiprocessing`` child's too: such a
    child joins its own children before Python's exit hooks run, and would wait for ever on
    workers that were never told to stop.
    """

    def __init__(
        self,
        workers: int,
        *,
        preload: Sequence[str] = (),
        memory_limit_mb: int | None = 4096,
        start_method: str = "forkserver",
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.preload = list(preload)
        self.memory_limit_mb = memory_limit_mb
        self.start_method = start_method
        self._pool: ProcessPool | None = None
        self._lock = threading.Lock()
        # run by multiprocessing's exit function before it joins the process's children
        # (priority >= 0); dropped when this pool is collected
        util.Finalize(self, _close_at_exit, args=(weakref.ref(self),), exitpriority=10)

    def _context(self) -> Any:
        if self.start_method != "forkserver":
            return multiprocessing.get_context(self.start_method)
        ctx = _MainFreeForkServerContext()
        if self.preload:
            ctx.set_forkserver_preload(self.preload)
        return ctx

    def _ensure_pool(self) -> ProcessPool:
        pool = self._pool
        if pool is not None and pool.active:
            return pool
        with self._lock:
            if self._pool is None or not self._pool.active:
                if self._pool is not None:
                    self._pool.stop()
                limit = self.memory_limit_mb * 2**20 if self.memory_limit_mb else None
                self._pool = ProcessPool(
                    max_workers=self.workers,
                    initializer=_init_worker,
                    initargs=(limit,),
                    context=self._context(),
                )
            return self._pool

    def start(self, timeout: float = 120.0) -> None:
        """Start the workers now and wait until each has answered once (warm start)."""
        pool = self._ensure_pool()
        futures = [pool.schedule(_ping) for _ in range(self.workers)]
        for future in futures:
            future.result(timeout=timeout)

    def submit(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Future:
        try:
            return self._ensure_pool().schedule(fn, args=args, timeout=timeout)
        except RuntimeError:  # the pool stopped under us (closed or broken): rebuild once
            with self._lock:
                if self._pool is not None:
                    self._pool.stop()
                self._pool = None
            return self._ensure_pool().schedule(fn, args=args, timeout=timeout)

    @property
    def started(self) -> bool:
        return self._pool is not None and self._pool.active

    def close(self) -> None:
        """Stop the workers (killing any running task) and wait for them to exit."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()
            pool.join()
