"""Answer verification with honest statuses.

``from forkgym.verifiers import Status, Outcome, MathVerifier`` is the public surface; the
same :class:`Outcome` vocabulary is used by environments, the store, the HTTP service and the
trainer. Importing this package is cheap: math-verify is loaded only where grading happens.
"""

if __name__ != "forkgym.verifiers":  # imported as a top-level `verifiers` from a source checkout
    raise ImportError(
        "this folder is the sub-package forkgym.verifiers; install forkgym "
        "(`pip install -e .`) and import forkgym.verifiers instead of `verifiers`"
    )


from .extract import EXTRACTORS, AnswerExtractor, register_extractor
from .math_verifier import MathVerifier, reference_answer
from .outcome import (
    DEFAULT_REWARDS,
    INFRASTRUCTURE_STATUSES,
    POLICY_STATUSES,
    Outcome,
    RewardMap,
    Status,
)
from .presets import PRESETS

__all__ = [
    "DEFAULT_REWARDS",
    "EXTRACTORS",
    "INFRASTRUCTURE_STATUSES",
    "POLICY_STATUSES",
    "PRESETS",
    "AnswerExtractor",
    "MathVerifier",
    "Outcome",
    "RewardMap",
    "Status",
    "reference_answer",
    "register_extractor",
]
