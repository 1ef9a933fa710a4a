"""Schema migrations through Alembic, run programmatically (no alembic.ini needed).

``upgrade(url)`` brings any database to the newest schema; the service runs it at start-up.
The migration scripts ship inside the package (``forkgym/store/migrations``).
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

from .engine import make_engine

__all__ = ["MIGRATION_LOCK", "alembic_config", "upgrade"]

# PostgreSQL advisory-lock key of forkgym's migrations (any fixed 64-bit number; this one
# spells "forkgym!" in ASCII, so it is recognisable in pg_locks)
MIGRATION_LOCK = int.from_bytes(b"forkgym!", "big") - (1 << 63)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", "forkgym.store:migrations")
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(target: str | Engine, revision: str = "head") -> None:
    """Migrate the database at ``target`` (URL or engine) to ``revision``.

    The whole upgrade is one transaction (DDL is transactional on SQLite and PostgreSQL), so an
    interrupted upgrade leaves the old schema intact, and replicas starting together take
    turns: on SQLite, through a writer engine's ``BEGIN IMMEDIATE``; on PostgreSQL, through a
    transaction-scoped advisory lock taken before Alembic reads the current revision (without
    it, two replicas both see an empty database, both create ``alembic_version``, and one
    fails to start). The replica that waited then finds the schema at head and does nothing.
    """
    engine = make_engine(target, writer=True) if isinstance(target, str) else target
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    if isinstance(target, str):
        engine.dispose()
