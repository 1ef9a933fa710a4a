"""A real verifier service: uvicorn in a subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from forkgym.services.server import READY_PREFIX, STOPPED_PREFIX


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    db: Path | str

    @property
    def db_url(self) -> str:
        return self.db if isinstance(self.db, str) else f"sqlite:///{self.db}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.alive():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_server(db: Path | str, *args: str, timeout: float = 120.0) -> Server:
    """Start ``forkgym serve`` on port 0 and wait for its ready line; ``db`` is a SQLite file
    or a database URL."""
    cmd = [
        sys.executable,
        "-m",
        "forkgym",
        "serve",
        "--db",
        db if isinstance(db, str) else f"sqlite:///{db}",
        "--port",
        "0",
        *args,
    ]
    env = {k: v for k, v in os.environ.items() if k != "FORKGYM_TOKEN"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if line.startswith(READY_PREFIX):
            url = line[len(READY_PREFIX) :].strip()
            httpx.get(f"{url}/healthz", timeout=10).raise_for_status()
            return Server(proc, url, db)
        if not line and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
    proc.kill()
    raise RuntimeError("server did not become ready")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("svc") / "outcomes.db", "--workers", "2", "--timeout", "2"
    )
    yield srv
    srv.stop()
    # uvicorn re-raises SIGTERM after its graceful shutdown; the last line proves it was clean
    assert srv.proc.returncode in (0, -signal.SIGTERM), srv.proc.stderr.read()  # type: ignore[union-attr]
    assert srv.proc.stdout.read().startswith(STOPPED_PREFIX)  # type: ignore[union-attr]
