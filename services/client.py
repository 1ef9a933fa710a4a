"""Clients of the verifier service, with the in-process verifier's interface.

``VerifierClient(url).verify(reference, response) -> Outcome`` and ``.verify_many(pairs)``
behave like :class:`~forkgym.verifiers.MathVerifier`, so an environment grades through the
service with no other change. Every item carries an idempotency key chosen once, before the
first attempt: retries after connection errors, timeouts and 5xx replies (with exponential
backoff and jitter) can never record an item twice. When the service cannot be reached, or
keeps failing, each item comes back as ``Outcome(status=error, reward=None)`` with the reason:
never a zero reward, never an exception that kills a rollout.

Given several replica URLs (``VerifierClient(["http://a:8000", "http://b:8000"])``, replicas
sharing one PostgreSQL database), requests go round-robin over them and each retry goes to the
next replica, so a dead replica costs one attempt and the idempotency key makes the retry on
another replica a replay, never a second record.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import httpx

from forkgym.verifiers import Outcome, Status

__all__ = ["AsyncVerifierClient", "ServiceError", "VerifierClient"]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class ServiceError(RuntimeError):
    """The service failed for good: ``reason`` is unreachable, service_error or rejected."""

    def __init__(self, reason: str, message: str, status_code: int | None = None) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason, self.message, self.status_code = reason, message, status_code


class _Core:
    """Payloads, retry policy and outcome conversion shared by both clients."""

    name = "service"

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        token: str | None = None,
        timeout: float = 60.0,
        retries: int = 5,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        batch_size: int = 64,
        run_id: str | None = None,
    ) -> None:
        if retries < 0 or batch_size < 1:
            raise ValueError("retries must be >= 0 and batch_size >= 1")
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ValueError("give at least one service URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.url = self.urls[0]
        self._turns = itertools.count()  # thread-safe in CPython: next() holds the GIL
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff
        self.batch_size, self.run_id = batch_size, run_id
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        self.attempts = 0  # HTTP attempts made, retries included

    def item(
        self, reference: str, response: str, task_id: str | None = None, id: str | None = None
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "reference": reference,
            "response": response,
            "idempotency_key": uuid.uuid4().hex,  # fixed before the first attempt
        }
        if task_id is not None:
            payload["task_id"] = task_id
        if id is not None:
            payload["id"] = id
        if self.run_id is not None:
            payload["run_id"] = self.run_id
        return payload

    def replicas(self) -> list[str]:
        """The replicas in the order this request tries them: round-robin over requests, the
        next replica on each retry."""
        first = next(self._turns) % len(self.urls)
        return self.urls[first:] + self.urls[:first]

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff, self.backoff * 2**attempt) * (0.5 + random.random())

    @staticmethod
    def classify(response: httpx.Response) -> ServiceError | None:
        if response.status_code < 400:
            return None
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        reason = "service_error" if response.status_code in RETRY_STATUSES else "rejected"
        return ServiceError(
            reason, f"HTTP {response.status_code}: {str(detail)[:500]}", response.status_code
        )

    @staticmethod
    def outcome(record: dict[str, Any]) -> Outcome:
        return Outcome(
            status=Status(record["status"]),
            reward=record["reward"],
            extracted=record["extracted"],
            details={
                **record["details"],
                "id": record["id"],
                "replayed": record.get("replayed", False),
            },
            verifier=record["verifier"],
            verifier_version=record["verifier_version"],
            latency_ms=record["latency_ms"],
        )

    def failed(self, error: ServiceError) -> Outcome:
        reason = {"unreachable": "service_unreachable", "rejected": "request_rejected"}.get(
            error.reason, error.reason
        )
        details: dict[str, Any] = {"reason": reason, "error": error.message}
        if error.status_code is not None:
            details["http_status"] = error.status_code
        return Outcome(
            status=Status.ERROR,
            reward=None,
            details=details,
            verifier=self.name,
            verifier_version="",
        )

    def chunks(self, items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        return [items[i : i + self.batch_size] for i in range(0, len(items), self.batch_size)]


def _pairs(
    pairs: Iterable[Sequence[str]], task_ids: Sequence[str | None] | None
) -> list[tuple[str, str, str | None]]:
    pairs = list(pairs)
    ids = list(task_ids) if task_ids is not None else [None] * len(pairs)
    if len(ids) != len(pairs):
        raise ValueError("task_ids must have one entry per pair")
    return [(pair[0], pair[1], task) for pair, task in zip(pairs, ids, strict=True)]


class VerifierClient(_Core):
    """Synchronous client (one pooled ``httpx.Client``); safe to share between threads."""

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        transport: httpx.BaseTransport | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(url, **kwargs)
        self._http = httpx.Client(
            base_url=self.url, headers=self.headers, timeout=self.timeout, transport=transport
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """JSON of a successful reply, retrying what can be retried; raises ServiceError."""
        error = ServiceError("unreachable", "no attempt made")
        order = self.replicas()
        for attempt in range(self.retries + 1):
            self.attempts += 1
            try:
                response = self._http.request(method, order[attempt % len(order)] + path, **kwargs)
            except httpx.TransportError as exc:
                error = ServiceError("unreachable", f"{type(exc).__name__}: {exc}")
            else:
                error = self.classify(response)  # type: ignore[assignment]
                if error is None:
                    return response.json()
                if error.reason == "rejected":
                    raise error
            if attempt < self.retries:
                time.sleep(self.delay(attempt))
        raise error

    def verify(
        self, reference: str, response: str, *, task_id: str | None = None, id: str | None = None
    ) -> Outcome:
        try:
            return self.outcome(
                self.request("POST", "/v1/verify", json=self.item(reference, response, task_id, id))
            )
        except ServiceError as error:
            return self.failed(error)

    def verify_many(
        self, pairs: Iterable[Sequence[str]], *, task_ids: Sequence[str | None] | None = None
    ) -> list[Outcome]:
        items = [self.item(r, s, t) for r, s, t in _pairs(pairs, task_ids)]
        outcomes: list[Outcome] = []
        for chunk in self.chunks(items):
            try:
                records = self.request("POST", "/v1/verify/batch", json={"items": chunk})[
                    "outcomes"
                ]
                outcomes.extend(self.outcome(r) for r in records)
            except ServiceError as error:
                outcomes.extend(self.failed(error) for _ in chunk)
        return outcomes

    def get(self, outcome_id: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/outcomes/{outcome_id}")

    def stats(self, run_id: str | None = None) -> dict[str, Any]:
        return self.request("GET", "/v1/stats", params={"run_id": run_id} if run_id else None)

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/healthz")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> VerifierClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncVerifierClient(_Core):
    """Asynchronous client (one pooled ``httpx.AsyncClient``); batches go out concurrently."""

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(url, **kwargs)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self.headers, timeout=self.timeout, transport=transport
        )

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        error = ServiceError("unreachable", "no attempt made")
        order = self.replicas()
        for attempt in range(self.retries + 1):
            self.attempts += 1
            try:
                url = order[attempt % len(order)] + path
                response = await self._http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                error = ServiceError("unreachable", f"{type(exc).__name__}: {exc}")
            else:
                error = self.classify(response)  # type: ignore[assignment]
                if error is None:
                    return response.json()
                if error.reason == "rejected":
                    raise error
            if attempt < self.retries:
                await asyncio.sleep(self.delay(attempt))
        raise error

    async def verify(
        self, reference: str, response: str, *, task_id: str | None = None, id: str | None = None
    ) -> Outcome:
        try:
            record = await self.request(
                "POST", "/v1/verify", json=self.item(reference, response, task_id, id)
            )
            return self.outcome(record)
        except ServiceError as error:
            return self.failed(error)

    async def verify_many(
        self, pairs: Iterable[Sequence[str]], *, task_ids: Sequence[str | None] | None = None
    ) -> list[Outcome]:
        items = [self.item(r, s, t) for r, s, t in _pairs(pairs, task_ids)]

        async def one(chunk: list[dict[str, Any]]) -> list[Outcome]:
            try:
                records = (await self.request("POST", "/v1/verify/batch", json={"items": chunk}))[
                    "outcomes"
                ]
                return [self.outcome(r) for r in records]
            except ServiceError as error:
                return [self.failed(error) for _ in chunk]

        results = await asyncio.gather(*(one(chunk) for chunk in self.chunks(items)))
        return [outcome for chunk in results for outcome in chunk]

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncVerifierClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
