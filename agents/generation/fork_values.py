"""Monte Carlo values of states inside sampled episodes, from exact forks of the environment.

VinePPO's value estimate (Kazemnejad et al., "VinePPO: Refining Credit Assignment in RL
Training of LLMs", arXiv 2410.01679): the value of a state is the mean reward of ``rollouts``
continuations of the policy from it, ``V(s) = (1/M) sum_m R(tau_m)`` with ``tau_m ~ pi( | s)``.
Here the state is restored exactly rather than re-simulated from text: the env is replayed to
the start of the state's turn and forked (tool results and random state included,
:meth:`~forkgym.agents.generation.rollout.Rollouts.starts_within`), and the turn's tokens so far are kept.

Which states: the start of every turn (the first is the prompt, shared by the group's
branches), and inside a turn every ``chunk`` generated tokens and/or after every generated
token whose text holds a newline (``lines``: reasoning-step boundaries). States with the same
token prefix within a group are one state (estimated once). All continuations of a batch run
together through the run's engines (:meth:`~forkgym.agents.generation.rollout.Rollouts.finish`), keyed
by the run seed, the step, the task and the state's tokens, so a value is a pure function of
the run (resumable, and the same on any data-parallel rank). Every continuation token is
generated and counted: :class:`~forkgym.agents.batch.RolloutCost` ``value_tokens``, part of
``tokens_generated`` and of every budget. Continuations that end in an infrastructure failure
enter no mean; a state none of whose continuations is valid gets no value (its segment joins
the one before).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..batch import RolloutBatch, RolloutCost
from ..episode import Episode
from ..seeds import state_key
from .rollout import Rollouts, Start

__all__ = ["ForkValues", "state_positions"]


def state_positions(
    action_mask: Sequence[int],
    chunk: int | None = None,
    line_ends: Sequence[bool] | None = None,
) -> list[int]:
    """The token indices before which a state is valued: the first action token of every
    turn; inside a turn, every ``chunk``-th action token, and the one after each action
    token ``line_ends`` marks (``line_ends[i]``: token ``i``'s text holds a newline)."""
    out: list[int] = []
    run = 0
    for i, action in enumerate(action_mask):
        if not action:
            run = 0
            continue
        after_line = run > 0 and line_ends is not None and line_ends[i - 1]
        if run == 0 or (chunk is not None and run % chunk == 0) or after_line:
            out.append(i)
        run += 1
    return out


@dataclass(frozen=True)
class ForkValues:
    """Estimates ``V`` at the chosen states of every valid sampled episode of a batch and
    stores them on the episodes (``value_positions``, ``values``)."""

    rollouts: int = 4  # continuations per state
    chunk: int | None = None  # a state every `chunk` tokens inside a turn (None: turns only)
    lines: bool = False  # a state after every generated newline

    def problems(self) -> list[str]:
        out = []
        if self.rollouts < 1:
            out.append(f"rollouts must be >= 1, got {self.rollouts}")
        if self.chunk is not None and self.chunk < 1:
            out.append(f"chunk must be >= 1 (or null: turn starts only), got {self.chunk}")
        return out

    def positions(self, episode: Episode, tokenizer: Any) -> list[int]:
        """Where ``episode``'s states are (token indices of action tokens)."""
        line_ends = None
        if self.lines:
            line_ends = [
                bool(a) and "\n" in tokenizer.decode([t])
                for t, a in zip(episode.token_ids, episode.action_mask, strict=True)
            ]
        return state_positions(episode.action_mask, self.chunk, line_ends)

    def __call__(self, rollouts: Rollouts, batch: RolloutBatch, step: int) -> RolloutCost:
        """Value the states of ``batch``'s valid sampled episodes (in place); what it cost."""
        starts: list[Start] = []
        owners: list[list[tuple[Episode, int]]] = []  # per state: the episodes it belongs to
        for group in batch.groups:
            seen: dict[tuple[int, ...], int] = {}  # a state's prefix -> its index in owners
            for episode in group.sampled:
                episode.value_positions, episode.values = [], []
                if not episode.valid:
                    continue
                fresh = []
                for pos in self.positions(episode, rollouts.tokenizer):
                    prefix = tuple(episode.token_ids[:pos])
                    if prefix in seen:
                        owners[seen[prefix]].append((episode, pos))
                    else:
                        seen[prefix] = len(owners)
                        owners.append([(episode, pos)])
                        fresh.append(pos)
                if fresh:
                    key = _state_key(group.task_seed, episode)
                    starts += rollouts.starts_within(
                        episode, group.task_seed, fresh, self.rollouts, key=key
                    )
        cost = RolloutCost()
        ends = rollouts.finish(starts, "vine", step, cost=cost) if starts else []
        for state, owned in enumerate(owners):
            runs = ends[state * self.rollouts : (state + 1) * self.rollouts]
            rewards = [ep.outcome.reward for ep in runs if ep.valid and ep.outcome is not None]
            if not rewards:
                continue
            value = sum(float(r) for r in rewards) / len(rewards)
            for episode, pos in owned:
                episode.value_positions.append(pos)
                episode.values.append(value)
        for group in batch.groups:  # in token order (a shared state may be found late)
            for episode in group.sampled:
                pairs = sorted(zip(episode.value_positions, episode.values, strict=True))
                episode.value_positions = [p for p, _ in pairs]
                episode.values = [v for _, v in pairs]
        cost.value_tokens = cost.tokens_generated
        cost.value_continuations = len(ends)
        return cost


def _state_key(task_seed: int, episode: Episode) -> Any:
    """Keys a state's continuations by its task and its generated tokens (not by where the
    episode sits in the batch), so the same state draws the same continuations anywhere."""

    def key(pos: int) -> int:
        return state_key(task_seed, episode.token_ids[episode.prompt_len : pos])

    return key
