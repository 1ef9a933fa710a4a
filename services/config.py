"""Settings of the verifier service, one dataclass shared by the app, the server and the CLI."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from forkgym.store import default_url

__all__ = ["ServiceConfig"]


@dataclass(frozen=True)
class ServiceConfig:
    """Everything the service needs; defaults are safe for a laptop.

    ``token``: when set, every route but ``/healthz`` needs ``Authorization: Bearer <token>``
    (default: the ``FORKGYM_TOKEN`` environment variable), the API documentation and schema
    (``/docs``, ``/redoc``, ``/openapi.json``) included unless ``public_docs``. Limits are enforced before any
    grading: bodies over ``max_body_bytes`` get 413, batches over ``max_batch`` items and
    texts over their length limits get 422, each with the reason.
    """

    db_url: str = field(default_factory=default_url)
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    timeout: float = 5.0
    token: str | None = field(default_factory=lambda: os.environ.get("FORKGYM_TOKEN") or None)
    max_batch: int = 1024
    max_body_bytes: int = 16 << 20
    max_response_chars: int = 262_144
    max_reference_chars: int = 16_384
    store_responses: bool = True
    synchronous: str = "NORMAL"
    cache_size: int = 4096
    request_budget_s: float | None = 30.0  # grading time of one request; the rest: timeout
    timeout_memory_s: float = 600.0  # a timed-out (reference, answer) is answered at once
    # a request kept waiting while every worker holds a long item of a busier caller stops one
    # that has run this long and takes its worker (the item runs again later); None: never
    preempt_after_s: float | None = 0.5
    public_docs: bool = False  # with a token: serve /docs, /redoc, /openapi.json without it
    # /get_reward (OpenRLHF's remote reward shape) must answer a float per sample: what a
    # timeout or error (reward None) becomes there; None answers 503 instead
    null_reward: float | None = 0.0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("the service needs at least one worker process")
        if not self.timeout > 0:
            raise ValueError("timeout must be positive")
        if self.request_budget_s is not None and not self.request_budget_s > 0:
            raise ValueError("request_budget_s must be positive (or None: no budget)")
        if self.preempt_after_s is not None and not self.preempt_after_s > 0:
            raise ValueError("preempt_after_s must be positive (or None: never preempt)")
        if self.max_batch < 1 or self.max_body_bytes < 1024:
            raise ValueError("max_batch must be >= 1 and max_body_bytes >= 1024")
