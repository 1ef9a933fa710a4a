"""A private PostgreSQL server for tests and benchmarks: ``initdb`` into a temporary folder, a
server on a free port that listens on 127.0.0.1 (and a socket in that folder) only, stopped
and deleted at the end. Nothing outside the folder is touched.

The server refuses to run as root, so as root it runs as the ``postgres`` user (Debian's
``postgresql`` package creates it). Needs the server binaries (``initdb``, ``pg_ctl``) and the
``psycopg`` driver (``pip install 'forkgym[postgres]'``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["pg_bin", "private_cluster"]


def pg_bin() -> Path | None:
    """The folder of ``initdb``/``pg_ctl``: on PATH, or Debian's versioned folder."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return versions[-1].parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def private_cluster() -> Iterator[str]:
    """Yield the SQLAlchemy URL of a fresh cluster's ``postgres`` database (user ``postgres``,
    trust authentication on 127.0.0.1)."""
    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (apt-get install postgresql)")
    as_root = os.geteuid() == 0
    folder = Path(tempfile.mkdtemp(prefix="forkgym-pg-"))
    data = folder / "data"
    run_as = ["runuser", "-u", "postgres", "--"] if as_root else []
    if as_root:
        shutil.chown(folder, "postgres")
        folder.chmod(0o700)
    port = _free_port()

    def run(*cmd: str) -> None:
        subprocess.run([*run_as, *cmd], check=True, capture_output=True, timeout=120)

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
        run(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start")  # fmt: skip
        try:
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        finally:
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
