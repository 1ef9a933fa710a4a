"""verl's custom reward function, graded by forkgym's math verifier.

verl calls ``compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=...)`` once per sample, in its reward workers, and takes either a float or a dict
whose ``score`` is the reward and whose other keys it logs. Point its config at this module::

    custom_reward_function.path=<site-packages>/forkgym/integrations/verl.py
    custom_reward_function.name=compute_score

Each process keeps one :class:`~forkgym.verifiers.MathVerifier` (one killable worker, a
5-second limit per symbolic answer; ``FORKGYM_VERL_TIMEOUT`` and ``FORKGYM_VERL_WORKERS``
change them). verl needs a number for every sample: a timeout or a verifier error scores
``0.0`` (what verl's own scorers give a failed check) and is flagged ``infra_failure: 1.0`` so
it is never mistaken for a wrong answer in the logs; ``invalid`` (no final answer found) and
``acc`` (correct) are logged beside it.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from forkgym.verifiers import MathVerifier, Status

__all__ = ["compute_score"]

_lock = threading.Lock()
_verifier: MathVerifier | None = None
_pid: int | None = None


def _shared() -> MathVerifier:
    """This process's verifier (a forked child makes its own: a pool does not survive fork)."""
    global _verifier, _pid
    with _lock:
        if _verifier is None or _pid != os.getpid():
            _verifier = MathVerifier(
                timeout=float(os.environ.get("FORKGYM_VERL_TIMEOUT", "5")),
                workers=int(os.environ.get("FORKGYM_VERL_WORKERS", "1")),
            )
            _pid = os.getpid()
            atexit.register(_verifier.close)
        return _verifier


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
) -> dict[str, float]:
    """``{"score", "acc", "invalid", "infra_failure"}`` for one sample (see the module doc).

    ``ground_truth`` may be a string or a number (``2``); ``data_source`` and ``extra_info``
    are not needed to grade a math answer and are ignored."""
    outcome = _shared().verify(str(ground_truth), solution_str)
    failed = outcome.status in (Status.TIMEOUT, Status.ERROR)
    return {
        "score": 0.0 if outcome.reward is None else float(outcome.reward),
        "acc": float(outcome.status is Status.CORRECT),
        "invalid": float(outcome.status is Status.INVALID),
        "infra_failure": float(failed),
    }
