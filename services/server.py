"""Running the service with uvicorn on a socket we bind ourselves.

Binding first lets ``--port 0`` pick a free port and lets the address be printed (one line on
stdout, after start-up, when the service is ready) for scripts and tests to read.

``processes > 1`` forks that many uvicorn processes after binding, all accepting on the one
socket; each builds its own app (its own grading pool of ``workers`` processes and its own
store writer), so HTTP parsing, validation and recording spread over cores the way they do
over replicas. The parent migrates the store once before forking, prints the ready line when
every child is ready and the stopped line with their totals, forwards SIGTERM and SIGINT to
them, and stops them all if one dies (the clients fail over to another replica meanwhile).
Each child gets SIGTERM if the parent dies, so a ``kill -9`` of the parent takes the replica
down as a whole, as it does a single process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
from typing import Any

import uvicorn

from .app import create_app
from .config import ServiceConfig

__all__ = ["READY_PREFIX", "STOPPED_PREFIX", "bind", "serve", "spawn"]

READY_PREFIX = "forkgym verifier service listening on "
STOPPED_PREFIX = "forkgym verifier service stopped cleanly: "


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(config: ServiceConfig, *, log_level: str = "warning", processes: int = 1) -> None:
    """Serve until SIGINT/SIGTERM; the store is flushed and the pool stopped on the way out.

    uvicorn re-raises the signal after its graceful shutdown, so the exit status says which
    signal stopped the service; the last stdout line says the shutdown was clean.
    """
    if processes < 1:
        raise ValueError("processes must be >= 1")
    sock = bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host

    def ready() -> None:
        print(f"{READY_PREFIX}http://{shown}:{port}", flush=True)
        if config.token is None and config.host not in {"127.0.0.1", "::1", "localhost"}:
            print("warning: listening beyond loopback without a token", file=sys.stderr, flush=True)

    if processes > 1:
        _serve_forked(config, sock, processes, ready, log_level)
        return

    def stopped(recorder: object) -> None:
        writer = recorder.writer  # type: ignore[attr-defined]
        print(
            f"{STOPPED_PREFIX}{writer.rows_written} outcomes written in {writer.commits} commits",
            flush=True,
        )

    app = create_app(config, on_ready=ready, on_stopped=stopped)
    _uvicorn(app, log_level).run(sockets=[sock])


def _uvicorn(app: Any, log_level: str) -> uvicorn.Server:
    return uvicorn.Server(
        uvicorn.Config(
            app, log_level=log_level, access_log=False, lifespan="on", timeout_graceful_shutdown=10
        )
    )


def _child(config: ServiceConfig, sock: socket.socket, ready_w: int, stop_w: int, log_level: str) -> None:  # fmt: skip
    """One forked uvicorn process: reports ready and its totals through the pipes, never
    returns."""
    code = 1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: go when the parent goes
        if os.getppid() == 1:  # the parent died before the line above
            os._exit(1)

        def stopped(recorder: object) -> None:
            writer = recorder.writer  # type: ignore[attr-defined]
            os.write(stop_w, f"{writer.rows_written} {writer.commits}\n".encode())

        def ready() -> None:
            os.write(ready_w, b"r")
            os.close(ready_w)  # the parent reads to the end: every child ready, or one gone

        app = create_app(config, on_ready=ready, on_stopped=stopped)
        _uvicorn(app, log_level).run(sockets=[sock])
        code = 0
    finally:
        os._exit(code)


def _serve_forked(
    config: ServiceConfig, sock: socket.socket, processes: int, ready: Any, log_level: str
) -> None:
    from forkgym.store import upgrade

    upgrade(config.db_url)  # once, before the children open the store
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            os.close(stop_r)
            _child(config, sock, ready_w, stop_w, log_level)
        children.append(pid)
    os.close(ready_w)
    os.close(stop_w)
    received: list[int] = []

    def stop_children() -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)

    def forward(signum: int, frame: Any) -> None:
        received.append(signum)
        stop_children()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    with os.fdopen(ready_r, "rb") as pipe:
        if len(pipe.read(processes)) == processes:  # EOF first: a child died starting
            ready()
    crashed = False
    for _ in children:  # the first to end (a crash, or our signal) ends the others
        _, status = os.wait()
        if not received and not crashed:
            crashed = True
            stop_children()
        crashed = crashed or not (os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 0)
    clean = not crashed
    with os.fdopen(stop_r, "r") as pipe:
        totals = [line.split() for line in pipe.read().splitlines()]
    if clean and len(totals) == processes:
        rows, commits = (sum(int(t[i]) for t in totals) for i in (0, 1))
        print(f"{STOPPED_PREFIX}{rows} outcomes written in {commits} commits", flush=True)
    if not clean:
        sys.exit(1)
    signum = received[0] if received else signal.SIGTERM
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # the exit status names the signal, as with one process


def spawn(db_url: str, *args: str, **popen: Any) -> tuple[subprocess.Popen, str]:
    """``forkgym serve --db db_url --port 0 *args`` in a child process, once it is ready: the
    process (stdout is a pipe, read up to the ready line) and its URL. ``popen`` goes to
    :class:`subprocess.Popen` (``env``, ``preexec_fn``, ...)."""
    cmd = [sys.executable, "-m", "forkgym", "serve", "--db", db_url, "--port", "0", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **popen)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(READY_PREFIX):
            return proc, line[len(READY_PREFIX) :].strip()
    proc.wait()
    raise RuntimeError(f"forkgym serve exited with status {proc.returncode} before it was ready")
