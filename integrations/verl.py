"""verl's custom reward function, graded by forkgym's math verifier.

verl calls ``compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=..., **more)`` once per sample, in its reward workers, and takes either a float or
a dict whose ``score`` is the reward and whose other keys it logs. Point its config at this
module by package, so that a process pool can pickle the function (verl 0.9)::

    reward.custom_reward_function.path=pkg://forkgym.integrations.verl
    reward.custom_reward_function.name=compute_score

Each process keeps one :class:`~forkgym.verifiers.MathVerifier` per answer format (one
killable worker, a 5-second limit per symbolic answer; ``FORKGYM_VERL_TIMEOUT`` and
``FORKGYM_VERL_WORKERS`` change them; a GSM8K ``data_source`` reads ``#### 18`` answers, see
:func:`preset_for`). verl needs a number for every sample: a timeout or a verifier error scores
``0.0`` (what verl's own scorers give a failed check) and is flagged ``infra_failure: 1.0`` so
it is never mistaken for a wrong answer in the logs; ``invalid`` (no final answer found) and
``acc`` (correct) are logged beside it. :func:`compute_score_float` is the score alone, for
verl's ``prime`` reward manager, which takes numbers only.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterable
from typing import Any

from forkgym.verifiers import MathVerifier, Status

__all__ = ["compute_score", "compute_score_float", "preset_for"]

_lock = threading.Lock()
_verifiers: dict[str | None, MathVerifier] = {}
_pid: int | None = None


def preset_for(data_source: str | None) -> str | None:
    """The extraction preset a ``data_source`` names: ``gsm8k`` for GSM8K's sources
    (``openai/gsm8k``: answers end in ``#### 18``, as verl's own GSM8K scorer reads them),
    none (the last ``\\boxed{}``, MATH's convention) for every other source."""
    return "gsm8k" if data_source and "gsm8k" in data_source.lower() else None


def _shared(preset: str | None = None) -> MathVerifier:
    """This process's verifier for ``preset`` (a forked child makes its own: a pool does not
    survive fork)."""
    global _pid
    with _lock:
        if _pid != os.getpid():
            _verifiers.clear()
            _pid = os.getpid()
        if preset not in _verifiers:
            verifier = MathVerifier(
                timeout=float(os.environ.get("FORKGYM_VERL_TIMEOUT", "5")),
                workers=int(os.environ.get("FORKGYM_VERL_WORKERS", "1")),
                preset=preset,
            )
            atexit.register(verifier.close)
            _verifiers[preset] = verifier
        return _verifiers[preset]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """``{"score", "acc", "invalid", "infra_failure"}`` for one sample (see the module doc).

    ``ground_truth`` is a string or a number (``2``), or several accepted answers as a list,
    tuple or NumPy array (what a parquet list column becomes): the response is correct if it
    matches any one of them. ``data_source`` chooses where the answer is read
    (:func:`preset_for`: GSM8K's ``####``, else the last box). ``extra_info`` and any further
    keyword verl passes (``reward_kwargs`` from its config, ``reward_router_address`` and
    ``reward_model_tokenizer`` from its reward loop) are not needed to grade a math answer and
    are ignored."""
    references = _references(ground_truth)
    verifier = _shared(preset_for(data_source))
    outcomes = verifier.verify_many([(ref, solution_str) for ref in references])
    status = _best(outcome.status for outcome in outcomes)
    outcome = next(o for o in outcomes if o.status is status)
    return {
        "score": 0.0 if outcome.reward is None else float(outcome.reward),
        "acc": float(status is Status.CORRECT),
        "invalid": float(status is Status.INVALID),
        "infra_failure": float(status.is_infrastructure),
    }


def compute_score_float(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """:func:`compute_score`'s ``score`` alone, for the reward managers that take a number
    only: verl's process-pool ``prime`` manager reads a dict's ``[0]`` and, failing, scores
    the whole batch 0.0."""
    return compute_score(data_source, solution_str, ground_truth, extra_info)["score"]


# which status stands for several references: one match is enough; no final answer (or a
# cut-off one) is the response's, whatever the reference; a reference that could not be
# checked (timeout, error) leaves the answer unknown rather than wrong
_ORDER = (
    Status.CORRECT,
    Status.INVALID,
    Status.TRUNCATED,
    Status.TIMEOUT,
    Status.ERROR,
    Status.INCORRECT,
)


def _best(statuses: Iterable[Status]) -> Status:
    return min(statuses, key=_ORDER.index)


def _references(ground_truth: Any) -> list[str]:
    """The accepted answers as strings: one for a string or a number, each entry of a list,
    tuple or array (a NumPy value's ``tolist()`` gives Python ones)."""
    if hasattr(ground_truth, "tolist") and not isinstance(ground_truth, str):
        ground_truth = ground_truth.tolist()
    if isinstance(ground_truth, list | tuple):
        values = [item for item in ground_truth if item is not None]
    else:
        values = [] if ground_truth is None else [ground_truth]
    references = [str(value) for value in values if str(value).strip()]
    if not references:
        raise ValueError(f"compute_score needs a reference answer; ground_truth is {ground_truth!r}")  # fmt: skip
    return references
