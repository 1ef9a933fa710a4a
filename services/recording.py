"""Grade-and-record, independent of HTTP: the service's core, used by the FastAPI app.

For a list of items: give each an id (the client's ``id``, else its idempotency key, else a
new UUID); grade what the fast path decides at once (microseconds: no database read first);
for the items that need the worker pool, look up recorded outcomes first so a retry is never
graded twice; hand the new rows to the single writer and return what the table holds once
the transaction has committed. A retried item returns the row recorded the first time; an id
or key reused for different content is a :class:`Conflict` that records nothing, never a
silent overwrite.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from forkgym.store import Conflict, OutcomeWriter, find_outcomes, make_engine, upgrade
from forkgym.store.models import utcnow
from forkgym.store.writer import check_same, index_records, recorded_for
from forkgym.verifiers import MathVerifier, Outcome, Status

from .config import ServiceConfig

__all__ = ["Conflict", "Item", "Recorder"]


@dataclass
class Item:
    """One validated request item."""

    reference: str
    response: str
    id: str | None = None
    idempotency_key: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    # why the sample's label cannot be graded against (an OpenRLHF label that is a list, an
    # object, a bool, or text past the limit): graded `invalid` with this reason, not refused
    unusable: str | None = None


def caller_of(items: list[Item]) -> tuple[str, str] | None:
    """Whom a request grades for, in the worker pool's shares: the run its items name, when
    they all name one (every request of a run is one caller, however many it sends at
    once); else None, and the request is a caller of its own."""
    runs = {item.run_id for item in items}
    run = runs.pop() if len(runs) == 1 else None
    return None if run is None else ("run", run)


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
            timeout=config.timeout,
            workers=config.workers,
            cache_size=config.cache_size,
            timeout_memory_s=config.timeout_memory_s,
            preempt_after_s=config.preempt_after_s,
        )
        self.graded = 0  # items graded and newly recorded: a retry must not increase it

    def start(self) -> None:
        self.verifier.start()

    def close(self) -> None:
        self.writer.close()
        self.verifier.close()
        self.read_engine.dispose()
        self.write_engine.dispose()

    # -- the phases of a request (the app interleaves them with its event loop) -------------

    def identify(self, items: list[Item]) -> list[str]:
        """Give every item an id; return the response hashes."""
        for item in items:
            item.id = item.id or item.idempotency_key or uuid.uuid4().hex
        return [sha256(item.response) for item in items]

    def grade_quick(self, items: list[Item]) -> tuple[dict[int, Outcome], list[int]]:
        """Outcomes decided without the pool (extraction, cache, fast path), and the rest."""
        done: dict[int, Outcome] = {}
        rest = []
        for i, item in enumerate(items):
            if item.unusable or not item.reference.strip():  # OpenRLHF's null, or worse
                done[i] = self._no_reference(item.unusable)
                continue
            outcome = self.verifier.verify_quick(item.reference, item.response)
            if outcome is None:
                rest.append(i)
            else:
                done[i] = outcome
        return done, rest

    def _no_reference(self, unusable: str | None = None) -> Outcome:
        """``invalid``, with the reason: the sample came without a reference answer, or with
        one that cannot be graded against (``unusable`` says why)."""
        details = {"reason": "no_reference"} if unusable is None else {"reason": "unusable_label", "label": unusable}  # fmt: skip
        return Outcome.from_status(
            Status.INVALID,
            self.verifier.rewards,
            details=details,
            verifier=self.verifier.name,
            verifier_version=self.verifier.version,
        )

    def lookup(
        self, items: list[Item], hashes: list[str], which: list[int]
    ) -> dict[int, dict[str, Any]]:
        """Recorded rows of the items ``which`` (by id or key), checked to be the same item.

        One indexed SELECT; WAL readers never wait for the writer, so the event loop may call
        it inline. Only items bound for the pool need it: re-running the fast path on a retry
        costs less than the read, and the writer returns the recorded row anyway.
        """
        with self.read_engine.connect() as conn:
            known = find_outcomes(
                conn,
                [items[i].id for i in which],  # type: ignore[misc]
                [items[i].idempotency_key for i in which if items[i].idempotency_key],
            )
        stored = index_records(known)
        found = {}
        for i in which:
            submitted = {**vars(items[i]), "response_sha256": hashes[i]}
            row = recorded_for(submitted, stored)
            if row is not None:
                check_same(row, submitted)
                found[i] = row
        return found

    def grade_pool(
        self, items: list[Item], rest: list[int], cancel: threading.Event | None = None
    ) -> dict[int, Outcome]:
        """Symbolic grading in the worker pool (blocks: run it in a thread), within the
        request's budget; ``cancel`` (the client went away) stops it. The pool is shared
        fairly between callers (:func:`caller_of`)."""
        outcomes = self.verifier.verify_many(
            [(items[i].reference, items[i].response) for i in rest],
            budget_s=self.config.request_budget_s,
            cancel=cancel,
            caller=caller_of([items[i] for i in rest]),
        )
        return dict(zip(rest, outcomes, strict=True))

    def build_rows(
        self, items: list[Item], hashes: list[str], graded: dict[int, Outcome], request_id: str
    ) -> list[dict[str, Any]]:
        """Rows to write for the newly graded items, in item order."""
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

    def triage(
        self, items: list[Item]
    ) -> tuple[list[str], dict[int, Outcome], dict[int, dict[str, Any]], list[int]]:
        """Everything short of the pool: ``(hashes, graded, recorded rows, left for the pool)``.

        Microseconds per fast-path item plus one indexed read when some item needs the pool:
        cheap enough for an event loop to call inline.
        """
        hashes = self.identify(items)
        graded, rest = self.grade_quick(items)
        found = self.lookup(items, hashes, rest) if rest else {}
        return hashes, graded, found, [i for i in rest if i not in found]

    def prepare(
        self, items: list[Item], request_id: str
    ) -> tuple[list[dict[str, Any] | None], list[dict[str, Any]]]:
        """All of the above, synchronously: ``(recorded row or None per item, rows to write)``."""
        hashes, graded, found, todo = self.triage(items)
        if todo:
            graded.update(self.grade_pool(items, todo))
        slots = [found.get(i) for i in range(len(items))]
        return slots, self.build_rows(items, hashes, graded, request_id)

    def submit(self, rows: list[dict[str, Any]]) -> Future[list[dict[str, Any]]]:
        return self.writer.submit(rows)

    def merge(
        self,
        slots: list[dict[str, Any] | None],
        new_rows: list[dict[str, Any]],
        recorded: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """Recorded rows in item order; ``replayed`` marks rows another request recorded.

        The writer has checked that every recorded row it returned grades the same item.
        """
        written = iter(zip(new_rows, recorded, strict=True))
        out = []
        for slot in slots:
            if slot is not None:
                out.append({**slot, "replayed": True})
                continue
            mine, row = next(written)
            if row["request_id"] != mine["request_id"] or row["id"] != mine["id"]:
                out.append({**row, "replayed": True})  # recorded first by a retry or a twin
            else:
                out.append({**row, "replayed": False})
                self.graded += 1
        return out
