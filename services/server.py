"""Running the service with uvicorn on a socket we bind ourselves.

Binding first lets ``--port 0`` pick a free port and lets the address be printed (one line on
stdout, after start-up, when the service is ready) for scripts and tests to read.
"""

from __future__ import annotations

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


def serve(config: ServiceConfig, *, log_level: str = "warning") -> None:
    """Serve until SIGINT/SIGTERM; the store is flushed and the pool stopped on the way out.

    uvicorn re-raises the signal after its graceful shutdown, so the exit status says which
    signal stopped the service; the last stdout line says the shutdown was clean.
    """
    sock = bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host

    def ready() -> None:
        print(f"{READY_PREFIX}http://{shown}:{port}", flush=True)
        if config.token is None and config.host not in {"127.0.0.1", "::1", "localhost"}:
            print("warning: listening beyond loopback without a token", file=sys.stderr, flush=True)

    def stopped(recorder: object) -> None:
        writer = recorder.writer  # type: ignore[attr-defined]
        print(
            f"{STOPPED_PREFIX}{writer.rows_written} outcomes written in {writer.commits} commits",
            flush=True,
        )

    app = create_app(config, on_ready=ready, on_stopped=stopped)
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_level=log_level, access_log=False, lifespan="on", timeout_graceful_shutdown=10
        )
    )
    server.run(sockets=[sock])


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
