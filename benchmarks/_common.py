"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["TimedVerifier"]


class TimedVerifier:
    """Wraps a verifier to add up the time spent grading (to split a step's time)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seconds = inner, 0.0

    def verify(self, reference: str, response: str) -> Any:
        start = time.perf_counter()
        try:
            return self.inner.verify(reference, response)
        finally:
            self.seconds += time.perf_counter() - start
