"""The outcome store: SQLite set-up, migrations, the single batched writer, queries."""

import io
import json
import sqlite3
import threading
import time

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from forkgym.store import (
    Base,
    Conflict,
    OutcomeRow,
    OutcomeWriter,
    StoreClosed,
    latency_percentiles,
    make_engine,
    page_outcomes,
    slowest,
    status_counts,
    upgrade,
    write_jsonl,
)
from forkgym.store.models import utcnow


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    return url


def row(i, status="correct", reward=1.0, key=None, run="run-a", latency=1.0):
    return {
        "id": f"o{i}",
        "idempotency_key": key,
        "request_id": "req",
        "run_id": run,
        "task_id": f"t{i}",
        "reference": "1",
        "response": "\\boxed{1}",
        "response_sha256": "h",
        "response_chars": 9,
        "extracted": "1",
        "status": status,
        "reward": reward,
        "verifier": "math",
        "verifier_version": "v",
        "latency_ms": latency,
        "details": {"path": "fast"},
        "created_at": utcnow(),
    }


def test_sqlite_is_set_up_for_concurrency(url):
    engine = make_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL


def test_migration_matches_the_models_and_is_idempotent(url):
    upgrade(url)  # a second run is a no-op
    engine = make_engine(url)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        assert MigrationContext.configure(conn).get_current_revision() == "0003"


def test_upgrading_an_older_store_keeps_its_outcomes(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, revision="0002")
    engine = make_engine(url, writer=True)
    with engine.begin() as conn:
        conn.execute(insert(OutcomeRow), [row(1, run=None)])
    upgrade(url)
    con = sqlite3.connect(tmp_path / "old.db")
    indexes = {
        r[0]
        for r in con.execute(
            "select name from sqlite_master where type='index' and tbl_name='verification_outcomes'"
            " and name like 'ix_%'"
        )
    }
    assert indexes == {"ix_verification_outcomes_run_id", "ix_verification_outcomes_status"}
    assert con.execute("select id from verification_outcomes").fetchall() == [("o1",)]
    assert con.execute("pragma integrity_check").fetchone() == ("ok",)


@pytest.mark.parametrize(
    ("status", "reward"), [("timeout", 0.0), ("error", 0.0), ("correct", None), ("bogus", 1.0)]
)
def test_the_schema_refuses_rewards_that_lie(url, status, reward):
    engine = make_engine(url, writer=True)
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(insert(OutcomeRow), [row(1, status=status, reward=reward, run=None)])


def test_writer_batches_many_threads_and_records_each_row_once(url):
    writer = OutcomeWriter(make_engine(url, writer=True))
    results: list[list[dict]] = []

    def submit(t):
        futures = [writer.submit([row(t * 1000 + i, key=f"k{t}-{i}")]) for i in range(100)]
        results.extend(f.result(timeout=60) for f in futures)

    threads = [threading.Thread(target=submit, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(results) == 800 and writer.rows_written == 800
    assert writer.commits < 800  # batched: many rows per transaction
    retry = writer.submit([row(5, key="k0-5"), row(77_777, key="k0-6")]).result()
    assert [r["id"] for r in retry] == ["o5", "o6"]  # the recorded rows, by key
    writer.close()
    with pytest.raises(StoreClosed):
        writer.submit([row(1)]).result()
    con = sqlite3.connect(url.removeprefix("sqlite:///"))
    assert con.execute(
        "select count(*), count(distinct id) from verification_outcomes"
    ).fetchone() == (800, 800)
    assert con.execute("select count(*) from runs").fetchone() == (1,)


def test_a_conflicting_request_fails_alone_and_records_nothing(url):
    """Two requests drained into one transaction; one reuses an id for a different item."""
    writer = OutcomeWriter(make_engine(url, writer=True))
    writer.submit([row(1)]).result(timeout=30)
    path = url.removeprefix("sqlite:///")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # the writer's next transaction waits here...
    first = writer.submit([row(2)])
    time.sleep(0.3)
    good = writer.submit([row(3), row(4)])  # ...so these two queue up and share one batch
    bad = writer.submit([row(6), {**row(1), "reference": "2", "request_id": "other"}])
    blocker.execute("ROLLBACK")
    assert [r["id"] for r in first.result(timeout=30)] == ["o2"]
    assert [r["id"] for r in good.result(timeout=30)] == ["o3", "o4"]
    with pytest.raises(Conflict, match="id 'o1' already names a different item"):
        bad.result(timeout=30)
    writer.close()
    ids = {r[0] for r in sqlite3.connect(path).execute("select id from verification_outcomes")}
    assert ids == {"o1", "o2", "o3", "o4"}  # o6 came with the conflict: not recorded
    assert writer.rows_written == 4


def test_a_cancelled_submission_records_nothing_and_the_writer_carries_on(url):
    writer = OutcomeWriter(make_engine(url, writer=True))
    path = url.removeprefix("sqlite:///")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    first = writer.submit([row(1)])
    time.sleep(0.3)
    gone = writer.submit([row(2)])  # still queued behind the blocked transaction
    assert gone.cancel()
    blocker.execute("ROLLBACK")
    assert [r["id"] for r in first.result(timeout=30)] == ["o1"]
    assert [r["id"] for r in writer.submit([row(3)]).result(timeout=30)] == ["o3"]
    writer.close()
    ids = {r[0] for r in sqlite3.connect(path).execute("select id from verification_outcomes")}
    assert ids == {"o1", "o3"}


def test_several_writer_engines_never_hit_database_is_locked(url):
    """Four independent writers (as four processes would be) on one file, BEGIN IMMEDIATE."""
    writers = [OutcomeWriter(make_engine(url, writer=True), max_batch=10) for _ in range(4)]
    errors = []

    def pump(w, base):
        try:
            for i in range(200):
                w.submit([row(base + i)]).result(timeout=60)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=pump, args=(w, k * 10_000)) for k, w in enumerate(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for w in writers:
        w.close()
    assert not errors
    engine = make_engine(url)
    with engine.connect() as conn:
        assert sum(status_counts(conn).values()) == 800


def test_queries(url):
    writer = OutcomeWriter(make_engine(url, writer=True))
    latencies = np.random.default_rng(0).exponential(20.0, size=101)
    rows = [
        row(i, latency=float(ms), run="run-a" if i % 2 else "run-b")
        for i, ms in enumerate(latencies)
    ]
    rows[3].update(status="timeout", reward=None)
    rows[4].update(status="invalid", reward=0.0)
    writer.submit(rows).result()
    writer.close()
    engine = make_engine(url)
    with engine.connect() as conn:
        assert status_counts(conn) == {"correct": 99, "timeout": 1, "invalid": 1}
        assert status_counts(conn, run_id="run-a") == {"correct": 49, "timeout": 1}
        p = latency_percentiles(conn)
        ordered = np.sort(latencies)
        for q in (50, 95, 99):  # nearest rank
            assert p[f"p{q}"] == pytest.approx(ordered[int(np.ceil(q / 100 * 101)) - 1])
        assert latency_percentiles(conn, run_id="nope") == {"p50": None, "p95": None, "p99": None}
        page, cursor = page_outcomes(conn, limit=40)
        seen = [r["id"] for r in page]
        while cursor is not None:
            page, cursor = page_outcomes(conn, after=cursor, limit=40)
            seen += [r["id"] for r in page]
        assert seen == [f"o{i}" for i in range(101)]
        assert [r["latency_ms"] for r in slowest(conn, 3)] == sorted(latencies.tolist())[::-1][:3]
        out = io.StringIO()
        assert write_jsonl(conn, out, status="timeout") == 1
        assert json.loads(out.getvalue())["id"] == "o3"
