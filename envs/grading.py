"""The verifier an environment grades with unless it is given one.

Environments accept any object with ``verify(reference, response) -> Outcome`` (the
in-process :class:`~forkgym.verifiers.MathVerifier`, or the HTTP client of the verifier
service). By default every environment in a process shares one ``MathVerifier``, so a
thousand environments do not start a thousand worker pools; its pool starts only when an
answer needs symbolic grading.
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

from forkgym.verifiers import MathVerifier, Outcome

__all__ = ["Verifier", "default_verifier"]


@runtime_checkable
class Verifier(Protocol):
    def verify(self, reference: str, response: str) -> Outcome: ...


_DEFAULT: MathVerifier | None = None
_LOCK = threading.Lock()


def default_verifier() -> MathVerifier:
    """The process-wide shared math verifier (2 workers at most, 5 s limit)."""
    global _DEFAULT
    if _DEFAULT is None:
        with _LOCK:
            if _DEFAULT is None:
                import os

                _DEFAULT = MathVerifier(timeout=5.0, workers=min(2, os.cpu_count() or 1))
    return _DEFAULT
