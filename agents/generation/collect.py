"""Collecting a training step's groups: task seeds, rollouts and dynamic sampling.

A step's tasks are a pure function of the run seed and the step (``task_seeds``), so a resumed
run draws exactly the tasks the uninterrupted one drew. With dynamic sampling (DAPO), groups
whose valid rewards are all equal carry no signal for any group estimator and are dropped;
fresh tasks are drawn (from a stream of their own per round) until ``prompts_per_step``
groups are kept or the rounds run out. Every round goes into the :class:`GenerationLedger`,
so the tokens generated are reported beside the tokens kept. An algorithm that values states
by Monte Carlo continuations (``algorithm: vine``) has them run on the kept groups here, as
part of generation: their tokens are in the step's cost and the ledger.
"""

from __future__ import annotations

import torch

from ..batch import RolloutBatch, RolloutCost
from ..distributed import World
from ..seeds import task_seeds
from .dapo import filter_groups
from .fork_values import ForkValues
from .ledger import GenerationLedger
from .rollout import Rollouts

__all__ = ["Collector", "rollout_metrics"]


class Collector:
    """The groups of one training step, with the ledger of what generating them cost."""

    def __init__(
        self,
        rollouts: Rollouts,
        *,
        seed: int,
        prompts_per_step: int,
        dynamic_sampling: bool = False,
        max_resample_rounds: int = 3,
        world: World | None = None,
        values: ForkValues | None = None,
    ) -> None:
        """``values``: estimate the states' values of the kept groups' episodes."""
        self.rollouts = rollouts
        self.values = values
        self.world = world or World()
        self.seed = seed
        self.prompts_per_step = prompts_per_step
        self.dynamic_sampling = dynamic_sampling
        self.max_resample_rounds = max_resample_rounds

    def _round(self, stream: str, step: int) -> RolloutBatch:
        seeds = task_seeds(self.seed, stream, step, self.prompts_per_step)
        # a data-parallel rank's share, keyed by the tasks' places in the whole step: it
        # samples with the seeds one process would use for those tasks
        mine = self.world.share(list(range(len(seeds))))
        return self.rollouts.collect([seeds[i] for i in mine], stream, step, keys=mine)

    def collect(self, step: int) -> tuple[RolloutBatch, GenerationLedger]:
        """This step's groups; with dynamic sampling, rounds until enough have a signal."""
        batch, ledger = self._groups(step)
        if self.values is not None and batch.prompts:
            spent = self.values(self.rollouts, batch, step)
            ledger.record_values(spent.value_continuations, spent.value_tokens)
            batch.cost = (batch.cost or RolloutCost()) + spent
            batch = batch.with_state_values()
        return batch, ledger

    def _groups(self, step: int) -> tuple[RolloutBatch, GenerationLedger]:
        ledger = GenerationLedger()
        batch = self._round("train", step)
        if not self.dynamic_sampling:
            ledger.record(
                batch.lengths,
                torch.ones(batch.prompts, dtype=torch.bool),
                valid=batch.valid,
                greedy_lengths=batch.greedy_lengths,
            )
            return batch, ledger
        cost = batch.cost
        kept: list[RolloutBatch] = []
        room = self.prompts_per_step
        for round_ in range(self.max_resample_rounds + 1):
            if round_ > 0:
                batch = self._round(f"train-resample-{round_}", step)
                cost = cost + batch.cost
            keep = filter_groups(
                batch.rewards,
                batch.valid,
                batch.lengths,
                ledger,
                greedy_lengths=batch.greedy_lengths,
                room=room,
            )
            kept.append(batch.select(keep))
            room -= kept[-1].prompts
            if not room:
                break
        return RolloutBatch.cat(kept, cost), ledger


def rollout_metrics(batch: RolloutBatch, ledger: GenerationLedger) -> dict[str, float | int]:
    """Statuses and counts of the kept groups; generation cost over every round."""
    cost = batch.cost
    assert cost is not None
    out: dict[str, float | int] = {f"status/{s.value}": n for s, n in batch.status_counts().items()}
    diverged = batch.greedy_diverged[batch.greedy_diverged >= 0]
    out.update(
        {
            "episodes": batch.prompts * batch.k,
            "infra_failures": int((~batch.valid).sum()),
            "truncated_by_tokens": int(batch.truncated.sum()),
            "tokens_generated": cost.tokens_generated,
            "tokens_generated_greedy": cost.greedy_tokens,
            "turns": cost.turns,
            "time/generate": cost.generate_s,
            "time/env_and_verify": cost.env_s,
            "group_span_s_mean": float(batch.span_s.mean()) if batch.prompts else 0.0,
            "barrier_idle_s": float(batch.barrier_idle_s.sum()),
        }
    )
    if cost.value_continuations:  # Monte Carlo continuations (algorithm: vine)
        out["tokens_generated_values"] = cost.value_tokens
    if diverged.numel():
        out["greedy_diverged_frac"] = float(diverged.double().mean())
    out.update(ledger.report("gen/"))
    return out
