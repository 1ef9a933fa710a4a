"""Schema migrations through Alembic, run programmatically (no alembic.ini needed).

``upgrade(url)`` brings any database to the newest schema; the service runs it at start-up.
The migration scripts ship inside the package (``forkgym/store/migrations``).
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

from .engine import make_engine

__all__ = ["alembic_config", "upgrade"]


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", "forkgym.store:migrations")
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(target: str | Engine, revision: str = "head") -> None:
    """Migrate the database at ``target`` (URL or engine) to ``revision``.

    From a URL, through a writer engine: on SQLite its ``BEGIN IMMEDIATE`` makes the whole
    upgrade one transaction (SQLite's DDL is transactional), so an interrupted upgrade leaves
    the old schema intact and two services starting together take turns.
    """
    engine = make_engine(target, writer=True) if isinstance(target, str) else target
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    if isinstance(target, str):
        engine.dispose()
