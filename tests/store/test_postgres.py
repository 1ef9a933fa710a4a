"""The store on a real PostgreSQL server (a private cluster started by the test)."""

import threading

import sqlalchemy as sa

from forkgym.store.migrate import upgrade


def test_replicas_starting_together_migrate_once(postgres_url):
    """Eight processes' worth of start-ups at the same moment (threads, each with its own
    engine and connection): every upgrade succeeds and the schema is built once. Without a
    lock around the upgrade, two replicas both create alembic_version and one fails."""
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def start() -> None:
        engine = sa.create_engine(postgres_url)
        try:
            barrier.wait()
            upgrade(engine)
        except BaseException as exc:
            errors.append(exc)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    engine = sa.create_engine(postgres_url)
    with engine.connect() as connection:
        versions = connection.execute(sa.text("SELECT version_num FROM alembic_version")).all()
        tables = set(sa.inspect(connection).get_table_names())
    engine.dispose()
    assert len(versions) == 1
    assert {"verification_outcomes", "runs", "metrics", "alembic_version"} <= tables
