"""Cost of recording one outcome under the old (0002) and current outcome indexes.

Bare ``sqlite3`` inserts of service-like rows (600-character responses) into a database
migrated to revision 0002 (six single-column indexes) and to the newest revision, 64 rows per
``BEGIN IMMEDIATE`` transaction, WAL, ``synchronous=NORMAL``; three alternating rounds, median.
Run: ``python benchmarks/store_indexes.py``.
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from forkgym.store import upgrade

COLUMNS = (
    "id, idempotency_key, request_id, run_id, task_id, reference, response, response_sha256, "
    "response_chars, extracted, status, reward, verifier, verifier_version, latency_ms, "
    "details, created_at"
)
INSERT = (
    f"INSERT INTO verification_outcomes ({COLUMNS}) VALUES ({', '.join('?' * 17)}) "
    "ON CONFLICT DO NOTHING"
)


def rows(n: int) -> list[tuple]:
    out = []
    for i in range(n):
        key = uuid.uuid4().hex
        out.append(
            (key, key, uuid.uuid4().hex, "run-1", f"task-{i}", "12", "x" * 600,
             uuid.uuid4().hex * 2, 600, "12", "correct", 1.0, "math", "forkgym-math 0.1",
             0.1, '{"path": "fast"}', f"2026-12-03 01:00:{i % 60:02d}.{i:06d}")
        )  # fmt: skip
    return out


def us_per_row(path: Path, revision: str, n: int = 8192) -> float:
    upgrade(f"sqlite:///{path}", revision=revision)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA synchronous=NORMAL")
    data = rows(n)
    start = time.perf_counter()
    for i in range(0, n, 64):
        con.execute("BEGIN IMMEDIATE")
        con.executemany(INSERT, data[i : i + 64])
        con.execute("COMMIT")
    elapsed = time.perf_counter() - start
    con.close()
    return 1e6 * elapsed / n


def main() -> int:
    results: dict[str, list[float]] = {"0002": [], "head": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(3):
            for revision in results:
                results[revision].append(
                    us_per_row(Path(tmp) / f"{revision}-{round_}.db", revision)
                )
    print("store_indexes  bare sqlite3, 64 rows per transaction, WAL, 3 rounds")
    for revision, values in results.items():
        shown = ", ".join(f"{v:.1f}" for v in values)
        print(
            f"revision {revision:5} us per outcome: median {statistics.median(values):6.1f}  ({shown})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
