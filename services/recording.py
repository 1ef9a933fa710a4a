"""Grade-and-record, independent of HTTP: the service's core, used by the FastAPI app.

For a list of items: give each an id (the client's ``id``, else its idempotency key, else a
new UUID); return already-recorded items as they were recorded (no second grading); grade
the rest in the worker pool; hand the rows to the single writer and return what the table
holds once the transaction has committed. An id or key reused for different content is a
:class:`Conflict`, never a silent overwrite.
"""

from __future__ import annotations

import hashlib
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from forkgym.store import OutcomeWriter, find_outcomes, make_engine, upgrade
from forkgym.store.models import utcnow
from forkgym.verifiers import MathVerifier, Outcome

from .config import ServiceConfig

__all__ = ["Conflict", "Item", "Recorder"]


class Conflict(ValueError):
    """An id or idempotency key already names a different item."""


@dataclass
class Item:
    """One validated request item."""

    reference: str
    response: str
    id: str | None = None
    idempotency_key: str | None = None
    run_id: str | None = None
    task_id: str | None = None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Recorder:
    """Owns the verifier pool, the store engines and the writer thread."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        upgrade(config.db_url)
        self.read_engine: Engine = make_engine(config.db_url, synchronous=config.synchronous)
        self.write_engine: Engine = make_engine(
            config.db_url, writer=True, synchronous=config.synchronous
        )
        self.writer = OutcomeWriter(self.write_engine)
        self.verifier = MathVerifier(
            timeout=config.timeout, workers=config.workers, cache_size=config.cache_size
        )
        self.graded = 0  # items graded (not replayed): a retry must not increase it

    def start(self) -> None:
        self.verifier.start()

    def close(self) -> None:
        self.writer.close()
        self.verifier.close()
        self.read_engine.dispose()
        self.write_engine.dispose()

    # -- the phases of a request (the app interleaves them with its event loop) -------------

    def lookup(self, items: list[Item]) -> tuple[list[dict[str, Any] | None], list[str]]:
        """Give every item an id; return (recorded row or None per item, response hashes).

        One indexed SELECT; WAL readers never wait for the writer, so the event loop may call
        this inline.
        """
        for item in items:
            item.id = item.id or item.idempotency_key or uuid.uuid4().hex
        hashes = [sha256(item.response) for item in items]
        with self.read_engine.connect() as conn:
            known = find_outcomes(
                conn,
                [item.id for item in items],  # type: ignore[misc]
                [item.idempotency_key for item in items if item.idempotency_key],
            )
        by_id = {row["id"]: row for row in known}
        by_key = {row["idempotency_key"]: row for row in known if row["idempotency_key"]}
        slots: list[dict[str, Any] | None] = []
        for item, digest in zip(items, hashes, strict=True):
            row = by_key.get(item.idempotency_key) if item.idempotency_key else None
            row = row or by_id.get(item.id)  # type: ignore[arg-type]
            if row is not None:
                check_same(row, item, digest)
            slots.append(row)
        return slots, hashes

    def grade_quick(
        self, items: list[Item], todo: list[int]
    ) -> tuple[dict[int, Outcome], list[int]]:
        """Outcomes decided without the pool (extraction, cache, fast path), and the rest."""
        done: dict[int, Outcome] = {}
        rest = []
        for i in todo:
            outcome = self.verifier.verify_quick(items[i].reference, items[i].response)
            if outcome is None:
                rest.append(i)
            else:
                done[i] = outcome
        return done, rest

    def grade_pool(self, items: list[Item], rest: list[int]) -> dict[int, Outcome]:
        """Symbolic grading in the worker pool (blocks: run it in a thread)."""
        outcomes = self.verifier.verify_many(
            [(items[i].reference, items[i].response) for i in rest]
        )
        return dict(zip(rest, outcomes, strict=True))

    def build_rows(
        self, items: list[Item], hashes: list[str], graded: dict[int, Outcome], request_id: str
    ) -> list[dict[str, Any]]:
        """Rows to write for the newly graded items, in item order."""
        self.graded += len(graded)
        now = utcnow()
        rows = []
        for i in sorted(graded):
            item, outcome = items[i], graded[i]
            rows.append(
                {
                    "id": item.id,
                    "idempotency_key": item.idempotency_key,
                    "request_id": request_id,
                    "run_id": item.run_id,
                    "task_id": item.task_id,
                    "reference": item.reference,
                    "response": item.response if self.config.store_responses else None,
                    "response_sha256": hashes[i],
                    "response_chars": len(item.response),
                    "extracted": outcome.extracted,
                    "status": outcome.status.value,
                    "reward": outcome.reward,
                    "verifier": outcome.verifier,
                    "verifier_version": outcome.verifier_version,
                    "latency_ms": outcome.latency_ms,
                    "details": outcome.details,
                    "created_at": now,
                }
            )
        return rows

    def prepare(
        self, items: list[Item], request_id: str
    ) -> tuple[list[dict[str, Any] | None], list[dict[str, Any]]]:
        """All of the above, synchronously: ``(slots, rows to write)``."""
        slots, hashes = self.lookup(items)
        graded, rest = self.grade_quick(items, [i for i, slot in enumerate(slots) if slot is None])
        if rest:
            graded.update(self.grade_pool(items, rest))
        return slots, self.build_rows(items, hashes, graded, request_id)

    def submit(self, rows: list[dict[str, Any]]) -> Future[list[dict[str, Any]]]:
        return self.writer.submit(rows)

    @staticmethod
    def merge(
        items: list[Item],
        slots: list[dict[str, Any] | None],
        new_rows: list[dict[str, Any]],
        recorded: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """Recorded rows in item order; ``replayed`` marks rows another request recorded."""
        written = iter(zip(new_rows, recorded, strict=True))
        out = []
        for item, slot in zip(items, slots, strict=True):
            if slot is not None:
                out.append({**slot, "replayed": True})
                continue
            mine, row = next(written)
            if row["request_id"] != mine["request_id"] or row["id"] != mine["id"]:
                check_same(row, item, mine["response_sha256"])  # a concurrent twin won the race
                out.append({**row, "replayed": True})
            else:
                out.append({**row, "replayed": False})
        return out


def check_same(row: dict[str, Any], item: Item, digest: str) -> None:
    if row["reference"] != item.reference or row["response_sha256"] != digest:
        which = (
            "idempotency key"
            if item.idempotency_key and row["idempotency_key"] == item.idempotency_key
            else "id"
        )
        value = item.idempotency_key if which == "idempotency key" else item.id
        raise Conflict(
            f"{which} {value!r} already names a different item (recorded as {row['id']!r})"
        )
