"""Several generation engines behind one :class:`~forkgym.agents.generation.backends.policy.Policy`.

``TrainConfig.generation_engines = N`` builds N engines of the configured backend, each with
weights of its own, and the trainer talks to this pool as to one policy:

* ``generate`` gives every unseeded sampled request a seed first (from the pool's own
  stream, in request order), then cuts the request list into N contiguous slices of equal
  size and runs them on the engines at once, one thread each. Rollouts list their requests
  group by group, so a slice holds whole groups but for the ones cut at its edges. Every
  request carries its seed, so where a request lands changes nothing but float rounding under
  a different batch's padding: the pool samples what one engine would.
* ``sync_weights`` pushes the trainer's weights to every engine; the pool's version is the
  engines' common version (they move together).
* ``logprobs`` scores on the first engine (the trainer uses its own model for the loss).

A backend generating with the trainer's own module (``transformers`` with ``share_model``)
cannot be pooled: N engines on one module would be one engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import torch

from ..seeds import generator
from .backends.policy import Generation, GenerationRequest, Policy, request_seeds

__all__ = ["EnginePool", "split_evenly"]


def split_evenly(n: int, parts: int) -> list[range]:
    """``range(n)`` cut into ``parts`` contiguous slices whose sizes differ by at most one
    (the first ``n % parts`` one longer); empty slices when ``n < parts``."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (i < extra)
        out.append(range(start, start + size))
        start += size
    return out


class EnginePool(Policy):
    """N policies generating in parallel, seen as one."""

    def __init__(self, engines: Sequence[Policy], *, seed: int = 0) -> None:
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        self.engines = list(engines)
        self._seed_stream = generator(seed)
        self._threads = ThreadPoolExecutor(len(self.engines), thread_name_prefix="engine")

    @classmethod
    def build(cls, make: Callable[[int], Policy], count: int, *, seed: int) -> EnginePool:
        """``count`` engines ``make(i)``, refused after the first when that kind cannot
        generate beside another in one process (it says so with ``concurrent = False``)."""
        first = make(0)
        if not first.concurrent:
            first.close()
            raise ValueError(
                f"generation_engines={count} needs engines that generate at the same time, and "
                f"{type(first).__name__} here cannot (see its `concurrent`); use generation_engines=1"
            )
        return cls([first, *(make(i) for i in range(1, count))], seed=seed)

    @property
    def weight_version(self) -> int:
        return min(engine.weight_version for engine in self.engines)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        requests = list(requests)
        seeds = request_seeds(requests, self._seed_stream)
        seeded = [
            replace(r, params=replace(r.params, seed=s)) if s is not None else r
            for r, s in zip(requests, seeds, strict=True)
        ]
        slices = [s for s in split_evenly(len(seeded), len(self.engines)) if len(s)]
        futures = [
            self._threads.submit(engine.generate, [seeded[i] for i in part])
            for engine, part in zip(self.engines, slices, strict=False)
        ]
        out: list[Generation] = []
        for future in futures:  # in slice order: results come back in request order
            out.extend(future.result())
        return out

    def logprobs(
        self, sequences: Sequence[Sequence[int]], starts: Sequence[int], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        return self.engines[0].logprobs(sequences, starts, temperature)

    def sync_weights(
        self, weights: torch.nn.Module | Mapping[str, Any] | None = None, version: int | None = None
    ) -> dict[str, float]:
        """Every engine takes the weights; ``bytes`` and the other costs are summed."""
        if isinstance(weights, torch.nn.Module):
            weights = weights.state_dict()  # read once, not once per engine
        totals: dict[str, float] = {}
        for engine in self.engines:
            for key, value in (engine.sync_weights(weights, version=version) or {}).items():
                totals[key] = totals.get(key, 0.0) + float(value)
        totals["engines"] = float(len(self.engines))
        return totals

    def offload(self) -> None:
        for engine in self.engines:
            engine.offload()

    def close(self) -> None:
        """Stop the threads, then shut every engine down."""
        self._threads.shutdown(wait=True)
        for engine in self.engines:
            engine.close()
