"""Prometheus metrics of the verifier service (text format at ``GET /metrics``).

Each app gets its own registry, so several apps in one process (tests) never share counters.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["ServiceMetrics"]


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "forkgym_http_requests",
            "HTTP requests by route and status code",
            ["route", "code"],
            registry=self.registry,
        )
        self.outcomes = Counter(
            "forkgym_outcomes",
            "Outcomes returned, by status and whether replayed",
            ["status", "replayed"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "forkgym_record_seconds",
            "Time to grade and durably record one request",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.pending = Gauge(
            "forkgym_store_pending", "Write jobs queued for the store", registry=self.registry
        )
        self.commits = Gauge(
            "forkgym_store_commits", "Store transactions committed", registry=self.registry
        )
        self.rows = Gauge(
            "forkgym_store_rows_written",
            "Rows submitted in committed transactions",
            registry=self.registry,
        )
        self.graded = Gauge(
            "forkgym_items_graded",
            "Items graded and newly recorded (replays excluded)",
            registry=self.registry,
        )
        self.preempted = Gauge(
            "forkgym_items_preempted",
            "Items stopped to give their worker to another caller, then run again",
            registry=self.registry,
        )

    def observe(self, rows: list[dict[str, Any]], seconds: float) -> None:
        self.request_seconds.observe(seconds)
        for row in rows:
            self.outcomes.labels(row["status"], "true" if row.get("replayed") else "false").inc()

    def render(self, recorder: Any) -> tuple[bytes, str]:
        self.pending.set(recorder.writer.pending)
        self.commits.set(recorder.writer.commits)
        self.rows.set(recorder.writer.rows_written)
        self.graded.set(recorder.graded)
        self.preempted.set(recorder.verifier.preemptions)
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
