"""Wall-clock time of a training step's stages, each block named for its stage.

``with stages("gen"): ...`` adds the block's seconds to ``time/gen``; a stage entered several
times (a micro-batch's forward, once per micro-batch) adds up. The training step's stages are
named after its data path, as verl's timing blocks are: ``gen`` (the step's batch), ``drift``
(the trainer's log-probs of the engine's samples), ``reward`` (shaping), ``adv`` (the
algorithm), ``update`` (the policy's and the algorithm's own), ``sync`` (the weights to the
engine); the learner's update splits into ``forward_and_loss``, ``backward`` and
``optimizer``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Stages"]


class Stages:
    """Seconds per named stage, since this object was made."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - t0

    def metrics(self, *, total: str | None = None) -> dict[str, float]:
        """``time/<stage>`` for every stage entered; with ``total``, also ``time/<total>``:
        the seconds since this object was made (``time/step``)."""
        out = {f"time/{stage}": s for stage, s in self.seconds.items()}
        if total is not None:
            out[f"time/{total}"] = time.perf_counter() - self.started
        return out
