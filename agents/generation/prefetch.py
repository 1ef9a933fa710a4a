"""Asynchronous generation: later steps' groups are generated while the learner updates.

With ``TrainConfig.max_staleness = m >= 1`` a background thread generates the batches of
steps ahead of the learner, on the generation engine's own copy of the weights. The schedule
is fixed, not a race:

* the batch of step ``s`` is generated once the learner has finished (and synced) step
  ``s - m - 1``, so with the weights of version ``V[s - m]`` (``V[t]``: the version at the
  start of step ``t``);
* the weight sync after step ``t`` waits until the batch of step ``t + m`` is generated,
  since that batch must see the weights from before the sync.

So the batch trained at step ``s`` is ``V[s] - V[s - m] <= m`` versions old, step ``t + 1``'s
generation overlaps step ``t``'s update (``m = 1``: one-step off-policy), and which weights
produced which batch does not depend on timing: an asynchronous run is as reproducible as a
synchronous one, and a resumed run equals the uninterrupted one when the checkpoint keeps
the batches generated ahead of it (:meth:`Prefetcher.pending`). ``m = 0`` would be the
synchronous loop, for which generation starts no thread (agents/generation/stage.py).

The engine is used by one caller at a time: the producer holds :attr:`Prefetcher.engine`
while it generates a batch, generation's other side while it pushes weights and while it
evaluates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..batch import RolloutBatch
from .ledger import GenerationLedger

__all__ = ["Prefetcher"]

Collected = tuple[RolloutBatch, GenerationLedger]
T = TypeVar("T")


class Prefetcher:
    """Generates ``collect(s)`` for steps ``first_step, first_step + 1, ...`` (below
    ``end_step``) on a thread, at most ``max_staleness`` steps ahead of the learner.

    ``ready`` holds batches generated before a resume (the steps right after ``first_step``),
    which are handed out before the thread generates anything new.
    """

    def __init__(
        self,
        collect: Callable[[int], Collected],
        *,
        max_staleness: int,
        first_step: int,
        end_step: int,
        ready: dict[int, Collected] | None = None,
    ) -> None:
        if max_staleness < 1:
            raise ValueError("max_staleness must be >= 1 (0 is the synchronous loop)")
        self.collect = collect
        self.max_staleness = max_staleness
        self.end_step = end_step
        self.engine = threading.RLock()
        self._cond = threading.Condition()
        ready = dict(ready or {})
        expected = list(range(first_step, first_step + len(ready)))
        if sorted(ready) != expected:
            raise ValueError(f"batches generated ahead must be those of steps {expected}")
        self._ready = ready
        self._next = first_step + len(ready)  # the next step whose batch to generate
        self._done = first_step  # steps whose update and sync are finished
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)
        self._thread.start()

    # -- the producer ---------------------------------------------------------------------------

    def _may_generate(self) -> bool:
        return self._next < self.end_step and self._next - self.max_staleness <= self._done

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._closed or self._may_generate())
                    if self._closed:
                        return
                    step = self._next
                with self.engine:
                    collected = self.collect(step)
                with self._cond:
                    self._ready[step] = collected
                    self._next = step + 1
                    self._cond.notify_all()
        except BaseException as exc:  # handed to the trainer, which raises it
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _wait(self, predicate: Callable[[], bool]) -> float:
        """Wait for ``predicate`` (or the producer's failure); the seconds waited."""
        t0 = time.perf_counter()
        with self._cond:
            self._cond.wait_for(lambda: self._error is not None or predicate())
            if self._error is not None:
                raise RuntimeError("asynchronous generation failed") from self._error
        return time.perf_counter() - t0

    # -- the learner's side ---------------------------------------------------------------------

    def get(self, step: int) -> tuple[RolloutBatch, GenerationLedger, float]:
        """Step ``step``'s batch and ledger, and how long the learner waited for them."""
        waited = self._wait(lambda: step in self._ready)
        with self._cond:
            batch, ledger = self._ready.pop(step)
        return batch, ledger, waited

    def finished(self, step: int, push: Callable[[], T]) -> tuple[T, float]:
        """Step ``step``'s update is done: once the batch that must see the old weights (step
        ``step + max_staleness``) is generated, run ``push`` (the weight sync) with the engine
        to itself, then let the producer go on. Returns ``push()`` and the seconds waited."""
        last_old = min(step + self.max_staleness, self.end_step - 1)
        waited = self._wait(lambda: self._next > last_old)
        with self.engine:
            out = push()
        with self._cond:
            self._done = step + 1
            self._cond.notify_all()
        return out, waited

    def pending(self) -> dict[int, Collected]:
        """The batches generated ahead that a checkpoint at this point must keep: those of the
        ``max_staleness`` steps after the last finished one (generated with weights older than
        the checkpoint's). The batch the producer may be generating now, with the
        checkpoint's weights, is left out: a resumed run generates it again, identically."""
        with self._cond:
            keep = range(self._done, self._done + self.max_staleness)
            return {s: self._ready[s] for s in keep if s in self._ready}

    def close(self) -> None:
        """Stop generating (a batch in progress is finished first) and join the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
