"""Engines for the outcome store: any SQLAlchemy URL, with SQLite set up for concurrency.

SQLite under concurrent writers fails with "database is locked" unless it is set up with care:

* WAL journal (readers never block the writer), ``synchronous=NORMAL`` (a commit survives a
  killed process; ``FULL`` also survives power loss), ``busy_timeout`` so a waiting
  connection retries instead of failing, and foreign keys on;
* writers take the lock when their transaction starts (``BEGIN IMMEDIATE``): a deferred
  transaction that reads first and writes later can fail with "database is locked" whatever
  the busy timeout, because it cannot wait for a lock while holding a read snapshot.

pysqlite's own transaction handling is switched off so the ``BEGIN`` is ours. Other backends
(PostgreSQL for multi-host deployments) get no special treatment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import NullPool

__all__ = ["StoreURLError", "check_url", "default_url", "is_sqlite", "make_engine"]

_EXAMPLES = "sqlite:///path/to/forkgym.db or postgresql+psycopg://user@host:5432/db"


class StoreURLError(ValueError):
    """A store URL that cannot work, with one line saying why and what to give instead."""


def default_url() -> str:
    """``sqlite:///$FORKGYM_DATA_DIR/forkgym.db`` (default data dir: ~/.local/share/forkgym)."""
    base = os.environ.get("FORKGYM_DATA_DIR") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "forkgym"
    )
    return f"sqlite:///{Path(base) / 'forkgym.db'}"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def make_engine(
    url: str,
    *,
    writer: bool = False,
    busy_timeout_ms: int = 30_000,
    synchronous: str = "NORMAL",
    **kwargs: Any,
) -> Engine:
    """An engine for ``url``.

    ``writer=True``: every transaction is ``BEGIN IMMEDIATE``. Otherwise (readers) statements
    autocommit, so ``engine.begin()`` on a reader engine does not make several statements
    atomic: write through a writer engine.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, **kwargs)
    if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
        raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
    database = parsed.database
    if database and database != ":memory:":
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    if not writer:  # a connection per request thread: overflow ones churn (connect + pragmas)
        kwargs.setdefault("pool_size", 48)
        kwargs.setdefault("max_overflow", 16)
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # pysqlite must not BEGIN: we do (writers)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    if writer:

        @event.listens_for(engine, "begin")
        def _begin(connection: Any) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    # Readers run each statement in autocommit mode: a BEGIN/ROLLBACK pair around one SELECT
    # is pure overhead, and none of them needs more than one statement's snapshot.

    return engine


def check_url(url: str, *, connect: bool = True, timeout_s: float = 5.0) -> URL:
    """The parsed ``url``, or :class:`StoreURLError` with one line saying what is wrong.

    Checked in order: the URL parses; SQLAlchemy knows its dialect; the dialect's driver is
    installed; a SQLite file's folder exists or can be made (nothing is created here); and,
    with ``connect``, a server-based database answers within ``timeout_s``. The password never
    appears in a message.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreURLError(f"{url!r} is not a database URL (e.g. {_EXAMPLES})") from None
    shown = parsed.render_as_string(hide_password=True)
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        what = f"database dialect {parsed.drivername!r}"
        backend = parsed.get_backend_name()
        if "+" in parsed.drivername and _known_backend(backend):
            what = f"driver {parsed.get_driver_name()!r} for {backend}"
        raise StoreURLError(f"unknown {what} in {shown} (e.g. {_EXAMPLES})") from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        hint = " (pip install 'forkgym[postgres]')" if parsed.get_backend_name() == "postgresql" else ""  # fmt: skip
        raise StoreURLError(
            f"the driver for {parsed.drivername} is not installed ({exc}){hint}"
        ) from None
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite_path(parsed.database, shown)
        return parsed
    if connect:
        connect_args = {"connect_timeout": max(1, round(timeout_s))}
        if parsed.get_backend_name() != "postgresql":
            connect_args = {}
        engine = create_engine(parsed, connect_args=connect_args, poolclass=NullPool)
        try:
            with engine.connect():
                pass
        except DBAPIError as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
            raise StoreURLError(f"cannot reach the database at {shown}: {reason}") from None
        finally:
            engine.dispose()
    return parsed


def _known_backend(backend: str) -> bool:
    try:
        make_url(f"{backend}://").get_dialect()
    except NoSuchModuleError:
        return False
    return True


def _check_sqlite_path(database: str | None, shown: str) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database).expanduser()
    if path.is_dir():
        raise StoreURLError(f"{shown}: {path} is a directory; name a file in it")
    folder = path.parent
    while not folder.exists():  # the nearest existing ancestor must be a writable folder
        folder = folder.parent
    if not folder.is_dir():
        raise StoreURLError(f"{shown}: cannot make {path.parent}: {folder} is not a directory")
    if not path.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise StoreURLError(f"{shown}: cannot create {path}: {folder} is not writable")
